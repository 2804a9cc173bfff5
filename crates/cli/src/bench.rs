//! `ferry bench`: the lab's workloads (crates/bench), each against `ferry serve`
//! subprocesses started from this same executable. The Markdown report goes to stdout,
//! JSON lines are appended to --out, a progress line goes to stderr.

use crate::units::{parse_bytes, parse_duration};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use ferry_bench::peers::{Peer, PeerSelection};
use ferry_bench::workload::{self, BulkGetParams, Size, SmallObjectsParams};
use ferry_bench::{RunOptions, ServerCommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
#[command(after_help = "Examples:\n  ferry bench small-objects --quick\n  ferry bench bulk-get --quick --rss-check 10GiB\n  ferry bench listing --quick\n\nEach run appends one JSON line to --out; see crates/bench/src/record.rs for the schema.")]
pub struct BenchArgs {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// GET many 16 KiB objects from the s3 profile: h1-pool vs h1-pipeline vs auto (and h2
    /// against an s3 server with h2 on), 32 connections (gg/llama: pipelining +30-40%).
    SmallObjects(SmallObjectsArgs),
    /// One large GET from the lan profile per mode, beside iperf3 on loopback; optionally
    /// a large download to check that client memory stays bounded.
    BulkGet(BulkGetArgs),
    /// LIST a Hive-style layout (dirs x 6 files, s3 profile): one LIST per directory vs one
    /// flat LIST + merge join (Qubole: 17,520 calls -> 106, 8x faster).
    Listing(ListingArgs),
}

#[derive(Args)]
struct Common {
    /// The quick size (under a minute) instead of the published one.
    #[arg(long)]
    quick: bool,
    /// Repeats, interleaved across modes (A B C, A B C, ...).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    repeats: u64,
    /// JSON lines are appended to this file.
    #[arg(long, default_value = "bench-results.jsonl")]
    out: PathBuf,
    /// Cut a single run off after this long (recorded as a time-out).
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    run_timeout: Duration,
    /// No progress line on stderr.
    #[arg(long)]
    no_progress: bool,
    /// Peers to run beside ferry (small-objects, bulk-get): all, none, or a list of
    /// boto3,boto3-tuned,awscrt,obstore,s5cmd,rclone,s3fs. scripts/bench-setup.sh installs
    /// them; one that is not installed shows as an absent row. "all" leaves out s3fs.
    #[arg(long, default_value = "all", value_parser = clap::value_parser!(PeerSelection))]
    peers: PeerSelection,
}

#[derive(Args)]
struct SmallObjectsArgs {
    #[command(flatten)]
    common: Common,
    /// Objects to PUT and GET [default: 10000; 2000 with --quick].
    #[arg(long)]
    objects: Option<usize>,
    /// Size of each object.
    #[arg(long, default_value = "16KiB", value_parser = parse_bytes)]
    object_size: u64,
    /// Connections per client (every mode).
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Requests in flight per pipelined connection; connections x depth bounds the GETs in flight.
    #[arg(long, default_value_t = 32)]
    pipeline_depth: usize,
    /// Leave out the extra row of auto with ranged GETs.
    #[arg(long)]
    no_auto_ranged: bool,
}

#[derive(Args)]
struct BulkGetArgs {
    #[command(flatten)]
    common: Common,
    /// Size of the synthetic object (its key is synthetic/<SIZE>/x).
    #[arg(long, default_value = "1GiB")]
    size: String,
    /// Seconds of each iperf3 run.
    #[arg(long, default_value_t = 3)]
    iperf3_seconds: u32,
    /// Also download synthetic/<SIZE>/x once with h1-pool and report the client's peak RSS.
    #[arg(long, value_name = "SIZE")]
    rss_check: Option<String>,
}

#[derive(Args)]
struct ListingArgs {
    #[command(flatten)]
    common: Common,
    /// Directories of 6 files each [default: 17520; 1752 with --quick].
    #[arg(long)]
    dirs: Option<usize>,
    /// LIST calls in flight for the per-directory strategy [default: 16; 1 with --quick].
    #[arg(long)]
    dir_concurrency: Option<usize>,
    /// PUTs in flight while writing the layout.
    #[arg(long, default_value_t = 64)]
    put_concurrency: usize,
}

fn run_listing(a: &ListingArgs) -> Result<()> {
    let sz = size(&a.common);
    let mut p = ferry_bench::listing::ListingParams::new(sz);
    if let Some(d) = a.dirs {
        p.dirs = d;
    }
    if let Some(c) = a.dir_concurrency {
        p.per_dir_concurrency = c;
    }
    if p.dirs == 0 || p.per_dir_concurrency == 0 || a.put_concurrency == 0 {
        bail!("--dirs, --dir-concurrency and --put-concurrency must be at least 1");
    }
    p.put_concurrency = a.put_concurrency;
    p.repeats = a.common.repeats as usize;
    let outcome = ferry_bench::listing::run(sz, &p, &options(&a.common)?)?;
    println!("{}", outcome.report);
    println!("{} runs in {:.1} s; JSON lines appended to {}", outcome.records.len(), outcome.wall.as_secs_f64(), a.common.out.display());
    Ok(())
}

fn options(c: &Common) -> Result<RunOptions> {
    let mut o = RunOptions::new(ServerCommand::current_exe()?);
    o.out = Some(c.out.clone());
    o.progress = !c.no_progress;
    o.run_timeout = c.run_timeout;
    Ok(o)
}

fn size(c: &Common) -> Size {
    if c.quick {
        Size::Quick
    } else {
        Size::Full
    }
}

pub fn run(args: BenchArgs) -> Result<()> {
    if let Workload::Listing(a) = &args.workload {
        return run_listing(a);
    }
    let (w, c) = match &args.workload {
        Workload::Listing(_) => unreachable!("handled above"),
        Workload::SmallObjects(a) => {
            let mut p = SmallObjectsParams::new(size(&a.common));
            if let Some(n) = a.objects {
                p.objects = n;
            }
            if a.object_size == 0 || a.connections == 0 || a.pipeline_depth == 0 {
                bail!("--object-size, --connections and --pipeline-depth must be at least 1");
            }
            p.object_size = a.object_size as usize;
            p.connections = a.connections;
            p.pipeline_depth = a.pipeline_depth;
            p.repeats = a.common.repeats as usize;
            p.auto_ranged = !a.no_auto_ranged;
            p.peers = a.common.peers.resolve(&Peer::DEFAULT);
            (workload::small_objects(size(&a.common), &p), &a.common)
        }
        Workload::BulkGet(a) => {
            let mut p = BulkGetParams::new(size(&a.common));
            let bytes = parse_bytes(&a.size).map_err(anyhow::Error::msg)?;
            p.size_label = a.size.clone();
            p.bytes = bytes;
            p.repeats = a.common.repeats as usize;
            p.iperf3_seconds = a.iperf3_seconds;
            if let Some(s) = &a.rss_check {
                p.rss_check = Some((s.clone(), parse_bytes(s).map_err(anyhow::Error::msg)?));
            }
            p.peers = a.common.peers.resolve(&Peer::DEFAULT);
            (workload::bulk_get(size(&a.common), &p), &a.common)
        }
    };
    let opts = options(c)?;
    let outcome = ferry_bench::run(&w, &opts)?;
    println!("{}", outcome.report);
    println!(
        "{} runs in {:.1} s; JSON lines appended to {}",
        outcome.records.len(),
        outcome.wall.as_secs_f64(),
        c.out.display()
    );
    Ok(())
}
