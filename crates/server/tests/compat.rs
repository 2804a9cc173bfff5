//! The server's own edges, over real sockets: a key cannot reach outside `--data DIR`
//! whatever its text (a property over odd keys), the metrics path is never a bucket's
//! object, anonymous access exists only when the configuration asks for it, and an
//! operation the server does not implement answers 501 with its name.

use ferry_server::Faults;
use ferry_testkit::FerryServe;
use proptest::prelude::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Sends one request on a fresh connection and returns (status, body).
fn request(addr: SocketAddr, method: &str, target: &str, host: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// Every byte outside the unreserved set percent-encoded, `/` included: the key arrives
/// exactly as written, `..` and `%2e%2e` segments and NUL bytes too.
fn encode_key(key: &[u8]) -> String {
    key.iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        }
        out.push(p);
    }
    out
}

/// Pieces odd keys are made of: traversal segments plain and encoded (the server decodes
/// the path once, so `%2e%2e` arrives as that text), separators, NUL, non-ASCII.
fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop::sample::select(vec![
        "..",
        "/",
        "%2e%2e",
        "%2f",
        ".",
        "\0",
        "\\",
        "a",
        "é",
        " ",
        "~",
        "//",
        "../",
        "/..",
        ".ferry-tmp",
        "bucket.json",
    ]);
    let long = prop::sample::select(vec![0usize, 0, 0, 340, 1100]);
    (proptest::collection::vec(piece, 1..12), long).prop_map(|(pieces, long)| {
        let mut k: Vec<u8> = pieces.concat().into_bytes();
        k.extend(std::iter::repeat_n(b"../", long / 3).flatten());
        k
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn keys_never_escape_the_data_dir(keys in proptest::collection::vec(key_strategy(), 1..6)) {
        let parent = tempfile::tempdir().unwrap();
        let data = parent.path().join("data");
        let server = FerryServe::new().anonymous().data_dir(&data).start();
        let addr = server.addr();
        prop_assert_eq!(request(addr, "PUT", "/esc", "x", b"").0, 200);
        let mut stored = Vec::new();
        for key in &keys {
            let target = format!("/esc/{}", encode_key(key));
            let (status, body) = request(addr, "PUT", &target, "x", key);
            let valid = !key.is_empty() && key.len() <= 1024 && !key.contains(&0);
            if valid {
                prop_assert_eq!(status, 200, "{:?}: {}", String::from_utf8_lossy(key), body);
                stored.push(key.clone());
            } else {
                // Refused with a clear error, nothing written.
                prop_assert_eq!(status, 400, "{:?}: {}", String::from_utf8_lossy(key), body);
            }
        }
        // Nothing beside the data directory, nothing inside it named by key text.
        let beside: Vec<_> = std::fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        prop_assert_eq!(beside, vec![std::ffi::OsString::from("data")]);
        let root = data.canonicalize().unwrap();
        for p in files_under(&root) {
            let c = p.canonicalize().unwrap();
            prop_assert!(c.starts_with(&root), "{} escaped", c.display());
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            prop_assert!(!name.contains(".."), "{}", p.display());
        }
        // And each stored key reads back as written.
        for key in stored {
            let (status, body) = request(addr, "GET", &format!("/esc/{}", encode_key(&key)), "x", b"");
            prop_assert_eq!(status, 200);
            prop_assert_eq!(body.as_bytes(), key.as_slice());
        }
    }
}

#[test]
fn metrics_path_is_not_a_bucket() {
    let server = FerryServe::new().anonymous().start();
    let addr = server.addr();
    let (status, body) = request(addr, "GET", "/_ferry/metrics", "x", b"");
    assert_eq!(status, 200);
    assert!(body.contains("ferry_"), "{body}");
    // `_ferry` cannot be created as a bucket, so no object ever hides behind the path.
    let (status, body) = request(addr, "PUT", "/_ferry", "x", b"");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("InvalidBucketName"), "{body}");
    let (status, _) = request(addr, "PUT", "/_ferry/metrics", "x", b"overwrite?");
    assert_eq!(status, 404);
    assert!(request(addr, "GET", "/_ferry/metrics", "x", b"").1.contains("ferry_"));
    // Virtual-hosted, the same path is the key `_ferry/metrics` of the bucket.
    assert_eq!(request(addr, "PUT", "/vhb", "x", b"").0, 200);
    let (status, _) = request(addr, "PUT", "/_ferry/metrics", "vhb.localhost", b"a plain object");
    assert_eq!(status, 200);
    let (status, body) = request(addr, "GET", "/_ferry/metrics", "vhb.localhost", b"");
    assert_eq!((status, body.as_str()), (200, "a plain object"));
}

/// `POST /_ferry/seed?value=N` starts the server's draws over: the same seed twice gives
/// the same run of injected faults; anything but a POST with a number is refused and
/// changes nothing; virtual-hosted, the path is an object's key as any other.
#[test]
fn seed_path_starts_the_draws_over() {
    let server =
        FerryServe::new().anonymous().faults(Faults { error_503_rate: 0.5, seed: 1, ..Faults::default() }).start();
    let addr = server.addr();
    // Bucket creation is a request the dice may refuse too.
    while request(addr, "PUT", "/seeded", "x", b"").0 != 200 {}
    while request(addr, "PUT", "/seeded/k", "x", b"v").0 != 200 {}
    let statuses = |seed: &str| -> Vec<u16> {
        let (status, body) = request(addr, "POST", &format!("/_ferry/seed?value={seed}"), "x", b"");
        assert_eq!(status, 204, "{body}");
        (0..40).map(|_| request(addr, "GET", "/seeded/k", "x", b"").0).collect()
    };
    let a = statuses("7");
    assert!(a.contains(&503) && a.contains(&200), "half the GETs should be refused: {a:?}");
    assert_eq!(statuses("7"), a, "the same seed, the same faults");
    assert_ne!(statuses("8"), a, "another seed, other faults");
    for (method, target) in
        [("GET", "/_ferry/seed?value=7"), ("POST", "/_ferry/seed"), ("POST", "/_ferry/seed?value=x")]
    {
        let (status, body) = request(addr, method, target, "x", b"");
        assert_eq!(status, if method == "GET" { 405 } else { 400 }, "{method} {target}: {body}");
    }
}

#[test]
fn anonymous_only_when_asked() {
    // The default configuration signs (the dev keys), it is never open by default.
    let signed = FerryServe::new().start();
    assert!(signed.credentials().is_some());
    let (status, body) = request(signed.addr(), "PUT", "/open", "x", b"");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("AccessDenied"), "{body}");
    assert_eq!(request(signed.addr(), "GET", "/", "x", b"").0, 403);
    let anon = FerryServe::new().anonymous().start();
    assert!(anon.credentials().is_none());
    assert_eq!(request(anon.addr(), "PUT", "/open", "x", b"").0, 200);
    assert_eq!(request(anon.addr(), "GET", "/", "x", b"").0, 200);
}

#[test]
fn unimplemented_operations_are_501_by_name() {
    let server = FerryServe::new().anonymous().start();
    let addr = server.addr();
    assert_eq!(request(addr, "PUT", "/b501", "x", b"").0, 200);
    assert_eq!(request(addr, "PUT", "/b501/k", "x", b"v").0, 200);
    for (method, target, name) in [
        ("GET", "/b501?cors", "GetBucketCors"),
        ("PUT", "/b501?lifecycle", "PutBucketLifecycleConfiguration"),
        ("DELETE", "/b501?policy", "DeleteBucketPolicy"),
        ("GET", "/b501?object-lock", "GetBucketObjectLockConfiguration"),
        ("GET", "/b501/k?tagging", "GetObjectTagging"),
        ("PUT", "/b501/k?retention", "PutObjectRetention"),
        ("POST", "/b501/k?restore", "RestoreObject"),
        ("POST", "/b501", "PostObject"),
    ] {
        let (status, body) = request(addr, method, target, "x", b"");
        assert_eq!(status, 501, "{method} {target}: {body}");
        assert!(body.contains("<Code>NotImplemented</Code>") && body.contains(name), "{method} {target}: {body}");
    }
    // A sub-resource never falls through to a listing or a GET of the object.
    let (_, body) = request(addr, "GET", "/b501?website", "x", b"");
    assert!(!body.contains("ListBucketResult"), "{body}");
}
