//! The client core: configuration, addressing, signing, and the retry loop every
//! operation runs through.
//!
//! ```text
//! operation (object.rs, list.rs, multipart.rs)
//!   └─ Op { method, bucket, key, query, headers, body, idempotent }
//!        └─ execute(op, handler) ── per attempt: build ─► sign ─► Transport::send
//!              │                                     ├─ 2xx ─► handler(resp) (may find a 200 <Error>)
//!              │                                     └─ else ─► error::from_response
//!              └─ on Err: retry.rs policy (class, attempts, budget, full-jitter sleep)
//! ```
//!
//! Signing is SigV4 by ferry's own `ferry_proto::sigv4`, not the `aws-sigv4` crate: the
//! same canonicaliser the server verifies with (so the two are tested against each
//! other), no SDK runtime types to convert per request, and a signature costs five
//! HMAC-SHA256 plus one SHA-256 of a few hundred bytes. Bodies are sent with
//! `x-amz-content-sha256: UNSIGNED-PAYLOAD` (empty bodies with the empty hash): hashing
//! every payload with SHA-256 would cost more CPU than the transfer itself, and the
//! body's integrity is carried by an `x-amz-checksum-*` value (CRC64NVME by default)
//! that S3 verifies instead.
//!
//! Addressing: path-style (`/bucket/key`) for IP addresses, localhost and custom
//! endpoints; virtual-hosted (`Host: bucket.s3.region.amazonaws.com`, `/key`) for
//! `*.amazonaws.com`, except bucket names that are not valid DNS labels (dots, upper
//! case), which S3 serves path-style. The transport connects to the endpoint host; the
//! bucket only changes the Host header.

use crate::error::Error;
use crate::retry::{RetryBudget, RetryConfig};
use crate::s3::credentials::{self, Credentials, CredentialsSource};
use crate::s3::error;
use crate::types::ObjectRef;
use bytes::Bytes;
use ferry_proto::encoding::uri_encode;
use ferry_proto::sigv4;
use ferry_wire::controller::{Controller, ControllerOptions};
use ferry_wire::{Endpoint, Mode, Request, RequestBody, Response, Transport, TransportConfig};
use futures_util::stream::BoxStream;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How a bucket appears in requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// `http://host/bucket/key`
    PathStyle,
    /// `http://bucket.host/key`
    VirtualHosted,
}

impl Addressing {
    /// Virtual-hosted for `*.amazonaws.com`, path-style for everything else.
    pub fn default_for(endpoint: &Endpoint) -> Addressing {
        let host = endpoint.host.to_ascii_lowercase();
        if host == "amazonaws.com" || host.ends_with(".amazonaws.com") {
            Addressing::VirtualHosted
        } else {
            Addressing::PathStyle
        }
    }
}

/// Everything a client needs besides its transport.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub endpoint: Endpoint,
    pub region: String,
    /// `None`: anonymous, requests are not signed.
    pub credentials: Option<Credentials>,
    pub addressing: Addressing,
    pub retry: RetryConfig,
}

impl ClientConfig {
    /// Defaults for an endpoint URL: region us-east-1, anonymous, addressing by host.
    pub fn new(endpoint_url: &str) -> Result<ClientConfig, Error> {
        let endpoint = Endpoint::parse(endpoint_url).map_err(|e| Error::Config(e.to_string()))?;
        Ok(ClientConfig {
            addressing: Addressing::default_for(&endpoint),
            endpoint,
            region: "us-east-1".into(),
            credentials: None,
            retry: RetryConfig::default(),
        })
    }

    pub fn with_credentials(mut self, credentials: Credentials) -> ClientConfig {
        self.credentials = Some(credentials);
        self
    }
}

/// Builds an [`S3Client`] with its own transport.
#[derive(Clone, Debug)]
pub struct S3ClientBuilder {
    pub endpoint: String,
    /// `None`: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1.
    pub region: Option<String>,
    pub credentials: CredentialsSource,
    /// `None`: [`Addressing::default_for`] the endpoint.
    pub addressing: Option<Addressing>,
    pub mode: Mode,
    pub ca_file: Option<PathBuf>,
    /// `None`: the transport's default cap.
    pub max_connections: Option<usize>,
    /// `None`: the transport's default (32). Requests in flight per pipelined HTTP/1.1
    /// connection (h1-pipeline, and auto when it pipelines).
    pub pipeline_depth: Option<usize>,
    pub retry: RetryConfig,
}

impl S3ClientBuilder {
    pub fn new(endpoint: impl Into<String>) -> S3ClientBuilder {
        S3ClientBuilder {
            endpoint: endpoint.into(),
            region: None,
            credentials: CredentialsSource::Default,
            addressing: None,
            mode: Mode::Auto,
            ca_file: None,
            max_connections: None,
            pipeline_depth: None,
            retry: RetryConfig::default(),
        }
    }

    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    pub fn credentials(mut self, source: CredentialsSource) -> Self {
        self.credentials = source;
        self
    }

    pub fn addressing(mut self, addressing: Addressing) -> Self {
        self.addressing = Some(addressing);
        self
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// Requests in flight per pipelined connection (at least 1).
    pub fn pipeline_depth(mut self, depth: usize) -> Self {
        self.pipeline_depth = Some(depth.max(1));
        self
    }

    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Resolves credentials and region, and opens the transport (no connection yet).
    pub fn build(self) -> Result<S3Client, Error> {
        let endpoint = Endpoint::parse(&self.endpoint).map_err(|e| Error::Config(e.to_string()))?;
        let credentials = self.credentials.resolve()?;
        let region = self
            .region
            .or_else(|| credentials::region_from_env(&credentials::ProcessEnv))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let mut tc = TransportConfig::new(endpoint.clone());
        tc.mode = self.mode;
        tc.ca_file = self.ca_file;
        if let Some(n) = self.max_connections {
            tc.max_connections = n;
        }
        if let Some(d) = self.pipeline_depth {
            tc.pipeline_depth = d;
        }
        let transport = ferry_wire::transport(tc)?;
        let config = ClientConfig {
            addressing: self.addressing.unwrap_or_else(|| Addressing::default_for(&endpoint)),
            endpoint,
            region,
            credentials,
            retry: self.retry,
        };
        Ok(S3Client::with_transport(transport, config))
    }
}

/// Hard cap of a client's own controller (a transport that keeps none): the controller's
/// default, above the AWS SDKs' 50-connection pool (docs/lab/store-s3-facts.md); each fan-out of the
/// engine also has a cap of its own.
const OWN_CONTROLLER_MAX: usize = 64;

/// An S3 client. Cheap to clone: clones share the transport and the retry budget.
#[derive(Clone)]
pub struct S3Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) config: ClientConfig,
    pub(crate) signing_creds: Option<sigv4::Credentials>,
    pub(crate) budget: Arc<RetryBudget>,
    /// The endpoint's concurrency controller: the transport's, or this client's own when
    /// the transport keeps none (then `execute` reports every response to it).
    pub(crate) controller: Arc<Controller>,
    pub(crate) feeds_controller: bool,
}

impl std::fmt::Debug for S3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Client")
            .field("transport", &self.inner.transport.name())
            .field("config", &self.inner.config)
            .finish()
    }
}

/// A request body as an operation holds it: replayable ones can be retried.
pub(crate) enum OpBody {
    Empty,
    Bytes(Bytes),
    /// `len` bytes of a file from `offset`, re-opened for every attempt.
    File {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
    /// Sent once; taken by the first attempt.
    Once(Option<RequestBody>),
}

impl OpBody {
    pub(crate) fn replayable(&self) -> bool {
        !matches!(self, OpBody::Once(_))
    }
}

/// One S3 operation, before signing.
pub(crate) struct Op {
    pub(crate) name: &'static str,
    pub(crate) method: Method,
    pub(crate) bucket: String,
    /// `None` for bucket-level requests.
    pub(crate) key: Option<String>,
    /// Decoded query pairs; an empty value is written as a bare key (`?uploads`).
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: OpBody,
    /// Idempotent as an S3 operation (retry.rs module note).
    pub(crate) idempotent: bool,
    /// `x-amz-content-sha256` override (aws-chunked bodies).
    pub(crate) content_sha256: Option<&'static str>,
    /// Response body size when known (wire's `Request::size_hint`).
    pub(crate) size_hint: Option<u64>,
}

impl Op {
    pub(crate) fn new(name: &'static str, method: Method, bucket: &str, key: Option<&str>) -> Op {
        let idempotent = matches!(method, Method::GET | Method::HEAD | Method::PUT | Method::DELETE);
        Op {
            name,
            method,
            bucket: bucket.to_owned(),
            key: key.map(str::to_owned),
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: OpBody::Empty,
            idempotent,
            content_sha256: None,
            size_hint: None,
        }
    }

    pub(crate) fn query(mut self, k: &str, v: impl Into<String>) -> Op {
        self.query.push((k.to_owned(), v.into()));
        self
    }

    /// Sets a header; values that are not valid header text are a configuration error.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Result<Op, Error> {
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Error::Config(format!("invalid header name {name:?}")))?;
        let v = HeaderValue::from_str(value)
            .map_err(|_| Error::Config(format!("invalid value for header {name}: {value:?}")))?;
        self.headers.insert(n, v);
        Ok(self)
    }

    pub(crate) fn header_opt(self, name: &str, value: Option<&str>) -> Result<Op, Error> {
        match value {
            Some(v) => self.header(name, v),
            None => Ok(self),
        }
    }

    pub(crate) fn body(mut self, body: OpBody) -> Op {
        self.body = body;
        self
    }
}

fn dns_compatible(bucket: &str) -> bool {
    (3..=63).contains(&bucket.len())
        && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !bucket.starts_with('-')
        && !bucket.ends_with('-')
}

impl S3Client {
    /// Starts a builder for `endpoint` (`https://s3.us-east-1.amazonaws.com`, `http://127.0.0.1:9000`).
    pub fn builder(endpoint: impl Into<String>) -> S3ClientBuilder {
        S3ClientBuilder::new(endpoint)
    }

    /// A client over a given transport: for tests, and for the lab to force a transport.
    pub fn with_transport(transport: Arc<dyn Transport>, config: ClientConfig) -> S3Client {
        let signing_creds = config.credentials.as_ref().map(Credentials::to_proto);
        let budget = Arc::new(RetryBudget::new(config.retry.budget_tokens));
        let (controller, feeds_controller) = match transport.controller() {
            Some(c) => (c, false),
            None => {
                (Controller::new(ControllerOptions { max: OWN_CONTROLLER_MAX, ..ControllerOptions::default() }), true)
            }
        };
        S3Client { inner: Arc::new(Inner { transport, config, signing_creds, budget, controller, feeds_controller }) }
    }

    /// The endpoint's adaptive concurrency controller (`ferry_wire::controller`): the
    /// engine's fan-outs wait for room under its limit. With `auto` it is the transport's
    /// own, which also sizes its connections; with a forced transport it is this client's
    /// (shared by its clones), fed with every response this client receives.
    pub fn controller(&self) -> Arc<Controller> {
        self.inner.controller.clone()
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The transport's name and counters.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.inner.transport
    }

    /// `(Host header, path)` for a bucket and optional key.
    pub(crate) fn host_and_path(&self, bucket: &str, key: Option<&str>) -> (String, String) {
        let c = &self.inner.config;
        let authority = c.endpoint.authority();
        let key_path = key.map(|k| uri_encode(k, false));
        if c.addressing == Addressing::VirtualHosted && dns_compatible(bucket) {
            let path = match key_path {
                Some(k) => format!("/{k}"),
                None => "/".to_owned(),
            };
            (format!("{bucket}.{authority}"), path)
        } else {
            let path = match key_path {
                Some(k) => format!("/{bucket}/{k}"),
                None => format!("/{bucket}"),
            };
            (authority, path)
        }
    }

    pub(crate) fn raw_query(pairs: &[(String, String)]) -> String {
        let mut q = String::new();
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                q.push('&');
            }
            q.push_str(&uri_encode(k, true));
            if !v.is_empty() {
                q.push('=');
                q.push_str(&uri_encode(v, true));
            }
        }
        q
    }

    /// Builds and signs one attempt's request. `None` when the body was already sent.
    async fn build(&self, op: &mut Op) -> Result<Option<Request>, Error> {
        let (host, path) = self.host_and_path(&op.bucket, op.key.as_deref());
        let raw_query = Self::raw_query(&op.query);
        let body = match &mut op.body {
            OpBody::Empty => RequestBody::Empty,
            OpBody::Bytes(b) => RequestBody::from(b.clone()),
            OpBody::File { path, offset, len } => file_body(path.clone(), *offset, *len).await?,
            OpBody::Once(b) => match b.take() {
                Some(b) => b,
                None => return Ok(None),
            },
        };
        let mut headers = op.headers.clone();
        headers.insert(
            http::header::HOST,
            HeaderValue::from_str(&host).map_err(|_| Error::Config(format!("invalid host {host:?}")))?,
        );
        if let Some(creds) = &self.inner.signing_creds {
            if let Some(token) = self.inner.config.credentials.as_ref().and_then(|c| c.session_token.as_deref()) {
                headers.insert(
                    "x-amz-security-token",
                    HeaderValue::from_str(token).map_err(|_| Error::Config("invalid session token".into()))?,
                );
            }
            let payload = op.content_sha256.unwrap_or(if body.is_empty() {
                sigv4::EMPTY_SHA256_HEX
            } else {
                sigv4::UNSIGNED_PAYLOAD
            });
            sigv4::sign_headers(
                op.method.as_str(),
                &path,
                &raw_query,
                &mut headers,
                payload,
                creds,
                &self.inner.config.region,
                SystemTime::now(),
            );
        } else if let Some(p) = op.content_sha256 {
            headers.insert("x-amz-content-sha256", HeaderValue::from_static(p));
        }
        let path_and_query = if raw_query.is_empty() { path } else { format!("{path}?{raw_query}") };
        Ok(Some(Request {
            method: op.method.clone(),
            path_and_query,
            headers,
            body,
            size_hint: op.size_hint,
            hedge: true,
        }))
    }

    /// Runs `op` with retries; `handle` turns a successful (2xx) response into the result
    /// and may itself fail (a 200 carrying `<Error>`), which is retried by the same policy.
    pub(crate) async fn execute<T, F, Fut>(&self, op: &mut Op, mut handle: F) -> Result<T, Error>
    where
        F: FnMut(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let retry = &self.inner.config.retry;
        let is_head = op.method == Method::HEAD;
        let mut attempt: u32 = 0;
        let mut last: Option<Error> = None;
        loop {
            attempt += 1;
            let Some(req) = self.build(op).await? else {
                // A body that can be sent only once was sent: the last error stands.
                return Err(last.unwrap_or_else(|| Error::Config("request body already consumed".into())));
            };
            let observed = self.inner.feeds_controller.then(|| self.inner.controller.observe());
            let sent = self.inner.transport.send(req).await;
            if let (Some(permit), Ok(resp)) = (observed, &sent) {
                match resp.status.as_u16() {
                    503 | 429 => permit.throttled(),
                    _ if resp.status.is_success() => permit.success_with_latency(resp.meta.time_to_head),
                    _ => drop(permit),
                }
            }
            let result = match sent {
                Ok(resp) if resp.status.is_success() => handle(resp).await,
                Ok(resp) => Err(error::from_response(resp, is_head).await),
                Err(e) => Err(Error::Transport(e)),
            };
            let e = match result {
                Ok(v) => {
                    self.inner.budget.refill(retry.success_refill);
                    return Ok(v);
                }
                Err(e) => e,
            };
            let Some(class) = e.retry_class(op.idempotent) else { return Err(e) };
            let cost =
                if class == crate::error::RetryClass::Timeout { retry.timeout_retry_cost } else { retry.retry_cost };
            if attempt >= retry.max_attempts || !op.body.replayable() {
                return Err(e);
            }
            if !self.inner.budget.withdraw(cost) {
                tracing::debug!(op = op.name, error = %e, "retry budget exhausted; not retrying");
                return Err(e);
            }
            let sleep = retry.backoff(attempt - 1, class);
            tracing::debug!(op = op.name, attempt, ?sleep, error = %e, "retrying");
            last = Some(e);
            tokio::time::sleep(sleep).await;
        }
    }

    /// Withdraws a retry from the budget for work outside `execute` (GET resumes).
    pub(crate) fn take_retry(&self, class: crate::error::RetryClass) -> bool {
        let r = &self.inner.config.retry;
        let cost = if class == crate::error::RetryClass::Timeout { r.timeout_retry_cost } else { r.retry_cost };
        self.inner.budget.withdraw(cost)
    }

    /// A presigned GET URL valid for `expires` (at most 7 days, S3's limit). Anonymous
    /// clients get the plain URL.
    pub fn presign_get(&self, object: &ObjectRef, expires: Duration) -> Result<String, Error> {
        if expires > sigv4::PRESIGNED_MAX_EXPIRES || expires.is_zero() {
            return Err(Error::Config(format!("presigned URLs expire after 1 s to 7 days, not {expires:?}")));
        }
        let c = &self.inner.config;
        let (host, path) = self.host_and_path(&object.bucket, Some(&object.key));
        let scheme = match c.endpoint.scheme {
            ferry_wire::Scheme::Http => "http",
            ferry_wire::Scheme::Https => "https",
        };
        let Some(creds) = &self.inner.signing_creds else {
            return Ok(format!("{scheme}://{host}{path}"));
        };
        let extra = match c.credentials.as_ref().and_then(|c| c.session_token.as_deref()) {
            Some(t) => format!("X-Amz-Security-Token={}", uri_encode(t, true)),
            None => String::new(),
        };
        let query = sigv4::presign("GET", &path, &host, &extra, creds, &c.region, SystemTime::now(), expires);
        Ok(format!("{scheme}://{host}{path}?{query}"))
    }
}

/// Size of the reads that stream a file body: large enough that syscalls are a small
/// cost next to the copy, small enough to stay in L2 (a common choice; not yet measured
/// here).
pub(crate) const FILE_CHUNK: usize = 256 * 1024;

/// `len` bytes of a file from `offset`, as a streamed request body.
pub(crate) async fn file_body(path: PathBuf, offset: u64, len: u64) -> Result<RequestBody, Error> {
    Ok(RequestBody::Stream { len, stream: file_stream(path, offset, len).await? })
}

pub(crate) async fn file_stream(
    path: PathBuf,
    offset: u64,
    len: u64,
) -> Result<BoxStream<'static, std::io::Result<Bytes>>, Error> {
    use futures_util::StreamExt;
    use std::os::unix::fs::FileExt;
    let p = path.clone();
    let file = tokio::task::spawn_blocking(move || std::fs::File::open(p))
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
        .map_err(|e| Error::Io { path: path.display().to_string(), error: e })?;
    // Each chunk is read with one pread on the blocking pool straight into the buffer
    // it is sent from (tokio::fs::File would read into its own buffer and copy).
    let stream = futures_util::stream::try_unfold((Arc::new(file), offset, len), |(file, at, remaining)| async move {
        if remaining == 0 {
            return Ok(None);
        }
        let want = (remaining as usize).min(FILE_CHUNK);
        let f = file.clone();
        let buf = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; want];
            f.read_exact_at(&mut buf, at).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "file shrank while being sent")
                } else {
                    e
                }
            })?;
            Ok::<_, std::io::Error>(buf)
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok(Some((Bytes::from(buf), (file, at + want as u64, remaining - want as u64))))
    });
    Ok(stream.boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(endpoint: &str) -> S3Client {
        let config = ClientConfig::new(endpoint).unwrap();
        S3Client::with_transport(Arc::new(crate::s3::scripted::ScriptedTransport::new()), config)
    }

    #[test]
    fn addressing_defaults_by_host() {
        let ep = |u| Endpoint::parse(u).unwrap();
        assert_eq!(Addressing::default_for(&ep("https://s3.us-east-1.amazonaws.com")), Addressing::VirtualHosted);
        assert_eq!(Addressing::default_for(&ep("https://s3.amazonaws.com")), Addressing::VirtualHosted);
        assert_eq!(Addressing::default_for(&ep("http://127.0.0.1:9000")), Addressing::PathStyle);
        assert_eq!(Addressing::default_for(&ep("http://localhost:9000")), Addressing::PathStyle);
        assert_eq!(Addressing::default_for(&ep("https://storage.example.com")), Addressing::PathStyle);
        assert_eq!(Addressing::default_for(&ep("http://[::1]:9000")), Addressing::PathStyle);
    }

    #[test]
    fn host_and_path_per_addressing() {
        let c = client("https://s3.us-east-1.amazonaws.com");
        assert_eq!(
            c.host_and_path("my-bucket", Some("a b/c+d")),
            ("my-bucket.s3.us-east-1.amazonaws.com".into(), "/a%20b/c%2Bd".into())
        );
        assert_eq!(c.host_and_path("my-bucket", None), ("my-bucket.s3.us-east-1.amazonaws.com".into(), "/".into()));
        // Dotted bucket names cannot be virtual-hosted under TLS wildcards: path-style.
        assert_eq!(
            c.host_and_path("my.bucket", Some("k")),
            ("s3.us-east-1.amazonaws.com".into(), "/my.bucket/k".into())
        );
        let c = client("http://127.0.0.1:9000");
        assert_eq!(c.host_and_path("b", Some("dir/ü")), ("127.0.0.1:9000".into(), "/b/dir/%C3%BC".into()));
        assert_eq!(c.host_and_path("b", None), ("127.0.0.1:9000".into(), "/b".into()));
    }

    #[test]
    fn query_encoding() {
        let q = S3Client::raw_query(&[
            ("list-type".into(), "2".into()),
            ("prefix".into(), "a b/".into()),
            ("uploads".into(), String::new()),
        ]);
        assert_eq!(q, "list-type=2&prefix=a%20b%2F&uploads");
    }
}
