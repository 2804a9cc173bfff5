//! Every checked-in fuzz seed through its target's properties, on the stable build.
//!
//! The fuzz targets' checks live in `fuzz/src/` (the `ferry-fuzz` crate, a workspace of
//! its own for cargo-fuzz); this file includes them by path, so the workspace's test build
//! compiles them against today's parsers and every `cargo test` runs the seeds in
//! `fuzz/corpus/TARGET/` (requests and responses captured from real clients,
//! docs/lab/fuzzing.md) through them. A seed that fails names its file; the same file
//! replays under the fuzzer with `scripts/fuzz.sh`. Searching for new inputs is
//! `scripts/fuzz.sh` (nightly, cargo-fuzz), not part of this.
//!
//! Here, in the command line's test binary, because its crate already depends on every
//! parser the targets cover.

#[path = "../../../fuzz/src/lib.rs"]
mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Runs each seed of `target` through `check`; fails naming every seed that broke a
/// property (the property's own message is above, from the panic).
fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the seeds of {target}: {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "{} holds no seeds", dir.display());
    let failed: Vec<String> = seeds
        .iter()
        .filter(|seed| {
            let input = std::fs::read(seed).expect("a seed reads");
            catch_unwind(AssertUnwindSafe(|| check(&input))).is_err()
        })
        .map(|seed| seed.display().to_string())
        .collect();
    assert!(failed.is_empty(), "{} of {} seeds break {target}'s properties: {failed:?}", failed.len(), seeds.len());
}

#[test]
fn aws_chunked() {
    replay("aws_chunked", targets::aws_chunked::check);
}

#[test]
fn chunked() {
    replay("chunked", targets::chunked::check);
}

#[test]
fn cli_args() {
    replay("cli_args", targets::cli_args::check);
}

#[test]
fn range() {
    replay("range", targets::range::check);
}

#[test]
fn server_h1() {
    replay("server_h1", targets::server_h1::check);
}

#[test]
fn sigv4() {
    replay("sigv4", targets::sigv4::check);
}

#[test]
fn wire_h1() {
    replay("wire_h1", targets::wire_h1::check);
}

#[test]
fn xml() {
    replay("xml", targets::xml::check);
}
