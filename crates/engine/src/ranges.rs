//! Vectored reads: many small byte ranges of one object with as few GETs as pay off.
//! (Cutting a whole object into parts is the download's plan, download/plan.rs.)
//!
//! ```text
//! get_ranges(object, ranges)
//!   ranges (any order, duplicates, overlaps)
//!     └─ coalesce(ranges, policy) ─► Spans: disjoint, sorted, each <= max_span, holes < max_gap
//!          └─ first span: GET Range ─► its ETag
//!               └─ other spans: GET Range + If-Match: ETag, at most `concurrency` in flight,
//!                  each admitted for its length (admission.rs) while fetched
//!                    └─ the span's body streamed: only its requested bytes (`Span::keep`)
//!                       are copied into its buffer, the holes dropped as they arrive
//!                         └─ each requested range sliced (or stitched) out of its span(s),
//!                            returned in the order asked
//!   every completed GET feeds the GapEstimator (first byte time, bandwidth)
//! ```
//!
//! **Why coalesce.** A GET costs a round trip and a first byte (S3: p50 ~30 ms,
//! docs/lab/store-s3-facts.md) before any data flows; bytes on an open response flow at the connection's
//! rate (~90 MB/s on S3). Reading a hole of `g` bytes inside a span costs `g / bandwidth`;
//! a separate request costs about one first-byte time. So two ranges are worth merging
//! when the hole between them is below `first_byte x bandwidth` (the same rule AnyBlob
//! (VLDB 2023) and arrow's `object_store::coalesce_ranges` apply; object_store uses a
//! fixed 1 MiB). Here both factors are measured from completed GETs ([`GapEstimator`]).
//!
//! **The numbers.** Before anything is measured the estimator assumes 10 ms first byte
//! and 50 MB/s, i.e. a 500 KB gap: a third of S3's 30 ms and about half its 90 MB/s per
//! connection, so an unknown (possibly local, fast) endpoint is not flooded with
//! over-read; after the first GETs the measured figures take over (S3-like figures give
//! 30 ms x 90 MB/s = 2.7 MB). The gap is capped at 2 MiB ([`MAX_GAP_CAP`]), a quarter of
//! the 8 MiB default span: beyond that the holes would dominate the spans. A span is
//! capped at 8 MiB ([`DEFAULT_PART_SIZE`], the cost-optimal request size on S3 per
//! AnyBlob) so one span never serialises what could be fetched in parallel.
//!
//! **Holes are read, not kept.** A span's holes cross the wire, but its buffer holds only
//! the requested bytes: on a fast endpoint the gap grows past the ranges themselves (1,000
//! ranges of 4-64 KiB over 128 MiB against MinIO on loopback coalesce into 16 spans of the
//! whole object), and keeping the holes would copy and fault in four times the memory
//! asked for.
//!
//! **Consistency.** The first span's response gives the object's ETag and every other
//! span is fetched with `If-Match` on it, so the pieces always come from one version of
//! the object (a change in between is [`Error::Precondition`]). The caller may supply
//! the ETag (`RangesOptions::if_match`) to fetch all spans at once.
//!
//! Empty ranges (`start == end`) are answered with empty bytes and fetch nothing. A
//! range past the end of the object is an error (416 `InvalidRange`), never a short
//! answer.
//!
//! `cargo run --release -p ferry-engine --example sched_figures -- vectored` and `ferry
//! bench vectored` compare coalescing with merging only touching ranges
//! (docs/lab/engine-ranges.md has the figures).

use crate::admission::Engine;
use bytes::{Bytes, BytesMut};
use ferry_store::{Error, GetParams, ObjectRef, RangeSpec};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;

/// Default part size: 8 MiB, the low end of the cost-optimal request size on S3
/// (8-16 MiB, AnyBlob; docs/lab/store-s3-facts.md).
pub const DEFAULT_PART_SIZE: u64 = 8 * MIB;

/// Upper bound of the measured gap (module note): a quarter of the 8 MiB default span;
/// re-measured with `cargo run --release -p ferry-engine --example sched_figures --
/// vectored` (docs/lab/engine-ranges.md).
pub const MAX_GAP_CAP: u64 = 2 * MIB;

/// When requested ranges are merged into one span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoalescePolicy {
    /// Ranges whose hole (bytes between them that nobody asked for) is below this are
    /// fetched together. 0: only touching or overlapping ranges merge.
    pub max_gap: u64,
    /// No span is longer than this (at least 1; longer ranges are cut).
    pub max_span: u64,
}

impl Default for CoalescePolicy {
    fn default() -> Self {
        CoalescePolicy { max_gap: GapEstimator::new().max_gap(), max_span: DEFAULT_PART_SIZE }
    }
}

/// One GET's byte range and the requested ranges it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub range: Range<u64>,
    /// Indices into the requested ranges that overlap this span, ascending.
    pub serves: Vec<usize>,
    /// The requested bytes inside `range` (sorted, disjoint, not touching): what the
    /// span's buffer keeps, in this order, without the holes between them.
    pub keep: Vec<Range<u64>>,
}

impl Span {
    /// Bytes the span's buffer keeps.
    pub fn kept_len(&self) -> u64 {
        self.keep.iter().map(|k| k.end - k.start).sum()
    }

    /// Where each run of `keep` starts in the span's buffer: the lengths of the runs
    /// before it, summed. [`Span::kept_offset`] takes it, so that finding a byte costs a
    /// binary search, not a walk over every run before it (a span may keep thousands of
    /// small ranges, and each of them is looked up).
    fn run_offsets(&self) -> Vec<u64> {
        self.keep
            .iter()
            .scan(0, |at, k| {
                let start = *at;
                *at += k.end - k.start;
                Some(start)
            })
            .collect()
    }

    /// Where requested byte `b` of this span sits in its buffer; `offsets` is
    /// [`Span::run_offsets`].
    fn kept_offset(&self, offsets: &[u64], b: u64) -> usize {
        let j = self.keep.partition_point(|k| k.end <= b);
        let k = self.keep.get(j).unwrap_or_else(|| unreachable!("byte {b} is past {:?}", self.range));
        debug_assert!(b >= k.start, "byte {b} is in a hole of {:?}", self.range);
        (offsets[j] + b - k.start) as usize
    }
}

/// Merges requested ranges (any order; duplicates, overlaps and empty ranges allowed)
/// into spans: sorted, disjoint, covering every requested byte, each at most
/// `policy.max_span` long; inside a span every hole between requested bytes is shorter
/// than `policy.max_gap`; two consecutive spans closer than `max_gap` would together
/// exceed `max_span`. Empty ranges are served by no span.
///
/// ```
/// use ferry_engine::ranges::{coalesce, CoalescePolicy};
/// let spans = coalesce(&[100..200, 0..10, 150..160], &CoalescePolicy { max_gap: 64, max_span: 1 << 20 });
/// assert_eq!(spans.len(), 2);
/// assert_eq!((spans[0].range.clone(), spans[0].serves.clone()), (0..10, vec![1]));
/// assert_eq!((spans[1].range.clone(), spans[1].serves.clone()), (100..200, vec![0, 2]));
/// ```
pub fn coalesce(ranges: &[Range<u64>], policy: &CoalescePolicy) -> Vec<Span> {
    let max_span = policy.max_span.max(1);
    // 1. The union of the requested bytes, as sorted disjoint intervals.
    let mut sorted: Vec<Range<u64>> = ranges.iter().filter(|r| r.start < r.end).cloned().collect();
    sorted.sort_unstable_by_key(|r| (r.start, r.end));
    let mut union: Vec<Range<u64>> = Vec::new();
    for r in sorted {
        match union.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => union.push(r),
        }
    }
    // 2. Greedy spans over the union: extend while the hole is small and the span fits.
    let mut out: Vec<Span> = Vec::new();
    let span = |range: Range<u64>| Span { keep: vec![range.clone()], range, serves: Vec::new() };
    for piece in union {
        let mut piece = piece;
        if let Some(cur) = out.last_mut() {
            let hole = piece.start - cur.range.end;
            if hole < policy.max_gap && piece.end - cur.range.start <= max_span {
                cur.range.end = piece.end;
                match cur.keep.last_mut() {
                    // No hole: the union's pieces never touch, but a cut one continues.
                    Some(k) if k.end == piece.start => k.end = piece.end,
                    _ => cur.keep.push(piece),
                }
                continue;
            }
        }
        while piece.end - piece.start > max_span {
            out.push(span(piece.start..piece.start + max_span));
            piece.start += max_span;
        }
        out.push(span(piece));
    }
    // 3. Which requested ranges each span serves.
    for (i, r) in ranges.iter().enumerate() {
        if r.start >= r.end {
            continue;
        }
        let first = out.partition_point(|s| s.range.end <= r.start);
        for s in out[first..].iter_mut().take_while(|s| s.range.start < r.end) {
            s.serves.push(i);
        }
    }
    out
}

/// Cuts the bytes of each requested range out of the fetched spans (`data[i]` holds
/// the bytes of `spans[i].keep`, one after another): a slice when one span holds the
/// range, a copy when it straddles.
pub fn reassemble(ranges: &[Range<u64>], spans: &[Span], data: &[Bytes]) -> Vec<Bytes> {
    let offsets: Vec<Vec<u64>> = spans.iter().map(Span::run_offsets).collect();
    ranges
        .iter()
        .map(|r| {
            if r.start >= r.end {
                return Bytes::new();
            }
            let first = spans.partition_point(|s| s.range.end <= r.start);
            let s = &spans[first];
            // A range lies inside one piece of the union, so its bytes within a span are
            // one run of the span's buffer.
            if s.range.start <= r.start && r.end <= s.range.end {
                let at = s.kept_offset(&offsets[first], r.start);
                return data[first].slice(at..at + (r.end - r.start) as usize);
            }
            let mut out = BytesMut::with_capacity((r.end - r.start) as usize);
            let pieces = spans[first..].iter().zip(&data[first..]).zip(&offsets[first..]);
            for ((s, d), o) in pieces.take_while(|((s, _), _)| s.range.start < r.end) {
                let (from, to) = (r.start.max(s.range.start), r.end.min(s.range.end));
                let at = s.kept_offset(o, from);
                out.extend_from_slice(&d[at..at + (to - from) as usize]);
            }
            out.freeze()
        })
        .collect()
}

/// Estimates first-byte time and bandwidth from completed GETs, and from them the gap
/// worth reading through (module note). Shared by reference: one per endpoint.
#[derive(Debug)]
pub struct GapEstimator {
    state: Mutex<Estimates>,
}

#[derive(Clone, Copy, Debug)]
struct Estimates {
    first_byte: Duration,
    /// Bytes per second on one response.
    bandwidth: f64,
    samples: u64,
}

/// Assumed before any measurement (module note): a third of S3's first byte and about
/// half its per-connection rate, so an unknown endpoint is not flooded with over-read.
const PRIOR_FIRST_BYTE: Duration = Duration::from_millis(10);
const PRIOR_BANDWIDTH: f64 = 50e6;
/// Weight of a new sample in the moving averages: the last ~5 GETs dominate.
const EWMA_WEIGHT: f64 = 0.2;
/// Below this many bytes a transfer time says more about scheduling than bandwidth.
const MIN_BANDWIDTH_SAMPLE: u64 = 64 * 1024;

impl Default for GapEstimator {
    fn default() -> Self {
        GapEstimator::new()
    }
}

impl GapEstimator {
    pub fn new() -> GapEstimator {
        GapEstimator {
            state: Mutex::new(Estimates { first_byte: PRIOR_FIRST_BYTE, bandwidth: PRIOR_BANDWIDTH, samples: 0 }),
        }
    }

    /// Records one completed GET: time to the response head, then `bytes` of body read
    /// in `transfer`.
    pub fn record(&self, first_byte: Duration, bytes: u64, transfer: Duration) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let w = if s.samples == 0 { 1.0 } else { EWMA_WEIGHT };
        s.first_byte = Duration::from_secs_f64(s.first_byte.as_secs_f64() * (1.0 - w) + first_byte.as_secs_f64() * w);
        if bytes >= MIN_BANDWIDTH_SAMPLE && !transfer.is_zero() {
            let bw = bytes as f64 / transfer.as_secs_f64();
            s.bandwidth = if s.samples == 0 { bw } else { s.bandwidth * (1.0 - EWMA_WEIGHT) + bw * EWMA_WEIGHT };
        }
        s.samples += 1;
    }

    /// `(first byte, bytes per second, GETs recorded)`.
    pub fn estimates(&self) -> (Duration, f64, u64) {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.first_byte, s.bandwidth, s.samples)
    }

    /// `first byte x bandwidth`, capped at [`MAX_GAP_CAP`].
    pub fn max_gap(&self) -> u64 {
        let (fb, bw, _) = self.estimates();
        ((fb.as_secs_f64() * bw) as u64).min(MAX_GAP_CAP)
    }

    /// The policy for spans of at most `max_span` bytes.
    pub fn policy(&self, max_span: u64) -> CoalescePolicy {
        CoalescePolicy { max_gap: self.max_gap().min(max_span), max_span }
    }
}

/// Options of [`get_ranges`].
#[derive(Clone, Debug)]
pub struct RangesOptions {
    /// `None`: the policy follows the estimator (gap = first byte x bandwidth).
    pub policy: Option<CoalescePolicy>,
    /// Longest span when the policy comes from the estimator.
    pub max_span: u64,
    /// Measurements shared across calls (one estimator per endpoint is best).
    pub estimator: Arc<GapEstimator>,
    /// Spans fetched at once. 16: enough to hide S3's first byte behind transfers of
    /// typical metadata spans while staying well under the SDKs' 50-connection pools.
    pub concurrency: usize,
    /// The ETag every span must match; `None`: the first span's.
    pub if_match: Option<String>,
}

impl Default for RangesOptions {
    fn default() -> Self {
        RangesOptions {
            policy: None,
            max_span: DEFAULT_PART_SIZE,
            estimator: Arc::new(GapEstimator::new()),
            concurrency: 16,
            if_match: None,
        }
    }
}

/// Counters of one [`get_ranges`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangesStats {
    /// GETs issued (one per span; the client's own retries are not counted).
    pub requests: u64,
    /// Sum of the requested ranges' lengths (duplicates counted each time).
    pub bytes_requested: u64,
    /// Bytes received in span bodies.
    pub bytes_fetched: u64,
    /// Fetched bytes that no requested range covers (the holes read through).
    pub over_read: u64,
}

/// What [`get_ranges`] returns.
#[derive(Clone, Debug)]
pub struct RangesOutput {
    /// `parts[i]` holds exactly the bytes of `ranges[i]`.
    pub parts: Vec<Bytes>,
    pub stats: RangesStats,
    /// The ETag all spans matched (`None` when nothing was fetched).
    pub etag: Option<String>,
}

/// Reads `ranges` (half-open byte ranges of `object`, any order) with coalesced,
/// concurrent GETs; returns exactly the bytes asked for, in the order asked.
///
/// ```no_run
/// # async fn example(engine: &ferry_engine::Engine) -> Result<(), ferry_store::Error> {
/// use ferry_engine::ranges::{get_ranges, RangesOptions};
/// let object = ferry_store::ObjectRef::new("bucket", "table.hfile");
/// let out = get_ranges(engine, &object, &[4096..8192, 0..64, 1_000_000..1_000_100], &RangesOptions::default()).await?;
/// assert_eq!(out.parts[1].len(), 64);
/// println!("{} GETs, {} bytes over-read", out.stats.requests, out.stats.over_read);
/// # Ok(()) }
/// ```
pub async fn get_ranges(
    engine: &Engine,
    object: &ObjectRef,
    ranges: &[Range<u64>],
    opts: &RangesOptions,
) -> Result<RangesOutput, Error> {
    let policy = opts.policy.unwrap_or_else(|| opts.estimator.policy(opts.max_span.max(1)));
    let spans = coalesce(ranges, &policy);
    let mut stats = RangesStats {
        bytes_requested: ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum(),
        ..RangesStats::default()
    };
    if spans.is_empty() {
        return Ok(RangesOutput { parts: ranges.iter().map(|_| Bytes::new()).collect(), stats, etag: None });
    }
    let mut data: Vec<Bytes> = Vec::with_capacity(spans.len());
    let mut etag = opts.if_match.clone();
    let mut rest = 0;
    if etag.is_none() {
        let _ticket = engine.admission().admit(spans[0].range.end - spans[0].range.start).await;
        let (bytes, tag) = fetch_span(engine, object, &spans[0], None, &opts.estimator).await?;
        data.push(bytes);
        etag = tag;
        rest = 1;
        if etag.is_none() {
            return Err(Error::Protocol {
                message: format!("GET {object} answered without an ETag: the spans cannot be tied to one version"),
                request_id: None,
            });
        }
    }
    // Unordered: a slow span must not hold back the start of the ones after it.
    // `opts.concurrency` is a cap; below it, the endpoint's controller decides, starting
    // from the spans this call has in flight at once: a batch of spans is known demand,
    // which slow start from its initial 4 would only delay (Controller::start_at; once
    // the endpoint has throttled or slowed, that does nothing).
    // Each span is admitted (its bytes, then a place: admission.rs) while it is fetched;
    // the bytes handed back are the caller's.
    // The futures are made from span numbers by an `async fn`: a closure taking a
    // borrowed span (`iter().map(|s| ...)`) is one the compiler cannot prove `Send` for
    // every lifetime, and `get_ranges` must be `Send` to be spawned (lib.rs checks it).
    engine.controller().start_at((spans.len() - rest).min(opts.concurrency.max(1)));
    let fetches =
        (rest..spans.len()).map(|i| admitted_span(engine, object, i - rest, &spans[i], etag.clone(), &opts.estimator));
    let mut fetched: Vec<(usize, Bytes)> =
        stream::iter(fetches).buffer_unordered(opts.concurrency.max(1)).try_collect().await?;
    fetched.sort_unstable_by_key(|(i, _)| *i);
    data.extend(fetched.into_iter().map(|(_, b)| b));
    stats.requests = spans.len() as u64;
    // Every span was read whole (fetch_span checks its length), holes included.
    stats.bytes_fetched = spans.iter().map(|s| s.range.end - s.range.start).sum();
    let wanted: u64 = union_len(ranges);
    stats.over_read = stats.bytes_fetched - wanted;
    Ok(RangesOutput { parts: reassemble(ranges, &spans, &data), stats, etag })
}

/// Bytes covered by at least one range.
fn union_len(ranges: &[Range<u64>]) -> u64 {
    let mut sorted: Vec<&Range<u64>> = ranges.iter().filter(|r| r.start < r.end).collect();
    sorted.sort_unstable_by_key(|r| r.start);
    let (mut total, mut reach) = (0u64, 0u64);
    for r in sorted {
        let from = r.start.max(reach);
        if r.end > from {
            total += r.end - from;
            reach = r.end;
        }
    }
    total
}

/// Span `i`, admitted for its length (admission.rs) while it is fetched: `(i, bytes)`.
async fn admitted_span(
    engine: &Engine,
    object: &ObjectRef,
    i: usize,
    span: &Span,
    etag: Option<String>,
    estimator: &GapEstimator,
) -> Result<(usize, Bytes), Error> {
    let _ticket = engine.admission().admit(span.range.end - span.range.start).await;
    fetch_span(engine, object, span, etag, estimator).await.map(|(b, _)| (i, b))
}

/// One span's GET: the bytes of its `keep` (the holes read and dropped) and the ETag,
/// recorded in the estimator.
async fn fetch_span(
    engine: &Engine,
    object: &ObjectRef,
    span: &Span,
    if_match: Option<String>,
    estimator: &GapEstimator,
) -> Result<(Bytes, Option<String>), Error> {
    let range = &span.range;
    let params = GetParams {
        range: Some(RangeSpec::FromTo(range.start, range.end - 1)),
        if_match,
        // A ranged body cannot be checked against the object's checksum; its length is.
        checksum_mode: false,
        ..GetParams::default()
    };
    let t0 = Instant::now();
    let out = engine.get(object, params).await?;
    let first_byte = t0.elapsed();
    let etag = out.meta.etag.clone();
    let size = out.meta.size;
    let got = out.range;
    let want = range.end - range.start;
    let (bytes, read) = keep_only(out.body, span).await?;
    estimator.record(first_byte, read, t0.elapsed().saturating_sub(first_byte));
    if got.map(|(s, _)| s) != Some(range.start) || read != want {
        return Err(Error::Service {
            status: 416,
            code: "InvalidRange".into(),
            message: format!(
                "bytes {}-{} of {object} were asked, {} bytes came back (the object has {size} bytes)",
                range.start,
                range.end - 1,
                read
            ),
            request_id: None,
        });
    }
    Ok((bytes, etag))
}

/// Reads `span`'s body, copying only the bytes inside its `keep` into one buffer (all of
/// it when the span has no hole); returns the buffer and the bytes read.
async fn keep_only(
    mut body: impl futures_util::Stream<Item = Result<Bytes, Error>> + Unpin,
    span: &Span,
) -> Result<(Bytes, u64), Error> {
    let (start, keep) = (span.range.start, &span.keep);
    let mut out = Vec::with_capacity(span.kept_len() as usize);
    let (mut pos, mut k) = (start, 0);
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        let end = pos + chunk.len() as u64;
        while k < keep.len() && keep[k].start < end {
            let (from, to) = (keep[k].start.max(pos), keep[k].end.min(end));
            if from < to {
                out.extend_from_slice(&chunk[(from - pos) as usize..(to - pos) as usize]);
            }
            if keep[k].end > end {
                break;
            }
            k += 1;
        }
        pos = end;
    }
    Ok((Bytes::from(out), pos - start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check_spans(ranges: &[Range<u64>], policy: &CoalescePolicy, spans: &[Span]) -> Result<(), TestCaseError> {
        let max_span = policy.max_span.max(1);
        for w in spans.windows(2) {
            prop_assert!(w[0].range.end <= w[1].range.start, "overlap or disorder: {:?}", w);
            let hole = w[1].range.start - w[0].range.end;
            if hole < policy.max_gap {
                prop_assert!(w[1].range.end - w[0].range.start > max_span, "mergeable spans left apart: {:?}", w);
            }
        }
        let covered = |b: u64| ranges.iter().any(|r| r.start <= b && b < r.end);
        for s in spans {
            prop_assert!(s.range.start < s.range.end);
            prop_assert!(s.range.end - s.range.start <= max_span);
            // Spans start and end on requested bytes; holes inside are below max_gap.
            prop_assert!(covered(s.range.start) && covered(s.range.end - 1));
            let mut hole = 0;
            for b in s.range.clone() {
                if covered(b) {
                    hole = 0;
                } else {
                    hole += 1;
                    prop_assert!(hole < policy.max_gap, "hole of {} in {:?}", hole, s.range);
                }
            }
            for &i in &s.serves {
                let r = &ranges[i];
                prop_assert!(r.start < s.range.end && s.range.start < r.end);
            }
            // What the span keeps is exactly its requested bytes, in order, in runs
            // separated by holes.
            prop_assert!(s.keep.windows(2).all(|w| w[0].end < w[1].start), "{:?}", s.keep);
            let kept: Vec<u64> = s.keep.iter().flat_map(|k| k.clone()).collect();
            let wanted: Vec<u64> = s.range.clone().filter(|&b| covered(b)).collect();
            prop_assert_eq!(kept, wanted);
        }
        // Every requested byte is in exactly one span, and the span lists its range.
        for (i, r) in ranges.iter().enumerate() {
            for b in r.clone() {
                let holders: Vec<&Span> = spans.iter().filter(|s| s.range.contains(&b)).collect();
                prop_assert_eq!(holders.len(), 1);
                prop_assert!(holders[0].serves.contains(&i));
            }
        }
        Ok(())
    }

    fn ranges_strategy() -> impl Strategy<Value = Vec<Range<u64>>> {
        prop::collection::vec((0u64..2000, 0u64..150), 0..40)
            .prop_map(|v| v.into_iter().map(|(s, l)| s..s + l).collect())
    }

    proptest! {
        #[test]
        fn coalesce_covers_exactly_and_respects_limits(ranges in ranges_strategy(), max_gap in 0u64..300, max_span in 1u64..600) {
            let policy = CoalescePolicy { max_gap, max_span };
            let spans = coalesce(&ranges, &policy);
            check_spans(&ranges, &policy, &spans)?;
        }

        #[test]
        fn reassembly_is_byte_identical(ranges in ranges_strategy(), max_gap in 0u64..300, max_span in 1u64..600) {
            let object: Vec<u8> = (0..2200u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
            let spans = coalesce(&ranges, &CoalescePolicy { max_gap, max_span });
            let data: Vec<Bytes> = spans
                .iter()
                .map(|s| Bytes::from(s.keep.iter().flat_map(|k| object[k.start as usize..k.end as usize].to_vec()).collect::<Vec<u8>>()))
                .collect();
            let parts = reassemble(&ranges, &spans, &data);
            prop_assert_eq!(parts.len(), ranges.len());
            for (r, p) in ranges.iter().zip(&parts) {
                prop_assert_eq!(&p[..], &object[r.start as usize..r.end as usize]);
            }
        }
    }

    proptest! {
        /// A span's body in chunks cut anywhere: `keep_only` copies exactly the kept bytes
        /// and counts every byte read.
        #[test]
        fn keep_only_keeps_the_requested_bytes(ranges in ranges_strategy(), max_gap in 0u64..300, cuts in prop::collection::vec(1usize..97, 1..40)) {
            let object: Vec<u8> = (0..2200u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
            for s in coalesce(&ranges, &CoalescePolicy { max_gap, max_span: 600 }) {
                let body = &object[s.range.start as usize..s.range.end as usize];
                let mut chunks = Vec::new();
                let (mut at, mut c) = (0, 0);
                while at < body.len() {
                    let n = cuts[c % cuts.len()].min(body.len() - at);
                    chunks.push(Ok(Bytes::copy_from_slice(&body[at..at + n])));
                    at += n;
                    c += 1;
                }
                let (kept, read) = futures_util::FutureExt::now_or_never(keep_only(stream::iter(chunks), &s))
                    .expect("a stream of ready chunks never waits")
                    .unwrap();
                let want: Vec<u8> = s.keep.iter().flat_map(|k| object[k.start as usize..k.end as usize].to_vec()).collect();
                prop_assert_eq!(&kept[..], &want[..]);
                prop_assert_eq!(read, s.range.end - s.range.start);
                prop_assert_eq!(kept.len() as u64, s.kept_len());
            }
        }
    }

    #[test]
    fn estimator_moves_towards_measurements_and_is_capped() {
        let e = GapEstimator::new();
        assert_eq!(e.max_gap(), (PRIOR_FIRST_BYTE.as_secs_f64() * PRIOR_BANDWIDTH) as u64);
        // 30 ms first byte, 9 MB in 100 ms = 90 MB/s: 2.7 MB, above the cap.
        e.record(Duration::from_millis(30), 9_000_000, Duration::from_millis(100));
        assert_eq!(e.max_gap(), MAX_GAP_CAP);
        // A fast local endpoint: the gap shrinks towards 0.2 ms x 1 GB/s = 200 KB.
        for _ in 0..60 {
            e.record(Duration::from_micros(200), 10_000_000, Duration::from_millis(10));
        }
        let g = e.max_gap();
        assert!((150_000..300_000).contains(&g), "{g}");
        // Tiny bodies do not count as bandwidth samples.
        let before = e.estimates().1;
        e.record(Duration::from_micros(200), 10, Duration::from_nanos(1));
        assert_eq!(e.estimates().1, before);
    }

    #[test]
    fn frozen_edge_cases() {
        // A range longer than max_span is cut; a duplicate range is served by both spans.
        let p = CoalescePolicy { max_gap: 0, max_span: 10 };
        let spans = coalesce(&[0..25, 0..25, 30..31], &p);
        let got: Vec<_> = spans.iter().map(|s| (s.range.clone(), s.serves.clone())).collect();
        assert_eq!(got, vec![(0..10, vec![0, 1]), (10..20, vec![0, 1]), (20..25, vec![0, 1]), (30..31, vec![2])]);
        // Adjacent ranges merge even with max_gap 0 (there is no hole).
        let spans = coalesce(&[5..10, 0..5], &CoalescePolicy { max_gap: 0, max_span: 100 });
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].range, 0..10);
        assert!(coalesce(&[3..3, 7..7], &p).is_empty());
        assert_eq!(union_len(&[0..10, 5..15, 20..20, 30..31]), 16);
    }
}
