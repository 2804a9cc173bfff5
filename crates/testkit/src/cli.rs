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
