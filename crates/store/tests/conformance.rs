//! The client conformance suite: written once, run for every storage target x transport.
//!
//! Targets: `ferry serve` in-process with memory and with disk storage, and MinIO, a
//! third-party S3 server that checks SigV4 strictly (`ferry_testkit::minio`, built by
//! `scripts/setup.sh`; the MinIO tests are `#[ignore]`d in a plain `cargo test` and run by
//! `scripts/test.sh` with `--ignored` when `FERRY_MINIO` names the binary, so a machine
//! without it reports them as ignored instead of passing them silently). Transports: h1-pool, h1-pipeline, h2 and
//! auto; MinIO is served over plain http here, where it speaks only HTTP/1.1, so its h2
//! row is absent. A new case added to `suite!` reaches every cell of the matrix.
//!
//! Azure Blob Storage runs the same cases against Azurite (`ferry_testkit::azurite`,
//! installed by `scripts/setup.sh`, `#[ignore]`d without `FERRY_AZURITE` like MinIO),
//! through `connect(Provider::Azure, ..)` with the emulator's Shared Key, over h1-pool,
//! h1-pipeline and auto (Azure speaks HTTP/1.1 only). Where Azure's documented
//! behaviour differs from S3's (no stored checksum of the trait's algorithms, ETags that
//! are not MD5s, a copy's new ETag, an abort that cannot drop blocks, 5,000 keys per
//! page), the case asserts Azure's behaviour for that target (`Target::azure`).

use bytes::Bytes;
use ferry_engine::upload::{upload_file, upload_stream, UploadParams};
use ferry_engine::Engine;
use ferry_store::{
    ChecksumAlgorithm, CopyParams, Credentials, CredentialsSource, DynObjectStore, Error, GetParams, ListParams, Mode,
    ObjectRef, ObjectStore, ObjectStoreExt, PartPayload, Provider, PutParams, PutPayload, RangeSpec, RetryConfig,
    S3Client, StoreOptions,
};
use ferry_testkit::fake_gcs::FakeGcs;
use ferry_testkit::minio::Minio;
use ferry_testkit::{FerryServe, Served, ACCESS_KEY, SECRET_KEY};
use futures_util::{StreamExt, TryStreamExt};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A server the suite runs against.
struct Target {
    addr: SocketAddr,
    access_key: &'static str,
    secret_key: &'static str,
    /// Keeps an in-process server alive (None for the shared MinIO process).
    _ferry: Option<Served>,
    /// The API the server speaks.
    provider: Provider,
    /// Served over https with this certificate to trust.
    ca_file: Option<std::path::PathBuf>,
}

impl Target {
    fn url(&self) -> String {
        let scheme = if self.ca_file.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The store under test, as the engine and front ends see it: only the trait.
    fn client(&self, mode: Mode) -> DynObjectStore {
        match self.provider {
            Provider::S3 => std::sync::Arc::new(self.s3_client(mode)),
            Provider::Azure => self.azure_client(mode, self.secret_key),
            provider => {
                let mut o = StoreOptions::new(self.url());
                o.credentials = CredentialsSource::Anonymous;
                o.mode = mode;
                o.ca_file = self.ca_file.clone();
                ferry_store::connect(provider, o).unwrap()
            }
        }
    }

    fn is_s3(&self) -> bool {
        self.provider == Provider::S3
    }

    fn azure(&self) -> bool {
        self.provider == Provider::Azure
    }

    /// An Azure client for the emulator's account with `key`.
    fn azure_client(&self, mode: Mode, key: &str) -> DynObjectStore {
        let mut options = StoreOptions::new(format!("http://{}/{}", self.addr, self.access_key));
        options.credentials = CredentialsSource::Explicit(Credentials::new(self.access_key, key));
        options.mode = mode;
        ferry_store::connect(Provider::Azure, options).unwrap()
    }

    fn s3_client(&self, mode: Mode) -> S3Client {
        S3Client::builder(self.url())
            .region("us-east-1")
            .credentials(CredentialsSource::Explicit(Credentials::new(self.access_key, self.secret_key)))
            .mode(mode)
            .retry(RetryConfig::default())
            .build()
            .unwrap()
    }

    /// A bucket name unique to this test, so tests sharing one server never collide.
    fn bucket(&self, base: &str, mode: Mode) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let m = match mode {
            Mode::H1Pool => "pool",
            Mode::H1Pipeline => "pipe",
            Mode::H2 => "h2",
            _ => "auto",
        };
        format!("{base}-{m}-{}-{}", std::process::id() % 10_000, N.fetch_add(1, Ordering::Relaxed))
    }

    fn ferry(disk: bool) -> Target {
        let f = if disk { FerryServe::new().disk() } else { FerryServe::new() }.start();
        Target {
            addr: f.addr(),
            access_key: ACCESS_KEY,
            secret_key: SECRET_KEY,
            _ferry: Some(f),
            provider: Provider::S3,
            ca_file: None,
        }
    }

    fn minio() -> Target {
        let m: &Minio = ferry_testkit::minio::minio();
        let (access_key, secret_key) = m.credentials();
        Target { addr: m.addr, access_key, secret_key, _ferry: None, provider: Provider::S3, ca_file: None }
    }

    fn azurite() -> Target {
        let a = ferry_testkit::azurite::azurite();
        Target {
            addr: a.addr,
            access_key: ferry_testkit::azurite::ACCOUNT,
            secret_key: ferry_testkit::azurite::ACCOUNT_KEY,
            _ferry: None,
            provider: Provider::Azure,
            ca_file: None,
        }
    }

    /// fake-gcs-server over plain http, or over https (h2).
    fn gcs(tls: bool) -> Target {
        let g: &FakeGcs =
            if tls { ferry_testkit::fake_gcs::fake_gcs_tls() } else { ferry_testkit::fake_gcs::fake_gcs() };
        Target {
            addr: g.addr,
            access_key: "",
            secret_key: "",
            _ferry: None,
            provider: Provider::Gcs,
            ca_file: g.ca_file.clone(),
        }
    }
}

fn data(n: usize, seed: u8) -> Bytes {
    Bytes::from((0..n).map(|i| ((i * 31 + seed as usize) % 251) as u8).collect::<Vec<u8>>())
}

/// Generates one test per (case, target, transport).
macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod ferry_memory { use super::*; suite!(@all Target::ferry(false); $($case),*); }
        mod ferry_disk { use super::*; suite!(@all Target::ferry(true); $($case),*); }
        mod minio { use super::*; suite!(@minio Target::minio(); $($case),*); }
        mod azurite { use super::*; suite!(@azurite Target::azurite(); $($case),*); }
    };
    (@all $target:expr; $($case:ident),*) => {
        $( mod $case {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h1_pool() { super::$case(&$target, Mode::H1Pool).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h1_pipeline() { super::$case(&$target, Mode::H1Pipeline).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h2() { super::$case(&$target, Mode::H2).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn auto() { super::$case(&$target, Mode::Auto).await }
        } )*
    };
    (@minio $target:expr; $($case:ident),*) => {
        $( mod $case {
            use super::*;
            #[ignore = "needs MinIO: run by scripts/test.sh with FERRY_MINIO set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h1_pool() { super::$case(&$target, Mode::H1Pool).await }
            #[ignore = "needs MinIO: run by scripts/test.sh with FERRY_MINIO set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h1_pipeline() { super::$case(&$target, Mode::H1Pipeline).await }
            #[ignore = "needs MinIO: run by scripts/test.sh with FERRY_MINIO set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn auto() { super::$case(&$target, Mode::Auto).await }
        } )*
    };
    (@azurite $target:expr; $($case:ident),*) => {
        $( mod $case {
            use super::*;
            #[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h1_pool() { super::$case(&$target, Mode::H1Pool).await }
            #[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h1_pipeline() { super::$case(&$target, Mode::H1Pipeline).await }
            #[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn auto() { super::$case(&$target, Mode::Auto).await }
        } )*
    };
}

suite!(round_trip, listing, multipart, presigned, wrong_credentials, bucket_and_upload_listings);

/// The cases over Google Cloud Storage's JSON API, against fake-gcs-server: plain http
/// (Go's server speaks only HTTP/1.1 there) and https, where it offers only h2. Signed
/// URLs and credentials are not cases here: the emulator checks neither (presign.rs and
/// auth.rs test them against a scripted peer in crates/store/tests/gcs_auth.rs).
macro_rules! gcs_suite {
    ($($case:ident),* $(,)?) => {
        mod gcs { use super::*; $( mod $case {
            use super::*;
            #[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h1_pool() { super::super::$case(&Target::gcs(false), Mode::H1Pool).await }
            #[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn h1_pipeline() { super::super::$case(&Target::gcs(false), Mode::H1Pipeline).await }
            #[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn auto() { super::super::$case(&Target::gcs(false), Mode::Auto).await }
            #[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn tls_h2() { super::super::$case(&Target::gcs(true), Mode::H2).await }
            #[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn tls_auto() { super::super::$case(&Target::gcs(true), Mode::Auto).await }
        } )* }
    };
}

gcs_suite!(
    round_trip,
    listing,
    multipart,
    bucket_and_upload_listings,
    gcs_streams_batches_generations,
    gcs_compose_tree
);

/// ListBuckets sees a new bucket; ListMultipartUploads finds the uploads in progress of a
/// key (what a resumed upload looks for), and none once they are aborted or completed.
async fn bucket_and_upload_listings(t: &Target, mode: Mode) {
    let c = t.client(mode);
    let b = t.bucket("lsb", mode);
    c.create_bucket(b.as_str()).await.unwrap();
    let buckets = c.list_buckets().await.unwrap();
    assert!(buckets.iter().any(|e| e.name == b), "{b} not in {buckets:?}");
    assert!(c.list_uploads(b.as_str(), "").await.unwrap().is_empty());
    let (a1, a2) = (ObjectRef::new(b.as_str(), "big/a"), ObjectRef::new(b.as_str(), "big/b"));
    let u1 = c.create_upload(&a1, &PutParams::default()).await.unwrap();
    let u2 = c.create_upload(&a1, &PutParams::default()).await.unwrap();
    let u3 = c.create_upload(&a2, &PutParams::default()).await.unwrap();
    if t.azure() {
        // An Azure upload exists on the service once it holds a block (blocks.rs).
        for u in [&u1, &u2, &u3] {
            c.upload_part(u, 1, PartPayload::Bytes(Bytes::from_static(b"block"))).await.unwrap();
        }
    }
    let mut of_a: Vec<String> = c
        .list_uploads(b.as_str(), "big/a")
        .await
        .unwrap()
        .into_iter()
        .filter(|u| u.key == "big/a")
        .map(|u| u.upload_id)
        .collect();
    of_a.sort();
    let mut want = vec![u1.upload_id.clone(), u2.upload_id.clone()];
    want.sort();
    assert_eq!(of_a, want);
    for u in [&u1, &u2, &u3] {
        c.abort_upload(u).await.unwrap();
    }
    let left = c.list_uploads(b.as_str(), "big/a").await.unwrap();
    // Azure too: an upload of a blob never committed is dropped by deleting the
    // uncommitted blob (blocks.rs), so nothing is listed and no blob appears.
    assert!(left.iter().all(|u| u.key != "big/a"), "{left:?}");
    assert!(c.head(&a1).await.unwrap_err().is_not_found());
}

async fn round_trip(t: &Target, mode: Mode) {
    let c = t.client(mode);
    let b = t.bucket("rtb", mode);
    c.create_bucket(b.as_str()).await.unwrap();
    let o = ObjectRef::new(b.as_str(), "dir/hello world+ü.txt");

    // PUT bytes, with metadata and Content-MD5, then HEAD and GET.
    let body = data(300_000, 1);
    let params = PutParams {
        content_type: Some("text/plain".into()),
        metadata: vec![("Owner".into(), "ferry".into())],
        content_md5: true,
        ..PutParams::default()
    };
    let put = c.put(&o, PutPayload::Bytes(body.clone()), params).await.unwrap();
    assert!(put.etag.is_some());
    let info = c.head(&o).await.unwrap();
    assert_eq!(info.size, 300_000);
    assert_eq!(info.content_type.as_deref(), Some("text/plain"));
    assert_eq!(info.metadata.get("owner").map(String::as_str), Some("ferry"));
    assert_eq!(info.etag, put.etag);
    let stored = c.capabilities().stored_checksum;
    match stored {
        Some(stored) => assert!(info.checksums.iter().any(|(a, _)| *a == stored), "{info:?}"),
        // Azure stores the Content-MD5 of a Put Blob, which is not one of the trait's
        // algorithms; a whole GET is checked against it (azure/body.rs).
        None => assert!(t.azure() && info.checksums.is_empty(), "{info:?}"),
    }
    let got = c.get(&o, GetParams::default()).await.unwrap();
    assert_eq!(got.meta.size, 300_000);
    assert_eq!(got.body.collect().await.unwrap(), body);

    // Ranged GET.
    let r = c.get(&o, GetParams::range(RangeSpec::FromTo(1000, 1999))).await.unwrap();
    assert_eq!((r.range, r.meta.size), (Some((1000, 1999)), 300_000));
    assert_eq!(r.body.collect().await.unwrap(), body.slice(1000..2000));
    let r = c.get(&o, GetParams::range(RangeSpec::Suffix(10))).await.unwrap();
    assert_eq!(r.body.collect().await.unwrap(), body.slice(299_990..));

    // Conditions.
    let etag = info.etag.clone().unwrap();
    let e = c.get(&o, GetParams { if_none_match: Some(etag.clone()), ..GetParams::default() }).await.unwrap_err();
    assert!(matches!(e, Error::Precondition { status: 304, .. }), "{e:?}");
    let e = c.get(&o, GetParams { if_match: Some("\"nope\"".into()), ..GetParams::default() }).await.unwrap_err();
    assert!(matches!(e, Error::Precondition { status: 412, .. }), "{e:?}");
    let e = c
        .put(
            &o,
            PutPayload::Bytes(Bytes::from_static(b"x")),
            PutParams { if_none_match_star: true, ..PutParams::default() },
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Precondition { .. }), "{e:?}");

    // Not found, with a request id.
    let e = c.get(&ObjectRef::new(b.as_str(), "missing"), GetParams::default()).await.unwrap_err();
    // fake-gcs-server sends no request id; S3 servers always do.
    assert!(e.is_not_found() && (e.request_id().is_some() || !t.is_s3()), "{e:?}");
    let e = c.head(&ObjectRef::new(b.as_str(), "missing")).await.unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    let e = c.head(&ObjectRef::new("no-such-bucket", "k")).await.unwrap_err();
    assert!(e.is_not_found(), "{e:?}");

    // PUT from a file (two passes) and from a stream (aws-chunked trailer), each algorithm.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.bin");
    let fbody = data(1_234_567, 2);
    std::fs::write(&path, &fbody).unwrap();
    for algo in
        [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32, ChecksumAlgorithm::Sha256]
    {
        let f = ObjectRef::new(b.as_str(), format!("file-{algo}"));
        let out = c
            .put(
                &f,
                PutPayload::File(path.to_path_buf()),
                PutParams { checksum: Some(algo), content_md5: true, ..PutParams::default() },
            )
            .await
            .unwrap();
        // GCS stores and verifies CRC32C whatever was asked.
        let want = if t.is_s3() { Some(algo) } else { stored };
        assert_eq!(out.checksum.as_ref().map(|(a, _)| *a), want);
        assert_eq!(c.get(&f, GetParams::default()).await.unwrap().body.collect().await.unwrap(), fbody);
        let s = ObjectRef::new(b.as_str(), format!("stream-{algo}"));
        let chunks: Vec<std::io::Result<Bytes>> =
            fbody.chunks(100_003).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        let out = c
            .put(
                &s,
                PutPayload::Stream { len: fbody.len() as u64, stream: (futures_util::stream::iter(chunks)).boxed() },
                PutParams { checksum: Some(algo), ..PutParams::default() },
            )
            .await
            .unwrap();
        let head = c.head(&s).await.unwrap();
        if t.azure() {
            assert_eq!(head.size, fbody.len() as u64);
        } else {
            assert!(head.checksums.contains(out.checksum.as_ref().unwrap()), "{head:?} vs {out:?}");
        }
        assert_eq!(c.get(&s, GetParams::default()).await.unwrap().body.collect().await.unwrap(), fbody);
    }
    let s = ObjectRef::new(b.as_str(), "stream-plain");
    let chunks = vec![Ok(Bytes::from_static(b"plain "))];
    c.put(
        &s,
        PutPayload::Stream { len: 6, stream: (futures_util::stream::iter(chunks)).boxed() },
        PutParams { checksum: None, ..PutParams::default() },
    )
    .await
    .unwrap();
    assert_eq!(
        c.get(&s, GetParams::default()).await.unwrap().body.collect().await.unwrap(),
        Bytes::from_static(b"plain ")
    );
    // A stream shorter than declared fails and leaves nothing behind.
    let short = ObjectRef::new(b.as_str(), "short");
    let chunks = vec![Ok(Bytes::from_static(b"abc"))];
    assert!(c
        .put(
            &short,
            PutPayload::Stream { len: 10, stream: (futures_util::stream::iter(chunks)).boxed() },
            PutParams::default()
        )
        .await
        .is_err());
    assert!(c.head(&short).await.unwrap_err().is_not_found());

    // Empty object.
    let empty = ObjectRef::new(b.as_str(), "empty");
    c.put(&empty, PutPayload::Bytes(Bytes::new()), PutParams::default()).await.unwrap();
    assert_eq!(c.get(&empty, GetParams::default()).await.unwrap().body.collect().await.unwrap().len(), 0);

    // Copy, keeping and replacing metadata.
    let copy = ObjectRef::new(b.as_str(), "copy");
    let out = c.copy(&o, &copy, CopyParams::default()).await.unwrap();
    if t.is_s3() {
        // An MD5 ETag: the same bytes, the same tag.
        assert_eq!(Some(out.etag), info.etag);
    } else {
        // A generation: the copy is a new object with its own.
        assert_eq!(c.head(&copy).await.unwrap().etag, Some(out.etag));
    }
    assert_eq!(c.head(&copy).await.unwrap().metadata.get("owner").map(String::as_str), Some("ferry"));
    let copy2 = ObjectRef::new(b.as_str(), "copy2");
    c.copy(&o, &copy2, CopyParams { metadata: Some(vec![("k".into(), "v".into())]), ..CopyParams::default() })
        .await
        .unwrap();
    let h = c.head(&copy2).await.unwrap();
    assert_eq!(h.metadata.get("k").map(String::as_str), Some("v"));
    assert!(!h.metadata.contains_key("owner"));
    assert_eq!(c.get(&copy2, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body);
    let e = c.copy(&ObjectRef::new(b.as_str(), "missing"), &copy, CopyParams::default()).await.unwrap_err();
    assert!(e.is_not_found(), "{e:?}");

    // Delete, DeleteObjects.
    c.delete(&copy).await.unwrap();
    assert!(c.head(&copy).await.unwrap_err().is_not_found());
    c.delete(&copy).await.unwrap();
    let (objects, _) = c.list_all(b.as_str(), ListParams::default()).await.unwrap();
    let keys: Vec<String> = objects.iter().map(|o| o.key.clone()).collect();
    assert!(keys.contains(&o.key), "{keys:?}");
    let out = c.delete_batch(b.as_str(), &keys).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.deleted.len(), keys.len());
    assert!(c.list_all(b.as_str(), ListParams::default()).await.unwrap().0.is_empty());
    c.delete_bucket(b.as_str()).await.unwrap();
}

/// Listing: default and explicit page sizes, delimiters, a prefix paginated, start-after,
/// a missing bucket, and a batch delete of every key.
///
/// At full size (2,503 keys: 5 directories x 500 plus awkward names) the default page of
/// 1,000 needs three requests and the delete three batches of 1,000. The emulators write
/// slowly and the suite runs each case on 3-5 transports: fake-gcs-server takes about 20 s
/// for the 2,500 PUTs and Azurite about 20 s for the batch delete, where `ferry serve` and
/// MinIO take well under a second. So on an emulator the full size runs once (on `auto`
/// over plain http), and the other transports list an eighth of the keys with page sizes
/// cut to match, which still takes several pages in every listing, and several batches
/// of GCS's and Azure's batch delete (100 and 256 requests per batch).
async fn listing(t: &Target, mode: Mode) {
    let full = t.is_s3() || (mode == Mode::Auto && t.ca_file.is_none());
    let per_dir: u32 = if full { 500 } else { 60 };
    let c = t.client(mode);
    let b = t.bucket("list", mode);
    c.create_bucket(b.as_str()).await.unwrap();
    let mut keys: Vec<String> = (0..5 * per_dir).map(|i| format!("d{}/k{:05}", i % 5, i)).collect();
    // Azurite stores a name with a control character but answers List Blobs that would
    // show it with a 500 (its XML writer refuses the character; Azure itself sends such
    // names percent-encoded with Encoded="true"), so its awkward key has none.
    let weird = if t.azure() { "weird/ctl&<>\"'+%20" } else { "weird/\u{1}ctl&<>\"'+%20" };
    keys.extend(["top level".to_string(), weird.to_string(), "ü/ä".to_string()]);
    futures_util::stream::iter(keys.clone())
        .map(|k| {
            let c = c.clone();
            let b = b.clone();
            async move {
                c.put(&ObjectRef::new(b.as_str(), k), PutPayload::Bytes(Bytes::from_static(b"x")), PutParams::default())
                    .await
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    keys.sort();

    // Flat, pages of the server's default (1,000; Azure's 5,000) and of a third of that.
    for max_keys in [None, Some(per_dir * 2 / 3)] {
        let pages: Vec<_> =
            c.list(b.as_str(), ListParams { max_keys, ..ListParams::default() }).try_collect().await.unwrap();
        let default_page = if t.azure() { 5000 } else { 1000 };
        let expected_pages = keys.len().div_ceil(max_keys.unwrap_or(default_page) as usize);
        assert_eq!(pages.len(), expected_pages);
        let listed: Vec<String> = pages.iter().flat_map(|p| p.objects.iter().map(|o| o.key.clone())).collect();
        assert_eq!(listed, keys);
        assert!(pages.last().unwrap().next_continuation_token.is_none());
    }
    // Delimiter at the top: the directories, plus the top-level key.
    let (objects, prefixes) =
        c.list_all(b.as_str(), ListParams { delimiter: Some("/".into()), ..ListParams::default() }).await.unwrap();
    assert_eq!(objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), vec!["top level"]);
    assert_eq!(prefixes, vec!["d0/", "d1/", "d2/", "d3/", "d4/", "weird/", "ü/"]);
    // Prefix + delimiter, three pages.
    let pages: Vec<_> = c
        .list(
            b.as_str(),
            ListParams {
                prefix: Some("d3/".into()),
                delimiter: Some("/".into()),
                max_keys: Some(per_dir * 2 / 5),
                ..ListParams::default()
            },
        )
        .try_collect()
        .await
        .unwrap();
    assert_eq!(pages.len(), 3);
    let n: usize = pages.iter().map(|p| p.objects.len()).sum();
    assert_eq!(n, per_dir as usize);
    // start-after the second-last key of d4/: its last key and the three awkward ones.
    let after = format!("d4/k{:05}", 5 * per_dir - 6);
    let (objects, _) =
        c.list_all(b.as_str(), ListParams { start_after: Some(after.clone()), ..ListParams::default() }).await.unwrap();
    let expected: Vec<&str> = keys.iter().map(String::as_str).filter(|k| *k > after.as_str()).collect();
    assert_eq!(expected.len(), 4);
    assert_eq!(objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), expected);
    // A listing stream that is dropped early sends no more requests (nothing to assert
    // on the server here); a missing bucket is NotFound.
    let e = c.list("nope", ListParams::default()).next().await.unwrap().unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    // Clean up with the batch delete (S3's DeleteObjects takes 1,000 keys per request).
    let out = c.delete_batch(b.as_str(), &keys).await.unwrap();
    assert_eq!(out.deleted.len(), keys.len());
}

async fn multipart(t: &Target, mode: Mode) {
    let c = t.client(mode);
    let b = t.bucket("mpb", mode);
    c.create_bucket(b.as_str()).await.unwrap();
    let body = data(23 * 1024 * 1024, 3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    std::fs::write(&path, &body).unwrap();
    let engine = Engine::new(c.clone());
    let params = UploadParams { part_size: 5 * 1024 * 1024, concurrency: 4, resume: false, ..UploadParams::default() };

    // From a file through the engine, CRC64NVME FULL_OBJECT: verifiable on GET.
    let o = ObjectRef::new(b.as_str(), "from-file");
    let out = upload_file(&engine, &path, &o, &params, None).await.unwrap();
    let etag = out.etag.unwrap();
    assert!(etag.ends_with("-5\"") || !t.is_s3(), "{etag}");
    let algo = if t.is_s3() { ChecksumAlgorithm::Crc64Nvme } else { ChecksumAlgorithm::Crc32c };
    let got = c.get(&o, GetParams::default()).await.unwrap();
    if t.azure() {
        // No stored checksum of the trait's algorithms on a block-list blob (blocks.rs).
        assert_eq!(got.meta.etag.as_ref(), Some(&etag));
    } else {
        assert!(
            got.meta.checksums.contains(&(algo, ferry_proto::checksum::base64_encode(&algo.digest(&body)))),
            "{:?}",
            got.meta.checksums
        );
    }
    assert_eq!(got.meta.size, body.len() as u64);
    assert_eq!(got.body.collect().await.unwrap(), body);

    // By hand through the trait, SHA-256 COMPOSITE (SHA checksums cannot be combined).
    let o2 = ObjectRef::new(b.as_str(), "sha-composite");
    let put = PutParams { checksum: Some(ChecksumAlgorithm::Sha256), ..PutParams::default() };
    let up = c.create_upload(&o2, &put).await.unwrap();
    let mut parts = Vec::new();
    for (i, chunk) in body.chunks(5 << 20).enumerate() {
        parts.push(c.upload_part(&up, i as u32 + 1, PartPayload::Bytes(Bytes::copy_from_slice(chunk))).await.unwrap());
    }
    let out = c.complete_upload(&up, &parts, None).await.unwrap();
    if t.is_s3() {
        assert!(out.checksum.unwrap().1.ends_with("-5"));
    } else if t.azure() {
        assert!(out.checksum.is_none() && !out.etag.is_empty(), "{out:?}");
    } else {
        // Compose states the whole object's CRC32C.
        let crc = ChecksumAlgorithm::Crc32c;
        assert_eq!(out.checksum, Some((crc, ferry_proto::checksum::base64_encode(&crc.digest(&body)))));
    }
    assert_eq!(c.get(&o2, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body);

    // The five calls by hand: create, parts out of order, list, complete; and abort.
    let o3 = ObjectRef::new(b.as_str(), "by-hand");
    let up = c.create_upload(&o3, &PutParams::default()).await.unwrap();
    let p2 = c.upload_part(&up, 2, PartPayload::Bytes(body.slice(5 << 20..6 << 20))).await.unwrap();
    let p1 = c.upload_part(&up, 1, PartPayload::Bytes(body.slice(..5 << 20))).await.unwrap();
    let listed = c.list_parts(&up).await.unwrap();
    assert_eq!(listed.iter().map(|p| (p.part_number, p.size)).collect::<Vec<_>>(), vec![(1, 5 << 20), (2, 1 << 20)]);
    c.complete_upload(&up, &[p2, p1], None).await.unwrap();
    assert_eq!(c.get(&o3, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body.slice(..6 << 20));
    let up = c.create_upload(&ObjectRef::new(b.as_str(), "aborted"), &PutParams::default()).await.unwrap();
    c.upload_part(&up, 1, PartPayload::Bytes(Bytes::from_static(b"x"))).await.unwrap();
    c.abort_upload(&up).await.unwrap();
    assert!(c.list_parts(&up).await.unwrap_err().is_not_found());
    assert!(c.head(&ObjectRef::new(b.as_str(), "aborted")).await.unwrap_err().is_not_found());

    // A failing source aborts: nothing is left half-written.
    let o4 = ObjectRef::new(b.as_str(), "failing");
    let mut chunks: Vec<std::io::Result<Bytes>> =
        body.chunks(1 << 20).take(12).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    chunks.push(Err(std::io::Error::other("source broke")));
    let e = upload_stream(&engine, futures_util::stream::iter(chunks).boxed(), &o4, &params, None).await.unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(c.head(&o4).await.unwrap_err().is_not_found());
}

async fn presigned(t: &Target, mode: Mode) {
    let c = t.client(mode);
    let b = t.bucket("pre", mode);
    c.create_bucket(b.as_str()).await.unwrap();
    let o = ObjectRef::new(b.as_str(), "a dir/file +.txt");
    c.put(&o, PutPayload::Bytes(Bytes::from_static(b"presigned body")), PutParams::default()).await.unwrap();
    let url = c.presign_get(&o, Duration::from_secs(300)).unwrap();
    let addr = t.addr;
    let (status, body) = tokio::task::spawn_blocking(move || plain_get(addr, &url)).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, b"presigned body");
    // Tampering with the URL breaks the signature.
    let url = c.presign_get(&o, Duration::from_secs(300)).unwrap();
    let url =
        if t.azure() { url.replace("sp=r", "sp=rw") } else { url.replace("X-Amz-Expires=300", "X-Amz-Expires=301") };
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

async fn wrong_credentials(t: &Target, mode: Mode) {
    if t.azure() {
        let wrong_key = ferry_proto::checksum::base64_encode(b"not the account key");
        let e = t.azure_client(mode, &wrong_key).create_bucket("wrong-credentials").await.unwrap_err();
        assert!(matches!(&e, Error::Auth { status: 403, .. }) && e.request_id().is_some(), "{e:?}");
        let mut options = StoreOptions::new(format!("http://{}/{}", t.addr, t.access_key));
        options.credentials = CredentialsSource::Explicit(Credentials::new("nobody", t.secret_key));
        options.mode = mode;
        let c = ferry_store::connect(Provider::Azure, options).unwrap();
        let e = c.head(&ObjectRef::new("wrong-credentials", "y")).await.unwrap_err();
        assert!(matches!(e, Error::Auth { .. }), "{e:?}");
        return;
    }
    let c = S3Client::builder(t.url())
        .credentials(CredentialsSource::Explicit(Credentials::new(t.access_key, "wrong-secret")))
        .mode(mode)
        .build()
        .unwrap();
    let e = c.create_bucket("wrong-credentials").await.unwrap_err();
    assert!(matches!(&e, Error::Auth { code, .. } if code == "SignatureDoesNotMatch"), "{e:?}");
    let c = S3Client::builder(t.url())
        .credentials(CredentialsSource::Explicit(Credentials::new("nobody", "x")))
        .mode(mode)
        .build()
        .unwrap();
    let e = c.head(&ObjectRef::new("wrong-credentials", "y")).await.unwrap_err();
    assert!(matches!(e, Error::Auth { .. }), "{e:?}");
}

/// GCS's own paths: a stream long enough for a resumable upload (chunks, CRC32C on the
/// last), one that breaks or runs long (the session is cancelled: nothing appears),
/// batch deletes across several batch requests, and a read pinned to a generation that
/// was overwritten.
async fn gcs_streams_batches_generations(t: &Target, mode: Mode) {
    let c = t.client(mode);
    let b = t.bucket("gstream", mode);
    c.create_bucket(b.as_str()).await.unwrap();
    let body = data(20 * 1024 * 1024 + 17, 7);
    let chunks = |n: usize| -> Vec<std::io::Result<Bytes>> {
        body.chunks(1_000_003).take(n).map(|c| Ok(Bytes::copy_from_slice(c))).collect()
    };
    let o = ObjectRef::new(b.as_str(), "resumable");
    let stream = futures_util::stream::iter(chunks(usize::MAX)).boxed();
    let out = c.put(&o, PutPayload::Stream { len: body.len() as u64, stream }, PutParams::default()).await.unwrap();
    let crc = ChecksumAlgorithm::Crc32c;
    let want = (crc, ferry_proto::checksum::base64_encode(&crc.digest(&body)));
    assert_eq!(out.checksum.as_ref(), Some(&want));
    assert_eq!(c.head(&o).await.unwrap().checksums, vec![want]);
    assert_eq!(c.get(&o, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body);

    // Broken after 12 MB, and longer than declared: an error, and no object.
    let broken = ObjectRef::new(b.as_str(), "broken");
    let mut parts = chunks(12);
    parts.push(Err(std::io::Error::other("source broke")));
    let e = c
        .put(
            &broken,
            PutPayload::Stream { len: body.len() as u64, stream: futures_util::stream::iter(parts).boxed() },
            PutParams::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(c.head(&broken).await.unwrap_err().is_not_found());
    let long = futures_util::stream::iter(chunks(usize::MAX)).boxed();
    let e = c.put(&broken, PutPayload::Stream { len: 10 << 20, stream: long }, PutParams::default()).await.unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(c.head(&broken).await.unwrap_err().is_not_found());

    // A read pinned to a generation that was overwritten fails; the current one reads.
    let v1 = c.put(&o, PutPayload::Bytes(data(1000, 1)), PutParams::default()).await.unwrap().etag.unwrap();
    let v2 = c.put(&o, PutPayload::Bytes(data(1000, 2)), PutParams::default()).await.unwrap().etag.unwrap();
    assert_ne!(v1, v2);
    let pinned =
        |tag: &str| GetParams { if_match: Some(tag.to_owned()), ..GetParams::range(RangeSpec::FromTo(10, 19)) };
    let e = c.get(&o, pinned(&v1)).await.unwrap_err();
    assert!(matches!(e, Error::Precondition { status: 412, .. }), "{e:?}");
    let r = c.get(&o, pinned(&v2)).await.unwrap();
    assert_eq!(r.body.collect().await.unwrap(), data(1000, 2).slice(10..20));

    // 250 keys and one that does not exist: three batch requests, everything deleted.
    let mut keys: Vec<String> = (0..250).map(|i| format!("batch/{i:04}")).collect();
    futures_util::stream::iter(keys.clone())
        .map(|k| {
            let (c, b) = (c.clone(), b.clone());
            async move {
                c.put(&ObjectRef::new(b.as_str(), k), PutPayload::Bytes(Bytes::from_static(b"x")), PutParams::default())
                    .await
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    keys.push("batch/missing".into());
    let out = c.delete_batch(b.as_str(), &keys).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.deleted.len(), keys.len());
    let left = c.list_all(b.as_str(), ListParams { prefix: Some("batch/".into()), ..ListParams::default() }).await;
    assert!(left.unwrap().0.is_empty());
}

/// The trait's multipart upload as compose: 40 parts (more than one compose takes, so
/// a tree), invisible to listings until complete, nothing left under the hidden prefix
/// after; a missing part refused; an engine upload resumed from the parts already sent.
async fn gcs_compose_tree(t: &Target, mode: Mode) {
    let c = t.client(mode);
    let b = t.bucket("gcompose", mode);
    c.create_bucket(b.as_str()).await.unwrap();
    let o = ObjectRef::new(b.as_str(), "tree");
    let params = PutParams {
        content_type: Some("application/x-ferry".into()),
        metadata: vec![("Owner".into(), "ferry".into())],
        ..PutParams::default()
    };
    let up = c.create_upload(&o, &params).await.unwrap();
    let sizes: Vec<usize> = (0..40).map(|i| 1000 + i * 37).collect();
    let mut body = Vec::new();
    let mut pieces = Vec::new();
    for (i, n) in sizes.iter().enumerate() {
        let p = data(*n, i as u8);
        body.extend_from_slice(&p);
        pieces.push(p);
    }
    // A part in flight is not an object of the bucket.
    let first = c.upload_part(&up, 1, PartPayload::Bytes(pieces[0].clone())).await.unwrap();
    assert!(c.list_all(b.as_str(), ListParams::default()).await.unwrap().0.is_empty());
    assert_eq!(c.list_uploads(b.as_str(), "").await.unwrap().len(), 1);
    let mut parts = vec![first];
    let rest: Vec<_> = futures_util::stream::iter(pieces.iter().enumerate().skip(1))
        .map(|(i, p)| {
            let (c, up, p) = (c.clone(), up.clone(), p.clone());
            async move { c.upload_part(&up, i as u32 + 1, PartPayload::Bytes(p)).await }
        })
        .buffer_unordered(8)
        .try_collect()
        .await
        .unwrap();
    parts.extend(rest);
    assert_eq!(c.list_parts(&up).await.unwrap().len(), 40);
    c.complete_upload(&up, &parts, None).await.unwrap();
    let got = c.get(&o, GetParams::default()).await.unwrap();
    assert_eq!(got.meta.size, body.len() as u64);
    assert_eq!(got.body.collect().await.unwrap(), Bytes::from(body));
    let info = c.head(&o).await.unwrap();
    assert_eq!(info.content_type.as_deref(), Some("application/x-ferry"));
    assert_eq!(info.metadata.get("owner").map(String::as_str), Some("ferry"));
    assert!(c.list_uploads(b.as_str(), "").await.unwrap().is_empty());
    let hidden = ListParams { prefix: Some(ferry_store::gcs::upload::HIDDEN_PREFIX.into()), ..ListParams::default() };
    assert!(c.list_all(b.as_str(), hidden).await.unwrap().0.is_empty());
    assert!(c.list_parts(&up).await.unwrap_err().is_not_found());
    // A part that was never sent cannot be completed.
    let up = c.create_upload(&o, &params).await.unwrap();
    let p1 = c.upload_part(&up, 1, PartPayload::Bytes(Bytes::from_static(b"abc"))).await.unwrap();
    let mut p2 = p1.clone();
    p2.part_number = 2;
    let e = c.complete_upload(&up, &[p1, p2], None).await.unwrap_err();
    assert!(matches!(e, Error::Service { status: 400, .. }), "{e:?}");
    c.abort_upload(&up).await.unwrap();
    assert!(c.list_uploads(b.as_str(), "").await.unwrap().is_empty());

    // A resumed upload keeps the parts already sent: each part object carries the
    // engine's CRC64NVME in its metadata, which list_parts gives back for the check.
    let body = data(12 << 20, 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resume.bin");
    std::fs::write(&path, &body).unwrap();
    let o = ObjectRef::new(b.as_str(), "resumed");
    let put = PutParams { checksum: Some(ChecksumAlgorithm::Crc64Nvme), ..PutParams::default() };
    let up = c.create_upload(&o, &put).await.unwrap();
    let first = PartPayload::File { path: path.clone(), offset: 0, len: 5 << 20 };
    c.upload_part(&up, 1, first).await.unwrap();
    let engine = Engine::new(c.clone());
    let params = UploadParams { part_size: 5 << 20, concurrency: 2, resume: true, ..UploadParams::default() };
    let out = upload_file(&engine, &path, &o, &params, None).await.unwrap();
    assert_eq!((out.resumed_bytes, out.parts), (5 << 20, 3));
    assert_eq!(c.get(&o, GetParams::default()).await.unwrap().body.collect().await.unwrap(), body);
    assert!(c.list_uploads(b.as_str(), "").await.unwrap().is_empty());
}
