//! The Markdown report of one workload: per variant, the median of each figure over the
//! repeats with its min-max spread, then each claim (published vs measured), then notes.
//! Ratios are computed per repeat (A and B ran back to back in the same repeat) and the
//! median of those ratios is quoted, with their range.

use crate::record::{per_repeat_ratios, RunContext, RunRecord};
use crate::stats::Spread;
use crate::workload::{Claim, Shape, Workload};
use std::fmt::Write;

/// `median (min-max)` of `vals` with `digits` decimals, `unit` after the median ("x" for
/// ratios); just the median when they agree; `-` when there are none.
pub fn spread_text(vals: &[f64], digits: usize, unit: &str) -> String {
    match Spread::of(vals) {
        None => "-".into(),
        Some(s) if s.n == 1 || s.min == s.max => format!("{:.*}{unit}", digits, s.median),
        Some(s) => format!("{:.*}{unit} ({:.*}-{:.*})", digits, s.median, digits, s.min, digits, s.max),
    }
}

/// `median (min-max)` of `figure` x `scale` over `records`, or `-` when no run has it.
pub fn cell(records: &[&RunRecord], figure: &str, scale: f64, digits: usize) -> String {
    let vals: Vec<f64> = records.iter().filter_map(|r| r.figure(figure)).map(|v| v * scale).collect();
    spread_text(&vals, digits, "")
}

/// The "Runs that were not clean" list under a table (status other than ok, absent,
/// not-implemented, skipped), with each run's first error; nothing when all were clean.
/// Rows skipped on purpose (against an external server) are named once, with why.
pub fn not_clean(s: &mut String, records: &[RunRecord]) {
    let mut skipped: Vec<(&str, &str)> = Vec::new();
    for r in records.iter().filter(|r| r.status == "skipped") {
        let entry = (r.variant.as_str(), r.note.as_deref().unwrap_or(""));
        if !skipped.contains(&entry) {
            skipped.push(entry);
        }
    }
    if !skipped.is_empty() {
        let _ = writeln!(s, "\nRows skipped:");
        for (variant, why) in skipped {
            let _ = writeln!(s, "- {variant}: {why}");
        }
    }
    let bad: Vec<&RunRecord> = records
        .iter()
        .filter(|r| !matches!(r.status.as_str(), "ok" | "absent" | "not-implemented" | "skipped"))
        .collect();
    if !bad.is_empty() {
        let _ = writeln!(s, "\nRuns that were not clean:");
        for r in bad {
            let _ = writeln!(
                s,
                "- {} repeat {}: {} {}",
                r.variant,
                r.repeat,
                r.status,
                r.error_samples.first().map(String::as_str).unwrap_or("")
            );
        }
    }
}

/// The server's CPU beside the client's, per row, where the rows read it (the server's
/// process on this machine: server_cpu.rs), and which side each row was bound by; empty
/// where no row has server figures. Client cores are the client's CPU over the same
/// row time as the server's.
pub fn server_cpu(records: &[RunRecord]) -> String {
    if !records.iter().any(|r| r.figure("server_cpu_s").is_some()) {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(s, "\nCPU per row, server beside client (the server's process read from /proc over the row's whole time, a peer's process start included; the kernel's 10 ms tick makes rows under ~0.2 s coarse; CPU-bound: the side that kept more cores busy while the machine was at least {:.0}% busy):\n", crate::server_cpu::SATURATED * 100.0);
    let (server_fig, client_fig, unit) = crate::server_cpu::cpu_rates(&records.iter().collect::<Vec<_>>());
    let _ = writeln!(
        s,
        "| row | server cores | client cores | machine busy % | server CPU {unit} | client CPU {unit} | CPU-bound |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    let mut labels: Vec<&str> = Vec::new();
    for r in records.iter().filter(|r| r.figure("server_cpu_s").is_some()) {
        if !labels.contains(&r.variant.as_str()) {
            labels.push(&r.variant);
        }
    }
    for l in labels {
        let rs: Vec<&RunRecord> =
            records.iter().filter(|r| r.variant == l && r.figure("server_cpu_s").is_some()).collect();
        let client_cores: Vec<f64> = rs.iter().filter_map(|r| crate::server_cpu::client_cores(r)).collect();
        let mut bounds: Vec<&str> = rs.iter().filter_map(|r| crate::server_cpu::row_bound(r)).collect();
        let bound = match (bounds.len(), rs.len()) {
            (0, _) => "-".to_owned(),
            (n, total) => {
                bounds.sort_unstable();
                let server = bounds.iter().filter(|b| **b == "server").count();
                let side = if server * 2 >= n { "server" } else { "client" };
                format!("{side} ({} of {total})", bounds.iter().filter(|b| **b == side).count())
            }
        };
        let _ = writeln!(
            s,
            "| {l} | {} | {} | {} | {} | {} | {bound} |",
            cell(&rs, "server_cores", 1.0, 2),
            spread_text(&client_cores, 2, ""),
            cell(&rs, "machine_busy", 100.0, 0),
            cell(&rs, server_fig, 1.0, 3),
            cell(&rs, client_fig, 1.0, 3),
        );
    }
    s
}

fn rows_of<'a>(records: &'a [RunRecord], label: &str) -> Vec<&'a RunRecord> {
    records.iter().filter(|r| r.variant == label && r.status != "absent" && r.status != "not-implemented").collect()
}

/// A [`Column::ratio`] cell: the median (min-max) of row `label`'s per-repeat ratios to
/// `reference`, as `N.Nx`; `-` for rows the column is not about or with no pair.
fn ratio_cell(
    records: &[RunRecord],
    label: &str,
    figure: &str,
    (suffix, reference): (&str, &str),
    digits: usize,
) -> String {
    if !label.ends_with(suffix) {
        return "-".into();
    }
    let r =
        per_repeat_ratios(records, label, reference, figure, |r| r.status != "absent" && r.status != "not-implemented");
    spread_text(&r, digits, "x")
}

/// Per-repeat ratios of `figure` between two variants.
fn ratios(records: &[RunRecord], num: &str, den: &str, figure: &str) -> Vec<f64> {
    per_repeat_ratios(records, num, den, figure, |_| true)
}

/// The first lines of every workload's report: `## ferry bench NAME (size, N repeats,
/// interleaved EXTRA)`, then git, machine and run id. Workloads with their own table or
/// schedule (listing, bulk-wan, cli-transfer) write their parameters' line after it.
pub fn heading(s: &mut String, name: &str, size: crate::workload::Size, repeats: usize, extra: &str, ctx: &RunContext) {
    let _ = writeln!(
        s,
        "## ferry bench {name} ({}, {repeats} repeat{}, interleaved{extra})\n\ngit {}{} · {} cores · kernel {} · run {}\n",
        size.name(),
        if repeats == 1 { "" } else { "s" },
        ctx.git_sha.as_deref().map(|s| &s[..s.len().min(12)]).unwrap_or("unknown"),
        if ctx.git_dirty == Some(true) { " (uncommitted changes)" } else { "" },
        ctx.machine.nproc,
        ctx.machine.kernel,
        ctx.run_id,
    );
}

pub fn render(w: &Workload, records: &[RunRecord], ctx: &RunContext) -> String {
    let mut s = String::new();
    heading(&mut s, w.name, w.size, w.repeats, "", ctx);
    let labels: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for r in records {
            if !v.contains(&r.variant.as_str()) {
                v.push(&r.variant);
            }
        }
        v
    };
    match w.shape {
        Shape::Own(table) => {
            s.push_str(&table(w, records));
            s.push_str(&server_cpu(records));
            return s;
        }
        Shape::Requests => {
            let _ = writeln!(s, "| mode | objects/s | p50 ms | p90 ms | p99 ms | TCP conns opened | requests resent | client CPU s | CPU s / 1k req | errors |");
            let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
            for l in &labels {
                let rs = rows_of(records, l);
                let _ = writeln!(
                    s,
                    "| {l} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    cell(&rs, "objects_per_s", 1.0, 0),
                    cell(&rs, "latency_p50_ms", 1.0, 1),
                    cell(&rs, "latency_p90_ms", 1.0, 1),
                    cell(&rs, "latency_p99_ms", 1.0, 1),
                    cell(&rs, "connections_opened", 1.0, 0),
                    cell(&rs, "requests_resent", 1.0, 0),
                    cell(&rs, "client_cpu_s", 1.0, 2),
                    cell(&rs, "client_cpu_s_per_1000_requests", 1.0, 3),
                    cell(&rs, "errors", 1.0, 0),
                );
            }
        }
        Shape::Columns(cols) => {
            let _ = writeln!(s, "| row | {} |", cols.iter().map(|c| c.header).collect::<Vec<_>>().join(" | "));
            let _ = writeln!(s, "|---|{}", "---|".repeat(cols.len()));
            for l in &labels {
                let rs = rows_of(records, l);
                if let Some(gap) = records.iter().find(|r| r.variant == *l && r.status == "not-implemented") {
                    let _ = writeln!(
                        s,
                        "| {l} | {} |{}",
                        gap.note.as_deref().unwrap_or("not yet"),
                        " |".repeat(cols.len().saturating_sub(1))
                    );
                    continue;
                }
                let cells: Vec<String> = cols
                    .iter()
                    .map(|c| match c.ratio_to {
                        Some(to) => ratio_cell(records, l, c.figure, to, c.digits),
                        None => cell(&rs, c.figure, c.scale, c.digits),
                    })
                    .collect();
                let _ = writeln!(s, "| {l} | {} |", cells.join(" | "));
            }
            s.push('\n');
            if let Some(claim) = w.headline {
                let h = claim(records);
                let _ =
                    writeln!(s, "- published: {} / measured: {} / reproduced: {}", h.published, h.measured, h.verdict);
            }
        }
        Shape::Bytes => {
            let ceiling = w.claims.iter().find_map(|c| match c {
                Claim::ShareOfCeiling { ceiling, .. } => Some(ceiling.as_str()),
                _ => None,
            });
            let _ = writeln!(s, "| mode | GB/s | % of iperf3 (same repeat) | client CPU s | CPU s / GiB | first byte ms | peak RSS MiB | RSS during run MiB | errors |");
            let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
            for l in &labels {
                let rs = rows_of(records, l);
                if rs.is_empty() {
                    let _ = writeln!(s, "| {l} | absent | | | | | | | |");
                    continue;
                }
                let once = w.variants.iter().any(|v| v.label == *l && v.once);
                let share = match ceiling {
                    Some(c) if c != *l && once => {
                        // Ran once, after the repeats: held against the ceiling's median.
                        let med = Spread::of(
                            &records
                                .iter()
                                .filter(|r| r.variant == c)
                                .filter_map(|r| r.figure("bytes_per_s"))
                                .collect::<Vec<_>>(),
                        );
                        match (med, rs[0].figure("bytes_per_s")) {
                            (Some(m), Some(x)) if m.median > 0.0 => {
                                format!("{:.0}% (of the median; not paired)", x / m.median * 100.0)
                            }
                            _ => "-".into(),
                        }
                    }
                    Some(c) if c != *l => {
                        let r: Vec<f64> = ratios(records, l, c, "bytes_per_s").iter().map(|x| x * 100.0).collect();
                        match Spread::of(&r) {
                            Some(sp) if sp.n > 1 => format!("{:.0}% ({:.0}-{:.0})", sp.median, sp.min, sp.max),
                            Some(sp) => format!("{:.0}%", sp.median),
                            None => "-".into(),
                        }
                    }
                    _ => "100%".into(),
                };
                let _ = writeln!(
                    s,
                    "| {l} | {} | {share} | {} | {} | {} | {} | {} | {} |",
                    cell(&rs, "bytes_per_s", 1e-9, 2),
                    cell(&rs, "client_cpu_s", 1.0, 2),
                    cell(&rs, "client_cpu_s_per_gib", 1.0, 3),
                    cell(&rs, "first_byte_ms", 1.0, 1),
                    cell(&rs, "peak_rss_bytes", 1.0 / 1048576.0, 0),
                    cell(&rs, "rss_sampled_max_bytes", 1.0 / 1048576.0, 0),
                    cell(&rs, "errors", 1.0, 0),
                );
            }
        }
    }
    s.push_str(&server_cpu(records));
    s.push('\n');
    for c in &w.claims {
        match c {
            Claim::Speedup { numerator, denominator, published } => {
                let r = ratios(records, numerator, denominator, "objects_per_s");
                match Spread::of(&r) {
                    Some(sp) => {
                        let _ = writeln!(
                            s,
                            "- {numerator} / {denominator}: published: {published} / measured: {:+.0}% (per-repeat range {:+.0}% to {:+.0}%, {} repeats)",
                            (sp.median - 1.0) * 100.0,
                            (sp.min - 1.0) * 100.0,
                            (sp.max - 1.0) * 100.0,
                            sp.n
                        );
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            "- {numerator} / {denominator}: published: {published} / measured: no paired runs"
                        );
                    }
                }
            }
            Claim::ShareOfCeiling { ceiling, goal } => {
                if records.iter().any(|r| r.variant == *ceiling && r.status == "absent") {
                    let _ = writeln!(s, "- iperf3: absent (scripts/setup.sh installs it); goal {goal} not checked");
                    continue;
                }
                let once = |l: &str| w.variants.iter().any(|v| v.label == l && v.once);
                for l in labels.iter().filter(|l| **l != ceiling.as_str() && !once(l)) {
                    let r = ratios(records, l, ceiling, "bytes_per_s");
                    if let Some(sp) = Spread::of(&r) {
                        let _ = writeln!(
                            s,
                            "- {l}: goal {goal} / measured: {:.0}% of iperf3 (range {:.0}-{:.0}%)",
                            sp.median * 100.0,
                            sp.min * 100.0,
                            sp.max * 100.0
                        );
                    }
                }
            }
        }
    }
    for r in records.iter().filter(|r| r.workload == "rss-check") {
        let mib = |f: &str| r.figure(f).map(|v| format!("{:.0} MiB", v / 1048576.0)).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "- rss-check: {} GiB via h1-pool in {:.1} s ({:.2} GB/s), status {}; client peak RSS (ru_maxrss, whole process life) {}; max RSS sampled during this download {}; RSS before it {}",
            r.figure("bytes").unwrap_or(0.0) / (1u64 << 30) as f64,
            r.figure("wall_s").unwrap_or(0.0),
            r.figure("bytes_per_s").unwrap_or(0.0) / 1e9,
            r.status,
            mib("peak_rss_bytes"),
            mib("rss_sampled_max_bytes"),
            mib("rss_before_bytes"),
        );
    }
    let mut notes: Vec<String> = w.notes.clone();
    for v in &w.variants {
        if let Some(n) = &v.note {
            notes.push(format!("{}: {n}", v.label));
        }
    }
    for n in notes {
        let _ = writeln!(s, "- {n}");
    }
    not_clean(&mut s, records);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(variant: &str, repeat: usize, server_cores: f64, client_cpu: f64, busy: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        for (f, v) in [
            ("objects_per_s", 500.0),
            ("server_cpu_s", server_cores * 2.0),
            ("server_cores", server_cores),
            ("server_window_s", 2.0),
            ("client_cpu_s", client_cpu),
            ("machine_busy", busy),
            ("requests_sent", 1000.0),
        ] {
            r.set(f, v);
        }
        r.derive_cpu_rates();
        r
    }

    #[test]
    fn the_server_cpu_table_names_the_bound_of_each_row() {
        assert_eq!(server_cpu(&[RunRecord::default()]), "");
        let t = server_cpu(&[
            row("auto", 1, 1.5, 0.8, 0.97),
            row("auto", 2, 1.4, 0.8, 0.95),
            row("auto", 3, 1.5, 0.8, 0.5),
            row("boto3", 1, 0.3, 3.0, 0.9),
        ]);
        // Client cores are its CPU over the same 2 s: 0.4 and 1.5.
        assert!(
            t.contains(
                "| auto | 1.50 (1.40-1.50) | 0.40 | 95 (50-97) | 3.000 (2.800-3.000) | 0.800 | server (2 of 3) |"
            ),
            "{t}"
        );
        assert!(t.contains("| boto3 | 0.30 | 1.50 | 90 | 0.600 | 3.000 | client (1 of 1) |"), "{t}");
    }
}
