//! The async operations behind the Python calls, in plain Rust over the engine: every
//! Python method (sync or `*_async`) is a thin wrapper over one of these.
//!
//! Whole-object reads into memory ([`get_object`]):
//!
//! ```text
//! GET (whole) ─► head: size <= SPLIT_AT (or no ETag) ─► body into one Vec of `size`
//!                                                       (ferry-store verifies CRC/length)
//!              └► larger: drop that body; parts of PART_SIZE, PART_CONCURRENCY at once, each
//!                 Range + If-Match: ETag, written in place into one Vec of `size`, each
//!                 part's CRC as its bytes pass ─► crc_combine == stored FULL_OBJECT CRC?
//!                 (none stored: every part exact in length under the one ETag)
//! ```
//!
//! The first GET is a plain one, so a small object costs one request and keeps the
//! store's own whole-body check; a large one pays a dropped response (a connection and
//! what was in flight on it) instead of a HEAD before every object. Parts run as tasks
//! of their own (each reads its socket on its own task: see ferry-engine's download.rs),
//! writing disjoint ranges of the one allocation; the allocation is shared by the tasks
//! (`Arc`) so an aborted call frees it only when the last task is gone.

use bytes::Bytes;
use ferry_engine::{ByteBudget, Engine};
use ferry_proto::checksum::{base64_decode, crc_combine, ChecksumAlgorithm, Checksummer};
use ferry_store::{Error, GetParams, ObjectBody, ObjectInfo, ObjectRef, RangeSpec};
use futures_util::stream::{self, StreamExt};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::task::JoinSet;

/// Bytes moved so far and the total when known (0 until then), shared with the waiting
/// Python thread, which reports them to a `callback` between its waits (runtime.rs).
#[derive(Debug, Default)]
pub struct Progress {
    pub done: AtomicU64,
    pub total: AtomicU64,
}

pub type Tracker = Option<Arc<Progress>>;

fn add(p: &Tracker, n: usize) {
    if let Some(p) = p {
        p.done.fetch_add(n as u64, Relaxed);
    }
}

fn add_total(p: &Tracker, n: u64) {
    if let Some(p) = p {
        p.total.fetch_add(n, Relaxed);
    }
}

/// Objects above this are read in parallel parts: 2 x [`PART_SIZE`], so a split always
/// gives at least two parts' worth of parallelism for the dropped first response.
pub const SPLIT_AT: u64 = 2 * PART_SIZE;
/// 8 MiB: the low end of S3's cost-optimal request size (docs/lab/store-s3-facts.md, AnyBlob), as
/// the command line's parts.
pub const PART_SIZE: u64 = 8 * 1024 * 1024;
/// Parts of one object in flight, as the command line's `--part-concurrency`.
pub const PART_CONCURRENCY: usize = 8;

/// One object into memory (module note).
pub async fn get_object(
    engine: Engine,
    object: ObjectRef,
    budget: Option<Arc<ByteBudget>>,
    progress: Tracker,
) -> Result<Bytes, Error> {
    // A place under the endpoint's limit for the first GET; the parts of a large object
    // take places of their own once it is given back.
    let room = engine.admission().room().await;
    let out = engine.get(&object, GetParams::default()).await?;
    let size = out.meta.size;
    add_total(&progress, size);
    if size <= SPLIT_AT || out.meta.etag.is_none() {
        let _held = match &budget {
            Some(b) => Some(b.acquire(size.min(b.total())).await),
            None => None,
        };
        let bytes = collect_sized(out.body, size, &progress).await;
        drop(room);
        return bytes;
    }
    drop(out.body);
    drop(room);
    get_parts(engine, object, out.meta, progress).await
}

/// A body into one allocation of its announced size.
pub async fn collect_sized(mut body: ObjectBody, size: u64, progress: &Tracker) -> Result<Bytes, Error> {
    let mut out = Vec::with_capacity(size as usize);
    while let Some(chunk) = body.chunk().await {
        let chunk = chunk?;
        out.extend_from_slice(&chunk);
        add(progress, chunk.len());
    }
    Ok(Bytes::from(out))
}

/// The stored full-object CRC (not a `-N` composite), strongest first.
fn full_crc(info: &ObjectInfo) -> Option<(ChecksumAlgorithm, Vec<u8>)> {
    [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32].into_iter().find_map(|a| {
        info.checksums.iter().find(|(b, v)| *b == a && !v.contains('-')).and_then(|(_, v)| Some((a, base64_decode(v)?)))
    })
}

/// One allocation written by several tasks, each in a range of its own.
struct Shared {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: tasks write disjoint ranges (one part each) and nothing reads the memory until
// every writer has finished (get_parts joins them all first).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn new(len: usize) -> Shared {
        let mut v = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(len));
        Shared { ptr: v.as_mut_ptr(), cap: v.capacity() }
    }

    /// # Safety
    /// `at..at + data.len()` lies inside the allocation and no other task writes there.
    unsafe fn write(&self, at: usize, data: &[u8]) {
        debug_assert!(at + data.len() <= self.cap);
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(at), data.len()) }
    }

    /// # Safety
    /// Every byte of `0..len` has been written and no writer is left.
    unsafe fn into_vec(self, len: usize) -> Vec<u8> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: the pointer and capacity came from a Vec<u8>; the caller's contract
        // makes `len` initialised bytes.
        unsafe { Vec::from_raw_parts(me.ptr, len, me.cap) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: from a Vec<u8> of this capacity; no byte needs dropping.
        drop(unsafe { Vec::from_raw_parts(self.ptr, 0, self.cap) });
    }
}

/// Parallel ranged GETs of a known object into one buffer, verified (module note).
pub async fn get_parts(engine: Engine, object: ObjectRef, meta: ObjectInfo, progress: Tracker) -> Result<Bytes, Error> {
    let size = meta.size;
    let crc = full_crc(&meta);
    let algo = crc.as_ref().map(|c| c.0);
    let buf = Arc::new(Shared::new(size as usize));
    let parts = ferry_engine::ranges::split(size, PART_SIZE);
    let gate = Arc::new(tokio::sync::Semaphore::new(PART_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for (i, range) in parts.iter().cloned().enumerate() {
        let (engine, object, etag, buf, gate, progress) =
            (engine.clone(), object.clone(), meta.etag.clone(), buf.clone(), gate.clone(), progress.clone());
        tasks.spawn(async move {
            let _part = gate.acquire_owned().await;
            let _room = engine.admission().room().await;
            fetch_part(&engine, &object, range, etag, algo, &buf, &progress).await.map(|crc| (i, crc))
        });
    }
    let mut crcs: Vec<Option<Vec<u8>>> = vec![None; parts.len()];
    while let Some(joined) = tasks.join_next().await {
        let (i, part_crc) = joined.map_err(|e| Error::Config(format!("a part task of {object} failed: {e}")))??;
        crcs[i] = part_crc;
    }
    if let (Some((algo, stored)), Some(first)) = (&crc, crcs.first()) {
        let mut whole = first.clone().unwrap_or_default();
        for (part, range) in crcs.iter().zip(&parts).skip(1) {
            let part = part.as_deref().unwrap_or_default();
            whole = crc_combine(*algo, &whole, part, range.end - range.start).ok_or_else(|| Error::Protocol {
                message: format!("cannot combine {algo} values"),
                request_id: None,
            })?;
        }
        if &whole != stored {
            return Err(Error::Integrity {
                message: format!("{object}: the parts' {algo} does not match the stored full-object checksum"),
                request_id: None,
            });
        }
    }
    let buf =
        Arc::try_unwrap(buf).map_err(|_| Error::Config(format!("{object}: a part task outlived its download")))?;
    // SAFETY: every part wrote exactly its range (fetch_part checks lengths), the parts
    // cover 0..size, and every task has been joined.
    Ok(Bytes::from(unsafe { buf.into_vec(size as usize) }))
}

/// One part: written in place, its length checked, its CRC returned when one is stored.
async fn fetch_part(
    engine: &Engine,
    object: &ObjectRef,
    range: Range<u64>,
    etag: Option<String>,
    algo: Option<ChecksumAlgorithm>,
    buf: &Shared,
    progress: &Tracker,
) -> Result<Option<Vec<u8>>, Error> {
    let params = GetParams {
        range: Some(RangeSpec::FromTo(range.start, range.end - 1)),
        if_match: etag,
        ..GetParams::default()
    };
    let mut out = engine.get(object, params).await?;
    let mut hasher = algo.map(Checksummer::new);
    let mut at = range.start as usize;
    let end = range.end as usize;
    while let Some(chunk) = out.body.chunk().await {
        let chunk = chunk?;
        if at + chunk.len() > end {
            return Err(Error::Integrity {
                message: format!("{object}: range {}..{} answered with more bytes", range.start, range.end),
                request_id: None,
            });
        }
        // SAFETY: inside this part's range (checked above), which only this task writes.
        unsafe { buf.write(at, &chunk) };
        if let Some(h) = &mut hasher {
            h.update(&chunk);
        }
        at += chunk.len();
        add(progress, chunk.len());
    }
    if at != end {
        return Err(Error::Integrity {
            message: format!(
                "{object}: range {}..{} ended after {} bytes",
                range.start,
                range.end,
                at - range.start as usize
            ),
            request_id: None,
        });
    }
    Ok(hasher.map(|h| h.finish()))
}

/// Many objects into memory, results in input order (each a result of its own).
/// `concurrency` objects at once (the endpoint's controller decides below that); with a
/// budget, a body waits for its bytes before it is read.
pub async fn get_many(
    objects: Vec<(Engine, ObjectRef)>,
    concurrency: usize,
    budget: Option<Arc<ByteBudget>>,
    progress: Tracker,
) -> Vec<Result<Bytes, Error>> {
    let n = objects.len();
    let mut out: Vec<Option<Result<Bytes, Error>>> = (0..n).map(|_| None).collect();
    let mut done = stream::iter(objects.into_iter().enumerate())
        .map(|(i, (engine, o))| {
            let (budget, progress) = (budget.clone(), progress.clone());
            // A task per object: each body is read on a task of its own.
            let task = tokio::spawn(get_object(engine, o, budget, progress));
            async move { (i, task.await.unwrap_or_else(|e| Err(Error::Config(format!("get task failed: {e}"))))) }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some((i, r)) = done.next().await {
        out[i] = Some(r);
    }
    out.into_iter().map(|r| r.expect("every object answered")).collect()
}

/// `start..end` of an object (end exclusive; clipped to the object by the server).
pub async fn get_range(
    engine: Engine,
    object: ObjectRef,
    start: u64,
    end: u64,
    if_match: Option<String>,
) -> Result<Bytes, Error> {
    if end <= start {
        return Ok(Bytes::new());
    }
    let params = GetParams { range: Some(RangeSpec::FromTo(start, end - 1)), if_match, ..GetParams::default() };
    let out = engine.get(&object, params).await?;
    let len = out.range.map(|(a, b)| b + 1 - a).unwrap_or(out.meta.size);
    collect_sized(out.body, len, &None).await
}

/// The ranges of one object, and where each goes in the caller's order.
pub struct RangeGroup {
    pub engine: Engine,
    pub object: ObjectRef,
    pub slots: Vec<usize>,
    pub ranges: Vec<Range<u64>>,
}

/// `get_ranges` over several objects: the engine's coalescing `get_ranges` per object,
/// the objects at once, the parts put back in the caller's order (`n` in all).
///
/// Not `Send` to the compiler (a higher-ranked closure inside the engine's future): the
/// caller drives it on its own thread, inside the runtime (client.rs).
pub async fn get_ranges_grouped(
    groups: &[RangeGroup],
    n: usize,
    opts: &ferry_engine::RangesOptions,
) -> Result<Vec<Bytes>, Error> {
    let outs = futures_util::future::try_join_all(
        groups.iter().map(|g| ferry_engine::get_ranges(&g.engine, &g.object, &g.ranges, opts)),
    )
    .await?;
    let mut parts = vec![Bytes::new(); n];
    for (g, out) in groups.iter().zip(outs) {
        for (slot, part) in g.slots.iter().zip(out.parts) {
            parts[*slot] = part;
        }
    }
    Ok(parts)
}
