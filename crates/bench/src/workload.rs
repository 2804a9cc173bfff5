//! Workloads as data: what servers to start, what to put in them first, which client
//! variants to run, how many times, how the table looks and which claim it is held
//! against. The runner (runner.rs) knows how to execute each [`Task`]; a workload only
//! declares. [`WorkloadDef`] is a workload as the suite's table holds it: its name, sizes,
//! peers, run and claim.
//!
//! Adding a workload of docs/lab/README.md section 4 means one file: its parameters, a
//! constructor of a [`Workload`] (when it needs its own step, a
//! [`crate::scenario::Scenario`] type), its claim, its `WORKLOAD` value; then one line in
//! suite.rs. A workload of scenario rows starts from [`Workload::scenario`] and its servers
//! from [`ServerSpec::profile`] / [`ServerSpec::s3_h2`]; its table ends with the shared
//! [`Column::CONNECTIONS_OPENED`], [`Column::CLIENT_CPU`], [`Column::CPU_PER_REQUEST`] and
//! [`Column::ERRORS`]. This
//! module names no workload.

use ferry_store::Mode;
use serde_json::{Map, Value};

/// The published size or the `--quick` one (under a minute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Quick,
    Full,
}

impl Size {
    pub fn name(self) -> &'static str {
        match self {
            Size::Quick => "quick",
            Size::Full => "full",
        }
    }
}

/// One `ferry serve` subprocess: its emulation profile and extra flags (the runner adds
/// `--addr 127.0.0.1:0 --memory`).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSpec {
    /// Short name in reports: "s3", "s3+h2", "lan".
    pub label: &'static str,
    pub profile: &'static str,
    pub extra_args: Vec<String>,
    /// Whether requests are signed (false: the server runs with `--anonymous`).
    pub signed: bool,
}

impl ServerSpec {
    /// A signing server of `profile`, labelled by it ("s3", "gcs", ...).
    pub fn profile(profile: &'static str) -> ServerSpec {
        ServerSpec { label: profile, profile, extra_args: vec![], signed: true }
    }

    /// The s3 profile with HTTP/2 on (`--h2 on`), labelled "s3+h2": the s3 profile alone
    /// speaks HTTP/1.1 only, like AWS S3.
    pub fn s3_h2() -> ServerSpec {
        ServerSpec { label: "s3+h2", profile: "s3", extra_args: vec!["--h2".into(), "on".into()], signed: true }
    }

    /// The flags after `ferry serve`.
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> =
            ["--addr", "127.0.0.1:0", "--memory", "--profile", self.profile].iter().map(|s| s.to_string()).collect();
        if !self.signed {
            a.push("--anonymous".into());
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }
}

/// The emulation profiles of `ferry serve` (crates/server, config.rs) a workload's servers
/// can be moved to with [`Workload::on_profile`].
pub const PROFILES: &[&str] = &["lan", "s3", "gcs", "azure"];

impl ServerSpec {
    /// This server on `profile` instead of its own, its flags kept: the label follows
    /// where it named the profile ("s3" becomes "gcs", "s3+h2" becomes "gcs+h2").
    pub fn on_profile(&self, profile: &'static str) -> ServerSpec {
        let label = if self.label == self.profile {
            profile
        } else if self.extra_args.iter().any(|a| a == "--h2") {
            match profile {
                "lan" => "lan+h2",
                "gcs" => "gcs+h2",
                "azure" => "azure+h2",
                _ => "s3+h2",
            }
        } else {
            self.label
        };
        ServerSpec { label, profile, ..self.clone() }
    }
}

/// How a ferry client is built for one variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientSpec {
    pub mode: Mode,
    pub max_connections: usize,
    pub pipeline_depth: usize,
}

impl ClientSpec {
    pub fn mode_name(&self) -> &'static str {
        mode_name(self.mode)
    }

    /// The same row on another HTTP/1.1 transport: pooled at depth 1, else pipelined up to
    /// [`MODE_ROWS_PIPELINE_DEPTH`] (auto's pipeline lane included).
    pub fn on(self, mode: Mode) -> ClientSpec {
        let pipeline_depth = if mode == Mode::H1Pool { 1 } else { MODE_ROWS_PIPELINE_DEPTH };
        ClientSpec { mode, pipeline_depth, ..self }
    }
}

/// A transport's name in row labels and records (`--mode`'s spelling).
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Auto => "auto",
        Mode::H1Pool => "h1-pool",
        Mode::H1Pipeline => "h1-pipeline",
        Mode::H2 => "h2",
    }
}

/// The HTTP/1.1 transports a workload repeats a ferry row on, so that the claims table
/// sets auto beside the best forced mode (claims.rs pairs rows whose labels differ only in
/// the mode's name: [`mode_row_label`]). h2 is not among them: the s3 profile, like S3,
/// offers HTTP/1.1 only, and an h2 row needs a second server (small-objects, mixed-hol).
pub const MODE_ROWS: [Mode; 3] = [Mode::H1Pool, Mode::H1Pipeline, Mode::Auto];

/// Requests per connection the pipelining mode rows may queue: small-objects' depth, so
/// the transport is the one that workload measures.
pub const MODE_ROWS_PIPELINE_DEPTH: usize = 32;

/// The label of `row` on the transport named `mode_name` ([`mode_name`] of one of
/// [`MODE_ROWS`]).
pub fn mode_row_label(mode_name: &str, row: &str) -> String {
    format!("{mode_name} · {row}")
}

/// Objects written before the timed runs, into every server of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct PutSetup {
    pub bucket: String,
    pub keys: Vec<String>,
    pub object_size: usize,
    /// PUTs in flight (one h1-pool client with this many connections).
    pub concurrency: usize,
}

/// What one variant does in one repeat.
#[derive(Clone, Debug, PartialEq)]
pub enum Task {
    /// GET every object of the [`PutSetup`], at most `in_flight` at once (a semaphore
    /// bounds the spawned tasks). `ranged`: each GET carries `Range: bytes=0-(size-1)`,
    /// which is what lets auto send it down the pipeline (wire's auto/mod.rs module note).
    /// `size_hint`: each GET carries `GetParams::size_hint` = the object's size, as a
    /// caller that listed first knows it; auto sends such GETs (<= 1 MiB) down its small
    /// lane, the other modes ignore it.
    GetAll { in_flight: usize, ranged: bool, size_hint: bool },
    /// One GET, body read chunk by chunk and dropped (like writing to /dev/null).
    /// `sample_rss`: sample the process's RSS while it runs.
    /// `verify`: default GetParams (checksum mode on, the body checked on the fly);
    /// false asks for no checksum, so only the length is checked.
    GetOne { bucket: String, key: String, bytes: u64, sample_rss: bool, verify: bool },
    /// iperf3 on loopback for `seconds`: the bytes ceiling.
    Iperf3 { seconds: u32 },
    /// A workload's own step (scenario.rs: mixed-hol, vectored, commit, ttfb-throughput,
    /// open-ahead): its setup runs once per server, its run fills the record.
    Scenario(crate::scenario::Step),
    /// A strategy the engine does not have yet: one record with status
    /// "not-implemented", the reason as its note, and no figures, so the gap shows. When
    /// the engine has it, the variant's task becomes a [`Task::Scenario`] calling it.
    NotYet { reason: String },
    /// A peer (boto3, s5cmd, ...) run through bench/peers/driver.py (peers.rs).
    /// `before`: objects PUT by ferry, untimed, before each run (what a delete consumes).
    Peer { peer: crate::peers::Peer, op: crate::peers::PeerOp, before: Option<PutSetup> },
    /// A request-rate tool (h2load, wrk) against the variant's server (ceilings.rs).
    RateCeiling(crate::ceilings::RateCeiling),
}

impl Task {
    /// The step whose setup the runner runs once per server before anything is timed: a
    /// scenario's own, or the one a peer op carries (parquet-scan's files, which only
    /// peer rows read).
    pub fn setup_step(&self) -> Option<&crate::scenario::Step> {
        match self {
            Task::Scenario(s) => Some(s),
            Task::Peer { op, .. } => op.setup_step(),
            _ => None,
        }
    }

    /// The scenario step of this task as its concrete type, when it is one (tests).
    pub fn step<T: crate::scenario::Scenario>(&self) -> Option<&T> {
        match self {
            Task::Scenario(s) => s.get::<T>(),
            _ => None,
        }
    }
}

/// One row of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    /// Row label, unique within the workload ("h1-pool", "h2 (s3+h2 server)").
    pub label: String,
    /// The record's `workload` (usually the workload's name; "rss-check" for that run).
    pub workload: &'static str,
    /// Index into [`Workload::servers`]; `None` for iperf3.
    pub server: Option<usize>,
    pub client: Option<ClientSpec>,
    pub task: Task,
    /// Shown under the table and kept in the record.
    pub note: Option<String>,
    /// Run once after all repeats instead of in every repeat.
    pub once: bool,
}

/// How results are summed up under the table.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// `numerator`'s objects/s over `denominator`'s, against a published range in percent.
    Speedup { numerator: String, denominator: String, published: &'static str },
    /// Each row's bytes/s as a share of the iperf3 row's, against a goal.
    ShareOfCeiling { ceiling: String, goal: &'static str },
}

/// Which table shape the report uses.
// PartialEq compares `Own` by address (see [`Workload`]).
#[allow(unpredictable_function_pointer_comparisons)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    Requests,
    Bytes,
    /// One row per variant, these columns (the newer workloads declare their own).
    Columns(&'static [Column]),
    /// The workload's own table and lines after the heading (listing: two figures share a
    /// cell); the report adds nothing after it.
    Own(fn(&Workload, &[crate::record::RunRecord]) -> String),
}

/// One column of a [`Shape::Columns`] table: the median (min-max) of `figure` x `scale`,
/// or, for a [`Column::ratio`], of the row's `figure` over a reference row's in the same
/// repeat.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Column {
    pub header: &'static str,
    pub figure: &'static str,
    pub scale: f64,
    pub digits: usize,
    /// `(suffix, reference)`: rows whose label ends with `suffix` show their per-repeat
    /// ratio to row `reference` (as `N.Nx`); other rows show `-`.
    pub ratio_to: Option<(&'static str, &'static str)>,
}

impl Column {
    /// The columns every scenario table ends with.
    pub const CONNECTIONS_OPENED: Column = Column::new("TCP conns opened", "connections_opened", 1.0, 0);
    pub const CLIENT_CPU: Column = Column::new("client CPU s", "client_cpu_s", 1.0, 2);
    /// CPU per request, every row alike (record.rs's `derive_cpu_rates`): ms per request.
    pub const CPU_PER_REQUEST: Column =
        Column::new("client CPU ms / request", crate::record::CPU_PER_1K_REQUESTS, 1.0, 3);
    /// CPU per GiB moved, every row alike: s per GiB.
    pub const CPU_PER_GIB: Column = Column::new("client CPU s / GiB", crate::record::CPU_PER_GIB, 1.0, 2);
    pub const ERRORS: Column = Column::new("errors", "errors", 1.0, 0);

    pub const fn new(header: &'static str, figure: &'static str, scale: f64, digits: usize) -> Column {
        Column { header, figure, scale, digits, ratio_to: None }
    }

    /// A column of per-repeat ratios: `figure` of each row ending with `suffix` over
    /// `figure` of row `reference` in the same repeat; the median (min-max) of those.
    pub const fn ratio(
        header: &'static str,
        figure: &'static str,
        suffix: &'static str,
        reference: &'static str,
        digits: usize,
    ) -> Column {
        Column { header, figure, scale: 1.0, digits, ratio_to: Some((suffix, reference)) }
    }
}

// PartialEq compares `headline` by address: tests compare workloads built twice by the same
// constructor, where the same function is the same pointer.
#[allow(unpredictable_function_pointer_comparisons)]
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub name: &'static str,
    pub size: Size,
    pub servers: Vec<ServerSpec>,
    pub setup: Option<PutSetup>,
    /// Objects to HEAD once per server before timing (warms server-side caches such as
    /// the synthetic bucket's CRC; not timed).
    pub warm: Vec<(usize, String, String)>,
    pub variants: Vec<Variant>,
    pub repeats: usize,
    /// Every parameter, written into every record.
    pub params: Map<String, Value>,
    pub shape: Shape,
    pub claims: Vec<Claim>,
    /// The workload's claims-table row, printed under a [`Shape::Columns`] table.
    pub headline: Option<ClaimFn>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

impl Workload {
    /// The same workload with every server on `profile` (`ferry bench WORKLOAD --profile
    /// NAME`): rows, sizes and claims unchanged; `params.profile_override` in every record
    /// and a note under the table say which profile ran in place of which.
    pub fn on_profile(&self, profile: &'static str) -> Workload {
        let mut own: Vec<&str> = self.servers.iter().map(|s| s.profile).collect();
        own.dedup();
        let mut w = self.clone();
        w.servers = self.servers.iter().map(|s| s.on_profile(profile)).collect();
        w.params.insert("profile_override".into(), Value::from(profile));
        w.notes.push(format!(
            "server profile: {profile} (--profile), in place of the workload's own ({}); row labels that name a profile name the workload's own.",
            own.join(", ")
        ));
        w
    }

    /// A workload of scenario rows (scenario.rs) reported in `columns`: no shared setup
    /// (each scenario sets itself up), nothing to warm, no generic claim and no headline
    /// (the workload sets `headline: Some(claim)`), `params` (a JSON object) written into
    /// every record. Notes and the headline follow with struct-update syntax.
    pub fn scenario(
        name: &'static str,
        size: Size,
        servers: Vec<ServerSpec>,
        variants: Vec<Variant>,
        repeats: usize,
        params: Value,
        columns: &'static [Column],
    ) -> Workload {
        Workload {
            name,
            size,
            servers,
            setup: None,
            warm: vec![],
            variants,
            repeats: repeats.max(1),
            params: params.as_object().cloned().unwrap_or_default(),
            shape: Shape::Columns(columns),
            claims: vec![],
            headline: None,
            notes: vec![],
        }
    }
}

/// Runs one workload at `size`, with `repeats` instead of its default when given.
/// Every workload's is [`run_defaults`] over its [`Params`].
pub type RunFn = fn(Size, Option<usize>, &crate::options::RunOptions) -> anyhow::Result<crate::options::Outcome>;

/// Reads a workload's records as one row of the claims table.
pub type ClaimFn = fn(&[crate::record::RunRecord]) -> crate::verdict::Headline;

/// One workload of the lab as a value: each workload file defines one (`WORKLOAD`) beside
/// its constructor, its run and its claim, and suite.rs registers them all in one table.
/// `ferry bench all` runs those `in_suite`, in the table's order, then reads each one's
/// claim; `ferry bench NAME` finds its entry by name.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadDef {
    pub name: &'static str,
    /// What the `--quick` size runs (under a minute) and what the full, published one does.
    pub quick: &'static str,
    pub full: &'static str,
    /// The peers it sets beside ferry's rows; `--peers` is narrowed to these.
    pub peers: &'static [crate::peers::Peer],
    /// Part of `ferry bench all`.
    pub in_suite: bool,
    /// The link it crosses unless `--link` says otherwise (bulk-wan: transatlantic).
    pub default_link: Option<&'static str>,
    pub run: RunFn,
    pub claim: ClaimFn,
}

impl WorkloadDef {
    /// The options' peers that this workload runs, in the options' order.
    pub fn peers_of(&self, o: &crate::options::RunOptions) -> Vec<crate::peers::Peer> {
        o.peers.iter().copied().filter(|p| self.peers.contains(p)).collect()
    }
}

/// A workload's parameters, stated once: its defaults at a size, the two things every run
/// sets on them (the repeats and the peers that the options name and the workload sets
/// beside ferry), and how a run goes from them (through the shared runner or, for
/// bulk-wan, cli-transfer and listing, the workload's own). [`run_defaults`] is the glue
/// that each workload's [`WorkloadDef::run`] used to repeat.
pub trait Params: Sized {
    /// The workload's entry in the suite (its peers).
    const WORKLOAD: &'static WorkloadDef;
    /// The defaults at `size`.
    fn defaults(size: Size) -> Self;
    /// The run's repeats and peers, as fields of the params.
    fn common(&mut self) -> (&mut usize, &mut Vec<crate::peers::Peer>);
    /// What else the run's options decide (mixed-hol: the link's preset); nothing by default.
    fn adopt(&mut self, _o: &crate::options::RunOptions) {}
    /// Runs the workload with these params.
    fn run(&self, size: Size, o: &crate::options::RunOptions) -> anyhow::Result<crate::options::Outcome>;
}

/// Runs workload `P` with its default parameters at `size` (`repeats` when given) and the
/// peers of `o` that it sets beside ferry: every [`WorkloadDef::run`].
pub fn run_defaults<P: Params>(
    size: Size,
    repeats: Option<usize>,
    o: &crate::options::RunOptions,
) -> anyhow::Result<crate::options::Outcome> {
    let mut p = P::defaults(size);
    let (r, peers) = p.common();
    *r = repeats.unwrap_or(*r);
    *peers = P::WORKLOAD.peers_of(o);
    p.adopt(o);
    p.run(size, o)
}

/// Implements [`Params`] for a workload's params type the usual way: defaults from
/// `TYPE::new(size)`, the run's repeats and peers in its fields `repeats` and `peers`,
/// the workload's entry its file's `WORKLOAD`, and the run the closure-like expression
/// (`|size, params, options| ...`). A workload whose options decide more writes the
/// impl itself (mixed-hol).
#[macro_export]
macro_rules! impl_params {
    ($ty:ty, |$size:ident, $p:ident, $o:ident| $run:expr) => {
        impl $crate::workload::Params for $ty {
            const WORKLOAD: &'static $crate::workload::WorkloadDef = &WORKLOAD;

            fn defaults(size: $crate::workload::Size) -> Self {
                <$ty>::new(size)
            }

            fn common(&mut self) -> (&mut usize, &mut Vec<$crate::peers::Peer>) {
                (&mut self.repeats, &mut self.peers)
            }

            fn run(
                &self,
                $size: $crate::workload::Size,
                $o: &$crate::options::RunOptions,
            ) -> anyhow::Result<$crate::options::Outcome> {
                let $p = self;
                $run
            }
        }
    };
}
