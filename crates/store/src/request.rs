//! The one request layer under every provider: an operation as data ([`Op`]), and the
//! send/retry loop ([`Core::execute`]) that S3, GCS and Azure all run their calls through.
//!
//! ```text
//! provider operation (s3/object.rs, gcs/list.rs, azure/blocks.rs, ...)
//!   └─ Op { name, method, target, query, headers, body, idempotent, response_len }
//!        └─ Core::execute(signer, op, handle) ── per attempt:
//!              body built (bytes, file re-opened, send-once stream taken)
//!              ─► signer.sign: where it goes (path + query, Host) and its authorisation
//!              ─► Transport::send ─► 2xx (or an accepted 308) ─► handle(resp)
//!              │                 └─ else ─► signer.error: Error by meaning (+ a wait asked)
//!              └─ on Err: retry.rs (class, attempts, budget, full jitter; a wait the
//!                 provider asked for is the least it sleeps)
//! ```
//!
//! What a provider adds is a [`Signer`]: S3 places the bucket (path-style or virtual
//! host) and signs with SigV4; GCS sends a bearer token on a JSON API path; Azure adds
//! its version and date headers and Shared Key, SAS or a bearer token. Everything else
//! (bodies replayed per attempt, controller feeding, the retry budget shared by a
//! client's clones, GET resumes drawing on that budget) is written here once, so the
//! three providers back off alike.

use crate::error::{Error, RetryClass};
use crate::retry::{RetryBudget, RetryConfig};
use bytes::Bytes;
use ferry_proto::range::RangeSpec;
use ferry_wire::controller::{Controller, ControllerOptions};
use ferry_wire::{Request, RequestBody, Response, Transport};
use futures_util::stream::{BoxStream, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where an operation goes, before the provider places it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A bucket (container) and an optional key (blob); an empty bucket is the service
    /// itself (S3's ListBuckets, Azure's List Containers). The signer turns them into
    /// a path and a Host.
    Object { bucket: String, key: Option<String> },
    /// A path already encoded by the provider, starting with `/` (GCS's JSON API).
    Path(String),
}

/// A request body as an operation holds it: every kind but `Once` is built again for
/// each attempt, so it can be retried.
pub(crate) enum OpBody {
    Empty,
    Bytes(Bytes),
    /// `len` bytes of a file from `offset`, re-opened for every attempt.
    File {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
    /// `head`, then `len` bytes of a file from `offset`, then `tail` (GCS's
    /// multipart/related upload of a file part), the file re-opened for every attempt.
    Framed {
        head: Bytes,
        path: PathBuf,
        offset: u64,
        len: u64,
        tail: Bytes,
    },
    /// Pieces in memory sent one after another (framing around a caller's buffer, which
    /// is not copied).
    Chunks(Vec<Bytes>),
    /// Sent once; taken by the first attempt.
    Once(Option<RequestBody>),
}

impl OpBody {
    pub(crate) fn replayable(&self) -> bool {
        !matches!(self, OpBody::Once(_))
    }

    /// This attempt's body; `None` when a send-once body was already sent.
    async fn build(&mut self) -> Result<Option<RequestBody>, Error> {
        Ok(Some(match self {
            OpBody::Empty => RequestBody::Empty,
            OpBody::Bytes(b) => RequestBody::from(b.clone()),
            OpBody::File { path, offset, len } => file_body(path.clone(), *offset, *len).await?,
            OpBody::Chunks(pieces) => {
                let len = pieces.iter().map(|p| p.len() as u64).sum();
                let pieces: Vec<std::io::Result<Bytes>> = pieces.iter().cloned().map(Ok).collect();
                RequestBody::Stream { len, stream: futures_util::stream::iter(pieces).boxed() }
            }
            OpBody::Framed { head, path, offset, len, tail } => {
                let file = file_stream(path.clone(), *offset, *len).await?;
                let total = head.len() as u64 + *len + tail.len() as u64;
                let (h, t) = (head.clone(), tail.clone());
                let stream = futures_util::stream::once(async move { Ok(h) })
                    .chain(file)
                    .chain(futures_util::stream::once(async move { Ok(t) }));
                RequestBody::Stream { len: total, stream: stream.boxed() }
            }
            OpBody::Once(b) => match b.take() {
                Some(b) => b,
                None => return Ok(None),
            },
        }))
    }
}

/// One operation of any provider, before it is placed and authorised.
pub(crate) struct Op {
    /// The provider's name for the call, for logs.
    pub(crate) name: &'static str,
    pub(crate) method: Method,
    pub(crate) target: Target,
    /// Decoded query pairs, in sending order; the signer encodes them.
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: OpBody,
    /// Safe to repeat as the provider's operation (retry.rs module note): GET, HEAD,
    /// PUT and DELETE by default; a POST that is idempotent by its meaning says so.
    pub(crate) idempotent: bool,
    /// Bytes the response body will carry, when known (wire's `Request::response_len`):
    /// set with the range by [`Op::range`], or the object's size for a whole GET.
    pub(crate) response_len: Option<u64>,
    /// A "send more" answer (308) is a success (GCS's resumable upload chunks).
    pub(crate) accept_308: bool,
    /// The response body is object data (wire's `Request::object_data`): false for a
    /// listing ([`Op::listing`]), whose bytes are not the goodput `auto` grows by.
    pub(crate) object_data: bool,
}

impl Op {
    fn new(name: &'static str, method: Method, target: Target) -> Op {
        let idempotent = matches!(method, Method::GET | Method::HEAD | Method::PUT | Method::DELETE);
        Op {
            name,
            method,
            target,
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: OpBody::Empty,
            idempotent,
            response_len: None,
            accept_308: false,
            object_data: true,
        }
    }

    /// A listing: its answer is metadata, not object data (wire's `Request::object_data`),
    /// so `auto`'s controller does not take a page's burst of bytes for transfer goodput.
    pub(crate) fn listing(mut self) -> Op {
        self.object_data = false;
        self
    }

    /// An operation on a bucket (`key: None`), an object in it, or the service (`bucket`
    /// empty).
    pub(crate) fn object(name: &'static str, method: Method, bucket: &str, key: Option<&str>) -> Op {
        Op::new(name, method, Target::Object { bucket: bucket.to_owned(), key: key.map(str::to_owned) })
    }

    /// An operation on a path the provider encoded itself.
    pub(crate) fn path(name: &'static str, method: Method, path: String) -> Op {
        Op::new(name, method, Target::Path(path))
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

    /// Sets a header; values that are not valid header text are a configuration error.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Result<Op, Error> {
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Error::Config(format!("invalid header name {name:?}")))?;
        let v = HeaderValue::from_str(value)
            .map_err(|_| Error::Config(format!("invalid value for header {name}: {value:?}")))?;
        self.headers.insert(n, v);
        Ok(self)
    }

    /// A `Range` header for `range` (none for `None`) and the response's length with it,
    /// typed; `size` is the whole object's, when known (a listing's or a HEAD's).
    pub(crate) fn range(mut self, range: Option<RangeSpec>, size: Option<u64>) -> Result<Op, Error> {
        self.response_len = match range {
            Some(r) => r.len(size),
            None => size,
        };
        self.header_opt("range", range.map(|r| r.to_header()).as_deref())
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

    /// A JSON request body.
    pub(crate) fn json(self, value: &serde_json::Value) -> Result<Op, Error> {
        let op = self.header("content-type", "application/json")?;
        Ok(op.body(OpBody::Bytes(Bytes::from(value.to_string()))))
    }
}

/// What a signer sees of one attempt (the body itself only by its length: a send-once
/// stream is not shared across threads).
pub(crate) struct Attempt<'a> {
    pub(crate) method: &'a Method,
    pub(crate) target: &'a Target,
    pub(crate) query: &'a [(String, String)],
    pub(crate) body_len: u64,
}

/// What a provider adds to the shared loop: placing and authorising a request, and
/// reading what an error answer means.
pub(crate) trait Signer: Send + Sync {
    /// Completes one attempt's headers (Host, authorisation, the provider's own) and
    /// returns the path and query to send.
    fn sign(&self, req: Attempt<'_>, headers: &mut HeaderMap) -> impl Future<Output = Result<String, Error>> + Send;

    /// The error a non-success answer stands for, and the least time it asks to be
    /// waited before a retry (a throttling answer's `Retry-After`).
    fn error(&self, resp: Response, head_request: bool) -> impl Future<Output = (Error, Option<Duration>)> + Send;

    /// Called when the first attempt failed with `error`: true when the provider renewed
    /// something (an access token) and the request is to be sent again at once,
    /// outside the retry policy.
    fn renewed_after(&self, _error: &Error) -> bool {
        false
    }
}

/// Hard cap of a client's own controller (a transport that keeps none): the controller's
/// default, above the AWS SDKs' 50-connection pool (docs/lab/store-s3-facts.md); each
/// fan-out of the engine also has a cap of its own.
const OWN_CONTROLLER_MAX: usize = 64;

/// The sending half every provider's client holds: transport, retry policy and budget,
/// and the endpoint's concurrency controller. Shared by a client's clones.
pub(crate) struct Core {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) retry: RetryConfig,
    budget: RetryBudget,
    /// The transport's controller, or the client's own when the transport keeps none
    /// (then `execute` reports every response to it).
    pub(crate) controller: Arc<Controller>,
    feeds_controller: bool,
}

impl Core {
    pub(crate) fn new(transport: Arc<dyn Transport>, retry: RetryConfig) -> Core {
        let budget = RetryBudget::new(retry.budget_tokens);
        let (controller, feeds_controller) = match transport.controller() {
            Some(c) => (c, false),
            None => {
                (Controller::new(ControllerOptions { max: OWN_CONTROLLER_MAX, ..ControllerOptions::default() }), true)
            }
        };
        Core { transport, retry, budget, controller, feeds_controller }
    }

    fn cost(&self, class: RetryClass) -> u32 {
        if class == RetryClass::Timeout {
            self.retry.timeout_retry_cost
        } else {
            self.retry.retry_cost
        }
    }

    /// Withdraws a retry from the budget for work outside `execute` (GET resumes).
    pub(crate) fn take_retry(&self, class: RetryClass) -> bool {
        self.budget.withdraw(self.cost(class))
    }

    /// Runs `op` with retries; `handle` turns a successful response into the result and
    /// may itself fail (a 200 carrying an error), which is retried by the same policy.
    pub(crate) async fn execute<S, T, F, Fut>(&self, signer: &S, op: &mut Op, mut handle: F) -> Result<T, Error>
    where
        S: Signer + ?Sized,
        F: FnMut(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let retry = &self.retry;
        let is_head = op.method == Method::HEAD;
        let mut attempt: u32 = 0;
        let mut last: Option<Error> = None;
        loop {
            attempt += 1;
            let Some(body) = op.body.build().await? else {
                // A body that can be sent only once was sent: the last error stands.
                return Err(last.unwrap_or_else(|| Error::Config("request body already consumed".into())));
            };
            let mut headers = op.headers.clone();
            let attempt_view =
                Attempt { method: &op.method, target: &op.target, query: &op.query, body_len: body.len() };
            let path_and_query = signer.sign(attempt_view, &mut headers).await?;
            let req = Request {
                method: op.method.clone(),
                path_and_query,
                headers,
                body,
                response_len: op.response_len,
                hedge: true,
                object_data: op.object_data,
            };
            let observed = self.feeds_controller.then(|| self.controller.observe());
            let sent = self.transport.send(req).await;
            if let (Some(permit), Ok(resp)) = (observed, &sent) {
                match resp.status.as_u16() {
                    503 | 429 => permit.throttled(),
                    _ if resp.status.is_success() => permit.success_with_latency(resp.meta.time_to_head),
                    _ => drop(permit),
                }
            }
            let mut wait = None;
            let result = match sent {
                Ok(resp) if resp.status.is_success() || (op.accept_308 && resp.status.as_u16() == 308) => {
                    handle(resp).await
                }
                Ok(resp) => {
                    let (e, w) = signer.error(resp, is_head).await;
                    wait = w;
                    Err(e)
                }
                Err(e) => Err(Error::Transport(e)),
            };
            let e = match result {
                Ok(v) => {
                    self.budget.refill(retry.success_refill);
                    return Ok(v);
                }
                Err(e) => e,
            };
            if attempt == 1 && op.body.replayable() && signer.renewed_after(&e) {
                continue;
            }
            let Some(class) = e.retry_class(op.idempotent) else { return Err(e) };
            if attempt >= retry.max_attempts || !op.body.replayable() {
                return Err(e);
            }
            if !self.budget.withdraw(self.cost(class)) {
                tracing::info!(op = op.name, error = %e, "retry budget exhausted; not retrying");
                return Err(e);
            }
            let mut sleep = retry.backoff(attempt - 1, class);
            if let Some(w) = wait {
                sleep = sleep.max(w.min(retry.max_delay));
            }
            tracing::info!(op = op.name, attempt, ?sleep, error = %e, "retrying");
            last = Some(e);
            tokio::time::sleep(sleep).await;
        }
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

/// `len` bytes of a file from `offset`, as a stream of chunks.
pub(crate) async fn file_stream(
    path: PathBuf,
    offset: u64,
    len: u64,
) -> Result<BoxStream<'static, std::io::Result<Bytes>>, Error> {
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
