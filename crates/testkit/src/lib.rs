//! Test fixtures shared by ferry's crates, so each one exists once.
//!
//! What is here, and who uses it:
//!
//! - [`FerryServe`]: a builder for `ferry serve` with memory or disk storage, an emulation
//!   profile, seeded faults, TLS with a generated CA, anonymous or signed with the
//!   [`ACCESS_KEY`] / [`SECRET_KEY`] dev keys. [`FerryServe::start`] runs it in-process
//!   ([`Served`], on a thread and runtime of its own); [`FerryServe::spawn`] runs the
//!   binary under test as a child process ([`ServeChild`], started once its banner says
//!   `listening on`). Both stop when dropped.
//! - [`minio`]: one MinIO child per test binary, for conformance against a third-party
//!   S3 server (`FERRY_MINIO` names the binary; `scripts/setup.sh` builds it).
//! - [`azurite`]: one Azurite child per test binary, for the Azure client's conformance
//!   and the command line's Azure tests (`FERRY_AZURITE` names `azurite-blob`;
//!   `scripts/setup.sh` installs it).
//! - [`fake_gcs`]: fake-gcs-server children (plain http, and https offering h2), for the
//!   Google Cloud Storage client (`FERRY_FAKE_GCS` names the binary; `scripts/setup.sh`
//!   builds it).
//! - [`imds`]: AWS's EC2 instance metadata emulator (`ec2-metadata-mock`), one child per
//!   test handing out the test's keys, for the instance metadata credentials
//!   (`FERRY_EC2_METADATA_MOCK` names the binary; `scripts/setup.sh` builds it).
//! - [`transport`]: wrappers around a real [`ferry_wire::Transport`]: one that counts
//!   requests by S3 operation and live GET bodies, and one that turns a DeleteObjects
//!   answer's first keys into per-key errors (a fault the server cannot inject).
//! - [`http`]: a few calls on a bare transport (create a bucket, PUT, GET a whole body, a
//!   streamed request body) for the transport tests.
//! - [`cli`]: a `ferry` command line with its AWS settings pointed at a server and
//!   nothing read from the user's own `~/.aws`.
//! - [`data`]: deterministic test bytes.
//! - [`require`]: for tests that are `#[ignore = "needs ..."]`: a test that is run and
//!   finds its tool or privilege missing fails, never passes silently.
//!
//! The client crates' own types (`S3Client`, retry settings) stay out of this crate: a
//! test builds its client from [`Served::url`] and [`Served::credentials`], so the
//! fixtures do not move when the client's API does. A dev-dependency only, never
//! published.

pub mod azurite;
pub mod cli;
pub mod data;
pub mod fake_gcs;
pub mod http;
pub mod imds;
pub mod minio;
pub mod require;
mod serve;
pub mod transport;

pub use serve::{FerryServe, ServeChild, Served};

/// The server's default access key (`ferry serve` without `--access-key`).
pub const ACCESS_KEY: &str = "ferry";
/// The server's default secret key.
pub const SECRET_KEY: &str = "ferry-secret";
/// The region the server reports and signs for by default.
pub const REGION: &str = "us-east-1";
