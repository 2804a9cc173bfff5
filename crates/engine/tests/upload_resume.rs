//! A resumed file upload whose upload vanishes under it starts over with one of its own.
//!
//! The fault matrix found it: `kill -9` of `ferry cp` while its CompleteMultipartUpload
//! was in flight, then an immediate re-run. The re-run listed the upload (still in
//! progress), the server then finished the killed run's completion, and the re-run's
//! parts were answered NoSuchUpload: the re-run failed where it should have completed.
//! Here the vanishing is the one synthetic part: a transport wrapper answers the first
//! UploadPart after a ListParts with 404 NoSuchUpload before it reaches `ferry serve`;
//! every other request is real.

mod sched_support;

use ferry_engine::upload::{upload_file, UploadParams};
use ferry_engine::Engine;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_store::{ObjectRef, ObjectStoreExt, PartPayload, PutParams};
use ferry_wire::{Request, Response, ResponseBody, Transport, TransportStats, WireError};
use futures_util::future::BoxFuture;
use sched_support::{client_wrapped, data, server};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

struct UploadGoneAfterListParts {
    inner: Arc<dyn Transport>,
    listed: AtomicBool,
    refused: AtomicBool,
    seen: Mutex<Vec<(String, String)>>,
}

impl Transport for UploadGoneAfterListParts {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let (method, path) = (req.method.to_string(), req.path_and_query.clone());
        self.seen.lock().unwrap().push((method.clone(), path.clone()));
        if method == "GET" && path.contains("uploadId=") {
            self.listed.store(true, SeqCst);
        }
        let refuse = method == "PUT"
            && path.contains("partNumber=")
            && self.listed.load(SeqCst)
            && !self.refused.swap(true, SeqCst);
        let fut = self.inner.send(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if refuse {
                let body = "<Error><Code>NoSuchUpload</Code><Message>gone, as the test says</Message></Error>";
                resp.status = http::StatusCode::NOT_FOUND;
                resp.headers.insert(http::header::CONTENT_LENGTH, body.len().into());
                resp.body = ResponseBody::from_bytes(bytes::Bytes::from(body));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_upload_that_vanishes_starts_over() {
    let srv = server(|_| {});
    let wrapper: Arc<Mutex<Option<Arc<UploadGoneAfterListParts>>>> = Arc::new(Mutex::new(None));
    let w2 = wrapper.clone();
    let (c, _) = client_wrapped(&srv, move |inner| {
        let t = Arc::new(UploadGoneAfterListParts {
            inner,
            listed: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            seen: Mutex::new(Vec::new()),
        });
        *w2.lock().unwrap() = Some(t.clone());
        t
    });
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
    let seen = wrapper.lock().unwrap().as_ref().unwrap().seen.lock().unwrap().clone();
    let creates = seen.iter().filter(|(m, p)| m == "POST" && p.ends_with("?uploads")).count();
    assert_eq!(creates, 2, "no fresh upload after the resumed one vanished: {seen:?}");
}
