//! What an S3 GET body is checked against, and how a cut one is asked for again; the
//! checking and resuming themselves are the shared [`crate::checked`] reader's.
//!
//! - Checksum: on a full GET, a FULL_OBJECT `x-amz-checksum-*` value (a CRC or SHA; a
//!   `-N` composite of parts cannot be checked from the bytes) is computed on the fly;
//!   without one, a plain MD5 ETag (32 hex digits, no `-`) is checked, unless the object
//!   is encrypted with SSE-KMS or SSE-C, whose ETags are not MD5s.
//! - Resume: `GET` with `Range: bytes=<next>-<end>` and `If-Match` on the ETag (a 412 is
//!   [`Error::Precondition`]).

use crate::checked::{Reopen, Verifier};
use crate::error::Error;
use crate::request::{Core, Op};
use crate::s3::client::S3Client;
use crate::s3::error::request_id;
use crate::types::ObjectRef;
use ferry_proto::checksum::{ChecksumAlgorithm, Checksummer};
use ferry_proto::range::RangeSpec;
use ferry_wire::Response;
use http::{HeaderMap, Method};
use md5::{Digest, Md5};

/// Strongest first: the CRCs cost least per byte; SHA-256 and SHA-1 are checked too.
const VERIFY_ORDER: [ChecksumAlgorithm; 5] = [
    ChecksumAlgorithm::Crc64Nvme,
    ChecksumAlgorithm::Crc32c,
    ChecksumAlgorithm::Crc32,
    ChecksumAlgorithm::Sha256,
    ChecksumAlgorithm::Sha1,
];

/// What can be verified for a full (not ranged) GET with these response headers.
pub(crate) fn full_object(headers: &HeaderMap) -> Verifier {
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
            return Verifier::Md5 {
                hasher: Md5::new(),
                expected: bare.to_ascii_lowercase(),
                base64: false,
                source: "the ETag",
            };
        }
    }
    Verifier::None
}

/// The base64 checksum of `data` (tests).
#[cfg(test)]
pub(crate) fn base64_of(algo: ChecksumAlgorithm, data: &[u8]) -> String {
    ferry_proto::checksum::base64_encode(&algo.digest(data))
}

/// Asks S3 for the rest of a cut body.
pub(crate) struct S3Reopen {
    pub(crate) client: S3Client,
    pub(crate) object: ObjectRef,
}

impl Reopen for S3Reopen {
    fn core(&self) -> &Core {
        self.client.core()
    }

    async fn reopen(&self, etag: &str, from: u64, to: u64) -> Result<Response, Error> {
        let mut op = Op::object("GetObject", Method::GET, &self.object.bucket, Some(&self.object.key))
            .range(Some(RangeSpec::FromTo(from, to)), None)?
            .header("if-match", etag)?;
        self.client.execute(&mut op, |r| async move { Ok(r) }).await
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        request_id(headers)
    }

    fn describe(&self) -> String {
        self.object.to_string()
    }
}
