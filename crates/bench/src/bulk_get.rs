//! `bulk-get` (the client's goal: one large GET at >= 90% of iperf3 on loopback, and client
//! memory bounded during a download of any size).
//!
//! One synthetic object (never stored: the server makes its bytes) from the `lan` profile,
//! per mode on one connection, beside iperf3 on the same path; optionally a download of a
//! larger object once (`--rss-check`) that records the process's peak RSS. Rows run the
//! runner's generic [`Task::GetOne`] and [`Task::Iperf3`]; the table is [`Shape::Bytes`].

use crate::record::RunRecord;
use crate::verdict::{paired_ratio, Headline};
use crate::workload::{Claim, ClientSpec, ServerSpec, Shape, Size, Task, Variant, Workload};
use ferry_store::Mode;
use serde_json::json;

/// Parameters of `bulk-get` (the client's bytes goal and its memory goal).
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
        // The default transport beside the two it chooses between: over plain http it
        // speaks HTTP/1.1 (h2c only when forced), and one GET of unknown size is bulk.
        get("auto (1 connection)", Mode::Auto, true, None),
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
        headline: None,
        claims: vec![Claim::ShareOfCeiling { ceiling: "iperf3 (loopback)".into(), goal: ">= 90% of iperf3" }],
        notes: vec!["client CPU: getrusage(RUSAGE_SELF) of the bench process; the server is another process.".into()],
    }
}

/// The claims table's row for `bulk-get`: h1-pool's one-connection MB/s as a share of iperf3 on loopback (goal >= 90%).
pub fn claim(records: &[RunRecord]) -> Headline {
    let h = |published: &str, measured: String, verdict: &str| Headline::new("bulk-get", published, measured, verdict);
    #[allow(unused)]
    let none = || "no paired clean runs".to_string();
    let published = ">= 90% of iperf3 on loopback (ferry's own goal)";
    match paired_ratio(records, "h1-pool (1 connection)", "iperf3 (loopback)", "bytes_per_s") {
        Some(s) => h(
            published,
            format!("h1-pool {:.0}% of iperf3", s.median * 100.0),
            if s.median >= 0.9 { "yes" } else { "no" },
        ),
        None => h(published, none(), "no"),
    }
}

/// `bulk-get` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "bulk-get",
    quick: "one GET of a 1 GiB synthetic object per mode, lan profile, beside iperf3 on loopback",
    full: "the same as quick",
    peers: &crate::peers::Peer::DEFAULT,
    in_suite: false,
    default_link: None,
    run: crate::workload::run_defaults::<BulkGetParams>,
    claim,
};

crate::impl_params!(BulkGetParams, |size, p, o| crate::runner::run(&bulk_get(size, p), o));

#[cfg(test)]
mod tests {
    use super::*;

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
        // auto's row pairs with the forced ones in the claims table (same label, its mode).
        let auto = w.variants.iter().find(|v| v.client.map(|c| c.mode) == Some(Mode::Auto)).unwrap();
        assert!(w.variants.iter().any(|v| v.label == auto.label.replacen("auto", "h1-pool", 1)));
    }
}
