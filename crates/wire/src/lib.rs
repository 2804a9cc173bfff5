//! ferry's HTTP transports, behind one seam: [`Transport::send`] takes a [`Request`] and
//! returns a [`Response`] whose body is a stream with backpressure.
//!
//! ```text
//!   auto/         combines the transports: protocol by ALPN, size-aware lanes, hedging
//!     │ uses
//!     ├─ pool.rs      HTTP/1.1 keep-alive pool with a maximum size (hyper)
//!     ├─ pipeline.rs  HTTP/1.1 pipelining, N connections x D in flight (ours)
//!     └─ h2.rs        HTTP/2 over several connections, large adaptive windows (h2)
//!          │ use (never each other, never auto)
//!          ├─ gate.rs        a place under a connection cap shared by lanes
//!          ├─ lane.rs        which requests are small
//!          ├─ exchange.rs    framing headers, the response-head and body-stall time-outs
//!          ├─ body.rs        request and response bodies, body bookkeeping
//!          ├─ conn.rs        DNS resolved once, addresses spread, TCP, rustls, receive windows,
//!          │                 an unreachable endpoint refused without waiting
//!          └─ controller.rs  adaptive concurrency per endpoint (fed by auto)
//! ```
//!
//! Dependencies flow down only: a transport never imports auto or another transport;
//! what two of them share lives in a module below both.
//!
//! Every transport can carry every request, so the store and engine layers, and every
//! test, run unchanged over each. What differs is how requests share connections: that
//! is the whole point of ferry (docs/lab/wire-facts.md).

pub mod auto;
pub mod body;
pub mod conn;
pub mod controller;
mod drive;
pub mod error;
mod exchange;
mod gate;
pub mod h2;
pub mod lane;
pub mod pipeline;
pub mod pool;
mod request;

pub use body::{RequestBody, ResponseBody};
pub use error::{ErrorKind, RetrySafety, WireError};
pub use request::Request;

use futures_util::future::BoxFuture;
use http::{HeaderMap, StatusCode};
use std::path::PathBuf;
use std::time::Duration;

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// Where requests go: scheme, host and port, from a URL like `https://s3.amazonaws.com`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// Parses `http://host[:port]` or `https://host[:port]` (a trailing path is ignored).
    pub fn parse(url: &str) -> Result<Endpoint, WireError> {
        let bad = || {
            WireError::config(format!(
                "'{url}' is not an endpoint URL like http://127.0.0.1:9000 or https://s3.amazonaws.com"
            ))
        };
        let (scheme, rest) = if let Some(r) = url.strip_prefix("http://") {
            (Scheme::Http, r)
        } else if let Some(r) = url.strip_prefix("https://") {
            (Scheme::Https, r)
        } else {
            return Err(bad());
        };
        let authority = rest.split('/').next().unwrap_or("");
        if authority.is_empty() || authority.contains('@') {
            return Err(bad());
        }
        let default_port = if scheme == Scheme::Http { 80 } else { 443 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad())?,
                None if after.is_empty() => default_port,
                None => return Err(bad()),
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad())?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Endpoint { scheme, host, port })
    }

    /// `host[:port]` as it goes in the Host header (the port only when not the default).
    pub fn authority(&self) -> String {
        let default_port = if self.scheme == Scheme::Http { 80 } else { 443 };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == default_port {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Which protocol answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// How a response came back, for statistics and tests.
#[derive(Clone, Debug)]
pub struct ResponseMeta {
    pub protocol: Protocol,
    /// Identifies the connection within its transport (1, 2, ... in opening order).
    pub connection_id: u64,
    /// Whether the connection had carried a request before this one.
    pub reused_connection: bool,
    /// From the call to `send` to the response head.
    pub time_to_head: Duration,
    /// From the request's first byte on the wire to the response head, when nothing
    /// delayed it inside the client: no other response ahead of it on its connection.
    /// `None` when it queued behind another response (a pipelined request behind an
    /// unfinished one), because that wait measures the client, not the endpoint. This is
    /// the latency the adaptive controller ([`controller`]) judges congestion by:
    /// `time_to_head` would also count waiting for a free connection, so a controller
    /// fed with it would read the client's own queue as the endpoint slowing down.
    pub head_latency: Option<Duration>,
}

/// One HTTP response; the body streams.
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: ResponseBody,
    pub meta: ResponseMeta,
}

/// Counters of a transport, cumulative since it was made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub connections_opened: u64,
    pub connections_open: u64,
    pub requests_sent: u64,
    /// Requests written again on a fresh connection after theirs closed unanswered.
    pub requests_resent: u64,
    /// Copies of slow small requests sent by `auto` (auto/hedge.rs), also
    /// counted in `requests_sent`, and those whose response head came first.
    pub hedges_sent: u64,
    pub hedges_won: u64,
}

/// The transport seam. Implementations: `pool`, `pipeline`, `h2`, `auto`.
///
/// # Contract
/// - `send` resolves when the response head has arrived; the body then streams from the
///   connection, with backpressure: a body that is not read holds its connection (h1) or
///   its stream window (h2), never an unbounded buffer.
/// - A response body that ends before its Content-Length is an error of kind
///   [`ErrorKind::BodyTruncated`], never a short success.
/// - Errors say whether a retry is safe ([`WireError::retry_safe`]); a transport never
///   sends a non-idempotent request twice on its own.
/// - Dropping a response body before its end is allowed; the connection is never reused
///   with unread bytes on it: h1-pool closes it, h1-pipeline discards the rest of a small
///   body (up to 1 MiB) to keep the requests behind it and otherwise closes and re-sends
///   them, h2 resets the stream.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>>;
    fn stats(&self) -> TransportStats;
    /// A short name for reports: "h1-pool", "h1-pipeline", "h2", "auto".
    fn name(&self) -> &'static str;
    /// The endpoint's adaptive concurrency controller, when the transport keeps one and
    /// feeds it every response (`auto` does; controller.rs). Callers above the transport
    /// take their concurrency from it.
    fn controller(&self) -> Option<std::sync::Arc<controller::Controller>> {
        None
    }
    /// How many small requests ([`lane::is_small`]) the transport carries at once for
    /// each place under its controller's limit: its pipeline depth while small requests
    /// go down a pipeline (h1-pipeline; auto until it has given up on pipelining), as many
    /// h2 streams, 1 when each request holds a connection of its own (the default).
    /// Callers that admit small requests (the engine's `Admission::small_room`) keep up
    /// to limit x this in flight; the transport queues what its connections cannot take
    /// yet itself. A wrapper around a transport forwards it.
    fn small_depth(&self) -> usize {
        1
    }
}

/// Which transport to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// ALPN and the endpoint's behaviour decide (the default).
    Auto,
    H1Pool,
    H1Pipeline,
    H2,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "auto" => Some(Mode::Auto),
            "h1-pool" | "pool" => Some(Mode::H1Pool),
            "h1-pipeline" | "pipeline" => Some(Mode::H1Pipeline),
            "h2" => Some(Mode::H2),
            _ => None,
        }
    }
}

/// Settings common to all transports. The defaults need no tuning; they are caps.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    pub endpoint: Endpoint,
    pub mode: Mode,
    /// Most connections open at once to the endpoint.
    pub max_connections: usize,
    /// Most requests in flight on one pipelined HTTP/1.1 connection (gg's client used 32).
    pub pipeline_depth: usize,
    /// Extra CA certificates (PEM) trusted besides the system roots.
    pub ca_file: Option<PathBuf>,
    /// A connection (TCP and TLS) not up within this long fails with a connect error
    /// (always retry-safe). An endpoint whose attempts all failed for this long is
    /// refused without trying, but for one probe per this long (conn.rs).
    pub connect_timeout: Duration,
    /// The no-progress time-out (the AWS CLI's read time-out): a response head not
    /// received this long after the last request byte was taken, or no response body
    /// byte for this long while the body is being read, fails with a time-out
    /// (retry-safe for idempotent requests; exchange.rs). So a dead link ends every
    /// request on it within this long, however large.
    pub response_timeout: Duration,
    /// An idle pooled connection is closed after this long.
    pub idle_timeout: Duration,
}

impl TransportConfig {
    pub fn new(endpoint: Endpoint) -> TransportConfig {
        TransportConfig {
            endpoint,
            mode: Mode::Auto,
            // AWS SDKs default to 50 (docs/lab/wire-facts.md); the lab's pool baseline uses it.
            max_connections: 50,
            pipeline_depth: 32,
            ca_file: None,
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// The transport `config.mode` names, ready to send.
pub fn transport(config: TransportConfig) -> Result<std::sync::Arc<dyn Transport>, WireError> {
    Ok(match config.mode {
        Mode::Auto => std::sync::Arc::new(auto::AutoTransport::new(config)?),
        Mode::H1Pool => std::sync::Arc::new(pool::PoolTransport::new(config)?),
        Mode::H1Pipeline => std::sync::Arc::new(pipeline::PipelineTransport::new(config)?),
        Mode::H2 => std::sync::Arc::new(h2::H2Transport::new(config)?),
    })
}
