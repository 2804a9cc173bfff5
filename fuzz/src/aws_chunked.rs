//! S3's `Content-Encoding: aws-chunked` decoding (`ferry_proto::chunked::AwsChunkedDecoder`),
//! unsigned (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`) and signed
//! (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`, each chunk's signature chained from
//! the request's), with trailers: how the server reads the uploads of boto3, the AWS CLI
//! and the SDKs.
//!
//! The input is a raw aws-chunked body. Properties, in both modes:
//! - whole or in pieces, the same payload, verdict, error kind and trailers;
//! - the payload is never longer than the bytes consumed;
//! - the input taken as a payload, framed by our signer (`AwsChunkedSigner`) with a signed
//!   trailer, or unsigned with a trailer, decodes back to itself and its trailer.

use super::{cuts, pieces, Dice};
use bytes::BytesMut;
use ferry_proto::chunked::{AwsChunkedDecoder, AwsChunkedErrorKind, AwsChunkedMode, AwsChunkedSigner};
use ferry_proto::sigv4::{signing_key, SigningContext};

fn context() -> SigningContext {
    SigningContext {
        access_key: "ferry".into(),
        timestamp: "20260101T000000Z".into(),
        scope: "20260101/us-east-1/s3/aws4_request".into(),
        signing_key: signing_key("ferry-secret", "20260101", "us-east-1", "s3"),
        seed_signature: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9".into(),
        region: "us-east-1".into(),
    }
}

#[derive(Debug, PartialEq)]
struct Outcome {
    error: Option<AwsChunkedErrorKind>,
    done: bool,
    payload: Vec<u8>,
    trailers: Vec<(String, String)>,
}

fn decode(mode: AwsChunkedMode, parts: &[&[u8]]) -> Outcome {
    let mut d = AwsChunkedDecoder::new(mode);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut error = None;
    let mut fed = 0;
    for p in parts {
        buf.extend_from_slice(p);
        fed += p.len();
        if let Err(e) = d.decode(&mut buf, &mut out) {
            error = Some(e.kind());
            break;
        }
        if d.is_done() {
            break;
        }
    }
    let payload = out.concat();
    assert_eq!(payload.len() as u64, d.decoded_bytes());
    let consumed = fed - buf.len();
    assert!(payload.len() <= consumed, "payload {} longer than the {consumed} bytes consumed", payload.len());
    Outcome { error, done: d.is_done(), payload, trailers: d.trailers().to_vec() }
}

fn same_either_way(mode: AwsChunkedMode, input: &[u8]) -> Outcome {
    let whole = decode(mode.clone(), &[input]);
    let split = decode(mode, &pieces(input, &cuts(input, 6)));
    assert_eq!(whole, split, "the outcome depends on read boundaries");
    whole
}

/// Frames `payload` in chunks of sizes drawn from `dice`; signed when `signer` is given.
fn frame(payload: &[u8], dice: &mut Dice, signer: Option<&mut AwsChunkedSigner>) -> Vec<u8> {
    let trailers = vec![("x-amz-checksum-crc32c".to_owned(), "sOO8/Q==".to_owned())];
    let mut body = Vec::new();
    let mut at = 0;
    match signer {
        Some(s) => {
            while at < payload.len() {
                let n = (1 + dice.below(64)).min(payload.len() - at);
                body.extend(s.frame(&payload[at..at + n]));
                at += n;
            }
            let last = s.frame(b"");
            body.extend_from_slice(&last[..last.len() - 2]);
            let sig = s.trailer_signature(&trailers);
            body.extend_from_slice(
                format!("x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{sig}\r\n\r\n").as_bytes(),
            );
        }
        None => {
            while at < payload.len() {
                let n = (1 + dice.below(64)).min(payload.len() - at);
                body.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                body.extend_from_slice(&payload[at..at + n]);
                body.extend_from_slice(b"\r\n");
                at += n;
            }
            body.extend_from_slice(b"0\r\nx-amz-checksum-crc32c: sOO8/Q==\n\r\n");
        }
    }
    body
}

/// Runs one input through the properties above; panics where one fails.
pub fn check(input: &[u8]) {
    same_either_way(AwsChunkedMode::Unsigned, input);
    same_either_way(AwsChunkedMode::Signed(context()), input);

    let mut dice = Dice::new(input);
    let mut signer = AwsChunkedSigner::new(context());
    let body = frame(input, &mut dice, Some(&mut signer));
    let back = same_either_way(AwsChunkedMode::Signed(context()), &body);
    assert_eq!((back.error, back.done), (None, true), "our own signed framing did not decode");
    assert_eq!(back.payload, input);
    assert_eq!(back.trailers.len(), 2);
    assert_eq!(back.trailers[0], ("x-amz-checksum-crc32c".to_owned(), "sOO8/Q==".to_owned()));

    let body = frame(input, &mut dice, None);
    let back = same_either_way(AwsChunkedMode::Unsigned, &body);
    assert_eq!((back.error, back.done), (None, true), "our own unsigned framing did not decode");
    assert_eq!(back.payload, input);
    assert_eq!(back.trailers, vec![("x-amz-checksum-crc32c".to_owned(), "sOO8/Q==".to_owned())]);
}
