//! The transports' integration tests, one module per file beside this one, built as a
//! single test binary (`cargo test -p ferry-wire --test wire`; one file's tests with a
//! filter such as `pipeline_scripted::`).
//!
//! One binary rather than one per file because each test crate instantiates the
//! transports' generic code (hyper, h2, rustls, tokio) for itself: built apart, the
//! thirteen files were thirteen optimised compiles and links of much the same code.
//! `autotests = false` in Cargo.toml keeps cargo from also building each file as a
//! binary of its own, so a new file here is added as a `mod` below. docs/lab/ci.md has
//! the build times.

mod auto_hedge;
mod auto_lanes;
mod auto_latency;
mod h1_read_path;
mod h2_bursts;
mod h2_close;
mod h2_frames;
mod h2_lanes;
mod h2_windows;
mod pipeline_scripted;
mod pipeline_serve;
mod receive_windows;
mod transports;
