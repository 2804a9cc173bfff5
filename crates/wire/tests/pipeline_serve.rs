//! The pipelining transport against a real `ferry serve` started in-process: many small
//! GETs in the right callers' hands, and reset faults that cut bodies part-way.

use bytes::Bytes;
use ferry_server::Faults;
use ferry_testkit::FerryServe;
use ferry_wire::pipeline::PipelineTransport;
use ferry_wire::{Endpoint, ErrorKind, Request, RequestBody, Transport, TransportConfig};
use futures_util::StreamExt;
use http::Method;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

fn transport(addr: SocketAddr, conns: usize, depth: usize) -> Arc<PipelineTransport> {
    let mut c = TransportConfig::new(Endpoint::parse(&format!("http://{addr}")).unwrap());
    c.max_connections = conns;
    c.pipeline_depth = depth;
    c.response_timeout = Duration::from_secs(20);
    Arc::new(PipelineTransport::new(c).unwrap())
}

/// Object `i`: 1-8 KiB of bytes that name it, so a body in the wrong hands is caught.
fn object(i: usize) -> Bytes {
    let len = 1024 + (i * 7919) % (7 * 1024);
    let tag = format!("object {i};");
    Bytes::from(tag.bytes().cycle().take(len).collect::<Vec<u8>>())
}

/// Creates the bucket and uploads `n` objects through the transport (PUTs travel alone).
async fn upload(t: &Arc<PipelineTransport>, bucket: &str, n: usize) {
    let r = t.send(Request::new(Method::PUT, format!("/{bucket}"))).await.unwrap();
    assert_eq!(r.status, 200, "create bucket");
    r.body.collect(1 << 20).await.unwrap();
    futures_util::stream::iter(0..n)
        .map(|i| {
            let t = t.clone();
            let path = format!("/{bucket}/k{i}");
            async move {
                let mut req = Request::new(Method::PUT, path.as_str());
                req.body = RequestBody::Full(object(i));
                let r = t.send(req).await.unwrap();
                assert_eq!(r.status, 200, "PUT {path}");
                r.body.collect(1 << 20).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_small_gets_over_four_connections_32_deep() {
    let srv = FerryServe::new().anonymous().start();
    let t = transport(srv.addr(), 4, 32);
    let n = 2000;
    tokio::time::timeout(Duration::from_secs(120), upload(&t, "small", n)).await.expect("uploads finish");
    let before = t.stats();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let t = t.clone();
            tokio::spawn(async move {
                let r = t.send(Request::new(Method::GET, format!("/small/k{i}"))).await.unwrap();
                assert_eq!(r.status, 200, "GET k{i}");
                let body = r.body.collect(1 << 20).await.unwrap();
                assert!(
                    body == object(i),
                    "caller {i} got the wrong bytes ({} bytes starting {:?})",
                    body.len(),
                    String::from_utf8_lossy(&body[..body.len().min(16)])
                );
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task).await.expect("GETs finish").unwrap();
    }
    let st = t.stats();
    assert!(st.connections_opened <= 4, "{st:?}");
    assert_eq!(st.requests_sent - before.requests_sent, n as u64, "{st:?}");
    assert_eq!(st.requests_resent, 0, "{st:?}");
    assert!(t.verified(), "ferry serve answers pipelined requests correctly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_resets_mid_body_every_caller_gets_its_bytes_or_body_truncated() {
    let srv = FerryServe::new()
        .anonymous()
        .faults(Faults { reset_rate: 0.2, seed: 7, ..Faults::default() })
        .configure(|c| {
            c.emulation.ttfb_p50 = Duration::from_millis(50);
            c.emulation.ttfb_p99 = Duration::from_millis(50);
        })
        .start();
    let t = transport(srv.addr(), 4, 32);
    let n = 500;
    tokio::time::timeout(Duration::from_secs(120), upload(&t, "faulty", n)).await.expect("uploads finish");
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let t = t.clone();
            tokio::spawn(async move {
                let r = match t.send(Request::new(Method::GET, format!("/faulty/k{i}"))).await {
                    Ok(r) => r,
                    Err(e) => return Err(e.kind()),
                };
                assert_eq!(r.status, 200, "GET k{i}");
                match r.body.collect(1 << 20).await {
                    Ok(body) => {
                        assert!(
                            body == object(i),
                            "caller {i} got wrong bytes ({} bytes starting {:?})",
                            body.len(),
                            String::from_utf8_lossy(&body[..body.len().min(16)])
                        );
                        Ok(())
                    }
                    Err(e) => Err(e.kind()),
                }
            })
        })
        .collect();
    let (mut good, mut truncated) = (0, 0);
    for task in tasks {
        match tokio::time::timeout(Duration::from_secs(120), task).await.expect("GETs finish").unwrap() {
            Ok(()) => good += 1,
            Err(ErrorKind::BodyTruncated) => truncated += 1,
            Err(other) => panic!("a caller got {other:?}, not its bytes or BodyTruncated"),
        }
    }
    let st = t.stats();
    eprintln!("good {good}, truncated {truncated}, {st:?}");
    assert!(truncated > 0, "the faults cut some bodies");
    assert!(good > n / 2, "most bodies arrive: {good} of {n}");
    assert!(st.requests_resent > 0, "requests behind a reset are re-sent: {st:?}");
    // Not asserted here: `verified()`. With a reset on 20% of requests, a batch of k
    // verifies with probability 0.8^k, and k depends on timing (a loaded CI machine wrote
    // batches of ~32 and none verified); verification is tested without faults above.
    eprintln!("verified: {}", t.verified());
}

/// `head_latency` is the endpoint's time alone: the pool measures every request; the
/// pipeline only a request written with no response owed ahead of it on its connection,
/// never one that waited behind another (the controller would read that as congestion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_latency_is_measured_only_for_requests_nothing_held_up() {
    let delay = Duration::from_millis(40);
    let srv = FerryServe::new()
        .anonymous()
        .configure(|c| {
            c.emulation.ttfb_p50 = delay;
            c.emulation.ttfb_p99 = delay;
        })
        .start();
    let t = transport(srv.addr(), 1, 16);
    tokio::time::timeout(Duration::from_secs(60), upload(&t, "lat", 8)).await.expect("uploads finish");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let t = t.clone();
            tokio::spawn(async move {
                let r = t.send(Request::new(Method::GET, format!("/lat/k{i}"))).await.unwrap();
                assert_eq!(r.status, 200);
                let meta = r.meta.clone();
                r.body.collect(1 << 20).await.unwrap();
                meta
            })
        })
        .collect();
    let mut metas = Vec::new();
    for task in tasks {
        metas.push(tokio::time::timeout(Duration::from_secs(60), task).await.expect("GETs finish").unwrap());
    }
    assert!(metas.iter().all(|m| m.connection_id == metas[0].connection_id), "one connection: {metas:?}");
    let measured: Vec<_> = metas.iter().filter_map(|m| m.head_latency.map(|l| (l, m.time_to_head))).collect();
    assert!(!measured.is_empty(), "the first request written on the idle connection is measured: {metas:?}");
    assert!(measured.len() < metas.len(), "requests pipelined behind an unanswered one are not: {metas:?}");
    for (latency, to_head) in &measured {
        assert!(*latency >= delay.mul_f64(0.9), "a measured latency covers the server's first-byte delay: {latency:?}");
        assert!(latency <= to_head, "on the wire no earlier than send was called: {latency:?} > {to_head:?}");
    }
    // Alone again on the same (now idle) connection: measured.
    let r = t.send(Request::new(Method::GET, "/lat/k0")).await.unwrap();
    assert!(r.meta.head_latency.is_some_and(|l| l >= delay.mul_f64(0.9)), "{:?}", r.meta);
    r.body.collect(1 << 20).await.unwrap();

    // The pool: one request per connection, so every request is measured.
    let mut c = srv.transport_config();
    c.max_connections = 2;
    let pool = ferry_wire::pool::PoolTransport::new(c).unwrap();
    for i in 0..4 {
        let r = pool.send(Request::new(Method::GET, format!("/lat/k{i}"))).await.unwrap();
        assert!(
            r.meta.head_latency.is_some_and(|l| l >= delay.mul_f64(0.9) && l <= r.meta.time_to_head),
            "{:?}",
            r.meta
        );
        r.body.collect(1 << 20).await.unwrap();
    }
}
