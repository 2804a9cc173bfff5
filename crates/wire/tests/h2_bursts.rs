//! A burst of streams on HTTP/2 (h2.rs, `Inner::place`): bulk streams placed before any
//! connection was measured are spread at most `UNPROVEN_BULK_STREAMS` per connection, so
//! a sweep's workers starting together do not share one TCP connection and one receive
//! window for the whole run; small streams still share one connection; the connection
//! cap still holds. All heads are awaited before any body is read, so every stream is in
//! flight when the next is placed.

use ferry_testkit::{FerryServe, Served};
use ferry_wire::h2::{H2Transport, UNPROVEN_BULK_STREAMS};
use ferry_wire::{Request, Response, Transport};
use futures_util::future::join_all;
use http::Method;
use std::collections::HashMap;
use std::sync::Arc;

const MIB: u64 = 1024 * 1024;

fn transport(srv: &Served, max_connections: usize) -> Arc<dyn Transport> {
    let mut c = srv.transport_config();
    c.max_connections = max_connections;
    Arc::new(H2Transport::new(c).unwrap())
}

/// Sends `n` GETs at once and returns their responses, heads only.
async fn burst(t: &Arc<dyn Transport>, n: usize, path: &str, size_hint: Option<u64>) -> Vec<Response> {
    join_all((0..n).map(|_| {
        let mut r = Request::new(Method::GET, path);
        r.response_len = size_hint;
        t.send(r)
    }))
    .await
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

/// Streams per connection id.
fn per_connection(responses: &[Response]) -> HashMap<u64, usize> {
    let mut m = HashMap::new();
    for r in responses {
        *m.entry(r.meta.connection_id).or_insert(0) += 1;
    }
    m
}

/// Reads every body at once: read one by one, the unread streams of a connection could
/// hold its whole connection window and stall the one being read.
async fn read_all(responses: Vec<Response>, each: u64) {
    let lens = join_all(responses.into_iter().map(|r| async move {
        assert_eq!(r.status, 200);
        r.body.collect(64 << 20).await.unwrap().len() as u64
    }))
    .await;
    assert!(lens.iter().all(|&n| n == each), "{lens:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_bulk_streams_spreads_over_connections_before_any_is_measured() {
    let srv = FerryServe::new().anonymous().configure(|c| c.synthetic_bucket = Some("syn".into())).start();
    let t = transport(&srv, 16);
    let responses = burst(&t, 16, "/syn/2MiB", None).await;
    let spread = per_connection(&responses);
    assert_eq!(spread.len(), 16usize.div_ceil(UNPROVEN_BULK_STREAMS), "streams per connection: {spread:?}");
    assert!(spread.values().all(|&n| n <= UNPROVEN_BULK_STREAMS), "{spread:?}");
    assert_eq!(t.stats().connections_opened as usize, spread.len());
    read_all(responses, 2 * MIB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_small_streams_shares_one_connection() {
    let srv = FerryServe::new().anonymous().configure(|c| c.synthetic_bucket = Some("syn".into())).start();
    let t = transport(&srv, 16);
    let responses = burst(&t, 16, "/syn/16KiB", Some(16 * 1024)).await;
    assert_eq!(per_connection(&responses).len(), 1);
    assert_eq!(t.stats().connections_opened, 1);
    read_all(responses, 16 * 1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_burst_of_bulk_streams_shares_the_connections_there_are() {
    let srv = FerryServe::new().anonymous().configure(|c| c.synthetic_bucket = Some("syn".into())).start();
    let t = transport(&srv, 2);
    let responses = burst(&t, 16, "/syn/1MiB", None).await;
    let spread = per_connection(&responses);
    assert_eq!(spread.len(), 2, "{spread:?}");
    assert_eq!(t.stats().connections_opened, 2);
    read_all(responses, MIB).await;
}
