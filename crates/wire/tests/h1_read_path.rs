//! The HTTP/1.1 read path: a large response body polls its connection's reading future
//! itself (drive.rs; hyper's connection for h1-pool, the pipeline's reader for
//! h1-pipeline), and hands the connection back to the connection's own task when it ends.
//! These tests read bodies on the test's own task, as `ferry bench` and the CLI do, and
//! check that the connection still serves the next request, that a body dropped half-way
//! costs only its connection, that a connection closed while idle is noticed (which needs
//! the connection's own task to be polling again), that responses pipelined behind a large
//! body are answered, and that a consumer who pauses longer than the read time-out loses
//! nothing. Every wait has a time-out, so a lost hand-back fails instead of hanging.

use ferry_testkit::data::pattern;
use ferry_testkit::http::{create_bucket, put, send};
use ferry_testkit::FerryServe;
use ferry_wire::{Mode, Protocol, RequestBody, Transport};
use http::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;

const MIB: usize = 1024 * 1024;
const LIMIT: Duration = Duration::from_secs(20);

/// Waits (at most `LIMIT`) until `t` holds no open connection.
async fn idle_connection_closes(t: &Arc<dyn Transport>) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while t.stats().connections_open > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the idle connection was never closed: {:?}", t.stats());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
    idle_connection_closes(&t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_responses_behind_large_bodies_read_by_their_callers_are_answered() {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(Mode::H1Pipeline, |c| {
        c.max_connections = 1;
        c.pipeline_depth = 4;
    });
    create_bucket(&t, "bkt").await;
    let big = pattern(24 * MIB);
    let small = pattern(1000);
    put(&t, "/bkt/big", RequestBody::from(big.clone())).await;
    put(&t, "/bkt/small", RequestBody::from(small.clone())).await;
    for round in 0..3 {
        // big, small, big, small on the one connection, each read by its own task: the
        // small ones' heads come in while a large body's caller is driving the reader.
        let reads: Vec<_> = ["/bkt/big", "/bkt/small", "/bkt/big", "/bkt/small"]
            .into_iter()
            .map(|path| {
                let t: Arc<dyn Transport> = t.clone();
                tokio::spawn(async move {
                    let r = send(&t, Method::GET, path, RequestBody::Empty).await.unwrap();
                    assert_eq!(r.status, StatusCode::OK);
                    r.body.collect(32 * MIB).await.unwrap()
                })
            })
            .collect();
        for (i, read) in reads.into_iter().enumerate() {
            let got = tokio::time::timeout(LIMIT, read).await.expect("answered in time").unwrap();
            let want = if i % 2 == 0 { &big } else { &small };
            assert!(got == *want, "round {round}, request {i}: {} bytes came back different", got.len());
        }
    }
    let stats = t.stats();
    assert_eq!(stats.connections_opened, 1, "every request should have used the one connection: {stats:?}");
    assert_eq!(stats.requests_resent, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_connection_idle_after_a_large_body_closes_on_its_idle_time_out() {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(Mode::H1Pipeline, |c| {
        c.max_connections = 1;
        c.idle_timeout = Duration::from_millis(200);
    });
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/big", RequestBody::from(pattern(8 * MIB))).await;
    let r = send(&t, Method::GET, "/bkt/big", RequestBody::Empty).await.unwrap();
    let body = tokio::time::timeout(LIMIT, r.body.collect(16 * MIB)).await.expect("body read in time").unwrap();
    assert_eq!(body.len(), 8 * MIB);
    // The idle time-out is the reader's own timer: it fires only if the body handed the
    // reader back to its connection's task.
    idle_connection_closes(&t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_whose_caller_pauses_past_the_read_time_out_arrives_whole() {
    for mode in [Mode::H1Pool, Mode::H1Pipeline] {
        let srv = FerryServe::new().anonymous().start();
        let t = srv.transport(mode, |c| {
            c.max_connections = 1;
            c.response_timeout = Duration::from_millis(300);
        });
        create_bucket(&t, "bkt").await;
        let data = pattern(24 * MIB);
        put(&t, "/bkt/big", RequestBody::from(data.clone())).await;
        let mut r = send(&t, Method::GET, "/bkt/big", RequestBody::Empty).await.unwrap();
        let mut got = Vec::with_capacity(data.len());
        let mut chunks = 0;
        while let Some(chunk) = tokio::time::timeout(LIMIT, r.body.chunk()).await.expect("a chunk in time") {
            got.extend_from_slice(&chunk.unwrap_or_else(|e| panic!("{mode:?}: after {} bytes: {e}", got.len())));
            chunks += 1;
            if chunks == 2 {
                // The server has filled the socket's buffers and stopped; its bytes are
                // waiting, so this is the caller's pause, not a stalled peer.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        assert!(got == data, "{mode:?}: {} bytes came back different", got.len());
    }
}
