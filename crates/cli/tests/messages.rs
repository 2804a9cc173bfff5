//! Errors a person can read: the `ferry` binary under test against a closed port and an
//! in-process `ferry serve` (missing bucket, missing key, wrong credentials, throttling,
//! a body that stalls) on real sockets. Each failure is one line on stderr that names the object, says the
//! cause once, and carries the server's request id when there was an answer.
//!
//! tests/test_faults.py covers the causes that need a scripted peer or a full disk (a
//! wrong checksum, a body cut short, no space left).

use ferry_server::config::Faults;
use ferry_testkit::{FerryServe, Served};
use std::process::{Command, Output, Stdio};

fn ferry_at(url: &str) -> Command {
    ferry_testkit::cli::command(env!("CARGO_BIN_EXE_ferry"), url)
}

fn run_at(url: &str, args: &[&str]) -> Output {
    ferry_at(url).args(args).stdin(Stdio::null()).output().unwrap()
}

fn run(srv: &Served, args: &[&str]) -> Output {
    run_at(&srv.url(), args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The `ferry: error:` lines of a failed command, checked for what every error line
/// owes its reader: exit code 1, the object's name, no cause said twice.
#[track_caller]
fn error_line(o: &Output, names: &str) -> String {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("ferry: error:")).collect();
    assert_eq!(lines.len(), 1, "one error line: {err}");
    let line = lines[0].to_owned();
    assert!(line.contains(names), "{line:?} does not name {names:?}");
    // No part of the line is said twice (anyhow's `{:#}` once repeated every cause).
    let parts: Vec<&str> = line.split(": ").map(str::trim).filter(|p| p.len() > 3).collect();
    for (i, p) in parts.iter().enumerate() {
        assert!(!parts[i + 1..].contains(p), "{p:?} said twice in {line:?}");
    }
    line
}

fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

#[test]
fn a_closed_port_is_said_once_with_the_object() {
    let url = closed_port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let out = dir.path().join("out");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["ls", "s3://bkt/"], "s3://bkt/"),
        (vec!["cat", "s3://bkt/k"], "s3://bkt/k"),
        (vec!["stat", "s3://bkt/k"], "s3://bkt/k"),
        (vec!["cp", "s3://bkt/k", out.to_str().unwrap()], "s3://bkt/k"),
        (vec!["cp", file.to_str().unwrap(), "s3://bkt/k"], "s3://bkt/k"),
    ];
    for (args, names) in cases {
        let o = run_at(&url, &args);
        let line = error_line(&o, names);
        assert!(line.contains("cannot connect"), "{line}");
        assert_eq!(line.to_lowercase().matches("refused").count(), 1, "{line}");
    }
    assert!(!out.exists(), "a failed download left its file");
}

#[test]
fn a_missing_bucket_or_key_is_named_with_the_request_id() {
    let srv = FerryServe::new().memory().start();
    let dir = tempfile::tempdir().unwrap();
    assert!(run(&srv, &["mb", "s3://present"]).status.success());
    let line = error_line(&run(&srv, &["ls", "s3://absent/"]), "s3://absent/");
    assert!(line.contains("not found") && line.contains("NoSuchBucket") && line.contains("request id"), "{line}");
    let line = error_line(&run(&srv, &["cat", "s3://present/nope"]), "s3://present/nope");
    assert!(line.contains("not found") && line.contains("NoSuchKey") && line.contains("request id"), "{line}");
    // A HEAD's 404 has no body: the line still says what it means.
    let line = error_line(&run(&srv, &["stat", "s3://present/nope"]), "s3://present/nope");
    assert!(line.contains("no such key") && line.contains("404") && line.contains("request id"), "{line}");
    let out = dir.path().join("out");
    let line = error_line(&run(&srv, &["cp", "s3://present/nope", out.to_str().unwrap()]), "s3://present/nope");
    assert!(line.contains(out.to_str().unwrap()) && line.contains("request id"), "{line}");
    assert!(!out.exists());
    let src = dir.path().join("src");
    std::fs::write(&src, b"x").unwrap();
    let line = error_line(&run(&srv, &["cp", src.to_str().unwrap(), "s3://absent/k"]), "s3://absent/k");
    assert!(line.contains("NoSuchBucket") && line.contains("request id"), "{line}");
    // A missing local file is named, with the OS's words once.
    let line = error_line(&run(&srv, &["cp", "/nonexistent/f", "s3://present/k"]), "/nonexistent/f");
    assert_eq!(line.matches("No such file").count(), 1, "{line}");
}

#[test]
fn wrong_credentials_say_so_with_the_request_id() {
    let srv = FerryServe::new().memory().start();
    assert!(run(&srv, &["mb", "s3://creds"]).status.success());
    let o = ferry_at(&srv.url())
        .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        .args(["ls", "s3://creds/"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let line = error_line(&o, "s3://creds/");
    assert!(line.contains("not authorised") && line.contains("SignatureDoesNotMatch"), "{line}");
    assert!(line.contains("request id"), "{line}");
    let o = ferry_at(&srv.url())
        .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        .args(["stat", "s3://creds/k"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let line = error_line(&o, "s3://creds/k");
    assert!(line.contains("not authorised") && line.contains("403") && line.contains("request id"), "{line}");
}

#[test]
fn throttling_after_the_retries_is_named_with_the_request_id() {
    let srv = FerryServe::new().memory().faults(Faults { error_503_rate: 1.0, seed: 7, ..Default::default() }).start();
    let o = run(&srv, &["cat", "s3://slow/k"]);
    let line = error_line(&o, "s3://slow/k");
    assert!(line.contains("throttled") && line.contains("SlowDown") && line.contains("request id"), "{line}");
}

/// A download whose body stops part-way (the server's stall fault, 30 s, on every GET)
/// gives up within what `--timeout 0.3 --retries 2` allow, with one error line saying it
/// timed out and nothing under the destination's name; `-v` shows the resume it tried.
#[test]
fn a_stalled_download_gives_up_within_the_time_out_flags() {
    let srv = FerryServe::new()
        .memory()
        .faults(Faults { stall_rate: 1.0, stall: std::time::Duration::from_secs(30), seed: 3, ..Default::default() })
        .start();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    std::fs::write(&src, vec![7u8; 256 * 1024]).unwrap();
    assert!(run(&srv, &["mb", "s3://stall"]).status.success());
    let up = run(&srv, &["cp", src.to_str().unwrap(), "s3://stall/k"]);
    assert!(up.status.success(), "{}", text(&up.stderr));
    let dest = dir.path().join("got.bin");
    let started = std::time::Instant::now();
    let o = run(&srv, &["cp", "-v", "--timeout", "0.3", "--retries", "2", "s3://stall/k", dest.to_str().unwrap()]);
    let took = started.elapsed();
    let line = error_line(&o, "s3://stall/k");
    assert!(line.contains("timed out") && line.contains("body bytes"), "{line}");
    assert!(took < std::time::Duration::from_secs(20), "gave up after {took:?}");
    assert!(!dest.exists(), "a partial file under the final name");
    assert!(text(&o.stderr).contains("resuming GET"), "-v shows no resume: {}", text(&o.stderr));
}

/// `cp -q` prints no line per file (errors would still be said); without it, one.
#[test]
fn quiet_copies_print_no_line_per_file() {
    let srv = FerryServe::new().memory().start();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("a.txt");
    std::fs::write(&src, b"hello").unwrap();
    assert!(run(&srv, &["mb", "s3://quiet"]).status.success());
    let loud = run(&srv, &["cp", src.to_str().unwrap(), "s3://quiet/a.txt"]);
    assert!(loud.status.success(), "{}", text(&loud.stderr));
    assert!(text(&loud.stdout).starts_with("cp "), "{}", text(&loud.stdout));
    let quiet = run(&srv, &["cp", "-q", src.to_str().unwrap(), "s3://quiet/b.txt"]);
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    assert_eq!(text(&quiet.stdout), "");
    assert_eq!(text(&quiet.stderr), "");
}
