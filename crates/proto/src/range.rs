//! `Range` and `Content-Range` with S3's semantics.
//!
//! Design note: S3 honours a single `bytes=` range
//! (<https://www.rfc-editor.org/rfc/rfc9110#section-14.1.2>) and *ignores*
//! anything it cannot parse (other units, several ranges, `5-3`), serving
//! the whole object with 200. So [`parse_range_header`] returns `None` for
//! "ignore" and [`RangeSpec::resolve`] is the only place that yields 416:
//! a start at or past the end, a zero-length suffix, or any range on an
//! empty object.

/// One parsed byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RangeSpec {
    /// `bytes=a-b` (both inclusive, `a <= b`).
    FromTo(u64, u64),
    /// `bytes=a-`
    From(u64),
    /// `bytes=-n`: the last `n` bytes.
    Suffix(u64),
}

/// The range cannot be satisfied for this object size (HTTP 416, S3 `InvalidRange`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the requested range is not satisfiable")]
pub struct Unsatisfiable;

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses a `Range` header; `None` means "ignore it and send the whole object".
pub fn parse_range_header(value: &str) -> Option<RangeSpec> {
    let value = value.trim();
    let (unit, spec) = value.split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let spec = spec.trim();
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    match (a.is_empty(), b.is_empty()) {
        (true, true) => None,
        (true, false) => Some(RangeSpec::Suffix(parse_u64(b)?)),
        (false, true) => Some(RangeSpec::From(parse_u64(a)?)),
        (false, false) => {
            let (s, e) = (parse_u64(a)?, parse_u64(b)?);
            (s <= e).then_some(RangeSpec::FromTo(s, e))
        }
    }
}

impl RangeSpec {
    /// Resolves against an object of `size` bytes to `(start, end_inclusive)`.
    pub fn resolve(&self, size: u64) -> Result<(u64, u64), Unsatisfiable> {
        if size == 0 {
            return Err(Unsatisfiable);
        }
        match *self {
            RangeSpec::FromTo(s, e) if s < size => Ok((s, e.min(size - 1))),
            RangeSpec::From(s) if s < size => Ok((s, size - 1)),
            RangeSpec::Suffix(n) if n > 0 => Ok((size.saturating_sub(n), size - 1)),
            _ => Err(Unsatisfiable),
        }
    }

    /// Bytes a response to this range carries at most, as far as the request shows: a
    /// bounded range's length, a suffix's, or an open range's rest of an object of a
    /// known `size`; `None` when nothing bounds it. The request layer hands it to the
    /// transports typed (wire's `Request::response_len`), so none parses the header.
    pub fn len(&self, size: Option<u64>) -> Option<u64> {
        match *self {
            RangeSpec::FromTo(s, e) => Some(e.saturating_sub(s) + 1),
            RangeSpec::From(s) => size.map(|n| n.saturating_sub(s)),
            RangeSpec::Suffix(n) => Some(size.map_or(n, |size| n.min(size))),
        }
    }

    /// The header value this range is written as (`bytes=0-9`).
    pub fn to_header(&self) -> String {
        match *self {
            RangeSpec::FromTo(s, e) => format!("bytes={s}-{e}"),
            RangeSpec::From(s) => format!("bytes={s}-"),
            RangeSpec::Suffix(n) => format!("bytes=-{n}"),
        }
    }
}

/// `bytes start-end/size`
pub fn content_range(start: u64, end_incl: u64, size: u64) -> String {
    format!("bytes {start}-{end_incl}/{size}")
}

/// `bytes */size`, sent with a 416.
pub fn content_range_unsatisfied(size: u64) -> String {
    format!("bytes */{size}")
}

/// Parses `bytes start-end/size` or `bytes start-end/*` to
/// `(start, end_inclusive, size)`. `bytes */size` and malformed values give `None`.
pub fn parse_content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let value = value.trim();
    let (unit, rest) = value.split_once(' ')?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return None;
    }
    let (range, size) = rest.trim().split_once('/')?;
    let (s, e) = range.split_once('-')?;
    let (s, e) = (parse_u64(s.trim())?, parse_u64(e.trim())?);
    if s > e {
        return None;
    }
    let size = match size.trim() {
        "*" => None,
        n => {
            let n = parse_u64(n)?;
            if e >= n {
                return None;
            }
            Some(n)
        }
    };
    Some((s, e, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_forms() {
        assert_eq!(parse_range_header("bytes=0-9"), Some(RangeSpec::FromTo(0, 9)));
        assert_eq!(parse_range_header("bytes=5-"), Some(RangeSpec::From(5)));
        assert_eq!(parse_range_header("bytes=-5"), Some(RangeSpec::Suffix(5)));
        assert_eq!(parse_range_header(" Bytes = 1 - 2 "), Some(RangeSpec::FromTo(1, 2)));
        for ignored in [
            "bytes=5-3",
            "bytes=0-1,3-4",
            "items=0-1",
            "bytes=-",
            "bytes=a-b",
            "bytes=+1-2",
            "0-9",
            "bytes=99999999999999999999-",
        ] {
            assert_eq!(parse_range_header(ignored), None, "{ignored}");
        }
    }

    #[test]
    fn resolve_s3_semantics() {
        assert_eq!(RangeSpec::FromTo(0, 9).resolve(100), Ok((0, 9)));
        assert_eq!(RangeSpec::FromTo(90, 200).resolve(100), Ok((90, 99)));
        assert_eq!(RangeSpec::FromTo(100, 200).resolve(100), Err(Unsatisfiable));
        assert_eq!(RangeSpec::From(99).resolve(100), Ok((99, 99)));
        assert_eq!(RangeSpec::From(100).resolve(100), Err(Unsatisfiable));
        assert_eq!(RangeSpec::Suffix(10).resolve(100), Ok((90, 99)));
        assert_eq!(RangeSpec::Suffix(1000).resolve(100), Ok((0, 99)));
        assert_eq!(RangeSpec::Suffix(0).resolve(100), Err(Unsatisfiable));
        for r in [RangeSpec::FromTo(0, 0), RangeSpec::From(0), RangeSpec::Suffix(5)] {
            assert_eq!(r.resolve(0), Err(Unsatisfiable));
        }
    }

    #[test]
    fn content_range_forms() {
        assert_eq!(content_range(0, 9, 100), "bytes 0-9/100");
        assert_eq!(content_range_unsatisfied(100), "bytes */100");
        assert_eq!(parse_content_range("bytes 0-9/100"), Some((0, 9, Some(100))));
        assert_eq!(parse_content_range("bytes 0-9/*"), Some((0, 9, None)));
        assert_eq!(parse_content_range("bytes */100"), None);
        assert_eq!(parse_content_range("bytes 9-0/100"), None);
        assert_eq!(parse_content_range("bytes 0-100/100"), None);
    }

    fn spec() -> impl Strategy<Value = RangeSpec> {
        prop_oneof![
            (0u64..1000, 0u64..1000).prop_map(|(a, b)| RangeSpec::FromTo(a.min(b), a.max(b))),
            (0u64..1000).prop_map(RangeSpec::From),
            (0u64..1000).prop_map(RangeSpec::Suffix),
        ]
    }

    proptest! {
        #[test]
        fn resolved_range_is_within_object(r in spec(), size in 0u64..1000) {
            if let Ok((s, e)) = r.resolve(size) {
                prop_assert!(s <= e && e < size);
                let len = e - s + 1;
                match r {
                    RangeSpec::FromTo(a, b) => prop_assert_eq!((s, len), (a, (b.min(size - 1)) - a + 1)),
                    RangeSpec::From(a) => prop_assert_eq!((s, e), (a, size - 1)),
                    RangeSpec::Suffix(n) => prop_assert_eq!(len, n.min(size)),
                }
                prop_assert_eq!(parse_content_range(&content_range(s, e, size)), Some((s, e, Some(size))));
            } else {
                prop_assert!(size == 0 || matches!(r, RangeSpec::Suffix(0)) || matches!(r, RangeSpec::FromTo(a, _) | RangeSpec::From(a) if a >= size));
            }
        }

        #[test]
        fn header_roundtrip(r in spec()) {
            prop_assert_eq!(parse_range_header(&r.to_header()), Some(r));
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,30}") {
            let _ = parse_range_header(&s);
            let _ = parse_content_range(&s);
        }
    }
}
