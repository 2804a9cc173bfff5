//! fake-gcs-server processes for the Google Cloud Storage client's tests: a third-party
//! emulator of GCS's JSON API (Go module `github.com/fsouza/fake-gcs-server`).
//!
//! `FERRY_FAKE_GCS` names the binary (`scripts/setup.sh` builds it at a pinned version;
//! `scripts/test.sh` sets the variable). Tests that use it are
//! `#[ignore = "needs fake-gcs-server ..."]`; run without it, [`fake_gcs`] panics, so
//! such a test fails instead of passing.
//!
//! Two shared processes per test binary, each started on first use on a free loopback
//! port with in-memory storage: one plain `http` (HTTP/1.1 only: Go's server speaks h2
//! only under TLS), one `https` whose listener offers only `h2` by ALPN, with a
//! certificate generated here (rcgen) for 127.0.0.1 and written beside it as the CA
//! file a client trusts. Like MinIO's, each dies with the thread that started it, which
//! lives as long as the test process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// How long the emulator may take to answer: it is up in well under a second.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A running fake-gcs-server.
pub struct FakeGcs {
    pub addr: SocketAddr,
    /// The certificate to trust (https only).
    pub ca_file: Option<PathBuf>,
}

impl FakeGcs {
    pub fn url(&self) -> String {
        match self.ca_file {
            Some(_) => format!("https://{}", self.addr),
            None => format!("http://{}", self.addr),
        }
    }
}

/// The shared plain-http emulator. Panics when `FERRY_FAKE_GCS` is not set.
pub fn fake_gcs() -> &'static FakeGcs {
    static HTTP: OnceLock<FakeGcs> = OnceLock::new();
    HTTP.get_or_init(|| start(false))
}

/// The shared https (h2) emulator. Panics when `FERRY_FAKE_GCS` is not set.
pub fn fake_gcs_tls() -> &'static FakeGcs {
    static HTTPS: OnceLock<FakeGcs> = OnceLock::new();
    HTTPS.get_or_init(|| start(true))
}

/// The binary, or a panic naming what provides it.
pub fn binary() -> String {
    std::env::var("FERRY_FAKE_GCS").unwrap_or_else(|_| {
        panic!("FERRY_FAKE_GCS is not set: this test needs fake-gcs-server (scripts/setup.sh builds it; scripts/test.sh sets FERRY_FAKE_GCS)")
    })
}

fn start(tls: bool) -> FakeGcs {
    let bin = binary();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let dir = std::env::temp_dir().join(format!(
        "ferry-fake-gcs-{}-{}",
        std::process::id(),
        if tls { "tls" } else { "http" }
    ));
    std::fs::create_dir_all(&dir).unwrap();
    extern "C" fn remove_dirs() {
        for kind in ["tls", "http"] {
            let _ = std::fs::remove_dir_all(
                std::env::temp_dir().join(format!("ferry-fake-gcs-{}-{kind}", std::process::id())),
            );
        }
    }
    // SAFETY: registers a plain extern "C" function with no captured state.
    unsafe {
        libc::atexit(remove_dirs);
    }
    let mut args: Vec<String> = vec![
        "-scheme".into(),
        if tls { "https" } else { "http" }.into(),
        "-host".into(),
        "127.0.0.1".into(),
        "-port".into(),
        port.to_string(),
        "-backend".into(),
        "memory".into(),
        "-log-level".into(),
        "error".into(),
    ];
    let ca_file = tls.then(|| {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let (crt, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&crt, cert.cert.pem()).unwrap();
        std::fs::write(&key, cert.key_pair.serialize_pem()).unwrap();
        args.extend(["-cert-location".into(), crt.display().to_string()]);
        args.extend(["-private-key-location".into(), key.display().to_string()]);
        args.extend(["-external-url".into(), format!("https://{addr}")]);
        crt
    });
    if !tls {
        args.extend(["-external-url".into(), format!("http://{addr}")]);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let log = dir.join("server.log");
    std::thread::spawn(move || {
        let log = std::fs::File::create(log).unwrap();
        let mut cmd = std::process::Command::new(&bin);
        cmd.args(&args).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(log);
        crate::serve::die_with_parent(&mut cmd);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting fake-gcs-server ({bin}): {e}"));
        tx.send(()).unwrap();
        let _keep = child;
        loop {
            std::thread::park();
        }
    });
    rx.recv().unwrap();
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "fake-gcs-server did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    FakeGcs { addr, ca_file }
}
