//! The engine's integration tests, one module per file beside this one, built as a
//! single test binary (`cargo test -p ferry-engine --test engine`; one file's tests with
//! a filter such as `sched_listing::`).
//!
//! One binary rather than one per file because each test crate instantiates the
//! engine's and the S3 client's generic code for itself: built apart, the eleven files
//! were eleven optimised compiles and links of much the same code. `autotests = false`
//! in Cargo.toml keeps cargo from also building each file as a binary of its own, so a
//! new file here is added as a `mod` below. docs/lab/ci.md has the build times.

mod common;
mod sched_support;

mod copy;
mod sched_controller;
mod sched_delete;
mod sched_listing;
mod sched_memory;
mod sched_openahead;
mod sched_ranges;
mod sched_small;
mod transfer_files;
mod upload_abort;
mod upload_resume;
