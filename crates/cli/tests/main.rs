//! The command line's integration tests, one module per file beside this one, built as
//! a single test binary (`cargo test -p ferry-cli --test cli`; one file's tests with a
//! filter such as `perfdiag::`). Most run the `ferry` binary as a user would, against
//! servers and emulators they start.
//!
//! One binary rather than one per file because each test crate instantiates the
//! engine's, the stores' and the bench's generic code for itself: built apart, the
//! sixteen files were sixteen optimised compiles and links of much the same code.
//! `autotests = false` in Cargo.toml keeps cargo from also building each file as a
//! binary of its own, so a new file here is added as a `mod` below. docs/lab/ci.md has
//! the build times.

mod bench;
mod bench_external;
mod bench_link;
mod bench_listing;
mod bench_profile;
mod bench_workloads;
mod cli_azure;
mod credentials;
mod fuzz_seeds;
mod gcs;
mod incomplete;
mod keys;
mod messages;
mod perfdiag;
mod secrets;
mod serve_tls;
mod sync_providers;
