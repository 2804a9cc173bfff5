//! `mixed-hol` (docs/lab/README.md section 4; Onehouse: small-object latency 15x worse when
//! small GETs share an SDK's connection pool with large ones).
//!
//! ## The model
//!
//! Onehouse's case is a steady service, not a burst: a table service keeps many large
//! ranged reads in flight through the SDK's pool (50 connections), and metadata-sized GETs
//! arrive now and then, each waiting for a connection behind whatever large reads are
//! queued. So one run here has two parts, started together:
//!
//! - load (loaded rows only): `large_in_flight` workers (100, twice the pool's 50
//!   connections) each GET the next 8 MiB part of the large objects, over and over, until
//!   the smalls are done. The pool can carry 50 at once, so ~50 more always wait in its
//!   queue; the parts cycle over 8 synthetic objects (`synthetic/mixed-hol/size=N/large-K`,
//!   nothing to PUT);
//! - smalls: `smalls` GETs (sizes log-uniform 4 KiB-1 MiB, seeded; PUT once per server,
//!   spread over 16 prefixes so the per-prefix request limit is not what is measured)
//!   arriving open-loop at `small_rate` per second, evenly spaced, whatever the client's
//!   state (an arrival never waits for an earlier GET). At 100/s and ~35 ms each that is
//!   ~4 in flight: well under any client's capacity, so unloaded they never queue.
//!
//! A small GET's latency runs from its scheduled arrival to the end of its body (measuring
//! from the scheduled instant, not from when the task got to run, keeps a stalled client
//! from hiding its own queueing). The loaded/unloaded ratio of p50 and p99 per client is
//! the effect: h1-pool (50 connections, the SDK default), auto (the smalls carry
//! `GetParams::size_hint`, as after a listing, so auto sends them down its pipeline lane
//! while the ranged parts stay on the pool), h2 (small streams avoid connections carrying
//! bulk streams; against a second server with `--h2 on`, the s3 profile being HTTP/1.1
//! only like AWS S3), and h1-pipeline (everything pipelined, smalls behind large parts:
//! the case pipelining alone makes worse). The smalls start after a short warm-up so the
//! load has filled the pool, as long as each client's load takes to reach its rate
//! (`load_warmup` for auto and h2, whose controller and windows ramp; shorter for the
//! pool, the pipeline and the peers, which send the whole load at once).
//!
//!
//! Large goodput is the bytes of large parts received while the smalls ran, over that
//! time, counted chunk by chunk as they arrive ([`LoadWindow`]), whichever part they belong
//! to, so parts that straddle either end of the window still count.
//!
//! Large objects "done" (the goal: within 10% of the link-limited time): a loaded run's
//! load never finishes, so done is a time from a rate, the large bytes over the loaded
//! rate, held against the same client's same load alone over the last `load_alone` of its
//! warm-up (`large_done_over_alone`, goal <= 1.10). The adjacent span of the same run is
//! the reference because two shared cores drift between runs by tens of percent. Across a
//! link (`--link`) the link's own rate is a second reference (`large_done_over_link`) and
//! the connections each client held while the smalls ran are recorded.
//! `--auto-max-connections` runs the cap map instead: the pool and one auto row per cap.
//!
//! The figures these rows gave, the cap map, the link runs and whether the lab reproduces
//! Onehouse's 15x (and for whom): docs/lab/bench-mixed-hol.md.

use crate::measure::{body, cdf, get_drain, log_uniform_sizes, set_percentiles, Errors, Meter};
use crate::record::RunRecord;
use crate::scenario::Step;
use crate::stats::Spread;
use crate::verdict::{judge_ratio, paired_ratio, x, x2, Headline};
use crate::workload::{ClientSpec, Column, ServerSpec, Size, Task, Variant, Workload};
use anyhow::{Context, Result};
use ferry_store::{GetParams, Mode, ObjectRef, RangeSpec, S3Client};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

pub const NAME: &str = "mixed-hol";
pub const PUBLISHED: &str = "small-object latency 15x worse beside large GETs in an SDK pool (Onehouse)";
pub const BUCKET: &str = "bench";
pub const SYNTHETIC: &str = "synthetic";

#[derive(Clone, Debug, PartialEq)]
pub struct MixedHolParams {
    pub larges: usize,
    pub large_bytes: u64,
    /// Bytes per ranged read of a large object.
    pub part_bytes: u64,
    /// Ranged large reads kept in flight while the smalls arrive.
    pub large_in_flight: usize,
    pub smalls: usize,
    /// Small GETs arriving per second (open loop).
    pub small_rate: f64,
    pub small_min: u64,
    pub small_max: u64,
    pub seed: u64,
    pub prefixes: usize,
    /// Connections of every client (50: the AWS SDKs' default pool).
    pub connections: usize,
    /// Requests in flight per pipelined connection (h1-pipeline and auto).
    pub pipeline_depth: usize,
    /// Load before the first small arrives, for the clients whose load ramps up (auto's
    /// connection controller, h2's flow-control windows): the ramp, then `load_alone`.
    pub load_warmup: Duration,
    /// The same for the clients that send the whole load at once (h1-pool, h1-pipeline):
    /// at full rate once the first parts' bytes come back.
    pub load_warmup_at_once: Duration,
    /// The same for the peers' rows (their load threads or tasks start, then send at once).
    pub load_warmup_peers: Duration,
    /// The last part of every warm-up, over which the large parts' rate alone is measured
    /// (the link-limited reference of "large objects done").
    pub load_alone: Duration,
    pub repeats: usize,
    pub put_concurrency: usize,
    /// Peer rows (filtered to [`PEERS`]; the CLI's `--peers` fills it).
    pub peers: Vec<crate::peers::Peer>,
    /// Also the extra [`SMALL_POOL`] row.
    pub small_pool_row: bool,
    /// The cap map (`--auto-max-connections 24,32,40,50`): when not empty, the rows are
    /// the h1-pool and one auto row per cap, auto's hard cap on connections set to it
    /// (module note, "Fewer connections"); no h2, pipeline or extra rows.
    pub auto_caps: Vec<usize>,
    /// The emulated link the run crosses (`--link`; `None`: loopback). With one, every
    /// loaded row also reports the link-limited time of the large objects, and an
    /// [`IPERF3_ROW`] measures the link once per workload run (module note, "On a link").
    pub link: Option<ferry_link::Preset>,
}

/// The peers beside mixed-hol: the SDK-pool clients the published case is about (boto3
/// with its default pool of 10 and tuned to the connections), the CRT and obstore.
pub const PEERS: [crate::peers::Peer; 4] = [
    crate::peers::Peer::Boto3,
    crate::peers::Peer::Boto3Tuned,
    crate::peers::Peer::Awscrt,
    crate::peers::Peer::Obstore,
];

impl MixedHolParams {
    pub fn new(size: Size) -> MixedHolParams {
        MixedHolParams {
            larges: 8,
            large_bytes: match size {
                Size::Quick => 64 << 20,
                Size::Full => 256 << 20,
            },
            part_bytes: 8 << 20,
            large_in_flight: 100,
            // Quick: 30 arrivals at 100/s, a 0.3 s window: each small still meets ~50 queued
            // parts, p99 of 30 is their largest, and the workload fits its minute (docs/lab/bench-quick-sizes.md;
            // `ferry bench mixed-hol --quick` re-measures it).
            smalls: match size {
                Size::Quick => 30,
                Size::Full => 2_000,
            },
            small_rate: 100.0,
            small_min: 4 << 10,
            small_max: 1 << 20,
            seed: 7,
            prefixes: 16,
            connections: 50,
            pipeline_depth: 16,
            // Quick: 1 s for auto and h2, whose controller and windows reach their steady
            // rate at 0.5-0.8 s (series large_warmup_bytes of `ferry bench mixed-hol --quick
            // --peers none`; docs/lab/bench-quick-sizes.md). The ramp is bulk-get's and bulk-wan's to show.
            load_warmup: match size {
                Size::Quick => Duration::from_secs(1),
                Size::Full => Duration::from_secs(2),
            },
            // Quick: 0.2 s of ramp, then the alone span (0.5 s in all).
            load_warmup_at_once: match size {
                Size::Quick => Duration::from_millis(500),
                Size::Full => Duration::from_secs(2),
            },
            // Quick: 0.4 s of ramp, then the alone span (0.7 s in all).
            load_warmup_peers: match size {
                Size::Quick => Duration::from_millis(700),
                Size::Full => Duration::from_secs(2),
            },
            // The warm-up's end (quick: 0.3 s, the smalls' arrival window; full: 1 s), after
            // every client's ramp (docs/lab/bench-quick-sizes.md).
            load_alone: match size {
                Size::Quick => Duration::from_millis(300),
                Size::Full => Duration::from_secs(1),
            },
            repeats: 3,
            put_concurrency: 64,
            peers: Vec::new(),
            // Quick leaves the extra 10-connection row out (7.4 s of its minute): boto3's row,
            // on that same default pool of 10, shows the published case.
            small_pool_row: size == Size::Full,
            auto_caps: Vec::new(),
            link: None,
        }
    }

    /// The warm-up of a ferry client in `mode` ([`MixedHolParams::load_warmup`] and
    /// [`MixedHolParams::load_warmup_at_once`]).
    pub fn warmup_for(&self, mode: Mode) -> Duration {
        match mode {
            Mode::H1Pool | Mode::H1Pipeline => self.load_warmup_at_once,
            Mode::Auto | Mode::H2 => self.load_warmup,
        }
    }

    /// The span over which the smalls arrive.
    pub fn arrival_window(&self) -> Duration {
        Duration::from_secs_f64(self.smalls as f64 / self.small_rate.max(1e-9))
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

/// The ranged parts of the large objects, in the order the load reads them (part j of
/// every object before part j+1): `(object index, first byte, last byte)`.
pub fn large_parts(larges: usize, large_bytes: u64, part_bytes: u64) -> Vec<(usize, u64, u64)> {
    let part = part_bytes.clamp(1, large_bytes.max(1));
    let per = large_bytes.div_ceil(part);
    let mut out = Vec::new();
    for j in 0..per {
        for k in 0..larges {
            let from = j * part;
            out.push((k, from, (from + part).min(large_bytes) - 1));
        }
    }
    out
}

/// The load's goodput window: the bytes of large parts received while it is open (from
/// the first small's arrival to the last small's end), whichever part they belong to.
#[derive(Debug, Default)]
pub struct LoadWindow {
    /// (open, bytes received while open, bytes received in all)
    state: std::sync::Mutex<(bool, u64, u64)>,
}

impl LoadWindow {
    pub fn open(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 = true;
    }

    /// `n` bytes of a large part arrived.
    pub fn received(&self, n: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.0 {
            s.1 += n;
        }
        s.2 += n;
    }

    /// Every large byte received so far, window open or not.
    pub fn total(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2
    }

    /// Closes the window: the bytes received while it was open.
    pub fn close(&self) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 = false;
        s.1
    }
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

/// One run: the smalls (key, size) arriving at `small_rate`, and, when loaded, the
/// large parts kept `large_in_flight` deep.
#[derive(Clone, Debug, PartialEq)]
pub struct MixedHolRun {
    pub phase: Phase,
    pub smalls: Arc<Vec<(String, u64)>>,
    pub small_rate: f64,
    /// Small GETs carry `GetParams::size_hint` (auto's rows).
    pub size_hint: bool,
    pub larges: Arc<Vec<String>>,
    pub parts: Arc<Vec<(usize, u64, u64)>>,
    pub large_in_flight: usize,
    pub load_warmup: Duration,
    pub load_alone: Duration,
    pub seed: u64,
    pub put_concurrency: usize,
    /// The link's rate in payload bytes per second, when the run crosses one: the
    /// reference of `large_done_over_link` ([`link_limited_figures`]).
    pub link_bytes_per_s: Option<f64>,
}

/// "Large objects done" figures of a loaded run: the time the large objects (all of
/// them once, `total` bytes) take at the rate the load got while the smalls ran, the same
/// at the rate it got alone just before, and their ratio (loaded over alone; the
/// scheduler's goal: at most 1.10).
pub fn large_done_figures(rec: &mut RunRecord, total: u64, loaded_rate: f64, alone_rate: f64) {
    rec.set("large_alone_bytes_per_s", alone_rate);
    if loaded_rate > 0.0 {
        rec.set("large_done_s", total as f64 / loaded_rate);
    }
    if alone_rate > 0.0 {
        rec.set("large_alone_done_s", total as f64 / alone_rate);
    }
    if loaded_rate > 0.0 && alone_rate > 0.0 {
        rec.set("large_done_over_alone", alone_rate / loaded_rate);
    }
}

/// The link-limited figures of a loaded run on a link of `link_rate` bytes per second:
/// the large objects (`total` bytes, each once) at the link's rate, and the time they take
/// at the loaded rate over it (1.00: the link carried nothing but large bytes while the
/// smalls ran; the goal: at most 1.10). `link_used`: the large and small bytes
/// received while the smalls ran (`small_rate`: the smalls' bytes over that window) over
/// the link's rate, so that a ratio above 1 can be told apart as the smalls' share of a
/// full link (~6% at the full size: 100/s of ~186 KB on average) or a link left idle.
pub fn link_limited_figures(rec: &mut RunRecord, total: u64, loaded_rate: f64, small_rate: f64, link_rate: f64) {
    if link_rate <= 0.0 {
        return;
    }
    rec.set("large_link_bytes_per_s", link_rate);
    rec.set("link_used", (loaded_rate + small_rate) / link_rate);
    rec.set("large_link_limited_s", total as f64 / link_rate);
    if loaded_rate > 0.0 {
        rec.set("large_done_over_link", link_rate / loaded_rate);
    }
}

/// A preset's rate as bytes per second of TCP payload: the serializer's bits over 8. The
/// delay line charges each 64 KiB segment's headers once (delay.rs: a packet's length less its vnet header), so the payload is
/// within 0.2% of it; iperf3 -P 1 / -P 8 carried 97-98% / 99% of the instance preset.
pub fn link_payload_rate(p: &ferry_link::Preset) -> f64 {
    p.rate_bits_per_s as f64 / 8.0
}

/// What [`warm_up`] saw: the large bytes received over the last `alone` span and how long
/// that span took, and the cumulative large bytes sampled every [`WARMUP_SAMPLE`] from the
/// load's start (seconds, bytes): the ramp the warm-up waits out, kept in the record so a
/// shorter warm-up can be judged from it.
pub struct WarmUp {
    pub alone: (u64, Duration),
    pub points: Vec<[f64; 2]>,
}

/// How often [`warm_up`] samples the large bytes received.
pub const WARMUP_SAMPLE: Duration = Duration::from_millis(50);

/// Waits `warmup` while the load runs, sampling the bytes it has received; the last
/// `alone` of it is the large rate alone. A wake-up that comes late (a busy runtime) moves
/// the end, never shortens the alone span: it runs at least `alone` from where it began.
pub async fn warm_up(window: &LoadWindow, warmup: Duration, alone: Duration) -> WarmUp {
    let start = Instant::now();
    let alone = alone.min(warmup);
    let alone_from = start + (warmup - alone);
    let mut end = start + warmup;
    let mut points = vec![[0.0, window.total() as f64]];
    let mut mark: Option<(u64, Instant)> = None;
    loop {
        let now = Instant::now();
        if mark.is_none() && now >= alone_from {
            mark = Some((window.total(), now));
            end = end.max(now + alone);
        }
        if now >= end {
            break;
        }
        let next = (now + WARMUP_SAMPLE).min(end);
        let next = if mark.is_none() { next.min(alone_from) } else { next };
        tokio::time::sleep_until(next.into()).await;
        points.push([start.elapsed().as_secs_f64(), window.total() as f64]);
    }
    let (b0, t0) = mark.unwrap_or((window.total(), Instant::now()));
    WarmUp { alone: (window.total() - b0, t0.elapsed()), points }
}

crate::impl_scenario!(MixedHolRun);

impl MixedHolRun {
    /// Bytes of the large objects, each read once.
    pub fn large_total_bytes(&self) -> u64 {
        self.parts.iter().map(|(_, a, b)| b - a + 1).sum()
    }

    pub fn setup_key(&self) -> String {
        format!("{} small objects (seed {}) and {} large", self.smalls.len(), self.seed, self.larges.len())
    }

    pub async fn setup(&self, c: &S3Client) -> Result<()> {
        c.create_bucket(BUCKET).await.with_context(|| format!("creating bucket {BUCKET}"))?;
        let max = self.smalls.iter().map(|s| s.1).max().unwrap_or(0) as usize;
        let buf = body(max, 0);
        let smalls = self.smalls.iter().map(|(key, size)| (key.clone(), buf.slice(..*size as usize)));
        crate::measure::put_all(c, BUCKET, smalls, self.put_concurrency).await?;
        // The first access of a synthetic key computes its CRC (a pass over the object):
        // done here, untimed.
        for key in self.larges.iter() {
            c.head_object(&ObjectRef::new(SYNTHETIC, key.as_str()))
                .await
                .with_context(|| format!("HEAD {SYNTHETIC}/{key}"))?;
        }
        Ok(())
    }

    pub fn params(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("phase".into(), json!(self.phase.name()));
        m.insert("small_size_hint".into(), json!(self.size_hint));
        if self.phase == Phase::Loaded {
            m.insert("run_load_warmup_s".into(), json!(self.load_warmup.as_secs_f64()));
        }
        m
    }

    pub async fn run(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        let meter = Meter::start(c);
        let open = OpenSampler::start(c);
        let mut errors = Errors::default();
        // The load: workers taking the next part until aborted.
        let mut load = JoinSet::new();
        let (next_part, parts_done, large_bytes) =
            (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let window = Arc::new(LoadWindow::default());
        let mut alone: Option<(u64, Duration)> = None;
        if self.phase == Phase::Loaded && !self.parts.is_empty() {
            for _ in 0..self.large_in_flight.max(1) {
                let (c, parts, larges) = (c.clone(), self.parts.clone(), self.larges.clone());
                let (next_part, parts_done, large_bytes, window) =
                    (next_part.clone(), parts_done.clone(), large_bytes.clone(), window.clone());
                load.spawn(async move {
                    loop {
                        let i = next_part.fetch_add(1, Relaxed) as usize % parts.len();
                        let (k, from, to) = parts[i];
                        let obj = ObjectRef::new(SYNTHETIC, larges[k].as_str());
                        let what = || format!("GET {obj} bytes {from}-{to}");
                        let mut out = c
                            .get_object(&obj, GetParams::range(RangeSpec::FromTo(from, to)))
                            .await
                            .with_context(what)?;
                        let mut n = 0u64;
                        while let Some(chunk) = out.body.chunk().await {
                            let len = chunk.with_context(what)?.len() as u64;
                            n += len;
                            window.received(len);
                        }
                        if n != to - from + 1 {
                            anyhow::bail!("GET {obj} bytes {from}-{to}: {n} bytes");
                        }
                        parts_done.fetch_add(1, Relaxed);
                        large_bytes.fetch_add(n, Relaxed);
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), anyhow::Error>(())
                });
            }
            // The warm-up; its last `load_alone` measures the large parts alone.
            let trace = warm_up(&window, self.load_warmup, self.load_alone).await;
            alone = Some(trace.alone);
            rec.set_series("large_warmup_bytes", trace.points);
        }
        // The smalls, open loop: arrival i at t0 + i / rate.
        let t0 = Instant::now();
        window.open();
        open.window_opened();
        let spacing = Duration::from_secs_f64(1.0 / self.small_rate.max(1e-9));
        let mut smalls = JoinSet::new();
        for (i, (key, size)) in self.smalls.iter().enumerate() {
            let arrival = t0 + spacing * i as u32;
            tokio::time::sleep_until(arrival.into()).await;
            let (c, obj, size) = (c.clone(), ObjectRef::new(BUCKET, key.as_str()), *size);
            let mut params = GetParams::default();
            if self.size_hint {
                params.size_hint = Some(size);
            }
            smalls.spawn(async move {
                let r = match get_drain(&c, &obj, params).await {
                    Ok((n, _)) if n == size => Ok(n),
                    Ok((n, _)) => Err(anyhow::anyhow!("GET {obj}: {n} bytes, expected {size}")),
                    Err(e) => Err(e.context(format!("GET {obj}"))),
                };
                (arrival.elapsed(), r)
            });
            // A finished load worker failed: report it (it stops loading).
            while let Some(done) = load.try_join_next() {
                if let Ok(Err(e)) = done {
                    errors.add(format!("{e:#}"));
                }
            }
        }
        let mut small_lat = Vec::with_capacity(self.smalls.len());
        let mut bytes = 0u64;
        while let Some(done) = smalls.join_next().await {
            let (lat, r) = done?;
            match r {
                Ok(n) => {
                    bytes += n;
                    small_lat.push(lat.as_secs_f64());
                }
                Err(e) => errors.add(format!("{e:#}")),
            }
        }
        let window_bytes = window.close();
        let window = t0.elapsed();
        open.record(rec);
        load.abort_all();
        while let Some(done) = load.join_next().await {
            if let Ok(Err(e)) = done {
                errors.add(format!("{e:#}"));
            }
        }
        meter.record(c, rec, "");
        rec.set("smalls", small_lat.len() as f64);
        rec.set("smalls_done_s", window.as_secs_f64());
        rec.set("small_bytes", bytes as f64);
        if self.phase == Phase::Loaded {
            rec.set("large_parts_done", parts_done.load(Relaxed) as f64);
            rec.set("large_bytes", large_bytes.load(Relaxed) as f64);
            let loaded_rate = window_bytes as f64 / window.as_secs_f64().max(1e-9);
            rec.set("large_bytes_per_s", loaded_rate);
            if let Some((b, t)) = alone {
                large_done_figures(rec, self.large_total_bytes(), loaded_rate, b as f64 / t.as_secs_f64().max(1e-9));
            }
            if let Some(link) = self.link_bytes_per_s {
                link_limited_figures(
                    rec,
                    self.large_total_bytes(),
                    loaded_rate,
                    bytes as f64 / window.as_secs_f64().max(1e-9),
                    link,
                );
            }
        }
        set_percentiles(rec, "small_latency", "ms", &mut small_lat, 1e3);
        rec.set_series("small_latency_s", cdf(&small_lat));
        errors.record(rec);
        Ok(())
    }
}

/// Connections the client holds open, sampled every [`OPEN_SAMPLE`] over a run
/// (`TransportStats::connections_open`): the peak sampled from the start, and the mean
/// over the smalls' window. What "fewer connections than the pool" means while a load
/// runs: `connections_opened` counts openings, and a client that gives connections back
/// (a pool closing idle connections over a lowered limit) opens as many as it reached,
/// but holds fewer.
struct OpenSampler {
    /// (peak, sum over the window, samples in the window, window open)
    state: Arc<std::sync::Mutex<(u64, u64, u64, bool)>>,
    task: tokio::task::JoinHandle<()>,
}

/// How often [`OpenSampler`] reads the open connections: 20 ms, a fifth of a part's
/// transfer at S3's 90 MB/s, so the mean is steady; a peak shorter than it can be missed
/// (`connections_open_mean_window` of `ferry bench mixed-hol --quick --link instance`).
const OPEN_SAMPLE: Duration = Duration::from_millis(20);

impl OpenSampler {
    fn start(c: &S3Client) -> OpenSampler {
        let state = Arc::new(std::sync::Mutex::new((0u64, 0u64, 0u64, false)));
        let (c, st) = (c.clone(), state.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(OPEN_SAMPLE);
            loop {
                tick.tick().await;
                let open = c.transport().stats().connections_open;
                let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
                s.0 = s.0.max(open);
                if s.3 {
                    s.1 += open;
                    s.2 += 1;
                }
            }
        });
        OpenSampler { state, task }
    }

    fn window_opened(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).3 = true;
    }

    /// `connections_open_peak` and `connections_open_mean_window`; stops sampling.
    fn record(&self, rec: &mut RunRecord) {
        self.task.abort();
        let s = *self.state.lock().unwrap_or_else(|e| e.into_inner());
        rec.set("connections_open_peak", s.0 as f64);
        if s.2 > 0 {
            rec.set("connections_open_mean_window", s.1 as f64 / s.2 as f64);
        }
    }
}

impl Drop for OpenSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The row every loaded row is held against, in the same repeat: the SDK-default pool of
/// 50 connections under the same load (the published "15x" compares a client with it).
pub const POOL_LOADED_ROW: &str = "h1-pool · loaded";
/// What every loaded row's label ends with ([`row_label`]).
pub const LOADED_SUFFIX: &str = " · loaded";

pub const COLUMNS: &[Column] = &[
    Column::new("small p50 ms", "small_latency_p50_ms", 1.0, 1),
    Column::new("small p90 ms", "small_latency_p90_ms", 1.0, 1),
    Column::new("small p99 ms", "small_latency_p99_ms", 1.0, 1),
    Column::ratio("p50 / h1-pool's (loaded, same repeat)", "small_latency_p50_ms", LOADED_SUFFIX, POOL_LOADED_ROW, 2),
    Column::ratio("p99 / h1-pool's (loaded, same repeat)", "small_latency_p99_ms", LOADED_SUFFIX, POOL_LOADED_ROW, 2),
    Column::new("smalls done s", "smalls_done_s", 1.0, 2),
    Column::new("large MB/s alone (warm-up's end)", "large_alone_bytes_per_s", 1e-6, 0),
    Column::new("large MB/s (while smalls ran)", "large_bytes_per_s", 1e-6, 0),
    Column::new("large done s (at that rate)", "large_done_s", 1.0, 2),
    Column::new("large done / alone", "large_done_over_alone", 1.0, 2),
    Column::new("large parts done", "large_parts_done", 1.0, 0),
    Column::CONNECTIONS_OPENED,
    Column::new("conns open, peak", "connections_open_peak", 1.0, 0),
    Column::new("conns open, mean while smalls ran", "connections_open_mean_window", 1.0, 1),
    Column::CLIENT_CPU,
    Column::CPU_PER_REQUEST,
    Column::CPU_PER_GIB,
    Column::ERRORS,
];

/// [`COLUMNS`] with a link (module note, "On a link"): the link-limited figures after
/// "large done / alone", and the iperf3 row's rate.
pub const LINK_COLUMNS: &[Column] = &[
    COLUMNS[0],
    COLUMNS[1],
    COLUMNS[2],
    COLUMNS[3],
    COLUMNS[4],
    COLUMNS[5],
    COLUMNS[6],
    COLUMNS[7],
    COLUMNS[8],
    COLUMNS[9],
    Column::new("large link-limited s", "large_link_limited_s", 1.0, 2),
    Column::new("large done / link-limited", "large_done_over_link", 1.0, 2),
    Column::new("link used (large + small) while smalls ran", "link_used", 1.0, 2),
    Column::new("link MB/s (iperf3 row)", "bytes_per_s", 1e-6, 0),
    COLUMNS[10],
    COLUMNS[11],
    COLUMNS[12],
    COLUMNS[13],
    COLUMNS[14],
    COLUMNS[15],
    COLUMNS[16],
    COLUMNS[17],
];

/// The clients compared, in row order: (label, mode, server index). auto's smalls carry
/// `size_hint`; the other modes ignore it.
pub const CLIENTS: &[(&str, Mode, usize)] = &[
    ("h1-pool", Mode::H1Pool, 0),
    ("auto", Mode::Auto, 0),
    ("h2 [s3 --h2 on]", Mode::H2, 1),
    ("h1-pipeline", Mode::H1Pipeline, 0),
];

/// An extra row beside [`CLIENTS`], not part of the published comparison: the pool
/// sized like boto3's default (10 connections) under the same load, so that nearly all
/// of its connections carry large reads and each small GET queues behind ~90 of them,
/// the situation Onehouse measured (an SDK pool full of large GETs). Its connections
/// differ from the other rows' on purpose; the label says so.
pub const SMALL_POOL: (&str, Mode, usize, usize) = ("h1-pool [10 conns, boto3's default pool]", Mode::H1Pool, 0, 10);

/// The row that measures the link, once per workload run after the repeats, when the run
/// crosses one: iperf3 -P 1 across it (the runner's [`Task::Iperf3`]; on a 1 ms link one
/// stream fills the rate: -P 1 and -P 8 carried 2.43-2.46 and 2.48 Gbit/s of 2.5).
pub const IPERF3_ROW: &str = "iperf3 -P 1 (the link's ceiling)";

/// Seconds of the [`IPERF3_ROW`].
pub const IPERF3_SECONDS: u32 = 4;

/// The label of auto's row capped at `cap` connections (the cap map).
pub fn capped_auto_label(cap: usize) -> String {
    format!("auto [max {cap} conns]")
}

/// The rows of a run: (label, mode, server index, connections).
fn rows(p: &MixedHolParams) -> Vec<(String, Mode, usize, usize)> {
    if !p.auto_caps.is_empty() {
        let pool = std::iter::once((CLIENTS[0].0.to_string(), CLIENTS[0].1, CLIENTS[0].2, p.connections));
        return pool
            .chain(p.auto_caps.iter().map(|&cap| (capped_auto_label(cap), Mode::Auto, 0, cap.max(1))))
            .collect();
    }
    let small_pool = std::iter::once(SMALL_POOL).filter(|_| p.small_pool_row);
    CLIENTS
        .iter()
        .map(|&(l, m, s)| (l, m, s, p.connections))
        .chain(small_pool)
        .map(|(l, m, s, c)| (l.to_string(), m, s, c))
        .collect()
}

pub fn row_label(client: &str, phase: Phase) -> String {
    format!("{client} · {}", phase.name())
}

pub fn mixed_hol(size: Size, p: &MixedHolParams) -> Workload {
    let sizes = log_uniform_sizes(p.smalls, p.small_min, p.small_max, p.seed);
    let smalls: Arc<Vec<(String, u64)>> =
        Arc::new(small_keys(p.smalls, p.prefixes).into_iter().zip(sizes.iter().copied()).collect());
    let larges = Arc::new(large_keys(p.larges, p.large_bytes));
    let parts = Arc::new(large_parts(p.larges, p.large_bytes, p.part_bytes));
    let (s3, s3_h2) = (ServerSpec::profile("s3"), ServerSpec::s3_h2());
    let mut variants = Vec::new();
    for (label, mode, server, connections) in rows(p) {
        for phase in [Phase::Unloaded, Phase::Loaded] {
            let hint = mode == Mode::Auto;
            variants.push(Variant {
                label: row_label(&label, phase),
                workload: NAME,
                server: Some(server),
                client: Some(ClientSpec { mode, max_connections: connections, pipeline_depth: p.pipeline_depth }),
                task: Task::Scenario(Step::new(MixedHolRun {
                    phase,
                    smalls: smalls.clone(),
                    small_rate: p.small_rate,
                    size_hint: hint,
                    larges: larges.clone(),
                    parts: parts.clone(),
                    large_in_flight: p.large_in_flight,
                    load_warmup: p.warmup_for(mode),
                    load_alone: p.load_alone,
                    seed: p.seed,
                    put_concurrency: p.put_concurrency,
                    link_bytes_per_s: p.link.as_ref().map(link_payload_rate),
                })),
                note: hint.then(|| {
                    "small GETs carry size_hint (known sizes, as after a listing): auto's small lane".to_string()
                }),
                once: false,
            });
        }
    }
    if let Some(link) = &p.link {
        variants.push(Variant {
            label: IPERF3_ROW.into(),
            workload: NAME,
            server: None,
            client: None,
            task: Task::Iperf3 { seconds: IPERF3_SECONDS },
            note: Some(format!("the {link} link measured once after the repeats; the loaded rows' \"large done / link-limited\" is held against the preset's rate")),
            once: true,
        });
    }
    let peers: Vec<crate::peers::Peer> = p.peers.iter().copied().filter(|x| PEERS.contains(x)).collect();
    for phase in [Phase::Unloaded, Phase::Loaded] {
        let op = crate::peers::PeerOp::MixedHol {
            bucket: BUCKET.into(),
            smalls: smalls.clone(),
            small_rate: p.small_rate,
            large_bucket: SYNTHETIC.into(),
            larges: larges.clone(),
            parts: parts.clone(),
            large_in_flight: p.large_in_flight,
            load_warmup: p.load_warmup_peers,
            load_alone: p.load_alone,
            loaded: phase == Phase::Loaded,
            connections: p.connections,
        };
        // Every size repeats the peer rows, interleaved with ferry's (the driver's fork
        // server pays Python's start-up once; peers.rs).
        variants.extend(crate::peers::op_rows(NAME, &peers, 0, op, &format!(" · {}", phase.name())));
    }
    let small_bytes: u64 = sizes.iter().sum();
    let params = json!({
        "larges": p.larges,
        "large_bytes": p.large_bytes,
        "part_bytes": p.part_bytes,
        "large_in_flight": p.large_in_flight,
        "smalls": p.smalls,
        "small_rate_per_s": p.small_rate,
        "small_bytes_total": small_bytes,
        "small_size_min": p.small_min,
        "small_size_max": p.small_max,
        "small_size_distribution": "log-uniform, seeded (rand StdRng)",
        "seed": p.seed,
        "prefixes": p.prefixes,
        "connections": p.connections,
        "auto_max_connections": p.auto_caps,
        "link_rate_bits_per_s": p.link.map(|l| l.rate_bits_per_s),
        "large_link_limited": "with a link: large_link_limited_s, the large objects' bytes (each once) at the link preset's rate (large_link_bytes_per_s, payload bytes/s); large_done_over_link: large_done_s over it (the goal: at most 1.10)",
        "pipeline_depth": p.pipeline_depth,
        "load_warmup_s": p.load_warmup.as_secs_f64(),
        "load_warmup_at_once_s": p.load_warmup_at_once.as_secs_f64(),
        "load_warmup_peers_s": p.load_warmup_peers.as_secs_f64(),
        "load_alone_s": p.load_alone.as_secs_f64(),
        "large_done": "large_done_s: the large objects' bytes (each once) at the rate while the smalls ran; large_alone_done_s: at the rate of the same load alone over the warm-up's last load_alone_s; large_done_over_alone: their ratio",
        "model": "loaded: large_in_flight ranged part GETs kept in flight (closed loop); smalls arrive open loop at small_rate_per_s",
        "large_keys": "synthetic/mixed-hol/size=N/large-K",
        "small_keys": "bench/mixed-hol/pNN/small-NNNNNN",
        "latency": "scheduled arrival to end of body, including time queued in the client",
    });
    Workload {
        notes: vec![
            format!(
                "loaded: {} ranged GETs of {} MiB kept in flight over {} x {} MiB synthetic objects (the pool has {} connections); smalls: {} GETs ({:.0} MiB in all, log-uniform 4 KiB-1 MiB, seed {}) arriving open loop at {}/s after {} ms of load (h1-pool and h1-pipeline: {} ms, peers: {} ms; each ramps, then its last {} ms measure the load alone).",
                p.large_in_flight,
                p.part_bytes >> 20,
                p.larges,
                p.large_bytes >> 20,
                p.connections,
                p.smalls,
                small_bytes as f64 / 1048576.0,
                p.seed,
                p.small_rate,
                p.load_warmup.as_millis(),
                p.load_warmup_at_once.as_millis(),
                p.load_warmup_peers.as_millis(),
                p.load_alone.as_millis()
            ),
            format!("large done: the time the {} large objects ({} MiB, each read once) take at the large rate while the smalls ran; alone: the same client's same load over the warm-up's last {} ms, just before the first small (the link-limited reference: the same connections, nothing else in flight, ramp-up behind it); done / alone = alone rate / loaded rate, the scheduler's goal is at most 1.10.", p.larges, (p.larges as u64 * p.large_bytes) >> 20, p.load_alone.as_millis()),
            match &p.link {
                None => "small latency: from the scheduled arrival to the end of the body. On this machine the load is CPU-bound (loopback, 2 shared cores), which slows every client's smalls somewhat; compare clients within a run.".into(),
                Some(l) => format!("small latency: from the scheduled arrival to the end of the body. Across the {l} link: the large load asks more than its rate, so every row's bytes queue at the link (module note, \"On a link\"); large done / link-limited: the large objects at the loaded rate over the same at the preset's rate ({:.0} MB/s of payload), the goal at most 1.10.", link_payload_rate(l) / 1e6),
            },
            if p.small_pool_row {
                format!("extra row \"{}\": the h1-pool with 10 connections (boto3's default pool) under the same load, so its connections are all but full of large reads, the situation of the published case; the other rows have {} connections.", SMALL_POOL.0, p.connections)
            } else {
                format!("--quick leaves out the extra row \"{}\" (the full size has it); boto3's rows use that same default pool of 10.", SMALL_POOL.0)
            },
            "unloaded and loaded rows are separate runs with fresh clients of the same settings; the h2 rows ran against a second server, --profile s3 --h2 on (the s3 profile is HTTP/1.1 only, like AWS S3).".into(),
            "peer rows (bench/peers/driver.py's mixed_hol op): the same smalls, parts and arrival schedule, driven as each peer's users would (the row's note says how), repeated and interleaved like ferry's rows.".into(),
            "p50 / p99 / h1-pool's: each loaded row's small-GET latency over h1-pool's loaded latency in the same repeat (below 1: better than the 50-connection pool; 0.07x is 15x better); the median of those ratios (min-max). A peer row that ran once (--quick) is paired with repeat 1.".into(),
        ],
        headline: Some(claim),
        ..Workload::scenario(NAME, size, vec![s3, s3_h2], variants, p.repeats, params, if p.link.is_some() { LINK_COLUMNS } else { COLUMNS })
    }
}

/// The claims table's row for `mixed-hol`: the pool's small-GET latency loaded over unloaded against Onehouse's 15x, with auto's
/// against the loaded pool, the large objects' done time and, on a link, the connections held.
pub fn claim(records: &[RunRecord]) -> Headline {
    let h = |published: &str, measured: String, verdict: &str| Headline::new("mixed-hol", published, measured, verdict);
    #[allow(unused)]
    let none = || "no paired clean runs".to_string();
    let published = "15x small-GET latency beside large GETs in an SDK pool (Onehouse)";
    let r = |c: &str, f: &str| paired_ratio(records, &row_label(c, Phase::Loaded), &row_label(c, Phase::Unloaded), f);
    match r("h1-pool", "small_latency_p50_ms") {
        Some(p50) => {
            let p99 = |c: &str| {
                r(c, "small_latency_p99_ms").map(|s| format!("{:.1}x", s.median)).unwrap_or_else(|| "-".into())
            };
            let others: Vec<String> = ["auto", "h2 [s3 --h2 on]", "h1-pipeline"]
                .iter()
                .filter_map(|c| r(c, "small_latency_p50_ms").map(|s| format!("{c} {:.1}x / {}", s.median, p99(c))))
                .collect();
            // The SDK-pool peers are the published case itself.
            let peers: Vec<String> = PEERS
                .iter()
                .filter_map(|p| {
                    r(p.name(), "small_latency_p50_ms")
                        .map(|s| format!("{} {:.1}x / {}", p.name(), s.median, p99(p.name())))
                })
                .collect();
            let peers = if peers.is_empty() { String::new() } else { format!("; peers: {}", peers.join(", ")) };
            // The goal of "15x better than a 50-connection pool": auto's loaded
            // latency over the pool's loaded latency, paired by repeat.
            let vs_pool = |f: &str| paired_ratio(records, &row_label("auto", Phase::Loaded), POOL_LOADED_ROW, f);
            let auto = match (vs_pool("small_latency_p50_ms"), vs_pool("small_latency_p99_ms")) {
                (Some(a), Some(b)) if a.median > 0.0 && b.median > 0.0 => format!(
                    "; auto loaded / h1-pool loaded (same repeat), p50 / p99: {} / {} ({:.1}x / {:.1}x better)",
                    x2(&a),
                    x2(&b),
                    1.0 / a.median,
                    1.0 / b.median
                ),
                _ => String::new(),
            };
            // The goal of "large objects done within 10% of the link-limited time":
            // per loaded row, the large objects' time at the rate while the smalls
            // ran over the time at the same load's rate alone (mixed_hol.rs).
            let figure_spread = |v: &str, f: &str| {
                Spread::of(
                    &records
                        .iter()
                        .filter(|r| r.variant == v && r.status == "ok")
                        .filter_map(|r| r.figure(f))
                        .collect::<Vec<_>>(),
                )
            };
            let spread = |v: &str| figure_spread(v, "large_done_over_alone");
            let large = match spread(&row_label("auto", Phase::Loaded)) {
                Some(a) => format!(
                    "; large objects done / alone (goal <= 1.10): auto {}{}",
                    x2(&a),
                    spread(POOL_LOADED_ROW).map(|p| format!(", h1-pool {}", x2(&p))).unwrap_or_default()
                ),
                None => String::new(),
            };
            // On a link (mixed_hol.rs, "On a link"): the same goal held against the
            // link's rate, and the connections each side held while the smalls ran
            // (the goal: "with fewer connections than the pool").
            let auto_row = row_label("auto", Phase::Loaded);
            let link = match (
                figure_spread(&auto_row, "large_done_over_link"),
                figure_spread(POOL_LOADED_ROW, "large_done_over_link"),
            ) {
                (Some(a), pool) => {
                    let held = |v: &str| {
                        figure_spread(v, "connections_open_mean_window")
                            .map(|s| format!("{:.0}", s.median))
                            .unwrap_or_else(|| "-".into())
                    };
                    format!(
                        "; large done / link-limited (goal <= 1.10): auto {}{}; connections held while the smalls ran: auto {}, h1-pool {}",
                        x2(&a),
                        pool.map(|p| format!(", h1-pool {}", x2(&p))).unwrap_or_default(),
                        held(&auto_row),
                        held(POOL_LOADED_ROW)
                    )
                }
                _ => String::new(),
            };
            // A cap map (`--auto-max-connections`) has no plain auto, h2 or pipeline rows.
            let others = if others.is_empty() { String::new() } else { format!("; {}", others.join(", ")) };
            h(
                published,
                format!("small GET latency loaded/unloaded, p50 / p99: h1-pool (50 conns) {} / {}{others}{peers}{auto}{large}{link}", x(&p50), p99("h1-pool")),
                judge_ratio(p50.median, 15.0, 15.0),
            )
        }
        None => h(published, none(), "no"),
    }
}

/// `mixed-hol` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "mixed-hol",
    quick: "40 small GETs (4 KiB-1 MiB) beside ranged 8 MiB reads held in flight, s3 profile",
    full: "2,000 small GETs at 100/s beside 100 ranged 8 MiB reads held in flight, s3 profile",
    peers: &PEERS,
    in_suite: true,
    default_link: None,
    run: crate::workload::run_defaults::<MixedHolParams>,
    claim,
};

impl crate::workload::Params for MixedHolParams {
    const WORKLOAD: &'static crate::workload::WorkloadDef = &WORKLOAD;

    fn defaults(size: Size) -> Self {
        MixedHolParams::new(size)
    }

    fn common(&mut self) -> (&mut usize, &mut Vec<crate::peers::Peer>) {
        (&mut self.repeats, &mut self.peers)
    }

    /// Across the emulated link when the options carry one, its preset in the params.
    fn adopt(&mut self, o: &crate::options::RunOptions) {
        self.link = o.link.as_ref().map(|l| l.preset());
    }

    fn run(&self, size: Size, o: &crate::options::RunOptions) -> anyhow::Result<crate::options::Outcome> {
        crate::runner::run(&mixed_hol(size, self), o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_sizes() {
        let q = MixedHolParams::new(Size::Quick);
        let f = MixedHolParams::new(Size::Full);
        assert_eq!((q.larges, q.large_bytes, q.smalls, q.connections), (8, 64 << 20, 30, 50));
        assert_eq!((f.larges, f.large_bytes, f.smalls), (8, 256 << 20, 2_000));
        assert!(q.large_in_flight > q.connections, "the load oversubscribes the pool");
        assert!(q.arrival_window() < Duration::from_secs(3));
        let w = mixed_hol(Size::Quick, &q);
        assert_eq!(w.variants.len(), CLIENTS.len() * 2, "the clients; quick leaves the small-pool row out");
        assert_eq!(
            mixed_hol(Size::Full, &f).variants.len(),
            (CLIENTS.len() + 1) * 2,
            "the clients and the small-pool row"
        );
        let Some(r) = w.variants[1].task.step::<MixedHolRun>() else { panic!("not mixed-hol") };
        assert_eq!(r.phase, Phase::Loaded);
        assert_eq!(r.smalls.len(), 30);
        assert!(r.smalls.iter().all(|(_, s)| (4096..=1 << 20).contains(s)));
        assert_eq!(r.smalls[17].0, "mixed-hol/p01/small-000017");
        assert_eq!(r.larges[0], format!("mixed-hol/size={}/large-0", 64 << 20));
        // 8 objects of 64 MiB in 8 MiB parts.
        assert_eq!(r.parts.len(), 64);
        // Only auto's smalls carry the size hint; each mode warms up for its own ramp.
        for v in &w.variants {
            let Some(r) = v.task.step::<MixedHolRun>() else { panic!("not mixed-hol") };
            let mode = v.client.unwrap().mode;
            assert_eq!(r.size_hint, mode == Mode::Auto, "{}", v.label);
            let warmup =
                if matches!(mode, Mode::H1Pool | Mode::H1Pipeline) { q.load_warmup_at_once } else { q.load_warmup };
            assert_eq!(r.load_warmup, warmup, "{}", v.label);
        }
        // The same seed gives the same workload.
        assert_eq!(mixed_hol(Size::Quick, &q), w);
        let h2 = w.variants.iter().find(|v| v.client.unwrap().mode == Mode::H2).unwrap();
        assert!(w.servers[h2.server.unwrap()].args().windows(2).any(|a| a == ["--h2", "on"]));
        assert!(w
            .variants
            .iter()
            .all(|v| v.client.unwrap().max_connections == if v.label.starts_with(SMALL_POOL.0) { 10 } else { 50 }));
        // Peer rows: the mixed-hol peers only, unloaded and loaded, on the s3 server.
        let mut q = q.clone();
        q.peers = vec![crate::peers::Peer::Boto3, crate::peers::Peer::S5cmd, crate::peers::Peer::Obstore];
        let w = mixed_hol(Size::Quick, &q);
        let peer_rows: Vec<&Variant> = w.variants.iter().filter(|v| matches!(v.task, Task::Peer { .. })).collect();
        let labels: Vec<&str> = peer_rows.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["boto3 · unloaded", "obstore · unloaded", "boto3 · loaded", "obstore · loaded"]);
        for v in peer_rows {
            let Task::Peer {
                op: crate::peers::PeerOp::MixedHol { smalls, parts, loaded, connections, load_warmup, .. },
                ..
            } = &v.task
            else {
                panic!("not mixed_hol")
            };
            assert_eq!((smalls.len(), parts.len(), *connections), (30, 64, 50));
            assert_eq!(*load_warmup, q.load_warmup_peers);
            assert_eq!(*loaded, v.label.ends_with("loaded") && !v.label.ends_with("unloaded"));
            assert!(!v.once && v.server == Some(0), "peer rows repeat like ferry's");
        }
    }

    #[test]
    fn the_cap_map_has_the_pool_and_one_auto_row_per_cap() {
        let mut p = MixedHolParams::new(Size::Full);
        p.auto_caps = vec![24, 50];
        let w = mixed_hol(Size::Full, &p);
        let rows: Vec<(&str, Mode, usize)> = w
            .variants
            .iter()
            .map(|v| (v.label.as_str(), v.client.unwrap().mode, v.client.unwrap().max_connections))
            .collect();
        assert_eq!(
            rows,
            [
                ("h1-pool · unloaded", Mode::H1Pool, 50),
                (POOL_LOADED_ROW, Mode::H1Pool, 50),
                ("auto [max 24 conns] · unloaded", Mode::Auto, 24),
                ("auto [max 24 conns] · loaded", Mode::Auto, 24),
                ("auto [max 50 conns] · unloaded", Mode::Auto, 50),
                ("auto [max 50 conns] · loaded", Mode::Auto, 50),
            ]
        );
        assert_eq!(w.params["auto_max_connections"], json!([24, 50]));
        for v in &w.variants {
            let Some(r) = v.task.step::<MixedHolRun>() else { panic!("not mixed-hol") };
            assert_eq!(r.size_hint, v.client.unwrap().mode == Mode::Auto, "{}", v.label);
        }
    }

    #[test]
    fn ratio_columns_hold_loaded_rows_against_the_loaded_pool() {
        assert_eq!(row_label("h1-pool", Phase::Loaded), POOL_LOADED_ROW);
        assert!(row_label("auto", Phase::Loaded).ends_with(LOADED_SUFFIX));
        assert!(!row_label("auto", Phase::Unloaded).ends_with(LOADED_SUFFIX));
        let w = mixed_hol(Size::Quick, &MixedHolParams::new(Size::Quick));
        assert!(w.variants.iter().any(|v| v.label == POOL_LOADED_ROW));
        let ratios: Vec<&Column> = COLUMNS.iter().filter(|c| c.ratio_to.is_some()).collect();
        assert_eq!(
            ratios.iter().map(|c| c.figure).collect::<Vec<_>>(),
            ["small_latency_p50_ms", "small_latency_p99_ms"]
        );
    }

    #[test]
    fn load_window_counts_bytes_received_while_open() {
        // A part that began before the window and one that ends after it count for the
        // bytes that arrived inside it.
        let w = LoadWindow::default();
        w.received(5); // before the smalls: not counted
        w.open();
        w.received(3); // tail of a part begun before
        w.received(4); // head of a part that ends after
        assert_eq!(w.close(), 7);
        w.received(9); // after the smalls: not counted
        assert_eq!(w.close(), 7);
        assert_eq!(w.total(), 5 + 3 + 4 + 9, "every byte, window or not");
    }

    #[test]
    fn warm_up_samples_the_load_and_measures_its_end_alone() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let window = Arc::new(LoadWindow::default());
        let feed = window.clone();
        let trace = rt.block_on(async move {
            // A load receiving 1,000 bytes every 10 ms.
            let feeder = tokio::spawn(async move {
                loop {
                    feed.received(1_000);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            let t = warm_up(&window, Duration::from_millis(400), Duration::from_millis(150)).await;
            feeder.abort();
            t
        });
        let (bytes, span) = trace.alone;
        assert!(
            span >= Duration::from_millis(150) && span < Duration::from_millis(400),
            "the alone span is the warm-up's end: {span:?}"
        );
        assert!(bytes > 0 && bytes < 400 * 100, "only the end's bytes: {bytes}");
        let p = &trace.points;
        assert_eq!(p[0][0], 0.0);
        assert!(
            p.len() >= 400 / WARMUP_SAMPLE.as_millis() as usize,
            "a sample every {WARMUP_SAMPLE:?}: {} samples",
            p.len()
        );
        assert!(p.windows(2).all(|w| w[1][0] > w[0][0] && w[1][1] >= w[0][1]), "time and bytes grow: {p:?}");
        assert!(p.last().unwrap()[0] >= 0.4, "the samples cover the warm-up");
    }

    #[test]
    fn large_done_is_the_large_objects_at_each_rate() {
        let run = MixedHolRun {
            phase: Phase::Loaded,
            smalls: Arc::new(Vec::new()),
            small_rate: 100.0,
            size_hint: false,
            larges: Arc::new(large_keys(2, 20)),
            parts: Arc::new(large_parts(2, 20, 8)),
            large_in_flight: 4,
            load_warmup: Duration::from_secs(1),
            load_alone: Duration::from_millis(500),
            seed: 1,
            put_concurrency: 1,
            link_bytes_per_s: None,
        };
        assert_eq!(run.large_total_bytes(), 40, "each large once");
        let mut rec = RunRecord::default();
        // Loaded at 8 B/s, alone at 10 B/s: 5 s against 4 s, 1.25x.
        large_done_figures(&mut rec, run.large_total_bytes(), 8.0, 10.0);
        assert_eq!(rec.figure("large_done_s"), Some(5.0));
        assert_eq!(rec.figure("large_alone_done_s"), Some(4.0));
        assert_eq!(rec.figure("large_done_over_alone"), Some(1.25));
        // Nothing while the smalls ran: no done time, no ratio.
        let mut rec = RunRecord::default();
        large_done_figures(&mut rec, 40, 0.0, 10.0);
        assert_eq!((rec.figure("large_done_s"), rec.figure("large_done_over_alone")), (None, None));
        for size in [Size::Quick, Size::Full] {
            let q = MixedHolParams::new(size);
            for warmup in [q.load_warmup, q.load_warmup_at_once, q.load_warmup_peers] {
                assert!(
                    q.load_alone > Duration::ZERO && q.load_alone < warmup,
                    "the alone span is the warm-up's end, after its ramp"
                );
            }
            assert!(q.load_warmup >= q.load_warmup_at_once, "auto and h2 ramp longest");
        }
    }

    #[test]
    fn on_a_link_the_loaded_rows_are_held_against_its_rate_and_iperf3_measures_it() {
        let mut p = MixedHolParams::new(Size::Quick);
        let plain = mixed_hol(Size::Quick, &p);
        assert!(
            plain.variants.iter().all(|v| !matches!(v.task, Task::Iperf3 { .. })),
            "no link, no iperf3 row (loopback as before)"
        );
        p.link = Some(ferry_link::Preset::INSTANCE);
        let w = mixed_hol(Size::Quick, &p);
        assert_eq!(w.variants.len(), plain.variants.len() + 1, "one iperf3 row more");
        let i3: Vec<&Variant> = w.variants.iter().filter(|v| matches!(v.task, Task::Iperf3 { .. })).collect();
        assert_eq!(i3.len(), 1);
        assert!(
            i3[0].once && i3[0].label == IPERF3_ROW && i3[0].server.is_none() && i3[0].client.is_none(),
            "measured once per workload run"
        );
        for v in &w.variants {
            if let Some(r) = v.task.step::<MixedHolRun>() {
                assert_eq!(r.link_bytes_per_s, Some(312_500_000.0), "{}: 2.5 Gbit/s of payload", v.label);
            }
        }
        assert_eq!(w.params["link_rate_bits_per_s"], json!(2_500_000_000u64));
        // The link's columns only with a link; every other column in its place.
        let (crate::workload::Shape::Columns(plain_cols), crate::workload::Shape::Columns(link_cols)) =
            (plain.shape, w.shape)
        else {
            panic!("column tables")
        };
        assert_eq!((plain_cols, link_cols.len()), (COLUMNS, COLUMNS.len() + 4));
        assert!(COLUMNS.iter().all(|c| link_cols.contains(c)), "every loopback column kept");
        assert!(
            link_cols.iter().any(|c| c.figure == "large_done_over_link")
                && !COLUMNS.iter().any(|c| c.figure == "large_done_over_link")
        );
        // The figures: 40 bytes over a 10 B/s link take 4 s; loaded at 8 B/s, 1.25x; with
        // the smalls' 1 B/s, the link was 90% used.
        let mut rec = RunRecord::default();
        link_limited_figures(&mut rec, 40, 8.0, 1.0, 10.0);
        assert_eq!(rec.figure("large_link_limited_s"), Some(4.0));
        assert_eq!(rec.figure("large_done_over_link"), Some(1.25));
        assert_eq!(rec.figure("link_used"), Some(0.9));
        assert_eq!(rec.figure("large_link_bytes_per_s"), Some(10.0));
        // No bytes while the smalls ran: the link-limited time, no ratio.
        let mut rec = RunRecord::default();
        link_limited_figures(&mut rec, 40, 0.0, 0.0, 10.0);
        assert_eq!((rec.figure("large_link_limited_s"), rec.figure("large_done_over_link")), (Some(4.0), None));
    }

    #[test]
    fn parts_cover_each_large_exactly() {
        let parts = large_parts(3, 20, 8);
        assert_eq!(parts.len(), 9);
        for k in 0..3 {
            let mine: Vec<(u64, u64)> = parts.iter().filter(|p| p.0 == k).map(|p| (p.1, p.2)).collect();
            assert_eq!(mine, [(0, 7), (8, 15), (16, 19)]);
        }
        // Part j of every object comes before part j+1 of any.
        assert_eq!(parts[..3].iter().map(|p| p.1).collect::<Vec<_>>(), [0, 0, 0]);
        assert_eq!(large_parts(1, 5, 100), [(0, 0, 4)]);
    }

    fn report_rec(variant: &str, repeat: usize, p50: f64, p99: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set("small_latency_p50_ms", p50);
        r.set("small_latency_p99_ms", p99);
        r
    }

    #[test]
    fn mixed_hol_rows_carry_their_ratio_to_the_loaded_pool_per_repeat() {
        let w = mixed_hol(Size::Quick, &MixedHolParams::new(Size::Quick));
        let ctx = crate::record::RunContext {
            bench: "mixed-hol".into(),
            run_id: "1-2".into(),
            git_sha: None,
            git_dirty: None,
            machine: crate::sys::Machine { nproc: 2, kernel: "6.1".into() },
        };
        // Paired by repeat: auto is 1/10 then 1/5 of the pool (median 0.15), its p99 1/20
        // both times; a repeat without the pool's row pairs with nothing.
        let records = vec![
            report_rec("h1-pool · unloaded", 1, 5.0, 9.0),
            report_rec("h1-pool · loaded", 1, 100.0, 400.0),
            report_rec("auto · loaded", 1, 10.0, 20.0),
            report_rec("h1-pool · loaded", 2, 50.0, 200.0),
            report_rec("auto · loaded", 2, 10.0, 10.0),
            report_rec("auto · loaded", 3, 1.0, 1.0),
        ];
        let table = crate::report::render(&w, &records, &ctx);
        let row = |label: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("| {label} |")))
                .unwrap_or_else(|| panic!("no row {label} in\n{table}"))
                .to_owned()
        };
        let cells = |label: &str| row(label).split(" | ").map(str::to_owned).collect::<Vec<_>>();
        let header: Vec<String> =
            table.lines().find(|l| l.starts_with("| row |")).unwrap().split(" | ").map(str::to_owned).collect();
        let col =
            |name: &str| header.iter().position(|h| h.starts_with(name)).unwrap_or_else(|| panic!("no column {name}"));
        let (p50, p99) = (col("p50 / h1-pool's"), col("p99 / h1-pool's"));
        assert_eq!(cells("auto · loaded")[p50], "0.15x (0.10-0.20)");
        assert_eq!(cells("auto · loaded")[p99], "0.05x");
        assert_eq!(cells("h1-pool · loaded")[p50], "1.00x");
        // Unloaded rows are not held against the loaded pool.
        assert_eq!(cells("h1-pool · unloaded")[p50], "-");
    }

    fn claim_rec(variant: &str, repeat: usize, figure: &str, v: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set(figure, v);
        r
    }

    #[test]
    fn mixed_hol_prints_auto_against_the_loaded_pool() {
        let mut rs = Vec::new();
        for k in 1..=2 {
            let (pool, auto) = (20.0 * k as f64, 2.0 * k as f64);
            for (row, p50) in [
                ("h1-pool · unloaded", 10.0),
                ("h1-pool · loaded", pool),
                ("auto · unloaded", 1.0),
                ("auto · loaded", auto),
            ] {
                let mut r = claim_rec(row, k, "small_latency_p50_ms", p50);
                r.set("small_latency_p99_ms", 2.0 * p50);
                if row.ends_with(" · loaded") {
                    r.set("large_done_over_alone", if row.starts_with("auto") { 1.0 + 0.02 * k as f64 } else { 1.5 });
                }
                rs.push(r);
            }
        }
        let h = claim(&rs);
        // auto is a tenth of the pool in both repeats: 0.10x, 10x better.
        assert!(
            h.measured.contains(
                "auto loaded / h1-pool loaded (same repeat), p50 / p99: 0.10x / 0.10x (10.0x / 10.0x better)"
            ),
            "{}",
            h.measured
        );
        // Large objects done against the same load alone: auto's spread, the pool's beside it.
        assert!(
            h.measured.contains("large objects done / alone (goal <= 1.10): auto 1.03x (1.02-1.04), h1-pool 1.50x"),
            "{}",
            h.measured
        );
        // No link, no link clause.
        assert!(!h.measured.contains("link-limited"), "{}", h.measured);
        // On a link: done / link-limited and the connections held, auto's beside the pool's.
        let mut linked = rs.clone();
        for r in linked.iter_mut().filter(|r| r.variant.ends_with(" · loaded")) {
            let auto = r.variant.starts_with("auto");
            r.set("large_done_over_link", if auto { 1.07 } else { 1.02 });
            r.set("connections_open_mean_window", if auto { 19.4 } else { 50.0 });
        }
        let h = claim(&linked);
        assert!(h.measured.contains("large done / link-limited (goal <= 1.10): auto 1.07x, h1-pool 1.02x; connections held while the smalls ran: auto 19, h1-pool 50"), "{}", h.measured);
        // Without auto's loaded rows (a cap map), no such clauses and no empty segment.
        rs.retain(|r| !r.variant.starts_with("auto · "));
        let h = claim(&rs);
        assert!(!h.measured.contains("auto loaded /"));
        assert!(
            !h.measured.contains(";  ") && !h.measured.contains("; ;") && !h.measured.ends_with("; "),
            "{}",
            h.measured
        );
    }
}
