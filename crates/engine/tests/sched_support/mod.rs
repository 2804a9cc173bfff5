//! Shared by the scheduler's integration tests (`sched_*.rs`) beyond `ferry_testkit`
//! (the in-process `ferry serve`, the counting and per-key-fault transport wrappers,
//! test bytes): a signed S3 client over a counted real transport. The wrappers are not
//! mocks: every request still goes over a socket to the server.

#![allow(dead_code)]

pub use ferry_testkit::transport::Counts;

/// Deterministic pseudo-random bytes (`ferry_testkit::data::seeded`).
pub fn data(n: usize, seed: u64) -> bytes::Bytes {
    ferry_testkit::data::seeded(n, seed)
}
use ferry_server::ServeConfig;
use ferry_store::{ClientConfig, Credentials, Mode, RetryConfig, S3Client};
use ferry_testkit::transport::{Counting, PerKeyDeleteFaults};
use ferry_testkit::{FerryServe, Served, ACCESS_KEY, SECRET_KEY};
use ferry_wire::{Transport, TransportConfig};
use std::sync::Arc;
use std::time::Duration;

/// An in-process `ferry serve` (memory), configured by `configure`.
pub fn server(configure: impl FnOnce(&mut ServeConfig)) -> Served {
    FerryServe::new().configure(configure).start()
}

/// Short backoffs so fault tests run quickly.
pub fn fast_retry(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        base_delay: Duration::from_millis(2),
        throttled_base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        ..RetryConfig::default()
    }
}

/// A signed client of `server` over `mode`, with its request counts.
pub fn client(server: &Served, mode: Mode, retry: RetryConfig) -> (S3Client, Arc<Counts>) {
    let mut config =
        ClientConfig::new(&server.url()).unwrap().with_credentials(Credentials::new(ACCESS_KEY, SECRET_KEY));
    config.retry = retry;
    let mut tc = TransportConfig::new(config.endpoint.clone());
    tc.mode = mode;
    let (transport, counts) = Counting::wrap(ferry_wire::transport(tc).unwrap());
    (S3Client::with_transport(transport, config), counts)
}

/// A client whose DeleteObjects answers report the first `faults` deleted keys as
/// InternalError (`ferry_testkit::transport::PerKeyDeleteFaults`), with request counts.
pub fn client_with_per_key_faults(server: &Served, faults: u64) -> (S3Client, Arc<Counts>) {
    client_wrapped(server, |counting| PerKeyDeleteFaults::wrap(counting, faults))
}

/// A signed client of `server` (default transport) whose counting transport is wrapped
/// by `wrap`, with its request counts.
pub fn client_wrapped(
    server: &Served,
    wrap: impl FnOnce(Arc<dyn Transport>) -> Arc<dyn Transport>,
) -> (S3Client, Arc<Counts>) {
    let config = ClientConfig::new(&server.url()).unwrap().with_credentials(Credentials::new(ACCESS_KEY, SECRET_KEY));
    let tc = TransportConfig::new(config.endpoint.clone());
    let (counting, counts) = Counting::wrap(ferry_wire::transport(tc).unwrap());
    (S3Client::with_transport(wrap(counting), config), counts)
}
