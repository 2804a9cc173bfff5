//! One HTTP request as the transports take it, and the typed facts they read from it
//! (its response's expected length, whether it may be repeated or pipelined).
//!
//! A request's length is read in one place, [`Request::expected_len`]: the transports
//! (auto's lanes, h2's lanes, hedging) take it from there and never parse a header.

use crate::body::RequestBody;
use http::header::RANGE;
use http::{HeaderMap, Method};

/// One HTTP request. The transport adds Host (from the endpoint) and framing headers
/// (Content-Length) when absent.
pub struct Request {
    pub method: Method,
    /// Already percent-encoded path and query, starting with '/'.
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: RequestBody,
    /// Bytes the response body will carry, when the caller knows (from a listing or a
    /// HEAD) and sets no Range. Transports read the request's length through
    /// [`Request::expected_len`], never from this field or the headers directly.
    pub size_hint: Option<u64>,
    /// Whether `auto` may send a copy of this request when its response head is slow
    /// (auto/hedge.rs). True by default; only small GETs and HEADs are
    /// ever hedged, whatever this says. A caller for whom a second identical request costs
    /// something (a request-counting quota, a GET with side effects behind a proxy) sets
    /// it false.
    pub hedge: bool,
}

impl Request {
    pub fn new(method: Method, path_and_query: impl Into<String>) -> Request {
        Request {
            method,
            path_and_query: path_and_query.into(),
            headers: HeaderMap::new(),
            body: RequestBody::Empty,
            size_hint: None,
            hedge: true,
        }
    }

    /// Bytes the response body will carry, as far as the request shows, typed: the one
    /// place that reads a request's length, so no transport parses a `Range` header.
    ///
    /// - HEAD: `Some(0)` (RFC 9110 section 9.3.2: a response to HEAD has no body).
    /// - A single bounded `Range` (`bytes=a-b`, `bytes=-n`): its length, whatever
    ///   [`Request::size_hint`] says (the hint is the object's size, the range a part).
    /// - Any other `Range` (open-ended, several, unparseable): `None`, unknown.
    /// - No `Range`: [`Request::size_hint`].
    pub fn expected_len(&self) -> Option<u64> {
        if self.method == Method::HEAD {
            return Some(0);
        }
        if self.headers.contains_key(RANGE) {
            return range_len(&self.headers);
        }
        self.size_hint
    }

    /// RFC 9110 section 9.2.2: a request that may be repeated with the same effect.
    pub fn is_idempotent(&self) -> bool {
        matches!(self.method, Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS)
    }

    /// Whether the pipeline may carry it: safe methods without a body, which can be
    /// re-sent on a fresh connection if the one they were written on dies.
    pub fn is_pipelineable(&self) -> bool {
        matches!(self.method, Method::GET | Method::HEAD) && self.body.is_empty()
    }
}

/// Bytes asked for by a single `Range: bytes=a-b` or `bytes=-n` (RFC 9110 section
/// 14.1.2); `None` for open-ended, multiple or unparseable ranges.
pub fn range_len(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get(RANGE)?.to_str().ok()?.trim();
    let spec = v.strip_prefix("bytes=")?.trim();
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        return b.parse().ok();
    }
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    b.checked_sub(a).map(|d| d + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn get(range: Option<&str>, hint: Option<u64>) -> Request {
        let mut r = Request::new(Method::GET, "/b/k");
        if let Some(v) = range {
            r.headers.insert(RANGE, HeaderValue::from_str(v).unwrap());
        }
        r.size_hint = hint;
        r
    }

    #[test]
    fn expected_len_reads_a_bounded_range_else_the_hint() {
        assert_eq!(Request::new(Method::HEAD, "/b/k").expected_len(), Some(0));
        assert_eq!(get(Some("bytes=0-1048575"), None).expected_len(), Some(1 << 20));
        assert_eq!(get(Some("bytes=-4096"), None).expected_len(), Some(4096));
        assert_eq!(get(Some("bytes=0-4095"), Some(8 << 20)).expected_len(), Some(4096), "the range, not the object");
        assert_eq!(get(Some("bytes=100-"), Some(16 << 10)).expected_len(), None, "open-ended: unknown");
        assert_eq!(get(Some("bytes=0-1,5-9"), None).expected_len(), None, "multiple ranges");
        assert_eq!(get(Some("bytes=9-0"), None).expected_len(), None, "unsatisfiable");
        assert_eq!(get(None, Some(16 << 10)).expected_len(), Some(16 << 10), "known from a listing");
        assert_eq!(get(None, None).expected_len(), None);
    }
}
