//! What every transport does around one exchange, whatever carries it: framing headers
//! (Content-Length), the response-head time-out, which counts from the last request
//! byte handed on, so that a large upload is not cut by it, and the response-body stall
//! time-out. Shared by pool.rs and h2.rs from below, so that no transport imports another.
//!
//! Both time-outs measure the same thing, a request that made no progress: no request
//! byte taken by the connection and no response head for `response_timeout`, or, once the
//! body streams, no body byte for `response_timeout` while the reader waits for one. Time
//! the reader spends elsewhere (writing a file, checksumming) is not counted: the stall
//! clock runs only while a poll of the body is pending. So a dead link ends every
//! exchange on it within `response_timeout`, however large the object; h1-pipeline keeps
//! the same two clocks in its own reader (pipeline.rs).

use crate::body::RequestBody;
use crate::error::{ErrorKind, WireError};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderValue, Method};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Sets Content-Length from the body (and 0 for empty PUT/POST, which S3 requires).
pub(crate) fn set_content_length(method: &Method, headers: &mut HeaderMap, body: &RequestBody) {
    if !body.is_empty() || matches!(*method, Method::PUT | Method::POST | Method::PATCH) {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
}

pub(crate) fn timeout_error(limit: Duration) -> WireError {
    WireError::new(ErrorKind::Timeout, format!("no response head within {limit:?} of the request being written"))
}

/// The time the request body last made progress, for the response time-out.
#[derive(Clone)]
pub(crate) struct Progress {
    base: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress { base: Instant::now(), last_ms: Arc::new(AtomicU64::new(0)) }
    }

    pub(crate) fn touch(&self) {
        self.last_ms.store(self.base.elapsed().as_millis() as u64, Relaxed);
    }

    pub(crate) fn last(&self) -> Instant {
        self.base + Duration::from_millis(self.last_ms.load(Relaxed))
    }
}

/// Awaits a response head, failing (`None`) when none arrives within `limit` of the last
/// request body chunk handed to hyper: a large upload is not cut by the head time-out.
pub(crate) async fn await_head<F: Future>(fut: F, limit: Duration, progress: &Progress) -> Option<F::Output> {
    tokio::pin!(fut);
    loop {
        let deadline = progress.last() + limit;
        tokio::select! {
            out = &mut fut => return Some(out),
            _ = tokio::time::sleep_until(deadline.into()) => {
                if progress.last() + limit <= Instant::now() {
                    return None;
                }
            }
        }
    }
}

/// The stall clock of a response body: it starts when a poll for the next chunk finds
/// none ready and stops when a chunk arrives, so only time spent waiting on the peer
/// counts.
///
/// Cheap on the hot path (a bulk GET waits once per chunk): one clock read when a wait
/// begins, and one timer that is only re-armed when it fires. A timer set for an earlier
/// wait fires early; it is then moved to this wait's deadline, never reallocated.
pub(crate) struct StallClock {
    limit: Duration,
    waiting_since: Option<tokio::time::Instant>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl StallClock {
    pub(crate) fn new(limit: Duration) -> StallClock {
        StallClock { limit, waiting_since: None, sleep: None }
    }

    pub(crate) fn limit(&self) -> Duration {
        self.limit
    }

    /// A chunk (or the end) arrived: the clock stops.
    pub(crate) fn progressed(&mut self) {
        self.waiting_since = None;
    }

    /// The body had nothing ready: starts the clock if it is not running, and says
    /// whether `limit` has passed since it started (else `cx` is woken when it does).
    pub(crate) fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let since = *self.waiting_since.get_or_insert_with(tokio::time::Instant::now);
        let deadline = since + self.limit;
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        loop {
            match sleep.as_mut().poll(cx) {
                Poll::Pending => return false,
                Poll::Ready(()) if sleep.deadline() >= deadline => return true,
                // Set for an earlier wait: move it to this one's deadline and poll again,
                // which registers `cx`.
                Poll::Ready(()) => sleep.as_mut().reset(deadline),
            }
        }
    }
}
