//! `ferry perfdiag --quick` end to end, the binary under test against real servers on
//! real sockets: `ferry serve` (memory, the `s3` profile so first bytes and rates have a
//! shape; the `lan` profile where HTTP/2 must answer; `--tls`, its CA trusted through
//! `--ca-bundle`) and, ignored unless installed (scripts/test.sh runs them), MinIO
//! (FERRY_MINIO), fake-gcs-server over http and over https with h2 (FERRY_FAKE_GCS) and
//! Azurite (FERRY_AZURITE).
//!
//! What is checked: every section of the JSON document is there with its fields and
//! types (`check_schema`; over TLS also the handshake's timings, the ALPN offered and
//! chosen, `check_tls`), the scratch prefix is gone afterwards, a scratch prefix left
//! by a run killed with SIGKILL is removed by the next run while one whose run may still
//! be going is listed and left alone, bad credentials or an unreachable endpoint fail
//! within seconds with one sentence, and `ferry run` refuses a perfdiag line. No test
//! asserts a speed.

use ferry_server::Profile;
use ferry_testkit::{FerryServe, Served};
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn ferry(url: &str) -> Command {
    ferry_testkit::cli::command(env!("CARGO_BIN_EXE_ferry"), url)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status.code(), text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

fn run(cmd: &mut Command, args: &[&str]) -> Output {
    cmd.args(args).stdin(Stdio::null()).output().unwrap()
}

/// Every key under `s3://bucket/prefix`, recursively.
fn keys(cmd: Command, bucket: &str, prefix: &str) -> Vec<String> {
    keys_under(cmd, &format!("s3://{bucket}/{prefix}"))
}

/// Every key under `url` (any provider's), recursively.
fn keys_under(mut cmd: Command, url: &str) -> Vec<String> {
    let out = ok(&run(&mut cmd, &["--json", "ls", "--recursive", url]));
    out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["key"].as_str().unwrap_or("").to_owned()).collect()
}

fn num(v: &Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// The percentile object `{n, p50, p90, p99, max}`: ordered, positive.
#[track_caller]
fn check_pcts(v: &Value, what: &str) {
    assert!(v["n"].as_u64().unwrap_or(0) > 0, "{what}: no samples: {v}");
    let (p50, p90, p99, max) = (num(&v["p50"], what), num(&v["p90"], what), num(&v["p99"], what), num(&v["max"], what));
    assert!(0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= max, "{what}: {v}");
}

#[track_caller]
fn check_spread(v: &Value, what: &str) {
    let (median, min, max) = (num(&v["median"], what), num(&v["min"], what), num(&v["max"], what));
    assert!(0.0 < min && min <= median && median <= max, "{what}: {v}");
}

/// The document's schema: every section, its fields and their types; rows for every
/// transport measured.
fn check_schema(doc: &Value, transports: &[&str], sizes: usize) {
    assert_eq!(doc["schema"], "ferry-perfdiag/1");
    for key in ["url", "endpoint", "scratch"] {
        assert!(doc[key].is_string(), "{key}: {doc}");
    }
    assert!(doc["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(doc["machine"]["nics"].is_array());
    let path = &doc["path"];
    assert!(!path["dns"]["answers"].as_array().unwrap().is_empty(), "{path}");
    assert!(path["tcp_connect"]["p50_s"].as_f64().unwrap() > 0.0, "{path}");
    assert_eq!(path["pipelining"]["verified"], true, "ferry serve and MinIO answer pipelined requests: {path}");
    assert!(path["http_versions"].as_array().unwrap().contains(&Value::from("http/1.1")));
    assert!(path["h2_offered"].is_boolean());
    let h1 = &path["receive_window"]["http1"];
    assert_eq!(h1["status"], 200, "{path}");
    assert_eq!(h1["bytes_read"], h1["object_bytes"], "{path}");
    assert!(h1["so_rcvbuf_bytes"].as_u64().unwrap() > 0, "{path}");
    let measured: Vec<&str> = doc["transports"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(measured, transports);

    let lat = doc["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 3 * transports.len(), "{lat:?}");
    for r in lat {
        let what = format!("latency {} {}", r["transport"], r["op"]);
        assert_eq!(r["errors"], 0, "{what}: {r}");
        check_pcts(&r["first_byte_s"], &what);
        check_pcts(&r["whole_s"], &what);
        check_spread(&r["p50_by_repeat_s"], &what);
        assert!(num(&r["first_byte_s"]["p50"], &what) <= num(&r["whole_s"]["p50"], &what) + 1e-9, "{what}");
    }
    let tp = doc["throughput"].as_array().unwrap();
    assert_eq!(tp.len(), 4 * sizes * transports.len(), "{tp:?}");
    for r in tp {
        let what = format!("throughput {} {} x{} {}", r["transport"], r["op"], r["streams"], r["object_bytes"]);
        assert_eq!(r["errors"], 0, "{what}: {r}");
        check_spread(&r["objects_per_s"], &what);
        check_spread(&r["mb_per_s"], &what);
        check_pcts(&r["request_s"], &what);
        assert_eq!(r["samples_s"].as_array().unwrap().len() as u64, r["request_s"]["n"].as_u64().unwrap());
        if r["op"] == "read" {
            check_pcts(&r["first_byte_s"], &what);
        }
    }
    let params = &doc["params"];
    let keys = params["list_dirs"].as_u64().unwrap() * params["list_files"].as_u64().unwrap();
    let ls = doc["listing"].as_array().unwrap();
    assert_eq!(ls.len(), 3 * transports.len(), "{ls:?}");
    for r in ls {
        let what = format!("listing {} {}", r["transport"], r["how"]);
        assert_eq!(r["errors"], 0, "{what}: {r}");
        assert_eq!(r["keys"].as_u64(), Some(keys), "{what}: {r}");
        assert!(r["pages"].as_u64().unwrap() >= keys / params["list_page"].as_u64().unwrap(), "{what}: {r}");
        check_spread(&r["pages_per_s"], &what);
        check_spread(&r["keys_per_s"], &what);
    }
    assert!(doc["recommendations"].is_array());
    assert_eq!(doc["cleanup"]["removed"], true, "{}", doc["cleanup"]);
    assert!(doc["cleanup"]["keys_deleted"].as_u64().unwrap() > keys);
    assert!(doc["bounds"]["bytes_moved"].as_u64().unwrap() > 0);
    assert!(doc["bounds"]["cut_by"].is_null(), "--quick fits its default bounds: {}", doc["bounds"]);
}

/// The path section over TLS: handshakes timed, ALPN offered h2 then http/1.1 and the
/// server's choice recorded, HTTP/2 measured where ALPN chose it.
#[track_caller]
fn check_tls(doc: &Value, alpn_chosen: &str) {
    let path = &doc["path"];
    assert!(path["endpoint"].as_str().unwrap().starts_with("https://"), "{path}");
    let tls = &path["tls_handshake"];
    assert_eq!(tls["alpn_offered"], serde_json::json!(["h2", "http/1.1"]), "{tls}");
    assert_eq!(tls["alpn_chosen"], alpn_chosen, "{tls}");
    assert!(tls["version"].as_str().unwrap().starts_with("TLS"), "{tls}");
    let stats = &tls["stats"];
    assert!(stats["samples"].as_u64().unwrap() >= 1, "{tls}");
    assert!(0.0 < num(&stats["min_s"], "tls") && num(&stats["min_s"], "tls") <= num(&stats["max_s"], "tls"), "{tls}");
    assert!(path["tcp_connect"]["samples"].as_u64().unwrap() >= 1, "{path}");
    assert!(path.get("tls_error").is_none(), "{path}");
    if alpn_chosen == "h2" {
        assert_eq!(path["h2_offered"], true, "{path}");
        assert!(doc["transports"].as_array().unwrap().contains(&Value::from("h2")), "{}", doc["transports"]);
        assert!(path["receive_window"]["h2"]["largest_stream_window_bytes"].as_u64().unwrap() > 0, "{path}");
    }
}

fn perfdiag_json(mut cmd: Command, args: &[&str]) -> Value {
    let out = ok(&run(&mut cmd, &[&["--json", "perfdiag", "--quick"], args].concat()));
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not one JSON document ({e}): {out}"))
}

fn served_s3() -> Served {
    FerryServe::new().profile(Profile::S3).start()
}

#[test]
fn quick_run_against_serve_s3_profile_has_every_section_and_leaves_nothing() {
    let srv = served_s3();
    ok(&run(&mut ferry(&srv.url()), &["mb", "s3://perfdiag"]));
    ok(&run(&mut ferry(&srv.url()), &["cp", "-", "s3://perfdiag/base/keep.txt"]));
    let doc = perfdiag_json(ferry(&srv.url()), &["s3://perfdiag/base/"]);
    // The s3 profile has no HTTP/2: its row is skipped, and said so.
    check_schema(&doc, &["h1-pool", "h1-pipeline", "auto"], 2);
    assert_eq!(doc["path"]["h2_offered"], false);
    assert_eq!(doc["transports_skipped"][0]["transport"], "h2");
    assert!(doc["scratch"].as_str().unwrap().starts_with("base/ferry-perfdiag-"));
    assert_eq!(keys(ferry(&srv.url()), "perfdiag", ""), ["base/keep.txt"], "only the user's object is left");
    // The tables for people carry every section too.
    let human = ok(&run(&mut ferry(&srv.url()), &["perfdiag", "--quick", "--repeats", "1", "s3://perfdiag/base"]));
    for heading in ["## Client", "## Path", "## Latency", "## Throughput", "## Listing", "scratch removed"] {
        assert!(human.contains(heading), "{heading:?} missing:\n{human}");
    }
    assert_eq!(keys(ferry(&srv.url()), "perfdiag", ""), ["base/keep.txt"]);
}

#[test]
fn h2_is_measured_where_the_endpoint_answers_it() {
    // The lan profile answers HTTP/2 with prior knowledge on plain http.
    let srv = FerryServe::new().start();
    ok(&run(&mut ferry(&srv.url()), &["mb", "s3://perfdiag-h2"]));
    let doc = perfdiag_json(ferry(&srv.url()), &["--repeats", "1", "--transports", "h2,auto", "s3://perfdiag-h2"]);
    check_schema(&doc, &["h2", "auto"], 2);
    assert_eq!(doc["path"]["h2_offered"], true);
    let h2 = &doc["path"]["receive_window"]["h2"];
    assert!(h2["largest_stream_window_bytes"].as_u64().unwrap() > 0, "{h2}");
    assert!(keys(ferry(&srv.url()), "perfdiag-h2", "").is_empty());
}

#[test]
fn a_killed_runs_scratch_is_removed_by_the_next_and_a_live_one_is_left_alone() {
    let srv = served_s3();
    ok(&run(&mut ferry(&srv.url()), &["mb", "s3://perfdiag-kill"]));
    // A lease of a run on another host that may still be going.
    let foreign = "p/ferry-perfdiag-00000000beef/";
    let lease = format!(r#"{{"host":"elsewhere.example","pid":1,"started_unix":1,"expires_unix":{}}}"#, u64::MAX / 2);
    let mut cp = ferry(&srv.url());
    let mut child = cp
        .args(["cp", "-", &format!("s3://perfdiag-kill/{foreign}lease.json")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), lease.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());

    // A run killed in its measurement: started, then SIGKILLed once its scratch holds
    // more than its lease.
    let mut victim = ferry(&srv.url())
        .args(["perfdiag", "--quick", "s3://perfdiag-kill/p/"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let scratch = loop {
        let ks = keys(ferry(&srv.url()), "perfdiag-kill", "p/");
        let mine: Vec<&String> = ks.iter().filter(|k| !k.starts_with(foreign)).collect();
        if mine.len() >= 3 {
            let parts: Vec<&str> = mine[0].splitn(3, '/').collect();
            break format!("{}/{}/", parts[0], parts[1]);
        }
        assert!(Instant::now() < deadline, "the run wrote nothing within 60 s: {ks:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    victim.kill().unwrap();
    victim.wait().unwrap();
    assert!(scratch.starts_with("p/ferry-perfdiag-") && scratch.ends_with('/'), "{scratch}");
    assert!(!keys(ferry(&srv.url()), "perfdiag-kill", &scratch).is_empty(), "the killed run left its scratch");

    let doc = perfdiag_json(ferry(&srv.url()), &["--repeats", "1", "--transports", "auto", "s3://perfdiag-kill/p/"]);
    let left: Vec<&Value> = doc["leftovers"].as_array().unwrap().iter().collect();
    assert_eq!(left.len(), 2, "{left:?}");
    let killed = left.iter().find(|l| l["prefix"] == scratch.as_str()).unwrap();
    assert_eq!(killed["action"], "removed", "{killed}");
    assert!(killed["reason"].as_str().unwrap().contains("is gone"), "{killed}");
    let live = left.iter().find(|l| l["prefix"] == foreign).unwrap();
    assert_eq!(live["action"], "left alone", "{live}");
    assert_eq!(keys(ferry(&srv.url()), "perfdiag-kill", ""), [format!("{foreign}lease.json")]);
}

#[test]
fn bad_credentials_and_an_unreachable_endpoint_fail_fast_in_one_sentence() {
    let srv = served_s3();
    ok(&run(&mut ferry(&srv.url()), &["mb", "s3://perfdiag-auth"]));
    let t = Instant::now();
    let out =
        run(ferry(&srv.url()).env("AWS_SECRET_ACCESS_KEY", "wrong"), &["perfdiag", "--quick", "s3://perfdiag-auth/"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("refused the credentials") && err.trim().lines().count() == 1, "{err}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(keys(ferry(&srv.url()), "perfdiag-auth", "").is_empty());

    let missing = run(&mut ferry(&srv.url()), &["perfdiag", "--quick", "s3://no-such-bucket-here/"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("does not exist"), "{}", text(&missing.stderr));

    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = Instant::now();
    let out = run(&mut ferry(&format!("http://127.0.0.1:{port}")), &["perfdiag", "--quick", "s3://perfdiag-auth/"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("cannot connect to 127.0.0.1") && err.trim().lines().count() == 1, "{err}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

    let usage = run(&mut ferry(&srv.url()), &["perfdiag", "s3://perfdiag-auth/*.txt"]);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage.stderr));
}

#[test]
#[ignore = "needs MinIO: run by scripts/test.sh (FERRY_MINIO)"]
fn quick_run_against_minio_has_every_section_and_leaves_nothing() {
    let m = ferry_testkit::minio::minio();
    let (access, secret) = m.credentials();
    let cmd = || {
        let mut c = ferry(&m.url());
        c.env("AWS_ACCESS_KEY_ID", access).env("AWS_SECRET_ACCESS_KEY", secret);
        c
    };
    ok(&run(&mut cmd(), &["mb", "s3://perfdiag-minio"]));
    let doc = perfdiag_json(cmd(), &["s3://perfdiag-minio/under/"]);
    // MinIO speaks HTTP/1.1 only on plain http.
    check_schema(&doc, &["h1-pool", "h1-pipeline", "auto"], 2);
    assert!(keys(cmd(), "perfdiag-minio", "").is_empty());
}

#[test]
fn quick_run_over_tls_trusting_serves_ca_has_the_handshake_and_alpn() {
    let srv = FerryServe::new().tls().start();
    let ca = srv.ca_file().unwrap().to_str().unwrap().to_owned();
    let cmd = || {
        let mut c = ferry(&srv.url());
        c.args(["--ca-bundle", &ca]);
        c
    };
    ok(&run(&mut cmd(), &["mb", "s3://perfdiag-tls"]));
    let doc = perfdiag_json(cmd(), &["--repeats", "1", "s3://perfdiag-tls/t/"]);
    check_schema(&doc, &["h1-pool", "h1-pipeline", "h2", "auto"], 2);
    check_tls(&doc, "h2");
    assert!(keys(cmd(), "perfdiag-tls", "").is_empty());
    // Without the CA the endpoint's certificate is refused: one sentence, nothing written.
    let out = run(&mut ferry(&srv.url()), &["perfdiag", "--quick", "s3://perfdiag-tls/t/"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.to_lowercase().contains("certificate") && err.trim().lines().count() == 1, "{err}");
    assert!(keys(cmd(), "perfdiag-tls", "").is_empty());
}

#[test]
fn a_perfdiag_line_in_run_is_refused_and_writes_nothing() {
    let srv = served_s3();
    ok(&run(&mut ferry(&srv.url()), &["mb", "s3://perfdiag-run"]));
    let mut child = ferry(&srv.url())
        .args(["run", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = "perfdiag --quick s3://perfdiag-run/p/\nls s3://perfdiag-run/\nferry perfdiag s3://perfdiag-run/\n";
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    for line in [1, 3] {
        assert!(
            err.lines().any(|l| l.starts_with(&format!("ferry: error: line {line}: ")) && l.contains("must run alone")),
            "line {line} not refused: {err}"
        );
    }
    assert!(!err.contains("line 2"), "the ls line runs: {err}");
    assert!(keys(ferry(&srv.url()), "perfdiag-run", "").is_empty(), "a refused perfdiag line wrote nothing");
}

/// `ferry` pointed at fake-gcs-server: over http through STORAGE_EMULATOR_HOST (Google's
/// clients' variable), over https with `--endpoint-url` and the emulator's certificate as
/// `--ca-bundle`.
fn ferry_gcs(g: &ferry_testkit::fake_gcs::FakeGcs) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    c.env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env("CLOUDSDK_CONFIG", "/nonexistent/gcloud")
        .env_remove("AWS_ENDPOINT_URL");
    match &g.ca_file {
        None => {
            c.env("STORAGE_EMULATOR_HOST", g.addr.to_string());
        }
        Some(ca) => {
            c.env_remove("STORAGE_EMULATOR_HOST")
                .args(["--endpoint-url", &g.url(), "--no-sign-request", "--ca-bundle"])
                .arg(ca);
        }
    }
    c
}

fn gcs_bucket(base: &str) -> String {
    format!("{base}-{}", std::process::id())
}

#[test]
#[ignore = "needs fake-gcs-server: run by scripts/test.sh (FERRY_FAKE_GCS)"]
fn quick_run_against_fake_gcs_over_http_has_every_section_and_leaves_nothing() {
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let b = gcs_bucket("perfdiag-gcs");
    ok(&run(&mut ferry_gcs(g), &["mb", &format!("gs://{b}")]));
    ok(&run(&mut ferry_gcs(g), &["cp", "-", &format!("gs://{b}/base/keep.txt")]));
    let doc = perfdiag_json(ferry_gcs(g), &["--repeats", "1", &format!("gs://{b}/base/")]);
    // Go's server speaks HTTP/2 only under TLS: on http the h2 row is skipped, and said so.
    check_schema(&doc, &["h1-pool", "h1-pipeline", "auto"], 2);
    assert_eq!(doc["path"]["h2_offered"], false);
    assert_eq!(doc["transports_skipped"][0]["transport"], "h2");
    assert!(doc["path"].get("tls_handshake").is_none(), "no TLS on http: {}", doc["path"]);
    assert_eq!(keys_under(ferry_gcs(g), &format!("gs://{b}/")), ["base/keep.txt"], "only the user's object is left");
}

#[test]
#[ignore = "needs fake-gcs-server: run by scripts/test.sh (FERRY_FAKE_GCS)"]
fn quick_run_against_fake_gcs_over_https_measures_h2_and_the_handshake() {
    let g = ferry_testkit::fake_gcs::fake_gcs_tls();
    let b = gcs_bucket("perfdiag-gcs-tls");
    ok(&run(&mut ferry_gcs(g), &["mb", &format!("gs://{b}")]));
    let doc = perfdiag_json(ferry_gcs(g), &["--repeats", "1", &format!("gs://{b}/")]);
    // The emulator's listener offers h2 by ALPN and answers a client that offers only
    // http/1.1 with HTTP/1.1: every transport is measured, pipelining included.
    check_schema(&doc, &["h1-pool", "h1-pipeline", "h2", "auto"], 2);
    check_tls(&doc, "h2");
    assert!(keys_under(ferry_gcs(g), &format!("gs://{b}/")).is_empty());
}

#[test]
#[ignore = "needs Azurite: run by scripts/test.sh (FERRY_AZURITE)"]
fn quick_run_against_azurite_has_every_section_and_leaves_nothing() {
    let az = ferry_testkit::azurite::azurite();
    let cmd = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
        c.env("AZURE_STORAGE_CONNECTION_STRING", az.connection_string());
        for v in ["AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AWS_ENDPOINT_URL"] {
            c.env_remove(v);
        }
        c
    };
    let c = format!("perfdiag-az-{}", std::process::id() % 100_000);
    ok(&run(&mut cmd(), &["mb", &format!("az://{c}")]));
    let doc = perfdiag_json(cmd(), &["--repeats", "1", &format!("az://{c}/under/")]);
    // Azure's client speaks HTTP/1.1 only: its h2 row is left out before the run, with why.
    check_schema(&doc, &["h1-pool", "h1-pipeline", "auto"], 2);
    let skipped = &doc["transports_skipped"][0];
    assert_eq!(skipped["transport"], "h2", "{skipped}");
    assert!(skipped["reason"].as_str().unwrap().contains("HTTP/1.1 only"), "{skipped}");
    assert!(keys_under(cmd(), &format!("az://{c}/")).is_empty());
    // Named by the user, a transport the provider refuses is a usage error.
    let out = run(&mut cmd(), &["perfdiag", "--quick", "--transports", "h2", &format!("az://{c}/")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("HTTP/1.1 only"), "{}", text(&out.stderr));
}
