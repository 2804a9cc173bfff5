//! auto, the default transport: the endpoint's answers decide, the user tunes nothing.
//!
//! ```text
//!  https ── first request: open one connection offering ALPN [h2, http/1.1]
//!             ├─ server chose h2 ─────► H2Transport (takes that connection), for everything
//!             └─ server chose http/1.1 ► HTTP/1.1 (the pool takes that connection)
//!  http ──────────────────────────────► HTTP/1.1 (no ALPN; h2c only when forced with Mode::H2)
//!
//!  HTTP/1.1: small idempotent request ── pipeline verified? ── yes ─► PipelineTransport
//!                                          └─ no ─► pool (one probe first, see below)
//!            anything else ────────────────────────────────────────► PoolTransport
//! ```
//!
//! *Small* means [`Request::is_pipelineable`] (GET or HEAD without a body) and: a HEAD,
//! or a GET whose Range asks for at most [`SMALL_GET_BYTES`], or a GET without a Range
//! whose caller knows the object is that small ([`Request::size_hint`], from a listing
//! or a HEAD). Any other GET counts as large: its object may be any size, and a large
//! body holds up every response pipelined behind it.
//!
//! *Verified* is [`PipelineTransport::verified`]: a batch of two or more requests written
//! in one write was answered correctly. To earn it without risking callers' requests on
//! an endpoint that mishandles pipelining, auto runs a probe: the first small request
//! goes to the small lane's own pipeline together with a copy of itself, both queued at
//! once on one connection (`PipelineTransport::send_pair`), so that its writer sends
//! them in one batch. The caller gets the first response, which any HTTP/1.1 server
//! answers correctly; the copy's response is read and thrown away. If the batch was
//! answered well, small requests go to the pipeline from then on, starting on the
//! probe's connection; if the copy was answered badly, auto stays on the pool and tries
//! again after [`PROBE_SPACING`] more small requests, at most [`PROBE_ATTEMPTS`] times. A
//! probe whose answers were fine but did not verify (the lane had no place for the pair
//! at once, so they were placed one by one) is retried with the next small request, at
//! most [`PROBE_INCONCLUSIVE`] times. The cost is one duplicated small request per probe.
//! The probe once ran on a one-connection pipeline of its own, with a place of its own
//! under the limit: one TCP connection opened beside the lanes for every transport
//! (mixed-hol below).
//!
//! While a probe is out, small requests wait for its verdict (one first-byte time)
//! rather than join the pool's queue: `ferry bench small-objects` submits 1,024 GETs at
//! once, and those that went to the pool while the probe ran held it for seconds.
//!
//! # One controller, one cap, two lanes that share it by demand
//!
//! auto keeps the endpoint's adaptive controller (controller.rs) and reports every
//! response to it: 503 and 429 are throttling, any other answer a success. On h2 a
//! success carries its latency (`ResponseMeta::head_latency`: from the request's first
//! byte on the wire to its head), and the controller also backs off when first-byte
//! times rise. On HTTP/1.1 a success carries its `head_latency` too, but to the
//! controller's per-round rule ("Rising head latency" in controller.rs), which backs off
//! only while goodput is not growing and never below half the best round's limit. Not
//! `time_to_head`, which runs from the call to `send` and so includes waiting for a pool
//! connection or behind earlier pipelined responses: that is auto's own queueing, and fed
//! as latency it shrinks the limit in a spiral (100 bulk reads on 49 connections double
//! it). Nor the moving averages that h2 uses: fed `head_latency`, they cut the limit under
//! mixed-hol's bulk load, where the 2-core loopback's CPU contention raises first-byte
//! times: in one of six repeats (`ferry bench mixed-hol --quick --peers none`) auto held
//! 22 connections and its large reads stalled (74 MB/s beside ~450). Every bulk response
//! body's bytes also go to `Controller::delivered`, and the limit stops growing once more
//! connections stop adding bytes per second (controller.rs, "Growth follows
//! goodput"), so auto does not open the whole cap for a load two cores cannot carry
//! faster. Small responses' bytes do not count (see "small-objects" below). On HTTP/1.1 the
//! controller's limit is the number of connections auto may hold: it starts at 4, grows
//! by slow start, halves on SlowDown, and never exceeds `max_connections` (the hard cap).
//! It is shared whole by the two lanes (the probe runs on the pipeline lane) through
//! `Lanes`, a `ConnectionGate` that the pool and the pipeline ask before they open a
//! connection:
//!
//! ```text
//!   T = limit               small_want = most small requests in flight lately (ebbs by one per second)
//!   small kept  = min(max(min(small_want, SMALL_CLAIM), reserve), T/2)    reserve = min(8, T/4)
//!   bulk share  = min(bulk requests in flight, T - small kept)
//!   small share = T - bulk share
//! ```
//!
//! So with only small requests the pipeline may use all of T (`ferry bench small-objects
//! --quick --peers none`, 32 connections: with the fixed eighth it had before, auto
//! fetched 1,100 objects/s beside the pipeline's 4,520; sharing by demand, 3,692 beside
//! 3,703 in one run);
//! when bulk requests arrive they get connections back, except those the small requests
//! are using, up to half of T (each small request then has a connection of its own when
//! it can: a small GET pipelined behind a 1 MiB body waits ~12 ms at S3's 90 MB/s;
//! `ferry bench mixed-hol --quick`: auto's small p99 loaded/unloaded went from 2.7x with
//! the fixed split to 1.5x, the 50-connection pool's being 4.4x in the same run). A
//! lane over its share gives connections back when they are needed (the limit fell, or
//! the other lane wants more than the free places) and as they come free: the pool
//! closes a connection instead of keeping it idle, the pipeline stops placing requests
//! on its emptiest connections and closes them once answered. A lane over its share
//! that nobody needs keeps its connections: bulk demand dips between one ranged part's
//! end and the next part's send, and closing there cost a TCP connection per part.
//! Connections of both lanes are
//! counted under one lock, and a lane takes its place before it opens a connection and
//! gets it back only once the socket is closed ([`Place`], which the socket holds): the
//! sockets open never exceed T, even for the moment of a handover
//! ([`AutoTransport::sockets_open`] keeps the exact peak, which `tests/auto_lanes.rs`
//! checks). Before, a lane gave its place back when it let the connection go, before
//! its socket closed, and the other lane's new connection could be one over the cap (CI
//! saw 9 under a cap of 8), so the lanes shared T less one. The unit test
//! `a_place_comes_back_only_once_its_socket_is_closed` reaches that moment on purpose (a
//! current-thread runtime, the pool's socket not yet closed when the small lane asks), and
//! fails if the pool gives the place back as it lets the connection go. Openings
//! over a run can: a connection one lane closes for the other is opened again by the
//! other ([`AutoTransport::handovers`] counts them). On mixed-hol that was auto's excess
//! (61-74 TCP connections opened beside the 50-connection pool's 50): the pool fills T
//! during the bulk-only warm-up, then gives places to the pipeline as the smalls
//! arrive. So the small lane claims at most `SMALL_CLAIM` (8) connections from bulk,
//! kept from the start (the reserve), and pipelines further smalls on them; and slow
//! start grows the limit 1.5x per round rather than 2x (controller.rs,
//! `SLOW_START_STEP`) so it overshoots the connections two cores can feed by less.
//! mixed-hol (`--quick --peers none`, 3 runs interleaved with main's build, busy
//! machine): the pipeline opened 8 connections, 2-3 handed over (the reserve is a
//! quarter of a still-small limit when the smalls arrive), 51-53 TCP connections in all
//! beside main's 50-67 and the pool's 50.
//!
//! Where those 51-53 came from (`FERRY_LOG=ferry_wire::auto=debug,ferry_wire::controller=debug`,
//! which logs every opening with the lanes' state and every goodput round; 6 loaded runs):
//! the pool 41 (the limit reaches the cap of 50 in slow start: goodput still grew 20-40%
//! per 1.5x step up to a limit of 32, and the step from 32 to 48 is taken before its
//! round shows whether it paid), the pipeline 8, the probe's own connection 1, and 1-3
//! handovers, every one while slow start was still growing the limit (smalls arriving
//! at a limit of 13-20, whose reserve is 3-5, or during a round that held growth for
//! a moment). So now: the probe runs on the pipeline lane (above), and no lane closes a
//! connection for the other while the controller is in slow start below the cap
//! (`Controller::in_slow_start`): the limit grows within a round or two, and the lane
//! short of places takes the new ones (bulk's share cannot take the small lane's kept
//! places, so growth reaches the small lane first); meanwhile its smalls are pipelined
//! on the connections it has. Handovers remain for a limit that holds or fell, where
//! waiting would not help. Auto then opens what its limit reaches and no more (plus any
//! handover after slow start), fewer than an oversubscribed pool of the same cap
//! whenever goodput stops the limit below the cap (`tests/auto_lanes.rs`: 19-20 beside
//! the pool's 48). mixed-hol (`--quick --peers none --repeats 1`, this build and the one
//! before alternated 6 times, load 9-12 then 4-6): auto opened 48/48/19/50/50/50 beside
//! the build before's 36/51/50/52/52/55 and the pool's 50; small p99 loaded/unloaded
//! 2.05/1.66/0.88/1.47/1.43/0.97x beside 0.77/1.68/1.20/1.11/1.33/1.49x (the pool's
//! 2.4-11x), large MB/s over the pool's in the same repeat 0.74-1.15 (median 0.95)
//! beside 0.70-1.23 (median 1.04). So the excess is gone, but on that loopback auto still
//! opens as many as the pool: goodput grew 20-45% per 1.5x step up to a limit of 32 and
//! the step from 32 lands at 48 before its round is measured, so the limit reaches the
//! cap. Opening fewer there needs slow start to stop before a step it cannot yet judge
//! (steps measured at a fixed limit before the next, at half the ramp's speed), or a
//! smaller cap.
//!
//! # Parked connections: a fallen limit bounds bulk requests, not the pool's sockets
//!
//! Where mixed-hol's openings beyond the limit's peak came from at full size (20 s of
//! smalls; `ferry bench mixed-hol --peers none --repeats 1`, debug log, load ~8): the
//! pool opened 24 in slow start, then 13 more over the window, each after one of the
//! controller's 7 head-latency back-offs (limit 32 -> 28 -> 25 -> ... -> 21, CPU
//! contention on two cores) had closed the pool's connections over the lowered limit and
//! the limit grew back by one on a new best round; the pipeline opened 8, nothing was
//! handed over. So bulk requests now wait in `Lanes::admit_bulk` until fewer than bulk's
//! share are in flight, and a fallen limit no longer makes the pool close connections
//! (`Lanes::excess`): those over the limit stay idle, parked, until the limit grows back
//! (reused, not reopened), the small lane wants their places (handed over), or the idle
//! time-out. A parked connection holds its place, so the sockets stay under the hard cap
//! (the limit's highest value); the pipeline's connections over a fallen limit still
//! close. Same command, the build before (b0064c9) and this one alternated 3
//! times (load 8-14, other engineers' builds beside): auto opened 38/50/36 TCP
//! connections beside the build before's 64/49/57 (the pool 50 each time); small p99
//! 699/387/337 ms (0.35/0.45/0.21x the pool's in the same repeat) beside 313/349/609
//! (0.28/0.25/0.69x); large MB/s over the pool's 0.53/0.83/1.07 beside 1.20/0.93/0.64
//! (the first repeat of this build ran beside a test build). Fewer openings than the
//! pool in two of three; when the limit reaches the cap and stays (the second repeat),
//! auto opens the cap like the pool.

//! # small-objects: slow start at full depth, goodput in bulk bytes
//!
//! The pipeline's depth is `pipeline_depth` while the controller is in slow start and the
//! limit after it (a SlowDown ends slow start, so it halves requests in flight, not only
//! connections). And small responses' bytes are not goodput: a small request's worth is
//! its first byte, which the throttle and latency rules judge. Why, from `ferry bench
//! small-objects --quick --peers none` with `FERRY_LOG=ferry_wire::auto=debug,
//! ferry_wire::controller=debug`: 1,000 GETs of 16 KiB submitted at once, and auto held
//! the limit's square in flight (16 at first) while the limit grew 1.5x per 100 ms round
//! (`SLOW_START_STEP`, `MIN_ROUND`: 4, 6, 9, 14, 21, 32): the run was over (~0.6 s) before
//! the ramp, at 20-21 connections. Full depth alone did not help much (1,919-1,946
//! objects/s beside 1,546-1,592, 14 connections): a pipelined connection answers in order
//! and the emulated first byte is lognormal, so 32 requests on one connection wait for
//! the slowest of them, and connections, not depth, carry the rate. With small bytes
//! left out, small-only loads grow by plain slow start (one connection per success) and
//! reach the cap within the first hundred responses. Same run, old build and this one
//! alternated 3 times (load 8-9, the wire tests beside): auto 1,495-1,498 objects/s at
//! 20-24 connections, 0.51-0.62x h1-pipeline's, became 2,459-2,665 at 31, 0.82-1.09x
//! h1-pipeline's (2,422-3,037); h1-pool 648-767. What is left is the probe's first byte
//! (smalls wait for its verdict) and the ramp from 4 connections. The price: on
//! mixed-hol's unloaded row (smalls alone at 100/s) auto now opens up to ~28 connections
//! where before the limit stayed low; the loaded row's count is what the bench reports.
//!
//! # Hedged small GETs
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
//!
//! Connection ids in [`crate::ResponseMeta`] are per sub-transport: the pool and h2 share
//! auto's connector, the pipelines number their own.

use crate::conn::{Connector, Io};
use crate::controller::{Controller, ControllerOptions};
use crate::error::WireError;
use crate::h2::H2Transport;
use crate::pipeline::PipelineTransport;
use crate::pool::PoolTransport;
use crate::ResponseBody;
use crate::{Request, Response, Scheme, Transport, TransportConfig, TransportStats};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use http::header::RANGE;
use http::{HeaderMap, Method};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify, OnceCell};

/// Largest ranged GET sent down the pipeline: 1 MiB takes ~12 ms at S3's 90 MB/s per
/// connection (LAB.md section 1), less than the ~30 ms first-byte p50 that pipelining
/// hides for the requests behind it; larger bodies would cost them more than they save.
pub const SMALL_GET_BYTES: u64 = 1024 * 1024;

/// Small requests between two pipeline probes.
pub const PROBE_SPACING: u64 = 100;

/// Probes before auto settles on the pool for good.
pub const PROBE_ATTEMPTS: u32 = 3;

/// Probes answered well that did not verify before auto stops probing: each costs one
/// duplicated small request.
pub const PROBE_INCONCLUSIVE: u32 = 8;

/// Largest body of the probe's copy that is read to discard it (it is small by rule).
const PROBE_DISCARD_LIMIT: usize = 2 * SMALL_GET_BYTES as usize;

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
struct Hedger {
    state: Mutex<HedgeState>,
    sent: AtomicU64,
    won: AtomicU64,
}

#[derive(Default)]
struct HedgeState {
    /// The last [`HEDGE_WINDOW`] head latencies of small requests, oldest first.
    window: std::collections::VecDeque<Duration>,
    /// `window` copied for selecting its percentile, kept to spare an allocation per
    /// response.
    scratch: Vec<Duration>,
    /// [`HEDGE_PERCENTILE`] of `window` (at least [`HEDGE_FLOOR`]), once it holds
    /// [`HEDGE_MIN_SAMPLES`].
    delay: Option<Duration>,
    tokens: f64,
    throttled_at: Option<Instant>,
}

impl Hedger {
    fn lock(&self) -> std::sync::MutexGuard<'_, HedgeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A small request's `head_latency`: measured from its first byte on the wire, with
    /// nothing ahead of it on its connection, so it is the endpoint's time alone.
    fn observe(&self, latency: Duration) {
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

    fn throttled(&self) {
        self.lock().throttled_at = Some(Instant::now());
    }

    /// A small request is sent: earns its share of the budget, and says how long to wait
    /// for its head before a copy (`None`: no hedge for it).
    fn start(&self) -> Option<Duration> {
        let mut st = self.lock();
        st.tokens = (st.tokens + HEDGE_BUDGET).min(HEDGE_BURST);
        st.delay
    }

    /// Takes one hedge from the budget, unless it is empty or the endpoint throttled lately.
    fn spend(&self) -> bool {
        let mut st = self.lock();
        if st.throttled_at.is_some_and(|t| t.elapsed() < HEDGE_QUIET_AFTER_THROTTLE) || st.tokens < 1.0 {
            return false;
        }
        st.tokens -= 1.0;
        true
    }

    /// A hedge taken but not sent (no connection without an owed head had room).
    fn refund(&self) {
        let mut st = self.lock();
        st.tokens = (st.tokens + 1.0).min(HEDGE_BURST);
    }
}

/// An answer worth returning: a response other than 503/429 (a throttled copy is no
/// faster answer; the other may still succeed).
/// A copy of a request without a body (the probe's and the hedge's): method, target,
/// headers and size hint.
fn copy_of(req: &Request) -> Request {
    Request {
        headers: req.headers.clone(),
        size_hint: req.size_hint,
        ..Request::new(req.method.clone(), req.path_and_query.clone())
    }
}

fn good(r: &Result<Response, WireError>) -> bool {
    matches!(r, Ok(resp) if !matches!(resp.status.as_u16(), 503 | 429))
}

/// Sends small request `req` down the pipeline, and a copy of it when its head has not
/// come after the hedge delay and the budget allows (module note, "Hedged small GETs").
/// Returns the first good answer; the other request's future is dropped, and the pipeline
/// reads its response and discards its small body (`MAX_DISCARD` in pipeline.rs).
fn send_hedged(
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
fn observe_loser(hedger: Arc<Hedger>, loser: BoxFuture<'static, Result<Response, WireError>>) {
    tokio::spawn(async move {
        let r = loser.await;
        if good(&r) {
            if let Some(latency) = r.ok().and_then(|r| r.meta.head_latency) {
                hedger.observe(latency);
            }
        }
    });
}

/// Chooses the transport per endpoint (ALPN) and per request (size, verified pipelining).
pub struct AutoTransport {
    inner: Arc<Inner>,
}

struct Inner {
    config: TransportConfig,
    connector: Connector,
    chosen: OnceCell<Chosen>,
    controller: Arc<Controller>,
}

enum Chosen {
    H2(H2Transport),
    H1(H1),
}

struct H1 {
    pool: Arc<PoolTransport>,
    pipeline: Arc<PipelineTransport>,
    lanes: Arc<Lanes>,
    probe: Arc<Mutex<Probe>>,
    /// Bumped when a probe ends: small requests that waited for its verdict go on.
    probe_done: watch::Sender<u64>,
    small_seen: AtomicU64,
    hedger: Arc<Hedger>,
    /// The pool's connector, whose receive-window cap a small request beside bulk ones
    /// engages (conn.rs, "Receive windows of HTTP/1.1 connections").
    connector: Connector,
}

#[derive(Default)]
struct Probe {
    running: bool,
    /// Probes whose batch was answered badly (or failed).
    attempts: u32,
    /// Probes answered well that still did not verify: most likely the two requests were
    /// not written in one batch (the connection opened between them). Not held against
    /// the endpoint, but bounded.
    inconclusive: u32,
    /// `small_seen` when the last probe started.
    last_at: u64,
}

impl AutoTransport {
    pub fn new(config: TransportConfig) -> Result<AutoTransport, WireError> {
        let connector = Connector::new(&config, &[b"h2", b"http/1.1"])?;
        connector.watch_receive_windows();
        let chosen = OnceCell::new();
        let controller =
            Controller::new(ControllerOptions { max: config.max_connections.max(1), ..ControllerOptions::default() });
        if config.endpoint.scheme == Scheme::Http {
            let _ = chosen.set(Chosen::H1(H1::new(&config, connector.clone(), controller.clone())?));
        }
        Ok(AutoTransport { inner: Arc::new(Inner { config, connector, chosen, controller }) })
    }

    /// Connections the lanes hold now: (pool, pipeline), the probe's not included; 0s
    /// before HTTP/1.1 was chosen or on h2.
    pub fn lane_connections(&self) -> (usize, usize) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => {
                let st = h1.lanes.lock();
                (st.open[BULK], st.open[SMALL])
            }
            _ => (0, 0),
        }
    }

    /// Connections opened so far, per lane: (pool, pipeline), the probes' included in
    /// the pipeline's (they run on it); 0s before HTTP/1.1 was chosen or on h2.
    pub fn lane_openings(&self) -> (u64, u64) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => (h1.pool.stats().connections_opened, h1.pipeline.stats().connections_opened),
            _ => (0, 0),
        }
    }

    /// Connections closed by a lane to give their places to the other lane: (pool,
    /// pipeline). Each is a connection the other lane may then open anew, so openings
    /// over a run can exceed the cap by these while the connections open at once never
    /// do.
    pub fn handovers(&self) -> (u64, u64) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => {
                let st = h1.lanes.lock();
                (st.handed_over[BULK], st.handed_over[SMALL])
            }
            _ => (0, 0),
        }
    }

    /// Sockets auto's HTTP/1.1 lanes hold now (connected, not yet closed), and the most
    /// they held at once; 0s before HTTP/1.1 was chosen or on h2. Never above the cap:
    /// a lane's place is taken before its socket connects and given back after it closes.
    pub fn sockets_open(&self) -> (usize, usize) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => {
                let st = h1.lanes.lock();
                (st.sockets[BULK] + st.sockets[SMALL], st.peak_sockets)
            }
            _ => (0, 0),
        }
    }

    /// "h2" or "h1" once chosen (at construction for http, at the first request for https).
    pub fn chosen(&self) -> Option<&'static str> {
        self.inner.chosen.get().map(|c| match c {
            Chosen::H2(_) => "h2",
            Chosen::H1(_) => "h1",
        })
    }

    /// Requests the pipeline has carried (the probe's included).
    pub fn pipelined_requests(&self) -> u64 {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => h1.pipeline.stats().requests_sent,
            _ => 0,
        }
    }

    /// The connector auto opens its pool and h2 connections with (its receive windows:
    /// conn.rs). For tests and diagnostics.
    pub fn connector(&self) -> &Connector {
        &self.inner.connector
    }

    /// How long a small request now waits for its head before a copy may go out (module
    /// note, "Hedged small GETs"); `None` before enough head latencies were measured, or
    /// before HTTP/1.1 was chosen.
    pub fn hedge_delay(&self) -> Option<Duration> {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => h1.hedger.lock().delay,
            _ => None,
        }
    }

    /// Whether small requests now go down the pipeline.
    pub fn pipelining(&self) -> bool {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => h1.verified(),
            _ => false,
        }
    }
}

impl Drop for H1 {
    /// What the lanes did over the transport's life, for reading with
    /// `FERRY_LOG=ferry_wire::auto=debug` (mixed-hol's connection counts).
    fn drop(&mut self) {
        let (handed, peak) = {
            let st = self.lanes.lock();
            (st.handed_over, st.peak_open)
        };
        tracing::debug!(
            "auto: HTTP/1.1 lanes done: opened pool {} pipeline {} (probes included); handed over pool {} pipeline {}; peak lanes {:?}; controller {:?}",
            self.pool.stats().connections_opened,
            self.pipeline.stats().connections_opened,
            handed[BULK],
            handed[SMALL],
            peak,
            self.lanes.controller.stats()
        );
    }
}

impl H1 {
    fn new(config: &TransportConfig, connector: Connector, controller: Arc<Controller>) -> Result<H1, WireError> {
        // Each lane may use the whole cap; the gates share it by demand (module note).
        let lanes = Arc::new(Lanes::new(controller));
        let gate = |lane| -> Arc<dyn ConnectionGate> { Arc::new(LaneGate { lanes: lanes.clone(), lane }) };
        let pool = Arc::new(PoolTransport::with_gate(config.clone(), connector.clone(), Some(gate(BULK))));
        let pipeline = Arc::new(PipelineTransport::with_gate(config.clone(), Some(gate(SMALL)))?);
        let _ = lanes.pool.set(Arc::downgrade(&pool));
        let _ = lanes.pipeline.set(Arc::downgrade(&pipeline));
        Ok(H1 {
            pool,
            pipeline,
            lanes,
            probe: Arc::new(Mutex::new(Probe::default())),
            probe_done: watch::channel(0).0,
            small_seen: AtomicU64::new(0),
            hedger: Arc::new(Hedger::default()),
            connector,
        })
    }

    fn verified(&self) -> bool {
        self.pipeline.verified()
    }

    async fn send(&self, req: Request) -> Result<Response, WireError> {
        let lane = if is_small(&req) { SMALL } else { BULK };
        if lane == SMALL && !self.connector.window_cap_engaged() && self.lanes.lock().admitted_bulk > 0 {
            // Small requests beside bulk transfers: from now on the bulk connections'
            // windows stop where the path's queue would begin (conn.rs).
            self.connector.engage_window_cap();
        }
        let sent = Instant::now();
        let mut demand = Demand::new(self.lanes.clone(), lane);
        let fut = if lane == BULK {
            self.lanes.admit_bulk().await;
            demand.admitted = true;
            self.pool.send(req)
        } else {
            let (fut, on_pool) = self.send_small(req).await;
            if on_pool {
                // A small request the pool carries (no verified pipeline yet) is the
                // pool's demand: counted as small, the pool's share would not grow for
                // it, and with no bulk request active it waited for ever.
                demand = Demand::new(self.lanes.clone(), BULK);
            }
            fut
        };
        let observation = self.lanes.controller.observe();
        let result = fut.await;
        match &result {
            Ok(r) if matches!(r.status.as_u16(), 503 | 429) => {
                observation.throttled();
                self.hedger.throttled();
            }
            Ok(r) => match r.meta.head_latency {
                Some(latency) => {
                    if lane == SMALL {
                        self.hedger.observe(latency);
                    }
                    observation.success_with_head_latency(latency)
                }
                _ => observation.success_unmeasured(),
            },
            Err(_) => drop(observation),
        }
        // The limit may have moved either way: both lanes look again.
        self.lanes.nudge();
        if lane == SMALL && tracing::enabled!(tracing::Level::TRACE) {
            if let Ok(r) = &result {
                demand.timing =
                    Some(SmallTiming { sent, head_at: Instant::now(), head_latency: r.meta.head_latency, bytes: 0 });
            }
        }
        result.map(|r| demand.until_body_end(r))
    }

    /// Routes a small request: the pipeline once verified; while a probe is out, after
    /// its verdict; else the pool (with a probe first when one is due).
    /// Also says whether the pool took it.
    async fn send_small(&self, req: Request) -> (BoxFuture<'static, Result<Response, WireError>>, bool) {
        let mut done = self.probe_done.subscribe();
        loop {
            if self.verified() {
                return (send_hedged(self.pipeline.clone(), self.hedger.clone(), req), false);
            }
            let running = self.probe.lock().unwrap().running;
            if !running {
                break;
            }
            // A probe is out: its verdict is one first-byte time away.
            if done.changed().await.is_err() {
                break;
            }
        }
        let seen = self.small_seen.fetch_add(1, Relaxed);
        let probe_now = {
            let mut p = self.probe.lock().unwrap();
            let due = p.attempts == 0 || seen >= p.last_at + PROBE_SPACING;
            if !p.running && p.attempts < PROBE_ATTEMPTS && p.inconclusive < PROBE_INCONCLUSIVE && due {
                p.running = true;
                p.attempts += 1;
                p.last_at = seen;
                true
            } else {
                false
            }
        };
        if probe_now {
            (probe_with(self.pipeline.clone(), self.probe.clone(), self.probe_done.clone(), req), false)
        } else {
            (self.pool.send(req), true)
        }
    }

    fn stats(&self) -> TransportStats {
        let mut s = add(self.pool.stats(), self.pipeline.stats());
        // What is really open: the lanes count a socket until it is dropped, where each
        // lane's own figure drops when it lets the connection go.
        let st = self.lanes.lock();
        s.connections_open = (st.sockets[BULK] + st.sockets[SMALL]) as u64;
        s.hedges_sent = self.hedger.sent.load(Relaxed);
        s.hedges_won = self.hedger.won.load(Relaxed);
        s
    }
}

const BULK: usize = 0;
const SMALL: usize = 1;

/// How fast the small lane's claim on connections ebbs after a burst: one connection per
/// step, so that shares do not flap with every arrival (a connection closed by one lane
/// and reopened by the other). `ferry bench mixed-hol --quick` (cap 50, smalls at 100/s
/// beside 100 bulk reads), TCP connections opened by auto's loaded run: 84 with a 1 s
/// hold then a drop to the current count, 73 with one step per 250 ms; a step of 1 s
/// (~30 first-byte times at S3's p50, LAB.md section 1) lets a claim ebb within seconds.
const SMALL_WANT_STEP: Duration = Duration::from_secs(1);

/// Places the small lane keeps from the start, before any small request is seen, at
/// most one in [`SMALL_RESERVE_FRACTION`] of the total: with none, bulk reads filled the
/// whole cap during mixed-hol's bulk-only warm-up and then closed connections for the
/// first smalls, each reopened by the pipeline (auto opened 61-65 TCP connections
/// beside the 50-connection pool's 50, `ferry bench mixed-hol --quick --peers none
/// --repeats 5`). As many as the lane ever claims from bulk ([`SMALL_CLAIM`]), so that
/// the claim is met from the reserve and nothing is handed over; a quarter, so that a
/// small cap (16 in `auto_lanes.rs`) keeps a few too; bulk alone loses at most a quarter
/// of the total (mixed-hol's bulk on two cores needs ~25 of its 49).
const SMALL_RESERVE: usize = SMALL_CLAIM;
const SMALL_RESERVE_FRACTION: usize = 4;

/// Most connections the small lane claims from bulk, however many smalls are in flight:
/// beyond it they are pipelined on the lane's connections (up to the depth) instead of
/// each taking a pool connection's place. Every place claimed beyond the reserve was a
/// pool connection closed and a pipeline connection opened (a handover): on a busy
/// machine mixed-hol's smalls reached 24 in flight, the pipeline opened 24 connections
/// and the pool handed over 19 (auto opened 69 TCP connections beside the pool's 50,
/// `ferry bench mixed-hol --quick --peers none`, `FERRY_LOG=ferry_wire::auto=debug`).
/// Eight: twice the ~4 in flight of mixed-hol's 100/s at S3's first-byte time, so a
/// burst still finds connections of its own; a small pipelined behind another waits at
/// most its body time (<= 1 MiB, ~12 ms at 90 MB/s, LAB.md section 1).
const SMALL_CLAIM: usize = 8;

/// The hook through which a lane (pool.rs, pipeline.rs) asks for connections of a cap it
/// shares with another lane. Calls come with the lane's own lock held: implementations
/// take no lock of a lane, and wake lanes only from spawned tasks.
pub(crate) trait ConnectionGate: Send + Sync {
    /// Takes a place for one more connection of this lane, if its share and the total allow.
    fn try_open(&self) -> bool;
    /// A place of this lane was given back (its socket closed, or it never opened one):
    /// called by [`Place`]'s drop, never directly.
    fn closed(&self);
    /// Sockets holding a place of this lane: `+1` when one is connected, `-1` once it is
    /// closed (counts what is really open, for [`AutoTransport::sockets_open`]).
    fn socket(&self, _delta: isize) {}
    /// Connections this lane must give back now (it gives them back as they free):
    /// those above its share that the cap or the other lane needs.
    fn excess(&self) -> usize;
    /// Requests in flight per pipelined connection now, at most the configured depth.
    fn depth(&self) -> usize {
        usize::MAX
    }
    /// This lane is closing `n` connections because it holds more than its share: their
    /// places go to the other lane (counted, see [`AutoTransport::handovers`]).
    fn handed_over(&self, _n: usize) {}
}

/// A connection's place under a gate's shared cap, given back when dropped. A lane takes
/// one before it opens a connection ([`ConnectionGate::try_open`] said yes) and moves it
/// into the socket once connected ([`PlacedIo`]), so the place is free again only once the
/// socket itself is closed: the other lane's next connection never overlaps it.
pub(crate) struct Place {
    gate: Option<Arc<dyn ConnectionGate>>,
    /// Held by a socket (counted in [`ConnectionGate::socket`]).
    socket: bool,
}

impl Place {
    /// A place from `gate`, or `None` when the gate has no room; always a place without one.
    pub(crate) fn take(gate: Option<&Arc<dyn ConnectionGate>>) -> Option<Place> {
        match gate {
            None => Some(Place { gate: None, socket: false }),
            Some(g) => g.try_open().then(|| Place { gate: Some(g.clone()), socket: false }),
        }
    }

    /// Wraps `io` so that this place is given back once the socket is dropped.
    pub(crate) fn hold(mut self, io: Box<dyn Io>) -> Box<dyn Io> {
        match &self.gate {
            None => io,
            Some(g) => {
                g.socket(1);
                self.socket = true;
                Box::new(PlacedIo { io, _place: self })
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(g) = self.gate.take() {
            if self.socket {
                g.socket(-1);
            }
            g.closed();
        }
    }
}

/// A socket holding its [`Place`]. Fields drop in order: the socket closes, then the
/// place is given back. Reads and writes go straight through.
struct PlacedIo {
    io: Box<dyn Io>,
    _place: Place,
}

impl AsyncRead for PlacedIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for PlacedIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The two HTTP/1.1 lanes' connections and demand, under one lock (module note).
struct Lanes {
    controller: Arc<Controller>,
    state: Mutex<LaneState>,
    /// Woken when a bulk request ends or the limit may have moved (`admit_bulk`).
    admit: Notify,
    pool: OnceLock<Weak<PoolTransport>>,
    pipeline: OnceLock<Weak<PipelineTransport>>,
}

struct LaneState {
    /// Connections open or opening, per lane.
    open: [usize; 2],
    /// Requests from `send` to the end of their body, per lane.
    active: [usize; 2],
    /// Most small requests active at once lately: follows a rise at once, ebbs by one
    /// per [`SMALL_WANT_STEP`] since `small_peak_at`.
    small_peak: usize,
    small_peak_at: Instant,
    /// Connections each lane closed to give its place to the other.
    handed_over: [u64; 2],
    /// Most connections each lane held at once.
    peak_open: [usize; 2],
    /// Sockets connected and not yet closed, per lane ([`Place`]), and the most at once
    /// of both lanes together.
    sockets: [usize; 2],
    peak_sockets: usize,
    /// Bulk requests admitted and not yet done ([`Lanes::admit_bulk`]).
    admitted_bulk: usize,
}

impl Lanes {
    fn new(controller: Arc<Controller>) -> Lanes {
        Lanes {
            controller,
            state: Mutex::new(LaneState {
                open: [0; 2],
                active: [0; 2],
                small_peak: 0,
                small_peak_at: Instant::now(),
                handed_over: [0; 2],
                peak_open: [0; 2],
                sockets: [0; 2],
                peak_sockets: 0,
                admitted_bulk: 0,
            }),
            admit: Notify::new(),
            pool: OnceLock::new(),
            pipeline: OnceLock::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections for both lanes together: the controller's limit, whole (the probe
    /// runs on the pipeline lane, inside it). A place is free again only once its socket
    /// is closed ([`Place`]), so a handover never puts one socket more than the limit open,
    /// even for a moment. (Before, a lane gave its place back when it let the connection
    /// go, before the socket closed: `auto_lanes.rs` `lanes_share_the_cap_by_demand` saw
    /// 9 open under a cap of 8 in a CI run, and the lanes shared the limit less one.)
    fn total(&self) -> usize {
        self.controller.limit().max(1)
    }

    /// Each lane's share of [`Lanes::total`] (the formula of the module note).
    fn shares(&self, st: &mut LaneState) -> [usize; 2] {
        let t = self.total();
        let steps = (st.small_peak_at.elapsed().as_millis() / SMALL_WANT_STEP.as_millis()) as usize;
        if steps > 0 {
            st.small_peak = st.small_peak.saturating_sub(steps).max(st.active[SMALL]);
            st.small_peak_at = Instant::now();
        }
        let small_kept = Self::small_want(st).min(SMALL_CLAIM).max(Self::small_reserve(t)).min((t / 2).max(1));
        let bulk = st.active[BULK].min(t.saturating_sub(small_kept));
        // A bulk request never waits for ever: one connection at least while any is active.
        let bulk = if st.active[BULK] > 0 { bulk.max(1) } else { bulk };
        [bulk, t - bulk.min(t)]
    }

    /// Connections the small lane wants: the most small requests active at once lately.
    fn small_want(st: &LaneState) -> usize {
        st.small_peak.max(st.active[SMALL])
    }

    /// Places of `t` that bulk never takes, small demand or not ([`SMALL_RESERVE`]).
    fn small_reserve(t: usize) -> usize {
        SMALL_RESERVE.min(t / SMALL_RESERVE_FRACTION)
    }

    /// Of the connections `lane` must give back now, those the other lane is waiting for
    /// (the rest go because the cap fell, and are no handover).
    fn wanted_by_other(&self, st: &mut LaneState, lane: usize) -> usize {
        let shares = self.shares(st);
        let t = self.total();
        let open = st.open[BULK] + st.open[SMALL];
        let other = 1 - lane;
        let other_demand = if other == BULK { st.active[BULK] } else { Self::small_want(st) };
        if self.controller.in_slow_start() {
            // The limit grows (or slow start ends) within a round or two: the lane short
            // of places gets them from the growth, not from connections closed for it
            // (module note, "handovers").
            return 0;
        }
        let other_short = other_demand.min(shares[other]).saturating_sub(st.open[other]);
        other_short.saturating_sub(t.saturating_sub(open))
    }

    /// Connections `lane` holds that it must give back now: those over its share, but
    /// only as many as the cap needs (the limit fell) or the other lane wants and cannot
    /// open in free places. A lane over its share that nobody needs keeps its connections:
    /// a ranged download's part ends a moment before the next one is sent, and closing
    /// the connection in between made auto open a new TCP connection for most parts
    /// (`ferry cp` of 4 x 1 GiB: 324 connections for 512 GETs, beside the pool's 16).
    fn excess(&self, st: &mut LaneState, lane: usize) -> usize {
        let shares = self.shares(st);
        let over_share = st.open[lane].saturating_sub(shares[lane]);
        if over_share == 0 {
            return 0;
        }
        // A fallen limit closes the pipeline's connections over it, not the pool's: bulk
        // requests are bounded by admission (`admit_bulk`), and the pool's connections
        // over the limit stay idle ("parked") until the limit grows back or the other lane
        // wants their places (module note, "Parked connections").
        let over_cap = if lane == BULK { 0 } else { (st.open[BULK] + st.open[SMALL]).saturating_sub(self.total()) };
        over_share.min(over_cap.max(self.wanted_by_other(st, lane)))
    }

    fn demand(&self, lane: usize, delta: isize) {
        let mut st = self.lock();
        st.active[lane] = st.active[lane].saturating_add_signed(delta);
        if lane == SMALL && st.active[SMALL] > st.small_peak {
            st.small_peak = st.active[SMALL];
            st.small_peak_at = Instant::now();
        }
        let other = 1 - lane;
        let excess = self.excess(&mut st, other);
        drop(st);
        if delta > 0 && excess > 0 {
            // This lane wants connections the other holds: the other starts giving them
            // back (the pool closes idle ones now, busy ones as they come free).
            if other == SMALL {
                if let Some(p) = self.pipeline.get().and_then(Weak::upgrade) {
                    p.nudge();
                }
            } else if let Some(p) = self.pool.get().and_then(Weak::upgrade) {
                p.nudge();
            }
        }
    }

    /// Wakes both lanes (they take their own locks, so never call this under one).
    fn nudge(&self) {
        if let Some(p) = self.pipeline.get().and_then(Weak::upgrade) {
            p.nudge();
        }
        if let Some(p) = self.pool.get().and_then(Weak::upgrade) {
            p.nudge();
        }
        self.admit.notify_waiters();
    }

    /// Waits until the bulk requests in flight are fewer than bulk's share, then counts
    /// this one in (module note, "Parked connections"): the limit bounds bulk requests
    /// here, not by closing the pool's connections.
    async fn admit_bulk(&self) {
        loop {
            let notified = self.admit.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.lock();
                let share = self.shares(&mut st)[BULK].max(1);
                if st.admitted_bulk < share {
                    st.admitted_bulk += 1;
                    return;
                }
            }
            notified.await;
        }
    }
}

/// One lane's view of `Lanes`.
struct LaneGate {
    lanes: Arc<Lanes>,
    lane: usize,
}

impl ConnectionGate for LaneGate {
    fn try_open(&self) -> bool {
        let mut st = self.lanes.lock();
        let share = self.lanes.shares(&mut st)[self.lane];
        let total = self.lanes.total();
        if st.open[BULK] + st.open[SMALL] < total && st.open[self.lane] < share {
            st.open[self.lane] += 1;
            st.peak_open[self.lane] = st.peak_open[self.lane].max(st.open[self.lane]);
            tracing::debug!(
                "auto: {} opens a connection: open {:?}, active {:?}, shares {share} of {total}, handed over {:?}",
                if self.lane == BULK { "pool" } else { "pipeline" },
                st.open,
                st.active,
                st.handed_over
            );
            true
        } else {
            false
        }
    }

    fn closed(&self) {
        let mut st = self.lanes.lock();
        st.open[self.lane] = st.open[self.lane].saturating_sub(1);
        drop(st);
        // Either lane may be waiting for this place (the socket closes after its lane let
        // it go); the drop may run under a lane's lock, so they are woken from a task.
        let lanes = Arc::downgrade(&self.lanes);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Some(lanes) = lanes.upgrade() {
                    lanes.nudge();
                }
            });
        }
    }

    fn socket(&self, delta: isize) {
        let mut st = self.lanes.lock();
        st.sockets[self.lane] = st.sockets[self.lane].saturating_add_signed(delta);
        st.peak_sockets = st.peak_sockets.max(st.sockets[BULK] + st.sockets[SMALL]);
    }

    fn excess(&self) -> usize {
        let mut st = self.lanes.lock();
        self.lanes.excess(&mut st, self.lane)
    }

    fn handed_over(&self, n: usize) {
        let mut st = self.lanes.lock();
        let given = n.min(self.lanes.wanted_by_other(&mut st, self.lane));
        st.handed_over[self.lane] += given as u64;
    }

    /// The configured depth while the controller is in slow start, the controller's limit
    /// after it: a SlowDown (which ends slow start) then halves the requests in flight,
    /// not only the connections. Not the limit in slow start too, as it was: with 1,000
    /// small GETs submitted at once, limit x limit in flight (16 at the start, the limit
    /// growing 1.5x per 100 ms round) was auto's ramp, and the run was over before it
    /// ended (module note, "small-objects"). The pipeline still opens a connection before
    /// it stacks a request behind another, so requests spread as the limit grows.
    fn depth(&self) -> usize {
        let c = &self.lanes.controller;
        if c.in_slow_start() {
            usize::MAX
        } else {
            c.limit()
        }
    }
}

/// A request counted in its lane's demand until its response body ends (or the request
/// fails, or its body is dropped).
struct Demand {
    lanes: Arc<Lanes>,
    lane: usize,
    /// Admitted under the bulk share ([`Lanes::admit_bulk`]): given back with the demand.
    admitted: bool,
    /// A small request's times, traced when its body ends (`FERRY_LOG=ferry_wire::auto=trace`).
    timing: Option<SmallTiming>,
}

/// Where a small request's time went: before its head (waiting in the client, then
/// `head_latency` from its first byte on the wire) and its body. Traced only.
struct SmallTiming {
    sent: Instant,
    head_at: Instant,
    head_latency: Option<Duration>,
    bytes: u64,
}

impl Drop for SmallTiming {
    fn drop(&mut self) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let to_head = self.head_at - self.sent;
        let head = self.head_latency.unwrap_or_default();
        tracing::trace!(
            "auto: small done: {} bytes, total {:.1} ms = client {:.1} + head {:.1} + body {:.1}",
            self.bytes,
            ms(self.sent.elapsed()),
            ms(to_head.saturating_sub(head)),
            ms(head.min(to_head)),
            ms(self.head_at.elapsed())
        );
    }
}

impl Demand {
    fn new(lanes: Arc<Lanes>, lane: usize) -> Demand {
        lanes.demand(lane, 1);
        Demand { lanes, lane, admitted: false, timing: None }
    }

    fn until_body_end(self, mut r: Response) -> Response {
        let len = r.body.content_length();
        let body = std::mem::replace(&mut r.body, ResponseBody::empty());
        // Goodput for the controller's growth (controller.rs): bulk bytes only. A small
        // request's worth is its first byte, not its bytes (module note, "small-objects").
        let controller = (self.lane == BULK).then(|| self.lanes.controller.clone());
        let mut held = Some(self);
        let stream = body.map(move |item| {
            match item {
                Ok(ref b) if !b.is_empty() => {
                    if let Some(c) = &controller {
                        c.delivered(b.len() as u64);
                    }
                    if let Some(t) = held.as_mut().and_then(|d| d.timing.as_mut()) {
                        t.bytes += b.len() as u64;
                    }
                }
                _ => {
                    held.take();
                }
            }
            item
        });
        // The stream (and the demand with it) also ends when the body is dropped; its
        // last chunk does not come back as an empty one, so the count ends at the drop.
        r.body = ResponseBody::new(stream.boxed(), len);
        r
    }
}

impl Drop for Demand {
    fn drop(&mut self) {
        if self.admitted {
            self.lanes.lock().admitted_bulk -= 1;
        }
        self.lanes.demand(self.lane, -1);
        if self.admitted {
            self.lanes.admit.notify_waiters();
        }
    }
}

/// Sends `req` and a copy of it queued together on one connection of the small lane's
/// pipeline `t` ([`PipelineTransport::send_pair`]), so that they are written in one
/// batch; returns the first response and discards the copy's. The probe ends when the
/// copy's response has been read.
fn probe_with(
    t: Arc<PipelineTransport>,
    state: Arc<Mutex<Probe>>,
    done: watch::Sender<u64>,
    req: Request,
) -> BoxFuture<'static, Result<Response, WireError>> {
    let copy = copy_of(&req);
    let [first, second] = t.send_pair(req, copy);
    Box::pin(async move {
        tokio::spawn(async move {
            let copy = second.await;
            let answered_well = match copy {
                Ok(r) => {
                    r.status != http::StatusCode::BAD_REQUEST
                        && r.status != http::StatusCode::HTTP_VERSION_NOT_SUPPORTED
                        && r.body.collect(PROBE_DISCARD_LIMIT).await.is_ok()
                }
                Err(_) => false,
            };
            let verified = t.verified();
            tracing::debug!("auto: pipeline probe done, verified={verified}");
            let mut p = state.lock().unwrap();
            p.running = false;
            if !verified && answered_well {
                p.attempts -= 1;
                p.inconclusive += 1;
            }
            drop(p);
            done.send_modify(|n| *n += 1);
        });
        first.await
    })
}

fn add(a: TransportStats, b: TransportStats) -> TransportStats {
    TransportStats {
        connections_opened: a.connections_opened + b.connections_opened,
        connections_open: a.connections_open + b.connections_open,
        requests_sent: a.requests_sent + b.requests_sent,
        requests_resent: a.requests_resent + b.requests_resent,
        hedges_sent: a.hedges_sent + b.hedges_sent,
        hedges_won: a.hedges_won + b.hedges_won,
    }
}

/// The rule of the module note: a HEAD, or a GET of at most [`SMALL_GET_BYTES`] (by its
/// Range, else by the caller's [`Request::size_hint`]), without a body.
pub fn is_small(req: &Request) -> bool {
    if !req.is_pipelineable() {
        return false;
    }
    if req.method == Method::HEAD {
        return true;
    }
    match range_len(&req.headers) {
        Some(n) => n <= SMALL_GET_BYTES,
        None => !req.headers.contains_key(RANGE) && req.size_hint.is_some_and(|n| n <= SMALL_GET_BYTES),
    }
}

/// A request's lane (issue 5: small requests never queue behind a large transfer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Moves at most [`SMALL_GET_BYTES`] either way, as far as the request shows.
    Small,
    /// Moves more, or an unknown amount ("unknown counts as large until proven small").
    Bulk,
}

/// The lane of a request: [`is_small`] GETs and HEADs; requests with a body of at most
/// [`SMALL_GET_BYTES`] other than GET (PUT, POST, DELETE: S3 answers them with a short
/// XML or an empty body); everything else is bulk.
pub fn lane(req: &Request) -> Lane {
    if is_small(req) || (req.method != Method::GET && req.body.len() <= SMALL_GET_BYTES) {
        Lane::Small
    } else {
        Lane::Bulk
    }
}

/// Bytes asked for by a single `Range: bytes=a-b` or `bytes=-n` (RFC 9110 section
/// 14.1.2); `None` for open-ended, multiple or unparseable ranges.
pub fn range_len(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get(RANGE)?.to_str().ok()?.trim();
    let spec = v.strip_prefix("bytes=")?.trim();
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        return b.parse().ok();
    }
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    b.checked_sub(a).map(|d| d + 1)
}

impl Inner {
    async fn choose(&self) -> Result<&Chosen, WireError> {
        self.chosen
            .get_or_try_init(|| async {
                let conn = self.connector.connect().await?;
                if conn.alpn_h2 {
                    tracing::debug!("auto: {} chose h2 in ALPN", self.config.endpoint.authority());
                    let h2 = H2Transport::with_connector(self.config.clone(), self.connector.clone());
                    h2.adopt(conn);
                    Ok(Chosen::H2(h2))
                } else {
                    tracing::debug!("auto: {} chose HTTP/1.1 in ALPN", self.config.endpoint.authority());
                    let h1 = H1::new(&self.config, self.connector.clone(), self.controller.clone())?;
                    h1.pool.adopt(conn).await?;
                    Ok(Chosen::H1(h1))
                }
            })
            .await
    }
}

impl Transport for AutoTransport {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            match inner.choose().await? {
                Chosen::H2(h2) => {
                    let observation = inner.controller.observe();
                    let result = h2.send(req).await;
                    match &result {
                        Ok(r) if matches!(r.status.as_u16(), 503 | 429) => observation.throttled(),
                        Ok(r) => match r.meta.head_latency {
                            Some(latency) => observation.success_with_latency(latency),
                            None => observation.success_unmeasured(),
                        },
                        Err(_) => drop(observation),
                    }
                    result
                }
                Chosen::H1(h1) => h1.send(req).await,
            }
        })
    }

    fn controller(&self) -> Option<Arc<Controller>> {
        Some(self.inner.controller.clone())
    }

    fn stats(&self) -> TransportStats {
        match self.inner.chosen.get() {
            Some(Chosen::H2(h2)) => h2.stats(),
            Some(Chosen::H1(h1)) => h1.stats(),
            None => TransportStats::default(),
        }
    }

    fn name(&self) -> &'static str {
        "auto"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn get(range: Option<&str>) -> Request {
        let mut r = Request::new(Method::GET, "/b/k");
        if let Some(v) = range {
            r.headers.insert(RANGE, HeaderValue::from_str(v).unwrap());
        }
        r
    }

    #[test]
    fn small_requests_are_heads_and_short_ranges() {
        assert!(is_small(&Request::new(Method::HEAD, "/b/k")));
        assert!(is_small(&get(Some("bytes=0-1048575"))));
        assert!(!is_small(&get(Some("bytes=0-1048576"))));
        assert!(is_small(&get(Some("bytes=-4096"))));
        assert!(!is_small(&get(Some("bytes=100-"))), "open-ended");
        assert!(!is_small(&get(Some("bytes=0-1,5-9"))), "multiple ranges");
        assert!(!is_small(&get(None)), "unknown size");
        let hinted = |n: u64, range: Option<&str>| {
            let mut r = get(range);
            r.size_hint = Some(n);
            r
        };
        assert!(is_small(&hinted(16 * 1024, None)), "known small from a listing");
        assert!(!is_small(&hinted(SMALL_GET_BYTES + 1, None)), "known large");
        assert!(!is_small(&hinted(16 * 1024, Some("bytes=100-"))), "an open range is not bounded by the hint's rule");
        assert!(!is_small(&Request::new(Method::PUT, "/b/k")));
        assert_eq!(lane(&Request::new(Method::PUT, "/b/k")), Lane::Small, "an empty PUT (CopyObject, CreateBucket)");
        let mut part = Request::new(Method::PUT, "/b/k?partNumber=1");
        part.body = crate::RequestBody::Full(bytes::Bytes::from(vec![0u8; 8 << 20]));
        assert_eq!(lane(&part), Lane::Bulk, "an 8 MiB part");
        assert_eq!(lane(&get(None)), Lane::Bulk, "unknown size");
        assert_eq!(lane(&get(Some("bytes=0-4095"))), Lane::Small);
        assert!(!is_small(&Request::new(Method::DELETE, "/b/k")));
    }

    /// A socket that counts itself among the live ones until it is dropped.
    struct Counted {
        io: tokio::io::DuplexStream,
        live: Arc<AtomicU64>,
    }

    impl Counted {
        fn new(io: tokio::io::DuplexStream, live: &Arc<AtomicU64>) -> Counted {
            live.fetch_add(1, Relaxed);
            Counted { io, live: live.clone() }
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.live.fetch_sub(1, Relaxed);
        }
    }

    impl AsyncRead for Counted {
        fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
        }
        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_flush(cx)
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
        }
    }

    /// The handover race, deterministically (module note, "One controller"): the pool
    /// lets an idle connection go for the small lane, but its socket closes only when the
    /// connection's own task next runs. On a current-thread runtime nothing runs between
    /// the two, so a place freed when the pool let go (the old order) would let the
    /// pipeline open a socket while both of the pool's were still open: three under a
    /// limit of two. The place must come back only with the socket.
    #[tokio::test(flavor = "current_thread")]
    async fn a_place_comes_back_only_once_its_socket_is_closed() {
        let config = TransportConfig::new(crate::Endpoint::parse("http://127.0.0.1:9").unwrap());
        let connector = Connector::new(&config, &[]).unwrap();
        let controller = Controller::new(ControllerOptions { initial: 4, max: 4, ..ControllerOptions::default() });
        // A SlowDown: limit 2, slow start over (lanes hand places over only after it).
        controller.observe().throttled();
        assert_eq!((controller.limit(), controller.in_slow_start()), (2, false));
        let h1 = H1::new(&config, connector, controller).unwrap();
        // Two bulk requests fill the limit with two pool connections (sockets here are
        // in-memory pipes whose far ends stay open: only the client closes them).
        let live = Arc::new(AtomicU64::new(0));
        let mut far_ends = Vec::new();
        h1.lanes.demand(BULK, 2);
        for id in 1..=2 {
            let (near, far) = tokio::io::duplex(1 << 16);
            far_ends.push(far);
            let conn = crate::conn::Connection {
                io: Box::new(Counted::new(near, &live)),
                alpn_h2: false,
                receive_buffer: None,
                id,
                peer: ([127, 0, 0, 1], 9).into(),
            };
            h1.pool.adopt(conn).await.unwrap();
        }
        h1.lanes.demand(BULK, -2);
        let sockets = || h1.lanes.lock().sockets;
        let places = || h1.lanes.lock().open;
        assert_eq!((h1.pool.idle_connections(), live.load(Relaxed), sockets(), places()), (2, 2, [2, 0], [2, 0]));
        let small_gate: Arc<dyn ConnectionGate> = Arc::new(LaneGate { lanes: h1.lanes.clone(), lane: SMALL });
        assert!(Place::take(Some(&small_gate)).is_none(), "no place beside two sockets under a limit of two");

        // A small request arrives: the pool gives one idle connection up for it.
        h1.lanes.demand(SMALL, 1);
        assert_eq!(h1.pool.idle_connections(), 1, "the pool let one connection go");
        assert_eq!(live.load(Relaxed), 2, "its socket is not closed yet (its task has not run)");
        assert!(
            Place::take(Some(&small_gate)).is_none(),
            "the pipeline may not open a third socket while both are open"
        );

        // The connection's task runs and closes the socket: now the place is free.
        for _ in 0..100 {
            if live.load(Relaxed) < 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(live.load(Relaxed), 1, "the let-go connection's socket never closed");
        let place = Place::take(Some(&small_gate)).expect("the closed socket's place for the small lane");
        assert_eq!(
            (sockets(), places()),
            ([1, 0], [1, 1]),
            "the bulk lane's socket and place, and the small lane's place"
        );
        drop(place);
        assert_eq!(h1.lanes.lock().peak_sockets, 2);
        drop(far_ends);
    }
}
