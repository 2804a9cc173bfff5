//! The S3 REST API: addressing, operation routing, errors, and dispatch to the handlers
//! in `bucket.rs`, `object.rs` and `multipart.rs`.
//!
//! Routing follows the S3 API reference: the operation is chosen by method, whether a
//! key is present, and the sub-resource query parameters
//! (https://docs.aws.amazon.com/AmazonS3/latest/API/API_Operations_Amazon_Simple_Storage_Service.html).
//! Both path-style (`/bucket/key`) and virtual-hosted (`bucket.localhost/key`) addressing
//! are accepted.

mod bucket;
mod multipart;
mod object;
mod upload;

use crate::app::App;
use crate::types::{Request, Response};
use ferry_backend::BackendError;
use ferry_proto::encoding::{parse_query, percent_decode};
use ferry_proto::sigv4::SigningContext;
use http::Method;

/// One S3 operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    ListBuckets,
    CreateBucket,
    HeadBucket,
    DeleteBucket,
    GetBucketLocation,
    GetBucketVersioning,
    ListObjectsV1,
    ListObjectsV2,
    ListMultipartUploads,
    DeleteObjects,
    PutObject,
    CopyObject,
    UploadPart,
    UploadPartCopy,
    GetObject,
    HeadObject,
    DeleteObject,
    CreateMultipartUpload,
    CompleteMultipartUpload,
    AbortMultipartUpload,
    ListParts,
    NotImplemented,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::ListBuckets => "ListBuckets",
            Op::CreateBucket => "CreateBucket",
            Op::HeadBucket => "HeadBucket",
            Op::DeleteBucket => "DeleteBucket",
            Op::GetBucketLocation => "GetBucketLocation",
            Op::GetBucketVersioning => "GetBucketVersioning",
            Op::ListObjectsV1 => "ListObjects",
            Op::ListObjectsV2 => "ListObjectsV2",
            Op::ListMultipartUploads => "ListMultipartUploads",
            Op::DeleteObjects => "DeleteObjects",
            Op::PutObject => "PutObject",
            Op::CopyObject => "CopyObject",
            Op::UploadPart => "UploadPart",
            Op::UploadPartCopy => "UploadPartCopy",
            Op::GetObject => "GetObject",
            Op::HeadObject => "HeadObject",
            Op::DeleteObject => "DeleteObject",
            Op::CreateMultipartUpload => "CreateMultipartUpload",
            Op::CompleteMultipartUpload => "CompleteMultipartUpload",
            Op::AbortMultipartUpload => "AbortMultipartUpload",
            Op::ListParts => "ListParts",
            Op::NotImplemented => "NotImplemented",
        }
    }
}

/// A routed request: which operation, on what.
pub struct Route {
    pub op: Op,
    pub bucket: Option<String>,
    pub key: Option<String>,
    /// Decoded query parameters.
    pub query: Vec<(String, String)>,
}

impl Route {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn bucket(&self) -> &str {
        self.bucket.as_deref().unwrap_or("")
    }

    fn key(&self) -> &str {
        self.key.as_deref().unwrap_or("")
    }
}

/// An S3 error: status, code and message, sent as an `<Error>` body.
#[derive(Debug)]
pub struct S3Error {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub resource: Option<String>,
    pub extra: Vec<(String, String)>,
    pub headers: Vec<(&'static str, String)>,
}

impl S3Error {
    pub fn new(status: u16, code: &'static str, message: &str) -> S3Error {
        S3Error { status, code, message: message.to_string(), resource: None, extra: Vec::new(), headers: Vec::new() }
    }

    pub fn slow_down() -> S3Error {
        S3Error::new(503, "SlowDown", "Please reduce your request rate.")
    }

    pub fn invalid_argument(message: &str) -> S3Error {
        S3Error::new(400, "InvalidArgument", message)
    }

    pub fn malformed_xml() -> S3Error {
        S3Error::new(
            400,
            "MalformedXML",
            "The XML you provided was not well-formed or did not validate against our published schema.",
        )
    }

    pub fn with_extra(mut self, name: &str, value: impl ToString) -> S3Error {
        self.extra.push((name.to_string(), value.to_string()));
        self
    }
}

impl From<BackendError> for S3Error {
    fn from(e: BackendError) -> S3Error {
        match e {
            BackendError::NoSuchBucket => S3Error::new(404, "NoSuchBucket", "The specified bucket does not exist."),
            BackendError::NoSuchKey => S3Error::new(404, "NoSuchKey", "The specified key does not exist."),
            BackendError::NoSuchUpload => S3Error::new(
                404,
                "NoSuchUpload",
                "The specified multipart upload does not exist. The upload ID might be invalid, or the multipart upload might have been aborted or completed.",
            ),
            BackendError::BucketAlreadyOwnedByYou => {
                S3Error::new(409, "BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it.")
            }
            BackendError::BucketNotEmpty => S3Error::new(409, "BucketNotEmpty", "The bucket you tried to delete is not empty."),
            BackendError::InvalidBucketName(m) => S3Error::new(400, "InvalidBucketName", &format!("The specified bucket is not valid: {m}")),
            BackendError::InvalidKey(m) => S3Error::new(400, "KeyTooLongError", &format!("Invalid key: {m}")),
            BackendError::InvalidPart(n) => S3Error::new(400, "InvalidPart", "One or more of the specified parts could not be found.").with_extra("PartNumber", n),
            BackendError::ReadOnly => S3Error::new(403, "AccessDenied", "The synthetic bucket is read-only."),
            BackendError::SizeMismatch { expected, written } => {
                S3Error::new(400, "IncompleteBody", &format!("You did not provide the number of bytes specified by the Content-Length HTTP header ({written} of {expected})."))
            }
            other => {
                tracing::error!("backend error: {other}");
                S3Error::new(500, "InternalError", "We encountered an internal error. Please try again.")
            }
        }
    }
}

/// Finds bucket, key and operation.
pub fn route(req: &Request) -> Result<Route, S3Error> {
    let path = percent_decode(&req.raw_path)
        .map_err(|_| S3Error::invalid_argument("The request path is not valid UTF-8 after percent-decoding."))?;
    let query = parse_query(&req.raw_query);
    let host = req.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    let hostname =
        host.rsplit_once(':').filter(|(_, p)| p.chars().all(|c| c.is_ascii_digit())).map(|(h, _)| h).unwrap_or(host);
    let rest = path.strip_prefix('/').unwrap_or(&path);
    let (bucket, key) = match hostname.strip_suffix(".localhost").filter(|b| !b.is_empty()) {
        Some(b) => (Some(b.to_string()), Some(rest.to_string()).filter(|k| !k.is_empty())),
        None => match rest.split_once('/') {
            Some((b, k)) => {
                (Some(b.to_string()).filter(|b| !b.is_empty()), Some(k.to_string()).filter(|k| !k.is_empty()))
            }
            None => (Some(rest.to_string()).filter(|b| !b.is_empty()), None),
        },
    };
    let mut route = Route { op: Op::NotImplemented, bucket, key, query };
    let has = |n: &str| route.query.iter().any(|(k, _)| k == n);
    let m = &req.method;
    route.op = match (&route.bucket, &route.key) {
        (None, _) if *m == Method::GET => Op::ListBuckets,
        (None, _) => Op::NotImplemented,
        (Some(_), None) => {
            if *m == Method::GET && has("location") {
                Op::GetBucketLocation
            } else if *m == Method::GET && has("versioning") {
                Op::GetBucketVersioning
            } else if *m == Method::GET && has("uploads") {
                Op::ListMultipartUploads
            } else if *m == Method::POST && has("delete") {
                Op::DeleteObjects
            } else if BUCKET_SUBRESOURCES.iter().any(|s| has(s)) {
                Op::NotImplemented
            } else if *m == Method::GET {
                if route.param("list-type") == Some("2") {
                    Op::ListObjectsV2
                } else {
                    Op::ListObjectsV1
                }
            } else if *m == Method::PUT {
                Op::CreateBucket
            } else if *m == Method::HEAD {
                Op::HeadBucket
            } else if *m == Method::DELETE {
                Op::DeleteBucket
            } else {
                Op::NotImplemented
            }
        }
        (Some(_), Some(_)) => {
            let copy = req.headers.contains_key("x-amz-copy-source");
            if OBJECT_SUBRESOURCES.iter().any(|s| has(s)) {
                Op::NotImplemented
            } else if *m == Method::PUT && has("partNumber") && has("uploadId") {
                if copy {
                    Op::UploadPartCopy
                } else {
                    Op::UploadPart
                }
            } else if *m == Method::PUT {
                if copy {
                    Op::CopyObject
                } else {
                    Op::PutObject
                }
            } else if *m == Method::GET && has("uploadId") {
                Op::ListParts
            } else if *m == Method::GET {
                Op::GetObject
            } else if *m == Method::HEAD {
                Op::HeadObject
            } else if *m == Method::DELETE && has("uploadId") {
                Op::AbortMultipartUpload
            } else if *m == Method::DELETE {
                Op::DeleteObject
            } else if *m == Method::POST && has("uploads") {
                Op::CreateMultipartUpload
            } else if *m == Method::POST && has("uploadId") {
                Op::CompleteMultipartUpload
            } else {
                Op::NotImplemented
            }
        }
    };
    Ok(route)
}

/// Bucket sub-resources this server does not implement; answered 501 NotImplemented
/// rather than misread as a listing.
const BUCKET_SUBRESOURCES: &[&str] = &[
    "acl",
    "policy",
    "cors",
    "lifecycle",
    "tagging",
    "website",
    "logging",
    "notification",
    "replication",
    "encryption",
    "object-lock",
    "ownershipControls",
    "publicAccessBlock",
    "accelerate",
    "requestPayment",
    "analytics",
    "inventory",
    "metrics",
    "intelligent-tiering",
    "versions",
];
const OBJECT_SUBRESOURCES: &[&str] =
    &["acl", "tagging", "retention", "legal-hold", "torrent", "restore", "select", "attributes"];

pub async fn dispatch(
    app: &App,
    req: &mut Request,
    route: &Route,
    signing: Option<&SigningContext>,
) -> Result<Response, S3Error> {
    match route.op {
        Op::ListBuckets => bucket::list_buckets(app).await,
        Op::CreateBucket => bucket::create(app, req, route).await,
        Op::HeadBucket => bucket::head(app, route).await,
        Op::DeleteBucket => bucket::delete(app, route).await,
        Op::GetBucketLocation => bucket::location(app, route).await,
        Op::GetBucketVersioning => bucket::versioning(app, route).await,
        Op::ListObjectsV1 | Op::ListObjectsV2 => bucket::list_objects(app, route).await,
        Op::ListMultipartUploads => multipart::list_uploads(app, route).await,
        Op::DeleteObjects => bucket::delete_objects(app, req, route).await,
        Op::PutObject => object::put(app, req, route, signing).await,
        Op::CopyObject => object::copy(app, req, route).await,
        Op::GetObject | Op::HeadObject => object::get(app, req, route).await,
        Op::DeleteObject => object::delete(app, route).await,
        Op::CreateMultipartUpload => multipart::create(app, req, route).await,
        Op::UploadPart => multipart::upload_part(app, req, route, signing).await,
        Op::UploadPartCopy => multipart::upload_part_copy(app, req, route).await,
        Op::CompleteMultipartUpload => multipart::complete(app, req, route).await,
        Op::AbortMultipartUpload => multipart::abort(app, route).await,
        Op::ListParts => multipart::list_parts(app, route).await,
        Op::NotImplemented => Err(S3Error::new(
            501,
            "NotImplemented",
            "A header or query you provided implies functionality that is not implemented.",
        )),
    }
}

/// Reads an XML request body, bounded by the server's limit.
async fn read_xml(app: &App, req: &mut Request) -> Result<bytes::Bytes, S3Error> {
    use crate::types::BodyReadError;
    match req.body.read_to_end(app.limits.max_xml_bytes).await {
        Ok(b) => Ok(b),
        Err(BodyReadError::TooLarge) => Err(S3Error::new(400, "MaxMessageLengthExceeded", "Your request was too big.")),
        Err(BodyReadError::Io(_)) => Err(S3Error::new(400, "IncompleteBody", "The request body ended early.")),
    }
}

fn xml_response(body: String) -> Response {
    Response::with_body(200, "application/xml", body)
}
