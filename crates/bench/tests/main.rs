//! The lab's integration tests, one module per file beside this one, built as a single
//! test binary (`cargo test --release --workspace --test bench`; one file's tests with a
//! filter such as `generators::`).
//!
//! One binary rather than one per file because each test crate links the lab and
//! everything under it again, optimised with debug info. `autotests = false` in
//! Cargo.toml keeps cargo from also building each file as a binary of its own, so a new
//! file here is added as a `mod` below. docs/lab/ci.md has the build times.

mod generators;
mod server_counters;
