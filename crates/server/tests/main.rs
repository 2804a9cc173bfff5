//! `ferry serve`'s integration tests, one module per file beside this one, built as a
//! single test binary (`cargo test --release --workspace --test server`; one file's tests
//! with a filter such as `compat::`).
//!
//! One binary rather than one per file because each test crate instantiates the server's
//! and the test kit's generic code (hyper, h2, rustls, tokio) for itself and links it
//! again, optimised with debug info: built apart, the four files were four compiles and
//! links of much the same code. `autotests = false` in Cargo.toml keeps cargo from also
//! building each file as a binary of its own, so a new file here is added as a `mod`
//! below. docs/lab/ci.md has the build times.

mod compat;
mod h1_wire;
mod load;
mod memory;
