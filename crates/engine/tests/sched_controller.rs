//! The concurrency controller against `ferry serve`'s `s3` profile: SlowDown above a
//! per-prefix request rate. The profile's 5,500 GET/s would need more requests per
//! second than two shared cores produce here, so the limit is lowered to 150 GET/s per
//! prefix (the mechanism is the profile's; only the figure changes). With S3's ~30 ms
//! first byte, more than ~5 requests in flight on one prefix draw SlowDown.
//!
//! Phase 1 hammers one prefix: the controller must back off. Phase 2 spreads the same
//! load over 400 prefixes, which no longer throttles: the controller must recover and
//! grow again. The hard cap must hold throughout. The same case runs over each forced
//! transport (h1 pool, h1 pipeline, h2 with prior knowledge: the server offers h2 here,
//! unlike the s3 profile's default), since each reports a SlowDown through its own path;
//! auto's own controller and lanes are covered by ferry-wire's `auto_lanes.rs`.

use crate::sched_support;

use bytes::Bytes;
use ferry_engine::controller::{Controller, ControllerOptions, PermitExt};
use ferry_server::Profile;
use ferry_store::{Mode, ObjectRef, PutParams, RetryConfig, S3Client};
use futures_util::StreamExt;
use sched_support::{client, server};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// `workers` tasks issue HEADs through the controller until `stop`; returns the most
/// requests seen in flight at once.
async fn drive(
    ctl: &Arc<Controller>,
    c: &S3Client,
    keys: Arc<Vec<ObjectRef>>,
    workers: usize,
    run_for: Duration,
) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (ctl, c, keys, stop, in_flight, peak) =
            (ctl.clone(), c.clone(), keys.clone(), stop.clone(), in_flight.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while !stop.load(SeqCst) {
                let permit = ctl.acquire().await;
                let now = in_flight.fetch_add(1, SeqCst) + 1;
                peak.fetch_max(now, SeqCst);
                let r = c.head_object(&keys[i % keys.len()]).await;
                in_flight.fetch_sub(1, SeqCst);
                permit.observe(&r);
                i += workers;
            }
        }));
    }
    tokio::time::sleep(run_for).await;
    stop.store(true, SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    peak.load(SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backs_off_under_slowdown_and_recovers_h1_pool() {
    backs_off_under_slowdown_and_recovers(Mode::H1Pool).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backs_off_under_slowdown_and_recovers_h1_pipeline() {
    backs_off_under_slowdown_and_recovers(Mode::H1Pipeline).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backs_off_under_slowdown_and_recovers_h2() {
    backs_off_under_slowdown_and_recovers(Mode::H2).await
}

async fn backs_off_under_slowdown_and_recovers(mode: Mode) {
    let srv = server(|c| {
        c.profile = Profile::S3;
        c.emulation = Profile::S3.emulation();
        c.emulation.get_rate_limit = Some(150);
        c.emulation.h2 = mode == Mode::H2;
    });
    // No client retries: every SlowDown reaches the controller.
    let (c, _) = client(&srv, mode, RetryConfig::none());
    c.create_bucket("ctl").await.unwrap();
    let hot = Arc::new(vec![ObjectRef::new("ctl", "hot/object")]);
    let spread: Arc<Vec<ObjectRef>> =
        Arc::new((0..400).map(|i| ObjectRef::new("ctl", format!("p{i}/object"))).collect());
    let puts = hot.iter().chain(spread.iter()).map(|o| {
        let c = c.clone();
        async move { c.put_object(o, Bytes::from_static(b"x"), PutParams::default()).await.unwrap() }
    });
    futures_util::stream::iter(puts).buffer_unordered(32).collect::<Vec<_>>().await;
    let opts = ControllerOptions { max: 40, ..ControllerOptions::default() };
    let ctl = Controller::new(opts.clone());

    let peak1 = drive(&ctl, &c, hot, 48, Duration::from_millis(2500)).await;
    let after_hot = ctl.stats();
    assert!(after_hot.throttles > 0, "{mode:?}: the prefix was never throttled: {after_hot:?}");
    assert!(after_hot.decreases > 0, "no back-off: {after_hot:?}");
    assert!(after_hot.limit < opts.max, "still at the cap under SlowDown: {after_hot:?}");

    let peak2 = drive(&ctl, &c, spread, 48, Duration::from_millis(2500)).await;
    let after_spread = ctl.stats();
    assert!(after_spread.increases > after_hot.increases, "no recovery: {after_hot:?} -> {after_spread:?}");
    assert!(after_spread.limit > after_hot.limit, "no recovery: {after_hot:?} -> {after_spread:?}");
    assert!(peak1 <= opts.max && peak2 <= opts.max, "hard cap broken: {peak1}, {peak2}");
    eprintln!("{mode:?}: after the hot prefix: {after_hot:?}\nafter spreading: {after_spread:?}");
}
