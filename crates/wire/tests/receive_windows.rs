//! The receive-window cap of HTTP/1.1 connections (conn.rs's module doc), on real sockets
//! to a real `ferry serve`. Loopback's RTT is under the cap's floor, so the tests that
//! want a cap tell the connector the path's RTT (`assume_min_rtt`); the socket option is
//! set and read back from the kernel either way.

mod common;

use common::start;
use ferry_wire::conn::{window_cap, Connector, H1_RESPONSE_RATE};
use ferry_wire::{Endpoint, TransportConfig};
use std::time::Duration;

fn connector(srv: &common::Running, alpn: &[&[u8]]) -> Connector {
    let mut config = TransportConfig::new(Endpoint::parse(&srv.url()).unwrap());
    config.ca_file = srv.ca_file.clone();
    Connector::new(&config, alpn).unwrap()
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
    let srv = start(false, |_| {});
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
    let srv = start(false, |_| {});
    let c = connector(&srv, &[]);
    c.cap_receive_windows();
    let conn = c.connect().await.unwrap();
    assert_eq!(conn.receive_buffer, None, "loopback's RTT x {H1_RESPONSE_RATE} B/s is under the floor");
}

#[tokio::test]
async fn the_smallest_rtt_seen_sizes_every_later_window() {
    let srv = start(false, |_| {});
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
    let srv = start(true, |_| {});
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
