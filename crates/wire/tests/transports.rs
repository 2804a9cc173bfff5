//! Behaviour of every transport against a real `ferry serve` over real sockets: written
//! once as `case_*` functions and generated for each mode by `suite!`, so a new case
//! reaches all of them. Tests check behaviour (bytes, statuses, error kinds, connection
//! counts), never speed.

use ferry_testkit::data::pattern;
use ferry_testkit::http::{create_bucket, get_all, put, send, streamed};
use ferry_testkit::{FerryServe, Served};
use ferry_wire::{ErrorKind, Mode, Protocol, RequestBody};
use http::{Method, StatusCode};
use std::time::Duration;

const MIB: usize = 1024 * 1024;

fn expected_protocol(mode: Mode, tls: bool) -> Protocol {
    match mode {
        Mode::H2 => Protocol::Http2,
        Mode::Auto if tls => Protocol::Http2,
        _ => Protocol::Http1,
    }
}

async fn case_round_trip_sizes(mode: Mode, tls: bool) {
    let srv = if tls { FerryServe::new().anonymous().tls() } else { FerryServe::new().anonymous() }.start();
    let t = srv.transport(mode, |_| {});
    create_bucket(&t, "bkt").await;
    for size in [0, 1, MIB, 20 * MIB] {
        let data = pattern(size);
        let r = put(&t, &format!("/bkt/full-{size}"), RequestBody::from(data.clone())).await;
        assert_eq!(r.meta.protocol, expected_protocol(mode, tls));
        drop(r);
        let (status, got) = get_all(&t, &format!("/bkt/full-{size}")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(got == data, "{size} bytes came back different ({} bytes)", got.len());

        let r = put(&t, &format!("/bkt/stream-{size}"), streamed(data.clone(), 64 * 1024 + 7)).await;
        drop(r);
        let (status, got) = get_all(&t, &format!("/bkt/stream-{size}")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(got == data, "streamed {size} bytes came back different ({} bytes)", got.len());
    }
}

async fn case_head(mode: Mode) {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(mode, |_| {});
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/k", RequestBody::from(pattern(12345))).await;
    let r = send(&t, Method::HEAD, "/bkt/k", RequestBody::Empty).await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers.get("content-length").map(|v| v.to_str().unwrap().to_string()),
        Some("12345".into()),
        "{:?}",
        r.headers
    );
    assert!(r.body.collect(1024).await.unwrap().is_empty());
    // The connection is still good after a HEAD.
    let (status, got) = get_all(&t, "/bkt/k").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got.len(), 12345);
}

async fn case_not_found_has_readable_xml(mode: Mode) {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(mode, |_| {});
    create_bucket(&t, "bkt").await;
    let (status, body) = get_all(&t, "/bkt/missing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("<Code>NoSuchKey</Code>"), "{text}");
}

async fn case_concurrency_respects_max_connections(mode: Mode) {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(mode, |c| c.max_connections = 4);
    create_bucket(&t, "bkt").await;
    let data = pattern(64 * 1024);
    put(&t, "/bkt/k", RequestBody::from(data.clone())).await;
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move { get_all(&t, "/bkt/k").await })
        })
        .collect();
    for task in tasks {
        let (status, got) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(got == data);
    }
    let stats = t.stats();
    assert!(stats.connections_opened >= 1 && stats.connections_opened <= 4, "{stats:?}");
    assert!(stats.requests_sent >= 102, "{stats:?}");
}

async fn case_dropped_body_does_not_break_the_next_request(mode: Mode) {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(mode, |c| c.max_connections = 1);
    create_bucket(&t, "bkt").await;
    let big = pattern(20 * MIB);
    put(&t, "/bkt/big", RequestBody::from(big.clone())).await;
    let small = pattern(1000);
    put(&t, "/bkt/small", RequestBody::from(small.clone())).await;
    for _ in 0..3 {
        let mut r = send(&t, Method::GET, "/bkt/big", RequestBody::Empty).await.unwrap();
        let mut read = 0;
        while read < 10 * MIB {
            read += r.body.chunk().await.unwrap().unwrap().len();
        }
        drop(r);
        let (status, got) = get_all(&t, "/bkt/small").await;
        assert_eq!(status, StatusCode::OK);
        assert!(got == small);
    }
    let (_, got) = get_all(&t, "/bkt/big").await;
    assert!(got == big);
}

async fn case_reset_mid_body_is_truncation(mode: Mode) {
    let srv = FerryServe::new().anonymous().configure(|c| c.faults.reset_rate = 1.0).start();
    let t = srv.transport(mode, |_| {});
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/k", RequestBody::from(pattern(4 * MIB))).await;
    for _ in 0..2 {
        match send(&t, Method::GET, "/bkt/k", RequestBody::Empty).await {
            Ok(r) => {
                assert_eq!(r.status, StatusCode::OK);
                let e = r.body.collect(8 * MIB).await.expect_err("a reset body must not end as a success");
                assert!(matches!(e.kind(), ErrorKind::BodyTruncated | ErrorKind::Reset), "{e}");
                assert!(e.retry_safe(true));
            }
            Err(e) => assert!(matches!(e.kind(), ErrorKind::Reset | ErrorKind::BodyTruncated), "{e}"),
        }
    }
}

/// A GET whose body stops part-way (the server's stall fault, 30 s) ends within the
/// response time-out with a retry-safe time-out, worded the same by every transport,
/// and its connection is let go: with one connection allowed, the next request still
/// goes through at once.
async fn case_stalled_body_times_out(mode: Mode) {
    let srv = FerryServe::new()
        .anonymous()
        .configure(|c| {
            c.faults.stall_rate = 1.0;
            c.faults.stall = Duration::from_secs(30);
        })
        .start();
    let limit = Duration::from_millis(400);
    let t = srv.transport(mode, |c| {
        c.response_timeout = limit;
        c.max_connections = 1;
    });
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/k", RequestBody::from(pattern(4 * MIB))).await;
    let started = std::time::Instant::now();
    let within = Duration::from_secs(10);
    let e = tokio::time::timeout(within, async {
        match send(&t, Method::GET, "/bkt/k", RequestBody::Empty).await {
            Ok(r) => r.body.collect(8 * MIB).await.expect_err("a stalled body must not end as a success"),
            Err(e) => e,
        }
    })
    .await
    .unwrap_or_else(|_| panic!("a stalled GET body was still waited on after {within:?}"));
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.retry_safe(true), "{e}");
    let wording = format!("no response body bytes for {limit:?} (after ");
    assert!(e.to_string().contains(&wording), "{mode:?} words a stalled body otherwise: {e}");
    assert!(started.elapsed() >= limit, "timed out before its limit: {:?}", started.elapsed());
    // The one connection allowed was given back: a request that does not stall passes.
    let r = tokio::time::timeout(within, send(&t, Method::HEAD, "/bkt/k", RequestBody::Empty))
        .await
        .expect("the next request waited on the stalled one's connection")
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
}

/// An upload to a peer that stops reading after the request head (a raw socket that
/// never answers) fails with a time-out within about the response time-out of the last
/// body byte the socket took, not when TCP gives up.
async fn case_upload_to_a_peer_that_stops_reading_times_out(mode: Mode) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        use std::io::Read;
        let (mut sock, _) = listener.accept().unwrap();
        let mut head = [0u8; 1024];
        let _ = sock.read(&mut head);
        // Holds the socket open and unread until the client gave up.
        let _ = done_rx.recv_timeout(Duration::from_secs(30));
    });
    let mut config =
        ferry_wire::TransportConfig::new(ferry_wire::Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap());
    config.mode = mode;
    let limit = Duration::from_millis(400);
    config.response_timeout = limit;
    let t = ferry_wire::transport(config).unwrap();
    // Far more than the socket buffers on both sides hold.
    let body = RequestBody::from(pattern(64 * MIB));
    let within = Duration::from_secs(15);
    let r = tokio::time::timeout(within, send(&t, Method::PUT, "/bkt/k", body))
        .await
        .unwrap_or_else(|_| panic!("an upload nobody reads was still going after {within:?}"));
    let _ = done_tx.send(());
    let e = match r {
        Ok(r) => panic!("got {} from a peer that never answers", r.status),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    peer.join().unwrap();
}

async fn case_unreachable_port_is_connect_error(mode: Mode) {
    // A port that was just free: bind, note, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config =
        ferry_wire::TransportConfig::new(ferry_wire::Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap());
    config.mode = mode;
    let t = ferry_wire::transport(config).unwrap();
    let e = match send(&t, Method::GET, "/bkt/k", RequestBody::Empty).await {
        Ok(r) => panic!("got {} from a closed port", r.status),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Connect, "{e}");
    assert!(e.retry_safe(false), "a connect error is safe to retry even when not idempotent");
}

async fn case_tls_with_self_signed_ca(mode: Mode) {
    let srv = FerryServe::new().anonymous().tls().start();
    let t = srv.transport(mode, |_| {});
    create_bucket(&t, "bkt").await;
    let data = pattern(3 * MIB + 5);
    put(&t, "/bkt/k", RequestBody::from(data.clone())).await;
    let r = send(&t, Method::GET, "/bkt/k", RequestBody::Empty).await.unwrap();
    assert_eq!(r.meta.protocol, expected_protocol(mode, true));
    assert!(r.body.collect(8 * MIB).await.unwrap() == data);
}

async fn case_untrusted_certificate_is_tls_error(mode: Mode) {
    let srv = FerryServe::new().anonymous().tls().start();
    let t = srv.transport(mode, |c| c.ca_file = None);
    let e = match send(&t, Method::GET, "/", RequestBody::Empty).await {
        Ok(r) => panic!("got {} without trusting the CA", r.status),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    assert!(!e.retry_safe(true));
}

macro_rules! suite {
    ($name:ident, $mode:expr) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn round_trip_sizes() {
                case_round_trip_sizes($mode, false).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn round_trip_sizes_tls() {
                case_round_trip_sizes($mode, true).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn head() {
                case_head($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn not_found_has_readable_xml() {
                case_not_found_has_readable_xml($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrency_respects_max_connections() {
                case_concurrency_respects_max_connections($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn dropped_body_does_not_break_the_next_request() {
                case_dropped_body_does_not_break_the_next_request($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn reset_mid_body_is_truncation() {
                case_reset_mid_body_is_truncation($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stalled_body_times_out() {
                case_stalled_body_times_out($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn upload_to_a_peer_that_stops_reading_times_out() {
                case_upload_to_a_peer_that_stops_reading_times_out($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn unreachable_port_is_connect_error() {
                case_unreachable_port_is_connect_error($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tls_with_self_signed_ca() {
                case_tls_with_self_signed_ca($mode).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn untrusted_certificate_is_tls_error() {
                case_untrusted_certificate_is_tls_error($mode).await;
            }
        }
    };
}

suite!(pool, Mode::H1Pool);
suite!(h2, Mode::H2);
suite!(auto, Mode::Auto);
suite!(pipeline, Mode::H1Pipeline);

// ---- transport-specific behaviour ------------------------------------------------

/// 300 slow requests against a server allowing 100 streams per connection: h2 must
/// spread them over at least three connections, never above 100 streams on any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_opens_connections_past_the_stream_limit() {
    let srv = FerryServe::new()
        .anonymous()
        .configure(|c| {
            c.limits.h2_max_streams = 100;
            c.emulation.ttfb_p50 = Duration::from_millis(400);
            c.emulation.ttfb_p99 = Duration::from_millis(400);
        })
        .start();
    stream_limit_case(&srv, 300, 100, 8).await;
}

/// The limit is the server's (read from its SETTINGS), not a default: 10 streams per
/// connection, 30 slow requests, at least three connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_follows_the_servers_max_concurrent_streams() {
    let srv = FerryServe::new()
        .anonymous()
        .configure(|c| {
            c.limits.h2_max_streams = 10;
            c.emulation.ttfb_p50 = Duration::from_millis(400);
            c.emulation.ttfb_p99 = Duration::from_millis(400);
        })
        .start();
    stream_limit_case(&srv, 30, 10, 8).await;
}

async fn stream_limit_case(srv: &Served, requests: usize, limit: usize, max_connections: usize) {
    let mut c = srv.transport_config();
    c.max_connections = max_connections;
    let h2 = std::sync::Arc::new(ferry_wire::h2::H2Transport::new(c).unwrap());
    let t: std::sync::Arc<dyn ferry_wire::Transport> = h2.clone();
    // Also warms one connection, so the server's SETTINGS are known before the burst.
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/k", RequestBody::from(pattern(100))).await;
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move { get_all(&t, "/bkt/k").await.1.len() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let in_flight = h2.streams_in_flight();
    assert!(in_flight.iter().all(|&n| n <= limit), "{in_flight:?}");
    for task in tasks {
        assert_eq!(task.await.unwrap(), 100);
    }
    let stats = t.stats();
    let needed = requests.div_ceil(limit) as u64;
    assert!(
        stats.connections_opened >= needed && stats.connections_opened <= max_connections as u64,
        "{requests} streams at {limit} per connection: {stats:?}, {in_flight:?}"
    );
}

/// No response head within `response_timeout`: a Timeout error, retry-safe for
/// idempotent requests only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_first_byte_times_out() {
    let srv = FerryServe::new()
        .anonymous()
        .configure(|c| {
            c.emulation.ttfb_p50 = Duration::from_secs(3);
            c.emulation.ttfb_p99 = Duration::from_secs(3);
        })
        .start();
    for mode in [Mode::H1Pool, Mode::H2] {
        let t = srv.transport(mode, |c| c.response_timeout = Duration::from_millis(300));
        let e = match send(&t, Method::GET, "/bkt/k", RequestBody::Empty).await {
            Ok(r) => panic!("{mode:?}: got {} before the first byte delay", r.status),
            Err(e) => e,
        };
        assert_eq!(e.kind(), ErrorKind::Timeout, "{mode:?}: {e}");
        assert!(e.retry_safe(true) && !e.retry_safe(false));
    }
}

/// A scripted HTTP/1.1 peer: answers the first request on each connection with
/// keep-alive, then closes the connection, unanswered, when a second request arrives.
/// That is the keep-alive race made deterministic.
async fn closes_on_second_request() -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut answered = 0;
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let body_len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map(|v| v.trim().parse().unwrap())
                            .unwrap_or(0);
                        if buf.len() < end + 4 + body_len {
                            break;
                        }
                        buf.drain(..end + 4 + body_len);
                        if answered == 1 {
                            return; // closes, unanswered
                        }
                        answered += 1;
                        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await.unwrap();
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// The pool re-sends an idempotent request once on a fresh connection when a reused
/// one closes unanswered, and never re-sends a POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_resends_idempotent_requests_after_the_keep_alive_race() {
    let (addr, accepted) = closes_on_second_request().await;
    let mut c = ferry_wire::TransportConfig::new(ferry_wire::Endpoint::parse(&format!("http://{addr}")).unwrap());
    c.mode = Mode::H1Pool;
    c.max_connections = 1;
    let t = ferry_wire::transport(c).unwrap();
    let ok = |r: ferry_wire::Response| async move {
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(&r.body.collect(10).await.unwrap()[..], b"ok");
    };
    ok(send(&t, Method::GET, "/a", RequestBody::Empty).await.unwrap()).await;
    // Reuses the connection, which closes: re-sent once on a fresh one.
    ok(send(&t, Method::GET, "/a", RequestBody::Empty).await.unwrap()).await;
    assert_eq!(t.stats().requests_resent, 1, "{:?}", t.stats());
    ok(send(&t, Method::PUT, "/a", RequestBody::from(bytes::Bytes::from_static(b"xyz"))).await.unwrap()).await;
    assert_eq!(t.stats().requests_resent, 2, "{:?}", t.stats());
    let e = match send(&t, Method::POST, "/a", RequestBody::from(bytes::Bytes::from_static(b"xyz"))).await {
        Ok(r) => panic!("a POST was re-sent: {}", r.status),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Reset, "{e}");
    assert!(!e.retry_safe(false), "the POST may have been acted on");
    assert_eq!(t.stats().requests_resent, 2);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 3);
}

/// Auto chooses by ALPN on https (h2 here) and HTTP/1.1 on plain http.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_picks_h2_over_tls_and_h1_over_http() {
    let tls = FerryServe::new().anonymous().tls().start();
    let auto = ferry_wire::auto::AutoTransport::new(tls.transport_config()).unwrap();
    assert_eq!(auto.chosen(), None, "https decides at the first request");
    let r = ferry_wire::Transport::send(&auto, ferry_wire::Request::new(Method::PUT, "/bkt")).await.unwrap();
    assert_eq!(r.meta.protocol, Protocol::Http2);
    assert_eq!(auto.chosen(), Some("h2"));
    drop(r);
    // The probe connection was adopted, not thrown away.
    assert_eq!(ferry_wire::Transport::stats(&auto).connections_opened, 1);

    let plain = FerryServe::new().anonymous().start();
    let auto = ferry_wire::auto::AutoTransport::new(plain.transport_config()).unwrap();
    assert_eq!(auto.chosen(), Some("h1"));
    let r = ferry_wire::Transport::send(&auto, ferry_wire::Request::new(Method::PUT, "/bkt")).await.unwrap();
    assert_eq!(r.meta.protocol, Protocol::Http1);
}

/// Auto over TLS to an endpoint without h2 (like S3) uses HTTP/1.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_uses_h1_when_alpn_says_http11() {
    let srv = FerryServe::new().anonymous().tls().configure(|c| c.emulation.h2 = false).start();
    let t = srv.transport(Mode::Auto, |_| {});
    create_bucket(&t, "bkt").await;
    let r = send(&t, Method::GET, "/bkt/missing", RequestBody::Empty).await.unwrap();
    assert_eq!(r.meta.protocol, Protocol::Http1);
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

/// Small ranged GETs go to the pipeline once a probe batch was answered correctly;
/// large ones stay on the pool. Every answer is right either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_pipelines_small_requests_after_the_probe() {
    let srv = FerryServe::new().anonymous().start();
    let mut c = srv.transport_config();
    c.max_connections = 4;
    let auto = std::sync::Arc::new(ferry_wire::auto::AutoTransport::new(c).unwrap());
    let t: std::sync::Arc<dyn ferry_wire::Transport> = auto.clone();
    create_bucket(&t, "bkt").await;
    let data = pattern(2 * MIB);
    put(&t, "/bkt/k", RequestBody::from(data.clone())).await;
    assert!(!auto.pipelining());
    let ranged = |a: usize, b: usize| {
        let mut r = ferry_wire::Request::new(Method::GET, "/bkt/k");
        r.set_range(a as u64, b as u64);
        r
    };
    for i in 0..20 {
        let (a, b) = (i * 1000, i * 1000 + 4095);
        let r = t.send(ranged(a, b)).await.unwrap();
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
        assert!(r.body.collect(MIB).await.unwrap() == data.slice(a..=b));
        if auto.pipelining() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(auto.pipelining(), "the probe batch should have verified pipelining against ferry serve");
    // Now concurrent small and large requests, all correct.
    let mut tasks = Vec::new();
    for i in 0..64usize {
        let t = t.clone();
        let data = data.clone();
        tasks.push(tokio::spawn(async move {
            let (a, b) = (i * 7919 % MIB, i * 7919 % MIB + 65535);
            let mut r = ferry_wire::Request::new(Method::GET, "/bkt/k");
            r.set_range(a as u64, b as u64);
            let r = t.send(r).await.unwrap();
            assert!(r.body.collect(MIB).await.unwrap() == data.slice(a..=b));
        }));
    }
    let (_, whole) = get_all(&t, "/bkt/k").await;
    assert!(whole == data);
    for task in tasks {
        task.await.unwrap();
    }
    // A plain GET goes down the pipeline only when the caller knows it is small.
    put(&t, "/bkt/small", RequestBody::from(pattern(16 * 1024))).await;
    let before = auto.pipelined_requests();
    for hint in [Some(16 * 1024), None, Some(16 * 1024)] {
        let mut r = ferry_wire::Request::new(Method::GET, "/bkt/small");
        r.response_len = hint;
        let r = t.send(r).await.unwrap();
        assert_eq!(r.body.collect(MIB).await.unwrap(), pattern(16 * 1024));
    }
    assert_eq!(auto.pipelined_requests() - before, 2, "the two size-hinted GETs, not the plain one");
}

/// A reused connection that the server closed while idle (its idle time-out) is not an
/// error for the caller: hyper's readiness check or the one re-send covers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_survives_server_closing_idle_connections() {
    let srv = FerryServe::new().anonymous().configure(|c| c.limits.idle_timeout = Duration::from_millis(200)).start();
    let t = srv.transport(Mode::H1Pool, |c| c.max_connections = 2);
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/k", RequestBody::from(pattern(10))).await;
    for _ in 0..3 {
        let (status, got) = get_all(&t, "/bkt/k").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(got.len(), 10);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let stats = t.stats();
    assert!(stats.connections_opened >= 2, "the server closed them: {stats:?}");
    assert!(stats.connections_opened <= 2 + stats.requests_sent, "{stats:?}");
}

/// The pool reuses one connection for sequential requests and closes it after the
/// client's idle time-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_reuses_then_closes_idle_connections() {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(Mode::H1Pool, |c| c.idle_timeout = Duration::from_millis(300));
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/k", RequestBody::from(pattern(10))).await;
    let mut reused = 0;
    for _ in 0..5 {
        let r = send(&t, Method::GET, "/bkt/k", RequestBody::Empty).await.unwrap();
        reused += r.meta.reused_connection as u32;
        r.body.collect(100).await.unwrap();
    }
    assert_eq!(reused, 5);
    assert_eq!(t.stats().connections_opened, 1);
    assert_eq!(t.stats().connections_open, 1);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(t.stats().connections_open, 0, "{:?}", t.stats());
}

/// With one connection allowed, concurrent requests wait their turn (FIFO) instead of
/// opening more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_of_one_serialises_requests() {
    let srv = FerryServe::new().anonymous().start();
    let t = srv.transport(Mode::H1Pool, |c| c.max_connections = 1);
    create_bucket(&t, "bkt").await;
    put(&t, "/bkt/k", RequestBody::from(pattern(100_000))).await;
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move { get_all(&t, "/bkt/k").await.1.len() })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), 100_000);
    }
    assert_eq!(t.stats().connections_opened, 1);
}

/// A request body stream that ends short of its announced length fails the request
/// instead of sending a wrong body; the transport stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_request_stream_fails_the_request() {
    for mode in [Mode::H1Pool, Mode::H2] {
        let srv = FerryServe::new().anonymous().start();
        let t = srv.transport(mode, |_| {});
        create_bucket(&t, "bkt").await;
        let body = RequestBody::Stream {
            len: 1000,
            stream: futures_util::StreamExt::boxed(futures_util::stream::iter(vec![Ok(bytes::Bytes::from(vec![
                1u8;
                10
            ]))])),
        };
        let r = send(&t, Method::PUT, "/bkt/short", body).await;
        match r {
            Err(_) => {}
            Ok(r) => assert!(!r.status.is_success(), "{mode:?}: a short body was stored"),
        }
        let (status, _) = get_all(&t, "/bkt/short").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{mode:?}");
    }
}

/// An endpoint that refused every connection for a whole connect time-out counts as
/// unreachable: the next attempt fails at once, naming the cause, and one probe per
/// connect time-out still tries, so a server that comes back is reached again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_every_connect_is_unreachable_until_a_probe_gets_through() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut config =
        ferry_wire::TransportConfig::new(ferry_wire::Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap());
    let limit = Duration::from_millis(300);
    config.connect_timeout = limit;
    let connector = ferry_wire::conn::Connector::new(&config, &[]).unwrap();
    // Refused at once, again and again, for longer than the connect time-out.
    let started = std::time::Instant::now();
    while started.elapsed() < limit + Duration::from_millis(50) {
        let e = connector.connect().await.err().expect("nothing listens");
        assert_eq!(e.kind(), ErrorKind::Connect, "{e}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The probe went out (and failed) in the loop's last turn or goes out now; either
    // way an attempt right after it is refused without trying.
    let _ = connector.connect().await;
    let e = connector.connect().await.err().expect("unreachable");
    assert_eq!(e.kind(), ErrorKind::Connect, "{e}");
    assert!(e.to_string().contains("unreachable"), "{e}");
    assert!(e.retry_safe(false), "{e}");
    // The server comes back: within a probe interval a connection gets through.
    let back = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    tokio::time::sleep(limit + Duration::from_millis(50)).await;
    connector.connect().await.expect("the probe reaches the server that came back");
    // And the state is cleared: the next attempt tries too.
    connector.connect().await.expect("reachable again");
    drop(back);
}
