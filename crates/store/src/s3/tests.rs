//! Unit tests of retry decisions, resume and integrity over the scripted transport
//! (scripted.rs), which stands in for the network only here.

use crate::retry::RetryConfig;
use crate::s3::body::base64_of;
use crate::s3::client::{ClientConfig, S3Client};
use crate::s3::credentials::Credentials;
use crate::s3::scripted::{Scripted, ScriptedTransport};
use crate::{ChecksumAlgorithm, Error, GetParams, ObjectRef, PutParams};
use bytes::Bytes;
use ferry_wire::ErrorKind;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;

fn fast_retry() -> RetryConfig {
    RetryConfig {
        base_delay: Duration::from_millis(1),
        throttled_base_delay: Duration::from_millis(1),
        ..RetryConfig::default()
    }
}

fn client(t: &Arc<ScriptedTransport>, retry: RetryConfig) -> S3Client {
    let mut config =
        ClientConfig::new("http://127.0.0.1:9000").unwrap().with_credentials(Credentials::new("ferry", "ferry-secret"));
    config.retry = retry;
    S3Client::with_transport(t.clone(), config)
}

fn obj() -> ObjectRef {
    ObjectRef::new("b", "k")
}

fn slow_down() -> Scripted {
    Scripted::status(503)
        .header("x-amz-request-id", "R503")
        .body("<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

#[tokio::test]
async fn a_503_is_retried_then_succeeds() {
    let t = ScriptedTransport::with(vec![slow_down(), slow_down(), Scripted::status(200).header("etag", "\"e\"")]);
    let c = client(&t, fast_retry());
    let out = c.put_object(&obj(), Bytes::from_static(b"hello"), PutParams::default()).await.unwrap();
    assert_eq!(out.etag.as_deref(), Some("\"e\""));
    let reqs = t.requests();
    assert_eq!(reqs.len(), 3);
    // Every attempt is signed afresh and carries the whole body and its checksum.
    for r in &reqs {
        assert!(r.header("authorization").unwrap().starts_with("AWS4-HMAC-SHA256 Credential=ferry/"));
        assert_eq!(r.body, Bytes::from_static(b"hello"));
        assert_eq!(
            r.header("x-amz-checksum-crc64nvme"),
            Some(base64_of(ChecksumAlgorithm::Crc64Nvme, b"hello").as_str())
        );
        assert_eq!(r.header("x-amz-content-sha256"), Some("UNSIGNED-PAYLOAD"));
    }
}

#[tokio::test]
async fn throttling_that_never_ends_is_a_typed_error_after_max_attempts() {
    let t = ScriptedTransport::with((0..5).map(|_| slow_down()).collect());
    let c = client(&t, fast_retry());
    let e = c.head_object(&obj()).await.unwrap_err();
    assert!(matches!(e, Error::Throttled { status: 503, .. }), "{e:?}");
    assert_eq!(t.requests().len(), 5);
}

#[tokio::test]
async fn create_multipart_is_retried_after_a_reset_and_a_500() {
    // retry.rs module note: a repeat may leave an empty upload behind, which costs less
    // than failing the transfer.
    let xml =
        ferry_proto::xml::InitiateMultipartUploadResult { bucket: "b".into(), key: "k".into(), upload_id: "u2".into() }
            .to_xml();
    let t = ScriptedTransport::with(vec![
        Scripted::Fail(ErrorKind::Reset),
        Scripted::status(500).body("<Error><Code>InternalError</Code><Message>x</Message></Error>"),
        Scripted::status(200).body(xml),
    ]);
    let c = client(&t, fast_retry());
    let up = c.create_multipart(&obj(), &PutParams::default()).await.unwrap();
    assert_eq!(up.upload_id, "u2");
    assert_eq!(t.requests().len(), 3);
}

#[tokio::test]
async fn a_connect_failure_is_retried_even_for_a_post() {
    let xml =
        ferry_proto::xml::InitiateMultipartUploadResult { bucket: "b".into(), key: "k".into(), upload_id: "u1".into() }
            .to_xml();
    let t = ScriptedTransport::with(vec![Scripted::Fail(ErrorKind::Connect), Scripted::status(200).body(xml)]);
    let c = client(&t, fast_retry());
    let up = c.create_multipart(&obj(), &PutParams::default()).await.unwrap();
    assert_eq!(up.upload_id, "u1");
    assert_eq!(t.requests().len(), 2);
}

#[tokio::test]
async fn a_reset_is_retried_for_idempotent_requests() {
    let t = ScriptedTransport::with(vec![
        Scripted::Fail(ErrorKind::Reset),
        Scripted::Fail(ErrorKind::Timeout),
        Scripted::status(204),
    ]);
    let c = client(&t, fast_retry());
    c.delete_object(&obj()).await.unwrap();
    assert_eq!(t.requests().len(), 3);
}

#[tokio::test]
async fn an_exhausted_budget_stops_retries() {
    // A budget of 12 tokens at 5 per retry allows two retries across all requests.
    let retry = RetryConfig { budget_tokens: 12, success_refill: 0, ..fast_retry() };
    let t = ScriptedTransport::with((0..10).map(|_| slow_down()).collect());
    let c = client(&t, retry);
    assert!(matches!(c.head_object(&obj()).await.unwrap_err(), Error::Throttled { .. }));
    // Two retries were spent on the first request (3 attempts); the next gets none.
    assert_eq!(t.requests().len(), 3);
    assert!(matches!(c.head_object(&obj()).await.unwrap_err(), Error::Throttled { .. }));
    assert_eq!(t.requests().len(), 4);
    // Clones share the budget.
    let c2 = c.clone();
    assert!(c2.head_object(&obj()).await.is_err());
    assert_eq!(t.requests().len(), 5);
}

#[tokio::test]
async fn a_200_with_an_error_body_is_typed_and_retried_when_idempotent() {
    let err = "<?xml version=\"1.0\"?><Error><Code>InternalError</Code><Message>We encountered an internal error.</Message><RequestId>RID</RequestId></Error>";
    let done = ferry_proto::xml::CompleteMultipartUploadResult {
        location: String::new(),
        bucket: "b".into(),
        key: "k".into(),
        etag: "\"x-1\"".into(),
        checksums: vec![],
    }
    .to_xml();
    let t = ScriptedTransport::with(vec![Scripted::status(200).body(err), Scripted::status(200).body(done)]);
    let c = client(&t, fast_retry());
    let up =
        crate::MultipartUpload { object: obj(), upload_id: "u".into(), checksum: None, full_object_checksum: false };
    let part = crate::CompletedPart { part_number: 1, etag: "\"p\"".into(), checksums: vec![] };
    let out = c.complete_multipart(&up, &[part]).await.unwrap();
    assert_eq!(out.etag, "\"x-1\"");
    assert_eq!(t.requests().len(), 2);

    // CopyObject's 200 <Error> with a non-retryable code: typed, not retried.
    let t = ScriptedTransport::with(vec![Scripted::status(200)
        .body("<Error><Code>AccessDenied</Code><Message>no</Message><RequestId>R2</RequestId></Error>")]);
    let c = client(&t, fast_retry());
    let e = c.copy_object(&obj(), &ObjectRef::new("b", "k2"), Default::default()).await.unwrap_err();
    assert!(matches!(&e, Error::Auth { code, .. } if code == "AccessDenied"), "{e:?}");
    assert_eq!(e.request_id(), Some("R2"));
    assert_eq!(t.requests().len(), 1);
    assert_eq!(t.requests()[0].header("x-amz-copy-source"), Some("/b/k"));
}

fn get_200(body: &[u8], extra: &[(&str, &str)]) -> Scripted {
    let mut s = Scripted::status(200).header("etag", "\"v1\"");
    for (k, v) in extra {
        s = s.header(k, v);
    }
    s.body(Bytes::copy_from_slice(body))
}

#[tokio::test]
async fn a_cut_body_resumes_with_range_and_if_match() {
    let d = data(10_000);
    let crc = base64_of(ChecksumAlgorithm::Crc32c, &d);
    let k = 3_000;
    let t = ScriptedTransport::with(vec![
        Scripted::status(200)
            .header("etag", "\"v1\"")
            .header("x-amz-checksum-crc32c", &crc)
            .header("x-amz-checksum-type", "FULL_OBJECT")
            .cut_body(10_000, Bytes::copy_from_slice(&d[..k]), ErrorKind::BodyTruncated),
        // The first resume is cut again, later.
        Scripted::status(206)
            .header("etag", "\"v1\"")
            .header("content-range", &format!("bytes {k}-9999/10000"))
            .cut_body((10_000 - k) as u64, Bytes::copy_from_slice(&d[k..7_000]), ErrorKind::Reset),
        Scripted::status(206)
            .header("etag", "\"v1\"")
            .header("content-range", "bytes 7000-9999/10000")
            .body(Bytes::copy_from_slice(&d[7_000..])),
    ]);
    let c = client(&t, fast_retry());
    let out = c.get_object(&obj(), GetParams::default()).await.unwrap();
    assert_eq!(out.meta.size, 10_000);
    let got = out.body.collect().await.unwrap();
    assert_eq!(&got[..], &d[..]);
    let reqs = t.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].header("x-amz-checksum-mode"), Some("ENABLED"));
    assert_eq!(reqs[0].header("range"), None);
    assert_eq!(reqs[0].expected_len, None, "no size known");
    assert_eq!(reqs[1].header("range"), Some("bytes=3000-9999"));
    assert_eq!(reqs[1].expected_len, Some(7000), "the resume's range, typed");
    assert_eq!(reqs[1].header("if-match"), Some("\"v1\""));
    assert_eq!(reqs[2].header("range"), Some("bytes=7000-9999"));
    assert_eq!(reqs[2].header("if-match"), Some("\"v1\""));
}

#[tokio::test]
async fn a_resume_that_finds_a_new_version_is_a_precondition_error() {
    let d = data(1000);
    let t = ScriptedTransport::with(vec![
        Scripted::status(200).header("etag", "\"v1\"").cut_body(1000, Bytes::copy_from_slice(&d[..100]), ErrorKind::BodyTruncated),
        Scripted::status(412).body("<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>"),
    ]);
    let c = client(&t, fast_retry());
    let mut body = c.get_object(&obj(), GetParams::default()).await.unwrap().body;
    assert_eq!(body.chunk().await.unwrap().unwrap().len(), 100);
    assert!(matches!(body.chunk().await.unwrap(), Err(Error::Precondition { status: 412, .. })));
    assert!(body.chunk().await.is_none());
}

#[tokio::test]
async fn a_checksum_mismatch_ends_the_stream_with_an_integrity_error() {
    // The server cannot be made to corrupt bytes, so corruption is scripted here.
    let d = data(5000);
    let mut bad = d.clone();
    bad[4321] ^= 0x40;
    let crc = base64_of(ChecksumAlgorithm::Crc64Nvme, &d);
    let t = ScriptedTransport::with(vec![get_200(
        &bad,
        &[("x-amz-checksum-crc64nvme", &crc), ("x-amz-checksum-type", "FULL_OBJECT")],
    )]);
    let c = client(&t, fast_retry());
    let mut body = c.get_object(&obj(), GetParams::default()).await.unwrap().body;
    let mut items = Vec::new();
    while let Some(i) = body.next().await {
        items.push(i);
    }
    assert!(items[..items.len() - 1].iter().all(|i| i.is_ok()));
    assert!(matches!(items.last().unwrap(), Err(Error::Integrity { .. })), "{items:?}");
    // collect() never returns the bad bytes as good.
    let t = ScriptedTransport::with(vec![get_200(&bad, &[("x-amz-checksum-crc64nvme", &crc)])]);
    let c = client(&t, fast_retry());
    assert!(matches!(
        c.get_object(&obj(), GetParams::default()).await.unwrap().body.collect().await,
        Err(Error::Integrity { .. })
    ));
}

#[tokio::test]
async fn an_md5_etag_is_verified_when_there_is_no_checksum() {
    let d = data(777);
    let md5 = format!("\"{}\"", hex::encode(<md5::Md5 as md5::Digest>::digest(&d)));
    let mut bad = d.clone();
    bad[0] ^= 1;
    let scripted = |body: &[u8]| Scripted::status(200).header("etag", &md5).body(Bytes::copy_from_slice(body));
    let t = ScriptedTransport::with(vec![scripted(&d), scripted(&bad)]);
    let c = client(&t, fast_retry());
    assert_eq!(
        c.get_object(&obj(), GetParams::default()).await.unwrap().body.collect().await.unwrap(),
        Bytes::from(d.clone())
    );
    assert!(matches!(
        c.get_object(&obj(), GetParams::default()).await.unwrap().body.collect().await,
        Err(Error::Integrity { .. })
    ));
}

#[tokio::test]
async fn composite_checksums_and_multipart_etags_are_not_checked_but_length_is() {
    let d = data(100);
    let t = ScriptedTransport::with(vec![
        get_200(&d, &[("x-amz-checksum-crc32c", "AAAAAA==-3"), ("x-amz-checksum-type", "COMPOSITE")]),
        Scripted::status(200).header("etag", "\"0123456789abcdef0123456789abcdef-3\"").body(Bytes::copy_from_slice(&d)),
    ]);
    let c = client(&t, fast_retry());
    assert_eq!(c.get_object(&obj(), GetParams::default()).await.unwrap().body.collect().await.unwrap().len(), 100);
    assert_eq!(c.get_object(&obj(), GetParams::default()).await.unwrap().body.collect().await.unwrap().len(), 100);
}

#[tokio::test]
async fn a_short_body_is_never_a_short_success() {
    // Without an ETag nothing can be resumed safely: the cut is the error.
    let t = ScriptedTransport::with(vec![Scripted::status(200).cut_body(
        100,
        Bytes::from_static(b"abc"),
        ErrorKind::BodyTruncated,
    )]);
    let c = client(&t, fast_retry());
    let e = c.get_object(&obj(), GetParams::default()).await.unwrap().body.collect().await.unwrap_err();
    assert!(matches!(&e, Error::Transport(w) if w.kind() == ErrorKind::BodyTruncated), "{e:?}");
    // Retries exhausted: the last cut is returned.
    let mut script =
        vec![Scripted::status(200).header("etag", "\"v\"").cut_body(100, Bytes::from_static(b"a"), ErrorKind::Reset)];
    for i in 1..5 {
        script.push(
            Scripted::status(206)
                .header("etag", "\"v\"")
                .header("content-range", &format!("bytes {i}-99/100"))
                .cut_body(100 - i, Bytes::from_static(b"b"), ErrorKind::Reset),
        );
    }
    let t = ScriptedTransport::with(script);
    let c = client(&t, fast_retry());
    let e = c.get_object(&obj(), GetParams::default()).await.unwrap().body.collect().await.unwrap_err();
    assert!(matches!(&e, Error::Transport(w) if w.kind() == ErrorKind::Reset), "{e:?}");
    assert_eq!(t.requests().len(), 5);
}

#[tokio::test]
async fn a_longer_body_than_announced_is_an_integrity_error() {
    let t = ScriptedTransport::with(vec![Scripted::Respond {
        status: 200,
        headers: vec![],
        chunks: vec![Bytes::from_static(b"abcdef")],
        content_length: Some(3),
        then: None,
    }]);
    let c = client(&t, fast_retry());
    assert!(matches!(
        c.get_object(&obj(), GetParams::default()).await.unwrap().body.collect().await,
        Err(Error::Integrity { .. })
    ));
}

#[tokio::test]
async fn ranged_gets_send_the_range_and_report_it() {
    let t = ScriptedTransport::with(vec![Scripted::status(206)
        .header("etag", "\"v\"")
        .header("content-range", "bytes 10-19/100")
        .body(Bytes::from_static(b"0123456789"))]);
    let c = client(&t, fast_retry());
    // The object's size (as a listing gives it) beside the range: the range's length is
    // what the response carries.
    let params = GetParams { size_hint: Some(100), ..GetParams::range(crate::RangeSpec::FromTo(10, 19)) };
    let out = c.get_object(&obj(), params).await.unwrap();
    assert_eq!((out.range, out.meta.size), (Some((10, 19)), 100));
    assert_eq!(out.body.collect().await.unwrap(), Bytes::from_static(b"0123456789"));
    assert_eq!(t.requests()[0].header("range"), Some("bytes=10-19"));
    assert_eq!(t.requests()[0].expected_len, Some(10), "typed on the wire request, not parsed from the header");
}

#[test]
fn a_ranges_response_length_follows_from_the_typed_range() {
    use crate::RangeSpec::*;
    assert_eq!(FromTo(0, 1048575).len(None), Some(1 << 20));
    assert_eq!(FromTo(4096, 8191).len(Some(100)), Some(4096), "at most: the server cuts it at the end");
    assert_eq!(Suffix(4096).len(None), Some(4096));
    assert_eq!(Suffix(4096).len(Some(100)), Some(100));
    assert_eq!(From(100).len(Some(16 << 10)), Some((16 << 10) - 100));
    assert_eq!(From(100).len(None), None, "open-ended on an object of unknown size");
}

#[tokio::test]
async fn errors_carry_request_ids_and_codes() {
    let t = ScriptedTransport::with(vec![
        Scripted::status(404)
            .header("x-amz-request-id", "RID404")
            .body("<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>"),
        Scripted::status(403).header("x-amz-request-id", "RID403"),
    ]);
    let c = client(&t, fast_retry());
    let e = c.get_object(&obj(), GetParams::default()).await.unwrap_err();
    assert!(e.is_not_found());
    assert_eq!((e.code(), e.request_id()), (Some("NoSuchKey"), Some("RID404")));
    let e = c.head_object(&obj()).await.unwrap_err();
    assert!(matches!(e, Error::Auth { status: 403, .. }));
    assert_eq!(e.request_id(), Some("RID403"));
}

#[tokio::test]
async fn session_tokens_are_sent_and_signed() {
    let t = ScriptedTransport::with(vec![Scripted::status(204)]);
    let mut creds = Credentials::new("AK", "SK");
    creds.session_token = Some("TOKEN/+=".into());
    let config = ClientConfig::new("http://127.0.0.1:9000").unwrap().with_credentials(creds);
    let c = S3Client::with_transport(t.clone(), config);
    c.delete_object(&obj()).await.unwrap();
    let r = &t.requests()[0];
    assert_eq!(r.header("x-amz-security-token"), Some("TOKEN/+="));
    assert!(r.header("authorization").unwrap().contains("x-amz-security-token"));
    assert_eq!(r.header("host"), Some("127.0.0.1:9000"));
    assert_eq!(r.path_and_query, "/b/k");
}

#[tokio::test]
async fn anonymous_requests_are_not_signed() {
    let t = ScriptedTransport::with(vec![Scripted::status(204)]);
    let c = S3Client::with_transport(t.clone(), ClientConfig::new("http://127.0.0.1:9000").unwrap());
    c.delete_object(&obj()).await.unwrap();
    assert!(t.requests()[0].header("authorization").is_none());
}

#[tokio::test]
async fn delete_objects_splits_into_requests_of_1000_keys() {
    let keys: Vec<String> = (0..2500).map(|i| format!("k{i}")).collect();
    let answer = |range: std::ops::Range<usize>, fail: Option<&str>| {
        let mut r =
            ferry_proto::xml::DeleteResult { deleted: range.map(|i| format!("k{i}")).collect(), errors: vec![] };
        if let Some(k) = fail {
            r.deleted.retain(|d| d != k);
            r.errors.push(ferry_proto::xml::DeleteError {
                key: k.into(),
                code: "AccessDenied".into(),
                message: "Access Denied".into(),
            });
        }
        Scripted::status(200).body(r.to_xml())
    };
    let t = ScriptedTransport::with(vec![
        answer(0..1000, None),
        answer(1000..2000, Some("k1500")),
        answer(2000..2500, None),
    ]);
    let c = client(&t, fast_retry());
    let out = c.delete_objects("b", &keys).await.unwrap();
    assert_eq!(out.deleted.len(), 2499);
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].key, "k1500");
    let reqs = t.requests();
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        assert_eq!(r.path_and_query, "/b?delete");
        let md5 = ferry_proto::checksum::base64_encode(&<md5::Md5 as md5::Digest>::digest(&r.body));
        assert_eq!(r.header("content-md5"), Some(md5.as_str()));
    }
    assert_eq!(ferry_proto::xml::parse_delete(&reqs[2].body).unwrap().keys.len(), 500);
}

#[tokio::test]
async fn a_streamed_put_is_aws_chunked_with_a_trailer_and_sent_once() {
    let d = data(200_000);
    let t = ScriptedTransport::with(vec![slow_down()]);
    let c = client(&t, fast_retry());
    let stream =
        futures_util::stream::iter(d.chunks(10_000).map(|c| Ok(Bytes::copy_from_slice(c))).collect::<Vec<_>>());
    let e = c.put_object_stream(&obj(), d.len() as u64, stream, PutParams::default()).await.unwrap_err();
    assert!(matches!(e, Error::Throttled { .. }));
    let reqs = t.requests();
    assert_eq!(reqs.len(), 1, "a stream body is never sent twice");
    let r = &reqs[0];
    assert_eq!(r.header("x-amz-content-sha256"), Some("STREAMING-UNSIGNED-PAYLOAD-TRAILER"));
    assert_eq!(r.header("x-amz-decoded-content-length"), Some("200000"));
    assert_eq!(r.header("x-amz-trailer"), Some("x-amz-checksum-crc64nvme"));
}

#[test]
fn presigned_urls_verify_with_the_server_side_verifier() {
    let t = ScriptedTransport::with(vec![]);
    let c = client(&t, fast_retry());
    let url = c.presign_get(&ObjectRef::new("b", "dir/a b.txt"), Duration::from_secs(600)).unwrap();
    let rest = url.strip_prefix("http://127.0.0.1:9000").unwrap();
    let (path, query) = rest.split_once('?').unwrap();
    assert_eq!(path, "/b/dir/a%20b.txt");
    let mut headers = http::HeaderMap::new();
    headers.insert("host", "127.0.0.1:9000".parse().unwrap());
    let req =
        ferry_proto::sigv4::SignableRequest { method: "GET", raw_path: path, raw_query: query, headers: &headers };
    let lookup = |ak: &str| (ak == "ferry").then(|| "ferry-secret".to_string());
    ferry_proto::sigv4::verify(&req, &lookup, std::time::SystemTime::now(), Duration::from_secs(900)).unwrap();
    assert!(c.presign_get(&obj(), Duration::from_secs(8 * 24 * 3600)).is_err());
}

#[tokio::test]
async fn an_upload_by_hand_is_created_filled_and_aborted_with_s3s_requests() {
    use crate::store::{ObjectStore, PartPayload};
    let init =
        ferry_proto::xml::InitiateMultipartUploadResult { bucket: "b".into(), key: "k".into(), upload_id: "U".into() }
            .to_xml();
    let t = ScriptedTransport::with(vec![
        Scripted::status(200).body(init),
        Scripted::status(200).header("etag", "\"p\""),
        Scripted::status(204),
    ]);
    let c = client(&t, fast_retry());
    let up = c.create_upload(&obj(), &PutParams::default()).await.unwrap();
    let part = ObjectStore::upload_part(&c, &up, 1, PartPayload::Bytes(Bytes::from_static(b"x"))).await.unwrap();
    assert_eq!(part.etag, "\"p\"");
    c.abort_upload(&up).await.unwrap();
    let reqs = t.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!((reqs[0].method.clone(), reqs[0].path_and_query.as_str()), (http::Method::POST, "/b/k?uploads"));
    assert_eq!(reqs[0].header("x-amz-checksum-type"), Some("FULL_OBJECT"));
    assert_eq!(
        (reqs[1].method.clone(), reqs[1].path_and_query.as_str()),
        (http::Method::PUT, "/b/k?partNumber=1&uploadId=U")
    );
    assert_eq!((reqs[2].method.clone(), reqs[2].path_and_query.as_str()), (http::Method::DELETE, "/b/k?uploadId=U"));
    assert_eq!(t.remaining(), 0);
}
