//! Small GETs of known size share places under the endpoint's limit
//! (`Admission::small_room`): against a real `ferry serve` that answers each GET after a
//! first-byte delay, a batch of `get_to_memory` calls with size hints has more requests
//! in progress at the server than the client has connections when the transport
//! pipelines (h1-pipeline, auto), and no more than connections x depth; over h1-pool, or
//! over auto without the hints, never more than one per connection. On auto the
//! controller's limit is the connection count, so before small GETs took shares of places
//! the hinted batch too stayed at one per connection. The server's own count
//! (`ferry_requests_in_progress_peak` at `/_ferry/metrics`) is the witness. Every body
//! is checked byte for byte.

use crate::sched_support;

use ferry_engine::{get_to_memory, Engine, MemoryParams, MemoryProgress};
use ferry_store::{ClientConfig, Credentials, Mode, ObjectRef, PutParams, S3Client};
use ferry_testkit::{FerryServe, Served, ACCESS_KEY, SECRET_KEY};
use ferry_wire::TransportConfig;
use sched_support::data;
use std::io::{Read, Write};
use std::time::Duration;

const CONNECTIONS: usize = 2;
const DEPTH: usize = 8;
const OBJECTS: usize = 48;
const SIZE: usize = 4096;

/// A server whose object requests wait 40 ms for their first byte, so a batch's requests
/// overlap at the server.
fn slow_server() -> Served {
    FerryServe::new()
        .configure(|c| {
            c.emulation.ttfb_p50 = Duration::from_millis(40);
            c.emulation.ttfb_p99 = Duration::from_millis(40);
        })
        .start()
}

/// A signed client over `mode`, `CONNECTIONS` connections, pipelines `DEPTH` deep.
fn client(srv: &Served, mode: Mode) -> S3Client {
    let config = ClientConfig::new(&srv.url()).unwrap().with_credentials(Credentials::new(ACCESS_KEY, SECRET_KEY));
    let mut tc = TransportConfig::new(config.endpoint.clone());
    tc.mode = mode;
    tc.max_connections = CONNECTIONS;
    tc.pipeline_depth = DEPTH;
    S3Client::with_transport(ferry_wire::transport(tc).unwrap(), config)
}

/// A gauge or counter of the server's `/_ferry/metrics`.
fn metric(srv: &Served, name: &str) -> u64 {
    let mut s = std::net::TcpStream::connect(srv.addr()).unwrap();
    write!(s, "GET /_ferry/metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", srv.addr()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(name));
    line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// Puts the batch, then reads it all at once with (or without) size hints; returns the
/// most requests the server had in progress at once.
async fn batch(mode: Mode, hints: bool) -> u64 {
    let srv = slow_server();
    let c = client(&srv, mode);
    c.create_bucket("small").await.unwrap();
    let mut objects = Vec::new();
    for i in 0..OBJECTS {
        let o = ObjectRef::new("small", format!("o{i:03}"));
        let body = data(SIZE, i as u64 + 1);
        c.put_object(&o, body.clone(), PutParams::default()).await.unwrap();
        objects.push((o, body));
    }
    let before = metric(&srv, "ferry_requests_in_progress_peak");
    assert!(before <= CONNECTIONS as u64, "the puts went one per connection");
    let e = Engine::new(c);
    e.controller().start_at(CONNECTIONS);
    let params = MemoryParams { size_hint: hints.then_some(SIZE as u64), ..MemoryParams::default() };
    let got = futures_util::future::join_all(
        objects.iter().map(|(o, _)| get_to_memory(&e, o, params, None, MemoryProgress::default())),
    )
    .await;
    for ((o, body), got) in objects.iter().zip(got) {
        assert!(got.unwrap_or_else(|err| panic!("{o}: {err}"))[..] == body[..], "{o} differs");
    }
    let stats = e.controller().stats();
    assert!(stats.small_peak <= stats.limit.max(CONNECTIONS) * DEPTH, "shares past limit x depth: {stats:?}");
    // The scrape is the one request in progress now.
    assert_eq!(metric(&srv, "ferry_requests_in_progress"), 1, "every answer started");
    metric(&srv, "ferry_requests_in_progress_peak")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_small_gets_have_more_requests_in_flight_than_connections() {
    for mode in [Mode::H1Pipeline, Mode::Auto] {
        let peak = batch(mode, true).await;
        assert!(
            peak > CONNECTIONS as u64 && peak <= (CONNECTIONS * DEPTH) as u64,
            "{mode:?}: {peak} requests in progress at once at the server, {CONNECTIONS} connections {DEPTH} deep"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_or_unknown_sizes_keep_one_request_per_connection() {
    for (mode, hints) in [(Mode::H1Pool, true), (Mode::Auto, false)] {
        let peak = batch(mode, hints).await;
        assert!(peak <= CONNECTIONS as u64, "{mode:?}, hints {hints}: {peak} in progress on {CONNECTIONS} connections");
    }
}
