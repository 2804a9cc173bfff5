//! `ferry bench all`: the workloads of the suite, in the order they run, one line each.
//! Adding a workload is one line in [`SUITE`] and one arm in claims.rs.

use crate::runner::{Outcome, RunOptions};
use crate::workload::Size;
use anyhow::Result;

/// Runs one workload at `size`, with `repeats` instead of its default when given.
pub type RunFn = fn(Size, Option<usize>, &RunOptions) -> Result<Outcome>;

pub const SUITE: &[(&str, RunFn)] = &[
    ("small-objects", small_objects),
    ("mixed-hol", mixed_hol),
    ("ttfb-throughput", ttfb_throughput),
    ("listing", listing),
    ("open-ahead", open_ahead),
    ("commit", commit),
    ("vectored", vectored),
    ("bulk-wan", bulk_wan),
];

/// Across the emulated link when the options carry one (`ferry bench all` brings up the
/// transatlantic link for it as root), else on loopback.
fn bulk_wan(s: Size, repeats: Option<usize>, o: &RunOptions) -> Result<Outcome> {
    let mut p = crate::bulk_wan::BulkWanParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    p.peers = o.peers.clone();
    crate::bulk_wan::run(s, &p, o)
}

fn small_objects(s: Size, repeats: Option<usize>, o: &RunOptions) -> Result<Outcome> {
    let mut p = crate::small_objects::SmallObjectsParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    // s3fs fits file-like access, not many small GETs (peers.rs's DEFAULT).
    p.peers = o.peers.iter().copied().filter(|x| crate::peers::Peer::DEFAULT.contains(x)).collect();
    crate::run(&crate::small_objects::small_objects(s, &p), o)
}

fn mixed_hol(s: Size, repeats: Option<usize>, o: &RunOptions) -> Result<Outcome> {
    let mut p = crate::mixed_hol::MixedHolParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    p.peers = o.peers.clone();
    p.link = o.link.as_ref().map(|l| l.preset());
    crate::run(&crate::mixed_hol::mixed_hol(s, &p), o)
}

fn ttfb_throughput(s: Size, repeats: Option<usize>, o: &RunOptions) -> Result<Outcome> {
    let mut p = crate::ttfb::TtfbParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    p.peers = o.peers.clone();
    crate::run(&crate::ttfb::ttfb_throughput(s, &p), o)
}

fn listing(s: Size, repeats: Option<usize>, o: &RunOptions) -> Result<Outcome> {
    let mut p = crate::listing::ListingParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    p.peers = o.peers.clone();
    crate::listing::run(s, &p, o)
}

fn open_ahead(s: Size, repeats: Option<usize>, o: &RunOptions) -> Result<Outcome> {
    let mut p = crate::open_ahead::OpenAheadParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    p.peers = o.peers.clone();
    crate::run(&crate::open_ahead::open_ahead(s, &p), o)
}

fn commit(s: Size, repeats: Option<usize>, o: &RunOptions) -> Result<Outcome> {
    let mut p = crate::commit::CommitParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    p.peers = o.peers.clone();
    crate::run(&crate::commit::commit(s, &p), o)
}

fn vectored(s: Size, repeats: Option<usize>, o: &RunOptions) -> Result<Outcome> {
    let mut p = crate::vectored::VectoredParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    p.peers = o.peers.clone();
    crate::run(&crate::vectored::vectored(s, &p), o)
}
