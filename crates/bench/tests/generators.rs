//! The lab's own correctness, without a server: workload generators (sizes, seeded
//! distributions, key layouts), the percentile math behind every quoted figure, the JSON
//! record schema including `series`, and the report's rows for strategies not yet in the
//! engine. No speed is asserted anywhere.

use ferry_bench::measure::{cdf, log_uniform_sizes, percentile_curve};
use ferry_bench::record::{check_schema, RunContext, RunRecord};
use ferry_bench::stats::{percentile_nearest_rank, percentiles, Spread};
use ferry_bench::sys::Machine;
use ferry_bench::workload::Size;
use ferry_bench::{commit, listing, mixed_hol, open_ahead, ttfb, vectored};
use serde_json::json;

#[test]
fn listing_layout_is_17520_dirs_of_6() {
    let p = listing::ListingParams::new(Size::Full);
    let keys = listing::listing_keys(p.dirs, p.files_per_dir);
    assert_eq!((p.dirs, p.files_per_dir, keys.len()), (17_520, 6, 105_120));
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "listing order");
    for d in [0usize, 1, 9_999, 17_519] {
        let dir = format!("listing/part={d:05}/");
        assert_eq!(keys.iter().filter(|k| k.starts_with(&dir)).count(), 6, "{dir}");
    }
    assert!(listing::ListingParams::new(Size::Quick).dirs < p.dirs);
}

#[test]
fn mixed_hol_smalls_are_seeded_log_uniform_within_bounds() {
    let p = mixed_hol::MixedHolParams::new(Size::Full);
    let sizes = log_uniform_sizes(p.smalls, p.small_min, p.small_max, p.seed);
    assert_eq!(sizes.len(), 2_000);
    assert!(sizes.iter().all(|s| (4 << 10..=1 << 20).contains(s)));
    assert_eq!(sizes, log_uniform_sizes(p.smalls, p.small_min, p.small_max, p.seed));
    // The median of a log-uniform sample is near the geometric mean of its bounds (64 KiB).
    let mut v: Vec<f64> = sizes.iter().map(|s| *s as f64).collect();
    let med = percentiles(&mut v, &[50.0])[0].unwrap();
    assert!((40_000.0..100_000.0).contains(&med), "median {med}");
    // The larges are keys of the synthetic bucket naming their size.
    let w = mixed_hol::mixed_hol(Size::Full, &p);
    let Some(r) = w.variants[0].task.step::<mixed_hol::MixedHolRun>() else {
        panic!("mixed-hol rows run the mixed-hol step")
    };
    assert_eq!(r.larges.len(), 8);
    assert!(r.larges.iter().all(|k| k.contains(&format!("size={}", 256u64 << 20))));
    assert_eq!(w.params["small_bytes_total"], sizes.iter().sum::<u64>());
}

#[test]
fn vectored_commit_open_ahead_ttfb_sizes() {
    let v = vectored::VectoredParams::new(Size::Full);
    let r = vectored::ranges(v.ranges, v.range_min, v.range_max, v.object_bytes, v.seed);
    assert_eq!(r.len(), 2_000);
    assert!(r.iter().all(|(o, l)| (4096..=65536).contains(l) && o + l <= 256 << 20));
    assert!(r.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));

    let c = commit::CommitParams::new(Size::Full);
    assert_eq!((c.files, c.file_bytes, c.deletes), (500, 4 << 20, 5_000));
    assert_eq!(commit::delete_keys(c.deletes, c.prefixes).len(), 5_000);

    let o = open_ahead::OpenAheadParams::new(Size::Full);
    assert_eq!((o.objects, o.object_bytes), (80_000, 655_360));

    let t = ttfb::TtfbParams::new(Size::Full);
    assert_eq!((t.probes, t.transfers), (1_000, 100));
    assert_eq!(ttfb::SIZES.len(), 5);
    assert_eq!((t.sizes.len(), t.put_sizes.len()), (5, 5), "full: every size, both ways");
}

#[test]
fn percentile_math() {
    let v: Vec<f64> = (1..=1000).map(f64::from).collect();
    assert_eq!(percentile_nearest_rank(&v, 50.0), Some(500.0));
    assert_eq!(percentile_nearest_rank(&v, 99.0), Some(990.0));
    assert_eq!(percentile_nearest_rank(&v, 99.9), Some(999.0));
    assert_eq!(percentile_nearest_rank(&v, 100.0), Some(1000.0));
    let curve = percentile_curve(&v);
    assert_eq!(curve.len(), 1001);
    assert_eq!(curve[0], [0.0, 1.0]);
    assert_eq!(curve[500], [50.0, 500.0]);
    assert!(curve.windows(2).all(|w| w[0][0] <= w[1][0] && w[0][1] <= w[1][1]), "monotone");
    let c = cdf(&v);
    assert_eq!(c[999], [1000.0, 1.0]);
    assert_eq!(c[499], [500.0, 0.5]);
    assert_eq!(Spread::of(&[3.0, 1.0, 2.0]).unwrap().median, 2.0);
}

fn ctx() -> RunContext {
    RunContext {
        bench: "ttfb-throughput".into(),
        run_id: "1-1".into(),
        git_sha: None,
        git_dirty: None,
        machine: Machine { nproc: 2, kernel: "k".into() },
    }
}

#[test]
fn schema_with_series() {
    let mut r = RunRecord {
        workload: "ttfb-throughput".into(),
        variant: "s3 · first byte".into(),
        repeat: 1,
        repeats: 1,
        status: "ok".into(),
        ..RunRecord::default()
    };
    let v = r.to_json(&ctx());
    assert!(v.get("series").is_none(), "series is optional, absent when empty");
    check_schema(&v).unwrap();

    r.set_series("ttfb_s", percentile_curve(&[0.02, 0.03, 0.05]));
    r.set_series("bad_points_dropped", vec![[0.0, f64::NAN], [1.0, 2.0]]);
    let v = r.to_json(&ctx());
    check_schema(&v).unwrap();
    assert_eq!(v["series"]["ttfb_s"], json!([[0.0, 0.02], [100.0 / 3.0, 0.02], [200.0 / 3.0, 0.03], [100.0, 0.05]]));
    assert_eq!(v["series"]["bad_points_dropped"], json!([[1.0, 2.0]]));
    check_schema(&serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap()).unwrap();

    let mut bad = v.clone();
    bad["series"]["ttfb_s"] = json!([[1.0, 2.0, 3.0]]);
    assert!(check_schema(&bad).unwrap_err().contains("ttfb_s"));
    bad["series"]["ttfb_s"] = json!([[2.0, 1.0], [1.0, 1.0]]);
    assert!(check_schema(&bad).unwrap_err().contains("x goes down"));
    bad["series"] = json!([1, 2]);
    assert!(check_schema(&bad).is_err());
}

#[test]
fn report_shows_a_not_yet_row_and_the_headline() {
    let w = vectored::vectored(Size::Quick, &vectored::VectoredParams::new(Size::Quick));
    let rec = |variant: &str, gets: f64, over: f64, wall: f64| {
        let mut r = RunRecord {
            workload: "vectored".into(),
            variant: variant.into(),
            repeat: 1,
            repeats: 1,
            status: "ok".into(),
            ..RunRecord::default()
        };
        r.set("gets_issued", gets);
        r.set("bytes_over_read", over);
        r.set("wall_s", wall);
        r
    };
    // A row whose strategy is missing still renders as a gap, not as a failed run.
    let gap = RunRecord {
        workload: "vectored".into(),
        variant: "some strategy".into(),
        repeat: 1,
        repeats: 1,
        status: "not-implemented".into(),
        note: Some("not yet in the engine".into()),
        ..RunRecord::default()
    };
    let report = ferry_bench::report::render(
        &w,
        &[rec(vectored::NAIVE_ROW, 2000.0, 0.0, 2.5), rec(vectored::COALESCED_ROW, 40.0, 3.0 * 1048576.0, 0.5), gap],
        &ctx(),
    );
    assert!(report.contains(&format!("| {} | 2000 |", vectored::NAIVE_ROW)), "{report}");
    assert!(report.contains(&format!("| {} | 40 |", vectored::COALESCED_ROW)), "{report}");
    assert!(report.contains("2000 GETs -> 40"), "{report}");
    assert!(report.contains("none published: fewer GETs and faster"), "{report}");
    assert!(!report.contains("not clean"), "a not-yet row is not a failed run: {report}");
}

#[test]
fn suite_lists_every_workload_once() {
    let names: Vec<&str> = ferry_bench::suite::suite().map(|w| w.name).collect();
    assert_eq!(
        names,
        [
            "small-objects",
            "mixed-hol",
            "ttfb-throughput",
            "listing",
            "open-ahead",
            "commit",
            "vectored",
            "bulk-wan",
            "parquet-scan"
        ]
    );
    for n in names {
        assert_ne!(ferry_bench::claims::headline(n, &[]).published, "-", "{n} has a headline (its claim function)");
    }
}
