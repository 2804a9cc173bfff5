//! Adaptive concurrency per endpoint, seen from the engine.
//!
//! The AIMD controller itself lives in `ferry_wire::controller` (its module note has the
//! design): the signals it learns from, a response's status and its time to first byte,
//! are seen by the transport, and `auto` keeps one per endpoint to size its HTTP/1.1
//! connections. The engine's fan-outs (`get_ranges`, parallel download parts,
//! `delete_many`, `list_parallel`) take their concurrency from that same controller:
//! [`endpoint_controller`] returns the client transport's controller, so every request
//! the engine issues waits for room under the limit the transport learned, and their
//! own `concurrency` options are only caps (memory in flight, an expert's limit).
//!
//! Engine permits are taken with [`Controller::acquire`] and simply dropped when the
//! request ends: the transport has already reported the response to the controller, so
//! reporting it again would count each SlowDown twice. [`PermitExt::observe`] is there for
//! a controller of the caller's own (one that no transport feeds).

pub use ferry_wire::controller::{Controller, ControllerOptions, ControllerStats, Permit};

use crate::admission::Engine;
use ferry_store::Error;
use std::sync::Arc;

/// Reports a client result on a permit.
pub trait PermitExt {
    /// Throttling errors back off, other errors teach nothing (a 404 says nothing about
    /// load), successes count with the time since the permit was taken.
    fn observe<T>(self, result: &Result<T, Error>);
}

impl PermitExt for Permit {
    fn observe<T>(self, result: &Result<T, Error>) {
        match result {
            Ok(_) => self.success(),
            Err(Error::Throttled { .. }) => self.throttled(),
            Err(_) => drop(self),
        }
    }
}

/// The controller of `engine`'s endpoint: its transport's (auto keeps one per endpoint),
/// or, for a transport that keeps none (a forced h1-pool, h1-pipeline or h2), one made
/// for that store whose cap is the transport's connection cap; a fresh one starts in
/// slow start, so a fan-out reaches its width after a few answers.
pub fn endpoint_controller(engine: &Engine) -> Arc<Controller> {
    engine.controller()
}
