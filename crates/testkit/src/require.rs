//! For tests that need a tool or a privilege the machine may lack.
//!
//! Such a test is `#[ignore = "needs <tool>"]`, so a plain `cargo test` lists it as
//! ignored instead of passing it; `scripts/test.sh` runs it with `--ignored` where the
//! tool is present. When it is run anyway and the tool is missing, these calls fail it:
//! a test never passes without having done its work.

use std::path::Path;

/// Fails the test unless this process runs as root.
#[track_caller]
pub fn root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test needs root (it is #[ignore]d; scripts/test.sh runs it only as root)");
}

/// Fails the test unless `tool` is an executable on `PATH` (or a path to one).
#[track_caller]
pub fn tool(tool: &str) {
    assert!(
        on_path(tool),
        "this test needs `{tool}` on PATH (it is #[ignore]d; scripts/test.sh runs it where {tool} is installed)"
    );
}

/// Whether `tool` is an executable on `PATH`, or a path to one.
pub fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |p: &Path| p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false);
    if tool.contains('/') {
        return executable(Path::new(tool));
    }
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| executable(&d.join(tool))))
}
