//! The command line's argument parsing: where an argument points
//! (`ferry_cli::common::parse_location`, over `ferry_store::StoreUrl`) and which keys a
//! wildcard names (`ferry_cli::wildcard::Pattern`).
//!
//! The input is one argument as typed. Properties:
//! - an object URL prints back (`Display`) to a string that parses to the same location,
//!   and a `StoreUrl` does the same;
//! - a pattern's listing prefix starts with its base, and every key it matches starts
//!   with the prefix and keeps its name relative to the base;
//! - the pattern's own literal prefix, and the key a wildcard-free pattern names as a
//!   directory, are matched the way the listing assumes.

use ferry_cli::common::{parse_location, Location};
use ferry_cli::wildcard::{has_wildcard, Pattern};
use ferry_store::StoreUrl;

/// Runs one input through the properties above; panics where one fails.
pub fn check(input: &[u8]) {
    let Ok(arg) = std::str::from_utf8(input) else { return };
    if let Ok(url) = StoreUrl::parse(arg) {
        assert_eq!(StoreUrl::parse(&url.to_string()), Ok(url.clone()), "{arg:?} does not print back");
    }
    if let Ok(loc @ Location::Object { .. }) = parse_location(arg) {
        assert_eq!(parse_location(&loc.to_string()).ok(), Some(loc), "{arg:?} does not print back");
    }

    // The key part of an s3:// argument, or the whole argument as a local pattern.
    let key = arg.split_once("://").and_then(|(_, rest)| rest.split_once('/')).map_or(arg, |(_, k)| k);
    let wild = has_wildcard(key);
    if let Ok(p) = Pattern::new(key, !wild) {
        assert!(p.prefix.starts_with(&p.base), "{key:?}: prefix {:?} base {:?}", p.prefix, p.base);
        assert!(!p.prefix.contains(['*', '?']), "{key:?}: prefix {:?} has a wildcard", p.prefix);
        for candidate in [key, p.prefix.as_str(), "", "a/b"] {
            if p.matches(candidate) {
                assert!(candidate.starts_with(&p.prefix));
                assert_eq!(format!("{}{}", p.base, p.relative(candidate)), candidate);
            }
        }
        if !wild {
            let child = format!("{}x", p.prefix);
            assert!(p.matches(&child), "{key:?} as a directory does not hold {child:?}");
        }
    }
}
