//! Where a `ferry.Client` connects when `endpoint_url` is not given, found as the AWS
//! SDKs and the `ferry` command line find it (crates/cli/src/common.rs):
//!
//! ```text
//! endpoint  endpoint_url= ─ AWS_ENDPOINT_URL_S3 ─ AWS_ENDPOINT_URL ─ profile endpoint_url ─ https://s3.REGION.amazonaws.com
//! region    region= ─ AWS_REGION ─ AWS_DEFAULT_REGION ─ profile region ─ us-east-1
//! profile   profile= ─ AWS_PROFILE ─ default
//! ```
//!
//! Credentials are ferry-store's `CredentialsSource` chain (environment, then the shared
//! files), resolved when the store is built.

use std::path::PathBuf;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub fn profile_name(explicit: Option<&str>) -> String {
    explicit.map(str::to_owned).or_else(|| env("AWS_PROFILE")).unwrap_or_else(|| "default".into())
}

/// One key of the profile's section of the config file (`[default]`, `[profile NAME]`).
fn config_value(profile: &str, key: &str) -> Option<String> {
    let path = env("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".aws/config")))?;
    let text = std::fs::read_to_string(path).ok()?;
    let mut inside = false;
    for line in text.lines() {
        let indented = line.starts_with([' ', '\t']);
        let line = line.trim();
        if let Some(h) = line.strip_prefix('[') {
            let name = h.trim_end_matches(']').trim();
            inside = name.strip_prefix("profile ").map(str::trim).unwrap_or(name) == profile;
            continue;
        }
        if inside && !indented {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim().eq_ignore_ascii_case(key) {
                    return Some(v.trim().to_owned());
                }
            }
        }
    }
    None
}

pub fn region(explicit: Option<&str>, profile: Option<&str>) -> String {
    explicit
        .map(str::to_owned)
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| config_value(&profile_name(profile), "region"))
        .unwrap_or_else(|| "us-east-1".into())
}

pub fn endpoint(explicit: Option<&str>, region: &str, profile: Option<&str>) -> String {
    explicit
        .map(str::to_owned)
        .or_else(|| env("AWS_ENDPOINT_URL_S3"))
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .or_else(|| config_value(&profile_name(profile), "endpoint_url"))
        .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"))
}

pub fn ca_bundle() -> Option<PathBuf> {
    env("AWS_CA_BUNDLE").map(PathBuf::from)
}
