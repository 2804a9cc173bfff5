//! Temporary credentials end to end: the `ferry` binary under test, with no keys in its
//! environment, gets them from a profile's `credential_process` (a real shell script the
//! test writes), from web identity or a chain of `role_arn`/`source_profile` profiles
//! (STS AssumeRoleWithWebIdentity and AssumeRole, answered by the in-process `ferry
//! serve`, which then accepts the keys it handed out), from an SSO profile (the portal's
//! GetRoleCredentials, answered by `ferry serve` too), from a container credentials
//! endpoint, or from EC2 instance metadata (AWS's `ec2-metadata-mock`), and signs real
//! requests with them. `-vv` names the source in use once and never a secret; the keys
//! are fetched again before they expire, and after an ExpiredToken answer.

use ferry_testkit::{FerryServe, Served};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ferry -vv` against `srv` with no credentials of its own from anywhere: no keys, no
/// profile, no shared files but `config`, no metadata endpoints (instance metadata off, so
/// nothing reaches the machine's own); each test adds the source it tries.
fn ferry_cmd(srv: &Served, config: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    c.env("AWS_ENDPOINT_URL", srv.url())
        .env("AWS_REGION", ferry_testkit::REGION)
        .env("AWS_CONFIG_FILE", config)
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        .env("HOME", "/nonexistent-ferry-home")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_ROLE_SESSION_NAME",
        "AWS_ENDPOINT_URL_STS",
        "AWS_ENDPOINT_URL_SSO",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
        "AWS_EC2_METADATA_V1_DISABLED",
        "FERRY_CREDENTIAL_PROCESS_TIMEOUT",
        "FERRY_LOG",
    ] {
        c.env_remove(var);
    }
    c.arg("-vv").stdin(Stdio::null());
    c
}

/// `ferry -vv ARGS` with only `config` to find credentials in.
fn ferry(srv: &Served, config: &Path, args: &[&str]) -> Output {
    ferry_cmd(srv, config).args(args).output().unwrap()
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

/// STS AssumeRoleWithWebIdentity calls the server answered with 200, from its metrics endpoint.
fn sts_calls(srv: &Served) -> u64 {
    sts_calls_of(srv, "AssumeRoleWithWebIdentity")
}

fn sts_calls_of(srv: &Served, action: &str) -> u64 {
    let line = format!("ferry_requests_total{{op=\"{action}\",status=\"200\"}} ");
    http_get(srv, "/_ferry/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .map(|n| n.trim().parse().unwrap())
        .unwrap_or(0)
}

/// Temporary keys issued by `srv`'s STS (a plain AssumeRoleWithWebIdentity GET), which
/// the server accepts only with their session token: a metadata endpoint hands them out
/// in the tests below, so a request that succeeds proves the token was sent.
fn issued_keys(srv: &Served) -> ferry_proto::sts::TemporaryCredentials {
    let answer = http_get(
        srv,
        "/?Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn:aws:iam::1:role/r\
         &RoleSessionName=s&WebIdentityToken=t",
    );
    let body = &answer[answer.find("\r\n\r\n").expect("an HTTP answer") + 4..];
    ferry_proto::sts::parse_web_identity_result(body.as_bytes()).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// Fails when `stderr` shows any of the secrets.
#[track_caller]
fn no_secrets(stderr: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!stderr.contains(s), "a secret is in the output:\n{stderr}");
    }
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
    ferry_cmd(srv, config)
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", token_file)
        .env("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ferry-test")
        .env("AWS_ROLE_SESSION_NAME", "ferry-test")
        .args(args)
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

#[test]
fn a_hung_credential_process_fails_naming_the_command_and_its_time_out() {
    let srv = FerryServe::new().start();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hang.sh");
    std::fs::write(&script, "#!/bin/sh\nsleep 30\n").unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, format!("[default]\ncredential_process = sh {}\n", script.display())).unwrap();
    let started = std::time::Instant::now();
    let out = ferry_cmd(&srv, &config)
        .env("FERRY_CREDENTIAL_PROCESS_TIMEOUT", "1")
        .args(["ls", "s3://any/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("credential_process")
            && stderr.contains("hang.sh")
            && stderr.contains("did not finish within 1s"),
        "{stderr}"
    );
}

/// A Ctrl-C at the terminal while ferry waits for its credential process: the terminal
/// signals its foreground process group, here ferry's own group (the test makes ferry
/// lead one), and the command and what it started are in it, so they stop with ferry
/// rather than run on, orphaned.
#[test]
fn ctrl_c_while_a_credential_process_runs_stops_it_with_ferry() {
    use std::os::unix::process::CommandExt;
    let srv = FerryServe::new().start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = dir.path().join("wait.sh");
    // The script becomes the sleep (exec), a grandchild of ferry's under `sh -c`. Not a
    // `sleep &`: a shell without job control starts those with SIGINT ignored.
    std::fs::write(&script, format!("#!/bin/sh\necho $$ > '{}'\nexec sleep 30\n", pid_file.display())).unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, format!("[default]\ncredential_process = sh {}\n", script.display())).unwrap();
    let mut child = ferry_cmd(&srv, &config)
        .args(["ls", "s3://any/"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let sleeper = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse::<i32>().ok()) {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "the credential process never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill(2) with a negative pid signals the process group ferry leads, as a
    // terminal's Ctrl-C signals its foreground group.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status:?}");
    // The sleep is gone (or a zombie, its parent gone too, waiting for init) within a few
    // seconds: SIGINT reaches every member of the group at once.
    let dead = |state: &str| state.is_empty() || state.split(") ").nth(1).is_some_and(|r| r.starts_with('Z'));
    let mut state = String::new();
    while std::time::Instant::now() < deadline {
        state = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
        if dead(&state) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(dead(&state), "the credential process's sleep {sleeper} outlived ferry's Ctrl-C: {state}");
}

/// role_arn + source_profile, two levels deep: `top`'s AssumeRole is signed with the
/// temporary keys of `mid`'s, which is signed with `base`'s static keys (the server's own).
#[test]
fn assume_role_through_a_source_profile_chain_signs_requests() {
    let srv = FerryServe::new().credentials("AKBASE", "base-secret").start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::write(
        &config,
        "[profile top]\nrole_arn = arn:aws:iam::1:role/top\nsource_profile = mid\nrole_session_name = top-session\n\
         [profile mid]\nrole_arn = arn:aws:iam::1:role/mid\nsource_profile = base\n\
         [profile base]\naws_access_key_id = AKBASE\naws_secret_access_key = base-secret\n\
         [profile wrong]\nrole_arn = arn:aws:iam::1:role/w\nsource_profile = bad-keys\n\
         [profile bad-keys]\naws_access_key_id = AKBASE\naws_secret_access_key = not-the-secret\n\
         [profile loop]\nrole_arn = arn:aws:iam::1:role/l\nsource_profile = loop2\n\
         [profile loop2]\nrole_arn = arn:aws:iam::1:role/l2\nsource_profile = loop\n",
    )
    .unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"signed by an assumed role").unwrap();
    let stderr = ok(&ferry(&srv, &config, &["--profile", "top", "mb", "s3://role"]));
    assert_eq!(stderr.matches("credentials: assume role").count(), 1, "-vv does not name the source once:\n{stderr}");
    assert!(stderr.contains("top -> mid -> base"), "{stderr}");
    no_secrets(&stderr, &["base-secret"]);
    assert_eq!(sts_calls_of(&srv, "AssumeRole"), 2, "one AssumeRole per profile of the chain");
    ok(&ferry(&srv, &config, &["--profile", "top", "cp", file.to_str().unwrap(), "s3://role/f.txt"]));
    let out = ferry(&srv, &config, &["--profile", "top", "cat", "s3://role/f.txt"]);
    ok(&out);
    assert_eq!(out.stdout, b"signed by an assumed role");

    // Keys the server does not take: STS's own refusal, with the role named.
    let out = ferry(&srv, &config, &["--profile", "wrong", "ls", "s3://role/"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("AssumeRole (arn:aws:iam::1:role/w)") && stderr.contains("SignatureDoesNotMatch"),
        "{stderr}"
    );
    no_secrets(&stderr, &["not-the-secret"]);
    // A loop of source profiles: said before anything is sent.
    let out = ferry(&srv, &config, &["--profile", "loop", "ls", "s3://role/"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("source_profile loops: loop -> loop2 -> loop"), "{}", text(&out.stderr));
}

/// A stand-in for the ECS / EKS Pod Identity agent (no emulator of it exists to run
/// here; `ferry serve`'s own endpoint takes any token, so it cannot show that the token
/// file's exact contents are sent): a real HTTP server on a loopback socket that answers
/// the agent's JSON when the Authorization header is `token`, 401 otherwise, and counts
/// the requests.
fn container_agent(
    keys: ferry_proto::sts::TemporaryCredentials,
    token: &'static str,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/credentials", listener.local_addr().unwrap());
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let expiration = format!("{}Z", &ferry_proto::encoding::iso8601(keys.expiration)[..19]);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut authorized = false;
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some((name, value)) = line.split_once(':') {
                    authorized |= name.eq_ignore_ascii_case("authorization") && value.trim() == token;
                }
                line.clear();
            }
            let (status, body) = if authorized {
                (
                    "200 OK",
                    format!(
                        r#"{{"AccessKeyId":"{}","SecretAccessKey":"{}","Token":"{}","Expiration":"{expiration}"}}"#,
                        keys.access_key_id, keys.secret_access_key, keys.session_token
                    ),
                )
            } else {
                (
                    "401 Unauthorized",
                    r#"{"code":"InvalidToken","message":"the authorization token is not valid"}"#.to_owned(),
                )
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, calls)
}

#[test]
fn container_credentials_sign_requests_with_the_authorization_token() {
    let srv = FerryServe::new().credentials("AKSERVER", "server-secret").start();
    let keys = issued_keys(&srv);
    let secrets = [keys.secret_access_key.clone(), keys.session_token.clone()];
    let (url, calls) = container_agent(keys, "pod-identity-token");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, "").unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "pod-identity-token\n").unwrap();
    let container = |args: &[&str]| {
        ferry_cmd(&srv, &config)
            .env("AWS_CONTAINER_CREDENTIALS_FULL_URI", &url)
            .env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &token_file)
            .args(args)
            .output()
            .unwrap()
    };
    let stderr = ok(&container(&["mb", "s3://pod"]));
    assert_eq!(stderr.matches("credentials: container credentials").count(), 1, "{stderr}");
    no_secrets(&stderr, &[&secrets[0], &secrets[1], "pod-identity-token"]);
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"signed by the agent's keys").unwrap();
    ok(&container(&["cp", file.to_str().unwrap(), "s3://pod/f.txt"]));
    let out = container(&["cat", "s3://pod/f.txt"]);
    ok(&out);
    assert_eq!(out.stdout, b"signed by the agent's keys");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3, "one agent call per command");

    // A token the agent refuses: the error names the source and the agent's words.
    std::fs::write(&token_file, "stale-token").unwrap();
    let out = container(&["ls", "s3://pod/"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("container credentials") && stderr.contains("401") && stderr.contains("not valid"),
        "{stderr}"
    );
    // `ferry serve` answers as the agent too, for any non-empty token, and not without one.
    let own = format!("{}/_ferry/container-credentials", srv.url());
    let out = ferry_cmd(&srv, &config)
        .env("AWS_CONTAINER_CREDENTIALS_FULL_URI", &own)
        .env("AWS_CONTAINER_AUTHORIZATION_TOKEN", "any-token")
        .args(["cat", "s3://pod/f.txt"])
        .output()
        .unwrap();
    ok(&out);
    assert_eq!(out.stdout, b"signed by the agent's keys");
    assert_eq!(sts_calls_of(&srv, "ContainerCredentials"), 1);
    let out = ferry_cmd(&srv, &config)
        .env("AWS_CONTAINER_CREDENTIALS_FULL_URI", &own)
        .args(["ls", "s3://pod/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("answered 401"), "{}", text(&out.stderr));
    // Plain http to a host that is not loopback or the agents': refused before any call.
    let out = ferry_cmd(&srv, &config)
        .env("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://192.0.2.1/creds")
        .args(["ls", "s3://pod/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("use https"), "{}", text(&out.stderr));
}

/// EC2 instance metadata from AWS's own emulator, IMDSv2 only: the keys it hands out
/// are temporary keys the server issued, so requests succeed only when signed with them
/// and carrying their session token.
#[test]
#[ignore = "needs ec2-metadata-mock: run by scripts/test.sh (FERRY_EC2_METADATA_MOCK)"]
fn instance_metadata_keys_from_ec2_metadata_mock_sign_requests() {
    let srv = FerryServe::new().credentials("AKSERVER", "server-secret").start();
    let keys = issued_keys(&srv);
    let expiration = format!("{}Z", &ferry_proto::encoding::iso8601(keys.expiration)[..19]);
    let imds = ferry_testkit::imds::Ec2MetadataMock::start(
        &ferry_testkit::imds::ImdsKeys {
            role: "ferry-instance-role",
            access_key_id: &keys.access_key_id,
            secret_access_key: &keys.secret_access_key,
            token: &keys.session_token,
            expiration: &expiration,
        },
        true,
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, "").unwrap();
    let on_ec2 = |args: &[&str]| {
        ferry_cmd(&srv, &config)
            .env_remove("AWS_EC2_METADATA_DISABLED")
            .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url())
            .args(args)
            .output()
            .unwrap()
    };
    let stderr = ok(&on_ec2(&["mb", "s3://ec2"]));
    assert_eq!(stderr.matches("credentials: instance metadata (IMDS)").count(), 1, "{stderr}");
    assert!(stderr.contains("ferry-instance-role"), "{stderr}");
    no_secrets(&stderr, &[&keys.secret_access_key, &keys.session_token]);
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"signed by the instance's keys").unwrap();
    ok(&on_ec2(&["cp", file.to_str().unwrap(), "s3://ec2/f.txt"]));
    let out = on_ec2(&["cat", "s3://ec2/f.txt"]);
    ok(&out);
    assert_eq!(out.stdout, b"signed by the instance's keys");

    // Turned off: the chain ends without keys, and the command says so.
    let out = ferry_cmd(&srv, &config)
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url())
        .args(["ls", "s3://ec2/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no credentials found"), "{}", text(&out.stderr));
    // Nothing listening there: the error names instance metadata, within its short time-out.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let started = std::time::Instant::now();
    let out = ferry_cmd(&srv, &config)
        .env_remove("AWS_EC2_METADATA_DISABLED")
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", format!("http://{gone}"))
        .args(["ls", "s3://ec2/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(text(&out.stderr).contains("instance metadata (IMDS at http://"), "{}", text(&out.stderr));
}

/// Where `aws sso login` caches the login of `key` (an sso-session's name or a legacy
/// start URL) under `home`: the SHA-1 of the key in hex, as the AWS CLI names it, the
/// folder made.
fn sso_cache_file(home: &Path, key: &str) -> std::path::PathBuf {
    let cache = home.join(".aws/sso/cache");
    std::fs::create_dir_all(&cache).unwrap();
    let out = Command::new("sh").arg("-c").arg(format!("printf %s '{key}' | sha1sum")).output().unwrap();
    cache.join(format!("{}.json", &text(&out.stdout)[..40]))
}

/// An SSO profile (an `[sso-session]` and a legacy `sso_start_url` one): the token `aws
/// sso login` would have cached, and the portal's GetRoleCredentials answered by the
/// server (`AWS_ENDPOINT_URL` covers the portal too).
#[test]
fn sso_profiles_read_the_cached_token_and_sign_requests() {
    let srv = FerryServe::new().credentials("AKSERVER", "server-secret").start();
    let home = tempfile::tempdir().unwrap();
    let cache_file = |key: &str| sso_cache_file(home.path(), key);
    let token = |expires_in_secs: i64| {
        let t = if expires_in_secs >= 0 {
            SystemTime::now() + Duration::from_secs(expires_in_secs as u64)
        } else {
            SystemTime::now() - Duration::from_secs((-expires_in_secs) as u64)
        };
        let at = format!("{}Z", &ferry_proto::encoding::iso8601(t)[..19]);
        format!(r#"{{"accessToken": "sso-access-token-secret", "expiresAt": "{at}", "region": "us-east-1"}}"#)
    };
    std::fs::write(cache_file("my-sso"), token(3600)).unwrap();
    std::fs::write(cache_file("https://legacy.awsapps.com/start"), token(-60)).unwrap();
    let config = home.path().join("config");
    std::fs::write(
        &config,
        "[profile dev]\nsso_session = my-sso\nsso_account_id = 111122223333\nsso_role_name = ReadWrite\n\
         [sso-session my-sso]\nsso_start_url = https://my.awsapps.com/start\nsso_region = us-east-1\n\
         [profile legacy]\nsso_start_url = https://legacy.awsapps.com/start\nsso_region = us-east-1\n\
         sso_account_id = 111122223333\nsso_role_name = ReadOnly\n",
    )
    .unwrap();
    let sso = |args: &[&str]| ferry_cmd(&srv, &config).env("HOME", home.path()).args(args).output().unwrap();
    let stderr = ok(&sso(&["--profile", "dev", "mb", "s3://sso"]));
    assert_eq!(stderr.matches("credentials: SSO").count(), 1, "{stderr}");
    no_secrets(&stderr, &["sso-access-token-secret"]);
    let file = home.path().join("f.txt");
    std::fs::write(&file, b"signed by the SSO role's keys").unwrap();
    ok(&sso(&["--profile", "dev", "cp", file.to_str().unwrap(), "s3://sso/f.txt"]));
    let out = sso(&["--profile", "dev", "cat", "s3://sso/f.txt"]);
    ok(&out);
    assert_eq!(out.stdout, b"signed by the SSO role's keys");
    assert_eq!(sts_calls_of(&srv, "GetRoleCredentials"), 3, "one portal call per command");

    // An expired login: said, with what to run.
    let out = sso(&["--profile", "legacy", "ls", "s3://sso/"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("expired") && stderr.contains("aws sso login --profile legacy"), "{stderr}");
}

/// An `sso_session` login whose token expires within 15 minutes is refreshed at SSO OIDC
/// (the server's CreateToken) with the refresh token and client the login cached, and
/// the cache file is rewritten with the new token (every other field kept, owner-only),
/// as the AWS CLI does; the next command finds it fresh and asks nothing. An expired
/// token whose refresh fails says so and what to run.
#[test]
fn an_sso_session_token_near_its_expiry_is_refreshed_and_cached_again() {
    use std::os::unix::fs::PermissionsExt;
    let srv = FerryServe::new().credentials("AKSERVER", "server-secret").start();
    let home = tempfile::tempdir().unwrap();
    let cache_file = sso_cache_file(home.path(), "refresh-sso");
    let cache = cache_file.parent().unwrap().to_owned();
    let at = |t: SystemTime| format!("{}Z", &ferry_proto::encoding::iso8601(t)[..19]);
    let login = |expires: SystemTime| {
        serde_json::json!({
            "startUrl": "https://my.awsapps.com/start", "region": "us-east-1",
            "accessToken": "old-access-token", "expiresAt": at(expires),
            "clientId": "client-from-login", "clientSecret": "client-secret-from-login",
            "registrationExpiresAt": at(SystemTime::now() + Duration::from_secs(86_400)),
            "refreshToken": "refresh-token-from-login",
        })
        .to_string()
    };
    let config = home.path().join("config");
    std::fs::write(
        &config,
        "[profile dev]\nsso_session = refresh-sso\nsso_account_id = 111122223333\nsso_role_name = ReadWrite\n\
         [sso-session refresh-sso]\nsso_start_url = https://my.awsapps.com/start\nsso_region = us-east-1\n",
    )
    .unwrap();
    let sso = |args: &[&str]| ferry_cmd(&srv, &config).env("HOME", home.path()).args(args).output().unwrap();
    let cached = || serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&cache_file).unwrap()).unwrap();

    // Two minutes left: refreshed first, then used.
    std::fs::write(&cache_file, login(SystemTime::now() + Duration::from_secs(120))).unwrap();
    let stderr = ok(&sso(&["--profile", "dev", "mb", "s3://sso-refresh"]));
    no_secrets(&stderr, &["refresh-token-from-login", "client-secret-from-login"]);
    assert_eq!(sts_calls_of(&srv, "CreateToken"), 1);
    let c = cached();
    assert!(c["accessToken"].as_str().unwrap().starts_with("ferry-sso-access-"), "{c}");
    assert!(c["refreshToken"].as_str().unwrap().starts_with("ferry-sso-refresh-"), "{c}");
    let expires = c["expiresAt"].as_str().unwrap();
    assert!(expires > at(SystemTime::now() + Duration::from_secs(1800)).as_str(), "{c}");
    assert_eq!(
        (c["clientId"].as_str(), c["startUrl"].as_str()),
        (Some("client-from-login"), Some("https://my.awsapps.com/start"))
    );
    assert_eq!(std::fs::metadata(&cache_file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1, "no temporary file is left beside the cache");
    // Fresh now: the next command asks the portal only.
    ok(&sso(&["--profile", "dev", "ls", "s3://sso-refresh/"]));
    assert_eq!(sts_calls_of(&srv, "CreateToken"), 1);
    assert_eq!(sts_calls_of(&srv, "GetRoleCredentials"), 2);

    // Expired an hour ago, SSO OIDC unreachable: the refresh's failure and what to run.
    std::fs::write(&cache_file, login(SystemTime::now() - Duration::from_secs(3600))).unwrap();
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = ferry_cmd(&srv, &config)
        .env("HOME", home.path())
        .env("AWS_ENDPOINT_URL_SSO_OIDC", format!("http://{gone}"))
        .args(["--profile", "dev", "ls", "s3://sso-refresh/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("expired")
            && stderr.contains("could not be refreshed")
            && stderr.contains("aws sso login --profile dev"),
        "{stderr}"
    );
    assert_eq!(cached()["accessToken"], "old-access-token", "a failed refresh leaves the cache as it was");
    // Expired, SSO OIDC reachable: refreshed, and the command runs.
    ok(&sso(&["--profile", "dev", "ls", "s3://sso-refresh/"]));
    assert_eq!(sts_calls_of(&srv, "CreateToken"), 2);
}
