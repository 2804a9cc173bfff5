//! Object operations: GetObject/HeadObject (ranges, conditions, checksums), PutObject
//! (plain and conditional), CopyObject and DeleteObject.
//!
//! A GET reads the object's metadata first and answers everything it can from it alone:
//! the conditions (`If-Match`, `If-None-Match`, `If-(Un)Modified-Since`: 304/412), the
//! range (S3's rule: an unparseable one is ignored, an unsatisfiable one is 416;
//! ferry_proto::range), the stored headers and, on request (`x-amz-checksum-mode`) and
//! for a whole object only, the stored checksums. `?partNumber=N` is a range too: the
//! bytes of part N, from the part sizes kept at CompleteMultipartUpload (an object
//! stored in one piece is its own part 1), with `x-amz-mp-parts-count`. Only then does
//! it open the body, a stream the transport writes with pacing and faults (types.rs):
//!
//! ```text
//!   head_object ─► conditions ─► range ─► headers ─► HEAD: done
//!                                                 └► get_object stream ─► Response body
//! ```
//!
//! A PUT streams its body through upload.rs (decode, verify, stage, commit), so nothing is
//! visible before every digest matched; a conditional PUT (`If-None-Match: *`,
//! `If-Match`) is checked against the current object first. CopyObject checks the
//! source's conditions (`x-amz-copy-source-if-*`), then streams the source into a staged
//! body while computing its MD5 and checksum afresh ([`copy_stream`], shared with
//! UploadPartCopy), so a copy's digests are those of the bytes it wrote.

use super::upload::{self, Digests};
use super::{Route, S3Error};
use crate::app::App;
use crate::types::{Request, RespBody, Response};
use ferry_backend::{ObjectMeta, ObjectStream};
use ferry_proto::checksum::{md5_etag, ChecksumAlgorithm};
use ferry_proto::encoding::{http_date, parse_http_date, percent_decode};
use ferry_proto::range::{content_range, parse_range_header};
use ferry_proto::sigv4::SigningContext;
use futures_util::StreamExt;
use http::Method;
use std::time::SystemTime;

/// Headers stored with an object and returned on GET/HEAD.
pub const STORED_HEADERS: &[&str] =
    &["content-encoding", "content-disposition", "cache-control", "content-language", "expires"];

fn header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Metadata a PUT, copy with REPLACE, or multipart create takes from request headers.
pub fn meta_from_headers(req: &Request, key: &str) -> ObjectMeta {
    // A name sent more than once keeps every value, joined with ',' in the order sent
    // (as S3 combines repeated headers).
    let mut user_meta: Vec<(String, String)> = Vec::new();
    for (name, value) in req.headers.iter() {
        if let Some(n) = name.as_str().strip_prefix("x-amz-meta-") {
            let value = String::from_utf8_lossy(value.as_bytes());
            match user_meta.iter_mut().find(|(k, _)| k == n) {
                Some((_, v)) => {
                    v.push(',');
                    v.push_str(&value);
                }
                None => user_meta.push((n.to_string(), value.into_owned())),
            }
        }
    }
    let headers = STORED_HEADERS
        .iter()
        .filter_map(|h| header(req, h).map(|v| (h.to_string(), v.to_string())))
        .filter(|(h, v)| !(h == "content-encoding" && v.eq_ignore_ascii_case("aws-chunked")))
        .map(|(h, v)| {
            // aws-chunked is transport framing, not part of the stored encoding.
            if h == "content-encoding" {
                let kept: Vec<&str> =
                    v.split(',').map(str::trim).filter(|e| !e.eq_ignore_ascii_case("aws-chunked")).collect();
                (h, kept.join(", "))
            } else {
                (h, v)
            }
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    ObjectMeta {
        key: key.to_string(),
        size: 0,
        etag: String::new(),
        last_modified: SystemTime::now(),
        content_type: header(req, "content-type").map(str::to_string),
        headers,
        user_meta,
        checksums: Vec::new(),
        parts_count: None,
        part_sizes: Vec::new(),
    }
}

/// Response headers describing an object.
fn object_headers(mut resp: Response, meta: &ObjectMeta, with_checksums: bool) -> Response {
    use http::header::{ACCEPT_RANGES, CONTENT_TYPE, ETAG, LAST_MODIFIED};
    resp = resp
        .header(ETAG, &meta.etag)
        .header(LAST_MODIFIED, &http_date(meta.last_modified))
        .header(ACCEPT_RANGES, "bytes")
        .header(CONTENT_TYPE, meta.content_type.as_deref().unwrap_or("binary/octet-stream"));
    for (h, v) in &meta.headers {
        if let Some(name) = STORED_HEADERS.iter().find(|s| **s == h.as_str()) {
            resp = resp.header(*name, v);
        }
    }
    for (n, v) in &meta.user_meta {
        if let (Ok(name), Ok(value)) =
            (http::HeaderName::from_bytes(format!("x-amz-meta-{n}").as_bytes()), http::HeaderValue::from_str(v))
        {
            resp.headers.append(name, value);
        }
    }
    if with_checksums {
        for (algo, value) in &meta.checksums {
            if let Some(a) = ChecksumAlgorithm::parse(algo) {
                resp = resp.header(a.header_name(), value);
                resp =
                    resp.header("x-amz-checksum-type", if value.contains('-') { "COMPOSITE" } else { "FULL_OBJECT" });
            }
        }
    }
    resp
}

fn etag_matches(list: &str, etag: &str) -> bool {
    let bare = etag.trim_matches('"');
    list.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/").trim_matches('"') == bare)
}

/// RFC 9110 section 13.2.2 evaluation order, as S3 applies it.
fn check_conditions(req: &Request, meta: &ObjectMeta, prefix: &str) -> Result<(), S3Error> {
    // No string is built for a plain GET's headers (this runs on every GET).
    let h = |name: &str| if prefix.is_empty() { header(req, name) } else { header(req, &format!("{prefix}{name}")) };
    let modified = meta.last_modified;
    let precondition =
        || S3Error::new(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.");
    let not_modified = || {
        let mut e = S3Error::new(304, "NotModified", "Not Modified");
        e.headers.push(("etag", meta.etag.clone()));
        e
    };
    if let Some(v) = h("if-match") {
        if !etag_matches(v, &meta.etag) {
            return Err(precondition());
        }
    } else if let Some(t) = h("if-unmodified-since").and_then(parse_http_date) {
        if trunc(modified) > trunc(t) {
            return Err(precondition());
        }
    }
    if let Some(v) = h("if-none-match") {
        if etag_matches(v, &meta.etag) {
            return Err(if prefix.is_empty() && (req.method == Method::GET || req.method == Method::HEAD) {
                not_modified()
            } else {
                precondition()
            });
        }
    } else if let Some(t) = h("if-modified-since").and_then(parse_http_date) {
        if trunc(modified) <= trunc(t) {
            return Err(if prefix.is_empty() { not_modified() } else { precondition() });
        }
    }
    Ok(())
}

/// HTTP dates carry whole seconds.
fn trunc(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A `versionId` query names the one version kept ("null") or none at all.
pub fn check_version(route: &Route) -> Result<(), S3Error> {
    match route.param("versionId") {
        None | Some("null") => Ok(()),
        Some(_) => Err(super::no_such_version()),
    }
}

/// The inclusive byte range of part `n` (1-based) of an object, from the part sizes
/// recorded at CompleteMultipartUpload; an object stored in one piece is its part 1.
fn part_range(meta: &ObjectMeta, n: &str) -> Result<Option<(u64, u64)>, S3Error> {
    let invalid = || S3Error::invalid_argument("Part number must be an integer between 1 and 10000, inclusive");
    let n: usize = n.parse().ok().filter(|n| (1..=10_000).contains(n)).ok_or_else(invalid)?;
    let sizes: &[u64] = if meta.part_sizes.is_empty() { &[meta.size] } else { &meta.part_sizes };
    let Some(size) = sizes.get(n - 1) else {
        return Err(S3Error::new(416, "InvalidPartNumber", "The requested partnumber is not satisfiable")
            .with_extra("PartNumberRequested", n)
            .with_extra("ActualPartCount", sizes.len()));
    };
    if *size == 0 {
        return Ok(None);
    }
    let start: u64 = sizes[..n - 1].iter().sum();
    Ok(Some((start, start + size - 1)))
}

pub async fn get(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    let (bucket, key) = (route.bucket(), route.key());
    check_version(route)?;
    if let Some(n) = route.param("partNumber") {
        // Checked before the object is looked up, as S3 does: a bad number is 400 even
        // for a key that does not exist.
        if !n.parse::<u32>().is_ok_and(|n| (1..=10_000).contains(&n)) {
            return Err(S3Error::invalid_argument("Part number must be an integer between 1 and 10000, inclusive"));
        }
    }
    let meta = app.backend.head_object(bucket, key).await?;
    if let Err(e) = check_conditions(req, &meta, "") {
        if e.status == 304 {
            // 304 carries no body, not even an error document.
            let mut resp =
                Response::new(304).header("etag", &meta.etag).header("last-modified", &http_date(meta.last_modified));
            resp.content_length = Some(0);
            return Ok(resp);
        }
        return Err(e);
    }
    let part_number = route.param("partNumber");
    if part_number.is_some() && header(req, "range").is_some() {
        return Err(S3Error::new(
            400,
            "InvalidRequest",
            "Cannot specify both Range header and partNumber query parameter",
        ));
    }
    let range = match header(req, "range").and_then(parse_range_header) {
        None if part_number.is_some() => part_range(&meta, part_number.unwrap_or_default())?,
        None => None,
        Some(spec) => match spec.resolve(meta.size) {
            Ok(r) => Some(r),
            Err(_) => {
                return Err(S3Error::new(416, "InvalidRange", "The requested range is not satisfiable")
                    .with_extra("RangeRequested", header(req, "range").unwrap_or(""))
                    .with_extra("ActualObjectSize", meta.size));
            }
        },
    };
    let checksum_mode = header(req, "x-amz-checksum-mode").is_some_and(|v| v.eq_ignore_ascii_case("ENABLED"));
    let status = if range.is_some() { 206 } else { 200 };
    let mut resp = object_headers(Response::new(status), &meta, checksum_mode && range.is_none());
    if let Some((start, end)) = range {
        resp = resp.header("content-range", &content_range(start, end, meta.size));
    }
    if part_number.is_some() {
        if let Some(n) = meta.parts_count {
            resp = resp.header("x-amz-mp-parts-count", &n.to_string());
        }
    }
    for (param, name) in [
        ("response-content-type", "content-type"),
        ("response-content-disposition", "content-disposition"),
        ("response-cache-control", "cache-control"),
        ("response-content-encoding", "content-encoding"),
        ("response-content-language", "content-language"),
        ("response-expires", "expires"),
    ] {
        if let Some(v) = route.param(param) {
            if let Ok(v) = http::HeaderValue::from_str(v) {
                resp.headers.insert(name, v);
            }
        }
    }
    let len = range.map(|(s, e)| e - s + 1).unwrap_or(meta.size);
    if req.method == Method::HEAD {
        resp.content_length = Some(len);
        return Ok(resp);
    }
    let (_, stream) = app.backend.get_object(bucket, key, range).await?;
    resp.body = RespBody::Stream { stream: stream.boxed(), len };
    resp.fault = app.emulator.body_fault(len);
    Ok(resp)
}

/// Checks S3 conditional-write headers against the current object, if any.
async fn check_write_conditions(app: &App, req: &Request, bucket: &str, key: &str) -> Result<(), S3Error> {
    let if_none = header(req, "if-none-match");
    let if_match = header(req, "if-match");
    if if_none.is_none() && if_match.is_none() {
        return Ok(());
    }
    let current = match app.backend.head_object(bucket, key).await {
        Ok(m) => Some(m),
        Err(ferry_backend::BackendError::NoSuchKey) => None,
        Err(e) => return Err(e.into()),
    };
    let failed =
        || S3Error::new(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.");
    if let Some(v) = if_none {
        if v.trim() != "*" {
            return Err(S3Error::new(501, "NotImplemented", "If-None-Match on PUT accepts only '*'."));
        }
        if current.is_some() {
            return Err(failed());
        }
    }
    if let Some(v) = if_match {
        match &current {
            None => return Err(S3Error::new(404, "NoSuchKey", "The specified key does not exist.")),
            Some(m) if !etag_matches(v, &m.etag) => return Err(failed()),
            _ => {}
        }
    }
    Ok(())
}

pub async fn put(
    app: &App,
    req: &mut Request,
    route: &Route,
    signing: Option<&SigningContext>,
) -> Result<Response, S3Error> {
    let (bucket, key) = (route.bucket(), route.key());
    super::refuse_object_lock(req)?;
    check_write_conditions(app, req, bucket, key).await?;
    let (algo, declared) = upload::requested_checksum(req)?;
    let writer = app.backend.body_writer(bucket).await?;
    let received =
        upload::receive(app, req, signing, writer, Some(algo.unwrap_or(ChecksumAlgorithm::Crc64Nvme)), declared)
            .await?;
    let mut meta = meta_from_headers(req, key);
    meta.size = received.size;
    meta.etag = md5_etag(&received.md5);
    meta.checksums = received.checksums.iter().map(|(a, v)| (a.as_str().to_string(), v.clone())).collect();
    // A conditional write is checked again at commit time would need a lock; S3 itself
    // documents a race window between check and commit, as we have here.
    app.backend.put_object(bucket, received.writer, meta.clone()).await?;
    let mut resp = Response::new(200).header("etag", &meta.etag);
    for (a, v) in &received.checksums {
        resp = resp.header(a.header_name(), v);
    }
    Ok(resp)
}

pub async fn delete(app: &App, route: &Route) -> Result<Response, S3Error> {
    check_version(route)?;
    app.backend.delete_object(route.bucket(), route.key()).await?;
    Ok(Response::new(204))
}

/// The source named by `x-amz-copy-source`: "/bucket/key" or "bucket/key", URL-encoded.
pub fn copy_source(req: &Request) -> Result<(String, String), S3Error> {
    let raw = header(req, "x-amz-copy-source").unwrap_or("");
    let raw = raw.split_once("?versionId=").map(|(s, _)| s).unwrap_or(raw);
    let decoded = percent_decode(raw).map_err(|_| S3Error::invalid_argument("Invalid copy source encoding."))?;
    let decoded = decoded.strip_prefix('/').unwrap_or(&decoded);
    match decoded.split_once('/') {
        Some((b, k)) if !b.is_empty() && !k.is_empty() => Ok((b.to_string(), k.to_string())),
        _ => Err(S3Error::invalid_argument(
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey.",
        )),
    }
}

/// Streams `source` into a new staged body, computing MD5 and `algorithms`.
pub async fn copy_stream(
    app: &App,
    dest_bucket: &str,
    mut source: ObjectStream,
    algorithms: &[ChecksumAlgorithm],
) -> Result<(ferry_backend::BodyWriter, [u8; 16], Vec<(ChecksumAlgorithm, String)>, u64), S3Error> {
    let mut writer = app.backend.body_writer(dest_bucket).await?;
    writer.expect_len(source.remaining_bytes());
    let mut digests = Digests::new(algorithms);
    while let Some(chunk) = source.next().await {
        let chunk = chunk.map_err(|e| {
            tracing::error!("copy read failed: {e}");
            S3Error::new(500, "InternalError", "Reading the copy source failed.")
        })?;
        digests.update(&chunk);
        writer.write(chunk).await?;
    }
    let (md5, sums, size) = digests.finish();
    Ok((writer, md5, sums, size))
}

pub async fn copy(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    let (bucket, key) = (route.bucket(), route.key());
    let (src_bucket, src_key) = copy_source(req)?;
    let src_meta = app.backend.head_object(&src_bucket, &src_key).await?;
    check_conditions(req, &src_meta, "x-amz-copy-source-")?;
    check_write_conditions(app, req, bucket, key).await?;
    super::refuse_object_lock(req)?;
    let replace = match header(req, "x-amz-metadata-directive") {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("COPY") => false,
        Some(v) if v.eq_ignore_ascii_case("REPLACE") => true,
        Some(v) => {
            return Err(S3Error::invalid_argument("Unknown metadata directive.")
                .with_extra("ArgumentName", "x-amz-metadata-directive")
                .with_extra("ArgumentValue", v))
        }
    };
    if src_bucket == bucket && src_key == key && !replace {
        return Err(S3Error::new(
            400,
            "InvalidRequest",
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.",
        ));
    }
    let algo = match header(req, "x-amz-checksum-algorithm") {
        Some(v) => {
            ChecksumAlgorithm::parse(v).ok_or_else(|| S3Error::invalid_argument("Invalid checksum algorithm."))?
        }
        None => src_meta
            .checksums
            .iter()
            .filter(|(_, v)| !v.contains('-'))
            .find_map(|(a, _)| ChecksumAlgorithm::parse(a))
            .unwrap_or(ChecksumAlgorithm::Crc64Nvme),
    };
    let (_, stream) = app.backend.get_object(&src_bucket, &src_key, None).await?;
    let (writer, md5, sums, size) = copy_stream(app, bucket, stream, &[algo]).await?;
    let mut meta =
        if replace { meta_from_headers(req, key) } else { ObjectMeta { key: key.to_string(), ..src_meta.clone() } };
    meta.size = size;
    meta.etag = md5_etag(&md5);
    meta.last_modified = SystemTime::now();
    meta.parts_count = None;
    meta.part_sizes = Vec::new();
    meta.checksums = sums.iter().map(|(a, v)| (a.as_str().to_string(), v.clone())).collect();
    app.backend.put_object(bucket, writer, meta.clone()).await?;
    let body = ferry_proto::xml::CopyObjectResult {
        etag: meta.etag.clone(),
        last_modified: meta.last_modified,
        checksums: sums,
    }
    .to_xml();
    Ok(super::xml_response(body))
}
