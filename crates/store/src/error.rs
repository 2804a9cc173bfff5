//! The one error a user of the S3 client sees, by meaning.
//!
//! Every failure ends up as one [`Error`] variant that says what the caller can do:
//! `NotFound` and `Precondition` are answers, `Throttled` and `Transport` are usually
//! passing, `Auth` needs other credentials, `Integrity` means bytes were bad and were
//! not handed over as good, `Protocol` means the peer broke S3 or HTTP.
//!
//! How a response becomes an error ([`from_response`]):
//!
//! ```text
//! status >= 300 ─┐
//!                ├─► read body (64 KiB cap) ─► parse <Error> ─► classify(status, code)
//! 200 + <Error> ─┘        (HEAD: no body, the status alone decides)
//! ```
//!
//! Classification reads the status and the S3 `<Code>` (a protocol field, listed in
//! the S3 API Reference, "Error responses"), never the
//! human-readable message. The request id comes from `x-amz-request-id`, else the body.

use ferry_wire::{ErrorKind, WireError};
use http::{HeaderMap, StatusCode};

/// Largest error body read: S3's `<Error>` documents are well under 1 KiB.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// An S3 client error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// 404: NoSuchKey, NoSuchBucket, NoSuchUpload.
    #[error("not found ({code}): {message}{}", rid(request_id))]
    NotFound { code: String, message: String, request_id: Option<String> },
    /// 412 PreconditionFailed or 304 Not Modified; also an object that changed while a
    /// GET was being resumed.
    #[error("precondition failed ({status} {code}): {message}{}", rid(request_id))]
    Precondition { status: u16, code: String, message: String, request_id: Option<String> },
    /// 503 SlowDown, 429, or another throttling code, after the retries ran out.
    #[error("throttled ({status} {code}): {message}{}", rid(request_id))]
    Throttled { status: u16, code: String, message: String, request_id: Option<String> },
    /// 403 AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId, expired tokens.
    #[error("not authorised ({status} {code}): {message}{}", rid(request_id))]
    Auth { status: u16, code: String, message: String, request_id: Option<String> },
    /// The transport failed; [`WireError::retry_safe`] says whether a retry could help.
    #[error("transport: {0}")]
    Transport(#[from] WireError),
    /// The response could not be understood (bad XML, missing headers, wrong range).
    #[error("protocol: {message}{}", rid(request_id))]
    Protocol { message: String, request_id: Option<String> },
    /// A length or checksum did not match: the bytes are not the object's.
    #[error("integrity: {message}{}", rid(request_id))]
    Integrity { message: String, request_id: Option<String> },
    /// Any other S3 error.
    #[error("service error ({status} {code}): {message}{}", rid(request_id))]
    Service { status: u16, code: String, message: String, request_id: Option<String> },
    /// Bad settings: endpoint URL, credentials files, parameters.
    #[error("configuration: {0}")]
    Config(String),
    /// A local file could not be read, written, created or allocated; `error` says which
    /// failure ("reading" here once named a full disk during a download's writes). The
    /// message carries it, so it is not also the error's `source()`: a caller printing the
    /// chain (`{:#}`) said it twice.
    #[error("local file {path}: {error}")]
    Io { path: String, error: std::io::Error },
}

fn rid(r: &Option<String>) -> String {
    match r {
        Some(r) => format!(" (request id {r})"),
        None => String::new(),
    }
}

impl Error {
    /// The `x-amz-request-id` of the failed request, when the server answered.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Error::NotFound { request_id, .. }
            | Error::Precondition { request_id, .. }
            | Error::Throttled { request_id, .. }
            | Error::Auth { request_id, .. }
            | Error::Protocol { request_id, .. }
            | Error::Integrity { request_id, .. }
            | Error::Service { request_id, .. } => request_id.as_deref(),
            _ => None,
        }
    }

    /// The S3 error code (`NoSuchKey`, `SlowDown`, ...), when the server sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::NotFound { code, .. }
            | Error::Precondition { code, .. }
            | Error::Throttled { code, .. }
            | Error::Auth { code, .. }
            | Error::Service { code, .. } => Some(code.as_str()),
            _ => None,
        }
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::NotFound { .. } => Some(404),
            Error::Precondition { status, .. }
            | Error::Throttled { status, .. }
            | Error::Auth { status, .. }
            | Error::Service { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    pub(crate) fn protocol(message: impl Into<String>, request_id: Option<String>) -> Error {
        Error::Protocol { message: message.into(), request_id }
    }

    pub(crate) fn integrity(message: impl Into<String>, request_id: Option<String>) -> Error {
        Error::Integrity { message: message.into(), request_id }
    }

    /// Whether another attempt may succeed and is safe, for a request of this
    /// idempotency (see retry.rs for the policy).
    pub(crate) fn retry_class(&self, idempotent: bool) -> Option<RetryClass> {
        match self {
            Error::Transport(e) if e.retry_safe(idempotent) => {
                Some(if e.kind() == ErrorKind::Timeout { RetryClass::Timeout } else { RetryClass::Transient })
            }
            // Throttling rejects the request before it acts: safe for every request.
            Error::Throttled { .. } => Some(RetryClass::Throttled),
            // 500/502/503/504 (or a 200 carrying InternalError): the server may have acted.
            // A 503 whose code is not a throttling one (a server still starting, MinIO's
            // XMinioServerNotInitialized) is retried like the SDKs retry it.
            Error::Service { status, code, .. }
                if idempotent && (matches!(*status, 500 | 502 | 503 | 504) || is_transient_code(code)) =>
            {
                Some(RetryClass::Transient)
            }
            _ => None,
        }
    }
}

/// Why an attempt is retried: throttling backs off longer, time-outs cost more budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryClass {
    Transient,
    Timeout,
    Throttled,
}

/// S3 codes meaning "try again" regardless of status (they also arrive in 200 bodies).
fn is_transient_code(code: &str) -> bool {
    matches!(code, "InternalError" | "ServiceUnavailable" | "RequestTimeout")
}

fn is_throttle_code(code: &str) -> bool {
    matches!(
        code,
        "SlowDown"
            | "Throttling"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "TooManyRequests"
            | "RequestThrottled"
    )
}

/// `x-amz-request-id`, if present.
pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    headers.get("x-amz-request-id").and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Types an S3 error by status and code.
pub(crate) fn classify(status: u16, code: String, message: String, request_id: Option<String>) -> Error {
    let code_for = |default: &str| if code.is_empty() { default.to_owned() } else { code.clone() };
    if is_throttle_code(&code) || status == 429 || (status == 503 && (code.is_empty() || code == "SlowDown")) {
        return Error::Throttled { status, code: code_for("SlowDown"), message, request_id };
    }
    if status == 404 || matches!(code.as_str(), "NoSuchKey" | "NoSuchBucket" | "NoSuchUpload" | "NoSuchVersion") {
        return Error::NotFound { code: code_for("NotFound"), message, request_id };
    }
    if status == 412 || status == 304 || code == "PreconditionFailed" {
        let default = if status == 304 { "NotModified" } else { "PreconditionFailed" };
        return Error::Precondition { status, code: code_for(default), message, request_id };
    }
    if status == 401
        || status == 403
        || matches!(
            code.as_str(),
            "AccessDenied"
                | "SignatureDoesNotMatch"
                | "InvalidAccessKeyId"
                | "ExpiredToken"
                | "InvalidToken"
                | "RequestTimeTooSkewed"
        )
    {
        return Error::Auth { status, code: code_for("AccessDenied"), message, request_id };
    }
    let fallback =
        StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error").replace(' ', "");
    Error::Service { status, code: code_for(&fallback), message, request_id }
}

/// The error a non-success response stands for. Reads (and consumes) its body.
pub(crate) async fn from_response(resp: ferry_wire::Response, head_request: bool) -> Error {
    let status = resp.status.as_u16();
    let rid = request_id(&resp.headers);
    if head_request || status == 304 {
        return classify(status, String::new(), String::new(), rid);
    }
    let body = match resp.body.collect(ERROR_BODY_LIMIT).await {
        Ok(b) => b,
        // The error status is what matters; a broken error body is still that error.
        Err(e) => return classify(status, String::new(), format!("(error body unreadable: {e})"), rid),
    };
    from_error_body(status, &body, rid)
}

/// Types an `<Error>` body (also one that came with a 200).
pub(crate) fn from_error_body(status: u16, body: &[u8], rid: Option<String>) -> Error {
    match ferry_proto::xml::parse_error(body) {
        Some(e) => {
            let rid = rid.or_else(|| (!e.request_id.is_empty()).then(|| e.request_id.clone()));
            // A 200 with an error body: type it by its code, as if the status matched.
            let status = if status == 200 { status_for_code(&e.code) } else { status };
            classify(status, e.code, e.message, rid)
        }
        None => {
            classify(status, String::new(), String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(), rid)
        }
    }
}

/// The status S3 pairs with a code, for a 200 whose body is an `<Error>`.
fn status_for_code(code: &str) -> u16 {
    match code {
        "InternalError" => 500,
        "SlowDown" | "ServiceUnavailable" => 503,
        "NoSuchKey" | "NoSuchBucket" | "NoSuchUpload" => 404,
        "AccessDenied" | "SignatureDoesNotMatch" | "InvalidAccessKeyId" => 403,
        "PreconditionFailed" => 412,
        "RequestTimeout" => 400,
        _ => 400,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_type_errors() {
        let c = |s, code: &str| classify(s, code.into(), String::new(), Some("r".into()));
        assert!(matches!(c(404, "NoSuchKey"), Error::NotFound { .. }));
        assert!(matches!(c(404, ""), Error::NotFound { .. }));
        assert!(matches!(c(412, "PreconditionFailed"), Error::Precondition { .. }));
        assert!(matches!(c(304, ""), Error::Precondition { .. }));
        assert!(matches!(c(503, "SlowDown"), Error::Throttled { .. }));
        assert!(matches!(c(429, ""), Error::Throttled { .. }));
        assert!(matches!(c(403, "SignatureDoesNotMatch"), Error::Auth { .. }));
        assert!(matches!(c(400, "InvalidAccessKeyId"), Error::Auth { .. }));
        assert!(matches!(c(500, "InternalError"), Error::Service { status: 500, .. }));
        assert_eq!(c(500, "InternalError").request_id(), Some("r"));
        assert_eq!(c(400, "").code(), Some("BadRequest"));
    }

    #[test]
    fn ok_with_error_body_is_typed_by_code() {
        let body = b"<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message><RequestId>abc</RequestId></Error>";
        let e = from_error_body(200, body, None);
        assert!(matches!(&e, Error::Service { status: 500, code, .. } if code == "InternalError"));
        assert_eq!(e.request_id(), Some("abc"));
        assert!(e.retry_class(true).is_some());
        assert!(e.retry_class(false).is_none());
        let e = from_error_body(200, b"<Error><Code>SlowDown</Code><Message>m</Message></Error>", None);
        assert!(matches!(e, Error::Throttled { .. }));
        let e = from_error_body(200, b"<Error><Code>NoSuchUpload</Code><Message>m</Message></Error>", None);
        assert!(matches!(e, Error::NotFound { .. }));
    }

    #[test]
    fn retry_classes() {
        let reset = Error::Transport(WireError::new(ErrorKind::Reset, "x"));
        assert_eq!(reset.retry_class(true), Some(RetryClass::Transient));
        assert_eq!(reset.retry_class(false), None);
        let connect = Error::Transport(WireError::new(ErrorKind::Connect, "x"));
        assert_eq!(connect.retry_class(false), Some(RetryClass::Transient));
        let timeout = Error::Transport(WireError::new(ErrorKind::Timeout, "x"));
        assert_eq!(timeout.retry_class(true), Some(RetryClass::Timeout));
        let tls = Error::Transport(WireError::new(ErrorKind::Tls, "x"));
        assert_eq!(tls.retry_class(true), None);
        assert_eq!(
            classify(503, "SlowDown".into(), String::new(), None).retry_class(false),
            Some(RetryClass::Throttled)
        );
        assert_eq!(classify(404, "NoSuchKey".into(), String::new(), None).retry_class(true), None);
        assert_eq!(classify(502, String::new(), String::new(), None).retry_class(true), Some(RetryClass::Transient));
        let starting = classify(503, "XMinioServerNotInitialized".into(), String::new(), None);
        assert!(matches!(starting, Error::Service { .. }), "{starting:?}");
        assert_eq!(starting.retry_class(true), Some(RetryClass::Transient));
        assert_eq!(starting.retry_class(false), None);
    }
}
