//! The client core: configuration, addressing and signing, S3's part of the request
//! layer every provider shares (request.rs).
//!
//! ```text
//! operation (object.rs, list.rs, multipart.rs)
//!   └─ Op::object(name, method, bucket, key) + query, headers, body
//!        └─ execute ─► request.rs Core::execute, per attempt: Signer::sign (this file:
//!              │        Host by addressing, SigV4) ─► Transport::send
//!              │        ├─ 2xx ─► handler(resp) (may find a 200 <Error>)
//!              │        └─ else ─► Signer::error = error::from_response
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
use crate::request::{Attempt, Core, Op, Signer, Target};
use crate::retry::RetryConfig;
use crate::s3::credentials::{self, Credentials, CredentialsSource, Found};
use crate::s3::error;
use crate::types::ObjectRef;
use ferry_proto::encoding::uri_encode;
use ferry_proto::sigv4;
use ferry_wire::controller::Controller;
use ferry_wire::{Endpoint, Mode, Response, Transport, TransportConfig};
use http::{HeaderMap, HeaderValue};
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
    /// Wraps the transport once it is opened (`StoreOptions::transport_layer`).
    pub transport_layer: Option<crate::store::TransportLayer>,
    /// Time-outs, and attempts over `retry`'s (`StoreOptions::limits`).
    pub limits: crate::store::RequestLimits,
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
            transport_layer: None,
            limits: Default::default(),
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

    /// Resolves credentials (running a `credential_process` or asking STS when the chain
    /// ends there) and region, and opens the transport (no connection yet).
    pub fn build(self) -> Result<S3Client, Error> {
        let endpoint = Endpoint::parse(&self.endpoint).map_err(|e| Error::Config(e.to_string()))?;
        let on_aws = credentials::is_aws_endpoint(&self.endpoint);
        let (credentials, expires, refresher) =
            match credentials::find_with(&self.credentials, &credentials::ProcessEnv, true, on_aws)? {
                Found::Anonymous => (None, None, None),
                Found::Keys(c) => (Some(c), None, None),
                Found::Provider(provider) => {
                    let lease = provider.fetch_blocking(self.ca_file.as_deref())?;
                    let refresher = Refresher {
                        provider,
                        ca_file: self.ca_file.clone(),
                        lock: tokio::sync::Mutex::new(()),
                        force: std::sync::atomic::AtomicBool::new(false),
                    };
                    (Some(lease.credentials), lease.expires, Some(refresher))
                }
            };
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
        self.limits.apply(&mut tc);
        let transport = crate::store::layered(&self.transport_layer, crate::Provider::S3, ferry_wire::transport(tc)?);
        let config = ClientConfig {
            addressing: self.addressing.unwrap_or_else(|| Addressing::default_for(&endpoint)),
            endpoint,
            region,
            credentials,
            retry: self.limits.retry(self.retry),
        };
        let mut client = S3Client::with_source(transport, config, Some(self.credentials));
        let inner = Arc::get_mut(&mut client.inner).expect("a client just made is not shared");
        *inner.keys.get_mut().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(Keys::new(inner.config.credentials.clone(), expires));
        inner.refresher = refresher;
        Ok(client)
    }
}

/// An S3 client. Cheap to clone: clones share the transport and the retry budget.
#[derive(Clone)]
pub struct S3Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// Transport, retries, controller: the layer every provider shares (request.rs).
    pub(crate) core: Core,
    pub(crate) config: ClientConfig,
    /// The keys requests are signed with now: `config.credentials` until a renewal
    /// ([`S3Client::renew_expired`]) replaces them.
    pub(crate) keys: std::sync::RwLock<Arc<Keys>>,
    /// Where the keys came from, when it can hand out new ones (the environment, the
    /// shared files): read again once after an ExpiredToken answer.
    pub(crate) source: Option<CredentialsSource>,
    /// When the keys were last renewed: requests that fail ExpiredToken just after are
    /// sent again with the new keys instead of reading the source once more each.
    pub(crate) renewed_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// When the keys are temporary ones from a provider (credential_process, web
    /// identity): asked again before they expire, or after an ExpiredToken answer.
    pub(crate) refresher: Option<Refresher>,
}

/// A provider of temporary keys and what asking it again takes.
pub(crate) struct Refresher {
    provider: credentials::Provider,
    ca_file: Option<PathBuf>,
    /// One fetch at a time; the requests that wait take its keys.
    lock: tokio::sync::Mutex<()>,
    /// Set after an ExpiredToken answer: the next request fetches whatever the expiry.
    force: std::sync::atomic::AtomicBool,
}

impl Refresher {
    fn due(&self, keys: &Keys) -> bool {
        self.force.load(std::sync::atomic::Ordering::Relaxed)
            || crate::s3::credentials_fetch::due(keys.expires, SystemTime::now())
    }
}

/// A client's keys, and the same in the form SigV4 signs with.
pub(crate) struct Keys {
    pub(crate) credentials: Option<Credentials>,
    pub(crate) signing: Option<sigv4::Credentials>,
    /// When temporary keys expire.
    pub(crate) expires: Option<SystemTime>,
}

impl Keys {
    fn new(credentials: Option<Credentials>, expires: Option<SystemTime>) -> Keys {
        let signing = credentials.as_ref().map(Credentials::to_proto);
        Keys { credentials, signing, expires }
    }
}

/// How long after a renewal an ExpiredToken answer is taken as a request signed with the
/// old keys (sent again at once) rather than a reason to read the source again: the
/// requests in flight when the token expired all fail within about one round trip of
/// each other; a few seconds covers a slow link.
const RENEWED_RECENTLY: std::time::Duration = std::time::Duration::from_secs(5);

impl std::fmt::Debug for S3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Client")
            .field("transport", &self.inner.core.transport.name())
            .field("config", &self.inner.config)
            .finish()
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
        S3Client::with_source(transport, config, None)
    }

    fn with_source(transport: Arc<dyn Transport>, config: ClientConfig, source: Option<CredentialsSource>) -> S3Client {
        let keys = std::sync::RwLock::new(Arc::new(Keys::new(config.credentials.clone(), None)));
        let core = Core::new(transport, config.retry.clone());
        let source = source.filter(|s| {
            matches!(s, CredentialsSource::Default | CredentialsSource::Environment | CredentialsSource::Profile(_))
        });
        S3Client {
            inner: Arc::new(Inner { core, config, keys, source, renewed_at: Default::default(), refresher: None }),
        }
    }

    fn keys(&self) -> Arc<Keys> {
        self.inner.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The keys to sign with now. Temporary keys that are due (within
    /// [`crate::s3::credentials_fetch::REFRESH_BEFORE`] of their expiry, or after an
    /// ExpiredToken answer) are fetched again first, one fetch at a time; requests that
    /// waited on that fetch take its keys. When a fetch fails while the keys in hand are
    /// still valid, they are used and the next request tries again.
    async fn current_keys(&self) -> Result<Arc<Keys>, Error> {
        let seen = self.keys();
        let Some(r) = &self.inner.refresher else { return Ok(seen) };
        if !r.due(&seen) {
            return Ok(seen);
        }
        let _one = r.lock.lock().await;
        let now = self.keys();
        let fetched_meanwhile = !Arc::ptr_eq(&now, &seen) && !r.force.load(std::sync::atomic::Ordering::Relaxed);
        if fetched_meanwhile && now.expires.is_none_or(|t| SystemTime::now() < t) {
            return Ok(now);
        }
        match r.provider.fetch(r.ca_file.as_deref()).await {
            Ok(lease) => Ok(self.install(r, lease)),
            Err(e)
                if !r.force.load(std::sync::atomic::Ordering::Relaxed)
                    && now.expires.is_some_and(|t| SystemTime::now() < t) =>
            {
                tracing::warn!(
                    "credentials: asking the {} again failed ({e}); the current keys are still valid",
                    r.provider.describe()
                );
                Ok(now)
            }
            Err(e) => Err(e),
        }
    }

    /// [`S3Client::current_keys`] for synchronous callers (presigning).
    fn current_keys_blocking(&self) -> Result<Arc<Keys>, Error> {
        let seen = self.keys();
        match &self.inner.refresher {
            Some(r) if r.due(&seen) => Ok(self.install(r, r.provider.fetch_blocking(r.ca_file.as_deref())?)),
            _ => Ok(seen),
        }
    }

    fn install(&self, r: &Refresher, lease: credentials::Lease) -> Arc<Keys> {
        let keys = Arc::new(Keys::new(Some(lease.credentials), lease.expires));
        *self.inner.keys.write().unwrap_or_else(|p| p.into_inner()) = keys.clone();
        r.force.store(false, std::sync::atomic::Ordering::Relaxed);
        keys
    }

    /// After an ExpiredToken answer: true when the request may go again with keys newer
    /// than the ones it was signed with. Keys renewed moments ago count; else the source
    /// is read again, and only keys that differ from the current ones count (the same
    /// expired token read again would only fail again).
    fn renew_expired(&self) -> bool {
        let mut renewed_at = self.inner.renewed_at.lock().unwrap_or_else(|p| p.into_inner());
        if renewed_at.is_some_and(|t| t.elapsed() < RENEWED_RECENTLY) {
            return self.inner.refresher.is_some() || self.inner.source.is_some();
        }
        // A provider is asked again by the request's next signing (async there).
        if let Some(r) = &self.inner.refresher {
            tracing::info!("credentials: ExpiredToken; asking the {} again", r.provider.describe());
            r.force.store(true, std::sync::atomic::Ordering::Relaxed);
            *renewed_at = Some(std::time::Instant::now());
            return true;
        }
        let Some(source) = &self.inner.source else { return false };
        let fresh = match source.resolve() {
            Ok(Some(c)) => c,
            _ => return false,
        };
        if self.keys().credentials.as_ref() == Some(&fresh) {
            return false;
        }
        tracing::info!(access_key_id = %fresh.access_key_id, "credentials read again after ExpiredToken");
        *self.inner.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Keys::new(Some(fresh), None));
        *renewed_at = Some(std::time::Instant::now());
        true
    }

    /// The endpoint's adaptive concurrency controller (`ferry_wire::controller`): the
    /// engine's fan-outs wait for room under its limit. With `auto` it is the transport's
    /// own, which also sizes its connections; with a forced transport it is this client's
    /// (shared by its clones), fed with every response this client receives.
    pub fn controller(&self) -> Arc<Controller> {
        self.inner.core.controller.clone()
    }

    /// The request layer this client sends through (its retry budget too).
    pub(crate) fn core(&self) -> &Core {
        &self.inner.core
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The transport's name and counters.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.inner.core.transport
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

    /// Runs `op` with retries (request.rs); `handle` turns a successful (2xx) response
    /// into the result and may itself fail (a 200 carrying `<Error>`), which is retried
    /// by the same policy.
    pub(crate) async fn execute<T, F, Fut>(&self, op: &mut Op, handle: F) -> Result<T, Error>
    where
        F: FnMut(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.inner.core.execute(self, op, handle).await
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
        let keys = self.current_keys_blocking()?;
        let Some(creds) = &keys.signing else {
            return Ok(format!("{scheme}://{host}{path}"));
        };
        let extra = match keys.credentials.as_ref().and_then(|c| c.session_token.as_deref()) {
            Some(t) => format!("X-Amz-Security-Token={}", uri_encode(t, true)),
            None => String::new(),
        };
        let query = sigv4::presign("GET", &path, &host, &extra, creds, &c.region, SystemTime::now(), expires);
        Ok(format!("{scheme}://{host}{path}?{query}"))
    }
}

/// S3's part of the shared request layer: the bucket placed by [`Addressing`], SigV4.
impl Signer for S3Client {
    async fn sign(&self, op: Attempt<'_>, headers: &mut HeaderMap) -> Result<String, Error> {
        let (host, path) = match op.target {
            Target::Object { bucket, key } => self.host_and_path(bucket, key.as_deref()),
            Target::Path(p) => (self.inner.config.endpoint.authority(), p.clone()),
        };
        let raw_query = Self::raw_query(op.query);
        headers.insert(
            http::header::HOST,
            HeaderValue::from_str(&host).map_err(|_| Error::Config(format!("invalid host {host:?}")))?,
        );
        let keys = self.current_keys().await?;
        if let Some(creds) = &keys.signing {
            if let Some(token) = keys.credentials.as_ref().and_then(|c| c.session_token.as_deref()) {
                headers.insert(
                    "x-amz-security-token",
                    HeaderValue::from_str(token).map_err(|_| Error::Config("invalid session token".into()))?,
                );
            }
            // An operation that sets x-amz-content-sha256 itself (aws-chunked bodies) signs
            // that value; others send the payload unsigned (module note).
            let payload = match headers.get("x-amz-content-sha256").and_then(|v| v.to_str().ok()) {
                Some(p) => p.to_owned(),
                None if op.body_len == 0 => sigv4::EMPTY_SHA256_HEX.to_owned(),
                None => sigv4::UNSIGNED_PAYLOAD.to_owned(),
            };
            sigv4::sign_headers(
                op.method.as_str(),
                &path,
                &raw_query,
                headers,
                &payload,
                creds,
                &self.inner.config.region,
                SystemTime::now(),
            );
        }
        Ok(if raw_query.is_empty() { path } else { format!("{path}?{raw_query}") })
    }

    async fn error(&self, resp: Response, head_request: bool) -> (Error, Option<std::time::Duration>) {
        (error::from_response(resp, head_request).await, None)
    }

    /// Temporary credentials that expired mid-run (400 ExpiredToken): the source is read
    /// again, once for the request; without a source that can renew them (explicit keys)
    /// or with the same keys read again, the error stands.
    fn renewed_after(&self, error: &Error) -> bool {
        matches!(error, Error::Auth { code, .. } if code == "ExpiredToken") && self.renew_expired()
    }
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
