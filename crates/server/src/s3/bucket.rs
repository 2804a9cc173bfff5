//! Bucket operations: ListBuckets, Create/Head/DeleteBucket, GetBucketLocation,
//! GetBucketVersioning, ListObjects (v1 and v2) and DeleteObjects.
//!
//! Each handler checks the request's parameters the way S3 does (same error codes), asks
//! ferry-backend, and writes the S3 XML answer (ferry_proto::xml). Listing semantics (the
//! delimiter's roll-up, `start-after`, pages) live in the backend's list.rs; here they are
//! only mapped to the API: V2's continuation token is the last key or prefix returned,
//! base64url-encoded, so paging needs no server state, and V1's `marker` is the same
//! position in the clear. DeleteObjects deletes key by key and reports each key's outcome
//! (or, with `Quiet`, only the failures), at most 1,000 keys per request, as S3 allows.

use super::{read_xml, xml_response, Route, S3Error};
use crate::app::App;
use crate::types::{Request, Response};
use base64::Engine;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_proto::xml::{self, ObjectEntry};

/// Most keys one listing page or one DeleteObjects request may carry (S3's limit).
const MAX_KEYS: usize = 1000;

pub async fn list_buckets(app: &App) -> Result<Response, S3Error> {
    let buckets = app.backend.list_buckets().await;
    let body = xml::ListAllMyBucketsResult {
        owner_id: "ferry".into(),
        owner_name: "ferry".into(),
        buckets: buckets.into_iter().map(|b| (b.name, b.created)).collect(),
    }
    .to_xml();
    Ok(xml_response(body))
}

pub async fn create(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    let body = read_xml(app, req).await?;
    if !body.is_empty() {
        xml::parse_create_bucket(&body).map_err(|_| S3Error::malformed_xml())?;
    }
    app.backend.create_bucket(route.bucket()).await?;
    Ok(Response::new(200).header("location", &format!("/{}", route.bucket())))
}

pub async fn head(app: &App, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_bucket(route.bucket()).await?;
    Ok(Response::new(200).header("x-amz-bucket-region", &app.region))
}

pub async fn delete(app: &App, route: &Route) -> Result<Response, S3Error> {
    app.backend.delete_bucket(route.bucket()).await?;
    Ok(Response::new(204))
}

pub async fn location(app: &App, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_bucket(route.bucket()).await?;
    // us-east-1 is reported as an empty constraint, as S3 does.
    let region = if app.region == "us-east-1" { None } else { Some(app.region.clone()) };
    Ok(xml_response(xml::LocationConstraint { region }.to_xml()))
}

pub async fn versioning(app: &App, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_bucket(route.bucket()).await?;
    Ok(xml_response(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"/>".to_string(),
    ))
}

fn entry(m: ferry_backend::ObjectMeta) -> ObjectEntry {
    let checksum_algorithm = m.checksums.first().and_then(|(a, _)| ChecksumAlgorithm::parse(a));
    ObjectEntry {
        key: m.key,
        last_modified: m.last_modified,
        etag: m.etag,
        size: m.size,
        storage_class: "STANDARD".into(),
        checksum_algorithm,
    }
}

/// Continuation tokens are the last key or prefix returned, base64url-encoded: opaque to
/// clients, stateless here.
fn encode_token(marker: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(marker.as_bytes())
}

fn decode_token(token: &str) -> Result<String, S3Error> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| S3Error::invalid_argument("The continuation token provided is incorrect"))
}

pub async fn list_objects(app: &App, route: &Route) -> Result<Response, S3Error> {
    let v2 = route.op == super::Op::ListObjectsV2;
    let prefix = route.param("prefix").unwrap_or("").to_string();
    let delimiter = route.param("delimiter").filter(|d| !d.is_empty()).map(str::to_string);
    let max_keys = match route.param("max-keys") {
        None => MAX_KEYS,
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| S3Error::invalid_argument("Provided max-keys not an integer or within integer range"))?
            .min(MAX_KEYS as i64) as usize,
    };
    let encoding_type_url = match route.param("encoding-type") {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("url") => true,
        Some(_) => return Err(S3Error::invalid_argument("Invalid Encoding Method specified in Request")),
    };
    let (start, continuation_token, start_after, marker) = if v2 {
        let token = route.param("continuation-token").map(str::to_string);
        let start_after = route.param("start-after").filter(|s| !s.is_empty()).map(str::to_string);
        let from_token = match &token {
            Some(t) => Some(decode_token(t)?),
            None => None,
        };
        (from_token.or_else(|| start_after.clone()), token, start_after, String::new())
    } else {
        let marker = route.param("marker").unwrap_or("").to_string();
        (Some(marker.clone()).filter(|m| !m.is_empty()), None, None, marker)
    };
    let page =
        app.backend.list_objects(route.bucket(), &prefix, delimiter.as_deref(), start.as_deref(), max_keys).await?;
    let key_count = (page.objects.len() + page.common_prefixes.len()) as u32;
    let next = if page.is_truncated { page.next_marker.clone() } else { None };
    let contents: Vec<ObjectEntry> = page.objects.into_iter().map(entry).collect();
    let body = if v2 {
        xml::ListObjectsV2Result {
            name: route.bucket().to_string(),
            prefix,
            delimiter,
            max_keys: max_keys as u32,
            key_count,
            is_truncated: page.is_truncated,
            continuation_token,
            next_continuation_token: next.as_deref().map(encode_token),
            start_after,
            encoding_type_url,
            contents,
            common_prefixes: page.common_prefixes,
        }
        .to_xml()
    } else {
        xml::ListObjectsV1Result {
            name: route.bucket().to_string(),
            prefix,
            marker,
            next_marker: next,
            delimiter,
            max_keys: max_keys as u32,
            is_truncated: page.is_truncated,
            encoding_type_url,
            contents,
            common_prefixes: page.common_prefixes,
        }
        .to_xml()
    };
    Ok(xml_response(body))
}

pub async fn delete_objects(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    let body = read_xml(app, req).await?;
    let request = xml::parse_delete(&body).map_err(|_| S3Error::malformed_xml())?;
    if request.keys.len() > MAX_KEYS || request.keys.is_empty() {
        return Err(S3Error::malformed_xml());
    }
    app.backend.head_bucket(route.bucket()).await?;
    let mut result = xml::DeleteResult { deleted: Vec::new(), errors: Vec::new() };
    for key in request.keys {
        match app.backend.delete_object(route.bucket(), &key).await {
            Ok(()) => {
                if !request.quiet {
                    result.deleted.push(key);
                }
            }
            Err(e) => {
                let e = S3Error::from(e);
                result.errors.push(xml::DeleteError { key, code: e.code.to_string(), message: e.message });
            }
        }
    }
    Ok(xml_response(result.to_xml()))
}
