//! `get_ranges` against a real `ferry serve`: the bytes returned equal slices of the
//! object, in the order asked, and the GETs counted on the wire equal the spans the
//! coalescer planned.

// `&[0..10]` here is a list of one byte range, which is what the lint suspects is a typo.
#![allow(clippy::single_range_in_vec_init)]

use crate::sched_support;

use ferry_engine::ranges::{coalesce, get_ranges, CoalescePolicy, RangesOptions};
use ferry_engine::Engine;
use ferry_store::{Error, Mode, ObjectRef, PutParams, RetryConfig};
use sched_support::{client, data, server};
use std::ops::Range;

/// Ranges of 1 B to 20 KiB across `len`, with duplicates, overlaps and an empty one.
fn ranges(len: u64, n: usize, seed: u64) -> Vec<Range<u64>> {
    let mut x = seed | 1;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut out: Vec<Range<u64>> = (0..n)
        .map(|_| {
            let l = 1 + next(20 * 1024);
            let s = next(len - l);
            s..s + l
        })
        .collect();
    out.push(out[3].clone());
    out.push(out[5].start + 1..out[5].end + 100);
    out.push(10..10);
    out.push(len - 1..len);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_ranges_returns_the_slices_asked_for() {
    let srv = server(|_| {});
    for mode in [Mode::H1Pool, Mode::H1Pipeline, Mode::H2] {
        let (c, counts) = client(&srv, mode, RetryConfig::default());
        let bucket = format!("ranges-{}", c.transport().name());
        c.create_bucket(&bucket).await.unwrap();
        let object = ObjectRef::new(&bucket, "table.hfile");
        let body = data(3 * 1024 * 1024 + 17, 1);
        c.put_object(&object, body.clone(), PutParams::default()).await.unwrap();
        let asked = ranges(body.len() as u64, 200, 7);
        for policy in [
            None,
            Some(CoalescePolicy { max_gap: 0, max_span: 1 << 30 }),
            Some(CoalescePolicy { max_gap: 64 * 1024, max_span: 256 * 1024 }),
        ] {
            let opts = RangesOptions { policy, concurrency: 8, ..RangesOptions::default() };
            let gets_before = counts.get("GET object");
            let out = get_ranges(&Engine::new(c.clone()), &object, &asked, &opts).await.unwrap();
            assert_eq!(out.parts.len(), asked.len());
            for (r, p) in asked.iter().zip(&out.parts) {
                assert_eq!(&p[..], &body[r.start as usize..r.end as usize], "range {r:?} over {mode:?}");
            }
            let gets = counts.get("GET object") - gets_before;
            assert_eq!(gets, out.stats.requests, "GETs on the wire vs planned spans");
            assert!(out.stats.requests >= 1 && out.stats.requests <= asked.len() as u64);
            if let Some(p) = policy {
                assert_eq!(out.stats.requests, coalesce(&asked, &p).len() as u64);
            }
            assert_eq!(out.stats.bytes_requested, asked.iter().map(|r| r.end - r.start).sum::<u64>());
            assert!(out.stats.bytes_fetched >= out.stats.over_read);
            if policy.is_some_and(|p| p.max_gap == 0) {
                assert_eq!(out.stats.over_read, 0);
            }
            assert!(out.etag.is_some());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_ranges_errors_are_clear() {
    let srv = server(|_| {});
    let (c, counts) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("rerr").await.unwrap();
    let object = ObjectRef::new("rerr", "o");
    let body = data(100_000, 2);
    c.put_object(&object, body.clone(), PutParams::default()).await.unwrap();

    // Past the end: an error naming the range and the size, not a short answer.
    let e = get_ranges(&Engine::new(c.clone()), &object, &[0..10, 99_990..100_010], &RangesOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::Service { status: 416, .. }), "{e}");
    assert!(e.to_string().contains("100000 bytes"), "{e}");
    let e =
        get_ranges(&Engine::new(c.clone()), &object, &[200_000..200_001], &RangesOptions::default()).await.unwrap_err();
    assert_eq!(e.status(), Some(416), "{e}");

    // Another version than the one the caller pinned: Precondition.
    let opts =
        RangesOptions { if_match: Some("\"0123456789abcdef0123456789abcdef\"".into()), ..RangesOptions::default() };
    let e = get_ranges(&Engine::new(c.clone()), &object, &[0..10], &opts).await.unwrap_err();
    assert!(matches!(e, Error::Precondition { .. }), "{e}");

    // Nothing asked, or only empty ranges: nothing fetched.
    let before = counts.get("GET object");
    let out = get_ranges(&Engine::new(c.clone()), &object, &[5..5], &RangesOptions::default()).await.unwrap();
    assert_eq!(out.parts, vec![bytes::Bytes::new()]);
    assert_eq!(counts.get("GET object"), before);
    assert_eq!(out.stats.requests, 0);

    // Missing object.
    let e =
        get_ranges(&Engine::new(c.clone()), &ObjectRef::new("rerr", "missing"), &[0..10], &RangesOptions::default())
            .await
            .unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

/// A batch of spans is known demand: `get_ranges` starts the endpoint's controller at the
/// spans it keeps in flight (at most its `concurrency`) instead of letting slow start
/// climb there from 4 (`Controller::start_at`). The server holds every head for 300 ms,
/// so requests in flight are counted while none can finish: 12 at once after the first
/// span, where slow start from 4 would have let 5 go, then 7. Counts only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_spans_starts_the_controller_at_its_concurrency() {
    let srv = server(|c| {
        c.emulation.ttfb_p50 = std::time::Duration::from_millis(300);
        c.emulation.ttfb_p99 = std::time::Duration::from_millis(300);
    });
    let (c, _) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("rstart").await.unwrap();
    let object = ObjectRef::new("rstart", "o");
    c.put_object(&object, data(1 << 20, 3), PutParams::default()).await.unwrap();
    let engine = Engine::new(c.clone());
    assert!(engine.controller().stats().limit < 12, "{:?}", engine.controller().stats());
    // 13 spans 32 KiB apart, none merged (no gap is read through): the first alone (it
    // pins the ETag), then 12.
    let asked: Vec<Range<u64>> = (0..13u64).map(|i| i * 32768..i * 32768 + 100).collect();
    let opts = RangesOptions {
        policy: Some(CoalescePolicy { max_gap: 0, max_span: 1 << 20 }),
        concurrency: 12,
        ..RangesOptions::default()
    };
    let call = tokio::spawn({
        let (engine, object) = (engine.clone(), object.clone());
        async move { get_ranges(&engine, &object, &asked, &opts).await }
    });
    let mut peak = 0;
    while !call.is_finished() {
        peak = peak.max(engine.controller().stats().in_flight);
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(call.await.unwrap().unwrap().stats.requests, 13);
    assert_eq!(peak, 12, "requests in flight at once after the first span: {:?}", engine.controller().stats());
}
