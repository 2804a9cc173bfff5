//! Amazon S3 and the services that speak its API: the first [`crate::ObjectStore`].
//!
//! ```text
//! S3Client (client.rs: Op ─► address ─► SigV4 ─► Transport::send, retries)
//!   ├─ object.rs     GetObject, HeadObject, PutObject, DeleteObject(s), CopyObject
//!   ├─ list.rs       ListObjectsV2 pages
//!   ├─ buckets.rs    ListBuckets, ListMultipartUploads
//!   ├─ multipart.rs  Create / UploadPart / UploadPartCopy / Complete / Abort / ListParts
//!   ├─ body.rs       GET bodies checked on the fly (length, x-amz-checksum-*, MD5 ETag), resumed if cut
//!   ├─ credentials.rs  the AWS SDKs' lookup chain (env, web identity, profiles, config files)
//!   ├─ credentials_fetch.rs  temporary keys: credential_process, STS AssumeRoleWithWebIdentity, AssumeRole
//!   ├─ credentials_metadata.rs  temporary keys: container endpoint (ECS, EKS), EC2 instance metadata
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
pub mod credentials_fetch;
pub mod credentials_metadata;
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
use crate::store::{Capabilities, PartCopy, PartLimits, PartPayload, PutPayload};
use crate::types::*;
use crate::url::Provider;
use client::S3Client;
use ferry_proto::checksum::ChecksumAlgorithm;
use std::sync::Arc;

/// S3's limits on a multipart upload.
pub const PART_LIMITS: PartLimits = PartLimits {
    min_part: multipart::MIN_PART_SIZE,
    max_part: multipart::MAX_PART_SIZE,
    max_parts: multipart::MAX_PARTS,
};

crate::store::object_store_by_names!(S3Client, Provider::S3, Capabilities {
    parts: PART_LIMITS,
    max_batch_delete: object::DELETE_OBJECTS_MAX_KEYS,
    max_copy: multipart::MAX_PART_SIZE,
    stored_checksum: Some(ChecksumAlgorithm::Crc64Nvme),
}, {
    head: head_object, get: get_object, put: put_payload,
    create_upload: create_multipart, upload_part: upload_part_payload,
    complete_upload: complete_upload_checked, abort_upload: abort_multipart,
    list_parts: list_parts, list_uploads: list_multipart_uploads, list: list_objects_v2,
    delete: delete_object, delete_batch: delete_objects, copy: copy_object,
    presign_get: presign_get, create_bucket: create_bucket,
    delete_bucket: delete_bucket, list_buckets: list_buckets, part_copy,
});

/// The trait's payload-taking calls, on S3's per-kind operations.
impl S3Client {
    async fn put_payload(
        &self,
        object: &ObjectRef,
        payload: PutPayload,
        params: PutParams,
    ) -> Result<PutObjectOutput, Error> {
        match payload {
            PutPayload::Bytes(b) => self.put_object(object, b, params).await,
            PutPayload::File(path) => self.put_object_file(object, path, params).await,
            PutPayload::Stream { len, stream } => self.put_object_stream(object, len, stream, params).await,
        }
    }

    async fn upload_part_payload(
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

    /// Completes with the whole object's checksum stated when there is one.
    async fn complete_upload_checked(
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
