//! Listing against a real `ferry serve`: pruning checked against a brute-force filter of
//! the full key list, per-directory listing against the same, and key-range parallel
//! listing equal to the plain listing (same keys, same order) on layouts with odd keys.

use crate::sched_support;

use bytes::Bytes;
use ferry_engine::listing::{dir_of, list_flat_pruned, list_parallel, list_per_directory, ListOptions};
use ferry_engine::Engine;
use ferry_store::ObjectStoreExt;
use ferry_store::{ListParams, Mode, ObjectRef, PutParams, RetryConfig, S3Client};
use futures_util::StreamExt;
use sched_support::{client, server};
use std::collections::BTreeSet;

async fn put_all(c: &S3Client, bucket: &str, keys: &[String]) {
    futures_util::stream::iter(keys.iter())
        .map(|k| {
            let c = c.clone();
            let o = ObjectRef::new(bucket, k.as_str());
            async move {
                c.put_object(&o, Bytes::from_static(b"x"), PutParams { checksum: None, ..PutParams::default() })
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
}

fn layout(parent: &str, dirs: usize, files: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for d in 0..dirs {
        for f in 0..files {
            keys.push(format!("{parent}part={d:05}/file-{f}.parquet"));
        }
    }
    keys
}

async fn plain(c: &S3Client, bucket: &str, prefix: &str) -> Vec<String> {
    let (objects, _) =
        c.list_all(bucket, ListParams { prefix: Some(prefix.into()), ..ListParams::default() }).await.unwrap();
    objects.into_iter().map(|o| o.key).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_and_per_directory_match_a_brute_force_filter() {
    let srv = server(|_| {});
    let (c, counts) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("prune").await.unwrap();
    let mut keys = layout("t/", 300, 6);
    // Keys the filter must leave out: nested below a directory of interest, beside the
    // parent, at the root, and in a directory whose name extends one of interest.
    keys.extend(
        [
            "t/part=00007/sub/deep.parquet",
            "t/part=00007x/odd",
            "u/part=00007/file-0.parquet",
            "root-key",
            "t/part=00014/",
            "t/part=00014//x",
        ]
        .map(String::from),
    );
    put_all(&c, "prune", &keys).await;
    let all = plain(&c, "prune", "").await;
    assert_eq!(all.len(), keys.len());

    let mut interest: Vec<String> = (0..300).step_by(7).map(|d| format!("t/part={d:05}/")).collect();
    interest.push("t/part=99999/".into()); // no such directory
    interest.push("u/part=00007/".into()); // outside the parent
    interest.push("t/part=00021".into()); // no trailing '/': normalised
    interest.push("t/part=00014//".into());
    interest.reverse(); // any order
    let wanted: BTreeSet<String> =
        interest.iter().map(|d| if d.ends_with('/') { d.clone() } else { format!("{d}/") }).collect();
    let brute = |parent: &str| -> Vec<String> {
        all.iter().filter(|k| k.starts_with(parent) && wanted.contains(dir_of(k))).cloned().collect()
    };

    for page_size in [1000, 37] {
        let opts = ListOptions { page_size, ..ListOptions::default() };
        let before = counts.get("LIST");
        let (got, stats) = list_flat_pruned(&Engine::new(c.clone()), "prune", "t/", interest.clone(), &opts)
            .collect_all()
            .await
            .unwrap();
        let got: Vec<String> = got.into_iter().map(|o| o.key).collect();
        assert_eq!(got, brute("t/"), "page size {page_size}");
        assert_eq!(counts.get("LIST") - before, stats.requests);
        // One flat pass at most: never more calls than pages of the parent.
        let under_parent = all.iter().filter(|k| k.starts_with("t/")).count() as u64;
        assert!(stats.requests <= under_parent.div_ceil(page_size as u64) + 1, "{stats:?}");
        assert_eq!(stats.keys_returned, got.len() as u64);

        // Per-directory: same directly-contained keys, one call per directory (+ pages).
        let before = counts.get("LIST");
        let (per_dir, stats) =
            list_per_directory(&Engine::new(c.clone()), "prune", interest.clone(), &opts).collect_all().await.unwrap();
        // Directory by directory (in directory order), so nested directories like
        // `x/` and `x//` come out grouped, not interleaved in key order.
        let mut per_dir: Vec<String> = per_dir.into_iter().map(|o| o.key).collect();
        per_dir.sort();
        let everywhere: Vec<String> = all.iter().filter(|k| wanted.contains(dir_of(k))).cloned().collect();
        assert_eq!(per_dir, everywhere);
        assert_eq!(counts.get("LIST") - before, stats.requests);
        assert!(stats.requests >= wanted.len() as u64);
    }

    // Nothing of interest: nothing listed at all.
    let (got, stats) =
        list_flat_pruned(&Engine::new(c.clone()), "prune", "t/", Vec::<String>::new(), &ListOptions::default())
            .collect_all()
            .await
            .unwrap();
    assert!(got.is_empty());
    assert_eq!(stats.requests, 0);
    // Only the first directory: the listing starts at it and stops right after it.
    let (got, stats) = list_flat_pruned(
        &Engine::new(c.clone()),
        "prune",
        "t/",
        vec!["t/part=00000/".to_string()],
        &ListOptions { page_size: 5, ..ListOptions::default() },
    )
    .collect_all()
    .await
    .unwrap();
    assert_eq!(got.len(), 6);
    assert!(stats.requests <= 2, "{stats:?}");
}

/// Keys that sort around the split points the planner guesses, unicode, runs of '/',
/// keys equal to boundary strings, numbered and hex-named layouts.
fn odd_keys() -> Vec<String> {
    let mut keys = layout("p/", 120, 3);
    for s in [
        "p/part=002",
        "p/part=01",
        "p/part=1",
        "p/q",
        "p/part=",
        "p/part=00099",
        "p/part=00100",
        "p/part=0010",
        "p/part=001000/x",
    ] {
        keys.push(s.into());
    }
    for i in 0..200u32 {
        keys.push(format!("p/h/{:08x}", i.wrapping_mul(2_654_435_761)));
    }
    for s in [
        "p/é",
        "p/éé/x",
        "p/中文/文件",
        "p/🦀/🦀🦀",
        "p/\u{FFFD}",
        "p/\u{E000}x",
        "p///",
        "p//a",
        "p/a//b",
        "p/~",
        "p/ ",
        "p/!x",
        "p/Z",
        "p/zz/z",
    ] {
        keys.push(s.into());
    }
    for i in 0..150 {
        keys.push(format!("p/d/2026-{:02}-{:02}/{i}", 1 + i % 12, 1 + i % 28));
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_listing_equals_the_plain_listing() {
    let srv = server(|_| {});
    let (c, counts) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("par").await.unwrap();
    let keys = odd_keys();
    put_all(&c, "par", &keys).await;
    put_all(&c, "par", &["before".to_string(), "q/after".to_string(), "p".to_string()]).await;
    let want = plain(&c, "par", "p/").await;
    assert_eq!(want.len(), keys.len());
    for (page_size, max_ranges, concurrency) in [(1000, 64, 16), (20, 64, 16), (7, 4, 2), (13, 1, 1), (3, 200, 32)] {
        let opts = ListOptions { page_size, max_ranges, concurrency, buffer_pages: 1 };
        let before = counts.get("LIST");
        let (got, stats) = list_parallel(&Engine::new(c.clone()), "par", "p/", &opts).collect_all().await.unwrap();
        let got: Vec<String> = got.into_iter().map(|o| o.key).collect();
        assert_eq!(got, want, "page {page_size}, max ranges {max_ranges}");
        assert_eq!(counts.get("LIST") - before, stats.requests);
        assert!(stats.keys_seen >= got.len() as u64);
        if page_size < 50 && max_ranges > 2 {
            assert!(stats.ranges > 1, "no split happened: {stats:?}");
        }
    }
    // A prefix with no keys, and the whole bucket.
    let (got, stats) =
        list_parallel(&Engine::new(c.clone()), "par", "nothing/", &ListOptions::default()).collect_all().await.unwrap();
    assert!(got.is_empty());
    assert_eq!(stats.requests, 1);
    let (got, _) =
        list_parallel(&Engine::new(c.clone()), "par", "", &ListOptions { page_size: 11, ..ListOptions::default() })
            .collect_all()
            .await
            .unwrap();
    assert_eq!(got.into_iter().map(|o| o.key).collect::<Vec<_>>(), plain(&c, "par", "").await);
}

/// A listing of a page or a few costs no more LIST calls than the flat walk: a split
/// guesses boundaries, and each guessed range costs a call, so ranges wait for the
/// evidence of full pages (listing.rs, "Splitting follows the evidence"). Counted at the
/// transport, against a real server, on the numbered layout the planner guesses best and
/// on hex names it guesses worst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_listing_costs_no_more_lists_than_the_flat_walk_when_small() {
    let srv = server(|_| {});
    let (c, counts) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("few").await.unwrap();
    let hex = |prefix: &str, n: u32| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{:08x}", i.wrapping_mul(2_654_435_761))).collect()
    };
    let sets: Vec<(&str, Vec<String>)> = vec![
        ("n500/", layout("n500/", 100, 5)),
        ("n2000/", layout("n2000/", 400, 5)),
        ("n2500/", layout("n2500/", 500, 5)),
        ("h2500/", hex("h2500/", 2_500)),
    ];
    for (_, keys) in &sets {
        put_all(&c, "few", keys).await;
    }
    for (prefix, keys) in &sets {
        let before = counts.get("LIST");
        let flat = plain(&c, "few", prefix).await;
        let flat_lists = counts.get("LIST") - before;
        assert_eq!(flat.len(), keys.len());
        assert_eq!(flat_lists, (keys.len() as u64).div_ceil(1000), "{prefix}: the flat walk's pages");

        let before = counts.get("LIST");
        let (got, stats) =
            list_parallel(&Engine::new(c.clone()), "few", prefix, &ListOptions::default()).collect_all().await.unwrap();
        let lists = counts.get("LIST") - before;
        assert_eq!(got.into_iter().map(|o| o.key).collect::<Vec<_>>(), flat, "{prefix}");
        assert_eq!(lists, stats.requests, "{prefix}");
        assert!(lists <= flat_lists, "{prefix}: {lists} LISTs where the flat walk took {flat_lists}: {stats:?}");
    }
    // 500 keys: one call, one range.
    let (_, stats) =
        list_parallel(&Engine::new(c.clone()), "few", "n500/", &ListOptions::default()).collect_all().await.unwrap();
    assert_eq!((stats.requests, stats.ranges), (1, 1));
}

/// A consumer that reads slowly never makes the listing hold more than
/// max_ranges x (buffer_pages + 1) pages: checked through the keys received from the
/// server while the consumer has taken only a few.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_listing_memory_is_bounded_by_ranges() {
    let srv = server(|_| {});
    let (c, _) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("bound").await.unwrap();
    let keys = layout("b/", 500, 6);
    put_all(&c, "bound", &keys).await;
    let opts = ListOptions { page_size: 10, max_ranges: 5, buffer_pages: 1, concurrency: 8 };
    let mut listing = list_parallel(&Engine::new(c.clone()), "bound", "b/", &opts);
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(listing.next().await.unwrap().unwrap().key);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let stats = listing.stats();
    let bound = (opts.max_ranges * (opts.buffer_pages + 1) + opts.concurrency) as u64 * opts.page_size as u64;
    assert!(stats.keys_seen <= bound, "{stats:?} > {bound}");
    while let Some(e) = listing.next().await {
        taken.push(e.unwrap().key);
    }
    assert_eq!(taken, keys);
}

/// The 17,520 x 6 layout of the `listing` workload (105,120 keys): flat + merge join takes 106 calls
/// where per-directory takes 17,520, and key-range parallel listing returns the same
/// keys in the same order as the plain listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_size_layout() {
    let srv = server(|_| {});
    let (c, _) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("lab").await.unwrap();
    let keys = layout("listing/", 17_520, 6);
    put_all(&c, "lab", &keys).await;
    let dirs: Vec<String> = (0..17_520).map(|d| format!("listing/part={d:05}/")).collect();
    let (got, stats) =
        list_flat_pruned(&Engine::new(c.clone()), "lab", "listing/", dirs.clone(), &ListOptions::default())
            .collect_all()
            .await
            .unwrap();
    assert_eq!(got.len(), keys.len());
    assert!(got.iter().zip(&keys).all(|(g, k)| &g.key == k));
    assert_eq!(stats.requests, 106);
    // Pruned to every tenth partition: the brute-force filter agrees.
    let some: BTreeSet<String> = dirs.iter().step_by(10).cloned().collect();
    let (got, _) =
        list_flat_pruned(&Engine::new(c.clone()), "lab", "listing/", some.iter().cloned(), &ListOptions::default())
            .collect_all()
            .await
            .unwrap();
    let brute: Vec<&String> = keys.iter().filter(|k| some.contains(dir_of(k))).collect();
    assert_eq!(got.iter().map(|o| &o.key).collect::<Vec<_>>(), brute);
    let (par, stats) =
        list_parallel(&Engine::new(c.clone()), "lab", "listing/", &ListOptions::default()).collect_all().await.unwrap();
    assert_eq!(par.len(), keys.len());
    assert!(par.iter().zip(&keys).all(|(g, k)| &g.key == k));
    assert!(stats.ranges > 1);
    eprintln!("key-range parallel on 17,520 x 6: {stats:?}");
}
