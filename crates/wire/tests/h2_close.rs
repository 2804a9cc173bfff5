//! An HTTP/2 connection the transport lets go of is closed, socket and all, even when
//! the peer no longer reads: `h2`'s own graceful close (GOAWAY, then shutdown) waits on
//! a flush that a dead link never completes, so the transport bounds it
//! (`ferry_wire::h2::CLOSE_GRACE`).
//!
//! The peer is a raw socket speaking just enough HTTP/2 by hand (its SETTINGS, a large
//! connection window) for the client to pour an upload into it, then it stops reading:
//! the kernel's buffers on both sides fill, as on a link that died mid-upload.

use ferry_testkit::data::pattern;
use ferry_testkit::http::send;
use ferry_wire::h2::CLOSE_GRACE;
use ferry_wire::{ErrorKind, Mode, RequestBody};
use http::Method;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// One HTTP/2 frame: 9-byte header (RFC 9113 section 4.1) and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_let_go_on_a_dead_link_is_closed_within_the_grace() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (drain_tx, drain_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        // The client's preface and SETTINGS.
        let mut first = [0u8; 4096];
        let _ = sock.read(&mut first);
        const MAX_WINDOW: u32 = (1 << 31) - 1;
        let mut hello = Vec::new();
        // SETTINGS_INITIAL_WINDOW_SIZE (0x4) at its maximum, for every stream.
        let mut settings = vec![0x00, 0x04];
        settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
        hello.extend(frame(0x4, 0, 0, &settings));
        // The connection window to its maximum too (WINDOW_UPDATE on stream 0).
        hello.extend(frame(0x8, 0, 0, &(MAX_WINDOW - 65_535).to_be_bytes()));
        // SETTINGS ACK for the client's.
        hello.extend(frame(0x4, 0x1, 0, &[]));
        sock.write_all(&hello).unwrap();
        // Dead from here: nothing read until the test has looked at the client.
        let _ = drain_rx.recv_timeout(Duration::from_secs(30));
        // Then read to the end: the client closed its socket when this sees EOF.
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match sock.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    });

    let mut config =
        ferry_wire::TransportConfig::new(ferry_wire::Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap());
    config.mode = Mode::H2;
    config.response_timeout = Duration::from_millis(400);
    let t = ferry_wire::transport(config).unwrap();
    // Far more than the socket buffers on both sides hold.
    let body = RequestBody::from(pattern(64 << 20));
    let r = tokio::time::timeout(Duration::from_secs(15), send(&t, Method::PUT, "/bkt/k", body))
        .await
        .expect("an upload nobody reads was still going after 15 s");
    let e = r.err().expect("a peer that never answers gave a response");
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");

    // The transport dropped the connection on the time-out; its socket must go within
    // the grace although the GOAWAY can never be flushed.
    let gave_up = Instant::now();
    let deadline = CLOSE_GRACE + Duration::from_secs(2);
    while t.stats().connections_open > 0 && gave_up.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open = t.stats().connections_open;
    let _ = drain_tx.send(());
    assert_eq!(open, 0, "the dropped connection was still open {:?} after the time-out", gave_up.elapsed());
    assert!(peer.join().unwrap(), "the peer's socket saw no end of stream: the client never closed its side");
}
