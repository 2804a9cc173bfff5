//! What `ferry serve --memory` keeps for the bodies it received: their bytes, not the
//! receive buffers they arrived in (see ferry-backend's body.rs). Driven over a real
//! socket, the way the HTTP/1.1 reader sees clients: small PUTs whose head and body come
//! in one read, and a slow client whose body arrives in 4 and 17 KiB pieces. The server
//! announces each body's length, so the blocks add up to exactly the bytes.

use ferry_testkit::FerryServe;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Reads one response (head and Content-Length body) and returns (status, body).
fn response(s: &mut TcpStream) -> (u16, Vec<u8>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "connection closed mid-head");
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let status = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    (status, body)
}

fn put_head(path: &str, len: usize) -> Vec<u8> {
    format!("PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n").into_bytes()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn stored_bodies_hold_only_their_bytes() {
    let server = FerryServe::new().anonymous().start();
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(&put_head("/mem", 0)).unwrap();
    assert_eq!(response(&mut s).0, 200);

    // 50 x 16 KiB, head and body in one write: the body is a 16 KiB piece of a 64 KiB
    // receive buffer.
    let small = pattern(16 * 1024, 1);
    for i in 0..50 {
        let mut req = put_head(&format!("/mem/small/{i}"), small.len());
        req.extend_from_slice(&small);
        s.write_all(&req).unwrap();
        assert_eq!(response(&mut s).0, 200);
    }
    // 2,000 KiB + 3 from a slow client, in 4 and 17 KiB writes with pauses between. The
    // size is one that, were the length not announced to the backend, would end in a
    // block 94% full and kept as is (blocks double from 16 KiB to 512 KiB: 1,008 KiB,
    // then 512 KiB ones).
    let big = pattern(2000 * 1024 + 3, 2);
    s.write_all(&put_head("/mem/big", big.len())).unwrap();
    for (i, piece) in big.chunks(21 * 1024).enumerate() {
        let (a, b) = piece.split_at(piece.len().min(4096));
        s.write_all(a).unwrap();
        std::thread::sleep(Duration::from_millis(1));
        s.write_all(b).unwrap();
        if i % 4 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(response(&mut s).0, 200);

    let u = server.backend().memory_usage();
    assert_eq!(u.object_bytes, 50 * small.len() as u64 + big.len() as u64, "{u:?}");
    assert_eq!(u.allocated_bytes, u.object_bytes, "stored bodies hold more than their bytes: {u:?}");

    s.write_all(b"GET /mem/big HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(response(&mut s), (200, big));
    s.write_all(b"GET /mem/small/49 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(response(&mut s), (200, small));
}
