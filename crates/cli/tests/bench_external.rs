//! `ferry bench --endpoint-url` (RunOptions::external) end to end at a tiny size: the
//! workload's rows against a server the runner did not start. A `ferry serve` started
//! by the test stands in for a third-party server (the runner treats it exactly as one:
//! no banner, no metrics, no synthetic bucket of its own); MinIO is the real third party
//! (ignored unless installed: scripts/test.sh runs it with FERRY_MINIO).
//!
//! Checked: ferry's rows are clean, rows that need ferry serve itself are skipped with
//! their reason, every record names the external server, the report says the emulation
//! profile does not apply, and a synthetic object the workload reads is PUT into the
//! server first with ferry serve's bytes. No speed is asserted.

use ferry_bench::record::check_schema;
use ferry_bench::small_objects::{self, SmallObjectsParams};
use ferry_bench::vectored::{self, VectoredParams};
use ferry_bench::workload::Size;
use ferry_bench::{ExternalServer, RunOptions, ServerCommand};
use ferry_store::{Credentials, CredentialsSource, GetParams, ObjectRef, RangeSpec, S3Client};
use ferry_testkit::{FerryServe, ACCESS_KEY, SECRET_KEY};
use std::time::Duration;

fn options(out: &std::path::Path, url: &str, keys: (&str, &str)) -> RunOptions {
    let mut o = RunOptions::new(ServerCommand::ferry(env!("CARGO_BIN_EXE_ferry")));
    o.out = Some(out.to_path_buf());
    o.progress = false;
    o.run_timeout = Duration::from_secs(60);
    o.server_lifetime = Duration::from_secs(300);
    o.external = Some(ExternalServer {
        url: url.to_owned(),
        access_key: keys.0.to_owned(),
        secret_key: keys.1.to_owned(),
        region: "us-east-1".into(),
        pid: None,
    });
    o
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// small-objects at 50 objects, one repeat: ferry's rows clean, the h2 row (a second
/// server with HTTP/2 on) and the ceilings (unsigned requests) skipped.
fn small_objects_against(url: &str, keys: (&str, &str)) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = SmallObjectsParams::new(Size::Quick);
    p.objects = 50;
    p.repeats = 1;
    p.connections = 4;
    p.pipeline_depth = 4;
    let w = small_objects::small_objects(Size::Quick, &p);
    let outcome = ferry_bench::run(&w, &options(&out, url, keys)).unwrap();
    assert!(
        outcome.report.starts_with(&format!("Server: {url} (an external S3-compatible server")),
        "{}",
        outcome.report
    );
    assert!(outcome.report.contains("the workload's emulation profile does not apply"));
    for label in ["h1-pool", "h1-pipeline", "auto"] {
        let r = outcome.records.iter().find(|r| r.variant == label).unwrap();
        assert_eq!(r.status, "ok", "{label}: {:?}", r.error_samples);
        assert_eq!(r.figure("objects"), Some(50.0), "{label}");
        assert_eq!(r.figure("errors"), Some(0.0), "{label}");
    }
    let skipped: Vec<&str> =
        outcome.records.iter().filter(|r| r.status == "skipped").map(|r| r.variant.as_str()).collect();
    assert!(skipped.iter().any(|v| v.starts_with("h2")), "{skipped:?}");
    assert!(skipped.iter().any(|v| v.starts_with("ceiling: wrk")), "{skipped:?}");
    assert!(
        outcome.report.contains("Rows skipped:") && outcome.report.contains("external server: "),
        "{}",
        outcome.report
    );
    for r in lines(&out) {
        check_schema(&r).unwrap();
        if r["status"] == "ok" && r["server"].is_object() {
            assert_eq!(r["server"]["external"], true, "{r}");
            assert_eq!(r["server"]["url"], url, "{r}");
            assert_eq!(r["profile"], "external", "{r}");
        }
    }
}

#[test]
fn small_objects_against_an_external_server_skips_what_needs_ferry_serve() {
    let srv = FerryServe::new().start();
    small_objects_against(&srv.url(), (ACCESS_KEY, SECRET_KEY));
}

#[test]
fn vectored_puts_its_synthetic_object_into_an_external_server_first() {
    let srv = FerryServe::new().start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = VectoredParams::new(Size::Quick);
    p.ranges = 50;
    p.object_bytes = 8 << 20;
    p.repeats = 1;
    let w = vectored::vectored(Size::Quick, &p);
    let outcome = ferry_bench::run(&w, &options(&out, &srv.url(), (ACCESS_KEY, SECRET_KEY))).unwrap();
    assert!(!outcome.records.is_empty());
    for r in &outcome.records {
        assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
    }
    // The object is there, with the bytes ferry serve's synthetic bucket makes for its key.
    let client = S3Client::builder(srv.url())
        .region("us-east-1")
        .credentials(CredentialsSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY)))
        .build()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let obj = ObjectRef::new("synthetic", p.key());
    assert_eq!(rt.block_on(client.head_object(&obj)).unwrap().size, 8 << 20);
    let start = (5 << 20) + 12_345;
    let got = rt
        .block_on(async {
            let out = client.get_object(&obj, GetParams::range(RangeSpec::FromTo(start, start + 4095))).await?;
            out.body.collect().await
        })
        .unwrap();
    assert_eq!(&got[..], &ferry_backend::synthetic_bytes(&p.key(), start, 4096)[..]);
}

#[test]
#[ignore = "needs MinIO: run by scripts/test.sh (FERRY_MINIO)"]
fn small_objects_against_minio() {
    let m = ferry_testkit::minio::minio();
    small_objects_against(&m.url(), m.credentials());
}

/// `--minio PATH` across the region link: the bench starts MinIO in the link's server
/// namespace (its address the link's), the workload's rows run against it clean, the
/// records name it, its CPU is read per row (the bench knows its process), and its data
/// directory is gone when the command ends.
#[test]
#[ignore = "needs root, ip and MinIO: scripts/test.sh runs it as root with FERRY_MINIO"]
fn vectored_against_a_minio_the_bench_started_across_the_region_link() {
    ferry_testkit::require::root();
    ferry_testkit::require::tool("ip");
    let minio = std::env::var("FERRY_MINIO").expect("FERRY_MINIO names the MinIO binary (scripts/setup.sh builds it)");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let before = minio_dirs();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args([
            "bench",
            "vectored",
            "--quick",
            "--peers",
            "none",
            "--no-progress",
            "--link",
            "region",
            "--minio",
            &minio,
        ])
        .arg("--out")
        .arg(&out)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "exit {:?}\n{stderr}", run.status);
    assert!(stdout.contains("Server: http://10.77.0.2:"), "MinIO not on the link's server address:\n{stdout}");
    assert!(stdout.contains("CPU per row, server beside client"), "{stdout}");
    let records = lines(&out);
    assert!(!records.is_empty());
    for r in &records {
        check_schema(r).unwrap();
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["params"]["link"], "region", "{r}");
        assert!(r["server"]["url"].as_str().unwrap().starts_with("http://10.77.0.2:"), "{r}");
        assert!(r["figures"]["server_cpu_s"].as_f64().is_some(), "no server CPU read: {r}");
    }
    assert_eq!(minio_dirs(), before, "MinIO's data directory outlived the run");
}

/// `--minio` is refused where an external server is (a workload with servers of its
/// own, a profile), and beside `--endpoint-url`, before anything starts.
#[test]
fn minio_is_refused_where_an_external_server_is() {
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ferry")).args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?} ran");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = run(&["bench", "bulk-wan", "--quick", "--minio", "/nonexistent/minio"]);
    assert!(err.contains("--minio: bulk-wan runs servers of its own"), "{err}");
    let err = run(&["bench", "small-objects", "--quick", "--minio", "/nonexistent/minio", "--profile", "s3"]);
    assert!(err.contains("--profile s3 with --minio"), "{err}");
    let err = run(&["bench", "small-objects", "--minio", "/x", "--endpoint-url", "http://127.0.0.1:9"]);
    assert!(err.contains("cannot be used with"), "{err}");
}

/// The bench's MinIO data directories now in the temporary directory.
fn minio_dirs() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ferry-bench-minio-")))
        .collect();
    v.sort();
    v
}
