//! `Client.cp` and `Client.sync`: many objects between local paths and object URLs, the
//! engine doing each transfer, a summary back.
//!
//! ```text
//! cp   sources, dest ─► ferry-cli's cp::jobs_for (names as the AWS CLI gives them,
//!                       listings and directory walks streamed) ─┐
//! sync source, dest ─► ferry-cli's sync: both sides listed in key order, merge-joined,
//!                       decided by its rule (size/mtime, size only, or stored CRC
//!                       against the local bytes) ─► copies ─────┤   extras ─► delete=True:
//!                                                               │   removed in batches
//!                                          jobs, `concurrency` at once
//!   upload   ─► ferry_engine::upload_file   (one PUT or parallel parts; resumes an upload)
//!   download ─► ferry_engine::download_*    (ranged GETs into .NAME.ferry-part, verified,
//!                                            renamed into place; resumes from its state)
//!   copy     ─► ferry_engine::copy          (server side, parallel part copies when large;
//!                                            between providers, s3:// -> gs:// say, the
//!                                            source's GET streamed into the other's upload)
//!   each result ─► Tally (objects, bytes, skipped, removed, failures with their reasons)
//! ```
//!
//! The planning is the command line's own (ferry-cli is a library this crate links for
//! the `ferry` console script anyway), so `client.cp(...)` and `ferry cp ...` name,
//! skip and refuse the same things; its `cp::Runner::execute` runs each job, so both
//! share the engine's limits (large uploads at once, one parts budget for all
//! downloads). What this module adds is the Python face: the client's own engine (its
//! credentials, connections and counters) instead of one built from the environment,
//! results counted instead of printed, and progress read from the runner's (hidden)
//! progress bar by the waiting Python thread.
//!
//! Failures: each job fails alone and the others go on (as the command line); at the end
//! the call raises if any failed, the first failure's class (`NotFound`, `Auth`, ...,
//! `OSError` for local files) with the count in the message and the whole summary as
//! its `summary` attribute. A usage mistake (two local paths, a directory without
//! `recursive`, a bucket without a key) is a `ValueError` before anything is sent.

use ferry_cli::common::{Global, Location, Output, UsageError};
use ferry_cli::cp::{jobs_for, Job, Runner};
use ferry_cli::sync::{self as plan, Decision, Mode, Planned, Reason, Side};
use ferry_engine::Engine;
use ferry_store::Provider;
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};

/// What `cp` and `sync` take besides their paths.
#[derive(Clone, Debug, Default)]
pub struct TransferOptions {
    pub resume: bool,
    pub content_type: Option<String>,
    pub concurrency: Option<usize>,
    pub part_size: Option<u64>,
    pub part_concurrency: Option<usize>,
}

impl TransferOptions {
    /// The command line's settings for these options: quiet (no display; the progress
    /// bar is hidden, and read by the caller).
    fn global(&self) -> Global {
        Global {
            quiet: true,
            concurrency: self.concurrency,
            part_size: self.part_size,
            part_concurrency: self.part_concurrency,
            ..Global::default()
        }
    }
}

/// What a transfer did, counted as it goes.
#[derive(Default)]
pub struct Tally {
    pub objects: u64,
    pub bytes: u64,
    pub resumed_bytes: u64,
    pub skipped: u64,
    pub deleted: u64,
    pub failed: Vec<(String, String)>,
    /// A dry run's actions: (op, source, dest, reason).
    pub planned: Vec<(String, String, String, String)>,
    /// The first failure, for the class of the exception raised at the end.
    pub first_error: Option<anyhow::Error>,
}

pub type SharedTally = Arc<Mutex<Tally>>;

fn tally(t: &SharedTally) -> std::sync::MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

fn failed(t: &SharedTally, what: String, e: anyhow::Error) {
    let mut t = tally(t);
    t.failed.push((what, format!("{e:#}")));
    if t.first_error.is_none() {
        t.first_error = Some(e);
    }
}

/// A transfer ready to run: its engine and runner (whose hidden progress bar counts the
/// bytes) and the provider its objects are at.
pub struct Prepared {
    pub runner: Runner,
    pub out: Output,
}

impl Prepared {
    /// `engine` writes (and, within one provider, does everything); `source` lists and
    /// reads the source objects of a copy between providers (ferry-cli's cp.rs streams
    /// those through this machine).
    pub fn new(engine: Engine, source: Engine, opts: &TransferOptions) -> Prepared {
        let g = opts.global();
        let out = Output::new(&g);
        // A hidden bar starts without a length, and grows one only from a known start.
        out.progress.bar.set_length(0);
        let mut runner = Runner::new(engine, &g, out.clone());
        runner.source = source;
        runner.resume = opts.resume;
        runner.content_type = opts.content_type.clone();
        Prepared { runner, out }
    }

    /// Bytes done and the total known so far (it grows as listings stream).
    pub fn progress(&self) -> (u64, u64) {
        (self.out.progress.bar.position(), self.out.progress.bar.length().unwrap_or(0))
    }
}

/// The locations of `cp`'s and `sync`'s arguments; `-` is refused (`put` and `get`
/// take streams and bytes).
pub fn location(s: &str) -> Result<Location, UsageError> {
    match ferry_cli::common::parse_location(s)? {
        Location::Stdio => Err(UsageError("'-' (stdin/stdout) is for the command line: use put or get".into())),
        l => Ok(l),
    }
}

/// The providers a cp's objects are at, `(source's, destination's)`: two when every
/// source is an object at one provider and the destination an object at another (the
/// copies stream through this machine), else the one of all its objects (S3 when it
/// names none; objects at two providers otherwise are refused), as `ferry cp` decides.
pub fn cp_providers(sources: &[Location], dest: &Location) -> anyhow::Result<(Provider, Provider)> {
    let of_sources: Vec<Option<Provider>> = sources.iter().map(Location::provider).collect();
    match (ferry_cli::cp::one_provider(of_sources.iter()), dest.provider()) {
        (Ok(a), Some(b)) if a != b && of_sources.iter().all(Option::is_some) => Ok((a, b)),
        _ => {
            let all: Vec<Option<Provider>> = of_sources.into_iter().chain([dest.provider()]).collect();
            let p = ferry_cli::cp::one_provider(all.iter())?;
            Ok((p, p))
        }
    }
}

/// `sync`'s providers, `(source's, destination's)`, as `ferry sync` decides.
pub fn sync_providers(src: &Side, dst: &Side) -> anyhow::Result<(Provider, Provider)> {
    match (src.provider(), dst.provider()) {
        (Some(a), Some(b)) if a != b => Ok((a, b)),
        (a, b) => {
            let p = ferry_cli::cp::one_provider([&a, &b])?;
            Ok((p, p))
        }
    }
}

/// Runs jobs `concurrency` at once, each result counted.
async fn run_jobs(runner: &Runner, jobs: BoxStream<'_, anyhow::Result<Job>>, t: &SharedTally) -> anyhow::Result<()> {
    let results = jobs
        .map_ok(|job| {
            if let Some(n) = job_size(&job) {
                runner.out.progress.add_total(n);
            }
            async move {
                match runner.execute(&job).await {
                    Ok((size, resumed)) => {
                        let mut t = tally(t);
                        t.objects += 1;
                        t.bytes += size;
                        t.resumed_bytes += resumed;
                    }
                    Err(e) => failed(t, job.source(), e),
                }
                Ok::<(), anyhow::Error>(())
            }
        })
        .try_buffer_unordered(runner.g.concurrency());
    futures_util::pin_mut!(results);
    while let Some(r) = results.next().await {
        r?;
    }
    Ok(())
}

fn job_size(job: &Job) -> Option<u64> {
    match job {
        Job::Upload { size, .. } => Some(*size),
        Job::Download { size, .. } | Job::Copy { size, .. } => *size,
        Job::Refuse { .. } => None,
    }
}

/// `cp` of `sources` to `dest` (module note).
pub async fn cp(
    prep: &Prepared,
    sources: Vec<Location>,
    dest: Location,
    recursive: bool,
    t: SharedTally,
) -> anyhow::Result<()> {
    let many = sources.len() > 1;
    if many {
        if let Location::Local(d) = &dest {
            std::fs::create_dir_all(d)
                .map_err(|e| anyhow::Error::new(e).context(format!("creating {}", d.display())))?;
        }
    }
    for src in &sources {
        let jobs = jobs_for(&prep.runner.source, src, &dest, recursive, many, ferry_cli::wildcard::Literal::First)?;
        run_jobs(&prep.runner, jobs, &t).await?;
    }
    Ok(())
}

/// What `sync` does besides copying.
#[derive(Clone, Copy, Debug)]
pub struct SyncOptions {
    pub delete: bool,
    pub dry_run: bool,
    pub mode: Mode,
}

enum Action {
    Copy(Job, Reason),
    Remove(String),
    Skip,
}

/// `sync` of `src` into `dst` (module note; ferry-cli's sync.rs has the rule and why
/// the join may act as it goes).
pub async fn sync(prep: &Prepared, src: Side, dst: Side, o: SyncOptions, t: SharedTally) -> anyhow::Result<()> {
    let (engine, source) = (prep.runner.client.clone(), prep.runner.source.clone());
    let planned = plan::plan(
        plan::in_order(src.list(&source), "source"),
        plan::in_order(dst.list(&engine), "destination"),
        o.mode,
    );
    let actions = planned
        .map_ok(|p| {
            let (engine, source, src, dst) = (engine.clone(), source.clone(), src.clone(), dst.clone());
            async move {
                let (rel, meta, d) = match p {
                    Planned::Extra { rel } => return Ok::<_, anyhow::Error>(Action::Remove(rel)),
                    Planned::Decide { rel, src: meta, dst: theirs, decision } => {
                        let d = match decision {
                            Decision::Compare => {
                                match plan::contents_differ((&source, &engine), &src, &dst, &rel).await? {
                                    Some(true) => Decision::Copy(Reason::Checksum),
                                    Some(false) => Decision::Skip,
                                    None => plan::decide(&meta, theirs.as_ref(), Mode::SizeAndTime),
                                }
                            }
                            d => d,
                        };
                        (rel, meta, d)
                    }
                };
                Ok(match d {
                    Decision::Copy(reason) => Action::Copy(plan::make_job(&src, &dst, &rel, &meta), reason),
                    _ => Action::Skip,
                })
            }
        })
        .try_buffer_unordered(prep.runner.g.concurrency());
    let removals = Removals::new(engine.clone(), dst.clone(), t.clone(), o.dry_run);
    let jobs = actions
        .try_filter_map(|a| {
            let (t, removals) = (t.clone(), &removals);
            async move {
                Ok(match a {
                    Action::Copy(job, reason) if o.dry_run => {
                        let planned = ("cp".into(), job.source(), job.dest(), reason.as_str().into());
                        tally(&t).planned.push(planned);
                        None
                    }
                    Action::Copy(job, _) => Some(job),
                    Action::Remove(rel) if o.delete => {
                        removals.add(rel).await;
                        None
                    }
                    Action::Remove(_) => None,
                    Action::Skip => {
                        tally(&t).skipped += 1;
                        None
                    }
                })
            }
        })
        .boxed();
    let copied = run_jobs(&prep.runner, jobs, &t).await;
    removals.flush().await;
    copied
}

/// The destination's extras, removed as the join finds them: local files at once,
/// objects in batches of the store's largest DeleteObjects (1,000 on S3).
struct Removals {
    engine: Engine,
    dst: Side,
    t: SharedTally,
    dry: bool,
    pending: tokio::sync::Mutex<Vec<String>>,
}

impl Removals {
    fn new(engine: Engine, dst: Side, t: SharedTally, dry: bool) -> Removals {
        Removals { engine, dst, t, dry, pending: Default::default() }
    }

    async fn add(&self, rel: String) {
        if self.dry {
            tally(&self.t).planned.push(("rm".into(), self.dst.name(&rel), String::new(), "not in the source".into()));
            return;
        }
        let batch = {
            let mut p = self.pending.lock().await;
            p.push(rel);
            if p.len() < self.engine.capabilities().max_batch_delete && matches!(self.dst, Side::Remote { .. }) {
                return;
            }
            std::mem::take(&mut *p)
        };
        self.remove(batch).await;
    }

    async fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending.lock().await);
        if !batch.is_empty() {
            self.remove(batch).await;
        }
    }

    async fn remove(&self, rels: Vec<String>) {
        match &self.dst {
            Side::Local(root) => {
                for r in rels {
                    match std::fs::remove_file(root.join(&r)) {
                        Ok(()) => tally(&self.t).deleted += 1,
                        Err(e) => failed(&self.t, self.dst.name(&r), e.into()),
                    }
                }
            }
            Side::Remote { provider, bucket, prefix } => {
                let keys: Vec<String> = rels.iter().map(|r| format!("{prefix}{r}")).collect();
                match self.engine.delete_batch(bucket, &keys).await {
                    Ok(out) => {
                        tally(&self.t).deleted += out.deleted.len() as u64;
                        for e in out.errors {
                            let what = format!("{provider}://{bucket}/{}", e.key);
                            failed(&self.t, what, anyhow::anyhow!("not removed: {} {}", e.code, e.message));
                        }
                    }
                    Err(e) => {
                        let e = anyhow::Error::new(e);
                        for k in keys {
                            failed(
                                &self.t,
                                format!("{provider}://{bucket}/{k}"),
                                anyhow::anyhow!("not removed: {e:#}"),
                            );
                        }
                        let mut t = tally(&self.t);
                        if t.first_error.is_none() {
                            t.first_error = Some(e);
                        }
                    }
                }
            }
        }
    }
}

/// What `cp` or `sync` did (`Client.cp`, `Client.sync`; on failure, the exception's
/// `summary`).
#[pyclass(frozen, module = "ferry", name = "TransferSummary", get_all)]
pub struct TransferSummary {
    /// Objects (or files) transferred.
    pub objects: u64,
    /// Their bytes, including those reused from an interrupted earlier run.
    pub bytes: u64,
    /// Bytes an interrupted earlier transfer had already moved (resumed, not re-sent).
    pub resumed_bytes: u64,
    /// `sync`: items already alike at the destination.
    pub skipped: u64,
    /// `sync(delete=True)`: extras removed from the destination.
    pub deleted: u64,
    /// `(source, reason)` of every failure.
    pub failed: Vec<(String, String)>,
    /// `sync(dry_run=True)`: `(op, source, dest, reason)` of what would be done.
    pub planned: Vec<(String, String, String, String)>,
}

#[pymethods]
impl TransferSummary {
    fn __repr__(&self) -> String {
        format!(
            "TransferSummary(objects={}, bytes={}, resumed_bytes={}, skipped={}, deleted={}, failed={}, planned={})",
            self.objects,
            self.bytes,
            self.resumed_bytes,
            self.skipped,
            self.deleted,
            self.failed.len(),
            self.planned.len()
        )
    }
}

impl TransferSummary {
    /// The summary, and the first failure (if any) to raise.
    pub fn from_tally(t: SharedTally) -> (TransferSummary, Option<anyhow::Error>) {
        let mut t = tally(&t);
        let first = t.first_error.take();
        let s = TransferSummary {
            objects: t.objects,
            bytes: t.bytes,
            resumed_bytes: t.resumed_bytes,
            skipped: t.skipped,
            deleted: t.deleted,
            failed: std::mem::take(&mut t.failed),
            planned: std::mem::take(&mut t.planned),
        };
        (s, first)
    }
}
