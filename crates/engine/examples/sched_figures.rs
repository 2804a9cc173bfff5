//! Side-by-side figures for the scheduler's pieces against an in-process `ferry serve
//! --profile s3` (LIST p50 60 ms, first byte p50 30 ms, 90 MB/s per connection), until
//! the lab (`ferry bench`) runs these workloads itself. Quick sizes only; the two
//! strategies of each workload alternate (A B A B) in one process, as the lab's
//! rule for comparisons asks (side by side, same run).
//!
//! ```sh
//! cargo run --release -p ferry-engine --example sched_figures -- listing    # 1,752 x 6 keys
//! cargo run --release -p ferry-engine --example sched_figures -- listing-full # 17,520 x 6, without per-directory
//! cargo run --release -p ferry-engine --example sched_figures -- vectored   # 2,000 ranges of 4-64 KiB in 256 MiB
//! cargo run --release -p ferry-engine --example sched_figures -- open-ahead # 400 x 640 KB in order
//! ```

use bytes::Bytes;
use ferry_engine::listing::{list_flat_pruned, list_parallel, list_per_directory, ListOptions};
use ferry_engine::openahead::{OpenAhead, OpenAheadOptions};
use ferry_engine::ranges::{get_ranges, CoalescePolicy, GapEstimator, RangesOptions};
use ferry_engine::Engine;
use ferry_server::{BackgroundServer, Profile, ServeConfig};
use ferry_store::{Credentials, CredentialsSource, GetParams, Mode, ObjectRef, PutParams, PutPayload, S3Client};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Instant;

const REPEATS: usize = 2;

#[tokio::main]
async fn main() {
    let what = std::env::args().nth(1).unwrap_or_default();
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap());
    config.profile = Profile::S3;
    config.emulation = Profile::S3.emulation();
    let server = BackgroundServer::start(config).unwrap();
    let c = Engine::new(
        S3Client::builder(server.url())
            .region("us-east-1")
            .credentials(CredentialsSource::Explicit(Credentials::new("ferry", "ferry-secret")))
            .mode(Mode::H1Pool)
            .build()
            .unwrap(),
    );
    c.create_bucket("figures").await.unwrap();
    match what.as_str() {
        "listing" => listing(&c, 1_752, true).await,
        "listing-full" => listing(&c, 17_520, false).await,
        "vectored" => vectored(&c).await,
        "open-ahead" => open_ahead(&c).await,
        _ => eprintln!("usage: sched_figures listing|vectored|open-ahead"),
    }
}

async fn put_many(c: &Engine, objects: &[(ObjectRef, Bytes)]) {
    futures_util::stream::iter(objects)
        .map(|(o, b)| {
            let c = c.clone();
            async move { c.put(o, PutPayload::Bytes(b.clone()), PutParams::default()).await.unwrap() }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
}

async fn listing(c: &Engine, dirs: usize, per_directory: bool) {
    let dirs: Vec<String> = (0..dirs).map(|d| format!("listing/part={d:05}/")).collect();
    let objects: Vec<(ObjectRef, Bytes)> = dirs
        .iter()
        .flat_map(|d| {
            (0..6).map(move |f| (ObjectRef::new("figures", format!("{d}file-{f}.parquet")), Bytes::from_static(b"x")))
        })
        .collect();
    put_many(c, &objects).await;
    let opts = ListOptions::default();
    for _ in 0..REPEATS {
        if per_directory {
            let t = Instant::now();
            let (e, s) = list_per_directory(c, "figures", dirs.clone(), &opts).collect_all().await.unwrap();
            println!(
                "per-directory ({} at once): {} keys, {} calls, {:?}",
                opts.concurrency,
                e.len(),
                s.requests,
                t.elapsed()
            );
        }
        let t = Instant::now();
        let (e, s) = list_flat_pruned(c, "figures", "listing/", dirs.clone(), &opts).collect_all().await.unwrap();
        println!("flat + merge join: {} keys, {} calls, {:?}", e.len(), s.requests, t.elapsed());
        let t = Instant::now();
        let (e, s) = list_parallel(c, "figures", "listing/", &opts).collect_all().await.unwrap();
        println!(
            "key-range parallel: {} keys, {} calls, {} ranges, {} keys received, {:?}",
            e.len(),
            s.requests,
            s.ranges,
            s.keys_seen,
            t.elapsed()
        );
    }
}

async fn vectored(c: &Engine) {
    let len: u64 = 256 << 20;
    let object = ObjectRef::new("figures", "table.hfile");
    c.put(
        &object,
        PutPayload::Bytes(Bytes::from(vec![7u8; len as usize])),
        PutParams { checksum: None, ..PutParams::default() },
    )
    .await
    .unwrap();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let ranges: Vec<std::ops::Range<u64>> = (0..2_000)
        .map(|_| {
            let l = 4096 + next(60 * 1024);
            let s = next(len - l);
            s..s + l
        })
        .collect();
    let estimator = Arc::new(GapEstimator::new());
    for _ in 0..REPEATS {
        for (name, policy) in [
            ("no hole merged (max_gap 0)", Some(CoalescePolicy { max_gap: 0, max_span: u64::MAX })),
            ("coalesced (measured gap)", None),
        ] {
            let t = Instant::now();
            let opts =
                RangesOptions { policy, estimator: estimator.clone(), concurrency: 32, ..RangesOptions::default() };
            let out = get_ranges(c, &object, &ranges, &opts).await.unwrap();
            println!(
                "{name}: {} GETs, {} bytes fetched, {} over-read, {:?} (gap now {} B)",
                out.stats.requests,
                out.stats.bytes_fetched,
                out.stats.over_read,
                t.elapsed(),
                estimator.max_gap()
            );
        }
    }
}

async fn open_ahead(c: &Engine) {
    let objects: Vec<(ObjectRef, Bytes)> = (0..400)
        .map(|i| (ObjectRef::new("figures", format!("scan/{i:05}")), Bytes::from(vec![1u8; 640_000])))
        .collect();
    put_many(c, &objects).await;
    let refs: Vec<ObjectRef> = objects.iter().map(|(o, _)| o.clone()).collect();
    for _ in 0..REPEATS {
        let t = Instant::now();
        for o in &refs {
            c.get(o, GetParams::default()).await.unwrap().body.collect().await.unwrap();
        }
        println!("open on demand: {} objects, {:?}", refs.len(), t.elapsed());
        let t = Instant::now();
        let mut reader = OpenAhead::from_list(c, refs.clone(), OpenAheadOptions::default());
        while let Some(o) = reader.next().await {
            o.unwrap().collect().await.unwrap();
        }
        println!("open-ahead: {} objects, {:?}, {:?}", refs.len(), t.elapsed(), reader.stats());
        let t = Instant::now();
        let fixed = OpenAheadOptions { max_open: ferry_engine::openahead::START_OPEN, ..OpenAheadOptions::default() };
        let mut reader = OpenAhead::from_list(c, refs.clone(), fixed);
        while let Some(o) = reader.next().await {
            o.unwrap().collect().await.unwrap();
        }
        println!("open-ahead, window fixed at 8: {} objects, {:?}, {:?}", refs.len(), t.elapsed(), reader.stats());
    }
}
