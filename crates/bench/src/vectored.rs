//! `vectored` (docs/lab/README.md section 4; HBase HFile metadata reads: many small ranges
//! of one large file).
//!
//! 2,000 ranges of 4-64 KiB inside one 256 MiB object of the synthetic bucket
//! (`synthetic/vectored/size=268435456/table.hfile`, nothing to PUT), `s3` profile. The
//! ranges are seeded: the object is cut into as many equal slots as there are ranges and
//! each slot holds one range at a random offset with a uniform random length, so ranges
//! are sorted, never overlap, and leave gaps like an HFile's index and bloom blocks do.
//!
//! Strategies (rows):
//! - naive: one ranged GET per range, at most `in_flight` at once; no byte is read twice
//!   and none outside a range (bytes over-read = received - requested = 0 when all is
//!   well; the figure is measured, not assumed);
//! - coalesced: `ferry_engine::get_ranges` with its defaults (no knobs: the gap worth
//!   reading through is measured from its own GETs, spans up to 8 MiB, 16 in flight), a
//!   fresh estimator per run, so each run pays for learning the endpoint as a new
//!   process would. Its GETs are the spans it issued and its over-read the hole bytes it
//!   fetched to save requests (the engine's `RangesStats`); every returned part is
//!   checked to have its range's length.
//!
//! Each strategy runs on h1-pool, h1-pipeline and auto at the same connections
//! ([`crate::workload::MODE_ROWS`]), so the claims table sets auto beside the best forced
//! mode; the claim itself is h1-pool's naive row against its coalesced row.

use crate::measure::{get_drain, set_percentiles, Errors, Meter};
use crate::record::RunRecord;
use crate::scenario::Step;
use crate::verdict::{median, paired_ratio, x, Headline};
use crate::workload::{ClientSpec, Column, ServerSpec, Size, Task, Variant, Workload};
use anyhow::{Context, Result};
use ferry_store::{GetParams, Mode, ObjectRef, RangeSpec, S3Client};
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub const NAME: &str = "vectored";
pub const PUBLISHED: &str = "none published (HFile metadata reads); coalescing should cut GETs";
pub const SYNTHETIC: &str = "synthetic";

#[derive(Clone, Debug, PartialEq)]
pub struct VectoredParams {
    pub ranges: usize,
    pub range_min: u64,
    pub range_max: u64,
    pub object_bytes: u64,
    pub seed: u64,
    pub in_flight: usize,
    pub connections: usize,
    pub repeats: usize,
    /// Peer rows (filtered to [`PEERS`]; the CLI's `--peers` fills it).
    pub peers: Vec<crate::peers::Peer>,
}

/// The peers beside vectored: boto3 (one GET per range: it has no vectored read),
/// obstore (get_ranges, which coalesces) and s3fs (cat_ranges, which merges ranges only
/// when its caller passes max_gap; by default one GET per range); ferry-py get_ranges.
pub const PEERS: [crate::peers::Peer; 4] =
    [crate::peers::Peer::Boto3, crate::peers::Peer::Obstore, crate::peers::Peer::S3fs, crate::peers::Peer::FerryPy];

impl VectoredParams {
    /// Full: the published 2,000 ranges in 256 MiB. Quick: 1,000 ranges in 128 MiB, the
    /// same density (one range per 128 KiB slot), so coalescing meets the same gaps and
    /// over-reads the same share; half the GETs keep the peer rows (boto3's 2,000 GETs:
    /// ~6 s a run, s3fs ~4 s) in the minute at 3 repeats (docs/lab/bench-quick-sizes.md; `ferry bench vectored
    /// --quick`).
    pub fn new(size: Size) -> VectoredParams {
        let (ranges, object_bytes) = match size {
            Size::Quick => (1_000, 128 << 20),
            Size::Full => (2_000, 256 << 20),
        };
        VectoredParams {
            ranges,
            range_min: 4 << 10,
            range_max: 64 << 10,
            object_bytes,
            seed: 11,
            in_flight: 32,
            connections: 50,
            repeats: 3,
            peers: Vec::new(),
        }
    }

    pub fn key(&self) -> String {
        format!("vectored/size={}/table.hfile", self.object_bytes)
    }
}

/// `(offset, length)` of each range: sorted, disjoint, inside `[0, object_bytes)`.
pub fn ranges(n: usize, min: u64, max: u64, object_bytes: u64, seed: u64) -> Vec<(u64, u64)> {
    if n == 0 {
        return Vec::new();
    }
    let slot = object_bytes / n as u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n as u64)
        .map(|i| {
            let len = rng.gen_range(min..=max).min(slot.max(1));
            let off = i * slot + rng.gen_range(0..=slot - len);
            (off, len)
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// One GET per range.
    Naive,
    /// `ferry_engine::get_ranges` with its default options.
    Coalesced,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VectoredRun {
    pub strategy: Strategy,
    pub key: String,
    pub ranges: Arc<Vec<(u64, u64)>>,
    pub in_flight: usize,
}

crate::impl_scenario!(VectoredRun);

impl VectoredRun {
    pub fn setup_key(&self) -> String {
        format!("{SYNTHETIC}/{} (HEAD)", self.key)
    }

    pub async fn setup(&self, c: &S3Client) -> Result<()> {
        c.head_object(&ObjectRef::new(SYNTHETIC, self.key.as_str()))
            .await
            .with_context(|| format!("HEAD {SYNTHETIC}/{}", self.key))?;
        Ok(())
    }

    pub fn params(&self) -> Map<String, Value> {
        crate::measure::one_param(
            "strategy",
            match self.strategy {
                Strategy::Naive => "naive: one GET per range",
                Strategy::Coalesced => {
                    "coalesced: ferry_engine::get_ranges, default options (measured gap, 8 MiB spans, 16 in flight)"
                }
            },
        )
    }

    pub async fn run(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        match self.strategy {
            Strategy::Naive => self.run_naive(c, rec).await,
            Strategy::Coalesced => self.run_coalesced(c, rec).await,
        }
    }

    async fn run_coalesced(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        let obj = ObjectRef::new(SYNTHETIC, self.key.as_str());
        let ranges: Vec<std::ops::Range<u64>> = self.ranges.iter().map(|(o, l)| *o..o + l).collect();
        let meter = Meter::start(c);
        let mut errors = Errors::default();
        let out = ferry_engine::get_ranges(
            &ferry_engine::Engine::new(c.clone()),
            &obj,
            &ranges,
            &ferry_engine::RangesOptions::default(),
        )
        .await;
        meter.record(c, rec, "");
        let requested: u64 = self.ranges.iter().map(|r| r.1).sum();
        rec.set("ranges", self.ranges.len() as f64);
        rec.set("bytes_requested", requested as f64);
        match out {
            Ok(out) => {
                for (part, (_, len)) in out.parts.iter().zip(self.ranges.iter()) {
                    if part.len() as u64 != *len {
                        errors.add(format!("a range of {len} bytes returned {}", part.len()));
                    }
                }
                // What the caller got, as a peer's `bytes` is: the per-GiB CPU column
                // then divides every row's CPU by the same bytes.
                rec.set("bytes", out.parts.iter().map(|p| p.len() as f64).sum::<f64>());
                rec.set("gets_issued", out.stats.requests as f64);
                rec.set("bytes_received", out.stats.bytes_fetched as f64);
                rec.set("bytes_over_read", out.stats.over_read as f64);
            }
            Err(e) => errors.add(format!("get_ranges {obj}: {e:#}")),
        }
        errors.record(rec);
        Ok(())
    }

    async fn run_naive(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        let meter = Meter::start(c);
        let sem = Arc::new(Semaphore::new(self.in_flight.max(1)));
        let mut set = JoinSet::new();
        let mut issued = 0u64;
        for (off, len) in self.ranges.iter().copied() {
            let permit = sem.clone().acquire_owned().await?;
            let (c, obj) = (c.clone(), ObjectRef::new(SYNTHETIC, self.key.as_str()));
            issued += 1;
            set.spawn(async move {
                let t = Instant::now();
                let r = get_drain(&c, &obj, GetParams::range(RangeSpec::FromTo(off, off + len - 1))).await;
                drop(permit);
                (
                    t.elapsed(),
                    len,
                    r.map(|(n, _)| n).map_err(|e| format!("GET {obj} bytes {off}-{}: {e:#}", off + len - 1)),
                )
            });
        }
        let (mut requested, mut received) = (0u64, 0u64);
        let mut lat = Vec::with_capacity(self.ranges.len());
        let mut errors = Errors::default();
        while let Some(done) = set.join_next().await {
            let (t, len, r) = done?;
            requested += len;
            match r {
                Ok(n) => {
                    received += n;
                    lat.push(t.as_secs_f64());
                    if n != len {
                        errors.add(format!("a range of {len} bytes returned {n}"));
                    }
                }
                Err(e) => errors.add(e),
            }
        }
        meter.record(c, rec, "");
        rec.set("ranges", self.ranges.len() as f64);
        rec.set("gets_issued", issued as f64);
        rec.set("bytes_requested", requested as f64);
        rec.set("bytes_received", received as f64);
        rec.set("bytes", received as f64);
        rec.set("bytes_over_read", received.saturating_sub(requested) as f64);
        set_percentiles(rec, "latency", "ms", &mut lat, 1e3);
        errors.record(rec);
        Ok(())
    }
}

pub const COLUMNS: &[Column] = &[
    Column::new("GETs issued", "gets_issued", 1.0, 0),
    Column::new("MiB requested", "bytes_requested", 1.0 / 1048576.0, 1),
    Column::new("MiB over-read", "bytes_over_read", 1.0 / 1048576.0, 1),
    Column::new("wall s", "wall_s", 1.0, 2),
    Column::new("p50 ms", "latency_p50_ms", 1.0, 1),
    Column::new("p99 ms", "latency_p99_ms", 1.0, 1),
    Column::CONNECTIONS_OPENED,
    Column::CLIENT_CPU,
    // Per GiB the caller got (the same bytes in every row), not per request: a "request"
    // is a range to the caller, a GET to ferry's rows and the server, and unknown for a
    // peer against an external server.
    Column::CPU_PER_GIB,
    Column::ERRORS,
];

pub const NAIVE_ROW: &str = "h1-pool · naive (one GET per range)";
pub const COALESCED_ROW: &str = "h1-pool · coalesced (get_ranges)";

/// A strategy's row label on the transport named `mode_name` (one of
/// [`crate::workload::MODE_ROWS`]); on h1-pool, [`NAIVE_ROW`] and [`COALESCED_ROW`].
pub fn row_label(strategy: Strategy, mode_name: &str) -> String {
    let row = match strategy {
        Strategy::Naive => "naive (one GET per range)",
        Strategy::Coalesced => "coalesced (get_ranges)",
    };
    crate::workload::mode_row_label(mode_name, row)
}

pub fn vectored(size: Size, p: &VectoredParams) -> Workload {
    let rs = Arc::new(ranges(p.ranges, p.range_min, p.range_max, p.object_bytes, p.seed));
    let s3 = ServerSpec::profile("s3");
    let client = ClientSpec { mode: Mode::H1Pool, max_connections: p.connections, pipeline_depth: 1 };
    let row = |strategy, mode| Variant {
        label: row_label(strategy, crate::workload::mode_name(mode)),
        workload: NAME,
        server: Some(0),
        client: Some(client.on(mode)),
        task: Task::Scenario(Step::new(VectoredRun {
            strategy,
            key: p.key(),
            ranges: rs.clone(),
            in_flight: p.in_flight,
        })),
        note: (strategy == Strategy::Coalesced && mode == Mode::H1Pool)
            .then(|| "latency columns: per GET for naive only; get_ranges returns when every span is in".into()),
        once: false,
    };
    // Each strategy on each HTTP/1.1 transport, h1-pool first: auto beside the forced
    // modes in the claims table.
    let mut variants: Vec<Variant> = [Strategy::Naive, Strategy::Coalesced]
        .into_iter()
        .flat_map(|strategy| crate::workload::MODE_ROWS.into_iter().map(move |m| (strategy, m)))
        .map(|(strategy, m)| row(strategy, m))
        .collect();
    let peers: Vec<crate::peers::Peer> = p.peers.iter().copied().filter(|x| PEERS.contains(x)).collect();
    let spans: Vec<(u64, u64)> = rs.iter().map(|(off, len)| (*off, off + len - 1)).collect();
    // boto3's threads: as many GETs in flight as the naive row.
    let op = crate::peers::PeerOp::GetRanges {
        bucket: SYNTHETIC.into(),
        key: p.key(),
        ranges: Arc::new(spans),
        concurrency: p.in_flight,
    };
    // The peer rows repeat like ferry's, interleaved (the driver's fork server pays
    // Python's start-up once; peers.rs).
    variants.extend(crate::peers::op_rows(NAME, &peers, 0, op, ""));
    let requested: u64 = rs.iter().map(|r| r.1).sum();
    let params = json!({
        "ranges": p.ranges,
        "range_min": p.range_min,
        "range_max": p.range_max,
        "object_bytes": p.object_bytes,
        "object": format!("{SYNTHETIC}/{}", p.key()),
        "bytes_requested": requested,
        "seed": p.seed,
        "range_layout": "one range per equal slot, random offset, uniform length; sorted, disjoint",
        "in_flight": p.in_flight,
        "connections": p.connections,
    });
    Workload {
        notes: vec![format!(
            "{} ranges of {}-{} KiB ({:.1} MiB in all) in one {} MiB synthetic object, s3 profile; naive: {} GETs in flight over {} connections; coalesced: get_ranges with the engine's defaults on the same client settings; each on h1-pool, h1-pipeline (depth 32) and auto.",
            p.ranges,
            p.range_min >> 10,
            p.range_max >> 10,
            requested as f64 / 1048576.0,
            p.object_bytes >> 20,
            p.in_flight,
            p.connections
        ), "peer rows (driver.py's get_ranges): GETs issued and MiB over-read are the server's counts (its response body bytes less the bytes asked for); latency is per GET for boto3, the whole call for obstore and s3fs.".into()],
        headline: Some(claim),
        ..Workload::scenario(NAME, size, vec![s3], variants, p.repeats, params, COLUMNS)
    }
}

/// The claims table's row for `vectored`: GETs issued and wall time, one GET per range against coalescing (none published).
pub fn claim(records: &[RunRecord]) -> Headline {
    let h = |published: &str, measured: String, verdict: &str| Headline::new("vectored", published, measured, verdict);
    #[allow(unused)]
    let none = || "no paired clean runs".to_string();
    let m = |v: &str, f: &str| median(records, v, f);
    match (
        paired_ratio(records, NAIVE_ROW, COALESCED_ROW, "wall_s"),
        m(NAIVE_ROW, "gets_issued"),
        m(COALESCED_ROW, "gets_issued"),
        m(COALESCED_ROW, "bytes_over_read"),
    ) {
        (Some(w), Some(gn), Some(gc), Some(o)) => {
            let verdict = if gc < gn && w.median >= 1.1 {
                "none published: fewer GETs and faster"
            } else {
                "none published: not both fewer GETs and faster"
            };
            h(
                PUBLISHED,
                format!("{gn:.0} GETs -> {gc:.0}, {} faster, {:.1} MiB over-read", x(&w), o / 1048576.0),
                verdict,
            )
        }
        _ => h(PUBLISHED, none(), "no"),
    }
}

/// `vectored` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "vectored",
    quick: "1,000 ranges of 4-64 KiB in one 128 MiB object",
    full: "2,000 ranges of 4-64 KiB in one 256 MiB object",
    peers: &PEERS,
    in_suite: true,
    default_link: None,
    run: crate::workload::run_defaults::<VectoredParams>,
    claim,
};

crate::impl_params!(VectoredParams, |size, p, o| crate::runner::run(&vectored(size, p), o));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_sorted_disjoint_and_bounded() {
        let p = VectoredParams::new(Size::Full);
        let r = ranges(p.ranges, p.range_min, p.range_max, p.object_bytes, p.seed);
        assert_eq!(r.len(), 2_000);
        let q = VectoredParams::new(Size::Quick);
        assert_eq!(q.object_bytes / q.ranges as u64, p.object_bytes / p.ranges as u64, "quick keeps the density");
        assert_eq!(r, ranges(p.ranges, p.range_min, p.range_max, p.object_bytes, p.seed), "seeded");
        assert!(r.iter().all(|(_, l)| (4096..=65536).contains(l)));
        assert!(r.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "sorted and disjoint");
        let (o, l) = r[r.len() - 1];
        assert!(o + l <= 256 << 20);
        // Lengths are spread over the whole 4-64 KiB band.
        assert!(r.iter().any(|(_, l)| *l < 8 << 10) && r.iter().any(|(_, l)| *l > 60 << 10));
        // Tiny object: lengths clamp to the slot.
        assert!(ranges(4, 10, 100, 40, 1).iter().all(|(o, l)| *l <= 10 && o + l <= 40));
        assert!(ranges(0, 1, 2, 10, 1).is_empty());
    }

    #[test]
    fn workload_rows() {
        let w = vectored(Size::Quick, &VectoredParams::new(Size::Quick));
        assert_eq!(w.variants.len(), 6, "two strategies on three transports");
        assert_eq!((w.variants[0].label.as_str(), w.variants[3].label.as_str()), (NAIVE_ROW, COALESCED_ROW));
        assert!(w.variants[3].task.step::<VectoredRun>().is_some_and(|r| r.strategy == Strategy::Coalesced));
        let auto = w.variants.iter().find(|v| v.label == row_label(Strategy::Naive, "auto")).unwrap();
        assert_eq!(auto.client.map(|c| c.mode), Some(Mode::Auto));
        assert!(w.variants.iter().all(|v| !matches!(v.task, Task::NotYet { .. })));
        assert_eq!(w.servers[0].profile, "s3");
        assert_eq!(w.params["object"], "synthetic/vectored/size=134217728/table.hfile");
        let w = vectored(Size::Full, &VectoredParams::new(Size::Full));
        assert_eq!(w.params["object"], "synthetic/vectored/size=268435456/table.hfile");
    }
}
