//! `ferry bench WORKLOAD --profile NAME`: the workload's `ferry serve` subprocesses run
//! the named emulation profile instead of their own, and the records and the report say
//! so; the workloads whose servers are not one fixed profile refuse the flag with a clear
//! message. Tiny runs against real `ferry serve` subprocesses of the binary under test;
//! no speed is asserted.

use ferry_bench::workload::Size;
use ferry_bench::{mixed_hol, RunOptions, ServerCommand};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A mixed-hol small enough for a test: the pool and one auto row (the cap map), one
/// server, 20 smalls beside a few 1 MiB parts.
fn tiny_mixed_hol() -> ferry_bench::Workload {
    let mut p = mixed_hol::MixedHolParams::new(Size::Quick);
    p.larges = 2;
    p.large_bytes = 2 << 20;
    p.part_bytes = 1 << 20;
    p.large_in_flight = 6;
    p.smalls = 20;
    p.small_rate = 200.0;
    p.small_max = 64 << 10;
    p.connections = 4;
    p.pipeline_depth = 4;
    p.load_warmup = Duration::from_millis(50);
    p.load_warmup_at_once = Duration::from_millis(50);
    p.load_alone = Duration::from_millis(20);
    p.repeats = 1;
    p.auto_caps = vec![4];
    mixed_hol::mixed_hol(Size::Quick, &p)
}

#[test]
fn the_profile_option_moves_every_server_and_the_records_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let w = tiny_mixed_hol();
    assert!(w.servers.iter().all(|s| s.profile == "s3"), "mixed-hol's own profile is s3: {:?}", w.servers);
    let mut o = RunOptions::new(ServerCommand::ferry(env!("CARGO_BIN_EXE_ferry")));
    o.out = Some(out.clone());
    o.progress = false;
    o.run_timeout = Duration::from_secs(60);
    o.server_lifetime = Duration::from_secs(300);
    o.profile = Some("gcs");
    let outcome = ferry_bench::run(&w, &o).unwrap();
    assert_eq!(outcome.records.len(), w.variants.len());
    for r in &outcome.records {
        assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
        assert_eq!(r.profile.as_deref(), Some("gcs"), "{}", r.variant);
    }
    for r in lines(&out) {
        assert_eq!(r["profile"], "gcs");
        assert_eq!(r["params"]["profile_override"], "gcs");
        // The server itself says which profile it runs (its banner), not only the record.
        let banner = r["server"]["banner"].as_array().unwrap();
        assert!(banner.iter().any(|l| l.as_str() == Some("profile: gcs")), "{banner:?}");
        assert_eq!(r["server"]["label"], "gcs");
    }
    assert!(
        outcome.report.contains("server profile: gcs (--profile), in place of the workload's own (s3)"),
        "{}",
        outcome.report
    );
}

fn ferry(args: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    c.args(args);
    if args.contains(&"--endpoint-url") {
        // Credentials as --endpoint-url asks for them, so that the refusal is --profile's.
        c.env("AWS_ACCESS_KEY_ID", "x").env("AWS_SECRET_ACCESS_KEY", "y");
    }
    c.output().unwrap()
}

#[test]
fn the_cli_runs_a_workload_on_the_profile_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = ferry(&[
        "bench",
        "mixed-hol",
        "--quick",
        "--auto-max-connections",
        "4",
        "--repeats",
        "1",
        "--peers",
        "none",
        "--no-progress",
        "--profile",
        "lan",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("server profile: lan (--profile)"), "{stdout}");
    let recs = lines(&out);
    assert!(!recs.is_empty());
    for r in &recs {
        assert_eq!(r["profile"], "lan", "{}", r["variant"]);
    }
}

#[test]
fn workloads_without_one_fixed_profile_refuse_it_clearly() {
    for (args, says) in [
        (vec!["bench", "ttfb-throughput", "--quick", "--profile", "gcs"], "compares the s3, gcs and azure profiles"),
        (vec!["bench", "all", "--quick", "--profile", "gcs"], "all runs ttfb-throughput"),
        (vec!["bench", "bulk-wan", "--quick", "--profile", "gcs"], "bulk-wan runs TLS servers of its own"),
        (vec!["bench", "cli-transfer", "--quick", "--profile", "s3"], "cli-transfer starts its own lan server"),
        (
            vec!["bench", "small-objects", "--quick", "--profile", "s3", "--endpoint-url", "http://127.0.0.1:9"],
            "an external server runs no emulation profile",
        ),
        (vec!["bench", "small-objects", "--quick", "--profile", "r2"], "possible values: lan, s3, gcs, azure"),
    ] {
        let o = ferry(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} ran");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
