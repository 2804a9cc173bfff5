//! A resumed file upload whose upload vanishes under it starts over with one of its own.
//!
//! The fault matrix found it: `kill -9` of `ferry cp` while its CompleteMultipartUpload
//! was in flight, then an immediate re-run. The re-run listed the upload (still in
//! progress), the server then finished the killed run's completion, and the re-run's
//! parts were answered NoSuchUpload: the re-run failed where it should have completed.
//! Here the vanishing is the one synthetic part: testkit's `Intercept` answers the first
//! UploadPart after a ListParts with 404 NoSuchUpload in place of `ferry serve`'s
//! answer; every other request is real.

use crate::sched_support;

use ferry_engine::upload::{upload_file, UploadParams};
use ferry_engine::Engine;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_store::{ObjectRef, ObjectStoreExt, PartPayload, PutParams};
use ferry_testkit::transport::{ErrorAnswer, Intercept};
use sched_support::{client_wrapped, data, server};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_upload_that_vanishes_starts_over() {
    let srv = server(|_| {});
    let (listed, refused) = (AtomicBool::new(false), AtomicBool::new(false));
    let (layer, wrapper) = Intercept::layer(move |req| {
        let path = &req.path_and_query;
        if req.method == http::Method::GET && path.contains("uploadId=") {
            listed.store(true, SeqCst);
        }
        let part = req.method == http::Method::PUT && path.contains("partNumber=");
        (part && listed.load(SeqCst) && !refused.swap(true, SeqCst)).then_some(ErrorAnswer {
            status: http::StatusCode::NOT_FOUND,
            code: "NoSuchUpload",
            message: "gone, as the test says",
        })
    });
    let (c, _) = client_wrapped(&srv, layer);
    c.create_bucket("resume").await.unwrap();
    let e = Engine::new(c);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("src.bin");
    let body = data((11 << 20) + 5, 9);
    std::fs::write(&path, &body).unwrap();
    let object = ObjectRef::new("resume", "k");
    // What a killed run leaves: an upload in progress holding its first part.
    let put = PutParams { checksum: Some(ChecksumAlgorithm::Crc64Nvme), ..PutParams::default() };
    let left = e.create_upload(&object, &put).await.unwrap();
    e.upload_part(&left, 1, PartPayload::File { path: path.clone(), offset: 0, len: 5 << 20 }).await.unwrap();
    let params = UploadParams { part_size: 5 << 20, concurrency: 1, ..UploadParams::default() };
    let out = upload_file(&e, &path, &object, &params, None).await.expect("the re-run completes");
    assert_eq!(out.size, body.len() as u64);
    assert_eq!(e.get_bytes(&object).await.unwrap(), body, "the object is not the file");
    let seen = wrapper.get().unwrap().seen();
    let creates = seen.iter().filter(|(m, p)| m == "POST" && p.ends_with("?uploads")).count();
    assert_eq!(creates, 2, "no fresh upload after the resumed one vanished: {seen:?}");
}

/// A Complete answered NoSuchUpload after the server did complete the upload (as when a
/// killed run's Complete finished first, or an attempt of ours that a retry outran): the
/// object holds the file's bytes, its size and whole-object CRC say so, and the upload
/// ends there without sending the file again under a new upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_that_lost_a_race_to_an_identical_one_succeeds() {
    let srv = server(|_| {});
    let answered = AtomicBool::new(false);
    let (layer, wrapper) = Intercept::layer(move |req| {
        let complete = req.method == http::Method::POST && req.path_and_query.contains("uploadId=");
        (complete && !answered.swap(true, SeqCst)).then_some(ErrorAnswer {
            status: http::StatusCode::NOT_FOUND,
            code: "NoSuchUpload",
            message: "completed by an earlier Complete, as the test says",
        })
    });
    let (c, _) = client_wrapped(&srv, layer);
    c.create_bucket("raced").await.unwrap();
    let e = Engine::new(c);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("src.bin");
    let body = data((11 << 20) + 7, 4);
    std::fs::write(&path, &body).unwrap();
    let object = ObjectRef::new("raced", "k");
    let params = UploadParams { part_size: 5 << 20, concurrency: 2, ..UploadParams::default() };
    let out = upload_file(&e, &path, &object, &params, None).await.expect("the upload completes");
    assert_eq!(out.size, body.len() as u64);
    assert!(out.etag.as_deref().is_some_and(|t| t.ends_with("-3\"")), "etag {:?}", out.etag);
    assert_eq!(e.get_bytes(&object).await.unwrap(), body, "the object is not the file");
    let seen = wrapper.get().unwrap().seen();
    let count = |m: &str, f: &dyn Fn(&str) -> bool| seen.iter().filter(|(sm, p)| sm == m && f(p)).count();
    assert_eq!(count("POST", &|p| p.ends_with("?uploads")), 1, "the file was sent again: {seen:?}");
    assert_eq!(count("PUT", &|p| p.contains("partNumber=")), 3, "parts sent again: {seen:?}");
}
