//! Client-side parsers for the S3 XML answers that [`crate::xml`] only writes:
//! InitiateMultipartUploadResult, CompleteMultipartUploadResult, CopyObjectResult,
//! DeleteResult, ListPartsResult, ListAllMyBucketsResult and ListMultipartUploadsResult.
//!
//! Design note: each parser walks the generic [`crate::xml::parse_document`] tree and
//! returns the same types the server writes, so a round trip through the writer and the
//! parser is the test. Unknown elements are ignored (S3 adds fields over time); missing
//! required ones are errors. Element names follow the API reference, e.g.
//! <https://docs.aws.amazon.com/AmazonS3/latest/API/API_CompleteMultipartUpload.html>.

use std::time::SystemTime;

use crate::checksum::ChecksumAlgorithm;
use crate::encoding::parse_iso8601;
use crate::xml::{
    parse_document, CompleteMultipartUploadResult, CopyObjectResult, DeleteError, DeleteResult, Element,
    InitiateMultipartUploadResult, ListAllMyBucketsResult, ListMultipartUploadsResult, ListPartsResult, PartEntry,
    UploadEntry, XmlError,
};

fn xerr(message: impl Into<String>) -> XmlError {
    XmlError { message: message.into() }
}

fn root(body: &[u8], expected: &str) -> Result<Element, XmlError> {
    let root = parse_document(body)?;
    if root.name != expected {
        return Err(xerr(format!("expected root element <{expected}>, found <{}>", root.name)));
    }
    Ok(root)
}

fn required<'a>(el: &'a Element, name: &str) -> Result<&'a str, XmlError> {
    el.child_text(name).map(str::trim).ok_or_else(|| xerr(format!("<{}> without <{name}>", el.name)))
}

fn number<T: std::str::FromStr>(el: &Element, name: &str) -> Result<Option<T>, XmlError> {
    el.child_text(name)
        .map(|t| t.trim().parse().map_err(|_| xerr(format!("<{name}> is not a number: {t:?}"))))
        .transpose()
}

fn time(el: &Element, name: &str) -> Result<Option<SystemTime>, XmlError> {
    el.child_text(name)
        .map(|t| parse_iso8601(t.trim()).ok_or_else(|| xerr(format!("<{name}> is not an ISO 8601 time: {t:?}"))))
        .transpose()
}

fn checksums(el: &Element) -> Vec<(ChecksumAlgorithm, String)> {
    el.children
        .iter()
        .filter_map(|c| ChecksumAlgorithm::from_xml_tag(&c.name).map(|a| (a, c.text.trim().to_owned())))
        .collect()
}

fn boolean(el: &Element, name: &str) -> bool {
    el.child_text(name).is_some_and(|t| t.trim().eq_ignore_ascii_case("true"))
}

/// `<InitiateMultipartUploadResult>`
pub fn parse_initiate_multipart(body: &[u8]) -> Result<InitiateMultipartUploadResult, XmlError> {
    let r = root(body, "InitiateMultipartUploadResult")?;
    Ok(InitiateMultipartUploadResult {
        bucket: r.child_text("Bucket").unwrap_or_default().to_owned(),
        key: r.child_text("Key").unwrap_or_default().to_owned(),
        upload_id: required(&r, "UploadId")?.to_owned(),
    })
}

/// `<CompleteMultipartUploadResult>`
pub fn parse_complete_multipart_result(body: &[u8]) -> Result<CompleteMultipartUploadResult, XmlError> {
    let r = root(body, "CompleteMultipartUploadResult")?;
    Ok(CompleteMultipartUploadResult {
        location: r.child_text("Location").unwrap_or_default().to_owned(),
        bucket: r.child_text("Bucket").unwrap_or_default().to_owned(),
        key: r.child_text("Key").unwrap_or_default().to_owned(),
        etag: required(&r, "ETag")?.to_owned(),
        checksums: checksums(&r),
    })
}

/// `<CopyObjectResult>`; a missing LastModified is tolerated (some servers omit it).
pub struct CopyObjectResultParsed {
    pub etag: String,
    pub last_modified: Option<SystemTime>,
    pub checksums: Vec<(ChecksumAlgorithm, String)>,
}

pub fn parse_copy_object_result(body: &[u8]) -> Result<CopyObjectResultParsed, XmlError> {
    let r = root(body, "CopyObjectResult")?;
    Ok(CopyObjectResultParsed {
        etag: required(&r, "ETag")?.to_owned(),
        last_modified: time(&r, "LastModified")?,
        checksums: checksums(&r),
    })
}

impl From<CopyObjectResult> for CopyObjectResultParsed {
    fn from(r: CopyObjectResult) -> Self {
        CopyObjectResultParsed { etag: r.etag, last_modified: Some(r.last_modified), checksums: r.checksums }
    }
}

/// `<DeleteResult>` of DeleteObjects.
pub fn parse_delete_result(body: &[u8]) -> Result<DeleteResult, XmlError> {
    let r = root(body, "DeleteResult")?;
    let deleted =
        r.children_named("Deleted").map(|d| required(d, "Key").map(str::to_owned)).collect::<Result<_, _>>()?;
    let errors = r
        .children_named("Error")
        .map(|e| {
            Ok(DeleteError {
                key: required(e, "Key")?.to_owned(),
                code: e.child_text("Code").unwrap_or_default().trim().to_owned(),
                message: e.child_text("Message").unwrap_or_default().to_owned(),
            })
        })
        .collect::<Result<_, XmlError>>()?;
    Ok(DeleteResult { deleted, errors })
}

/// `<ListAllMyBucketsResult>` (ListBuckets).
pub fn parse_list_buckets(body: &[u8]) -> Result<ListAllMyBucketsResult, XmlError> {
    let r = root(body, "ListAllMyBucketsResult")?;
    let owner = r.child("Owner");
    let buckets = match r.child("Buckets") {
        None => Vec::new(),
        Some(b) => b
            .children_named("Bucket")
            .map(|b| Ok((required(b, "Name")?.to_owned(), time(b, "CreationDate")?.unwrap_or(SystemTime::UNIX_EPOCH))))
            .collect::<Result<_, XmlError>>()?,
    };
    Ok(ListAllMyBucketsResult {
        owner_id: owner.and_then(|o| o.child_text("ID")).unwrap_or_default().to_owned(),
        owner_name: owner.and_then(|o| o.child_text("DisplayName")).unwrap_or_default().to_owned(),
        buckets,
    })
}

/// `<ListMultipartUploadsResult>`
pub fn parse_list_multipart_uploads(body: &[u8]) -> Result<ListMultipartUploadsResult, XmlError> {
    let r = root(body, "ListMultipartUploadsResult")?;
    let text = |name: &str| r.child_text(name).unwrap_or_default().to_owned();
    let uploads = r
        .children_named("Upload")
        .map(|u| {
            Ok(UploadEntry {
                key: required(u, "Key")?.to_owned(),
                upload_id: required(u, "UploadId")?.to_owned(),
                initiated: time(u, "Initiated")?.unwrap_or(SystemTime::UNIX_EPOCH),
            })
        })
        .collect::<Result<_, XmlError>>()?;
    Ok(ListMultipartUploadsResult {
        bucket: text("Bucket"),
        key_marker: text("KeyMarker"),
        upload_id_marker: text("UploadIdMarker"),
        next_key_marker: text("NextKeyMarker"),
        next_upload_id_marker: text("NextUploadIdMarker"),
        prefix: text("Prefix"),
        delimiter: r.child_text("Delimiter").map(str::to_owned),
        max_uploads: number(&r, "MaxUploads")?.unwrap_or(1000),
        is_truncated: boolean(&r, "IsTruncated"),
        uploads,
        common_prefixes: r
            .children_named("CommonPrefixes")
            .filter_map(|c| c.child_text("Prefix").map(str::to_owned))
            .collect(),
    })
}

/// `<ListPartsResult>`
pub fn parse_list_parts(body: &[u8]) -> Result<ListPartsResult, XmlError> {
    let r = root(body, "ListPartsResult")?;
    let parts = r
        .children_named("Part")
        .map(|p| {
            Ok(PartEntry {
                part_number: number(p, "PartNumber")?.ok_or_else(|| xerr("<Part> without <PartNumber>"))?,
                last_modified: time(p, "LastModified")?.unwrap_or(SystemTime::UNIX_EPOCH),
                etag: required(p, "ETag")?.to_owned(),
                size: number(p, "Size")?.unwrap_or(0),
                checksums: checksums(p),
            })
        })
        .collect::<Result<_, XmlError>>()?;
    Ok(ListPartsResult {
        bucket: r.child_text("Bucket").unwrap_or_default().to_owned(),
        key: r.child_text("Key").unwrap_or_default().to_owned(),
        upload_id: r.child_text("UploadId").unwrap_or_default().to_owned(),
        part_number_marker: number(&r, "PartNumberMarker")?.unwrap_or(0),
        next_part_number_marker: number(&r, "NextPartNumberMarker")?.unwrap_or(0),
        max_parts: number(&r, "MaxParts")?.unwrap_or(1000),
        is_truncated: boolean(&r, "IsTruncated"),
        parts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn t() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_369_353_600_123)
    }

    #[test]
    fn bucket_and_upload_listings_round_trip_through_the_writers() {
        let b = ListAllMyBucketsResult {
            owner_id: "o".into(),
            owner_name: "n".into(),
            buckets: vec![("a".into(), t()), ("b-2".into(), t())],
        };
        assert_eq!(parse_list_buckets(b.to_xml().as_bytes()).unwrap(), b);
        let empty = ListAllMyBucketsResult { owner_id: "o".into(), owner_name: "n".into(), buckets: vec![] };
        assert_eq!(parse_list_buckets(empty.to_xml().as_bytes()).unwrap(), empty);
        let u = ListMultipartUploadsResult {
            bucket: "b".into(),
            key_marker: String::new(),
            upload_id_marker: String::new(),
            next_key_marker: "k&2".into(),
            next_upload_id_marker: "u2".into(),
            prefix: "k".into(),
            delimiter: None,
            max_uploads: 2,
            is_truncated: true,
            uploads: vec![
                UploadEntry { key: "k&1".into(), upload_id: "u1".into(), initiated: t() },
                UploadEntry { key: "k&2".into(), upload_id: "u2".into(), initiated: t() },
            ],
            common_prefixes: vec![],
        };
        assert_eq!(parse_list_multipart_uploads(u.to_xml().as_bytes()).unwrap(), u);
        assert!(parse_list_multipart_uploads(b"<ListPartsResult/>").is_err());
    }

    #[test]
    fn round_trips_through_the_writers() {
        let i = InitiateMultipartUploadResult { bucket: "b".into(), key: "k&<".into(), upload_id: "u-1".into() };
        assert_eq!(parse_initiate_multipart(i.to_xml().as_bytes()).unwrap(), i);
        let c = CompleteMultipartUploadResult {
            location: "http://h/b/k".into(),
            bucket: "b".into(),
            key: "k".into(),
            etag: "\"abc-2\"".into(),
            checksums: vec![(ChecksumAlgorithm::Crc64Nvme, "AAAAAAAAAAA=".into())],
        };
        assert_eq!(parse_complete_multipart_result(c.to_xml().as_bytes()).unwrap(), c);
        let co = CopyObjectResult { etag: "\"e\"".into(), last_modified: t(), checksums: vec![] };
        let p = parse_copy_object_result(co.to_xml().as_bytes()).unwrap();
        assert_eq!((p.etag.as_str(), p.last_modified), ("\"e\"", Some(t())));
        let d = DeleteResult {
            deleted: vec!["a".into(), "b c".into()],
            errors: vec![DeleteError { key: "x".into(), code: "AccessDenied".into(), message: "Access Denied".into() }],
        };
        assert_eq!(parse_delete_result(d.to_xml().as_bytes()).unwrap(), d);
        let l = ListPartsResult {
            bucket: "b".into(),
            key: "k".into(),
            upload_id: "u".into(),
            part_number_marker: 0,
            next_part_number_marker: 2,
            max_parts: 1000,
            is_truncated: false,
            parts: vec![PartEntry {
                part_number: 2,
                last_modified: t(),
                etag: "\"p\"".into(),
                size: 5,
                checksums: vec![(ChecksumAlgorithm::Crc32c, "AAAAAA==".into())],
            }],
        };
        assert_eq!(parse_list_parts(l.to_xml().as_bytes()).unwrap(), l);
    }

    #[test]
    fn wrong_root_or_missing_fields_fail() {
        assert!(parse_initiate_multipart(b"<Error><Code>x</Code></Error>").is_err());
        assert!(parse_initiate_multipart(
            b"<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>"
        )
        .is_err());
        assert!(parse_complete_multipart_result(b"<CompleteMultipartUploadResult/>").is_err());
        assert!(parse_delete_result(b"not xml").is_err());
    }
}
