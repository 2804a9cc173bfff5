//! ferry-engine: the scheduler. The transports (ferry-wire) move bytes and the stores
//! (ferry-store: S3 today, any provider behind its `ObjectStore` trait) speak an API one
//! request at a time; this crate decides what to request, how to cut it, and how much
//! to have in flight.
//!
//! Every entry point takes an [`Engine`]: a `dyn ObjectStore` and its [`Admission`]
//! (cheap to clone), and keeps its memory bounded by bytes in flight, whatever the
//! number of objects or keys. Nothing here names a provider: limits come from the
//! store's `Capabilities`, provider-only abilities from typed capabilities
//! (`ObjectStore::part_copy`).
//!
//! Modules:
//! - [`admission`]: the one place a request waits (bytes in flight, then a place
//!   under the endpoint's adaptive limit); [`Engine`].
//! - [`ranges`]: split an object into parts; coalesce nearby ranges; `get_ranges`.
//! - [`openahead`]: read a list of objects in order, opening the next ones early.
//! - [`listing`]: flat listing merged against directories of interest; key-range
//!   parallel listing.
//! - [`delete`]: batch delete through DeleteObjects, in parallel, per-key retries.
//! - [`download`]: ranged parallel GET into a file, atomic and resumable (a module
//!   tree: plan, resume state, writer, fetch).
//! - [`upload`]: a file or stream to an object in parallel parts, resumable.
//! - [`copy`]: server-side copy of any size (one copy call, or parallel part copies).
//! - [`controller`]: AIMD concurrency per endpoint (the transport's, ferry-wire): the
//!   fan-outs above wait for room under its limit; their `concurrency` options are caps.
//!
//! Measurements behind the defaults, with the commands that repeat them, are in
//! `docs/lab/engine-*.md`; the facts about the services they rest on in
//! `docs/lab/store-s3-facts.md`.

pub mod admission;
pub use admission::{default_memory_budget, Admission, BudgetPermit, ByteBudget, Engine, Ticket};
pub mod copy;
pub mod delete;
pub mod download;
pub mod listing;
pub mod openahead;
pub mod ranges;
pub mod upload;

// sched exports
pub mod controller;
pub use controller::{endpoint_controller, Controller, ControllerOptions, ControllerStats, Permit, PermitExt};
pub use delete::{delete_many, DeleteFailure, DeleteOptions, DeleteReport};
pub use listing::{list_flat_pruned, list_parallel, list_per_directory, ListOptions, ListStats, Listing};
pub use openahead::{OpenAhead, OpenAheadOptions, OpenAheadStats, OpenedObject};
pub use ranges::{get_ranges, CoalescePolicy, GapEstimator, RangesOptions, RangesOutput, RangesStats, Span};
// transfer exports
pub use download::{
    download_file, download_with_info, get_into_memory, get_to_memory, get_to_memory_with, Allocator, Destination,
    DownloadOutput, DownloadParams, FreshVec, MemoryParams, MemoryProgress, ProgressFn, Verified, SPLIT_BELOW,
};
pub use upload::{upload_file, upload_stream, UploadOutput, UploadParams};

/// Every entry point's future is `Send`, so a caller can `tokio::spawn` it on a
/// multi-threaded runtime (the Python package does). A compile-time check: a future that
/// is not `Send` fails to build here; nothing is polled, so nothing is sent.
#[cfg(test)]
mod send_tests {
    use super::*;
    use ferry_store::ObjectRef;
    use futures_util::StreamExt;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn every_entry_points_future_is_send() {
        let engine = admission::tests::idle_engine();
        let object = ObjectRef::new("b", "k");
        let ranges = [0..10, 20..30];
        let ropts = RangesOptions::default();
        assert_send(&get_ranges(&engine, &object, &ranges, &ropts));
        let dest = std::path::Path::new("/nonexistent/k");
        let dparams = DownloadParams::default();
        assert_send(&download_file(&engine, &object, dest, &dparams, None));
        assert_send(&get_to_memory(&engine, &object, MemoryParams::default(), None, MemoryProgress::default()));
        let mut lent = vec![0u8; 4];
        // SAFETY: never polled; `lent` outlives the future.
        let lend = unsafe { Destination::new(lent.as_mut_ptr(), lent.len(), Box::new(())) };
        assert_send(&get_into_memory(&engine, &object, MemoryParams::default(), lend, MemoryProgress::default()));
        let uparams = UploadParams::default();
        assert_send(&upload_file(&engine, dest, &object, &uparams, None));
        let stream = futures_util::stream::empty().boxed();
        assert_send(&upload_stream(&engine, stream, &object, &uparams, None));
        let cparams = copy::CopyParams::default();
        assert_send(&copy::copy_object(&engine, &object, &object, None, &cparams, None));
        let keys = futures_util::stream::iter(vec!["a".to_owned()]);
        assert_send(&delete_many(&engine, "b", keys, &DeleteOptions::default()));
    }
}
