//! Child processes of a benchmark (`ferry serve`, `iperf3 -s`), each held by a guard
//! that ends it, so none outlives the run:
//!
//! - dropping the guard (normal end, `?` early return, or a panic unwinding) kills the
//!   child with SIGKILL and reaps it;
//! - `PR_SET_PDEATHSIG(SIGKILL)` kills it if the bench process itself dies without
//!   unwinding (killed, aborted). The signal follows the *thread* that spawned the child,
//!   so children are spawned from the runner's main thread, never from a worker;
//! - a watchdog thread kills it after a lifetime bound, whatever happens.
//!
//! With an emulated link (ferry-link), a [`ServerCommand`] carries it: servers start
//! inside the link's server namespace (setns between fork and exec) and listen on its
//! address instead of 127.0.0.1, so every workload that starts its servers here runs
//! across the link without knowing it. [`iperf3`] measures the same path.

use anyhow::{bail, Context, Result};
use ferry_link::Link;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A running child, killed when dropped.
pub struct ChildGuard {
    child: Child,
    name: String,
    /// Dropping this sender stops the watchdog.
    _watchdog: mpsc::Sender<()>,
}

impl ChildGuard {
    /// Spawns `cmd` with the guard's protections. stdin is closed; stdio as set on `cmd`.
    pub fn spawn(mut cmd: Command, name: &str, lifetime: Duration) -> Result<ChildGuard> {
        cmd.stdin(Stdio::null());
        // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        let pid = child.id() as libc::pid_t;
        let (tx, rx) = mpsc::channel::<()>();
        let label = name.to_owned();
        std::thread::spawn(move || {
            // Returns Err(Disconnected) as soon as the guard is dropped (the child has then
            // been killed and reaped by the guard; the pid is not signalled again).
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(lifetime) {
                eprintln!("ferry bench: {label} ran past its {lifetime:?} bound; killing it");
                // SAFETY: kill(2) on the pid of our own unreaped child (the guard, which
                // reaps it, is still alive: it would have disconnected the channel).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        Ok(ChildGuard { child, name: name.to_owned(), _watchdog: tx })
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How to start `ferry serve`: a program and the arguments before the server's own
/// (normally this very binary and `serve`). A parameter, so tests and other callers can
/// point the runner at any build of ferry.
#[derive(Clone, Debug)]
pub struct ServerCommand {
    pub program: PathBuf,
    pub pre_args: Vec<String>,
    /// Start inside this link's server namespace, on its address (`--addr 127.0.0.1:P`
    /// becomes `--addr SERVER_IP:P`).
    pub link: Option<Arc<Link>>,
}

impl ServerCommand {
    /// `<program> serve ...`.
    pub fn ferry(program: impl Into<PathBuf>) -> ServerCommand {
        ServerCommand { program: program.into(), pre_args: vec!["serve".into()], link: None }
    }

    /// `args` with every `127.0.0.1` host of an `--addr` moved to the link's server
    /// address (unchanged without a link).
    pub fn server_args(&self, args: &[String]) -> Vec<String> {
        let Some(link) = &self.link else { return args.to_vec() };
        let mut out = args.to_vec();
        for i in 1..out.len() {
            if out[i - 1] == "--addr" {
                if let Some(port) = out[i].strip_prefix("127.0.0.1:") {
                    out[i] = format!("{}:{port}", link.server_ip());
                }
            }
        }
        out
    }

    /// The running executable (`std::env::current_exe`), as `ferry serve`.
    pub fn current_exe() -> Result<ServerCommand> {
        Ok(ServerCommand::ferry(std::env::current_exe().context("finding the ferry executable")?))
    }
}

/// A `ferry serve` subprocess that printed `listening on URL`.
pub struct ServerProcess {
    pub url: String,
    /// The banner lines after the first (credentials, profile, emulation values).
    pub banner: Vec<String>,
    /// The server's stderr goes here.
    pub log: PathBuf,
    pub args: Vec<String>,
    guard: ChildGuard,
}

/// How long a server may take to print its first line.
pub const SERVER_START_TIMEOUT: Duration = Duration::from_secs(30);

impl ServerProcess {
    /// Starts `cmd` with `args` (port 0 is the caller's business: pass `--addr 127.0.0.1:0`)
    /// and waits for the banner. The banner ends at the first line that does not look
    /// like `key: value`, or when stdout goes quiet after the `emulation:`/`storage:` lines.
    pub fn start(cmd: &ServerCommand, args: &[String], lifetime: Duration, log_dir: &Path) -> Result<ServerProcess> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = log_dir.join(format!("ferry-bench-serve-{}-{n}.log", std::process::id()));
        let log_file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let args = cmd.server_args(args);
        let mut c = Command::new(&cmd.program);
        c.args(&cmd.pre_args).args(&args).stdout(Stdio::piped()).stderr(log_file);
        if let Some(link) = &cmd.link {
            link.server_command(&mut c);
        }
        let mut guard = ChildGuard::spawn(c, "ferry serve", lifetime)?;
        let stdout = guard.child_mut().stdout.take().expect("stdout is piped");
        // Read the banner on a thread (a blocking read cannot time out); the thread keeps
        // draining stdout afterwards so the server never blocks on a full pipe.
        let (tx, rx) = mpsc::channel::<Option<String>>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        let _ = tx.send(Some(l));
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(None);
        });
        let deadline = Instant::now() + SERVER_START_TIMEOUT;
        let wait = |rx: &mpsc::Receiver<Option<String>>, until: Instant| {
            rx.recv_timeout(until.saturating_duration_since(Instant::now()))
        };
        let url = match wait(&rx, deadline) {
            Ok(Some(line)) => match line.strip_prefix("listening on ") {
                Some(u) => u.trim().to_owned(),
                None => bail!("ferry serve printed {line:?} instead of 'listening on URL' (log: {})", log.display()),
            },
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = guard.child_mut().wait().ok();
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                bail!("ferry serve exited before listening ({status:?}): {}", tail.trim());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("ferry serve did not print 'listening on' within {SERVER_START_TIMEOUT:?}")
            }
        };
        // The rest of the banner arrives in the same write; take what comes within 500 ms.
        let mut banner = Vec::new();
        let quiet = Instant::now() + Duration::from_millis(500);
        while let Ok(Some(line)) = wait(&rx, quiet) {
            banner.push(line);
        }
        Ok(ServerProcess { url, banner, log, args, guard })
    }

    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// Whether the server is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.guard.child_mut().try_wait(), Ok(None))
    }

    /// The banner's `name: value` line, e.g. `emulation`.
    /// A value the banner states (`name: value`), without its parenthesised note; `None`
    /// when absent or withheld (`secret key: not printed (...)`).
    pub fn banner_value(&self, name: &str) -> Option<&str> {
        let value = self.banner.iter().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(": ")))?;
        let value = value.split(" (").next().unwrap_or(value).trim();
        (value != "not printed").then_some(value)
    }
}

/// A server that is still running when it is dropped was stopped by us: its log says
/// nothing anyone will read, so it goes (1,606 of them had piled up in /tmp). A server
/// that died on its own keeps its log, which the caller's error names.
impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.alive() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// What one iperf3 run measured.
#[derive(Clone, Debug, Default)]
pub struct Iperf3Result {
    /// iperf3 is not installed.
    pub absent: bool,
    pub streams: usize,
    /// The counted window (`-t`).
    pub seconds: u32,
    /// The warm-up before it (`-O`), not in [`Iperf3Result::bits_per_second`].
    pub omit_seconds: u32,
    /// The receiver's total over the counted window (`end.sum_received.bits_per_second`:
    /// iperf3 leaves the omitted seconds out of its end sums).
    pub bits_per_second: f64,
    /// Over warm-up and window together, from the per-second intervals (omitted ones
    /// included): the figure to hold against a run that counts its ramp-up.
    pub bits_per_second_with_ramp: Option<f64>,
    pub retransmits: Option<f64>,
    pub cpu_host_pct: Option<f64>,
    pub cpu_remote_pct: Option<f64>,
    /// Every interval of the report in order, omitted ones included: (seconds, bytes).
    pub intervals: Vec<(f64, f64)>,
}

/// The most parallel streams iperf3 3.x accepts (`-P`).
pub const IPERF3_MAX_STREAMS: usize = 128;

/// One iperf3 measurement: `-P streams -O omit -t seconds [-R]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Iperf3Run {
    pub streams: usize,
    pub seconds: u32,
    /// `-O`: seconds at the start left out of the result (slow start).
    pub omit: u32,
    /// `-R`: the server sends and the client receives, the direction of a GET's body
    /// (server namespace to client namespace on a link).
    pub reverse: bool,
    /// `-i`: the report's interval in milliseconds (`None`: iperf3's 1 s).
    pub interval_ms: Option<u32>,
}

impl Iperf3Run {
    /// The client's arguments after `-c HOST -p PORT`.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "-P".to_string(),
            self.streams.clamp(1, IPERF3_MAX_STREAMS).to_string(),
            "-t".into(),
            self.seconds.max(1).to_string(),
        ];
        if self.omit > 0 {
            a.extend(["-O".to_string(), self.omit.to_string()]);
        }
        if self.reverse {
            a.push("-R".into());
        }
        if let Some(ms) = self.interval_ms {
            a.extend(["-i".to_string(), format!("{}", ms as f64 / 1000.0)]);
        }
        a.push("-J".into());
        a
    }
}

/// `iperf3 -P streams -t seconds`, client to server, nothing omitted (see [`iperf3_run`]).
pub fn iperf3(link: Option<&Link>, streams: usize, seconds: u32, lifetime: Duration) -> Result<Iperf3Result> {
    iperf3_run(link, &Iperf3Run { streams, seconds, omit: 0, reverse: false, interval_ms: None }, lifetime)
}

/// `iperf3 -s -1` and `iperf3 -c HOST <run.args()>`, each guarded like a server. Without
/// a link both ends use 127.0.0.1. With one, the server starts in the link's server
/// namespace on its address, and the client is spawned from the calling thread, which
/// must be in the client namespace ([`Link::enter_client`]).
pub fn iperf3_run(link: Option<&Link>, run: &Iperf3Run, lifetime: Duration) -> Result<Iperf3Result> {
    let streams = run.streams.clamp(1, IPERF3_MAX_STREAMS);
    let seconds = run.seconds.max(1);
    if Command::new("iperf3").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return Ok(Iperf3Result { absent: true, streams, seconds, omit_seconds: run.omit, ..Iperf3Result::default() });
    }
    let host = link.map(|l| l.server_ip().to_string()).unwrap_or_else(|| "127.0.0.1".into());
    // A free port on the server's side; the listener is closed before iperf3 binds it.
    let port = match link {
        Some(l) => {
            l.in_server(|| std::net::TcpListener::bind((l.server_ip(), 0)).and_then(|s| s.local_addr()))??.port()
        }
        None => std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port(),
    };
    let mut s = Command::new("iperf3");
    s.args(["-s", "-1", "-B", &host, "-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
    if let Some(l) = link {
        l.server_command(&mut s);
    }
    let bound = Duration::from_secs((seconds + run.omit) as u64 + 60).min(lifetime);
    let _server = ChildGuard::spawn(s, "iperf3 -s", bound)?;
    // The server is ready when it listens; a probe connection would use up its one test,
    // so the client retries instead.
    let mut last = String::new();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let mut c = Command::new("iperf3");
        c.args(["-c", &host, "-p", &port.to_string()]).args(run.args()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut guard = ChildGuard::spawn(c, "iperf3 -c", bound)?;
        let mut stdout = guard.child_mut().stdout.take().expect("piped");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text)?;
        let _ = guard.child_mut().wait();
        let v: Value = serde_json::from_str(&text).context("iperf3 -J output is not JSON")?;
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            last = e.to_owned();
            if e.contains("connect") {
                continue;
            }
            bail!("iperf3: {e}");
        }
        let mut r = parse_iperf3_json(&v)?;
        (r.streams, r.seconds, r.omit_seconds) = (streams, seconds, run.omit);
        return Ok(r);
    }
    bail!("iperf3 client could not connect: {last}")
}

/// The figures of an `iperf3 -J` report (streams and durations are the caller's).
pub fn parse_iperf3_json(v: &Value) -> Result<Iperf3Result> {
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 JSON has no end.sum_received.bits_per_second")?;
    // Every interval, omitted or not: bytes and seconds of the whole run.
    let (mut bytes, mut secs, mut intervals) = (0.0, 0.0, Vec::new());
    for i in v["intervals"].as_array().into_iter().flatten() {
        if let (Some(b), Some(s)) = (i["sum"]["bytes"].as_f64(), i["sum"]["seconds"].as_f64()) {
            bytes += b;
            secs += s;
            intervals.push((s, b));
        }
    }
    let cpu = &v["end"]["cpu_utilization_percent"];
    Ok(Iperf3Result {
        bits_per_second: bps,
        bits_per_second_with_ramp: (secs > 0.0).then(|| bytes * 8.0 / secs),
        retransmits: v["end"]["sum_sent"]["retransmits"].as_f64(),
        cpu_host_pct: cpu["host_total"].as_f64(),
        cpu_remote_pct: cpu["remote_total"].as_f64(),
        intervals,
        ..Iperf3Result::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> ServerCommand {
        ServerCommand { program: "/bin/sh".into(), pre_args: vec!["-c".into(), script.into(), "sh".into()], link: None }
    }

    fn pid_alive(pid: u32) -> bool {
        // A killed and reaped child no longer exists.
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn reads_banner_and_kills_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let cmd =
            sh("echo 'listening on http://127.0.0.1:1'; echo 'access key: ferry'; echo 'profile: s3'; exec sleep 60");
        let mut s = ServerProcess::start(&cmd, &[], Duration::from_secs(60), &dir).unwrap();
        let log = s.log.clone();
        assert!(log.exists());
        assert_eq!(s.url, "http://127.0.0.1:1");
        assert_eq!(s.banner_value("profile"), Some("s3"));
        assert_eq!(s.banner_value("access key"), Some("ferry"));
        assert!(s.alive());
        let pid = s.pid();
        drop(s);
        assert!(!pid_alive(pid), "the server outlived its guard");
        assert!(!log.exists(), "the log of a server we stopped is removed");
    }

    #[test]
    fn watchdog_bounds_lifetime() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let cmd = sh("echo 'listening on http://127.0.0.1:1'; exec sleep 60");
        let mut s = ServerProcess::start(&cmd, &[], Duration::from_millis(300), &dir).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!s.alive(), "the watchdog did not end the server");
        let log = s.log.clone();
        drop(s);
        assert!(log.exists(), "a server that ended on its own keeps its log");
    }

    #[test]
    fn wrong_first_line_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let err =
            ServerProcess::start(&sh("echo hello; exec sleep 60"), &[], Duration::from_secs(60), &dir).err().unwrap();
        assert!(err.to_string().contains("instead of 'listening on URL'"), "{err}");
        let err = ServerProcess::start(&sh("echo oops >&2; exit 3"), &[], Duration::from_secs(60), &dir).err().unwrap();
        assert!(err.to_string().contains("exited before listening"), "{err}");
    }

    #[test]
    fn iperf3_arguments_and_report() {
        let r = Iperf3Run { streams: 500, seconds: 3, omit: 2, reverse: true, interval_ms: None };
        assert_eq!(r.args().join(" "), "-P 128 -t 3 -O 2 -R -J");
        assert_eq!(
            Iperf3Run { streams: 0, seconds: 0, omit: 0, reverse: false, interval_ms: None }.args().join(" "),
            "-P 1 -t 1 -J"
        );
        assert_eq!(
            Iperf3Run { streams: 4, seconds: 3, omit: 0, reverse: true, interval_ms: Some(100) }.args().join(" "),
            "-P 4 -t 3 -R -i 0.1 -J"
        );
        // Trimmed from an `iperf3 -R -O 1 -t 2 -J` report: one omitted interval, two counted.
        let v: Value = serde_json::from_str(
            r#"{"intervals":[{"sum":{"seconds":1.0,"bytes":1000,"omitted":true}},{"sum":{"seconds":1.0,"bytes":3000,"omitted":false}},{"sum":{"seconds":1.0,"bytes":5000,"omitted":false}}],
               "end":{"sum_received":{"seconds":2.0,"bytes":8000,"bits_per_second":32000.0},"sum_sent":{"retransmits":7},"cpu_utilization_percent":{"host_total":25.5,"remote_total":31.0}}}"#,
        )
        .unwrap();
        let p = parse_iperf3_json(&v).unwrap();
        assert_eq!(p.bits_per_second, 32000.0, "the counted window only");
        assert_eq!(p.bits_per_second_with_ramp, Some(9000.0 * 8.0 / 3.0), "all intervals");
        assert_eq!((p.retransmits, p.cpu_host_pct, p.cpu_remote_pct), (Some(7.0), Some(25.5), Some(31.0)));
        assert!(parse_iperf3_json(&serde_json::json!({"error": "x"})).is_err());
    }
}
