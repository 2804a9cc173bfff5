//! `ferry.Client`: the Python face of the engines of one set of settings.
//!
//! ```text
//! Client(settings) ─► per process, per provider, on first use of its scheme:
//!                     s3://, gs://, az:// ─► ferry_store::connect(provider, StoreOptions
//!                                            + the counting layer, stats.rs) ─► Engine
//!   method(url, ...) ─► StoreUrl::parse (bad URL: ValueError) ─► that provider's engine
//!                    ─► ops.rs / transfer.rs / the engine
//!                    ─► sync: runtime::block_on (GIL released) | *_async: asyncio awaitable
//! ```
//!
//! Which settings reach which provider: S3 takes all of them (endpoint_url or the AWS
//! chain, region, profile, credentials, transport, max_connections, AWS_CA_BUNDLE). GCS
//! and Azure find their endpoint and credentials as their stores do (their environment,
//! their files), so only what the user said to this client carries over: an explicit
//! endpoint_url (never the AWS_* chain), transport, max_connections, the time-outs and
//! attempts (timeout, connect_timeout, retries or AWS_MAX_ATTEMPTS, as the command
//! line's flags), and anonymous credentials; AWS keys, region and profile are S3's. A provider this ferry cannot
//! connect to fails at the first call on its scheme (ConfigError), not at `Client()`;
//! the S3 engine is built at `Client()`, so bad common settings fail there.
//!
//! The engines are rebuilt in a forked child (their connections belong to the parent's
//! runtime, whose threads the child does not have): the client keeps the pid that built
//! them, and the lock around them is only taken with the GIL held (runtime.rs). Pickling
//! sends the settings the client was made with, so a worker process builds its own.

use crate::buffer::Buffer;
use crate::errors::{at, bad_url, from_anyhow, py_result, py_result_at, to_pyerr};
use crate::runtime::{awaitable, block_on, block_on_ticking, enter, runtime};
use crate::stats::{Counters, Counting, OPERATIONS};
use crate::transfer::{self, Prepared, TransferOptions, TransferSummary};
use crate::{ops, settings};
use bytes::Bytes;
use ferry_cli::sync::{Mode as SyncMode, Side};
use ferry_engine::{ByteBudget, CoalescePolicy, Engine, GapEstimator, OpenAhead, OpenAheadOptions, RangesOptions};
use ferry_store::{
    Credentials, CredentialsSource, Error, ListParams, Mode, ObjectEntry, ObjectInfo as StoreInfo, ObjectRef,
    ObjectStoreExt, Provider, PutParams, PutPayload, RequestLimits, StoreOptions, StoreUrl, UrlError,
};

use futures_util::stream::{self, BoxStream, StreamExt};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Bytes read from a file object per chunk handed to Rust: 1 MiB, so a chunk's hand-off
/// (a channel send, the GIL released and taken back) is small beside its bytes, while the
/// upload's 8 MiB parts are cut from a few chunks and the channel (4 chunks) holds little.
const READ_CHUNK: usize = 1024 * 1024;
/// Listing entries handed to Python per wake-up of the listing task: S3's page (1,000
/// keys), so a wake-up usually brings a whole page.
const LIST_BATCH: usize = 1000;

/// A cp or sync, ready to run.
type TransferWork = futures_util::future::BoxFuture<'static, anyhow::Result<()>>;
/// A cp or sync planned (`Client::plan_cp`, `Client::plan_sync`): its runner, its
/// tally and its work, not started.
type Planned = (Arc<Prepared>, transfer::SharedTally, TransferWork);

/// `sync`'s flags besides its paths.
#[derive(Clone, Copy)]
struct SyncFlags {
    delete: bool,
    checksum: bool,
    dry_run: bool,
    size_only: bool,
    concurrency: Option<usize>,
    part_size: Option<u64>,
}

/// One provider's engine in this process, and the counters under it (stats.rs), which
/// all of this process's engines share.
struct Built {
    provider: Provider,
    engine: Engine,
    counters: Arc<Counters>,
}

#[derive(Clone, Debug)]
enum Creds {
    Default,
    Keys(Credentials),
    Anonymous,
}

#[pyclass(frozen, module = "ferry", name = "Client")]
pub struct Client {
    endpoint_url: Option<String>,
    region: Option<String>,
    profile: Option<String>,
    creds: Creds,
    transport: String,
    max_connections: Option<usize>,
    /// Time-outs and attempts (`timeout`, `connect_timeout`, `retries`; module note).
    limits: RequestLimits,
    /// The endpoint in force (endpoint_url, or the AWS settings chain).
    endpoint: String,
    /// This process's engines, one per provider, each built on first use (module note).
    state: Mutex<Option<(u32, Vec<Built>)>>,
    /// What `get_ranges` has learnt of the endpoint, per process like the engines: the
    /// parent's threads may hold its lock at the moment of a fork.
    estimator: Mutex<(u32, Arc<GapEstimator>)>,
}

fn parse_creds(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Creds> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Creds::Default) };
    if let Ok(s) = obj.extract::<String>() {
        return match s.as_str() {
            "anonymous" => Ok(Creds::Anonymous),
            _ => Err(PyValueError::new_err(
                "credentials: a dict, an (access_key_id, secret_access_key) tuple, or 'anonymous'",
            )),
        };
    }
    if let Ok(b) = obj.extract::<bool>() {
        return if b { Ok(Creds::Default) } else { Ok(Creds::Anonymous) };
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let get = |k: &str| -> PyResult<Option<String>> {
            match d.get_item(k)? {
                Some(v) if !v.is_none() => Ok(Some(v.extract()?)),
                _ => Ok(None),
            }
        };
        let (Some(key), Some(secret)) = (get("access_key_id")?, get("secret_access_key")?) else {
            return Err(PyValueError::new_err("credentials dict needs access_key_id and secret_access_key"));
        };
        let mut c = Credentials::new(key, secret);
        c.session_token = get("session_token")?;
        return Ok(Creds::Keys(c));
    }
    if let Ok((key, secret)) = obj.extract::<(String, String)>() {
        return Ok(Creds::Keys(Credentials::new(key, secret)));
    }
    if let Ok((key, secret, token)) = obj.extract::<(String, String, Option<String>)>() {
        let mut c = Credentials::new(key, secret);
        c.session_token = token;
        return Ok(Creds::Keys(c));
    }
    Err(PyTypeError::new_err("credentials: a dict, an (access_key_id, secret_access_key) tuple, or 'anonymous'"))
}

impl Client {
    /// This process's S3 engine (bucket calls, and the counters of `stats`).
    fn engine(&self, py: Python<'_>) -> PyResult<Engine> {
        self.engine_for(py, Provider::S3)
    }

    /// This process's engine for `provider`, built on first use (module note).
    fn engine_for(&self, py: Python<'_>, provider: Provider) -> PyResult<Engine> {
        let pid = std::process::id();
        let mut slot = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|(p, _)| *p != pid) {
            // The parent's engines: their connections' tasks are not in this process.
            std::mem::forget(slot.take());
        }
        let engines = &mut slot.get_or_insert_with(|| (pid, Vec::new())).1;
        if let Some(b) = engines.iter().find(|b| b.provider == provider) {
            return Ok(b.engine.clone());
        }
        let counters = engines.first().map(|b| b.counters.clone()).unwrap_or_default();
        let built = self.build(py, provider, counters)?;
        let engine = built.engine.clone();
        engines.push(built);
        Ok(engine)
    }

    /// This process's gap estimator (a forked child starts a fresh one).
    fn estimator(&self) -> Arc<GapEstimator> {
        let pid = std::process::id();
        let mut slot = self.estimator.lock().unwrap_or_else(|p| p.into_inner());
        if slot.0 != pid {
            *slot = (pid, Arc::new(GapEstimator::new()));
        }
        slot.1.clone()
    }

    /// This process's engines' transport counters, summed.
    fn transport_stats(&self) -> ferry_wire::TransportStats {
        let slot = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut sum = ferry_wire::TransportStats::default();
        for b in slot.iter().flat_map(|(_, v)| v.iter()) {
            let t = b.engine.transport().stats();
            sum.connections_opened += t.connections_opened;
            sum.connections_open += t.connections_open;
            sum.requests_sent += t.requests_sent;
            sum.requests_resent += t.requests_resent;
            sum.hedges_sent += t.hedges_sent;
            sum.hedges_won += t.hedges_won;
        }
        sum
    }

    /// The request counters of this process's engines (stats.rs).
    fn counters(&self, py: Python<'_>) -> PyResult<Option<Arc<Counters>>> {
        self.engine(py)?;
        let slot = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Ok(slot.as_ref().and_then(|(_, v)| Some(v.first()?.counters.clone())))
    }

    /// The store of `provider` for this client's settings (module note: which apply).
    fn build(&self, py: Python<'_>, provider: Provider, counters: Arc<Counters>) -> PyResult<Built> {
        let mode = Mode::parse(&self.transport).ok_or_else(|| {
            PyValueError::new_err(format!("transport {:?}: auto, h1-pool, h1-pipeline or h2", self.transport))
        })?;
        let credentials = match &self.creds {
            Creds::Default => match &self.profile {
                Some(p) => CredentialsSource::Profile(Some(p.clone())),
                None => CredentialsSource::Default,
            },
            Creds::Keys(c) => CredentialsSource::Explicit(c.clone()),
            Creds::Anonymous => CredentialsSource::Anonymous,
        };
        let options = match provider {
            Provider::S3 => StoreOptions {
                endpoint: Some(self.endpoint.clone()),
                region: Some(settings::region(self.region.as_deref(), self.profile.as_deref())),
                credentials,
                mode,
                ca_file: settings::ca_bundle(self.profile.as_deref()),
                max_connections: self.max_connections,
                transport_layer: Some(Counting::layer(counters.clone())),
                limits: self.limits,
            },
            _ => StoreOptions {
                endpoint: self.endpoint_url.clone(),
                region: None,
                credentials: match credentials {
                    CredentialsSource::Anonymous => CredentialsSource::Anonymous,
                    _ => CredentialsSource::Default,
                },
                mode,
                ca_file: None,
                max_connections: self.max_connections,
                transport_layer: Some(Counting::layer(counters.clone())),
                limits: self.limits,
            },
        };
        let store = enter(py, || ferry_store::connect(provider, options)).map_err(|e| to_pyerr(py, e))?;
        Ok(Built { provider, engine: enter(py, || Engine::new(store)), counters })
    }

    /// An object URL's object and the engine of its provider.
    fn target(&self, py: Python<'_>, url: &str) -> PyResult<(Engine, ObjectRef)> {
        let u = self.url(url)?;
        if u.key.is_empty() {
            return Err(bad_url(url, "names a bucket, not an object"));
        }
        Ok((self.engine_for(py, u.provider)?, u.object()))
    }

    fn url(&self, url: &str) -> PyResult<StoreUrl> {
        StoreUrl::parse(url).map_err(|e| match e {
            UrlError::NotAUrl(_) => bad_url(url, "not an object URL like s3://bucket/key"),
            e => bad_url(url, e),
        })
    }

    /// `get_many`'s objects: each item a URL or an `ObjectInfo` (from `list` or `head`,
    /// whose size goes with the GET as a size hint), or the sizes from `sizes` (one per
    /// item; `None` for an unknown one), which win over an `ObjectInfo`'s.
    fn sized_targets(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyAny>,
        sizes: Option<Vec<Option<u64>>>,
    ) -> PyResult<Vec<ops::Target>> {
        if items.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err("expected a list of URLs or ObjectInfo entries, not one string"));
        }
        let mut out = Vec::new();
        for item in items.try_iter()? {
            let item = item?;
            let (url, size) = if let Ok(info) = item.cast::<ObjectInfo>() {
                let info = info.get();
                if info.is_dir {
                    return Err(PyValueError::new_err(format!(
                        "{} is a common prefix (is_dir=True) of a listing, not an object",
                        info.url
                    )));
                }
                (info.url.clone(), Some(info.size))
            } else if let Ok(url) = item.extract::<String>() {
                (url, None)
            } else {
                return Err(PyTypeError::new_err(format!(
                    "expected a URL (str) or an ObjectInfo, got {}",
                    item.get_type().name()?
                )));
            };
            let (engine, object) = self.target(py, &url)?;
            out.push((engine, object, size));
        }
        if let Some(sizes) = sizes {
            if sizes.len() != out.len() {
                return Err(PyValueError::new_err(format!("{} objects but {} sizes", out.len(), sizes.len())));
            }
            for (t, size) in out.iter_mut().zip(sizes) {
                if size.is_some() {
                    t.2 = size;
                }
            }
        }
        Ok(out)
    }

    fn targets(&self, py: Python<'_>, urls: &Bound<'_, PyAny>) -> PyResult<Vec<(Engine, ObjectRef)>> {
        if urls.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err("expected a list of URLs, not one string"));
        }
        urls.try_iter()?.map(|u| self.target(py, &u?.extract::<String>()?)).collect()
    }

    /// The engine's options; `max_gap` (bytes read through between two ranges rather
    /// than sending another GET) replaces the policy its estimator would choose.
    /// The ranges grouped by object: one URL for all, or one URL per range.
    fn range_groups(
        &self,
        py: Python<'_>,
        url_or_urls: &Bound<'_, PyAny>,
        starts: Vec<u64>,
        ends: Vec<u64>,
    ) -> PyResult<(Vec<ops::RangeGroup>, usize)> {
        let ranges = ranges_of(starts, ends)?;
        let n = ranges.len();
        if let Ok(url) = url_or_urls.extract::<String>() {
            let (engine, object) = self.target(py, &url)?;
            let group = ops::RangeGroup { engine, object, slots: (0..n).collect(), ranges };
            return Ok((vec![group], n));
        }
        let objects = self.targets(py, url_or_urls)?;
        if objects.len() != n {
            return Err(PyValueError::new_err(format!("{} URLs but {n} ranges", objects.len())));
        }
        let mut groups: Vec<ops::RangeGroup> = Vec::new();
        let mut index: std::collections::HashMap<(Provider, ObjectRef), usize> = std::collections::HashMap::new();
        for (slot, ((engine, object), range)) in objects.into_iter().zip(ranges).enumerate() {
            let key = (engine.provider(), object.clone());
            let g = *index.entry(key).or_insert_with(|| {
                groups.push(ops::RangeGroup { engine, object, slots: Vec::new(), ranges: Vec::new() });
                groups.len() - 1
            });
            groups[g].slots.push(slot);
            groups[g].ranges.push(range);
        }
        Ok((groups, n))
    }

    /// `cp`'s arguments checked and its work made, not started (usage mistakes raise here).
    fn plan_cp(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        recursive: bool,
        opts: &TransferOptions,
    ) -> PyResult<Planned> {
        let usage = |e: ferry_cli::common::UsageError| PyValueError::new_err(e.0);
        let mut sources = Vec::new();
        if src.is_instance_of::<PyString>() || src.hasattr("__fspath__")? {
            sources.push(transfer::location(&path_arg(src)?).map_err(usage)?);
        } else {
            for s in src.try_iter()? {
                sources.push(transfer::location(&path_arg(&s?)?).map_err(usage)?);
            }
        }
        if sources.is_empty() {
            return Err(PyValueError::new_err("cp: no sources"));
        }
        let dest = transfer::location(&path_arg(dst)?).map_err(usage)?;
        let (from, to) = transfer::cp_providers(&sources, &dest).map_err(|e| from_anyhow(py, &e, format!("{e:#}")))?;
        let prep = Arc::new(Prepared::new(self.engine_for(py, to)?, self.engine_for(py, from)?, opts));
        let tally = transfer::SharedTally::default();
        let work = {
            let (prep, tally) = (prep.clone(), tally.clone());
            Box::pin(async move { transfer::cp(&prep, sources, dest, recursive, tally).await })
        };
        Ok((prep, tally, work))
    }

    /// `sync`'s arguments checked and its work made, not started.
    fn plan_sync(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        f: SyncFlags,
    ) -> PyResult<Planned> {
        let side = |o: &Bound<'_, PyAny>| -> PyResult<Side> {
            let loc = transfer::location(&path_arg(o)?).map_err(|e| PyValueError::new_err(e.0))?;
            ferry_cli::sync::side(loc).map_err(|e| PyValueError::new_err(format!("{e:#}")))
        };
        let (src, dst) = (side(src)?, side(dst)?);
        if let Side::Local(root) = &src {
            if matches!(dst, Side::Local(_)) {
                return Err(PyValueError::new_err("sync: both sides are local"));
            }
            if !root.is_dir() {
                return Err(PyValueError::new_err(format!("sync: {} is not a directory", root.display())));
            }
        }
        if f.checksum && f.size_only {
            return Err(PyValueError::new_err("sync: checksum and size_only exclude each other"));
        }
        let mode = match (f.checksum, f.size_only) {
            (true, _) => SyncMode::Checksum,
            (_, true) => SyncMode::SizeOnly,
            _ => SyncMode::SizeAndTime,
        };
        let (from, to) = transfer::sync_providers(&src, &dst).map_err(|e| from_anyhow(py, &e, format!("{e:#}")))?;
        let opts =
            TransferOptions { resume: true, concurrency: f.concurrency, part_size: f.part_size, ..Default::default() };
        let prep = Arc::new(Prepared::new(self.engine_for(py, to)?, self.engine_for(py, from)?, &opts));
        let tally = transfer::SharedTally::default();
        let o = transfer::SyncOptions { delete: f.delete, dry_run: f.dry_run, mode };
        let work = {
            let (prep, tally) = (prep.clone(), tally.clone());
            Box::pin(async move { transfer::sync(&prep, src, dst, o, tally).await })
        };
        Ok((prep, tally, work))
    }

    fn ranges_options(&self, max_gap: Option<u64>) -> RangesOptions {
        let mut opts = RangesOptions { estimator: self.estimator(), ..RangesOptions::default() };
        opts.policy = max_gap.map(|max_gap| CoalescePolicy { max_gap, max_span: opts.max_span.max(max_gap) });
        opts
    }
}

fn buffers(py: Python<'_>, results: Vec<Result<Bytes, Error>>, return_exceptions: bool) -> PyResult<Py<PyList>> {
    let mut items: Vec<Py<PyAny>> = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(b) => items.push(Py::new(py, Buffer::new(b))?.into_any()),
            Err(e) => {
                let err = to_pyerr(py, e);
                if !return_exceptions {
                    return Err(err);
                }
                items.push(err.into_value(py).into_any());
            }
        }
    }
    Ok(PyList::new(py, items)?.unbind())
}

fn ranges_of(starts: Vec<u64>, ends: Vec<u64>) -> PyResult<Vec<std::ops::Range<u64>>> {
    if starts.len() != ends.len() {
        return Err(PyValueError::new_err(format!("{} starts but {} ends", starts.len(), ends.len())));
    }
    starts
        .into_iter()
        .zip(ends)
        .map(
            |(s, e)| {
                if e < s {
                    Err(PyValueError::new_err(format!("range {s}..{e} ends before it starts")))
                } else {
                    Ok(s..e)
                }
            },
        )
        .collect()
}

/// What `put` was given.
enum PutSource {
    Bytes(Bytes),
    Path(PathBuf),
}

/// `put`'s data sorted: a known source with its size when that is known up front, or
/// `None` for one read as it goes (a file object or an iterable), which takes no
/// `if_not_exists`.
fn put_source(data: &Bound<'_, PyAny>, if_not_exists: bool) -> PyResult<Option<(PutSource, Option<u64>)>> {
    let source = if data.is_instance_of::<PyString>() || data.hasattr("__fspath__")? {
        PutSource::Path(data.extract()?)
    } else if let Ok(b) = bytes_of(data) {
        PutSource::Bytes(b)
    } else if if_not_exists {
        return Err(PyTypeError::new_err("if_not_exists takes bytes-like data or a path"));
    } else {
        return Ok(None);
    };
    let total = match &source {
        PutSource::Bytes(b) => Some(b.len() as u64),
        PutSource::Path(p) => std::fs::metadata(p).ok().map(|m| m.len()),
    };
    Ok(Some((source, total)))
}

/// A Python buffer held open (its exporter pinned) so Rust can read it without a copy.
struct HeldBuffer(PyUntypedBuffer);

impl AsRef<[u8]> for HeldBuffer {
    fn as_ref(&self) -> &[u8] {
        let len = self.0.len_bytes();
        if len == 0 {
            return &[];
        }
        // SAFETY: a C-contiguous buffer of `len` bytes (checked in bytes_of), valid while
        // the export is held, which is as long as `self`.
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr() as *const u8, len) }
    }
}

/// A writable buffer lent to a read: its export held (so a `bytearray` cannot be resized
/// nor an `mmap` closed under it) until the read's last part task has ended.
fn lend(buffer: &Bound<'_, PyAny>) -> PyResult<ferry_engine::Destination> {
    let view = PyUntypedBuffer::get(buffer).map_err(|_| {
        PyTypeError::new_err("get_into needs a writable buffer (bytearray, numpy array, memoryview, mmap)")
    })?;
    if view.readonly() {
        return Err(PyTypeError::new_err(format!(
            "get_into needs a writable buffer; this {} is read-only",
            buffer.get_type().name()?
        )));
    }
    if !view.is_c_contiguous() {
        return Err(PyValueError::new_err("get_into needs a contiguous buffer"));
    }
    let (ptr, len) = (view.buf_ptr() as *mut u8, view.len_bytes());
    // SAFETY: a writable, C-contiguous export of `len` bytes, valid while `view` (the
    // owner) is held; the read is the only writer while it holds it (the caller gave it
    // the buffer for the call; Python code that writes the same buffer meanwhile races
    // its own read, as with `readinto`).
    Ok(unsafe { ferry_engine::Destination::new(ptr, len, Box::new(view)) })
}

/// The bytes of any bytes-like object: a `Buffer`'s own, a contiguous buffer held open
/// (no copy: `bytes`, `bytearray`, numpy arrays of any dtype, `memoryview`s), else a
/// contiguous copy (`memoryview(obj).tobytes()`). A writable buffer changed while it is
/// sent fails the upload's checksum; it is never stored changed.
fn bytes_of(data: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = data.cast::<Buffer>() {
        return Ok(b.get().bytes.clone());
    }
    let view = PyUntypedBuffer::get(data)?;
    if view.is_c_contiguous() {
        return Ok(Bytes::from_owner(HeldBuffer(view)));
    }
    drop(view);
    let copy = data.py().import("builtins")?.getattr("memoryview")?.call1((data,))?.call_method0("tobytes")?;
    Ok(Bytes::from_owner(HeldBuffer(PyUntypedBuffer::get(&copy)?)))
}

/// `put` of a known source. `if_not_exists`: a single PUT is sent with `If-None-Match: *`
/// (the store refuses it atomically if the key exists); a multipart one is checked with a
/// HEAD first, since ferry-store's completion does not take the condition.
async fn put_known(
    engine: Engine,
    object: ObjectRef,
    source: PutSource,
    if_not_exists: bool,
    progress: ops::Tracker,
) -> Result<PutResult, Error> {
    let params = ferry_engine::UploadParams { resume: false, ..Default::default() };
    let on_bytes = progress_fn(&progress);
    if if_not_exists {
        let len = match &source {
            PutSource::Bytes(b) => b.len() as u64,
            PutSource::Path(p) => {
                std::fs::metadata(p).map_err(|e| Error::Io { path: p.display().to_string(), error: e })?.len()
            }
        };
        if len <= params.part_size {
            let payload = match source {
                PutSource::Bytes(b) => PutPayload::Bytes(b),
                PutSource::Path(p) => PutPayload::File(p),
            };
            let put = PutParams { if_none_match_star: true, ..PutParams::default() };
            let out = engine.put(&object, payload, put).await?;
            if let Some(p) = &on_bytes {
                p(len);
            }
            return Ok(PutResult { etag: out.etag, size: len, parts: 0 });
        }
        if engine.exists(&object).await? {
            return Err(Error::Precondition {
                status: 412,
                code: "PreconditionFailed".into(),
                message: format!("{object} exists (if_not_exists)"),
                request_id: None,
            });
        }
    }
    let out = match source {
        PutSource::Path(p) => ferry_engine::upload_file(&engine, &p, &object, &params, on_bytes).await?,
        PutSource::Bytes(b) => {
            let part = params.part_size as usize;
            let pieces: Vec<std::io::Result<Bytes>> =
                (0..b.len()).step_by(part.max(1)).map(|at| Ok(b.slice(at..(at + part).min(b.len())))).collect();
            let body = if pieces.is_empty() {
                stream::iter(vec![Ok(Bytes::new())]).boxed()
            } else {
                stream::iter(pieces).boxed()
            };
            ferry_engine::upload_stream(&engine, body, &object, &params, on_bytes).await?
        }
    };
    Ok(PutResult { etag: out.etag, size: out.size, parts: out.parts })
}

/// `None` or a quoted string, as Python's repr shows them.
fn py_repr(s: &Option<String>) -> String {
    match s {
        Some(s) => format!("{s:?}"),
        None => "None".into(),
    }
}

/// What `put` stored.
#[pyclass(frozen, module = "ferry", name = "PutResult", get_all)]
pub struct PutResult {
    pub etag: Option<String>,
    pub size: u64,
    /// 0 for a single PUT.
    pub parts: u32,
}

#[pymethods]
impl PutResult {
    fn __repr__(&self) -> String {
        format!("PutResult(etag={}, size={}, parts={})", py_repr(&self.etag), self.size, self.parts)
    }
}

/// What a store says about an object (`head`), or a listing entry (`list`).
#[pyclass(frozen, module = "ferry", name = "ObjectInfo")]
pub struct ObjectInfo {
    #[pyo3(get)]
    pub url: String,
    #[pyo3(get)]
    pub bucket: String,
    #[pyo3(get)]
    pub key: String,
    #[pyo3(get)]
    pub size: u64,
    #[pyo3(get)]
    pub etag: Option<String>,
    #[pyo3(get)]
    pub content_type: Option<String>,
    #[pyo3(get)]
    pub metadata: BTreeMap<String, String>,
    /// The stored full-object checksum, base64 (HEAD only; listings name the algorithm).
    #[pyo3(get)]
    pub checksum: Option<String>,
    #[pyo3(get)]
    pub checksum_algorithm: Option<String>,
    /// A common prefix of a non-recursive listing ("directory"), not an object.
    #[pyo3(get)]
    pub is_dir: bool,
    modified: Option<SystemTime>,
}

#[pymethods]
impl ObjectInfo {
    /// Last-Modified as a timezone-aware `datetime` (UTC), or `None`.
    #[getter]
    fn last_modified<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(t) = self.modified else { return Ok(None) };
        let secs = match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        let dt = py.import("datetime")?;
        let utc = dt.getattr("timezone")?.getattr("utc")?;
        Ok(Some(dt.getattr("datetime")?.call_method1("fromtimestamp", (secs, utc))?))
    }

    fn __repr__(&self) -> String {
        if self.is_dir {
            format!("ObjectInfo(url={:?}, is_dir=True)", self.url)
        } else {
            format!("ObjectInfo(url={:?}, size={}, etag={})", self.url, self.size, py_repr(&self.etag))
        }
    }
}

impl ObjectInfo {
    /// Last-Modified, when known.
    pub(crate) fn modified(&self) -> Option<SystemTime> {
        self.modified
    }

    fn from_head(provider: Provider, object: &ObjectRef, info: StoreInfo) -> ObjectInfo {
        let checksum = info.checksums.first().cloned();
        ObjectInfo {
            url: format!("{}://{}/{}", provider.scheme(), object.bucket, object.key),
            bucket: object.bucket.clone(),
            key: object.key.clone(),
            size: info.size,
            etag: info.etag,
            content_type: info.content_type,
            metadata: info.metadata,
            checksum_algorithm: checksum.as_ref().map(|c| c.0.as_str().to_owned()),
            checksum: checksum.map(|c| c.1),
            is_dir: false,
            modified: info.last_modified,
        }
    }

    fn from_entry(scheme: &str, bucket: &str, e: ObjectEntry) -> ObjectInfo {
        ObjectInfo {
            url: format!("{scheme}://{bucket}/{}", e.key),
            bucket: bucket.to_owned(),
            key: e.key,
            size: e.size,
            etag: Some(e.etag),
            content_type: None,
            metadata: BTreeMap::new(),
            checksum: None,
            checksum_algorithm: e.checksum_algorithm.map(|a| a.as_str().to_owned()),
            is_dir: false,
            modified: Some(e.last_modified),
        }
    }

    fn dir(scheme: &str, bucket: &str, prefix: String) -> ObjectInfo {
        ObjectInfo {
            url: format!("{scheme}://{bucket}/{prefix}"),
            bucket: bucket.to_owned(),
            key: prefix,
            size: 0,
            etag: None,
            content_type: None,
            metadata: BTreeMap::new(),
            checksum: None,
            checksum_algorithm: None,
            is_dir: true,
            modified: None,
        }
    }
}

/// An iterator's tasks run on the runtime of the process that made it: in a forked
/// child they do not exist, and waiting for them would hang.
fn same_process(pid: u32) -> PyResult<()> {
    if pid == std::process::id() {
        Ok(())
    } else {
        Err(pyo3::exceptions::PyRuntimeError::new_err(
            "this iterator was made in another process (before a fork): make a new one in this process",
        ))
    }
}

type Entries = BoxStream<'static, Vec<Result<ObjectInfo, Error>>>;

/// Where an iterator's Rust state is between calls: taken out while a `__next__` (or an
/// `__anext__` awaitable) works on it, so no lock is held across a wait.
enum Slot<T> {
    Ready(T),
    Busy,
    Done,
}

struct IterState<T>(Mutex<Slot<T>>);

impl<T> IterState<T> {
    fn new(t: T) -> IterState<T> {
        IterState(Mutex::new(Slot::Ready(t)))
    }

    /// The state to work on; `None` when the iterator is exhausted.
    fn take(&self) -> PyResult<Option<T>> {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *slot, Slot::Busy) {
            Slot::Ready(t) => Ok(Some(t)),
            Slot::Done => {
                *slot = Slot::Done;
                Ok(None)
            }
            Slot::Busy => Err(pyo3::exceptions::PyRuntimeError::new_err(
                "this iterator is in use by another call, or an earlier call on it was interrupted",
            )),
        }
    }

    /// Gives the state back (`None`: exhausted).
    fn put(&self, t: Option<T>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = match t {
            Some(t) => Slot::Ready(t),
            None => Slot::Done,
        };
    }
}

/// A listing in progress: entries fetched but not yet handed out, and the stream.
pub(crate) struct ListState {
    ready: VecDeque<Result<ObjectInfo, Error>>,
    stream: Entries,
}

impl ListState {
    /// The next entry, fetching the next batch when none is ready; the state back
    /// (`None` once the listing ended).
    pub(crate) async fn next(mut self) -> (Option<ListState>, Option<Result<ObjectInfo, Error>>) {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return (Some(self), Some(item));
            }
            match self.stream.next().await {
                Some(batch) => self.ready.extend(batch),
                None => return (None, None),
            }
        }
    }
}

/// The iterator `list` returns: entries in key order, a batch fetched per wake-up.
/// Iterable with `for` and `async for`.
#[pyclass(frozen, module = "ferry", name = "ListIterator")]
pub struct ListIterator {
    pid: u32,
    state: IterState<ListState>,
}

#[pymethods]
impl ListIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<ObjectInfo> {
        same_process(self.pid)?;
        let Some(state) = self.state.take()? else { return Err(PyStopIteration::new_err(())) };
        let (state, item) = block_on(py, state.next())?;
        self.state.put(state);
        match item {
            Some(r) => r.map_err(|e| to_pyerr(py, e)),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The rest of the listing as an Arrow C stream (arrow.rs), for
    /// `pyarrow.RecordBatchReader.from_stream` and any reader of the Arrow PyCapsule
    /// interface; the iterator is used up by it. `requested_schema` is not honoured (the
    /// interface lets a producer keep its own).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = requested_schema;
        same_process(self.pid)?;
        let list = self.state.take()?;
        self.state.put(None);
        let stream = Box::into_raw(Box::new(crate::arrow::stream(runtime(py), list)));
        // SAFETY: a capsule over our boxed stream, named as the interface asks (a static
        // name); its destructor releases a stream nobody took and frees the box.
        unsafe {
            let capsule = pyo3::ffi::PyCapsule_New(
                stream as *mut std::ffi::c_void,
                c"arrow_array_stream".as_ptr(),
                Some(crate::arrow::drop_capsule),
            );
            if capsule.is_null() {
                drop(Box::from_raw(stream));
            }
            Bound::from_owned_ptr_or_err(py, capsule)
        }
    }

    /// The rest of the listing as a `pyarrow.Table` (key, size, last_modified, etag,
    /// is_dir), built in Arrow memory without a Python object per entry.
    fn to_arrow<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let reader = slf.py().import("pyarrow")?.getattr("RecordBatchReader")?.getattr("from_stream")?.call1((slf,))?;
        reader.call_method0("read_all")
    }

    /// The rest of the listing as a `pyarrow.RecordBatchReader`, a batch per up to
    /// 16,384 entries, fetched as it is read.
    fn to_arrow_reader<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py().import("pyarrow")?.getattr("RecordBatchReader")?.getattr("from_stream")?.call1((slf,))
    }

    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        same_process(me.pid)?;
        let state = me.state.take()?;
        let owner: Py<ListIterator> = slf.clone().unbind();
        awaitable(py, async move {
            let Some(state) = state else { return Err(PyStopAsyncIteration::new_err(())) };
            let (state, item) = state.next().await;
            Python::attach(|py| owner.bind(py).get().state.put(state));
            match item {
                Some(r) => py_result(r),
                None => Err(PyStopAsyncIteration::new_err(())),
            }
        })
    }
}

/// The next object of an open-ahead reader, whole; the reader back (`None` at the end).
async fn next_object(mut reader: OpenAhead) -> (Option<OpenAhead>, Option<Result<Bytes, Error>>) {
    match reader.next().await {
        Some(Ok(opened)) => (Some(reader), Some(collect_pooled(opened).await)),
        Some(Err(e)) => (Some(reader), Some(Err(e))),
        None => (None, None),
    }
}

/// An opened object's whole body, in memory from the buffer pool (pool.rs), as `get`'s
/// is: a loop over `iter_get` that drops each buffer hands its memory to the next object,
/// already touched. A fresh allocation per object left the freed ones to the allocator,
/// whose delayed purge kept some resident (the peak RSS of a 1 GiB `iter_get` was one
/// object higher in about half the runs; docs/lab/python-rows.md, "iter_get's peak").
async fn collect_pooled(opened: ferry_engine::OpenedObject) -> Result<Bytes, Error> {
    opened.collect_with(&crate::pool::Pooled).await
}

/// The iterator `iter_get` returns: one `Buffer` per URL, in order, opened ahead.
/// Iterable with `for` and `async for`.
#[pyclass(frozen, module = "ferry", name = "GetIterator")]
pub struct GetIterator {
    pid: u32,
    state: IterState<OpenAhead>,
}

#[pymethods]
impl GetIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Buffer> {
        same_process(self.pid)?;
        let Some(reader) = self.state.take()? else { return Err(PyStopIteration::new_err(())) };
        let (reader, item) = block_on(py, next_object(reader))?;
        self.state.put(reader);
        match item {
            Some(r) => r.map(Buffer::new).map_err(|e| to_pyerr(py, e)),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        same_process(me.pid)?;
        let reader = me.state.take()?;
        let owner: Py<GetIterator> = slf.clone().unbind();
        awaitable(py, async move {
            let Some(reader) = reader else { return Err(PyStopAsyncIteration::new_err(())) };
            let (reader, item) = next_object(reader).await;
            Python::attach(|py| owner.bind(py).get().state.put(reader));
            match item {
                Some(r) => py_result(r).map(Buffer::new),
                None => Err(PyStopAsyncIteration::new_err(())),
            }
        })
    }
}

/// A range being fetched in the background (`Client._get_range_ahead`); dropping it
/// aborts the fetch.
#[pyclass(frozen, module = "ferry", name = "PendingRange")]
pub struct PendingRange {
    pid: u32,
    #[pyo3(get)]
    start: u64,
    #[pyo3(get)]
    end: u64,
    task: Mutex<Option<tokio::task::JoinHandle<Result<Bytes, Error>>>>,
}

#[pymethods]
impl PendingRange {
    /// The bytes, waiting for them with the GIL released (once).
    fn result(&self, py: Python<'_>) -> PyResult<Buffer> {
        same_process(self.pid)?;
        let Some(task) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err("this range was already taken"));
        };
        match block_on(py, task)? {
            Ok(r) => r.map(Buffer::new).map_err(|e| to_pyerr(py, e)),
            Err(e) => Err(pyo3::exceptions::PyRuntimeError::new_err(format!("range task failed: {e}"))),
        }
    }
}

impl Drop for PendingRange {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            if self.pid == std::process::id() {
                task.abort();
            } else {
                // Made before a fork: its runtime's threads are the parent's (runtime.rs),
                // so nothing here may touch it; the parent aborts its own copy.
                std::mem::forget(task);
            }
        }
    }
}

/// A `callback(bytes_done, bytes_total)` fed from a tracker between waits: called when
/// the count moved, and once at the end. `bytes_total` is `None` while unknown.
fn reporter(
    callback: Option<Py<PyAny>>,
    progress: &ops::Tracker,
    total_known: Option<u64>,
) -> impl FnMut(Python<'_>) -> PyResult<()> {
    let progress = progress.clone();
    let mut last: Option<u64> = None;
    move |py| {
        let (Some(cb), Some(p)) = (&callback, &progress) else { return Ok(()) };
        let done = p.done.load(std::sync::atomic::Ordering::Relaxed);
        if last == Some(done) {
            return Ok(());
        }
        last = Some(done);
        let total = total_known.or_else(|| Some(p.total.load(std::sync::atomic::Ordering::Relaxed)).filter(|t| *t > 0));
        cb.call1(py, (done, total)).map(|_| ())
    }
}

/// The engine's progress function (bytes as they are sent) over a tracker.
fn progress_fn(progress: &ops::Tracker) -> Option<ferry_engine::ProgressFn> {
    let p = progress.clone()?;
    Some(Arc::new(move |n| {
        p.done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }))
}

/// A local path or object URL argument: `str` or `os.PathLike`.
fn path_arg(o: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = o.extract::<String>() {
        return Ok(s);
    }
    let p: PathBuf = o.extract().map_err(|_| PyTypeError::new_err("expected a path or URL (str or os.PathLike)"))?;
    Ok(p.to_string_lossy().into_owned())
}

/// A `callback(bytes_done, bytes_total)` for cp and sync, from the runner's byte counts.
fn transfer_reporter(callback: Option<Py<PyAny>>, prep: Arc<Prepared>) -> impl FnMut(Python<'_>) -> PyResult<()> {
    let mut last: Option<u64> = None;
    move |py| {
        let Some(cb) = &callback else { return Ok(()) };
        let (done, total) = prep.progress();
        if last == Some(done) {
            return Ok(());
        }
        last = Some(done);
        cb.call1(py, (done, Some(total).filter(|t| *t > 0))).map(|_| ())
    }
}

/// The summary of a finished cp or sync, or the exception for its first failure (with
/// the summary as its `summary`).
fn finish(
    py: Python<'_>,
    verb: &str,
    r: anyhow::Result<()>,
    tally: transfer::SharedTally,
) -> PyResult<TransferSummary> {
    let (summary, first) = TransferSummary::from_tally(tally);
    let err = match (r, first) {
        (Err(e), _) => from_anyhow(py, &e, format!("{verb}: {e:#}")),
        (Ok(()), Some(e)) => {
            let (what, why) = &summary.failed[0];
            let n = summary.failed.len();
            from_anyhow(
                py,
                &e,
                format!("{verb}: {n} of {} failed; the first: {what}: {why}", n as u64 + summary.objects),
            )
        }
        (Ok(()), None) => return Ok(summary),
    };
    err.value(py).setattr("summary", Py::new(py, summary)?)?;
    Err(err)
}

/// A planned cp or sync run on this thread (GIL released, `callback` fed between waits):
/// the sync twins' end.
fn run_planned(py: Python<'_>, verb: &str, planned: Planned, callback: Option<Py<PyAny>>) -> PyResult<TransferSummary> {
    let (prep, tally, work) = planned;
    let r = block_on_ticking(py, work, transfer_reporter(callback, prep))?;
    finish(py, verb, r, tally)
}

/// A planned cp or sync as an asyncio awaitable: the async twins' end.
fn await_planned<'py>(
    py: Python<'py>,
    verb: &'static str,
    planned: Planned,
    callback: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (prep, tally, work) = planned;
    let report = LoopReporter::for_transfer(py, callback, prep)?;
    awaitable(py, async move {
        let r = reporting(report, work).await;
        Python::attach(|py| finish(py, verb, r, tally))
    })
}

fn tracker(callback: &Option<Py<PyAny>>) -> ops::Tracker {
    callback.as_ref().map(|_| Arc::new(ops::Progress::default()))
}

/// `timeout`, `connect_timeout` (seconds, > 0) and `retries` (attempts, the first
/// included, >= 1; else `AWS_MAX_ATTEMPTS`, else the store's default) as the store takes
/// them. Checked when the client is made, so a bad value fails there.
fn request_limits(timeout: Option<f64>, connect_timeout: Option<f64>, retries: Option<u32>) -> PyResult<RequestLimits> {
    let secs = |name: &str, v: Option<f64>| -> PyResult<Option<Duration>> {
        v.map(|s| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| PyValueError::new_err(format!("{name}={s}: seconds, > 0")))
        })
        .transpose()
    };
    let max_attempts = match retries {
        Some(0) => return Err(PyValueError::new_err("retries=0: attempts, the first included, 1 or more")),
        Some(n) => Some(n),
        None => RequestLimits::attempts_from_env().map_err(PyValueError::new_err)?,
    };
    Ok(RequestLimits {
        read_timeout: secs("timeout", timeout)?,
        connect_timeout: secs("connect_timeout", connect_timeout)?,
        max_attempts,
    })
}

fn expires_of(expires: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(expires).map_err(|_| PyValueError::new_err(format!("expires={expires}: seconds, > 0")))
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (endpoint_url=None, region=None, profile=None, credentials=None, transport="auto", max_connections=None, timeout=None, connect_timeout=None, retries=None))]
    #[allow(clippy::too_many_arguments, reason = "the Python signature's keyword arguments")]
    fn new(
        py: Python<'_>,
        endpoint_url: Option<String>,
        region: Option<String>,
        profile: Option<String>,
        credentials: Option<&Bound<'_, PyAny>>,
        transport: &str,
        max_connections: Option<usize>,
        timeout: Option<f64>,
        connect_timeout: Option<f64>,
        retries: Option<u32>,
    ) -> PyResult<Client> {
        let creds = parse_creds(credentials)?;
        let limits = request_limits(timeout, connect_timeout, retries)?;
        let resolved_region = settings::region(region.as_deref(), profile.as_deref());
        let endpoint = settings::endpoint(endpoint_url.as_deref(), &resolved_region, profile.as_deref());
        let client = Client {
            endpoint_url,
            region,
            profile,
            creds,
            transport: transport.to_owned(),
            max_connections,
            limits,
            endpoint,
            state: Mutex::new(None),
            estimator: Mutex::new((std::process::id(), Arc::new(GapEstimator::new()))),
        };
        // Settings errors (a bad endpoint or transport, unreadable profile files) now, not
        // at the first call.
        client.engine(py)?;
        Ok(client)
    }

    /// The endpoint in force.
    #[getter]
    fn endpoint_url(&self) -> &str {
        &self.endpoint
    }

    fn __repr__(&self) -> String {
        format!("ferry.Client(endpoint_url={:?}, transport={:?})", self.endpoint, self.transport)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let me = slf.get();
        let creds: Py<PyAny> = match &me.creds {
            Creds::Default => py.None(),
            Creds::Anonymous => PyString::new(py, "anonymous").into_any().unbind(),
            Creds::Keys(c) => {
                let d = PyDict::new(py);
                d.set_item("access_key_id", &c.access_key_id)?;
                d.set_item("secret_access_key", &c.secret_access_key)?;
                d.set_item("session_token", &c.session_token)?;
                d.into_any().unbind()
            }
        };
        let args = (
            me.endpoint_url.clone(),
            me.region.clone(),
            me.profile.clone(),
            creds,
            me.transport.clone(),
            me.max_connections,
            me.limits.read_timeout.map(|d| d.as_secs_f64()),
            me.limits.connect_timeout.map(|d| d.as_secs_f64()),
            me.limits.max_attempts,
        );
        PyTuple::new(py, [slf.get_type().into_any(), args.into_pyobject(py)?.into_any()])
    }

    /// The whole object as a `Buffer` (a large one on its first GET, with ranged helpers
    /// when that is slow; verified), its memory from the buffer pool (pool.rs).
    #[pyo3(signature = (url, callback=None))]
    fn get(&self, py: Python<'_>, url: &str, callback: Option<Py<PyAny>>) -> PyResult<Buffer> {
        let (engine, object) = self.target(py, url)?;
        let progress = tracker(&callback);
        let tick = reporter(callback, &progress, None);
        let r = block_on_ticking(py, ops::get_object(engine, object, None, None, progress), tick)?;
        at(py, url, r).map(Buffer::new)
    }

    #[pyo3(signature = (url, callback=None))]
    fn get_async<'py>(&self, py: Python<'py>, url: &str, callback: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = self.target(py, url)?;
        let progress = tracker(&callback);
        let report = LoopReporter::new(py, callback, &progress, None)?;
        let url = url.to_owned();
        awaitable(py, async move {
            let got = reporting(report, ops::get_object(engine, object, None, None, progress)).await;
            py_result_at(&url, got).map(Buffer::new)
        })
    }

    /// The whole object written into `buffer`, a writable, contiguous buffer-protocol
    /// object of exactly the object's size (`bytearray`, a numpy array, a writable
    /// `memoryview`, an `mmap`); returns the bytes written. The same parts and checks as
    /// `get`, landing in the caller's memory, so a loop that reuses one buffer never
    /// pays the kernel's first touch of fresh pages.
    #[pyo3(signature = (url, buffer, callback=None))]
    fn get_into(
        &self,
        py: Python<'_>,
        url: &str,
        buffer: &Bound<'_, PyAny>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<u64> {
        let (engine, object) = self.target(py, url)?;
        let dest = lend(buffer)?;
        let progress = tracker(&callback);
        let tick = reporter(callback, &progress, None);
        let r = block_on_ticking(py, ops::get_object_into(engine, object, dest, progress), tick)?;
        at(py, url, r)
    }

    #[pyo3(signature = (url, buffer, callback=None))]
    fn get_into_async<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        buffer: &Bound<'py, PyAny>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = self.target(py, url)?;
        let dest = lend(buffer)?;
        let progress = tracker(&callback);
        let report = LoopReporter::new(py, callback, &progress, None)?;
        let url = url.to_owned();
        awaitable(py, async move {
            let got = reporting(report, ops::get_object_into(engine, object, dest, progress)).await;
            py_result_at(&url, got)
        })
    }

    /// Bytes `start..end` (end exclusive) of an object.
    fn get_range(&self, py: Python<'_>, url: &str, start: u64, end: u64) -> PyResult<Buffer> {
        let (engine, object) = self.target(py, url)?;
        let r = block_on(py, ops::get_range(engine, object, start, end, None))?;
        at(py, url, r).map(Buffer::new)
    }

    fn get_range_async<'py>(&self, py: Python<'py>, url: &str, start: u64, end: u64) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = self.target(py, url)?;
        let url = url.to_owned();
        awaitable(py, async move {
            py_result_at(&url, ops::get_range(engine, object, start, end, None).await).map(Buffer::new)
        })
    }

    /// `get_range` pinned to one version: fails with `Precondition` if the ETag changed
    /// (used by `open`'s file objects).
    #[pyo3(signature = (url, start, end, etag=None))]
    fn _get_range_if_match(
        &self,
        py: Python<'_>,
        url: &str,
        start: u64,
        end: u64,
        etag: Option<String>,
    ) -> PyResult<Buffer> {
        let (engine, object) = self.target(py, url)?;
        let r = block_on(py, ops::get_range(engine, object, start, end, etag))?;
        at(py, url, r).map(Buffer::new)
    }

    /// `_get_range_if_match` started now, its bytes taken later (`PendingRange.result`):
    /// the read-ahead of `open`'s file objects.
    #[pyo3(signature = (url, start, end, etag=None))]
    fn _get_range_ahead(
        &self,
        py: Python<'_>,
        url: &str,
        start: u64,
        end: u64,
        etag: Option<String>,
    ) -> PyResult<PendingRange> {
        let (engine, object) = self.target(py, url)?;
        let task = runtime(py).spawn(ops::get_range(engine, object, start, end, etag));
        Ok(PendingRange { pid: std::process::id(), start, end, task: Mutex::new(Some(task)) })
    }

    /// Many ranges of one object, coalesced into fewer GETs by the engine.
    #[pyo3(signature = (url_or_urls, starts, ends, max_gap=None))]
    fn get_ranges(
        &self,
        py: Python<'_>,
        url_or_urls: &Bound<'_, PyAny>,
        starts: Vec<u64>,
        ends: Vec<u64>,
        max_gap: Option<u64>,
    ) -> PyResult<Vec<Buffer>> {
        let (groups, n) = self.range_groups(py, url_or_urls, starts, ends)?;
        let opts = self.ranges_options(max_gap);
        let r = block_on(py, async move { ops::get_ranges_grouped(&groups, n, &opts).await })?;
        r.map(|parts| parts.into_iter().map(Buffer::new).collect()).map_err(|e| to_pyerr(py, e))
    }

    #[pyo3(signature = (url_or_urls, starts, ends, max_gap=None))]
    fn get_ranges_async<'py>(
        &self,
        py: Python<'py>,
        url_or_urls: &Bound<'py, PyAny>,
        starts: Vec<u64>,
        ends: Vec<u64>,
        max_gap: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (groups, n) = self.range_groups(py, url_or_urls, starts, ends)?;
        let opts = self.ranges_options(max_gap);
        awaitable(py, async move {
            let out = ops::get_ranges_grouped(&groups, n, &opts).await;
            Ok(py_result(out)?.into_iter().map(Buffer::new).collect::<Vec<_>>())
        })
    }

    /// Many objects, results in input order; items are URLs or `ObjectInfo` entries
    /// (whose sizes, or `sizes`, go with the GETs as size hints).
    #[pyo3(signature = (urls, max_bytes_in_flight=None, concurrency=None, return_exceptions=false, callback=None, sizes=None))]
    #[allow(clippy::too_many_arguments, reason = "the Python signature's keyword arguments")]
    fn get_many(
        &self,
        py: Python<'_>,
        urls: &Bound<'_, PyAny>,
        max_bytes_in_flight: Option<u64>,
        concurrency: Option<usize>,
        return_exceptions: bool,
        callback: Option<Py<PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
    ) -> PyResult<Py<PyList>> {
        let objects = self.sized_targets(py, urls, sizes)?;
        let budget = max_bytes_in_flight.map(ByteBudget::new);
        let progress = tracker(&callback);
        let tick = reporter(callback, &progress, None);
        let results = block_on_ticking(py, ops::get_many(objects, concurrency, budget, progress), tick)?;
        buffers(py, results, return_exceptions)
    }

    #[pyo3(signature = (urls, max_bytes_in_flight=None, concurrency=None, return_exceptions=false, callback=None, sizes=None))]
    #[allow(clippy::too_many_arguments, reason = "the Python signature's keyword arguments")]
    fn get_many_async<'py>(
        &self,
        py: Python<'py>,
        urls: &Bound<'py, PyAny>,
        max_bytes_in_flight: Option<u64>,
        concurrency: Option<usize>,
        return_exceptions: bool,
        callback: Option<Py<PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let objects = self.sized_targets(py, urls, sizes)?;
        let budget = max_bytes_in_flight.map(ByteBudget::new);
        let progress = tracker(&callback);
        let report = LoopReporter::new(py, callback, &progress, None)?;
        awaitable(py, async move {
            let results = reporting(report, ops::get_many(objects, concurrency, budget, progress)).await;
            Python::attach(|py| buffers(py, results, return_exceptions))
        })
    }

    /// The objects in order, the next ones opened ahead (bounded memory).
    fn iter_get(&self, py: Python<'_>, urls: &Bound<'_, PyAny>) -> PyResult<GetIterator> {
        let objects = self.targets(py, urls)?;
        let engine = match objects.first() {
            Some((first, _)) => {
                if objects.iter().any(|(e, _)| e.provider() != first.provider()) {
                    return Err(PyValueError::new_err("iter_get reads from one provider per call"));
                }
                first.clone()
            }
            None => self.engine(py)?,
        };
        let objects = objects.into_iter().map(|(_, o)| o).collect();
        let reader = enter(py, || OpenAhead::from_list(&engine, objects, OpenAheadOptions::default()));
        Ok(GetIterator { pid: std::process::id(), state: IterState::new(reader) })
    }

    /// Stores `data`: bytes-like, a path (`str` or `os.PathLike`), a binary file object,
    /// or an iterable of bytes-like chunks. Multipart when large.
    #[pyo3(signature = (url, data, if_not_exists=false, callback=None))]
    fn put(
        &self,
        py: Python<'_>,
        url: &str,
        data: &Bound<'_, PyAny>,
        if_not_exists: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<PutResult> {
        let (engine, object) = self.target(py, url)?;
        let progress = tracker(&callback);
        if let Some((source, total)) = put_source(data, if_not_exists)? {
            let tick = reporter(callback, &progress, total);
            let r = block_on_ticking(py, put_known(engine, object, source, if_not_exists, progress), tick)?;
            return at(py, url, r);
        }
        put_streamed(py, engine, object, ChunkSource::new(data)?, progress, callback)
    }

    /// `put`, awaitable: bytes-like data and paths; file objects and iterables are read
    /// on the runtime's blocking threads.
    #[pyo3(signature = (url, data, if_not_exists=false, callback=None))]
    fn put_async<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        data: &Bound<'py, PyAny>,
        if_not_exists: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = self.target(py, url)?;
        let progress = tracker(&callback);
        if let Some((source, total)) = put_source(data, if_not_exists)? {
            let report = LoopReporter::new(py, callback, &progress, total)?;
            return awaitable(py, async move {
                py_result(reporting(report, put_known(engine, object, source, if_not_exists, progress)).await)
            });
        }
        let source = ChunkSource::new(data)?;
        let report = LoopReporter::new(py, callback, &progress, None)?;
        awaitable(py, async move { reporting(report, put_chunks_async(engine, object, source, progress)).await })
    }

    fn head(&self, py: Python<'_>, url: &str) -> PyResult<ObjectInfo> {
        let (engine, object) = self.target(py, url)?;
        let provider = engine.provider();
        let o = object.clone();
        let r = block_on(py, async move { engine.head(&o).await })?;
        at(py, url, r).map(|info| ObjectInfo::from_head(provider, &object, info))
    }

    fn head_async<'py>(&self, py: Python<'py>, url: &str) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = self.target(py, url)?;
        let provider = engine.provider();
        awaitable(py, async move {
            let info = py_result(engine.head(&object).await)?;
            Ok(ObjectInfo::from_head(provider, &object, info))
        })
    }

    /// Entries under a prefix, in key order. Not recursive: one level, with "directories"
    /// (`is_dir`); recursive: every object, listed in parallel key ranges.
    #[pyo3(signature = (url_prefix, recursive=false))]
    fn list(&self, py: Python<'_>, url_prefix: &str, recursive: bool) -> PyResult<ListIterator> {
        let u = self.url(url_prefix)?;
        let engine = self.engine_for(py, u.provider)?;
        let (bucket, scheme) = (u.bucket.clone(), u.provider.scheme());
        let entries: Entries = if recursive {
            let opts = ferry_engine::ListOptions::default();
            ferry_engine::list_parallel(&engine, &u.bucket, &u.key, &opts)
                .map(move |r| r.map(|e| ObjectInfo::from_entry(scheme, &bucket, e)))
                .ready_chunks(LIST_BATCH)
                .boxed()
        } else {
            let params = ListParams {
                prefix: Some(u.key.clone()).filter(|k| !k.is_empty()),
                delimiter: Some("/".into()),
                ..ListParams::default()
            };
            engine
                .list(&u.bucket, params)
                .map(move |page| match page {
                    Ok(p) => {
                        let mut items: Vec<Result<ObjectInfo, Error>> = Vec::new();
                        let mut objects = p.objects.into_iter().peekable();
                        let mut dirs = p.common_prefixes.into_iter().peekable();
                        // Both are in key order: merge them.
                        loop {
                            let take_dir = match (objects.peek(), dirs.peek()) {
                                (Some(o), Some(d)) => d < &o.key,
                                (None, Some(_)) => true,
                                (_, None) => false,
                            };
                            if take_dir {
                                items.push(Ok(ObjectInfo::dir(scheme, &bucket, dirs.next().expect("peeked"))));
                            } else if let Some(o) = objects.next() {
                                items.push(Ok(ObjectInfo::from_entry(scheme, &bucket, o)));
                            } else {
                                break;
                            }
                        }
                        items
                    }
                    Err(e) => vec![Err(e)],
                })
                .boxed()
        };
        Ok(ListIterator {
            pid: std::process::id(),
            state: IterState::new(ListState { ready: VecDeque::new(), stream: entries }),
        })
    }

    /// Deletes one object, or many (batched, in parallel). Deleting a missing object
    /// succeeds.
    fn delete(&self, py: Python<'_>, url_or_urls: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(url) = url_or_urls.extract::<String>() {
            let (engine, object) = self.target(py, &url)?;
            let r = block_on(py, async move { engine.delete(&object).await })?;
            return at(py, &url, r);
        }
        // Batches per provider and bucket; the engines kept beside, in first-seen order.
        let mut by_bucket: BTreeMap<(String, String), (Engine, Vec<String>)> = BTreeMap::new();
        for (engine, o) in self.targets(py, url_or_urls)? {
            let place = (engine.provider().scheme().to_owned(), o.bucket);
            by_bucket.entry(place).or_insert_with(|| (engine, Vec::new())).1.push(o.key);
        }
        let failures = block_on(py, async move {
            let mut failed = Vec::new();
            for ((scheme, bucket), (engine, keys)) in by_bucket {
                let opts = ferry_engine::DeleteOptions::default();
                let report = ferry_engine::delete_many(&engine, &bucket, stream::iter(keys), &opts).await;
                failed.extend(report.failed.into_iter().map(|f| (format!("{scheme}://{bucket}"), f)));
            }
            failed
        })?;
        if let Some((bucket, first)) = failures.first() {
            let e = Error::Service {
                status: 0,
                code: first.code.clone(),
                message: format!(
                    "{} of the objects were not deleted; {bucket}/{}: {}",
                    failures.len(),
                    first.key,
                    first.message
                ),
                request_id: None,
            };
            return Err(to_pyerr(py, e));
        }
        Ok(())
    }

    /// Server-side copy (in parts when large).
    fn copy(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        let what = format!("{src} to {dst}");
        let ((engine, src), (dst_engine, dst)) = (self.target(py, src)?, self.target(py, dst)?);
        if engine.provider() != dst_engine.provider() {
            return Err(PyValueError::new_err("copy is server-side, within one provider: use get and put between two"));
        }
        let r = block_on(py, async move {
            ferry_engine::copy::copy_object(&engine, &src, &dst, None, &Default::default(), None).await
        })?;
        at(py, &what, r).map(|_| ())
    }

    /// A URL anyone can GET the object with for `expires` seconds (at most 7 days).
    #[pyo3(signature = (url, expires=3600.0))]
    fn presign(&self, py: Python<'_>, url: &str, expires: f64) -> PyResult<String> {
        let (engine, object) = self.target(py, url)?;
        let expires = expires_of(expires)?;
        // The store's async presign: Azure with an Entra token asks for a user delegation
        // key first; the others sign locally.
        let r = block_on(py, async move { engine.store().presign(&object, expires).await })?;
        r.map_err(|e| to_pyerr(py, e))
    }

    /// A read-only binary file object over the object (ferry/_file.py), pinned to the
    /// version it opened.
    #[pyo3(signature = (url, block_size=None))]
    fn open<'py>(slf: &Bound<'py, Self>, url: &str, block_size: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
        slf.get().target(slf.py(), url)?;
        let class = slf.py().import("ferry._file")?.getattr("ObjectFile")?;
        match block_size {
            Some(n) => class.call1((slf, url, n)),
            None => class.call1((slf, url)),
        }
    }

    /// Copies files and objects, as `ferry cp` (transfer.rs): local -> object store,
    /// object store -> local (atomic, resumable), or server side; one item, several
    /// sources (`src` a list), or what is under a directory or prefix (`recursive`).
    #[pyo3(signature = (src, dst, recursive=false, resume=true, content_type=None, concurrency=None, part_size=None, callback=None))]
    #[allow(clippy::too_many_arguments)]
    fn cp(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        recursive: bool,
        resume: bool,
        content_type: Option<String>,
        concurrency: Option<usize>,
        part_size: Option<u64>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<TransferSummary> {
        let opts = TransferOptions { resume, content_type, concurrency, part_size, ..Default::default() };
        run_planned(py, "cp", self.plan_cp(py, src, dst, recursive, &opts)?, callback)
    }

    /// `cp`, awaitable (`callback` as in `get_async`).
    #[pyo3(signature = (src, dst, recursive=false, resume=true, content_type=None, concurrency=None, part_size=None, callback=None))]
    #[allow(clippy::too_many_arguments)]
    fn cp_async<'py>(
        &self,
        py: Python<'py>,
        src: &Bound<'py, PyAny>,
        dst: &Bound<'py, PyAny>,
        recursive: bool,
        resume: bool,
        content_type: Option<String>,
        concurrency: Option<usize>,
        part_size: Option<u64>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = TransferOptions { resume, content_type, concurrency, part_size, ..Default::default() };
        await_planned(py, "cp", self.plan_cp(py, src, dst, recursive, &opts)?, callback)
    }

    /// Makes `dst` like `src` (directories or prefixes), as `ferry sync`: copies what
    /// the destination lacks or has different, and with `delete` removes what the
    /// source lacks (transfer.rs).
    #[pyo3(signature = (src, dst, delete=false, checksum=false, dry_run=false, size_only=false, concurrency=None, part_size=None, callback=None))]
    #[allow(clippy::too_many_arguments)]
    fn sync(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        delete: bool,
        checksum: bool,
        dry_run: bool,
        size_only: bool,
        concurrency: Option<usize>,
        part_size: Option<u64>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<TransferSummary> {
        let flags = SyncFlags { delete, checksum, dry_run, size_only, concurrency, part_size };
        run_planned(py, "sync", self.plan_sync(py, src, dst, flags)?, callback)
    }

    /// `sync`, awaitable (`callback` as in `get_async`).
    #[pyo3(signature = (src, dst, delete=false, checksum=false, dry_run=false, size_only=false, concurrency=None, part_size=None, callback=None))]
    #[allow(clippy::too_many_arguments)]
    fn sync_async<'py>(
        &self,
        py: Python<'py>,
        src: &Bound<'py, PyAny>,
        dst: &Bound<'py, PyAny>,
        delete: bool,
        checksum: bool,
        dry_run: bool,
        size_only: bool,
        concurrency: Option<usize>,
        part_size: Option<u64>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let flags = SyncFlags { delete, checksum, dry_run, size_only, concurrency, part_size };
        await_planned(py, "sync", self.plan_sync(py, src, dst, flags)?, callback)
    }

    /// Counters of this process's client: the transports' (connections, requests,
    /// re-sends, hedges; summed over the providers used), the S3 endpoint's adaptive
    /// concurrency controller's, and requests by operation for every provider.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let engine = self.engine(py)?;
        let t = self.transport_stats();
        let c = engine.controller().stats();
        let d = PyDict::new(py);
        d.set_item("transport", engine.transport().name())?;
        d.set_item("connections_opened", t.connections_opened)?;
        d.set_item("connections_open", t.connections_open)?;
        d.set_item("requests_sent", t.requests_sent)?;
        d.set_item("requests_resent", t.requests_resent)?;
        d.set_item("hedges_sent", t.hedges_sent)?;
        d.set_item("hedges_won", t.hedges_won)?;
        d.set_item("concurrency_limit", c.limit)?;
        d.set_item("in_flight", c.in_flight)?;
        d.set_item("throttles", c.throttles)?;
        d.set_item("head_latency_median_s", c.head_latency_median.as_secs_f64())?;
        d.set_item("goodput_best_bytes_per_s", c.goodput_best)?;
        let counted = self.counters(py)?.map(|c| c.snapshot());
        let by_type = PyDict::new(py);
        for (i, op) in OPERATIONS.iter().enumerate() {
            by_type.set_item(op, counted.as_ref().map_or(0, |s| s.requests[i].1))?;
        }
        d.set_item("requests", by_type)?;
        d.set_item("retries", counted.as_ref().map_or(0, |s| s.retryable))?;
        d.set_item("bytes_in", counted.as_ref().map_or(0, |s| s.bytes_in))?;
        d.set_item("bytes_out", counted.as_ref().map_or(0, |s| s.bytes_out))?;
        d.set_item("first_byte_p50_s", counted.as_ref().and_then(|s| s.first_byte_p50_s))?;
        d.set_item("first_byte_p95_s", counted.as_ref().and_then(|s| s.first_byte_p95_s))?;
        Ok(d)
    }

    fn create_bucket(&self, py: Python<'_>, name: String) -> PyResult<()> {
        let engine = self.engine(py)?;
        let r = block_on(py, async move { engine.create_bucket(&name).await })?;
        r.map_err(|e| to_pyerr(py, e))
    }

    fn delete_bucket(&self, py: Python<'_>, name: String) -> PyResult<()> {
        let engine = self.engine(py)?;
        let r = block_on(py, async move { engine.delete_bucket(&name).await })?;
        r.map_err(|e| to_pyerr(py, e))
    }
}

/// A file object's `read` or an iterable's iterator: the data of `put` and `put_async`
/// read as it goes.
enum ChunkSource {
    Read(Py<PyAny>),
    Iter(Py<PyAny>),
}

impl ChunkSource {
    fn new(data: &Bound<'_, PyAny>) -> PyResult<ChunkSource> {
        if data.hasattr("read")? {
            return Ok(ChunkSource::Read(data.getattr("read")?.unbind()));
        }
        let it = data.try_iter().map_err(|_| {
            PyTypeError::new_err("put data: bytes-like, a path, a binary file object, or an iterable of bytes")
        })?;
        Ok(ChunkSource::Iter(it.into_any().unbind()))
    }

    /// The next chunk (`None` at the end), read with the GIL held.
    fn next(&self, py: Python<'_>) -> PyResult<Option<Bytes>> {
        loop {
            match self {
                ChunkSource::Read(read) => {
                    let chunk = bytes_of(read.bind(py).call1((READ_CHUNK,))?.as_any())?;
                    return Ok(Some(chunk).filter(|c| !c.is_empty()));
                }
                ChunkSource::Iter(it) => match it.bind(py).call_method0("__next__") {
                    Ok(c) => {
                        let chunk = bytes_of(&c)?;
                        if !chunk.is_empty() {
                            return Ok(Some(chunk));
                        }
                    }
                    Err(e) if e.is_instance_of::<PyStopIteration>(py) => return Ok(None),
                    Err(e) => return Err(e),
                },
            }
        }
    }
}

/// The chunks sent into a streamed upload: 4 in the channel at most, so a reader ahead
/// of the network holds 4 MiB (`READ_CHUNK`) beside the part being cut.
type ChunkSender = tokio::sync::mpsc::Sender<std::io::Result<Bytes>>;

/// An upload of what comes through a channel (multipart once past one part), to be
/// spawned; an `Err` sent fails it (aborting any multipart upload it started).
fn channel_upload(
    engine: Engine,
    object: ObjectRef,
    progress: &ops::Tracker,
) -> (ChunkSender, impl std::future::Future<Output = Result<ferry_engine::UploadOutput, Error>> + Send + 'static) {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let body = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) }).boxed();
    let params = ferry_engine::UploadParams { resume: false, ..Default::default() };
    let on_bytes = progress_fn(progress);
    (tx, async move { ferry_engine::upload_stream(&engine, body, &object, &params, on_bytes).await })
}

/// What fails an upload whose Python source raised.
fn source_raised() -> std::io::Result<Bytes> {
    Err(std::io::Error::other("the Python data source raised"))
}

/// `put_async` from a file object or an iterable: each chunk is read on a blocking thread
/// of the runtime (the GIL taken there, the event loop's thread left free) and handed to
/// the upload through a small channel, as `put` does from the calling thread.
async fn put_chunks_async(
    engine: Engine,
    object: ObjectRef,
    source: ChunkSource,
    progress: ops::Tracker,
) -> PyResult<PutResult> {
    let (tx, upload) = channel_upload(engine, object, &progress);
    let upload = tokio::spawn(upload);
    let source = Arc::new(source);
    let mut failure = None;
    loop {
        let src = source.clone();
        let chunk = tokio::task::spawn_blocking(move || Python::attach(|py| src.next(py)))
            .await
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("a read task failed: {e}")))?;
        match chunk {
            Ok(Some(c)) => {
                if tx.send(Ok(c)).await.is_err() {
                    break; // the upload ended (failed): its error is below
                }
            }
            Ok(None) => break,
            Err(e) => {
                // Fail the upload (it aborts any multipart upload it started), then raise.
                let _ = tx.send(source_raised()).await;
                failure = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let out = upload.await.map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("upload task failed: {e}")));
    if let Some(e) = failure {
        return Err(e);
    }
    let out = py_result(out?)?;
    Ok(PutResult { etag: out.etag, size: out.size, parts: out.parts })
}

/// A `callback(bytes_done, bytes_total)` for an async call: called on the event loop's
/// thread (`call_soon_threadsafe`) every [`ASYNC_TICK`] while the count moves, and once
/// at the end, before the awaitable's result is set, so the last call precedes the
/// `await`'s return. An exception it raises goes to the loop's exception handler; it
/// does not stop the call (a sync call's callback does).
struct LoopReporter {
    event_loop: Py<PyAny>,
    callback: Py<PyAny>,
    /// Bytes done and the total when known.
    read: Box<dyn Fn() -> (u64, Option<u64>) + Send + Sync>,
    last: std::sync::atomic::AtomicU64,
}

/// How often an async call's progress is looked at: as a sync call's (runtime.rs).
const ASYNC_TICK: Duration = Duration::from_millis(100);

impl LoopReporter {
    fn new(
        py: Python<'_>,
        callback: Option<Py<PyAny>>,
        progress: &ops::Tracker,
        total_known: Option<u64>,
    ) -> PyResult<Option<Arc<LoopReporter>>> {
        let (Some(callback), Some(progress)) = (callback, progress.clone()) else { return Ok(None) };
        let read = move || {
            use std::sync::atomic::Ordering::Relaxed;
            let total = total_known.or_else(|| Some(progress.total.load(Relaxed)).filter(|t| *t > 0));
            (progress.done.load(Relaxed), total)
        };
        LoopReporter::with(py, callback, Box::new(read))
    }

    /// For cp and sync: the runner's counts (transfer.rs).
    fn for_transfer(
        py: Python<'_>,
        callback: Option<Py<PyAny>>,
        prep: Arc<Prepared>,
    ) -> PyResult<Option<Arc<LoopReporter>>> {
        let Some(callback) = callback else { return Ok(None) };
        let read = move || {
            let (done, total) = prep.progress();
            (done, Some(total).filter(|t| *t > 0))
        };
        LoopReporter::with(py, callback, Box::new(read))
    }

    #[allow(clippy::type_complexity)]
    fn with(
        py: Python<'_>,
        callback: Py<PyAny>,
        read: Box<dyn Fn() -> (u64, Option<u64>) + Send + Sync>,
    ) -> PyResult<Option<Arc<LoopReporter>>> {
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?.unbind();
        let last = std::sync::atomic::AtomicU64::new(u64::MAX);
        Ok(Some(Arc::new(LoopReporter { event_loop, callback, read, last })))
    }

    fn report(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let (done, total) = (self.read)();
        if self.last.swap(done, Relaxed) == done {
            return;
        }
        Python::attach(|py| {
            let cb = self.callback.clone_ref(py);
            if let Err(e) = self.event_loop.call_method1(py, "call_soon_threadsafe", (cb, done, total)) {
                // The loop is closed: nobody is waiting for the call any more.
                e.write_unraisable(py, None);
            }
        });
    }
}

/// `fut`, with `report`'s callback fed while it runs and once at its end.
async fn reporting<F: std::future::Future>(report: Option<Arc<LoopReporter>>, fut: F) -> F::Output {
    let Some(report) = report else { return fut.await };
    let ticker = {
        let report = report.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ASYNC_TICK).await;
                report.report();
            }
        })
    };
    let out = fut.await;
    ticker.abort();
    report.report();
    out
}

/// `put` from a file object or an iterable: Python reads chunks (GIL held), Rust
/// uploads them as they come (multipart once past one part), through a small channel
/// whose sends wait with the GIL released.
fn put_streamed(
    py: Python<'_>,
    engine: Engine,
    object: ObjectRef,
    source: ChunkSource,
    progress: ops::Tracker,
    callback: Option<Py<PyAny>>,
) -> PyResult<PutResult> {
    let (tx, upload) = channel_upload(engine, object, &progress);
    let mut tick = reporter(callback, &progress, None);
    let task = runtime(py).spawn(upload);
    let mut failure: Option<PyErr> = None;
    loop {
        let chunk = match source.next(py) {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        match crate::runtime::detach(py, || tx.blocking_send(Ok(chunk))) {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break, // the upload ended (failed): its error is below
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        if let Err(e) = tick(py) {
            failure = Some(e);
            break;
        }
    }
    if failure.is_some() {
        // Fail the upload (it aborts any multipart upload it started), then raise.
        let _ = py.detach(|| tx.blocking_send(source_raised()));
    }
    drop(tx);
    let r = block_on_ticking(py, task, tick)?;
    if let Some(e) = failure {
        return Err(e);
    }
    match r {
        Ok(Ok(out)) => Ok(PutResult { etag: out.etag, size: out.size, parts: out.parts }),
        Ok(Err(e)) => Err(to_pyerr(py, e)),
        Err(e) => Err(pyo3::exceptions::PyRuntimeError::new_err(format!("upload task failed: {e}"))),
    }
}
