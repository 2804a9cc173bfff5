//! Retries: which failures are retried, how long to wait, and a budget so that a failing
//! endpoint is not hammered.
//!
//! ```text
//! attempt ─► Ok ───────────────────────────► budget.refill(), done
//!        └─► Err(e) ─► e.retry_class(idempotent)?
//!                     ├─ None ───────────────► fail with e
//!                     ├─ attempts left? budget.withdraw(cost)?
//!                     │    no ───────────────► fail with e (the last error, typed)
//!                     └─ sleep(full jitter) ─► attempt again
//! ```
//!
//! What is retried (the decision reads typed errors, never messages; see
//! `Error::retry_class`): transport errors whose [`ferry_wire::WireError::retry_safe`]
//! allows it for the request's idempotency; throttling (503 SlowDown, 429) for every
//! request, because S3 rejects a throttled request before acting on it; 500, 502, 504 and
//! a 200 carrying an `<Error>` for idempotent operations only.
//!
//! Idempotency is the operation's, not the HTTP method's: GET, HEAD, PUT, DELETE, and
//! three POSTs, DeleteObjects (deleting a key twice leaves the same state) and
//! CompleteMultipartUpload (S3 completes an upload id once; a repeat of a completed
//! upload answers with the same result, or NoSuchUpload, which the caller sees as
//! such), and CreateMultipartUpload, which strictly is not: a repeat after a server
//! that did act (a 500 or a reset after it created the upload) leaves a second,
//! empty upload in progress. That one is invisible to readers, holds no bytes, is older
//! than the one the repeat returns (the upload `ferry cp` resumes is the newest of its
//! key), and is listed and aborted by `ferry ls/rm --incomplete` or a lifecycle rule.
//! Not retrying it failed a whole `cp` on one transient 500 (tests/test_cli.py's
//! faults test, about 1 run in 10 at a 15% fault rate); the AWS SDKs retry it too.
//! Other POSTs default to not idempotent (`Op::new`): a new one must choose.
//!
//! Backoff is "full jitter": `sleep = random(0, min(cap, base * 2^retry))`. The
//! constants follow the AWS SDKs' "standard" retry mode (AWS SDKs and Tools Reference
//! Guide, "Retry behavior"):
//! base 100 ms, 500 ms after throttling (the Java SDK v2's throttled base), cap 20 s; a
//! token bucket of 500, a retry costs 5 (a time-out 10), a success returns 1.
//!
//! `max_attempts` defaults to 5, not the SDK's 3: ferry runs many requests at once, so
//! bursts of SlowDown at S3's per-prefix limits (docs/lab/store-s3-facts.md) are expected and
//! short; 5 attempts give up to ~1.5 s (transient) or ~7.5 s (throttled) of expected
//! backoff, and the shared budget still stops retry storms against a dead endpoint.

use crate::error::RetryClass;
use rand::Rng;
use std::sync::Mutex;
use std::time::Duration;

/// Retry settings of a client.
#[derive(Clone, Debug)]
pub struct RetryConfig {
    /// Attempts per request, the first included (1 = no retries).
    pub max_attempts: u32,
    pub base_delay: Duration,
    /// Base after a throttling answer.
    pub throttled_base_delay: Duration,
    pub max_delay: Duration,
    /// Size of the shared retry budget (tokens).
    pub budget_tokens: u32,
    pub retry_cost: u32,
    pub timeout_retry_cost: u32,
    /// Tokens a successful request returns.
    pub success_refill: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 5,
            base_delay: Duration::from_millis(100),
            throttled_base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            budget_tokens: 500,
            retry_cost: 5,
            timeout_retry_cost: 10,
            success_refill: 1,
        }
    }
}

impl RetryConfig {
    /// No retries at all (tests, and callers with their own policy).
    pub fn none() -> RetryConfig {
        RetryConfig { max_attempts: 1, ..RetryConfig::default() }
    }

    /// The sleep before retry number `retry` (0 for the first retry): full jitter.
    pub(crate) fn backoff(&self, retry: u32, class: RetryClass) -> Duration {
        let base = if class == RetryClass::Throttled { self.throttled_base_delay } else { self.base_delay };
        let ceiling = base.saturating_mul(1u32 << retry.min(20)).min(self.max_delay);
        if ceiling.is_zero() {
            return Duration::ZERO;
        }
        let nanos = rand::thread_rng().gen_range(0..=ceiling.as_nanos().min(u64::MAX as u128) as u64);
        Duration::from_nanos(nanos)
    }
}

/// The shared token bucket: retries withdraw, successes refill.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    tokens: Mutex<u32>,
    capacity: u32,
}

impl RetryBudget {
    pub(crate) fn new(capacity: u32) -> RetryBudget {
        RetryBudget { tokens: Mutex::new(capacity), capacity }
    }

    /// Takes `cost` tokens if there are enough; false means "do not retry".
    pub(crate) fn withdraw(&self, cost: u32) -> bool {
        let mut t = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if *t >= cost {
            *t -= cost;
            true
        } else {
            false
        }
    }

    pub(crate) fn refill(&self, amount: u32) {
        let mut t = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        *t = (*t + amount).min(self.capacity);
    }

    #[cfg(test)]
    pub(crate) fn available(&self) -> u32 {
        *self.tokens.lock().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_stays_under_the_ceiling() {
        let c = RetryConfig::default();
        for retry in 0..10 {
            for _ in 0..50 {
                let d = c.backoff(retry, RetryClass::Transient);
                assert!(d <= (c.base_delay * (1 << retry)).min(c.max_delay));
                let t = c.backoff(retry, RetryClass::Throttled);
                assert!(t <= (c.throttled_base_delay * (1 << retry)).min(c.max_delay));
            }
        }
        assert!(c.backoff(40, RetryClass::Throttled) <= c.max_delay);
    }

    #[test]
    fn budget_withdraws_and_refills_to_capacity() {
        let b = RetryBudget::new(12);
        assert!(b.withdraw(5));
        assert!(b.withdraw(5));
        assert!(!b.withdraw(5));
        assert_eq!(b.available(), 2);
        b.refill(100);
        assert_eq!(b.available(), 12);
    }
}
