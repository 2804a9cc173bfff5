//! `ferry sync`: make a destination directory or prefix like a source, both ways
//! (local -> S3, S3 -> local, S3 -> S3; any provider's URLs in place of S3's, and two
//! providers' objects, s3:// -> gs:// say, whose copies stream through this machine as
//! `cp`'s do and whose `--checksum` compares stored CRCs only when both sides keep the
//! same one, else falls back to the default rule).
//!
//! ```text
//! source listing ─┐  both in S3 key order (UTF-8 bytes of the relative name): S3
//! dest listing ───┤  listings are; the local walk is made so (wildcard.rs `walk`)
//!                 ▼
//! merge join, one name at a time (an out-of-order listing is an error, never a guess)
//!   source only / both ─► decide(source, dest, mode)
//!     Copy(reason) ─► a cp job (cp.rs Runner: same atomic, resumable transfers)
//!     Compare      ─► --checksum with equal sizes: HEAD the remote side(s), hash the local
//!                     file with the stored algorithm (CRC64NVME, CRC32C, CRC32), or between
//!                     providers storing different kinds read one object (below) ─► Copy | Skip
//!     Skip
//!   dest only ─► --delete: removed as the join goes (S3 in DeleteObjects batches of
//!                1,000), else left alone
//! --dry-run ─► the same decisions, printed as "(dry run) cp|rm ..." and nothing done
//! ```
//!
//! The default rule is s5cmd's and the AWS CLI's: copy when the destination lacks the
//! item, the sizes differ, or the source is newer (mtimes compared in whole seconds,
//! since HTTP dates carry no more). Downloads set the file's mtime to the object's
//! Last-Modified, and an upload's Last-Modified is later than the file's mtime, so a
//! second sync in either direction copies nothing. `--checksum` compares content
//! instead: the checksum S3 stores (CRC64NVME or CRC32C, as ferry and the AWS SDKs
//! upload) against the same CRC of the local bytes, which no common tool does today;
//! where no full-object checksum is stored it falls back to the default rule.
//!
//! Between two providers the stored kinds may differ: S3 (as ferry uploads) keeps a
//! CRC64NVME, GCS a CRC32C, Azure none that covers a block blob. The same kind on both
//! sides is compared as stored (two HEADs). Otherwise the destination's kind decides:
//! the source object is read (one GET, no write) and hashed with the destination's
//! algorithm; where the destination stores none (Azure), its own object is read and
//! hashed with the source's. A read costs the object's bytes once, still less than a
//! copy, which would read them and write them too. Neither side storing one falls back
//! to the default rule.
//!
//! Memory is bounded whatever the number of items: each listing holds one page (1,000
//! keys) or, locally, one sorted entry list per directory on the walk's current path;
//! the join holds one item per side; then `--concurrency` decisions and jobs in flight
//! and up to 1,000 names waiting for a DeleteObjects, instead of an index of the whole
//! destination (~100 bytes per item; docs/lab/cli-sync-memory.md compares the two). The
//! join also needs no listing to finish before the first copy starts.
//!
//! The join trusts the order: S3 returns keys sorted (ListObjectsV2's contract) and the
//! walk sorts. A listing found out of order stops the sync with an error, but only when
//! the misplaced name arrives; a destination name passed before it may already have
//! been taken for an extra (and removed with --delete). The in-memory index had no
//! such exposure; a server that breaks the contract is the price.
//!
//! Copies and removals run while the join goes on. That is safe because they only touch
//! names the join has passed on both sides: a download creates a file in a directory
//! whose place in the walk is before the file's own name, so the walk never reads it
//! (it has read that directory already, or it did not exist), and S3 listings continue
//! from their token after the last key returned.

use crate::common::{parse_location, usage, Global, Location, Output};
use crate::cp::{as_dir, Job, Runner};
use crate::wildcard::{list_matching, walk, Pattern};
use anyhow::{Context, Result};
use clap::Args;
use ferry_engine::Engine;
use ferry_proto::checksum::{ChecksumAlgorithm, Checksummer};
use ferry_store::{GetParams, ObjectInfo, ObjectRef, Provider};
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:
  ferry sync ./site s3://bucket/site/                 # upload what is new or changed
  ferry sync --delete s3://bucket/site/ ./mirror/     # download, remove what the source lacks
  ferry sync --checksum ./data s3://bucket/data/      # compare stored CRCs, not dates
  ferry sync --dry-run --delete ./site s3://bucket/site/   # print exactly what would happen

By default an item is copied when the destination lacks it, the sizes differ, or the
source is newer. --checksum compares the CRC64NVME/CRC32C S3 stores with the same CRC
of the local bytes.")]
pub struct SyncArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// A local directory or s3://bucket/prefix.
    pub source: String,
    /// A local directory or s3://bucket/prefix.
    pub dest: String,
    /// Remove from the destination what the source does not have.
    #[arg(long)]
    pub delete: bool,
    /// Print what would be copied and removed; do nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Compare content by checksum when sizes are equal, not modification times.
    #[arg(long, conflicts_with = "size_only")]
    pub checksum: bool,
    /// Compare sizes only.
    #[arg(long)]
    pub size_only: bool,
}

/// What sync knows about one item on one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub size: u64,
    pub mtime: SystemTime,
    pub etag: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    SizeAndTime,
    SizeOnly,
    Checksum,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Missing,
    Size,
    Newer,
    Checksum,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Missing => "missing at the destination",
            Reason::Size => "sizes differ",
            Reason::Newer => "source is newer",
            Reason::Checksum => "checksums differ",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    Copy(Reason),
    /// Sizes are equal; contents must be compared by checksum.
    Compare,
    Skip,
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The sync rule (module note); pure, so it is tested on its own.
pub fn decide(src: &Meta, dst: Option<&Meta>, mode: Mode) -> Decision {
    let Some(dst) = dst else { return Decision::Copy(Reason::Missing) };
    if src.size != dst.size {
        return Decision::Copy(Reason::Size);
    }
    match mode {
        Mode::SizeOnly => Decision::Skip,
        Mode::Checksum => Decision::Compare,
        Mode::SizeAndTime if secs(src.mtime) > secs(dst.mtime) => Decision::Copy(Reason::Newer),
        Mode::SizeAndTime => Decision::Skip,
    }
}

/// One side of a sync.
#[derive(Clone, Debug)]
pub enum Side {
    Local(PathBuf),
    Remote { provider: Provider, bucket: String, prefix: String },
}

impl Side {
    pub fn name(&self, rel: &str) -> String {
        match self {
            Side::Local(root) => root.join(rel).display().to_string(),
            Side::Remote { provider, bucket, prefix } => format!("{provider}://{bucket}/{prefix}{rel}"),
        }
    }

    pub fn provider(&self) -> Option<Provider> {
        match self {
            Side::Remote { provider, .. } => Some(*provider),
            Side::Local(_) => None,
        }
    }

    pub fn object(&self, rel: &str) -> Option<ObjectRef> {
        match self {
            Side::Remote { provider, bucket, prefix } => {
                Some(ObjectRef::on(*provider, bucket, format!("{prefix}{rel}")))
            }
            Side::Local(_) => None,
        }
    }

    /// Every item, as `(relative name, meta)`, streamed.
    pub fn list(&self, client: &Engine) -> BoxStream<'static, Result<(String, Meta)>> {
        match self {
            Side::Local(root) => {
                if !root.exists() {
                    return futures_util::stream::empty().boxed();
                }
                futures_util::stream::iter(
                    walk(root, |_| true).map(|f| f.map(|f| (f.rel, Meta { size: f.size, mtime: f.mtime, etag: None }))),
                )
                .boxed()
            }
            Side::Remote { bucket, prefix, .. } => {
                // A prefix is itself, `*` and `?` included: sync expands no wildcards.
                let pattern = Pattern::under(prefix);
                let p2 = pattern.clone();
                list_matching(client, bucket, pattern, false)
                    .map_ok(move |o| {
                        (
                            p2.relative(&o.key).to_owned(),
                            Meta { size: o.size, mtime: o.last_modified, etag: Some(o.etag) },
                        )
                    })
                    .boxed()
            }
        }
    }
}

pub fn side(loc: Location) -> Result<Side> {
    match loc {
        Location::Local(p) => Ok(Side::Local(p)),
        Location::Object(u) => Ok(Side::Remote { prefix: as_dir(&u.key), provider: u.provider, bucket: u.bucket }),
        Location::Stdio => Err(usage("sync works on directories and prefixes, not '-'")),
    }
}

/// The stored full-object CRC, strongest first.
fn stored_crc(info: &ObjectInfo) -> Option<(ChecksumAlgorithm, String)> {
    [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32]
        .into_iter()
        .find_map(|a| info.checksums.iter().find(|(b, v)| *b == a && !v.contains('-')).cloned())
}

/// The CRC of a local file, computed off the async threads.
async fn file_crc(path: &Path, algo: ChecksumAlgorithm) -> Result<String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<String> {
        let f = std::fs::File::open(&path).with_context(|| path.display().to_string())?;
        Ok(Checksummer::of_reader(algo, f)?)
    })
    .await?
}

/// The CRC `algo` of an object's bytes, read whole and pinned to the version `info` saw.
async fn object_crc(client: &Engine, obj: &ObjectRef, info: &ObjectInfo, algo: ChecksumAlgorithm) -> Result<String> {
    let params = GetParams { if_match: info.etag.clone(), ..GetParams::default() };
    let mut body = client.get(obj, params).await.with_context(|| obj.to_string())?.body;
    let mut h = Checksummer::new(algo);
    while let Some(chunk) = body.chunk().await {
        h.update(&chunk.with_context(|| obj.to_string())?);
    }
    Ok(h.finish_base64())
}

/// `--checksum` with equal sizes: do the contents differ? `None`: nothing to compare.
pub async fn contents_differ(clients: (&Engine, &Engine), src: &Side, dst: &Side, rel: &str) -> Result<Option<bool>> {
    let head = |s: &Side, client: &Engine| {
        let obj = s.object(rel);
        let client = client.clone();
        async move {
            match obj {
                Some(o) => Ok::<_, anyhow::Error>(Some(client.head(&o).await.with_context(|| o.to_string())?)),
                None => Ok(None),
            }
        }
    };
    let (a, b) = (head(src, clients.0).await?, head(dst, clients.1).await?);
    match (src, dst, a, b) {
        (Side::Local(root), _, None, Some(info)) | (_, Side::Local(root), Some(info), None) => {
            match stored_crc(&info) {
                Some((algo, want)) => Ok(Some(file_crc(&root.join(rel), algo).await? != want)),
                None => Ok(None),
            }
        }
        (_, _, Some(x), Some(y)) => {
            // Two providers may store different kinds (module note): the same kind is
            // compared as stored; else the destination's kind is computed over the
            // source's bytes; a destination storing none (Azure) has its own bytes read
            // and hashed with the source's kind.
            let (src_obj, dst_obj) = (src.object(rel).expect("remote"), dst.object(rel).expect("remote"));
            match (stored_crc(&x), stored_crc(&y)) {
                (Some(cx), Some(cy)) if cx.0 == cy.0 => Ok(Some(cx.1 != cy.1)),
                (_, Some((algo, want))) => Ok(Some(object_crc(clients.0, &src_obj, &x, algo).await? != want)),
                (Some((algo, want)), None) => Ok(Some(object_crc(clients.1, &dst_obj, &y, algo).await? != want)),
                (None, None) => Ok(None),
            }
        }
        _ => Ok(None),
    }
}

pub async fn run(args: SyncArgs, g: &Global) -> Result<()> {
    let src = side(parse_location(&args.source)?)?;
    let dst = side(parse_location(&args.dest)?)?;
    if matches!((&src, &dst), (Side::Local(_), Side::Local(_))) {
        return Err(usage("both sides are local: use rsync(1)"));
    }
    if let Side::Local(root) = &src {
        if !root.is_dir() {
            return Err(usage(format!("{} is not a directory", root.display())));
        }
    }
    let mode = if args.checksum {
        Mode::Checksum
    } else if args.size_only {
        Mode::SizeOnly
    } else {
        Mode::SizeAndTime
    };
    // Objects on both sides at two providers: each side lists (and the destination
    // writes and deletes) with its own client; copies stream through (cp.rs).
    let (client, source) = match (src.provider(), dst.provider()) {
        (Some(a), Some(b)) if a != b => (g.client(b)?, g.client(a)?),
        (a, b) => {
            let c = g.client(crate::cp::one_provider([&a, &b])?)?;
            (c.clone(), c)
        }
    };
    let out = Output::new(g);
    let mut runner = Runner::new(client.clone(), g, out.clone());
    runner.source = source.clone();

    let planned = plan(in_order(src.list(&source), "source"), in_order(dst.list(&client), "destination"), mode);
    let dry = args.dry_run;
    let (gone_tx, gone_rx) = tokio::sync::mpsc::channel::<String>(2 * client.capabilities().max_batch_delete);
    let deleter = {
        let (client, dst, out) = (client.clone(), dst.clone(), out.clone());
        tokio::spawn(async move { delete_as_they_come(&client, &dst, gone_rx, dry, &out).await })
    };
    let actions = planned
        .map_ok(|p| {
            let (client, source, src, dst) = (client.clone(), source.clone(), src.clone(), dst.clone());
            async move {
                let (rel, meta, d) = match p {
                    Planned::Extra { rel } => return Ok::<_, anyhow::Error>(Action::Remove(rel)),
                    Planned::Decide { rel, src: meta, dst: theirs, decision } => {
                        let d = match decision {
                            Decision::Compare => match contents_differ((&source, &client), &src, &dst, &rel).await? {
                                Some(true) => Decision::Copy(Reason::Checksum),
                                Some(false) => Decision::Skip,
                                None => decide(&meta, theirs.as_ref(), Mode::SizeAndTime),
                            },
                            d => d,
                        };
                        (rel, meta, d)
                    }
                };
                Ok(match d {
                    Decision::Copy(reason) => Action::Copy(make_job(&src, &dst, &rel, &meta), reason),
                    _ => Action::Nothing,
                })
            }
        })
        .try_buffer_unordered(g.concurrency());
    let (out2, delete) = (out.clone(), args.delete);
    let jobs = actions
        .try_filter_map(|a| {
            let tx = gone_tx.clone();
            let out2 = out2.clone();
            async move {
                Ok(match a {
                    Action::Copy(job, reason) if dry => {
                        out2.emit(
                            || format!("(dry run) cp {} {}  ({})", job.source(), job.dest(), reason.as_str()),
                            || serde_json::json!({"op": "cp", "source": job.source(), "dest": job.dest(), "reason": reason.as_str(), "dry_run": true}),
                        );
                        None
                    }
                    Action::Copy(job, _) => Some(job),
                    Action::Remove(rel) if delete => {
                        // The deleter ended only if it panicked; its join says so below.
                        let _ = tx.send(rel).await;
                        None
                    }
                    Action::Remove(_) | Action::Nothing => None,
                })
            }
        })
        .boxed();
    let copied = runner.run_all(jobs).await;
    drop(gone_tx);
    deleter.await.context("the delete task failed")?;
    copied?;
    out.finish()
}

/// What the merge join says about one relative name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Planned {
    /// The source has it (the destination maybe): the rule's decision.
    Decide { rel: String, src: Meta, dst: Option<Meta>, decision: Decision },
    /// Only the destination has it: removed with --delete.
    Extra { rel: String },
}

enum Action {
    Copy(Job, Reason),
    Remove(String),
    Nothing,
}

pub type Listing = BoxStream<'static, Result<(String, Meta)>>;

/// Fails a listing that is not strictly increasing: the join would otherwise take an
/// item for missing (and --delete remove it).
pub fn in_order(list: Listing, side: &'static str) -> Listing {
    list.scan(None::<String>, move |last, item| {
        let item = item.and_then(|(rel, meta)| match last.as_deref() {
            Some(l) if l >= rel.as_str() => Err(anyhow::anyhow!(
                "the {side} listing is not in key order ({l:?} came before {rel:?}): sync stopped there"
            )),
            _ => {
                *last = Some(rel.clone());
                Ok((rel, meta))
            }
        });
        futures_util::future::ready(Some(item))
    })
    .boxed()
}

/// The merge join of two listings in key order (module note): each name once, with its
/// decision by the pure rule (`Compare` still to be resolved).
pub fn plan(src: Listing, dst: Listing, mode: Mode) -> BoxStream<'static, Result<Planned>> {
    use std::cmp::Ordering;
    enum Take {
        Src,
        Dst,
        Both,
    }
    let state = (src.peekable(), dst.peekable());
    futures_util::stream::unfold(state, move |(mut a, mut b)| async move {
        let take = {
            let x = std::pin::Pin::new(&mut a).peek().await;
            let y = std::pin::Pin::new(&mut b).peek().await;
            match (x, y) {
                (None, None) => return None,
                (Some(Err(_)), _) | (Some(_), None) => Take::Src,
                (_, Some(Err(_))) | (None, Some(_)) => Take::Dst,
                (Some(Ok((ka, _))), Some(Ok((kb, _)))) => match ka.as_bytes().cmp(kb.as_bytes()) {
                    Ordering::Less => Take::Src,
                    Ordering::Greater => Take::Dst,
                    Ordering::Equal => Take::Both,
                },
            }
        };
        let item = match take {
            Take::Src => match a.next().await {
                Some(Ok((rel, m))) => Ok(Planned::Decide { decision: decide(&m, None, mode), rel, src: m, dst: None }),
                Some(Err(e)) => Err(e),
                None => unreachable!("peeked"),
            },
            Take::Dst => match b.next().await {
                Some(Ok((rel, _))) => Ok(Planned::Extra { rel }),
                Some(Err(e)) => Err(e),
                None => unreachable!("peeked"),
            },
            Take::Both => match (a.next().await, b.next().await) {
                (Some(Ok((rel, m))), Some(Ok((_, theirs)))) => {
                    Ok(Planned::Decide { decision: decide(&m, Some(&theirs), mode), rel, src: m, dst: Some(theirs) })
                }
                _ => unreachable!("both peeked Ok"),
            },
        };
        Some((item, (a, b)))
    })
    .boxed()
}

/// Removes what the join found only at the destination, as the names arrive: each at
/// once locally (or when printing a dry run), on S3 in DeleteObjects batches of 1,000.
async fn delete_as_they_come(
    client: &Engine,
    dst: &Side,
    mut rx: tokio::sync::mpsc::Receiver<String>,
    dry: bool,
    out: &Output,
) {
    let batch = client.capabilities().max_batch_delete;
    let mut names = Vec::with_capacity(batch);
    loop {
        let room = batch - names.len();
        let n = rx.recv_many(&mut names, room).await;
        let full = names.len() >= batch || dry || matches!(dst, Side::Local(_));
        if (n == 0 || full) && !names.is_empty() {
            delete(client, dst, &names, dry, out).await;
            names.clear();
        }
        if n == 0 {
            return;
        }
    }
}

pub fn make_job(src: &Side, dst: &Side, rel: &str, meta: &Meta) -> Job {
    match (src, dst) {
        (Side::Local(root), Side::Remote { .. }) => {
            Job::Upload { path: root.join(rel), obj: dst.object(rel).expect("s3 side"), size: meta.size }
        }
        (Side::Remote { .. }, Side::Local(root)) => {
            let obj = src.object(rel).expect("s3 side");
            match crate::cp::local_below(root, rel, &obj) {
                Ok(path) => {
                    Job::Download { obj, path, size: Some(meta.size), etag: meta.etag.clone(), mtime: Some(meta.mtime) }
                }
                Err(refused) => *refused,
            }
        }
        _ => Job::Copy {
            src: src.object(rel).expect("s3 side"),
            dst: dst.object(rel).expect("s3 side"),
            size: Some(meta.size),
        },
    }
}

async fn delete(client: &Engine, dst: &Side, rels: &[String], dry: bool, out: &Output) {
    let say = |name: String| {
        let text = || format!("{}rm {name}", if dry { "(dry run) " } else { "" });
        let value = || serde_json::json!({"op": "rm", "object": name, "dry_run": dry});
        if dry {
            out.emit(text, value);
        } else {
            out.emit_done(text, value);
        }
    };
    if dry {
        rels.iter().for_each(|r| say(dst.name(r)));
        return;
    }
    match dst {
        Side::Local(root) => {
            for r in rels {
                match std::fs::remove_file(root.join(r)) {
                    Ok(()) => {
                        out.ok();
                        say(dst.name(r));
                    }
                    Err(e) => out.fail("rm", &dst.name(r), &e),
                }
            }
        }
        Side::Remote { provider, bucket, prefix } => {
            for chunk in rels.chunks(client.capabilities().max_batch_delete) {
                let keys: Vec<String> = chunk.iter().map(|r| format!("{prefix}{r}")).collect();
                match client.delete_batch(bucket, &keys).await {
                    Ok(r) => {
                        for k in r.deleted {
                            out.ok();
                            say(format!("{provider}://{bucket}/{k}"));
                        }
                        for e in r.errors {
                            out.fail(
                                "rm",
                                &format!("{provider}://{bucket}/{}", e.key),
                                &format!("{} {}", e.code, e.message),
                            );
                        }
                    }
                    Err(e) => keys.iter().for_each(|k| out.fail("rm", &format!("{provider}://{bucket}/{k}"), &e)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn m(size: u64, t: u64) -> Meta {
        Meta { size, mtime: UNIX_EPOCH + Duration::from_millis(t), etag: None }
    }

    #[test]
    fn missing_and_size_always_copy() {
        for mode in [Mode::SizeAndTime, Mode::SizeOnly, Mode::Checksum] {
            assert_eq!(decide(&m(1, 0), None, mode), Decision::Copy(Reason::Missing));
            assert_eq!(decide(&m(1, 0), Some(&m(2, 9_000_000)), mode), Decision::Copy(Reason::Size));
        }
    }

    #[test]
    fn newer_source_copies_by_default() {
        assert_eq!(decide(&m(5, 10_000), Some(&m(5, 5_000)), Mode::SizeAndTime), Decision::Copy(Reason::Newer));
        assert_eq!(decide(&m(5, 5_000), Some(&m(5, 10_000)), Mode::SizeAndTime), Decision::Skip);
        assert_eq!(decide(&m(5, 5_000), Some(&m(5, 5_000)), Mode::SizeAndTime), Decision::Skip);
        // Sub-second differences are below what HTTP dates carry.
        assert_eq!(decide(&m(5, 5_900), Some(&m(5, 5_000)), Mode::SizeAndTime), Decision::Skip);
        assert_eq!(decide(&m(5, 10_000), Some(&m(5, 5_000)), Mode::SizeOnly), Decision::Skip);
    }

    #[test]
    fn checksum_mode_compares_equal_sizes() {
        assert_eq!(decide(&m(5, 10_000), Some(&m(5, 5_000)), Mode::Checksum), Decision::Compare);
        assert_eq!(decide(&m(5, 0), Some(&m(5, 5_000)), Mode::Checksum), Decision::Compare);
    }

    /// The first version's rule: the destination indexed in a HashMap, the source looked
    /// up in it, what is left removed.
    fn old_rule(
        src: Vec<(String, Meta)>,
        dst: Vec<(String, Meta)>,
        mode: Mode,
    ) -> (Vec<(String, Decision)>, Vec<String>) {
        let mut index: std::collections::HashMap<String, Meta> = dst.into_iter().collect();
        let mut decided: Vec<(String, Decision)> = src
            .into_iter()
            .map(|(rel, m)| {
                let d = decide(&m, index.remove(&rel).as_ref(), mode);
                (rel, d)
            })
            .collect();
        decided.sort();
        let mut gone: Vec<String> = index.into_keys().collect();
        gone.sort();
        (decided, gone)
    }

    async fn merged(src: &Side, dst: &Side, client: &Engine, mode: Mode) -> (Vec<(String, Decision)>, Vec<String>) {
        let planned: Vec<Planned> =
            plan(in_order(src.list(client), "source"), in_order(dst.list(client), "destination"), mode)
                .try_collect()
                .await
                .unwrap();
        let (mut decided, mut gone) = (Vec::new(), Vec::new());
        for p in planned {
            match p {
                Planned::Decide { rel, decision, .. } => decided.push((rel, decision)),
                Planned::Extra { rel } => gone.push(rel),
            }
        }
        // Already in key order: the join's output is sorted, and nothing is repeated.
        assert!(decided.windows(2).all(|w| w[0].0 < w[1].0) && gone.windows(2).all(|w| w[0] < w[1]));
        (decided, gone)
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Random relative names around '/' in byte order, and non-ASCII; no name is both a
    /// file and a directory (a local tree cannot hold that).
    fn random_names(rng: &mut Rng, n: usize) -> Vec<String> {
        const SEGS: [&str; 10] = ["a", "a.b", "a-", "a0", "b b", "é", "z", "_", "aa", "Z"];
        let mut out: Vec<String> = Vec::new();
        for _ in 0..n {
            let depth = 1 + rng.next(3);
            let name = (0..depth).map(|_| SEGS[rng.next(SEGS.len())]).collect::<Vec<_>>().join("/");
            if !out
                .iter()
                .any(|m| *m == name || name.starts_with(&format!("{m}/")) || m.starts_with(&format!("{name}/")))
            {
                out.push(name);
            }
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn merge_join_decides_as_the_in_memory_rule_did() {
        let srv = ferry_server::BackgroundServer::start(ferry_server::config::ServeConfig::new(
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
        let mut options = ferry_store::StoreOptions::new(srv.url());
        options.credentials =
            ferry_store::CredentialsSource::Explicit(ferry_store::Credentials::new("ferry", "ferry-secret"));
        let client = Engine::new(ferry_store::connect(ferry_store::Provider::S3, options).unwrap());
        client.create_bucket("sync").await.unwrap();
        for seed in 1..=4u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let dir = tempfile::tempdir().unwrap();
            let (up, mirror) = (dir.path().join("up"), dir.path().join("mirror"));
            let write = |root: &Path, rel: &str, len: usize, age_s: u64| {
                let f = root.join(rel);
                std::fs::create_dir_all(f.parent().unwrap()).unwrap();
                std::fs::write(&f, vec![b'x'; len]).unwrap();
                let t = SystemTime::now() - Duration::from_secs(age_s);
                std::fs::File::options().write(true).open(&f).unwrap().set_modified(t).unwrap();
            };
            // A local tree, part of it on S3 (some changed, some extra), and a local
            // mirror that overlaps the S3 prefix.
            let names = random_names(&mut rng, 40);
            std::fs::create_dir_all(&up).unwrap();
            std::fs::create_dir_all(&mirror).unwrap();
            for rel in &names {
                match rng.next(4) {
                    0 => write(&up, rel, rng.next(3), 0),
                    1 => write(&mirror, rel, rng.next(3), [0, 3600][rng.next(2)]),
                    _ => {
                        write(&up, rel, rng.next(3), [0, 3600, 7200][rng.next(3)]);
                        write(&mirror, rel, rng.next(3), [0, 3600, 7200][rng.next(3)]);
                    }
                }
            }
            let s3 = Side::Remote { provider: Provider::S3, bucket: "sync".into(), prefix: format!("t{seed}/") };
            let s3b = Side::Remote { provider: Provider::S3, bucket: "sync".into(), prefix: format!("u{seed}/") };
            for (rel, m) in Side::Local(mirror.clone()).list(&client).try_collect::<Vec<_>>().await.unwrap() {
                client
                    .put(
                        &s3.object(&rel).unwrap(),
                        ferry_store::PutPayload::Bytes(bytes::Bytes::from(vec![b'y'; m.size as usize])),
                        Default::default(),
                    )
                    .await
                    .unwrap();
            }
            for (rel, m) in Side::Local(up.clone()).list(&client).try_collect::<Vec<_>>().await.unwrap() {
                if rng.next(2) == 0 {
                    client
                        .put(
                            &s3b.object(&rel).unwrap(),
                            ferry_store::PutPayload::Bytes(bytes::Bytes::from(vec![b'z'; m.size as usize])),
                            Default::default(),
                        )
                        .await
                        .unwrap();
                }
            }
            let pairs = [
                (Side::Local(up.clone()), s3.clone()),
                (s3.clone(), Side::Local(mirror.clone())),
                (s3.clone(), Side::Local(up.clone())),
                (s3.clone(), s3b.clone()),
                (s3b.clone(), s3.clone()),
            ];
            let mut copies = 0;
            for (src, dst) in &pairs {
                for mode in [Mode::SizeAndTime, Mode::SizeOnly, Mode::Checksum] {
                    let a: Vec<(String, Meta)> = src.list(&client).try_collect().await.unwrap();
                    let b: Vec<(String, Meta)> = dst.list(&client).try_collect().await.unwrap();
                    let old = old_rule(a, b, mode);
                    let new = merged(src, dst, &client, mode).await;
                    assert_eq!(new, old, "seed {seed}, {src:?} -> {dst:?}, {mode:?}");
                    copies += new.0.iter().filter(|(_, d)| matches!(d, Decision::Copy(_))).count();
                }
            }
            assert!(copies > 0, "seed {seed}: the trees differ, so something is copied");
        }
    }

    #[tokio::test]
    async fn an_unsorted_listing_stops_the_join() {
        let item = |k: &str| Ok((k.to_owned(), m(1, 0)));
        let src: Listing = futures_util::stream::iter(vec![item("a"), item("c"), item("b")]).boxed();
        let dst: Listing = futures_util::stream::iter(vec![item("b")]).boxed();
        let got: Vec<Result<Planned>> =
            plan(in_order(src, "source"), in_order(dst, "destination"), Mode::SizeOnly).collect().await;
        // The join cannot know "b" is coming until it comes: it is taken for an extra
        // first, and the error stops everything after it.
        assert!(matches!(&got[0], Ok(Planned::Decide { rel, .. }) if rel == "a"));
        assert!(matches!(&got[1], Ok(Planned::Extra { rel }) if rel == "b"));
        assert!(matches!(&got[2], Ok(Planned::Decide { rel, .. }) if rel == "c"));
        let err = got[3].as_ref().expect_err("the out-of-order name is an error");
        assert!(err.to_string().contains("not in key order"), "{err}");
        assert_eq!(got.len(), 4);
    }
}
