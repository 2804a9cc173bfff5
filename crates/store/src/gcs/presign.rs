//! V4 signed URLs (`GOOG4-RSA-SHA256`) for GET, signed with the service account's key,
//! as Google's "V4 signing process with your own program" describes:
//!
//! ```text
//! canonical request = GET \n /{bucket}/{object} \n sorted query (X-Goog-*) \n host:{host}\n \n host \n UNSIGNED-PAYLOAD
//! string to sign    = GOOG4-RSA-SHA256 \n {YYYYMMDDTHHMMSSZ} \n {YYYYMMDD}/auto/storage/goog4_request \n hex(sha256(canonical request))
//! URL               = https://{host}/{bucket}/{object}?{query}&X-Goog-Signature=hex(RSA-SHA256(string to sign))
//! ```
//!
//! The URL uses the XML API's path (`/{bucket}/{object}`), which is what signed URLs
//! address. Without a key (anonymous, an emulator, gcloud user or metadata-server
//! credentials, which hold no private key) the plain media URL is returned: it works
//! for public objects and emulators. Signed URLs live at most 7 days.

use crate::error::Error;
use crate::gcs::auth::ServiceAccount;
use crate::gcs::client::{enc, GcsClient};
use crate::types::ObjectRef;
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime};

/// Longest validity of a V4 signed URL: 7 days.
pub const MAX_EXPIRES: Duration = Duration::from_secs(7 * 24 * 3600);

/// The object path of a signed URL: each `/`-separated piece of the name encoded.
fn xml_path(object: &ObjectRef) -> String {
    let key: Vec<String> = object.key.split('/').map(enc).collect();
    format!("/{}/{}", enc(&object.bucket), key.join("/"))
}

/// The query (without the signature) and the string to sign.
pub(crate) fn string_to_sign(
    email: &str,
    host: &str,
    object: &ObjectRef,
    now: SystemTime,
    expires: Duration,
) -> (String, String) {
    let stamp = ferry_proto::encoding::amz_date(now);
    let date = &stamp[..8];
    let scope = format!("{date}/auto/storage/goog4_request");
    let query = [
        ("X-Goog-Algorithm", "GOOG4-RSA-SHA256".to_owned()),
        ("X-Goog-Credential", format!("{email}/{scope}")),
        ("X-Goog-Date", stamp.clone()),
        ("X-Goog-Expires", expires.as_secs().to_string()),
        ("X-Goog-SignedHeaders", "host".to_owned()),
    ]
    .iter()
    .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
    .collect::<Vec<_>>()
    .join("&");
    let canonical = format!("GET\n{}\n{query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD", xml_path(object));
    let sts = format!("GOOG4-RSA-SHA256\n{stamp}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    (query, sts)
}

/// A signed URL for `object` with `sa`'s key.
pub(crate) fn sign_url(
    sa: &ServiceAccount,
    base: &str,
    host: &str,
    object: &ObjectRef,
    now: SystemTime,
    expires: Duration,
) -> Result<String, Error> {
    let (query, sts) = string_to_sign(&sa.client_email, host, object, now, expires);
    let sig = hex::encode(sa.sign(sts.as_bytes())?);
    Ok(format!("{base}{}?{query}&X-Goog-Signature={sig}", xml_path(object)))
}

impl GcsClient {
    /// A URL that GETs `object` until `expires` from now (module note).
    pub fn presign_get(&self, object: &ObjectRef, expires: Duration) -> Result<String, Error> {
        if expires > MAX_EXPIRES || expires.is_zero() {
            return Err(Error::Config(format!("signed URLs expire after 1 s to 7 days, not {expires:?}")));
        }
        let base = self.base_url();
        match self.inner.auth.service_account() {
            Some(sa) => sign_url(sa, &base, &self.inner.endpoint.authority(), object, SystemTime::now(), expires),
            None => Ok(format!("{base}{}?alt=media", GcsClient::object_path(&object.bucket, &object.key))),
        }
    }
}
