//! The object stores' integration tests, one module per file beside this one, built as a
//! single test binary (`cargo test --release --workspace --test store`; one file's tests
//! with a filter such as `conformance::`).
//!
//! One binary rather than one per file because each test crate instantiates the engine's
//! and the providers' generic code (hyper, h2, rustls, tokio) for itself and links it
//! again, optimised with debug info: built apart, these three files were three compiles
//! and links of much the same code. `autotests = false` in Cargo.toml keeps cargo from also
//! building each file as a binary of its own, so a new file here is added as a `mod`
//! below (or as a `[[test]]` of its own in Cargo.toml, as the two that set the process's
//! environment are). docs/lab/ci.md has the build times.

mod azure;
mod conformance;
mod gcs_rclone;
