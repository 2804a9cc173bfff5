//! Child processes of a benchmark (`ferry serve`, `iperf3 -s`), each held by a guard
//! that ends it, so none outlives the run:
//!
//! - dropping the guard (normal end, `?` early return, or a panic unwinding) kills the
//!   child with SIGKILL and reaps it;
//! - `PR_SET_PDEATHSIG(SIGKILL)` kills it if the bench process itself dies without
//!   unwinding (killed, aborted). The signal follows the *thread* that spawned the child,
//!   so children are spawned from the runner's main thread, never from a worker;
//! - a watchdog thread kills it after a lifetime bound, whatever happens.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
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
}

impl ServerCommand {
    /// `<program> serve ...`.
    pub fn ferry(program: impl Into<PathBuf>) -> ServerCommand {
        ServerCommand { program: program.into(), pre_args: vec!["serve".into()] }
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
        let mut c = Command::new(&cmd.program);
        c.args(&cmd.pre_args).args(args).stdout(Stdio::piped()).stderr(log_file);
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
        let wait = |rx: &mpsc::Receiver<Option<String>>, until: Instant| rx.recv_timeout(until.saturating_duration_since(Instant::now()));
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
            Err(mpsc::RecvTimeoutError::Timeout) => bail!("ferry serve did not print 'listening on' within {SERVER_START_TIMEOUT:?}"),
        };
        // The rest of the banner arrives in the same write; take what comes within 500 ms.
        let mut banner = Vec::new();
        let quiet = Instant::now() + Duration::from_millis(500);
        while let Ok(Some(line)) = wait(&rx, quiet) {
            banner.push(line);
        }
        Ok(ServerProcess { url, banner, log, args: args.to_vec(), guard })
    }

    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// Whether the server is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.guard.child_mut().try_wait(), Ok(None))
    }

    /// The banner's `name: value` line, e.g. `emulation`.
    pub fn banner_value(&self, name: &str) -> Option<&str> {
        self.banner.iter().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(": ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> ServerCommand {
        ServerCommand { program: "/bin/sh".into(), pre_args: vec!["-c".into(), script.into(), "sh".into()] }
    }

    fn pid_alive(pid: u32) -> bool {
        // A killed and reaped child no longer exists.
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn reads_banner_and_kills_on_drop() {
        let dir = std::env::temp_dir();
        let cmd = sh("echo 'listening on http://127.0.0.1:1'; echo 'access key: ferry'; echo 'profile: s3'; exec sleep 60");
        let mut s = ServerProcess::start(&cmd, &[], Duration::from_secs(60), &dir).unwrap();
        assert_eq!(s.url, "http://127.0.0.1:1");
        assert_eq!(s.banner_value("profile"), Some("s3"));
        assert_eq!(s.banner_value("access key"), Some("ferry"));
        assert!(s.alive());
        let pid = s.pid();
        drop(s);
        assert!(!pid_alive(pid), "the server outlived its guard");
    }

    #[test]
    fn watchdog_bounds_lifetime() {
        let dir = std::env::temp_dir();
        let cmd = sh("echo 'listening on http://127.0.0.1:1'; exec sleep 60");
        let mut s = ServerProcess::start(&cmd, &[], Duration::from_millis(300), &dir).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!s.alive(), "the watchdog did not end the server");
    }

    #[test]
    fn wrong_first_line_is_an_error() {
        let dir = std::env::temp_dir();
        let err = ServerProcess::start(&sh("echo hello; exec sleep 60"), &[], Duration::from_secs(60), &dir).err().unwrap();
        assert!(err.to_string().contains("instead of 'listening on URL'"), "{err}");
        let err = ServerProcess::start(&sh("echo oops >&2; exit 3"), &[], Duration::from_secs(60), &dir).err().unwrap();
        assert!(err.to_string().contains("exited before listening"), "{err}");
    }
}
