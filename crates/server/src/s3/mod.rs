//! The S3 REST API: addressing, operation routing, errors, and dispatch to the handlers
//! in `bucket.rs`, `object.rs` and `multipart.rs`.
//!
//! Routing follows the S3 API reference: the operation is chosen by method, whether a
//! key is present, and the sub-resource query parameters
//! (https://docs.aws.amazon.com/AmazonS3/latest/API/API_Operations_Amazon_Simple_Storage_Service.html).
//! Both path-style (`/bucket/key`) and virtual-hosted (`bucket.localhost/key`) addressing
//! are accepted.
//!
//! # What the server claims
//!
//! Buckets: ListBuckets, CreateBucket (BucketAlreadyOwnedByYou when it exists: the
//! server has one owner), HeadBucket, DeleteBucket (unfinished multipart uploads go
//! with the bucket), GetBucketLocation, Get/PutBucketVersioning (the state is kept;
//! `Enabled` is refused, as versions are not), Get/PutBucketAcl. Objects: Put, Get and
//! Head (ranges, conditions, checksums, `partNumber`), CopyObject, DeleteObject,
//! DeleteObjects, Get/PutObjectAcl. Listing: ListObjects v1 and v2 (`fetch-owner`,
//! `encoding-type=url`), ListObjectVersions (each object once, version id "null"),
//! ListMultipartUploads, ListParts. Multipart: Create, UploadPart, UploadPartCopy,
//! Complete, Abort. A version id of "null" is accepted wherever one may be named; any
//! other is NoSuchVersion. ACLs are the canned `private` only (acl.rs). Auth: SigV4
//! headers, presigned and aws-chunked, and the legacy SigV2 (headers and presigned),
//! or anonymous when configured so.
//!
//! Everything else answers 501 NotImplemented naming the operation (GetBucketCors,
//! PutObjectTagging, PostObject, ...): bucket policies, CORS, lifecycle, tagging,
//! website, logging, notifications, replication, encryption settings, object lock,
//! retention and legal hold, ownership controls, public access blocks, object
//! attributes, restore and select, POST uploads. A sub-resource never falls through to
//! a listing or to the object.

mod acl;
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
    ListObjectVersions,
    GetBucketAcl,
    PutBucketAcl,
    GetObjectAcl,
    PutObjectAcl,
    PutBucketVersioning,
    /// Not implemented here: answered 501 naming the operation.
    NotImplemented(Unimplemented),
}

/// The S3 name of an operation this server does not implement, e.g. GetBucketCors:
/// a verb, a scope and a noun, joined when written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unimplemented {
    verb: &'static str,
    scope: &'static str,
    noun: &'static str,
}

impl Unimplemented {
    const fn named(name: &'static str) -> Unimplemented {
        Unimplemented { verb: "", scope: "", noun: name }
    }

    /// `GetBucketCors`, `PutObjectTagging`, ...: a sub-resource's operation by method.
    fn sub_resource(m: &Method, scope: &'static str, noun: &'static str) -> Unimplemented {
        let verb = match *m {
            Method::GET | Method::HEAD => "Get",
            Method::PUT => "Put",
            Method::DELETE => "Delete",
            Method::POST => "Post",
            _ => "Unknown",
        };
        Unimplemented { verb, scope, noun }
    }
}

impl std::fmt::Display for Unimplemented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}{}", self.verb, self.scope, self.noun)
    }
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
            Op::ListObjectVersions => "ListObjectVersions",
            Op::GetBucketAcl => "GetBucketAcl",
            Op::PutBucketAcl => "PutBucketAcl",
            Op::GetObjectAcl => "GetObjectAcl",
            Op::PutObjectAcl => "PutObjectAcl",
            Op::PutBucketVersioning => "PutBucketVersioning",
            Op::NotImplemented(_) => "NotImplemented",
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
    /// The bucket came from the Host (`bucket.localhost`), not the path.
    pub virtual_host: bool,
}

impl Route {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub(crate) fn bucket(&self) -> &str {
        self.bucket.as_deref().unwrap_or("")
    }

    pub(crate) fn key(&self) -> &str {
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
                "The specified multipart upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
            ),
            BackendError::BucketAlreadyOwnedByYou => {
                S3Error::new(409, "BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it.")
            }
            BackendError::BucketNotEmpty => S3Error::new(409, "BucketNotEmpty", "The bucket you tried to delete is not empty."),
            // S3's message word for word; why the name is refused goes beside it.
            BackendError::InvalidBucketName(m) => S3Error::new(400, "InvalidBucketName", "The specified bucket is not valid.").with_extra("Reason", m),
            BackendError::InvalidKey(m) => S3Error::new(400, "KeyTooLongError", &format!("Invalid key: {m}")),
            BackendError::InvalidPart(n) => S3Error::new(400, "InvalidPart", INVALID_PART).with_extra("PartNumber", n),
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

/// The bucket a virtual-hosted request names in its Host (`bucket.localhost[:port]`).
pub fn virtual_host_bucket(req: &Request) -> Option<&str> {
    let host = req.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    let hostname =
        host.rsplit_once(':').filter(|(_, p)| p.chars().all(|c| c.is_ascii_digit())).map(|(h, _)| h).unwrap_or(host);
    hostname.strip_suffix(".localhost").filter(|b| !b.is_empty())
}

/// Finds bucket, key and operation.
pub fn route(req: &Request) -> Result<Route, S3Error> {
    let path = percent_decode(&req.raw_path)
        .map_err(|_| S3Error::invalid_argument("The request path is not valid UTF-8 after percent-decoding."))?;
    let query = parse_query(&req.raw_query);
    let rest = path.strip_prefix('/').unwrap_or(&path);
    let vhost = virtual_host_bucket(req);
    let (bucket, key) = match vhost {
        Some(b) => (Some(b.to_string()), Some(rest.to_string()).filter(|k| !k.is_empty())),
        None => match rest.split_once('/') {
            Some((b, k)) => {
                (Some(b.to_string()).filter(|b| !b.is_empty()), Some(k.to_string()).filter(|k| !k.is_empty()))
            }
            None => (Some(rest.to_string()).filter(|b| !b.is_empty()), None),
        },
    };
    let mut route = Route { op: Op::NotImplemented(UNKNOWN), bucket, key, query, virtual_host: vhost.is_some() };
    let has = |n: &str| route.query.iter().any(|(k, _)| k == n);
    let m = &req.method;
    let (get, put, post, delete, head) =
        (*m == Method::GET, *m == Method::PUT, *m == Method::POST, *m == Method::DELETE, *m == Method::HEAD);
    route.op = match (&route.bucket, &route.key) {
        (None, _) if get => Op::ListBuckets,
        (None, _) => Op::NotImplemented(if post { Unimplemented::named("WriteGetObjectResponse") } else { UNKNOWN }),
        (Some(_), None) => {
            if let Some(sub) = BUCKET_SUBRESOURCES.iter().find(|s| has(s.0)) {
                match (sub.0, get, put) {
                    ("location", true, _) => Op::GetBucketLocation,
                    ("versioning", true, _) => Op::GetBucketVersioning,
                    ("versioning", _, true) => Op::PutBucketVersioning,
                    ("versions", true, _) => Op::ListObjectVersions,
                    ("acl", true, _) => Op::GetBucketAcl,
                    ("acl", _, true) => Op::PutBucketAcl,
                    ("uploads", true, _) => Op::ListMultipartUploads,
                    ("delete", _, _) if post => Op::DeleteObjects,
                    _ => Op::NotImplemented(Unimplemented::sub_resource(m, "Bucket", sub.1)),
                }
            } else if get {
                if route.param("list-type") == Some("2") {
                    Op::ListObjectsV2
                } else {
                    Op::ListObjectsV1
                }
            } else if put {
                Op::CreateBucket
            } else if head {
                Op::HeadBucket
            } else if delete {
                Op::DeleteBucket
            } else if post {
                Op::NotImplemented(Unimplemented::named("PostObject"))
            } else {
                Op::NotImplemented(UNKNOWN)
            }
        }
        (Some(_), Some(_)) => {
            let copy = req.headers.contains_key("x-amz-copy-source");
            if let Some(sub) = OBJECT_SUBRESOURCES.iter().find(|s| has(s.0)) {
                match (sub.0, get, put) {
                    ("acl", true, _) => Op::GetObjectAcl,
                    ("acl", _, true) => Op::PutObjectAcl,
                    ("restore", _, _) => Op::NotImplemented(Unimplemented::named("RestoreObject")),
                    ("select", _, _) => Op::NotImplemented(Unimplemented::named("SelectObjectContent")),
                    ("torrent", _, _) => Op::NotImplemented(Unimplemented::named("GetObjectTorrent")),
                    _ => Op::NotImplemented(Unimplemented::sub_resource(m, "Object", sub.1)),
                }
            } else if put && has("partNumber") && has("uploadId") {
                if copy {
                    Op::UploadPartCopy
                } else {
                    Op::UploadPart
                }
            } else if put {
                if copy {
                    Op::CopyObject
                } else {
                    Op::PutObject
                }
            } else if get && has("uploadId") {
                Op::ListParts
            } else if get {
                Op::GetObject
            } else if head {
                Op::HeadObject
            } else if delete && has("uploadId") {
                Op::AbortMultipartUpload
            } else if delete {
                Op::DeleteObject
            } else if post && has("uploads") {
                Op::CreateMultipartUpload
            } else if post && has("uploadId") {
                Op::CompleteMultipartUpload
            } else {
                Op::NotImplemented(UNKNOWN)
            }
        }
    };
    Ok(route)
}

/// Bucket sub-resources, each with the noun of its operations' names (`GET ?cors` is
/// GetBucketCors). The ones `route` does not pick out answer 501 naming the operation,
/// never a listing.
const BUCKET_SUBRESOURCES: &[(&str, &str)] = &[
    ("location", "Location"),
    ("versioning", "Versioning"),
    ("versions", "Versions"),
    ("acl", "Acl"),
    ("uploads", "Uploads"),
    ("delete", "Delete"),
    ("policy", "Policy"),
    ("policyStatus", "PolicyStatus"),
    ("cors", "Cors"),
    ("lifecycle", "LifecycleConfiguration"),
    ("tagging", "Tagging"),
    ("website", "Website"),
    ("logging", "Logging"),
    ("notification", "NotificationConfiguration"),
    ("replication", "Replication"),
    ("encryption", "Encryption"),
    ("object-lock", "ObjectLockConfiguration"),
    ("ownershipControls", "OwnershipControls"),
    ("publicAccessBlock", "PublicAccessBlock"),
    ("accelerate", "AccelerateConfiguration"),
    ("requestPayment", "RequestPayment"),
    ("analytics", "AnalyticsConfiguration"),
    ("inventory", "InventoryConfiguration"),
    ("metrics", "MetricsConfiguration"),
    ("intelligent-tiering", "IntelligentTieringConfiguration"),
    ("metadataTable", "MetadataTableConfiguration"),
];
const OBJECT_SUBRESOURCES: &[(&str, &str)] = &[
    ("acl", "Acl"),
    ("tagging", "Tagging"),
    ("retention", "Retention"),
    ("legal-hold", "LegalHold"),
    ("torrent", "Torrent"),
    ("restore", "Restore"),
    ("select", "Select"),
    ("attributes", "Attributes"),
];

/// A method and target no S3 operation has.
const UNKNOWN: Unimplemented = Unimplemented::named("this method on this resource");

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
        Op::ListObjectVersions => bucket::list_versions(app, route).await,
        Op::GetBucketAcl => acl::get_bucket(app, route).await,
        Op::PutBucketAcl => acl::put_bucket(app, req, route).await,
        Op::GetObjectAcl => acl::get_object(app, route).await,
        Op::PutObjectAcl => acl::put_object(app, req, route).await,
        Op::PutBucketVersioning => bucket::put_versioning(app, req, route).await,
        Op::NotImplemented(name) => Err(S3Error::new(
            501,
            "NotImplemented",
            &format!("{name} is not implemented by this server (ferry serve)."),
        )),
    }
}

/// S3's InvalidPart message, word for word (two spaces after the first sentence).
pub const INVALID_PART: &str = "One or more of the specified parts could not be found.  The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.";

/// Object lock headers on a write: no bucket here has an object lock configuration.
pub fn refuse_object_lock(req: &Request) -> Result<(), S3Error> {
    if req.headers.keys().any(|h| h.as_str().starts_with("x-amz-object-lock-")) {
        return Err(S3Error::new(400, "InvalidRequest", "Bucket is missing ObjectLockConfiguration"));
    }
    Ok(())
}

/// The one owner of every bucket and object: the server has one set of credentials.
pub fn owner() -> ferry_proto::xml::Owner {
    ferry_proto::xml::Owner { id: "ferry".into(), display_name: "ferry".into() }
}

/// A version id other than "null" (the only version this server keeps).
pub fn no_such_version() -> S3Error {
    S3Error::new(404, "NoSuchVersion", "The specified version does not exist.")
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
