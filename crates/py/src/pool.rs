//! The buffer pool: memory a dropped `ferry.Buffer` gives back, for the next `get`.
//!
//! Why: a fresh buffer of a large object is mapped fresh by the allocator and every page
//! is faulted in and zeroed by the kernel as the bytes land; on the lab machine that first
//! touch was ~30% of a 1 GiB `get`'s samples and most of its system time
//! (docs/lab/python-rows.md, "Where get's time goes"). A loop that gets, uses and drops
//! objects (a training loader) pays it on every call. With the pool, the memory of a
//! dropped buffer is kept, already touched, and the next `get` of a similar size lands in
//! it: what `get_into` does with a buffer the caller keeps, without the caller keeping one.
//!
//! ```text
//! get ─► Pooled::take(len): the smallest kept Vec of capacity in [len, len + len/4]
//!          (none: a fresh Vec, its capacity rounded up to a size class)
//!     ─► the engine writes the object into it ─► Pooled::seal: Bytes owning a Returning
//! Buffer dropped (and every view of it) ─► Returning::drop ─► kept, oldest evicted
//!     while more than the limit is kept; larger than the limit: freed
//! ```
//!
//! Bounds: the pool keeps at most its limit of idle memory (`FERRY_BUFFER_POOL` bytes at
//! the first `get`, 1 GiB by default; `ferry.set_buffer_pool(max_bytes)` changes it, 0
//! turns the pool off and frees what it holds). That is RSS a process keeps after it has
//! dropped every buffer, as malloc arenas do, in exchange for no first touch. Buffers
//! below [`MIN_POOLED`] are left to the allocator, which reuses small blocks itself.
//! Size classes (an eighth of the power of two below) let objects of nearly the same size
//! share buffers; the unused tail of a class is address space, not RSS, until written.
//!
//! Fork: the pool belongs to one process (its pid is kept); a child finds it foreign and
//! drops its copy. Every use is `try_lock`: a lock held by a thread that a fork left
//! behind, or a rare contention, skips the pool (a fresh allocation, a plain free)
//! instead of waiting.

use bytes::Bytes;
use ferry_engine::Allocator;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Smallest buffer worth keeping: glibc serves blocks below its mmap threshold (128 KiB,
/// growing to 32 MiB as large blocks are freed) from its heap and reuses them itself; a
/// few MiB and up is where fresh mappings, and their faults, begin.
pub const MIN_POOLED: usize = 4 << 20;

/// Idle bytes kept when `FERRY_BUFFER_POOL` is not set: one 1 GiB object, or a few dozen
/// of the 40-80 MB Parquet tables an analysis service reads (parquet-scan's full size).
pub const DEFAULT_LIMIT: usize = 1 << 30;

struct Pool {
    pid: u32,
    /// Bytes of idle memory kept at most; `None` until the first use reads the default.
    limit: Option<usize>,
    held: usize,
    free: VecDeque<Vec<u8>>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool { pid: 0, limit: None, held: 0, free: VecDeque::new() });

impl Pool {
    /// This process's pool, its limit read from the environment on first use.
    fn mine(&mut self) -> &mut Pool {
        let pid = std::process::id();
        if self.pid != pid {
            self.pid = pid;
            self.held = 0;
            self.free.clear();
        }
        if self.limit.is_none() {
            let env = std::env::var("FERRY_BUFFER_POOL").ok().and_then(|v| v.trim().parse().ok());
            self.limit = Some(env.unwrap_or(DEFAULT_LIMIT));
        }
        self
    }

    fn limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_LIMIT)
    }

    fn evict_to(&mut self, room_for: usize) {
        while self.held + room_for > self.limit() {
            match self.free.pop_front() {
                Some(v) => self.held -= v.capacity(),
                None => break,
            }
        }
    }
}

/// Sets the pool's limit (bytes of idle memory kept); returns the one before. 0 turns
/// the pool off and frees what it keeps.
pub fn set_limit(bytes: usize) -> usize {
    let mut g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let pool = g.mine();
    let before = pool.limit();
    pool.limit = Some(bytes);
    pool.evict_to(0);
    before
}

/// `(limit, bytes kept now, buffers kept now)`.
pub fn state() -> (usize, usize, usize) {
    let mut g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let pool = g.mine();
    (pool.limit(), pool.held, pool.free.len())
}

/// `len` rounded up to its size class: a multiple of an eighth of the power of two at or
/// below it (at most 1/8 more).
fn class(len: usize) -> usize {
    let step = (1usize << (usize::BITS - 1 - len.leading_zeros())) / 8;
    len.div_ceil(step.max(1)) * step.max(1)
}

/// The engine's allocator for `Client.get` and the reads built on it.
pub struct Pooled;

impl Allocator for Pooled {
    fn take(&self, len: usize) -> (Vec<u8>, bool) {
        if len < MIN_POOLED {
            return (Vec::with_capacity(len), false);
        }
        if let Ok(mut g) = POOL.try_lock() {
            let pool = g.mine();
            let fit = (0..pool.free.len())
                .filter(|&i| (len..=len + len / 4).contains(&pool.free[i].capacity()))
                .min_by_key(|&i| pool.free[i].capacity());
            if let Some(v) = fit.and_then(|i| pool.free.remove(i)) {
                pool.held -= v.capacity();
                return (v, true);
            }
        }
        (Vec::with_capacity(class(len)), false)
    }

    fn seal(&self, vec: Vec<u8>) -> Bytes {
        if vec.capacity() < MIN_POOLED {
            Bytes::from(vec)
        } else {
            Bytes::from_owner(Returning(vec))
        }
    }
}

/// A pooled buffer's memory, given back when the last `Bytes` of it is dropped.
struct Returning(Vec<u8>);

impl AsRef<[u8]> for Returning {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.0);
        let cap = v.capacity();
        if let Ok(mut g) = POOL.try_lock() {
            let pool = g.mine();
            if cap <= pool.limit() {
                pool.evict_to(cap);
                v.clear();
                pool.held += cap;
                pool.free.push_back(v);
            }
        }
    }
}
