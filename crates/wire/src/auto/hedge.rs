//! Hedged small GETs.
//!
//! The s3 profile's first byte is lognormal (p50 30 ms, p99 ~150 ms, LAB.md section 2),
//! so no placement gets a small GET's p99 below ~150 ms: the tail is the endpoint's. What
//! latency-sensitive clients do against such a tail is to re-issue a slow request ("The
//! Tail at Scale", Dean and Barroso, CACM 2013; AWS's S3 performance guidelines advise
//! retrying slow latency-sensitive requests): when a small request's head has not come
//! after the *hedge delay*, a copy goes out, and whichever head comes first is the answer
//! (`send_hedged`). The rules:
//!
//! - Only small requests of the pipeline lane ([`is_small`]: GET or HEAD without a body,
//!   safe to send twice) and not when the caller set [`Request::hedge`] false; bulk
//!   requests and ranged parts over [`SMALL_GET_BYTES`] never, nor anything on the pool
//!   (before the pipeline is verified) or on h2.
//! - The delay is [`HEDGE_PERCENTILE`] (p95) of the last [`HEDGE_WINDOW`] small head
//!   latencies, at least [`HEDGE_FLOOR`]: `head_latency`, from the request's first byte
//!   on the wire with nothing ahead of it, never `time_to_head`, which holds auto's own
//!   queueing (the spiral of "One controller" above). Every request sent is measured,
//!   the loser of a race too: its head still comes, and `observe_loser` waits for it
//!   before dropping the response. Before, the window held only the answers callers got,
//!   and a primary slow enough to lose (the tail the percentile is taken from) was
//!   replaced in it by its copy's fresh first byte, so the estimate read low
//!   (`tests/auto_hedge.rs`: 3 slow heads of ~43 move the p95 only with the loser's).
//! - A budget: each small request earns [`HEDGE_BUDGET`] (0.05) of a hedge, at most
//!   [`HEDGE_BURST`] saved, so copies stay under 5% more small requests however slow the
//!   endpoint gets; and none for [`HEDGE_QUIET_AFTER_THROTTLE`] after a 503 or 429.
//!   Copies are requests like any other: in `requests_sent`, and in the server's counts.
//! - A copy goes only where no head is owed ahead of it
//!   (`PipelineTransport::try_send_unobstructed`): an idle connection of the lane, a new
//!   one within the lane's share, or one whose only request is reading its body; never
//!   behind a pending head (the primary's own connection among them), and never past
//!   requests already waiting for room: with everything queued (`ferry bench
//!   small-objects`) copies find no such place and are not sent.
//! - The loser's response is dropped once its head is measured: the pipeline's reader
//!   discards its body (at most [`SMALL_GET_BYTES`], within the pipeline's
//!   `MAX_DISCARD`), and the connection carries on. Closing it instead would cut off the requests pipelined
//!   behind it (re-sent elsewhere) and cost a new connection (a handshake, and TLS on
//!   S3) for what is at most ~12 ms of body at 90 MB/s; a head that never comes ends at
//!   `response_timeout` as any other. `tests/auto_hedge.rs` checks the answer, the
//!   budget, that no connection closes for a loser and the sockets stay under the cap.
//!
//! Measured (`ferry bench mixed-hol --peers none --repeats 3 --link instance`, full size,
//! main's build and this one alternated twice, 6 repeats each, load average 2.5-11): auto's
//! small p99 loaded 211 ms (148-398) beside main's 323 (254-387), 0.65x; unloaded 137
//! (133-145) beside 233 (149-444); beside the 50-connection pool in the same repeat 12.3x
//! better at p99 (5.7-18.3) where main's was 7.2x (5.5-8.9), at p50 33x beside 30x.
//! Copies: 79-98 per 2,000 smalls (the budget: 5%), 16-29 of them answered first loaded,
//! 26-46 unloaded. Not settled: in 2 of the 6 loaded repeats auto held 9-11 connections
//! (peak 11-14, beside 21-27 otherwise and main's 24-28) and the large objects took 1.15
//! and 1.22x the link-limited time (main 1.07-1.10); the cause was not traced. With
//! everything queued, `ferry bench small-objects --quick --peers none` (3 runs of 3
//! repeats each, interleaved, load 4.4-5.8) sent no copy: auto 2,578 objects/s (1,867-2,970)
//! beside main's 2,607 (2,132-2,896), 0.72x h1-pipeline's beside 0.75x.
//!
//! Measuring the loser, and a p90 delay with a 10% budget, on one build with the three
//! settings switched by a temporary environment variable (not kept), `ferry bench
//! mixed-hol --peers none --repeats 3 --link instance --auto-max-connections 50` (the
//! pool and auto rows only), in the order before, loser, p90, p90, loser, before (6
//! repeats each, load average 2.8-6): auto's loaded small p99 316 ms (199-1,113; the
//! 1,113 beside a test build) before, 273 (244-303) with the loser measured, 275
//! (204-476) at p90 with 10%; pool p99 over auto's in the same repeat 7.1x, 7.6x, 7.5x.
//! Unloaded the p90 row's p99 fell to 128 ms (124-133) beside 135-138, and it sent 184
//! copies per 2,000 smalls beside 96, 42 of them answered first beside 24-30; loaded it
//! bought nothing, so p95 and 5% stay (tried, not landed). The loser's sample is kept for
//! what it is, the window measuring the endpoint rather than its winners; it moved no
//! figure above the run-to-run spread. What the loaded tail is instead: bench
//! mixed_hol.rs, "On a link".
//!
//! Tried again once receive windows were capped (conn.rs, "Receive windows of HTTP/1.1
//! connections"), when the loaded tail had become the unloaded one: same command, p95
//! with 5% and p90 with 10% alternated twice (6 repeats each, load average 0.5-1.8).
//! Loaded small p99 145 ms (141-149) at p95, 138 (130-143) at p90; unloaded 137 and
//! 128; copies 92 and 178 per 2,000 smalls; the pool's p99 over auto's 16.5x either way
//! (15.0-17.1, 14.3-17.3). 5% of the p99 for twice the copies, and no change in the
//! goal's ratio: p95 and 5% stay.
//!
//! The pipeline also places a small request behind an owed head only when no connection
//! of the lane is idle, none may be opened, and none is just reading a body (pipeline.rs,
//! `place`): behind a body it waits at most that body; behind an owed head, a first byte.
//! It landed with the hedges and was not measured apart from them.

use super::copy_of;
use crate::error::WireError;
use crate::lane::is_small;
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
/// byte (p50 30 ms, p99 ~150 ms, LAB.md section 2) that is ~94 ms.
pub const HEDGE_PERCENTILE: f64 = 0.95;

/// Head latencies the percentile is taken over: the most recent ones, 2 s of mixed-hol's
/// 100 smalls/s, so that it follows a change of the endpoint within seconds while 5% of
/// it is still 10 samples.
pub const HEDGE_WINDOW: usize = 200;

/// No hedging before this many head latencies were measured: below it the 95th
/// percentile is the largest sample or two, a guess.
pub const HEDGE_MIN_SAMPLES: usize = 20;

/// The hedge delay never goes below this. A copy costs a request and, on a fresh
/// connection, a TCP handshake (1 ms RTT in a region, LAB.md section 3); against an
/// endpoint whose heads come within a few ms (the `lan` profile, loopback) the 95th
/// percentile is scheduling noise on two shared cores, and a copy would only add load.
pub const HEDGE_FLOOR: Duration = Duration::from_millis(10);

/// Hedges earned per small request sent: the budget, at most 5% more small requests (the
/// share the percentile aims at), so that hedging never multiplies load.
pub const HEDGE_BUDGET: f64 = 0.05;

/// Hedges that may be spent at once after a quiet spell: a few slow heads together still
/// get copies, a run of them cannot.
pub const HEDGE_BURST: f64 = 4.0;

/// No hedges for this long after a 503 or 429: a throttled endpoint is asked for less, not
/// for copies. One second, S3's request-rate limits being per second (LAB.md section 1).
pub const HEDGE_QUIET_AFTER_THROTTLE: Duration = Duration::from_secs(1);

/// Hedged small GETs (module note, "Hedged small GETs"): the delay from recent head
/// latencies, the budget, and the counts.
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
/// come after the hedge delay and the budget allows (module note, "Hedged small GETs").
/// Returns the first good answer; the other request's future is dropped, and the pipeline
/// reads its response and discards its small body (`MAX_DISCARD` in pipeline.rs).
pub(super) fn send_hedged(
    pipeline: Arc<PipelineTransport>,
    hedger: Arc<Hedger>,
    req: Request,
) -> BoxFuture<'static, Result<Response, WireError>> {
    let hedgeable = req.hedge && req.is_pipelineable() && is_small(&req);
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
/// hedge window like any other (module note, "Hedged small GETs": without it the window
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
