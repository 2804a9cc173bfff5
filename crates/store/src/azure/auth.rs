//! Shared Key signatures and service SAS URLs, with the account key.
//!
//! Shared Key ("Authorize with Shared Key", Azure Storage REST reference): the
//! signature is `base64(HMAC-SHA256(key, StringToSign))` over
//!
//! ```text
//! VERB \n Content-Encoding \n Content-Language \n Content-Length (empty when 0) \n
//! Content-MD5 \n Content-Type \n Date (empty: x-ms-date is sent) \n If-Modified-Since \n
//! If-Match \n If-None-Match \n If-Unmodified-Since \n Range \n
//! CanonicalizedHeaders   every x-ms-* header, lower-cased, sorted, "name:value\n"
//! CanonicalizedResource  "/" account + the request path as sent (still %-encoded)
//!                        + for each query parameter, sorted by lower-cased name:
//!                          "\n" name ":" decoded value (several values comma-joined)
//! ```
//!
//! An emulator's path already starts with the account (`/devstoreaccount1/c/b`), so its
//! resource names the account twice, as Azure's SDKs sign it.
//!
//! A service SAS (presigned GET) signs, for signed versions 2020-12-06 and later,
//! `sp \n st \n se \n /blob/account/container/blob \n si \n sip \n spr \n sv \n sr \n
//! snapshot \n ses \n rscc \n rscd \n rsce \n rscl \n rsct` ("Create a service SAS").

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub(crate) fn hmac_base64(key: &[u8], data: &str) -> String {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(data.as_bytes());
    ferry_proto::checksum::base64_encode(&m.finalize().into_bytes())
}

/// The standard headers Shared Key signs, in order.
const SIGNED_STANDARD_HEADERS: [&str; 11] = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];

/// The Shared Key string-to-sign of a request (module note). `query` holds the decoded
/// parameters; `content_length` is the body's length.
pub(crate) fn string_to_sign(
    method: &str,
    account: &str,
    raw_path: &str,
    query: &[(String, String)],
    headers: &HeaderMap,
    content_length: u64,
) -> String {
    let mut s = String::with_capacity(256);
    s.push_str(method);
    s.push('\n');
    for name in SIGNED_STANDARD_HEADERS {
        if name == "content-length" {
            if content_length > 0 {
                s.push_str(&content_length.to_string());
            }
        } else if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            s.push_str(v);
        }
        s.push('\n');
    }
    let mut ms: Vec<(String, String)> = headers
        .iter()
        .filter(|(n, _)| n.as_str().starts_with("x-ms-"))
        .map(|(n, v)| {
            let v = String::from_utf8_lossy(v.as_bytes());
            (n.as_str().to_owned(), v.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .collect();
    ms.sort();
    for (n, v) in ms {
        s.push_str(&n);
        s.push(':');
        s.push_str(&v);
        s.push('\n');
    }
    s.push('/');
    s.push_str(account);
    s.push_str(if raw_path.is_empty() { "/" } else { raw_path });
    let mut q: std::collections::BTreeMap<String, Vec<&str>> = std::collections::BTreeMap::new();
    for (k, v) in query {
        q.entry(k.to_ascii_lowercase()).or_default().push(v);
    }
    for (k, mut vs) in q {
        vs.sort();
        s.push('\n');
        s.push_str(&k);
        s.push(':');
        s.push_str(&vs.join(","));
    }
    s
}

/// `SharedKey account:signature`.
pub(crate) fn shared_key_authorization(account: &str, key: &[u8], string_to_sign: &str) -> String {
    format!("SharedKey {account}:{}", hmac_base64(key, string_to_sign))
}

/// The query of a read-only service SAS for one blob (`sp=r`, `sr=b`), valid until
/// `expiry` (ISO 8601, seconds). `blob` is the decoded name.
pub(crate) fn blob_read_sas(
    account: &str,
    key: &[u8],
    container: &str,
    blob: &str,
    expiry: &str,
    version: &str,
) -> String {
    let resource = format!("/blob/{account}/{container}/{blob}");
    // sp, st, se, resource, si, sip, spr, sv, sr, snapshot, ses, rscc, rscd, rsce, rscl, rsct
    let fields = ["r", "", expiry, &resource, "", "", "", version, "b", "", "", "", "", "", "", ""];
    let sig = hmac_base64(key, &fields.join("\n"));
    let enc = |v: &str| ferry_proto::encoding::uri_encode(v, true);
    format!("sv={}&se={}&sr=b&sp=r&sig={}", enc(version), enc(expiry), enc(&sig))
}

/// A user delegation key (Get User Delegation Key): what a bearer-token client signs
/// SAS tokens with, in place of an account key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserDelegationKey {
    pub signed_oid: String,
    pub signed_tid: String,
    pub signed_start: String,
    pub signed_expiry: String,
    pub signed_service: String,
    pub signed_version: String,
    /// Base64, as Azure sends it.
    pub value: String,
}

impl UserDelegationKey {
    pub(crate) fn parse(body: &[u8]) -> Result<UserDelegationKey, ferry_proto::xml::XmlError> {
        let root = ferry_proto::xml::parse_document(body)?;
        let t = |n: &str| root.child_text(n).unwrap_or("").trim().to_owned();
        Ok(UserDelegationKey {
            signed_oid: t("SignedOid"),
            signed_tid: t("SignedTid"),
            signed_start: t("SignedStart"),
            signed_expiry: t("SignedExpiry"),
            signed_service: t("SignedService"),
            signed_version: t("SignedVersion"),
            value: t("Value"),
        })
    }
}

/// The query of a user delegation SAS that reads one blob until `expiry` ("Create a
/// user delegation SAS", signed versions 2020-12-06 and later): the string to sign is
/// `sp \n st \n se \n /blob/account/container/blob \n skoid \n sktid \n skt \n ske \n
/// sks \n skv \n saoid \n suoid \n scid \n sip \n spr \n sv \n sr \n snapshot \n ses \n
/// rscc \n rscd \n rsce \n rscl \n rsct`, signed with the key's value (base64-decoded).
pub(crate) fn blob_read_delegation_sas(
    account: &str,
    key: &UserDelegationKey,
    container: &str,
    blob: &str,
    expiry: &str,
    version: &str,
) -> Option<String> {
    let secret = ferry_proto::checksum::base64_decode(&key.value)?;
    let resource = format!("/blob/{account}/{container}/{blob}");
    let k = key;
    let fields = [
        "r",
        "",
        expiry,
        &resource,
        &k.signed_oid,
        &k.signed_tid,
        &k.signed_start,
        &k.signed_expiry,
        &k.signed_service,
        &k.signed_version,
        "",
        "",
        "",
        "",
        "",
        version,
        "b",
        "",
        "",
        "",
        "",
        "",
        "",
        "",
    ];
    let sig = hmac_base64(&secret, &fields.join("\n"));
    let enc = |v: &str| ferry_proto::encoding::uri_encode(v, true);
    Some(format!(
        "sv={}&se={}&sr=b&sp=r&skoid={}&sktid={}&skt={}&ske={}&sks={}&skv={}&sig={}",
        enc(version),
        enc(expiry),
        enc(&k.signed_oid),
        enc(&k.signed_tid),
        enc(&k.signed_start),
        enc(&k.signed_expiry),
        enc(&k.signed_service),
        enc(&k.signed_version),
        enc(&sig)
    ))
}

/// The query of a service SAS for a whole container (`sr=c`) with permissions `sp`
/// (`rl`, `racwdl`, ...), valid until `expiry`: for tools that take a container SAS URL
/// (rclone's `sas_url`) and for tests.
pub fn container_sas(
    account: &str,
    key: &[u8],
    container: &str,
    permissions: &str,
    expiry: &str,
    version: &str,
) -> String {
    let resource = format!("/blob/{account}/{container}");
    let fields = [permissions, "", expiry, &resource, "", "", "", version, "c", "", "", "", "", "", "", ""];
    let sig = hmac_base64(key, &fields.join("\n"));
    let enc = |v: &str| ferry_proto::encoding::uri_encode(v, true);
    format!("sv={}&se={}&sr=c&sp={}&sig={}", enc(version), enc(expiry), enc(permissions), enc(&sig))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn string_to_sign_follows_the_rules() {
        let mut h = HeaderMap::new();
        h.insert("x-ms-version", HeaderValue::from_static("2023-11-03"));
        h.insert("x-ms-date", HeaderValue::from_static("Fri, 27 Nov 2026 12:00:00 GMT"));
        h.insert("x-ms-meta-Owner", HeaderValue::from_static("a   b"));
        h.insert("content-md5", HeaderValue::from_static("bWQ1"));
        h.insert("if-match", HeaderValue::from_static("\"0x1\""));
        let q = vec![("comp".to_owned(), "block".to_owned()), ("blockid".to_owned(), "QUJD+/==".to_owned())];
        let s = string_to_sign("PUT", "acct", "/acct/c/a%20b", &q, &h, 5);
        assert_eq!(
            s,
            "PUT\n\n\n5\nbWQ1\n\n\n\n\"0x1\"\n\n\n\n\
             x-ms-date:Fri, 27 Nov 2026 12:00:00 GMT\nx-ms-meta-owner:a b\nx-ms-version:2023-11-03\n\
             /acct/acct/c/a%20b\nblockid:QUJD+/==\ncomp:block"
        );
        // An empty body signs an empty Content-Length.
        let s = string_to_sign("GET", "acct", "", &[], &HeaderMap::new(), 0);
        assert_eq!(s, "GET\n\n\n\n\n\n\n\n\n\n\n\n/acct/");
    }

    #[test]
    fn shared_key_matches_a_known_signature() {
        // HMAC-SHA256 of "abc" under the key "key" (computed by
        // `printf abc | openssl dgst -sha256 -hmac key -binary | base64`).
        assert_eq!(hmac_base64(b"key", "abc"), "nBluMtwBdfhvSxy4konWYZ3mvuaZ5MN45oMJ7Zehpqs=");
        assert_eq!(
            shared_key_authorization("a", b"key", "abc"),
            "SharedKey a:nBluMtwBdfhvSxy4konWYZ3mvuaZ5MN45oMJ7Zehpqs="
        );
    }
}
