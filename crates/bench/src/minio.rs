//! `ferry bench WORKLOAD --minio PATH`: the bench starts MinIO itself and runs the
//! workload against it as its external server (`--endpoint-url`'s path), so that with
//! `--link` MinIO sits in the link's server namespace as `ferry serve` does, and the
//! client crosses the same emulated path to either server. Without a link it listens on
//! loopback like the server `scripts/bench.sh` used to start by hand.
//!
//! ```text
//! MinioServer::start ─ a port free on this machine, a data directory of its own,
//!   credentials made for this run ─► `minio server DIR --address HOST:PORT --quiet`
//!   (setns into the server namespace between fork and exec when there is a link)
//!   ─► ready: /minio/health/ready answers 200, then an anonymous ListBuckets 403
//!   (MinIO answers 503 for a while after its health check passes), polled from the
//!   client's namespace ─► ExternalServer { url, keys, pid } for the runner
//! drop ─► the process killed (it also dies with this one: PR_SET_PDEATHSIG), its
//!   directory removed
//! ```
//!
//! Its log goes to the bench's log directory beside ferry serve's.

use crate::options::ExternalServer;
use crate::process::ChildGuard;
use anyhow::{bail, Context, Result};
use ferry_link::Link;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl std::fmt::Debug for MinioServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MinioServer").field("url", &self.url).field("pid", &self.pid()).finish_non_exhaustive()
    }
}

/// How long MinIO may take to answer its S3 API: its health endpoint answers within a
/// second or two, its API a few seconds later on a busy machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A MinIO the bench started, killed and its data removed when dropped.
pub struct MinioServer {
    pub url: String,
    pub access_key: String,
    pub secret_key: String,
    pub log: PathBuf,
    dir: tempfile::TempDir,
    guard: ChildGuard,
}

impl MinioServer {
    /// Starts `binary` (in `link`'s server namespace when given) and waits until it
    /// answers S3 requests. `lifetime` bounds how long it may run (the bench's watchdog).
    pub fn start(binary: &Path, link: Option<&Arc<Link>>, lifetime: Duration, log_dir: &Path) -> Result<MinioServer> {
        let dir = tempfile::Builder::new().prefix("ferry-bench-minio-").tempdir().context("MinIO's data directory")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let host = link.map_or_else(|| "127.0.0.1".to_string(), |l| l.server_ip().to_string());
        let addr: SocketAddr = format!("{host}:{port}").parse()?;
        let access_key = "ferrybench".to_string();
        let secret_key = format!("ferry-bench-{:016x}", rand::random::<u64>());
        let log = log_dir.join(format!("ferry-bench-minio-{}-{port}.log", std::process::id()));
        let log_file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(binary);
        cmd.arg("server")
            .arg(dir.path().join("data"))
            .args(["--address", &addr.to_string(), "--quiet"])
            .env("MINIO_ROOT_USER", &access_key)
            .env("MINIO_ROOT_PASSWORD", &secret_key)
            .env("MINIO_BROWSER", "off")
            .stdout(Stdio::null())
            .stderr(log_file);
        if let Some(l) = link {
            l.server_command(&mut cmd);
        }
        let mut guard = ChildGuard::spawn(cmd, "minio", lifetime)
            .with_context(|| format!("starting MinIO from {}", binary.display()))?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut ready = |path: &str, want: u16| -> Result<()> {
            loop {
                let status = match link {
                    Some(l) => l.in_client(|| http_status(addr, path)).unwrap_or(None),
                    None => http_status(addr, path),
                };
                if status == Some(want) {
                    return Ok(());
                }
                if let Ok(Some(exit)) = guard.child_mut().try_wait() {
                    let tail = std::fs::read_to_string(&log).unwrap_or_default();
                    bail!("MinIO exited before it was ready ({exit}): {}", tail.trim());
                }
                if Instant::now() > deadline {
                    bail!("MinIO at {addr} did not answer {path} with {want} within {READY_TIMEOUT:?} (last: {status:?}; log: {})", log.display());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        };
        ready("/minio/health/ready", 200)?;
        ready("/", 403)?;
        Ok(MinioServer { url: format!("http://{addr}"), access_key, secret_key, log, dir, guard })
    }

    /// The MinIO process (for its CPU per row: server_cpu.rs).
    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// The server the runner takes for `--endpoint-url`.
    pub fn external(&self) -> ExternalServer {
        ExternalServer {
            url: self.url.clone(),
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
            region: "us-east-1".into(),
            pid: Some(self.pid()),
        }
    }

    /// MinIO's data directory (its objects go in `data` under it).
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The status of an unsigned `GET path` to `addr`, or `None` while nothing answers.
fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
