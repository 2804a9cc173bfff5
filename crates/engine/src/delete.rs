//! (issue 5, being written: see lib.rs)
