//! GET bodies from Azure, checked as they stream and resumed if cut.
//!
//! - Length: a body must deliver exactly the bytes its head announced.
//! - MD5: a whole-blob read (status 200) whose answer carries `Content-MD5` (the MD5
//!   Azure stored with Put Blob, or a client set with `x-ms-blob-content-md5`) is hashed
//!   as it passes; a mismatch ends the stream with [`Error::Integrity`]. Ranged reads
//!   are checked by length only: Azure computes a range's MD5 only for ranges up to
//!   4 MiB on request, and a block-list blob stores no MD5 of its own.
//! - Resume: a cut body is asked again from its first missing byte with `x-ms-range`
//!   and `If-Match` on the ETag, so two versions never mix; the MD5 carries on across
//!   the pieces.

use crate::azure::client::AzureClient;
use crate::azure::error::request_id;
use crate::error::Error;
use crate::request::Op;
use crate::types::ObjectBody;
use bytes::Bytes;
use ferry_proto::range::parse_content_range;
use ferry_wire::ResponseBody;
use futures_util::stream::StreamExt;
use http::Method;
use md5::{Digest, Md5};

pub(crate) struct AzureBody {
    pub(crate) client: AzureClient,
    pub(crate) container: String,
    pub(crate) blob: String,
    pub(crate) etag: Option<String>,
    pub(crate) body: ResponseBody,
    /// Offset in the blob of this body's first byte.
    pub(crate) start: u64,
    pub(crate) expected: Option<u64>,
    pub(crate) received: u64,
    /// The MD5 to check a whole-blob read against (base64), with its hasher.
    pub(crate) md5: Option<(Md5, String)>,
    pub(crate) request_id: Option<String>,
    pub(crate) resumes: u32,
    pub(crate) done: bool,
}

impl AzureBody {
    pub(crate) fn into_body(self) -> ObjectBody {
        let stream = futures_util::stream::unfold(self, |mut st| async move { st.next().await.map(|item| (item, st)) });
        ObjectBody::new(stream.boxed())
    }

    fn finish(&mut self) -> Result<(), Error> {
        let Some((hasher, expected)) = self.md5.take() else { return Ok(()) };
        let got = ferry_proto::checksum::base64_encode(&hasher.finalize());
        if got == expected {
            Ok(())
        } else {
            Err(Error::integrity(
                format!("MD5 of the body is {got}, the blob's Content-MD5 is {expected}"),
                self.request_id.clone(),
            ))
        }
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
                    if self.expected.is_some_and(|exp| self.received > exp) {
                        self.done = true;
                        return Some(Err(Error::integrity(
                            format!("the body is longer than the {:?} bytes announced", self.expected),
                            self.request_id.clone(),
                        )));
                    }
                    if let Some((h, _)) = &mut self.md5 {
                        h.update(&b);
                    }
                    return Some(Ok(b));
                }
                None => match self.expected {
                    Some(exp) if self.received < exp => Error::Transport(ferry_wire::WireError::new(
                        ferry_wire::ErrorKind::BodyTruncated,
                        format!("body ended after {} of {exp} bytes", self.received),
                    )),
                    _ => {
                        self.done = true;
                        return self.finish().err().map(Err);
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

    async fn resume(&mut self, failure: Error) -> Result<(), Error> {
        let Some(class) = failure.retry_class(true) else { return Err(failure) };
        let (Some(etag), Some(expected)) = (self.etag.clone(), self.expected) else { return Err(failure) };
        let retry = self.client.core().retry.clone();
        if self.resumes + 1 >= retry.max_attempts || !self.client.core().take_retry(class) {
            return Err(failure);
        }
        self.resumes += 1;
        tokio::time::sleep(retry.backoff(self.resumes - 1, class)).await;
        let from = self.start + self.received;
        let to = self.start + expected - 1;
        tracing::debug!(container = %self.container, blob = %self.blob, from, to, error = %failure, "resuming GET");
        let mut op = Op::object("GetBlob", Method::GET, &self.container, Some(&self.blob))
            .header("x-ms-range", &format!("bytes={from}-{to}"))?
            .header("if-match", &etag)?;
        op.size_hint = Some(to - from + 1);
        let resp = self.client.execute(&mut op, |r| async move { Ok(r) }).await?;
        let cr = resp.headers.get("content-range").and_then(|v| v.to_str().ok()).and_then(parse_content_range);
        if resp.status.as_u16() != 206 || cr.map(|(s, e, _)| (s, e)) != Some((from, to)) {
            return Err(Error::protocol(
                format!("resumed GET asked bytes {from}-{to}, got status {} range {cr:?}", resp.status),
                request_id(&resp.headers),
            ));
        }
        self.body = resp.body;
        Ok(())
    }
}
