//! Adaptive concurrency per endpoint: how many connections (and requests) to have in
//! flight, found from what the endpoint answers, so that the user sets nothing and an
//! expert sets only the hard cap.
//!
//! It lives in the wire layer because the signals are seen here: each response's status
//! (503 SlowDown, 429), its latency and its bytes. `auto` owns one controller per endpoint
//! and reports every response through an observation [`Permit`] from
//! [`Controller::observe`] (not counted against the limit: a transport never waits on its
//! own controller); it sizes its HTTP/1.1 connections from [`Controller::limit`]. Callers
//! above the transport share the controller through `Transport::controller` and wait for
//! room with [`Controller::acquire`]; their permits carry no signal (the transport has
//! reported the response already), so dropping them is enough. A small request on a
//! transport that pipelines (or multiplexes) takes a share of a place instead
//! ([`Controller::acquire_small`]): limit x depth of them, as many as the limit's
//! connections carry at once.
//!
//! AIMD with a slow start, in the manner of TCP congestion control:
//!
//! ```text
//!   Slow start ── each success: limit += 1 (at most SLOW_START_STEP x per goodput round)
//!      │ a throttle, a latency back-off, or FULL_PIPE_ROUNDS rounds without goodput growth
//!      ▼
//!   Avoidance ── a round of `limit` successes, latency holding, goodput not held: limit += 1
//!      throttled (503, 429), once per round ........................ limit *= 0.5
//!      h2: short-term latency > tolerance x long-term ............... limit *= 0.9
//!      h1: round median head latency > tolerance x floor, HIGH_LATENCY_ROUNDS in a row,
//!          goodput flat ..... limit *= 0.9, never below max(4, half the best round's limit)
//!   always min <= limit <= max (the hard cap)
//! ```
//!
//! - Latency stands for goodput (Little's law: completions per second are requests in
//!   flight over latency), so latency that rises while concurrency grows means the
//!   endpoint or the link is full. Short-term is compared with long-term (two moving
//!   averages, as Netflix's Gradient2 limiter does), not with a minimum, because object
//!   stores' first-byte times are lognormal and a minimum would call noise congestion.
//! - Growth follows goodput: the transport reports the response bytes it receives
//!   ([`Controller::delivered`]; auto reports its bulk lane's object data only, a small
//!   request's worth being its first byte, and a listing page's burst being no measure of
//!   the transfers it lists: counted, it set a best round that 16 KiB downloads never
//!   beat, and growth stayed held at 9 connections for a whole `ferry cp -r`,
//!   docs/lab/wire-auto-paced.md). Per round (`limit` successes, at least `MIN_ROUND`)
//!   the rate is compared with the best of the last `GOODPUT_WINDOW` rounds, as BBR's
//!   start-up finds a full pipe: in slow start it must beat it by `SLOW_START_GROWTH`,
//!   after it by anything. A round that does not grow holds growth (never a decrease);
//!   a transport that reports no bytes (h2) keeps the plain AIMD.
//! - Rising head latency, over HTTP/1.1 ([`Permit::success_with_head_latency`]): the
//!   moving averages would read the client's own CPU load as congestion and starve bulk,
//!   so the rule is per round with goodput as arbiter: latency that rises while bytes per
//!   second still grow is the price of a fuller pipe; with goodput flat it is queueing.
//!   A median, because first-byte times are lognormal. A latency decrease keeps the
//!   goodput window, so the rounds after it hold growth instead of climbing straight back.
//!
//! One decrease per round: a permit remembers the controller's epoch when it was taken;
//! a throttle reported by a request sent before the last decrease is not counted again
//! (a burst of SlowDowns would otherwise collapse the limit to 1).
//!
//! Known limit: slow start overshoots by one step (the round at 1.5 L is judged after the
//! growth towards 2.25 L has begun), so on loopback auto may still open the cap; across a
//! link with a knee the rule finds the knee. Measurements and the experiments tried:
//! docs/lab/wire-controller.md.
//!
//! Defaults ([`ControllerOptions`]): start at 4 (slow start probes a fresh endpoint
//! quickly); cap 64, above the AWS SDKs' 50-connection pool (docs/lab/wire-facts.md);
//! halving on throttling is TCP's and the AWS SDKs' adaptive mode's reaction; the latency
//! tolerance of 2x sits above the emulated S3's p50-to-p90 spread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Options of a [`Controller`].
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    pub initial: usize,
    pub min: usize,
    /// The hard cap on requests in flight.
    pub max: usize,
    /// Short-term latency above this multiple of the long-term average is congestion.
    pub latency_tolerance: f64,
    /// Factor applied on throttling.
    pub throttle_backoff: f64,
    /// Factor applied when latency rises.
    pub latency_backoff: f64,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            initial: 4,
            min: 1,
            max: 64,
            latency_tolerance: 2.0,
            throttle_backoff: 0.5,
            latency_backoff: 0.9,
        }
    }
}

/// Counters of a [`Controller`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ControllerStats {
    pub limit: usize,
    pub in_flight: usize,
    /// Small requests in flight on shares of places ([`Controller::acquire_small`]), and
    /// the most at once.
    pub small_in_flight: usize,
    pub small_peak: usize,
    pub successes: u64,
    pub throttles: u64,
    pub increases: u64,
    pub decreases: u64,
    /// Short- and long-term latency averages.
    pub latency_short: Duration,
    pub latency_long: Duration,
    /// Goodput rounds measured (bytes were reported through [`Controller::delivered`]),
    /// and the best round's rate in bytes per second (of the recent window).
    pub goodput_rounds: u64,
    pub goodput_best: f64,
    /// Response body bytes reported through [`Controller::delivered`] so far.
    pub bytes_delivered: u64,
    /// Whether growth is held because the last round's goodput did not grow.
    pub growth_held: bool,
    /// Head-latency rounds (module note, "Rising head latency" rule): the last round's median,
    /// the floor (lowest round median of the window), and the decreases it made.
    pub head_latency_median: Duration,
    pub head_latency_floor: Duration,
    pub latency_backoffs: u64,
    /// Head latencies reported ([`Permit::success_with_head_latency`]), each a sample
    /// of that rule.
    pub head_latencies: u64,
}

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    /// Small requests on shares of places ([`Controller::acquire_small`]).
    small_in_flight: usize,
    /// No decrease yet: grow by one per success.
    slow_start: bool,
    epoch: u64,
    /// Successes in the current round.
    round: usize,
    short: Option<f64>,
    long: Option<f64>,
    gp: Goodput,
    stats: ControllerStats,
}

/// Goodput rounds (module note, "Growth follows goodput" rule).
#[derive(Debug)]
struct Goodput {
    started: Instant,
    /// The limit when the round started: the round ends after as many successes.
    limit: f64,
    done: usize,
    /// `Controller::bytes` when the round started.
    base: u64,
    /// Rates of the last rounds, bytes per second, newest last.
    history: VecDeque<f64>,
    /// Head latencies (seconds) reported in the current round.
    heads: Vec<f64>,
    /// Round medians of head latency and when they ended, over [`FLOOR_WINDOW`].
    medians: VecDeque<(Instant, f64)>,
    /// Each measured round's rate and limit over [`FLOOR_WINDOW`]: the best one's limit
    /// bounds the latency back-off.
    peaks: VecDeque<(Instant, f64, f64)>,
    /// Consecutive rounds whose median head latency was above the tolerance x floor.
    high: u32,
    /// Consecutive rounds whose goodput did not grow.
    stalled: u32,
    /// Whether any round measured bytes (else growth is not held: a transport that
    /// reports no bytes keeps the plain AIMD).
    measured: bool,
}

impl Goodput {
    fn new(limit: f64) -> Goodput {
        Goodput {
            started: Instant::now(),
            limit,
            done: 0,
            base: 0,
            history: VecDeque::new(),
            heads: Vec::new(),
            medians: VecDeque::new(),
            peaks: VecDeque::new(),
            high: 0,
            stalled: 0,
            measured: false,
        }
    }

    fn best(&self) -> f64 {
        self.history.iter().copied().fold(0.0, f64::max)
    }

    fn holds_growth(&self) -> bool {
        self.measured && self.stalled > 0
    }

    /// The lowest round median of head latency in the window.
    fn floor(&self) -> Option<f64> {
        self.medians.iter().map(|m| m.1).reduce(f64::min)
    }

    /// The limit of the best-goodput round of the window.
    fn best_limit(&self) -> f64 {
        self.peaks.iter().fold((0.0, 0.0), |best, p| if p.1 > best.0 { (p.1, p.2) } else { best }).1
    }
}

/// How far back the head-latency floor and the best round's limit look: long enough to
/// hold the unloaded first-byte time through a bulk transfer's seconds of load, short
/// enough that a floor from an endpoint that has since grown slower expires (see
/// docs/lab/wire-controller.md; re-measure with `ferry bench mixed-hol --quick --peers none`).
const FLOOR_WINDOW: Duration = Duration::from_secs(30);

/// Rounds in a row with median head latency above tolerance x floor before a decrease:
/// three, as for a full pipe, since a single slow round is ordinary lognormal noise.
const HIGH_LATENCY_ROUNDS: u32 = 3;

/// The latency back-off never takes the limit below this (nor below half the best
/// round's limit): four connections still carry a bulk transfer at S3's ~90 MB/s each
/// (docs/lab/wire-facts.md).
const LATENCY_FLOOR_LIMIT: f64 = 4.0;

/// Head-latency samples kept per round (a round is `limit` successes, at most the cap).
const MAX_ROUND_SAMPLES: usize = 1024;

/// Rounds of goodput kept to find the best recent rate, a second or more at S3's
/// first-byte times, so that a best from before the load changed expires (see
/// docs/lab/wire-controller.md; re-measure with
/// `ferry bench mixed-hol --peers none --link instance`).
const GOODPUT_WINDOW: usize = 10;

/// A round lasts at least this long, so that a round of fast small requests still spans
/// a few first-byte times (S3 p50 ~30 ms, docs/lab/wire-facts.md) and its rate is not noise.
const MIN_ROUND: Duration = Duration::from_millis(100);

/// Slow start goes on while each round's goodput beats the best before it by this
/// factor: a quarter of what the round's step adds, as BBR's start-up asks 25% of a 2x
/// gain (see docs/lab/wire-controller.md; re-measure with
/// `ferry bench mixed-hol --quick --peers none`).
const SLOW_START_GROWTH: f64 = 1.0 + (SLOW_START_STEP - 1.0) / 4.0;

/// Most growth of the limit per goodput round in slow start while bytes are reported.
/// Not TCP's doubling: the round that finds the pipe full has already opened its
/// connections, so slow start overshoots by up to this factor (see
/// docs/lab/wire-controller.md; re-measure with `ferry bench mixed-hol --quick --peers none`).
const SLOW_START_STEP: f64 = 1.5;

/// Rounds without growth that end slow start: BBR's "full pipe" figure, three.
const FULL_PIPE_ROUNDS: u32 = 3;

/// Limits requests in flight to one endpoint (module note). Share it (`Arc`) among all
/// tasks that talk to the endpoint.
///
/// ```
/// # async fn example() {
/// use ferry_wire::controller::{Controller, ControllerOptions};
/// use std::time::Duration;
/// let ctl = Controller::new(ControllerOptions::default());
/// let permit = ctl.acquire().await; // waits for room under the limit
/// // ... send the request ...
/// permit.success_with_latency(Duration::from_millis(30)); // or .throttled() on a 503
/// assert_eq!(ctl.limit(), 5, "slow start: one more per success");
/// # }
/// ```
#[derive(Debug)]
pub struct Controller {
    state: Mutex<State>,
    notify: Notify,
    opts: ControllerOptions,
    /// Response body bytes reported through [`Controller::delivered`].
    bytes: AtomicU64,
}

impl Controller {
    pub fn new(opts: ControllerOptions) -> Arc<Controller> {
        let max = opts.max.max(1);
        let min = opts.min.clamp(1, max);
        let opts = ControllerOptions { min, max, ..opts };
        let limit = opts.initial.clamp(min, max) as f64;
        Arc::new(Controller {
            state: Mutex::new(State {
                limit,
                in_flight: 0,
                small_in_flight: 0,
                slow_start: true,
                epoch: 0,
                round: 0,
                short: None,
                long: None,
                gp: Goodput::new(limit),
                stats: ControllerStats::default(),
            }),
            notify: Notify::new(),
            opts,
            bytes: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current limit on requests in flight.
    pub fn limit(&self) -> usize {
        self.lock().limit as usize
    }

    /// The goodput rounds measured so far, and the last one's rate per place: bytes per
    /// second over the limit the round started with. What a caller comparing two ways of
    /// sending compares (auto's bulk-depth trial, auto/lanes.rs), since the limit may grow
    /// between the rounds it compares.
    pub fn last_goodput_round(&self) -> Option<(u64, f64)> {
        let s = self.lock();
        s.gp.peaks.back().map(|p| (s.stats.goodput_rounds, p.1 / p.2.max(1.0)))
    }

    pub fn stats(&self) -> ControllerStats {
        let s = self.lock();
        ControllerStats {
            limit: s.limit as usize,
            in_flight: s.in_flight,
            latency_short: Duration::from_secs_f64(s.short.unwrap_or(0.0)),
            latency_long: Duration::from_secs_f64(s.long.unwrap_or(0.0)),
            goodput_rounds: s.stats.goodput_rounds,
            goodput_best: s.gp.best(),
            bytes_delivered: self.bytes.load(Relaxed),
            growth_held: s.gp.holds_growth(),
            head_latency_median: Duration::from_secs_f64(s.gp.medians.back().map_or(0.0, |m| m.1)),
            head_latency_floor: Duration::from_secs_f64(s.gp.floor().unwrap_or(0.0)),
            ..s.stats
        }
    }

    /// Waits for room under the limit. Report the request's outcome on the permit;
    /// dropping it unreported frees the slot and teaches nothing.
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if s.in_flight < s.limit as usize {
                    s.in_flight += 1;
                    s.stats.in_flight = s.in_flight;
                    return Permit {
                        ctl: self.clone(),
                        epoch: s.epoch,
                        started: Instant::now(),
                        done: false,
                        held: Held::Place,
                    };
                }
            }
            notified.await;
        }
    }

    /// Waits for room for a small request (a GET known to bring at most
    /// `lane::SMALL_GET_BYTES`, a HEAD) on a transport that carries `depth()` of them per
    /// place (`Transport::small_depth`): up to limit x depth such requests are in flight,
    /// counted apart from the places [`Controller::acquire`] gives, so a batch of small
    /// GETs fills each pipelined connection instead of holding one request per
    /// connection. With a depth of 1 it is [`Controller::acquire`]. `depth` is asked
    /// again at each try, since auto's answer changes when it gives up on pipelining.
    pub async fn acquire_small(self: &Arc<Self>, depth: impl Fn() -> usize) -> Permit {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                let depth = depth().max(1);
                let held = if depth == 1 {
                    (s.in_flight < s.limit as usize).then(|| {
                        s.in_flight += 1;
                        s.stats.in_flight = s.in_flight;
                        Held::Place
                    })
                } else {
                    (s.small_in_flight < (s.limit as usize).saturating_mul(depth)).then(|| {
                        s.small_in_flight += 1;
                        s.stats.small_in_flight = s.small_in_flight;
                        s.stats.small_peak = s.stats.small_peak.max(s.small_in_flight);
                        Held::Share
                    })
                };
                if let Some(held) = held {
                    return Permit { ctl: self.clone(), epoch: s.epoch, started: Instant::now(), done: false, held };
                }
            }
            notified.await;
        }
    }

    /// A permit that reports one request's outcome without counting against the limit:
    /// for the transport, which reports what it sees and sizes its connections from
    /// [`Controller::limit`] rather than waiting here.
    pub fn observe(self: &Arc<Self>) -> Permit {
        let epoch = self.lock().epoch;
        Permit { ctl: self.clone(), epoch, started: Instant::now(), done: false, held: Held::Nothing }
    }

    /// Response body bytes received from the endpoint (the transport reports them as
    /// they arrive): the goodput that growth follows (module note). Lock-free.
    pub fn delivered(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Relaxed);
    }

    /// Whether the limit is still in slow start below the cap: it grows within a round or
    /// two, or slow start ends (at most `FULL_PIPE_ROUNDS` rounds without growth).
    pub fn in_slow_start(&self) -> bool {
        let s = self.lock();
        s.slow_start && s.limit < self.opts.max as f64
    }

    /// The hard cap.
    pub fn max(&self) -> usize {
        self.opts.max
    }

    /// A caller about to keep `n` requests in flight says so: while the controller is in
    /// its first slow start (nothing has made it decrease yet), the limit rises to `n` at
    /// once (at most the cap) instead of climbing there from the initial 4 one success at
    /// a time. The caller's count is a concurrency someone chose for this endpoint (a
    /// batch call's `concurrency`), so slow start's probing from 4 only delays it; once
    /// the endpoint has throttled or its latency has risen, the controller's own finding
    /// stands and this does nothing. Goodput rounds restart from the new limit.
    pub fn start_at(&self, n: usize) {
        let mut s = self.lock();
        let n = n.clamp(self.opts.min, self.opts.max) as f64;
        if !s.slow_start || s.epoch != 0 || s.limit >= n {
            return;
        }
        tracing::debug!(
            "controller: limit {} -> {} (start_at: the concurrency asked for, in slow start)",
            s.limit as usize,
            n
        );
        s.limit = n;
        s.stats.limit = n as usize;
        s.stats.increases += 1;
        s.gp.limit = n;
        drop(s);
        self.notify.notify_waiters();
    }

    fn release(&self, epoch: u64, held: Held, outcome: Outcome) {
        let mut s = self.lock();
        match held {
            Held::Place => {
                s.in_flight -= 1;
                s.stats.in_flight = s.in_flight;
            }
            Held::Share => {
                s.small_in_flight -= 1;
                s.stats.small_in_flight = s.small_in_flight;
            }
            Held::Nothing => {}
        }
        let (min, max) = (self.opts.min as f64, self.opts.max as f64);
        let before = s.limit;
        match outcome {
            Outcome::Neutral => {}
            Outcome::SuccessHead(latency) => {
                s.stats.successes += 1;
                s.stats.head_latencies += 1;
                if s.gp.heads.len() < MAX_ROUND_SAMPLES {
                    s.gp.heads.push(latency.as_secs_f64());
                }
                self.goodput_round(&mut s);
                let held = s.gp.holds_growth();
                s.round += 1;
                if s.slow_start {
                    let doubled = self.bytes.load(Relaxed) > 0 && s.limit >= SLOW_START_STEP * s.gp.limit;
                    if !held && !doubled {
                        s.limit = (s.limit + 1.0).min(max);
                    }
                } else if s.round as f64 >= s.limit {
                    s.round = 0;
                    if !held {
                        s.limit = (s.limit + 1.0).min(max);
                    }
                }
            }
            Outcome::Success(latency) => {
                s.stats.successes += 1;
                if let Some(latency) = latency {
                    let l = latency.as_secs_f64();
                    // Short-term: about one round of samples; long-term: ~20 rounds.
                    let n = s.limit.max(1.0);
                    let (ws, wl) = (2.0 / (n + 1.0), 2.0 / (20.0 * n + 1.0));
                    s.short = Some(s.short.map_or(l, |v| v + ws * (l - v)));
                    s.long = Some(s.long.map_or(l, |v| v + wl * (l - v)));
                }
                let congested =
                    matches!((s.short, s.long), (Some(st), Some(lt)) if st > self.opts.latency_tolerance * lt);
                self.goodput_round(&mut s);
                let held = s.gp.holds_growth();
                s.round += 1;
                if s.slow_start && !congested {
                    // At most a doubling per round, and only while goodput grows.
                    let doubled = self.bytes.load(Relaxed) > 0 && s.limit >= SLOW_START_STEP * s.gp.limit;
                    if !held && !doubled {
                        s.limit = (s.limit + 1.0).min(max);
                    }
                } else if s.round as f64 >= s.limit {
                    s.round = 0;
                    if congested {
                        s.limit = (s.limit * self.opts.latency_backoff).max(min);
                        s.slow_start = false;
                        s.epoch += 1;
                        s.gp.history.clear();
                    } else if !held {
                        s.limit = (s.limit + 1.0).min(max);
                    }
                }
            }
            Outcome::Throttled => {
                s.stats.throttles += 1;
                if epoch == s.epoch {
                    s.limit = (s.limit * self.opts.throttle_backoff).max(min);
                    s.slow_start = false;
                    s.epoch += 1;
                    s.round = 0;
                    // The rates before the decrease are no bar to growing back.
                    s.gp.history.clear();
                    s.gp.stalled = 0;
                }
            }
        }
        if s.limit as usize > before as usize {
            s.stats.increases += 1;
        } else if (s.limit as usize) < before as usize {
            s.stats.decreases += 1;
        }
        s.stats.limit = s.limit as usize;
        if s.limit as usize != before as usize {
            tracing::trace!(
                "controller: limit {} -> {} (slow start {}, growth held {})",
                before as usize,
                s.limit as usize,
                s.slow_start,
                s.gp.holds_growth()
            );
        }
        drop(s);
        self.notify.notify_waiters();
    }
}

impl Controller {
    /// Ends the goodput round when it is due: `limit` successes and `MIN_ROUND` since
    /// it started. A round that moved no bytes (nothing reported them) measures nothing.
    fn goodput_round(&self, s: &mut State) {
        s.gp.done += 1;
        let elapsed = s.gp.started.elapsed();
        if (s.gp.done as f64) < s.gp.limit || elapsed < MIN_ROUND {
            return;
        }
        let total = self.bytes.load(Relaxed);
        let bytes = total.saturating_sub(s.gp.base);
        if bytes > 0 {
            let rate = bytes as f64 / elapsed.as_secs_f64();
            let best = s.gp.best();
            // Slow start: growth by a quarter, the signature of a pipe not yet full. After
            // it: any new best of the window (one more connection adds ~1/limit).
            let need = if s.slow_start { SLOW_START_GROWTH } else { 1.0 };
            if best == 0.0 || rate >= need * best {
                s.gp.stalled = 0;
            } else {
                s.gp.stalled += 1;
            }
            if s.slow_start && s.gp.stalled >= FULL_PIPE_ROUNDS {
                // The pipe is full: additive increase from here, while goodput grows.
                s.slow_start = false;
                s.round = 0;
            }
            tracing::debug!(
                "controller: round {:.0} MB/s (best {:.0}) over {:?}, limit {} at start, {} now, slow start {}, stalled {}",
                rate / 1e6,
                best / 1e6,
                elapsed,
                s.gp.limit as usize,
                s.limit as usize,
                s.slow_start,
                s.gp.stalled
            );
            s.gp.history.push_back(rate);
            if s.gp.history.len() > GOODPUT_WINDOW {
                s.gp.history.pop_front();
            }
            s.gp.measured = true;
            s.stats.goodput_rounds += 1;
            let now = Instant::now();
            s.gp.peaks.push_back((now, rate, s.gp.limit));
            while s.gp.peaks.front().is_some_and(|p| now - p.0 > FLOOR_WINDOW) {
                s.gp.peaks.pop_front();
            }
            self.head_latency_round(s, now);
        }
        s.gp.heads.clear();
        s.gp.started = Instant::now();
        s.gp.limit = s.limit;
        s.gp.done = 0;
        s.gp.base = total;
    }
}

impl Controller {
    /// At the end of a goodput round that measured bytes: the round's median head
    /// latency against the window's floor; a decrease after [`HIGH_LATENCY_ROUNDS`] high
    /// rounds in a row while goodput did not grow, down to half the best round's limit.
    fn head_latency_round(&self, s: &mut State, now: Instant) {
        if s.gp.heads.is_empty() {
            return;
        }
        let heads = &mut s.gp.heads;
        let mid = heads.len() / 2;
        let median = *heads.select_nth_unstable_by(mid, f64::total_cmp).1;
        s.gp.medians.push_back((now, median));
        while s.gp.medians.front().is_some_and(|m| now - m.0 > FLOOR_WINDOW) {
            s.gp.medians.pop_front();
        }
        let floor = s.gp.floor().unwrap_or(median);
        if median > self.opts.latency_tolerance * floor {
            s.gp.high += 1;
        } else {
            s.gp.high = 0;
        }
        tracing::debug!(
            "controller: round head latency median {:?}, floor {:?}",
            Duration::from_secs_f64(median),
            Duration::from_secs_f64(floor)
        );
        if s.gp.high < HIGH_LATENCY_ROUNDS || s.gp.stalled == 0 {
            return;
        }
        s.gp.high = 0;
        let bound = (s.gp.best_limit() / 2.0).max(LATENCY_FLOOR_LIMIT).max(self.opts.min as f64);
        if s.limit > bound {
            s.limit = (s.limit * self.opts.latency_backoff).max(bound);
            s.slow_start = false;
            s.epoch += 1;
            s.round = 0;
            s.stats.latency_backoffs += 1;
        }
    }
}

enum Outcome {
    /// With its latency, when it measures the endpoint.
    Success(Option<Duration>),
    /// With its head latency, for the round-median rule (module note, "Rising head
    /// latency") rather than the moving averages.
    SuccessHead(Duration),
    Throttled,
    Neutral,
}

/// A slot under the limit, held for one request.
#[derive(Debug)]
pub struct Permit {
    ctl: Arc<Controller>,
    epoch: u64,
    started: Instant,
    done: bool,
    /// What it holds under the limit.
    held: Held,
}

/// What a [`Permit`] holds: a place ([`Controller::acquire`]), a share of one
/// ([`Controller::acquire_small`]), or nothing ([`Controller::observe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    Place,
    Share,
    Nothing,
}

impl Permit {
    /// The request succeeded; its latency is the time since the permit was taken.
    pub fn success(self) {
        let latency = self.started.elapsed();
        self.success_with_latency(latency);
    }

    /// The request succeeded with a latency the caller measured (time to first byte,
    /// say, when the body's transfer time should not count).
    pub fn success_with_latency(mut self, latency: Duration) {
        self.finish(Outcome::Success(Some(latency)));
    }

    /// The request succeeded, but its latency would not measure the endpoint (it includes
    /// time queued in the client): it counts towards growth and leaves the latency
    /// averages alone.
    pub fn success_unmeasured(mut self) {
        self.finish(Outcome::Success(None));
    }

    /// The request succeeded, and `latency` is its head latency with no queueing in the
    /// client (`ResponseMeta::head_latency`): it feeds the per-round median that backs
    /// off on rising head latency only while goodput does not grow (module note, "Rising
    /// head latency"), not the moving averages of [`Permit::success_with_latency`].
    pub fn success_with_head_latency(mut self, latency: Duration) {
        self.finish(Outcome::SuccessHead(latency));
    }

    /// The endpoint throttled the request (503 SlowDown, 429).
    pub fn throttled(mut self) {
        self.finish(Outcome::Throttled);
    }

    /// When the permit was taken.
    pub fn started(&self) -> Instant {
        self.started
    }

    fn finish(&mut self, outcome: Outcome) {
        if !self.done {
            self.done = true;
            self.ctl.release(self.epoch, self.held, outcome);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.finish(Outcome::Neutral);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn small_requests_take_shares_of_places_up_to_limit_times_depth() {
        let ctl = Controller::new(ControllerOptions { initial: 2, max: 2, ..ControllerOptions::default() });
        let depth = std::sync::atomic::AtomicUsize::new(4);
        let d = || depth.load(Relaxed);
        let mut shares = Vec::new();
        for _ in 0..8 {
            shares.push(ctl.acquire_small(d).await);
        }
        let st = ctl.stats();
        assert_eq!((st.small_in_flight, st.small_peak, st.in_flight), (8, 8, 0), "2 places x depth 4, no place taken");
        // The ninth waits for a share; a place for a large request is still free.
        let more = tokio::time::timeout(Duration::from_millis(20), ctl.acquire_small(d)).await;
        assert!(more.is_err(), "a share past limit x depth");
        let place = ctl.acquire().await;
        drop(shares.pop());
        let ninth =
            tokio::time::timeout(Duration::from_secs(5), ctl.acquire_small(d)).await.expect("a share came back");
        // Depth 1 (a transport that gave up pipelining): a small request takes a place.
        depth.store(1, Relaxed);
        let one = ctl.acquire_small(d).await;
        assert_eq!(ctl.stats().in_flight, 2);
        let none = tokio::time::timeout(Duration::from_millis(20), ctl.acquire_small(d)).await;
        assert!(none.is_err(), "depth 1: no place left under a limit of 2");
        drop((place, one, ninth, shares));
        let st = ctl.stats();
        assert_eq!((st.small_in_flight, st.in_flight, st.small_peak), (0, 0, 8));
    }

    #[tokio::test]
    async fn slow_start_then_halving_once_per_round_within_bounds() {
        let ctl = Controller::new(ControllerOptions { initial: 2, max: 16, ..ControllerOptions::default() });
        let ms = Duration::from_millis(30);
        for _ in 0..40 {
            ctl.acquire().await.success_with_latency(ms);
        }
        assert_eq!(ctl.limit(), 16, "slow start reaches the cap and stops there");
        // A burst of throttles from requests sent in the same round: one halving.
        let permits: Vec<Permit> = futures_util::future::join_all((0..16).map(|_| ctl.acquire())).await;
        for p in permits {
            p.throttled();
        }
        assert_eq!(ctl.limit(), 8);
        // Recovery is additive now: one step per round of `limit` successes.
        for _ in 0..8 {
            ctl.acquire().await.success_with_latency(ms);
        }
        assert_eq!(ctl.limit(), 9);
        // Latency rising well above its long-term average: a gentle decrease per round.
        for _ in 0..9 {
            ctl.acquire().await.success_with_latency(ms * 10);
        }
        assert_eq!(ctl.limit(), 8);
        // Throttles never push it below the minimum.
        for _ in 0..20 {
            ctl.acquire().await.throttled();
        }
        assert_eq!(ctl.limit(), 1);
        let s = ctl.stats();
        assert_eq!((s.in_flight, s.throttles), (0, 36));
    }

    #[tokio::test]
    async fn observation_permits_teach_without_taking_room() {
        let ctl = Controller::new(ControllerOptions { initial: 1, max: 8, ..ControllerOptions::default() });
        let held = ctl.acquire().await;
        // The one place is taken, yet the transport can still report what it sees.
        let seen: Vec<Permit> = (0..3).map(|_| ctl.observe()).collect();
        assert_eq!(ctl.stats().in_flight, 1);
        for p in seen {
            p.success_with_latency(Duration::from_millis(30));
        }
        assert_eq!(ctl.limit(), 4, "slow start from observed successes");
        ctl.observe().throttled();
        assert_eq!(ctl.limit(), 2);
        drop(held);
        assert_eq!(ctl.stats().in_flight, 0);
    }

    /// One goodput round: `MIN_ROUND` passes, `bytes` arrive, then `limit` successes.
    async fn round(ctl: &Arc<Controller>, bytes: u64) {
        tokio::time::sleep(MIN_ROUND + Duration::from_millis(5)).await;
        ctl.delivered(bytes);
        for _ in 0..ctl.limit() {
            ctl.observe().success_unmeasured();
        }
    }

    #[tokio::test]
    async fn growth_follows_goodput() {
        let ctl = Controller::new(ControllerOptions { initial: 4, max: 64, ..ControllerOptions::default() });
        // Goodput that stops growing (falling a fifth per round, so that timing jitter
        // cannot pass for growth): slow start stops within two rounds, well under the cap.
        let mut bytes = 10_000_000.0;
        for _ in 0..3 {
            round(&ctl, bytes as u64).await;
            bytes *= 0.8;
        }
        let held = ctl.stats();
        assert!(held.growth_held && held.goodput_rounds >= 2, "{held:?}");
        assert!(held.limit < 32, "grew on without goodput: {held:?}");
        for _ in 0..4 {
            round(&ctl, bytes as u64).await;
            bytes *= 0.8;
        }
        assert_eq!(ctl.limit(), held.limit, "no growth while goodput does not grow: {:?}", ctl.stats());
        // Goodput growing again (another transfer ended, the link has room): growth resumes.
        for _ in 0..4 {
            bytes *= 2.0;
            round(&ctl, bytes as u64).await;
        }
        assert!(ctl.limit() > held.limit, "no growth while goodput doubles: {:?}", ctl.stats());
        // A throttle halves the limit and clears the bar: growth is not held after it.
        let before = ctl.limit();
        ctl.observe().throttled();
        assert_eq!(ctl.limit(), before / 2);
        assert!(!ctl.stats().growth_held);
    }

    /// One goodput round whose successes report head latency `head`.
    async fn head_round(ctl: &Arc<Controller>, bytes: u64, head: Duration) {
        tokio::time::sleep(MIN_ROUND + Duration::from_millis(5)).await;
        ctl.delivered(bytes);
        for _ in 0..ctl.limit() {
            ctl.observe().success_with_head_latency(head);
        }
    }

    #[tokio::test]
    async fn rising_head_latency_backs_off_only_while_goodput_does_not_grow() {
        let ctl = Controller::new(ControllerOptions { initial: 4, max: 64, ..ControllerOptions::default() });
        let ms = Duration::from_millis(1);
        // Slow start with goodput doubling and latency at its floor.
        let mut bytes = 1_000_000.0;
        for _ in 0..4 {
            head_round(&ctl, bytes as u64, 30 * ms).await;
            bytes *= 2.0;
        }
        let grown = ctl.stats();
        assert!(grown.limit >= 16 && grown.latency_backoffs == 0, "{grown:?}");
        // Latency triples while goodput still grows: no decrease (the growth is worth it).
        for _ in 0..4 {
            head_round(&ctl, bytes as u64, 90 * ms).await;
            bytes *= 2.0;
        }
        assert_eq!(ctl.stats().latency_backoffs, 0, "backed off while goodput grew: {:?}", ctl.stats());
        let peak = ctl.limit();
        // Latency high and goodput falling: decreases, one per three rounds, never below
        // half the best round's limit (or 4).
        for _ in 0..30 {
            bytes *= 0.9;
            head_round(&ctl, bytes as u64, 90 * ms).await;
        }
        let s = ctl.stats();
        assert!(s.latency_backoffs >= 2 && s.limit < peak, "no back-off: {s:?}");
        assert!(s.limit as f64 >= (peak as f64 / 4.0).max(LATENCY_FLOOR_LIMIT), "below its floor: {s:?} (peak {peak})");
        assert_eq!(s.head_latency_floor, 30 * ms);
        // Latency back at the floor: no more decreases.
        let (limit, backoffs) = (s.limit, s.latency_backoffs);
        for _ in 0..6 {
            head_round(&ctl, bytes as u64, 30 * ms).await;
        }
        assert_eq!(ctl.stats().latency_backoffs, backoffs);
        assert!(ctl.limit() >= limit);
    }

    #[tokio::test]
    async fn the_callers_concurrency_starts_the_first_slow_start_only() {
        let ctl = Controller::new(ControllerOptions { initial: 4, max: 48, ..ControllerOptions::default() });
        // A caller that will keep 32 in flight: 32 may be acquired at once, not 4.
        ctl.start_at(32);
        let held: Vec<Permit> = futures_util::future::join_all((0..32).map(|_| ctl.acquire())).await;
        assert_eq!((ctl.limit(), ctl.stats().in_flight), (32, 32));
        drop(held);
        // Never above the cap, never a decrease.
        ctl.start_at(100);
        assert_eq!(ctl.limit(), 48);
        ctl.start_at(8);
        assert_eq!(ctl.limit(), 48);
        // Once the endpoint has throttled, its finding stands.
        ctl.observe().throttled();
        assert_eq!(ctl.limit(), 24);
        ctl.start_at(48);
        assert_eq!(ctl.limit(), 24, "start_at overrode a throttle");
    }

    #[tokio::test]
    async fn acquire_waits_for_room() {
        let ctl = Controller::new(ControllerOptions { initial: 1, max: 1, ..ControllerOptions::default() });
        let p = ctl.acquire().await;
        let waiting = tokio::spawn({
            let ctl = ctl.clone();
            async move { ctl.acquire().await.success() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(p);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
    }
}
