//! The server under hostile or heavy load, over real sockets, kept small enough to run in
//! seconds (the 10,000-connection and 5 GiB figures come from `scripts/load.sh`,
//! docs/lab/load.md):
//!
//! - 2,000 idle connections stay open, and a new client is still served;
//! - a request head or body trickled a byte at a time is cut off with 400 RequestTimeout
//!   while other clients are served;
//! - a PUT that declares 5 GiB to a bucket that does not exist (or that fails its
//!   signature) gets its error after the server read at most a few MiB of it, with
//!   `Connection: close`, and `Expect: 100-continue` gets the error instead of the 100;
//!   a request pipelined behind such a refusal is never run;
//! - TLS 1.0 and 1.1 ClientHellos are refused with a protocol_version alert; TLS 1.2 and
//!   1.3 clients complete a request.
//! - over HTTP/2, a HEADERS frame trickled a byte at a time closes the connection at the
//!   header time-out, and a connection with no stream open is closed (GOAWAY) at the
//!   idle time-out (one whose response waits on the client's flow-control window is
//!   open, and kept), and a body trickled a byte at a time gets 400 RequestTimeout by the
//!   same budget as HTTP/1.1's (raw frames on a socket, so the server's own clocks are
//!   what is seen).

use ferry_server::ServeConfig;
use ferry_testkit::{FerryServe, Served};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn start(configure: impl FnOnce(&mut ServeConfig)) -> Served {
    FerryServe::new().anonymous().configure(configure).start()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// A response's status line, headers and body (by Content-Length), read from `s`.
struct Resp {
    status: u16,
    head: String,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }
}

/// Reads one response; `None` if the connection closed (or failed) first.
fn read_response(s: &mut impl Read) -> Option<Resp> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head.get(9..12)?.parse().ok()?;
    let mut resp = Resp { status, head, body: String::new() };
    let len: usize = resp.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + len {
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    resp.body = String::from_utf8_lossy(&buf[head_end..head_end + len]).into_owned();
    Some(resp)
}

fn get(addr: SocketAddr, target: &str) -> Resp {
    let mut s = connect(addr);
    s.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    read_response(&mut s).expect("a response")
}

fn put(addr: SocketAddr, target: &str, body: &[u8]) -> u16 {
    let mut s = connect(addr);
    s.write_all(format!("PUT {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes())
        .unwrap();
    s.write_all(body).unwrap();
    read_response(&mut s).expect("a response").status
}

/// A counter or gauge from `/_ferry/metrics`.
fn metric(addr: SocketAddr, name: &str) -> u64 {
    let text = get(addr, "/_ferry/metrics").body;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("{name} not in metrics:\n{text}"))
}

/// True once the peer closed (EOF or reset) within the read time-out.
fn closed(s: &mut TcpStream) -> bool {
    let mut tmp = [0u8; 4096];
    loop {
        match s.read(&mut tmp) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn two_thousand_idle_connections_are_held_and_a_new_client_is_served() {
    let srv = start(|_| {});
    let addr = srv.addr();
    assert_eq!(put(addr, "/idle", b""), 200);
    assert_eq!(put(addr, "/idle/k", b"still here"), 200);
    // Half never send a byte (the server waits in protocol detection), half go idle
    // after a keep-alive request (it waits for their next head).
    let mut idle = Vec::new();
    for i in 0..2000 {
        let mut s = connect(addr);
        if i % 2 == 1 {
            s.write_all(b"GET /idle/k HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            assert_eq!(read_response(&mut s).expect("a response").status, 200);
        }
        idle.push(s);
    }
    // The metrics request itself is one more open connection.
    assert!(metric(addr, "ferry_connections_open") > 2000);
    let resp = get(addr, "/idle/k");
    assert_eq!((resp.status, resp.body.as_str()), (200, "still here"));
    // They were held, not dropped: a sample of both kinds is served on its own socket.
    for s in idle.iter_mut().step_by(97) {
        s.write_all(b"GET /idle/k HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(read_response(s).expect("an idle connection still served").status, 200);
    }
}

#[test]
fn trickled_heads_and_bodies_time_out_while_others_are_served() {
    let srv = start(|c| {
        c.limits.header_timeout = Duration::from_millis(800);
        c.limits.body_timeout = Duration::from_millis(800);
        c.limits.body_min_rate = 100;
    });
    let addr = srv.addr();
    assert_eq!(put(addr, "/loris", b""), 200);
    assert_eq!(put(addr, "/loris/k", b"v"), 200);
    let mut heads: Vec<TcpStream> = (0..40).map(|_| connect(addr)).collect();
    let mut bodies: Vec<TcpStream> = (0..40).map(|_| connect(addr)).collect();
    for s in &mut bodies {
        s.write_all(b"PUT /loris/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n").unwrap();
    }
    // One byte per connection every 50 ms: no read ever waits as long as a time-out,
    // so only a bound on the whole head, and on the body's overall rate, ends them.
    let head_text = b"GET /loris/k HTTP/1.1\r\nHost: x\r\nX-Pad: ".iter().chain([b'a'; 4096].iter());
    let t0 = Instant::now();
    let mut served = 0;
    for (round, byte) in head_text.enumerate() {
        if t0.elapsed() > Duration::from_secs(3) {
            break;
        }
        for s in heads.iter_mut().chain(bodies.iter_mut()) {
            let _ = s.write(&[*byte]);
        }
        if round % 4 == 0 {
            let resp = get(addr, "/loris/k");
            assert_eq!((resp.status, resp.body.as_str()), (200, "v"), "a client served meanwhile");
            served += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(served >= 10, "{served}");
    for (what, conns) in [("head", &mut heads), ("body", &mut bodies)] {
        for s in conns.iter_mut() {
            let resp = read_response(s).unwrap_or_else(|| panic!("a trickled {what} got no answer"));
            assert_eq!(resp.status, 400, "{what}: {}", resp.body);
            assert!(resp.body.contains("<Code>RequestTimeout</Code>"), "{what}: {}", resp.body);
            assert_eq!(resp.header("connection"), Some("close"), "{what}");
            assert!(closed(s), "the {what} trickler's connection was closed");
        }
    }
    assert_eq!(get(addr, "/loris/slow").status, 404, "no trickled body took effect");
}

const FIVE_GIB: u64 = 5 * 1024 * 1024 * 1024;

/// Sends a PUT head declaring 5 GiB and then zeros as fast as the socket takes them,
/// until the server stops reading; returns the response and the bytes the client sent.
fn put_five_gib(addr: SocketAddr, target: &str, extra_headers: &str) -> (Resp, u64) {
    let mut s = connect(addr);
    s.write_all(
        format!("PUT {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {FIVE_GIB}\r\n{extra_headers}\r\n").as_bytes(),
    )
    .unwrap();
    let mut writer = s.try_clone().unwrap();
    writer.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let sender = std::thread::spawn(move || {
        let zeros = vec![0u8; 64 * 1024];
        let mut sent = 0u64;
        while sent < FIVE_GIB {
            match writer.write(&zeros) {
                Ok(n) => sent += n as u64,
                Err(_) => break,
            }
        }
        sent
    });
    let resp = read_response(&mut s).expect("an answer before the body was sent");
    let _ = s.shutdown(std::net::Shutdown::Both);
    let sent = sender.join().unwrap();
    (resp, sent)
}

#[test]
fn a_five_gib_put_to_a_missing_bucket_is_answered_without_reading_it() {
    let srv = start(|_| {});
    let addr = srv.addr();
    let before = metric(addr, "ferry_bytes_in_total");
    let (resp, sent) = put_five_gib(addr, "/no-such-bucket/big", "");
    assert_eq!(resp.status, 404, "{}", resp.body);
    assert!(resp.body.contains("<Code>NoSuchBucket</Code>"), "{}", resp.body);
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(sent < FIVE_GIB, "the client could send it all");
    let read = metric(addr, "ferry_bytes_in_total") - before;
    assert!(read <= 4 << 20, "the server read {read} bytes of a body nobody wanted");
    // The server is unharmed.
    assert_eq!(put(addr, "/after", b""), 200);
}

#[test]
fn expect_continue_to_a_missing_bucket_gets_the_error_instead_of_100() {
    let srv = start(|_| {});
    let addr = srv.addr();
    let mut s = connect(addr);
    s.write_all(
        format!(
            "PUT /no-such-bucket/big HTTP/1.1\r\nHost: x\r\nContent-Length: {FIVE_GIB}\r\nExpect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let resp = read_response(&mut s).expect("an answer without the body");
    assert_eq!(resp.status, 404, "{}", resp.head);
    assert!(resp.body.contains("<Code>NoSuchBucket</Code>"), "{}", resp.body);
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(closed(&mut s));
    // A bucket that exists still gets its 100 and takes the body.
    assert_eq!(put(addr, "/expect", b""), 200);
    let mut s = connect(addr);
    s.write_all(b"PUT /expect/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n").unwrap();
    let mut first = [0u8; 25];
    s.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").unwrap();
    assert_eq!(read_response(&mut s).unwrap().status, 200);
    assert_eq!(get(addr, "/expect/k").body, "hello");
}

#[test]
fn a_request_pipelined_after_a_refused_body_never_takes_effect() {
    let srv = start(|_| {});
    let addr = srv.addr();
    assert_eq!(put(addr, "/piped", b""), 200);
    let mut s = connect(addr);
    // The refused PUT's small body is read whole before the handler answers; the PUT
    // behind it must still not run, since the connection closes after the 404.
    s.write_all(
        b"PUT /no-such-bucket/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloPUT /piped/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nworld",
    )
    .unwrap();
    let resp = read_response(&mut s).expect("the 404");
    assert_eq!(resp.status, 404);
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(closed(&mut s));
    assert_eq!(get(addr, "/piped/k").status, 404, "the unanswered PUT took effect");
}

#[test]
fn a_five_gib_put_that_fails_its_signature_is_answered_without_reading_it() {
    let srv = FerryServe::new().start();
    assert!(srv.credentials().is_some());
    let addr = srv.addr();
    let before = metric(addr, "ferry_bytes_in_total");
    let (resp, sent) = put_five_gib(
        addr,
        "/bucket/big",
        "Authorization: AWS4-HMAC-SHA256 Credential=ferry/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\n",
    );
    assert_eq!(resp.status, 403, "{}", resp.body);
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(sent < FIVE_GIB);
    let read = metric(addr, "ferry_bytes_in_total") - before;
    assert!(read <= 4 << 20, "the server read {read} bytes of an unauthenticated body");
}

/// A ClientHello without a supported_versions extension, so `version` (0x0301 TLS 1.0,
/// 0x0302 TLS 1.1, 0x0303 TLS 1.2) is all it offers, with suites and extensions a TLS 1.2
/// server accepts: only the version can make the server refuse it.
fn legacy_client_hello(version: u16) -> Vec<u8> {
    let suites: [u16; 6] = [0xc02b, 0xc02f, 0xc013, 0xc014, 0x002f, 0x0035];
    let mut hello = Vec::new();
    hello.extend_from_slice(&version.to_be_bytes());
    hello.extend_from_slice(&[7u8; 32]); // random
    hello.push(0); // session id
    hello.extend_from_slice(&((suites.len() * 2) as u16).to_be_bytes());
    for s in suites {
        hello.extend_from_slice(&s.to_be_bytes());
    }
    hello.extend_from_slice(&[1, 0]); // compression: null
                                      // Extensions: supported_groups (x25519, P-256), ec_point_formats (uncompressed),
                                      // signature_algorithms (ECDSA P-256 SHA-256, RSA-PSS SHA-256, RSA PKCS#1 SHA-256).
    let ext: Vec<u8> = [
        &[0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17][..],
        &[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00],
        &[0x00, 0x0d, 0x00, 0x08, 0x00, 0x06, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01],
    ]
    .concat();
    hello.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    hello.extend_from_slice(&ext);
    let mut handshake = vec![1u8]; // ClientHello
    handshake.extend_from_slice(&(hello.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&hello);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

#[test]
fn tls_1_0_and_1_1_are_refused_and_1_2_and_1_3_serve() {
    let srv = FerryServe::new().anonymous().tls().start();
    let addr = srv.addr();
    for (name, version) in [("TLS 1.0", 0x0301u16), ("TLS 1.1", 0x0302)] {
        let mut s = connect(addr);
        s.write_all(&legacy_client_hello(version)).unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        // An alert record (21), level fatal (2), protocol_version (70); no ServerHello.
        assert!(answer.len() >= 7, "{name}: {answer:?}");
        assert_eq!((answer[0], answer[5], answer[6]), (21, 2, 70), "{name}: {answer:?}");
    }
    // The same hello at TLS 1.2 gets a ServerHello: handshake record (22), type 2.
    let mut s = connect(addr);
    s.write_all(&legacy_client_hello(0x0303)).unwrap();
    let mut answer = [0u8; 6];
    s.read_exact(&mut answer).unwrap();
    assert_eq!((answer[0], answer[5]), (22, 2), "TLS 1.2 control: {answer:?}");
    // rustls clients pinned to one version each complete a request.
    let pem = std::fs::read(srv.ca_file().unwrap()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    for (name, version) in [("TLS 1.2", &rustls::version::TLS12), ("TLS 1.3", &rustls::version::TLS13)] {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        let server_name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), server_name).unwrap();
        let mut sock = connect(addr);
        let mut tls = rustls::Stream::new(&mut conn, &mut sock);
        tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
        let resp = read_response(&mut tls).unwrap_or_else(|| panic!("{name}: no response"));
        assert_eq!(resp.status, 200, "{name}");
        let negotiated = conn.protocol_version().unwrap();
        assert_eq!(negotiated, version.version, "{name}");
    }
}

/// HTTP/2 over cleartext with prior knowledge: the client preface and an empty SETTINGS.
fn h2_connect(addr: SocketAddr) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.write_all(&h2_frame(0x4, 0, 0, &[])).unwrap();
    s
}

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The next frame from the server: Ok(Some((type, flags, payload))), Ok(None) once it
/// closed (EOF or reset), Err on a read time-out.
fn h2_read(s: &mut TcpStream) -> std::io::Result<Option<(u8, u8, Vec<u8>)>> {
    let mut head = [0u8; 9];
    match s.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return Err(e),
        Err(_) => return Ok(None),
    }
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    if s.read_exact(&mut payload).is_err() {
        return Ok(None);
    }
    Ok(Some((head[3], head[4], payload)))
}

/// GET / (ListBuckets) as one HEADERS frame: HPACK static entries for :method GET,
/// :scheme http and :path /, and :authority "x" as a literal.
const H2_GET_ROOT: &[u8] = &[0x82, 0x86, 0x84, 0x41, 0x01, b'x'];

#[test]
fn h2_headers_trickled_past_the_header_timeout_close_the_connection() {
    let srv = start(|c| c.limits.header_timeout = Duration::from_millis(800));
    let addr = srv.addr();
    let mut s = h2_connect(addr);
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    // A HEADERS frame of 1,000 bytes ("x: a" literal fields, so every prefix is valid),
    // sent a byte every 100 ms: bytes keep coming, but the frame never ends. (A flood
    // of CONTINUATION frames is refused by h2 itself, by their count.)
    let mut fields = Vec::new();
    for _ in 0..200 {
        fields.extend_from_slice(&[0x00, 0x01, b'x', 0x01, b'a']);
    }
    let frame = h2_frame(0x1, 0x5, 1, &fields);
    let mut trickle = frame.iter();
    let t0 = Instant::now();
    let mut settings = false;
    let gone = loop {
        assert!(t0.elapsed() < Duration::from_secs(10), "the trickled header block was never cut off");
        let _ = s.write_all(&[*trickle.next().unwrap()]);
        match h2_read(&mut s) {
            Ok(Some((kind, _, _))) => settings |= kind == 0x4,
            Ok(None) => break t0.elapsed(),
            Err(_) => {}
        }
    };
    assert!(settings, "the server spoke HTTP/2 first");
    assert!(gone >= Duration::from_millis(700) && gone < Duration::from_secs(5), "{gone:?}");
    assert_eq!(metric(addr, "ferry_h2_header_timeouts_total"), 1);
    // A whole request on a new connection is still answered.
    let mut s = h2_connect(addr);
    s.write_all(&h2_frame(0x1, 0x5, 1, H2_GET_ROOT)).unwrap();
    let status = loop {
        match h2_read(&mut s).expect("an answer") {
            Some((0x1, _, block)) => break block[0],
            Some(_) => {}
            None => panic!("closed before answering"),
        }
    };
    assert_eq!(status, 0x88, "HPACK :status 200");
}

#[test]
fn h2_connection_with_no_open_stream_is_closed_after_the_idle_timeout() {
    let srv = start(|c| {
        c.limits.idle_timeout = Duration::from_millis(800);
        c.limits.header_timeout = Duration::from_secs(2);
    });
    let addr = srv.addr();
    let mut s = h2_connect(addr);
    s.write_all(&h2_frame(0x1, 0x5, 1, H2_GET_ROOT)).unwrap();
    let mut answered = None;
    let mut goaway = None;
    let t0 = Instant::now();
    loop {
        match h2_read(&mut s).expect("the server closes well within the read time-out") {
            Some((0x1, _, block)) => {
                assert_eq!(block[0], 0x88, "HPACK :status 200");
                answered = Some(t0.elapsed());
            }
            Some((0x7, _, _)) => goaway = goaway.or(Some(t0.elapsed())),
            // Ack the server's PINGs, as a live client does: the graceful close waits
            // for one.
            Some((0x6, 0, data)) => s.write_all(&h2_frame(0x6, 0x1, 0, &data)).unwrap(),
            Some(_) => {}
            None => break,
        }
    }
    let closed_after = t0.elapsed();
    let answered = answered.expect("the request was answered");
    let goaway = goaway.expect("a GOAWAY before the close");
    assert!(goaway >= answered + Duration::from_millis(700), "GOAWAY {goaway:?}, answer {answered:?}");
    assert!(closed_after < Duration::from_secs(5), "{closed_after:?}");
    assert_eq!(metric(addr, "ferry_h2_idle_closes_total"), 1);
}

#[test]
fn h2_body_trickled_past_its_budget_gets_request_timeout() {
    let srv = start(|c| {
        c.limits.body_timeout = Duration::from_millis(800);
        c.limits.body_min_rate = 100;
    });
    let addr = srv.addr();
    assert_eq!(put(addr, "/h2slow", b""), 200);
    let mut s = h2_connect(addr);
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    // PUT /h2slow/k: :method and :path as literals with indexed names (2 and 4).
    let mut block = vec![0x02, 0x03];
    block.extend_from_slice(b"PUT");
    block.extend_from_slice(&[0x04, 0x0a]);
    block.extend_from_slice(b"/h2slow/k/");
    block.extend_from_slice(&[0x86, 0x41, 0x01, b'x']);
    s.write_all(&h2_frame(0x1, 0x4, 1, &block)).unwrap();
    // One DATA byte every 100 ms (10 B/s against a 100 B/s minimum): no wait is as long
    // as the body time-out, so only the body's overall budget ends it.
    let t0 = Instant::now();
    let status = loop {
        assert!(t0.elapsed() < Duration::from_secs(10), "the trickled body was never cut off");
        let _ = s.write_all(&h2_frame(0x0, 0, 1, b"z"));
        match h2_read(&mut s) {
            Ok(Some((0x1, _, block))) => break block[0],
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => panic!("closed without an answer"),
        }
    };
    let took = t0.elapsed();
    assert_eq!(status, 0x8c, "HPACK :status 400");
    let mut body = Vec::new();
    while let Ok(Some((kind, flags, data))) = h2_read(&mut s) {
        if kind == 0x0 {
            body.extend_from_slice(&data);
            if flags & 0x1 != 0 {
                break;
            }
        }
    }
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("<Code>RequestTimeout</Code>"), "{body}");
    assert!(took >= Duration::from_millis(700) && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(get(addr, "/h2slow/k/").status, 404, "the trickled body took no effect");
}

#[test]
fn h2_stream_open_past_the_idle_timeout_is_not_cut() {
    let srv = start(|c| c.limits.idle_timeout = Duration::from_millis(500));
    let mut s = h2_connect(srv.addr());
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    // GET /synthetic/1MiB/x: 1 MiB, of which the default 64 KiB window lets 65,535 bytes
    // out; the stream then waits on the client, open, for four idle time-outs.
    let mut block = vec![0x82, 0x86, 0x41, 0x01, b'x', 0x04, 17];
    block.extend_from_slice(b"/synthetic/1MiB/x");
    s.write_all(&h2_frame(0x1, 0x5, 1, &block)).unwrap();
    let mut got = 0usize;
    let mut done = false;
    let t0 = Instant::now();
    let mut opened = false;
    while !done {
        assert!(t0.elapsed() < Duration::from_secs(10), "the body did not finish ({got} bytes)");
        if !opened && t0.elapsed() > Duration::from_secs(2) {
            // Open both windows: the rest of the body follows on the same stream.
            let more = (2u32 << 20).to_be_bytes();
            s.write_all(&h2_frame(0x8, 0, 0, &more)).unwrap();
            s.write_all(&h2_frame(0x8, 0, 1, &more)).unwrap();
            opened = true;
        }
        match h2_read(&mut s) {
            Ok(Some((0x0, flags, data))) => {
                got += data.len();
                done = flags & 0x1 != 0;
            }
            Ok(Some((0x7, _, _))) => panic!("GOAWAY while a stream was open, after {:?}", t0.elapsed()),
            Ok(Some((0x6, 0, data))) => s.write_all(&h2_frame(0x6, 0x1, 0, &data)).unwrap(),
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => panic!("closed while a stream was open, after {:?} ({got} bytes)", t0.elapsed()),
        }
        if !opened {
            assert!(got <= 65_535, "{got} bytes went out before the window opened");
        }
    }
    assert!(opened, "the body ended before the window opened");
    assert_eq!(got, 1 << 20);
}
