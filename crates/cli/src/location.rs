//! Where a command's arguments point: `SCHEME://bucket/key`, a local path, or `-` for
//! stdin/stdout ([`parse_location`]), and the usage error (exit code 2) every verb
//! gives for an argument it cannot take. Pure parsing over `ferry_store::StoreUrl`, no
//! I/O.

use ferry_store::{Provider, StoreUrl, UrlError};
use std::path::PathBuf;

/// A usage error: exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Where data is: an object (or a key pattern), a local path, or stdin/stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `SCHEME://bucket/key`, parsed by the one URL model (`ferry_store::url`).
    Object {
        provider: Provider,
        bucket: String,
        key: String,
    },
    Local(PathBuf),
    Stdio,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Object { provider, bucket, key } => write!(f, "{provider}://{bucket}/{key}"),
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Stdio => f.write_str("-"),
        }
    }
}

/// Parses `s3://bucket[/key]`, `-`, or a local path. A `gs://` or `az://` URL is
/// understood, and refused until its provider is built in; other schemes are refused.
pub fn parse_location(s: &str) -> Result<Location, UsageError> {
    if s == "-" {
        return Ok(Location::Stdio);
    }
    if s.is_empty() {
        return Err(UsageError("an empty path or URL".into()));
    }
    match StoreUrl::parse(s) {
        Ok(u) if u.provider == Provider::S3 => Ok(Location::Object { provider: u.provider, bucket: u.bucket, key: u.key }),
        Ok(u) => Err(UsageError(format!(
            "{s:?}: {}:// URLs name {} objects, which this build of ferry cannot reach yet (use s3://bucket/key or a local path)",
            u.provider.scheme(),
            u.provider.name()
        ))),
        Err(UrlError::NotAUrl(_)) => Ok(Location::Local(PathBuf::from(s))),
        Err(e) => Err(UsageError(e.to_string())),
    }
}

/// `s3://bucket/key` only.
pub fn parse_s3(s: &str) -> Result<(String, String), UsageError> {
    match parse_location(s)? {
        Location::Object { bucket, key, .. } => Ok((bucket, key)),
        _ => Err(UsageError(format!("{s:?} is not an s3://bucket/key URL"))),
    }
}
