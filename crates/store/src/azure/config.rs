//! Where an Azure client sends its requests and as whom: the account, the endpoint and
//! the credential, found the way Azure's own tools find them.
//!
//! ```text
//! StoreOptions.endpoint ─┐
//! AZURE_STORAGE_CONNECTION_STRING (BlobEndpoint=, AccountName=, AccountKey=,
//!   SharedAccessSignature=, UseDevelopmentStorage=true) ─┤─► account + endpoint + base path
//! AZURE_STORAGE_ACCOUNT ─┘
//! credential, first found (CredentialsSource::Default):
//!   Explicit(account, key) ─► Shared Key
//!   AZURE_STORAGE_KEY / AccountKey=          ─► Shared Key
//!   AZURE_STORAGE_SAS_TOKEN / SharedAccessSignature= ─► SAS appended to every request
//!   AZURE_TENANT_ID + AZURE_CLIENT_ID + AZURE_CLIENT_SECRET ─► Entra ID client secret
//!   IDENTITY_ENDPOINT (+ IDENTITY_HEADER)    ─► managed identity (App Service, Functions,
//!                                               Container Apps: token.rs)
//!   nothing ─► anonymous (public containers)
//! ```
//!
//! The instance metadata service (169.254.169.254) is not probed when nothing else is
//! set: on a machine outside Azure that costs a connect time-out per client, and a
//! public container is the more likely intent. The endpoint is
//! `https://ACCOUNT.blob.core.windows.net` unless given; an emulator's endpoint carries
//! the account as its first path segment (`http://127.0.0.1:10000/devstoreaccount1`),
//! which becomes the base path of every request.

use crate::azure::token::TokenSource;
use crate::error::Error;
use crate::s3::credentials::{Env, ProcessEnv};
use crate::CredentialsSource;
use ferry_wire::Endpoint;
use std::sync::Arc;

/// Azurite's (and the storage emulator's) well-known development account.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// Its well-known key, published in Azure's emulator documentation.
pub const DEV_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// Where the emulator listens by default (`UseDevelopmentStorage=true`).
pub const DEV_BLOB_ENDPOINT: &str = "http://127.0.0.1:10000/devstoreaccount1";

/// How requests are authorised.
#[derive(Clone)]
pub enum AzureCredential {
    /// The account key (decoded from base64): Shared Key on every request, service SAS
    /// for presigned URLs.
    SharedKey(Arc<Vec<u8>>),
    /// A SAS token's query (no leading `?`), appended to every request.
    Sas(String),
    /// Entra ID bearer tokens, fetched and refreshed by `token.rs`.
    Token(Arc<TokenSource>),
    /// Unsigned requests (public containers).
    Anonymous,
}

impl std::fmt::Debug for AzureCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AzureCredential::SharedKey(_) => "SharedKey(<redacted>)",
            AzureCredential::Sas(_) => "Sas(<redacted>)",
            AzureCredential::Token(_) => "Token",
            AzureCredential::Anonymous => "Anonymous",
        })
    }
}

/// Everything an [`crate::azure::AzureClient`] needs besides its transport.
#[derive(Clone, Debug)]
pub struct AzureConfig {
    pub endpoint: Endpoint,
    /// Path before the container: empty on Azure, `/devstoreaccount1` on an emulator.
    pub base_path: String,
    pub account: String,
    pub credential: AzureCredential,
}

/// The fields of a connection string (`Key=Value;...`, keys case-insensitive).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionString {
    pub account: Option<String>,
    pub key: Option<String>,
    pub sas: Option<String>,
    pub blob_endpoint: Option<String>,
    pub protocol: Option<String>,
    pub suffix: Option<String>,
    pub development: bool,
}

impl ConnectionString {
    pub fn parse(s: &str) -> Result<ConnectionString, Error> {
        let mut c = ConnectionString::default();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            // Values (keys, SAS tokens) may themselves hold '='.
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| Error::Config(format!("connection string part {part:?} is not Key=Value")))?;
            let v = v.trim().to_owned();
            match k.trim().to_ascii_lowercase().as_str() {
                "accountname" => c.account = Some(v),
                "accountkey" => c.key = Some(v),
                "sharedaccesssignature" => c.sas = Some(v),
                "blobendpoint" => c.blob_endpoint = Some(v),
                "defaultendpointsprotocol" => c.protocol = Some(v),
                "endpointsuffix" => c.suffix = Some(v),
                "usedevelopmentstorage" => c.development = v.eq_ignore_ascii_case("true"),
                _ => {}
            }
        }
        if c.development {
            c.account.get_or_insert_with(|| DEV_ACCOUNT.to_owned());
            c.key.get_or_insert_with(|| DEV_ACCOUNT_KEY.to_owned());
            c.blob_endpoint.get_or_insert_with(|| DEV_BLOB_ENDPOINT.to_owned());
        }
        Ok(c)
    }
}

/// Splits an endpoint URL into the endpoint and its path (no trailing '/').
fn split_endpoint(url: &str) -> Result<(Endpoint, String), Error> {
    let endpoint = Endpoint::parse(url).map_err(|e| Error::Config(e.to_string()))?;
    let after_scheme = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let path = after_scheme.find('/').map(|i| &after_scheme[i..]).unwrap_or("");
    let path = path.split(['?', '#']).next().unwrap_or("").trim_end_matches('/');
    Ok((endpoint, path.to_owned()))
}

/// The account an endpoint names: `ACCOUNT.blob.core.windows.net`, else the first path
/// segment (emulator style).
fn account_of(endpoint: &Endpoint, base_path: &str) -> Option<String> {
    if let Some((first, rest)) = endpoint.host.split_once('.') {
        if rest.starts_with("blob.") && !first.is_empty() && endpoint.host.parse::<std::net::IpAddr>().is_err() {
            return Some(first.to_owned());
        }
    }
    base_path.trim_start_matches('/').split('/').next().filter(|s| !s.is_empty()).map(str::to_owned)
}

fn decode_key(key: &str) -> Result<Arc<Vec<u8>>, Error> {
    ferry_proto::checksum::base64_decode(key.trim())
        .map(Arc::new)
        .ok_or_else(|| Error::Config("the storage account key is not base64".into()))
}

impl AzureConfig {
    /// Resolves the configuration from the options and the process environment.
    pub fn resolve(endpoint: Option<&str>, credentials: &CredentialsSource) -> Result<AzureConfig, Error> {
        AzureConfig::resolve_with(endpoint, credentials, &ProcessEnv)
    }

    pub(crate) fn resolve_with(
        endpoint: Option<&str>,
        credentials: &CredentialsSource,
        env: &dyn Env,
    ) -> Result<AzureConfig, Error> {
        let conn = match env.var("AZURE_STORAGE_CONNECTION_STRING") {
            Some(s) => ConnectionString::parse(&s)?,
            None => ConnectionString::default(),
        };
        let explicit = match credentials {
            CredentialsSource::Explicit(c) => Some(c),
            _ => None,
        };
        let account_hint = explicit
            .map(|c| c.access_key_id.clone())
            .or_else(|| env.var("AZURE_STORAGE_ACCOUNT"))
            .or_else(|| conn.account.clone());
        let url = match (endpoint, &conn.blob_endpoint) {
            (Some(e), _) => e.to_owned(),
            (None, Some(e)) => e.clone(),
            (None, None) => {
                let account = account_hint.clone().ok_or_else(|| {
                    Error::Config(
                        "no Azure storage account: set AZURE_STORAGE_ACCOUNT or AZURE_STORAGE_CONNECTION_STRING, or give an endpoint".into(),
                    )
                })?;
                let protocol = conn.protocol.as_deref().unwrap_or("https");
                let suffix = conn.suffix.as_deref().unwrap_or("core.windows.net");
                format!("{protocol}://{account}.blob.{suffix}")
            }
        };
        let (endpoint, base_path) = split_endpoint(&url)?;
        // An endpoint that names its account (ACCOUNT.blob.core.windows.net) wins over
        // an account from elsewhere only if they agree: a key signs for one account.
        if let (Some(named), Some(hint)) = (account_of(&endpoint, "").as_deref(), account_hint.as_deref()) {
            if named != hint {
                return Err(Error::Config(format!(
                    "the endpoint {url} is account {named:?}, the credentials are for {hint:?}"
                )));
            }
        }
        let account = account_hint.or_else(|| account_of(&endpoint, &base_path)).ok_or_else(|| {
            Error::Config(format!("cannot tell the storage account from {url:?}: set AZURE_STORAGE_ACCOUNT"))
        })?;
        let credential = match credentials {
            CredentialsSource::Anonymous => AzureCredential::Anonymous,
            CredentialsSource::Explicit(c) => AzureCredential::SharedKey(decode_key(&c.secret_access_key)?),
            CredentialsSource::Default => default_credential(&conn, env)?,
            other => return Err(Error::Config(format!("{other:?}: an AWS credentials source means nothing to Azure"))),
        };
        Ok(AzureConfig { endpoint, base_path, account, credential })
    }
}

/// The first credential the environment offers (module note).
fn default_credential(conn: &ConnectionString, env: &dyn Env) -> Result<AzureCredential, Error> {
    if let Some(k) = env.var("AZURE_STORAGE_KEY").or_else(|| conn.key.clone()) {
        return Ok(AzureCredential::SharedKey(decode_key(&k)?));
    }
    if let Some(s) = env.var("AZURE_STORAGE_SAS_TOKEN").or_else(|| conn.sas.clone()) {
        return Ok(AzureCredential::Sas(s.trim_start_matches('?').to_owned()));
    }
    if let Some(source) = TokenSource::from_env(env)? {
        return Ok(AzureCredential::Token(Arc::new(source)));
    }
    Ok(AzureCredential::Anonymous)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn development_storage_is_the_emulator() {
        let e = env(&[("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")]);
        let c = AzureConfig::resolve_with(None, &CredentialsSource::Default, &e).unwrap();
        assert_eq!((c.endpoint.host.as_str(), c.endpoint.port), ("127.0.0.1", 10000));
        assert_eq!((c.base_path.as_str(), c.account.as_str()), ("/devstoreaccount1", DEV_ACCOUNT));
        assert!(matches!(c.credential, AzureCredential::SharedKey(_)));
    }

    #[test]
    fn connection_string_fields() {
        let s = "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:9/acct;";
        let e = env(&[("AZURE_STORAGE_CONNECTION_STRING", s)]);
        let c = AzureConfig::resolve_with(None, &CredentialsSource::Default, &e).unwrap();
        assert_eq!((c.account.as_str(), c.base_path.as_str(), c.endpoint.port), ("acct", "/acct", 9));
        assert!(matches!(&c.credential, AzureCredential::SharedKey(k) if k.as_slice() == b"key"));
        let sas =
            ConnectionString::parse("BlobEndpoint=https://a.blob.core.windows.net;SharedAccessSignature=sv=1&sig=a%3D")
                .unwrap();
        assert_eq!(sas.sas.as_deref(), Some("sv=1&sig=a%3D"));
    }

    #[test]
    fn account_alone_means_the_public_endpoint() {
        let e = env(&[("AZURE_STORAGE_ACCOUNT", "myacct"), ("AZURE_STORAGE_SAS_TOKEN", "?sv=x&sig=y")]);
        let c = AzureConfig::resolve_with(None, &CredentialsSource::Default, &e).unwrap();
        assert_eq!(c.endpoint.host, "myacct.blob.core.windows.net");
        assert_eq!(c.base_path, "");
        assert!(matches!(&c.credential, AzureCredential::Sas(s) if s == "sv=x&sig=y"));
        let c = AzureConfig::resolve_with(
            Some("https://other.blob.core.windows.net/"),
            &CredentialsSource::Anonymous,
            &env(&[]),
        )
        .unwrap();
        assert_eq!(c.account, "other");
        assert!(matches!(c.credential, AzureCredential::Anonymous));
        assert!(AzureConfig::resolve_with(None, &CredentialsSource::Default, &env(&[])).is_err());
        let mismatch = env(&[("AZURE_STORAGE_ACCOUNT", "mine")]);
        let e = AzureConfig::resolve_with(
            Some("https://theirs.blob.core.windows.net"),
            &CredentialsSource::Default,
            &mismatch,
        )
        .unwrap_err();
        assert!(e.to_string().contains("theirs"), "{e}");
    }
}
