//! The two HTTP/1.1 lanes' shares of one connection cap.
//!
//! On HTTP/1.1 the controller's limit is the number of connections auto may hold: it starts at 4, grows
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

use crate::controller::Controller;
use crate::gate::ConnectionGate;
use crate::pipeline::PipelineTransport;
use crate::pool::PoolTransport;
use crate::{Response, ResponseBody};
use futures_util::StreamExt;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub(super) const BULK: usize = 0;
pub(super) const SMALL: usize = 1;

/// How fast the small lane's claim on connections ebbs after a burst: one connection per
/// step, so that shares do not flap with every arrival (a connection closed by one lane
/// and reopened by the other). `ferry bench mixed-hol --quick` (cap 50, smalls at 100/s
/// beside 100 bulk reads), TCP connections opened by auto's loaded run: 84 with a 1 s
/// hold then a drop to the current count, 73 with one step per 250 ms; a step of 1 s
/// (~30 first-byte times at S3's p50, LAB.md section 1) lets a claim ebb within seconds.
pub(super) const SMALL_WANT_STEP: Duration = Duration::from_secs(1);

/// Places the small lane keeps from the start, before any small request is seen, at
/// most one in [`SMALL_RESERVE_FRACTION`] of the total: with none, bulk reads filled the
/// whole cap during mixed-hol's bulk-only warm-up and then closed connections for the
/// first smalls, each reopened by the pipeline (auto opened 61-65 TCP connections
/// beside the 50-connection pool's 50, `ferry bench mixed-hol --quick --peers none
/// --repeats 5`). As many as the lane ever claims from bulk ([`SMALL_CLAIM`]), so that
/// the claim is met from the reserve and nothing is handed over; a quarter, so that a
/// small cap (16 in `auto_lanes.rs`) keeps a few too; bulk alone loses at most a quarter
/// of the total (mixed-hol's bulk on two cores needs ~25 of its 49).
pub(super) const SMALL_RESERVE: usize = SMALL_CLAIM;
pub(super) const SMALL_RESERVE_FRACTION: usize = 4;

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
pub(super) const SMALL_CLAIM: usize = 8;

/// The two HTTP/1.1 lanes' connections and demand, under one lock (module note).
pub(super) struct Lanes {
    pub(super) controller: Arc<Controller>,
    pub(super) state: Mutex<LaneState>,
    /// Woken when a bulk request ends or the limit may have moved (`admit_bulk`).
    pub(super) admit: Notify,
    pub(super) pool: OnceLock<Weak<PoolTransport>>,
    pub(super) pipeline: OnceLock<Weak<PipelineTransport>>,
}

pub(super) struct LaneState {
    /// Connections open or opening, per lane.
    pub(super) open: [usize; 2],
    /// Requests from `send` to the end of their body, per lane.
    pub(super) active: [usize; 2],
    /// Most small requests active at once lately: follows a rise at once, ebbs by one
    /// per [`SMALL_WANT_STEP`] since `small_peak_at`.
    pub(super) small_peak: usize,
    pub(super) small_peak_at: Instant,
    /// Connections each lane closed to give its place to the other.
    pub(super) handed_over: [u64; 2],
    /// Most connections each lane held at once.
    pub(super) peak_open: [usize; 2],
    /// Sockets connected and not yet closed, per lane ([`Place`]), and the most at once
    /// of both lanes together.
    pub(super) sockets: [usize; 2],
    pub(super) peak_sockets: usize,
    /// Bulk requests admitted and not yet done ([`Lanes::admit_bulk`]).
    pub(super) admitted_bulk: usize,
}

impl Lanes {
    pub(super) fn new(controller: Arc<Controller>) -> Lanes {
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

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bulk requests admitted and not yet done.
    pub(super) fn bulk_admitted(&self) -> usize {
        self.lock().admitted_bulk
    }

    /// Connections for both lanes together: the controller's limit, whole (the probe
    /// runs on the pipeline lane, inside it). A place is free again only once its socket
    /// is closed ([`Place`]), so a handover never puts one socket more than the limit open,
    /// even for a moment. (Before, a lane gave its place back when it let the connection
    /// go, before the socket closed: `auto_lanes.rs` `lanes_share_the_cap_by_demand` saw
    /// 9 open under a cap of 8 in a CI run, and the lanes shared the limit less one.)
    pub(super) fn total(&self) -> usize {
        self.controller.limit().max(1)
    }

    /// Each lane's share of [`Lanes::total`] (the formula of the module note).
    pub(super) fn shares(&self, st: &mut LaneState) -> [usize; 2] {
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
    pub(super) fn small_want(st: &LaneState) -> usize {
        st.small_peak.max(st.active[SMALL])
    }

    /// Places of `t` that bulk never takes, small demand or not ([`SMALL_RESERVE`]).
    pub(super) fn small_reserve(t: usize) -> usize {
        SMALL_RESERVE.min(t / SMALL_RESERVE_FRACTION)
    }

    /// Of the connections `lane` must give back now, those the other lane is waiting for
    /// (the rest go because the cap fell, and are no handover).
    pub(super) fn wanted_by_other(&self, st: &mut LaneState, lane: usize) -> usize {
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
    pub(super) fn excess(&self, st: &mut LaneState, lane: usize) -> usize {
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

    pub(super) fn demand(&self, lane: usize, delta: isize) {
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
    pub(super) fn nudge(&self) {
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
    pub(super) async fn admit_bulk(&self) {
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
pub(super) struct LaneGate {
    pub(super) lanes: Arc<Lanes>,
    pub(super) lane: usize,
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
pub(super) struct Demand {
    pub(super) lanes: Arc<Lanes>,
    pub(super) lane: usize,
    /// Admitted under the bulk share ([`Lanes::admit_bulk`]): given back with the demand.
    pub(super) admitted: bool,
    /// A small request's times, traced when its body ends (`FERRY_LOG=ferry_wire::auto=trace`).
    pub(super) timing: Option<SmallTiming>,
}

/// Where a small request's time went: before its head (waiting in the client, then
/// `head_latency` from its first byte on the wire) and its body. Traced only.
pub(super) struct SmallTiming {
    pub(super) sent: Instant,
    pub(super) head_at: Instant,
    pub(super) head_latency: Option<Duration>,
    pub(super) bytes: u64,
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
    pub(super) fn new(lanes: Arc<Lanes>, lane: usize) -> Demand {
        lanes.demand(lane, 1);
        Demand { lanes, lane, admitted: false, timing: None }
    }

    pub(super) fn until_body_end(self, mut r: Response) -> Response {
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
