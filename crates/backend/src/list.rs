//! S3 listing over one bucket's `BTreeMap<String, _>`.
//!
//! Semantics (ListObjectsV2 with `start-after`, and V1 with `marker`, which are the
//! same thing here; <https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html>):
//!
//! * candidates are keys `> start_after` that begin with `prefix`, in byte-wise order;
//! * with a (non-empty) delimiter, a key containing the delimiter after the prefix is
//!   rolled up into the common prefix `prefix + text up to and including the first
//!   delimiter after prefix`; every common prefix counts once toward `max_keys` and
//!   appears once across pages;
//! * a page ending on common prefix `P` reports `next_marker = P`; a later call with
//!   `start_after = P` skips every key beginning with `P` (otherwise `P` would be
//!   reported again, since keys under `P` sort after `P`);
//! * `max_keys == 0` gives an empty, untruncated page.
//!
//! Efficiency: the walk starts with a range query at `max(prefix, start_after)` and,
//! after emitting a common prefix `P`, restarts the range at the smallest string that
//! sorts after every string beginning with `P` ([`prefix_successor`]), so the cost is
//! O((items on the page) * log n), not O(keys under the rolled-up prefixes).

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::{ListPage, ObjectMeta};

/// The smallest string greater than every string that starts with `p`, or `None` if no
/// such string exists (every char of `p` is `char::MAX`). Byte-wise order of UTF-8 equals
/// char order, so bumping the last char that can be bumped gives the bound.
pub(crate) fn prefix_successor(p: &str) -> Option<String> {
    let mut chars: Vec<char> = p.chars().collect();
    while let Some(c) = chars.pop() {
        let next = match c {
            '\u{D7FF}' => Some('\u{E000}'),
            char::MAX => None,
            c => char::from_u32(c as u32 + 1),
        };
        if let Some(n) = next {
            chars.push(n);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The common prefix `key` rolls up into, if any.
fn rollup<'k>(key: &'k str, prefix: &str, delimiter: Option<&str>) -> Option<&'k str> {
    let d = delimiter.filter(|d| !d.is_empty())?;
    let rest = &key[prefix.len()..];
    rest.find(d).map(|pos| &key[..prefix.len() + pos + d.len()])
}

/// One page of the listing of `map`; `meta` picks the metadata out of an entry.
pub(crate) fn list_page<V>(
    map: &BTreeMap<String, V>,
    meta: impl Fn(&V) -> &ObjectMeta,
    prefix: &str,
    delimiter: Option<&str>,
    start_after: Option<&str>,
    max_keys: usize,
) -> ListPage {
    let mut page = ListPage::default();
    if max_keys == 0 {
        return page;
    }
    // Lower bound of the walk. `start_after` below the prefix is irrelevant; if it is
    // itself a common prefix, the keys under it were already reported as that prefix.
    let mut lower: Bound<String> = match start_after {
        Some(sa) if sa >= prefix => {
            if sa.starts_with(prefix) && rollup(sa, prefix, delimiter) == Some(sa) {
                match prefix_successor(sa) {
                    Some(s) => Bound::Included(s),
                    None => return page,
                }
            } else {
                Bound::Excluded(sa.to_string())
            }
        }
        _ => Bound::Included(prefix.to_string()),
    };
    let mut count = 0usize;
    let mut last: Option<String> = None;
    'walk: loop {
        let range = map.range::<str, _>((bound_ref(&lower), Bound::Unbounded));
        for (key, value) in range {
            #[cfg(test)]
            tests::VISITED.with(|v| v.set(v.get() + 1));
            if !key.starts_with(prefix) {
                break 'walk;
            }
            if let Some(cp) = rollup(key, prefix, delimiter) {
                if count == max_keys {
                    page.is_truncated = true;
                    break 'walk;
                }
                count += 1;
                page.common_prefixes.push(cp.to_string());
                last = Some(cp.to_string());
                match prefix_successor(cp) {
                    Some(s) => {
                        lower = Bound::Included(s);
                        continue 'walk;
                    }
                    None => break 'walk,
                }
            }
            if count == max_keys {
                page.is_truncated = true;
                break 'walk;
            }
            count += 1;
            page.objects.push(meta(value).clone());
            last = Some(key.clone());
        }
        break;
    }
    if page.is_truncated {
        page.next_marker = last;
    }
    page
}

fn bound_ref(b: &Bound<String>) -> Bound<&str> {
    match b {
        Bound::Included(s) => Bound::Included(s.as_str()),
        Bound::Excluded(s) => Bound::Excluded(s.as_str()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    thread_local! {
        /// Map entries `list_page` looked at on this thread (each test runs on its own).
        pub(super) static VISITED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[derive(Debug, Clone, PartialEq)]
    enum Item {
        Key(String),
        Prefix(String),
    }

    /// The obviously-correct model: walk every key.
    fn model(keys: &[String], prefix: &str, delim: Option<&str>, sa: Option<&str>) -> Vec<Item> {
        let mut sorted = keys.to_vec();
        sorted.sort();
        sorted.dedup();
        let mut out: Vec<Item> = Vec::new();
        for k in sorted {
            if !k.starts_with(prefix) || sa.is_some_and(|sa| k.as_str() <= sa) {
                continue;
            }
            match rollup(&k, prefix, delim) {
                Some(cp) => {
                    if Some(cp) == sa {
                        continue;
                    }
                    let item = Item::Prefix(cp.to_string());
                    if out.last() != Some(&item) {
                        out.push(item);
                    }
                }
                None => out.push(Item::Key(k.clone())),
            }
        }
        out
    }

    fn map_of(keys: &[String]) -> BTreeMap<String, ObjectMeta> {
        keys.iter().map(|k| (k.clone(), ObjectMeta::new(k.clone(), 0))).collect()
    }

    /// Pages through to the end, returning the items in order.
    fn page_all(
        map: &BTreeMap<String, ObjectMeta>,
        prefix: &str,
        delim: Option<&str>,
        sa: Option<&str>,
        max_keys: usize,
    ) -> Vec<Item> {
        let mut out = Vec::new();
        let mut marker = sa.map(str::to_string);
        for _ in 0..10_000 {
            let p = list_page(map, |m| m, prefix, delim, marker.as_deref(), max_keys);
            assert!(p.objects.len() + p.common_prefixes.len() <= max_keys);
            // Merge keys and prefixes back into walk order (they never compare equal:
            // a key equal to a common prefix is itself rolled up).
            let mut items: Vec<Item> = p
                .objects
                .iter()
                .map(|m| Item::Key(m.key.clone()))
                .chain(p.common_prefixes.iter().map(|c| Item::Prefix(c.clone())))
                .collect();
            items.sort_by(|a, b| item_str(a).cmp(item_str(b)));
            if p.is_truncated {
                assert_eq!(p.next_marker.as_deref(), items.last().map(item_str));
                assert!(!items.is_empty());
            } else {
                assert_eq!(p.next_marker, None);
            }
            out.extend(items);
            if !p.is_truncated {
                return out;
            }
            marker = p.next_marker;
        }
        panic!("listing did not terminate");
    }

    fn item_str(i: &Item) -> &str {
        match i {
            Item::Key(s) | Item::Prefix(s) => s,
        }
    }

    #[test]
    fn successor_bounds_every_extension() {
        assert_eq!(prefix_successor("a/").as_deref(), Some("a0"));
        assert_eq!(prefix_successor("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_successor("\u{10FFFF}"), None);
        let s = prefix_successor("x/é").unwrap();
        assert!(s.as_str() > "x/é\u{10FFFF}\u{10FFFF}");
    }

    #[test]
    fn max_keys_zero_is_empty_untruncated() {
        let m = map_of(&["a".into(), "b".into()]);
        assert_eq!(list_page(&m, |m| m, "", None, None, 0), ListPage::default());
    }

    #[test]
    fn page_ending_on_prefix_skips_it_next_time() {
        let keys: Vec<String> = ["a/1", "a/2", "b", "c/1", "c/2", "d"].iter().map(|s| s.to_string()).collect();
        let m = map_of(&keys);
        let p = list_page(&m, |m| m, "", Some("/"), None, 1);
        assert_eq!(p.common_prefixes, vec!["a/"]);
        assert!(p.is_truncated);
        assert_eq!(p.next_marker.as_deref(), Some("a/"));
        let p = list_page(&m, |m| m, "", Some("/"), Some("a/"), 2);
        assert_eq!(p.objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(p.common_prefixes, vec!["c/"]);
        assert_eq!(p.next_marker.as_deref(), Some("c/"));
        let p = list_page(&m, |m| m, "", Some("/"), Some("c/"), 2);
        assert_eq!(p.objects.len(), 1);
        assert!(!p.is_truncated);
    }

    #[test]
    fn multi_char_delimiter_and_prefix() {
        let keys: Vec<String> = ["p/x--1", "p/x--2", "p/y", "p--z", "q"].iter().map(|s| s.to_string()).collect();
        let m = map_of(&keys);
        let p = list_page(&m, |m| m, "p/", Some("--"), None, 10);
        assert_eq!(p.common_prefixes, vec!["p/x--"]);
        assert_eq!(p.objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), vec!["p/y"]);
    }

    /// 105,120 keys under 17,520 common prefixes (a year of 30-minute directories with
    /// six files each): paging the whole top level looks at one key per common prefix
    /// (the walk jumps past the rest, module note), not at every key under them.
    #[test]
    fn large_rollup_skips_the_keys_under_each_prefix() {
        let mut m = BTreeMap::new();
        for d in 0..17_520u32 {
            for f in 0..6u32 {
                let k = format!("logs/{d:06}/file-{f}");
                m.insert(k.clone(), ObjectMeta::new(k, 1));
            }
        }
        assert_eq!(m.len(), 105_120);
        VISITED.with(|v| v.set(0));
        let mut marker: Option<String> = None;
        let (mut prefixes, mut pages) = (0, 0);
        loop {
            let p = list_page(&m, |m| m, "logs/", Some("/"), marker.as_deref(), 1000);
            pages += 1;
            prefixes += p.common_prefixes.len();
            if !p.is_truncated {
                break;
            }
            marker = p.next_marker;
        }
        assert_eq!(prefixes, 17_520);
        let visited = VISITED.with(|v| v.get());
        // One key per prefix, plus at most one past the end of each page.
        assert!(visited <= 17_520 + pages, "looked at {visited} keys for 17,520 prefixes in {pages} pages");
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        proptest::collection::vec(prop::sample::select(vec!['a', 'b', '/', 'c', '-', 'é']), 1..7)
            .prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn paging_matches_brute_force(
            keys in proptest::collection::vec(key_strategy(), 0..60),
            prefix in prop::sample::select(vec!["", "a", "a/", "b/", "/", "ab", "é"]),
            delim in prop::sample::select(vec![None, Some("/"), Some("-"), Some("b/"), Some("")]),
            sa in prop::option::of(key_strategy()),
            max_keys in 1usize..6,
        ) {
            let m = map_of(&keys);
            let want = model(&keys, prefix, delim, sa.as_deref());
            let got = page_all(&m, prefix, delim, sa.as_deref(), max_keys);
            prop_assert_eq!(got, want);
        }
    }
}
