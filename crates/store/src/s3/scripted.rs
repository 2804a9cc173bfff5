//! A scripted [`Transport`] for unit tests: it answers each request with the next
//! scripted response (or transport error) and records what it was sent.
//!
//! It stands in for the network only in unit tests of this crate, to drive exact
//! sequences (a 503 then a 200, a body cut at byte k, a corrupted body) that a real
//! server cannot be made to produce on demand. Integration tests run against
//! `ferry serve` over real transports.

use bytes::{Bytes, BytesMut};
use ferry_wire::{
    ErrorKind, Protocol, Request, RequestBody, Response, ResponseBody, ResponseMeta, Transport, TransportStats,
    WireError,
};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted answer.
pub(crate) enum Scripted {
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        chunks: Vec<Bytes>,
        content_length: Option<u64>,
        then: Option<ErrorKind>,
    },
    Fail(ErrorKind),
}

impl Scripted {
    pub(crate) fn status(status: u16) -> Scripted {
        Scripted::Respond { status, headers: Vec::new(), chunks: Vec::new(), content_length: Some(0), then: None }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Scripted {
        if let Scripted::Respond { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }

    /// The whole body, with a matching Content-Length.
    pub(crate) fn body(mut self, b: impl Into<Bytes>) -> Scripted {
        let b: Bytes = b.into();
        if let Scripted::Respond { chunks, content_length, .. } = &mut self {
            *content_length = Some(b.len() as u64);
            *chunks = vec![b];
        }
        self
    }

    /// Announces `len` bytes but sends only `partial`, then fails with `kind` (a body
    /// cut mid-way, as the transport reports it).
    pub(crate) fn cut_body(mut self, len: u64, partial: impl Into<Bytes>, kind: ErrorKind) -> Scripted {
        if let Scripted::Respond { chunks, content_length, then, .. } = &mut self {
            *content_length = Some(len);
            *chunks = vec![partial.into()];
            *then = Some(kind);
        }
        self
    }
}

/// A recorded request.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) method: Method,
    pub(crate) path_and_query: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The response length the request told the transport, typed.
    pub(crate) expected_len: Option<u64>,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
pub(crate) struct ScriptedTransport {
    script: Mutex<VecDeque<Scripted>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl ScriptedTransport {
    pub(crate) fn new() -> ScriptedTransport {
        ScriptedTransport::default()
    }

    pub(crate) fn with(script: Vec<Scripted>) -> Arc<ScriptedTransport> {
        Arc::new(ScriptedTransport { script: Mutex::new(script.into()), requests: Arc::default() })
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.script.lock().unwrap().len()
    }
}

impl Transport for ScriptedTransport {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let next = self.script.lock().unwrap().pop_front();
        let requests = self.requests.clone();
        Box::pin(async move {
            let expected_len = req.expected_len();
            let body = match req.body {
                RequestBody::Empty => Bytes::new(),
                RequestBody::Full(b) => b,
                RequestBody::Stream { mut stream, .. } => {
                    let mut buf = BytesMut::new();
                    while let Some(c) = stream.next().await {
                        buf.extend_from_slice(&c.map_err(|e| WireError::new(ErrorKind::Reset, e.to_string()))?);
                    }
                    buf.freeze()
                }
            };
            requests.lock().unwrap().push(Recorded {
                method: req.method,
                path_and_query: req.path_and_query,
                headers: req.headers,
                body,
                expected_len,
            });
            match next.expect("the scripted transport ran out of responses") {
                Scripted::Fail(kind) => Err(WireError::new(kind, "scripted failure")),
                Scripted::Respond { status, headers, chunks, content_length, then } => {
                    let mut map = HeaderMap::new();
                    for (k, v) in headers {
                        map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap());
                    }
                    if let Some(n) = content_length {
                        map.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
                    }
                    let mut items: Vec<Result<Bytes, WireError>> = chunks.into_iter().map(Ok).collect();
                    if let Some(kind) = then {
                        items.push(Err(WireError::new(kind, "scripted body failure")));
                    }
                    Ok(Response {
                        status: StatusCode::from_u16(status).unwrap(),
                        headers: map,
                        body: ResponseBody::new(futures_util::stream::iter(items).boxed(), content_length),
                        meta: ResponseMeta {
                            protocol: Protocol::Http1,
                            connection_id: 1,
                            reused_connection: false,
                            time_to_head: Duration::ZERO,
                            head_latency: None,
                        },
                    })
                }
            }
        })
    }

    fn stats(&self) -> TransportStats {
        TransportStats::default()
    }

    fn name(&self) -> &'static str {
        "scripted"
    }
}
