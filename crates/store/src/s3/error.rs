//! How an S3 answer becomes an [`Error`]: the status and S3's `<Code>` (a protocol
//! field, listed in the S3 API Reference, "Error responses"), never the human-readable
//! message. The request id comes from `x-amz-request-id`, else the body.
//!
//! ```text
//! status >= 300 ─┐
//!                ├─► read body (64 KiB cap) ─► parse <Error> ─► classify(status, code)
//! 200 + <Error> ─┘        (HEAD: no body, the status alone decides)
//! ```

use crate::error::Error;
use http::{HeaderMap, StatusCode};

/// Largest error body read: S3's `<Error>` documents are well under 1 KiB.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

pub(crate) fn is_throttle_code(code: &str) -> bool {
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
        return classify(status, String::new(), bodiless_reason(status).to_owned(), rid);
    }
    let body = match resp.body.collect(ERROR_BODY_LIMIT).await {
        Ok(b) => b,
        // The error status is what matters; a broken error body is still that error.
        Err(e) => return classify(status, String::new(), format!("(error body unreadable: {e})"), rid),
    };
    from_error_body(status, &body, rid)
}

/// What a HEAD's (or a 304's) status means, since such an answer has no `<Error>` body
/// to say it.
fn bodiless_reason(status: u16) -> &'static str {
    match status {
        404 => "no such key, or no such bucket",
        403 => "access denied (the answer to a HEAD carries no reason: a wrong key or signature, or no permission)",
        304 => "",
        412 => "",
        _ => StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or(""),
    }
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
}
