//! Push-style decoders for HTTP/1.1 `Transfer-Encoding: chunked` and S3's
//! `Content-Encoding: aws-chunked`.
//!
//! Design note: both decoders are fed whatever bytes the socket produced
//! (`decode(&mut input, &mut out)`), consume every complete element, leave
//! an incomplete line in `input`, and push payload pieces to `out` as
//! zero-copy `Bytes` split off `input`. Payload is never buffered: a data
//! chunk of any size streams through, so memory is bounded by the line
//! limits below. Bytes after the end of the body are left in `input` (the
//! next pipelined request). Neither decoder panics on any input; a proptest
//! feeds random bytes at random split points.
//!
//! State machine (shared shape):
//!
//! ```text
//!          ┌──────────── size > 0 ───────────┐
//!          v                                 │
//!   ┌─> SizeLine ── size = 0 ──> Trailers ──(empty line)──> Done
//!   │      │ size > 0                  ^  │
//!   │      v                           └──┘ name:value line
//!   │    Data(remaining) ──(0 left)──> DataCrlf
//!   └──────────────────────────────────────┘
//! ```
//!
//! HTTP/1.1 chunked: <https://www.rfc-editor.org/rfc/rfc9112#section-7.1>.
//! Lines must end in CRLF (no bare-LF leniency: a decoder that is laxer than
//! a front proxy invites request smuggling). Extensions are ignored, trailer
//! fields are skipped.
//!
//! aws-chunked: <https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html>
//! and <https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming-trailers.html>.
//! Each chunk is `hex-size[;chunk-signature=sig]\r\n data \r\n`; the final
//! chunk has size 0 and is followed by trailer lines and an empty line. In
//! signed mode each chunk signature chains off the previous one (starting at
//! the request's seed signature) and is verified when the chunk's data is
//! complete. Data is released before its signature is checked; the caller
//! must discard the whole upload on any error. Trailer lines are accepted
//! with CRLF or bare LF because SDKs differ there; the body itself is
//! already framed by the outer HTTP layer, so no smuggling risk.

use bytes::{Bytes, BytesMut};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::sigv4::{SigningContext, EMPTY_SHA256_HEX};

/// Longest chunk-size line (size + extensions). A signed aws-chunked line is
/// ~90 bytes; 4 KiB leaves room for any sane extension.
pub const MAX_SIZE_LINE_BYTES: usize = 4 * 1024;
/// Largest trailer section. S3 sends one or two checksum trailers (< 200 bytes).
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// Framing error in an HTTP/1.1 chunked body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("chunk-size line longer than {MAX_SIZE_LINE_BYTES} bytes")]
    SizeLineTooLong,
    #[error("invalid chunk-size line")]
    InvalidSize,
    #[error("chunk size overflows 64 bits")]
    SizeOverflow,
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    #[error("trailer section longer than {MAX_TRAILER_BYTES} bytes")]
    TrailerTooLarge,
    #[error("body ended before the last chunk")]
    Incomplete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    SizeLine,
    Data { remaining: u64 },
    DataCrlf,
    Trailers { seen_bytes: usize },
    Done,
}

/// Outcome of looking for one line in the input.
enum Line {
    /// A line (terminator stripped) of this many bytes, consuming `consumed`.
    Complete {
        len: usize,
        consumed: usize,
    },
    Incomplete,
}

/// Finds the next line. `allow_bare_lf` accepts `\n` alone as a terminator.
/// Returns `Err(())` on a bare LF when not allowed.
fn find_line(input: &[u8], allow_bare_lf: bool) -> Result<Line, ()> {
    match input.iter().position(|&b| b == b'\n') {
        None => Ok(Line::Incomplete),
        Some(pos) => {
            if pos > 0 && input[pos - 1] == b'\r' {
                Ok(Line::Complete { len: pos - 1, consumed: pos + 1 })
            } else if allow_bare_lf {
                Ok(Line::Complete { len: pos, consumed: pos + 1 })
            } else {
                Err(())
            }
        }
    }
}

/// Parses `hex-size [BWS] [; ext]*`; returns the size and the extension part.
fn parse_size_line(line: &[u8]) -> Result<(u64, &[u8]), ChunkedError> {
    let hex_len = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if hex_len == 0 {
        return Err(ChunkedError::InvalidSize);
    }
    let mut size: u64 = 0;
    for &b in &line[..hex_len] {
        let d = (b as char).to_digit(16).ok_or(ChunkedError::InvalidSize)? as u64;
        size = size.checked_mul(16).and_then(|s| s.checked_add(d)).ok_or(ChunkedError::SizeOverflow)?;
    }
    let rest = &line[hex_len..];
    let rest_trimmed = {
        let n = rest.iter().take_while(|b| **b == b' ' || **b == b'\t').count();
        &rest[n..]
    };
    if !rest_trimmed.is_empty() && rest_trimmed[0] != b';' {
        return Err(ChunkedError::InvalidSize);
    }
    Ok((size, rest_trimmed))
}

/// Decoder for `Transfer-Encoding: chunked`.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    phase: Phase,
    decoded_bytes: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        Self { phase: Phase::SizeLine, decoded_bytes: 0 }
    }

    /// True once the last chunk and the trailer section were consumed.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Payload bytes emitted so far.
    pub fn decoded_bytes(&self) -> u64 {
        self.decoded_bytes
    }

    /// Call at end of input: `Err(Incomplete)` unless [`is_done`](Self::is_done).
    pub fn finish(&self) -> Result<(), ChunkedError> {
        if self.is_done() {
            Ok(())
        } else {
            Err(ChunkedError::Incomplete)
        }
    }

    /// Consumes as much of `input` as possible, pushing payload to `out`.
    pub fn decode(&mut self, input: &mut BytesMut, out: &mut Vec<Bytes>) -> Result<(), ChunkedError> {
        loop {
            match self.phase {
                Phase::Done => return Ok(()),
                Phase::SizeLine => {
                    let window = &input[..input.len().min(MAX_SIZE_LINE_BYTES + 2)];
                    match find_line(window, false).map_err(|_| ChunkedError::InvalidSize)? {
                        Line::Incomplete => {
                            if input.len() > MAX_SIZE_LINE_BYTES + 1 {
                                return Err(ChunkedError::SizeLineTooLong);
                            }
                            return Ok(());
                        }
                        Line::Complete { len, consumed } => {
                            if len > MAX_SIZE_LINE_BYTES {
                                return Err(ChunkedError::SizeLineTooLong);
                            }
                            let (size, _ext) = parse_size_line(&input[..len])?;
                            let _ = input.split_to(consumed);
                            self.phase = if size == 0 {
                                Phase::Trailers { seen_bytes: 0 }
                            } else {
                                Phase::Data { remaining: size }
                            };
                        }
                    }
                }
                Phase::Data { remaining } => {
                    if input.is_empty() {
                        return Ok(());
                    }
                    let n = (input.len() as u64).min(remaining) as usize;
                    out.push(input.split_to(n).freeze());
                    self.decoded_bytes += n as u64;
                    let left = remaining - n as u64;
                    self.phase = if left == 0 { Phase::DataCrlf } else { Phase::Data { remaining: left } };
                }
                Phase::DataCrlf => {
                    if input.len() < 2 {
                        if input.first().is_some_and(|b| *b != b'\r') {
                            return Err(ChunkedError::MissingCrlf);
                        }
                        return Ok(());
                    }
                    if &input[..2] != b"\r\n" {
                        return Err(ChunkedError::MissingCrlf);
                    }
                    let _ = input.split_to(2);
                    self.phase = Phase::SizeLine;
                }
                Phase::Trailers { seen_bytes } => {
                    let budget = MAX_TRAILER_BYTES - seen_bytes;
                    let window = &input[..input.len().min(budget + 2)];
                    match find_line(window, false).map_err(|_| ChunkedError::MissingCrlf)? {
                        Line::Incomplete => {
                            if input.len() > budget + 1 {
                                return Err(ChunkedError::TrailerTooLarge);
                            }
                            return Ok(());
                        }
                        Line::Complete { len, consumed } => {
                            let _ = input.split_to(consumed);
                            if len == 0 {
                                self.phase = Phase::Done;
                            } else {
                                let seen = seen_bytes + consumed;
                                if seen > MAX_TRAILER_BYTES {
                                    return Err(ChunkedError::TrailerTooLarge);
                                }
                                self.phase = Phase::Trailers { seen_bytes: seen };
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Whether aws-chunked chunk signatures are checked.
#[derive(Debug, Clone)]
pub enum AwsChunkedMode {
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: signatures, if any, are ignored.
    Unsigned,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`: every chunk signature
    /// is verified, chained from the request signature.
    Signed(SigningContext),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AwsChunkedErrorKind {
    /// Input ended before the final chunk and trailer section.
    IncompleteBody,
    /// A chunk or trailer signature did not verify.
    SignatureDoesNotMatch,
    /// Framing error.
    Malformed,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct AwsChunkedError {
    kind: AwsChunkedErrorKind,
    message: String,
}

impl AwsChunkedError {
    pub fn new(kind: AwsChunkedErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
    pub fn kind(&self) -> AwsChunkedErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

fn malformed(m: impl Into<String>) -> AwsChunkedError {
    AwsChunkedError::new(AwsChunkedErrorKind::Malformed, m)
}

fn bad_signature(m: impl Into<String>) -> AwsChunkedError {
    AwsChunkedError::new(AwsChunkedErrorKind::SignatureDoesNotMatch, m)
}

/// Signature chain state for signed mode.
#[derive(Debug, Clone)]
struct Chain {
    ctx: SigningContext,
    previous_signature: String,
    /// Signature announced for the chunk being received.
    pending_signature: String,
    data_hash: Sha256,
}

impl Chain {
    /// `AWS4-HMAC-SHA256-PAYLOAD` string to sign for the current chunk.
    fn verify_chunk(&mut self) -> Result<(), AwsChunkedError> {
        let data_hash = hex::encode(std::mem::take(&mut self.data_hash).finalize());
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256_HEX}\n{data_hash}",
            self.ctx.timestamp, self.ctx.scope, self.previous_signature
        );
        let expected = self.ctx.sign(sts.as_bytes());
        if !ct_eq_hex(&expected, &self.pending_signature) {
            return Err(bad_signature("chunk signature does not match"));
        }
        self.previous_signature = expected;
        Ok(())
    }

    /// `AWS4-HMAC-SHA256-TRAILER` check of the trailer section.
    fn verify_trailer(&self, trailers: &[(String, String)], signature: &str) -> Result<(), AwsChunkedError> {
        let mut canon = String::new();
        for (k, v) in trailers {
            canon.push_str(k);
            canon.push(':');
            canon.push_str(v);
            canon.push('\n');
        }
        let sts = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{}\n{}",
            self.ctx.timestamp,
            self.ctx.scope,
            self.previous_signature,
            hex::encode(Sha256::digest(canon.as_bytes()))
        );
        let expected = self.ctx.sign(sts.as_bytes());
        if !ct_eq_hex(&expected, signature) {
            return Err(bad_signature("trailer signature does not match"));
        }
        Ok(())
    }
}

fn ct_eq_hex(expected: &str, provided: &str) -> bool {
    let provided = provided.trim().to_ascii_lowercase();
    expected.len() == provided.len() && bool::from(expected.as_bytes().ct_eq(provided.as_bytes()))
}

/// Decoder for `Content-Encoding: aws-chunked` bodies.
#[derive(Debug, Clone)]
pub struct AwsChunkedDecoder {
    phase: Phase,
    chain: Option<Chain>,
    trailers: Vec<(String, String)>,
    trailer_signature: Option<String>,
    decoded_bytes: u64,
}

/// Name of the trailer that signs the trailer section.
pub const TRAILER_SIGNATURE: &str = "x-amz-trailer-signature";

impl AwsChunkedDecoder {
    pub fn new(mode: AwsChunkedMode) -> Self {
        let chain = match mode {
            AwsChunkedMode::Unsigned => None,
            AwsChunkedMode::Signed(ctx) => Some(Chain {
                previous_signature: ctx.seed_signature.clone(),
                ctx,
                pending_signature: String::new(),
                data_hash: Sha256::new(),
            }),
        };
        Self { phase: Phase::SizeLine, chain, trailers: Vec::new(), trailer_signature: None, decoded_bytes: 0 }
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Decoded payload bytes so far (compare with `x-amz-decoded-content-length`).
    pub fn decoded_bytes(&self) -> u64 {
        self.decoded_bytes
    }

    /// Trailer fields, names lower-cased, values trimmed, in arrival order.
    /// Includes `x-amz-trailer-signature` when sent.
    pub fn trailers(&self) -> &[(String, String)] {
        &self.trailers
    }

    /// Call at end of input: `IncompleteBody` unless [`is_done`](Self::is_done).
    pub fn finish(&self) -> Result<(), AwsChunkedError> {
        if self.is_done() {
            Ok(())
        } else {
            Err(AwsChunkedError::new(
                AwsChunkedErrorKind::IncompleteBody,
                "aws-chunked body ended before the final chunk",
            ))
        }
    }

    fn on_size_line(&mut self, line: &[u8]) -> Result<u64, AwsChunkedError> {
        let (size, ext) = parse_size_line(line).map_err(|e| malformed(format!("bad chunk header: {e}")))?;
        if let Some(chain) = &mut self.chain {
            let sig = ext
                .split(|b| *b == b';')
                .filter_map(|e| {
                    let e = e.trim_ascii();
                    e.strip_prefix(b"chunk-signature=")
                })
                .next()
                .ok_or_else(|| bad_signature("chunk is missing its chunk-signature"))?;
            chain.pending_signature = String::from_utf8_lossy(sig).into_owned();
            if size == 0 {
                chain.verify_chunk()?;
            }
        }
        Ok(size)
    }

    fn on_trailer_line(&mut self, line: &[u8]) -> Result<(), AwsChunkedError> {
        let line = std::str::from_utf8(line).map_err(|_| malformed("trailer is not UTF-8"))?;
        let (name, value) = line.split_once(':').ok_or_else(|| malformed("trailer line without ':'"))?;
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() {
            return Err(malformed("empty trailer name"));
        }
        let value = value.trim().to_owned();
        if name == TRAILER_SIGNATURE {
            self.trailer_signature = Some(value.clone());
        } else if self.trailer_signature.is_some() {
            return Err(malformed("trailer after x-amz-trailer-signature"));
        }
        self.trailers.push((name, value));
        Ok(())
    }

    fn on_trailers_done(&mut self) -> Result<(), AwsChunkedError> {
        let Some(chain) = &self.chain else {
            return Ok(());
        };
        let signed: Vec<(String, String)> =
            self.trailers.iter().filter(|(k, _)| k != TRAILER_SIGNATURE).cloned().collect();
        match &self.trailer_signature {
            Some(sig) => chain.verify_trailer(&signed, sig),
            None if signed.is_empty() => Ok(()),
            None => Err(bad_signature("signed aws-chunked trailers need x-amz-trailer-signature")),
        }
    }

    /// Consumes as much of `input` as possible, pushing payload to `out`.
    pub fn decode(&mut self, input: &mut BytesMut, out: &mut Vec<Bytes>) -> Result<(), AwsChunkedError> {
        loop {
            match self.phase {
                Phase::Done => return Ok(()),
                Phase::SizeLine => {
                    let window = &input[..input.len().min(MAX_SIZE_LINE_BYTES + 2)];
                    match find_line(window, false).map_err(|_| malformed("chunk header not terminated by CRLF"))? {
                        Line::Incomplete => {
                            if input.len() > MAX_SIZE_LINE_BYTES + 1 {
                                return Err(malformed("chunk header too long"));
                            }
                            return Ok(());
                        }
                        Line::Complete { len, consumed } => {
                            if len > MAX_SIZE_LINE_BYTES {
                                return Err(malformed("chunk header too long"));
                            }
                            let line = input.split_to(consumed);
                            let size = self.on_size_line(&line[..len])?;
                            self.phase = if size == 0 {
                                Phase::Trailers { seen_bytes: 0 }
                            } else {
                                Phase::Data { remaining: size }
                            };
                        }
                    }
                }
                Phase::Data { remaining } => {
                    if input.is_empty() {
                        return Ok(());
                    }
                    let n = (input.len() as u64).min(remaining) as usize;
                    let piece = input.split_to(n).freeze();
                    if let Some(chain) = &mut self.chain {
                        chain.data_hash.update(&piece);
                    }
                    out.push(piece);
                    self.decoded_bytes += n as u64;
                    let left = remaining - n as u64;
                    if left == 0 {
                        if let Some(chain) = &mut self.chain {
                            chain.verify_chunk()?;
                        }
                        self.phase = Phase::DataCrlf;
                    } else {
                        self.phase = Phase::Data { remaining: left };
                    }
                }
                Phase::DataCrlf => {
                    if input.len() < 2 {
                        if input.first().is_some_and(|b| *b != b'\r') {
                            return Err(malformed("chunk data not followed by CRLF"));
                        }
                        return Ok(());
                    }
                    if &input[..2] != b"\r\n" {
                        return Err(malformed("chunk data not followed by CRLF"));
                    }
                    let _ = input.split_to(2);
                    self.phase = Phase::SizeLine;
                }
                Phase::Trailers { seen_bytes } => {
                    let budget = MAX_TRAILER_BYTES - seen_bytes;
                    let window = &input[..input.len().min(budget + 2)];
                    match find_line(window, true).map_err(|_| malformed("bad trailer line"))? {
                        Line::Incomplete => {
                            if input.len() > budget + 1 {
                                return Err(malformed("trailer section too large"));
                            }
                            return Ok(());
                        }
                        Line::Complete { len, consumed } => {
                            let line = input.split_to(consumed);
                            if len == 0 {
                                self.on_trailers_done()?;
                                self.phase = Phase::Done;
                            } else {
                                let seen = seen_bytes + consumed;
                                if seen > MAX_TRAILER_BYTES {
                                    return Err(malformed("trailer section too large"));
                                }
                                self.on_trailer_line(&line[..len])?;
                                self.phase = Phase::Trailers { seen_bytes: seen };
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Client-side encoder for signed aws-chunked bodies (and a test oracle for
/// the decoder). Produces one framed chunk per call.
#[derive(Debug, Clone)]
pub struct AwsChunkedSigner {
    ctx: SigningContext,
    previous_signature: String,
}

impl AwsChunkedSigner {
    pub fn new(ctx: SigningContext) -> Self {
        Self { previous_signature: ctx.seed_signature.clone(), ctx }
    }

    /// Signature of the next chunk with this data; advances the chain.
    pub fn chunk_signature(&mut self, data: &[u8]) -> String {
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256_HEX}\n{}",
            self.ctx.timestamp,
            self.ctx.scope,
            self.previous_signature,
            hex::encode(Sha256::digest(data))
        );
        self.previous_signature = self.ctx.sign(sts.as_bytes());
        self.previous_signature.clone()
    }

    /// `hex(len);chunk-signature=sig\r\n data \r\n`. Pass empty data for the
    /// final chunk; for it the trailing CRLF is the end of the (empty)
    /// trailer section.
    pub fn frame(&mut self, data: &[u8]) -> Vec<u8> {
        let sig = self.chunk_signature(data);
        let mut out = format!("{:x};chunk-signature={sig}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    }

    /// `x-amz-trailer-signature` value for these trailers (call after the final chunk).
    pub fn trailer_signature(&self, trailers: &[(String, String)]) -> String {
        let canon: String = trailers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let sts = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{}\n{}",
            self.ctx.timestamp,
            self.ctx.scope,
            self.previous_signature,
            hex::encode(Sha256::digest(canon.as_bytes()))
        );
        self.ctx.sign(sts.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sigv4::{self, SignableRequest};
    use proptest::prelude::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn run_chunked(pieces: &[&[u8]]) -> Result<(Vec<u8>, bool, BytesMut), ChunkedError> {
        let mut d = ChunkedDecoder::new();
        let mut input = BytesMut::new();
        let mut out = Vec::new();
        for p in pieces {
            input.extend_from_slice(p);
            d.decode(&mut input, &mut out)?;
        }
        Ok((out.concat(), d.is_done(), input))
    }

    #[test]
    fn chunked_basic() {
        let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (data, done, rest) = run_chunked(&[body]).unwrap();
        assert_eq!(data, b"Wikipedia in\r\n\r\nchunks.");
        assert!(done);
        assert_eq!(&rest[..], b"NEXT");
        // Byte at a time.
        let pieces: Vec<&[u8]> = body.chunks(1).collect();
        let (data2, done2, rest2) = run_chunked(&pieces).unwrap();
        assert_eq!((data2, done2, &rest2[..]), (data, true, &b"NEXT"[..]));
    }

    #[test]
    fn chunked_errors() {
        assert_eq!(run_chunked(&[b"zz\r\n"]).unwrap_err(), ChunkedError::InvalidSize);
        assert_eq!(run_chunked(&[b"\r\n"]).unwrap_err(), ChunkedError::InvalidSize);
        assert_eq!(run_chunked(&[b"4\n"]).unwrap_err(), ChunkedError::InvalidSize);
        assert_eq!(run_chunked(&[b"4x\r\n"]).unwrap_err(), ChunkedError::InvalidSize);
        assert_eq!(run_chunked(&[b"10000000000000000\r\n"]).unwrap_err(), ChunkedError::SizeOverflow);
        assert_eq!(run_chunked(&[b"2\r\nabX"]).unwrap_err(), ChunkedError::MissingCrlf);
        let long = vec![b'1'; MAX_SIZE_LINE_BYTES + 10];
        assert_eq!(run_chunked(&[&long]).unwrap_err(), ChunkedError::SizeLineTooLong);
        let mut long_ext = b"1;".to_vec();
        long_ext.extend(vec![b'a'; MAX_SIZE_LINE_BYTES + 10]);
        assert_eq!(run_chunked(&[&long_ext]).unwrap_err(), ChunkedError::SizeLineTooLong);
        let mut big_trailer = b"0\r\n".to_vec();
        for _ in 0..2000 {
            big_trailer.extend_from_slice(b"X-Trailer: 123\r\n");
        }
        assert_eq!(run_chunked(&[&big_trailer]).unwrap_err(), ChunkedError::TrailerTooLarge);
        let (_, done, _) = run_chunked(&[b"3\r\nabc\r\n0\r\n"]).unwrap();
        assert!(!done);
        assert_eq!(ChunkedDecoder::new().finish(), Err(ChunkedError::Incomplete));
    }

    fn run_aws(mode: AwsChunkedMode, pieces: &[&[u8]]) -> Result<(Vec<u8>, AwsChunkedDecoder), AwsChunkedError> {
        let mut d = AwsChunkedDecoder::new(mode);
        let mut input = BytesMut::new();
        let mut out = Vec::new();
        for p in pieces {
            input.extend_from_slice(p);
            d.decode(&mut input, &mut out)?;
        }
        Ok((out.concat(), d))
    }

    #[test]
    fn aws_unsigned_with_trailer() {
        let body = b"2\r\nhi\r\n3\r\n yo\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n";
        let (data, d) = run_aws(AwsChunkedMode::Unsigned, &[body]).unwrap();
        assert_eq!(data, b"hi yo");
        assert!(d.is_done());
        assert_eq!(d.decoded_bytes(), 5);
        assert_eq!(d.trailers(), &[("x-amz-checksum-crc32".to_owned(), "AAAAAA==".to_owned())]);
        // Bare-LF trailers are tolerated; signatures ignored in unsigned mode.
        let body = b"2;chunk-signature=00\r\nhi\r\n0\r\nX-Amz-Checksum-CRC32C : abc\n\n";
        let (_, d) = run_aws(AwsChunkedMode::Unsigned, &[body]).unwrap();
        assert!(d.is_done());
        assert_eq!(d.trailers()[0].0, "x-amz-checksum-crc32c");
        // No final empty line: not done.
        let (_, d) = run_aws(AwsChunkedMode::Unsigned, &[b"0\r\n"]).unwrap();
        assert!(!d.is_done());
        assert_eq!(d.finish().unwrap_err().kind(), AwsChunkedErrorKind::IncompleteBody);
        assert_eq!(
            run_aws(AwsChunkedMode::Unsigned, &[b"2\r\nhiX"]).unwrap_err().kind(),
            AwsChunkedErrorKind::Malformed
        );
    }

    /// AWS example from sigv4-streaming.html: 64 KiB + 1 KiB of 'a'.
    fn aws_example_context() -> SigningContext {
        let mut h = http::HeaderMap::new();
        for (k, v) in [
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("content-length", "66824"),
            ("authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"),
        ] {
            h.insert(http::HeaderName::from_static(k), http::HeaderValue::from_static(v));
        }
        let req =
            SignableRequest { method: "PUT", raw_path: "/examplebucket/chunkObject.txt", raw_query: "", headers: &h };
        let now = UNIX_EPOCH + Duration::from_secs(1_369_353_600);
        sigv4::verify(&req, &|_| Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into()), now, Duration::from_secs(900))
            .unwrap()
    }

    fn aws_example_body() -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(
            b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n",
        );
        body.extend(vec![b'a'; 65536]);
        body.extend_from_slice(
            b"\r\n400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n",
        );
        body.extend(vec![b'a'; 1024]);
        body.extend_from_slice(
            b"\r\n0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n",
        );
        body
    }

    #[test]
    fn aws_signed_example() {
        let ctx = aws_example_context();
        let body = aws_example_body();
        assert_eq!(body.len(), 66824);
        let (data, d) = run_aws(AwsChunkedMode::Signed(ctx.clone()), &[&body]).unwrap();
        assert_eq!(data.len(), 66560);
        assert!(d.is_done());
        // Same through odd split points.
        let pieces: Vec<&[u8]> = body.chunks(777).collect();
        let (data, d) = run_aws(AwsChunkedMode::Signed(ctx.clone()), &pieces).unwrap();
        assert_eq!(data.len(), 66560);
        assert!(d.is_done());
        // Our signer reproduces the framing.
        let mut s = AwsChunkedSigner::new(ctx.clone());
        let ours = [s.frame(&vec![b'a'; 65536]), s.frame(&vec![b'a'; 1024]), s.frame(b"")].concat();
        assert_eq!(ours, body);
        // One flipped data byte is caught.
        let mut bad = body.clone();
        bad[200] = b'b';
        let e = run_aws(AwsChunkedMode::Signed(ctx.clone()), &[&bad]).unwrap_err();
        assert_eq!(e.kind(), AwsChunkedErrorKind::SignatureDoesNotMatch);
        // Missing signature in signed mode.
        let e = run_aws(AwsChunkedMode::Signed(ctx), &[b"1\r\na\r\n"]).unwrap_err();
        assert_eq!(e.kind(), AwsChunkedErrorKind::SignatureDoesNotMatch);
    }

    #[test]
    fn aws_signed_trailer_roundtrip() {
        let ctx = aws_example_context();
        let mut s = AwsChunkedSigner::new(ctx.clone());
        let mut body = s.frame(b"hello");
        let last = s.frame(b"");
        body.extend_from_slice(&last[..last.len() - 2]);
        let trailers = vec![("x-amz-checksum-crc32c".to_owned(), "sOO8/Q==".to_owned())];
        let sig = s.trailer_signature(&trailers);
        let mut good = body.clone();
        good.extend_from_slice(
            format!("x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{sig}\r\n\r\n").as_bytes(),
        );
        let (data, d) = run_aws(AwsChunkedMode::Signed(ctx.clone()), &[&good]).unwrap();
        assert_eq!(data, b"hello");
        assert_eq!(d.trailers().len(), 2);
        let bad = String::from_utf8(good.clone()).unwrap().replace("sOO8/Q==", "sOO8/Q=X");
        let e = run_aws(AwsChunkedMode::Signed(ctx.clone()), &[bad.as_bytes()]).unwrap_err();
        assert_eq!(e.kind(), AwsChunkedErrorKind::SignatureDoesNotMatch);
        let mut unsigned_trailer = body;
        unsigned_trailer.extend_from_slice(b"x-amz-checksum-crc32c:sOO8/Q==\r\n\r\n");
        let e = run_aws(AwsChunkedMode::Signed(ctx), &[&unsigned_trailer]).unwrap_err();
        assert_eq!(e.kind(), AwsChunkedErrorKind::SignatureDoesNotMatch);
    }

    fn test_ctx() -> SigningContext {
        SigningContext {
            access_key: "AK".into(),
            timestamp: "20130524T000000Z".into(),
            scope: "20130524/us-east-1/s3/aws4_request".into(),
            signing_key: sigv4::signing_key("secret", "20130524", "us-east-1", "s3"),
            seed_signature: "00".repeat(32),
            region: "us-east-1".into(),
        }
    }

    fn splits(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut prev = 0;
        for c in cuts {
            out.push(data[prev..c].to_vec());
            prev = c;
        }
        out.push(data[prev..].to_vec());
        out
    }

    proptest! {
        #[test]
        fn chunked_roundtrip_any_split(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..6),
                                      cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
            let mut body = Vec::new();
            for c in &chunks {
                body.extend_from_slice(format!("{:X};x=y\r\n", c.len()).as_bytes());
                body.extend_from_slice(c);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\nT: v\r\n\r\n");
            let pieces = splits(&body, &cuts);
            let refs: Vec<&[u8]> = pieces.iter().map(|p| p.as_slice()).collect();
            let (data, done, rest) = run_chunked(&refs).unwrap();
            prop_assert_eq!(data, chunks.concat());
            prop_assert!(done);
            prop_assert!(rest.is_empty());
        }

        #[test]
        fn aws_signed_roundtrip_any_split(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..6),
                                          cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
            let mut s = AwsChunkedSigner::new(test_ctx());
            let mut body = Vec::new();
            for c in &chunks {
                body.extend(s.frame(c));
            }
            body.extend(s.frame(b""));
            let pieces = splits(&body, &cuts);
            let refs: Vec<&[u8]> = pieces.iter().map(|p| p.as_slice()).collect();
            let (data, d) = run_aws(AwsChunkedMode::Signed(test_ctx()), &refs).unwrap();
            prop_assert_eq!(data, chunks.concat());
            prop_assert!(d.is_done());
        }

        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512),
                                cuts in proptest::collection::vec(any::<usize>(), 0..6),
                                prefix in prop_oneof![Just(&b""[..]), Just(&b"5\r\n"[..]), Just(&b"0\r\n"[..]), Just(&b"3;chunk-signature="[..])]) {
            let mut full = prefix.to_vec();
            full.extend_from_slice(&data);
            let pieces = splits(&full, &cuts);
            let refs: Vec<&[u8]> = pieces.iter().map(|p| p.as_slice()).collect();
            let _ = run_chunked(&refs);
            let _ = run_aws(AwsChunkedMode::Unsigned, &refs);
            let _ = run_aws(AwsChunkedMode::Signed(test_ctx()), &refs);
        }

        #[test]
        fn signed_tamper_any_byte(pos in any::<usize>(), flip in 1u8..=255) {
            let mut s = AwsChunkedSigner::new(test_ctx());
            let mut body = s.frame(b"some payload bytes");
            body.extend(s.frame(b"more"));
            body.extend(s.frame(b""));
            let pos = pos % body.len();
            body[pos] ^= flip;
            // Any single-byte change is an error, or (only if it hit a
            // chunk-signature hex digit's case) still the same signature.
            match run_aws(AwsChunkedMode::Signed(test_ctx()), &[&body]) {
                Err(_) => {}
                Ok((_, d)) => prop_assert!(!d.is_done() || body[pos].is_ascii_uppercase()),
            }
        }
    }
}
