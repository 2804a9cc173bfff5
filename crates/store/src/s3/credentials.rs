//! Credentials, found the way the AWS SDKs find them.
//!
//! [`CredentialsSource::Default`] walks the chain once, when the client is built:
//!
//! ```text
//! AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)
//!   └─ else AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME) ─► STS
//!        └─ else shared files, profile AWS_PROFILE or "default":
//!             credentials file (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials), section [name]
//!             config file      (AWS_CONFIG_FILE or ~/.aws/config), section [profile name] ([default])
//!             in the profile: role_arn + source_profile | credential_source ─► STS AssumeRole
//!                             else sso_session | sso_start_url ─► SSO portal (cached token)
//!                             else aws_access_key_id + aws_secret_access_key
//!                             else credential_process ─► the command's JSON
//!                             else web_identity_token_file + role_arn ─► STS
//!               └─ else AWS_CONTAINER_CREDENTIALS_RELATIVE_URI | _FULL_URI ─► the agent's JSON
//!                    └─ else EC2 instance metadata (IMDSv2) ─► its JSON   (see below)
//!                         └─ else anonymous (unsigned requests)
//! ```
//!
//! Key for key, the credentials file wins over the config file, as in the SDKs (AWS
//! SDKs and Tools Reference Guide, "Shared config and credentials files"). The source that
//! supplied the keys is logged with `tracing::debug!` (never the secret), so `-vv` names it.
//!
//! `role_arn` with `source_profile` signs STS AssumeRole with that profile's credentials,
//! found by the same profile rules, so profiles chain (a → b → static keys); a profile met
//! twice is an error naming the loop, but for a profile that names itself and has keys
//! (its keys sign). `credential_source` instead takes `Environment` (the keys in
//! AWS_ACCESS_KEY_ID), `Ec2InstanceMetadata` or `EcsContainer`.
//!
//! Instance metadata departs from the SDKs in one way: the default chain asks it only
//! when the S3 endpoint is AWS's own (`*.amazonaws.com`) or its address is configured
//! (AWS_EC2_METADATA_SERVICE_ENDPOINT, the profile's `ec2_metadata_service_endpoint`).
//! Its keys are AWS IAM keys, which a local or third-party S3 server never takes, and the
//! attempt costs up to a second where nothing answers. AWS_EC2_METADATA_DISABLED=true
//! turns it off everywhere. Both metadata endpoints are asked as the shared settings
//! `metadata_service_num_attempts` and `metadata_service_timeout` say (environment, else
//! the profile), with busy answers asked again (credentials_metadata.rs, `Asking`).
//!
//! Temporary keys from any of these sources have an expiry and are asked for again
//! before it ([`Provider`], credentials_fetch.rs and credentials_metadata.rs). They are
//! first asked when the client is built, so a broken command, a refused token or an
//! unreachable endpoint fails there, with its own words.
//!
//! Temporary keys that expire mid-run: a request answered 400 ExpiredToken makes the
//! client read its source (the environment, the shared files) again, or ask its provider
//! again, once, and send the request again when that gave other keys (client.rs
//! `renew_expired`); explicit keys are never renewed.
//!
//! An SSO profile (`sso_session` naming an `[sso-session NAME]` section, or the legacy
//! `sso_start_url` in the profile; with `sso_account_id`, `sso_role_name`, `sso_region`)
//! reads the token `aws sso login` cached in `~/.aws/sso/cache/` and asks the portal
//! (`AWS_ENDPOINT_URL_SSO`, `AWS_ENDPOINT_URL`, the profile's `endpoint_url`, else
//! `https://portal.sso.REGION.amazonaws.com`) for the role's keys. With `sso_session`, a
//! token that expires within 15 minutes is first refreshed at SSO OIDC
//! (`AWS_ENDPOINT_URL_SSO_OIDC`, `AWS_ENDPOINT_URL`, `endpoint_url`, else
//! `https://oidc.REGION.amazonaws.com`) with the refresh token and client the login
//! cached, and the cache file updated, as the AWS CLI does. Logging in stays the AWS
//! CLI's: an expired token that cannot be refreshed is an error that says to run `aws sso
//! login`.

use super::credentials_fetch::PROCESS_TIMEOUT;
pub(crate) use super::credentials_fetch::{AssumeRole, Container, Imds, Lease, Provider, RoleSource, Sso, WebIdentity};
use super::credentials_metadata::{sso_cache_name, Asking, IMDS_ENDPOINT, IMDS_ENDPOINT_IPV6};
use crate::error::Error;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An access key pair, with the session token of temporary credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Sent as `x-amz-security-token` (and signed).
    pub session_token: Option<String>,
}

impl Credentials {
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Credentials {
        Credentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }

    pub(crate) fn to_proto(&self) -> ferry_proto::sigv4::Credentials {
        ferry_proto::sigv4::Credentials {
            access_key: self.access_key_id.clone(),
            secret_key: self.secret_access_key.clone(),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("session_token", &self.session_token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Where the client takes its credentials from.
#[derive(Clone, Debug, Default)]
pub enum CredentialsSource {
    /// Environment, then shared files, then anonymous (the module note).
    #[default]
    Default,
    Explicit(Credentials),
    /// Only the `AWS_*` environment variables.
    Environment,
    /// Only the shared files, with this profile (`None`: AWS_PROFILE or "default").
    Profile(Option<String>),
    /// Unsigned requests.
    Anonymous,
}

/// The variables the resolver reads, injectable for tests.
pub(crate) trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

pub(crate) struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl<S: std::hash::BuildHasher> Env for HashMap<String, String, S> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned().filter(|v| !v.is_empty())
    }
}

impl CredentialsSource {
    /// Finds the credentials (running a `credential_process` or asking STS when the
    /// chain ends there); `None` means anonymous.
    pub fn resolve(&self) -> Result<Option<Credentials>, Error> {
        resolve_with(self, &ProcessEnv)
    }

    /// Walks the chain for a client of `s3_endpoint` without running a
    /// `credential_process` or asking STS or a metadata endpoint (the client does that
    /// when it is built): `None` when it ends anonymous, else the source's name.
    pub fn locate(&self, s3_endpoint: &str) -> Result<Option<String>, Error> {
        // Silent: the client's own lookup logs the source once, when it is built.
        Ok(match find_with(self, &ProcessEnv, false, is_aws_endpoint(s3_endpoint))? {
            Found::Anonymous => None,
            Found::Keys(_) => Some("keys".to_owned()),
            Found::Provider(p) => Some(p.describe()),
        })
    }
}

/// What a source's lookup found: keys, or where temporary keys are fetched from.
pub(crate) enum Found {
    Anonymous,
    Keys(Credentials),
    Provider(Provider),
}

/// Whether `url` is one of AWS's own endpoints (`*.amazonaws.com`, `*.amazonaws.com.cn`),
/// where instance metadata keys could be of use (module note).
pub fn is_aws_endpoint(url: &str) -> bool {
    let host = ferry_wire::Endpoint::parse(url).map(|e| e.host.to_ascii_lowercase()).unwrap_or_default();
    ["amazonaws.com", "amazonaws.com.cn"].iter().any(|d| host == *d || host.ends_with(&format!(".{d}")))
}

pub(crate) fn resolve_with(source: &CredentialsSource, env: &dyn Env) -> Result<Option<Credentials>, Error> {
    match find_with(source, env, true, false)? {
        Found::Anonymous => Ok(None),
        Found::Keys(c) => Ok(Some(c)),
        Found::Provider(p) => p.fetch_blocking(None).map(|lease| Some(lease.credentials)),
    }
}

/// Walks `source` (the module note's chain for `Default`) without fetching anything;
/// `log`: say at debug level what was found (once per client, when it is built);
/// `aws_endpoint`: the S3 endpoint is AWS's, so instance metadata is worth asking.
pub(crate) fn find_with(
    source: &CredentialsSource,
    env: &dyn Env,
    log: bool,
    aws_endpoint: bool,
) -> Result<Found, Error> {
    match source {
        CredentialsSource::Explicit(c) => {
            if log {
                tracing::debug!(access_key_id = %c.access_key_id, "credentials: explicit");
            }
            Ok(Found::Keys(c.clone()))
        }
        CredentialsSource::Anonymous => {
            if log {
                tracing::debug!("credentials: anonymous (requests are not signed)");
            }
            Ok(Found::Anonymous)
        }
        CredentialsSource::Environment => match from_env(env, log) {
            Some(c) => Ok(Found::Keys(c)),
            None => Err(Error::Config("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set".into())),
        },
        CredentialsSource::Profile(name) => {
            let profile = profile_name(name.as_deref(), env);
            match from_profile(&profile, env, log)? {
                Some(found) => Ok(found),
                None => Err(Error::Config(format!(
                    "profile '{profile}' has no role_arn/source_profile, SSO settings, \
                     aws_access_key_id/aws_secret_access_key, credential_process or web_identity_token_file/role_arn \
                     in the shared files"
                ))),
            }
        }
        CredentialsSource::Default => {
            if let Some(c) = from_env(env, log) {
                return Ok(Found::Keys(c));
            }
            if let Some(p) = web_identity_from_env(env, log) {
                return Ok(Found::Provider(p));
            }
            let profile = profile_name(None, env);
            if let Some(found) = from_profile(&profile, env, log)? {
                return Ok(found);
            }
            if let Some(c) = container_from_env(env, &profile)? {
                if log {
                    tracing::debug!(url = %c.url, "credentials: container credentials (AWS_CONTAINER_CREDENTIALS_*)");
                }
                return Ok(Found::Provider(Provider::Container(c)));
            }
            if let Some(imds) = imds_settings(env, &profile)?.filter(|i| aws_endpoint || i.1).map(|i| i.0) {
                if log {
                    tracing::debug!(endpoint = %imds.endpoint, "credentials: instance metadata (IMDS)");
                }
                return Ok(Found::Provider(Provider::Imds(imds)));
            }
            if log {
                tracing::debug!(
                    "credentials: none found in the environment, the shared files or a metadata endpoint; anonymous \
                     (requests are not signed)"
                );
            }
            Ok(Found::Anonymous)
        }
    }
}

fn profile_name(explicit: Option<&str>, env: &dyn Env) -> String {
    explicit.map(str::to_owned).or_else(|| env.var("AWS_PROFILE")).unwrap_or_else(|| "default".to_owned())
}

fn from_env(env: &dyn Env, log: bool) -> Option<Credentials> {
    let id = env.var("AWS_ACCESS_KEY_ID")?;
    let secret = env.var("AWS_SECRET_ACCESS_KEY")?;
    if log {
        tracing::debug!(access_key_id = %id, "credentials: environment (AWS_ACCESS_KEY_ID)");
    }
    Some(Credentials { access_key_id: id, secret_access_key: secret, session_token: env.var("AWS_SESSION_TOKEN") })
}

fn home(env: &dyn Env) -> Option<PathBuf> {
    env.var("HOME").or_else(|| env.var("USERPROFILE")).map(PathBuf::from)
}

/// `(credentials file, config file)` paths.
pub(crate) fn shared_file_paths(env: &dyn Env) -> (Option<PathBuf>, Option<PathBuf>) {
    let creds = env
        .var("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home(env).map(|h| h.join(".aws/credentials")));
    let config = env.var("AWS_CONFIG_FILE").map(PathBuf::from).or_else(|| home(env).map(|h| h.join(".aws/config")));
    (creds, config)
}

fn read_optional(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Io { path: path.display().to_string(), error: e }),
    }
}

/// One profile's keys, merged from both files.
pub(crate) fn profile_settings(profile: &str, env: &dyn Env) -> Result<HashMap<String, String>, Error> {
    let (creds_path, config_path) = shared_file_paths(env);
    let mut merged = HashMap::new();
    if let Some(text) = config_path.as_deref().map(read_optional).transpose()?.flatten() {
        merged.extend(parse_ini(&text, profile, true));
    }
    if let Some(text) = creds_path.as_deref().map(read_optional).transpose()?.flatten() {
        merged.extend(parse_ini(&text, profile, false));
    }
    Ok(merged)
}

/// The container endpoint named by the environment, if any.
fn container_from_env(env: &dyn Env, profile: &str) -> Result<Option<Container>, Error> {
    Container::from_vars(
        env.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
        env.var("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
        env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"),
        metadata_asking(env, profile)?,
    )
}

/// How the metadata endpoints are asked: the environment's settings, else the profile's.
fn metadata_asking(env: &dyn Env, profile: &str) -> Result<Asking, Error> {
    let s = profile_settings(profile, env).unwrap_or_default();
    let setting = |var: &str, key: &str| env.var(var).or_else(|| s.get(key).cloned());
    Asking::from_settings(
        setting("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "metadata_service_num_attempts"),
        setting("AWS_METADATA_SERVICE_TIMEOUT", "metadata_service_timeout"),
    )
}

fn is_true(v: Option<String>) -> bool {
    v.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Instance metadata's settings, and whether its address was configured explicitly;
/// `None` when AWS_EC2_METADATA_DISABLED is true.
fn imds_settings(env: &dyn Env, profile: &str) -> Result<Option<(Imds, bool)>, Error> {
    if is_true(env.var("AWS_EC2_METADATA_DISABLED")) {
        return Ok(None);
    }
    let s = profile_settings(profile, env).unwrap_or_default();
    let setting = |var: &str, key: &str| env.var(var).or_else(|| s.get(key).cloned());
    let explicit = setting("AWS_EC2_METADATA_SERVICE_ENDPOINT", "ec2_metadata_service_endpoint");
    let ipv6 = setting("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "ec2_metadata_service_endpoint_mode")
        .is_some_and(|m| m.eq_ignore_ascii_case("ipv6"));
    let endpoint =
        explicit.clone().unwrap_or_else(|| (if ipv6 { IMDS_ENDPOINT_IPV6 } else { IMDS_ENDPOINT }).to_owned());
    let v1_disabled = is_true(setting("AWS_EC2_METADATA_V1_DISABLED", "ec2_metadata_v1_disabled"));
    let last_resort = explicit.is_none();
    let asking = metadata_asking(env, profile)?;
    Ok(Some((
        Imds { endpoint: endpoint.trim_end_matches('/').to_owned(), v1_disabled, last_resort, asking },
        !last_resort,
    )))
}

/// `FERRY_CREDENTIAL_PROCESS_TIMEOUT` (seconds, fractions allowed), else [`PROCESS_TIMEOUT`].
fn process_timeout(env: &dyn Env) -> Result<Duration, Error> {
    match env.var("FERRY_CREDENTIAL_PROCESS_TIMEOUT") {
        None => Ok(PROCESS_TIMEOUT),
        Some(v) => {
            v.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0).map(Duration::from_secs_f64).ok_or_else(
                || Error::Config(format!("FERRY_CREDENTIAL_PROCESS_TIMEOUT={v:?} is not a positive number of seconds")),
            )
        }
    }
}

fn static_keys(s: &HashMap<String, String>) -> Option<Credentials> {
    let (id, secret) = (s.get("aws_access_key_id")?, s.get("aws_secret_access_key")?);
    Some(Credentials {
        access_key_id: id.clone(),
        secret_access_key: secret.clone(),
        session_token: s.get("aws_session_token").cloned(),
    })
}

/// A profile's assumed role, else its keys, else its `credential_process`, else its web
/// identity (the order of the SDKs' profile provider).
fn from_profile(profile: &str, env: &dyn Env, log: bool) -> Result<Option<Found>, Error> {
    from_profile_chain(profile, env, log, &mut Vec::new())
}

/// [`from_profile`], `visited` holding the profiles of the `source_profile` chain so far.
fn from_profile_chain(
    profile: &str,
    env: &dyn Env,
    log: bool,
    visited: &mut Vec<String>,
) -> Result<Option<Found>, Error> {
    visited.push(profile.to_owned());
    let s = profile_settings(profile, env)?;
    if let Some(role) = assume_role_of(profile, &s, env, visited)? {
        if log {
            tracing::debug!(profile, role_arn = %role.role_arn, sts = %role.sts_endpoint, chain = %visited.join(" -> "),
                "credentials: assume role (role_arn)");
        }
        return Ok(Some(Found::Provider(Provider::AssumeRole(Box::new(role)))));
    }
    if let Some(sso) = sso_of(profile, &s, env)? {
        if log {
            tracing::debug!(profile, role = %sso.role_name, account = %sso.account_id, portal = %sso.portal,
                "credentials: SSO (sso_session / sso_start_url)");
        }
        return Ok(Some(Found::Provider(Provider::Sso(sso))));
    }
    if let Some(keys) = static_keys(&s) {
        if log {
            tracing::debug!(access_key_id = %keys.access_key_id, profile, "credentials: shared files");
        }
        return Ok(Some(Found::Keys(keys)));
    }
    if let Some(command) = s.get("credential_process") {
        if log {
            tracing::debug!(profile, command = %command, "credentials: credential_process");
        }
        let timeout = process_timeout(env)?;
        return Ok(Some(Found::Provider(Provider::Process {
            command: command.clone(),
            profile: profile.to_owned(),
            timeout,
        })));
    }
    if let (Some(token_file), Some(role_arn)) = (s.get("web_identity_token_file"), s.get("role_arn")) {
        let w = WebIdentity {
            token_file: PathBuf::from(token_file),
            role_arn: role_arn.clone(),
            session_name: s.get("role_session_name").cloned().unwrap_or_else(default_session_name),
            sts_endpoint: sts_endpoint(env, s.get("endpoint_url").map(String::as_str)),
        };
        if log {
            tracing::debug!(profile, role_arn = %w.role_arn, sts = %w.sts_endpoint, "credentials: web identity (profile)");
        }
        return Ok(Some(Found::Provider(Provider::WebIdentity(w))));
    }
    Ok(None)
}

/// A profile's SSO role (module note); `None` when it has neither `sso_session` nor
/// `sso_start_url`.
fn sso_of(profile: &str, s: &HashMap<String, String>, env: &dyn Env) -> Result<Option<Sso>, Error> {
    let bad = |why: String| Error::Config(format!("profile '{profile}' (SSO): {why}"));
    let (cache_key, region, refreshable) = match (s.get("sso_session"), s.get("sso_start_url")) {
        (Some(name), _) => {
            let (_, config_path) = shared_file_paths(env);
            let text = config_path.as_deref().map(read_optional).transpose()?.flatten().unwrap_or_default();
            let session = parse_section(&text, |header| {
                header
                    .strip_prefix("sso-session")
                    .is_some_and(|rest| rest.starts_with([' ', '\t']) && rest.trim() == name)
            });
            if session.is_empty() {
                return Err(bad(format!("there is no [sso-session {name}] section in the config file")));
            }
            let region = session.get("sso_region").or(s.get("sso_region")).cloned();
            (name.clone(), region, true)
        }
        (None, Some(url)) => (url.clone(), s.get("sso_region").cloned(), false),
        (None, None) => return Ok(None),
    };
    let need = |key: &str| s.get(key).cloned().ok_or_else(|| bad(format!("{key} is not set")));
    let (account_id, role_name) = (need("sso_account_id")?, need("sso_role_name")?);
    let region = region.ok_or_else(|| bad("sso_region is not set".into()))?;
    let home = home(env).ok_or_else(|| bad("HOME is not set, so the SSO token cache cannot be found".into()))?;
    let portal = env
        .var("AWS_ENDPOINT_URL_SSO")
        .or_else(|| env.var("AWS_ENDPOINT_URL"))
        .or_else(|| s.get("endpoint_url").cloned())
        .unwrap_or_else(|| format!("https://portal.sso.{region}.amazonaws.com"));
    let oidc = refreshable.then(|| {
        env.var("AWS_ENDPOINT_URL_SSO_OIDC")
            .or_else(|| env.var("AWS_ENDPOINT_URL"))
            .or_else(|| s.get("endpoint_url").cloned())
            .unwrap_or_else(|| format!("https://oidc.{region}.amazonaws.com"))
            .trim_end_matches('/')
            .to_owned()
    });
    Ok(Some(Sso {
        profile: profile.to_owned(),
        token_file: home.join(".aws/sso/cache").join(sso_cache_name(&cache_key)),
        account_id,
        role_name,
        portal: portal.trim_end_matches('/').to_owned(),
        oidc,
    }))
}

/// A profile's `role_arn` with `source_profile` or `credential_source` (module note);
/// `None` when it has neither (a `role_arn` beside `web_identity_token_file` is web
/// identity's).
fn assume_role_of(
    profile: &str,
    s: &HashMap<String, String>,
    env: &dyn Env,
    visited: &mut Vec<String>,
) -> Result<Option<AssumeRole>, Error> {
    let Some(role_arn) = s.get("role_arn") else { return Ok(None) };
    let bad = |why: String| Error::Config(format!("profile '{profile}' (role_arn {role_arn}): {why}"));
    let source = match (s.get("source_profile"), s.get("credential_source")) {
        (Some(_), Some(_)) => return Err(bad("has both source_profile and credential_source; keep one".into())),
        (None, None) => return Ok(None),
        (Some(src), None) if src == profile => match static_keys(s) {
            Some(keys) => RoleSource::Keys(keys),
            None => {
                return Err(bad(
                    "names itself as source_profile but has no aws_access_key_id/aws_secret_access_key".into()
                ))
            }
        },
        (Some(src), None) => {
            if visited.iter().any(|v| v == src) {
                return Err(bad(format!("source_profile loops: {} -> {src}", visited.join(" -> "))));
            }
            match from_profile_chain(src, env, false, visited)? {
                Some(Found::Keys(keys)) => RoleSource::Keys(keys),
                Some(Found::Provider(p)) => RoleSource::Provider(p),
                Some(Found::Anonymous) | None => {
                    return Err(bad(format!("its source_profile '{src}' has no credentials in the shared files")))
                }
            }
        }
        (None, Some(cs)) => match cs.as_str() {
            "Environment" => match from_env(env, false) {
                Some(keys) => RoleSource::Keys(keys),
                None => {
                    return Err(bad(
                        "credential_source Environment, but AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set".into(),
                    ))
                }
            },
            "Ec2InstanceMetadata" => match imds_settings(env, profile)? {
                // Named by the profile: its failure is its own, not "no credentials found".
                Some((imds, _)) => RoleSource::Provider(Provider::Imds(Imds { last_resort: false, ..imds })),
                None => {
                    return Err(bad(
                        "credential_source Ec2InstanceMetadata, but AWS_EC2_METADATA_DISABLED is true".into()
                    ))
                }
            },
            "EcsContainer" => match container_from_env(env, profile)? {
                Some(c) => RoleSource::Provider(Provider::Container(c)),
                None => return Err(bad(
                    "credential_source EcsContainer, but AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/_FULL_URI are not set"
                        .into(),
                )),
            },
            other => {
                return Err(bad(format!(
                    "credential_source {other:?} is not Environment, Ec2InstanceMetadata or EcsContainer"
                )))
            }
        },
    };
    Ok(Some(AssumeRole {
        profile: profile.to_owned(),
        role_arn: role_arn.clone(),
        session_name: s.get("role_session_name").cloned().unwrap_or_else(default_session_name),
        external_id: s.get("external_id").cloned(),
        sts_endpoint: sts_endpoint(env, s.get("endpoint_url").map(String::as_str)),
        region: s.get("region").cloned().or_else(|| region_from_env(env)).unwrap_or_else(|| "us-east-1".to_owned()),
        source,
    }))
}

/// `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` (both, or neither counts).
fn web_identity_from_env(env: &dyn Env, log: bool) -> Option<Provider> {
    let token_file = env.var("AWS_WEB_IDENTITY_TOKEN_FILE")?;
    let role_arn = env.var("AWS_ROLE_ARN")?;
    let profile_endpoint =
        profile_settings(&profile_name(None, env), env).ok().and_then(|s| s.get("endpoint_url").cloned());
    let w = WebIdentity {
        token_file: PathBuf::from(token_file),
        role_arn,
        session_name: env.var("AWS_ROLE_SESSION_NAME").unwrap_or_else(default_session_name),
        sts_endpoint: sts_endpoint(env, profile_endpoint.as_deref()),
    };
    if log {
        tracing::debug!(role_arn = %w.role_arn, sts = %w.sts_endpoint, "credentials: web identity (AWS_WEB_IDENTITY_TOKEN_FILE)");
    }
    Some(Provider::WebIdentity(w))
}

/// A session name when none is configured, unique per second as the SDKs' are.
fn default_session_name() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    format!("ferry-session-{secs}")
}

/// Where STS is asked: `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, the profile's
/// `endpoint_url`, else the region's endpoint (the SDKs' regional default).
fn sts_endpoint(env: &dyn Env, profile_endpoint: Option<&str>) -> String {
    env.var("AWS_ENDPOINT_URL_STS")
        .or_else(|| env.var("AWS_ENDPOINT_URL"))
        .or_else(|| profile_endpoint.map(str::to_owned))
        .unwrap_or_else(|| {
            let region = region_from_env(env).unwrap_or_else(|| "us-east-1".to_owned());
            format!("https://sts.{region}.amazonaws.com")
        })
}

/// The region named by AWS_REGION, AWS_DEFAULT_REGION, or the profile's `region`.
pub(crate) fn region_from_env(env: &dyn Env) -> Option<String> {
    env.var("AWS_REGION").or_else(|| env.var("AWS_DEFAULT_REGION")).or_else(|| {
        let profile = profile_name(None, env);
        profile_settings(&profile, env).ok().and_then(|s| s.get("region").cloned())
    })
}

/// The keys of one section. In the config file a named profile is `[profile name]`
/// (`[default]` and `[profile default]` both name the default); in the credentials file
/// it is `[name]`. Comments start with `#` or `;`; keys are case-insensitive; nested
/// (indented) sub-settings such as `s3 =` blocks are skipped.
pub(crate) fn parse_ini(text: &str, profile: &str, config_file: bool) -> HashMap<String, String> {
    parse_section(text, |name| {
        let name = if config_file {
            match name.strip_prefix("profile") {
                Some(rest) if rest.starts_with([' ', '\t']) => rest.trim(),
                _ if name == "default" => "default",
                // `[sso-session x]`, `[services x]` and bare names are not profiles there.
                _ => return false,
            }
        } else {
            name
        };
        name == profile
    })
}

/// The keys of the section whose header (between the brackets, trimmed) `wanted` takes,
/// with [`parse_ini`]'s rules for comments, case and nested settings.
fn parse_section(text: &str, wanted: impl Fn(&str) -> bool) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut in_section = false;
    for line in text.lines() {
        let indented = line.starts_with([' ', '\t']);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            in_section = wanted(header.split(']').next().unwrap_or("").trim());
            continue;
        }
        if !in_section || indented {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim();
            // Inline comments need whitespace before them (` # note`).
            let v = v.split(" #").next().unwrap_or(v).split(" ;").next().unwrap_or(v).trim();
            out.insert(k.trim().to_ascii_lowercase(), v.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const CREDS: &str = "\
# comment
[default]
aws_access_key_id = AKDEFAULT
aws_secret_access_key = secretdefault

[work]
aws_access_key_id=AKWORK
aws_secret_access_key=secretwork ; trailing comment
aws_session_token = tokenwork
";

    const CONFIG: &str = "\
[default]
region = eu-west-1

[profile dev]
region = us-west-2
aws_access_key_id = AKDEV
aws_secret_access_key = secretdev
s3 =
  addressing_style = path

[dev]
aws_access_key_id = NOT_A_PROFILE_IN_CONFIG
";

    fn files() -> (tempfile::TempDir, HashMap<String, String>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("credentials"), CREDS).unwrap();
        std::fs::write(dir.path().join("config"), CONFIG).unwrap();
        let e = env(&[
            ("AWS_SHARED_CREDENTIALS_FILE", dir.path().join("credentials").to_str().unwrap()),
            ("AWS_CONFIG_FILE", dir.path().join("config").to_str().unwrap()),
        ]);
        (dir, e)
    }

    #[test]
    fn ini_sections_and_profiles() {
        let d = parse_ini(CREDS, "default", false);
        assert_eq!(d["aws_access_key_id"], "AKDEFAULT");
        let w = parse_ini(CREDS, "work", false);
        assert_eq!(w["aws_secret_access_key"], "secretwork");
        assert_eq!(w["aws_session_token"], "tokenwork");
        let dev = parse_ini(CONFIG, "dev", true);
        assert_eq!(dev["aws_access_key_id"], "AKDEV");
        assert_eq!(dev["region"], "us-west-2");
        assert!(!dev.contains_key("addressing_style"));
        assert_eq!(parse_ini(CONFIG, "default", true)["region"], "eu-west-1");
        // In the credentials file, [dev] is a plain profile name.
        assert!(parse_ini(CREDS, "dev", false).is_empty());
    }

    #[test]
    fn chain_order() {
        let (_dir, mut e) = files();
        // Shared files, default profile.
        let c = resolve_with(&CredentialsSource::Default, &e).unwrap().unwrap();
        assert_eq!(c.access_key_id, "AKDEFAULT");
        assert_eq!(c.session_token, None);
        // AWS_PROFILE picks a profile; [profile dev] in the config file.
        e.insert("AWS_PROFILE".into(), "dev".into());
        assert_eq!(resolve_with(&CredentialsSource::Default, &e).unwrap().unwrap().access_key_id, "AKDEV");
        assert_eq!(region_from_env(&e).as_deref(), Some("us-west-2"));
        let c = resolve_with(&CredentialsSource::Profile(Some("work".into())), &e).unwrap().unwrap();
        assert_eq!(c.session_token.as_deref(), Some("tokenwork"));
        // The environment wins over the files.
        e.insert("AWS_ACCESS_KEY_ID".into(), "AKENV".into());
        e.insert("AWS_SECRET_ACCESS_KEY".into(), "secretenv".into());
        e.insert("AWS_SESSION_TOKEN".into(), "tok".into());
        let c = resolve_with(&CredentialsSource::Default, &e).unwrap().unwrap();
        assert_eq!((c.access_key_id.as_str(), c.session_token.as_deref()), ("AKENV", Some("tok")));
        // Nothing anywhere: anonymous for the default chain, an error when asked for.
        let none = env(&[("HOME", "/nonexistent-ferry-home")]);
        assert_eq!(resolve_with(&CredentialsSource::Default, &none).unwrap(), None);
        assert!(resolve_with(&CredentialsSource::Environment, &none).is_err());
        assert!(resolve_with(&CredentialsSource::Profile(Some("nope".into())), &e).is_err());
        assert_eq!(resolve_with(&CredentialsSource::Anonymous, &e).unwrap(), None);
    }

    fn found(source: &CredentialsSource, e: &HashMap<String, String>) -> String {
        match find_with(source, e, false, false).unwrap() {
            Found::Anonymous => "anonymous".into(),
            Found::Keys(c) => format!("keys {}", c.access_key_id),
            Found::Provider(Provider::Process { command, .. }) => format!("process {command}"),
            Found::Provider(Provider::WebIdentity(w)) => {
                format!("web identity {} {} {} {}", w.token_file.display(), w.role_arn, w.session_name, w.sts_endpoint)
            }
            Found::Provider(p) => p.describe(),
        }
    }

    /// The SDKs' order: environment keys, web identity from the environment, then the
    /// profile's keys, credential_process, web identity.
    #[test]
    fn chain_order_with_temporary_sources() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[profile keys]\naws_access_key_id = AKP\naws_secret_access_key = s\ncredential_process = never-run\n\
             [profile proc]\ncredential_process = /bin/creds --json\nweb_identity_token_file = /t\nrole_arn = arn:r\n\
             [profile web]\nweb_identity_token_file = /tok\nrole_arn = arn:aws:iam::1:role/w\n\
             role_session_name = s1\nendpoint_url = http://profile-endpoint\n\
             [profile half]\nweb_identity_token_file = /tok\n",
        )
        .unwrap();
        let mut e = env(&[("AWS_CONFIG_FILE", config.to_str().unwrap()), ("HOME", "/nonexistent-ferry-home")]);
        let with = |e: &HashMap<String, String>, pairs: &[(&str, &str)]| {
            let mut e = e.clone();
            e.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            e
        };
        let default = CredentialsSource::Default;
        assert_eq!(found(&default, &with(&e, &[("AWS_PROFILE", "keys")])), "keys AKP");
        assert_eq!(found(&default, &with(&e, &[("AWS_PROFILE", "proc")])), "process /bin/creds --json");
        assert_eq!(
            found(&default, &with(&e, &[("AWS_PROFILE", "web")])),
            "web identity /tok arn:aws:iam::1:role/w s1 http://profile-endpoint"
        );
        // A profile with half a web identity has nothing the chain can use.
        assert_eq!(found(&default, &with(&e, &[("AWS_PROFILE", "half")])), "anonymous");
        assert!(find_with(&CredentialsSource::Profile(Some("half".into())), &e, false, false).is_err());
        // Web identity in the environment comes before any profile, after the keys.
        e.extend(env(&[
            ("AWS_PROFILE", "keys"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/env-tok"),
            ("AWS_ROLE_ARN", "arn:env"),
            ("AWS_ROLE_SESSION_NAME", "env-session"),
            ("AWS_REGION", "eu-north-1"),
        ]));
        assert_eq!(
            found(&default, &e),
            "web identity /env-tok arn:env env-session https://sts.eu-north-1.amazonaws.com"
        );
        let e2 = with(&e, &[("AWS_ENDPOINT_URL", "http://all:1")]);
        assert!(found(&default, &e2).ends_with(" http://all:1"));
        let e3 = with(&e2, &[("AWS_ENDPOINT_URL_STS", "http://sts:2")]);
        assert!(found(&default, &e3).ends_with(" http://sts:2"));
        let e4 = with(&e, &[("AWS_ACCESS_KEY_ID", "AKENV"), ("AWS_SECRET_ACCESS_KEY", "s")]);
        assert_eq!(found(&default, &e4), "keys AKENV");
        // Without a session name, one is made up.
        e.remove("AWS_ROLE_SESSION_NAME");
        assert!(found(&default, &e).contains(" ferry-session-"));
    }

    /// A profile's credential_process runs (a real shell script) and its JSON is the keys.
    #[test]
    fn credential_process_runs() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("creds.sh");
        std::fs::write(
            &script,
            // The token carries the process group the command ran in (the fifth field of
            // /proc/PID/stat), which must be ours: a terminal's Ctrl-C and prompts reach it.
            r#"#!/bin/sh
pgrp=$(cut -d' ' -f5 /proc/$$/stat)
printf '{"Version": 1, "AccessKeyId": "AKPROC", "SecretAccessKey": "sp", "SessionToken": "tp-%s"}\n' "$pgrp"
"#,
        )
        .unwrap();
        let fail = dir.path().join("fail.sh");
        std::fs::write(&fail, "#!/bin/sh\necho 'no session: run login first' >&2\nexit 3\n").unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            format!(
                "[default]\ncredential_process = sh {}\n[profile broken]\ncredential_process = sh {}\n",
                script.display(),
                fail.display()
            ),
        )
        .unwrap();
        let e = env(&[("AWS_CONFIG_FILE", config.to_str().unwrap()), ("HOME", "/nonexistent-ferry-home")]);
        let c = resolve_with(&CredentialsSource::Default, &e).unwrap().unwrap();
        // SAFETY: getpgrp(2) has no preconditions.
        let ours = format!("tp-{}", unsafe { libc::getpgrp() });
        assert_eq!((c.access_key_id.as_str(), c.session_token.as_deref()), ("AKPROC", Some(ours.as_str())));
        let err = resolve_with(&CredentialsSource::Profile(Some("broken".into())), &e).unwrap_err().to_string();
        assert!(
            err.contains("credential_process of profile 'broken'") && err.contains("no session: run login first"),
            "{err}"
        );
    }

    /// Container credentials come after the profile, instance metadata last, and only
    /// for AWS's endpoint or an address given explicitly.
    #[test]
    fn chain_order_with_metadata_endpoints() {
        let e = env(&[("HOME", "/nonexistent-ferry-home")]);
        let with = |pairs: &[(&str, &str)]| {
            let mut e = e.clone();
            e.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            e
        };
        let on = |e: &HashMap<String, String>, aws: bool| match find_with(&CredentialsSource::Default, e, false, aws) {
            Ok(Found::Anonymous) => "anonymous".to_owned(),
            Ok(Found::Keys(c)) => format!("keys {}", c.access_key_id),
            Ok(Found::Provider(p)) => p.describe(),
            Err(e) => format!("error {e}"),
        };
        assert_eq!(on(&e, false), "anonymous");
        assert_eq!(on(&e, true), "instance metadata (IMDS at http://169.254.169.254)");
        assert_eq!(on(&with(&[("AWS_EC2_METADATA_DISABLED", "TRUE")]), true), "anonymous");
        let explicit = with(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1338/")]);
        assert_eq!(on(&explicit, false), "instance metadata (IMDS at http://127.0.0.1:1338)");
        let v6 = with(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "IPv6")]);
        assert_eq!(on(&v6, true), "instance metadata (IMDS at http://[fd00:ec2::254])");
        // How often it is asked: the environment's setting, else the profile's.
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(&config, "[default]\nmetadata_service_num_attempts = 3\nmetadata_service_timeout = 2\n")
            .unwrap();
        let asking = |e: &HashMap<String, String>| match find_with(&CredentialsSource::Default, e, false, true) {
            Ok(Found::Provider(Provider::Imds(i))) => format!("{:?}", (i.asking.attempts, i.asking.timeout)),
            Ok(Found::Provider(p)) => p.describe(),
            Err(e) => format!("error {e}"),
            Ok(_) => "no provider".into(),
        };
        let from_file = with(&[("AWS_CONFIG_FILE", config.to_str().unwrap())]);
        assert_eq!(asking(&e), "(1, None)");
        assert_eq!(asking(&from_file), "(3, Some(2s))");
        let mut overridden = from_file.clone();
        overridden.insert("AWS_METADATA_SERVICE_NUM_ATTEMPTS".into(), "2".into());
        assert_eq!(asking(&overridden), "(2, Some(2s))");
        overridden.insert("AWS_METADATA_SERVICE_TIMEOUT".into(), "later".into());
        let err = asking(&overridden);
        assert!(err.starts_with("error") && err.contains("metadata_service_timeout \"later\""), "{err}");
        let rel = with(&[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/x")]);
        assert_eq!(on(&rel, true), "container credentials (http://169.254.170.2/v2/credentials/x)");
        let full = with(&[("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.0.0.1/creds")]);
        assert!(on(&full, false).contains("plain http is allowed only to a loopback address"), "{}", on(&full, false));
        let keys = with(&[
            ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/x"),
            ("AWS_ACCESS_KEY_ID", "AK"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ]);
        assert_eq!(on(&keys, true), "keys AK");
    }

    /// role_arn with source_profile chains through profiles to static keys; a loop is an
    /// error naming it; credential_source picks the environment or a metadata endpoint.
    #[test]
    fn assume_role_profiles() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[profile a]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = b\nexternal_id = ext\nrole_session_name = sa\n\
             [profile b]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = base\nregion = eu-west-3\n\
             [profile base]\naws_access_key_id = AKBASE\naws_secret_access_key = s\n\
             [profile self]\nrole_arn = arn:aws:iam::1:role/self\nsource_profile = self\naws_access_key_id = AKSELF\naws_secret_access_key = s\n\
             [profile loop1]\nrole_arn = arn:r1\nsource_profile = loop2\n\
             [profile loop2]\nrole_arn = arn:r2\nsource_profile = loop1\n\
             [profile envsrc]\nrole_arn = arn:env\ncredential_source = Environment\n\
             [profile imdssrc]\nrole_arn = arn:imds\ncredential_source = Ec2InstanceMetadata\n\
             [profile both]\nrole_arn = arn:both\nsource_profile = base\ncredential_source = Environment\n\
             [profile empty-src]\nrole_arn = arn:x\nsource_profile = nothing-here\n\
             [profile proc-src]\nrole_arn = arn:p\nsource_profile = proc\n\
             [profile proc]\ncredential_process = /bin/creds\n",
        )
        .unwrap();
        let e = env(&[
            ("AWS_CONFIG_FILE", config.to_str().unwrap()),
            ("HOME", "/nonexistent-ferry-home"),
            ("AWS_ENDPOINT_URL_STS", "http://sts:1"),
        ]);
        let role = |name: &str, e: &HashMap<String, String>| match find_with(
            &CredentialsSource::Profile(Some(name.into())),
            e,
            false,
            false,
        ) {
            Ok(Found::Provider(Provider::AssumeRole(a))) => a,
            Ok(_) => panic!("profile {name}: not an assumed role"),
            Err(err) => panic!("profile {name}: {err}"),
        };
        let error = |name: &str, e: &HashMap<String, String>| match find_with(
            &CredentialsSource::Profile(Some(name.into())),
            e,
            false,
            false,
        ) {
            Err(err) => err.to_string(),
            Ok(_) => panic!("profile {name} resolved"),
        };
        let a = role("a", &e);
        assert_eq!(
            (a.role_arn.as_str(), a.session_name.as_str(), a.external_id.as_deref()),
            ("arn:aws:iam::1:role/a", "sa", Some("ext"))
        );
        assert_eq!(a.sts_endpoint, "http://sts:1");
        let RoleSource::Provider(Provider::AssumeRole(b)) = &a.source else { panic!("a's source is not b's role") };
        assert_eq!((b.role_arn.as_str(), b.region.as_str()), ("arn:aws:iam::1:role/b", "eu-west-3"));
        assert!(matches!(&b.source, RoleSource::Keys(k) if k.access_key_id == "AKBASE"));
        assert!(matches!(&role("self", &e).source, RoleSource::Keys(k) if k.access_key_id == "AKSELF"));
        assert!(matches!(&role("proc-src", &e).source, RoleSource::Provider(Provider::Process { .. })));
        let err = error("loop1", &e);
        assert!(err.contains("loops: loop1 -> loop2 -> loop1"), "{err}");
        assert!(error("both", &e).contains("both source_profile and credential_source"));
        assert!(error("empty-src", &e).contains("source_profile 'nothing-here' has no credentials"));
        assert!(error("envsrc", &e).contains("AWS_ACCESS_KEY_ID"));
        let mut e2 = e.clone();
        e2.extend(env(&[("AWS_ACCESS_KEY_ID", "AKENV"), ("AWS_SECRET_ACCESS_KEY", "s")]));
        assert!(matches!(&role("envsrc", &e2).source, RoleSource::Keys(k) if k.access_key_id == "AKENV"));
        assert!(matches!(&role("imdssrc", &e).source, RoleSource::Provider(Provider::Imds(_))));
        e2.insert("AWS_EC2_METADATA_DISABLED".into(), "true".into());
        assert!(error("imdssrc", &e2).contains("AWS_EC2_METADATA_DISABLED"));
    }

    /// A credential process that hangs is killed with what it started, after the
    /// configured time-out, and the error names the command and the limit.
    #[test]
    fn a_hung_credential_process_is_killed_after_its_time_out() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = dir.path().join("hang.sh");
        // The sleep is a grandchild of ours (sh -c runs the script, which forks sleep).
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh
sleep 30 &
echo $! > '{}'
wait
",
                pid_file.display()
            ),
        )
        .unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            format!(
                "[default]
credential_process = sh {}
",
                script.display()
            ),
        )
        .unwrap();
        let mut e = env(&[("AWS_CONFIG_FILE", config.to_str().unwrap()), ("HOME", "/nonexistent-ferry-home")]);
        e.insert("FERRY_CREDENTIAL_PROCESS_TIMEOUT".into(), "0.5".into());
        let started = std::time::Instant::now();
        let err = resolve_with(&CredentialsSource::Default, &e).unwrap_err().to_string();
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
        assert!(
            err.contains("credential_process of profile 'default'")
                && err.contains(script.to_str().unwrap())
                && err.contains("did not finish within 500ms and was killed"),
            "{err}"
        );
        let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
        // Gone, or a zombie waiting for a reaper that is not us. SIGKILL is delivered when
        // the process is next scheduled, so on a busy machine it may still show as running
        // for a moment after the group was signalled; five seconds is far beyond that.
        let dead = |state: &str| state.is_empty() || state.split(") ").nth(1).is_some_and(|r| r.starts_with('Z'));
        let waited = std::time::Instant::now();
        let mut state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        while !dead(&state) && waited.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
            state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        }
        assert!(dead(&state), "sleep {pid} still runs 5 s after its group was killed: {state}");
        e.insert("FERRY_CREDENTIAL_PROCESS_TIMEOUT".into(), "soon".into());
        let err = resolve_with(&CredentialsSource::Default, &e).unwrap_err().to_string();
        assert!(err.contains("FERRY_CREDENTIAL_PROCESS_TIMEOUT=\"soon\""), "{err}");
    }

    /// SSO profiles: the session's section gives the region, the cache file is named by
    /// the session (or the legacy start URL), and a missing piece is named.
    #[test]
    fn sso_profiles() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[profile s]\nsso_session = corp\nsso_account_id = 1\nsso_role_name = R\n\
             [sso-session corp]\nsso_region = eu-west-1\nsso_start_url = https://corp/start\n\
             [profile legacy]\nsso_start_url = https://old/start\nsso_region = us-east-2\nsso_account_id = 2\nsso_role_name = Q\n\
             [profile no-role]\nsso_session = corp\nsso_account_id = 1\n\
             [profile no-section]\nsso_session = other\nsso_account_id = 1\nsso_role_name = R\n",
        )
        .unwrap();
        let e = env(&[("AWS_CONFIG_FILE", config.to_str().unwrap()), ("HOME", "/h")]);
        let find = |name: &str| find_with(&CredentialsSource::Profile(Some(name.into())), &e, false, false);
        let Ok(Found::Provider(Provider::Sso(s))) = find("s") else { panic!("profile s is not SSO") };
        assert_eq!(s.portal, "https://portal.sso.eu-west-1.amazonaws.com");
        assert_eq!(s.token_file, PathBuf::from("/h/.aws/sso/cache").join(sso_cache_name("corp")));
        assert_eq!((s.account_id.as_str(), s.role_name.as_str()), ("1", "R"));
        let Ok(Found::Provider(Provider::Sso(l))) = find("legacy") else { panic!("profile legacy is not SSO") };
        assert_eq!(l.token_file, PathBuf::from("/h/.aws/sso/cache").join(sso_cache_name("https://old/start")));
        assert!(l.portal.contains("us-east-2"));
        // Only an sso-session's token is refreshed, at the region's SSO OIDC.
        assert_eq!(s.oidc.as_deref(), Some("https://oidc.eu-west-1.amazonaws.com"));
        assert_eq!(l.oidc, None);
        assert!(find("no-role").err().unwrap().to_string().contains("sso_role_name is not set"));
        assert!(find("no-section").err().unwrap().to_string().contains("no [sso-session other] section"));
    }

    #[test]
    fn aws_endpoints() {
        assert!(is_aws_endpoint("https://s3.us-east-1.amazonaws.com"));
        assert!(is_aws_endpoint("https://bucket.vpce-1.s3.cn-north-1.amazonaws.com.cn"));
        assert!(!is_aws_endpoint("http://127.0.0.1:9000"));
        assert!(!is_aws_endpoint("https://notamazonaws.com"));
    }

    #[test]
    fn credentials_file_wins_over_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("credentials"), "[p]\naws_access_key_id = FROMCREDS\n").unwrap();
        std::fs::write(
            dir.path().join("config"),
            "[profile p]\naws_access_key_id = FROMCONFIG\naws_secret_access_key = s\n",
        )
        .unwrap();
        let e = env(&[
            ("AWS_SHARED_CREDENTIALS_FILE", dir.path().join("credentials").to_str().unwrap()),
            ("AWS_CONFIG_FILE", dir.path().join("config").to_str().unwrap()),
            ("AWS_PROFILE", "p"),
        ]);
        let c = resolve_with(&CredentialsSource::Default, &e).unwrap().unwrap();
        assert_eq!((c.access_key_id.as_str(), c.secret_access_key.as_str()), ("FROMCREDS", "s"));
    }

    #[test]
    fn debug_redacts_secrets() {
        let mut c = Credentials::new("AK", "very-secret");
        c.session_token = Some("tok-secret".into());
        let s = format!("{c:?}");
        assert!(!s.contains("very-secret") && !s.contains("tok-secret"));
    }
}
