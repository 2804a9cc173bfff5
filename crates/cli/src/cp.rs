//! `ferry cp`: local -> S3, S3 -> local, S3 -> S3 (server side), stdin -> S3
//! and S3 -> stdout; one object, a directory tree (`--recursive`) or a wildcard.
//!
//! ```text
//! sources ─► jobs, streamed (listing pages / directory walk) ─► up to --concurrency jobs
//!   upload   ferry_engine::upload_file   (one PUT, or parallel parts; resumes an upload)
//!   download ferry_engine::download_*    (ranged parallel GETs into .NAME.ferry-part,
//!                                         verified, renamed; resumes from its state)
//!   copy     ferry_engine::copy          (server side: CopyObject, or parallel
//!                                         UploadPartCopy above --part-size, any size)
//!   copy between providers (s3:// -> gs://, ...): one GET of the source, its body
//!            streamed into ferry_engine::upload_stream at the destination
//! each job ─► one result line (or JSON line); a failure names its object and cause,
//!             the others go on; any failure makes the exit code 1
//! ```
//!
//! Memory: jobs are made as the listing streams, and large uploads (above one part)
//! take a slot of [`LARGE_UPLOADS_AT_ONCE`], so at most `2 * part_concurrency` parts
//! are in flight however many files there are; each streams from its file and holds a
//! couple of 256 KiB chunks, not the part (engine's upload.rs). Downloads buffer no more
//! than a write batch per part in flight, and all downloads of one command share
//! [`DOWNLOAD_PARTS_AT_ONCE`] parts in flight, a limit of the runner's engine that its
//! admission applies (engine's admission.rs and download/ have the design;
//! docs/lab/cli-cp-memory.md the measurements).
//!
//! Names follow the AWS CLI: a destination ending in `/` (or an existing directory)
//! receives the source's base name; `--recursive` copies what is under the source
//! directory or prefix (not the directory itself); a wildcard's matches keep their path
//! below the pattern's directory. Downloaded files get the object's Last-Modified as
//! their mtime, so `sync` can compare them later.
//!
//! A copy between providers streams through this machine: the source's GET body (checked
//! as it arrives) is cut into parts as it comes, so it holds `--part-concurrency` parts
//! of `--part-size` at most, whatever the object's size; the destination is told the
//! size up front (`expected_size`), and a source body that turns out bad fails the
//! upload, which is then aborted: nothing appears under the destination name.
//!
//! Resume needs the source again: `cp -` reads stdin once, so an interrupted one cannot
//! continue and a re-run sends everything again (a failed one aborts its upload; a killed
//! one leaves it in progress, never reused: `ferry ls/rm --incomplete` show and clear
//! such uploads). Its part size is fixed before the first byte, so a stream above
//! 10,000 parts of --part-size needs `--expected-size` (engine's upload.rs).

use crate::common::{parse_location, usage, Global, Location, Output};
use crate::wildcard::{has_wildcard, list_matching, literal_or_pattern, local_matching, Literal, OneObject, Pattern};
use anyhow::{Context, Result};
use bytes::{Bytes, BytesMut};
use clap::Args;
use ferry_engine::download::Mtime;
use ferry_engine::Engine;
use ferry_store::{ObjectInfo, ObjectRef, Provider, StoreUrl};
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::Semaphore;

/// Large uploads (more than one part) at once: bounds the parts in flight (module
/// note). Two files of 8 parts keep 16 parts in flight; four cost peak RSS at the same
/// speed (docs/lab/cli-cp-memory.md, with the command).
pub const LARGE_UPLOADS_AT_ONCE: usize = 2;

/// Ranged GETs in flight across all the downloads of one command (module note): two
/// files' worth of 8 parts; 8 and 32 gave the same CPU, 16 the lower RSS
/// (docs/lab/cli-cp-memory.md, with the command).
pub const DOWNLOAD_PARTS_AT_ONCE: usize = 16;

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:
  ferry cp file.bin s3://bucket/dir/            # -> s3://bucket/dir/file.bin
  ferry cp s3://bucket/dir/file.bin .           # -> ./file.bin (atomic; resumes if re-run)
  ferry cp --recursive ./photos s3://bucket/photos/
  ferry cp 's3://bucket/logs/**.gz' ./logs/     # '*' within a segment, '**' across
  ferry cp s3://bucket/a s3://bucket/b          # server-side copy
  tar c dir | ferry cp - s3://bucket/dir.tar    # stdin, multipart as it streams
  ferry cp s3://bucket/dir.tar - | tar x        # to stdout

An interrupted cp of a large file, run again, continues: downloads keep the finished
ranges in .NAME.ferry-part/.ferry-state beside the target; uploads reuse the parts of the
multipart upload left in progress (checked by CRC64NVME). A copy from stdin (cp -)
cannot resume: the bytes already read are gone, so a re-run starts over; a killed one
leaves its upload in progress: see `ferry ls --incomplete` and `ferry rm --incomplete`.
A stream above 78 GiB (10,000 parts of 8 MiB) needs --expected-size:
  pg_dump db | ferry cp --expected-size 200GiB - s3://bucket/db.dump")]
pub struct CpArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// Sources, then the destination (s3://bucket/key, a local path, or -).
    #[arg(required = true, num_args = 2.., value_name = "SOURCE... DEST")]
    pub paths: Vec<String>,
    /// Copy what is under a local directory or an S3 prefix.
    #[arg(long, short = 'r')]
    pub recursive: bool,
    /// Content-Type of uploaded objects.
    #[arg(long)]
    pub content_type: Option<String>,
    /// Start over instead of continuing an interrupted transfer.
    #[arg(long)]
    pub no_resume: bool,
    /// With `cp - s3://...`: the most bytes stdin will give (90GB, 200GiB, 12345). Parts
    /// are made large enough for S3's 10,000 (without it, 10,000 parts of --part-size:
    /// 78 GiB with 8 MiB), and a stream longer than this fails (the upload aborted).
    #[arg(long, value_name = "BYTES", value_parser = crate::units::parse_bytes)]
    pub expected_size: Option<u64>,
    /// Take `*` and `?` in sources literally: no wildcard expansion (keys and file names
    /// may contain them). Without it, a source that names an existing object or file
    /// is that one, and a pattern only otherwise.
    #[arg(long)]
    pub raw: bool,
}

/// One transfer.
#[derive(Clone, Debug)]
pub enum Job {
    Upload {
        path: PathBuf,
        obj: ObjectRef,
        size: u64,
    },
    /// `size`/`etag` from a listing when known (a small object then needs no HEAD).
    Download {
        obj: ObjectRef,
        path: PathBuf,
        size: Option<u64>,
        etag: Option<String>,
        mtime: Option<SystemTime>,
    },
    Copy {
        src: ObjectRef,
        dst: ObjectRef,
        size: Option<u64>,
    },
    /// A listed object that cannot be written where its name says (reported as failed).
    Refuse {
        src: ObjectRef,
        reason: String,
    },
}

/// A key's path below a destination directory, refused if it could leave it (`..`
/// segments, an absolute path): keys come from the server and are not trusted.
pub fn local_below(dir: &std::path::Path, rel: &str, src: &ObjectRef) -> Result<PathBuf, Box<Job>> {
    if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|c| c == ".." || c == ".") {
        return Err(Box::new(Job::Refuse {
            src: src.clone(),
            reason: format!("the key's path {rel:?} would leave the destination directory"),
        }));
    }
    Ok(dir.join(rel))
}

impl Job {
    /// The source's name for the user (an object's URL, its provider carried).
    pub fn source(&self) -> String {
        match self {
            Job::Upload { path, .. } => path.display().to_string(),
            Job::Download { obj, .. } => obj.to_string(),
            Job::Copy { src, .. } | Job::Refuse { src, .. } => src.to_string(),
        }
    }
    pub fn dest(&self) -> String {
        match self {
            Job::Upload { obj, .. } => obj.to_string(),
            Job::Download { path, .. } => path.display().to_string(),
            Job::Copy { dst, .. } => dst.to_string(),
            Job::Refuse { .. } => String::new(),
        }
    }
    fn size(&self) -> Option<u64> {
        match self {
            Job::Upload { size, .. } => Some(*size),
            Job::Download { size, .. } | Job::Copy { size, .. } => *size,
            Job::Refuse { .. } => Some(0),
        }
    }
}

/// What runs jobs: the client, the settings, the output, the large-object slots.
#[derive(Clone)]
pub struct Runner {
    /// The destination's store (and the only one, unless copying between providers),
    /// bounding the parts of its downloads to [`DOWNLOAD_PARTS_AT_ONCE`] in all.
    pub client: Engine,
    /// The source objects' store: `client` but for a copy between providers.
    pub source: Engine,
    pub g: Global,
    pub out: Output,
    large: Arc<Semaphore>,
    pub resume: bool,
    pub content_type: Option<String>,
    /// Directories this command has made (or found) for its downloads: each is made
    /// once, not once per file (a `create_dir_all` of an existing directory is a
    /// failed `mkdir` and a `statx`).
    made_dirs: Arc<Mutex<HashSet<PathBuf>>>,
}

impl Runner {
    pub fn new(client: Engine, g: &Global, out: Output) -> Runner {
        let client = client.with_download_parts(DOWNLOAD_PARTS_AT_ONCE);
        Runner {
            source: client.clone(),
            client,
            g: g.clone(),
            out,
            large: Arc::new(Semaphore::new(LARGE_UPLOADS_AT_ONCE)),
            resume: true,
            content_type: None,
            made_dirs: Default::default(),
        }
    }

    /// Makes `dir` and its parents unless this command already has.
    fn make_dir(&self, dir: &Path) -> Result<()> {
        if self.made_dirs.lock().unwrap_or_else(|p| p.into_inner()).contains(dir) {
            return Ok(());
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        self.made_dirs.lock().unwrap_or_else(|p| p.into_inner()).insert(dir.to_path_buf());
        Ok(())
    }

    /// Runs a stream of jobs, `--concurrency` at once; failures are reported and counted.
    ///
    /// The jobs in flight are the concurrency this command asks of its endpoints, so each
    /// endpoint's controller starts there (`Controller::start_at`) rather than climbing
    /// from its initial few by slow start, which is most of a short batch's time; once
    /// an endpoint has throttled or slowed, the controller's own finding stands.
    pub async fn run_all(&self, jobs: BoxStream<'_, Result<Job>>) -> Result<()> {
        let in_flight = std::sync::atomic::AtomicUsize::new(0);
        let controllers = {
            let (a, b) = (self.client.controller(), self.source.controller());
            if Arc::ptr_eq(&a, &b) {
                vec![a]
            } else {
                vec![a, b]
            }
        };
        let results = jobs
            .map_ok(|job| {
                if let Some(n) = job.size() {
                    self.out.progress.add_total(n);
                }
                let (in_flight, controllers) = (&in_flight, &controllers);
                async move {
                    let n = in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    for c in controllers.iter().filter(|c| c.limit() < n) {
                        c.start_at(n);
                    }
                    self.run_one(&job).await;
                    in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    Ok::<(), anyhow::Error>(())
                }
            })
            .try_buffer_unordered(self.g.concurrency());
        futures_util::pin_mut!(results);
        while let Some(r) = results.next().await {
            r?;
        }
        Ok(())
    }

    /// One job, its result reported.
    pub async fn run_one(&self, job: &Job) {
        match self.execute(job).await {
            Ok((size, resumed)) => {
                self.out.ok();
                self.out.emit_done(
                    || format!("cp {} {}", job.source(), job.dest()),
                    || serde_json::json!({"op": "cp", "source": job.source(), "dest": job.dest(), "size": size, "resumed_bytes": resumed}),
                );
            }
            Err(e) => self.out.fail_copy("cp", &job.source(), &job.dest(), &crate::common::explain(&e)),
        }
    }

    /// Runs a job: `(bytes, bytes reused from an earlier run)`.
    pub async fn execute(&self, job: &Job) -> Result<(u64, u64)> {
        let large = matches!(job, Job::Upload { size, .. } if *size > self.g.part_size());
        let _slot = if large { Some(self.large.acquire().await?) } else { None };
        let progress = Some(self.out.progress.bytes_fn());
        match job {
            Job::Upload { path, obj, .. } => {
                let mut p = self.g.upload_params();
                p.resume = self.resume;
                p.put.content_type = self.content_type.clone();
                let r = ferry_engine::upload_file(&self.client, path, obj, &p, progress).await?;
                Ok((r.size, r.resumed_bytes))
            }
            Job::Download { obj, path, size, etag, mtime } => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    self.make_dir(dir)?;
                }
                let mut p = self.g.download_params();
                p.resume = self.resume;
                // Set on the temp file before the rename (engine's download/); the
                // listing's time when there is one, so `sync` compares the same time.
                p.mtime = match mtime {
                    Some(t) => Mtime::At(*t),
                    None => Mtime::LastModified,
                };
                if !self.resume {
                    ferry_engine::download::discard_partial(path);
                }
                let r = match (size, etag) {
                    // Small and listed: one verified GET, no HEAD.
                    (Some(n), Some(e)) if *n <= p.part_size => {
                        let info =
                            ObjectInfo { size: *n, etag: Some(e.clone()), last_modified: *mtime, ..Default::default() };
                        ferry_engine::download_with_info(&self.client, obj, info, path, &p, progress).await?
                    }
                    _ => ferry_engine::download_file(&self.client, obj, path, &p, progress).await?,
                };
                Ok((r.info.size, r.resumed_bytes))
            }
            Job::Refuse { reason, .. } => Err(anyhow::anyhow!("{reason}")),
            Job::Copy { src, dst, .. } if self.source.provider() != self.client.provider() => {
                self.copy_across(src, dst, progress).await
            }
            Job::Copy { src, dst, size } => {
                // Server side: CopyObject, or parallel UploadPartCopy above the part size.
                let p = ferry_engine::copy::CopyParams {
                    multipart_threshold: self.g.part_size(),
                    part_size: self.g.part_size(),
                    concurrency: self.g.part_concurrency(),
                };
                let r = ferry_engine::copy::copy_object(&self.client, src, dst, *size, &p, progress).await?;
                Ok((r.size, 0))
            }
        }
    }
}

impl Runner {
    /// A copy between providers, streamed through this machine (module note).
    async fn copy_across(
        &self,
        src: &ObjectRef,
        dst: &ObjectRef,
        progress: Option<ferry_engine::download::ProgressFn>,
    ) -> Result<(u64, u64)> {
        let got = self.source.get(src, ferry_store::GetParams::default()).await?;
        let mut p = self.g.upload_params();
        p.resume = false;
        p.expected_size = Some(got.meta.size);
        p.put.content_type = self.content_type.clone().or(got.meta.content_type.clone());
        let body = got.body.map(|r| r.map_err(std::io::Error::other)).boxed();
        let r = ferry_engine::upload_stream(&self.client, body, dst, &p, progress).await?;
        Ok((r.size, 0))
    }
}

fn base_name(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

/// `prefix` as a directory: "" stays "", "a" becomes "a/".
pub fn as_dir(prefix: &str) -> String {
    if prefix.is_empty() || prefix.ends_with('/') {
        prefix.to_owned()
    } else {
        format!("{prefix}/")
    }
}

/// A stream of stdin's bytes in chunks of up to 1 MiB.
fn stdin_stream() -> BoxStream<'static, std::io::Result<Bytes>> {
    use tokio::io::AsyncReadExt;
    futures_util::stream::unfold(tokio::io::stdin(), |mut s| async move {
        let mut buf = BytesMut::with_capacity(1 << 20);
        match s.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), s)),
            Err(e) => Some((Err(e), s)),
        }
    })
    .boxed()
}

/// The jobs one source makes toward `dest`. `*` and `?` in a source make a pattern
/// unless `literal` says otherwise (wildcard.rs module note): a file or object of that
/// very name is itself, unless `--raw`, whatever its name.
pub fn jobs_for(
    client: &Engine,
    src: &Location,
    dest: &Location,
    recursive: bool,
    many: bool,
    literal: Literal,
) -> Result<BoxStream<'static, Result<Job>>> {
    match (src, dest) {
        (Location::Local(_), Location::Local(_)) => Err(usage("both source and destination are local: use cp(1)")),
        (_, Location::Stdio) | (Location::Stdio, _) => {
            Err(usage("'-' is a whole object: cp - s3://bucket/key, or cp s3://bucket/key -"))
        }
        (Location::Local(path), Location::Object(dest)) => {
            let key = &dest.key;
            let s = path.to_string_lossy().into_owned();
            let is_dir = path.is_dir();
            let wild = has_wildcard(&s) && literal == Literal::First && !path.exists();
            if wild || (is_dir && recursive) {
                let prefix = as_dir(key);
                let dest = dest.clone();
                let files = local_matching(path, recursive, wild)?;
                Ok(futures_util::stream::iter(files.map(move |f| {
                    let f = f?;
                    Ok(Job::Upload { obj: dest.at(format!("{prefix}{}", f.rel)), path: f.path, size: f.size })
                }))
                .boxed())
            } else if is_dir {
                Err(usage(format!("{} is a directory: use --recursive", path.display())))
            } else {
                // A missing file fails as its own job (reported, the other sources go on).
                let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let k = if key.is_empty() || key.ends_with('/') || many {
                    format!("{}{name}", as_dir(key))
                } else {
                    key.clone()
                };
                let job = Job::Upload { path: path.clone(), obj: dest.at(k), size };
                Ok(futures_util::stream::once(async move { Ok(job) }).boxed())
            }
        }
        (Location::Object(src), dest) => {
            let key = &src.key;
            if recursive {
                let pattern = match literal {
                    Literal::Always => Pattern::under(key),
                    Literal::First => Pattern::new(key, true)?,
                };
                return Ok(listed_jobs(client, src, pattern, dest));
            }
            if key.is_empty() {
                return Err(usage(format!(
                    "{}://{} is a bucket: use --recursive, or name a key",
                    src.provider, src.bucket
                )));
            }
            let obj = src.object();
            if literal == Literal::Always || !has_wildcard(key) {
                let job = one_job(obj, None, dest, many);
                return Ok(futures_util::stream::once(async move { Ok(job) }).boxed());
            }
            // The object of that very name if there is one (a HEAD), else the pattern.
            let (client, src, dest) = (client.clone(), src.clone(), dest.clone());
            Ok(futures_util::stream::once(async move {
                Ok::<_, anyhow::Error>(match literal_or_pattern(&client, &obj, literal).await? {
                    OneObject::Itself(info) => {
                        futures_util::stream::once(async move { Ok(one_job(obj, info, &dest, many)) }).boxed()
                    }
                    OneObject::Pattern => listed_jobs(&client, &src, Pattern::new(&src.key, true)?, &dest),
                })
            })
            .try_flatten()
            .boxed())
        }
    }
}

/// The jobs of the objects a listing pattern names, each below the destination
/// directory (or prefix) by its name relative to the pattern's base; `src` names the
/// source's bucket (its key is the pattern's).
fn listed_jobs(client: &Engine, src: &StoreUrl, pattern: Pattern, dest: &Location) -> BoxStream<'static, Result<Job>> {
    let p2 = pattern.clone();
    let src = src.clone();
    let dest = dest.clone();
    list_matching(client, &src.bucket, pattern, false)
        .map_ok(move |o| {
            let rel = p2.relative(&o.key).to_owned();
            let obj = src.at(o.key.clone());
            match &dest {
                Location::Local(dir) => match local_below(dir, &rel, &obj) {
                    Ok(path) => Job::Download {
                        obj,
                        path,
                        size: Some(o.size),
                        etag: Some(o.etag.clone()),
                        mtime: Some(o.last_modified),
                    },
                    Err(refused) => *refused,
                },
                Location::Object(d) => {
                    Job::Copy { src: obj, dst: d.at(format!("{}{rel}", as_dir(&d.key))), size: Some(o.size) }
                }
                Location::Stdio => unreachable!("refused by jobs_for"),
            }
        })
        .boxed()
}

/// The job of one named object (`info` when a HEAD already described it).
fn one_job(obj: ObjectRef, info: Option<ObjectInfo>, dest: &Location, many: bool) -> Job {
    let key = obj.key.clone();
    match dest {
        Location::Local(p) => {
            let into_dir = p.is_dir() || p.to_string_lossy().ends_with('/') || many;
            let path = if into_dir { p.join(base_name(&key)) } else { p.clone() };
            let (size, etag, mtime) = match info {
                Some(i) => (Some(i.size), i.etag, i.last_modified),
                None => (None, None, None),
            };
            Job::Download { obj, path, size, etag, mtime }
        }
        Location::Object(d) => {
            let dk = &d.key;
            let k = if dk.is_empty() || dk.ends_with('/') || many {
                format!("{}{}", as_dir(dk), base_name(&key))
            } else {
                dk.clone()
            };
            Job::Copy { src: obj, dst: d.at(k), size: info.map(|i| i.size) }
        }
        Location::Stdio => unreachable!("refused by jobs_for"),
    }
}

pub async fn run(args: CpArgs, g: &Global) -> Result<()> {
    let mut locs = Vec::new();
    for p in &args.paths {
        locs.push(parse_location(p)?);
    }
    let dest = locs.pop().expect("clap requires two paths");
    let many = locs.len() > 1;
    if many && dest == Location::Stdio {
        return Err(usage("several sources cannot go to '-'"));
    }
    if args.expected_size.is_some() && !matches!(&locs[..], [Location::Stdio]) {
        return Err(usage("--expected-size is for a copy from stdin: cp --expected-size BYTES - s3://bucket/key"));
    }
    let providers: Vec<Option<Provider>> = locs.iter().chain([&dest]).map(Location::provider).collect();
    // Objects to objects at another provider: the destination's client writes, the
    // source's lists and reads (module note).
    let sources: Vec<Option<Provider>> = locs.iter().map(Location::provider).collect();
    let (client, source) = match (one_provider(sources.iter()), dest.provider()) {
        (Ok(a), Some(b)) if a != b && sources.iter().all(Option::is_some) => (g.client(b)?, g.client(a)?),
        _ => {
            let c = g.client(one_provider(providers.iter())?)?;
            (c.clone(), c)
        }
    };
    // Whole objects through stdin/stdout.
    if let [src] = &locs[..] {
        match (src, &dest) {
            (Location::Stdio, Location::Object(dest)) => {
                if dest.key.is_empty() || dest.key.ends_with('/') {
                    return Err(usage("stdin needs a full object name: cp - s3://bucket/key"));
                }
                let out = Output::new(g);
                let obj = dest.object();
                let mut p = g.upload_params();
                p.put.content_type = args.content_type.clone();
                p.expected_size = args.expected_size;
                match ferry_engine::upload_stream(&client, stdin_stream(), &obj, &p, Some(out.progress.bytes_fn()))
                    .await
                {
                    Ok(r) => {
                        out.ok();
                        out.emit_done(
                            || format!("cp - {obj}"),
                            || serde_json::json!({"op": "cp", "source": "-", "dest": obj.to_string(), "size": r.size}),
                        );
                    }
                    Err(e) => out.fail("cp", "-", &e),
                }
                return out.finish();
            }
            (Location::Object(src), Location::Stdio) => {
                if src.key.is_empty() {
                    return Err(usage("stdout takes one object: cp s3://bucket/key -"));
                }
                let obj = src.object();
                let obj =
                    crate::wildcard::one_object(&client, &obj, Literal::from_raw(args.raw), "cp to stdout").await?;
                return crate::cat::to_stdout(&client, &obj).await;
            }
            _ => {}
        }
    }
    let out = Output::new(g);
    let mut runner = Runner::new(client.clone(), g, out.clone());
    runner.source = source.clone();
    runner.resume = !args.no_resume;
    runner.content_type = args.content_type.clone();
    if many {
        if let Location::Local(d) = &dest {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
    }
    for src in &locs {
        let jobs = jobs_for(&source, src, &dest, args.recursive, many, Literal::from_raw(args.raw))?;
        runner.run_all(jobs).await?;
    }
    out.finish()
}

/// The provider of a command's objects (S3 when it names none). Objects at two
/// providers are refused here; `cp` and `sync` from objects at one provider to objects
/// at another do not come here (their copies stream through this machine).
pub fn one_provider<'a>(providers: impl IntoIterator<Item = &'a Option<Provider>>) -> Result<Provider> {
    let mut found: Option<Provider> = None;
    for p in providers.into_iter().flatten() {
        match found {
            Some(f) if f != *p => {
                return Err(usage(format!(
                    "copies between providers ({f}:// and {p}://) are not supported yet: \
                     copy to a local directory, then from it"
                )))
            }
            _ => found = Some(*p),
        }
    }
    Ok(found.unwrap_or(Provider::S3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(as_dir(""), "");
        assert_eq!(as_dir("a"), "a/");
        assert_eq!(as_dir("a/"), "a/");
        assert_eq!(base_name("a/b/c.txt"), "c.txt");
        assert_eq!(base_name("c.txt"), "c.txt");
    }

    #[test]
    fn keys_cannot_leave_the_destination() {
        let o = ObjectRef::new("b", "k");
        let d = std::path::Path::new("/dst");
        assert_eq!(local_below(d, "a/b.txt", &o).unwrap(), PathBuf::from("/dst/a/b.txt"));
        for bad in ["../x", "a/../../x", "/etc/passwd", "a/./b", ""] {
            assert!(local_below(d, bad, &o).is_err(), "{bad}");
        }
    }
}
