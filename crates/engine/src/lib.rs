//! ferry-engine: the scheduler (issue 5). The transports (ferry-wire) move bytes and the
//! S3 client (ferry-store) speaks the API one request at a time; this crate decides what
//! to request, how to cut it, and how much to have in flight.
//!
//! Every entry point takes an [`ferry_store::S3Client`] (cheap to clone) and keeps its
//! memory bounded by bytes in flight, whatever the number of objects or keys.
//!
//! Modules:
//! - [`ranges`]: split an object into parts; coalesce nearby ranges; `get_ranges`.
//! - [`openahead`]: read a list of objects in order, opening the next ones early.
//! - [`listing`]: flat listing merged against directories of interest; key-range
//!   parallel listing.
//! - [`delete`]: batch delete through DeleteObjects, in parallel, per-key retries.
//! - [`download`]: ranged parallel GET into a file, atomic and resumable.
//! - [`upload`]: a file or stream to an object in parallel parts, resumable.
//! - [`copy`]: server-side copy of any size (CopyObject, or parallel UploadPartCopy).
//! - [`controller`]: AIMD concurrency per endpoint (the transport's, ferry-wire): the
//!   fan-outs above wait for room under its limit; their `concurrency` options are caps.

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
pub use download::{download_file, download_with_info, DownloadOutput, DownloadParams, ProgressFn, Verified};
pub use upload::{upload_file, upload_stream, UploadOutput, UploadParams};
