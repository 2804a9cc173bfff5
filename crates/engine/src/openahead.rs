//! Open-ahead: read many objects in order while the next ones are already opened, so
//! the consumer never waits for a first byte (Qubole measured 30% on a scan of many
//! small files; the `open-ahead` workload of `ferry bench` reproduces it). This is the
//! engine's `Prefetcher` for whole objects.
//!
//! ```text
//! objects (list or stream) ─► feeder task: one slot per object, at most max_open
//!                              ahead of the consumer, each slot a task:
//!
//!   slot: GET ─► head ─► read ahead while buffered < quota ──► body ended ─► Done
//!                                 │                          └─► consumer takes it ─► Live
//!                                 └─ quota full: hold the stream, idle
//!                                      ├─ consumer takes it ─► Live (rest streams from it)
//!                                      └─ idle_limit passes ─► close it ─► Reopen(offset)
//!
//! consumer: next() ─► the front slot's buffered chunks, then its tail:
//!           Live body | nothing | GET Range: bytes=offset- with If-Match: ETag
//! ```
//!
//! Bounds: at most `window` objects are opened ahead of the consumer (the object the
//! consumer holds is its own), and the window never exceeds `max_open`. Read-ahead is
//! shared in `window + 1` equal parts (the consumer's object keeps what its slot had
//! buffered until it is read); a slot stops reading as soon as its part is full. Each
//! part is taken from a byte budget of `max_buffered` of the reader's own before the slot
//! reads (a slot started when the window was smaller keeps its larger part until the
//! consumer has read it; a newer slot waits for bytes meanwhile, its stream held unread),
//! so the bytes held never exceed `max_buffered` plus one transport chunk per part. The
//! transport's backpressure holds the rest on the server. Each slot's part is also taken
//! from the engine's memory budget (admission.rs, shared by all the engine's fan-outs)
//! and given back when the consumer has read it, so open-ahead beside other transfers of
//! the same engine stays within one bound.
//!
//! The window follows the first-byte tail. The consumer takes objects in order, so one
//! slow first byte holds it however many objects behind it have arrived, and a fixed
//! window does not cover S3's tail; a larger fixed one would hold idle connections for
//! large objects, whose first bytes hide behind the body being read. So the window
//! starts at [`START_OPEN`] and grows, up to `max_open`, each time the consumer takes an
//! object whose response head has not arrived yet (the first object excepted). It grows
//! by the places it was short: a wait of W with the consumer taking an object every T
//! (smoothed over ~4 objects) means the object should have been opened W / T handovers
//! earlier, so the window grows by that, rounded up (one place at once, so the feeder
//! opens another during the wait, the rest when the wait is over). Objects whose reading
//! outlasts the next one's first byte never stall and keep 8. It never shrinks: stalls
//! are a property of the endpoint's tail.
//!
//! Idle streams: a server closes a response that is not read for a while (S3 answers
//! RequestTimeout after ~20 s of no progress; `ferry serve`'s `request_timeout` is also
//! 20 s), so a slot closes its stream itself after `idle_limit` without reading, and the
//! consumer transparently re-opens from the first byte not yet buffered, with `If-Match`
//! on the ETag so two versions are never mixed (a change in between is an
//! [`Error::Precondition`] in the body). After a re-open, the bytes are checked by length
//! and ETag, no longer by the whole object's checksum, which needs one response's bytes.
//!
//! Errors come in order: the n-th item is the n-th object's, a failed open does not stop
//! the objects after it. The measurements behind the window's rule and its constants are
//! in docs/lab/engine-open-ahead.md.

use crate::admission::Engine;
use crate::admission::{BudgetPermit, ByteBudget};
use bytes::Bytes;
use ferry_store::{Error, GetParams, ObjectBody, ObjectInfo, ObjectRef, RangeSpec};
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use std::collections::VecDeque;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Options of [`OpenAhead`].
#[derive(Clone, Debug)]
pub struct OpenAheadOptions {
    /// Most objects opened ahead of the one the consumer reads: the window starts at
    /// [`START_OPEN`] (or this, if smaller) and grows to it only while the consumer
    /// still waits for first bytes (module note). 32: enough for S3's first-byte tail
    /// behind 640 KB objects (a simulated window of 32 reads them at 4.6 ms each, faster
    /// than one connection carries them); within the client's default 50 connections.
    /// Re-measured with `ferry bench open-ahead --quick` (docs/lab/engine-open-ahead.md).
    pub max_open: usize,
    /// Bytes read ahead in total, shared equally among the open slots and the object
    /// being read. 64 MiB: ~7 MiB each with the starting 8 slots, about one cost-optimal
    /// S3 request (8 MiB) per object; 2 MiB each at a window of 32.
    pub max_buffered: u64,
    /// A slot's stream not read for this long is closed and re-opened when needed
    /// (module note).
    pub idle_limit: Duration,
}

impl Default for OpenAheadOptions {
    fn default() -> Self {
        OpenAheadOptions { max_open: 32, max_buffered: 64 * 1024 * 1024, idle_limit: Duration::from_secs(10) }
    }
}

/// The window a reader starts with. 8: on S3 (first byte ~30 ms, 90 MB/s per connection,
/// docs/lab/store-s3-facts.md) a 640 KB object takes ~7 ms to transfer, so about 5
/// objects must be in their first byte at any time to keep one connection's worth of
/// bytes flowing; 8 leaves room for part of the first-byte tail, and the window grows for
/// the rest (module note). Re-measured with `ferry bench open-ahead --quick`
/// (docs/lab/engine-open-ahead.md).
pub const START_OPEN: usize = 8;

/// Counters of an [`OpenAhead`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenAheadStats {
    /// Objects opened (one GET each).
    pub opened: u64,
    /// Streams closed after `idle_limit` without reading.
    pub idle_closes: u64,
    /// Re-opening GETs (ranged, If-Match).
    pub reopened: u64,
    /// Most slots open ahead at once.
    pub peak_open: u64,
    /// The window now: objects that may be opened ahead (module note).
    pub window: u64,
    /// Times the consumer took an object whose response head had not arrived (the
    /// first object not counted).
    pub stalls: u64,
    /// Bytes read ahead now, and the most at once.
    pub buffered: u64,
    pub peak_buffered: u64,
    /// The largest chunk read ahead (the bound's slack, module note).
    pub largest_chunk: u64,
}

#[derive(Default)]
struct Counters {
    opened: AtomicU64,
    idle_closes: AtomicU64,
    reopened: AtomicU64,
    open: AtomicU64,
    peak_open: AtomicU64,
    stalls: AtomicU64,
    buffered: AtomicU64,
    peak_buffered: AtomicU64,
    largest_chunk: AtomicU64,
}

impl Counters {
    fn add_buffered(&self, n: u64) {
        let now = self.buffered.fetch_add(n, Relaxed) + n;
        self.peak_buffered.fetch_max(now, Relaxed);
        self.largest_chunk.fetch_max(n, Relaxed);
    }
}

/// One object, handed to the consumer.
pub struct OpenedObject {
    pub object: ObjectRef,
    pub meta: ObjectInfo,
    /// The object's bytes in order; ends with an error if anything went wrong.
    pub body: BoxStream<'static, Result<Bytes, Error>>,
}

impl OpenedObject {
    /// The whole body in memory (small objects, tests).
    pub async fn collect(self) -> Result<Bytes, Error> {
        self.collect_with(&crate::download::FreshVec).await
    }

    /// The whole body in memory the allocator gives: room for the announced size, then
    /// each chunk appended in order.
    pub async fn collect_with(mut self, alloc: &dyn crate::download::Allocator) -> Result<Bytes, Error> {
        let (mut out, _touched) = alloc.take(self.meta.size as usize);
        while let Some(c) = self.body.next().await {
            out.extend_from_slice(&c?);
        }
        Ok(alloc.seal(out))
    }
}

impl std::fmt::Debug for OpenedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedObject").field("object", &self.object).field("meta", &self.meta).finish()
    }
}

/// Reads objects in order, opening the next ones in the background (module note).
///
/// ```no_run
/// # async fn example(engine: &ferry_engine::Engine) -> Result<(), ferry_store::Error> {
/// use ferry_engine::openahead::{OpenAhead, OpenAheadOptions};
/// use futures_util::StreamExt;
/// let objects = (0..4_000).map(|i| ferry_store::ObjectRef::new("bucket", format!("scan/{i:05}.orc"))).collect();
/// let mut reader = OpenAhead::from_list(engine, objects, OpenAheadOptions::default());
/// while let Some(opened) = reader.next().await {
///     let mut opened = opened?;
///     while let Some(chunk) = opened.body.next().await {
///         let _bytes = chunk?;
///     }
/// }
/// println!("{:?}", reader.stats());
/// # Ok(()) }
/// ```
pub struct OpenAhead {
    engine: Engine,
    /// The objects, until the feeder takes them.
    input: Option<BoxStream<'static, ObjectRef>>,
    /// Slots opened by the feeder, in order.
    slots: Option<mpsc::UnboundedReceiver<Slot>>,
    feeder: Option<JoinHandle<()>>,
    /// Set when the feeder starts.
    window: Option<Arc<Window>>,
    /// Objects handed to the consumer so far.
    taken: u64,
    /// When the last object was handed over, and the consumer's time per object (from
    /// the handover to its next `next()`), smoothed: a stall's wait in objects.
    handed_at: Option<Instant>,
    per_object: Option<Duration>,
    opts: OpenAheadOptions,
    counters: Arc<Counters>,
}

struct Slot {
    object: ObjectRef,
    /// Set by the slot's task once the GET's response head has arrived.
    headed: Arc<AtomicBool>,
    take: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<Prefetched, Error>>,
    /// One of the `max_open` places ahead of the consumer, freed when the consumer
    /// takes the object.
    room: Option<OwnedSemaphorePermit>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a slot hands over.
struct Prefetched {
    meta: ObjectInfo,
    chunks: VecDeque<Bytes>,
    /// Bytes in `chunks`.
    buffered: u64,
    tail: Tail,
    /// The slot's part, taken from the reader's read-ahead budget and the client's
    /// memory budget; given back once the consumer has read `chunks`. `None` when the
    /// consumer took the slot before the budgets had room (it then reads the stream
    /// live, nothing buffered).
    bytes: Option<(BudgetPermit, BudgetPermit)>,
}

enum Tail {
    /// The body ended (and was verified).
    Done,
    /// The rest streams from the open response.
    Live(ObjectBody),
    /// The stream was closed while idle: re-open from `chunks`' end.
    Reopen,
    Failed(Error),
}

impl OpenAhead {
    /// Reads `objects` in order. Inside a Tokio runtime the first objects are opened at
    /// once; otherwise on the first [`OpenAhead::next`].
    pub fn new<S>(engine: &Engine, objects: S, opts: OpenAheadOptions) -> OpenAhead
    where
        S: Stream<Item = ObjectRef> + Send + 'static,
    {
        let mut me = OpenAhead {
            engine: engine.clone(),
            input: Some(objects.boxed()),
            slots: None,
            feeder: None,
            window: None,
            taken: 0,
            handed_at: None,
            per_object: None,
            opts,
            counters: Arc::default(),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            me.start();
        }
        me
    }

    pub fn from_list(engine: &Engine, objects: Vec<ObjectRef>, opts: OpenAheadOptions) -> OpenAhead {
        OpenAhead::new(engine, stream::iter(objects), opts)
    }

    pub fn stats(&self) -> OpenAheadStats {
        let c = &self.counters;
        OpenAheadStats {
            opened: c.opened.load(Relaxed),
            idle_closes: c.idle_closes.load(Relaxed),
            reopened: c.reopened.load(Relaxed),
            peak_open: c.peak_open.load(Relaxed),
            window: self.window.as_ref().map_or(0, |w| w.size.load(Relaxed)),
            stalls: c.stalls.load(Relaxed),
            buffered: c.buffered.load(Relaxed),
            peak_buffered: c.peak_buffered.load(Relaxed),
            largest_chunk: c.largest_chunk.load(Relaxed),
        }
    }

    /// The next object, `None` after the last.
    pub async fn next(&mut self) -> Option<Result<OpenedObject, Error>> {
        self.start();
        if let Some(at) = self.handed_at.take() {
            self.per_object = Some(smooth(self.per_object, at.elapsed()));
        }
        let mut slot = self.slots.as_mut()?.recv().await?;
        self.counters.open.fetch_sub(1, Relaxed);
        let first = self.taken == 0;
        self.taken += 1;
        let stalled = !slot.headed.load(Acquire) && !first;
        if stalled {
            // The consumer is about to wait for a first byte that opening ahead could
            // have hidden (the first object's never could): widen the window now, so
            // the feeder opens one more while the consumer waits, and by the rest of the
            // wait once it is known (below).
            self.counters.stalls.fetch_add(1, Relaxed);
            if let Some(w) = &self.window {
                w.grow(1);
            }
        }
        // Free its place ahead: the feeder opens the next object while this one is read.
        drop(slot.room.take());
        if let Some(take) = slot.take.take() {
            let _ = take.send(());
        }
        let waited = Instant::now();
        let joined = (&mut slot.task).await;
        if stalled {
            if let (Some(w), Some(per_object)) = (&self.window, self.per_object) {
                w.grow(places_short(waited.elapsed(), per_object).saturating_sub(1));
            }
            if let Some(w) = &self.window {
                self.engine.controller().start_at(w.size.load(Relaxed) as usize + 1);
            }
        }
        self.handed_at = Some(Instant::now());
        let pre = match joined {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => return Some(Err(e)),
            Err(e) => return Some(Err(Error::Config(format!("open-ahead task for {} failed: {e}", slot.object)))),
        };
        Some(Ok(self.hand_over(slot.object.clone(), pre)))
    }

    /// The objects as a stream.
    pub fn into_stream(self) -> BoxStream<'static, Result<OpenedObject, Error>> {
        stream::unfold(self, |mut me| async move { me.next().await.map(|item| (item, me)) }).boxed()
    }

    /// Starts the feeder: it takes objects from the input as places ahead free up, and
    /// opens each in a slot of its own, independently of the consumer's pace (a slow
    /// input, such as a listing, never delays a handover).
    fn start(&mut self) {
        let Some(mut input) = self.input.take() else { return };
        let (tx, rx) = mpsc::unbounded_channel();
        let window = Window::new(&self.opts);
        self.window = Some(window.clone());
        // The window is the reader's demand (its objects ahead and the consumer's own):
        // the endpoint's controller starts there, and follows each growth (`next`),
        // rather than climbing from its initial 4 (`Controller::start_at`: only in its
        // first slow start, so a throttled endpoint's finding stands).
        self.engine.controller().start_at(window.size.load(Relaxed) as usize + 1);
        let (engine, idle_limit, counters) = (self.engine.clone(), self.opts.idle_limit, self.counters.clone());
        self.feeder = Some(tokio::spawn(async move {
            loop {
                let Ok(permit) = window.room.clone().acquire_owned().await else { return };
                let Some(object) = input.next().await else { return };
                let (take_tx, take_rx) = oneshot::channel();
                let headed = Arc::new(AtomicBool::new(false));
                let task = tokio::spawn(prefetch(
                    engine.clone(),
                    object.clone(),
                    window.clone(),
                    idle_limit,
                    take_rx,
                    headed.clone(),
                    counters.clone(),
                ));
                counters.opened.fetch_add(1, Relaxed);
                let open = counters.open.fetch_add(1, Relaxed) + 1;
                counters.peak_open.fetch_max(open, Relaxed);
                if tx.send(Slot { object, headed, take: Some(take_tx), task, room: Some(permit) }).is_err() {
                    return; // the reader is gone
                }
            }
        }));
        self.slots = Some(rx);
    }

    fn hand_over(&self, object: ObjectRef, pre: Prefetched) -> OpenedObject {
        let counters = self.counters.clone();
        let buffered = pre.buffered;
        // The budget permit goes with the buffered chunks: `chain` drops the head stream
        // (and this closure) once it is read out, which frees the bytes.
        let permit = pre.bytes;
        let head = stream::iter(pre.chunks).map(move |c| {
            let _held = &permit;
            counters.buffered.fetch_sub(c.len() as u64, Relaxed);
            Ok(c)
        });
        let tail: BoxStream<'static, Result<Bytes, Error>> = match pre.tail {
            Tail::Done => stream::empty().boxed(),
            Tail::Live(body) => body.boxed(),
            Tail::Failed(e) => stream::once(async move { Err(e) }).boxed(),
            Tail::Reopen => {
                let (engine, object, meta, counters) =
                    (self.engine.clone(), object.clone(), pre.meta.clone(), self.counters.clone());
                stream::once(async move { reopen(&engine, &object, &meta, buffered, &counters).await })
                    .flat_map(|r| match r {
                        Ok(body) => body.boxed(),
                        Err(e) => stream::once(async move { Err(e) }).boxed(),
                    })
                    .boxed()
            }
        };
        OpenedObject { object, meta: pre.meta, body: head.chain(tail).boxed() }
    }
}

impl Drop for OpenAhead {
    fn drop(&mut self) {
        // Slots still queued abort their tasks as the channel drops them.
        if let Some(f) = self.feeder.take() {
            f.abort();
        }
    }
}

/// How many objects may be opened ahead, and each slot's part of the read-ahead.
struct Window {
    /// One permit per place ahead; grown by adding permits.
    room: Arc<Semaphore>,
    size: AtomicU64,
    max: u64,
    max_buffered: u64,
    /// The reader's own read-ahead budget: the parts of all slots, old and new.
    bytes: Arc<ByteBudget>,
}

impl Window {
    fn new(opts: &OpenAheadOptions) -> Arc<Window> {
        let max = opts.max_open.max(1);
        let start = START_OPEN.min(max);
        Arc::new(Window {
            room: Arc::new(Semaphore::new(start)),
            size: AtomicU64::new(start as u64),
            max: max as u64,
            max_buffered: opts.max_buffered,
            bytes: ByteBudget::new(opts.max_buffered),
        })
    }

    /// A slot's part of the read-ahead at the current window.
    fn quota(&self) -> u64 {
        self.max_buffered / (self.size.load(Relaxed) + 1)
    }

    /// `n` more places ahead, up to the cap.
    fn grow(&self, n: u64) {
        if let Ok(was) = self
            .size
            .fetch_update(Relaxed, Relaxed, |size| (n > 0 && size < self.max).then_some((size + n).min(self.max)))
        {
            self.room.add_permits(((was + n).min(self.max) - was) as usize);
        }
    }
}

/// The consumer's time per object, smoothed over about the last four objects (one slow
/// object, such as the first one's, moves it only a quarter of the way).
fn smooth(was: Option<Duration>, sample: Duration) -> Duration {
    match was {
        None => sample,
        Some(w) => (w * 3 + sample) / 4,
    }
}

/// How many more objects should have been opened ahead to hide a wait of `waited` at
/// `per_object` each: the object waited for would have been opened that many handovers
/// earlier (module note). At least one; the window's cap bounds the rest.
fn places_short(waited: Duration, per_object: Duration) -> u64 {
    let per_object = per_object.max(MIN_PER_OBJECT).as_nanos();
    (waited.as_nanos().div_ceil(per_object) as u64).max(1)
}

/// Floor of the consumer's time per object in [`places_short`], so that the division
/// holds for a consumer that takes buffered objects in no measurable time (any wait then
/// asks for the whole cap, which is what such a consumer needs).
const MIN_PER_OBJECT: Duration = Duration::from_micros(50);

/// The rest of an object from `from`, pinned to the ETag first seen.
async fn reopen(
    engine: &Engine,
    object: &ObjectRef,
    meta: &ObjectInfo,
    from: u64,
    counters: &Counters,
) -> Result<BoxStream<'static, Result<Bytes, Error>>, Error> {
    if from >= meta.size {
        return Ok(stream::empty().boxed());
    }
    let Some(etag) = meta.etag.clone() else {
        return Err(Error::Protocol {
            message: format!("{object} has no ETag: its stream cannot be re-opened safely"),
            request_id: None,
        });
    };
    counters.reopened.fetch_add(1, Relaxed);
    let params = GetParams {
        range: Some(RangeSpec::From(from)),
        if_match: Some(etag),
        checksum_mode: false,
        ..GetParams::default()
    };
    let out = engine.get(object, params).await?;
    if out.range.map(|(s, _)| s) != Some(from) {
        return Err(Error::Protocol {
            message: format!("re-opening {object} at byte {from} got range {:?}", out.range),
            request_id: None,
        });
    }
    Ok(out.body.boxed())
}

/// A slot: open, read ahead up to `quota`, hold until taken or idle (module diagram).
async fn prefetch(
    engine: Engine,
    object: ObjectRef,
    window: Arc<Window>,
    idle_limit: Duration,
    mut take: oneshot::Receiver<()>,
    headed: Arc<AtomicBool>,
    counters: Arc<Counters>,
) -> Result<Prefetched, Error> {
    let out = engine.get(&object, GetParams::default()).await;
    headed.store(true, Release);
    let out = out?;
    // The read-ahead is bytes in flight of the engine's budget (admission.rs),
    // shared with every other fan-out: the slot takes what it may buffer (its quota, or
    // the object if smaller) before reading, from the reader's own read-ahead budget
    // first. Waiting for room, it keeps the stream unread like a full slot: taken
    // meanwhile, the consumer reads it live (so the front object never waits for bytes
    // that later slots hold); idle too long, closed.
    let quota = window.quota();
    let part = quota.min(out.meta.size);
    let both = async {
        let own = window.bytes.acquire(part).await;
        (own, engine.admission().bytes(part).await)
    };
    let permit = tokio::select! {
        biased;
        p = both => Some(p),
        _ = &mut take => None,
        _ = tokio::time::sleep(idle_limit) => {
            counters.idle_closes.fetch_add(1, Relaxed);
            return Ok(Prefetched { meta: out.meta, chunks: VecDeque::new(), buffered: 0, tail: Tail::Reopen, bytes: None });
        }
    };
    let Some(permit) = permit else {
        return Ok(Prefetched {
            meta: out.meta,
            chunks: VecDeque::new(),
            buffered: 0,
            tail: Tail::Live(out.body),
            bytes: None,
        });
    };
    let mut pre =
        Prefetched { meta: out.meta, chunks: VecDeque::new(), buffered: 0, tail: Tail::Done, bytes: Some(permit) };
    let mut body = out.body;
    let mut last_read = Instant::now();
    loop {
        if pre.buffered < quota {
            tokio::select! {
                biased;
                _ = &mut take => {
                    pre.tail = Tail::Live(body);
                    break;
                }
                chunk = body.next() => match chunk {
                    Some(Ok(c)) => {
                        counters.add_buffered(c.len() as u64);
                        pre.buffered += c.len() as u64;
                        pre.chunks.push_back(c);
                        last_read = Instant::now();
                    }
                    Some(Err(e)) => {
                        pre.tail = Tail::Failed(e);
                        break;
                    }
                    None => break,
                },
            }
        } else {
            tokio::select! {
                biased;
                _ = &mut take => {
                    pre.tail = Tail::Live(body);
                    break;
                }
                _ = tokio::time::sleep_until(last_read + idle_limit) => {
                    counters.idle_closes.fetch_add(1, Relaxed);
                    drop(body);
                    pre.tail = Tail::Reopen;
                    break;
                }
            }
        }
    }
    Ok(pre)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_counted_in_the_consumers_objects() {
        let ms = Duration::from_millis;
        // 150 ms of first byte at 7 ms per object: 22 handovers too late.
        assert_eq!(places_short(ms(150), ms(7)), 22);
        assert_eq!(places_short(ms(14), ms(7)), 2);
        // Any wait asks for at least one place; a consumer too fast to measure asks for
        // many, within the floor's division.
        assert_eq!(places_short(Duration::ZERO, ms(7)), 1);
        assert_eq!(places_short(ms(1), ms(50)), 1);
        assert_eq!(places_short(ms(1), Duration::ZERO), 20);
    }

    #[test]
    fn the_consumers_pace_is_smoothed() {
        let ms = Duration::from_millis;
        assert_eq!(smooth(None, ms(40)), ms(40));
        assert_eq!(smooth(Some(ms(8)), ms(40)), ms(16));
    }

    #[test]
    fn the_window_grows_by_the_places_short_up_to_its_cap() {
        let w = Window::new(&OpenAheadOptions { max_open: 20, ..OpenAheadOptions::default() });
        assert_eq!(w.size.load(Relaxed), START_OPEN as u64);
        assert_eq!(w.room.available_permits(), START_OPEN);
        w.grow(0);
        assert_eq!(w.size.load(Relaxed), START_OPEN as u64);
        w.grow(5);
        assert_eq!((w.size.load(Relaxed), w.room.available_permits()), (13, 13));
        w.grow(100);
        assert_eq!((w.size.load(Relaxed), w.room.available_permits()), (20, 20));
        w.grow(1);
        assert_eq!((w.size.load(Relaxed), w.room.available_permits()), (20, 20));
    }
}
