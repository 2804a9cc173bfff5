//! A GET body that checks itself and resumes when cut.
//!
//! [`ObjectBody`] pulls chunks from the transport only as fast as the caller reads them
//! (the transport's backpressure passes straight through; nothing is buffered beyond
//! the chunk in hand). Along the way:
//!
//! ```text
//!            ┌──────────── chunk ───────────┐
//! transport ─┤ count bytes (<= expected)    ├─► caller
//!            │ feed the verifier            │
//!            └─ Err(reset / truncated) ─► resume: GET Range: bytes=<next>-<end>,
//!                                          If-Match: <etag> ─► same loop (206 checked)
//! end ─► received == expected? ─► verifier.finish() ─► None (good) | Err(Integrity)
//! ```
//!
//! - Length: more bytes than announced, or fewer at a clean end, is never a success.
//! - Checksum: on a full GET, a FULL_OBJECT `x-amz-checksum-*` value (a CRC or SHA; a
//!   `-N` composite of parts cannot be checked from the bytes) is computed on the fly;
//!   without one, a plain MD5 ETag (32 hex digits, no `-`) is checked, unless the object
//!   is encrypted with SSE-KMS or SSE-C, whose ETags are not MD5s. The bytes before the
//!   end are delivered as they come (holding them would mean buffering the object), but
//!   a mismatch ends the stream with [`Error::Integrity`], so no caller that reads to
//!   the end can take bad bytes for good ones.
//! - Resume: a cut body is re-requested from the first missing byte with `If-Match` on
//!   the ETag, so two versions are never mixed (a 412 is [`Error::Precondition`]); the
//!   verifier carries on across the pieces. Resumes use the client's retry limit and
//!   budget.

use crate::error::Error;
use crate::request::Op;
use crate::s3::client::S3Client;
use crate::s3::error::request_id;
use crate::types::ObjectBody;
use bytes::Bytes;
use ferry_proto::checksum::{ChecksumAlgorithm, Checksummer};
use ferry_proto::range::parse_content_range;
use ferry_wire::{Response, ResponseBody};
use futures_util::stream::StreamExt;
use http::{HeaderMap, Method};
use md5::{Digest, Md5};

/// Checks the bytes of a full object against what the server claimed.
// One per response body, never in a collection: boxing the hasher would only add an
// allocation to every GET.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Verifier {
    None,
    Checksum { hasher: Checksummer, expected: String },
    Md5 { hasher: Md5, expected: String },
}

/// Strongest first: the CRCs cost least per byte; SHA-256 and SHA-1 are checked too.
const VERIFY_ORDER: [ChecksumAlgorithm; 5] = [
    ChecksumAlgorithm::Crc64Nvme,
    ChecksumAlgorithm::Crc32c,
    ChecksumAlgorithm::Crc32,
    ChecksumAlgorithm::Sha256,
    ChecksumAlgorithm::Sha1,
];

impl Verifier {
    /// What can be verified for a full (not ranged) GET with these response headers.
    pub(crate) fn for_full_object(headers: &HeaderMap) -> Verifier {
        let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::trim);
        let composite = get("x-amz-checksum-type").is_some_and(|t| t.eq_ignore_ascii_case("COMPOSITE"));
        if !composite {
            for algo in VERIFY_ORDER {
                if let Some(v) = get(algo.header_name()) {
                    if !v.contains('-') && !v.is_empty() {
                        return Verifier::Checksum { hasher: Checksummer::new(algo), expected: v.to_owned() };
                    }
                }
            }
        }
        let encrypted = get("x-amz-server-side-encryption").is_some_and(|v| v.starts_with("aws:kms"))
            || headers.contains_key("x-amz-server-side-encryption-customer-algorithm");
        if let Some(etag) = get("etag") {
            let bare = etag.trim_start_matches("W/").trim_matches('"');
            if !encrypted && bare.len() == 32 && bare.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Verifier::Md5 { hasher: Md5::new(), expected: bare.to_ascii_lowercase() };
            }
        }
        Verifier::None
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        match self {
            Verifier::None => {}
            Verifier::Checksum { hasher, .. } => hasher.update(data),
            Verifier::Md5 { hasher, .. } => hasher.update(data),
        }
    }

    pub(crate) fn finish(&mut self, request_id: Option<String>) -> Result<(), Error> {
        match std::mem::replace(self, Verifier::None) {
            Verifier::None => Ok(()),
            Verifier::Checksum { hasher, expected } => {
                let got = hasher.finish_base64();
                if got == expected {
                    Ok(())
                } else {
                    Err(Error::integrity(
                        format!("{} of the body is {got}, the server announced {expected}", hasher.algorithm()),
                        request_id,
                    ))
                }
            }
            Verifier::Md5 { hasher, expected } => {
                let got = hex::encode(hasher.finalize());
                if got == expected {
                    Ok(())
                } else {
                    Err(Error::integrity(format!("MD5 of the body is {got}, the ETag says {expected}"), request_id))
                }
            }
        }
    }

    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Verifier::None => "none",
            Verifier::Checksum { .. } => "checksum",
            Verifier::Md5 { .. } => "md5-etag",
        }
    }

    #[cfg(test)]
    pub(crate) fn base64_of(algo: ChecksumAlgorithm, data: &[u8]) -> String {
        ferry_proto::checksum::base64_encode(&algo.digest(data))
    }
}

/// The state behind an [`ObjectBody`].
pub(crate) struct BodyState {
    pub(crate) client: S3Client,
    pub(crate) bucket: String,
    pub(crate) key: String,
    pub(crate) etag: Option<String>,
    pub(crate) body: ResponseBody,
    /// Offset in the object of the first byte of this body.
    pub(crate) start: u64,
    /// Bytes this body must deliver, when known.
    pub(crate) expected: Option<u64>,
    pub(crate) received: u64,
    pub(crate) verifier: Verifier,
    pub(crate) request_id: Option<String>,
    pub(crate) resumes: u32,
    pub(crate) done: bool,
}

impl BodyState {
    pub(crate) fn into_body(self) -> ObjectBody {
        let stream = futures_util::stream::unfold(self, |mut st| async move { st.next().await.map(|item| (item, st)) });
        ObjectBody::new(stream.boxed())
    }

    async fn next(&mut self) -> Option<Result<Bytes, Error>> {
        if self.done {
            return None;
        }
        loop {
            let failure = match self.body.chunk().await {
                Some(Ok(b)) if b.is_empty() => continue,
                Some(Ok(b)) => {
                    self.received += b.len() as u64;
                    if let Some(exp) = self.expected {
                        if self.received > exp {
                            self.done = true;
                            return Some(Err(Error::integrity(
                                format!("the body is longer than the {exp} bytes announced"),
                                self.request_id.clone(),
                            )));
                        }
                    }
                    self.verifier.update(&b);
                    return Some(Ok(b));
                }
                None => match self.expected {
                    Some(exp) if self.received < exp => Error::Transport(ferry_wire::WireError::new(
                        ferry_wire::ErrorKind::BodyTruncated,
                        format!("body ended after {} of {exp} bytes", self.received),
                    )),
                    _ => {
                        self.done = true;
                        return self.verifier.finish(self.request_id.clone()).err().map(Err);
                    }
                },
                Some(Err(e)) => Error::Transport(e),
            };
            if let Err(e) = self.resume(failure).await {
                self.done = true;
                return Some(Err(e));
            }
        }
    }

    /// Re-requests the rest of the body after `failure`, or gives `failure` back.
    async fn resume(&mut self, failure: Error) -> Result<(), Error> {
        let Some(class) = failure.retry_class(true) else { return Err(failure) };
        let (Some(etag), Some(expected)) = (self.etag.clone(), self.expected) else {
            // Without an ETag a resumed piece could come from another version.
            return Err(failure);
        };
        let retry = self.client.core().retry.clone();
        if self.resumes + 1 >= retry.max_attempts || !self.client.core().take_retry(class) {
            return Err(failure);
        }
        self.resumes += 1;
        tokio::time::sleep(retry.backoff(self.resumes - 1, class)).await;
        let from = self.start + self.received;
        let to = self.start + expected - 1;
        tracing::debug!(bucket = %self.bucket, key = %self.key, from, to, error = %failure, "resuming GET");
        let mut op = Op::object("GetObject", Method::GET, &self.bucket, Some(&self.key))
            .header("range", &format!("bytes={from}-{to}"))?
            .header("if-match", &etag)?;
        let resp: Response = self.client.execute(&mut op, |r| async move { Ok(r) }).await?;
        let rid = request_id(&resp.headers);
        let cr = resp.headers.get("content-range").and_then(|v| v.to_str().ok()).and_then(parse_content_range);
        if resp.status.as_u16() != 206 || cr.map(|(s, e, _)| (s, e)) != Some((from, to)) {
            return Err(Error::protocol(
                format!("resumed GET asked bytes {from}-{to}, got status {} range {cr:?}", resp.status),
                rid,
            ));
        }
        self.body = resp.body;
        Ok(())
    }
}
