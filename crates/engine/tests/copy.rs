//! copy.rs against an in-process `ferry serve` (real HTTP on a real socket): a copy in
//! parts is byte-identical and carries the source's checksum and metadata; a small one is
//! one CopyObject; a failure in the middle leaves no object and no upload in progress;
//! and (ignored by default: it writes 12 GiB to disk) a 6 GiB synthetic object, above
//! CopyObject's 5 GiB limit, copies whole.

use crate::common;

use bytes::Bytes;
use common::{client, data};
use ferry_engine::copy::{copy_object, CopyParams};
use ferry_engine::Engine;
use ferry_proto::checksum::{base64_encode, ChecksumAlgorithm, Checksummer};
use ferry_store::{Credentials, CredentialsSource, GetParams, ObjectRef, PutParams, RangeSpec, S3Client};
use ferry_testkit::FerryServe;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

async fn get(c: &S3Client, o: &ObjectRef, range: Option<RangeSpec>) -> Vec<u8> {
    let params = GetParams { range, ..Default::default() };
    let mut body = c.get_object(o, params).await.unwrap().body;
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

/// The CRC of a whole object, streamed (never held in memory).
async fn streamed_crc(c: &S3Client, o: &ObjectRef, algo: ChecksumAlgorithm) -> (u64, String) {
    let mut body = c.get_object(o, GetParams::default()).await.unwrap().body;
    let (mut h, mut n) = (Checksummer::new(algo), 0u64);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.unwrap();
        n += chunk.len() as u64;
        h.update(&chunk);
    }
    (n, h.finish_base64())
}

const MIB: u64 = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_parts_is_identical_with_checksum_and_metadata() {
    let srv = FerryServe::new().start();
    let c = client(&srv);
    c.create_bucket("cpy").await.unwrap();
    let bytes = data(41 * MIB as usize + 3, 7);
    let src = ObjectRef::new("cpy", "src/big.bin");
    let put = PutParams {
        content_type: Some("application/x-test".into()),
        metadata: vec![("colour".into(), "blue".into())],
        ..Default::default()
    };
    c.put_object(&src, bytes.clone(), put).await.unwrap();
    let dst = ObjectRef::new("cpy", "dst/big copy.bin");
    let counted = Arc::new(AtomicU64::new(0));
    let seen = counted.clone();
    let params = CopyParams { multipart_threshold: 8 * MIB, part_size: 5 * MIB, concurrency: 4 };
    let out = copy_object(
        &Engine::new(c.clone()),
        &src,
        &dst,
        None,
        &params,
        Some(Arc::new(move |n| {
            seen.fetch_add(n, Ordering::Relaxed);
        })),
    )
    .await
    .unwrap();
    assert_eq!((out.size, out.parts), (bytes.len() as u64, 9));
    assert_eq!(counted.load(Ordering::Relaxed), bytes.len() as u64);
    let want = base64_encode(&ChecksumAlgorithm::Crc64Nvme.digest(&bytes));
    assert_eq!(out.checksum, Some((ChecksumAlgorithm::Crc64Nvme, want.clone())), "Complete confirmed the source's CRC");
    assert_eq!(get(&c, &dst, None).await, bytes);
    let info = c.head_object(&dst).await.unwrap();
    assert_eq!(info.content_type.as_deref(), Some("application/x-test"));
    assert_eq!(info.metadata.get("colour").map(String::as_str), Some("blue"));
    assert!(info.checksums.contains(&(ChecksumAlgorithm::Crc64Nvme, want)), "{:?}", info.checksums);
    assert!(c.list_multipart_uploads("cpy", "").await.unwrap().is_empty());

    // At or below the threshold: one CopyObject, with or without a known size.
    let small = ObjectRef::new("cpy", "small");
    c.put_object(&small, Bytes::from_static(b"tiny"), PutParams::default()).await.unwrap();
    for size in [Some(4), None] {
        let to = ObjectRef::new("cpy", "small-copy");
        let out = copy_object(&Engine::new(c.clone()), &small, &to, size, &params, None).await.unwrap();
        assert_eq!((out.size, out.parts), (4, 0));
        assert_eq!(get(&c, &to, None).await, b"tiny");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_in_the_middle_leaves_no_object_and_no_upload() {
    let srv = FerryServe::new().start();
    let c = client(&srv);
    c.create_bucket("cpf").await.unwrap();
    let src = ObjectRef::new("cpf", "src");
    c.put_object(&src, data(30 * MIB as usize, 3), PutParams::default()).await.unwrap();
    let dst = ObjectRef::new("cpf", "dst");
    // After the first part is copied, the source is deleted (from another runtime, before
    // the copy goes on): the next part fails with NoSuchKey, after Create and a part.
    let url = srv.url();
    let deleted = Arc::new(AtomicU64::new(0));
    let d2 = deleted.clone();
    let progress: ferry_engine::ProgressFn = Arc::new(move |_| {
        if d2.fetch_add(1, Ordering::SeqCst) == 0 {
            let url = url.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(async {
                    let c = S3Client::builder(url)
                        .credentials(CredentialsSource::Explicit(Credentials::new("ferry", "ferry-secret")))
                        .build()
                        .unwrap();
                    c.delete_object(&ObjectRef::new("cpf", "src")).await.unwrap();
                })
            })
            .join()
            .unwrap();
        }
    });
    let params = CopyParams { multipart_threshold: 8 * MIB, part_size: 5 * MIB, concurrency: 1 };
    let err =
        copy_object(&Engine::new(c.clone()), &src, &dst, Some(30 * MIB), &params, Some(progress)).await.unwrap_err();
    assert!(matches!(err, ferry_store::Error::NotFound { .. }), "{err}");
    assert_eq!(deleted.load(Ordering::SeqCst), 1, "one part was copied before the failure");
    assert!(
        matches!(c.head_object(&dst).await, Err(ferry_store::Error::NotFound { .. })),
        "no object under the final name"
    );
    assert!(c.list_multipart_uploads("cpf", "").await.unwrap().is_empty(), "the upload was aborted");
}

/// 6 GiB from the synthetic bucket (no memory, no disk) to a disk-backed bucket: above
/// CopyObject's limit. The copy's CRC64NVME (computed by the server from the parts) must
/// equal the CRC of the source's bytes streamed through the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes 6 GiB of parts and a 6 GiB object to disk (~1-2 min); run with --ignored"]
async fn six_gib_copies_past_the_copy_object_limit() {
    let dir = tempfile::tempdir().unwrap();
    let srv = FerryServe::new().data_dir(dir.path()).start();
    let c = client(&srv);
    c.create_bucket("big").await.unwrap();
    let src = ObjectRef::new("synthetic", "6GiB/copy-source");
    let dst = ObjectRef::new("big", "six");
    let len = 6 * 1024 * MIB;
    let params = CopyParams { multipart_threshold: 8 * MIB, part_size: 64 * MIB, concurrency: 4 };
    let out = copy_object(&Engine::new(c.clone()), &src, &dst, Some(len), &params, None).await.unwrap();
    assert_eq!((out.size, out.parts), (len, 96));
    assert!(c.list_multipart_uploads("big", "").await.unwrap().is_empty());
    let stored = c.head_object(&dst).await.unwrap();
    assert_eq!(stored.size, len);
    let (_, theirs) = stored
        .checksums
        .iter()
        .find(|(a, _)| *a == ChecksumAlgorithm::Crc64Nvme)
        .cloned()
        .expect("a CRC64NVME on the copy");
    let (n, ours) = streamed_crc(&c, &src, ChecksumAlgorithm::Crc64Nvme).await;
    assert_eq!((n, ours), (len, theirs));
    // Bytes across a part boundary and at the end, compared directly.
    for (a, b) in [(64 * MIB - 100, 64 * MIB + 100), (len - 1000, len - 1)] {
        assert_eq!(
            get(&c, &dst, Some(RangeSpec::FromTo(a, b))).await,
            get(&c, &src, Some(RangeSpec::FromTo(a, b))).await
        );
    }
}
