//! One HTTP request as the transports take it, and the typed facts they read from it
//! (its response's expected length, whether it may be repeated or pipelined).
//!
//! Lengths travel typed, never as header text for a transport to parse: the request
//! body's length is [`RequestBody::len`] (the transports write Content-Length from it),
//! and the response's is [`Request::response_len`], which the caller sets with the
//! `Range` it writes (the store's request layer from its typed range, or
//! [`Request::set_range`]). Transports read it through [`Request::expected_len`] (auto's
//! lanes, h2's lanes, hedging).

use crate::body::RequestBody;
use http::header::RANGE;
use http::{HeaderMap, HeaderValue, Method};

/// One HTTP request. The transport adds Host (from the endpoint) and framing headers
/// (Content-Length) when absent.
pub struct Request {
    pub method: Method,
    /// Already percent-encoded path and query, starting with '/'.
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: RequestBody,
    /// Bytes the response body will carry, when the caller knows: a ranged GET's range
    /// length, or a whole object's size from a listing or a HEAD. `None`: unknown, which
    /// the transports treat as large. Read through [`Request::expected_len`].
    pub response_len: Option<u64>,
    /// Whether `auto` may send a copy of this request when its response head is slow
    /// (auto/hedge.rs). True by default; only small GETs and HEADs are
    /// ever hedged, whatever this says. A caller for whom a second identical request costs
    /// something (a request-counting quota, a GET with side effects behind a proxy) sets
    /// it false.
    pub hedge: bool,
    /// Whether the response body is object data, the bytes a transfer is for. `auto`'s
    /// controller grows while those bytes per second grow (controller.rs, "Growth follows
    /// goodput"); a listing page or other metadata answer is not such work, and its bytes,
    /// arriving in one burst before the transfers they list, would set a best round the
    /// transfers cannot beat. True by default; the store sets it false for listings.
    pub object_data: bool,
}

impl Request {
    pub fn new(method: Method, path_and_query: impl Into<String>) -> Request {
        Request {
            method,
            path_and_query: path_and_query.into(),
            headers: HeaderMap::new(),
            body: RequestBody::Empty,
            response_len: None,
            hedge: true,
            object_data: true,
        }
    }

    /// Asks for bytes `first..=last` (`first <= last`): the `Range` header and the
    /// response's length, set together.
    pub fn set_range(&mut self, first: u64, last: u64) {
        let value = HeaderValue::from_str(&format!("bytes={first}-{last}")).expect("digits are header text");
        self.headers.insert(RANGE, value);
        self.response_len = Some(last.saturating_sub(first) + 1);
    }

    /// Bytes the response body will carry, as far as the request shows: `Some(0)` for
    /// HEAD (RFC 9110 section 9.3.2: a response to HEAD has no body), else
    /// [`Request::response_len`]. The one place the transports read a request's length.
    pub fn expected_len(&self) -> Option<u64> {
        if self.method == Method::HEAD {
            return Some(0);
        }
        self.response_len
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_len_is_the_typed_length_never_the_header() {
        assert_eq!(Request::new(Method::HEAD, "/b/k").expected_len(), Some(0));
        let mut r = Request::new(Method::GET, "/b/k");
        assert_eq!(r.expected_len(), None, "unknown");
        r.set_range(0, (1 << 20) - 1);
        assert_eq!((r.expected_len(), r.headers[RANGE].to_str().unwrap()), (Some(1 << 20), "bytes=0-1048575"));
        r.set_range(4096, 4096);
        assert_eq!(r.expected_len(), Some(1));
        // A Range written as text by hand says nothing to the transports: only the typed
        // length does.
        let mut raw = Request::new(Method::GET, "/b/k");
        raw.headers.insert(RANGE, HeaderValue::from_static("bytes=0-4095"));
        assert_eq!(raw.expected_len(), None);
        raw.response_len = Some(16 << 10);
        assert_eq!(raw.expected_len(), Some(16 << 10), "known from a listing");
    }
}
