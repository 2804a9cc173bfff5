//! Wildcard patterns over keys: which keys (or relative paths) a source names.
//!
//! `*` matches within one path segment, `**` across segments, `?` one character
//! (globset with `literal_separator`, as in shells). s5cmd's `*` also crosses `/`; ferry
//! keeps the shell's meaning so `dir/*.txt` does not reach into subdirectories, and `**`
//! says so when that is wanted (`dir/**.txt`, `dir/**/*.txt`). globset only gives `**`
//! its meaning as a whole segment, so a segment like `**.txt` is rewritten first to
//! `{*.txt,**/*.txt}` ([`rewrite_double_star`]).
//!
//! A pattern is listed from its literal prefix (the text before the first wildcard); the
//! name an item gets at the destination is its key relative to the last `/` of that
//! prefix (the pattern's directory). How a pattern is listed or walked is the binary's
//! (wildcard.rs); this module is pure.

use crate::location::usage;
use anyhow::Result;
use globset::{GlobBuilder, GlobMatcher};

pub fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?'])
}

/// Gives `**` inside a segment (`a**b`) the meaning "`a`, anything across `/`, `b`":
/// the segment becomes `{a*b,a*/**/*b}`, which globset understands.
pub fn rewrite_double_star(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|seg| match seg.find("**") {
            Some(i) if seg != "**" => {
                let (l, r) = (&seg[..i], &seg[i + 2..]);
                format!("{{{l}*{r},{l}*/**/*{r}}}")
            }
            _ => seg.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Which keys (or relative paths) a source names.
#[derive(Clone, Debug)]
pub struct Pattern {
    /// Listing prefix: everything before the first wildcard (or the whole directory).
    pub prefix: String,
    /// Destination names are relative to this (a prefix of `prefix`).
    pub base: String,
    matcher: Option<GlobMatcher>,
}

impl Pattern {
    /// A pattern with wildcards, or (recursive) everything under `key` taken as a
    /// directory.
    pub fn new(key: &str, recursive: bool) -> Result<Pattern> {
        if has_wildcard(key) {
            let first = key.find(['*', '?']).unwrap_or(key.len());
            let prefix = key[..first].to_owned();
            let base = match prefix.rfind('/') {
                Some(i) => prefix[..=i].to_owned(),
                None => String::new(),
            };
            let glob = GlobBuilder::new(&rewrite_double_star(key))
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| usage(format!("bad wildcard {key:?}: {e}")))?;
            Ok(Pattern { prefix, base, matcher: Some(glob.compile_matcher()) })
        } else {
            debug_assert!(recursive);
            let dir = if key.is_empty() || key.ends_with('/') { key.to_owned() } else { format!("{key}/") };
            Ok(Pattern { prefix: dir.clone(), base: dir, matcher: None })
        }
    }

    pub fn matches(&self, key: &str) -> bool {
        key.starts_with(&self.prefix) && self.matcher.as_ref().is_none_or(|m| m.is_match(key))
    }

    /// The name under the destination.
    pub fn relative<'a>(&self, key: &'a str) -> &'a str {
        key.strip_prefix(self.base.as_str()).unwrap_or(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_stays_in_its_segment_double_star_crosses() {
        let p = Pattern::new("up/*.txt", false).unwrap();
        assert_eq!((p.prefix.as_str(), p.base.as_str()), ("up/", "up/"));
        assert!(p.matches("up/one.txt"));
        assert!(!p.matches("up/nested/four.txt"));
        assert!(!p.matches("other/one.txt"));
        let p = Pattern::new("up/**.txt", false).unwrap();
        assert!(p.matches("up/one.txt") && p.matches("up/nested/four.txt"));
        assert!(!p.matches("up/three.bin"));
        let p = Pattern::new("up/a**z", false).unwrap();
        assert!(p.matches("up/az") && p.matches("up/a/b/z") && p.matches("up/abcz") && !p.matches("up/b/z"));
        let p = Pattern::new("up/**/*.txt", false).unwrap();
        assert!(p.matches("up/nested/deeper/four.txt"));
        let p = Pattern::new("up/*", false).unwrap();
        assert!(p.matches("up/one.txt") && !p.matches("up/a/b"));
        let p = Pattern::new("up/**", false).unwrap();
        assert!(p.matches("up/a/b"));
        assert_eq!(p.relative("up/a/b"), "a/b");
    }

    #[test]
    fn names_are_relative_to_the_pattern_directory() {
        let p = Pattern::new("logs/2024-*/x?.gz", false).unwrap();
        assert_eq!(p.prefix, "logs/2024-");
        assert_eq!(p.base, "logs/");
        assert!(p.matches("logs/2024-01/x1.gz"));
        assert!(!p.matches("logs/2024-01/x10.gz"));
        assert_eq!(p.relative("logs/2024-01/x1.gz"), "2024-01/x1.gz");
        let p = Pattern::new("*.gz", false).unwrap();
        assert_eq!((p.prefix.as_str(), p.base.as_str()), ("", ""));
        assert!(p.matches("a.gz") && !p.matches("d/a.gz"));
    }

    #[test]
    fn recursive_takes_the_key_as_a_directory() {
        let p = Pattern::new("data", true).unwrap();
        assert_eq!(p.prefix, "data/");
        assert!(p.matches("data/a/b") && !p.matches("database"));
        assert_eq!(p.relative("data/a/b"), "a/b");
        let p = Pattern::new("", true).unwrap();
        assert!(p.matches("anything/at/all"));
    }
}
