//! Google Cloud Storage through its JSON API, behind [`crate::ObjectStore`].
//!
//! ```text
//! connect(options) ─► endpoint (options, STORAGE_EMULATOR_HOST, storage.googleapis.com)
//!                  ─► auth.rs (Application Default Credentials, or none for an emulator)
//!                  ─► GcsClient (client.rs: Op ─► bearer token ─► Transport::send, retries)
//!   ├─ object.rs   metadata, media GET, uploads (multipart, resumable), delete, batch, rewrite
//!   ├─ body.rs     GET bodies checked (length, CRC32C/MD5 of x-goog-hash), resumed on one generation
//!   ├─ list.rs     objects.list pages in S3's model (start-after, prefixes once)
//!   ├─ upload.rs   the trait's multipart upload: part objects + compose (a tree past 32)
//!   ├─ presign.rs  V4 signed URLs with a service account key
//!   └─ error.rs    status + reason ─► Error, x-guploader-uploadid as the request id
//! ```
//!
//! The wire quirks written down once, here (sources in docs/lab/store-gcs-facts.md):
//! GCS stores a CRC32C for every object (and an MD5 for objects not made by compose)
//! and states both, for the whole object, in `x-goog-hash`, also on ranged reads; an
//! object's version is its generation (ferry's ETag for GCS); a batch takes 100 calls;
//! a compose 32 sources; objects are up to 5 TiB; stored-gzip objects are served
//! decompressed unless the request accepts gzip.

pub mod auth;
pub mod body;
pub mod client;
pub mod error;
pub mod list;
pub mod object;
pub mod presign;
#[cfg(test)]
mod tests;
pub mod upload;

use crate::error::Error;
use crate::request::Op;
use crate::store::{Capabilities, PartLimits};
use crate::types::*;
use crate::url::Provider;
use crate::{DynObjectStore, StoreOptions};
use client::enc;
pub use client::GcsClient;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_wire::{Endpoint, TransportConfig};
use http::Method;
use std::sync::Arc;
use std::time::SystemTime;

/// Largest object GCS stores: 5 TiB (Cloud Storage quotas and limits).
pub const MAX_OBJECT: u64 = 5 << 40;

/// Limits of ferry's composite upload: compose has no minimum component size; the
/// part count is ferry's own cap (the part names carry five digits, and 10,000 parts
/// compose in a tree of three levels).
pub const PART_LIMITS: PartLimits = PartLimits { min_part: 1, max_part: MAX_OBJECT, max_parts: 10_000 };

/// Opens a Google Cloud Storage client (no connection yet).
pub fn connect(options: StoreOptions) -> Result<DynObjectStore, Error> {
    Ok(Arc::new(GcsClient::open(options)?))
}

impl GcsClient {
    /// The endpoint from the options, else `STORAGE_EMULATOR_HOST`, else Google's; and
    /// credentials by Application Default Credentials (auth.rs).
    pub fn open(options: StoreOptions) -> Result<GcsClient, Error> {
        let emulator_env = std::env::var("STORAGE_EMULATOR_HOST").ok().filter(|v| !v.trim().is_empty());
        let (url, emulator) = match (&options.endpoint, &emulator_env) {
            (Some(e), _) => (e.clone(), false),
            (None, Some(h)) => (client::emulator_url(h), true),
            (None, None) => (client::DEFAULT_ENDPOINT.to_owned(), false),
        };
        // An endpoint given explicitly that is the emulator's is the emulator too.
        let emulator =
            emulator || emulator_env.as_deref().is_some_and(|h| client::emulator_url(h) == url.trim_end_matches('/'));
        let endpoint = Endpoint::parse(&url).map_err(|e| Error::Config(e.to_string()))?;
        let resolved = auth::resolve(&options.credentials, emulator, options.ca_file.clone(), &auth::ProcessEnv)?;
        let mut tc = TransportConfig::new(endpoint.clone());
        tc.mode = options.mode;
        tc.ca_file = options.ca_file;
        if let Some(n) = options.max_connections {
            tc.max_connections = n;
        }
        options.limits.apply(&mut tc);
        let transport = crate::store::layered(&options.transport_layer, Provider::Gcs, ferry_wire::transport(tc)?);
        tracing::debug!(endpoint = %url, emulator, auth = resolved.auth.describe(), "gcs client");
        Ok(GcsClient::with_transport(
            transport,
            endpoint,
            resolved.auth,
            resolved.project,
            options.limits.retry(crate::RetryConfig::default()),
        ))
    }

    /// The project of bucket calls. Without one (anonymous, no GOOGLE_CLOUD_PROJECT)
    /// none is sent: emulators need none, and Google answers that it is required.
    fn project(&self) -> Option<String> {
        self.inner.project.clone()
    }

    /// `buckets.insert` in the client's project.
    pub async fn create_bucket(&self, bucket: &str) -> Result<(), Error> {
        let mut op = Op::path("buckets.insert", Method::POST, "/storage/v1/b".to_owned())
            .query_opt("project", self.project())
            .json(&serde_json::json!({ "name": bucket }))?;
        self.execute(&mut op, |_| async { Ok(()) }).await
    }

    /// `buckets.delete` (the bucket must be empty).
    pub async fn delete_bucket(&self, bucket: &str) -> Result<(), Error> {
        let mut op = Op::path("buckets.delete", Method::DELETE, format!("/storage/v1/b/{}", enc(bucket)));
        self.execute(&mut op, |_| async { Ok(()) }).await
    }

    /// `buckets.list` of the client's project, every page.
    pub async fn list_buckets(&self) -> Result<Vec<BucketEntry>, Error> {
        let project = self.project();
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut op = Op::path("buckets.list", Method::GET, "/storage/v1/b".to_owned())
                .query_opt("project", project.clone())
                .query_opt("pageToken", token.clone());
            let v = self.execute(&mut op, |r| async move { Self::read_json(r).await }).await?;
            for b in v["items"].as_array().into_iter().flatten() {
                out.push(BucketEntry {
                    name: b["name"].as_str().unwrap_or_default().to_owned(),
                    creation_date: b["timeCreated"]
                        .as_str()
                        .and_then(object::parse_time)
                        .unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
            match v["nextPageToken"].as_str().filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t.to_owned()),
                None => return Ok(out),
            }
        }
    }
}

crate::store::object_store_by_names!(GcsClient, Provider::Gcs, Capabilities {
    parts: PART_LIMITS,
    max_batch_delete: object::BATCH_MAX,
    max_copy: MAX_OBJECT,
    stored_checksum: Some(ChecksumAlgorithm::Crc32c),
}, {
    head: head_object, get: get_object, put: put_object,
    create_upload: create_composite, upload_part: upload_part_object,
    complete_upload: complete_composite, abort_upload: abort_composite,
    list_parts: list_part_objects, list_uploads: list_composites, list: list_objects,
    delete: delete_object, delete_batch: delete_objects, copy: rewrite_object,
    presign_get: presign_get, create_bucket: create_bucket,
    delete_bucket: delete_bucket, list_buckets: list_buckets,
});
