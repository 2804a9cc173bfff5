//! Which requests are small: the rule that sends a request to auto's pipeline lane and
//! keeps h2's small streams off connections that carry bulk ones.

use crate::Request;
use http::header::RANGE;
use http::{HeaderMap, Method};

/// Largest ranged GET sent down the pipeline: 1 MiB takes ~12 ms at S3's 90 MB/s per
/// connection (LAB.md section 1), less than the ~30 ms first-byte p50 that pipelining
/// hides for the requests behind it; larger bodies would cost them more than they save.
pub const SMALL_GET_BYTES: u64 = 1024 * 1024;

/// The rule of the module note: a HEAD, or a GET of at most [`SMALL_GET_BYTES`] (by its
/// Range, else by the caller's [`Request::size_hint`]), without a body.
pub fn is_small(req: &Request) -> bool {
    if !req.is_pipelineable() {
        return false;
    }
    if req.method == Method::HEAD {
        return true;
    }
    match range_len(&req.headers) {
        Some(n) => n <= SMALL_GET_BYTES,
        None => !req.headers.contains_key(RANGE) && req.size_hint.is_some_and(|n| n <= SMALL_GET_BYTES),
    }
}

/// A request's lane (issue 5: small requests never queue behind a large transfer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Moves at most [`SMALL_GET_BYTES`] either way, as far as the request shows.
    Small,
    /// Moves more, or an unknown amount ("unknown counts as large until proven small").
    Bulk,
}

/// The lane of a request: [`is_small`] GETs and HEADs; requests with a body of at most
/// [`SMALL_GET_BYTES`] other than GET (PUT, POST, DELETE: S3 answers them with a short
/// XML or an empty body); everything else is bulk.
pub fn lane(req: &Request) -> Lane {
    if is_small(req) || (req.method != Method::GET && req.body.len() <= SMALL_GET_BYTES) {
        Lane::Small
    } else {
        Lane::Bulk
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

    fn get(range: Option<&str>) -> Request {
        let mut r = Request::new(Method::GET, "/b/k");
        if let Some(v) = range {
            r.headers.insert(RANGE, HeaderValue::from_str(v).unwrap());
        }
        r
    }

    #[test]
    fn small_requests_are_heads_and_short_ranges() {
        assert!(is_small(&Request::new(Method::HEAD, "/b/k")));
        assert!(is_small(&get(Some("bytes=0-1048575"))));
        assert!(!is_small(&get(Some("bytes=0-1048576"))));
        assert!(is_small(&get(Some("bytes=-4096"))));
        assert!(!is_small(&get(Some("bytes=100-"))), "open-ended");
        assert!(!is_small(&get(Some("bytes=0-1,5-9"))), "multiple ranges");
        assert!(!is_small(&get(None)), "unknown size");
        let hinted = |n: u64, range: Option<&str>| {
            let mut r = get(range);
            r.size_hint = Some(n);
            r
        };
        assert!(is_small(&hinted(16 * 1024, None)), "known small from a listing");
        assert!(!is_small(&hinted(SMALL_GET_BYTES + 1, None)), "known large");
        assert!(!is_small(&hinted(16 * 1024, Some("bytes=100-"))), "an open range is not bounded by the hint's rule");
        assert!(!is_small(&Request::new(Method::PUT, "/b/k")));
        assert_eq!(lane(&Request::new(Method::PUT, "/b/k")), Lane::Small, "an empty PUT (CopyObject, CreateBucket)");
        let mut part = Request::new(Method::PUT, "/b/k?partNumber=1");
        part.body = crate::RequestBody::Full(bytes::Bytes::from(vec![0u8; 8 << 20]));
        assert_eq!(lane(&part), Lane::Bulk, "an 8 MiB part");
        assert_eq!(lane(&get(None)), Lane::Bulk, "unknown size");
        assert_eq!(lane(&get(Some("bytes=0-4095"))), Lane::Small);
        assert!(!is_small(&Request::new(Method::DELETE, "/b/k")));
    }
}
