//! `ferry bench`: the lab's workloads (crates/bench), each against `ferry serve`
//! subprocesses started from this same executable. The Markdown report goes to stdout,
//! JSON lines are appended to --out, a progress line goes to stderr.
//!
//! `--link` brings an emulated link up (ferry-link) for the whole command and hands it to
//! the runner in [`RunOptions`]; the link is torn down when the options are dropped.
//! Without root a requested link falls back to none with a loud message (so `bench all`
//! still runs as a user); `link-check` alone refuses, since the link is what it measures.

use crate::units::{parse_bytes, parse_duration};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use ferry_bench::bulk_get::{self, BulkGetParams};
use ferry_bench::peers::{Peer, PeerSelection};
use ferry_bench::small_objects::{self, SmallObjectsParams};
use ferry_bench::workload::Size;
use ferry_bench::{RunOptions, ServerCommand};
use ferry_link::{Link, LinkError, Preset};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  ferry bench all --quick\n  ferry bench small-objects --quick\n  ferry bench mixed-hol --quick\n  ferry bench bulk-get --quick --rss-check 10GiB\n  ferry bench listing --quick\n  ferry bench link-check --link transatlantic\n  ferry bench bulk-wan --quick\n  ferry bench claims bench-results.jsonl --with bench-results-minio.jsonl --with-name MinIO\n  ferry bench vectored --quick --minio \"$(cat .ferry-run/minio-bin)\" --link region\n\nEach run appends one JSON line to --out; see crates/bench/src/record.rs for the schema."
)]
pub struct BenchArgs {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// GET many 16 KiB objects from the s3 profile: h1-pool vs h1-pipeline vs auto (and h2
    /// against an s3 server with h2 on), 32 connections (gg/llama: pipelining +30-40%).
    /// 10,000 objects (quick: 1,000), the peer rows too.
    SmallObjects(SmallObjectsArgs),
    /// One large GET from the lan profile per mode, beside iperf3 on loopback; optionally
    /// a large download to check that client memory stays bounded.
    BulkGet(BulkGetArgs),
    /// LIST a Hive-style layout (dirs x 6 files, s3 profile): one LIST per directory vs the
    /// engine's flat LIST + merge join and key-range parallel LIST (Qubole: 17,520 calls ->
    /// 106, 8x faster).
    Listing(ListingArgs),
    /// Small GETs arriving at 100/s beside 100 ranged 8 MiB reads held in flight, s3
    /// profile: small-GET latency loaded vs unloaded per client (Onehouse: 15x with SDK
    /// pools). 2,000 smalls (quick: 40).
    MixedHol(MixedHolArgs),
    /// First-byte percentiles (1,000 sequential GETs; quick 12) and per-request throughput of
    /// GET and PUT at 16 KiB, 256 KiB, 1 MiB, 8 MiB, 32 MiB (100 each, 2 in flight; quick: 4
    /// GETs each at 16 KiB, 1 MiB, 32 MiB, 4 PUTs at 1 MiB), per profile s3, gcs, azure
    /// (PerfKitBenchmarker).
    TtfbThroughput(SuiteArgs),
    /// One consumer reads 640 KiB objects in order, s3 profile (80,000; quick 64): on-demand
    /// opening vs the engine's OpenAhead (Qubole: 30%). The full size takes ~50 minutes a
    /// run on demand at ~38 ms an object: give it --run-timeout 4000s.
    OpenAhead(SuiteArgs),
    /// Hudi commit + cleaner: 500 x (GET 4 MiB, modify, PUT), then DeleteObjects of 5,000
    /// keys in batches one after another vs the engine's delete_many (quick: 32 files,
    /// the same 5,000 keys).
    Commit(SuiteArgs),
    /// HFile metadata reads: 2,000 ranges of 4-64 KiB in one 256 MiB object, one GET per
    /// range vs the engine's coalescing get_ranges (quick: 1,000 in 128 MiB, the same density).
    Vectored(SuiteArgs),
    /// A Python analysis service reading 3 of 20 columns of Parquet files (40-80 MB; quick:
    /// 6 of 8-16 MB), s3 profile: ferry-py (ferry.arrow.read_table, pandas through
    /// ferry://) beside pandas through s3fs and obstore's fsspec adapter and pyarrow's
    /// S3FileSystem; every table checked. Not in `all`.
    ParquetScan(SuiteArgs),
    /// The command line beside s5cmd and rclone: `ferry cp --recursive`, `s5cmd
    /// cp`, `rclone copy` as child processes, up and down, 10,000 x 16 KiB and 4 x 1 GiB
    /// files (quick: 1,000 and 4 x 256 MiB), lan profile; objects/s, bytes/s, the child's
    /// CPU and peak RSS; every copy checked by CRC64NVME. --peers: s5cmd, rclone.
    CliTransfer(CliTransferArgs),
    /// Every workload of the suite in turn (small-objects, mixed-hol, ttfb-throughput,
    /// listing, open-ahead, commit, vectored, bulk-wan), each workload's table, then one
    /// claims table: published headline | measured | reproduced? With --quick every row
    /// runs 3 interleaved repeats; on a 2-core machine a workload takes 26-52 s (bulk-wan
    /// ~47 s across the 110 ms link), the suite ~5.3 minutes (longer when the machine is
    /// busy). bulk-wan crosses the emulated transatlantic link when run as root.
    All(SuiteArgs),
    /// HTTPS bulk pull across the emulated link (IN2P3): ferry h1-pool, h2 and auto vs
    /// iperf3 -P N over a concurrency sweep [default link: transatlantic as root].
    BulkWan(BulkWanArgs),
    /// Bring the emulated link up and measure it: ICMP RTT and iperf3 -P 1 / -P 8 beside
    /// the preset's figures.
    LinkCheck(LinkCheckArgs),
    /// The claims table read back from JSON lines (each workload's latest run in the
    /// file), with --with a second server's column beside it: the same workloads run
    /// against MinIO with --endpoint-url (scripts/bench.sh writes
    /// bench-results-minio.jsonl).
    Claims(ClaimsArgs),
    /// Bring the emulated link up, with faults of the path if asked (loss, reordering, a
    /// cut), and hold it for processes run in its namespaces (`ip netns exec`) until
    /// SIGTERM; SIGUSR1 cuts it. The fault matrix's link cells use it.
    LinkHold(crate::link_hold::LinkHoldArgs),
}

#[derive(Args)]
struct ClaimsArgs {
    /// JSON lines of runs against ferry serve.
    #[arg(default_value = "bench-results.jsonl")]
    file: PathBuf,
    /// JSON lines of the same workloads against another server, for a column beside.
    #[arg(long, value_name = "FILE")]
    with: Option<PathBuf>,
    /// The other server's name in the headings.
    #[arg(long, value_name = "NAME", default_value = "external server", requires = "with")]
    with_name: String,
}

#[derive(Args)]
struct SuiteArgs {
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct Common {
    /// The quick size (under a minute) instead of the published one.
    #[arg(long)]
    quick: bool,
    /// Repeats, interleaved across modes (A B C, A B C, ...) [default: 3].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    repeats: Option<u64>,
    /// JSON lines are appended to this file.
    #[arg(long, default_value = "bench-results.jsonl")]
    out: PathBuf,
    /// Cut a single run off after this long (recorded as a time-out).
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    run_timeout: Duration,
    /// No progress line on stderr.
    #[arg(long)]
    no_progress: bool,
    /// Emulated link between client and server (needs root; docs/lab/README.md section 3):
    /// region (1 ms RTT), transatlantic (110 ms RTT, 10 Gbit/s), instance (1 ms RTT,
    /// 2.5 Gbit/s: an instance NIC in a region) or none (loopback)
    /// [default: none; bulk-wan: transatlantic].
    #[arg(long, value_parser = ["region", "transatlantic", "instance", "none"])]
    link: Option<String>,
    /// Peers to run beside ferry, each where it fits: small-objects, bulk-get (all but s3fs and pyarrow);
    /// mixed-hol (boto3, boto3-tuned, awscrt, obstore); ttfb-throughput (boto3, awscrt,
    /// obstore); open-ahead and vectored (boto3, obstore, s3fs, ferry-py); commit (clean: boto3,
    /// s5cmd; commit: boto3, obstore); listing (s5cmd, rclone); bulk-wan (boto3, awscrt,
    /// s5cmd, rclone); parquet-scan (ferry-py, s3fs, obstore, pyarrow): all, none, or a
    /// list of boto3,boto3-tuned,awscrt,obstore,s5cmd,rclone,s3fs,ferry-py,pyarrow.
    /// ferry-py is ferry's Python package (the project's .venv), beside the Python peers. scripts/bench-setup.sh installs them; one that is not installed shows
    /// as an absent row.
    #[arg(long, default_value = "all", value_parser = clap::value_parser!(PeerSelection))]
    peers: PeerSelection,
    /// Run against this S3-compatible server instead of `ferry serve` (credentials from
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, region from AWS_REGION): ferry's rows
    /// and the peers' rows; the emulation profile does not apply, and rows that need
    /// ferry serve itself (rate ceilings, a server with HTTP/2 on) are skipped. Objects
    /// the workload reads from ferry serve's synthetic bucket are PUT there first.
    /// bulk-wan (its own TLS servers across the link) and all do not take it.
    #[arg(long, value_name = "URL", conflicts_with = "minio")]
    endpoint_url: Option<String>,
    /// Start MinIO from this binary and run against it as --endpoint-url does: on a free
    /// port of loopback, or with --link in the link's server namespace as ferry serve
    /// (the client then crosses the same emulated path to it), with a data directory and
    /// credentials of its own, removed when the run ends. scripts/setup.sh builds one
    /// (its path is in .ferry-run/minio-bin).
    #[arg(long, value_name = "PATH")]
    minio: Option<PathBuf>,
    /// Run every `ferry serve` of the workload on this emulation profile instead of its
    /// own (lan, s3, gcs or azure; the h2 rows' server keeps HTTP/2 on): the same rows
    /// against another store's first-byte times, rates and limits, the profile named in
    /// the report and in each record. Honoured by small-objects, mixed-hol, listing,
    /// open-ahead, commit, vectored, parquet-scan and bulk-get; refused by
    /// ttfb-throughput (it compares the profiles itself), bulk-wan and cli-transfer
    /// (servers of their own), all, and with --endpoint-url (no emulation there).
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(ferry_bench::workload::PROFILES.iter().copied()))]
    profile: Option<String>,
}

#[derive(Args)]
struct MixedHolArgs {
    #[command(flatten)]
    common: Common,
    /// The cap map: instead of the usual rows, the h1-pool and one auto row per cap, with
    /// auto's hard cap on connections set to it (comma-separated, e.g. 24,32,40,50).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..))]
    auto_max_connections: Vec<u64>,
}

#[derive(Args)]
struct SmallObjectsArgs {
    #[command(flatten)]
    common: Common,
    /// Objects to PUT and GET [default: 10000; 1000 with --quick].
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
    /// Directories of 6 files each [default: 17520; 175 with --quick].
    #[arg(long)]
    dirs: Option<usize>,
    /// LIST calls in flight for the per-directory strategy [default: 16; 1 with --quick].
    #[arg(long)]
    dir_concurrency: Option<usize>,
    /// PUTs in flight while writing the layout.
    #[arg(long, default_value_t = 64)]
    put_concurrency: usize,
}

#[derive(Args)]
struct CliTransferArgs {
    #[command(flatten)]
    common: Common,
    /// Only this set of files: small (10,000 x 16 KiB; quick 1,000) or large (4 x 1 GiB;
    /// quick 4 x 256 MiB) [default: both].
    #[arg(long, value_parser = ["small", "large"])]
    set: Option<String>,
}

#[derive(Args)]
struct BulkWanArgs {
    #[command(flatten)]
    common: Common,
    /// Concurrency points, comma-separated [default: 1,2,4,...,256; 16 with --quick].
    #[arg(long, value_delimiter = ',')]
    concurrency: Option<Vec<usize>>,
    /// Mean object size (sizes ~ Normal(mean, 20% sd)) [default: 128MiB; 32MiB with --quick].
    #[arg(long, value_parser = parse_bytes)]
    mean_size: Option<u64>,
    /// Seconds counted of each run (each client, each point), after a warm-up [default: 10 after 3; 1.5 with --quick, after a warm-up measured per cold row (the rate stopped growing), 2 s at most, or 0.3 s on a client's warm connections].
    #[arg(long)]
    seconds: Option<f64>,
    /// Seed of the object sizes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
struct LinkCheckArgs {
    /// The link preset to measure.
    #[arg(long, default_value = "transatlantic", value_parser = ["region", "transatlantic", "instance"])]
    link: String,
    /// Seconds of each iperf3 run.
    #[arg(long, default_value_t = 5)]
    seconds: u32,
    /// ICMP echo requests.
    #[arg(long, default_value_t = 10)]
    pings: usize,
}

/// Brings up the link asked for (`None`: `default`). Without root it says so loudly and
/// runs without a link; any other failure is an error.
fn bring_up_link(choice: Option<&str>, default: Option<Preset>) -> Result<Option<Arc<Link>>> {
    let preset = match choice {
        Some("none") => return Ok(None),
        Some(name) => Preset::by_name(name).ok_or_else(|| anyhow::anyhow!("unknown link preset {name}"))?,
        None => match default {
            Some(p) => p,
            None => return Ok(None),
        },
    };
    match Link::up(preset) {
        Ok(l) => {
            eprintln!(
                "ferry bench: link {preset} up: client namespace {}, server namespace {} ({})",
                l.client_namespace(),
                l.server_namespace(),
                l.server_ip()
            );
            Ok(Some(Arc::new(l)))
        }
        Err(e @ LinkError::NotRoot { .. }) => {
            eprintln!("\n*** ferry bench: --link {}: {e}.\n*** FALLING BACK TO --link none: client and server talk over loopback, with no delay and no rate cap.\n", preset.name);
            Ok(None)
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("bringing up the {} link", preset.name))),
    }
}

fn run_bulk_wan(a: &BulkWanArgs) -> Result<()> {
    refuse_external(&a.common, "bulk-wan")?;
    refuse_profile(&a.common, "bulk-wan", "runs TLS servers of its own across the link")?;
    let sz = size(&a.common);
    let mut p = ferry_bench::bulk_wan::BulkWanParams::new(sz);
    if let Some(c) = &a.concurrency {
        if c.is_empty() || c.contains(&0) {
            bail!("--concurrency takes numbers of at least 1");
        }
        p.concurrency = c.clone();
    }
    if let Some(m) = a.mean_size {
        if m == 0 {
            bail!("--mean-size must be at least 1 byte");
        }
        p.mean_bytes = m;
    }
    if let Some(s) = a.seconds {
        if s.is_nan() || s < 0.1 {
            bail!("--seconds must be at least 0.1");
        }
        p.run_seconds = s;
    }
    p.seed = a.seed;
    // --quick runs 3 repeats of its one point, peers included; --repeats wins.
    if let Some(r) = a.common.repeats {
        p.repeats = r as usize;
    }
    let opts = options_with_link(&a.common, Some(Preset::TRANSATLANTIC))?;
    p.peers = opts.peers.clone();
    let outcome = ferry_bench::bulk_wan::run(sz, &p, &opts)?;
    println!("{}", outcome.report);
    println!(
        "{} runs in {:.1} s (link: {}); JSON lines appended to {}",
        outcome.records.len(),
        outcome.wall.as_secs_f64(),
        opts.link_name(),
        a.common.out.display()
    );
    Ok(())
}

fn run_link_check(a: &LinkCheckArgs) -> Result<()> {
    let preset = Preset::by_name(&a.link).ok_or_else(|| anyhow::anyhow!("unknown link preset {}", a.link))?;
    // No fallback here: without the link there is nothing to check.
    let link = Link::up(preset)
        .map_err(|e| anyhow::Error::new(e).context(format!("link-check: bringing up the {} link", a.link)))?;
    // iperf3's client is spawned from this thread: it must be in the client namespace.
    let _ns = link.enter_client()?;
    eprintln!("link-check: {} ICMP echo requests", a.pings);
    let rtts = link.ping(a.pings, Duration::from_millis(200))?;
    let mut ms: Vec<f64> = rtts.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let ps = ferry_bench::stats::percentiles(&mut ms, &[0.0, 50.0, 100.0]);
    let lifetime = Duration::from_secs(a.seconds as u64 + 120);
    let (cpu0, t0) = (ferry_link::delay_line_cpu_time(), std::time::Instant::now());
    let mut rows = Vec::new();
    for streams in [1usize, 8] {
        eprintln!("link-check: iperf3 -P {streams} for {} s", a.seconds);
        rows.push((streams, ferry_bench::process::iperf3(Some(&link), streams, a.seconds, lifetime)?));
    }
    println!("## ferry bench link-check: {preset}\n");
    println!(
        "client {} ({}) -> server {} ({})\n",
        link.client_ip(),
        link.client_namespace(),
        link.server_ip(),
        link.server_namespace()
    );
    println!("| measure | preset | measured |");
    println!("|---|---|---|");
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    println!(
        "| RTT, ICMP echo ({} of {} answered) | {:.1} ms | min {} / median {} / max {} ms |",
        rtts.len(),
        a.pings,
        preset.rtt.as_secs_f64() * 1e3,
        f(ps[0]),
        f(ps[1]),
        f(ps[2])
    );
    for (streams, r) in &rows {
        let measured = if r.absent {
            "absent (scripts/setup.sh installs iperf3)".to_string()
        } else {
            format!(
                "{:.2} Gbit/s ({} retransmits)",
                r.bits_per_second / 1e9,
                r.retransmits.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
            )
        };
        println!(
            "| iperf3 -P {streams}, {} s | {:.1} Gbit/s | {measured} |",
            r.seconds,
            preset.rate_bits_per_s as f64 / 1e9
        );
    }
    let st = link.stats();
    for (dir, c) in [("client -> server", st.client_to_server), ("server -> client", st.server_to_client)] {
        println!(
            "\n- delay line {dir}: {} packets, {:.2} GB, largest {} bytes (GSO super-packets when > 1510), {} dropped at the queue, {} write errors",
            c.packets,
            c.bytes as f64 / 1e9,
            c.max_packet,
            c.dropped,
            c.write_errors
        );
    }
    println!(
        "- bandwidth-delay product: {:.0} MiB; tcp_rmem/tcp_wmem max in both namespaces: 256 MiB",
        preset.bdp_bytes() as f64 / 1048576.0
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "- delay line CPU during the iperf3 runs: {:.1} s in {:.1} s wall; load average {} on {} cores (the link, iperf3 and everything else share them)",
        ferry_link::delay_line_cpu_time().saturating_sub(cpu0).as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    Ok(())
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
    p.repeats = a.common.repeats.map_or(p.repeats, |r| r as usize);
    let opts = options(&a.common)?;
    p.peers = opts.peers.clone();
    let outcome = ferry_bench::listing::run(sz, &p, &opts)?;
    println!("{}", outcome.report);
    println!(
        "{} runs in {:.1} s (link: {}); JSON lines appended to {}",
        outcome.records.len(),
        outcome.wall.as_secs_f64(),
        opts.link_name(),
        a.common.out.display()
    );
    Ok(())
}

fn run_cli_transfer(a: &CliTransferArgs) -> Result<()> {
    refuse_profile(&a.common, "cli-transfer", "starts its own lan server for the child tools")?;
    let sz = size(&a.common);
    let mut p = ferry_bench::cli_transfer::CliTransferParams::new(sz);
    if let Some(only) = &a.set {
        p.sets.retain(|s| s.name == only);
    }
    p.repeats = a.common.repeats.map_or(p.repeats, |r| r as usize);
    p.peers = a.common.peers.resolve(&[Peer::S5cmd, Peer::Rclone]);
    let opts = options(&a.common)?;
    let outcome = ferry_bench::cli_transfer::run(sz, &p, &opts)?;
    println!("{}", outcome.report);
    println!(
        "{} runs in {:.1} s; JSON lines appended to {}",
        outcome.records.len(),
        outcome.wall.as_secs_f64(),
        a.common.out.display()
    );
    Ok(())
}

fn options(c: &Common) -> Result<RunOptions> {
    options_with_link(c, None)
}

/// The run options, with the link of `--link` (else `default_link`) up.
fn options_with_link(c: &Common, default_link: Option<Preset>) -> Result<RunOptions> {
    // Refused before any server or link starts.
    let profile = profile(c)?;
    let mut o = RunOptions::new(ServerCommand::ferry(crate::program()?));
    o.out = Some(c.out.clone());
    o.progress = !c.no_progress;
    o.run_timeout = c.run_timeout;
    // Every peer: each workload keeps those it sets beside itself (small-objects and
    // bulk-get leave s3fs out; open-ahead and vectored take it).
    o.peers = c.peers.resolve(&Peer::ALL);
    o.set_link(bring_up_link(c.link.as_deref(), default_link)?);
    o.external = external(c)?;
    if let Some(bin) = &c.minio {
        let m = ferry_bench::minio::MinioServer::start(bin, o.link.as_ref(), o.server_lifetime, &o.log_dir)?;
        eprintln!("bench: MinIO at {} (log: {})", m.url, m.log.display());
        o.external = Some(m.external());
        o.minio = Some(Arc::new(m));
    }
    o.profile = profile;
    Ok(o)
}

/// The profile of `--profile`, as the bench names it; refused beside `--endpoint-url`.
fn profile(c: &Common) -> Result<Option<&'static str>> {
    let Some(name) = &c.profile else { return Ok(None) };
    if let Some(url) = &c.endpoint_url {
        bail!("--profile {name} with --endpoint-url {url}: an external server runs no emulation profile");
    }
    if c.minio.is_some() {
        bail!("--profile {name} with --minio: MinIO runs no emulation profile");
    }
    match ferry_bench::workload::PROFILES.iter().find(|p| *p == name) {
        Some(p) => Ok(Some(p)),
        None => bail!("--profile {name}: not one of {}", ferry_bench::workload::PROFILES.join(", ")),
    }
}

/// Workloads whose servers are not one fixed profile do not take `--profile`.
fn refuse_profile(c: &Common, workload: &str, why: &str) -> Result<()> {
    if let Some(name) = &c.profile {
        bail!("--profile {name}: {workload} {why}, so --profile does not apply to it");
    }
    Ok(())
}

/// The external server of `--endpoint-url`, with the credentials from the environment.
fn external(c: &Common) -> Result<Option<ferry_bench::ExternalServer>> {
    let Some(url) = &c.endpoint_url else { return Ok(None) };
    ferry_store::ClientConfig::new(url).map_err(|e| anyhow::anyhow!("--endpoint-url {url}: {e}"))?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(access_key), Some(secret_key)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) else {
        bail!("--endpoint-url {url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to the server's credentials");
    };
    let region = env("AWS_REGION").unwrap_or_else(|| "us-east-1".into());
    Ok(Some(ferry_bench::ExternalServer { url: url.clone(), access_key, secret_key, region, pid: None }))
}

/// Workloads that start their own servers do not take `--endpoint-url`.
fn refuse_external(c: &Common, workload: &str) -> Result<()> {
    if let Some(url) = &c.endpoint_url {
        bail!("--endpoint-url {url}: {workload} runs servers of its own and does not take an external endpoint yet");
    }
    if c.minio.is_some() {
        bail!("--minio: {workload} runs servers of its own and does not take an external endpoint yet");
    }
    Ok(())
}

fn size(c: &Common) -> Size {
    if c.quick {
        Size::Quick
    } else {
        Size::Full
    }
}

/// Repeats given on the command line, else the workload's own default.
fn repeats(c: &Common) -> Option<usize> {
    c.repeats.map(|r| r as usize)
}

/// One workload of the suite by name, its report on stdout.
/// `ferry bench mixed-hol --auto-max-connections N,...`: the cap map (mixed_hol.rs).
fn run_mixed_hol_caps(a: &MixedHolArgs) -> Result<()> {
    let s = size(&a.common);
    let opts = options_with_link(&a.common, None)?;
    let mut p = ferry_bench::mixed_hol::MixedHolParams::new(s);
    p.repeats = repeats(&a.common).unwrap_or(p.repeats);
    p.peers = opts.peers.clone();
    p.auto_caps = a.auto_max_connections.iter().map(|&n| n as usize).collect();
    p.link = opts.link.as_ref().map(|l| l.preset());
    let outcome = ferry_bench::run(&ferry_bench::mixed_hol::mixed_hol(s, &p), &opts)?;
    println!("{}", outcome.report);
    println!(
        "{} runs in {:.1} s; JSON lines appended to {}\n",
        outcome.records.len(),
        outcome.wall.as_secs_f64(),
        a.common.out.display()
    );
    Ok(())
}

fn run_one(name: &str, c: &Common) -> Result<ferry_bench::Outcome> {
    let w = ferry_bench::suite::find(name).ok_or_else(|| anyhow::anyhow!("no workload {name} in the suite"))?;
    // bulk-wan is the long-link workload: across the transatlantic link unless --link says.
    let default_link = w.default_link.and_then(Preset::by_name);
    let opts = options_with_link(c, default_link)?;
    let outcome = (w.run)(size(c), repeats(c), &opts)?;
    println!("{}", outcome.report);
    println!(
        "{} runs in {:.1} s; JSON lines appended to {}\n",
        outcome.records.len(),
        outcome.wall.as_secs_f64(),
        c.out.display()
    );
    Ok(outcome)
}

/// `ferry bench all`: every workload of the suite, then the claims table. A workload that
/// fails is reported in the table and the suite goes on.
fn run_all(a: &SuiteArgs) -> Result<()> {
    refuse_external(&a.common, "all (bulk-wan among its workloads)")?;
    refuse_profile(
        &a.common,
        "all",
        "runs ttfb-throughput (every profile) and bulk-wan (servers of its own); run each other workload with it",
    )?;
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    // Each workload's wall time (servers, setup and every run), for the quick suite's
    // budget: under a minute each, ~10 minutes in all.
    let mut walls = Vec::new();
    for name in ferry_bench::suite::suite().map(|w| w.name) {
        if !a.common.no_progress {
            eprintln!("ferry bench all: {name} ({:.0} s so far)", started.elapsed().as_secs_f64());
        }
        let t0 = std::time::Instant::now();
        let result = run_one(name, &a.common);
        walls.push((name, t0.elapsed().as_secs_f64(), result.as_ref().map_or(0, |o| o.records.len())));
        match result {
            Ok(o) => rows.push(ferry_bench::claims::headline(name, &o.records)),
            Err(e) => rows.push(ferry_bench::claims::Headline {
                workload: name.to_string(),
                published: "-".into(),
                measured: format!("failed: {e:#}"),
                verdict: "-".into(),
            }),
        }
    }
    println!("## ferry bench all ({}): claims\n", if a.common.quick { "quick" } else { "full" });
    println!("{}", ferry_bench::claims::table(&rows));
    println!("| workload | wall s | runs |\n|---|---|---|");
    for (name, wall, runs) in &walls {
        println!("| {name} | {wall:.0} | {runs} |");
    }
    println!();
    println!("suite took {:.0} s; JSON lines appended to {}", started.elapsed().as_secs_f64(), a.common.out.display());
    Ok(())
}

/// `ferry bench claims FILE [--with FILE]`: the table from recorded runs.
fn run_claims(a: &ClaimsArgs) -> Result<()> {
    let read = |p: &PathBuf| -> Result<Vec<ferry_bench::claims::Run>> {
        let text = std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        let (runs, skipped) = ferry_bench::claims::latest_runs(&text);
        if skipped > 0 {
            eprintln!("ferry bench claims: {}: {skipped} lines are not records of this schema; left out", p.display());
        }
        if runs.is_empty() {
            bail!("{}: no benchmark records in it", p.display());
        }
        Ok(runs)
    };
    let serve = read(&a.file)?;
    let mut columns: Vec<(&str, &[ferry_bench::claims::Run])> = vec![("ferry serve", &serve)];
    let other = a.with.as_ref().map(read).transpose()?;
    if let Some(o) = &other {
        columns.push((a.with_name.as_str(), o));
    }
    println!("## ferry bench claims: {}\n", columns.iter().map(|c| c.0).collect::<Vec<_>>().join(" beside "));
    println!("{}", ferry_bench::claims::side_by_side(&columns));
    Ok(())
}

pub fn run(args: BenchArgs) -> Result<()> {
    let suite = match &args.workload {
        Workload::Claims(a) => return run_claims(a),
        Workload::Listing(a) => return run_listing(a),
        Workload::BulkWan(a) => return run_bulk_wan(a),
        Workload::LinkCheck(a) => return run_link_check(a),
        Workload::LinkHold(a) => return crate::link_hold::run(a),
        Workload::All(a) => return run_all(a),
        Workload::CliTransfer(a) => return run_cli_transfer(a),
        Workload::MixedHol(a) if a.auto_max_connections.is_empty() => {
            return run_one("mixed-hol", &a.common).map(|_| ())
        }
        Workload::MixedHol(a) => return run_mixed_hol_caps(a),
        Workload::TtfbThroughput(a) => {
            refuse_profile(&a.common, "ttfb-throughput", "compares the s3, gcs and azure profiles itself")?;
            Some(("ttfb-throughput", a))
        }
        Workload::OpenAhead(a) => Some(("open-ahead", a)),
        Workload::Commit(a) => Some(("commit", a)),
        Workload::Vectored(a) => Some(("vectored", a)),
        Workload::ParquetScan(a) => Some(("parquet-scan", a)),
        _ => None,
    };
    if let Some((name, a)) = suite {
        return run_one(name, &a.common).map(|_| ());
    }
    let (w, c) = match &args.workload {
        Workload::Listing(_)
        | Workload::Claims(_)
        | Workload::BulkWan(_)
        | Workload::LinkCheck(_)
        | Workload::LinkHold(_)
        | Workload::All(_)
        | Workload::CliTransfer(_)
        | Workload::MixedHol(_)
        | Workload::TtfbThroughput(_)
        | Workload::OpenAhead(_)
        | Workload::Commit(_)
        | Workload::Vectored(_)
        | Workload::ParquetScan(_) => unreachable!("handled above"),
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
            p.repeats = a.common.repeats.map_or(p.repeats, |r| r as usize);
            p.auto_ranged = !a.no_auto_ranged;
            p.peers = a.common.peers.resolve(&Peer::DEFAULT);
            (small_objects::small_objects(size(&a.common), &p), &a.common)
        }
        Workload::BulkGet(a) => {
            let mut p = BulkGetParams::new(size(&a.common));
            let bytes = parse_bytes(&a.size).map_err(anyhow::Error::msg)?;
            p.size_label = a.size.clone();
            p.bytes = bytes;
            p.repeats = a.common.repeats.map_or(p.repeats, |r| r as usize);
            p.iperf3_seconds = a.iperf3_seconds;
            if let Some(s) = &a.rss_check {
                p.rss_check = Some((s.clone(), parse_bytes(s).map_err(anyhow::Error::msg)?));
            }
            p.peers = a.common.peers.resolve(&Peer::DEFAULT);
            (bulk_get::bulk_get(size(&a.common), &p), &a.common)
        }
    };
    let opts = options(c)?;
    let outcome = ferry_bench::run(&w, &opts)?;
    println!("{}", outcome.report);
    println!(
        "{} runs in {:.1} s (link: {}); JSON lines appended to {}",
        outcome.records.len(),
        outcome.wall.as_secs_f64(),
        opts.link_name(),
        c.out.display()
    );
    Ok(())
}
