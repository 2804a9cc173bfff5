//! h2: HTTP/2 over several connections, with receive windows sized from the measured
//! bandwidth-delay product and grown while they are the bottleneck.
//!
//! Why windows matter: an HTTP/2 receiver grants the sender at most one window of
//! unacknowledged bytes per stream and per connection, so a connection moves at most
//! `window / RTT`. With hyper's client defaults (2 MiB stream, 5 MiB connection) one
//! client topped out at 250 MB/s where fresh connections reached 794 MB/s
//! (docs/lab/wire-facts.md); users of other clients turned HTTP/2 off for this.
//!
//! Why the `h2` crate directly and not hyper's client: the window must follow the path.
//! hyper 1.x either fixes both windows at build time or runs its own BDP estimator, which
//! resets them to the RFC's 64 KiB and caps them at 16 MiB per connection (~150 MB/s at
//! the 110 ms RTT of the `transatlantic` link, a tenth of its 10 Gbit/s). `h2` lets
//! the connection's owner change both windows at any time
//! (`Connection::set_target_window_size`, `set_initial_window_size`) and send PINGs.
//!
//! The window rule ([`Bdp`]): every connection starts at [`INITIAL_WINDOW`] for the
//! connection and for each stream. While response bytes flow, a PING measures one round
//! trip and counts the body bytes handed to callers during it: that count is the
//! bandwidth-delay product the current window allowed. When it reaches 2/3 of the window,
//! the window is the bottleneck, and both windows become twice the larger of the two
//! (like TCP's receive autotuning, doubling per round trip), up to [`MAX_WINDOW`]. Bytes
//! are counted when the caller takes them, not when they arrive, so a slow reader never
//! grows the windows: memory stays bounded by the window a connection actually uses,
//! and a body nobody reads holds at most one window. When a sample does not grow the
//! window, the next waits [`SAMPLE_PAUSE`], so a steady transfer costs a PING every
//! 100 ms, and the window can still follow a transfer that speeds up later.
//!
//! Connections and streams:
//!
//! - Lanes: a request is small or bulk (`lane::lane`: known to move at most
//!   1 MiB, or not). A small stream goes to a connection that carries no bulk stream, so
//!   it never shares a connection window or a TCP send queue with a large transfer; a
//!   bulk stream goes to a connection that already carries bulk streams or nothing. When
//!   no connection fits its lane, another is opened (up to `max_connections`); at the
//!   cap, lanes are shared rather than waited for.
//! - Within its lane, a new stream goes to the least loaded connection below its stream
//!   limit and not saturated; another is opened when none fits (the rules, with the
//!   stream limit, saturation and unproven connections: `Inner::place`).
//! - When every connection is at its limit and the cap is reached, the stream goes to
//!   the least loaded connection and waits in `h2` for a free stream.
//! - A connection that closes is dropped from the set. One the transport drops (after
//!   an error or a time-out on it, or idle) is closed once its last stream ends: `h2`'s
//!   GOAWAY, and the socket itself after [`CLOSE_GRACE`] if that cannot be flushed (a
//!   dead link), so it never lingers holding a place under a connection cap. A request refused by the server
//!   (REFUSED_STREAM, RFC 9113 section 8.7) or that could not be opened is re-sent on
//!   another connection whatever its method; an idempotent request whose connection
//!   went away (GOAWAY, close) before any response is re-sent when its body can be
//!   replayed. Connections idle longer than `idle_timeout` are closed (checked when a
//!   stream is placed, so an unused transport keeps its last connections until then).
//!
//! Prior knowledge (h2c) on http://; ALPN "h2" on https:// (a server that does not
//! choose h2 fails the connection with a protocol error).

use crate::body::{BodyGuard, BodyTally, RequestBody};
use crate::conn::Connector;
use crate::error::{ErrorKind, RetrySafety, WireError};
use crate::exchange::{await_head, set_content_length, timeout_error, Progress, StallClock};
use crate::lane::{lane, Lane};
use crate::{
    Protocol, Request, Response, ResponseBody, ResponseMeta, Scheme, Transport, TransportConfig, TransportStats,
};
use ::h2::client::{Connection as H2Connection, SendRequest};
use ::h2::{Ping, PingPong, Reason, RecvStream, SendStream};
use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use futures_util::stream::{Stream, StreamExt};
use futures_util::task::AtomicWaker;
use http::header::{CONTENT_LENGTH, HOST};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Both windows (connection, and SETTINGS_INITIAL_WINDOW_SIZE for each stream) when a
/// connection opens: 8 MiB, 4x hyper's 2 MiB stream default. It already carries ~8 GB/s
/// at the `region` preset's RTT (1 ms, docs/lab/wire-facts.md); on the 110 ms
/// `transatlantic` link it reaches
/// [`MAX_WINDOW`] after five doublings, about as long as TCP's own slow start.
pub const INITIAL_WINDOW: u32 = 8 * 1024 * 1024;

/// Largest window: 256 MiB, twice the 137 MB in flight on a 10 Gbit/s x 110 ms path
/// (the `transatlantic` preset), the same ceiling the lab sets for TCP's buffers there
/// (docs/lab/wire-facts.md).
pub const MAX_WINDOW: u32 = 256 * 1024 * 1024;

/// Wait after a PING round that did not grow the window: a steady transfer then costs a
/// PING every 100 ms, and the window can still follow a transfer that speeds up later
/// (a judgement; tests/h2_windows.rs checks the windows grow on a path with a round trip).
pub const SAMPLE_PAUSE: Duration = Duration::from_millis(100);

/// Largest DATA frame we accept: 1 MiB instead of 16 KiB cuts frame headers and wake-ups
/// per byte 64-fold, and at 10 Gbit/s holds its connection under 1 ms, small against
/// first-byte latencies of 30-90 ms (half the client CPU per GiB: docs/lab/wire-h2.md;
/// re-measure with `ferry bench bulk-get --quick --peers none`). Flow control needs no
/// batching here: `h2` sends a WINDOW_UPDATE only once half a window is released.
pub const MAX_FRAME_SIZE: u32 = 1024 * 1024;

/// Send buffer per stream for uploads, one frame's worth.
const MAX_SEND_BUF: usize = 1024 * 1024;

/// How long a connection the transport let go of may take to close itself (GOAWAY, its
/// last frames flushed) before its socket is closed regardless. A GOAWAY leaves within
/// one round trip on a live link (110 ms on the `transatlantic` preset); on a dead link
/// the flush never ends and only TCP's retransmission time-out (minutes) would free the
/// socket, which meanwhile holds a place under auto's connection cap.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Streams per connection until the server's SETTINGS say otherwise, or when they set no
/// limit: 100 is the floor RFC 9113 section 6.5.2 recommends and what GCS allows
/// (docs/lab/wire-facts.md).
pub const DEFAULT_STREAM_LIMIT: u32 = 100;

/// Throughput measurement window while a connection's round trip is unknown, and the
/// longest one: a few round trips on the 110 ms link, so that TCP and window growth show
/// within it.
pub const METER_WINDOW: Duration = Duration::from_millis(500);

/// Shortest measurement window, for round trips under 5 ms: 20 ms, long enough to hold
/// dozens of 1 MiB DATA frames at 10 Gbit/s, so a rate is more than a few frames' noise.
pub const MIN_METER_WINDOW: Duration = Duration::from_millis(20);

/// Round trips per measurement window once the PING task has measured one: four, since
/// TCP slow start and the window rule ([`Bdp`]) each double once per round trip, so four
/// show whether the streams added brought more bytes.
pub const METER_WINDOW_RTTS: u32 = 4;

/// Bulk streams a connection takes before its meter has closed a window: 4. A burst of
/// bulk streams is placed in one instant, before any throughput was measured; piled onto
/// one connection they would share one TCP slow start and one receive window for the
/// whole run. With 4, a burst of 64 opens 16 connections (a quarter of h1-pool's one per
/// stream), which then take more streams only while their measured rate grows (see
/// docs/lab/wire-h2.md; re-measure with `ferry bench bulk-wan --quick --peers none`).
pub const UNPROVEN_BULK_STREAMS: usize = 4;

/// The measurement window for a connection whose smallest PING round trip is `rtt`.
pub fn meter_window(rtt: Option<Duration>) -> Duration {
    match rtt {
        Some(r) => (r * METER_WINDOW_RTTS).clamp(MIN_METER_WINDOW, METER_WINDOW),
        None => METER_WINDOW,
    }
}

/// Growth that counts as "more streams brought more bytes": 10%, above the jitter of a
/// steady transfer over half-second windows.
pub const GROWTH_FACTOR: f64 = 1.10;

/// Below this a connection is never called saturated: 1 MB/s.
pub const MIN_METERED_RATE: f64 = 1_000_000.0;

/// Most attempts at one request (re-sends after refusal or a lost connection).
const MAX_ATTEMPTS: usize = 4;

type Sender = SendRequest<Bytes>;

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
    /// Of those, the bulk ones.
    bulk_in_flight: AtomicUsize,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS once seen.
    stream_limit: Arc<AtomicU32>,
    closed: Arc<AtomicBool>,
    /// Body bytes carried, both directions.
    bytes: Arc<AtomicU64>,
    requests: AtomicU64,
    meter: Mutex<Meter>,
    last_used: Mutex<Instant>,
    flow: Arc<Flow>,
    /// Dropped with the entry: tells the connection's task that nobody will use it
    /// again, so it closes (within [`CLOSE_GRACE`]) instead of waiting on the peer.
    _let_go: tokio::sync::oneshot::Sender<()>,
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

    /// Whether another bulk stream may join: once measured, always (saturation decides);
    /// before that, up to [`UNPROVEN_BULK_STREAMS`].
    fn takes_bulk(&self) -> bool {
        self.meter.lock().unwrap().is_measured() || self.bulk_in_flight.load(Relaxed) < UNPROVEN_BULK_STREAMS
    }

    fn window(&self) -> Duration {
        meter_window(self.flow.min_rtt())
    }

    fn sample(&self, now: Instant) {
        let window = self.window();
        self.meter.lock().unwrap().sample(now, window, self.bytes.load(Relaxed), self.in_flight.load(Relaxed));
    }
}

/// The window rule of the module note, as a pure function of PING rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bdp {
    window: u32,
}

impl Default for Bdp {
    fn default() -> Self {
        Bdp { window: INITIAL_WINDOW }
    }
}

impl Bdp {
    pub fn window(&self) -> u32 {
        self.window
    }

    /// One PING round trip during which callers took `delivered` body bytes. Returns the
    /// new window when the window was the bottleneck (`delivered` >= 2/3 of it).
    pub fn sample(&mut self, delivered: u64) -> Option<u32> {
        let w = self.window as u64;
        if self.window >= MAX_WINDOW || delivered * 3 < w * 2 {
            return None;
        }
        self.window = (2 * delivered.max(w)).min(MAX_WINDOW as u64) as u32;
        Some(self.window)
    }
}

/// One connection's receive side, shared by its driver task, its PING task and its
/// response bodies.
struct Flow {
    /// Body bytes handed to callers.
    delivered: AtomicU64,
    /// The window the PING task wants; the driver applies it.
    want: AtomicU32,
    /// The window in force (applied by the driver).
    window: AtomicU32,
    /// A PING round is running or about to.
    sampling: AtomicBool,
    /// No round starts before this many ms after `base`.
    next_sample_ms: AtomicU64,
    base: Instant,
    /// Smallest PING round trip seen, in microseconds (0: none yet).
    min_rtt_us: AtomicU64,
    kick: Notify,
    driver: AtomicWaker,
    ended: AtomicBool,
}

impl Flow {
    fn new() -> Flow {
        Flow {
            delivered: AtomicU64::new(0),
            want: AtomicU32::new(INITIAL_WINDOW),
            window: AtomicU32::new(INITIAL_WINDOW),
            sampling: AtomicBool::new(false),
            next_sample_ms: AtomicU64::new(0),
            base: Instant::now(),
            min_rtt_us: AtomicU64::new(0),
            kick: Notify::new(),
            driver: AtomicWaker::new(),
            ended: AtomicBool::new(false),
        }
    }

    /// Body bytes reached a caller: count them, and start a PING round if none runs.
    fn delivered(&self, n: usize) {
        self.delivered.fetch_add(n as u64, Relaxed);
        if self.sampling.load(Relaxed) || (self.base.elapsed().as_millis() as u64) < self.next_sample_ms.load(Relaxed) {
            return;
        }
        if !self.sampling.swap(true, Relaxed) {
            self.kick.notify_one();
        }
    }

    fn end(&self) {
        self.ended.store(true, Relaxed);
        self.kick.notify_one();
    }

    fn min_rtt(&self) -> Option<Duration> {
        match self.min_rtt_us.load(Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

/// The PING task of one connection: rounds while bytes flow, windows grown by [`Bdp`].
async fn estimate(flow: Arc<Flow>, mut pings: PingPong) {
    let mut bdp = Bdp::default();
    loop {
        flow.kick.notified().await;
        if flow.ended.load(Relaxed) {
            return;
        }
        let (b0, t0) = (flow.delivered.load(Relaxed), Instant::now());
        if pings.ping(Ping::opaque()).await.is_err() {
            return;
        }
        let rtt = t0.elapsed();
        let delivered = flow.delivered.load(Relaxed) - b0;
        let us = (rtt.as_micros() as u64).max(1);
        let min = flow.min_rtt_us.load(Relaxed);
        if min == 0 || us < min {
            flow.min_rtt_us.store(us, Relaxed);
        }
        let pause = match bdp.sample(delivered) {
            Some(w) => {
                tracing::debug!(window = w, delivered, rtt_us = us, "h2: growing the receive windows");
                flow.want.store(w, Relaxed);
                flow.driver.wake();
                Duration::ZERO
            }
            None => SAMPLE_PAUSE,
        };
        flow.next_sample_ms.store((flow.base.elapsed() + pause).as_millis() as u64, Relaxed);
        flow.sampling.store(false, Relaxed);
    }
}

/// Runs one connection: polls `h2`'s connection future, applies the windows the PING task
/// asks for, and publishes the server's stream limit.
async fn drive<T>(
    mut conn: H2Connection<T, Bytes>,
    flow: Arc<Flow>,
    limit: Arc<AtomicU32>,
    learned: Arc<AtomicU32>,
) -> Result<(), ::h2::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut applied = INITIAL_WINDOW;
    std::future::poll_fn(|cx| {
        flow.driver.register(cx.waker());
        let want = flow.want.load(Relaxed);
        if want > applied {
            conn.set_target_window_size(want);
            // Fails while an earlier SETTINGS awaits its ACK; the ACK wakes this poll.
            if conn.set_initial_window_size(want).is_ok() {
                applied = want;
                flow.window.store(want, Relaxed);
            }
        }
        let r = Pin::new(&mut conn).poll(cx);
        // usize::MAX until the server's SETTINGS arrive (or when it sets no limit).
        let n = conn.max_concurrent_send_streams();
        if n < u32::MAX as usize {
            let n = (n as u32).max(1);
            if limit.swap(n, Relaxed) != n {
                learned.store(n, Relaxed);
            }
        }
        r
    })
    .await
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

    /// Open connections' receive windows (bytes), in opening order.
    pub fn receive_windows(&self) -> Vec<u32> {
        self.inner.state.lock().unwrap().conns.iter().map(|c| c.flow.window.load(Relaxed)).collect()
    }

    /// The smallest PING round trip any open connection measured.
    pub fn min_rtt(&self) -> Option<Duration> {
        let st = self.inner.state.lock().unwrap();
        st.conns.iter().map(|c| c.flow.min_rtt_us.load(Relaxed)).filter(|&us| us > 0).min().map(Duration::from_micros)
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
            ..TransportStats::default()
        }
    }

    fn name(&self) -> &'static str {
        "h2"
    }

    /// Streams share a connection as pipelined requests do: the same depth per place
    /// (`pipeline_depth`); streams past the server's limit wait in `h2` (module note).
    fn small_depth(&self) -> usize {
        self.inner.config.pipeline_depth.max(1)
    }
}

/// A stream's claim on its connection; dropping it ends the stream's count.
struct StreamSlot {
    conn: Arc<Conn>,
    lane: Lane,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.conn.in_flight.fetch_sub(1, Relaxed);
        if self.lane == Lane::Bulk {
            self.conn.bulk_in_flight.fetch_sub(1, Relaxed);
        }
        *self.conn.last_used.lock().unwrap() = Instant::now();
    }
}

impl BodyGuard for StreamSlot {
    fn data(&mut self, n: usize) {
        self.conn.bytes.fetch_add(n as u64, Relaxed);
        self.conn.flow.delivered(n);
    }

    fn finished(self: Box<Self>) {}
}

/// How an attempt failed.
enum Failure {
    /// Never reached the server (the connection was gone or refused a new stream before
    /// it was sent): safe to send again whatever the method, with the body untouched.
    Unsent(RequestBody, WireError),
    /// REFUSED_STREAM: the server did not process it (RFC 9113 section 8.7).
    Refused(WireError),
    /// GOAWAY or the connection closed before a response.
    ConnectionGone(WireError),
    Other(WireError),
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

    /// Closes the current window if it is at least `window` long ([`meter_window`]).
    pub fn sample(&mut self, now: Instant, window: Duration, bytes: u64, streams: usize) {
        let dt = now.saturating_duration_since(self.start);
        if dt < window {
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

    /// At least one window closed: the connection's rate is known.
    pub fn is_measured(&self) -> bool {
        self.last.is_some()
    }
}

/// The saturation rule: more streams than the window before, yet less than
/// [`GROWTH_FACTOR`] more bytes/s, at a rate worth measuring.
pub fn saturated(prev: Window, cur: Window) -> bool {
    cur.streams > prev.streams && prev.rate >= MIN_METERED_RATE && cur.rate < prev.rate * GROWTH_FACTOR
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
        let flow = Arc::new(Flow::new());
        let (let_go, released) = tokio::sync::oneshot::channel();
        let (inner, limit2, closed2, flow2) = (self.clone(), stream_limit.clone(), closed.clone(), flow.clone());
        let task = tokio::spawn(async move {
            let opened = match existing {
                Some(c) => Ok(c),
                None => inner.connector.connect().await.map_err(|e| OpenError {
                    kind: e.kind(),
                    retry: e.retry(),
                    message: e.detail(),
                }),
            };
            let r = match opened {
                Ok(c) => inner.handshake(c, limit2, closed2.clone(), flow2, released).await,
                Err(e) => Err(e),
            };
            if r.is_err() {
                closed2.store(true, Relaxed);
            }
            r
        });
        let ready = async move {
            task.await.unwrap_or_else(|e| {
                Err(OpenError {
                    kind: ErrorKind::Connect,
                    retry: RetrySafety::Always,
                    message: format!("connection task failed: {e}"),
                })
            })
        }
        .boxed()
        .shared();
        Arc::new(Conn {
            ready,
            in_flight: AtomicUsize::new(0),
            bulk_in_flight: AtomicUsize::new(0),
            stream_limit,
            closed,
            bytes: Arc::new(AtomicU64::new(0)),
            requests: AtomicU64::new(0),
            meter: Mutex::new(Meter::new(Instant::now())),
            last_used: Mutex::new(Instant::now()),
            flow,
            _let_go: let_go,
        })
    }

    async fn handshake(
        self: Arc<Self>,
        conn: crate::conn::Connection,
        limit: Arc<AtomicU32>,
        closed: Arc<AtomicBool>,
        flow: Arc<Flow>,
        released: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(Sender, u64), OpenError> {
        if self.config.endpoint.scheme == Scheme::Https && !conn.alpn_h2 {
            return Err(OpenError {
                kind: ErrorKind::Protocol,
                retry: RetrySafety::Never,
                message: format!("{} did not choose h2 in TLS ALPN", self.config.endpoint.authority()),
            });
        }
        let (sender, mut connection) = ::h2::client::Builder::new()
            .initial_window_size(INITIAL_WINDOW)
            .initial_connection_window_size(INITIAL_WINDOW)
            .max_frame_size(MAX_FRAME_SIZE)
            .max_send_buffer_size(MAX_SEND_BUF)
            .handshake::<_, Bytes>(conn.io)
            .await
            .map_err(|e| OpenError {
                kind: ErrorKind::Protocol,
                retry: RetrySafety::Never,
                message: format!("HTTP/2 handshake: {e}"),
            })?;
        self.opened.fetch_add(1, Relaxed);
        self.open.fetch_add(1, Relaxed);
        if let Some(pings) = connection.ping_pong() {
            tokio::spawn(estimate(flow.clone(), pings));
        }
        let (open, learned) = (self.open.clone(), self.learned_limit.clone());
        tokio::spawn(async move {
            // The connection runs until it ends by itself (the peer's GOAWAY or close, an
            // error) or until the transport lets go of its entry; then `h2` closes it
            // gracefully once its handles are gone, given CLOSE_GRACE to do so. Dropping
            // the connection drops its socket: closed then, whatever the peer does.
            let r = {
                let driving = drive(connection, flow.clone(), limit, learned);
                tokio::pin!(driving);
                tokio::select! {
                    r = &mut driving => r,
                    _ = released => match tokio::time::timeout(CLOSE_GRACE, &mut driving).await {
                        Ok(r) => r,
                        Err(_) => {
                            tracing::debug!(
                                "h2: a connection let go of did not close within {CLOSE_GRACE:?}; closing its socket"
                            );
                            Ok(())
                        }
                    },
                }
            };
            if let Err(e) = r {
                tracing::debug!("h2 connection ended: {e}");
            }
            flow.end();
            closed.store(true, Relaxed);
            open.fetch_sub(1, Relaxed);
        });
        Ok((sender, conn.id))
    }

    /// Chooses the connection for a new stream of `lane` (opening one when the rules say
    /// so) and counts the stream on it.
    ///
    /// - Within its lane, a new stream goes to the open connection with the fewest streams
    ///   in flight among those below their stream limit and not saturated (see below).
    /// - The stream limit is the server's SETTINGS_MAX_CONCURRENT_STREAMS as `h2` last
    ///   acknowledged it; until the server's SETTINGS arrive, the limit another connection to
    ///   the same endpoint learned, else (and when the server sets none)
    ///   [`DEFAULT_STREAM_LIMIT`].
    /// - Another connection is opened, up to `max_connections`, when every connection is at
    ///   its limit, or when every connection is saturated. A connection is *saturated* when,
    ///   over its last measurement window, it carried more streams than in the window before
    ///   but its bytes/s (both directions) grew by less than [`GROWTH_FACTOR`]: more streams
    ///   did not bring more bytes, so the connection (its windows or its TCP path) is the
    ///   bottleneck. The window is [`METER_WINDOW_RTTS`] of the connection's PING-measured
    ///   round trips ([`meter_window`]: 20 ms on loopback, 440 ms across the Atlantic;
    ///   [`METER_WINDOW`] until a PING has returned), so growth is judged per round trip, as
    ///   TCP and the window rule grow, and not per fixed interval. Windows are sampled when a
    ///   stream is placed; rates under [`MIN_METERED_RATE`] are never called saturated
    ///   (small-object traffic waits on first bytes, not on bandwidth). After opening a
    ///   connection for this reason, the next one waits two of its windows so the first can
    ///   ramp up.
    /// - A burst of bulk streams comes before any measurement: until its meter has closed a
    ///   window, a connection takes at most [`UNPROVEN_BULK_STREAMS`] bulk streams, and the
    ///   next bulk stream opens another connection (under the cap). Without this a burst of
    ///   64 workers shared one connection for as long as none of them finished, since the
    ///   saturation rule only runs when a stream is placed.
    fn place(self: &Arc<Self>, lane: Lane) -> StreamSlot {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap();
        let idle_timeout = self.config.idle_timeout;
        st.conns.retain(|c| {
            !c.is_closed() && (c.in_flight.load(Relaxed) > 0 || c.last_used.lock().unwrap().elapsed() < idle_timeout)
        });
        for c in &st.conns {
            c.sample(now);
        }
        let open_ok = st.conns.len() < self.config.max_connections;
        let below_limit = |c: &&Arc<Conn>| c.in_flight.load(Relaxed) < c.limit();
        let in_lane = |c: &&Arc<Conn>| {
            let bulk = c.bulk_in_flight.load(Relaxed);
            match lane {
                Lane::Small => bulk == 0,
                Lane::Bulk => bulk > 0 || c.in_flight.load(Relaxed) == 0,
            }
        };
        // A bulk stream also needs a connection that takes one more (`takes_bulk`).
        let fits = |c: &&Arc<Conn>| in_lane(c) && (lane == Lane::Small || c.takes_bulk());
        let pick = |lane_only: bool| {
            st.conns
                .iter()
                .filter(below_limit)
                .filter(|c| !lane_only || fits(c))
                .min_by_key(|c| (c.saturated(), c.in_flight.load(Relaxed)))
                .cloned()
        };
        // At the cap, a stream shares another lane's connection rather than wait.
        let best = pick(true).or_else(|| if open_ok { None } else { pick(false) });
        let open_new = match &best {
            None => open_ok,
            Some(c) => {
                let cool = st.last_throughput_open.is_none_or(|t| now.saturating_duration_since(t) >= c.window() * 2);
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
                None => st
                    .conns
                    .iter()
                    .min_by_key(|c| c.in_flight.load(Relaxed))
                    .cloned()
                    .expect("at the cap, so connections exist"),
            }
        };
        conn.in_flight.fetch_add(1, Relaxed);
        if lane == Lane::Bulk {
            conn.bulk_in_flight.fetch_add(1, Relaxed);
        }
        StreamSlot { conn, lane }
    }

    fn forget(&self, conn: &Arc<Conn>) {
        conn.closed.store(true, Relaxed);
        self.state.lock().unwrap().conns.retain(|c| !Arc::ptr_eq(c, conn));
    }

    async fn send(self: Arc<Self>, req: Request) -> Result<Response, WireError> {
        let started = Instant::now();
        let idempotent = req.is_idempotent();
        let lane = lane(&req);
        let Request { method, path_and_query, mut headers, body, .. } = req;
        // HTTP/2 carries the authority in :authority (RFC 9113 section 8.3.1).
        headers.remove(HOST);
        set_content_length(&method, &mut headers, &body);
        let scheme = match self.config.endpoint.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        let uri: http::Uri =
            format!("{scheme}://{}{path_and_query}", self.config.endpoint.authority()).parse().map_err(|e| {
                WireError::config(format!("'{path_and_query}' is not a valid request target")).with_source(e)
            })?;
        let head_request = method == http::Method::HEAD;
        let mut body = body;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let slot = self.place(lane);
            let conn = slot.conn.clone();
            let (sender, id) = match conn.ready.clone().await {
                Ok(s) => s,
                Err(e) => {
                    self.forget(&conn);
                    return Err(WireError::new(e.kind, e.message).with_retry(e.retry));
                }
            };
            let reused = conn.requests.fetch_add(1, Relaxed) > 0;
            let replay = body.try_clone();
            let mut head = http::Request::new(());
            *head.method_mut() = method.clone();
            *head.uri_mut() = uri.clone();
            *head.headers_mut() = headers.clone();
            self.sent.fetch_add(1, Relaxed);
            let on_wire = Instant::now();
            let failure = match self.attempt(sender, head, body, &conn).await {
                Ok((resp, recv)) => {
                    let meta = ResponseMeta {
                        protocol: Protocol::Http2,
                        connection_id: id,
                        reused_connection: reused,
                        time_to_head: started.elapsed(),
                        head_latency: Some(on_wire.elapsed()),
                    };
                    let stall = StallClock::new(self.config.response_timeout);
                    return Ok(into_response(resp, recv, head_request, slot, meta, stall));
                }
                Err(f) => f,
            };
            drop(slot);
            let (again, next_body, err) = match failure {
                Failure::Unsent(unsent, e) => {
                    self.sent.fetch_sub(1, Relaxed);
                    self.forget(&conn);
                    (true, Some(unsent), e)
                }
                Failure::Refused(e) => (true, replay, e),
                Failure::ConnectionGone(e) => {
                    self.forget(&conn);
                    (idempotent, replay, e)
                }
                Failure::Other(e) => {
                    if e.kind() == ErrorKind::Timeout {
                        // A stream that made no progress for the whole time-out: its
                        // connection may be dead (a cut link says nothing), so new
                        // streams, this request's retry included, go to another one.
                        self.forget(&conn);
                    }
                    (false, None, e)
                }
            };
            match next_body {
                Some(b) if again && attempts < MAX_ATTEMPTS => {
                    tracing::debug!("h2: re-sending {method} {path_and_query} on another connection: {err}");
                    self.resent.fetch_add(1, Relaxed);
                    body = b;
                }
                _ => return Err(err),
            }
        }
    }

    /// One try on one connection: open a stream, send the head and body, wait for the
    /// response head (time-out counted from the body's last progress).
    async fn attempt(
        &self,
        sender: Sender,
        head: http::Request<()>,
        body: RequestBody,
        conn: &Arc<Conn>,
    ) -> Result<(http::response::Parts, RecvStream), Failure> {
        let limit = self.config.response_timeout;
        // Waits while the connection is at the server's stream limit.
        let mut sender = match sender.ready().await {
            Ok(s) => s,
            Err(e) => {
                return Err(Failure::Unsent(
                    body,
                    WireError::new(ErrorKind::Reset, "the HTTP/2 connection closed before the stream opened")
                        .with_source(e),
                ))
            }
        };
        let end = body.is_empty();
        let (response, tx) = match sender.send_request(head, end) {
            Ok(x) => x,
            Err(e) => {
                return Err(Failure::Unsent(
                    body,
                    WireError::new(ErrorKind::Reset, "the HTTP/2 connection would not open a stream").with_source(e),
                ))
            }
        };
        let progress = Progress::new();
        progress.touch();
        let mut pump = (!end).then(|| Box::pin(pump(tx, body, conn.bytes.clone(), progress.clone())));
        tokio::pin!(response);
        let head = loop {
            tokio::select! {
                r = async { pump.as_mut().expect("only polled while Some").await }, if pump.is_some() => {
                    pump = None;
                    if let Err(e) = r {
                        return Err(Failure::Other(e));
                    }
                }
                r = await_head(&mut response, limit, &progress) => match r {
                    None => return Err(Failure::Other(timeout_error(limit))),
                    Some(r) => break r,
                },
            }
        };
        // The server may answer before the body is all sent; the rest still goes out.
        if let Some(p) = pump {
            tokio::spawn(p);
        }
        match head {
            Ok(resp) => Ok(resp.into_parts()),
            Err(e) => Err(classify(e)),
        }
    }
}

/// Sends a request body within the stream's flow-control capacity; a failure resets the
/// stream (CANCEL) so the server does not take a short body as complete.
async fn pump(
    mut tx: SendStream<Bytes>,
    body: RequestBody,
    counter: Arc<AtomicU64>,
    progress: Progress,
) -> Result<(), WireError> {
    let r = match body {
        RequestBody::Empty => {
            tx.send_data(Bytes::new(), true).map_err(|e| body_error("the request could not be ended", e))
        }
        RequestBody::Full(b) => send_all(&mut tx, b, true, &counter, &progress).await,
        RequestBody::Stream { len, mut stream } => {
            let mut sent = 0u64;
            let mut r = Ok(());
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(c) if sent + c.len() as u64 > len => {
                        r = Err(WireError::new(
                            ErrorKind::Config,
                            format!("the request body stream is longer than its declared {len} bytes"),
                        ));
                        break;
                    }
                    Ok(c) => {
                        sent += c.len() as u64;
                        if let Err(e) = send_all(&mut tx, c, false, &counter, &progress).await {
                            r = Err(e);
                            break;
                        }
                    }
                    Err(e) => {
                        r =
                            Err(WireError::new(ErrorKind::Reset, "the request body failed while being sent")
                                .with_source(e));
                        break;
                    }
                }
            }
            if r.is_ok() && sent != len {
                r = Err(WireError::new(
                    ErrorKind::Config,
                    format!("the request body stream ended after {sent} of its declared {len} bytes"),
                ));
            }
            match r {
                Ok(()) => tx.send_data(Bytes::new(), true).map_err(|e| body_error("the request could not be ended", e)),
                Err(e) => Err(e),
            }
        }
    };
    if r.is_err() {
        tx.send_reset(Reason::CANCEL);
    }
    r
}

async fn send_all(
    tx: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    counter: &AtomicU64,
    progress: &Progress,
) -> Result<(), WireError> {
    while !data.is_empty() {
        tx.reserve_capacity(data.len().min(MAX_SEND_BUF));
        let cap = match std::future::poll_fn(|cx| tx.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(body_error("the stream closed while its body was being sent", e)),
            None => return Err(WireError::new(ErrorKind::Reset, "the stream closed while its body was being sent")),
        };
        if cap == 0 {
            continue;
        }
        let piece = data.split_to(cap.min(data.len()));
        let n = piece.len();
        tx.send_data(piece, end && data.is_empty())
            .map_err(|e| body_error("the stream closed while its body was being sent", e))?;
        counter.fetch_add(n as u64, Relaxed);
        progress.touch();
    }
    Ok(())
}

fn body_error(what: &str, e: ::h2::Error) -> WireError {
    WireError::new(ErrorKind::Reset, what.to_string()).with_source(e)
}

fn classify(e: ::h2::Error) -> Failure {
    if e.reason() == Some(Reason::REFUSED_STREAM) {
        return Failure::Refused(
            WireError::new(ErrorKind::Reset, "the server refused the stream")
                .with_retry(RetrySafety::Always)
                .with_source(e),
        );
    }
    if e.is_go_away() || e.is_io() {
        return Failure::ConnectionGone(
            WireError::new(ErrorKind::Reset, "the HTTP/2 connection closed before the response head").with_source(e),
        );
    }
    Failure::Other(
        WireError::new(ErrorKind::Reset, "the server reset the stream before the response head").with_source(e),
    )
}

/// Our response from `h2`'s; `head_request` because a response to HEAD, like a 204 or
/// 304, has no body whatever its Content-Length says (RFC 9110 section 6.4.1).
fn into_response(
    parts: http::response::Parts,
    recv: RecvStream,
    head_request: bool,
    slot: StreamSlot,
    meta: ResponseMeta,
    stall: StallClock,
) -> Response {
    let bodiless =
        head_request || parts.status == http::StatusCode::NO_CONTENT || parts.status == http::StatusCode::NOT_MODIFIED;
    let expected = if bodiless {
        Some(0)
    } else {
        parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
    };
    let mut body = H2Body { recv, tally: BodyTally::new(Box::new(slot), expected), stall };
    if bodiless || body.recv.is_end_stream() {
        body.tally.finish();
    }
    Response { status: parts.status, headers: parts.headers, body: ResponseBody::new(body.boxed(), expected), meta }
}

/// A response body pulled at the caller's pace: flow-control capacity is released only
/// as chunks are taken, so the server can never send more than the window ahead.
/// A stream with no data for the stall time-out ends with a time-out error (dropping
/// `recv` resets it), so the GET above resumes with Range, on another connection if this
/// one is gone.
struct H2Body {
    recv: RecvStream,
    tally: BodyTally,
    stall: StallClock,
}

impl Stream for H2Body {
    type Item = Result<Bytes, WireError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.tally.is_done() {
            return Poll::Ready(None);
        }
        loop {
            return match this.recv.poll_data(cx) {
                Poll::Pending if this.stall.expired(cx) => {
                    Poll::Ready(Some(Err(this.tally.stalled(this.stall.limit()))))
                }
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(data))) => {
                    this.stall.progressed();
                    if data.is_empty() {
                        continue;
                    }
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    let end = this.recv.is_end_stream();
                    Poll::Ready(Some(this.tally.data(data, end)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(this.tally.failed(e)))),
                Poll::Ready(None) => Poll::Ready(this.tally.ended().map(Err)),
            };
        }
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
        let w = METER_WINDOW;
        m.sample(t0 + w / 2, w, 1, 1);
        assert!(!m.is_measured());
        m.sample(t0 + w, w, 50_000_000, 2);
        assert!(m.is_measured());
        m.sample(t0 + w * 2, w, 100_000_000, 6);
        assert!(m.is_saturated());
        m.sample(t0 + w * 3, w, 200_000_000, 6);
        assert!(!m.is_saturated());
    }

    #[test]
    fn the_meter_window_is_four_round_trips_within_its_bounds() {
        assert_eq!(meter_window(None), METER_WINDOW, "round trip unknown");
        assert_eq!(meter_window(Some(Duration::from_millis(20))), Duration::from_millis(80));
        assert_eq!(meter_window(Some(Duration::from_micros(50))), MIN_METER_WINDOW, "loopback");
        assert_eq!(meter_window(Some(Duration::from_millis(110))), Duration::from_millis(440), "transatlantic");
        assert_eq!(meter_window(Some(Duration::from_millis(300))), METER_WINDOW, "capped");
        // A 1 ms link (the region preset) judges growth 25 times as often as before.
        let t0 = Instant::now();
        let mut m = Meter::new(t0);
        let w = meter_window(Some(Duration::from_millis(1)));
        m.sample(t0 + w, w, 10_000_000, 4);
        m.sample(t0 + w * 2, w, 20_000_000, 8);
        assert!(m.is_saturated(), "more streams, the same rate, within {:?}", w * 2);
    }

    #[test]
    fn windows_grow_only_while_they_are_the_bottleneck() {
        let mut b = Bdp::default();
        let w0 = INITIAL_WINDOW as u64;
        assert_eq!(b.sample(w0 / 2), None, "half the window in a round trip: the path, not the window, limits");
        assert_eq!(b.sample(w0.div_ceil(3) * 2), Some(INITIAL_WINDOW * 2));
        assert_eq!(b.window(), INITIAL_WINDOW * 2);
        // Doubling per round trip up to the cap, never past it.
        let mut rounds = 0;
        while let Some(w) = b.sample(b.window() as u64) {
            assert!(w <= MAX_WINDOW);
            rounds += 1;
        }
        assert_eq!(b.window(), MAX_WINDOW);
        assert_eq!(rounds, (MAX_WINDOW / (INITIAL_WINDOW * 2)).ilog2() as usize);
        assert_eq!(b.sample(u64::MAX / 4), None);
    }

    #[test]
    fn a_window_grows_to_twice_what_one_round_trip_delivered() {
        let mut b = Bdp::default();
        // More than the window arrived within one PING (the server had bytes in flight
        // from before): size from the measurement, not only by doubling.
        assert_eq!(b.sample(INITIAL_WINDOW as u64 * 3), Some(INITIAL_WINDOW * 6));
    }
}
