//! The Azure client core: one operation's request built, authorised, sent through a
//! ferry-wire transport, and retried.
//!
//! ```text
//! operation (object.rs, list.rs, blocks.rs, batch.rs, containers.rs)
//!   └─ Op { method, container, blob, query, headers, body, idempotent }
//!        └─ execute(op, handler) ── per attempt: build (x-ms-version, x-ms-date,
//!              │                     Shared Key | SAS query | Bearer) ─► Transport::send
//!              │                     ├─ 2xx ─► handler(resp)
//!              │                     └─ else ─► error::from_response (+ Retry-After)
//!              └─ on Err: retry.rs policy; a throttled answer waits at least its Retry-After
//! ```
//!
//! Paths are `{base}/{container}/{blob}`, the blob name %-encoded except '/', as the
//! SDKs send it; the same encoded path is what Shared Key signs (auth.rs). The retry
//! policy, budget and controller feeding are the S3 client's (retry.rs), so both
//! providers back off alike.

use crate::azure::auth;
use crate::azure::config::{AzureConfig, AzureCredential};
use crate::azure::error;
use crate::azure::API_VERSION;
use crate::error::Error;
use crate::retry::{RetryBudget, RetryConfig};
use crate::s3::client::OpBody;
use ferry_proto::encoding::uri_encode;
use ferry_wire::controller::{Controller, ControllerOptions};
use ferry_wire::{Mode, Request, RequestBody, Response, Transport, TransportConfig};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Hard cap of a client's own controller (a transport that keeps none), as the S3
/// client's.
const OWN_CONTROLLER_MAX: usize = 64;

/// An Azure Blob Storage client. Cheap to clone: clones share the transport, the token
/// cache and the retry budget.
#[derive(Clone)]
pub struct AzureClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) config: AzureConfig,
    pub(crate) retry: RetryConfig,
    pub(crate) budget: Arc<RetryBudget>,
    pub(crate) controller: Arc<Controller>,
    pub(crate) feeds_controller: bool,
    /// Content type and metadata of the block uploads this client started, by upload
    /// id, for Put Block List (blocks.rs): Azure takes them at commit, not at start.
    pub(crate) upload_params: std::sync::Mutex<std::collections::HashMap<String, crate::types::PutParams>>,
}

impl std::fmt::Debug for AzureClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureClient")
            .field("transport", &self.inner.transport.name())
            .field("config", &self.inner.config)
            .finish()
    }
}

/// One operation, before authorisation.
pub(crate) struct Op {
    pub(crate) name: &'static str,
    pub(crate) method: Method,
    pub(crate) container: Option<String>,
    pub(crate) blob: Option<String>,
    /// Decoded parameters, in sending order.
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: OpBody,
    pub(crate) idempotent: bool,
    pub(crate) size_hint: Option<u64>,
}

impl Op {
    pub(crate) fn new(name: &'static str, method: Method, container: Option<&str>, blob: Option<&str>) -> Op {
        let idempotent = matches!(method, Method::GET | Method::HEAD | Method::PUT | Method::DELETE);
        Op {
            name,
            method,
            container: container.map(str::to_owned),
            blob: blob.map(str::to_owned),
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: OpBody::Empty,
            idempotent,
            size_hint: None,
        }
    }

    pub(crate) fn query(mut self, k: &str, v: impl Into<String>) -> Op {
        self.query.push((k.to_owned(), v.into()));
        self
    }

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

/// Builds an [`AzureClient`] with its own transport.
#[derive(Clone, Debug)]
pub struct AzureClientBuilder {
    pub config: AzureConfig,
    pub mode: Mode,
    pub ca_file: Option<PathBuf>,
    pub max_connections: Option<usize>,
    pub retry: RetryConfig,
}

impl AzureClientBuilder {
    pub fn new(config: AzureConfig) -> AzureClientBuilder {
        AzureClientBuilder {
            config,
            mode: Mode::Auto,
            ca_file: None,
            max_connections: None,
            retry: RetryConfig::default(),
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
        let transport = ferry_wire::transport(tc)?;
        Ok(AzureClient::with_transport(transport, self.config, self.retry))
    }
}

impl AzureClient {
    /// A client over a given transport (tests, and the lab forcing a transport).
    pub fn with_transport(transport: Arc<dyn Transport>, config: AzureConfig, retry: RetryConfig) -> AzureClient {
        let budget = Arc::new(RetryBudget::new(retry.budget_tokens));
        let (controller, feeds_controller) = match transport.controller() {
            Some(c) => (c, false),
            None => {
                (Controller::new(ControllerOptions { max: OWN_CONTROLLER_MAX, ..ControllerOptions::default() }), true)
            }
        };
        AzureClient {
            inner: Arc::new(Inner {
                transport,
                config,
                retry,
                budget,
                controller,
                feeds_controller,
                upload_params: Default::default(),
            }),
        }
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

    /// Builds one attempt's request. `None` when a send-once body was already sent.
    async fn build(&self, op: &mut Op) -> Result<Option<Request>, Error> {
        let path = self.path(op.container.as_deref(), op.blob.as_deref());
        let body = match &mut op.body {
            OpBody::Empty => RequestBody::Empty,
            OpBody::Bytes(b) => RequestBody::from(b.clone()),
            OpBody::File { path, offset, len } => crate::s3::client::file_body(path.clone(), *offset, *len).await?,
            OpBody::Once(b) => match b.take() {
                Some(b) => b,
                None => return Ok(None),
            },
        };
        let mut headers = op.headers.clone();
        headers.insert(
            http::header::HOST,
            HeaderValue::from_str(&self.inner.config.endpoint.authority())
                .map_err(|_| Error::Config("invalid endpoint host".into()))?,
        );
        let len = body.len();
        if len > 0 || matches!(op.method, Method::PUT | Method::POST) {
            headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
        }
        let raw_query = self.authorise(&op.method, &path, &op.query, &mut headers, len, false).await?;
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

    /// Runs `op` with retries; `handle` turns a 2xx response into the result.
    pub(crate) async fn execute<T, F, Fut>(&self, op: &mut Op, mut handle: F) -> Result<T, Error>
    where
        F: FnMut(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let retry = &self.inner.retry;
        let is_head = op.method == Method::HEAD;
        let mut attempt: u32 = 0;
        let mut last: Option<Error> = None;
        loop {
            attempt += 1;
            let Some(req) = self.build(op).await? else {
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
            let mut wait = None;
            let result = match sent {
                Ok(resp) if resp.status.is_success() => handle(resp).await,
                Ok(resp) => {
                    let (e, w) = error::from_response(resp, is_head).await;
                    wait = w;
                    Err(e)
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
            let Some(class) = e.retry_class(op.idempotent) else { return Err(e) };
            let cost =
                if class == crate::error::RetryClass::Timeout { retry.timeout_retry_cost } else { retry.retry_cost };
            if attempt >= retry.max_attempts || !op.body.replayable() || !self.inner.budget.withdraw(cost) {
                return Err(e);
            }
            let mut sleep = retry.backoff(attempt - 1, class);
            if let Some(w) = wait {
                sleep = sleep.max(w.min(retry.max_delay));
            }
            tracing::debug!(op = op.name, attempt, ?sleep, error = %e, "retrying");
            last = Some(e);
            tokio::time::sleep(sleep).await;
        }
    }

    /// Withdraws a retry from the budget for work outside `execute` (GET resumes).
    pub(crate) fn take_retry(&self, class: crate::error::RetryClass) -> bool {
        let r = &self.inner.retry;
        let cost = if class == crate::error::RetryClass::Timeout { r.timeout_retry_cost } else { r.retry_cost };
        self.inner.budget.withdraw(cost)
    }
}

/// Waits `d` (a helper so polling loops read plainly).
pub(crate) async fn pause(d: Duration) {
    tokio::time::sleep(d).await
}
