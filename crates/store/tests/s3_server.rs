//! The S3 client against a real `ferry serve` started in-process (memory and disk
//! storage), over the real transports (`ferry_wire::transport`): every operation round
//! trip over each transport mode, pagination, multipart, presigned URLs, and the
//! server's fault flags (503s retried, reset bodies resumed). Corrupted bodies cannot be
//! produced by the server; that case is covered by the scripted unit tests.

use bytes::Bytes;
use ferry_server::{ServeConfig, Server, Storage};
use ferry_store::{
    ChecksumAlgorithm, CopyParams, Credentials, CredentialsSource, Error, GetParams, ListParams, Mode, MultipartParams, ObjectRef, PutParams,
    RangeSpec, RetryConfig, S3Client, UploadSource,
};
use futures_util::{StreamExt, TryStreamExt};
use std::net::SocketAddr;
use std::time::Duration;

struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(disk: bool, configure: impl FnOnce(&mut ServeConfig)) -> Running {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap());
    let dir = disk.then(|| tempfile::tempdir().unwrap());
    if let Some(d) = &dir {
        config.storage = Storage::Disk(d.path().to_path_buf());
    }
    configure(&mut config);
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let server = Server::bind(config).await.unwrap();
            addr_tx.send(server.local_addr()).unwrap();
            server
                .run(async move {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
        });
    });
    let addr = addr_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    Running { addr, stop: Some(stop_tx), thread: Some(thread), _dir: dir }
}

fn retry(max_attempts: u32) -> RetryConfig {
    RetryConfig { max_attempts, base_delay: Duration::from_millis(5), throttled_base_delay: Duration::from_millis(10), ..RetryConfig::default() }
}

fn client(server: &Running, mode: Mode, retry: RetryConfig) -> S3Client {
    S3Client::builder(format!("http://{}", server.addr))
        .region("us-east-1")
        .credentials(CredentialsSource::Explicit(Credentials::new("ferry", "ferry-secret")))
        .mode(mode)
        .retry(retry)
        .build()
        .unwrap()
}

fn data(n: usize, seed: u8) -> Bytes {
    Bytes::from((0..n).map(|i| ((i * 31 + seed as usize) % 251) as u8).collect::<Vec<u8>>())
}

async fn round_trip(mode: Mode, disk: bool) {
    let server = start(disk, |_| {});
    let c = client(&server, mode, RetryConfig::default());
    c.create_bucket("rtb").await.unwrap();
    let o = ObjectRef::new("rtb", "dir/hello world+ü.txt");

    // PUT bytes, with metadata and Content-MD5, then HEAD and GET.
    let body = data(300_000, 1);
    let params = PutParams {
        content_type: Some("text/plain".into()),
        metadata: vec![("Owner".into(), "ferry".into())],
        content_md5: true,
        ..PutParams::default()
    };
    let put = c.put_object(&o, body.clone(), params).await.unwrap();
    assert!(put.etag.is_some());
    let info = c.head_object(&o).await.unwrap();
    assert_eq!(info.size, 300_000);
    assert_eq!(info.content_type.as_deref(), Some("text/plain"));
    assert_eq!(info.metadata.get("owner").map(String::as_str), Some("ferry"));
    assert_eq!(info.etag, put.etag);
    assert!(info.checksums.iter().any(|(a, _)| *a == ChecksumAlgorithm::Crc64Nvme), "{info:?}");
    let got = c.get_object(&o, GetParams::default()).await.unwrap();
    assert_eq!(got.meta.size, 300_000);
    assert_eq!(got.body.collect().await.unwrap(), body);

    // Ranged GET.
    let r = c.get_object(&o, GetParams::range(RangeSpec::FromTo(1000, 1999))).await.unwrap();
    assert_eq!((r.range, r.meta.size), (Some((1000, 1999)), 300_000));
    assert_eq!(r.body.collect().await.unwrap(), body.slice(1000..2000));
    let r = c.get_object(&o, GetParams::range(RangeSpec::Suffix(10))).await.unwrap();
    assert_eq!(r.body.collect().await.unwrap(), body.slice(299_990..));

    // Conditions.
    let etag = info.etag.clone().unwrap();
    let e = c.get_object(&o, GetParams { if_none_match: Some(etag.clone()), ..GetParams::default() }).await.unwrap_err();
    assert!(matches!(e, Error::Precondition { status: 304, .. }), "{e:?}");
    let e = c.get_object(&o, GetParams { if_match: Some("\"nope\"".into()), ..GetParams::default() }).await.unwrap_err();
    assert!(matches!(e, Error::Precondition { status: 412, .. }), "{e:?}");
    let e = c.put_object(&o, Bytes::from_static(b"x"), PutParams { if_none_match_star: true, ..PutParams::default() }).await.unwrap_err();
    assert!(matches!(e, Error::Precondition { .. }), "{e:?}");

    // Not found, with a request id.
    let e = c.get_object(&ObjectRef::new("rtb", "missing"), GetParams::default()).await.unwrap_err();
    assert!(e.is_not_found() && e.request_id().is_some(), "{e:?}");
    let e = c.head_object(&ObjectRef::new("rtb", "missing")).await.unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    let e = c.head_object(&ObjectRef::new("no-such-bucket", "k")).await.unwrap_err();
    assert!(e.is_not_found(), "{e:?}");

    // PUT from a file (two passes) and from a stream (aws-chunked trailer), each algorithm.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.bin");
    let fbody = data(1_234_567, 2);
    std::fs::write(&path, &fbody).unwrap();
    for algo in [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32, ChecksumAlgorithm::Sha256] {
        let f = ObjectRef::new("rtb", format!("file-{algo}"));
        let out = c.put_object_file(&f, &path, PutParams { checksum: Some(algo), content_md5: true, ..PutParams::default() }).await.unwrap();
        assert_eq!(out.checksum.as_ref().map(|(a, _)| *a), Some(algo));
        assert_eq!(c.get_object(&f, GetParams::default()).await.unwrap().body.collect().await.unwrap(), fbody);
        let s = ObjectRef::new("rtb", format!("stream-{algo}"));
        let chunks: Vec<std::io::Result<Bytes>> = fbody.chunks(100_003).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        let out = c.put_object_stream(&s, fbody.len() as u64, futures_util::stream::iter(chunks), PutParams { checksum: Some(algo), ..PutParams::default() }).await.unwrap();
        let head = c.head_object(&s).await.unwrap();
        assert!(head.checksums.contains(out.checksum.as_ref().unwrap()), "{head:?} vs {out:?}");
        assert_eq!(c.get_object(&s, GetParams::default()).await.unwrap().body.collect().await.unwrap(), fbody);
    }
    let s = ObjectRef::new("rtb", "stream-plain");
    let chunks = vec![Ok(Bytes::from_static(b"plain "))];
    c.put_object_stream(&s, 6, futures_util::stream::iter(chunks), PutParams { checksum: None, ..PutParams::default() }).await.unwrap();
    assert_eq!(c.get_object(&s, GetParams::default()).await.unwrap().body.collect().await.unwrap(), Bytes::from_static(b"plain "));
    // A stream shorter than declared fails and leaves nothing behind.
    let short = ObjectRef::new("rtb", "short");
    let chunks = vec![Ok(Bytes::from_static(b"abc"))];
    assert!(c.put_object_stream(&short, 10, futures_util::stream::iter(chunks), PutParams::default()).await.is_err());
    assert!(c.head_object(&short).await.unwrap_err().is_not_found());

    // Empty object.
    let empty = ObjectRef::new("rtb", "empty");
    c.put_object(&empty, Bytes::new(), PutParams::default()).await.unwrap();
    assert_eq!(c.get_object(&empty, GetParams::default()).await.unwrap().body.collect().await.unwrap().len(), 0);

    // Copy, keeping and replacing metadata.
    let copy = ObjectRef::new("rtb", "copy");
    let out = c.copy_object(&o, &copy, CopyParams::default()).await.unwrap();
    assert_eq!(Some(out.etag), info.etag);
    assert_eq!(c.head_object(&copy).await.unwrap().metadata.get("owner").map(String::as_str), Some("ferry"));
    let copy2 = ObjectRef::new("rtb", "copy2");
    c.copy_object(&o, &copy2, CopyParams { metadata: Some(vec![("k".into(), "v".into())]), ..CopyParams::default() }).await.unwrap();
    let h = c.head_object(&copy2).await.unwrap();
    assert_eq!(h.metadata.get("k").map(String::as_str), Some("v"));
    assert!(!h.metadata.contains_key("owner"));
    assert_eq!(c.get_object(&copy2, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body);
    let e = c.copy_object(&ObjectRef::new("rtb", "missing"), &copy, CopyParams::default()).await.unwrap_err();
    assert!(e.is_not_found(), "{e:?}");

    // Delete, DeleteObjects.
    c.delete_object(&copy).await.unwrap();
    assert!(c.head_object(&copy).await.unwrap_err().is_not_found());
    c.delete_object(&copy).await.unwrap();
    let (objects, _) = c.list_all("rtb", ListParams::default()).await.unwrap();
    let keys: Vec<String> = objects.iter().map(|o| o.key.clone()).collect();
    assert!(keys.contains(&o.key), "{keys:?}");
    let out = c.delete_objects("rtb", &keys).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.deleted.len(), keys.len());
    assert!(c.list_all("rtb", ListParams::default()).await.unwrap().0.is_empty());
    c.delete_bucket("rtb").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_h1_pool_memory() {
    round_trip(Mode::H1Pool, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_h1_pipeline_memory() {
    round_trip(Mode::H1Pipeline, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_h2_memory() {
    round_trip(Mode::H2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_auto_memory() {
    round_trip(Mode::Auto, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_auto_disk() {
    round_trip(Mode::Auto, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_h1_pool_disk() {
    round_trip(Mode::H1Pool, true).await;
}

async fn listing(disk: bool) {
    let server = start(disk, |_| {});
    let c = client(&server, Mode::Auto, RetryConfig::default());
    c.create_bucket("list").await.unwrap();
    // 2,500 keys: 5 directories x 500, plus awkward names.
    let mut keys: Vec<String> = (0..2500).map(|i| format!("d{}/k{:05}", i % 5, i)).collect();
    keys.extend(["top level".to_string(), "weird/\u{1}ctl&<>\"'+%20".to_string(), "ü/ä".to_string()]);
    futures_util::stream::iter(keys.clone())
        .map(|k| {
            let c = c.clone();
            async move { c.put_object(&ObjectRef::new("list", k), Bytes::from_static(b"x"), PutParams::default()).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    keys.sort();

    // Flat, pages of 1,000 (the server's default) and of 333.
    for max_keys in [None, Some(333)] {
        let pages: Vec<_> = c.list_objects_v2("list", ListParams { max_keys, ..ListParams::default() }).try_collect().await.unwrap();
        let expected_pages = keys.len().div_ceil(max_keys.unwrap_or(1000) as usize);
        assert_eq!(pages.len(), expected_pages);
        let listed: Vec<String> = pages.iter().flat_map(|p| p.objects.iter().map(|o| o.key.clone())).collect();
        assert_eq!(listed, keys);
        assert!(pages.last().unwrap().next_continuation_token.is_none());
    }
    // Delimiter at the top: the directories, plus the top-level key.
    let (objects, prefixes) = c.list_all("list", ListParams { delimiter: Some("/".into()), ..ListParams::default() }).await.unwrap();
    assert_eq!(objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), vec!["top level"]);
    assert_eq!(prefixes, vec!["d0/", "d1/", "d2/", "d3/", "d4/", "weird/", "ü/"]);
    // Prefix + delimiter, paginated.
    let pages: Vec<_> = c
        .list_objects_v2("list", ListParams { prefix: Some("d3/".into()), delimiter: Some("/".into()), max_keys: Some(200), ..ListParams::default() })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(pages.len(), 3);
    let n: usize = pages.iter().map(|p| p.objects.len()).sum();
    assert_eq!(n, 500);
    // start-after.
    let (objects, _) = c.list_all("list", ListParams { start_after: Some("d4/k02494".into()), ..ListParams::default() }).await.unwrap();
    let expected: Vec<&str> = keys.iter().map(String::as_str).filter(|k| *k > "d4/k02494").collect();
    assert_eq!(expected.len(), 4);
    assert_eq!(objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), expected);
    // A listing stream that is dropped early sends no more requests (nothing to assert
    // on the server here); a missing bucket is NotFound.
    let e = c.list_objects_v2("nope", ListParams::default()).next().await.unwrap().unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    // Clean up with DeleteObjects in batches of 1,000.
    let out = c.delete_objects("list", &keys).await.unwrap();
    assert_eq!(out.deleted.len(), keys.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pagination_2500_keys_memory() {
    listing(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pagination_2500_keys_disk() {
    listing(true).await;
}

async fn multipart(disk: bool, mode: Mode) {
    let server = start(disk, |_| {});
    let c = client(&server, mode, RetryConfig::default());
    c.create_bucket("mpb").await.unwrap();
    let body = data(23 * 1024 * 1024, 3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    std::fs::write(&path, &body).unwrap();
    let params = MultipartParams { part_size: 5 * 1024 * 1024, concurrency: 4, ..MultipartParams::default() };

    // From a file, CRC64NVME FULL_OBJECT: verifiable on GET.
    let o = ObjectRef::new("mpb", "from-file");
    let out = c.upload_multipart(&o, UploadSource::File(path.clone()), params.clone()).await.unwrap();
    assert!(out.etag.ends_with("-5\""), "{}", out.etag);
    let (algo, value) = out.checksum.clone().unwrap();
    assert_eq!(algo, ChecksumAlgorithm::Crc64Nvme);
    assert_eq!(value, ferry_proto::checksum::base64_encode(&algo.digest(&body)));
    let got = c.get_object(&o, GetParams::default()).await.unwrap();
    assert_eq!(got.meta.size, body.len() as u64);
    assert_eq!(got.body.collect().await.unwrap(), body);

    // From a stream, SHA-256 COMPOSITE.
    let o2 = ObjectRef::new("mpb", "from-stream");
    let chunks: Vec<std::io::Result<Bytes>> = body.chunks(1_000_000).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    let p2 = MultipartParams { put: PutParams { checksum: Some(ChecksumAlgorithm::Sha256), ..PutParams::default() }, ..params.clone() };
    let out = c.upload_multipart(&o2, UploadSource::Stream(futures_util::stream::iter(chunks).boxed()), p2).await.unwrap();
    assert!(out.checksum.unwrap().1.ends_with("-5"));
    assert_eq!(c.get_object(&o2, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body);

    // The five calls by hand: create, parts out of order, list, complete; and abort.
    let o3 = ObjectRef::new("mpb", "by-hand");
    let up = c.create_multipart(&o3, &PutParams::default()).await.unwrap();
    let p2 = c.upload_part(&up, 2, body.slice(5 << 20..6 << 20)).await.unwrap();
    let p1 = c.upload_part(&up, 1, body.slice(..5 << 20)).await.unwrap();
    let listed = c.list_parts(&up).await.unwrap();
    assert_eq!(listed.iter().map(|p| (p.part_number, p.size)).collect::<Vec<_>>(), vec![(1, 5 << 20), (2, 1 << 20)]);
    c.complete_multipart(&up, &[p2, p1]).await.unwrap();
    assert_eq!(c.get_object(&o3, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body.slice(..6 << 20));
    let up = c.create_multipart(&ObjectRef::new("mpb", "aborted"), &PutParams::default()).await.unwrap();
    c.upload_part(&up, 1, Bytes::from_static(b"x")).await.unwrap();
    c.abort_multipart(&up).await.unwrap();
    assert!(c.list_parts(&up).await.unwrap_err().is_not_found());
    assert!(c.head_object(&ObjectRef::new("mpb", "aborted")).await.unwrap_err().is_not_found());

    // A failing source aborts: nothing is left half-written.
    let o4 = ObjectRef::new("mpb", "failing");
    let mut chunks: Vec<std::io::Result<Bytes>> = body.chunks(1 << 20).take(12).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    chunks.push(Err(std::io::Error::other("source broke")));
    let e = c.upload_multipart(&o4, UploadSource::Stream(futures_util::stream::iter(chunks).boxed()), params.clone()).await.unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(c.head_object(&o4).await.unwrap_err().is_not_found());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_23_mib_memory() {
    multipart(false, Mode::Auto).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_23_mib_disk_h1_pool() {
    multipart(true, Mode::H1Pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presigned_get_is_fetched_with_a_plain_request() {
    let server = start(false, |_| {});
    let c = client(&server, Mode::H1Pool, RetryConfig::default());
    c.create_bucket("pre").await.unwrap();
    let o = ObjectRef::new("pre", "a dir/file +.txt");
    c.put_object(&o, Bytes::from_static(b"presigned body"), PutParams::default()).await.unwrap();
    let url = c.presign_get(&o, Duration::from_secs(300)).unwrap();
    let addr = server.addr;
    let (status, body) = tokio::task::spawn_blocking(move || plain_get(addr, &url)).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, b"presigned body");
    // Tampering with the URL breaks the signature.
    let url = c.presign_get(&o, Duration::from_secs(300)).unwrap().replace("X-Amz-Expires=300", "X-Amz-Expires=301");
    let (status, _) = tokio::task::spawn_blocking(move || plain_get(addr, &url)).await.unwrap();
    assert_eq!(status, 403);
}

/// One HTTP/1.1 GET over a plain socket, `Connection: close`, read to the end.
fn plain_get(addr: SocketAddr, url: &str) -> (u16, Vec<u8>) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, buf[split + 4..].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_an_auth_error() {
    let server = start(false, |_| {});
    let c = S3Client::builder(format!("http://{}", server.addr))
        .credentials(CredentialsSource::Explicit(Credentials::new("ferry", "wrong-secret")))
        .mode(Mode::H1Pool)
        .build()
        .unwrap();
    let e = c.create_bucket("x").await.unwrap_err();
    assert!(matches!(&e, Error::Auth { code, .. } if code == "SignatureDoesNotMatch"), "{e:?}");
    let c = S3Client::builder(format!("http://{}", server.addr))
        .credentials(CredentialsSource::Explicit(Credentials::new("nobody", "x")))
        .mode(Mode::H1Pool)
        .build()
        .unwrap();
    let e = c.head_object(&ObjectRef::new("x", "y")).await.unwrap_err();
    assert!(matches!(e, Error::Auth { .. }), "{e:?}");
}

/// With 30% of requests answered 503 SlowDown, every operation still succeeds.
/// `max_attempts` is raised to 12 so that the chance of one operation failing all its
/// attempts (0.3^12, about 5e-7) does not make the test flaky.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_503_are_retried() {
    let server = start(false, |c| {
        c.faults.error_503_rate = 0.3;
        c.faults.seed = 7;
    });
    let c = client(&server, Mode::Auto, retry(12));
    c.create_bucket("f503").await.unwrap();
    let body = data(200_000, 4);
    for i in 0..10 {
        let o = ObjectRef::new("f503", format!("k{i}"));
        c.put_object(&o, body.clone(), PutParams::default()).await.unwrap();
        c.head_object(&o).await.unwrap();
        assert_eq!(c.get_object(&o, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body);
    }
    let (objects, _) = c.list_all("f503", ListParams { max_keys: Some(3), ..ListParams::default() }).await.unwrap();
    assert_eq!(objects.len(), 10);
    c.copy_object(&ObjectRef::new("f503", "k0"), &ObjectRef::new("f503", "copy"), CopyParams::default()).await.unwrap();
    let big = data(11 * 1024 * 1024, 5);
    let out = c
        .upload_multipart(
            &ObjectRef::new("f503", "mpb"),
            UploadSource::Stream(futures_util::stream::iter(vec![Ok(big.clone())]).boxed()),
            MultipartParams { part_size: 5 * 1024 * 1024, concurrency: 3, ..MultipartParams::default() },
        )
        .await
        .unwrap();
    assert!(out.etag.ends_with("-3\""));
    assert_eq!(c.get_object(&ObjectRef::new("f503", "mpb"), GetParams::default()).await.unwrap().body.collect().await.unwrap(), big);
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).chain(["copy".to_string(), "mpb".to_string()]).collect();
    let out = c.delete_objects("f503", &keys).await.unwrap();
    assert!(out.errors.is_empty());
    for k in &keys {
        c.delete_object(&ObjectRef::new("f503", k.as_str())).await.unwrap();
    }
}

/// Half of the GET bodies are cut by a reset part-way: every byte still arrives intact,
/// through resumed ranged GETs. 12 attempts keep the chance of a GET being cut on every
/// attempt (0.5^12, about 2e-4) out of the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_reset_mid_body_are_resumed() {
    let server = start(false, |c| {
        c.faults.reset_rate = 0.5;
        c.faults.seed = 11;
    });
    let c = client(&server, Mode::H1Pool, retry(12));
    c.create_bucket("reset").await.unwrap();
    for i in 0..6u8 {
        let o = ObjectRef::new("reset", format!("obj{i}"));
        let body = data(4 * 1024 * 1024, i);
        c.put_object(&o, body.clone(), PutParams::default()).await.unwrap();
        let got = c.get_object(&o, GetParams::default()).await.unwrap();
        assert_eq!(got.body.collect().await.unwrap(), body, "object {i}");
        // Ranged GETs resume too.
        let r = c.get_object(&o, GetParams::range(RangeSpec::FromTo(1000, 3_000_000))).await.unwrap();
        assert_eq!(r.body.collect().await.unwrap(), body.slice(1000..3_000_001));
    }
    // Resets did happen: each closes a pooled connection, so more than one was opened.
    assert!(c.transport().stats().connections_opened > 1, "{:?}", c.transport().stats());
    // Over the pipeline and h2 as well.
    for mode in [Mode::H1Pipeline, Mode::H2] {
        let c = client(&server, mode, retry(12));
        let o = ObjectRef::new("reset", "obj1");
        assert_eq!(c.get_object(&o, GetParams::default()).await.unwrap().body.collect().await.unwrap(), data(4 * 1024 * 1024, 1), "{mode:?}");
    }
}

/// An object replaced while its GET is being resumed is not mixed: If-Match fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_object_is_never_mixed_into_a_resumed_get() {
    let server = start(false, |c| {
        c.faults.reset_rate = 1.0;
        c.faults.seed = 3;
    });
    let c = client(&server, Mode::H1Pool, retry(3));
    c.create_bucket("mix").await.unwrap();
    let o = ObjectRef::new("mix", "o");
    c.put_object(&o, data(4 * 1024 * 1024, 1), PutParams::default()).await.unwrap();
    let mut body = c.get_object(&o, GetParams::default()).await.unwrap().body;
    // Read what arrives before the cut, then replace the object.
    let first = body.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());
    c.put_object(&o, data(4 * 1024 * 1024, 2), PutParams::default()).await.unwrap();
    let mut last = None;
    while let Some(item) = body.chunk().await {
        if let Err(e) = item {
            last = Some(e);
        }
    }
    assert!(matches!(last, Some(Error::Precondition { status: 412, .. })), "{last:?}");
}
