//! Hedged small GETs: when a small request's response head has not come after the *hedge
//! delay*, a copy goes out, and whichever head comes first is the answer (`send_hedged`).
//!
//! Why: the s3 profile's first byte is lognormal (p50 30 ms, p99 ~150 ms), so no placement
//! gets a small GET's p99 below ~150 ms; the tail is the endpoint's. Re-issuing a slow
//! request is what latency-sensitive clients do against such a tail ("The Tail at Scale",
//! Dean and Barroso, CACM 2013).
//!
//! ```text
//!   send ─► primary ── head within delay ──────────────────────────► answer
//!              └─ delay passed ─► budget? ─ no ─► wait for primary
//!                                   └─ yes ─► a place with no head owed? ─ no ─► refund, wait
//!                                               └─ yes ─► copy sent ─► first good head wins;
//!                                                         the loser's head is still measured
//! ```
//!
//! - Only small requests of the pipeline lane ([`is_small`]: GET or HEAD without a body,
//!   safe to send twice) other than listing pages (their length is unknown, so a losing
//!   copy's body could pass the discard bound, and their head times are not the small
//!   GETs' the delay is taken from), and not when the caller set [`Request::hedge`] false; never bulk
//!   requests, nothing on the pool (before the pipeline is verified) nor on h2.
//! - The delay is [`HEDGE_PERCENTILE`] of the last [`HEDGE_WINDOW`] small head latencies,
//!   at least [`HEDGE_FLOOR`]: `head_latency`, the endpoint's time alone, never
//!   `time_to_head`, which holds auto's own queueing. Every request sent is measured, the
//!   loser of a race too (`observe_loser`), so the window measures the endpoint, not the
//!   winners.
//! - A budget: each small request earns [`HEDGE_BUDGET`] of a hedge, at most
//!   [`HEDGE_BURST`] saved, so copies stay under 5% more small requests however slow the
//!   endpoint gets; none for [`HEDGE_QUIET_AFTER_THROTTLE`] after a 503 or 429. Copies are
//!   requests like any other: in `requests_sent`, and in the server's counts.
//! - A copy goes only where no head is owed ahead of it
//!   (`PipelineTransport::try_send_unobstructed`): an idle connection of the lane, a new
//!   one within the lane's share, or one whose only request is reading its body. With
//!   everything queued (`ferry bench small-objects`) copies find no place and none is sent.
//! - The loser's response is dropped once its head is measured: the pipeline discards its
//!   body (at most [`SMALL_GET_BYTES`], within the pipeline's `MAX_DISCARD`) and the
//!   connection carries on; closing it would cut off the requests pipelined behind it.
//!
//! Measurements, and the settings tried (p90 with a 10% budget): docs/lab/wire-auto-hedging.md.

use super::copy_of;
use crate::error::WireError;
use crate::lane::{is_listing_page, is_small};
use crate::pipeline::PipelineTransport;
use crate::{Request, Response, Transport};
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The hedge delay is this percentile of recent small head latencies: a request still
/// without its head then is in the slowest twentieth, and about that share of small
/// requests would get a copy ("The Tail at Scale", Dean and Barroso, CACM 2013: hedging at
/// the 95th percentile cost ~5% more requests there). On the s3 profile's lognormal first
/// byte (docs/lab/wire-facts.md) that is ~94 ms; p90 bought nothing under load (see
/// docs/lab/wire-auto-hedging.md; re-measure with
/// `ferry bench mixed-hol --peers none --repeats 3 --link instance`).
pub const HEDGE_PERCENTILE: f64 = 0.95;

/// Head latencies the percentile is taken over: the most recent ones, 2 s of mixed-hol's
/// 100 smalls/s, so that it follows a change of the endpoint within seconds while 5% of
/// it is still 10 samples.
pub const HEDGE_WINDOW: usize = 200;

/// No hedging before this many head latencies were measured: below it the 95th
/// percentile is the largest sample or two, a guess.
pub const HEDGE_MIN_SAMPLES: usize = 20;

/// The hedge delay never goes below this. A copy costs a request and, on a fresh
/// connection, a TCP handshake (1 ms RTT in a region, docs/lab/wire-facts.md); against an
/// endpoint whose heads come within a few ms (the `lan` profile, loopback) the 95th
/// percentile is scheduling noise on two shared cores, and a copy would only add load.
pub const HEDGE_FLOOR: Duration = Duration::from_millis(10);

/// Hedges earned per small request sent: the budget, at most 5% more small requests (the
/// share the percentile aims at), so that hedging never multiplies load; 10% bought
/// nothing under load (see docs/lab/wire-auto-hedging.md; re-measure with
/// `ferry bench mixed-hol --peers none --repeats 3 --link instance`).
pub const HEDGE_BUDGET: f64 = 0.05;

/// Hedges that may be spent at once after a quiet spell: a few slow heads together still
/// get copies, a run of them cannot (a judgement; the copies per 2,000 small GETs in
/// docs/lab/wire-auto-hedging.md stayed within the 5% budget).
pub const HEDGE_BURST: f64 = 4.0;

/// No hedges for this long after a 503 or 429: a throttled endpoint is asked for less, not
/// for copies. One second, S3's request-rate limits being per second (docs/lab/wire-facts.md).
pub const HEDGE_QUIET_AFTER_THROTTLE: Duration = Duration::from_secs(1);

/// Hedged small GETs (module note): the delay from recent head latencies, the budget,
/// and the counts.
#[derive(Default)]
pub(super) struct Hedger {
    pub(super) state: Mutex<HedgeState>,
    pub(super) sent: AtomicU64,
    pub(super) won: AtomicU64,
}

#[derive(Default)]
pub(super) struct HedgeState {
    /// The last [`HEDGE_WINDOW`] head latencies of small requests, oldest first.
    pub(super) window: std::collections::VecDeque<Duration>,
    /// `window` copied for selecting its percentile, kept to spare an allocation per
    /// response.
    pub(super) scratch: Vec<Duration>,
    /// [`HEDGE_PERCENTILE`] of `window` (at least [`HEDGE_FLOOR`]), once it holds
    /// [`HEDGE_MIN_SAMPLES`].
    pub(super) delay: Option<Duration>,
    pub(super) tokens: f64,
    pub(super) throttled_at: Option<Instant>,
}

impl Hedger {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HedgeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A small request's `head_latency`: measured from its first byte on the wire, with
    /// nothing ahead of it on its connection, so it is the endpoint's time alone.
    pub(super) fn observe(&self, latency: Duration) {
        let mut st = self.lock();
        if st.window.len() == HEDGE_WINDOW {
            st.window.pop_front();
        }
        st.window.push_back(latency);
        if st.window.len() >= HEDGE_MIN_SAMPLES {
            let HedgeState { window, scratch, delay, .. } = &mut *st;
            scratch.clear();
            scratch.extend(window.iter().copied());
            let k = ((scratch.len() as f64 * HEDGE_PERCENTILE).ceil() as usize).clamp(1, scratch.len()) - 1;
            let (_, p, _) = scratch.select_nth_unstable(k);
            *delay = Some((*p).max(HEDGE_FLOOR));
        }
    }

    pub(super) fn throttled(&self) {
        self.lock().throttled_at = Some(Instant::now());
    }

    /// A small request is sent: earns its share of the budget, and says how long to wait
    /// for its head before a copy (`None`: no hedge for it).
    pub(super) fn start(&self) -> Option<Duration> {
        let mut st = self.lock();
        st.tokens = (st.tokens + HEDGE_BUDGET).min(HEDGE_BURST);
        st.delay
    }

    /// Takes one hedge from the budget, unless it is empty or the endpoint throttled lately.
    pub(super) fn spend(&self) -> bool {
        let mut st = self.lock();
        if st.throttled_at.is_some_and(|t| t.elapsed() < HEDGE_QUIET_AFTER_THROTTLE) || st.tokens < 1.0 {
            return false;
        }
        st.tokens -= 1.0;
        true
    }

    /// A hedge taken but not sent (no connection without an owed head had room).
    pub(super) fn refund(&self) {
        let mut st = self.lock();
        st.tokens = (st.tokens + 1.0).min(HEDGE_BURST);
    }
}

/// An answer worth returning: a response other than 503/429 (a throttled copy is no
/// faster answer; the other may still succeed).
pub(super) fn good(r: &Result<Response, WireError>) -> bool {
    matches!(r, Ok(resp) if !matches!(resp.status.as_u16(), 503 | 429))
}

/// Sends small request `req` down the pipeline, and a copy of it when its head has not
/// come after the hedge delay and the budget allows (module note).
/// Returns the first good answer; the other request's future is dropped, and the pipeline
/// reads its response and discards its small body (`MAX_DISCARD` in pipeline.rs).
pub(super) fn send_hedged(
    pipeline: Arc<PipelineTransport>,
    hedger: Arc<Hedger>,
    req: Request,
) -> BoxFuture<'static, Result<Response, WireError>> {
    let hedgeable = req.hedge && req.is_pipelineable() && is_small(&req) && !is_listing_page(&req);
    let delay = if hedgeable { hedger.start() } else { None };
    let copy = delay.map(|_| copy_of(&req));
    let mut primary = pipeline.send(req);
    let (Some(delay), Some(copy)) = (delay, copy) else { return primary };
    Box::pin(async move {
        tokio::select! {
            r = &mut primary => return r,
            _ = tokio::time::sleep(delay) => {}
        }
        if !hedger.spend() {
            return primary.await;
        }
        let Some(mut hedge) = pipeline.try_send_unobstructed(copy) else {
            hedger.refund();
            return primary.await;
        };
        hedger.sent.fetch_add(1, Relaxed);
        tracing::trace!("auto: hedged a small request after {delay:?}");
        tokio::select! {
            r = &mut primary => {
                if good(&r) {
                    observe_loser(hedger, hedge);
                    return r;
                }
                let h = hedge.await;
                if good(&h) {
                    hedger.won.fetch_add(1, Relaxed);
                    return h;
                }
                r
            }
            h = &mut hedge => {
                if good(&h) {
                    hedger.won.fetch_add(1, Relaxed);
                    observe_loser(hedger, primary);
                    return h;
                }
                primary.await
            }
        }
    })
}

/// The request that lost a hedge race still gets its head: its latency goes into the
/// hedge window like any other (module note: without it the window
/// saw only winners, and a primary slow enough to lose, the tail the delay is taken from,
/// was never counted). Its response is then dropped and the pipeline discards its body
/// as before; a head that never comes ends at `response_timeout`, and the task with it.
pub(super) fn observe_loser(hedger: Arc<Hedger>, loser: BoxFuture<'static, Result<Response, WireError>>) {
    tokio::spawn(async move {
        let r = loser.await;
        if good(&r) {
            if let Some(latency) = r.ok().and_then(|r| r.meta.head_latency) {
                hedger.observe(latency);
            }
        }
    });
}
