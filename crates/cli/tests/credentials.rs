//! Temporary credentials end to end: the `ferry` binary under test, with no keys in its
//! environment, gets them from a profile's `credential_process` (a real shell script the
//! test writes) or from web identity (STS AssumeRoleWithWebIdentity, answered by the
//! in-process `ferry serve`, which then accepts the keys it handed out), and signs real
//! requests with them. `-vv` names the source in use; the keys are fetched again before
//! they expire, and after an ExpiredToken answer.

use ferry_testkit::{FerryServe, Served};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ferry -vv ARGS` against `srv` with no keys of its own and no shared files but `config`.
fn ferry(srv: &Served, config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .env("AWS_ENDPOINT_URL", srv.url())
        .env("AWS_REGION", ferry_testkit::REGION)
        .env("AWS_CONFIG_FILE", config)
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        .env("HOME", "/nonexistent-ferry-home")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
        .env_remove("AWS_ROLE_ARN")
        .env_remove("AWS_ENDPOINT_URL_STS")
        .env_remove("FERRY_LOG")
        .arg("-vv")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status.code(), text(&o.stdout), text(&o.stderr));
    text(&o.stderr)
}

/// `2026-11-27T12:00:00Z`, `secs` from now.
fn rfc3339_in(secs: u64) -> String {
    let t = ferry_proto::encoding::iso8601(SystemTime::now() + Duration::from_secs(secs));
    format!("{}Z", &t[..19])
}

/// A credential process printing the server's keys with an expiry `expires_in` from
/// now, and appending a line to `runs` each time it runs.
fn credential_script(dir: &Path, name: &str, key: &str, secret: &str, expires_in: u64) -> String {
    let runs = dir.join(format!("{name}.runs"));
    let script = dir.join(format!("{name}.sh"));
    let json = format!(
        r#"{{"Version": 1, "AccessKeyId": "{key}", "SecretAccessKey": "{secret}", "Expiration": "{}"}}"#,
        rfc3339_in(expires_in)
    );
    std::fs::write(&script, format!("#!/bin/sh\necho run >> '{}'\necho '{json}'\n", runs.display())).unwrap();
    format!("sh {}", script.display())
}

fn runs(dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{name}.runs"))).map(|s| s.lines().count()).unwrap_or(0)
}

/// The whole answer (head and body) to a plain GET of `target` on `srv`.
fn http_get(srv: &Served, target: &str) -> String {
    use std::io::{Read, Write};
    let mut sock = std::net::TcpStream::connect(srv.addr()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!("GET {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", srv.addr());
    sock.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    sock.read_to_string(&mut answer).unwrap();
    answer
}

/// STS calls the server answered with 200, from its metrics endpoint.
fn sts_calls(srv: &Served) -> u64 {
    http_get(srv, "/_ferry/metrics")
        .lines()
        .find_map(|l| l.strip_prefix("ferry_requests_total{op=\"AssumeRoleWithWebIdentity\",status=\"200\"} "))
        .map(|n| n.trim().parse().unwrap())
        .unwrap_or(0)
}

#[test]
fn credential_process_keys_sign_requests_and_are_fetched_again_before_they_expire() {
    let srv = FerryServe::new().credentials("AKPROCESS", "process-secret").start();
    let dir = tempfile::tempdir().unwrap();
    let long = credential_script(dir.path(), "long", "AKPROCESS", "process-secret", 7200);
    let short = credential_script(dir.path(), "short", "AKPROCESS", "process-secret", 60);
    let config = dir.path().join("config");
    std::fs::write(
        &config,
        format!("[profile long]\ncredential_process = {long}\n[profile short]\ncredential_process = {short}\n"),
    )
    .unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"signed by a process's keys").unwrap();
    let file = file.to_str().unwrap();

    // Keys valid for two hours: one run of the process per command.
    let stderr = ok(&ferry(&srv, &config, &["--profile", "long", "mb", "s3://proc"]));
    assert!(stderr.contains("credential_process"), "-vv does not name the source:\n{stderr}");
    ok(&ferry(&srv, &config, &["--profile", "long", "cp", file, "s3://proc/f.txt"]));
    let out = ferry(&srv, &config, &["--profile", "long", "cat", "s3://proc/f.txt"]);
    ok(&out);
    assert_eq!(out.stdout, b"signed by a process's keys");
    assert_eq!(runs(dir.path(), "long"), 3, "one run per command for keys far from their expiry");

    // Keys expiring within the refresh window: fetched again before the request.
    let out = ferry(&srv, &config, &["--profile", "short", "cat", "s3://proc/f.txt"]);
    ok(&out);
    assert_eq!(out.stdout, b"signed by a process's keys");
    assert!(runs(dir.path(), "short") >= 2, "keys 60 s from their expiry were not fetched again");
}

#[test]
fn a_failing_credential_process_is_reported_with_its_own_words() {
    let srv = FerryServe::new().start();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fail.sh");
    std::fs::write(&script, "#!/bin/sh\necho 'token expired: run sso login' >&2\nexit 1\n").unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, format!("[default]\ncredential_process = sh {}\n", script.display())).unwrap();
    let out = ferry(&srv, &config, &["ls", "s3://any/"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("credential_process") && stderr.contains("token expired: run sso login"), "{stderr}");
}

/// Web identity from the environment (`AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`),
/// STS on the S3 endpoint (`AWS_ENDPOINT_URL` covers every service).
fn web_identity(srv: &Served, config: &Path, token_file: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    c.env("AWS_ENDPOINT_URL", srv.url())
        .env("AWS_REGION", ferry_testkit::REGION)
        .env("AWS_CONFIG_FILE", config)
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        .env("HOME", "/nonexistent-ferry-home")
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", token_file)
        .env("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ferry-test")
        .env("AWS_ROLE_SESSION_NAME", "ferry-test")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL_STS")
        .env_remove("FERRY_LOG")
        .arg("-vv")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn web_identity_keys_from_sts_sign_requests() {
    let srv = FerryServe::new().start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, "").unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.a-test-token.signature\n").unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"signed by STS's keys").unwrap();

    // The client holds no key the server knows: these succeed only with STS's keys.
    let stderr = ok(&web_identity(&srv, &config, &token, &["mb", "s3://web"]));
    let named = stderr.matches("credentials: web identity (AWS_WEB_IDENTITY_TOKEN_FILE)").count();
    assert_eq!(named, 1, "-vv does not name the source once:\n{stderr}");
    ok(&web_identity(&srv, &config, &token, &["cp", file.to_str().unwrap(), "s3://web/f.txt"]));
    let out = web_identity(&srv, &config, &token, &["cat", "s3://web/f.txt"]);
    ok(&out);
    assert_eq!(out.stdout, b"signed by STS's keys");
    // One-hour keys: one STS call per command.
    assert_eq!(sts_calls(&srv), 3);
    // A URL presigned with them carries the session token, and the server takes it.
    let out = web_identity(&srv, &config, &token, &["presign", "s3://web/f.txt"]);
    ok(&out);
    let url = text(&out.stdout).trim().to_owned();
    assert!(url.contains("X-Amz-Security-Token="), "{url}");
    let target = &url[url.find("/web/").expect("a path-style URL")..];
    let answer = http_get(&srv, target);
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("signed by STS's keys"), "{answer}");

    // The same from a profile's web_identity_token_file and role_arn.
    std::fs::write(
        &config,
        format!("[profile web]\nweb_identity_token_file = {}\nrole_arn = arn:aws:iam::1:role/p\n", token.display()),
    )
    .unwrap();
    let out = ferry(&srv, &config, &["--profile", "web", "cat", "s3://web/f.txt"]);
    assert!(ok(&out).contains("web identity (profile)"));
    assert_eq!(out.stdout, b"signed by STS's keys");

    // An empty token file: refused before anything is sent, naming the file.
    std::fs::write(&token, "").unwrap();
    let out = web_identity(&srv, &config, &token, &["ls", "s3://web/"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("is empty"), "{}", text(&out.stderr));
}

#[test]
fn web_identity_keys_are_fetched_again_before_expiry_and_after_expired_token() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, "").unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "a-token").unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    for i in 0..6 {
        std::fs::write(tree.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let tree = format!("{}/", tree.display());

    // Keys STS says live 60 s: inside the refresh window, so asked for again at once.
    let srv = FerryServe::new().configure(|c| c.sts_lifetime = Duration::from_secs(60)).start();
    ok(&web_identity(&srv, &config, &token, &["mb", "s3://short"]));
    assert!(sts_calls(&srv) >= 2, "keys 60 s from their expiry were not fetched again");

    // Keys the server expires after four requests each (400 ExpiredToken): copying six
    // files one at a time, the client asks STS again once and the copy completes.
    let srv = FerryServe::new().configure(|c| c.faults.expire_token_after = Some(4)).start();
    ok(&web_identity(&srv, &config, &token, &["mb", "s3://exp"]));
    assert_eq!(sts_calls(&srv), 1);
    let stderr = ok(&web_identity(&srv, &config, &token, &["-c", "1", "cp", "-r", &tree, "s3://exp/t/"]));
    assert!(stderr.contains("ExpiredToken; asking the web identity"), "{stderr}");
    assert_eq!(sts_calls(&srv), 3, "one STS call when the copy started, one after ExpiredToken:\n{stderr}");
    let out = web_identity(&srv, &config, &token, &["ls", "--recursive", "s3://exp/t/"]);
    ok(&out);
    assert_eq!(text(&out.stdout).lines().count(), 6, "{}", text(&out.stdout));
}
