//! How an Azure answer becomes an [`Error`]: the status and Azure's error code (the
//! `x-ms-error-code` header, else `<Error><Code>` in the body; "Blob Service Error
//! Codes" in the REST reference), never the message. The request id is
//! `x-ms-request-id`. A HEAD has no body, so the header alone names its code.
//!
//! | meaning | codes |
//! |---|---|
//! | NotFound | 404, BlobNotFound, ContainerNotFound, ResourceNotFound |
//! | Precondition | 412 ConditionNotMet, 304, 409 BlobAlreadyExists (an `If-None-Match: *` put) |
//! | Throttled | 429, 503 ServerBusy (Retry-After honoured by client.rs) |
//! | Auth | 401, 403 AuthenticationFailed, AuthorizationFailure, ... |
//! | Integrity | 400 Md5Mismatch, Crc64Mismatch (the service refused our bytes) |

use crate::error::Error;
use http::{HeaderMap, StatusCode};
use std::time::Duration;

/// Largest error body read: Azure's `<Error>` documents are well under 1 KiB.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    headers.get("x-ms-request-id").and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// `Retry-After` in seconds (Azure does not send the HTTP-date form).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers.get("retry-after")?.to_str().ok()?.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Azure's `<Message>` is the sentence, then `RequestId:...` and `Time:...` on lines of
/// their own; the request id is kept from its header, so the message is the first line.
fn first_line(message: &str) -> String {
    message.trim().lines().next().unwrap_or_default().trim().to_owned()
}

/// Types an Azure error by status and code.
pub(crate) fn classify(status: u16, code: String, message: String, request_id: Option<String>) -> Error {
    let code_for = |default: &str| if code.is_empty() { default.to_owned() } else { code.clone() };
    if status == 429
        || (status == 503
            && matches!(
                code.as_str(),
                "" | "ServerBusy" | "IngressOverAccountLimit" | "EgressOverAccountLimit" | "TpsOverAccountLimit"
            ))
    {
        return Error::Throttled { status, code: code_for("ServerBusy"), message, request_id };
    }
    if status == 404 || matches!(code.as_str(), "BlobNotFound" | "ContainerNotFound" | "ResourceNotFound") {
        return Error::NotFound { code: code_for("NotFound"), message, request_id };
    }
    if status == 412
        || status == 304
        || matches!(
            code.as_str(),
            "ConditionNotMet" | "SourceConditionNotMet" | "TargetConditionNotMet" | "BlobAlreadyExists"
        )
    {
        let default = if status == 304 { "NotModified" } else { "ConditionNotMet" };
        return Error::Precondition { status, code: code_for(default), message, request_id };
    }
    if status == 401
        || status == 403
        || matches!(
            code.as_str(),
            "AuthenticationFailed"
                | "AuthorizationFailure"
                | "AuthorizationPermissionMismatch"
                | "InvalidAuthenticationInfo"
                | "NoAuthenticationInformation"
        )
    {
        return Error::Auth { status, code: code_for("AuthenticationFailed"), message, request_id };
    }
    if matches!(code.as_str(), "Md5Mismatch" | "Crc64Mismatch" | "InvalidMd5") {
        return Error::Integrity { message: format!("{code}: {message}"), request_id };
    }
    let fallback =
        StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error").replace(' ', "");
    Error::Service { status, code: code_for(&fallback), message, request_id }
}

/// The error a non-success response stands for, and how long it asks us to wait.
pub(crate) async fn from_response(resp: ferry_wire::Response, head_request: bool) -> (Error, Option<Duration>) {
    let status = resp.status.as_u16();
    let rid = request_id(&resp.headers);
    let wait = retry_after(&resp.headers);
    let header_code =
        resp.headers.get("x-ms-error-code").and_then(|v| v.to_str().ok()).map(str::to_owned).unwrap_or_default();
    if head_request || status == 304 {
        return (classify(status, header_code, String::new(), rid), wait);
    }
    let body = match resp.body.collect(ERROR_BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return (classify(status, header_code, format!("(error body unreadable: {e})"), rid), wait),
    };
    let (code, message) = match ferry_proto::xml::parse_error(&body) {
        Some(e) => (if header_code.is_empty() { e.code } else { header_code }, first_line(&e.message)),
        None => (header_code, String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned()),
    };
    (classify(status, code, message, rid), wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_the_sentence_without_the_request_id_and_time_lines() {
        let m = "Server failed to authenticate the request.\nRequestId:e771132d\nTime:2026-11-27T18:13:58.567Z";
        assert_eq!(first_line(m), "Server failed to authenticate the request.");
        assert_eq!(first_line("  one line  "), "one line");
        assert_eq!(first_line(""), "");
    }

    #[test]
    fn codes_type_errors() {
        let c = |s, code: &str| classify(s, code.into(), String::new(), Some("r".into()));
        assert!(matches!(c(404, "BlobNotFound"), Error::NotFound { .. }));
        assert!(matches!(c(404, "ContainerNotFound"), Error::NotFound { .. }));
        assert!(matches!(c(412, "ConditionNotMet"), Error::Precondition { .. }));
        assert!(matches!(c(409, "BlobAlreadyExists"), Error::Precondition { status: 409, .. }));
        assert!(matches!(c(304, ""), Error::Precondition { .. }));
        assert!(matches!(c(503, "ServerBusy"), Error::Throttled { .. }));
        assert!(matches!(c(429, ""), Error::Throttled { .. }));
        assert!(matches!(c(403, "AuthenticationFailed"), Error::Auth { .. }));
        assert!(matches!(c(400, "Md5Mismatch"), Error::Integrity { .. }));
        assert!(matches!(c(409, "ContainerAlreadyExists"), Error::Service { status: 409, .. }));
        assert!(matches!(c(500, "InternalError"), Error::Service { status: 500, .. }));
        assert_eq!(c(500, "InternalError").request_id(), Some("r"));
        assert_eq!(c(503, "ServerBusy").retry_class(false), Some(crate::error::RetryClass::Throttled));
    }

    #[test]
    fn retry_after_reads_seconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }
}
