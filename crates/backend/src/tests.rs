//! Conformance tests written once and generated for every storage mode (`memory`,
//! `disk`) by `conformance!`, plus disk-only tests (restart, crash, path escape).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::StreamExt;

use crate::*;

/// A backend plus whatever keeps it alive (the temp dir of a disk backend).
struct Fixture {
    backend: Backend,
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    fn memory() -> Fixture {
        Fixture { backend: Backend::memory().with_synthetic_bucket("synthetic"), _dir: None }
    }
    async fn disk() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::open_disk(dir.path()).await.unwrap().with_synthetic_bucket("synthetic");
        Fixture { backend, _dir: Some(dir) }
    }
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let f = super::Fixture::memory();
                super::$name(&f.backend).await;
            })*
        }
        mod disk {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let f = super::Fixture::disk().await;
                super::$name(&f.backend).await;
            })*
        }
    };
}

conformance!(
    buckets_lifecycle,
    bucket_not_empty,
    put_get_head_roundtrip,
    empty_object,
    ranges,
    chunks_are_bounded,
    replace_does_not_disturb_open_stream,
    size_mismatch_rejected,
    dropped_writer_discards,
    missing_bucket_errors,
    invalid_keys,
    odd_keys_roundtrip,
    delete_object_semantics,
    listing,
    multipart_lifecycle,
    multipart_errors,
    abort_multipart,
    completes_of_one_upload_at_once,
    synthetic_bucket,
    concurrent_puts_same_key,
    versioning_state_is_kept,
);

fn meta(key: &str, size: u64) -> ObjectMeta {
    ObjectMeta {
        key: key.to_string(),
        size,
        etag: format!("\"etag-{key}-{size}\""),
        last_modified: SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(1_700_000_000_123_456_789),
        content_type: Some("text/plain".into()),
        headers: vec![("cache-control".into(), "no-cache".into())],
        user_meta: vec![("color".into(), "blue".into())],
        checksums: vec![("CRC32C".into(), "AAAAAA==".into())],
        parts_count: None,
        part_sizes: Vec::new(),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

async fn put(b: &Backend, bucket: &str, key: &str, data: &[u8]) {
    let mut w = b.body_writer(bucket).await.unwrap();
    // Mixed chunk sizes: tiny ones fill a block bit by bit, big ones span blocks.
    let mut rest = data;
    let sizes = [1usize, 100, 40_000, 7, 300_000];
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes[i % sizes.len()].min(rest.len());
        w.write(Bytes::copy_from_slice(&rest[..n])).await.unwrap();
        rest = &rest[n..];
        i += 1;
    }
    b.put_object(bucket, w, meta(key, data.len() as u64)).await.unwrap();
}

async fn get(b: &Backend, bucket: &str, key: &str, range: Option<(u64, u64)>) -> Vec<u8> {
    let (_, s) = b.get_object(bucket, key, range).await.unwrap();
    s.collect_vec().await.unwrap()
}

async fn buckets_lifecycle(b: &Backend) {
    b.create_bucket("zeta").await.unwrap();
    b.create_bucket("alpha").await.unwrap();
    let names: Vec<String> = b.list_buckets().await.into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["alpha", "synthetic", "zeta"]);
    b.head_bucket("alpha").await.unwrap();
    assert!(matches!(b.create_bucket("alpha").await, Err(BackendError::BucketAlreadyOwnedByYou)));
    assert!(matches!(b.create_bucket("synthetic").await, Err(BackendError::BucketAlreadyOwnedByYou)));
    for bad in ["ab", "Upper", "-abc", "abc-", "a..b", "192.168.1.1", "a_b", ".abc", &"a".repeat(64)] {
        assert!(matches!(b.create_bucket(bad).await, Err(BackendError::InvalidBucketName(_))), "{bad}");
    }
    b.delete_bucket("alpha").await.unwrap();
    assert!(matches!(b.head_bucket("alpha").await, Err(BackendError::NoSuchBucket)));
    assert!(matches!(b.delete_bucket("alpha").await, Err(BackendError::NoSuchBucket)));
    // A deleted name can be created again, and starts empty.
    b.create_bucket("alpha").await.unwrap();
    assert!(b.list_objects("alpha", "", None, None, 10).await.unwrap().objects.is_empty());
    let names: Vec<String> = b.list_buckets().await.into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["alpha", "synthetic", "zeta"]);
}

async fn bucket_not_empty(b: &Backend) {
    b.create_bucket("full").await.unwrap();
    put(b, "full", "k", b"x").await;
    assert!(matches!(b.delete_bucket("full").await, Err(BackendError::BucketNotEmpty)));
    b.delete_object("full", "k").await.unwrap();
    // An unfinished upload does not keep the bucket: S3 deletes it with the bucket.
    let id = b.create_multipart("full", meta("m", 0)).await.unwrap();
    put_part(b, "full", "m", &id, 1, b"part one").await;
    b.delete_bucket("full").await.unwrap();
    assert!(matches!(b.list_uploads("full").await, Err(BackendError::NoSuchBucket)));
    // A bucket made again under the name does not inherit the upload.
    b.create_bucket("full").await.unwrap();
    assert!(b.list_uploads("full").await.unwrap().is_empty());
    assert!(matches!(b.upload_info("full", "m", &id).await, Err(BackendError::NoSuchUpload)));
    assert_eq!(b.memory_usage().parts, 0);
    b.delete_bucket("full").await.unwrap();
}

async fn versioning_state_is_kept(b: &Backend) {
    b.create_bucket("ver").await.unwrap();
    assert_eq!(b.bucket_versioning("ver").await.unwrap(), None);
    b.set_bucket_versioning("ver", "Suspended").await.unwrap();
    assert_eq!(b.bucket_versioning("ver").await.unwrap().as_deref(), Some("Suspended"));
    assert!(matches!(b.bucket_versioning("nope").await, Err(BackendError::NoSuchBucket)));
}

async fn put_get_head_roundtrip(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    let data = pattern(1_000_003, 7);
    put(b, "data", "dir/obj", &data).await;
    let head = b.head_object("data", "dir/obj").await.unwrap();
    assert_eq!(head, meta("dir/obj", data.len() as u64));
    let (m, s) = b.get_object("data", "dir/obj", None).await.unwrap();
    assert_eq!(m, head);
    assert_eq!(s.remaining_bytes(), data.len() as u64);
    assert_eq!(s.collect_vec().await.unwrap(), data);
    // Replace with different content and metadata.
    put(b, "data", "dir/obj", b"short").await;
    assert_eq!(get(b, "data", "dir/obj", None).await, b"short");
    assert_eq!(b.head_object("data", "dir/obj").await.unwrap().size, 5);
}

async fn empty_object(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    let w = b.body_writer("data").await.unwrap();
    b.put_object("data", w, meta("empty", 0)).await.unwrap();
    assert_eq!(b.head_object("data", "empty").await.unwrap().size, 0);
    assert!(get(b, "data", "empty", None).await.is_empty());
}

async fn ranges(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    let data = pattern(700_001, 3);
    put(b, "data", "r", &data).await;
    for (s, e) in [(0u64, 0u64), (0, 9), (5, 5), (1, 300_000), (262_143, 262_145), (699_000, 700_000), (0, 700_000)] {
        assert_eq!(get(b, "data", "r", Some((s, e))).await, data[s as usize..=e as usize], "{s}-{e}");
    }
    // A range past the end (object replaced after validation) is clamped.
    assert_eq!(get(b, "data", "r", Some((700_000, 800_000))).await, data[700_000..]);
}

async fn chunks_are_bounded(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    let data = pattern(3 * MAX_CHUNK_BYTES + 5, 1);
    let mut w = b.body_writer("data").await.unwrap();
    w.write(Bytes::from(data.clone())).await.unwrap();
    b.put_object("data", w, meta("big", data.len() as u64)).await.unwrap();
    let (_, mut s) = b.get_object("data", "big", None).await.unwrap();
    let mut got = Vec::new();
    while let Some(c) = s.next().await {
        let c = c.unwrap();
        assert!(!c.is_empty() && c.len() <= MAX_CHUNK_BYTES, "chunk of {}", c.len());
        got.extend_from_slice(&c);
    }
    assert_eq!(got, data);
}

async fn replace_does_not_disturb_open_stream(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    let v1 = pattern(4 * MAX_CHUNK_BYTES, 1);
    put(b, "data", "k", &v1).await;
    let (m, mut s) = b.get_object("data", "k", None).await.unwrap();
    let first = s.next().await.unwrap().unwrap();
    put(b, "data", "k", &pattern(100, 2)).await;
    let mut got = first.to_vec();
    got.extend(s.collect_vec().await.unwrap());
    assert_eq!(got, v1);
    assert_eq!(m.size, v1.len() as u64);
    // Same for delete.
    let (_, s) = b.get_object("data", "k", None).await.unwrap();
    b.delete_object("data", "k").await.unwrap();
    assert_eq!(s.collect_vec().await.unwrap(), pattern(100, 2));
}

async fn size_mismatch_rejected(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    let mut w = b.body_writer("data").await.unwrap();
    w.write(Bytes::from_static(b"12345")).await.unwrap();
    assert_eq!(w.written(), 5);
    let r = b.put_object("data", w, meta("k", 6)).await;
    assert!(matches!(r, Err(BackendError::SizeMismatch { expected: 6, written: 5 })), "{r:?}");
    assert!(matches!(b.head_object("data", "k").await, Err(BackendError::NoSuchKey)));
}

async fn dropped_writer_discards(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    let mut w = b.body_writer("data").await.unwrap();
    w.write(Bytes::from(vec![1u8; 3 << 20])).await.unwrap();
    drop(w);
    assert!(b.list_objects("data", "", None, None, 10).await.unwrap().objects.is_empty());
}

async fn missing_bucket_errors(b: &Backend) {
    assert!(matches!(b.head_bucket("nope").await, Err(BackendError::NoSuchBucket)));
    assert!(matches!(b.body_writer("nope").await, Err(BackendError::NoSuchBucket)));
    assert!(matches!(b.head_object("nope", "k").await, Err(BackendError::NoSuchBucket)));
    assert!(matches!(b.get_object("nope", "k", None).await, Err(BackendError::NoSuchBucket)));
    assert!(matches!(b.delete_object("nope", "k").await, Err(BackendError::NoSuchBucket)));
    assert!(matches!(b.list_objects("nope", "", None, None, 5).await, Err(BackendError::NoSuchBucket)));
    assert!(matches!(b.create_multipart("nope", meta("k", 0)).await, Err(BackendError::NoSuchBucket)));
    assert!(matches!(b.list_uploads("nope").await, Err(BackendError::NoSuchBucket)));
    // The bucket vanishing between body_writer and put_object.
    b.create_bucket("brief").await.unwrap();
    let w = b.body_writer("brief").await.unwrap();
    b.delete_bucket("brief").await.unwrap();
    assert!(matches!(b.put_object("brief", w, meta("k", 0)).await, Err(BackendError::NoSuchBucket)));
}

async fn invalid_keys(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    for bad in [String::new(), "k".repeat(1025), "a\0b".to_string()] {
        let w = b.body_writer("data").await.unwrap();
        assert!(matches!(b.put_object("data", w, meta(&bad, 0)).await, Err(BackendError::InvalidKey(_))));
        assert!(matches!(b.create_multipart("data", meta(&bad, 0)).await, Err(BackendError::InvalidKey(_))));
        assert!(matches!(b.head_object("data", &bad).await, Err(BackendError::InvalidKey(_))));
    }
    put(b, "data", &"k".repeat(1024), b"max").await;
    assert_eq!(get(b, "data", &"k".repeat(1024), None).await, b"max");
}

const ODD_KEYS: &[&str] = &[
    "../../etc/passwd",
    "/abs",
    "a/../../b",
    "..",
    ".",
    "a//b",
    "A",
    "a",
    "é/\u{10FFFF}/\u{1F600}",
    "with space and ?#%&=+",
    "back\\slash",
    "line\nbreak",
];

async fn odd_keys_roundtrip(b: &Backend) {
    b.create_bucket("odd").await.unwrap();
    let long = "x/".repeat(512);
    let mut keys: Vec<&str> = ODD_KEYS.to_vec();
    keys.push(&long);
    for (i, k) in keys.iter().enumerate() {
        put(b, "odd", k, &pattern(10 + i, i as u8)).await;
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(get(b, "odd", k, None).await, pattern(10 + i, i as u8), "{k:?}");
    }
    let listed: Vec<String> =
        b.list_objects("odd", "", None, None, 1000).await.unwrap().objects.into_iter().map(|m| m.key).collect();
    let mut want: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    want.sort();
    assert_eq!(listed, want);
}

async fn delete_object_semantics(b: &Backend) {
    b.create_bucket("data").await.unwrap();
    b.delete_object("data", "missing").await.unwrap();
    put(b, "data", "k", b"v").await;
    b.delete_object("data", "k").await.unwrap();
    assert!(matches!(b.head_object("data", "k").await, Err(BackendError::NoSuchKey)));
    assert!(matches!(b.get_object("data", "k", None).await, Err(BackendError::NoSuchKey)));
    b.delete_object("data", "k").await.unwrap();
}

async fn listing(b: &Backend) {
    b.create_bucket("list").await.unwrap();
    for k in ["a/1", "a/2", "b", "c/x/1", "c/y", "d"] {
        put(b, "list", k, k.as_bytes()).await;
    }
    let p = b.list_objects("list", "", Some("/"), None, 1000).await.unwrap();
    assert_eq!(p.common_prefixes, ["a/", "c/"]);
    assert_eq!(p.objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["b", "d"]);
    assert!(!p.is_truncated && p.next_marker.is_none());
    assert_eq!(p.objects[0], meta("b", 1));

    let p = b.list_objects("list", "c/", Some("/"), None, 1000).await.unwrap();
    assert_eq!(p.common_prefixes, ["c/x/"]);
    assert_eq!(p.objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["c/y"]);

    let p = b.list_objects("list", "", Some("/"), None, 2).await.unwrap();
    assert!(p.is_truncated);
    assert_eq!(p.next_marker.as_deref(), Some("b"));
    let p = b.list_objects("list", "", Some("/"), Some("b"), 2).await.unwrap();
    assert_eq!(p.common_prefixes, ["c/"]);
    assert_eq!(p.objects.len(), 1);
    assert!(!p.is_truncated);

    let p = b.list_objects("list", "", None, Some("a/2"), 1000).await.unwrap();
    assert_eq!(p.objects.len(), 4);
    assert_eq!(b.list_objects("list", "", None, None, 0).await.unwrap(), ListPage::default());
}

fn part_meta(n: u32, size: u64) -> PartMeta {
    PartMeta {
        part_number: n,
        size,
        etag: format!("\"part-{n}\""),
        md5: [n as u8; 16],
        last_modified: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000 + n as u64),
        checksums: vec![("SHA256".into(), format!("p{n}"))],
    }
}

async fn put_part(b: &Backend, bucket: &str, key: &str, id: &str, n: u32, data: &[u8]) {
    let mut w = b.body_writer(bucket).await.unwrap();
    w.write(Bytes::copy_from_slice(data)).await.unwrap();
    b.put_part(bucket, key, id, w, part_meta(n, data.len() as u64)).await.unwrap();
}

async fn multipart_lifecycle(b: &Backend) {
    b.create_bucket("mpu").await.unwrap();
    let template = meta("big/object", 0);
    let id = b.create_multipart("mpu", template.clone()).await.unwrap();
    assert!(id.bytes().all(|c| c.is_ascii_alphanumeric()), "{id}");
    let info = b.upload_info("mpu", "big/object", &id).await.unwrap();
    assert_eq!((info.key.as_str(), info.upload_id.as_str(), &info.meta), ("big/object", id.as_str(), &template));

    let p1 = pattern(300_000, 1);
    let p2_old = pattern(10, 9);
    let p2 = pattern(200_000, 2);
    let p3 = pattern(17, 3);
    put_part(b, "mpu", "big/object", &id, 3, &p3).await;
    put_part(b, "mpu", "big/object", &id, 1, &p1).await;
    put_part(b, "mpu", "big/object", &id, 2, &p2_old).await;
    put_part(b, "mpu", "big/object", &id, 2, &p2).await;
    let parts = b.list_parts("mpu", "big/object", &id).await.unwrap();
    assert_eq!(parts, vec![part_meta(1, 300_000), part_meta(2, 200_000), part_meta(3, 17)]);

    let id_b = b.create_multipart("mpu", meta("a-first", 0)).await.unwrap();
    let id_c = b.create_multipart("mpu", meta("big/object", 0)).await.unwrap();
    let ups = b.list_uploads("mpu").await.unwrap();
    let ups: Vec<(&str, &str)> = ups.iter().map(|u| (u.key.as_str(), u.upload_id.as_str())).collect();
    assert_eq!(ups, [("a-first", id_b.as_str()), ("big/object", id.as_str()), ("big/object", id_c.as_str())]);

    let total = (p1.len() + p2.len() + p3.len()) as u64;
    let mut m = meta("big/object", total);
    m.parts_count = Some(3);
    b.complete_multipart("mpu", "big/object", &id, &[1, 2, 3], m.clone()).await.unwrap();
    assert_eq!(b.head_object("mpu", "big/object").await.unwrap(), m);
    let mut want = p1.clone();
    want.extend(&p2);
    want.extend(&p3);
    assert_eq!(get(b, "mpu", "big/object", None).await, want);
    assert_eq!(get(b, "mpu", "big/object", Some((299_990, 300_010))).await, want[299_990..=300_010]);
    assert!(matches!(b.upload_info("mpu", "big/object", &id).await, Err(BackendError::NoSuchUpload)));
    assert!(matches!(b.list_parts("mpu", "big/object", &id).await, Err(BackendError::NoSuchUpload)));
    assert_eq!(b.list_uploads("mpu").await.unwrap().len(), 2);

    // Parts in a caller-chosen order (and a subset).
    put_part(b, "mpu", "a-first", &id_b, 5, b"five").await;
    put_part(b, "mpu", "a-first", &id_b, 6, b"six").await;
    put_part(b, "mpu", "a-first", &id_b, 7, b"unused").await;
    b.complete_multipart("mpu", "a-first", &id_b, &[6, 5], meta("a-first", 7)).await.unwrap();
    assert_eq!(get(b, "mpu", "a-first", None).await, b"sixfive");
}

async fn multipart_errors(b: &Backend) {
    b.create_bucket("mpu").await.unwrap();
    let id = b.create_multipart("mpu", meta("k", 0)).await.unwrap();
    assert!(matches!(b.upload_info("mpu", "other", &id).await, Err(BackendError::NoSuchUpload)));
    assert!(matches!(b.upload_info("mpu", "k", "deadbeef").await, Err(BackendError::NoSuchUpload)));
    assert!(matches!(b.upload_info("mpu", "k", "../../x").await, Err(BackendError::NoSuchUpload)));
    let w = b.body_writer("mpu").await.unwrap();
    assert!(matches!(b.put_part("mpu", "other", &id, w, part_meta(1, 0)).await, Err(BackendError::NoSuchUpload)));
    let mut w = b.body_writer("mpu").await.unwrap();
    w.write(Bytes::from_static(b"abc")).await.unwrap();
    assert!(matches!(
        b.put_part("mpu", "k", &id, w, part_meta(1, 4)).await,
        Err(BackendError::SizeMismatch { expected: 4, written: 3 })
    ));
    put_part(b, "mpu", "k", &id, 1, b"abc").await;
    assert!(matches!(
        b.complete_multipart("mpu", "k", &id, &[1, 2], meta("k", 3)).await,
        Err(BackendError::InvalidPart(2))
    ));
    assert!(matches!(
        b.complete_multipart("mpu", "k", &id, &[1], meta("k", 4)).await,
        Err(BackendError::SizeMismatch { .. })
    ));
    assert!(matches!(
        b.complete_multipart("mpu", "other", &id, &[1], meta("other", 3)).await,
        Err(BackendError::NoSuchUpload)
    ));
    // Still intact after the failures.
    b.complete_multipart("mpu", "k", &id, &[1], meta("k", 3)).await.unwrap();
    assert_eq!(get(b, "mpu", "k", None).await, b"abc");
}

/// Two Completes of one upload at once (a client's retry, or a new run's Complete while a
/// killed run's is still being assembled): one completes the object, the other finds the
/// upload gone (NoSuchUpload, as S3 answers for a completed upload), never a part missing
/// because the first removed it mid-read. An Abort racing a Complete likewise.
async fn completes_of_one_upload_at_once(b: &Backend) {
    b.create_bucket("mpu").await.unwrap();
    let parts: Vec<Vec<u8>> = (1..=8u8).map(|n| pattern(3 << 20, n)).collect();
    let whole: Vec<u8> = parts.concat();
    for round in 0..4 {
        let id = b.create_multipart("mpu", meta("k", 0)).await.unwrap();
        for (i, p) in parts.iter().enumerate() {
            put_part(b, "mpu", "k", &id, i as u32 + 1, p).await;
        }
        let numbers: Vec<u32> = (1..=8).collect();
        let complete = || b.complete_multipart("mpu", "k", &id, &numbers, meta("k", whole.len() as u64));
        let (first, second) = if round < 3 {
            tokio::join!(complete(), complete())
        } else {
            tokio::join!(complete(), b.abort_multipart("mpu", "k", &id))
        };
        let outcomes = [&first, &second];
        let done = outcomes.iter().filter(|r| r.is_ok()).count();
        assert_eq!(done, 1, "round {round}: {first:?} and {second:?}: exactly one may finish the upload");
        let other = outcomes.iter().find(|r| r.is_err()).unwrap();
        assert!(matches!(other, Err(BackendError::NoSuchUpload)), "round {round}: the later one gave {other:?}");
        if round < 3 || first.is_ok() {
            assert_eq!(get(b, "mpu", "k", None).await, whole, "round {round}");
        }
        assert!(matches!(b.list_parts("mpu", "k", &id).await, Err(BackendError::NoSuchUpload)));
    }
}

async fn abort_multipart(b: &Backend) {
    b.create_bucket("mpu").await.unwrap();
    let id = b.create_multipart("mpu", meta("k", 0)).await.unwrap();
    put_part(b, "mpu", "k", &id, 1, b"abc").await;
    assert!(matches!(b.abort_multipart("mpu", "x", &id).await, Err(BackendError::NoSuchUpload)));
    b.abort_multipart("mpu", "k", &id).await.unwrap();
    assert!(matches!(b.abort_multipart("mpu", "k", &id).await, Err(BackendError::NoSuchUpload)));
    assert!(b.list_uploads("mpu").await.unwrap().is_empty());
    assert!(matches!(b.head_object("mpu", "k").await, Err(BackendError::NoSuchKey)));
    let w = b.body_writer("mpu").await.unwrap();
    assert!(matches!(b.put_part("mpu", "k", &id, w, part_meta(2, 0)).await, Err(BackendError::NoSuchUpload)));
}

async fn synthetic_bucket(b: &Backend) {
    assert_eq!(b.synthetic_bucket(), Some("synthetic"));
    b.head_bucket("synthetic").await.unwrap();
    let m = b.head_object("synthetic", "1MiB/a").await.unwrap();
    assert_eq!(m.size, 1 << 20);
    assert_eq!(m.etag, synthetic_etag("1MiB/a", 1 << 20));
    let all = synthetic_bytes("1MiB/a", 0, 1 << 20);
    let crc = base64::engine::general_purpose::STANDARD.encode(crc32c::crc32c(&all).to_be_bytes());
    assert_eq!(m.checksums, vec![("CRC32C".to_string(), crc)]);
    let (gm, s) = b.get_object("synthetic", "1MiB/a", None).await.unwrap();
    assert_eq!(gm, m);
    assert_eq!(s.collect_vec().await.unwrap(), all);
    let (_, s) = b.get_object("synthetic", "1MiB/a", Some((100_000, 400_000))).await.unwrap();
    assert_eq!(s.collect_vec().await.unwrap(), all[100_000..=400_000]);
    assert_eq!(b.head_object("synthetic", "x/size=1KB").await.unwrap().size, 1000);
    assert!(matches!(b.head_object("synthetic", "hello").await, Err(BackendError::NoSuchKey)));
    assert!(matches!(b.get_object("synthetic", "hello", None).await, Err(BackendError::NoSuchKey)));
    assert!(matches!(b.body_writer("synthetic").await, Err(BackendError::ReadOnly)));
    assert!(matches!(b.create_multipart("synthetic", meta("1KiB", 0)).await, Err(BackendError::ReadOnly)));
    assert!(matches!(b.delete_object("synthetic", "1KiB").await, Err(BackendError::ReadOnly)));
    assert!(matches!(b.delete_bucket("synthetic").await, Err(BackendError::ReadOnly)));
    assert_eq!(b.list_objects("synthetic", "", Some("/"), None, 100).await.unwrap(), ListPage::default());
    assert!(b.list_uploads("synthetic").await.unwrap().is_empty());
    // Beyond the CRC limit: no checksum, but still served.
    let big = b.clone().with_synthetic_bucket("synthetic").with_synthetic_crc_limit(1000);
    assert!(big.head_object("synthetic", "1TiB").await.unwrap().checksums.is_empty());
    let (_, s) = big.get_object("synthetic", "1TiB", Some(((1 << 40) - 10, (1 << 40) - 1))).await.unwrap();
    assert_eq!(s.collect_vec().await.unwrap(), synthetic_bytes("1TiB", (1 << 40) - 10, 10));
}

async fn concurrent_puts_same_key(b: &Backend) {
    b.create_bucket("race").await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16u8 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let data = pattern(1000 + i as usize * 10, i);
            let mut w = b.body_writer("race").await.unwrap();
            w.write(Bytes::from(data.clone())).await.unwrap();
            b.put_object("race", w, meta("k", data.len() as u64)).await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The index and the stored bytes must describe the same winner.
    let head = b.head_object("race", "k").await.unwrap();
    let (m, s) = b.get_object("race", "k", None).await.unwrap();
    assert_eq!(head, m);
    let i = ((m.size - 1000) / 10) as u8;
    assert_eq!(s.collect_vec().await.unwrap(), pattern(m.size as usize, i));
}

use base64::Engine;

#[test]
fn bucket_name_rules() {
    for ok in ["abc", "my-bucket.v2", "0bucket9", &"a".repeat(63), "1.2.3", "1.2.3.4a"] {
        validate_bucket_name(ok).unwrap();
    }
    for bad in ["ab", "ABC", "a_b", "-ab", "ab-", ".ab", "ab.", "a..b", "10.0.0.1", "xn--abc", "abc-s3alias", "a/b"] {
        assert!(validate_bucket_name(bad).is_err(), "{bad}");
    }
}

// ---------------------------------------------------------------- memory only

/// A 64 KiB "receive buffer" and the pieces of it a connection would hand the writer.
fn receive_buffer() -> Bytes {
    Bytes::from(pattern(64 * 1024, 9))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_body_keeps_no_receive_buffer() {
    let b = Backend::memory();
    b.create_bucket("mem").await.unwrap();
    let buf = receive_buffer();
    // A 16 KiB object that arrived as a 4 KiB and a 12 KiB piece of one 64 KiB read.
    let mut w = b.body_writer("mem").await.unwrap();
    w.expect_len(16 * 1024);
    w.write(buf.slice(0..4096)).await.unwrap();
    w.write(buf.slice(4096..16 * 1024)).await.unwrap();
    b.put_object("mem", w, meta("small", 16 * 1024)).await.unwrap();
    // A 1 MiB + 5 object from 17 KiB pieces (a slow client), length announced.
    let big = pattern((1 << 20) + 5, 3);
    let mut w = b.body_writer("mem").await.unwrap();
    w.expect_len(big.len() as u64);
    let mut buffers = Vec::new();
    for piece in big.chunks(17 * 1024) {
        // Each piece rides in a 64 KiB buffer of its own, as after a short socket read.
        let mut v = vec![0u8; 64 * 1024];
        v[..piece.len()].copy_from_slice(piece);
        let read = Bytes::from(v);
        w.write(read.slice(0..piece.len())).await.unwrap();
        buffers.push(read);
    }
    b.put_object("mem", w, meta("big", big.len() as u64)).await.unwrap();

    assert!(buf.is_unique(), "a stored body still holds the receive buffer");
    assert!(buffers.iter().all(Bytes::is_unique), "a stored body still holds a receive buffer");
    let u = b.memory_usage();
    assert_eq!(u.object_bytes, 16 * 1024 + big.len() as u64);
    assert_eq!(u.allocated_bytes, u.object_bytes, "{u:?}");
    assert_eq!(get(&b, "mem", "small", None).await, &buf[..16 * 1024]);
    assert_eq!(get(&b, "mem", "big", None).await, big);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_body_of_unannounced_length_wastes_at_most_an_eighth() {
    let b = Backend::memory();
    b.create_bucket("mem").await.unwrap();
    let buf = receive_buffer();
    for len in [1usize, 5000, 16 * 1024, 100_000, 3 << 20] {
        let data = pattern(len, len as u8);
        let mut w = b.body_writer("mem").await.unwrap();
        for piece in data.chunks(17 * 1024) {
            // Each piece rides in its own 64 KiB buffer, as after a short socket read.
            let mut v = buf.to_vec();
            v[..piece.len()].copy_from_slice(piece);
            w.write(Bytes::from(v).slice(0..piece.len())).await.unwrap();
        }
        let key = format!("k{len}");
        b.put_object("mem", w, meta(&key, len as u64)).await.unwrap();
        assert_eq!(get(&b, "mem", &key, None).await, data);
        let before = b.memory_usage();
        b.delete_object("mem", &key).await.unwrap();
        assert_eq!(b.memory_usage(), MemoryUsage::default());
        let (len, alloc) = (len as u64, before.allocated_bytes);
        assert!(alloc >= len && alloc <= len + len / 8, "{len} bytes kept {alloc}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_body_longer_than_announced_is_stored_whole() {
    let b = Backend::memory();
    b.create_bucket("mem").await.unwrap();
    let data = pattern(300_000, 4);
    let mut w = b.body_writer("mem").await.unwrap();
    w.expect_len(1000);
    w.write(Bytes::copy_from_slice(&data)).await.unwrap();
    b.put_object("mem", w, meta("k", data.len() as u64)).await.unwrap();
    assert_eq!(get(&b, "mem", "k", None).await, data);
    let u = b.memory_usage();
    assert!(u.allocated_bytes <= u.object_bytes + u.object_bytes / 8, "{u:?}");
}

/// Weak handles on the stored ropes of `id`'s parts: alive while anything holds them.
fn part_ropes(b: &Backend, bucket: &str, id: &str) -> Vec<std::sync::Weak<body::Rope>> {
    let buckets = read(&b.shared.buckets);
    let inner = read(&buckets[bucket].inner);
    inner.uploads[id].parts.values().map(|p| Arc::downgrade(p.rope.as_ref().unwrap())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_parts_are_released_at_complete_and_abort() {
    let b = Backend::memory();
    b.create_bucket("mpu").await.unwrap();
    let (p1, p2, p3) = (pattern(300_000, 1), pattern(200_000, 2), pattern(1000, 3));
    let id = b.create_multipart("mpu", meta("k", 0)).await.unwrap();
    put_part(&b, "mpu", "k", &id, 1, &p1).await;
    put_part(&b, "mpu", "k", &id, 2, &p2).await;
    put_part(&b, "mpu", "k", &id, 3, &p3).await;
    let u = b.memory_usage();
    assert_eq!((u.parts, u.part_bytes), (3, 301_000 + 200_000));
    let ropes = part_ropes(&b, "mpu", &id);
    // Part 2 is left out: its bytes must go with the upload.
    let size = (p1.len() + p3.len()) as u64;
    b.complete_multipart("mpu", "k", &id, &[1, 3], meta("k", size)).await.unwrap();
    assert!(ropes.iter().all(|r| r.upgrade().is_none()), "a part outlived Complete");
    let u = b.memory_usage();
    assert_eq!((u.parts, u.part_bytes, u.object_bytes), (0, 0, size));
    assert!(u.allocated_bytes <= size + size / 8, "{u:?}");
    assert_eq!(get(&b, "mpu", "k", None).await, [p1.as_slice(), p3.as_slice()].concat());
    b.delete_object("mpu", "k").await.unwrap();
    assert_eq!(b.memory_usage(), MemoryUsage::default());

    let id = b.create_multipart("mpu", meta("k", 0)).await.unwrap();
    put_part(&b, "mpu", "k", &id, 1, &p1).await;
    put_part(&b, "mpu", "k", &id, 1, &p2).await; // replaces part 1
    let ropes = part_ropes(&b, "mpu", &id);
    assert_eq!(b.memory_usage().part_bytes, p2.len() as u64);
    b.abort_multipart("mpu", "k", &id).await.unwrap();
    assert!(ropes.iter().all(|r| r.upgrade().is_none()), "a part outlived Abort");
    assert_eq!(b.memory_usage(), MemoryUsage::default());
}

// ---------------------------------------------------------------- disk only

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_restart_survival() {
    let dir = tempfile::tempdir().unwrap();
    let (id, created) = {
        let b = Backend::open_disk(dir.path()).await.unwrap();
        b.create_bucket("keep").await.unwrap();
        b.create_bucket("other").await.unwrap();
        put(&b, "keep", "a/b", &pattern(500_000, 4)).await;
        put(&b, "keep", "gone", b"x").await;
        b.delete_object("keep", "gone").await.unwrap();
        let id = b.create_multipart("keep", meta("mpu", 0)).await.unwrap();
        put_part(&b, "keep", "mpu", &id, 2, b"world").await;
        put_part(&b, "keep", "mpu", &id, 1, b"hello ").await;
        b.set_bucket_versioning("keep", "Suspended").await.unwrap();
        let created = b.list_buckets().await;
        (id, created)
    };
    let b = Backend::open_disk(dir.path()).await.unwrap();
    assert_eq!(b.list_buckets().await, created);
    assert_eq!(b.bucket_versioning("keep").await.unwrap().as_deref(), Some("Suspended"));
    assert_eq!(b.bucket_versioning("other").await.unwrap(), None);
    assert_eq!(b.head_object("keep", "a/b").await.unwrap(), meta("a/b", 500_000));
    assert_eq!(get(&b, "keep", "a/b", None).await, pattern(500_000, 4));
    assert!(matches!(b.head_object("keep", "gone").await, Err(BackendError::NoSuchKey)));
    let ups = b.list_uploads("keep").await.unwrap();
    assert_eq!(ups.len(), 1);
    assert_eq!(ups[0].upload_id, id);
    assert_eq!(b.list_parts("keep", "mpu", &id).await.unwrap(), vec![part_meta(1, 6), part_meta(2, 5)]);
    b.complete_multipart("keep", "mpu", &id, &[1, 2], meta("mpu", 11)).await.unwrap();
    drop(b);
    let b = Backend::open_disk(dir.path()).await.unwrap();
    assert_eq!(get(&b, "keep", "mpu", None).await, b"hello world");
    assert!(b.list_uploads("keep").await.unwrap().is_empty());
    // A bucket deleted with an unfinished upload takes the upload's files along.
    let id = b.create_multipart("other", meta("left", 0)).await.unwrap();
    put_part(&b, "other", "left", &id, 1, b"part").await;
    b.delete_bucket("other").await.unwrap();
    assert_eq!(std::fs::read_dir(dir.path().join(".ferry-uploads")).unwrap().count(), 0);
    drop(b);
    let b = Backend::open_disk(dir.path()).await.unwrap();
    assert!(matches!(b.head_bucket("other").await, Err(BackendError::NoSuchBucket)));
}

/// An upload whose bucket is gone (a crash between DeleteBucket's two steps) is removed
/// when the directory is opened again, and a new bucket of that name does not see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_orphan_upload_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let b = Backend::open_disk(dir.path()).await.unwrap();
        b.create_bucket("gone").await.unwrap();
        let id = b.create_multipart("gone", meta("k", 0)).await.unwrap();
        put_part(&b, "gone", "k", &id, 1, b"bytes").await;
        id
    };
    // The crash: the bucket directory went, the upload stayed.
    std::fs::remove_dir_all(dir.path().join("gone")).unwrap();
    let b = Backend::open_disk(dir.path()).await.unwrap();
    assert!(!dir.path().join(".ferry-uploads").join(&id).exists());
    b.create_bucket("gone").await.unwrap();
    assert!(b.list_uploads("gone").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_crash_leftovers_are_invisible_and_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let real_file = {
        let b = Backend::open_disk(dir.path()).await.unwrap();
        b.create_bucket("bkt").await.unwrap();
        put(&b, "bkt", "real", b"real data").await;
        files_under(dir.path()).into_iter().find(|p| p.parent().unwrap().parent().unwrap().ends_with("bkt")).unwrap()
    };
    let root = dir.path();
    // A half-written PUT (killed before rename).
    std::fs::write(root.join(".ferry-tmp/body-halfwritten"), vec![7u8; 12345]).unwrap();
    std::fs::create_dir(root.join(".ferry-tmp/upload-half")).unwrap();
    // Garbage and torn object files where objects live.
    std::fs::create_dir_all(root.join("bkt/ab")).unwrap();
    std::fs::write(root.join("bkt/ab/abababab"), b"garbage, no trailer").unwrap();
    let torn = std::fs::read(&real_file).unwrap();
    let h = hex::encode(sha2::Sha256::digest(b"torn"));
    std::fs::create_dir_all(root.join("bkt").join(&h[..2])).unwrap();
    std::fs::write(root.join("bkt").join(&h[..2]).join(&h), &torn[..torn.len() - 3]).unwrap();
    // A copy of a valid file under the wrong name must not be served either.
    std::fs::write(root.join("bkt/ab/0000"), &torn).unwrap();
    // A bucket directory without its metadata, and a broken upload.
    std::fs::create_dir(root.join("nometa")).unwrap();
    std::fs::create_dir(root.join(".ferry-uploads/ffff")).unwrap();

    let b = Backend::open_disk(root).await.unwrap();
    let keys: Vec<String> =
        b.list_objects("bkt", "", None, None, 100).await.unwrap().objects.into_iter().map(|m| m.key).collect();
    assert_eq!(keys, ["real"]);
    assert_eq!(get(&b, "bkt", "real", None).await, b"real data");
    assert!(matches!(b.head_object("bkt", "torn").await, Err(BackendError::NoSuchKey)));
    assert!(matches!(b.head_bucket("nometa").await, Err(BackendError::NoSuchBucket)));
    assert!(b.list_uploads("bkt").await.unwrap().is_empty());
    assert_eq!(std::fs::read_dir(root.join(".ferry-tmp")).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_paths_never_escape() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("data");
    let b = Backend::open_disk(&root).await.unwrap();
    b.create_bucket("esc").await.unwrap();
    let long = "../".repeat(341);
    let mut keys: Vec<&str> = ODD_KEYS.to_vec();
    keys.push(&long);
    for k in &keys {
        put(&b, "esc", k, k.as_bytes()).await;
        let id = b.create_multipart("esc", meta(k, 0)).await.unwrap();
        put_part(&b, "esc", k, &id, 1, b"p").await;
    }
    let entries: Vec<_> = std::fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(entries, ["data"]);
    let root = root.canonicalize().unwrap();
    for p in files_under(&root) {
        let c = p.canonicalize().unwrap();
        assert!(c.starts_with(&root), "{} escaped", c.display());
        let name = p.file_name().unwrap().to_string_lossy();
        assert!(!name.contains(".."), "{}", p.display());
        assert!(name.len() <= 64, "{}", p.display());
    }
    for k in &keys {
        assert_eq!(get(&b, "esc", k, None).await, k.as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_temp_files_do_not_linger() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backend::open_disk(dir.path()).await.unwrap();
    b.create_bucket("tmp").await.unwrap();
    let tmp = dir.path().join(".ferry-tmp");
    let mut w = b.body_writer("tmp").await.unwrap();
    w.write(Bytes::from(vec![0u8; 3 << 20])).await.unwrap();
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 1, "flushed past the buffer");
    drop(w);
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "dropped writer removed");
    let mut w = b.body_writer("tmp").await.unwrap();
    w.write(Bytes::from(vec![0u8; 3 << 20])).await.unwrap();
    assert!(b.put_object("tmp", w, meta("k", 1)).await.is_err());
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "rejected put removed");
    put(&b, "tmp", "k", &pattern(3 << 20, 0)).await;
    let id = b.create_multipart("tmp", meta("m", 0)).await.unwrap();
    put_part(&b, "tmp", "m", &id, 1, b"abc").await;
    b.complete_multipart("tmp", "m", &id, &[1], meta("m", 3)).await.unwrap();
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "commits leave nothing behind");
    assert_eq!(std::fs::read_dir(dir.path().join(".ferry-uploads")).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_second_open_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backend::open_disk(dir.path()).await.unwrap();
    assert!(matches!(Backend::open_disk(dir.path()).await, Err(BackendError::Io(_))));
    drop(b);
    Backend::open_disk(dir.path()).await.unwrap();
}

use sha2::Digest;

/// Memory mode copies a PUT's chunks into blocks of its own (see body.rs), and a GET
/// hands out slices of those blocks: two GETs see the same bytes at the same address.
#[tokio::test]
async fn memory_get_is_zero_copy() {
    let b = Backend::memory();
    b.create_bucket("zc0").await.unwrap();
    let chunk = Bytes::from(vec![5u8; 600_000]);
    let mut w = b.body_writer("zc0").await.unwrap();
    w.write(chunk.clone()).await.unwrap();
    b.put_object("zc0", w, meta("k", 600_000)).await.unwrap();
    assert!(chunk.is_unique(), "the PUT's chunk is not kept");
    let (_, mut s) = b.get_object("zc0", "k", Some((10, 599_999))).await.unwrap();
    let first = s.next().await.unwrap().unwrap();
    let (_, mut again) = b.get_object("zc0", "k", Some((10, 599_999))).await.unwrap();
    assert_eq!(first.as_ptr(), again.next().await.unwrap().unwrap().as_ptr());
    assert_eq!(first.len(), MAX_CHUNK_BYTES);
}
