//! End-to-end runs of `ferry bench` workloads at a tiny size, against real `ferry serve`
//! subprocesses of the binary under test (CARGO_BIN_EXE_ferry).
//!
//! They live here, not in crates/bench, because the measured configuration is a server in
//! another process (so getrusage(RUSAGE_SELF) is the client's CPU alone): running the
//! server in-process would test a different path (no spawn, no banner parsing, no kill
//! guard). Only the shape of the results is checked: every mode produced a row with
//! objects > 0 and no errors. No speed is asserted.

use ferry_bench::bulk_get::{self, BulkGetParams};
use ferry_bench::record::check_schema;
use ferry_bench::small_objects::{self, SmallObjectsParams};
use ferry_bench::workload::Size;
use ferry_bench::{RunOptions, ServerCommand};
use std::time::Duration;

fn options(out: &std::path::Path) -> RunOptions {
    let mut o = RunOptions::new(ServerCommand::ferry(env!("CARGO_BIN_EXE_ferry")));
    o.out = Some(out.to_path_buf());
    o.progress = false;
    o.run_timeout = Duration::from_secs(60);
    o.server_lifetime = Duration::from_secs(300);
    o
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn small_objects_tiny_every_mode_has_a_clean_row() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = SmallObjectsParams::new(Size::Quick);
    p.objects = 50;
    p.repeats = 1;
    p.connections = 4;
    p.pipeline_depth = 4;
    p.ceilings = false;
    let w = small_objects::small_objects(Size::Quick, &p);
    let outcome = ferry_bench::run(&w, &options(&out)).unwrap();
    assert_eq!(outcome.records.len(), w.variants.len());
    for v in &w.variants {
        let r =
            outcome.records.iter().find(|r| r.variant == v.label).unwrap_or_else(|| panic!("no row for {}", v.label));
        assert_eq!(r.status, "ok", "{}: {:?}", v.label, r.error_samples);
        assert_eq!(r.figure("objects"), Some(50.0), "{}", v.label);
        assert_eq!(r.figure("errors"), Some(0.0), "{}", v.label);
        assert!(r.figure("connections_opened").unwrap() >= 1.0);
        assert!(r.figure("latency_p50_ms").is_some() && r.figure("client_cpu_s").is_some());
    }
    let recs = lines(&out);
    assert_eq!(recs.len(), w.variants.len());
    for r in &recs {
        check_schema(r).unwrap();
        assert_eq!(r["bench"], "small-objects");
        assert_eq!(r["profile"], "s3");
        assert_eq!(r["params"]["objects"], 50);
    }
    assert!(outcome.report.contains("| h1-pipeline |"), "{}", outcome.report);
    assert!(outcome.report.contains("published: pipelining +30-40%"), "{}", outcome.report);
}

/// The ceiling rows beside small-objects: h2load and wrk against the anonymous twin
/// server, and the C/L bound from this run's first-byte probes.
#[test]
#[ignore = "needs h2load and wrk (scripts/setup.sh installs them; scripts/test.sh runs it where they are)"]
fn small_objects_tiny_ceilings() {
    ferry_testkit::require::tool("h2load");
    ferry_testkit::require::tool("wrk");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = SmallObjectsParams::new(Size::Quick);
    p.objects = 40;
    p.repeats = 1;
    p.connections = 4;
    p.pipeline_depth = 4;
    p.auto_ranged = false;
    let w = small_objects::small_objects(Size::Quick, &p);
    let outcome = ferry_bench::run(&w, &options(&out)).unwrap();
    for tool in ["h2load", "wrk"] {
        let r = outcome.records.iter().find(|r| r.mode == tool).unwrap_or_else(|| panic!("no {tool} row"));
        assert_eq!(r.status, "ok", "{tool}: {:?} {:?}", r.error_samples, r.note);
        assert!(r.figure("objects_per_s").unwrap() > 0.0, "{tool}");
        assert_eq!(r.figure("errors"), Some(0.0), "{tool}");
        assert!(r.note.as_deref().unwrap().contains(&format!("`{tool} ")), "the command is in the note");
    }
    let b = outcome.records.iter().find(|r| r.variant == small_objects::SMALL_OBJECTS_BOUND_ROW).unwrap();
    assert_eq!(b.status, "ok", "{:?}", b.error_samples);
    let l = b.figure("ttfb_p50_ms").unwrap() / 1e3;
    assert!((b.figure("objects_per_s").unwrap() - 4.0 / l).abs() < 1e-6 * (4.0 / l), "C/L with C = 4 connections");
    assert_eq!(b.params["bound_concurrency"], 4);
}

#[test]
#[ignore = "needs iperf3 (scripts/setup.sh installs it; scripts/test.sh runs it where it is)"]
fn bulk_get_tiny_has_rows_and_rss_check() {
    ferry_testkit::require::tool("iperf3");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = BulkGetParams::new(Size::Quick);
    p.size_label = "8MiB".into();
    p.bytes = 8 << 20;
    p.repeats = 1;
    p.iperf3_seconds = 1;
    p.rss_check = Some(("16MiB".into(), 16 << 20));
    let w = bulk_get::bulk_get(Size::Quick, &p);
    let outcome = ferry_bench::run(&w, &options(&out)).unwrap();
    for v in &w.variants {
        let r =
            outcome.records.iter().find(|r| r.variant == v.label).unwrap_or_else(|| panic!("no row for {}", v.label));
        assert_eq!(r.status, "ok", "{}: {:?}", v.label, r.error_samples);
        assert!(r.figure("bytes_per_s").unwrap() > 0.0);
        if r.mode != "iperf3" {
            assert_eq!(r.figure("bytes"), r.figure("bytes_expected"));
            assert!(r.figure("peak_rss_bytes").unwrap() > 0.0);
        }
    }
    assert!(outcome.records.iter().any(|r| r.workload == "rss-check"));
    for r in &lines(&out) {
        check_schema(r).unwrap();
    }
}

/// bulk-get's whole-object rows beside the streamed ones: boto3 `read()`, obstore
/// `bytes()` and ferry-py `get_into` appear next to boto3, obstore and ferry-py (`get`)
/// when scripts/bench-setup.sh has installed the peers (it fails without them), each
/// clean and moving the object's bytes. No speed is asserted.
#[test]
#[ignore = "needs iperf3 and the bench peers boto3, obstore (scripts/bench-setup.sh; scripts/test.sh runs it)"]
fn bulk_get_whole_object_peer_rows_when_installed() {
    use ferry_bench::peers::{available, Peer};
    ferry_testkit::require::tool("iperf3");
    let peers = [Peer::Boto3, Peer::Obstore, Peer::FerryPy];
    for p in peers {
        if let Err(why) = available(p) {
            panic!("this test needs the bench peer {}: {why} (run scripts/bench-setup.sh)", p.name());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = BulkGetParams::new(Size::Quick);
    (p.size_label, p.bytes, p.repeats, p.iperf3_seconds) = ("24MiB".into(), 24 << 20, 1, 1);
    p.peers = peers.to_vec();
    let w = bulk_get::bulk_get(Size::Quick, &p);
    let outcome = ferry_bench::run(&w, &options(&out)).unwrap();
    for label in ["boto3", "boto3 read()", "obstore", "obstore bytes()", "ferry-py", "ferry-py get_into"] {
        let r = outcome.records.iter().find(|r| r.variant == label).unwrap_or_else(|| panic!("no row {label}"));
        assert_eq!(r.status, "ok", "{label}: {:?}", r.error_samples);
        assert_eq!(r.figure("bytes"), Some((24u64 << 20) as f64), "{label}");
    }
}

/// The cli-transfer reaper measures the tool, not whoever started the reaper: a parent
/// holding 256 MiB of touched heap starts `ferry __cli-transfer-reap OUT /bin/sh -c ...`,
/// and the tool's peak RSS comes back far below 256 MiB (forked straight from this
/// process it would start at 256 MiB or more), with the tool's exit status.
#[test]
fn cli_transfer_reaper_reports_the_tools_own_peak_rss() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("reaped");
    let heap: Vec<u8> = vec![7u8; 256 << 20];
    assert_eq!(heap.iter().step_by(4096).map(|&b| b as u64).sum::<u64>(), 7 * (256 << 20) / 4096);
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args([ferry_bench::cli_transfer::REAP_ARG, out.to_str().unwrap(), "/bin/sh", "-c", "exit 3"])
        .status()
        .unwrap();
    assert!(st.success(), "the reaper exits 0 once it has written its line");
    let line = std::fs::read_to_string(&out).unwrap();
    let f: Vec<i64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(f.len(), 4, "{line}");
    let (rss_kib, status) = (f[2], f[3] as i32);
    assert!(rss_kib > 0 && rss_kib < 64 << 10, "peak RSS {rss_kib} KiB: the parent's heap leaked into the figure");
    assert!(libc_exited_with(status, 3), "wait status {status:#x}");
    drop(heap);
    // A tool that cannot be started is the reaper's failure (exit 1), not a figure.
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args([ferry_bench::cli_transfer::REAP_ARG, dir.path().join("none").to_str().unwrap(), "/nonexistent/tool"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(1));
    assert!(!dir.path().join("none").exists());
}

/// WIFEXITED/WEXITSTATUS for a raw wait status (no libc in this crate's dev-dependencies).
fn libc_exited_with(status: i32, code: i32) -> bool {
    status & 0x7f == 0 && (status >> 8) & 0xff == code
}

/// cli-transfer's download ceilings: every repeat of every set has a disk-ceiling and a
/// network-ceiling row (children of this binary, timed through the reaper like a tool),
/// marked `ceiling` in the JSON lines, checked like a copy, and ferry's download row of
/// the same repeat carries its share of each. Only ferry runs (no peers needed). As root
/// the downloads land on the bench's loop-mounted ext4, else in the work directory (said
/// on stderr); the rows are produced either way. No speed is asserted.
#[test]
fn cli_transfer_tiny_download_ceilings_are_rows() {
    use ferry_bench::cli_transfer::{CliTransferParams, FileSet};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = CliTransferParams::new(Size::Quick);
    // The large files span two of the network ceiling's 8 MiB ranges.
    p.sets = vec![
        FileSet { name: "small", files: 30, bytes: 16 << 10 },
        FileSet { name: "large", files: 2, bytes: 9 << 20 },
    ];
    p.repeats = 2;
    p.peers = vec![];
    p.work_dir = dir.path().to_path_buf();
    let outcome = ferry_bench::cli_transfer::run(Size::Quick, &p, &options(&out)).unwrap();
    let fs = outcome.records[0].params["download_fs"].as_str().unwrap().to_owned();
    if fs != "loop-ext4" {
        eprintln!("NOTE: no loop-mounted ext4 here (not root, or no losetup/mount): the ceilings wrote into the work directory");
    }
    // Per set: 2 repeats x (ferry up, ferry down, disk ceiling, network ceiling).
    assert_eq!(
        outcome.records.len(),
        2 * 2 * 4,
        "{:?}",
        outcome.records.iter().map(|r| &r.variant).collect::<Vec<_>>()
    );
    for set in &p.sets {
        let bytes = set.files as f64 * set.bytes as f64;
        for k in 1..=2 {
            let row = |tool: &str, dir: &str| {
                let label = format!("{dir} {} · {tool}", set.label());
                outcome
                    .records
                    .iter()
                    .find(|r| r.variant == label && r.repeat == k)
                    .unwrap_or_else(|| panic!("no row {label} in repeat {k}"))
            };
            let (disk, net, ferry) =
                (row("disk-ceiling", "download"), row("network-ceiling", "download"), row("ferry", "download"));
            for (r, marker) in [(disk, "disk"), (net, "network")] {
                assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
                assert_eq!(r.client.as_ref().unwrap()["ceiling"], marker);
                assert_eq!(
                    (r.figure("bytes"), r.figure("errors"), r.figure("verified_files")),
                    (Some(bytes), Some(0.0), Some(set.files as f64)),
                    "{}",
                    r.variant
                );
                assert!(
                    r.figure("client_cpu_s").is_some()
                        && r.figure("peak_rss_bytes").unwrap() > 0.0
                        && r.figure("settle_s").is_some()
                );
            }
            assert_eq!(disk.figure("requests_sent"), Some(0.0), "the disk ceiling never asks the server");
            let parts = set.files as f64 * set.bytes.div_ceil(8 << 20) as f64;
            assert_eq!(net.figure("requests_GetObject"), Some(parts), "{}", net.variant);
            assert!(net.figure("server_bytes_out").unwrap() >= bytes);
            assert!(ferry.client.as_ref().unwrap().get("ceiling").is_none(), "a tool is no ceiling");
            let (f, d, n) = (
                ferry.figure("bytes_per_s").unwrap(),
                disk.figure("bytes_per_s").unwrap(),
                net.figure("bytes_per_s").unwrap(),
            );
            let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() <= 1e-9 * b.abs().max(1.0));
            assert!(
                close(ferry.figure("share_of_disk_ceiling"), f / d)
                    && close(ferry.figure("share_of_network_ceiling"), f / n)
            );
            assert!(
                close(ferry.figure("share_of_ceiling"), f / d.min(n))
                    && close(disk.figure("disk_over_network_ceiling"), d / n)
            );
            assert!(close(ferry.figure("share_of_serial_ceiling"), f / d + f / n));
            let cpu = |r: &ferry_bench::record::RunRecord| r.figure("client_cpu_s").unwrap();
            if cpu(disk) + cpu(net) > 0.0 {
                assert!(close(ferry.figure("cpu_over_ceilings"), cpu(ferry) / (cpu(disk) + cpu(net))));
            }
            assert!(row("ferry", "upload").figure("share_of_ceiling").is_none(), "uploads have no ceiling");
        }
    }
    let recs = lines(&out);
    assert_eq!(recs.len(), outcome.records.len());
    for r in &recs {
        check_schema(r).unwrap();
    }
    assert_eq!(recs.iter().filter(|r| r["client"]["ceiling"] == "disk").count(), 4);
    assert_eq!(recs.iter().filter(|r| r["client"]["ceiling"] == "network").count(), 4);
    assert!(recs
        .iter()
        .filter(|r| r["mode"] == "ferry" && r["variant"].as_str().unwrap().starts_with("download"))
        .all(|r| r["figures"]["share_of_ceiling"].is_number()));
    assert!(outcome.report.contains("| download 2 x 9 MiB · disk-ceiling |"), "{}", outcome.report);
    assert!(outcome.report.contains("- download 30 x 16 KiB, its ceilings in the same repeats"), "{}", outcome.report);
    assert!(
        outcome.report.contains("each tool's MB/s over the lower of its repeat's two: ferry "),
        "{}",
        outcome.report
    );
}
