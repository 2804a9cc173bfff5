//! A stream upload whose part is refused is aborted: nothing half-written is left in
//! progress on the server. The refusal is the one synthetic part: a transport wrapper
//! answers the second UploadPart with 403 AccessDenied before it reaches `ferry serve`
//! (which has no per-request fault of that kind); every other request is real.

mod sched_support;

use ferry_engine::upload::{upload_stream, UploadParams};
use ferry_engine::Engine;
use ferry_store::{Error, ObjectRef};
use ferry_wire::{Request, Response, ResponseBody, Transport, TransportStats, WireError};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use sched_support::{client_wrapped, data, server};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

struct RefuseSecondPart {
    inner: Arc<dyn Transport>,
    parts: AtomicU64,
    seen: Mutex<Vec<(String, String)>>,
}

impl Transport for RefuseSecondPart {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        self.seen.lock().unwrap().push((req.method.to_string(), req.path_and_query.clone()));
        let refuse = req.method == http::Method::PUT
            && req.path_and_query.contains("partNumber=")
            && self.parts.fetch_add(1, SeqCst) == 1;
        let fut = self.inner.send(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if refuse {
                let body = "<Error><Code>AccessDenied</Code><Message>refused by the test</Message></Error>";
                resp.status = http::StatusCode::FORBIDDEN;
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
async fn a_refused_part_aborts_the_upload() {
    let srv = server(|_| {});
    let wrapper: Arc<Mutex<Option<Arc<RefuseSecondPart>>>> = Arc::new(Mutex::new(None));
    let w2 = wrapper.clone();
    let (c, _) = client_wrapped(&srv, move |inner| {
        let t = Arc::new(RefuseSecondPart { inner, parts: AtomicU64::new(0), seen: Mutex::new(Vec::new()) });
        *w2.lock().unwrap() = Some(t.clone());
        t
    });
    c.create_bucket("abort").await.unwrap();
    let e = Engine::new(c);
    let body = data(11 << 20, 3);
    let source = futures_util::stream::iter(vec![Ok(body)]).boxed();
    let object = ObjectRef::new("abort", "k");
    // One part at a time, so the refused part is the second one sent.
    let params = UploadParams { part_size: 5 << 20, concurrency: 1, ..UploadParams::default() };
    let err = upload_stream(&e, source, &object, &params, None).await.unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    let seen = wrapper.lock().unwrap().as_ref().unwrap().seen.lock().unwrap().clone();
    let last = seen.last().unwrap();
    assert_eq!(last.0, "DELETE", "the upload was not aborted: {seen:?}");
    assert!(last.1.starts_with("/abort/k?uploadId="), "{last:?}");
    assert!(e.list_uploads("abort", "").await.unwrap().is_empty(), "an upload is left in progress");
    assert!(e.head(&object).await.unwrap_err().is_not_found(), "a half-written object is visible");
}
