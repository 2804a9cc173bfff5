//! A GET body that checks itself as it streams and resumes when cut, for every provider.
//!
//! [`CheckedBody`] pulls chunks from the transport only as fast as the caller reads them
//! (the transport's backpressure passes straight through; nothing is buffered beyond
//! the chunk in hand). Along the way:
//!
//! ```text
//!            ┌──────────── chunk ───────────┐
//! transport ─┤ count bytes (<= expected)    ├─► caller
//!            │ feed the verifier            │
//!            └─ Err(reset / truncated) ─► resume: Reopen::reopen(version, next, end)
//!                                          ─► 206 of exactly that range? ─► same loop
//! end ─► received == expected? ─► verifier.finish() ─► None (good) | Err(Integrity)
//! ```
//!
//! - Length: more bytes than announced, or fewer at a clean end, is never a success.
//! - Checksum: a read of the whole object is checked against what the provider states
//!   for it (each provider's body.rs says which value, from which header); a range is
//!   checked for its length. The bytes before the end are delivered as they come
//!   (holding them would mean buffering the object), but a mismatch ends the stream with
//!   [`Error::Integrity`], so no caller that reads to the end can take bad bytes for good.
//! - Resume: a cut body is re-requested from the first missing byte, pinned to the
//!   version the first answer named (S3 and Azure: `If-Match` on the ETag; GCS: the
//!   generation), so two versions are never mixed; the verifier carries on across the
//!   pieces. Resumes use the client's retry limit and budget (request.rs). Without a
//!   version or a known length a cut body is an error.

use crate::error::Error;
use crate::request::Core;
use crate::types::{GetObjectOutput, ObjectBody, ObjectInfo};
use bytes::Bytes;
use ferry_proto::checksum::{base64_encode, Checksummer};
use ferry_proto::range::parse_content_range;
use ferry_wire::{Response, ResponseBody};
use futures_util::stream::StreamExt;
use http::HeaderMap;
use md5::{Digest, Md5};
use std::future::Future;

/// Checks the bytes of a full object against what the server claimed.
// One per response body, never in a collection: boxing the hasher would only add an
// allocation to every GET.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Verifier {
    None,
    /// A checksum of the trait's algorithms, stated in base64.
    Checksum {
        hasher: Checksummer,
        expected: String,
    },
    /// An MD5 as the provider states it (`base64`, else hex); `source` names where it
    /// came from, for the error.
    Md5 {
        hasher: Md5,
        expected: String,
        base64: bool,
        source: &'static str,
    },
}

impl Verifier {
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
            Verifier::Md5 { hasher, expected, base64, source } => {
                let digest = hasher.finalize();
                let got = if base64 { base64_encode(&digest) } else { hex::encode(digest) };
                if got == expected {
                    Ok(())
                } else {
                    Err(Error::integrity(format!("MD5 of the body is {got}, {source} says {expected}"), request_id))
                }
            }
        }
    }

    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Verifier::None => "none",
            Verifier::Checksum { .. } => "checksum",
            Verifier::Md5 { .. } => "md5",
        }
    }
}

/// What a provider adds to a checked body: asking for the rest of it again.
pub(crate) trait Reopen: Send + Sync + 'static {
    /// The client's request layer, whose retry limit and budget resumes draw on.
    fn core(&self) -> &Core;

    /// Sends a GET for bytes `from..=to` of the object, pinned to `version`; the answer
    /// is checked here (206, exactly that range). An answer from another version is
    /// [`Error::Precondition`].
    fn reopen(&self, version: &str, from: u64, to: u64) -> impl Future<Output = Result<Response, Error>> + Send;

    /// The provider's request id of an answer.
    fn request_id(&self, headers: &HeaderMap) -> Option<String>;

    /// The object, for logs.
    fn describe(&self) -> String;
}

/// The state behind a checked [`ObjectBody`].
pub(crate) struct CheckedBody<R> {
    reopen: R,
    /// What a resume is pinned to (ETag or generation).
    version: Option<String>,
    body: ResponseBody,
    /// Offset in the object of the first byte of this body.
    start: u64,
    /// Bytes this body must deliver, when known.
    expected: Option<u64>,
    received: u64,
    verifier: Verifier,
    request_id: Option<String>,
    resumes: u32,
    done: bool,
}

impl<R: Reopen> CheckedBody<R> {
    /// The output of a GET whose answer is `resp` (already a success): a 206 is the
    /// range its Content-Range names, checked for length; a 200 is the whole object,
    /// also for a ranged request (a server may ignore a range it cannot parse), checked
    /// by what `full_object` finds in its headers.
    pub(crate) fn output(
        reopen: R,
        resp: Response,
        meta: ObjectInfo,
        full_object: impl FnOnce(&HeaderMap) -> Verifier,
    ) -> Result<GetObjectOutput, Error> {
        let rid = reopen.request_id(&resp.headers);
        let content_length = resp.body.content_length();
        let (start, range, verifier) = if resp.status.as_u16() == 206 {
            let cr = resp.headers.get("content-range").and_then(|v| v.to_str().ok()).and_then(parse_content_range);
            let Some((s, e, _)) = cr else {
                return Err(Error::protocol("206 without a valid Content-Range", rid));
            };
            if let Some(n) = content_length.filter(|n| *n != e - s + 1) {
                return Err(Error::protocol(
                    format!("Content-Range {s}-{e} ({} bytes) disagrees with Content-Length {n}", e - s + 1),
                    rid,
                ));
            }
            (s, Some((s, e)), Verifier::None)
        } else {
            (0, None, full_object(&resp.headers))
        };
        let expected = match range {
            Some((s, e)) => Some(e - s + 1),
            None => content_length,
        };
        tracing::trace!(object = %reopen.describe(), verify = verifier.describe(), "GET body");
        let state = CheckedBody {
            reopen,
            version: meta.etag.clone(),
            body: resp.body,
            start,
            expected,
            received: 0,
            verifier,
            request_id: rid,
            resumes: 0,
            done: false,
        };
        let stream =
            futures_util::stream::unfold(state, |mut st| async move { st.next().await.map(|item| (item, st)) });
        Ok(GetObjectOutput { meta, range, body: ObjectBody::with_len(stream.boxed(), expected) })
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
        let (Some(version), Some(expected)) = (self.version.clone(), self.expected) else {
            // Without a version a resumed piece could come from another one.
            return Err(failure);
        };
        let retry = self.reopen.core().retry.clone();
        if self.resumes + 1 >= retry.max_attempts || !self.reopen.core().take_retry(class) {
            return Err(failure);
        }
        self.resumes += 1;
        tokio::time::sleep(retry.backoff(self.resumes - 1, class)).await;
        let from = self.start + self.received;
        let to = self.start + expected - 1;
        tracing::info!(object = %self.reopen.describe(), from, to, error = %failure, "resuming GET");
        let resp = self.reopen.reopen(&version, from, to).await?;
        let cr = resp.headers.get("content-range").and_then(|v| v.to_str().ok()).and_then(parse_content_range);
        if resp.status.as_u16() != 206 || cr.map(|(s, e, _)| (s, e)) != Some((from, to)) {
            return Err(Error::protocol(
                format!("resumed GET asked bytes {from}-{to}, got status {} range {cr:?}", resp.status),
                self.reopen.request_id(&resp.headers),
            ));
        }
        self.body = resp.body;
        Ok(())
    }
}
