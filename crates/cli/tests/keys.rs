//! Keys as users name them, end to end: the `ferry` binary under test against an
//! in-process `ferry serve` (memory and disk backends) on a real socket.
//!
//! A key may hold anything S3 allows: spaces, `+`, `%`, `?`, `*`, tabs, non-ASCII, and
//! up to 1,024 bytes. Generated sets of such keys are uploaded (one `cp` per file, and a
//! `cp --recursive` of a tree named by the keys), then read back through `ls`, `cat`,
//! `stat`, `cp` to a file and `sync` both ways, and removed with `rm --raw`: every byte
//! and every name must come back as it went in. The names avoid what a local file
//! system cannot hold (a segment above 255 bytes, `.`/`..`, empty segments), since
//! each key is also a file here.
//!
//! The named tests freeze the cases the brief started from: `cp 's3://b/q?mark.txt'
//! ./q.txt` writes the file `q.txt` (it once wrote `./q.txt/q?mark.txt`), and `cat` and
//! `stat` take a key with `*` or `?` (they once refused it as a pattern).

use ferry_testkit::{FerryServe, Served};
use proptest::prelude::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn ferry(srv: &Served) -> Command {
    ferry_testkit::cli::command(env!("CARGO_BIN_EXE_ferry"), &srv.url())
}

fn run(srv: &Served, args: &[&str]) -> Output {
    ferry(srv).args(args).stdin(Stdio::null()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    text(&ok_bytes(o))
}

#[track_caller]
fn ok_bytes(o: &Output) -> Vec<u8> {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status.code(), text(&o.stdout), text(&o.stderr));
    o.stdout.clone()
}

/// The keys of `ferry --json ls --recursive URL`, sorted.
fn listed(srv: &Served, url: &str) -> Vec<String> {
    let out = ok(&run(srv, &["--json", "ls", "--recursive", url]));
    let mut keys: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    keys
}

/// Files under `root`, as (relative name, bytes), sorted.
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out.sort();
    out
}

fn server(disk: bool) -> Served {
    let s = FerryServe::new();
    if disk {
        s.disk().start()
    } else {
        s.memory().start()
    }
}

/// Every verb over `keys` (distinct, none a prefix directory of another) with
/// `contents`, in bucket `bucket` of `srv`.
fn round_trip(srv: &Served, bucket: &str, keys: &[String], contents: &[Vec<u8>]) {
    let dir = tempfile::tempdir().unwrap();
    let base = format!("s3://{bucket}");
    ok(&run(srv, &["mb", &base]));
    // One cp per file: the key is the destination's, taken as given.
    let one = dir.path().join("one");
    std::fs::create_dir_all(&one).unwrap();
    for (i, (k, c)) in keys.iter().zip(contents).enumerate() {
        let f = one.join(format!("f{i}"));
        std::fs::write(&f, c).unwrap();
        ok(&run(srv, &["cp", f.to_str().unwrap(), &format!("{base}/p/{k}")]));
    }
    let mut want: Vec<String> = keys.iter().map(|k| format!("p/{k}")).collect();
    want.sort();
    assert_eq!(listed(srv, &format!("{base}/p/")), want, "ls --recursive");
    for (k, c) in keys.iter().zip(contents) {
        let url = format!("{base}/p/{k}");
        let got = run(srv, &["cat", &url]);
        assert!(ok_bytes(&got) == *c, "cat {url:?}: other bytes");
        assert!(ok_bytes(&run(srv, &["cat", "--raw", &url])) == *c, "cat --raw {url:?}: other bytes");
        let stat: serde_json::Value = serde_json::from_str(ok(&run(srv, &["--json", "stat", &url])).trim()).unwrap();
        assert_eq!(stat["key"].as_str(), Some(format!("p/{k}").as_str()), "stat {url:?}");
        assert_eq!(stat["size"].as_u64(), Some(c.len() as u64), "stat {url:?}");
        let file = dir.path().join("got.bin");
        ok(&run(srv, &["cp", &url, file.to_str().unwrap()]));
        assert!(file.is_file(), "cp {url:?} made {} a directory", file.display());
        assert!(std::fs::read(&file).unwrap() == *c, "cp {url:?} to a file: other bytes");
        std::fs::remove_file(&file).unwrap();
    }
    // A tree named by the keys: cp --recursive up, sync down, sync up elsewhere.
    let src = dir.path().join("src");
    for (k, c) in keys.iter().zip(contents) {
        let f = src.join(k);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, c).unwrap();
    }
    let src_tree = tree(&src);
    ok(&run(srv, &["cp", "--recursive", src.to_str().unwrap(), &format!("{base}/r/")]));
    let want_r: Vec<String> = src_tree.iter().map(|(rel, _)| format!("r/{rel}")).collect();
    assert_eq!(listed(srv, &format!("{base}/r/")), want_r, "cp --recursive up");
    let mirror = dir.path().join("mirror");
    ok(&run(srv, &["sync", &format!("{base}/p/"), mirror.to_str().unwrap()]));
    let names = |t: &[(String, Vec<u8>)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&tree(&mirror)), names(&src_tree), "sync down: names");
    assert!(tree(&mirror) == src_tree, "sync down: other bytes");
    assert_eq!(ok(&run(srv, &["sync", &format!("{base}/p/"), mirror.to_str().unwrap()])), "", "second sync down");
    ok(&run(srv, &["sync", src.to_str().unwrap(), &format!("{base}/s/")]));
    let want_s: Vec<String> = src_tree.iter().map(|(rel, _)| format!("s/{rel}")).collect();
    assert_eq!(listed(srv, &format!("{base}/s/")), want_s, "sync up");
    assert_eq!(ok(&run(srv, &["sync", src.to_str().unwrap(), &format!("{base}/s/")])), "", "second sync up");
    // rm --raw takes each key as itself, whatever it holds.
    for k in keys {
        ok(&run(srv, &["rm", "--raw", &format!("{base}/p/{k}")]));
    }
    assert!(listed(srv, &format!("{base}/p/")).is_empty(), "rm --raw left keys");
    ok(&run(srv, &["rm", "--recursive", &format!("{base}/")]));
    assert!(listed(srv, &format!("{base}/")).is_empty(), "rm --recursive left keys");
    ok(&run(srv, &["rb", &base]));
}

/// A key segment: the characters users put in names that URLs, signing, XML or file
/// systems treat specially, and plain ones.
fn segment(max_chars: usize) -> impl Strategy<Value = String> {
    let chars = prop::sample::select(vec![
        'a', 'b', 'Z', '0', ' ', '+', '%', '?', '*', '\t', '#', '&', '=', '~', '!', '(', ')', ',', ';', '@', '$', '\'',
        '"', '<', '>', '[', ']', '{', '}', '^', '`', '|', '\\', '-', '_', '.', ':', 'é', 'ß', '日', '🦀',
    ]);
    prop::collection::vec(chars, 1..=max_chars)
        .prop_map(|v| v.into_iter().collect::<String>())
        .prop_filter("a file system name", |s| s != "." && s != ".." && s.len() <= 255)
}

/// A key of one to three segments (below 1,024 bytes), or a long one of up to four
/// 240-byte segments.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::collection::vec(segment(12), 1..=3).prop_map(|v| v.join("/")),
        1 => prop::collection::vec(segment(60), 4).prop_map(|v| {
            v.into_iter().map(|s| s.chars().cycle().take(240).collect::<String>())
                .map(|s| { let mut s = s; while s.len() > 240 { s.pop(); } s })
                .collect::<Vec<_>>()
                .join("/")
        }),
    ]
    .prop_filter("within S3's 1,024 bytes with its prefix", |k| k.len() <= 1000)
}

/// Keys none of which is a directory of another (a file and a directory cannot share
/// a name locally), each with its contents.
fn key_set() -> impl Strategy<Value = (Vec<String>, Vec<Vec<u8>>)> {
    prop::collection::btree_set(key(), 1..5)
        .prop_map(|set| {
            let v: Vec<String> = set.into_iter().collect();
            v.iter()
                .filter(|k| {
                    !v.iter().any(|o| o != *k && (o.starts_with(&format!("{k}/")) || k.starts_with(&format!("{o}/"))))
                })
                .cloned()
                .collect::<Vec<String>>()
        })
        .prop_filter("at least one key", |v| !v.is_empty())
        .prop_flat_map(|keys| {
            let n = keys.len();
            (Just(keys), prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), n))
        })
}

fn cases() -> ProptestConfig {
    // Each case runs ~10 processes per key; 24 cases per backend keep the file within ~20 s.
    ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn odd_keys_round_trip_on_memory((keys, contents) in key_set()) {
        let srv = server(false);
        round_trip(&srv, "odd-keys", &keys, &contents);
    }

    #[test]
    fn odd_keys_round_trip_on_disk((keys, contents) in key_set()) {
        let srv = server(true);
        round_trip(&srv, "odd-keys", &keys, &contents);
    }
}

/// The shapes the brief named, each on both backends.
#[test]
fn named_odd_keys_round_trip() {
    let keys: Vec<String> = [
        "q?mark.txt",
        "st*r.txt",
        "a b/c+d%20e.txt",
        "tab\there",
        "ünï/日本/🦀.bin",
        "x%2Fy",
        "[abc]{d,e}",
        "back\\slash",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let long = ["a".repeat(240), "b".repeat(240), "c".repeat(240), "d".repeat(240)].join("/");
    let keys: Vec<String> = keys.into_iter().chain([long]).collect();
    let contents: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().repeat(3)).collect();
    for disk in [false, true] {
        round_trip(&server(disk), "named-keys", &keys, &contents);
    }
}

/// `cp 's3://b/q?mark.txt' ./q.txt` writes the file q.txt when that object exists; a
/// key that names no object is still a pattern; `--raw` never expands.
#[test]
fn a_key_that_exists_is_itself_not_a_pattern() {
    let srv = server(false);
    let dir = tempfile::tempdir().unwrap();
    ok(&run(&srv, &["mb", "s3://lit"]));
    let f = dir.path().join("src");
    for (key, body) in [("q?mark.txt", "literal"), ("qXmark.txt", "other"), ("st*r.txt", "star")] {
        std::fs::write(&f, body).unwrap();
        ok(&run(&srv, &["cp", f.to_str().unwrap(), &format!("s3://lit/{key}")]));
    }
    let q = dir.path().join("q.txt");
    ok(&run(&srv, &["cp", "s3://lit/q?mark.txt", q.to_str().unwrap()]));
    assert_eq!(std::fs::read_to_string(&q).unwrap(), "literal");
    assert_eq!(ok(&run(&srv, &["cat", "s3://lit/q?mark.txt"])), "literal");
    assert_eq!(ok(&run(&srv, &["cat", "s3://lit/st*r.txt"])), "star");
    assert!(ok(&run(&srv, &["stat", "s3://lit/st*r.txt"])).contains("Size:          4"));
    // presign names the key as given, its `*` percent-encoded in the URL.
    assert!(ok(&run(&srv, &["presign", "s3://lit/st*r.txt"])).contains("/lit/st%2Ar.txt?"));
    // No object is named `q*`: a pattern, matching two, copied into a directory.
    let d = dir.path().join("d");
    ok(&run(&srv, &["cp", "s3://lit/q*", &format!("{}/", d.display())]));
    assert_eq!(std::fs::read_to_string(d.join("q?mark.txt")).unwrap(), "literal");
    assert_eq!(std::fs::read_to_string(d.join("qXmark.txt")).unwrap(), "other");
    // One match: cat reads it; several: a usage error that says what to do.
    assert_eq!(ok(&run(&srv, &["cat", "s3://lit/s*"])), "star");
    let several = run(&srv, &["cat", "s3://lit/q*"]);
    assert_eq!(several.status.code(), Some(2), "{}", text(&several.stderr));
    assert!(text(&several.stderr).contains("matches several objects"), "{}", text(&several.stderr));
    // --raw: `q*` is a key, and there is none.
    let raw = run(&srv, &["cat", "--raw", "s3://lit/q*"]);
    assert_eq!(raw.status.code(), Some(1));
    assert!(text(&raw.stderr).contains("s3://lit/q*: not found"), "{}", text(&raw.stderr));
    let raw_cp = run(&srv, &["cp", "--raw", "s3://lit/q*", dir.path().join("none").to_str().unwrap()]);
    assert_eq!(raw_cp.status.code(), Some(1));
    assert!(!dir.path().join("none").exists());
    // rm: a pattern by default (its dry run counts), the key alone with --raw.
    let dry = ok(&run(&srv, &["rm", "--dry-run", "s3://lit/q*"]));
    assert!(dry.ends_with("(dry run) 2 objects match s3://lit/q*\n"), "{dry}");
    let dry_json = ok(&run(&srv, &["--json", "rm", "--dry-run", "s3://lit/q?mark.txt"]));
    let last: serde_json::Value = serde_json::from_str(dry_json.lines().last().unwrap()).unwrap();
    assert_eq!(last["matched"].as_u64(), Some(2), "{dry_json}");
    ok(&run(&srv, &["rm", "--raw", "s3://lit/q?mark.txt"]));
    assert_eq!(listed(&srv, "s3://lit/"), vec!["qXmark.txt", "st*r.txt"]);
    // ls --raw lists by the literal prefix: `st*` is not a pattern there.
    assert_eq!(ok(&run(&srv, &["ls", "--raw", "s3://lit/s*"])), "");
    assert!(ok(&run(&srv, &["ls", "--raw", "s3://lit/st*"])).contains("st*r.txt"));
}

/// A local file whose name holds `*` or `?` is itself when it exists.
#[test]
fn a_local_file_named_with_a_wildcard_is_itself() {
    let srv = server(false);
    let dir = tempfile::tempdir().unwrap();
    ok(&run(&srv, &["mb", "s3://loc"]));
    let f = dir.path().join("what?.txt");
    std::fs::write(&f, "q").unwrap();
    std::fs::write(dir.path().join("whatX.txt"), "x").unwrap();
    ok(&run(&srv, &["cp", f.to_str().unwrap(), "s3://loc/"]));
    assert_eq!(listed(&srv, "s3://loc/"), vec!["what?.txt"]);
}

/// Keys no local file can be named (a 1,000-byte segment, `..`, `a/./b`, `a//b`):
/// uploaded, listed, read with cat, stat and a cp to a file, removed, on both backends.
/// A download of the whole prefix refuses the ones that would leave its directory.
#[test]
fn keys_no_file_can_be_named_still_round_trip() {
    let keys = ["k".repeat(1000), "..".into(), "a/./b".into(), "a/../b".into(), "a//b".into(), "é".repeat(500)];
    for disk in [false, true] {
        let srv = server(disk);
        let dir = tempfile::tempdir().unwrap();
        ok(&run(&srv, &["mb", "s3://srv-keys"]));
        let f = dir.path().join("src");
        for k in &keys {
            std::fs::write(&f, k.as_bytes()).unwrap();
            ok(&run(&srv, &["cp", f.to_str().unwrap(), &format!("s3://srv-keys/{k}")]));
        }
        let mut want: Vec<String> = keys.to_vec();
        want.sort();
        assert_eq!(listed(&srv, "s3://srv-keys/"), want);
        for k in &keys {
            let url = format!("s3://srv-keys/{k}");
            assert_eq!(ok(&run(&srv, &["cat", &url])), *k);
            assert!(ok(&run(&srv, &["stat", &url])).contains(&format!("Size:          {}", k.len())));
            let out = dir.path().join("out");
            ok(&run(&srv, &["cp", &url, out.to_str().unwrap()]));
            assert_eq!(std::fs::read_to_string(&out).unwrap(), *k);
        }
        let down = dir.path().join("down");
        let o = run(&srv, &["cp", "--recursive", "s3://srv-keys/", down.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains("would leave the destination directory"), "{}", text(&o.stderr));
        assert!(!dir.path().join("b").exists(), "a key's `..` reached outside the destination");
        for k in &keys {
            ok(&run(&srv, &["rm", "--raw", &format!("s3://srv-keys/{k}")]));
        }
        assert!(listed(&srv, "s3://srv-keys/").is_empty());
    }
}
