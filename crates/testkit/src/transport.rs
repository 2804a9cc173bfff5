//! Wrappers around a real [`Transport`]. None is a mock: every request still goes over
//! a socket to a real server.
//!
//! - [`Counting`] counts requests by S3 operation ([`op_name`]) and tracks how many GET
//!   object bodies are alive at once (for bounds on open-ahead and prefetch).
//! - [`PerKeyDeleteFaults`] lets a DeleteObjects request through, then reports the first
//!   `remaining` keys the server deleted as `InternalError`: per-key failures, which
//!   `ferry serve`'s faults cannot inject (they fail whole requests). It is the only
//!   synthetic part of the tests that use it.
//! - [`Intercept`] records every request and replaces chosen answers with an S3 error
//!   after the server served them (a refused part, an upload gone under a resume).

use ferry_wire::{Request, Response, ResponseBody, Transport, TransportStats, WireError};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// The operation a request is, as [`Counts`] names it: `LIST`, `DELETE batch`, or
/// `METHOD object` / `METHOD bucket` (`GET object`, `PUT object`, `HEAD bucket`, ...).
pub fn op_name(req: &Request) -> String {
    let (path, query) = req.path_and_query.split_once('?').unwrap_or((&req.path_and_query, ""));
    let object = path.trim_start_matches('/').contains('/');
    let m = req.method.as_str();
    if m == "GET" && query.contains("list-type=2") {
        "LIST".into()
    } else if m == "POST" && query.contains("delete") {
        "DELETE batch".into()
    } else {
        format!("{m} {}", if object { "object" } else { "bucket" })
    }
}

/// What went through a [`Counting`] transport.
#[derive(Default)]
pub struct Counts {
    /// Requests by operation name.
    by_op: Mutex<BTreeMap<String, u64>>,
    /// GET object bodies alive now, and the most at once.
    pub bodies_alive: AtomicU64,
    pub bodies_peak: AtomicU64,
    /// PUT object requests (whole objects and multipart parts) answered with a success.
    pub puts_answered: AtomicU64,
}

impl Counts {
    /// Requests of operation `op` (see [`op_name`]).
    pub fn get(&self, op: &str) -> u64 {
        self.by_op.lock().unwrap().get(op).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.by_op.lock().unwrap().values().sum()
    }

    /// Starts a new peak from the bodies alive now.
    pub fn reset_peak(&self) {
        self.bodies_peak.store(self.bodies_alive.load(SeqCst), SeqCst);
    }
}

/// Counts what goes through `inner` into `counts`.
pub struct Counting {
    pub inner: Arc<dyn Transport>,
    pub counts: Arc<Counts>,
}

impl Counting {
    /// `inner` wrapped, with the counts it fills.
    pub fn wrap(inner: Arc<dyn Transport>) -> (Arc<dyn Transport>, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        (Arc::new(Counting { inner, counts: counts.clone() }), counts)
    }
}

struct BodyGuard(Arc<Counts>);

impl Drop for BodyGuard {
    fn drop(&mut self) {
        self.0.bodies_alive.fetch_sub(1, SeqCst);
    }
}

impl Transport for Counting {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let op = op_name(&req);
        *self.counts.by_op.lock().unwrap().entry(op.clone()).or_insert(0) += 1;
        let counts = self.counts.clone();
        let fut = self.inner.send(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if op == "PUT object" && resp.status.is_success() {
                counts.puts_answered.fetch_add(1, SeqCst);
            }
            if op == "GET object" {
                let alive = counts.bodies_alive.fetch_add(1, SeqCst) + 1;
                counts.bodies_peak.fetch_max(alive, SeqCst);
                let guard = BodyGuard(counts.clone());
                let len = resp.body.content_length();
                let body = std::mem::replace(&mut resp.body, ResponseBody::empty());
                let wrapped = body.map(move |c| {
                    let _ = &guard;
                    c
                });
                resp.body = ResponseBody::new(wrapped.boxed(), len);
            }
            Ok(resp)
        })
    }

    fn stats(&self) -> TransportStats {
        self.inner.stats()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn small_depth(&self) -> usize {
        self.inner.small_depth()
    }
}

/// Reports the first `remaining` keys of DeleteObjects answers as `InternalError`
/// (see the module doc).
pub struct PerKeyDeleteFaults {
    pub inner: Arc<dyn Transport>,
    pub remaining: Arc<AtomicU64>,
}

impl PerKeyDeleteFaults {
    /// `inner` wrapped, failing the first `faults` deleted keys.
    pub fn wrap(inner: Arc<dyn Transport>, faults: u64) -> Arc<dyn Transport> {
        Arc::new(PerKeyDeleteFaults { inner, remaining: Arc::new(AtomicU64::new(faults)) })
    }
}

impl Transport for PerKeyDeleteFaults {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let is_delete = op_name(&req) == "DELETE batch";
        let remaining = self.remaining.clone();
        let fut = self.inner.send(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if !is_delete || resp.status != 200 || remaining.load(SeqCst) == 0 {
                return Ok(resp);
            }
            let body = std::mem::replace(&mut resp.body, ResponseBody::empty()).collect(1 << 24).await?;
            let mut result = ferry_proto::client_xml::parse_delete_result(&body).expect("a DeleteResult");
            let mut kept = Vec::new();
            for key in result.deleted.drain(..) {
                let take = remaining.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok();
                if take {
                    result.errors.push(ferry_proto::xml::DeleteError {
                        key,
                        code: "InternalError".into(),
                        message: "injected per-key fault".into(),
                    });
                } else {
                    kept.push(key);
                }
            }
            result.deleted = kept;
            let xml = bytes::Bytes::from(result.to_xml());
            resp.headers.insert(http::header::CONTENT_LENGTH, xml.len().into());
            resp.body = ResponseBody::from_bytes(xml);
            Ok(resp)
        })
    }

    fn stats(&self) -> TransportStats {
        self.inner.stats()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn small_depth(&self) -> usize {
        self.inner.small_depth()
    }
}

/// An S3 error answer an [`Intercept`] puts in place of the server's.
#[derive(Clone, Copy, Debug)]
pub struct ErrorAnswer {
    pub status: http::StatusCode,
    pub code: &'static str,
    pub message: &'static str,
}

/// Chooses, per request, whether its answer is replaced (`Some`) or the server's
/// (`None`); it sees requests in the order they are sent.
type Decide = Box<dyn Fn(&Request) -> Option<ErrorAnswer> + Send + Sync>;

/// Records the method and path of every request and, where its rule says so, replaces
/// the server's answer with an S3 error once the real request was served (so the server
/// acted; only the client is told otherwise). For faults `ferry serve` cannot inject
/// per request, such as one refused part; the replaced answer is the only synthetic part
/// of a test that uses it.
pub struct Intercept {
    inner: Arc<dyn Transport>,
    decide: Decide,
    seen: Mutex<Vec<(String, String)>>,
}

impl Intercept {
    /// A layer for a client builder (`client_wrapped(&srv, layer)`), and the handle the
    /// test reads the requests from once the client has wrapped its transport.
    #[allow(clippy::type_complexity)]
    pub fn layer(
        decide: impl Fn(&Request) -> Option<ErrorAnswer> + Send + Sync + 'static,
    ) -> (impl FnOnce(Arc<dyn Transport>) -> Arc<dyn Transport>, Arc<std::sync::OnceLock<Arc<Intercept>>>) {
        let handle = Arc::new(std::sync::OnceLock::new());
        let h = handle.clone();
        let layer = move |inner: Arc<dyn Transport>| -> Arc<dyn Transport> {
            let t = Arc::new(Intercept { inner, decide: Box::new(decide), seen: Mutex::new(Vec::new()) });
            let _ = h.set(t.clone());
            t
        };
        (layer, handle)
    }

    /// `(method, path and query)` of every request so far, in sending order.
    pub fn seen(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

impl Transport for Intercept {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        self.seen.lock().unwrap().push((req.method.to_string(), req.path_and_query.clone()));
        let replace = (self.decide)(&req);
        let fut = self.inner.send(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if let Some(a) = replace {
                let body = format!("<Error><Code>{}</Code><Message>{}</Message></Error>", a.code, a.message);
                resp.status = a.status;
                resp.headers.insert(http::header::CONTENT_LENGTH, body.len().into());
                resp.body = ResponseBody::from_bytes(bytes::Bytes::from(body));
            }
            Ok(resp)
        })
    }

    fn stats(&self) -> TransportStats {
        self.inner.stats()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn small_depth(&self) -> usize {
        self.inner.small_depth()
    }
}
