//! Workloads as data: what servers to start, what to put in them first, which client
//! variants to run, how many times, and which published claim the result is held against.
//! The runner (runner.rs) knows how to execute each [`Task`]; a workload only declares.
//!
//! Adding a workload of LAB.md section 4 means writing one constructor here (and, when it
//! needs a new kind of step, one [`Task`] arm in the runner). A workload of scenario rows
//! (scenario.rs) starts from [`Workload::scenario`] and its servers from
//! [`ServerSpec::profile`] / [`ServerSpec::s3_h2`]; its table ends with the shared
//! [`Column::CONNECTIONS_OPENED`], [`Column::CLIENT_CPU`] and [`Column::ERRORS`].

use ferry_store::Mode;
use serde_json::{json, Map, Value};

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

/// How a ferry client is built for one variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientSpec {
    pub mode: Mode,
    pub max_connections: usize,
    pub pipeline_depth: usize,
}

impl ClientSpec {
    pub fn mode_name(&self) -> &'static str {
        match self.mode {
            Mode::Auto => "auto",
            Mode::H1Pool => "h1-pool",
            Mode::H1Pipeline => "h1-pipeline",
            Mode::H2 => "h2",
        }
    }
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
    /// which is what lets auto send it down the pipeline (auto.rs module note).
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
    Scenario(crate::scenario::Scenario),
    /// A strategy the engine does not have yet (scheduler issue 5): one record with status
    /// "not-implemented", the reason as its note, and no figures, so the gap shows. When
    /// the engine has it, the variant's task becomes a [`Task::Scenario`] calling it.
    NotYet { reason: String },
    /// A peer (boto3, s5cmd, ...) run through bench/peers/driver.py (peers.rs).
    /// `before`: objects PUT by ferry, untimed, before each run (what a delete consumes).
    Peer { peer: crate::peers::Peer, op: crate::peers::PeerOp, before: Option<PutSetup> },
    /// A request-rate tool (h2load, wrk) against the variant's server (ceilings.rs).
    RateCeiling(crate::ceilings::RateCeiling),
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
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    Requests,
    Bytes,
    /// One row per variant, these columns (the newer workloads declare their own).
    Columns(&'static [Column]),
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
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

impl Workload {
    /// A workload of scenario rows (scenario.rs) reported in `columns`: no shared setup
    /// (each scenario sets itself up), nothing to warm, no generic claim (claims.rs holds
    /// its headline), `params` (a JSON object) written into every record. Notes follow
    /// with struct-update syntax.
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
            notes: vec![],
        }
    }
}

/// Parameters of `small-objects` (LAB.md section 4: gg/llama's pipelining result).
#[derive(Clone, Debug, PartialEq)]
pub struct SmallObjectsParams {
    pub objects: usize,
    pub object_size: usize,
    pub connections: usize,
    pub pipeline_depth: usize,
    pub repeats: usize,
    /// Keys are spread over this many prefixes, so the `s3` profile's per-prefix
    /// request-rate limit (5,500 GET/s, then 503 SlowDown) is not what is measured.
    pub prefixes: usize,
    pub put_concurrency: usize,
    /// Also run auto with ranged GETs (an extra row).
    pub auto_ranged: bool,
    /// Peer rows after ferry's, with `connections` GETs in flight (none by default; the
    /// CLI's `--peers` fills it).
    pub peers: Vec<crate::peers::Peer>,
    /// How many of the objects each peer row GETs (the first ones; at most `objects`).
    /// Quick: 256, 8 rounds of 32 in flight, so a peer's objects/s is past its first
    /// round (boto3 ~1 s a run at ~270 objects/s); at 2,000 boto3 and s5cmd took 11-17 s a
    /// run each, at 400 the peers were ~30 of the workload's 64 s. Full: all of them.
    pub peer_objects: usize,
    /// Ceiling rows (ceilings.rs): h2load and wrk against an anonymous twin of the s3
    /// server, and the C/L bound with C = `connections`.
    pub ceilings: bool,
}

impl SmallObjectsParams {
    pub fn new(size: Size) -> SmallObjectsParams {
        SmallObjectsParams {
            // Quick: 1,000 (2,000 until e5dba7e): h1-pool, the slowest ferry row, still runs
            // ~1.3 s a repeat (40 rounds of its 32 connections at ~33 ms), well past its
            // ramp; at 2,000 the workload took 64 s with peers at 3 repeats.
            objects: match size {
                Size::Quick => 1_000,
                Size::Full => 10_000,
            },
            object_size: 16 * 1024,
            connections: 32,
            pipeline_depth: 32,
            repeats: 3,
            prefixes: 16,
            put_concurrency: 64,
            auto_ranged: true,
            peers: Vec::new(),
            peer_objects: match size {
                Size::Quick => 256,
                Size::Full => 10_000,
            },
            ceilings: true,
        }
    }

    /// Requests in flight at most: every connection's pipeline full.
    pub fn in_flight(&self) -> usize {
        self.connections * self.pipeline_depth
    }
}

/// `small-objects/pNN/obj-NNNNNN`: object `i` in prefix `i % prefixes`, zero-padded so
/// keys sort in creation order within a prefix.
pub fn small_object_keys(objects: usize, prefixes: usize) -> Vec<String> {
    let prefixes = prefixes.max(1);
    (0..objects).map(|i| format!("small-objects/p{:02}/obj-{:06}", i % prefixes, i)).collect()
}

pub fn small_objects(size: Size, p: &SmallObjectsParams) -> Workload {
    let (s3, s3_h2) = (ServerSpec::profile("s3"), ServerSpec::s3_h2());
    let client = |mode| ClientSpec { mode, max_connections: p.connections, pipeline_depth: p.pipeline_depth };
    // auto's rows pass the size (as a caller that listed first would); the other modes
    // ignore the hint, so their rows go without it.
    let get = |ranged, size_hint| Task::GetAll { in_flight: p.in_flight(), ranged, size_hint };
    let v = |label: &str, server, mode, ranged, note: Option<&str>| Variant {
        label: label.into(),
        workload: "small-objects",
        server: Some(server),
        client: Some(client(mode)),
        task: get(ranged, mode == Mode::Auto && !ranged),
        note: note.map(str::to_owned),
        once: false,
    };
    let mut variants = vec![
        v("h1-pool", 0, Mode::H1Pool, false, None),
        v("h1-pipeline", 0, Mode::H1Pipeline, false, None),
        v("auto", 0, Mode::Auto, false, Some("GETs carry size_hint (the object's size, as after a listing): auto sends GETs of <= 1 MiB down its pipeline lane (auto.rs)")),
    ];
    if p.auto_ranged {
        variants.push(v(
            "auto, ranged GETs [extra]",
            0,
            Mode::Auto,
            true,
            Some("extra row: every GET carries Range: bytes=0-(size-1), which auto may pipeline; 206 bodies are not checksum-verified"),
        ));
    }
    variants.push(v(
        "h2 [extra: s3 --h2 on]",
        1,
        Mode::H2,
        false,
        Some("extra row: the s3 profile is HTTP/1.1 only, like AWS S3; this row ran against a second server, --profile s3 --h2 on"),
    ));
    let setup = PutSetup {
        bucket: "bench".into(),
        keys: small_object_keys(p.objects, p.prefixes),
        object_size: p.object_size,
        concurrency: p.put_concurrency,
    };
    let peer_setup =
        PutSetup { keys: setup.keys.iter().take(p.peer_objects.min(p.objects)).cloned().collect(), ..setup.clone() };
    let mut peer_rows = crate::peers::get_many_rows("small-objects", &p.peers, 0, &peer_setup, p.connections);
    if peer_setup.keys.len() < setup.keys.len() {
        for n in peer_rows.iter_mut().filter_map(|v| v.note.as_mut()).filter(|n| !n.starts_with("absent")) {
            n.push_str(&format!("; GETs the first {} of the {} objects, {} in flight (quick size: a peer run costs ~10x a ferry one), so objects/s compares, wall time does not", peer_setup.keys.len(), setup.keys.len(), p.connections));
        }
    }
    variants.extend(peer_rows);
    let mut servers = vec![s3, s3_h2];
    if p.ceilings {
        variants.extend(small_objects_ceilings(size, p, &setup));
        // h2load and wrk do not sign: the same profile, --anonymous, h2 on for h2load.
        servers.push(ServerSpec {
            label: "s3+h2 anonymous",
            profile: "s3",
            extra_args: vec!["--h2".into(), "on".into()],
            signed: false,
        });
    }
    let params = json!({
        "objects": p.objects,
        "object_size": p.object_size,
        "connections": p.connections,
        "pipeline_depth": p.pipeline_depth,
        "in_flight": p.in_flight(),
        "peer_objects": p.peer_objects.min(p.objects),
        "prefixes": p.prefixes,
        "put_concurrency": p.put_concurrency,
        "key_layout": "small-objects/pNN/obj-NNNNNN",
        "latency": "submit to end of body, including time queued in the client",
    });
    Workload {
        name: "small-objects",
        size,
        servers,
        setup: Some(setup),
        warm: vec![],
        variants,
        repeats: p.repeats.max(1),
        params: params.as_object().cloned().unwrap_or_default(),
        shape: Shape::Requests,
        claims: vec![
            Claim::Speedup { numerator: "h1-pipeline".into(), denominator: "h1-pool".into(), published: "pipelining +30-40% (gg/llama, real S3)" },
            Claim::Speedup { numerator: "auto".into(), denominator: "h1-pool".into(), published: "none (auto should match the better of pool and pipeline)" },
        ],
        notes: vec![
            "h2: not offered by the s3 profile (AWS S3 speaks HTTP/1.1 only); the h2 row is an extra, against --profile s3 --h2 on.".into(),
            format!(
                "latency: from submitting a GET to the end of its body, {} in flight at most, so it includes time queued in the client.",
                p.in_flight()
            ),
        ],
    }
}

/// Label of small-objects' C/L row.
pub const SMALL_OBJECTS_BOUND_ROW: &str = "bound: C/L (C = connections, L = first byte p50)";

/// small-objects' ceiling rows (ceilings.rs): h2load (h2c, `connections` x
/// `pipeline_depth` streams, the same number of GETs, one key per prefix round-robin) and
/// wrk (h1, `connections`, one key) against server 2 (the anonymous twin), and the C/L
/// bound from first-byte probes against server 0.
fn small_objects_ceilings(size: Size, p: &SmallObjectsParams, setup: &PutSetup) -> Vec<Variant> {
    let prefixes = p.prefixes.max(1).min(setup.keys.len());
    let paths: Vec<String> = setup.keys.iter().take(prefixes).map(|k| format!("/{}/{k}", setup.bucket)).collect();
    let rate = |tool| crate::ceilings::RateCeiling {
        tool,
        paths: paths.clone(),
        connections: p.connections,
        streams: p.pipeline_depth,
        requests: p.objects,
        // Quick: wrk runs for 1 s (3 until e5dba7e: 9 s of the workload): ~800
        // requests at the s3 profile's 30 ms over 32 connections, a steady rate after the
        // first round.
        seconds: match size {
            Size::Quick => 1,
            Size::Full => 10,
        },
        object_size: p.object_size as u64,
    };
    let row = |label: &str, server, client, task, note: &str| Variant {
        label: label.into(),
        workload: "small-objects",
        server: Some(server),
        client,
        task,
        note: Some(note.into()),
        once: false,
    };
    let probes = match size {
        Size::Quick => 20,
        Size::Full => 100,
    };
    vec![
        row(
            "ceiling: h2load (h2c) [s3 --h2 on, anonymous]",
            2,
            None,
            Task::RateCeiling(rate(crate::ceilings::RateTool::H2load)),
            "request-rate ceiling: nghttp2's h2load, the same GETs in flight as the pipeline rows, against an anonymous twin of the s3 server",
        ),
        row(
            "ceiling: wrk (h1) [s3, anonymous]",
            2,
            None,
            Task::RateCeiling(rate(crate::ceilings::RateTool::Wrk)),
            "request-rate ceiling for h1 without pipelining: wrk, the same connections as h1-pool, one key, against an anonymous twin of the s3 server",
        ),
        row(
            SMALL_OBJECTS_BOUND_ROW,
            0,
            Some(ClientSpec { mode: Mode::H1Pool, max_connections: 1, pipeline_depth: 1 }),
            Task::Scenario(crate::scenario::Scenario::LatencyBound(crate::ceilings::LatencyBoundRun {
                bucket: setup.bucket.clone(),
                key: setup.keys.first().cloned().unwrap_or_default(),
                object_size: p.object_size as u64,
                probes,
                concurrency: p.connections,
            })),
            "latency bound of a client with C requests in flight, no pipelining: C / L, L = median first byte of sequential GETs in this run (p50 column: L)",
        ),
    ]
}

/// Parameters of `bulk-get` (the client issue's bytes claim and its memory claim).
#[derive(Clone, Debug, PartialEq)]
pub struct BulkGetParams {
    /// Synthetic object size as written in the key ("1GiB").
    pub size_label: String,
    pub bytes: u64,
    pub repeats: usize,
    pub iperf3_seconds: u32,
    /// `Some((label, bytes))`: also download synthetic/<label>/x once with h1-pool and
    /// report the peak RSS.
    pub rss_check: Option<(String, u64)>,
    /// Peer rows (one GET each; none by default, the CLI's `--peers` fills it).
    pub peers: Vec<crate::peers::Peer>,
}

impl BulkGetParams {
    pub fn new(_size: Size) -> BulkGetParams {
        BulkGetParams {
            size_label: "1GiB".into(),
            bytes: 1 << 30,
            repeats: 3,
            iperf3_seconds: 3,
            rss_check: None,
            peers: Vec::new(),
        }
    }
}

pub fn synthetic_key(size_label: &str) -> String {
    format!("{size_label}/x")
}

pub fn bulk_get(size: Size, p: &BulkGetParams) -> Workload {
    let lan = ServerSpec { label: "lan", profile: "lan", extra_args: vec![], signed: false };
    let key = synthetic_key(&p.size_label);
    let get = |label: &str, mode, verify, note: Option<&str>| Variant {
        label: label.into(),
        workload: "bulk-get",
        server: Some(0),
        client: Some(ClientSpec { mode, max_connections: 1, pipeline_depth: 1 }),
        task: Task::GetOne { bucket: "synthetic".into(), key: key.clone(), bytes: p.bytes, sample_rss: true, verify },
        note: note.map(str::to_owned),
        once: false,
    };
    let mut variants = vec![
        get("h1-pool (1 connection)", Mode::H1Pool, true, None),
        get("h2 (1 connection)", Mode::H2, true, Some("h2c (prior knowledge) on the lan profile")),
        get(
            "h1-pool, no checksum [extra]",
            Mode::H1Pool,
            false,
            Some("extra row: checksum mode off, so the body's CRC is not computed; the gap to h1-pool is the cost of verifying"),
        ),
        Variant {
            label: "iperf3 (loopback)".into(),
            workload: "bulk-get",
            server: None,
            client: None,
            task: Task::Iperf3 { seconds: p.iperf3_seconds },
            note: None,
            once: false,
        },
    ];
    variants.extend(crate::peers::get_one_rows("bulk-get", &p.peers, 0, "synthetic", &key, p.bytes));
    let mut warm = vec![(0, "synthetic".to_string(), key.clone())];
    if let Some((label, bytes)) = &p.rss_check {
        let k = synthetic_key(label);
        warm.push((0, "synthetic".into(), k.clone()));
        variants.push(Variant {
            label: format!("rss-check {label} (h1-pool)"),
            workload: "rss-check",
            server: Some(0),
            client: Some(ClientSpec { mode: Mode::H1Pool, max_connections: 1, pipeline_depth: 1 }),
            task: Task::GetOne { bucket: "synthetic".into(), key: k, bytes: *bytes, sample_rss: true, verify: true },
            note: Some("client memory must stay bounded: ru_maxrss is the process's lifetime peak; rss_sampled_max the peak seen during this download".into()),
            once: true,
        });
    }
    let params = json!({
        "object": format!("synthetic/{key}"),
        "bytes": p.bytes,
        "iperf3_seconds": p.iperf3_seconds,
        "rss_check_bytes": p.rss_check.as_ref().map(|(_, b)| *b),
        "sink": "chunks read and dropped",
        "verify": "default GetParams (checksum mode on), except the no-checksum row",
        "synthetic_crc_limit": "the server sends a CRC32C only for synthetic objects up to 4 GiB, so larger downloads are not checksum-verified",
    });
    Workload {
        name: "bulk-get",
        size,
        servers: vec![lan],
        setup: None,
        warm,
        variants,
        repeats: p.repeats.max(1),
        params: params.as_object().cloned().unwrap_or_default(),
        shape: Shape::Bytes,
        claims: vec![Claim::ShareOfCeiling {
            ceiling: "iperf3 (loopback)".into(),
            goal: ">= 90% of iperf3 (client issue)",
        }],
        notes: vec!["client CPU: getrusage(RUSAGE_SELF) of the bench process; the server is another process.".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_object_sizes_and_keys() {
        let quick = SmallObjectsParams::new(Size::Quick);
        assert_eq!(
            (quick.objects, quick.object_size, quick.connections, quick.pipeline_depth),
            (1_000, 16 * 1024, 32, 32)
        );
        assert_eq!(quick.in_flight(), 1024);
        assert_eq!(SmallObjectsParams::new(Size::Full).objects, 10_000);

        let w = small_objects(Size::Quick, &quick);
        let setup = w.setup.as_ref().unwrap();
        assert_eq!(setup.keys.len(), 1_000);
        assert_eq!(setup.object_size, 16 * 1024);
        assert_eq!(setup.keys[0], "small-objects/p00/obj-000000");
        assert_eq!(setup.keys[17], "small-objects/p01/obj-000017");
        assert_eq!(setup.keys[999], "small-objects/p07/obj-000999");
        let unique: std::collections::HashSet<_> = setup.keys.iter().collect();
        assert_eq!(unique.len(), setup.keys.len(), "keys are unique");
        // Every prefix holds objects/prefixes keys: far below the 5,500 GET/s limit each.
        for p in 0..16 {
            let n = setup.keys.iter().filter(|k| k.starts_with(&format!("small-objects/p{p:02}/"))).count();
            assert!(n == 62 || n == 63, "{n}");
        }
        assert!(w.repeats >= 3);
        assert_eq!(w.params["objects"], 1_000);
    }

    #[test]
    fn small_object_variants() {
        let w = small_objects(Size::Quick, &SmallObjectsParams::new(Size::Quick));
        let labels: Vec<&str> = w.variants.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(&labels[..3], ["h1-pool", "h1-pipeline", "auto"]);
        for v in w.variants.iter().filter(|v| matches!(v.task, Task::GetAll { .. })) {
            let c = v.client.unwrap();
            assert_eq!(c.max_connections, 32);
            let ranged = v.label.contains("ranged");
            assert_eq!(v.task, Task::GetAll { in_flight: 1024, ranged, size_hint: c.mode == Mode::Auto && !ranged });
        }
        let h2 = w.variants.iter().find(|v| v.client.map(|c| c.mode) == Some(Mode::H2)).unwrap();
        let server = &w.servers[h2.server.unwrap()];
        assert_eq!(server.profile, "s3");
        assert!(server.args().windows(2).any(|a| a == ["--h2", "on"]));
        assert!(w.servers[0].args().contains(&"--memory".to_string()));
        assert!(!w.servers[0].args().contains(&"--anonymous".to_string()));
        // The ceilings: rate tools against the anonymous twin, one key per prefix for
        // h2load; the bound against the s3 server itself.
        let twin = &w.servers[2];
        assert!(twin.args().contains(&"--anonymous".to_string()) && twin.profile == "s3");
        let rates: Vec<&crate::ceilings::RateCeiling> = w
            .variants
            .iter()
            .filter_map(|v| match &v.task {
                Task::RateCeiling(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(rates.len(), 2);
        assert!(rates
            .iter()
            .all(|r| r.connections == 32 && r.object_size == 16 * 1024 && r.paths.len() == 16 && r.requests == 1_000));
        let bound = w.variants.iter().find(|v| v.label == SMALL_OBJECTS_BOUND_ROW).unwrap();
        assert_eq!(bound.server, Some(0));
        assert!(
            matches!(&bound.task, Task::Scenario(crate::scenario::Scenario::LatencyBound(b)) if b.concurrency == 32 && b.key == "small-objects/p00/obj-000000")
        );
    }

    #[test]
    fn bulk_get_layout() {
        let mut p = BulkGetParams::new(Size::Quick);
        p.rss_check = Some(("10GiB".into(), 10 << 30));
        let w = bulk_get(Size::Quick, &p);
        assert!(w.servers[0].args().contains(&"--anonymous".to_string()));
        assert_eq!(w.servers[0].profile, "lan");
        let once: Vec<_> = w.variants.iter().filter(|v| v.once).collect();
        assert_eq!(once.len(), 1);
        assert_eq!(
            once[0].task,
            Task::GetOne {
                bucket: "synthetic".into(),
                key: "10GiB/x".into(),
                bytes: 10 << 30,
                sample_rss: true,
                verify: true
            }
        );
        assert!(w.variants.iter().any(|v| matches!(v.task, Task::Iperf3 { seconds: 3 })));
        assert!(w.variants.iter().any(|v| v.client.map(|c| c.mode) == Some(Mode::H2)));
    }
}
