//! download/ and upload.rs against an in-process `ferry serve` (real HTTP on a real
//! socket): round trip, atomic landing, resume of a cancelled download from its state,
//! and resume of an upload from the parts already uploaded.

use crate::common;

use bytes::Bytes;
use common::data;
use ferry_engine::Engine;
use ferry_engine::{download_file, upload_file, DownloadParams, UploadParams, Verified};
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_store::{GetParams, ObjectRef, PutParams, S3Client};
use ferry_testkit::{FerryServe, Served};
use std::path::Path;
use std::time::Duration;

fn server(rate_per_conn: Option<u64>) -> Served {
    FerryServe::new().configure(|c| c.emulation.rate_per_conn = rate_per_conn).start()
}

async fn client(srv: &Served, bucket: &str) -> S3Client {
    let c = common::client(srv);
    c.create_bucket(bucket).await.unwrap();
    c
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_then_download_round_trip_verified() {
    let srv = server(None);
    let c = client(&srv, "rtrip").await;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let bytes = data(21 * 1024 * 1024 + 3, 1);
    std::fs::write(&src, &bytes).unwrap();
    let obj = ObjectRef::new("rtrip", "big");
    let params = UploadParams { part_size: 5 * 1024 * 1024, ..Default::default() };
    let up = upload_file(&Engine::new(c.clone()), &src, &obj, &params, None).await.unwrap();
    assert_eq!((up.size, up.parts, up.resumed_bytes), (bytes.len() as u64, 5, 0));
    let dest = dir.path().join("back.bin");
    let dl = download_file(
        &Engine::new(c.clone()),
        &obj,
        &dest,
        &DownloadParams { part_size: 4 * 1024 * 1024, ..Default::default() },
        None,
    )
    .await
    .unwrap();
    assert_eq!(dl.verified, Verified::Checksum(ChecksumAlgorithm::Crc64Nvme));
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    assert!(leftovers(dir.path()).is_empty(), "{:?}", leftovers(dir.path()));
    // Small: one PUT, one verified GET.
    std::fs::write(&src, b"small").unwrap();
    let small = ObjectRef::new("rtrip", "small");
    upload_file(&Engine::new(c.clone()), &src, &small, &params, None).await.unwrap();
    let dl = download_file(&Engine::new(c.clone()), &small, &dest, &DownloadParams::default(), None).await.unwrap();
    assert_eq!(dl.verified, Verified::Checksum(ChecksumAlgorithm::Crc64Nvme));
    assert_eq!(std::fs::read(&dest).unwrap(), b"small");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_upload_streams_its_parts_instead_of_holding_them() {
    // Every part in flight at once: the bytes the upload takes from the client's budget
    // (what its parts hold in memory) stay below one part, however the sends interleave.
    let srv = server(None);
    let c = client(&srv, "stream").await;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let bytes = data(21 * 1024 * 1024 + 3, 7);
    std::fs::write(&src, &bytes).unwrap();
    let obj = ObjectRef::new("stream", "big");
    let part_size = 5 * 1024 * 1024;
    let params = UploadParams { part_size, concurrency: 5, ..Default::default() };
    let e = Engine::new(c.clone());
    let up = upload_file(&e, &src, &obj, &params, None).await.unwrap();
    assert_eq!((up.size, up.parts), (bytes.len() as u64, 5));
    let budget = e.memory_budget();
    let bound = 5 * ferry_engine::upload::part_bytes_in_memory(part_size);
    assert!(
        budget.peak() > 0 && budget.peak() <= bound && bound < part_size,
        "budget peak {} (bound {bound}, part {part_size})",
        budget.peak()
    );
    let got = c.get_object(&obj, GetParams::default()).await.unwrap().body.collect().await.unwrap();
    assert!(got == bytes, "the object differs from the file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_download_never_shows_the_final_name_and_resumes() {
    // 16 MB/s per connection: a 24 MiB object in 1 MiB parts, 2 at a time, takes ~0.8 s.
    let srv = server(Some(16 * 1024 * 1024));
    let c = client(&srv, "dlres").await;
    let bytes = data(24 * 1024 * 1024 + 11, 2);
    let obj = ObjectRef::new("dlres", "obj");
    c.put_object(&obj, bytes.clone(), PutParams::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("obj");
    let params =
        DownloadParams { part_size: 1024 * 1024, concurrency: 2, resume: true, durable: true, ..Default::default() };
    let cut = tokio::time::timeout(
        Duration::from_millis(400),
        download_file(&Engine::new(c.clone()), &obj, &dest, &params, None),
    )
    .await;
    assert!(cut.is_err(), "the download finished before it could be cancelled");
    assert!(!dest.exists(), "a cancelled download left a file under the final name");
    let (tmp, state) = ferry_engine::download::temp_paths(&dest);
    assert!(tmp.exists() && state.exists());
    // Damage one finished part in the temp file: the resume must notice and fetch it again.
    let st: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    let done: Vec<u64> = st["done"].as_object().unwrap().keys().map(|k| k.parse().unwrap()).collect();
    assert!(done.len() >= 2, "{st}");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&tmp).unwrap();
        f.write_all_at(&[0xAA; 4096], done[0] * 1024 * 1024 + 100).unwrap();
    }
    let dl = download_file(&Engine::new(c.clone()), &obj, &dest, &params, None).await.unwrap();
    assert_eq!(dl.resumed_bytes, (done.len() as u64 - 1) * 1024 * 1024, "every kept part but the damaged one");
    assert!(dl.resumed_bytes > 0 && dl.fetched_bytes < bytes.len() as u64, "{dl:?}");
    assert_eq!(dl.resumed_bytes + dl.fetched_bytes, bytes.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    assert!(!tmp.exists() && !state.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_reuses_matching_parts_and_resends_the_rest() {
    let srv = server(None);
    let c = client(&srv, "upres").await;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let part = 5 * 1024 * 1024;
    let bytes = data(3 * part + 100, 3);
    std::fs::write(&src, &bytes).unwrap();
    let obj = ObjectRef::new("upres", "obj");
    // An earlier run that uploaded part 1 correctly and part 2 with other bytes.
    let put = PutParams { checksum: Some(ChecksumAlgorithm::Crc64Nvme), ..Default::default() };
    let upload = c.create_multipart(&obj, &put).await.unwrap();
    c.upload_part(&upload, 1, Bytes::copy_from_slice(&bytes[..part])).await.unwrap();
    c.upload_part(&upload, 2, data(part, 99)).await.unwrap();
    let params = UploadParams { part_size: part as u64, concurrency: 2, ..Default::default() };
    let up = upload_file(&Engine::new(c.clone()), &src, &obj, &params, None).await.unwrap();
    assert_eq!(up.resumed_bytes, part as u64, "only part 1 holds");
    let got = c.get_object(&obj, GetParams::default()).await.unwrap().body.collect().await.unwrap();
    assert_eq!(&got[..], &bytes[..]);
    assert_eq!(
        ferry_engine::upload::newest_upload(&Engine::new(c.clone()), &obj).await.unwrap(),
        None,
        "the upload was completed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_read_into_memory_is_the_object_in_one_get_or_in_parts() {
    use ferry_engine::{get_to_memory, MemoryParams, MemoryProgress};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let srv = server(None);
    let c = client(&srv, "mem").await;
    let engine = Engine::new(c.clone());
    let bytes = data(9 * 1024 * 1024 + 5, 7);
    let big = ObjectRef::new("mem", "big");
    c.put_object(&big, bytes.clone(), PutParams::default()).await.unwrap();
    let (seen, size) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let progress = MemoryProgress {
        size: Some({
            let size = size.clone();
            Arc::new(move |n| size.store(n, Ordering::Relaxed))
        }),
        bytes: Some({
            let seen = seen.clone();
            Arc::new(move |n| {
                seen.fetch_add(n, Ordering::Relaxed);
            })
        }),
    };
    // Parts of 1 MiB, three at once, split after the first: the stream and two helpers
    // whose CRCs combine to the stored one.
    let parts = MemoryParams {
        part_size: 1024 * 1024,
        concurrency: 3,
        split_at: 2 * 1024 * 1024,
        split_below: u64::MAX,
        size_hint: None,
    };
    let got = get_to_memory(&engine, &big, parts, None, progress).await.unwrap();
    assert!(got[..] == bytes[..], "the parts put together differ from the object");
    assert_eq!(size.load(Ordering::Relaxed), bytes.len() as u64);
    assert_eq!(seen.load(Ordering::Relaxed), bytes.len() as u64);
    // At or below split_at: one GET.
    let one = MemoryParams { split_at: 16 * 1024 * 1024, ..parts };
    let got = get_to_memory(&engine, &big, one, None, MemoryProgress::default()).await.unwrap();
    assert!(got[..] == bytes[..]);
    // Empty, and missing.
    let empty = ObjectRef::new("mem", "empty");
    c.put_object(&empty, Bytes::new(), PutParams::default()).await.unwrap();
    assert!(get_to_memory(&engine, &empty, parts, None, MemoryProgress::default()).await.unwrap().is_empty());
    let missing = ObjectRef::new("mem", "missing");
    let err = get_to_memory(&engine, &missing, parts, None, MemoryProgress::default()).await.unwrap_err();
    assert!(matches!(err, ferry_store::Error::NotFound { .. }), "{err:?}");
}

/// Memory said to be touched already, as a pool's is: a read into it splits only when its
/// stream is slow.
struct Touched;

impl ferry_engine::Allocator for Touched {
    fn take(&self, len: usize) -> (Vec<u8>, bool) {
        (Vec::with_capacity(len), true)
    }
    fn seal(&self, vec: Vec<u8>) -> Bytes {
        Bytes::from(vec)
    }
}

/// A large read into memory keeps its first GET's stream alone while that stream is fast
/// and the memory already touched, and adds ranged helpers when the stream is slower than
/// `split_below` or the memory fresh: the same bytes every way, counted in GETs through a
/// real socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_into_memory_splits_only_a_slow_stream_or_fresh_memory() {
    use ferry_engine::{get_to_memory_with, Allocator, FreshVec, MemoryParams, MemoryProgress};
    use ferry_testkit::transport::Counting;
    const MIB: u64 = 1024 * 1024;
    // (per-connection rate, split_below, touched memory, split expected); 20 MB/s: 6 MiB
    // on one stream would take ~0.3 s. Fresh memory splits even where the stream is
    // faster than `split_below`; its case is throttled too, so that the helpers have time
    // to claim a part before the stream reads them all (unthrottled on loopback, the
    // stream can finish before a helper task is first scheduled, on a loaded machine).
    let cases: [(Option<u64>, u64, bool, bool); 3] = [
        (None, 1_000_000, true, false),
        (Some(20_000_000), 200_000_000, true, true),
        (Some(20_000_000), 1_000_000, false, true),
    ];
    for (rate, split_below, touched, want_split) in cases {
        let srv = server(rate);
        let c = client(&srv, "adapt").await;
        let bytes = data(6 * MIB as usize + 11, 3);
        let obj = ObjectRef::new("adapt", "big");
        c.put_object(&obj, bytes.clone(), PutParams::default()).await.unwrap();
        let (transport, counts) = Counting::wrap(c.transport().clone());
        let counted = S3Client::with_transport(transport, c.config().clone());
        let params = MemoryParams { part_size: MIB, concurrency: 4, split_at: 2 * MIB, split_below, size_hint: None };
        let alloc: &dyn Allocator = if touched { &Touched } else { &FreshVec };
        let got = get_to_memory_with(&Engine::new(counted), &obj, params, None, MemoryProgress::default(), alloc)
            .await
            .unwrap();
        assert!(got[..] == bytes[..], "rate {rate:?}, touched {touched}: the bytes differ from the object");
        let gets = counts.get("GET object");
        if want_split {
            assert!(gets > 1, "rate {rate:?}, touched {touched}: no helpers ({gets} GET)");
        } else {
            assert_eq!(gets, 1, "a fast stream into touched memory was split");
        }
    }
}

/// Behind a slow connection the helpers start within the stream's first part (at its first
/// rate check, 4 MiB in), not at its end, into touched memory too: the first ranged GET goes out with less than a part of the object in
/// memory, and the stream finishes the part it was in (every byte right, the parts' CRCs
/// combined to the stored one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_stream_gets_helpers_within_its_first_part() {
    use ferry_engine::{get_to_memory_with, MemoryParams, MemoryProgress};
    use ferry_testkit::transport::Intercept;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    const MIB: u64 = 1024 * 1024;
    // 20 MB/s per connection: the stream's first part of 8 MiB takes ~0.4 s, its first
    // 4 MiB ~0.2 s, far below `split_below`.
    let srv = server(Some(20_000_000));
    let c = client(&srv, "early").await;
    let bytes = data(24 * MIB as usize + 5, 9);
    let obj = ObjectRef::new("early", "big");
    c.put_object(&obj, bytes.clone(), PutParams::default()).await.unwrap();
    let landed = Arc::new(AtomicU64::new(0));
    let at_first_range = Arc::new(AtomicU64::new(u64::MAX));
    let (l, first) = (landed.clone(), at_first_range.clone());
    let (layer, _) = Intercept::layer(move |req| {
        if req.headers.contains_key(http::header::RANGE) {
            let _ = first.compare_exchange(u64::MAX, l.load(Ordering::SeqCst), Ordering::SeqCst, Ordering::SeqCst);
        }
        None
    });
    let counted = S3Client::with_transport(layer(c.transport().clone()), c.config().clone());
    let l = landed.clone();
    let progress = MemoryProgress {
        size: None,
        bytes: Some(Arc::new(move |n| {
            l.fetch_add(n, Ordering::SeqCst);
        })),
    };
    let params = MemoryParams {
        part_size: 8 * MIB,
        concurrency: 3,
        split_at: 16 * MIB,
        split_below: 200_000_000,
        size_hint: None,
    };
    let got = get_to_memory_with(&Engine::new(counted), &obj, params, None, progress, &Touched).await.unwrap();
    assert!(got[..] == bytes[..], "the bytes differ from the object");
    let at = at_first_range.load(Ordering::SeqCst);
    assert!(at != u64::MAX, "no helper was started");
    assert!(at < 8 * MIB, "the first helper started with {at} bytes in, a whole part or more");
    assert_eq!(landed.load(Ordering::SeqCst), bytes.len() as u64);
}
