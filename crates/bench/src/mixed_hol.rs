//! `mixed-hol` (LAB.md section 4; Onehouse: small-object latency 15x worse when small GETs
//! share an SDK's connection pool with large ones).
//!
//! One run submits, all at once (async, nothing bounds them but the client itself), 8
//! large GETs (256 MiB; quick 64 MiB) and 2,000 (quick 1,000) small GETs whose sizes are drawn
//! log-uniformly from 4 KiB-1 MiB with a fixed seed, against `ferry serve --profile s3`
//! (30 ms first byte, 90 MB/s per connection). The larges come from the server's synthetic
//! bucket (`synthetic/mixed-hol/size=N/large-K`: nothing to PUT, their CRC warmed by a HEAD
//! in setup); the smalls are PUT once per server, spread over 16 prefixes so the s3
//! profile's per-prefix request limit is not what is measured.
//!
//! Each client runs two rows per repeat, each with a fresh client of the same settings:
//! "unloaded" (the smalls alone) and "loaded" (larges submitted first, then the smalls).
//! A small GET's latency runs from its submission to the end of its body, so it includes
//! time queued inside the client (which is the effect being measured).
//!
//! Large done time is when the last large finished, from the common submission instant.
//! The link-limited time is what the emulated link allows one large on its own
//! connection: the profile's first-byte p50 plus size / per-connection rate (30 ms +
//! 256 MiB / 90 MB/s = 3.0 s), since the s3 profile caps each connection, and a large
//! never gets more than one connection from any of these clients.

use crate::record::RunRecord;
use crate::scenario::{body, cdf, get_drain, log_uniform_sizes, set_percentiles, Errors, Meter, Scenario};
use crate::workload::{ClientSpec, Column, ServerSpec, Shape, Size, Task, Variant, Workload};
use anyhow::{Context, Result};
use ferry_store::{GetParams, Mode, ObjectRef, PutParams, S3Client};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub const NAME: &str = "mixed-hol";
pub const PUBLISHED: &str = "small-object latency 15x worse beside large GETs in an SDK pool (Onehouse)";
pub const BUCKET: &str = "bench";
pub const SYNTHETIC: &str = "synthetic";

#[derive(Clone, Debug, PartialEq)]
pub struct MixedHolParams {
    pub larges: usize,
    pub large_bytes: u64,
    pub smalls: usize,
    pub small_min: u64,
    pub small_max: u64,
    pub seed: u64,
    pub prefixes: usize,
    /// Connections of every client (50: the AWS SDKs' default pool).
    pub connections: usize,
    /// Requests in flight per pipelined connection (h1-pipeline and auto).
    pub pipeline_depth: usize,
    pub repeats: usize,
    pub put_concurrency: usize,
    /// The s3 profile's first-byte p50 and per-connection rate (crates/server config.rs,
    /// LAB.md section 2), for the link-limited time of a large GET.
    pub ttfb_p50_s: f64,
    pub rate_per_conn_bytes_per_s: f64,
}

impl MixedHolParams {
    pub fn new(size: Size) -> MixedHolParams {
        MixedHolParams {
            larges: 8,
            large_bytes: match size {
                Size::Quick => 64 << 20,
                Size::Full => 256 << 20,
            },
            // Quick: 1,000 smalls. With 2,000 a run takes ~2.5 s here and the 24 runs of
            // three repeats came to 61 s (`ferry bench mixed-hol --quick`), over the minute.
            smalls: match size {
                Size::Quick => 1_000,
                Size::Full => 2_000,
            },
            small_min: 4 << 10,
            small_max: 1 << 20,
            seed: 7,
            prefixes: 16,
            connections: 50,
            pipeline_depth: 16,
            repeats: 3,
            put_concurrency: 64,
            ttfb_p50_s: 0.030,
            rate_per_conn_bytes_per_s: 90e6,
        }
    }

    pub fn link_limited_s(&self) -> f64 {
        self.ttfb_p50_s + self.large_bytes as f64 / self.rate_per_conn_bytes_per_s
    }
}

/// `mixed-hol/pNN/small-NNNNNN`, object `i` in prefix `i % prefixes`.
pub fn small_keys(n: usize, prefixes: usize) -> Vec<String> {
    let prefixes = prefixes.max(1);
    (0..n).map(|i| format!("mixed-hol/p{:02}/small-{:06}", i % prefixes, i)).collect()
}

/// Keys of the synthetic bucket that name their size: `mixed-hol/size=N/large-K`.
pub fn large_keys(n: usize, bytes: u64) -> Vec<String> {
    (0..n).map(|k| format!("mixed-hol/size={bytes}/large-{k}")).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Unloaded,
    Loaded,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Unloaded => "unloaded",
            Phase::Loaded => "loaded",
        }
    }
}

/// One run: the smalls (key, size) and, when loaded, the larges.
#[derive(Clone, Debug, PartialEq)]
pub struct MixedHolRun {
    pub phase: Phase,
    pub smalls: Arc<Vec<(String, u64)>>,
    pub larges: Arc<Vec<String>>,
    pub large_bytes: u64,
    pub link_limited_s: f64,
    pub seed: u64,
    pub put_concurrency: usize,
}

impl MixedHolRun {
    pub fn setup_key(&self) -> String {
        format!("{} small objects (seed {}) and {} large", self.smalls.len(), self.seed, self.larges.len())
    }

    pub async fn setup(&self, c: &S3Client) -> Result<()> {
        c.create_bucket(BUCKET).await.with_context(|| format!("creating bucket {BUCKET}"))?;
        let max = self.smalls.iter().map(|s| s.1).max().unwrap_or(0) as usize;
        let buf = body(max, 0);
        let sem = Arc::new(Semaphore::new(self.put_concurrency.max(1)));
        let mut set = JoinSet::new();
        for (key, size) in self.smalls.iter() {
            let permit = sem.clone().acquire_owned().await?;
            let (c, obj, b) = (c.clone(), ObjectRef::new(BUCKET, key.as_str()), buf.slice(..*size as usize));
            set.spawn(async move {
                let r = c.put_object(&obj, b, PutParams::default()).await.with_context(|| format!("PUT {obj}"));
                drop(permit);
                r
            });
            while let Some(done) = set.try_join_next() {
                done??;
            }
        }
        while let Some(r) = set.join_next().await {
            r??;
        }
        // The first HEAD of a synthetic key computes its CRC (a pass over the object).
        for key in self.larges.iter() {
            c.head_object(&ObjectRef::new(SYNTHETIC, key.as_str())).await.with_context(|| format!("HEAD {SYNTHETIC}/{key}"))?;
        }
        Ok(())
    }

    pub fn params(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("phase".into(), json!(self.phase.name()));
        m
    }

    pub async fn run(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        let meter = Meter::start(c);
        let t0 = Instant::now();
        let mut set = JoinSet::new();
        let mut jobs: Vec<(bool, ObjectRef, u64)> = Vec::new();
        if self.phase == Phase::Loaded {
            jobs.extend(self.larges.iter().map(|k| (true, ObjectRef::new(SYNTHETIC, k.as_str()), self.large_bytes)));
        }
        jobs.extend(self.smalls.iter().map(|(k, s)| (false, ObjectRef::new(BUCKET, k.as_str()), *s)));
        for (large, obj, size) in jobs {
            let c = c.clone();
            set.spawn(async move {
                let submitted = Instant::now();
                let r = get_drain(&c, &obj, GetParams::default()).await;
                let r = match r {
                    Ok((n, _)) if n == size => Ok(n),
                    Ok((n, _)) => Err(anyhow::anyhow!("GET {obj}: {n} bytes, expected {size}")),
                    Err(e) => Err(e.context(format!("GET {obj}"))),
                };
                (large, submitted.elapsed(), submitted, r)
            });
        }
        let mut small_lat = Vec::with_capacity(self.smalls.len());
        let (mut smalls_done, mut large_done, mut larges_ok, mut bytes) = (0f64, 0f64, 0u64, 0u64);
        let mut errors = Errors::default();
        while let Some(done) = set.join_next().await {
            let (large, lat, submitted, r) = done?;
            let end = (submitted + lat).duration_since(t0).as_secs_f64();
            match r {
                Ok(n) => {
                    bytes += n;
                    if large {
                        larges_ok += 1;
                        large_done = large_done.max(end);
                    } else {
                        small_lat.push(lat.as_secs_f64());
                        smalls_done = smalls_done.max(end);
                    }
                }
                Err(e) => errors.add(format!("{e:#}")),
            }
        }
        meter.record(c, rec, "");
        rec.set("smalls", small_lat.len() as f64);
        rec.set("smalls_done_s", smalls_done);
        rec.set("bytes", bytes as f64);
        if self.phase == Phase::Loaded {
            rec.set("larges", larges_ok as f64);
            rec.set("large_done_s", large_done);
            rec.set("large_link_limited_s", self.link_limited_s);
            if self.link_limited_s > 0.0 {
                rec.set("large_done_over_link_limited", large_done / self.link_limited_s);
            }
        }
        set_percentiles(rec, "small_latency", "ms", &mut small_lat, 1e3);
        rec.set_series("small_latency_s", cdf(&small_lat));
        errors.record(rec);
        Ok(())
    }
}

pub const COLUMNS: &[Column] = &[
    Column::new("small p50 ms", "small_latency_p50_ms", 1.0, 1),
    Column::new("small p90 ms", "small_latency_p90_ms", 1.0, 1),
    Column::new("small p99 ms", "small_latency_p99_ms", 1.0, 1),
    Column::new("smalls done s", "smalls_done_s", 1.0, 2),
    Column::new("large done s", "large_done_s", 1.0, 2),
    Column::new("link-limited s", "large_link_limited_s", 1.0, 2),
    Column::new("TCP conns opened", "connections_opened", 1.0, 0),
    Column::new("client CPU s", "client_cpu_s", 1.0, 2),
    Column::new("errors", "errors", 1.0, 0),
];

/// The clients compared, in row order: (label, mode, server index).
pub const CLIENTS: &[(&str, Mode, usize)] = &[("h1-pool", Mode::H1Pool, 0), ("h1-pipeline", Mode::H1Pipeline, 0), ("auto", Mode::Auto, 0), ("h2 [s3 --h2 on]", Mode::H2, 1)];

pub fn row_label(client: &str, phase: Phase) -> String {
    format!("{client} · {}", phase.name())
}

pub fn mixed_hol(size: Size, p: &MixedHolParams) -> Workload {
    let sizes = log_uniform_sizes(p.smalls, p.small_min, p.small_max, p.seed);
    let smalls: Arc<Vec<(String, u64)>> = Arc::new(small_keys(p.smalls, p.prefixes).into_iter().zip(sizes.iter().copied()).collect());
    let larges = Arc::new(large_keys(p.larges, p.large_bytes));
    let s3 = ServerSpec { label: "s3", profile: "s3", extra_args: vec![], signed: true };
    let s3_h2 = ServerSpec { label: "s3+h2", profile: "s3", extra_args: vec!["--h2".into(), "on".into()], signed: true };
    let mut variants = Vec::new();
    for (label, mode, server) in CLIENTS {
        for phase in [Phase::Unloaded, Phase::Loaded] {
            variants.push(Variant {
                label: row_label(label, phase),
                workload: NAME,
                server: Some(*server),
                client: Some(ClientSpec { mode: *mode, max_connections: p.connections, pipeline_depth: p.pipeline_depth }),
                task: Task::Scenario(Scenario::MixedHol(MixedHolRun {
                    phase,
                    smalls: smalls.clone(),
                    larges: larges.clone(),
                    large_bytes: p.large_bytes,
                    link_limited_s: p.link_limited_s(),
                    seed: p.seed,
                    put_concurrency: p.put_concurrency,
                })),
                note: None,
                once: false,
            });
        }
    }
    let small_bytes: u64 = sizes.iter().sum();
    let params = json!({
        "larges": p.larges,
        "large_bytes": p.large_bytes,
        "smalls": p.smalls,
        "small_bytes_total": small_bytes,
        "small_size_min": p.small_min,
        "small_size_max": p.small_max,
        "small_size_distribution": "log-uniform, seeded (rand StdRng)",
        "seed": p.seed,
        "prefixes": p.prefixes,
        "connections": p.connections,
        "pipeline_depth": p.pipeline_depth,
        "submit": "all at once, larges first (loaded)",
        "large_keys": "synthetic/mixed-hol/size=N/large-K",
        "small_keys": "bench/mixed-hol/pNN/small-NNNNNN",
        "link_limited": "ttfb p50 + large_bytes / per-connection rate of the s3 profile",
        "ttfb_p50_s": p.ttfb_p50_s,
        "rate_per_conn_bytes_per_s": p.rate_per_conn_bytes_per_s,
        "latency": "submit to end of body, including time queued in the client",
    });
    Workload {
        name: NAME,
        size,
        servers: vec![s3, s3_h2],
        setup: None,
        warm: vec![],
        variants,
        repeats: p.repeats.max(1),
        params: params.as_object().cloned().unwrap_or_default(),
        shape: Shape::Columns(COLUMNS),
        claims: vec![],
        notes: vec![
            format!(
                "{} x {} MiB large GETs + {} small GETs ({:.0} MiB in all, log-uniform 4 KiB-1 MiB, seed {}), all submitted at once; {} connections per client (the AWS SDK default pool).",
                p.larges,
                p.large_bytes >> 20,
                p.smalls,
                small_bytes as f64 / 1048576.0,
                p.seed,
                p.connections
            ),
            format!(
                "link-limited: one large on its own connection at the s3 profile's 90 MB/s after its 30 ms first byte = {:.2} s.",
                p.link_limited_s()
            ),
            "unloaded and loaded rows are separate runs with fresh clients of the same settings; the h2 rows ran against a second server, --profile s3 --h2 on (the s3 profile is HTTP/1.1 only, like AWS S3).".into(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_sizes() {
        let q = MixedHolParams::new(Size::Quick);
        let f = MixedHolParams::new(Size::Full);
        assert_eq!((q.larges, q.large_bytes, q.smalls, q.connections), (8, 64 << 20, 1_000, 50));
        assert_eq!((f.larges, f.large_bytes, f.smalls), (8, 256 << 20, 2_000));
        let w = mixed_hol(Size::Quick, &q);
        assert_eq!(w.variants.len(), CLIENTS.len() * 2);
        let Task::Scenario(Scenario::MixedHol(r)) = &w.variants[1].task else { panic!("not mixed-hol") };
        assert_eq!(r.phase, Phase::Loaded);
        assert_eq!(r.smalls.len(), 1_000);
        assert!(r.smalls.iter().all(|(_, s)| (4096..=1 << 20).contains(s)));
        assert_eq!(r.smalls[17].0, "mixed-hol/p01/small-000017");
        assert_eq!(r.larges[0], format!("mixed-hol/size={}/large-0", 64 << 20));
        assert!((f.link_limited_s() - (0.03 + 268435456.0 / 90e6)).abs() < 1e-9);
        // The same seed gives the same workload.
        assert_eq!(mixed_hol(Size::Quick, &q), w);
        let h2 = w.variants.iter().find(|v| v.client.unwrap().mode == Mode::H2).unwrap();
        assert!(w.servers[h2.server.unwrap()].args().windows(2).any(|a| a == ["--h2", "on"]));
        assert!(w.variants.iter().all(|v| v.client.unwrap().max_connections == 50));
    }
}
