//! What fake-gcs-server cannot show, against scripted peers on real sockets: Google's
//! token endpoints and metadata server (unreachable here), and storage answers the
//! emulator never gives (401 for a stale token, 429, stored-gzip bodies, corrupt
//! bytes). Each peer is a small HTTP/1.1 server on 127.0.0.1 that records what it was
//! sent and answers from a script; it is a stand-in for Google, and says so here.
//!
//! The service account key in `testdata/` was generated for these tests only
//! (`openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048`); it signs nothing
//! anywhere else.

use super::auth::{Auth, TokenCache, TokenSource};
use super::client::GcsClient;
use crate::error::Error;
use crate::types::*;
use crate::ObjectStore;
use base64::Engine as _;
use bytes::Bytes;
use ferry_proto::checksum::{base64_encode, ChecksumAlgorithm};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const KEY_PEM: &str = include_str!("testdata/test-service-account-key.pem");

/// One request as the peer read it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    target: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// An answer: status, headers, body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// A scripted HTTP/1.1 peer on a real socket.
struct Peer {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Peer {
    fn start(script: impl Fn(&Seen, usize) -> Answer + Send + Sync + 'static) -> Peer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Default::default();
        let (seen2, script) = (seen.clone(), Arc::new(script));
        tokio::spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((sock, _)) = listener.accept().await else { return };
                let (seen, script) = (seen2.clone(), script.clone());
                tokio::spawn(async move {
                    let (r, mut w) = sock.into_split();
                    let mut r = BufReader::new(r);
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let mut parts = line.split_whitespace();
                        let (method, target) =
                            (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned());
                        let mut headers = HashMap::new();
                        loop {
                            let mut h = String::new();
                            r.read_line(&mut h).await.unwrap();
                            let h = h.trim_end();
                            if h.is_empty() {
                                break;
                            }
                            if let Some((k, v)) = h.split_once(':') {
                                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
                            }
                        }
                        let n: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
                        let mut body = vec![0u8; n];
                        r.read_exact(&mut body).await.unwrap();
                        let req = Seen { method, target, headers, body };
                        let i = {
                            let mut s = seen.lock().unwrap();
                            s.push(req.clone());
                            s.len() - 1
                        };
                        let (status, hs, body) = script(&req, i);
                        let mut out = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
                        for (k, v) in hs {
                            out.push_str(&format!("{k}: {v}\r\n"));
                        }
                        out.push_str("\r\n");
                        let mut bytes = out.into_bytes();
                        if req.method != "HEAD" {
                            bytes.extend_from_slice(&body);
                        }
                        if w.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Peer { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn json(status: u16, v: serde_json::Value) -> Answer {
    (status, vec![("content-type".into(), "application/json".into())], v.to_string().into_bytes())
}

fn sa_file(dir: &std::path::Path, token_uri: &str) -> std::path::PathBuf {
    let p = dir.join("sa.json");
    let v = serde_json::json!({
        "type": "service_account", "project_id": "proj-1", "private_key_id": "kid-1",
        "private_key": KEY_PEM, "client_email": "ferry-test@proj-1.iam.gserviceaccount.com",
        "token_uri": token_uri,
    });
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// The form fields of a token request.
fn form(body: &[u8]) -> HashMap<String, String> {
    ferry_proto::encoding::parse_query(&String::from_utf8_lossy(body)).into_iter().collect()
}

/// Checks a JWT's RS256 signature with the test key's public half; returns its claims.
fn verify_jwt(jwt: &str) -> serde_json::Value {
    let sa = match super::auth::from_file(&sa_file(tempfile::tempdir().unwrap().path(), "http://x/token")).unwrap().0 {
        TokenSource::ServiceAccount(sa) => sa,
        _ => unreachable!(),
    };
    let public = ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        ring::signature::KeyPair::public_key(&sa.key).as_ref().to_vec(),
    );
    let (signed, sig) = jwt.rsplit_once('.').unwrap();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    public.verify(signed.as_bytes(), &b64.decode(sig).unwrap()).expect("the JWT's signature verifies");
    let (header, claims) = signed.split_once('.').unwrap();
    let header: serde_json::Value = serde_json::from_slice(&b64.decode(header).unwrap()).unwrap();
    assert_eq!((header["alg"].as_str(), header["kid"].as_str()), (Some("RS256"), Some("kid-1")));
    serde_json::from_slice(&b64.decode(claims).unwrap()).unwrap()
}

fn client_for(storage: &str, auth: Auth) -> GcsClient {
    let endpoint = ferry_wire::Endpoint::parse(storage).unwrap();
    let mut tc = ferry_wire::TransportConfig::new(endpoint.clone());
    tc.mode = ferry_wire::Mode::H1Pool;
    let retry = crate::RetryConfig {
        base_delay: std::time::Duration::from_millis(1),
        throttled_base_delay: std::time::Duration::from_millis(1),
        max_attempts: 3,
        ..crate::RetryConfig::default()
    };
    GcsClient::with_transport(ferry_wire::transport(tc).unwrap(), endpoint, auth, Some("proj-1".into()), retry)
}

fn object_json(name: &str, size: usize) -> serde_json::Value {
    serde_json::json!({"name": name, "bucket": "b", "generation": "7", "size": size.to_string(), "crc32c": "AAAAAA=="})
}

/// A service account's JWT goes to its token_uri, signed with its key; the token is
/// cached, sent as a bearer token, and fetched again after a 401.
#[tokio::test]
async fn service_account_tokens_are_signed_cached_and_renewed() {
    let tokens = Peer::start(|req, i| {
        assert_eq!((req.method.as_str(), req.target.as_str()), ("POST", "/token"));
        json(200, serde_json::json!({"access_token": format!("tok-{i}"), "expires_in": 3600, "token_type": "Bearer"}))
    });
    let storage = Peer::start(|req, _| match req.headers.get("authorization").map(String::as_str) {
        Some("Bearer tok-0") if req.target.contains("stale") => json(
            401,
            serde_json::json!({"error": {"code": 401, "message": "Invalid Credentials", "errors": [{"reason": "authError"}]}}),
        ),
        Some(_) => json(200, object_json("k", 3)),
        None => json(401, serde_json::json!({})),
    });
    let dir = tempfile::tempdir().unwrap();
    let (src, project) = super::auth::from_file(&sa_file(dir.path(), &format!("{}/token", tokens.url))).unwrap();
    assert_eq!(project.as_deref(), Some("proj-1"));
    let c = client_for(&storage.url, Auth::Tokens(Arc::new(TokenCache::new(src, None))));
    let o = ObjectRef::new("b", "k");
    c.head(&o).await.unwrap();
    c.head(&o).await.unwrap();
    assert_eq!(tokens.seen().len(), 1, "the token is cached");
    let f = form(&tokens.seen()[0].body);
    assert_eq!(f["grant_type"], "urn:ietf:params:oauth:grant-type:jwt-bearer");
    let claims = verify_jwt(&f["assertion"]);
    assert_eq!(claims["iss"], "ferry-test@proj-1.iam.gserviceaccount.com");
    assert_eq!(claims["aud"], format!("{}/token", tokens.url));
    assert_eq!(claims["scope"], super::auth::SCOPE);
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 3600);
    // The stale token is refused once; a new one is fetched and the call succeeds.
    c.head(&ObjectRef::new("b", "stale")).await.unwrap();
    assert_eq!(tokens.seen().len(), 2);
    let auths: Vec<String> = storage.seen().iter().map(|s| s.headers["authorization"].clone()).collect();
    assert_eq!(auths, vec!["Bearer tok-0", "Bearer tok-0", "Bearer tok-0", "Bearer tok-1"]);
}

/// gcloud's authorized_user: a refresh-token grant; a token about to expire is fetched
/// again on its next use; a refused grant is `Auth` with the endpoint's reason.
#[tokio::test]
async fn authorized_user_refresh_and_expiry() {
    let tokens = Peer::start(|req, i| {
        let f = form(&req.body);
        if f["refresh_token"] == "revoked" {
            return json(
                400,
                serde_json::json!({"error": "invalid_grant", "error_description": "Token has been expired or revoked."}),
            );
        }
        // Shorter than the refresh margin: each use needs a new token.
        json(200, serde_json::json!({"access_token": format!("u-{i}"), "expires_in": 60}))
    });
    let dir = tempfile::tempdir().unwrap();
    let write = |rt: &str| {
        let p = dir.path().join(format!("{rt}.json"));
        let v = serde_json::json!({"type": "authorized_user", "client_id": "cid", "client_secret": "cs", "refresh_token": rt, "token_uri": format!("{}/token", tokens.url)});
        std::fs::write(&p, v.to_string()).unwrap();
        p
    };
    let (src, _) = super::auth::from_file(&write("rt-1")).unwrap();
    let auth = Auth::Tokens(Arc::new(TokenCache::new(src, None)));
    assert_eq!(auth.token().await.unwrap().as_deref(), Some("u-0"));
    assert_eq!(auth.token().await.unwrap().as_deref(), Some("u-1"));
    let f = form(&tokens.seen()[0].body);
    assert_eq!(
        (f["grant_type"].as_str(), f["client_id"].as_str(), f["client_secret"].as_str()),
        ("refresh_token", "cid", "cs")
    );
    let (src, _) = super::auth::from_file(&write("revoked")).unwrap();
    let e = Auth::Tokens(Arc::new(TokenCache::new(src, None))).token().await.unwrap_err();
    assert!(matches!(&e, Error::Auth { status: 400, code, .. } if code == "invalid_grant"), "{e:?}");
}

/// The metadata server: a GET with `Metadata-Flavor: Google` on the documented path.
#[tokio::test]
async fn metadata_server_token() {
    let md = Peer::start(|req, _| {
        assert_eq!(req.headers.get("metadata-flavor").map(String::as_str), Some("Google"));
        assert_eq!(req.target, "/computeMetadata/v1/instance/service-accounts/default/token");
        json(200, serde_json::json!({"access_token": "md-token", "expires_in": 3599, "token_type": "Bearer"}))
    });
    let auth = Auth::Tokens(Arc::new(TokenCache::new(TokenSource::Metadata { base: md.url.clone() }, None)));
    assert_eq!(auth.token().await.unwrap().as_deref(), Some("md-token"));
    assert_eq!(auth.describe(), "metadata server");
}

/// A stored-gzip object read whole: the request accepts gzip, the stored (compressed)
/// bytes come back, and their CRC32C is checked; corrupt bytes end in `Integrity`.
/// A 429 is retried, then `Throttled`.
#[tokio::test]
async fn media_reads_accept_gzip_and_check_the_stored_crc() {
    let stored = Bytes::from_static(b"\x1f\x8b compressed bytes as stored");
    let crc = base64_encode(&ChecksumAlgorithm::Crc32c.digest(&stored));
    let (s2, crc2) = (stored.clone(), crc.clone());
    let storage = Peer::start(move |req, _| {
        if req.target.contains("throttled") {
            return (429, vec![("retry-after".into(), "1".into())], b"{}".to_vec());
        }
        let mut body = s2.to_vec();
        if req.target.contains("corrupt") {
            body[5] ^= 1;
        }
        let headers = vec![
            ("content-encoding".into(), "gzip".into()),
            ("x-goog-stored-content-encoding".into(), "gzip".into()),
            ("x-goog-hash".into(), format!("crc32c={crc2},md5=AAAAAAAAAAAAAAAAAAAAAA==")),
            ("x-goog-generation".into(), "42".into()),
        ];
        (200, headers, body)
    });
    let c = client_for(&storage.url, Auth::Anonymous);
    let got = c.get(&ObjectRef::new("b", "z.gz"), GetParams::default()).await.unwrap();
    assert_eq!(got.meta.etag.as_deref(), Some("42"));
    assert_eq!(got.meta.checksums, vec![(ChecksumAlgorithm::Crc32c, crc)]);
    assert_eq!(got.body.collect().await.unwrap(), stored);
    let seen = storage.seen();
    assert_eq!(seen[0].headers.get("accept-encoding").map(String::as_str), Some("gzip"));
    assert!(seen[0].target.starts_with("/storage/v1/b/b/o/z.gz?alt=media"), "{}", seen[0].target);
    let e = c.get(&ObjectRef::new("b", "corrupt"), GetParams::default()).await.unwrap().body.collect().await;
    assert!(matches!(e, Err(Error::Integrity { .. })), "{e:?}");
    // Three attempts, each retry waiting at least the 1 s the answer asked for.
    let t0 = std::time::Instant::now();
    let e = c.head(&ObjectRef::new("b", "throttled")).await.unwrap_err();
    assert!(matches!(e, Error::Throttled { status: 429, .. }), "{e:?}");
    assert_eq!(storage.seen().iter().filter(|s| s.target.contains("throttled")).count(), 3);
    assert!(t0.elapsed() >= std::time::Duration::from_secs(2), "Retry-After was not honoured: {:?}", t0.elapsed());
}

/// A V4 signed URL: the query Google documents, signed over the canonical request with
/// the service account's key (checked with its public half).
#[test]
fn signed_urls_verify_with_the_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let sa = match super::auth::from_file(&sa_file(dir.path(), "http://x/token")).unwrap().0 {
        TokenSource::ServiceAccount(sa) => sa,
        _ => unreachable!(),
    };
    let o = ObjectRef::new("bkt", "dir/a b+.txt");
    let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    let exp = std::time::Duration::from_secs(600);
    let url = super::presign::sign_url(&sa, "https://storage.googleapis.com", "storage.googleapis.com", &o, now, exp)
        .unwrap();
    assert!(url.starts_with("https://storage.googleapis.com/bkt/dir/a%20b%2B.txt?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=ferry-test%40proj-1.iam.gserviceaccount.com%2F20231114%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Date=20231114T221320Z&X-Goog-Expires=600&X-Goog-SignedHeaders=host&X-Goog-Signature="), "{url}");
    let sig = hex::decode(url.rsplit_once("X-Goog-Signature=").unwrap().1).unwrap();
    let (_, sts) = super::presign::string_to_sign(&sa.client_email, "storage.googleapis.com", &o, now, exp);
    assert!(sts.starts_with("GOOG4-RSA-SHA256\n20231114T221320Z\n20231114/auto/storage/goog4_request\n"), "{sts}");
    let public = ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        ring::signature::KeyPair::public_key(&sa.key).as_ref().to_vec(),
    );
    public.verify(sts.as_bytes(), &sig).expect("the signature verifies");
    // Anonymous clients hand out the plain media URL; more than 7 days is refused.
    let c = client_for("http://127.0.0.1:1", Auth::Anonymous);
    assert_eq!(c.presign_get(&o, exp).unwrap(), "http://127.0.0.1:1/storage/v1/b/bkt/o/dir%2Fa%20b%2B.txt?alt=media");
    assert!(c.presign_get(&o, std::time::Duration::from_secs(8 * 24 * 3600)).is_err());
}

/// Listing pages in S3's model: `start_after` goes out as `startOffset` and the object
/// of that very name is dropped; a prefix repeated on a later page comes once; the
/// hidden upload prefix is left out.
#[tokio::test]
async fn listing_maps_start_after_and_prefixes() {
    let storage = Peer::start(|req, _| {
        assert!(req.target.starts_with("/storage/v1/b/b/o?"), "{}", req.target);
        if req.target.contains("pageToken=p2") {
            json(200, serde_json::json!({"items": [object_json("k3", 1)], "prefixes": ["b/", "c/"]}))
        } else {
            assert!(req.target.contains("startOffset=k1") && req.target.contains("maxResults=1000"), "{}", req.target);
            json(
                200,
                serde_json::json!({
                    "items": [object_json("k1", 1), object_json("k2", 1), object_json(".ferry-upload/x/upload", 0)],
                    "prefixes": [".ferry-upload/", "a/", "b/"], "nextPageToken": "p2",
                }),
            )
        }
    });
    let c = client_for(&storage.url, Auth::Anonymous);
    let params = ListParams { start_after: Some("k1".into()), delimiter: Some("/".into()), ..ListParams::default() };
    let pages: Vec<ListPage> = futures_util::TryStreamExt::try_collect(c.list("b", params)).await.unwrap();
    let keys: Vec<&str> = pages.iter().flat_map(|p| p.objects.iter().map(|o| o.key.as_str())).collect();
    let prefixes: Vec<&str> = pages.iter().flat_map(|p| p.common_prefixes.iter().map(String::as_str)).collect();
    assert_eq!(keys, vec!["k2", "k3"]);
    assert_eq!(prefixes, vec!["a/", "b/", "c/"]);
    assert_eq!(pages[0].next_continuation_token.as_deref(), Some("p2"));
    assert_eq!(pages[1].next_continuation_token, None);
}

/// A server without the batch endpoint (a proxy, another emulator): one DELETE per key,
/// a missing key counted as deleted. fake-gcs-server has the endpoint, so this path is
/// shown here.
#[tokio::test]
async fn batch_delete_falls_back_to_single_deletes() {
    let storage = Peer::start(|req, _| match (req.method.as_str(), req.target.as_str()) {
        ("POST", "/batch/storage/v1") => (404, vec![], b"Not Found".to_vec()),
        ("DELETE", t) if t.ends_with("/o/gone") => {
            json(404, serde_json::json!({"error": {"code": 404, "message": "No such object"}}))
        }
        ("DELETE", t) if t.ends_with("/o/locked") => {
            json(403, serde_json::json!({"error": {"code": 403, "message": "no", "errors": [{"reason": "forbidden"}]}}))
        }
        ("DELETE", _) => (204, vec![], Vec::new()),
        other => panic!("unexpected {other:?}"),
    });
    let c = client_for(&storage.url, Auth::Anonymous);
    let keys: Vec<String> = ["a", "dir/b", "gone", "locked"].iter().map(|k| k.to_string()).collect();
    let out = c.delete_batch("b", &keys).await.unwrap();
    assert_eq!(out.deleted, vec!["a", "dir/b", "gone"]);
    assert_eq!(
        out.errors.iter().map(|e| (e.key.as_str(), e.code.as_str())).collect::<Vec<_>>(),
        vec![("locked", "forbidden")]
    );
    let deletes: Vec<String> =
        storage.seen().iter().filter(|s| s.method == "DELETE").map(|s| s.target.clone()).collect();
    assert!(deletes.contains(&"/storage/v1/b/b/o/dir%2Fb".to_owned()), "{deletes:?}");
}

/// A resumable session that keeps only part of a chunk (a 308 whose `Range` stops
/// short), and a chunk whose attempt fails (500: the server may have kept some of it):
/// the client sends on from what the session says it holds, asking it with
/// `Content-Range: bytes */TOTAL` after the failure, and never resends a chunk from its
/// own start. fake-gcs-server keeps every chunk whole and never fails one, so only a
/// scripted peer shows this.
#[tokio::test]
async fn a_resumable_chunk_resumes_from_what_the_session_holds() {
    const MIB: u64 = 1 << 20;
    let len = 2 * super::object::RESUMABLE_CHUNK as u64 + 100;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let crc = base64_encode(&ChecksumAlgorithm::Crc32c.digest(&data));
    let crc2 = crc.clone();
    let url = Arc::new(Mutex::new(String::new()));
    let url2 = url.clone();
    let peer = Peer::start(move |req, _| {
        let range = req.headers.get("content-range").cloned().unwrap_or_default();
        let held = |n: u64| (308, vec![("range".to_owned(), format!("bytes=0-{}", n - 1))], Vec::new());
        match (req.method.as_str(), range.as_str()) {
            ("POST", _) => {
                (200, vec![("location".into(), format!("{}/upload/session-1", url2.lock().unwrap()))], vec![])
            }
            // The first chunk: only 5 MiB of its 8 are kept.
            ("PUT", "bytes 0-8388607/*") => held(5 * MIB),
            ("PUT", "bytes 5242880-8388607/*") => held(8 * MIB),
            // The second chunk's attempt fails; the session then says it holds 12 MiB.
            ("PUT", "bytes 8388608-16777215/*") => {
                json(500, serde_json::json!({"error": {"code": 500, "message": "backend"}}))
            }
            ("PUT", "bytes */16777316") => held(12 * MIB),
            ("PUT", "bytes 12582912-16777215/*") => held(16 * MIB),
            ("PUT", "bytes 16777216-16777315/16777316") => {
                let mut o = object_json("k", 16777316);
                o["crc32c"] = crc2.clone().into();
                json(200, o)
            }
            _ => json(400, serde_json::json!({"error": {"code": 400, "message": format!("unexpected {range}")}})),
        }
    });
    *url.lock().unwrap() = peer.url.clone();
    let c = client_for(&peer.url, Auth::Anonymous);
    let chunks: Vec<std::io::Result<Bytes>> = data.chunks(1 << 20).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    let stream = futures_util::StreamExt::boxed(futures_util::stream::iter(chunks));
    c.put(&ObjectRef::new("b", "k"), crate::PutPayload::Stream { len, stream }, PutParams::default()).await.unwrap();
    let puts: Vec<(String, usize)> = peer
        .seen()
        .iter()
        .filter(|s| s.method == "PUT")
        .map(|s| (s.headers["content-range"].clone(), s.body.len()))
        .collect();
    let want: Vec<(String, usize)> = [
        ("bytes 0-8388607/*", 8 << 20),
        ("bytes 5242880-8388607/*", 3 << 20),
        ("bytes 8388608-16777215/*", 8 << 20),
        ("bytes */16777316", 0),
        ("bytes 12582912-16777215/*", 4 << 20),
        ("bytes 16777216-16777315/16777316", 100),
    ]
    .iter()
    .map(|(r, n)| (r.to_string(), *n))
    .collect();
    assert_eq!(puts, want);
    // Each resent piece holds the stream's bytes at its offset.
    let resent = peer
        .seen()
        .into_iter()
        .find(|s| s.headers.get("content-range").is_some_and(|r| r.starts_with("bytes 5242880-")))
        .unwrap();
    assert!(resent.body == data[5 << 20..8 << 20], "the tail of the first chunk was sent from the wrong offset");
    assert_eq!(peer.seen().last().unwrap().headers["x-goog-hash"], format!("crc32c={crc}"));
}
