//! The one runner: takes a [`Workload`] (data) and runs it.
//!
//! ```text
//! start the workload's servers (ferry serve subprocesses, main thread, guarded)
//!   └─ setup: PUT the objects into every server (one h1-pool client)
//!   └─ warm: HEAD objects whose first access costs the server work
//!   └─ repeat k = 1..n: variant A, B, C, ... (interleaved, fresh client each run)
//!   └─ once-variants (rss-check)
//!   each run ─► RunRecord ─► one JSON line appended to --out (flushed at once)
//! records ─► report.rs: Markdown table of medians (min-max) and the claims
//! ```
//!
//! What every workload's run shares, whoever schedules its rows (JSON lines, progress,
//! records, the outcome), is a [`Session`]; bulk-wan and cli-transfer drive one themselves.
//!
//! Every run builds a fresh client, so "connections opened" counts what one run needed,
//! and measures client CPU as the difference of getrusage(RUSAGE_SELF) around it (the
//! runtime's threads are idle between runs; the servers are other processes).

use crate::process::{Iperf3Result, ServerProcess};
use crate::record::{RunContext, RunRecord};
use crate::sockets::ConnWatch;
use crate::stats::percentiles;
use crate::sys;
use crate::workload::{ClientSpec, Task, Variant, Workload};
use anyhow::{bail, Context, Result};
use ferry_store::Mode;
use ferry_store::{Credentials, CredentialsSource, GetParams, ObjectRef, RangeSpec, S3Client};
use serde_json::json;
use std::io::IsTerminal;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use crate::options::{Outcome, RunOptions};

/// A server of the run: a `ferry serve` subprocess, or the external endpoint
/// (`RunOptions::external`), which every server spec of the workload then names.
struct Server {
    url: String,
    /// `None` for the external endpoint.
    proc: Option<ServerProcess>,
    credentials: CredentialsSource,
    region: String,
}

impl Server {
    fn start(spec: &crate::workload::ServerSpec, opts: &RunOptions) -> Result<Server> {
        if let Some(ext) = &opts.external {
            return Ok(Server {
                url: ext.url.clone(),
                proc: None,
                credentials: CredentialsSource::Explicit(Credentials::new(
                    ext.access_key.clone(),
                    ext.secret_key.clone(),
                )),
                region: ext.region.clone(),
            });
        }
        let proc = ServerProcess::start(&opts.server, &spec.args(), opts.server_lifetime, &opts.log_dir)
            .with_context(|| format!("starting the {} server", spec.label))?;
        let credentials = if spec.signed {
            let access = proc.banner_value("access key").unwrap_or("ferry").to_owned();
            let secret = proc.banner_value("secret key").unwrap_or("ferry-secret").to_owned();
            CredentialsSource::Explicit(Credentials::new(access, secret))
        } else {
            CredentialsSource::Anonymous
        };
        Ok(Server { url: proc.url.clone(), proc: Some(proc), credentials, region: "us-east-1".into() })
    }

    fn peer_endpoint(&self, signed: bool) -> crate::peers::Endpoint {
        match (&self.proc, &self.credentials) {
            (Some(p), _) => crate::peers::Endpoint::of_server(p, signed),
            (None, CredentialsSource::Explicit(c)) => crate::peers::Endpoint {
                url: self.url.clone(),
                region: self.region.clone(),
                credentials: Some((c.access_key_id.clone(), c.secret_access_key.clone())),
                ca_bundle: None,
            },
            (None, _) => crate::peers::Endpoint {
                url: self.url.clone(),
                region: self.region.clone(),
                credentials: None,
                ca_bundle: None,
            },
        }
    }

    fn client(&self, c: &ClientSpec) -> Result<S3Client> {
        Ok(S3Client::builder(self.url.clone())
            .region(self.region.clone())
            .credentials(self.credentials.clone())
            .mode(c.mode)
            .max_connections(c.max_connections)
            .pipeline_depth(c.pipeline_depth)
            .build()?)
    }
}

/// What every run of a workload shares, whoever schedules its rows: the run's context
/// (git, machine, run id: record.rs), the JSON lines file (each record appended and flushed
/// at once), the progress line on stderr, and the records so far. [`run`] drives one for a
/// [`Workload`]; bulk-wan and cli-transfer, whose rows are not the runner's tasks, drive
/// theirs through the same calls.
pub struct Session {
    pub ctx: RunContext,
    pub records: Vec<RunRecord>,
    out: crate::record::JsonLines,
    progress: Progress,
    started: Instant,
}

impl Session {
    pub fn open(name: &str, opts: &RunOptions) -> Result<Session> {
        let started = Instant::now();
        Ok(Session {
            ctx: RunContext::detect(name),
            records: Vec::new(),
            out: crate::record::JsonLines::open(opts.out.as_deref())?,
            progress: Progress::new(opts.progress),
            started,
        })
    }

    /// One progress line: rewritten in place on a terminal, one line each otherwise.
    pub fn say(&self, line: &str) {
        self.progress.line(line);
    }

    /// Appends `rec` to the JSON lines (flushed at once) and keeps it, with its CPU per
    /// request and per GiB derived where the run did not set them (every row's, ferry's
    /// and the peers', the same way: [`RunRecord::derive_cpu_rates`]).
    pub fn record(&mut self, mut rec: RunRecord) -> Result<()> {
        rec.derive_cpu_rates();
        self.out.write(&rec, &self.ctx)?;
        self.records.push(rec);
        Ok(())
    }

    /// Ends the run with its Markdown `report`. The peers' fork servers belong to this
    /// workload's servers (and namespace), so they end here too.
    pub fn finish(self, report: String) -> Outcome {
        self.progress.done();
        crate::peers::end_sessions();
        Outcome { records: self.records, report, wall: self.started.elapsed() }
    }
}

/// Runs `w` and returns its records and report.
pub fn run(w: &Workload, opts: &RunOptions) -> Result<Outcome> {
    let on_profile;
    let w = match opts.profile {
        Some(p) => {
            on_profile = w.on_profile(p);
            &on_profile
        }
        None => w,
    };
    let mut session = Session::open(w.name, opts)?;
    let progress = session.progress;

    // Servers start from this (the main) thread: PR_SET_PDEATHSIG follows the thread.
    let mut servers = Vec::new();
    for (i, spec) in w.servers.iter().enumerate() {
        progress.line(&format!("{}: starting ferry serve --profile {} ({})", w.name, spec.profile, spec.label));
        let used = w.variants.iter().any(|v| v.server == Some(i));
        servers.push(if used { Some(Server::start(spec, opts)?) } else { None });
    }
    // The client side of the link: the runtime's threads (and iperf3's client) are
    // created after this, so they start in the client namespace.
    let _client_ns = opts.link.as_ref().map(|l| l.enter_client()).transpose()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;

    if let Some(setup) = &w.setup {
        for (i, s) in servers.iter().enumerate() {
            let Some(s) = s else { continue };
            progress.line(&format!(
                "{}: putting {} objects into the {} server",
                w.name,
                setup.keys.len(),
                w.servers[i].label
            ));
            let client = s.client(&ClientSpec {
                mode: ferry_store::Mode::H1Pool,
                max_connections: setup.concurrency,
                pipeline_depth: 1,
            })?;
            rt.block_on(put_all(&client, setup))?;
        }
    }
    // An external server has no synthetic bucket: the objects the workload reads from it
    // are PUT there first (untimed), with the bytes ferry serve would have made.
    if let Some(s) = opts.external.as_ref().and_then(|_| servers.iter().flatten().next()) {
        for key in synthetic_keys(w) {
            progress.line(&format!("{}: putting {SYNTHETIC_BUCKET}/{key} into the external server", w.name));
            let client =
                s.client(&ClientSpec { mode: ferry_store::Mode::H1Pool, max_connections: 16, pipeline_depth: 1 })?;
            rt.block_on(materialize(&client, &key)).with_context(|| format!("putting {SYNTHETIC_BUCKET}/{key}"))?;
        }
    }
    // Whether the external server answers HTTP/2 (on http://, with prior knowledge): the
    // h2 rows are skipped where it does not, as the path section of perfdiag finds.
    let external_h2 = match (&opts.external, w.variants.iter().any(|v| v.client.is_some_and(|c| c.mode == Mode::H2))) {
        (Some(ext), true) => rt.block_on(answers_h2(&ext.url)),
        _ => true,
    };
    for (i, bucket, key) in &w.warm {
        if let Some(s) = servers.get(*i).and_then(Option::as_ref) {
            progress.line(&format!("{}: warming {bucket}/{key}", w.name));
            let client =
                s.client(&ClientSpec { mode: ferry_store::Mode::H1Pool, max_connections: 1, pipeline_depth: 1 })?;
            rt.block_on(client.head_object(&ObjectRef::new(bucket.clone(), key.clone())))
                .with_context(|| format!("HEAD {bucket}/{key}"))?;
        }
    }

    // Scenario setups: once per server and distinct setup (e.g. mixed-hol's small objects),
    // before anything is timed.
    let mut prepared: Vec<(usize, String)> = Vec::new();
    for v in &w.variants {
        let (Some(scn), Some(i)) = (v.task.setup_step(), v.server) else { continue };
        let key = (i, scn.setup_key());
        if prepared.contains(&key) {
            continue;
        }
        if let Some(s) = servers.get(i).and_then(Option::as_ref) {
            progress.line(&format!("{}: preparing {} on the {} server", w.name, key.1, w.servers[i].label));
            let client =
                s.client(&ClientSpec { mode: ferry_store::Mode::H1Pool, max_connections: 64, pipeline_depth: 1 })?;
            rt.block_on(scn.setup(&client))
                .with_context(|| format!("{}: setup {} on the {} server", w.name, key.1, w.servers[i].label))?;
        }
        prepared.push(key);
    }

    // Each server's process, for its CPU per row: ferry serve's own, or an external
    // server's found by its listening socket on this machine (none: no server figures).
    // A listener of this very process (a test's in-process server) is not a server of
    // its own: its CPU is the client's too.
    let server_pids: Vec<Option<u32>> = servers
        .iter()
        .map(|s| {
            let s = s.as_ref()?;
            let known = match &s.proc {
                Some(p) => Some(p.pid()),
                None => opts.external.as_ref().and_then(|e| e.pid),
            };
            let listening = || crate::sockets::server_addr(&s.url).and_then(crate::server_cpu::listener_pid);
            known.or_else(listening).filter(|pid| *pid != std::process::id())
        })
        .collect();
    let mut schedule: Vec<(usize, &Variant)> = Vec::new();
    for k in 1..=w.repeats {
        schedule.extend(w.variants.iter().filter(|v| !v.once).map(|v| (k, v)));
    }
    schedule.extend(w.variants.iter().filter(|v| v.once).map(|v| (1, v)));
    for (k, v) in schedule {
        let repeats = if v.once { 1 } else { w.repeats };
        let what = format!("{} · {} · repeat {k} of {repeats}", v.workload, v.label);
        progress.line(&what);
        let mut rec = RunRecord {
            workload: v.workload.to_owned(),
            size: w.size.name().to_owned(),
            mode: v.client.map(|c| c.mode_name().to_owned()).unwrap_or_else(|| "iperf3".into()),
            variant: v.label.clone(),
            repeat: k,
            repeats,
            status: "ok".into(),
            params: w.params.clone(),
            note: v.note.clone(),
            ..RunRecord::default()
        };
        rec.params.insert("link".into(), json!(opts.link_name()));
        if opts.external.is_some() {
            let why = match (&v.task, v.server.map(|i| &w.servers[i])) {
                (Task::RateCeiling(_), _) => {
                    Some("a rate ceiling (h2load, wrk) sends unsigned requests, which only ferry serve answers")
                }
                (_, Some(spec)) if !spec.extra_args.is_empty() => {
                    Some("this row needs ferry serve started with flags of its own (HTTP/2 on)")
                }
                _ if !external_h2 && v.client.is_some_and(|c| c.mode == Mode::H2) => {
                    Some("it does not answer HTTP/2 (ALPN h2 on https, prior knowledge on http)")
                }
                _ => None,
            };
            if let Some(why) = why {
                rec.status = "skipped".into();
                rec.note = Some(format!("external server: {why}"));
                session.record(rec)?;
                continue;
            }
        }
        if let Some(i) = v.server {
            let spec = &w.servers[i];
            let s = servers[i].as_mut().expect("servers used by a variant are started");
            rec.profile = Some(spec.profile.to_owned());
            match s.proc.as_mut() {
                Some(p) => {
                    rec.server = Some(json!({"label": spec.label, "args": p.args, "banner": p.banner}));
                    if !p.alive() {
                        bail!("the {} server died (log: {})", spec.label, p.log.display());
                    }
                }
                None => {
                    rec.profile = Some("external".into());
                    rec.server =
                        Some(json!({"label": "external", "url": s.url, "external": true, "note": EXTERNAL_NOTE}));
                }
            }
        }
        if let Some(c) = v.client {
            rec.client = Some(
                json!({"mode": c.mode_name(), "max_connections": c.max_connections, "pipeline_depth": c.pipeline_depth}),
            );
        }
        // Every row of repeat k meets the same draws: its ferry server starts over from
        // seed k (why: emulate.rs, SEED_PATH).
        if let Some(s) = v.server.and_then(|i| servers[i].as_ref()).filter(|s| s.proc.is_some()) {
            if !crate::peers::reseed(&s.url, None, k as u64) {
                bail!("the server at {} did not take POST /_ferry/seed", s.url);
            }
            rec.params.insert("server_seed".into(), json!(k));
        }
        // A ferry row's requests by S3 operation, as its server answered them (the peers'
        // rows count theirs the same way, peers.rs): read before and after, untimed.
        let counted = v
            .client
            .and(v.server)
            .filter(|_| !matches!(v.task, Task::Peer { .. } | Task::NotYet { .. }))
            .and_then(|i| servers[i].as_ref())
            .filter(|s| s.proc.is_some())
            .map(|s| s.url.clone());
        let before = counted.as_deref().and_then(|url| crate::peers::ServerCounters::scrape(url, None));
        // The server's CPU over the row (server_cpu.rs): who set the rate, client or server.
        let server_pid = v.server.and_then(|i| server_pids[i]).filter(|_| !matches!(v.task, Task::NotYet { .. }));
        let cpu_before = server_pid.and_then(crate::server_cpu::Sample::take);
        let result = match &v.task {
            Task::GetAll { in_flight, ranged, size_hint } => {
                let setup = w.setup.as_ref().context("GetAll needs a PUT setup")?;
                let s = servers[v.server.unwrap()].as_ref().unwrap();
                let client = s.client(&v.client.unwrap())?;
                let keys = Arc::new(setup.keys.clone());
                let ticker = progress.ticker(&rt, &what, keys.len() as u64);
                let r = rt.block_on(get_all(
                    &client,
                    &setup.bucket,
                    keys,
                    setup.object_size as u64,
                    *in_flight,
                    *ranged,
                    *size_hint,
                    opts.run_timeout,
                    ticker.clone(),
                ));
                ticker.stop();
                r.map(|r| r.record_into(&mut rec))
            }
            Task::GetOne { bucket, key, bytes, sample_rss, verify } => {
                let s = servers[v.server.unwrap()].as_ref().unwrap();
                let client = s.client(&v.client.unwrap())?;
                let ticker = progress.ticker(&rt, &what, *bytes);
                let r = rt.block_on(get_one(
                    &client,
                    bucket,
                    key,
                    *bytes,
                    *sample_rss,
                    *verify,
                    opts.run_timeout,
                    ticker.clone(),
                ));
                ticker.stop();
                r.map(|r| r.record_into(&mut rec))
            }
            Task::Iperf3 { seconds } => iperf3(*seconds, opts).map(|r| r.record_into(&mut rec)),
            Task::Scenario(scn) => {
                let s = servers[v.server.context("a scenario runs against a server")?].as_ref().unwrap();
                let client = s.client(&v.client.context("a scenario needs a client")?)?;
                rec.params.extend(scn.params());
                match rt.block_on(async { tokio::time::timeout(opts.run_timeout, scn.run(&client, &mut rec)).await }) {
                    Ok(r) => r,
                    Err(_) => {
                        rec.status = "timeout".into();
                        rec.error_samples.push(format!("unfinished after the {:?} run time-out", opts.run_timeout));
                        Ok(())
                    }
                }
            }
            Task::NotYet { reason } => {
                rec.status = "not-implemented".into();
                rec.note = Some(reason.clone());
                Ok(())
            }
            Task::RateCeiling(rc) => {
                let s = servers[v.server.context("a ceiling row needs a server")?].as_ref().unwrap();
                rc.run(&s.url, opts.run_timeout, &mut rec)
            }
            Task::Peer { peer, op, before } => {
                let i = v.server.context("a peer row needs a server")?;
                let s = servers[i].as_ref().unwrap();
                if let Some(setup) = before {
                    // Untimed: what the peer's run consumes (a delete), PUT again by ferry.
                    let t = Instant::now();
                    let c = s.client(&ClientSpec {
                        mode: Mode::H1Pool,
                        max_connections: setup.concurrency.max(1),
                        pipeline_depth: 1,
                    })?;
                    rt.block_on(put_objects(&c, setup)).context("re-creating the objects the peer consumes")?;
                    rec.set("setup_put_s", t.elapsed().as_secs_f64());
                }
                let endpoint = s.peer_endpoint(w.servers[i].signed);
                // An external server counts no connections for the bench: the kernel's
                // socket table does (sockets.rs), from this thread's namespace.
                let watch =
                    s.proc.is_none().then(|| crate::sockets::server_addr(&s.url)).flatten().map(ConnWatch::start);
                crate::peers::run(*peer, &endpoint, op, opts.run_timeout).record_into(&mut rec);
                if let Some(w) = watch {
                    let opened = w.finish();
                    if rec.figure("connections_opened").is_none() && matches!(rec.status.as_str(), "ok" | "errors") {
                        rec.set("connections_opened", opened as f64);
                        rec.params.insert("connections_counted".into(), json!(crate::sockets::COUNTED_BY));
                    }
                }
                Ok(())
            }
        };
        if let (Some(b), Some(a)) = (cpu_before, server_pid.and_then(crate::server_cpu::Sample::take)) {
            a.since(&b).record_into(&mut rec);
        }
        if let (Some(b), Some(a)) =
            (before, counted.as_deref().and_then(|url| crate::peers::ServerCounters::scrape(url, None)))
        {
            server_requests_into(&mut rec, &a.since(&b));
        }
        if let Err(e) = result {
            rec.status = "failed".into();
            rec.error_samples.push(format!("{e:#}"));
        }
        session.record(rec)?;
    }
    drop(rt);
    drop(servers);
    let mut report = crate::report::render(w, &session.records, &session.ctx);
    if let Some(ext) = &opts.external {
        report = format!("Server: {} ({EXTERNAL_NOTE}).\n\n{report}", ext.url);
    }
    Ok(session.finish(report))
}

/// Said in the record and the report of a run against an external server.
pub const EXTERNAL_NOTE: &str =
    "an external S3-compatible server, not ferry serve: the workload's emulation profile does not apply";

/// Whether `url` answers one HTTP/2 request (any status) within a few seconds.
async fn answers_h2(url: &str) -> bool {
    let Ok(endpoint) = ferry_wire::Endpoint::parse(url) else { return false };
    let mut config = ferry_wire::TransportConfig::new(endpoint);
    config.mode = Mode::H2;
    config.max_connections = 1;
    let Ok(t) = ferry_wire::h2::H2Transport::new(config) else { return false };
    let req = ferry_wire::Request::new(http::Method::GET, "/");
    matches!(tokio::time::timeout(Duration::from_secs(5), ferry_wire::Transport::send(&t, req)).await, Ok(Ok(_)))
}

/// The bucket ferry serve makes objects in from their key (`--synthetic-bucket`).
const SYNTHETIC_BUCKET: &str = "synthetic";

/// The synthetic objects `w` reads: its warmed keys, its GetOne rows', and its scenario
/// steps' whose setup key names one (`synthetic/KEY (HEAD)`, scenario.rs).
fn synthetic_keys(w: &Workload) -> Vec<String> {
    let mut keys: Vec<String> =
        w.warm.iter().filter(|(_, b, _)| b == SYNTHETIC_BUCKET).map(|(_, _, k)| k.clone()).collect();
    for v in &w.variants {
        match &v.task {
            Task::GetOne { bucket, key, .. } if bucket == SYNTHETIC_BUCKET => keys.push(key.clone()),
            Task::Scenario(scn) => {
                let sk = scn.setup_key();
                if let Some(k) = sk.strip_prefix("synthetic/").and_then(|r| r.strip_suffix(" (HEAD)")) {
                    keys.push(k.to_owned());
                }
            }
            _ => {}
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// PUTs synthetic `key` (its size from the key) with ferry serve's bytes for it, unless
/// an object of that size is there already.
async fn materialize(client: &S3Client, key: &str) -> Result<()> {
    let size = ferry_backend::parse_synthetic_size(key).with_context(|| format!("{key} names no size"))?;
    let obj = ObjectRef::new(SYNTHETIC_BUCKET, key);
    crate::measure::create_bucket_if_missing(client, SYNTHETIC_BUCKET).await?;
    if client.head_object(&obj).await.is_ok_and(|h| h.size == size) {
        return Ok(());
    }
    const CHUNK: u64 = 8 << 20;
    let owned = key.to_owned();
    let chunks = futures_util::stream::iter((0..size.div_ceil(CHUNK)).map(move |i| {
        let start = i * CHUNK;
        Ok(bytes::Bytes::from(ferry_backend::synthetic_bytes(&owned, start, CHUNK.min(size - start) as usize)))
    }));
    let engine = ferry_engine::Engine::new(client.clone());
    let params = ferry_engine::UploadParams { expected_size: Some(size), ..Default::default() };
    ferry_engine::upload_stream(&engine, Box::pin(chunks), &obj, &params, None).await?;
    Ok(())
}

async fn put_all(client: &S3Client, setup: &crate::workload::PutSetup) -> Result<()> {
    crate::measure::create_bucket_if_missing(client, &setup.bucket).await?;
    put_objects(client, setup).await
}

/// PUTs every object of `setup` into its bucket, which exists.
async fn put_objects(client: &S3Client, setup: &crate::workload::PutSetup) -> Result<()> {
    // Distinct bytes per object are not needed (the server stores what it is sent); one
    // buffer, cloned by reference count.
    let body = crate::measure::body(setup.object_size, 0);
    crate::measure::put_all(
        client,
        &setup.bucket,
        setup.keys.iter().map(|k| (k.clone(), body.clone())),
        setup.concurrency,
    )
    .await
}

/// GETs one object and drops its body chunk by chunk; the bytes received.
async fn get_drain(
    client: &S3Client,
    obj: &ObjectRef,
    params: GetParams,
    first_byte: Option<&mut Duration>,
    t0: Instant,
    ticker: &Ticker,
) -> Result<u64> {
    let mut out = client.get_object(obj, params).await?;
    if let Some(fb) = first_byte {
        *fb = t0.elapsed();
    }
    let mut n = 0u64;
    while let Some(chunk) = out.body.chunk().await {
        let len = chunk?.len() as u64;
        n += len;
        ticker.add_bytes(len);
    }
    Ok(n)
}

struct GetAllResult {
    ok: u64,
    errors: u64,
    wall: Duration,
    cpu: Duration,
    latencies_ms: Vec<f64>,
    bytes: u64,
    stats: ferry_wire_stats::Stats,
    samples: Vec<String>,
    timed_out: bool,
}

/// The transport counters, re-exported through the store's `transport()`.
mod ferry_wire_stats {
    #[derive(Clone, Debug, Default)]
    pub struct Stats {
        pub connections_opened: u64,
        pub requests_sent: u64,
        pub requests_resent: u64,
        pub hedges_sent: u64,
        pub hedges_won: u64,
    }
    pub fn of(c: &ferry_store::S3Client) -> Stats {
        let s = c.transport().stats();
        Stats {
            connections_opened: s.connections_opened,
            requests_sent: s.requests_sent,
            requests_resent: s.requests_resent,
            hedges_sent: s.hedges_sent,
            hedges_won: s.hedges_won,
        }
    }
}

const ERROR_SAMPLES: usize = 5;

#[allow(clippy::too_many_arguments)]
async fn get_all(
    client: &S3Client,
    bucket: &str,
    keys: Arc<Vec<String>>,
    object_size: u64,
    in_flight: usize,
    ranged: bool,
    size_hint: bool,
    timeout: Duration,
    ticker: Ticker,
) -> Result<GetAllResult> {
    let sem = Arc::new(Semaphore::new(in_flight.max(1)));
    let mut set = JoinSet::new();
    let cpu0 = sys::cpu_time();
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut timed_out = false;
    let mut results: Vec<(Duration, Result<u64>)> = Vec::with_capacity(keys.len());
    for key in keys.iter() {
        let permit = match tokio::time::timeout_at(deadline, sem.clone().acquire_owned()).await {
            Ok(p) => p?,
            Err(_) => {
                timed_out = true;
                break;
            }
        };
        let (c, obj, tk) = (client.clone(), ObjectRef::new(bucket.to_owned(), key.clone()), ticker.clone());
        let mut params = if ranged && object_size > 0 {
            GetParams::range(RangeSpec::FromTo(0, object_size - 1))
        } else {
            GetParams::default()
        };
        if size_hint {
            params.size_hint = Some(object_size);
        }
        set.spawn(async move {
            let s = Instant::now();
            let r = get_drain(&c, &obj, params, None, s, &tk).await;
            let r = match r {
                Ok(n) if n != object_size => Err(anyhow::anyhow!("GET {obj}: {n} bytes, expected {object_size}")),
                Ok(n) => Ok(n),
                Err(e) => Err(e.context(format!("GET {obj}"))),
            };
            tk.add_item();
            drop(permit);
            (s.elapsed(), r)
        });
        // Reap finished tasks as we go (keeps the set small).
        while let Some(done) = set.try_join_next() {
            results.push(done?);
        }
    }
    while !timed_out {
        match tokio::time::timeout_at(deadline, set.join_next()).await {
            Ok(Some(r)) => results.push(r?),
            Ok(None) => break,
            Err(_) => timed_out = true,
        }
    }
    let wall = t0.elapsed();
    let cpu = sys::cpu_time().saturating_sub(cpu0);
    set.abort_all();
    let mut out = GetAllResult {
        ok: 0,
        errors: 0,
        wall,
        cpu,
        latencies_ms: Vec::with_capacity(results.len()),
        bytes: 0,
        stats: ferry_wire_stats::of(client),
        samples: Vec::new(),
        timed_out,
    };
    for (lat, r) in results {
        match r {
            Ok(n) => {
                out.ok += 1;
                out.bytes += n;
                out.latencies_ms.push(lat.as_secs_f64() * 1e3);
            }
            Err(e) => {
                out.errors += 1;
                if out.samples.len() < ERROR_SAMPLES {
                    out.samples.push(format!("{e:#}"));
                }
            }
        }
    }
    let unfinished = keys.len() as u64 - out.ok - out.errors;
    if unfinished > 0 {
        out.errors += unfinished;
        out.samples.push(format!("{unfinished} GETs unfinished after the {timeout:?} run time-out"));
    }
    Ok(out)
}

impl GetAllResult {
    fn record_into(mut self, rec: &mut RunRecord) {
        let secs = self.wall.as_secs_f64();
        let n = self.latencies_ms.len();
        let ps = percentiles(&mut self.latencies_ms, &[50.0, 90.0, 99.0, 100.0]);
        rec.set("objects", self.ok as f64);
        rec.set("errors", self.errors as f64);
        rec.set("wall_s", secs);
        rec.set("objects_per_s", self.ok as f64 / secs);
        rec.set("bytes", self.bytes as f64);
        rec.set("bytes_per_s", self.bytes as f64 / secs);
        for (name, p) in ["latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_max_ms"].iter().zip(ps) {
            if let Some(v) = p.filter(|_| n > 0) {
                rec.set(name, v);
            }
        }
        rec.set("connections_opened", self.stats.connections_opened as f64);
        rec.set("requests_sent", self.stats.requests_sent as f64);
        rec.set("requests_resent", self.stats.requests_resent as f64);
        rec.set("hedges_sent", self.stats.hedges_sent as f64);
        rec.set("hedges_won", self.stats.hedges_won as f64);
        rec.set("client_cpu_s", self.cpu.as_secs_f64());
        if self.stats.requests_sent > 0 {
            rec.set(
                "client_cpu_s_per_1000_requests",
                self.cpu.as_secs_f64() * 1000.0 / self.stats.requests_sent as f64,
            );
        }
        rec.status = if self.timed_out {
            "timeout".into()
        } else if self.errors > 0 {
            "errors".into()
        } else {
            "ok".into()
        };
        rec.error_samples = self.samples;
    }
}

struct GetOneResult {
    bytes: u64,
    expected: u64,
    first_byte: Duration,
    wall: Duration,
    cpu: Duration,
    stats: ferry_wire_stats::Stats,
    rss_before: u64,
    rss_sampled_max: Option<u64>,
    error: Option<String>,
    timed_out: bool,
}

#[allow(clippy::too_many_arguments)]
async fn get_one(
    client: &S3Client,
    bucket: &str,
    key: &str,
    expected: u64,
    sample_rss: bool,
    verify: bool,
    timeout: Duration,
    ticker: Ticker,
) -> Result<GetOneResult> {
    let obj = ObjectRef::new(bucket.to_owned(), key.to_owned());
    let rss_before = sys::current_rss_bytes();
    // RSS sampled on a plain thread every 20 ms while the GET runs.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut max = sys::current_rss_bytes();
            while !stop.load(Relaxed) {
                max = max.max(sys::current_rss_bytes());
                std::thread::sleep(Duration::from_millis(20));
            }
            max.max(sys::current_rss_bytes())
        })
    });
    let cpu0 = sys::cpu_time();
    let t0 = Instant::now();
    let mut first_byte = Duration::ZERO;
    let r = tokio::time::timeout(
        timeout,
        get_drain(
            client,
            &obj,
            GetParams { checksum_mode: verify, ..GetParams::default() },
            Some(&mut first_byte),
            t0,
            &ticker,
        ),
    )
    .await;
    let wall = t0.elapsed();
    let cpu = sys::cpu_time().saturating_sub(cpu0);
    stop.store(true, Relaxed);
    let rss_sampled_max = sampler.and_then(|h| h.join().ok());
    let (bytes, error, timed_out) = match r {
        Ok(Ok(n)) if n == expected => (n, None, false),
        Ok(Ok(n)) => (n, Some(format!("GET {obj}: {n} bytes, expected {expected}")), false),
        Ok(Err(e)) => (0, Some(format!("GET {obj}: {e:#}")), false),
        Err(_) => (ticker.bytes(), Some(format!("GET {obj} unfinished after the {timeout:?} run time-out")), true),
    };
    Ok(GetOneResult {
        bytes,
        expected,
        first_byte,
        wall,
        cpu,
        stats: ferry_wire_stats::of(client),
        rss_before,
        rss_sampled_max,
        error,
        timed_out,
    })
}

impl GetOneResult {
    fn record_into(self, rec: &mut RunRecord) {
        let secs = self.wall.as_secs_f64();
        rec.set("bytes", self.bytes as f64);
        rec.set("bytes_expected", self.expected as f64);
        rec.set("wall_s", secs);
        rec.set("bytes_per_s", self.bytes as f64 / secs);
        rec.set("first_byte_ms", self.first_byte.as_secs_f64() * 1e3);
        rec.set("client_cpu_s", self.cpu.as_secs_f64());
        if self.bytes > 0 {
            rec.set("client_cpu_s_per_gib", self.cpu.as_secs_f64() / (self.bytes as f64 / (1u64 << 30) as f64));
        }
        rec.set("connections_opened", self.stats.connections_opened as f64);
        rec.set("requests_sent", self.stats.requests_sent as f64);
        rec.set("requests_resent", self.stats.requests_resent as f64);
        rec.set("errors", if self.error.is_some() { 1.0 } else { 0.0 });
        rec.set("rss_before_bytes", self.rss_before as f64);
        if let Some(m) = self.rss_sampled_max {
            rec.set("rss_sampled_max_bytes", m as f64);
        }
        rec.set("peak_rss_bytes", sys::peak_rss_bytes() as f64);
        rec.status = if self.timed_out {
            "timeout".into()
        } else if self.error.is_some() {
            "errors".into()
        } else {
            "ok".into()
        };
        rec.error_samples.extend(self.error);
    }
}

/// iperf3 on the path the workload's servers use: loopback, or across `opts.link`
/// (this thread is then in the client namespace; see [`run`]).
fn iperf3(seconds: u32, opts: &RunOptions) -> Result<Iperf3Result> {
    crate::process::iperf3(opts.link.as_deref(), 1, seconds, opts.server_lifetime)
}

impl Iperf3Result {
    fn record_into(self, rec: &mut RunRecord) {
        if self.absent {
            rec.status = "absent".into();
            rec.note = Some("iperf3: absent (scripts/setup.sh installs it)".into());
            return;
        }
        rec.set("seconds", self.seconds);
        rec.set("bits_per_second", self.bits_per_second);
        rec.set("bytes_per_s", self.bits_per_second / 8.0);
        if let Some(v) = self.cpu_host_pct {
            rec.set("iperf3_cpu_host_pct", v);
        }
        if let Some(v) = self.cpu_remote_pct {
            rec.set("iperf3_cpu_remote_pct", v);
        }
        rec.set("errors", 0u32);
    }
}

/// `requests_<Operation>` for each S3 operation the server answered during a ferry row
/// (requests sent by type; `requests_sent` stays the client's own count).
fn server_requests_into(rec: &mut RunRecord, server: &crate::peers::ServerCounters) {
    for (op, n) in &server.requests {
        rec.set(&format!("requests_{op}"), *n);
    }
}

/// The live progress line on stderr: rewritten in place on a terminal, one line per run
/// otherwise.
#[derive(Clone, Copy)]
struct Progress {
    enabled: bool,
    tty: bool,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        Progress { enabled, tty: std::io::stderr().is_terminal() }
    }

    fn line(&self, s: &str) {
        if !self.enabled {
            return;
        }
        if self.tty {
            eprint!("\r\x1b[2K{s}");
        } else {
            eprintln!("{s}");
        }
    }

    fn done(&self) {
        if self.enabled && self.tty {
            eprint!("\r\x1b[2K");
        }
    }

    /// Counts items and bytes of one run; on a terminal, redraws the line 5 times a second.
    fn ticker(&self, rt: &tokio::runtime::Runtime, what: &str, total: u64) -> Ticker {
        let t = Ticker(Arc::new(TickerState {
            items: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }));
        if self.enabled && self.tty {
            let (t2, what) = (t.clone(), what.to_owned());
            rt.spawn(async move {
                let mut iv = tokio::time::interval(Duration::from_millis(200));
                while !t2.0.stop.load(Relaxed) {
                    iv.tick().await;
                    let (i, b) = (t2.0.items.load(Relaxed), t2.0.bytes.load(Relaxed));
                    let done = if i > 0 {
                        format!("{i}/{total} objects")
                    } else {
                        format!("{:.0}/{:.0} MiB", b as f64 / 1048576.0, total as f64 / 1048576.0)
                    };
                    eprint!("\r\x1b[2K{what} · {done}");
                }
            });
        }
        t
    }
}

struct TickerState {
    items: AtomicU64,
    bytes: AtomicU64,
    stop: AtomicBool,
}

#[derive(Clone)]
struct Ticker(Arc<TickerState>);

impl Ticker {
    fn add_item(&self) {
        self.0.items.fetch_add(1, Relaxed);
    }
    fn add_bytes(&self, n: u64) {
        self.0.bytes.fetch_add(n, Relaxed);
    }
    fn bytes(&self) -> u64 {
        self.0.bytes.load(Relaxed)
    }
    fn stop(&self) {
        self.0.stop.store(true, Relaxed);
    }
}
