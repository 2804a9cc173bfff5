//! Byte-level tests of the HTTP/1.1 server: pipelining, framing and malformed input,
//! driven over a real TCP socket against a server started in-process.

use ferry_server::{Faults, ServeConfig};
use ferry_testkit::{FerryServe, Served};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// An anonymous in-memory server, after `configure`.
fn start(configure: impl FnOnce(&mut ServeConfig)) -> Served {
    FerryServe::new().anonymous().configure(configure).start()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// One parsed response.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Reads one response from `buf` + the socket; `head_only` for HEAD requests.
fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>, head_only: bool) -> Option<Resp> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut r = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = r.parse(buf) {
            let status = r.code.unwrap();
            let hs: Vec<(String, String)> =
                r.headers.iter().map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned())).collect();
            let len: usize = if head_only || status == 100 || status == 304 {
                0
            } else {
                hs.iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .map(|(_, v)| v.parse().unwrap())
                    .unwrap_or(0)
            };
            while buf.len() < n + len {
                let mut tmp = [0u8; 65536];
                let k = s.read(&mut tmp).ok()?;
                if k == 0 {
                    return None;
                }
                buf.extend_from_slice(&tmp[..k]);
            }
            let body = buf[n..n + len].to_vec();
            buf.drain(..n + len);
            return Some(Resp { status, headers: hs, body });
        }
        let mut tmp = [0u8; 65536];
        let k = s.read(&mut tmp).ok()?;
        if k == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..k]);
    }
}

fn request(s: &mut TcpStream, raw: &str) -> Resp {
    s.write_all(raw.as_bytes()).unwrap();
    read_response(s, &mut Vec::new(), raw.starts_with("HEAD")).expect("a response")
}

fn put(addr: SocketAddr, path: &str, body: &[u8]) {
    let mut s = connect(addr);
    s.write_all(format!("PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes())
        .unwrap();
    s.write_all(body).unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.status, 200, "PUT {path}: {}", String::from_utf8_lossy(&r.body));
}

fn object(i: usize) -> Vec<u8> {
    (0..(i * 997) % 5000).map(|j| (i * 31 + j) as u8).collect()
}

fn closed(s: &mut TcpStream) -> bool {
    let mut tmp = [0u8; 16];
    matches!(s.read(&mut tmp), Ok(0) | Err(_))
}

#[test]
fn thirty_two_pipelined_requests_in_one_write_come_back_in_order() {
    let srv = start(|_| {});
    put(srv.addr(), "/pipe", b"");
    for i in 0..32 {
        put(srv.addr(), &format!("/pipe/k{i}"), &object(i));
    }
    let mut s = connect(srv.addr());
    let mut all = String::new();
    for i in 0..32 {
        let method = if i == 5 { "HEAD" } else { "GET" };
        all.push_str(&format!("{method} /pipe/k{i} HTTP/1.1\r\nHost: x\r\n\r\n"));
    }
    s.write_all(all.as_bytes()).unwrap();
    let mut buf = Vec::new();
    for i in 0..32 {
        let r = read_response(&mut s, &mut buf, i == 5).unwrap();
        assert_eq!(r.status, 200);
        if i == 5 {
            assert_eq!(r.header("content-length").unwrap(), object(i).len().to_string());
            assert!(r.body.is_empty());
        } else {
            assert_eq!(r.body, object(i), "response {i} out of order or wrong");
        }
    }
}

#[test]
fn a_request_delivered_one_byte_at_a_time_is_parsed() {
    let srv = start(|_| {});
    put(srv.addr(), "/slow", b"");
    let mut s = connect(srv.addr());
    s.set_nodelay(true).unwrap();
    let req =
        b"PUT /slow/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /slow/k HTTP/1.1\r\nHost: x\r\n\r\n";
    for b in req.iter() {
        s.write_all(&[*b]).unwrap();
    }
    let mut buf = Vec::new();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!(r.body, b"hello");
}

#[test]
fn chunked_request_body_and_expect_continue() {
    let srv = start(|_| {});
    put(srv.addr(), "/chunk", b"");
    let mut s = connect(srv.addr());
    s.write_all(b"PUT /chunk/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let interim = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!(interim.status, 100);
    s.write_all(b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
    let r = request(&mut s, "GET /chunk/k HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.body, b"hello, world");
}

/// An empty PUT that expects 100-continue gets its 100 before the 200, as from S3: the
/// AWS CLI's botocore, answered with a final status alone, reuses that status for the
/// next expecting request on the connection and hangs for its read time-out.
#[test]
fn an_empty_put_expecting_continue_gets_its_100_first() {
    let srv = start(|_| {});
    put(srv.addr(), "/empty", b"");
    let mut s = connect(srv.addr());
    s.write_all(b"PUT /empty/k HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 100);
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
    // The connection carries the next expecting request as usual.
    s.write_all(b"PUT /empty/k2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 100);
    s.write_all(b"abc").unwrap();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
    assert_eq!(request(&mut s, "GET /empty/k2 HTTP/1.1\r\nHost: x\r\n\r\n").body, b"abc");
}

#[test]
fn connection_close_on_request_k_ends_after_response_k() {
    let srv = start(|_| {});
    put(srv.addr(), "/cls", b"");
    put(srv.addr(), "/cls/a", b"A");
    let mut s = connect(srv.addr());
    s.write_all(
        b"GET /cls/a HTTP/1.1\r\nHost: x\r\n\r\nGET /cls/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /cls/a HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().body, b"A");
    let second = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!(second.header("connection"), Some("close"));
    assert!(read_response(&mut s, &mut buf, false).is_none(), "no third response after Connection: close");
}

#[test]
fn http10_without_keep_alive_closes() {
    let srv = start(|_| {});
    let mut s = connect(srv.addr());
    let r = request(&mut s, "GET / HTTP/1.0\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(closed(&mut s));
}

#[test]
fn malformed_requests_get_s3_errors_and_the_server_keeps_serving() {
    let srv = start(|_| {});
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"\x00\x01garbage\r\n\r\n".to_vec(), 400),
        (b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), 501),
        (b"PUT /a/b HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n".to_vec(), 400),
        (b"PUT /a/b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(), 400),
        (format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(70 * 1024)).into_bytes(), 431),
    ];
    for (raw, status) in cases {
        let mut s = connect(srv.addr());
        s.write_all(&raw).unwrap();
        let r = read_response(&mut s, &mut Vec::new(), false)
            .unwrap_or_else(|| panic!("no response to {:?}", String::from_utf8_lossy(&raw[..20])));
        assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
        let body = String::from_utf8_lossy(&r.body);
        assert!(body.contains("<Error>") && body.contains("<Code>"), "S3 error body expected: {body}");
        assert!(closed(&mut s), "connection closed after a malformed request");
    }
    let mut s = connect(srv.addr());
    assert_eq!(request(&mut s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
}

#[test]
fn a_truncated_upload_leaves_nothing_behind() {
    let srv = start(|_| {});
    put(srv.addr(), "/trunc", b"");
    {
        let mut s = connect(srv.addr());
        s.write_all(b"PUT /trunc/k HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n").unwrap();
        s.write_all(&[7u8; 5000]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut s = connect(srv.addr());
    let r = request(&mut s, "GET /trunc/k HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains("NoSuchKey"));
}

#[test]
fn pipelined_first_byte_delays_overlap() {
    // Constant 200 ms first-byte delay (p99 = p50). Ten pipelined GETs served one after
    // another would take 2 s; think time that starts on arrival makes them overlap.
    let srv = start(|c| {
        c.emulation.ttfb_p50 = Duration::from_millis(200);
        c.emulation.ttfb_p99 = Duration::from_millis(200);
    });
    put(srv.addr(), "/ttfb", b"");
    put(srv.addr(), "/ttfb/k", b"x");
    let mut s = connect(srv.addr());
    let all: String = (0..10).map(|_| "GET /ttfb/k HTTP/1.1\r\nHost: x\r\n\r\n").collect();
    let t0 = Instant::now();
    s.write_all(all.as_bytes()).unwrap();
    let mut buf = Vec::new();
    for _ in 0..10 {
        assert_eq!(read_response(&mut s, &mut buf, false).unwrap().body, b"x");
    }
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(200), "the delay applies: {took:?}");
    assert!(took < Duration::from_millis(1000), "delays overlap instead of adding up: {took:?}");
}

#[test]
fn reset_fault_cuts_the_body_short() {
    let srv = start(|c| c.faults = Faults { reset_rate: 1.0, seed: 3, ..Faults::default() });
    put(srv.addr(), "/rst", b"");
    put(srv.addr(), "/rst/k", &vec![1u8; 1 << 20]);
    let mut s = connect(srv.addr());
    s.write_all(b"GET /rst/k HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut tmp = [0u8; 65536];
    loop {
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&tmp[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got[..200.min(got.len())]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(got.len() < (1 << 20), "the body was cut short ({} bytes read)", got.len());
}

#[test]
fn a_stalled_request_head_times_out_with_request_timeout() {
    let srv = start(|c| c.limits.header_timeout = Duration::from_millis(300));
    let mut s = connect(srv.addr());
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false).expect("a 400 after the time-out");
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("RequestTimeout"));
    assert!(closed(&mut s));
}

#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let srv = start(|c| c.limits.idle_timeout = Duration::from_millis(300));
    let mut s = connect(srv.addr());
    assert_eq!(request(&mut s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
    let t0 = Instant::now();
    assert!(closed(&mut s));
    assert!(t0.elapsed() >= Duration::from_millis(250));
}

#[test]
fn connections_over_the_cap_get_503() {
    let srv = start(|c| c.limits.max_connections = 1);
    let mut first = connect(srv.addr());
    assert_eq!(request(&mut first, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
    let mut second = connect(srv.addr());
    let r = read_response(&mut second, &mut Vec::new(), false).expect("a 503 on the second connection");
    assert_eq!(r.status, 503);
    assert!(String::from_utf8_lossy(&r.body).contains("SlowDown"));
    // The first connection still works.
    assert_eq!(request(&mut first, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
}

#[test]
fn a_pipelined_put_then_get_of_one_key_takes_effect_in_order() {
    let srv = start(|_| {});
    put(srv.addr(), "/ord", b"");
    put(srv.addr(), "/ord/k", b"old");
    let mut s = connect(srv.addr());
    s.write_all(
        b"GET /ord/k HTTP/1.1\r\nHost: x\r\n\r\nPUT /ord/k HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nnewGET /ord/k HTTP/1.1\r\nHost: x\r\n\r\nDELETE /ord/k HTTP/1.1\r\nHost: x\r\n\r\nGET /ord/k HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().body, b"old");
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().body, b"new");
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 204);
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 404);
}

#[test]
fn requests_above_the_per_prefix_rate_get_slow_down() {
    let srv = start(|c| c.emulation.get_rate_limit = Some(10));
    put(srv.addr(), "/thr", b"");
    put(srv.addr(), "/thr/a/k", b"x");
    put(srv.addr(), "/thr/b/k", b"y");
    let mut s = connect(srv.addr());
    let all: String = (0..30).map(|_| "GET /thr/a/k HTTP/1.1\r\nHost: x\r\n\r\n").collect();
    s.write_all(all.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let statuses: Vec<u16> = (0..30).map(|_| read_response(&mut s, &mut buf, false).unwrap().status).collect();
    let throttled = statuses.iter().filter(|&&c| c == 503).count();
    assert!(throttled >= 15, "most of 30 back-to-back GETs exceed 10/s: {statuses:?}");
    assert!(statuses.iter().all(|&c| c == 200 || c == 503));
    // Another prefix has its own budget.
    assert_eq!(request(&mut s, "GET /thr/b/k HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
}

#[test]
fn large_bodies_arrive_byte_exact_through_gathered_writes() {
    let srv = start(|_| {});
    // Synthetic content is served as many 64 KiB slices of a shared pool.
    let mut s = connect(srv.addr());
    let size = 5 * 1024 * 1024 + 123;
    let r = request(&mut s, &format!("GET /synthetic/size={size}/k HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, ferry_backend::synthetic_bytes(&format!("size={size}/k"), 0, size));
    // A range starting mid-block.
    let r = request(&mut s, "GET /synthetic/1MiB/k HTTP/1.1\r\nHost: x\r\nRange: bytes=70000-300000\r\n\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, ferry_backend::synthetic_bytes("1MiB/k", 70000, 230001));
    // A stored object uploaded in many small writes.
    put(srv.addr(), "/big", b"");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    put(srv.addr(), "/big/k", &data);
    let r = request(&mut s, "GET /big/k HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.body, data);
}
