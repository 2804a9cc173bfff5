//! Azure Blob Storage beyond the conformance suite:
//!
//! - Against Azurite (`#[ignore = "needs Azurite"]`, run by scripts/test.sh): an
//!   interrupted block upload is resumed by the engine, reusing the blocks Get Block
//!   List reports; a SAS client reads with a read/list container SAS and is refused a
//!   write; an anonymous client reads a container once its access level is public;
//!   rclone (its `azureblob` backend, a real peer) reads what ferry wrote and
//!   ferry reads what rclone wrote, rclone's own block ids included.
//! - Against scripted peers on real sockets (no Azure here to ask for tokens, and
//!   Azurite accepts bearer tokens only over HTTPS with its OAuth mode): Entra ID's client
//!   secret flow and the managed identity endpoint hand out tokens that are cached and
//!   sent as `Authorization: Bearer`; a throttled answer (503 ServerBusy with
//!   Retry-After) is waited out and retried; a body whose MD5 is not the blob's
//!   Content-MD5 ends with an integrity error, and a cut body is resumed with
//!   `x-ms-range` and `If-Match`, its MD5 checked across the pieces; a Copy Blob left
//!   `pending` is polled until `success`, and one that ends `failed` is an error (Azurite
//!   completes every copy at once, so only a scripted peer shows the pending state);
//!   Blob Batch's wire format: 256 signed sub-requests per POST, each key's answer read
//!   back from the multipart response (Azurite's batch runs in the conformance suite);
//!   a streamed Put Blob whose stored MD5 is not its bytes' is deleted and fails; Put
//!   Blob and Put Block carry `x-ms-content-crc64` and their answers are checked; a
//!   bearer-token client presigns with a user delegation key; and an Azure store
//!   refuses h2 up front.
//! - Against Azurite, what a rewrite states again (restate.rs): discarding an upload's
//!   blocks re-commits a blob with its index tags, and refuses, untouched, a blob whose
//!   metadata name is stored with capitals (written by hand: ferry sends header names
//!   lower case); a copy carries the source's tags, or says why it cannot; and Azurite
//!   (3.37.0) checks the CRC64 of Put Blob and Put Block, so a body damaged on the way
//!   is refused and nothing is stored.

use bytes::Bytes;
use ferry_engine::upload::{upload_file, UploadParams};
use ferry_engine::Engine;
use ferry_store::azure::token::{TokenFlow, TokenSource};
use ferry_store::azure::{AzureClient, AzureClientBuilder, AzureConfig, AzureCredential};
use ferry_store::{
    Credentials, CredentialsSource, DynObjectStore, Error, GetParams, Mode, ObjectRef, ObjectStore, ObjectStoreExt,
    PartPayload, Provider, PutParams, PutPayload, RetryConfig, StoreOptions,
};
use ferry_testkit::azurite::{azurite, ACCOUNT, ACCOUNT_KEY};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

fn data(n: usize, seed: u8) -> Bytes {
    Bytes::from((0..n).map(|i| ((i * 7 + seed as usize) % 253) as u8).collect::<Vec<u8>>())
}

fn emulator() -> DynObjectStore {
    let mut options = StoreOptions::new(azurite().blob_endpoint());
    options.credentials = CredentialsSource::Explicit(Credentials::new(ACCOUNT, ACCOUNT_KEY));
    ferry_store::connect(Provider::Azure, options).unwrap()
}

fn unique(base: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("{base}-{}-{}", std::process::id() % 100_000, N.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_block_upload_resumes_with_the_blocks_azure_holds() {
    let c = emulator();
    let container = unique("resume");
    c.create_bucket(&container).await.unwrap();
    let body = data(11 * 1024 * 1024 + 5, 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    std::fs::write(&path, &body).unwrap();
    let o = ObjectRef::new(container.as_str(), "big.bin");
    let part = 4u64 << 20;
    // A first run that sent parts 1 and 3 and died: blocks uncommitted, no blob.
    let up = c.create_upload(&o, &PutParams::default()).await.unwrap();
    for n in [1u64, 3] {
        let off = (n - 1) * part;
        let len = (body.len() as u64 - off).min(part);
        c.upload_part(&up, n as u32, PartPayload::File { path: path.clone(), offset: off, len }).await.unwrap();
    }
    assert!(c.head(&o).await.unwrap_err().is_not_found());
    let listed = c.list_parts(&up).await.unwrap();
    assert_eq!(
        listed.iter().map(|p| (p.part_number, p.size)).collect::<Vec<_>>(),
        vec![(1, part), (3, 3 * 1024 * 1024 + 5)]
    );
    // The rerun finds the upload, keeps both parts (CRC from the block ids equal to the
    // file's) and sends only part 2.
    let engine = Engine::new(c.clone());
    let params = UploadParams { part_size: part, concurrency: 2, resume: true, ..UploadParams::default() };
    let out = upload_file(&engine, &path, &o, &params, None).await.unwrap();
    assert_eq!(out.resumed_bytes, part + 3 * 1024 * 1024 + 5);
    assert_eq!(out.parts, 3);
    assert_eq!(c.get_bytes(&o).await.unwrap(), body);
    // Committing discarded the uncommitted blocks: no upload is left in progress.
    assert!(c.list_uploads(&container, "big.bin").await.unwrap().is_empty());
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sas_client_reads_and_lists_and_is_refused_a_write() {
    let c = emulator();
    let container = unique("sas");
    c.create_bucket(&container).await.unwrap();
    let o = ObjectRef::new(container.as_str(), "dir/readable.txt");
    c.put(&o, PutPayload::Bytes(Bytes::from_static(b"through a SAS")), PutParams::default()).await.unwrap();
    let key = ferry_proto::checksum::base64_decode(ACCOUNT_KEY).unwrap();
    let sas = ferry_store::azure::auth::container_sas(
        ACCOUNT,
        &key,
        &container,
        "rl",
        "2099-01-01T00:00:00Z",
        ferry_store::azure::API_VERSION,
    );
    let mut config = AzureConfig::resolve(Some(&azurite().blob_endpoint()), &CredentialsSource::Anonymous).unwrap();
    config.credential = AzureCredential::Sas(sas);
    let reader: DynObjectStore = Arc::new(AzureClientBuilder::new(config).mode(Mode::H1Pool).build().unwrap());
    assert_eq!(reader.get_bytes(&o).await.unwrap(), Bytes::from_static(b"through a SAS"));
    let (objects, _) = reader.list_all(&container, Default::default()).await.unwrap();
    assert_eq!(objects.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), vec!["dir/readable.txt"]);
    let e = reader
        .put(
            &ObjectRef::new(container.as_str(), "nope"),
            PutPayload::Bytes(Bytes::from_static(b"x")),
            PutParams::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Auth { status: 403, .. }), "{e:?}");
    // Its presigned URL is the blob's URL with the same SAS.
    assert!(reader.presign_get(&o, Duration::from_secs(60)).unwrap().contains("sr=c&sp=rl"));
}

fn rclone(container_sas_url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("rclone")
        .env("RCLONE_CONFIG_AZ_TYPE", "azureblob")
        .env("RCLONE_CONFIG_AZ_SAS_URL", container_sas_url)
        .env("RCLONE_CONFIG", "/nonexistent/rclone.conf")
        .args(args)
        .output()
        .unwrap()
}

#[ignore = "needs Azurite and rclone: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rclone_reads_what_ferry_wrote_and_ferry_reads_what_rclone_wrote() {
    ferry_testkit::require::tool("rclone");
    let c = emulator();
    let container = unique("rclone");
    c.create_bucket(&container).await.unwrap();
    // ferry writes a small blob (Put Blob) and a block upload of three blocks.
    let small = data(1000, 2);
    c.put(
        &ObjectRef::new(container.as_str(), "ferry/small.bin"),
        PutPayload::Bytes(small.clone()),
        PutParams::default(),
    )
    .await
    .unwrap();
    let big = data(9 * 1024 * 1024, 3);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    let engine = Engine::new(c.clone());
    let params = UploadParams { part_size: 4 << 20, resume: false, ..UploadParams::default() };
    upload_file(
        &engine,
        &dir.path().join("big.bin"),
        &ObjectRef::new(container.as_str(), "ferry/big.bin"),
        &params,
        None,
    )
    .await
    .unwrap();
    let key = ferry_proto::checksum::base64_decode(ACCOUNT_KEY).unwrap();
    let sas = ferry_store::azure::auth::container_sas(
        ACCOUNT,
        &key,
        &container,
        "racwdl",
        "2099-01-01T00:00:00Z",
        ferry_store::azure::API_VERSION,
    );
    let url = format!("{}/{container}?{sas}", azurite().blob_endpoint());
    let out = dir.path().join("from-rclone");
    let r = rclone(&url, &["copy", &format!("az:{container}/ferry"), out.to_str().unwrap()]);
    assert!(r.status.success(), "rclone copy: {}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(out.join("small.bin")).unwrap(), small);
    assert_eq!(std::fs::read(out.join("big.bin")).unwrap(), big);
    // rclone writes a file above its upload cutoff (4 MiB here) as 4 MiB blocks with its
    // own block ids and stores its MD5; ferry reads it back whole, MD5-checked.
    let theirs = data(10 * 1024 * 1024 + 3, 4);
    let src = dir.path().join("theirs");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("t.bin"), &theirs).unwrap();
    let dest = format!("az:{container}/rclone");
    let r = rclone(
        &url,
        &["copy", "--azureblob-upload-cutoff", "4M", "--azureblob-chunk-size", "4M", src.to_str().unwrap(), &dest],
    );
    assert!(r.status.success(), "rclone copy: {}", String::from_utf8_lossy(&r.stderr));
    let o = ObjectRef::new(container.as_str(), "rclone/t.bin");
    assert_eq!(c.head(&o).await.unwrap().size, theirs.len() as u64);
    assert_eq!(c.get(&o, GetParams::default()).await.unwrap().body.collect().await.unwrap(), theirs);
}

/// One request as a scripted peer saw it.
#[derive(Clone, Debug)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

type Reply = Box<dyn Fn(&Seen, usize) -> (u16, Vec<(String, String)>, String) + Send + Sync>;

/// A scripted HTTP/1.1 peer on a real socket: answers each request with `reply(request,
/// index)` and records what it saw.
async fn peer(reply: Reply) -> (std::net::SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let (log, reply) = (seen.clone(), Arc::new(reply));
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            let (log, reply) = (log.clone(), reply.clone());
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut r = BufReader::new(r);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let mut headers = Vec::new();
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).await.unwrap();
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (n, v) = h.split_once(':').unwrap();
                        headers.push((n.trim().to_owned(), v.trim().to_owned()));
                    }
                    let len: usize = headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                        .map(|(_, v)| v.parse().unwrap())
                        .unwrap_or(0);
                    let mut body = vec![0u8; len];
                    r.read_exact(&mut body).await.unwrap();
                    let s = Seen {
                        line: line.trim_end().to_owned(),
                        headers,
                        body: String::from_utf8_lossy(&body).into_owned(),
                    };
                    let index = {
                        let mut l = log.lock().unwrap();
                        l.push(s.clone());
                        l.len() - 1
                    };
                    let (status, hs, body) = reply(&s, index);
                    // `x-test-cut: N` announces N bytes, sends the body given, and closes.
                    let cut: Option<usize> =
                        hs.iter().find(|(n, _)| n == "x-test-cut").map(|(_, v)| v.parse().unwrap());
                    let mut out = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", cut.unwrap_or(body.len()));
                    for (n, v) in hs.iter().filter(|(n, _)| n != "x-test-cut") {
                        out.push_str(&format!("{n}: {v}\r\n"));
                    }
                    out.push_str("\r\n");
                    out.push_str(&body);
                    w.write_all(out.as_bytes()).await.unwrap();
                    if cut.is_some() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// A blob peer answering Get Blob Properties as Azure does, for a client with `credential`.
fn blob_client(addr: std::net::SocketAddr, credential: AzureCredential, retry: RetryConfig) -> AzureClient {
    let mut config = AzureConfig::resolve(Some(&format!("http://{addr}/acct")), &CredentialsSource::Anonymous).unwrap();
    config.credential = credential;
    AzureClientBuilder::new(config).mode(Mode::H1Pool).retry(retry).build().unwrap()
}

fn blob_properties() -> (u16, Vec<(String, String)>, String) {
    (
        200,
        vec![
            ("etag".into(), "\"0x8D1\"".into()),
            ("x-ms-request-id".into(), "rid".into()),
            ("x-ms-meta-owner".into(), "ferry".into()),
        ],
        String::new(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_secret_tokens_are_fetched_once_and_sent_as_bearer() {
    let (token_addr, token_seen) = peer(Box::new(|_, i| {
        (
            200,
            vec![("content-type".into(), "application/json".into())],
            format!(r#"{{"token_type":"Bearer","expires_in":3599,"access_token":"tok-{i}"}}"#),
        )
    }))
    .await;
    let (blob_addr, blob_seen) = peer(Box::new(|_, _| blob_properties())).await;
    let source = TokenSource::new(TokenFlow::ClientSecret {
        authority: format!("http://{token_addr}"),
        tenant: "my-tenant".into(),
        client_id: "my-app".into(),
        secret: "s3cr&t".into(),
    })
    .unwrap();
    let source = Arc::new(source);
    let c = blob_client(blob_addr, AzureCredential::Token(source.clone()), RetryConfig::none());
    for _ in 0..3 {
        let info = c.head(&ObjectRef::new("c", "b")).await.unwrap();
        assert_eq!(info.metadata.get("owner").map(String::as_str), Some("ferry"));
    }
    assert_eq!(source.fetches(), 1);
    let t = token_seen.lock().unwrap()[0].clone();
    assert_eq!(t.line, "POST /my-tenant/oauth2/v2.0/token HTTP/1.1");
    assert_eq!(t.header("content-type"), Some("application/x-www-form-urlencoded"));
    for field in [
        "grant_type=client_credentials",
        "client_id=my-app",
        "client_secret=s3cr%26t",
        "scope=https%3A%2F%2Fstorage.azure.com%2F.default",
    ] {
        assert!(t.body.split('&').any(|f| f == field), "{field} not in {}", t.body);
    }
    let seen = blob_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.line, "HEAD /acct/c/b HTTP/1.1");
        assert_eq!(s.header("authorization"), Some("Bearer tok-0"));
        assert_eq!(s.header("x-ms-version"), Some(ferry_store::azure::API_VERSION));
        assert!(s.header("x-ms-date").is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_identity_tokens_carry_the_identity_header_and_refresh_when_short_lived() {
    // A token that expires within the refresh margin is fetched again on next use.
    let (token_addr, token_seen) = peer(Box::new(|_, i| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        (
            200,
            vec![],
            format!(
                r#"{{"access_token":"mi-{i}","expires_on":"{}","resource":"https://storage.azure.com/"}}"#,
                now + 60
            ),
        )
    }))
    .await;
    let (blob_addr, blob_seen) = peer(Box::new(|_, _| blob_properties())).await;
    let source = Arc::new(
        TokenSource::new(TokenFlow::ManagedIdentity {
            endpoint: format!("http://{token_addr}/msi/token"),
            header: Some("secret-header".into()),
            client_id: None,
        })
        .unwrap(),
    );
    let c = blob_client(blob_addr, AzureCredential::Token(source.clone()), RetryConfig::none());
    c.head(&ObjectRef::new("c", "b")).await.unwrap();
    c.head(&ObjectRef::new("c", "b")).await.unwrap();
    assert_eq!(source.fetches(), 2);
    let t = token_seen.lock().unwrap()[0].clone();
    assert_eq!(t.line, "GET /msi/token?api-version=2019-08-01&resource=https%3A%2F%2Fstorage.azure.com%2F HTTP/1.1");
    assert_eq!(t.header("x-identity-header"), Some("secret-header"));
    let seen = blob_seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|s| s.header("authorization").unwrap().to_owned()).collect::<Vec<_>>(),
        vec!["Bearer mi-0", "Bearer mi-1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_endpoint_error_is_an_auth_error() {
    let (token_addr, _) = peer(Box::new(|_, _| {
        (
            400,
            vec![],
            r#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}"#.into(),
        )
    }))
    .await;
    let (blob_addr, blob_seen) = peer(Box::new(|_, _| blob_properties())).await;
    let source = TokenSource::new(TokenFlow::ClientSecret {
        authority: format!("http://{token_addr}"),
        tenant: "t".into(),
        client_id: "c".into(),
        secret: "wrong".into(),
    })
    .unwrap();
    let c = blob_client(blob_addr, AzureCredential::Token(Arc::new(source)), RetryConfig::none());
    let e = c.head(&ObjectRef::new("c", "b")).await.unwrap_err();
    assert!(matches!(&e, Error::Auth { status: 400, code, .. } if code == "invalid_client"), "{e:?}");
    assert!(blob_seen.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_busy_is_waited_out_for_its_retry_after_and_errors_keep_the_request_id() {
    let (addr, seen) = peer(Box::new(|s, i| {
        if s.line.starts_with("HEAD /acct/c/busy") && i == 0 {
            return (
                503,
                vec![("x-ms-error-code".into(), "ServerBusy".into()), ("retry-after".into(), "1".into()), ("x-ms-request-id".into(), "r0".into())],
                String::new(),
            );
        }
        if s.line.starts_with("GET /acct/c/missing") {
            let body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>BlobNotFound</Code><Message>The specified blob does not exist.</Message></Error>";
            return (404, vec![("x-ms-error-code".into(), "BlobNotFound".into()), ("x-ms-request-id".into(), "r404".into())], body.into());
        }
        if s.line.starts_with("HEAD /acct/c/always-busy") {
            return (429, vec![("x-ms-request-id".into(), format!("r{i}"))], String::new());
        }
        blob_properties()
    }))
    .await;
    let retry = RetryConfig {
        base_delay: Duration::from_millis(1),
        throttled_base_delay: Duration::from_millis(1),
        ..RetryConfig::default()
    };
    let c = blob_client(addr, AzureCredential::Anonymous, retry);
    let started = std::time::Instant::now();
    c.head(&ObjectRef::new("c", "busy")).await.unwrap();
    // The 1 s Retry-After held the retry back although the backoff alone was ~1 ms.
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(seen.lock().unwrap().len(), 2);
    let e = c.get(&ObjectRef::new("c", "missing"), GetParams::default()).await.unwrap_err();
    assert!(matches!(&e, Error::NotFound { code, .. } if code == "BlobNotFound"), "{e:?}");
    assert_eq!(e.request_id(), Some("r404"));
    let c = blob_client(addr, AzureCredential::Anonymous, RetryConfig { max_attempts: 2, ..RetryConfig::default() });
    let e = c.head(&ObjectRef::new("c", "always-busy")).await.unwrap_err();
    assert!(matches!(e, Error::Throttled { status: 429, .. }), "{e:?}");
}

fn md5_b64(b: &[u8]) -> String {
    use md5::Digest;
    ferry_proto::checksum::base64_encode(&md5::Md5::digest(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_read_is_checked_against_content_md5_and_a_cut_body_resumes_pinned_to_its_etag() {
    let body: String = (0..1000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let whole = body.clone();
    let (addr, seen) = peer(Box::new(move |s, _| {
        let md5 = md5_b64(whole.as_bytes());
        let base = vec![("etag".to_string(), "\"0x8DB\"".to_string()), ("content-md5".to_string(), md5)];
        if s.line.starts_with("GET /acct/c/bad-md5") {
            let mut h = base.clone();
            h[1].1 = md5_b64(b"other bytes");
            return (200, h, whole.clone());
        }
        match s.header("x-ms-range") {
            None => {
                let mut h = base;
                h.push(("x-test-cut".into(), "1000".into()));
                (200, h, whole[..400].to_owned())
            }
            Some(r) => {
                assert_eq!(r, "bytes=400-999");
                assert_eq!(s.header("if-match"), Some("\"0x8DB\""));
                (
                    206,
                    vec![("etag".into(), "\"0x8DB\"".into()), ("content-range".into(), "bytes 400-999/1000".into())],
                    whole[400..].to_owned(),
                )
            }
        }
    }))
    .await;
    let retry = RetryConfig { base_delay: Duration::from_millis(1), ..RetryConfig::default() };
    let c = blob_client(addr, AzureCredential::Anonymous, retry);
    let got = c.get(&ObjectRef::new("c", "cut"), GetParams::default()).await.unwrap().body.collect().await.unwrap();
    assert_eq!(got, Bytes::from(body.clone()));
    assert_eq!(seen.lock().unwrap().len(), 2);
    let e =
        c.get(&ObjectRef::new("c", "bad-md5"), GetParams::default()).await.unwrap().body.collect().await.unwrap_err();
    assert!(matches!(&e, Error::Integrity { message, .. } if message.contains("MD5")), "{e:?}");
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_client_reads_a_public_container() {
    let c = emulator();
    let container = unique("public");
    c.create_bucket(&container).await.unwrap();
    let o = ObjectRef::new(container.as_str(), "open.txt");
    c.put(&o, PutPayload::Bytes(Bytes::from_static(b"for everyone")), PutParams::default()).await.unwrap();
    let mut options = StoreOptions::new(azurite().blob_endpoint());
    options.credentials = CredentialsSource::Anonymous;
    let anon = ferry_store::connect(Provider::Azure, options).unwrap();
    // Private until the container's access level says otherwise.
    let e = anon.get_bytes(&o).await.unwrap_err();
    assert!(e.is_not_found() || matches!(e, Error::Auth { .. }), "{e:?}");
    let admin = AzureClientBuilder::new(
        AzureConfig::resolve(
            Some(&azurite().blob_endpoint()),
            &CredentialsSource::Explicit(Credentials::new(ACCOUNT, ACCOUNT_KEY)),
        )
        .unwrap(),
    )
    .build()
    .unwrap();
    admin.set_container_public_access(&container, Some("container")).await.unwrap();
    assert_eq!(anon.get_bytes(&o).await.unwrap(), Bytes::from_static(b"for everyone"));
    let (objects, _) = anon.list_all(&container, Default::default()).await.unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!(
        anon.presign_get(&o, Duration::from_secs(60)).unwrap(),
        format!("{}/{container}/open.txt", azurite().blob_endpoint())
    );
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_upload_commits_with_the_content_type_and_metadata_it_started_with() {
    let c = emulator();
    let container = unique("meta");
    c.create_bucket(&container).await.unwrap();
    let o = ObjectRef::new(container.as_str(), "table.csv");
    let params = PutParams {
        content_type: Some("text/csv".into()),
        metadata: vec![("Origin".into(), "ferry".into())],
        ..PutParams::default()
    };
    let up = c.create_upload(&o, &params).await.unwrap();
    let p2 = c.upload_part(&up, 2, PartPayload::Bytes(Bytes::from_static(b"3,4\n"))).await.unwrap();
    let p1 = c.upload_part(&up, 1, PartPayload::Bytes(Bytes::from_static(b"a,b\n1,2\n"))).await.unwrap();
    c.complete_upload(&up, &[p2, p1], None).await.unwrap();
    let info = c.head(&o).await.unwrap();
    assert_eq!(info.content_type.as_deref(), Some("text/csv"));
    assert_eq!(info.metadata.get("origin").map(String::as_str), Some("ferry"));
    assert_eq!(c.get_bytes(&o).await.unwrap(), Bytes::from_static(b"a,b\n1,2\n3,4\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_copy_is_polled_until_it_succeeds_and_a_failed_one_is_an_error() {
    let heads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = heads.clone();
    let (addr, seen) = peer(Box::new(move |s, _| {
        let status = |v: &str| ("x-ms-copy-status".to_string(), v.to_string());
        if s.line.starts_with("PUT /acct/c/dest") {
            return (202, vec![status("pending"), ("etag".into(), "\"0x1\"".into())], String::new());
        }
        if s.line.starts_with("PUT /acct/c/doomed") {
            return (202, vec![status("failed")], String::new());
        }
        if s.line.starts_with("HEAD /acct/c/dest") {
            let n = h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let v = if n == 0 { "pending" } else { "success" };
            return (200, vec![status(v), ("etag".into(), "\"0x2\"".into())], String::new());
        }
        // The source's properties, read first: no index tags to carry.
        if s.line.starts_with("HEAD /acct/c/src") {
            return blob_properties();
        }
        (404, vec![("x-ms-error-code".into(), "BlobNotFound".into())], String::new())
    }))
    .await;
    let c = blob_client(addr, AzureCredential::Anonymous, RetryConfig::none());
    let out = c.copy(&ObjectRef::new("c", "src"), &ObjectRef::new("c", "dest"), Default::default()).await.unwrap();
    assert_eq!(out.etag, "\"0x2\"");
    assert_eq!(heads.load(std::sync::atomic::Ordering::SeqCst), 2);
    let put = seen.lock().unwrap()[1].clone();
    assert_eq!(put.header("x-ms-copy-source"), Some(format!("http://{addr}/acct/c/src").as_str()));
    // Pinned to the source as its properties were read; no tags to state.
    assert_eq!(put.header("x-ms-source-if-match"), Some("\"0x8D1\""));
    assert_eq!(put.header("x-ms-tags"), None);
    let e = c.copy(&ObjectRef::new("c", "src"), &ObjectRef::new("c", "doomed"), Default::default()).await.unwrap_err();
    assert!(matches!(&e, Error::Service { code, .. } if code == "CopyFailed"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_deletes_go_256_to_a_request_and_report_each_key() {
    let (addr, seen) = peer(Box::new(|s, _| {
        let boundary = s.header("content-type").unwrap().split("boundary=").nth(1).unwrap().to_owned();
        let parts: Vec<&str> = s.body.split(&format!("--{boundary}")).filter(|p| p.contains("DELETE ")).collect();
        let mut body = String::new();
        for (i, p) in parts.iter().enumerate() {
            // Every sub-request is a signed DELETE of one blob, without x-ms-version.
            assert!(p.contains(&format!("Content-ID: {i}\r\n")), "{p}");
            assert!(p.contains("\r\nx-ms-date: ") && p.contains("\r\nauthorization: SharedKey acct:"), "{p}");
            assert!(!p.contains("x-ms-version"), "{p}");
            let line = p.lines().find(|l| l.starts_with("DELETE ")).unwrap();
            let (status, extra) = if line.contains("/forbidden ") {
                ("403 Forbidden", "x-ms-error-code: AuthorizationFailure\r\n")
            } else if line.contains("/gone ") {
                ("404 Not Found", "x-ms-error-code: BlobNotFound\r\n")
            } else {
                ("202 Accepted", "")
            };
            body.push_str(&format!("--batchresponse_r\r\nContent-Type: application/http\r\nContent-ID: {i}\r\n\r\nHTTP/1.1 {status}\r\n{extra}x-ms-request-id: s{i}\r\n\r\n"));
        }
        body.push_str("--batchresponse_r--\r\n");
        (202, vec![("content-type".into(), "multipart/mixed; boundary=batchresponse_r".into())], body)
    }))
    .await;
    let key = ferry_proto::checksum::base64_encode(b"a key");
    let mut config = AzureConfig::resolve(Some(&format!("http://{addr}/acct")), &CredentialsSource::Anonymous).unwrap();
    config.credential = AzureCredential::SharedKey(Arc::new(ferry_proto::checksum::base64_decode(&key).unwrap()));
    let c = AzureClientBuilder::new(config).mode(Mode::H1Pool).retry(RetryConfig::none()).build().unwrap();
    let mut keys: Vec<String> = (0..298).map(|i| format!("k/{i:03}")).collect();
    keys.push("forbidden".into());
    keys.push("gone".into());
    let out = c.delete_batch("c", &keys).await.unwrap();
    let posts: Vec<String> = seen.lock().unwrap().iter().map(|s| s.line.clone()).collect();
    assert_eq!(posts, vec!["POST /acct/c?restype=container&comp=batch HTTP/1.1"; 2]);
    assert_eq!(out.deleted.len(), 299, "a missing blob counts as deleted");
    assert_eq!(out.errors.len(), 1);
    assert_eq!((out.errors[0].key.as_str(), out.errors[0].code.as_str()), ("forbidden", "AuthorizationFailure"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_put_whose_stored_md5_differs_is_deleted_and_fails() {
    let (addr, seen) = peer(Box::new(|s, _| {
        if s.line.starts_with("PUT ") {
            return (
                201,
                vec![("content-md5".into(), md5_b64(b"not what was sent")), ("etag".into(), "\"0x9\"".into())],
                String::new(),
            );
        }
        (202, vec![], String::new())
    }))
    .await;
    let c = blob_client(addr, AzureCredential::Anonymous, RetryConfig::none());
    let chunks = vec![Ok(Bytes::from_static(b"streamed ")), Ok(Bytes::from_static(b"bytes"))];
    let e = c
        .put(
            &ObjectRef::new("c", "s"),
            PutPayload::Stream { len: 14, stream: futures_util::StreamExt::boxed(futures_util::stream::iter(chunks)) },
            PutParams::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::Integrity { message, .. } if message.contains("deleted")), "{e:?}");
    let lines: Vec<String> = seen.lock().unwrap().iter().map(|s| s.line.clone()).collect();
    assert_eq!(lines, vec!["PUT /acct/c/s HTTP/1.1", "DELETE /acct/c/s HTTP/1.1"]);
    assert_eq!(seen.lock().unwrap()[0].body, "streamed bytes");
}

#[test]
fn h2_is_refused_for_azure() {
    let mut options = StoreOptions::new("http://127.0.0.1:1/acct");
    options.credentials = CredentialsSource::Anonymous;
    options.mode = Mode::H2;
    let e = ferry_store::connect(Provider::Azure, options).unwrap_err();
    assert!(matches!(&e, Error::Config(m) if m.contains("HTTP/1.1")), "{e:?}");
}

/// The wire format, byte for byte, against a scripted peer that answers as Azure does
/// (Azurite checks the CRC64 too: `azurite_checks_and_answers_the_crc64_...`): the CRC-64/NVME of "123456789" is 0xae8b14860a799888 (the CRC
/// catalogue's check value), sent as its 8 bytes little-endian in base64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_and_blocks_send_crc64_little_endian_and_check_the_answer() {
    const CHECK_CRC64: &str = "iJh5CoYUi64=";
    let (addr, seen) = peer(Box::new(|s, _| {
        let sent = s.header("x-ms-content-crc64").unwrap_or("").to_owned();
        let md5 = md5_b64(s.body.as_bytes());
        if s.line.contains("/bad-crc") {
            // An answer computed over other bytes than were sent.
            return (201, vec![("x-ms-content-crc64".into(), "AAAAAAAAAAA=".into())], String::new());
        }
        if s.line.contains("/bad-md5") && s.line.starts_with("PUT ") {
            return (201, vec![("content-md5".into(), md5_b64(b"other"))], String::new());
        }
        if s.line.starts_with("DELETE ") {
            return (202, vec![], String::new());
        }
        (201, vec![("x-ms-content-crc64".into(), sent), ("content-md5".into(), md5)], String::new())
    }))
    .await;
    let c = blob_client(addr, AzureCredential::Anonymous, RetryConfig::none());
    let body = Bytes::from_static(b"123456789");
    c.put(&ObjectRef::new("c", "ok"), PutPayload::Bytes(body.clone()), PutParams::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, &body).unwrap();
    c.put(&ObjectRef::new("c", "file"), PutPayload::File(f), PutParams::default()).await.unwrap();
    let up = c.create_upload(&ObjectRef::new("c", "blocks"), &PutParams::default()).await.unwrap();
    c.upload_part(&up, 1, PartPayload::Bytes(body.clone())).await.unwrap();
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        for s in seen.iter() {
            assert_eq!(s.header("x-ms-content-crc64"), Some(CHECK_CRC64), "{}", s.line);
            // Azure refuses a request that carries both checksums.
            assert_eq!(s.header("content-md5"), None, "{}", s.line);
        }
        assert!(seen[2].line.contains("comp=block"), "{}", seen[2].line);
    }

    // A CRC64 in the answer other than ours fails the block and the put; the blob whose
    // stored MD5 is not ours is deleted.
    let up = c.create_upload(&ObjectRef::new("c", "bad-crc"), &PutParams::default()).await.unwrap();
    let e = c.upload_part(&up, 1, PartPayload::Bytes(body.clone())).await.unwrap_err();
    assert!(matches!(&e, Error::Integrity { message, .. } if message.contains("CRC64")), "{e:?}");
    let e = c.put(&ObjectRef::new("c", "bad-md5"), PutPayload::Bytes(body), PutParams::default()).await.unwrap_err();
    assert!(matches!(&e, Error::Integrity { message, .. } if message.contains("MD5")), "{e:?}");
    let last = seen.lock().unwrap().last().unwrap().line.clone();
    assert_eq!(last, "DELETE /acct/c/bad-md5 HTTP/1.1");
}

/// A bearer-token client presigns with a user delegation SAS: Get User Delegation Key
/// (POST `?restype=service&comp=userdelegationkey`, bearer-authorised, a KeyInfo of
/// start and expiry), then the SAS signed with the key's value over the string Azure
/// documents for signed versions 2020-12-06 and later. Azurite answers that call only in
/// its OAuth mode over HTTPS, and no Entra ID is here to mint a token it accepts, so a
/// scripted peer plays both and the signature is recomputed here from the documented
/// string.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_client_presigns_with_a_user_delegation_key() {
    use hmac::{Hmac, Mac};
    let (token_addr, _) = peer(Box::new(|_, _| {
        (200, vec![], r#"{"token_type":"Bearer","expires_in":3599,"access_token":"tok"}"#.into())
    }))
    .await;
    let secret = b"0123456789abcdef0123456789abcdef";
    let value = ferry_proto::checksum::base64_encode(secret);
    let (blob_addr, blob_seen) = peer(Box::new(move |_, _| {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><UserDelegationKey><SignedOid>oid-1</SignedOid><SignedTid>tid-1</SignedTid><SignedStart>2026-01-01T00:00:00Z</SignedStart><SignedExpiry>2026-01-02T00:00:00Z</SignedExpiry><SignedService>b</SignedService><SignedVersion>2023-11-03</SignedVersion><Value>{value}</Value></UserDelegationKey>"
        );
        (200, vec![("content-type".into(), "application/xml".into())], body)
    }))
    .await;
    let source = TokenSource::new(TokenFlow::ClientSecret {
        authority: format!("http://{token_addr}"),
        tenant: "t".into(),
        client_id: "c".into(),
        secret: "s".into(),
    })
    .unwrap();
    let c = blob_client(blob_addr, AzureCredential::Token(Arc::new(source)), RetryConfig::none());
    let o = ObjectRef::new("cont", "dir/a b.txt");
    assert!(c.presign_get(&o, Duration::from_secs(600)).is_err(), "a token cannot sign without asking the service");
    let url = c.presign(&o, Duration::from_secs(600)).await.unwrap();

    let seen = blob_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert!(s.line.starts_with("POST /acct/?") || s.line.starts_with("POST /acct?"), "{}", s.line);
    assert!(s.line.contains("restype=service") && s.line.contains("comp=userdelegationkey"), "{}", s.line);
    assert_eq!(s.header("authorization"), Some("Bearer tok"));
    let start = s.body.split("<Start>").nth(1).and_then(|r| r.split("</Start>").next()).unwrap().to_owned();
    let expiry = s.body.split("<Expiry>").nth(1).and_then(|r| r.split("</Expiry>").next()).unwrap().to_owned();
    assert!(start.ends_with('Z') && expiry.ends_with('Z') && !start.contains('.'), "{}", s.body);

    let (base, query) = url.split_once('?').unwrap();
    assert_eq!(base, format!("http://{blob_addr}/acct/cont/dir/a%20b.txt"));
    let q: std::collections::HashMap<String, String> = ferry_proto::encoding::parse_query(query).into_iter().collect();
    for (k, v) in [
        ("sv", "2023-11-03"),
        ("sr", "b"),
        ("sp", "r"),
        ("skoid", "oid-1"),
        ("sktid", "tid-1"),
        ("skt", "2026-01-01T00:00:00Z"),
        ("ske", "2026-01-02T00:00:00Z"),
        ("sks", "b"),
        ("skv", "2023-11-03"),
    ] {
        assert_eq!(q.get(k).map(String::as_str), Some(v), "{k} in {query}");
    }
    assert_eq!(q["se"], expiry, "the URL expires when the key was asked to");
    let to_sign = format!(
        "r\n\n{expiry}\n/blob/acct/cont/dir/a b.txt\noid-1\ntid-1\n2026-01-01T00:00:00Z\n2026-01-02T00:00:00Z\nb\n2023-11-03\n\n\n\n\n\n2023-11-03\nb\n\n\n\n\n\n\n"
    );
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
    m.update(to_sign.as_bytes());
    assert_eq!(q["sig"], ferry_proto::checksum::base64_encode(&m.finalize().into_bytes()));
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_failed_write_leaves_a_committed_blob_alone_and_discarding_recommits_it() {
    let c = emulator();
    let container = unique("discard");
    c.create_bucket(&container).await.unwrap();
    let o = ObjectRef::new(container.as_str(), "kept.bin");
    let part = 1u64 << 20;
    // A blob committed from blocks, so that a re-commit can name them.
    let body = data(2 * part as usize, 3);
    let first = c.create_upload(&o, &PutParams::default()).await.unwrap();
    let mut parts = Vec::new();
    for n in 1..=2u32 {
        let start = (n as usize - 1) * part as usize;
        let slice = body.slice(start..start + part as usize);
        parts.push(c.upload_part(&first, n, PartPayload::Bytes(slice)).await.unwrap());
    }
    c.complete_upload(&first, &parts, None).await.unwrap();
    let etag = c.head(&o).await.unwrap().etag;
    // A second write to it fails after staging one block.
    let second = c.create_upload(&o, &PutParams::default()).await.unwrap();
    c.upload_part(&second, 1, PartPayload::Bytes(data(part as usize, 9))).await.unwrap();
    let refused = c.abort_upload(&second).await.unwrap_err();
    assert!(refused.to_string().contains("UncommittedBlocksRemain"), "{refused}");
    assert_eq!(c.head(&o).await.unwrap().etag, etag, "a failed write's abort changed the blob");
    assert_eq!(c.list_uploads(&container, "kept.bin").await.unwrap().len(), 1);
    // Asked for by a person (rm --incomplete): the blocks go, the bytes stay.
    c.discard_upload(&second).await.unwrap();
    assert!(c.list_uploads(&container, "kept.bin").await.unwrap().is_empty());
    assert_eq!(c.get_bytes(&o).await.unwrap(), body);
}

/// A request written by hand to Azurite, authorised by a container SAS: header names go
/// out exactly as given (ferry's own stack sends them lower case), which is how a blob
/// gets a metadata name with capitals here. Returns the status and the body.
fn by_hand(method: &str, path: &str, sas: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = azurite().addr;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "{method} /{ACCOUNT}/{path}{}{sas} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nx-ms-version: {}\r\nContent-Length: {}\r\n",
        if path.contains('?') { '&' } else { '?' },
        ferry_store::azure::API_VERSION,
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status line: {out:?}"));
    (status, out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

/// A container SAS with `perms`, valid until 2099.
fn sas_for(container: &str, perms: &str) -> String {
    let key = ferry_proto::checksum::base64_decode(ACCOUNT_KEY).unwrap();
    ferry_store::azure::auth::container_sas(
        ACCOUNT,
        &key,
        container,
        perms,
        "2099-01-01T00:00:00Z",
        ferry_store::azure::API_VERSION,
    )
}

const TAGS_XML: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?><Tags><TagSet><Tag><Key>Project</Key><Value>a b</Value></Tag><Tag><Key>tier</Key><Value>2</Value></Tag></TagSet></Tags>";

/// A blob committed from two blocks, with content type and metadata.
async fn block_blob(c: &DynObjectStore, o: &ObjectRef, body: &Bytes) {
    let params = PutParams {
        content_type: Some("text/csv".into()),
        metadata: vec![("owner".into(), "lab".into())],
        ..PutParams::default()
    };
    let up = c.create_upload(o, &params).await.unwrap();
    let half = body.len() / 2;
    let p1 = c.upload_part(&up, 1, PartPayload::Bytes(body.slice(..half))).await.unwrap();
    let p2 = c.upload_part(&up, 2, PartPayload::Bytes(body.slice(half..))).await.unwrap();
    c.complete_upload(&up, &[p1, p2], None).await.unwrap();
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discarding_recommits_with_the_index_tags_and_refuses_to_lower_case_a_metadata_name() {
    let c = emulator();
    let container = unique("restate");
    c.create_bucket(&container).await.unwrap();
    let sas = sas_for(&container, "racwdlt");
    let o = ObjectRef::new(container.as_str(), "tagged.csv");
    let body = data(64 * 1024, 5);
    block_blob(&c, &o, &body).await;
    let (status, _) = by_hand("PUT", &format!("{container}/tagged.csv?comp=tags"), &sas, &[], TAGS_XML);
    assert_eq!(status, 204);
    // A failed write's blocks, discarded: the blob is committed again with its tags.
    let up = c.create_upload(&o, &PutParams::default()).await.unwrap();
    c.upload_part(&up, 1, PartPayload::Bytes(data(1000, 6))).await.unwrap();
    c.discard_upload(&up).await.unwrap();
    assert!(c.list_uploads(&container, "tagged.csv").await.unwrap().is_empty());
    assert_eq!(c.get_bytes(&o).await.unwrap(), body);
    let (_, tags) = by_hand("GET", &format!("{container}/tagged.csv?comp=tags"), &sas, &[], "");
    assert!(tags.contains("<Key>Project</Key><Value>a b</Value>") && tags.contains("<Key>tier</Key>"), "{tags}");
    let info = c.head(&o).await.unwrap();
    assert_eq!(info.content_type.as_deref(), Some("text/csv"));
    assert_eq!(info.metadata.get("owner").map(String::as_str), Some("lab"));
    // A metadata name stored with capitals: ferry cannot write it back as it is, so the
    // blocks stay, the blob untouched, and the error says why.
    let (status, _) =
        by_hand("PUT", &format!("{container}/tagged.csv?comp=metadata"), &sas, &[("x-ms-meta-OwnerName", "Lab")], "");
    assert_eq!(status, 200);
    let etag = c.head(&o).await.unwrap().etag;
    let up = c.create_upload(&o, &PutParams::default()).await.unwrap();
    c.upload_part(&up, 1, PartPayload::Bytes(data(1000, 7))).await.unwrap();
    let e = c.discard_upload(&up).await.unwrap_err().to_string();
    assert!(e.contains("UncommittedBlocksRemain") && e.contains("\"OwnerName\" is stored with capitals"), "{e}");
    assert_eq!(c.head(&o).await.unwrap().etag, etag, "a refused re-commit changed the blob");
    assert_eq!(c.list_uploads(&container, "tagged.csv").await.unwrap().len(), 1);
    let (_, listing) =
        by_hand("GET", &format!("{container}?restype=container&comp=list&include=metadata"), &sas, &[], "");
    assert!(listing.contains("<OwnerName>Lab</OwnerName>"), "{listing}");
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_carries_the_index_tags_or_says_why_it_cannot() {
    let c = emulator();
    let container = unique("copytags");
    c.create_bucket(&container).await.unwrap();
    let sas = sas_for(&container, "racwdlt");
    let src = ObjectRef::new(container.as_str(), "src.bin");
    c.put(&src, PutPayload::Bytes(data(5000, 8)), PutParams::default()).await.unwrap();
    assert_eq!(by_hand("PUT", &format!("{container}/src.bin?comp=tags"), &sas, &[], TAGS_XML).0, 204);
    let dest = ObjectRef::new(container.as_str(), "dest.bin");
    c.copy(&src, &dest, Default::default()).await.unwrap();
    assert_eq!(c.get_bytes(&dest).await.unwrap(), data(5000, 8));
    let (_, tags) = by_hand("GET", &format!("{container}/dest.bin?comp=tags"), &sas, &[], "");
    assert!(tags.contains("<Key>Project</Key><Value>a b</Value>") && tags.contains("<Key>tier</Key>"), "{tags}");
    // An untagged source copies as before, with no tags.
    let plain = ObjectRef::new(container.as_str(), "plain.bin");
    c.put(&plain, PutPayload::Bytes(data(10, 9)), PutParams::default()).await.unwrap();
    c.copy(&plain, &ObjectRef::new(container.as_str(), "plain2.bin"), Default::default()).await.unwrap();
    let (_, tags) = by_hand("GET", &format!("{container}/plain2.bin?comp=tags"), &sas, &[], "");
    assert!(!tags.contains("<Tag>"), "{tags}");
    // A client whose SAS may not read tags: the copy of a tagged blob is refused, saying
    // why, and nothing is copied.
    let mut config = AzureConfig::resolve(Some(&azurite().blob_endpoint()), &CredentialsSource::Anonymous).unwrap();
    config.credential = AzureCredential::Sas(sas_for(&container, "racwdl"));
    let no_tags: DynObjectStore = Arc::new(AzureClientBuilder::new(config).mode(Mode::H1Pool).build().unwrap());
    let other = ObjectRef::new(container.as_str(), "other.bin");
    let e = no_tags.copy(&src, &other, Default::default()).await.unwrap_err();
    assert!(matches!(e, Error::Auth { .. }) && e.to_string().contains("has 2 index tags"), "{e}");
    assert!(c.head(&other).await.unwrap_err().is_not_found());
}

/// A transport layer that records each answer's `x-ms-content-crc64` and, while `flip`
/// is set, changes the first byte of a request body after the client computed its CRC:
/// a body damaged between ferry and the service.
struct Damaging {
    inner: Arc<dyn ferry_wire::Transport>,
    flip: Arc<std::sync::atomic::AtomicBool>,
    answered: Arc<Mutex<Vec<Option<String>>>>,
}

impl ferry_wire::Transport for Damaging {
    fn send(
        &self,
        mut req: ferry_wire::Request,
    ) -> futures_util::future::BoxFuture<'static, Result<ferry_wire::Response, ferry_wire::WireError>> {
        if self.flip.load(std::sync::atomic::Ordering::SeqCst) {
            if let ferry_wire::RequestBody::Full(b) = &req.body {
                let mut v = b.to_vec();
                v[0] ^= 1;
                req.body = ferry_wire::RequestBody::Full(Bytes::from(v));
            }
        }
        let (inner, answered) = (self.inner.clone(), self.answered.clone());
        Box::pin(async move {
            let r = inner.send(req).await?;
            let crc = r.headers.get("x-ms-content-crc64").and_then(|v| v.to_str().ok()).map(str::to_owned);
            answered.lock().unwrap().push(crc);
            Ok(r)
        })
    }
    fn stats(&self) -> ferry_wire::TransportStats {
        self.inner.stats()
    }
    fn name(&self) -> &'static str {
        "damaging"
    }
}

fn crc64_of(b: &[u8]) -> String {
    let d = ferry_proto::checksum::ChecksumAlgorithm::Crc64Nvme.digest(b);
    ferry_store::azure::object::crc64_header(u64::from_be_bytes(d.try_into().unwrap()))
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azurite_checks_and_answers_the_crc64_so_a_body_damaged_on_the_way_is_refused() {
    let flip = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let (f, a) = (flip.clone(), answered.clone());
    let mut options = StoreOptions::new(azurite().blob_endpoint());
    options.credentials = CredentialsSource::Explicit(Credentials::new(ACCOUNT, ACCOUNT_KEY));
    options.transport_layer = Some(ferry_store::TransportLayer::new(move |_, inner| {
        Arc::new(Damaging { inner, flip: f.clone(), answered: a.clone() })
    }));
    let c = ferry_store::connect(Provider::Azure, options).unwrap();
    let container = unique("crc64");
    c.create_bucket(&container).await.unwrap();
    // Put Blob and Put Block: Azurite checks the CRC64 ferry sent; Put Block's answer
    // also states the CRC64 it computed, which ferry compares (Put Blob's answer from
    // Azurite carries its MD5 only).
    let (whole, block) = (data(3000, 10), data(2000, 11));
    let o = ObjectRef::new(container.as_str(), "whole.bin");
    c.put(&o, PutPayload::Bytes(whole.clone()), PutParams::default()).await.unwrap();
    let b = ObjectRef::new(container.as_str(), "blocks.bin");
    let up = c.create_upload(&b, &PutParams::default()).await.unwrap();
    c.upload_part(&up, 1, PartPayload::Bytes(block.clone())).await.unwrap();
    assert_eq!(answered.lock().unwrap().last().cloned().flatten(), Some(crc64_of(&block)));
    // The same bytes damaged on the way: refused by their CRC64, nothing stored.
    flip.store(true, std::sync::atomic::Ordering::SeqCst);
    let o2 = ObjectRef::new(container.as_str(), "damaged.bin");
    let e = c.put(&o2, PutPayload::Bytes(whole.clone()), PutParams::default()).await.unwrap_err();
    assert!(matches!(&e, Error::Integrity { message, .. } if message.starts_with("Crc64Mismatch")), "{e:?}");
    let e = c.upload_part(&up, 2, PartPayload::Bytes(block.clone())).await.unwrap_err();
    assert!(matches!(&e, Error::Integrity { message, .. } if message.starts_with("Crc64Mismatch")), "{e:?}");
    flip.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(c.head(&o2).await.unwrap_err().is_not_found());
    assert_eq!(c.list_parts(&up).await.unwrap().iter().map(|p| p.part_number).collect::<Vec<_>>(), vec![1]);
}
