//! HTTP/1.1 pipelining: N connections, each with up to D requests written back to back
//! and their responses read in order (RFC 9112 section 9.3.2).
//!
//! Why hand-written: no Rust HTTP client pipelines. hyper's client (and reqwest on top of
//! it) sends one request per connection at a time and waits for the whole response
//! before the next; the mainstream clients of other languages (curl removed pipelining
//! in 7.65, browsers never enabled it, the AWS SDKs use pools) do the same. Yet on S3,
//! which speaks HTTP/1.1 only, pipelining fetched many small objects 30-40% faster
//! (docs/lab/wire-facts.md), because each request's first-byte latency overlaps with the
//! responses before it. So this module writes requests itself and parses responses with
//! `httparse`; chunked bodies are decoded by `ferry_proto::chunked::ChunkedDecoder`, the
//! decoder the server uses too.
//!
//! # How data flows
//!
//! ```text
//!  send() ─► Job ─► pending ─► place(): idle conn, else open one (< N), else no head owed, fewest in flight (< D)
//!                                  │
//!          per connection:   queued ──writer──► written ──reader──► Response via oneshot
//!                            (one write per batch)          └─ body chunks ─► bounded channel ─► caller
//! ```
//!
//! Each connection is two tasks over one socket: the writer takes every queued request
//! at once and writes them in one `write` (a batch), moving them to `written` *before*
//! writing so the reader always knows which response comes next; the reader parses the
//! head of the oldest written request, hands the [`Response`] over, then streams its body
//! through a channel of `BODY_CHANNEL` chunks. Only then does it read the next head:
//! response k+1 cannot be read until body k is consumed (backpressure, bounded memory).
//! The reader is a future shared with the bodies it streams (drive.rs): a large body's
//! caller polls it before waiting on its channel, so the socket is read on the task that
//! consumes the bytes, and hands it back to the connection's task near the body's end
//! ([`ChannelBody`]).
//!
//! # Slot states (one request on one connection)
//!
//! ```text
//!   Pending ──place──► Queued ──writer──► Written ──head──► Body ──end──► Done (slot freed)
//!      ^                 │                   │                │
//!      │   conn closes   │   conn closes,    │ time-out:      │ cut short: BodyTruncated
//!      └─────────────────┘   reset, bad      │  Timeout error │  to this caller only,
//!      ^   (not counted)     status line     │                │  the conn closes
//!      │                       │             v                v
//!      └── re-sent (counted) ──┘           Failed           Failed
//!          after MAX_ATTEMPTS failures as the oldest request: Reset error
//! ```
//!
//! Connection states: `Connecting -> Open -> (Closing: "Connection: close" seen, no new
//! requests) -> Closed`; an open connection with nothing in flight for `idle_timeout`, or
//! one whose peer closes while idle, or that sends bytes nobody asked for, is closed.
//! When a connection closes or fails, every request written on it and not yet answered
//! goes back to the front of `pending` and is written again elsewhere (counted in
//! `requests_resent`); callers never notice. Only the oldest unanswered request is
//! charged with the failure: requests behind it had no chance to be answered. Each
//! failure either answers at least one request or charges one, so the loop ends.
//!
//! Under `auto` a `ConnectionGate` (gate.rs) decides, besides the cap, whether a
//! connection may be opened, how deep connections are filled, and when the lane holds
//! more connections than its share: it then retires its emptiest connections (no new
//! requests; closed once their written requests are answered) so that the pool gets them
//! back. `send_pair` writes two requests in one batch, for auto's probe.
//!
//! Requests that are not [`Request::is_pipelineable`] travel alone and are never re-sent
//! once written; placement, re-sent requests first (`Shared::place`).
//!
//! # Before verification
//!
//! A request is *stacked* when it is written behind a response still owed on its
//! connection. Until [`PipelineTransport::verified`], a stacked request's failure may be
//! the peer's way of not pipelining rather than the request's: its connection closes
//! before its head, its head times out or does not parse, or the peer answers it 400 or
//! 505 (junk after the first request, to a server that reads one). Any of these sets
//! [`PipelineTransport::stacking_failed`]. Under `auto` (a gated pipeline) such a
//! request is not handed its failure: the connection closes, the request is charged one
//! attempt and written again, and the gate places one request per connection from then
//! on (auto/probe.rs). A forced pipeline hands every answer over as it comes.
//!
//! # Time-outs
//!
//! `response_timeout` runs for each response head from the moment the reader starts
//! waiting for it, after the body before it was read (a slow reader of body k does not
//! time out request k+1), and restarts while an upload body is still being written. A
//! time-out fails that request with `Timeout`; the requests behind it are re-sent on
//! another connection. Body reads use the same value as an inactivity limit.
//!
//! A body dropped before its end is discarded up to [`MAX_DISCARD`], past that its
//! connection closes; what "verified" checks: [`PipelineTransport::verified`].

use crate::body::{RequestBody, ResponseBody};
use crate::conn::{Connector, Io};
use crate::drive::Driver;
use crate::error::{ErrorKind, WireError};
use crate::exchange::Progress;
use crate::gate::{ConnectionGate, Place};
use crate::{Protocol, Request, Response, ResponseMeta, Transport, TransportConfig, TransportStats};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use ferry_proto::chunked::ChunkedDecoder;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, Notify};

/// Failures charged to one request (as the oldest unanswered on a connection that failed,
/// or on a connection that could not be opened) before it gives up. Three: one stale
/// keep-alive connection plus two real failures.
pub const MAX_ATTEMPTS: u32 = 3;
/// Body bytes read and thrown away after a caller dropped its body, before the connection
/// is closed instead. 1 MiB is ~0.1 ms at 10 Gbit/s but ~10 ms at S3's 90 MB/s per
/// connection (docs/lab/wire-facts.md), about the cost of a new connection's round trip.
///
/// Dropping a body before its end leaves the rest of it on the socket, in front of the
/// responses behind it. The reader discards up to [`MAX_DISCARD`] bytes (cheap: they are
/// already in flight, and the requests behind keep their place); past that it closes the
/// connection and re-sends the requests behind on a fresh one, which costs a connection
/// set-up and a round trip but never reads megabytes nobody wants. A body that is held
/// and not read stalls the requests behind it: that is the head-of-line price of
/// pipelining, which is why `auto` sends only small requests this way.
///
pub const MAX_DISCARD: u64 = 1024 * 1024;
/// Largest response head accepted (the server side uses the same 64 KiB limit).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header fields in one response head; S3 sends ~10-20.
const MAX_HEADERS: usize = 128;
/// Socket read size, the server's write buffer size too (crates/server/src/h1.rs).
const READ_CHUNK: usize = 64 * 1024;

/// Request body bytes are written in pieces of this size, each noted as progress for the
/// head time-out: one `write_all` of a large buffer would say nothing until all of it is
/// in the socket. The read chunk's size, for the same reason: small next to a socket
/// buffer, large enough that the bookkeeping costs nothing.
const WRITE_PIECE: usize = READ_CHUNK;

/// Writes `data` in [`WRITE_PIECE`]s, touching `written` after each.
async fn write_noting<W: tokio::io::AsyncWrite + Unpin>(
    io: &mut W,
    data: &[u8],
    written: &Progress,
) -> std::io::Result<()> {
    for piece in data.chunks(WRITE_PIECE) {
        io.write_all(piece).await?;
        written.touch();
    }
    Ok(())
}
/// Body chunks buffered between a connection and its caller: with 64 KiB reads at most
/// ~128 KiB per connection, so 32 connections hold ~4 MiB at most.
const BODY_CHANNEL: usize = 2;

/// HTTP/1.1 pipelining over up to `max_connections` connections, `pipeline_depth` deep.
pub struct PipelineTransport {
    shared: Arc<Shared>,
}

struct Shared {
    connector: Connector,
    authority: String,
    max_connections: usize,
    depth: usize,
    response_timeout: std::time::Duration,
    idle_timeout: std::time::Duration,
    state: Mutex<State>,
    /// Set by `auto`: this lane's share of a connection cap it shares with the pool.
    gate: Option<Arc<dyn ConnectionGate>>,
    verified: AtomicBool,
    /// See [`PipelineTransport::stacking_failed`].
    stacking_failed: AtomicBool,
    shutdown: AtomicBool,
    opened: AtomicU64,
    open: AtomicU64,
    sent: AtomicU64,
    resent: AtomicU64,
}

#[derive(Default)]
struct State {
    conns: Vec<Slot>,
    /// Requests waiting for room, oldest first (re-sent ones go to the front).
    pending: VecDeque<Job>,
    next_key: u64,
}

/// A connection as the scheduler sees it.
struct Slot {
    key: u64,
    signals: Arc<Signals>,
    /// Assigned, not yet written.
    queued: VecDeque<Job>,
    /// Written (or being written), response head not yet taken by the reader; in order.
    written: VecDeque<Job>,
    /// Requests assigned and not finished (queued + written + the one being read).
    in_flight: usize,
    /// False once the peer said `Connection: close`.
    accepting: bool,
    /// Carries a non-pipelineable request: nothing else goes on it until it is answered.
    exclusive: bool,
    connected: bool,
    requests_written: u64,
    /// Responses read to their end on this connection.
    answered: u64,
    /// The batch of the last pipelineable write, which the next write joins while
    /// responses are still owed.
    batch: Option<Arc<Batch>>,
    /// The gate's place until the socket is connected; the socket holds it from then on
    /// and gives it back once closed (gate.rs, `Place`).
    place: Option<Place>,
}

impl Slot {
    /// Some request on it still waits for its response head (queued or written): a
    /// request placed here now would wait for that first byte too.
    fn head_owed(&self) -> bool {
        !self.queued.is_empty() || !self.written.is_empty()
    }
}

struct Signals {
    writer: Notify,
    reader: Notify,
    /// Set when the writer failed for a local reason (a request body stream failed): the
    /// server is still waiting for bytes that will never come.
    abort: AtomicBool,
    abort_reason: Mutex<String>,
    /// The writer is sending a request body: the response head may rightly wait for it.
    writing_body: AtomicBool,
    /// When the writer last got bytes of a request body into the socket: the response
    /// head's time-out runs from there, so a body that stops moving (a dead link, a peer
    /// that stopped reading) times out as a missing head does.
    written: Progress,
    /// The connection was closed (shared.close): a writer still blocked writing into a
    /// socket that does not drain stops, so the socket and its gate place are let go.
    closed: Notify,
}

/// Requests in flight together on one connection (each written before the response to
/// the one before it was read to its end); `verified` turns true once two were answered
/// well and none badly ([`Batch::answered`]).
struct Batch {
    /// Members not yet answered (low 32 bits) and members it ever had (high 32 bits), in
    /// one word so that joining a batch and answering its last member cannot interleave:
    /// a write joins only while some member is unanswered, and a batch of one verifies
    /// nothing.
    counts: AtomicU64,
    ok: AtomicBool,
}

impl Batch {
    const ONE_MEMBER: u64 = 1 << 32;

    fn new(n: usize) -> Arc<Batch> {
        Arc::new(Batch { counts: AtomicU64::new(n as u64 * (Batch::ONE_MEMBER + 1)), ok: AtomicBool::new(true) })
    }

    /// Adds `n` requests written now, if a member is still unanswered.
    fn join(&self, n: usize) -> bool {
        self.counts
            .fetch_update(Relaxed, Relaxed, |c| (c as u32 > 0).then(|| c + n as u64 * (Batch::ONE_MEMBER + 1)))
            .is_ok()
    }

    /// Counts one member answered well; true from the second member answered well on,
    /// not only at the batch's last: a connection kept full writes new members before
    /// the last is answered, so its batch never ends while the load lasts, and a verdict
    /// that waited for that end (auto's probe) never came. Two answers read in order on
    /// one connection, the second written before the first was read, are the evidence
    /// a batch of two gives.
    fn answered(&self) -> bool {
        let before = self.counts.fetch_sub(1, Relaxed);
        let (unanswered, members) = (before as u32 as u64, before >> 32);
        members - (unanswered - 1) >= 2
    }
}

struct Job {
    head: Bytes,
    /// The body of a non-pipelineable request, until it is written.
    body: Option<RequestBody>,
    head_request: bool,
    pipelineable: bool,
    attempts: u32,
    started: Instant,
    /// When it was written with no response owed ahead of it (see `head_latency`).
    on_wire: Option<Instant>,
    reused: bool,
    batch: Option<Arc<Batch>>,
    reply: oneshot::Sender<Result<Response, WireError>>,
}

impl Job {
    /// Written behind a response still owed on its connection, or behind another request
    /// of its batch: its answer depends on the peer handling pipelining.
    fn stacked(&self) -> bool {
        self.pipelineable && self.on_wire.is_none()
    }

    fn spoil_batch(&mut self) {
        if let Some(b) = self.batch.take() {
            b.ok.store(false, Relaxed);
        }
    }
}

enum BodyMsg {
    /// A piece of the body; `true` on the last one.
    Chunk(Bytes, bool),
    Fail(WireError),
}

impl PipelineTransport {
    pub fn new(config: TransportConfig) -> Result<PipelineTransport, WireError> {
        Self::with_gate(config, None)
    }

    /// A pipeline whose connections also need a place from `gate` (auto's shared cap):
    /// it opens one only when the gate allows, and when the gate says the lane holds
    /// more than its share it retires connections (no new requests; closed once their
    /// requests are answered), emptiest first.
    pub(crate) fn with_gate(
        config: TransportConfig,
        gate: Option<Arc<dyn ConnectionGate>>,
    ) -> Result<PipelineTransport, WireError> {
        let connector = Connector::new(&config, &[b"http/1.1"])?;
        Ok(PipelineTransport {
            shared: Arc::new(Shared {
                connector,
                authority: config.endpoint.authority(),
                max_connections: config.max_connections.max(1),
                depth: config.pipeline_depth.max(1),
                response_timeout: config.response_timeout,
                idle_timeout: config.idle_timeout,
                state: Mutex::new(State::default()),
                gate,
                verified: AtomicBool::new(false),
                stacking_failed: AtomicBool::new(false),
                shutdown: AtomicBool::new(false),
                opened: AtomicU64::new(0),
                open: AtomicU64::new(0),
                sent: AtomicU64::new(0),
                resent: AtomicU64::new(0),
            }),
        })
    }

    /// True once the endpoint answered two pipelined requests correctly. `auto` pipelines
    /// only then.
    ///
    /// [`PipelineTransport::verified`] turns true once two requests of a batch in flight
    /// together on one connection (each written before the response to the one before it
    /// was read, in one write or several) were answered, and answered well: every
    /// response so far parsed, framed exactly (Content-Length or chunked ending where it
    /// should), none was 400 or 505 (what servers that choke on pipelining answer to the
    /// second request), and no stray bytes followed an answer with nothing owed after it.
    /// A peer that drops or reorders pipelined requests fails these checks in practice.
    pub fn verified(&self) -> bool {
        self.shared.verified.load(Relaxed)
    }

    /// True once, before [`PipelineTransport::verified`], a request *stacked* on a
    /// connection (written behind a response still owed there) came to grief: its
    /// connection closed or failed before its head, its head timed out or did not parse,
    /// or it was answered 400 or 505. Under `auto` such a request is not handed its
    /// failure: it is charged one attempt and written again (module note, "Before
    /// verification"), and auto stacks requests before the verdict only while this is
    /// false.
    pub fn stacking_failed(&self) -> bool {
        self.shared.stacking_failed.load(Relaxed)
    }
}

impl PipelineTransport {
    pub(crate) fn nudge(&self) {
        self.shared.nudge();
    }
}

impl Drop for PipelineTransport {
    fn drop(&mut self) {
        // Idle connections close now; busy ones once their last response is read.
        self.shared.shutdown.store(true, Relaxed);
        for slot in &self.shared.lock().conns {
            slot.signals.reader.notify_one();
        }
    }
}

impl PipelineTransport {
    /// Sends two pipelineable requests queued at once on one connection, so that its
    /// writer writes them in one batch: `auto`'s probe, whose pair must be answered as a
    /// batch to verify pipelining, runs on the small lane's own pipeline this way (its
    /// connection is then the lane's first, not one opened beside the lane), and so does
    /// `ferry perfdiag`'s. Requests sent one by one may each be written and answered
    /// before the next is queued (an idle writer on another core, a loopback server), so
    /// they verify nothing however often they are sent. Both are queued before this
    /// returns, ahead of any requests waiting for room; when there is no connection at all
    /// and none may be opened, both wait at the front of `pending` and are placed one by
    /// one like any others.
    pub fn send_pair(&self, first: Request, second: Request) -> [BoxFuture<'static, Result<Response, WireError>>; 2] {
        let shared = &self.shared;
        let mut jobs = Vec::with_capacity(2);
        let mut replies = Vec::with_capacity(2);
        for req in [first, second] {
            match job_for(req, &shared.authority) {
                Ok((job, rx)) => {
                    jobs.push(job);
                    replies.push(Ok(rx));
                }
                Err(e) => replies.push(Err(e)),
            }
        }
        {
            let mut st = shared.lock();
            if jobs.len() == 2 && jobs.iter().all(|j| j.pipelineable) {
                let second = jobs.pop().expect("two jobs");
                let first = jobs.pop().expect("two jobs");
                // Ahead of requests already waiting: the pair's verdict is what lets them
                // go at full depth (auto/probe.rs). With no room under the depth the pair
                // still goes together, onto the least busy connection (two over the depth
                // at most): placed one by one it would verify nothing.
                match shared.place(&mut st, first) {
                    Ok(idx) => {
                        let slot = &mut st.conns[idx];
                        slot.in_flight += 1;
                        slot.queued.push_back(second);
                        slot.signals.writer.notify_one();
                    }
                    Err(first) => {
                        let least = st
                            .conns
                            .iter()
                            .enumerate()
                            .filter(|(_, s)| s.accepting && !s.exclusive)
                            .min_by_key(|(_, s)| s.in_flight)
                            .map(|(i, _)| i);
                        match least {
                            Some(idx) => {
                                let slot = &mut st.conns[idx];
                                slot.in_flight += 2;
                                slot.queued.push_back(first);
                                slot.queued.push_back(second);
                                slot.signals.writer.notify_one();
                            }
                            None => {
                                st.pending.push_front(second);
                                st.pending.push_front(first);
                            }
                        }
                    }
                }
            } else {
                st.pending.extend(jobs);
                shared.pump(&mut st);
            }
        }
        replies
            .into_iter()
            .map(|r| -> BoxFuture<'static, Result<Response, WireError>> {
                Box::pin(async move {
                    let rx = r?;
                    rx.await
                        .unwrap_or_else(|_| Err(WireError::new(ErrorKind::Reset, "the pipeline dropped the request")))
                })
            })
            .collect::<Vec<_>>()
            .try_into()
            .unwrap_or_else(|_| unreachable!("two replies"))
    }
}

impl PipelineTransport {
    /// Places a pipelineable request now, only where no response head is owed ahead of it:
    /// an idle connection, else a new one (if the cap and the gate allow), else one whose
    /// only request is having its body read. `None`, and nothing sent, when there is no
    /// such place or requests already wait for room. `auto`'s hedges go this way (auto/hedge.rs,
    /// "Hedged small GETs"): a copy written behind another request's pending head would
    /// wait for the same kind of first byte it is meant to avoid.
    pub(crate) fn try_send_unobstructed(
        &self,
        req: Request,
    ) -> Option<BoxFuture<'static, Result<Response, WireError>>> {
        let shared = &self.shared;
        if !req.is_pipelineable() {
            return None;
        }
        let (job, rx) = job_for(req, &shared.authority).ok()?;
        let mut st = shared.lock();
        if !st.pending.is_empty() {
            return None;
        }
        let unobstructed = |s: &Slot| s.accepting && !s.exclusive && !s.head_owed();
        let room = st.conns.len() < shared.max_connections;
        if !room && !st.conns.iter().any(unobstructed) {
            return None;
        }
        // `place` prefers an idle connection, then a new one, then the fewest in flight
        // among those without an owed head: with one of the three available it lands on
        // one of them, unless a new connection was refused and the unobstructed ones are
        // full (then it is taken back out).
        let idx = shared.place(&mut st, job).ok()?;
        let slot = &mut st.conns[idx];
        if slot.queued.len() + slot.written.len() > 1 {
            let job = slot.queued.pop_back().expect("just queued");
            slot.in_flight -= 1;
            drop(job);
            return None;
        }
        Some(Box::pin(async move {
            rx.await.unwrap_or_else(|_| Err(WireError::new(ErrorKind::Reset, "the pipeline dropped the request")))
        }))
    }
}

type Reply = oneshot::Receiver<Result<Response, WireError>>;

/// A request as the scheduler's [`Job`], and where its answer will come.
fn job_for(req: Request, authority: &str) -> Result<(Job, Reply), WireError> {
    let head = serialize_head(&req, authority)?;
    let (tx, rx) = oneshot::channel();
    let job = Job {
        head,
        head_request: req.method == Method::HEAD,
        pipelineable: req.is_pipelineable(),
        body: if req.body.is_empty() { None } else { Some(req.body) },
        attempts: 0,
        started: Instant::now(),
        on_wire: None,
        reused: false,
        batch: None,
        reply: tx,
    };
    Ok((job, rx))
}

impl Transport for PipelineTransport {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let shared = self.shared.clone();
        Box::pin(async move {
            let (job, rx) = job_for(req, &shared.authority)?;
            {
                let mut st = shared.lock();
                st.pending.push_back(job);
                shared.pump(&mut st);
            }
            rx.await.unwrap_or_else(|_| Err(WireError::new(ErrorKind::Reset, "the pipeline dropped the request")))
        })
    }

    fn small_depth(&self) -> usize {
        self.shared.depth
    }

    fn stats(&self) -> TransportStats {
        let s = &self.shared;
        TransportStats {
            connections_opened: s.opened.load(Relaxed),
            connections_open: s.open.load(Relaxed),
            requests_sent: s.sent.load(Relaxed),
            requests_resent: s.resent.load(Relaxed),
            ..TransportStats::default()
        }
    }

    fn name(&self) -> &'static str {
        "h1-pipeline"
    }
}

/// The request line and header section, with Host and Content-Length added.
fn serialize_head(req: &Request, authority: &str) -> Result<Bytes, WireError> {
    let path = req.path_and_query.as_bytes();
    if !(path.starts_with(b"/") || path == b"*") || path.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(WireError::config(format!("'{}' is not a percent-encoded request target", req.path_and_query)));
    }
    let mut out = BytesMut::with_capacity(128 + path.len() + req.headers.len() * 48);
    out.put_slice(req.method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(path);
    out.put_slice(b" HTTP/1.1\r\n");
    if !req.headers.contains_key(HOST) {
        out.put_slice(b"host: ");
        out.put_slice(authority.as_bytes());
        out.put_slice(b"\r\n");
    }
    for (name, value) in &req.headers {
        // Framing is ours to write: the body's real length, never a caller's guess.
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    let len = req.body.len();
    if len > 0 || matches!(req.method, Method::PUT | Method::POST | Method::PATCH) {
        out.put_slice(format!("content-length: {len}\r\n").as_bytes());
    }
    out.put_slice(b"\r\n");
    Ok(out.freeze())
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Places pending requests, oldest first, until one does not fit.
    fn pump(self: &Arc<Self>, st: &mut State) {
        while let Some(job) = st.pending.pop_front() {
            if job.reply.is_closed() {
                continue; // the caller gave up before it was written
            }
            if let Err(job) = self.place(st, job).map(drop) {
                st.pending.push_front(job);
                break;
            }
        }
    }

    /// Assigns a request to a connection: an idle one, else a new one while fewer than N
    /// are open, else the one with the fewest in flight below the depth. Returns the
    /// connection's index in `conns`, or the job back when no connection has room (the
    /// caller queues it again: by value, with no allocation on that busy path).
    ///
    /// Requests that are not [`Request::is_pipelineable`] (anything with a body, PUT, POST,
    /// DELETE) travel alone: they wait for a connection with nothing in flight, nothing is
    /// written behind them until they are answered, and once written they are never re-sent
    /// (a failure before the response head is a `Reset` error whose retry safety says
    /// whether the store layer may repeat it).
    ///
    /// Re-sent requests go through the same placement as new ones (an idle connection, else
    /// a new one while fewer than N are open), ahead of requests that were never written.
    /// A non-pipelineable request at the head of `pending` holds back the requests behind it
    /// until some connection goes idle: order is kept, and `auto` rarely sends such requests
    /// here.
    #[allow(
        clippy::result_large_err,
        reason = "the Err hands the job back unboxed; boxing would allocate each time every connection is busy"
    )]
    fn place(self: &Arc<Self>, st: &mut State, job: Job) -> Result<usize, Job> {
        let room = st.conns.len() < self.max_connections;
        let depth = self.gate.as_ref().map_or(self.depth, |g| g.depth().clamp(1, self.depth));
        // Asked only when a connection would be opened: a yes takes a place.
        let mut place = None;
        let mut can_open = || {
            place = if room { Place::take(self.gate.as_ref()) } else { None };
            place.is_some()
        };
        let idx = if job.pipelineable {
            // Behind a response whose head has come, a request waits out at most that
            // body; behind one whose head is still owed, also its first byte, which on S3
            // is lognormal (auto/hedge.rs): so those go last.
            let best = st
                .conns
                .iter()
                .enumerate()
                .filter(|(_, s)| s.accepting && !s.exclusive && s.in_flight < depth)
                .min_by_key(|(_, s)| (s.head_owed(), s.in_flight))
                .map(|(i, s)| (i, s.in_flight));
            match best {
                Some((i, 0)) => Some(i),
                _ if can_open() => None,
                Some((i, _)) => Some(i),
                None => return Err(job),
            }
        } else {
            match st.conns.iter().position(|s| s.accepting && s.in_flight == 0) {
                Some(i) => Some(i),
                None if can_open() => None,
                None => return Err(job),
            }
        };
        let idx = match idx {
            Some(i) => i,
            None => {
                st.next_key += 1;
                let signals = Arc::new(Signals {
                    writer: Notify::new(),
                    reader: Notify::new(),
                    abort: AtomicBool::new(false),
                    abort_reason: Mutex::new(String::new()),
                    writing_body: AtomicBool::new(false),
                    written: Progress::new(),
                    closed: Notify::new(),
                });
                st.conns.push(Slot {
                    key: st.next_key,
                    signals: signals.clone(),
                    queued: VecDeque::new(),
                    written: VecDeque::new(),
                    in_flight: 0,
                    accepting: true,
                    exclusive: false,
                    connected: false,
                    requests_written: 0,
                    answered: 0,
                    batch: None,
                    place: place.take(),
                });
                tokio::spawn(run_connection(self.clone(), st.next_key, signals));
                st.conns.len() - 1
            }
        };
        let slot = &mut st.conns[idx];
        if !job.pipelineable {
            slot.exclusive = true;
        }
        slot.in_flight += 1;
        slot.queued.push_back(job);
        slot.signals.writer.notify_one();
        Ok(idx)
    }

    /// A request's response was read to its end (or discarded): frees its place.
    fn finish(self: &Arc<Self>, key: u64) {
        let mut st = self.lock();
        if let Some(slot) = st.conns.iter_mut().find(|s| s.key == key) {
            slot.in_flight = slot.in_flight.saturating_sub(1);
            slot.answered += 1;
            if slot.in_flight == 0 {
                slot.exclusive = false;
            }
        }
        self.retire_excess(&mut st);
        self.pump(&mut st);
    }

    /// With a gate: while the lane holds more connections than its share, stops placing
    /// requests on the emptiest ones; their unwritten requests go back to `pending`, and
    /// each closes once its written requests are answered (`Reader::next_job`).
    fn retire_excess(self: &Arc<Self>, st: &mut State) {
        let Some(g) = &self.gate else { return };
        let excess = g.excess();
        let mut retiring = st.conns.iter().filter(|s| !s.accepting).count();
        while retiring < excess {
            let Some(slot) = st.conns.iter_mut().filter(|s| s.accepting).min_by_key(|s| s.in_flight) else { break };
            slot.accepting = false;
            g.handed_over(1);
            let queued = std::mem::take(&mut slot.queued);
            slot.in_flight -= queued.len();
            slot.signals.reader.notify_one();
            for job in queued.into_iter().rev() {
                st.pending.push_front(job);
            }
            retiring += 1;
        }
    }

    /// The gate may have changed its mind (auto: the limit grew, the pool closed a
    /// connection, or bulk requests want connections back).
    fn nudge(self: &Arc<Self>) {
        let mut st = self.lock();
        self.retire_excess(&mut st);
        self.pump(&mut st);
    }

    /// The peer said `Connection: close`: nothing more goes on this connection, and what
    /// was queued on it but not written goes elsewhere.
    fn stop_accepting(self: &Arc<Self>, key: u64) {
        let mut st = self.lock();
        let Some(slot) = st.conns.iter_mut().find(|s| s.key == key) else { return };
        slot.accepting = false;
        let queued = std::mem::take(&mut slot.queued);
        slot.in_flight -= queued.len();
        for job in queued.into_iter().rev() {
            st.pending.push_front(job);
        }
        self.pump(&mut st);
    }

    /// Removes a connection; its unanswered requests are re-sent. `head` is the oldest
    /// unanswered request when the connection failed while waiting for its response;
    /// `progressed` says a caller was just given a response or an error. A connection that
    /// closes having done neither charges its oldest request, so a peer that closes every
    /// connection unanswered ends in errors, not in a loop.
    fn close(self: &Arc<Self>, key: u64, mut head: Option<(Job, String)>, progressed: bool) {
        let mut st = self.lock();
        let mut requeue = Vec::new();
        if let Some(i) = st.conns.iter().position(|s| s.key == key) {
            // (The gate's place goes back when the socket, held by the reader and the
            // writer, is dropped.)
            let slot = st.conns.remove(i);
            if slot.connected {
                self.open.fetch_sub(1, Relaxed);
            }
            slot.signals.writer.notify_one();
            slot.signals.closed.notify_one();
            if slot.written.iter().chain(head.as_ref().map(|(j, _)| j)).any(Job::stacked) {
                self.stacking_went_wrong();
            }
            for mut job in slot.written {
                job.spoil_batch();
                if job.pipelineable {
                    self.resent.fetch_add(1, Relaxed);
                    requeue.push(job);
                } else {
                    let _ = job
                        .reply
                        .send(Err(WireError::new(ErrorKind::Reset, "the connection closed before the response head")));
                }
            }
            requeue.extend(slot.queued);
            if head.is_none() && !progressed && slot.answered == 0 && !requeue.is_empty() {
                head = Some((requeue.remove(0), "the connection closed before answering anything".into()));
            }
        }
        if let Some((mut job, why)) = head {
            job.spoil_batch();
            job.attempts += 1;
            if !job.pipelineable {
                let _ = job.reply.send(Err(WireError::new(
                    ErrorKind::Reset,
                    format!("the connection failed before the response head: {why}"),
                )));
            } else if job.attempts >= MAX_ATTEMPTS {
                let msg = format!("gave up after {} connections failed before answering: {why}", job.attempts);
                let _ = job.reply.send(Err(WireError::new(ErrorKind::Reset, msg)));
            } else {
                self.resent.fetch_add(1, Relaxed);
                requeue.insert(0, job);
            }
        }
        for job in requeue.into_iter().rev() {
            st.pending.push_front(job);
        }
        self.pump(&mut st);
    }

    /// A stacked request came to grief ([`PipelineTransport::stacking_failed`]): counted
    /// only before verification, when it may be the peer's way of not pipelining.
    fn stacking_went_wrong(&self) {
        if !self.verified.load(Relaxed) && !self.stacking_failed.swap(true, Relaxed) {
            tracing::debug!(
                "pipeline: a stacked request failed before pipelining was verified; one per connection now"
            );
        }
    }

    /// Whether a failure of `job` is taken as the peer's answer to pipelining rather than
    /// the request's own: a stacked request before verification, under `auto` (its gate
    /// then places one request per connection). Such a failure closes the connection and
    /// writes the request again (`close` with it as `head`). A forced pipeline hands every
    /// answer over as it comes: its user chose pipelining for this endpoint.
    fn not_pipelining(&self, job: &Job) -> bool {
        self.gate.is_some() && job.stacked() && !self.verified.load(Relaxed)
    }

    /// A connection could not be opened: its requests were never written; each is
    /// charged one attempt.
    fn connect_failed(self: &Arc<Self>, key: u64, err: WireError) {
        let mut st = self.lock();
        let Some(i) = st.conns.iter().position(|s| s.key == key) else { return };
        let slot = st.conns.remove(i); // (its place goes back with it)
        let mut requeue = Vec::new();
        for mut job in slot.queued {
            job.attempts += 1;
            if job.attempts >= MAX_ATTEMPTS {
                let _ = job.reply.send(Err(WireError::new(err.kind(), err.detail()).with_retry(err.retry())));
            } else {
                requeue.push(job);
            }
        }
        for job in requeue.into_iter().rev() {
            st.pending.push_front(job);
        }
        self.pump(&mut st);
    }
}

async fn run_connection(shared: Arc<Shared>, key: u64, signals: Arc<Signals>) {
    let mut conn = match shared.connector.connect().await {
        Ok(c) => c,
        Err(e) => return shared.connect_failed(key, e),
    };
    {
        let mut st = shared.lock();
        let Some(slot) = st.conns.iter_mut().find(|s| s.key == key) else { return };
        slot.connected = true;
        if let Some(place) = slot.place.take() {
            conn.io = place.hold(conn.io);
        }
        shared.opened.fetch_add(1, Relaxed);
        shared.open.fetch_add(1, Relaxed);
    }
    let (rd, wr) = tokio::io::split(conn.io);
    tokio::spawn(run_writer(shared.clone(), key, signals.clone(), wr));
    let driver = Arc::new_cyclic(|driver: &Weak<Driver>| {
        let buf = BytesMut::with_capacity(READ_CHUNK);
        let reader = Reader { shared, key, signals, io: rd, buf, connection_id: conn.id, driver: driver.clone() };
        Driver::new(Box::pin(reader.run()))
    });
    driver.run().await;
}

/// Writes every queued request of a connection in one write, until the connection is
/// removed from the scheduler.
async fn run_writer(shared: Arc<Shared>, key: u64, signals: Arc<Signals>, mut io: WriteHalf<Box<dyn Io>>) {
    let mut out = BytesMut::new();
    loop {
        let notified = signals.writer.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let mut body = None;
        let count = {
            let mut st = shared.lock();
            let Some(slot) = st.conns.iter_mut().find(|s| s.key == key) else { return };
            let mut batch = Vec::new();
            // Responses owed ahead of this batch on this connection: when there are none,
            // its first request's head time is the endpoint's alone (head_latency).
            let unobstructed = slot.in_flight == slot.queued.len();
            while let Some(job) = slot.queued.front() {
                if !job.pipelineable && !batch.is_empty() {
                    break;
                }
                let mut job = slot.queued.pop_front().expect("front exists");
                job.reused = slot.requests_written > 0;
                // (Set on every write: a re-sent request's earlier write does not count.)
                job.on_wire = (unobstructed && batch.is_empty()).then(Instant::now);
                slot.requests_written += 1;
                out.put_slice(&job.head);
                let alone = !job.pipelineable;
                body = job.body.take();
                batch.push(job);
                if alone {
                    break;
                }
            }
            let n = batch.len();
            if let Some(first) = batch.first() {
                // Requests still owed a response on this connection and the ones written
                // now are in flight together: one batch, however many writes it took (how
                // the writer wakes decides that; the peer sees no difference).
                // A batch whose every member was answered is over, though the reader
                // may not have freed the last one's place yet: the caller, who has its
                // whole body, can send the next request before that.
                let pipelined = first.pipelineable;
                let tracker = match &slot.batch {
                    // (A spoiled batch is never joined: its unanswered count may never reach 0.)
                    Some(b) if pipelined && !unobstructed && b.ok.load(Relaxed) && b.join(n) => b.clone(),
                    _ => Batch::new(n),
                };
                slot.batch = pipelined.then(|| tracker.clone());
                for mut job in batch {
                    job.batch = Some(tracker.clone());
                    slot.written.push_back(job);
                }
            }
            n
        };
        if count == 0 {
            notified.await;
            continue;
        }
        signals.reader.notify_one();
        shared.sent.fetch_add(count as u64, Relaxed);
        let mut local_error = None;
        if body.is_some() {
            signals.written.touch();
            signals.writing_body.store(true, Relaxed);
        }
        let result = async {
            match body {
                Some(RequestBody::Full(b)) => {
                    if b.len() <= READ_CHUNK {
                        out.put_slice(&b);
                        io.write_all(&out).await?;
                    } else {
                        io.write_all(&out).await?;
                        write_noting(&mut io, &b, &signals.written).await?;
                    }
                }
                Some(RequestBody::Stream { len, mut stream }) => {
                    io.write_all(&out).await?;
                    let mut written = 0u64;
                    while let Some(chunk) = stream.next().await {
                        let chunk = match chunk {
                            Ok(c) => c,
                            Err(e) => {
                                local_error = Some(format!("the request body stream failed: {e}"));
                                return Ok(());
                            }
                        };
                        written += chunk.len() as u64;
                        if written > len {
                            break;
                        }
                        write_noting(&mut io, &chunk, &signals.written).await?;
                    }
                    if written != len {
                        local_error =
                            Some(format!("the request body stream gave {written} bytes, not the {len} announced"));
                        return Ok(());
                    }
                }
                Some(RequestBody::Empty) | None => io.write_all(&out).await?,
            }
            io.flush().await
        };
        let result = tokio::select! {
            r = result => r,
            _ = signals.closed.notified() => Err(std::io::Error::other("the connection was closed")),
        };
        signals.writing_body.store(false, Relaxed);
        out.clear();
        if let Some(reason) = local_error {
            *signals.abort_reason.lock().unwrap_or_else(|e| e.into_inner()) = reason;
            signals.abort.store(true, Relaxed);
            signals.reader.notify_one();
            return;
        }
        if result.is_err() {
            // The peer closed or reset: the reader sees it too, after reading whatever
            // responses arrived before (a `Connection: close` answer, say).
            return;
        }
    }
}

enum Read {
    Data,
    Eof,
    Failed(std::io::Error),
    TimedOut,
    Aborted,
}

/// How a response body is delimited (RFC 9112 section 6.3).
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The reading half of a connection: one response at a time, in request order.
struct Reader {
    shared: Arc<Shared>,
    key: u64,
    signals: Arc<Signals>,
    io: ReadHalf<Box<dyn Io>>,
    buf: BytesMut,
    connection_id: u64,
    /// This reader's own future, for the bodies it streams to drive ([`ChannelBody`]).
    driver: Weak<Driver>,
}

impl Reader {
    async fn run(mut self) {
        while let Some(job) = self.next_job().await {
            if !self.answer(job).await {
                return;
            }
        }
    }

    /// Waits for the oldest written request; `None` once the connection is closed. While
    /// idle, notices a peer that closes, an idle time-out, and bytes nobody asked for.
    async fn next_job(&mut self) -> Option<Job> {
        let idle_deadline = tokio::time::Instant::now() + self.shared.idle_timeout;
        loop {
            let notified = self.signals.reader.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let idle = {
                let mut st = self.shared.lock();
                let slot = st.conns.iter_mut().find(|s| s.key == self.key)?;
                if let Some(job) = slot.written.pop_front() {
                    return Some(job);
                }
                if slot.in_flight == 0 && !slot.accepting {
                    // Retired (or told to close) and nothing left to answer.
                    drop(st);
                    self.shared.close(self.key, None, false);
                    return None;
                }
                slot.in_flight == 0
            };
            // Nothing written is unanswered, so buffered bytes answer nothing (a 408 before
            // an idle close, or a peer that sent more than it framed).
            let stray = !self.buf.is_empty();
            if stray || self.signals.abort.load(Relaxed) || (idle && self.shared.shutdown.load(Relaxed)) {
                self.shared.close(self.key, None, false);
                return None;
            }
            self.buf.reserve(READ_CHUNK);
            tokio::select! {
                _ = &mut notified => {}
                r = self.io.read_buf(&mut self.buf) => {
                    let unsolicited = match r {
                        Ok(n) if n > 0 => {
                            let st = self.shared.lock();
                            st.conns.iter().find(|s| s.key == self.key).is_some_and(|s| s.written.is_empty())
                        }
                        _ => true,
                    };
                    if unsolicited {
                        // Closed while idle, or bytes no request asked for (a 408 before
                        // an idle close): not usable for the next request either way.
                        self.shared.close(self.key, None, false);
                        return None;
                    }
                }
                _ = tokio::time::sleep_until(idle_deadline), if idle => {
                    let still_idle = self.shared.lock().conns.iter().find(|s| s.key == self.key).is_some_and(|s| s.in_flight == 0);
                    if still_idle {
                        self.shared.close(self.key, None, false);
                        return None;
                    }
                }
            }
        }
    }

    /// Reads more bytes into `buf`, until `deadline`.
    async fn read_more(&mut self, deadline: tokio::time::Instant) -> Read {
        loop {
            if self.signals.abort.load(Relaxed) {
                return Read::Aborted;
            }
            let notified = self.signals.reader.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.signals.abort.load(Relaxed) {
                return Read::Aborted;
            }
            self.buf.reserve(READ_CHUNK);
            // Bytes already here win over an expired deadline: a body's consumer that drives
            // this reader (ChannelBody) may come back after a pause longer than the limit.
            tokio::select! {
                biased;
                r = self.io.read_buf(&mut self.buf) => return match r {
                    Ok(0) => Read::Eof,
                    Ok(_) => Read::Data,
                    Err(e) => Read::Failed(e),
                },
                _ = tokio::time::sleep_until(deadline) => return Read::TimedOut,
                _ = &mut notified => {}
            }
        }
    }

    /// Reads one response and its body; false when the connection is done.
    async fn answer(&mut self, job: Job) -> bool {
        let mut deadline = tokio::time::Instant::now() + self.shared.response_timeout;
        let parsed = loop {
            match parse_head(&self.buf) {
                Ok(Some((n, head))) => {
                    self.buf.advance(n);
                    // 1xx interim responses (100 Continue, 103 Early Hints) precede the
                    // real one (RFC 9110 section 15.2); 101 was never asked for.
                    if head.status.is_informational() && head.status != StatusCode::SWITCHING_PROTOCOLS {
                        continue;
                    }
                    break Ok(head);
                }
                Ok(None) if self.buf.len() > MAX_HEAD_BYTES => {
                    break Err(WireError::protocol(format!("response head longer than {MAX_HEAD_BYTES} bytes")))
                }
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            let why = match self.read_more(deadline).await {
                Read::Data => continue,
                Read::Eof => "the peer closed the connection".to_string(),
                Read::Failed(e) => format!("reading the response head: {e}"),
                Read::Aborted => self.signals.abort_reason.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                Read::TimedOut
                    if self.signals.writing_body.load(Relaxed)
                        && self.signals.written.last() + self.shared.response_timeout > Instant::now() =>
                {
                    // An upload still going out: its time-out runs from its last byte.
                    deadline = (self.signals.written.last() + self.shared.response_timeout).into();
                    continue;
                }
                Read::TimedOut if self.shared.not_pipelining(&job) => {
                    format!("no response head within {:?} to a stacked request", self.shared.response_timeout)
                }
                Read::TimedOut => {
                    let mut job = job;
                    job.spoil_batch();
                    let msg = format!("no response head within {:?}", self.shared.response_timeout);
                    let _ = job.reply.send(Err(WireError::new(ErrorKind::Timeout, msg)));
                    self.shared.close(self.key, None, true);
                    return false;
                }
            };
            self.shared.close(self.key, Some((job, why)), false);
            return false;
        };
        let mut head = match parsed {
            Ok(h) if matches!(h.status.as_u16(), 400 | 505) && self.shared.not_pipelining(&job) => {
                let why = format!("answered {} to a stacked request", h.status);
                self.shared.close(self.key, Some((job, why)), false);
                return false;
            }
            Ok(h) => h,
            Err(e) if self.shared.not_pipelining(&job) => {
                self.shared.close(self.key, Some((job, e.to_string())), false);
                return false;
            }
            Err(e) => {
                let mut job = job;
                job.spoil_batch();
                let _ = job.reply.send(Err(e));
                self.shared.close(self.key, None, true);
                return false;
            }
        };
        if head.status == StatusCode::SWITCHING_PROTOCOLS {
            let _ = job
                .reply
                .send(Err(WireError::protocol("101 Switching Protocols to a request that asked for no upgrade")));
            self.shared.close(self.key, None, true);
            return false;
        }
        let (framing, mut keep_alive) = match framing(job.head_request, &mut head) {
            Ok(f) => f,
            Err(e) => {
                let _ = job.reply.send(Err(e));
                self.shared.close(self.key, None, true);
                return false;
            }
        };
        if !keep_alive {
            self.shared.stop_accepting(self.key);
        }
        let Job { reply, batch, reused, started, on_wire, .. } = job;
        let meta = ResponseMeta {
            protocol: Protocol::Http1,
            connection_id: self.connection_id,
            reused_connection: reused,
            time_to_head: started.elapsed(),
            head_latency: on_wire.map(|t| t.elapsed()),
        };
        let good_status = !matches!(head.status.as_u16(), 400 | 505);
        let complete = match framing {
            Framing::Empty => {
                self.account(batch, good_status);
                let _ = reply.send(Ok(Response {
                    status: head.status,
                    headers: head.headers,
                    body: ResponseBody::empty(),
                    meta,
                }));
                true
            }
            framing => {
                let (tx, rx) = mpsc::channel(BODY_CHANNEL);
                let len = match framing {
                    Framing::Length(n) => Some(n),
                    _ => None,
                };
                // If the caller is gone, the body receiver drops with it and the body is
                // discarded like a dropped body.
                let _ = reply.send(Ok(Response {
                    status: head.status,
                    headers: head.headers,
                    body: ChannelBody::response_body(rx, len, self.driver.upgrade()),
                    meta,
                }));
                let mut tx = Some(tx);
                let (complete, reusable, last) = self.stream_body(framing, &mut tx).await;
                keep_alive &= reusable;
                // Recorded before the caller can see its last byte, so that a caller who
                // read every body of a batch also sees `verified()`.
                self.account(batch, complete && good_status);
                if let Some(piece) = last {
                    deliver(&mut tx, piece, true).await;
                }
                complete
            }
        };
        if !complete || !keep_alive {
            self.shared.close(self.key, None, true);
            return false;
        }
        self.shared.finish(self.key);
        true
    }

    /// Counts one answered request of a batch; the batch verifies the endpoint once two
    /// were answered well, none badly, and no stray bytes followed an answer that left
    /// nothing written behind it.
    fn account(&self, batch: Option<Arc<Batch>>, good: bool) {
        let Some(b) = batch else { return };
        let stray = !self.buf.is_empty()
            && self.shared.lock().conns.iter().find(|s| s.key == self.key).is_some_and(|s| s.written.is_empty());
        if !good || stray {
            b.ok.store(false, Relaxed);
        } else if b.answered() && b.ok.load(Relaxed) {
            self.shared.verified.store(true, Relaxed);
        }
    }

    /// Streams one body to its caller, all but its last piece. Returns (framing ended where
    /// it should, connection reusable, the last piece to deliver).
    async fn stream_body(
        &mut self,
        framing: Framing,
        tx: &mut Option<mpsc::Sender<BodyMsg>>,
    ) -> (bool, bool, Option<Bytes>) {
        let timeout = self.shared.response_timeout;
        match framing {
            Framing::Empty => unreachable!("no body to stream"),
            Framing::Length(total) => {
                let mut left = total;
                loop {
                    if tx.is_none() && left > MAX_DISCARD {
                        return (false, false, None);
                    }
                    if self.buf.is_empty() && left > 0 {
                        match self.read_more(tokio::time::Instant::now() + timeout).await {
                            Read::Data => continue,
                            r => {
                                let e = body_failure(&r, timeout, total - left, Some(total), || {
                                    format!("after {} of {total} body bytes", total - left)
                                });
                                fail(tx, e).await;
                                return (false, false, None);
                            }
                        }
                    }
                    let n = left.min(self.buf.len() as u64);
                    left -= n;
                    let piece = self.buf.split_to(n as usize).freeze();
                    if left == 0 {
                        return (true, true, Some(piece));
                    }
                    deliver(tx, piece, false).await;
                }
            }
            Framing::Chunked => {
                let mut decoder = ChunkedDecoder::new();
                let mut pieces = Vec::new();
                let mut discarded = 0u64;
                loop {
                    let before = self.buf.len();
                    if let Err(e) = decoder.decode(&mut self.buf, &mut pieces) {
                        fail(tx, WireError::protocol(format!("chunked response body: {e}"))).await;
                        return (false, false, None);
                    }
                    if tx.is_none() {
                        discarded += (before - self.buf.len()) as u64;
                    }
                    let done = decoder.is_done();
                    let last = if done { pieces.pop() } else { None };
                    for piece in pieces.drain(..) {
                        deliver(tx, piece, false).await;
                    }
                    if done {
                        return (true, true, Some(last.unwrap_or_default()));
                    }
                    if tx.is_none() && discarded > MAX_DISCARD {
                        return (false, false, None);
                    }
                    match self.read_more(tokio::time::Instant::now() + timeout).await {
                        Read::Data => {}
                        r => {
                            let decoded = decoder.decoded_bytes();
                            let e = body_failure(&r, timeout, decoded, None, || {
                                format!("after {decoded} decoded body bytes, before the last chunk")
                            });
                            fail(tx, e).await;
                            return (false, false, None);
                        }
                    }
                }
            }
            Framing::UntilClose => {
                let mut received = 0u64;
                loop {
                    if !self.buf.is_empty() {
                        let piece = self.buf.split().freeze();
                        received += piece.len() as u64;
                        deliver(tx, piece, false).await;
                    }
                    if tx.is_none() {
                        return (false, false, None);
                    }
                    match self.read_more(tokio::time::Instant::now() + timeout).await {
                        Read::Data => {}
                        Read::Eof => return (true, false, Some(Bytes::new())),
                        r => {
                            let e = body_failure(&r, timeout, received, None, || {
                                "in a body delimited by the connection's close".into()
                            });
                            fail(tx, e).await;
                            return (false, false, None);
                        }
                    }
                }
            }
        }
    }
}

/// Why a body read `received` of `expected` bytes and no more. One that stopped arriving
/// is a time-out worded as in the other transports (`body::stall_error`; both are
/// retry-safe for idempotent requests, and a GET resumes after either); one that ended
/// or failed is truncated, and `where_` says where in the body.
fn body_failure(
    r: &Read,
    timeout: std::time::Duration,
    received: u64,
    expected: Option<u64>,
    where_: impl FnOnce() -> String,
) -> WireError {
    let why = match r {
        Read::TimedOut => return crate::body::stall_error(timeout, received, expected),
        Read::Data => "more data".to_owned(),
        Read::Eof => "the connection closed".to_owned(),
        Read::Failed(e) => format!("the connection failed ({e})"),
        Read::Aborted => "the request could not be written".to_owned(),
    };
    WireError::new(ErrorKind::BodyTruncated, format!("{why} {}", where_()))
}

/// Hands a body piece to the caller; once the caller is gone, pieces are dropped.
async fn deliver(tx: &mut Option<mpsc::Sender<BodyMsg>>, piece: Bytes, last: bool) {
    if let Some(t) = tx {
        if (!piece.is_empty() || last) && t.send(BodyMsg::Chunk(piece, last)).await.is_err() {
            *tx = None;
        }
    }
}

async fn fail(tx: &mut Option<mpsc::Sender<BodyMsg>>, err: WireError) {
    if let Some(t) = tx.take() {
        let _ = t.send(BodyMsg::Fail(err)).await;
    }
}

/// A body fed by a connection's reader through a channel of [`BODY_CHANNEL`] pieces.
///
/// While more than [`DRIVE_ABOVE`] of its bytes are still to come, a body whose channel
/// is empty polls the reader itself before it waits (drive.rs), so a large body is read
/// from the socket on its consumer's task. Below that, and for bodies of unknown length,
/// the reader's own task does the reading: it can then finish the body into the channel
/// and go on to the next response on its own, as it always could, even when the
/// consumer pauses before its last bytes. Small bodies never drive, so requests pipelined
/// behind them never wait for their consumer's task.
///
/// A channel that closes without its last piece is a truncated body, never a short
/// success.
struct ChannelBody {
    rx: mpsc::Receiver<BodyMsg>,
    done: bool,
    /// The connection's reader while this body drives it.
    driver: Option<Arc<Driver>>,
    /// Whether this body polled the reader (so the reader's task must be woken when it
    /// stops).
    drove: bool,
    /// Bytes still to come, when the framing says.
    remaining: Option<u64>,
}

/// A body drives its connection's reader only while more than this is still to come: what
/// the channel and one socket read hold, which the reader's task delivers alone.
const DRIVE_ABOVE: u64 = (BODY_CHANNEL * READ_CHUNK) as u64;

impl ChannelBody {
    fn response_body(rx: mpsc::Receiver<BodyMsg>, len: Option<u64>, driver: Option<Arc<Driver>>) -> ResponseBody {
        let driver = driver.filter(|_| len.is_some_and(|n| n > DRIVE_ABOVE));
        ResponseBody::new(ChannelBody { rx, done: false, driver, drove: false, remaining: len }.boxed(), len)
    }

    fn stop_driving(&mut self) {
        if let Some(driver) = self.driver.take() {
            if self.drove {
                driver.hand_back();
            }
        }
    }
}

impl Drop for ChannelBody {
    fn drop(&mut self) {
        self.stop_driving();
    }
}

impl futures_util::Stream for ChannelBody {
    type Item = Result<Bytes, WireError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let mut drove_now = false;
        loop {
            if this.done {
                this.stop_driving();
                return Poll::Ready(None);
            }
            let msg = match this.rx.poll_recv(cx) {
                Poll::Ready(msg) => msg,
                Poll::Pending => match &this.driver {
                    Some(driver) if !drove_now => {
                        driver.drive(cx);
                        this.drove = true;
                        drove_now = true;
                        continue;
                    }
                    _ => return Poll::Pending,
                },
            };
            let item = match msg {
                Some(BodyMsg::Chunk(b, last)) => {
                    this.done = last;
                    if b.is_empty() {
                        continue;
                    }
                    let left = this.remaining.map(|n| n.saturating_sub(b.len() as u64));
                    this.remaining = left;
                    if left.is_some_and(|n| n <= DRIVE_ABOVE) {
                        this.stop_driving();
                    }
                    Ok(b)
                }
                Some(BodyMsg::Fail(e)) => {
                    this.done = true;
                    Err(e)
                }
                None => {
                    this.done = true;
                    Err(WireError::new(ErrorKind::BodyTruncated, "the connection ended mid-body"))
                }
            };
            if this.done {
                this.stop_driving();
            }
            return Poll::Ready(Some(item));
        }
    }
}

struct Head {
    status: StatusCode,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    version: u8,
    headers: HeaderMap,
}

/// One response head from the start of `buf`: `Ok(None)` if incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<(usize, Head)>, WireError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut fields);
    let n = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(WireError::protocol(format!("unparseable response head: {e}"))),
    };
    let status =
        StatusCode::from_u16(resp.code.unwrap_or(0)).map_err(|_| WireError::protocol("invalid status code"))?;
    let mut headers = HeaderMap::with_capacity(resp.headers.len());
    for f in resp.headers.iter() {
        let name = HeaderName::from_bytes(f.name.as_bytes())
            .map_err(|_| WireError::protocol(format!("invalid header name '{}'", f.name)))?;
        let value = HeaderValue::from_bytes(f.value)
            .map_err(|_| WireError::protocol(format!("invalid value of header '{}'", f.name)))?;
        headers.append(name, value);
    }
    Ok(Some((n, Head { status, version: resp.version.unwrap_or(1), headers })))
}

fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .any(|v| v.to_str().unwrap_or("").split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// The body's framing and whether the connection stays open after it
/// (RFC 9112 sections 6.3 and 9.3).
fn framing(head_request: bool, head: &mut Head) -> Result<(Framing, bool), WireError> {
    let mut keep_alive = if head.version >= 1 {
        !has_token(&head.headers, &CONNECTION, "close")
    } else {
        has_token(&head.headers, &CONNECTION, "keep-alive")
    };
    let code = head.status.as_u16();
    if head_request || code == 204 || code == 304 {
        return Ok((Framing::Empty, keep_alive));
    }
    if head.headers.contains_key(TRANSFER_ENCODING) {
        let last = head
            .headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|t| !t.is_empty());
        if head.headers.contains_key(CONTENT_LENGTH) {
            // Both: Transfer-Encoding wins and the connection must close after.
            keep_alive = false;
        }
        return Ok(if last.is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            (Framing::Chunked, keep_alive)
        } else {
            (Framing::UntilClose, false)
        });
    }
    let mut length = None;
    for v in head.headers.get_all(CONTENT_LENGTH) {
        for part in v.to_str().unwrap_or("x").split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(WireError::protocol(format!("invalid Content-Length '{part}'")));
            }
            let n: u64 = part.parse().map_err(|_| WireError::protocol(format!("Content-Length '{part}' overflows")))?;
            if length.is_some_and(|l| l != n) {
                return Err(WireError::protocol("conflicting Content-Length values"));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => (Framing::Empty, keep_alive),
        Some(n) => (Framing::Length(n), keep_alive),
        None => (Framing::UntilClose, false),
    })
}
