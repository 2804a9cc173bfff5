//! The provider-neutral seam: one small trait every object store implements, so the
//! engine, the command line and the Python package are written once for S3, GCS and
//! Azure alike.
//!
//! ```text
//! engine / cli / py ──► dyn ObjectStore ──► s3::S3Client     (ListObjectsV2, UploadPart, ...)
//!        │                    │          └─► (gcs, azure: one folder each, same trait)
//!        │                    └─ capabilities(): part limits, batch size, stored checksum
//!        └─ ObjectStoreExt: conveniences built on the required calls (get_bytes, list_all)
//! ```
//!
//! The required trait holds the operations every provider has, in the provider-neutral
//! model of [`crate::types`]: head, get (ranged, streaming), put, a multipart-equivalent
//! upload (S3's multipart, GCS's compose, Azure's block list), paged listing with
//! prefix / delimiter / start-after, delete, batch delete, server-side copy, presign, and
//! the bucket calls. What only some providers can do is a typed capability: a method
//! that returns `Option<&dyn Ability>` ([`ObjectStore::part_copy`]) or a field of
//! [`Capabilities`], never a downcast to a provider's type.
//!
//! Every provider runs over ferry-wire, so the trait also hands out the endpoint's
//! adaptive concurrency [`Controller`] (the engine's admission waits under its limit)
//! and the transport (for its counters).
//!
//! # Contract
//!
//! Every implementation, checked by the conformance suite (`crates/store/tests/conformance.rs`):
//! - **Bodies stream.** [`ObjectStore::get`] returns as soon as the response head is
//!   read; its body yields chunks as the caller polls, never an unbounded buffer.
//! - **Bytes are checked.** A GET body ends with [`Error::Integrity`] if its length or
//!   the object's stored checksum (where the provider keeps one and the read is whole)
//!   does not match; a cut body is resumed from the first missing byte, pinned to the
//!   same version (ETag or generation), or ends with [`Error::Precondition`].
//! - **Ranges are exact.** A ranged GET yields exactly the bytes of the range clipped to
//!   the object, and `range` in the output says which.
//! - **Errors mean one thing.** Failures are the variants of [`Error`] by meaning
//!   (`NotFound`, `Precondition`, `Throttled`, `Auth`, `Transport`, `Protocol`,
//!   `Integrity`), carrying the provider's request id where it sent one.
//! - **Retries are the store's.** Each call retries what is safe to retry under the
//!   client's retry budget; a caller never retries an operation the store gave up on.
//! - **Nothing half-written.** A put either stores the whole object or nothing; an
//!   upload is visible only after [`ObjectStore::complete_upload`], and
//!   [`ObjectStore::abort_upload`] drops its parts.
//! - **Listing is ordered.** Pages come in key order (UTF-8 byte order), each page only
//!   when the stream is polled; with a delimiter, common prefixes come with the page.

use crate::error::Error;
use crate::types::*;
use crate::url::Provider;
use bytes::Bytes;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_wire::controller::Controller;
use ferry_wire::Transport;
use futures_util::stream::{BoxStream, StreamExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The bytes of a put.
pub enum PutPayload {
    /// In memory: the checksum is computed up front and the request can be replayed.
    Bytes(Bytes),
    /// A whole local file, read again for every attempt.
    File(PathBuf),
    /// A stream of exactly `len` bytes, sent once (not retried).
    Stream { len: u64, stream: BoxStream<'static, std::io::Result<Bytes>> },
}

/// The bytes of one part of an upload.
#[derive(Clone, Debug)]
pub enum PartPayload {
    /// In memory (a part cut from a stream).
    Bytes(Bytes),
    /// `len` bytes of a local file from `offset`, streamed from the file.
    File { path: PathBuf, offset: u64, len: u64 },
}

impl PartPayload {
    pub fn len(&self) -> u64 {
        match self {
            PartPayload::Bytes(b) => b.len() as u64,
            PartPayload::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How large the parts of one upload (or ranged download, or server-side copy) may be:
/// the one place the provider's limits meet the size the caller prefers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartLimits {
    /// Smallest part but the last.
    pub min_part: u64,
    /// Largest part.
    pub max_part: u64,
    /// Most parts in one upload.
    pub max_parts: u64,
}

/// How a transfer of `len` bytes is cut: `count` parts of `part_size` (the last may be
/// shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartPlan {
    pub part_size: u64,
    pub count: u64,
}

impl PartLimits {
    /// Parts of `preferred` bytes, raised until `len` fits the most parts and at least
    /// the smallest part, and never above the largest part. An empty object is one part.
    pub fn plan(&self, len: u64, preferred: u64) -> PartPlan {
        let part_size = preferred.max(len.div_ceil(self.max_parts)).max(self.min_part).min(self.max_part).max(1);
        PartPlan { part_size, count: len.div_ceil(part_size).max(1) }
    }

    /// The part size for a stream whose length is unknown but at most `expected` bytes
    /// (`None`: unbounded, so `preferred` as it is).
    pub fn plan_stream(&self, preferred: u64, expected: Option<u64>) -> u64 {
        match expected {
            Some(len) => self.plan(len, preferred).part_size,
            None => preferred.max(self.min_part).min(self.max_part),
        }
    }

    /// `(offset, len)` of each part of a plan over `len` bytes.
    pub fn spans(plan: PartPlan, len: u64) -> impl Iterator<Item = (u64, u64)> {
        (0..plan.count).map(move |i| {
            let offset = i * plan.part_size;
            (offset, (len.saturating_sub(offset)).min(plan.part_size))
        })
    }
}

/// What a provider can do beyond the required trait, as values the engine reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Limits of a multipart-equivalent upload.
    pub parts: PartLimits,
    /// Most keys in one batch delete.
    pub max_batch_delete: usize,
    /// Largest object one server-side [`ObjectStore::copy`] call copies; larger ones need
    /// [`ObjectStore::part_copy`].
    pub max_copy: u64,
    /// The full-object checksum the provider stores and states on HEAD/GET (S3's
    /// CRC64NVME): `sync --checksum` compares it with local bytes, and uploads send it.
    pub stored_checksum: Option<ChecksumAlgorithm>,
}

/// A provider's object store. Object safe: the engine holds an `Arc<dyn ObjectStore>`.
/// See the module's `# Contract`.
#[async_trait::async_trait]
pub trait ObjectStore: Send + Sync + std::fmt::Debug + 'static {
    /// Which provider this is (the scheme of its URLs).
    fn provider(&self) -> Provider;

    /// Limits and abilities the engine plans with.
    fn capabilities(&self) -> Capabilities;

    /// The endpoint's adaptive concurrency controller (ferry-wire): the engine's
    /// admission waits for room under its limit. Shared by the store's clones.
    fn controller(&self) -> Arc<Controller>;

    /// The transport requests go through (its name and counters).
    fn transport(&self) -> &Arc<dyn Transport>;

    /// The object's size, ETag, dates, metadata and stored checksums.
    async fn head(&self, object: &ObjectRef) -> Result<ObjectInfo, Error>;

    /// The object (or a range of it), its body streaming.
    async fn get(&self, object: &ObjectRef, params: GetParams) -> Result<GetObjectOutput, Error>;

    /// Stores a whole object in one request.
    async fn put(&self, object: &ObjectRef, payload: PutPayload, params: PutParams) -> Result<PutObjectOutput, Error>;

    /// Starts a multipart-equivalent upload; nothing is visible until it completes.
    async fn create_upload(&self, object: &ObjectRef, params: &PutParams) -> Result<MultipartUpload, Error>;

    /// Sends part `part_number` (from 1) of an upload; the result goes to completion.
    async fn upload_part(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        part: PartPayload,
    ) -> Result<CompletedPart, Error>;

    /// Makes the object from `parts` (any order). `whole_checksum`, in the upload's
    /// algorithm, is stated to the provider, which refuses to complete if its bytes differ.
    async fn complete_upload(
        &self,
        upload: &MultipartUpload,
        parts: &[CompletedPart],
        whole_checksum: Option<String>,
    ) -> Result<CompleteMultipartOutput, Error>;

    /// Drops an upload and its parts.
    async fn abort_upload(&self, upload: &MultipartUpload) -> Result<(), Error>;

    /// Drops an upload's parts on a person's request (`ferry rm --incomplete`), where
    /// [`ObjectStore::abort_upload`] is what a failed transfer calls. They differ only
    /// where dropping the parts touches the object already there (Azure re-commits a
    /// committed blob, changing its ETag); the default is `abort_upload`.
    async fn discard_upload(&self, upload: &MultipartUpload) -> Result<(), Error> {
        self.abort_upload(upload).await
    }

    /// The parts an upload in progress already holds (a resumed upload reuses them).
    async fn list_parts(&self, upload: &MultipartUpload) -> Result<Vec<PartEntry>, Error>;

    /// Uploads in progress in `bucket` whose key starts with `prefix`.
    async fn list_uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadEntry>, Error>;

    /// A listing, one page per item, the next requested only when polled.
    fn list(&self, bucket: &str, params: ListParams) -> BoxStream<'static, Result<ListPage, Error>>;

    /// Deletes one object (deleting a missing object succeeds).
    async fn delete(&self, object: &ObjectRef) -> Result<(), Error>;

    /// Deletes up to [`Capabilities::max_batch_delete`] keys in one request; per-key
    /// failures are in the output, not the error.
    async fn delete_batch(&self, bucket: &str, keys: &[String]) -> Result<DeleteObjectsOutput, Error>;

    /// Server-side copy of a whole object up to [`Capabilities::max_copy`].
    async fn copy(&self, source: &ObjectRef, dest: &ObjectRef, params: CopyParams) -> Result<CopyObjectOutput, Error>;

    /// A URL that lets anyone holding it GET the object until `expires` from now.
    fn presign_get(&self, object: &ObjectRef, expires: Duration) -> Result<String, Error>;

    /// [`ObjectStore::presign_get`] for providers that must ask the service first
    /// (Azure with a bearer token fetches a user delegation key to sign with); the
    /// default signs locally.
    async fn presign(&self, object: &ObjectRef, expires: Duration) -> Result<String, Error> {
        self.presign_get(object, expires)
    }

    async fn create_bucket(&self, bucket: &str) -> Result<(), Error>;

    async fn delete_bucket(&self, bucket: &str) -> Result<(), Error>;

    async fn list_buckets(&self) -> Result<Vec<BucketEntry>, Error>;

    /// Server-side copy of a byte range into an upload's part (S3's UploadPartCopy), for
    /// copies above [`Capabilities::max_copy`]; `None` where the provider has none.
    fn part_copy(&self) -> Option<&dyn PartCopy> {
        None
    }
}

/// Filling an upload's part from a range of an existing object, server side.
#[async_trait::async_trait]
pub trait PartCopy: Send + Sync {
    async fn upload_part_copy(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        source: &CopySource,
    ) -> Result<CompletedPart, Error>;
}

/// Conveniences over the required calls, for every store.
#[async_trait::async_trait]
pub trait ObjectStoreExt: ObjectStore {
    /// The whole object in memory (small objects and tests).
    async fn get_bytes(&self, object: &ObjectRef) -> Result<Bytes, Error> {
        self.get(object, GetParams::default()).await?.body.collect().await
    }

    /// Stores `bytes` with the default parameters.
    async fn put_bytes(&self, object: &ObjectRef, bytes: Bytes) -> Result<PutObjectOutput, Error> {
        self.put(object, PutPayload::Bytes(bytes), PutParams::default()).await
    }

    /// Whether the object exists (a HEAD; `NotFound` is `false`).
    async fn exists(&self, object: &ObjectRef) -> Result<bool, Error> {
        match self.head(object).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every page of a listing collected: objects and common prefixes (small listings).
    async fn list_all(&self, bucket: &str, params: ListParams) -> Result<(Vec<ObjectEntry>, Vec<String>), Error> {
        let mut pages = self.list(bucket, params);
        let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
        while let Some(p) = pages.next().await {
            let p = p?;
            objects.extend(p.objects);
            prefixes.extend(p.common_prefixes);
        }
        Ok((objects, prefixes))
    }
}

impl<T: ObjectStore + ?Sized> ObjectStoreExt for T {}

/// A shared handle on any provider's store.
pub type DynObjectStore = Arc<dyn ObjectStore>;

/// What opening a store takes, whatever the provider: where, as whom, over which
/// transport. Fields a provider has no use for are ignored by it.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// The service's URL (`https://s3.us-east-1.amazonaws.com`, `http://127.0.0.1:9000`).
    /// `None`: the provider's own default (S3: the region's AWS endpoint; each other
    /// provider documents its lookup, such as an emulator named in the environment).
    pub endpoint: Option<String>,
    /// `None`: the provider's own lookup (S3: AWS_REGION, the profile, else us-east-1).
    pub region: Option<String>,
    /// S3's sources as they are. To the other providers `Default` means their own
    /// lookup (the way that provider's SDKs find credentials) and `Anonymous` means
    /// unsigned; the S3-only variants are a configuration error there.
    pub credentials: crate::CredentialsSource,
    pub mode: ferry_wire::Mode,
    /// A CA bundle to trust besides the system's.
    pub ca_file: Option<PathBuf>,
    /// `None`: the transport's default cap.
    pub max_connections: Option<usize>,
    /// Wraps the transport the store opens (an observer that counts or records its
    /// requests); `None`: the transport as it is.
    pub transport_layer: Option<TransportLayer>,
    /// Time-outs and attempts; `Default`: the transport's and [`RetryConfig`]'s own.
    pub limits: RequestLimits,
}

/// How long a request may go without progress and how many times it is tried, in the
/// AWS CLI's terms (`--cli-read-timeout`, `--cli-connect-timeout`, `AWS_MAX_ATTEMPTS`).
/// Each `None` keeps the default: 60 s, 10 s and 5 attempts.
///
/// These bound a request whose peer went silent (a dead link, a hung server): every
/// attempt ends once `read_timeout` passes with no byte of it moving either way (the
/// response head, a request body byte taken, a response body byte), and a connection
/// that is not up within `connect_timeout` fails. The worst case of one request against
/// a silent peer is therefore about `max_attempts x (connect_timeout + read_timeout)`
/// plus the backoff between attempts (full jitter, at most 20 s each, ~2 s in all over
/// 5 attempts); a GET whose body stalls is resumed with Range up to `max_attempts - 1`
/// times, each resume a request of its own. The shared retry budget (retry.rs) stops
/// retrying earlier when many requests fail at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestLimits {
    /// No progress for this long ends an attempt with a retry-safe time-out.
    pub read_timeout: Option<std::time::Duration>,
    /// A TCP (and TLS) connection not up within this long fails (always retry-safe).
    pub connect_timeout: Option<std::time::Duration>,
    /// Attempts per request, the first included (1: no retries).
    pub max_attempts: Option<u32>,
}

impl RequestLimits {
    /// Sets the time-outs on a transport's settings.
    pub fn apply(&self, tc: &mut ferry_wire::TransportConfig) {
        if let Some(t) = self.read_timeout {
            tc.response_timeout = t;
        }
        if let Some(t) = self.connect_timeout {
            tc.connect_timeout = t;
        }
    }

    /// Attempts from `AWS_MAX_ATTEMPTS`, as the AWS SDKs read it: `None` when unset or
    /// empty, an error naming the value when it is not a whole number of 1 or more.
    pub fn attempts_from_env() -> Result<Option<u32>, String> {
        match std::env::var("AWS_MAX_ATTEMPTS") {
            Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Some(n)),
                _ => Err(format!("AWS_MAX_ATTEMPTS={v:?} is not a number of attempts (1 or more)")),
            },
            _ => Ok(None),
        }
    }

    /// `retry` with the attempts set.
    pub fn retry(&self, retry: crate::RetryConfig) -> crate::RetryConfig {
        match self.max_attempts {
            Some(n) => crate::RetryConfig { max_attempts: n.max(1), ..retry },
            None => retry,
        }
    }
}

/// A wrapper put around a store's transport when it is opened, told which provider the
/// store is for: every request of the store, retries included, passes through what it
/// returns (the Python package's `stats()` counts requests this way).
#[derive(Clone)]
pub struct TransportLayer(Arc<WrapTransport>);

/// What a [`TransportLayer`] calls: the provider and its transport in, the wrapped one out.
type WrapTransport = dyn Fn(Provider, Arc<dyn Transport>) -> Arc<dyn Transport> + Send + Sync;

impl TransportLayer {
    pub fn new(wrap: impl Fn(Provider, Arc<dyn Transport>) -> Arc<dyn Transport> + Send + Sync + 'static) -> Self {
        TransportLayer(Arc::new(wrap))
    }

    /// `transport` as the store for `provider` is to use it.
    pub fn wrap(&self, provider: Provider, transport: Arc<dyn Transport>) -> Arc<dyn Transport> {
        (self.0)(provider, transport)
    }
}

impl std::fmt::Debug for TransportLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransportLayer")
    }
}

/// `transport` wrapped by `layer`, if there is one.
pub(crate) fn layered(
    layer: &Option<TransportLayer>,
    provider: Provider,
    transport: Arc<dyn Transport>,
) -> Arc<dyn Transport> {
    match layer {
        Some(l) => l.wrap(provider, transport),
        None => transport,
    }
}

impl StoreOptions {
    pub fn new(endpoint: impl Into<String>) -> StoreOptions {
        StoreOptions {
            endpoint: Some(endpoint.into()),
            region: None,
            credentials: crate::CredentialsSource::Default,
            mode: ferry_wire::Mode::Auto,
            ca_file: None,
            max_connections: None,
            transport_layer: None,
            limits: RequestLimits::default(),
        }
    }
}

/// Opens the store of `provider` (no connection yet): the one place a front end turns a
/// URL's scheme into a client, so no front end names a provider's type.
pub fn connect(provider: Provider, options: StoreOptions) -> Result<DynObjectStore, Error> {
    match provider {
        Provider::S3 => {
            let endpoint = options.endpoint.unwrap_or_else(|| {
                format!("https://s3.{}.amazonaws.com", options.region.as_deref().unwrap_or("us-east-1"))
            });
            let mut b = crate::S3Client::builder(endpoint).credentials(options.credentials).mode(options.mode);
            if let Some(r) = options.region {
                b = b.region(r);
            }
            if let Some(ca) = options.ca_file {
                b = b.ca_file(ca);
            }
            if let Some(n) = options.max_connections {
                b = b.max_connections(n);
            }
            b.transport_layer = options.transport_layer;
            b.limits = options.limits;
            Ok(Arc::new(b.build()?))
        }
        Provider::Gcs => crate::gcs::connect(options),
        Provider::Azure => crate::azure::connect(options),
    }
}

/// Implements [`ObjectStore`] for a provider's client by naming, for each required
/// call, the client's own method that does it (each with the trait's signature; the
/// provider's names stay its API's: `head_object`, `get_blob`, ...). Controller and
/// transport come from the client's request layer (request.rs). A trailing `part_copy`
/// says the provider has that capability (the client implements [`PartCopy`]); the
/// optional `; presign:` and `; discard_upload:` name overrides of those defaults.
// Expanded where the model (`crate::types::*`) and `Error` are in scope.
macro_rules! object_store_by_names {
    ($client:ty, $provider:expr, $capabilities:expr, {
        head: $head:ident, get: $get:ident, put: $put:ident,
        create_upload: $create_upload:ident, upload_part: $upload_part:ident,
        complete_upload: $complete_upload:ident, abort_upload: $abort_upload:ident,
        list_parts: $list_parts:ident, list_uploads: $list_uploads:ident, list: $list:ident,
        delete: $delete:ident, delete_batch: $delete_batch:ident, copy: $copy:ident,
        presign_get: $presign_get:ident, create_bucket: $create_bucket:ident,
        delete_bucket: $delete_bucket:ident, list_buckets: $list_buckets:ident $(, $part_copy:ident)?
        $(; presign: $presign:ident)? $(; discard_upload: $discard_upload:ident)? $(,)?
    }) => {
        #[async_trait::async_trait]
        impl $crate::store::ObjectStore for $client {
            fn provider(&self) -> $crate::url::Provider {
                $provider
            }

            fn capabilities(&self) -> $crate::store::Capabilities {
                $capabilities
            }

            fn controller(&self) -> std::sync::Arc<ferry_wire::controller::Controller> {
                self.core().controller.clone()
            }

            fn transport(&self) -> &std::sync::Arc<dyn ferry_wire::Transport> {
                &self.core().transport
            }

            async fn head(&self, object: &ObjectRef) -> Result<ObjectInfo, Error> {
                <$client>::$head(self, &object.of($provider)).await
            }

            async fn get(&self, object: &ObjectRef, params: GetParams) -> Result<GetObjectOutput, Error> {
                <$client>::$get(self, &object.of($provider), params).await
            }

            async fn put(
                &self,
                object: &ObjectRef,
                payload: $crate::store::PutPayload,
                params: PutParams,
            ) -> Result<PutObjectOutput, Error> {
                <$client>::$put(self, &object.of($provider), payload, params).await
            }

            async fn create_upload(&self, object: &ObjectRef, params: &PutParams) -> Result<MultipartUpload, Error> {
                <$client>::$create_upload(self, &object.of($provider), params).await
            }

            async fn upload_part(
                &self,
                upload: &MultipartUpload,
                part_number: u32,
                part: $crate::store::PartPayload,
            ) -> Result<CompletedPart, Error> {
                <$client>::$upload_part(self, upload, part_number, part).await
            }

            async fn complete_upload(
                &self,
                upload: &MultipartUpload,
                parts: &[CompletedPart],
                whole_checksum: Option<String>,
            ) -> Result<CompleteMultipartOutput, Error> {
                <$client>::$complete_upload(self, upload, parts, whole_checksum).await
            }

            async fn abort_upload(&self, upload: &MultipartUpload) -> Result<(), Error> {
                <$client>::$abort_upload(self, upload).await
            }

            async fn list_parts(&self, upload: &MultipartUpload) -> Result<Vec<PartEntry>, Error> {
                <$client>::$list_parts(self, upload).await
            }

            async fn list_uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadEntry>, Error> {
                <$client>::$list_uploads(self, bucket, prefix).await
            }

            fn list(
                &self,
                bucket: &str,
                params: ListParams,
            ) -> futures_util::stream::BoxStream<'static, Result<ListPage, Error>> {
                <$client>::$list(self, bucket, params)
            }

            async fn delete(&self, object: &ObjectRef) -> Result<(), Error> {
                <$client>::$delete(self, &object.of($provider)).await
            }

            async fn delete_batch(&self, bucket: &str, keys: &[String]) -> Result<DeleteObjectsOutput, Error> {
                <$client>::$delete_batch(self, bucket, keys).await
            }

            async fn copy(
                &self,
                source: &ObjectRef,
                dest: &ObjectRef,
                params: CopyParams,
            ) -> Result<CopyObjectOutput, Error> {
                <$client>::$copy(self, &source.of($provider), &dest.of($provider), params).await
            }

            fn presign_get(&self, object: &ObjectRef, expires: std::time::Duration) -> Result<String, Error> {
                <$client>::$presign_get(self, &object.of($provider), expires)
            }

            async fn create_bucket(&self, bucket: &str) -> Result<(), Error> {
                <$client>::$create_bucket(self, bucket).await
            }

            async fn delete_bucket(&self, bucket: &str) -> Result<(), Error> {
                <$client>::$delete_bucket(self, bucket).await
            }

            async fn list_buckets(&self) -> Result<Vec<BucketEntry>, Error> {
                <$client>::$list_buckets(self).await
            }

            $(
                async fn presign(&self, object: &ObjectRef, expires: std::time::Duration) -> Result<String, Error> {
                    <$client>::$presign(self, &object.of($provider), expires).await
                }
            )?

            $(
                async fn discard_upload(&self, upload: &MultipartUpload) -> Result<(), Error> {
                    <$client>::$discard_upload(self, upload).await
                }
            )?

            $(
                fn $part_copy(&self) -> Option<&dyn $crate::store::PartCopy> {
                    Some(self)
                }
            )?
        }
    };
}
pub(crate) use object_store_by_names;

#[cfg(test)]
mod tests {
    use super::*;

    const S3: PartLimits = PartLimits { min_part: 5 << 20, max_part: 5 << 30, max_parts: 10_000 };

    #[test]
    fn a_plan_fits_the_limits_and_covers_the_object() {
        for (len, preferred) in [(0, 8 << 20), (1, 8 << 20), (100 << 30, 8 << 20), (1 << 40, 1 << 20), (7, 1)] {
            let plan = S3.plan(len, preferred);
            assert!(plan.count <= S3.max_parts, "{len} {preferred}: {plan:?}");
            assert!(plan.part_size >= S3.min_part && plan.part_size <= S3.max_part, "{plan:?}");
            let spans: Vec<_> = PartLimits::spans(plan, len).collect();
            assert_eq!(spans.iter().map(|s| s.1).sum::<u64>(), len);
            assert!(spans.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
        }
        assert_eq!(S3.plan(100 << 30, 8 << 20).part_size, (100u64 << 30).div_ceil(10_000));
        assert_eq!(S3.plan(16 << 20, 8 << 20), PartPlan { part_size: 8 << 20, count: 2 });
    }
}
