//! The `ferry` command line. One module per verb; this file parses, sets the process up
//! and dispatches.
//!
//! ```text
//! process start ─► no_huge_pages (a constructor, before mimalloc's and any allocation)
//! main ─► Cli::parse ─► serve / bench: huge pages back on, their own runtimes
//!                   └─► data verbs (ls, cp, sync, rm, ...): keep_freed_memory,
//!                       a multi-thread runtime whose blocking pool is sized per verb
//!                       (BLOCKING_THREADS, UPLOAD_BLOCKING_THREADS) ─► dispatch ─► verb::run
//! ```
//!
//! The process setup is about memory: a transfer's peak RSS is mostly its allocator's
//! heaps, one per thread that touched the bytes, so the allocator keeps what it frees
//! (reused at once, no page faults), no heap starts in a 2 MiB huge page, and the
//! blocking pool has as few threads as the verb needs. docs/lab/cli-memory.md and
//! docs/lab/cli-blocking-threads.md have the measurements and the commands.
//!
//! Exit codes: 0 success, 1 an operation failed, 2 a usage error (common.rs).

mod bench;
mod bucket;
mod cat;
mod common;
mod cp;
mod ls;
mod presign;
mod rm;
mod run;
mod serve;
mod stat;
mod sync;
mod units;
mod wildcard;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: the server allocates and frees many small buffers
/// per request across threads, where glibc's malloc showed up at ~10% of CPU in a
/// profile of 16 KiB GETs over h2 (`perf record` against `scripts/bench-serve.sh --only
/// rate`; docs/lab/cli-memory.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// ferry: fast, trustworthy movement of data in and out of object storage.
#[derive(Parser)]
#[command(name = "ferry", version, about, long_about = None, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    #[command(flatten)]
    pub(crate) global: common::Global,
}

const AFTER_HELP: &str = "Examples:
  export AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=ferry AWS_SECRET_ACCESS_KEY=ferry-secret
  ferry mb s3://bucket
  ferry cp --recursive ./data s3://bucket/data/
  ferry ls s3://bucket/data/
  ferry sync --delete s3://bucket/data/ ./copy/
  ferry cat s3://bucket/data/readme.txt
  ferry rm 's3://bucket/data/**.tmp'

Settings are found as the AWS CLI finds them: --endpoint-url / AWS_ENDPOINT_URL,
--region / AWS_REGION, --profile / AWS_PROFILE, ~/.aws/credentials and ~/.aws/config.
Exit codes: 0 success, 1 an operation failed (each failure is named on stderr), 2 usage.";

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run an S3-compatible server (memory, disk or synthetic data) that can behave like
    /// S3, GCS or Azure.
    Serve(Box<serve::ServeArgs>),
    /// Run the lab's workloads against `ferry serve` subprocesses and report side by side.
    Bench(bench::BenchArgs),
    /// List buckets, a prefix (one level, or --recursive), or the keys a wildcard names.
    Ls(ls::LsArgs),
    /// Copy objects and files: local <-> S3, S3 -> S3, stdin/stdout with '-'.
    Cp(cp::CpArgs),
    /// Make a destination like a source: copy what differs (size and mtime, or
    /// --checksum), optionally --delete what the source lacks.
    Sync(sync::SyncArgs),
    /// Remove objects: one key, a wildcard, or --recursive under a prefix.
    Rm(rm::RmArgs),
    /// Write an object to stdout.
    Cat(cat::CatArgs),
    /// Show an object's size, ETag, dates, checksums and metadata.
    Stat(stat::StatArgs),
    /// Make a bucket.
    Mb(bucket::MbArgs),
    /// Remove an (empty) bucket.
    Rb(bucket::RbArgs),
    /// Print a presigned GET URL for an object.
    Presign(presign::PresignArgs),
    /// Run ferry commands from a file or stdin, one per line, in parallel.
    Run(run::RunArgs),
}

/// mimalloc's `purge_delay` option (`mi_option_purge_delay`, index 15 of `mi_option_t`
/// in mimalloc v2 and v3 alike; not among the constants libmimalloc-sys exports).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

extern "C" {
    // mimalloc's C API, linked in by the mimalloc crate's libmimalloc-sys.
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// A data verb keeps the memory mimalloc frees instead of handing it back to the kernel
/// (`madvise`) after `purge_delay`: a transfer frees and reallocates its receive buffers
/// and write batches all the time, and each purge makes the next use of those pages
/// fault in fresh zeroed ones (system CPU 6.1-10.3 s against 7.7-16.3 s for 4 x 1 GiB
/// down, peak RSS the same; docs/lab/cli-memory.md, with the command). `ferry serve`
/// (long-running) keeps the default and returns memory. A `MIMALLOC_PURGE_DELAY` in the
/// environment wins; the option is set only while it still holds a default of v2 (10
/// ms) or v3 (1,000 ms), a guard should the index move.
fn keep_freed_memory() {
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
/// So it runs before anything allocates: as a constructor ahead of mimalloc's own (an
/// `.init_array` entry with a priority, which the linker places before the unprioritized
/// ones); any later, the allocations made until then have faulted in huge pages that stay
/// for the whole transfer. Verbs that want huge pages (`serve`, `bench`, and the bench's
/// reaper, whose children inherit the setting across fork and exec) turn them back on
/// with [`allow_huge_pages`] before they allocate much or start anything.
extern "C" fn no_huge_pages() {
    // SAFETY: a plain prctl on this process; failure (an old kernel) only leaves THP on.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// [`no_huge_pages`] as a constructor run before mimalloc's (priority 100; mimalloc's is
/// unprioritized under gcc, 101 under clang).
#[used]
#[link_section = ".init_array.00100"]
static NO_HUGE_PAGES_AT_START: extern "C" fn() = no_huge_pages;

/// Undoes [`no_huge_pages`] for a long-running or process-starting verb.
fn allow_huge_pages() {
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

/// Blocking threads when every source is local and the destination is S3 (`cp`, `sync`):
/// an upload reads its chunks there and needs no threads for creates or fsyncs, so fewer
/// heaps: 26-27 MiB peak RSS for 4 x 1 GiB up beside 28-32 with 8, wall within the noise
/// (docs/lab/cli-blocking-threads.md, with the command).
const UPLOAD_BLOCKING_THREADS: usize = 4;

/// The blocking pool's size for `command`.
fn blocking_threads(command: &Command) -> usize {
    let remote = |p: &str| p.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("s3://"));
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

/// Runs a data verb on a fresh runtime (module note). Where its peak RSS goes, by
/// mapping, is in docs/lab/cli-memory.md.
fn data_verb(command: Command, g: common::Global) -> anyhow::Result<()> {
    keep_freed_memory();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(blocking_threads(&command))
        .build()?;
    rt.block_on(dispatch(command, g))
}

pub(crate) async fn dispatch(command: Command, g: common::Global) -> anyhow::Result<()> {
    match command {
        Command::Ls(a) => {
            let g = g.merged(&a.g);
            ls::run(a, &g).await
        }
        Command::Cp(a) => {
            let g = g.merged(&a.g);
            cp::run(a, &g).await
        }
        Command::Sync(a) => {
            let g = g.merged(&a.g);
            sync::run(a, &g).await
        }
        Command::Rm(a) => {
            let g = g.merged(&a.g);
            rm::run(a, &g).await
        }
        Command::Cat(a) => {
            let g = g.merged(&a.g);
            cat::run(a, &g).await
        }
        Command::Stat(a) => {
            let g = g.merged(&a.g);
            stat::run(a, &g).await
        }
        Command::Mb(a) => {
            let g = g.merged(&a.g);
            bucket::mb(a, &g).await
        }
        Command::Rb(a) => {
            let g = g.merged(&a.g);
            bucket::rb(a, &g).await
        }
        Command::Presign(a) => {
            let g = g.merged(&a.g);
            presign::run(a, &g).await
        }
        Command::Run(a) => {
            let g = g.merged(&a.g);
            run::run(a, &g).await
        }
        Command::Serve(_) | Command::Bench(_) => anyhow::bail!("serve and bench are not data verbs"),
    }
}

/// The exit code for an error: 2 for usage errors, 1 for the rest.
fn exit_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<common::UsageError>().is_some() {
        2
    } else {
        1
    }
}

fn main() -> std::process::ExitCode {
    // `ferry bench cli-transfer` starts each measured tool through this binary, which
    // must fork it with as small a heap as it can (cli_transfer.rs: reap_main says why).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == ferry_bench::cli_transfer::REAP_ARG) {
        allow_huge_pages();
        return std::process::ExitCode::from(ferry_bench::cli_transfer::reap_main(&args[2..]).clamp(0, 255) as u8);
    }
    // Its download ceilings run as child processes of this binary too, timed like a tool.
    if args.get(1).is_some_and(|a| a == ferry_bench::cli_transfer::CEILING_ARG) {
        return std::process::ExitCode::from(ferry_bench::cli_transfer::ceiling_main(&args[2..]).clamp(0, 255) as u8);
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => {
            allow_huge_pages();
            serve::run(*args)
        }
        Command::Bench(args) => {
            allow_huge_pages();
            bench::run(args)
        }
        other => data_verb(other, cli.global),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Each failed operation was already reported where it happened.
        Err(e) if e.downcast_ref::<common::PartialFailure>().is_some() => {
            eprintln!("ferry: {e}");
            std::process::ExitCode::from(1)
        }
        Err(e) => {
            let code = exit_code(&e);
            eprintln!("ferry: error: {e:#}");
            std::process::ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(threads(&["ferry", "ls", "s3://b/"]), BLOCKING_THREADS);
    }
}
