//! A stream upload whose part is refused is aborted: nothing half-written is left in
//! progress on the server. The refusal is the one synthetic part: testkit's `Intercept`
//! answers the second UploadPart with 403 AccessDenied in place of `ferry serve`'s answer
//! (the server has no per-request fault of that kind); every other request is real.

use crate::sched_support;

use ferry_engine::upload::{upload_stream, UploadParams};
use ferry_engine::Engine;
use ferry_store::{Error, ObjectRef};
use ferry_testkit::transport::{ErrorAnswer, Intercept};
use futures_util::StreamExt;
use sched_support::{client_wrapped, data, server};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_part_aborts_the_upload() {
    let srv = server(|_| {});
    let parts = AtomicU64::new(0);
    let (layer, wrapper) = Intercept::layer(move |req| {
        let part = req.method == http::Method::PUT && req.path_and_query.contains("partNumber=");
        (part && parts.fetch_add(1, SeqCst) == 1).then_some(ErrorAnswer {
            status: http::StatusCode::FORBIDDEN,
            code: "AccessDenied",
            message: "refused by the test",
        })
    });
    let (c, _) = client_wrapped(&srv, layer);
    c.create_bucket("abort").await.unwrap();
    let e = Engine::new(c);
    let body = data(11 << 20, 3);
    let source = futures_util::stream::iter(vec![Ok(body)]).boxed();
    let object = ObjectRef::new("abort", "k");
    // One part at a time, so the refused part is the second one sent.
    let params = UploadParams { part_size: 5 << 20, concurrency: 1, ..UploadParams::default() };
    let err = upload_stream(&e, source, &object, &params, None).await.unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    let seen = wrapper.get().unwrap().seen();
    let last = seen.last().unwrap();
    assert_eq!(last.0, "DELETE", "the upload was not aborted: {seen:?}");
    assert!(last.1.starts_with("/abort/k?uploadId="), "{last:?}");
    assert!(e.list_uploads("abort", "").await.unwrap().is_empty(), "an upload is left in progress");
    assert!(e.head(&object).await.unwrap_err().is_not_found(), "a half-written object is visible");
}
