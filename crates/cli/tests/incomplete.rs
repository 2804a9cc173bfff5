//! End to end, the `ferry` binary under test against an in-process `ferry serve`
//! on a real socket:
//!
//! - `ls --incomplete` / `rm --incomplete`: uploads in progress (one left by a `cp -`
//!   killed with SIGKILL mid-stream, others created through ferry-store) are listed by
//!   prefix, a dry run aborts nothing, `rm --incomplete` aborts exactly those under the
//!   prefix and leaves objects alone; patterns and a missing bucket are usage errors.
//! - `cp --expected-size`: stdin above the stated size fails with an error naming it,
//!   leaving no object and no upload in progress; a stated size picks larger parts (the
//!   multipart ETag's `-N` counts them); the flag with a file source is a usage error.

use ferry_store::{Credentials, CredentialsSource, ObjectRef, PutParams, S3Client};
use ferry_testkit::{FerryServe, Served, ACCESS_KEY, SECRET_KEY};
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn ferry(srv: &Served) -> Command {
    ferry_testkit::cli::command(env!("CARGO_BIN_EXE_ferry"), &srv.url())
}

fn run(srv: &Served, args: &[&str]) -> Output {
    ferry(srv).args(args).stdin(Stdio::null()).output().unwrap()
}

/// `ferry cp [extra] - URL` with `data` on stdin.
fn cp_stdin(srv: &Served, extra: &[&str], url: &str, data: Vec<u8>) -> Output {
    let mut child = ferry(srv)
        .arg("cp")
        .args(extra)
        .args(["-", url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A failing upload may stop reading: a broken pipe here is expected then.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status.code(), text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

/// The JSON lines of `ferry --json ls --incomplete URL`: (key, upload id).
fn incomplete(srv: &Served, url: &str) -> Vec<(String, String)> {
    let out = ok(&run(srv, &["--json", "ls", "--incomplete", url]));
    let mut v: Vec<(String, String)> = out
        .lines()
        .map(|l| {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(j["type"], "upload", "{l}");
            (j["key"].as_str().unwrap().to_owned(), j["upload_id"].as_str().unwrap().to_owned())
        })
        .collect();
    v.sort();
    v
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn incomplete_uploads_are_listed_and_aborted_by_prefix() {
    let srv = FerryServe::new().start();
    ok(&run(&srv, &["mb", "s3://inc"]));
    // Uploads in progress through the store, and one object that must survive.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = S3Client::builder(srv.url())
        .credentials(CredentialsSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY)))
        .build()
        .unwrap();
    let mut made = Vec::new();
    rt.block_on(async {
        for key in ["logs/a.bin", "logs/b.bin", "other/c.bin"] {
            let up = client.create_multipart(&ObjectRef::new("inc", key), &PutParams::default()).await.unwrap();
            client.upload_part(&up, 1, bytes::Bytes::from(vec![1u8; 1024])).await.unwrap();
            made.push((key.to_owned(), up.upload_id));
        }
        client
            .put_object(
                &ObjectRef::new("inc", "logs/keep.txt"),
                bytes::Bytes::from_static(b"keep"),
                PutParams::default(),
            )
            .await
            .unwrap();
    });

    // A `cp -` killed mid-stream leaves its upload in progress.
    let mut child = ferry(&srv)
        .args(["cp", "-", "s3://inc/logs/stdin.bin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&pattern(12 << 20)).unwrap(); // more than one 8 MiB part: multipart
    let deadline = Instant::now() + Duration::from_secs(60);
    while !incomplete(&srv, "s3://inc/logs/stdin").iter().any(|(k, _)| k == "logs/stdin.bin") {
        assert!(Instant::now() < deadline, "the stdin upload never showed up in progress");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);

    let logs = incomplete(&srv, "s3://inc/logs/");
    let keys: Vec<&str> = logs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["logs/a.bin", "logs/b.bin", "logs/stdin.bin"]);
    for (k, id) in &made[..2] {
        assert!(logs.contains(&(k.clone(), id.clone())), "{k} {id} in {logs:?}");
    }
    assert_eq!(incomplete(&srv, "s3://inc").len(), 4);
    // The text form names the upload id and the object.
    let plain = ok(&run(&srv, &["ls", "--incomplete", "s3://inc/other/"]));
    assert!(plain.contains(&made[2].1) && plain.contains("s3://inc/other/c.bin"), "{plain}");

    // A dry run says what it would abort, and aborts nothing.
    let dry = ok(&run(&srv, &["rm", "--incomplete", "--dry-run", "s3://inc/logs/"]));
    assert_eq!(dry.lines().count(), 3, "{dry}");
    assert!(dry.lines().all(|l| l.starts_with("(dry run) rm --incomplete s3://inc/logs/")), "{dry}");
    assert_eq!(incomplete(&srv, "s3://inc/logs/").len(), 3);

    let removed = ok(&run(&srv, &["rm", "--incomplete", "s3://inc/logs/"]));
    assert_eq!(removed.lines().count(), 3, "{removed}");
    for (k, id) in &logs {
        assert!(removed.contains(&format!("rm --incomplete s3://inc/{k} {id}")), "{removed}");
    }
    assert!(incomplete(&srv, "s3://inc/logs/").is_empty());
    assert_eq!(incomplete(&srv, "s3://inc/"), vec![made[2].clone()], "only the other prefix is left");
    // Objects are not touched; the aborted upload's parts are gone with it.
    assert_eq!(ok(&run(&srv, &["cat", "s3://inc/logs/keep.txt"])), "keep");
    rt.block_on(async {
        let up = ferry_store::MultipartUpload {
            object: ObjectRef::new("inc", "logs/a.bin"),
            upload_id: made[0].1.clone(),
            checksum: None,
            full_object_checksum: false,
        };
        assert!(client.list_parts(&up).await.unwrap_err().is_not_found());
    });

    // Nothing left to abort is a success with nothing printed.
    assert_eq!(ok(&run(&srv, &["rm", "--incomplete", "s3://inc/logs/"])), "");
    // A pattern, or no bucket, is a usage error.
    assert_eq!(run(&srv, &["rm", "--incomplete", "s3://inc/logs/*.bin"]).status.code(), Some(2));
    assert_eq!(run(&srv, &["ls", "--incomplete"]).status.code(), Some(2));
    assert_eq!(run(&srv, &["ls", "--incomplete", "--recursive", "s3://inc/"]).status.code(), Some(2));
    // The help says what it is for.
    let help = ok(&run(&srv, &["rm", "--help"]));
    assert!(help.contains("--incomplete") && help.contains("multipart uploads in progress"), "{help}");
    let help = ok(&run(&srv, &["ls", "--help"]));
    assert!(help.contains("--incomplete"), "{help}");
}

#[test]
fn stdin_is_held_to_its_expected_size() {
    let srv = FerryServe::new().start();
    ok(&run(&srv, &["mb", "s3://exp"]));

    // Longer than stated: a clear error, no object, no upload left in progress; both
    // within the first part (a single PUT) and past it (multipart).
    for (n, stated) in [(3_000_000usize, "1MB"), (12 << 20, "9MiB")] {
        let o = cp_stdin(&srv, &["--expected-size", stated], "s3://exp/over.bin", pattern(n));
        assert_eq!(o.status.code(), Some(1), "{n}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("longer than --expected-size"), "{n}: {}", text(&o.stderr));
        assert!(!run(&srv, &["stat", "s3://exp/over.bin"]).status.success(), "{n}: an object was written");
        assert!(incomplete(&srv, "s3://exp/").is_empty(), "{n}: an upload was left in progress");
    }

    // A stated size picks the part size: 200 GB over 10,000 parts is 20 MB a part, so
    // 25 MiB goes in 2 parts where the default 8 MiB makes 4. The bytes arrive whole.
    let data = pattern(25 << 20);
    for (extra, parts) in [(&["--expected-size", "200GB"][..], 2), (&[][..], 4)] {
        ok(&cp_stdin(&srv, extra, "s3://exp/big.bin", data.clone()));
        let stat = ok(&run(&srv, &["--json", "stat", "s3://exp/big.bin"]));
        assert!(stat.contains(&format!("-{parts}")), "{extra:?}: want {parts} parts in the ETag: {stat}");
        let back = run(&srv, &["cat", "s3://exp/big.bin"]);
        assert!(back.status.success() && back.stdout == data, "{extra:?}: the object differs from stdin");
    }

    // Only for stdin; and not above S3's largest object.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    assert_eq!(run(&srv, &["cp", "--expected-size", "1MB", f.to_str().unwrap(), "s3://exp/f"]).status.code(), Some(2));
    let o = cp_stdin(&srv, &["--expected-size", "6TiB"], "s3://exp/huge.bin", b"x".to_vec());
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("largest object"), "{}", text(&o.stderr));
}
