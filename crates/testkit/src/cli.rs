//! The `ferry` command line pointed at a test server.

use std::path::Path;
use std::process::Command;

/// `exe` (the binary under test: `env!("CARGO_BIN_EXE_ferry")`) with its AWS settings
/// set to `endpoint_url` and the dev keys, in [`crate::REGION`], and the user's own
/// `~/.aws` files and `AWS_PROFILE` out of the way.
pub fn command(exe: impl AsRef<Path>, endpoint_url: &str) -> Command {
    let mut c = Command::new(exe.as_ref());
    c.env("AWS_ENDPOINT_URL", endpoint_url)
        .env("AWS_ACCESS_KEY_ID", crate::ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", crate::SECRET_KEY)
        .env("AWS_REGION", crate::REGION)
        .env("AWS_CONFIG_FILE", "/nonexistent/config")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        .env_remove("AWS_PROFILE");
    c
}

/// Runs `cmd` and kills it with SIGKILL (no clean-up of its own can run) `after` it
/// started, if it is still running then: `true`. `false` when it had already exited, so
/// a test of an interrupted transfer knows to try again with more bytes.
pub fn kill_after(mut cmd: Command, after: std::time::Duration) -> bool {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the command to kill");
    let deadline = std::time::Instant::now() + after;
    while std::time::Instant::now() < deadline {
        if child.try_wait().expect("poll the child").is_some() {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let running = child.try_wait().expect("poll the child").is_none();
    // Child::kill sends SIGKILL on Unix.
    let _ = child.kill();
    let _ = child.wait();
    running
}
