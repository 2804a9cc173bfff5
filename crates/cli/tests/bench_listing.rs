//! End-to-end run of `ferry bench listing` at a tiny size (20 directories) against a real
//! `ferry serve --profile s3` subprocess of the binary under test. Checks only the shape
//! of the results: all three strategies (per-directory, the engine's flat + merge join and
//! key-range parallel, and per-directory again on each HTTP/1.1 transport) listed every key exactly once, and the calls were counted. No speed
//! is asserted.

use ferry_bench::listing::{self, mode_row_label, ListingParams, KEY_RANGE_ROW};
use ferry_bench::record::check_schema;
use ferry_bench::workload::Size;
use ferry_bench::workload::{mode_name, MODE_ROWS};
use ferry_bench::{RunOptions, ServerCommand};
use std::time::Duration;

#[test]
fn listing_tiny_every_strategy_lists_every_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut o = RunOptions::new(ServerCommand::ferry(env!("CARGO_BIN_EXE_ferry")));
    o.out = Some(out.clone());
    o.progress = false;
    o.run_timeout = Duration::from_secs(60);
    o.server_lifetime = Duration::from_secs(300);
    let mut p = ListingParams::new(Size::Quick);
    p.dirs = 20;
    p.repeats = 1;
    p.per_dir_concurrency = 4;
    p.page_size = 7; // several pages for 120 keys, so the merge join crosses page edges
    let outcome = listing::run(Size::Quick, &p, &o).unwrap();
    assert_eq!(outcome.records.len(), 6, "per-directory, flat, key-range parallel, per-directory on 3 transports");

    let per_dir = outcome.records.iter().find(|r| r.variant == p.per_dir_label()).unwrap();
    let flat = outcome.records.iter().find(|r| r.variant == p.flat_label()).unwrap();
    let key_range = outcome.records.iter().find(|r| r.variant == KEY_RANGE_ROW).unwrap();
    let on_modes: Vec<_> = MODE_ROWS
        .into_iter()
        .map(|m| {
            let name = mode_name(m);
            let r = outcome.records.iter().find(|r| r.variant == mode_row_label(name)).unwrap();
            assert_eq!(r.client.as_ref().unwrap()["mode"], name, "{}", r.variant);
            assert_eq!(r.figure("list_calls"), Some(20.0), "{}: one LIST per directory", r.variant);
            r
        })
        .collect();
    for r in [per_dir, flat, key_range].into_iter().chain(on_modes.iter().copied()) {
        assert_eq!(r.status, "ok", "{}: {:?}", r.variant, r.error_samples);
        assert_eq!(r.figure("keys_kept"), Some(120.0), "{}", r.variant);
        assert_eq!(r.figure("keys_seen"), Some(120.0), "{}", r.variant);
        assert_eq!(r.figure("keys_missing"), Some(0.0), "{}", r.variant);
        assert_eq!(r.figure("keys_duplicated"), Some(0.0), "{}", r.variant);
        assert_eq!(r.figure("errors"), Some(0.0), "{}", r.variant);
        assert_eq!(r.figure("list_calls"), r.figure("requests_sent"), "{}: calls counted = requests sent", r.variant);
        assert!(r.figure("wall_s").is_some() && r.figure("client_cpu_s").is_some());
    }
    assert_eq!(per_dir.figure("list_calls"), Some(20.0));
    assert_eq!(flat.figure("list_calls"), Some(120f64.div_euclid(7.0) + 1.0)); // 18 pages of <= 7
    assert!(key_range.figure("list_calls").unwrap() >= 1.0);

    let recs: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(recs.len(), 6);
    for r in &recs {
        check_schema(r).unwrap();
        assert_eq!(r["bench"], "listing");
        assert_eq!(r["profile"], "s3");
        assert_eq!(r["params"]["dirs"], 20);
        assert_eq!(r["params"]["link"], "none");
    }
    for l in
        std::iter::once(KEY_RANGE_ROW.to_string()).chain(MODE_ROWS.into_iter().map(|m| mode_row_label(mode_name(m))))
    {
        assert!(outcome.report.contains(&format!("| {l} |")), "{}", outcome.report);
    }
    // auto's row is set beside the forced ones in the claims line.
    let claim = ferry_bench::claims::headline("listing", &outcome.records);
    assert!(claim.measured.contains(&format!("{} ", mode_row_label("auto"))), "{}", claim.measured);
    assert!(outcome.report.contains("published: 17,520 calls -> 106, 8x faster (Qubole)"), "{}", outcome.report);
}
