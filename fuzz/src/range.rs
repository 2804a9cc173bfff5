//! `Range` and `Content-Range` parsing (`ferry_proto::range`): the server parses the
//! `Range` of every GET, the client the `Content-Range` of every ranged answer.
//!
//! The input is one header value. Properties:
//! - a parsed `Range` prints back to a value that parses to the same range, and resolves
//!   against any object size to a range inside the object (or to 416), whose
//!   `Content-Range` parses back to exactly that range and size;
//! - a parsed `Content-Range` has `start <= end < size` and prints back to itself.

use super::Dice;
use ferry_proto::range::{content_range, parse_content_range, parse_range_header, RangeSpec};

/// Runs one input through the properties above; panics where one fails.
pub fn check(input: &[u8]) {
    let Ok(value) = std::str::from_utf8(input) else { return };
    if let Some(spec) = parse_range_header(value) {
        assert_eq!(parse_range_header(&spec.to_header()), Some(spec), "{value:?} does not print back");
        let mut dice = Dice::new(input);
        let bound = match spec {
            RangeSpec::FromTo(s, e) => s.max(e),
            RangeSpec::From(s) => s,
            RangeSpec::Suffix(n) => n,
        };
        // Sizes around the range's own numbers, where the edges are, and a few at random.
        let mut sizes = vec![0, 1, 2, u64::MAX, bound, bound.saturating_add(1), bound.saturating_sub(1)];
        sizes.extend((0..4).map(|_| dice.roll() % bound.saturating_add(2)));
        for size in sizes {
            match spec.resolve(size) {
                Ok((start, end)) => {
                    assert!(start <= end && end < size, "{spec:?} on {size} bytes resolved to {start}-{end}");
                    let cr = content_range(start, end, size);
                    assert_eq!(parse_content_range(&cr), Some((start, end, Some(size))), "{cr}");
                }
                Err(_) => {
                    let unsatisfiable = size == 0
                        || matches!(spec, RangeSpec::Suffix(0))
                        || matches!(spec, RangeSpec::FromTo(s, _) | RangeSpec::From(s) if s >= size);
                    assert!(unsatisfiable, "{spec:?} on {size} bytes refused");
                }
            }
        }
    }
    if let Some((start, end, size)) = parse_content_range(value) {
        assert!(start <= end, "{value:?}");
        if let Some(size) = size {
            assert!(end < size, "{value:?}");
            assert_eq!(parse_content_range(&content_range(start, end, size)), Some((start, end, Some(size))));
        }
    }
}
