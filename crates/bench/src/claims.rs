//! The claims table of `ferry bench all`: per workload, the published headline, what this
//! run measured, and whether it reproduces the headline in direction and size.
//!
//! Each workload's file holds its published figure and how its records are read (its
//! `claim` function, registered with it in suite.rs); this module only looks the workload
//! up and lays the rows out. The verdict words and the pairing by repeat are verdict.rs's;
//! [`RULE`] is printed under the table.
//!
//! `ferry bench claims` reads the table back from JSON lines instead of a live run, and
//! sets servers side by side ([`side_by_side`]): one column pair per file, ferry serve's
//! (`bench-results.jsonl`) and an external server's (`bench-results-minio.jsonl`, the
//! same workloads run with `--endpoint-url`). Each file gathers many invocations, so a
//! column takes each workload's latest one ([`latest_runs`]), and the runs it took are
//! listed under the table.
//!
//! ```text
//! file ─► RunRecord::from_json per line ─► latest run id per workload ─► its claim ─┐
//! file ─► ...                                                                        ├─► one row per workload
//! ```

use crate::record::RunRecord;
use serde_json::Value;

pub const RULE: &str = "reproduced: \"yes\" = published direction and size within 2x of the published figure; \"direction only\" = right direction, size further off; \"no\" = wrong direction or under 10%; \"none published\" = no published size, the engine row's direction against naive is stated; \"baseline only\" = a share of the ceiling, no strategy compared";

pub use crate::verdict::Headline;

/// The claims-table row of the workload `name`: its own `claim` function reads the records
/// (each workload file holds its published figure and how it is read), then auto against
/// the best forced transport on each row that has both ([`auto_vs_best_forced`]).
pub fn headline(name: &str, records: &[RunRecord]) -> Headline {
    let mut h = match crate::suite::find(name) {
        Some(w) => (w.claim)(records),
        None => return Headline::new(name, "-", "no such workload (suite.rs)".into(), "-"),
    };
    let auto: Vec<String> = auto_vs_best_forced(records)
        .into_iter()
        .map(|a| {
            let under = if a.ratio < AUTO_SHORT { ", under 0.95" } else { "" };
            format!("{} {:.2}x by {}{under}", a.row, a.ratio, a.figure)
        })
        .collect();
    if !auto.is_empty() {
        h.measured.push_str(&format!("; auto / best forced mode: {}", auto.join(", ")));
    }
    if let Some(note) = server_bound(records) {
        h.measured.push_str(&format!("; {note}"));
    }
    h
}

/// Where ferry's rows were bound by the server's CPU (server_cpu.rs: the machine busy and
/// the server the busier side, in most of ferry's runs), says so with the shares, and
/// compares what the client can still be held to: its CPU per request (per GiB for a
/// bytes workload), ferry's (auto's row where there is one) beside the frugalest peer's.
/// `None` where the rows have no server figures or were not server-bound.
pub fn server_bound(records: &[RunRecord]) -> Option<String> {
    let median = |v: Vec<f64>| crate::stats::Spread::of(&v).map(|s| s.median);
    let timed =
        |r: &&RunRecord| r.figure("server_cpu_s").is_some() && r.figure("server_window_s").is_some_and(|w| w > 0.0);
    let ferry: Vec<&RunRecord> = records.iter().filter(timed).filter(|r| is_ferry_row(r)).collect();
    let bounds: Vec<&str> = ferry.iter().filter_map(|r| crate::server_cpu::row_bound(r)).collect();
    let by_server = bounds.iter().filter(|b| **b == "server").count();
    if ferry.is_empty() || by_server * 2 <= ferry.len() {
        return None;
    }
    let server_cores = median(ferry.iter().filter_map(|r| r.figure("server_cores")).collect())?;
    let client_cores = median(ferry.iter().filter_map(|r| crate::server_cpu::client_cores(r)).collect())?;
    let busy = median(ferry.iter().filter_map(|r| r.figure("machine_busy")).collect())?;
    let mut note = format!(
        "server-bound in {by_server} of {} ferry runs: the server kept {server_cores:.2} cores busy to ferry's {client_cores:.2}, the machine {:.0}% busy",
        ferry.len(),
        busy * 100.0
    );
    let (_, figure, unit) = crate::server_cpu::cpu_rates(&ferry);
    let per_row = |rows: &[&RunRecord]| -> Vec<(String, f64)> {
        let mut labels: Vec<&str> = Vec::new();
        for r in rows {
            if !labels.contains(&r.variant.as_str()) {
                labels.push(&r.variant);
            }
        }
        labels
            .into_iter()
            .filter_map(|l| {
                Some((
                    l.to_owned(),
                    median(rows.iter().filter(|r| r.variant == l).filter_map(|r| r.figure(figure)).collect())?,
                ))
            })
            .collect()
    };
    let ours = per_row(&ferry);
    let ours = ours.iter().find(|(l, _)| l == "auto").or_else(|| ours.iter().min_by(|a, b| a.1.total_cmp(&b.1)));
    let peers: Vec<&RunRecord> =
        records.iter().filter(|r| is_peer_row(r) && matches!(r.status.as_str(), "ok" | "errors")).collect();
    let best_peer = per_row(&peers).into_iter().min_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some((ol, o)), Some((pl, p))) = (ours, best_peer) {
        if *o > 0.0 {
            note.push_str(&format!(
                "; client CPU {unit}: ferry {ol} {o:.3} vs the frugalest peer, {pl}, {p:.3} ({:.1}x less)",
                p / o
            ));
        }
    }
    Some(note)
}

/// A row of ferry's own client (a forced mode or auto), not a peer, ceiling or bound.
fn is_ferry_row(r: &RunRecord) -> bool {
    let forced = FORCED_MODES.contains(&r.mode.as_str()) || r.mode == "auto";
    let own = r.client.as_ref().is_some_and(|c| c.get("mode").is_some());
    forced && own && !r.variant.starts_with("bound") && !r.variant.starts_with("ceiling")
}

/// A peer's row (boto3, awscrt, ...: another tool's client); ferry's Python rows
/// (`ferry-py`) are ferry's, not a peer's.
fn is_peer_row(r: &RunRecord) -> bool {
    r.client.as_ref().and_then(|c| c.get("peer")).and_then(Value::as_str).is_some_and(|p| !p.starts_with("ferry"))
}

/// auto's promise is to match the better of its transports without knobs; a row where it
/// reaches less than this share of the best forced mode is called out in the table.
pub const AUTO_SHORT: f64 = 0.95;

/// The forced transports auto is set beside: a row labelled with `auto` in place of one
/// of these names is auto's counterpart of that row.
const FORCED_MODES: &[&str] = &["h1-pool", "h1-pipeline", "h2"];

/// Notes a forced row's label may carry after its mode's name when the same client ran
/// against another server than auto's: mixed-hol's h2 row runs against a second server
/// with `--h2 on` (`mixed_hol::CLIENTS`), the s3 profile being HTTP/1.1 only, and is
/// still the h2 counterpart of auto's row. Only server notes: a note that changes the
/// client (mixed-hol's 10-connection pool row) names another client, never a counterpart.
const SERVER_NOTES: &[&str] = &[" [s3 --h2 on]"];

/// The labels of `row`'s (an auto row's) forced counterparts: `auto` replaced by each
/// forced mode, with and without each of [`SERVER_NOTES`] after it.
fn forced_labels(row: &str) -> Vec<String> {
    FORCED_MODES
        .iter()
        .flat_map(|m| std::iter::once(m.to_string()).chain(SERVER_NOTES.iter().map(move |n| format!("{m}{n}"))))
        .map(|m| row.replacen("auto", &m, 1))
        .collect()
}

/// Figures auto is judged by, the first one both rows carry: (name, higher is better).
const AUTO_FIGURES: &[(&str, bool)] =
    &[("objects_per_s", true), ("bytes_per_s", true), ("small_latency_p99_ms", false), ("wall_s", false)];

/// Figures auto is judged by as well, wherever both rows carry them: mixed-hol's large
/// reads' rate while the smalls ran, the other half of its promise (small latency kept
/// low must not be paid for by the large reads).
const AUTO_ALSO: &[(&str, bool)] = &[("large_bytes_per_s", true)];

/// One row's auto against the best forced transport of the same repeat.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoRatio {
    /// auto's row label.
    pub row: String,
    pub figure: &'static str,
    /// Median over repeats of auto / the best forced row (inverted for a figure where
    /// lower is better), so above 1 auto did better.
    pub ratio: f64,
}

/// For each clean row labelled `auto` (alone or as the first word: `auto · loaded`) whose
/// forced counterparts ran (the same label with `h1-pool`, `h1-pipeline` or `h2` in its
/// place): per repeat, auto's figure over the best forced row's, then the median; for the
/// first of [`AUTO_FIGURES`] both carry, then for each of [`AUTO_ALSO`] both carry.
pub fn auto_vs_best_forced(records: &[RunRecord]) -> Vec<AutoRatio> {
    let ok = |r: &&RunRecord| r.status == "ok";
    let mut rows: Vec<&str> = Vec::new();
    for r in records.iter().filter(ok) {
        let v = r.variant.as_str();
        if (v == "auto" || v.starts_with("auto ")) && !rows.contains(&v) {
            rows.push(v);
        }
    }
    let mut out = Vec::new();
    for row in rows {
        let forced = forced_labels(row);
        let of =
            |label: &str, repeat: usize| records.iter().filter(ok).find(|r| r.variant == label && r.repeat == repeat);
        let autos: Vec<&RunRecord> = records.iter().filter(ok).filter(|r| r.variant == row).collect();
        let carried = |f: &str| {
            autos.iter().any(|a| {
                a.figure(f).is_some() && forced.iter().any(|l| of(l, a.repeat).is_some_and(|b| b.figure(f).is_some()))
            })
        };
        let first = AUTO_FIGURES.iter().find(|(f, _)| carried(f));
        for &(figure, higher) in first.into_iter().chain(AUTO_ALSO.iter().filter(|(f, _)| carried(f))) {
            let mut ratios: Vec<f64> = autos
                .iter()
                .filter_map(|a| {
                    let x = a.figure(figure)?;
                    let values = forced.iter().filter_map(|l| of(l, a.repeat)?.figure(figure));
                    let best = if higher { values.fold(f64::NAN, f64::max) } else { values.fold(f64::NAN, f64::min) };
                    let ratio = if higher { x / best } else { best / x };
                    ratio.is_finite().then_some(ratio)
                })
                .collect();
            if ratios.is_empty() {
                continue;
            }
            ratios.sort_by(f64::total_cmp);
            let n = ratios.len();
            let ratio = if n % 2 == 1 { ratios[n / 2] } else { (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0 };
            out.push(AutoRatio { row: row.to_owned(), figure, ratio });
        }
    }
    out
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

/// One workload's latest invocation in a JSON lines file: its records and where they
/// came from.
#[derive(Clone, Debug)]
pub struct Run {
    /// The workload (the record's `bench`: the `ferry bench NAME` that wrote it).
    pub workload: String,
    pub run_id: String,
    pub size: String,
    pub git_sha: Option<String>,
    /// The server: "external URL" or "ferry serve".
    pub server: String,
    pub records: Vec<RunRecord>,
}

/// Each workload's latest invocation (by the newest record's `time_unix`) among the JSON
/// lines of `text`, in the suite's order (suite.rs), then any other. Lines that are not
/// records (blank, another schema, cut short) are counted in the second value.
pub fn latest_runs(text: &str) -> (Vec<Run>, usize) {
    let mut skipped = 0;
    // (workload, run id) -> (newest time, first line's value, records)
    let mut runs: Vec<(String, String, f64, Value, Vec<RunRecord>)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            skipped += 1;
            continue;
        };
        let Some(rec) = RunRecord::from_json(&v) else {
            skipped += 1;
            continue;
        };
        let (bench, run_id) =
            (v["bench"].as_str().unwrap_or("").to_owned(), v["run_id"].as_str().unwrap_or("").to_owned());
        let t = v["time_unix"].as_f64().unwrap_or(0.0);
        match runs.iter_mut().find(|r| r.0 == bench && r.1 == run_id) {
            Some(r) => {
                r.2 = r.2.max(t);
                r.4.push(rec);
            }
            None => runs.push((bench, run_id, t, v, vec![rec])),
        }
    }
    let mut latest: Vec<(String, String, f64, Value, Vec<RunRecord>)> = Vec::new();
    for r in runs {
        match latest.iter_mut().find(|l| l.0 == r.0) {
            Some(l) if l.2 < r.2 => *l = r,
            Some(_) => {}
            None => latest.push(r),
        }
    }
    let order = |w: &str| crate::suite::ALL.iter().position(|d| d.name == w).unwrap_or(usize::MAX);
    latest.sort_by_key(|r| order(&r.0));
    let out = latest
        .into_iter()
        .map(|(workload, run_id, _, first, records)| {
            let external = records.iter().find_map(|r| {
                r.server.as_ref().filter(|s| s["external"] == true).and_then(|s| s["url"].as_str().map(str::to_owned))
            });
            Run {
                workload,
                run_id,
                size: first["size"].as_str().unwrap_or("").to_owned(),
                git_sha: first["git_sha"].as_str().map(|s| s[..s.len().min(12)].to_owned()),
                server: external.map_or_else(|| "ferry serve".to_owned(), |u| format!("external {u}")),
                records,
            }
        })
        .collect();
    (out, skipped)
}

/// The claims table with one measured/verdict column pair per server: `columns` are
/// (name, that server's runs). A row per workload found in any column, in the suite's
/// order; a workload a column lacks reads "not run". The runs each column took are listed
/// under the table, then [`RULE`].
pub fn side_by_side(columns: &[(&str, &[Run])]) -> String {
    let mut names: Vec<&str> = Vec::new();
    let order = |w: &str| crate::suite::ALL.iter().position(|d| d.name == w).unwrap_or(usize::MAX);
    for (_, runs) in columns {
        for r in runs.iter() {
            if !names.contains(&r.workload.as_str()) {
                names.push(&r.workload);
            }
        }
    }
    names.sort_by_key(|n| order(n));
    let mut s = String::from("| workload | published headline |");
    let mut rule = String::from("|---|---|");
    for (name, _) in columns {
        s.push_str(&format!(" {name}: measured | {name}: reproduced? |"));
        rule.push_str("---|---|");
    }
    s.push('\n');
    s.push_str(&rule);
    s.push('\n');
    for w in &names {
        let heads: Vec<Option<Headline>> = columns
            .iter()
            .map(|(_, runs)| runs.iter().find(|r| r.workload == *w).map(|r| headline(w, &r.records)))
            .collect();
        let published = heads.iter().flatten().next().map_or("-".to_owned(), |h| h.published.clone());
        s.push_str(&format!("| {w} | {published} |"));
        for h in &heads {
            match h {
                Some(h) => s.push_str(&format!(" {} | {} |", h.measured.replace('|', "/"), h.verdict)),
                None => s.push_str(" not run | - |"),
            }
        }
        s.push('\n');
    }
    s.push_str("\nRuns read (each workload's latest in its file):\n");
    for (name, runs) in columns {
        let list: Vec<String> = runs
            .iter()
            .map(|r| {
                format!(
                    "{} ({}, {} repeats, run {}, git {}, {})",
                    r.workload,
                    r.size,
                    crate::verdict::repeats_of(&r.records),
                    r.run_id,
                    r.git_sha.as_deref().unwrap_or("unknown"),
                    r.server
                )
            })
            .collect();
        s.push_str(&format!("- {name}: {}\n", if list.is_empty() { "none".to_owned() } else { list.join("; ") }));
    }
    s.push_str(&format!("\n{RULE}\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(variant: &str, repeat: usize, figure: &str, v: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set(figure, v);
        r
    }

    /// A row with its server and client CPU over a 1 s window, `requests` requests.
    fn cpu_row(variant: &str, mode: &str, peer: Option<&str>, server: f64, client: f64, busy: f64) -> RunRecord {
        let mut r = rec(variant, 1, "objects_per_s", 1000.0);
        r.mode = mode.into();
        r.client = Some(match peer {
            Some(p) => serde_json::json!({"peer": p}),
            None => serde_json::json!({"mode": mode}),
        });
        for (f, v) in [("server_cpu_s", server), ("server_cores", server), ("server_window_s", 1.0)] {
            r.set(f, v);
        }
        r.set("machine_busy", busy);
        r.set("client_cpu_s", client);
        r.set("requests_sent", 1000.0);
        r.derive_cpu_rates();
        r
    }

    #[test]
    fn a_server_bound_run_says_so_and_sets_client_cpu_beside_the_frugalest_peer() {
        let records = [
            cpu_row("h1-pool", "h1-pool", None, 1.5, 0.4, 0.98),
            cpu_row("auto", "auto", None, 1.5, 0.05, 0.97),
            cpu_row("boto3", "boto3", Some("boto3"), 0.3, 0.8, 0.7),
            cpu_row("awscrt", "awscrt", Some("awscrt"), 0.6, 0.2, 0.8),
            cpu_row("ferry-py", "ferry-py", Some("ferry-py"), 0.8, 0.01, 0.8),
            cpu_row("bound: C/L", "h1-pool", None, 0.1, 0.9, 0.95),
        ];
        let note = server_bound(&records).expect("server-bound");
        assert!(note.starts_with("server-bound in 2 of 2 ferry runs"), "{note}");
        assert!(note.contains("the server kept 1.50 cores busy to ferry's 0.23"), "{note}");
        assert!(note.contains("ferry auto 0.050 vs the frugalest peer, awscrt, 0.200 (4.0x less)"), "{note}");
        // The machine with CPU to spare, or the client the busier side: not server-bound.
        let idle = [cpu_row("auto", "auto", None, 1.5, 0.05, 0.6), cpu_row("h1-pool", "h1-pool", None, 1.5, 0.05, 0.5)];
        assert_eq!(server_bound(&idle), None);
        let client = [cpu_row("auto", "auto", None, 0.4, 1.5, 0.99)];
        assert_eq!(server_bound(&client), None);
        assert_eq!(server_bound(&[rec("auto", 1, "objects_per_s", 1.0)]), None);
    }

    #[test]
    fn a_workload_is_read_by_its_own_claim() {
        let h = headline(
            "small-objects",
            &[rec("h1-pipeline", 1, "objects_per_s", 135.0), rec("h1-pool", 1, "objects_per_s", 100.0)],
        );
        assert_eq!(h.verdict, "yes");
        assert!(h.measured.contains("+35%"), "{}", h.measured);
        assert_eq!(headline("small-objects", &[]).verdict, "no");
        assert!(table(&[h]).contains("| small-objects |"));
        assert_eq!(headline("no-such-workload", &[]).published, "-");
    }

    #[test]
    fn auto_is_set_beside_the_best_forced_mode_of_each_repeat() {
        let records = [
            rec("h1-pool", 1, "objects_per_s", 100.0),
            rec("h1-pipeline", 1, "objects_per_s", 200.0),
            rec("auto", 1, "objects_per_s", 180.0),
            rec("h1-pool", 2, "objects_per_s", 300.0),
            rec("h1-pipeline", 2, "objects_per_s", 150.0),
            rec("auto", 2, "objects_per_s", 330.0),
            rec("h1-pool", 3, "objects_per_s", 100.0),
            rec("h1-pipeline", 3, "objects_per_s", 100.0),
            rec("auto", 3, "objects_per_s", 50.0),
            // Lower is better: auto's p99 over the best forced mode's is inverted.
            rec("auto · loaded", 1, "small_latency_p99_ms", 40.0),
            rec("h1-pool · loaded", 1, "small_latency_p99_ms", 400.0),
            rec("h1-pipeline · loaded", 1, "small_latency_p99_ms", 20.0),
            // No forced counterpart: no ratio.
            rec("auto [max 24 conns] · loaded", 1, "small_latency_p99_ms", 10.0),
        ];
        // The loaded rows carry the large reads' rate too: judged as well.
        let mut with_large = records.to_vec();
        for (label, rate) in [("auto · loaded", 80.0), ("h1-pool · loaded", 100.0), ("h1-pipeline · loaded", 60.0)] {
            let r = with_large.iter_mut().find(|r| r.variant == label).unwrap();
            r.set("large_bytes_per_s", rate);
        }
        let a = auto_vs_best_forced(&with_large);
        assert_eq!(a.len(), 3, "{a:?}");
        assert_eq!((a[2].row.as_str(), a[2].figure), ("auto · loaded", "large_bytes_per_s"));
        assert!((a[2].ratio - 0.8).abs() < 1e-9, "{a:?}");
        let a = auto_vs_best_forced(&records);
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!((a[0].row.as_str(), a[0].figure), ("auto", "objects_per_s"));
        assert!((a[0].ratio - 0.9).abs() < 1e-9, "median of 0.9, 1.1, 0.5: {a:?}");
        assert_eq!((a[1].row.as_str(), a[1].figure), ("auto · loaded", "small_latency_p99_ms"));
        assert!((a[1].ratio - 0.5).abs() < 1e-9, "{a:?}");
        let h = headline("small-objects", &records);
        assert!(
            h.measured.contains("auto / best forced mode: auto 0.90x by objects_per_s, under 0.95"),
            "{}",
            h.measured
        );
        let none = headline("small-objects", &records[..2]);
        assert!(!none.measured.contains("auto / best"), "{}", none.measured);
    }

    /// mixed-hol's h2 row ran against its own server (`--h2 on`) and says so in its label;
    /// it is still auto's h2 counterpart. Its 10-connection pool row is another client.
    #[test]
    fn a_forced_row_on_another_server_is_still_autos_counterpart() {
        let h2 = crate::mixed_hol::CLIENTS.iter().find(|c| c.1 == ferry_store::Mode::H2).unwrap().0;
        let loaded = |l: &str| crate::mixed_hol::row_label(l, crate::mixed_hol::Phase::Loaded);
        let records = [
            rec(&loaded("auto"), 1, "large_bytes_per_s", 90.0),
            rec(&loaded("h1-pool"), 1, "large_bytes_per_s", 60.0),
            rec(&loaded(h2), 1, "large_bytes_per_s", 100.0),
            // Faster, but a different client (10 connections): never the best forced mode.
            rec(&loaded(crate::mixed_hol::SMALL_POOL.0), 1, "large_bytes_per_s", 1000.0),
        ];
        let a = auto_vs_best_forced(&records);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].figure, "large_bytes_per_s");
        assert!((a[0].ratio - 0.9).abs() < 1e-9, "auto against h2's 100, not the pool's 60: {a:?}");
    }

    /// A JSON line as a run of `bench` writes it.
    fn line(bench: &str, run_id: &str, t: f64, variant: &str, repeat: usize, v: f64, external: bool) -> String {
        let mut r = rec(variant, repeat, "objects_per_s", v);
        r.workload = bench.into();
        r.repeats = 1;
        if external {
            r.server = Some(serde_json::json!({"label": "external", "url": "http://127.0.0.1:9", "external": true}));
        }
        let ctx = crate::record::RunContext {
            bench: bench.into(),
            run_id: run_id.into(),
            git_sha: Some("0123456789abcdef".into()),
            git_dirty: Some(false),
            machine: crate::sys::Machine { nproc: 2, kernel: "6.1".into() },
        };
        let mut v = r.to_json(&ctx);
        v["time_unix"] = serde_json::json!(t);
        v.to_string()
    }

    #[test]
    fn each_workload_is_read_from_its_latest_run_and_servers_sit_side_by_side() {
        let serve = [
            // An older run of small-objects that the newer one replaces.
            line("small-objects", "1-1", 10.0, "h1-pipeline", 1, 100.0, false),
            line("small-objects", "1-1", 11.0, "h1-pool", 1, 100.0, false),
            line("small-objects", "2-1", 20.0, "h1-pipeline", 1, 135.0, false),
            line("small-objects", "2-1", 21.0, "h1-pool", 1, 100.0, false),
            "not json".into(),
            String::new(),
        ]
        .join("\n");
        let (runs, skipped) = latest_runs(&serve);
        assert_eq!(skipped, 1);
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].run_id.as_str(), runs[0].records.len()), ("2-1", 2));
        assert_eq!(runs[0].server, "ferry serve");
        assert_eq!(runs[0].git_sha.as_deref(), Some("0123456789ab"));
        let ext = [
            line("small-objects", "3-1", 30.0, "h1-pipeline", 1, 90.0, true),
            line("small-objects", "3-1", 31.0, "h1-pool", 1, 100.0, true),
        ]
        .join("\n");
        let (ext_runs, _) = latest_runs(&ext);
        assert_eq!(ext_runs[0].server, "external http://127.0.0.1:9");
        let t = side_by_side(&[("ferry serve", &runs), ("MinIO", &ext_runs)]);
        let head = t.lines().next().unwrap();
        assert!(head.contains("ferry serve: measured") && head.contains("MinIO: reproduced?"), "{t}");
        let row = t.lines().find(|l| l.starts_with("| small-objects |")).unwrap();
        let cells: Vec<&str> = row.split(" | ").collect();
        assert!(cells[2].contains("+35%") && cells[3] == "yes", "{row}");
        assert!(cells[4].contains("-10%") && cells[5].starts_with("no"), "{row}");
        assert!(t.contains("run 2-1") && t.contains("run 3-1") && t.contains(RULE), "{t}");
        // A workload one column lacks.
        let only = side_by_side(&[("ferry serve", &runs), ("MinIO", &[])]);
        assert!(only.contains("| not run | - |") && only.contains("- MinIO: none"), "{only}");
    }
}
