//! The `ferry` command line. One module per verb; this file only dispatches.

mod bench;
mod serve;
mod units;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: the server allocates and frees many small buffers
/// per request across threads, where glibc's malloc showed up at ~10% of CPU in a
/// profile of 16 KiB GETs over h2 (perf record against `scripts/bench-serve.sh --only rate`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// ferry: fast, trustworthy movement of data in and out of object storage.
#[derive(Parser)]
#[command(name = "ferry", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an S3-compatible server (memory, disk or synthetic data) that can behave like
    /// S3, GCS or Azure.
    Serve(Box<serve::ServeArgs>),
    /// Run the lab's workloads against `ferry serve` subprocesses and report side by side.
    Bench(bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferry: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
