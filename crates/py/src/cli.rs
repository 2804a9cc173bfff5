//! The `ferry` command line inside the Python package: `ferry._cli.main` (the console
//! script pip writes for `[project.scripts] ferry`) calls [`cli_main`], which runs
//! ferry-cli's `main_from_args` in this process with the GIL released.
//!
//! Why in-process rather than a binary shipped in the wheel: maturin builds one crate
//! per project, this extension, so a second executable would need a build step of its
//! own outside maturin, and an editable install (`pip install -e .`, `maturin develop`)
//! installs no data scripts from the build tree. An entry point is written by pip from
//! the package's metadata in every kind of install, and the command line is already in
//! this library. What differs from the cargo-built binary: mimalloc is the allocator of
//! the Rust half only (alloc.rs), with huge pages off for its own heaps rather than for
//! the process from before `main` (ferry-cli's main.rs), and `ferry bench`'s reaper is
//! this script, so the lab's figures come from the cargo-built `ferry`.

use pyo3::prelude::*;
use std::ffi::OsString;
use std::path::PathBuf;

/// Runs the command line on `argv` (`argv[0]` is the program's name) and returns its
/// exit code. `program` is the executable that re-enters this function (the console
/// script), which verbs that start ferry again (`bench`) run.
#[pyfunction(name = "_cli_main")]
#[pyo3(signature = (argv, program=None))]
pub fn cli_main(py: Python<'_>, argv: Vec<OsString>, program: Option<PathBuf>) -> i32 {
    if let Some(p) = program {
        ferry_cli::set_program(p);
    }
    py.detach(|| ferry_cli::main_from_args(argv))
}
