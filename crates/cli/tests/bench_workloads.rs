//! End-to-end tiny runs of the newer `ferry bench` workloads (mixed-hol, vectored, commit,
//! ttfb-throughput, open-ahead) through the one runner, against real `ferry serve`
//! subprocesses of the binary under test (CARGO_BIN_EXE_ferry), as tests/bench.rs does for
//! small-objects and bulk-get. Only the shape of the results is checked (every row ran
//! cleanly, counts add up, curves are present, records pass the schema); no speed is
//! asserted.

use ferry_bench::record::check_schema;
use ferry_bench::workload::Size;
use ferry_bench::{commit, mixed_hol, open_ahead, ttfb, vectored, Outcome, RunOptions, ServerCommand};
use std::path::Path;
use std::time::Duration;

fn options(out: &Path) -> RunOptions {
    let mut o = RunOptions::new(ServerCommand::ferry(env!("CARGO_BIN_EXE_ferry")));
    o.out = Some(out.to_path_buf());
    o.progress = false;
    o.run_timeout = Duration::from_secs(60);
    o.server_lifetime = Duration::from_secs(300);
    o
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Every record is clean, and every JSON line passes the schema.
fn check_clean(outcome: &Outcome, out: &Path) -> Vec<serde_json::Value> {
    for r in &outcome.records {
        assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
        assert_eq!(r.figure("errors"), Some(0.0), "{}", r.variant);
    }
    let recs = lines(out);
    assert_eq!(recs.len(), outcome.records.len());
    for r in &recs {
        check_schema(r).unwrap();
    }
    recs
}

#[test]
fn mixed_hol_tiny_loaded_and_unloaded_per_client() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut p = mixed_hol::MixedHolParams::new(Size::Quick);
    p.larges = 2;
    p.large_bytes = 2 << 20;
    p.part_bytes = 1 << 20;
    p.large_in_flight = 6; // more than the 4 connections
    p.smalls = 40;
    p.small_rate = 200.0;
    p.small_max = 64 << 10;
    p.connections = 4;
    p.pipeline_depth = 4;
    p.load_warmup = Duration::from_millis(50);
    p.repeats = 1;
    // The extra row --quick leaves out, run here so it stays tested.
    p.small_pool_row = true;
    let w = mixed_hol::mixed_hol(Size::Quick, &p);
    let outcome = ferry_bench::run(&w, &options(&out)).unwrap();
    let recs = check_clean(&outcome, &out);
    // The clients and the extra small-pool row (mixed_hol::SMALL_POOL), each loaded and unloaded.
    assert_eq!(outcome.records.len(), (mixed_hol::CLIENTS.len() + 1) * 2);
    for r in &outcome.records {
        assert_eq!(r.figure("smalls"), Some(40.0), "{}", r.variant);
        assert!(r.figure("small_latency_p99_ms").is_some() && r.figure("connections_opened").unwrap() >= 1.0);
        let loaded = r.params["phase"] == "loaded";
        assert_eq!(r.variant.ends_with("loaded") && !r.variant.ends_with("unloaded"), loaded);
        assert_eq!(r.params["small_size_hint"], r.mode == "auto", "{}", r.variant);
        // The load ran beside the smalls (parts completed), and only when loaded.
        assert_eq!(r.figure("large_parts_done").is_some_and(|n| n >= 1.0), loaded, "{}", r.variant);
        assert_eq!(r.figure("large_bytes_per_s").is_some(), loaded);
        let cdf = &r.series["small_latency_s"];
        assert_eq!(cdf.len(), 40);
        assert_eq!(cdf.last().unwrap()[1], 1.0);
    }
    assert!(recs.iter().all(|r| r["series"]["small_latency_s"].as_array().unwrap().len() == 40));
    assert!(outcome.report.contains("| h1-pool · loaded |"), "{}", outcome.report);
    assert!(outcome.report.contains("published: 15x"), "{}", outcome.report);
}

#[test]
fn vectored_commit_open_ahead_tiny() {
    let dir = tempfile::tempdir().unwrap();

    let out = dir.path().join("v.jsonl");
    let mut v = vectored::VectoredParams::new(Size::Quick);
    v.ranges = 30;
    v.object_bytes = 8 << 20;
    v.repeats = 1;
    let o = ferry_bench::run(&vectored::vectored(Size::Quick, &v), &options(&out)).unwrap();
    check_clean(&o, &out);
    let naive = o.records.iter().find(|r| r.variant == vectored::NAIVE_ROW).unwrap();
    assert_eq!(naive.figure("gets_issued"), Some(30.0));
    assert_eq!(naive.figure("bytes_received"), naive.figure("bytes_requested"));
    assert_eq!(naive.figure("bytes_over_read"), Some(0.0));
    let co = o.records.iter().find(|r| r.variant == vectored::COALESCED_ROW).unwrap();
    let gets = co.figure("gets_issued").unwrap();
    assert!((1.0..=30.0).contains(&gets), "coalescing never issues more GETs than ranges: {gets}");
    assert_eq!(co.figure("requests_sent"), Some(gets), "the transport saw exactly the spans");
    assert_eq!(
        co.figure("bytes_received"),
        Some(co.figure("bytes_requested").unwrap() + co.figure("bytes_over_read").unwrap())
    );

    let out = dir.path().join("c.jsonl");
    let mut c = commit::CommitParams::new(Size::Quick);
    c.files = 6;
    c.file_bytes = 256 << 10;
    c.deletes = 1_200;
    c.repeats = 2; // the second run re-creates what the first deleted
    let o = ferry_bench::run(&commit::commit(Size::Quick, &c), &options(&out)).unwrap();
    check_clean(&o, &out);
    assert_eq!(o.records.len(), 8, "naive and engine rows (the engine's on 3 transports), two repeats");
    for r in &o.records {
        assert_eq!((r.figure("requests_get"), r.figure("requests_put")), (Some(6.0), Some(6.0)));
        assert_eq!(r.figure("requests_delete_objects"), Some(2.0), "1,200 keys are two batches");
        assert_eq!(r.figure("objects_deleted"), Some(1_200.0));
        assert_eq!(r.figure("requests_sent"), Some(6.0 + 6.0 + 2.0), "the transport saw exactly those requests");
    }

    let out = dir.path().join("o.jsonl");
    let mut p = open_ahead::OpenAheadParams::new(Size::Quick);
    p.objects = 5;
    p.repeats = 1;
    let o = ferry_bench::run(&open_ahead::open_ahead(Size::Quick, &p), &options(&out)).unwrap();
    check_clean(&o, &out);
    for row in [open_ahead::NAIVE_ROW, open_ahead::OPEN_AHEAD_ROW, open_ahead::FIXED_ROW, open_ahead::BOUND_ROW] {
        let r = o.records.iter().find(|r| r.variant == row).unwrap();
        assert_eq!((r.figure("objects"), r.figure("bytes")), (Some(5.0), Some(5.0 * 655_360.0)), "{row}");
        assert_eq!(r.figure("requests_sent"), Some(5.0), "{row}: one GET per object");
    }
    let window = |row: &str| o.records.iter().find(|r| r.variant == row).and_then(|r| r.figure("window"));
    assert_eq!(window(open_ahead::FIXED_ROW), Some(8.0));
    assert!(
        window(open_ahead::OPEN_AHEAD_ROW).is_some_and(|w| (8.0..=32.0).contains(&w)),
        "{:?}",
        window(open_ahead::OPEN_AHEAD_ROW)
    );
    assert!(o.report.contains("less scan time"), "{}", o.report);
    assert!(o.report.contains("open-ahead / bandwidth bound (no first byte)"), "{}", o.report);
}

#[test]
fn ttfb_throughput_tiny_writes_curves() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.jsonl");
    let p = ttfb::TtfbParams {
        probes: 3,
        sizes: ttfb::SIZES.to_vec(),
        put_sizes: ttfb::SIZES.to_vec(),
        transfers: 2,
        in_flight: 2,
        repeats: 1,
        peers: Vec::new(),
    };
    let o = ferry_bench::run(&ttfb::ttfb_throughput(Size::Quick, &p), &options(&out)).unwrap();
    let recs = check_clean(&o, &out);
    assert_eq!(recs.len(), 3 * 11);
    for r in &recs {
        let series = r["series"].as_object().unwrap();
        if r["params"]["op"] == "first-byte" {
            assert_eq!(series["ttfb_s"].as_array().unwrap().len(), 3 + 1);
        } else {
            assert!(r["params"]["op"] == "get" || r["params"]["op"] == "put");
            assert!(r["params"]["object_size"].as_u64().unwrap() >= 16 << 10);
            assert_eq!(series["throughput_Bps"].as_array().unwrap().len(), 2 + 1);
        }
    }
    assert_eq!(recs.iter().filter(|r| r["profile"] == "gcs").count(), 11);
}

/// The peer rows of commit (clean only) and listing, when scripts/bench-setup.sh has
/// installed the peers (its .ferry-run/peers.json, or FERRY_PEERS_JSON); it fails
/// without them. Only the shape is checked: each peer row ran cleanly and did the work.
#[test]
#[ignore = "needs the bench peers boto3, s5cmd and rclone (scripts/bench-setup.sh; scripts/test.sh runs it)"]
fn commit_and_listing_peer_rows_when_installed() {
    use ferry_bench::peers::Peer;
    require_peers(&[Peer::Boto3, Peer::S5cmd, Peer::Rclone]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.jsonl");
    let mut c = commit::CommitParams::new(Size::Quick);
    c.files = 2;
    c.file_bytes = 64 << 10;
    c.deletes = 30;
    c.repeats = 1;
    c.peers = vec![Peer::Boto3, Peer::S5cmd];
    let o = ferry_bench::run(&commit::commit(Size::Quick, &c), &options(&out)).unwrap();
    // naive, engine on 3 transports, two clean rows and boto3's commit row.
    assert_eq!(o.records.len(), 7);
    for p in ["boto3", "s5cmd"] {
        let r = o.records.iter().find(|r| r.variant == format!("{p} {}", commit::PEER_SUFFIX)).unwrap();
        assert_eq!(r.status, "ok", "{p}: {:?}", r.error_samples);
        assert_eq!(r.figure("objects"), Some(30.0), "{p} deleted every key");
        assert!(r.figure("setup_put_s").is_some(), "{p}: the keys were put back first");
    }
    // s5cmd's wildcard rm sends DeleteObjects batches (one here), not a DELETE per key.
    let s5 = o.records.iter().find(|r| r.variant == format!("s5cmd {}", commit::PEER_SUFFIX)).unwrap();
    assert_eq!(s5.figure("requests_DeleteObject"), None, "{:?}", s5.figures);
    assert!(s5.figure("requests_DeleteObjects").unwrap() >= 1.0, "{:?}", s5.figures);
    let rw = o.records.iter().find(|r| r.variant == format!("boto3 {}", commit::REWRITE_SUFFIX)).unwrap();
    assert_eq!(rw.status, "ok", "{:?}", rw.error_samples);
    assert_eq!(
        (rw.figure("objects"), rw.figure("requests_get"), rw.figure("requests_put")),
        (Some(2.0), Some(2.0), Some(2.0))
    );

    let out = dir.path().join("l.jsonl");
    let mut p = ferry_bench::listing::ListingParams::new(Size::Quick);
    p.dirs = 5;
    p.repeats = 1;
    p.peers = vec![Peer::S5cmd, Peer::Rclone];
    let o = ferry_bench::listing::run(Size::Quick, &p, &options(&out)).unwrap();
    assert_eq!(o.records.len(), 8, "3 strategies, per-directory on 3 transports, 2 peers");
    for peer in [Peer::S5cmd, Peer::Rclone] {
        let r = o.records.iter().find(|r| r.variant == ferry_bench::listing::peer_label(peer)).unwrap();
        assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
        assert_eq!(r.figure("keys_seen"), Some(30.0), "{}", r.variant);
        assert!(r.figure("list_calls").unwrap() >= 1.0, "{}", r.variant);
    }
}

/// The peer rows of mixed-hol, ttfb-throughput, open-ahead and vectored, when
/// scripts/bench-setup.sh has installed the peers; it fails without them. Only the
/// shape is checked: each row ran cleanly, did the work, and carries the workload's
/// figures under the names of its ferry rows.
#[test]
#[ignore = "needs the bench peers boto3, awscrt, obstore and s3fs (scripts/bench-setup.sh; scripts/test.sh runs it)"]
fn peer_rows_of_the_newer_workloads_when_installed() {
    use ferry_bench::peers::Peer;
    let want = [Peer::Boto3, Peer::Awscrt, Peer::Obstore, Peer::S3fs];
    require_peers(&want);
    let dir = tempfile::tempdir().unwrap();
    let peer_records = |o: &Outcome| -> Vec<ferry_bench::RunRecord> {
        o.records.iter().filter(|r| want.iter().any(|p| r.mode == p.name())).cloned().collect()
    };

    let out = dir.path().join("m.jsonl");
    let mut p = mixed_hol::MixedHolParams::new(Size::Quick);
    (p.larges, p.large_bytes, p.part_bytes, p.large_in_flight) = (2, 2 << 20, 1 << 20, 6);
    (p.smalls, p.small_rate, p.small_max, p.connections, p.pipeline_depth) = (20, 200.0, 64 << 10, 4, 4);
    p.load_warmup = Duration::from_millis(50);
    p.repeats = 1;
    p.peers = vec![Peer::Boto3, Peer::Awscrt, Peer::Obstore];
    let o = ferry_bench::run(&mixed_hol::mixed_hol(Size::Quick, &p), &options(&out)).unwrap();
    check_clean(&o, &out);
    let rs = peer_records(&o);
    assert_eq!(rs.len(), 6, "three peers, unloaded and loaded");
    for r in &rs {
        assert_eq!(r.figure("smalls"), Some(20.0), "{}", r.variant);
        assert_eq!(r.series["small_latency_s"].len(), 20, "{}", r.variant);
        let loaded = r.variant.ends_with("· loaded");
        assert_eq!(r.figure("large_parts_done").is_some_and(|n| n >= 1.0), loaded, "{}", r.variant);
    }

    let out = dir.path().join("t.jsonl");
    let mut t = ttfb::TtfbParams::new(Size::Quick);
    (t.probes, t.transfers, t.repeats) = (3, 2, 1);
    t.peers = vec![Peer::Obstore];
    let o = ferry_bench::run(&ttfb::ttfb_throughput(Size::Quick, &t), &options(&out)).unwrap();
    check_clean(&o, &out);
    let rs = peer_records(&o);
    assert_eq!(rs.len(), 1 + t.sizes.len() + t.put_sizes.len());
    let probe = rs.iter().find(|r| r.variant == "s3 · first byte · obstore").unwrap();
    assert_eq!(probe.series["ttfb_s"].len(), 3 + 1);
    assert!(rs
        .iter()
        .filter(|r| r.params["op"] == "get" || r.params["op"] == "put")
        .all(|r| r.series["throughput_Bps"].len() == 2 + 1));

    let out = dir.path().join("o.jsonl");
    let mut a = open_ahead::OpenAheadParams::new(Size::Quick);
    (a.objects, a.repeats) = (4, 1);
    a.peers = vec![Peer::Boto3, Peer::S3fs];
    let o = ferry_bench::run(&open_ahead::open_ahead(Size::Quick, &a), &options(&out)).unwrap();
    check_clean(&o, &out);
    for r in peer_records(&o) {
        assert_eq!((r.figure("objects"), r.figure("bytes")), (Some(4.0), Some(4.0 * 655_360.0)), "{}", r.variant);
        assert!(r.figure("object_p50_ms").is_some(), "{}", r.variant);
        assert_eq!(r.figure("open_p50_ms").is_some(), r.mode == "boto3", "{}: s3fs's open sends no GET", r.variant);
    }

    let out = dir.path().join("v.jsonl");
    let mut v = vectored::VectoredParams::new(Size::Quick);
    (v.ranges, v.object_bytes, v.repeats) = (30, 8 << 20, 1);
    v.peers = vec![Peer::Boto3, Peer::Obstore, Peer::S3fs];
    let o = ferry_bench::run(&vectored::vectored(Size::Quick, &v), &options(&out)).unwrap();
    check_clean(&o, &out);
    let rs = peer_records(&o);
    assert_eq!(rs.len(), 3);
    for r in &rs {
        assert_eq!(r.figure("objects"), Some(30.0), "{}: every range arrived", r.variant);
        assert_eq!(r.figure("bytes"), r.figure("bytes_requested"), "{}", r.variant);
        let gets = r.figure("gets_issued").unwrap();
        if r.mode == "obstore" {
            assert!(gets < 30.0, "{} coalesces: {gets} GETs", r.variant);
        } else {
            // boto3 has no vectored read; s3fs's cat_ranges merges only when given max_gap.
            assert_eq!(gets, 30.0, "{}: one GET per range", r.variant);
        }
    }
}

/// Fails the test unless every peer in `peers` is installed (scripts/bench-setup.sh's
/// .ferry-run/peers.json, or FERRY_PEERS_JSON).
#[track_caller]
fn require_peers(peers: &[ferry_bench::peers::Peer]) {
    use ferry_bench::peers::{available, peers_json_path};
    assert!(
        peers_json_path().is_some(),
        "this test needs the bench peers: no peers.json (run scripts/bench-setup.sh or set FERRY_PEERS_JSON)"
    );
    for p in peers {
        if let Err(why) = available(*p) {
            panic!("this test needs the bench peer {}: {why} (run scripts/bench-setup.sh)", p.name());
        }
    }
}
