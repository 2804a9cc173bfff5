//! Batch delete: any number of keys through DeleteObjects, 1,000 keys per request,
//! several requests in flight, per-key failures retried a bounded number of times and
//! then reported (Hudi's cleaner deletes 5,000 files per commit; `ferry bench commit`
//! reproduces it).
//!
//! ```text
//! keys (a stream) ─► batches of <= 1,000 ─► at most `concurrency` batches in flight
//!   batch ─► DeleteObjects (ferry-store: keys XML 1.0 cannot carry go one by one
//!            through DeleteObject, since S3 rejects them in the XML body)
//!     ├─ <Deleted> keys              ─► counted
//!     ├─ <Error> keys, transient code ─► next attempt of the batch (only those keys)
//!     ├─ <Error> keys, other code     ─► reported (key, code, message)
//!     └─ the request failed after the client's own retries
//!          ├─ retryable (throttled, 5xx, transport) ─► next attempt, all keys
//!          └─ otherwise ─► every key reported with the request's error
//!   after `attempts` attempts, what is left is reported with its last error
//! ```
//!
//! Memory: the stream is read only as batches are sent, so at most `concurrency + 1`
//! batches of keys are held, whatever the number of keys. Deleted keys are counted, not
//! kept; failed keys are kept (with their error) since the caller must act on them.
//!
//! Retries stack on the client's: each DeleteObjects request already gets the client's
//! attempts (with jittered backoff and the shared retry budget) for whole-request
//! failures; this layer adds attempts across those, and per key, which the client does
//! not see. The wait between attempts doubles from `retry_delay` (100 ms: the AWS SDKs'
//! base delay, see ferry-store's retry.rs).

use crate::admission::Engine;
use ferry_store::Error;
use futures_util::stream::{Stream, StreamExt};
use std::time::Duration;

/// Options of [`delete_many`].
#[derive(Clone, Debug)]
pub struct DeleteOptions {
    /// Keys per DeleteObjects request (at most S3's 1,000).
    pub batch_size: usize,
    /// DeleteObjects requests in flight. 8, i.e. 8,000 keys: every key counts against
    /// S3's 3,500 writes/s per prefix (docs/lab/store-s3-facts.md), which 8 requests of 1,000 keys
    /// already exceed when each takes under ~2 s; more mostly buys SlowDown.
    pub concurrency: usize,
    /// Attempts per key, the first included.
    pub attempts: u32,
    /// Wait before the second attempt; doubled for each one after.
    pub retry_delay: Duration,
}

impl Default for DeleteOptions {
    fn default() -> Self {
        DeleteOptions {
            batch_size: DEFAULT_BATCH,
            concurrency: 8,
            attempts: 3,
            retry_delay: Duration::from_millis(100),
        }
    }
}

/// A key that could not be deleted, with the last error for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteFailure {
    pub key: String,
    pub code: String,
    pub message: String,
}

/// What [`delete_many`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Keys deleted (S3 counts a key that did not exist as deleted).
    pub deleted: u64,
    pub failed: Vec<DeleteFailure>,
    /// Requests issued: DeleteObjects, plus DeleteObject for keys XML cannot carry (the
    /// client's own retries of a request are not counted).
    pub requests: u64,
}

/// Keys per batch by default: S3's DeleteObjects limit; a store with a smaller one
/// ([`ferry_store::Capabilities::max_batch_delete`]) lowers it.
pub const DEFAULT_BATCH: usize = 1000;

/// Deletes every key of `keys` from `bucket` (module note). Never fails as a whole:
/// every key is either counted as deleted or reported in `failed`.
///
/// ```no_run
/// # async fn example(engine: &ferry_engine::Engine) {
/// use ferry_engine::delete::{delete_many, DeleteOptions};
/// let keys = futures_util::stream::iter((0..5_000).map(|i| format!("table/.hoodie/old-{i}")));
/// let report = delete_many(engine, "bucket", keys, &DeleteOptions::default()).await;
/// println!("{} deleted in {} requests", report.deleted, report.requests);
/// for f in &report.failed {
///     eprintln!("{}: {} {}", f.key, f.code, f.message);
/// }
/// # }
/// ```
pub async fn delete_many<S>(engine: &Engine, bucket: &str, keys: S, opts: &DeleteOptions) -> DeleteReport
where
    S: Stream<Item = String>,
{
    let batch = opts.batch_size.clamp(1, engine.capabilities().max_batch_delete.max(1));
    // `concurrency` is a cap; below it, the endpoint's controller decides (admission.rs).
    keys.chunks(batch)
        .map(|keys| async move {
            let _room = engine.admission().room().await;
            delete_batch(engine, bucket, keys, opts).await
        })
        .buffer_unordered(opts.concurrency.max(1))
        .fold(DeleteReport::default(), |mut acc, r| async move {
            acc.deleted += r.deleted;
            acc.requests += r.requests;
            acc.failed.extend(r.failed);
            acc
        })
        .await
}

async fn delete_batch(engine: &Engine, bucket: &str, keys: Vec<String>, opts: &DeleteOptions) -> DeleteReport {
    let mut report = DeleteReport::default();
    let mut pending = keys;
    let attempts = opts.attempts.max(1);
    for attempt in 1..=attempts {
        if pending.is_empty() {
            break;
        }
        if attempt > 1 {
            tokio::time::sleep(opts.retry_delay.saturating_mul(1 << (attempt - 2).min(10))).await;
        }
        let singles = pending.iter().filter(|k| !k.chars().all(xml_char)).count() as u64;
        report.requests += singles + u64::from(singles < pending.len() as u64);
        let last = attempt == attempts;
        match engine.delete_batch(bucket, &pending).await {
            Ok(out) => {
                report.deleted += out.deleted.len() as u64;
                let mut again = Vec::new();
                for e in out.errors {
                    if !last && transient_code(&e.code) {
                        again.push(e.key);
                    } else {
                        report.failed.push(DeleteFailure { key: e.key, code: e.code, message: e.message });
                    }
                }
                pending = again;
            }
            Err(e) if !last && retryable(&e) => {
                tracing::debug!(bucket, keys = pending.len(), attempt, error = %e, "DeleteObjects failed; retrying the batch");
            }
            Err(e) => {
                let code = e.code().unwrap_or("RequestFailed").to_owned();
                let message = e.to_string();
                report.failed.extend(pending.drain(..).map(|key| DeleteFailure {
                    key,
                    code: code.clone(),
                    message: message.clone(),
                }));
            }
        }
    }
    report
}

/// Per-key codes worth another attempt (S3 documents InternalError and SlowDown in
/// DeleteObjects results; the others are its "try again" codes).
fn transient_code(code: &str) -> bool {
    matches!(
        code,
        "InternalError" | "SlowDown" | "ServiceUnavailable" | "RequestTimeout" | "OperationAborted" | "Throttling"
    )
}

/// Whether a failed request may succeed when sent again.
fn retryable(e: &Error) -> bool {
    matches!(e, Error::Throttled { .. } | Error::Transport(_)) || e.status().is_some_and(|s| s >= 500)
}

/// Whether XML 1.0 can carry `c` (XML 1.0, section 2.2, "Characters"); ferry-store
/// sends keys with other characters through DeleteObject, one request each.
fn xml_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_errors_are_classified() {
        assert!(transient_code("InternalError") && transient_code("SlowDown"));
        assert!(!transient_code("AccessDenied") && !transient_code("KeyTooLongError"));
        let e = Error::Service { status: 500, code: "InternalError".into(), message: String::new(), request_id: None };
        assert!(retryable(&e));
        let e = Error::Auth { status: 403, code: "AccessDenied".into(), message: String::new(), request_id: None };
        assert!(!retryable(&e));
        assert!(!xml_char('\u{1}') && !xml_char('\u{FFFE}') && xml_char('\t') && xml_char('é'));
    }
}
