//! When auto caps the receive windows of its pool's connections (the mechanism is in
//! conn.rs, "Receive windows of HTTP/1.1 connections").
//!
//! A full bottleneck queue costs only the requests that wait behind it, so the cap
//! engages the first time a small request is sent while a bulk request is still moving,
//! and stays engaged for the transport's life:
//!
//! ```text
//!   kernel's windows ── small request sent while bulk admitted > 0 ──► capped (for good)
//! ```
//!
//! A download alone, or small requests alone, keep the kernel's autotuned windows.

use super::lanes::Lanes;
use crate::conn::Connector;

/// Called as a small request is sent: engages `connector`'s window cap if bulk requests
/// are in flight beside it.
pub(super) fn small_request_sent(connector: &Connector, lanes: &Lanes) {
    if !connector.window_cap_engaged() && lanes.bulk_admitted() > 0 {
        // Small requests beside bulk transfers: from now on the bulk connections'
        // windows stop where the path's queue would begin (conn.rs).
        connector.engage_window_cap();
    }
}
