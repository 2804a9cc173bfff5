//! The one error a user of any store sees, by meaning, whatever the provider.
//!
//! Every failure ends up as one [`Error`] variant that says what the caller can do:
//! `NotFound` and `Precondition` are answers, `Throttled` and `Transport` are usually
//! passing, `Auth` needs other credentials, `Integrity` means bytes were bad and were
//! not handed over as good, `Protocol` means the peer broke S3 or HTTP.
//!
//! Each provider maps its answers onto these meanings in its own folder (S3's `<Error>`
//! codes: `s3/error.rs`), keeping the provider's request id, so a caller never matches
//! on a provider's strings. What stays here is provider-neutral: the variants, their
//! accessors, and which of them a retry may help ([`Error::retry_class`]).

use ferry_wire::{ErrorKind, WireError};

/// A store error, by meaning.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// 404: NoSuchKey, NoSuchBucket, NoSuchUpload.
    #[error("not found{}{}", said(message), tail(Some(404), code, request_id))]
    NotFound { code: String, message: String, request_id: Option<String> },
    /// 412 PreconditionFailed or 304 Not Modified; also an object that changed while a
    /// GET was being resumed.
    #[error("precondition failed{}{}", said(message), tail(Some(*status), code, request_id))]
    Precondition { status: u16, code: String, message: String, request_id: Option<String> },
    /// 503 SlowDown, 429, or another throttling code, after the retries ran out.
    #[error("throttled{}{}", said(message), tail(Some(*status), code, request_id))]
    Throttled { status: u16, code: String, message: String, request_id: Option<String> },
    /// 403 AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId, expired tokens.
    #[error("not authorised{}{}", said(message), tail(Some(*status), code, request_id))]
    Auth { status: u16, code: String, message: String, request_id: Option<String> },
    /// The transport failed; [`WireError::retry_safe`] says whether a retry could help.
    /// Its text is the transport's own (which names the cause), said once.
    #[error("{0}")]
    Transport(#[from] WireError),
    /// The response could not be understood (bad XML, missing headers, wrong range).
    #[error("unexpected answer from the server{}{}", said(message), tail(None, "", request_id))]
    Protocol { message: String, request_id: Option<String> },
    /// A length or checksum did not match: the bytes are not the object's.
    #[error("integrity check failed{}{}", said(message), tail(None, "", request_id))]
    Integrity { message: String, request_id: Option<String> },
    /// Any other S3 error.
    #[error("service error{}{}", said(message), tail(Some(*status), code, request_id))]
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

/// The server's own words, when it sent any (a HEAD's answer has no body).
fn said(message: &str) -> String {
    let m = message.trim();
    if m.is_empty() {
        String::new()
    } else {
        format!(": {m}")
    }
}

/// ` (404 NoSuchKey, request id R)`: the status, the code and the request id, each when
/// known, so one line says what to search the server's logs for.
fn tail(status: Option<u16>, code: &str, request_id: &Option<String>) -> String {
    let mut parts: Vec<String> = Vec::new();
    // Status 0: not from a server's answer (a report made of several, say).
    match (status.filter(|s| *s != 0), code) {
        (Some(s), "") => parts.push(s.to_string()),
        (Some(s), c) => parts.push(format!("{s} {c}")),
        (None, "") => {}
        (None, c) => parts.push(c.to_owned()),
    }
    if let Some(r) = request_id {
        parts.push(format!("request id {r}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s3::error::classify;

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
