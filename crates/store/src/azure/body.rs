//! What an Azure GET body is checked against, and how a cut one is asked for again; the
//! checking and resuming themselves are the shared [`crate::checked`] reader's.
//!
//! - MD5: a whole-blob read (status 200) whose answer carries `Content-MD5` (the MD5
//!   Azure stored with Put Blob, or a client set with `x-ms-blob-content-md5`) is hashed
//!   as it passes, when the caller asked for stored checksums to be checked. Ranged
//!   reads are checked by length only: Azure computes a range's MD5 only for ranges up
//!   to 4 MiB on request, and a block-list blob stores no MD5 of its own.
//! - Resume: `x-ms-range` from the first missing byte and `If-Match` on the ETag, so two
//!   versions never mix.

use crate::azure::client::AzureClient;
use crate::azure::error::request_id;
use crate::checked::{Reopen, Verifier};
use crate::error::Error;
use crate::request::{Core, Op};
use crate::types::ObjectRef;
use ferry_wire::Response;
use http::{HeaderMap, Method};
use md5::{Digest, Md5};

/// What a whole-blob read is checked against: its `Content-MD5` (base64), if any.
pub(crate) fn full_object(headers: &HeaderMap) -> Verifier {
    match headers.get("content-md5").and_then(|v| v.to_str().ok()) {
        Some(v) => Verifier::Md5 {
            hasher: Md5::new(),
            expected: v.trim().to_owned(),
            base64: true,
            source: "the blob's Content-MD5",
        },
        None => Verifier::None,
    }
}

/// Asks Azure for the rest of a cut body.
pub(crate) struct AzureReopen {
    pub(crate) client: AzureClient,
    pub(crate) object: ObjectRef,
}

impl Reopen for AzureReopen {
    fn core(&self) -> &Core {
        self.client.core()
    }

    async fn reopen(&self, etag: &str, from: u64, to: u64) -> Result<Response, Error> {
        let mut op = Op::object("GetBlob", Method::GET, &self.object.bucket, Some(&self.object.key))
            .header("x-ms-range", &format!("bytes={from}-{to}"))?
            .header("if-match", etag)?;
        op.response_len = Some(to - from + 1);
        self.client.execute(&mut op, |r| async move { Ok(r) }).await
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        request_id(headers)
    }

    fn describe(&self) -> String {
        format!("az://{}/{}", self.object.bucket, self.object.key)
    }
}
