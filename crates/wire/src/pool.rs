//! h1-pool: a classic HTTP/1.1 keep-alive pool with a maximum size, the baseline that
//! the AWS SDKs use (50 connections by default, docs/lab/wire-facts.md).
//!
//! Built on hyper's client connection API (`hyper::client::conn::http1`), one hyper
//! connection per pooled socket, and not on hyper-util's legacy `Client`, whose pool has
//! a per-host idle limit but no cap on connections open at once.
//!
//! A request takes the most recently used idle connection, or opens one when fewer than
//! `max_connections` are open, or else waits in a FIFO queue until a connection is handed
//! back or a slot frees up. Each open (or opening) connection holds one `Slot`; a slot
//! is released when its connection is dropped, so the cap counts sockets, not requests.
//!
//! ```text
//!            acquire: under the cap            send_request
//!   (none) ───────────────────────► Opening ───────────────► Busy ──┐
//!     ▲                                │ connect/TLS failed    │    │ body read to its end
//!     │◄───────────────────────────────┘                       │    ▼
//!     │◄── error, time-out, body dropped early ─────────────────┘  Idle ──► Busy (reused,
//!     │◄── idle longer than idle_timeout, or closed by server ─────┘        after ready())
//! ```
//!
//! A connection goes back to Idle only once its response body was read to the end; a
//! body dropped early closes it (HTTP/1.1 cannot abandon a response on a live socket).
//! Before reuse, `SendRequest::ready()` confirms hyper has finished with the previous
//! exchange and the socket is still open.
//!
//! The keep-alive race: a server may close an idle connection just as a request is
//! written on it. The request then fails before any response byte. When the request is
//! idempotent and its body can be replayed, it is sent once more on a fresh connection
//! (counted in `requests_resent`), as SDK pools do; a request hyper reports as never
//! written is re-sent on another connection whatever its method.
//!
//! Reading a body: the response body polls its connection's hyper future itself before
//! each chunk (drive.rs), so a bulk GET is read from the socket on the task that
//! consumes (and checksums) it, with no cross-thread hand-off per chunk; the connection's
//! own task takes over again when the body ends. Backpressure is unchanged: hyper reads
//! only when its one-chunk body channel is empty.
//!
//! This module also holds its hyper glue: `WireBody` (request bodies with exact
//! length), `IncomingStream` (hyper's body as a [`ResponseBody`] that tells its owner
//! when it ended) and the error mapping. What it shares with h2.rs lives below both:
//! body bookkeeping (`BodyTally`, `BodyGuard`) in body.rs, the response-head
//! time-out (`await_head`) and framing headers in exchange.rs.

use crate::body::{BodyGuard, BodyTally, RequestBody, ResponseBody};
use crate::conn::Connector;
use crate::drive::{Driver, HandBack};
use crate::error::{ErrorKind, WireError};
use crate::exchange::{await_head, set_content_length, timeout_error, Progress, StallClock};
use crate::gate::{ConnectionGate, Place};
use crate::{Protocol, Request, Response, ResponseMeta, Transport, TransportConfig, TransportStats};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use http::header::HOST;
use http::{HeaderMap, HeaderValue, Method};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a reused connection may take to become ready after its previous response
/// ended. hyper flips it to ready as soon as its connection task has processed the end
/// of the message, normally within microseconds; a connection still not ready after this
/// is discarded rather than waited on.
const READY_WAIT: Duration = Duration::from_secs(1);

/// Most attempts at one request: re-sends after a request was returned unwritten, plus
/// the one keep-alive race re-send. A bound against a server that closes every
/// connection at once.
const MAX_ATTEMPTS: usize = 4;

type Sender = http1::SendRequest<WireBody>;

/// Largest read buffer hyper may grow to on one connection: 64 KiB, below its ~400 KiB
/// default. A body chunk is a slice of this buffer, so memory per body in flight is a few
/// times this figure, and the bytes a consumer copies on were read a buffer or two
/// earlier, still in cache (less wall, system CPU and memory than 256 KiB: see
/// docs/lab/wire-h1-read-path.md; re-measure with a 4 x 1 GiB `ferry cp` down from
/// `ferry serve --memory`, comparing wall, system CPU and peak RSS).
const READ_BUFFER_MAX: usize = 64 * 1024;

/// HTTP/1.1 keep-alive pool with at most `config.max_connections` connections.
pub struct PoolTransport {
    pool: Arc<Pool>,
}

struct Pool {
    config: TransportConfig,
    connector: Connector,
    state: Mutex<PoolState>,
    reaper_started: AtomicBool,
    /// Set by `auto`: the pool's share of a connection cap it shares (see "Shared cap").
    gate: Option<Arc<dyn ConnectionGate>>,
    opened: AtomicU64,
    open: Arc<AtomicU64>,
    sent: AtomicU64,
    resent: AtomicU64,
}

struct PoolState {
    /// Most recently returned at the back: reuse takes from the back, expiry from the front.
    idle: VecDeque<Idle>,
    /// Connections open or opening; never above `max_connections`.
    slots: usize,
    /// Requests waiting for a connection, oldest first. Invariant: when non-empty, `idle`
    /// is empty (a returned connection goes to the first live waiter).
    waiters: VecDeque<oneshot::Sender<Grant>>,
}

struct Idle {
    sender: Sender,
    id: u64,
    since: Instant,
    driver: Arc<Driver>,
}

/// What a waiting or acquiring request receives.
enum Grant {
    Reuse(Idle, Slot),
    Open(Slot),
}

/// One place under the cap. Dropping an armed slot frees it (or hands it to a waiter).
/// With a gate, a slot about to open a connection also carries the gate's place, which
/// moves into the socket once connected (and is given back when the socket closes).
struct Slot {
    pool: Option<Arc<Pool>>,
    place: Option<Place>,
}

impl Slot {
    fn disarm(mut self) {
        self.pool = None;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.place.take());
        if let Some(pool) = self.pool.take() {
            pool.release_slot();
        }
    }
}

impl PoolTransport {
    pub fn new(config: TransportConfig) -> Result<PoolTransport, WireError> {
        let connector = Connector::new(&config, &[b"http/1.1"])?;
        Ok(PoolTransport::with_connector(config, connector))
    }

    /// A pool that opens its connections with `connector` (used by `auto`, which shares
    /// one connector between its transports). Connections on which TLS ALPN chose h2 are
    /// refused.
    pub fn with_connector(config: TransportConfig, connector: Connector) -> PoolTransport {
        Self::with_gate(config, connector, None)
    }

    /// A pool whose connections also need a place from `gate` (auto's shared cap).
    pub(crate) fn with_gate(
        config: TransportConfig,
        connector: Connector,
        gate: Option<Arc<dyn ConnectionGate>>,
    ) -> PoolTransport {
        let max = config.max_connections.max(1);
        PoolTransport {
            pool: Arc::new(Pool {
                config: TransportConfig { max_connections: max, ..config },
                connector,
                state: Mutex::new(PoolState { idle: VecDeque::new(), slots: 0, waiters: VecDeque::new() }),
                reaper_started: AtomicBool::new(false),
                gate,
                opened: AtomicU64::new(0),
                open: Arc::new(AtomicU64::new(0)),
                sent: AtomicU64::new(0),
                resent: AtomicU64::new(0),
            }),
        }
    }

    /// Takes an already open HTTP/1.1 connection (auto's ALPN probe) into the idle list,
    /// if under the cap.
    /// (auto adopts before any request reaches the pool, so the place is taken first.)
    pub(crate) async fn adopt(&self, mut conn: crate::conn::Connection) -> Result<(), WireError> {
        let Some(place) = self.pool.gate_open() else { return Ok(()) };
        conn.io = place.hold(conn.io);
        let (sender, id, driver) = self.pool.handshake(conn).await?;
        let mut st = self.pool.state.lock().unwrap();
        if st.slots < self.pool.config.max_connections && st.waiters.is_empty() {
            st.slots += 1;
            st.idle.push_back(Idle { sender, id, since: Instant::now(), driver });
        }
        Ok(())
    }

    /// Connections idle in the pool now.
    pub fn idle_connections(&self) -> usize {
        self.pool.state.lock().unwrap().idle.len()
    }
}

impl Transport for PoolTransport {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let pool = self.pool.clone();
        Box::pin(async move { pool.send(req).await })
    }

    fn stats(&self) -> TransportStats {
        let p = &self.pool;
        TransportStats {
            connections_opened: p.opened.load(Relaxed),
            connections_open: p.open.load(Relaxed),
            requests_sent: p.sent.load(Relaxed),
            requests_resent: p.resent.load(Relaxed),
            ..TransportStats::default()
        }
    }

    fn name(&self) -> &'static str {
        "h1-pool"
    }
}

impl Pool {
    fn release_slot(self: &Arc<Self>) {
        let mut st = self.state.lock().unwrap();
        if self.gate.is_some() {
            // The gate's place went with the socket (or with the slot, never connected).
            st.slots -= 1;
            self.grant_waiters(&mut st);
            return;
        }
        while let Some(w) = st.waiters.pop_front() {
            // The slot passes to the waiter; no count changes.
            match w.send(Grant::Open(Slot { pool: Some(self.clone()), place: None })) {
                Ok(()) => return,
                Err(Grant::Open(s) | Grant::Reuse(_, s)) => s.disarm(),
            }
        }
        st.slots -= 1;
    }

    /// A connection whose response was read to its end comes back.
    fn put_back(self: &Arc<Self>, idle: Idle, slot: Slot) {
        if let Some(g) = self.gate.as_ref().filter(|g| g.excess() > 0) {
            // Over its share of a shared cap: the connection closes and its place goes
            // to the other lane (dropping the slot releases it).
            g.handed_over(1);
            drop(idle);
            drop(slot);
            return;
        }
        let mut st = self.state.lock().unwrap();
        let mut grant = Grant::Reuse(idle, slot);
        while let Some(w) = st.waiters.pop_front() {
            match w.send(grant) {
                Ok(()) => return,
                Err(g) => grant = g,
            }
        }
        if let Grant::Reuse(idle, slot) = grant {
            st.idle.push_back(idle);
            // The idle entry now stands for the slot.
            slot.disarm();
        }
    }

    /// Closes idle connections past the idle time-out or closed by the server.
    fn purge(&self, st: &mut PoolState) {
        let limit = self.config.idle_timeout;
        let before = st.idle.len();
        st.idle.retain(|c| c.since.elapsed() < limit && !c.sender.is_closed());
        if let Some(g) = &self.gate {
            let excess = g.excess().min(st.idle.len());
            st.idle.drain(..excess);
            g.handed_over(excess);
        }
        // (With a gate, each closed socket gives its place back as it closes.)
        st.slots -= before - st.idle.len();
    }

    async fn acquire(self: &Arc<Self>, fresh: bool) -> Result<Grant, WireError> {
        let rx = {
            let mut st = self.state.lock().unwrap();
            self.purge(&mut st);
            if fresh {
                // Re-sending after a keep-alive race: trade the oldest idle connection's
                // slot for a new connection rather than trust another idle one.
                if st.idle.pop_front().is_some() {
                    if self.gate.is_none() {
                        return Ok(Grant::Open(Slot { pool: Some(self.clone()), place: None }));
                    }
                    // With a gate the new connection needs a place of its own: the old
                    // one's comes back when its socket has closed.
                    st.slots -= 1;
                }
            } else if let Some(idle) = st.idle.pop_back() {
                return Ok(Grant::Reuse(idle, Slot { pool: Some(self.clone()), place: None }));
            }
            if st.slots < self.config.max_connections {
                if let Some(place) = self.gate_open() {
                    st.slots += 1;
                    return Ok(Grant::Open(Slot { pool: Some(self.clone()), place: Some(place) }));
                }
            }
            let (tx, rx) = oneshot::channel();
            st.waiters.push_back(tx);
            rx
        };
        rx.await.map_err(|_| WireError::new(ErrorKind::Reset, "the connection pool was shut down"))
    }

    async fn open(&self, place: Option<Place>) -> Result<(Sender, u64, Arc<Driver>), WireError> {
        let mut conn = self.connector.connect().await?;
        if let Some(place) = place {
            conn.io = place.hold(conn.io);
        }
        self.handshake(conn).await
    }

    async fn handshake(&self, conn: crate::conn::Connection) -> Result<(Sender, u64, Arc<Driver>), WireError> {
        if conn.alpn_h2 {
            return Err(WireError::protocol("TLS ALPN chose h2 on a connection opened for HTTP/1.1"));
        }
        let id = conn.id;
        let (sender, connection) = http1::Builder::new()
            .max_buf_size(READ_BUFFER_MAX)
            .handshake::<_, WireBody>(TokioIo::new(conn.io))
            .await
            .map_err(|e| WireError::protocol("HTTP/1.1 handshake").with_source(e))?;
        self.opened.fetch_add(1, Relaxed);
        self.open.fetch_add(1, Relaxed);
        let open = self.open.clone();
        // hyper's connection future, shared with the bodies read on it (drive.rs).
        let driver = Arc::new(Driver::new(Box::pin(async move {
            if let Err(e) = connection.await {
                tracing::debug!("HTTP/1.1 connection ended: {e}");
            }
        })));
        let task_driver = driver.clone();
        tokio::spawn(async move {
            task_driver.run().await;
            open.fetch_sub(1, Relaxed);
        });
        Ok((sender, id, driver))
    }

    fn start_reaper(self: &Arc<Self>) {
        if self.reaper_started.swap(true, Relaxed) {
            return;
        }
        let weak: Weak<Pool> = Arc::downgrade(self);
        let every = (self.config.idle_timeout / 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = weak.upgrade() else { return };
                let mut st = pool.state.lock().unwrap();
                pool.purge(&mut st);
            }
        });
    }

    async fn send(self: Arc<Self>, req: Request) -> Result<Response, WireError> {
        let started = Instant::now();
        self.start_reaper();
        let idempotent = req.is_idempotent();
        let Request { method, path_and_query, mut headers, body, .. } = req;
        if !headers.contains_key(HOST) {
            let host = HeaderValue::from_str(&self.config.endpoint.authority())
                .map_err(|e| WireError::config("endpoint host is not a valid Host header").with_source(e))?;
            headers.insert(HOST, host);
        }
        set_content_length(&method, &mut headers, &body);
        let mut body = Some(body);
        let mut fresh = false;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (mut sender, id, reused, slot, driver) = match self.acquire(fresh).await? {
                Grant::Reuse(idle, slot) => {
                    let mut sender = idle.sender;
                    match tokio::time::timeout(READY_WAIT, sender.ready()).await {
                        Ok(Ok(())) => (sender, idle.id, true, slot, idle.driver),
                        // Closed while idle: drop it (freeing its slot) and look again;
                        // nothing was written, so this is no attempt.
                        _ => {
                            attempts -= 1;
                            continue;
                        }
                    }
                }
                Grant::Open(mut slot) => {
                    let (sender, id, driver) = self.open(slot.place.take()).await?;
                    (sender, id, false, slot, driver)
                }
            };
            let this_body = body.take().expect("a body for each attempt");
            let replay = if reused && idempotent && !fresh { this_body.try_clone() } else { None };
            let progress = Progress::new();
            let hreq = build_request(
                &method,
                &path_and_query,
                &headers,
                WireBody::new(this_body, None, Some(progress.clone())),
            )?;
            self.sent.fetch_add(1, Relaxed);
            // One request per connection at a time: from here on, only the endpoint (and
            // the upload of this request's own body) stands between it and its head.
            let on_wire = Instant::now();
            let outcome = await_head(sender.try_send_request(hreq), self.config.response_timeout, &progress).await;
            match outcome {
                None => {
                    // The socket is closed here, not left to hyper: with the request
                    // dropped, hyper's connection can sit for as long as TCP keeps
                    // retransmitting (many minutes on a dead link) still trying to write
                    // the body, holding its slot and its gate place, and every retry
                    // would wait for a place behind it.
                    driver.close();
                    return Err(timeout_error(self.config.response_timeout));
                }
                Some(Ok(resp)) => {
                    let guard = PooledConn { pool: self.clone(), sender, id, slot, driver: HandBack(driver.clone()) };
                    let meta = ResponseMeta {
                        protocol: Protocol::Http1,
                        connection_id: id,
                        reused_connection: reused,
                        time_to_head: started.elapsed(),
                        head_latency: Some(on_wire.elapsed()),
                    };
                    let stall = StallClock::new(self.config.response_timeout);
                    return Ok(into_response(resp, method == Method::HEAD, Box::new(guard), meta, driver, stall));
                }
                Some(Err(mut e)) => {
                    drop(sender);
                    drop(slot);
                    if let Some(unsent) = e.take_message() {
                        // hyper never wrote it: safe to send elsewhere whatever the method.
                        self.sent.fetch_sub(1, Relaxed);
                        body = Some(unsent.into_body().into_request_body());
                        if attempts < MAX_ATTEMPTS {
                            continue;
                        }
                        return Err(WireError::new(
                            ErrorKind::Reset,
                            "connections kept closing before the request could be written",
                        )
                        .with_source(e.into_error()));
                    }
                    let err = map_head_error(e.into_error(), reused);
                    if err.kind() == ErrorKind::Reset && attempts < MAX_ATTEMPTS {
                        if let Some(replay) = replay {
                            // The keep-alive race: once, on a fresh connection.
                            tracing::debug!(
                                "re-sending {method} {path_and_query} after a reused connection failed: {err}"
                            );
                            self.resent.fetch_add(1, Relaxed);
                            fresh = true;
                            body = Some(replay);
                            continue;
                        }
                    }
                    return Err(err);
                }
            }
        }
    }
}

/// The busy state: the response body holds its connection and slot.
struct PooledConn {
    pool: Arc<Pool>,
    sender: Sender,
    id: u64,
    slot: Slot,
    /// Dropped (so the connection's task takes over again) when the body ends, fails or
    /// is dropped, after the body's last poll of the connection.
    driver: HandBack,
}

impl BodyGuard for PooledConn {
    fn finished(self: Box<Self>) {
        let PooledConn { pool, sender, id, slot, driver } = *self;
        if sender.is_closed() {
            return;
        }
        pool.put_back(Idle { sender, id, since: Instant::now(), driver: driver.0.clone() }, slot);
    }
}

// ---- Shared cap: the hook auto uses to share one connection cap between lanes (gate.rs) ----
//
// Without a gate (a plain h1-pool) none of this runs. With one, opening a connection also
// needs a place from the gate, held by the socket until it is closed and then given back
// to the gate (not to a waiter of this pool: the other lane may be owed it), and a
// connection that comes back while the pool holds more than its share is closed instead
// of kept idle.

impl Pool {
    /// A place from the gate (always one without a gate); it goes back when dropped.
    fn gate_open(&self) -> Option<Place> {
        Place::take(self.gate.as_ref())
    }

    /// Gives waiters new connections while the cap and the gate allow.
    fn grant_waiters(self: &Arc<Self>, st: &mut PoolState) {
        while !st.waiters.is_empty() && st.slots < self.config.max_connections {
            let Some(mut place) = self.gate_open() else { break };
            st.slots += 1;
            let mut granted = false;
            while let Some(w) = st.waiters.pop_front() {
                match w.send(Grant::Open(Slot { pool: Some(self.clone()), place: Some(place) })) {
                    Ok(()) => {
                        granted = true;
                        break;
                    }
                    Err(Grant::Open(mut s) | Grant::Reuse(_, mut s)) => {
                        place = s.place.take().expect("the place just sent");
                        s.disarm();
                    }
                }
            }
            if !granted {
                // Dropping the unused place gives it back.
                st.slots -= 1;
                break;
            }
        }
    }
}

impl PoolTransport {
    /// The gate may have room now (the other lane closed a connection, the limit grew).
    pub(crate) fn nudge(&self) {
        let mut st = self.pool.state.lock().unwrap();
        self.pool.purge(&mut st);
        self.pool.grant_waiters(&mut st);
    }
}

// ---- hyper glue shared with h2.rs -------------------------------------------------

pub(crate) fn build_request(
    method: &Method,
    uri: &str,
    headers: &HeaderMap,
    body: WireBody,
) -> Result<http::Request<WireBody>, WireError> {
    let mut req = http::Request::builder()
        .method(method.clone())
        .uri(uri)
        .body(body)
        .map_err(|e| WireError::config(format!("'{uri}' is not a valid request target")).with_source(e))?;
    *req.headers_mut() = headers.clone();
    Ok(req)
}

/// Maps a hyper error that came before the response head.
pub(crate) fn map_head_error(e: hyper::Error, reused: bool) -> WireError {
    if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
        return WireError::protocol("unparseable response head").with_source(e);
    }
    if e.is_timeout() {
        return WireError::new(ErrorKind::Timeout, "response head timed out").with_source(e);
    }
    if e.is_user() {
        return WireError::new(ErrorKind::Reset, "the request body failed while being sent").with_source(e);
    }
    let on = if reused { "a reused connection" } else { "a new connection" };
    WireError::new(ErrorKind::Reset, format!("{on} closed before the response head")).with_source(e)
}

/// A request body as hyper sees it: exact length, bytes counted for the h2 throughput
/// meter, progress noted for the response time-out. A stream that yields more or fewer
/// bytes than announced fails the request instead of sending a wrong body.
pub(crate) struct WireBody {
    kind: WireBodyKind,
    remaining: u64,
    counter: Option<Arc<AtomicU64>>,
    progress: Option<Progress>,
}

enum WireBodyKind {
    Empty,
    Full(Option<Bytes>),
    Stream(BoxStream<'static, io::Result<Bytes>>),
}

impl WireBody {
    pub(crate) fn new(body: RequestBody, counter: Option<Arc<AtomicU64>>, progress: Option<Progress>) -> WireBody {
        let remaining = body.len();
        let kind = match body {
            RequestBody::Empty => WireBodyKind::Empty,
            RequestBody::Full(b) if b.is_empty() => WireBodyKind::Empty,
            RequestBody::Full(b) => WireBodyKind::Full(Some(b)),
            RequestBody::Stream { stream, .. } => WireBodyKind::Stream(stream),
        };
        if let Some(p) = &progress {
            p.touch();
        }
        WireBody { kind, remaining, counter, progress }
    }

    /// The body back, for a request hyper returned unwritten.
    pub(crate) fn into_request_body(self) -> RequestBody {
        match self.kind {
            WireBodyKind::Empty => RequestBody::Empty,
            WireBodyKind::Full(Some(b)) => RequestBody::Full(b),
            WireBodyKind::Full(None) => RequestBody::Empty,
            WireBodyKind::Stream(stream) => RequestBody::Stream { len: self.remaining, stream },
        }
    }

    fn sent(&mut self, n: usize) {
        self.remaining -= n as u64;
        if let Some(c) = &self.counter {
            c.fetch_add(n as u64, Relaxed);
        }
        if let Some(p) = &self.progress {
            p.touch();
        }
    }
}

impl Body for WireBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        match &mut this.kind {
            WireBodyKind::Empty => Poll::Ready(None),
            WireBodyKind::Full(b) => match b.take() {
                Some(b) => {
                    this.sent(b.len());
                    Poll::Ready(Some(Ok(Frame::data(b))))
                }
                None => Poll::Ready(None),
            },
            WireBodyKind::Stream(s) => loop {
                return match s.poll_next_unpin(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Some(Ok(b))) if b.is_empty() => continue,
                    Poll::Ready(Some(Ok(b))) if b.len() as u64 > this.remaining => {
                        Poll::Ready(Some(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "request body stream yielded more bytes than its announced length",
                        ))))
                    }
                    Poll::Ready(Some(Ok(b))) => {
                        this.sent(b.len());
                        Poll::Ready(Some(Ok(Frame::data(b))))
                    }
                    Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                    Poll::Ready(None) if this.remaining > 0 => Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("request body stream ended {} bytes short of its announced length", this.remaining),
                    )))),
                    Poll::Ready(None) => Poll::Ready(None),
                };
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            WireBodyKind::Empty => true,
            WireBodyKind::Full(b) => b.is_none(),
            WireBodyKind::Stream(_) => self.remaining == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// hyper's response body as a stream of chunks, pulled at the caller's pace: hyper reads
/// the socket (h1) or releases flow-control window (h2) only as chunks are polled.
pub(crate) struct IncomingStream {
    body: Incoming,
    tally: BodyTally,
    /// The connection, polled here before each chunk is asked for ([`Driver`]), and
    /// closed when the body is given up before its end.
    driver: Arc<Driver>,
    stall: StallClock,
}

impl Drop for IncomingStream {
    fn drop(&mut self) {
        // A body that failed, stalled or was dropped early: its connection is never
        // reused, and on a dead link hyper alone would hold the socket for minutes.
        if !self.tally.completed() {
            self.driver.close();
        }
    }
}

impl Stream for IncomingStream {
    type Item = Result<Bytes, WireError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.tally.is_done() {
            return Poll::Ready(None);
        }
        loop {
            this.driver.drive(cx);
            return match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending if this.stall.expired(cx) => {
                    let e = this.tally.stalled(this.stall.limit());
                    this.driver.close();
                    Poll::Ready(Some(Err(e)))
                }
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    this.stall.progressed();
                    let Ok(data) = frame.into_data() else { continue };
                    if data.is_empty() {
                        continue;
                    }
                    let end = this.body.is_end_stream();
                    Poll::Ready(Some(this.tally.data(data, end)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(this.tally.failed(e)))),
                Poll::Ready(None) => Poll::Ready(this.tally.ended().map(Err)),
            };
        }
    }
}

/// A hyper response as ours; `guard` is told when the body has been read to its end.
/// `head_request` because a response to HEAD, like a 204 or 304, has no body whatever
/// its Content-Length says (RFC 9110 section 6.4.1); hyper's h2 body still reports the
/// header's length for them.
pub(crate) fn into_response(
    resp: http::Response<Incoming>,
    head_request: bool,
    guard: Box<dyn BodyGuard>,
    meta: ResponseMeta,
    driver: Arc<Driver>,
    stall: StallClock,
) -> Response {
    let (parts, body) = resp.into_parts();
    let bodiless =
        head_request || parts.status == http::StatusCode::NO_CONTENT || parts.status == http::StatusCode::NOT_MODIFIED;
    let expected = if bodiless { Some(0) } else { body.size_hint().exact() };
    let mut stream = IncomingStream { body, tally: BodyTally::new(guard, expected), driver, stall };
    if stream.body.is_end_stream() {
        stream.tally.finish();
    }
    Response { status: parts.status, headers: parts.headers, body: ResponseBody::new(stream.boxed(), expected), meta }
}
