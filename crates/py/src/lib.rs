//! ferry-py: the PyO3 glue of the `ferry` Python package (`ferry._ferry`). The package's
//! Python half (python/ferry: exceptions, `open`'s file object, the pytest fixture) sits
//! beside it; the work is done here, over ferry-engine and the `ObjectStore` trait.
//!
//! ```text
//! ferry.Client ─► client.rs (settings, URLs, Python types) ─► ops.rs / ferry-engine
//!                   │                                           └─► dyn ObjectStore
//!                   ├─ runtime.rs: one Tokio runtime per process (fork-safe), GIL released,
//!                   │              asyncio awaitables through pyo3-async-runtimes
//!                   ├─ buffer.rs:  ferry.Buffer, bytes out through the buffer protocol
//!                   ├─ pool.rs:    the memory of dropped Buffers, kept for the next get
//!                   ├─ alloc.rs:   mimalloc for the Rust half's memory, without huge pages
//!                   └─ errors.rs:  ferry-store's Error ─► ferry.NotFound, ferry.Auth, ...
//! `ferry` console script ─► cli.rs ─► ferry-cli's main_from_args (the whole command line)
//! ```

mod alloc;
mod arrow;
mod buffer;
mod cli;
mod client;
mod errors;
mod ops;
mod pool;
mod runtime;
mod settings;
mod stats;
mod transfer;

use pyo3::prelude::*;

#[pymodule]
fn _ferry(m: &Bound<'_, PyModule>) -> PyResult<()> {
    alloc::own_heaps_without_huge_pages();
    m.add_class::<client::Client>()?;
    m.add_class::<buffer::Buffer>()?;
    m.add_class::<client::ObjectInfo>()?;
    m.add_class::<client::PutResult>()?;
    m.add_class::<client::ListIterator>()?;
    m.add_class::<client::GetIterator>()?;
    m.add_class::<client::PendingRange>()?;
    m.add_class::<transfer::TransferSummary>()?;
    m.add_function(wrap_pyfunction!(cli::cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(set_buffer_pool, m)?)?;
    m.add_function(wrap_pyfunction!(buffer_pool, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_refuse_calls, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Sets how many bytes of dropped `Buffer`s the process keeps for the next `get`
/// (pool.rs); returns the limit before. 0 turns the pool off and frees what it keeps.
#[pyfunction]
fn set_buffer_pool(max_bytes: usize) -> usize {
    pool::set_limit(max_bytes)
}

/// The buffer pool now: `(limit, bytes kept, buffers kept)`.
#[pyfunction]
fn buffer_pool() -> (usize, usize, usize) {
    pool::state()
}
