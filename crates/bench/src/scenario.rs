//! A workload's own step, run by the one runner ([`crate::workload::Task::Scenario`]).
//!
//! small-objects and bulk-get fit the runner's generic tasks (GET everything, GET one); the
//! other workloads of docs/lab/README.md section 4 each need their own step (mixed sizes
//! submitted at once, ranged reads, read-modify-write plus batch delete, sequential
//! first-byte probes, an in-order consumer, LIST strategies). Each lives in its workload's
//! file as a small value type implementing [`Scenario`]:
//!
//! ```text
//! setup_key()  which setup it needs ("mixed-hol: 2000 small objects, seed 7")
//! setup(c)     run once per server and distinct setup_key, before any timing (PUTs, HEADs)
//! params()     merged into the record's params (phase, op, object size, ...)
//! run(c, rec)  one timed run with a fresh client; writes figures and series into rec
//! ```
//!
//! The runner owns repeats, interleaving, time-outs, records and the report; a scenario
//! owns only what one run does. A trait object rather than an enum of every workload's
//! type, so this module (and workload.rs, which holds a [`Step`]) names no workload: the
//! dependencies flow from the workload files down to the framework, never across.
//! What several scenarios do alike lives in measure.rs.

use crate::record::RunRecord;
use anyhow::Result;
use ferry_store::S3Client;
use futures_util::future::LocalBoxFuture;
use serde_json::{Map, Value};
use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

/// One workload's step: see the module doc for the order the runner calls these in.
pub trait Scenario: Debug + Send + Sync + 'static {
    /// Which setup the step needs; steps with the same key share one setup per server.
    /// A step that reads a synthetic object names it as `synthetic/KEY (HEAD)`: against an
    /// external server the runner PUTs that object first (runner.rs, `synthetic_keys`).
    fn setup_key(&self) -> String;
    /// Untimed preparation on one server (PUTs, HEADs).
    fn setup<'a>(&'a self, c: &'a S3Client) -> LocalBoxFuture<'a, Result<()>>;
    /// Merged into the record's params.
    fn params(&self) -> Map<String, Value>;
    /// One timed run with a fresh client.
    fn run<'a>(&'a self, c: &'a S3Client, rec: &'a mut RunRecord) -> LocalBoxFuture<'a, Result<()>>;
    /// For [`Step::get`] and equality (tests compare workloads built twice).
    fn as_any(&self) -> &dyn Any;
    fn eq_step(&self, other: &dyn Scenario) -> bool;
}

/// Implements [`Scenario`] for a type with inherent `setup_key`, `setup`, `params` and
/// `run` methods of the same shapes (async `setup` and `run`) and `PartialEq`.
#[macro_export]
macro_rules! impl_scenario {
    ($t:ty) => {
        impl $crate::scenario::Scenario for $t {
            fn setup_key(&self) -> String {
                <$t>::setup_key(self)
            }
            fn setup<'a>(
                &'a self,
                c: &'a ferry_store::S3Client,
            ) -> futures_util::future::LocalBoxFuture<'a, anyhow::Result<()>> {
                Box::pin(<$t>::setup(self, c))
            }
            fn params(&self) -> serde_json::Map<String, serde_json::Value> {
                <$t>::params(self)
            }
            fn run<'a>(
                &'a self,
                c: &'a ferry_store::S3Client,
                rec: &'a mut $crate::record::RunRecord,
            ) -> futures_util::future::LocalBoxFuture<'a, anyhow::Result<()>> {
                Box::pin(<$t>::run(self, c, rec))
            }
            fn as_any(&self) -> &dyn std::any::Any {
                self
            }
            fn eq_step(&self, other: &dyn $crate::scenario::Scenario) -> bool {
                other.as_any().downcast_ref::<$t>().is_some_and(|o| o == self)
            }
        }
    };
}

/// A shared handle on one [`Scenario`], as a [`crate::workload::Task`] holds it.
#[derive(Clone, Debug)]
pub struct Step(Arc<dyn Scenario>);

impl Step {
    pub fn new(s: impl Scenario) -> Step {
        Step(Arc::new(s))
    }

    /// The step as its concrete type, when it is one.
    pub fn get<T: Scenario>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref::<T>()
    }
}

impl std::ops::Deref for Step {
    type Target = dyn Scenario;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl PartialEq for Step {
    fn eq(&self, other: &Step) -> bool {
        self.0.eq_step(&*other.0)
    }
}
