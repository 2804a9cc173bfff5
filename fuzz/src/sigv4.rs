//! SigV4 canonicalisation, signing and verification (`ferry_proto::sigv4`): the server
//! verifies every signed request with it (header and presigned-query forms), the client
//! signs and presigns with it. (ferry speaks SigV4 only: an `AWS ` SigV2 header is
//! refused by the same parser, so this target covers that refusal too.)
//!
//! The input is a raw HTTP/1.1 request head, as real clients send it. Properties:
//! - verification never panics, whatever the header, query or dates; the clock is the
//!   request's own `x-amz-date`, so captured requests get past the skew check and a real
//!   client's seed verifies with the key it was signed with;
//! - canonicalising the path or the query twice gives what canonicalising once gives;
//! - whatever the method, path, query and headers, a request signed by `sign_headers`
//!   verifies, and so does a URL made by `presign`; and a signed request whose path
//!   gains a byte no longer verifies.

use ferry_proto::encoding::parse_amz_date;
use ferry_proto::sigv4::{
    canonical_query, canonical_uri, presign, sign_headers, verify, Credentials, SignableRequest, EMPTY_SHA256_HEX,
};
use http::{HeaderMap, HeaderName, HeaderValue};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ACCESS: &str = "ferry";
const SECRET: &str = "ferry-secret";
const SKEW: Duration = Duration::from_secs(15 * 60);

fn lookup(key: &str) -> Option<String> {
    (key == ACCESS).then(|| SECRET.to_owned())
}

struct Head {
    method: String,
    path: String,
    query: String,
    headers: HeaderMap,
}

fn parse(input: &[u8]) -> Option<Head> {
    // A head cut short still parses: its end is supplied.
    let mut bytes = input.to_vec();
    bytes.extend_from_slice(b"\r\n\r\n");
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut fields);
    if !matches!(req.parse(&bytes), Ok(httparse::Status::Complete(_))) {
        return None;
    }
    let target = req.path?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = HeaderMap::new();
    for f in req.headers.iter() {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(f.name.as_bytes()), HeaderValue::from_bytes(f.value))
        else {
            return None;
        };
        headers.append(name, value);
    }
    Some(Head { method: req.method?.to_owned(), path: path.to_owned(), query: query.to_owned(), headers })
}

/// Runs one input through the properties above; panics where one fails.
pub fn check(input: &[u8]) {
    let Some(head) = parse(input) else { return };
    let now = head
        .headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .and_then(|d| parse_amz_date(d.trim()))
        .unwrap_or(UNIX_EPOCH + Duration::from_secs(1_767_225_600));
    let req =
        SignableRequest { method: &head.method, raw_path: &head.path, raw_query: &head.query, headers: &head.headers };
    let _ = verify(&req, &lookup, now, SKEW);

    let uri = canonical_uri(&head.path);
    assert_eq!(canonical_uri(&uri), uri, "canonical_uri is not idempotent on {:?}", head.path);
    let query = canonical_query(&head.query);
    assert_eq!(canonical_query(&query), query, "canonical_query is not idempotent on {:?}", head.query);

    // Sign what was parsed (a request line must start with '/', as the server requires).
    if !head.path.starts_with('/') {
        return;
    }
    let creds = Credentials { access_key: ACCESS.into(), secret_key: SECRET.into() };
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let mut headers = head.headers.clone();
    sign_headers(&head.method, &head.path, &head.query, &mut headers, EMPTY_SHA256_HEX, &creds, "us-east-1", when);
    let signed =
        SignableRequest { method: &head.method, raw_path: &head.path, raw_query: &head.query, headers: &headers };
    if let Err(e) = verify(&signed, &lookup, when, SKEW) {
        panic!("a request signed by sign_headers does not verify: {e:?}");
    }
    let longer = format!("{}x", head.path);
    let tampered = SignableRequest { raw_path: &longer, ..signed };
    assert!(verify(&tampered, &lookup, when, SKEW).is_err(), "a changed path still verifies");

    let host = head.headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1:9000");
    let host = host.trim();
    if HeaderValue::from_str(host).is_err() {
        return;
    }
    let q = presign(&head.method, &head.path, host, &head.query, &creds, "us-east-1", when, Duration::from_secs(600));
    let mut h = HeaderMap::new();
    h.insert(http::header::HOST, HeaderValue::from_str(host).expect("checked above"));
    let presigned = SignableRequest { method: &head.method, raw_path: &head.path, raw_query: &q, headers: &h };
    if let Err(e) = verify(&presigned, &lookup, when + Duration::from_secs(1), SKEW) {
        panic!("a URL made by presign does not verify: {e:?} (query {q:?})");
    }
}
