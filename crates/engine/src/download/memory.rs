//! Download one object into memory: what a Python `Client.get` or a training loader
//! wants, the same plan and checks as a download into a file (plan.rs, fetch.rs) with a
//! buffer in place of the temp file.
//!
//! ```text
//! GET (whole) ─► size <= split_at, or no ETag ─► body into one Vec of `size`
//!                                                (ferry-store verifies CRC / length)
//!              └► larger: drop that body; parts of part_size (plan.rs), `concurrency`
//!                 at once, each Range + If-Match: ETag, written in place into one
//!                 allocation of `size`, each part's CRC as its bytes pass
//!                 ─► combine_parts == the stored full-object CRC?
//!                    (none stored: every part exact in length under the one ETag)
//! ```
//!
//! `get_into_memory` lands the same reads in memory the caller lends (a `Destination`:
//! Python's `Client.get_into` with a reused buffer, whose pages are already touched)
//! instead of one fresh allocation; the object must be exactly the buffer's size, which
//! is checked on the first response, before a byte is written.
//!
//! A first GET whose size is known small (`size_hint`) takes a share of a place
//! (`Admission::small_room`), so a batch of small objects fills pipelined connections.
//! The first request is a plain GET, not a HEAD: a small object costs one request and
//! keeps the store's whole-body check, and a large one pays a dropped response instead
//! of every object paying a HEAD. Each part runs as a task of its own (its socket read on
//! its own task, as the file download's parts), holding a place of the engine's
//! admission, and writes a disjoint range of the one allocation; the allocation is
//! shared (`Arc`) so a cancelled call frees it only when its last task has ended.

use super::fetch::{combine_parts, full_crc};
use super::plan::{part_count, part_len};
use super::ProgressFn;
use crate::admission::{Admission, ByteBudget, Engine};
use bytes::Bytes;
use ferry_proto::checksum::{base64_decode, Checksummer};
use ferry_store::{Error, GetParams, ObjectBody, ObjectInfo, ObjectRef, RangeSpec};
use std::sync::Arc;
use tokio::task::JoinSet;

/// How an object is read into memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryParams {
    /// Bytes per ranged GET of a large object.
    pub part_size: u64,
    /// Ranged GETs in flight for this object.
    pub concurrency: usize,
    /// Objects larger than this are read in parts; at most this, with one GET.
    pub split_at: u64,
    /// The object's size when the caller knows it (from a listing or a HEAD): sent as the
    /// first GET's `size_hint`, which lets `auto` pipeline a small object's GET (wire's
    /// auto/mod.rs). A wrong hint costs speed, never bytes: the store still checks the
    /// length the response announces.
    pub size_hint: Option<u64>,
}

impl Default for MemoryParams {
    /// The file download's parts (8 MiB, 8 in flight), split above two parts, so a split
    /// always gives at least two parts' worth of parallelism for the dropped response.
    fn default() -> Self {
        let file = super::DownloadParams::default();
        MemoryParams {
            part_size: file.part_size,
            concurrency: file.concurrency,
            split_at: 2 * file.part_size,
            size_hint: None,
        }
    }
}

/// Who hears how a read goes: `size` once the object's size is known, `bytes` as bytes
/// land.
#[derive(Clone, Default)]
pub struct MemoryProgress {
    pub size: Option<ProgressFn>,
    pub bytes: Option<ProgressFn>,
}

impl MemoryProgress {
    fn bytes(&self, n: usize) {
        if let Some(f) = &self.bytes {
            f(n as u64)
        }
    }
}

/// Memory a caller lends a read: `len` writable bytes at `ptr`, kept valid and written by
/// nobody else for as long as `owner` lives (a Python buffer export, say). The read
/// holds the owner until its last part task has ended, even when the call itself is
/// cancelled, so a lent buffer is never written after it is given back.
pub struct Destination {
    ptr: *mut u8,
    len: usize,
    owner: Box<dyn Send + Sync>,
}

impl Destination {
    /// # Safety
    /// `ptr..ptr + len` is writable memory that stays valid, and that nothing else reads
    /// or writes, until `owner` is dropped.
    pub unsafe fn new(ptr: *mut u8, len: usize, owner: Box<dyn Send + Sync>) -> Destination {
        Destination { ptr, len, owner }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

// SAFETY: the memory is the owner's to lend (Destination::new's contract) and the owner
// is Send + Sync.
unsafe impl Send for Destination {}
unsafe impl Sync for Destination {}

/// Reads `object` into one buffer (module note). With a `budget`, a single-GET body waits
/// for its bytes before it is read (parts are bounded by `concurrency` instead).
pub async fn get_to_memory(
    engine: &Engine,
    object: &ObjectRef,
    params: MemoryParams,
    budget: Option<Arc<ByteBudget>>,
    progress: MemoryProgress,
) -> Result<Bytes, Error> {
    match read_to(engine, object, params, budget, progress, None).await? {
        Landed::Owned(bytes) => Ok(bytes),
        Landed::Lent(_) => unreachable!("read_to without a destination allocates"),
    }
}

/// Reads `object` into memory the caller lends (`Client.get_into`: a training loop reuses
/// one buffer, so no read pays the kernel's first touch of fresh pages). The object must
/// be exactly `dest.len()` bytes: any other size fails with [`Error::Config`] before a
/// byte is written. Returns the bytes written. A read that fails part-way leaves the
/// buffer partly written: its contents are then unspecified, never another object's
/// bytes passed off as this one's (the error says so).
pub async fn get_into_memory(
    engine: &Engine,
    object: &ObjectRef,
    params: MemoryParams,
    dest: Destination,
    progress: MemoryProgress,
) -> Result<u64, Error> {
    match read_to(engine, object, params, None, progress, Some(dest)).await? {
        Landed::Lent(n) => Ok(n),
        Landed::Owned(_) => unreachable!("read_to with a destination writes there"),
    }
}

/// Where a read's bytes went.
enum Landed {
    Owned(Bytes),
    Lent(u64),
}

/// The read behind both entry points: `dest` None allocates the object's size.
async fn read_to(
    engine: &Engine,
    object: &ObjectRef,
    params: MemoryParams,
    budget: Option<Arc<ByteBudget>>,
    progress: MemoryProgress,
    dest: Option<Destination>,
) -> Result<Landed, Error> {
    // A place under the endpoint's limit for the first GET (a share of one when its size
    // is known to be small, admission.rs); the parts of a large object take places of
    // their own once it is given back.
    let hint = params.size_hint.or(dest.as_ref().map(|d| d.len as u64));
    let room = match hint {
        hint if Admission::is_small(hint) => engine.admission().small_room().await,
        _ => engine.admission().room().await,
    };
    let out = engine.get(object, GetParams { size_hint: hint, ..GetParams::default() }).await?;
    let size = out.meta.size;
    if let Some(d) = &dest {
        if d.len as u64 != size {
            return Err(Error::Config(format!(
                "{object} is {size} bytes but the buffer holds {}: get_into needs a buffer of exactly the object's size",
                d.len
            )));
        }
    }
    if let Some(f) = &progress.size {
        f(size)
    }
    if size <= params.split_at.max(1) || out.meta.etag.is_none() {
        let _held = match &budget {
            Some(b) => Some(b.acquire(size.min(b.total())).await),
            None => None,
        };
        let landed = match dest {
            None => collect_sized(out.body, size, &progress).await.map(Landed::Owned),
            Some(d) => {
                let buf = Shared::lent(d);
                let part = Part { start: 0, end: size, etag: None, algo: None };
                write_body(object, out.body, &part, &buf, &progress).await.map(|_| Landed::Lent(size))
            }
        };
        drop(room);
        return landed;
    }
    drop(out.body);
    drop(room);
    let buf = match dest {
        None => Shared::new(size as usize),
        Some(d) => Shared::lent(d),
    };
    get_parts(engine, object, out.meta, params, progress, buf).await
}

/// A body into one allocation of its announced size (the store checks the length).
async fn collect_sized(mut body: ObjectBody, size: u64, progress: &MemoryProgress) -> Result<Bytes, Error> {
    let mut out = Vec::with_capacity(size as usize);
    while let Some(chunk) = body.chunk().await {
        let chunk = chunk?;
        out.extend_from_slice(&chunk);
        progress.bytes(chunk.len());
    }
    Ok(Bytes::from(out))
}

/// One allocation written by several tasks, each in a range of its own: the read's own
/// (a Vec's, handed over as `Bytes` at the end) or a caller's (`Destination`).
struct Shared {
    ptr: *mut u8,
    cap: usize,
    /// The lender of the memory; None when it is the read's own allocation.
    lent: Option<Box<dyn Send + Sync>>,
}

// SAFETY: tasks write disjoint ranges (one part each) and nothing reads the memory until
// every writer has finished (get_parts joins them all first).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn new(len: usize) -> Shared {
        let mut v = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(len));
        Shared { ptr: v.as_mut_ptr(), cap: v.capacity(), lent: None }
    }

    fn lent(d: Destination) -> Shared {
        Shared { ptr: d.ptr, cap: d.len, lent: Some(d.owner) }
    }

    /// # Safety
    /// `at..at + data.len()` lies inside the allocation and no other task writes there.
    unsafe fn write(&self, at: usize, data: &[u8]) {
        debug_assert!(at + data.len() <= self.cap);
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(at), data.len()) }
    }

    /// The read's result: the allocation as `len` bytes, or for lent memory its length.
    ///
    /// # Safety
    /// Every byte of `0..len` has been written and no writer is left.
    unsafe fn finish(self, len: usize) -> Landed {
        let mut me = std::mem::ManuallyDrop::new(self);
        if let Some(owner) = me.lent.take() {
            drop(owner);
            return Landed::Lent(len as u64);
        }
        // SAFETY: the pointer and capacity came from a Vec<u8>; the caller's contract
        // makes `len` initialised bytes.
        Landed::Owned(Bytes::from(unsafe { Vec::from_raw_parts(me.ptr, len, me.cap) }))
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.lent.is_none() {
            // SAFETY: from a Vec<u8> of this capacity; no byte needs dropping.
            drop(unsafe { Vec::from_raw_parts(self.ptr, 0, self.cap) });
        }
    }
}

/// Parallel ranged GETs of a known object into one buffer, verified (module note).
async fn get_parts(
    engine: &Engine,
    object: &ObjectRef,
    meta: ObjectInfo,
    params: MemoryParams,
    progress: MemoryProgress,
    buf: Shared,
) -> Result<Landed, Error> {
    let size = meta.size;
    let part_size = params.part_size.max(1);
    let crc = full_crc(&meta);
    let algo = crc.as_ref().map(|c| c.0);
    let buf = Arc::new(buf);
    let parts = part_count(size, part_size);
    let gate = Arc::new(tokio::sync::Semaphore::new(params.concurrency.max(1)));
    let mut tasks = JoinSet::new();
    for i in 0..parts {
        let start = i * part_size;
        let end = start + part_len(i, part_size, size);
        let (engine, object, etag, buf, gate, progress) =
            (engine.clone(), object.clone(), meta.etag.clone(), buf.clone(), gate.clone(), progress.clone());
        tasks.spawn(async move {
            let _part = gate.acquire_owned().await;
            let _room = engine.admission().room().await;
            let part = Part { start, end, etag, algo };
            fetch_part(&engine, &object, part, &buf, &progress).await.map(|crc| (i, crc))
        });
    }
    let mut sums: Vec<Option<Vec<u8>>> = vec![None; parts as usize];
    while let Some(joined) = tasks.join_next().await {
        let (i, sum) = joined.map_err(|e| Error::Config(format!("a part task of {object} failed: {e}")))??;
        sums[i as usize] = sum;
    }
    if let Some((algo, want)) = crc {
        let sums: Option<Vec<Vec<u8>>> = sums.into_iter().collect();
        let whole = sums.and_then(|s| combine_parts(algo, &s, part_size, size));
        if whole.is_none() || whole != base64_decode(&want) {
            return Err(Error::Integrity {
                message: format!("{object}: the parts' {algo} does not match the stored full-object checksum"),
                request_id: None,
            });
        }
    }
    let buf = Arc::try_unwrap(buf).map_err(|_| Error::Config(format!("{object}: a part task outlived its read")))?;
    // SAFETY: every part wrote exactly its range (fetch_part checks lengths), the parts
    // cover 0..size, and every task has been joined.
    Ok(unsafe { buf.finish(size as usize) })
}

/// One part's bytes `[start, end)`, pinned to `etag`, with the CRC to compute.
struct Part {
    start: u64,
    end: u64,
    etag: Option<String>,
    algo: Option<ferry_proto::checksum::ChecksumAlgorithm>,
}

/// One part: written in place, its length checked, its CRC returned when one is stored.
async fn fetch_part(
    engine: &Engine,
    object: &ObjectRef,
    part: Part,
    buf: &Shared,
    progress: &MemoryProgress,
) -> Result<Option<Vec<u8>>, Error> {
    let params = GetParams {
        range: Some(RangeSpec::FromTo(part.start, part.end - 1)),
        if_match: part.etag.clone(),
        ..GetParams::default()
    };
    let out = engine.get(object, params).await?;
    write_body(object, out.body, &part, buf, progress).await
}

/// A body's bytes into `part`'s range of `buf`, as they arrive; fails on a byte more or
/// less than the range.
async fn write_body(
    object: &ObjectRef,
    mut body: ObjectBody,
    part: &Part,
    buf: &Shared,
    progress: &MemoryProgress,
) -> Result<Option<Vec<u8>>, Error> {
    let mut hasher = part.algo.map(Checksummer::new);
    let (mut at, end) = (part.start as usize, part.end as usize);
    while let Some(chunk) = body.chunk().await {
        let chunk = chunk?;
        if at + chunk.len() > end {
            return Err(Error::Integrity {
                message: format!("{object}: range {}..{} answered with more bytes", part.start, part.end),
                request_id: None,
            });
        }
        // SAFETY: inside this part's range (checked above), which only this task writes.
        unsafe { buf.write(at, &chunk) };
        if let Some(h) = &mut hasher {
            h.update(&chunk);
        }
        at += chunk.len();
        progress.bytes(chunk.len());
    }
    if at != end {
        return Err(Error::Integrity {
            message: format!(
                "{object}: range {}..{} ended after {} bytes",
                part.start,
                part.end,
                at - part.start as usize
            ),
            request_id: None,
        });
    }
    Ok(hasher.map(|h| h.finish()))
}
