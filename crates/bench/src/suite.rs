//! The one table of the lab's workloads, each a [`WorkloadDef`] value defined in its own
//! file beside its constructor, its run and its claim. `ferry bench all` runs those marked
//! `in_suite`, in this order, and reads each one's claim into the claims table (claims.rs);
//! `ferry bench NAME` finds its entry with [`find`].
//!
//! Adding a workload is one file (its `WORKLOAD` value) and one line here. This is the top
//! of the crate: it is the one module that names every workload.

use crate::workload::WorkloadDef;

pub const ALL: &[WorkloadDef] = &[
    crate::small_objects::WORKLOAD,
    crate::mixed_hol::WORKLOAD,
    crate::ttfb::WORKLOAD,
    crate::listing::WORKLOAD,
    crate::open_ahead::WORKLOAD,
    crate::commit::WORKLOAD,
    crate::vectored::WORKLOAD,
    crate::bulk_wan::WORKLOAD,
    crate::bulk_get::WORKLOAD,
    crate::cli_transfer::WORKLOAD,
    crate::parquet_scan::WORKLOAD,
];

/// The workloads of `ferry bench all`, in the order they run.
pub fn suite() -> impl Iterator<Item = &'static WorkloadDef> {
    ALL.iter().filter(|w| w.in_suite)
}

/// The entry named `name`.
pub fn find(name: &str) -> Option<&'static WorkloadDef> {
    ALL.iter().find(|w| w.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_is_the_published_eight_and_parquet_scan_in_order_and_names_are_unique() {
        let names: Vec<&str> = suite().map(|w| w.name).collect();
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
        for w in ALL {
            assert_eq!(find(w.name).map(|f| f.name), Some(w.name));
            assert!(!w.quick.is_empty() && !w.full.is_empty() && !w.peers.is_empty(), "{}", w.name);
        }
        assert_eq!(ALL.iter().filter(|w| w.default_link.is_some()).count(), 1);
    }
}
