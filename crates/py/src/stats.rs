//! The counters behind `Client.stats()`: requests by operation, failed attempts the
//! client retries, first-byte latency percentiles, bytes in and out, for every provider.
//!
//! ```text
//! store (S3, GCS, Azure) ─► Counting (this module) ─► the transport (auto / h1-pool / ...)
//!   send(request) ─► operation from the provider, method, path and query (S3: GET
//!                    ?list-type ─► LIST, PUT ?partNumber ─► UPLOAD_PART; GCS: POST
//!                    .../compose ─► COMPLETE_UPLOAD; Azure: PUT ?comp=block ─►
//!                    UPLOAD_PART, ...), body length ─► bytes_out
//!   response head ─► time_to_head into a log histogram; status 429/5xx ─► retryable
//!   response body ─► counted as it is read ─► bytes_in (a body dropped early counts
//!                    what was read, not what was announced)
//! ```
//!
//! Counted below the store, at the transport seam, so every attempt is seen, retries
//! included, whatever the operation: `ferry_store::connect` puts it under each
//! provider's store through `StoreOptions::transport_layer` (client.rs), all of a
//! client's stores sharing one set of counters.
//!
//! Latency percentiles come from a histogram of [`BUCKETS_PER_OCTAVE`] buckets per
//! doubling from 1 µs: each figure is its bucket's geometric middle, within 4.5% of
//! the true value, in constant memory however many requests were made.

use ferry_store::{Provider, TransportLayer};
use ferry_wire::{Request, Response, ResponseBody, Transport, TransportStats, WireError};
use futures_util::future::BoxFuture;
use futures_util::stream::{self, StreamExt};
use http::{Method, StatusCode};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Histogram resolution: 8 buckets per doubling, so a bucket spans 2^(1/8) = 1.09x and
/// its middle is within 4.5% of any value in it.
const BUCKETS_PER_OCTAVE: f64 = 8.0;
/// 1 µs to 2^30 µs (~18 minutes), the longest a response head can take (the transport's
/// time-out is 60 s); slower ones land in the last bucket.
const BUCKETS: usize = 30 * 8 + 1;

/// The operations counted by name (the S3 API's, grouped as a user reads a bill; each
/// provider's calls are counted under the one they stand for).
pub const OPERATIONS: [&str; 12] = [
    "GET",
    "HEAD",
    "PUT",
    "LIST",
    "DELETE",
    "DELETE_BATCH",
    "COPY",
    "CREATE_UPLOAD",
    "UPLOAD_PART",
    "COMPLETE_UPLOAD",
    "ABORT_UPLOAD",
    "OTHER",
];

/// Which [`OPERATIONS`] entry a request to `provider` is.
fn operation(provider: Provider, req: &Request) -> usize {
    let (path, query) = req.path_and_query.split_once('?').unwrap_or((&req.path_and_query, ""));
    let has = |name: &str| query.split('&').any(|kv| kv == name || kv.starts_with(&format!("{name}=")));
    let is = |kv: &str| query.split('&').any(|q| q == kv);
    let index = |name: &str| OPERATIONS.iter().position(|o| *o == name).expect("a listed operation");
    let name = match provider {
        Provider::S3 => s3_operation(req, &has),
        // The JSON API: objects under /storage/v1/b/B/o[/NAME], uploads under /upload,
        // a batch at /batch (gcs/object.rs, gcs/upload.rs).
        Provider::Gcs => match req.method {
            Method::GET
                if matches!(
                    path.split('/').collect::<Vec<_>>()[..],
                    ["", "storage", "v1", "b"] | ["", "storage", "v1", "b", _, "o"]
                ) =>
            {
                "LIST"
            }
            Method::GET if is("alt=media") => "GET",
            Method::GET => "HEAD",
            Method::POST if path.starts_with("/upload/") => "PUT",
            Method::PUT => "PUT",
            Method::POST if path.ends_with("/compose") => "COMPLETE_UPLOAD",
            Method::POST if path.contains("/rewriteTo/") || path.contains("/copyTo/") => "COPY",
            Method::POST if path.starts_with("/batch/") => "DELETE_BATCH",
            Method::DELETE => "DELETE",
            _ => "OTHER",
        },
        // The Blob service REST API (azure/object.rs, blocks.rs, list.rs, batch.rs).
        Provider::Azure => match req.method {
            Method::GET if is("comp=list") || is("comp=blocklist") => "LIST",
            Method::GET => "GET",
            Method::HEAD => "HEAD",
            Method::PUT if is("comp=block") => "UPLOAD_PART",
            Method::PUT if is("comp=blocklist") => "COMPLETE_UPLOAD",
            Method::PUT if req.headers.contains_key("x-ms-copy-source") => "COPY",
            Method::PUT if has("restype") => "OTHER",
            Method::PUT => "PUT",
            Method::POST if is("comp=batch") => "DELETE_BATCH",
            Method::DELETE if has("restype") => "OTHER",
            Method::DELETE => "DELETE",
            _ => "OTHER",
        },
    };
    index(name)
}

/// Which [`OPERATIONS`] name an S3 request is.
fn s3_operation(req: &Request, has: &dyn Fn(&str) -> bool) -> &'static str {
    let query = req.path_and_query.split_once('?').map(|(_, q)| q).unwrap_or("");
    match req.method {
        Method::GET if has("list-type") || has("uploads") || has("uploadId") || query.is_empty() && is_bucket(req) => {
            "LIST"
        }
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT if has("partNumber") => "UPLOAD_PART",
        Method::PUT if req.headers.contains_key("x-amz-copy-source") => "COPY",
        Method::PUT => "PUT",
        Method::POST if has("delete") => "DELETE_BATCH",
        Method::POST if has("uploads") => "CREATE_UPLOAD",
        Method::POST if has("uploadId") => "COMPLETE_UPLOAD",
        Method::DELETE if has("uploadId") => "ABORT_UPLOAD",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// A path naming no object (`/` or `/bucket`): listing buckets or a bucket's objects.
fn is_bucket(req: &Request) -> bool {
    let path = req.path_and_query.split('?').next().unwrap_or("/");
    !matches!(path.trim_start_matches('/').split_once('/'), Some((_, key)) if !key.is_empty())
}

/// The counters, shared by the transport wrapper and `stats()`.
pub struct Counters {
    requests: [AtomicU64; OPERATIONS.len()],
    retryable: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    latency: [AtomicU64; BUCKETS],
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            retryable: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

fn bucket_of(d: Duration) -> usize {
    let micros = d.as_secs_f64() * 1e6;
    if micros <= 1.0 {
        return 0;
    }
    ((micros.log2() * BUCKETS_PER_OCTAVE).floor() as usize + 1).min(BUCKETS - 1)
}

/// The geometric middle of bucket `i`, in seconds.
fn bucket_middle(i: usize) -> f64 {
    if i == 0 {
        return 1e-6;
    }
    let low = ((i - 1) as f64 / BUCKETS_PER_OCTAVE).exp2();
    low * (0.5 / BUCKETS_PER_OCTAVE).exp2() * 1e-6
}

/// What `stats()` reports from the counters.
pub struct Snapshot {
    pub requests: Vec<(&'static str, u64)>,
    pub retryable: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub first_byte_p50_s: Option<f64>,
    pub first_byte_p95_s: Option<f64>,
}

impl Counters {
    pub fn snapshot(&self) -> Snapshot {
        let counts: Vec<u64> = self.latency.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let percentile = |q: f64| -> Option<f64> {
            if total == 0 {
                return None;
            }
            let rank = ((q * total as f64).ceil() as u64).max(1);
            let mut seen = 0;
            counts.iter().enumerate().find_map(|(i, c)| {
                seen += c;
                (seen >= rank).then(|| bucket_middle(i))
            })
        };
        Snapshot {
            requests: OPERATIONS.iter().zip(&self.requests).map(|(n, c)| (*n, c.load(Relaxed))).collect(),
            retryable: self.retryable.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            bytes_out: self.bytes_out.load(Relaxed),
            first_byte_p50_s: percentile(0.50),
            first_byte_p95_s: percentile(0.95),
        }
    }
}

/// A transport that counts what passes through it (module note).
pub struct Counting {
    inner: Arc<dyn Transport>,
    provider: Provider,
    pub counters: Arc<Counters>,
}

impl Counting {
    /// Counts requests to `provider` into `counters`.
    pub fn new(inner: Arc<dyn Transport>, provider: Provider, counters: Arc<Counters>) -> Counting {
        Counting { inner, provider, counters }
    }

    /// The layer `ferry_store::connect` puts under a store (`StoreOptions::transport_layer`).
    pub fn layer(counters: Arc<Counters>) -> TransportLayer {
        TransportLayer::new(move |provider, inner| Arc::new(Counting::new(inner, provider, counters.clone())))
    }
}

impl Transport for Counting {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let c = self.counters.clone();
        c.requests[operation(self.provider, &req)].fetch_add(1, Relaxed);
        c.bytes_out.fetch_add(req.body.len(), Relaxed);
        let sent = self.inner.send(req);
        Box::pin(async move {
            match sent.await {
                Ok(mut resp) => {
                    c.latency[bucket_of(resp.meta.time_to_head)].fetch_add(1, Relaxed);
                    if resp.status == StatusCode::TOO_MANY_REQUESTS || resp.status.is_server_error() {
                        c.retryable.fetch_add(1, Relaxed);
                    }
                    let len = resp.body.content_length();
                    let body = std::mem::replace(&mut resp.body, ResponseBody::empty());
                    let counted = stream::unfold((body, c), |(mut body, c)| async move {
                        let chunk = body.chunk().await?;
                        if let Ok(b) = &chunk {
                            c.bytes_in.fetch_add(b.len() as u64, Relaxed);
                        }
                        Some((chunk, (body, c)))
                    });
                    resp.body = ResponseBody::new(counted.boxed(), len);
                    Ok(resp)
                }
                Err(e) => {
                    c.retryable.fetch_add(1, Relaxed);
                    Err(e)
                }
            }
        })
    }

    fn stats(&self) -> TransportStats {
        self.inner.stats()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn controller(&self) -> Option<Arc<ferry_wire::controller::Controller>> {
        self.inner.controller()
    }

    fn small_depth(&self) -> usize {
        self.inner.small_depth()
    }
}
