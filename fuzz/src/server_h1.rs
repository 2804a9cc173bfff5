//! The server's HTTP/1.1 connection (crates/server/src/h1.rs): request heads (httparse and
//! our framing rules), Content-Length and chunked bodies, pipelining, `Expect:
//! 100-continue`, then the whole S3 request path behind it (routing, query parameters,
//! XML bodies, aws-chunked uploads with trailers, ranges, conditional headers) on an
//! anonymous in-memory `ferry serve` with one bucket, `fuzz`.
//!
//! The input is what a client writes on one connection (one or several pipelined
//! requests, as captured from boto3, the AWS CLI, s5cmd and ferry), delivered in pieces
//! at points drawn from the input, then the client's half closes. Properties of what the
//! server writes back:
//! - no panic (in the connection or in any handler task) and no hang;
//! - it is a sequence of complete HTTP/1.1 responses, in request order: each head
//!   parses, each body is exactly its Content-Length (none for HEAD, 1xx, 204, 304),
//!   with no stray byte after;
//! - nothing follows a response that says `Connection: close`, and without one every
//!   request gets its answer;
//! - no 500: malformed input is the client's error (4xx or 501/505), never the server's.

use super::{cuts, pieces};
use ferry_server::app::App;
use ferry_server::{ServeConfig, Storage};
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}

async fn app() -> Arc<App> {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().expect("address"));
    config.storage = Storage::Memory;
    config.credentials = None;
    config.synthetic_bucket = None;
    let app = App::new(config).await.expect("an in-memory server starts");
    app.backend.create_bucket("fuzz").await.expect("bucket");
    Arc::new(app)
}

/// The methods of the requests in `input`, in order, as far as they can be told apart
/// (Content-Length and chunked framing; the first head that does not parse ends it).
fn request_methods(input: &[u8]) -> Vec<String> {
    let mut methods = Vec::new();
    let mut buf = bytes::BytesMut::from(input);
    loop {
        while buf.starts_with(b"\r\n") {
            let _ = buf.split_to(2);
        }
        let mut fields = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut fields);
        let Ok(httparse::Status::Complete(n)) = req.parse(&buf) else { return methods };
        let Some(method) = req.method else { return methods };
        methods.push(method.to_owned());
        let field = |name: &str| req.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
        let chunked = field("transfer-encoding").is_some();
        let length = field("content-length").and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<usize>().ok());
        let _ = buf.split_to(n);
        if chunked {
            let mut d = ferry_proto::chunked::ChunkedDecoder::new();
            if d.decode(&mut buf, &mut Vec::new()).is_err() || !d.is_done() {
                return methods;
            }
        } else {
            let length = length.unwrap_or(0);
            if length > buf.len() {
                return methods;
            }
            let _ = buf.split_to(length);
        }
    }
}

/// Checks that `out` is a sequence of complete responses, the i-th final one answering
/// the i-th request of `methods` (a HEAD's answer announces a length it does not send,
/// unless the head was refused before it was routed).
fn check_responses(out: &[u8], methods: &[String]) {
    let mut at = 0;
    let mut finals = 0;
    let mut closed = false;
    while at < out.len() {
        assert!(!closed, "bytes after a Connection: close response: {:?}", String::from_utf8_lossy(&out[at..]));
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut fields);
        let n = match resp.parse(&out[at..]) {
            Ok(httparse::Status::Complete(n)) => n,
            other => panic!("unparseable response ({other:?}): {:?}", String::from_utf8_lossy(&out[at..])),
        };
        let status = resp.code.expect("a complete head has a status");
        assert_ne!(status, 500, "the server failed: {:?}", String::from_utf8_lossy(&out[at..]));
        let header = |name: &str| {
            resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| String::from_utf8_lossy(h.value))
        };
        assert!(header("transfer-encoding").is_none(), "the server frames by length only");
        let length: usize = match header("content-length") {
            Some(v) => v.trim().parse().expect("a numeric Content-Length"),
            None => {
                assert!(status < 200 || status == 204 || status == 304, "a {status} without Content-Length");
                0
            }
        };
        at += n;
        if status < 200 {
            continue;
        }
        closed = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let rest = &out[at..];
        let is_head = methods.get(finals).is_some_and(|m| m == "HEAD");
        finals += 1;
        let next_follows = |body: usize| rest.len() == body || rest[body..].starts_with(b"HTTP/1.1 ");
        if is_head && next_follows(0) {
            continue;
        }
        assert!(rest.len() >= length, "a body of {} bytes announced as {length}", rest.len());
        at += length;
    }
    // Unless it said it was closing, the server answered every request it was sent.
    assert!(closed || finals >= methods.len(), "{finals} answers to {} requests", methods.len());
}

/// Runs one input through the properties above; panics where one fails.
pub fn check(input: &[u8]) {
    let out = runtime().block_on(async {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let conn = tokio::spawn(ferry_server::fuzzing::serve_h1(server, app().await));
        let (mut rd, mut wr) = tokio::io::split(client);
        let write = async move {
            for p in pieces(input, &cuts(input, 4)) {
                if wr.write_all(p).await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
            let _ = wr.shutdown().await;
        };
        let read = async move {
            let mut out = Vec::new();
            let _ = rd.read_to_end(&mut out).await;
            out
        };
        let (_, out) = tokio::join!(write, read);
        conn.await.expect("the connection task does not panic");
        out
    });
    check_responses(&out, &request_methods(input));
}
