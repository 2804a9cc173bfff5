//! The Azure client core: Azure's part of the request layer every provider shares
//! (request.rs): where an operation goes and how it is authorised.
//!
//! ```text
//! operation (object.rs, list.rs, blocks.rs, batch.rs)
//!   └─ Op::object(name, method, container, blob) + query, headers, body
//!        └─ execute ─► request.rs Core::execute, per attempt: Signer::sign (this file:
//!              │        x-ms-version, x-ms-date, Shared Key | SAS query | Bearer) ─► send
//!              │        ├─ 2xx ─► handler(resp)
//!              │        └─ else ─► Signer::error = error::from_response (+ Retry-After)
//!              └─ on Err: retry.rs policy; a throttled answer waits at least its Retry-After
//! ```
//!
//! Paths are `{base}/{container}/{blob}`, the blob name %-encoded except '/', as the
//! SDKs send it; the same encoded path is what Shared Key signs (auth.rs).

use crate::azure::auth;
use crate::azure::config::{AzureConfig, AzureCredential};
use crate::azure::error;
use crate::azure::API_VERSION;
use crate::error::Error;
use crate::request::{Attempt, Core, Op, Signer, Target};
use crate::retry::RetryConfig;
use ferry_proto::encoding::uri_encode;
use ferry_wire::{Mode, Response, Transport, TransportConfig};
use http::{HeaderMap, HeaderValue, Method};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// An Azure Blob Storage client. Cheap to clone: clones share the transport, the token
/// cache and the retry budget.
#[derive(Clone)]
pub struct AzureClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// Transport, retries, controller: the layer every provider shares (request.rs).
    pub(crate) core: Core,
    pub(crate) config: AzureConfig,
    /// Content type and metadata of the block uploads this client started, by upload
    /// id, for Put Block List (blocks.rs): Azure takes them at commit, not at start.
    pub(crate) upload_params: std::sync::Mutex<std::collections::HashMap<String, crate::types::PutParams>>,
}

impl std::fmt::Debug for AzureClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureClient")
            .field("transport", &self.inner.core.transport.name())
            .field("config", &self.inner.config)
            .finish()
    }
}

/// Builds an [`AzureClient`] with its own transport.
#[derive(Clone, Debug)]
pub struct AzureClientBuilder {
    pub config: AzureConfig,
    pub mode: Mode,
    pub ca_file: Option<PathBuf>,
    pub max_connections: Option<usize>,
    pub retry: RetryConfig,
    /// Wraps the transport once it is opened (`StoreOptions::transport_layer`).
    pub transport_layer: Option<crate::store::TransportLayer>,
    /// Time-outs, and attempts over `retry`'s (`StoreOptions::limits`).
    pub limits: crate::store::RequestLimits,
}

impl AzureClientBuilder {
    pub fn new(config: AzureConfig) -> AzureClientBuilder {
        AzureClientBuilder {
            config,
            mode: Mode::Auto,
            ca_file: None,
            max_connections: None,
            retry: RetryConfig::default(),
            transport_layer: None,
            limits: Default::default(),
        }
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Opens the transport (no connection yet). Azure Blob Storage speaks HTTP/1.1
    /// only, so `h2` is refused here rather than failing at the first request.
    pub fn build(self) -> Result<AzureClient, Error> {
        if self.mode == Mode::H2 {
            return Err(Error::Config(
                "Azure Blob Storage speaks HTTP/1.1 only: use auto, h1-pool or h1-pipeline".into(),
            ));
        }
        let mut tc = TransportConfig::new(self.config.endpoint.clone());
        tc.mode = self.mode;
        tc.ca_file = self.ca_file;
        if let Some(n) = self.max_connections {
            tc.max_connections = n;
        }
        self.limits.apply(&mut tc);
        let transport =
            crate::store::layered(&self.transport_layer, crate::Provider::Azure, ferry_wire::transport(tc)?);
        Ok(AzureClient::with_transport(transport, self.config, self.limits.retry(self.retry)))
    }
}

impl AzureClient {
    /// A client over a given transport (tests, and the lab forcing a transport).
    pub fn with_transport(transport: Arc<dyn Transport>, config: AzureConfig, retry: RetryConfig) -> AzureClient {
        AzureClient {
            inner: Arc::new(Inner { core: Core::new(transport, retry), config, upload_params: Default::default() }),
        }
    }

    /// The request layer this client sends through (its retry budget too).
    pub(crate) fn core(&self) -> &Core {
        &self.inner.core
    }

    pub fn config(&self) -> &AzureConfig {
        &self.inner.config
    }

    /// The request path of a container or blob (still to be prefixed by nothing: it
    /// starts with '/').
    pub(crate) fn path(&self, container: Option<&str>, blob: Option<&str>) -> String {
        let mut p = self.inner.config.base_path.clone();
        if let Some(c) = container {
            p.push('/');
            p.push_str(c);
            if let Some(b) = blob {
                p.push('/');
                p.push_str(&uri_encode(b, false));
            }
        }
        if p.is_empty() {
            p.push('/');
        }
        p
    }

    /// `http[s]://host[:port]` of the endpoint.
    pub(crate) fn origin(&self) -> String {
        let e = &self.inner.config.endpoint;
        let scheme = match e.scheme {
            ferry_wire::Scheme::Http => "http",
            ferry_wire::Scheme::Https => "https",
        };
        format!("{scheme}://{}", e.authority())
    }

    pub(crate) fn raw_query(pairs: &[(String, String)]) -> String {
        pairs
            .iter()
            .map(|(k, v)| {
                if v.is_empty() {
                    uri_encode(k, true)
                } else {
                    format!("{}={}", uri_encode(k, true), uri_encode(v, true))
                }
            })
            .collect::<Vec<_>>()
            .join("&")
    }

    /// Adds the date, the version (unless `sub_request`: a batch's sub-requests carry
    /// none, batch.rs) and the authorisation to `headers` for a request to `path` with
    /// `query`; returns the query string to send (with a SAS appended).
    pub(crate) async fn authorise(
        &self,
        method: &Method,
        path: &str,
        query: &[(String, String)],
        headers: &mut HeaderMap,
        content_length: u64,
        sub_request: bool,
    ) -> Result<String, Error> {
        if !sub_request {
            headers.insert("x-ms-version", HeaderValue::from_static(API_VERSION));
        }
        let date = ferry_proto::encoding::http_date(SystemTime::now());
        headers.insert("x-ms-date", HeaderValue::from_str(&date).expect("an HTTP date is header text"));
        let mut raw_query = Self::raw_query(query);
        let c = &self.inner.config;
        match &c.credential {
            AzureCredential::SharedKey(key) => {
                let sts = auth::string_to_sign(method.as_str(), &c.account, path, query, headers, content_length);
                let value = auth::shared_key_authorization(&c.account, key, &sts);
                headers
                    .insert(http::header::AUTHORIZATION, HeaderValue::from_str(&value).expect("base64 is header text"));
            }
            AzureCredential::Sas(sas) => {
                if !raw_query.is_empty() {
                    raw_query.push('&');
                }
                raw_query.push_str(sas);
            }
            AzureCredential::Token(source) => {
                let token = source.token().await?;
                headers.insert(
                    http::header::AUTHORIZATION,
                    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                        Error::protocol("the token endpoint returned a token that is not header text", None)
                    })?,
                );
            }
            AzureCredential::Anonymous => {}
        }
        Ok(raw_query)
    }

    /// Runs `op` with retries (request.rs); `handle` turns a 2xx response into the result.
    pub(crate) async fn execute<T, F, Fut>(&self, op: &mut Op, handle: F) -> Result<T, Error>
    where
        F: FnMut(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.inner.core.execute(self, op, handle).await
    }
}

/// Azure's part of the shared request layer: the container/blob path, version and date
/// headers, Shared Key, SAS or a bearer token.
impl Signer for AzureClient {
    async fn sign(&self, op: Attempt<'_>, headers: &mut HeaderMap) -> Result<String, Error> {
        let path = match op.target {
            Target::Object { bucket, key } => {
                self.path((!bucket.is_empty()).then_some(bucket.as_str()), key.as_deref())
            }
            Target::Path(p) => p.clone(),
        };
        headers.insert(
            http::header::HOST,
            HeaderValue::from_str(&self.inner.config.endpoint.authority())
                .map_err(|_| Error::Config("invalid endpoint host".into()))?,
        );
        let len = op.body_len;
        if len > 0 || matches!(*op.method, Method::PUT | Method::POST) {
            headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
        }
        let raw_query = self.authorise(op.method, &path, op.query, headers, len, false).await?;
        Ok(if raw_query.is_empty() { path } else { format!("{path}?{raw_query}") })
    }

    /// Azure states how long to wait with `Retry-After` (error.rs).
    async fn error(&self, resp: Response, head_request: bool) -> (Error, Option<Duration>) {
        error::from_response(resp, head_request).await
    }
}

/// Waits `d` (a helper so polling loops read plainly).
pub(crate) async fn pause(d: Duration) {
    tokio::time::sleep(d).await
}
