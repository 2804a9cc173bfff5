//! HTTP/1.1 `Transfer-Encoding: chunked` decoding (`ferry_proto::chunked::ChunkedDecoder`):
//! the server decodes request bodies with it (crates/server/src/h1.rs) and the pipelined
//! client response bodies (crates/wire/src/pipeline.rs).
//!
//! The input is a raw chunked body, as on the wire. Properties:
//! - fed whole or in pieces (at points drawn from the input), the decoder gives the same
//!   payload, the same verdict (error or not, done or not) and leaves the same bytes after
//!   the body: a read boundary never changes what a body means;
//! - the payload is never longer than the bytes consumed, and `decoded_bytes` counts it;
//! - the input taken as a payload, chunked by our own framing (sizes, extensions, a
//!   trailer, the next request behind it), decodes back to itself.

use super::{cuts, pieces, Dice};
use bytes::BytesMut;
use ferry_proto::chunked::ChunkedDecoder;

#[derive(Debug, PartialEq)]
struct Outcome {
    failed: bool,
    done: bool,
    payload: Vec<u8>,
    /// Bytes after the body (only meaningful when done).
    rest: Vec<u8>,
}

fn decode(parts: &[&[u8]]) -> Outcome {
    let mut d = ChunkedDecoder::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut failed = false;
    let mut fed = 0;
    for (i, p) in parts.iter().enumerate() {
        buf.extend_from_slice(p);
        fed = i + 1;
        if d.decode(&mut buf, &mut out).is_err() {
            failed = true;
            break;
        }
        if d.is_done() {
            break;
        }
    }
    let payload = out.concat();
    assert_eq!(payload.len() as u64, d.decoded_bytes(), "decoded_bytes counts the payload");
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let unfed: usize = parts[fed..].iter().map(|p| p.len()).sum();
    let consumed = total - unfed - buf.len();
    assert!(payload.len() <= consumed, "payload {} longer than the {consumed} bytes consumed", payload.len());
    assert!(!d.is_done() || d.finish().is_ok());
    let mut rest = buf.to_vec();
    for p in &parts[fed..] {
        rest.extend_from_slice(p);
    }
    Outcome { failed, done: d.is_done(), payload, rest }
}

/// Frames `payload` as a chunked body with sizes drawn from `dice`.
fn frame(payload: &[u8], dice: &mut Dice) -> Vec<u8> {
    let mut body = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let n = (1 + dice.below(64)).min(payload.len() - at);
        match dice.below(3) {
            0 => body.extend_from_slice(format!("{n:x}\r\n").as_bytes()),
            1 => body.extend_from_slice(format!("{n:X};name=value\r\n").as_bytes()),
            _ => body.extend_from_slice(format!("{n:08x} ;ext\r\n").as_bytes()),
        }
        body.extend_from_slice(&payload[at..at + n]);
        body.extend_from_slice(b"\r\n");
        at += n;
    }
    body.extend_from_slice(b"0\r\n");
    if dice.below(2) == 0 {
        body.extend_from_slice(b"x-amz-checksum-crc32: AAAAAA==\r\n");
    }
    body.extend_from_slice(b"\r\nGET /next HTTP/1.1\r\n");
    body
}

/// Runs one input through the properties above; panics where one fails.
pub fn check(input: &[u8]) {
    let whole = decode(&[input]);
    let split = decode(&pieces(input, &cuts(input, 6)));
    assert_eq!(whole.failed, split.failed, "error or not depends on read boundaries");
    assert_eq!(whole.done, split.done);
    assert_eq!(whole.payload, split.payload, "payload depends on read boundaries");
    if whole.done {
        assert_eq!(whole.rest, split.rest, "bytes after the body depend on read boundaries");
    }

    let mut dice = Dice::new(input);
    let body = frame(input, &mut dice);
    let framed = decode(&pieces(&body, &cuts(&body, 5)));
    assert!(!framed.failed && framed.done, "our own framing of {} bytes did not decode", input.len());
    assert_eq!(framed.payload, input);
    assert_eq!(framed.rest, b"GET /next HTTP/1.1\r\n");
}
