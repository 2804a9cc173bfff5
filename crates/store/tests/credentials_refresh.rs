//! One refresh for many requests: temporary keys that are due are fetched once, and the
//! requests that arrived meanwhile sign with that fetch's keys instead of each running
//! the source again. The source is a real `credential_process` shell script that counts
//! its runs; the requests go to an in-process `ferry serve`.
//!
//! A test binary of its own: the client reads the shared files' location from the
//! process environment, which this test sets.

use bytes::Bytes;
use ferry_store::{CredentialsSource, Mode, ObjectRef, ObjectStore, PutParams, PutPayload, S3Client};
use ferry_testkit::{FerryServe, ACCESS_KEY, REGION, SECRET_KEY};
use std::time::{Duration, SystemTime};

/// Requests sent at once; each one finds the keys due.
const CONCURRENT: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_one_refresh_of_due_keys() {
    let server = FerryServe::new().start();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    // Keys 60 s from their expiry: inside the 5-minute refresh window, so due at once.
    let expires = ferry_proto::encoding::iso8601(SystemTime::now() + Duration::from_secs(60));
    let expires = format!("{}Z", &expires[..19]);
    let script = dir.path().join("creds.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho run >> '{}'\nsleep 0.2\n\
             echo '{{\"Version\": 1, \"AccessKeyId\": \"{ACCESS_KEY}\", \"SecretAccessKey\": \"{SECRET_KEY}\", \
             \"SessionToken\": \"tok\", \"Expiration\": \"{expires}\"}}'\n",
            runs.display()
        ),
    )
    .unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, format!("[profile counted]\ncredential_process = sh {}\n", script.display())).unwrap();
    std::env::set_var("AWS_CONFIG_FILE", &config);
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", dir.path().join("no-credentials"));
    let count = || std::fs::read_to_string(&runs).map(|s| s.lines().count()).unwrap_or(0);

    let client = S3Client::builder(server.url())
        .region(REGION)
        .credentials(CredentialsSource::Profile(Some("counted".into())))
        .mode(Mode::H1Pool)
        .build()
        .unwrap();
    assert_eq!(count(), 1, "building the client runs the process once");
    // One request: the keys are due, so it fetches them again first.
    client.create_bucket("refresh").await.unwrap();
    assert_eq!(count(), 2);

    let puts = (0..CONCURRENT).map(|i| {
        let client = client.clone();
        async move {
            let object = ObjectRef::new("refresh", format!("k{i}"));
            client.put(&object, PutPayload::Bytes(Bytes::from_static(b"x")), PutParams::default()).await
        }
    });
    for result in futures_util::future::join_all(puts).await {
        result.unwrap();
    }
    assert_eq!(count(), 3, "{CONCURRENT} concurrent requests with due keys ran the process more than once");
}
