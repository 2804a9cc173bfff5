//! A media GET body that checks itself and resumes when cut, pinned to one generation.
//!
//! ```text
//! transport ─► count bytes (<= expected) ─► feed the verifier ─► caller
//!     └─ cut (reset, short body) ─► GET ?alt=media&generation=G&ifGenerationMatch=G,
//!                                   Range: bytes=<next>-<end> ─► same loop
//! end ─► received == expected? ─► verifier (full reads) ─► None | Err(Integrity)
//! ```
//!
//! `x-goog-hash` states the CRC32C (and, for objects not made by compose, the MD5) of
//! the whole stored object, also on a ranged answer, so only a read of the whole object
//! is checked against it; a range is checked for its length. The CRC32C is preferred
//! (every object has one); MD5 only where no CRC32C came. A body served decompressed
//! (stored gzip, and the server ignored our `Accept-Encoding: gzip`) is not the stored
//! bytes, so it is checked for nothing but not being cut: its length is unknown.

use crate::error::Error;
use crate::gcs::client::{gs, GcsClient};
use crate::gcs::error::request_id;
use crate::gcs::object::goog_hash;
use crate::request::Op;
use crate::s3::body::Verifier;
use crate::types::*;
use bytes::Bytes;
use ferry_proto::checksum::{base64_decode, ChecksumAlgorithm, Checksummer};
use ferry_proto::range::parse_content_range;
use ferry_wire::{Response, ResponseBody};
use futures_util::stream::StreamExt;
use http::{HeaderMap, Method};

/// What a full read of the object can be checked against.
fn verifier(headers: &HeaderMap) -> Verifier {
    let stored_gzip = headers
        .get("x-goog-stored-content-encoding")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    let served_gzip =
        headers.get("content-encoding").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    if stored_gzip && !served_gzip {
        return Verifier::None;
    }
    if let Some(c) = goog_hash(headers, "crc32c") {
        return Verifier::Checksum { hasher: Checksummer::new(ChecksumAlgorithm::Crc32c), expected: c };
    }
    if let Some(m) = goog_hash(headers, "md5").and_then(|m| base64_decode(&m)) {
        use md5::Digest;
        return Verifier::Md5 { hasher: md5::Md5::new(), expected: hex::encode(m) };
    }
    Verifier::None
}

pub(crate) struct GcsBody {
    client: GcsClient,
    object: ObjectRef,
    generation: Option<String>,
    body: ResponseBody,
    start: u64,
    expected: Option<u64>,
    received: u64,
    verifier: Verifier,
    request_id: Option<String>,
    resumes: u32,
    done: bool,
}

impl GcsBody {
    /// The output of a GET whose response head is `resp`.
    pub(crate) fn start(
        client: GcsClient,
        object: ObjectRef,
        resp: Response,
        meta: ObjectInfo,
    ) -> Result<GetObjectOutput, Error> {
        let rid = request_id(&resp.headers);
        let content_length = resp.body.content_length();
        let (start, range, verifier) = if resp.status.as_u16() == 206 {
            let cr = resp.headers.get("content-range").and_then(|v| v.to_str().ok()).and_then(parse_content_range);
            let Some((s, e, _)) = cr else {
                return Err(Error::protocol("206 without a valid Content-Range", rid));
            };
            if content_length.is_some_and(|n| n != e - s + 1) {
                return Err(Error::protocol(
                    format!("Content-Range {s}-{e} disagrees with Content-Length {content_length:?}"),
                    rid,
                ));
            }
            (s, Some((s, e)), Verifier::None)
        } else {
            (0, None, verifier(&resp.headers))
        };
        let expected = match range {
            Some((s, e)) => Some(e - s + 1),
            None => content_length,
        };
        let st = GcsBody {
            client,
            object,
            generation: meta.etag.clone(),
            body: resp.body,
            start,
            expected,
            received: 0,
            verifier,
            request_id: rid,
            resumes: 0,
            done: false,
        };
        let stream = futures_util::stream::unfold(st, |mut st| async move { st.next().await.map(|item| (item, st)) });
        Ok(GetObjectOutput { meta, range, body: ObjectBody::new(stream.boxed()) })
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

    /// Re-requests the rest of the body from the same generation, or gives `failure` back.
    async fn resume(&mut self, failure: Error) -> Result<(), Error> {
        let Some(class) = failure.retry_class(true) else { return Err(failure) };
        let (Some(generation), Some(expected)) = (self.generation.clone(), self.expected) else {
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
        tracing::debug!(object = %gs(&self.object), from, to, error = %failure, "resuming GET");
        let mut op = Op::path(
            "objects.get media (resume)",
            Method::GET,
            GcsClient::object_path(&self.object.bucket, &self.object.key),
        )
        .query("alt", "media")
        .query("generation", generation.clone())
        .query("ifGenerationMatch", generation.clone())
        .header("accept-encoding", "gzip")?
        .header("range", &format!("bytes={from}-{to}"))?;
        let resp: Response = self.client.execute(&mut op, |r| async move { Ok(r) }).await?;
        let rid = request_id(&resp.headers);
        let got = resp.headers.get("x-goog-generation").and_then(|v| v.to_str().ok()).map(str::to_owned);
        if got.as_deref().is_some_and(|g| g != generation) {
            return Err(Error::Precondition {
                status: 412,
                code: "conditionNotMet".into(),
                message: format!("{} changed to generation {got:?} while being read", gs(&self.object)),
                request_id: rid,
            });
        }
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
