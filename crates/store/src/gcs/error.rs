//! How a GCS answer becomes an [`Error`]: the status and the JSON API's `reason`
//! (`{"error": {"code", "message", "errors": [{"reason"}]}}`), never the message text.
//! Media downloads and some emulator paths answer with plain text or S3-style XML; the
//! status alone decides then.
//!
//! The request id is Google's upload/request id header, `x-guploader-uploadid`, which
//! every storage.googleapis.com answer carries (there is no id in the JSON body).

use crate::error::Error;
use http::{HeaderMap, StatusCode};

/// Largest error body read: Google's error documents are well under 1 KiB.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// `x-guploader-uploadid`, if present.
pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    headers.get("x-guploader-uploadid").and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Types a GCS error by status and reason.
pub(crate) fn classify(status: u16, reason: String, message: String, request_id: Option<String>) -> Error {
    let code = |default: &str| if reason.is_empty() { default.to_owned() } else { reason.clone() };
    match status {
        429 => Error::Throttled { status, code: code("rateLimitExceeded"), message, request_id },
        503 => Error::Throttled { status, code: code("backendError"), message, request_id },
        404 => Error::NotFound { code: code("notFound"), message, request_id },
        412 | 304 => {
            let default = if status == 304 { "notModified" } else { "conditionNotMet" };
            Error::Precondition { status, code: code(default), message, request_id }
        }
        401 | 403 => Error::Auth {
            status,
            code: code(if status == 401 { "required" } else { "forbidden" }),
            message,
            request_id,
        },
        _ => {
            let fallback = StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Error")
                .replace(' ', "");
            Error::Service { status, code: code(&fallback), message, request_id }
        }
    }
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
        Err(e) => return classify(status, String::new(), format!("(error body unreadable: {e})"), rid),
    };
    from_error_body(status, &body, rid)
}

/// Types an error body: the JSON API's document, else its first bytes as the message.
pub(crate) fn from_error_body(status: u16, body: &[u8], rid: Option<String>) -> Error {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let e = &v["error"];
        if e.is_object() {
            let reason = e["errors"][0]["reason"].as_str().unwrap_or_default().to_owned();
            let message = e["message"].as_str().unwrap_or_default().to_owned();
            return classify(status, reason, message, rid);
        }
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned();
    classify(status, String::new(), text, rid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_are_typed_by_status_and_reason() {
        let body = br#"{"error":{"code":412,"message":"At least one of the pre-conditions you specified did not hold.","errors":[{"domain":"global","reason":"conditionNotMet","message":"x"}]}}"#;
        let e = from_error_body(412, body, Some("rid".into()));
        assert!(matches!(&e, Error::Precondition { status: 412, code, .. } if code == "conditionNotMet"), "{e:?}");
        assert_eq!(e.request_id(), Some("rid"));
        let e = from_error_body(404, b"Not Found\n", None);
        assert!(e.is_not_found());
        assert!(matches!(from_error_body(429, b"{}", None), Error::Throttled { .. }));
        assert!(matches!(from_error_body(503, b"", None), Error::Throttled { .. }));
        assert!(matches!(from_error_body(401, b"", None), Error::Auth { status: 401, .. }));
        let e =
            from_error_body(500, br#"{"error":{"code":500,"message":"m","errors":[{"reason":"backendError"}]}}"#, None);
        assert!(matches!(&e, Error::Service { status: 500, code, .. } if code == "backendError"));
        assert!(e.retry_class(true).is_some());
    }
}
