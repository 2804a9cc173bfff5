//! Entra ID (Azure AD) bearer tokens for Blob Storage: fetched on first use, cached,
//! and fetched again shortly before they expire.
//!
//! ```text
//! TokenSource::token() ─ cached and > REFRESH_MARGIN left? ─► the cached token
//!        └─ else one fetch (callers wait on the same lock):
//!             client secret:    POST {AZURE_AUTHORITY_HOST}/{tenant}/oauth2/v2.0/token
//!                               grant_type=client_credentials, scope=https://storage.azure.com/.default
//!             managed identity: GET {IDENTITY_ENDPOINT}?api-version=2019-08-01&resource=https://storage.azure.com/
//!                               X-IDENTITY-HEADER: {IDENTITY_HEADER}
//!           ─► JSON { access_token, expires_in | expires_on } ─► cache
//! ```
//!
//! Both flows are the ones the Azure SDKs' `ClientSecretCredential` and App Service
//! `ManagedIdentityCredential` use (Microsoft identity platform, "OAuth 2.0 client
//! credentials flow"; App Service, "Managed identities: REST endpoint reference").
//! Requests go over ferry-wire's HTTP/1.1 pool, one transport per token endpoint.

use crate::error::Error;
use crate::s3::credentials::Env;
use bytes::Bytes;
use ferry_wire::{Endpoint, Mode, Request, RequestBody, Transport, TransportConfig};
use http::{HeaderValue, Method};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The scope (v2 endpoint) and resource (managed identity) of Azure Storage.
pub const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";
pub const STORAGE_RESOURCE: &str = "https://storage.azure.com/";
/// Entra ID's public-cloud authority.
pub const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com";
/// A token with less than this left is fetched again: the Azure SDKs refresh five
/// minutes before expiry.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// Largest token response read.
const TOKEN_BODY_LIMIT: usize = 64 * 1024;

/// Where tokens come from.
#[derive(Clone, Debug)]
pub enum TokenFlow {
    ClientSecret { authority: String, tenant: String, client_id: String, secret: String },
    ManagedIdentity { endpoint: String, header: Option<String>, client_id: Option<String> },
}

/// A token flow with its cache.
pub struct TokenSource {
    flow: TokenFlow,
    transport: Arc<dyn Transport>,
    endpoint: Endpoint,
    cached: tokio::sync::Mutex<Option<(String, Instant)>>,
    /// Token fetches made (tests check caching with it).
    fetches: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.flow {
            TokenFlow::ClientSecret { .. } => "client secret",
            TokenFlow::ManagedIdentity { .. } => "managed identity",
        };
        f.debug_struct("TokenSource").field("flow", &kind).finish()
    }
}

fn form_encode(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| {
            format!("{}={}", ferry_proto::encoding::uri_encode(k, true), ferry_proto::encoding::uri_encode(v, true))
        })
        .collect::<Vec<_>>()
        .join("&")
}

impl TokenSource {
    pub fn new(flow: TokenFlow) -> Result<TokenSource, Error> {
        let url = match &flow {
            TokenFlow::ClientSecret { authority, .. } => authority.clone(),
            TokenFlow::ManagedIdentity { endpoint, .. } => endpoint.clone(),
        };
        let endpoint = Endpoint::parse(&url).map_err(|e| Error::Config(format!("token endpoint: {e}")))?;
        let mut tc = TransportConfig::new(endpoint.clone());
        tc.mode = Mode::H1Pool;
        tc.max_connections = 2;
        let transport = ferry_wire::transport(tc)?;
        Ok(TokenSource {
            flow,
            transport,
            endpoint,
            cached: tokio::sync::Mutex::new(None),
            fetches: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The flow the environment names, if any (config.rs's lookup order).
    pub(crate) fn from_env(env: &dyn Env) -> Result<Option<TokenSource>, Error> {
        if let (Some(tenant), Some(client_id), Some(secret)) =
            (env.var("AZURE_TENANT_ID"), env.var("AZURE_CLIENT_ID"), env.var("AZURE_CLIENT_SECRET"))
        {
            let authority = env.var("AZURE_AUTHORITY_HOST").unwrap_or_else(|| DEFAULT_AUTHORITY.to_owned());
            return TokenSource::new(TokenFlow::ClientSecret {
                authority: authority.trim_end_matches('/').to_owned(),
                tenant,
                client_id,
                secret,
            })
            .map(Some);
        }
        if let Some(endpoint) = env.var("IDENTITY_ENDPOINT") {
            return TokenSource::new(TokenFlow::ManagedIdentity {
                endpoint,
                header: env.var("IDENTITY_HEADER"),
                client_id: env.var("AZURE_CLIENT_ID"),
            })
            .map(Some);
        }
        Ok(None)
    }

    /// Token fetches so far.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A token valid for at least [`REFRESH_MARGIN`] (fetched if needed).
    pub async fn token(&self) -> Result<String, Error> {
        let mut cached = self.cached.lock().await;
        if let Some((t, until)) = cached.as_ref() {
            if *until > Instant::now() + REFRESH_MARGIN {
                return Ok(t.clone());
            }
        }
        let (token, lifetime) = self.fetch().await?;
        *cached = Some((token.clone(), Instant::now() + lifetime));
        Ok(token)
    }

    async fn fetch(&self) -> Result<(String, Duration), Error> {
        self.fetches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let host =
            HeaderValue::from_str(&self.endpoint.authority()).map_err(|_| Error::Config("bad token host".into()))?;
        let req = match &self.flow {
            TokenFlow::ClientSecret { authority, tenant, client_id, secret } => {
                let base = path_of(authority);
                let body = form_encode(&[
                    ("client_id", client_id),
                    ("client_secret", secret),
                    ("scope", STORAGE_SCOPE),
                    ("grant_type", "client_credentials"),
                ]);
                let mut r = Request::new(Method::POST, format!("{base}/{tenant}/oauth2/v2.0/token"));
                r.headers.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded"));
                r.body = RequestBody::from(Bytes::from(body));
                r
            }
            TokenFlow::ManagedIdentity { endpoint, header, client_id } => {
                let mut q = vec![("api-version", "2019-08-01"), ("resource", STORAGE_RESOURCE)];
                if let Some(c) = client_id {
                    q.push(("client_id", c));
                }
                let mut r = Request::new(Method::GET, format!("{}?{}", path_of(endpoint), form_encode(&q)));
                if let Some(h) = header {
                    r.headers.insert(
                        "x-identity-header",
                        HeaderValue::from_str(h).map_err(|_| Error::Config("bad IDENTITY_HEADER".into()))?,
                    );
                }
                r
            }
        };
        let mut req = req;
        req.headers.insert(http::header::HOST, host);
        req.hedge = false;
        let resp = self.transport.send(req).await?;
        let status = resp.status.as_u16();
        let body = resp.body.collect(TOKEN_BODY_LIMIT).await?;
        let json: serde_json::Value = serde_json::from_slice(&body).map_err(|_| {
            Error::protocol(
                format!(
                    "token endpoint answered {status} without JSON: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
                None,
            )
        })?;
        if !(200..300).contains(&status) {
            let code = json.get("error").and_then(|v| v.as_str()).unwrap_or("TokenRequestFailed").to_owned();
            let message = json.get("error_description").and_then(|v| v.as_str()).unwrap_or("").to_owned();
            return Err(Error::Auth { status, code, message, request_id: None });
        }
        let token = json
            .get("access_token")
            .and_then(|v| v.as_str())
            .ok_or_else(|| Error::protocol("token response without access_token", None))?
            .to_owned();
        Ok((token, lifetime(&json)))
    }
}

/// The path of a URL (without trailing '/'), for a request line.
fn path_of(url: &str) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    rest.find('/').map(|i| rest[i..].trim_end_matches('/').to_owned()).unwrap_or_default()
}

/// How long a token response says its token lives: `expires_in` seconds (a number or a
/// string), else `expires_on` (Unix seconds), else an hour, Entra's default lifetime.
fn lifetime(json: &serde_json::Value) -> Duration {
    let num = |k: &str| json.get(k).and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())));
    if let Some(s) = num("expires_in") {
        return Duration::from_secs(s);
    }
    if let Some(on) = num("expires_on") {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
        return Duration::from_secs(on.saturating_sub(now));
    }
    Duration::from_secs(3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_read_either_field() {
        assert_eq!(lifetime(&serde_json::json!({"expires_in": 3599})), Duration::from_secs(3599));
        assert_eq!(lifetime(&serde_json::json!({"expires_in": "60"})), Duration::from_secs(60));
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        let l = lifetime(&serde_json::json!({"expires_on": (now + 100).to_string()}));
        assert!(l <= Duration::from_secs(100) && l >= Duration::from_secs(98), "{l:?}");
        assert_eq!(path_of("http://127.0.0.1:5/msi/token/"), "/msi/token");
        assert_eq!(path_of("https://login.microsoftonline.com"), "");
    }
}
