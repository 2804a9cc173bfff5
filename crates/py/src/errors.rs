//! ferry-store's one `Error` (by meaning) as Python exceptions.
//!
//! The classes live in Python (`ferry/exceptions.py`), because `NotFound` is also a
//! `FileNotFoundError` and `Auth` also a `PermissionError`, and multiple inheritance
//! from the builtin exceptions is plain there. This module looks a class up by name
//! and raises an instance carrying `request_id`, `code` and `status`. A call on one
//! object says which ([`at`]): its message starts with the URL, as the command line's
//! lines do, so `str(e)` names the object and the cause once.
//!
//!
//! ```text
//! Error::NotFound     ─► ferry.NotFound      (FileNotFoundError)
//! Error::Precondition ─► ferry.Precondition
//! Error::Throttled    ─► ferry.Throttled
//! Error::Auth         ─► ferry.Auth          (PermissionError)
//! Error::Transport    ─► ferry.Transport     (ConnectionError)
//! Error::Protocol     ─► ferry.Protocol
//! Error::Integrity    ─► ferry.Integrity
//! Error::Service      ─► ferry.ServiceError
//! Error::Config       ─► ferry.ConfigError   (ValueError)
//! Error::Io           ─► OSError with the errno and the path
//! ```

use ferry_store::Error;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// The Python exception for `e`.
pub fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    raise(py, e, None)
}

/// The Python exception for `e`, which happened to the object at `url`.
pub fn to_pyerr_at(py: Python<'_>, e: Error, url: &str) -> PyErr {
    raise(py, e, Some(url))
}

/// A result's error as the exception of an operation on `url`.
pub fn at<T>(py: Python<'_>, url: &str, r: Result<T, Error>) -> PyResult<T> {
    r.map_err(|e| to_pyerr_at(py, e, url))
}

/// [`py_result`] for an operation on `url` (async tasks run without the GIL).
pub fn py_result_at<T>(url: &str, r: Result<T, Error>) -> PyResult<T> {
    r.map_err(|e| Python::attach(|py| to_pyerr_at(py, e, url)))
}

fn raise(py: Python<'_>, e: Error, url: Option<&str>) -> PyErr {
    let message = match url {
        Some(u) => format!("{u}: {e}"),
        None => e.to_string(),
    };
    error_for(py, &e, message)
}

/// The exception `e` maps to, with `message` as its text.
fn error_for(py: Python<'_>, e: &Error, message: String) -> PyErr {
    let class = match e {
        Error::NotFound { .. } => "NotFound",
        Error::Precondition { .. } => "Precondition",
        Error::Throttled { .. } => "Throttled",
        Error::Auth { .. } => "Auth",
        Error::Transport(_) => "Transport",
        Error::Protocol { .. } => "Protocol",
        Error::Integrity { .. } => "Integrity",
        Error::Config(_) => "ConfigError",
        Error::Io { path, error } => {
            let errno = error.raw_os_error().unwrap_or(0);
            return PyOSError::new_err((errno, message, path.clone()));
        }
        _ => "ServiceError",
    };
    let made = (|| -> PyResult<PyErr> {
        let cls = py.import("ferry.exceptions")?.getattr(class)?;
        let exc = cls.call1((message.clone(),))?;
        exc.setattr("request_id", e.request_id())?;
        exc.setattr("code", e.code())?;
        exc.setattr("status", e.status())?;
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|err| PyRuntimeError::new_err(format!("{message} (and ferry.exceptions failed: {err})")))
}

/// The exception for an error of the command line's code (cp and sync planning), with
/// `message` as its text: a usage mistake is a `ValueError`; a store's error keeps its
/// class; a local file's, `OSError`; anything else `ferry.Error`.
pub fn from_anyhow(py: Python<'_>, e: &anyhow::Error, message: String) -> PyErr {
    if e.downcast_ref::<ferry_cli::common::UsageError>().is_some() {
        return PyValueError::new_err(message);
    }
    for cause in e.chain() {
        if let Some(store) = cause.downcast_ref::<Error>() {
            return error_for(py, store, message);
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return PyOSError::new_err((io.raw_os_error().unwrap_or(0), message));
        }
    }
    match py.import("ferry.exceptions").and_then(|m| m.getattr("Error")?.call1((message.clone(),))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => PyRuntimeError::new_err(format!("{message} (and ferry.exceptions failed: {err})")),
    }
}

/// Maps a result's error, attaching to Python for it (async tasks run without the GIL).
pub fn py_result<T>(r: Result<T, Error>) -> PyResult<T> {
    r.map_err(|e| Python::attach(|py| to_pyerr(py, e)))
}

/// A bad URL: `ValueError`, before anything is sent.
pub fn bad_url(url: &str, why: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{url:?}: {why}"))
}
