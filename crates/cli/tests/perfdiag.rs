//! `ferry perfdiag --quick` end to end, the binary under test against real servers on
//! real sockets: `ferry serve` (memory, the `s3` profile so first bytes and rates have a
//! shape; the `lan` profile where HTTP/2 must answer) and MinIO (ignored unless
//! installed: scripts/test.sh runs it with FERRY_MINIO).
//!
//! What is checked: every section of the JSON document is there with its fields and
//! types (`check_schema`), the scratch prefix is gone afterwards, a scratch prefix left
//! by a run killed with SIGKILL is removed by the next run while one whose run may still
//! be going is listed and left alone, and bad credentials or an unreachable endpoint fail
//! within seconds with one sentence. No test asserts a speed.

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
    let mut cmd = cmd;
    let out = ok(&run(&mut cmd, &["--json", "ls", "--recursive", &format!("s3://{bucket}/{prefix}")]));
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
