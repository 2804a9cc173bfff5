//! auto's back-off on rising head latency over HTTP/1.1 (controller.rs, "Rising head
//! latency"), against a real `ferry serve` (in-process `BackgroundServer`): an endpoint
//! whose first-byte time grows with the requests it is handling
//! (`Emulation::ttfb_per_request_in_flight`) brings the limit down, and not below its
//! floor. No test asserts a speed: the server's delays are its emulation's, and every wait
//! has a time-out only a hang reaches.

use ferry_testkit::{FerryServe, Served};
use ferry_wire::auto::AutoTransport;
use ferry_wire::{Mode, Request, Transport};
use http::Method;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn auto(srv: &Served, max_connections: usize) -> Arc<AutoTransport> {
    let config = srv.client_config(Mode::Auto, |c| {
        c.max_connections = max_connections;
        c.response_timeout = Duration::from_secs(30);
    });
    Arc::new(AutoTransport::new(config).unwrap())
}

/// First byte 5 ms plus 4 ms per object request already in progress: at 4 connections
/// ~17 ms, at 16 ~65 ms, while goodput grows ever less (the endpoint serves one request
/// per 4 ms at most). Bulk GETs (no size known) of a synthetic object, 48 at once under
/// a cap of 32: the limit grows in slow start, then head latency rises well above the
/// floor it had at 4 connections with goodput flat, and the controller backs off; it
/// never goes below 4 (nor, by the rule, below half its best round's limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_that_grows_with_load_brings_the_limit_down() {
    let srv = FerryServe::new()
        .anonymous()
        .configure(|c| {
            c.emulation.ttfb_p50 = Duration::from_millis(5);
            c.emulation.ttfb_p99 = Duration::from_millis(5);
            c.emulation.ttfb_per_request_in_flight = Duration::from_millis(4);
        })
        .start();
    let cap = 32;
    let t = auto(&srv, cap);
    let ctl = t.controller().expect("auto keeps a controller");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..48u64)
        .map(|w| {
            let (t, stop, done) = (t.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let mut i = w;
                while !stop.load(SeqCst) {
                    let r = Request::new(Method::GET, format!("/synthetic/lat/size=65536/o{}", i % 64));
                    let resp = t.send(r).await.expect("GET");
                    assert!(resp.status.is_success(), "GET: {}", resp.status);
                    assert_eq!(resp.body.collect(1 << 20).await.unwrap().len(), 65536);
                    done.fetch_add(1, SeqCst);
                    i += 48;
                }
            })
        })
        .collect();
    // Until two decreases from latency, or a time-out only a hang (or a rule that never
    // fires) reaches; the limit is sampled throughout.
    let (mut peak, mut low_after_peak) = (0usize, usize::MAX);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = ctl.stats();
        peak = peak.max(s.limit);
        if s.latency_backoffs > 0 {
            low_after_peak = low_after_peak.min(s.limit);
        }
        if s.latency_backoffs >= 2 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A few more rounds: the limit stays above its floor.
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        low_after_peak = low_after_peak.min(ctl.limit());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, SeqCst);
    for w in futures_util::future::join_all(workers).await {
        w.unwrap();
    }
    let s = ctl.stats();
    eprintln!("peak limit {peak}, lowest after the first back-off {low_after_peak}, {} GETs; {s:?}", done.load(SeqCst));
    assert!(s.latency_backoffs >= 2, "no back-off on latency that grows with load: {s:?}");
    // The lowest limit seen after the first back-off, not the final one: between back-offs
    // the controller may grow again (goodput still rises a little), and the last sample can
    // land at the top of such a climb.
    assert!(low_after_peak < peak, "the limit never came down from {peak}: {s:?}");
    assert!(s.head_latency_floor > Duration::ZERO && s.head_latency_median > s.head_latency_floor, "{s:?}");
    assert!(low_after_peak >= 4, "the limit fell to {low_after_peak} from {peak}: below its floor of 4");
    assert_eq!(s.throttles, 0, "nothing was throttled: the decreases are latency's");
}

/// A listing page is not goodput (auto/h1.rs, `Request::object_data`): the bytes of a
/// response marked as not object data never reach the controller's goodput count, while
/// an object GET's do, to the byte. Before the rule, a `ferry cp -r` of 1,000 x 16 KiB
/// held auto at 9 connections for 7 s: the 1,000-key page's round set a best that the
/// downloads never beat (docs/lab/wire-auto-paced.md). Counts only, no timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_pages_bytes_are_not_goodput() {
    let srv = FerryServe::new().anonymous().start();
    let t = auto(&srv, 8);
    let ctl = t.controller().expect("auto keeps a controller");
    // A large metadata-like answer (the synthetic bucket's bytes, marked as a listing is).
    let mut page = Request::new(Method::GET, "/synthetic/page/size=1048576/list");
    page.object_data = false;
    let r = t.send(page).await.expect("GET");
    assert!(r.status.is_success(), "{}", r.status);
    assert_eq!(r.body.collect(2 << 20).await.unwrap().len(), 1 << 20);
    assert_eq!(ctl.stats().bytes_delivered, 0, "a listing's bytes counted as goodput");
    // Object data of unknown size (bulk lane): counted, to the byte.
    let r = t.send(Request::new(Method::GET, "/synthetic/page/size=65536/o")).await.expect("GET");
    assert_eq!(r.body.collect(1 << 20).await.unwrap().len(), 65536);
    assert_eq!(ctl.stats().bytes_delivered, 65536);
}

/// A listing page travels as a small request does (lane.rs, `is_listing_page`): pages
/// sent 16 at a time go to the pipeline lane, where before they were bulk requests on the
/// pool alone, and none is copied, neither by a hedge nor by the pipelining probe.
/// Counts only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_take_the_small_lane_and_are_not_hedged() {
    let srv = FerryServe::new().anonymous().start();
    let t = auto(&srv, 16);
    for round in 0..4 {
        let pages: Vec<_> = (0..16)
            .map(|i| {
                let t = t.clone();
                tokio::spawn(async move {
                    let mut page = Request::new(Method::GET, format!("/synthetic/pages/size=4096/r{round}-{i}"));
                    page.object_data = false;
                    let r = t.send(page).await.expect("GET");
                    assert!(r.status.is_success(), "{}", r.status);
                    r.body.collect(1 << 20).await.unwrap().len()
                })
            })
            .collect();
        for p in pages {
            assert_eq!(p.await.unwrap(), 4096);
        }
    }
    let (_, pipeline_opened) = t.lane_openings();
    assert!(pipeline_opened > 0, "no listing page reached the pipeline lane: {:?}", t.lane_openings());
    assert_eq!(t.stats().hedges_sent, 0, "a listing page was hedged");
    assert_eq!(t.stats().requests_sent, 64, "a listing page was copied (a probe, a hedge)");
}
