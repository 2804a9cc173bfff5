//! A few S3 calls on a bare [`Transport`], for tests of the transports themselves (no
//! signing: the server is [`crate::FerryServe::anonymous`]). Each one panics with the
//! request it was on when it fails.

use bytes::Bytes;
use ferry_wire::{Request, RequestBody, Response, Transport, WireError};
use futures_util::StreamExt;
use http::{Method, StatusCode};
use std::sync::Arc;

pub async fn send(
    t: &Arc<dyn Transport>,
    method: Method,
    path: &str,
    body: RequestBody,
) -> Result<Response, WireError> {
    let mut req = Request::new(method, path);
    req.body = body;
    t.send(req).await
}

pub async fn create_bucket(t: &Arc<dyn Transport>, bucket: &str) {
    let r = send(t, Method::PUT, &format!("/{bucket}"), RequestBody::Empty).await.unwrap();
    let status = r.status;
    let body = r.body.collect(1 << 20).await.unwrap();
    assert!(status.is_success(), "creating bucket {bucket}: {status} {}", String::from_utf8_lossy(&body));
}

pub async fn put(t: &Arc<dyn Transport>, path: &str, body: RequestBody) -> Response {
    let r = send(t, Method::PUT, path, body).await.unwrap_or_else(|e| panic!("PUT {path}: {e}"));
    assert_eq!(r.status, StatusCode::OK, "PUT {path}");
    r
}

/// GETs `path` and reads the whole body (up to 64 MiB).
pub async fn get_all(t: &Arc<dyn Transport>, path: &str) -> (StatusCode, Bytes) {
    let r = send(t, Method::GET, path, RequestBody::Empty).await.unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = r.status;
    let body = r.body.collect(64 << 20).await.unwrap_or_else(|e| panic!("GET {path} body: {e}"));
    (status, body)
}

/// A streamed request body of `data` in chunks of `chunk` bytes.
pub fn streamed(data: Bytes, chunk: usize) -> RequestBody {
    let len = data.len() as u64;
    let pieces: Vec<std::io::Result<Bytes>> =
        (0..data.len()).step_by(chunk.max(1)).map(|i| Ok(data.slice(i..(i + chunk).min(data.len())))).collect();
    RequestBody::Stream { len, stream: futures_util::stream::iter(pieces).boxed() }
}
