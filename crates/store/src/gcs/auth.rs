//! Who a GCS request is from: OAuth 2.0 access tokens found the way Google's client
//! libraries find them ("Application Default Credentials"), cached and refreshed
//! before they expire.
//!
//! ```text
//! CredentialsSource::Default, in order:
//!   STORAGE_EMULATOR_HOST set ──────────────► anonymous (emulators take no tokens)
//!   GOOGLE_APPLICATION_CREDENTIALS=<file> ──┐
//!   $CLOUDSDK_CONFIG or ~/.config/gcloud/   ├─► "service_account": RS256 JWT ─► POST token_uri
//!     application_default_credentials.json ─┘   "authorized_user": refresh_token ─► POST token_uri
//!   GCE_METADATA_HOST set, or the machine's DMI product name says Google
//!                                        ──────► GET metadata server .../service-accounts/default/token
//!   nothing found ──────────────────────────► anonymous (public buckets)
//! CredentialsSource::Anonymous ─────────────► anonymous
//! ```
//!
//! A token is fetched on first use and kept until [`REFRESH_BEFORE`] its expiry, then
//! fetched again by the first request that needs it (one fetch at a time: the others
//! wait on the same lock and take its result). A 401 drops the cached token once
//! (client.rs). The source in use is logged at debug level when the client is built.
//!
//! The JWT is signed with RSASSA-PKCS1-v1_5 SHA-256 by `ring` (already in the tree
//! through rustls), from the key's PKCS#8 PEM as Google issues it. Token endpoints are
//! reached over their own small ferry-wire HTTP/1.1 pool, never the storage transport.

use crate::error::Error;
use base64::Engine as _;
use bytes::Bytes;
use ferry_wire::{Endpoint, Mode, Request, RequestBody, Transport, TransportConfig};
use http::{HeaderValue, Method};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The scope asked for: read and write objects and buckets.
pub(crate) const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.full_control";

/// How long before its expiry a token is replaced: google-auth-library-python's
/// refresh threshold (3 min 45 s), so a token never expires during a long request.
pub(crate) const REFRESH_BEFORE: Duration = Duration::from_secs(225);

/// The metadata server's address when `GCE_METADATA_HOST` does not name one.
const METADATA_HOST: &str = "169.254.169.254";

/// Lifetime asked for a service account's JWT (Google's maximum, one hour).
const JWT_LIFETIME: u64 = 3600;

/// How requests are authorised.
#[derive(Clone)]
pub(crate) enum Auth {
    Anonymous,
    Tokens(Arc<TokenCache>),
}

impl Auth {
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Auth::Anonymous => "anonymous",
            Auth::Tokens(t) => t.source.describe(),
        }
    }

    /// The current access token (`None`: send no Authorization).
    pub(crate) async fn token(&self) -> Result<Option<String>, Error> {
        match self {
            Auth::Anonymous => Ok(None),
            Auth::Tokens(t) => t.get().await.map(Some),
        }
    }

    pub(crate) fn invalidate(&self) {
        if let Auth::Tokens(t) = self {
            if let Ok(mut g) = t.cached.try_lock() {
                *g = None;
            }
        }
    }

    /// The service account key, which can sign URLs.
    pub(crate) fn service_account(&self) -> Option<&ServiceAccount> {
        match self {
            Auth::Tokens(t) => match &t.source {
                TokenSource::ServiceAccount(sa) => Some(sa),
                _ => None,
            },
            Auth::Anonymous => None,
        }
    }
}

/// A service account's key file, parsed.
pub(crate) struct ServiceAccount {
    pub(crate) client_email: String,
    pub(crate) private_key_id: Option<String>,
    pub(crate) key: ring::signature::RsaKeyPair,
    pub(crate) token_uri: String,
}

impl ServiceAccount {
    /// RSASSA-PKCS1-v1_5 with SHA-256 of `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        let mut sig = vec![0u8; self.key.public().modulus_len()];
        self.key
            .sign(&ring::signature::RSA_PKCS1_SHA256, &ring::rand::SystemRandom::new(), message, &mut sig)
            .map_err(|_| Error::Config("signing with the service account key failed".into()))?;
        Ok(sig)
    }

    /// The signed JWT a token is asked for with (RFC 7523, Google's "OAuth 2.0 for
    /// Server to Server Applications").
    pub(crate) fn assertion(&self, now: SystemTime) -> Result<String, Error> {
        let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let iat = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
        if let Some(kid) = &self.private_key_id {
            header["kid"] = kid.clone().into();
        }
        let claims = serde_json::json!({
            "iss": self.client_email, "scope": SCOPE, "aud": self.token_uri,
            "iat": iat, "exp": iat + JWT_LIFETIME,
        });
        let signing_input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
        let sig = self.sign(signing_input.as_bytes())?;
        Ok(format!("{signing_input}.{}", b64(&sig)))
    }
}

/// Where tokens come from.
pub(crate) enum TokenSource {
    ServiceAccount(Box<ServiceAccount>),
    AuthorizedUser { client_id: String, client_secret: String, refresh_token: String, token_uri: String },
    Metadata { base: String },
}

impl TokenSource {
    fn describe(&self) -> &'static str {
        match self {
            TokenSource::ServiceAccount(_) => "service account",
            TokenSource::AuthorizedUser { .. } => "authorized user (gcloud)",
            TokenSource::Metadata { .. } => "metadata server",
        }
    }
}

/// A token source and the token it last gave.
pub(crate) struct TokenCache {
    pub(crate) source: TokenSource,
    cached: tokio::sync::Mutex<Option<(String, Instant)>>,
    ca_file: Option<PathBuf>,
}

impl TokenCache {
    pub(crate) fn new(source: TokenSource, ca_file: Option<PathBuf>) -> TokenCache {
        TokenCache { source, cached: tokio::sync::Mutex::new(None), ca_file }
    }

    async fn get(&self) -> Result<String, Error> {
        let mut g = self.cached.lock().await;
        if let Some((t, expires)) = &*g {
            if Instant::now() + REFRESH_BEFORE < *expires {
                return Ok(t.clone());
            }
        }
        let (token, lifetime) = self.fetch().await?;
        tracing::debug!(source = self.source.describe(), ?lifetime, "gcs: fetched an access token");
        *g = Some((token.clone(), Instant::now() + lifetime));
        Ok(token)
    }

    async fn fetch(&self) -> Result<(String, Duration), Error> {
        let form = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| format!("{}={}", super::client::enc(k), super::client::enc(v)))
                .collect::<Vec<_>>()
                .join("&")
        };
        let (method, url, body, metadata) = match &self.source {
            TokenSource::ServiceAccount(sa) => {
                let jwt = sa.assertion(SystemTime::now())?;
                let body = form(&[("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", &jwt)]);
                (Method::POST, sa.token_uri.clone(), body, false)
            }
            TokenSource::AuthorizedUser { client_id, client_secret, refresh_token, token_uri } => {
                let body = form(&[
                    ("grant_type", "refresh_token"),
                    ("client_id", client_id),
                    ("client_secret", client_secret),
                    ("refresh_token", refresh_token),
                ]);
                (Method::POST, token_uri.clone(), body, false)
            }
            TokenSource::Metadata { base } => (
                Method::GET,
                format!("{base}/computeMetadata/v1/instance/service-accounts/default/token"),
                String::new(),
                true,
            ),
        };
        let (endpoint, path) = split_url(&url)?;
        let mut tc = TransportConfig::new(endpoint);
        tc.mode = Mode::H1Pool;
        tc.ca_file = self.ca_file.clone();
        tc.max_connections = 1;
        let transport: Arc<dyn Transport> = ferry_wire::transport(tc)?;
        let mut req = Request::new(method, path);
        if metadata {
            req.headers.insert("metadata-flavor", HeaderValue::from_static("Google"));
        } else {
            req.headers.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded"));
            req.body = RequestBody::from(Bytes::from(body));
        }
        req.hedge = false;
        let resp = transport.send(req).await?;
        let status = resp.status.as_u16();
        let text = resp.body.collect(64 * 1024).await?;
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap_or(serde_json::Value::Null);
        if !(200..300).contains(&status) {
            let code = v["error"].as_str().unwrap_or("token_request_failed").to_owned();
            let message = v["error_description"].as_str().map(str::to_owned).unwrap_or_else(|| {
                format!("{} answered {status}: {}", url, String::from_utf8_lossy(&text[..text.len().min(200)]))
            });
            return Err(Error::Auth { status, code, message, request_id: None });
        }
        let token = v["access_token"].as_str().filter(|t| !t.is_empty()).ok_or_else(|| Error::Protocol {
            message: format!("{url} answered without an access_token"),
            request_id: None,
        })?;
        let lifetime = Duration::from_secs(v["expires_in"].as_u64().unwrap_or(3600));
        Ok((token.to_owned(), lifetime))
    }
}

/// `http(s)://host[:port]/path?query` into the endpoint and the path with its query.
fn split_url(url: &str) -> Result<(Endpoint, String), Error> {
    let endpoint = Endpoint::parse(url).map_err(|e| Error::Config(e.to_string()))?;
    let after_scheme = url.split_once("://").map(|x| x.1).unwrap_or(url);
    let path = match after_scheme.find('/') {
        Some(i) => after_scheme[i..].to_owned(),
        None => "/".to_owned(),
    };
    Ok((endpoint, path))
}

/// The environment the lookup reads, injectable for tests.
pub(crate) trait Env {
    fn var(&self, name: &str) -> Option<String>;
    fn home(&self) -> Option<PathBuf>;
    /// Whether this machine is a Google Compute Engine VM (the DMI product name).
    fn on_gce(&self) -> bool;
}

pub(crate) struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME").map(PathBuf::from)
    }
    fn on_gce(&self) -> bool {
        std::fs::read_to_string("/sys/class/dmi/id/product_name")
            .map(|s| s.trim().starts_with("Google"))
            .unwrap_or(false)
    }
}

/// What the lookup found, and the project it names (for bucket calls).
pub(crate) struct Resolved {
    pub(crate) auth: Auth,
    pub(crate) project: Option<String>,
}

/// Application Default Credentials (the module note).
pub(crate) fn resolve(
    source: &crate::CredentialsSource,
    emulator: bool,
    ca_file: Option<PathBuf>,
    env: &dyn Env,
) -> Result<Resolved, Error> {
    let env_project = || env.var("GOOGLE_CLOUD_PROJECT").or_else(|| env.var("CLOUDSDK_CORE_PROJECT"));
    match source {
        crate::CredentialsSource::Anonymous => {
            tracing::debug!("gcs credentials: anonymous (asked for)");
            return Ok(Resolved { auth: Auth::Anonymous, project: env_project() });
        }
        crate::CredentialsSource::Default => {}
        other => {
            return Err(Error::Config(format!(
                "{other:?} names AWS credentials; Google Cloud Storage takes its own (GOOGLE_APPLICATION_CREDENTIALS, gcloud's application default credentials, the metadata server) or none"
            )))
        }
    }
    if emulator {
        tracing::debug!("gcs credentials: none (STORAGE_EMULATOR_HOST names an emulator)");
        return Ok(Resolved { auth: Auth::Anonymous, project: env_project().or_else(|| Some("ferry".into())) });
    }
    let mut file: Option<(PathBuf, &str)> =
        env.var("GOOGLE_APPLICATION_CREDENTIALS").map(|p| (PathBuf::from(p), "GOOGLE_APPLICATION_CREDENTIALS"));
    if file.is_none() {
        let dir = env
            .var("CLOUDSDK_CONFIG")
            .map(PathBuf::from)
            .or_else(|| env.home().map(|h| h.join(".config").join("gcloud")));
        if let Some(p) = dir.map(|d| d.join("application_default_credentials.json")) {
            if p.is_file() {
                file = Some((p, "gcloud application default credentials"));
            }
        }
    }
    if let Some((path, from)) = file {
        let (src, project) = from_file(&path)?;
        tracing::debug!(source = src.describe(), file = %path.display(), from, "gcs credentials");
        return Ok(Resolved {
            auth: Auth::Tokens(Arc::new(TokenCache::new(src, ca_file))),
            project: env_project().or(project),
        });
    }
    if let Some(host) = env.var("GCE_METADATA_HOST").or_else(|| env.on_gce().then(|| METADATA_HOST.to_owned())) {
        let base =
            if host.starts_with("http://") || host.starts_with("https://") { host } else { format!("http://{host}") };
        tracing::debug!(%base, "gcs credentials: metadata server");
        return Ok(Resolved {
            auth: Auth::Tokens(Arc::new(TokenCache::new(TokenSource::Metadata { base }, ca_file))),
            project: env_project(),
        });
    }
    tracing::debug!("gcs credentials: none found; requests are anonymous");
    Ok(Resolved { auth: Auth::Anonymous, project: env_project() })
}

/// A credentials JSON file: a service account key or gcloud's authorized user.
pub(crate) fn from_file(path: &Path) -> Result<(TokenSource, Option<String>), Error> {
    let bad = |why: String| Error::Config(format!("credentials file {}: {why}", path.display()));
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let s = |k: &str| v[k].as_str().map(str::to_owned);
    let need = |k: &str| s(k).ok_or_else(|| bad(format!("no {k:?}")));
    let token_uri = s("token_uri").unwrap_or_else(|| "https://oauth2.googleapis.com/token".to_owned());
    match v["type"].as_str() {
        Some("service_account") => {
            let pem = need("private_key")?;
            let der = pem_body(&pem).ok_or_else(|| bad("private_key is not a PEM PRIVATE KEY".into()))?;
            let key = ring::signature::RsaKeyPair::from_pkcs8(&der)
                .map_err(|e| bad(format!("private_key is not an RSA PKCS#8 key: {e}")))?;
            let sa = ServiceAccount {
                client_email: need("client_email")?,
                private_key_id: s("private_key_id"),
                key,
                token_uri,
            };
            Ok((TokenSource::ServiceAccount(Box::new(sa)), s("project_id")))
        }
        Some("authorized_user") => Ok((
            TokenSource::AuthorizedUser {
                client_id: need("client_id")?,
                client_secret: need("client_secret")?,
                refresh_token: need("refresh_token")?,
                token_uri,
            },
            s("quota_project_id"),
        )),
        other => Err(bad(format!("credential type {other:?} is not supported (service_account, authorized_user)"))),
    }
}

/// The DER bytes of a `-----BEGIN PRIVATE KEY-----` PEM block.
fn pem_body(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN PRIVATE KEY-----")? + "-----BEGIN PRIVATE KEY-----".len();
    let end = pem[start..].find("-----END PRIVATE KEY-----")? + start;
    let b64: String = pem[start..end].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeEnv(Vec<(&'static str, String)>, Option<PathBuf>, bool);
    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
        }
        fn home(&self) -> Option<PathBuf> {
            self.1.clone()
        }
        fn on_gce(&self) -> bool {
            self.2
        }
    }

    #[test]
    fn lookup_order() {
        let d = tempfile::tempdir().unwrap();
        let src = crate::CredentialsSource::Default;
        // The emulator wins over everything.
        let env = FakeEnv(vec![("GOOGLE_APPLICATION_CREDENTIALS", "/nope".into())], None, true);
        assert_eq!(resolve(&src, true, None, &env).unwrap().auth.describe(), "anonymous");
        // Nothing at all: anonymous.
        let env = FakeEnv(vec![], Some(d.path().into()), false);
        assert_eq!(resolve(&src, false, None, &env).unwrap().auth.describe(), "anonymous");
        // On GCE: the metadata server.
        let env = FakeEnv(vec![], Some(d.path().into()), true);
        assert_eq!(resolve(&src, false, None, &env).unwrap().auth.describe(), "metadata server");
        // gcloud's ADC file beats the metadata server.
        let adc = d.path().join(".config/gcloud");
        std::fs::create_dir_all(&adc).unwrap();
        std::fs::write(
            adc.join("application_default_credentials.json"),
            r#"{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r","quota_project_id":"p1"}"#,
        )
        .unwrap();
        let r = resolve(&src, false, None, &env).unwrap();
        assert_eq!((r.auth.describe(), r.project.as_deref()), ("authorized user (gcloud)", Some("p1")));
        // A named file that is missing is an error, not a silent fallback.
        let env = FakeEnv(vec![("GOOGLE_APPLICATION_CREDENTIALS", "/no/such/file.json".into())], None, false);
        assert!(matches!(resolve(&src, false, None, &env), Err(Error::Config(_))));
        // AWS-only sources are refused.
        let aws = crate::CredentialsSource::Environment;
        assert!(matches!(resolve(&aws, false, None, &env), Err(Error::Config(_))));
    }
}
