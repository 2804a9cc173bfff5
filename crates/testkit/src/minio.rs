//! One MinIO process per test binary: a third-party S3 server that checks SigV4
//! strictly, for the client's conformance suite.
//!
//! `FERRY_MINIO` names the binary (`scripts/setup.sh` builds it at a pinned version;
//! `scripts/test.sh` sets the variable). Tests that use it are
//! `#[ignore = "needs MinIO ..."]`; run without it, [`minio`] panics, so such a test
//! fails instead of passing.
//!
//! The process starts on first use and is shared by every test of the binary. Its
//! parent-death signal is tied to a thread that lives as long as the test process, so it
//! never outlives the tests; its data directory and log are removed at exit, and those
//! of earlier runs that were killed are swept at start.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

/// The root user and password the shared MinIO runs with.
pub const ACCESS_KEY: &str = "ferryconformance";
pub const SECRET_KEY: &str = "ferry-conformance-secret";

/// How long MinIO may take to become ready: its health endpoint answers early, its S3
/// API a few seconds later on a busy machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The shared MinIO.
pub struct Minio {
    pub addr: SocketAddr,
}

impl Minio {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn credentials(&self) -> (&'static str, &'static str) {
        (ACCESS_KEY, SECRET_KEY)
    }
}

/// The shared MinIO, started on first use. Panics when `FERRY_MINIO` is not set.
pub fn minio() -> &'static Minio {
    static MINIO: OnceLock<Minio> = OnceLock::new();
    MINIO.get_or_init(|| Minio { addr: start() })
}

fn start() -> SocketAddr {
    let bin = std::env::var("FERRY_MINIO").unwrap_or_else(|_| {
        panic!("FERRY_MINIO is not set: this test needs MinIO (scripts/setup.sh builds it; scripts/test.sh sets FERRY_MINIO)")
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    sweep_minio_dirs();
    let data = data_dir();
    let _ = std::fs::remove_dir_all(&data);
    // The test harness leaves through exit(3), which runs atexit handlers and no
    // destructors; statics are never dropped.
    extern "C" fn remove_data() {
        let data = data_dir();
        let _ = std::fs::remove_dir_all(&data);
        let _ = std::fs::remove_file(data.with_extension("log"));
    }
    // SAFETY: registers a plain extern "C" function with no captured state.
    unsafe {
        libc::atexit(remove_data);
    }
    std::fs::create_dir_all(&data).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Its log goes to a file beside its data, never to the test's own stdout/stderr
        // (an inherited pipe would keep a caller's pipeline open).
        let log = std::fs::File::create(data.with_extension("log")).unwrap();
        let mut cmd = std::process::Command::new(&bin);
        cmd.args(["server", data.to_str().unwrap(), "--address", &addr.to_string(), "--quiet"])
            .env("MINIO_ROOT_USER", ACCESS_KEY)
            .env("MINIO_ROOT_PASSWORD", SECRET_KEY)
            .env("MINIO_BROWSER", "off")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log);
        crate::serve::die_with_parent(&mut cmd);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting MinIO ({bin}): {e}"));
        tx.send(()).unwrap();
        let _keep = child;
        // This thread must outlive every test: the death signal is tied to it.
        loop {
            std::thread::park();
        }
    });
    rx.recv().unwrap();
    // Wait until MinIO answers its health endpoint with 200, then until an S3 call (an
    // anonymous ListBuckets: 403) is no longer 503: "ready" comes before its IAM and
    // bucket metadata are loaded (XMinioServerNotInitialized).
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    for (path, ready) in [("/minio/health/ready", "200"), ("/", "403")] {
        loop {
            if status_of(addr, path).as_deref() == Some(ready) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "MinIO did not answer {path} with {ready} at {addr}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    addr
}

fn data_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ferry-minio-{}", std::process::id()))
}

/// The status code of an unsigned `GET path` (None when nothing answered).
fn status_of(addr: SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[9..12]).into_owned())
}

/// Removes the MinIO data directories (and logs) of test processes that are gone: a
/// killed run cannot clean up after itself, and each one leaves ~200 MB in /tmp.
fn sweep_minio_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("ferry-minio-").map(|r| r.trim_end_matches(".log")) else { continue };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new("/proc").join(pid).exists() {
            let _ =
                if name.ends_with(".log") { std::fs::remove_file(e.path()) } else { std::fs::remove_dir_all(e.path()) };
        }
    }
}
