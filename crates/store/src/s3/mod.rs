//! Amazon S3 and the services that speak its API: the first [`crate::ObjectStore`].
//!
//! ```text
//! S3Client (client.rs: Op ─► address ─► SigV4 ─► Transport::send, retries)
//!   ├─ object.rs     GetObject, HeadObject, PutObject, DeleteObject(s), CopyObject
//!   ├─ list.rs       ListObjectsV2 pages
//!   ├─ buckets.rs    ListBuckets, ListMultipartUploads
//!   ├─ multipart.rs  Create / UploadPart / UploadPartCopy / Complete / Abort / ListParts
//!   ├─ body.rs       GET bodies checked on the fly (length, x-amz-checksum-*, MD5 ETag), resumed if cut
//!   ├─ credentials.rs  the AWS SDKs' lookup chain (env, profiles, config files)
//!   └─ settings.rs     the rest of that chain: profile, region, endpoint, CA bundle
//! ```
//!
//! The wire quirks written down once, here: S3 stores a full-object CRC64NVME for new
//! objects and states it with `x-amz-checksum-mode: ENABLED`; a multipart upload with a
//! CRC is created FULL_OBJECT so Complete can state the whole object's CRC; parts are
//! 5 MiB to 5 GiB, at most 10,000 of them; DeleteObjects takes 1,000 keys; CopyObject
//! copies up to 5 GiB, UploadPartCopy the rest (S3 User Guide, "Amazon S3 multipart
//! upload limits"; docs/lab/store-s3-facts.md).

pub mod body;
pub mod buckets;
pub mod client;
pub mod credentials;
pub mod error;
pub mod list;
pub mod multipart;
pub mod object;
#[cfg(test)]
mod scripted;
pub mod settings;
#[cfg(test)]
mod tests;

use crate::error::Error;
use crate::store::{Capabilities, ObjectStore, PartCopy, PartLimits, PartPayload, PutPayload};
use crate::types::*;
use crate::url::Provider;
use client::S3Client;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_wire::controller::Controller;
use ferry_wire::Transport;
use futures_util::stream::BoxStream;
use std::sync::Arc;
use std::time::Duration;

/// S3's limits on a multipart upload.
pub const PART_LIMITS: PartLimits = PartLimits {
    min_part: multipart::MIN_PART_SIZE,
    max_part: multipart::MAX_PART_SIZE,
    max_parts: multipart::MAX_PARTS,
};

#[async_trait::async_trait]
impl ObjectStore for S3Client {
    fn provider(&self) -> Provider {
        Provider::S3
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            parts: PART_LIMITS,
            max_batch_delete: object::DELETE_OBJECTS_MAX_KEYS,
            max_copy: multipart::MAX_PART_SIZE,
            stored_checksum: Some(ChecksumAlgorithm::Crc64Nvme),
        }
    }

    fn controller(&self) -> Arc<Controller> {
        S3Client::controller(self)
    }

    fn transport(&self) -> &Arc<dyn Transport> {
        S3Client::transport(self)
    }

    async fn head(&self, object: &ObjectRef) -> Result<ObjectInfo, Error> {
        self.head_object(object).await
    }

    async fn get(&self, object: &ObjectRef, params: GetParams) -> Result<GetObjectOutput, Error> {
        self.get_object(object, params).await
    }

    async fn put(&self, object: &ObjectRef, payload: PutPayload, params: PutParams) -> Result<PutObjectOutput, Error> {
        match payload {
            PutPayload::Bytes(b) => self.put_object(object, b, params).await,
            PutPayload::File(path) => self.put_object_file(object, path, params).await,
            PutPayload::Stream { len, stream } => self.put_object_stream(object, len, stream, params).await,
        }
    }

    async fn create_upload(&self, object: &ObjectRef, params: &PutParams) -> Result<MultipartUpload, Error> {
        self.create_multipart(object, params).await
    }

    async fn upload_part(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        part: PartPayload,
    ) -> Result<CompletedPart, Error> {
        match part {
            PartPayload::Bytes(b) => S3Client::upload_part(self, upload, part_number, b).await,
            PartPayload::File { path, offset, len } => {
                self.upload_part_file(upload, part_number, &path, offset, len).await
            }
        }
    }

    async fn complete_upload(
        &self,
        upload: &MultipartUpload,
        parts: &[CompletedPart],
        whole_checksum: Option<String>,
    ) -> Result<CompleteMultipartOutput, Error> {
        match whole_checksum {
            Some(whole) => self.complete_multipart_checked(upload, parts, whole).await,
            None => self.complete_multipart(upload, parts).await,
        }
    }

    async fn abort_upload(&self, upload: &MultipartUpload) -> Result<(), Error> {
        self.abort_multipart(upload).await
    }

    async fn list_parts(&self, upload: &MultipartUpload) -> Result<Vec<PartEntry>, Error> {
        S3Client::list_parts(self, upload).await
    }

    async fn list_uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadEntry>, Error> {
        self.list_multipart_uploads(bucket, prefix).await
    }

    fn list(&self, bucket: &str, params: ListParams) -> BoxStream<'static, Result<ListPage, Error>> {
        self.list_objects_v2(bucket, params)
    }

    async fn delete(&self, object: &ObjectRef) -> Result<(), Error> {
        self.delete_object(object).await
    }

    async fn delete_batch(&self, bucket: &str, keys: &[String]) -> Result<DeleteObjectsOutput, Error> {
        self.delete_objects(bucket, keys).await
    }

    async fn copy(&self, source: &ObjectRef, dest: &ObjectRef, params: CopyParams) -> Result<CopyObjectOutput, Error> {
        self.copy_object(source, dest, params).await
    }

    fn presign_get(&self, object: &ObjectRef, expires: Duration) -> Result<String, Error> {
        S3Client::presign_get(self, object, expires)
    }

    async fn create_bucket(&self, bucket: &str) -> Result<(), Error> {
        S3Client::create_bucket(self, bucket).await
    }

    async fn delete_bucket(&self, bucket: &str) -> Result<(), Error> {
        S3Client::delete_bucket(self, bucket).await
    }

    async fn list_buckets(&self) -> Result<Vec<BucketEntry>, Error> {
        S3Client::list_buckets(self).await
    }

    fn part_copy(&self) -> Option<&dyn PartCopy> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl PartCopy for S3Client {
    async fn upload_part_copy(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        source: &CopySource,
    ) -> Result<CompletedPart, Error> {
        S3Client::upload_part_copy(self, upload, part_number, source).await
    }
}

impl From<S3Client> for crate::DynObjectStore {
    fn from(c: S3Client) -> crate::DynObjectStore {
        Arc::new(c)
    }
}
