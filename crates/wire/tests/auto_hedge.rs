//! auto's hedged small GETs (auto/hedge.rs) against a scripted HTTP/1.1
//! peer on raw TCP: it answers pipelined requests in order, and holds the head of the
//! first arrival of chosen paths for a set time (a slow first byte), answers others at
//! once. What is checked is behaviour: which answer the caller got and whether it is
//! right, how many copies went out and on which connections, that no connection is
//! closed or left over the cap for a loser, and when no copy may go. No test asserts a
//! speed; the slow heads are long enough that a hedge at the 10 ms floor always answers
//! first, and every wait has a time-out only a hang reaches.

use ferry_wire::auto::{AutoTransport, HEDGE_BUDGET};
use ferry_wire::{Endpoint, Mode, Request, RequestBody, Response, Transport, TransportConfig};
use http::{Method, StatusCode};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the peer saw it: its connection and path.
#[derive(Clone, Debug)]
struct Seen {
    conn: usize,
    method: String,
    path: String,
}

struct Peer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections the client closed (EOF seen by the peer).
    closed: Arc<AtomicUsize>,
    /// Responses written, per path.
    answered: Arc<Mutex<HashMap<String, usize>>>,
}

impl Peer {
    fn seen(&self, path: &str) -> Vec<Seen> {
        self.seen.lock().unwrap().iter().filter(|s| s.path == path).cloned().collect()
    }

    fn answered(&self, path: &str) -> usize {
        self.answered.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

/// The body the peer sends for `path`: 1,000 bytes derived from it.
fn body_of(path: &str) -> Vec<u8> {
    let seed = path.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    (0..1000u32).map(|i| (seed.wrapping_add(i.wrapping_mul(2_654_435_761)) >> 13) as u8).collect()
}

/// Starts the peer. Paths containing "slow" have the head of their first arrival held
/// for `slow`; paths containing "throttle" are answered 503 SlowDown; the rest 200 at once.
async fn peer(slow: Duration) -> Peer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let closed = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(Mutex::new(HashMap::new()));
    let first = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let (s, c, a) = (seen.clone(), closed.clone(), answered.clone());
    tokio::spawn(async move {
        for conn in 0.. {
            let Ok((sock, _)) = listener.accept().await else { return };
            tokio::spawn(serve(sock, conn, slow, s.clone(), c.clone(), a.clone(), first.clone()));
        }
    });
    Peer { addr, seen, closed, answered }
}

async fn serve(
    mut sock: TcpStream,
    conn: usize,
    slow: Duration,
    seen: Arc<Mutex<Vec<Seen>>>,
    closed: Arc<AtomicUsize>,
    answered: Arc<Mutex<HashMap<String, usize>>>,
    first: Arc<Mutex<std::collections::HashSet<String>>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        // Every complete request in `buf`, answered in order (RFC 9112 section 9.3.2).
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let mut lines = head.split("\r\n");
            let mut parts = lines.next().unwrap_or("").split(' ');
            let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
            let len: usize = lines
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() < end + 4 + len {
                break;
            }
            buf.drain(..end + 4 + len);
            seen.lock().unwrap().push(Seen { conn, method: method.clone(), path: path.clone() });
            let first_arrival = first.lock().unwrap().insert(path.clone());
            if path.contains("slow") && first_arrival {
                tokio::time::sleep(slow).await;
            }
            let response = if path.contains("throttle") {
                b"HTTP/1.1 503 Slow Down\r\ncontent-length: 0\r\n\r\n".to_vec()
            } else if method == "PUT" {
                b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec()
            } else {
                let body = body_of(&path);
                let mut r = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
                if method != "HEAD" {
                    r.extend_from_slice(&body);
                }
                r
            };
            // Counted before the write: a client may read the response and the test check
            // the count before this task runs again after `write_all`.
            *answered.lock().unwrap().entry(path).or_insert(0) += 1;
            if sock.write_all(&response).await.is_err() {
                return;
            }
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                closed.fetch_add(1, SeqCst);
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn auto(peer: &Peer, max_connections: usize) -> Arc<AutoTransport> {
    let mut config = TransportConfig::new(Endpoint::parse(&format!("http://{}", peer.addr)).unwrap());
    config.mode = Mode::Auto;
    config.max_connections = max_connections;
    config.response_timeout = Duration::from_secs(30);
    Arc::new(AutoTransport::new(config).unwrap())
}

/// A GET of a known-small object (as after a listing): auto's small lane.
fn small(path: &str) -> Request {
    let mut r = Request::new(Method::GET, path);
    r.response_len = Some(1000);
    r
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f).await.expect("hung")
}

/// Sends `req` and checks the body is the peer's for its path.
async fn fetch(t: &Arc<AutoTransport>, req: Request) -> Response {
    let path = req.path_and_query.clone();
    let r = within(t.send(req)).await.unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(r.status, StatusCode::OK, "{path}");
    r
}

async fn fetch_body(t: &Arc<AutoTransport>, req: Request) {
    let path = req.path_and_query.clone();
    let r = fetch(t, req).await;
    let body = within(r.body.collect(1 << 20)).await.unwrap();
    assert_eq!(&body[..], &body_of(&path)[..], "{path}: wrong body");
}

/// Small GETs, four at a time: the pipeline gets verified (auto's probe) and the hedge
/// delay gets its samples (`HEDGE_MIN_SAMPLES` is 20), all at the floor here.
async fn warm_up(t: &Arc<AutoTransport>, n: usize) {
    for i in (0..n).step_by(4) {
        let gets: Vec<_> = (i..i + 4).map(|k| fetch_body(t, small(&format!("/b/warm-{k}")))).collect();
        futures_util::future::join_all(gets).await;
    }
    assert!(t.pipelining(), "the probe verified pipelining");
}

/// A small GET whose head is held for 3 s: after the hedge delay a copy goes out on
/// another connection, its answer (right body) is the caller's, and the loser's response,
/// when it comes, is read and thrown away on its connection, which stays open (drained,
/// not closed) and under the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_is_answered_by_the_hedge() {
    let peer = peer(Duration::from_secs(3)).await;
    let cap = 8;
    let t = auto(&peer, cap);
    warm_up(&t, 40).await;
    let before = t.stats();

    fetch_body(&t, small("/b/slow-1")).await;
    let s = t.stats();
    assert_eq!(
        (s.hedges_sent - before.hedges_sent, s.hedges_won - before.hedges_won),
        (1, 1),
        "one copy, and its head came first"
    );
    assert_eq!(s.requests_sent - before.requests_sent, 2, "the copy counts as the request it is");
    let seen = peer.seen("/b/slow-1");
    assert_eq!(seen.len(), 2, "the peer saw the request and its copy: {seen:?}");
    assert_ne!(seen[0].conn, seen[1].conn, "the copy went on another connection");
    assert_eq!(peer.answered("/b/slow-1"), 1, "the caller's answer came before the held head");

    // The loser: its head comes after 3 s; its body is discarded, its connection kept.
    within(async {
        while peer.answered("/b/slow-1") < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let more: Vec<_> = (0..2 * cap).map(|k| fetch_body(&t, small(&format!("/b/after-{k}")))).collect();
    futures_util::future::join_all(more).await;
    assert_eq!(peer.closed.load(SeqCst), 0, "no connection was closed for the loser");
    let (_, peak) = t.sockets_open();
    assert!(peak <= cap, "at most {cap} sockets at once, saw {peak}");
}

/// Every small GET slow: copies are bounded by the budget (`HEDGE_BUDGET` per small
/// request sent), not one per slow request, and each is a request the peer sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hedges_stay_within_the_budget() {
    let peer = peer(Duration::from_millis(200)).await;
    let t = auto(&peer, 8);
    warm_up(&t, 40).await;
    let slow = 40;
    for i in (0..slow).step_by(4) {
        let gets: Vec<_> = (i..i + 4).map(|k| fetch_body(&t, small(&format!("/b/slow-{k}")))).collect();
        futures_util::future::join_all(gets).await;
    }
    let s = t.stats();
    let smalls = 40 + slow;
    let budget = (smalls as f64 * HEDGE_BUDGET).floor() as u64;
    assert!(s.hedges_sent >= 1, "slow heads got copies while the budget lasted");
    assert!(
        s.hedges_sent <= budget,
        "{} copies for {smalls} small requests: over the budget of {budget}",
        s.hedges_sent
    );
    // Requests the peer saw beyond one per path, less the probe's copy of the first.
    let mut per_path = HashMap::new();
    for seen in peer.seen.lock().unwrap().iter() {
        *per_path.entry(seen.path.clone()).or_insert(0u64) += 1;
    }
    let copies: u64 = per_path.values().map(|n| n - 1).sum::<u64>() - 1;
    assert_eq!(copies, s.hedges_sent, "each copy reached the peer");
    assert!(s.hedges_won <= s.hedges_sent);
}

/// No copy of what is not a small idempotent GET/HEAD, or of what the caller marked:
/// a GET of unknown size (bulk), a GET of a 2 MiB range (a large part), a PUT, and a
/// small GET with `hedge = false`, each with its head held. A small GET then gets one,
/// so hedging was on all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hedge_for_large_non_idempotent_or_refused_requests() {
    let peer = peer(Duration::from_millis(300)).await;
    let t = auto(&peer, 8);
    warm_up(&t, 40).await;
    let before = t.stats().hedges_sent;

    fetch_body(&t, Request::new(Method::GET, "/b/slow-unknown-size")).await;
    let mut part = Request::new(Method::GET, "/b/slow-part");
    part.set_range(0, 2097151);
    fetch_body(&t, part).await;
    let mut put = Request::new(Method::PUT, "/b/slow-put");
    put.body = RequestBody::Full(bytes::Bytes::from_static(b"tiny"));
    fetch(&t, put).await;
    let mut refused = small("/b/slow-refused");
    refused.hedge = false;
    fetch_body(&t, refused).await;
    assert_eq!(t.stats().hedges_sent - before, 0, "no copies");
    for p in ["/b/slow-unknown-size", "/b/slow-part", "/b/slow-put", "/b/slow-refused"] {
        assert_eq!(peer.seen(p).len(), 1, "{p} sent once");
    }

    fetch_body(&t, small("/b/slow-small")).await;
    assert_eq!(t.stats().hedges_sent - before, 1, "a small GET's slow head still gets its copy");
    assert_eq!(peer.seen("/b/slow-small").iter().filter(|s| s.method == "GET").count(), 2);
}

/// After a 503 SlowDown no copies go out for `HEDGE_QUIET_AFTER_THROTTLE` (1 s); after it,
/// they do again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hedge_right_after_a_slowdown() {
    let peer = peer(Duration::from_millis(300)).await;
    let t = auto(&peer, 8);
    warm_up(&t, 40).await;
    let before = t.stats().hedges_sent;

    let r = within(t.send(small("/b/throttle-1"))).await.unwrap();
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    drop(r);
    fetch_body(&t, small("/b/slow-after-503")).await;
    assert_eq!(t.stats().hedges_sent - before, 0, "no copy while the endpoint throttles");
    assert_eq!(peer.seen("/b/slow-after-503").len(), 1);

    tokio::time::sleep(ferry_wire::auto::HEDGE_QUIET_AFTER_THROTTLE + Duration::from_millis(200)).await;
    fetch_body(&t, small("/b/slow-later")).await;
    assert_eq!(t.stats().hedges_sent - before, 1, "copies again once the throttling is past");
}

/// The request that loses a hedge race is still measured: its head latency, when it
/// comes, joins the window the delay is taken from. Two slow heads sent with
/// `hedge = false` (measured as any response) and the hedged one's slow primary make 3
/// slow samples of ~43, enough to move the p95 (index 41 of 43) to the slow heads; without
/// the loser's sample there are 2 of ~42 and the p95 stays at the fast ones. Checked
/// failing with `observe_loser` doing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_losers_head_latency_counts_in_the_hedge_delay() {
    let slow = Duration::from_secs(1);
    let peer = peer(slow).await;
    let t = auto(&peer, 8);
    warm_up(&t, 40).await;
    for k in 0..2 {
        let mut refused = small(&format!("/b/slow-refused-{k}"));
        refused.hedge = false;
        fetch_body(&t, refused).await;
    }
    let before = t.stats();
    let fast = t.hedge_delay().expect("a delay after the warm-up");
    assert!(fast < slow / 2, "2 slow heads of ~42 do not reach the p95: {fast:?}");

    fetch_body(&t, small("/b/slow-hedged")).await;
    let s = t.stats();
    assert_eq!(
        (s.hedges_sent - before.hedges_sent, s.hedges_won - before.hedges_won),
        (1, 1),
        "the copy answered first"
    );
    assert!(t.hedge_delay().unwrap() < slow / 2, "the winner's fast head alone does not move it");

    // The primary's head comes after `slow`; once it is read, the delay has its sample.
    within(async {
        while peer.answered("/b/slow-hedged") < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let mut delay = t.hedge_delay().unwrap();
    for _ in 0..100 {
        if delay >= slow / 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        delay = t.hedge_delay().unwrap();
    }
    assert!(delay >= slow / 2, "the loser's slow head was not counted: delay {delay:?}");
}
