//! The GCS client core: where requests go and how they are authorised, GCS's part of the
//! request layer every provider shares (request.rs).
//!
//! ```text
//! operation (object.rs, list.rs, upload.rs, mod.rs)
//!   └─ Op::path(name, method, JSON API path) + query, headers, body
//!        └─ execute ─► request.rs Core::execute, per attempt: Signer::sign (this file:
//!              │        bearer token, auth.rs, cached) ─► Transport::send
//!              │        ├─ 2xx (or an expected 308) ─► handle(resp)
//!              │        └─ else ─► Signer::error = error::from_response (+ Retry-After)
//!              └─ on Err: the shared retry policy (a 401 first renews the token once; a
//!                 429/503's Retry-After is the least it waits)
//! ```
//!
//! Endpoint: `https://storage.googleapis.com` unless `STORAGE_EMULATOR_HOST` names an
//! emulator (Google's client libraries' convention: `host:port` or a full URL) or the
//! caller gives one. Every path is the JSON API's (`/storage/v1/b/{bucket}/o/{object}`,
//! uploads under `/upload/storage/v1`), the object name percent-encoded as one path
//! segment (a `/` in it becomes `%2F`), which both Google and fake-gcs-server expect.

use crate::error::Error;
use crate::gcs::auth::Auth;
use crate::gcs::error;
use crate::request::{Attempt, Core, Op, Signer, Target};
use crate::retry::RetryConfig;
use bytes::Bytes;
use ferry_wire::controller::Controller;
use ferry_wire::{Endpoint, Response, Transport};
use futures_util::stream::BoxStream;
use http::{HeaderMap, HeaderValue};
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

/// An object's `gs://` URL, for messages (an `ObjectRef` made by `ObjectRef::new`, as
/// the engine makes them, is S3's and would print `s3://`).
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

/// A Google Cloud Storage client over one ferry-wire transport. Cheap to clone.
#[derive(Clone)]
pub struct GcsClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// Transport, retries, controller: the layer every provider shares (request.rs).
    pub(crate) core: Core,
    pub(crate) endpoint: Endpoint,
    pub(crate) auth: Auth,
    /// The project buckets are created in and listed from.
    pub(crate) project: Option<String>,
}

impl std::fmt::Debug for GcsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsClient")
            .field("endpoint", &self.base_url())
            .field("transport", &self.inner.core.transport.name())
            .field("auth", &self.inner.auth.describe())
            .finish()
    }
}

impl GcsClient {
    /// A client over a given transport (tests, and the lab forcing a transport).
    pub(crate) fn with_transport(
        transport: Arc<dyn Transport>,
        endpoint: Endpoint,
        auth: Auth,
        project: Option<String>,
        retry: RetryConfig,
    ) -> GcsClient {
        GcsClient { inner: Arc::new(Inner { core: Core::new(transport, retry), endpoint, auth, project }) }
    }

    pub fn controller(&self) -> Arc<Controller> {
        self.inner.core.controller.clone()
    }

    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.inner.core.transport
    }

    /// The request layer this client sends through (its retry budget too).
    pub(crate) fn core(&self) -> &Core {
        &self.inner.core
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

    /// Runs `op` with retries (request.rs); `handle` turns a successful response into
    /// the result.
    pub(crate) async fn execute<T, F, Fut>(&self, op: &mut Op, handle: F) -> Result<T, Error>
    where
        F: FnMut(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.inner.core.execute(self, op, handle).await
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
        crate::request::file_stream(path, offset, len).await
    }
}

/// GCS's part of the shared request layer: a JSON API path, a bearer token.
impl Signer for GcsClient {
    async fn sign(&self, op: Attempt<'_>, headers: &mut HeaderMap) -> Result<String, Error> {
        if let Some(token) = self.inner.auth.token().await? {
            let v = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Error::Config("the access token is not a valid header value".into()))?;
            headers.insert(http::header::AUTHORIZATION, v);
        }
        let path = match op.target {
            Target::Path(p) => p.clone(),
            Target::Object { bucket, key: Some(key) } => Self::object_path(bucket, key),
            Target::Object { bucket, key: None } => format!("/storage/v1/b/{}", enc(bucket)),
        };
        let q = Self::raw_query(op.query);
        Ok(if q.is_empty() { path } else { format!("{path}?{q}") })
    }

    /// A throttling answer's `Retry-After` (seconds) is the least the retry waits.
    async fn error(&self, resp: Response, head_request: bool) -> (Error, Option<Duration>) {
        let retry_after = resp
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let e = error::from_response(resp, head_request).await;
        let wait = if matches!(e, Error::Throttled { .. }) { retry_after } else { None };
        (e, wait)
    }

    /// An access token can be revoked or expire early: a 401 fetches a new one, once.
    fn renewed_after(&self, error: &Error) -> bool {
        if matches!(error, Error::Auth { status: 401, .. }) {
            self.inner.auth.invalidate();
            true
        } else {
            false
        }
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
