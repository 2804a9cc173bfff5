//! What a GCS media GET body is checked against, and how a cut one is asked for again,
//! pinned to one generation; the checking and resuming themselves are the shared
//! [`crate::checked`] reader's.
//!
//! `x-goog-hash` states the CRC32C (and, for objects not made by compose, the MD5) of
//! the whole stored object, also on a ranged answer, so only a read of the whole object
//! is checked against it; a range is checked for its length. The CRC32C is preferred
//! (every object has one); MD5 only where no CRC32C came. A body served decompressed
//! (stored gzip, and the server ignored our `Accept-Encoding: gzip`) is not the stored
//! bytes, so it is checked for nothing but not being cut: its length is unknown.
//!
//! A resume is `GET ?alt=media&generation=G&ifGenerationMatch=G` with
//! `Range: bytes=<next>-<end>`; an answer naming another generation is a precondition
//! failure.

use crate::checked::{Reopen, Verifier};
use crate::error::Error;
use crate::gcs::client::{gs, GcsClient};
use crate::gcs::error::request_id;
use crate::gcs::object::goog_hash;
use crate::request::{Core, Op};
use crate::types::ObjectRef;
use ferry_proto::checksum::{base64_decode, ChecksumAlgorithm, Checksummer};
use ferry_proto::range::RangeSpec;
use ferry_wire::Response;
use http::{HeaderMap, Method};

/// What a full read of the object can be checked against.
pub(crate) fn full_object(headers: &HeaderMap) -> Verifier {
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
        return Verifier::Md5 {
            hasher: md5::Md5::new(),
            expected: hex::encode(m),
            base64: false,
            source: "x-goog-hash",
        };
    }
    Verifier::None
}

/// Asks GCS for the rest of a cut body, from the same generation.
pub(crate) struct GcsReopen {
    pub(crate) client: GcsClient,
    pub(crate) object: ObjectRef,
}

impl Reopen for GcsReopen {
    fn core(&self) -> &Core {
        self.client.core()
    }

    async fn reopen(&self, generation: &str, from: u64, to: u64) -> Result<Response, Error> {
        let mut op = Op::path(
            "objects.get media (resume)",
            Method::GET,
            GcsClient::object_path(&self.object.bucket, &self.object.key),
        )
        .query("alt", "media")
        .query("generation", generation)
        .query("ifGenerationMatch", generation)
        .header("accept-encoding", "gzip")?
        .range(Some(RangeSpec::FromTo(from, to)), None)?;
        let resp: Response = self.client.execute(&mut op, |r| async move { Ok(r) }).await?;
        let got = resp.headers.get("x-goog-generation").and_then(|v| v.to_str().ok()).map(str::to_owned);
        if got.as_deref().is_some_and(|g| g != generation) {
            return Err(Error::Precondition {
                status: 412,
                code: "conditionNotMet".into(),
                message: format!("{} changed to generation {got:?} while being read", gs(&self.object)),
                request_id: request_id(&resp.headers),
            });
        }
        Ok(resp)
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        request_id(headers)
    }

    fn describe(&self) -> String {
        gs(&self.object)
    }
}
