//! Download one object into memory: what a Python `Client.get` or a training loader
//! wants, the same checks as a download into a file (plan.rs, fetch.rs) with a buffer in
//! place of the temp file.
//!
//! ```text
//! GET (whole) ─► size <= split_at, or no ETag ─► body into one buffer of `size`
//!              │                                 (ferry-store verifies CRC / length)
//!              └► larger: one buffer of `size`; the body is read on, part by part (the
//!                 stream); its rate since the response head is checked against
//!                 `split_below` after 4 MiB, then at each MiB (fresh memory splits at
//!                 once, unchecked):
//!                   at or above: it reads on alone (a fast link, loopback: more
//!                     connections only add work on the same cores); read to its end,
//!                     ferry-store verifies it as any body
//!                   below (a store that caps each connection): `concurrency - 1`
//!                     helpers take parts from the far end, each Range + If-Match: ETag,
//!                     until they meet the stream, which finishes the part it is in;
//!                     every part's CRC (the stream's hashed from memory up to the end of
//!                     that part, then as they pass) combined
//!                     == the stored full-object CRC (none stored: lengths exact, one ETag)
//! ```
//!
//! Why a stream first: on loopback, into memory whose pages are already touched (a lent
//! buffer, a pooled one), one stream beat 8 parallel parts ~1.6x; into fresh memory the
//! parts won ~1.5x, because the first touch of each page is most of the work and the
//! parts spread it over the cores (docs/lab/python-rows.md, "get: a stream first, and a
//! buffer pool"). On S3 (85-90 MB/s per connection, docs/lab/store-s3-facts.md) parts
//! are what makes a large read fast. The first 4 MiB tell which link this is; the first
//! GET's body is never dropped, so a read that splits pays no extra request for it. The
//! file download (mod.rs) keeps its HEAD and fixed parts: its parts are what it resumes
//! from.
//!
//! `get_into_memory` lands the same reads in memory the caller lends (a `Destination`:
//! Python's `Client.get_into` with a reused buffer, whose pages are already touched)
//! instead of one fresh allocation; the object must be exactly the buffer's size, which
//! is checked on the first response, before a byte is written. `get_to_memory_with`
//! takes its allocation from an [`Allocator`] (Python's pool of touched buffers).
//!
//! A first GET whose size is known small (`size_hint`) takes a share of a place
//! (`Admission::small_room`), so a batch of small objects fills pipelined connections.
//! The first request is a plain GET, not a HEAD: a small object costs one request and
//! keeps the store's whole-body check. Each helper runs as a task of its own (its socket
//! read on its own task, as the file download's parts), holding a place of the engine's
//! admission per part, and writes disjoint ranges of the one allocation; the allocation
//! is shared (`Arc`) so a cancelled call frees it only when its last task has ended.

use super::fetch::{combine_parts, full_crc};
use super::plan::{part_count, part_len};
use super::ProgressFn;
use crate::admission::{Admission, ByteBudget, Engine};
use bytes::Bytes;
use ferry_proto::checksum::{base64_decode, ChecksumAlgorithm, Checksummer};
use ferry_store::{Error, GetParams, ObjectBody, ObjectInfo, ObjectRef, RangeSpec};
use std::sync::Arc;
use tokio::task::JoinSet;

/// How an object is read into memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryParams {
    /// Bytes per part of a large object (the stream's checkpoints and the helpers' GETs).
    pub part_size: u64,
    /// GETs in flight for this object once it splits: the stream and `concurrency - 1`
    /// helpers.
    pub concurrency: usize,
    /// Objects larger than this are read part by part and may split; at most this, with
    /// one GET read whole.
    pub split_at: u64,
    /// Bytes per second: a stream into touched memory slower than this since its response
    /// head, checked after 4 MiB and then at each MiB, gets helpers (module note). 0: never
    /// split; `u64::MAX`: split at the first check.
    pub split_below: u64,
    /// The object's size when the caller knows it (from a listing or a HEAD): sent as the
    /// first GET's `size_hint`, which lets `auto` pipeline a small object's GET (wire's
    /// auto/mod.rs). A wrong hint costs speed, never bytes: the store still checks the
    /// length the response announces.
    pub size_hint: Option<u64>,
}

/// [`MemoryParams::split_below`] by default: 250 MB/s, above the fastest per-connection
/// rate of the cloud stores the server's profiles emulate (GCS ~180 MB/s, S3 85-90 MB/s,
/// Azure ~45 MB/s; crates/server's config.rs and docs/lab/server-emulation.md have the
/// sources), so a capped connection always splits, and below what one loopback stream
/// gave even on the loaded two-core lab machine (0.25-0.5 GB/s,
/// docs/lab/python-rows.md), so loopback reads on alone.
pub const SPLIT_BELOW: u64 = 250_000_000;

impl Default for MemoryParams {
    /// The file download's parts (8 MiB, 8 in flight), read part by part above two parts.
    fn default() -> Self {
        let file = super::DownloadParams::default();
        MemoryParams {
            part_size: file.part_size,
            concurrency: file.concurrency,
            split_at: 2 * file.part_size,
            split_below: SPLIT_BELOW,
            size_hint: None,
        }
    }
}

/// Where a read that allocates gets its memory. [`FreshVec`] by default; Python's
/// `Client.get` passes a pool of buffers already touched, so a loop of reads does not pay
/// the kernel's first touch of fresh pages each time.
pub trait Allocator: Send + Sync {
    /// An empty `Vec` with room for at least `len` bytes, and whether its pages have been
    /// touched already (a pool's) or are fresh.
    fn take(&self, len: usize) -> (Vec<u8>, bool);
    /// The finished read: `vec` holds the object's bytes.
    fn seal(&self, vec: Vec<u8>) -> Bytes;
}

/// A fresh `Vec` of exactly the object's size per read.
pub struct FreshVec;

impl Allocator for FreshVec {
    fn take(&self, len: usize) -> (Vec<u8>, bool) {
        (Vec::with_capacity(len), false)
    }

    fn seal(&self, vec: Vec<u8>) -> Bytes {
        Bytes::from(vec)
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
    get_to_memory_with(engine, object, params, budget, progress, &FreshVec).await
}

/// [`get_to_memory`] with its buffer from `alloc` (Python's pool of touched buffers).
pub async fn get_to_memory_with(
    engine: &Engine,
    object: &ObjectRef,
    params: MemoryParams,
    budget: Option<Arc<ByteBudget>>,
    progress: MemoryProgress,
    alloc: &dyn Allocator,
) -> Result<Bytes, Error> {
    match read_to(engine, object, params, budget, progress, Memory::Alloc(alloc)).await? {
        Landed::Owned(vec) => Ok(alloc.seal(vec)),
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
    match read_to(engine, object, params, None, progress, Memory::Lent(dest)).await? {
        Landed::Lent(n) => Ok(n),
        Landed::Owned(_) => unreachable!("read_to with a destination writes there"),
    }
}

/// Where a read's bytes go: memory it allocates, or memory the caller lends.
enum Memory<'a> {
    Alloc(&'a dyn Allocator),
    Lent(Destination),
}

/// Where a read's bytes went.
enum Landed {
    Owned(Vec<u8>),
    Lent(u64),
}

/// The read behind every entry point (module note).
async fn read_to(
    engine: &Engine,
    object: &ObjectRef,
    params: MemoryParams,
    budget: Option<Arc<ByteBudget>>,
    progress: MemoryProgress,
    memory: Memory<'_>,
) -> Result<Landed, Error> {
    // A place under the endpoint's limit for the first GET (a share of one when its size
    // is known to be small, admission.rs); the helpers of a large object take places of
    // their own.
    let lent_len = match &memory {
        Memory::Lent(d) => Some(d.len as u64),
        Memory::Alloc(_) => None,
    };
    let hint = params.size_hint.or(lent_len);
    let room = match hint {
        hint if Admission::is_small(hint) => engine.admission().small_room().await,
        _ => engine.admission().room().await,
    };
    let out = engine.get(object, GetParams { size_hint: hint, ..GetParams::default() }).await?;
    let size = out.meta.size;
    if let Some(len) = lent_len {
        if len != size {
            return Err(Error::Config(format!(
                "{object} is {size} bytes but the buffer holds {len}: get_into needs a buffer of exactly the object's size"
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
        let buf = Shared::new(memory, size as usize);
        let part = Part { start: 0, end: size, etag: None, algo: None };
        write_body(object, out.body, &part, &buf, &progress).await?;
        drop(room);
        // SAFETY: write_body wrote exactly 0..size, on this task.
        return Ok(unsafe { buf.finish(size as usize) });
    }
    let buf = Shared::new(memory, size as usize);
    stream_then_split(engine, object, out.meta, out.body, room, params, progress, buf).await
}

/// One allocation written by several tasks, each in a range of its own: the read's own
/// (a `Vec` from an [`Allocator`]) or a caller's (`Destination`).
struct Shared {
    ptr: *mut u8,
    cap: usize,
    /// Whether the memory's pages are touched already (lent, or a pool's): then the
    /// writes cost no page faults.
    touched: bool,
    /// The lender of the memory; None when it is the read's own allocation.
    lent: Option<Box<dyn Send + Sync>>,
}

// SAFETY: tasks write disjoint ranges (parts claimed once each, `Unclaimed`) and nothing
// reads a range until its writer has finished with it.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn new(memory: Memory<'_>, len: usize) -> Shared {
        match memory {
            Memory::Lent(d) => Shared { ptr: d.ptr, cap: d.len, touched: true, lent: Some(d.owner) },
            Memory::Alloc(a) => {
                let (v, touched) = a.take(len);
                let mut v = std::mem::ManuallyDrop::new(v);
                v.clear();
                v.reserve(len);
                Shared { ptr: v.as_mut_ptr(), cap: v.capacity(), touched, lent: None }
            }
        }
    }

    /// # Safety
    /// `at..at + data.len()` lies inside the allocation and no other task writes there.
    unsafe fn write(&self, at: usize, data: &[u8]) {
        debug_assert!(at + data.len() <= self.cap);
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(at), data.len()) }
    }

    /// Bytes `at..at + len`, already written.
    ///
    /// # Safety
    /// The range lies inside the allocation, was written, and nobody writes it now.
    unsafe fn written(&self, at: usize, len: usize) -> &[u8] {
        debug_assert!(at + len <= self.cap);
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.add(at), len) }
    }

    /// The read's result: its own allocation as `len` bytes, or for lent memory its
    /// length.
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
        Landed::Owned(unsafe { Vec::from_raw_parts(me.ptr, len, me.cap) })
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

/// The parts nobody has taken yet, `[front, back)`: the stream takes from the front, the
/// helpers from the back, so the one response already flowing carries all it can and
/// every part is read exactly once.
struct Unclaimed(std::sync::Mutex<(u64, u64)>);

impl Unclaimed {
    fn new(parts: u64) -> Unclaimed {
        Unclaimed(std::sync::Mutex::new((0, parts)))
    }

    fn front(&self) -> Option<u64> {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (g.0 < g.1).then(|| {
            g.0 += 1;
            g.0 - 1
        })
    }

    fn back(&self) -> Option<u64> {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (g.0 < g.1).then(|| {
            g.1 -= 1;
            g.1
        })
    }
}

/// Whether a stream that has moved `bytes` in `elapsed` is slower than `split_below` bytes
/// per second.
fn slower_than(split_below: u64, bytes: u64, elapsed: std::time::Duration) -> bool {
    split_below > 0 && (bytes as f64) < split_below as f64 * elapsed.as_secs_f64()
}

/// Where the stream's rate since its response head is first checked: 4 MiB, half a
/// part. Behind S3's 90 MB/s per connection that is ~45 ms, where a check per part waited
/// ~90 ms before helpers started (a sixth of a 256 MiB read at the split's rate); GCS's
/// ~180 MB/s takes ~23 ms. A loopback stream, faster than `SPLIT_BELOW` by that
/// constant's definition, must stall for ~15 ms in its first 4 MiB to look slow there: a
/// first check at 1 MiB (4.2 ms) split touched-memory reads on a loaded machine that one
/// stream does best (docs/lab/python-rows.md counts how often). Re-measure with
/// `bench/py_get_whole.py` (s3 profile, `get_into`) and that page's split count.
const FIRST_CHECK: u64 = 4 * 1024 * 1024;

/// After the first check, the rate since the response head is checked again each time
/// the stream has carried another MiB: each later check averages over more bytes.
const RATE_CHECK_EVERY: u64 = 1024 * 1024;

/// When the stream splits: at once into fresh memory, or where its rate since the
/// response head is first found below `split_below` at a check.
struct RateWatch {
    began: std::time::Instant,
    /// `None`: split at once.
    split_below: Option<u64>,
    next: u64,
}

impl RateWatch {
    fn new(split_below: Option<u64>) -> RateWatch {
        RateWatch { began: std::time::Instant::now(), split_below, next: FIRST_CHECK }
    }

    /// Whether the stream, `at` bytes in, should split now.
    fn slow_at(&mut self, at: u64) -> bool {
        let Some(split_below) = self.split_below else { return true };
        if at < self.next {
            return false;
        }
        self.next = at - at % RATE_CHECK_EVERY + RATE_CHECK_EVERY;
        slower_than(split_below, at, self.began.elapsed())
    }
}

/// How a call of [`stream_part`] ended.
enum Streamed {
    /// The part is in, with its CRC when one was asked for.
    Whole(Option<Vec<u8>>),
    /// The rate check failed with the part in up to this offset: the caller splits, then
    /// streams the rest of the part.
    Slow(u64),
}

/// A part's index and its CRC (when one is stored to check against).
type PartSum = (u64, Option<Vec<u8>>);

/// A large object: its first GET read on part by part, helpers added when that stream is
/// slow (module note); verified.
#[allow(clippy::too_many_arguments)]
async fn stream_then_split(
    engine: &Engine,
    object: &ObjectRef,
    meta: ObjectInfo,
    mut body: ObjectBody,
    room: crate::Permit,
    params: MemoryParams,
    progress: MemoryProgress,
    buf: Shared,
) -> Result<Landed, Error> {
    // Fresh memory splits at once, whatever the stream's rate: its page faults (the kernel
    // zeroing each page as the bytes land) then spread over the helpers' tasks on every
    // core instead of stalling the one stream (module note).
    let split_below = if buf.touched { Some(params.split_below) } else { None };
    let size = meta.size;
    let part_size = params.part_size.max(1);
    let crc = full_crc(&meta);
    let algo = crc.as_ref().map(|c| c.0);
    let buf = Arc::new(buf);
    let parts = part_count(size, part_size);
    let free = Arc::new(Unclaimed::new(parts));
    let mut sums: Vec<Option<Vec<u8>>> = vec![None; parts as usize];
    let mut helpers: JoinSet<Result<Vec<PartSum>, Error>> = JoinSet::new();
    let mut carry = Bytes::new();
    let mut split = false;
    let mut watch = (params.concurrency > 1 && split_below != Some(0)).then(|| RateWatch::new(split_below));
    while let Some(i) = free.front() {
        let start = i * part_size;
        let end = start + part_len(i, part_size, size);
        let hashed_as_read = split;
        let mut part = Part { start, end, etag: None, algo: if split { algo } else { None } };
        sums[i as usize] = loop {
            match stream_part(object, &mut body, &mut carry, &part, &buf, &progress, &mut watch).await? {
                Streamed::Whole(sum) => break sum,
                Streamed::Slow(at) => {
                    // Helpers take parts from the back; the stream finishes this one.
                    watch = None;
                    split = true;
                    part.start = at;
                    for _ in 1..params.concurrency {
                        let helper = Helper {
                            engine: engine.clone(),
                            object: object.clone(),
                            etag: meta.etag.clone(),
                            algo,
                            part_size,
                            size,
                            buf: buf.clone(),
                            free: free.clone(),
                            progress: progress.clone(),
                        };
                        helpers.spawn(helper.run());
                    }
                }
            }
        };
        if let (true, false, Some(a)) = (split, hashed_as_read, algo) {
            // The parts streamed before the split, this one included, were not hashed (a
            // stream read to its end is checked by ferry-store); they are in memory,
            // written by this task.
            for j in 0..=i {
                let (at, len) = (j * part_size, part_len(j, part_size, size));
                let mut h = Checksummer::new(a);
                // SAFETY: part j was written above by this task and nobody writes it now.
                h.update(unsafe { buf.written(at as usize, len as usize) });
                sums[j as usize] = Some(h.finish());
            }
        }
    }
    if !split {
        // The stream read every part: its end is where ferry-store checks the whole body.
        match body.chunk().await {
            None if carry.is_empty() => {}
            Some(Err(e)) => return Err(e),
            _ => {
                return Err(Error::Integrity {
                    message: format!("{object}: the body went on past its {size} bytes"),
                    request_id: None,
                })
            }
        }
    }
    drop(body);
    drop(room);
    while let Some(joined) = helpers.join_next().await {
        let got = joined.map_err(|e| Error::Config(format!("a part task of {object} failed: {e}")))??;
        for (j, sum) in got {
            sums[j as usize] = sum;
        }
    }
    if let (true, Some((algo, want))) = (split, crc) {
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
    // SAFETY: the stream and the helpers wrote exactly their parts (lengths checked), the
    // parts cover 0..size, and every task has been joined.
    Ok(unsafe { buf.finish(size as usize) })
}

/// One of the ranged GETs a slow stream gets beside it: takes parts from the far end of
/// the object until none is left unclaimed, each under a place of the engine's admission,
/// pinned to the stream's ETag.
struct Helper {
    engine: Engine,
    object: ObjectRef,
    etag: Option<String>,
    algo: Option<ChecksumAlgorithm>,
    part_size: u64,
    size: u64,
    buf: Arc<Shared>,
    free: Arc<Unclaimed>,
    progress: MemoryProgress,
}

impl Helper {
    /// The parts this helper fetched, with their CRCs.
    async fn run(self) -> Result<Vec<PartSum>, Error> {
        let mut got = Vec::new();
        loop {
            let _room = self.engine.admission().room().await;
            let Some(j) = self.free.back() else { return Ok(got) };
            let start = j * self.part_size;
            let end = start + part_len(j, self.part_size, self.size);
            let part = Part { start, end, etag: self.etag.clone(), algo: self.algo };
            got.push((j, fetch_part(&self.engine, &self.object, part, &self.buf, &self.progress).await?));
        }
    }
}

/// The stream's next part: bytes `[part.start, part.end)` from `carry` (what the last
/// chunk held past the previous part) and then the body, written in place; the part's
/// CRC when `part.algo` asks for one. Stops early when `watch` finds the stream slow.
async fn stream_part(
    object: &ObjectRef,
    body: &mut ObjectBody,
    carry: &mut Bytes,
    part: &Part,
    buf: &Shared,
    progress: &MemoryProgress,
    watch: &mut Option<RateWatch>,
) -> Result<Streamed, Error> {
    let mut hasher = part.algo.map(Checksummer::new);
    let (mut at, end) = (part.start as usize, part.end as usize);
    while at < end {
        if watch.as_mut().is_some_and(|w| w.slow_at(at as u64)) {
            return Ok(Streamed::Slow(at as u64));
        }
        if carry.is_empty() {
            *carry = match body.chunk().await {
                Some(chunk) => chunk?,
                None => {
                    return Err(Error::Integrity {
                        message: format!("{object}: the body ended after {at} bytes"),
                        request_id: None,
                    })
                }
            };
            continue;
        }
        let piece = carry.split_to(carry.len().min(end - at));
        // SAFETY: inside this part's range, which only the stream writes (claimed once).
        unsafe { buf.write(at, &piece) };
        if let Some(h) = &mut hasher {
            h.update(&piece);
        }
        at += piece.len();
        progress.bytes(piece.len());
    }
    Ok(Streamed::Whole(hasher.map(|h| h.finish())))
}

/// One part's bytes `[start, end)`, pinned to `etag`, with the CRC to compute.
struct Part {
    start: u64,
    end: u64,
    etag: Option<String>,
    algo: Option<ChecksumAlgorithm>,
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
