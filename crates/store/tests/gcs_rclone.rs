//! rclone as an oracle for the Google Cloud Storage client: rclone's `gcs` backend
//! (Google's Go client underneath) reads what ferry wrote, and ferry reads what rclone
//! wrote, both through fake-gcs-server. A disagreement about object names, bytes,
//! metadata or the hidden upload prefix shows up as a difference here.
//!
//! rclone is configured through `RCLONE_CONFIG_G_*` variables on its own command line
//! (anonymous, the emulator as its endpoint), reading no configuration of the user's.

use bytes::Bytes;
use ferry_engine::upload::{upload_file, UploadParams};
use ferry_engine::Engine;
use ferry_store::{
    connect, CredentialsSource, GetParams, ListParams, Mode, ObjectRef, ObjectStoreExt, Provider, PutParams,
    PutPayload, StoreOptions,
};
use futures_util::StreamExt;
use std::process::Command;

fn data(n: usize, seed: u8) -> Bytes {
    Bytes::from((0..n).map(|i| ((i * 31 + seed as usize) % 251) as u8).collect::<Vec<u8>>())
}

fn rclone(url: &str, args: &[&str]) -> Vec<u8> {
    let cfg = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("rclone")
        .args(args)
        .env("RCLONE_CONFIG", cfg.path())
        .env("RCLONE_CONFIG_G_TYPE", "google cloud storage")
        .env("RCLONE_CONFIG_G_ENDPOINT", format!("{url}/storage/v1/"))
        .env("RCLONE_CONFIG_G_ANONYMOUS", "true")
        .env("RCLONE_CONFIG_G_PROJECT_NUMBER", "ferry")
        .output()
        .expect("running rclone");
    assert!(out.status.success(), "rclone {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[ignore = "needs fake-gcs-server and rclone: run by scripts/test.sh with FERRY_FAKE_GCS set"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rclone_and_ferry_read_each_other() {
    ferry_testkit::require::tool("rclone");
    let g = ferry_testkit::fake_gcs::fake_gcs();
    let url = g.url();
    let mut o = StoreOptions::new(url.clone());
    o.credentials = CredentialsSource::Anonymous;
    o.mode = Mode::Auto;
    let c = connect(Provider::Gcs, o).unwrap();
    let b = format!("oracle-{}", std::process::id());
    c.create_bucket(&b).await.unwrap();

    // ferry writes: a small object with metadata, a composite of 5 parts (engine), and
    // a stream long enough to be a resumable upload.
    let small = data(300_000, 1);
    let params = PutParams { metadata: vec![("Owner".into(), "ferry".into())], ..PutParams::default() };
    c.put(&ObjectRef::new(b.as_str(), "f/small ü.bin"), PutPayload::Bytes(small.clone()), params).await.unwrap();
    let big = data(23 << 20, 2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    std::fs::write(&path, &big).unwrap();
    let engine = Engine::new(c.clone());
    let up = UploadParams { part_size: 5 << 20, concurrency: 4, resume: false, ..UploadParams::default() };
    upload_file(&engine, &path, &ObjectRef::new(b.as_str(), "f/composite"), &up, None).await.unwrap();
    let streamed = data(10 << 20, 3);
    let chunks: Vec<std::io::Result<Bytes>> = streamed.chunks(777_777).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    let stream = futures_util::stream::iter(chunks).boxed();
    c.put(
        &ObjectRef::new(b.as_str(), "f/streamed"),
        PutPayload::Stream { len: streamed.len() as u64, stream },
        PutParams::default(),
    )
    .await
    .unwrap();
    assert_eq!(rclone(&url, &["cat", &format!("g:{b}/f/small ü.bin")]), small);
    assert_eq!(rclone(&url, &["cat", &format!("g:{b}/f/composite")]), big);
    assert_eq!(rclone(&url, &["cat", &format!("g:{b}/f/streamed")]), streamed);
    let listed: serde_json::Value =
        serde_json::from_slice(&rclone(&url, &["lsjson", "-R", &format!("g:{b}")])).unwrap();
    let mut names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["IsDir"] == false)
        .map(|e| e["Path"].as_str().unwrap())
        .collect();
    names.sort();
    // Nothing of the composite upload is left under the hidden prefix.
    assert_eq!(names, vec!["f/composite", "f/small ü.bin", "f/streamed"]);
    // rclone's MD5 of the small object (the md5Hash GCS stored) is the bytes' MD5.
    let md5 = String::from_utf8(rclone(&url, &["md5sum", &format!("g:{b}/f/small ü.bin")])).unwrap();
    use md5::Digest;
    assert_eq!(md5.split_whitespace().next(), Some(hex::encode(md5::Md5::digest(&small)).as_str()), "{md5}");

    // rclone writes (a small file, and one past its 8 MiB upload chunk); ferry reads,
    // checking each whole body against the CRC32C the server states.
    let from_rclone = data(9 << 20, 4);
    std::fs::write(dir.path().join("r.bin"), &from_rclone).unwrap();
    std::fs::write(dir.path().join("tiny.txt"), b"tiny").unwrap();
    rclone(&url, &["copyto", dir.path().join("r.bin").to_str().unwrap(), &format!("g:{b}/r/big.bin")]);
    rclone(&url, &["copyto", dir.path().join("tiny.txt").to_str().unwrap(), &format!("g:{b}/r/tiny.txt")]);
    let got = c.get(&ObjectRef::new(b.as_str(), "r/big.bin"), GetParams::default()).await.unwrap();
    assert!(!got.meta.checksums.is_empty(), "{:?}", got.meta);
    assert_eq!(got.body.collect().await.unwrap(), from_rclone);
    assert_eq!(c.get_bytes(&ObjectRef::new(b.as_str(), "r/tiny.txt")).await.unwrap(), Bytes::from_static(b"tiny"));
    let (objects, _) = c.list_all(&b, ListParams { prefix: Some("r/".into()), ..ListParams::default() }).await.unwrap();
    let sizes: Vec<(String, u64)> = objects.into_iter().map(|o| (o.key, o.size)).collect();
    assert_eq!(sizes, vec![("r/big.bin".to_owned(), 9 << 20), ("r/tiny.txt".to_owned(), 4)]);
}
