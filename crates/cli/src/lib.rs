//! The `ferry` command line as a library: one module per verb; this file parses and
//! dispatches, and process.rs sets the process up (allocator options, huge pages, the
//! blocking pool's size). The `ferry` binary (main.rs) is [`main_from_args`] over the
//! process's arguments; the Python package's `ferry` console script calls the same
//! function inside the interpreter (crates/py), so one `pip install` puts the whole
//! command line on PATH without a second build.
//!
//! ```text
//! main.rs / ferry._cli ─► main_from_args(argv) ─► Cli::try_parse_from
//!   ─► serve / bench: huge pages back on, their own runtimes (bench keeps freed memory
//!      like a data verb: its ferry rows are a client)
//!   └► data verbs (ls, cp, sync, rm, ...): keep_freed_memory,
//!      a multi-thread runtime whose blocking pool is sized per verb ─► dispatch ─► verb::run
//! ```
//!
//! What only a process's own binary can do stays in main.rs: the global allocator
//! (mimalloc) and the constructor that turns transparent huge pages off before anything
//! allocates. Inside Python the interpreter's allocator and settings stay in force.
//!
//! Verbs that start ferry again (`bench` runs `ferry serve` and its reaper as child
//! processes) start [`program`]: the running executable, or what the embedder named
//! with [`set_program`] (the console script, which re-enters this function).
//!
//! Exit codes: 0 success, 1 an operation failed, 2 a usage error (common.rs).

mod bench;
mod bucket;
mod cat;
pub mod common;
pub mod cp;
mod link_hold;
mod ls;
mod perfdiag;
mod presign;
pub mod process;
mod rm;
mod run;
mod serve;
mod stat;
pub mod sync;
mod units;
pub mod wildcard;

use clap::{Parser, Subcommand};

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
    /// Measure an endpoint from here: latency, throughput by size, listing, the path
    /// (DNS, TCP, TLS, ALPN, pipelining, receive windows), per transport, under a scratch
    /// prefix removed afterwards.
    Perfdiag(Box<perfdiag::PerfdiagArgs>),
}

/// Runs a data verb on a fresh runtime (module note; process.rs says why the pool's
/// size depends on the verb).
fn data_verb(command: Command, g: common::Global) -> anyhow::Result<()> {
    process::keep_freed_memory();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(process::blocking_threads(&command))
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
        Command::Perfdiag(a) => {
            let g = g.merged(&a.g);
            perfdiag::run(*a, &g).await
        }
        Command::Serve(_) | Command::Bench(_) => anyhow::bail!("serve and bench are not data verbs"),
    }
}

/// The tracing filter for `-v` given `verbose` times: warnings only, then ferry's own
/// crates at info (retries, resumes, give-ups), then at debug.
fn log_filter(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn",
        1 => "warn,ferry_wire=info,ferry_store=info,ferry_engine=info,ferry_cli=info",
        _ => "warn,ferry_wire=debug,ferry_store=debug,ferry_engine=debug,ferry_cli=debug",
    }
}

impl Command {
    /// `-v` as given after the verb.
    fn verbose(&self) -> u8 {
        match self {
            Command::Ls(a) => a.g.verbose,
            Command::Cp(a) => a.g.verbose,
            Command::Sync(a) => a.g.verbose,
            Command::Rm(a) => a.g.verbose,
            Command::Cat(a) => a.g.verbose,
            Command::Stat(a) => a.g.verbose,
            Command::Mb(a) => a.g.verbose,
            Command::Rb(a) => a.g.verbose,
            Command::Presign(a) => a.g.verbose,
            Command::Run(a) => a.g.verbose,
            Command::Perfdiag(a) => a.g.verbose,
            Command::Serve(_) | Command::Bench(_) => 0,
        }
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

static PROGRAM: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Names the program that runs this command line, for verbs that start it again (module
/// note); the first call wins.
pub fn set_program(path: std::path::PathBuf) {
    let _ = PROGRAM.set(path);
}

/// The program that runs this command line: [`set_program`]'s, else the running executable.
pub(crate) fn program() -> anyhow::Result<std::path::PathBuf> {
    match PROGRAM.get() {
        Some(p) => Ok(p.clone()),
        None => Ok(std::env::current_exe()?),
    }
}

/// Runs the command line on `args` (the first is the program's name, as `argv[0]`) and
/// returns the exit code: 0 success, 1 an operation failed, 2 usage. Help and
/// `--version` print and return 0; nothing here exits the process.
pub fn main_from_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    // `ferry bench cli-transfer` starts each measured tool through this program, which
    // must fork it with as small a heap as it can (cli_transfer.rs: reap_main says why).
    if args.get(1).is_some_and(|a| a == ferry_bench::cli_transfer::REAP_ARG) {
        process::allow_huge_pages();
        return ferry_bench::cli_transfer::reap_main(&args[2..]).clamp(0, 255);
    }
    // Its download ceilings run as child processes of this program too, timed like a tool.
    if args.get(1).is_some_and(|a| a == ferry_bench::cli_transfer::CEILING_ARG) {
        return ferry_bench::cli_transfer::ceiling_main(&args[2..]).clamp(0, 255);
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    // A second call in one process (an embedder) keeps the first subscriber.
    let filter = tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG")
        .unwrap_or_else(|_| log_filter(cli.global.verbose.max(cli.command.verbose())).into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let result = match cli.command {
        Command::Serve(args) => {
            process::allow_huge_pages();
            serve::run(*args)
        }
        Command::Bench(args) => {
            process::allow_huge_pages();
            // ferry's rows run in this process and stand for a ferry client, so they run
            // with a data verb's allocator setting: with mimalloc's default purge, the
            // vectored row's 8 MiB span buffers faulted in fresh zeroed pages on most
            // repeats, which doubled to quadrupled its client CPU
            // (docs/lab/engine-ranges.md, with the command).
            process::keep_freed_memory();
            bench::run(args)
        }
        other => data_verb(other, cli.global),
    };
    match result {
        Ok(()) => 0,
        // Each failed operation was already reported where it happened.
        Err(e) if e.downcast_ref::<common::PartialFailure>().is_some() => {
            eprintln!("ferry: {e}");
            1
        }
        Err(e) => {
            let code = exit_code(&e);
            eprintln!("ferry: error: {}", common::explain(&e));
            code.into()
        }
    }
}
