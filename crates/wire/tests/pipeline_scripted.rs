//! The pipelining transport against scripted peers on raw TCP: each test's server reads
//! requests and writes exactly the bytes the test scripts, so every edge case of
//! HTTP/1.1 pipelining (RFC 9112 section 9.3.2) is reproduced byte for byte.

use bytes::Bytes;
use ferry_wire::pipeline::PipelineTransport;
use ferry_wire::{Endpoint, ErrorKind, Request, RequestBody, Transport, TransportConfig, WireError};
use http::Method;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the peer does for one request.
#[derive(Clone)]
enum Action {
    Write(Vec<u8>),
    /// One byte per write, flushed, with a pause: every byte boundary is a read boundary.
    Slow(Vec<u8>),
    /// Two writes split at this offset, with a pause between.
    SplitAt(Vec<u8>, usize),
    WriteClose(Vec<u8>),
    Close,
    /// Never answer, keep the connection open.
    Hang,
    /// Write nothing for this request (an earlier action wrote its response).
    Nothing,
    /// Write these bytes once a permit of the semaphore is given (by another connection's
    /// policy): an answer held until something else has happened.
    Gated(Arc<tokio::sync::Semaphore>, Vec<u8>),
}

/// How a peer that does not pipeline treats a *stacked* request: one that arrived while
/// a response before it on the connection was still owed.
#[derive(Clone, Copy, PartialEq)]
enum Stacked {
    /// Answered in order, as HTTP/1.1 asks.
    Answer,
    /// 400 Bad Request and the connection closed: the request's bytes taken for junk
    /// after the first.
    BadRequest,
    /// Never answered, the connection kept open: a server that reads one request per read
    /// and drops the rest of what it read.
    Dropped,
}

/// A request as the peer saw it.
#[derive(Clone, Debug)]
struct Seen {
    conn: usize,
    method: String,
    path: String,
    /// Requests already received behind this one when its response was written.
    behind: usize,
    /// It arrived while a request before it on the connection was unanswered.
    stacked: bool,
}

struct Peer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    conns: Arc<AtomicUsize>,
}

impl Peer {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

type Policy = dyn Fn(usize, usize, &str, &str) -> Action + Send + Sync;

/// Starts a peer. `policy(conn, index_on_conn, method, path)` scripts each answer.
/// Connection 0 waits until `gather` requests arrived before answering the first; before
/// each answer the peer waits `settle` and reads whatever else arrived, so that `behind`
/// shows what the client had written ahead.
async fn peer(
    gather: usize,
    settle: Duration,
    policy: impl Fn(usize, usize, &str, &str) -> Action + Send + Sync + 'static,
) -> Peer {
    peer_with(gather, false, settle, Stacked::Answer, policy).await
}

/// A peer that answers every request alone with its echo, and treats stacked ones as
/// `stacked` says (each answer 10 ms after its request, so that what the client stacks
/// arrives before it).
async fn peer_not_pipelining(stacked: Stacked) -> Peer {
    peer_with(1, false, Duration::from_millis(10), stacked, |_, _, _, path| echo(path)).await
}

/// Like [`peer`], but every connection gathers `gather` requests before its first answer.
async fn peer_gathering_on_every_connection(
    gather: usize,
    policy: impl Fn(usize, usize, &str, &str) -> Action + Send + Sync + 'static,
) -> Peer {
    peer_with(gather, true, Duration::ZERO, Stacked::Answer, policy).await
}

async fn peer_with(
    gather: usize,
    every: bool,
    settle: Duration,
    stacked: Stacked,
    policy: impl Fn(usize, usize, &str, &str) -> Action + Send + Sync + 'static,
) -> Peer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let conns = Arc::new(AtomicUsize::new(0));
    let policy: Arc<Policy> = Arc::new(policy);
    let (s, c) = (seen.clone(), conns.clone());
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            let conn = c.fetch_add(1, SeqCst);
            let gather = if every || conn == 0 { gather } else { 0 };
            tokio::spawn(serve_conn(sock, conn, gather, settle, stacked, policy.clone(), s.clone()));
        }
    });
    Peer { addr, seen, conns }
}

/// Moves every complete request at the start of `buf` to `queue` (bodies skipped), each
/// with whether it is stacked (a request before it was still unanswered when it came).
fn parse_requests(buf: &mut Vec<u8>, queue: &mut VecDeque<(String, String, bool)>) {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(n)) = req.parse(buf) else { return };
        let len: usize = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .map(|h| std::str::from_utf8(h.value).unwrap().trim().parse().unwrap())
            .unwrap_or(0);
        if buf.len() < n + len {
            return;
        }
        let stacked = !queue.is_empty();
        queue.push_back((req.method.unwrap().to_string(), req.path.unwrap().to_string(), stacked));
        buf.drain(..n + len);
    }
}

async fn serve_conn(
    mut sock: TcpStream,
    conn: usize,
    gather: usize,
    settle: Duration,
    stacked_mode: Stacked,
    policy: Arc<Policy>,
    seen: Arc<Mutex<Vec<Seen>>>,
) {
    let _ = sock.set_nodelay(true);
    let mut buf = Vec::new();
    let mut queue = VecDeque::new();
    let mut answered = 0;
    loop {
        parse_requests(&mut buf, &mut queue);
        let wait_more = queue.is_empty() || (answered == 0 && queue.len() < gather);
        if wait_more {
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
        if !settle.is_zero() {
            tokio::time::sleep(settle).await;
            while let Ok(n) = sock.try_read_buf(&mut buf) {
                if n == 0 {
                    break;
                }
            }
            parse_requests(&mut buf, &mut queue);
        }
        let (method, path, stacked) = queue.pop_front().unwrap();
        seen.lock().unwrap().push(Seen {
            conn,
            method: method.clone(),
            path: path.clone(),
            behind: queue.len(),
            stacked,
        });
        let action = match stacked_mode {
            Stacked::BadRequest if stacked => Action::WriteClose(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request".to_vec(),
            ),
            Stacked::Dropped if stacked => {
                queue.clear();
                buf.clear();
                Action::Nothing
            }
            _ => policy(conn, answered, &method, &path),
        };
        answered += 1;
        let ok = match action {
            Action::Write(b) => sock.write_all(&b).await.is_ok(),
            Action::Slow(b) => {
                for byte in b {
                    if sock.write_all(&[byte]).await.is_err() || sock.flush().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_micros(300)).await;
                }
                true
            }
            Action::SplitAt(b, at) => {
                let ok = sock.write_all(&b[..at]).await.is_ok() && sock.flush().await.is_ok();
                tokio::time::sleep(Duration::from_millis(3)).await;
                ok && sock.write_all(&b[at..]).await.is_ok()
            }
            Action::WriteClose(b) => {
                let _ = sock.write_all(&b).await;
                let _ = sock.flush().await;
                return;
            }
            Action::Close => return,
            Action::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Action::Nothing => true,
            Action::Gated(gate, b) => {
                gate.acquire().await.unwrap().forget();
                sock.write_all(&b).await.is_ok()
            }
        };
        if !ok {
            return;
        }
    }
}

/// A 200 with `body` framed by Content-Length.
fn ok(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// The body each request expects in most tests: its own path.
fn echo(path: &str) -> Action {
    Action::Write(ok(&format!("body of {path}")))
}

fn transport(peer: &Peer, conns: usize, depth: usize) -> Arc<PipelineTransport> {
    Arc::new(PipelineTransport::new(config(peer, conns, depth)).unwrap())
}

fn config(peer: &Peer, conns: usize, depth: usize) -> TransportConfig {
    let mut c = TransportConfig::new(Endpoint::parse(&format!("http://{}", peer.addr)).unwrap());
    c.max_connections = conns;
    c.pipeline_depth = depth;
    c.response_timeout = Duration::from_secs(5);
    c
}

struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

/// Sends one request and reads its body to the end.
async fn fetch(t: &PipelineTransport, method: Method, path: &str) -> Result<Got, WireError> {
    let r = t.send(Request::new(method, path)).await?;
    let status = r.status.as_u16();
    let headers = r.headers;
    let body = r.body.collect(64 << 20).await?;
    Ok(Got { status, headers, body })
}

/// Sends all at once (queued in this order) and reads every body.
async fn fetch_all(t: &PipelineTransport, reqs: &[(Method, &str)]) -> Vec<Result<Got, WireError>> {
    futures_util::future::join_all(reqs.iter().map(|(m, p)| fetch(t, m.clone(), p))).await
}

fn gets(paths: &[&'static str]) -> Vec<(Method, &'static str)> {
    paths.iter().map(|p| (Method::GET, *p)).collect()
}

fn assert_echoed(results: &[Result<Got, WireError>], paths: &[&str]) {
    for (r, p) in results.iter().zip(paths) {
        let g = r.as_ref().unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(g.status, 200, "{p}");
        assert_eq!(g.body, format!("body of {p}").as_bytes(), "{p} got another request's body");
    }
}

fn timed<F: std::future::Future>(f: F) -> tokio::time::Timeout<F> {
    tokio::time::timeout(Duration::from_secs(30), f)
}

const EIGHT: [&str; 8] = ["/k0", "/k1", "/k2", "/k3", "/k4", "/k5", "/k6", "/k7"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_pipelined_k_arrive_before_the_first_response() {
    let p = peer(8, Duration::ZERO, |_, _, _, path| echo(path)).await;
    let t = transport(&p, 1, 8);
    assert!(!t.verified());
    let res = timed(fetch_all(&t, &gets(&EIGHT))).await.unwrap();
    assert_echoed(&res, &EIGHT);
    let seen = p.seen();
    assert_eq!(seen[0].behind, 7, "all 8 requests were on the wire before the first response: {seen:?}");
    assert_eq!(t.stats().connections_opened, 1);
    assert_eq!(t.stats().requests_sent, 8);
    assert_eq!(t.stats().requests_resent, 0);
    assert!(t.verified(), "a batch of 8 answered in order verifies the endpoint");
    assert_eq!(t.name(), "h1-pipeline");
}

/// A batch is what is in flight together, not what one write carried: requests sent
/// 20 ms apart (one write each) while the peer holds every answer still verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_written_one_by_one_while_answers_are_owed_verify() {
    let p = peer(8, Duration::ZERO, |_, _, _, path| echo(path)).await;
    let t = transport(&p, 1, 8);
    let mut tasks = Vec::new();
    for path in EIGHT {
        let t = t.clone();
        tasks.push(tokio::spawn(async move { fetch(&t, Method::GET, path).await }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let res: Vec<_> =
        timed(futures_util::future::join_all(tasks)).await.unwrap().into_iter().map(|r| r.unwrap()).collect();
    assert_echoed(&res, &EIGHT);
    assert_eq!(p.seen()[0].behind, 7);
    assert_eq!(t.stats().connections_opened, 1);
    assert!(t.verified(), "8 requests in flight together, written one by one, verify the endpoint");
}

/// A peer that gathers eight requests, answers the first `n` at once and holds the rest
/// until the semaphore gives a permit for each.
async fn answering_the_first(n: usize) -> (Peer, Arc<tokio::sync::Semaphore>) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let p = peer(8, Duration::ZERO, move |_, i, _, path| {
        if i < n {
            echo(path)
        } else {
            Action::Gated(g.clone(), ok(&format!("body of {path}")))
        }
    })
    .await;
    (p, gate)
}

/// A connection kept full never ends its batch (new requests join before the last is
/// answered): two answers read in order, the second written before the first was read,
/// verify the endpoint while the rest are still owed (a verdict that waited for the
/// batch's last answer never came under a steady load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_answers_verify_while_the_rest_of_the_batch_is_still_owed() {
    let (p, gate) = answering_the_first(2).await;
    let t = transport(&p, 1, 8);
    let t2 = t.clone();
    let all = tokio::spawn(async move { fetch_all(&t2, &gets(&EIGHT)).await });
    timed(async {
        while !t.verified() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("two answers in order, six still owed: not verified within 30 s");
    assert!(!all.is_finished(), "the six held answers were not owed any more");
    gate.add_permits(6);
    let res = timed(all).await.unwrap().unwrap();
    assert_echoed(&res, &EIGHT);
    assert_eq!(p.seen()[0].behind, 7);
}

/// One answer of a batch proves nothing yet: the first of eight answered, seven held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_answer_of_a_batch_does_not_verify() {
    let (p, gate) = answering_the_first(1).await;
    let t = transport(&p, 1, 8);
    let mut tasks = Vec::new();
    for path in EIGHT {
        let t = t.clone();
        tasks.push(tokio::spawn(async move { fetch(&t, Method::GET, path).await }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    timed(async {
        while !tasks[0].is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the first answer came");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!t.verified(), "one answer, seven owed, verified the endpoint");
    gate.add_permits(7);
    let res: Vec<_> =
        timed(futures_util::future::join_all(tasks)).await.unwrap().into_iter().map(|r| r.unwrap()).collect();
    assert_echoed(&res, &EIGHT);
    assert!(t.verified());
}

/// Requests that never overlap prove nothing about pipelining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_answered_before_the_next_is_sent_do_not_verify() {
    let p = peer(1, Duration::ZERO, |_, _, _, path| echo(path)).await;
    let t = transport(&p, 1, 8);
    for path in EIGHT {
        let got = timed(fetch(&t, Method::GET, path)).await.unwrap();
        assert_echoed(&[got], &[path]);
    }
    assert_eq!(t.stats().connections_opened, 1);
    assert!(p.seen().iter().all(|s| s.behind == 0));
    assert!(!t.verified(), "no two requests were ever in flight together");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_closes_after_response_k_of_n_and_the_rest_are_resent() {
    let p =
        peer(6, Duration::ZERO, |conn, i, _, path| if conn == 0 && i == 2 { Action::Close } else { echo(path) }).await;
    let t = transport(&p, 1, 8);
    let paths = &EIGHT[..6];
    let res = timed(fetch_all(&t, &gets(paths))).await.unwrap();
    assert_echoed(&res, paths);
    let st = t.stats();
    assert_eq!(st.requests_resent, 4, "{st:?}");
    assert_eq!(st.connections_opened, 2, "{st:?}");
    assert_eq!(p.conns.load(SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_on_response_k_resends_the_rest_quietly() {
    let p = peer(5, Duration::ZERO, |conn, i, _, path| {
        if conn == 0 && i == 1 {
            let body = format!("body of {path}");
            Action::WriteClose(
                format!("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}", body.len())
                    .into_bytes(),
            )
        } else {
            echo(path)
        }
    })
    .await;
    let t = transport(&p, 1, 8);
    let paths = &EIGHT[..5];
    let res = timed(fetch_all(&t, &gets(paths))).await.unwrap();
    assert_echoed(&res, paths);
    let st = t.stats();
    assert_eq!(st.requests_resent, 3, "{st:?}");
    assert_eq!(st.connections_opened, 2, "{st:?}");
}

/// A script mixing every framing: Content-Length, chunked with extensions and trailers,
/// HEAD with a Content-Length, 100 Continue before a 200, 204, 304.
fn mixed_script() -> (Vec<(Method, &'static str)>, Vec<Vec<u8>>) {
    let reqs = vec![
        (Method::GET, "/len"),
        (Method::GET, "/chunked"),
        (Method::HEAD, "/head"),
        (Method::GET, "/continue"),
        (Method::GET, "/nocontent"),
        (Method::GET, "/notmodified"),
    ];
    let resps = vec![
        ok("body of /len"),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;name=value\r\nbody\r\nb;a;b=\"q\"\r\n of /chunke\r\n1\r\nd\r\n0;last\r\nx-checksum: abc\r\nx-other: 1\r\n\r\n".to_vec(),
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nETag: \"e\"\r\n\r\n".to_vec(),
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\nbody of /continue".to_vec(),
        b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n".to_vec(),
    ];
    (reqs, resps)
}

fn check_mixed(res: &[Result<Got, WireError>], what: &str) {
    let bodies: Vec<(u16, &[u8])> = res
        .iter()
        .map(|r| r.as_ref().map(|g| (g.status, &g.body[..])).unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect();
    assert_eq!(bodies[0], (200, &b"body of /len"[..]), "{what}");
    assert_eq!(bodies[1], (200, &b"body of /chunked"[..]), "{what}");
    assert_eq!(bodies[2], (200, &b""[..]), "{what}");
    assert_eq!(res[2].as_ref().unwrap().headers["content-length"], "1000", "{what}");
    assert_eq!(bodies[3], (200, &b"body of /continue"[..]), "{what}");
    assert_eq!(bodies[4], (204, &b""[..]), "{what}");
    assert_eq!(bodies[5], (304, &b""[..]), "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_delivered_one_byte_at_a_time_parses() {
    let (reqs, resps) = mixed_script();
    let all: Vec<u8> = resps.concat();
    let p = peer(
        reqs.len(),
        Duration::ZERO,
        move |_, i, _, _| if i == 0 { Action::Slow(all.clone()) } else { Action::Nothing },
    )
    .await;
    let t = transport(&p, 1, 8);
    let res = timed(fetch_all(&t, &reqs)).await.unwrap();
    check_mixed(&res, "one byte at a time");
    assert_eq!(t.stats().connections_opened, 1);
    assert!(t.verified());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_split_at_every_byte_boundary_parses() {
    let (reqs, resps) = mixed_script();
    let all: Vec<u8> = resps.concat();
    let len = all.len();
    // Connection c splits the whole script at byte c.
    let n = reqs.len();
    let p = peer_gathering_on_every_connection(n, move |conn, i, _, _| {
        if i == 0 {
            Action::SplitAt(all.clone(), conn.min(all.len()))
        } else {
            Action::Nothing
        }
    })
    .await;
    for split in 0..=len {
        let t = transport(&p, 1, 8);
        let res = timed(fetch_all(&t, &reqs)).await.unwrap();
        check_mixed(&res, &format!("split at {split}"));
    }
    assert_eq!(p.conns.load(SeqCst), len + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_with_extensions_and_trailers() {
    let p = peer(0, Duration::ZERO, |_, _, _, path| {
        let (a, b) = path.split_at(2);
        Action::Write(
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x};ext=1;quoted=\"a b\"\r\nbody of {a}\r\n{:x}\r\n{b}\r\n0\r\nx-amz-checksum-crc32: AAAAAA==\r\nx-t: 2\r\n\r\n",
                8 + a.len(),
                b.len()
            )
            .into_bytes(),
        )
    })
    .await;
    let t = transport(&p, 1, 8);
    let r = timed(t.send(Request::new(Method::GET, "/first"))).await.unwrap().unwrap();
    assert_eq!(r.body.content_length(), None, "a chunked body has no announced length");
    assert_eq!(r.body.collect(1 << 20).await.unwrap(), &b"body of /first"[..]);
    let paths = ["/k0", "/k1", "/k2"];
    let res = timed(fetch_all(&t, &gets(&paths))).await.unwrap();
    assert_echoed(&res, &paths);
    assert_eq!(t.stats().connections_opened, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_100_continue_is_skipped_before_the_200() {
    let p = peer(3, Duration::ZERO, |_, _, _, path| {
        let mut b = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
        b.extend(ok(&format!("body of {path}")));
        Action::Write(b)
    })
    .await;
    let t = transport(&p, 1, 8);
    let paths = ["/a", "/b", "/c"];
    let res = timed(fetch_all(&t, &gets(&paths))).await.unwrap();
    assert_echoed(&res, &paths);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_body_then_close_truncates_that_caller_and_resends_the_rest() {
    let p = peer(4, Duration::ZERO, |conn, i, _, path| {
        if conn == 0 && i == 1 {
            Action::WriteClose(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b".to_vec())
        } else {
            echo(path)
        }
    })
    .await;
    let t = transport(&p, 1, 8);
    let paths = ["/a", "/b", "/c", "/d"];
    let res = timed(fetch_all(&t, &gets(&paths))).await.unwrap();
    assert_echoed(&res[..1], &paths[..1]);
    let err = res[1].as_ref().err().expect("a short body is an error, never a short success");
    assert_eq!(err.kind(), ErrorKind::BodyTruncated, "{err}");
    assert!(err.retry_safe(true));
    assert_echoed(&res[2..], &paths[2..]);
    assert_eq!(t.stats().requests_resent, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_times_out() {
    let p = peer(0, Duration::ZERO, |_, _, _, _| Action::Hang).await;
    let mut c = config(&p, 1, 8);
    c.response_timeout = Duration::from_millis(300);
    let t = PipelineTransport::new(c).unwrap();
    let t0 = Instant::now();
    let err = timed(t.send(Request::new(Method::GET, "/never"))).await.unwrap().err().expect("a time-out");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.retry_safe(true) && !err.retry_safe(false));
    assert!(t0.elapsed() >= Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_responses_with_content_length_have_no_body() {
    let p = peer(3, Duration::ZERO, |_, _, method, path| {
        if method == "HEAD" {
            Action::Write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n".to_vec())
        } else {
            echo(path)
        }
    })
    .await;
    let t = transport(&p, 1, 8);
    let res = timed(fetch_all(&t, &[(Method::HEAD, "/h1"), (Method::GET, "/g"), (Method::HEAD, "/h2")])).await.unwrap();
    for i in [0, 2] {
        let g = res[i].as_ref().unwrap();
        assert_eq!((g.status, g.body.len()), (200, 0));
        assert_eq!(g.headers["content-length"], "5000");
    }
    assert_echoed(&res[1..2], &["/g"]);
    assert_eq!(t.stats().connections_opened, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_response_without_length_is_read_to_close() {
    let p = peer(3, Duration::ZERO, |conn, i, _, path| {
        if conn == 0 && i == 0 {
            Action::WriteClose(format!("HTTP/1.0 200 OK\r\nServer: old\r\n\r\nbody of {path}").into_bytes())
        } else {
            echo(path)
        }
    })
    .await;
    let t = transport(&p, 1, 8);
    let paths = ["/a", "/b", "/c"];
    let res = timed(fetch_all(&t, &gets(&paths))).await.unwrap();
    assert_echoed(&res, &paths);
    assert_eq!(t.stats().requests_resent, 2);
    assert_eq!(t.stats().connections_opened, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_failing_on_every_connection_gives_up_with_reset() {
    let p = peer(0, Duration::ZERO, |_, _, _, _| Action::Close).await;
    let t = transport(&p, 2, 8);
    let err = timed(t.send(Request::new(Method::GET, "/doomed"))).await.unwrap().err().expect("gives up");
    assert_eq!(err.kind(), ErrorKind::Reset, "{err}");
    assert_eq!(p.conns.load(SeqCst), ferry_wire::pipeline::MAX_ATTEMPTS as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_small_body_is_discarded_and_the_connection_kept() {
    let big = "x".repeat(200_000);
    let p =
        peer(2, Duration::ZERO, move |_, _, _, path| if path == "/big" { Action::Write(ok(&big)) } else { echo(path) })
            .await;
    let t = transport(&p, 1, 8);
    let second = drop_first_body_then_fetch_second(&t).await;
    assert_echoed(&[second], &["/small"]);
    let st = t.stats();
    assert_eq!((st.connections_opened, st.requests_resent), (1, 0), "{st:?}");
}

/// GET /big and GET /small pipelined; /big's body is dropped after one chunk.
async fn drop_first_body_then_fetch_second(t: &Arc<PipelineTransport>) -> Result<Got, WireError> {
    let t1 = t.clone();
    let first = tokio::spawn(async move { t1.send(Request::new(Method::GET, "/big")).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t2 = t.clone();
    let second = tokio::spawn(async move { fetch(&t2, Method::GET, "/small").await });
    timed(async move {
        let mut r = first.await.unwrap().unwrap();
        assert!(r.body.chunk().await.unwrap().is_ok());
        drop(r);
        second.await.unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_large_body_closes_and_resends_the_requests_behind() {
    let big = "x".repeat(4 << 20);
    let p =
        peer(2, Duration::ZERO, move |_, _, _, path| if path == "/big" { Action::Write(ok(&big)) } else { echo(path) })
            .await;
    let t = transport(&p, 1, 8);
    let second = drop_first_body_then_fetch_second(&t).await;
    assert_echoed(&[second], &["/small"]);
    let st = t.stats();
    assert_eq!((st.connections_opened, st.requests_resent), (2, 1), "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_body_travels_alone() {
    // The peer pauses before each answer and reads what else arrived: nothing may be
    // written behind the PUT, and the PUT is not written behind anything.
    let p = peer(0, Duration::from_millis(30), |_, _, _, path| echo(path)).await;
    let t = transport(&p, 1, 8);
    let mut put = Request::new(Method::PUT, "/p");
    put.body = RequestBody::Full(Bytes::from_static(b"xyz"));
    let put_t = t.clone();
    let res = timed(async {
        let a = fetch(&t, Method::GET, "/a");
        let b = async move {
            let r = put_t.send(put).await?;
            let status = r.status.as_u16();
            Ok::<_, WireError>(Got { status, headers: r.headers, body: r.body.collect(1 << 20).await? })
        };
        let c = fetch(&t, Method::GET, "/b");
        let d = fetch(&t, Method::GET, "/c");
        futures_util::future::join4(a, b, c, d).await
    })
    .await
    .unwrap();
    assert_echoed(&[res.0, res.1, res.2, res.3], &["/a", "/p", "/b", "/c"]);
    let seen = p.seen();
    let order: Vec<(&str, &str, usize)> = seen.iter().map(|s| (s.method.as_str(), s.path.as_str(), s.behind)).collect();
    assert_eq!(
        order,
        vec![("GET", "/a", 0), ("PUT", "/p", 0), ("GET", "/b", 1), ("GET", "/c", 0)],
        "the PUT went alone; the GETs after it were pipelined"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_request_is_never_sent_twice() {
    let p =
        peer(0, Duration::ZERO, |_, _, method, path| if method == "POST" { Action::Close } else { echo(path) }).await;
    let t = transport(&p, 2, 8);
    let mut post = Request::new(Method::POST, "/p?uploads");
    post.body = RequestBody::Full(Bytes::from_static(b"<x/>"));
    let err = timed(t.send(post)).await.unwrap().err().expect("fails");
    assert_eq!(err.kind(), ErrorKind::Reset, "{err}");
    assert!(!err.retry_safe(false), "a POST that may have taken effect is not retry-safe");
    let posts = p.seen().iter().filter(|s| s.method == "POST").count();
    assert_eq!(posts, 1, "sent exactly once");
    assert_echoed(&[fetch(&t, Method::GET, "/after").await], &["/after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_spread_over_connections_fewest_in_flight_first() {
    let p = peer(0, Duration::from_millis(20), |_, _, _, path| echo(path)).await;
    let t = transport(&p, 4, 8);
    let paths: Vec<String> = (0..32).map(|i| format!("/s{i}")).collect();
    let refs: Vec<&str> = paths.iter().map(|s| s.as_str()).collect();
    let reqs: Vec<(Method, &str)> = refs.iter().map(|p| (Method::GET, *p)).collect();
    let res = timed(fetch_all(&t, &reqs)).await.unwrap();
    assert_echoed(&res, &refs);
    assert_eq!(t.stats().connections_opened, 4);
    let mut per_conn = [0usize; 4];
    for s in p.seen() {
        per_conn[s.conn] += 1;
    }
    assert_eq!(per_conn, [8, 8, 8, 8], "32 requests over 4 connections 8 deep");
}

/// auto against a peer that closes every connection after its first answer: the probe's
/// copy goes unanswered, so auto keeps small requests on its pool. Those requests must
/// count as the pool's demand: counted as the small lane's, the pool's share of the cap
/// stayed 0 with no bulk request active, and a small request on the pool waited for ever
/// (seen as "1 GETs unfinished" in `ferry bench small-objects`' auto row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_carries_small_requests_on_its_pool_when_pipelining_fails() {
    let p = peer(1, Duration::ZERO, |_, _, _, path| {
        let body = format!("body of {path}");
        Action::WriteClose(
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
                .into_bytes(),
        )
    })
    .await;
    let mut c = config(&p, 4, 4);
    c.mode = ferry_wire::Mode::Auto;
    let auto = Arc::new(ferry_wire::auto::AutoTransport::new(c).unwrap());
    let gets = (0..24).map(|i| small_get(auto.clone(), i));
    tokio::time::timeout(Duration::from_secs(30), futures_util::future::join_all(gets))
        .await
        .expect("small GETs on auto's pool never finished");
    assert!(!auto.pipelining(), "a peer that closes after one answer cannot verify pipelining");
}

/// A 16-byte GET of `/b/k{i}` through `auto`, its body checked against the echo peers'
/// answer.
async fn small_get(auto: Arc<ferry_wire::auto::AutoTransport>, i: usize) {
    let mut r = Request::new(Method::GET, format!("/b/k{i}"));
    r.response_len = Some(16);
    let resp = auto.send(r).await.unwrap_or_else(|e| panic!("GET k{i}: {e}"));
    let body = resp.body.collect(1 << 20).await.unwrap();
    assert_eq!(body, Bytes::from(format!("body of /b/k{i}")));
}

/// auto's pipelining probe never holds other small requests back: the peer answers the
/// probe (the first request on the first connection) only after it has received a
/// request on another connection. Small requests that waited for the probe's verdict
/// would never send one, and nothing would finish; sent on the pipeline one per
/// connection while the probe is out, they are answered, the probe with them, and
/// pipelining is verified after all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_sends_small_requests_while_its_probe_is_out() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let p = peer(1, Duration::ZERO, move |conn, i, _, path| {
        if conn == 0 && i == 0 {
            Action::Gated(g.clone(), ok(&format!("body of {path}")))
        } else {
            if conn > 0 {
                g.add_permits(1);
            }
            echo(path)
        }
    })
    .await;
    let mut c = config(&p, 8, 8);
    c.mode = ferry_wire::Mode::Auto;
    let auto = Arc::new(ferry_wire::auto::AutoTransport::new(c).unwrap());
    let get = |i: usize| small_get(auto.clone(), i);
    // The first small request starts the probe; the others follow while it is out.
    let first = tokio::spawn(get(0));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rest = futures_util::future::join_all((1..16).map(get));
    tokio::time::timeout(Duration::from_secs(10), rest).await.expect("small GETs waited behind the probe");
    tokio::time::timeout(Duration::from_secs(10), first).await.expect("the probe was never answered").unwrap();
    assert!(p.conns.load(SeqCst) > 1, "every request went on the probe's connection");
    let probe_conn = p.seen().iter().filter(|s| s.conn == 0).count();
    assert!(probe_conn >= 2, "the probe's pair did not reach its connection: {:?}", p.seen());
    assert!(auto.pipelining(), "the probe's pair was answered well, yet pipelining is not verified");
}

/// auto stacks small requests on its pipeline before the probe's verdict, as a forced
/// pipeline does from the start: waiting for the verdict (one first-byte time, the
/// slower of the pair's) cost a burst of small GETs about a tenth of its rate
/// (docs/lab/bench-common-draws.md). The peer holds the probe's copy for half a second,
/// so no verdict comes while two connections carry 16 GETs: more requests arrive stacked
/// than the copy alone, every body is its own request's, and pipelining ends verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_stacks_small_requests_before_the_probes_verdict() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let p = peer(1, Duration::from_millis(20), move |conn, i, _, path| {
        if conn == 0 && i == 1 {
            Action::Gated(g.clone(), ok(&format!("body of {path}")))
        } else {
            echo(path)
        }
    })
    .await;
    let mut c = config(&p, 2, 8);
    c.mode = ferry_wire::Mode::Auto;
    let auto = Arc::new(ferry_wire::auto::AutoTransport::new(c).unwrap());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        gate.add_permits(1);
    });
    let gets = (0..16).map(|i| small_get(auto.clone(), i));
    timed(futures_util::future::join_all(gets)).await.expect("small GETs never finished");
    let stacked = p.seen().iter().filter(|s| s.stacked).count();
    assert!(stacked > 1, "only the probe's copy arrived stacked: {:?}", p.seen());
    assert!(auto.pipelining(), "every batch was answered well, yet pipelining is not verified");
    assert_eq!(auto.stats().requests_resent, 0, "nothing failed, nothing to write again");
}

/// Stacking before the verdict risks no caller's answer on a peer that does not
/// pipeline: a stacked request that such a peer refuses (400 and close) or drops (never
/// answered) is written again, one request per connection from then on, and its caller
/// gets its own 200. Pipelining is never verified there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_writes_a_stacked_request_again_when_the_peer_does_not_pipeline() {
    for (mode, response_timeout) in
        [(Stacked::BadRequest, Duration::from_secs(5)), (Stacked::Dropped, Duration::from_millis(300))]
    {
        let what = if mode == Stacked::BadRequest { "refused" } else { "dropped" };
        let p = peer_not_pipelining(mode).await;
        let mut c = config(&p, 4, 8);
        c.mode = ferry_wire::Mode::Auto;
        c.response_timeout = response_timeout;
        let auto = Arc::new(ferry_wire::auto::AutoTransport::new(c).unwrap());
        let gets = (0..32).map(|i| small_get(auto.clone(), i));
        timed(futures_util::future::join_all(gets)).await.unwrap_or_else(|_| panic!("{what}: GETs never finished"));
        let stacked = p.seen().iter().filter(|s| s.stacked).count();
        assert!(stacked > 1, "{what}: nothing but the probe's copy was stacked: {:?}", p.seen());
        assert!(!auto.pipelining(), "{what}: a peer that does not pipeline was verified");
        assert!(auto.stats().requests_resent >= 1, "{what}: no stacked request was written again");
    }
}
