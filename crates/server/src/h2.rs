//! HTTP/2 server connections, served by hyper's HTTP/2 implementation.
//!
//! Unlike HTTP/1.1 (see `h1.rs`), HTTP/2 streams are independent, so hyper's server
//! already starts each request when it arrives. This module converts between hyper's
//! types and ours, and applies per-stream rate pacing and body faults on the way out: a
//! reset fault ends the body with an error, which hyper turns into RST_STREAM.
//!
//! Small requests: one task per connection. The connection and all of its streams are
//! polled by the connection's own task ([`InlineExecutor`]; uploads still get a task of
//! their own), and the frames that task produces in a burst leave in one `writev`
//! (`batch.rs`). Together they took a 16 KiB GET from one spawned task and more than
//! one `writev` per response to about one write per ten responses: `strace -c -f` on the
//! server during `h2load -n 20000 -c 16 -m 32 -t 1`, 28,755 syscalls (26,942 `writev`)
//! before, 2,894 (1,905 writes) after. The copy into the batch costs user-space work
//! (callgrind, 10,000 GETs: 654 M instructions before, 724 M after), far less than the
//! syscalls it saves.
//!
//! Flow-control windows are sized for uploads over long links: a 64 KiB default stream
//! window caps one upload stream at 64 KiB per round trip. They are fixed and large:
//! hyper 1.x's adaptive window resets both windows to 64 KiB when enabled and caps its
//! estimate at 16 MiB per connection, too little for the lab's transatlantic link.
//!
//! Time-outs: hyper's HTTP/2 server times none of what the HTTP/1.1 reader does (h1.rs),
//! so the connection's task keeps three clocks of its own, on the limits h1 uses:
//! - idle: with no stream open for `idle_timeout`, the connection is closed gracefully
//!   (GOAWAY, then hyper's closing PING), and dropped if the client has not finished
//!   that within `header_timeout`;
//! - head: a header block (HEADERS/PUSH_PROMISE up to the CONTINUATION with
//!   END_HEADERS) or any frame but DATA that has begun and not ended within
//!   `header_timeout` closes the connection. RFC 9113 allows no other frame inside a
//!   header block, so the stream cannot be reset alone: a trickled block holds the
//!   whole connection. [`FrameWatch`] sees the frame headers as they are read;
//! - keep-alive: a PING after `idle_timeout` without a frame from the client, and the
//!   connection closed if its ack takes longer than `header_timeout` (hyper's own
//!   keep-alive), so a client gone without a FIN does not hold open streams forever.
//!
//! A request body's reads are held to the same budget as HTTP/1.1's
//! (`types::BodyBudget`), and a body out of time ends in 400 RequestTimeout.
//!
//! DATA framing: `h2` sends each body piece it is given as its own frame(s), never two
//! pieces in one frame. So an unshaped body is handed over in [`Piece`]s that gather the
//! chunks storage has ready (up to 1 MiB, the client's largest frame): one frame and one
//! `writev` per MiB instead of one per 64 KiB synthetic block, without copying. Paced or
//! faulted bodies keep their own piece sizes.

use crate::app::App;
use crate::batch::Batched;
use crate::emulate::Pacer;
use crate::types::{Body, BodyBudget, BodyFault, Protocol, Request, RespBody, Response};
use bytes::{Buf, Bytes};
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{stream, StreamExt};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite};

/// Stream window: 16 MiB, ~1.2 Gbit/s per upload stream at 110 ms RTT (the link's
/// transatlantic preset, docs/lab/link-delay-line.md), the same size the client's h2
/// transport uses.
const INITIAL_STREAM_WINDOW: u32 = 16 * 1024 * 1024;
/// Connection window: 64 MiB, room for several such streams at once.
const INITIAL_CONNECTION_WINDOW: u32 = 64 * 1024 * 1024;

pub async fn serve<IO>(io: IO, app: Arc<App>)
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let svc_app = app.clone();
    let service = service_fn(move |req: hyper::Request<Incoming>| {
        let app = svc_app.clone();
        async move {
            if has_body(req.method()) {
                // Uploads hash their bytes as they arrive (MD5, checksums): CPU that must
                // not hold up the connection's other streams, so it runs on a task of its own.
                let resp = tokio::spawn(handle(app.clone(), req)).await;
                Ok::<_, Infallible>(resp.unwrap_or_else(|_| {
                    to_hyper(app.error_response(500, "InternalError", "The request handler failed.", None), false, &app)
                }))
            } else {
                Ok::<_, Infallible>(handle(app, req).await)
            }
        }
    });
    let (exec, mut spawned) = InlineExecutor::new();
    let mut builder = hyper::server::conn::http2::Builder::new(exec);
    let limits = &app.limits;
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.idle_timeout)
        .keep_alive_timeout(limits.header_timeout)
        .max_concurrent_streams(app.limits.h2_max_streams)
        .initial_stream_window_size(INITIAL_STREAM_WINDOW)
        .initial_connection_window_size(INITIAL_CONNECTION_WINDOW)
        .max_header_list_size(app.limits.max_header_bytes as u32)
        .max_send_buf_size(1024 * 1024);
    let open = OpenStreams::default();
    let frames = FrameWatch::new(true, open.clone());
    let stalled = frames.stalled.clone();
    let sent = FrameWatch::new(false, open.clone());
    let io = TokioIo::new(Batched::new(Watched { io, frames, sent }));
    let mut conn = std::pin::pin!(builder.serve_connection(io, service));
    let mut streams = FuturesUnordered::new();
    let (idle_limit, head_limit) = (limits.idle_timeout, limits.header_timeout);
    let mut idle_since = Some(Instant::now());
    let mut check = std::pin::pin!(tokio::time::sleep(idle_limit.min(head_limit)));
    let mut closing: Option<Instant> = None;
    // One task drives the connection and all of its streams (see InlineExecutor), and
    // keeps its clocks (the module's notes on time-outs).
    std::future::poll_fn(|cx| {
        let done = conn.as_mut().poll(cx).is_ready();
        while let Poll::Ready(Some(stream)) = spawned.poll_recv(cx) {
            streams.push(stream);
        }
        while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
        if done {
            return Poll::Ready(());
        }
        match (streams.is_empty() && open.is_empty(), idle_since) {
            (true, None) => idle_since = Some(Instant::now()),
            (false, Some(_)) => idle_since = None,
            _ => {}
        }
        while check.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            // A header block (or any frame but DATA) left incomplete for the header
            // time-out: h2 cannot take another frame until it ends, so the connection
            // is closed, not the stream reset.
            let head_due = stalled.get().map(|t| t + head_limit);
            if head_due.is_some_and(|d| d <= now) {
                app.metrics.h2_header_timeouts.fetch_add(1, Relaxed);
                return Poll::Ready(());
            }
            // A client that does not finish a graceful close (it owes a PING ack) is
            // dropped after the header time-out.
            if closing.is_some_and(|t| t + head_limit <= now) {
                return Poll::Ready(());
            }
            let idle_due = idle_since.map(|t| t + idle_limit);
            if closing.is_none() && idle_due.is_some_and(|d| d <= now) {
                app.metrics.h2_idle_closes.fetch_add(1, Relaxed);
                closing = Some(now);
                conn.as_mut().graceful_shutdown();
                if conn.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            let next = [head_due, idle_due.filter(|_| closing.is_none()), closing.map(|t| t + head_limit)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + idle_limit.min(head_limit));
            check.as_mut().reset(tokio::time::Instant::from_std(next));
        }
        Poll::Pending
    })
    .await;
}

/// Reads the frame headers going one way on the connection (9 bytes each; payloads are
/// skipped by their length), for what hyper's HTTP/2 server does not expose: which
/// streams are open ([`OpenStreams`], both directions feed it) and, on the client's
/// side, a frame or header block that has started and not ended.
/// `stalled` holds when the current one began (`None` between frames, and while a DATA
/// payload arrives: bodies are paced by flow control, and a slow one is the handler's
/// business). A header block is HEADERS or PUSH_PROMISE without END_HEADERS up to the
/// CONTINUATION that has it; RFC 9113 section 6.10 allows no other frame in between, so
/// a client trickling one holds the whole connection.
struct FrameWatch {
    /// Bytes of the client preface still to pass (its 24 bytes are not a frame).
    preface: usize,
    header: [u8; 9],
    header_len: usize,
    payload_left: u32,
    data: bool,
    in_block: bool,
    stalled: Stalled,
    /// Which side's frames these are, for `open`.
    from_client: bool,
    open: OpenStreams,
}

/// The streams open on the connection by RFC 9113's state machine, as far as the frame
/// headers in both directions show it: opened by the client's HEADERS, closed when both
/// sides have sent END_STREAM or either sent RST_STREAM. hyper's stream futures are no
/// guide: a response body handed whole to h2's send buffer ends its future while the
/// stream waits on the client's flow-control window, open. Both socket directions and
/// the connection's task share it (one task: the lock is never contended).
#[derive(Clone, Default)]
struct OpenStreams(Arc<std::sync::Mutex<std::collections::HashMap<u32, u8>>>);

const CLIENT_DONE: u8 = 1;
const SERVER_DONE: u8 = 2;
const FRAME_RST_STREAM: u8 = 0x3;
const FLAG_END_STREAM: u8 = 0x1;

impl OpenStreams {
    fn frame(&self, from_client: bool, kind: u8, flags: u8, stream: u32) {
        if stream == 0 {
            return;
        }
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match kind {
            FRAME_RST_STREAM => {
                open.remove(&stream);
            }
            FRAME_HEADERS | FRAME_DATA => {
                if kind == FRAME_HEADERS && from_client {
                    open.entry(stream).or_insert(0);
                }
                if flags & FLAG_END_STREAM != 0 {
                    if let Some(state) = open.get_mut(&stream) {
                        *state |= if from_client { CLIENT_DONE } else { SERVER_DONE };
                        if *state == CLIENT_DONE | SERVER_DONE {
                            open.remove(&stream);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }
}

/// When the frame now arriving began, if it is one `FrameWatch` times: microseconds
/// since the connection's start plus one (0: none). Shared by the socket wrapper and the
/// connection's task; an atomic because the task must be `Send`.
#[derive(Clone)]
struct Stalled {
    base: Instant,
    since: Arc<AtomicU64>,
}

impl Stalled {
    fn get(&self) -> Option<Instant> {
        match self.since.load(Relaxed) {
            0 => None,
            us => Some(self.base + std::time::Duration::from_micros(us - 1)),
        }
    }

    fn set(&self, at: Option<Instant>) {
        let us = at.map_or(0, |t| t.duration_since(self.base).as_micros() as u64 + 1);
        self.since.store(us, Relaxed);
    }
}

const FRAME_DATA: u8 = 0x0;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_PUSH_PROMISE: u8 = 0x5;
const FRAME_CONTINUATION: u8 = 0x9;
const FLAG_END_HEADERS: u8 = 0x4;

impl FrameWatch {
    fn new(from_client: bool, open: OpenStreams) -> FrameWatch {
        FrameWatch {
            preface: if from_client { crate::H2_PREFACE.len() } else { 0 },
            header: [0; 9],
            header_len: 0,
            payload_left: 0,
            data: false,
            in_block: false,
            stalled: Stalled { base: Instant::now(), since: Default::default() },
            from_client,
            open,
        }
    }

    fn saw(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = if self.preface > 0 {
                let n = self.preface.min(bytes.len());
                self.preface -= n;
                n
            } else if self.payload_left > 0 {
                let n = (self.payload_left as usize).min(bytes.len());
                self.payload_left -= n as u32;
                n
            } else {
                let n = (9 - self.header_len).min(bytes.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
                self.header_len += n;
                if self.header_len == 9 {
                    self.header_len = 0;
                    let h = self.header;
                    self.payload_left = u32::from_be_bytes([0, h[0], h[1], h[2]]);
                    let (kind, flags) = (h[3], h[4]);
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    self.open.frame(self.from_client, kind, flags, stream);
                    self.data = kind == FRAME_DATA;
                    match kind {
                        FRAME_HEADERS | FRAME_PUSH_PROMISE | FRAME_CONTINUATION => {
                            self.in_block = flags & FLAG_END_HEADERS == 0
                        }
                        _ => {}
                    }
                }
                n
            };
            bytes = &bytes[n..];
        }
        let open = self.preface > 0 || self.header_len > 0 || self.in_block || (self.payload_left > 0 && !self.data);
        match (open, self.stalled.get()) {
            (true, None) => self.stalled.set(Some(Instant::now())),
            (false, Some(_)) => self.stalled.set(None),
            _ => {}
        }
    }
}

/// The connection's socket, with every byte read shown to `frames` and every byte
/// written to `sent`.
struct Watched<IO> {
    io: IO,
    frames: FrameWatch,
    sent: FrameWatch,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let res = std::pin::Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = res {
            this.frames.saw(&buf.filled()[before..]);
        }
        res
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let res = std::pin::Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = res {
            this.sent.saw(&buf[..n]);
        }
        res
    }
    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let res = std::pin::Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = res {
            let mut left = n;
            for b in bufs {
                if left == 0 {
                    break;
                }
                let take = left.min(b.len());
                this.sent.saw(&b[..take]);
                left -= take;
            }
        }
        res
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

fn has_body(method: &http::Method) -> bool {
    *method == http::Method::PUT || *method == http::Method::POST
}

/// hyper's executor for a connection's streams: instead of one tokio task per stream
/// (`TokioExecutor`), the streams are handed back to the connection's own task, which
/// polls them beside the connection ([`serve`]).
///
/// Why: with a task per stream, each 16 KiB GET cost a task allocation and registration,
/// a wake-up of the connection task from whichever worker ran the stream (often the
/// other one, unparked through an eventfd for it), and a reschedule; on this 2-core
/// machine shared with the load generator those cross-thread hops made up much of the
/// request cost. On one task, the streams that a read of the socket started all answer
/// within one poll, and [`Batched`] writes their frames together. Uploads still get a
/// task of their own (`has_body`), so hashing one never stalls the others.
#[derive(Clone)]
struct InlineExecutor(tokio::sync::mpsc::UnboundedSender<BoxFuture<'static, ()>>);

impl InlineExecutor {
    fn new() -> (InlineExecutor, tokio::sync::mpsc::UnboundedReceiver<BoxFuture<'static, ()>>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (InlineExecutor(tx), rx)
    }
}

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for InlineExecutor {
    fn execute(&self, fut: F) {
        // Fails only once the connection is gone, and its streams with it.
        let _ = self.0.send(Box::pin(fut));
    }
}

type H2Body = UnsyncBoxBody<Piece, io::Error>;

async fn handle(app: Arc<App>, req: hyper::Request<Incoming>) -> hyper::Response<H2Body> {
    app.metrics.h2_streams.fetch_add(1, Relaxed);
    let arrived = Instant::now();
    // In progress until the handler's answer is handed to hyper (or the stream is gone).
    app.metrics.request_read();
    struct Answering<'a>(&'a Arc<App>);
    impl Drop for Answering<'_> {
        fn drop(&mut self) {
            self.0.metrics.request_answering();
        }
    }
    let answering = Answering(&app);
    let (parts, incoming) = req.into_parts();
    let mut headers = parts.headers;
    // SigV4 signs the Host header; HTTP/2 carries it as :authority.
    if !headers.contains_key(http::header::HOST) {
        if let Some(auth) = parts.uri.authority() {
            if let Ok(v) = http::HeaderValue::from_str(auth.as_str()) {
                headers.insert(http::header::HOST, v);
            }
        }
    }
    let content_length =
        headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let head_only = parts.method == http::Method::HEAD;
    let request = Request {
        method: parts.method,
        raw_path: parts.uri.path().to_string(),
        raw_query: parts.uri.query().unwrap_or("").to_string(),
        headers,
        body: Body::h2(incoming, content_length, BodyBudget::new(&app.limits)),
        protocol: Protocol::Http2,
        arrived,
    };
    let resp = app.handle(request).await;
    drop(answering);
    to_hyper(resp, head_only, &app)
}

fn to_hyper(resp: Response, head_only: bool, app: &Arc<App>) -> hyper::Response<H2Body> {
    let mut builder = hyper::Response::builder().status(resp.status);
    let len = resp.announced_length();
    let no_body = head_only || resp.status == 304 || resp.status == 204;
    if let Some(h) = builder.headers_mut() {
        *h = resp.headers;
        h.remove(http::header::CONNECTION);
        if !(resp.status == 304 || resp.status == 204) {
            h.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
        }
        h.insert(http::header::SERVER, http::HeaderValue::from_static("ferry"));
    }
    let body: H2Body = if no_body {
        http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync()
    } else {
        let inner = match resp.body {
            RespBody::Empty => stream::empty().boxed(),
            RespBody::Full(b) => stream::once(async move { Ok(b) }).boxed(),
            RespBody::Stream { stream, .. } => stream,
        };
        let pacer = app.emulator.emulation().rate_per_conn.map(Pacer::new);
        let state = OutState {
            inner,
            pacer,
            fault: resp.fault,
            sent: 0,
            app: app.clone(),
            pending: None,
            ended: false,
            deferred: None,
        };
        let frames = stream::unfold(state, next_frame);
        BodyExt::boxed_unsync(StreamBody::new(frames))
    };
    builder.body(body).unwrap_or_else(|_| {
        hyper::Response::new(http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync())
    })
}

struct OutState {
    inner: futures_util::stream::BoxStream<'static, io::Result<Bytes>>,
    pacer: Option<Pacer>,
    fault: Option<BodyFault>,
    sent: u64,
    app: Arc<App>,
    /// The rest of a chunk split at a fault point, or a chunk left out of a full piece.
    pending: Option<Bytes>,
    /// The inner stream ended while chunks were being gathered.
    ended: bool,
    /// An error met while gathering, reported after the bytes gathered before it.
    deferred: Option<io::Error>,
}

/// Largest DATA piece handed to hyper at once, so pacing stays smooth.
const PACE_PIECE: usize = 64 * 1024;

/// Unshaped bodies are handed to hyper in pieces of up to 1 MiB, the largest DATA frame
/// ferry's client accepts (its `MAX_FRAME_SIZE`): `h2` sends every piece as its own
/// frame(s) and never merges two, so 64 KiB chunks (the synthetic bucket's block) made
/// 16,384 frames per GiB, each a wake-up and a lock on both sides. Gathering the chunks
/// that are ready into one [`Piece`] costs no copy: `h2` writes the frame with one
/// `writev`; it took h2's client CPU per GiB down by ~half (docs/lab/server-write-path.md;
/// re-measure: `ferry bench bulk-get --quick --repeats 3 --peers none`).
const GATHER_BYTES: usize = 1024 * 1024;

async fn next_frame(mut st: OutState) -> Option<(io::Result<Frame<Piece>>, OutState)> {
    if let Some(e) = st.deferred.take() {
        return Some((Err(e), st));
    }
    if st.ended {
        return None;
    }
    let mut chunk = match st.pending.take() {
        Some(c) => c,
        None => match st.inner.next().await? {
            Ok(c) => c,
            Err(e) => return Some((Err(e), st)),
        },
    };
    if st.pacer.is_none() && st.fault.is_none() {
        let piece = gather(chunk, &mut st);
        st.sent += piece.remaining as u64;
        st.app.metrics.bytes_out.fetch_add(piece.remaining as u64, Relaxed);
        return Some((Ok(Frame::data(piece)), st));
    }
    let mut limit = chunk.len().min(if st.pacer.is_some() { PACE_PIECE } else { usize::MAX });
    let mut at_fault = None;
    if let Some(f) = st.fault {
        let after = match f {
            BodyFault::Reset { after_bytes } | BodyFault::Stall { after_bytes, .. } => after_bytes,
        };
        if after <= st.sent + limit as u64 {
            limit = (after - st.sent) as usize;
            at_fault = Some(f);
        }
    }
    if limit == 0 {
        if let Some(f) = at_fault {
            st.fault = None;
            match f {
                BodyFault::Reset { .. } => {
                    return Some((
                        Err(io::Error::new(io::ErrorKind::ConnectionReset, "injected fault: stream reset")),
                        st,
                    ));
                }
                BodyFault::Stall { pause, .. } => {
                    tokio::time::sleep(pause).await;
                    limit = chunk.len().min(if st.pacer.is_some() { PACE_PIECE } else { usize::MAX });
                }
            }
        }
    }
    let piece = chunk.split_to(limit);
    if !chunk.is_empty() {
        st.pending = Some(chunk);
    }
    if let Some(p) = st.pacer.as_mut() {
        p.wait(piece.len()).await;
    }
    st.sent += piece.len() as u64;
    st.app.metrics.bytes_out.fetch_add(piece.len() as u64, Relaxed);
    Some((Ok(Frame::data(Piece::from(piece))), st))
}

/// `first` plus the chunks the inner stream has ready without waiting, up to
/// [`GATHER_BYTES`] and [`GATHER_CHUNKS`]; a chunk that would overflow waits in `pending`.
fn gather(first: Bytes, st: &mut OutState) -> Piece {
    use futures_util::FutureExt;
    let mut piece = Piece::from(first);
    while piece.remaining < GATHER_BYTES && piece.parts.len() < GATHER_CHUNKS {
        let next = match st.inner.next().now_or_never() {
            None => break,
            Some(None) => {
                st.ended = true;
                break;
            }
            Some(Some(Err(e))) => {
                st.deferred = Some(e);
                break;
            }
            Some(Some(Ok(c))) => c,
        };
        if piece.remaining + next.len() > GATHER_BYTES {
            st.pending = Some(next);
            break;
        }
        piece.push(next);
    }
    piece
}

/// Most chunks in one [`Piece`]: `h2` writes a DATA frame as its header plus the
/// piece's chunks in one vectored write of at most 64 slices (tokio-util's
/// `poll_write_buf`), so a piece of up to 32 chunks goes out whole in one `writev`.
const GATHER_CHUNKS: usize = 32;

/// The payload of one DATA frame: body chunks kept apart (no copy) and written together
/// by `h2` through `Buf::chunks_vectored`.
pub(crate) struct Piece {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl Piece {
    fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.remaining += b.len();
            self.parts.push_back(b);
        }
    }
}

impl From<Bytes> for Piece {
    fn from(b: Bytes) -> Piece {
        let mut p = Piece { parts: VecDeque::with_capacity(1), remaining: 0 };
        p.push(b);
        p
    }
}

impl Buf for Piece {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map(|b| &b[..]).unwrap_or(&[])
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advance past the end of a DATA piece");
        self.remaining -= cnt;
        while cnt > 0 {
            let front = self.parts.front_mut().expect("bytes remain, so a part does");
            if cnt < front.len() {
                front.advance(cnt);
                return;
            }
            cnt -= front.len();
            self.parts.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [io::IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, part) in dst.iter_mut().zip(self.parts.iter()) {
            *slot = io::IoSlice::new(part);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_reads_as_its_chunks_in_order_across_partial_advances() {
        let mut p = Piece::from(Bytes::from_static(b"abc"));
        p.push(Bytes::new());
        p.push(Bytes::from_static(b"defg"));
        p.push(Bytes::from_static(b"h"));
        assert_eq!(p.remaining(), 8);
        let mut slices = [io::IoSlice::new(&[]); 2];
        assert_eq!(p.chunks_vectored(&mut slices), 2, "as many slices as there is room for");
        assert_eq!(&*slices[1], b"defg");
        p.advance(2);
        assert_eq!(p.chunk(), b"c");
        p.advance(2);
        assert_eq!(p.chunk(), b"efg");
        assert_eq!(p.remaining(), 4);
        assert_eq!(p.copy_to_bytes(4), Bytes::from_static(b"efgh"));
        assert_eq!(p.remaining(), 0);
        assert_eq!(p.chunk(), b"");
    }
}
