//! What the engine's transfer tests (copy.rs, transfer_files.rs) share: a signing client
//! for an in-process `ferry serve` with its default credentials, and deterministic test
//! bytes. (The scheduler tests have their own helpers in sched_support/, with faults.)

use ferry_server::BackgroundServer;
use ferry_store::{Credentials, CredentialsSource, S3Client};

/// A client of `srv` signing with the server's default keys (`ferry` / `ferry-secret`).
pub fn client(srv: &BackgroundServer) -> S3Client {
    S3Client::builder(srv.url())
        .credentials(CredentialsSource::Explicit(Credentials::new("ferry", "ferry-secret")))
        .build()
        .unwrap()
}

/// `len` bytes from `seed` (xorshift): the same seed gives the same bytes, another seed
/// other bytes, so a part swapped or taken from the wrong object shows.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
