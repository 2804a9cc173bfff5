//! Azure Blob Storage behind [`ObjectStore`]: its REST API, natively, over ferry-wire.
//!
//! ```text
//! AzureClient (client.rs: Op ─► path ─► x-ms-version/x-ms-date ─► Shared Key | SAS | Bearer ─► Transport::send, retries)
//!   ├─ config.rs   account, endpoint and credential from options, connection string, environment
//!   ├─ auth.rs     Shared Key string-to-sign; service SAS for presigned URLs
//!   ├─ token.rs    Entra ID bearer tokens (client secret, managed identity), cached
//!   ├─ object.rs   Get Blob Properties, Get Blob, Put Blob, Delete Blob, Copy Blob
//!   ├─ body.rs     GET bodies checked (length, stored Content-MD5), resumed with If-Match
//!   ├─ blocks.rs   multipart = Put Block + Put Block List; parts listed by Get Block List
//!   ├─ restate.rs  what a rewrite states again: metadata names as stored, index tags
//!   ├─ list.rs     List Blobs pages (start-after emulated), containers
//!   ├─ batch.rs    Blob Batch delete (multipart/mixed, 256 per batch)
//!   └─ error.rs    x-ms-error-code ─► Error by meaning, x-ms-request-id kept
//! ```
//!
//! Wire facts written down once (docs/lab/store-azure-facts.md has their sources):
//! every request names API version [`API_VERSION`], one that Azurite accepts;
//! the service speaks HTTP/1.1 only (h2 is refused at build time; the pipeline runs
//! where auto verifies it); there are no suffix ranges (object.rs turns them into
//! `bytes=a-b`); blocks are at most 4,000 MiB and a blob at most 50,000 of them, with
//! no minimum size, so the engine's parts need no floor; a batch holds 256
//! sub-requests; Azure stores an MD5 for Put Blob (not for a block list) and no CRC64:
//! `x-ms-content-crc64` (little-endian) is checked per request, so Put Blob and Put
//! Block send it in place of Content-MD5 (Azure refuses both at once; object.rs).
//!
//! Capabilities: no stored checksum of the trait's algorithms (MD5 is checked on whole
//! reads but is not one of them), no server-side part copy, Copy Blob for any size.
//! Presigned URLs are service SAS with the account key (a SAS client hands out its own
//! token); a bearer-token client asks for a user delegation key and signs a user
//! delegation SAS with it (auth.rs, `presign_delegated`).

pub mod auth;
pub mod batch;
pub mod blocks;
pub mod body;
pub mod client;
pub mod config;
pub mod error;
pub mod list;
pub mod object;
mod restate;
pub mod token;

pub use client::{AzureClient, AzureClientBuilder};
pub use config::{AzureConfig, AzureCredential, ConnectionString};

use crate::error::Error;
use crate::store::{Capabilities, PartLimits, PutPayload};
use crate::types::*;
use crate::url::Provider;
use crate::{DynObjectStore, StoreOptions};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The `x-ms-version` every request sends: a version whose behaviour this module is
/// written for (Blob Batch container scope, 4,000 MiB blocks, 5,000 MiB Put Blob) and
/// that Azurite (3.35.0 and 3.37.0) lists among its accepted versions.
pub const API_VERSION: &str = "2023-11-03";

/// Azure's limits on a block upload (blocks.rs).
pub const PART_LIMITS: PartLimits =
    PartLimits { min_part: 1, max_part: blocks::MAX_BLOCK, max_parts: blocks::MAX_BLOCKS };

/// Largest block blob: 50,000 blocks of 4,000 MiB; Copy Blob copies any blob.
const MAX_BLOB: u64 = blocks::MAX_BLOCK * blocks::MAX_BLOCKS;

/// Longest SAS a presigned URL is given: the trait's S3-shaped callers expect at most
/// 7 days, and a service SAS signed with the account key cannot be revoked short of
/// rotating the key, so ferry keeps S3's bound.
const MAX_PRESIGN: Duration = Duration::from_secs(7 * 24 * 3600);

/// Opens an Azure Blob Storage client (no connection yet).
pub fn connect(options: StoreOptions) -> Result<DynObjectStore, Error> {
    let config = AzureConfig::resolve(options.endpoint.as_deref(), &options.credentials)?;
    let mut b = AzureClientBuilder::new(config).mode(options.mode);
    b.ca_file = options.ca_file;
    b.max_connections = options.max_connections;
    b.transport_layer = options.transport_layer;
    b.limits = options.limits;
    Ok(Arc::new(b.build()?))
}

crate::store::object_store_by_names!(AzureClient, Provider::Azure, Capabilities {
    parts: PART_LIMITS,
    max_batch_delete: batch::MAX_BATCH,
    max_copy: MAX_BLOB,
    stored_checksum: None,
}, {
    head: head_blob, get: get_blob, put: put_payload,
    create_upload: create_upload, upload_part: put_block,
    complete_upload: complete_upload, abort_upload: abort_upload,
    list_parts: list_upload_blocks, list_uploads: list_block_uploads, list: list_blobs,
    delete: delete_blob, delete_batch: delete_blobs, copy: copy_blob,
    presign_get: presign_blob, create_bucket: create_container,
    delete_bucket: delete_container, list_buckets: list_containers; presign: presign_any;
    discard_upload: discard_block_upload,
});

/// The trait's calls where Azure's differ from its REST operations.
impl AzureClient {
    async fn put_payload(
        &self,
        object: &ObjectRef,
        payload: PutPayload,
        params: PutParams,
    ) -> Result<PutObjectOutput, Error> {
        match payload {
            PutPayload::Bytes(b) => self.put_blob(object, b, params).await,
            PutPayload::File(path) => self.put_blob_file(object, path, params).await,
            PutPayload::Stream { len, stream } => self.put_blob_stream(object, len, stream, params).await,
        }
    }

    async fn create_upload(&self, object: &ObjectRef, params: &PutParams) -> Result<MultipartUpload, Error> {
        Ok(self.create_block_upload(object, params))
    }

    async fn complete_upload(
        &self,
        upload: &MultipartUpload,
        parts: &[CompletedPart],
        _whole_checksum: Option<String>,
    ) -> Result<CompleteMultipartOutput, Error> {
        // Azure keeps no whole-object CRC to state it to; each block's MD5 was checked
        // by Azure as it arrived and its CRC is in its id (blocks.rs).
        self.put_block_list(upload, parts).await
    }

    async fn abort_upload(&self, upload: &MultipartUpload) -> Result<(), Error> {
        self.abort_block_upload(upload).await
    }

    /// A presigned URL: a user delegation SAS with an Entra token (one call to the
    /// service for the key), else a service SAS signed here.
    async fn presign_any(&self, object: &ObjectRef, expires: Duration) -> Result<String, Error> {
        match &self.config().credential {
            config::AzureCredential::Token(_) => self.presign_delegated(object, expires).await,
            _ => self.presign_blob(object, expires),
        }
    }
    /// A URL that reads the blob until `expires` from now (module note).
    pub fn presign_blob(&self, object: &ObjectRef, expires: Duration) -> Result<String, Error> {
        if expires.is_zero() || expires > MAX_PRESIGN {
            return Err(Error::Config(format!("presigned URLs expire after 1 s to 7 days, not {expires:?}")));
        }
        let url = format!("{}{}", self.origin(), self.path(Some(&object.bucket), Some(&object.key)));
        let c = self.config();
        match &c.credential {
            config::AzureCredential::SharedKey(key) => {
                let expiry = iso_seconds(SystemTime::now() + expires);
                let sas = auth::blob_read_sas(&c.account, key, &object.bucket, &object.key, &expiry, API_VERSION);
                Ok(format!("{url}?{sas}"))
            }
            config::AzureCredential::Sas(sas) => Ok(format!("{url}?{sas}")),
            config::AzureCredential::Anonymous => Ok(url),
            config::AzureCredential::Token(_) => Err(Error::Config(
                "presigning with an Entra ID token needs a user delegation key from the service: use presign (async)"
                    .into(),
            )),
        }
    }
}

impl AzureClient {
    /// A user delegation SAS for reading the blob: Get User Delegation Key (valid from
    /// now until the URL expires), then the SAS signed with it (auth.rs).
    pub async fn presign_delegated(&self, object: &ObjectRef, expires: Duration) -> Result<String, Error> {
        if expires.is_zero() || expires > MAX_PRESIGN {
            return Err(Error::Config(format!("presigned URLs expire after 1 s to 7 days, not {expires:?}")));
        }
        let now = SystemTime::now();
        let (start, expiry) = (iso_seconds(now), iso_seconds(now + expires));
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><KeyInfo><Start>{start}</Start><Expiry>{expiry}</Expiry></KeyInfo>"
        );
        let mut op = crate::request::Op::object("GetUserDelegationKey", http::Method::POST, "", None)
            .query("restype", "service")
            .query("comp", "userdelegationkey")
            .header("content-type", "application/xml")?
            .body(crate::request::OpBody::Bytes(bytes::Bytes::from(xml)));
        let key =
            self.execute(&mut op, |r| async move { blocks::read_xml(r, auth::UserDelegationKey::parse).await }).await?;
        let c = self.config();
        let sas = auth::blob_read_delegation_sas(&c.account, &key, &object.bucket, &object.key, &expiry, API_VERSION)
            .ok_or_else(|| Error::protocol("the user delegation key's value is not base64", None))?;
        let url = format!("{}{}", self.origin(), self.path(Some(&object.bucket), Some(&object.key)));
        Ok(format!("{url}?{sas}"))
    }
}

/// `YYYY-MM-DDThh:mm:ssZ` (a SAS's time format: ISO 8601 without fractions).
fn iso_seconds(t: SystemTime) -> String {
    let s = ferry_proto::encoding::iso8601(t);
    match s.split_once('.') {
        Some((whole, _)) => format!("{whole}Z"),
        None => s,
    }
}

impl From<AzureClient> for DynObjectStore {
    fn from(c: AzureClient) -> DynObjectStore {
        Arc::new(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sas_times_have_no_fractions() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(iso_seconds(t), "2023-11-14T22:13:20Z");
    }
}
