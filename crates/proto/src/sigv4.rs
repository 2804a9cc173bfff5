//! AWS Signature Version 4 for S3: server-side verification and client-side signing.
//!
//! Design note: one canonicaliser serves both directions, so a request we
//! sign is byte-for-byte the request we would verify (the round-trip property
//! tests hold us to that). Spec:
//! <https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html>
//! and <https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html>.
//!
//! Data flow of [`verify`]:
//!
//! ```text
//!  Authorization header ─┐                      ┌─> secret via lookup(access key)
//!  or X-Amz-* query      ├─> parse credential ──┤
//!                        │                      └─> check date / skew / expiry
//!  method, path, query,  │
//!  signed headers, ──────┴─> canonical request ─> string to sign ─> HMAC ─> ct_eq
//!  payload hash                                                              │
//!                                        SigningContext (seed for aws-chunked) <┘
//! ```
//!
//! S3-specific canonicalisation choices (S3 differs from other services here):
//! - the canonical URI is the raw path percent-decoded once and re-encoded
//!   with `/` kept: S3 does not double-encode;
//! - the canonical query decodes each pair once (`+` stays `+`, so it signs
//!   as `%2B`) and re-encodes both sides with `/` encoded;
//! - the payload hash is `x-amz-content-sha256` verbatim (which may be
//!   `UNSIGNED-PAYLOAD` or `STREAMING-...`), or `UNSIGNED-PAYLOAD` when absent.
//!
//! Verification cost is one SHA-256 of the canonical request and one HMAC, plus
//! four HMAC-SHA256 for the signing key when the thread has not derived the same
//! key already (`signing_key` keeps the last one per thread).

use std::time::{Duration, SystemTime};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::encoding::{
    amz_date, parse_amz_date, parse_http_date, parse_query, percent_decode_bytes, uri_encode, uri_encode_bytes,
};

type HmacSha256 = Hmac<Sha256>;

/// The only algorithm S3 accepts for SigV4.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// Payload hash marker for bodies that are not signed.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// Hex SHA-256 of the empty string.
pub const EMPTY_SHA256_HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// How far in the future a presigned URL's X-Amz-Date may be. S3 allows 15 minutes.
pub const PRESIGNED_MAX_FUTURE: Duration = Duration::from_secs(15 * 60);
/// Longest X-Amz-Expires S3 accepts: 7 days (sigv4-query-string-auth).
pub const PRESIGNED_MAX_EXPIRES: Duration = Duration::from_secs(7 * 24 * 3600);

/// An access key pair.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("access_key", &self.access_key).field("secret_key", &"<redacted>").finish()
    }
}

/// What a verified request leaves behind: enough to verify aws-chunked chunk
/// signatures that chain off the request signature.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningContext {
    pub access_key: String,
    /// The request's amz date, `20130524T000000Z`.
    pub timestamp: String,
    /// `20130524/us-east-1/s3/aws4_request`
    pub scope: String,
    pub signing_key: [u8; 32],
    /// Lower-case hex signature of the request itself.
    pub seed_signature: String,
    pub region: String,
}

impl std::fmt::Debug for SigningContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningContext")
            .field("access_key", &self.access_key)
            .field("timestamp", &self.timestamp)
            .field("scope", &self.scope)
            .field("signing_key", &"<redacted>")
            .field("seed_signature", &self.seed_signature)
            .field("region", &self.region)
            .finish()
    }
}

impl SigningContext {
    /// HMAC of `string_to_sign` with the signing key, lower-case hex.
    pub fn sign(&self, string_to_sign: &[u8]) -> String {
        hex::encode(hmac(&self.signing_key, string_to_sign))
    }
}

/// Why a request failed authentication. Maps to an S3 error code and status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthErrorKind {
    AccessDenied,
    InvalidAccessKeyId,
    SignatureDoesNotMatch,
    RequestTimeTooSkewed,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    ExpiredPresignedRequest,
    MissingSecurityHeader,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", self.code())]
pub struct AuthError {
    pub kind: AuthErrorKind,
    pub message: String,
}

impl AuthError {
    pub fn new(kind: AuthErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    /// The S3 error code for the `<Code>` element.
    pub fn code(&self) -> &'static str {
        match self.kind {
            AuthErrorKind::AccessDenied => "AccessDenied",
            AuthErrorKind::InvalidAccessKeyId => "InvalidAccessKeyId",
            AuthErrorKind::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            AuthErrorKind::RequestTimeTooSkewed => "RequestTimeTooSkewed",
            AuthErrorKind::AuthorizationHeaderMalformed => "AuthorizationHeaderMalformed",
            AuthErrorKind::AuthorizationQueryParametersError => "AuthorizationQueryParametersError",
            AuthErrorKind::ExpiredPresignedRequest => "AccessDenied",
            AuthErrorKind::MissingSecurityHeader => "AccessDenied",
        }
    }

    /// HTTP status S3 answers with.
    pub fn status(&self) -> u16 {
        match self.kind {
            AuthErrorKind::AuthorizationHeaderMalformed | AuthErrorKind::AuthorizationQueryParametersError => 400,
            _ => 403,
        }
    }
}

fn err(kind: AuthErrorKind, message: impl Into<String>) -> AuthError {
    AuthError::new(kind, message)
}

/// A request as seen by the signer/verifier.
#[derive(Clone, Copy, Debug)]
pub struct SignableRequest<'a> {
    pub method: &'a str,
    /// Path as on the request line, still %-encoded, without the query.
    pub raw_path: &'a str,
    /// Everything after `?`, may be empty.
    pub raw_query: &'a str,
    pub headers: &'a http::HeaderMap,
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(data);
    m.finalize().into_bytes().into()
}

/// `kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")`
///
/// Four HMACs, about half the SHA-256 work of signing or verifying a GET, and the same
/// for a whole day of one credential's requests: each thread keeps the last key it
/// derived with what it was derived from, and derives again only when any of the four
/// differs. A client signs with one credential, a server mostly verifies one, so the
/// derivation runs about once per thread per day.
pub fn signing_key(secret: &str, date_yyyymmdd: &str, region: &str, service: &str) -> [u8; 32] {
    thread_local! {
        static LAST: std::cell::RefCell<Option<KeptKey>> = const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some(kept) = last.as_ref() {
            if kept.inputs == [secret, date_yyyymmdd, region, service] {
                return kept.key;
            }
        }
        let key = derive_signing_key(secret, date_yyyymmdd, region, service);
        let inputs = [secret, date_yyyymmdd, region, service].map(str::to_owned);
        *last = Some(KeptKey { inputs, key });
        key
    })
}

/// A thread's last signing key and the secret, date, region and service it came from.
struct KeptKey {
    inputs: [String; 4],
    key: [u8; 32],
}

fn derive_signing_key(secret: &str, date_yyyymmdd: &str, region: &str, service: &str) -> [u8; 32] {
    let k_secret = format!("AWS4{secret}");
    let k_date = hmac(k_secret.as_bytes(), date_yyyymmdd.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

/// True if the request carries SigV4 material (header or query form); false
/// for anonymous requests. Lets the server pick between `verify` and its
/// anonymous-access policy.
pub fn has_auth(req: &SignableRequest) -> bool {
    req.headers.contains_key(http::header::AUTHORIZATION)
        || parse_query(req.raw_query).iter().any(|(k, _)| k == "X-Amz-Algorithm" || k == "X-Amz-Credential")
}

/// The canonical URI: decode once, encode once with `/` kept.
pub fn canonical_uri(raw_path: &str) -> String {
    if raw_path.is_empty() {
        return "/".to_owned();
    }
    let decoded = percent_decode_bytes(raw_path);
    uri_encode_bytes(&decoded, false)
}

/// The canonical query string from decoded pairs, excluding any key for which `skip` is true.
fn canonical_query_from(pairs: &[(String, String)], skip: impl Fn(&str) -> bool) -> String {
    let mut enc: Vec<(String, String)> =
        pairs.iter().filter(|(k, _)| !skip(k)).map(|(k, v)| (uri_encode(k, true), uri_encode(v, true))).collect();
    enc.sort();
    let mut out = String::with_capacity(enc.iter().map(|(k, v)| k.len() + v.len() + 2).sum());
    for (i, (k, v)) in enc.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}

/// The canonical query string of a raw query (nothing dropped).
pub fn canonical_query(raw_query: &str) -> String {
    canonical_query_from(&parse_query(raw_query), |_| false)
}

/// Trim and collapse inner runs of spaces into one, appending to `out`.
fn push_header_value(out: &mut Vec<u8>, v: &[u8]) {
    let v = v.trim_ascii();
    let mut prev_space = false;
    for &b in v {
        if b == b' ' || b == b'\t' {
            if !prev_space {
                out.push(b' ');
            }
            prev_space = true;
        } else {
            out.push(b);
            prev_space = false;
        }
    }
}

/// Builds the canonical request bytes.
fn canonical_request(
    method: &str,
    raw_path: &str,
    canonical_query: &str,
    headers: &http::HeaderMap,
    signed_headers: &[&str],
    signed_headers_line: &str,
    payload_hash: &str,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + raw_path.len() + canonical_query.len());
    out.extend_from_slice(method.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(canonical_uri(raw_path).as_bytes());
    out.push(b'\n');
    out.extend_from_slice(canonical_query.as_bytes());
    out.push(b'\n');
    for name in signed_headers {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        for (i, v) in headers.get_all(*name).iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_header_value(&mut out, v.as_bytes());
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(signed_headers_line.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(payload_hash.as_bytes());
    out
}

fn string_to_sign(timestamp: &str, scope: &str, canonical_request: &[u8]) -> String {
    format!("{ALGORITHM}\n{timestamp}\n{scope}\n{}", hex::encode(Sha256::digest(canonical_request)))
}

/// Parsed `Credential=AK/date/region/service/aws4_request`.
struct Credential<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
}

fn parse_credential(s: &str) -> Option<Credential<'_>> {
    let mut it = s.rsplitn(5, '/');
    let term = it.next()?;
    let service = it.next()?;
    let region = it.next()?;
    let date = it.next()?;
    let access_key = it.next()?;
    if term != "aws4_request" || access_key.is_empty() || date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Credential { access_key, date, region, service })
}

/// Fields of `Authorization: AWS4-HMAC-SHA256 Credential=.., SignedHeaders=.., Signature=..`.
struct AuthHeader<'a> {
    credential: &'a str,
    signed_headers: &'a str,
    signature: &'a str,
}

fn parse_auth_header(v: &str) -> Result<AuthHeader<'_>, AuthError> {
    let malformed = |m: &str| err(AuthErrorKind::AuthorizationHeaderMalformed, m.to_owned());
    let v = v.trim();
    let rest = match v.split_once(|c: char| c.is_ascii_whitespace()) {
        Some((alg, rest)) if alg == ALGORITHM => rest,
        Some(("AWS", _)) => {
            return Err(malformed(
                "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
            ))
        }
        _ => return Err(malformed("The authorization header is malformed; the algorithm must be AWS4-HMAC-SHA256.")),
    };
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some((k, val)) = part.split_once('=') else {
            return Err(malformed(&format!(
                "The authorization header is malformed; '{part}' is not a key=value pair."
            )));
        };
        match k.trim() {
            "Credential" => credential = Some(val.trim()),
            "SignedHeaders" => signed_headers = Some(val.trim()),
            "Signature" => signature = Some(val.trim()),
            _ => {}
        }
    }
    match (credential, signed_headers, signature) {
        (Some(credential), Some(signed_headers), Some(signature)) => {
            Ok(AuthHeader { credential, signed_headers, signature })
        }
        _ => Err(malformed(
            "The authorization header is malformed; it must contain Credential, SignedHeaders and Signature.",
        )),
    }
}

fn header_str<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

fn abs_diff(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b).unwrap_or_else(|e| e.duration())
}

fn signatures_equal(computed_hex: &str, provided: &str) -> bool {
    let provided = provided.to_ascii_lowercase();
    computed_hex.len() == provided.len() && bool::from(computed_hex.as_bytes().ct_eq(provided.as_bytes()))
}

fn mismatch() -> AuthError {
    err(
        AuthErrorKind::SignatureDoesNotMatch,
        "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
    )
}

/// Verifies a SigV4-signed request (header or presigned-query form).
///
/// `lookup` maps an access key to its secret. `max_skew` bounds the
/// difference between `now` and the request date for the header form.
pub fn verify(
    req: &SignableRequest,
    lookup: &dyn Fn(&str) -> Option<String>,
    now: SystemTime,
    max_skew: Duration,
) -> Result<SigningContext, AuthError> {
    if let Some(auth) = req.headers.get(http::header::AUTHORIZATION) {
        let auth = auth
            .to_str()
            .map_err(|_| err(AuthErrorKind::AuthorizationHeaderMalformed, "The authorization header is not ASCII."))?;
        return verify_header(req, auth, lookup, now, max_skew);
    }
    let pairs = parse_query(req.raw_query);
    if pairs.iter().any(|(k, _)| k == "X-Amz-Algorithm" || k == "X-Amz-Credential" || k == "X-Amz-Signature") {
        return verify_presigned(req, &pairs, lookup, now);
    }
    Err(err(AuthErrorKind::AccessDenied, "Access Denied"))
}

fn split_signed_headers(s: &str) -> Vec<String> {
    s.split(';').filter(|h| !h.is_empty()).map(|h| h.trim().to_ascii_lowercase()).collect()
}

fn verify_header(
    req: &SignableRequest,
    auth: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    now: SystemTime,
    max_skew: Duration,
) -> Result<SigningContext, AuthError> {
    let ah = parse_auth_header(auth)?;
    let cred = parse_credential(ah.credential).ok_or_else(|| {
        err(
            AuthErrorKind::AuthorizationHeaderMalformed,
            format!("The authorization header is malformed; the Credential is mal-formed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\"; got \"{}\".", ah.credential),
        )
    })?;
    let secret = lookup(cred.access_key).ok_or_else(|| {
        err(AuthErrorKind::InvalidAccessKeyId, "The AWS Access Key Id you provided does not exist in our records.")
    })?;

    // Request time: x-amz-date, else Date (either format).
    let (request_time, timestamp) = if let Some(d) = header_str(req.headers, "x-amz-date") {
        let t = parse_amz_date(d).ok_or_else(|| {
            err(
                AuthErrorKind::AccessDenied,
                format!("AWS authentication requires a valid Date or x-amz-date header; got \"{d}\"."),
            )
        })?;
        (t, d.to_owned())
    } else if let Some(d) = header_str(req.headers, "date") {
        let t = parse_http_date(d).or_else(|| parse_amz_date(d)).ok_or_else(|| {
            err(
                AuthErrorKind::AccessDenied,
                format!("AWS authentication requires a valid Date or x-amz-date header; got \"{d}\"."),
            )
        })?;
        (t, amz_date(t))
    } else {
        return Err(err(AuthErrorKind::AccessDenied, "AWS authentication requires a valid Date or x-amz-date header"));
    };
    if &timestamp[..8] != cred.date {
        return Err(err(
            AuthErrorKind::AuthorizationHeaderMalformed,
            format!(
                "The authorization header is malformed; Invalid credential date \"{}\". This date is not the same as X-Amz-Date: \"{}\".",
                cred.date,
                &timestamp[..8]
            ),
        ));
    }
    if abs_diff(now, request_time) > max_skew {
        return Err(err(
            AuthErrorKind::RequestTimeTooSkewed,
            "The difference between the request time and the current time is too large.",
        ));
    }

    let payload_hash = header_str(req.headers, "x-amz-content-sha256").unwrap_or(UNSIGNED_PAYLOAD);
    let signed = split_signed_headers(ah.signed_headers);
    let signed_refs: Vec<&str> = signed.iter().map(String::as_str).collect();
    let canon_q = canonical_query_from(&parse_query(req.raw_query), |_| false);
    let creq = canonical_request(
        req.method,
        req.raw_path,
        &canon_q,
        req.headers,
        &signed_refs,
        ah.signed_headers,
        payload_hash,
    );
    finish_verify(&secret, cred, timestamp, &creq, ah.signature)
}

fn finish_verify(
    secret: &str,
    cred: Credential<'_>,
    timestamp: String,
    creq: &[u8],
    provided_signature: &str,
) -> Result<SigningContext, AuthError> {
    let scope = format!("{}/{}/{}/aws4_request", cred.date, cred.region, cred.service);
    let sts = string_to_sign(&timestamp, &scope, creq);
    let key = signing_key(secret, cred.date, cred.region, cred.service);
    let computed = hex::encode(hmac(&key, sts.as_bytes()));
    if !signatures_equal(&computed, provided_signature) {
        return Err(mismatch());
    }
    Ok(SigningContext {
        access_key: cred.access_key.to_owned(),
        timestamp,
        scope,
        signing_key: key,
        seed_signature: computed,
        region: cred.region.to_owned(),
    })
}

fn verify_presigned(
    req: &SignableRequest,
    pairs: &[(String, String)],
    lookup: &dyn Fn(&str) -> Option<String>,
    now: SystemTime,
) -> Result<SigningContext, AuthError> {
    let qerr = |m: String| err(AuthErrorKind::AuthorizationQueryParametersError, m);
    let get = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let required = |name: &str| {
        get(name).ok_or_else(|| {
            qerr(
                "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
                    .to_owned(),
            )
        })
    };
    let algorithm = required("X-Amz-Algorithm")?;
    if algorithm != ALGORITHM {
        return Err(qerr("X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"".to_owned()));
    }
    let credential = required("X-Amz-Credential")?;
    let date = required("X-Amz-Date")?;
    let expires = required("X-Amz-Expires")?;
    let signed_headers_line = required("X-Amz-SignedHeaders")?;
    let signature = required("X-Amz-Signature")?;

    let cred = parse_credential(credential).ok_or_else(|| {
        qerr("Error parsing the X-Amz-Credential parameter; the Credential is mal-formed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".".to_owned())
    })?;
    let t = parse_amz_date(date).ok_or_else(|| {
        qerr(format!("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"; got \"{date}\"."))
    })?;
    if &date[..8] != cred.date {
        return Err(qerr(format!(
            "Error parsing the X-Amz-Credential parameter; incorrect date. This should be the same as X-Amz-Date: \"{}\".",
            &date[..8]
        )));
    }
    // S3's own messages, word for word (clients and suites compare them).
    let expires_secs: u64 = match expires.parse::<i64>() {
        Ok(n) if n < 0 => return Err(qerr("X-Amz-Expires must be non-negative".to_owned())),
        Ok(n) => n as u64,
        Err(_) => return Err(qerr("X-Amz-Expires should be a number".to_owned())),
    };
    if expires_secs > PRESIGNED_MAX_EXPIRES.as_secs() {
        return Err(qerr("X-Amz-Expires must be less than a week (in seconds); that is, the given X-Amz-Expires must be less than 604800 seconds".to_owned()));
    }
    let secret = lookup(cred.access_key).ok_or_else(|| {
        err(AuthErrorKind::InvalidAccessKeyId, "The AWS Access Key Id you provided does not exist in our records.")
    })?;
    if t > now && t.duration_since(now).unwrap_or_default() > PRESIGNED_MAX_FUTURE {
        return Err(err(AuthErrorKind::AccessDenied, "Request is not valid yet"));
    }
    if now > t + Duration::from_secs(expires_secs) {
        return Err(err(AuthErrorKind::ExpiredPresignedRequest, "Request has expired"));
    }

    let payload_hash = get("X-Amz-Content-Sha256").unwrap_or(UNSIGNED_PAYLOAD);
    let signed = split_signed_headers(signed_headers_line);
    let signed_refs: Vec<&str> = signed.iter().map(String::as_str).collect();
    let canon_q = canonical_query_from(pairs, |k| k == "X-Amz-Signature");
    let creq = canonical_request(
        req.method,
        req.raw_path,
        &canon_q,
        req.headers,
        &signed_refs,
        signed_headers_line,
        payload_hash,
    );
    finish_verify(&secret, cred, date.to_owned(), &creq, signature)
}

/// Headers a client never signs: hop-by-hop ones a proxy may rewrite, and
/// ones SDKs leave out (botocore excludes `expect`, `user-agent`, `x-amzn-trace-id`).
fn is_unsignable(name: &str) -> bool {
    matches!(
        name,
        "authorization"
            | "user-agent"
            | "expect"
            | "connection"
            | "keep-alive"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "x-amzn-trace-id"
    )
}

/// Signs a request in the header form: sets `x-amz-date`,
/// `x-amz-content-sha256` and `Authorization`, signing every header present
/// except hop-by-hop ones. The caller must already have set `host`.
#[allow(clippy::too_many_arguments)]
pub fn sign_headers(
    method: &str,
    raw_path: &str,
    raw_query: &str,
    headers: &mut http::HeaderMap,
    payload_sha256_hex: &str,
    creds: &Credentials,
    region: &str,
    now: SystemTime,
) {
    sign_headers_for(method, raw_path, raw_query, headers, payload_sha256_hex, creds, region, "s3", now)
}

/// [`sign_headers`] for another service's scope (`sts` for STS AssumeRole).
#[allow(clippy::too_many_arguments)]
pub fn sign_headers_for(
    method: &str,
    raw_path: &str,
    raw_query: &str,
    headers: &mut http::HeaderMap,
    payload_sha256_hex: &str,
    creds: &Credentials,
    region: &str,
    service: &str,
    now: SystemTime,
) {
    let timestamp = amz_date(now);
    headers.remove(http::header::AUTHORIZATION);
    headers.insert("x-amz-date", http::HeaderValue::from_str(&timestamp).expect("amz date is ASCII"));
    headers.insert(
        "x-amz-content-sha256",
        http::HeaderValue::from_str(payload_sha256_hex).expect("payload hash must be a valid header value"),
    );
    let mut names: Vec<&str> = headers.keys().map(|k| k.as_str()).filter(|n| !is_unsignable(n)).collect();
    names.sort_unstable();
    names.dedup();
    let signed_line = names.join(";");
    let date = &timestamp[..8];
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let creq = canonical_request(
        method,
        raw_path,
        &canonical_query(raw_query),
        headers,
        &names,
        &signed_line,
        payload_sha256_hex,
    );
    let sts = string_to_sign(&timestamp, &scope, &creq);
    let sig = hex::encode(hmac(&signing_key(&creds.secret_key, date, region, service), sts.as_bytes()));
    let auth =
        format!("{ALGORITHM} Credential={}/{scope}, SignedHeaders={signed_line}, Signature={sig}", creds.access_key);
    headers.insert(http::header::AUTHORIZATION, http::HeaderValue::from_str(&auth).expect("authorization is ASCII"));
}

/// Presigns a request (query form, payload `UNSIGNED-PAYLOAD`, only `host`
/// signed). Returns the complete query string to append after `?`: the
/// canonicalised `raw_query_extra` plus the `X-Amz-*` parameters, ending with
/// `X-Amz-Signature`.
#[allow(clippy::too_many_arguments)]
pub fn presign(
    method: &str,
    raw_path: &str,
    host: &str,
    raw_query_extra: &str,
    creds: &Credentials,
    region: &str,
    now: SystemTime,
    expires: Duration,
) -> String {
    let timestamp = amz_date(now);
    let date = &timestamp[..8];
    let scope = format!("{date}/{region}/s3/aws4_request");
    let mut pairs = parse_query(raw_query_extra);
    // The parameters set below replace any the caller passed; others, such as
    // X-Amz-Security-Token for temporary keys, are kept and signed. A caller's
    // X-Amz-Content-Sha256 goes too: a verifier takes it as the payload hash,
    // and a presigned URL always signs UNSIGNED-PAYLOAD.
    const OWN: [&str; 7] = [
        "X-Amz-Algorithm",
        "X-Amz-Content-Sha256",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    ];
    pairs.retain(|(k, _)| !OWN.contains(&k.as_str()));
    pairs.push(("X-Amz-Algorithm".into(), ALGORITHM.into()));
    pairs.push(("X-Amz-Credential".into(), format!("{}/{scope}", creds.access_key)));
    pairs.push(("X-Amz-Date".into(), timestamp.clone()));
    pairs.push(("X-Amz-Expires".into(), expires.as_secs().to_string()));
    pairs.push(("X-Amz-SignedHeaders".into(), "host".into()));
    let canon_q = canonical_query_from(&pairs, |_| false);
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::HOST, http::HeaderValue::from_str(host).expect("host must be a valid header value"));
    let creq = canonical_request(method, raw_path, &canon_q, &headers, &["host"], "host", UNSIGNED_PAYLOAD);
    let sts = string_to_sign(&timestamp, &scope, &creq);
    let sig = hex::encode(hmac(&signing_key(&creds.secret_key, date, region, "s3"), sts.as_bytes()));
    format!("{canon_q}&X-Amz-Signature={sig}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::UNIX_EPOCH;

    const AK: &str = "AKIAIOSFODNN7EXAMPLE";
    const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const T_2013: u64 = 1_369_353_600; // 2013-05-24T00:00:00Z
    const SKEW: Duration = Duration::from_secs(15 * 60);

    fn t0() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(T_2013)
    }
    fn lookup(ak: &str) -> Option<String> {
        (ak == AK).then(|| SK.to_owned())
    }
    fn creds() -> Credentials {
        Credentials { access_key: AK.into(), secret_key: SK.into() }
    }
    fn hm(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), http::HeaderValue::from_str(v).unwrap());
        }
        h
    }
    fn auth(signed: &str, sig: &str) -> String {
        format!("AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed},Signature={sig}")
    }

    /// AWS example: GET Object with Range (sig-v4-header-based-auth).
    fn get_object_example() -> http::HeaderMap {
        hm(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256_HEX),
            ("x-amz-date", "20130524T000000Z"),
            (
                "authorization",
                &auth(
                    "host;range;x-amz-content-sha256;x-amz-date",
                    "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                ),
            ),
        ])
    }

    #[test]
    fn aws_example_get_object() {
        let h = get_object_example();
        let req = SignableRequest { method: "GET", raw_path: "/test.txt", raw_query: "", headers: &h };
        let ctx = verify(&req, &lookup, t0(), SKEW).unwrap();
        assert_eq!(ctx.seed_signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
        assert_eq!(ctx.scope, "20130524/us-east-1/s3/aws4_request");
        assert_eq!(ctx.region, "us-east-1");
        assert_eq!(ctx.timestamp, "20130524T000000Z");
    }

    #[test]
    fn aws_example_put_object() {
        let h = hm(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("date", "Fri, 24 May 2013 00:00:00 GMT"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("x-amz-content-sha256", "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"),
            ("x-amz-date", "20130524T000000Z"),
            (
                "authorization",
                &auth(
                    "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
                    "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
                ),
            ),
        ]);
        let req = SignableRequest { method: "PUT", raw_path: "/test%24file.text", raw_query: "", headers: &h };
        verify(&req, &lookup, t0(), SKEW).unwrap();
    }

    #[test]
    fn aws_example_get_lifecycle_and_list() {
        let mk = |sig: &str| {
            hm(&[
                ("host", "examplebucket.s3.amazonaws.com"),
                ("x-amz-content-sha256", EMPTY_SHA256_HEX),
                ("x-amz-date", "20130524T000000Z"),
                ("authorization", &auth("host;x-amz-content-sha256;x-amz-date", sig)),
            ])
        };
        let h = mk("fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
        let req = SignableRequest { method: "GET", raw_path: "/", raw_query: "lifecycle", headers: &h };
        verify(&req, &lookup, t0(), SKEW).unwrap();
        let h = mk("34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
        let req = SignableRequest { method: "GET", raw_path: "/", raw_query: "max-keys=2&prefix=J", headers: &h };
        verify(&req, &lookup, t0(), SKEW).unwrap();
    }

    #[test]
    fn aws_example_presigned() {
        let h = hm(&[("host", "examplebucket.s3.amazonaws.com")]);
        let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
        let req = SignableRequest { method: "GET", raw_path: "/test.txt", raw_query: q, headers: &h };
        let ctx = verify(&req, &lookup, t0() + Duration::from_secs(3600), SKEW).unwrap();
        assert_eq!(ctx.seed_signature, "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
        // Our presigner reproduces the example.
        let ours = presign(
            "GET",
            "/test.txt",
            "examplebucket.s3.amazonaws.com",
            "",
            &creds(),
            "us-east-1",
            t0(),
            Duration::from_secs(86400),
        );
        assert_eq!(ours, q);
        // Expired one second after X-Amz-Date + X-Amz-Expires.
        let e = verify(&req, &lookup, t0() + Duration::from_secs(86401), SKEW).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::ExpiredPresignedRequest);
        assert_eq!((e.code(), e.status()), ("AccessDenied", 403));
        // Not yet valid.
        let e = verify(&req, &lookup, t0() - Duration::from_secs(3600), SKEW).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::AccessDenied);
        // Missing parameter.
        let q2 = q.replace("&X-Amz-Expires=86400", "");
        let req = SignableRequest { method: "GET", raw_path: "/test.txt", raw_query: &q2, headers: &h };
        let e = verify(&req, &lookup, t0(), SKEW).unwrap_err();
        assert_eq!((e.kind, e.status()), (AuthErrorKind::AuthorizationQueryParametersError, 400));
    }

    /// Temporary keys' session token rides in the presigned query, signed with it.
    #[test]
    fn presigned_query_keeps_the_session_token() {
        let q = presign(
            "GET",
            "/test.txt",
            "examplebucket.s3.amazonaws.com",
            "X-Amz-Security-Token=tok%2Fen&X-Amz-Date=stale",
            &creds(),
            "us-east-1",
            t0(),
            Duration::from_secs(60),
        );
        assert!(q.contains("X-Amz-Security-Token=tok%2Fen"), "{q}");
        assert_eq!(q.matches("X-Amz-Date=").count(), 1, "{q}");
        let h = hm(&[("host", "examplebucket.s3.amazonaws.com")]);
        let req = SignableRequest { method: "GET", raw_path: "/test.txt", raw_query: &q, headers: &h };
        verify(&req, &lookup, t0(), SKEW).unwrap();
        let tampered = q.replace("tok%2Fen", "tok%2Fem");
        let req = SignableRequest { raw_query: &tampered, ..req };
        assert_eq!(verify(&req, &lookup, t0(), SKEW).unwrap_err().kind, AuthErrorKind::SignatureDoesNotMatch);
    }

    /// Found by the `sigv4` fuzz target: a caller's query that already names a
    /// payload hash made a presigned URL that its own verifier refused.
    #[test]
    fn presign_replaces_a_payload_hash_in_the_callers_query() {
        let q = presign(
            "GET",
            "/test.txt",
            "examplebucket.s3.amazonaws.com",
            "X-Amz-Content-Sha256=202equest&x=1",
            &creds(),
            "us-east-1",
            t0(),
            Duration::from_secs(60),
        );
        assert!(!q.contains("X-Amz-Content-Sha256"), "{q}");
        assert!(q.contains("x=1"), "{q}");
        let h = hm(&[("host", "examplebucket.s3.amazonaws.com")]);
        let req = SignableRequest { method: "GET", raw_path: "/test.txt", raw_query: &q, headers: &h };
        verify(&req, &lookup, t0(), SKEW).unwrap();
    }

    #[test]
    fn sign_headers_reproduces_aws_example() {
        let mut h = hm(&[("host", "examplebucket.s3.amazonaws.com"), ("range", "bytes=0-9"), ("user-agent", "x")]);
        sign_headers("GET", "/test.txt", "", &mut h, EMPTY_SHA256_HEX, &creds(), "us-east-1", t0());
        let a = h.get("authorization").unwrap().to_str().unwrap();
        assert_eq!(
            a,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    fn kind_of(
        h: &http::HeaderMap,
        method: &str,
        path: &str,
        query: &str,
        now: SystemTime,
    ) -> Result<(), AuthErrorKind> {
        let req = SignableRequest { method, raw_path: path, raw_query: query, headers: h };
        verify(&req, &lookup, now, SKEW).map(|_| ()).map_err(|e| e.kind)
    }

    #[test]
    fn tampering_is_detected() {
        let h = get_object_example();
        assert_eq!(kind_of(&h, "HEAD", "/test.txt", "", t0()), Err(AuthErrorKind::SignatureDoesNotMatch));
        assert_eq!(kind_of(&h, "GET", "/test2.txt", "", t0()), Err(AuthErrorKind::SignatureDoesNotMatch));
        assert_eq!(kind_of(&h, "GET", "/test.txt", "a=b", t0()), Err(AuthErrorKind::SignatureDoesNotMatch));
        let mut h2 = h.clone();
        h2.insert("range", "bytes=0-10".parse().unwrap());
        assert_eq!(kind_of(&h2, "GET", "/test.txt", "", t0()), Err(AuthErrorKind::SignatureDoesNotMatch));
        // Unsigned headers may change freely.
        h2 = h.clone();
        h2.insert("x-other", "1".parse().unwrap());
        assert_eq!(kind_of(&h2, "GET", "/test.txt", "", t0()), Ok(()));
        // Wrong secret.
        let req = SignableRequest { method: "GET", raw_path: "/test.txt", raw_query: "", headers: &h };
        let e = verify(&req, &|_| Some("nope".into()), t0(), SKEW).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::SignatureDoesNotMatch);
        assert_eq!(e.code(), "SignatureDoesNotMatch");
        // Unknown key.
        let e = verify(&req, &|_| None, t0(), SKEW).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::InvalidAccessKeyId);
        // Skew, both directions.
        assert_eq!(
            kind_of(&h, "GET", "/test.txt", "", t0() + Duration::from_secs(901)),
            Err(AuthErrorKind::RequestTimeTooSkewed)
        );
        assert_eq!(
            kind_of(&h, "GET", "/test.txt", "", t0() - Duration::from_secs(901)),
            Err(AuthErrorKind::RequestTimeTooSkewed)
        );
        assert_eq!(kind_of(&h, "GET", "/test.txt", "", t0() + Duration::from_secs(899)), Ok(()));
        // Anonymous.
        let empty = http::HeaderMap::new();
        assert_eq!(kind_of(&empty, "GET", "/test.txt", "", t0()), Err(AuthErrorKind::AccessDenied));
    }

    #[test]
    fn malformed_headers() {
        for bad in [
            "AWS AKIA:abc",
            "AWS4-HMAC-SHA256 Credential=AKIA/20130524/us-east-1/s3/aws4_request",
            "AWS4-HMAC-SHA256 Credential=AKIA/2013/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=00",
            "AWS4-HMAC-SHA256 Credential=AKIA/20130524/us-east-1/s3/aws5_request,SignedHeaders=host,Signature=00",
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130525/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=00",
            "AWS4-HMAC-SHA256 garbage",
        ] {
            let h = hm(&[("host", "h"), ("x-amz-date", "20130524T000000Z"), ("authorization", bad)]);
            let e = kind_of(&h, "GET", "/", "", t0()).unwrap_err();
            assert_eq!(e, AuthErrorKind::AuthorizationHeaderMalformed, "{bad}");
        }
        let h = hm(&[("host", "h"), ("authorization", &auth("host", "00"))]);
        assert_eq!(kind_of(&h, "GET", "/", "", t0()), Err(AuthErrorKind::AccessDenied));
    }

    #[test]
    fn header_values_are_trimmed_and_collapsed() {
        let mut h = hm(&[("host", "h"), ("x-amz-meta-a", "  a   b  c ")]);
        sign_headers("PUT", "/b/k", "", &mut h, UNSIGNED_PAYLOAD, &creds(), "r", t0());
        h.insert("x-amz-meta-a", "a b c".parse().unwrap());
        assert_eq!(kind_of(&h, "PUT", "/b/k", "", t0()), Ok(()));
        h.insert("x-amz-meta-a", "a bc".parse().unwrap());
        assert_eq!(kind_of(&h, "PUT", "/b/k", "", t0()), Err(AuthErrorKind::SignatureDoesNotMatch));
    }

    #[test]
    fn signing_key_is_hmac_chain() {
        // From the AWS SigV4 documentation (iam service example).
        let k = signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam");
        assert_eq!(hex::encode(k), "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
    }

    #[test]
    fn the_kept_signing_key_follows_each_of_its_inputs() {
        // One thread, inputs changed one at a time and back: every answer is the
        // derivation of its own inputs, never the key kept from the call before.
        let base = ("secret-a", "20260101", "us-east-1", "s3");
        let calls = [
            base,
            ("secret-b", "20260101", "us-east-1", "s3"),
            base,
            ("secret-a", "20260102", "us-east-1", "s3"),
            ("secret-a", "20260102", "eu-west-1", "s3"),
            ("secret-a", "20260102", "eu-west-1", "sts"),
            base,
            base,
        ];
        for (s, d, r, v) in calls {
            assert_eq!(signing_key(s, d, r, v), derive_signing_key(s, d, r, v), "{s} {d} {r} {v}");
        }
        let keys: std::collections::HashSet<_> = calls.iter().map(|&(s, d, r, v)| signing_key(s, d, r, v)).collect();
        assert_eq!(keys.len(), 5, "five distinct inputs, five distinct keys");
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just(" ".to_owned()),
                Just("+".to_owned()),
                Just("%".to_owned()),
                Just("~".to_owned()),
                Just("/".to_owned()),
                Just("é".to_owned()),
                Just("日本".to_owned()),
                Just("=&?#".to_owned()),
                "[a-zA-Z0-9._-]{1,4}",
            ],
            1..8,
        )
        .prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn sign_then_verify_roundtrip(
            key in key_strategy(),
            params in proptest::collection::vec((key_strategy(), key_strategy()), 0..4),
            meta in "[ -~]{0,20}",
            secret in "[ -~]{1,40}",
            offset_secs in 0u64..900,
        ) {
            let path = format!("/bucket/{}", uri_encode(&key, false));
            let query: Vec<String> = params.iter().map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true))).collect();
            let query = query.join("&");
            let creds = Credentials { access_key: "AK".into(), secret_key: secret.clone() };
            let mut h = hm(&[("host", "localhost:9000"), ("content-type", "text/plain")]);
            h.insert("x-amz-meta-m", http::HeaderValue::from_str(&meta).unwrap());
            let now = t0() + Duration::from_secs(offset_secs);
            sign_headers("PUT", &path, &query, &mut h, UNSIGNED_PAYLOAD, &creds, "eu-west-1", t0());
            let lk = |ak: &str| (ak == "AK").then(|| secret.clone());
            let req = SignableRequest { method: "PUT", raw_path: &path, raw_query: &query, headers: &h };
            let ctx = verify(&req, &lk, now, SKEW).unwrap();
            prop_assert_eq!(ctx.region, "eu-west-1");
            // Tampered method / secret fail.
            let req2 = SignableRequest { method: "POST", ..req };
            prop_assert_eq!(verify(&req2, &lk, now, SKEW).unwrap_err().kind, AuthErrorKind::SignatureDoesNotMatch);
            let lk2 = |_: &str| Some(format!("{secret}x"));
            prop_assert_eq!(verify(&req, &lk2, now, SKEW).unwrap_err().kind, AuthErrorKind::SignatureDoesNotMatch);
            let path3 = format!("{path}x");
            let req3 = SignableRequest { raw_path: &path3, ..req };
            prop_assert_eq!(verify(&req3, &lk, now, SKEW).unwrap_err().kind, AuthErrorKind::SignatureDoesNotMatch);

            // Presigned form.
            let q = presign("GET", &path, "localhost:9000", &query, &creds, "eu-west-1", t0(), Duration::from_secs(3600));
            let hh = hm(&[("host", "localhost:9000")]);
            let preq = SignableRequest { method: "GET", raw_path: &path, raw_query: &q, headers: &hh };
            prop_assert!(verify(&preq, &lk, now, SKEW).is_ok());
            let preq2 = SignableRequest { method: "PUT", ..preq };
            prop_assert_eq!(verify(&preq2, &lk, now, SKEW).unwrap_err().kind, AuthErrorKind::SignatureDoesNotMatch);
        }

        #[test]
        fn verify_never_panics(auth in "\\PC{0,120}", query in "\\PC{0,80}", path in "\\PC{0,40}") {
            let mut h = hm(&[("host", "h"), ("x-amz-date", "20130524T000000Z")]);
            if let Ok(v) = http::HeaderValue::from_str(&auth) {
                h.insert("authorization", v);
            }
            let req = SignableRequest { method: "GET", raw_path: &path, raw_query: &query, headers: &h };
            let _ = verify(&req, &lookup, t0(), SKEW);
            let h2 = hm(&[("host", "h")]);
            let q = format!("X-Amz-Algorithm=AWS4-HMAC-SHA256&{query}");
            let req = SignableRequest { method: "GET", raw_path: &path, raw_query: &q, headers: &h2 };
            let _ = verify(&req, &lookup, t0(), SKEW);
        }
    }
}
