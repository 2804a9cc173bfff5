//! `parquet-scan` (docs/lab/README.md section 4): a Python analysis service that reads a
//! few columns of many Parquet tables, through each Python client its users would pick.
//!
//! ```text
//! setup (once per server): bench/peers/parquet_data.py (ferry-py's, else pyarrow's python)
//!     writes N files of 20 numeric columns into a local cache directory, seeded, with a
//!     manifest (keys, rows, a checksum per read column) ─► each file PUT by ferry
//! rows (peer rows, driver.py's parquet_scan, interleaved over repeats):
//!     ferry-py  ferry.arrow.read_table(urls, columns)        footers + column chunks
//!     ferry-py  pandas.read_parquet("ferry://bucket/dir")    ferry's fsspec filesystem
//!     s3fs      pandas.read_parquet("s3://bucket/dir")
//!     obstore   pandas.read_parquet("s3://bucket/dir") with obstore.fsspec registered
//!     pyarrow   pq.read_table("bucket/dir", filesystem=S3FileSystem)
//!     each result checked against the manifest (rows, columns' checksums), untimed
//! ```
//!
//! Figures: wall time, the bytes the server sent (what each reader actually fetched, so
//! a reader that pulls whole files shows it) and their rate, requests by S3 operation
//! (the server's counts), client CPU (the driver's getrusage, pyarrow's threads included)
//! and peak RSS. The claim is ferry's own goal: the better ferry-py row at least 1.5x
//! faster than the best Python peer.
//!
//! The files are numeric columns of random values (even columns int64, odd float64), so
//! they do not compress and a file is about its drawn size; pyarrow's defaults write one
//! row group per file (up to 1 Mi rows), as pandas' `to_parquet` does. Three columns
//! spread across the file (c03, c11, c17) are read, so a reader cannot fetch them as one
//! contiguous run.

use crate::peers::{Peer, PeerOp};
use crate::record::RunRecord;
use crate::scenario::Step;
use crate::verdict::{median, Headline};
use crate::workload::{Column, ServerSpec, Size, Variant, Workload};
use anyhow::{bail, Context, Result};
use ferry_store::{ObjectRef, PutParams, S3Client};
use serde_json::{json, Map, Value};
use std::path::PathBuf;

pub const NAME: &str = "parquet-scan";
pub const PUBLISHED: &str =
    "a Python analysis service: 3,000 tables of 40-80 MB (150 GB) in 10 s; ferry's goal: ferry-py >= 1.5x the best Python peer";
pub const BUCKET: &str = "parquet";

/// The peers beside ferry's Python rows (ferry-py is one of them: its rows are the
/// package's, driven like the others through driver.py).
pub const PEERS: [Peer; 4] = [Peer::FerryPy, Peer::S3fs, Peer::Obstore, Peer::Pyarrow];

/// The rows, in table order: (peer, how it reads, label).
pub const ROWS: [(Peer, &str, &str); 5] = [
    (Peer::FerryPy, "arrow", FERRY_ARROW_ROW),
    (Peer::FerryPy, "fsspec", FERRY_FSSPEC_ROW),
    (Peer::S3fs, "fsspec", "s3fs · pandas.read_parquet"),
    (Peer::Obstore, "fsspec", "obstore.fsspec · pandas.read_parquet"),
    (Peer::Pyarrow, "native", "pyarrow S3FileSystem · pq.read_table"),
];
pub const FERRY_ARROW_ROW: &str = "ferry-py · ferry.arrow.read_table";
pub const FERRY_FSSPEC_ROW: &str = "ferry-py · pandas.read_parquet ferry://";

#[derive(Clone, Debug, PartialEq)]
pub struct ParquetScanParams {
    pub files: usize,
    pub min_mb: u32,
    pub max_mb: u32,
    pub seed: u64,
    /// The columns read (of c00..c19).
    pub columns: Vec<String>,
    pub repeats: usize,
    /// Peer rows (filtered to [`PEERS`]; the CLI's `--peers` fills it).
    pub peers: Vec<Peer>,
}

impl ParquetScanParams {
    /// Full: 24 files of 40-80 MB (~1.4 GB: what one `ferry serve --memory` holds beside
    /// the readers on this machine; the published 3,000 tables are that shape, many
    /// times over). Quick: 6 files of 8-16 MB (~70 MB), each reader ~1-4 s a run, so the
    /// five rows x 3 repeats fit in about a minute.
    pub fn new(size: Size) -> ParquetScanParams {
        let (files, min_mb, max_mb) = match size {
            Size::Quick => (6, 8, 16),
            Size::Full => (24, 40, 80),
        };
        ParquetScanParams {
            files,
            min_mb,
            max_mb,
            seed: 5,
            columns: ["c03", "c11", "c17"].map(String::from).to_vec(),
            repeats: 3,
            peers: Vec::new(),
        }
    }

    /// The table's directory in [`BUCKET`] (its parameters in the name, so two sizes
    /// never mix).
    pub fn prefix(&self) -> String {
        format!("scan/{}x{}-{}MB-seed{}/", self.files, self.min_mb, self.max_mb, self.seed)
    }

    /// Where the generator writes the files and their manifest (reused while it exists).
    pub fn cache_dir(&self) -> PathBuf {
        std::env::temp_dir()
            .join(format!("ferry-bench-parquet-{}x{}-{}MB-seed{}", self.files, self.min_mb, self.max_mb, self.seed))
    }
}

/// The setup every row shares: generate the files (once per machine) and PUT them.
#[derive(Clone, Debug, PartialEq)]
pub struct ParquetFiles {
    pub p: ParquetScanParams,
}

crate::impl_scenario!(ParquetFiles);

impl ParquetFiles {
    pub fn setup_key(&self) -> String {
        format!(
            "{} Parquet files of {}-{} MB under {BUCKET}/{}",
            self.p.files,
            self.p.min_mb,
            self.p.max_mb,
            self.p.prefix()
        )
    }

    /// The generator's arguments after its script (parquet_data.py's flags).
    pub fn generator_args(&self) -> Vec<String> {
        let p = &self.p;
        [
            "--out".into(),
            p.cache_dir().display().to_string(),
            "--prefix".into(),
            p.prefix(),
            "--files".into(),
            p.files.to_string(),
            "--min-mb".into(),
            p.min_mb.to_string(),
            "--max-mb".into(),
            p.max_mb.to_string(),
            "--seed".into(),
            p.seed.to_string(),
            "--columns".into(),
            p.columns.join(","),
        ]
        .to_vec()
    }

    /// The command that writes the files: parquet_data.py beside driver.py, run by the
    /// interpreter of the first of the workload's peers that is installed (ferry-py's is
    /// the project's .venv; every peer's has pyarrow, as pandas' Parquet reader needs it).
    /// `None` when none is: then no row can run either (each comes back "absent"), so
    /// the setup has nothing to do and `ferry bench all` goes on.
    pub fn generator(&self) -> Option<std::process::Command> {
        let install = PEERS.iter().find_map(|&p| crate::peers::available(p).ok())?;
        let mut cmd = std::process::Command::new(&install.python);
        cmd.arg(install.driver.with_file_name("parquet_data.py")).args(self.generator_args());
        Some(cmd)
    }

    pub async fn setup(&self, c: &S3Client) -> Result<()> {
        let Some(mut generator) = self.generator() else {
            return Ok(());
        };
        let out = generator.output().context("running bench/peers/parquet_data.py")?;
        if !out.status.success() {
            bail!("parquet_data.py failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
        }
        let dir = self.p.cache_dir();
        let manifest: Value = serde_json::from_slice(
            &std::fs::read(dir.join("manifest.json")).with_context(|| format!("reading {}", dir.display()))?,
        )?;
        crate::measure::create_bucket_if_missing(c, BUCKET).await?;
        let files = manifest["files"].as_array().context("the manifest lists no files")?;
        for f in files {
            let (Some(key), Some(file)) = (f["key"].as_str(), f["file"].as_str()) else {
                bail!("a manifest entry without key or file: {f}")
            };
            let body = bytes::Bytes::from(std::fs::read(dir.join(file)).with_context(|| format!("reading {file}"))?);
            let obj = ObjectRef::new(BUCKET, key);
            c.put_object(&obj, body, PutParams::default()).await.with_context(|| format!("PUT {obj}"))?;
        }
        Ok(())
    }

    pub fn params(&self) -> Map<String, Value> {
        Map::new()
    }

    pub async fn run(&self, _c: &S3Client, _rec: &mut RunRecord) -> Result<()> {
        bail!("ParquetFiles is a setup; the rows are the peers'")
    }
}

pub const COLUMNS: &[Column] = &[
    Column::new("wall s", "wall_s", 1.0, 2),
    Column::new("MB fetched", "bytes_fetched", 1e-6, 1),
    Column::new("MB/s fetched", "fetched_bytes_per_s", 1e-6, 0),
    Column::new("GETs", "requests_GetObject", 1.0, 0),
    Column::new("HEADs", "requests_HeadObject", 1.0, 0),
    Column::new("requests", "requests_sent", 1.0, 0),
    Column::CONNECTIONS_OPENED,
    Column::CLIENT_CPU,
    Column::CPU_PER_REQUEST,
    Column::CPU_PER_GIB,
    Column::new("peak RSS MB", "peak_rss_bytes", 1e-6, 0),
    Column::ERRORS,
];

pub fn parquet_scan(size: Size, p: &ParquetScanParams) -> Workload {
    let prepare = Step::new(ParquetFiles { p: p.clone() });
    let mut variants: Vec<Variant> = Vec::new();
    for (peer, via, label) in ROWS {
        if !p.peers.contains(&peer) {
            continue;
        }
        let op = PeerOp::ParquetScan {
            bucket: BUCKET.into(),
            prefix: p.prefix(),
            manifest: p.cache_dir().join("manifest.json"),
            columns: p.columns.clone(),
            via,
            prepare: prepare.clone(),
        };
        for mut v in crate::peers::op_rows(NAME, &[peer], 0, op, "") {
            v.label = label.into();
            variants.push(v);
        }
    }
    let params = json!({
        "files": p.files,
        "file_mb": [p.min_mb, p.max_mb],
        "columns_in_file": 20,
        "columns_read": p.columns,
        "seed": p.seed,
        "table": format!("{BUCKET}/{}", p.prefix()),
        "layout": "20 numeric columns (even int64, odd float64, random), pyarrow's default writer: snappy, one row group per file",
        "check": "rows and, per column read, the sum of its 64-bit values mod 2^64, against the generator's manifest",
    });
    Workload {
        notes: vec![
            format!(
                "{} Parquet files of {}-{} MB (20 columns), 3 columns read ({}), s3 profile (30 ms first byte, 90 MB/s per connection); every reader's table checked against the generator's (rows, a checksum per column).",
                p.files, p.min_mb, p.max_mb, p.columns.join(", ")
            ),
            "MB fetched: the server's response bytes during the run (footers, column chunks, anything a reader pulled beyond them); requests: the server's counts by operation.".into(),
            "client CPU: the driver's getrusage (the reader's own threads included); the imports of pandas and pyarrow happen before the clock.".into(),
        ],
        headline: Some(claim),
        ..Workload::scenario(NAME, size, vec![ServerSpec::profile("s3")], variants, p.repeats, params, COLUMNS)
    }
}

/// The claims table's row: the better ferry-py row's wall time against the best peer's
/// (medians), against ferry's goal of 1.5x.
pub fn claim(records: &[RunRecord]) -> Headline {
    let wall = |label: &str| median(records, label, "wall_s");
    let ferry = [FERRY_ARROW_ROW, FERRY_FSSPEC_ROW]
        .iter()
        .filter_map(|l| wall(l).map(|w| (*l, w)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let peer = ROWS[2..].iter().filter_map(|(_, _, l)| wall(l).map(|w| (*l, w))).min_by(|a, b| a.1.total_cmp(&b.1));
    match (ferry, peer) {
        (Some((fl, fw)), Some((pl, pw))) => {
            let r = pw / fw.max(1e-9);
            Headline::new(
                NAME,
                PUBLISHED,
                format!("{fl} {fw:.2} s vs the best peer ({pl}) {pw:.2} s: {r:.2}x"),
                if r >= 1.5 { "yes" } else { "no" },
            )
        }
        _ => Headline::new(NAME, PUBLISHED, "no clean ferry-py and peer rows".into(), "no"),
    }
}

/// `parquet-scan` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: NAME,
    quick: "6 Parquet files of 8-16 MB, 3 of 20 columns",
    full: "24 Parquet files of 40-80 MB, 3 of 20 columns",
    peers: &PEERS,
    in_suite: true,
    default_link: None,
    run: crate::workload::run_defaults::<ParquetScanParams>,
    claim,
};

crate::impl_params!(ParquetScanParams, |size, p, o| crate::runner::run(&parquet_scan(size, p), o));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Task;

    #[test]
    fn quick_plans_five_checked_rows_over_one_setup() {
        let mut p = ParquetScanParams::new(Size::Quick);
        p.peers = PEERS.to_vec();
        let w = parquet_scan(Size::Quick, &p);
        assert_eq!(w.servers.len(), 1);
        assert_eq!(w.servers[0].profile, "s3");
        assert_eq!(w.variants.iter().map(|v| v.label.as_str()).collect::<Vec<_>>(), ROWS.map(|r| r.2));
        let mut setups = std::collections::BTreeSet::new();
        for (v, (peer, via, _)) in w.variants.iter().zip(ROWS) {
            let Task::Peer { peer: got, op: PeerOp::ParquetScan { prefix, manifest, columns, via: v_via, .. }, .. } =
                &v.task
            else {
                panic!("{}: not a parquet_scan peer row: {:?}", v.label, v.task)
            };
            assert_eq!((*got, *v_via), (peer, via));
            assert_eq!(prefix, "scan/6x8-16MB-seed5/");
            assert_eq!(columns, &["c03", "c11", "c17"]);
            assert!(manifest.ends_with("ferry-bench-parquet-6x8-16MB-seed5/manifest.json"), "{manifest:?}");
            assert!(!v.once && v.server == Some(0));
            // Every row carries the same setup step, so the runner prepares the files once.
            setups.insert(v.task.setup_step().expect("a setup step").setup_key());
        }
        assert_eq!(setups.len(), 1, "{setups:?}");
        assert_eq!(w.repeats, 3);
        // The generator is asked for exactly the quick table, into the manifest's directory.
        let args = ParquetFiles { p: p.clone() }.generator_args();
        for pair in [["--files", "6"], ["--min-mb", "8"], ["--max-mb", "16"], ["--prefix", "scan/6x8-16MB-seed5/"]] {
            assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
        }
        assert!(args.windows(2).any(|w| w[0] == "--out" && w[1].ends_with("ferry-bench-parquet-6x8-16MB-seed5")));
        // Full is the issue's shape: 40-80 MB files.
        let f = ParquetScanParams::new(Size::Full);
        assert_eq!((f.min_mb, f.max_mb), (40, 80));
        assert_ne!(f.prefix(), p.prefix());
        // --peers narrows the rows: ferry-py alone gives its two.
        let only = ParquetScanParams { peers: vec![Peer::FerryPy], ..p };
        assert_eq!(parquet_scan(Size::Quick, &only).variants.len(), 2);
    }

    #[test]
    fn claim_holds_the_best_ferry_row_against_the_best_peer() {
        let rec = |variant: &str, wall: f64| {
            let mut r = RunRecord {
                workload: NAME.into(),
                variant: variant.into(),
                repeat: 1,
                status: "ok".into(),
                ..RunRecord::default()
            };
            r.set("wall_s", wall);
            r
        };
        let rs = vec![rec(FERRY_ARROW_ROW, 1.0), rec(FERRY_FSSPEC_ROW, 3.0), rec(ROWS[2].2, 4.0), rec(ROWS[4].2, 2.0)];
        let h = claim(&rs);
        assert_eq!(h.verdict, "yes", "{h:?}");
        assert!(h.measured.contains("2.00x") && h.measured.contains("pyarrow"), "{}", h.measured);
        let h = claim(&[rec(FERRY_ARROW_ROW, 1.5), rec(ROWS[3].2, 2.0)]);
        assert_eq!(h.verdict, "no");
        assert_eq!(claim(&[rec(FERRY_ARROW_ROW, 1.0)]).verdict, "no");
    }
}
