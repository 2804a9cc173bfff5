//! No secret reaches the output: the `ferry` binary under test runs with its most verbose
//! logging (`FERRY_LOG=trace`, every crate's every event) and `--json`, with credentials of
//! each provider whose text is known, and neither stdout nor stderr may hold any of it:
//!
//! - S3: the secret access key, over commands that succeed against `ferry serve` and one
//!   that fails its signature (a wrong secret, which must not be echoed either);
//! - GCS: a service account's private key (any line of it) and the access token its
//!   token endpoint hands out;
//! - Azure: a Shared Key account key, and a SAS token's signature (a SAS rides in every
//!   request's query string, so a URL printed whole would leak it).
//!
//! The GCS and Azure endpoints are a small scripted peer on a real socket (below): it
//! hands out a token and refuses everything else, which is enough to make the client sign,
//! send, fail and report.

use ferry_testkit::FerryServe;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};

const S3_SECRET: &str = "s3SECRET-load-7f3a9c/Qx+2w";
const S3_WRONG_SECRET: &str = "s3WRONG-load-e41b08/Zz+9k";
const GCS_TOKEN: &str = "ya29.gcsTOKEN-load-5d2e";
const AZURE_KEY: &str = "YXp1cmVLRVktbG9hZC0zYzFmLXNlY3JldC1ieXRlcw==";
const AZURE_SAS_SIG: &str = "sasSIG-load-88aa";
const SA_KEY_PEM: &str = include_str!("../../store/src/gcs/testdata/test-service-account-key.pem");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ferry` with no provider settings of the caller's, trace logging on.
fn ferry() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    for v in [
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "STORAGE_EMULATOR_HOST",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "IDENTITY_ENDPOINT",
    ] {
        c.env_remove(v);
    }
    c.env("AWS_CONFIG_FILE", "/nonexistent/config")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        .env("CLOUDSDK_CONFIG", "/nonexistent/gcloud")
        .env("FERRY_LOG", "trace")
        .stdin(Stdio::null());
    c
}

/// Runs it and fails if any of `secrets` appears in what it printed; returns the output.
#[track_caller]
fn run_clean(mut cmd: Command, secrets: &[&str]) -> Output {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    for s in secrets {
        assert!(!stdout.contains(s), "{s:?} printed on stdout of {cmd:?}:\n{stdout}");
        assert!(!stderr.contains(s), "{s:?} printed on stderr of {cmd:?}:\n{stderr}");
    }
    out
}

#[test]
fn the_s3_secret_key_is_never_printed() {
    let srv = FerryServe::new().credentials("AKIALOADTEST", S3_SECRET).start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"some bytes").unwrap();
    let secrets = [S3_SECRET, S3_WRONG_SECRET];
    let s3 = |secret: &str, args: &[&str]| {
        let mut c = ferry();
        c.env("AWS_ENDPOINT_URL", srv.url())
            .env("AWS_ACCESS_KEY_ID", "AKIALOADTEST")
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .arg("--json")
            .args(args);
        c
    };
    let file = file.to_str().unwrap();
    let down = dir.path().join("back.txt");
    for args in [
        &["mb", "s3://sec"][..],
        &["cp", file, "s3://sec/f.txt"],
        &["ls", "--recursive", "s3://sec/"],
        &["stat", "s3://sec/f.txt"],
        &["cat", "s3://sec/f.txt"],
        &["cp", "s3://sec/f.txt", down.to_str().unwrap()],
        &["presign", "s3://sec/f.txt"],
    ] {
        let out = run_clean(s3(S3_SECRET, args), &secrets);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        // Trace logging is on: the run did log, so the check above looked at something.
        assert!(!out.stderr.is_empty(), "{args:?} logged nothing at trace level");
    }
    assert_eq!(std::fs::read(&down).unwrap(), b"some bytes");
    // A wrong secret: refused, reported, and neither key printed.
    let out = run_clean(s3(S3_WRONG_SECRET, &["ls", "s3://sec/"]), &secrets);
    assert!(!out.status.success());
    assert!(text(&out.stdout).contains("SignatureDoesNotMatch") || text(&out.stderr).contains("SignatureDoesNotMatch"));
}

/// A scripted HTTP peer: `POST /token` gets an access token, everything else 403; it
/// answers each request on its own connection until the test ends.
fn scripted_peer() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    return;
                }
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        if k.eq_ignore_ascii_case("content-length") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0u8; length];
                let _ = reader.read_exact(&mut body);
                let (status, ctype, body) = if request_line.starts_with("POST /token") {
                    (
                        "200 OK",
                        "application/json",
                        format!(r#"{{"access_token":"{GCS_TOKEN}","expires_in":3600,"token_type":"Bearer"}}"#),
                    )
                } else if request_line.contains("/storage/") || request_line.contains("/b/") {
                    (
                        "403 Forbidden",
                        "application/json",
                        r#"{"error":{"code":403,"message":"Forbidden by the test peer","errors":[{"reason":"forbidden"}]}}"#
                            .to_string(),
                    )
                } else {
                    (
                        "403 Forbidden",
                        "application/xml",
                        "<?xml version=\"1.0\"?><Error><Code>AuthenticationFailed</Code><Message>Refused by the test peer</Message></Error>"
                            .to_string(),
                    )
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    url
}

#[test]
fn a_gcs_service_account_key_and_its_token_are_never_printed() {
    let peer = scripted_peer();
    let dir = tempfile::tempdir().unwrap();
    let sa = dir.path().join("sa.json");
    let key = format!(
        r#"{{"type":"service_account","project_id":"proj-1","private_key_id":"kid-1","private_key":{},"client_email":"ferry-test@proj-1.iam.gserviceaccount.com","token_uri":"{peer}/token"}}"#,
        serde_json_string(SA_KEY_PEM)
    );
    std::fs::write(&sa, key).unwrap();
    // Every line of the key's body is a secret; so is the token.
    let mut secrets: Vec<&str> = SA_KEY_PEM.lines().filter(|l| !l.starts_with("-----") && l.len() > 16).collect();
    secrets.push(GCS_TOKEN);
    for args in [&["ls", "gs://sec-bucket/"][..], &["stat", "gs://sec-bucket/k"], &["cat", "gs://sec-bucket/k"]] {
        let mut c = ferry();
        c.env("GOOGLE_APPLICATION_CREDENTIALS", &sa).args(["--json", "--endpoint-url", &peer]).args(args);
        let out = run_clean(c, &secrets);
        assert!(!out.status.success(), "{args:?}: the peer refuses every storage call");
        assert!(!out.stderr.is_empty() || !out.stdout.is_empty(), "{args:?} reported nothing");
    }
}

#[test]
fn an_azure_account_key_and_sas_signature_are_never_printed() {
    let peer = scripted_peer();
    for (var, value, secret) in [
        ("AZURE_STORAGE_KEY", AZURE_KEY.to_string(), AZURE_KEY),
        ("AZURE_STORAGE_SAS_TOKEN", format!("sv=2022-11-02&ss=b&srt=sco&sp=rl&sig={AZURE_SAS_SIG}"), AZURE_SAS_SIG),
    ] {
        for args in
            [&["ls", "az://sec-container/"][..], &["stat", "az://sec-container/k"], &["cat", "az://sec-container/k"]]
        {
            let mut c = ferry();
            c.env("AZURE_STORAGE_ACCOUNT", "secacct")
                .env(var, &value)
                .args(["--json", "--endpoint-url", &peer])
                .args(args);
            let out = run_clean(c, &[secret]);
            assert!(!out.status.success(), "{var} {args:?}: the peer refuses every call");
        }
    }
}

/// `s` as a JSON string literal.
fn serde_json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
