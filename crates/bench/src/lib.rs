//! ferry-bench: the lab (docs/lab/README.md). Workloads run against `ferry serve`
//! subprocesses with an emulation profile, ferry's client in each transport mode beside the
//! peers (the tools users would otherwise pick) and the ceilings (iperf3, h2load, wrk),
//! interleaved over repeats, reported as JSON lines and a Markdown table of medians with
//! their spread.
//!
//! ```text
//! suite.rs     the one table: every workload's WorkloadDef (name, sizes, peers, run, claim)
//! claims.rs    the claims table of `ferry bench all`: each workload's claim, laid out
//!    │
//! small_objects.rs  bulk_get.rs  mixed_hol.rs  ttfb.rs  listing.rs  open_ahead.rs
//! commit.rs  vectored.rs  bulk_wan.rs  cli_transfer.rs  parquet_scan.rs   (the workloads: none imports another)
//!    │  each: params (quick/full), a constructor of a Workload (data), its scenario step,
//!    │        its claim, and its WORKLOAD value
//!    ▼
//! runner.rs    the one runner: servers ─► setup ─► repeats x variants ─► Session (JSON lines,
//!    │           progress, records) ─► report.rs
//! workload.rs  the data types: Workload, Variant, Task, ServerSpec, Column, Shape, WorkloadDef
//! scenario.rs  the Scenario trait: a workload's own step (setup once, run once per row)
//! report.rs    the Markdown table (cells, heading, not-clean list)
//! ceilings.rs  rate ceilings (h2load, wrk) and the C/L latency bound, rows any workload adds
//! peers.rs     the peers through bench/peers/driver.py, as rows of the runner
//!    │
//! options.rs  verdict.rs  measure.rs  record.rs  stats.rs  process.rs  sys.rs   (bottom: shared words)
//! ```
//!
//! Dependencies flow down only: a workload file imports the framework and the bottom modules,
//! never another workload; only suite.rs (and claims.rs through it) names them all. bulk-wan
//! and cli-transfer schedule their own rows (a concurrency sweep with clients kept warm
//! across repeats; child processes instead of S3Client calls) but record, report progress
//! and finish through the runner's `Session` like every other workload.
//!
//! The servers are other processes, so `getrusage(RUSAGE_SELF)` is the client's CPU alone.
//! `--link region|transatlantic|instance` (ferry-link, docs/lab/README.md section 3):
//! [`RunOptions::link`] puts the servers in the link's server namespace (process.rs) and
//! the client in its client namespace (runner.rs), and every record carries `params.link`.
//! Measurement notes for each workload are in docs/lab/bench-*.md.

pub mod bulk_get;
pub mod bulk_wan;
pub mod ceilings;
pub mod claims;
pub mod cli_transfer;
pub mod commit;
pub mod listing;
pub mod measure;
pub mod minio;
pub mod mixed_hol;
pub mod open_ahead;
pub mod options;
pub mod parquet_scan;
pub mod peers;
pub mod perfdiag;
pub mod process;
pub mod record;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod server_cpu;
pub mod small_objects;
pub mod sockets;
pub mod stats;
pub mod suite;
pub mod sys;
pub mod ttfb;
pub mod vectored;
pub mod verdict;
pub mod workload;

pub use bulk_get::BulkGetParams;
pub use options::{ExternalServer, Outcome, RunOptions};
pub use process::{ServerCommand, ServerProcess};
pub use record::{RunContext, RunRecord};
pub use runner::run;
pub use small_objects::SmallObjectsParams;
pub use workload::{Size, Workload};
