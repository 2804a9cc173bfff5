//! `ferry serve --tls`, the binary under test: the CA file it generates in the temp dir
//! is gone once the server stops on SIGTERM or SIGINT (each server gets a temp dir of its
//! own through `TMPDIR`); a `--ca-file` the user named is kept.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Starts `ferry serve --tls` with `TMPDIR=tmp`; returns the child and the CA file its
/// banner names, once it is listening.
fn serve_tls(tmp: &Path, extra: &[&str]) -> (Child, PathBuf) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["serve", "--addr", "127.0.0.1:0", "--memory", "--tls"])
        .args(extra)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ca = lines.by_ref().map_while(Result::ok).find_map(|l| l.strip_prefix("ca file: ").map(PathBuf::from));
    // Read the rest of the banner too: a closed pipe would fail the server's next line.
    std::thread::spawn(move || lines.for_each(drop));
    (child, ca.expect("the banner names the CA file"))
}

/// Sends `sig` to the child with kill(1) and waits for it to exit.
fn stop(mut child: Child, sig: &str) {
    let status = Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap();
    assert!(status.success(), "kill {sig} failed");
    let exit = child.wait().unwrap();
    assert!(exit.success(), "ferry serve exited with {exit} after {sig}");
}

#[test]
fn the_generated_ca_file_is_removed_on_sigterm_and_sigint() {
    for sig in ["-TERM", "-INT"] {
        let tmp = tempfile::tempdir().unwrap();
        let (child, ca) = serve_tls(tmp.path(), &[]);
        assert!(ca.starts_with(tmp.path()), "{} is not in TMPDIR", ca.display());
        let pem = std::fs::read_to_string(&ca).unwrap();
        assert!(pem.contains("BEGIN CERTIFICATE"), "{pem}");
        stop(child, sig);
        assert!(!ca.exists(), "{} left behind after {sig}", ca.display());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "files left in TMPDIR after {sig}");
    }
}

#[test]
fn a_named_ca_file_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let named = tmp.path().join("my-ca.pem");
    let (child, ca) = serve_tls(tmp.path(), &["--ca-file", named.to_str().unwrap()]);
    assert_eq!(ca, named);
    stop(child, "-TERM");
    assert!(std::fs::read_to_string(&named).unwrap().contains("BEGIN CERTIFICATE"));
}
