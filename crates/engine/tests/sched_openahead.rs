//! `OpenAhead` against a real `ferry serve`: every byte of every object in order; the
//! bounds on objects opened ahead and bytes read ahead hold (counted on the wire by a
//! wrapping transport, and by the reader's own counters); streams left idle are closed
//! and re-opened transparently, never mixing two versions of an object.

use crate::sched_support;

use bytes::Bytes;
use ferry_engine::openahead::{OpenAhead, OpenAheadOptions};
use ferry_engine::Engine;
use ferry_store::{Error, Mode, ObjectRef, PutParams, RetryConfig, S3Client};
use ferry_wire::{Request, Response, Transport, TransportStats, WireError};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use sched_support::{client, client_wrapped, data, server};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

async fn put_objects(c: &S3Client, bucket: &str, sizes: &[usize]) -> Vec<(ObjectRef, Bytes)> {
    c.create_bucket(bucket).await.unwrap();
    let mut out = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let o = ObjectRef::new(bucket, format!("scan/{i:04}.orc"));
        let body = data(n, i as u64 + 1);
        c.put_object(&o, body.clone(), PutParams::default()).await.unwrap();
        out.push((o, body));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_in_order_within_the_bounds() {
    let srv = server(|_| {});
    for mode in [Mode::H1Pool, Mode::H2] {
        let (c, counts) = client(&srv, mode, RetryConfig::default());
        let sizes: Vec<usize> = (0..60).map(|i| [0, 1, 100_000, 700_000, 1 << 20][i % 5]).collect();
        let objects = put_objects(&c, &format!("oa-{}", c.transport().name()), &sizes).await;
        let opts = OpenAheadOptions { max_open: 4, max_buffered: 1 << 20, ..OpenAheadOptions::default() };
        let gets_before = counts.get("GET object");
        counts.reset_peak();
        let mut reader = OpenAhead::from_list(
            &Engine::new(c.clone()),
            objects.iter().map(|(o, _)| o.clone()).collect(),
            opts.clone(),
        );
        let mut n = 0;
        while let Some(opened) = reader.next().await {
            let opened = opened.unwrap();
            let (want_ref, want) = &objects[n];
            assert_eq!(&opened.object, want_ref);
            assert_eq!(opened.meta.size, want.len() as u64);
            // Read in chunks, slowly enough that the slots behind fill up.
            let mut got = Vec::new();
            let mut body = opened.body;
            while let Some(chunk) = body.next().await {
                got.extend_from_slice(&chunk.unwrap());
            }
            assert!(got[..] == want[..], "object {n} over {mode:?} differs");
            n += 1;
        }
        assert_eq!(n, objects.len());
        let stats = reader.stats();
        assert_eq!(stats.opened, objects.len() as u64);
        assert_eq!(stats.reopened, 0);
        assert_eq!(counts.get("GET object") - gets_before, objects.len() as u64, "one GET per object");
        assert!(stats.peak_open <= opts.max_open as u64, "{stats:?}");
        assert!(
            stats.peak_buffered <= opts.max_buffered + (opts.max_open as u64 + 1) * stats.largest_chunk,
            "{stats:?}"
        );
        assert!(stats.peak_buffered > 0, "nothing was read ahead");
        // On the wire: the slots ahead plus the body the consumer reads.
        let peak = counts.bodies_peak.load(SeqCst);
        assert!(peak <= opts.max_open as u64 + 1, "{peak} GET bodies alive at once");
        assert!(peak >= 2, "nothing was opened ahead ({peak})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_are_closed_and_reopened() {
    let srv = server(|_| {});
    let (c, counts) = client(&srv, Mode::H1Pool, RetryConfig::default());
    // 4 MiB: more than one transport chunk (the pool reads at most 1 MiB at a time),
    // so no slot can hold a whole object.
    let sizes = vec![4 << 20; 6];
    let objects = put_objects(&c, "idle", &sizes).await;
    // Each slot may buffer 48 KiB of its object (plus one chunk), then sits idle.
    let opts = OpenAheadOptions { max_open: 3, max_buffered: 3 * 64 * 1024, idle_limit: Duration::from_millis(50) };
    let gets_before = counts.get("GET object");
    let mut reader =
        OpenAhead::from_list(&Engine::new(c.clone()), objects.iter().map(|(o, _)| o.clone()).collect(), opts);
    for (i, (_, want)) in objects.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(200)).await; // a slow consumer
        let got = reader.next().await.unwrap().unwrap().collect().await.unwrap();
        assert!(got[..] == want[..], "object {i} differs");
    }
    assert!(reader.next().await.is_none());
    let stats = reader.stats();
    assert!(stats.idle_closes >= 3, "{stats:?}");
    assert_eq!(stats.reopened, stats.idle_closes);
    assert_eq!(counts.get("GET object") - gets_before, objects.len() as u64 + stats.reopened);
    // Closed streams are really closed: nothing left open on the wire.
    drop(reader);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(counts.bodies_alive.load(SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_object_is_never_mixed_and_errors_keep_their_place() {
    let srv = server(|_| {});
    let (c, _) = client(&srv, Mode::H1Pool, RetryConfig::default());
    // Much larger than a transport chunk, so that a slot cannot have read it all.
    let objects = put_objects(&c, "mix", &[10, 8 << 20, 8 << 20]).await;
    let missing = ObjectRef::new("mix", "scan/missing");
    let list = vec![objects[0].0.clone(), objects[1].0.clone(), missing, objects[2].0.clone()];
    let opts = OpenAheadOptions { max_open: 3, max_buffered: 4 * 64 * 1024, idle_limit: Duration::from_millis(30) };
    let mut reader = OpenAhead::from_list(&Engine::new(c.clone()), list, opts);
    // Taking the first object opens the next three; they buffer their share and go idle.
    let first = reader.next().await.unwrap().unwrap().collect().await.unwrap();
    assert!(first == objects[0].1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(reader.stats().idle_closes >= 2, "{:?}", reader.stats());
    // The second object is replaced before it is read: its re-open must not mix versions.
    c.put_object(&objects[1].0, data(8 << 20, 99), PutParams::default()).await.unwrap();
    let second = reader.next().await.unwrap().unwrap().collect().await;
    assert!(matches!(second, Err(Error::Precondition { .. })), "{:?}", second.map(|b| b.len()));
    assert!(reader.stats().reopened >= 1);
    let third = reader.next().await.unwrap();
    assert!(matches!(&third, Err(e) if e.is_not_found()), "{third:?}");
    let fourth = reader.next().await.unwrap().unwrap().collect().await.unwrap();
    assert!(fourth == objects[2].1, "the fourth object differs");
    assert!(reader.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_a_stream_of_objects() {
    let srv = server(|_| {});
    let (c, _) = client(&srv, Mode::Auto, RetryConfig::default());
    let objects = put_objects(&c, "strm", &[10, 20, 30, 40, 50]).await;
    let refs = objects.iter().map(|(o, _)| o.clone()).collect::<Vec<_>>();
    let reader = OpenAhead::new(&Engine::new(c.clone()), futures_util::stream::iter(refs), OpenAheadOptions::default());
    let got: Vec<Bytes> =
        futures_util::future::join_all(reader.into_stream().map(|o| o.unwrap().collect()).collect::<Vec<_>>().await)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    assert_eq!(got, objects.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>());

    // A slow input (say, a listing) is read ahead by the reader itself: objects are
    // opened before the consumer asks, up to max_open.
    let refs = objects.iter().map(|(o, _)| o.clone()).collect::<Vec<_>>();
    let slow = futures_util::stream::iter(refs).then(|o| async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        o
    });
    let mut reader =
        OpenAhead::new(&Engine::new(c.clone()), slow, OpenAheadOptions { max_open: 3, ..OpenAheadOptions::default() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(reader.stats().opened, 3, "{:?}", reader.stats());
    let mut n = 0;
    while let Some(o) = reader.next().await {
        assert_eq!(o.unwrap().collect().await.unwrap(), objects[n].1);
        n += 1;
    }
    assert_eq!(n, objects.len());
}

/// Against a heavy first-byte tail (lognormal, p50 20 ms, p99 100 ms) behind small
/// objects, the consumer keeps catching up with heads that have not arrived, so the window
/// grows past its start, at least one place per stall, and never past `max_open`; the
/// bounds on bodies alive and bytes read ahead hold at every window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_grows_while_the_consumer_waits_for_first_bytes() {
    use ferry_engine::openahead::START_OPEN;
    let srv = server(|cfg| {
        cfg.emulation.ttfb_p50 = Duration::from_millis(20);
        cfg.emulation.ttfb_p99 = Duration::from_millis(100);
    });
    let (c, counts) = client(&srv, Mode::H1Pool, RetryConfig::default());
    let objects = put_objects(&c, "grow", &[16 * 1024; 120]).await;
    let opts = OpenAheadOptions { max_open: 16, max_buffered: 1 << 20, ..OpenAheadOptions::default() };
    counts.reset_peak();
    let mut reader =
        OpenAhead::from_list(&Engine::new(c.clone()), objects.iter().map(|(o, _)| o.clone()).collect(), opts.clone());
    for (i, (_, want)) in objects.iter().enumerate() {
        let got = reader.next().await.unwrap().unwrap().collect().await.unwrap();
        assert!(got[..] == want[..], "object {i} differs");
    }
    assert!(reader.next().await.is_none());
    let stats = reader.stats();
    assert!(stats.window > START_OPEN as u64, "the consumer waited for heads but the window stayed: {stats:?}");
    assert!(stats.window <= opts.max_open as u64, "{stats:?}");
    // At least one place per stall, up to the cap.
    assert!(stats.window >= (START_OPEN as u64 + stats.stalls).min(opts.max_open as u64), "{stats:?}");
    assert!(stats.peak_open <= stats.window, "{stats:?}");
    assert!(stats.peak_buffered <= opts.max_buffered + (opts.max_open as u64 + 1) * stats.largest_chunk, "{stats:?}");
    assert!(stats.peak_open > START_OPEN as u64, "the grown window was not used: {stats:?}");
    let peak = counts.bodies_peak.load(SeqCst);
    assert!(peak <= opts.max_open as u64 + 1, "{peak} GET bodies alive at once");
}

/// Holds back the response to a GET of one key by `delay`: one first byte far in the tail,
/// placed where the test wants it (the server's emulated first byte is random per request).
/// The request itself goes over the socket to the real server; only its answer is late.
struct SlowHead {
    inner: Arc<dyn Transport>,
    key: &'static str,
    delay: Duration,
}

impl Transport for SlowHead {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let slow = req.method == http::Method::GET
            && req.path_and_query.split('?').next().is_some_and(|p| p.ends_with(self.key));
        let (fut, delay) = (self.inner.send(req), self.delay);
        Box::pin(async move {
            let resp = fut.await?;
            if slow {
                tokio::time::sleep(delay).await;
            }
            Ok(resp)
        })
    }

    fn stats(&self) -> TransportStats {
        self.inner.stats()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

/// One long wait is enough: the window grows by the objects the consumer could have read
/// in it, not by one place. A consumer spends 5 ms on each small object, heads come back
/// at once except one held 400 ms: the single stall takes the window to its cap (one
/// place per stall would leave it at 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_long_wait_grows_the_window_by_what_it_cost() {
    use ferry_engine::openahead::START_OPEN;
    let srv = server(|_| {});
    let (c, _) = client(&srv, Mode::H1Pool, RetryConfig::default());
    let objects = put_objects(&c, "long-wait", &[16 * 1024; 40]).await;
    let (slow, _) = client_wrapped(&srv, |inner| {
        Arc::new(SlowHead { inner, key: "scan/0020.orc", delay: Duration::from_millis(400) })
    });
    let opts = OpenAheadOptions { max_open: 24, ..OpenAheadOptions::default() };
    let mut reader = OpenAhead::from_list(
        &Engine::new(slow.clone()),
        objects.iter().map(|(o, _)| o.clone()).collect(),
        opts.clone(),
    );
    for (i, (_, want)) in objects.iter().enumerate() {
        let got = reader.next().await.unwrap().unwrap().collect().await.unwrap();
        assert!(got[..] == want[..], "object {i} differs");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stats = reader.stats();
    assert!(stats.stalls >= 1, "the held head was not waited for: {stats:?}");
    assert!(stats.window > START_OPEN as u64 + stats.stalls, "the window grew by one place per stall: {stats:?}");
    assert_eq!(stats.window, opts.max_open as u64, "{stats:?}");
}

/// Objects whose reading outlasts the next ones' first byte (a constant 10 ms here, 1 MiB
/// objects read at 20 MB/s by a slow consumer) never leave the consumer waiting for a head
/// after the first, so the window stays where it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_stays_when_first_bytes_hide_behind_reading() {
    use ferry_engine::openahead::START_OPEN;
    let srv = server(|cfg| {
        cfg.emulation.ttfb_p50 = Duration::from_millis(10);
        cfg.emulation.ttfb_p99 = Duration::from_millis(10);
    });
    let (c, _) = client(&srv, Mode::H1Pool, RetryConfig::default());
    let objects = put_objects(&c, "stay", &[1 << 20; 12]).await;
    let mut reader = OpenAhead::from_list(
        &Engine::new(c.clone()),
        objects.iter().map(|(o, _)| o.clone()).collect(),
        OpenAheadOptions::default(),
    );
    for (i, (_, want)) in objects.iter().enumerate() {
        let mut opened = reader.next().await.unwrap().unwrap();
        let mut got = Vec::new();
        while let Some(chunk) = opened.body.next().await {
            let chunk = chunk.unwrap();
            // ~20 MB/s: a 1 MiB object takes ~50 ms, five first bytes.
            tokio::time::sleep(Duration::from_micros(chunk.len() as u64 / 20)).await;
            got.extend_from_slice(&chunk);
        }
        assert!(got[..] == want[..], "object {i} differs");
    }
    let stats = reader.stats();
    assert_eq!(stats.stalls, 0, "{stats:?}");
    assert_eq!(stats.window, START_OPEN as u64, "{stats:?}");
}

/// The window is the reader's demand: the endpoint's controller starts at it (the window
/// and the consumer's object, `Controller::start_at`) instead of climbing from 4 one
/// success at a time. The server holds every head for 300 ms, so the limit is read
/// before any GET has answered: 9 at once (8 ahead and the consumer's), where slow start
/// alone would still be at its initial 4. Limits only, no timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_starts_at_the_window() {
    let srv = server(|c| {
        c.emulation.ttfb_p50 = Duration::from_millis(300);
        c.emulation.ttfb_p99 = Duration::from_millis(300);
    });
    let (c, _) = client(&srv, Mode::Auto, RetryConfig::default());
    let objects = put_objects(&c, "oa-start", &[1000; 12]).await;
    // A fresh client for the reads: the PUTs above grew the first one's controller.
    let (c, _) = client(&srv, Mode::Auto, RetryConfig::default());
    let engine = Engine::new(c.clone());
    let ctl = engine.controller();
    let (limit_before, answered_before) = (ctl.stats().limit, ctl.stats().successes);
    assert!(limit_before < 9, "{:?}", ctl.stats());
    let list = objects.iter().map(|(o, _)| o.clone()).collect();
    let consumer = tokio::spawn(async move {
        let mut reader = OpenAhead::from_list(&engine, list, OpenAheadOptions::default());
        let mut n = 0;
        while let Some(o) = reader.next().await {
            o.unwrap().collect().await.unwrap();
            n += 1;
        }
        n
    });
    let mut limit_unanswered = 0;
    while !consumer.is_finished() {
        let s = ctl.stats();
        if s.successes == answered_before {
            limit_unanswered = limit_unanswered.max(s.limit);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(consumer.await.unwrap(), 12);
    assert_eq!(limit_unanswered, 9, "the limit before any GET answered: {:?}", ctl.stats());
}
