//! Configuration of `ferry serve`: where to listen, what to store, and how to behave.
//!
//! Every emulation knob has a value in [`Emulation`]; a [`Profile`] is only a named set of
//! those values (docs/lab/server-emulation.md), and any flag given on the command line overrides the
//! profile's value. The values in force are printed at start ([`ServeConfig::describe`]) so
//! that a benchmark record can carry them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Which storage the server uses.
#[derive(Clone, Debug)]
pub enum Storage {
    Memory,
    Disk(PathBuf),
}

/// Named emulation profiles (docs/lab/server-emulation.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    Lan,
    S3,
    Gcs,
    Azure,
}

impl Profile {
    pub fn parse(s: &str) -> Option<Profile> {
        match s.to_ascii_lowercase().as_str() {
            "lan" => Some(Profile::Lan),
            "s3" => Some(Profile::S3),
            "gcs" => Some(Profile::Gcs),
            "azure" => Some(Profile::Azure),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Profile::Lan => "lan",
            Profile::S3 => "s3",
            Profile::Gcs => "gcs",
            Profile::Azure => "azure",
        }
    }

    /// The profile's emulation values. Figures come from published and measured facts
    /// (docs/lab/server-emulation.md, with their sources): S3 first
    /// byte p50 ~30 ms with a p99 near 150 ms, LIST p50 60 ms, 85-90 MB/s per connection,
    /// 5,500 GET/s and 3,500 PUT/s per prefix; GCS first byte >3x S3 (p50 ~90 ms) with
    /// ~2x the throughput; Azure ~30 ms and ~4x less throughput than GCS.
    pub fn emulation(self) -> Emulation {
        const MB: u64 = 1_000_000;
        match self {
            Profile::Lan => Emulation::default(),
            Profile::S3 => Emulation {
                ttfb_p50: Duration::from_millis(30),
                ttfb_p99: Duration::from_millis(150),
                list_p50: Duration::from_millis(60),
                list_p99: Duration::from_millis(250),
                rate_per_conn: Some(90 * MB),
                get_rate_limit: Some(5_500),
                put_rate_limit: Some(3_500),
                h2: false,
                ttfb_per_request_in_flight: Duration::ZERO,
            },
            Profile::Gcs => Emulation {
                ttfb_p50: Duration::from_millis(90),
                ttfb_p99: Duration::from_millis(400),
                list_p50: Duration::from_millis(120),
                list_p99: Duration::from_millis(500),
                rate_per_conn: Some(180 * MB),
                get_rate_limit: None,
                put_rate_limit: None,
                h2: true,
                ttfb_per_request_in_flight: Duration::ZERO,
            },
            Profile::Azure => Emulation {
                ttfb_p50: Duration::from_millis(30),
                ttfb_p99: Duration::from_millis(150),
                list_p50: Duration::from_millis(60),
                list_p99: Duration::from_millis(250),
                rate_per_conn: Some(45 * MB),
                get_rate_limit: None,
                put_rate_limit: None,
                h2: false,
                ttfb_per_request_in_flight: Duration::ZERO,
            },
        }
    }
}

/// How the server shapes what a client sees. Zero durations and `None` mean "off".
#[derive(Clone, Debug, PartialEq)]
pub struct Emulation {
    /// Median and 99th percentile of the first-byte delay of object requests; drawn from
    /// a lognormal distribution fitted to the two points.
    pub ttfb_p50: Duration,
    pub ttfb_p99: Duration,
    /// The same for LIST requests.
    pub list_p50: Duration,
    pub list_p99: Duration,
    /// Bytes per second per HTTP/1.1 connection, or per HTTP/2 stream.
    pub rate_per_conn: Option<u64>,
    /// Requests per second per prefix before 503 SlowDown.
    pub get_rate_limit: Option<u32>,
    pub put_rate_limit: Option<u32>,
    /// Whether HTTP/2 is offered (h2c prior knowledge and ALPN).
    pub h2: bool,
    /// Extra first-byte delay of an object request per other object request the server
    /// is handling when it arrives (zero: off): an endpoint whose latency grows with
    /// load, for tests of a client's latency back-off. No profile sets it.
    pub ttfb_per_request_in_flight: Duration,
}

impl Default for Emulation {
    fn default() -> Self {
        Emulation {
            ttfb_p50: Duration::ZERO,
            ttfb_p99: Duration::ZERO,
            list_p50: Duration::ZERO,
            list_p99: Duration::ZERO,
            rate_per_conn: None,
            get_rate_limit: None,
            put_rate_limit: None,
            h2: true,
            ttfb_per_request_in_flight: Duration::ZERO,
        }
    }
}

/// Faults injected on purpose, seeded and reproducible.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Fraction of requests answered 500 InternalError.
    pub error_500_rate: f64,
    /// Fraction of requests answered 503 SlowDown.
    pub error_503_rate: f64,
    /// Fraction of GET bodies cut by a connection reset part-way through.
    pub reset_rate: f64,
    /// Fraction of GET bodies that stall part-way through for `stall`.
    pub stall_rate: f64,
    pub stall: Duration,
    pub seed: u64,
    /// A session token (`x-amz-security-token`, header or presigned query) expires after
    /// this many requests that carried it: each later one is answered 400 ExpiredToken,
    /// as S3 answers temporary credentials past their expiry. Counted per token, so a
    /// client that fetched a new one carries on.
    pub expire_token_after: Option<u64>,
}

impl Faults {
    pub fn any(&self) -> bool {
        self.error_500_rate > 0.0
            || self.error_503_rate > 0.0
            || self.reset_rate > 0.0
            || self.stall_rate > 0.0
            || self.expire_token_after.is_some()
    }
}

/// Protective limits against bad or slow clients.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest request head (request line + headers); larger gets 431.
    pub max_header_bytes: usize,
    /// Largest XML request body (DeleteObjects with 1,000 keys of 1,024 bytes is ~1.1 MB).
    pub max_xml_bytes: usize,
    /// Largest single PUT or part (S3: 5 GiB).
    pub max_object_bytes: u64,
    /// A keep-alive connection idle this long is closed.
    pub idle_timeout: Duration,
    /// A request head (and a TLS handshake) must arrive whole within this long of its first
    /// byte, or it gets 400 RequestTimeout and the connection closes: a slow-loris client
    /// trickling header bytes cannot hold a connection longer than this.
    pub header_timeout: Duration,
    /// A request body that delivers no byte for this long gets 400 RequestTimeout (S3's
    /// idle-body rule: its RequestTimeout comes after about 20 s without data).
    pub body_timeout: Duration,
    /// A body's reads may wait `body_timeout` in all plus one second per this many bytes
    /// received (0: no such bound), so a body trickled byte by byte also times out.
    /// 500 B/s is Apache mod_reqtimeout's default `MinRate`.
    pub body_min_rate: u64,
    /// Connections accepted at once; above it new connections get 503 and are closed.
    pub max_connections: usize,
    /// Requests read ahead of their responses on one pipelined HTTP/1.1 connection.
    pub max_pipeline_depth: usize,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS.
    pub h2_max_streams: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 64 * 1024,
            max_xml_bytes: 4 * 1024 * 1024,
            max_object_bytes: 5 * 1024 * 1024 * 1024,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(20),
            body_timeout: Duration::from_secs(20),
            body_min_rate: 500,
            max_connections: 4096,
            max_pipeline_depth: 128,
            h2_max_streams: 100,
        }
    }
}

/// TLS settings.
#[derive(Clone, Debug)]
pub enum TlsConfig {
    /// Generate a self-signed certificate for localhost/127.0.0.1; its PEM is written to
    /// `ca_file` so clients can trust it.
    SelfSigned { ca_file: PathBuf },
    /// Use the given certificate chain and key (PEM files).
    Files { cert: PathBuf, key: PathBuf },
}

/// Everything `ferry serve` needs to run.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub addr: SocketAddr,
    pub storage: Storage,
    pub profile: Profile,
    pub emulation: Emulation,
    pub faults: Faults,
    pub limits: Limits,
    pub tls: Option<TlsConfig>,
    /// `None` means anonymous: unsigned requests are accepted.
    pub credentials: Option<(String, String)>,
    pub region: String,
    /// Lifetime of the temporary keys STS AssumeRoleWithWebIdentity and AssumeRole, and
    /// SSO GetRoleCredentials, hand out when the request asks for none (sts.rs); AWS's
    /// default is one hour.
    pub sts_lifetime: std::time::Duration,
    pub synthetic_bucket: Option<String>,
    /// Connection threads, each with a runtime of its own that keeps every connection
    /// it is given (see "Threads" in lib.rs); 0 means one per core.
    pub threads: usize,
}

impl ServeConfig {
    pub fn new(addr: SocketAddr) -> Self {
        ServeConfig {
            addr,
            storage: Storage::Memory,
            profile: Profile::Lan,
            emulation: Profile::Lan.emulation(),
            faults: Faults::default(),
            limits: Limits::default(),
            tls: None,
            credentials: Some(("ferry".into(), "ferry-secret".into())),
            region: "us-east-1".into(),
            sts_lifetime: Duration::from_secs(3600),
            synthetic_bucket: Some("synthetic".into()),
            threads: 0,
        }
    }

    /// One line per setting in force, printed at start.
    pub fn describe(&self) -> Vec<String> {
        let e = &self.emulation;
        let f = &self.faults;
        let rate = e.rate_per_conn.map(|r| format!("{} B/s", r)).unwrap_or_else(|| "unlimited".into());
        let mut lines = vec![
            format!("profile: {}", self.profile.name()),
            format!(
                "emulation: ttfb p50={:?} p99={:?}, list p50={:?} p99={:?}, rate per connection={}, get limit={}, put limit={}, h2={}",
                e.ttfb_p50,
                e.ttfb_p99,
                e.list_p50,
                e.list_p99,
                rate,
                e.get_rate_limit.map(|v| format!("{v}/s per prefix")).unwrap_or_else(|| "none".into()),
                e.put_rate_limit.map(|v| format!("{v}/s per prefix")).unwrap_or_else(|| "none".into()),
                e.h2,
            ),
            format!(
                "storage: {}",
                match &self.storage {
                    Storage::Memory => "memory".to_string(),
                    Storage::Disk(p) => format!("disk {}", p.display()),
                }
            ),
        ];
        if f.any() {
            lines.push(format!(
                "faults: 500 rate={} 503 rate={} reset rate={} stall rate={} stall={:?} seed={}{}",
                f.error_500_rate,
                f.error_503_rate,
                f.reset_rate,
                f.stall_rate,
                f.stall,
                f.seed,
                f.expire_token_after.map(|n| format!(" session tokens expire after {n} requests")).unwrap_or_default()
            ));
        }
        lines.push(format!("h2 max streams: {}", self.limits.h2_max_streams));
        lines
    }
}
