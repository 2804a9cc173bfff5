//! What every data verb shares: global options, locations (`s3://bucket/key`, local
//! paths, `-`), building the S3 client the way the AWS CLI finds its settings, output
//! (human lines or `--json` lines), the progress display, and exit codes.
//!
//! Settings, first found wins (as the AWS CLI):
//!
//! ```text
//! endpoint    --endpoint-url ─ AWS_ENDPOINT_URL_S3 ─ AWS_ENDPOINT_URL ─ profile endpoint_url ─ https://s3.REGION.amazonaws.com
//! region      --region ─ AWS_REGION ─ AWS_DEFAULT_REGION ─ profile region ─ us-east-1
//! profile     --profile ─ AWS_PROFILE ─ default
//! CA bundle   --ca-bundle ─ AWS_CA_BUNDLE ─ profile ca_bundle
//! credentials --no-sign-request (none) ─ --profile (that profile's keys only)
//!             ─ AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY ─ the profile in ~/.aws/credentials, ~/.aws/config
//! ```
//!
//! Exit codes: 0 success; 1 an operation failed (some objects may have been done: each
//! failure is reported with its object and cause); 2 a usage error (bad flags, bad URL,
//! no credentials), detected before anything is sent.

use anyhow::Result;
use clap::Args;
use ferry_engine::Engine;
use ferry_store::{CredentialsSource, DynObjectStore, Mode, Provider, StoreOptions, StoreUrl, UrlError};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Options every data verb takes, before the verb (`ferry --json ls`) or after it
/// (`ferry ls --json`); after wins. Not clap-global: `serve --profile` means something else.
#[derive(Args, Clone, Debug, Default)]
pub struct Global {
    /// The service endpoint, e.g. http://127.0.0.1:9000. S3: else AWS_ENDPOINT_URL, the
    /// profile's endpoint_url, or AWS S3 in the region. gs:// and az://: else their
    /// provider's own lookup (STORAGE_EMULATOR_HOST; the Azure account or connection
    /// string). It applies to every URL of the command, so a copy between providers
    /// takes each endpoint from its provider's environment instead.
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// The region requests are signed for (else AWS_REGION, the profile's, us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// A profile of ~/.aws/credentials and ~/.aws/config (else AWS_PROFILE, "default").
    #[arg(long)]
    pub profile: Option<String>,
    /// Send unsigned requests (public buckets); no credentials are looked up.
    #[arg(long)]
    pub no_sign_request: bool,
    /// A PEM file of CA certificates to trust as well (else AWS_CA_BUNDLE).
    #[arg(long, value_name = "PEM")]
    pub ca_bundle: Option<PathBuf>,
    /// HTTP transport: auto, h1-pool, h1-pipeline or h2.
    #[arg(long, value_parser = parse_mode)]
    pub transport: Option<ModeArg>,
    /// One JSON object per line on stdout, for scripts (no progress display).
    #[arg(long)]
    pub json: bool,
    /// No progress display, even on a terminal, and no line per object transferred or
    /// removed (as the AWS CLI's --quiet); errors are still said. Not with --json.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Say what ferry is doing on stderr: -v each retry, resumed download and give-up
    /// (info), -vv every step (debug). FERRY_LOG, a tracing filter, overrides it.
    #[arg(long, short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// No progress display, set by verbs that run others (`ferry run`): their lines are
    /// still printed, unlike with `--quiet`.
    #[arg(skip)]
    pub no_progress: bool,
    /// Objects transferred at once.
    #[arg(long, short = 'c', value_name = "N")]
    pub concurrency: Option<usize>,
    /// Parts of one large object transferred at once.
    #[arg(long, value_name = "N")]
    pub part_concurrency: Option<usize>,
    /// Part size for multipart uploads and ranged downloads (bytes, or 8MiB, 16MB ...).
    #[arg(long, value_parser = crate::units::parse_bytes)]
    pub part_size: Option<u64>,
    /// Downloads: fsync each file before renaming it into place, so it survives a power
    /// loss or kernel crash too (a killed ferry never leaves a partial file either way).
    /// Costs the disk's write speed: see ferry-engine's download/mod.rs.
    #[arg(long)]
    pub fsync: bool,
    /// Seconds a request may go without progress (no response yet, no byte of its body
    /// sent or received) before that attempt fails and is retried; as the AWS CLI's
    /// --cli-read-timeout. Default 60. Fractions allowed (0.5).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub timeout: Option<std::time::Duration>,
    /// Seconds a connection may take to open (TCP and TLS) before that attempt fails and
    /// is retried; as the AWS CLI's --cli-connect-timeout. Default 10.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub connect_timeout: Option<std::time::Duration>,
    /// Attempts per request, the first included (1: never retry); else AWS_MAX_ATTEMPTS,
    /// which counts the same way, else 5. A request whose peer went silent (a dead link)
    /// gives up after at most about N x (connect timeout + timeout) plus the waits between
    /// attempts (a few seconds): with the defaults ~6 minutes in the worst case, and 1-2
    /// minutes on a link that died (an endpoint that fails every connection attempt for
    /// a whole connect timeout is then refused at once, but for one probe per connect
    /// timeout). Requests run at once, and a shared retry budget stops retrying when many
    /// fail together, so a whole command ends in about that time too.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub retries: Option<u32>,
}

fn parse_secs(s: &str) -> Result<std::time::Duration, String> {
    match s.trim().trim_end_matches('s').parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86_400.0 => Ok(std::time::Duration::from_secs_f64(v)),
        _ => Err(format!("{s:?} is not a number of seconds between 0 and 86400 (like 30 or 0.5)")),
    }
}

#[derive(Clone, Copy, Debug)]
pub struct ModeArg(pub Mode);

impl Default for ModeArg {
    fn default() -> Self {
        ModeArg(Mode::Auto)
    }
}

fn parse_mode(s: &str) -> Result<ModeArg, String> {
    Mode::parse(s).map(ModeArg).ok_or_else(|| format!("unknown transport {s:?} (auto, h1-pool, h1-pipeline, h2)"))
}

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

/// An error as one line: its contexts and causes joined by ": ", each said once.
/// anyhow's `{:#}` prints every source after its error, and ours already carry their
/// source's words (a transport error names the OS error it wraps), so a refused
/// connection read "connection refused" three times; a cause whose text the line
/// already holds is left out.
pub fn explain(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || parts.last().is_some_and(|l| l.contains(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
}

/// Some operations of a verb failed (each was reported): exit code 1.
#[derive(Debug)]
pub struct PartialFailure {
    pub failed: u64,
    pub total: u64,
}

impl std::fmt::Display for PartialFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} operations failed", self.failed, self.total)
    }
}

impl std::error::Error for PartialFailure {}

/// Where data is: an object (or a key pattern), a local path, or stdin/stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `SCHEME://bucket/key`, parsed by the one URL model (`ferry_store::url`); every
    /// object a command makes from it is [`StoreUrl::at`]'s, its provider carried.
    Object(StoreUrl),
    Local(PathBuf),
    Stdio,
}

impl Location {
    /// The provider of an object location.
    pub fn provider(&self) -> Option<Provider> {
        match self {
            Location::Object(u) => Some(u.provider),
            _ => None,
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Object(u) => write!(f, "{u}"),
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Stdio => f.write_str("-"),
        }
    }
}

/// Parses `s3://bucket[/key]`, `gs://bucket[/object]`, `az://container[/blob]`, `-`, or a
/// local path; other schemes are refused.
pub fn parse_location(s: &str) -> Result<Location, UsageError> {
    if s == "-" {
        return Ok(Location::Stdio);
    }
    if s.is_empty() {
        return Err(UsageError("an empty path or URL".into()));
    }
    if let Some(account) = StoreUrl::azure_account(s) {
        note_portal_account(&account)?;
    }
    match StoreUrl::parse(s) {
        Ok(u) => Ok(Location::Object(u)),
        Err(UrlError::NotAUrl(_)) => Ok(Location::Local(PathBuf::from(s))),
        Err(e) => Err(UsageError(e.to_string())),
    }
}

/// The account of the Azure portal URLs on the command line
/// (`https://ACCOUNT.blob.core.windows.net/container/blob`, parsed as `az://` URLs): their
/// endpoint, unless `--endpoint-url` names one. One account per command.
static PORTAL_ACCOUNT: Mutex<Option<String>> = Mutex::new(None);

fn note_portal_account(account: &str) -> Result<(), UsageError> {
    let mut a = PORTAL_ACCOUNT.lock().unwrap_or_else(|p| p.into_inner());
    match a.as_deref() {
        Some(other) if other != account => {
            Err(UsageError(format!("URLs of two Azure storage accounts ({other}, {account}) in one command")))
        }
        _ => {
            *a = Some(account.to_owned());
            Ok(())
        }
    }
}

/// `https://ACCOUNT.blob.core.windows.net` of the portal URLs given, if any.
fn portal_endpoint() -> Option<String> {
    let a = PORTAL_ACCOUNT.lock().unwrap_or_else(|p| p.into_inner());
    a.as_ref().map(|account| format!("https://{account}.blob.core.windows.net"))
}

/// An object URL only (`SCHEME://bucket/key`), for the verbs that take no local path.
pub fn parse_object(s: &str) -> Result<StoreUrl, UsageError> {
    match parse_location(s)? {
        Location::Object(u) => Ok(u),
        _ => Err(UsageError(format!(
            "{s:?} is not an object URL (s3://bucket/key, gs://bucket/key, az://container/key)"
        ))),
    }
}

/// Objects in flight by default: enough to hide per-request latency for small objects
/// (~30 ms first byte on S3, docs/lab/store-s3-facts.md), within the transport's connection
/// cap; `ferry bench cli-transfer --quick` measures `ferry cp` with it beside the peers.
const DEFAULT_CONCURRENCY: usize = 64;
/// Parts of one object in flight, as ferry-store's multipart default.
const DEFAULT_PART_CONCURRENCY: usize = 8;
/// 8 MiB: the low end of S3's cost-optimal request size (AnyBlob; docs/lab/store-s3-facts.md).
const DEFAULT_PART_SIZE: u64 = 8 * 1024 * 1024;

impl Global {
    /// `self` (before the verb) overridden by `over` (after it).
    pub fn merged(&self, over: &Global) -> Global {
        Global {
            endpoint_url: over.endpoint_url.clone().or_else(|| self.endpoint_url.clone()),
            region: over.region.clone().or_else(|| self.region.clone()),
            profile: over.profile.clone().or_else(|| self.profile.clone()),
            no_sign_request: over.no_sign_request || self.no_sign_request,
            ca_bundle: over.ca_bundle.clone().or_else(|| self.ca_bundle.clone()),
            transport: over.transport.or(self.transport),
            json: over.json || self.json,
            quiet: over.quiet || self.quiet,
            verbose: over.verbose.max(self.verbose),
            no_progress: over.no_progress || self.no_progress,
            concurrency: over.concurrency.or(self.concurrency),
            part_concurrency: over.part_concurrency.or(self.part_concurrency),
            part_size: over.part_size.or(self.part_size),
            fsync: over.fsync || self.fsync,
            timeout: over.timeout.or(self.timeout),
            connect_timeout: over.connect_timeout.or(self.connect_timeout),
            retries: over.retries.or(self.retries),
        }
    }

    /// Time-outs and attempts: the flags, else AWS_MAX_ATTEMPTS for the attempts, else
    /// the library's defaults. A malformed AWS_MAX_ATTEMPTS is a usage error.
    pub fn limits(&self) -> Result<ferry_store::RequestLimits> {
        let max_attempts = match self.retries {
            Some(n) => Some(n),
            None => ferry_store::RequestLimits::attempts_from_env().map_err(usage)?,
        };
        Ok(ferry_store::RequestLimits {
            read_timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            max_attempts,
        })
    }

    pub fn concurrency(&self) -> usize {
        self.concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1)
    }

    pub fn part_concurrency(&self) -> usize {
        self.part_concurrency.unwrap_or(DEFAULT_PART_CONCURRENCY).max(1)
    }

    pub fn part_size(&self) -> u64 {
        self.part_size.unwrap_or(DEFAULT_PART_SIZE).max(1024 * 1024)
    }

    /// Profile, region, endpoint and CA bundle for S3 (ferry-store's `AwsSettings`: the
    /// flags first, then the AWS variables and the profile, as the AWS CLI).
    pub fn aws_settings(&self) -> ferry_store::AwsSettings {
        ferry_store::AwsSettings::resolve(&ferry_store::s3::settings::Explicit {
            profile: self.profile.as_deref(),
            region: self.region.as_deref(),
            endpoint: self.endpoint_url.as_deref(),
            ca_bundle: self.ca_bundle.as_deref(),
        })
    }

    pub fn region_name(&self) -> String {
        self.aws_settings().region
    }

    pub fn endpoint(&self) -> String {
        self.aws_settings().endpoint
    }

    /// The client for these settings: built once per process and shared (so the lines
    /// of `ferry run` share connections). Missing credentials (without
    /// --no-sign-request) is a usage error, as in the AWS CLI.
    pub fn client(&self, provider: Provider) -> Result<Engine> {
        static CLIENTS: Mutex<Vec<(String, Engine)>> = Mutex::new(Vec::new());
        let key = format!(
            "{provider}|{:?}|{:?}|{:?}|{}|{:?}|{:?}|{}|{}",
            self.endpoint_url,
            self.region,
            self.profile,
            self.no_sign_request,
            self.ca_bundle,
            self.transport,
            self.concurrency(),
            self.part_concurrency()
        );
        let limits = self.limits()?;
        let key = format!("{key}|{limits:?}");
        let mut cache = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, c)) = cache.iter().find(|(k, _)| *k == key) {
            return Ok(c.clone());
        }
        let store = match provider {
            Provider::S3 => self.build_s3()?,
            other => self.build_other(other)?,
        };
        let c = Engine::new(store);
        cache.push((key, c.clone()));
        Ok(c)
    }

    /// Enough connections for the objects in flight, or the parts of four large
    /// downloads (the transport caps them).
    fn max_connections(&self) -> usize {
        self.concurrency().max(self.part_concurrency() * 4).clamp(8, 256)
    }

    /// A provider other than S3 finds its own endpoint and credentials (its module says
    /// how); `--endpoint-url`, `--no-sign-request`, `--ca-bundle` and `--transport` apply
    /// to it as to S3, the AWS settings (region, profile) do not.
    fn build_other(&self, provider: Provider) -> Result<DynObjectStore> {
        let portal = if provider == Provider::Azure { portal_endpoint() } else { None };
        let options = StoreOptions {
            endpoint: self.endpoint_url.clone().or(portal),
            region: None,
            credentials: if self.no_sign_request { CredentialsSource::Anonymous } else { CredentialsSource::Default },
            mode: self.transport.unwrap_or_default().0,
            ca_file: self.ca_bundle.clone(),
            max_connections: Some(self.max_connections()),
            transport_layer: None,
            limits: self.limits()?,
        };
        ferry_store::connect(provider, options).map_err(|e| match e {
            ferry_store::Error::Config(m) => usage(m),
            e => anyhow::Error::new(e),
        })
    }

    fn build_s3(&self) -> Result<DynObjectStore> {
        let source = if self.no_sign_request {
            CredentialsSource::Anonymous
        } else if let Some(p) = &self.profile {
            CredentialsSource::Profile(Some(p.clone()))
        } else {
            CredentialsSource::Default
        };
        let aws = self.aws_settings();
        let endpoint = aws.endpoint;
        // Only where the keys would come from: a credential_process, STS or a metadata
        // endpoint is asked once, by the client built below.
        match source.locate(&endpoint) {
            Ok(None) if !self.no_sign_request => {
                return Err(usage(
                    "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE and \
                     AWS_ROLE_ARN, a profile in ~/.aws/credentials or ~/.aws/config (keys, role_arn, sso_session, \
                     credential_process or web_identity_token_file; --profile / AWS_PROFILE), \
                     AWS_CONTAINER_CREDENTIALS_FULL_URI, or AWS_EC2_METADATA_SERVICE_ENDPOINT; for public buckets pass \
                     --no-sign-request",
                ))
            }
            Err(e) => return Err(usage(format!("credentials: {e}"))),
            _ => {}
        }
        let options = StoreOptions {
            endpoint: Some(endpoint.clone()),
            region: Some(aws.region),
            credentials: source,
            mode: self.transport.unwrap_or_default().0,
            ca_file: aws.ca_bundle,
            max_connections: Some(self.max_connections()),
            transport_layer: None,
            limits: self.limits()?,
        };
        ferry_store::connect(Provider::S3, options).map_err(|e| match e {
            ferry_store::Error::Config(m) => usage(format!("endpoint {endpoint:?}: {m}")),
            e => anyhow::Error::new(e),
        })
    }

    pub fn download_params(&self) -> ferry_engine::DownloadParams {
        ferry_engine::DownloadParams {
            part_size: self.part_size(),
            concurrency: self.part_concurrency(),
            resume: true,
            durable: self.fsync,
            ..Default::default()
        }
    }

    pub fn upload_params(&self) -> ferry_engine::UploadParams {
        ferry_engine::UploadParams {
            part_size: self.part_size(),
            concurrency: self.part_concurrency(),
            ..Default::default()
        }
    }
}

/// Where results go: human lines or JSON lines on stdout, errors on stderr (and as JSON
/// lines with `--json`), and the progress display on a terminal.
#[derive(Clone)]
pub struct Output {
    pub json: bool,
    /// `--quiet` without `--json`: no line per object done ([`Output::emit_done`]).
    quiet: bool,
    lock: Arc<Mutex<()>>,
    pub progress: Progress,
    failed: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
}

impl Output {
    pub fn new(g: &Global) -> Output {
        let show = !g.json && !g.quiet && !g.no_progress && std::io::stderr().is_terminal();
        Output {
            json: g.json,
            quiet: g.quiet && !g.json,
            lock: Arc::default(),
            progress: Progress::new(show),
            failed: Arc::default(),
            total: Arc::default(),
        }
    }

    /// A result line: `text` for people, `value` with `--json`.
    pub fn emit(&self, text: impl FnOnce() -> String, value: impl FnOnce() -> serde_json::Value) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let line = if self.json { value().to_string() } else { text() };
        self.progress.bar.suspend(|| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
        });
    }

    /// The line saying one object was transferred or removed: as [`Output::emit`], but
    /// nothing with `--quiet`.
    pub fn emit_done(&self, text: impl FnOnce() -> String, value: impl FnOnce() -> serde_json::Value) {
        if !self.quiet {
            self.emit(text, value);
        }
    }

    /// One operation done (counts toward the summary).
    pub fn ok(&self) {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.progress.object_done();
    }

    /// One operation failed: said on stderr (and as a JSON line), counted for exit code 1.
    pub fn fail(&self, op: &str, what: &str, err: &dyn std::fmt::Display) {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.failed.fetch_add(1, Ordering::Relaxed);
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.progress.bar.suspend(|| {
            eprintln!("ferry: error: {op} {what}: {err}");
            if self.json {
                let v = serde_json::json!({"op": op, "object": what, "error": err.to_string()});
                let _ = writeln!(std::io::stdout().lock(), "{v}");
            }
        });
    }

    /// A copy failed: said as `cp SOURCE to DEST: cause`, so both names are there; its
    /// JSON line names the source as `object` (as [`Output::fail`]) and the `dest`.
    pub fn fail_copy(&self, op: &str, source: &str, dest: &str, err: &dyn std::fmt::Display) {
        if dest.is_empty() {
            return self.fail(op, source, err);
        }
        self.total.fetch_add(1, Ordering::Relaxed);
        self.failed.fetch_add(1, Ordering::Relaxed);
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.progress.bar.suspend(|| {
            eprintln!("ferry: error: {op} {source} to {dest}: {err}");
            if self.json {
                let v = serde_json::json!({"op": op, "object": source, "dest": dest, "error": err.to_string()});
                let _ = writeln!(std::io::stdout().lock(), "{v}");
            }
        });
    }

    /// Ends the display; `Err(PartialFailure)` if anything failed.
    pub fn finish(&self) -> Result<()> {
        self.progress.bar.finish_and_clear();
        let failed = self.failed.load(Ordering::Relaxed);
        if failed > 0 {
            return Err(anyhow::Error::new(PartialFailure { failed, total: self.total.load(Ordering::Relaxed) }));
        }
        Ok(())
    }
}

/// The progress display: bytes, rate, ETA and objects, on stderr, drawn only on a
/// terminal (hidden otherwise: indicatif's hidden target costs nothing).
#[derive(Clone)]
pub struct Progress {
    pub bar: ProgressBar,
    objects: Arc<AtomicU64>,
}

impl Progress {
    fn new(show: bool) -> Progress {
        let bar = if show {
            ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) =
            ProgressStyle::with_template("{bytes:>10}/{total_bytes:<10} {binary_bytes_per_sec:>12}  eta {eta:<4} {msg}")
        {
            bar.set_style(style);
        }
        Progress { bar, objects: Arc::default() }
    }

    /// More work found (listings stream, so the total grows as they go).
    pub fn add_total(&self, bytes: u64) {
        self.bar.inc_length(bytes);
    }

    pub fn bytes_fn(&self) -> ferry_engine::ProgressFn {
        let bar = self.bar.clone();
        Arc::new(move |n| bar.inc(n))
    }

    fn object_done(&self) {
        let n = self.objects.fetch_add(1, Ordering::Relaxed) + 1;
        if !self.bar.is_hidden() {
            self.bar.set_message(format!("{n} objects"));
        }
    }
}

/// RFC 3339 for JSON and listings.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// `2024-01-02 03:04:05` (UTC) for listings, as s5cmd prints.
pub fn short_time(t: std::time::SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let f = time::macros::format_description!("[year]/[month]/[day] [hour]:[minute]:[second]");
    t.format(&f).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_says_each_cause_once() {
        // A store error over a transport error over the OS error, each repeating the
        // next one's words, as a refused connection was: one mention.
        #[derive(Debug)]
        struct Wraps(&'static str, std::io::Error);
        impl std::fmt::Display for Wraps {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}: {}", self.0, self.1)
            }
        }
        impl std::error::Error for Wraps {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.1)
            }
        }
        let os = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
        let e = anyhow::Error::new(Wraps("cannot connect: 127.0.0.1:1", os)).context("listing s3://b/");
        let line = explain(&e);
        assert_eq!(line, "listing s3://b/: cannot connect: 127.0.0.1:1: Connection refused (os error 111)");
        assert_eq!(line.matches("refused").count(), 1, "{line}");
        // Causes that do not repeat each other are all kept.
        let e = anyhow::anyhow!("root cause").context("middle").context("top");
        assert_eq!(explain(&e), "top: middle: root cause");
    }

    #[test]
    fn locations() {
        assert_eq!(parse_location("s3://b/k/x").unwrap(), Location::Object(StoreUrl::new(Provider::S3, "b", "k/x")));
        assert_eq!(parse_location("S3://b").unwrap(), Location::Object(StoreUrl::new(Provider::S3, "b", "")));
        assert_eq!(parse_location("s3://b/").unwrap(), Location::Object(StoreUrl::new(Provider::S3, "b", "")));
        assert_eq!(
            parse_location("s3://b/a b/*.txt").unwrap(),
            Location::Object(StoreUrl::new(Provider::S3, "b", "a b/*.txt"))
        );
        assert_eq!(parse_location("-").unwrap(), Location::Stdio);
        assert_eq!(parse_location("dir/file").unwrap(), Location::Local("dir/file".into()));
        assert_eq!(parse_location("./s3:/x").unwrap(), Location::Local("./s3:/x".into()));
        assert!(parse_location("s3://").is_err());
        assert!(parse_location("s3:///key").is_err());
        assert!(parse_location("s3://bad bucket/k").is_err());
        assert!(parse_location("s3://b*/k").is_err());
        assert_eq!(parse_location("gs://b/k").unwrap(), Location::Object(StoreUrl::new(Provider::Gcs, "b", "k")));
        assert_eq!(parse_location("az://c/d/e").unwrap(), Location::Object(StoreUrl::new(Provider::Azure, "c", "d/e")));
        assert!(parse_location("ftp://h/k").unwrap_err().0.contains("unsupported URL scheme"));
        assert!(parse_location("").is_err());
        assert!(parse_object("local").is_err());
    }
}
