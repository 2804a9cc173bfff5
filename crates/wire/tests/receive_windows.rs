//! The receive-window cap of HTTP/1.1 connections (conn.rs's module doc), on real sockets
//! to a real `ferry serve`, and when auto engages it. Loopback's RTT is under the cap's floor, so the tests that
//! want a cap tell the connector the path's RTT (`assume_min_rtt`); the socket option is
//! set and read back from the kernel either way.

use ferry_testkit::data::pattern;
use ferry_testkit::http::{create_bucket, get_all, put};
use ferry_testkit::{FerryServe, Served};
use ferry_wire::auto::AutoTransport;
use ferry_wire::conn::{window_cap, Connector, H1_RESPONSE_RATE};
use ferry_wire::{Mode, Request, RequestBody, Transport};
use http::Method;
use std::sync::Arc;
use std::time::Duration;

fn connector(srv: &Served, alpn: &[&[u8]]) -> Connector {
    Connector::new(&srv.transport_config(), alpn).unwrap()
}

fn rmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap()
}

/// What the kernel reports for a cap set for `rtt`: twice the request (its bookkeeping).
fn expected(rtt: Duration) -> Option<u32> {
    window_cap(H1_RESPONSE_RATE, rtt, rmem_max()).map(|c| 2 * c)
}

#[tokio::test]
async fn an_http1_connection_gets_the_window_its_path_needs() {
    let srv = FerryServe::new().anonymous().start();
    let c = connector(&srv, &[]);
    // Off unless asked.
    c.assume_min_rtt(Duration::from_millis(1));
    assert_eq!(c.connect().await.unwrap().receive_buffer, None);

    c.cap_receive_windows();
    let want = expected(Duration::from_millis(1));
    assert!(want.is_some(), "rmem_max {} leaves no room for a cap; the test needs one", rmem_max());
    assert_eq!(c.connect().await.unwrap().receive_buffer, want);
}

#[tokio::test]
async fn loopback_is_left_to_the_kernel() {
    let srv = FerryServe::new().anonymous().start();
    let c = connector(&srv, &[]);
    c.cap_receive_windows();
    let conn = c.connect().await.unwrap();
    assert_eq!(conn.receive_buffer, None, "loopback's RTT x {H1_RESPONSE_RATE} B/s is under the floor");
}

#[tokio::test]
async fn the_smallest_rtt_seen_sizes_every_later_window() {
    let srv = FerryServe::new().anonymous().start();
    let c = connector(&srv, &[]);
    c.cap_receive_windows();
    c.assume_min_rtt(Duration::from_millis(3));
    assert_eq!(c.connect().await.unwrap().receive_buffer, expected(Duration::from_millis(3)));
    c.assume_min_rtt(Duration::from_millis(1));
    assert_eq!(c.connect().await.unwrap().receive_buffer, expected(Duration::from_millis(1)));
    // Opened behind a full queue: its own RTT is inflated, the path's is not.
    c.assume_min_rtt(Duration::from_millis(9));
    assert_eq!(c.connect().await.unwrap().receive_buffer, expected(Duration::from_millis(1)));
    assert_ne!(expected(Duration::from_millis(1)), expected(Duration::from_millis(3)));
}

#[tokio::test]
async fn tls_caps_http1_but_not_http2() {
    let srv = FerryServe::new().anonymous().tls().start();
    let h2 = connector(&srv, &[b"h2", b"http/1.1"]);
    h2.cap_receive_windows();
    h2.assume_min_rtt(Duration::from_millis(1));
    let conn = h2.connect().await.unwrap();
    assert!(conn.alpn_h2);
    assert_eq!(conn.receive_buffer, None, "one HTTP/2 connection carries many streams at once");

    let h1 = connector(&srv, &[b"http/1.1"]);
    h1.cap_receive_windows();
    h1.assume_min_rtt(Duration::from_millis(1));
    let conn = h1.connect().await.unwrap();
    assert!(!conn.alpn_h2);
    assert_eq!(conn.receive_buffer, expected(Duration::from_millis(1)));
}

#[tokio::test]
async fn engaging_caps_the_connections_already_open() {
    let srv = FerryServe::new().anonymous().start();
    let c = connector(&srv, &[]);
    c.watch_receive_windows();
    c.assume_min_rtt(Duration::from_millis(1));
    let want = expected(Duration::from_millis(1)).expect("rmem_max leaves room for a cap");
    let first = c.connect().await.unwrap();
    assert_eq!(first.receive_buffer, None, "watched, not capped");
    let before = c.watched_receive_buffers();
    assert_eq!(before.len(), 1);
    assert_ne!(before[0], want, "the kernel's own buffer differs from the cap");

    c.engage_window_cap();
    assert!(c.window_cap_engaged());
    assert_eq!(c.watched_receive_buffers(), vec![want], "the open connection was capped");
    let second = c.connect().await.unwrap();
    assert_eq!(second.receive_buffer, Some(want), "and each one opened after");
    assert_eq!(c.watched_receive_buffers(), vec![want, want]);

    // A closed connection leaves the watch list.
    drop(first);
    assert_eq!(c.watched_receive_buffers(), vec![want]);
    drop(second);
}

/// What auto does: windows are capped once a small request comes while a bulk one is
/// still moving, never for either kind alone (nothing waits behind a queue then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_caps_windows_once_small_requests_meet_bulk_ones() {
    let srv = FerryServe::new().anonymous().start();
    let auto = Arc::new(AutoTransport::new(srv.client_config(Mode::Auto, |c| c.max_connections = 8)).unwrap());
    auto.connector().assume_min_rtt(Duration::from_millis(1));
    let want = expected(Duration::from_millis(1)).expect("rmem_max leaves room for a cap");
    let t: Arc<dyn Transport> = auto.clone();
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/large", RequestBody::Full(pattern(16 << 20))).await;
    put(&t, "/bkt/small", RequestBody::Full(pattern(1024))).await;
    let small = || {
        let mut r = Request::new(Method::GET, "/bkt/small");
        r.response_len = Some(1024);
        r
    };

    // Bulk alone, then small alone.
    assert_eq!(get_all(&t, "/bkt/large").await.1.len(), 16 << 20);
    let r = t.send(small()).await.unwrap();
    assert_eq!(r.body.collect(1 << 20).await.unwrap().len(), 1024);
    assert!(!auto.connector().window_cap_engaged(), "no small request met a bulk one");
    assert!(!auto.connector().watched_receive_buffers().is_empty());
    assert!(!auto.connector().watched_receive_buffers().contains(&want));

    // A bulk body still being read, and a small request.
    let bulk = t.send(Request::new(Method::GET, "/bkt/large")).await.unwrap();
    let r = t.send(small()).await.unwrap();
    assert_eq!(r.body.collect(1 << 20).await.unwrap().len(), 1024);
    assert!(auto.connector().window_cap_engaged());
    let buffers = auto.connector().watched_receive_buffers();
    assert!(buffers.iter().all(|&b| b == want), "every open pool connection capped: {buffers:?} beside {want}");
    assert_eq!(bulk.body.collect(32 << 20).await.unwrap(), pattern(16 << 20), "the capped transfer completes intact");
}
