//! ferry-store: object-store clients over ferry's transport seam, behind one
//! provider-neutral trait.
//!
//! ```text
//! engine / cli / py ──► ObjectStore (store.rs: the trait, its contract, capabilities, connect)
//!                          │   model: types.rs (ObjectRef, ObjectInfo, GetParams, ListPage, ...)
//!                          │   URLs:  url.rs   (s3:// gs:// az:// ─► Provider)
//!                          ├─► s3/    S3Client:    bucket placed (path or virtual host), SigV4
//!                          ├─► gcs/   GcsClient:   JSON API paths, bearer token
//!                          └─► azure/ AzureClient: container/blob paths, Shared Key | SAS | Bearer
//!                                │  each builds an Op and signs it (its request.rs Signer)
//!                                ▼
//!   shared by providers: request.rs (Op, one send/retry loop) ─► ferry_wire::Transport::send
//!                        checked.rs (GET bodies checked as they stream, resumed when cut),
//!                        error.rs (one Error by meaning, request id kept),
//!                        retry.rs (typed retry decisions, full-jitter backoff, budget)
//! ```
//!
//! A store builds requests, signs them, sends them through a [`ferry_wire::Transport`],
//! and reads the answers; nothing more. Scheduling (what to request, how to cut it, how
//! much to have in flight) lives in ferry-engine. One params struct per operation; an
//! [`ObjectRef`] names an object.

pub mod azure;
pub(crate) mod checked;
pub mod error;
pub mod gcs;
pub(crate) mod request;
pub mod retry;
pub mod s3;
pub mod store;
pub mod types;
pub mod url;

pub use error::Error;
pub use ferry_proto::checksum::ChecksumAlgorithm;
pub use ferry_proto::range::RangeSpec;
pub use ferry_wire::Mode;
pub use retry::RetryConfig;
pub use s3::client::{Addressing, ClientConfig, S3Client, S3ClientBuilder};
pub use s3::credentials::{Credentials, CredentialsSource};
pub use s3::settings::AwsSettings;
pub use store::{
    connect, Capabilities, DynObjectStore, ObjectStore, ObjectStoreExt, PartCopy, PartLimits, PartPayload, PartPlan,
    PutPayload, RequestLimits, StoreOptions, TransportLayer,
};
pub use types::*;
pub use url::{Provider, StoreUrl, UrlError};
