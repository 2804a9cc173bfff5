//! The engine's memory budget (`Engine::memory_budget`) against a real `ferry serve`:
//! open-ahead, `get_ranges` and a ranged download of one engine all draw from it at
//! once, and a slow consumer holds the bytes read ahead to the budget (not to
//! open-ahead's own, larger `max_buffered`); every byte still arrives intact. An upload
//! from a stream of unknown length to a slow endpoint reads its source only as far as
//! the budget allows.

use crate::sched_support;

use ferry_engine::download::{download_file, DownloadParams};
use ferry_engine::openahead::{OpenAhead, OpenAheadOptions};
use ferry_engine::ranges::{get_ranges, RangesOptions};
use ferry_engine::upload::{upload_stream, UploadParams};
use ferry_store::{Mode, ObjectRef, PutParams, RetryConfig};
use futures_util::StreamExt;
use sched_support::{client, data, server};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_holds_bytes_in_flight_to_the_budget() {
    let srv = server(|_| {});
    let (c, _) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("mem").await.unwrap();
    let budget_bytes: u64 = 3 << 20;
    let e = ferry_engine::Engine::new(c.clone()).with_memory_budget(budget_bytes);
    let budget = e.memory_budget();

    // 24 objects of 1 MiB read in order by a consumer that sleeps between chunks;
    // open-ahead alone would read ahead up to 64 MiB (8 slots x ~7 MiB).
    let mut objects = Vec::new();
    for i in 0..24u64 {
        let o = ObjectRef::new("mem", format!("scan/{i:03}"));
        let body = data(1 << 20, i + 1);
        c.put_object(&o, body.clone(), PutParams::default()).await.unwrap();
        objects.push((o, body));
    }
    let big = ObjectRef::new("mem", "big");
    let big_body = data(12 << 20, 99);
    c.put_object(&big, big_body.clone(), PutParams::default()).await.unwrap();

    let opts = OpenAheadOptions::default();
    assert!(opts.max_buffered > 10 * budget_bytes, "the test needs open-ahead's own bound far above the budget");
    let reader = {
        let (e, objects) = (e.clone(), objects.clone());
        tokio::spawn(async move {
            let mut reader = OpenAhead::from_list(&e, objects.iter().map(|(o, _)| o.clone()).collect(), opts);
            let mut n = 0;
            while let Some(opened) = reader.next().await {
                let opened = opened.unwrap();
                let mut got = Vec::new();
                let mut body = opened.body;
                while let Some(chunk) = body.next().await {
                    got.extend_from_slice(&chunk.unwrap());
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                assert!(got[..] == objects[n].1[..], "object {n} differs");
                n += 1;
            }
            assert_eq!(n, objects.len());
            reader.stats()
        })
    };
    // Meanwhile, the same client reads spans and downloads in parts.
    let ranges: Vec<std::ops::Range<u64>> = (0..12u64).map(|i| i * (1 << 20)..i * (1 << 20) + 300_000).collect();
    let ropts = RangesOptions { max_span: 1 << 20, ..RangesOptions::default() };
    let got = get_ranges(&e, &big, &ranges, &ropts).await.unwrap();
    for (r, part) in ranges.iter().zip(&got.parts) {
        assert!(part[..] == big_body[r.start as usize..r.end as usize]);
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("big");
    let params = DownloadParams { part_size: 1 << 20, ..DownloadParams::default() };
    download_file(&e, &big, &dest, &params, None).await.unwrap();
    assert!(std::fs::read(&dest).unwrap() == big_body[..]);

    let stats = reader.await.unwrap();
    // Read ahead: within the budget, plus the chunk each slot may have been reading.
    let slack = (OpenAheadOptions::default().max_open as u64 + 1) * stats.largest_chunk;
    assert!(
        stats.peak_buffered <= budget_bytes + slack,
        "read ahead {} bytes under a budget of {budget_bytes}: {stats:?}",
        stats.peak_buffered
    );
    assert!(stats.peak_buffered > 0, "nothing was read ahead");
    assert!(
        budget.peak() <= budget.total() && budget.peak() > 0,
        "budget peak {} of {}",
        budget.peak(),
        budget.total()
    );
    assert_eq!(budget.held(), 0, "bytes still held after everything ended");
    eprintln!(
        "budget {budget_bytes}: peak held {}, open-ahead peak buffered {} ({stats:?})",
        budget.peak(),
        stats.peak_buffered
    );
}

/// The endpoint is the slow consumer of an upload: 16 MB/s per connection, while the
/// source (memory) could hand over its 40 MiB at once. With a budget of two 5 MiB parts
/// and 8 parts allowed in flight, the bytes read from the source and not yet answered
/// by the server stay within the budget (plus one part being cut); without the budget
/// the whole source was read ahead into parts waiting to be sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_from_a_stream_reads_ahead_only_within_the_budget() {
    let srv = server(|c| c.emulation.rate_per_conn = Some(16_000_000));
    let (c, counts) = client(&srv, Mode::H1Pool, RetryConfig::default());
    c.create_bucket("upload").await.unwrap();
    let part: u64 = ferry_store::s3::multipart::MIN_PART_SIZE;
    let budget_bytes = 2 * part;
    let e = ferry_engine::Engine::new(c.clone()).with_memory_budget(budget_bytes);
    let budget = e.memory_budget();
    let body = data(8 * part as usize, 7);
    let pulled = Arc::new(AtomicU64::new(0));
    let chunks: Vec<std::io::Result<bytes::Bytes>> =
        body.chunks(256 << 10).map(|b| Ok(bytes::Bytes::copy_from_slice(b))).collect();
    let source = {
        let pulled = pulled.clone();
        futures_util::stream::iter(chunks)
            .inspect(move |c| {
                if let Ok(b) = c {
                    pulled.fetch_add(b.len() as u64, SeqCst);
                }
            })
            .boxed()
    };
    // Bytes read from the source beyond those of parts the server has answered.
    let worst = Arc::new(AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (pulled, counts, worst, done) = (pulled.clone(), counts.clone(), worst.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(SeqCst) {
                let answered = counts.puts_answered.load(SeqCst) * part;
                worst.fetch_max(pulled.load(SeqCst).saturating_sub(answered), SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let object = ObjectRef::new("upload", "from-stdin");
    let params = UploadParams { part_size: part, concurrency: 8, ..UploadParams::default() };
    let out = upload_stream(&e, source, &object, &params, None).await.unwrap();
    done.store(true, SeqCst);
    watcher.await.unwrap();
    assert_eq!(out.size, body.len() as u64);
    let got = c.get_object(&object, Default::default()).await.unwrap().body.collect().await.unwrap();
    assert!(got[..] == body[..], "the uploaded object differs from its source");
    let worst = worst.load(SeqCst);
    assert!(worst <= budget_bytes + part, "{worst} bytes read ahead of the server under a budget of {budget_bytes}");
    assert!(
        budget.peak() <= budget.total() && budget.peak() > 0,
        "budget peak {} of {}",
        budget.peak(),
        budget.total()
    );
    assert_eq!(budget.held(), 0, "bytes still held after the upload ended");
    eprintln!("budget {budget_bytes}: read ahead of the server at most {worst} bytes, budget peak {}", budget.peak());
}
