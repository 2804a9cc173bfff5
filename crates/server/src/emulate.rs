//! Emulation of a cloud object store's behaviour: first-byte delay, per-connection rate,
//! request-rate throttling per prefix, and injected faults.
//!
//! All randomness comes from one seeded generator, so a run with the same seed and the
//! same request order draws the same delays and faults. Delays are lognormal: the
//! distribution object-store latency is usually modelled by, fitted so that its median
//! and 99th percentile match the profile (sigma = ln(p99/p50) / z99, z99 = 2.326).
//!
//! Optionally (`Emulation::ttfb_per_request_in_flight`, for tests) an object request's
//! first byte is also held back in proportion to the object requests in progress when it
//! arrived ([`Emulator::arrive`]): latency that grows with load, as a saturated endpoint's
//! does, so a client's back-off on rising latency can be driven for real.
//!
//! The rate pacer is a virtual clock: each chunk is released no earlier than the time the
//! bytes before it would have taken at the configured rate. Idle time earns no credit
//! beyond one burst, so a connection that pauses cannot then exceed the rate.

use crate::config::{Emulation, Faults};
use crate::types::BodyFault;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `POST /_ferry/seed?value=N` starts every random draw of the server over from seed N
/// (path-style only, like `/_ferry/metrics`; answered 204, or 400 without a number).
/// A lab comparing clients reseeds before each of them, so that each meets the same
/// first-byte delays and faults in the same order (common random numbers): the wall of a
/// burst of small GETs is mostly its slowest draw, and with one seed for the whole run
/// each row would get its own stretch of the sequence, a bias fixed by its position in
/// the schedule (docs/lab/bench-common-draws.md).
pub const SEED_PATH: &str = "/_ferry/seed";

/// z-score of the 99th percentile of a standard normal distribution.
const Z99: f64 = 2.326_347_874;

/// Which delay distribution a request draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelayClass {
    Object,
    List,
    None,
}

/// What a request is, for throttling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RateClass {
    Read,
    Write,
}

/// The decision for one request's injected error, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedError {
    Internal,
    SlowDown,
}

pub struct Emulator {
    emulation: Emulation,
    faults: Faults,
    rng: Mutex<SmallRng>,
    object_delay: Option<(LogNormal<f64>, f64)>,
    list_delay: Option<(LogNormal<f64>, f64)>,
    buckets: Mutex<HashMap<(String, RateClass), TokenBucket>>,
    /// Object requests between arrival and their head being due.
    in_flight: Arc<AtomicUsize>,
    /// Requests seen per session token (`Faults::expire_token_after`).
    tokens: Mutex<HashMap<String, u64>>,
}

/// One object request counted in progress (see [`Emulator::arrive`]) until dropped.
pub struct Arrival {
    in_flight: Arc<AtomicUsize>,
    /// The extra first-byte delay for the load met on arrival.
    pub load_delay: Duration,
}

impl Drop for Arrival {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }
}

/// The fitted distribution and its median in seconds.
fn fit(p50: Duration, p99: Duration) -> Option<(LogNormal<f64>, f64)> {
    if p50.is_zero() {
        return None;
    }
    let mu = p50.as_secs_f64().ln();
    let sigma = if p99 > p50 { (p99.as_secs_f64() / p50.as_secs_f64()).ln() / Z99 } else { 0.0 };
    LogNormal::new(mu, sigma).ok().map(|d| (d, p50.as_secs_f64()))
}

/// Distinct prefixes tracked for throttling before the table is cleared; bounds memory
/// under a workload that touches millions of prefixes.
const MAX_TRACKED_PREFIXES: usize = 100_000;

impl Emulator {
    pub fn new(emulation: Emulation, faults: Faults) -> Emulator {
        let object_delay = fit(emulation.ttfb_p50, emulation.ttfb_p99);
        let list_delay = fit(emulation.list_p50, emulation.list_p99);
        Emulator {
            rng: Mutex::new(SmallRng::seed_from_u64(faults.seed)),
            emulation,
            faults,
            object_delay,
            list_delay,
            buckets: Mutex::new(HashMap::new()),
            in_flight: Arc::new(AtomicUsize::new(0)),
            tokens: Mutex::new(HashMap::new()),
        }
    }

    pub fn emulation(&self) -> &Emulation {
        &self.emulation
    }

    /// Starts the draws (delays, faults) over from `seed`, as if the server had been
    /// started with it ([`SEED_PATH`]).
    pub fn reseed(&self, seed: u64) {
        *self.rng.lock().unwrap() = SmallRng::seed_from_u64(seed);
    }

    /// A first-byte delay for a request of this class.
    pub fn delay(&self, class: DelayClass) -> Duration {
        let dist = match class {
            DelayClass::Object => self.object_delay.as_ref(),
            DelayClass::List => self.list_delay.as_ref(),
            DelayClass::None => None,
        };
        match dist {
            None => Duration::ZERO,
            Some((d, median)) => {
                let secs = d.sample(&mut *self.rng.lock().unwrap());
                // Cap the tail at 20x the median: a lognormal's far tail would otherwise
                // produce rare multi-second stalls that no real service shows.
                Duration::from_secs_f64(secs.min(20.0 * median))
            }
        }
    }

    /// Counts a request in progress until the returned guard drops; its `load_delay` is
    /// `ttfb_per_request_in_flight` times the requests already in progress (zero when
    /// the knob is off).
    pub fn arrive(&self) -> Arrival {
        let before = self.in_flight.fetch_add(1, Relaxed);
        let load_delay = self.emulation.ttfb_per_request_in_flight * before as u32;
        Arrival { in_flight: self.in_flight.clone(), load_delay }
    }

    /// Whether requests of this class have a rate limit at all (the lan profile has none),
    /// so the request path can skip building the prefix.
    pub fn rate_limited(&self, class: RateClass) -> bool {
        match class {
            RateClass::Read => self.emulation.get_rate_limit.is_some(),
            RateClass::Write => self.emulation.put_rate_limit.is_some(),
        }
    }

    /// Whether a request on `prefix` exceeds the request-rate limit (503 SlowDown).
    pub fn throttled(&self, prefix: &str, class: RateClass, now: Instant) -> bool {
        let limit = match class {
            RateClass::Read => self.emulation.get_rate_limit,
            RateClass::Write => self.emulation.put_rate_limit,
        };
        let Some(limit) = limit else { return false };
        let mut buckets = self.buckets.lock().unwrap();
        if buckets.len() >= MAX_TRACKED_PREFIXES {
            buckets.clear();
        }
        let bucket = buckets.entry((prefix.to_string(), class)).or_insert_with(|| TokenBucket::new(limit as f64, now));
        !bucket.take(now)
    }

    /// Whether a request carrying session token `token` finds it expired
    /// (`Faults::expire_token_after`); counts the request.
    pub fn token_expired(&self, token: &str) -> bool {
        let Some(after) = self.faults.expire_token_after else { return false };
        let mut seen = self.tokens.lock().unwrap();
        let n = seen.entry(token.to_owned()).or_insert(0);
        *n += 1;
        *n > after
    }

    /// An injected error for this request, if the dice say so.
    pub fn injected_error(&self) -> Option<InjectedError> {
        let f = &self.faults;
        if f.error_500_rate <= 0.0 && f.error_503_rate <= 0.0 {
            return None;
        }
        let x: f64 = self.rng.lock().unwrap().gen();
        if x < f.error_500_rate {
            Some(InjectedError::Internal)
        } else if x < f.error_500_rate + f.error_503_rate {
            Some(InjectedError::SlowDown)
        } else {
            None
        }
    }

    /// A fault for a response body of `len` bytes, if the dice say so. The cut point is
    /// drawn uniformly inside the body so that resumption logic sees arbitrary offsets.
    pub fn body_fault(&self, len: u64) -> Option<BodyFault> {
        let f = &self.faults;
        if len == 0 || (f.reset_rate <= 0.0 && f.stall_rate <= 0.0) {
            return None;
        }
        let mut rng = self.rng.lock().unwrap();
        let x: f64 = rng.gen();
        let at = rng.gen_range(0..len);
        if x < f.reset_rate {
            Some(BodyFault::Reset { after_bytes: at })
        } else if x < f.reset_rate + f.stall_rate {
            Some(BodyFault::Stall { after_bytes: at, pause: f.stall })
        } else {
            None
        }
    }
}

/// A token bucket refilled at `rate` tokens per second, holding at most one second's worth.
struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: f64, now: Instant) -> TokenBucket {
        TokenBucket { rate, tokens: rate, last: now }
    }

    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Paces bytes to a rate: call [`Pacer::wait`] before sending each chunk.
///
/// A virtual clock: `next_free` is when everything sent so far would have finished at the
/// rate. A chunk waits until then. Falling behind it is made up (chunks go out without
/// waiting) as long as the lag is at most [`PACER_CATCH_UP`]: the timer wakes a paced
/// stream late by up to its 1 ms resolution, more on loaded cores, and without making that
/// up every wait lost it for good. A longer lag is idleness (between responses, a slow
/// reader): then only one [`PACER_BURST_BYTES`] of credit is kept.
///
/// Without the catch-up, each profile read well under its rate (gcs 105 of 180 MB/s),
/// which flattened the published gcs/s3 ratio (docs/lab/server-emulation.md).
pub struct Pacer {
    bytes_per_sec: f64,
    /// The virtual time at which everything sent so far would have finished.
    next_free: Instant,
}

/// Credit a paced stream may bank while idle: one 64 KiB burst, about one TCP window's
/// worth of segments at start, so pacing stays smooth without stalling small responses.
const PACER_BURST_BYTES: f64 = 64.0 * 1024.0;

/// The most a stream may have fallen behind its schedule and still make it up (see
/// [`Pacer`]): tokio's timer resolution is 1 ms, and on the lab's 2 shared cores a wake-up
/// is often a few ms late. At 180 MB/s, 10 ms is 1.8 MB sent without waiting, once.
/// Re-measure: a 32 MiB GET of the synthetic bucket through curl from each profile
/// (docs/lab/server-emulation.md, "The pacer's catch-up").
pub const PACER_CATCH_UP: Duration = Duration::from_millis(10);

impl Pacer {
    pub fn new(bytes_per_sec: u64) -> Pacer {
        Pacer { bytes_per_sec: bytes_per_sec as f64, next_free: Instant::now() }
    }

    /// Books `len` bytes at `now`: the instant they may start (`now` or later).
    pub fn book(&mut self, now: Instant, len: usize) -> Instant {
        let burst = Duration::from_secs_f64(PACER_BURST_BYTES / self.bytes_per_sec);
        if self.next_free + PACER_CATCH_UP.max(burst) < now {
            // Idle: start afresh, with one burst of credit.
            self.next_free = now - burst;
        }
        let start = self.next_free;
        self.next_free = start + Duration::from_secs_f64(len as f64 / self.bytes_per_sec);
        start.max(now)
    }

    /// Sleeps until `len` more bytes may be sent.
    pub async fn wait(&mut self, len: usize) {
        let now = Instant::now();
        let start = self.book(now, len);
        if start > now {
            tokio::time::sleep_until(start.into()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_makes_up_late_wake_ups_but_not_idleness() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // 100 MB/s: a 100 kB chunk is 1 ms of schedule; the 64 KiB burst is 0.66 ms.
        let mut p = Pacer::new(100_000_000);
        let burst = Duration::from_secs_f64(PACER_BURST_BYTES / 1e8);
        p.next_free = t0;
        // Mid-stream, on schedule: each chunk waits for the previous one's time.
        assert_eq!(p.book(t0, 100_000), t0);
        assert_eq!(p.book(t0, 100_000), t0 + ms(1));
        // The timer woke 3 ms late for the chunk due at 2 ms: it and the chunks that fit
        // in the lag go at once, then the schedule resumes where it was.
        let late = t0 + ms(5);
        for _ in 0..4 {
            assert_eq!(p.book(late, 100_000), late);
        }
        assert_eq!(p.book(late, 100_000), t0 + ms(6));
        // Behind by more than the catch-up (idle): one burst of credit, then the rate.
        let idle = t0 + ms(7) + PACER_CATCH_UP + ms(1);
        assert_eq!(p.book(idle, 100_000), idle);
        assert_eq!(p.book(idle, 100_000), idle - burst + ms(1));
        // The average over a long body is the rate, though every sleep overshoots: 100
        // chunks of 1 ms with a timer that wakes 1 ms late end on schedule (the old rule,
        // which kept one burst of lag, lost most of each overshoot).
        let mut q = Pacer::new(100_000_000);
        let s = t0 + ms(10_000);
        let mut now = s;
        for _ in 0..100 {
            let start = q.book(now, 100_000);
            if start > now {
                now = start + ms(1);
            }
        }
        assert_eq!(q.next_free, s - burst + ms(100));
    }

    #[test]
    fn lognormal_fit_matches_p50_and_p99() {
        let e = Emulation {
            ttfb_p50: Duration::from_millis(30),
            ttfb_p99: Duration::from_millis(150),
            ..Emulation::default()
        };
        let em = Emulator::new(e, Faults { seed: 7, ..Faults::default() });
        let mut v: Vec<f64> = (0..20_000).map(|_| em.delay(DelayClass::Object).as_secs_f64()).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let p50 = v[v.len() / 2];
        let p99 = v[v.len() * 99 / 100];
        assert!((p50 - 0.030).abs() < 0.003, "p50 {p50}");
        assert!((p99 - 0.150).abs() < 0.025, "p99 {p99}");
        assert_eq!(em.delay(DelayClass::List), Duration::ZERO);
    }

    #[test]
    fn a_reseed_starts_the_draws_over_as_a_fresh_start_with_that_seed() {
        let e = crate::config::Profile::S3.emulation();
        let faults = |seed| Faults { seed, error_503_rate: 0.3, reset_rate: 0.5, ..Faults::default() };
        let a = Emulator::new(e.clone(), faults(1));
        let first: Vec<_> = (0..50).map(|_| a.delay(DelayClass::Object)).collect();
        a.reseed(42);
        let fresh = Emulator::new(e, faults(42));
        for _ in 0..100 {
            assert_eq!(a.delay(DelayClass::Object), fresh.delay(DelayClass::Object));
            assert_eq!(a.injected_error(), fresh.injected_error());
            assert_eq!(a.body_fault(1000), fresh.body_fault(1000));
        }
        a.reseed(1);
        let again: Vec<_> = (0..50).map(|_| a.delay(DelayClass::Object)).collect();
        assert_eq!(first, again, "the same seed again, the same draws again");
    }

    #[test]
    fn same_seed_same_draws() {
        let e = crate::config::Profile::S3.emulation();
        let a = Emulator::new(e.clone(), Faults { seed: 42, reset_rate: 0.5, ..Faults::default() });
        let b = Emulator::new(e, Faults { seed: 42, reset_rate: 0.5, ..Faults::default() });
        for _ in 0..100 {
            assert_eq!(a.delay(DelayClass::Object), b.delay(DelayClass::Object));
            assert_eq!(a.body_fault(1000), b.body_fault(1000));
        }
    }

    #[test]
    fn token_bucket_throttles_above_rate() {
        let e = Emulation { get_rate_limit: Some(100), ..Emulation::default() };
        let em = Emulator::new(e, Faults::default());
        let t0 = Instant::now();
        let allowed = (0..150).filter(|_| !em.throttled("b/p", RateClass::Read, t0)).count();
        assert_eq!(allowed, 100);
        // Another prefix has its own budget; writes are unlimited here.
        assert!(!em.throttled("b/q", RateClass::Read, t0));
        assert!(!em.throttled("b/p", RateClass::Write, t0));
        // Half a second later, 50 more are allowed.
        let t1 = t0 + Duration::from_millis(500);
        let allowed = (0..100).filter(|_| !em.throttled("b/p", RateClass::Read, t1)).count();
        assert_eq!(allowed, 50);
    }

    #[test]
    fn fault_rates_are_respected() {
        let em = Emulator::new(Emulation::default(), Faults { error_503_rate: 1.0, ..Faults::default() });
        assert_eq!(em.injected_error(), Some(InjectedError::SlowDown));
        let em = Emulator::new(Emulation::default(), Faults { reset_rate: 1.0, ..Faults::default() });
        match em.body_fault(10) {
            Some(BodyFault::Reset { after_bytes }) => assert!(after_bytes < 10),
            other => panic!("{other:?}"),
        }
        let em = Emulator::new(Emulation::default(), Faults::default());
        assert_eq!(em.injected_error(), None);
        assert_eq!(em.body_fault(10), None);
    }
}
