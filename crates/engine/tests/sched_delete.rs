//! `delete_many` against a real `ferry serve`: thousands of keys in 1,000-key requests,
//! the server's injected 500s and 503s retried, keys XML cannot carry deleted anyway,
//! permanent per-key errors reported after one attempt, transient ones retried.

use crate::sched_support;

use bytes::Bytes;
use ferry_engine::delete::{delete_many, DeleteOptions};
use ferry_engine::Engine;
use ferry_store::ObjectStoreExt;
use ferry_store::{ListParams, Mode, ObjectRef, PutParams, RetryConfig, S3Client};
use futures_util::StreamExt;
use sched_support::{client, client_with_per_key_faults, fast_retry, server};
use std::time::Duration;

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
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

async fn remaining(c: &S3Client, bucket: &str) -> Vec<String> {
    c.list_all(bucket, ListParams::default()).await.unwrap().0.into_iter().map(|o| o.key).collect()
}

fn opts(attempts: u32) -> DeleteOptions {
    DeleteOptions { attempts, retry_delay: Duration::from_millis(2), ..DeleteOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_thousands_including_keys_xml_cannot_carry() {
    let srv = server(|_| {});
    let (c, counts) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("del").await.unwrap();
    let mut keys: Vec<String> = (0..2_500).map(|i| format!("t/.hoodie/f-{i:05}")).collect();
    let odd = ["ctl\u{1}key", "esc\u{1b}[0m", "nonchar\u{FFFF}", "tab\tand\nnewline", "ü/中文/🦀"];
    keys.extend(odd.iter().map(|s| s.to_string()));
    put_all(&c, "del", &keys).await;
    let report = delete_many(&Engine::new(c.clone()), "del", futures_util::stream::iter(keys.clone()), &opts(3)).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.deleted, keys.len() as u64);
    assert!(remaining(&c, "del").await.is_empty());
    // 3 DeleteObjects (2,505 keys) + one DeleteObject per key outside XML 1.0's characters.
    assert_eq!(report.requests, 3 + 3);
    assert_eq!(counts.get("DELETE batch"), 3);
    assert_eq!(counts.get("DELETE object"), 3);
    // Keys that do not exist count as deleted, as on S3.
    let report = delete_many(
        &Engine::new(c.clone()),
        "del",
        futures_util::stream::iter(vec!["never-was".to_string()]),
        &opts(3),
    )
    .await;
    assert_eq!((report.deleted, report.failed.len()), (1, 0));
}

/// 50% of requests fail (30% 500 InternalError, 20% 503 SlowDown) and the client does
/// not retry, so this layer's attempts are the only retries: all keys still go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_faults_are_retried_per_batch() {
    let srv = server(|c| {
        c.faults.error_500_rate = 0.3;
        c.faults.error_503_rate = 0.2;
        c.faults.seed = 11;
    });
    // Set up through a retrying client (with a budget for ~5,000 retries), delete through
    // one that does not retry.
    let (setup, _) = client(&srv, Mode::Auto, RetryConfig { budget_tokens: 1_000_000, ..fast_retry(30) });
    setup.create_bucket("flaky").await.unwrap();
    let keys: Vec<String> = (0..5_000).map(|i| format!("old/{i}")).collect();
    put_all(&setup, "flaky", &keys).await;
    let (c, counts) = client(&srv, Mode::Auto, RetryConfig::none());
    // 0.5^25: no batch runs out of attempts in practice.
    let report =
        delete_many(&Engine::new(c.clone()), "flaky", futures_util::stream::iter(keys.clone()), &opts(25)).await;
    assert!(report.failed.is_empty(), "{:?}", &report.failed[..report.failed.len().min(3)]);
    assert_eq!(report.deleted, 5_000);
    assert!(report.requests >= 5);
    assert_eq!(report.requests, counts.get("DELETE batch"), "one wire request per attempt");
    assert!(remaining(&setup, "flaky").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_reported_with_their_codes() {
    // Every request fails: each key reported once, after exactly `attempts` requests per batch.
    let srv = server(|c| c.faults.error_500_rate = 1.0);
    let (c, counts) = client(&srv, Mode::Auto, RetryConfig::none());
    let keys: Vec<String> = (0..1_500).map(|i| format!("k{i}")).collect();
    let report = delete_many(&Engine::new(c.clone()), "any", futures_util::stream::iter(keys.clone()), &opts(3)).await;
    assert_eq!(report.deleted, 0);
    assert_eq!(report.failed.len(), 1_500);
    assert!(report.failed.iter().all(|f| f.code == "InternalError" && !f.message.is_empty()));
    let mut failed: Vec<String> = report.failed.iter().map(|f| f.key.clone()).collect();
    failed.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(failed, want);
    assert_eq!(report.requests, 2 * 3);
    assert_eq!(counts.get("DELETE batch"), 2 * 3);

    // Permanent per-key errors are reported after one attempt: a key over 1,024 bytes,
    // and keys of the server's read-only synthetic bucket.
    let srv = server(|_| {});
    let (c, counts) = client(&srv, Mode::Auto, RetryConfig::default());
    c.create_bucket("perm").await.unwrap();
    put_all(&c, "perm", &["ok".to_string()]).await;
    let long = "x".repeat(1_100);
    let report = delete_many(
        &Engine::new(c.clone()),
        "perm",
        futures_util::stream::iter(vec!["ok".to_string(), long.clone()]),
        &opts(5),
    )
    .await;
    assert_eq!(report.deleted, 1);
    assert_eq!(report.failed.len(), 1);
    assert_eq!((report.failed[0].key.as_str(), report.failed[0].code.as_str()), (long.as_str(), "KeyTooLongError"));
    assert_eq!(report.requests, 1);
    let report = delete_many(
        &Engine::new(c.clone()),
        "synthetic",
        futures_util::stream::iter(vec!["1MiB/a".to_string(), "1MiB/b".to_string()]),
        &opts(5),
    )
    .await;
    assert_eq!(report.failed.iter().map(|f| f.code.as_str()).collect::<Vec<_>>(), vec!["AccessDenied", "AccessDenied"]);
    assert_eq!(counts.get("DELETE batch"), 2);
}

/// Transient per-key errors (InternalError inside a 200 DeleteResult; injected by a
/// wrapper, see sched_support) are retried for those keys only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_per_key_errors_are_retried() {
    let srv = server(|_| {});
    let (c, counts) = client_with_per_key_faults(&srv, 1_500);
    c.create_bucket("perkey").await.unwrap();
    let keys: Vec<String> = (0..2_000).map(|i| format!("p/{i}")).collect();
    put_all(&c, "perkey", &keys).await;
    let options = DeleteOptions { concurrency: 1, ..opts(3) };
    let report =
        delete_many(&Engine::new(c.clone()), "perkey", futures_util::stream::iter(keys.clone()), &options).await;
    assert!(report.failed.is_empty(), "{:?}", &report.failed[..report.failed.len().min(3)]);
    assert_eq!(report.deleted, 2_000);
    // Batch 1: 1,000 faulted, retried, 500 faulted again, retried; batch 2: clean.
    assert_eq!(report.requests, 3 + 1);
    assert_eq!(counts.get("DELETE batch"), 4);
    assert!(remaining(&c, "perkey").await.is_empty());

    // With a single attempt they are reported instead.
    let (c, _) = client_with_per_key_faults(&srv, 10);
    put_all(&c, "perkey", &keys[..20]).await;
    let report =
        delete_many(&Engine::new(c.clone()), "perkey", futures_util::stream::iter(keys[..20].to_vec()), &opts(1)).await;
    assert_eq!(report.failed.len(), 10);
    assert!(report.failed.iter().all(|f| f.code == "InternalError"));
}
