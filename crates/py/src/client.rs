//! `ferry.Client`: the Python face of one endpoint's engine.
//!
//! ```text
//! Client(settings) ─► per process: connect(Provider::S3, StoreOptions) ─► Engine
//!   method(url, ...) ─► StoreUrl::parse (bad URL: ValueError) ─► ops.rs / the engine
//!                    ─► sync: runtime::block_on (GIL released) | *_async: asyncio awaitable
//! ```
//!
//! The engine is rebuilt in a forked child (its connections belong to the parent's
//! runtime, whose threads the child does not have): the client keeps the pid that built
//! it, and the lock around it is only taken with the GIL held (runtime.rs). Pickling
//! sends the settings the client was made with, so a worker process builds its own.

use crate::buffer::Buffer;
use crate::errors::{at, bad_url, py_result, py_result_at, to_pyerr};
use crate::runtime::{awaitable, block_on, block_on_ticking, enter, runtime};
use crate::{ops, settings};
use bytes::Bytes;
use ferry_engine::{ByteBudget, CoalescePolicy, Engine, GapEstimator, OpenAhead, OpenAheadOptions, RangesOptions};
use ferry_store::{
    Credentials, CredentialsSource, Error, ListParams, Mode, ObjectEntry, ObjectInfo as StoreInfo, ObjectRef,
    ObjectStoreExt, Provider, PutParams, PutPayload, StoreOptions, StoreUrl, UrlError,
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

/// Objects in flight in `get_many` by default, as the command line's `--concurrency`:
/// enough to hide S3's ~30 ms first byte behind 16 KiB objects (docs/lab/README.md, profiles).
const DEFAULT_CONCURRENCY: usize = 64;
/// Bytes read from a file object per chunk handed to Rust: 1 MiB, so a chunk's hand-off
/// (a channel send, the GIL released and taken back) is small beside its bytes, while the
/// upload's 8 MiB parts are cut from a few chunks and the channel (4 chunks) holds little.
const READ_CHUNK: usize = 1024 * 1024;
/// Listing entries handed to Python per wake-up of the listing task: S3's page (1,000
/// keys), so a wake-up usually brings a whole page.
const LIST_BATCH: usize = 1000;

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
    /// The endpoint in force (endpoint_url, or the AWS settings chain).
    endpoint: String,
    state: Mutex<Option<(u32, Engine)>>,
    estimator: Arc<GapEstimator>,
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
    /// This process's engine (module note).
    fn engine(&self, py: Python<'_>) -> PyResult<Engine> {
        let pid = std::process::id();
        let mut slot = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((p, e)) = slot.as_ref() {
            if *p == pid {
                return Ok(e.clone());
            }
        }
        if let Some(old) = slot.take() {
            // The parent's engine: its connections' tasks are not in this process.
            std::mem::forget(old);
        }
        let engine = self.build(py)?;
        *slot = Some((pid, engine.clone()));
        Ok(engine)
    }

    fn build(&self, py: Python<'_>) -> PyResult<Engine> {
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
        let options = StoreOptions {
            endpoint: Some(self.endpoint.clone()),
            region: Some(settings::region(self.region.as_deref(), self.profile.as_deref())),
            credentials,
            mode,
            ca_file: settings::ca_bundle(),
            max_connections: self.max_connections,
        };
        let store = enter(py, || ferry_store::connect(Provider::S3, options)).map_err(|e| to_pyerr(py, e))?;
        Ok(enter(py, || Engine::new(store)))
    }

    fn object(&self, url: &str) -> PyResult<ObjectRef> {
        let u = self.url(url)?;
        if u.key.is_empty() {
            return Err(bad_url(url, "names a bucket, not an object"));
        }
        Ok(u.object())
    }

    fn url(&self, url: &str) -> PyResult<StoreUrl> {
        let u = StoreUrl::parse(url).map_err(|e| match e {
            UrlError::NotAUrl(_) => bad_url(url, "not an object URL like s3://bucket/key"),
            e => bad_url(url, e),
        })?;
        if u.provider != Provider::S3 {
            return Err(bad_url(url, format!("{}:// is not built into this ferry yet", u.provider.scheme())));
        }
        Ok(u)
    }

    fn urls(&self, urls: &Bound<'_, PyAny>) -> PyResult<Vec<ObjectRef>> {
        if urls.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err("expected a list of URLs, not one string"));
        }
        urls.try_iter()?.map(|u| self.object(&u?.extract::<String>()?)).collect()
    }

    /// The engine's options; `max_gap` (bytes read through between two ranges rather
    /// than sending another GET) replaces the policy its estimator would choose.
    /// The ranges grouped by object: one URL for all, or one URL per range.
    fn range_groups(
        &self,
        url_or_urls: &Bound<'_, PyAny>,
        starts: Vec<u64>,
        ends: Vec<u64>,
    ) -> PyResult<(Vec<ops::RangeGroup>, usize)> {
        let ranges = ranges_of(starts, ends)?;
        let n = ranges.len();
        if let Ok(url) = url_or_urls.extract::<String>() {
            let group = ops::RangeGroup { object: self.object(&url)?, slots: (0..n).collect(), ranges };
            return Ok((vec![group], n));
        }
        let objects = self.urls(url_or_urls)?;
        if objects.len() != n {
            return Err(PyValueError::new_err(format!("{} URLs but {n} ranges", objects.len())));
        }
        let mut groups: Vec<ops::RangeGroup> = Vec::new();
        let mut index: std::collections::HashMap<ObjectRef, usize> = std::collections::HashMap::new();
        for (slot, (object, range)) in objects.into_iter().zip(ranges).enumerate() {
            let g = *index.entry(object.clone()).or_insert_with(|| {
                groups.push(ops::RangeGroup { object, slots: Vec::new(), ranges: Vec::new() });
                groups.len() - 1
            });
            groups[g].slots.push(slot);
            groups[g].ranges.push(range);
        }
        Ok((groups, n))
    }

    fn ranges_options(&self, max_gap: Option<u64>) -> RangesOptions {
        let mut opts = RangesOptions { estimator: self.estimator.clone(), ..RangesOptions::default() };
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

fn put_source(data: &Bound<'_, PyAny>) -> PyResult<Option<PutSource>> {
    if data.is_instance_of::<PyString>() || data.hasattr("__fspath__")? {
        let p: PathBuf = data.extract()?;
        return Ok(Some(PutSource::Path(p)));
    }
    match bytes_of(data) {
        Ok(b) => Ok(Some(PutSource::Bytes(b))),
        Err(_) => Ok(None),
    }
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
    fn from_head(object: &ObjectRef, info: StoreInfo) -> ObjectInfo {
        let checksum = info.checksums.first().cloned();
        ObjectInfo {
            url: format!("s3://{}/{}", object.bucket, object.key),
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

    fn from_entry(bucket: &str, e: ObjectEntry) -> ObjectInfo {
        ObjectInfo {
            url: format!("s3://{bucket}/{}", e.key),
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

    fn dir(bucket: &str, prefix: String) -> ObjectInfo {
        ObjectInfo {
            url: format!("s3://{bucket}/{prefix}"),
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
struct ListState {
    ready: VecDeque<Result<ObjectInfo, Error>>,
    stream: Entries,
}

impl ListState {
    /// The next entry, fetching the next batch when none is ready; the state back
    /// (`None` once the listing ended).
    async fn next(mut self) -> (Option<ListState>, Option<Result<ObjectInfo, Error>>) {
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
        Some(Ok(opened)) => (Some(reader), Some(opened.collect().await)),
        Some(Err(e)) => (Some(reader), Some(Err(e))),
        None => (None, None),
    }
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
            task.abort();
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

fn tracker(callback: &Option<Py<PyAny>>) -> ops::Tracker {
    callback.as_ref().map(|_| Arc::new(ops::Progress::default()))
}

fn expires_of(expires: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(expires).map_err(|_| PyValueError::new_err(format!("expires={expires}: seconds, > 0")))
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (endpoint_url=None, region=None, profile=None, credentials=None, transport="auto", max_connections=None))]
    fn new(
        py: Python<'_>,
        endpoint_url: Option<String>,
        region: Option<String>,
        profile: Option<String>,
        credentials: Option<&Bound<'_, PyAny>>,
        transport: &str,
        max_connections: Option<usize>,
    ) -> PyResult<Client> {
        let creds = parse_creds(credentials)?;
        let resolved_region = settings::region(region.as_deref(), profile.as_deref());
        let endpoint = settings::endpoint(endpoint_url.as_deref(), &resolved_region, profile.as_deref());
        let client = Client {
            endpoint_url,
            region,
            profile,
            creds,
            transport: transport.to_owned(),
            max_connections,
            endpoint,
            state: Mutex::new(None),
            estimator: Arc::new(GapEstimator::new()),
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
        );
        PyTuple::new(py, [slf.get_type().into_any(), args.into_pyobject(py)?.into_any()])
    }

    /// The whole object as a `Buffer` (large objects in parallel ranged GETs, verified).
    #[pyo3(signature = (url, callback=None))]
    fn get(&self, py: Python<'_>, url: &str, callback: Option<Py<PyAny>>) -> PyResult<Buffer> {
        let (engine, object) = (self.engine(py)?, self.object(url)?);
        let progress = tracker(&callback);
        let tick = reporter(callback, &progress, None);
        let r = block_on_ticking(py, ops::get_object(engine, object, None, progress), tick)?;
        at(py, url, r).map(Buffer::new)
    }

    fn get_async<'py>(&self, py: Python<'py>, url: &str) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = (self.engine(py)?, self.object(url)?);
        let url = url.to_owned();
        awaitable(
            py,
            async move { py_result_at(&url, ops::get_object(engine, object, None, None).await).map(Buffer::new) },
        )
    }

    /// Bytes `start..end` (end exclusive) of an object.
    fn get_range(&self, py: Python<'_>, url: &str, start: u64, end: u64) -> PyResult<Buffer> {
        let (engine, object) = (self.engine(py)?, self.object(url)?);
        let r = block_on(py, ops::get_range(engine, object, start, end, None))?;
        at(py, url, r).map(Buffer::new)
    }

    fn get_range_async<'py>(&self, py: Python<'py>, url: &str, start: u64, end: u64) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = (self.engine(py)?, self.object(url)?);
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
        let (engine, object) = (self.engine(py)?, self.object(url)?);
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
        let (engine, object) = (self.engine(py)?, self.object(url)?);
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
        let (engine, (groups, n)) = (self.engine(py)?, self.range_groups(url_or_urls, starts, ends)?);
        let opts = self.ranges_options(max_gap);
        // The engine's get_ranges future is not `Send` to the compiler (a higher-ranked
        // closure inside it), so it runs on this thread, in the runtime, GIL released.
        let rt = runtime(py);
        let r = py.detach(move || rt.block_on(ops::get_ranges_grouped(&engine, &groups, n, &opts)));
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
        let (engine, (groups, n)) = (self.engine(py)?, self.range_groups(url_or_urls, starts, ends)?);
        let opts = self.ranges_options(max_gap);
        awaitable(py, async move {
            // As in get_ranges: on a blocking thread of the runtime, which drives it.
            let handle = tokio::runtime::Handle::current();
            let run = move || handle.block_on(ops::get_ranges_grouped(&engine, &groups, n, &opts));
            let out = tokio::task::spawn_blocking(run)
                .await
                .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("get_ranges task failed: {e}")))?;
            Ok(py_result(out)?.into_iter().map(Buffer::new).collect::<Vec<_>>())
        })
    }

    /// Many objects, results in input order.
    #[pyo3(signature = (urls, max_bytes_in_flight=None, concurrency=None, return_exceptions=false, callback=None))]
    fn get_many(
        &self,
        py: Python<'_>,
        urls: &Bound<'_, PyAny>,
        max_bytes_in_flight: Option<u64>,
        concurrency: Option<usize>,
        return_exceptions: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyList>> {
        let (engine, objects) = (self.engine(py)?, self.urls(urls)?);
        let budget = max_bytes_in_flight.map(ByteBudget::new);
        let n = concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        let progress = tracker(&callback);
        let tick = reporter(callback, &progress, None);
        let results = block_on_ticking(py, ops::get_many(engine, objects, n, budget, progress), tick)?;
        buffers(py, results, return_exceptions)
    }

    #[pyo3(signature = (urls, max_bytes_in_flight=None, concurrency=None, return_exceptions=false))]
    fn get_many_async<'py>(
        &self,
        py: Python<'py>,
        urls: &Bound<'py, PyAny>,
        max_bytes_in_flight: Option<u64>,
        concurrency: Option<usize>,
        return_exceptions: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (engine, objects) = (self.engine(py)?, self.urls(urls)?);
        let budget = max_bytes_in_flight.map(ByteBudget::new);
        let n = concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        awaitable(py, async move {
            let results = ops::get_many(engine, objects, n, budget, None).await;
            Python::attach(|py| buffers(py, results, return_exceptions))
        })
    }

    /// The objects in order, the next ones opened ahead (bounded memory).
    fn iter_get(&self, py: Python<'_>, urls: &Bound<'_, PyAny>) -> PyResult<GetIterator> {
        let (engine, objects) = (self.engine(py)?, self.urls(urls)?);
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
        let (engine, object) = (self.engine(py)?, self.object(url)?);
        let progress = tracker(&callback);
        if let Some(source) = put_source(data)? {
            let total = match &source {
                PutSource::Bytes(b) => Some(b.len() as u64),
                PutSource::Path(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            };
            let tick = reporter(callback, &progress, total);
            let r = block_on_ticking(py, put_known(engine, object, source, if_not_exists, progress), tick)?;
            return at(py, url, r);
        }
        if if_not_exists {
            return Err(PyTypeError::new_err("if_not_exists takes bytes-like data or a path"));
        }
        put_streamed(py, engine, object, data, progress, callback)
    }

    /// `put` for bytes-like data and paths.
    #[pyo3(signature = (url, data, if_not_exists=false))]
    fn put_async<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        data: &Bound<'py, PyAny>,
        if_not_exists: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = (self.engine(py)?, self.object(url)?);
        let Some(source) = put_source(data)? else {
            return Err(PyTypeError::new_err("put_async takes bytes-like data or a path; use put for file objects"));
        };
        let url = url.to_owned();
        awaitable(py, async move { py_result_at(&url, put_known(engine, object, source, if_not_exists, None).await) })
    }

    fn head(&self, py: Python<'_>, url: &str) -> PyResult<ObjectInfo> {
        let (engine, object) = (self.engine(py)?, self.object(url)?);
        let o = object.clone();
        let r = block_on(py, async move { engine.head(&o).await })?;
        at(py, url, r).map(|info| ObjectInfo::from_head(&object, info))
    }

    fn head_async<'py>(&self, py: Python<'py>, url: &str) -> PyResult<Bound<'py, PyAny>> {
        let (engine, object) = (self.engine(py)?, self.object(url)?);
        let url = url.to_owned();
        awaitable(py, async move {
            let info = py_result_at(&url, engine.head(&object).await)?;
            Ok(ObjectInfo::from_head(&object, info))
        })
    }

    /// Entries under a prefix, in key order. Not recursive: one level, with "directories"
    /// (`is_dir`); recursive: every object, listed in parallel key ranges.
    #[pyo3(signature = (url_prefix, recursive=false))]
    fn list(&self, py: Python<'_>, url_prefix: &str, recursive: bool) -> PyResult<ListIterator> {
        let (engine, u) = (self.engine(py)?, self.url(url_prefix)?);
        let bucket = u.bucket.clone();
        let entries: Entries = if recursive {
            let opts = ferry_engine::ListOptions::default();
            ferry_engine::list_parallel(&engine, &u.bucket, &u.key, &opts)
                .map(move |r| r.map(|e| ObjectInfo::from_entry(&bucket, e)))
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
                                items.push(Ok(ObjectInfo::dir(&bucket, dirs.next().expect("peeked"))));
                            } else if let Some(o) = objects.next() {
                                items.push(Ok(ObjectInfo::from_entry(&bucket, o)));
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
        let engine = self.engine(py)?;
        if let Ok(url) = url_or_urls.extract::<String>() {
            let object = self.object(&url)?;
            let r = block_on(py, async move { engine.delete(&object).await })?;
            return at(py, &url, r);
        }
        let mut by_bucket: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for o in self.urls(url_or_urls)? {
            by_bucket.entry(o.bucket).or_default().push(o.key);
        }
        let failures = block_on(py, async move {
            let mut failed = Vec::new();
            for (bucket, keys) in by_bucket {
                let opts = ferry_engine::DeleteOptions::default();
                let report = ferry_engine::delete_many(&engine, &bucket, stream::iter(keys), &opts).await;
                failed.extend(report.failed.into_iter().map(|f| (bucket.clone(), f)));
            }
            failed
        })?;
        if let Some((bucket, first)) = failures.first() {
            let e = Error::Service {
                status: 0,
                code: first.code.clone(),
                message: format!(
                    "{} of the objects were not deleted; s3://{bucket}/{}: {}",
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
        let (engine, src, dst) = (self.engine(py)?, self.object(src)?, self.object(dst)?);
        let r = block_on(py, async move {
            ferry_engine::copy::copy_object(&engine, &src, &dst, None, &Default::default(), None).await
        })?;
        at(py, &what, r).map(|_| ())
    }

    /// A URL anyone can GET the object with for `expires` seconds (at most 7 days).
    #[pyo3(signature = (url, expires=3600.0))]
    fn presign(&self, py: Python<'_>, url: &str, expires: f64) -> PyResult<String> {
        let (engine, object) = (self.engine(py)?, self.object(url)?);
        at(py, url, engine.presign_get(&object, expires_of(expires)?))
    }

    /// A read-only binary file object over the object (ferry/_file.py), pinned to the
    /// version it opened.
    #[pyo3(signature = (url, block_size=None))]
    fn open<'py>(slf: &Bound<'py, Self>, url: &str, block_size: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
        slf.get().object(url)?;
        let class = slf.py().import("ferry._file")?.getattr("ObjectFile")?;
        match block_size {
            Some(n) => class.call1((slf, url, n)),
            None => class.call1((slf, url)),
        }
    }

    /// Counters of this process's client: the transport's (connections, requests,
    /// re-sends, hedges) and the endpoint's adaptive concurrency controller's.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let engine = self.engine(py)?;
        let t = engine.transport().stats();
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

/// `put` from a file object or an iterable: Python reads chunks (GIL held), Rust
/// uploads them as they come (multipart once past one part), through a small channel
/// whose sends wait with the GIL released.
fn put_streamed(
    py: Python<'_>,
    engine: Engine,
    object: ObjectRef,
    data: &Bound<'_, PyAny>,
    progress: ops::Tracker,
    callback: Option<Py<PyAny>>,
) -> PyResult<PutResult> {
    let read = if data.hasattr("read")? { Some(data.getattr("read")?) } else { None };
    let mut iter = match read {
        Some(_) => None,
        None => Some(data.try_iter().map_err(|_| {
            PyTypeError::new_err("put data: bytes-like, a path, a binary file object, or an iterable of bytes")
        })?),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let body = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) }).boxed();
    let params = ferry_engine::UploadParams { resume: false, ..Default::default() };
    let on_bytes = progress_fn(&progress);
    let mut tick = reporter(callback, &progress, None);
    let task =
        runtime(py).spawn(async move { ferry_engine::upload_stream(&engine, body, &object, &params, on_bytes).await });
    let mut failure: Option<PyErr> = None;
    loop {
        let chunk = match (&read, &mut iter) {
            (Some(read), _) => read.call1((READ_CHUNK,)),
            (None, Some(it)) => match it.next() {
                Some(c) => c,
                None => break,
            },
            (None, None) => break,
        };
        let chunk = match chunk.and_then(|c| bytes_of(&c)) {
            Ok(c) => c,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        if chunk.is_empty() {
            if read.is_some() {
                break;
            }
            continue;
        }
        let sent = py.detach(|| tx.blocking_send(Ok(chunk)));
        if sent.is_err() {
            break; // the upload ended (failed): its error is below
        }
        if let Err(e) = tick(py) {
            failure = Some(e);
            break;
        }
    }
    if failure.is_some() {
        // Fail the upload (it aborts any multipart upload it started), then raise.
        let _ = py.detach(|| tx.blocking_send(Err(std::io::Error::other("the Python data source raised"))));
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
