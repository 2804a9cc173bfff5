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
//!
//! Interpreter exit: a thread waiting in a sync call with the GIL released must be back
//! in Python before the interpreter finalizes, or it can never return: taking the GIL
//! back then parks it for good (before pyo3 parked it, CPython ended it with a forced
//! unwind, which C++ frames below it turn into "terminate called without an active
//! exception"). pyarrow's I/O threads are such threads when they read a `ferry://` file,
//! and pyarrow's thread pools, shut down by C++ exit handlers after the interpreter
//! finalized, wait for every worker: one lost that way hangs the process at exit. The
//! same holds for a pyarrow thread that calls into a ferry file in pure Python (a `tell`,
//! a read of bytes already held) once the interpreter finalizes: CPython ends it under
//! the pool. ferry's `atexit` handler (ferry/_exit.py) runs before finalizing, GIL held:
//!
//! ```text
//! _refuse_calls ─► EXITING = true: every call from now on raises at once
//! drain pyarrow ─► waits (GIL released) until pyarrow's I/O and CPU pools are idle: the
//!                  scan's reads fail fast, it stops issuing them, its tasks end
//! _at_exit ─► none waiting: returns at once
//!          └─► else GIL released, waits (≤ EXIT_WAIT) until WAITING = 0 and no call
//!              was refused for EXIT_QUIET (threads that are not pyarrow's)
//! blocked call ─► wakes within SIGNAL_POLL, sees EXITING ─► task aborted, GIL taken back,
//!                 raises ─► WAITING - 1
//! new call (any thread) ─► raises at once, never releases the GIL ─► REFUSED + 1
//! ```
//!
//! The pools' idleness is the barrier, where a quiet time alone was a guess: pyarrow's
//! pools run every task that can call into a ferry file, so once both are idle with
//! calls refused, nothing of pyarrow's is left to call in (a decode task that ends
//! schedules its next read on the pools, which the drain then waits for too). The quiet
//! time stays for other threads that call ferry in a loop.

use pyo3::prelude::*;
use pyo3_async_runtimes::generic::{ContextExt, Runtime as GenericRuntime};
use pyo3_async_runtimes::TaskLocals;
use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// How often a blocked sync call wakes to let Python handle signals (KeyboardInterrupt)
/// and to report progress: 100 ms, a Ctrl-C felt as immediate, and ten GIL round trips a
/// second, nothing beside a transfer's cost.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// The interpreter is exiting (`at_exit` ran): calls are refused (module note).
static EXITING: AtomicBool = AtomicBool::new(false);
/// Sync calls waiting with the GIL released, counted until they hold it again.
static WAITING: AtomicUsize = AtomicUsize::new(0);
/// Calls refused since `at_exit` began.
static REFUSED: AtomicUsize = AtomicUsize::new(0);
/// A sync call was waiting when calls began to be refused: its thread may still be on
/// its way out through its caller (pyarrow's error path) after it stopped waiting.
static BUSY_AT_EXIT: AtomicBool = AtomicBool::new(false);
/// How long no call may have been refused before `at_exit` takes the callers for done:
/// a refused reader (pyarrow's I/O threads) calls again within microseconds, so 100 ms
/// of quiet is many times the gap, and is paid only by an exit with calls in flight.
const EXIT_QUIET: Duration = Duration::from_millis(100);
/// The longest `at_exit` holds the exit for waiting calls: a call on the runtime is
/// aborted within [`SIGNAL_POLL`]; one that cannot be (`get_ranges` runs on its caller's
/// thread) is given 2 s, a bound on the exit rather than a measured figure.
const EXIT_WAIT: Duration = Duration::from_secs(2);

fn exiting_error() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err("the interpreter is exiting: ferry calls are refused")
}

/// A call made after `at_exit` began, counted and refused.
fn refused() -> PyErr {
    REFUSED.fetch_add(1, Ordering::SeqCst);
    exiting_error()
}

/// A sync call's wait counted in [`WAITING`] from before the GIL is released until
/// after it is held again (dropped with the GIL held).
struct Waiting;

impl Waiting {
    fn enter() -> PyResult<Waiting> {
        WAITING.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            WAITING.fetch_sub(1, Ordering::SeqCst);
            return Err(refused());
        }
        Ok(Waiting)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `f` with the GIL released, unless the interpreter is exiting (then it raises without
/// running `f`). For blocking waits that are not a task on the runtime.
pub fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    let _waiting = Waiting::enter()?;
    Ok(py.detach(f))
}

/// The first step of ferry's `atexit` handler (module note): every call from now on
/// raises at once, so pyarrow's scans fail fast and their pools go idle.
#[pyfunction]
pub fn _refuse_calls() {
    EXITING.store(true, Ordering::SeqCst);
    if WAITING.load(Ordering::SeqCst) > 0 {
        BUSY_AT_EXIT.store(true, Ordering::SeqCst);
    }
}

/// The last step of ferry's `atexit` handler (module note): refuses new calls; with calls
/// waiting in other threads, or waiting or refused since `_refuse_calls` (the steps
/// between may have let them end), waits with the GIL released until they have taken it
/// back and no call was refused for [`EXIT_QUIET`] (at most [`EXIT_WAIT`]).
#[pyfunction]
pub fn _at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    let busy =
        WAITING.load(Ordering::SeqCst) > 0 || REFUSED.load(Ordering::SeqCst) > 0 || BUSY_AT_EXIT.load(Ordering::SeqCst);
    if !busy {
        return;
    }
    let deadline = Instant::now() + EXIT_WAIT;
    py.detach(|| {
        let (mut seen, mut quiet_since) = (REFUSED.load(Ordering::SeqCst), Instant::now());
        while Instant::now() < deadline {
            let now = REFUSED.load(Ordering::SeqCst);
            if now != seen {
                (seen, quiet_since) = (now, Instant::now());
            }
            if WAITING.load(Ordering::SeqCst) == 0 && quiet_since.elapsed() >= EXIT_QUIET {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
}

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
    let _waiting = Waiting::enter()?;
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
                if EXITING.load(Ordering::SeqCst) {
                    task.abort();
                    return Err(refused());
                }
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
    if EXITING.load(Ordering::SeqCst) {
        return Err(refused());
    }
    pyo3_async_runtimes::generic::future_into_py::<FerryRuntime, _, T>(py, fut)
}
