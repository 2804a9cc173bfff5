//! Transport errors, typed by what a caller can do about them.
//!
//! Retry code reads [`WireError::retry_safe`], never the message: a connect failure
//! reached no server and is always safe to retry; a reset or time-out after the request
//! was written may have taken effect, so only idempotent requests may be retried.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// DNS, TCP connect, or connect time-out.
    Connect,
    /// TLS handshake or certificate failure.
    Tls,
    /// No progress in time: no response head, or no response body byte, within the
    /// transport's `response_timeout` (exchange.rs).
    Timeout,
    /// The connection closed or reset before the response head.
    Reset,
    /// The response body ended before its announced length, or the connection failed
    /// mid-body.
    BodyTruncated,
    /// The peer broke HTTP (unparseable response, bad framing).
    Protocol,
    /// Bad settings (URL, CA file).
    Config,
}

/// Whether a failed request may be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetrySafety {
    /// Nothing reached the server.
    Always,
    /// The server may have acted on it: safe only for idempotent requests.
    IfIdempotent,
    /// Retrying cannot help (configuration, protocol violation).
    Never,
}

#[derive(Debug)]
pub struct WireError {
    kind: ErrorKind,
    retry: RetrySafety,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl WireError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> WireError {
        let retry = match kind {
            ErrorKind::Connect => RetrySafety::Always,
            ErrorKind::Tls | ErrorKind::Config | ErrorKind::Protocol => RetrySafety::Never,
            ErrorKind::Timeout | ErrorKind::Reset | ErrorKind::BodyTruncated => RetrySafety::IfIdempotent,
        };
        WireError { kind, retry, message: message.into(), source: None }
    }

    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> WireError {
        self.source = Some(Box::new(source));
        self
    }

    pub fn with_retry(mut self, retry: RetrySafety) -> WireError {
        self.retry = retry;
        self
    }

    pub fn config(message: impl Into<String>) -> WireError {
        WireError::new(ErrorKind::Config, message)
    }

    pub fn protocol(message: impl Into<String>) -> WireError {
        WireError::new(ErrorKind::Protocol, message)
    }

    /// The message and its source without the kind's words, which `Display` puts first:
    /// for an error made again from this one with the same kind, so they are said once.
    pub(crate) fn detail(&self) -> String {
        match &self.source {
            Some(s) => format!("{}: {s}", self.message),
            None => self.message.clone(),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn retry(&self) -> RetrySafety {
        self.retry
    }

    /// Whether a request with this idempotency may be retried after this error.
    pub fn retry_safe(&self, idempotent: bool) -> bool {
        match self.retry {
            RetrySafety::Always => true,
            RetrySafety::IfIdempotent => idempotent,
            RetrySafety::Never => false,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // What happened, in words that start the sentence the message completes.
        let kind = match self.kind {
            ErrorKind::Connect => "cannot connect",
            ErrorKind::Tls => "TLS failed",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Reset => "connection lost",
            ErrorKind::BodyTruncated => "response cut short",
            ErrorKind::Protocol => "malformed HTTP",
            ErrorKind::Config => "bad transport setting",
        };
        write!(f, "{kind}: {}", self.message)?;
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        }
        Ok(())
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_made_again_from_its_detail_says_its_kind_once() {
        let e = WireError::new(ErrorKind::Connect, "connecting to 10.0.0.1:80 timed out after 10s");
        let again = WireError::new(e.kind(), e.detail());
        assert_eq!(again.to_string(), "cannot connect: connecting to 10.0.0.1:80 timed out after 10s");
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let with_source = WireError::new(ErrorKind::Connect, "10.0.0.1:80").with_source(io);
        assert_eq!(with_source.detail(), "10.0.0.1:80: refused");
    }
}
