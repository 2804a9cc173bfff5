//! The client's pipelined HTTP/1.1 responses (crates/wire/src/pipeline.rs): status line
//! and headers (httparse and our framing rules: Content-Length, chunked, until-close,
//! 1xx interim answers, `Connection: close`), chunked bodies, and the reader that hands
//! each response of a pipelined connection to its request.
//!
//! The input is what a server writes on one connection: one or more responses, as
//! captured from `ferry serve` answering boto3, the AWS CLI, s5cmd and ferry. A scripted
//! peer on a real loopback socket reads the client's pipelined requests (as many as the
//! input has status lines, 1 to 8; some HEAD when the input says so), writes the input in
//! pieces and closes; later connections (the client re-sending what went unanswered) are
//! closed at once. Properties:
//! - no panic, no hang (every request is answered or fails within the time-outs);
//! - a body read to its end is exactly its Content-Length (a 204 or 304 has none): a
//!   short one is an error, never a short success;
//! - the bodies delivered never hold more bytes than the peer wrote;
//! - when the input is a plain sequence of Content-Length responses, one per request
//!   (an independent parse says so), every request gets its own status and body.

use super::{cuts, pieces, Dice};
use bytes::Bytes;
use ferry_wire::pipeline::PipelineTransport;
use ferry_wire::{Endpoint, Request, Transport, TransportConfig};
use http::Method;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const MAX_REQUESTS: usize = 8;
/// Most body bytes a caller reads; the input is far smaller.
const BODY_LIMIT: usize = 1 << 20;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}

/// Request heads in `buf` (GETs and HEADs carry no body, so each ends at a blank line).
fn heads(buf: &[u8]) -> usize {
    buf.windows(4).filter(|w| w == b"\r\n\r\n").count()
}

/// The peer: connection 0 waits for `expect` request heads (or a short while), writes
/// the script in pieces and closes; every later connection is closed at once.
async fn peer(listener: TcpListener, script: Vec<u8>, expect: usize) {
    let mut first = true;
    loop {
        let Ok((mut sock, _)) = listener.accept().await else { return };
        if !first {
            drop(sock);
            continue;
        }
        first = false;
        let script = script.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            let gather = async {
                while heads(&seen) < expect {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_millis(200), gather).await;
            for p in pieces(&script, &cuts(&script, 4)) {
                if sock.write_all(p).await.is_err() {
                    return;
                }
                let _ = sock.flush().await;
                tokio::task::yield_now().await;
            }
            let _ = sock.shutdown().await;
        });
    }
}

/// An independent reading of `input` as `n` plain responses framed by Content-Length
/// (no 1xx, no chunked, no close before the last, nothing after the last); `None` when
/// the input is anything else.
fn plain_responses(input: &[u8], n: usize) -> Option<Vec<(u16, Bytes)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < input.len() {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut fields);
        let Ok(httparse::Status::Complete(h)) = resp.parse(&input[at..]) else { return None };
        let status = resp.code?;
        if !(200..600).contains(&status) || status == 204 || status == 304 || resp.version != Some(1) {
            return None;
        }
        let mut length = None;
        for f in resp.headers.iter() {
            let name = f.name.to_ascii_lowercase();
            let value = std::str::from_utf8(f.value).ok()?.trim();
            match name.as_str() {
                "content-length"
                    if length.is_none() && !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    length = Some(value.parse::<usize>().ok()?)
                }
                "content-length" | "transfer-encoding" => return None,
                "connection" if value.eq_ignore_ascii_case("keep-alive") => {}
                "connection" => return None,
                _ => {}
            }
            http::HeaderName::from_bytes(f.name.as_bytes()).ok()?;
            http::HeaderValue::from_bytes(f.value).ok()?;
        }
        let length = length?;
        let start = at + h;
        if input.len() < start + length {
            return None;
        }
        out.push((status, Bytes::copy_from_slice(&input[start..start + length])));
        at = start + length;
    }
    (out.len() == n).then_some(out)
}

/// Runs one input through the properties above; panics where one fails.
pub fn check(input: &[u8]) {
    let n = heads_in_script(input);
    let mut dice = Dice::new(input);
    let head_requests: Vec<bool> = (0..n).map(|_| dice.below(8) == 0).collect();
    let expected = if head_requests.iter().any(|h| *h) { None } else { plain_responses(input, n) };
    let results = runtime().block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let peer = tokio::spawn(peer(listener, input.to_vec(), n));
        let mut config = TransportConfig::new(Endpoint::parse(&format!("http://{addr}")).expect("endpoint"));
        config.max_connections = 1;
        config.pipeline_depth = MAX_REQUESTS;
        config.connect_timeout = Duration::from_secs(2);
        config.response_timeout = Duration::from_secs(2);
        config.idle_timeout = Duration::from_secs(2);
        let transport = PipelineTransport::new(config).expect("transport");
        let calls = head_requests.iter().enumerate().map(|(i, head)| {
            let method = if *head { Method::HEAD } else { Method::GET };
            let send = transport.send(Request::new(method, format!("/fuzz/{i}")));
            async move {
                let resp = send.await?;
                // RFC 9110 sections 8.6 and 15.3.5: a 204 or 304 has no content, whatever its
                // Content-Length says (it describes the representation).
                let no_content = matches!(resp.status.as_u16(), 204 | 304);
                let declared = if no_content || resp.headers.contains_key(http::header::TRANSFER_ENCODING) {
                    None
                } else {
                    resp.headers
                        .get(http::header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                };
                let status = resp.status.as_u16();
                let body = resp.body.collect(BODY_LIMIT).await;
                Ok::<_, ferry_wire::WireError>((status, declared, body))
            }
        });
        let all = futures_util::future::join_all(calls);
        let results = tokio::time::timeout(Duration::from_secs(30), all).await.expect("every request ends");
        peer.abort();
        results
    });
    let mut delivered = 0;
    for (i, r) in results.iter().enumerate() {
        if let Ok((_, declared, Ok(body))) = r {
            delivered += body.len();
            if let Some(len) = declared {
                if !head_requests[i] {
                    assert_eq!(body.len() as u64, *len, "request {i}: a body short of its Content-Length succeeded");
                }
            }
        }
    }
    assert!(delivered <= input.len(), "{delivered} body bytes delivered from {} written", input.len());
    if let Some(expected) = expected {
        for (i, (r, (status, body))) in results.iter().zip(&expected).enumerate() {
            match r {
                Ok((s, _, Ok(b))) => {
                    assert_eq!((*s, b), (*status, body), "request {i} got another response");
                }
                Ok((_, _, Err(e))) => panic!("request {i}: its body failed: {e}"),
                Err(e) => panic!("request {i} failed: {e}"),
            }
        }
    }
}

/// Status lines at the start of the input or of a line: how many requests to send.
fn heads_in_script(input: &[u8]) -> usize {
    let starts = input.windows(7).enumerate().filter(|(i, w)| *w == b"HTTP/1." && (*i == 0 || input[i - 1] == b'\n'));
    starts.count().clamp(1, MAX_REQUESTS)
}
