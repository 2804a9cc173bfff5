//! Bucket operations: ListBuckets, Create/Head/DeleteBucket, GetBucketLocation,
//! Get/PutBucketVersioning, ListObjects (v1 and v2), ListObjectVersions and DeleteObjects.
//!
//! Each handler checks the request's parameters the way S3 does (same error codes), asks
//! ferry-backend, and writes the S3 XML answer (ferry_proto::xml). Listing semantics (the
//! delimiter's roll-up, `start-after`, pages) live in the backend's list.rs; here they are
//! only mapped to the API: V2's continuation token is the last key or prefix returned,
//! base64url-encoded, so paging needs no server state, and V1's `marker` is the same
//! position in the clear. DeleteObjects deletes key by key and reports each key's outcome
//! (or, with `Quiet`, only the failures), at most 1,000 keys per request, as S3 allows.
//!
//! Versions: the server keeps one version per key. ListObjectVersions lists each object
//! once as the latest version with id "null" (its `key-marker` is V1's `marker`), a
//! DeleteObjects entry or a GET may name version "null", and PutBucketVersioning keeps
//! `Suspended` but refuses `Enabled`, which would promise versions that are not kept.
//! DeleteBucket takes unfinished multipart uploads with it, as S3 does.

use super::{owner, read_xml, xml_response, Route, S3Error};
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
        owner_id: owner().id,
        owner_name: owner().display_name,
        buckets: buckets.into_iter().map(|b| (b.name, b.created)).collect(),
    }
    .to_xml();
    Ok(xml_response(body))
}

pub async fn create(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    if req.headers.get("x-amz-bucket-object-lock-enabled").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true")) {
        return Err(S3Error::new(
            501,
            "NotImplemented",
            "Object lock is not implemented by this server (ferry serve): a bucket cannot be created with it.",
        ));
    }
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
    let status = app.backend.bucket_versioning(route.bucket()).await?;
    let mut w = xml::XmlWriter::new();
    w.open_root("VersioningConfiguration");
    w.leaf_opt("Status", status.as_deref());
    w.close("VersioningConfiguration");
    Ok(xml_response(w.finish()))
}

pub async fn put_versioning(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_bucket(route.bucket()).await?;
    let body = read_xml(app, req).await?;
    let doc = xml::parse_document(&body).map_err(|_| S3Error::malformed_xml())?;
    if doc.name != "VersioningConfiguration" {
        return Err(S3Error::malformed_xml());
    }
    if doc.child_text("MfaDelete").map(str::trim) == Some("Enabled") {
        return Err(S3Error::new(
            501,
            "NotImplemented",
            "MFA delete is not implemented by this server (ferry serve keeps one version per key).",
        ));
    }
    match doc.child_text("Status").map(str::trim) {
        Some("Suspended") => {
            app.backend.set_bucket_versioning(route.bucket(), "Suspended").await?;
            Ok(Response::new(200))
        }
        Some("Enabled") => Err(S3Error::new(
            501,
            "NotImplemented",
            "Bucket versioning is not implemented: ferry serve keeps one version per key, so it cannot be Enabled (Suspended is accepted).",
        )),
        _ => Err(S3Error::malformed_xml()),
    }
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

/// The parameters every listing shares: prefix, delimiter, max-keys, encoding-type.
struct ListParams {
    prefix: String,
    delimiter: Option<String>,
    max_keys: usize,
    encoding_type_url: bool,
}

fn list_params(route: &Route) -> Result<ListParams, S3Error> {
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
    Ok(ListParams {
        prefix: route.param("prefix").unwrap_or("").to_string(),
        delimiter: route.param("delimiter").filter(|d| !d.is_empty()).map(str::to_string),
        max_keys,
        encoding_type_url,
    })
}

pub async fn list_versions(app: &App, route: &Route) -> Result<Response, S3Error> {
    let ListParams { prefix, delimiter, max_keys, encoding_type_url } = list_params(route)?;
    let key_marker = route.param("key-marker").unwrap_or("").to_string();
    let version_id_marker = route.param("version-id-marker").unwrap_or("").to_string();
    if !version_id_marker.is_empty() && key_marker.is_empty() {
        return Err(S3Error::invalid_argument("A version-id marker cannot be specified without a key marker."));
    }
    let start = Some(key_marker.as_str()).filter(|m| !m.is_empty());
    let page = app.backend.list_objects(route.bucket(), &prefix, delimiter.as_deref(), start, max_keys).await?;
    let next = if page.is_truncated { page.next_marker.clone() } else { None };
    // The next version-id marker is "null" when the page ended on a version (an object),
    // absent when it ended on a common prefix.
    let next_version =
        next.as_ref().filter(|m| page.objects.last().is_some_and(|o| &o.key == *m)).map(|_| "null".into());
    let body = xml::ListVersionsResult {
        name: route.bucket().to_string(),
        prefix,
        key_marker,
        version_id_marker,
        next_key_marker: next,
        next_version_id_marker: next_version,
        delimiter,
        max_keys: max_keys as u32,
        is_truncated: page.is_truncated,
        encoding_type_url,
        owner: owner(),
        versions: page.objects.into_iter().map(entry).collect(),
        common_prefixes: page.common_prefixes,
    }
    .to_xml();
    Ok(xml_response(body))
}

pub async fn list_objects(app: &App, route: &Route) -> Result<Response, S3Error> {
    let v2 = route.op == super::Op::ListObjectsV2;
    let ListParams { prefix, delimiter, max_keys, encoding_type_url } = list_params(route)?;
    // v1 always lists each object's owner; v2 when asked (S3's behaviour).
    let with_owner = !v2 || route.param("fetch-owner").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let list_owner = with_owner.then(owner);
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
            owner: list_owner,
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
            owner: list_owner,
            contents,
            common_prefixes: page.common_prefixes,
        }
        .to_xml()
    };
    Ok(xml_response(body))
}

pub async fn delete_objects(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    let body = read_xml(app, req).await?;
    let (quiet, keys) = xml::parse_delete_versions(&body).map_err(|_| S3Error::malformed_xml())?;
    if keys.len() > MAX_KEYS || keys.is_empty() {
        return Err(S3Error::malformed_xml());
    }
    app.backend.head_bucket(route.bucket()).await?;
    // Written here rather than with xml::DeleteResult: a deleted entry that named a
    // version echoes it.
    let mut w = xml::XmlWriter::new();
    w.open_root("DeleteResult");
    let mut errors = Vec::new();
    for (key, version) in keys {
        let outcome = match version.as_deref() {
            None | Some("null") => app.backend.delete_object(route.bucket(), &key).await.map_err(S3Error::from),
            Some(_) => Err(super::no_such_version()),
        };
        match outcome {
            Ok(()) if !quiet => {
                w.open("Deleted").leaf("Key", &key);
                w.leaf_opt("VersionId", version.as_deref());
                w.close("Deleted");
            }
            Ok(()) => {}
            Err(e) => errors.push((key, version, e)),
        }
    }
    for (key, version, e) in errors {
        w.open("Error").leaf("Key", &key);
        w.leaf_opt("VersionId", version.as_deref());
        w.leaf("Code", e.code).leaf("Message", &e.message).close("Error");
    }
    w.close("DeleteResult");
    Ok(xml_response(w.finish()))
}
