//! The Tokio runtime behind every call, one per process, made on first use.
//!
//! ```text
//! sync call ──► runtime(py) ─► spawn(fut) ─► wait with the GIL released, 100 ms at a time,
//!                                            checking signals in between (Ctrl-C aborts the task)
//! async call ─► pyo3-async-runtimes' generic bridge over [`FerryRuntime`] ─► asyncio.Future
//! ```
//!
//! Fork safety: a runtime's threads do not survive `fork(2)`, so the runtime is keyed by
//! the pid that made it. A child that finds another pid's runtime leaks it (dropping it
//! would wait for threads that do not exist in the child) and makes its own. The slot's
//! lock is only taken with the GIL held (every caller passes a `Python` token), and the
//! GIL is held by the thread that forks, so no other thread can hold the lock at the
//! moment of the fork. Clients follow the same rule for their stores (client.rs).

use pyo3::prelude::*;
use pyo3_async_runtimes::generic::{ContextExt, Runtime as GenericRuntime};
use pyo3_async_runtimes::TaskLocals;
use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Runtime;

static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// How often a blocked sync call wakes to let Python handle signals (KeyboardInterrupt)
/// and to report progress: 100 ms, a Ctrl-C felt as immediate, and ten GIL round trips a
/// second, nothing beside a transfer's cost.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// This process's runtime, made on first use (and again in a forked child).
pub fn runtime(_py: Python<'_>) -> Arc<Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    match slot.as_ref() {
        Some((p, rt)) if *p == pid => rt.clone(),
        _ => {
            if let Some(old) = slot.take() {
                // Another process's runtime (we are a forked child): its threads are gone.
                std::mem::forget(old);
            }
            let rt = Arc::new(
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .thread_name("ferry-py")
                    .build()
                    .expect("cannot start the Tokio runtime"),
            );
            *slot = Some((pid, rt.clone()));
            rt
        }
    }
}

/// Runs `fut` on the runtime with the GIL released; returns its output, or the
/// exception of a signal handler (the task is then aborted).
pub fn block_on<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    block_on_ticking(py, fut, |_| Ok(()))
}

/// [`block_on`], calling `tick` with the GIL held between waits (every
/// [`SIGNAL_POLL`]) and once more when `fut` is done; an error from `tick` aborts the
/// task and is returned.
pub fn block_on_ticking<F, T>(py: Python<'_>, fut: F, mut tick: impl FnMut(Python<'_>) -> PyResult<()>) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime(py);
    let mut task = rt.spawn(fut);
    loop {
        let waited = py.detach(|| rt.block_on(async { tokio::time::timeout(SIGNAL_POLL, &mut task).await }));
        match waited {
            Ok(Ok(out)) => {
                tick(py)?;
                return Ok(out);
            }
            Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Ok(Err(e)) => return Err(pyo3::exceptions::PyRuntimeError::new_err(format!("ferry task ended: {e}"))),
            Err(_elapsed) => {
                if let Err(e) = py.check_signals().and_then(|()| tick(py)) {
                    task.abort();
                    return Err(e);
                }
            }
        }
    }
}

/// Runs `f` inside the runtime's context (for constructors that may spawn tasks).
pub fn enter<T>(py: Python<'_>, f: impl FnOnce() -> T) -> T {
    let rt = runtime(py);
    let _guard = rt.enter();
    f()
}

tokio::task_local! {
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

/// pyo3-async-runtimes' bridge over this module's per-process runtime (its own tokio
/// module keeps one runtime for the life of the process, which a forked child cannot use).
pub struct FerryRuntime;

impl GenericRuntime for FerryRuntime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // Called by the bridge with the GIL held (when the awaitable is made).
        Python::attach(|py| runtime(py).spawn(fut))
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        Python::attach(|py| runtime(py).spawn_blocking(f))
    }
}

impl ContextExt for FerryRuntime {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS.try_with(|c| c.get().cloned()).unwrap_or_default()
    }
}

/// An asyncio awaitable for `fut`, run on this process's runtime.
pub fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    pyo3_async_runtimes::generic::future_into_py::<FerryRuntime, _, T>(py, fut)
}
