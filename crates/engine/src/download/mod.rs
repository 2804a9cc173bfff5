//! Download one object into a file: ranged parallel GETs, atomic, verified, resumable.
//!
//! ```text
//! HEAD ─► size, ETag, stored checksum
//!   ├─ size <= part_size ─► one GET (ferry-store verifies CRC or MD5-ETag on the fly)
//!   └─ else: .NAME.ferry-part preallocated to size (fallocate), then parts of
//!        part_size, up to `concurrency` GETs in flight, each
//!        Range: bytes=a-b, If-Match: <ETag>  ─► written at offset a of  .NAME.ferry-part
//!        part CRC computed as the bytes pass ─► recorded in .NAME.ferry-state
//! all parts ─► whole CRC = crc_combine(part CRCs) == stored FULL_OBJECT CRC?
//!           (no CRC stored: every range was If-Match on the one ETag, lengths exact)
//!   ─► mtime on the open temp file ─► [durable: fsync temp] ─► rename(temp, NAME)
//!   ─► [durable: fsync dir] ─► remove state (if there may be one)
//! ```
//!
//! - Atomic: the final name only ever appears complete and verified (rename(2) is atomic
//!   within a directory, and the temp file lives beside the target for that reason). A
//!   killed process leaves at most the temp file and its state, never a truncated NAME:
//!   the bytes already written are in the page cache, which outlives the process.
//! - Durable ([`DownloadParams::durable`], `ferry cp --fsync`; off by default): what a
//!   kill cannot do, a power loss or kernel crash can. Without an fsync before the rename
//!   the journal may commit the rename before the data (ext4's delayed allocation), and
//!   NAME comes back short or empty after the reboot. Durable mode closes that at the
//!   price of the disk's write speed, which here is well below the page cache's; s5cmd,
//!   rclone, the AWS CLI and cp(1) never sync, so the default is theirs (atomic against a
//!   kill, verified, not synced), and the state file's read-back catches a temp file a
//!   crash damaged.
//! - Resumable: finished parts are recorded with their CRCs, and a re-run keeps those
//!   whose bytes still match (state.rs).
//! - Finishing: a `ferry cp` of many small objects spends most of its system calls per
//!   file, so the end of a download does only what it needs. The mtime
//!   ([`DownloadParams::mtime`]) is set with `futimens` on the temp file still open from
//!   the writes, before the fsync (so durable mode makes it durable too) and the rename
//!   (which keeps it). The state file is removed only when there may be one: always
//!   after a ranged download, and after a single GET only if the temp file was there
//!   before (state.rs has the invariant). A single GET gathers its chunks and creates the
//!   file with the first batch, so a small object takes two trips to the blocking pool
//!   (bytes; mtime + rename).
//!
//! The rooms:
//! - `plan.rs`: one GET or parts; part lengths; which parts are left.
//! - `state.rs`: the temp and state files beside the target; resume.
//! - `writer.rs`: preallocation, batched `pwritev`, one writing part per
//!   file, the writer thread of a current-thread runtime.
//! - `fetch.rs`: one GET, one part (a task each, through admission), and the
//!   CRC checks.
//! - `memory.rs`: the same plan and checks into one buffer instead of a file.
//! - here: the parameters and outputs, the entry points, the ranged driver, finishing.
//!
//! The measurements behind these choices (page cache against synced writes, the write
//! path's hand-offs, preallocation, the per-file cost of small downloads) and the
//! commands that repeat them are in docs/lab/engine-download.md.

mod fetch;
mod memory;
mod plan;
mod state;
mod writer;

pub use memory::{
    get_into_memory, get_to_memory, get_to_memory_with, Allocator, Destination, FreshVec, MemoryParams, MemoryProgress,
    SPLIT_BELOW,
};
pub use state::{discard_partial, temp_paths};
pub use writer::{part_bytes_in_memory, WRITE_BATCH};

use crate::admission::Engine;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_store::{Error, ObjectInfo, ObjectRef};
use fetch::{Aborting, PartCtx};
use futures_util::stream::TryStreamExt;
use state::{remove_partial, write_state, State, STATE_EVERY};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use writer::FileWrites;

/// Called with each batch of bytes as it lands (for progress displays).
pub type ProgressFn = Arc<dyn Fn(u64) + Send + Sync>;

/// Download parameters.
#[derive(Clone, Debug)]
pub struct DownloadParams {
    /// Bytes per ranged GET.
    pub part_size: u64,
    /// Ranged GETs in flight for this file (the engine may bound the parts of all its
    /// downloads together too: `Engine::with_download_parts`).
    pub concurrency: usize,
    /// Keep the temp file and state on failure, and use them on the next run.
    pub resume: bool,
    /// fsync the temp file (and its directory after the rename), so the final name holds
    /// the whole object even after a power loss or kernel crash (module note).
    pub durable: bool,
    /// The modification time the file gets (module note, "Finishing").
    pub mtime: Mtime,
}

/// The modification time a downloaded file gets. It is set on the temp file's open
/// handle after the last write and before the fsync and the rename (a rename keeps the
/// mtime), so the final name never shows another, and no second open is needed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mtime {
    /// As the writes left it (the time of the download).
    #[default]
    Written,
    /// The object's Last-Modified, when the server sent one.
    LastModified,
    /// This time (a listing's Last-Modified: milliseconds, where HEAD has whole seconds).
    At(std::time::SystemTime),
}

impl Default for DownloadParams {
    /// 8 MiB parts (plan.rs), 8 in flight (the same share as uploads).
    fn default() -> Self {
        DownloadParams {
            part_size: plan::DEFAULT_PART_SIZE,
            concurrency: 8,
            resume: true,
            durable: false,
            mtime: Mtime::Written,
        }
    }
}

/// How the bytes on disk were checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verified {
    /// Against the stored full-object checksum.
    Checksum(ChecksumAlgorithm),
    /// Single GET whose ETag is a plain MD5.
    Md5Etag,
    /// Exact length, all ranges under one ETag (no full-object checksum stored).
    LengthAndEtag,
}

/// What a download did.
#[derive(Clone, Debug)]
pub struct DownloadOutput {
    pub info: ObjectInfo,
    pub verified: Verified,
    /// Bytes kept from an earlier, interrupted run.
    pub resumed_bytes: u64,
    /// Bytes fetched by this run.
    pub fetched_bytes: u64,
}

/// Downloads `object` to `dest` (module note). `dest`'s directory must exist.
pub async fn download_file(
    engine: &Engine,
    object: &ObjectRef,
    dest: &Path,
    params: &DownloadParams,
    progress: Option<ProgressFn>,
) -> Result<DownloadOutput, Error> {
    let info = engine.head(object).await?;
    download_with_info(engine, object, info, dest, params, progress).await
}

/// [`download_file`] when the object's HEAD is already known (saves a request).
pub async fn download_with_info(
    engine: &Engine,
    object: &ObjectRef,
    info: ObjectInfo,
    dest: &Path,
    params: &DownloadParams,
    progress: Option<ProgressFn>,
) -> Result<DownloadOutput, Error> {
    let (tmp, state_path) = temp_paths(dest);
    let part_size = params.part_size.max(1);
    let one_get = plan::one_get(info.size, info.etag.as_deref(), part_size);
    let result = if one_get {
        fetch::single(engine, object, &info, &tmp, progress).await
    } else {
        ranged(engine, object, &info, &tmp, &state_path, part_size, params, progress).await
    };
    match result {
        Ok(done) => {
            let mtime = match params.mtime {
                Mtime::Written => None,
                Mtime::LastModified => info.last_modified,
                Mtime::At(t) => Some(t),
            };
            let (verified, resumed_bytes, fetched_bytes) = (done.verified.clone(), done.resumed, done.fetched);
            let dest = dest.to_path_buf();
            let durable = params.durable;
            blocking(&dest.clone(), move || finish(done, mtime, durable, &tmp, &dest, &state_path)).await?;
            Ok(DownloadOutput { info, verified, resumed_bytes, fetched_bytes })
        }
        Err(e) => {
            // A ranged download keeps its temp file and state for a re-run to resume
            // from; one GET's temp file has no state, a re-run replaces it, so it is only
            // space taken (a full disk's, if that is why it failed).
            let changed = matches!(e, Error::Precondition { .. });
            if !params.resume || changed || one_get {
                remove_partial(&tmp, &state_path);
            }
            Err(e)
        }
    }
}

/// A download in parts (module note): keeps what an earlier run left if it still holds
/// (state.rs), preallocates a fresh temp file (writer.rs), fetches the other parts as
/// tasks, `concurrency` at a time (fetch.rs), saves the state as they finish, and checks
/// the whole object's CRC.
#[allow(clippy::too_many_arguments)]
async fn ranged(
    engine: &Engine,
    object: &ObjectRef,
    info: &ObjectInfo,
    tmp: &Path,
    state_path: &Path,
    part_size: u64,
    params: &DownloadParams,
    progress: Option<ProgressFn>,
) -> Result<Fetched, Error> {
    let etag = info.etag.clone().unwrap_or_default();
    let crc = fetch::full_crc(info);
    let algo = crc.as_ref().map(|(a, _)| *a).unwrap_or(ChecksumAlgorithm::Crc64Nvme);
    let parts = plan::part_count(info.size, part_size);
    // Keep an earlier run's parts only if everything about them still holds, including
    // the bytes in the temp file (state.rs).
    let mut state =
        State { algo: algo.as_str().to_owned(), etag: etag.clone(), size: info.size, part_size, done: BTreeMap::new() };
    if params.resume {
        state.done = state::kept_parts(&state, algo, tmp, state_path).await?;
    }
    if state.done.is_empty() {
        let f = std::fs::File::create(tmp).map_err(|e| io(tmp, e))?;
        if let Err(e) = writer::preallocate(&f, info.size) {
            // No space for it (or another failure): nothing of this run is worth keeping,
            // and a half-allocated temp file would only hold the space.
            drop(f);
            remove_partial(tmp, state_path);
            return Err(io(tmp, e));
        }
    }
    let resumed: u64 = state.done.keys().map(|i| plan::part_len(*i, part_size, info.size)).sum();
    if let Some(p) = &progress {
        if resumed > 0 {
            p(resumed);
        }
    }
    if params.resume {
        write_state(state_path, &state)?;
    }
    let file = Arc::new(std::fs::OpenOptions::new().write(true).open(tmp).map_err(|e| io(tmp, e))?);
    let todo = plan::to_fetch(parts, &state.done);
    let state = Arc::new(Mutex::new(state));
    let last_state = Mutex::new(std::time::Instant::now());
    let (writes, writer_gone) = FileWrites::new(file.clone()).map_err(|e| io(tmp, e))?;
    let ctx = Arc::new(PartCtx {
        engine: engine.clone(),
        object: object.clone(),
        tmp: tmp.to_path_buf(),
        writes,
        state: state.clone(),
        progress: progress.clone(),
        etag: etag.clone(),
        algo,
        part_size,
        size: info.size,
        durable: params.durable,
    });
    let fetched = futures_util::stream::iter(todo.into_iter().map(Ok::<u64, Error>))
        .map_ok(|i| {
            let ctx = ctx.clone();
            // Each part is a task of its own (fetch.rs); dropped with the download.
            Aborting(tokio::spawn(fetch::fetch_part(ctx, i))).join(tmp)
        })
        .try_buffer_unordered(params.concurrency.max(1))
        .map_ok(|()| {
            // The state is rewritten at most every STATE_EVERY while parts finish, and
            // once more if the download fails (state.rs).
            let mut last = last_state.lock().unwrap_or_else(|p| p.into_inner());
            if params.resume && last.elapsed() >= STATE_EVERY {
                *last = std::time::Instant::now();
                let st = state.lock().unwrap_or_else(|p| p.into_inner());
                write_state(state_path, &st)
            } else {
                Ok(())
            }
        })
        .try_for_each(|r| async move { r })
        .await;
    // Every part has ended or been aborted: wait until no write of theirs is left, so no
    // late write lands in the temp file after this download has returned.
    drop(ctx);
    if let Some(gone) = writer_gone {
        let _ = gone.await;
    }
    if let Err(e) = fetched {
        if params.resume {
            let st = state.lock().unwrap_or_else(|p| p.into_inner());
            let _ = write_state(state_path, &st);
        }
        return Err(e);
    }
    let fetched = info.size - resumed;
    let st = state.lock().unwrap_or_else(|p| p.into_inner());
    let verified = fetch::verify_parts(object, crc, &st, parts, state_path)?;
    // This run wrote a state file if it resumes; without resume an older one may be
    // left. One unlink per large file: always.
    Ok(Fetched { verified, resumed, fetched, file, state_may_exist: true })
}

/// A download's bytes, all in the temp file and checked, before it takes its name.
struct Fetched {
    verified: Verified,
    /// Bytes kept from an earlier run.
    resumed: u64,
    /// Bytes fetched by this run.
    fetched: u64,
    /// The temp file, still open for the mtime and the fsync.
    file: Arc<std::fs::File>,
    /// A state file may exist: this run wrote one, or it found an earlier run's temp
    /// file (whose state, if any, must not outlive it).
    state_may_exist: bool,
}

/// Gives the temp file its mtime, [fsyncs it], renames it to `dest` [and fsyncs the
/// directory], then removes the state file if there may be one (module note,
/// "Finishing"). On the blocking pool.
fn finish(
    done: Fetched,
    mtime: Option<std::time::SystemTime>,
    durable: bool,
    tmp: &Path,
    dest: &Path,
    state: &Path,
) -> std::io::Result<()> {
    if let Some(t) = mtime {
        // Best effort, as before: a file system without mtimes still gets the file.
        let _ = done.file.set_modified(t);
    }
    if durable {
        done.file.sync_all()?;
    }
    std::fs::rename(tmp, dest)?;
    if durable {
        sync_dir(dest.parent().unwrap_or(Path::new(".")));
    }
    if done.state_may_exist {
        let _ = std::fs::remove_file(state);
    }
    Ok(())
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io { path: path.display().to_string(), error: e }
}

/// File system work off the async worker threads: with many small downloads in flight,
/// an fsync on a worker would stall every transfer on it, while the blocking pool lets
/// the file system commit many at once.
async fn blocking<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.map_err(|e| io(path, std::io::Error::other(e)))?.map_err(|e| io(path, e))
}

fn sync_dir(dir: &Path) {
    // Best effort: the rename is durable once the directory is synced.
    if let Ok(d) = std::fs::File::open(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` pseudo-random bytes (xorshift64 from `seed`), the same for the same seed.
    pub(super) fn noise(n: usize, mut seed: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    /// The mtime asked for is the file's, set before the rename, by one GET or by parts,
    /// synced or not; and a killed run's temp file and state beside the target are gone
    /// after a single-GET download (which writes no state of its own).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn finished_files_have_their_mtime_and_nothing_beside_them() {
        use ferry_store::{Credentials, CredentialsSource};
        let srv = ferry_server::BackgroundServer::start(ferry_server::config::ServeConfig::new(
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
        let c = crate::Engine::new(
            ferry_store::S3Client::builder(srv.url())
                .credentials(CredentialsSource::Explicit(Credentials::new("ferry", "ferry-secret")))
                .build()
                .unwrap(),
        );
        c.create_bucket("mtime").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        for (name, size) in [("small", 5000usize), ("ranged", 3 * 1024 * 1024 + 5)] {
            let bytes = noise(size, size as u64);
            let src = dir.path().join(format!("{name}.src"));
            std::fs::write(&src, &bytes).unwrap();
            let obj = ObjectRef::new("mtime", name);
            crate::upload_file(&c, &src, &obj, &crate::UploadParams::default(), None).await.unwrap();
            std::fs::remove_file(&src).unwrap();
            for durable in [false, true] {
                let dest = dir.path().join(name);
                let (tmp, state) = temp_paths(&dest);
                std::fs::write(&tmp, b"left by a killed run").unwrap();
                std::fs::write(&state, br#"{"algo":"CRC64NVME","etag":""0"","size":1,"part_size":1,"done":{}}"#)
                    .unwrap();
                let params =
                    DownloadParams { part_size: 1024 * 1024, durable, mtime: Mtime::At(when), ..Default::default() };
                download_file(&c, &obj, &dest, &params, None).await.unwrap();
                assert!(std::fs::read(&dest).unwrap() == bytes, "{name}: the file differs from the object");
                assert_eq!(std::fs::metadata(&dest).unwrap().modified().unwrap(), when, "{name} durable={durable}");
                let names: Vec<_> = std::fs::read_dir(dir.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .filter(|n| n.starts_with('.'))
                    .collect();
                assert!(names.is_empty(), "{name} durable={durable}: left {names:?}");
                std::fs::remove_file(&dest).unwrap();
            }
        }
        // Mtime::Written leaves the time of the writes.
        let dest = dir.path().join("now");
        download_file(&c, &ObjectRef::new("mtime", "small"), &dest, &DownloadParams::default(), None).await.unwrap();
        let age = std::time::SystemTime::now()
            .duration_since(std::fs::metadata(&dest).unwrap().modified().unwrap())
            .unwrap_or_default();
        assert!(age < std::time::Duration::from_secs(600), "{age:?}");
    }
}
