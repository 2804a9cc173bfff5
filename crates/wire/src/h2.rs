//! h2: HTTP/2 over several connections, with flow-control windows large enough that one
//! connection is not throttled by them.
//!
//! Why windows matter: an HTTP/2 receiver grants the sender at most one window of
//! unacknowledged bytes per stream and per connection, so a connection moves at most
//! `connection window / RTT`. With hyper's client defaults (2 MiB stream, 5 MiB
//! connection) one client topped out at 250 MB/s where fresh connections reached
//! 794 MB/s (arrow-rs issue 5194, LAB.md section 1); rclone and arrow-rs users turned
//! HTTP/2 off for this. The constants below are sized for LAB.md's `transatlantic` link.
//!
//! hyper's `adaptive_window(true)` (BDP estimation from PING round trips) cannot be
//! combined with large initial windows: enabling it resets both windows to the RFC's
//! 64 KiB, and setting a window turns it off (hyper 1.x `client::conn::http2::Builder`).
//! Its estimate is also capped at 16 MiB for the whole connection, which at 110 ms RTT
//! is ~150 MB/s. So ferry sets fixed large windows instead, and grows the number of
//! connections when a connection's throughput stops growing (below). The windows bound
//! memory too: a body nobody reads holds at most one stream window, and all bodies of a
//! connection together at most one connection window.
//!
//! Connections and streams:
//!
//! - A new stream goes to the open connection with the fewest streams in flight among
//!   those below their stream limit and not saturated (see below).
//! - The stream limit is the server's SETTINGS_MAX_CONCURRENT_STREAMS, read from the
//!   first SETTINGS frame the server sends ([`SettingsTap`]; hyper does not expose it);
//!   until it arrives, the limit another connection to the same endpoint learned, else
//!   (and when the server sets none) [`DEFAULT_STREAM_LIMIT`].
//! - Another connection is opened, up to `max_connections`, when every connection is at
//!   its limit, or when every connection is saturated. A connection is *saturated* when,
//!   over its last measurement window ([`METER_WINDOW`]), it carried more streams than in
//!   the window before but its bytes/s (both directions) grew by less than
//!   [`GROWTH_FACTOR`]: more streams did not bring more bytes, so the connection (its
//!   windows or its TCP path) is the bottleneck. Windows are sampled when a stream is
//!   placed; rates under [`MIN_METERED_RATE`] are never called saturated (small-object
//!   traffic waits on first bytes, not on bandwidth). After opening a connection for this
//!   reason, the next one waits two windows so the first can ramp up.
//! - When every connection is at its limit and the cap is reached, the stream goes to
//!   the least loaded connection and waits in hyper/h2 for a free stream.
//! - A connection that closes is dropped from the set. A request refused by the server
//!   (REFUSED_STREAM, RFC 9113 section 8.7) or that hyper returns unwritten is re-sent on
//!   another connection whatever its method; an idempotent request whose connection
//!   went away (GOAWAY, close) before any response is re-sent when its body can be
//!   replayed. Connections idle longer than `idle_timeout` are closed (checked when a
//!   stream is placed, so an unused transport keeps its last connections until then).
//!
//! Prior knowledge (h2c) on http://; ALPN "h2" on https:// (a server that does not
//! choose h2 fails the connection with a protocol error).

use crate::body::RequestBody;
use crate::conn::{Connector, Io};
use crate::error::{ErrorKind, RetrySafety, WireError};
use crate::pool::{await_head, build_request, into_response, set_content_length, timeout_error, BodyGuard, Progress, WireBody};
use crate::{Protocol, Request, Response, ResponseMeta, Scheme, Transport, TransportConfig, TransportStats};
use futures_util::future::{BoxFuture, FutureExt, Shared};
use http::header::HOST;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Stream window (SETTINGS_INITIAL_WINDOW_SIZE): 16 MiB lets one stream carry ~150 MB/s
/// at the 110 ms RTT of LAB.md's `transatlantic` preset, above the per-stream rates the
/// lab's profiles serve (S3 90 MB/s, GCS 180 MB/s is within 10%), and 8x hyper's 2 MiB
/// default, the window behind arrow-rs issue 5194's 250 MB/s ceiling.
pub const STREAM_WINDOW: u32 = 16 * 1024 * 1024;

/// Connection window: 64 MiB, ~600 MB/s per connection at 110 ms RTT (12x hyper's
/// 5 MiB default); the 10 Gbit/s x 110 ms link (137 MB in flight) is then filled by
/// ~two connections, which the saturation rule opens. Also the most a connection buffers
/// for bodies that are not being read.
pub const CONNECTION_WINDOW: u32 = 64 * 1024 * 1024;

/// Largest DATA frame we accept: 1 MiB instead of 16 KiB cuts frame headers and wake-ups
/// per byte 64-fold; at 10 Gbit/s one frame holds its connection for under 1 ms, small
/// against first-byte latencies of 30-90 ms (LAB.md section 1).
pub const MAX_FRAME_SIZE: u32 = 1024 * 1024;

/// Send buffer per stream for uploads, one frame's worth.
const MAX_SEND_BUF: usize = 1024 * 1024;

/// Streams per connection until the server's SETTINGS say otherwise, or when they set no
/// limit: 100 is the floor RFC 9113 section 6.5.2 recommends and what GCS allows
/// (LAB.md section 1).
pub const DEFAULT_STREAM_LIMIT: u32 = 100;

/// Throughput measurement window: a few round trips on the 110 ms link, so that TCP and
/// window growth show within it.
pub const METER_WINDOW: Duration = Duration::from_millis(500);

/// Growth that counts as "more streams brought more bytes": 10%, above the jitter of a
/// steady transfer over half-second windows.
pub const GROWTH_FACTOR: f64 = 1.10;

/// Below this a connection is never called saturated: 1 MB/s.
pub const MIN_METERED_RATE: f64 = 1_000_000.0;

/// Most attempts at one request (re-sends after refusal or a lost connection).
const MAX_ATTEMPTS: usize = 4;

type Sender = http2::SendRequest<WireBody>;

/// Why a connection could not be opened, shared by every request waiting on it.
#[derive(Clone)]
struct OpenError {
    kind: ErrorKind,
    retry: RetrySafety,
    message: String,
}

type Opening = Shared<BoxFuture<'static, Result<(Sender, u64), OpenError>>>;

/// HTTP/2 over up to `config.max_connections` connections.
pub struct H2Transport {
    inner: Arc<Inner>,
}

struct Inner {
    config: TransportConfig,
    connector: Connector,
    state: Mutex<State>,
    opened: AtomicU64,
    open: Arc<AtomicU64>,
    sent: AtomicU64,
    resent: AtomicU64,
    /// The stream limit the server last announced on any connection (0: none yet); a
    /// new connection assumes it until its own SETTINGS arrive.
    learned_limit: Arc<AtomicU32>,
}

struct State {
    conns: Vec<Arc<Conn>>,
    /// When a connection was last opened because the others were saturated.
    last_throughput_open: Option<Instant>,
}

struct Conn {
    ready: Opening,
    /// Streams placed on it and not finished.
    in_flight: AtomicUsize,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS once seen.
    stream_limit: Arc<AtomicU32>,
    closed: Arc<AtomicBool>,
    /// Body bytes carried, both directions.
    bytes: Arc<AtomicU64>,
    requests: AtomicU64,
    meter: Mutex<Meter>,
    last_used: Mutex<Instant>,
}

impl Conn {
    fn limit(&self) -> usize {
        self.stream_limit.load(Relaxed) as usize
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    fn saturated(&self) -> bool {
        self.meter.lock().unwrap().saturated
    }

    fn sample(&self, now: Instant) {
        self.meter.lock().unwrap().sample(now, self.bytes.load(Relaxed), self.in_flight.load(Relaxed));
    }
}

/// One connection's throughput over consecutive windows.
#[derive(Clone, Debug)]
pub struct Meter {
    start: Instant,
    start_bytes: u64,
    last: Option<Window>,
    saturated: bool,
}

/// One closed measurement window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Bytes per second over the window.
    pub rate: f64,
    /// Streams in flight when the window closed.
    pub streams: usize,
}

impl Meter {
    pub fn new(now: Instant) -> Meter {
        Meter { start: now, start_bytes: 0, last: None, saturated: false }
    }

    /// Closes the current window if it is at least [`METER_WINDOW`] long.
    pub fn sample(&mut self, now: Instant, bytes: u64, streams: usize) {
        let dt = now.saturating_duration_since(self.start);
        if dt < METER_WINDOW {
            return;
        }
        let cur = Window { rate: (bytes - self.start_bytes) as f64 / dt.as_secs_f64(), streams };
        if let Some(prev) = self.last {
            self.saturated = saturated(prev, cur);
        }
        self.last = Some(cur);
        self.start = now;
        self.start_bytes = bytes;
    }

    pub fn is_saturated(&self) -> bool {
        self.saturated
    }
}

/// The saturation rule: more streams than the window before, yet less than
/// [`GROWTH_FACTOR`] more bytes/s, at a rate worth measuring.
pub fn saturated(prev: Window, cur: Window) -> bool {
    cur.streams > prev.streams && prev.rate >= MIN_METERED_RATE && cur.rate < prev.rate * GROWTH_FACTOR
}

impl H2Transport {
    pub fn new(config: TransportConfig) -> Result<H2Transport, WireError> {
        let connector = Connector::new(&config, &[b"h2"])?;
        Ok(H2Transport::with_connector(config, connector))
    }

    /// A transport that opens its connections with `connector` (used by `auto`).
    pub fn with_connector(config: TransportConfig, connector: Connector) -> H2Transport {
        let max = config.max_connections.max(1);
        H2Transport {
            inner: Arc::new(Inner {
                config: TransportConfig { max_connections: max, ..config },
                connector,
                state: Mutex::new(State { conns: Vec::new(), last_throughput_open: None }),
                opened: AtomicU64::new(0),
                open: Arc::new(AtomicU64::new(0)),
                sent: AtomicU64::new(0),
                resent: AtomicU64::new(0),
                learned_limit: Arc::new(AtomicU32::new(0)),
            }),
        }
    }

    /// Takes an already open connection on which ALPN chose h2 (auto's probe) into the set.
    pub(crate) fn adopt(&self, conn: crate::conn::Connection) {
        let c = self.inner.new_conn(Some(conn));
        self.inner.state.lock().unwrap().conns.push(c);
    }

    /// Open connections and the streams in flight on each, in opening order.
    pub fn streams_in_flight(&self) -> Vec<usize> {
        self.inner.state.lock().unwrap().conns.iter().map(|c| c.in_flight.load(Relaxed)).collect()
    }
}

impl Transport for H2Transport {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.send(req).await })
    }

    fn stats(&self) -> TransportStats {
        let i = &self.inner;
        TransportStats {
            connections_opened: i.opened.load(Relaxed),
            connections_open: i.open.load(Relaxed),
            requests_sent: i.sent.load(Relaxed),
            requests_resent: i.resent.load(Relaxed),
        }
    }

    fn name(&self) -> &'static str {
        "h2"
    }
}

/// A stream's claim on its connection; dropping it ends the stream's count.
struct StreamSlot {
    conn: Arc<Conn>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.conn.in_flight.fetch_sub(1, Relaxed);
        *self.conn.last_used.lock().unwrap() = Instant::now();
    }
}

impl BodyGuard for StreamSlot {
    fn data(&mut self, n: usize) {
        self.conn.bytes.fetch_add(n as u64, Relaxed);
    }

    fn finished(self: Box<Self>) {}
}

impl Inner {
    /// A connection entry whose opening runs in its own task; `existing` is a connection
    /// already open (auto's probe), else one is opened.
    fn new_conn(self: &Arc<Self>, existing: Option<crate::conn::Connection>) -> Arc<Conn> {
        let assumed = match self.learned_limit.load(Relaxed) {
            0 => DEFAULT_STREAM_LIMIT,
            n => n,
        };
        let stream_limit = Arc::new(AtomicU32::new(assumed));
        let closed = Arc::new(AtomicBool::new(false));
        let (inner, limit2, closed2) = (self.clone(), stream_limit.clone(), closed.clone());
        let task = tokio::spawn(async move {
            let opened = match existing {
                Some(c) => Ok(c),
                None => inner.connector.connect().await.map_err(|e| OpenError { kind: e.kind(), retry: e.retry(), message: e.to_string() }),
            };
            let r = match opened {
                Ok(c) => inner.handshake(c, limit2, closed2.clone()).await,
                Err(e) => Err(e),
            };
            if r.is_err() {
                closed2.store(true, Relaxed);
            }
            r
        });
        let ready = async move {
            task.await.unwrap_or_else(|e| Err(OpenError { kind: ErrorKind::Connect, retry: RetrySafety::Always, message: format!("connection task failed: {e}") }))
        }
        .boxed()
        .shared();
        Arc::new(Conn {
            ready,
            in_flight: AtomicUsize::new(0),
            stream_limit,
            closed,
            bytes: Arc::new(AtomicU64::new(0)),
            requests: AtomicU64::new(0),
            meter: Mutex::new(Meter::new(Instant::now())),
            last_used: Mutex::new(Instant::now()),
        })
    }

    async fn handshake(self: Arc<Self>, conn: crate::conn::Connection, limit: Arc<AtomicU32>, closed: Arc<AtomicBool>) -> Result<(Sender, u64), OpenError> {
        if self.config.endpoint.scheme == Scheme::Https && !conn.alpn_h2 {
            return Err(OpenError {
                kind: ErrorKind::Protocol,
                retry: RetrySafety::Never,
                message: format!("{} did not choose h2 in TLS ALPN", self.config.endpoint.authority()),
            });
        }
        let io = SettingsTap::new(conn.io, limit, Some(self.learned_limit.clone()));
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME_SIZE)
            .max_send_buf_size(MAX_SEND_BUF)
            .handshake::<_, WireBody>(TokioIo::new(io))
            .await
            .map_err(|e| OpenError { kind: ErrorKind::Protocol, retry: RetrySafety::Never, message: format!("HTTP/2 handshake: {e}") })?;
        self.opened.fetch_add(1, Relaxed);
        self.open.fetch_add(1, Relaxed);
        let open = self.open.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("h2 connection ended: {e}");
            }
            closed.store(true, Relaxed);
            open.fetch_sub(1, Relaxed);
        });
        Ok((sender, conn.id))
    }

    /// Chooses the connection for a new stream (opening one when the rules say so) and
    /// counts the stream on it.
    fn place(self: &Arc<Self>) -> StreamSlot {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap();
        let idle_timeout = self.config.idle_timeout;
        st.conns.retain(|c| !c.is_closed() && (c.in_flight.load(Relaxed) > 0 || c.last_used.lock().unwrap().elapsed() < idle_timeout));
        for c in &st.conns {
            c.sample(now);
        }
        let open_ok = st.conns.len() < self.config.max_connections;
        let below_limit = |c: &&Arc<Conn>| c.in_flight.load(Relaxed) < c.limit();
        let best = st.conns.iter().filter(below_limit).min_by_key(|c| (c.saturated(), c.in_flight.load(Relaxed))).cloned();
        let open_new = match &best {
            None => open_ok,
            Some(c) => {
                let cool = st.last_throughput_open.is_none_or(|t| now.saturating_duration_since(t) >= METER_WINDOW * 2);
                if open_ok && c.saturated() && cool {
                    st.last_throughput_open = Some(now);
                    tracing::debug!("h2: every connection saturated, opening another");
                    true
                } else {
                    false
                }
            }
        };
        let conn = if open_new {
            let c = self.new_conn(None);
            st.conns.push(c.clone());
            c
        } else {
            match best {
                Some(c) => c,
                // All at their limit and the cap reached: wait in the least loaded one.
                None => st.conns.iter().min_by_key(|c| c.in_flight.load(Relaxed)).cloned().expect("at the cap, so connections exist"),
            }
        };
        conn.in_flight.fetch_add(1, Relaxed);
        StreamSlot { conn }
    }

    fn forget(&self, conn: &Arc<Conn>) {
        conn.closed.store(true, Relaxed);
        self.state.lock().unwrap().conns.retain(|c| !Arc::ptr_eq(c, conn));
    }

    async fn send(self: Arc<Self>, req: Request) -> Result<Response, WireError> {
        let started = Instant::now();
        let idempotent = req.is_idempotent();
        let Request { method, path_and_query, mut headers, body } = req;
        // HTTP/2 carries the authority in :authority (RFC 9113 section 8.3.1).
        headers.remove(HOST);
        set_content_length(&method, &mut headers, &body);
        let scheme = match self.config.endpoint.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        let uri = format!("{scheme}://{}{path_and_query}", self.config.endpoint.authority());
        let mut body: Option<RequestBody> = Some(body);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let slot = self.place();
            let conn = slot.conn.clone();
            let (mut sender, id) = match conn.ready.clone().await {
                Ok(s) => s,
                Err(e) => {
                    self.forget(&conn);
                    return Err(WireError::new(e.kind, e.message).with_retry(e.retry));
                }
            };
            let reused = conn.requests.fetch_add(1, Relaxed) > 0;
            let this_body = body.take().expect("a body for each attempt");
            let replay = this_body.try_clone();
            let progress = Progress::new();
            let hreq = build_request(&method, &uri, &headers, WireBody::new(this_body, Some(conn.bytes.clone()), Some(progress.clone())))?;
            self.sent.fetch_add(1, Relaxed);
            match await_head(sender.try_send_request(hreq), self.config.response_timeout, &progress).await {
                // Dropping the request future resets the stream.
                None => return Err(timeout_error(self.config.response_timeout)),
                Some(Ok(resp)) => {
                    let meta = ResponseMeta { protocol: Protocol::Http2, connection_id: id, reused_connection: reused, time_to_head: started.elapsed() };
                    return Ok(into_response(resp, method == http::Method::HEAD, Box::new(slot), meta));
                }
                Some(Err(mut e)) => {
                    drop(slot);
                    if let Some(unsent) = e.take_message() {
                        self.sent.fetch_sub(1, Relaxed);
                        self.forget(&conn);
                        body = Some(unsent.into_body().into_request_body());
                        if attempts < MAX_ATTEMPTS {
                            continue;
                        }
                        return Err(WireError::new(ErrorKind::Reset, "HTTP/2 connections kept closing before the request could be sent").with_source(e.into_error()));
                    }
                    let e = e.into_error();
                    let class = classify(&e);
                    if matches!(class, Failure::ConnectionGone) || sender.is_closed() {
                        self.forget(&conn);
                    }
                    let again = match class {
                        Failure::Refused => true,
                        Failure::ConnectionGone => idempotent,
                        Failure::Other => false,
                    };
                    if again && attempts < MAX_ATTEMPTS {
                        if let Some(replay) = replay {
                            tracing::debug!("h2: re-sending {method} {path_and_query} on another connection: {e}");
                            self.resent.fetch_add(1, Relaxed);
                            body = Some(replay);
                            continue;
                        }
                    }
                    return Err(match class {
                        Failure::Refused => WireError::new(ErrorKind::Reset, "the server refused the stream").with_retry(RetrySafety::Always).with_source(e),
                        _ => crate::pool::map_head_error(e, reused),
                    });
                }
            }
        }
    }
}

enum Failure {
    /// REFUSED_STREAM: the server did not process it (RFC 9113 section 8.7).
    Refused,
    /// GOAWAY or the connection closed before a response.
    ConnectionGone,
    Other,
}

fn classify(e: &hyper::Error) -> Failure {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h2e) = s.downcast_ref::<::h2::Error>() {
            if h2e.reason() == Some(::h2::Reason::REFUSED_STREAM) {
                return Failure::Refused;
            }
            if h2e.is_go_away() || h2e.is_io() {
                return Failure::ConnectionGone;
            }
            return Failure::Other;
        }
        if s.downcast_ref::<io::Error>().is_some() {
            return Failure::ConnectionGone;
        }
        src = s.source();
    }
    if e.is_canceled() || e.is_closed() || e.is_incomplete_message() {
        Failure::ConnectionGone
    } else {
        Failure::Other
    }
}

/// Reads the server's first SETTINGS frame on its way to hyper and records
/// SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 sections 3.4 and 6.5.2) into `limit`, which
/// keeps [`DEFAULT_STREAM_LIMIT`] when the server sets none or its first frame is not
/// SETTINGS. Later SETTINGS changes are not followed (h2 itself still honours them, so a
/// lowered limit only makes streams wait). Once done it only passes bytes through.
pub(crate) struct SettingsTap<T> {
    io: T,
    seen: Vec<u8>,
    done: bool,
    limit: Arc<AtomicU32>,
    also: Option<Arc<AtomicU32>>,
}

/// SETTINGS frame type and the MAX_CONCURRENT_STREAMS identifier (RFC 9113 sections
/// 6.5 and 6.5.2).
const FRAME_SETTINGS: u8 = 0x4;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;

impl<T> SettingsTap<T> {
    /// Records into `limit`, and into `also` when given (the transport's memory).
    pub(crate) fn new(io: T, limit: Arc<AtomicU32>, also: Option<Arc<AtomicU32>>) -> SettingsTap<T> {
        SettingsTap { io, seen: Vec::new(), done: false, limit, also }
    }

    fn observe(&mut self, bytes: &[u8]) {
        self.seen.extend_from_slice(bytes);
        if self.seen.len() < 9 {
            return;
        }
        let len = u32::from_be_bytes([0, self.seen[0], self.seen[1], self.seen[2]]) as usize;
        let (kind, flags) = (self.seen[3], self.seen[4]);
        if kind != FRAME_SETTINGS || flags & 0x1 != 0 || !len.is_multiple_of(6) || len > 6 * 64 {
            self.done = true;
            self.seen = Vec::new();
            return;
        }
        if self.seen.len() < 9 + len {
            return;
        }
        let mut limit = DEFAULT_STREAM_LIMIT;
        for p in self.seen[9..9 + len].chunks_exact(6) {
            if u16::from_be_bytes([p[0], p[1]]) == SETTINGS_MAX_CONCURRENT_STREAMS {
                limit = u32::from_be_bytes([p[2], p[3], p[4], p[5]]).max(1);
            }
        }
        self.limit.store(limit, Relaxed);
        if let Some(also) = &self.also {
            also.store(limit, Relaxed);
        }
        self.done = true;
        self.seen = Vec::new();
    }
}

impl<T: Io> AsyncRead for SettingsTap<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if !self.done && matches!(r, Poll::Ready(Ok(()))) {
            let new = buf.filled()[before..].to_vec();
            self.observe(&new);
        }
        r
    }
}

impl<T: Io> AsyncWrite for SettingsTap<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturation_needs_more_streams_without_more_bytes() {
        let w = |rate: f64, streams| Window { rate, streams };
        assert!(saturated(w(100e6, 4), w(105e6, 8)));
        assert!(!saturated(w(100e6, 4), w(150e6, 8)), "growing");
        assert!(!saturated(w(100e6, 8), w(100e6, 8)), "same streams: no evidence");
        assert!(!saturated(w(0.5e6, 4), w(0.5e6, 8)), "too slow to measure");
    }

    #[test]
    fn meter_closes_windows_of_at_least_the_window_length() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0);
        m.sample(t0 + METER_WINDOW / 2, 1, 1);
        assert!(m.last.is_none());
        m.sample(t0 + METER_WINDOW, 50_000_000, 2);
        m.sample(t0 + METER_WINDOW * 2, 100_000_000, 6);
        assert!(m.is_saturated());
        m.sample(t0 + METER_WINDOW * 3, 200_000_000, 6);
        assert!(!m.is_saturated());
    }

    #[test]
    fn settings_tap_reads_max_concurrent_streams_across_reads() {
        let limit = Arc::new(AtomicU32::new(DEFAULT_STREAM_LIMIT));
        let mut tap = SettingsTap::new((), limit.clone(), None);
        // SETTINGS with HEADER_TABLE_SIZE=4096 and MAX_CONCURRENT_STREAMS=250.
        let mut frame = vec![0, 0, 12, FRAME_SETTINGS, 0, 0, 0, 0, 0];
        frame.extend_from_slice(&[0, 1, 0, 0, 16, 0]);
        frame.extend_from_slice(&[0, 3, 0, 0, 0, 250]);
        tap.observe(&frame[..5]);
        assert_eq!(limit.load(Relaxed), DEFAULT_STREAM_LIMIT);
        tap.observe(&frame[5..]);
        assert_eq!(limit.load(Relaxed), 250);
        assert!(tap.done);
    }

    #[test]
    fn settings_tap_without_a_limit_keeps_the_default() {
        let limit = Arc::new(AtomicU32::new(7));
        let mut tap = SettingsTap::new((), limit.clone(), None);
        tap.observe(&[0, 0, 0, FRAME_SETTINGS, 0, 0, 0, 0, 0]);
        assert_eq!(limit.load(Relaxed), DEFAULT_STREAM_LIMIT);
    }
}
