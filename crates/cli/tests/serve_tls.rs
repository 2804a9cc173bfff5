//! `ferry serve --tls`, the binary under test: the CA file it generates in the temp dir
//! is gone once the server stops on SIGTERM or SIGINT (each server gets a temp dir of its
//! own through `TMPDIR`); a `--ca-file` the user named is kept.

use ferry_testkit::{FerryServe, ServeChild};
use std::path::Path;

/// Starts `ferry serve --memory --tls` with `TMPDIR=tmp`, once it is listening.
fn serve_tls(tmp: &Path, extra: &[&str]) -> ServeChild {
    let mut serve = FerryServe::new().tls().env("TMPDIR", tmp);
    for a in extra {
        serve = serve.arg(a);
    }
    serve.spawn(env!("CARGO_BIN_EXE_ferry"))
}

/// Sends `sig` to the child and waits for it to exit.
fn stop(child: ServeChild, sig: i32) {
    let exit = child.stop(sig);
    assert!(exit.success(), "ferry serve exited with {exit} after signal {sig}");
}

#[test]
fn the_generated_ca_file_is_removed_on_sigterm_and_sigint() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let tmp = tempfile::tempdir().unwrap();
        let child = serve_tls(tmp.path(), &[]);
        let ca = child.ca_file().expect("the banner names the CA file").to_path_buf();
        assert!(ca.starts_with(tmp.path()), "{} is not in TMPDIR", ca.display());
        let pem = std::fs::read_to_string(&ca).unwrap();
        assert!(pem.contains("BEGIN CERTIFICATE"), "{pem}");
        stop(child, sig);
        assert!(!ca.exists(), "{} left behind after signal {sig}", ca.display());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "files left in TMPDIR after signal {sig}");
    }
}

#[test]
fn a_named_ca_file_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let named = tmp.path().join("my-ca.pem");
    let child = serve_tls(tmp.path(), &["--ca-file", named.to_str().unwrap()]);
    assert_eq!(child.ca_file(), Some(named.as_path()));
    stop(child, libc::SIGTERM);
    assert!(std::fs::read_to_string(&named).unwrap().contains("BEGIN CERTIFICATE"));
}
