//! h1-pool's read path: a response body polls its connection itself (pool.rs, `Driver`),
//! and hands the connection back to the connection's own task when it ends. These tests
//! read bodies on the test's `block_on` thread, as `ferry bench` and the CLI do, and check
//! that the connection still serves the next request, that a body dropped half-way costs
//! only its connection, and that a connection closed while idle is noticed (which needs
//! the connection's own task to be polling again). Every wait has a time-out, so a lost
//! hand-back fails instead of hanging.

use ferry_testkit::data::pattern;
use ferry_testkit::http::{create_bucket, put, send};
use ferry_testkit::FerryServe;
use ferry_wire::{Mode, Protocol, RequestBody};
use http::{Method, StatusCode};
use std::time::Duration;

const MIB: usize = 1024 * 1024;
const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_body_was_read_by_the_caller_serves_the_next_requests() {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(Mode::H1Pool, |c| c.max_connections = 1);
    create_bucket(&t, "bkt").await;
    let data = pattern(24 * MIB);
    put(&t, "/bkt/big", RequestBody::from(data.clone())).await;
    for round in 0..3 {
        let r =
            tokio::time::timeout(LIMIT, send(&t, Method::GET, "/bkt/big", RequestBody::Empty)).await.unwrap().unwrap();
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.meta.protocol, Protocol::Http1);
        let got = tokio::time::timeout(LIMIT, r.body.collect(32 * MIB)).await.expect("body read in time").unwrap();
        assert!(got == data, "round {round}: {} bytes came back different", got.len());
        // A small request and a PUT on the same (only) connection right after.
        let r = tokio::time::timeout(LIMIT, send(&t, Method::HEAD, "/bkt/big", RequestBody::Empty))
            .await
            .expect("HEAD answered in time")
            .unwrap();
        assert_eq!(r.status, StatusCode::OK);
        assert!(r.meta.reused_connection, "round {round}: the HEAD did not reuse the connection");
        drop(r);
        let r = tokio::time::timeout(
            LIMIT,
            send(&t, Method::PUT, &format!("/bkt/small-{round}"), RequestBody::from(pattern(1000))),
        )
        .await
        .expect("PUT answered in time")
        .unwrap();
        assert_eq!(r.status, StatusCode::OK);
    }
    assert_eq!(t.stats().connections_opened, 1, "every request should have used the one connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_dropped_half_way_closes_its_connection_and_the_next_request_opens_another() {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(Mode::H1Pool, |c| c.max_connections = 1);
    create_bucket(&t, "bkt").await;
    let data = pattern(24 * MIB);
    put(&t, "/bkt/big", RequestBody::from(data.clone())).await;
    let opened_before = t.stats().connections_opened;
    let mut r = send(&t, Method::GET, "/bkt/big", RequestBody::Empty).await.unwrap();
    let first = tokio::time::timeout(LIMIT, r.body.chunk()).await.expect("a first chunk in time").unwrap().unwrap();
    assert!(!first.is_empty() && first.len() < data.len());
    drop(r);
    let r = tokio::time::timeout(LIMIT, send(&t, Method::GET, "/bkt/big", RequestBody::Empty))
        .await
        .expect("answered in time")
        .unwrap();
    assert!(!r.meta.reused_connection, "a half-read connection must not be reused");
    let got = tokio::time::timeout(LIMIT, r.body.collect(32 * MIB)).await.expect("body read in time").unwrap();
    assert!(got == data);
    assert_eq!(t.stats().connections_opened, opened_before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_from_the_idle_list_after_a_body_read_is_closed() {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(Mode::H1Pool, |c| {
        c.max_connections = 1;
        c.idle_timeout = Duration::from_millis(200);
    });
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/big", RequestBody::from(pattern(8 * MIB))).await;
    let r = send(&t, Method::GET, "/bkt/big", RequestBody::Empty).await.unwrap();
    assert_eq!(r.body.collect(16 * MIB).await.unwrap().len(), 8 * MIB);
    // The reaper drops the idle connection's sender after the idle time-out; the
    // connection then ends only if its own task was handed the connection back.
    let deadline = tokio::time::Instant::now() + LIMIT;
    while t.stats().connections_open > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the idle connection was never closed: {:?}", t.stats());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
