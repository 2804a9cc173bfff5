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
//! alone. `small-objects` and `bulk-get` (plus its rss-check) use the runner's generic
//! tasks; `mixed-hol`, `vectored`, `commit`, `ttfb-throughput` and `open-ahead` each live in
//! their own file as a constructor plus a scenario step (scenario.rs) that the same runner
//! executes; `listing` keeps its own small runner (listing.rs). suite.rs lists the workloads
//! of `ferry bench all`, claims.rs holds each one's published headline and verdict rule.
//!
//! `--link region|transatlantic` (ferry-link, LAB.md section 3): [`RunOptions::link`]
//! puts the servers in the link's server namespace (process.rs) and the client in its
//! client namespace (runner.rs), and every record carries `params.link`. `bulk-wan`
//! (bulk_wan.rs) has its own runner across the link.

pub mod bulk_get;
pub mod bulk_wan;
pub mod ceilings;
pub mod claims;
pub mod cli_transfer;
pub mod commit;
pub mod listing;
pub mod measure;
pub mod mixed_hol;
pub mod open_ahead;
pub mod options;
pub mod peers;
pub mod process;
pub mod record;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod small_objects;
pub mod stats;
pub mod suite;
pub mod sys;
pub mod ttfb;
pub mod vectored;
pub mod verdict;
pub mod workload;

pub use bulk_get::BulkGetParams;
pub use options::{Outcome, RunOptions};
pub use process::{ServerCommand, ServerProcess};
pub use record::{RunContext, RunRecord};
pub use runner::run;
pub use small_objects::SmallObjectsParams;
pub use workload::{Size, Workload};
