//! Receiving an object body: decoding, verifying and storing it in one pass.
//!
//! ```text
//! Body chunks ─► aws-chunked decoder (if STREAMING-*) ─► Digests (MD5, checksums,
//!             payload SHA-256) ─► BodyWriter (staging; visible only on commit)
//! ```
//!
//! The declared payload hash (`x-amz-content-sha256`), Content-MD5, any
//! `x-amz-checksum-*` value (header or aws-chunked trailer) and the declared length are
//! all checked at the end; on any mismatch the staged body is dropped, so a bad upload
//! never becomes visible. When the client names no checksum, CRC64NVME is computed and
//! stored, as S3 does for new objects, so that later downloads can be verified.

use super::S3Error;
use crate::app::App;
use crate::types::Request;
use base64::Engine;
use bytes::BytesMut;
use ferry_backend::BodyWriter;
use ferry_proto::checksum::{ChecksumAlgorithm, Checksummer};
use ferry_proto::chunked::{AwsChunkedDecoder, AwsChunkedMode};
use ferry_proto::sigv4::SigningContext;
use md5::{Digest, Md5};
use sha2::Sha256;

/// What was received and verified.
pub struct Received {
    pub writer: BodyWriter,
    pub size: u64,
    pub md5: [u8; 16],
    /// Checksums computed over the body, base64, each verified against any value the
    /// client sent.
    pub checksums: Vec<(ChecksumAlgorithm, String)>,
}

/// Incremental digests of a body.
pub struct Digests {
    md5: Md5,
    checksums: Vec<Checksummer>,
    size: u64,
}

impl Digests {
    pub fn new(algorithms: &[ChecksumAlgorithm]) -> Digests {
        Digests { md5: Md5::new(), checksums: algorithms.iter().map(|a| Checksummer::new(*a)).collect(), size: 0 }
    }

    pub fn update(&mut self, data: &[u8]) {
        self.md5.update(data);
        for c in &mut self.checksums {
            c.update(data);
        }
        self.size += data.len() as u64;
    }

    pub fn finish(self) -> ([u8; 16], Vec<(ChecksumAlgorithm, String)>, u64) {
        let md5: [u8; 16] = self.md5.finalize().into();
        let sums = self.checksums.iter().map(|c| (c.algorithm(), c.finish_base64())).collect();
        (md5, sums, self.size)
    }
}

/// How the payload is framed and signed, from `x-amz-content-sha256`.
enum Payload {
    /// A hex SHA-256 of the body, to check at the end.
    Sha256(String),
    Unsigned,
    /// aws-chunked framing.
    Chunked {
        signed: bool,
    },
}

fn header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

/// The checksum algorithm the client asked for, and the value it sent in a header, if any.
pub fn requested_checksum(req: &Request) -> Result<(Option<ChecksumAlgorithm>, Option<String>), S3Error> {
    for algo in ChecksumAlgorithm::ALL {
        if let Some(v) = header(req, algo.header_name()) {
            return Ok((Some(algo), Some(v.to_string())));
        }
    }
    if let Some(trailer) = header(req, "x-amz-trailer") {
        for name in trailer.split(',').map(str::trim) {
            if let Some(algo) = ChecksumAlgorithm::from_header_name(name) {
                return Ok((Some(algo), None));
            }
        }
    }
    for name in ["x-amz-sdk-checksum-algorithm", "x-amz-checksum-algorithm"] {
        if let Some(v) = header(req, name) {
            let algo = ChecksumAlgorithm::parse(v)
                .ok_or_else(|| S3Error::invalid_argument(&format!("Invalid checksum algorithm {v}.")))?;
            return Ok((Some(algo), None));
        }
    }
    Ok((None, None))
}

/// Reads the request body into `writer`, verifying everything the client declared.
/// `algorithm` is the checksum to compute (the client's, or a default).
pub async fn receive(
    app: &App,
    req: &mut Request,
    signing: Option<&SigningContext>,
    mut writer: BodyWriter,
    algorithm: Option<ChecksumAlgorithm>,
    declared_checksum: Option<String>,
) -> Result<Received, S3Error> {
    let payload = match header(req, "x-amz-content-sha256") {
        None | Some("UNSIGNED-PAYLOAD") => Payload::Unsigned,
        Some("STREAMING-UNSIGNED-PAYLOAD-TRAILER") => Payload::Chunked { signed: false },
        Some("STREAMING-AWS4-HMAC-SHA256-PAYLOAD") | Some("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER") => {
            Payload::Chunked { signed: true }
        }
        Some(v) if v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()) => Payload::Sha256(v.to_ascii_lowercase()),
        Some(v) if v.starts_with("STREAMING-") => {
            return Err(S3Error::new(501, "NotImplemented", &format!("Payload signing {v} is not implemented.")));
        }
        Some(_) => {
            return Err(S3Error::new(
                400,
                "InvalidArgument",
                "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-* or a SHA-256 hex digest.",
            ))
        }
    };
    let content_md5 = match header(req, "content-md5") {
        Some(v) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(v.trim())
                .ok()
                .filter(|d| d.len() == 16)
                .ok_or_else(|| S3Error::new(400, "InvalidDigest", "The Content-MD5 you specified was invalid."))?,
        ),
        None => None,
    };
    let mut decoder = match payload {
        Payload::Chunked { signed: true } => match signing {
            Some(ctx) => Some(AwsChunkedDecoder::new(AwsChunkedMode::Signed(ctx.clone()))),
            // An anonymous server still has to strip the framing.
            None => Some(AwsChunkedDecoder::new(AwsChunkedMode::Unsigned)),
        },
        Payload::Chunked { signed: false } => Some(AwsChunkedDecoder::new(AwsChunkedMode::Unsigned)),
        _ => None,
    };
    let declared_len = if decoder.is_some() {
        header(req, "x-amz-decoded-content-length").and_then(|v| v.parse::<u64>().ok())
    } else {
        req.body.content_length
    };
    let max = app.limits.max_object_bytes;
    if declared_len.is_some_and(|n| n > max) {
        return Err(S3Error::new(
            400,
            "EntityTooLarge",
            "Your proposed upload exceeds the maximum allowed object size.",
        ));
    }
    if let Some(n) = declared_len {
        // Lets the memory backend store the body in blocks that add up to exactly n.
        writer.expect_len(n);
    }
    let algorithms: Vec<ChecksumAlgorithm> = algorithm.into_iter().collect();
    let mut digests = Digests::new(&algorithms);
    let mut sha = matches!(payload, Payload::Sha256(_)).then(Sha256::new);
    let mut pending = BytesMut::new();
    let mut pieces = Vec::new();
    while let Some(chunk) = req.body.chunk().await {
        let chunk = chunk.map_err(|e| match e.kind() {
            // S3's answer to a body that stopped arriving.
            std::io::ErrorKind::TimedOut => S3Error::new(
                400,
                "RequestTimeout",
                "Your socket connection to the server was not read from or written to within the timeout period.",
            ),
            _ => S3Error::new(400, "IncompleteBody", &format!("The request body ended early: {e}.")),
        })?;
        match decoder.as_mut() {
            Some(d) => {
                pending.extend_from_slice(&chunk);
                d.decode(&mut pending, &mut pieces).map_err(chunk_error)?;
            }
            None => pieces.push(chunk),
        }
        for piece in pieces.drain(..) {
            if let Some(s) = sha.as_mut() {
                s.update(&piece);
            }
            digests.update(&piece);
            if digests.size > max {
                return Err(S3Error::new(
                    400,
                    "EntityTooLarge",
                    "Your proposed upload exceeds the maximum allowed object size.",
                ));
            }
            writer.write(piece).await?;
        }
    }
    let mut trailer_checksum = None;
    if let Some(d) = decoder.as_ref() {
        if !d.is_done() {
            return Err(S3Error::new(400, "IncompleteBody", "The aws-chunked body ended before its final chunk."));
        }
        if let Some(algo) = algorithm {
            trailer_checksum =
                d.trailers().iter().find(|(n, _)| n.eq_ignore_ascii_case(algo.header_name())).map(|(_, v)| v.clone());
        }
    }
    let (md5, checksums, size) = digests.finish();
    if let Some(n) = declared_len {
        if n != size {
            return Err(S3Error::new(
                400,
                "IncompleteBody",
                &format!("You did not provide the number of bytes specified ({size} of {n})."),
            ));
        }
    }
    if let (Payload::Sha256(expected), Some(s)) = (&payload, sha) {
        let got = hex::encode(s.finalize());
        if &got != expected {
            return Err(S3Error::new(
                400,
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
            .with_extra("ClientComputedContentSHA256", expected)
            .with_extra("S3ComputedContentSHA256", got));
        }
    }
    if let Some(expected) = content_md5 {
        if expected[..] != md5[..] {
            return Err(S3Error::new(
                400,
                "BadDigest",
                "The Content-MD5 you specified did not match what we received.",
            ));
        }
    }
    if let Some(expected) = declared_checksum.or(trailer_checksum) {
        let (algo, got) = &checksums[0];
        if expected.trim() != got {
            return Err(S3Error::new(
                400,
                "BadDigest",
                &format!("The {} you specified did not match the calculated checksum.", algo.as_str()),
            ));
        }
    }
    Ok(Received { writer, size, md5, checksums })
}

fn chunk_error(e: ferry_proto::chunked::AwsChunkedError) -> S3Error {
    use ferry_proto::chunked::AwsChunkedErrorKind as K;
    match e.kind() {
        K::SignatureDoesNotMatch => S3Error::new(403, "SignatureDoesNotMatch", "The chunk signature does not match."),
        K::IncompleteBody => S3Error::new(400, "IncompleteBody", "The aws-chunked body ended early."),
        _ => S3Error::new(400, "InvalidRequest", &format!("Malformed aws-chunked body: {e}")),
    }
}
