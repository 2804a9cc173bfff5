//! End to end, the `ferry` binary under test with `az://` URLs against Azurite (a real
//! third-party Blob service on a real socket), configured as a user would: only
//! `AZURE_STORAGE_CONNECTION_STRING`. Every verb: mb, cp up and down (files, trees, a
//! block upload, stdin and stdout), ls, cat, stat, presign, sync (with --delete), rm and
//! rb; `rm --incomplete` (the blocks of a new blob dropped with it, those of a committed
//! block blob dropped by committing it again as it stands, those of a blob written whole
//! reported as kept); the Azure portal's blob URLs (`https://ACCOUNT.blob.core.windows.net/...`), whose
//! account must be the credentials'. `#[ignore = "needs Azurite"]`: scripts/test.sh runs them where setup installed it.

use ferry_testkit::azurite::azurite;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn ferry() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    c.env("AZURE_STORAGE_CONNECTION_STRING", azurite().connection_string());
    for v in [
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "IDENTITY_ENDPOINT",
        "AWS_ENDPOINT_URL",
    ] {
        c.env_remove(v);
    }
    c
}

fn run(args: &[&str]) -> Output {
    ferry().args(args).stdin(Stdio::null()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "ferry {args:?}: exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 13 + seed as usize) % 251) as u8).collect()
}

fn container(base: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("{base}-{}-{}", std::process::id() % 100_000, N.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[test]
fn every_verb_round_trips_through_az_urls() {
    let c = container("verbs");
    let root = format!("az://{c}");
    ok(&["mb", &root]);
    assert!(ok(&["ls", "az://"]).lines().any(|l| l.contains(&c)), "the new container is listed");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("a.txt"), b"hello azure\n").unwrap();
    let big = data(12 * 1024 * 1024 + 7, 1);
    std::fs::write(src.join("sub/big.bin"), &big).unwrap();
    // Parts of 5 MiB: the big file goes as three blocks and a block list.
    ok(&["cp", "--recursive", "--part-size", "5MiB", src.to_str().unwrap(), &format!("{root}/data/")]);

    let top = ok(&["ls", &format!("{root}/data/")]);
    assert!(top.lines().any(|l| l.contains("DIR") && l.ends_with("data/sub/")), "{top}");
    assert!(top.lines().any(|l| l.ends_with("data/a.txt") && l.contains(" 12 ")), "{top}");
    let all = ok(&["ls", "--recursive", &format!("{root}/")]);
    assert!(all.lines().any(|l| l.ends_with("data/sub/big.bin") && l.contains(&big.len().to_string())), "{all}");
    assert_eq!(ok(&["cat", &format!("{root}/data/a.txt")]), "hello azure\n");
    let stat = ok(&["stat", &format!("{root}/data/sub/big.bin")]);
    assert!(stat.contains(&format!("Size:          {}", big.len())), "{stat}");

    // Down again: one object, then the tree.
    let one = dir.path().join("big.out");
    ok(&["cp", &format!("{root}/data/sub/big.bin"), one.to_str().unwrap()]);
    assert_eq!(std::fs::read(&one).unwrap(), big);
    let down = dir.path().join("down");
    ok(&["cp", "--recursive", &format!("{root}/data/"), down.to_str().unwrap()]);
    assert_eq!(std::fs::read(down.join("sub/big.bin")).unwrap(), big);
    assert_eq!(std::fs::read(down.join("a.txt")).unwrap(), b"hello azure\n");

    // A presigned URL reads the blob with nothing but the URL.
    let url = ok(&["presign", &format!("{root}/data/a.txt")]);
    assert!(url.contains("sig="), "{url}");
    assert_eq!(plain_get(url.trim()), (200, b"hello azure\n".to_vec()));

    // rb refuses a container that holds blobs; rm empties it; then rb removes it.
    let o = run(&["rb", &root]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("BucketNotEmpty"), "{}", text(&o.stderr));
    ok(&["rm", &format!("{root}/data/a.txt")]);
    assert_eq!(run(&["stat", &format!("{root}/data/a.txt")]).status.code(), Some(1));
    ok(&["rm", "--recursive", &format!("{root}/")]);
    assert_eq!(ok(&["ls", "--recursive", &format!("{root}/")]).trim(), "");
    ok(&["rb", &root]);
    assert!(!ok(&["ls", "az://"]).lines().any(|l| l.contains(&c)));
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[test]
fn sync_up_then_delete_then_down() {
    let c = container("sync");
    let root = format!("az://{c}");
    ok(&["mb", &root]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    for (name, body) in [("one.txt", "1"), ("two.txt", "22"), ("d/three.txt", "333")] {
        std::fs::write(src.join(name), body).unwrap();
    }
    let dest = format!("{root}/tree/");
    let first = ok(&["sync", src.to_str().unwrap(), &dest]);
    assert_eq!(first.lines().filter(|l| l.starts_with("cp ")).count(), 3, "{first}");
    // Nothing changed: nothing to do.
    assert_eq!(ok(&["sync", src.to_str().unwrap(), &dest]).trim(), "");
    std::fs::remove_file(src.join("two.txt")).unwrap();
    std::fs::write(src.join("d/three.txt"), "three, longer").unwrap();
    let second = ok(&["sync", "--delete", src.to_str().unwrap(), &dest]);
    assert!(second.lines().any(|l| l.starts_with("rm ") && l.ends_with("tree/two.txt")), "{second}");
    assert!(second.lines().any(|l| l.starts_with("cp ") && l.ends_with("tree/d/three.txt")), "{second}");
    let listed = ok(&["ls", "--recursive", &dest]);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    let down = dir.path().join("down");
    ok(&["sync", &dest, down.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(down.join("d/three.txt")).unwrap(), "three, longer");
    assert_eq!(std::fs::read_to_string(down.join("one.txt")).unwrap(), "1");
    assert!(!down.join("two.txt").exists());
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[test]
fn stdin_up_and_stdout_down() {
    let c = container("pipe");
    let root = format!("az://{c}");
    ok(&["mb", &root]);
    // Larger than one 5 MiB part: a block upload cut from the stream as it arrives.
    let body = data(11 * 1024 * 1024, 2);
    let mut child = ferry()
        .args(["cp", "--part-size", "5MiB", "-", &format!("{root}/stdin.bin")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let b = body.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&b));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let back = run(&["cp", &format!("{root}/stdin.bin"), "-"]);
    assert!(back.status.success(), "{}", text(&back.stderr));
    assert_eq!(back.stdout, body);
    // A missing blob is exit 1 with the provider's code named.
    let o = run(&["cat", &format!("{root}/missing")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("BlobNotFound"), "{}", text(&o.stderr));
}

/// One HTTP/1.1 GET of a URL over a plain socket, read to the end.
fn plain_get(url: &str) -> (u16, Vec<u8>) {
    use std::io::Read;
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    (head.split_whitespace().nth(1).unwrap().parse().unwrap(), buf[split + 4..].to_vec())
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[test]
fn portal_urls_name_a_blob_and_their_account_must_match_the_credentials() {
    let c = container("portal");
    ok(&["mb", &format!("az://{c}")]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p.txt");
    std::fs::write(&f, "via the portal's URL").unwrap();
    // The emulator's account, reached at Azurite's endpoint: the URL gives container and
    // blob (its %-encoding decoded, as an HTTP URL's), --endpoint-url the address.
    let endpoint = azurite().blob_endpoint();
    let portal = format!("https://devstoreaccount1.blob.core.windows.net/{c}/a%20dir/p.txt");
    ok(&["--endpoint-url", &endpoint, "cp", f.to_str().unwrap(), &portal]);
    assert_eq!(ok(&["cat", &format!("az://{c}/a dir/p.txt")]), "via the portal's URL");
    assert_eq!(ok(&["--endpoint-url", &endpoint, "cat", &portal]), "via the portal's URL");
    // Another account's URL with this account's key is refused before anything is sent.
    let o = run(&["cat", &format!("https://someoneelse.blob.core.windows.net/{c}/a%20dir/p.txt")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("someoneelse"), "{}", text(&o.stderr));
    // Two accounts in one command: a usage error.
    let o = run(&["cp", "https://a1.blob.core.windows.net/c/x", "https://a2.blob.core.windows.net/c/y"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// Blocks staged for `key` under one upload, as an interrupted `cp` leaves them.
fn stage_blocks(c: &str, key: &str, parts: u32) {
    use ferry_store::{Credentials, CredentialsSource, ObjectRef, PartPayload, PutParams, StoreOptions};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut options = StoreOptions::new(azurite().blob_endpoint());
        options.credentials = CredentialsSource::Explicit(Credentials::new(
            ferry_testkit::azurite::ACCOUNT,
            ferry_testkit::azurite::ACCOUNT_KEY,
        ));
        let store = ferry_store::connect(ferry_store::Provider::Azure, options).unwrap();
        let upload = store.create_upload(&ObjectRef::new(c, key), &PutParams::default()).await.unwrap();
        for n in 1..=parts {
            store.upload_part(&upload, n, PartPayload::Bytes(data(1024, n as u8).into())).await.unwrap();
        }
    });
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[test]
fn rm_incomplete_drops_the_blocks_of_a_new_blob_and_says_when_it_cannot() {
    // (The committed block blob's case is the next test's.)
    let c = container("incomplete");
    let root = format!("az://{c}");
    ok(&["mb", &root]);
    // A new key with staged blocks: rm --incomplete deletes the uncommitted blob, so
    // neither ls --incomplete nor the container's emptiness shows anything afterwards.
    stage_blocks(&c, "new/big.bin", 2);
    let before = ok(&["ls", "--incomplete", &format!("{root}/")]);
    assert!(before.contains("new/big.bin"), "{before}");
    let removed = ok(&["rm", "--incomplete", &format!("{root}/")]);
    assert!(removed.contains("rm --incomplete") && removed.contains("new/big.bin"), "{removed}");
    assert_eq!(ok(&["ls", "--incomplete", &format!("{root}/")]).trim(), "", "the upload is still listed");

    // A blob written whole (one Put Blob) with staged blocks: it has no block list to
    // commit again, so it keeps its bytes and blocks; rm --incomplete says the blocks
    // stay, and why, and exits 1.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("keep.txt");
    std::fs::write(&f, b"keep me\n").unwrap();
    ok(&["cp", f.to_str().unwrap(), &format!("{root}/keep.txt")]);
    stage_blocks(&c, "keep.txt", 1);
    let o = run(&["rm", "--incomplete", &format!("{root}/keep.txt")]);
    assert_eq!(o.status.code(), Some(1), "stdout: {}\nstderr: {}", text(&o.stdout), text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("UncommittedBlocksRemain") && err.contains("next written or deleted"), "{err}");
    assert!(err.contains("written whole"), "says why: {err}");
    assert!(!text(&o.stdout).contains("rm --incomplete"), "claimed a removal: {}", text(&o.stdout));
    assert_eq!(ok(&["cat", &format!("{root}/keep.txt")]), "keep me\n");
    assert!(ok(&["ls", "--incomplete", &format!("{root}/")]).contains("keep.txt"), "the blocks are said to stay");
    ok(&["rm", "--recursive", &format!("{root}/")]);
    ok(&["rb", &root]);
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[test]
fn rm_incomplete_drops_the_blocks_of_a_committed_block_blob_and_keeps_its_bytes_and_properties() {
    let c = container("recommit");
    let root = format!("az://{c}");
    ok(&["mb", &root]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("blocks.bin");
    let bytes = data(3 << 20, 7);
    std::fs::write(&f, &bytes).unwrap();
    // Three committed blocks of 1 MiB, a content type of its own.
    let blob = format!("{root}/blocks.bin");
    ok(&["cp", "--part-size", "1MiB", "--content-type", "application/x-ferry-test", f.to_str().unwrap(), &blob]);
    let stat_before = ok(&["stat", &blob]);
    assert!(stat_before.contains("application/x-ferry-test"), "{stat_before}");
    // Then an interrupted upload to the same name: its blocks wait uncommitted.
    stage_blocks(&c, "blocks.bin", 2);
    let before = ok(&["ls", "--incomplete", &format!("{root}/")]);
    assert!(before.contains("blocks.bin"), "{before}");
    let removed = ok(&["rm", "--incomplete", &format!("{root}/")]);
    assert!(removed.contains("rm --incomplete") && removed.contains("blocks.bin"), "{removed}");
    assert_eq!(ok(&["ls", "--incomplete", &format!("{root}/")]).trim(), "", "the blocks are still there");
    // The same bytes under the same name, its content type kept.
    let back = dir.path().join("back.bin");
    ok(&["cp", &blob, back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == bytes, "the blob's bytes changed");
    let stat_after = ok(&["stat", &blob]);
    assert!(stat_after.contains("application/x-ferry-test"), "{stat_after}");
    assert!(stat_after.contains(&format!("Size:          {}", bytes.len())), "{stat_after}");
    ok(&["rm", "--recursive", &format!("{root}/")]);
    ok(&["rb", &root]);
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[test]
fn a_wrong_key_and_a_missing_container_each_fail_in_one_sentence() {
    let c = container("errs");
    ok(&["mb", &format!("az://{c}")]);
    // The same account with another key: every request's Shared Key signature is wrong.
    let wrong: String = azurite()
        .connection_string()
        .split(';')
        .map(
            |kv| if kv.starts_with("AccountKey=") { format!("AccountKey={}==", "A".repeat(86)) } else { kv.to_owned() },
        )
        .collect::<Vec<_>>()
        .join(";");
    let o = ferry()
        .env("AZURE_STORAGE_CONNECTION_STRING", wrong)
        .args(["ls", &format!("az://{c}/")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
    let lower = err.to_lowercase();
    assert!(lower.contains("403") && lower.contains("auth"), "says the credentials were refused: {err}");
    // A container that does not exist, listed and written to.
    let missing = container("nosuch");
    for args in [vec!["ls".to_owned(), format!("az://{missing}/")], vec!["cat".to_owned(), format!("az://{missing}/k")]]
    {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one sentence: {err}");
        assert!(err.contains(&missing) && err.to_lowercase().contains("not"), "{args:?} names what is missing: {err}");
    }
}

#[ignore = "needs Azurite: run by scripts/test.sh with FERRY_AZURITE set"]
#[test]
fn a_killed_transfer_leaves_nothing_half_written_and_a_rerun_completes() {
    use ferry_testkit::cli::kill_after;
    use std::time::Duration;
    let c = container("kill");
    ok(&["mb", &format!("az://{c}")]);
    let dir = tempfile::tempdir().unwrap();
    let blob = format!("az://{c}/big.bin");
    let src = dir.path().join("big.bin");
    // Up, killed while its blocks are in flight; a machine that finishes first gets more bytes.
    let mut size = 48 << 20;
    let bytes = loop {
        let bytes = data(size, 5);
        std::fs::write(&src, &bytes).unwrap();
        let mut cmd = ferry();
        cmd.args(["cp", "--part-size", "5MiB", src.to_str().unwrap(), &blob]);
        if kill_after(cmd, Duration::from_millis(300)) {
            break bytes;
        }
        assert!(size < 400 << 20, "every upload finished within 300 ms, the last of {size} bytes");
        ok(&["rm", &blob]);
        size *= 4;
    };
    let check = dir.path().join("check.bin");
    // Nothing half-written: the blob is absent, or whole if its block list went just before the kill.
    if run(&["stat", &blob]).status.success() {
        ok(&["cp", &blob, check.to_str().unwrap()]);
        assert!(std::fs::read(&check).unwrap() == bytes, "a killed upload left a blob that is not the file");
    }
    ok(&["cp", "--part-size", "5MiB", src.to_str().unwrap(), &blob]);
    // Down, killed mid-transfer: the final name appears only complete; a re-run finishes it.
    let dest = dir.path().join("down.bin");
    let mut cmd = ferry();
    cmd.args(["cp", "--part-size", "5MiB", &blob, dest.to_str().unwrap()]);
    kill_after(cmd, Duration::from_millis(150));
    assert!(!dest.exists() || std::fs::read(&dest).unwrap() == bytes, "a killed download left a partial file");
    ok(&["cp", "--part-size", "5MiB", &blob, dest.to_str().unwrap()]);
    assert!(std::fs::read(&dest).unwrap() == bytes, "the re-run's file is not the blob");
    ok(&["rm", "--recursive", &format!("az://{c}/")]);
    ok(&["rb", &format!("az://{c}")]);
}
