//! `ferry.Buffer`: bytes that Rust received, handed to Python without a copy.
//!
//! A `Buffer` owns a `bytes::Bytes` (reference-counted, immutable) and exports it
//! through the buffer protocol, read-only, one-dimensional, format `B`: `memoryview`,
//! `numpy.frombuffer`, `pyarrow.py_buffer`, `bytes(...)`, `hashlib` and file `write`s
//! read the same memory. The exporter's object is the `Buffer` itself, so the bytes
//! live as long as any view does; nothing is allocated per view (the format string is
//! static, shape and strides point into the view), so `__releasebuffer__` has nothing
//! to free.

use bytes::Bytes;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::ffi::{c_int, c_void};

#[pyclass(frozen, module = "ferry", name = "Buffer")]
pub struct Buffer {
    pub bytes: Bytes,
}

impl Buffer {
    pub fn new(bytes: Bytes) -> Buffer {
        Buffer { bytes }
    }
}

static FORMAT_U8: &std::ffi::CStr = c"B";

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    /// A copy as `bytes`.
    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.bytes)
    }

    /// A copy as `bytes` (the same as `bytes(buf)`).
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.bytes)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        if let Ok(b) = other.cast::<Buffer>() {
            return b.get().bytes == self.bytes;
        }
        match pyo3::buffer::PyBuffer::<u8>::get(other) {
            Ok(view) if view.is_c_contiguous() => {
                view.len_bytes() == self.bytes.len()
                    // SAFETY: a contiguous buffer of len_bytes() bytes, held by `view`.
                    && unsafe { std::slice::from_raw_parts(view.buf_ptr() as *const u8, view.len_bytes()) }
                        == &self.bytes[..]
            }
            _ => false,
        }
    }

    fn __repr__(&self) -> String {
        format!("<ferry.Buffer of {} bytes>", self.bytes.len())
    }

    /// # Safety
    /// Called by CPython with a valid `view` to fill (the buffer protocol).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("a null view"));
        }
        if (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("ferry.Buffer is read-only"));
        }
        let (ptr, len) = {
            let b = &slf.get().bytes;
            (b.as_ptr(), b.len())
        };
        // SAFETY: `view` is valid (checked non-null, owned by the caller for this call);
        // the bytes outlive it because `obj` holds a reference to their owner.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr as *mut c_void;
            (*view).len = len as isize;
            (*view).readonly = 1;
            (*view).itemsize = 1;
            (*view).format = if (flags & ffi::PyBUF_FORMAT) == ffi::PyBUF_FORMAT {
                FORMAT_U8.as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape =
                if (flags & ffi::PyBUF_ND) == ffi::PyBUF_ND { &mut (*view).len } else { std::ptr::null_mut() };
            (*view).strides = if (flags & ffi::PyBUF_STRIDES) == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    /// # Safety
    /// Called by CPython when a view is released; nothing was allocated for it.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
