//! `listing` (docs/lab/README.md section 4; Qubole: 17,520 LIST calls -> 106, 8x faster).
//!
//! Layout: D directories x 6 files, `listing/part=NNNNN/file-K.parquet`, a tiny body each
//! (full: 17,520 dirs = 105,120 keys; quick: 175 dirs = 1,050 keys), PUT once with
//! bounded concurrency into one `ferry serve --profile s3 --memory` subprocess (LIST
//! latency p50 60 ms: the cost that the strategies trade against each other).
//!
//! Strategies (rows), interleaved across repeats, each with a fresh h1-pool client:
//!
//! - per-directory: one ListObjectsV2 per directory (prefix `dir/`, delimiter `/`), at most
//!   `per_dir_concurrency` in flight (1 as Hive/Presto did; the full size defaults to 16,
//!   since 17,520 serial calls at 60 ms take ~17-20 minutes);
//! - flat + merge join: `ferry_engine::list_flat_pruned`, one recursive listing of the
//!   parent prefix (no delimiter, 1,000 keys per page) merge-joined against the sorted set
//!   of directories of interest (all of them here), on one connection;
//! - key-range parallel: `ferry_engine::list_parallel` over the parent prefix with the
//!   engine's defaults (16 LISTs in flight, up to 64 key ranges), on 16 connections, then
//!   the same directory filter in the bench (the engine lists everything under a prefix);
//! - per-directory again on each HTTP/1.1 transport (h1-pool, h1-pipeline, auto), 16
//!   LISTs in flight on 16 connections ([`crate::workload::MODE_ROWS`]): the claims table sets auto beside
//!   the best forced mode here as in the other workloads.
//!
//! Peers (s5cmd `ls`, rclone `lsf`; `--peers`): peers.rs's `list` op, every key under the
//! parent prefix flat, the same work as the flat row minus the merge join (every directory
//! is of interest here, so the keys are the same). Their LIST calls are the server's count
//! of ListObjects requests, their keys the ones they printed.
//!
//! LIST calls: the per-directory row counts pages received in the bench; the engine rows
//! report their own `ListStats::requests`; both are cross-checked against the transport's
//! `requests_sent`. After timing, the keys seen are checked against the
//! layout: every key exactly once (`keys_missing`, `keys_duplicated`).
//!
//! It runs on the one runner: each strategy is a [`ListingRun`] step (scenario.rs) whose
//! setup PUTs the layout once, the peers are the runner's peer rows, and the table is the
//! workload's own ([`Shape::Own`]: two figures share a cell).

use crate::options::{Outcome, RunOptions};
use crate::record::RunRecord;
use crate::scenario::Step;
use crate::stats::Spread;
use crate::sys;
use crate::verdict::{faster_or_slower, judge_ratio, median, paired_ratio, x, Headline};
use crate::workload::{ClientSpec, ServerSpec, Shape, Size, Task, Variant, Workload};
use anyhow::Result;
use bytes::Bytes;
use ferry_store::{ListParams, Mode, S3Client};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub const NAME: &str = "listing";
pub const PARENT: &str = "listing/";
pub const FILES_PER_DIR: usize = 6;
pub const PUBLISHED: &str = "17,520 calls -> 106, 8x faster (Qubole)";
pub const KEY_RANGE_ROW: &str = "key-range parallel (list_parallel)";

/// LISTs in flight in the per-directory rows repeated on each transport
/// ([`crate::workload::MODE_ROWS`]): per-directory, because it is the strategy of many small
/// requests in flight, where the transports differ (the flat row lists on one connection,
/// key-range parallel makes a handful of calls at the quick size); 16, the full size's
/// per-directory concurrency and the engine's listing concurrency
/// ([`ferry_engine::ListOptions`]), so at that size the h1-pool mode row repeats the
/// per-directory row's work.
pub const MODE_ROWS_CONCURRENCY: usize = 16;

/// The label of the per-directory row on the transport named `mode_name`.
pub fn mode_row_label(mode_name: &str) -> String {
    crate::workload::mode_row_label(mode_name, &format!("per-directory (concurrency {MODE_ROWS_CONCURRENCY})"))
}

/// Parameters of `listing`.
#[derive(Clone, Debug, PartialEq)]
pub struct ListingParams {
    pub dirs: usize,
    pub files_per_dir: usize,
    pub body_size: usize,
    pub repeats: usize,
    /// ListObjectsV2 calls in flight for the per-directory strategy.
    pub per_dir_concurrency: usize,
    /// Keys per page of the flat listing (S3's maximum, 1,000).
    pub page_size: u32,
    pub put_concurrency: usize,
    pub bucket: String,
    /// Peer rows (filtered to [`PEERS`]; the CLI's `--peers` fills it).
    pub peers: Vec<crate::peers::Peer>,
}

/// The peers set beside listing (docs/lab/README.md section 5).
pub const PEERS: [crate::peers::Peer; 2] = [crate::peers::Peer::S5cmd, crate::peers::Peer::Rclone];

/// A peer's row label.
pub fn peer_label(peer: crate::peers::Peer) -> String {
    let how = match peer {
        crate::peers::Peer::S5cmd => "ls",
        crate::peers::Peer::Rclone => "lsf",
        _ => "list",
    };
    format!("{} {how} (flat)", peer.name())
}

impl ListingParams {
    pub fn new(size: Size) -> ListingParams {
        let (dirs, per_dir_concurrency) = match size {
            // Quick: 175 serial LIST calls at ~70 ms are ~12 s a repeat (1,752 took ~7
            // minutes for the three repeats and the PUTs).
            Size::Quick => (175, 1),
            Size::Full => (17_520, 16),
        };
        ListingParams {
            dirs,
            files_per_dir: FILES_PER_DIR,
            body_size: 16,
            repeats: 3,
            per_dir_concurrency,
            page_size: 1_000,
            put_concurrency: 64,
            bucket: "bench".into(),
            peers: Vec::new(),
        }
    }

    pub fn keys(&self) -> usize {
        self.dirs * self.files_per_dir
    }

    pub fn per_dir_label(&self) -> String {
        format!("per-directory (concurrency {})", self.per_dir_concurrency)
    }

    pub fn flat_label(&self) -> String {
        format!("flat + merge join ({} keys/page)", self.page_size)
    }

    /// LIST calls in flight for the key-range parallel row (the engine's default).
    pub fn key_range_concurrency(&self) -> usize {
        ferry_engine::ListOptions::default().concurrency
    }
}

/// `listing/part=NNNNN/`, in byte-wise (= listing) order.
pub fn listing_dirs(dirs: usize) -> Vec<String> {
    (0..dirs).map(|d| format!("{PARENT}part={d:05}/")).collect()
}

/// `listing/part=NNNNN/file-K.parquet`, directory-major, in listing order (K < 10).
pub fn listing_keys(dirs: usize, files_per_dir: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(dirs * files_per_dir);
    for d in listing_dirs(dirs) {
        for k in 0..files_per_dir {
            out.push(format!("{d}file-{k}.parquet"));
        }
    }
    out
}

/// What one strategy's run produced.
#[derive(Debug, Default)]
pub struct ListResult {
    /// ListObjectsV2 requests, counted as pages received (one request each).
    pub calls: u64,
    /// Every key returned by the listing, before any filtering.
    pub keys_seen: u64,
    /// The keys the strategy kept (in a directory of interest).
    pub keys: Vec<String>,
    pub errors: u64,
    pub samples: Vec<String>,
}

/// One ListObjectsV2 (prefix = dir, delimiter "/") per directory, at most `concurrency`
/// in flight.
pub async fn list_per_directory(
    client: &S3Client,
    bucket: &str,
    dirs: &[String],
    concurrency: usize,
) -> Result<ListResult> {
    let sem = Arc::new(Semaphore::new(concurrency.max(1)));
    let calls = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    let mut out = ListResult::default();
    let mut pending: Vec<std::result::Result<Vec<String>, String>> = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let permit = sem.clone().acquire_owned().await?;
        let (c, b, d, calls) = (client.clone(), bucket.to_owned(), dir.clone(), calls.clone());
        set.spawn(async move {
            let params = ListParams { prefix: Some(d.clone()), delimiter: Some("/".into()), ..ListParams::default() };
            let mut pages = c.list_objects_v2(&b, params);
            let mut keys = Vec::new();
            let mut err = None;
            while let Some(p) = pages.next().await {
                calls.fetch_add(1, Relaxed);
                match p {
                    Ok(p) => keys.extend(p.objects.into_iter().map(|o| o.key)),
                    Err(e) => {
                        err = Some(format!("LIST {b}/{d}: {e:#}"));
                        break;
                    }
                }
            }
            drop(permit);
            match err {
                Some(e) => Err(e),
                None => Ok(keys),
            }
        });
        while let Some(done) = set.try_join_next() {
            pending.push(done?);
        }
    }
    while let Some(done) = set.join_next().await {
        pending.push(done?);
    }
    for r in pending {
        match r {
            Ok(keys) => {
                out.keys_seen += keys.len() as u64;
                out.keys.extend(keys);
            }
            Err(e) => {
                out.errors += 1;
                if out.samples.len() < 5 {
                    out.samples.push(e);
                }
            }
        }
    }
    out.calls = calls.load(Relaxed);
    Ok(out)
}

/// `ferry_engine::list_flat_pruned`: one recursive listing of `parent` (`page_size` keys
/// per page) merge-joined against `dirs`.
pub async fn list_flat(
    client: &S3Client,
    bucket: &str,
    parent: &str,
    dirs: &[String],
    page_size: u32,
) -> Result<ListResult> {
    let opts = ferry_engine::ListOptions { page_size, ..ferry_engine::ListOptions::default() };
    let listing = ferry_engine::list_flat_pruned(
        &ferry_engine::Engine::new(client.clone()),
        bucket,
        parent,
        dirs.iter().cloned(),
        &opts,
    );
    Ok(engine_result(listing, None, &format!("LIST {bucket}/{parent} (flat)")).await)
}

/// `ferry_engine::list_parallel` over `parent`, then the directory filter (`dirs` sorted).
pub async fn list_key_range(client: &S3Client, bucket: &str, parent: &str, dirs: &[String]) -> Result<ListResult> {
    let listing = ferry_engine::list_parallel(
        &ferry_engine::Engine::new(client.clone()),
        bucket,
        parent,
        &ferry_engine::ListOptions::default(),
    );
    Ok(engine_result(listing, Some(dirs), &format!("LIST {bucket}/{parent} (key ranges)")).await)
}

/// Drains an engine listing; keeps the keys whose directory is in `dirs` (all when `None`).
async fn engine_result(mut listing: ferry_engine::Listing, dirs: Option<&[String]>, what: &str) -> ListResult {
    let mut out = ListResult::default();
    while let Some(e) = listing.next().await {
        match e {
            Ok(o) => {
                if dirs.is_none_or(|d| {
                    d.binary_search_by(|x| x.as_str().cmp(ferry_engine::listing::dir_of(&o.key))).is_ok()
                }) {
                    out.keys.push(o.key);
                }
            }
            Err(e) => {
                out.errors += 1;
                out.samples.push(format!("{what}: {e:#}"));
                break;
            }
        }
    }
    let st = listing.stats();
    out.calls = st.requests;
    out.keys_seen = st.keys_seen;
    out
}

/// Keys of `expected` missing from `seen`, and keys seen more than once.
pub fn check_keys(expected: &[String], seen: &[String]) -> (u64, u64) {
    let mut counts: std::collections::HashMap<&str, u32> = expected.iter().map(|k| (k.as_str(), 0)).collect();
    let mut extra = 0u64;
    for k in seen {
        match counts.get_mut(k.as_str()) {
            Some(c) => *c += 1,
            None => extra += 1,
        }
    }
    let missing = counts.values().filter(|c| **c == 0).count() as u64;
    let dup = counts.values().map(|c| c.saturating_sub(1) as u64).sum::<u64>() + extra;
    (missing, dup)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    PerDirectory,
    Flat,
    KeyRange,
}

/// One strategy's step (scenario.rs). The layout is PUT once per server by whichever step
/// the runner prepares first; the three steps share `put_s`, so every record carries the
/// PUTs' time as `setup_put_s`. A run lists with its strategy, then checks the keys seen
/// against the layout (untimed).
#[derive(Clone, Debug)]
pub struct ListingRun {
    pub strategy: Strategy,
    pub bucket: String,
    pub dirs: Arc<Vec<String>>,
    pub keys: Arc<Vec<String>>,
    pub body_size: usize,
    pub page_size: u32,
    pub per_dir_concurrency: usize,
    pub put_concurrency: usize,
    /// Seconds the layout's PUTs took, as f64 bits (0: not yet).
    put_s: Arc<AtomicU64>,
}

impl PartialEq for ListingRun {
    fn eq(&self, o: &ListingRun) -> bool {
        (self.strategy, &self.bucket, &self.dirs, &self.keys, self.body_size, self.page_size)
            == (o.strategy, &o.bucket, &o.dirs, &o.keys, o.body_size, o.page_size)
            && (self.per_dir_concurrency, self.put_concurrency) == (o.per_dir_concurrency, o.put_concurrency)
    }
}

crate::impl_scenario!(ListingRun);

impl ListingRun {
    pub fn setup_key(&self) -> String {
        format!("listing: {} keys in {}", self.keys.len(), self.bucket)
    }

    pub async fn setup(&self, client: &S3Client) -> Result<()> {
        let t = Instant::now();
        crate::measure::create_bucket_if_missing(client, &self.bucket).await?;
        let body = Bytes::from(vec![b'x'; self.body_size]);
        let objects = self.keys.iter().map(|k| (k.clone(), body.clone()));
        crate::measure::put_all(client, &self.bucket, objects, self.put_concurrency).await?;
        self.put_s.store(t.elapsed().as_secs_f64().to_bits(), Relaxed);
        Ok(())
    }

    pub fn params(&self) -> Map<String, Value> {
        Map::new()
    }

    pub async fn run(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        let cpu0 = sys::cpu_time();
        let t0 = Instant::now();
        let res = match self.strategy {
            Strategy::PerDirectory => list_per_directory(c, &self.bucket, &self.dirs, self.per_dir_concurrency).await,
            Strategy::Flat => list_flat(c, &self.bucket, PARENT, &self.dirs, self.page_size).await,
            Strategy::KeyRange => list_key_range(c, &self.bucket, PARENT, &self.dirs).await,
        }?;
        let wall = t0.elapsed();
        let cpu = sys::cpu_time().saturating_sub(cpu0);
        let stats = c.transport().stats();
        let (missing, dup) = check_keys(&self.keys, &res.keys);
        let secs = wall.as_secs_f64();
        rec.set("list_calls", res.calls as f64);
        rec.set("requests_sent", stats.requests_sent as f64);
        rec.set("requests_resent", stats.requests_resent as f64);
        rec.set("connections_opened", stats.connections_opened as f64);
        rec.set("keys_seen", res.keys_seen as f64);
        rec.set("keys_kept", res.keys.len() as f64);
        rec.set("keys_expected", self.keys.len() as f64);
        rec.set("keys_missing", missing as f64);
        rec.set("keys_duplicated", dup as f64);
        rec.set("wall_s", secs);
        rec.set("calls_per_s", res.calls as f64 / secs);
        rec.set("client_cpu_s", cpu.as_secs_f64());
        rec.set("errors", res.errors as f64);
        rec.set("setup_put_s", f64::from_bits(self.put_s.load(Relaxed)));
        rec.error_samples = res.samples;
        if res.errors > 0 || missing > 0 || dup > 0 {
            rec.status = "errors".into();
            if missing > 0 || dup > 0 {
                rec.error_samples.push(format!("{missing} keys missing, {dup} duplicated or unexpected"));
            }
        }
        Ok(())
    }
}

pub fn params_json(p: &ListingParams) -> Map<String, Value> {
    json!({
        "dirs": p.dirs,
        "files_per_dir": p.files_per_dir,
        "keys": p.keys(),
        "body_size": p.body_size,
        "per_dir_concurrency": p.per_dir_concurrency,
        "page_size": p.page_size,
        "put_concurrency": p.put_concurrency,
        "key_layout": "listing/part=NNNNN/file-K.parquet",
        "dirs_of_interest": "all",
    })
    .as_object()
    .cloned()
    .unwrap_or_default()
}

/// The listing workload as data: one s3 server, the layout PUT once, then per-directory,
/// flat and key-range parallel (and the peers' flat listings) interleaved over the repeats.
pub fn listing(size: Size, p: &ListingParams) -> Workload {
    let put_s = Arc::new(AtomicU64::new(0));
    let (dirs, keys) = (Arc::new(listing_dirs(p.dirs)), Arc::new(listing_keys(p.dirs, p.files_per_dir)));
    let step_at = |strategy, per_dir_concurrency| ListingRun {
        strategy,
        bucket: p.bucket.clone(),
        dirs: dirs.clone(),
        keys: keys.clone(),
        body_size: p.body_size,
        page_size: p.page_size,
        per_dir_concurrency,
        put_concurrency: p.put_concurrency,
        put_s: put_s.clone(),
    };
    let step = |strategy| step_at(strategy, p.per_dir_concurrency);
    let row = |label: String, strategy, conns: usize, note: Option<String>| Variant {
        label,
        workload: NAME,
        server: Some(0),
        client: Some(ClientSpec { mode: Mode::H1Pool, max_connections: conns.max(1), pipeline_depth: 1 }),
        task: Task::Scenario(Step::new(step(strategy))),
        note,
        once: false,
    };
    let mode_row = |mode| Variant {
        label: mode_row_label(crate::workload::mode_name(mode)),
        workload: NAME,
        server: Some(0),
        client: Some(
            ClientSpec { mode: Mode::H1Pool, max_connections: MODE_ROWS_CONCURRENCY, pipeline_depth: 1 }.on(mode),
        ),
        task: Task::Scenario(Step::new(step_at(Strategy::PerDirectory, MODE_ROWS_CONCURRENCY))),
        note: None,
        once: false,
    };
    let per_dir_note = (p.per_dir_concurrency != 1).then(|| {
        format!(
            "concurrency {} rather than Hive/Presto's 1: {} serial calls at ~60 ms would take ~{:.0} minutes",
            p.per_dir_concurrency,
            p.dirs,
            p.dirs as f64 * 0.072 / 60.0
        )
    });
    let mut variants = vec![
        row(p.per_dir_label(), Strategy::PerDirectory, p.per_dir_concurrency, per_dir_note),
        row(p.flat_label(), Strategy::Flat, 1, None),
        row(KEY_RANGE_ROW.to_string(), Strategy::KeyRange, p.key_range_concurrency(), None),
    ];
    variants.extend(crate::workload::MODE_ROWS.into_iter().map(mode_row));
    for peer in p.peers.iter().copied().filter(|x| PEERS.contains(x)) {
        variants.push(Variant {
            label: peer_label(peer),
            workload: NAME,
            server: Some(0),
            client: None,
            task: Task::Peer {
                peer,
                op: crate::peers::PeerOp::List {
                    bucket: p.bucket.clone(),
                    prefix: PARENT.into(),
                    expect_keys: Some(keys.len()),
                },
                before: None,
            },
            note: None,
            once: false,
        });
    }
    Workload {
        headline: Some(claim),
        shape: Shape::Own(table),
        ..Workload::scenario(
            NAME,
            size,
            vec![ServerSpec::profile("s3")],
            variants,
            p.repeats,
            Value::Object(params_json(p)),
            &[],
        )
    }
}

/// Runs the listing workload through the one runner.
pub fn run(size: Size, p: &ListingParams, opts: &RunOptions) -> Result<Outcome> {
    crate::runner::run(&listing(size, p), opts)
}

/// The parameters a [`listing`] workload was built with, read back from its data.
fn params_of(w: &Workload) -> ListingParams {
    let n = |k: &str| w.params.get(k).and_then(Value::as_u64);
    let mut p = ListingParams::new(w.size);
    p.dirs = n("dirs").map_or(p.dirs, |v| v as usize);
    p.files_per_dir = n("files_per_dir").map_or(p.files_per_dir, |v| v as usize);
    p.per_dir_concurrency = n("per_dir_concurrency").map_or(p.per_dir_concurrency, |v| v as usize);
    p.page_size = n("page_size").map_or(p.page_size, |v| v as u32);
    p.repeats = w.repeats;
    p.peers = w
        .variants
        .iter()
        .filter_map(|v| match &v.task {
            Task::Peer { peer, .. } => Some(*peer),
            _ => None,
        })
        .collect();
    p
}

fn cell(rs: &[&RunRecord], figure: &str, digits: usize) -> String {
    crate::report::cell(rs, figure, 1.0, digits)
}

/// Per-repeat `den.figure / num.figure` (how many times fewer / faster the flat row is).
fn ratios(records: &[RunRecord], num: &str, den: &str, figure: &str) -> Vec<f64> {
    crate::record::per_repeat_ratios(records, num, den, figure, |r| r.status == "ok")
}

/// The listing's own table and lines ([`Shape::Own`]), under the runner's heading: two
/// figures share a cell (missing / dup keys), and the per-directory row's label carries
/// its concurrency.
pub fn table(w: &Workload, records: &[RunRecord]) -> String {
    let mut s = String::new();
    let p = &params_of(w);
    let _ =
        writeln!(s, "{} dirs x {} files = {} keys, s3 profile (LIST p50 60 ms)\n", p.dirs, p.files_per_dir, p.keys());
    let _ = writeln!(s, "| strategy | LIST calls | keys seen | wall s | client CPU s | client CPU ms / request | TCP conns opened | missing / dup keys | errors |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    let (per_dir, flat) = (p.per_dir_label(), p.flat_label());
    let peer_rows: Vec<String> = p.peers.iter().copied().filter(|x| PEERS.contains(x)).map(peer_label).collect();
    let mode_rows: Vec<String> =
        crate::workload::MODE_ROWS.into_iter().map(|m| mode_row_label(crate::workload::mode_name(m))).collect();
    let rows = [per_dir.as_str(), flat.as_str(), KEY_RANGE_ROW].into_iter().chain(mode_rows.iter().map(String::as_str));
    for l in rows.chain(peer_rows.iter().map(String::as_str)) {
        let rs: Vec<&RunRecord> = records.iter().filter(|r| r.variant == l).collect();
        let _ = writeln!(
            s,
            "| {l} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            cell(&rs, "list_calls", 0),
            cell(&rs, "keys_seen", 0),
            cell(&rs, "wall_s", 2),
            cell(&rs, "client_cpu_s", 2),
            cell(&rs, crate::record::CPU_PER_1K_REQUESTS, 3),
            cell(&rs, "connections_opened", 0),
            cell(&rs, "keys_missing", 0),
            cell(&rs, "keys_duplicated", 0),
            cell(&rs, "errors", 0),
        );
    }
    let _ = writeln!(s);
    let calls = Spread::of(&ratios(records, &per_dir, &flat, "list_calls"));
    let wall = Spread::of(&ratios(records, &per_dir, &flat, "wall_s"));
    let med = |f: &str, l: &str| {
        Spread::of(&records.iter().filter(|r| r.variant == l).filter_map(|r| r.figure(f)).collect::<Vec<_>>())
            .map(|s| s.median)
    };
    let measured = match (med("list_calls", &per_dir), med("list_calls", &flat), calls, wall) {
        (Some(a), Some(b), Some(c), Some(w)) => format!(
            "{a:.0} calls -> {b:.0} ({:.0}x fewer), {:.1}x faster (per-repeat range {:.1}-{:.1}x, {} repeats)",
            c.median, w.median, w.min, w.max, w.n
        ),
        _ => "no paired clean runs".into(),
    };
    let _ = writeln!(s, "- per-directory / flat: published: {PUBLISHED} / measured: {measured}");
    let kr = Spread::of(&ratios(records, &flat, KEY_RANGE_ROW, "wall_s"));
    let kr_calls = med("list_calls", KEY_RANGE_ROW);
    let _ = match (kr, kr_calls) {
        (Some(w), Some(c)) => writeln!(
            s,
            "- key-range parallel (list_parallel, {} LISTs in flight): {c:.0} calls, {} than flat (per repeat)",
            p.key_range_concurrency(),
            crate::verdict::faster_or_slower(&w),
        ),
        _ => writeln!(s, "- key-range parallel: no paired clean runs"),
    };
    if p.per_dir_concurrency != 1 {
        let _ = writeln!(
            s,
            "- per-directory ran with {} calls in flight, not Hive/Presto's 1 ({} serial calls at ~60 ms would take ~{:.0} minutes), so its wall time and the speed-up are not the published serial baseline; the call counts are.",
            p.per_dir_concurrency,
            p.dirs,
            p.dirs as f64 * 0.072 / 60.0
        );
    }
    let _ = writeln!(s, "- LIST calls: pages received (per-directory, counted in the bench) or the engine's ListStats::requests; requests_sent in the JSON is the transport's count. Every key is checked exactly once after timing (missing / dup).");
    let _ = writeln!(
        s,
        "- client CPU: getrusage(RUSAGE_SELF) of the bench process around each run; the server is another process."
    );
    for l in &peer_rows {
        if let Some(r) = records.iter().find(|r| r.variant == *l) {
            let _ = match r.status.as_str() {
                "absent" => writeln!(s, "- {l}: {}", r.note.as_deref().unwrap_or("absent")),
                _ => writeln!(
                    s,
                    "- {l}: {}",
                    r.client.as_ref().and_then(|c| c["how"].as_str()).unwrap_or("peers.rs list op")
                ),
            };
        }
    }
    crate::report::not_clean(&mut s, records);
    s
}

/// The claims table's row for `listing`: per-directory LIST against flat + merge join (calls and wall time) against Qubole's 8x.
pub fn claim(records: &[RunRecord]) -> Headline {
    let h = |published: &str, measured: String, verdict: &str| Headline::new("listing", published, measured, verdict);
    #[allow(unused)]
    let none = || "no paired clean runs".to_string();
    let published = PUBLISHED;
    let find = |p: &str| records.iter().find(|r| r.variant.starts_with(p)).map(|r| r.variant.clone());
    match (find("per-directory"), find("flat")) {
        (Some(pd), Some(fl)) => {
            match (paired_ratio(records, &pd, &fl, "list_calls"), paired_ratio(records, &pd, &fl, "wall_s")) {
                (Some(_), Some(w)) => {
                    let (a, b) = (
                        median(records, &pd, "list_calls").unwrap_or(0.0),
                        median(records, &fl, "list_calls").unwrap_or(0.0),
                    );
                    let mut kr = paired_ratio(records, &fl, KEY_RANGE_ROW, "wall_s")
                        .map(|k| format!("; key-range parallel {} than flat", faster_or_slower(&k)))
                        .unwrap_or_default();
                    for p in PEERS {
                        let l = peer_label(p);
                        if let (Some(w), Some(c)) = (median(records, &l, "wall_s"), median(records, &l, "list_calls")) {
                            kr.push_str(&format!("; {l} {c:.0} calls in {w:.2} s"));
                        }
                    }
                    h(published, format!("{a:.0} calls -> {b:.0}, flat {} faster{kr} (the call ratio scales with dirs: quick has fewer)", x(&w)), judge_ratio(w.median, 8.0, 8.0))
                }
                _ => h(published, none(), "no"),
            }
        }
        _ => h(published, none(), "no"),
    }
}

/// `listing` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "listing",
    quick: "175 directories x 6 files (1,050 keys), per-directory LISTs one at a time, s3 profile",
    full: "17,520 directories x 6 files (105,120 keys), per-directory LISTs 16 at a time, s3 profile",
    peers: &PEERS,
    in_suite: true,
    default_link: None,
    run: crate::workload::run_defaults::<ListingParams>,
    claim,
};

crate::impl_params!(ListingParams, |size, p, o| run(size, p, o));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_full_and_quick() {
        let full = ListingParams::new(Size::Full);
        assert_eq!((full.dirs, full.files_per_dir, full.keys()), (17_520, 6, 105_120));
        assert_eq!(full.per_dir_concurrency, 16);
        let quick = ListingParams::new(Size::Quick);
        assert_eq!((quick.dirs, quick.files_per_dir, quick.keys()), (175, 6, 1_050));
        assert_eq!(quick.per_dir_concurrency, 1);
        assert_eq!(quick.page_size, 1_000);

        let keys = listing_keys(full.dirs, full.files_per_dir);
        assert_eq!(keys.len(), 105_120);
        assert_eq!(keys[0], "listing/part=00000/file-0.parquet");
        assert_eq!(keys[5], "listing/part=00000/file-5.parquet");
        assert_eq!(keys[6], "listing/part=00001/file-0.parquet");
        assert_eq!(keys[105_119], "listing/part=17519/file-5.parquet");
        let unique: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len());
        // Generated in listing (byte-wise) order, so the merge join sees both sides sorted.
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let dirs = listing_dirs(quick.dirs);
        assert_eq!(dirs.len(), 175);
        assert_eq!(dirs[174], "listing/part=00174/");
        assert!(dirs.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(listing_keys(quick.dirs, quick.files_per_dir).len(), 1_050);
        // 1,000 keys per page: the published 106 calls for 105,120 keys.
        assert_eq!(keys.len().div_ceil(1_000), 106);
    }

    #[test]
    fn peer_labels_name_the_command() {
        assert_eq!(peer_label(crate::peers::Peer::S5cmd), "s5cmd ls (flat)");
        assert_eq!(peer_label(crate::peers::Peer::Rclone), "rclone lsf (flat)");
    }

    #[test]
    fn check_keys_counts_missing_and_duplicates() {
        let e = listing_keys(2, 2);
        assert_eq!(check_keys(&e, &e), (0, 0));
        let mut seen = e.clone();
        seen.pop();
        seen.push(e[0].clone());
        seen.push("other".into());
        assert_eq!(check_keys(&e, &seen), (1, 2));
    }
}
