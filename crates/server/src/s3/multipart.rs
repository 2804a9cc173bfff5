//! Multipart uploads: Create, UploadPart, UploadPartCopy, Complete, Abort, ListParts and
//! ListMultipartUploads.
//!
//! Complete follows S3's rules
//! (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CompleteMultipartUpload.html):
//! parts listed in ascending order (InvalidPartOrder), each uploaded with the ETag given
//! (InvalidPart), every part but the last at least 5 MiB (EntityTooSmall). The ETag is the
//! MD5 of the parts' MD5s followed by `-N`. Every part carries a checksum (the upload's
//! algorithm, CRC64NVME when none was named, as S3 does), and the object's checksum is
//! either COMPOSITE (a checksum of the parts' checksums, `-N`) or, for the CRCs,
//! FULL_OBJECT: the CRC of the whole object, combined from the parts' CRCs and sizes
//! without reading them again (`ferry_proto::checksum::full_object_crc`, which the
//! client uses too).

use super::object::{copy_source, copy_stream, meta_from_headers};
use super::upload::{self};
use super::{read_xml, xml_response, Route, S3Error};
use crate::app::App;
use crate::types::{Request, Response};
use base64::Engine;
use ferry_backend::PartMeta;
use ferry_proto::checksum::{
    base64_encode, composite_checksum, full_object_crc, md5_etag, multipart_etag, ChecksumAlgorithm,
};
use ferry_proto::range::parse_range_header;
use ferry_proto::sigv4::SigningContext;
use ferry_proto::xml;
use std::time::SystemTime;

/// Smallest part but the last (S3's limit).
const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
/// Highest part number (S3's limit).
const MAX_PART_NUMBER: u32 = 10_000;
/// Where the upload's checksum settings live inside its template's headers.
const CHECKSUM_TYPE: &str = "x-amz-checksum-type";

fn upload_id(route: &Route) -> Result<&str, S3Error> {
    route.param("uploadId").filter(|s| !s.is_empty()).ok_or_else(|| S3Error::invalid_argument("uploadId is required"))
}

fn part_number(route: &Route) -> Result<u32, S3Error> {
    route
        .param("partNumber")
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| (1..=MAX_PART_NUMBER).contains(n))
        .ok_or_else(|| S3Error::invalid_argument("Part number must be an integer between 1 and 10000, inclusive"))
}

/// The checksum algorithm an upload was created with.
fn upload_algorithm(template: &ferry_backend::ObjectMeta) -> Option<ChecksumAlgorithm> {
    template.checksums.first().and_then(|(a, _)| ChecksumAlgorithm::parse(a))
}

/// Whether the upload's object checksum is FULL_OBJECT (else COMPOSITE).
fn full_object(template: &ferry_backend::ObjectMeta) -> bool {
    template.headers.iter().any(|(n, v)| n == CHECKSUM_TYPE && v == "FULL_OBJECT")
}

pub async fn create(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_bucket(route.bucket()).await?;
    super::refuse_object_lock(req)?;
    let mut template = meta_from_headers(req, route.key());
    let algo = match req.headers.get("x-amz-checksum-algorithm").and_then(|v| v.to_str().ok()) {
        Some(v) => {
            Some(ChecksumAlgorithm::parse(v).ok_or_else(|| S3Error::invalid_argument("Invalid checksum algorithm."))?)
        }
        None => None,
    };
    let checksum_type =
        match req.headers.get(CHECKSUM_TYPE).and_then(|v| v.to_str().ok()).map(|s| s.to_ascii_uppercase()) {
            Some(t) if t == "FULL_OBJECT" || t == "COMPOSITE" => t,
            Some(t) => return Err(S3Error::invalid_argument(&format!("Invalid checksum type {t}."))),
            // S3's defaults: COMPOSITE for a named algorithm, else CRC64NVME over the whole object.
            None if algo.is_some() => "COMPOSITE".to_string(),
            None => "FULL_OBJECT".to_string(),
        };
    let algo = algo.unwrap_or(ChecksumAlgorithm::Crc64Nvme);
    let crc = matches!(algo, ChecksumAlgorithm::Crc32 | ChecksumAlgorithm::Crc32c | ChecksumAlgorithm::Crc64Nvme);
    if checksum_type == "FULL_OBJECT" && !crc {
        return Err(S3Error::new(400, "InvalidRequest", "The FULL_OBJECT checksum type requires a CRC algorithm."));
    }
    if checksum_type == "COMPOSITE" && algo == ChecksumAlgorithm::Crc64Nvme {
        return Err(S3Error::new(400, "InvalidRequest", "CRC64NVME supports only the FULL_OBJECT checksum type."));
    }
    template.checksums = vec![(algo.as_str().to_string(), String::new())];
    template.headers.push((CHECKSUM_TYPE.to_string(), checksum_type.clone()));
    let id = app.backend.create_multipart(route.bucket(), template).await?;
    let body = xml::InitiateMultipartUploadResult {
        bucket: route.bucket().to_string(),
        key: route.key().to_string(),
        upload_id: id,
    }
    .to_xml();
    Ok(xml_response(body).header("x-amz-checksum-algorithm", algo.as_str()).header(CHECKSUM_TYPE, &checksum_type))
}

pub async fn upload_part(
    app: &App,
    req: &mut Request,
    route: &Route,
    signing: Option<&SigningContext>,
) -> Result<Response, S3Error> {
    let (bucket, key) = (route.bucket(), route.key());
    let id = upload_id(route)?;
    let number = part_number(route)?;
    let info = app.backend.upload_info(bucket, key, id).await?;
    let (asked, declared) = upload::requested_checksum(req)?;
    let algo = asked.or_else(|| upload_algorithm(&info.meta)).or(Some(ChecksumAlgorithm::Crc64Nvme));
    let writer = app.backend.body_writer(bucket).await?;
    let received = upload::receive(app, req, signing, writer, algo, declared).await?;
    let part = PartMeta {
        part_number: number,
        size: received.size,
        etag: md5_etag(&received.md5),
        md5: received.md5,
        last_modified: SystemTime::now(),
        checksums: received.checksums.iter().map(|(a, v)| (a.as_str().to_string(), v.clone())).collect(),
    };
    let etag = part.etag.clone();
    app.backend.put_part(bucket, key, id, received.writer, part).await?;
    let mut resp = Response::new(200).header("etag", &etag);
    for (a, v) in &received.checksums {
        resp = resp.header(a.header_name(), v);
    }
    Ok(resp)
}

pub async fn upload_part_copy(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    let (bucket, key) = (route.bucket(), route.key());
    let id = upload_id(route)?;
    let number = part_number(route)?;
    let info = app.backend.upload_info(bucket, key, id).await?;
    let (src_bucket, src_key) = copy_source(req)?;
    let src = app.backend.head_object(&src_bucket, &src_key).await?;
    let range = match req.headers.get("x-amz-copy-source-range").and_then(|v| v.to_str().ok()) {
        None => None,
        Some(v) => {
            let spec = parse_range_header(v).ok_or_else(|| {
                S3Error::invalid_argument("The x-amz-copy-source-range value must be of the form bytes=first-last.")
            })?;
            Some(
                spec.resolve(src.size)
                    .map_err(|_| S3Error::new(400, "InvalidRange", "The requested range is not satisfiable"))?,
            )
        }
    };
    let (_, stream) = app.backend.get_object(&src_bucket, &src_key, range).await?;
    let algos: Vec<ChecksumAlgorithm> = upload_algorithm(&info.meta).into_iter().collect();
    let (writer, md5, sums, size) = copy_stream(app, bucket, stream, &algos).await?;
    let part = PartMeta {
        part_number: number,
        size,
        etag: md5_etag(&md5),
        md5,
        last_modified: SystemTime::now(),
        checksums: sums.iter().map(|(a, v)| (a.as_str().to_string(), v.clone())).collect(),
    };
    let body = xml::CopyPartResult { etag: part.etag.clone(), last_modified: part.last_modified }.to_xml();
    app.backend.put_part(bucket, key, id, writer, part).await?;
    Ok(xml_response(body))
}

fn bare(etag: &str) -> &str {
    etag.trim().trim_matches('"')
}

pub async fn complete(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    let (bucket, key) = (route.bucket(), route.key());
    let id = upload_id(route)?.to_string();
    let info = app.backend.upload_info(bucket, key, &id).await?;
    let body = read_xml(app, req).await?;
    let requested = xml::parse_complete_multipart(&body).map_err(|_| S3Error::malformed_xml())?;
    if requested.is_empty() {
        return Err(S3Error::malformed_xml());
    }
    if requested.windows(2).any(|w| w[0].part_number >= w[1].part_number) {
        return Err(S3Error::new(
            400,
            "InvalidPartOrder",
            "The list of parts was not in ascending order. Parts must be ordered by part number.",
        ));
    }
    let stored = app.backend.list_parts(bucket, key, &id).await?;
    let invalid_part = |n: u32| S3Error::new(400, "InvalidPart", super::INVALID_PART).with_extra("PartNumber", n);
    let mut chosen = Vec::with_capacity(requested.len());
    for (i, want) in requested.iter().enumerate() {
        let part =
            stored.iter().find(|p| p.part_number == want.part_number).ok_or_else(|| invalid_part(want.part_number))?;
        if bare(&want.etag) != bare(&part.etag) {
            return Err(invalid_part(want.part_number));
        }
        for (algo, value) in &want.checksums {
            let ours = part.checksums.iter().find(|(a, _)| ChecksumAlgorithm::parse(a) == Some(*algo));
            if ours.map(|(_, v)| v.as_str()) != Some(value.as_str()) {
                return Err(invalid_part(want.part_number));
            }
        }
        if i + 1 < requested.len() && part.size < MIN_PART_SIZE {
            return Err(S3Error::new(
                400,
                "EntityTooSmall",
                "Your proposed upload is smaller than the minimum allowed object size.",
            )
            .with_extra("ProposedSize", part.size)
            .with_extra("MinSizeAllowed", MIN_PART_SIZE)
            .with_extra("PartNumber", part.part_number));
        }
        chosen.push(part);
    }
    let md5s: Vec<[u8; 16]> = chosen.iter().map(|p| p.md5).collect();
    let mut meta = info.meta.clone();
    meta.headers.retain(|(n, _)| n != CHECKSUM_TYPE);
    meta.key = key.to_string();
    meta.size = chosen.iter().map(|p| p.size).sum();
    meta.etag = multipart_etag(&md5s);
    meta.last_modified = SystemTime::now();
    meta.parts_count = Some(chosen.len() as u32);
    meta.part_sizes = chosen.iter().map(|p| p.size).collect();
    meta.checksums = Vec::new();
    let mut checksums = Vec::new();
    if let Some(algo) = upload_algorithm(&info.meta) {
        let raw: Option<Vec<Vec<u8>>> = chosen
            .iter()
            .map(|p| {
                p.checksums
                    .iter()
                    .find(|(a, _)| ChecksumAlgorithm::parse(a) == Some(algo))
                    .and_then(|(_, v)| base64::engine::general_purpose::STANDARD.decode(v).ok())
            })
            .collect();
        let value = match raw {
            Some(raw) if full_object(&info.meta) => {
                let whole =
                    full_object_crc(algo, chosen.iter().zip(&raw).map(|(part, crc)| (crc.as_slice(), part.size)))
                        .ok_or_else(|| S3Error::new(500, "InternalError", "A part checksum could not be combined."))?;
                Some(base64_encode(&whole))
            }
            Some(raw) => Some(composite_checksum(algo, &raw)),
            None => None,
        };
        if let Some(value) = value {
            // The client may state the whole object's checksum on Complete; hold it to it.
            if let Some(stated) = req.headers.get(algo.header_name()).and_then(|v| v.to_str().ok()) {
                if stated.trim() != value {
                    return Err(S3Error::new(
                        400,
                        "BadDigest",
                        &format!("The {} you specified did not match the calculated checksum.", algo.as_str()),
                    ));
                }
            }
            meta.checksums.push((algo.as_str().to_string(), value.clone()));
            checksums.push((algo, value));
        }
    }
    let numbers: Vec<u32> = chosen.iter().map(|p| p.part_number).collect();
    app.backend.complete_multipart(bucket, key, &id, &numbers, meta.clone()).await?;
    let host = req.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("localhost");
    let body = xml::CompleteMultipartUploadResult {
        location: format!("http://{host}/{bucket}/{}", ferry_proto::encoding::uri_encode(key, false)),
        bucket: bucket.to_string(),
        key: key.to_string(),
        etag: meta.etag.clone(),
        checksums,
    }
    .to_xml();
    Ok(xml_response(body))
}

pub async fn abort(app: &App, route: &Route) -> Result<Response, S3Error> {
    app.backend.abort_multipart(route.bucket(), route.key(), upload_id(route)?).await?;
    Ok(Response::new(204))
}

pub async fn list_parts(app: &App, route: &Route) -> Result<Response, S3Error> {
    let (bucket, key) = (route.bucket(), route.key());
    let id = upload_id(route)?;
    let max_parts = route.param("max-parts").and_then(|v| v.parse::<u32>().ok()).unwrap_or(1000).min(1000);
    let marker = route.param("part-number-marker").and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
    let parts = app.backend.list_parts(bucket, key, id).await?;
    let after: Vec<PartMeta> = parts.into_iter().filter(|p| p.part_number > marker).collect();
    let is_truncated = after.len() > max_parts as usize;
    let page: Vec<PartMeta> = after.into_iter().take(max_parts as usize).collect();
    let next = page.last().map(|p| p.part_number).unwrap_or(marker);
    let body = xml::ListPartsResult {
        bucket: bucket.to_string(),
        key: key.to_string(),
        upload_id: id.to_string(),
        part_number_marker: marker,
        next_part_number_marker: next,
        max_parts,
        is_truncated,
        parts: page
            .into_iter()
            .map(|p| xml::PartEntry {
                part_number: p.part_number,
                last_modified: p.last_modified,
                etag: p.etag,
                size: p.size,
                checksums: p
                    .checksums
                    .iter()
                    .filter_map(|(a, v)| ChecksumAlgorithm::parse(a).map(|a| (a, v.clone())))
                    .collect(),
            })
            .collect(),
    }
    .to_xml();
    Ok(xml_response(body))
}

pub async fn list_uploads(app: &App, route: &Route) -> Result<Response, S3Error> {
    let bucket = route.bucket();
    let prefix = route.param("prefix").unwrap_or("").to_string();
    let key_marker = route.param("key-marker").unwrap_or("").to_string();
    let id_marker = route.param("upload-id-marker").unwrap_or("").to_string();
    let max_uploads = route.param("max-uploads").and_then(|v| v.parse::<u32>().ok()).unwrap_or(1000).min(1000);
    let all = app.backend.list_uploads(bucket).await?;
    let after: Vec<_> = all
        .into_iter()
        .filter(|u| u.key.starts_with(&prefix))
        .filter(|u| {
            key_marker.is_empty()
                || u.key > key_marker
                || (u.key == key_marker && !id_marker.is_empty() && u.upload_id > id_marker)
        })
        .collect();
    let is_truncated = after.len() > max_uploads as usize;
    let page: Vec<_> = after.into_iter().take(max_uploads as usize).collect();
    let (next_key, next_id) = match page.last() {
        Some(u) if is_truncated => (u.key.clone(), u.upload_id.clone()),
        _ => (String::new(), String::new()),
    };
    let body = xml::ListMultipartUploadsResult {
        bucket: bucket.to_string(),
        key_marker,
        upload_id_marker: id_marker,
        next_key_marker: next_key,
        next_upload_id_marker: next_id,
        prefix,
        delimiter: None,
        max_uploads,
        is_truncated,
        uploads: page
            .into_iter()
            .map(|u| xml::UploadEntry { key: u.key, upload_id: u.upload_id, initiated: u.initiated })
            .collect(),
        common_prefixes: Vec::new(),
    }
    .to_xml();
    Ok(xml_response(body))
}
