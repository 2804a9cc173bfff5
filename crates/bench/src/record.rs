//! The JSON line written for every run (one variant, one repeat).
//!
//! ```json
//! {"schema":1, "bench":"small-objects", "workload":"small-objects", "size":"quick",
//!  "mode":"h1-pipeline", "variant":"h1-pipeline", "repeat":2, "repeats":3,
//!  "run_id":"1718000000-4242", "time_unix":1718000012.5, "status":"ok",
//!  "git_sha":"<40 hex digits>", "git_dirty":false, "machine":{"nproc":2,"kernel":"6.1.0"},
//!  "profile":"s3", "server":{"label":"s3","args":[...],"banner":[...]},
//!  "client":{"mode":"h1-pipeline","max_connections":32,"pipeline_depth":32},
//!  "params":{...every workload parameter...}, "figures":{...every figure, numbers...},
//!  "error_samples":["..."], "note":null,
//!  "series":{"ttfb_s":[[0.1,0.021],[0.2,0.024],...]}}
//! ```
//!
//! `bench` is the command that ran (`ferry bench <bench>`); `workload` the workload the
//! record measures (bulk-get also writes `rss-check` records). `mode` is the client's
//! transport mode ("iperf3" for the ceiling; in cli-transfer the tool, or "disk-ceiling"
//! / "network-ceiling", whose `client.ceiling` says "disk" / "network"). `repeat` counts
//! from 1. Figures are all numbers; a figure that does not apply is absent, never null.
//! Unknown keys may be added; keys are never renamed without bumping `schema`.
//!
//! `series` (optional, absent when a run has none) holds whole curves, each a name and a
//! list of `[x, y]` number pairs in ascending x:
//!
//! | workload | series | x | y | which curve (record fields) |
//! |---|---|---|---|---|
//! | ttfb-throughput | `ttfb_s` | percentile 0-100 | first-byte time, s | `profile` |
//! | ttfb-throughput | `throughput_Bps` | percentile 0-100 | bytes/s of one request | `profile`, `params.op` ("get"/"put"), `params.object_size` (bytes) |
//! | mixed-hol | `small_latency_s` | latency of a small GET, s | cumulative fraction 0-1 | `mode`/`variant` (the client), `params.phase` ("loaded"/"unloaded") |
//!
//! A percentile curve has one point per sample (nearest rank: x = 100 * i / n for the
//! i-th smallest of n); a CDF has one point per sample (y = i / n).

use crate::sys::Machine;
use serde_json::{json, Map, Value};

pub const SCHEMA_VERSION: u64 = 1;

/// The client's CPU-seconds per 1,000 requests ([`RunRecord::derive_cpu_rates`]).
pub const CPU_PER_1K_REQUESTS: &str = "client_cpu_s_per_1000_requests";
/// The server's CPU-seconds per 1,000 requests, where the row read the server's CPU
/// (server_cpu.rs), counted as the client's are.
pub const SERVER_CPU_PER_1K_REQUESTS: &str = "server_cpu_s_per_1000_requests";
/// The server's CPU-seconds per GiB moved, alike.
pub const SERVER_CPU_PER_GIB: &str = "server_cpu_s_per_gib";
/// The client's CPU-seconds per GiB moved ([`RunRecord::derive_cpu_rates`]).
pub const CPU_PER_GIB: &str = "client_cpu_s_per_gib";

/// The keys every record carries, with the JSON type of each.
pub const REQUIRED_KEYS: &[(&str, &str)] = &[
    ("schema", "number"),
    ("bench", "string"),
    ("workload", "string"),
    ("size", "string"),
    ("mode", "string"),
    ("variant", "string"),
    ("repeat", "number"),
    ("repeats", "number"),
    ("run_id", "string"),
    ("time_unix", "number"),
    ("status", "string"),
    ("git_sha", "string|null"),
    ("git_dirty", "bool|null"),
    ("machine", "object"),
    ("profile", "string|null"),
    ("server", "object|null"),
    ("client", "object|null"),
    ("params", "object"),
    ("figures", "object"),
    ("error_samples", "array"),
    ("note", "string|null"),
];

/// What stays the same for every record of one invocation.
#[derive(Clone, Debug)]
pub struct RunContext {
    pub bench: String,
    pub run_id: String,
    pub git_sha: Option<String>,
    pub git_dirty: Option<bool>,
    pub machine: Machine,
}

impl RunContext {
    pub fn detect(bench: &str) -> RunContext {
        let (git_sha, git_dirty) = crate::sys::git_revision();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        RunContext {
            bench: bench.to_owned(),
            run_id: format!("{}-{}", now.as_secs(), std::process::id()),
            git_sha,
            git_dirty,
            machine: Machine::detect(),
        }
    }
}

/// The per-run part of a record.
#[derive(Clone, Debug, Default)]
pub struct RunRecord {
    pub workload: String,
    pub size: String,
    pub mode: String,
    pub variant: String,
    pub repeat: usize,
    pub repeats: usize,
    /// "ok", "errors" (some requests failed), "timeout", "absent" (a tool not installed),
    /// "failed" (the run could not start).
    pub status: String,
    pub profile: Option<String>,
    pub server: Option<Value>,
    pub client: Option<Value>,
    pub params: Map<String, Value>,
    pub figures: Map<String, Value>,
    pub error_samples: Vec<String>,
    pub note: Option<String>,
    /// Curves (see the module doc); written only when not empty.
    pub series: std::collections::BTreeMap<String, Vec<[f64; 2]>>,
}

impl RunRecord {
    /// A figure as a number, if present.
    pub fn figure(&self, name: &str) -> Option<f64> {
        self.figures.get(name).and_then(Value::as_f64)
    }

    pub fn set(&mut self, name: &str, value: impl Into<f64>) {
        let v: f64 = value.into();
        if v.is_finite() {
            self.figures.insert(name.to_owned(), json!(v));
        }
    }

    /// The client's CPU per 1,000 requests and per GiB, from `client_cpu_s`, for every
    /// row alike, so that tables compare CPU cost where wall time is noisy (two shared
    /// cores). Requests are the count the run already has, in this order: the transport's
    /// or the server's (`requests_sent`: ferry's rows, peers against ferry serve), LIST
    /// calls (`list_calls`), else one per object (`objects`: a peer against an external
    /// server, a CLI copy). Bytes are `bytes`. A rate the run set itself is kept; a run with
    /// no CPU figure, or no requests or bytes, gets none.
    pub fn derive_cpu_rates(&mut self) {
        let requests =
            ["requests_sent", "list_calls", "objects"].iter().find_map(|f| self.figure(f).filter(|n| *n > 0.0));
        // The server's alike, where the row read it (server_cpu.rs).
        if let Some(server) = self.figure("server_cpu_s") {
            if let Some(n) = requests.filter(|_| self.figure(SERVER_CPU_PER_1K_REQUESTS).is_none()) {
                self.set(SERVER_CPU_PER_1K_REQUESTS, server * 1000.0 / n);
            }
            if let Some(b) = self.figure("bytes").filter(|b| *b > 0.0 && self.figure(SERVER_CPU_PER_GIB).is_none()) {
                self.set(SERVER_CPU_PER_GIB, server / (b / (1u64 << 30) as f64));
            }
        }
        let Some(cpu) = self.figure("client_cpu_s") else { return };
        if self.figure(CPU_PER_1K_REQUESTS).is_none() {
            if let Some(n) = requests {
                self.set(CPU_PER_1K_REQUESTS, cpu * 1000.0 / n);
            }
        }
        if self.figure(CPU_PER_GIB).is_none() {
            if let Some(b) = self.figure("bytes").filter(|b| *b > 0.0) {
                self.set(CPU_PER_GIB, cpu / (b / (1u64 << 30) as f64));
            }
        }
    }

    /// A curve, its points with a non-finite coordinate dropped.
    pub fn set_series(&mut self, name: &str, points: Vec<[f64; 2]>) {
        let pts: Vec<[f64; 2]> = points.into_iter().filter(|p| p[0].is_finite() && p[1].is_finite()).collect();
        self.series.insert(name.to_owned(), pts);
    }

    pub fn to_json(&self, ctx: &RunContext) -> Value {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let mut v = json!({
            "schema": SCHEMA_VERSION,
            "bench": ctx.bench,
            "workload": self.workload,
            "size": self.size,
            "mode": self.mode,
            "variant": self.variant,
            "repeat": self.repeat,
            "repeats": self.repeats,
            "run_id": ctx.run_id,
            "time_unix": now.as_secs_f64(),
            "status": self.status,
            "git_sha": ctx.git_sha,
            "git_dirty": ctx.git_dirty,
            "machine": {"nproc": ctx.machine.nproc, "kernel": ctx.machine.kernel},
            "profile": self.profile,
            "server": self.server,
            "client": self.client,
            "params": self.params,
            "figures": self.figures,
            "error_samples": self.error_samples,
            "note": self.note,
        });
        if !self.series.is_empty() {
            v["series"] = json!(self.series);
        }
        v
    }
}

impl RunRecord {
    /// The per-run part of a record read back from its JSON line (the inverse of
    /// [`RunRecord::to_json`]; the invocation's part is left in the value). `None` when
    /// the line is not a record of [`SCHEMA_VERSION`].
    pub fn from_json(v: &Value) -> Option<RunRecord> {
        check_schema(v).ok()?;
        if v["schema"].as_u64() != Some(SCHEMA_VERSION) {
            return None;
        }
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
        let object = |k: &str| v[k].as_object().cloned().unwrap_or_default();
        let series = v
            .get("series")
            .and_then(|s| serde_json::from_value::<std::collections::BTreeMap<String, Vec<[f64; 2]>>>(s.clone()).ok())
            .unwrap_or_default();
        Some(RunRecord {
            workload: s("workload"),
            size: s("size"),
            mode: s("mode"),
            variant: s("variant"),
            repeat: v["repeat"].as_u64()? as usize,
            repeats: v["repeats"].as_u64()? as usize,
            status: s("status"),
            profile: v["profile"].as_str().map(str::to_owned),
            server: Some(v["server"].clone()).filter(|x| !x.is_null()),
            client: Some(v["client"].clone()).filter(|x| !x.is_null()),
            params: object("params"),
            figures: object("figures"),
            error_samples: v["error_samples"]
                .as_array()
                .map(|a| a.iter().filter_map(|e| e.as_str().map(str::to_owned)).collect())
                .unwrap_or_default(),
            note: v["note"].as_str().map(str::to_owned),
            series,
        })
    }
}

/// The JSON-lines file of `--out` (or nowhere): opened for appending once per workload,
/// each record written and flushed as its run ends, so a suite cut short keeps what it
/// measured. Every runner (runner.rs, listing.rs, bulk_wan.rs, cli_transfer.rs) writes
/// through it.
pub struct JsonLines(Option<std::fs::File>);

impl JsonLines {
    pub fn open(path: Option<&std::path::Path>) -> anyhow::Result<JsonLines> {
        use anyhow::Context;
        let f = match path {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .with_context(|| format!("opening {}", p.display()))?,
            ),
            None => None,
        };
        Ok(JsonLines(f))
    }

    pub fn write(&mut self, rec: &RunRecord, ctx: &RunContext) -> anyhow::Result<()> {
        use std::io::Write;
        if let Some(f) = self.0.as_mut() {
            writeln!(f, "{}", serde_json::to_string(&rec.to_json(ctx))?)?;
            f.flush()?;
        }
        Ok(())
    }
}

/// Per-repeat `num.figure / den.figure`: each run of variant `num` paired with the run of
/// `den` in the same repeat (they ran back to back on the same server), both kept by
/// `keep`; a pair missing the figure or with a zero denominator is skipped. The report's,
/// the claims' and listing's ratios all come from here.
pub fn per_repeat_ratios(
    records: &[RunRecord],
    num: &str,
    den: &str,
    figure: &str,
    keep: impl Fn(&RunRecord) -> bool,
) -> Vec<f64> {
    let mut out = Vec::new();
    for a in records.iter().filter(|r| r.variant == num && keep(r)) {
        if let Some(b) = records.iter().find(|r| r.variant == den && r.repeat == a.repeat && keep(r)) {
            if let (Some(x), Some(y)) = (a.figure(figure), b.figure(figure)) {
                if y > 0.0 {
                    out.push(x / y);
                }
            }
        }
    }
    out
}

/// Checks a record against [`REQUIRED_KEYS`]; the first problem found.
pub fn check_schema(v: &Value) -> Result<(), String> {
    let obj = v.as_object().ok_or("a record is a JSON object")?;
    for (key, types) in REQUIRED_KEYS {
        let val = obj.get(*key).ok_or_else(|| format!("missing key {key}"))?;
        let ok = types.split('|').any(|t| match t {
            "number" => val.is_number(),
            "string" => val.is_string(),
            "bool" => val.is_boolean(),
            "object" => val.is_object(),
            "array" => val.is_array(),
            "null" => val.is_null(),
            _ => false,
        });
        if !ok {
            return Err(format!("key {key} is {val}, expected {types}"));
        }
    }
    let machine = obj["machine"].as_object().ok_or("machine")?;
    if !machine.get("nproc").is_some_and(Value::is_u64) || !machine.get("kernel").is_some_and(Value::is_string) {
        return Err("machine needs nproc (integer) and kernel (string)".into());
    }
    if let Some((k, v)) = obj["figures"].as_object().unwrap().iter().find(|(_, v)| !v.is_number()) {
        return Err(format!("figure {k} is {v}, not a number"));
    }
    if obj["repeat"].as_u64().unwrap_or(0) < 1 {
        return Err("repeat counts from 1".into());
    }
    if let Some(series) = obj.get("series") {
        let series = series.as_object().ok_or("series is an object of curves")?;
        for (name, pts) in series {
            let pts = pts.as_array().ok_or_else(|| format!("series {name} is not an array"))?;
            let mut last = f64::NEG_INFINITY;
            for p in pts {
                let pair = p.as_array().filter(|a| a.len() == 2 && a.iter().all(Value::is_number));
                let Some(pair) = pair else { return Err(format!("series {name}: point {p} is not [x, y]")) };
                let x = pair[0].as_f64().unwrap_or(f64::NAN);
                if x < last {
                    return Err(format!("series {name}: x goes down at {p}"));
                }
                last = x;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> RunContext {
        RunContext {
            bench: "small-objects".into(),
            run_id: "1-2".into(),
            git_sha: Some("abc".into()),
            git_dirty: Some(false),
            machine: Machine { nproc: 2, kernel: "6.1".into() },
        }
    }

    #[test]
    fn record_has_every_key_with_its_type() {
        let mut r = RunRecord {
            workload: "small-objects".into(),
            size: "quick".into(),
            mode: "h1-pool".into(),
            variant: "h1-pool".into(),
            repeat: 1,
            repeats: 3,
            status: "ok".into(),
            profile: Some("s3".into()),
            server: Some(json!({"label": "s3", "args": ["--profile", "s3"]})),
            client: Some(json!({"mode": "h1-pool", "max_connections": 32, "pipeline_depth": 32})),
            params: json!({"objects": 2000}).as_object().unwrap().clone(),
            ..RunRecord::default()
        };
        r.set("objects_per_s", 1234.5);
        r.set("errors", 0u32);
        r.set("not_a_number", f64::NAN); // dropped, never written as null
        let v = r.to_json(&ctx());
        check_schema(&v).unwrap();
        assert_eq!(v["figures"]["objects_per_s"], 1234.5);
        assert!(v["figures"].get("not_a_number").is_none());
        assert_eq!(v["machine"]["nproc"], 2);
        assert_eq!(v["params"]["objects"], 2000);
        // One line of JSON, parseable back.
        let line = serde_json::to_string(&v).unwrap();
        assert!(!line.contains('\n'));
        check_schema(&serde_json::from_str(&line).unwrap()).unwrap();
        // And read back as the same record.
        r.set_series("ttfb_s", vec![[50.0, 0.02], [99.0, 0.05]]);
        let back = RunRecord::from_json(&r.to_json(&ctx())).unwrap();
        assert_eq!(back.to_json(&ctx())["figures"], r.to_json(&ctx())["figures"]);
        assert_eq!((back.variant.as_str(), back.repeat, back.repeats), ("h1-pool", 1, 3));
        assert_eq!((back.profile.as_deref(), back.series.len()), (Some("s3"), 1));
        assert_eq!(back.client, r.client);
        assert!(RunRecord::from_json(&json!({"schema": 1})).is_none());
    }

    #[test]
    fn schema_check_catches_problems() {
        let v = RunRecord { repeat: 1, ..RunRecord::default() }.to_json(&ctx());
        check_schema(&v).unwrap();
        let mut missing = v.clone();
        missing.as_object_mut().unwrap().remove("git_sha");
        assert!(check_schema(&missing).unwrap_err().contains("git_sha"));
        let mut wrong = v.clone();
        wrong["figures"] = json!({"objects_per_s": "fast"});
        assert!(check_schema(&wrong).is_err());
        let mut zero = v;
        zero["repeat"] = json!(0);
        assert!(check_schema(&zero).is_err());
    }

    #[test]
    fn cpu_rates_come_from_the_requests_the_run_counted() {
        let with = |figs: &[(&str, f64)]| {
            let mut r = RunRecord::default();
            for (k, v) in figs {
                r.set(k, *v);
            }
            r.derive_cpu_rates();
            (r.figure(CPU_PER_1K_REQUESTS), r.figure(CPU_PER_GIB))
        };
        // The transport's count first, then LIST calls, then objects.
        let all = [("client_cpu_s", 2.0), ("requests_sent", 400.0), ("list_calls", 4.0), ("objects", 100.0)];
        assert_eq!(with(&all), (Some(5.0), None));
        assert_eq!(with(&all[..1].iter().chain(&all[2..]).copied().collect::<Vec<_>>()).0, Some(500.0));
        assert_eq!(with(&[("client_cpu_s", 2.0), ("objects", 100.0), ("requests_sent", 0.0)]).0, Some(20.0));
        assert_eq!(with(&[("client_cpu_s", 0.5), ("bytes", (2u64 << 30) as f64)]), (None, Some(0.25)));
        // No CPU figure: nothing derived; a rate the run set itself is kept.
        assert_eq!(with(&[("requests_sent", 10.0), ("bytes", 1e9)]), (None, None));
        assert_eq!(with(&[("client_cpu_s", 1.0), ("requests_sent", 10.0), (CPU_PER_1K_REQUESTS, 7.0)]).0, Some(7.0));
    }
}
