//! The S3 XML bodies both sides parse (`ferry_proto::xml`, `ferry_proto::client_xml`):
//! the server reads DeleteObjects, CompleteMultipartUpload and CreateBucket bodies; the
//! client reads listings (ListObjectsV2/V1, ListBuckets, ListMultipartUploads,
//! ListParts), InitiateMultipartUpload, CompleteMultipartUpload and CopyObject results,
//! DeleteObjects results and `<Error>` bodies.
//!
//! The input is one XML document, offered to every parser. Properties:
//! - no parser panics;
//! - parse, print, parse, print: whatever a parser accepts, our writer for that body (the
//!   server's `to_xml`, or the client's request writer) prints a document that parses
//!   back to a value that prints the same. So a key, an ETag or an upload id the server
//!   stored from one body comes back intact in the next.

use ferry_proto::client_xml as cx;
use ferry_proto::xml::{self, DeleteRequest, XmlWriter};

/// Parse, print, parse, print: the second parse must succeed and print the same document.
/// (Printed documents are compared rather than values because times are printed to the
/// millisecond, as S3 prints them, while the parsers keep any finer digits they are sent.)
macro_rules! round_trip {
    ($body:expr, $parse:expr, $print:expr) => {
        if let Ok(v) = $parse($body) {
            let printed: String = $print(&v);
            match $parse(printed.as_bytes()) {
                Ok(again) => {
                    let reprinted: String = $print(&again);
                    assert_eq!(reprinted, printed, "{} does not print back", stringify!($parse));
                }
                Err(e) => panic!("{} cannot parse what we printed: {e:?}\n{printed}", stringify!($parse)),
            }
        }
    };
}

/// Runs one input through the properties above; panics where one fails.
pub fn check(body: &[u8]) {
    let _ = xml::parse_document(body);
    // Server side: request bodies.
    round_trip!(body, xml::parse_delete, |v: &DeleteRequest| v.to_xml());
    round_trip!(body, xml::parse_complete_multipart, |v: &Vec<xml::CompletedPart>| xml::complete_multipart_to_xml(v));
    round_trip!(body, xml::parse_create_bucket, |v: &Option<String>| {
        // The body a client writes (ferry's store sends none for us-east-1).
        let mut w = XmlWriter::new();
        w.open_root("CreateBucketConfiguration").leaf_opt("LocationConstraint", v.as_deref());
        w.close("CreateBucketConfiguration");
        w.finish()
    });
    // Client side: answers.
    round_trip!(body, xml::parse_list_objects_v2, |v: &xml::ListObjectsV2Result| v.to_xml());
    round_trip!(body, xml::parse_list_objects_v1, |v: &xml::ListObjectsV1Result| v.to_xml());
    round_trip!(body, cx::parse_list_buckets, |v: &xml::ListAllMyBucketsResult| v.to_xml());
    round_trip!(body, cx::parse_list_multipart_uploads, |v: &xml::ListMultipartUploadsResult| v.to_xml());
    round_trip!(body, cx::parse_list_parts, |v: &xml::ListPartsResult| v.to_xml());
    round_trip!(body, cx::parse_initiate_multipart, |v: &xml::InitiateMultipartUploadResult| v.to_xml());
    round_trip!(body, cx::parse_complete_multipart_result, |v: &xml::CompleteMultipartUploadResult| v.to_xml());
    round_trip!(body, cx::parse_delete_result, |v: &xml::DeleteResult| v.to_xml());
    let _ = cx::parse_copy_object_result(body);
    if let Some(mut e) = xml::parse_error(body) {
        // Extra elements are kept by whatever local name the reader took (quick-xml does not
        // check names), so only plain names can print back: all that S3 and the server use.
        let plain = |n: &str| {
            n.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        };
        e.extra.retain(|(name, _)| plain(name));
        let printed = e.to_xml();
        let again = xml::parse_error(printed.as_bytes()).map(|e| e.to_xml());
        assert_eq!(again, Some(printed), "parse_error does not print back");
    }
}
