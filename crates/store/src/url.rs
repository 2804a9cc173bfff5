//! The one URL model: `s3://bucket/key`, `gs://bucket/object`, `az://container/blob`.
//!
//! The scheme names the provider ([`Provider`]); the rest is a bucket (a container on
//! Azure) and a key, kept byte for byte (a key may hold spaces, `?`, `*`, `%`: nothing is
//! percent-decoded, since these are names, not HTTP URLs). The command line, the Python
//! package and the engine's callers all parse here, so a new provider is one more arm.
//! A blob's portal URL (`https://ACCOUNT.blob.core.windows.net/container/blob`) parses
//! as the `az://` URL it names; its account is read with [`StoreUrl::azure_account`].

use std::fmt;

/// Who serves a URL's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Amazon S3 and everything that speaks its API (`s3://`).
    S3,
    /// Google Cloud Storage (`gs://`).
    Gcs,
    /// Azure Blob Storage (`az://`).
    Azure,
}

impl Provider {
    pub const ALL: [Provider; 3] = [Provider::S3, Provider::Gcs, Provider::Azure];

    /// The URL scheme, without `://`.
    pub fn scheme(self) -> &'static str {
        match self {
            Provider::S3 => "s3",
            Provider::Gcs => "gs",
            Provider::Azure => "az",
        }
    }

    /// The provider of a scheme (case-insensitive).
    pub fn from_scheme(scheme: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.scheme().eq_ignore_ascii_case(scheme))
    }

    /// The provider's own name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Provider::S3 => "S3",
            Provider::Gcs => "Google Cloud Storage",
            Provider::Azure => "Azure Blob Storage",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.scheme())
    }
}

/// A parsed object-store URL. `key` may be empty (a bucket, or a prefix's root).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreUrl {
    pub provider: Provider,
    pub bucket: String,
    pub key: String,
}

/// Why a string is not a [`StoreUrl`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Not `scheme://...` at all: the caller may take it as a local path.
    #[error("{0:?} is not a URL")]
    NotAUrl(String),
    #[error("{url:?}: unsupported URL scheme {scheme:?} (use s3://, gs:// or az://, or a local path)")]
    UnknownScheme { url: String, scheme: String },
    #[error("{0:?} names no bucket: expected SCHEME://bucket/key")]
    NoBucket(String),
    #[error("{0:?} is not a valid bucket name (letters, digits, '.', '-', '_')")]
    BadBucket(String),
    #[error("{0:?}: wildcards are not allowed in bucket names")]
    WildcardBucket(String),
}

impl StoreUrl {
    pub fn new(provider: Provider, bucket: impl Into<String>, key: impl Into<String>) -> StoreUrl {
        StoreUrl { provider, bucket: bucket.into(), key: key.into() }
    }

    /// Parses `SCHEME://bucket[/key]`, and a blob's URL as the Azure portal shows it
    /// (`https://ACCOUNT.blob.core.windows.net/container/blob`, whose account
    /// [`StoreUrl::azure_account`] reads). A string without `://` is [`UrlError::NotAUrl`].
    pub fn parse(s: &str) -> Result<StoreUrl, UrlError> {
        let Some((scheme, rest)) = s.split_once("://") else { return Err(UrlError::NotAUrl(s.to_owned())) };
        if let Some((_, path)) = azure_portal(scheme, rest) {
            return StoreUrl::parse(&format!("az://{path}"));
        }
        if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+') {
            return Err(UrlError::NotAUrl(s.to_owned()));
        }
        let provider = Provider::from_scheme(scheme)
            .ok_or_else(|| UrlError::UnknownScheme { url: s.to_owned(), scheme: scheme.to_owned() })?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(UrlError::NoBucket(s.to_owned()));
        }
        if bucket.contains(['*', '?']) {
            return Err(UrlError::WildcardBucket(s.to_owned()));
        }
        if bucket.len() > 255 || !bucket.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')) {
            return Err(UrlError::BadBucket(bucket.to_owned()));
        }
        Ok(StoreUrl { provider, bucket: bucket.to_owned(), key: key.to_owned() })
    }

    /// The storage account of an Azure portal URL (`https://ACCOUNT.blob.core.windows.net/...`);
    /// `None` for every other string (an `az://` URL takes its account from the
    /// environment).
    pub fn azure_account(s: &str) -> Option<String> {
        let (scheme, rest) = s.split_once("://")?;
        azure_portal(scheme, rest).map(|(account, _)| account.to_owned())
    }

    /// The object this URL names.
    pub fn object(&self) -> crate::ObjectRef {
        self.at(&self.key)
    }

    /// The object `key` in this URL's bucket, its provider carried: how the command line
    /// makes every object it names from a URL (a file's key under a prefix, a listed
    /// key, a destination's), so each says its own scheme in messages.
    pub fn at(&self, key: impl Into<String>) -> crate::ObjectRef {
        crate::ObjectRef::on(self.provider, &self.bucket, key)
    }
}

/// `(account, "container/blob")` of `https://ACCOUNT.blob.core.windows.net/container/blob`
/// (any `blob.core.*` cloud suffix; the blob name as the portal shows it, %-encoded, is
/// decoded: a portal URL is an HTTP URL, unlike `az://`).
fn azure_portal<'a>(scheme: &str, rest: &'a str) -> Option<(&'a str, String)> {
    if !scheme.eq_ignore_ascii_case("https") && !scheme.eq_ignore_ascii_case("http") {
        return None;
    }
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (account, domain) = host.split_once('.')?;
    if account.is_empty() || !domain.to_ascii_lowercase().starts_with("blob.core.") {
        return None;
    }
    let path = path.split(['?', '#']).next().unwrap_or("");
    Some((account, ferry_proto::encoding::percent_decode(path).unwrap_or_else(|_| path.to_owned())))
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}/{}", self.provider.scheme(), self.bucket, self.key)
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = UrlError;
    fn from_str(s: &str) -> Result<StoreUrl, UrlError> {
        StoreUrl::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_names_its_provider() {
        assert_eq!(StoreUrl::parse("s3://b/k/x").unwrap(), StoreUrl::new(Provider::S3, "b", "k/x"));
        assert_eq!(StoreUrl::parse("GS://b/o").unwrap(), StoreUrl::new(Provider::Gcs, "b", "o"));
        assert_eq!(StoreUrl::parse("az://c/").unwrap(), StoreUrl::new(Provider::Azure, "c", ""));
        assert_eq!(StoreUrl::parse("s3://b").unwrap(), StoreUrl::new(Provider::S3, "b", ""));
        assert_eq!(StoreUrl::parse("s3://b/a b/q?*.txt").unwrap().key, "a b/q?*.txt");
        assert_eq!(StoreUrl::parse("gs://b/o").unwrap().to_string(), "gs://b/o");
    }

    #[test]
    fn azure_portal_urls_are_az_urls() {
        let u = "https://myacct.blob.core.windows.net/photos/2024/a%20b.jpg?sv=x";
        assert_eq!(StoreUrl::parse(u).unwrap(), StoreUrl::new(Provider::Azure, "photos", "2024/a b.jpg"));
        assert_eq!(StoreUrl::azure_account(u).as_deref(), Some("myacct"));
        assert_eq!(StoreUrl::parse("https://myacct.blob.core.windows.net/c").unwrap().key, "");
        assert_eq!(StoreUrl::azure_account("az://c/b"), None);
        assert!(matches!(StoreUrl::parse("https://example.com/x"), Err(UrlError::UnknownScheme { .. })));
    }

    #[test]
    fn bad_urls_say_why() {
        assert_eq!(StoreUrl::parse("./local"), Err(UrlError::NotAUrl("./local".into())));
        assert!(matches!(StoreUrl::parse("ftp://h/x"), Err(UrlError::UnknownScheme { .. })));
        assert!(matches!(StoreUrl::parse("s3://"), Err(UrlError::NoBucket(_))));
        assert!(matches!(StoreUrl::parse("s3:///key"), Err(UrlError::NoBucket(_))));
        assert!(matches!(StoreUrl::parse("s3://bad bucket/k"), Err(UrlError::BadBucket(_))));
        assert!(matches!(StoreUrl::parse("s3://b*/k"), Err(UrlError::WildcardBucket(_))));
    }
}
