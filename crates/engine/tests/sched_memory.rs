//! The client's memory budget (`S3Client::memory_budget`) against a real `ferry serve`:
//! open-ahead, `get_ranges` and a ranged download of one client all draw from it at
//! once, and a slow consumer holds the bytes read ahead to the budget (not to
//! open-ahead's own, larger `max_buffered`); every byte still arrives intact.

mod sched_support;

use ferry_engine::download::{download_file, DownloadParams};
use ferry_engine::openahead::{OpenAhead, OpenAheadOptions};
use ferry_engine::ranges::{get_ranges, RangesOptions};
use ferry_store::{Mode, ObjectRef, PutParams, RetryConfig};
use futures_util::StreamExt;
use sched_support::{client, data, server};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_holds_bytes_in_flight_to_the_budget() {
    let srv = server(|_| {});
    let (c, _) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("mem").await.unwrap();
    let budget_bytes: u64 = 3 << 20;
    let c = c.with_memory_budget(budget_bytes);
    let budget = c.memory_budget();

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
        let (c, objects) = (c.clone(), objects.clone());
        tokio::spawn(async move {
            let mut reader = OpenAhead::from_list(&c, objects.iter().map(|(o, _)| o.clone()).collect(), opts);
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
    let got = get_ranges(&c, &big, &ranges, &ropts).await.unwrap();
    for (r, part) in ranges.iter().zip(&got.parts) {
        assert!(part[..] == big_body[r.start as usize..r.end as usize]);
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("big");
    let params = DownloadParams { part_size: 1 << 20, ..DownloadParams::default() };
    download_file(&c, &big, &dest, &params, None).await.unwrap();
    assert!(std::fs::read(&dest).unwrap() == big_body[..]);

    let stats = reader.await.unwrap();
    // Read ahead: within the budget, plus the chunk each slot may have been reading.
    let slack = (OpenAheadOptions::default().max_open as u64 + 1) * stats.largest_chunk;
    assert!(stats.peak_buffered <= budget_bytes + slack, "read ahead {} bytes under a budget of {budget_bytes}: {stats:?}", stats.peak_buffered);
    assert!(stats.peak_buffered > 0, "nothing was read ahead");
    assert!(budget.peak() <= budget.total() && budget.peak() > 0, "budget peak {} of {}", budget.peak(), budget.total());
    assert_eq!(budget.held(), 0, "bytes still held after everything ended");
    eprintln!("budget {budget_bytes}: peak held {}, open-ahead peak buffered {} ({stats:?})", budget.peak(), stats.peak_buffered);
}
