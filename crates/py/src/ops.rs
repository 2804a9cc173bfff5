//! The async operations behind the Python calls, in plain Rust over the engine: every
//! Python method (sync or `*_async`) is a thin wrapper over one of these.
//!
//! Whole-object reads into memory ([`get_object`]) are the engine's `get_to_memory`
//! (one GET, or parallel ranged GETs into one buffer, verified), with the Python call's
//! progress tracker and sizes; the batch and iterator reads here schedule many of them.

use bytes::Bytes;
use ferry_engine::{Admission, ByteBudget, Destination, Engine, MemoryParams, MemoryProgress};
use ferry_store::{Error, GetParams, ObjectRef, RangeSpec};
use futures_util::stream::{self, StreamExt};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Bytes moved so far and the total when known (0 until then), shared with the waiting
/// Python thread, which reports them to a `callback` between its waits (runtime.rs).
#[derive(Debug, Default)]
pub struct Progress {
    pub done: AtomicU64,
    pub total: AtomicU64,
}

pub type Tracker = Option<Arc<Progress>>;

/// Parts of one object in flight, as the command line's `--part-concurrency`.
pub const PART_CONCURRENCY: usize = 8;

/// One object into memory: the engine's `get_to_memory` with the file download's part
/// size, in a buffer from the pool of dropped ones (pool.rs), reporting to `progress`; `size_hint` is the object's size when the caller knows
/// it (engine's `MemoryParams::size_hint`).
pub async fn get_object(
    engine: Engine,
    object: ObjectRef,
    size_hint: Option<u64>,
    budget: Option<Arc<ByteBudget>>,
    progress: Tracker,
) -> Result<Bytes, Error> {
    let params = MemoryParams { concurrency: PART_CONCURRENCY, size_hint, ..MemoryParams::default() };
    ferry_engine::get_to_memory_with(&engine, &object, params, budget, observer(progress), &crate::pool::Pooled).await
}

/// One object into memory the caller lends (`Client.get_into`): the engine's
/// `get_into_memory`, the same parts as [`get_object`]; the bytes written.
pub async fn get_object_into(
    engine: Engine,
    object: ObjectRef,
    dest: Destination,
    progress: Tracker,
) -> Result<u64, Error> {
    let params = MemoryParams { concurrency: PART_CONCURRENCY, ..MemoryParams::default() };
    ferry_engine::get_into_memory(&engine, &object, params, dest, observer(progress)).await
}

/// The engine's progress hooks feeding a Python call's tracker.
fn observer(progress: Tracker) -> MemoryProgress {
    progress
        .map(|p| {
            let q = p.clone();
            MemoryProgress {
                size: Some(Arc::new(move |n| {
                    p.total.fetch_add(n, Relaxed);
                })),
                bytes: Some(Arc::new(move |n| {
                    q.done.fetch_add(n, Relaxed);
                })),
            }
        })
        .unwrap_or_default()
}

/// An object of a batch: its engine, the object, and its size when the caller knows it.
pub type Target = (Engine, ObjectRef, Option<u64>);

/// Objects in flight in `get_many` when the caller names no concurrency, for objects not
/// known to be small, as the command line's `--concurrency`: enough to hide S3's ~30 ms
/// first byte behind 16 KiB objects (docs/lab/README.md, profiles).
pub const DEFAULT_CONCURRENCY: usize = 64;

/// Objects known to be small in flight at most when the caller names no concurrency: the
/// default connection cap (64) with every pipeline full (32 deep, `TransportConfig`'s
/// `pipeline_depth`). The engine's admission bounds them below that: limit x the
/// transport's depth (`Admission::small_room`).
pub const SMALL_IN_FLIGHT: usize = 64 * 32;

/// Many objects into memory, results in input order (each a result of its own). A known
/// size goes with its GET as a size hint, which lets `auto` pipeline small objects.
///
/// In flight: `concurrency` objects when the caller names it. Otherwise the engine's
/// admission decides: an object known to be small (at most 1 MiB: a pipelined GET) takes
/// a share of a place, so a batch of them fills every connection's pipeline (up to
/// [`SMALL_IN_FLIGHT`]), and other objects go [`DEFAULT_CONCURRENCY`] at once. With a
/// budget, a body waits for its bytes before it is read.
///
/// Each endpoint's controller starts at the objects in flight asked for
/// (`Controller::start_at`, at most the objects for that endpoint and its connection
/// cap): a fresh client's controller would otherwise begin at 4 and climb by slow start,
/// a large part of a short batch's time (docs/lab/python-rows.md, "get_many's start").
pub async fn get_many(
    objects: Vec<Target>,
    concurrency: Option<usize>,
    budget: Option<Arc<ByteBudget>>,
    progress: Tracker,
) -> Vec<Result<Bytes, Error>> {
    let n = objects.len();
    let concurrency = concurrency.map(|c| c.max(1));
    let mut controllers: Vec<(Arc<ferry_wire::controller::Controller>, usize)> = Vec::new();
    for (engine, _, _) in &objects {
        let c = engine.controller();
        match controllers.iter_mut().find(|(k, _)| Arc::ptr_eq(k, &c)) {
            Some((_, count)) => *count += 1,
            None => controllers.push((c, 1)),
        }
    }
    for (c, count) in controllers {
        c.start_at(count.min(concurrency.unwrap_or(usize::MAX)));
    }
    // Without a caller's concurrency, objects not known small wait here for one of
    // DEFAULT_CONCURRENCY places; small ones only for the engine's admission.
    let others = Arc::new(tokio::sync::Semaphore::new(DEFAULT_CONCURRENCY));
    let mut out: Vec<Option<Result<Bytes, Error>>> = (0..n).map(|_| None).collect();
    let mut done = stream::iter(objects.into_iter().enumerate())
        .map(|(i, (engine, o, size_hint))| {
            let (budget, progress) = (budget.clone(), progress.clone());
            let gate = (concurrency.is_none() && !Admission::is_small(size_hint)).then(|| others.clone());
            async move {
                let _place = match gate {
                    Some(g) => Some(g.acquire_owned().await.expect("never closed")),
                    None => None,
                };
                // A task per object: each body is read on a task of its own.
                let task = tokio::spawn(get_object(engine, o, size_hint, budget, progress));
                (i, task.await.unwrap_or_else(|e| Err(Error::Config(format!("get task failed: {e}")))))
            }
        })
        .buffer_unordered(concurrency.unwrap_or(SMALL_IN_FLIGHT));
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
    let mut body = out.body;
    let mut bytes = Vec::with_capacity(len as usize);
    while let Some(chunk) = body.chunk().await {
        bytes.extend_from_slice(&chunk?);
    }
    Ok(Bytes::from(bytes))
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
/// `Send`, as the engine's is, so it runs as a task of the runtime; its futures are made
/// from group numbers (a closure over a borrowed group is one the compiler cannot prove
/// `Send` for every lifetime).
pub async fn get_ranges_grouped(
    groups: &[RangeGroup],
    n: usize,
    opts: &ferry_engine::RangesOptions,
) -> Result<Vec<Bytes>, Error> {
    let outs = futures_util::future::try_join_all((0..groups.len()).map(|i| {
        let g = &groups[i];
        ferry_engine::get_ranges(&g.engine, &g.object, &g.ranges, opts)
    }))
    .await?;
    let mut parts = vec![Bytes::new(); n];
    for (g, out) in groups.iter().zip(outs) {
        for (slot, part) in g.slots.iter().zip(out.parts) {
            parts[*slot] = part;
        }
    }
    Ok(parts)
}
