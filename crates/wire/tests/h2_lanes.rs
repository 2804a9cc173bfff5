//! Lanes on HTTP/2 (h2.rs module note): while a large transfer streams on one
//! connection, small requests are carried by another, so they never wait behind its
//! bytes in a shared connection window or TCP send queue.

use ferry_testkit::http::send;
use ferry_testkit::FerryServe;
use ferry_wire::h2::H2Transport;
use ferry_wire::{RequestBody, Transport};
use futures_util::StreamExt;
use http::Method;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_requests_avoid_the_connection_carrying_a_bulk_stream() {
    let srv = FerryServe::new()
        .anonymous()
        .configure(|c| {
            c.synthetic_bucket = Some("syn".into());
            // 32 MiB at 16 MB/s per stream: the bulk stream stays in flight for ~2 s.
            c.emulation.rate_per_conn = Some(16_000_000);
        })
        .start();
    let mut c = srv.transport_config();
    c.max_connections = 4;
    let h2 = Arc::new(H2Transport::new(c).unwrap());
    let t: Arc<dyn Transport> = h2.clone();

    let bulk = send(&t, Method::GET, "/syn/32MiB", RequestBody::Empty).await.unwrap();
    let bulk_conn = bulk.meta.connection_id;
    let reader = tokio::spawn(async move {
        let mut body = bulk.body;
        let mut n = 0u64;
        while let Some(c) = body.next().await {
            n += c.unwrap().len() as u64;
        }
        n
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..12 {
        let mut r = ferry_wire::Request::new(if i % 3 == 0 { Method::HEAD } else { Method::GET }, "/syn/16KiB");
        r.response_len = Some(16 * 1024);
        let r = t.send(r).await.unwrap();
        assert!(r.status.is_success());
        assert_ne!(r.meta.connection_id, bulk_conn, "small request {i} shared the bulk stream's connection");
        r.body.collect(1 << 20).await.unwrap();
    }
    assert!(!reader.is_finished(), "the bulk stream ended before the small requests: the test proved nothing");
    assert_eq!(reader.await.unwrap(), 32 << 20);
    assert_eq!(t.stats().connections_opened, 2, "one connection per lane");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_lanes_share_rather_than_wait() {
    let srv = FerryServe::new()
        .anonymous()
        .configure(|c| {
            c.synthetic_bucket = Some("syn".into());
            c.emulation.rate_per_conn = Some(16_000_000);
        })
        .start();
    let mut c = srv.transport_config();
    c.max_connections = 1;
    let t: Arc<dyn Transport> = Arc::new(H2Transport::new(c).unwrap());
    let bulk = send(&t, Method::GET, "/syn/32MiB", RequestBody::Empty).await.unwrap();
    let mut r = ferry_wire::Request::new(Method::GET, "/syn/16KiB");
    r.response_len = Some(16 * 1024);
    let small = tokio::time::timeout(Duration::from_secs(1), t.send(r))
        .await
        .expect("a small request waited for the bulk stream")
        .unwrap();
    assert_eq!(small.meta.connection_id, bulk.meta.connection_id);
    assert_eq!(small.body.collect(1 << 20).await.unwrap().len(), 16 * 1024);
    drop(bulk);
}
