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
