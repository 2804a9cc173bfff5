//! Where an S3 client connects, found as the AWS SDKs and the AWS CLI find it. The
//! command line and the Python package both ask here, so `ferry ls` and
//! `ferry.Client()` reach the same endpoint with the same settings.
//!
//! ```text
//! profile   explicit ─ AWS_PROFILE ─ "default"
//! region    explicit ─ AWS_REGION ─ AWS_DEFAULT_REGION ─ profile's region ─ us-east-1
//! endpoint  explicit ─ AWS_ENDPOINT_URL_S3 ─ AWS_ENDPOINT_URL ─ profile's endpoint_url
//!           ─ https://s3.REGION.amazonaws.com
//! CA bundle explicit ─ AWS_CA_BUNDLE ─ profile's ca_bundle ─ the system's roots
//! ```
//!
//! A profile's keys come from the shared files exactly as credentials do
//! (credentials.rs: `[profile NAME]` in the config file, `[NAME]` in the credentials
//! file, which wins key for key). An unreadable file counts as absent here: the
//! credentials lookup, which runs when the client is built, reports it.

use super::credentials::{profile_settings, Env, ProcessEnv};
use std::path::PathBuf;

/// The settings of one S3 client, each taken from the first place that has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsSettings {
    pub profile: String,
    pub region: String,
    pub endpoint: String,
    pub ca_bundle: Option<PathBuf>,
}

/// What the caller was given explicitly (flags, keyword arguments); `None` lets the
/// chain of the module note decide.
#[derive(Clone, Debug, Default)]
pub struct Explicit<'a> {
    pub profile: Option<&'a str>,
    pub region: Option<&'a str>,
    pub endpoint: Option<&'a str>,
    pub ca_bundle: Option<&'a std::path::Path>,
}

impl AwsSettings {
    /// Resolves every setting from this process's environment and the shared files.
    pub fn resolve(explicit: &Explicit<'_>) -> AwsSettings {
        resolve_with(explicit, &ProcessEnv)
    }
}

pub(crate) fn resolve_with(explicit: &Explicit<'_>, env: &dyn Env) -> AwsSettings {
    let profile =
        explicit.profile.map(str::to_owned).or_else(|| env.var("AWS_PROFILE")).unwrap_or_else(|| "default".to_owned());
    let from_profile = profile_settings(&profile, env).unwrap_or_default();
    let region = explicit
        .region
        .map(str::to_owned)
        .or_else(|| env.var("AWS_REGION"))
        .or_else(|| env.var("AWS_DEFAULT_REGION"))
        .or_else(|| from_profile.get("region").cloned())
        .unwrap_or_else(|| "us-east-1".to_owned());
    let endpoint = explicit
        .endpoint
        .map(str::to_owned)
        .or_else(|| env.var("AWS_ENDPOINT_URL_S3"))
        .or_else(|| env.var("AWS_ENDPOINT_URL"))
        .or_else(|| from_profile.get("endpoint_url").cloned())
        .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
    let ca_bundle = explicit
        .ca_bundle
        .map(PathBuf::from)
        .or_else(|| env.var("AWS_CA_BUNDLE").map(PathBuf::from))
        .or_else(|| from_profile.get("ca_bundle").map(PathBuf::from));
    AwsSettings { profile, region, endpoint, ca_bundle }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const CONFIG: &str = "\
[default]
region = eu-west-1

[profile lab]
region = us-west-2
endpoint_url = http://127.0.0.1:9000
ca_bundle = /etc/lab-ca.pem
s3 =
  endpoint_url = http://nested.invalid

[lab]
region = not-a-profile-in-the-config-file
";

    fn env_with_config(extra: &[(&str, &str)]) -> (tempfile::TempDir, HashMap<String, String>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config"), CONFIG).unwrap();
        let mut env: HashMap<String, String> = extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.insert("AWS_CONFIG_FILE".into(), dir.path().join("config").display().to_string());
        env.insert("AWS_SHARED_CREDENTIALS_FILE".into(), dir.path().join("absent").display().to_string());
        (dir, env)
    }

    #[test]
    fn defaults_without_anything() {
        let env: HashMap<String, String> = HashMap::from([("HOME".into(), "/nonexistent-home".into())]);
        let s = resolve_with(&Explicit::default(), &env);
        assert_eq!(
            s,
            AwsSettings {
                profile: "default".into(),
                region: "us-east-1".into(),
                endpoint: "https://s3.us-east-1.amazonaws.com".into(),
                ca_bundle: None,
            }
        );
    }

    #[test]
    fn the_profile_supplies_what_the_environment_does_not() {
        let (_dir, env) = env_with_config(&[("AWS_PROFILE", "lab")]);
        let s = resolve_with(&Explicit::default(), &env);
        assert_eq!(s.profile, "lab");
        assert_eq!(s.region, "us-west-2");
        // The top-level key, not the one nested under `s3 =`.
        assert_eq!(s.endpoint, "http://127.0.0.1:9000");
        assert_eq!(s.ca_bundle.as_deref(), Some(std::path::Path::new("/etc/lab-ca.pem")));
        // The default profile's region, and the endpoint built from it.
        let (_dir, env) = env_with_config(&[]);
        let s = resolve_with(&Explicit::default(), &env);
        assert_eq!((s.region.as_str(), s.endpoint.as_str()), ("eu-west-1", "https://s3.eu-west-1.amazonaws.com"));
    }

    #[test]
    fn environment_beats_profile_and_explicit_beats_both() {
        let (_dir, env) = env_with_config(&[
            ("AWS_PROFILE", "lab"),
            ("AWS_DEFAULT_REGION", "ap-south-1"),
            ("AWS_ENDPOINT_URL", "http://generic.invalid"),
            ("AWS_ENDPOINT_URL_S3", "http://s3-specific.invalid"),
        ]);
        let s = resolve_with(&Explicit::default(), &env);
        assert_eq!((s.region.as_str(), s.endpoint.as_str()), ("ap-south-1", "http://s3-specific.invalid"));
        let explicit = Explicit {
            profile: Some("default"),
            region: Some("sa-east-1"),
            endpoint: Some("http://given.invalid"),
            ca_bundle: Some(std::path::Path::new("/given.pem")),
        };
        let s = resolve_with(&explicit, &env);
        assert_eq!(s.profile, "default");
        assert_eq!((s.region.as_str(), s.endpoint.as_str()), ("sa-east-1", "http://given.invalid"));
        assert_eq!(s.ca_bundle.as_deref(), Some(std::path::Path::new("/given.pem")));
    }

    #[test]
    fn a_bare_section_name_is_not_a_profile_in_the_config_file() {
        // `[lab]` in the config file is not profile "lab"; with no `[profile lab]` its
        // keys do not apply.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config"), "[lab]\nregion = wrong-1\n").unwrap();
        let env: HashMap<String, String> = HashMap::from([
            ("AWS_CONFIG_FILE".into(), dir.path().join("config").display().to_string()),
            ("AWS_SHARED_CREDENTIALS_FILE".into(), dir.path().join("absent").display().to_string()),
            ("AWS_PROFILE".into(), "lab".into()),
        ]);
        assert_eq!(resolve_with(&Explicit::default(), &env).region, "us-east-1");
    }
}
