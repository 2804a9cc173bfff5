//! Which requests a download makes: one plain GET for an object that fits in one part
//! (or has no ETag to pin ranges to), else ranged GETs of `part_size` bytes, part `i`
//! covering `[i * part_size, min((i + 1) * part_size, size))`, the last one short.
//!
//! ```text
//! size <= part_size, or no ETag ─► one GET
//! else                           ─► parts 0 .. ceil(size / part_size)
//!                                     minus those a resume kept (state.rs)
//! ```
//!
//! Pure arithmetic, no I/O: the rest of the download asks here how long a part is and
//! which parts are left, so the cut is written once.

use std::collections::BTreeMap;

/// Bytes per ranged GET by default: 8 MiB, the low end of the cost-optimal request size
/// on S3 (8-16 MiB, AnyBlob, VLDB 2023), and the part size uploads use; larger parts made
/// no difference in `ferry bench cli-transfer --set large` (docs/lab/engine-download.md,
/// "Part size").
pub(super) const DEFAULT_PART_SIZE: u64 = 8 * 1024 * 1024;

/// Whether the object is fetched with one plain GET: it fits in one part, or it has no
/// ETag, without which the parts' `If-Match` could not tie them to one version.
pub(super) fn one_get(size: u64, etag: Option<&str>, part_size: u64) -> bool {
    size <= part_size || etag.is_none()
}

/// How many parts of `part_size` cover `size` bytes.
pub(super) fn part_count(size: u64, part_size: u64) -> u64 {
    size.div_ceil(part_size)
}

/// The length of part `i`: `part_size`, or what is left for the last one.
pub(super) fn part_len(i: u64, part_size: u64, size: u64) -> u64 {
    (size - i * part_size).min(part_size)
}

/// The parts still to fetch, in order: every part not in `done`.
pub(super) fn to_fetch<V>(parts: u64, done: &BTreeMap<u64, V>) -> Vec<u64> {
    (0..parts).filter(|i| !done.contains_key(i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_object() {
        for (size, ps) in [(1u64, 8u64), (8, 8), (9, 8), (100, 7)] {
            let n = size.div_ceil(ps);
            assert_eq!((0..n).map(|i| part_len(i, ps, size)).sum::<u64>(), size);
        }
    }
}
