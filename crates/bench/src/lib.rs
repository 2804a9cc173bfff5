//! ferry-bench: the lab (LAB.md; issue 4). Workloads run against `ferry serve`
//! subprocesses with an emulation profile, for ferry's client in each transport mode and
//! beside a ceiling (iperf3), interleaved over repeats, reported as JSON lines and a
//! Markdown table of medians with their spread.
//!
//! ```text
//! workload.rs  workloads as data: servers, setup, variants (client x task), claims
//!      │
//! runner.rs    the one runner: start servers (process.rs) ─► setup ─► repeats x variants
//!      │         each run ─► record.rs (one JSON line, appended and flushed at once)
//! report.rs    medians (stats.rs, nearest-rank percentiles) ─► Markdown table + claims
//! sys.rs       getrusage (client CPU, peak RSS), /proc RSS, machine, git sha
//! ```
//!
//! The servers are other processes, so `getrusage(RUSAGE_SELF)` is the client's CPU
//! alone. This first slice carries `small-objects` and `bulk-get` (plus its rss-check);
//! the other workloads of LAB.md section 4 are new constructors in workload.rs.

pub mod listing;
pub mod peers;
pub mod process;
pub mod record;
pub mod report;
pub mod runner;
pub mod stats;
pub mod sys;
pub mod workload;

pub use process::{ServerCommand, ServerProcess};
pub use record::{RunContext, RunRecord};
pub use runner::{run, Outcome, RunOptions};
pub use workload::{BulkGetParams, Size, SmallObjectsParams, Workload};
