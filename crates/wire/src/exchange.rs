//! What every transport does around one exchange, whatever carries it: framing headers
//! (Content-Length) and the response-head time-out, which counts from the last request
//! byte handed on, so that a large upload is not cut by it. Shared by pool.rs and h2.rs
//! from below, so that no transport imports another.

use crate::body::RequestBody;
use crate::error::{ErrorKind, WireError};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderValue, Method};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
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
