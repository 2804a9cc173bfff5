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

/// One `#[test]` per target, named after it: the seeds of `fuzz/corpus/NAME/` through
/// `targets::NAME::check`; and `TARGETS`, the names, for the test that no corpus is left
/// out.
macro_rules! seeds_of {
    ($($target:ident),* $(,)?) => {
        const TARGETS: &[&str] = &[$(stringify!($target)),*];
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), targets::$target::check);
            }
        )*
    };
}

seeds_of!(aws_chunked, chunked, cli_args, range, server_h1, sigv4, wire_h1, xml);

/// A target whose corpus is here but which the list above lacks would have its seeds never
/// run.
#[test]
fn every_corpus_has_its_test() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut corpora: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .collect();
    corpora.sort();
    let mut listed: Vec<String> = TARGETS.iter().map(|t| t.to_string()).collect();
    listed.sort();
    assert_eq!(corpora, listed, "fuzz/corpus's directories against the targets this file replays");
}
