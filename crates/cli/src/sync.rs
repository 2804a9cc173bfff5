//! `ferry sync`: make a destination directory or prefix like a source, both ways
//! (local -> S3, S3 -> local, S3 -> S3).
//!
//! ```text
//! destination listing ─► index {relative name -> size, mtime}   (held in memory)
//! source listing (streamed) ─► for each item: decide(source, index.take(name), mode)
//!     Copy(reason) ─► a cp job (cp.rs Runner: same atomic, resumable transfers)
//!     Compare      ─► --checksum with equal sizes: HEAD the S3 side(s), hash the local
//!                     file with the stored algorithm (CRC64NVME, CRC32C, CRC32) ─► Copy | Skip
//!     Skip
//! --delete ─► what is left in the index had no source: removed (S3 in DeleteObjects
//!             batches of 1,000)
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
//! Memory: the destination's index is held (about 100 bytes per item), the source is
//! streamed. A merge join of two sorted listings would bound both, but local directory
//! walks are not in S3's byte order; left for later.

use crate::common::{parse_location, usage, Global, Location, Output};
use crate::cp::{as_dir, Job, Runner};
use crate::wildcard::{list_matching, walk, Pattern};
use anyhow::{Context, Result};
use clap::Args;
use ferry_proto::checksum::{ChecksumAlgorithm, Checksummer};
use ferry_store::{ObjectInfo, ObjectRef, S3Client};
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Missing,
    Size,
    Newer,
    Checksum,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Missing => "missing at the destination",
            Reason::Size => "sizes differ",
            Reason::Newer => "source is newer",
            Reason::Checksum => "checksums differ",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
enum Side {
    Local(PathBuf),
    S3 { bucket: String, prefix: String },
}

impl Side {
    fn name(&self, rel: &str) -> String {
        match self {
            Side::Local(root) => root.join(rel).display().to_string(),
            Side::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}{rel}"),
        }
    }

    fn object(&self, rel: &str) -> Option<ObjectRef> {
        match self {
            Side::S3 { bucket, prefix } => Some(ObjectRef::new(bucket.clone(), format!("{prefix}{rel}"))),
            Side::Local(_) => None,
        }
    }

    /// Every item, as `(relative name, meta)`, streamed.
    fn list(&self, client: &S3Client) -> BoxStream<'static, Result<(String, Meta)>> {
        match self {
            Side::Local(root) => {
                if !root.exists() {
                    return futures_util::stream::empty().boxed();
                }
                futures_util::stream::iter(walk(root, |_| true).map(|f| f.map(|f| (f.rel, Meta { size: f.size, mtime: f.mtime, etag: None })))).boxed()
            }
            Side::S3 { bucket, prefix } => {
                let pattern = Pattern::new(prefix, true).expect("a prefix is a valid pattern");
                let p2 = pattern.clone();
                list_matching(client, bucket, pattern, false)
                    .map_ok(move |o| (p2.relative(&o.key).to_owned(), Meta { size: o.size, mtime: o.last_modified, etag: Some(o.etag) }))
                    .boxed()
            }
        }
    }
}

fn side(loc: Location) -> Result<Side> {
    match loc {
        Location::Local(p) => Ok(Side::Local(p)),
        Location::S3 { bucket, key } => Ok(Side::S3 { bucket, prefix: as_dir(&key) }),
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
        use std::io::Read;
        let mut f = std::fs::File::open(&path).with_context(|| path.display().to_string())?;
        let mut h = Checksummer::new(algo);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(h.finish_base64())
    })
    .await?
}

/// `--checksum` with equal sizes: do the contents differ? `None`: nothing to compare.
async fn contents_differ(client: &S3Client, src: &Side, dst: &Side, rel: &str) -> Result<Option<bool>> {
    let head = |s: &Side| {
        let obj = s.object(rel);
        let client = client.clone();
        async move {
            match obj {
                Some(o) => Ok::<_, anyhow::Error>(Some(client.head_object(&o).await.with_context(|| o.to_string())?)),
                None => Ok(None),
            }
        }
    };
    let (a, b) = (head(src).await?, head(dst).await?);
    match (src, dst, a, b) {
        (Side::Local(root), _, None, Some(info)) | (_, Side::Local(root), Some(info), None) => match stored_crc(&info) {
            Some((algo, want)) => Ok(Some(file_crc(&root.join(rel), algo).await? != want)),
            None => Ok(None),
        },
        (_, _, Some(x), Some(y)) => {
            if let (Some(cx), Some(cy)) = (stored_crc(&x), stored_crc(&y)) {
                if cx.0 == cy.0 {
                    return Ok(Some(cx.1 != cy.1));
                }
            }
            Ok(None)
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
    let client = g.client()?;
    let out = Output::new(g);
    let runner = Runner::new(client.clone(), g, out.clone());

    let mut index: HashMap<String, Meta> = HashMap::new();
    let mut listing = dst.list(&client);
    while let Some(item) = listing.next().await {
        let (rel, meta) = item?;
        index.insert(rel, meta);
    }
    let index = Arc::new(Mutex::new(index));

    let decisions = src
        .list(&client)
        .map_ok(|(rel, meta)| {
            let theirs = index.lock().unwrap_or_else(|p| p.into_inner()).remove(&rel);
            let (client, src, dst) = (client.clone(), src.clone(), dst.clone());
            async move {
                let d = match decide(&meta, theirs.as_ref(), mode) {
                    Decision::Compare => match contents_differ(&client, &src, &dst, &rel).await? {
                        Some(true) => Decision::Copy(Reason::Checksum),
                        Some(false) => Decision::Skip,
                        None => decide(&meta, theirs.as_ref(), Mode::SizeAndTime),
                    },
                    d => d,
                };
                Ok::<_, anyhow::Error>((rel, meta, d))
            }
        })
        .try_buffer_unordered(g.concurrency());
    let dry = args.dry_run;
    let out2 = out.clone();
    let jobs = decisions
        .try_filter_map(|(rel, meta, d)| {
            let job = match d {
                Decision::Copy(reason) => {
                    let job = make_job(&src, &dst, &rel, &meta);
                    if dry {
                        out2.emit(
                            || format!("(dry run) cp {} {}  ({})", job.source(), job.dest(), reason.as_str()),
                            || serde_json::json!({"op": "cp", "source": job.source(), "dest": job.dest(), "reason": reason.as_str(), "dry_run": true}),
                        );
                        None
                    } else {
                        Some(job)
                    }
                }
                _ => None,
            };
            async move { Ok(job) }
        })
        .boxed();
    runner.run_all(jobs).await?;

    if args.delete {
        let mut gone: Vec<String> = index.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(k, _)| k).collect();
        gone.sort();
        delete(&client, &dst, &gone, dry, &out).await;
    }
    out.finish()
}

fn make_job(src: &Side, dst: &Side, rel: &str, meta: &Meta) -> Job {
    match (src, dst) {
        (Side::Local(root), Side::S3 { .. }) => Job::Upload { path: root.join(rel), obj: dst.object(rel).expect("s3 side"), size: meta.size },
        (Side::S3 { .. }, Side::Local(root)) => {
            let obj = src.object(rel).expect("s3 side");
            match crate::cp::local_below(root, rel, &obj) {
                Ok(path) => Job::Download { obj, path, size: Some(meta.size), etag: meta.etag.clone(), mtime: Some(meta.mtime) },
                Err(refused) => *refused,
            }
        }
        _ => Job::Copy { src: src.object(rel).expect("s3 side"), dst: dst.object(rel).expect("s3 side"), size: Some(meta.size) },
    }
}

async fn delete(client: &S3Client, dst: &Side, rels: &[String], dry: bool, out: &Output) {
    let say = |name: String| {
        out.emit(|| format!("{}rm {name}", if dry { "(dry run) " } else { "" }), || serde_json::json!({"op": "rm", "object": name, "dry_run": dry}));
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
        Side::S3 { bucket, prefix } => {
            for chunk in rels.chunks(ferry_store::object::DELETE_OBJECTS_MAX_KEYS) {
                let keys: Vec<String> = chunk.iter().map(|r| format!("{prefix}{r}")).collect();
                match client.delete_objects(bucket, &keys).await {
                    Ok(r) => {
                        for k in r.deleted {
                            out.ok();
                            say(format!("s3://{bucket}/{k}"));
                        }
                        for e in r.errors {
                            out.fail("rm", &format!("s3://{bucket}/{}", e.key), &format!("{} {}", e.code, e.message));
                        }
                    }
                    Err(e) => keys.iter().for_each(|k| out.fail("rm", &format!("s3://{bucket}/{k}"), &e)),
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
}
