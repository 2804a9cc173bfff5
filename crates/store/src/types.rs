//! The provider-neutral model: what names an object, what a store says about one, and
//! the parameters and results of every [`crate::ObjectStore`] operation. Every provider
//! reads and writes these; a provider's own spelling (S3's headers, GCS's JSON, Azure's
//! `x-ms-*`) lives in its folder.

use crate::error::Error;
use bytes::Bytes;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_proto::range::RangeSpec;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

pub use ferry_proto::xml::{CompletedPart, DeleteError, ObjectEntry, PartEntry, UploadEntry};

/// An object's location: a bucket (container) and a key, and the provider whose URL
/// scheme names it in messages.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub bucket: String,
    pub key: String,
    /// Whose object this is; [`ObjectRef::new`] says S3, a URL's object its own.
    pub provider: crate::url::Provider,
}

impl ObjectRef {
    /// An S3 object (`s3://bucket/key`).
    pub fn new(bucket: impl Into<String>, key: impl Into<String>) -> ObjectRef {
        ObjectRef::on(crate::url::Provider::S3, bucket, key)
    }

    /// An object of `provider`.
    pub fn on(provider: crate::url::Provider, bucket: impl Into<String>, key: impl Into<String>) -> ObjectRef {
        ObjectRef { bucket: bucket.into(), key: key.into(), provider }
    }

    /// Another object of the same provider and bucket (a listed key beside a pattern's).
    pub fn at(&self, key: impl Into<String>) -> ObjectRef {
        ObjectRef::on(self.provider, &self.bucket, key)
    }

    /// This object as `provider`'s: itself when it already says so, else a copy that
    /// does. A store stamps every object it is handed, so its messages name the object
    /// with its own scheme whichever way the caller built the reference.
    pub fn of(&self, provider: crate::url::Provider) -> std::borrow::Cow<'_, ObjectRef> {
        if self.provider == provider {
            std::borrow::Cow::Borrowed(self)
        } else {
            std::borrow::Cow::Owned(ObjectRef { provider, ..self.clone() })
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}/{}", self.provider.scheme(), self.bucket, self.key)
    }
}

/// What HEAD and GET say about an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The whole object's size (also for a ranged GET).
    pub size: u64,
    /// As sent, quotes included.
    pub etag: Option<String>,
    pub last_modified: Option<SystemTime>,
    pub content_type: Option<String>,
    /// `x-amz-meta-*` values, names without the prefix, lower case.
    pub metadata: BTreeMap<String, String>,
    /// `x-amz-checksum-*` values (base64; `-N` for composite multipart checksums).
    pub checksums: Vec<(ChecksumAlgorithm, String)>,
}

/// GetObject parameters.
#[derive(Clone, Debug)]
pub struct GetParams {
    pub range: Option<RangeSpec>,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<SystemTime>,
    pub if_unmodified_since: Option<SystemTime>,
    /// Ask for the object's checksum (`x-amz-checksum-mode: ENABLED`) to verify a full
    /// GET against it. On by default.
    pub checksum_mode: bool,
    /// The object's size when known (from a listing or a HEAD): with the `auto`
    /// transport a small object's GET then goes down the pipeline (wire's auto/mod.rs).
    pub size_hint: Option<u64>,
}

impl Default for GetParams {
    fn default() -> Self {
        GetParams {
            range: None,
            if_match: None,
            if_none_match: None,
            if_modified_since: None,
            if_unmodified_since: None,
            checksum_mode: true,
            size_hint: None,
        }
    }
}

impl GetParams {
    pub fn range(range: RangeSpec) -> GetParams {
        GetParams { range: Some(range), ..GetParams::default() }
    }
}

/// GetObject result: the object's description and its body, streaming.
#[derive(Debug)]
pub struct GetObjectOutput {
    pub meta: ObjectInfo,
    /// `(first, last)` byte of the object in the body (inclusive).
    pub range: Option<(u64, u64)>,
    pub body: ObjectBody,
}

/// PutObject parameters.
#[derive(Clone, Debug)]
pub struct PutParams {
    pub content_type: Option<String>,
    /// Sent as `x-amz-meta-<name>`.
    pub metadata: Vec<(String, String)>,
    /// The checksum S3 verifies the upload against; `None` sends none.
    pub checksum: Option<ChecksumAlgorithm>,
    /// `If-None-Match: *`: fail with [`Error::Precondition`] if the key exists.
    pub if_none_match_star: bool,
    /// Also send Content-MD5 (bytes and files only).
    pub content_md5: bool,
}

impl Default for PutParams {
    fn default() -> Self {
        PutParams {
            content_type: None,
            metadata: Vec::new(),
            checksum: Some(ChecksumAlgorithm::Crc64Nvme),
            if_none_match_star: false,
            content_md5: false,
        }
    }
}

/// PutObject result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutObjectOutput {
    pub etag: Option<String>,
    /// The checksum sent (and, when the server echoed it, confirmed).
    pub checksum: Option<(ChecksumAlgorithm, String)>,
}

/// CopyObject parameters.
#[derive(Clone, Debug, Default)]
pub struct CopyParams {
    /// `Some`: replace the metadata (`x-amz-metadata-directive: REPLACE`); `None`: copy it.
    pub metadata: Option<Vec<(String, String)>>,
    pub content_type: Option<String>,
    /// `x-amz-copy-source-if-match`.
    pub if_match: Option<String>,
}

/// CopyObject result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyObjectOutput {
    pub etag: String,
    pub last_modified: Option<SystemTime>,
}

/// DeleteObjects result: keys deleted, and one error per key that was not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteObjectsOutput {
    pub deleted: Vec<String>,
    pub errors: Vec<ferry_proto::xml::DeleteError>,
}

/// The streamed body of a GET: chunks in order, ending with an error if anything about
/// the bytes was wrong.
pub struct ObjectBody {
    inner: BoxStream<'static, Result<Bytes, Error>>,
    /// The bytes the body announced (Content-Length, or the Content-Range's length) and
    /// its checks hold it to, when known: [`ObjectBody::collect`] sizes its buffer by it.
    len: Option<u64>,
}

/// The most [`ObjectBody::collect`] reserves up front from an announced length; a longer
/// body grows its buffer past it as its bytes arrive. The engine's spans (8 MiB) and
/// every small object fit; a server cannot make a client reserve more than this by what it
/// announces before sending it.
pub const COLLECT_RESERVE_MAX: u64 = 64 << 20;

impl ObjectBody {
    /// A body over a provider's stream of checked chunks (the provider does the checking:
    /// see [`crate::ObjectStore`]'s contract).
    pub fn new(inner: BoxStream<'static, Result<Bytes, Error>>) -> ObjectBody {
        ObjectBody { inner, len: None }
    }

    /// [`ObjectBody::new`] for a body whose checks hold it to `len` bytes.
    pub fn with_len(inner: BoxStream<'static, Result<Bytes, Error>>, len: Option<u64>) -> ObjectBody {
        ObjectBody { inner, len }
    }

    /// Reads the whole body into memory (small objects, the engine's range spans, tests).
    /// The buffer is reserved once for the announced length: growing it by doubling
    /// copied every byte about once more and, worse, touched fresh pages that the kernel
    /// zeroes on first use; `ferry bench vectored` against MinIO spent most of the
    /// coalesced row's CPU there (docs/lab/engine-ranges.md).
    pub async fn collect(mut self) -> Result<Bytes, Error> {
        let reserve = self.len.unwrap_or(0).min(COLLECT_RESERVE_MAX) as usize;
        let mut out = Vec::with_capacity(reserve);
        while let Some(c) = self.inner.next().await {
            out.extend_from_slice(&c?);
        }
        Ok(Bytes::from(out))
    }

    /// The next chunk; `None` at a verified end.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, Error>> {
        self.inner.next().await
    }
}

impl Stream for ObjectBody {
    type Item = Result<Bytes, Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

impl std::fmt::Debug for ObjectBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectBody")
    }
}

/// ListObjectsV2 parameters.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    pub prefix: Option<String>,
    pub delimiter: Option<String>,
    pub start_after: Option<String>,
    /// Keys per page (S3 caps it at 1,000, its default).
    pub max_keys: Option<u32>,
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<ObjectEntry>,
    /// With a delimiter: the "directories" on this page.
    pub common_prefixes: Vec<String>,
    /// The token for the next page, `None` on the last.
    pub next_continuation_token: Option<String>,
}

/// Where an UploadPartCopy takes its bytes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopySource {
    pub object: ObjectRef,
    /// `(first, last)` byte, inclusive; `None` copies the whole object.
    pub range: Option<(u64, u64)>,
    /// `x-amz-copy-source-if-match`: the part fails (412) if the source changed.
    pub if_match: Option<String>,
}

/// An upload in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultipartUpload {
    pub object: ObjectRef,
    pub upload_id: String,
    /// The algorithm each part is checksummed with.
    pub checksum: Option<ChecksumAlgorithm>,
    /// FULL_OBJECT (CRCs) or COMPOSITE.
    pub full_object_checksum: bool,
}

/// CompleteMultipartUpload result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompleteMultipartOutput {
    pub etag: String,
    pub checksum: Option<(ChecksumAlgorithm, String)>,
}

/// One bucket of ListBuckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketEntry {
    pub name: String,
    pub creation_date: SystemTime,
}

#[cfg(test)]
mod tests {
    use super::ObjectRef;
    use crate::url::Provider;

    #[test]
    fn an_object_prints_with_the_scheme_of_the_store_that_stamps_it() {
        let s3 = ObjectRef::new("b", "dir/k");
        assert_eq!(s3.to_string(), "s3://b/dir/k");
        assert!(matches!(s3.of(Provider::S3), std::borrow::Cow::Borrowed(_)), "already S3's: no copy");
        assert_eq!(s3.of(Provider::Gcs).to_string(), "gs://b/dir/k");
        assert_eq!(s3.of(Provider::Azure).to_string(), "az://b/dir/k");
        assert_eq!(ObjectRef::on(Provider::Gcs, "b", "k").of(Provider::Gcs).provider, Provider::Gcs);
    }

    /// `collect` joins the chunks in order whatever the announced length: the reserve is
    /// a size, never a limit (the checks that hold a body to its length are checked.rs's).
    #[test]
    fn collect_joins_every_chunk_whatever_the_announced_length() {
        use super::ObjectBody;
        use bytes::Bytes;
        use futures_util::StreamExt;
        let chunks = || futures_util::stream::iter([b"ab".as_slice(), b"", b"cde"].map(|c| Ok(Bytes::from_static(c))));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for len in [None, Some(0), Some(5), Some(3), Some(u64::MAX)] {
            let body = ObjectBody::with_len(chunks().boxed(), len);
            assert_eq!(rt.block_on(body.collect()).unwrap(), Bytes::from_static(b"abcde"), "{len:?}");
        }
        let failing =
            futures_util::stream::iter([Ok(Bytes::from_static(b"ab")), Err(crate::Error::protocol("cut", None))]);
        assert!(rt.block_on(ObjectBody::with_len(failing.boxed(), Some(4)).collect()).is_err());
    }
}
