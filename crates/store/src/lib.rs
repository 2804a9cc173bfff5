//! ferry-store: the S3 API client over ferry's transport seam.
//!
//! It builds requests, signs them, sends them through a [`ferry_wire::Transport`], and
//! reads the answers; nothing more (scheduling lives in the engine). Data flows:
//!
//! ```text
//! S3Client::get_object / put_object / list_objects_v2 / upload_multipart ...
//!   ─► client.rs  Op ─► address (path-style | virtual-hosted) ─► SigV4 ─► Transport::send
//!                  └─ retry.rs: typed retry decisions, full-jitter backoff, shared budget
//!   ◄─ error.rs   status + <Error> code ─► Error by meaning (request id kept)
//!   ◄─ body.rs    GET bodies: length and checksum checked on the fly, cut bodies
//!                 resumed with Range + If-Match
//! ```
//!
//! Modules: [`credentials`] (the AWS SDK lookup chain), [`retry`], [`object`] (GET,
//! HEAD, PUT, DELETE, DeleteObjects, CopyObject), [`list`] (ListObjectsV2 pages),
//! [`buckets`] (ListBuckets, ListMultipartUploads),
//! [`multipart`], [`body`]. One params struct per operation; an [`ObjectRef`] names an
//! object.

pub mod body;
pub mod buckets;
pub mod client;
pub mod credentials;
pub mod error;
pub mod list;
pub mod multipart;
pub mod object;
pub mod retry;
#[cfg(test)]
mod scripted;
#[cfg(test)]
mod tests;

pub use body::ObjectBody;
pub use buckets::{BucketEntry, UploadEntry};
pub use client::{Addressing, ClientConfig, ObjectRef, S3Client, S3ClientBuilder};
pub use credentials::{Credentials, CredentialsSource};
pub use error::Error;
pub use ferry_proto::checksum::ChecksumAlgorithm;
pub use ferry_proto::range::RangeSpec;
pub use ferry_proto::xml::{CompletedPart, DeleteError, ObjectEntry, PartEntry};
pub use ferry_wire::Mode;
pub use list::{ListPage, ListParams};
pub use multipart::{CompleteMultipartOutput, MultipartParams, MultipartUpload, UploadSource};
pub use object::{
    CopyObjectOutput, CopyParams, DeleteObjectsOutput, GetObjectOutput, GetParams, ObjectInfo, PutObjectOutput,
    PutParams,
};
pub use retry::RetryConfig;
