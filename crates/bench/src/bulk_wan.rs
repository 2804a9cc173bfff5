//! `bulk-wan` (docs/lab/README.md section 4; IN2P3: HTTPS bulk pull across the Atlantic,
//! HTTP/1.1 vs HTTP/2 vs iperf3).
//!
//! One `ferry serve --tls --profile lan --memory --anonymous` subprocess serves the
//! synthetic bucket: object `i` is `synthetic/bulk-wan/size=<n_i>/obj-<i>`, its size drawn
//! from Normal(mean, 20% sd), seeded ([`object_sizes`]), so no byte is stored and every
//! run asks for the same objects. With a link (default `transatlantic` as root) the server
//! runs in the link's server namespace and this process's client in the client
//! namespace; the certificate is generated here (rcgen) for the address the client dials,
//! since `ferry serve --tls` alone certifies only localhost.
//!
//! Before timing, every object is HEADed once: the server computes each synthetic key's
//! CRC on first access and caches it, a cost that would otherwise fall on the first row.
//!
//! A run is one point of the concurrency sweep for one client: `concurrency` workers
//! each GET objects back to back (the next key from a shared counter) for a warm-up
//! (`omit_seconds`) and then a counted window (`run_seconds`), then stop; bytes received
//! inside the window count, whether or not their object finished, as iperf3 counts bytes
//! for `-t` seconds after `-O` omitted ones. Rows:
//!
//! - ferry h1-pool, h2 and auto, each with a connection cap equal to the concurrency
//!   (h2 opens connections as its own rules say: `connections_opened` shows how many);
//! - `iperf3 -P N -O omit -t window -R` (N = concurrency, at most 128) on the same link,
//!   the ceiling: plain TCP without TLS, the server sending as in a GET (without `-R`
//!   iperf3 measured the other direction of the link).
//!
//! A cold row's warm-up ends when its receive rate stops growing ([`ramp_ended`]: sampled
//! every 100 ms, under 15% growth over 300 ms, between 0.7 s and a 2 s cap), then its window
//! is counted; iperf3's 100 ms intervals are cut by the same rule ([`measured_window`]).
//! `--quick` keeps each ferry client warm across repeats ([`BulkWanParams::warm_clients`]),
//! runs iperf3 once, longer, as the ceiling of every repeat ([`ceiling_for`]), and runs the
//! peers once on a shorter pull of their own, held against ferry h1-pool on the same pull
//! ([`SAME_PULL_ROW`]). Why each of these, what was tried instead, and the figures:
//! docs/lab/bench-bulk-wan.md.
//!
//! A ferry row that receives nothing in its counted window is an error row, never a 0 MB/s
//! figure; its error sample says where its time went (requests sent, connections, first body
//! byte).
//!
//! Per-connection throughput is the aggregate over `connections_opened` (iperf3: over N;
//! a peer: over the connections the server counted during its run, from its whole-run
//! figure, since a peer has no counted window).
//! Concurrency points run one after another; within a point the rows are interleaved,
//! and repeats go round the whole sweep again.
//!
//! Records: `params.concurrency`, `params.link`, `figures.bytes_per_s` and
//! `figures.bytes_per_s_per_connection`; iperf3 records have mode "iperf3" (the plot of
//! throughput vs concurrency reads these). Its schedule (concurrency points one after
//! another, time-bounded workers, clients kept across repeats) is its own; the JSON lines,
//! the progress line and the outcome go through the runner's [`crate::runner::Session`].

use crate::options::{Outcome, RunOptions};
use crate::process::{self, ServerProcess};
use crate::record::{RunContext, RunRecord};
use crate::report::cell;
use crate::stats::Spread;
use crate::sys;
use crate::verdict::{median, paired_ratio, repeats_of, x2, Headline};
use crate::workload::Size;
use anyhow::{Context, Result};
use ferry_store::{CredentialsSource, GetParams, Mode, ObjectRef, S3Client};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const PUBLISHED: &str =
    "IN2P3-NCSA bulk pull over HTTPS: HTTP/1.1 vs HTTP/2 vs iperf3 on a 10 Gbit/s, 110 ms RTT path";
pub const BUCKET: &str = "synthetic";
/// Warm-up of a `--quick` run. One stream from an initial window of 10 segments reaches
/// the transatlantic bandwidth-delay product (137.5 MB) in log2(137.5 MB / 14.5 kB) = 13
/// round trips, 1.45 s at 110 ms, after 3 round trips of TCP + TLS 1.3 handshake and the
/// first request: 1.8 s. Many streams ramp up together and get there sooner
/// (`ferry bench link-check --link transatlantic` measures the link it assumes).
pub const QUICK_OMIT_SECONDS: u32 = 2;
/// Counted window of a `--quick` run: 1.5 s, ~14 round trips at 110 ms, the longest that
/// kept the workload near its minute (docs/lab/bench-bulk-wan.md).
pub const QUICK_WINDOW_SECONDS: f64 = 1.5;
/// Idle time-out of a warm client's connections: longer than a round of every other row.
const WARM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// HEADs in flight while warming.
const WARM_CONNECTIONS: usize = 64;

/// Parameters of `bulk-wan`.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkWanParams {
    pub mean_bytes: u64,
    /// Standard deviation as a fraction of the mean (docs/lab/README.md section 4: 20%).
    pub sd_fraction: f64,
    pub seed: u64,
    /// Distinct objects (keys are reused round-robin when a run needs more).
    pub objects: usize,
    pub concurrency: Vec<usize>,
    /// Length of each counted window, seconds.
    pub run_seconds: f64,
    /// Warm-up before the counted window (TLS handshakes, slow start), run but not
    /// counted in `bytes_per_s`; iperf3's `-O`, and the cap of a measured warm-up.
    pub omit_seconds: u32,
    /// How a ferry row's warm-up ends.
    pub warmup: Warmup,
    pub repeats: usize,
    pub modes: Vec<Mode>,
    pub iperf3: bool,
    /// Peer rows at every point (filtered to [`PEERS`]; the CLI's `--peers` fills it).
    pub peers: Vec<crate::peers::Peer>,
    /// Peer rows in the first repeat only (quick: a peer pulls whole objects and pays its
    /// process start, ~3 s a row; the full size repeats them).
    pub peers_once: bool,
    /// Each ferry client is built once and kept for every repeat ([`run`]): its first row
    /// pays the TCP + TLS handshakes and slow start (measured warm-up), the later rows run
    /// on its open connections after [`BulkWanParams::warm_omit`]. The server's namespace
    /// keeps the congestion window across the idle time between rows
    /// (`tcp_slow_start_after_idle=0`), and each row ends by finishing the bodies in
    /// flight (uncounted) so that no HTTP/1.1 connection is closed mid-body.
    pub warm_clients: bool,
    /// Warm-up of a row on warm connections (the first requests' round trip).
    pub warm_omit: Duration,
    /// Mean size of the objects the peers pull (`concurrency` whole objects a run):
    /// smaller than the ferry rows' at --quick so that a peer's pull, handshakes and slow
    /// start included, lasts about one counted window.
    pub peer_mean_bytes: u64,
    /// iperf3's warm-up: `Fixed` is `-O omit_seconds -t run_seconds`; `Measured` runs
    /// `-t iperf3_seconds -i 0.1` and applies [`ramp_ended`] to its 100 ms intervals, the
    /// rule of the ferry rows, then counts up to `run_seconds` after it.
    pub iperf3_warmup: Warmup,
    /// `-t` of a measured iperf3 run: its ramp (~1.5 s for 16 streams here) and the
    /// windows to pick the best one from (`window_s` in the record: at least half of
    /// `run_seconds`, or the row fails).
    pub iperf3_seconds: u32,
    /// iperf3 runs in the first repeat only, and every repeat's ferry rows are held
    /// against that run ([`ceiling_for`]): one long run (quick: `-t 10`) in the time of
    /// three short ones, with more windows after its ramp to find the link's most in.
    pub iperf3_once: bool,
    /// Before the peers, a ferry h1-pool row makes the peers' own pull ([`SAME_PULL_ROW`]):
    /// a new client, the same whole objects with as many in flight, timed like a peer.
    pub same_pull: bool,
    /// How long a row may finish its bodies in flight after its window (`drain`); past
    /// it they are dropped (an HTTP/1.1 connection then closes, and the next warm row
    /// reopens it: its `connections_opened` says so).
    pub drain_grace: Duration,
}

/// The ferry row beside the peers: their pull (whole objects, a new client), h1-pool like
/// all four of them, timed as driver.py times a peer.
pub const SAME_PULL_ROW: &str = "h1-pool · peers' pull";

/// The peers beside bulk-wan: the bulk downloaders users pick (boto3's threads, the CRT,
/// s5cmd, rclone).
pub const PEERS: [crate::peers::Peer; 4] =
    [crate::peers::Peer::Boto3, crate::peers::Peer::Awscrt, crate::peers::Peer::S5cmd, crate::peers::Peer::Rclone];

impl BulkWanParams {
    pub fn new(size: Size) -> BulkWanParams {
        match size {
            // --quick: 16 streams (the claim's point) x (3 clients + iperf3) x 3 repeats, the
            // peers and ferry on their pull once: about a minute (docs/lab/bench-quick-sizes.md and
            // docs/lab/bench-bulk-wan.md say what each cut keeps; `ferry bench bulk-wan --quick`).
            Size::Quick => BulkWanParams {
                mean_bytes: 32 << 20,
                sd_fraction: 0.2,
                seed: 1,
                // Keys are reused round-robin (a row moves up to ~1.5 GB, ~45 objects): 24
                // keep the HEAD warm-up short (the server computes each synthetic key's CRC
                // on first access; docs/lab/bench-quick-sizes.md).
                objects: 24,
                concurrency: vec![16],
                run_seconds: QUICK_WINDOW_SECONDS,
                omit_seconds: QUICK_OMIT_SECONDS,
                warmup: Warmup::Measured,
                repeats: 3,
                modes: vec![Mode::H1Pool, Mode::H2, Mode::Auto],
                iperf3: true,
                peers: Vec::new(),
                peers_once: true,
                warm_clients: true,
                warm_omit: Duration::from_millis(300),
                peer_mean_bytes: 8 << 20,
                iperf3_warmup: Warmup::Measured,
                // One run of 10 s in repeat 1: in 4 s, 16 streams spend most of the run in
                // slow start and loss recovery at the CPU-bound link, and the best window fell
                // under a ferry row; 10 s gives it windows after the losses (docs/lab/bench-quick-sizes.md;
                // `ferry bench bulk-wan --quick` re-measures it).
                iperf3_seconds: 10,
                iperf3_once: true,
                same_pull: true,
                drain_grace: Duration::from_secs(3),
            },
            // 9 points x 4 rows x (3 + 10 s) x 3 repeats: ~25 minutes.
            Size::Full => BulkWanParams {
                mean_bytes: 128 << 20,
                sd_fraction: 0.2,
                seed: 1,
                // Under the server's CRC cache of 4,096 keys (backend synthetic.rs).
                objects: 2048,
                concurrency: vec![1, 2, 4, 8, 16, 32, 64, 128, 256],
                run_seconds: 10.0,
                omit_seconds: 3,
                warmup: Warmup::Fixed,
                repeats: 3,
                modes: vec![Mode::H1Pool, Mode::H2, Mode::Auto],
                iperf3: true,
                peers: Vec::new(),
                peers_once: false,
                warm_clients: false,
                warm_omit: Duration::from_millis(300),
                peer_mean_bytes: 128 << 20,
                iperf3_warmup: Warmup::Fixed,
                iperf3_seconds: 13,
                iperf3_once: false,
                same_pull: true,
                drain_grace: Duration::from_secs(10),
            },
        }
    }
}

/// How a ferry row's warm-up ends (iperf3's is always its fixed `-O omit_seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmup {
    /// After `omit_seconds`.
    Fixed,
    /// When [`ramp_ended`] says the receive rate stopped growing, at most `omit_seconds`.
    Measured,
}

/// Sampling step of a measured warm-up.
pub const RAMP_SAMPLE: Duration = Duration::from_millis(100);
/// A measured warm-up lasts at least this long (two spans and a sample): over 6 round
/// trips at 110 ms, so the TCP + TLS handshakes and the first request (no bytes yet) are
/// behind it.
pub const RAMP_MIN: Duration = Duration::from_millis(700);
/// Samples per rate: 300 ms, ~3 round trips at 110 ms, in which slow start multiplies the
/// rate by ~6; a ramp still on its way grows far more than [`RAMP_GROWTH`].
const RAMP_SPAN: usize = 3;
/// The rate has stopped growing when the last span's is at most this factor of the span
/// before (10-15% is the step-to-step noise of the CPU-bound link seen here; each row's
/// `omit_s` and `warmup_capped` in the JSON lines of `ferry bench bulk-wan --quick` show
/// where the rule ended the warm-up).
const RAMP_GROWTH: f64 = 1.15;

/// Whether a pull's ramp-up is over, from its cumulative bytes sampled every
/// [`RAMP_SAMPLE`] from the start (`cumulative[0]` at the first step): at least
/// [`RAMP_MIN`] in, bytes flowing, and the rate of the last [`RAMP_SPAN`] samples at most
/// [`RAMP_GROWTH`] x the rate of the span before it. A pull that received nothing never
/// ends its ramp (the caller's cap does).
pub fn ramp_ended(cumulative: &[u64]) -> bool {
    let n = cumulative.len();
    if RAMP_SAMPLE * (n as u32) < RAMP_MIN || n < 2 * RAMP_SPAN + 1 {
        return false;
    }
    let at = |i: usize| cumulative[i] as f64;
    let last = at(n - 1) - at(n - 1 - RAMP_SPAN);
    let before = at(n - 1 - RAMP_SPAN) - at(n - 1 - 2 * RAMP_SPAN);
    last > 0.0 && before > 0.0 && last <= RAMP_GROWTH * before
}

/// iperf3's counted window under the measured warm-up rule.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredWindow {
    pub omit_s: f64,
    pub capped: bool,
    pub bytes: f64,
    pub seconds: f64,
}

/// From iperf3's intervals of [`RAMP_SAMPLE`] (`(seconds, bytes)` each, in order): the
/// warm-up ends where [`ramp_ended`] says, or at `cap_s`, and the window is the best
/// `window_s` of consecutive intervals after it (all of them when fewer follow). `None`
/// when fewer than half the window's intervals follow.
pub fn measured_window(intervals: &[(f64, f64)], cap_s: f64, window_s: f64) -> Option<MeasuredWindow> {
    let mut cumulative = Vec::with_capacity(intervals.len());
    let (mut total, mut elapsed) = (0.0, 0.0);
    let mut end = None;
    for (i, (secs, bytes)) in intervals.iter().enumerate() {
        total += bytes;
        elapsed += secs;
        cumulative.push(total as u64);
        let capped = elapsed + RAMP_SAMPLE.as_secs_f64() / 2.0 >= cap_s;
        if ramp_ended(&cumulative) || capped {
            end = Some((i + 1, elapsed, capped && !ramp_ended(&cumulative)));
            break;
        }
    }
    let (from, omit_s, capped) = end?;
    let want = (window_s / RAMP_SAMPLE.as_secs_f64()).round().max(1.0) as usize;
    let after = &intervals[from..];
    if after.len() * 2 < want {
        return None;
    }
    // The best `want` consecutive intervals after the warm-up: a ceiling is the most the
    // path gave. The first window after a warm-up that ended on a noisy 100 ms sample
    // can still hold slow start or a loss recovery of 16 streams overflowing the queue.
    let rest = after
        .windows(want.min(after.len()))
        .max_by(|a, b| {
            let sum = |w: &[(f64, f64)]| w.iter().map(|(_, b)| b).sum::<f64>();
            sum(a).total_cmp(&sum(b))
        })
        .unwrap_or(after);
    Some(MeasuredWindow {
        omit_s,
        capped,
        bytes: rest.iter().map(|(_, b)| b).sum(),
        seconds: rest.iter().map(|(s, _)| s).sum(),
    })
}

/// `n` object sizes ~ Normal(mean, sd_fraction x mean), from `seed`; at least 1 byte each
/// (with a 20% sd, a draw at or below zero is a 5-sigma event).
pub fn object_sizes(n: usize, mean: u64, sd_fraction: f64, seed: u64) -> Vec<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let normal = Normal::new(mean as f64, mean as f64 * sd_fraction).expect("a finite, non-negative sd");
    (0..n).map(|_| normal.sample(&mut rng).round().max(1.0) as u64).collect()
}

/// `bulk-wan/size=<bytes>/obj-<i>` in the synthetic bucket.
pub fn object_keys(sizes: &[u64]) -> Vec<String> {
    sizes.iter().enumerate().map(|(i, n)| format!("bulk-wan/size={n}/obj-{i:05}")).collect()
}

/// The peers' objects at --quick: `bulk-wan/size=<bytes>/peer-<i>`.
pub fn peer_object_keys(sizes: &[u64]) -> Vec<String> {
    sizes.iter().enumerate().map(|(i, n)| format!("bulk-wan/size={n}/peer-{i:05}")).collect()
}

pub fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Auto => "auto",
        Mode::H1Pool => "h1-pool",
        Mode::H1Pipeline => "h1-pipeline",
        Mode::H2 => "h2",
    }
}

fn iperf3_label(c: usize) -> String {
    format!("iperf3 -P {}", c.min(process::IPERF3_MAX_STREAMS))
}

/// The ceiling a row of repeat `repeat` is held against, among `at` (the records of one
/// concurrency point): iperf3's run of the same repeat, else its only run (iperf3 run
/// once, [`BulkWanParams::iperf3_once`]).
pub fn ceiling_for<'a>(at: &[&'a RunRecord], ceiling: &str, repeat: usize) -> Option<&'a RunRecord> {
    let runs: Vec<&RunRecord> = at.iter().copied().filter(|r| r.variant == ceiling && r.status == "ok").collect();
    runs.iter().copied().find(|r| r.repeat == repeat).or(if runs.len() == 1 { Some(runs[0]) } else { None })
}

/// Each ok record of `variant` over its ceiling ([`ceiling_for`]), for `figure`.
pub fn shares_of_ceiling(at: &[&RunRecord], variant: &str, ceiling: &str, figure: &str) -> Vec<f64> {
    at.iter()
        .filter(|r| r.variant == variant && r.status == "ok")
        .filter_map(|r| {
            Some(r.figure(figure)? / ceiling_for(at, ceiling, r.repeat)?.figure(figure).filter(|v| *v > 0.0)?)
        })
        .collect()
}

/// A ferry client of one row, kept across repeats when warm.
struct WarmClient {
    id: (Mode, usize),
    client: S3Client,
    /// The auto transport under `client`, when the mode is auto.
    auto: Option<Arc<ferry_wire::auto::AutoTransport>>,
}

impl WarmClient {
    /// Whether a dropped body resets its h2 stream (the connection stays) rather than
    /// closing an HTTP/1.1 connection: h2, or auto once it chose h2.
    fn speaks_h2(&self) -> bool {
        self.id.0 == Mode::H2 || self.auto.as_ref().and_then(|a| a.chosen()) == Some("h2")
    }
}

/// What one timed run of a ferry client produced.
struct PullResult {
    /// Received within the counted window (after the warm-up).
    bytes: u64,
    /// The counted window as measured.
    wall: Duration,
    /// Received from the start (warm-up and window).
    bytes_with_ramp: u64,
    wall_with_ramp: Duration,
    objects: u64,
    errors: u64,
    samples: Vec<String>,
    /// This process less the delay line's threads (sys::cpu_time).
    cpu: Duration,
    /// The delay line's threads (ferry-link), apart.
    link_cpu: Duration,
    connections_opened: u64,
    requests_sent: u64,
    first_byte_ms: Vec<f64>,
    /// The warm-up as run: measured, or the fixed one.
    omit: Duration,
    /// A measured warm-up that hit its cap (the ramp had not visibly ended).
    omit_capped: bool,
    /// From the start to the first body byte of any GET (`None`: none came).
    first_body_byte: Option<Duration>,
    /// After the window: finishing (or dropping) the bodies in flight.
    drain: Duration,
    /// The drain grace ran out with bodies still in flight (they were dropped).
    drain_cut: bool,
}

/// CPU time at a mark, split the way every bulk-wan row reports it: this process (the
/// client, less the delay line: [`sys::cpu_time`]) and the delay line's threads, which run
/// in this process too ([`ferry_link::delay_line_cpu_time`]).
#[derive(Clone, Copy, Debug)]
struct CpuMark {
    client: Duration,
    link: Duration,
}

/// CPU time spent since a [`CpuMark`].
#[derive(Clone, Copy, Debug, PartialEq)]
struct CpuSpent {
    client: Duration,
    link: Duration,
}

impl CpuMark {
    fn now() -> CpuMark {
        CpuMark { client: sys::cpu_time(), link: ferry_link::delay_line_cpu_time() }
    }

    fn spent(&self) -> CpuSpent {
        let now = CpuMark::now();
        CpuSpent { client: now.client.saturating_sub(self.client), link: now.link.saturating_sub(self.link) }
    }
}

/// `concurrency` workers GET keys round-robin for `omit` then `window`; bytes received
/// within `window` count (and, apart, everything from the start).
///
/// `drain`: when the window closes, each worker reads its body in flight to the end
/// (uncounted) for at most this long instead of dropping it, which would close its
/// HTTP/1.1 connection; the connections stay open for the client's next row. Unless
/// `resets()` says, at the window's close, that the client speaks h2: a dropped body
/// then resets its stream and the connection stays (the transport's contract), so the
/// bodies are dropped (draining them cost h2 and auto 0.6-1.5 s a row).
#[allow(clippy::too_many_arguments)] // one row's whole plan, read once at the call sites
async fn pull(
    client: &S3Client,
    keys: Arc<Vec<(String, u64)>>,
    concurrency: usize,
    omit: Duration,
    warmup: Warmup,
    window: Duration,
    drain: Option<Duration>,
    resets: &(dyn Fn() -> bool + Sync),
) -> PullResult {
    let finish_bodies = Arc::new(AtomicBool::new(false));
    // Wakes workers waiting on a head or a chunk when the window closes, so that a row
    // that drops its bodies ends at once rather than at each worker's next chunk.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let st0 = client.transport().stats();
    let next = Arc::new(AtomicUsize::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let cpu0 = CpuMark::now();
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (c, keys, next, bytes, stop, finish_bodies, stop_rx) = (
            client.clone(),
            keys.clone(),
            next.clone(),
            bytes.clone(),
            stop.clone(),
            finish_bodies.clone(),
            stop_rx.clone(),
        );
        set.spawn(async move {
            let (mut objects, mut errors, mut samples, mut fb) = (0u64, 0u64, Vec::new(), Vec::new());
            while !stop.load(Relaxed) {
                let (key, size) = &keys[next.fetch_add(1, Relaxed) % keys.len()];
                let obj = ObjectRef::new(BUCKET, key.clone());
                let s = Instant::now();
                let fetch = async {
                    let mut out = c.get_object(&obj, GetParams::default()).await?;
                    fb.push(s.elapsed().as_secs_f64() * 1e3);
                    let mut n = 0u64;
                    while let Some(chunk) = out.body.chunk().await {
                        let len = chunk?.len() as u64;
                        if stop.load(Relaxed) {
                            if !finish_bodies.load(Relaxed) {
                                return Ok(n); // the window closed mid-body: not an error
                            }
                            n += len; // finishing the body, uncounted
                            continue;
                        }
                        n += len;
                        bytes.fetch_add(len, Relaxed);
                    }
                    Ok(n)
                };
                let dropped = {
                    let (mut rx, finish_bodies) = (stop_rx.clone(), finish_bodies.clone());
                    async move {
                        let _ = rx.wait_for(|stopped| *stopped).await;
                        if finish_bodies.load(Relaxed) {
                            std::future::pending::<()>().await;
                        }
                    }
                };
                // Dropped at the window's end (not an error: `stop` is set).
                let r: Result<u64> = tokio::select! { r = fetch => r, _ = dropped => Ok(0) };
                match r {
                    Ok(n) if n == *size && stop.load(Relaxed) => {}
                    Ok(n) if n == *size => objects += 1,
                    Ok(_) if stop.load(Relaxed) => {}
                    Ok(n) => {
                        errors += 1;
                        samples.push(format!("GET {obj}: {n} bytes, expected {size}"));
                    }
                    Err(e) if !stop.load(Relaxed) => {
                        errors += 1;
                        samples.push(format!("GET {obj}: {e:#}"));
                    }
                    Err(_) => {}
                }
            }
            (objects, errors, samples, fb)
        });
    }
    // The warm-up, sampled every RAMP_SAMPLE: until `omit`, or (measured) until the rate
    // stops growing, at most `omit`.
    let (mut omit_capped, mut first_body_byte) = (false, None);
    let mut cumulative = Vec::new();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + RAMP_SAMPLE, RAMP_SAMPLE);
    loop {
        tick.tick().await;
        let b = bytes.load(Relaxed);
        if b > 0 && first_body_byte.is_none() {
            first_body_byte = Some(t0.elapsed());
        }
        cumulative.push(b);
        if warmup == Warmup::Measured && ramp_ended(&cumulative) {
            break;
        }
        if t0.elapsed() + RAMP_SAMPLE / 2 >= omit {
            omit_capped = warmup == Warmup::Measured;
            break;
        }
    }
    let (before, t1) = (bytes.load(Relaxed), Instant::now());
    let omit = t1 - t0;
    tokio::time::sleep(window).await;
    // Bytes are read at the window's end; what arrives after does not count.
    let draining = drain.is_some() && !resets();
    finish_bodies.store(draining, Relaxed);
    stop.store(true, Relaxed);
    let _ = stop_tx.send(true);
    let got = bytes.load(Relaxed);
    let (wall, wall_with_ramp) = (t1.elapsed(), t0.elapsed());
    let CpuSpent { client: cpu, link: link_cpu } = cpu0.spent();
    // Workers notice `stop` at their next chunk; one blocked on a first byte is aborted
    // (and one still draining its body after the grace).
    let stopped = Instant::now();
    let grace = tokio::time::sleep(drain.filter(|_| draining).unwrap_or(Duration::from_secs(2)));
    tokio::pin!(grace);
    let mut out = PullResult {
        bytes: got - before,
        wall,
        bytes_with_ramp: got,
        wall_with_ramp,
        objects: 0,
        errors: 0,
        samples: Vec::new(),
        cpu,
        link_cpu,
        connections_opened: 0,
        requests_sent: 0,
        first_byte_ms: Vec::new(),
        omit,
        omit_capped,
        first_body_byte,
        drain: Duration::ZERO,
        drain_cut: false,
    };
    loop {
        tokio::select! {
            r = set.join_next() => match r {
                Some(Ok((o, e, s, fb))) => {
                    out.objects += o;
                    out.errors += e;
                    out.samples.extend(s.into_iter().take(5usize.saturating_sub(out.samples.len())));
                    out.first_byte_ms.extend(fb);
                }
                Some(Err(_)) => {}
                None => break,
            },
            _ = &mut grace => {
                out.drain_cut = draining;
                set.abort_all();
                while set.join_next().await.is_some() {}
                break;
            }
        }
    }
    out.drain = stopped.elapsed();
    let st = client.transport().stats();
    out.connections_opened = st.connections_opened - st0.connections_opened;
    out.requests_sent = st.requests_sent - st0.requests_sent;
    out
}

/// What a whole-object pull (the peers' operation) measured.
struct WholePull {
    bytes: u64,
    /// From the first request to the last body byte (client construction outside).
    wall: Duration,
    objects: u64,
    errors: u64,
    samples: Vec<String>,
    cpu: Duration,
    link_cpu: Duration,
    connections_opened: u64,
}

/// GETs every key of `keys` whole, `concurrency` in flight, on `client` (new, so cold):
/// the peers' `get_many` as driver.py times it (from the first request to the last byte).
async fn pull_whole(client: &S3Client, keys: &[(String, u64)], concurrency: usize) -> WholePull {
    use futures_util::StreamExt;
    let st0 = client.transport().stats();
    let (cpu0, t0) = (CpuMark::now(), Instant::now());
    let results: Vec<Result<u64, String>> = futures_util::stream::iter(keys.iter().map(|(key, size)| {
        let (c, obj, size) = (client.clone(), ObjectRef::new(BUCKET, key.clone()), *size);
        async move {
            let got: Result<u64> = async {
                let mut out = c.get_object(&obj, GetParams::default()).await?;
                let mut n = 0u64;
                while let Some(chunk) = out.body.chunk().await {
                    n += chunk?.len() as u64;
                }
                Ok(n)
            }
            .await;
            match got {
                Ok(n) if n == size => Ok(n),
                Ok(n) => Err(format!("GET {obj}: {n} bytes, expected {size}")),
                Err(e) => Err(format!("GET {obj}: {e:#}")),
            }
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .collect()
    .await;
    let wall = t0.elapsed();
    let spent = cpu0.spent();
    let st = client.transport().stats();
    let mut out = WholePull {
        bytes: 0,
        wall,
        objects: 0,
        errors: 0,
        samples: Vec::new(),
        cpu: spent.client,
        link_cpu: spent.link,
        connections_opened: st.connections_opened - st0.connections_opened,
    };
    for r in results {
        match r {
            Ok(n) => {
                out.bytes += n;
                out.objects += 1;
            }
            Err(e) => {
                out.errors += 1;
                if out.samples.len() < 5 {
                    out.samples.push(e);
                }
            }
        }
    }
    out
}

/// The share of iperf3 over the same time from its start, from its cumulative bytes every
/// [`RAMP_SAMPLE`]: the reference of a whole-object pull of `wall_s` seconds.
fn iperf3_same_time(series: &[u64], wall_s: f64) -> Option<f64> {
    if series.is_empty() || wall_s.is_nan() || wall_s <= 0.0 {
        return None;
    }
    let steps = RAMP_SAMPLE.as_secs_f64();
    let i = ((wall_s / steps).round() as usize).clamp(1, series.len());
    Some(series[i - 1] as f64 / (i as f64 * steps))
}

/// A certificate for `ip` (PEM files in `dir`): the server's `--cert/--key`, the client's
/// CA file (a self-signed leaf is its own trust anchor).
fn certificate(ip: &str, dir: &std::path::Path) -> Result<(PathBuf, PathBuf)> {
    let cert = rcgen::generate_simple_self_signed(vec![ip.to_owned()]).context("generating a certificate")?;
    let id = std::process::id();
    let (c, k) = (dir.join(format!("ferry-bulk-wan-{id}.crt")), dir.join(format!("ferry-bulk-wan-{id}.key")));
    std::fs::write(&c, cert.cert.pem()).with_context(|| format!("writing {}", c.display()))?;
    std::fs::write(&k, cert.key_pair.serialize_pem()).with_context(|| format!("writing {}", k.display()))?;
    Ok((c, k))
}

pub fn params_json(p: &BulkWanParams, sizes: &[u64], link: &str) -> Map<String, Value> {
    let sp = Spread::of(&sizes.iter().map(|&s| s as f64).collect::<Vec<_>>());
    json!({
        "link": link,
        "mean_bytes": p.mean_bytes,
        "sd_fraction": p.sd_fraction,
        "seed": p.seed,
        "objects": p.objects,
        "sizes_median_bytes": sp.map(|s| s.median),
        "sizes_min_bytes": sp.map(|s| s.min),
        "sizes_max_bytes": sp.map(|s| s.max),
        "concurrency_points": p.concurrency,
        "run_seconds": p.run_seconds,
        "tls": true,
        "verify": "default GetParams (checksum mode on)",
        "key_layout": "synthetic/bulk-wan/size=N/obj-NNNNN",
        "omit_seconds": p.omit_seconds,
        "window": "bytes_per_s: bytes received within run_seconds after omit_seconds of warm-up; bytes_per_s_with_ramp: from the start",
    })
    .as_object()
    .cloned()
    .unwrap_or_default()
}

/// Runs the sweep: one TLS server, then for each repeat and each concurrency point the
/// ferry clients and iperf3, interleaved.
pub fn run(size: Size, p: &BulkWanParams, opts: &RunOptions) -> Result<Outcome> {
    let mut session = crate::runner::Session::open("bulk-wan", opts)?;
    let link = opts.link.as_deref();
    let host = link.map(|l| l.server_ip().to_string()).unwrap_or_else(|| "127.0.0.1".into());
    let (cert, key) = certificate(&host, &opts.log_dir)?;
    let args: Vec<String> =
        ["--addr", "127.0.0.1:0", "--memory", "--anonymous", "--profile", "lan", "--h2", "on", "--tls", "--cert"]
            .iter()
            .map(|s| s.to_string())
            .chain([cert.display().to_string(), "--key".into(), key.display().to_string()])
            .collect();
    session.say(&format!("bulk-wan: starting ferry serve --tls on link {}", opts.link_name()));
    // Started from this (the main) thread: PR_SET_PDEATHSIG follows the thread.
    let mut server = ServerProcess::start(&opts.server, &args, opts.server_lifetime, &opts.log_dir)
        .context("starting the TLS server")?;
    let _ = std::fs::remove_file(&key);
    // Threads and child processes from here on start in the client namespace.
    let _client_ns = link.map(|l| l.enter_client()).transpose()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;

    let sizes = object_sizes(p.objects.max(1), p.mean_bytes, p.sd_fraction, p.seed);
    let keys: Arc<Vec<(String, u64)>> = Arc::new(object_keys(&sizes).into_iter().zip(sizes.iter().copied()).collect());
    // The peers' objects: `concurrency` whole objects a run, of their own mean size.
    let peer_n = p.concurrency.iter().copied().max().unwrap_or(1).max(1);
    let peer_keys: Vec<(String, u64)> =
        if p.peer_mean_bytes == p.mean_bytes || !p.peers.iter().any(|x| PEERS.contains(x)) {
            keys.iter().cloned().collect()
        } else {
            let ps = object_sizes(peer_n, p.peer_mean_bytes, p.sd_fraction, p.seed + 1);
            peer_object_keys(&ps).into_iter().zip(ps).collect()
        };
    let warm_keys: Vec<(String, u64)> =
        keys.iter().chain(peer_keys.iter().filter(|k| !keys.contains(k))).cloned().collect();
    // Warm: one HEAD per object, so the server's per-key CRC (computed on first access,
    // cached) is ready for every row alike rather than charged to whichever row comes first.
    session.say(&format!("bulk-wan: warming {} objects (HEAD each)", warm_keys.len()));
    let warm = S3Client::builder(server.url.clone())
        .region("us-east-1")
        .credentials(CredentialsSource::Anonymous)
        .ca_file(&cert)
        .mode(Mode::H1Pool)
        .max_connections(WARM_CONNECTIONS)
        .build()?;
    rt.block_on(async {
        let stream = futures_util::stream::iter(warm_keys.iter().map(|(k, _)| {
            let (c, obj) = (warm.clone(), ObjectRef::new(BUCKET, k.clone()));
            async move { c.head_object(&obj).await.with_context(|| format!("HEAD {obj}")) }
        }));
        let results: Vec<Result<_>> =
            futures_util::StreamExt::collect(futures_util::StreamExt::buffer_unordered(stream, WARM_CONNECTIONS)).await;
        results.into_iter().try_for_each(|r| r.map(|_| ()))
    })?;
    drop(warm);
    let mut params = params_json(p, &sizes, opts.link_name());
    // Warm clients: the server's side keeps its congestion window over the idle time
    // between a client's rows (Linux otherwise restarts from the initial window after an
    // RTO of idleness, RFC 5681 section 4.1); per namespace, gone with the link.
    if p.warm_clients {
        let set = match link {
            Some(l) => std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    l.server_namespace(),
                    "sysctl",
                    "-q",
                    "-w",
                    "net.ipv4.tcp_slow_start_after_idle=0",
                ])
                .status()
                .map_err(anyhow::Error::from)
                .and_then(|st| {
                    if st.success() {
                        Ok("0 (server namespace)")
                    } else {
                        Err(anyhow::anyhow!("sysctl exited with {st}"))
                    }
                }),
            None => Ok("host default (no link)"),
        };
        params.insert(
            "server_tcp_slow_start_after_idle".into(),
            json!(set.context("setting tcp_slow_start_after_idle in the server namespace")?),
        );
    }
    if peer_keys.len() != keys.len() || p.peer_mean_bytes != p.mean_bytes {
        params.insert("peer_mean_bytes".into(), json!(p.peer_mean_bytes));
        params.insert("peer_bytes".into(), json!(peer_keys.iter().take(peer_n).map(|(_, s)| s).sum::<u64>()));
    }
    let server_json = json!({"label": "lan+tls", "args": server.args, "banner": server.banner});
    let repeats = p.repeats.max(1);
    let window = Duration::from_secs_f64(p.run_seconds.max(0.1));
    let omit = Duration::from_secs(p.omit_seconds as u64);
    // Warm clients, by (mode, concurrency), kept across repeats.
    let mut clients: Vec<WarmClient> = Vec::new();
    // iperf3's cumulative bytes every 100 ms of the current repeat and point (the peers'
    // same-time reference).
    let mut iperf3_series: Vec<u64> = Vec::new();
    for k in 1..=repeats {
        for &c in &p.concurrency {
            let mut rows: Vec<Option<Mode>> = p.modes.iter().copied().map(Some).collect();
            if p.iperf3 && (k == 1 || !p.iperf3_once) {
                rows.push(None);
            }
            for row in rows {
                let label = row.map(|m| mode_name(m).to_owned()).unwrap_or_else(|| iperf3_label(c));
                session.say(&format!("bulk-wan · concurrency {c} · {label} · repeat {k} of {repeats}"));
                let mut rec = RunRecord {
                    workload: "bulk-wan".into(),
                    size: size.name().into(),
                    mode: row.map(mode_name).unwrap_or("iperf3").into(),
                    variant: label.clone(),
                    repeat: k,
                    repeats,
                    status: "ok".into(),
                    profile: Some("lan".into()),
                    params: params.clone(),
                    ..RunRecord::default()
                };
                rec.params.insert("concurrency".into(), json!(c));
                let link0 = link.map(|l| l.stats());
                match row {
                    Some(mode) => {
                        rec.server = Some(server_json.clone());
                        rec.client = Some(json!({"mode": mode_name(mode), "max_connections": c, "tls": true}));
                        if !server.alive() {
                            anyhow::bail!("the TLS server died (log: {})", server.log.display());
                        }
                        let build = || -> Result<WarmClient> {
                            if !p.warm_clients {
                                let client = S3Client::builder(server.url.clone())
                                    .region("us-east-1")
                                    .credentials(CredentialsSource::Anonymous)
                                    .ca_file(&cert)
                                    .mode(mode)
                                    .max_connections(c.max(1))
                                    .build()?;
                                return Ok(WarmClient { id: (mode, c), client, auto: None });
                            }
                            // A warm client's idle connections outlive a round of the
                            // other rows (~30 s, the transport's default idle time-out).
                            let config = ferry_store::ClientConfig::new(&server.url)?;
                            let mut tc = ferry_wire::TransportConfig::new(config.endpoint.clone());
                            tc.mode = mode;
                            tc.max_connections = c.max(1);
                            tc.ca_file = Some(cert.clone());
                            tc.idle_timeout = WARM_IDLE_TIMEOUT;
                            // auto is kept as itself, to ask which protocol it chose.
                            let (transport, auto): (Arc<dyn ferry_wire::Transport>, _) = if mode == Mode::Auto {
                                let a = Arc::new(ferry_wire::auto::AutoTransport::new(tc)?);
                                (a.clone(), Some(a))
                            } else {
                                (ferry_wire::transport(tc)?, None)
                            };
                            Ok(WarmClient { id: (mode, c), client: S3Client::with_transport(transport, config), auto })
                        };
                        // The server's CPU and the machine's over the pull (server_cpu.rs):
                        // with the delay line on the same two cores, what is left for it.
                        let cpu_before = crate::server_cpu::Sample::take(server.pid());
                        let r = if p.warm_clients {
                            let warm = clients.iter().position(|w| w.id == (mode, c));
                            let wc = match warm {
                                Some(i) => &clients[i],
                                None => {
                                    clients.push(build()?);
                                    clients.last().expect("just pushed")
                                }
                            };
                            rec.set("warm_connections", u32::from(warm.is_some()));
                            let (o, w) = if warm.is_some() { (p.warm_omit, Warmup::Fixed) } else { (omit, p.warmup) };
                            let r = rt.block_on(pull(
                                &wc.client,
                                keys.clone(),
                                c,
                                o,
                                w,
                                window,
                                Some(p.drain_grace),
                                &|| wc.speaks_h2(),
                            ));
                            rec.set("bodies_reset_at_window_end", u32::from(wc.speaks_h2()));
                            r
                        } else {
                            let wc = build()?;
                            let r =
                                rt.block_on(pull(&wc.client, keys.clone(), c, omit, p.warmup, window, None, &|| false));
                            drop(wc);
                            r
                        };
                        // Per GiB of the window's bytes, as the client's, when recorded (record.rs).
                        if let (Some(b), Some(a)) = (cpu_before, crate::server_cpu::Sample::take(server.pid())) {
                            a.since(&b).record_into(&mut rec);
                        }
                        let secs = r.wall.as_secs_f64();
                        rec.set("bytes", r.bytes as f64);
                        rec.set("wall_s", secs);
                        rec.set("bytes_per_s", r.bytes as f64 / secs);
                        rec.set("bits_per_second", r.bytes as f64 * 8.0 / secs);
                        rec.set("omit_s", r.omit.as_secs_f64());
                        rec.set("drain_s", r.drain.as_secs_f64());
                        if r.drain_cut {
                            rec.set("drain_cut", 1u32);
                        }
                        let cold = rec.figure("warm_connections") != Some(1.0);
                        rec.set("warmup_measured", u32::from(p.warmup == Warmup::Measured && cold));
                        if p.warmup == Warmup::Measured && cold {
                            rec.set("warmup_capped", u32::from(r.omit_capped));
                        }
                        if let Some(t) = r.first_body_byte {
                            rec.set("first_body_byte_s", t.as_secs_f64());
                        }
                        // On warm connections there is no ramp to count.
                        if cold {
                            rec.set("bytes_with_ramp", r.bytes_with_ramp as f64);
                            rec.set("wall_with_ramp_s", r.wall_with_ramp.as_secs_f64());
                            rec.set("bytes_per_s_with_ramp", r.bytes_with_ramp as f64 / r.wall_with_ramp.as_secs_f64());
                        }
                        // A warm row opens no connection: its figure is per connection of the client.
                        let conns = if cold {
                            r.connections_opened
                        } else {
                            clients
                                .iter()
                                .find(|w| w.id == (mode, c))
                                .map_or(0, |w| w.client.transport().stats().connections_opened)
                        };
                        if conns > 0 {
                            rec.set("bytes_per_s_per_connection", r.bytes as f64 / secs / conns as f64);
                            if cold {
                                rec.set(
                                    "bytes_per_s_per_connection_with_ramp",
                                    r.bytes_with_ramp as f64 / r.wall_with_ramp.as_secs_f64() / conns as f64,
                                );
                            }
                        }
                        rec.set("connections_used", conns as f64);
                        rec.set("objects_completed", r.objects as f64);
                        rec.set("errors", r.errors as f64);
                        rec.set("connections_opened", r.connections_opened as f64);
                        rec.set("requests_sent", r.requests_sent as f64);
                        rec.set("client_cpu_s", r.cpu.as_secs_f64());
                        if link.is_some() {
                            rec.set("link_cpu_s", r.link_cpu.as_secs_f64());
                        }
                        if r.bytes > 0 {
                            rec.set(
                                "client_cpu_s_per_gib",
                                r.cpu.as_secs_f64() / (r.bytes as f64 / (1u64 << 30) as f64),
                            );
                        }
                        let mut fb = r.first_byte_ms;
                        let ps = crate::stats::percentiles(&mut fb, &[50.0, 99.0]);
                        if let Some(v) = ps[0] {
                            rec.set("first_byte_p50_ms", v);
                        }
                        if let Some(v) = ps[1] {
                            rec.set("first_byte_p99_ms", v);
                        }
                        rec.error_samples = r.samples;
                        if r.errors > 0 {
                            rec.status = "errors".into();
                        }
                        if r.bytes == 0 {
                            // Nothing in the counted window is a result to explain, never a 0 MB/s row.
                            rec.status = "errors".into();
                            rec.error_samples.push(format!(
                                "no bytes in the counted window ({} requests sent, {} connections, first body byte {}, {} bytes during the warm-up)",
                                r.requests_sent,
                                r.connections_opened,
                                r.first_body_byte.map_or("never".to_string(), |t| format!("at {:.2} s", t.as_secs_f64())),
                                r.bytes_with_ramp,
                            ));
                        }
                    }
                    None => {
                        rec.client = Some(json!({"tool": "iperf3", "streams": c.min(process::IPERF3_MAX_STREAMS)}));
                        if c > process::IPERF3_MAX_STREAMS {
                            rec.note = Some(format!("iperf3 allows at most -P {}", process::IPERF3_MAX_STREAMS));
                        }
                        let run = match p.iperf3_warmup {
                            Warmup::Fixed => process::Iperf3Run {
                                streams: c,
                                seconds: (p.run_seconds.ceil() as u32).max(1),
                                omit: p.omit_seconds,
                                reverse: true,
                                interval_ms: None,
                            },
                            Warmup::Measured => process::Iperf3Run {
                                streams: c,
                                seconds: p.iperf3_seconds,
                                omit: 0,
                                reverse: true,
                                interval_ms: Some(RAMP_SAMPLE.as_millis() as u32),
                            },
                        };
                        rec.note =
                            Some(format!("`iperf3 -c {host} {}`: the server sends, as in a GET", run.args().join(" ")));
                        let cpu0 = CpuMark::now();
                        let machine0 = crate::server_cpu::Sample::machine();
                        let result = process::iperf3_run(link, &run, opts.server_lifetime);
                        crate::server_cpu::Sample::machine().since(&machine0).record_into(&mut rec);
                        if link.is_some() {
                            rec.set("link_cpu_s", cpu0.spent().link.as_secs_f64());
                        }
                        match result {
                            Ok(r) if r.absent => {
                                rec.status = "absent".into();
                                rec.note = Some("iperf3: absent (scripts/setup.sh installs it)".into());
                            }
                            Ok(mut r) => {
                                iperf3_series = r
                                    .intervals
                                    .iter()
                                    .scan(0.0, |acc, (_, b)| {
                                        *acc += b;
                                        Some(*acc as u64)
                                    })
                                    .collect();
                                rec.set("seconds", r.seconds);
                                rec.set("omit_s", r.omit_seconds);
                                if p.iperf3_warmup == Warmup::Measured {
                                    // The ferry rows' rule on iperf3's 100 ms intervals.
                                    match measured_window(&r.intervals, p.omit_seconds as f64, p.run_seconds) {
                                        Some(w) => {
                                            r.bits_per_second = w.bytes * 8.0 / w.seconds;
                                            rec.set("omit_s", w.omit_s);
                                            rec.set("warmup_measured", 1u32);
                                            rec.set("warmup_capped", u32::from(w.capped));
                                            rec.set("window_s", w.seconds);
                                        }
                                        None => {
                                            rec.status = "failed".into();
                                            rec.error_samples.push(format!(
                                                "iperf3 reported {} intervals: too few for a warm-up and a {} s window",
                                                r.intervals.len(),
                                                p.run_seconds
                                            ));
                                        }
                                    }
                                }
                                rec.set("bits_per_second", r.bits_per_second);
                                rec.set("bytes_per_s", r.bits_per_second / 8.0);
                                if let Some(v) = r.bits_per_second_with_ramp {
                                    rec.set("bytes_per_s_with_ramp", v / 8.0);
                                    rec.set("bytes_per_s_per_connection_with_ramp", v / 8.0 / r.streams as f64);
                                }
                                rec.set("bytes_per_s_per_connection", r.bits_per_second / 8.0 / r.streams as f64);
                                rec.set("connections_opened", r.streams as f64);
                                rec.set("connections_used", r.streams as f64);
                                if let Some(v) = r.retransmits {
                                    rec.set("retransmits", v);
                                }
                                if let Some(v) = r.cpu_host_pct {
                                    rec.set("iperf3_cpu_host_pct", v);
                                }
                                if let Some(v) = r.cpu_remote_pct {
                                    rec.set("iperf3_cpu_remote_pct", v);
                                }
                                rec.set("errors", 0u32);
                            }
                            Err(e) => {
                                rec.status = "failed".into();
                                rec.error_samples.push(format!("{e:#}"));
                            }
                        }
                    }
                }
                if let (Some(a), Some(l)) = (link0, link) {
                    link_figures(&mut rec, &a, &l.stats());
                }
                session.record(rec)?;
            }
            // The peers at this point: whole objects, `c` of them with `c` in flight (they
            // have no time window), over the same TLS server and link; with `peers_once`,
            // in the first repeat only.
            let peer_repeats = if p.peers_once { 1 } else { repeats };
            let peers_here = p.peers.iter().any(|x| PEERS.contains(x)) && k <= peer_repeats;
            if p.same_pull && peers_here {
                session.say(&format!("bulk-wan · concurrency {c} · {SAME_PULL_ROW} · repeat {k} of {peer_repeats}"));
                let n = c.max(1).min(peer_keys.len());
                let mut rec = RunRecord {
                    workload: "bulk-wan".into(),
                    size: size.name().into(),
                    mode: mode_name(Mode::H1Pool).into(),
                    variant: SAME_PULL_ROW.into(),
                    repeat: k,
                    repeats: peer_repeats,
                    status: "ok".into(),
                    profile: Some("lan".into()),
                    params: params.clone(),
                    server: Some(server_json.clone()),
                    client: Some(json!({"mode": mode_name(Mode::H1Pool), "max_connections": c, "tls": true, "cold": true})),
                    note: Some(format!("the peers' pull: a new ferry h1-pool client, {n} whole objects with {c} in flight, timed from the first request to the last byte")),
                    ..RunRecord::default()
                };
                rec.params.insert("concurrency".into(), json!(c));
                let link0 = link.map(|l| l.stats());
                let client = S3Client::builder(server.url.clone())
                    .region("us-east-1")
                    .credentials(CredentialsSource::Anonymous)
                    .ca_file(&cert)
                    .mode(Mode::H1Pool)
                    .max_connections(c.max(1))
                    .build()?;
                let r = rt.block_on(pull_whole(&client, &peer_keys[..n], c));
                drop(client);
                same_pull_record(&mut rec, &r, link.is_some(), &iperf3_series);
                if let (Some(a), Some(l)) = (link0, link) {
                    link_figures(&mut rec, &a, &l.stats());
                }
                session.record(rec)?;
            }
            for peer in p.peers.iter().copied().filter(|x| PEERS.contains(x) && k <= peer_repeats) {
                session.say(&format!("bulk-wan · concurrency {c} · {} · repeat {k} of {peer_repeats}", peer.name()));
                let n = c.max(1).min(peer_keys.len());
                let op = crate::peers::PeerOp::GetMany {
                    bucket: BUCKET.into(),
                    keys: peer_keys.iter().take(n).map(|(k, _)| k.clone()).collect(),
                    object_size: None,
                    concurrency: c.max(1),
                };
                let endpoint = crate::peers::Endpoint {
                    url: server.url.clone(),
                    region: "us-east-1".into(),
                    credentials: None,
                    ca_bundle: Some(cert.clone()),
                };
                let mut rec = RunRecord {
                    workload: "bulk-wan".into(),
                    size: size.name().into(),
                    variant: peer.name().into(),
                    repeat: k,
                    repeats: peer_repeats,
                    status: "ok".into(),
                    profile: Some("lan".into()),
                    params: params.clone(),
                    server: Some(server_json.clone()),
                    note: Some(match crate::peers::available(peer) {
                        Ok(i) => format!(
                            "{} {}: {}; whole objects ({n}), not a time window",
                            peer.name(),
                            i.version,
                            peer.how(&op)
                        ),
                        Err(reason) => format!("absent: {reason}"),
                    }),
                    ..RunRecord::default()
                };
                rec.params.insert("concurrency".into(), json!(c));
                let want: u64 = peer_keys.iter().take(n).map(|(_, s)| s).sum();
                let scrape = || {
                    let read = || crate::peers::ServerCounters::scrape(&endpoint.url, endpoint.ca_bundle.as_deref());
                    match link {
                        // From the server's namespace: the link's address is local there.
                        Some(l) => l.in_server(read).ok().flatten(),
                        None => read(),
                    }
                };
                let r = crate::peers::run_scraped(peer, &endpoint, &op, opts.run_timeout, &scrape);
                r.record_into(&mut rec);
                if let Some(o) = rec.figure("objects") {
                    rec.set("objects_completed", o);
                }
                // A peer's whole run is its ramp-up and its transfer: no counted window.
                // Its connections are the server's count around the run (peers.rs scrapes
                // /_ferry/metrics over TLS), so its per-connection figure is with ramp too.
                if let Some(v) = rec.figure("bytes_per_s") {
                    rec.set("bytes_per_s_with_ramp", v);
                    if let Some(n) = rec.figure("connections_opened").filter(|n| *n > 0.0) {
                        rec.set("bytes_per_s_per_connection_with_ramp", v / n);
                        rec.set("connections_used", n);
                    }
                }
                // iperf3 of this repeat over the same time from its start (its first
                // `wall_s` seconds), the peer's reference: a short pull is mostly ramp.
                if let Some(v) = rec.figure("wall_s").and_then(|t| iperf3_same_time(&iperf3_series, t)) {
                    rec.set("iperf3_same_time_bytes_per_s", v);
                }
                if rec.status == "ok" && rec.figure("bytes") != Some(want as f64) {
                    rec.status = "errors".into();
                    rec.error_samples.push(format!(
                        "{} moved {:?} bytes, expected {want}",
                        peer.name(),
                        rec.figure("bytes")
                    ));
                }
                session.record(rec)?;
            }
        }
    }
    drop(rt);
    drop(server);
    let _ = std::fs::remove_file(&cert);
    let report = render(size, p, opts, &session.records, &session.ctx);
    Ok(session.finish(report))
}

/// The figures of a [`SAME_PULL_ROW`] record, named as a peer's: a whole run, so only
/// "with ramp" figures (no counted window, no `bytes_per_s`).
fn same_pull_record(rec: &mut RunRecord, r: &WholePull, on_link: bool, iperf3_series: &[u64]) {
    let secs = r.wall.as_secs_f64();
    rec.set("bytes", r.bytes as f64);
    rec.set("wall_s", secs);
    rec.set("objects", r.objects as f64);
    rec.set("objects_completed", r.objects as f64);
    rec.set("errors", r.errors as f64);
    rec.set("client_cpu_s", r.cpu.as_secs_f64());
    if on_link {
        rec.set("link_cpu_s", r.link_cpu.as_secs_f64());
    }
    rec.set("connections_opened", r.connections_opened as f64);
    rec.set("connections_used", r.connections_opened as f64);
    if secs > 0.0 && r.bytes > 0 {
        rec.set("bytes_per_s_with_ramp", r.bytes as f64 / secs);
        if r.connections_opened > 0 {
            rec.set("bytes_per_s_per_connection_with_ramp", r.bytes as f64 / secs / r.connections_opened as f64);
        }
    }
    if let Some(v) = iperf3_same_time(iperf3_series, secs) {
        rec.set("iperf3_same_time_bytes_per_s", v);
    }
    rec.error_samples = r.samples.clone();
    if r.errors > 0 || r.bytes == 0 {
        rec.status = "errors".into();
    }
}

/// What the link did during one run: drops at its queue (both directions), and the
/// data direction's (server to client) packets, whose mean size shows whether the TUN
/// devices still pass 64 KiB GSO segments under this load.
fn link_figures(rec: &mut RunRecord, a: &ferry_link::LinkStats, b: &ferry_link::LinkStats) {
    let d = |x: &ferry_link::DirCounts, y: &ferry_link::DirCounts| {
        (y.packets - x.packets, y.bytes - x.bytes, y.dropped - x.dropped)
    };
    let (c_pk, _, c_drop) = d(&a.client_to_server, &b.client_to_server);
    let (s_pk, s_bytes, s_drop) = d(&a.server_to_client, &b.server_to_client);
    rec.set("link_drops", (c_drop + s_drop) as f64);
    let dev = |x: &ferry_link::LinkStats| x.client_device.tx_dropped + x.server_device.tx_dropped;
    rec.set("link_device_drops", dev(b).saturating_sub(dev(a)) as f64);
    rec.set("link_s2c_packets", s_pk as f64);
    rec.set("link_c2s_packets", c_pk as f64);
    if s_pk > 0 {
        rec.set("link_s2c_mean_packet_bytes", s_bytes as f64 / s_pk as f64);
    }
}

/// Each peer's whole-run MB/s over ferry's on the same pull in the same repeat (median
/// and range of the paired ratios, at the largest concurrency both ran); `None` without
/// a clean [`SAME_PULL_ROW`] record.
pub fn peers_against_same_pull(records: &[RunRecord]) -> Option<String> {
    let conc = |r: &RunRecord| r.params.get("concurrency").and_then(Value::as_u64);
    let c = records.iter().filter(|r| r.variant == SAME_PULL_ROW && r.status == "ok").filter_map(conc).max()?;
    let at: Vec<RunRecord> = records.iter().filter(|r| conc(r) == Some(c)).cloned().collect();
    let ferry = Spread::of(
        &at.iter()
            .filter(|r| r.variant == SAME_PULL_ROW && r.status == "ok")
            .filter_map(|r| r.figure("bytes_per_s_with_ramp"))
            .collect::<Vec<_>>(),
    )?;
    let parts: Vec<String> = PEERS
        .iter()
        .filter_map(|peer| {
            let ratios =
                crate::record::per_repeat_ratios(&at, peer.name(), SAME_PULL_ROW, "bytes_per_s_with_ramp", |r| {
                    r.status == "ok"
                });
            let sp = Spread::of(&ratios)?;
            Some(if sp.n > 1 {
                format!("{} {:.2}x ({:.2}-{:.2})", peer.name(), sp.median, sp.min, sp.max)
            } else {
                format!("{} {:.2}x", peer.name(), sp.median)
            })
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    Some(format!("peers on their own pull against ferry h1-pool on the same pull (`{SAME_PULL_ROW}`: a new client, the same whole objects, {c} in flight, {:.0} MB/s, timed from the first request like a peer; same repeat): {}", ferry.median / 1e6, parts.join(", ")))
}

/// The Markdown report: one row per (concurrency, client), medians over repeats, each
/// ferry row as a share of the iperf3 row of the same point and repeat.
pub fn render(size: Size, p: &BulkWanParams, opts: &RunOptions, records: &[RunRecord], ctx: &RunContext) -> String {
    let mut s = String::new();
    let repeats = p.repeats.max(1);
    let link = match &opts.link {
        Some(l) => l.preset().to_string(),
        None => "none (loopback)".into(),
    };
    crate::report::heading(&mut s, "bulk-wan", size, repeats, "", ctx);
    let _ = writeln!(
        s,
        "link: {link} · objects ~ Normal({} MiB, {:.0}% sd), seed {} · HTTPS (ferry serve --tls, lan profile) · {} s warm-up{} + {} s counted per run\n",
        p.mean_bytes >> 20,
        p.sd_fraction * 100.0,
        p.seed,
        p.omit_seconds,
        if p.warmup == Warmup::Measured { " at most (ferry rows: until the rate stops growing)" } else { "" },
        p.run_seconds,
    );
    let _ = writeln!(s, "| concurrency | client | MB/s | per connection MB/s | % of iperf3 (same point) | MB/s with ramp | % of iperf3 with ramp | connections | objects done | first byte p50 ms | warm-up s | client CPU s | client CPU s / GiB | server CPU s | server CPU s / GiB | link CPU s | machine busy % | link drops queue / device | s2c mean packet KiB | errors |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &c in &p.concurrency {
        let at: Vec<&RunRecord> =
            records.iter().filter(|r| r.params.get("concurrency").and_then(Value::as_u64) == Some(c as u64)).collect();
        let mut labels: Vec<&str> = Vec::new();
        for r in &at {
            if !labels.contains(&r.variant.as_str()) {
                labels.push(&r.variant);
            }
        }
        let ceiling = iperf3_label(c);
        for l in labels {
            let rs: Vec<&RunRecord> = at.iter().copied().filter(|r| r.variant == l && r.status != "absent").collect();
            if rs.is_empty() {
                let _ = writeln!(s, "| {c} | {l} | absent | | | | | | | | | | | | | | | | | |");
                continue;
            }
            // A peer, or ferry on a peer's pull: whole runs, no counted window.
            let peer = PEERS.iter().any(|x| x.name() == l) || l == SAME_PULL_ROW;
            let share = |figure: &str| {
                if l == ceiling {
                    return "100%".to_string();
                }
                let r: Vec<f64> = rs
                    .iter()
                    .filter_map(|a| {
                        // A peer's whole run against iperf3's first as many seconds.
                        if let (true, Some(v)) = (peer, a.figure("iperf3_same_time_bytes_per_s")) {
                            return Some(a.figure(figure)? / Some(v).filter(|v| *v > 0.0)? * 100.0);
                        }
                        let b = ceiling_for(&at, &ceiling, a.repeat)?;
                        Some(a.figure(figure)? / b.figure(figure).filter(|v| *v > 0.0)? * 100.0)
                    })
                    .collect();
                match Spread::of(&r) {
                    Some(sp) if sp.n > 1 => format!("{:.0}% ({:.0}-{:.0})", sp.median, sp.min, sp.max),
                    Some(sp) => format!("{:.0}%", sp.median),
                    None => "-".into(),
                }
            };
            // A peer has no counted window: its figures are whole runs, ramp included.
            let (mbs, steady_share) = if peer {
                ("-".to_string(), "-".to_string())
            } else {
                (cell(&rs, "bytes_per_s", 1e-6, 0), share("bytes_per_s"))
            };
            let per_conn = if peer {
                match cell(&rs, "bytes_per_s_per_connection_with_ramp", 1e-6, 1) {
                    c if c == "-" => c,
                    c => format!("{c} (with ramp)"),
                }
            } else {
                cell(&rs, "bytes_per_s_per_connection", 1e-6, 1)
            };
            let drops = format!("{} / {}", cell(&rs, "link_drops", 1.0, 0), cell(&rs, "link_device_drops", 1.0, 0));
            let _ = writeln!(
                s,
                "| {c} | {l} | {mbs} | {per_conn} | {steady_share} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {drops} | {} | {} |",
                cell(&rs, "bytes_per_s_with_ramp", 1e-6, 0),
                share("bytes_per_s_with_ramp"),
                if rs.iter().any(|r| r.figure("connections_used").is_some()) { cell(&rs, "connections_used", 1.0, 0) } else { cell(&rs, "connections_opened", 1.0, 0) },
                cell(&rs, "objects_completed", 1.0, 0),
                cell(&rs, "first_byte_p50_ms", 1.0, 0),
                if peer { "-".to_string() } else { cell(&rs, "omit_s", 1.0, 1) },
                cell(&rs, "client_cpu_s", 1.0, 2),
                cell(&rs, crate::record::CPU_PER_GIB, 1.0, 2),
                cell(&rs, "server_cpu_s", 1.0, 2),
                cell(&rs, crate::record::SERVER_CPU_PER_GIB, 1.0, 2),
                cell(&rs, "link_cpu_s", 1.0, 2),
                cell(&rs, "machine_busy", 100.0, 0),
                cell(&rs, "link_s2c_mean_packet_bytes", 1.0 / 1024.0, 1),
                cell(&rs, "errors", 1.0, 0),
            );
        }
    }
    let _ = writeln!(s, "\n- published: {PUBLISHED}");
    let iperf3_how = match p.iperf3_warmup {
        Warmup::Fixed => format!("`-O {} -t {} -R`", p.omit_seconds, p.run_seconds),
        Warmup::Measured => format!(
            "`-t {} -i 0.1 -R`{}, the same rule applied to its 100 ms intervals, its best window after it",
            p.iperf3_seconds,
            if p.iperf3_once && p.repeats > 1 {
                " once, in the first repeat, every repeat's rows held against it"
            } else {
                ""
            }
        ),
    };
    let _ = writeln!(
        s,
        "- MB/s: bytes received in a {} s window that opens after the warm-up (TLS handshakes, slow start: {}), the same window length for every client and iperf3 ({iperf3_how}: plain TCP on the same link, the server sending); MB/s with ramp: from the first byte of the run, warm-up included.",
        p.run_seconds,
        match p.warmup {
            Warmup::Fixed => format!("{} s", p.omit_seconds),
            Warmup::Measured => format!("it ends when the receive rate over 300 ms grew less than 15% over the 300 ms before, after 0.7 s and at most {} s (the warm-up s column)", p.omit_seconds),
        },
    );
    if p.warm_clients {
        let _ = writeln!(
            s,
            "- warm clients: each ferry client is built once; its repeat-1 row pays handshakes and slow start (the warm-up above; its MB/s with ramp is that row's), its later rows run on the same open connections after {} ms (the server's namespace keeps the congestion window over idle time: tcp_slow_start_after_idle=0); an HTTP/1.1 row ends by finishing its bodies in flight, uncounted, an h2 row (h2, auto on h2) by resetting their streams (the connections stay). connections: the client's; TCP connections opened by a warm row: 0. So iperf3 and every ferry row's repeat 1 are measured alike (the first window after their own cold ramp), ferry's repeats 2-3 on kept connections; iperf3 cannot keep connections.",
            p.warm_omit.as_millis()
        );
    }
    let _ = writeln!(s, "- client CPU: this process less the delay line's threads, warm-up included; server CPU: ferry serve's process over the same pull (TLS, HTTP, the bodies), read from /proc; link CPU: the delay line's threads (copies, and the receiving kernel's TCP work done in their writes); machine busy: every core's busy share over the pull (iperf3: over its run), so what client, server and link left each other; link drops: packets (up to 64 KiB each) the link's queue model dropped during the run / the kernel dropped at a full TUN ring (the delay line's reader fell behind); s2c mean packet: what the delay line read per packet in the data's direction.");
    let _ = writeln!(s, "- per connection: the aggregate over TCP connections opened (h2 decides its own count up to the concurrency; iperf3: its -P streams; peers: the server's count, their whole-run MB/s, marked \"with ramp\"); `bytes_per_s_per_connection_with_ramp` in every record is the same from the first byte.");
    if opts.link.is_none() {
        let _ = writeln!(s, "- link none: loopback, no delay; this is not the transatlantic result.");
    }
    if p.peers.iter().any(|x| PEERS.contains(x)) {
        let _ = writeln!(s, "- peer rows (boto3, awscrt, s5cmd, rclone){}: at each point `concurrency` whole objects ({}) with as many in flight, MB/s = bytes / the peer's time from its first request (TLS handshakes and slow start inside; for s5cmd and rclone their process start too), so only its \"with ramp\" figure exists, held against iperf3's over the same time from its start (iperf3's clock starts once its TCP connections are up: the share is a floor) and, below, against ferry h1-pool on the same pull; its connections are the server's counters (/_ferry/metrics, read over TLS) before and after the run.", if p.peers_once && p.repeats > 1 { ", run once (first repeat)" } else { "" }, if p.peer_mean_bytes == p.mean_bytes { "the rows' objects".to_string() } else { format!("their own, ~ Normal({} MiB, {:.0}% sd)", p.peer_mean_bytes >> 20, p.sd_fraction * 100.0) });
    }
    if let Some(line) = peers_against_same_pull(records) {
        let _ = writeln!(s, "- {line}");
    }
    let bad: Vec<&RunRecord> = records.iter().filter(|r| r.status != "ok" && r.status != "absent").collect();
    if !bad.is_empty() {
        let _ = writeln!(s, "\nRuns that were not clean:");
        for r in bad {
            let _ = writeln!(
                s,
                "- concurrency {} {} repeat {}: {} {}",
                r.params.get("concurrency").unwrap_or(&Value::Null),
                r.variant,
                r.repeat,
                r.status,
                r.error_samples.first().map(String::as_str).unwrap_or("")
            );
        }
    }
    s
}

/// The claims table's row for `bulk-wan`: each ferry row's MB/s as a share of iperf3's at the sweep's top point (baseline only).
pub fn claim(records: &[RunRecord]) -> Headline {
    let h = |published: &str, measured: String, verdict: &str| Headline::new("bulk-wan", published, measured, verdict);
    #[allow(unused)]
    let none = || "no paired clean runs".to_string();
    // At the largest concurrency iperf3 ran: each ferry client's bytes/s over iperf3's
    // of the same repeat (paired ratios: median and range), h2 over h1-pool, and the
    // peers over ferry on their own pull.
    let published = PUBLISHED;
    let conc = |r: &RunRecord| r.params.get("concurrency").and_then(serde_json::Value::as_u64);
    let top = records.iter().filter(|r| r.mode == "iperf3" && r.status == "ok").filter_map(conc).max();
    let Some(c) = top else { return h(published, none(), "baseline only") };
    let at: Vec<RunRecord> = records.iter().filter(|r| conc(r) == Some(c)).cloned().collect();
    let ceiling = at.iter().find(|r| r.mode == "iperf3").map(|r| r.variant.clone()).unwrap_or_default();
    let pct = |s: &Spread| {
        if s.n > 1 {
            format!("{:.0}% ({:.0}-{:.0})", s.median * 100.0, s.min * 100.0, s.max * 100.0)
        } else {
            format!("{:.0}%", s.median * 100.0)
        }
    };
    // Each repeat's rows over the ceiling of that repeat, or over iperf3's only run
    // (quick runs it once: bulk_wan::ceiling_for).
    let refs: Vec<&RunRecord> = at.iter().collect();
    let shares: Vec<String> = ["h1-pool", "h2", "auto"]
        .iter()
        .filter_map(|m| {
            Spread::of(&shares_of_ceiling(&refs, m, &ceiling, "bytes_per_s")).map(|s| format!("{m} {}", pct(&s)))
        })
        .collect();
    if shares.is_empty() {
        return h(published, none(), "baseline only");
    }
    let iperf3 = median(&at, &ceiling, "bytes_per_s").unwrap_or(0.0);
    let once = at.iter().filter(|r| r.variant == ceiling && r.status == "ok").count() == 1 && repeats_of(&at) > 1;
    let link = records
        .iter()
        .find_map(|r| r.params.get("link").and_then(serde_json::Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "none".into());
    let warm = at.iter().any(|r| r.figure("warm_connections") == Some(1.0));
    let how = if warm {
        "iperf3 and each ferry client's repeat 1 counted after their own ramp (one rule), its later repeats on kept connections"
    } else {
        "every row counted after its warm-up"
    };
    // A ceiling under the rows it bounds (iperf3's streams lost to their own loss
    // recoveries in that repeat) makes a share over 100% that is no gain: say so.
    let mut repeats: Vec<usize> = at
        .iter()
        .filter(|r| ["h1-pool", "h2", "auto"].contains(&r.variant.as_str()) && r.status == "ok")
        .map(|r| r.repeat)
        .collect();
    repeats.sort_unstable();
    repeats.dedup();
    let under = repeats
        .iter()
        .filter(|&&k| {
            let Some(i3) = ceiling_for(&refs, &ceiling, k).and_then(|r| r.figure("bytes_per_s")) else {
                return false;
            };
            at.iter().any(|r| {
                r.repeat == k
                    && r.status == "ok"
                    && ["h1-pool", "h2", "auto"].contains(&r.variant.as_str())
                    && r.figure("bytes_per_s").is_some_and(|v| v > i3)
            })
        })
        .count();
    let under = if under > 0 {
        format!("; iperf3 under a ferry row in {under} of {} repeats (its retransmits and the link's drops say why): a share over 100% there is a weak ceiling, not a gain", repeats.len())
    } else {
        String::new()
    };
    let h2 = paired_ratio(&at, "h2", "h1-pool", "bytes_per_s")
        .map(|s| format!("; h2 / h1-pool {}", x2(&s)))
        .unwrap_or_default();
    let peers = peers_against_same_pull(&at).map(|l| format!("; {l}")).unwrap_or_default();
    h(
        published,
        format!(
            "at {c} streams, MB/s over iperf3 -P {c}'s {} ({:.0} MB/s, link {link}; {how}): {}{under}{h2}{peers}",
            if once { "(run once, the first repeat; every repeat held against it)" } else { "in the same repeat" },
            iperf3 / 1e6,
            shares.join(", ")
        ),
        "baseline only",
    )
}

/// `bulk-wan` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "bulk-wan",
    quick: "16 streams, objects ~ Normal(32 MiB, 20% sd), 1.5 s counted windows, TLS, transatlantic link",
    full: "1 to 256 streams, objects ~ Normal(128 MiB, 20% sd), 10 s counted windows, TLS, transatlantic link",
    peers: &PEERS,
    in_suite: true,
    default_link: Some("transatlantic"),
    run: crate::workload::run_defaults::<BulkWanParams>,
    claim,
};

// Across the emulated link when the options carry one (`ferry bench all` brings up the
// transatlantic link for it as root), else on loopback.
crate::impl_params!(BulkWanParams, |size, p, o| run(size, p, o));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_spent_since_a_mark_is_the_client_s_apart_from_the_link_s() {
        let mark = CpuMark::now();
        // Work on this thread until getrusage has seen 20 ms of it.
        let mut x = 0u64;
        while sys::cpu_time().saturating_sub(mark.client) < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let spent = mark.spent();
        assert!(spent.client >= Duration::from_millis(20), "{spent:?}");
        // No delay line runs in this test process: the link's share stays apart, at 0.
        assert_eq!(spent.link, Duration::ZERO);
        assert!(CpuMark::now().spent().client < Duration::from_millis(20), "a new mark counts from itself");
    }

    #[test]
    fn sizes_are_seeded_normal_with_the_asked_mean_and_sd() {
        let mean = 64u64 << 20;
        let a = object_sizes(10_000, mean, 0.2, 7);
        assert_eq!(a, object_sizes(10_000, mean, 0.2, 7), "same seed, same sizes");
        assert_ne!(a, object_sizes(10_000, mean, 0.2, 8), "another seed, other sizes");
        let n = a.len() as f64;
        let m = a.iter().map(|&x| x as f64).sum::<f64>() / n;
        let sd = (a.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        // The sample mean's sd is 0.2 x mean / 100 here: 1% is 5 of them.
        assert!((m / mean as f64 - 1.0).abs() < 0.01, "sample mean {m} vs {mean}");
        assert!((sd / mean as f64 - 0.2).abs() < 0.01, "sample sd {sd} vs 20% of {mean}");
        assert!(a.iter().all(|&x| x >= 1));
        assert!(a.iter().any(|&x| x > mean) && a.iter().any(|&x| x < mean), "sizes spread on both sides");
    }

    #[test]
    fn keys_carry_their_size() {
        let k = object_keys(&[10, 2048]);
        assert_eq!(k, vec!["bulk-wan/size=10/obj-00000".to_string(), "bulk-wan/size=2048/obj-00001".to_string()]);
    }

    #[test]
    fn quick_is_a_few_points_repeated_and_full_sweeps_1_to_256() {
        let q = BulkWanParams::new(Size::Quick);
        let f = BulkWanParams::new(Size::Full);
        assert_eq!(q.concurrency, [16], "quick: the claim's point, many streams");
        assert!(q.peers_once && q.same_pull, "quick: the peers once, beside ferry on their pull");
        assert!(q.repeats >= 3 && f.repeats >= 3);
        // Timed seconds at most: cold ferry rows (warm-up cap + window) in repeat 1, warm
        // ones after, iperf3's runs. Under a minute leaves ~25 s for set-up, drains,
        // iperf3's connections and the peers.
        let cold = q.modes.len() as f64 * (q.omit_seconds as f64 + q.run_seconds);
        let warm = (q.modes.len() * (q.repeats - 1)) as f64 * (q.warm_omit.as_secs_f64() + q.run_seconds);
        let iperf3 = ((if q.iperf3_once { 1 } else { q.repeats }) as u32 * q.iperf3_seconds) as f64;
        assert!(cold + warm + iperf3 <= 35.0, "{cold} + {warm} + {iperf3}");
        // iperf3's run leaves at least half a window after a ramp that reaches the cap
        // (measured_window's condition for a figure), and a full one after a 1.5 s ramp.
        assert_eq!(q.iperf3_warmup, Warmup::Measured);
        assert!(q.iperf3_seconds as f64 - q.omit_seconds as f64 >= q.run_seconds / 2.0);
        assert!(q.iperf3_seconds as f64 - 1.5 > q.run_seconds, "more than one window to pick the best of");
        assert!(q.drain_grace <= Duration::from_secs(5), "a stuck drain costs a row seconds, not ten");
        assert!(
            q.warm_clients && !f.warm_clients,
            "quick keeps its clients' connections warm; full starts each row cold"
        );
        assert!(q.peer_mean_bytes < q.mean_bytes && f.peer_mean_bytes == f.mean_bytes);
        assert!(
            q.omit_seconds >= 1 && f.omit_seconds >= q.omit_seconds,
            "slow start is left out of the counted window"
        );
        assert_eq!(f.concurrency.first(), Some(&1));
        assert_eq!(f.concurrency.last(), Some(&256));
        assert!(f.concurrency.windows(2).all(|w| w[1] == 2 * w[0]), "powers of two");
        assert!(!f.peers_once);
        assert!(q.iperf3_once && !f.iperf3_once, "quick: one long iperf3 run; full: one a repeat");
    }

    #[test]
    fn every_repeat_is_held_against_its_ceiling_or_the_only_one() {
        let rec = |variant: &str, repeat: usize, v: f64| {
            let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
            r.set("bytes_per_s", v);
            r
        };
        let i3 = iperf3_label(16);
        // iperf3 once (repeat 1): both h1-pool repeats over it.
        let once = [rec(&i3, 1, 1000.0), rec("h1-pool", 1, 600.0), rec("h1-pool", 2, 400.0)];
        let at: Vec<&RunRecord> = once.iter().collect();
        assert_eq!(ceiling_for(&at, &i3, 2).map(|r| r.repeat), Some(1));
        assert_eq!(shares_of_ceiling(&at, "h1-pool", &i3, "bytes_per_s"), [0.6, 0.4]);
        // iperf3 in each repeat: each over its own; a repeat whose iperf3 is missing while
        // others ran has no ceiling (no guess among several).
        let each = [
            rec(&i3, 1, 1000.0),
            rec(&i3, 2, 500.0),
            rec("h1-pool", 1, 600.0),
            rec("h1-pool", 2, 400.0),
            rec("h1-pool", 3, 300.0),
        ];
        let at: Vec<&RunRecord> = each.iter().collect();
        assert_eq!(shares_of_ceiling(&at, "h1-pool", &i3, "bytes_per_s"), [0.6, 0.8]);
        assert!(ceiling_for(&at, &i3, 3).is_none());
        // A failed iperf3 run is no ceiling.
        let mut failed = rec(&i3, 1, 1000.0);
        failed.status = "errors".into();
        let rows = [failed, rec("h1-pool", 1, 600.0)];
        let at: Vec<&RunRecord> = rows.iter().collect();
        assert!(shares_of_ceiling(&at, "h1-pool", &i3, "bytes_per_s").is_empty());
    }

    #[test]
    fn iperf3_window_follows_the_ramp_rule() {
        // 100 ms intervals doubling to a plateau at interval 10, then flat.
        let mut iv = Vec::new();
        let mut rate = 1000.0;
        for _ in 0..40 {
            iv.push((0.1, rate));
            rate = f64::min(rate * 2.0, 512_000.0);
        }
        let w = measured_window(&iv, 3.0, 1.5).unwrap();
        // The rule ends where ramp_ended does on the cumulative series.
        let cumulative: Vec<u64> = iv
            .iter()
            .scan(0.0, |a, (_, b)| {
                *a += b;
                Some(*a as u64)
            })
            .collect();
        let n = (1..=cumulative.len()).find(|&n| ramp_ended(&cumulative[..n])).unwrap();
        assert!((w.omit_s - n as f64 * 0.1).abs() < 1e-9 && !w.capped);
        assert_eq!(w.bytes, 15.0 * 512_000.0, "15 flat intervals counted");
        assert!((w.seconds - 1.5).abs() < 1e-9);
        // Still doubling at the cap: capped, and the best window after it is the last.
        let growing: Vec<(f64, f64)> = (0..40).map(|i| (0.1, 2f64.powi(i))).collect();
        let w = measured_window(&growing, 1.0, 1.0).unwrap();
        assert!(w.capped && (w.omit_s - 1.0).abs() < 1e-9);
        assert_eq!(w.bytes, (30..40).map(|i| 2f64.powi(i)).sum::<f64>());
        // A dip after the warm-up (a loss recovery) is not the window: the best one is.
        let mut dipped = iv.clone();
        for d in dipped.iter_mut().skip(n).take(5) {
            d.1 = 1000.0;
        }
        let w = measured_window(&dipped, 3.0, 1.5).unwrap();
        assert_eq!(w.bytes, 15.0 * 512_000.0, "the 15 flat intervals after the dip");
        // Too few intervals after the warm-up for half a window: no figure.
        assert_eq!(measured_window(&growing[..12], 1.0, 1.0), None);
    }

    fn rec(variant: &str, repeat: usize, figure: &str, v: f64) -> RunRecord {
        let mut r = RunRecord {
            workload: "bulk-wan".into(),
            variant: variant.into(),
            repeat,
            status: "ok".into(),
            ..RunRecord::default()
        };
        r.params.insert("concurrency".into(), json!(16));
        r.set(figure, v);
        r
    }

    #[test]
    fn peers_are_held_against_ferry_on_their_pull_in_the_same_repeat() {
        let f = "bytes_per_s_with_ramp";
        let mut rs = vec![rec(SAME_PULL_ROW, 1, f, 80e6), rec("boto3", 1, f, 40e6), rec("awscrt", 1, f, 88e6)];
        // An unpaired peer run (no ferry row in repeat 2) and a failed one are left out.
        rs.push(rec("boto3", 2, f, 80e6));
        let mut bad = rec("s5cmd", 1, f, 80e6);
        bad.status = "errors".into();
        rs.push(bad);
        let line = peers_against_same_pull(&rs).unwrap();
        assert!(line.contains("80 MB/s"), "{line}");
        assert!(line.ends_with("boto3 0.50x, awscrt 1.10x"), "{line}");
        // Without a clean ferry row there is nothing to hold them against.
        rs.retain(|r| r.variant != SAME_PULL_ROW);
        assert_eq!(peers_against_same_pull(&rs), None);
    }

    #[test]
    fn iperf3_same_time_reads_its_cumulative_series() {
        // 10 MB every 100 ms: 100 MB/s whatever the span, clamped to the run.
        let series: Vec<u64> = (1..=30).map(|i| i * 10_000_000).collect();
        assert_eq!(iperf3_same_time(&series, 1.5), Some(100e6));
        assert_eq!(iperf3_same_time(&series, 9.0), Some(100e6));
        assert_eq!(iperf3_same_time(&series, 0.01), Some(100e6));
        assert_eq!(iperf3_same_time(&[], 1.0), None);
        assert_eq!(iperf3_same_time(&series, 0.0), None);
    }

    /// Cumulative bytes every RAMP_SAMPLE of a rate that doubles each step up to `cap`
    /// bytes per step, after `silent` steps with nothing.
    fn ramp(silent: usize, steps: usize, cap: u64) -> Vec<u64> {
        let (mut total, mut rate, mut out) = (0u64, 1_000u64, Vec::new());
        for i in 0..steps {
            if i >= silent {
                total += rate;
                rate = (rate * 2).min(cap);
            }
            out.push(total);
        }
        out
    }

    #[test]
    fn ramp_ends_on_a_plateau_and_not_before() {
        // Still doubling: never over, however long.
        for n in 0..30 {
            assert!(!ramp_ended(&ramp(2, n, u64::MAX)), "doubling after {n} samples");
        }
        // Doubling to a cap at step 10 (1,000 x 2^9 per step), then flat: the ramp ends
        // once two spans of the flat rate are in, and not before.
        let series = ramp(0, 40, 512_000);
        let first = (1..=series.len()).find(|&n| ramp_ended(&series[..n])).expect("a plateau ends the ramp");
        assert_eq!(first, 10 + 2 * RAMP_SPAN - 1, "two flat spans after the cap");
        // Nothing received: never over (the caller's cap ends the warm-up).
        assert!(!ramp_ended(&[0; 50]));
        // A flat rate from the start still waits for RAMP_MIN.
        let flat: Vec<u64> = (1..=50).map(|i| i * 1000).collect();
        let first = (1..=flat.len()).find(|&n| ramp_ended(&flat[..n])).unwrap();
        assert!(RAMP_SAMPLE * first as u32 >= RAMP_MIN);
        // A falling rate has stopped growing too.
        let falling = [0, 8000, 16000, 24000, 32000, 36000, 40000, 44000];
        assert!(ramp_ended(&falling));
    }

    fn claim_rec(variant: &str, repeat: usize, figure: &str, v: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set(figure, v);
        r
    }

    #[test]
    fn bulk_wan_shares_are_paired_by_repeat_at_the_top_point() {
        let mut rs = Vec::new();
        // iperf3 1000 then 500 MB/s; h1-pool 600 then 400; h2 300 then 300.
        for (k, i3, h1, h2) in [(1, 1000e6, 600e6, 300e6), (2, 500e6, 400e6, 300e6)] {
            for (variant, mode, v) in [("iperf3 -P 16", "iperf3", i3), ("h1-pool", "h1-pool", h1), ("h2", "h2", h2)] {
                let mut r = claim_rec(variant, k, "bytes_per_s", v);
                r.mode = mode.into();
                r.params.insert("concurrency".into(), serde_json::json!(16));
                r.params.insert("link".into(), serde_json::json!("transatlantic"));
                rs.push(r);
            }
        }
        let h = claim(&rs);
        assert_eq!(h.verdict, "baseline only");
        // Paired: 60% and 80% (median 70%), not 500 / 750 of the medians (67%).
        assert!(h.measured.contains("h1-pool 70% (60-80)"), "{}", h.measured);
        assert!(h.measured.contains("h2 45% (30-60)"), "{}", h.measured);
        assert!(h.measured.contains("h2 / h1-pool 0.62x (0.50-0.75)"), "{}", h.measured);
        assert!(h.measured.contains("at 16 streams") && h.measured.contains("link transatlantic"), "{}", h.measured);
        assert!(!h.measured.contains("iperf3 under a ferry row"), "{}", h.measured);
        assert_eq!(claim(&[]).verdict, "baseline only");
        // Repeat 2's iperf3 below h1-pool: said, with the count.
        let i3 = rs.iter_mut().find(|r| r.variant == "iperf3 -P 16" && r.repeat == 2).unwrap();
        i3.set("bytes_per_s", 350e6);
        let h = claim(&rs);
        assert!(h.measured.contains("iperf3 under a ferry row in 1 of 2 repeats"), "{}", h.measured);
        // iperf3 run once (quick): every repeat's rows held against that one run.
        rs.retain(|r| !(r.variant == "iperf3 -P 16" && r.repeat == 2));
        for r in rs.iter_mut() {
            r.repeats = 2;
        }
        let h = claim(&rs);
        // h1-pool 600 and 400 over 1000: 60% and 40%; h2 300 twice: 30%.
        assert!(h.measured.contains("h1-pool 50% (40-60)"), "{}", h.measured);
        assert!(h.measured.contains("h2 30% (30-30)"), "{}", h.measured);
        assert!(
            h.measured.contains("(run once, the first repeat; every repeat held against it) (1000 MB/s"),
            "{}",
            h.measured
        );
        assert!(!h.measured.contains("iperf3 under a ferry row"), "{}", h.measured);
    }
}
