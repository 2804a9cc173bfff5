//! The claims table of `ferry bench all`: per workload, the published headline, what this
//! run measured, and whether it reproduces the headline in direction and size.
//!
//! Each workload's file holds its published figure and how its records are read (its
//! `claim` function, registered with it in suite.rs); this module only looks the workload
//! up and lays the rows out. The verdict words and the pairing by repeat are verdict.rs's;
//! [`RULE`] is printed under the table.

use crate::record::RunRecord;

pub const RULE: &str = "reproduced: \"yes\" = published direction and size within 2x of the published figure; \"direction only\" = right direction, size further off; \"no\" = wrong direction or under 10%; \"none published\" = no published size, the engine row's direction against naive is stated; \"baseline only\" = a share of the ceiling, no strategy compared";

pub use crate::verdict::Headline;

/// The claims-table row of the workload `name`: its own `claim` function reads the records
/// (each workload file holds its published figure and how it is read).
pub fn headline(name: &str, records: &[RunRecord]) -> Headline {
    match crate::suite::find(name) {
        Some(w) => (w.claim)(records),
        None => Headline::new(name, "-", "no such workload (suite.rs)".into(), "-"),
    }
}

/// The Markdown claims table.
pub fn table(rows: &[Headline]) -> String {
    let mut s = String::from(
        "| workload | published headline | measured | reproduced in direction and size? |\n|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.workload,
            r.published,
            r.measured.replace('|', "/"),
            r.verdict
        ));
    }
    s.push_str(&format!("\n{RULE}\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::paired_ratio;

    fn rec(variant: &str, repeat: usize, figure: &str, v: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set(figure, v);
        r
    }

    #[test]
    fn paired_by_repeat() {
        let rs = vec![
            rec("a", 1, "f", 10.0),
            rec("b", 1, "f", 5.0),
            rec("a", 2, "f", 9.0),
            rec("b", 2, "f", 3.0),
            rec("a", 3, "f", 8.0), // no b in repeat 3: unpaired
        ];
        let s = paired_ratio(&rs, "a", "b", "f").unwrap();
        assert_eq!((s.n, s.min, s.max, s.median), (2, 2.0, 3.0, 2.5));
        let h = headline(
            "small-objects",
            &[rec("h1-pipeline", 1, "objects_per_s", 135.0), rec("h1-pool", 1, "objects_per_s", 100.0)],
        );
        assert_eq!(h.verdict, "yes");
        assert!(h.measured.contains("+35%"), "{}", h.measured);
        assert_eq!(headline("small-objects", &[]).verdict, "no");
        assert!(table(&[h]).contains("| small-objects |"));
    }

    #[test]
    fn commit_whole_run_is_the_clean_saving_not_the_commit_noise() {
        use crate::commit::{NAIVE_ROW, PARALLEL_ROW};
        let mut rs = Vec::new();
        // Same clean saving (0.2 s of a 1 s naive run) each repeat; repeat 2's naive commit
        // was slow by 1 s, which a whole-run ratio would credit to the engine.
        for (k, extra) in [(1, 0.0), (2, 1.0), (3, 0.0)] {
            let mut a = rec(NAIVE_ROW, k, "clean_s", 0.25);
            a.set("wall_s", 1.0 + extra);
            let mut b = rec(PARALLEL_ROW, k, "clean_s", 0.05);
            b.set("wall_s", 0.8);
            rs.extend([a, b]);
        }
        let h = headline("commit", &rs);
        assert!(h.measured.contains("the clean's saving is 20% (10-20) of the naive run"), "{}", h.measured);
        assert!(h.measured.contains("5.0x (5.0-5.0) faster"), "{}", h.measured);
    }

    #[test]
    fn bulk_wan_shares_are_paired_by_repeat_at_the_top_point() {
        let mut rs = Vec::new();
        // iperf3 1000 then 500 MB/s; h1-pool 600 then 400; h2 300 then 300.
        for (k, i3, h1, h2) in [(1, 1000e6, 600e6, 300e6), (2, 500e6, 400e6, 300e6)] {
            for (variant, mode, v) in [("iperf3 -P 16", "iperf3", i3), ("h1-pool", "h1-pool", h1), ("h2", "h2", h2)] {
                let mut r = rec(variant, k, "bytes_per_s", v);
                r.mode = mode.into();
                r.params.insert("concurrency".into(), serde_json::json!(16));
                r.params.insert("link".into(), serde_json::json!("transatlantic"));
                rs.push(r);
            }
        }
        let h = headline("bulk-wan", &rs);
        assert_eq!(h.verdict, "baseline only");
        // Paired: 60% and 80% (median 70%), not 500 / 750 of the medians (67%).
        assert!(h.measured.contains("h1-pool 70% (60-80)"), "{}", h.measured);
        assert!(h.measured.contains("h2 45% (30-60)"), "{}", h.measured);
        assert!(h.measured.contains("h2 / h1-pool 0.62x (0.50-0.75)"), "{}", h.measured);
        assert!(h.measured.contains("at 16 streams") && h.measured.contains("link transatlantic"), "{}", h.measured);
        assert!(!h.measured.contains("iperf3 under a ferry row"), "{}", h.measured);
        assert_eq!(headline("bulk-wan", &[]).verdict, "baseline only");
        // Repeat 2's iperf3 below h1-pool: said, with the count.
        let i3 = rs.iter_mut().find(|r| r.variant == "iperf3 -P 16" && r.repeat == 2).unwrap();
        i3.set("bytes_per_s", 350e6);
        let h = headline("bulk-wan", &rs);
        assert!(h.measured.contains("iperf3 under a ferry row in 1 of 2 repeats"), "{}", h.measured);
        // iperf3 run once (quick): every repeat's rows held against that one run.
        rs.retain(|r| !(r.variant == "iperf3 -P 16" && r.repeat == 2));
        for r in rs.iter_mut() {
            r.repeats = 2;
        }
        let h = headline("bulk-wan", &rs);
        // h1-pool 600 and 400 over 1000: 60% and 40%; h2 300 twice: 30%.
        assert!(h.measured.contains("h1-pool 50% (40-60)"), "{}", h.measured);
        assert!(h.measured.contains("h2 30% (30-30)"), "{}", h.measured);
        assert!(
            h.measured.contains("(run once, the first repeat; every repeat held against it) (1000 MB/s"),
            "{}",
            h.measured
        );
        assert!(!h.measured.contains("iperf3 under a ferry row"), "{}", h.measured);
    }

    #[test]
    fn open_ahead_is_held_against_its_bandwidth_bound_by_repeat() {
        use crate::open_ahead::{BOUND_ROW, FIXED_ROW, NAIVE_ROW, OPEN_AHEAD_ROW};
        let mut rs = Vec::new();
        // open-ahead / bound by repeat: 1.10, 1.05, 1.02.
        for (k, naive, ahead, bound) in [(1, 2.2, 0.55, 0.50), (2, 2.4, 0.63, 0.60), (3, 2.3, 0.51, 0.50)] {
            rs.push(rec(NAIVE_ROW, k, "wall_s", naive));
            rs.push(rec(OPEN_AHEAD_ROW, k, "wall_s", ahead));
            rs.push(rec(BOUND_ROW, k, "wall_s", bound));
        }
        let h = headline("open-ahead", &rs);
        assert!(h.measured.contains("open-ahead / bandwidth bound (no first byte) 1.05 (1.02-1.10)"), "{}", h.measured);
        assert!(!h.measured.contains("window fixed"), "{}", h.measured);
        // The fixed window's row, paired with the bound the same way: 1.30, 1.25, 1.20.
        for (k, fixed) in [(1, 0.65), (2, 0.75), (3, 0.60)] {
            rs.push(rec(FIXED_ROW, k, "wall_s", fixed));
        }
        let h = headline("open-ahead", &rs);
        assert!(h.measured.contains("open-ahead / bandwidth bound (no first byte) 1.05 (1.02-1.10), with the window fixed at 8 1.25 (1.20-1.30)"), "{}", h.measured);
        // Without the bound's rows the line says nothing of it.
        let h = headline("open-ahead", &rs.iter().filter(|r| r.variant != BOUND_ROW).cloned().collect::<Vec<_>>());
        assert!(!h.measured.contains("window fixed"), "{}", h.measured);
        assert!(!h.measured.contains("bandwidth bound"), "{}", h.measured);
        assert!(h.measured.contains("open-ahead / on demand wall time"), "{}", h.measured);
    }

    #[test]
    fn mixed_hol_prints_auto_against_the_loaded_pool() {
        let mut rs = Vec::new();
        for k in 1..=2 {
            let (pool, auto) = (20.0 * k as f64, 2.0 * k as f64);
            for (row, p50) in [
                ("h1-pool · unloaded", 10.0),
                ("h1-pool · loaded", pool),
                ("auto · unloaded", 1.0),
                ("auto · loaded", auto),
            ] {
                let mut r = rec(row, k, "small_latency_p50_ms", p50);
                r.set("small_latency_p99_ms", 2.0 * p50);
                if row.ends_with(" · loaded") {
                    r.set("large_done_over_alone", if row.starts_with("auto") { 1.0 + 0.02 * k as f64 } else { 1.5 });
                }
                rs.push(r);
            }
        }
        let h = headline("mixed-hol", &rs);
        // auto is a tenth of the pool in both repeats: 0.10x, 10x better.
        assert!(
            h.measured.contains(
                "auto loaded / h1-pool loaded (same repeat), p50 / p99: 0.10x / 0.10x (10.0x / 10.0x better)"
            ),
            "{}",
            h.measured
        );
        // Large objects done against the same load alone: auto's spread, the pool's beside it.
        assert!(
            h.measured.contains("large objects done / alone (goal <= 1.10): auto 1.03x (1.02-1.04), h1-pool 1.50x"),
            "{}",
            h.measured
        );
        // No link, no link clause.
        assert!(!h.measured.contains("link-limited"), "{}", h.measured);
        // On a link: done / link-limited and the connections held, auto's beside the pool's.
        let mut linked = rs.clone();
        for r in linked.iter_mut().filter(|r| r.variant.ends_with(" · loaded")) {
            let auto = r.variant.starts_with("auto");
            r.set("large_done_over_link", if auto { 1.07 } else { 1.02 });
            r.set("connections_open_mean_window", if auto { 19.4 } else { 50.0 });
        }
        let h = headline("mixed-hol", &linked);
        assert!(h.measured.contains("large done / link-limited (goal <= 1.10): auto 1.07x, h1-pool 1.02x; connections held while the smalls ran: auto 19, h1-pool 50"), "{}", h.measured);
        // Without auto's loaded rows (a cap map), no such clauses and no empty segment.
        rs.retain(|r| !r.variant.starts_with("auto · "));
        let h = headline("mixed-hol", &rs);
        assert!(!h.measured.contains("auto loaded /"));
        assert!(
            !h.measured.contains(";  ") && !h.measured.contains("; ;") && !h.measured.ends_with("; "),
            "{}",
            h.measured
        );
    }
}
