//! The command line's pure parsing, as a library: where an argument points
//! ([`location`]) and which keys a wildcard names ([`pattern`]). The `ferry` binary
//! (main.rs) uses them through its own modules; they live in a library so that code
//! outside the binary, the fuzz targets in `fuzz/`, can call them too (a binary crate
//! exports nothing).

pub mod location;
pub mod pattern;
