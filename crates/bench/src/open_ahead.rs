//! `open-ahead` (docs/lab/README.md section 4; Qubole: opening the next S3 object while the
//! current one is read saved ~30% of a scan's time, since opening costs >= 50 ms).
//!
//! One consumer reads N objects of 640 KiB (655,360 bytes) in order, each to its end, the
//! way a query engine scans the files of a table: full 80,000, quick 64. 64 still answers
//! the claim: the saving is per object (the first byte hidden behind the previous object's
//! body), so the on-demand/open-ahead ratio does not depend on N once the window has filled.
//! The objects come from the server's synthetic bucket
//! (`synthetic/open-ahead/size=655360/part-NNNNNN.parquet`: nothing to PUT), `s3` profile:
//! 30 ms first byte, then 640 KiB at 90 MB/s = ~7 ms of body.
//!
//! Rows:
//! - on demand (naive): object i+1 is opened (GET sent) when object i has been read;
//! - open-ahead: `ferry_engine::OpenAhead` over the same list with its default options
//!   (8 objects opened ahead at first, the window growing to 32 while the consumer waits
//!   for first bytes, 64 MiB read ahead at most); the consumer loop is the same
//!   (take the next object, read it to its end), so the difference is the engine's.
//!   "open" for this row is the time the consumer waited in `next()` for the object's
//!   head, i.e. the first-byte time opening ahead did not hide.
//!
//! - bandwidth bound: the on-demand reader against a second server of the same profile
//!   whose first byte is zero (`--ttfb-p50 0ms --ttfb-p99 0ms`, the 90 MB/s per connection
//!   kept): what an in-order reader takes when opening costs nothing but a request's round
//!   trip, i.e. the object bytes at one connection's rate. The goal is open-ahead
//!   within 10% of it; the claims line pairs the two rows by repeat. It is measured, not
//!   computed (64 x 640 KiB at 90 MB/s would be 0.47 s), so the client's own per-object
//!   cost (request, response parsing, the consumer's loop) is in the bound as it is in
//!   the rows. Open-ahead may come in under it: its slots stream up to 8 bodies at once,
//!   each on its own connection, while the bound reads one at a time.
//!
//! - open-ahead, window fixed at 8: the engine's reader with `max_open` 8, the window it
//!   had before it grew with stalls (engine's openahead.rs, "The window follows the
//!   first-byte tail"), so what the growing window adds is measured in the same run.
//!
//! All rows use an h1-pool of 50 connections, the client's default: enough for the
//! open-ahead window at its largest (32 + the object being read), and the on-demand
//! reader only ever uses one.
//!
//! Synthetic CRCs are computed by the server on a key's first access (0.2 ms for 640 KiB,
//! well under the 30 ms first byte), so nothing is warmed.
//!
//! How the quick size was chosen and what the window measured: docs/lab/bench-open-ahead.md.

use crate::measure::{get_drain, set_percentiles, Errors, Meter};
use crate::record::RunRecord;
use crate::scenario::Step;
use crate::verdict::{judge_percent, median, paired_ratio, Headline};
use crate::workload::{ClientSpec, Column, ServerSpec, Size, Task, Variant, Workload};
use anyhow::Result;
use ferry_store::{GetParams, Mode, ObjectRef, S3Client};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;

pub const NAME: &str = "open-ahead";
pub const PUBLISHED: &str = "30% less scan time by opening the next object early (Qubole)";
pub const SYNTHETIC: &str = "synthetic";
pub const OBJECT_BYTES: u64 = 655_360;
pub const NAIVE_ROW: &str = "on demand (naive)";
pub const OPEN_AHEAD_ROW: &str = "h1-pool · open-ahead";

/// The open-ahead row on the transport named `mode_name` (one of
/// [`crate::workload::MODE_ROWS`]; on h1-pool, [`OPEN_AHEAD_ROW`]): auto beside the forced
/// modes in the claims table.
pub fn open_ahead_label(mode_name: &str) -> String {
    crate::workload::mode_row_label(mode_name, "open-ahead")
}
pub const FIXED_ROW: &str = "open-ahead, window fixed at 8";
pub const BOUND_ROW: &str = "bandwidth bound (on demand, no first byte)";

#[derive(Clone, Debug, PartialEq)]
pub struct OpenAheadParams {
    pub objects: usize,
    pub object_bytes: u64,
    pub repeats: usize,
    /// Peer rows (filtered to [`PEERS`]; the CLI's `--peers` fills it).
    pub peers: Vec<crate::peers::Peer>,
}

/// The peers beside open-ahead, each reading in order as its users do: boto3
/// get_object, obstore get_async, s3fs open + read; ferry-py iter_get (open-ahead).
pub const PEERS: [crate::peers::Peer; 4] =
    [crate::peers::Peer::Boto3, crate::peers::Peer::Obstore, crate::peers::Peer::S3fs, crate::peers::Peer::FerryPy];

impl OpenAheadParams {
    pub fn new(size: Size) -> OpenAheadParams {
        OpenAheadParams {
            objects: match size {
                Size::Quick => 64,
                Size::Full => 80_000,
            },
            object_bytes: OBJECT_BYTES,
            repeats: 3,
            peers: Vec::new(),
        }
    }
}

/// `open-ahead/size=BYTES/part-NNNNNN.parquet`, in the order the consumer reads them.
pub fn keys(n: usize, bytes: u64) -> Vec<String> {
    (0..n).map(|i| format!("open-ahead/size={bytes}/part-{i:06}.parquet")).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Open object i+1 when object i is done.
    OnDemand,
    /// `ferry_engine::OpenAhead` with its default options.
    OpenAhead,
    /// `ferry_engine::OpenAhead` with its window held at its start (`max_open` =
    /// `START_OPEN`): what the adaptive window adds, in the same run.
    OpenAheadFixed,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OpenAheadRun {
    pub strategy: Strategy,
    pub keys: Arc<Vec<String>>,
    pub object_bytes: u64,
}

crate::impl_scenario!(OpenAheadRun);

impl OpenAheadRun {
    pub fn setup_key(&self) -> String {
        "nothing (synthetic objects)".into()
    }

    pub async fn setup(&self, _c: &S3Client) -> Result<()> {
        Ok(())
    }

    pub fn params(&self) -> Map<String, Value> {
        crate::measure::one_param(
            "strategy",
            match self.strategy {
                Strategy::OnDemand => "on demand: the next GET is sent when the current object has been read",
                Strategy::OpenAhead => "open-ahead: ferry_engine::OpenAhead, default options (window 8 growing to 32 while the consumer waits for heads, 64 MiB read ahead)",
                Strategy::OpenAheadFixed => "open-ahead, window fixed at 8: ferry_engine::OpenAhead with max_open 8 (64 MiB read ahead)",
            },
        )
    }

    pub async fn run(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        let meter = Meter::start(c);
        let mut opens = Vec::with_capacity(self.keys.len());
        let mut per_object = Vec::with_capacity(self.keys.len());
        let mut errors = Errors::default();
        let mut bytes = 0u64;
        match self.strategy {
            Strategy::OnDemand => {
                for key in self.keys.iter() {
                    let obj = ObjectRef::new(SYNTHETIC, key.as_str());
                    let t = Instant::now();
                    match get_drain(c, &obj, GetParams::default()).await {
                        Ok((n, head)) => {
                            bytes += n;
                            opens.push(head.as_secs_f64());
                            per_object.push(t.elapsed().as_secs_f64());
                            if n != self.object_bytes {
                                errors.add(format!("GET {obj}: {n} bytes, expected {}", self.object_bytes));
                            }
                        }
                        Err(e) => errors.add(format!("GET {obj}: {e:#}")),
                    }
                }
            }
            Strategy::OpenAhead | Strategy::OpenAheadFixed => {
                use futures_util::StreamExt;
                let objects = self.keys.iter().map(|k| ObjectRef::new(SYNTHETIC, k.as_str())).collect();
                let mut opts = ferry_engine::OpenAheadOptions::default();
                if self.strategy == Strategy::OpenAheadFixed {
                    opts.max_open = ferry_engine::openahead::START_OPEN;
                }
                let mut reader =
                    ferry_engine::OpenAhead::from_list(&ferry_engine::Engine::new(c.clone()), objects, opts);
                let mut i = 0usize;
                loop {
                    let t = Instant::now();
                    let Some(next) = reader.next().await else { break };
                    let key = self.keys.get(i).map(String::as_str).unwrap_or("?");
                    i += 1;
                    let mut opened = match next {
                        Ok(o) => o,
                        Err(e) => {
                            errors.add(format!("open {SYNTHETIC}/{key}: {e:#}"));
                            continue;
                        }
                    };
                    opens.push(t.elapsed().as_secs_f64());
                    let mut n = 0u64;
                    let mut failed = false;
                    while let Some(chunk) = opened.body.next().await {
                        match chunk {
                            Ok(b) => n += b.len() as u64,
                            Err(e) => {
                                errors.add(format!("GET {SYNTHETIC}/{key}: {e:#}"));
                                failed = true;
                                break;
                            }
                        }
                    }
                    if failed {
                        continue;
                    }
                    bytes += n;
                    per_object.push(t.elapsed().as_secs_f64());
                    if n != self.object_bytes {
                        errors.add(format!("GET {SYNTHETIC}/{key}: {n} bytes, expected {}", self.object_bytes));
                    }
                }
                let st = reader.stats();
                rec.set("opened", st.opened as f64);
                rec.set("reopened", st.reopened as f64);
                rec.set("peak_open", st.peak_open as f64);
                rec.set("window", st.window as f64);
                rec.set("stalls", st.stalls as f64);
                rec.set("peak_buffered_bytes", st.peak_buffered as f64);
            }
        }
        let wall = meter.record(c, rec, "");
        rec.set("objects", per_object.len() as f64);
        rec.set("bytes", bytes as f64);
        rec.set("objects_per_s", per_object.len() as f64 / wall.as_secs_f64().max(1e-9));
        rec.set("bytes_per_s", bytes as f64 / wall.as_secs_f64().max(1e-9));
        let open_total: f64 = opens.iter().sum();
        rec.set("open_share", open_total / wall.as_secs_f64().max(1e-9));
        set_percentiles(rec, "open", "ms", &mut opens, 1e3);
        set_percentiles(rec, "object", "ms", &mut per_object, 1e3);
        errors.record(rec);
        Ok(())
    }
}

pub const COLUMNS: &[Column] = &[
    Column::new("wall s", "wall_s", 1.0, 2),
    Column::new("objects/s", "objects_per_s", 1.0, 1),
    Column::new("open p50 ms", "open_p50_ms", 1.0, 1),
    Column::new("open p99 ms", "open_p99_ms", 1.0, 1),
    Column::new("per object p50 ms", "object_p50_ms", 1.0, 1),
    Column::new("share of time opening", "open_share", 100.0, 0),
    Column::new("window", "window", 1.0, 0),
    Column::CONNECTIONS_OPENED,
    Column::CLIENT_CPU,
    Column::CPU_PER_REQUEST,
    Column::ERRORS,
];

pub fn open_ahead(size: Size, p: &OpenAheadParams) -> Workload {
    let s3 = ServerSpec::profile("s3");
    // The bound's server: the s3 profile without its first byte (module note).
    let no_first_byte = ServerSpec {
        label: "s3, no first byte",
        extra_args: ["--ttfb-p50", "0ms", "--ttfb-p99", "0ms"].map(String::from).to_vec(),
        ..ServerSpec::profile("s3")
    };
    let client = ClientSpec { mode: Mode::H1Pool, max_connections: 50, pipeline_depth: 1 };
    let keys = Arc::new(keys(p.objects, p.object_bytes));
    let row_on = |mode, label: &str, server: usize, strategy, note: Option<&str>| Variant {
        label: label.into(),
        workload: NAME,
        server: Some(server),
        client: Some(client.on(mode)),
        task: Task::Scenario(Step::new(OpenAheadRun { strategy, keys: keys.clone(), object_bytes: p.object_bytes })),
        note: note.map(str::to_owned),
        once: false,
    };
    let row =
        |label: &str, server: usize, strategy, note: Option<&str>| row_on(Mode::H1Pool, label, server, strategy, note);
    let mut variants = vec![
        row(NAIVE_ROW, 0, Strategy::OnDemand, None),
        row(OPEN_AHEAD_ROW, 0, Strategy::OpenAhead, Some("open = the consumer's wait in OpenAhead::next for the object's head; window = where the engine's window ended (it starts at 8 and, each time the consumer waits for a head, grows by the objects the consumer could have read in that wait, up to 32)")),
        row(FIXED_ROW, 0, Strategy::OpenAheadFixed, Some("the engine's window held at its start of 8 (max_open 8), as it was before the window grew: what growing adds")),
        row(BOUND_ROW, 1, Strategy::OnDemand, Some("the on-demand reader against the s3 profile with a zero first byte: the object bytes at one connection's rate")),
    ];
    // open-ahead again on the other transports, at the same 50 connections.
    for mode in crate::workload::MODE_ROWS.into_iter().filter(|m| *m != Mode::H1Pool) {
        variants.push(row_on(mode, &open_ahead_label(crate::workload::mode_name(mode)), 0, Strategy::OpenAhead, None));
    }
    let peers: Vec<crate::peers::Peer> = p.peers.iter().copied().filter(|x| PEERS.contains(x)).collect();
    let op =
        crate::peers::PeerOp::ReadInOrder { bucket: SYNTHETIC.into(), keys: keys.clone(), object_size: p.object_bytes };
    // The peer rows repeat like ferry's, interleaved (the driver's fork server pays
    // Python's start-up once; peers.rs).
    variants.extend(crate::peers::op_rows(NAME, &peers, 0, op, " (in order)"));
    let params = json!({
        "objects": p.objects,
        "object_bytes": p.object_bytes,
        "keys": "synthetic/open-ahead/size=655360/part-NNNNNN.parquet",
        "consumer": "one, in key order, each object read to its end",
        "connections": 50,
    });
    Workload {
        notes: vec![
            format!("{} objects of {} KiB read in order by one consumer, s3 profile (30 ms first byte, 90 MB/s per connection); h1-pool of 50 connections (the client's default) for every row, and the open-ahead row again on h1-pipeline (depth 32) and auto.", p.objects, p.object_bytes >> 10),
            "share of time opening: the sum of the consumer's waits for each response head over the wall time (on demand: it bounds what opening ahead can save; open-ahead: what it did not hide).".into(),
            "bandwidth bound: the on-demand reader against a second s3-profile server whose first byte is zero (--ttfb-p50 0ms): what reading in order costs when opening is free; open-ahead / bound is the goal's 'within 10% of the bandwidth bound'.".into(),
            "peer rows (driver.py's read_in_order): none of them opens ahead, so they sit beside the on-demand row; s3fs's open returns before any GET, so it has no open figures.".into(),
        ],
        headline: Some(claim),
        ..Workload::scenario(NAME, size, vec![s3, no_first_byte], variants, p.repeats, params, COLUMNS)
    }
}

/// The claims table's row for `open-ahead`: open-ahead's wall time over on demand against Qubole's 30%, and over the bandwidth bound.
pub fn claim(records: &[RunRecord]) -> Headline {
    let h =
        |published: &str, measured: String, verdict: &str| Headline::new("open-ahead", published, measured, verdict);
    #[allow(unused)]
    let none = || "no paired clean runs".to_string();
    match paired_ratio(records, OPEN_AHEAD_ROW, NAIVE_ROW, "wall_s") {
        Some(r) => {
            let saved = (1.0 - r.median) * 100.0;
            let share = median(records, NAIVE_ROW, "open_share")
                .map(|s| format!("; on demand spent {:.0}% waiting for first bytes", s * 100.0))
                .unwrap_or_default();
            // The goal of "within 10% of the bandwidth bound": the same reader with
            // opening free (open_ahead.rs), paired by repeat.
            let bound = paired_ratio(records, OPEN_AHEAD_ROW, BOUND_ROW, "wall_s")
                .map(|b| {
                    let fixed = paired_ratio(records, FIXED_ROW, BOUND_ROW, "wall_s")
                        .map(|f| format!(", with the window fixed at 8 {:.2} ({:.2}-{:.2})", f.median, f.min, f.max))
                        .unwrap_or_default();
                    format!(
                        "; open-ahead / bandwidth bound (no first byte) {:.2} ({:.2}-{:.2}){fixed}",
                        b.median, b.min, b.max
                    )
                })
                .unwrap_or_default();
            h(
                PUBLISHED,
                format!("open-ahead / on demand wall time {:.2} ({:.2}-{:.2}): {saved:.0}% less scan time, {:.1}x{share}{bound}", r.median, r.min, r.max, 1.0 / r.median),
                judge_percent(saved, 30.0, 30.0),
            )
        }
        None => h(PUBLISHED, none(), "no"),
    }
}

/// `open-ahead` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "open-ahead",
    quick: "64 objects of 640 KiB read in order by one consumer, s3 profile",
    full: "80,000 objects of 640 KiB read in order by one consumer, s3 profile",
    peers: &PEERS,
    in_suite: true,
    default_link: None,
    run: crate::workload::run_defaults::<OpenAheadParams>,
    claim,
};

crate::impl_params!(OpenAheadParams, |size, p, o| crate::runner::run(&open_ahead(size, p), o));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_keys() {
        assert_eq!(OpenAheadParams::new(Size::Full).objects, 80_000);
        let q = OpenAheadParams::new(Size::Quick);
        assert_eq!(q.object_bytes, 640 * 1024);
        let k = keys(3, q.object_bytes);
        assert_eq!(
            k,
            [
                "open-ahead/size=655360/part-000000.parquet",
                "open-ahead/size=655360/part-000001.parquet",
                "open-ahead/size=655360/part-000002.parquet"
            ]
        );
        let w = open_ahead(Size::Quick, &q);
        assert!(w.variants[1].task.step::<OpenAheadRun>().is_some_and(|r| r.strategy == Strategy::OpenAhead));
        // The bound: on demand, on a server of the same profile without a first byte.
        assert!(w.variants[2].task.step::<OpenAheadRun>().is_some_and(|r| r.strategy == Strategy::OpenAheadFixed));
        let bound = &w.variants[3];
        assert_eq!(bound.label, BOUND_ROW);
        assert!(bound.task.step::<OpenAheadRun>().is_some_and(|r| r.strategy == Strategy::OnDemand));
        let args = w.servers[bound.server.unwrap()].args();
        assert!(
            args.windows(2).any(|a| a == ["--profile", "s3"])
                && args.windows(2).any(|a| a == ["--ttfb-p50", "0ms"])
                && args.windows(2).any(|a| a == ["--ttfb-p99", "0ms"]),
            "{args:?}"
        );
        assert!(
            !w.servers[w.variants[0].server.unwrap()].args().iter().any(|a| a == "--ttfb-p50"),
            "the on-demand and open-ahead rows keep the profile's first byte"
        );
        assert!(w.variants.iter().all(|v| !matches!(v.task, Task::NotYet { .. })));
        let mut q = q.clone();
        q.peers = vec![crate::peers::Peer::S3fs, crate::peers::Peer::Rclone, crate::peers::Peer::Boto3];
        let w = open_ahead(Size::Quick, &q);
        let labels: Vec<&str> = w.variants.iter().skip(4).map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["h1-pipeline · open-ahead", "auto · open-ahead", "s3fs (in order)", "boto3 (in order)"]);
        assert_eq!(w.variants[5].client.map(|c| c.mode), Some(Mode::Auto));
        assert!(w.variants[6..].iter().all(|v| matches!(&v.task, Task::Peer { op: crate::peers::PeerOp::ReadInOrder { keys, object_size, .. }, .. } if keys.len() == 64 && *object_size == 640 * 1024)));
        assert!(w.variants.iter().all(|v| !v.once), "peer rows repeat like ferry's");
    }

    fn claim_rec(variant: &str, repeat: usize, figure: &str, v: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set(figure, v);
        r
    }

    #[test]
    fn open_ahead_is_held_against_its_bandwidth_bound_by_repeat() {
        let mut rs = Vec::new();
        // open-ahead / bound by repeat: 1.10, 1.05, 1.02.
        for (k, naive, ahead, bound) in [(1, 2.2, 0.55, 0.50), (2, 2.4, 0.63, 0.60), (3, 2.3, 0.51, 0.50)] {
            rs.push(claim_rec(NAIVE_ROW, k, "wall_s", naive));
            rs.push(claim_rec(OPEN_AHEAD_ROW, k, "wall_s", ahead));
            rs.push(claim_rec(BOUND_ROW, k, "wall_s", bound));
        }
        let h = claim(&rs);
        assert!(h.measured.contains("open-ahead / bandwidth bound (no first byte) 1.05 (1.02-1.10)"), "{}", h.measured);
        assert!(!h.measured.contains("window fixed"), "{}", h.measured);
        // The fixed window's row, paired with the bound the same way: 1.30, 1.25, 1.20.
        for (k, fixed) in [(1, 0.65), (2, 0.75), (3, 0.60)] {
            rs.push(claim_rec(FIXED_ROW, k, "wall_s", fixed));
        }
        let h = claim(&rs);
        assert!(h.measured.contains("open-ahead / bandwidth bound (no first byte) 1.05 (1.02-1.10), with the window fixed at 8 1.25 (1.20-1.30)"), "{}", h.measured);
        // Without the bound's rows the line says nothing of it.
        let h = claim(&rs.iter().filter(|r| r.variant != BOUND_ROW).cloned().collect::<Vec<_>>());
        assert!(!h.measured.contains("window fixed"), "{}", h.measured);
        assert!(!h.measured.contains("bandwidth bound"), "{}", h.measured);
        assert!(h.measured.contains("open-ahead / on demand wall time"), "{}", h.measured);
    }
}
