//! Ceilings measured in the same run as the rows they bound: h2load or wrk for request
//! rate, the C/latency bound for latency-bound workloads (docs/lab/README.md, section 1).
//!
//! Two kinds, both rows of the workload they bound:
//!
//! - request rate ([`RateCeiling`]): a load generator written for nothing but rate, on
//!   the same kind of server and the same objects: `h2load` (nghttp2, h2c with prior
//!   knowledge, `-c` connections x `-m` streams, as many GETs as the workload's) and
//!   `wrk` (HTTP/1.1, `-c` connections, one request at a time on each, for `-d` seconds).
//!   Neither signs requests, so they run against a twin server with `--anonymous`; the
//!   emulation profile is the same. h2load's URIs are one key per prefix of the workload,
//!   taken round-robin, so the `s3` profile's per-prefix request limit is not what they
//!   measure (wrk's 32 connections stay far below it on one key). A tool that is not
//!   installed gives an "absent" row (scripts/bench-setup.sh installs them as root).
//! - latency bound ([`LatencyBoundRun`]): with `C` requests in flight and a first-byte
//!   latency `L`, no client can finish more than C / L requests per second (Little's
//!   law, when each request holds its slot for at least L). `L` is the median first byte
//!   of `probes` sequential GETs of one of the workload's objects, measured in the same
//!   run on the same server, so the bound moves with the profile and the machine.
//!
//! Output parsing is the tools' own summary lines (`finished in ..., N req/s`,
//! `requests: ...`, wrk's `Requests/sec:` and `--latency` distribution); the raw
//! command is kept in the record's note so a figure can be reproduced by hand.

use crate::measure::{get_drain, set_percentiles, Errors, Meter};
use crate::record::RunRecord;
use anyhow::Result;
use ferry_store::{GetParams, ObjectRef, S3Client};
use serde_json::{json, Map, Value};
use std::process::{Command, Stdio};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateTool {
    /// nghttp2's h2load: h2c (prior knowledge).
    H2load,
    /// wrk: HTTP/1.1 keep-alive, no pipelining.
    Wrk,
}

impl RateTool {
    pub fn binary(self) -> &'static str {
        match self {
            RateTool::H2load => "h2load",
            RateTool::Wrk => "wrk",
        }
    }

    pub fn package(self) -> &'static str {
        match self {
            RateTool::H2load => "nghttp2-client",
            RateTool::Wrk => "wrk",
        }
    }
}

/// One run of a rate tool against a server: `paths` ("/bucket/key") taken round-robin
/// (wrk takes the first only).
#[derive(Clone, Debug, PartialEq)]
pub struct RateCeiling {
    pub tool: RateTool,
    pub paths: Vec<String>,
    pub connections: usize,
    /// h2load `-m`: streams in flight per connection.
    pub streams: usize,
    /// h2load `-n`: requests in all.
    pub requests: usize,
    /// wrk `-d`.
    pub seconds: u32,
    pub object_size: u64,
}

impl RateCeiling {
    /// The command line for a server at `url` (`http://host:port`).
    pub fn command(&self, url: &str) -> Vec<String> {
        let url = url.trim_end_matches('/');
        let mut c: Vec<String> = vec![self.tool.binary().into()];
        match self.tool {
            RateTool::H2load => {
                for (flag, v) in [("-n", self.requests), ("-c", self.connections), ("-m", self.streams), ("-t", 1)] {
                    c.push(flag.into());
                    c.push(v.to_string());
                }
                c.extend(self.paths.iter().map(|p| format!("{url}{p}")));
            }
            RateTool::Wrk => {
                c.extend([
                    "-t".into(),
                    "1".into(),
                    "-c".into(),
                    self.connections.to_string(),
                    "-d".into(),
                    format!("{}s", self.seconds),
                    "--latency".into(),
                ]);
                c.push(format!("{url}{}", self.paths.first().map(String::as_str).unwrap_or("/")));
            }
        }
        c
    }

    /// Runs the tool (bounded by `timeout`) and fills `rec`; absent when not installed.
    pub fn run(&self, url: &str, timeout: Duration, rec: &mut RunRecord) -> Result<()> {
        let cmd = self.command(url);
        rec.mode = self.tool.binary().into();
        rec.note = Some(format!(
            "ceiling: `{}`{}",
            cmd.join(" "),
            rec.note.as_deref().map(|n| format!("; {n}")).unwrap_or_default()
        ));
        if which(self.tool.binary()).is_none() {
            rec.status = "absent".into();
            rec.note = Some(format!(
                "{}: absent (scripts/bench-setup.sh installs Debian's {} as root)",
                self.tool.binary(),
                self.tool.package()
            ));
            return Ok(());
        }
        // `timeout` bounds the tool; -k kills it if it ignores SIGTERM.
        let secs = timeout.as_secs().max(1).to_string();
        let out = Command::new("timeout").args(["-k", "5", &secs]).args(&cmd).stdin(Stdio::null()).output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let parsed = match self.tool {
            RateTool::H2load => parse_h2load(&text),
            RateTool::Wrk => parse_wrk(&text),
        };
        let Some(p) = parsed else {
            rec.status = "failed".into();
            rec.error_samples.push(format!(
                "{} exited {:?} without its summary: {}",
                self.tool.binary(),
                out.status.code(),
                tail(&String::from_utf8_lossy(&out.stderr), &text)
            ));
            return Ok(());
        };
        rec.set("objects_per_s", p.requests_per_s);
        rec.set("bytes_per_s", p.requests_per_s * self.object_size as f64);
        rec.set("objects", p.succeeded);
        rec.set("errors", p.failed);
        rec.set("connections_opened", self.connections as f64);
        if let Some(v) = p.latency_p50_ms {
            rec.set("latency_p50_ms", v);
        }
        if let Some(v) = p.latency_p90_ms {
            rec.set("latency_p90_ms", v);
        }
        if let Some(v) = p.latency_p99_ms {
            rec.set("latency_p99_ms", v);
        }
        if let Some(v) = p.latency_mean_ms {
            rec.set("latency_mean_ms", v);
        }
        rec.status = if p.failed > 0.0 { "errors".into() } else { "ok".into() };
        Ok(())
    }
}

fn tail(err: &str, out: &str) -> String {
    let t = format!("{} {}", err.trim(), out.trim());
    t[t.len().saturating_sub(400)..].to_owned()
}

fn which(bin: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(bin)).find(|f| f.is_file()))
}

/// What a rate tool's summary says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateSummary {
    pub requests_per_s: f64,
    pub succeeded: f64,
    pub failed: f64,
    pub latency_p50_ms: Option<f64>,
    pub latency_p90_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub latency_mean_ms: Option<f64>,
}

/// A duration as the tools print it ("31.52ms", "850.00us", "1.02s", "2m") in ms.
fn duration_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    for (unit, scale) in [("us", 1e-3), ("ms", 1.0), ("s", 1e3), ("m", 60e3)] {
        if let Some(n) = s.strip_suffix(unit) {
            if let Ok(v) = n.parse::<f64>() {
                return Some(v * scale);
            }
        }
    }
    None
}

/// h2load's `finished in 1.23s, 812.34 req/s, 12.7MB/s`, `requests: 2000 total, 2000
/// started, 2000 done, 1990 succeeded, 10 failed, ...` and `time for request:  min  max
/// mean ...` lines.
pub fn parse_h2load(text: &str) -> Option<RateSummary> {
    let mut s = RateSummary::default();
    let mut seen = false;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("finished in ") {
            let rate = rest.split(',').nth(1)?.trim().strip_suffix(" req/s")?;
            s.requests_per_s = rate.trim().parse().ok()?;
            seen = true;
        } else if let Some(rest) = line.strip_prefix("requests:") {
            for part in rest.split(',') {
                let mut w = part.split_whitespace();
                if let (Some(n), Some(what)) = (w.next(), w.next()) {
                    match what {
                        "succeeded" => s.succeeded = n.parse().unwrap_or(0.0),
                        "failed" => s.failed = n.parse().unwrap_or(0.0),
                        _ => {}
                    }
                }
            }
        } else if let Some(rest) = line.strip_prefix("time for request:") {
            // min max mean sd +/- sd
            s.latency_mean_ms = rest.split_whitespace().nth(2).and_then(duration_ms);
        }
    }
    seen.then_some(s)
}

/// wrk's `Requests/sec: 1234.56`, `N requests in 3.00s`, `Non-2xx or 3xx responses: N`,
/// `Socket errors: connect A, read B, write C, timeout D` and its `--latency` lines.
pub fn parse_wrk(text: &str) -> Option<RateSummary> {
    let mut s = RateSummary::default();
    let mut seen = false;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            s.requests_per_s = rest.trim().parse().ok()?;
            seen = true;
        } else if line.contains(" requests in ") {
            s.succeeded = line.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0.0);
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            s.failed += rest.trim().parse::<f64>().unwrap_or(0.0);
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            s.failed += rest.split(',').filter_map(|p| p.split_whitespace().last()?.parse::<f64>().ok()).sum::<f64>();
        } else if let Some(rest) = line.strip_prefix("Latency") {
            // "Latency   31.2ms  5.1ms  80.0ms  70.00%" (the thread stats: avg first).
            if let Some(avg) = rest.split_whitespace().next().and_then(duration_ms) {
                s.latency_mean_ms = Some(avg);
            }
        } else {
            let mut w = line.split_whitespace();
            if let (Some(p), Some(v), None) = (w.next(), w.next(), w.next()) {
                let v = duration_ms(v);
                match p {
                    "50%" => s.latency_p50_ms = v,
                    "90%" => s.latency_p90_ms = v,
                    "99%" => s.latency_p99_ms = v,
                    _ => {}
                }
            }
        }
    }
    s.succeeded = (s.succeeded - s.failed).max(0.0);
    seen.then_some(s)
}

/// The C/L row: `probes` sequential GETs of `bucket/key` (`object_size` long) give the
/// median first byte L; the bound is `concurrency` / L objects per second.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyBoundRun {
    pub bucket: String,
    pub key: String,
    pub object_size: u64,
    pub probes: usize,
    pub concurrency: usize,
}

impl LatencyBoundRun {
    pub fn setup_key(&self) -> String {
        "nothing (the workload's objects)".into()
    }

    /// Nothing to prepare: the bound probes the workload's own objects.
    pub async fn setup(&self, _c: &S3Client) -> Result<()> {
        Ok(())
    }

    pub fn params(&self) -> Map<String, Value> {
        let v = json!({"bound": "concurrency / median first byte", "bound_concurrency": self.concurrency, "bound_probes": self.probes});
        v.as_object().cloned().unwrap_or_default()
    }

    pub async fn run(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        let meter = Meter::start(c);
        let obj = ObjectRef::new(self.bucket.as_str(), self.key.as_str());
        let mut firsts = Vec::with_capacity(self.probes);
        let mut errors = Errors::default();
        for _ in 0..self.probes {
            match get_drain(c, &obj, GetParams::default()).await {
                Ok((n, head)) if n == self.object_size => firsts.push(head.as_secs_f64()),
                Ok((n, _)) => errors.add(format!("GET {obj}: {n} bytes, expected {}", self.object_size)),
                Err(e) => errors.add(format!("GET {obj}: {e:#}")),
            }
        }
        meter.record(c, rec, "");
        set_percentiles(rec, "ttfb", "ms", &mut firsts, 1e3);
        if let Some(l) = rec.figure("ttfb_p50_ms").filter(|l| *l > 0.0) {
            rec.set("objects_per_s", bound(self.concurrency, l / 1e3));
            rec.set("bytes_per_s", bound(self.concurrency, l / 1e3) * self.object_size as f64);
            // A request cannot be faster than its first byte: the bound's latency is L.
            rec.set("latency_p50_ms", l);
        }
        errors.record(rec);
        Ok(())
    }
}

crate::impl_scenario!(LatencyBoundRun);

/// Requests per second that `concurrency` slots each held `latency_s` can finish.
pub fn bound(concurrency: usize, latency_s: f64) -> f64 {
    concurrency as f64 / latency_s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h2load_summary() {
        let out = "starting benchmark...\nfinished in 2.46s, 813.01 req/s, 12.72MB/s\nrequests: 2000 total, 2000 started, 2000 done, 1990 succeeded, 10 failed, 10 errored, 0 timeout\nstatus codes: 1990 2xx, 0 3xx, 10 4xx, 0 5xx\n                     min         max         mean         sd        +/- sd\ntime for request:    25.13ms    151.20ms     39.07ms     14.10ms    80.00%\n";
        let s = parse_h2load(out).unwrap();
        assert_eq!((s.requests_per_s, s.succeeded, s.failed), (813.01, 1990.0, 10.0));
        assert_eq!(s.latency_mean_ms, Some(39.07));
        assert!(parse_h2load("connect error").is_none());
    }

    #[test]
    fn wrk_summary() {
        let out = "Running 3s test @ http://127.0.0.1:1/bench/k\n  1 threads and 32 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency    36.10ms   12.00ms 150.00ms   80.00%\n    Req/Sec   880.00     50.00     1.00k    70.00%\n  Latency Distribution\n     50%   31.52ms\n     75%   40.00ms\n     90%   55.10ms\n     99%  120.00us\n  2640 requests in 3.00s, 41.5MB read\n  Non-2xx or 3xx responses: 4\nRequests/sec:    879.12\nTransfer/sec:     13.83MB\n";
        let s = parse_wrk(out).unwrap();
        assert_eq!(s.requests_per_s, 879.12);
        assert_eq!((s.succeeded, s.failed), (2636.0, 4.0));
        assert_eq!((s.latency_p50_ms, s.latency_p90_ms), (Some(31.52), Some(55.1)));
        assert!((s.latency_p99_ms.unwrap() - 0.12).abs() < 1e-9);
        assert_eq!(s.latency_mean_ms, Some(36.1));
        let errs = parse_wrk("Socket errors: connect 0, read 3, write 0, timeout 2\nRequests/sec: 10.0\n").unwrap();
        assert_eq!(errs.failed, 5.0);
    }

    #[test]
    fn commands() {
        let h = RateCeiling {
            tool: RateTool::H2load,
            paths: vec!["/b/a".into(), "/b/c".into()],
            connections: 32,
            streams: 32,
            requests: 2000,
            seconds: 3,
            object_size: 16384,
        };
        assert_eq!(
            h.command("http://127.0.0.1:9/").join(" "),
            "h2load -n 2000 -c 32 -m 32 -t 1 http://127.0.0.1:9/b/a http://127.0.0.1:9/b/c"
        );
        let w = RateCeiling { tool: RateTool::Wrk, ..h };
        assert_eq!(w.command("http://127.0.0.1:9").join(" "), "wrk -t 1 -c 32 -d 3s --latency http://127.0.0.1:9/b/a");
    }

    #[test]
    fn the_bound_is_slots_over_latency() {
        // 32 slots each held 40 ms: 800 requests per second at most.
        assert!((bound(32, 0.040) - 800.0).abs() < 1e-9);
        assert!(bound(1, 0.5) < bound(2, 0.5));
    }
}
