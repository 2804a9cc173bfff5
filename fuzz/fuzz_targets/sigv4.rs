//! libFuzzer's entry point for `ferry_fuzz::sigv4` (fuzz/src/sigv4.rs), which says what
//! it parses and which properties it checks; the checked-in seeds also run through it in
//! the workspace's tests (crates/cli/tests/fuzz_seeds.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| ferry_fuzz::sigv4::check(input));
