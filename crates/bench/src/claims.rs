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

    fn rec(variant: &str, repeat: usize, figure: &str, v: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set(figure, v);
        r
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
}
