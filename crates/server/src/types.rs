//! The request and response shapes shared by the HTTP/1.1 and HTTP/2 front ends and the
//! S3 handlers.
//!
//! Both transports turn what they read into a [`Request`] whose body is pulled chunk by
//! chunk ([`Body::chunk`]), so an upload flows through with backpressure and is never
//! buffered whole. A handler answers with a [`Response`] whose body is empty, a small
//! buffer, or a stream of known length; the transport writes it, pacing it to the
//! emulated rate and cutting or stalling it when a fault says so.

use bytes::Bytes;
use futures_util::stream::BoxStream;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::BodyExt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Which protocol carried a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// An incoming request.
pub struct Request {
    pub method: Method,
    /// The path as sent on the wire, still percent-encoded, without the query.
    pub raw_path: String,
    /// The query after `?`, or "".
    pub raw_query: String,
    pub headers: HeaderMap,
    pub body: Body,
    pub protocol: Protocol,
    /// When the request head arrived: emulated first-byte delays count from here, so a
    /// pipelined request's think time overlaps the responses queued before it.
    pub arrived: Instant,
}

enum Source {
    Empty,
    Channel(mpsc::Receiver<io::Result<Bytes>>),
    H2(hyper::body::Incoming, BodyBudget),
}

/// How long the next read of a request body may wait: at most the body time-out, and all
/// reads together at most the body time-out plus one second per `min_rate` bytes received
/// (0: no such bound), so a body trickled a byte at a time also ends. Both transports
/// keep one per body: HTTP/1.1's reader around its socket reads, HTTP/2's around the
/// stream's DATA frames.
pub(crate) struct BodyBudget {
    idle: Duration,
    min_rate: u64,
    waited: Duration,
    received: u64,
}

impl BodyBudget {
    pub(crate) fn new(limits: &crate::config::Limits) -> BodyBudget {
        BodyBudget { idle: limits.body_timeout, min_rate: limits.body_min_rate, waited: Duration::ZERO, received: 0 }
    }

    /// The longest the next read may wait.
    pub(crate) fn limit(&self) -> Duration {
        match self.min_rate {
            0 => self.idle,
            rate => {
                let earned = Duration::from_secs_f64(self.received as f64 / rate as f64);
                self.idle.min((self.idle + earned).saturating_sub(self.waited))
            }
        }
    }

    /// Records a read that waited `waited` and brought `bytes`.
    pub(crate) fn spent(&mut self, waited: Duration, bytes: u64) {
        self.waited += waited;
        self.received += bytes;
    }
}

/// A request body, read chunk by chunk.
///
/// The HTTP/1.1 reader learns two things through it: when the handler first asks for
/// data (`wanted`: the moment to send `100 Continue`, so a request refused before its
/// body is read gets its error instead), and whether the handler read it to the end
/// ([`BodyEnd`]: if not, the connection closes after the response rather than read
/// bytes nobody wants, and no request after it is read).
pub struct Body {
    source: Source,
    /// The declared length, when the client sent Content-Length.
    pub content_length: Option<u64>,
    wanted: Option<oneshot::Sender<()>>,
    end: Option<BodyEnd>,
}

/// How an HTTP/1.1 handler left its request body: `finished` is set when it read the
/// end; `verdict` says so (true), or that the body was dropped unread (false).
pub(crate) struct BodyEnd {
    pub finished: Arc<AtomicBool>,
    pub verdict: oneshot::Sender<bool>,
}

impl Body {
    pub fn empty() -> Body {
        Body { source: Source::Empty, content_length: Some(0), wanted: None, end: None }
    }

    /// A body fed by the HTTP/1.1 reader. `wanted` fires on the handler's first read;
    /// `end` reports whether the handler read to the end.
    pub(crate) fn channel(
        rx: mpsc::Receiver<io::Result<Bytes>>,
        content_length: Option<u64>,
        wanted: Option<oneshot::Sender<()>>,
        end: BodyEnd,
    ) -> Body {
        Body { source: Source::Channel(rx), content_length, wanted, end: Some(end) }
    }

    pub(crate) fn h2(incoming: hyper::body::Incoming, content_length: Option<u64>, budget: BodyBudget) -> Body {
        Body { source: Source::H2(incoming, budget), content_length, wanted: None, end: None }
    }

    /// The next chunk; `None` at the end. An error means the body was cut short or
    /// malformed, and the request must not take effect.
    pub async fn chunk(&mut self) -> Option<io::Result<Bytes>> {
        if let Some(wanted) = self.wanted.take() {
            let _ = wanted.send(());
        }
        match &mut self.source {
            Source::Empty => None,
            Source::Channel(rx) => {
                let next = rx.recv().await;
                if next.is_none() {
                    if let Some(end) = self.end.take() {
                        end.finished.store(true, Ordering::Release);
                        let _ = end.verdict.send(true);
                    }
                }
                next
            }
            Source::H2(incoming, budget) => loop {
                let t0 = Instant::now();
                let next = tokio::time::timeout(budget.limit(), incoming.frame()).await;
                match next {
                    Err(_) => return Some(Err(io::Error::new(io::ErrorKind::TimedOut, "the request body stalled"))),
                    Ok(None) => return None,
                    Ok(Some(Err(e))) => return Some(Err(io::Error::new(io::ErrorKind::UnexpectedEof, e))),
                    Ok(Some(Ok(frame))) => {
                        let data = frame.into_data().unwrap_or_default();
                        budget.spent(t0.elapsed(), data.len() as u64);
                        if !data.is_empty() {
                            return Some(Ok(data));
                        }
                    }
                }
            },
        }
    }

    /// Reads the whole body, failing with `TooLarge` past `limit` bytes.
    pub async fn read_to_end(&mut self, limit: usize) -> Result<Bytes, BodyReadError> {
        if self.content_length.is_some_and(|n| n > limit as u64) {
            return Err(BodyReadError::TooLarge);
        }
        let mut buf = Vec::new();
        while let Some(chunk) = self.chunk().await {
            let chunk = chunk.map_err(BodyReadError::Io)?;
            if buf.len() + chunk.len() > limit {
                return Err(BodyReadError::TooLarge);
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(buf))
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(end) = self.end.take() {
            let _ = end.verdict.send(false);
        }
    }
}

#[derive(Debug)]
pub enum BodyReadError {
    TooLarge,
    Io(io::Error),
}

/// A response body.
pub enum RespBody {
    Empty,
    Full(Bytes),
    /// A stream that yields exactly `len` bytes.
    Stream {
        stream: BoxStream<'static, io::Result<Bytes>>,
        len: u64,
    },
}

impl RespBody {
    pub fn len(&self) -> u64 {
        match self {
            RespBody::Empty => 0,
            RespBody::Full(b) => b.len() as u64,
            RespBody::Stream { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A fault applied to a response body on its way out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BodyFault {
    /// Reset the connection (HTTP/1.1) or the stream (HTTP/2) after this many body bytes.
    Reset { after_bytes: u64 },
    /// Pause this long after this many body bytes.
    Stall { after_bytes: u64, pause: Duration },
}

/// An outgoing response. The transport adds Content-Length (from `content_length` when
/// set, for HEAD; otherwise from the body), Date, Server and the request id.
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: RespBody,
    /// For HEAD and 304: the length to announce without sending a body.
    pub content_length: Option<u64>,
    pub fault: Option<BodyFault>,
    /// Ask the transport to close the connection after this response.
    pub close: bool,
}

impl Response {
    pub fn new(status: u16) -> Response {
        Response {
            status,
            headers: HeaderMap::new(),
            body: RespBody::Empty,
            content_length: None,
            fault: None,
            close: false,
        }
    }

    pub fn with_body(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Response {
        let mut r = Response::new(status);
        r.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r.body = RespBody::Full(body.into());
        r
    }

    /// Appends a header; `name` is a `HeaderName` constant on hot paths (a `&'static str`
    /// is parsed on every call).
    pub fn header(mut self, name: impl http::header::IntoHeaderName, value: &str) -> Response {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.append(name, v);
        }
        self
    }

    /// The Content-Length the response announces.
    pub fn announced_length(&self) -> u64 {
        self.content_length.unwrap_or_else(|| self.body.len())
    }
}
