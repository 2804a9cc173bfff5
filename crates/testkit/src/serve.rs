//! `ferry serve` for tests: one builder, two ways to run it.
//!
//! [`FerryServe`] holds a [`ServeConfig`] plus the fixture's own choices (a temporary data
//! directory, a generated TLS CA). [`FerryServe::start`] runs the server in this process
//! on a thread and runtime of its own ([`BackgroundServer`]); [`FerryServe::spawn`] turns
//! the same configuration into `ferry serve` flags and runs the binary under test as a
//! child, returning once its banner's first line, `listening on URL`, has been read.
//!
//! ```text
//!   FerryServe (ServeConfig + temp dir, tls, extra args/env)
//!       |-- start()      -> Served      BackgroundServer in-process; stops on drop
//!       `-- spawn(exe)   -> ServeChild  `exe serve --addr 127.0.0.1:0 ...`;
//!                                       banner read on a thread; SIGKILL on drop
//! ```
//!
//! Every temporary file (disk data, the CA file, the child's stderr log) lives in a
//! directory owned by the returned handle and removed with it. A child's stderr goes to
//! `serve.log` in that directory and is quoted when the child fails to start.

use ferry_server::{BackgroundServer, Faults, Limits, Profile, ServeConfig, Storage, TlsConfig};
use ferry_wire::{Endpoint, Mode, Transport, TransportConfig};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a child may take to print `listening on` (a release binary needs well under
/// a second; the margin is for a machine busy with builds).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A `ferry serve` to start: memory storage, signed with the dev keys, the `lan` profile
/// (no shaping), plain HTTP on `127.0.0.1:0`, until a builder call says otherwise.
#[derive(Clone, Debug)]
pub struct FerryServe {
    config: ServeConfig,
    /// Store on disk in the handle's temporary directory.
    temp_disk: bool,
    /// HTTPS with a generated self-signed CA.
    tls: bool,
    /// Child only: extra flags after the generated ones, and environment variables.
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
}

impl Default for FerryServe {
    fn default() -> Self {
        FerryServe {
            config: ServeConfig::new("127.0.0.1:0".parse().unwrap()),
            temp_disk: false,
            tls: false,
            args: Vec::new(),
            envs: Vec::new(),
        }
    }
}

impl FerryServe {
    pub fn new() -> Self {
        Self::default()
    }

    /// Objects in memory (the default).
    pub fn memory(mut self) -> Self {
        self.temp_disk = false;
        self.config.storage = Storage::Memory;
        self
    }

    /// Objects on disk, in a temporary directory removed with the server's handle.
    pub fn disk(mut self) -> Self {
        self.temp_disk = true;
        self
    }

    /// Objects on disk under `dir` (kept: a restarted server finds them again).
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.temp_disk = false;
        self.config.storage = Storage::Disk(dir.into());
        self
    }

    /// An emulation profile: its name and every value it sets.
    pub fn profile(mut self, profile: Profile) -> Self {
        self.config.profile = profile;
        self.config.emulation = profile.emulation();
        self
    }

    /// Seeded faults (500s, 503 SlowDown, resets and stalls mid-body).
    pub fn faults(mut self, faults: Faults) -> Self {
        self.config.faults = faults;
        self
    }

    /// HTTPS with a self-signed CA generated at start; its PEM file is
    /// [`Served::ca_file`] / [`ServeChild::ca_file`].
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Accept unsigned requests.
    pub fn anonymous(mut self) -> Self {
        self.config.credentials = None;
        self
    }

    /// Sign with these keys instead of [`crate::ACCESS_KEY`] / [`crate::SECRET_KEY`].
    pub fn credentials(mut self, access_key: &str, secret_key: &str) -> Self {
        self.config.credentials = Some((access_key.into(), secret_key.into()));
        self
    }

    /// Any other setting, on the configuration itself.
    pub fn configure(mut self, f: impl FnOnce(&mut ServeConfig)) -> Self {
        f(&mut self.config);
        self
    }

    /// Child only: a flag passed after the generated ones.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Child only: an environment variable (`TMPDIR` defaults to the handle's directory).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// The configuration as it stands (the storage is resolved at start).
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// Starts the server in this process; returns once it accepts connections.
    pub fn start(self) -> Served {
        let dir = tempfile::tempdir().expect("a temporary directory for ferry serve");
        let mut config = self.config;
        if self.temp_disk {
            config.storage = Storage::Disk(dir.path().join("data"));
        }
        let mut ca_file = match &config.tls {
            Some(TlsConfig::SelfSigned { ca_file }) => Some(ca_file.clone()),
            _ => None,
        };
        if self.tls && config.tls.is_none() {
            let ca = dir.path().join("ca.pem");
            config.tls = Some(TlsConfig::SelfSigned { ca_file: ca.clone() });
            ca_file = Some(ca);
        }
        let credentials = config.credentials.clone();
        let server =
            BackgroundServer::start(config).unwrap_or_else(|e| panic!("starting ferry serve in-process: {e:#}"));
        Served { server, ca_file, credentials, _dir: dir }
    }

    /// The `ferry serve` flags for this configuration (after `serve`). Panics on a
    /// setting that has no flag (`Limits` other than the timeouts, connections and h2
    /// streams; `ttfb_per_request_in_flight`): such a server can only run in-process.
    pub fn flags(&self) -> Vec<OsString> {
        let c = &self.config;
        let mut a: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: String| {
            a.push(format!("--{name}").into());
            a.push(value.into());
        };
        let secs = |d: Duration| format!("{}s", d.as_secs_f64());
        flag("addr", c.addr.to_string());
        flag("profile", c.profile.name().into());
        let e = &c.emulation;
        assert!(e.ttfb_per_request_in_flight.is_zero(), "ttfb_per_request_in_flight has no `ferry serve` flag");
        flag("ttfb-p50", secs(e.ttfb_p50));
        flag("ttfb-p99", secs(e.ttfb_p99));
        flag("list-p50", secs(e.list_p50));
        flag("list-p99", secs(e.list_p99));
        flag("rate-per-conn", e.rate_per_conn.unwrap_or(0).to_string());
        flag("get-rate-limit", e.get_rate_limit.unwrap_or(0).to_string());
        flag("put-rate-limit", e.put_rate_limit.unwrap_or(0).to_string());
        flag("h2", if e.h2 { "on" } else { "off" }.into());
        let f = &c.faults;
        flag("fault-500-rate", f.error_500_rate.to_string());
        flag("fault-503-rate", f.error_503_rate.to_string());
        flag("fault-reset-rate", f.reset_rate.to_string());
        flag("fault-stall-rate", f.stall_rate.to_string());
        flag("fault-stall", secs(f.stall));
        if let Some(n) = f.expire_token_after {
            flag("fault-expire-token-after", n.to_string());
        }
        flag("seed", f.seed.to_string());
        let (l, d) = (&c.limits, Limits::default());
        assert!(
            (l.max_header_bytes, l.max_xml_bytes, l.max_object_bytes, l.max_pipeline_depth)
                == (d.max_header_bytes, d.max_xml_bytes, d.max_object_bytes, d.max_pipeline_depth),
            "these limits have no `ferry serve` flag: {l:?}"
        );
        flag("idle-timeout", secs(l.idle_timeout));
        flag("header-timeout", secs(l.header_timeout));
        flag("body-timeout", secs(l.body_timeout));
        flag("body-min-rate", l.body_min_rate.to_string());
        flag("max-connections", l.max_connections.to_string());
        flag("h2-max-streams", l.h2_max_streams.to_string());
        flag("threads", c.threads.to_string());
        flag("region", c.region.clone());
        // Only when changed: a binary from before the flag still takes the rest.
        if c.sts_lifetime != ServeConfig::new(c.addr).sts_lifetime {
            flag("sts-lifetime", secs(c.sts_lifetime));
        }
        flag("synthetic-bucket", c.synthetic_bucket.clone().unwrap_or_default());
        match &c.credentials {
            Some((access, secret)) => {
                flag("access-key", access.clone());
                flag("secret-key", secret.clone());
            }
            None => a.push("--anonymous".into()),
        }
        match &c.tls {
            Some(TlsConfig::SelfSigned { ca_file }) => {
                a.extend(["--tls".into(), "--ca-file".into(), ca_file.clone().into_os_string()]);
            }
            Some(TlsConfig::Files { cert, key }) => {
                a.extend(["--cert".into(), cert.clone().into_os_string(), "--key".into(), key.clone().into_os_string()])
            }
            None if self.tls => a.push("--tls".into()),
            None => {}
        }
        match &c.storage {
            Storage::Disk(dir) if !self.temp_disk => a.extend(["--data".into(), dir.clone().into_os_string()]),
            _ if !self.temp_disk => a.push("--memory".into()),
            _ => {} // --data DIR added by spawn, once the directory exists
        }
        a.extend(self.args.iter().cloned());
        a
    }

    /// Runs `exe serve FLAGS` (the binary under test: `env!("CARGO_BIN_EXE_ferry")`) and
    /// returns once it printed `listening on URL` (and, with TLS, its CA file). The child
    /// gets SIGKILL when the handle drops, or when the thread that spawned it ends.
    pub fn spawn(self, exe: impl AsRef<Path>) -> ServeChild {
        let dir = tempfile::tempdir().expect("a temporary directory for ferry serve");
        let mut flags = self.flags();
        if self.temp_disk {
            flags.extend(["--data".into(), dir.path().join("data").into_os_string()]);
        }
        let log_path = dir.path().join("serve.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut cmd = Command::new(exe.as_ref());
        cmd.arg("serve").args(&flags).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
        // The keys come from flags; nothing from the caller's AWS settings.
        for k in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"] {
            cmd.env_remove(k);
        }
        cmd.env("TMPDIR", dir.path());
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", exe.as_ref().display()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let banner = Arc::new(Mutex::new(Vec::new()));
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let kept = banner.clone();
        // Reads the whole banner, and on to the end: a closed pipe would fail the
        // server's next line.
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let fail = |child: &mut Child, why: String| -> ! {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("ferry serve {why}\nflags: {flags:?}\nstderr:\n{log}");
        };
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        let mut url = None;
        let mut ca_file = None;
        let wants_ca = matches!(self.config.tls, Some(TlsConfig::SelfSigned { .. })) || self.tls;
        while url.is_none() || (wants_ca && ca_file.is_none()) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(u) = line.strip_prefix("listening on ") {
                        url = Some(u.trim().to_owned());
                    } else if let Some(ca) = line.strip_prefix("ca file: ") {
                        ca_file = Some(PathBuf::from(ca.trim()));
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    fail(&mut child, format!("printed no `listening on` within {START_TIMEOUT:?}"))
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait().ok();
                    fail(&mut child, format!("exited before it was listening ({status:?})"))
                }
            }
        }
        let url = url.unwrap();
        let addr: SocketAddr = url.rsplit("://").next().unwrap().parse().expect("listening on SCHEME://IP:PORT");
        ServeChild {
            child: Some(child),
            url,
            addr,
            ca_file,
            credentials: self.config.credentials.clone(),
            banner,
            _dir: dir,
        }
    }
}

/// A `ferry serve` running in this process; stopped (and its thread joined) on drop.
pub struct Served {
    server: BackgroundServer,
    ca_file: Option<PathBuf>,
    credentials: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

impl Served {
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `http://127.0.0.1:PORT` (or https).
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The CA file to trust when the server speaks TLS with a generated certificate.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// The keys requests must be signed with (None: anonymous).
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.credentials.as_ref().map(|(a, s)| (a.as_str(), s.as_str()))
    }

    /// The store the server serves (to look behind the HTTP API).
    pub fn backend(&self) -> &ferry_backend::Backend {
        self.server.backend()
    }

    pub fn server(&self) -> &BackgroundServer {
        &self.server
    }

    /// A transport configuration for this server: its endpoint, and its CA trusted.
    pub fn transport_config(&self) -> TransportConfig {
        let mut config = TransportConfig::new(Endpoint::parse(&self.url()).unwrap());
        config.ca_file = self.ca_file.clone();
        config
    }

    /// [`Served::transport_config`] for `mode` with a 20 s response time-out, after
    /// `configure` (for a transport type built by hand).
    pub fn client_config(&self, mode: Mode, configure: impl FnOnce(&mut TransportConfig)) -> TransportConfig {
        let mut config = self.transport_config();
        config.mode = mode;
        config.response_timeout = Duration::from_secs(20);
        configure(&mut config);
        config
    }

    /// A transport of `mode` to this server ([`Served::client_config`]).
    pub fn transport(&self, mode: Mode, configure: impl FnOnce(&mut TransportConfig)) -> Arc<dyn Transport> {
        ferry_wire::transport(self.client_config(mode, configure)).unwrap()
    }
}

/// A `ferry serve` child process; SIGKILLed (and reaped) on drop.
pub struct ServeChild {
    child: Option<Child>,
    url: String,
    addr: SocketAddr,
    ca_file: Option<PathBuf>,
    credentials: Option<(String, String)>,
    banner: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl ServeChild {
    /// The URL of its `listening on` line.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA file its banner named (TLS with a generated certificate).
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.credentials.as_ref().map(|(a, s)| (a.as_str(), s.as_str()))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The lines it printed on stdout so far.
    pub fn banner(&self) -> Vec<String> {
        self.banner.lock().unwrap().clone()
    }

    /// Sends `signal` (`libc::SIGTERM`, `libc::SIGINT`, ...) and waits for the exit.
    pub fn stop(mut self, signal: i32) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child's pid, not yet reaped, so not reused.
        let r = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        assert_eq!(r, 0, "kill({}, {signal}): {}", child.id(), std::io::Error::last_os_error());
        child.wait().unwrap()
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The child gets SIGKILL when the thread that spawned it ends (a test that panicked,
/// or a harness killed mid-run), so no server outlives its test.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl only sets this process's parent-death signal; it allocates nothing
    // and is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}
