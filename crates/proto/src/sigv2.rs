//! AWS Signature Version 2 for S3, server-side verification only.
//!
//! Why a server still needs it: botocore presigns S3 URLs with SigV2 unless the client
//! is configured with `signature_version="s3v4"` (`generate_presigned_url` with default
//! settings gives `?AWSAccessKeyId=..&Signature=..&Expires=..`), and S3 and MinIO accept
//! it, so a URL a user hands around must work here too. Spec:
//! <https://docs.aws.amazon.com/AmazonS3/latest/userguide/RESTAuthentication.html>.
//!
//! Two forms, one string to sign:
//!
//! ```text
//!  Authorization: AWS AKID:base64sig          ?AWSAccessKeyId=AKID&Expires=EPOCH&Signature=..
//!        │ date = Date header ("" when only        │ date = Expires; x-amz-*, Content-Type
//!        │ x-amz-date is sent); skew checked       │ and Content-MD5 may ride in the query
//!        └──────────────┬──────────────────────────┘ expiry checked
//!   VERB \n Content-MD5 \n Content-Type \n date \n x-amz-* headers \n... CanonicalizedResource
//!        ─► HMAC-SHA1(secret) ─► base64 ─► compared in constant time
//! ```
//!
//! The canonicalized resource is `/bucket` + the path as sent (still percent-encoded,
//! as botocore signs it) + the sub-resources S3 lists (`?acl`, `?uploadId=..`,
//! `response-*`, ...), sorted by name, with values decoded. A SigV2 request carries no
//! signing context: there are no chunk signatures to chain (aws-chunked bodies are a
//! SigV4 feature), so [`verify`] returns only the access key.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hmac::{Hmac, Mac};
use subtle::ConstantTimeEq;

use crate::encoding::{parse_amz_date, parse_http_date, parse_query};
use crate::sigv4::{AuthError, AuthErrorKind, SignableRequest};

type HmacSha1 = Hmac<sha1::Sha1>;

/// Query parameters that are part of the canonicalized resource (the S3 guide's list,
/// as botocore's `HmacV1Auth` signs them); every other parameter is left out.
const SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "delete",
    "inventory",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "partNumber",
    "policy",
    "replication",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "select",
    "select-type",
    "storageClass",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
];

fn err(kind: AuthErrorKind, message: impl Into<String>) -> AuthError {
    AuthError::new(kind, message)
}

/// Whether the request is signed with SigV2 (header `AWS ...` or `AWSAccessKeyId` and
/// `Signature` in the query); SigV4 requests never match.
pub fn is_sigv2(req: &SignableRequest) -> bool {
    if let Some(v) = req.headers.get(http::header::AUTHORIZATION) {
        return v.as_bytes().starts_with(b"AWS ");
    }
    let pairs = parse_query(req.raw_query);
    pairs.iter().any(|(k, _)| k == "AWSAccessKeyId") && pairs.iter().any(|(k, _)| k == "Signature")
}

/// Verifies a SigV2-signed request and returns its access key.
///
/// `bucket_host` is the bucket named by a virtual-hosted request's Host (the canonical
/// resource then starts with `/bucket`); `None` for path-style. `max_skew` bounds the
/// header form's Date; the query form expires at `Expires`.
pub fn verify(
    req: &SignableRequest,
    bucket_host: Option<&str>,
    lookup: &dyn Fn(&str) -> Option<String>,
    now: SystemTime,
    max_skew: Duration,
) -> Result<String, AuthError> {
    let pairs = parse_query(req.raw_query);
    let query = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let header = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let (access_key, signature, date_lines, presigned) = match req.headers.get(http::header::AUTHORIZATION) {
        Some(auth) => {
            let auth = auth.to_str().map_err(|_| malformed())?;
            let (key, sig) = auth.strip_prefix("AWS ").and_then(|r| r.trim().rsplit_once(':')).ok_or_else(malformed)?;
            // Request time: x-amz-date wins over Date (the guide), in either format.
            let (time, date_line) = match (header("x-amz-date"), header("date")) {
                (Some(d), date) => (parse_any_date(d), date.unwrap_or("")),
                (None, Some(d)) => (parse_any_date(d), d),
                (None, None) => (None, ""),
            };
            let time = time.ok_or_else(|| {
                err(AuthErrorKind::AccessDenied, "AWS authentication requires a valid Date or x-amz-date header")
            })?;
            let skew = now.duration_since(time).unwrap_or_else(|e| e.duration());
            if skew > max_skew {
                return Err(err(
                    AuthErrorKind::RequestTimeTooSkewed,
                    "The difference between the request time and the current time is too large.",
                ));
            }
            // With x-amz-date the Date line should be empty; clients that send both
            // differ on it, so either is accepted (both are compared in constant time).
            let mut lines = vec![date_line.to_string()];
            if header("x-amz-date").is_some() && !date_line.is_empty() {
                lines.push(String::new());
            }
            (key.to_string(), sig.to_string(), lines, false)
        }
        None => {
            let missing = |name: &str| {
                err(
                    AuthErrorKind::AuthorizationQueryParametersError,
                    format!("Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters; {name} is missing."),
                )
            };
            let key = query("AWSAccessKeyId").ok_or_else(|| missing("AWSAccessKeyId"))?;
            let sig = query("Signature").ok_or_else(|| missing("Signature"))?;
            let expires = query("Expires").ok_or_else(|| missing("Expires"))?;
            let at: u64 = expires.parse().map_err(|_| {
                err(
                    AuthErrorKind::AuthorizationQueryParametersError,
                    format!("Invalid date (should be seconds since epoch): {expires}"),
                )
            })?;
            if now > UNIX_EPOCH + Duration::from_secs(at) {
                return Err(err(AuthErrorKind::ExpiredPresignedRequest, "Request has expired"));
            }
            (key.to_string(), sig.to_string(), vec![expires.to_string()], true)
        }
    };
    let secret = lookup(&access_key).ok_or_else(|| {
        err(AuthErrorKind::InvalidAccessKeyId, "The AWS Access Key Id you provided does not exist in our records.")
    })?;
    let provided = base64::engine::general_purpose::STANDARD.decode(signature.trim()).unwrap_or_default();
    // A value is taken from the headers, or (presigned) from the query, where botocore
    // moves the signed headers of a presigned request.
    let value = |name: &str| -> Option<String> {
        header(name).map(str::to_string).or_else(|| {
            presigned.then(|| pairs.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone()))?
        })
    };
    let common = format!(
        "{}\n{}\n{}\n",
        req.method,
        value("content-md5").unwrap_or_default(),
        value("content-type").unwrap_or_default()
    );
    let amz = amz_headers(req, &pairs, presigned);
    let resource = canonical_resource(req, bucket_host, &pairs);
    // A path-style bucket request (`/bucket`, no key) is signed as `/bucket/` by the
    // guide and botocore, as `/bucket` by some other clients: either is accepted.
    let mut resources = vec![resource.clone()];
    let (path, sub) = resource.split_at(resource.find('?').unwrap_or(resource.len()));
    if bucket_host.is_none() && path.len() > 1 && !path[1..].contains('/') {
        resources.insert(0, format!("{path}/{sub}"));
    }
    let mut ok = subtle::Choice::from(0u8);
    for (date, resource) in date_lines.iter().flat_map(|d| resources.iter().map(move |r| (d, r))) {
        let string_to_sign = format!("{common}{date}\n{amz}{resource}");
        let mut mac = HmacSha1::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
        mac.update(string_to_sign.as_bytes());
        let computed = mac.finalize().into_bytes();
        if computed.len() == provided.len() {
            ok |= computed.as_slice().ct_eq(&provided);
        }
    }
    if !bool::from(ok) {
        return Err(err(
            AuthErrorKind::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
        ));
    }
    Ok(access_key)
}

fn malformed() -> AuthError {
    err(
        AuthErrorKind::AuthorizationHeaderMalformed,
        "The authorization header is malformed; expecting \"AWS AKID:signature\".",
    )
}

/// An HTTP date, an amz date, or the RFC 2822 form with a numeric zone
/// (`Tue, 27 Mar 2007 19:36:42 +0000`) that SigV2 clients and the guide's examples send.
fn parse_any_date(s: &str) -> Option<SystemTime> {
    parse_http_date(s).or_else(|| parse_amz_date(s)).or_else(|| {
        let (rest, zone) = s.trim().rsplit_once(' ')?;
        let (sign, hhmm) = zone.split_at_checked(1)?;
        if hhmm.len() != 4 || !hhmm.bytes().all(|b| b.is_ascii_digit()) || !matches!(sign, "+" | "-") {
            return None;
        }
        let offset = Duration::from_secs(hhmm[..2].parse::<u64>().ok()? * 3600 + hhmm[2..].parse::<u64>().ok()? * 60);
        let local = parse_http_date(&format!("{rest} GMT"))?;
        if sign == "+" {
            local.checked_sub(offset)
        } else {
            local.checked_add(offset)
        }
    })
}

/// `x-amz-*` headers, lower-cased, values trimmed and joined with ',' per name, sorted,
/// each as `name:value\n`. A presigned request's `x-amz-*` query parameters count too.
fn amz_headers(req: &SignableRequest, pairs: &[(String, String)], presigned: bool) -> String {
    let mut found: Vec<(String, String)> = Vec::new();
    let mut add = |name: String, value: &str| match found.iter_mut().find(|(n, _)| *n == name) {
        Some((_, v)) => {
            v.push(',');
            v.push_str(value.trim());
        }
        None => found.push((name, value.trim().to_string())),
    };
    for (name, value) in req.headers.iter() {
        if name.as_str().starts_with("x-amz-") {
            add(name.as_str().to_string(), &String::from_utf8_lossy(value.as_bytes()));
        }
    }
    if presigned {
        for (k, v) in pairs {
            let lk = k.to_ascii_lowercase();
            if lk.starts_with("x-amz-") {
                add(lk, v);
            }
        }
    }
    found.sort();
    found.into_iter().map(|(n, v)| format!("{n}:{v}\n")).collect()
}

fn canonical_resource(req: &SignableRequest, bucket_host: Option<&str>, pairs: &[(String, String)]) -> String {
    let mut out = String::new();
    if let Some(b) = bucket_host {
        out.push('/');
        out.push_str(b);
    }
    out.push_str(if req.raw_path.is_empty() { "/" } else { req.raw_path });
    let raw_pairs: Vec<(&str, bool)> = req
        .raw_query
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|s| (s.split('=').next().unwrap_or(""), s.contains('=')))
        .collect();
    let mut subs: Vec<(&str, &str, bool)> = pairs
        .iter()
        .zip(raw_pairs.iter())
        .filter(|((k, _), _)| SUBRESOURCES.contains(&k.as_str()))
        .map(|((k, v), (_, has_eq))| (k.as_str(), v.as_str(), *has_eq || !v.is_empty()))
        .collect();
    subs.sort_by(|a, b| a.0.cmp(b.0));
    for (i, (k, v, has_value)) in subs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(k);
        if *has_value {
            out.push('=');
            out.push_str(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    fn lookup(k: &str) -> Option<String> {
        (k == "AKIAIOSFODNN7EXAMPLE").then(|| SECRET.to_string())
    }

    fn hm(pairs: &[(&str, &str)]) -> http::HeaderMap {
        pairs.iter().map(|(k, v)| (http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap())).collect()
    }

    fn at(s: &str) -> SystemTime {
        parse_http_date(s).unwrap()
    }

    /// The S3 developer guide's SigV2 examples (bucket `johnsmith`, virtual-hosted).
    #[test]
    fn guide_example_get_object() {
        let headers = hm(&[
            ("host", "johnsmith.s3.amazonaws.com"),
            ("date", "Tue, 27 Mar 2007 19:36:42 +0000"),
            ("authorization", "AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMU="),
        ]);
        let req = SignableRequest { method: "GET", raw_path: "/photos/puppy.jpg", raw_query: "", headers: &headers };
        assert!(is_sigv2(&req));
        let now = at("Tue, 27 Mar 2007 19:40:00 GMT");
        let got = verify(&req, Some("johnsmith"), &lookup, now, Duration::from_secs(900));
        assert_eq!(got.unwrap(), "AKIAIOSFODNN7EXAMPLE");
        // The same request a day later is a replay outside the skew window.
        let later = now + Duration::from_secs(86_400);
        let e = verify(&req, Some("johnsmith"), &lookup, later, Duration::from_secs(900)).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::RequestTimeTooSkewed);
    }

    #[test]
    fn guide_example_list_with_subresource_free_query() {
        let headers = hm(&[
            ("date", "Tue, 27 Mar 2007 19:42:41 +0000"),
            ("authorization", "AWS AKIAIOSFODNN7EXAMPLE:htDYFYduRNen8P9ZfE/s9SuKy0U="),
        ]);
        // `prefix` and `max-keys` are not sub-resources: left out of the resource.
        let req = SignableRequest {
            method: "GET",
            raw_path: "/",
            raw_query: "prefix=photos&max-keys=50&marker=puppy",
            headers: &headers,
        };
        let now = at("Tue, 27 Mar 2007 19:42:41 GMT");
        verify(&req, Some("johnsmith"), &lookup, now, Duration::from_secs(900)).unwrap();
    }

    #[test]
    fn guide_example_presigned_and_expiry() {
        let headers = hm(&[("host", "johnsmith.s3.amazonaws.com")]);
        let q = "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1175139620&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D";
        let req = SignableRequest { method: "GET", raw_path: "/photos/puppy.jpg", raw_query: q, headers: &headers };
        assert!(is_sigv2(&req));
        let before = UNIX_EPOCH + Duration::from_secs(1_175_139_000);
        let skew = Duration::from_secs(900);
        verify(&req, Some("johnsmith"), &lookup, before, skew).unwrap();
        let after = UNIX_EPOCH + Duration::from_secs(1_175_139_621);
        let e = verify(&req, Some("johnsmith"), &lookup, after, skew).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::ExpiredPresignedRequest);
        // Tampering with the path, the expiry or the key breaks the signature.
        let moved = SignableRequest { raw_path: "/photos/kitten.jpg", ..req };
        let e = verify(&moved, Some("johnsmith"), &lookup, before, skew).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::SignatureDoesNotMatch);
        let q2 = q.replace("1175139620", "1175139999");
        let longer = SignableRequest { raw_query: &q2, ..req };
        let e = verify(&longer, Some("johnsmith"), &lookup, before, skew).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::SignatureDoesNotMatch);
        let e = verify(&req, Some("johnsmith"), &|_| None, before, skew).unwrap_err();
        assert_eq!(e.kind, AuthErrorKind::InvalidAccessKeyId);
    }

    /// botocore signs a path-style bucket request `PUT /johnsmith?acl` with the resource
    /// `/johnsmith/?acl` (the guide's form for a bucket).
    #[test]
    fn path_style_bucket_resource_has_trailing_slash() {
        let headers = hm(&[
            ("date", "Tue, 27 Mar 2007 21:06:08 +0000"),
            ("authorization", "AWS AKIAIOSFODNN7EXAMPLE:NabVzUiliD9Hh9NS/CoRfK9WKOY="),
        ]);
        let req = SignableRequest { method: "PUT", raw_path: "/johnsmith", raw_query: "acl", headers: &headers };
        let now = at("Tue, 27 Mar 2007 21:06:08 GMT");
        verify(&req, None, &lookup, now, Duration::from_secs(900)).unwrap();
    }

    #[test]
    fn subresources_sorted_and_amz_headers_folded() {
        let headers = hm(&[("x-amz-meta-b", "2"), ("X-Amz-Meta-A", " 1 "), ("x-amz-meta-b", "3")]);
        let req = SignableRequest {
            method: "PUT",
            raw_path: "/b/k%20x",
            raw_query: "uploadId=abc&partNumber=2&foo=bar&uploads",
            headers: &headers,
        };
        let pairs = parse_query(req.raw_query);
        assert_eq!(canonical_resource(&req, None, &pairs), "/b/k%20x?partNumber=2&uploadId=abc&uploads");
        assert_eq!(amz_headers(&req, &pairs, false), "x-amz-meta-a:1\nx-amz-meta-b:2,3\n");
    }

    #[test]
    fn sigv4_requests_are_not_sigv2() {
        let headers = hm(&[("authorization", "AWS4-HMAC-SHA256 Credential=a/20130524/us-east-1/s3/aws4_request")]);
        let req = SignableRequest { method: "GET", raw_path: "/", raw_query: "", headers: &headers };
        assert!(!is_sigv2(&req));
        let none = hm(&[]);
        let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&Signature=x";
        assert!(!is_sigv2(&SignableRequest { method: "GET", raw_path: "/", raw_query: q, headers: &none }));
    }
}
