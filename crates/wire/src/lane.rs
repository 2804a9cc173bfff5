//! Which requests are small: the rule that sends a request to auto's pipeline lane (and
//! lets it be hedged) and keeps h2's small streams off connections that carry bulk ones.
//!
//! A request is small when it is known to move little: a HEAD, a GET whose response is
//! known to carry at most [`SMALL_GET_BYTES`] ([`Request::expected_len`]), or a listing
//! page, whose size its key count bounds. Unknown counts as large until proven small,
//! since one large body holds up everything behind it.

use crate::Request;
use http::Method;

/// Largest ranged GET sent down the pipeline: 1 MiB takes ~12 ms at S3's 90 MB/s per
/// connection, less than the ~30 ms first-byte p50 that pipelining hides for the requests
/// behind it (docs/lab/wire-facts.md); larger bodies would cost them more than they save.
pub const SMALL_GET_BYTES: u64 = 1024 * 1024;

/// A HEAD, or a GET whose response is known to carry at most [`SMALL_GET_BYTES`]
/// ([`Request::expected_len`]: the typed length of its range, or of the object from a
/// listing), without a request body; or a listing page ([`is_listing_page`]).
pub fn is_small(req: &Request) -> bool {
    req.is_pipelineable() && (req.expected_len().is_some_and(|n| n <= SMALL_GET_BYTES) || is_listing_page(req))
}

/// A GET whose answer is metadata, not object data ([`Request::object_data`]: the store
/// marks its listings so). Its length is unknown but bounded: a page holds at most 1,000
/// keys, a few hundred KB of XML or JSON for keys of common length and ~1.3 MB for 1,000
/// keys of S3's longest (1,024 bytes), about [`SMALL_GET_BYTES`]. So it travels as small
/// requests do: pipelined, and with the small lane's start at the demand, rather than one
/// per connection behind bulk slow start (`ferry bench listing --quick`'s per-directory
/// rows at 16 in flight, auto beside h1-pool and h1-pipeline). Not hedged: a losing copy's
/// body is discarded only up to a bound its unknown length could pass (auto/hedge.rs).
pub fn is_listing_page(req: &Request) -> bool {
    req.method == Method::GET && !req.object_data
}

/// A request's lane: small requests never queue behind a large transfer.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn get(range: Option<(u64, u64)>) -> Request {
        let mut r = Request::new(Method::GET, "/b/k");
        if let Some((a, b)) = range {
            r.set_range(a, b);
        }
        r
    }

    #[test]
    fn small_requests_are_heads_and_short_ranges() {
        assert!(is_small(&Request::new(Method::HEAD, "/b/k")));
        assert!(is_small(&get(Some((0, 1048575)))));
        assert!(!is_small(&get(Some((0, 1048576)))));
        assert!(!is_small(&get(None)), "unknown size");
        let known = |n: u64| {
            let mut r = get(None);
            r.response_len = Some(n);
            r
        };
        assert!(is_small(&known(16 * 1024)), "known small from a listing");
        assert!(!is_small(&known(SMALL_GET_BYTES + 1)), "known large");
        assert!(!is_small(&Request::new(Method::PUT, "/b/k")));
        assert_eq!(lane(&Request::new(Method::PUT, "/b/k")), Lane::Small, "an empty PUT (CopyObject, CreateBucket)");
        let mut part = Request::new(Method::PUT, "/b/k?partNumber=1");
        part.body = crate::RequestBody::Full(bytes::Bytes::from(vec![0u8; 8 << 20]));
        assert_eq!(lane(&part), Lane::Bulk, "an 8 MiB part");
        assert_eq!(lane(&get(None)), Lane::Bulk, "unknown size");
        assert_eq!(lane(&get(Some((0, 4095)))), Lane::Small);
        assert!(!is_small(&Request::new(Method::DELETE, "/b/k")));
        let mut page = get(None);
        page.object_data = false;
        assert!(is_small(&page) && is_listing_page(&page), "a listing page: bounded by its keys");
        assert_eq!(lane(&page), Lane::Small);
    }
}
