//! Wildcards and recursion: which objects or files a source names, as a stream.
//!
//! `*` matches within one path segment, `**` across segments, `?` one character
//! (globset with `literal_separator`, as in shells). s5cmd's `*` also crosses `/`; ferry
//! keeps the shell's meaning so `dir/*.txt` does not reach into subdirectories, and `**`
//! says so when that is wanted (`dir/**.txt`, `dir/**/*.txt`). globset only gives `**`
//! its meaning as a whole segment, so a segment like `**.txt` is rewritten first to
//! `{*.txt,**/*.txt}` ([`rewrite_double_star`]).
//!
//! An S3 pattern is listed from its literal prefix (the text before the first wildcard),
//! without a delimiter, and each key is matched as the pages arrive: memory holds one
//! page (1,000 keys), whatever the number of keys. The name an item gets at the
//! destination is its key relative to the last `/` of that literal prefix (the pattern's
//! directory), so `s3://b/logs/2024-*` copies `2024-01/...` into the target, as s5cmd
//! and the AWS CLI do. A local tree is walked depth first in S3 key order ([`walk`]),
//! so both kinds of source come out sorted the same way.
//!
//! Keys may contain `*` and `?` themselves (S3 allows any UTF-8). A verb that takes one
//! object (`cat`, `stat`, `cp` of one source to a file) tries the key literally first
//! and reads it as a pattern only when no such object exists ([`Literal`]); `--raw`
//! (s5cmd's flag) turns patterns off altogether, so a key or prefix is always itself
//! ([`Pattern::under`]). `sync` takes its prefixes literally, always.

use anyhow::{Context, Result};
use ferry_engine::Engine;
use ferry_store::{ListParams, ObjectEntry, ObjectInfo, ObjectRef};
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use globset::{GlobBuilder, GlobMatcher};
use std::path::{Path, PathBuf};

pub fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?'])
}

/// How a verb reads the `*` and `?` in a key (module note).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Literal {
    /// `--raw`: the key is itself, never a pattern.
    Always,
    /// The key is itself when an object of that name exists, else a pattern.
    First,
}

impl Literal {
    /// `--raw` or not.
    pub fn from_raw(raw: bool) -> Literal {
        if raw {
            Literal::Always
        } else {
            Literal::First
        }
    }
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
                .map_err(|e| crate::common::usage(format!("bad wildcard {key:?}: {e}")))?;
            Ok(Pattern { prefix, base, matcher: Some(glob.compile_matcher()) })
        } else {
            debug_assert!(recursive);
            Ok(Pattern::under(key))
        }
    }

    /// Everything under `key` taken literally as a directory (`a*b` names `a*b/...`):
    /// `--raw`, and sync's prefixes.
    pub fn under(key: &str) -> Pattern {
        let dir = if key.is_empty() || key.ends_with('/') { key.to_owned() } else { format!("{key}/") };
        Pattern { prefix: dir.clone(), base: dir, matcher: None }
    }

    pub fn matches(&self, key: &str) -> bool {
        key.starts_with(&self.prefix) && self.matcher.as_ref().is_none_or(|m| m.is_match(key))
    }

    /// The name under the destination.
    pub fn relative<'a>(&self, key: &'a str) -> &'a str {
        key.strip_prefix(self.base.as_str()).unwrap_or(key)
    }
}

/// Objects of `bucket` that `pattern` names, streamed page by page. Keys ending in `/`
/// (folder markers) are left out unless `markers`.
pub fn list_matching(
    client: &Engine,
    bucket: &str,
    pattern: Pattern,
    markers: bool,
) -> BoxStream<'static, Result<ObjectEntry>> {
    let params =
        ListParams { prefix: (!pattern.prefix.is_empty()).then(|| pattern.prefix.clone()), ..Default::default() };
    let b = format!("{}://{bucket}/", client.provider());
    client
        .list(bucket, params)
        .map_err(move |e| anyhow::Error::new(e).context(format!("listing {b}")))
        .map_ok(move |page| {
            let pattern = pattern.clone();
            futures_util::stream::iter(
                page.objects
                    .into_iter()
                    .filter(move |o| pattern.matches(&o.key) && (markers || !o.key.ends_with('/')))
                    .map(Ok),
            )
        })
        .try_flatten()
        .boxed()
}

/// What names one object: the key itself (with what HEAD said when it was asked), or
/// a pattern to expand.
pub enum OneObject {
    Itself(Option<ObjectInfo>),
    Pattern,
}

/// Whether `key` names itself or a pattern (module note): without wildcards or with
/// `--raw` it is itself, unasked; else a HEAD of the literal key decides, and only a
/// 404 makes it a pattern.
pub async fn literal_or_pattern(client: &Engine, obj: &ObjectRef, literal: Literal) -> Result<OneObject> {
    if literal == Literal::Always || !has_wildcard(&obj.key) {
        return Ok(OneObject::Itself(None));
    }
    match client.head(obj).await {
        Ok(info) => Ok(OneObject::Itself(Some(info))),
        Err(e) if e.is_not_found() => Ok(OneObject::Pattern),
        Err(e) => Err(anyhow::Error::new(e).context(obj.to_string())),
    }
}

/// The one object a verb that takes one object (`cat`, `stat`) reads: the key itself
/// when it exists, else the single object its pattern matches. Several matches is a
/// usage error, none a not-found that says the key was tried both ways.
pub async fn one_object(client: &Engine, obj: &ObjectRef, literal: Literal, verb: &str) -> Result<ObjectRef> {
    match literal_or_pattern(client, obj, literal).await? {
        OneObject::Itself(_) => Ok(obj.clone()),
        OneObject::Pattern => {
            let name = obj.to_string();
            let pattern = Pattern::new(&obj.key, false)?;
            let found: Vec<ObjectEntry> =
                list_matching(client, &obj.bucket, pattern, false).take(2).try_collect().await?;
            match &found[..] {
                [one] => Ok(obj.at(one.key.clone())),
                [] => {
                    Err(anyhow::anyhow!("{name}: not found: no object has this key, and as a wildcard it matches none"))
                }
                _ => Err(crate::common::usage(format!(
                    "{name} matches several objects as a wildcard and names none itself: {verb} takes one object \
                     (ferry ls lists the matches; --raw takes the key literally)"
                ))),
            }
        }
    }
}

/// A local file found by [`walk`]: its path and its name relative to the pattern's base.
#[derive(Clone, Debug)]
pub struct LocalFile {
    pub path: PathBuf,
    pub rel: String,
    pub size: u64,
    pub mtime: std::time::SystemTime,
}

/// Files under `root` (recursively) whose path relative to `root` `keep` accepts, in
/// S3 key order: the UTF-8 byte order of the relative names, as ListObjectsV2 returns
/// keys, so `sync` can merge-join a directory with a listing.
///
/// Each directory's entries are sorted with a subdirectory compared as `name + "/"`,
/// and the walk descends into it at that place, depth first. Every key below `d/`
/// starts with `d/`, so the keys of a subtree are contiguous in byte order and sit
/// exactly where `d/` sorts among its siblings (`a-` < `a/...` < `a0`, since
/// `-` < `/` < `0`); by induction the whole walk is sorted. Memory holds one sorted
/// entry list per directory on the current path: depth x directory width.
pub fn walk(
    root: &Path,
    keep: impl Fn(&str) -> bool + Send + 'static,
) -> impl Iterator<Item = Result<LocalFile>> + Send {
    struct Frame {
        rel: String,
        entries: std::vec::IntoIter<Entry>,
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut root = Some(root.to_path_buf());
    let opened = |dir: &Path, rel: String| match read_sorted(dir) {
        Ok(entries) => Ok(Frame { rel, entries: entries.into_iter() }),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading directory {}", dir.display()))),
    };
    std::iter::from_fn(move || loop {
        if let Some(r) = root.take() {
            match opened(&r, String::new()) {
                Ok(f) => stack.push(f),
                Err(e) => return Some(Err(e)),
            }
        }
        let frame = stack.last_mut()?;
        let Some(e) = frame.entries.next() else {
            stack.pop();
            continue;
        };
        let r = if frame.rel.is_empty() { e.name } else { format!("{}/{}", frame.rel, e.name) };
        if e.dir {
            match opened(&e.path, r) {
                Ok(f) => stack.push(f),
                Err(e) => return Some(Err(e)),
            }
            continue;
        }
        if let Ok(md) = std::fs::metadata(&e.path) {
            // Symlinks to files are followed; symlinked directories are not (loops).
            if md.is_file() && keep(&r) && !is_partial(&r) {
                return Some(Ok(LocalFile {
                    path: e.path,
                    rel: r,
                    size: md.len(),
                    mtime: md.modified().unwrap_or(std::time::UNIX_EPOCH),
                }));
            }
        }
    })
}

/// One directory entry of [`walk`]: its name as a key segment (lossy UTF-8).
struct Entry {
    name: String,
    path: PathBuf,
    dir: bool,
}

/// A directory's entries in the order their keys sort: a subdirectory as `name + "/"`.
fn read_sorted(dir: &Path) -> std::io::Result<Vec<Entry>> {
    let mut v: Vec<Entry> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let dir = e.file_type().ok()?.is_dir();
            Some(Entry { name: e.file_name().to_string_lossy().into_owned(), path: e.path(), dir })
        })
        .collect();
    let key = |e: &Entry| e.name.as_bytes().iter().copied().chain(e.dir.then_some(b'/')).collect::<Vec<u8>>();
    v.sort_by_cached_key(key);
    Ok(v)
}

/// Temp and state files of ferry's own interrupted downloads are never sources.
fn is_partial(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.starts_with('.')
        && (name.ends_with(".ferry-part") || name.ends_with(".ferry-state") || name.ends_with(".ferry-state-new"))
}

/// Local files a source names: a directory (recursive), or a path with wildcards
/// (`wild`: a path of that very name does not exist, and `--raw` is not given).
pub fn local_matching(
    src: &Path,
    recursive: bool,
    wild: bool,
) -> Result<Box<dyn Iterator<Item = Result<LocalFile>> + Send>> {
    let s = src.to_string_lossy().into_owned();
    if wild {
        let first = s.find(['*', '?']).unwrap_or(s.len());
        let (root, pat) = match s[..first].rfind('/') {
            Some(i) => (s[..=i].to_owned(), s[i + 1..].to_owned()),
            None => ("./".to_owned(), s.clone()),
        };
        let glob = GlobBuilder::new(&rewrite_double_star(&pat))
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| crate::common::usage(format!("bad wildcard {s:?}: {e}")))?
            .compile_matcher();
        Ok(Box::new(walk(Path::new(&root), move |rel| glob.is_match(rel))))
    } else {
        let md = std::fs::metadata(src).with_context(|| format!("{}", src.display()))?;
        if !md.is_dir() {
            anyhow::bail!("{} is not a directory", src.display());
        }
        let _ = recursive;
        Ok(Box::new(walk(src, |_| true)))
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

    #[test]
    fn walk_is_sorted_and_skips_partials() {
        let d = tempfile::tempdir().unwrap();
        for f in ["b.txt", "a/z.txt", "a/y.bin", ".x.ferry-part", "c/.k.ferry-state"] {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        let got: Vec<String> = walk(d.path(), |_| true).map(|f| f.unwrap().rel).collect();
        assert_eq!(got, vec!["a/y.bin", "a/z.txt", "b.txt"]);
        let txt: Vec<String> = walk(d.path(), |r| r.ends_with(".txt")).map(|f| f.unwrap().rel).collect();
        assert_eq!(txt, vec!["a/z.txt", "b.txt"]);
    }

    /// Creates `paths` (skipping any that a file already blocks) and returns the files.
    fn make_tree(root: &Path, paths: &[String]) -> Vec<String> {
        let mut made: Vec<String> = Vec::new();
        for p in paths {
            let blocked =
                made.iter().any(|m| p == m || p.starts_with(&format!("{m}/")) || m.starts_with(&format!("{p}/")));
            if blocked {
                continue;
            }
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, p.as_bytes()).unwrap();
            made.push(p.clone());
        }
        made
    }

    #[test]
    fn walk_is_in_s3_key_order_at_the_tricky_names() {
        let d = tempfile::tempdir().unwrap();
        let names: Vec<String> = ["a.b", "a/x", "a/y/z", "a-", "a0", "a", "ab", "é/1", "z", "A", "a b/c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut want = make_tree(d.path(), &names);
        want.sort();
        let got: Vec<String> = walk(d.path(), |_| true).map(|f| f.unwrap().rel).collect();
        assert_eq!(got, want);
        assert_eq!(got, vec!["A", "a b/c", "a-", "a.b", "a/x", "a/y/z", "a0", "ab", "z", "é/1"]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// The walk equals a brute-force listing sorted by bytes, for trees of names
        /// around '/' in byte order ('-' and '.' below it, '0' above) and non-ASCII.
        #[test]
        fn walk_equals_the_sorted_listing(paths in proptest::collection::vec(
            proptest::collection::vec(proptest::sample::select(vec!["a", "a.b", "a-", "a0", "a b", "b", "é", "ä", "z", "Z", "~", "aa", "_", "a~"]), 1..5),
            0..40,
        )) {
            let d = tempfile::tempdir().unwrap();
            let paths: Vec<String> = paths.iter().map(|segs| segs.join("/")).collect();
            let mut want = make_tree(d.path(), &paths);
            want.sort();
            want.dedup();
            let got: Vec<String> = walk(d.path(), |_| true).map(|f| f.unwrap().rel).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
