//! The `ferry` binary: the command line of the ferry-cli library (lib.rs) over this
//! process's arguments, with what only an executable's own `main` may set up: mimalloc as
//! the global allocator, and transparent huge pages off from the first allocation
//! (process.rs says why for both). The Python package's console script runs the same
//! command line without them.

/// mimalloc instead of glibc malloc: the server allocates and frees many small buffers
/// per request across threads, where glibc's malloc showed up at ~10% of CPU in a
/// profile of 16 KiB GETs over h2 (`perf record` against `scripts/bench-serve.sh --only
/// rate`; docs/lab/cli-memory.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// [`ferry_cli::process::no_huge_pages`] as a constructor run before mimalloc's
/// (priority 100; mimalloc's is unprioritized under gcc, 101 under clang).
#[used]
#[link_section = ".init_array.00100"]
static NO_HUGE_PAGES_AT_START: extern "C" fn() = ferry_cli::process::no_huge_pages;

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(ferry_cli::main_from_args(std::env::args_os()).clamp(0, 255) as u8)
}
