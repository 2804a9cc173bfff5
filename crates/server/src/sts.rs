//! STS `AssumeRoleWithWebIdentity` and `AssumeRole`, and the SSO portal's
//! `GetRoleCredentials`, and a container credentials endpoint, on the server's own
//! endpoint, so a client's web identity, assume-role, SSO and container credentials run
//! against a real answer:
//! temporary keys, a session token and an expiry, which the server then accepts on S3
//! requests until they expire.
//!
//! ```text
//! GET|POST / with Action=… (query, or urlencoded POST body)
//!   ├─ AssumeRoleWithWebIdentity: WebIdentityToken non-empty? ──no──► 400 InvalidIdentityToken
//!   ├─ AssumeRole: SigV4 (service sts) by the server's keys or keys it issued (with their
//!   │    session token, unexpired), body hash as signed ──no──► 403 the SigV4 error
//!   └─ issue: access key ASIA…, secret, session token, expiry = now + lifetime
//! GET /federation/credentials?account_id=…&role_name=… with x-amz-sso_bearer_token
//!   └─ token non-empty? ──no──► 401 UnauthorizedException; else issue, answered as JSON
//! POST /token, JSON {clientId, clientSecret, grantType: refresh_token, refreshToken}
//!   └─ all non-empty? ──no──► 400 invalid_request / unsupported_grant_type; else a new
//!      access token and refresh token (SSO OIDC's CreateToken, as a refresh)
//! GET /_ferry/container-credentials with Authorization (the ECS / EKS agent's answer)
//!   └─ non-empty? ──no──► 401; else issue, answered as JSON
//!        └─ S3 request signed with that key ─► SigV4 with its secret, then
//!             x-amz-security-token must be the one issued (else 403 InvalidToken)
//!             and the expiry not passed (else 400 ExpiredToken)
//! ```
//!
//! This is an emulator: the web identity token is not verified (there is no OpenID
//! Connect provider to ask), any non-empty token is taken, and `RoleArn` is only echoed;
//! there are no policies, so any caller the server authenticates may assume any role (an
//! anonymous server, which checks no signatures, issues keys to anyone). The lifetime is
//! the request's `DurationSeconds` when given (any positive value, where AWS takes
//! 900-43200, so tests can see keys expire), else [`crate::ServeConfig::sts_lifetime`].
//! Issued keys live in memory until they expire; the dev keys keep working beside them.

use crate::s3::S3Error;
use crate::types::{Request, Response};
use ferry_proto::encoding::parse_query;
use ferry_proto::sigv4;
use ferry_proto::sts::{self, TemporaryCredentials};
use http::Method;
use rand::Rng;
use sha2::Digest;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How far a signed AssumeRole's date may be from the server's clock (SigV4's 15 minutes).
const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

/// Where the server answers as a container credentials agent: under `/_ferry`, which path-
/// style can never read as a bucket (names start with a letter or digit).
pub const CONTAINER_PATH: &str = "/_ferry/container-credentials";

/// The header the SSO portal takes its access token in.
const SSO_BEARER_TOKEN: &str = "x-amz-sso_bearer_token";

/// Largest form body read (the token is a JWT of a few KiB; AWS allows 20,000 characters).
const MAX_FORM: usize = 64 * 1024;

struct Issued {
    secret: String,
    token: String,
    expires: SystemTime,
}

/// The keys handed out, by access key id.
pub struct Sts {
    lifetime: Duration,
    issued: Mutex<HashMap<String, Issued>>,
}

impl Sts {
    pub fn new(lifetime: Duration) -> Sts {
        Sts { lifetime, issued: Mutex::new(HashMap::new()) }
    }

    /// Whether `req` is an STS call rather than S3: `/` with an `Action` parameter, or a
    /// urlencoded POST to `/` (S3 has no POST on the service root).
    pub fn is_sts(req: &Request) -> bool {
        if req.raw_path != "/" {
            return false;
        }
        let form = req
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        req.raw_query.split('&').any(|p| p.starts_with("Action=")) || (req.method == Method::POST && form)
    }

    /// Answers one STS call; `keys` are the server's own (`None`: anonymous). Returns the
    /// action's name (for metrics) with the answer.
    pub async fn answer(
        &self,
        req: &mut Request,
        request_id: &str,
        keys: Option<&(String, String)>,
    ) -> (&'static str, Response) {
        let mut action = "STS";
        let resp = match self.assume(req, keys, &mut action).await {
            Ok((creds, role_arn, session)) => {
                let xml = sts::result_xml(action, &creds, &role_arn, &session, request_id);
                Response::with_body(200, "text/xml", xml)
            }
            Err(e) => Response::with_body(e.status, "text/xml", sts::error_xml(e.code, &e.message, request_id)),
        };
        (action, resp)
    }

    async fn assume(
        &self,
        req: &mut Request,
        keys: Option<&(String, String)>,
        action: &mut &'static str,
    ) -> Result<(TemporaryCredentials, String, String), S3Error> {
        if req.method != Method::GET && req.method != Method::POST {
            return Err(S3Error::new(405, "MethodNotAllowed", "STS takes GET or POST."));
        }
        let mut params = parse_query(&req.raw_query);
        let mut body = bytes::Bytes::new();
        if req.method == Method::POST {
            body =
                req.body.read_to_end(MAX_FORM).await.map_err(|_| {
                    S3Error::new(400, "InvalidInput", "The form body could not be read or is too large.")
                })?;
            let text = std::str::from_utf8(&body)
                .map_err(|_| S3Error::new(400, "InvalidInput", "The form body is not UTF-8."))?;
            params.extend(parse_query(text.trim()));
        }
        let get = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("");
        match get("Action") {
            sts::ASSUME_ROLE_WITH_WEB_IDENTITY => {
                *action = sts::ASSUME_ROLE_WITH_WEB_IDENTITY;
                if get("WebIdentityToken").is_empty() {
                    return Err(S3Error::new(400, "InvalidIdentityToken", "The web identity token is empty."));
                }
            }
            sts::ASSUME_ROLE => {
                *action = sts::ASSUME_ROLE;
                if let Some(keys) = keys {
                    self.verify_signed(req, &body, keys)?;
                }
            }
            "" => return Err(S3Error::new(400, "MissingAction", "The request names no Action.")),
            _ => {
                return Err(S3Error::new(
                    400,
                    "InvalidAction",
                    "ferry serve answers only the STS actions AssumeRoleWithWebIdentity and AssumeRole.",
                ))
            }
        }
        let (role_arn, session) = (get("RoleArn").to_owned(), get("RoleSessionName").to_owned());
        if role_arn.is_empty() || session.is_empty() {
            return Err(S3Error::new(400, "ValidationError", "RoleArn and RoleSessionName are required."));
        }
        let lifetime = match get("DurationSeconds") {
            "" => self.lifetime,
            s => match s.parse::<u64>() {
                Ok(n) if n > 0 => Duration::from_secs(n),
                _ => return Err(S3Error::new(400, "ValidationError", "DurationSeconds is not a positive number.")),
            },
        };
        let creds = self.issue(lifetime);
        tracing::debug!(access_key_id = %creds.access_key_id, ?lifetime, %role_arn, "sts: issued temporary keys");
        Ok((creds, role_arn, session))
    }

    /// Makes temporary keys living `lifetime` and keeps them for [`Sts::check`].
    fn issue(&self, lifetime: Duration) -> TemporaryCredentials {
        let creds = {
            let mut rng = rand::thread_rng();
            let mut word = |n: usize, alphabet: &[u8]| -> String {
                (0..n).map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char).collect()
            };
            const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
            // Letters and digits only: a presigned URL carries the token percent-encoded,
            // and the check below compares it as sent.
            const MIXED: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
            // AWS's temporary access keys start with ASIA; the rest is the same shape.
            TemporaryCredentials {
                access_key_id: format!("ASIA{}", word(16, UPPER)),
                secret_access_key: word(40, MIXED),
                session_token: word(120, MIXED),
                expiration: SystemTime::now() + lifetime,
            }
        };
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let now = SystemTime::now();
        issued.retain(|_, i| i.expires > now);
        issued.insert(
            creds.access_key_id.clone(),
            Issued {
                secret: creds.secret_access_key.clone(),
                token: creds.session_token.clone(),
                expires: creds.expiration,
            },
        );
        creds
    }

    /// Whether `req` is the SSO portal's GetRoleCredentials: `GET /federation/credentials`
    /// with `account_id` and `role_name` and the bearer token header. Path-style S3 would
    /// read it as object `credentials` of bucket `federation`; the header and the
    /// parameters, which no S3 GET carries, tell them apart.
    pub fn is_sso(req: &Request) -> bool {
        req.method == Method::GET
            && req.raw_path == "/federation/credentials"
            && req.headers.contains_key(SSO_BEARER_TOKEN)
            && req.raw_query.split('&').any(|p| p.starts_with("role_name="))
    }

    /// Answers GetRoleCredentials: any non-empty bearer token (there is no identity
    /// center to ask, as with web identity's token) gets keys living the default lifetime,
    /// in the portal's JSON (expiration in milliseconds since the epoch).
    pub fn answer_sso(&self, req: &Request) -> Response {
        let token = req.headers.get(SSO_BEARER_TOKEN).and_then(|v| v.to_str().ok()).unwrap_or("").trim();
        let params = parse_query(&req.raw_query);
        let get = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("");
        let error = |status: u16, kind: &str, message: &str| {
            let body = serde_json::json!({ "message": message, "__type": kind }).to_string();
            Response::with_body(status, "application/json", body)
        };
        if token.is_empty() {
            return error(401, "UnauthorizedException", "Session token not found or invalid");
        }
        if get("role_name").is_empty() || get("account_id").is_empty() {
            return error(400, "InvalidRequestException", "role_name and account_id are required");
        }
        let creds = self.issue(self.lifetime);
        tracing::debug!(access_key_id = %creds.access_key_id, role = get("role_name"), "sso: issued temporary keys");
        let millis = creds.expiration.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        let body = serde_json::json!({ "roleCredentials": {
            "accessKeyId": creds.access_key_id,
            "secretAccessKey": creds.secret_access_key,
            "sessionToken": creds.session_token,
            "expiration": millis,
        }});
        Response::with_body(200, "application/json", body.to_string())
    }

    /// Whether `req` is SSO OIDC's CreateToken: `POST /token` with a JSON body and no
    /// query. Path-style S3 would read it as a POST to bucket `token`, which S3 answers
    /// only with a query (`?delete`) or as a browser form upload (multipart/form-data).
    pub fn is_oidc_token(req: &Request) -> bool {
        req.method == Method::POST
            && req.raw_path == "/token"
            && req.raw_query.is_empty()
            && req
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"))
    }

    /// Answers CreateToken for the refresh grant, the call an SDK makes to refresh the
    /// token `aws sso login` cached: any non-empty client and refresh token (there is no
    /// identity center that registered them) get a new access token living the default
    /// lifetime and a new refresh token. Other grants (the device code of a login) are
    /// refused: logging in stays the AWS CLI's.
    pub async fn answer_oidc_token(&self, req: &mut Request) -> Response {
        let error = |kind: &str, description: &str| {
            let body = serde_json::json!({ "error": kind, "error_description": description }).to_string();
            Response::with_body(400, "application/json", body)
        };
        let Ok(body) = req.body.read_to_end(MAX_FORM).await else {
            return error("invalid_request", "The body could not be read or is too large.");
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let get = |name: &str| v[name].as_str().unwrap_or("").trim().to_owned();
        if get("grantType") != "refresh_token" {
            return error("unsupported_grant_type", "Only the refresh_token grant is emulated.");
        }
        if get("clientId").is_empty() || get("clientSecret").is_empty() || get("refreshToken").is_empty() {
            return error("invalid_request", "clientId, clientSecret and refreshToken are required.");
        }
        let mut rng = rand::thread_rng();
        let mut token = |prefix: &str| {
            let tail: String = (0..32).map(|_| char::from(rng.sample(rand::distributions::Alphanumeric))).collect();
            format!("{prefix}{tail}")
        };
        let (access, refresh) = (token("ferry-sso-access-"), token("ferry-sso-refresh-"));
        tracing::debug!("sso oidc: refreshed an access token");
        let body = serde_json::json!({
            "accessToken": access,
            "tokenType": "Bearer",
            "expiresIn": self.lifetime.as_secs(),
            "refreshToken": refresh,
        });
        Response::with_body(200, "application/json", body.to_string())
    }

    /// Answers the container credentials endpoint ([`CONTAINER_PATH`]), as the ECS / EKS
    /// Pod Identity agent does: keys living the default lifetime for any non-empty
    /// Authorization header (there is no task or pod to check it against), 401 without.
    pub fn answer_container(&self, req: &Request) -> Response {
        let token = req.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("").trim();
        if token.is_empty() {
            let body = serde_json::json!({ "code": "AccessDenied", "message": "No Authorization header" });
            return Response::with_body(401, "application/json", body.to_string());
        }
        let creds = self.issue(self.lifetime);
        tracing::debug!(access_key_id = %creds.access_key_id, "container credentials: issued temporary keys");
        let body = serde_json::json!({
            "AccessKeyId": creds.access_key_id,
            "SecretAccessKey": creds.secret_access_key,
            "Token": creds.session_token,
            "Expiration": ferry_proto::encoding::iso8601(creds.expiration),
        });
        Response::with_body(200, "application/json", body.to_string())
    }

    /// An AssumeRole call must be SigV4-signed by the server's keys or by keys it issued
    /// (role chaining, as AWS allows), and its body must be the one signed.
    fn verify_signed(&self, req: &Request, body: &[u8], keys: &(String, String)) -> Result<(), S3Error> {
        let signable = sigv4::SignableRequest {
            method: req.method.as_str(),
            raw_path: &req.raw_path,
            raw_query: &req.raw_query,
            headers: &req.headers,
        };
        let lookup = |key: &str| if key == keys.0 { Some(keys.1.clone()) } else { self.secret(key) };
        let now = SystemTime::now();
        let ctx = sigv4::verify(&signable, &lookup, now, MAX_SKEW)
            .map_err(|e| S3Error::new(e.status(), e.code(), &e.message))?;
        let claimed = req.headers.get("x-amz-content-sha256").and_then(|v| v.to_str().ok());
        if let Some(claimed) = claimed.filter(|c| *c != sigv4::UNSIGNED_PAYLOAD) {
            if !claimed.eq_ignore_ascii_case(&hex::encode(sha2::Sha256::digest(body))) {
                return Err(S3Error::new(
                    400,
                    "XAmzContentSHA256Mismatch",
                    "The provided 'x-amz-content-sha256' header does not match what was computed.",
                ));
            }
        }
        if ctx.access_key != keys.0 {
            let token = req.headers.get("x-amz-security-token").and_then(|v| v.to_str().ok()).filter(|t| !t.is_empty());
            self.check(&ctx.access_key, token, now)?;
        }
        Ok(())
    }

    /// The secret of an issued access key (expired ones too: the signature is checked
    /// first, so an expired key answers ExpiredToken rather than InvalidAccessKeyId).
    pub fn secret(&self, access_key: &str) -> Option<String> {
        self.issued.lock().unwrap_or_else(|p| p.into_inner()).get(access_key).map(|i| i.secret.clone())
    }

    /// After a valid signature with an issued key: its session token must come with it,
    /// and it must not have expired.
    pub fn check(&self, access_key: &str, session_token: Option<&str>, now: SystemTime) -> Result<(), S3Error> {
        let issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = issued.get(access_key) else { return Ok(()) };
        if session_token != Some(i.token.as_str()) {
            return Err(S3Error::new(403, "InvalidToken", "The provided token is malformed or otherwise invalid."));
        }
        if now >= i.expires {
            return Err(S3Error::new(400, "ExpiredToken", "The provided token has expired."));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An issued key is accepted only with its own session token and before its expiry;
    /// a key STS never issued is not this check's business (SigV4 refused it already).
    #[test]
    fn issued_keys_need_their_token_and_time() {
        let sts = Sts::new(Duration::from_secs(3600));
        let now = SystemTime::now();
        sts.issued.lock().unwrap().insert(
            "ASIATEST".into(),
            Issued { secret: "s".into(), token: "tok".into(), expires: now + Duration::from_secs(60) },
        );
        assert_eq!(sts.secret("ASIATEST").as_deref(), Some("s"));
        assert!(sts.check("ASIATEST", Some("tok"), now).is_ok());
        assert_eq!(sts.check("ASIATEST", None, now).unwrap_err().code, "InvalidToken");
        assert_eq!(sts.check("ASIATEST", Some("other"), now).unwrap_err().code, "InvalidToken");
        let later = now + Duration::from_secs(61);
        assert_eq!(sts.check("ASIATEST", Some("tok"), later).unwrap_err().code, "ExpiredToken");
        assert!(sts.check("AKIAOTHER", None, now).is_ok());
    }
}
