//! A listing as Arrow record batches, through the Arrow C stream interface
//! (<https://arrow.apache.org/docs/format/CStreamInterface.html>), so a million-key
//! listing becomes a `pyarrow.Table` without a million Python objects.
//!
//! ```text
//! ListIterator.__arrow_c_stream__() ─► PyCapsule "arrow_array_stream" ─► pyarrow
//!   get_schema ─► struct<key: utf8, size: uint64, last_modified: timestamp[us, UTC],
//!                        etag: utf8, is_dir: bool>
//!   get_next   ─► the listing's next entries (BATCH_ROWS at most), waited for on the
//!                 runtime from pyarrow's thread ─► one struct array per batch
//!              ─► end of the listing: a released array (the interface's end marker)
//! ```
//!
//! Written against the C ABI directly rather than with arrow-rs (its `pyarrow` feature
//! or pyo3-arrow): the crates that bridge to PyO3 follow their own PyO3 release, and
//! five flat columns need only the interface's structs, not the arrow crates' kernels
//! and their build time. Every array owns its buffers in a boxed [`Owned`] behind
//! `private_data`; `release` frees the children first, then the array's own memory,
//! as the interface's ownership rules ask. Entries in error end the stream with `EIO`
//! and the store's message as the last error (pyarrow raises it).

use crate::client::{ListState, ObjectInfo};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::runtime::Runtime;

/// Rows per record batch: large enough that a batch's fixed cost (a struct array of
/// five children, a C call) is nothing beside its rows, small enough that a batch is
/// about a megabyte of keys, handed on as the listing streams.
const BATCH_ROWS: usize = 16 * 1024;

const FLAG_NULLABLE: i64 = 2;
const EIO: c_int = 5;

#[repr(C)]
pub struct ArrowSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut ArrowSchema,
    dictionary: *mut ArrowSchema,
    release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
    private_data: *mut c_void,
}

#[repr(C)]
pub struct ArrowArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut ArrowArray,
    dictionary: *mut ArrowArray,
    release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    private_data: *mut c_void,
}

#[repr(C)]
pub struct ArrowArrayStream {
    get_schema: Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut ArrowSchema) -> c_int>,
    get_next: Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut ArrowArray) -> c_int>,
    get_last_error: Option<unsafe extern "C" fn(*mut ArrowArrayStream) -> *const c_char>,
    release: Option<unsafe extern "C" fn(*mut ArrowArrayStream)>,
    private_data: *mut c_void,
}

// SAFETY: the stream is handed whole to its consumer, which calls it from one thread at
// a time (the interface's rule); its state is ours alone.
unsafe impl Send for ArrowArrayStream {}

/// The columns: (name, format, nullable).
const COLUMNS: [(&CStr, &CStr, bool); 5] = [
    (c"key", c"u", false),
    (c"size", c"L", false),
    (c"last_modified", c"tsu:UTC", true),
    (c"etag", c"u", true),
    (c"is_dir", c"b", false),
];

// ---- schema --------------------------------------------------------------------------

/// A schema's owned parts: its children (boxed schemas) and their pointer array.
struct SchemaOwned {
    children: Vec<*mut ArrowSchema>,
}

unsafe extern "C" fn release_schema(s: *mut ArrowSchema) {
    // SAFETY: called by the consumer on a schema we filled (fill_schema); children were
    // boxed by us and are released and freed once, here.
    unsafe {
        let s = &mut *s;
        if !s.private_data.is_null() {
            let owned = Box::from_raw(s.private_data as *mut SchemaOwned);
            for c in owned.children {
                if let Some(r) = (*c).release {
                    r(c);
                }
                drop(Box::from_raw(c));
            }
        }
        s.release = None;
    }
}

fn leaf_schema(name: &'static CStr, format: &'static CStr, nullable: bool) -> ArrowSchema {
    ArrowSchema {
        format: format.as_ptr(),
        name: name.as_ptr(),
        metadata: ptr::null(),
        flags: if nullable { FLAG_NULLABLE } else { 0 },
        n_children: 0,
        children: ptr::null_mut(),
        dictionary: ptr::null_mut(),
        release: Some(release_schema),
        private_data: ptr::null_mut(),
    }
}

/// Fills `out` with the listing's schema (a struct of [`COLUMNS`]).
///
/// # Safety
/// `out` points to writable memory for one `ArrowSchema`.
unsafe fn fill_schema(out: *mut ArrowSchema) {
    let children: Vec<*mut ArrowSchema> =
        COLUMNS.iter().map(|(n, f, null)| Box::into_raw(Box::new(leaf_schema(n, f, *null)))).collect();
    let mut owned = Box::new(SchemaOwned { children });
    let kids = owned.children.as_mut_ptr();
    let n = owned.children.len() as i64;
    // SAFETY: the caller's contract.
    unsafe {
        out.write(ArrowSchema {
            format: c"+s".as_ptr(),
            name: c"".as_ptr(),
            metadata: ptr::null(),
            flags: 0,
            n_children: n,
            children: kids,
            dictionary: ptr::null_mut(),
            release: Some(release_schema),
            private_data: Box::into_raw(owned) as *mut c_void,
        });
    }
}

// ---- arrays --------------------------------------------------------------------------

/// An array's owned memory: its buffers, the pointer array the consumer reads, and its
/// children (boxed arrays).
struct Owned {
    _data: Vec<Vec<u8>>,
    pointers: Vec<*const c_void>,
    children: Vec<*mut ArrowArray>,
}

unsafe extern "C" fn release_array(a: *mut ArrowArray) {
    // SAFETY: called by the consumer on an array we filled; its children were boxed by
    // us, and each is released (unless the consumer moved it out) and freed once, here.
    unsafe {
        let a = &mut *a;
        if !a.private_data.is_null() {
            let owned = Box::from_raw(a.private_data as *mut Owned);
            for c in &owned.children {
                if let Some(r) = (**c).release {
                    r(*c);
                }
                drop(Box::from_raw(*c));
            }
        }
        a.release = None;
    }
}

/// An array of `length` rows over `buffers` (`None`: an absent validity bitmap).
fn array(length: usize, null_count: usize, buffers: Vec<Option<Vec<u8>>>, children: Vec<ArrowArray>) -> ArrowArray {
    let mut data = Vec::new();
    let mut pointers = Vec::new();
    for b in buffers {
        match b {
            Some(v) => {
                pointers.push(v.as_ptr() as *const c_void);
                data.push(v); // moving the Vec keeps its heap pointer
            }
            None => pointers.push(ptr::null()),
        }
    }
    let children: Vec<*mut ArrowArray> = children.into_iter().map(|c| Box::into_raw(Box::new(c))).collect();
    let mut owned = Box::new(Owned { _data: data, pointers, children });
    ArrowArray {
        length: length as i64,
        null_count: null_count as i64,
        offset: 0,
        n_buffers: owned.pointers.len() as i64,
        n_children: owned.children.len() as i64,
        buffers: owned.pointers.as_mut_ptr(),
        children: owned.children.as_mut_ptr(),
        dictionary: ptr::null_mut(),
        release: Some(release_array),
        private_data: Box::into_raw(owned) as *mut c_void,
    }
}

/// A validity bitmap (LSB first) for `valid`, and its null count; `None` when all valid.
fn validity(valid: impl ExactSizeIterator<Item = bool>) -> (Option<Vec<u8>>, usize) {
    let mut bits = vec![0u8; valid.len().div_ceil(8)];
    let mut nulls = 0;
    for (i, v) in valid.enumerate() {
        if v {
            bits[i / 8] |= 1 << (i % 8);
        } else {
            nulls += 1;
        }
    }
    (if nulls == 0 { None } else { Some(bits) }, nulls)
}

fn utf8<'a>(values: impl ExactSizeIterator<Item = Option<&'a str>> + Clone) -> ArrowArray {
    let n = values.len();
    let (bitmap, nulls) = validity(values.clone().map(|v| v.is_some()));
    let mut offsets: Vec<u8> = Vec::with_capacity((n + 1) * 4);
    let mut data: Vec<u8> = Vec::new();
    offsets.extend_from_slice(&0i32.to_le_bytes());
    for v in values {
        data.extend_from_slice(v.unwrap_or("").as_bytes());
        offsets.extend_from_slice(&(data.len() as i32).to_le_bytes());
    }
    array(n, nulls, vec![bitmap, Some(offsets), Some(data)], Vec::new())
}

fn micros(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    }
}

/// One record batch (a struct array of [`COLUMNS`]) of `rows`.
fn batch(rows: &[ObjectInfo]) -> ArrowArray {
    let n = rows.len();
    let keys = utf8(rows.iter().map(|r| Some(r.key.as_str())));
    let sizes = array(n, 0, vec![None, Some(rows.iter().flat_map(|r| r.size.to_le_bytes()).collect())], Vec::new());
    let (bitmap, nulls) = validity(rows.iter().map(|r| r.modified().is_some()));
    let times: Vec<u8> = rows.iter().flat_map(|r| r.modified().map(micros).unwrap_or(0).to_le_bytes()).collect();
    let modified = array(n, nulls, vec![bitmap, Some(times)], Vec::new());
    let etags = utf8(rows.iter().map(|r| r.etag.as_deref()));
    let (dirs, _) = validity(rows.iter().map(|r| r.is_dir));
    let dirs = array(n, 0, vec![None, Some(dirs.unwrap_or_else(|| vec![0xff; n.div_ceil(8)]))], Vec::new());
    array(n, 0, vec![None], vec![keys, sizes, modified, etags, dirs])
}

// ---- the stream ----------------------------------------------------------------------

struct StreamState {
    runtime: Arc<Runtime>,
    list: Option<ListState>,
    last_error: Option<CString>,
}

unsafe extern "C" fn get_schema(s: *mut ArrowArrayStream, out: *mut ArrowSchema) -> c_int {
    let _ = s;
    // SAFETY: the consumer passes memory for one schema.
    unsafe { fill_schema(out) };
    0
}

unsafe extern "C" fn get_next(s: *mut ArrowArrayStream, out: *mut ArrowArray) -> c_int {
    // SAFETY: `private_data` is our boxed state until release; the consumer calls one
    // function at a time, and passes memory for one array.
    let state = unsafe { &mut *((*s).private_data as *mut StreamState) };
    let mut rows = Vec::new();
    let mut failure = None;
    if let Some(mut list) = state.list.take() {
        let rt = state.runtime.clone();
        let (back, r) = rt.block_on(async move {
            while rows.len() < BATCH_ROWS {
                let (rest, item) = list.next().await;
                match (rest, item) {
                    (Some(rest), Some(Ok(info))) => {
                        list = rest;
                        rows.push(info);
                    }
                    (_, Some(Err(e))) => return (None, Err((rows, e))),
                    _ => return (None, Ok(rows)),
                }
            }
            (Some(list), Ok(rows))
        });
        state.list = back;
        rows = match r {
            Ok(rows) => rows,
            Err((rows, e)) => {
                failure = Some(e);
                rows
            }
        };
    }
    if let Some(e) = failure {
        state.last_error = CString::new(e.to_string().replace('\0', " ")).ok();
        return EIO;
    }
    // SAFETY: the consumer's memory for one array.
    unsafe {
        if rows.is_empty() {
            // The end: a released array.
            let mut end = array(0, 0, Vec::new(), Vec::new());
            release_array(&mut end);
            out.write(end);
        } else {
            out.write(batch(&rows));
        }
    }
    0
}

unsafe extern "C" fn get_last_error(s: *mut ArrowArrayStream) -> *const c_char {
    // SAFETY: as in get_next.
    let state = unsafe { &*((*s).private_data as *const StreamState) };
    state.last_error.as_ref().map_or(ptr::null(), |e| e.as_ptr())
}

unsafe extern "C" fn release_stream(s: *mut ArrowArrayStream) {
    // SAFETY: the consumer releases a stream once; the state was boxed by `stream`.
    unsafe {
        let s = &mut *s;
        if !s.private_data.is_null() {
            drop(Box::from_raw(s.private_data as *mut StreamState));
            s.private_data = ptr::null_mut();
        }
        s.release = None;
    }
}

/// A C stream over the rest of a listing, its entries waited for on `runtime`.
pub fn stream(runtime: Arc<Runtime>, list: Option<ListState>) -> ArrowArrayStream {
    let state = Box::new(StreamState { runtime, list, last_error: None });
    ArrowArrayStream {
        get_schema: Some(get_schema),
        get_next: Some(get_next),
        get_last_error: Some(get_last_error),
        release: Some(release_stream),
        private_data: Box::into_raw(state) as *mut c_void,
    }
}

/// The capsule's destructor: a stream the consumer did not take (its `release` still
/// set) is released here, then the box `ListIterator.__arrow_c_stream__` made is freed.
///
/// # Safety
/// Called by Python with a capsule named `arrow_array_stream` over a boxed stream.
pub unsafe extern "C" fn drop_capsule(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python on our capsule, named as made.
    unsafe {
        let p = pyo3::ffi::PyCapsule_GetPointer(capsule, c"arrow_array_stream".as_ptr()) as *mut ArrowArrayStream;
        if p.is_null() {
            pyo3::ffi::PyErr_Clear();
            return;
        }
        if let Some(r) = (*p).release {
            r(p);
        }
        drop(Box::from_raw(p));
    }
}
