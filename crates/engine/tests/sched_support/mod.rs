//! Shared by the scheduler's integration tests (`sched_*.rs`): a real `ferry serve`
//! in-process ([`ferry_server::BackgroundServer`]), a client over a real transport, and
//! a counting wrapper around that transport. The wrapper is not a mock: every request
//! still goes over a socket to the server; it only counts requests by S3 operation and
//! tracks how many response bodies are alive at once (for the open-ahead bounds).

#![allow(dead_code)]

use ferry_server::{BackgroundServer, ServeConfig};
use ferry_store::{ClientConfig, Credentials, Mode, RetryConfig, S3Client};
use ferry_wire::{Request, Response, ResponseBody, Transport, TransportConfig, TransportStats, WireError};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn server(configure: impl FnOnce(&mut ServeConfig)) -> BackgroundServer {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap());
    configure(&mut config);
    BackgroundServer::start(config).unwrap()
}

/// Short backoffs so fault tests run quickly.
pub fn fast_retry(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        base_delay: Duration::from_millis(2),
        throttled_base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        ..RetryConfig::default()
    }
}

/// Counts what goes through a transport.
#[derive(Default)]
pub struct Counts {
    /// Requests by operation name (`GET object`, `LIST`, `DELETE batch`, ...).
    by_op: Mutex<BTreeMap<String, u64>>,
    /// GET object bodies alive now, and the most at once.
    pub bodies_alive: AtomicU64,
    pub bodies_peak: AtomicU64,
    /// PUT object requests (whole objects and multipart parts) answered with a success.
    pub puts_answered: AtomicU64,
}

impl Counts {
    pub fn get(&self, op: &str) -> u64 {
        self.by_op.lock().unwrap().get(op).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.by_op.lock().unwrap().values().sum()
    }

    pub fn reset_peak(&self) {
        self.bodies_peak.store(self.bodies_alive.load(SeqCst), SeqCst);
    }
}

fn op_name(req: &Request) -> String {
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

pub struct Counting {
    inner: Arc<dyn Transport>,
    pub counts: Arc<Counts>,
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
}

/// A signed client of `server` over `mode`, with its request counts.
pub fn client(server: &BackgroundServer, mode: Mode, retry: RetryConfig) -> (S3Client, Arc<Counts>) {
    let mut config =
        ClientConfig::new(&server.url()).unwrap().with_credentials(Credentials::new("ferry", "ferry-secret"));
    config.retry = retry;
    let mut tc = TransportConfig::new(config.endpoint.clone());
    tc.mode = mode;
    let counts = Arc::new(Counts::default());
    let transport = Arc::new(Counting { inner: ferry_wire::transport(tc).unwrap(), counts: counts.clone() });
    (S3Client::with_transport(transport, config), counts)
}

/// Deterministic pseudo-random bytes.
pub fn data(n: usize, seed: u64) -> bytes::Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<u8> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    bytes::Bytes::from(v)
}

/// Per-key failures in DeleteObjects answers, which `ferry serve` cannot inject (its
/// faults fail whole requests). This wrapper lets the real request through, then
/// reports the first `remaining` keys the server deleted as `InternalError` instead.
/// This is the only synthetic part of those tests, and it says so.
pub struct PerKeyDeleteFaults {
    pub inner: Arc<dyn Transport>,
    pub remaining: Arc<AtomicU64>,
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
}

/// A client whose DeleteObjects answers report the first `faults` deleted keys as
/// InternalError (see [`PerKeyDeleteFaults`]), with request counts.
pub fn client_with_per_key_faults(server: &BackgroundServer, faults: u64) -> (S3Client, Arc<Counts>) {
    client_wrapped(server, |counting| {
        Arc::new(PerKeyDeleteFaults { inner: counting, remaining: Arc::new(AtomicU64::new(faults)) })
    })
}

/// A signed client of `server` (default transport) whose counting transport is wrapped
/// by `wrap`, with its request counts.
pub fn client_wrapped(
    server: &BackgroundServer,
    wrap: impl FnOnce(Arc<dyn Transport>) -> Arc<dyn Transport>,
) -> (S3Client, Arc<Counts>) {
    let config = ClientConfig::new(&server.url()).unwrap().with_credentials(Credentials::new("ferry", "ferry-secret"));
    let tc = TransportConfig::new(config.endpoint.clone());
    let counts = Arc::new(Counts::default());
    let counting: Arc<dyn Transport> =
        Arc::new(Counting { inner: ferry_wire::transport(tc).unwrap(), counts: counts.clone() });
    (S3Client::with_transport(wrap(counting), config), counts)
}
