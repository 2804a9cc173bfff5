//! Large bodies cross h2 in large DATA frames: `ferry serve` gathers the chunks its
//! storage has ready into frames of up to the 1 MiB the client accepts
//! (`ferry_wire::h2::MAX_FRAME_SIZE`), instead of one frame per 64 KiB synthetic block or
//! 256 KiB stored chunk. The h2 transport hands each DATA frame to the caller as one
//! chunk, so the chunks a reader sees show the frames; the bytes must come out whole and
//! in order however the server cut and glued them.

use bytes::Bytes;
use ferry_testkit::data::pattern;
use ferry_testkit::http::{create_bucket, get_all, put, send, streamed};
use ferry_testkit::FerryServe;
use ferry_wire::h2::MAX_FRAME_SIZE;
use ferry_wire::{Mode, RequestBody, Transport};
use futures_util::StreamExt;
use http::Method;
use std::sync::Arc;

/// Reads `path` over `t`; the body and the size of each chunk.
async fn chunks(t: &Arc<dyn Transport>, path: &str) -> (Bytes, Vec<usize>) {
    let r = send(t, Method::GET, path, RequestBody::Empty).await.unwrap();
    assert_eq!(r.status, 200, "GET {path}");
    let mut body = r.body;
    let (mut all, mut sizes) = (Vec::new(), Vec::new());
    while let Some(c) = body.next().await {
        let c = c.unwrap();
        sizes.push(c.len());
        all.extend_from_slice(&c);
    }
    (Bytes::from(all), sizes)
}

/// Frames no larger than the client allows, and on average larger than the 256 KiB
/// chunks the server's storage yields (so they were gathered).
fn assert_gathered(path: &str, sizes: &[usize]) {
    let total: usize = sizes.iter().sum();
    assert!(
        sizes.iter().all(|&n| n <= MAX_FRAME_SIZE as usize),
        "GET {path}: a chunk above {MAX_FRAME_SIZE} bytes: {sizes:?}"
    );
    assert!(
        sizes.len() * (256 << 10) < total,
        "GET {path}: {} chunks for {total} bytes, not gathered: {sizes:?}",
        sizes.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_object_arrives_whole_in_frames_of_up_to_a_mebibyte() {
    let srv = FerryServe::new().anonymous().start();
    let h2 = srv.transport(Mode::H2, |_| {});
    create_bucket(&h2, "frames").await;
    // Not a multiple of any chunk or frame size, uploaded in 20 KiB pieces.
    let data = pattern((6 << 20) + 12_345);
    put(&h2, "/frames/obj", streamed(data.clone(), 20 << 10)).await;
    let (body, sizes) = chunks(&h2, "/frames/obj").await;
    assert!(body == data, "the body differs from what was stored");
    assert_gathered("/frames/obj", &sizes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synthetic_object_over_h2_matches_the_same_over_h1() {
    let srv = FerryServe::new().anonymous().configure(|c| c.synthetic_bucket = Some("syn".into())).start();
    let h2 = srv.transport(Mode::H2, |_| {});
    let h1 = srv.transport(Mode::H1Pool, |_| {});
    let path = "/syn/8MiB";
    let (body, sizes) = chunks(&h2, path).await;
    let (status, expected) = get_all(&h1, path).await;
    assert_eq!(status, 200);
    assert_eq!(expected.len(), 8 << 20);
    assert!(body == expected, "h2 and h1 bodies of {path} differ");
    assert_gathered(path, &sizes);
}
