//! What the engine's transfer tests (copy.rs, transfer_files.rs) share beyond
//! `ferry_testkit`: a signing client of an in-process `ferry serve` (testkit names no
//! client type, so the S3 client is built here, once).

use ferry_store::{Credentials, CredentialsSource, S3Client};
pub use ferry_testkit::data::seeded as data;
use ferry_testkit::{Served, ACCESS_KEY, SECRET_KEY};

/// A client of `srv` signing with the server's default keys.
pub fn client(srv: &Served) -> S3Client {
    S3Client::builder(srv.url())
        .credentials(CredentialsSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY)))
        .build()
        .unwrap()
}
