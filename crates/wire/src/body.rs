//! Request and response bodies.
//!
//! A request body is empty, a buffer (replayable: it can be re-sent after a failure), or
//! a stream of known length (sent once). A response body is a stream of chunks pulled by
//! the caller: nothing is read from the socket faster than the caller reads, which is
//! the backpressure the transport contract promises.
//!
//! Body bookkeeping shared by pool.rs and h2.rs: `BodyTally` counts data bytes against
//! the announced length and tells the owner's `BodyGuard` once the last byte is in (so
//! its connection or stream is reused at once); a body that ends short, fails or runs long
//! becomes an error, and the guard is dropped untold (its connection is not reused).

use crate::error::{ErrorKind, WireError};
use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

pub enum RequestBody {
    Empty,
    Full(Bytes),
    /// Exactly `len` bytes from `stream`.
    Stream {
        len: u64,
        stream: BoxStream<'static, io::Result<Bytes>>,
    },
}

impl RequestBody {
    pub fn len(&self) -> u64 {
        match self {
            RequestBody::Empty => 0,
            RequestBody::Full(b) => b.len() as u64,
            RequestBody::Stream { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy for re-sending, when the body can be replayed.
    pub fn try_clone(&self) -> Option<RequestBody> {
        match self {
            RequestBody::Empty => Some(RequestBody::Empty),
            RequestBody::Full(b) => Some(RequestBody::Full(b.clone())),
            RequestBody::Stream { .. } => None,
        }
    }
}

impl From<Bytes> for RequestBody {
    fn from(b: Bytes) -> Self {
        if b.is_empty() {
            RequestBody::Empty
        } else {
            RequestBody::Full(b)
        }
    }
}

/// A response body: a stream of chunks, read at the caller's pace.
pub struct ResponseBody {
    inner: BoxStream<'static, Result<Bytes, WireError>>,
    content_length: Option<u64>,
}

impl ResponseBody {
    pub fn new(inner: BoxStream<'static, Result<Bytes, WireError>>, content_length: Option<u64>) -> ResponseBody {
        ResponseBody { inner, content_length }
    }

    pub fn empty() -> ResponseBody {
        ResponseBody { inner: futures_util::stream::empty().boxed(), content_length: Some(0) }
    }

    pub fn from_bytes(b: Bytes) -> ResponseBody {
        let len = b.len() as u64;
        ResponseBody { inner: futures_util::stream::once(async move { Ok(b) }).boxed(), content_length: Some(len) }
    }

    /// The length the response announced, if any.
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The next chunk, `None` at the end.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, WireError>> {
        self.inner.next().await
    }

    /// Reads the whole body; fails past `limit` bytes (for XML and error bodies).
    pub async fn collect(mut self, limit: usize) -> Result<Bytes, WireError> {
        if self.content_length.is_some_and(|n| n > limit as u64) {
            return Err(WireError::protocol(format!(
                "response body of {} bytes exceeds the {limit}-byte limit",
                self.content_length.unwrap_or(0)
            )));
        }
        let mut out = Vec::new();
        while let Some(c) = self.chunk().await {
            let c = c?;
            if out.len() + c.len() > limit {
                return Err(WireError::protocol(format!("response body exceeds the {limit}-byte limit")));
            }
            out.extend_from_slice(&c);
        }
        Ok(Bytes::from(out))
    }
}

impl Stream for ResponseBody {
    type Item = Result<Bytes, WireError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

/// Whoever owns the connection or stream a response body comes from.
pub(crate) trait BodyGuard: Send + 'static {
    /// Response body bytes received.
    fn data(&mut self, _n: usize) {}
    /// The body was read to its end. Dropping the guard without this call means the
    /// body was abandoned or failed.
    fn finished(self: Box<Self>);
}

/// What the HTTP/1.1 and HTTP/2 response bodies share: data bytes counted against the
/// announced length, the guard told once the last byte is in, and the errors for a body
/// that ends short, fails, or runs long. Each error ends the body (the guard is dropped
/// untold, so its connection or stream is not reused).
pub(crate) struct BodyTally {
    guard: Option<Box<dyn BodyGuard>>,
    received: u64,
    expected: Option<u64>,
    done: bool,
    /// Read to its end, as opposed to ended by an error.
    completed: bool,
}

impl BodyTally {
    pub(crate) fn new(guard: Box<dyn BodyGuard>, expected: Option<u64>) -> BodyTally {
        BodyTally { guard: Some(guard), received: 0, expected, done: false, completed: false }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Whether the body was read to its end (not ended by an error, nor still open).
    pub(crate) fn completed(&self) -> bool {
        self.completed
    }

    /// The body is complete: tell the guard.
    pub(crate) fn finish(&mut self) {
        self.done = true;
        self.completed = true;
        if let Some(g) = self.guard.take() {
            g.finished();
        }
    }

    /// A chunk of data; `end_stream`: the source says nothing follows it. The connection
    /// is handed back as soon as the last byte is in: a caller that stops after
    /// Content-Length bytes must not cost a connection.
    pub(crate) fn data(&mut self, data: Bytes, end_stream: bool) -> Result<Bytes, WireError> {
        self.received += data.len() as u64;
        if let Some(g) = self.guard.as_mut() {
            g.data(data.len());
        }
        if self.expected.is_some_and(|n| self.received > n) {
            self.end_failed();
            return Err(WireError::protocol("response body longer than its Content-Length"));
        }
        if end_stream && self.expected.is_none_or(|n| self.received == n) {
            self.finish();
        }
        Ok(data)
    }

    /// The source failed mid-body.
    pub(crate) fn failed(&mut self, source: impl std::error::Error + Send + Sync + 'static) -> WireError {
        self.truncated().with_source(source)
    }

    /// The source ended: `None` when the body is complete, else the truncation error.
    pub(crate) fn ended(&mut self) -> Option<WireError> {
        if self.expected.is_some_and(|n| self.received < n) {
            return Some(self.truncated());
        }
        self.finish();
        None
    }

    /// No body byte for `limit` while the reader waited ([`crate::exchange::StallClock`]):
    /// a time-out, retry-safe as the request is, after which a GET resumes with Range.
    pub(crate) fn stalled(&mut self, limit: std::time::Duration) -> WireError {
        self.end_failed();
        stall_error(limit, self.received, self.expected)
    }

    fn end_failed(&mut self) {
        self.done = true;
        self.guard = None;
    }

    fn truncated(&mut self) -> WireError {
        self.end_failed();
        let want = self.expected.map(|n| format!(" of {n}")).unwrap_or_default();
        WireError::new(ErrorKind::BodyTruncated, format!("response body ended after {}{want} bytes", self.received))
    }
}

/// A response body that stopped arriving for `limit`, after `received` of `expected`
/// bytes: one wording for every transport (the pipeline reads its bodies itself).
pub(crate) fn stall_error(limit: std::time::Duration, received: u64, expected: Option<u64>) -> WireError {
    let of = expected.map(|n| format!(" of {n}")).unwrap_or_default();
    WireError::new(ErrorKind::Timeout, format!("no response body bytes for {limit:?} (after {received}{of} bytes)"))
}
