//! `small-objects` (docs/lab/README.md section 4; gg/llama: pipelining +30-40% objects/s
//! over a pool).
//!
//! GET many 16 KiB objects from the `s3` profile (30 ms first byte) with 32 connections:
//! h1-pool against h1-pipeline (32 deep) against auto, plus an extra h2 row against a second
//! server with HTTP/2 on, the peers' rows, and ceiling rows (h2load, wrk and the C/L bound of
//! ceilings.rs). Every row runs the runner's generic [`Task::GetAll`] over the objects PUT
//! once by [`PutSetup`]; the table is [`Shape::Requests`].

use crate::ceilings::{LatencyBoundRun, RateCeiling, RateTool};
use crate::record::RunRecord;
use crate::scenario::Step;
use crate::verdict::{judge_percent, paired_ratio, Headline};
use crate::workload::{Claim, ClientSpec, PutSetup, ServerSpec, Shape, Size, Task, Variant, Workload};
use ferry_store::Mode;
use serde_json::json;

/// Parameters of `small-objects` (docs/lab/README.md section 4: gg/llama's pipelining
/// result).
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
    /// Ceiling rows (ceilings.rs): h2load and wrk against an anonymous twin of the s3
    /// server, and the C/L bound with C = `connections`.
    pub ceilings: bool,
}

impl SmallObjectsParams {
    pub fn new(size: Size) -> SmallObjectsParams {
        SmallObjectsParams {
            // Quick: 1,000, where h1-pool (the slowest row) still runs ~1.3 s a repeat, past its
            // ramp (docs/lab/bench-quick-sizes.md; `ferry bench small-objects --quick` re-measures it).
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
        v("auto", 0, Mode::Auto, false, Some("GETs carry size_hint (the object's size, as after a listing): auto sends GETs of <= 1 MiB down its pipeline lane (wire's auto/mod.rs)")),
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
    // The peers GET every object, as ferry's rows do: a pipelining row's rate grows with
    // the batch (its requests all go out at once, and it waits for the slowest first
    // byte), so a peer row on fewer objects than the rows it is held against would
    // measure the server's tail there rather than the client
    // (docs/lab/bench-quick-sizes.md).
    let peer_rows = crate::peers::get_many_rows("small-objects", &p.peers, 0, &setup, p.connections);
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
        headline: None,
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
    let rate = |tool| RateCeiling {
        tool,
        paths: paths.clone(),
        connections: p.connections,
        streams: p.pipeline_depth,
        requests: p.objects,
        // Quick: wrk runs for 1 s, ~800 requests at the s3 profile's 30 ms over 32
        // connections, a steady rate after the first round (docs/lab/bench-quick-sizes.md).
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
            Task::RateCeiling(rate(RateTool::H2load)),
            "request-rate ceiling: nghttp2's h2load, the same GETs in flight as the pipeline rows, against an anonymous twin of the s3 server",
        ),
        row(
            "ceiling: wrk (h1) [s3, anonymous]",
            2,
            None,
            Task::RateCeiling(rate(RateTool::Wrk)),
            "request-rate ceiling for h1 without pipelining: wrk, the same connections as h1-pool, one key, against an anonymous twin of the s3 server",
        ),
        row(
            SMALL_OBJECTS_BOUND_ROW,
            0,
            Some(ClientSpec { mode: Mode::H1Pool, max_connections: 1, pipeline_depth: 1 }),
            Task::Scenario(Step::new(LatencyBoundRun {
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

/// The claims table's row for `small-objects`: h1-pipeline's objects/s over h1-pool's, paired by repeat, against gg/llama's +30-40%.
pub fn claim(records: &[RunRecord]) -> Headline {
    let h =
        |published: &str, measured: String, verdict: &str| Headline::new("small-objects", published, measured, verdict);
    #[allow(unused)]
    let none = || "no paired clean runs".to_string();
    let published = "pipelining +30-40% objects/s over a pool (gg/llama, real S3)";
    match paired_ratio(records, "h1-pipeline", "h1-pool", "objects_per_s") {
        Some(s) => {
            let g = (s.median - 1.0) * 100.0;
            h(
                published,
                format!(
                    "h1-pipeline / h1-pool: {g:+.0}% (range {:+.0}% to {:+.0}%)",
                    (s.min - 1.0) * 100.0,
                    (s.max - 1.0) * 100.0
                ),
                judge_percent(g, 30.0, 40.0),
            )
        }
        None => h(published, none(), "no"),
    }
}

/// `small-objects` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "small-objects",
    quick: "1,000 GETs of 16 KiB over 32 connections, s3 profile",
    full: "10,000 GETs of 16 KiB over 32 connections, s3 profile",
    peers: &crate::peers::Peer::DEFAULT,
    in_suite: true,
    default_link: None,
    run: crate::workload::run_defaults::<SmallObjectsParams>,
    claim,
};

// s3fs fits file-like access, not many small GETs (peers.rs's DEFAULT).
crate::impl_params!(SmallObjectsParams, |size, p, o| crate::runner::run(&small_objects(size, p), o));

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
        let rates: Vec<&RateCeiling> = w
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
        assert!(bound
            .task
            .step::<LatencyBoundRun>()
            .is_some_and(|r| r.concurrency == 32 && r.key == "small-objects/p00/obj-000000"));
    }
}
