//! `ferry serve`: flags, start-up banner and signal handling around `ferry_server`.
//!
//! The first line on stdout is `listening on http://ADDR` (or https), printed once the
//! socket accepts connections, so scripts can start the server with port 0 and read the
//! port back. The credentials and every emulation value in force follow.
//!
//! `--tls` without `--ca-file` writes its self-signed CA to `ferry-ca-PID.pem` in the
//! temp dir and removes it when the server stops (SIGINT, SIGTERM, an error).

use crate::units::{parse_bytes, parse_duration};
use anyhow::{bail, Result};
use clap::Args;
use ferry_server::{Profile, ServeConfig, Server, Storage, TlsConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  ferry serve --memory\n  ferry serve --data /srv/ferry --profile s3\n  ferry serve --addr 127.0.0.1:0 --anonymous --tls\n  ferry serve --profile s3 --fault-503-rate 0.01 --seed 7\n\nThe synthetic bucket serves deterministic bytes sized by the key: GET /synthetic/1GiB/x\nMetrics (Prometheus text): GET /_ferry/metrics\nStart every random draw (delays, faults) over from seed N: POST /_ferry/seed?value=N"
)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (printed on the first line).
    #[arg(long, default_value = "127.0.0.1:9000")]
    addr: SocketAddr,
    /// Keep objects in memory (the default).
    #[arg(long, conflicts_with = "data")]
    memory: bool,
    /// Keep objects on disk under DIR; they survive restarts.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Emulation profile: lan (no delay), s3, gcs or azure. Flags below override its values.
    #[arg(long, default_value = "lan", value_parser = parse_profile)]
    profile: Profile,
    /// Serve HTTPS with a self-signed certificate for localhost (CA file path is printed).
    #[arg(long)]
    tls: bool,
    /// PEM certificate chain for --tls, instead of a self-signed one.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// PEM private key for --cert.
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Where --tls writes the self-signed CA certificate, kept after the server stops
    /// [default: a file in the temp dir, removed when the server stops].
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Accept unsigned requests (no SigV4 check).
    #[arg(long)]
    anonymous: bool,
    /// Access key [default: $AWS_ACCESS_KEY_ID, else "ferry"].
    #[arg(long, env = "AWS_ACCESS_KEY_ID", hide_env_values = true)]
    access_key: Option<String>,
    /// Secret key [default: $AWS_SECRET_ACCESS_KEY, else "ferry-secret"].
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    secret_key: Option<String>,
    /// Region reported by the server.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Lifetime of the temporary keys STS AssumeRoleWithWebIdentity (any non-empty token
    /// is taken), AssumeRole (signed by the server's keys) and SSO GetRoleCredentials (any
    /// non-empty token) hand out when the request asks for none.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    sts_lifetime: Duration,
    /// Name of the read-only synthetic bucket ("" to disable).
    #[arg(long, default_value = "synthetic")]
    synthetic_bucket: String,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS.
    #[arg(long, default_value_t = 100)]
    h2_max_streams: u32,
    /// Connection threads; each keeps the connections it is given (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Offer HTTP/2 (h2c and ALPN h2): on|off [default: the profile's].
    #[arg(long, value_parser = parse_on_off)]
    h2: Option<bool>,
    /// Median first-byte delay of object requests, e.g. 30ms [default: the profile's].
    #[arg(long, value_parser = parse_duration)]
    ttfb_p50: Option<Duration>,
    /// 99th percentile first-byte delay [default: the profile's, or 5x p50].
    #[arg(long, value_parser = parse_duration)]
    ttfb_p99: Option<Duration>,
    /// Median first-byte delay of LIST requests.
    #[arg(long, value_parser = parse_duration)]
    list_p50: Option<Duration>,
    /// 99th percentile first-byte delay of LIST requests.
    #[arg(long, value_parser = parse_duration)]
    list_p99: Option<Duration>,
    /// Bytes per second per HTTP/1.1 connection or HTTP/2 stream, e.g. 90MB; 0 = unlimited.
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES_PER_SEC")]
    rate_per_conn: Option<u64>,
    /// GET/HEAD requests per second per prefix before 503 SlowDown; 0 = unlimited.
    #[arg(long)]
    get_rate_limit: Option<u32>,
    /// PUT/COPY/DELETE requests per second per prefix before 503 SlowDown; 0 = unlimited.
    #[arg(long)]
    put_rate_limit: Option<u32>,
    /// Fraction of requests answered 500 InternalError.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    fault_500_rate: f64,
    /// Fraction of requests answered 503 SlowDown.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    fault_503_rate: f64,
    /// Fraction of GET bodies cut by a connection (h1) or stream (h2) reset.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    fault_reset_rate: f64,
    /// Fraction of GET bodies that stall part-way for --fault-stall.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    fault_stall_rate: f64,
    /// How long a stalled body pauses.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    fault_stall: Duration,
    /// A session token (x-amz-security-token) expires after N requests that carried it:
    /// later ones get 400 ExpiredToken, as S3 answers expired temporary credentials.
    #[arg(long, value_name = "N")]
    fault_expire_token_after: Option<u64>,
    /// Seed of every random draw (delays, faults), for reproducible runs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Close keep-alive connections idle this long (HTTP/2: no stream open this long ends
    /// in GOAWAY; a client silent this long is pinged).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// Answer 400 RequestTimeout and close when a request head (or a TLS handshake) has
    /// not arrived whole this long after its first byte (slow-loris headers). HTTP/2: a
    /// header block left incomplete this long, or a ping unanswered, closes the connection.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    header_timeout: Duration,
    /// Answer 400 RequestTimeout and close when a request body sends nothing for this long.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    body_timeout: Duration,
    /// A body may take --body-timeout plus one second per this many bytes in all
    /// (0: no bound), so a body trickled byte by byte also times out.
    #[arg(long, default_value = "500", value_parser = parse_bytes, value_name = "BYTES_PER_SEC")]
    body_min_rate: u64,
    /// Connections served at once; more are answered 503 and closed. Each needs an open
    /// file: the server raises its limit to the hard limit and warns when that is short.
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    Profile::parse(s).ok_or_else(|| format!("unknown profile '{s}' (use lan, s3, gcs or azure)"))
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(format!("'{s}': use on or off")),
    }
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("'{s}' is not a fraction between 0 and 1")),
    }
}

fn config(args: ServeArgs) -> Result<ServeConfig> {
    let mut c = ServeConfig::new(args.addr);
    if let Some(dir) = args.data {
        c.storage = Storage::Disk(dir);
    }
    c.profile = args.profile;
    let e = &mut c.emulation;
    *e = args.profile.emulation();
    if let Some(v) = args.h2 {
        e.h2 = v;
    }
    if let Some(p50) = args.ttfb_p50 {
        e.ttfb_p50 = p50;
        e.ttfb_p99 = args.ttfb_p99.unwrap_or(p50 * 5);
    } else if let Some(p99) = args.ttfb_p99 {
        e.ttfb_p99 = p99;
    }
    if let Some(p50) = args.list_p50 {
        e.list_p50 = p50;
        e.list_p99 = args.list_p99.unwrap_or(p50 * 4);
    } else if let Some(p99) = args.list_p99 {
        e.list_p99 = p99;
    }
    if let Some(r) = args.rate_per_conn {
        e.rate_per_conn = Some(r).filter(|r| *r > 0);
    }
    if let Some(r) = args.get_rate_limit {
        e.get_rate_limit = Some(r).filter(|r| *r > 0);
    }
    if let Some(r) = args.put_rate_limit {
        e.put_rate_limit = Some(r).filter(|r| *r > 0);
    }
    let f = &mut c.faults;
    f.error_500_rate = args.fault_500_rate;
    f.error_503_rate = args.fault_503_rate;
    f.reset_rate = args.fault_reset_rate;
    f.stall_rate = args.fault_stall_rate;
    f.stall = args.fault_stall;
    f.expire_token_after = args.fault_expire_token_after;
    f.seed = args.seed;
    if f.error_500_rate + f.error_503_rate > 1.0 {
        bail!("--fault-500-rate and --fault-503-rate add up to more than 1");
    }
    c.limits.h2_max_streams = args.h2_max_streams;
    c.threads = args.threads;
    c.limits.idle_timeout = args.idle_timeout;
    c.limits.header_timeout = args.header_timeout;
    c.limits.body_timeout = args.body_timeout;
    c.limits.body_min_rate = args.body_min_rate;
    c.limits.max_connections = args.max_connections;
    c.region = args.region;
    c.sts_lifetime = args.sts_lifetime;
    c.synthetic_bucket = Some(args.synthetic_bucket).filter(|s| !s.is_empty());
    c.credentials = if args.anonymous {
        None
    } else {
        Some((
            args.access_key.unwrap_or_else(|| "ferry".into()),
            args.secret_key.unwrap_or_else(|| "ferry-secret".into()),
        ))
    };
    c.tls = match (args.tls, args.cert, args.key) {
        (_, Some(cert), Some(key)) => Some(TlsConfig::Files { cert, key }),
        (true, _, _) => Some(TlsConfig::SelfSigned {
            ca_file: args
                .ca_file
                .unwrap_or_else(|| std::env::temp_dir().join(format!("ferry-ca-{}.pem", std::process::id()))),
        }),
        _ => None,
    };
    Ok(c)
}

/// Removes the CA file `--tls` generated (no `--ca-file` given) when the server stops:
/// on SIGINT or SIGTERM (`shutdown_signal`), on an error, on a panic. Its certificate is
/// made afresh at every start, so the file is of no use once this server is gone. A
/// `--ca-file` the user named is left where they asked for it; SIGKILL leaves either.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    let generated_ca = args.ca_file.is_none();
    // A secret the user chose (flag or environment) is never printed; the built-in one
    // is, so that a first run can be signed against without reading the docs.
    let secret_chosen = args.secret_key.is_some();
    let config = config(args)?;
    // This runtime only accepts: connections are served on the server's own connection
    // threads (ferry_server, "Threads"), so one thread is all it needs.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let describe = config.describe();
        let credentials = config.credentials.clone();
        let ca_file = match &config.tls {
            Some(TlsConfig::SelfSigned { ca_file }) => Some(ca_file.clone()),
            _ => None,
        };
        let _ca_guard = RemoveOnDrop(ca_file.clone().filter(|_| generated_ca));
        // Handlers in place before the banner: a signal sent as soon as it is read stops
        // the server cleanly (the CA file removed) instead of killing it.
        let stop = shutdown_signal()?;
        let server = Server::bind(config).await?;
        tokio::spawn(release_freed_memory());
        let scheme = if server.is_tls() { "https" } else { "http" };
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {scheme}://{}", server.local_addr())?;
        match &credentials {
            Some((a, s)) => {
                writeln!(out, "access key: {a}")?;
                if secret_chosen {
                    writeln!(out, "secret key: not printed (--secret-key or AWS_SECRET_ACCESS_KEY)")?;
                } else {
                    writeln!(out, "secret key: {s} (the built-in default)")?;
                }
            }
            None => writeln!(out, "auth: anonymous (unsigned requests accepted)")?,
        }
        if let Some(ca) = ca_file {
            writeln!(out, "ca file: {}", ca.display())?;
        }
        if let Some(limit) = server.fd_limit() {
            writeln!(out, "{}", limit.describe(server.max_connections()))?;
            if let Some(warning) = limit.shortfall(server.max_connections()) {
                eprintln!("ferry serve: warning: {warning}");
            }
        }
        for line in describe {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        drop(out);
        server.run(stop).await?;
        eprintln!("ferry serve: stopped");
        Ok(())
    })
}

/// Resolves on the first SIGINT or SIGTERM; the handlers are installed by this call.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

extern "C" {
    // mimalloc's C API, linked in by the mimalloc crate's libmimalloc-sys (main.rs).
    fn mi_collect(force: bool);
}

/// How often the server asks the allocator to return memory freed a while ago: mimalloc
/// v3's `purge_delay`, so freed memory goes back within about two of them;
/// `scripts/server-rss.py` re-measures it (docs/lab/cli-serve-memory.md).
const RELEASE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Hands memory freed by deletes and overwrites back to the kernel once it has gone
/// unused for mimalloc's `purge_delay` (1 s in v3). mimalloc only purges when the
/// allocator is called, so an idle server kept it all until the next request.
/// `mi_collect(false)` on whichever runtime worker runs this task runs the arenas'
/// delayed purges for every thread; memory reused within the delay, as in a steady
/// PUT/DELETE load, is never purged, so nothing is faulted back in. Measured with
/// `scripts/server-rss.py` (docs/lab/cli-serve-memory.md has the figures and the command).
async fn release_freed_memory() {
    let mut tick = tokio::time::interval(RELEASE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // SAFETY: a plain call into the linked allocator; it collects this thread's
        // heap and purges what the arenas have held unused past the delay.
        unsafe { mi_collect(false) };
    }
}
