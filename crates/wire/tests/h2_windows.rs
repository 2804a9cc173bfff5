//! The h2 transport's receive windows follow the measured bandwidth-delay product
//! (h2.rs module note): on a path with a real round trip they grow while a reader keeps
//! up, and they do not grow for a reader that is slower than the window allows.
//!
//! The round trip comes from a delay proxy on loopback: a TCP relay that holds every
//! chunk it reads for a fixed time before writing it on, in both directions, so the
//! client's PINGs and the server's DATA see the delay as they would on a long link (the
//! lab's netns link needs root; this needs nothing).

use ferry_testkit::http::{create_bucket, send};
use ferry_testkit::{FerryServe, Served};
use ferry_wire::h2::{H2Transport, INITIAL_WINDOW};
use ferry_wire::{Endpoint, RequestBody, Transport, TransportConfig};
use futures_util::StreamExt;
use http::Method;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One-way delay of the proxy: 10 ms, a 20 ms round trip.
const DELAY: Duration = Duration::from_millis(10);

/// Starts a relay to `target` that delays each direction by `delay`; returns its address.
async fn delay_proxy(target: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(target).await else { continue };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(relay(cr, sw, delay));
            tokio::spawn(relay(sr, cw, delay));
        }
    });
    addr
}

async fn relay(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due.into()).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// An h2 transport to the synthetic bucket through the delay proxy.
async fn setup() -> (Served, Arc<H2Transport>, Arc<dyn Transport>) {
    let srv = FerryServe::new().anonymous().configure(|c| c.synthetic_bucket = Some("syn".into())).start();
    let proxy = delay_proxy(srv.addr(), DELAY).await;
    let mut c = TransportConfig::new(Endpoint::parse(&format!("http://{proxy}")).unwrap());
    c.max_connections = 1;
    c.response_timeout = Duration::from_secs(30);
    let h2 = Arc::new(H2Transport::new(c).unwrap());
    let t: Arc<dyn Transport> = h2.clone();
    (srv, h2, t)
}

/// Reads `path` to the end, pausing `pause` after each chunk; returns the bytes read.
async fn drain(t: &Arc<dyn Transport>, path: &str, pause: Option<Duration>) -> u64 {
    let r = send(t, Method::GET, path, RequestBody::Empty).await.unwrap();
    assert_eq!(r.status, 200);
    let mut body = r.body;
    let mut n = 0u64;
    while let Some(chunk) = body.next().await {
        n += chunk.unwrap().len() as u64;
        if let Some(p) = pause {
            tokio::time::sleep(p).await;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_grow_while_a_fast_reader_is_window_limited() {
    let (_srv, h2, t) = setup().await;
    create_bucket(&t, "plain").await;
    // 8 MiB per 20 ms round trip is ~400 MB/s: the initial window, not loopback, limits.
    assert_eq!(drain(&t, "/syn/256MiB", None).await, 256 << 20);
    let windows = h2.receive_windows();
    assert_eq!(windows.len(), 1);
    assert!(windows[0] > INITIAL_WINDOW, "the window stayed at {} after a window-limited 256 MiB GET", windows[0]);
    let rtt = h2.min_rtt().expect("PING rounds ran");
    assert!(rtt >= DELAY * 2, "measured round trip {rtt:?} below the proxy's {:?}", DELAY * 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_do_not_grow_for_a_slow_reader() {
    let (_srv, h2, t) = setup().await;
    // ~1 MiB chunks at most every 40 ms: at most ~0.5 MiB per 20 ms round trip, far under
    // 2/3 of the initial window, so the window is not what limits and must not grow. (At
    // 10 ms a pause, 2 MiB per round trip, the test failed once at load 9-11: a PING round
    // stretched past ~55 ms by the loaded proxy and client saw 2/3 of a window go by. A
    // round must now stretch past ~210 ms for that.)
    assert_eq!(drain(&t, "/syn/64MiB", Some(Duration::from_millis(40))).await, 64 << 20);
    assert_eq!(h2.receive_windows(), vec![INITIAL_WINDOW]);
}
