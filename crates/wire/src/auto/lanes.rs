//! The two HTTP/1.1 lanes of auto, bulk (the pool; and a pipeline of its own once the
//! endpoint verified pipelining) and small (the pipeline), sharing one connection cap by
//! demand.
//!
//! The cap T is the controller's limit: it starts at 4, grows by slow start, halves on
//! SlowDown, never exceeds `max_connections` (controller.rs). The lanes split it:
//!
//! ```text
//!   small_want  = most small requests in flight lately (ebbs by one per SMALL_WANT_STEP)
//!   reserve     = min(SMALL_RESERVE, T / SMALL_RESERVE_FRACTION), once a small request
//!                 was seen; 0 before
//!   small kept  = min(max(min(small_want, SMALL_CLAIM), reserve), T/2)
//!   bulk share  = min(bulk requests in flight, T - small kept)    (>= 1 while any is active)
//!   small share = T - bulk share
//! ```
//!
//! Small requests alone may use all of T. Bulk requests get connections back, except those
//! the small lane keeps (at most half of T), so that each small request has a connection
//! of its own when it can; beyond [`SMALL_CLAIM`] small requests are pipelined on the
//! lane's connections rather than take more places from bulk.
//!
//! Each lane asks through a [`ConnectionGate`] (gate.rs) before it opens a connection.
//! Both lanes are counted under one lock, and a place is taken before a socket connects and
//! given back only once the socket is closed: the sockets open never exceed T, even during
//! a handover (`AutoTransport::sockets_open` keeps the peak, which the tests check).
//!
//! ```text
//!   a lane's connection:  Open within share ── share falls ──► Over share
//!     Over share ── nobody needs the place ──► kept (a bulk dip between two ranged parts)
//!     Over share ── the other lane is short and no place is free, or (pipeline only) the
//!                   limit fell ──► given back as it frees: the pool closes it when idle,
//!                   the pipeline stops placing on it and closes it once answered
//!   no handover while the controller is in slow start below the cap: growth comes first,
//!   unless the lane short of places has no connection at all
//! ```
//!
//! The reserve: from the first small request on, the small lane keeps a few places that
//! bulk never takes, so that the small requests of a mixed load find a connection of
//! their own without waiting for a bulk part to end. Before any small request, bulk may
//! have all of T: a caller that only moves bulk (a copy tool's workers, a commit's
//! read-modify-write loop) would otherwise run on three quarters of what a forced pool
//! gives it. The first small request then gets its first place handed over, as bulk's
//! connections free (the cost: one bulk part's remaining time, once).
//!
//! Bulk admission ([`Lanes::admit_bulk`]): a bulk request waits until fewer than bulk's
//! share are in flight. A fallen limit bounds bulk requests there instead of closing the
//! pool's connections, which stay idle ("parked") until the limit grows back, the small
//! lane wants their places, or the idle time-out; a parked connection holds its place.
//!
//! Bulk depth: a bulk GET may go to the bulk lane's own pipeline, [`BULK_DEPTH`] deep,
//! instead of the pool, and bulk admission then lets twice bulk's share in flight. Each
//! connection has the next part written while it reads one, so the part's first byte is
//! waited for during the body before it, not after it: one part at a time, an S3
//! connection idles ~30 ms (the first byte) between two 8 MiB parts of ~93 ms (90 MB/s),
//! a quarter of its time. Where the first byte is short, or the client's CPU is the bound
//! (loopback), the pipeline's deeper queues cost more than they hide, and no latency
//! figure tells the two apart: under load, a loopback server's first byte is its CPU
//! queue, as long as a cloud store's think time. So the choice is measured
//! ([`DepthTrial`]): once the endpoint has verified pipelining (probe.rs), the pool's
//! goodput over a few rounds, then the bulk pipeline's; the pipeline stays only if it
//! moved clearly more. Requests with a body (uploads) stay on the pool. The two share
//! bulk's places: the pool gives back the idle connections the pipelined GETs need beyond
//! the places they could open ([`Lanes::bulk_yields`], counted in `LaneState::yielded`), and the
//! bulk pipeline gives the pool back what its requests need the same way. A request
//! that waits for admission asks again at each wake whether it may pipeline, so requests
//! queued before a switch do not stay held to one per connection after it. A declined
//! trial closes the bulk pipeline's connections (its gate counts them all as excess), or
//! their places would stay out of the pool's reach until their idle time-out.
//!
//! With bulk pipelined, neither the bulk pipeline's head latencies nor the small lane's
//! feed the controller's back-off (h1.rs; the pool's uploads still do): the bulk
//! pipeline's requests mostly wait behind a response, and the small lane's first bytes
//! then carry the server's queue under twice the bulk requests. Fed, they pulled the limit
//! well below the cap, where the forced pipeline keeps every connection and moves more
//! (docs/lab/wire-auto-paced.md, "Bulk depth decided by a trial"). Growth still follows
//! goodput, and a throttle still halves the limit.
//!
//! Pipeline depth (`LaneGate::depth`): the configured depth while the controller is in
//! slow start, the limit after it, so that a SlowDown halves requests in flight too.
//!
//! Small demand: in the controller's first slow start (before any throttle or latency
//! back-off), with no bulk request active, the small requests routed to the pipeline lane
//! raise the limit to their number at once (at most the cap) instead of letting it climb
//! there by one per success. Not beside bulk requests: there slow start's goodput rule
//! sizes the cap, and small requests that pile up behind a slow first byte (the client's
//! own CPU load, in `tests/auto_lanes.rs`' mixed load) would raise it for bulk too. Slow start finds where more connections stop adding bulk bytes per second;
//! a small request's worth is its first byte, so for a burst of small requests it only
//! added a first-byte time or two at four connections before the rate (on
//! `ferry bench small-objects --quick`, about half of auto's ~100 ms start-up cost; the
//! probe's verdict was the other half). A throttle halves the raised limit as any other.
//!
//! Bulk demand: in the same first slow start, bulk requests active at once (admitted or
//! waiting for admission) raise the limit to their number, at most [`BULK_START_CAP`].
//! A caller that keeps n bulk transfers in flight from its own tasks (a read-modify-write
//! loop, a copy tool's workers) has chosen n for this endpoint as surely as a batch
//! call's `concurrency` does, and a forced pool would open n connections for it at once;
//! climbing from 4 costs such a caller several first-byte times per connection it lacks.
//! The cap is low because the rounds at the start are where the controller learns the
//! endpoint's unloaded first-byte time, the floor its latency back-off compares against;
//! above the cap slow start's goodput rule decides.
//!
//! A request counts in its lane ([`Demand`]) from `send` to the end of its body (or its
//! failure, or the drop of its body). Measurements behind the rules and constants, and
//! the commands that repeat them: docs/lab/wire-auto-lanes.md.

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

/// Requests per connection of the bulk lane's pipeline, once the endpoint verified
/// pipelining (module note, "Bulk depth"): a second ranged GET written behind each one
/// being read. Two suffice while a part's body takes longer than a first byte (8 MiB at
/// S3's 90 MB/s per connection: ~93 ms against a ~30 ms p50); deeper would only queue
/// parts behind parts. Measured with `ferry bench mixed-hol` (auto's loaded large rate
/// beside h1-pipeline's; docs/lab/wire-auto-paced.md, "Bulk depth").
pub(super) const BULK_DEPTH: usize = 2;

/// Goodput rounds each arm of the bulk-depth trial is measured over ([`DepthTrial`]):
/// three, as for a full pipe, since one round's rate is noisy.
pub(super) const TRIAL_ROUNDS: usize = 3;

/// The bulk pipeline is kept when its best round moved this much more per place than the
/// pool's best: it also costs the client more CPU per byte and deeper queues, so a tie goes
/// to the pool. On the s3 profile it moves ~1.3x the pool's per place (mixed-hol's
/// h1-pipeline and h1-pool rows), on lan ~0.85x. Re-measure with
/// `scripts/auto-profiles.sh --workloads mixed-hol` (docs/lab/wire-auto-paced.md, "Bulk depth").
pub(super) const TRIAL_GAIN: f64 = 1.1;

/// The pipeline arm ends at its first counted round when that round moved less than this
/// fraction of the pool's best per place: the pipeline could still win only with a later
/// round ~1.4x this one, and every round of the arm on an endpoint where the pool is
/// faster costs bulk goodput. On lan a pipeline round moves 0.6-0.75x the pool's best per
/// place; on s3 1.3-1.4x. Re-measure as for [`TRIAL_GAIN`] (`FERRY_LOG=ferry_wire::auto::lanes=debug`
/// prints each arm's rounds).
pub(super) const TRIAL_EARLY_OUT: f64 = 0.8;

/// Whether bulk GETs go to the bulk pipeline (module note, "Bulk depth"), decided once
/// per transport by trying both: first [`TRIAL_ROUNDS`] goodput rounds on the pool, then
/// as many on the bulk pipeline (the round under way at the switch, which carries both,
/// not counted); the pipeline is kept if its best round's rate per place beats the pool's
/// by [`TRIAL_GAIN`], else bulk goes back to the pool for good; a pipeline round under
/// [`TRIAL_EARLY_OUT`] of the pool's best ends the arm at once. Per place, because the
/// limit may still grow between the two arms (slow start).
#[derive(Debug, Default)]
pub(super) struct DepthTrial {
    phase: TrialPhase,
    /// The controller's last goodput round folded in.
    seen: u64,
    /// The round that ended when the pipeline arm began.
    switched_at: u64,
    pool: Vec<f64>,
    pipeline: Vec<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum TrialPhase {
    #[default]
    Pool,
    Pipeline,
    Kept,
    Declined,
}

impl DepthTrial {
    /// Folds in the controller's last goodput round (`(index, bytes/s per place)`, when
    /// it is new) and says whether bulk GETs pipeline now. Called only once the endpoint
    /// has verified pipelining, so rounds before that do not count.
    pub(super) fn pipelined(&mut self, last: Option<(u64, f64)>) -> bool {
        if let Some((n, rate)) = last.filter(|l| l.0 > self.seen) {
            let first = self.seen == 0;
            self.seen = n;
            match self.phase {
                // The round that ends first may have begun before the verdict.
                TrialPhase::Pool if !first => {
                    self.pool.push(rate);
                    if self.pool.len() >= TRIAL_ROUNDS {
                        self.phase = TrialPhase::Pipeline;
                        self.switched_at = n;
                    }
                }
                TrialPhase::Pipeline if n >= self.switched_at + 2 => {
                    self.pipeline.push(rate);
                    let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
                    let (pool, pipeline) = (best(&self.pool), best(&self.pipeline));
                    let behind = self.pipeline.len() == 1 && rate < TRIAL_EARLY_OUT * pool;
                    if behind || self.pipeline.len() >= TRIAL_ROUNDS {
                        self.phase =
                            if pipeline >= TRIAL_GAIN * pool { TrialPhase::Kept } else { TrialPhase::Declined };
                        tracing::debug!(
                            "auto: bulk depth trial: pool {:.1} MB/s per place (rounds {:.1?}), bulk pipeline {:.1} (rounds {:.1?}): {:?}",
                            pool / 1e6,
                            self.pool.iter().map(|r| r / 1e6).collect::<Vec<_>>(),
                            pipeline / 1e6,
                            self.pipeline.iter().map(|r| r / 1e6).collect::<Vec<_>>(),
                            self.phase
                        );
                    }
                }
                _ => {}
            }
        }
        matches!(self.phase, TrialPhase::Pipeline | TrialPhase::Kept)
    }

    pub(super) fn phase(&self) -> TrialPhase {
        self.phase
    }
}

/// How fast the small lane's claim on connections ebbs after a burst: one connection per
/// step, so that shares do not flap with every arrival (a connection closed by one lane
/// and reopened by the other); one second, ~30 first-byte times at S3's p50, lets a claim
/// ebb within seconds (see docs/lab/wire-auto-lanes.md; re-measure with `ferry bench
/// mixed-hol --quick --peers none`, counting connections opened).
pub(super) const SMALL_WANT_STEP: Duration = Duration::from_secs(1);

/// Places the small lane keeps once a small request has been seen (module note, "The
/// reserve"), at most one in [`SMALL_RESERVE_FRACTION`] of the total: as many as the
/// lane ever claims from bulk ([`SMALL_CLAIM`]), so that the claim is met from the
/// reserve and nothing more is handed over; a quarter, so that a small cap (16 in
/// `auto_lanes.rs`) keeps a few too, and bulk beside small requests loses at most a
/// quarter (see docs/lab/wire-auto-lanes.md; re-measure with `ferry bench mixed-hol
/// --quick --peers none --repeats 5`).
pub(super) const SMALL_RESERVE: usize = SMALL_CLAIM;
pub(super) const SMALL_RESERVE_FRACTION: usize = 4;

/// Most connections the small lane claims from bulk, however many small requests are in
/// flight: beyond it they are pipelined on the lane's connections instead of each taking
/// a pool connection's place (a handover). Four: about the ~4 in flight of mixed-hol's
/// 100/s at S3's first-byte time. With eight (twice that), bulk held 42 of mixed-hol's 50
/// connections, and on the s3 profile, whose rate is per connection, auto's large reads
/// moved 0.84-0.91x the 50-connection pool's bytes; with four, 1.00x and no connection
/// handed over, the quick runs' small p99 the same within their spread, the full size's
/// ~40% higher (still half the pool's; see
/// docs/lab/wire-auto-paced.md, "mixed-hol: the small lane's places"; re-measure with
/// `ferry bench mixed-hol --quick --peers none --auto-max-connections 50,58`, whose second
/// row gives auto's bulk the pool's 50).
pub(super) const SMALL_CLAIM: usize = 4;

/// The most bulk demand raises the controller's first start to (module note, "Bulk
/// demand"). Eight: twice the initial 4, so a caller's 16 transfers skip slow start's
/// first rounds. Higher starts measure the head-latency floor
/// (controller.rs, "Rising head latency") already under load: at 16, on an endpoint whose
/// first byte grows with every request in flight (`auto_latency.rs`), the floor read at 16
/// was within the 2x tolerance of the latency at the cap and the back-off never fired.
/// Figures for 8 and 16: docs/lab/wire-auto-every-row.md, "commit"; re-measure with
/// `scripts/auto-profiles.sh --workloads commit,mixed-hol --profiles s3,gcs,azure`.
pub(super) const BULK_START_CAP: usize = 8;

/// The two HTTP/1.1 lanes' connections and demand, under one lock (module note).
pub(super) struct Lanes {
    pub(super) controller: Arc<Controller>,
    pub(super) state: Mutex<LaneState>,
    /// Woken when a bulk request ends or the limit may have moved (`admit_bulk`).
    pub(super) admit: Notify,
    pub(super) pool: OnceLock<Weak<PoolTransport>>,
    pub(super) pipeline: OnceLock<Weak<PipelineTransport>>,
    /// The bulk lane's pipeline: ranged GETs two deep per connection once the endpoint
    /// verified pipelining ([`BULK_DEPTH`]).
    pub(super) bulk_pipeline: OnceLock<Weak<PipelineTransport>>,
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
    /// A small request has been counted: the reserve is kept from then on (module note,
    /// "The reserve").
    pub(super) small_seen: bool,
    /// Connections of the bulk lane that are the pool's (the rest are the bulk pipeline's).
    pub(super) pool_open: usize,
    /// Bulk GETs admitted to the bulk pipeline and not yet done: the pool gives back
    /// the connections they need and cannot find free ([`Lanes::bulk_yields`]).
    pub(super) pipelined_bulk: usize,
    /// Pool connections closed so that their places go to the bulk pipeline (within the
    /// bulk lane, so not in `handed_over`).
    pub(super) yielded: u64,
    /// The depth trial sent bulk back to the pool: the bulk pipeline's connections go.
    pub(super) bulk_pipeline_declined: bool,
    /// Bulk pipeline connections closed for the pool: the trial declined it, or the pool's
    /// requests needed their places ([`Lanes::bulk_yields`]); within the bulk lane, so not
    /// in `handed_over`.
    pub(super) returned: u64,
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
                small_seen: false,
                pool_open: 0,
                pipelined_bulk: 0,
                yielded: 0,
                bulk_pipeline_declined: false,
                returned: 0,
            }),
            admit: Notify::new(),
            pool: OnceLock::new(),
            pipeline: OnceLock::new(),
            bulk_pipeline: OnceLock::new(),
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
    /// even for a moment.
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
        let reserve = if st.small_seen { Self::small_reserve(t) } else { 0 };
        let small_kept = Self::small_want(st).min(SMALL_CLAIM).max(reserve).min((t / 2).max(1));
        let bulk = st.active[BULK].min(t.saturating_sub(small_kept));
        // A bulk request never waits for ever: one connection at least while any is active.
        let bulk = if st.active[BULK] > 0 { bulk.max(1) } else { bulk };
        [bulk, t - bulk.min(t)]
    }

    /// Connections the small lane wants: the most small requests active at once lately.
    pub(super) fn small_want(st: &LaneState) -> usize {
        st.small_peak.max(st.active[SMALL])
    }

    /// Places of `t` that bulk never takes once a small request was seen, small demand
    /// or not ([`SMALL_RESERVE`]).
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
        if self.controller.in_slow_start() && st.open[other] > 0 {
            // The limit grows (or slow start ends) within a round or two: the lane short
            // of places gets them from the growth, not from connections closed for it
            // (module note: no handover in slow start). A lane with no connection at all
            // cannot wait for that: its first request would wait for the growth that
            // the other lane's traffic earns.
            return 0;
        }
        let other_short = other_demand.min(shares[other]).saturating_sub(st.open[other]);
        other_short.saturating_sub(t.saturating_sub(open))
    }

    /// Connections `lane` holds that it must give back now: those over its share, but
    /// only as many as the cap needs (the limit fell) or the other lane wants and cannot
    /// open in free places. A lane over its share that nobody needs keeps its connections:
    /// a ranged download's part ends a moment before the next one is sent, and closing
    /// the connection in between would cost a new TCP connection for most parts.
    pub(super) fn excess(&self, st: &mut LaneState, lane: usize) -> usize {
        let shares = self.shares(st);
        let over_share = st.open[lane].saturating_sub(shares[lane]);
        if over_share == 0 {
            return 0;
        }
        // A fallen limit closes the pipeline's connections over it, not the pool's: bulk
        // requests are bounded by admission (`admit_bulk`), and the pool's connections
        // over the limit stay idle ("parked") until the limit grows back or the other lane
        // wants their places (module note, "parked").
        let over_cap = if lane == BULK { 0 } else { (st.open[BULK] + st.open[SMALL]).saturating_sub(self.total()) };
        over_share.min(over_cap.max(self.wanted_by_other(st, lane)))
    }

    pub(super) fn demand(&self, lane: usize, delta: isize) {
        let mut st = self.lock();
        st.active[lane] = st.active[lane].saturating_add_signed(delta);
        if lane == SMALL && delta > 0 {
            st.small_seen = true;
        }
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
        if let Some(p) = self.bulk_pipeline.get().and_then(Weak::upgrade) {
            p.nudge();
        }
        if let Some(p) = self.pool.get().and_then(Weak::upgrade) {
            p.nudge();
        }
        self.admit.notify_waiters();
    }

    /// Small requests on the pipeline lane, with no bulk request active, raise the
    /// controller's limit to their number while it is in its first slow start (`Controller::start_at`; module note, "Small
    /// demand"). Called as each one is routed there.
    pub(super) fn small_demand_raises_the_start(&self) {
        let (n, bulk) = {
            let st = self.lock();
            (st.active[SMALL], st.active[BULK])
        };
        if bulk == 0 && n > self.controller.limit() {
            self.controller.start_at(n);
        }
    }

    /// Bulk requests active at once raise the controller's limit to their number (at most
    /// [`BULK_START_CAP`]) while it is in its first slow start (module note, "Bulk
    /// demand"). Called as each one is counted in, before it waits for admission.
    pub(super) fn bulk_demand_raises_the_start(&self) {
        let n = self.lock().active[BULK].min(BULK_START_CAP);
        if n > self.controller.limit() {
            self.controller.start_at(n);
        }
    }

    /// Connections one side of the bulk lane gives back to the other (`from_pool`: the
    /// pool to the bulk pipeline, else the reverse): as many as the other side's admitted
    /// requests need (pipelined GETs at [`BULK_DEPTH`] each, the pool's one each), beyond
    /// the connections it holds and the places it could open now. Those are the free
    /// places within bulk's share, fewer than none when the lane holds more than its share
    /// (idle connections parked after a busier moment): then the other side could open
    /// nothing until they went, and without yields its requests waited for their idle
    /// time-out.
    pub(super) fn bulk_yields(&self, st: &mut LaneState, from_pool: bool) -> usize {
        let pool = st.pool_open.min(st.open[BULK]);
        let pipeline = st.open[BULK] - pool;
        let on_pool = st.admitted_bulk.saturating_sub(st.pipelined_bulk);
        let (wanted, held, giver) = if from_pool {
            (st.pipelined_bulk.div_ceil(BULK_DEPTH), pipeline, pool)
        } else {
            (on_pool, pool, pipeline)
        };
        if wanted <= held {
            return 0;
        }
        let free = self.total().saturating_sub(st.open[BULK] + st.open[SMALL]) as isize;
        let room = (self.shares(st)[BULK] as isize - st.open[BULK] as isize).min(free);
        (wanted as isize - held as isize - room).clamp(0, giver as isize) as usize
    }

    /// Waits until the bulk requests in flight are fewer than bulk's share ([`BULK_DEPTH`]
    /// times it for a request that may be pipelined, asked by `pipelined` at each try),
    /// then counts this one in (module note, "parked" and "Bulk depth"): the limit bounds
    /// bulk requests here, not by closing the pool's connections. Returns whether it was
    /// admitted as pipelined.
    pub(super) async fn admit_bulk(&self, pipelined: impl Fn() -> bool) -> bool {
        loop {
            let notified = self.admit.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                // Asked again at each wake: a request that began waiting before the
                // endpoint verified pipelining is admitted under the pipelined share.
                let pipelined = pipelined();
                let depth = if pipelined { BULK_DEPTH } else { 1 };
                let mut st = self.lock();
                let share = self.shares(&mut st)[BULK].max(1) * depth;
                if st.admitted_bulk < share {
                    st.admitted_bulk += 1;
                    st.pipelined_bulk += usize::from(pipelined);
                    return pipelined;
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
    /// The pool's gate (bulk lane): counted in `pool_open`, and gives its connections
    /// back once bulk GETs are pipelined.
    pub(super) pool: bool,
}

impl ConnectionGate for LaneGate {
    fn try_open(&self) -> bool {
        let mut st = self.lanes.lock();
        let share = self.lanes.shares(&mut st)[self.lane];
        let total = self.lanes.total();
        if st.open[BULK] + st.open[SMALL] < total && st.open[self.lane] < share {
            st.open[self.lane] += 1;
            st.pool_open += usize::from(self.pool);
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
        if self.pool {
            st.pool_open = st.pool_open.saturating_sub(1);
        }
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
        let excess = self.lanes.excess(&mut st, self.lane);
        if !self.pool && self.lane == BULK && st.bulk_pipeline_declined {
            return st.open[BULK].saturating_sub(st.pool_open);
        }
        if self.lane == BULK {
            excess.max(self.lanes.bulk_yields(&mut st, self.pool))
        } else {
            excess
        }
    }

    fn handed_over(&self, n: usize) {
        let mut st = self.lanes.lock();
        let given = n.min(self.lanes.wanted_by_other(&mut st, self.lane));
        st.handed_over[self.lane] += given as u64;
        // Called before the closed connections give their places back, so the yields
        // still count them.
        if self.pool {
            st.yielded += (n - given).min(self.lanes.bulk_yields(&mut st, true)) as u64;
        } else if self.lane == BULK && st.bulk_pipeline_declined {
            st.returned += (n - given) as u64;
        } else if self.lane == BULK {
            st.returned += (n - given).min(self.lanes.bulk_yields(&mut st, false)) as u64;
        }
    }

    /// The configured depth while the controller is in slow start, the controller's limit
    /// after it: a SlowDown (which ends slow start) then halves the requests in flight,
    /// not only the connections. Not the limit in slow start too: with 1,000 small GETs
    /// submitted at once, limit x limit in flight was too slow a ramp (see
    /// docs/lab/wire-auto-lanes.md; re-measure with `ferry bench small-objects --quick
    /// --peers none`). The pipeline still opens a connection before it stacks a request
    /// behind another, so requests spread as the limit grows.
    ///
    /// The small lane stacks before the probe's verdict too (probe.rs), and falls back to
    /// one request per connection once a stacked request failed before verification
    /// (`PipelineTransport::stacking_failed`), until a probe verifies the endpoint.
    fn depth(&self) -> usize {
        let c = &self.lanes.controller;
        let pipeline = self.lanes.pipeline.get().and_then(Weak::upgrade);
        let may_fail = pipeline.is_some_and(|p| !p.verified() && p.stacking_failed());
        if self.lane == SMALL && may_fail {
            // The endpoint may not pipeline: one request per connection, which any
            // HTTP/1.1 server answers, until a probe verifies it (probe.rs).
            1
        } else if c.in_slow_start() {
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
    /// Admitted to the bulk pipeline (`LaneState::pipelined_bulk`).
    pub(super) pipelined: bool,
    /// A small request's times, traced when its body ends (`FERRY_LOG=ferry_wire::auto=trace`).
    pub(super) timing: Option<SmallTiming>,
    /// Whether the body's bytes count as goodput: bulk lane and object data
    /// (`Request::object_data`; a listing page's burst would set a best the transfers it
    /// lists cannot beat, docs/lab/wire-auto-paced.md).
    pub(super) goodput: bool,
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
        Demand { lanes, lane, admitted: false, pipelined: false, timing: None, goodput: true }
    }

    pub(super) fn until_body_end(self, mut r: Response) -> Response {
        let len = r.body.content_length();
        let body = std::mem::replace(&mut r.body, ResponseBody::empty());
        // Goodput for the controller's growth (controller.rs): bulk object data only. A
        // small request's worth is its first byte, not its bytes (auto/h1.rs module note).
        let controller = (self.lane == BULK && self.goodput).then(|| self.lanes.controller.clone());
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
            let mut st = self.lanes.lock();
            st.admitted_bulk -= 1;
            st.pipelined_bulk -= usize::from(self.pipelined);
        }
        self.lanes.demand(self.lane, -1);
        if self.admitted {
            self.lanes.admit.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ControllerOptions;

    /// The lane arithmetic of the module note at mixed-hol's cap of 50 (the controller at
    /// its cap): what bulk keeps beside the small lane's reserve and claim.
    #[tokio::test]
    async fn bulk_keeps_all_but_the_small_claim_of_the_cap() {
        let controller = Controller::new(ControllerOptions { initial: 50, max: 50, ..ControllerOptions::default() });
        let lanes = Lanes::new(controller);
        let shares = |l: &Lanes| {
            let mut st = l.lock();
            l.shares(&mut st)
        };
        // 100 ranged reads before any small request: bulk may have the whole cap.
        lanes.demand(BULK, 100);
        assert_eq!(shares(&lanes), [50, 0], "bulk alone kept places for small requests never seen");
        // One small request, come and gone: from then on the reserve (the claim) is
        // kept, no more.
        lanes.demand(SMALL, 1);
        lanes.demand(SMALL, -1);
        lanes.lock().small_peak = 0;
        assert_eq!(shares(&lanes), [46, 4], "bulk gave up other than four of 50 to the small lane");
        // Small requests beside them: however many, the claim stays four; the rest
        // are pipelined on the lane's connections.
        lanes.demand(SMALL, 12);
        assert_eq!(shares(&lanes), [46, 4]);
        // Small requests alone may use the whole cap.
        lanes.demand(BULK, -100);
        assert_eq!(shares(&lanes), [0, 50]);
        // A small cap keeps at most a quarter for the small lane (8: two).
        let small =
            Lanes::new(Controller::new(ControllerOptions { initial: 8, max: 8, ..ControllerOptions::default() }));
        small.demand(BULK, 20);
        assert_eq!(shares(&small), [8, 0]);
        small.demand(SMALL, 1);
        small.demand(SMALL, -1);
        small.lock().small_peak = 0;
        assert_eq!(shares(&small), [6, 2]);
    }

    /// The depth trial: the round under way at the verdict and the one under way at the
    /// switch are not counted, a round is counted once however often it is asked about, the
    /// pipeline is kept only past `TRIAL_GAIN` times the pool's best round per place, and
    /// a first pipeline round under `TRIAL_EARLY_OUT` of it ends the arm there.
    #[test]
    fn the_depth_trial_compares_the_pool_and_the_pipeline_over_whole_rounds() {
        // Feeds the pool's rounds, then the pipeline's until a verdict: (verdict, pipeline
        // rounds it took).
        let run = |pool: f64, pipeline: &[f64]| {
            let mut t = DepthTrial::default();
            let mut round = 0u64;
            let mut feed = |t: &mut DepthTrial, rate: f64| {
                round += 1;
                // Asked several times per round, as each admission asks.
                let a = t.pipelined(Some((round, rate)));
                assert_eq!(a, t.pipelined(Some((round, rate))));
                a
            };
            assert!(!t.pipelined(None), "no round yet: the pool");
            // The first round seen may have begun before the verdict: huge, not counted.
            assert!(!feed(&mut t, 1e12));
            for _ in 0..TRIAL_ROUNDS - 1 {
                assert!(!feed(&mut t, pool));
            }
            assert!(feed(&mut t, pool), "the pool's rounds are in: the pipeline's turn");
            assert_eq!(t.phase(), TrialPhase::Pipeline);
            // The round under way at the switch carried both: a tiny one, not counted.
            assert!(feed(&mut t, 1.0));
            assert_eq!(t.phase(), TrialPhase::Pipeline);
            let mut used = 0;
            for &rate in pipeline {
                let pipelined = feed(&mut t, rate);
                used += 1;
                if t.phase() != TrialPhase::Pipeline {
                    assert_eq!(pipelined, t.phase() == TrialPhase::Kept);
                    break;
                }
                assert!(pipelined, "the pipeline's arm under way");
            }
            let kept = t.phase() == TrialPhase::Kept;
            // The verdict stands whatever later rounds say.
            assert_eq!(feed(&mut t, if kept { 1.0 } else { 1e12 }), kept);
            (t.phase(), used)
        };
        let three = |rate: f64| [rate; TRIAL_ROUNDS];
        assert_eq!(run(60e6, &three(80e6)), (TrialPhase::Kept, TRIAL_ROUNDS));
        assert_eq!(run(60e6, &three(60e6 * TRIAL_GAIN)), (TrialPhase::Kept, TRIAL_ROUNDS));
        assert_eq!(run(60e6, &three(60e6 * TRIAL_GAIN * 0.99)), (TrialPhase::Declined, TRIAL_ROUNDS));
        // The best round counts: a slow first round (above the early out) does not decide.
        assert_eq!(run(60e6, &[50e6, 55e6, 70e6]), (TrialPhase::Kept, TRIAL_ROUNDS));
        // Clearly behind at the first round: declined there, as lan's rounds are.
        assert_eq!(run(300e6, &three(200e6)), (TrialPhase::Declined, 1));
        assert_eq!(run(300e6, &[300e6 * TRIAL_EARLY_OUT * 0.99, 1e12]), (TrialPhase::Declined, 1));
        // Only the first round ends the arm early.
        assert_eq!(run(300e6, &[250e6, 100e6, 100e6]), (TrialPhase::Declined, TRIAL_ROUNDS));
    }

    /// Bulk requests that began waiting for admission before the endpoint verified
    /// pipelining are admitted under the pipelined share once it has, not held to one per
    /// place for as long as pipelined requests keep that many in flight.
    #[tokio::test]
    async fn bulk_requests_queued_before_the_verdict_are_admitted_two_deep_after_it() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        let controller = Controller::new(ControllerOptions { initial: 4, max: 4, ..ControllerOptions::default() });
        let lanes = Arc::new(Lanes::new(controller));
        let verified = Arc::new(AtomicBool::new(false));
        lanes.demand(BULK, 8);
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (lanes, verified) = (lanes.clone(), verified.clone());
                tokio::spawn(async move { lanes.admit_bulk(|| verified.load(SeqCst)).await })
            })
            .collect();
        let admitted = || {
            let st = lanes.lock();
            (st.admitted_bulk, st.pipelined_bulk)
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(admitted(), (4, 0), "one bulk request per place before the verdict");
        verified.store(true, SeqCst);
        lanes.nudge();
        let mut pipelined = 0;
        for w in waiters {
            pipelined +=
                usize::from(tokio::time::timeout(Duration::from_secs(5), w).await.expect("still waiting").unwrap());
        }
        assert_eq!(pipelined, 4);
        assert_eq!(admitted(), (8, 4), "the queued requests were not admitted two deep");
    }

    /// In slow start the lanes do not hand places over (growth comes first), except to a
    /// lane with no connection at all: bulk alone holds the whole limit (no reserve before
    /// a small request), and the first small request must not wait for growth that only
    /// bulk's goodput earns.
    #[tokio::test]
    async fn a_lane_with_no_connection_gets_one_in_slow_start() {
        let controller = Controller::new(ControllerOptions { initial: 8, max: 48, ..ControllerOptions::default() });
        let lanes = Lanes::new(controller.clone());
        assert!(controller.in_slow_start());
        lanes.demand(BULK, 24);
        lanes.lock().open[BULK] = 8;
        assert_eq!(lanes.excess(&mut lanes.lock(), BULK), 0, "bulk gave a place back with nobody asking");
        lanes.demand(SMALL, 1);
        assert_eq!(lanes.excess(&mut lanes.lock(), BULK), 1, "the first small request got no place from bulk");
        // Once the small lane has its connection, more small requests wait for growth.
        lanes.lock().open = [7, 1];
        lanes.demand(SMALL, 3);
        assert_eq!(lanes.excess(&mut lanes.lock(), BULK), 0, "bulk handed over in slow start to a lane that has one");
    }
}
