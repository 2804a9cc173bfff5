//! `ferry sync --checksum` between providers that store different checksum kinds, end to
//! end: s3:// (an in-process `ferry serve`, which keeps the CRC64NVME ferry uploads
//! with), gs:// (fake-gcs-server: GCS keeps a CRC32C) and az:// (Azurite: Azure keeps no
//! checksum of a block blob's whole content). Each case is built so that only a content
//! comparison gets it right: a destination object rewritten with other bytes of the
//! same size is newer than its source (the default rule would skip it), and a source
//! object rewritten with the same bytes is newer than its copy (the default rule would
//! copy it). `#[ignore]`d: scripts/test.sh runs it where fake-gcs-server and Azurite
//! are installed.

use std::process::{Command, Output, Stdio};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(o: Output) -> String {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status.code(), text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 17 + seed as usize) % 251) as u8).collect()
}

#[ignore = "needs fake-gcs-server and Azurite: run by scripts/test.sh with FERRY_FAKE_GCS and FERRY_AZURITE set"]
#[test]
fn checksum_sync_between_providers_copies_what_differs_and_only_that() {
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let az = ferry_testkit::azurite::azurite();
    let srv = ferry_testkit::FerryServe::new().start();
    let ferry = |args: &[&str]| -> Output {
        let mut c: Command = ferry_testkit::cli::command(env!("CARGO_BIN_EXE_ferry"), &srv.url());
        c.env("STORAGE_EMULATOR_HOST", g.url().trim_start_matches("http://"))
            .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
            .env("CLOUDSDK_CONFIG", "/nonexistent/gcloud")
            .env("AZURE_STORAGE_CONNECTION_STRING", az.connection_string());
        for v in ["AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_ID"] {
            c.env_remove(v);
        }
        c.args(args).stdin(Stdio::null()).output().unwrap()
    };
    let id = std::process::id();
    let (s3, gs, azc) = (format!("s3://xsum-{id}"), format!("gs://xsum-{id}"), format!("az://xsum-{id}"));
    for b in [&s3, &gs, &azc] {
        ok(ferry(&["mb", b]));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let t = dir.path().join("t");
    std::fs::create_dir_all(&t).unwrap();
    for (i, n) in ["a.txt", "b.txt", "c.txt"].iter().enumerate() {
        std::fs::write(t.join(n), data(1000, i as u8)).unwrap();
    }
    ok(ferry(&["cp", "--recursive", t.to_str().unwrap(), &format!("{s3}/t/")]));
    assert_eq!(ok(ferry(&["sync", &format!("{s3}/t/"), &format!("{gs}/t/")])).lines().count(), 3);
    assert_eq!(ok(ferry(&["sync", &format!("{gs}/t/"), &format!("{azc}/t/")])).lines().count(), 3);
    // Whole-second dates: what is rewritten below is newer than what it is compared with.
    std::thread::sleep(std::time::Duration::from_millis(1100));

    // s3 (CRC64NVME) -> gs (CRC32C): the source's bytes are hashed with CRC32C.
    ok(ferry(&["cp", &file("b-other", &data(1000, 99)), &format!("{gs}/t/b.txt")]));
    ok(ferry(&["cp", &file("a-same", &data(1000, 0)), &format!("{s3}/t/a.txt")]));
    let out = ok(ferry(&["sync", "--checksum", &format!("{s3}/t/"), &format!("{gs}/t/")]));
    assert_eq!(out.trim(), format!("cp {s3}/t/b.txt {gs}/t/b.txt"), "{out}");
    assert!(ferry(&["cat", &format!("{gs}/t/b.txt")]).stdout == data(1000, 1), "b.txt was not restored");
    assert_eq!(ok(ferry(&["sync", "--checksum", &format!("{s3}/t/"), &format!("{gs}/t/")])).trim(), "");

    // gs (CRC32C) -> az (none stored): the blob's bytes are hashed with CRC32C.
    ok(ferry(&["cp", &file("c-other", &data(1000, 98)), &format!("{azc}/t/c.txt")]));
    ok(ferry(&["cp", &file("a-same", &data(1000, 0)), &format!("{gs}/t/a.txt")]));
    let out = ok(ferry(&["sync", "--checksum", &format!("{gs}/t/"), &format!("{azc}/t/")]));
    assert_eq!(out.trim(), format!("cp {gs}/t/c.txt {azc}/t/c.txt"), "{out}");
    assert!(ferry(&["cat", &format!("{azc}/t/c.txt")]).stdout == data(1000, 2), "c.txt was not restored");

    // s3 (CRC64NVME) -> az: the blob's bytes are hashed with CRC64NVME.
    assert_eq!(ok(ferry(&["sync", &format!("{s3}/t/"), &format!("{azc}/s3/")])).lines().count(), 3);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    ok(ferry(&["cp", &file("a-other", &data(1000, 97)), &format!("{azc}/s3/a.txt")]));
    let out = ok(ferry(&["sync", "--checksum", &format!("{s3}/t/"), &format!("{azc}/s3/")]));
    assert_eq!(out.trim(), format!("cp {s3}/t/a.txt {azc}/s3/a.txt"), "{out}");
    assert_eq!(ok(ferry(&["sync", "--checksum", &format!("{s3}/t/"), &format!("{azc}/s3/")])).trim(), "");

    for b in [&s3, &gs, &azc] {
        ok(ferry(&["rm", "--recursive", b]));
        ok(ferry(&["rb", b]));
    }
}
