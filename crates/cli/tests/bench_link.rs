//! End-to-end runs across the emulated link and of `bulk-wan`, tiny, against real
//! `ferry serve` subprocesses of the binary under test (CARGO_BIN_EXE_ferry):
//!
//! - bulk-wan on loopback (any user, needs iperf3): every client row pulled bytes over
//!   HTTPS without errors, the iperf3 row is there, records carry params.concurrency /
//!   params.link; with one peer (boto3 from the bench peers), ferry on the peer's pull
//!   beside it;
//! - bulk-wan across the `region` link and small-objects across it (root only): the
//!   servers ran in the link's server namespace (their URL is the link's address) and the
//!   client reached them from the client's;
//! - without root, bulk-wan falls back to no link, loudly.
//!
//! The tests that need a tool or root are `#[ignore = "needs ..."]`: `scripts/test.sh`
//! runs them with `--ignored` where it is present, and run without it they fail.
//!
//! Only the shape of the results is checked, never a speed.

use ferry_bench::bulk_wan::{self, BulkWanParams};
use ferry_bench::record::check_schema;
use ferry_bench::small_objects::{self, SmallObjectsParams};
use ferry_bench::workload::Size;
use ferry_bench::{RunOptions, ServerCommand};
use ferry_link::{Link, Preset};
use std::sync::Arc;
use std::time::Duration;

fn options(out: &std::path::Path, link: Option<Arc<Link>>) -> RunOptions {
    let mut o = RunOptions::new(ServerCommand::ferry(env!("CARGO_BIN_EXE_ferry")));
    o.out = Some(out.to_path_buf());
    o.progress = false;
    o.run_timeout = Duration::from_secs(60);
    o.server_lifetime = Duration::from_secs(300);
    o.log_dir = out.parent().unwrap().to_path_buf();
    o.set_link(link);
    o
}

/// The `region` link; the test fails without root (it is `#[ignore]`d for that).
fn region_link() -> Arc<Link> {
    ferry_testkit::require::root();
    ferry_testkit::require::tool("ip");
    Arc::new(Link::up(Preset::REGION).unwrap_or_else(|e| panic!("bringing the region link up: {e}")))
}

fn tiny() -> BulkWanParams {
    let mut p = BulkWanParams::new(Size::Quick);
    p.mean_bytes = 1 << 20;
    p.objects = 8;
    p.concurrency = vec![2];
    p.run_seconds = 1.0;
    p.repeats = 1;
    p
}

fn check_bulk_wan(outcome: &ferry_bench::Outcome, p: &BulkWanParams, out: &std::path::Path, link: &str) {
    assert_eq!(outcome.records.len(), p.modes.len() + 1, "three ferry rows and iperf3");
    for r in &outcome.records {
        assert_eq!(r.params["concurrency"], 2);
        assert_eq!(r.params["link"], link);
        assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
        assert!(r.figure("bytes_per_s").unwrap() > 0.0, "{}", r.variant);
        assert!(r.figure("bytes_per_s_per_connection").unwrap() > 0.0, "{}", r.variant);
        assert_eq!(r.figure("errors"), Some(0.0), "{}", r.variant);
    }
    let iperf = outcome.records.iter().find(|r| r.mode == "iperf3").expect("an iperf3 record");
    assert_eq!(iperf.variant, "iperf3 -P 2");
    for m in ["h1-pool", "h2", "auto"] {
        let r = outcome.records.iter().find(|r| r.mode == m).unwrap_or_else(|| panic!("no {m} row"));
        assert!(r.figure("connections_opened").unwrap() >= 1.0);
        // The warm-up each row ran is recorded (quick measures it, capped at omit_seconds).
        let omit = r.figure("omit_s").unwrap_or_else(|| panic!("{m}: no omit_s"));
        assert!(omit > 0.0 && omit <= p.omit_seconds as f64 + 0.5, "{m}: warm-up {omit} s");
        assert_eq!(r.figure("warmup_measured"), Some(1.0), "{m}");
        assert!(r.server.as_ref().unwrap()["args"].to_string().contains("--tls"), "HTTPS");
    }
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), outcome.records.len());
    for v in &lines {
        check_schema(v).unwrap();
        assert_eq!(v["bench"], "bulk-wan");
        assert!(v["figures"]["bytes_per_s"].is_number());
    }
    assert!(outcome.report.contains("| 2 | h2 |"), "{}", outcome.report);
}

#[test]
#[ignore = "needs iperf3 (scripts/setup.sh installs it; scripts/test.sh runs it where it is)"]
fn bulk_wan_tiny_on_loopback() {
    ferry_testkit::require::tool("iperf3");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let p = tiny();
    let outcome = bulk_wan::run(Size::Quick, &p, &options(&out, None)).unwrap();
    check_bulk_wan(&outcome, &p, &out, "none");
}

/// `--quick`'s peer arrangement, tiny, on loopback: ferry h1-pool on the peers' pull,
/// then one peer on the same objects, both once, both clean; the report and the claims
/// line hold the peer against ferry's same pull.
#[test]
#[ignore = "needs iperf3 and the bench peers' boto3 (scripts/bench-setup.sh; scripts/test.sh runs it where they are)"]
fn bulk_wan_tiny_one_peer_beside_ferry_on_its_pull() {
    use ferry_bench::peers::Peer;
    ferry_testkit::require::tool("iperf3");
    if let Err(why) = ferry_bench::peers::available(Peer::Boto3) {
        panic!("this test needs the bench peers' boto3 (run scripts/bench-setup.sh or set FERRY_PEERS_JSON): {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = tiny();
    p.peers = vec![Peer::Boto3];
    p.peer_mean_bytes = 512 << 10;
    assert!(p.peers_once && p.same_pull, "quick's arrangement");
    let outcome = bulk_wan::run(Size::Quick, &p, &options(&out, None)).unwrap();
    let row = |v: &str| {
        outcome.records.iter().find(|r| r.variant == v).unwrap_or_else(|| {
            panic!("no {v} row: {:?}", outcome.records.iter().map(|r| &r.variant).collect::<Vec<_>>())
        })
    };
    let (ferry, peer) = (row(bulk_wan::SAME_PULL_ROW), row("boto3"));
    for r in [ferry, peer] {
        assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
        assert_eq!(r.figure("objects_completed"), Some(2.0), "{}: the two objects, whole", r.variant);
        assert!(r.figure("bytes_per_s_with_ramp").unwrap() > 0.0, "{}", r.variant);
        assert!(r.figure("bytes_per_s_per_connection_with_ramp").unwrap() > 0.0, "{}", r.variant);
    }
    assert_eq!(ferry.figure("bytes"), peer.figure("bytes"), "the same objects");
    assert!(ferry.figure("bytes_per_s").is_none(), "a whole pull has no counted window");
    // A new client: its own connections, at most one per object in flight (on loopback
    // the first may finish before the second needs one).
    let conns = ferry.figure("connections_opened").unwrap();
    assert!((1.0..=2.0).contains(&conns), "a new client's connections: {conns}");
    // The rows' records and the peer's are valid JSON lines of the schema.
    for l in std::fs::read_to_string(&out).unwrap().lines() {
        check_schema(&serde_json::from_str(l).unwrap()).unwrap();
    }
    assert!(
        outcome.report.contains("peers on their own pull against ferry h1-pool on the same pull"),
        "{}",
        outcome.report
    );
    let h = ferry_bench::claims::headline("bulk-wan", &outcome.records);
    assert!(h.measured.contains("boto3 ") && h.measured.contains("h1-pool "), "{}", h.measured);
}

#[test]
#[ignore = "needs root and ip (network namespaces) and iperf3: scripts/test.sh runs it as root"]
fn bulk_wan_tiny_across_the_region_link() {
    ferry_testkit::require::tool("iperf3");
    let link = region_link();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let p = tiny();
    let ip = link.server_ip().to_string();
    let outcome = bulk_wan::run(Size::Quick, &p, &options(&out, Some(link))).unwrap();
    check_bulk_wan(&outcome, &p, &out, "region");
    let args = outcome.records.iter().find(|r| r.mode == "h2").unwrap().server.as_ref().unwrap()["args"].to_string();
    assert!(args.contains(&format!("{ip}:0")), "the server listened on the link's address: {args}");
}

#[test]
#[ignore = "needs root and ip (network namespaces): scripts/test.sh runs it as root"]
fn small_objects_across_the_region_link() {
    let link = region_link();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = SmallObjectsParams::new(Size::Quick);
    p.objects = 40;
    p.repeats = 1;
    p.connections = 4;
    p.pipeline_depth = 4;
    p.auto_ranged = false;
    p.ceilings = false;
    let w = small_objects::small_objects(Size::Quick, &p);
    let (c_ns, s_ns) = (link.client_namespace().to_owned(), link.server_namespace().to_owned());
    let outcome = ferry_bench::run(&w, &options(&out, Some(link))).unwrap();
    for r in &outcome.records {
        assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
        assert_eq!(r.figure("objects"), Some(40.0), "{}", r.variant);
        assert_eq!(r.params["link"], "region");
        let args = r.server.as_ref().unwrap()["args"].to_string();
        assert!(args.contains("10.77.0.2:0"), "server bound to the link's address: {args}");
    }
    // The options (and with them the link) are gone: so are its namespaces.
    assert!(!ferry_link::netns::exists(&c_ns) && !ferry_link::netns::exists(&s_ns));
}

/// The binary as an unprivileged user: as root, run it as nobody (uid 65534); otherwise
/// it already is unprivileged. As nobody it runs from a copy in `dir` (which nobody can
/// enter), since the checkout may sit in a directory only root can enter (`mktemp -d`
/// makes it 0700), and the bench starts `ferry serve` from its own path.
fn unprivileged(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let root = ferry_link::check_root().is_ok();
    let exe = if root {
        let copy = dir.join("ferry");
        if !copy.exists() {
            std::fs::copy(env!("CARGO_BIN_EXE_ferry"), &copy).unwrap();
        }
        copy
    } else {
        std::path::PathBuf::from(env!("CARGO_BIN_EXE_ferry"))
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args).current_dir(dir).env("TMPDIR", dir);
    if root {
        cmd.uid(65534).gid(65534);
    }
    cmd.output().unwrap()
}

#[test]
fn without_root_bulk_wan_falls_back_to_no_link_loudly_and_link_check_refuses() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = dir.path().join("r.jsonl");
    let o = unprivileged(
        dir.path(),
        &[
            "bench",
            "bulk-wan",
            "--quick",
            "--concurrency",
            "1",
            "--seconds",
            "1",
            "--mean-size",
            "1MiB",
            "--link",
            "transatlantic",
            "--no-progress",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "bulk-wan without root still runs: {stderr}");
    assert!(
        stderr.contains("needs root") && stderr.contains("FALLING BACK TO --link none"),
        "a loud fallback: {stderr}"
    );
    assert!(stdout.contains("link: none (loopback)"), "{stdout}");
    let records: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!records.is_empty());
    assert!(records.iter().all(|r| r["params"]["link"] == "none"));

    let o = unprivileged(dir.path(), &["bench", "link-check", "--link", "region"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "link-check cannot run without root");
    assert!(stderr.contains("needs root"), "{stderr}");
}
