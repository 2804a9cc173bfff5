//! The process's setup around a verb, all of it about memory: a transfer's peak RSS is
//! mostly its allocator's heaps, one per thread that touched the bytes.
//!
//! ```text
//! exec ─► .init_array (priority 100): no_huge_pages ─► mimalloc's own constructor
//! data verb ─► keep_freed_memory ─► runtime with blocking_threads(verb) threads
//! serve, bench ─► allow_huge_pages (long-running, or starting other processes)
//! bench ─► keep_freed_memory too (its ferry rows are a client in this process)
//! ```
//!
//! - mimalloc is the binary's allocator (the server's small buffers across threads;
//!   main.rs declares it, with the constructor below, since only an executable may).
//! - A data verb keeps what it frees: reused at once, no page faults for fresh pages.
//! - No heap starts in a 2 MiB transparent huge page, which with memory kept and ten
//!   threads was most of a transfer's peak RSS.
//! - The blocking pool has as few threads as the verb needs: each keeps a heap.
//!
//! docs/lab/cli-memory.md and docs/lab/cli-blocking-threads.md have the measurements and
//! the commands that repeat them.

use crate::Command;

/// mimalloc's `purge_delay` option (`mi_option_purge_delay`, index 15 of `mi_option_t`
/// in mimalloc v2 and v3 alike; not among the constants libmimalloc-sys exports).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

// The crate's C library carries the functions below; named here so that it is linked
// into whatever links this library (the Python extension too, which declares it global
// in its alloc.rs), not only into the binary that declares it global.
extern crate mimalloc as _;

extern "C" {
    // mimalloc's C API, linked in by the mimalloc crate's libmimalloc-sys.
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// A data verb keeps the memory mimalloc frees instead of handing it back to the kernel
/// (`madvise`) after `purge_delay`: a transfer frees and reallocates its receive buffers
/// and write batches all the time, and each purge makes the next use of those pages
/// fault in fresh zeroed ones (system CPU 6.1-10.3 s against 7.7-16.3 s for 4 x 1 GiB
/// down, peak RSS the same; docs/lab/cli-memory.md, with the command). `ferry bench`
/// keeps it too (its ferry rows are a client). `ferry serve` (long-running) keeps the
/// default and returns memory. A `MIMALLOC_PURGE_DELAY` in the
/// environment wins; the option is set only while it still holds a default of v2 (10
/// ms) or v3 (1,000 ms), a guard should the index move.
pub(crate) fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: plain calls into the linked allocator's option table, which takes any
    // value at any time (options are read as they are used).
    unsafe {
        if matches!(mi_option_get(MI_OPTION_PURGE_DELAY), 10 | 1000) {
            mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        }
    }
}

/// A data verb runs without transparent huge pages. mimalloc asks for them on its arenas
/// (`MADV_HUGEPAGE`, its `allow_thp` option, on by default), so the first touch of each
/// thread's heap region faults in a whole 2 MiB page, and with memory kept
/// (`keep_freed_memory`) and ten threads that was most of the peak RSS (41-47 MiB with
/// them, 16-17 without, for 4 x 512 MiB down; docs/lab/cli-memory.md, with the command).
/// `MIMALLOC_ALLOW_THP=0` has the same effect, but mimalloc reads it before `main` runs;
/// prctl(PR_SET_THP_DISABLE) takes effect for every later fault, including in the arena
/// mimalloc already reserved.
///
/// So it runs before anything allocates: as the binary's constructor (main.rs), ahead
/// of mimalloc's own (an `.init_array` entry with a priority, which the linker places
/// before the unprioritized ones); any later, the allocations made until then have
/// faulted in huge pages that stay for the whole transfer. Verbs that want huge pages (`serve`, `bench`, and the bench's
/// reaper, whose children inherit the setting across fork and exec) turn them back on
/// with [`allow_huge_pages`] before they allocate much or start anything.
pub extern "C" fn no_huge_pages() {
    // SAFETY: a plain prctl on this process; failure (an old kernel) only leaves THP on.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// Undoes [`no_huge_pages`] for a long-running or process-starting verb.
pub(crate) fn allow_huge_pages() {
    // SAFETY: as in no_huge_pages.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) };
}

/// Threads of the blocking pool, where file work runs (reads of upload chunks, download
/// writes, create, rename, fsync). Each thread that has run a transfer keeps its own
/// allocator heap (freed memory is kept: `keep_freed_memory`), so peak RSS grows with the
/// threads; 8 keeps several fsyncs and small-file writes in flight (as fast as 16 for
/// 2,000 x 16 KiB down, 4 was slower) without a heap per part in flight (47 MiB for 4 x
/// 1 GiB up, 64-67 with 16). docs/lab/cli-blocking-threads.md has the figures and the
/// commands that re-measure them.
const BLOCKING_THREADS: usize = 8;

/// Blocking threads when every source is local and the destination is an object store (`cp`, `sync`):
/// an upload reads its chunks there and needs no threads for creates or fsyncs, so fewer
/// heaps: 26-27 MiB peak RSS for 4 x 1 GiB up beside 28-32 with 8, wall within the noise
/// (docs/lab/cli-blocking-threads.md, with the command).
const UPLOAD_BLOCKING_THREADS: usize = 4;

/// The blocking pool's size for `command`.
pub(crate) fn blocking_threads(command: &Command) -> usize {
    let remote = |p: &str| matches!(crate::common::parse_location(p), Ok(crate::common::Location::Object(_)));
    let upload = match command {
        Command::Cp(a) => {
            a.paths.split_last().is_some_and(|(dest, srcs)| remote(dest) && !srcs.iter().any(|s| remote(s)))
        }
        Command::Sync(a) => remote(&a.dest) && !remote(&a.source),
        _ => false,
    };
    if upload {
        UPLOAD_BLOCKING_THREADS
    } else {
        BLOCKING_THREADS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;
    use clap::Parser;

    #[test]
    fn uploads_get_the_smaller_blocking_pool() {
        let threads = |args: &[&str]| blocking_threads(&Cli::try_parse_from(args).unwrap().command);
        assert_eq!(threads(&["ferry", "cp", "-r", "dir/", "s3://b/p/"]), UPLOAD_BLOCKING_THREADS);
        assert_eq!(threads(&["ferry", "cp", "a", "b", "S3://b/p/"]), UPLOAD_BLOCKING_THREADS);
        assert_eq!(threads(&["ferry", "sync", "dir/", "s3://b/p/"]), UPLOAD_BLOCKING_THREADS);
        assert_eq!(threads(&["ferry", "cp", "-r", "s3://b/p/", "dir/"]), BLOCKING_THREADS, "a download creates files");
        assert_eq!(threads(&["ferry", "cp", "s3://b/x", "s3://b/y"]), BLOCKING_THREADS);
        assert_eq!(
            threads(&["ferry", "cp", "a", "s3://b/x", "s3://b/y/"]),
            BLOCKING_THREADS,
            "a mixed copy keeps the larger pool"
        );
        assert_eq!(threads(&["ferry", "sync", "s3://b/p/", "dir/"]), BLOCKING_THREADS);
        assert_eq!(threads(&["ferry", "cp", "-r", "dir/", "gs://b/p/"]), UPLOAD_BLOCKING_THREADS);
        assert_eq!(threads(&["ferry", "sync", "dir/", "az://c/p/"]), UPLOAD_BLOCKING_THREADS);
        assert_eq!(threads(&["ferry", "ls", "s3://b/"]), BLOCKING_THREADS);
    }
}
