//! Temporary keys from HTTP endpoints that answer JSON: the two a machine on AWS offers
//! (the ECS / EKS Pod Identity container credentials endpoint, and EC2 instance metadata,
//! IMDS), and the SSO portal's GetRoleCredentials.
//!
//! ```text
//! Container  GET URL, Authorization: token (file read again each time) ─► JSON ─► Lease
//!            URL: http://169.254.170.2 + AWS_CONTAINER_CREDENTIALS_RELATIVE_URI,
//!                 else AWS_CONTAINER_CREDENTIALS_FULL_URI (https anywhere; http only
//!                 to a loopback address or the ECS / EKS agents' link-local ones)
//! Imds       PUT /latest/api/token (TTL header) ─► token
//!              403/404/405: IMDSv1 (no token), unless AWS_EC2_METADATA_V1_DISABLED
//!            GET /latest/meta-data/iam/security-credentials/       ─► role name
//!            GET /latest/meta-data/iam/security-credentials/ROLE   ─► JSON ─► Lease
//! Sso        ~/.aws/sso/cache/SHA1.json (written by `aws sso login`) ─► access token
//!            GET PORTAL/federation/credentials?account_id=…&role_name=…
//!              x-amz-sso_bearer_token: token ─► {roleCredentials} ─► Lease
//! ```
//!
//! Both answer the same JSON: `AccessKeyId`, `SecretAccessKey`, `Token`, `Expiration`
//! (RFC 3339), IMDS with `"Code": "Success"`. The rules follow the AWS SDKs and Tools
//! Reference Guide ("Container credential provider", "IMDS credential provider"). Both
//! are asked again before the keys expire, like every temporary source
//! (credentials_fetch.rs); IMDS asks for a fresh session token each time, so no token
//! outlives its TTL.
//!
//! Reaching IMDS costs a connection attempt to a link-local address, which off EC2 can
//! hang until its time-out: [`IMDS_TIMEOUT`] keeps that short, and the chain asks IMDS
//! only where its keys could be of use (credentials.rs).
//!
//! Retries ([`Asking`]): both endpoints are asked as the SDKs ask them, with the shared
//! settings `metadata_service_num_attempts` and `metadata_service_timeout`. A request that
//! gets no answer is tried that many times (1 unless set: off AWS nothing answers, and each
//! attempt costs a time-out). An answer of 429 or 5xx is different: something is there and
//! busy (IMDS throttles a burst of callers on one instance; the container agent answers
//! 5xx while it starts), so it is waited out for at least [`BUSY_ATTEMPTS`] attempts,
//! whatever the setting, with a pause that doubles from [`FIRST_PAUSE`].

use super::credentials::Credentials;
use super::credentials_fetch::{own_transport, parse_rfc3339, Lease, MAX_ANSWER};
use crate::error::Error;
use bytes::Bytes;
use ferry_wire::Request;
use http::{HeaderValue, Method};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The default instance metadata address (IPv4), and the IPv6 one
/// (`AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6`).
pub const IMDS_ENDPOINT: &str = "http://169.254.169.254";
pub const IMDS_ENDPOINT_IPV6: &str = "http://[fd00:ec2::254]";

/// Connect and response time-out for IMDS: the SDKs' default of one second (botocore's
/// `metadata_service_timeout`), so a laptop without IMDS is not held up for long.
pub const IMDS_TIMEOUT: Duration = Duration::from_secs(1);

/// The session token's lifetime asked for: the SDKs' 6 hours (IMDS allows 1 s to 6 h).
const IMDS_TOKEN_TTL_SECS: &str = "21600";

/// Attempts at a request answered 429 or 5xx, at the least: the AWS SDK for Rust's IMDS
/// client makes 4 attempts at those by default and botocore's one; three, with pauses of
/// 100 and 200 ms, ride out a throttled burst without holding up a caller for long.
pub const BUSY_ATTEMPTS: u32 = 3;

/// The pause before the second attempt; each later one doubles it.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// How a metadata endpoint is asked: `metadata_service_num_attempts` and
/// `metadata_service_timeout` (`AWS_METADATA_SERVICE_NUM_ATTEMPTS` /
/// `AWS_METADATA_SERVICE_TIMEOUT`, else the profile's keys), as the SDKs name them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Asking {
    /// Attempts at a request that got no answer (refused, reset, timed out): 1 by default.
    pub attempts: u32,
    /// Each request's connect and response time-out; `None`: the endpoint's own
    /// ([`IMDS_TIMEOUT`], the container agent's 5 s).
    pub timeout: Option<Duration>,
}

impl Default for Asking {
    fn default() -> Asking {
        Asking { attempts: 1, timeout: None }
    }
}

impl Asking {
    /// From the two settings' values as given (environment variable, else profile key).
    pub(crate) fn from_settings(attempts: Option<String>, timeout: Option<String>) -> Result<Asking, Error> {
        let attempts = match attempts {
            None => 1,
            Some(v) => v.trim().parse::<u32>().ok().filter(|n| (1..=10).contains(n)).ok_or_else(|| {
                Error::Config(format!("metadata_service_num_attempts {v:?} is not a whole number from 1 to 10"))
            })?,
        };
        let timeout = match timeout {
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 300.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| {
                        Error::Config(format!("metadata_service_timeout {v:?} is not a number of seconds up to 300"))
                    })?,
            ),
        };
        Ok(Asking { attempts, timeout })
    }
}

/// The ECS agent's address for `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
pub const CONTAINER_HOST: &str = "http://169.254.170.2";

/// Connect and response time-out for the container agent: it is local to the task or
/// pod, so it answers in milliseconds; the SDKs use a few seconds (the Rust SDK 5 s).
const CONTAINER_TIMEOUT: Duration = Duration::from_secs(5);

/// EC2 instance metadata.
#[derive(Clone, Debug)]
pub struct Imds {
    /// `http://host[:port]`, no path.
    pub endpoint: String,
    /// `AWS_EC2_METADATA_V1_DISABLED`: never fall back to IMDSv1.
    pub v1_disabled: bool,
    /// Asked only because nothing else in the chain had keys (its address not configured):
    /// a failure then means "no credentials found", and says so with what to set.
    pub last_resort: bool,
    pub asking: Asking,
}

/// The container credentials endpoint.
#[derive(Clone, Debug)]
pub struct Container {
    /// The full URL asked.
    pub url: String,
    pub auth: Option<ContainerAuth>,
    pub asking: Asking,
}

/// The Authorization header's value for the container endpoint.
#[derive(Clone)]
pub enum ContainerAuth {
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
    Token(String),
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (EKS Pod Identity rotates it: read on each fetch).
    File(PathBuf),
}

impl std::fmt::Debug for ContainerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContainerAuth::Token(_) => f.write_str("Token(<redacted>)"),
            ContainerAuth::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

fn failed(source: &str, why: String) -> Error {
    Error::Auth { status: 0, code: "CredentialsEndpoint".into(), message: format!("{source}: {why}"), request_id: None }
}

/// Splits `http://host:port/path?query` into the endpoint part and the request target.
fn split_url(url: &str) -> (&str, String) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => (&url[..after_scheme + i], url[after_scheme + i..].to_owned()),
        None => (url, "/".to_owned()),
    }
}

/// Whether an answer says the endpoint is there but busy.
fn busy(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

/// One request without a body: [`send`].
#[allow(clippy::too_many_arguments)]
async fn call(
    source: &str,
    base: &str,
    method: Method,
    target: String,
    headers: &[(&'static str, HeaderValue)],
    ca_file: Option<&Path>,
    asking: Asking,
    default_timeout: Duration,
) -> Result<(u16, Bytes), Error> {
    send(source, base, method, target, headers, Bytes::new(), ca_file, asking, default_timeout).await
}

/// One request, asked again as [`Asking`] says; the status and the body (at most
/// [`MAX_ANSWER`]) of an answer that is not busy. No answer, or a busy one on the last
/// attempt, is an error that says how many attempts were made.
#[allow(clippy::too_many_arguments)]
async fn send(
    source: &str,
    base: &str,
    method: Method,
    target: String,
    headers: &[(&'static str, HeaderValue)],
    body: Bytes,
    ca_file: Option<&Path>,
    asking: Asking,
    default_timeout: Duration,
) -> Result<(u16, Bytes), Error> {
    let timeout = asking.timeout.unwrap_or(default_timeout);
    let (_, transport) = own_transport(base, ca_file, Some(timeout))?;
    let times = |n: u32| if n == 1 { "1 attempt".to_owned() } else { format!("{n} attempts") };
    let mut pause = FIRST_PAUSE;
    let mut attempt = 1;
    loop {
        let mut req = Request::new(method.clone(), target.clone());
        for (name, value) in headers {
            req.headers.insert(*name, value.clone());
        }
        if !body.is_empty() {
            req.body = ferry_wire::RequestBody::from(body.clone());
        }
        req.hedge = false;
        let answer = match transport.send(req).await {
            Ok(resp) => {
                let status = resp.status.as_u16();
                match resp.body.collect(MAX_ANSWER).await {
                    Ok(body) => Ok((status, body)),
                    Err(e) => Err(format!("the answer was cut ({e})")),
                }
            }
            Err(e) => Err(format!("no answer ({e})")),
        };
        let limit = match answer {
            Ok((status, body)) if !busy(status) => return Ok((status, body)),
            Ok(_) => asking.attempts.max(BUSY_ATTEMPTS),
            Err(_) => asking.attempts,
        };
        if attempt >= limit {
            return Err(failed(
                source,
                match answer {
                    Ok((status, body)) => {
                        let said = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned();
                        format!(
                            "{method} {target} answered {status}{} ({})",
                            if said.is_empty() { String::new() } else { format!(": {said}") },
                            times(attempt)
                        )
                    }
                    Err(why) => format!("{why} ({})", times(attempt)),
                },
            ));
        }
        tracing::debug!(%source, attempt, ?pause, "credentials: metadata endpoint busy or silent; asking again");
        tokio::time::sleep(pause).await;
        pause *= 2;
        attempt += 1;
    }
}

/// The keys in a container or IMDS answer.
pub(crate) fn parse_metadata_json(body: &[u8]) -> Result<Lease, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
    if let Some(code) = v["Code"].as_str().filter(|c| *c != "Success") {
        return Err(format!("the answer's Code is {code:?}: {}", v["Message"].as_str().unwrap_or("")));
    }
    let field = |name: &str| v[name].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let (Some(id), Some(secret)) = (field("AccessKeyId"), field("SecretAccessKey")) else {
        // The ECS agent's error answers are {"code": ..., "message": ...}.
        let said = v["message"].as_str().or(v["Message"].as_str()).unwrap_or("");
        return Err(format!(
            "the answer lacks AccessKeyId or SecretAccessKey{}",
            if said.is_empty() { String::new() } else { format!(": {said}") }
        ));
    };
    let expires = match field("Expiration") {
        None => None,
        Some(t) => Some(parse_rfc3339(&t).ok_or_else(|| format!("its Expiration {t:?} is not an RFC 3339 time"))?),
    };
    Ok(Lease {
        credentials: Credentials { access_key_id: id, secret_access_key: secret, session_token: field("Token") },
        expires,
    })
}

impl Imds {
    pub fn describe(&self) -> String {
        format!("instance metadata (IMDS at {})", self.endpoint)
    }

    pub(crate) async fn fetch(&self) -> Result<Lease, Error> {
        let fetched = self.fetch_from_endpoint().await;
        match fetched {
            Err(Error::Auth { status, code, message, request_id }) if self.last_resort => Err(Error::Auth {
                status,
                code,
                message: format!(
                    "no credentials found: nothing in the environment, the shared files or a container endpoint, \
                     and {message}; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a profile, \
                     or pass --no-sign-request for public buckets"
                ),
                request_id,
            }),
            other => other,
        }
    }

    async fn fetch_from_endpoint(&self) -> Result<Lease, Error> {
        let source = self.describe();
        let base = self.endpoint.trim_end_matches('/');
        let ttl = HeaderValue::from_static(IMDS_TOKEN_TTL_SECS);
        let (status, body) = call(
            &source,
            base,
            Method::PUT,
            "/latest/api/token".into(),
            &[("x-aws-ec2-metadata-token-ttl-seconds", ttl)],
            None,
            self.asking,
            IMDS_TIMEOUT,
        )
        .await?;
        let token = match status {
            200 => {
                let t = String::from_utf8_lossy(&body).trim().to_owned();
                Some(
                    HeaderValue::from_str(&t)
                        .map_err(|_| failed(&source, "its session token is not a header value".into()))?,
                )
            }
            // IMDSv1 only, or a proxy that forbids PUT: the SDKs then ask without a token.
            403..=405 if !self.v1_disabled => {
                tracing::debug!(status, "credentials: IMDS gave no session token; asking with IMDSv1");
                None
            }
            _ => {
                return Err(failed(
                    &source,
                    format!(
                        "PUT /latest/api/token answered {status}{}",
                        if self.v1_disabled { " (IMDSv1 is disabled)" } else { "" }
                    ),
                ))
            }
        };
        let headers: Vec<(&'static str, HeaderValue)> =
            token.into_iter().map(|t| ("x-aws-ec2-metadata-token", t)).collect();
        let get = |target: String| call(&source, base, Method::GET, target, &headers, None, self.asking, IMDS_TIMEOUT);
        const ROLES: &str = "/latest/meta-data/iam/security-credentials/";
        let (status, body) = get(ROLES.into()).await?;
        let role = String::from_utf8_lossy(&body).lines().next().unwrap_or("").trim().to_owned();
        match status {
            200 if !role.is_empty() => {}
            200 | 404 => return Err(failed(&source, "the instance has no IAM role (instance profile)".into())),
            401 => return Err(failed(&source, "401: IMDSv2 is required and no session token was given".into())),
            s => return Err(failed(&source, format!("GET {ROLES} answered {s}"))),
        }
        let (status, body) = get(format!("{ROLES}{role}")).await?;
        if status != 200 {
            return Err(failed(&source, format!("GET {ROLES}{role} answered {status}")));
        }
        let lease = parse_metadata_json(&body).map_err(|why| failed(&source, format!("role {role}: {why}")))?;
        tracing::debug!(role = %role, v2 = !headers.is_empty(), "credentials: IMDS role");
        Ok(lease)
    }
}

/// Whether the container endpoint may be reached over plain http at `host`: loopback, or
/// the ECS (169.254.170.2) and EKS Pod Identity (169.254.170.23, fd00:ec2::23) agents.
fn container_host_allowed(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => {
            ip.is_loopback()
                || ["169.254.170.2", "169.254.170.23", "fd00:ec2::23"]
                    .iter()
                    .any(|a| ip == a.parse::<std::net::IpAddr>().unwrap())
        }
        Err(_) => false,
    }
}

impl Container {
    /// From `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` / `_FULL_URI` (relative first, as in
    /// the SDKs); `None` when neither is set.
    pub(crate) fn from_vars(
        relative: Option<String>,
        full: Option<String>,
        token: Option<String>,
        token_file: Option<String>,
        asking: Asking,
    ) -> Result<Option<Container>, Error> {
        let url = match (relative, full) {
            (Some(rel), _) => format!("{CONTAINER_HOST}{}{rel}", if rel.starts_with('/') { "" } else { "/" }),
            (None, Some(full)) => {
                let endpoint = ferry_wire::Endpoint::parse(&full)
                    .map_err(|e| Error::Config(format!("AWS_CONTAINER_CREDENTIALS_FULL_URI: {e}")))?;
                if endpoint.scheme == ferry_wire::Scheme::Http && !container_host_allowed(&endpoint.host) {
                    return Err(Error::Config(format!(
                        "AWS_CONTAINER_CREDENTIALS_FULL_URI {full}: plain http is allowed only to a loopback address or \
                         the ECS / EKS agents (169.254.170.2, 169.254.170.23, fd00:ec2::23); use https"
                    )));
                }
                full
            }
            (None, None) => return Ok(None),
        };
        // The token file wins over the token, as in the SDKs.
        let auth = token_file.map(|f| ContainerAuth::File(PathBuf::from(f))).or(token.map(ContainerAuth::Token));
        Ok(Some(Container { url, auth, asking }))
    }

    pub fn describe(&self) -> String {
        format!("container credentials ({})", self.url)
    }

    pub(crate) async fn fetch(&self, ca_file: Option<&Path>) -> Result<Lease, Error> {
        let source = self.describe();
        let token = match &self.auth {
            None => None,
            Some(ContainerAuth::Token(t)) => Some(t.clone()),
            Some(ContainerAuth::File(path)) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| Error::Io { path: path.display().to_string(), error: e })?
                    .trim()
                    .to_owned(),
            ),
        };
        let mut headers = vec![("accept", HeaderValue::from_static("application/json"))];
        if let Some(t) = token {
            // A value with CR or LF would split the request's head: refused, as the SDKs do.
            let v = HeaderValue::from_str(&t)
                .map_err(|_| failed(&source, "the authorization token is not a valid header value".into()))?;
            headers.push(("authorization", v));
        }
        let (base, target) = split_url(&self.url);
        let (status, body) =
            call(&source, base, Method::GET, target, &headers, ca_file, self.asking, CONTAINER_TIMEOUT).await?;
        if status != 200 {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            return Err(failed(&source, format!("answered {status}: {}", text.trim())));
        }
        parse_metadata_json(&body).map_err(|why| failed(&source, why))
    }
}

/// An SSO profile's role, and where its login's token is cached.
#[derive(Clone, Debug)]
pub struct Sso {
    pub profile: String,
    /// `~/.aws/sso/cache/<sha1 hex of the sso-session name, or of the start URL>.json`.
    pub token_file: PathBuf,
    pub account_id: String,
    pub role_name: String,
    /// `scheme://host[:port]` of the portal.
    pub portal: String,
    /// `scheme://host[:port]` of SSO OIDC, where a token about to expire is refreshed;
    /// `None` for a legacy profile (`sso_start_url` in the profile), whose token the SDKs
    /// never refresh.
    pub oidc: Option<String>,
}

/// The SSO cache file's name for `key` (the sso-session's name, or a legacy profile's
/// `sso_start_url`): its SHA-1 in hex, as the AWS CLI names it.
pub(crate) fn sso_cache_name(key: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, key.as_bytes());
    format!("{}.json", hex::encode(digest.as_ref()))
}

impl Sso {
    pub fn describe(&self) -> String {
        format!(
            "SSO of profile '{}' (role {} in account {}, portal {})",
            self.profile, self.role_name, self.account_id, self.portal
        )
    }

    pub(crate) async fn fetch(&self, ca_file: Option<&Path>) -> Result<Lease, Error> {
        let source = self.describe();
        let login = format!("run `aws sso login --profile {}`", self.profile);
        let text = std::fs::read_to_string(&self.token_file).map_err(|e| {
            failed(&source, format!("no cached login token at {} ({e}); {login}", self.token_file.display()))
        })?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| failed(&source, format!("{} is not JSON ({e})", self.token_file.display())))?;
        let cached = v["accessToken"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| failed(&source, format!("{} has no accessToken; {login}", self.token_file.display())))?
            .to_owned();
        let expires_at = v["expiresAt"].as_str().map(str::to_owned);
        let expires = match &expires_at {
            None => None,
            Some(at) => Some(
                parse_rfc3339(at)
                    .ok_or_else(|| failed(&source, format!("its token's expiresAt {at:?} is not an RFC 3339 time")))?,
            ),
        };
        let now = SystemTime::now();
        let due = expires.is_some_and(|e| e <= now + SSO_REFRESH_WINDOW);
        let token = match (&self.oidc, due) {
            (Some(oidc), true) => match self.refresh(oidc, &v, ca_file).await {
                Ok(fresh) => fresh,
                // Still good for now: used, and refreshing is tried again next time.
                Err(why) if expires.is_some_and(|e| e > now) => {
                    tracing::debug!(profile = %self.profile, %why, "credentials: SSO token not refreshed; the cached one is still valid");
                    cached
                }
                Err(why) => {
                    let at = expires_at.unwrap_or_default();
                    return Err(failed(
                        &source,
                        format!("the cached login token expired at {at} and could not be refreshed ({why}); {login}"),
                    ));
                }
            },
            _ if expires.is_some_and(|e| e <= now) => {
                let at = expires_at.unwrap_or_default();
                return Err(failed(&source, format!("the cached login token expired at {at}; {login}")));
            }
            _ => cached,
        };
        let bearer = HeaderValue::from_str(&token)
            .map_err(|_| failed(&source, "the cached token is not a valid header value".into()))?;
        let target = format!(
            "/federation/credentials?account_id={}&role_name={}",
            ferry_proto::encoding::uri_encode(&self.account_id, true),
            ferry_proto::encoding::uri_encode(&self.role_name, true)
        );
        let headers = [("x-amz-sso_bearer_token", bearer), ("accept", HeaderValue::from_static("application/json"))];
        let (status, body) =
            call(&source, &self.portal, Method::GET, target, &headers, ca_file, Asking::default(), CONTAINER_TIMEOUT)
                .await?;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if status != 200 {
            let said = v["message"].as_str().or(v["Message"].as_str()).unwrap_or("");
            let hint = if status == 401 || status == 403 { format!("; {login}") } else { String::new() };
            return Err(failed(&source, format!("GetRoleCredentials answered {status} {said}{hint}")));
        }
        let c = &v["roleCredentials"];
        let field = |name: &str| c[name].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        let (Some(id), Some(secret)) = (field("accessKeyId"), field("secretAccessKey")) else {
            return Err(failed(&source, "the answer has no roleCredentials accessKeyId/secretAccessKey".into()));
        };
        // Milliseconds since the epoch (SSO API Reference, "RoleCredentials").
        let expires = c["expiration"].as_u64().map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
        Ok(Lease {
            credentials: Credentials {
                access_key_id: id,
                secret_access_key: secret,
                session_token: field("sessionToken"),
            },
            expires,
        })
    }

    /// Refreshes the cached login with SSO OIDC's CreateToken (grant `refresh_token`, the
    /// client `aws sso login` registered), writes the new token back to the cache file as
    /// the AWS CLI does (every other field kept; a temporary file renamed over it, so a
    /// reader never sees half a file), and returns it. Why it could not, in a few words.
    async fn refresh(&self, oidc: &str, cached: &serde_json::Value, ca_file: Option<&Path>) -> Result<String, String> {
        let field = |name: &str| cached[name].as_str().filter(|s| !s.is_empty());
        let (Some(client_id), Some(client_secret), Some(refresh_token)) =
            (field("clientId"), field("clientSecret"), field("refreshToken"))
        else {
            return Err("the cache holds no refresh token and client registration".into());
        };
        if let Some(at) = field("registrationExpiresAt") {
            if parse_rfc3339(at).is_some_and(|t| t <= SystemTime::now()) {
                return Err(format!("the client registration expired at {at}"));
            }
        }
        let body = serde_json::json!({
            "clientId": client_id,
            "clientSecret": client_secret,
            "grantType": "refresh_token",
            "refreshToken": refresh_token,
        });
        let headers = [("content-type", HeaderValue::from_static("application/json"))];
        let source = format!("SSO OIDC ({oidc})");
        let asked = SystemTime::now();
        let (status, answer) = send(
            &source,
            oidc,
            Method::POST,
            "/token".into(),
            &headers,
            Bytes::from(body.to_string()),
            ca_file,
            Asking::default(),
            CONTAINER_TIMEOUT,
        )
        .await
        .map_err(|e| e.to_string())?;
        let a: serde_json::Value = serde_json::from_slice(&answer).unwrap_or_default();
        if status != 200 {
            let said = a["error_description"].as_str().or(a["error"].as_str()).or(a["message"].as_str()).unwrap_or("");
            return Err(format!("CreateToken answered {status} {said}").trim().to_owned());
        }
        let (Some(token), Some(lifetime)) =
            (a["accessToken"].as_str().filter(|t| !t.is_empty()), a["expiresIn"].as_u64())
        else {
            return Err("CreateToken's answer has no accessToken and expiresIn".into());
        };
        let mut updated = cached.clone();
        updated["accessToken"] = token.into();
        updated["expiresAt"] = ferry_proto::encoding::iso8601(asked + Duration::from_secs(lifetime)).into();
        if let Some(next) = a["refreshToken"].as_str().filter(|t| !t.is_empty()) {
            updated["refreshToken"] = next.into();
        }
        if let Err(e) = write_cache(&self.token_file, &updated) {
            // The token is good for this process either way; the next one refreshes again.
            tracing::warn!(file = %self.token_file.display(), error = %e, "credentials: the refreshed SSO token could not be cached");
        }
        tracing::debug!(profile = %self.profile, "credentials: SSO token refreshed");
        Ok(token.to_owned())
    }
}

/// A cached SSO token is refreshed once it expires within this: the advisory window of
/// botocore's SSO token provider, so a long run does not meet an expired token mid-way.
pub const SSO_REFRESH_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Writes `value` to `path` whole or not at all: a temporary file beside it, readable by
/// its owner only (it holds a token and a client secret), renamed over it.
fn write_cache(path: &Path, value: &serde_json::Value) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.ferry-{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(serde_json::to_string_pretty(value).unwrap_or_default().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_json() {
        let l = parse_metadata_json(
            br#"{"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": "ASIA1", "SecretAccessKey": "s",
                "Token": "t", "Expiration": "2030-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(
            (l.credentials.access_key_id.as_str(), l.credentials.session_token.as_deref()),
            ("ASIA1", Some("t"))
        );
        assert!(l.expires.is_some());
        let e = parse_metadata_json(br#"{"Code": "AssumeRoleUnauthorizedAccess", "Message": "no"}"#).unwrap_err();
        assert!(e.contains("AssumeRoleUnauthorizedAccess"), "{e}");
        let e = parse_metadata_json(br#"{"code": "InvalidToken", "message": "bad token"}"#).unwrap_err();
        assert!(e.contains("bad token"), "{e}");
    }

    #[test]
    fn container_urls() {
        let c = Container::from_vars(
            Some("/v2/creds/abc".into()),
            Some("http://127.0.0.1:1/x".into()),
            None,
            None,
            Asking::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.url, "http://169.254.170.2/v2/creds/abc");
        for ok in [
            "http://127.0.0.1:8080/creds",
            "http://localhost/c",
            "http://[::1]:9/c",
            "http://169.254.170.23/v1/credentials",
            "https://creds.example.com/c",
        ] {
            assert!(Container::from_vars(None, Some(ok.into()), None, None, Asking::default()).is_ok(), "{ok}");
        }
        let err = Container::from_vars(None, Some("http://creds.example.com/c".into()), None, None, Asking::default())
            .unwrap_err();
        assert!(err.to_string().contains("use https"), "{err}");
        let c = Container::from_vars(
            None,
            Some("http://127.0.0.1/c".into()),
            Some("tok".into()),
            Some("/f".into()),
            Asking::default(),
        )
        .unwrap()
        .unwrap();
        assert!(matches!(c.auth, Some(ContainerAuth::File(_))));
        assert!(!format!("{:?}", ContainerAuth::Token("secret-tok".into())).contains("secret-tok"));
        assert_eq!(split_url("http://127.0.0.1:9/a/b?c=d"), ("http://127.0.0.1:9", "/a/b?c=d".to_owned()));
        assert_eq!(split_url("http://h"), ("http://h", "/".to_owned()));
    }

    /// An IMDSv1-only endpoint (the token PUT answered 405, as an old proxy does): a
    /// stand-in on a loopback socket, since the emulator always offers IMDSv2. The keys are
    /// read without a token, unless IMDSv1 is disabled; one that answers the PUT 400 is
    /// not taken as IMDSv1.
    #[test]
    fn imds_falls_back_to_v1_only_when_the_token_call_is_refused() {
        let serve = |put_status: &'static str| {
            scripted(move |_, line| {
                if line.starts_with("PUT ") {
                    (put_status, String::new())
                } else if line.contains("/security-credentials/role-v1 ") {
                    ("200 OK", r#"{"Code":"Success","AccessKeyId":"ASIAV1","SecretAccessKey":"s","Token":"t","Expiration":"2030-01-01T00:00:00Z"}"#.to_owned())
                } else {
                    ("200 OK", "role-v1\n".to_owned())
                }
            })
        };
        let fetch_as = |endpoint: &str, v1_disabled: bool, last_resort: bool| {
            super::super::credentials_fetch::Provider::Imds(Imds {
                endpoint: endpoint.to_owned(),
                v1_disabled,
                last_resort,
                asking: Asking::default(),
            })
            .fetch_blocking(None)
        };
        let fetch = |endpoint: &str, v1_disabled: bool| fetch_as(endpoint, v1_disabled, false);
        let (url, seen) = serve("405 Method Not Allowed");
        let lease = fetch(&url, false).unwrap();
        assert_eq!(lease.credentials.access_key_id, "ASIAV1");
        let log = seen.lock().unwrap().clone();
        assert_eq!(log.len(), 3, "{log:?}");
        assert!(log[1..].iter().all(|l| l.ends_with("token=false")), "{log:?}");
        let err = fetch(&url, true).unwrap_err().to_string();
        assert!(err.contains("answered 405") && err.contains("IMDSv1 is disabled"), "{err}");
        let (url, _) = serve("400 Bad Request");
        let err = fetch(&url, false).unwrap_err().to_string();
        assert!(err.contains("instance metadata") && err.contains("answered 400"), "{err}");
        assert!(!err.contains("no credentials found"), "{err}");
        // Asked only as the chain's last resort, its failure reads as what it means.
        let err = fetch_as(&url, false, true).unwrap_err().to_string();
        assert!(err.contains("no credentials found") && err.contains("answered 400"), "{err}");
        assert!(err.contains("--no-sign-request"), "{err}");
    }

    /// A stand-in endpoint on a loopback socket that answers each request as `answer`
    /// says from its index and request line; what it saw, in order: each request line
    /// and whether it carried an IMDSv2 token (`GET /x HTTP/1.1 token=true`). The
    /// emulator can be made neither to answer 429 or 5xx nor to refuse IMDSv2, so the
    /// tests of those use this.
    fn scripted(
        answer: impl Fn(usize, &str) -> (&'static str, String) + Send + 'static,
    ) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let (mut head, mut line) = (String::new(), String::new());
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    head.push_str(&line);
                    line.clear();
                }
                let request_line = head.lines().next().unwrap_or("").to_owned();
                let with_token = head.to_ascii_lowercase().contains("x-aws-ec2-metadata-token:");
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push(format!("{request_line} token={with_token}"));
                    log.len() - 1
                };
                let (status, body) = answer(n, &request_line);
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, seen)
    }

    const KEYS_JSON: &str = r#"{"Code":"Success","AccessKeyId":"ASIABUSY","SecretAccessKey":"s","Token":"t","Expiration":"2030-01-01T00:00:00Z"}"#;

    fn imds_at(endpoint: &str, asking: Asking) -> super::super::credentials_fetch::Provider {
        super::super::credentials_fetch::Provider::Imds(Imds {
            endpoint: endpoint.to_owned(),
            v1_disabled: false,
            last_resort: false,
            asking,
        })
    }

    /// A throttled or starting endpoint (429, 5xx) is asked again, at least three times
    /// whatever the setting, with a pause between; one still busy on the last attempt fails
    /// with its status, what it said and the count. A 4xx is not asked again.
    #[test]
    fn busy_metadata_endpoints_are_asked_again_and_others_are_not() {
        // IMDS: the token PUT throttled twice, the role list once.
        let (url, seen) = scripted(|n, line| match n {
            0 => ("429 Too Many Requests", String::new()),
            1 => ("503 Service Unavailable", "busy".into()),
            3 => ("500 Internal Server Error", String::new()),
            _ if line.starts_with("PUT ") => ("200 OK", "tok".into()),
            _ if line.contains("/security-credentials/role-a ") => ("200 OK", KEYS_JSON.into()),
            _ => ("200 OK", "role-a\n".into()),
        });
        let started = std::time::Instant::now();
        let lease = imds_at(&url, Asking::default()).fetch_blocking(None).unwrap();
        assert_eq!(lease.credentials.access_key_id, "ASIABUSY");
        // Pauses of 100 and 200 ms before the token's third attempt, 100 before the list's second.
        assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
        let log = seen.lock().unwrap().clone();
        let kinds: Vec<&str> = log.iter().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(kinds, ["PUT", "PUT", "PUT", "GET", "GET", "GET"], "{log:?}");

        // Busy to the end: three attempts, or as many as the setting asks if more.
        let (url, seen) = scripted(|_, _| ("503 Service Unavailable", "slow down".into()));
        let err = imds_at(&url, Asking::default()).fetch_blocking(None).unwrap_err().to_string();
        assert!(err.contains("PUT /latest/api/token answered 503: slow down (3 attempts)"), "{err}");
        assert_eq!(seen.lock().unwrap().len(), 3);
        let (url, seen) = scripted(|_, _| ("500 Internal Server Error", String::new()));
        let four = Asking { attempts: 4, timeout: None };
        let err = imds_at(&url, four).fetch_blocking(None).unwrap_err().to_string();
        assert!(err.contains("answered 500 (4 attempts)"), "{err}");
        assert_eq!(seen.lock().unwrap().len(), 4);

        // A refusal is final at once.
        let (url, seen) = scripted(|_, line| {
            if line.starts_with("PUT ") {
                ("200 OK", "tok".into())
            } else {
                ("404 Not Found", String::new())
            }
        });
        let err = imds_at(&url, Asking::default()).fetch_blocking(None).unwrap_err().to_string();
        assert!(err.contains("no IAM role"), "{err}");
        assert_eq!(seen.lock().unwrap().len(), 2);

        // The container agent starting: 502 once, then its keys.
        let (url, seen) =
            scripted(|n, _| if n == 0 { ("502 Bad Gateway", String::new()) } else { ("200 OK", KEYS_JSON.into()) });
        let c =
            Container::from_vars(None, Some(format!("{url}/creds")), None, None, Asking::default()).unwrap().unwrap();
        let lease = super::super::credentials_fetch::Provider::Container(c).fetch_blocking(None).unwrap();
        assert_eq!(lease.credentials.access_key_id, "ASIABUSY");
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    /// No answer at all (a port nothing listens on) is asked `attempts` times: once by
    /// default, as the SDKs do, so a machine off AWS is not held up.
    #[test]
    fn a_silent_endpoint_is_asked_as_often_as_the_setting_says() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let err = imds_at(&url, Asking::default()).fetch_blocking(None).unwrap_err().to_string();
        assert!(err.contains("no answer") && err.contains("(1 attempt)"), "{err}");
        let two = Asking { attempts: 2, timeout: Some(Duration::from_millis(500)) };
        let started = std::time::Instant::now();
        let err = imds_at(&url, two).fetch_blocking(None).unwrap_err().to_string();
        assert!(err.contains("no answer") && err.contains("(2 attempts)"), "{err}");
        assert!(started.elapsed() >= FIRST_PAUSE, "{:?}", started.elapsed());
    }

    #[test]
    fn asking_settings_parse_and_bad_ones_say_which() {
        assert_eq!(Asking::from_settings(None, None).unwrap(), Asking { attempts: 1, timeout: None });
        assert_eq!(
            Asking::from_settings(Some(" 3".into()), Some("2.5".into())).unwrap(),
            Asking { attempts: 3, timeout: Some(Duration::from_millis(2500)) }
        );
        for bad in ["0", "-1", "three", "11"] {
            let err = Asking::from_settings(Some(bad.into()), None).unwrap_err().to_string();
            assert!(err.contains("metadata_service_num_attempts") && err.contains(bad), "{err}");
        }
        for bad in ["0", "soon", "NaN", "301"] {
            let err = Asking::from_settings(None, Some(bad.into())).unwrap_err().to_string();
            assert!(err.contains("metadata_service_timeout") && err.contains(bad), "{err}");
        }
    }

    /// The cache file is named by the key's SHA-1 in hex (the value `sha1sum` prints).
    #[test]
    fn sso_cache_names() {
        assert_eq!(sso_cache_name("my-sso"), "0ad374308c5a4e22f723adf10145eafad7c4031c.json");
    }
}
