//! (issue 6, being written: see lib.rs)
