//! Where a `ferry.Client` connects when `endpoint_url` is not given: the same chain the
//! `ferry` command line uses, ferry-store's `AwsSettings` (crates/store/src/s3/settings.rs):
//!
//! ```text
//! endpoint  endpoint_url= ─ AWS_ENDPOINT_URL_S3 ─ AWS_ENDPOINT_URL ─ profile endpoint_url ─ https://s3.REGION.amazonaws.com
//! region    region= ─ AWS_REGION ─ AWS_DEFAULT_REGION ─ profile region ─ us-east-1
//! profile   profile= ─ AWS_PROFILE ─ default
//! CA bundle AWS_CA_BUNDLE ─ profile ca_bundle
//! ```
//!
//! Credentials are ferry-store's `CredentialsSource` chain, resolved when the store is
//! built, in the AWS SDKs' order: environment keys, web identity from the environment,
//! the profile (AssumeRole through `source_profile`/`credential_source`, SSO, keys,
//! `credential_process`, web identity), container credentials, instance metadata.

use ferry_store::s3::settings::Explicit;
use ferry_store::AwsSettings;
use std::path::PathBuf;

fn resolve(region: Option<&str>, profile: Option<&str>, endpoint: Option<&str>) -> AwsSettings {
    AwsSettings::resolve(&Explicit { profile, region, endpoint, ca_bundle: None })
}

pub fn region(explicit: Option<&str>, profile: Option<&str>) -> String {
    resolve(explicit, profile, None).region
}

pub fn endpoint(explicit: Option<&str>, region: &str, profile: Option<&str>) -> String {
    resolve(Some(region), profile, explicit).endpoint
}

pub fn ca_bundle(profile: Option<&str>) -> Option<PathBuf> {
    resolve(None, profile, None).ca_bundle
}
