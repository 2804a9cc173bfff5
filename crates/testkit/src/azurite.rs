//! One Azurite (Microsoft's Azure Storage emulator) per test binary: a third-party Blob
//! service that checks Shared Key signatures, for the Azure client's conformance
//! suite and the command line's Azure tests.
//!
//! `FERRY_AZURITE` names the `azurite-blob` executable (`scripts/setup.sh` installs
//! Azurite at a pinned version with npm; `scripts/test.sh` sets the variable). Tests that
//! use it are `#[ignore = "needs Azurite ..."]`; run without it, [`azurite`] panics, so
//! such a test fails instead of passing.
//!
//! It starts on first use with port 0 and in-memory storage; the port is read from its
//! banner (`successfully listens on http://127.0.0.1:PORT`), so there is no window in
//! which another process could take a port chosen beforehand. Like the MinIO fixture,
//! its parent-death signal is tied to a thread that lives as long as the test process,
//! and its working directory is removed at exit.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

/// The emulator's well-known development account and key (Azure's emulator docs).
pub const ACCOUNT: &str = "devstoreaccount1";
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// How long Azurite (a Node program) may take to listen on a busy machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The shared Azurite.
pub struct Azurite {
    pub addr: SocketAddr,
}

impl Azurite {
    /// The blob endpoint, account included (path-style, as the emulator is addressed).
    pub fn blob_endpoint(&self) -> String {
        format!("http://{}/{ACCOUNT}", self.addr)
    }

    /// A connection string for this emulator.
    pub fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={};",
            self.blob_endpoint()
        )
    }
}

/// The shared Azurite, started on first use. Panics when `FERRY_AZURITE` is not set.
pub fn azurite() -> &'static Azurite {
    static AZURITE: OnceLock<Azurite> = OnceLock::new();
    AZURITE.get_or_init(|| Azurite { addr: start() })
}

fn work_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ferry-azurite-{}", std::process::id()))
}

fn start() -> SocketAddr {
    let bin = std::env::var("FERRY_AZURITE").unwrap_or_else(|_| {
        panic!("FERRY_AZURITE is not set: this test needs Azurite (scripts/setup.sh installs it; scripts/test.sh sets FERRY_AZURITE)")
    });
    let dir = work_dir();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    extern "C" fn remove_dir() {
        let _ = std::fs::remove_dir_all(work_dir());
    }
    // SAFETY: registers a plain extern "C" function with no captured state.
    unsafe {
        libc::atexit(remove_dir);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut cmd = std::process::Command::new(&bin);
        cmd.args([
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            "0",
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--loose",
        ])
        // In memory, so it writes nothing but its debug log, which is off; run from a
        // directory of its own all the same.
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
        crate::serve::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting Azurite ({bin}): {e}"));
        let out = child.stdout.take().unwrap();
        let mut sent = false;
        // Its banner carries the port; the rest of its output is read and dropped so
        // the pipe never fills.
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if !sent {
                if let Some(url) = line.split("successfully listens on ").nth(1) {
                    let addr = url.trim().trim_start_matches("http://").trim_end_matches('/');
                    tx.send(addr.parse::<SocketAddr>().ok()).unwrap();
                    sent = true;
                }
            }
        }
        if !sent {
            let _ = tx.send(None);
        }
        let _keep = child;
        // This thread must outlive every test: the death signal is tied to it.
        loop {
            std::thread::park();
        }
    });
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(Some(addr)) => addr,
        Ok(None) => panic!("Azurite ({}) exited without listening", std::env::var("FERRY_AZURITE").unwrap_or_default()),
        Err(_) => panic!("Azurite did not listen within {READY_TIMEOUT:?}"),
    }
}
