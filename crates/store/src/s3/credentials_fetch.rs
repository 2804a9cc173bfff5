//! The credential sources that hand out temporary keys, and fetching from them.
//!
//! ```text
//! Provider::Process      sh -c COMMAND, in ferry's process group, killed with what it
//!                        started after `timeout` ─► stdout JSON {Version: 1, AccessKeyId,
//!                        SecretAccessKey, SessionToken?, Expiration?} ─► Lease
//! Provider::WebIdentity  read the token file (again each time: it is rotated)
//!                        ─► POST STS / Action=AssumeRoleWithWebIdentity, unsigned ─► Lease
//! Provider::AssumeRole   the source's keys (a profile's static keys, or fetched from the
//!                        source's own provider) ─► POST STS / Action=AssumeRole, SigV4
//!                        for service sts with them ─► Lease
//! Provider::Container    GET the ECS / EKS Pod Identity agent's URL ─► JSON ─► Lease
//! Provider::Imds         EC2 instance metadata, IMDSv2 ─► JSON ─► Lease
//! Provider::Sso          the SSO portal's GetRoleCredentials with `aws sso login`'s
//!                        cached token ─► JSON ─► Lease
//!                        (these three: credentials_metadata.rs)
//! ```
//!
//! Every source ends in the same [`Lease`] (keys and when they expire), so there is one
//! refresh for all of them: client.rs keeps the current lease and asks the provider again
//! [`REFRESH_BEFORE`] its expiry (one fetch at a time; requests that waited take its
//! keys), or at once after an ExpiredToken answer. Fetching is async inside requests (the
//! command through `spawn_blocking`, HTTP over a small ferry-wire HTTP/1.1 pool of its own
//! per fetch, never the storage transport, as GCS's token endpoints are reached);
//! [`Provider::fetch_blocking`] does the same from synchronous code (building the client,
//! presigning) on a thread of its own with its own runtime, so it may be called from
//! inside a runtime too.

use super::credentials::Credentials;
use crate::error::Error;
use bytes::Bytes;
use ferry_proto::encoding::{parse_iso8601, uri_encode};
use ferry_proto::sts;
use ferry_wire::{Endpoint, Mode, Request, RequestBody, Transport, TransportConfig};
use http::{HeaderValue, Method};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

pub(crate) use super::credentials_metadata::{Container, Imds, Sso};

/// How long before their expiry temporary keys are fetched again: the AWS SDK for Java
/// v2's prefetch time for STS credentials (5 minutes), so keys never expire during a
/// request that started with them, even a long upload's signing of its last part.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// Largest output read from a credential process or an STS or metadata answer (all are a
/// few KiB).
pub(crate) const MAX_ANSWER: usize = 64 * 1024;

/// How long a `credential_process` may run before it is killed and the fetch fails,
/// unless `FERRY_CREDENTIAL_PROCESS_TIMEOUT` (seconds) says otherwise. The AWS CLI and
/// botocore wait forever; a minute is ours: a helper that asks a remote broker or waits
/// for a hardware key's touch answers within seconds, and a hung one then fails a run
/// within a minute instead of holding it forever.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a running credential process is checked for having exited: small beside
/// its time-out, and a process's start-up takes milliseconds anyway.
const PROCESS_POLL: Duration = Duration::from_millis(10);

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
    /// A profile's `credential_process`, run by `sh -c`, killed after `timeout`.
    Process { command: String, profile: String, timeout: Duration },
    /// STS AssumeRoleWithWebIdentity.
    WebIdentity(WebIdentity),
    /// STS AssumeRole, signed with another source's keys.
    AssumeRole(Box<AssumeRole>),
    /// The ECS / EKS Pod Identity container credentials endpoint.
    Container(Container),
    /// EC2 instance metadata.
    Imds(Imds),
    /// An SSO profile's role, from the portal with the cached login token.
    Sso(Sso),
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

/// What an AssumeRole call needs.
#[derive(Clone, Debug)]
pub struct AssumeRole {
    /// The profile whose `role_arn` this is.
    pub profile: String,
    pub role_arn: String,
    pub session_name: String,
    pub external_id: Option<String>,
    /// `scheme://host[:port]`, the path `/`.
    pub sts_endpoint: String,
    /// The region the call is signed for.
    pub region: String,
    /// Whose keys sign the call.
    pub source: RoleSource,
}

/// The keys an AssumeRole call is signed with.
#[derive(Clone, Debug)]
pub enum RoleSource {
    /// Static keys (a `source_profile`'s, or the environment's for
    /// `credential_source = Environment`).
    Keys(Credentials),
    /// Temporary keys from another provider (a `source_profile` that assumes a role
    /// itself, runs a process, ...; or `credential_source = Ec2InstanceMetadata` /
    /// `EcsContainer`), fetched again for each call.
    Provider(Provider),
}

impl Provider {
    /// The source's name for logs and errors.
    pub fn describe(&self) -> String {
        match self {
            Provider::Process { profile, .. } => format!("credential_process of profile '{profile}'"),
            Provider::WebIdentity(w) => format!("web identity ({}, STS {})", w.role_arn, w.sts_endpoint),
            Provider::AssumeRole(a) => format!(
                "assume role of profile '{}' ({}, STS {}, signed by {})",
                a.profile,
                a.role_arn,
                a.sts_endpoint,
                match &a.source {
                    RoleSource::Keys(c) => format!("keys {}", c.access_key_id),
                    RoleSource::Provider(p) => p.describe(),
                }
            ),
            Provider::Container(c) => c.describe(),
            Provider::Imds(i) => i.describe(),
            Provider::Sso(s) => s.describe(),
        }
    }

    /// Fetches keys; `ca_file` is trusted for an https STS endpoint (the client's).
    pub(crate) async fn fetch(&self, ca_file: Option<&Path>) -> Result<Lease, Error> {
        let lease = match self {
            Provider::Process { command, profile, timeout } => {
                let (cmd, name, timeout) = (command.clone(), profile.clone(), *timeout);
                tokio::task::spawn_blocking(move || run_process(&cmd, &name, timeout)).await.map_err(|e| {
                    Error::Config(format!("credential_process of profile '{profile}' did not finish: {e}"))
                })??
            }
            Provider::WebIdentity(w) => assume_role_with_web_identity(w, ca_file).await?,
            Provider::AssumeRole(a) => assume_role(a, ca_file).await?,
            Provider::Container(c) => c.fetch(ca_file).await?,
            Provider::Imds(i) => i.fetch().await?,
            Provider::Sso(s) => s.fetch(ca_file).await?,
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

/// Every process descended from `root`, `root` first, as /proc shows them now (a
/// process's parent is the fourth field of `/proc/PID/stat`); just `root` where there is
/// no /proc.
fn process_tree(root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // The command name, in parentheses, may hold spaces: the fields follow its last ')'.
        let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<libc::pid_t>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(parent_of.iter().filter(|(_, p)| *p == parent).map(|(pid, _)| *pid));
        i += 1;
    }
    tree
}

/// Runs a credential process and reads its answer. The command stays in ferry's process
/// group, as the AWS CLI runs it: a Ctrl-C at the terminal reaches it with ferry, and a
/// command that asks something at the terminal (a password, a touch of a security key)
/// may read it there, where a background group would be stopped by SIGTTIN. A time-out
/// kills it with whatever it started (`sh -c` may fork the command rather than exec it),
/// the tree taken from /proc before the first kill, so none of them is left holding our
/// pipes.
fn run_process(command: &str, profile: &str, timeout: Duration) -> Result<Lease, Error> {
    use std::io::Read;
    // Auth, not Config: the command is found and run; what it says is about the keys.
    let failed = |why: String| Error::Auth {
        status: 0,
        code: "CredentialProcess".into(),
        message: format!("credential_process of profile '{profile}' ({command}): {why}"),
        request_id: None,
    };
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("could not run: {e}")))?;
    let root = child.id() as libc::pid_t;
    // Each pipe is read to its end on a thread of its own (one full pipe would stall the
    // command); at most MAX_ANSWER + 1 bytes are kept, the rest is drained.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.by_ref().take(MAX_ANSWER as u64 + 1).read_to_end(&mut kept);
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
            }
            let _ = tx.send(kept);
        });
        rx
    };
    let stdout = reader(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = reader(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let kill = |child: &mut std::process::Child| {
        for pid in process_tree(root) {
            // SAFETY: kill(2) with a positive pid signals that one process; the pids are
            // the child's and its descendants', taken before any of them was killed.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let _ = child.wait();
    };
    let timed_out = || {
        failed(format!(
            "did not finish within {:?} and was killed (FERRY_CREDENTIAL_PROCESS_TIMEOUT sets the limit in seconds)",
            timeout
        ))
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                kill(&mut child);
                return Err(timed_out());
            }
            Ok(None) => std::thread::sleep(PROCESS_POLL),
            Err(e) => {
                kill(&mut child);
                return Err(failed(format!("waiting for it failed: {e}")));
            }
        }
    };
    // A command that exited but left something behind holding its output open has until
    // the same deadline to let go.
    let rest =
        |rx: &std::sync::mpsc::Receiver<Vec<u8>>| rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    let (Ok(out), Ok(err)) = (rest(&stdout), rest(&stderr)) else {
        kill(&mut child);
        return Err(timed_out());
    };
    if !status.success() {
        let stderr = String::from_utf8_lossy(&err);
        let said: String = stderr.trim().chars().take(500).collect();
        return Err(failed(format!("{}{}", status, if said.is_empty() { String::new() } else { format!(": {said}") })));
    }
    if out.len() > MAX_ANSWER {
        return Err(failed(format!("printed more than the {MAX_ANSWER} bytes read")));
    }
    parse_process_output(&out).map_err(failed)
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
pub(crate) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
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
    let form = form_body(&sts::web_identity_params(&w.role_arn, &w.session_name, token));
    let c = sts_call(sts::ASSUME_ROLE_WITH_WEB_IDENTITY, &w.sts_endpoint, &w.role_arn, form, None, ca_file).await?;
    Ok(lease_of(c))
}

/// One AssumeRole call, signed with the source's keys (fetched first when temporary).
async fn assume_role(a: &AssumeRole, ca_file: Option<&Path>) -> Result<Lease, Error> {
    let keys = match &a.source {
        RoleSource::Keys(c) => c.clone(),
        RoleSource::Provider(p) => Box::pin(p.fetch(ca_file)).await?.credentials,
    };
    let form = form_body(&sts::assume_role_params(&a.role_arn, &a.session_name, a.external_id.as_deref()));
    let c = sts_call(sts::ASSUME_ROLE, &a.sts_endpoint, &a.role_arn, form, Some((&keys, &a.region)), ca_file).await?;
    Ok(lease_of(c))
}

fn form_body(params: &[(&str, &str)]) -> String {
    params.iter().map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true))).collect::<Vec<_>>().join("&")
}

fn lease_of(c: sts::TemporaryCredentials) -> Lease {
    Lease {
        credentials: Credentials {
            access_key_id: c.access_key_id,
            secret_access_key: c.secret_access_key,
            session_token: Some(c.session_token),
        },
        expires: Some(c.expiration),
    }
}

/// A small HTTP/1.1 pool of its own for one credentials endpoint.
pub(crate) fn own_transport(
    url: &str,
    ca_file: Option<&Path>,
    connect_timeout: Option<Duration>,
) -> Result<(Endpoint, Arc<dyn Transport>), Error> {
    let endpoint = Endpoint::parse(url).map_err(|e| Error::Config(e.to_string()))?;
    let mut tc = TransportConfig::new(endpoint.clone());
    tc.mode = Mode::H1Pool;
    tc.ca_file = ca_file.map(Path::to_path_buf);
    tc.max_connections = 1;
    if let Some(t) = connect_timeout {
        tc.connect_timeout = t;
        tc.response_timeout = t;
    }
    Ok((endpoint, ferry_wire::transport(tc)?))
}

/// POSTs one STS form to `/` of `sts_endpoint`; `signer`: the keys and region to sign it
/// with (AssumeRole), else unsigned (AssumeRoleWithWebIdentity).
async fn sts_call(
    action: &str,
    sts_endpoint: &str,
    role_arn: &str,
    form: String,
    signer: Option<(&Credentials, &str)>,
    ca_file: Option<&Path>,
) -> Result<sts::TemporaryCredentials, Error> {
    let (endpoint, transport) =
        own_transport(sts_endpoint, ca_file, None).map_err(|e| Error::Config(format!("STS endpoint: {e}")))?;
    let mut req = Request::new(Method::POST, "/".to_owned());
    req.headers.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded"));
    req.headers.insert("accept", HeaderValue::from_static("text/xml"));
    if let Some((keys, region)) = signer {
        let host = HeaderValue::from_str(&endpoint.authority()).map_err(|e| Error::Config(format!("STS host: {e}")))?;
        req.headers.insert("host", host);
        if let Some(token) = &keys.session_token {
            let token = HeaderValue::from_str(token)
                .map_err(|_| Error::Config("the source keys' session token is not a valid header value".into()))?;
            req.headers.insert("x-amz-security-token", token);
        }
        let hash = hex::encode(sha2::Sha256::digest(form.as_bytes()));
        ferry_proto::sigv4::sign_headers_for(
            "POST",
            "/",
            "",
            &mut req.headers,
            &hash,
            &keys.to_proto(),
            region,
            "sts",
            SystemTime::now(),
        );
    }
    req.body = RequestBody::from(Bytes::from(form));
    req.hedge = false;
    let resp = transport.send(req).await?;
    let status = resp.status.as_u16();
    let request_id = resp.headers.get("x-amzn-requestid").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = resp.body.collect(MAX_ANSWER).await?;
    if !(200..300).contains(&status) {
        let (code, message) = sts::parse_error(&body).unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            (format!("{action}Failed"), format!("STS {sts_endpoint} answered {status}: {text}"))
        });
        return Err(Error::Auth { status, code, message: format!("{action} ({role_arn}): {message}"), request_id });
    }
    sts::parse_result(action, &body).map_err(|e| Error::Protocol {
        message: format!("STS {sts_endpoint} answered {action} with {e}"),
        request_id: request_id.clone(),
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
