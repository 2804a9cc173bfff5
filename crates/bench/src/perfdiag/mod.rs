//! `ferry perfdiag URL`: the lab's measurements pointed at the user's own storage, as
//! gsutil perfdiag and PerfKitBenchmarker's object_storage_service measure a bucket.
//!
//! ```text
//! reach (DNS + TCP, seconds) ─► credentials (LIST of URL's scratch stems) ─► sweep leftovers
//!   ─► lease ─► machine ─► path (path.rs) ─► latency ─► throughput ─► listing ─► cleanup
//!                                             └── each: repeats x transports, interleaved ──┘
//! ```
//!
//! Everything is written under one scratch prefix (scratch.rs) and removed at the end,
//! whatever happened in between (an error, Ctrl-C); a run killed before that is swept by
//! the next one.
//!
//! Each measured section runs every transport (h1-pool, h1-pipeline, h2 where the path
//! section saw the endpoint answer it, auto) once per repeat, in turn (A B C, A B C), so
//! that a drift of the path or the machine falls on every transport alike, as in the lab
//! (docs/lab/README.md section 1). A section's figure per transport is the median of its
//! per-repeat figures with their min-max spread; percentiles are nearest-rank over every
//! sample of every repeat (stats.rs). A recommendation is printed only for a figure where
//! one transport's worst repeat beats every other transport's best repeat
//! ([`recommend`]).
//!
//! `--duration` and `--max-bytes` bound the measured sections ([`Budget`]): once either is
//! spent, the remaining steps are skipped and the report says which bound cut it.
//! The result is one JSON document (schema [`SCHEMA`]); text.rs renders it for people.

pub mod path;
pub mod scratch;
pub mod text;

use crate::stats::{percentiles, Spread};
use anyhow::{Context, Result};
use bytes::Bytes;
use ferry_engine::{delete_many, list_parallel, DeleteOptions, Engine, ListOptions};
use ferry_store::{Error as StoreError, GetParams, ListParams, ObjectRef, PutPayload};
use futures_util::StreamExt;
use scratch::Scratch;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The JSON document's schema name; bumped when a field changes meaning.
pub const SCHEMA: &str = "ferry-perfdiag/1";

/// The object of the latency section: small enough that its body is one TCP segment
/// train on any path, so the figures are round trips and server think time.
pub const LATENCY_OBJECT_BYTES: usize = 1024;

/// Sizes and counts of one run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Samples of each latency operation per transport, over all repeats.
    pub latency_samples: usize,
    /// Object sizes of the throughput section.
    pub sizes: Vec<u64>,
    /// Bytes each throughput step aims to move: a step's object count is this over the
    /// size, at least [`MIN_OBJECTS`], at most `max_objects`.
    pub step_bytes: u64,
    pub max_objects: usize,
    /// Requests in flight in the multi-stream rows.
    pub streams: usize,
    /// The listing layout: `dirs` x `files` empty objects.
    pub list_dirs: usize,
    pub list_files: usize,
    /// Keys per LIST call.
    pub list_page: u32,
    pub repeats: usize,
    pub duration: Duration,
    pub max_bytes: u64,
    /// Size of the object the path section GETs to see receive windows grow.
    pub window_probe_bytes: u64,
    /// Connections per sample of the path section's TCP and TLS timings.
    pub path_samples: usize,
}

/// The fewest objects a throughput step measures: one figure from one object is a sample
/// of one.
pub const MIN_OBJECTS: usize = 2;

impl Params {
    /// The full run: PerfKitBenchmarker's sizes (16 KiB to 32 MiB), 100 latency samples
    /// per operation, 8 streams, 5,000 keys listed. Each transport's repeat moves ~1 GiB
    /// (most of it the 32 MiB step: 2 objects on one stream, 8 on eight, up and down), so
    /// 3 repeats of 3-4 transports stay under the 16 GiB bound.
    pub fn full() -> Params {
        Params {
            latency_samples: 100,
            sizes: vec![16 << 10, 256 << 10, 1 << 20, 8 << 20, 32 << 20],
            step_bytes: 32 << 20,
            max_objects: 32,
            streams: 8,
            list_dirs: 20,
            list_files: 250,
            list_page: 1000,
            repeats: 3,
            duration: Duration::from_secs(600),
            max_bytes: 16 << 30,
            window_probe_bytes: 32 << 20,
            path_samples: 5,
        }
    }

    /// Seconds, for tests: every section runs, each with a few samples.
    pub fn quick() -> Params {
        Params {
            latency_samples: 6,
            sizes: vec![16 << 10, 1 << 20],
            step_bytes: 2 << 20,
            max_objects: 4,
            streams: 4,
            list_dirs: 4,
            list_files: 25,
            list_page: 20,
            repeats: 2,
            duration: Duration::from_secs(120),
            max_bytes: 256 << 20,
            window_probe_bytes: 2 << 20,
            path_samples: 2,
        }
    }

    /// `--large`: 128 MiB and 512 MiB objects too.
    pub fn with_large(mut self) -> Params {
        self.sizes.extend([128 << 20, 512 << 20]);
        self
    }

    fn objects(&self, size: u64, multi: bool) -> usize {
        let by_bytes = (self.step_bytes / size.max(1)) as usize;
        let n = by_bytes.clamp(MIN_OBJECTS, self.max_objects.max(MIN_OBJECTS));
        if multi {
            n.max(self.streams)
        } else {
            n
        }
    }
}

/// One transport's client.
#[derive(Clone)]
pub struct Client {
    /// "h1-pool", "h1-pipeline", "h2", "auto".
    pub name: String,
    pub engine: Engine,
}

/// What to measure: where, and through which clients.
pub struct Target {
    /// The user's URL, for the report.
    pub url: String,
    pub bucket: String,
    pub base: String,
    /// The transports compared.
    pub clients: Vec<Client>,
    /// The client of the setup, the path section's presigning and the cleanup (auto).
    pub setup: Engine,
    /// Transports left out before the run, each with why (a provider's client that does
    /// not speak one: Azure's has no HTTP/2).
    pub skipped: Vec<(String, String)>,
    pub ca_file: Option<std::path::PathBuf>,
}

/// Progress of a run, for a display: a section starts with its step count, each step
/// says what it did.
pub trait Progress: Send + Sync {
    fn section(&self, name: &str, steps: u64);
    fn step(&self, what: &str);
}

/// A progress that shows nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn section(&self, _: &str, _: u64) {}
    fn step(&self, _: &str) {}
}

/// The run's bounds: a deadline and a byte count, both for the measured sections.
pub struct Budget {
    deadline: Instant,
    max_bytes: u64,
    used: AtomicU64,
    cut: Mutex<Option<String>>,
}

impl Budget {
    pub fn new(duration: Duration, max_bytes: u64) -> Budget {
        Budget { deadline: Instant::now() + duration, max_bytes, used: AtomicU64::new(0), cut: Mutex::new(None) }
    }

    /// Whether a step of `bytes` may run; once one may not, none after it does.
    pub fn allow(&self, bytes: u64) -> bool {
        let mut cut = self.cut.lock().unwrap();
        if cut.is_some() {
            return false;
        }
        if Instant::now() >= self.deadline {
            *cut = Some("duration".into());
            return false;
        }
        if self.used.load(Relaxed) + bytes > self.max_bytes {
            *cut = Some("max-bytes".into());
            return false;
        }
        self.used.fetch_add(bytes, Relaxed);
        true
    }

    /// Whether the deadline is still ahead: steps that move (almost) no bytes, like the
    /// listing section's LISTs, run after `--max-bytes` cut the throughput section.
    pub fn time_left(&self) -> bool {
        let mut cut = self.cut.lock().unwrap();
        if cut.as_deref() == Some("duration") {
            return false;
        }
        if Instant::now() >= self.deadline {
            *cut = Some("duration".into());
            return false;
        }
        true
    }

    pub fn used(&self) -> u64 {
        self.used.load(Relaxed)
    }

    pub fn cut(&self) -> Option<String> {
        self.cut.lock().unwrap().clone()
    }
}

/// Why a run could not start: one sentence for the user.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The sentence for a store error met before anything was measured.
fn refusal(target: &Target, e: &StoreError) -> Refused {
    let what = match e {
        StoreError::Auth { status, code, .. } => {
            format!("the endpoint refused the credentials for {} ({status} {code}): check the access key, secret key and region", target.url)
        }
        StoreError::NotFound { code, .. } => format!("{} does not exist ({code})", target.url),
        StoreError::Transport(w) => format!("the endpoint could not be reached: {w}"),
        other => format!("the endpoint answered the first LIST of {} with an error: {other}", target.url),
    };
    Refused(what)
}

/// How long the first request may take before the endpoint counts as unresponsive.
const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs every section; returns the JSON document. Fails fast (an `Unreachable` or a
/// [`Refused`]) before writing anything when the endpoint or the credentials are wrong.
pub async fn run(target: &Target, params: &Params, progress: &dyn Progress) -> Result<Value> {
    anyhow::ensure!(!target.clients.is_empty(), "no transport to measure");
    let auto = Client { name: "setup".into(), engine: target.setup.clone() };
    let scratch = Scratch::new(&target.bucket, &target.base);
    // Where requests go, as the store itself addresses them: a presigned URL names the
    // scheme, host and port for any provider.
    let presigned = auto.engine.store().presign_get(&scratch.object("path/small"), Duration::from_secs(3600))?;
    let endpoint = ferry_wire::Endpoint::parse(&presigned)?;
    progress.section("reach", 1);
    path::reach(&endpoint).await?;
    let found =
        match tokio::time::timeout(FIRST_REQUEST_TIMEOUT, scratch::find(&auto.engine, &target.bucket, &target.base))
            .await
        {
            Err(_) => {
                return Err(
                    Refused(format!("the endpoint did not answer a LIST within {FIRST_REQUEST_TIMEOUT:?}")).into()
                )
            }
            Ok(Err(e)) => match e.downcast_ref::<StoreError>() {
                Some(se) => return Err(refusal(target, se).into()),
                None => return Err(e),
            },
            Ok(Ok(f)) => f,
        };
    let leftovers = scratch::sweep(&auto.engine, &target.bucket, &found).await;
    let budget = Budget::new(params.duration, params.max_bytes);
    // The lease outlives the bounded sections and the cleanup by a wide margin.
    scratch.write_lease(&auto.engine, params.duration * 2 + Duration::from_secs(600)).await?;
    let started = Instant::now();
    // Ctrl-C ends the measurement, not the cleanup.
    let sections = tokio::select! {
        r = measure(target, params, progress, &auto, &scratch, &budget) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted: the scratch prefix is removed and nothing is reported")),
    };
    progress.section("cleanup", 1);
    let cleanup = match scratch.remove(&auto.engine).await {
        Ok(n) => json!({"prefix": scratch.prefix, "keys_deleted": n, "removed": true}),
        Err(e) => json!({"prefix": scratch.prefix, "removed": false, "error": format!("{e:#}")}),
    };
    let mut doc = sections?;
    doc.insert("schema".into(), json!(SCHEMA));
    doc.insert("url".into(), json!(target.url));
    doc.insert("endpoint".into(), json!(format!("{}", presigned.split('/').take(3).collect::<Vec<_>>().join("/"))));
    doc.insert("scratch".into(), json!(scratch.prefix));
    doc.insert("leftovers".into(), leftovers);
    doc.insert("cleanup".into(), cleanup);
    doc.insert(
        "bounds".into(),
        json!({
            "duration_s": params.duration.as_secs_f64(), "max_bytes": params.max_bytes,
            "bytes_moved": budget.used(), "wall_s": started.elapsed().as_secs_f64(), "cut_by": budget.cut(),
        }),
    );
    doc.insert("params".into(), params_json(params));
    let recs = recommend(&doc);
    doc.insert("recommendations".into(), json!(recs));
    Ok(Value::Object(doc))
}

fn params_json(p: &Params) -> Value {
    json!({
        "latency_samples": p.latency_samples, "latency_object_bytes": LATENCY_OBJECT_BYTES,
        "sizes": p.sizes, "streams": p.streams, "repeats": p.repeats,
        "list_dirs": p.list_dirs, "list_files": p.list_files, "list_page": p.list_page,
        "window_probe_bytes": p.window_probe_bytes,
    })
}

async fn measure(
    target: &Target,
    params: &Params,
    progress: &dyn Progress,
    auto: &Client,
    scratch: &Scratch,
    budget: &Budget,
) -> Result<Map<String, Value>> {
    let mut doc = Map::new();
    doc.insert("machine".into(), path::machine());
    // Path: two objects, presigned.
    progress.section("path", 1);
    let small = scratch.object("path/small");
    put(&auto.engine, scratch, &small, crate::measure::body(LATENCY_OBJECT_BYTES, 0)).await?;
    let expires = Duration::from_secs(3600);
    let small_url = auto.engine.store().presign_get(&small, expires)?;
    let large = if budget.allow(params.window_probe_bytes * 3) {
        let obj = scratch.object("path/large");
        put(&auto.engine, scratch, &obj, crate::measure::body(params.window_probe_bytes as usize, 1)).await?;
        Some((path_and_query(&auto.engine.store().presign_get(&obj, expires)?), params.window_probe_bytes))
    } else {
        None
    };
    let probe = path::PathProbe {
        endpoint: ferry_wire::Endpoint::parse(&small_url)?,
        ca_file: target.ca_file.clone(),
        small: path_and_query(&small_url),
        large,
        samples: params.path_samples,
    };
    let path = path::probe(&probe).await;
    let h2 = path["h2_offered"].as_bool().unwrap_or(false);
    progress.step("path");
    doc.insert("path".into(), path);
    let mut skipped: Vec<Value> =
        target.skipped.iter().map(|(t, why)| json!({"transport": t, "reason": why})).collect();
    let clients: Vec<Client> = target
        .clients
        .iter()
        .filter(|c| {
            let keep = c.name != "h2" || h2;
            if !keep {
                skipped.push(json!({"transport": c.name, "reason": "the endpoint does not answer HTTP/2"}));
            }
            keep
        })
        .cloned()
        .collect();
    doc.insert("transports".into(), json!(clients.iter().map(|c| c.name.clone()).collect::<Vec<_>>()));
    doc.insert("transports_skipped".into(), Value::Array(skipped));
    doc.insert("latency".into(), latency(params, progress, auto, &clients, scratch, budget).await?);
    doc.insert("throughput".into(), throughput(params, progress, &clients, scratch, budget).await?);
    doc.insert("listing".into(), listing(params, progress, auto, &clients, scratch, budget).await?);
    Ok(doc)
}

/// `/path?query` of a URL.
fn path_and_query(url: &str) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    match rest.find('/') {
        Some(i) => rest[i..].to_owned(),
        None => "/".into(),
    }
}

/// The one PUT of the whole module: checked against the scratch prefix first.
async fn put(engine: &Engine, scratch: &Scratch, obj: &ObjectRef, body: Bytes) -> Result<()> {
    scratch.check(obj)?;
    engine.store().put(obj, PutPayload::Bytes(body), Default::default()).await.with_context(|| format!("PUT {obj}"))?;
    Ok(())
}

/// Nearest-rank p50/p90/p99 and the maximum of seconds.
fn pcts(samples: &[f64]) -> Value {
    let mut v = samples.to_vec();
    let ps = percentiles(&mut v, &[50.0, 90.0, 99.0, 100.0]);
    json!({"n": v.len(), "p50": ps[0], "p90": ps[1], "p99": ps[2], "max": ps[3]})
}

fn spread(values: &[f64]) -> Value {
    match Spread::of(values) {
        Some(s) => json!({"median": s.median, "min": s.min, "max": s.max, "n": s.n}),
        None => Value::Null,
    }
}

/// Samples of one row (a transport and an operation), kept per repeat.
#[derive(Default)]
struct Row {
    first_byte: Vec<f64>,
    whole: Vec<f64>,
    /// One figure per repeat (the repeat's p50, or its rate).
    per_repeat: Vec<f64>,
    errors: u64,
    error_samples: Vec<String>,
}

impl Row {
    fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        if self.error_samples.len() < crate::measure::ERROR_SAMPLES {
            self.error_samples.push(e.to_string());
        }
    }
}

const LAT_OPS: [&str; 3] = ["head", "get_small", "put_small"];

async fn latency(
    params: &Params,
    progress: &dyn Progress,
    auto: &Client,
    clients: &[Client],
    scratch: &Scratch,
    budget: &Budget,
) -> Result<Value> {
    let obj = scratch.object("lat/obj");
    let body = crate::measure::body(LATENCY_OBJECT_BYTES, 2);
    put(&auto.engine, scratch, &obj, body.clone()).await?;
    let per_repeat = params.latency_samples.div_ceil(params.repeats.max(1)).max(1);
    progress.section("latency", (params.repeats * clients.len()) as u64);
    let mut rows: Vec<Vec<Row>> = clients.iter().map(|_| LAT_OPS.iter().map(|_| Row::default()).collect()).collect();
    'outer: for rep in 0..params.repeats {
        for (ci, c) in clients.iter().enumerate() {
            let bytes = (per_repeat * LATENCY_OBJECT_BYTES * 2) as u64;
            if !budget.allow(bytes) {
                break 'outer;
            }
            let store = c.engine.store();
            for (oi, op) in LAT_OPS.iter().enumerate() {
                let row = &mut rows[ci][oi];
                let mut this = Vec::new();
                for i in 0..per_repeat {
                    let t = Instant::now();
                    let r: Result<Option<Duration>> = match *op {
                        "head" => store.head(&obj).await.map(|_| None).map_err(Into::into),
                        "get_small" => get_timed(c, &obj).await.map(|(fb, _)| Some(fb)),
                        _ => {
                            let key = scratch.object(&format!("lat/put-{}-{rep}-{i}", c.name));
                            put(&c.engine, scratch, &key, body.clone()).await.map(|_| None)
                        }
                    };
                    let whole = t.elapsed().as_secs_f64();
                    match r {
                        Ok(fb) => {
                            // HEAD and PUT answer with a head and no body: their first
                            // byte is the whole request.
                            row.first_byte.push(fb.map(|d| d.as_secs_f64()).unwrap_or(whole));
                            row.whole.push(whole);
                            this.push(whole);
                        }
                        Err(e) => row.error(format!("{e:#}")),
                    }
                }
                if let Some(p50) = percentiles(&mut this, &[50.0])[0] {
                    row.per_repeat.push(p50);
                }
            }
            progress.step(&format!("latency {} repeat {}", c.name, rep + 1));
        }
    }
    let mut out = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for (oi, op) in LAT_OPS.iter().enumerate() {
            let r = &rows[ci][oi];
            out.push(json!({
                "transport": c.name, "op": op, "object_bytes": LATENCY_OBJECT_BYTES,
                "first_byte_s": pcts(&r.first_byte), "whole_s": pcts(&r.whole),
                "p50_by_repeat_s": spread(&r.per_repeat),
                "samples_s": sorted(&r.whole),
                "errors": r.errors, "error_samples": r.error_samples,
            }));
        }
    }
    Ok(Value::Array(out))
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// A GET read to its end: (time to the first body byte, bytes).
async fn get_timed(c: &Client, obj: &ObjectRef) -> Result<(Duration, u64)> {
    let t = Instant::now();
    let mut out = c.engine.store().get(obj, GetParams::default()).await?;
    let mut first = None;
    let mut n = 0u64;
    while let Some(chunk) = out.body.chunk().await {
        n += chunk?.len() as u64;
        first.get_or_insert_with(|| t.elapsed());
    }
    Ok((first.unwrap_or_else(|| t.elapsed()), n))
}

async fn throughput(
    params: &Params,
    progress: &dyn Progress,
    clients: &[Client],
    scratch: &Scratch,
    budget: &Budget,
) -> Result<Value> {
    progress.section("throughput", (params.sizes.len() * params.repeats * clients.len()) as u64);
    let mut out = Vec::new();
    'sizes: for &size in &params.sizes {
        let data = crate::measure::body(size as usize, 3);
        // rows[client][kind]: kind = write 1, read 1, write N, read N.
        let mut rows: Vec<Vec<Row>> = clients.iter().map(|_| (0..4).map(|_| Row::default()).collect()).collect();
        let mut rates: Vec<Vec<Vec<f64>>> = clients.iter().map(|_| vec![Vec::new(); 4]).collect();
        for rep in 0..params.repeats {
            for (ci, c) in clients.iter().enumerate() {
                let (single, multi) = (params.objects(size, false), params.objects(size, true));
                if !budget.allow(2 * size * (single + multi) as u64) {
                    break 'sizes;
                }
                for (kind, n, streams) in [(0usize, single, 1usize), (2, multi, params.streams)] {
                    let keys: Vec<ObjectRef> =
                        (0..n).map(|i| scratch.object(&format!("tp/{size}/{}/{rep}/{kind}-{i}", c.name))).collect();
                    let (w, r) = (&mut rows[ci], &mut rates[ci]);
                    let wall = transfer(c, scratch, &keys, Some(&data), streams, &mut w[kind]).await;
                    r[kind].push(wall);
                    let wall = transfer(c, scratch, &keys, None, streams, &mut w[kind + 1]).await;
                    r[kind + 1].push(wall);
                    // Deleted at once, so the server holds one step's objects at a time.
                    let names = futures_util::stream::iter(keys.into_iter().map(|o| o.key));
                    delete_many(&c.engine, &scratch.bucket, names, &DeleteOptions::default()).await;
                }
                progress.step(&format!("throughput {} {} repeat {}", human(size), c.name, rep + 1));
            }
        }
        for (ci, c) in clients.iter().enumerate() {
            for kind in 0..4 {
                let r = &rows[ci][kind];
                let (n, streams) = if kind < 2 {
                    (params.objects(size, false), 1)
                } else {
                    (params.objects(size, true), params.streams)
                };
                let walls = &rates[ci][kind];
                let objs: Vec<f64> = walls.iter().filter(|w| **w > 0.0).map(|w| n as f64 / w).collect();
                let mbs: Vec<f64> =
                    walls.iter().filter(|w| **w > 0.0).map(|w| (n as u64 * size) as f64 / w / 1e6).collect();
                if walls.is_empty() {
                    continue;
                }
                let read = kind % 2 == 1;
                out.push(json!({
                    "transport": c.name, "op": if read { "read" } else { "write" }, "streams": streams,
                    "object_bytes": size, "objects": n, "repeats": walls.len(),
                    "objects_per_s": spread(&objs), "mb_per_s": spread(&mbs),
                    "request_s": pcts(&r.whole), "first_byte_s": if read { pcts(&r.first_byte) } else { Value::Null },
                    "samples_s": sorted(&r.whole),
                    "errors": r.errors, "error_samples": r.error_samples,
                }));
            }
        }
    }
    Ok(Value::Array(out))
}

/// PUTs `data` to (`Some`) or GETs from (`None`) every key, `streams` at a time; each
/// request's time into `row`. Returns the wall time, or 0 when any request failed (a
/// rate from a step with failures would flatter it).
async fn transfer(
    c: &Client,
    scratch: &Scratch,
    keys: &[ObjectRef],
    data: Option<&Bytes>,
    streams: usize,
    row: &mut Row,
) -> f64 {
    let t = Instant::now();
    let results: Vec<Result<(f64, Option<f64>)>> = futures_util::stream::iter(keys.iter())
        .map(|k| async move {
            let t = Instant::now();
            match data {
                Some(d) => put(&c.engine, scratch, k, d.clone()).await.map(|_| (t.elapsed().as_secs_f64(), None)),
                None => get_timed(c, k).await.map(|(fb, _)| (t.elapsed().as_secs_f64(), Some(fb.as_secs_f64()))),
            }
        })
        .buffer_unordered(streams.max(1))
        .collect()
        .await;
    let wall = t.elapsed().as_secs_f64();
    let mut failed = false;
    for r in results {
        match r {
            Ok((whole, fb)) => {
                row.whole.push(whole);
                row.first_byte.push(fb.unwrap_or(whole));
            }
            Err(e) => {
                failed = true;
                row.error(format!("{e:#}"));
            }
        }
    }
    if failed {
        0.0
    } else {
        wall
    }
}

const LIST_HOW: [&str; 3] = ["flat", "delimited", "parallel"];

/// One listing row: rates per repeat, the last repeat's counts, and the wall times.
#[derive(Default)]
struct ListRow {
    pages_per_s: Vec<f64>,
    keys_per_s: Vec<f64>,
    pages: u64,
    keys: u64,
    times: Row,
}

async fn listing(
    params: &Params,
    progress: &dyn Progress,
    auto: &Client,
    clients: &[Client],
    scratch: &Scratch,
    budget: &Budget,
) -> Result<Value> {
    let total = params.list_dirs * params.list_files;
    if total == 0 || !budget.time_left() {
        return Ok(json!([]));
    }
    progress.section("listing", (1 + params.repeats * clients.len()) as u64);
    let keys: Vec<ObjectRef> = (0..params.list_dirs)
        .flat_map(|d| (0..params.list_files).map(move |f| (d, f)))
        .map(|(d, f)| scratch.object(&format!("list/d{d:04}/k{f:05}")))
        .collect();
    let results: Vec<Result<()>> = futures_util::stream::iter(keys.iter())
        .map(|k| put(&auto.engine, scratch, k, Bytes::new()))
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    progress.step("listing layout written");
    let prefix = scratch.object("list/").key;
    let mut rows: Vec<Vec<ListRow>> =
        clients.iter().map(|_| LIST_HOW.iter().map(|_| ListRow::default()).collect()).collect();
    'outer: for rep in 0..params.repeats {
        for (ci, c) in clients.iter().enumerate() {
            if !budget.time_left() {
                break 'outer;
            }
            for (hi, how) in LIST_HOW.iter().enumerate() {
                let t = Instant::now();
                let r = list_once(c, &scratch.bucket, &prefix, how, params.list_page).await;
                let wall = t.elapsed().as_secs_f64();
                let row = &mut rows[ci][hi];
                match r {
                    Ok((pages, keys)) if keys == total as u64 => {
                        row.pages_per_s.push(pages as f64 / wall);
                        row.keys_per_s.push(keys as f64 / wall);
                        row.pages = pages;
                        row.keys = keys;
                        row.times.whole.push(wall);
                    }
                    Ok((_, keys)) => row.times.error(format!("listed {keys} keys of {total}")),
                    Err(e) => row.times.error(format!("{e:#}")),
                }
            }
            progress.step(&format!("listing {} repeat {}", c.name, rep + 1));
        }
    }
    let mut out = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for (hi, how) in LIST_HOW.iter().enumerate() {
            let r = &rows[ci][hi];
            out.push(json!({
                "transport": c.name, "how": how, "keys": r.keys, "pages": r.pages, "page_size": params.list_page,
                "pages_per_s": spread(&r.pages_per_s), "keys_per_s": spread(&r.keys_per_s), "wall_s": pcts(&r.times.whole),
                "errors": r.times.errors, "error_samples": r.times.error_samples,
            }));
        }
    }
    Ok(Value::Array(out))
}

/// One listing of `prefix`: (LIST calls, keys). `delimited` walks one level at a time
/// (the directories, then each directory), as a file-system view lists.
async fn list_once(c: &Client, bucket: &str, prefix: &str, how: &str, page: u32) -> Result<(u64, u64)> {
    let store = c.engine.store();
    let flat = |p: &str, delimiter: Option<String>| {
        store.list(
            bucket,
            ListParams { prefix: Some(p.to_owned()), delimiter, max_keys: Some(page), ..Default::default() },
        )
    };
    match how {
        "flat" => {
            let (mut pages, mut keys) = (0u64, 0u64);
            let mut s = flat(prefix, None);
            while let Some(p) = s.next().await {
                pages += 1;
                keys += p?.objects.len() as u64;
            }
            Ok((pages, keys))
        }
        "delimited" => {
            let (mut pages, mut keys) = (0u64, 0u64);
            let mut dirs = Vec::new();
            let mut s = flat(prefix, Some("/".into()));
            while let Some(p) = s.next().await {
                pages += 1;
                dirs.extend(p?.common_prefixes);
            }
            for d in dirs {
                let mut s = flat(&d, Some("/".into()));
                while let Some(p) = s.next().await {
                    pages += 1;
                    keys += p?.objects.len() as u64;
                }
            }
            Ok((pages, keys))
        }
        _ => {
            let opts = ListOptions { page_size: page, ..ListOptions::default() };
            let mut l = list_parallel(&c.engine, bucket, prefix, &opts);
            let mut keys = 0u64;
            while let Some(e) = l.next().await {
                e?;
                keys += 1;
            }
            Ok((l.stats().requests, keys))
        }
    }
}

/// `16 KiB`, `32 MiB`.
pub fn human(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// Repeats a transport needs before it is recommended: with two, a min-max spread is just
/// two draws, and the s3 profile's lognormal first bytes put one transport ahead of
/// another by chance in about one figure of six (`ferry perfdiag --quick` against
/// `ferry serve --profile s3`, where every transport is the same server).
pub const MIN_REPEATS_TO_RECOMMEND: u64 = 3;

/// One line per figure where one transport is ahead of every other beyond the spread:
/// its worst repeat better than each other transport's best repeat, with at least
/// [`MIN_REPEATS_TO_RECOMMEND`] repeats on every side. Where no transport is, nothing is said.
pub fn recommend(doc: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let lat = doc.get("latency").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for op in LAT_OPS {
        let rows: Vec<&Value> = lat.iter().filter(|r| r["op"] == op).collect();
        groups.push(Group {
            label: format!("{op} latency (p50 per repeat)"),
            rows,
            key: "p50_by_repeat_s",
            lower: true,
            scale: 1e3,
            unit: "ms",
        });
    }
    let tp = doc.get("throughput").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    if let Some(largest) = tp.iter().filter_map(|r| r["object_bytes"].as_u64()).max() {
        for smallest in [tp.iter().filter_map(|r| r["object_bytes"].as_u64()).min().unwrap_or(largest), largest] {
            for op in ["read", "write"] {
                for multi in [false, true] {
                    let rows: Vec<&Value> = tp
                        .iter()
                        .filter(|r| r["object_bytes"] == smallest && r["op"] == op && (r["streams"] != 1) == multi)
                        .collect();
                    let label = format!(
                        "{op} of {} objects, {}",
                        human(smallest),
                        if multi { "multi-stream" } else { "one stream" }
                    );
                    if !groups.iter().any(|g| g.label == label) {
                        groups.push(Group { label, rows, key: "mb_per_s", lower: false, scale: 1.0, unit: "MB/s" });
                    }
                }
            }
        }
    }
    let ls = doc.get("listing").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for how in LIST_HOW {
        let rows: Vec<&Value> = ls.iter().filter(|r| r["how"] == how).collect();
        groups.push(Group {
            label: format!("{how} listing"),
            rows,
            key: "keys_per_s",
            lower: false,
            scale: 1.0,
            unit: "keys/s",
        });
    }
    for g in groups {
        if let Some(line) = ahead(&g.rows, g.key, g.lower, g.scale, g.unit) {
            out.push(format!("{}: {line}", g.label));
        }
    }
    out
}

/// One figure compared across transports: the rows, the per-repeat spread's key, whether
/// lower is better, and how to print it.
struct Group<'a> {
    label: String,
    rows: Vec<&'a Value>,
    key: &'static str,
    lower: bool,
    scale: f64,
    unit: &'static str,
}

fn ahead(rows: &[&Value], key: &str, lower: bool, scale: f64, unit: &str) -> Option<String> {
    let figs: Vec<(&str, f64, f64, f64)> = rows
        .iter()
        .filter(|r| r[key]["n"].as_u64().unwrap_or(0) >= MIN_REPEATS_TO_RECOMMEND)
        .filter_map(|r| {
            let s = &r[key];
            Some((r["transport"].as_str()?, s["median"].as_f64()?, s["min"].as_f64()?, s["max"].as_f64()?))
        })
        .collect();
    if figs.len() < 2 || figs.len() < rows.len() {
        return None;
    }
    let better = |a: f64, b: f64| if lower { a < b } else { a > b };
    let best = figs.iter().copied().reduce(|a, b| if better(b.1, a.1) { b } else { a })?;
    let worst_of_best = if lower { best.3 } else { best.2 };
    let clear = figs.iter().filter(|f| f.0 != best.0).all(|f| better(worst_of_best, if lower { f.2 } else { f.3 }));
    if !clear {
        return None;
    }
    let runner_up =
        figs.iter().filter(|f| f.0 != best.0).copied().reduce(|a, b| if better(b.1, a.1) { b } else { a })?;
    Some(format!(
        "{} ({:.1} {unit}, {:.1}-{:.1}) is ahead of every other transport in every repeat; next is {} ({:.1} {unit}, {:.1}-{:.1})",
        best.0,
        best.1 * scale,
        best.2 * scale,
        best.3 * scale,
        runner_up.0,
        runner_up.1 * scale,
        runner_up.2 * scale,
        runner_up.3 * scale
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_size_within_bounds() {
        let p = Params::quick();
        assert_eq!(p.objects(16 << 10, false), 4);
        assert_eq!(p.objects(1 << 20, false), 2);
        assert_eq!(p.objects(32 << 20, false), MIN_OBJECTS);
        assert_eq!(p.objects(32 << 20, true), p.streams);
    }

    #[test]
    fn budget_cuts_by_bytes_then_stays_cut() {
        let b = Budget::new(Duration::from_secs(60), 100);
        assert!(b.allow(60));
        assert!(!b.allow(50));
        assert_eq!(b.cut().as_deref(), Some("max-bytes"));
        assert!(!b.allow(1), "once cut, nothing more runs");
        assert!(b.time_left(), "a bytes cut leaves time for steps that move none");
        let d = Budget::new(Duration::ZERO, 100);
        assert!(!d.allow(0));
        assert_eq!(d.cut().as_deref(), Some("duration"));
        assert!(!d.time_left());
    }

    fn row(t: &str, op: &str, median: f64, min: f64, max: f64) -> Value {
        json!({"transport": t, "op": op, "p50_by_repeat_s": {"median": median, "min": min, "max": max, "n": 3}})
    }

    #[test]
    fn a_recommendation_needs_a_gap_beyond_the_spread() {
        let mut doc = Map::new();
        doc.insert(
            "latency".into(),
            json!([row("h1-pool", "head", 0.030, 0.029, 0.031), row("auto", "head", 0.020, 0.019, 0.021)]),
        );
        let r = recommend(&doc);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].starts_with("head latency") && r[0].contains("auto (20.0 ms"), "{r:?}");
        // Overlapping spreads: nothing said.
        doc.insert(
            "latency".into(),
            json!([row("h1-pool", "head", 0.030, 0.018, 0.031), row("auto", "head", 0.020, 0.019, 0.021)]),
        );
        assert!(recommend(&doc).is_empty());
    }

    #[test]
    fn path_and_query_of_urls() {
        assert_eq!(path_and_query("http://h:9/b/k?X=1"), "/b/k?X=1");
        assert_eq!(path_and_query("https://b.s3.amazonaws.com/k"), "/k");
        assert_eq!(path_and_query("http://h"), "/");
        assert_eq!(human(16 << 10), "16 KiB");
        assert_eq!(human(32 << 20), "32 MiB");
        assert_eq!(human(1000), "1000 B");
    }
}
