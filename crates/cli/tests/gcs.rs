//! End to end, the `ferry` binary under test with `gs://` URLs against fake-gcs-server
//! (a third-party emulator of Google Cloud Storage's JSON API, `ferry_testkit::fake_gcs`):
//!
//! - the verbs: `mb`, `cp` up (small, and past the part size: a composite upload) and
//!   down (ranged parallel GETs pinned to a generation), `cp -` from stdin, `ls`,
//!   `stat` (the stored CRC32C), `cat`, `ls/rm --incomplete` (uploads in progress), `rm`,
//!   `rm --recursive`, `rb`; an interrupted upload's parts (and parts left without their
//!   marker) removed by `rm -r` of the bucket and by `rm --incomplete`, `rb` saying why it
//!   cannot remove a bucket that still holds them;
//! - `sync` both ways, idempotent, and `--checksum` comparing GCS's CRC32C with local
//!   bytes;
//! - the endpoint from `STORAGE_EMULATOR_HOST` (Google's clients' variable) or from
//!   `--endpoint-url` with `--no-sign-request`, over https with `--ca-bundle` (h2).
//!
//! The emulator runs as a child on a free loopback port; the tests are `#[ignore]`d and
//! run by scripts/test.sh where scripts/setup.sh could build it.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn ferry_emulator(url: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    c.env("STORAGE_EMULATOR_HOST", url.trim_start_matches("http://"))
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env("CLOUDSDK_CONFIG", "/nonexistent/gcloud")
        .env_remove("AWS_ENDPOINT_URL")
        .stdin(Stdio::null());
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(o: Output) -> String {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status.code(), text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

fn run(url: &str, args: &[&str]) -> Output {
    ferry_emulator(url).args(args).output().unwrap()
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + seed as usize) % 251) as u8).collect()
}

fn bucket(base: &str) -> String {
    format!("{base}-{}", std::process::id())
}

#[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
#[test]
fn verbs_over_gs_urls() {
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let url = g.url();
    let b = bucket("cliverbs");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let big = data(21 << 20, 1);
    std::fs::write(d.join("big.bin"), &big).unwrap();
    std::fs::write(d.join("small.txt"), b"small\n").unwrap();
    let gs = |k: &str| format!("gs://{b}/{k}");
    let p = |n: &str| d.join(n).to_str().unwrap().to_owned();

    ok(run(&url, &["mb", &format!("gs://{b}")]));
    assert!(ok(run(&url, &["ls", "gs://"])).contains(&format!("gs://{b}")));
    ok(run(&url, &["cp", &p("small.txt"), &gs("a/small.txt")]));
    ok(run(&url, &["cp", "--part-size", "5MiB", &p("big.bin"), &gs("a/big.bin")]));
    let top = ok(run(&url, &["ls", &format!("gs://{b}/")]));
    assert!(top.contains("a/") && !top.contains(".ferry-upload"), "{top}");
    let listed = ok(run(&url, &["ls", &gs("a/")]));
    assert!(listed.contains("a/big.bin") && listed.contains(&(21u64 << 20).to_string()), "{listed}");
    let stat = ok(run(&url, &["stat", &gs("a/big.bin")]));
    assert!(stat.contains("CRC32C") && stat.contains(&format!("gs://{b}/a/big.bin")), "{stat}");
    assert_eq!(ok(run(&url, &["cat", &gs("a/small.txt")])), "small\n");
    ok(run(&url, &["cp", "--part-size", "5MiB", &gs("a/big.bin"), &p("down.bin")]));
    assert!(std::fs::read(d.join("down.bin")).unwrap() == big, "downloaded bytes differ");

    // From stdin, longer than a part: streamed, parts composed.
    let piped = data(13 << 20, 2);
    let mut child = ferry_emulator(&url)
        .args(["cp", "--part-size", "5MiB", "-", &gs("stdin.bin")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let payload = piped.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&payload).unwrap());
    ok(child.wait_with_output().unwrap());
    writer.join().unwrap();
    let cat = ferry_emulator(&url).args(["cat", &gs("stdin.bin")]).output().unwrap();
    assert!(cat.status.success() && cat.stdout == piped, "cat of the streamed object differs");

    // Errors name what is missing and fail.
    let missing = run(&url, &["cat", &gs("nope")]);
    assert!(!missing.status.success());
    assert!(text(&missing.stderr).contains("not found"), "{}", text(&missing.stderr));

    // An upload left in progress (parts under the hidden prefix): listed, then aborted.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = {
        let mut o = ferry_store::StoreOptions::new(url.clone());
        o.credentials = ferry_store::CredentialsSource::Anonymous;
        ferry_store::connect(ferry_store::Provider::Gcs, o).unwrap()
    };
    let left = ferry_store::ObjectRef::new(b.as_str(), "left/behind.bin");
    rt.block_on(async {
        let up = store.create_upload(&left, &ferry_store::PutParams::default()).await.unwrap();
        store.upload_part(&up, 1, ferry_store::PartPayload::Bytes(data(1000, 3).into())).await.unwrap();
    });
    let inc = ok(run(&url, &["ls", "--incomplete", &format!("gs://{b}/")]));
    assert!(inc.contains("left/behind.bin"), "{inc}");
    ok(run(&url, &["rm", "--incomplete", &format!("gs://{b}/left/")]));
    assert!(rt.block_on(store.list_uploads(&b, "")).unwrap().is_empty());
    assert_eq!(ok(run(&url, &["ls", "--incomplete", &format!("gs://{b}/")])).trim(), "");

    ok(run(&url, &["rm", &gs("a/small.txt")]));
    assert!(!run(&url, &["stat", &gs("a/small.txt")]).status.success());
    ok(run(&url, &["rm", "--recursive", &format!("gs://{b}/")]));
    assert_eq!(ok(run(&url, &["ls", &format!("gs://{b}/")])).trim(), "");
    ok(run(&url, &["rb", &format!("gs://{b}")]));
    assert!(!ok(run(&url, &["ls", "gs://"])).contains(&format!("gs://{b}")));
}

fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.strip_prefix(root).unwrap().display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
#[test]
fn sync_both_ways_and_by_checksum() {
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let url = g.url();
    let b = bucket("clisync");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    for (i, name) in ["one.txt", "d/two.txt", "d/e/three.bin"].iter().enumerate() {
        std::fs::write(src.join(name), data(1000 * (i + 1), i as u8)).unwrap();
    }
    let remote = format!("gs://{b}/tree/");
    ok(run(&url, &["mb", &format!("gs://{b}")]));
    let first = ok(run(&url, &["sync", src.to_str().unwrap(), &remote]));
    assert_eq!(first.lines().filter(|l| l.starts_with("cp ")).count(), 3, "{first}");
    let again = ok(run(&url, &["sync", src.to_str().unwrap(), &remote]));
    assert_eq!(again.trim(), "", "a second sync copies nothing");
    // Same size, other bytes, and an older mtime: only --checksum sees the change.
    let changed = data(1000, 9);
    std::fs::write(src.join("one.txt"), &changed).unwrap();
    let f = std::fs::File::options().write(true).open(src.join("one.txt")).unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000)).unwrap();
    assert_eq!(ok(run(&url, &["sync", src.to_str().unwrap(), &remote])).trim(), "");
    let by_sum = ok(run(&url, &["sync", "--checksum", src.to_str().unwrap(), &remote]));
    assert!(by_sum.contains("one.txt") && by_sum.lines().count() == 1, "{by_sum}");
    ok(run(&url, &["sync", &remote, dst.to_str().unwrap()]));
    assert_eq!(tree(&dst), tree(&src));
    assert_eq!(ok(run(&url, &["sync", &remote, dst.to_str().unwrap()])).trim(), "");
}

#[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
#[test]
fn endpoint_flag_over_https_h2() {
    let g = ferry_testkit::fake_gcs::fake_gcs_tls();
    let ca = g.ca_file.as_ref().unwrap().to_str().unwrap().to_owned();
    let endpoint = g.url();
    let b = bucket("clitls");
    let ferry = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
        c.args(["--endpoint-url", &endpoint, "--no-sign-request", "--ca-bundle", &ca, "--transport", "h2"])
            .args(args)
            .env_remove("STORAGE_EMULATOR_HOST")
            .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
            .env("CLOUDSDK_CONFIG", "/nonexistent/gcloud")
            .stdin(Stdio::null());
        c.output().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let body = data(3 << 20, 5);
    let (up, down) = (dir.path().join("up.bin"), dir.path().join("down.bin"));
    std::fs::write(&up, &body).unwrap();
    ok(ferry(&["mb", &format!("gs://{b}")]));
    ok(ferry(&["cp", up.to_str().unwrap(), &format!("gs://{b}/x.bin")]));
    ok(ferry(&["cp", &format!("gs://{b}/x.bin"), down.to_str().unwrap()]));
    assert!(std::fs::read(&down).unwrap() == body, "downloaded bytes differ");
    assert!(ok(ferry(&["ls", &format!("gs://{b}/")])).contains("x.bin"));
}

/// `cp` and `sync` between providers stream through this machine: s3:// (an in-process
/// `ferry serve`) to gs:// and back, one object past the part size and a `--recursive`
/// tree; bytes equal at the far end, nothing left in progress; sync idempotent, and
/// `--delete` removing at the other provider.
#[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
#[test]
fn copies_between_providers() {
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let srv = ferry_testkit::FerryServe::new().start();
    let ferry = |args: &[&str]| {
        ferry_testkit::cli::command(env!("CARGO_BIN_EXE_ferry"), &srv.url())
            .env("STORAGE_EMULATOR_HOST", g.url().trim_start_matches("http://"))
            .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
            .env("CLOUDSDK_CONFIG", "/nonexistent/gcloud")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let (s3b, gsb) = (bucket("xs3"), bucket("xgs"));
    let dir = tempfile::tempdir().unwrap();
    let big = data(17 << 20, 6);
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    std::fs::create_dir_all(dir.path().join("t/u")).unwrap();
    for (i, n) in ["a.txt", "u/b.txt", "u/c.txt"].iter().enumerate() {
        std::fs::write(dir.path().join("t").join(n), data(100 + i, i as u8)).unwrap();
    }
    ok(ferry(&["mb", &format!("s3://{s3b}")]));
    ok(ferry(&["mb", &format!("gs://{gsb}")]));
    ok(ferry(&["cp", dir.path().join("big.bin").to_str().unwrap(), &format!("s3://{s3b}/big.bin")]));
    let out = ok(ferry(&["cp", "--part-size", "5MiB", &format!("s3://{s3b}/big.bin"), &format!("gs://{gsb}/big.bin")]));
    assert!(out.contains(&format!("cp s3://{s3b}/big.bin gs://{gsb}/big.bin")), "{out}");
    let cat = ferry(&["cat", &format!("gs://{gsb}/big.bin")]);
    assert!(cat.status.success() && cat.stdout == big, "the copy at gs:// differs");
    // And back, under another name, then a tree.
    ok(ferry(&["cp", &format!("gs://{gsb}/big.bin"), &format!("s3://{s3b}/back.bin")]));
    let cat = ferry(&["cat", &format!("s3://{s3b}/back.bin")]);
    assert!(cat.status.success() && cat.stdout == big, "the copy back at s3:// differs");
    ok(ferry(&["cp", "--recursive", dir.path().join("t").to_str().unwrap(), &format!("s3://{s3b}/t/")]));
    let out = ok(ferry(&["cp", "--recursive", &format!("s3://{s3b}/t/"), &format!("gs://{gsb}/t/")]));
    assert_eq!(out.lines().count(), 3, "{out}");
    ok(ferry(&["cp", "--recursive", &format!("gs://{gsb}/t/"), dir.path().join("back").to_str().unwrap()]));
    assert_eq!(tree(&dir.path().join("back")), tree(&dir.path().join("t")));
    let listed = ok(ferry(&["ls", "--incomplete", &format!("gs://{gsb}/")]));
    assert_eq!(listed.trim(), "", "no upload left in progress");

    // sync across providers: copies, then nothing, then --delete removes what the source lost.
    let (from, to) = (format!("s3://{s3b}/t/"), format!("gs://{gsb}/synced/"));
    assert_eq!(ok(ferry(&["sync", &from, &to])).lines().count(), 3);
    assert_eq!(ok(ferry(&["sync", &from, &to])).trim(), "");
    ok(ferry(&["rm", &format!("s3://{s3b}/t/u/c.txt")]));
    let out = ok(ferry(&["sync", "--delete", &from, &to]));
    assert!(out.contains(&format!("rm gs://{gsb}/synced/u/c.txt")) && out.lines().count() == 1, "{out}");
    let left = ok(ferry(&["ls", &format!("gs://{gsb}/synced/u/")]));
    assert!(left.contains("u/b.txt") && !left.contains("u/c.txt"), "{left}");
}

/// An interrupted upload keeps its parts as objects under `.ferry-upload/`, which
/// listings leave out: `rb` fails and says so, `rm -r gs://b` removes them with the
/// objects (parts left without their marker too), and `rb` then succeeds.
#[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
#[test]
fn rm_recursive_of_a_bucket_removes_interrupted_uploads_so_rb_succeeds() {
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let url = g.url();
    let b = bucket("rmparts");
    let root = format!("gs://{b}");
    ok(run(&url, &["mb", &root]));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.txt");
    std::fs::write(&f, b"a\n").unwrap();
    ok(run(&url, &["cp", f.to_str().unwrap(), &format!("{root}/a.txt")]));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = {
        let mut o = ferry_store::StoreOptions::new(url.clone());
        o.credentials = ferry_store::CredentialsSource::Anonymous;
        ferry_store::connect(ferry_store::Provider::Gcs, o).unwrap()
    };
    let stage = |key: &str| {
        rt.block_on(async {
            let up =
                store.create_upload(&ferry_store::ObjectRef::new(b.as_str(), key), &Default::default()).await.unwrap();
            for n in 1..=2 {
                store.upload_part(&up, n, ferry_store::PartPayload::Bytes(data(1000, n as u8).into())).await.unwrap();
            }
        })
    };
    stage("big/one.bin");
    // A part whose marker is gone (a cleanup that failed half-way).
    let orphan = ferry_store::ObjectRef::new(b.as_str(), ".ferry-upload/0123456789abcdef01234567/part-00001");
    rt.block_on(store.put(&orphan, ferry_store::PutPayload::Bytes(data(10, 9).into()), Default::default())).unwrap();

    let o = run(&url, &["rb", &root]);
    assert!(!o.status.success(), "rb of a bucket holding upload parts succeeded");
    let err = text(&o.stderr);
    assert!(err.contains("in progress") && err.contains(&format!("ferry rm --incomplete {root}")), "{err}");

    let removed = ok(run(&url, &["rm", "--recursive", &root]));
    assert!(removed.contains(&format!("rm {root}/a.txt")), "{removed}");
    assert!(removed.contains("rm --incomplete") && removed.contains("big/one.bin"), "{removed}");
    assert!(removed.contains(".ferry-upload/0123456789abcdef01234567/"), "{removed}");
    assert_eq!(ok(run(&url, &["ls", "--incomplete", &root])).trim(), "");
    ok(run(&url, &["rb", &root]));

    // rm --incomplete of a bucket lists and removes the same things, objects untouched.
    ok(run(&url, &["mb", &root]));
    ok(run(&url, &["cp", f.to_str().unwrap(), &format!("{root}/a.txt")]));
    stage("big/two.bin");
    rt.block_on(store.put(&orphan, ferry_store::PutPayload::Bytes(data(10, 9).into()), Default::default())).unwrap();
    let listed = ok(run(&url, &["ls", "--incomplete", &root]));
    assert!(listed.contains("big/two.bin") && listed.contains(".ferry-upload/0123456789abcdef01234567/"), "{listed}");
    ok(run(&url, &["rm", "--incomplete", &root]));
    assert_eq!(ok(run(&url, &["ls", "--incomplete", &root])).trim(), "");
    assert_eq!(ok(run(&url, &["cat", &format!("{root}/a.txt")])), "a\n");
    ok(run(&url, &["rm", "--recursive", &root]));
    ok(run(&url, &["rb", &root]));
}

/// A missing bucket, listed and read: one sentence naming it. (fake-gcs-server checks no
/// credentials, so a refused token is the scripted peer's case in the store's tests.)
#[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
#[test]
fn a_missing_bucket_fails_in_one_sentence() {
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let url = g.url();
    let missing = bucket("nosuch");
    for args in [vec!["ls".to_owned(), format!("gs://{missing}/")], vec!["cat".to_owned(), format!("gs://{missing}/k")]]
    {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&url, &args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one sentence: {err}");
        assert!(err.contains(&missing) && err.to_lowercase().contains("not"), "{args:?} names what is missing: {err}");
    }
}

#[ignore = "needs fake-gcs-server: run by scripts/test.sh with FERRY_FAKE_GCS set"]
#[test]
fn a_killed_transfer_leaves_nothing_half_written_and_a_rerun_completes() {
    use ferry_testkit::cli::kill_after;
    use std::time::Duration;
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let url = g.url();
    let b = bucket("clikill");
    ok(run(&url, &["mb", &format!("gs://{b}")]));
    let dir = tempfile::tempdir().unwrap();
    let object = format!("gs://{b}/big.bin");
    let src = dir.path().join("big.bin");
    // Up, killed while its parts are in flight; a machine that finishes first gets more bytes.
    let mut size = 48 << 20;
    let bytes = loop {
        let bytes = data(size, 9);
        std::fs::write(&src, &bytes).unwrap();
        let mut cmd = ferry_emulator(&url);
        cmd.args(["cp", "--part-size", "5MiB", src.to_str().unwrap(), &object]);
        if kill_after(cmd, Duration::from_millis(300)) {
            break bytes;
        }
        assert!(size < 400 << 20, "every upload finished within 300 ms, the last of {size} bytes");
        ok(run(&url, &["rm", &object]));
        size *= 4;
    };
    let check = dir.path().join("check.bin");
    // Nothing half-written: the object is absent, or whole if its compose went just before the kill.
    if run(&url, &["stat", &object]).status.success() {
        ok(run(&url, &["cp", &object, check.to_str().unwrap()]));
        assert!(std::fs::read(&check).unwrap() == bytes, "a killed upload left an object that is not the file");
    }
    ok(run(&url, &["cp", "--part-size", "5MiB", src.to_str().unwrap(), &object]));
    // Down, killed mid-transfer: the final name appears only complete; a re-run finishes it.
    let dest = dir.path().join("down.bin");
    let mut cmd = ferry_emulator(&url);
    cmd.args(["cp", "--part-size", "5MiB", &object, dest.to_str().unwrap()]);
    kill_after(cmd, Duration::from_millis(150));
    assert!(!dest.exists() || std::fs::read(&dest).unwrap() == bytes, "a killed download left a partial file");
    ok(run(&url, &["cp", "--part-size", "5MiB", &object, dest.to_str().unwrap()]));
    assert!(std::fs::read(&dest).unwrap() == bytes, "the re-run's file is not the object");
    // The killed upload's parts go with the bucket.
    ok(run(&url, &["rm", "--recursive", &format!("gs://{b}")]));
    ok(run(&url, &["rb", &format!("gs://{b}")]));
}
