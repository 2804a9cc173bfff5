//! The two credential sources that hand out temporary keys, and fetching from them:
//! a profile's `credential_process` and web identity (STS AssumeRoleWithWebIdentity).
//!
//! ```text
//! Provider::Process      sh -c COMMAND ─► stdout JSON {Version: 1, AccessKeyId,
//!                        SecretAccessKey, SessionToken?, Expiration?} ─► Lease
//! Provider::WebIdentity  read the token file (again each time: it is rotated)
//!                        ─► POST STS / Action=AssumeRoleWithWebIdentity, unsigned
//!                        ─► <Credentials> with Expiration ─► Lease
//! ```
//!
//! A [`Lease`] is keys and when they expire; client.rs keeps the current one and asks
//! the provider again [`REFRESH_BEFORE`] that (one fetch at a time), or at once after an
//! ExpiredToken answer. Fetching is async inside requests (the command through
//! `spawn_blocking`, STS over its own small ferry-wire HTTP/1.1 pool, never the storage
//! transport, as GCS's token endpoints are reached); [`Provider::fetch_blocking`] does the
//! same from synchronous code (building the client, presigning) on a thread of its own
//! with its own runtime, so it may be called from inside a runtime too.

use super::credentials::Credentials;
use crate::error::Error;
use bytes::Bytes;
use ferry_proto::encoding::{parse_iso8601, uri_encode};
use ferry_proto::sts;
use ferry_wire::{Endpoint, Mode, Request, RequestBody, Transport, TransportConfig};
use http::{HeaderValue, Method};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long before their expiry temporary keys are fetched again: the AWS SDK for Java
/// v2's prefetch time for STS credentials (5 minutes), so keys never expire during a
/// request that started with them, even a long upload's signing of its last part.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// Largest output read from a credential process or an STS answer (both are a few KiB).
const MAX_ANSWER: usize = 64 * 1024;

/// Keys and when they expire (`None`: never, as a credential process may say).
#[derive(Clone, Debug)]
pub struct Lease {
    pub credentials: Credentials,
    pub expires: Option<SystemTime>,
}

/// Whether keys expiring at `expires` should be replaced at `now`.
pub(crate) fn due(expires: Option<SystemTime>, now: SystemTime) -> bool {
    expires.is_some_and(|t| now + REFRESH_BEFORE >= t)
}

/// A source of temporary keys.
#[derive(Clone, Debug)]
pub enum Provider {
    /// A profile's `credential_process`, run by `sh -c`.
    Process { command: String, profile: String },
    /// STS AssumeRoleWithWebIdentity.
    WebIdentity(WebIdentity),
}

/// What an AssumeRoleWithWebIdentity call needs.
#[derive(Clone, Debug)]
pub struct WebIdentity {
    pub token_file: PathBuf,
    pub role_arn: String,
    pub session_name: String,
    /// `scheme://host[:port]`, the path `/`.
    pub sts_endpoint: String,
}

impl Provider {
    /// The source's name for logs and errors.
    pub fn describe(&self) -> String {
        match self {
            Provider::Process { profile, .. } => format!("credential_process of profile '{profile}'"),
            Provider::WebIdentity(w) => format!("web identity ({}, STS {})", w.role_arn, w.sts_endpoint),
        }
    }

    /// Fetches keys; `ca_file` is trusted for an https STS endpoint (the client's).
    pub(crate) async fn fetch(&self, ca_file: Option<&Path>) -> Result<Lease, Error> {
        let lease = match self {
            Provider::Process { command, profile } => {
                let (cmd, name) = (command.clone(), profile.clone());
                tokio::task::spawn_blocking(move || run_process(&cmd, &name)).await.map_err(|e| {
                    Error::Config(format!("credential_process of profile '{profile}' did not finish: {e}"))
                })??
            }
            Provider::WebIdentity(w) => assume_role_with_web_identity(w, ca_file).await?,
        };
        tracing::debug!(
            source = %self.describe(),
            access_key_id = %lease.credentials.access_key_id,
            expires_in = ?lease.expires.map(|t| t.duration_since(SystemTime::now()).unwrap_or_default()),
            "credentials: fetched temporary keys"
        );
        Ok(lease)
    }

    /// [`Provider::fetch`] from synchronous code (module note).
    pub(crate) fn fetch_blocking(&self, ca_file: Option<&Path>) -> Result<Lease, Error> {
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Error::Config(format!("starting a runtime to fetch credentials: {e}")))?;
                rt.block_on(self.fetch(ca_file))
            })
            .join()
            .unwrap_or_else(|_| Err(Error::Config("fetching credentials panicked".into())))
        })
    }
}

/// Runs a credential process and reads its answer.
fn run_process(command: &str, profile: &str) -> Result<Lease, Error> {
    // Auth, not Config: the command is found and run; what it says is about the keys.
    let failed = |why: String| Error::Auth {
        status: 0,
        code: "CredentialProcess".into(),
        message: format!("credential_process of profile '{profile}' ({command}): {why}"),
        request_id: None,
    };
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| failed(format!("could not run: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said: String = stderr.trim().chars().take(500).collect();
        return Err(failed(format!(
            "{}{}",
            out.status,
            if said.is_empty() { String::new() } else { format!(": {said}") }
        )));
    }
    if out.stdout.len() > MAX_ANSWER {
        return Err(failed(format!("printed {} bytes, more than the {MAX_ANSWER} read", out.stdout.len())));
    }
    parse_process_output(&out.stdout).map_err(failed)
}

/// The JSON a credential process prints (AWS CLI User Guide, "Sourcing credentials with
/// an external process"): `Version` 1, the key pair, optionally `SessionToken` and an
/// RFC 3339 `Expiration` (without one the keys never expire).
pub(crate) fn parse_process_output(stdout: &[u8]) -> Result<Lease, String> {
    let v: serde_json::Value = serde_json::from_slice(stdout).map_err(|e| format!("its output is not JSON ({e})"))?;
    if v["Version"].as_u64() != Some(1) {
        return Err(format!("its output has Version {}, not 1", v["Version"]));
    }
    let field = |name: &str| v[name].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let (Some(id), Some(secret)) = (field("AccessKeyId"), field("SecretAccessKey")) else {
        return Err("its output lacks AccessKeyId or SecretAccessKey".into());
    };
    let expires = match field("Expiration") {
        None => None,
        Some(t) => Some(parse_rfc3339(&t).ok_or_else(|| format!("its Expiration {t:?} is not an RFC 3339 time"))?),
    };
    Ok(Lease {
        credentials: Credentials { access_key_id: id, secret_access_key: secret, session_token: field("SessionToken") },
        expires,
    })
}

/// `2026-01-02T03:04:05Z`, with optional fractional seconds, or with a `+hh:mm` /
/// `-hh:mm` offset instead of `Z`.
fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    if s.ends_with('Z') || s.ends_with('z') {
        return parse_iso8601(&format!("{}Z", &s[..s.len() - 1]));
    }
    let (local, offset) = s.split_at(s.len().checked_sub(6)?);
    let (sign, hm) = offset.split_at(1);
    let (h, m) = hm.split_once(':')?;
    let secs = Duration::from_secs(h.parse::<u64>().ok()? * 3600 + m.parse::<u64>().ok()? * 60);
    let t = parse_iso8601(&format!("{local}Z"))?;
    match sign {
        // Local time ahead of UTC: UTC is earlier.
        "+" => t.checked_sub(secs),
        "-" => t.checked_add(secs),
        _ => None,
    }
}

/// One AssumeRoleWithWebIdentity call (proto's sts.rs has the formats).
async fn assume_role_with_web_identity(w: &WebIdentity, ca_file: Option<&Path>) -> Result<Lease, Error> {
    let token = std::fs::read_to_string(&w.token_file)
        .map_err(|e| Error::Io { path: w.token_file.display().to_string(), error: e })?;
    let token = token.trim();
    if token.is_empty() {
        return Err(Error::Auth {
            status: 0,
            code: "InvalidIdentityToken".into(),
            message: format!("the web identity token file {} is empty", w.token_file.display()),
            request_id: None,
        });
    }
    let endpoint = Endpoint::parse(&w.sts_endpoint).map_err(|e| Error::Config(format!("STS endpoint: {e}")))?;
    let mut tc = TransportConfig::new(endpoint);
    tc.mode = Mode::H1Pool;
    tc.ca_file = ca_file.map(Path::to_path_buf);
    tc.max_connections = 1;
    let transport: Arc<dyn Transport> = ferry_wire::transport(tc)?;
    let form = sts::web_identity_params(&w.role_arn, &w.session_name, token)
        .iter()
        .map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true)))
        .collect::<Vec<_>>()
        .join("&");
    let mut req = Request::new(Method::POST, "/".to_owned());
    req.headers.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded"));
    req.headers.insert("accept", HeaderValue::from_static("text/xml"));
    req.body = RequestBody::from(Bytes::from(form));
    req.hedge = false;
    let resp = transport.send(req).await?;
    let status = resp.status.as_u16();
    let request_id = resp.headers.get("x-amzn-requestid").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = resp.body.collect(MAX_ANSWER).await?;
    if !(200..300).contains(&status) {
        let (code, message) = sts::parse_error(&body).unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            ("AssumeRoleWithWebIdentityFailed".into(), format!("STS {} answered {status}: {text}", w.sts_endpoint))
        });
        return Err(Error::Auth {
            status,
            code,
            message: format!("AssumeRoleWithWebIdentity ({}): {message}", w.role_arn),
            request_id,
        });
    }
    let c = sts::parse_web_identity_result(&body).map_err(|e| Error::Protocol {
        message: format!("STS {} answered AssumeRoleWithWebIdentity with {e}", w.sts_endpoint),
        request_id: request_id.clone(),
    })?;
    Ok(Lease {
        credentials: Credentials {
            access_key_id: c.access_key_id,
            secret_access_key: c.secret_access_key,
            session_token: Some(c.session_token),
        },
        expires: Some(c.expiration),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn process_output() {
        let l = parse_process_output(
            br#"{"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK", "SessionToken": "T",
                "Expiration": "2026-11-27T12:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(l.credentials.access_key_id, "AK");
        assert_eq!(l.credentials.session_token.as_deref(), Some("T"));
        assert_eq!(l.expires, parse_iso8601("2026-11-27T12:00:00Z"));
        // No Expiration: long-lived keys, never refreshed.
        let l = parse_process_output(br#"{"Version":1,"AccessKeyId":"AK","SecretAccessKey":"SK"}"#).unwrap();
        assert!(l.expires.is_none() && !due(l.expires, SystemTime::now()));
        for bad in [
            &br#"{"Version":2,"AccessKeyId":"AK","SecretAccessKey":"SK"}"#[..],
            br#"{"Version":1,"AccessKeyId":"AK"}"#,
            br#"{"Version":1,"AccessKeyId":"AK","SecretAccessKey":"SK","Expiration":"tomorrow"}"#,
            b"not json",
        ] {
            assert!(parse_process_output(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn rfc3339_offsets() {
        let utc = parse_iso8601("2026-11-27T12:00:00Z").unwrap();
        assert_eq!(parse_rfc3339("2026-11-27T12:00:00Z"), Some(utc));
        assert_eq!(parse_rfc3339("2026-11-27T14:00:00+02:00"), Some(utc));
        assert_eq!(parse_rfc3339("2026-11-27T11:30:00.000-00:30"), Some(utc));
        assert_eq!(parse_rfc3339("2026-11-27T12:00:00+0200"), None);
        assert!(parse_rfc3339("1970-01-01T00:00:00Z") == Some(UNIX_EPOCH));
    }

    #[test]
    fn keys_are_due_within_the_refresh_window() {
        let now = SystemTime::now();
        let at = |secs: u64| Some(now + Duration::from_secs(secs));
        assert!(due(at(60), now));
        assert!(!due(at(3600), now));
        assert!(due(at(3600), now + Duration::from_secs(3600 - 299)));
        assert!(!due(None, now));
    }
}
