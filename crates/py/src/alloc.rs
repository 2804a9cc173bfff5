//! The extension's allocator: mimalloc, as in the `ferry` binary, for the memory the Rust
//! half allocates (request and response buffers, the objects handed to Python as
//! `ferry.Buffer`s). Python's own objects stay with Python's allocator.
//!
//! Why: a batch of small GETs allocates and frees many small buffers across the
//! runtime's threads, and `iter_get` allocates each large object's size at once. Under
//! glibc malloc the first spent a fifth of the client's CPU in malloc and free, and the
//! second mapped and unmapped each large buffer (fresh zeroed pages every time).
//! docs/lab/python-rows.md ("The extension's allocator") has the figures and the
//! commands that repeat them.
//!
//! A library shares its process, so it changes nothing beyond its own heaps. mimalloc
//! asks for transparent huge pages on each region it maps (`madvise(MADV_HUGEPAGE)`),
//! which made the peak RSS of a download of 64 MiB objects about a third higher.
//! [`own_heaps_without_huge_pages`] turns that off once mimalloc is up. Unlike
//! `MIMALLOC_ALLOW_THP=0` in the environment (read before it is up), it does not disable
//! huge pages for the whole process (`prctl(PR_SET_THP_DISABLE)`), so Python, NumPy and
//! Arrow keep whatever the system gives them.

use std::ffi::{c_int, c_long};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_allow_thp`'s index in mimalloc v3's `mi_option_t` (mimalloc.h; v2 numbers
/// it otherwise, hence the version check below). Not among libmimalloc-sys's constants.
const MI_OPTION_ALLOW_THP_V3: c_int = 43;

extern "C" {
    // mimalloc's C API, in the libmimalloc-sys the global allocator links.
    fn mi_version() -> c_int;
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// Stops mimalloc asking for huge pages on the regions it maps from now on (the module
/// doc says why). A `MIMALLOC_ALLOW_THP` in the environment wins; nothing is changed
/// unless the linked mimalloc is v3 and the option still holds its default (1).
pub(crate) fn own_heaps_without_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: plain calls into the linked allocator's version and option table; options
    // may be set at any time (each mmap reads this one).
    unsafe {
        if (30_000..40_000).contains(&mi_version()) && mi_option_get(MI_OPTION_ALLOW_THP_V3) == 1 {
            mi_option_set(MI_OPTION_ALLOW_THP_V3, 0);
        }
    }
}
