//! The GCS client core: where requests go, how they are authorised, and the retry loop
//! every JSON API call runs through.
//!
//! ```text
//! operation (object.rs, list.rs, upload.rs, buckets.rs)
//!   └─ Op { method, path, query, headers, body, idempotent }
//!        └─ execute(op, handle) ── per attempt: bearer token (auth.rs, cached) ─► Transport::send
//!              │                                   ├─ 2xx (or an expected 308) ─► handle(resp)
//!              │                                   └─ else ─► error::from_response
//!              └─ on Err: the shared retry policy (crate::retry: class, attempts, budget, jitter;
//!                 a 429/503's Retry-After is the least it waits)
//! ```
//!
//! Endpoint: `https://storage.googleapis.com` unless `STORAGE_EMULATOR_HOST` names an
//! emulator (Google's client libraries' convention: `host:port` or a full URL) or the
//! caller gives one. Every path is the JSON API's (`/storage/v1/b/{bucket}/o/{object}`,
//! uploads under `/upload/storage/v1`), the object name percent-encoded as one path
//! segment (a `/` in it becomes `%2F`), which both Google and fake-gcs-server expect.

use crate::error::{Error, RetryClass};
use crate::gcs::auth::Auth;
use crate::gcs::error;
use crate::retry::{RetryBudget, RetryConfig};
use bytes::Bytes;
use ferry_wire::controller::{Controller, ControllerOptions};
use ferry_wire::{Endpoint, Request, RequestBody, Response, Transport};
use futures_util::stream::{BoxStream, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Google's production endpoint for the JSON API.
pub const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";

/// RFC 3986 unreserved characters stay; everything else (`/` included) is escaped.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// One path segment or query value, percent-encoded.
pub(crate) fn enc(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// An object's `gs://` URL, for messages (`ObjectRef`'s Display says `s3://`).
pub(crate) fn gs(o: &crate::types::ObjectRef) -> String {
    format!("gs://{}/{}", o.bucket, o.key)
}

/// The emulator's URL from `STORAGE_EMULATOR_HOST` (`host:port` gets `http://`).
pub(crate) fn emulator_url(value: &str) -> String {
    let v = value.trim().trim_end_matches('/');
    if v.starts_with("http://") || v.starts_with("https://") {
        v.to_owned()
    } else {
        format!("http://{v}")
    }
}

/// A request body as an operation holds it; every kind can be sent again (a stream is
/// cut into in-memory chunks before it gets here, object.rs).
pub(crate) enum Body {
    Empty,
    Bytes(Bytes),
    /// `head`, then `len` bytes of a file from `offset`, then `tail` (a multipart/related
    /// upload of a file part), the file re-opened for every attempt.
    Framed {
        head: Bytes,
        path: PathBuf,
        offset: u64,
        len: u64,
        tail: Bytes,
    },
    /// Pieces in memory sent one after another (a multipart/related upload of bytes:
    /// the framing around the caller's buffer, which is not copied).
    Chunks(Vec<Bytes>),
}

/// One JSON API call, before its token.
pub(crate) struct Op {
    pub(crate) name: &'static str,
    pub(crate) method: Method,
    /// Encoded path, starting with `/`.
    pub(crate) path: String,
    /// Decoded query pairs.
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Body,
    /// Safe to repeat (GET, HEAD, DELETE, and calls made conditional or idempotent by
    /// their names, see each operation).
    pub(crate) idempotent: bool,
    pub(crate) size_hint: Option<u64>,
    /// A resumable upload's "send more" answer (308) is a success for its chunks.
    pub(crate) accept_308: bool,
}

impl Op {
    pub(crate) fn new(name: &'static str, method: Method, path: String) -> Op {
        let idempotent = matches!(method, Method::GET | Method::HEAD | Method::DELETE);
        Op {
            name,
            method,
            path,
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: Body::Empty,
            idempotent,
            size_hint: None,
            accept_308: false,
        }
    }

    pub(crate) fn query(mut self, k: &str, v: impl Into<String>) -> Op {
        self.query.push((k.to_owned(), v.into()));
        self
    }

    pub(crate) fn query_opt(self, k: &str, v: Option<impl Into<String>>) -> Op {
        match v {
            Some(v) => self.query(k, v),
            None => self,
        }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Result<Op, Error> {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| Error::Config(format!("bad header {name}")))?;
        let v = HeaderValue::from_str(value)
            .map_err(|_| Error::Config(format!("invalid value for header {name}: {value:?}")))?;
        self.headers.insert(n, v);
        Ok(self)
    }

    pub(crate) fn body(mut self, body: Body) -> Op {
        self.body = body;
        self
    }

    pub(crate) fn json(self, value: &serde_json::Value) -> Result<Op, Error> {
        let op = self.header("content-type", "application/json")?;
        Ok(op.body(Body::Bytes(Bytes::from(value.to_string()))))
    }
}

/// A Google Cloud Storage client over one ferry-wire transport. Cheap to clone.
#[derive(Clone)]
pub struct GcsClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) endpoint: Endpoint,
    pub(crate) auth: Auth,
    /// The project buckets are created in and listed from.
    pub(crate) project: Option<String>,
    pub(crate) retry: RetryConfig,
    pub(crate) budget: Arc<RetryBudget>,
    pub(crate) controller: Arc<Controller>,
    pub(crate) feeds_controller: bool,
}

impl std::fmt::Debug for GcsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsClient")
            .field("endpoint", &self.base_url())
            .field("transport", &self.inner.transport.name())
            .field("auth", &self.inner.auth.describe())
            .finish()
    }
}

/// Cap of a client's own controller when the transport keeps none (as S3's client).
const OWN_CONTROLLER_MAX: usize = 64;

impl GcsClient {
    /// A client over a given transport (tests, and the lab forcing a transport).
    pub(crate) fn with_transport(
        transport: Arc<dyn Transport>,
        endpoint: Endpoint,
        auth: Auth,
        project: Option<String>,
        retry: RetryConfig,
    ) -> GcsClient {
        let budget = Arc::new(RetryBudget::new(retry.budget_tokens));
        let (controller, feeds_controller) = match transport.controller() {
            Some(c) => (c, false),
            None => {
                (Controller::new(ControllerOptions { max: OWN_CONTROLLER_MAX, ..ControllerOptions::default() }), true)
            }
        };
        GcsClient {
            inner: Arc::new(Inner { transport, endpoint, auth, project, retry, budget, controller, feeds_controller }),
        }
    }

    pub fn controller(&self) -> Arc<Controller> {
        self.inner.controller.clone()
    }

    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.inner.transport
    }

    /// `scheme://authority` of the endpoint.
    pub fn base_url(&self) -> String {
        let scheme = match self.inner.endpoint.scheme {
            ferry_wire::Scheme::Http => "http",
            ferry_wire::Scheme::Https => "https",
        };
        format!("{scheme}://{}", self.inner.endpoint.authority())
    }

    /// `/storage/v1/b/{bucket}/o/{object}`.
    pub(crate) fn object_path(bucket: &str, key: &str) -> String {
        format!("/storage/v1/b/{}/o/{}", enc(bucket), enc(key))
    }

    pub(crate) fn raw_query(pairs: &[(String, String)]) -> String {
        pairs.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
    }

    async fn build(&self, op: &Op) -> Result<Request, Error> {
        let body = match &op.body {
            Body::Empty => RequestBody::Empty,
            Body::Bytes(b) => RequestBody::from(b.clone()),
            Body::Chunks(pieces) => {
                let len = pieces.iter().map(|p| p.len() as u64).sum();
                let pieces: Vec<std::io::Result<Bytes>> = pieces.iter().cloned().map(Ok).collect();
                RequestBody::Stream { len, stream: futures_util::stream::iter(pieces).boxed() }
            }
            Body::Framed { head, path, offset, len, tail } => {
                let file = crate::s3::client::file_stream(path.clone(), *offset, *len).await?;
                let total = head.len() as u64 + *len + tail.len() as u64;
                let (h, t) = (head.clone(), tail.clone());
                let stream = futures_util::stream::once(async move { Ok(h) })
                    .chain(file)
                    .chain(futures_util::stream::once(async move { Ok(t) }));
                RequestBody::Stream { len: total, stream: stream.boxed() }
            }
        };
        let mut headers = op.headers.clone();
        if let Some(token) = self.inner.auth.token().await? {
            let v = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Error::Config("the access token is not a valid header value".into()))?;
            headers.insert(http::header::AUTHORIZATION, v);
        }
        let q = Self::raw_query(&op.query);
        let path_and_query = if q.is_empty() { op.path.clone() } else { format!("{}?{q}", op.path) };
        Ok(Request { method: op.method.clone(), path_and_query, headers, body, size_hint: op.size_hint, hedge: true })
    }

    /// Runs `op` with retries; `handle` turns a successful response into the result.
    pub(crate) async fn execute<T, F, Fut>(&self, op: &mut Op, mut handle: F) -> Result<T, Error>
    where
        F: FnMut(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let retry = &self.inner.retry;
        let is_head = op.method == Method::HEAD;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let req = self.build(op).await?;
            let observed = self.inner.feeds_controller.then(|| self.inner.controller.observe());
            let sent = self.inner.transport.send(req).await;
            if let (Some(permit), Ok(resp)) = (observed, &sent) {
                match resp.status.as_u16() {
                    503 | 429 => permit.throttled(),
                    _ if resp.status.is_success() => permit.success_with_latency(resp.meta.time_to_head),
                    _ => drop(permit),
                }
            }
            let mut retry_after: Option<Duration> = None;
            let result = match sent {
                Ok(resp) if resp.status.is_success() || (op.accept_308 && resp.status.as_u16() == 308) => {
                    handle(resp).await
                }
                Ok(resp) => {
                    retry_after = resp
                        .headers
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    Err(error::from_response(resp, is_head).await)
                }
                Err(e) => Err(Error::Transport(e)),
            };
            let e = match result {
                Ok(v) => {
                    self.inner.budget.refill(retry.success_refill);
                    return Ok(v);
                }
                Err(e) => e,
            };
            if matches!(e, Error::Auth { status: 401, .. }) && attempt == 1 {
                // An access token can be revoked or expire early: fetch a new one once.
                self.inner.auth.invalidate();
            } else {
                let Some(class) = e.retry_class(op.idempotent) else { return Err(e) };
                if attempt >= retry.max_attempts {
                    return Err(e);
                }
                let cost = if class == RetryClass::Timeout { retry.timeout_retry_cost } else { retry.retry_cost };
                if !self.inner.budget.withdraw(cost) {
                    tracing::debug!(op = op.name, error = %e, "retry budget exhausted; not retrying");
                    return Err(e);
                }
                // A throttling answer's Retry-After (seconds) is a floor, up to the cap.
                let mut sleep = retry.backoff(attempt - 1, class);
                if let (RetryClass::Throttled, Some(ra)) = (class, retry_after) {
                    sleep = sleep.max(ra.min(retry.max_delay));
                }
                tracing::debug!(op = op.name, attempt, ?sleep, error = %e, "retrying");
                tokio::time::sleep(sleep).await;
            }
        }
    }

    /// Withdraws a retry from the budget for work outside `execute` (GET resumes).
    pub(crate) fn take_retry(&self, class: RetryClass) -> bool {
        let r = &self.inner.retry;
        let cost = if class == RetryClass::Timeout { r.timeout_retry_cost } else { r.retry_cost };
        self.inner.budget.withdraw(cost)
    }

    /// Reads a JSON answer (bounded).
    pub(crate) async fn read_json(resp: Response) -> Result<serde_json::Value, Error> {
        let rid = error::request_id(&resp.headers);
        let body = resp.body.collect(JSON_LIMIT).await?;
        if body.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&body).map_err(|e| Error::protocol(format!("unparseable JSON answer: {e}"), rid))
    }

    /// A stream of file bytes, as request bodies send them.
    pub(crate) async fn file_stream(
        path: PathBuf,
        offset: u64,
        len: u64,
    ) -> Result<BoxStream<'static, std::io::Result<Bytes>>, Error> {
        crate::s3::client::file_stream(path, offset, len).await
    }
}

/// Largest JSON answer read: a 1,000-item listing page with long names and metadata is
/// a few MB.
pub(crate) const JSON_LIMIT: usize = 32 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_segment() {
        assert_eq!(GcsClient::object_path("b", "dir/a b+ü"), "/storage/v1/b/b/o/dir%2Fa%20b%2B%C3%BC");
        assert_eq!(enc("a-b.c_d~e"), "a-b.c_d~e");
    }

    #[test]
    fn emulator_host_forms() {
        assert_eq!(emulator_url("127.0.0.1:4443"), "http://127.0.0.1:4443");
        assert_eq!(emulator_url("https://localhost:4443/"), "https://localhost:4443");
    }
}
