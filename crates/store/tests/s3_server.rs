//! The S3 client against `ferry serve`'s fault flags (503s retried, reset and stalled
//! bodies resumed, a replaced object never mixed into a resumed GET, an expired session
//! token renewed from its source), over the real transports.
//! The operation-by-operation suite is `conformance.rs`. Corrupted bodies cannot be
//! produced by the server; that case is covered by the scripted unit tests.

use bytes::Bytes;
use ferry_engine::upload::{upload_stream, UploadParams};
use ferry_server::Faults;
use ferry_store::{
    CopyParams, Credentials, CredentialsSource, Error, GetParams, ListParams, Mode, ObjectRef, ObjectStore,
    ObjectStoreExt, PutParams, PutPayload, RangeSpec, RetryConfig, S3Client,
};
use ferry_testkit::{FerryServe, Served, ACCESS_KEY, REGION, SECRET_KEY};
use futures_util::StreamExt;
use std::time::Duration;

fn retry(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        base_delay: Duration::from_millis(5),
        throttled_base_delay: Duration::from_millis(10),
        ..RetryConfig::default()
    }
}

fn client(server: &Served, mode: Mode, retry: RetryConfig) -> S3Client {
    S3Client::builder(server.url())
        .region(REGION)
        .credentials(CredentialsSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY)))
        .mode(mode)
        .retry(retry)
        .build()
        .unwrap()
}

fn data(n: usize, seed: u8) -> Bytes {
    Bytes::from((0..n).map(|i| ((i * 31 + seed as usize) % 251) as u8).collect::<Vec<u8>>())
}

/// With 30% of requests answered 503 SlowDown, every operation still succeeds.
/// `max_attempts` is raised to 12 so that the chance of one operation failing all its
/// attempts (0.3^12, about 5e-7) does not make the test flaky.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_503_are_retried() {
    let server = FerryServe::new().faults(Faults { error_503_rate: 0.3, seed: 7, ..Faults::default() }).start();
    let c = client(&server, Mode::Auto, retry(12));
    c.create_bucket("f503").await.unwrap();
    let body = data(200_000, 4);
    for i in 0..10 {
        let o = ObjectRef::new("f503", format!("k{i}"));
        c.put(&o, PutPayload::Bytes(body.clone()), PutParams::default()).await.unwrap();
        c.head(&o).await.unwrap();
        assert_eq!(c.get(&o, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body);
    }
    let (objects, _) = c.list_all("f503", ListParams { max_keys: Some(3), ..ListParams::default() }).await.unwrap();
    assert_eq!(objects.len(), 10);
    c.copy(&ObjectRef::new("f503", "k0"), &ObjectRef::new("f503", "copy"), CopyParams::default()).await.unwrap();
    let big = data(11 * 1024 * 1024, 5);
    let out = upload_stream(
        &ferry_engine::Engine::new(c.clone()),
        futures_util::stream::iter(vec![Ok(big.clone())]).boxed(),
        &ObjectRef::new("f503", "mpb"),
        &UploadParams { part_size: 5 * 1024 * 1024, concurrency: 3, ..UploadParams::default() },
        None,
    )
    .await
    .unwrap();
    assert!(out.etag.unwrap().ends_with("-3\""));
    assert_eq!(
        c.get(&ObjectRef::new("f503", "mpb"), GetParams::default()).await.unwrap().body.collect().await.unwrap(),
        big
    );
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).chain(["copy".to_string(), "mpb".to_string()]).collect();
    let out = c.delete_batch("f503", &keys).await.unwrap();
    assert!(out.errors.is_empty());
    for k in &keys {
        c.delete(&ObjectRef::new("f503", k.as_str())).await.unwrap();
    }
}

/// Half of the GET bodies are cut by a reset part-way: every byte still arrives intact,
/// through resumed ranged GETs. 12 attempts keep the chance of a GET being cut on every
/// attempt (0.5^12, about 2e-4) out of the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_reset_mid_body_are_resumed() {
    let server = FerryServe::new().faults(Faults { reset_rate: 0.5, seed: 11, ..Faults::default() }).start();
    let c = client(&server, Mode::H1Pool, retry(12));
    c.create_bucket("reset").await.unwrap();
    for i in 0..6u8 {
        let o = ObjectRef::new("reset", format!("obj{i}"));
        let body = data(4 * 1024 * 1024, i);
        c.put(&o, PutPayload::Bytes(body.clone()), PutParams::default()).await.unwrap();
        let got = c.get(&o, GetParams::default()).await.unwrap();
        assert_eq!(got.body.collect().await.unwrap(), body, "object {i}");
        // Ranged GETs resume too.
        let r = c.get(&o, GetParams::range(RangeSpec::FromTo(1000, 3_000_000))).await.unwrap();
        assert_eq!(r.body.collect().await.unwrap(), body.slice(1000..3_000_001));
    }
    // Resets did happen: each closes a pooled connection, so more than one was opened.
    assert!(c.transport().stats().connections_opened > 1, "{:?}", c.transport().stats());
    // Over the pipeline and h2 as well.
    for mode in [Mode::H1Pipeline, Mode::H2] {
        let c = client(&server, mode, retry(12));
        let o = ObjectRef::new("reset", "obj1");
        assert_eq!(
            c.get(&o, GetParams::default()).await.unwrap().body.collect().await.unwrap(),
            data(4 * 1024 * 1024, 1),
            "{mode:?}"
        );
    }
}

/// An object replaced while its GET is being resumed is not mixed: If-Match fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_object_is_never_mixed_into_a_resumed_get() {
    let server = FerryServe::new().faults(Faults { reset_rate: 1.0, seed: 3, ..Faults::default() }).start();
    let c = client(&server, Mode::H1Pool, retry(3));
    c.create_bucket("mix").await.unwrap();
    let o = ObjectRef::new("mix", "o");
    c.put(&o, PutPayload::Bytes(data(4 * 1024 * 1024, 1)), PutParams::default()).await.unwrap();
    let mut body = c.get(&o, GetParams::default()).await.unwrap().body;
    // Read what arrives before the cut, then replace the object.
    let first = body.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());
    c.put(&o, PutPayload::Bytes(data(4 * 1024 * 1024, 2)), PutParams::default()).await.unwrap();
    let mut last = None;
    while let Some(item) = body.chunk().await {
        if let Err(e) = item {
            last = Some(e);
        }
    }
    assert!(matches!(last, Some(Error::Precondition { status: 412, .. })), "{last:?}");
}

/// Half of the GET bodies stop part-way for 30 s (the server's stall fault): with a
/// 300 ms no-progress time-out, each stalled body is given up and resumed with Range, so
/// every byte arrives intact in seconds, over each transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_time_out_and_are_resumed() {
    let server = FerryServe::new()
        .faults(Faults { stall_rate: 0.5, stall: Duration::from_secs(30), seed: 3, ..Faults::default() })
        .start();
    for mode in [Mode::H1Pool, Mode::H1Pipeline, Mode::H2] {
        let mut b = S3Client::builder(server.url())
            .region(REGION)
            .credentials(CredentialsSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY)))
            .mode(mode)
            .retry(retry(12));
        b.limits.read_timeout = Some(Duration::from_millis(300));
        let c = b.build().unwrap();
        let bucket = format!("stall-{}", c.transport().name());
        c.create_bucket(&bucket).await.unwrap();
        let before = c.transport().stats().requests_sent;
        let gets = async {
            for i in 0..4u8 {
                let o = ObjectRef::new(&bucket, format!("obj{i}"));
                let body = data(2 * 1024 * 1024, i);
                c.put(&o, PutPayload::Bytes(body.clone()), PutParams::default()).await.unwrap();
                let got = c.get(&o, GetParams::default()).await.unwrap();
                assert_eq!(got.body.collect().await.unwrap(), body, "{mode:?} object {i}");
            }
        };
        tokio::time::timeout(Duration::from_secs(30), gets).await.expect("stalled GETs were given up and resumed");
        // 4 PUTs and 4 GETs, and at least one resumed GET: some body did stall.
        let sent = c.transport().stats().requests_sent - before;
        assert!(sent > 8, "{mode:?}: no GET was resumed ({sent} requests)");
    }
}

/// Temporary credentials that expire mid-run (the server's ExpiredToken fault after 3
/// requests per session token): keys from the shared credentials file are read again
/// once and the request goes through with the new token; explicit keys cannot be
/// renewed, so the request fails with an authorisation error naming ExpiredToken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_token_is_renewed_from_its_source_once() {
    let server = FerryServe::new().faults(Faults { expire_token_after: Some(3), ..Faults::default() }).start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let write = |token: &str| {
        std::fs::write(
            &file,
            format!("[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\naws_session_token = {token}\n"),
        )
        .unwrap()
    };
    write("tok-1");
    // Only this test reads the shared files (the others pass explicit keys).
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", &file);
    std::env::set_var("AWS_CONFIG_FILE", dir.path().join("no-config"));
    let c = S3Client::builder(server.url())
        .region(REGION)
        .credentials(CredentialsSource::Profile(None))
        .mode(Mode::H1Pool)
        .retry(retry(3))
        .build()
        .unwrap();
    c.create_bucket("tokens").await.unwrap();
    let put = |k: &'static str| {
        let c = c.clone();
        async move { c.put(&ObjectRef::new("tokens", k), PutPayload::Bytes(data(1000, 1)), PutParams::default()).await }
    };
    put("a").await.unwrap();
    put("b").await.unwrap();
    // The 4th request with tok-1 would be refused; the file now holds tok-2.
    write("tok-2");
    put("c").await.expect("renewed from the credentials file");
    put("d").await.unwrap();

    let mut keys = Credentials::new(ACCESS_KEY, SECRET_KEY);
    keys.session_token = Some("tok-explicit".into());
    let fixed = S3Client::builder(server.url())
        .region(REGION)
        .credentials(CredentialsSource::Explicit(keys))
        .mode(Mode::H1Pool)
        .retry(retry(3))
        .build()
        .unwrap();
    for k in ["e", "f", "g"] {
        fixed.put(&ObjectRef::new("tokens", k), PutPayload::Bytes(data(10, 2)), PutParams::default()).await.unwrap();
    }
    let e = fixed.put(&ObjectRef::new("tokens", "h"), PutPayload::Bytes(data(10, 2)), PutParams::default()).await;
    let e = e.expect_err("an expired token that cannot be renewed");
    assert!(matches!(&e, Error::Auth { code, .. } if code == "ExpiredToken"), "{e}");
    assert!(e.to_string().contains("ExpiredToken"), "{e}");
}

/// A listing's requests reach the transport marked as not object data
/// (`Request::object_data`), so `auto` does not take a page's burst of bytes for transfer
/// goodput (wire's auto/h1.rs); an object GET's stay marked as object data.
#[tokio::test]
async fn listing_requests_are_marked_not_object_data() {
    let server = FerryServe::new().start();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, bool)>::new()));
    let record = seen.clone();
    let (layer, _) = ferry_testkit::transport::Intercept::layer(move |req| {
        record.lock().unwrap().push((req.path_and_query.clone(), req.object_data));
        None
    });
    let config = ferry_store::ClientConfig::new(&server.url())
        .unwrap()
        .with_credentials(Credentials::new(ACCESS_KEY, SECRET_KEY));
    let transport = ferry_wire::transport(ferry_wire::TransportConfig::new(config.endpoint.clone())).unwrap();
    let c = S3Client::with_transport(layer(transport), config);
    c.create_bucket("marks").await.unwrap();
    let o = ObjectRef::new("marks", "k");
    c.put_object(&o, data(1000, 1), PutParams::default()).await.unwrap();
    let pages: Vec<_> = c.list_objects_v2("marks", ListParams::default()).collect().await;
    assert_eq!(pages.into_iter().map(|p| p.unwrap().objects.len()).sum::<usize>(), 1);
    c.get_object(&o, GetParams::default()).await.unwrap().body.collect().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    let list: Vec<_> = seen.iter().filter(|(p, _)| p.contains("list-type=2")).collect();
    assert!(!list.is_empty() && list.iter().all(|(_, data)| !data), "{seen:?}");
    let get = seen.iter().filter(|(p, _)| p.starts_with("/marks/k")).count();
    assert!(get >= 2 && seen.iter().filter(|(p, _)| p.starts_with("/marks/k")).all(|(_, data)| *data), "{seen:?}");
}
