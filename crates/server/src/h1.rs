//! HTTP/1.1 server connections, written on `httparse` so that pipelining behaves like a
//! real object store.
//!
//! Why not hyper's server: hyper reads the next pipelined request only after the previous
//! response is written, so a pipelined request's emulated first-byte delay would start
//! late and pipelining could never win. A real object store does the opposite (think time
//! starts when the request arrives; docs/lab/server-emulation.md), which needs a reader
//! that runs ahead of the writer.
//!
//! Each connection is two halves joined by an in-order queue of response slots:
//!
//! ```text
//!   socket ──► reader ──parse head──► spawn handler ──► oneshot ─┐
//!                │   └─ body bytes ──► bounded channel ─► handler │
//!                └──── slot (in request order) ──► queue ──► writer ──► socket
//! ```
//!
//! The reader parses a request head, spawns its handler at once, forwards the body through
//! a small bounded channel (so a slow handler slows the socket: backpressure, never an
//! unbounded buffer), pushes the handler's response slot on the queue and goes on to the
//! next request. The writer takes slots in order, waits for each response, and writes it,
//! pacing bytes to the emulated per-connection rate. The queue holds at most
//! `max_pipeline_depth` slots, which bounds the work one connection can have in flight.
//!
//! Safe requests (GET, HEAD) run in parallel; a PUT, POST or DELETE waits for the
//! requests before it and holds back the ones after it, so pipelined writes and reads of
//! one key take effect in wire order.
//!
//! Slot states: `Queued -> Answered -> Written`; a `Continue` slot writes an interim
//! `100 Continue` before its request's final response (with a body, the 100 waits for
//! the handler's first read of it, and a handler that answers first closes the
//! connection instead). A connection ends when the client
//! closes, a request says `Connection: close`, the head or body is malformed (answered
//! with an S3 error, then closed), a time-out passes, or a fault resets it.

use crate::app::App;
use crate::emulate::Pacer;
use crate::types::{Body, BodyEnd, BodyFault, Protocol, Request, RespBody, Response};
use bytes::{Buf, Bytes, BytesMut};
use ferry_proto::chunked::ChunkedDecoder;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};
use tokio::time::timeout;

/// Most headers accepted in one request.
const MAX_HEADERS: usize = 128;
/// Socket read size.
const READ_CHUNK: usize = 64 * 1024;
/// Body bytes the reader discards after a handler stopped reading before it gives up on
/// the connection (a rejected 5 GiB PUT is not worth reading to the end).
const MAX_DISCARD: u64 = 1024 * 1024;
/// Writer buffer: small pipelined responses are coalesced into one write of this size.
const WRITE_BUFFER: usize = 64 * 1024;
/// A connection that has waited this long for its next request gives back its read and
/// write buffers (64 KiB each) and waits on a small one: 10,000 idle keep-alive
/// connections then hold a few MiB instead of over a GiB (docs/lab/load.md). A busy
/// connection never waits this long, so its buffers are kept. Past it the connection
/// waits on a one-byte read (a 2 KiB one was part of every connection's task, busy or
/// not, as the future holds it inline) and takes its buffer when the byte arrives: one
/// extra `read` per request that follows an idle second.
const IDLE_SHRINK: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a connection closed after its response keeps reading what the client still
/// sends (at most `MAX_DISCARD` bytes of it) before the socket is closed: long enough for
/// a client on a slow path to see the answer and stop, short enough that a refused
/// upload cannot hold a connection. nginx's `lingering_timeout` is 5 s per read.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// A request read and counted in progress (metrics.rs) until dropped: when the writer
/// starts its answer, or with the connection.
struct InProgress(Arc<App>);

impl InProgress {
    fn new(app: &Arc<App>) -> InProgress {
        app.metrics.request_read();
        InProgress(app.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.metrics.request_answering();
    }
}

enum Slot {
    Continue,
    /// A request's answer. `wanted` is set for a request that expects `100 Continue`
    /// with a body: the 100 is written when the handler first reads the body, and never
    /// if the answer comes first (a refusal: the client then need not send the body).
    Answer {
        rx: oneshot::Receiver<Response>,
        wanted: Option<oneshot::Receiver<()>>,
        head_only: bool,
        keep_alive: bool,
        /// Counts the request in `Metrics::requests_in_progress` until its answer starts.
        counted: InProgress,
    },
    /// Boxed: a `Response` is ~180 bytes and every slot of the queue is as large as its
    /// largest variant. tokio's mpsc allocates its first block of 32 slots when the
    /// queue is made, so an unboxed `Response` here cost each connection ~6 KiB for
    /// as long as it lived, idle or not; boxed, the block is ~1 KiB.
    Immediate(Box<Response>),
}

/// Serves one HTTP/1.1 connection until it ends. `initial` holds bytes already read
/// while detecting the protocol; `fd` is the raw socket, used to reset the connection
/// when a fault says so.
pub async fn serve<IO>(io: IO, initial: BytesMut, app: Arc<App>, fd: Option<RawFd>)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (tx, rx) = mpsc::channel(app.limits.max_pipeline_depth.max(1));
    let reader = read_loop(rd, initial, app.clone(), tx);
    let writer = write_loop(wr, rx, app.clone(), fd);
    tokio::pin!(reader);
    tokio::pin!(writer);
    // The writer decides when the connection is over: it drains every queued slot after
    // the reader stops, and if it fails (client gone, fault reset) the reader is dropped.
    // After a final response with `Connection: close` the writer has sent its FIN; the
    // reader then gets a short while to read (and discard, up to `MAX_DISCARD`) what the
    // client was still sending, so that closing with unread bytes does not turn into a
    // reset that could reach the client before it read its answer (the lingering close
    // of Apache and nginx).
    tokio::select! {
        end = &mut writer => {
            if end == WriterEnd::Closed {
                let _ = timeout(LINGER, &mut reader).await;
            }
        }
        _ = &mut reader => { writer.await; }
    }
}

struct Head {
    method: Method,
    raw_path: String,
    raw_query: String,
    headers: HeaderMap,
    keep_alive: bool,
    framing: Framing,
    expect_continue: bool,
}

enum Framing {
    Length(u64),
    Chunked,
}

enum HeadError {
    /// The client closed or went idle between requests: end quietly.
    Closed,
    /// Answer with this S3 error and close.
    Reject(u16, &'static str, String),
}

/// A handler's hold on its connection's order lock (shared or exclusive), released when
/// its response is ready.
type OrderGuard = (Option<OwnedRwLockReadGuard<()>>, Option<OwnedRwLockWriteGuard<()>>);

async fn read_loop<R: AsyncRead>(rd: ReadHalf<R>, mut buf: BytesMut, app: Arc<App>, queue: mpsc::Sender<Slot>) {
    let mut rd = rd;
    let order = Arc::new(RwLock::new(()));
    loop {
        let head = match read_head(&mut rd, &mut buf, &app).await {
            Ok(head) => head,
            Err(HeadError::Closed) => return,
            Err(HeadError::Reject(status, code, message)) => {
                let mut resp = app.error_response(status, code, &message, None);
                resp.close = true;
                let _ = queue.send(Slot::Immediate(Box::new(resp))).await;
                return;
            }
        };
        let arrived = Instant::now();
        let counted = InProgress::new(&app);
        let keep_alive = head.keep_alive;
        let head_only = head.method == Method::HEAD;
        let content_length = match head.framing {
            Framing::Length(n) => Some(n),
            Framing::Chunked => None,
        };
        if content_length.is_some_and(|n| n > app.limits.max_object_bytes) {
            let mut resp = app.error_response(
                413,
                "EntityTooLarge",
                "Your proposed upload exceeds the maximum allowed object size.",
                None,
            );
            resp.close = true;
            let _ = queue.send(Slot::Immediate(Box::new(resp))).await;
            return;
        }
        let has_body = !matches!(head.framing, Framing::Length(0));
        // Every `Expect: 100-continue` gets its interim 100, an empty body's too. RFC 9110
        // section 10.1.1 lets a server skip it when there is no content, but S3 does not,
        // and the AWS CLI's botocore then keeps the skipped request's early final status
        // for the next expecting request on that connection: it misreads that answer and
        // waits out its 60 s read time-out (tests/test_awscli.py's recursive copy). With
        // a body, the 100 waits for the handler to read it (`Slot::Answer::wanted`); a
        // request refused first gets its error instead, with `Connection: close`.
        if head.expect_continue && !has_body && queue.send(Slot::Continue).await.is_err() {
            return;
        }
        let finished = Arc::new(AtomicBool::new(!has_body));
        let (body_tx, body, wanted, verdict) = if has_body {
            let (btx, brx) = mpsc::channel(4);
            let (wanted_tx, wanted_rx) = if head.expect_continue {
                let (t, r) = oneshot::channel();
                (Some(t), Some(r))
            } else {
                (None, None)
            };
            let (verdict_tx, verdict_rx) = oneshot::channel();
            let end = BodyEnd { finished: finished.clone(), verdict: verdict_tx };
            (Some(btx), Body::channel(brx, content_length, wanted_tx, end), wanted_rx, Some(verdict_rx))
        } else {
            (None, Body::empty(), None, None)
        };
        let req = Request {
            method: head.method,
            raw_path: head.raw_path,
            raw_query: head.raw_query,
            headers: head.headers,
            body,
            protocol: Protocol::Http1,
            arrived,
        };
        // RFC 9112 section 9.3.2: only safe requests may be processed in parallel. A
        // safe request shares the connection's order lock; an unsafe one takes it alone,
        // so it runs after every earlier request and before every later one. The reader
        // takes the lock in request order, so the order on the wire is the order of effect.
        let guard: OrderGuard = if req.method == Method::GET || req.method == Method::HEAD {
            (Some(order.clone().read_owned().await), None)
        } else {
            (None, Some(order.clone().write_owned().await))
        };
        let (otx, orx) = oneshot::channel();
        let handler_app = app.clone();
        tokio::spawn(async move {
            let mut resp = handler_app.handle(req).await;
            // Answered without reading the body (a missing bucket, a failed signature):
            // close after the response instead of reading what nobody wants.
            if !finished.load(Ordering::Acquire) {
                resp.close = true;
            }
            drop(guard);
            let _ = otx.send(resp);
        });
        if queue.send(Slot::Answer { rx: orx, wanted, head_only, keep_alive, counted }).await.is_err() {
            return;
        }
        if let Some(btx) = body_tx {
            // Boxed, as is `write_response`: a connection's task is as large as the
            // largest state of its future, and these two are most of it; boxed, they
            // are allocated per request instead of held by every idle connection.
            match Box::pin(forward_body(&mut rd, &mut buf, &app, head.framing, btx)).await {
                Forwarded::Complete => {}
                Forwarded::Abandon => return,
            }
        }
        // A handler that stopped before the end of its body answers with
        // `Connection: close` (above): read no request after it, so that nothing the
        // writer will never answer takes effect.
        if let Some(verdict) = verdict {
            if verdict.await != Ok(true) {
                return;
            }
        }
        if !keep_alive {
            return;
        }
    }
}

async fn read_more<R: AsyncRead>(rd: &mut ReadHalf<R>, buf: &mut BytesMut) -> io::Result<usize> {
    buf.reserve(READ_CHUNK);
    rd.read_buf(buf).await
}

async fn read_head<R: AsyncRead>(rd: &mut ReadHalf<R>, buf: &mut BytesMut, app: &App) -> Result<Head, HeadError> {
    let limits = &app.limits;
    // The head's clock starts at its first byte, not at the end of the previous request:
    // a keep-alive connection may idle up to `idle_timeout` first.
    let mut started: Option<Instant> = None;
    loop {
        // Tolerate stray CRLFs between requests (RFC 9112 section 2.2).
        while buf.starts_with(b"\r\n") {
            buf.advance(2);
        }
        if !buf.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(buf) {
                Ok(httparse::Status::Complete(len)) => {
                    if len > limits.max_header_bytes {
                        return Err(HeadError::Reject(
                            431,
                            "RequestHeaderSectionTooLarge",
                            "Your request header section is too large.".into(),
                        ));
                    }
                    let head = build_head(&req)?;
                    buf.advance(len);
                    return Ok(head);
                }
                Ok(httparse::Status::Partial) => {
                    if buf.len() > limits.max_header_bytes {
                        return Err(HeadError::Reject(
                            431,
                            "RequestHeaderSectionTooLarge",
                            "Your request header section is too large.".into(),
                        ));
                    }
                }
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(HeadError::Reject(
                        431,
                        "RequestHeaderSectionTooLarge",
                        "Your request has too many headers.".into(),
                    ));
                }
                Err(e) => {
                    return Err(HeadError::Reject(400, "BadRequest", format!("Malformed HTTP request: {e}.")));
                }
            }
        }
        // Between requests the idle time-out applies; inside a head, the header time-out,
        // counted from the head's first byte however slowly the rest trickles in.
        if buf.is_empty() {
            match read_idle(rd, buf, limits.idle_timeout).await {
                Ok(true) => continue,
                Ok(false) | Err(_) => return Err(HeadError::Closed),
            }
        }
        let started = *started.get_or_insert_with(Instant::now);
        let limit = limits.header_timeout.saturating_sub(started.elapsed());
        match timeout(limit, read_more(rd, buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err(HeadError::Closed),
            Ok(Ok(_)) => {}
            Err(_) => {
                return Err(HeadError::Reject(
                    400,
                    "RequestTimeout",
                    "Your socket connection to the server was not read from or written to within the timeout period."
                        .into(),
                ))
            }
        }
    }
}

/// Waits up to `idle` for the first bytes of the next request into the empty `buf`:
/// first with the buffer as it is, then, past `IDLE_SHRINK`, with the buffer given back
/// and a one-byte read. Ok(true) once bytes arrived; Ok(false) on close or time-out.
async fn read_idle<R: AsyncRead>(
    rd: &mut ReadHalf<R>,
    buf: &mut BytesMut,
    idle: std::time::Duration,
) -> io::Result<bool> {
    let first = idle.min(IDLE_SHRINK);
    match timeout(first, read_more(rd, buf)).await {
        Ok(Ok(0)) => return Ok(false),
        Ok(Ok(_)) => return Ok(true),
        Ok(Err(e)) => return Err(e),
        Err(_) if first >= idle => return Ok(false),
        Err(_) => {}
    }
    *buf = BytesMut::new();
    let mut first_byte = [0u8; 1];
    match timeout(idle - first, rd.read(&mut first_byte)).await {
        Ok(Ok(0)) | Err(_) => Ok(false),
        Ok(Ok(_)) => {
            buf.extend_from_slice(&first_byte);
            Ok(true)
        }
        Ok(Err(e)) => Err(e),
    }
}

fn build_head(req: &httparse::Request) -> Result<Head, HeadError> {
    let bad = |msg: &str| HeadError::Reject(400, "BadRequest", msg.to_string());
    let method_str = req.method.ok_or_else(|| bad("Missing method."))?;
    let target = req.path.ok_or_else(|| bad("Missing request target."))?;
    let version = req.version.unwrap_or(1);
    if method_str == "PRI" {
        return Err(HeadError::Reject(
            505,
            "HttpVersionNotSupported",
            "HTTP/2 is not offered on this endpoint.".into(),
        ));
    }
    let method = match method_str {
        "GET" => Method::GET,
        "HEAD" => Method::HEAD,
        "PUT" => Method::PUT,
        "POST" => Method::POST,
        "DELETE" => Method::DELETE,
        "OPTIONS" => Method::OPTIONS,
        _ => return Err(HeadError::Reject(501, "NotImplemented", format!("Method {method_str} is not implemented."))),
    };
    // Absolute-form targets (proxies) are accepted by taking their path.
    let target = match target.find("://") {
        Some(i) => &target[target[i + 3..].find('/').map(|j| i + 3 + j).unwrap_or(target.len())..],
        None => target,
    };
    if !target.starts_with('/') {
        return Err(bad("The request target must start with '/'."));
    }
    let (raw_path, raw_query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    };
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| bad("Invalid header name."))?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| bad("Invalid header value."))?;
        headers.append(name, value);
    }
    let connection = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect::<Vec<_>>();
    let keep_alive = if version == 0 {
        connection.iter().any(|t| t == "keep-alive")
    } else {
        !connection.iter().any(|t| t == "close")
    };
    let te = headers.get(http::header::TRANSFER_ENCODING);
    let cl: Vec<_> = headers.get_all(http::header::CONTENT_LENGTH).iter().collect();
    let framing = if let Some(te) = te {
        // RFC 9112 section 6.1: chunked must be last; with Content-Length too, reject
        // (request smuggling guard).
        if !cl.is_empty() {
            return Err(bad("Both Transfer-Encoding and Content-Length were sent."));
        }
        let te = te.to_str().unwrap_or("").to_ascii_lowercase();
        if te.trim() != "chunked" {
            return Err(HeadError::Reject(
                501,
                "NotImplemented",
                format!("Transfer-Encoding {te} is not implemented."),
            ));
        }
        Framing::Chunked
    } else if cl.is_empty() {
        Framing::Length(0)
    } else {
        let first = cl[0].to_str().ok().and_then(|s| s.trim().parse::<u64>().ok());
        let all_same = cl.iter().all(|v| v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) == first);
        match (first, all_same) {
            (Some(n), true) => Framing::Length(n),
            _ => return Err(HeadError::Reject(400, "BadRequest", "Invalid Content-Length.".into())),
        }
    };
    let expect_continue = headers
        .get(http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    Ok(Head { method, raw_path, raw_query, headers, keep_alive, framing, expect_continue })
}

enum Forwarded {
    /// The body was read to its end; the next request may follow.
    Complete,
    /// The connection cannot continue (error, time-out, or too much to discard).
    Abandon,
}

/// Reads one request body from the socket and hands it to the handler.
async fn forward_body<R: AsyncRead>(
    rd: &mut ReadHalf<R>,
    buf: &mut BytesMut,
    app: &App,
    framing: Framing,
    tx: mpsc::Sender<io::Result<Bytes>>,
) -> Forwarded {
    let mut tx = Some(tx);
    let mut discarded = 0u64;
    // Sends a piece to the handler; once the handler has stopped listening, counts it as
    // discarded instead. Returns false when too much has been discarded.
    async fn deliver(
        tx: &mut Option<mpsc::Sender<io::Result<Bytes>>>,
        discarded: &mut u64,
        piece: Bytes,
        app: &App,
    ) -> bool {
        app.metrics.bytes_in.fetch_add(piece.len() as u64, Relaxed);
        if let Some(sender) = tx {
            let len = piece.len() as u64;
            if sender.send(Ok(piece)).await.is_err() {
                *tx = None;
                *discarded += len;
            }
        } else {
            *discarded += piece.len() as u64;
        }
        *discarded <= MAX_DISCARD
    }
    let fail = |tx: Option<mpsc::Sender<io::Result<Bytes>>>, e: io::Error| {
        if let Some(tx) = tx {
            let _ = tx.try_send(Err(e));
        }
        Forwarded::Abandon
    };
    let mut clock = BodyClock::new(&app.limits);
    match framing {
        Framing::Length(mut remaining) => {
            while remaining > 0 {
                if buf.is_empty() {
                    if let Err(e) = clock.read(rd, buf).await {
                        return fail(tx, e);
                    }
                }
                let take = (buf.len() as u64).min(remaining) as usize;
                let piece = buf.split_to(take).freeze();
                remaining -= take as u64;
                if !deliver(&mut tx, &mut discarded, piece, app).await {
                    return Forwarded::Abandon;
                }
            }
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            let mut out = Vec::new();
            loop {
                if let Err(e) = decoder.decode(buf, &mut out) {
                    return fail(tx, io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
                }
                for piece in out.drain(..) {
                    if !deliver(&mut tx, &mut discarded, piece, app).await {
                        return Forwarded::Abandon;
                    }
                }
                if decoder.is_done() {
                    break;
                }
                if let Err(e) = clock.read(rd, buf).await {
                    return fail(tx, e);
                }
            }
        }
    }
    Forwarded::Complete
}

/// The time a request body may take on the socket (Apache's mod_reqtimeout `body=20,
/// MinRate=500` rule): no read may wait longer than `body_timeout`, and all reads together
/// may wait `body_timeout` plus one second per `body_min_rate` bytes received, so a body
/// trickled a byte at a time still ends. Only time spent waiting on the socket counts:
/// time the reader spends held back by a slow handler (backpressure) is ours, not the
/// client's.
struct BodyClock(crate::types::BodyBudget);

impl BodyClock {
    fn new(limits: &crate::config::Limits) -> BodyClock {
        BodyClock(crate::types::BodyBudget::new(limits))
    }

    /// Reads more body bytes into `buf`; an error when the client closed, the read
    /// failed, or the body's time ran out.
    async fn read<R: AsyncRead>(&mut self, rd: &mut ReadHalf<R>, buf: &mut BytesMut) -> io::Result<()> {
        let t0 = Instant::now();
        let read = timeout(self.0.limit(), read_more(rd, buf)).await;
        self.0.spent(t0.elapsed(), 0);
        match read {
            Ok(Ok(0)) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the client closed the connection before the body ended",
            )),
            Ok(Ok(n)) => {
                self.0.spent(std::time::Duration::ZERO, n as u64);
                Ok(())
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "the request body stalled")),
        }
    }
}

async fn write_loop<W: AsyncWrite>(
    wr: WriteHalf<W>,
    mut queue: mpsc::Receiver<Slot>,
    app: Arc<App>,
    fd: Option<RawFd>,
) -> WriterEnd {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, wr);
    let mut pacer = app.emulator.emulation().rate_per_conn.map(Pacer::new);
    let mut date = DateCache::default();
    loop {
        // Flush what is buffered before waiting on anything.
        let slot = match queue.try_recv() {
            Ok(slot) => slot,
            Err(_) => {
                if out.flush().await.is_err() {
                    return WriterEnd::Failed;
                }
                match timeout(IDLE_SHRINK, queue.recv()).await {
                    Ok(Some(slot)) => slot,
                    Ok(None) => break,
                    Err(_) => {
                        // Idle: give the buffer back while waiting (`IDLE_SHRINK`).
                        let wr = out.into_inner();
                        let next = queue.recv().await;
                        out = BufWriter::with_capacity(WRITE_BUFFER, wr);
                        match next {
                            Some(slot) => slot,
                            None => break,
                        }
                    }
                }
            }
        };
        let (resp, head_only, keep_alive) = match slot {
            Slot::Continue => {
                if write_continue(&mut out).await.is_err() {
                    return WriterEnd::Failed;
                }
                continue;
            }
            Slot::Immediate(resp) => (*resp, false, false),
            Slot::Answer { mut rx, wanted, head_only, keep_alive, counted } => {
                let resp = match rx.try_recv() {
                    Ok(resp) => Ok(resp),
                    Err(oneshot::error::TryRecvError::Empty) => {
                        if out.flush().await.is_err() {
                            return WriterEnd::Failed;
                        }
                        match wanted {
                            None => rx.await.map_err(|_| ()),
                            // The 100 goes out only once the handler reads the body; an
                            // answer first means the body is not wanted.
                            Some(mut wanted) => tokio::select! {
                                biased;
                                resp = &mut rx => resp.map_err(|_| ()),
                                want = &mut wanted => {
                                    if want.is_ok() && write_continue(&mut out).await.is_err() {
                                        return WriterEnd::Failed;
                                    }
                                    rx.await.map_err(|_| ())
                                }
                            },
                        }
                    }
                    Err(oneshot::error::TryRecvError::Closed) => Err(()),
                };
                let resp =
                    resp.unwrap_or_else(|_| app.error_response(500, "InternalError", "The handler failed.", None));
                drop(counted);
                (resp, head_only, keep_alive)
            }
        };
        let close = resp.close || !keep_alive;
        match Box::pin(write_response(&mut out, resp, head_only, close, &mut pacer, &app, &mut date)).await {
            Ok(WriteEnd::Done) if !close => {}
            Ok(WriteEnd::Done) => break,
            Ok(WriteEnd::Reset) => {
                let _ = out.flush().await;
                if let Some(fd) = fd {
                    reset_on_close(fd);
                }
                return WriterEnd::Failed;
            }
            Err(_) => return WriterEnd::Failed,
        }
    }
    let _ = out.flush().await;
    let _ = out.shutdown().await;
    WriterEnd::Closed
}

/// How the writer ended: after its last response and a FIN (`Closed`), or on a write
/// error or an injected reset (`Failed`: nothing more to say to the client).
#[derive(Clone, Copy, PartialEq, Eq)]
enum WriterEnd {
    Closed,
    Failed,
}

async fn write_continue<W: AsyncWrite + Unpin>(out: &mut W) -> io::Result<()> {
    out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    out.flush().await
}

enum WriteEnd {
    Done,
    Reset,
}

async fn write_response<W: AsyncWrite + Unpin>(
    out: &mut W,
    resp: Response,
    head_only: bool,
    close: bool,
    pacer: &mut Option<Pacer>,
    app: &App,
    date: &mut DateCache,
) -> io::Result<WriteEnd> {
    let mut head = Vec::with_capacity(512);
    let reason = http::StatusCode::from_u16(resp.status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    head.extend_from_slice(format!("HTTP/1.1 {} {}\r\n", resp.status, reason).as_bytes());
    for (name, value) in resp.headers.iter() {
        if name == http::header::CONTENT_LENGTH || name == http::header::CONNECTION {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    let no_body_status = resp.status == 304 || resp.status == 204 || resp.status < 200;
    if !no_body_status {
        head.extend_from_slice(format!("Content-Length: {}\r\n", resp.announced_length()).as_bytes());
    }
    head.extend_from_slice(b"Date: ");
    head.extend_from_slice(date.get().as_bytes());
    head.extend_from_slice(b"\r\nServer: ferry\r\n");
    if close {
        head.extend_from_slice(b"Connection: close\r\n");
    }
    head.extend_from_slice(b"\r\n");
    out.write_all(&head).await?;
    if head_only || no_body_status {
        return Ok(WriteEnd::Done);
    }
    let mut sent = 0u64;
    let mut fault = resp.fault;
    let mut stream = match resp.body {
        RespBody::Empty => return Ok(WriteEnd::Done),
        RespBody::Full(bytes) => futures_util::stream::once(async move { Ok(bytes) }).boxed(),
        RespBody::Stream { stream, .. } => stream,
    };
    if fault.is_none() && pacer.is_none() {
        return write_gathered(out, stream, app).await;
    }
    while let Some(chunk) = stream.next().await {
        let mut chunk = chunk?;
        while !chunk.is_empty() {
            // Split the chunk at a fault point, if one falls inside it.
            let cut = match fault {
                Some(BodyFault::Reset { after_bytes }) | Some(BodyFault::Stall { after_bytes, .. })
                    if after_bytes < sent + chunk.len() as u64 =>
                {
                    Some((after_bytes - sent) as usize)
                }
                _ => None,
            };
            let piece = match cut {
                Some(n) => chunk.split_to(n),
                None => std::mem::take(&mut chunk),
            };
            if !piece.is_empty() {
                if let Some(p) = pacer.as_mut() {
                    p.wait(piece.len()).await;
                }
                out.write_all(&piece).await?;
                sent += piece.len() as u64;
                app.metrics.bytes_out.fetch_add(piece.len() as u64, Relaxed);
            }
            if cut.is_some() {
                match fault.take() {
                    Some(BodyFault::Reset { .. }) => return Ok(WriteEnd::Reset),
                    Some(BodyFault::Stall { pause, .. }) => {
                        out.flush().await?;
                        tokio::time::sleep(pause).await;
                    }
                    None => {}
                }
            }
        }
    }
    Ok(WriteEnd::Done)
}

/// Most bytes gathered into one vectored write: 1 MiB, eight times iperf3's default
/// 128 KiB send size, so a large body costs few syscalls however small its chunks are.
const GATHER_BYTES: usize = 1024 * 1024;
/// Most chunks gathered into one vectored write (Linux IOV_MAX is 1024).
const GATHER_CHUNKS: usize = 64;

/// Writes an unshaped body, gathering the chunks that are ready at once into vectored
/// writes (zero-copy slices of the synthetic pool or of stored objects go straight to the
/// socket). Used when no pacing or fault applies.
async fn write_gathered<W: AsyncWrite + Unpin>(
    out: &mut W,
    mut stream: futures_util::stream::BoxStream<'static, io::Result<Bytes>>,
    app: &App,
) -> io::Result<WriteEnd> {
    use futures_util::FutureExt;
    let mut batch: Vec<Bytes> = Vec::with_capacity(GATHER_CHUNKS);
    let mut ended = false;
    while !ended {
        // Wait for one chunk, then take whatever else is ready without waiting.
        match stream.next().await {
            None => break,
            Some(c) => batch.push(c?),
        }
        let mut bytes = batch[0].len();
        while bytes < GATHER_BYTES && batch.len() < GATHER_CHUNKS {
            match stream.next().now_or_never() {
                Some(Some(c)) => {
                    let c = c?;
                    bytes += c.len();
                    batch.push(c);
                }
                Some(None) => {
                    ended = true;
                    break;
                }
                None => break,
            }
        }
        // Flush what the buffered writer holds (the response head) ahead of the body.
        out.flush().await?;
        let mut first = 0;
        let mut offset = 0;
        while first < batch.len() {
            let slices: Vec<io::IoSlice<'_>> = std::iter::once(io::IoSlice::new(&batch[first][offset..]))
                .chain(batch[first + 1..].iter().map(|b| io::IoSlice::new(b)))
                .collect();
            let mut n = out.write_vectored(&slices).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            app.metrics.bytes_out.fetch_add(n as u64, Relaxed);
            while first < batch.len() && n > 0 {
                let left = batch[first].len() - offset;
                if n >= left {
                    n -= left;
                    first += 1;
                    offset = 0;
                } else {
                    offset += n;
                    n = 0;
                }
            }
        }
        batch.clear();
    }
    Ok(WriteEnd::Done)
}

/// Makes the next close of `fd` send a TCP RST instead of a FIN (SO_LINGER with a zero
/// time-out), so a fault looks to the client like a connection reset.
fn reset_on_close(fd: RawFd) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: fd is the connection's socket, still open (its stream is alive until this
    // task returns); setsockopt reads `linger` for the given length only.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// The Date header value, formatted once per second.
#[derive(Default)]
struct DateCache {
    second: u64,
    text: String,
}

impl DateCache {
    fn get(&mut self) -> &str {
        let now = SystemTime::now();
        let second = now.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if second != self.second || self.text.is_empty() {
            self.second = second;
            self.text = httpdate::fmt_http_date(now);
        }
        &self.text
    }
}
