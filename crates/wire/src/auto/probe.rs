//! The pipelining probe: how auto earns `verified` for the small lane's pipeline without
//! risking callers' requests on an endpoint that mishandles pipelining.
//!
//! *Verified* is [`PipelineTransport::verified`]: a batch of two or more requests written
//! in one write was answered correctly. The first small request goes to the small lane's
//! pipeline together with a copy of itself, both queued at once on one connection
//! (`PipelineTransport::send_pair`), so that its writer sends them in one batch. The
//! caller gets the first response, which any HTTP/1.1 server answers correctly; the
//! copy's response is read and thrown away. The cost is one duplicated small request per
//! probe, and the probe runs inside the small lane's places (no connection of its own).
//!
//! ```text
//!   Unverified ── small request, probe due ──► Running ── batch answered well ──► Verified
//!       ▲                                          │                                (pipeline
//!       │      copy answered badly (attempts += 1, └─ answered well, not verified    for good)
//!       │      retry after PROBE_SPACING smalls)      (placed one by one:
//!       └─────────────────────────────────────────    inconclusive += 1, retry next)
//!   after PROBE_ATTEMPTS bad or PROBE_INCONCLUSIVE inconclusive probes: the pool for good
//! ```
//!
//! While a probe is out, small requests neither wait for its verdict nor join the pool's
//! queue (with 1,024 GETs submitted at once, those that went to the pool while the probe
//! ran held it for seconds): they go to the small lane's pipeline and are stacked there as
//! a forced pipeline would stack them. Waiting for the verdict before stacking cost one
//! first-byte time (the slower of the pair's), about a tenth of a burst of 1,000 small
//! GETs' rate on the s3 profile (docs/lab/bench-common-draws.md).
//!
//! Stacking before the verdict risks no caller's answer: the pipeline takes a stacked
//! request's failure before verification (its connection closed before its head, its head
//! timed out or did not parse, or it was answered 400 or 505) as the endpoint's way of not
//! pipelining, writes the request again rather than hand the failure over, and says so
//! (`PipelineTransport::stacking_failed`); the lane then places one request per
//! connection, which every HTTP/1.1 server answers, until a probe verifies the endpoint
//! (lanes.rs, `LaneGate::depth`). What a peer that does not pipeline costs is one round
//! of re-sent requests, or one response time-out for a peer that drops what it read
//! past the first request (tests/pipeline_scripted.rs,
//! `auto_writes_a_stacked_request_again_when_the_peer_does_not_pipeline`).

use super::copy_of;
use crate::error::WireError;
use crate::lane::SMALL_GET_BYTES;
use crate::pipeline::PipelineTransport;
use crate::{Request, Response};
use futures_util::future::BoxFuture;
use std::sync::{Arc, Mutex};

/// Small requests between two pipeline probes: a judgement, not a measurement; a probe
/// that failed costs at most one duplicated request per hundred small ones (1%).
pub const PROBE_SPACING: u64 = 100;

/// Probes before auto settles on the pool for good: a judgement, three chances for an
/// endpoint whose first batch met a transient fault (an endpoint that never pipelines:
/// tests/pipeline_scripted.rs, `auto_carries_small_requests_on_its_pool_when_pipelining_fails`).
pub const PROBE_ATTEMPTS: u32 = 3;

/// Probes answered well that did not verify before auto stops probing: each costs one
/// duplicated small request, so eight bound that cost (a judgement, not a measurement).
pub const PROBE_INCONCLUSIVE: u32 = 8;

/// Largest body of the probe's copy that is read to discard it (it is small by rule).
pub(super) const PROBE_DISCARD_LIMIT: usize = 2 * SMALL_GET_BYTES as usize;

#[derive(Default)]
pub(super) struct Probe {
    pub(super) running: bool,
    /// Probes whose batch was answered badly (or failed).
    pub(super) attempts: u32,
    /// Probes answered well that still did not verify: most likely the two requests were
    /// not written in one batch (the connection opened between them). Not held against
    /// the endpoint, but bounded.
    pub(super) inconclusive: u32,
    /// `small_seen` when the last probe started.
    pub(super) last_at: u64,
}

/// Sends `req` and a copy of it queued together on one connection of the small lane's
/// pipeline `t` ([`PipelineTransport::send_pair`]), so that they are written in one
/// batch; returns the first response and discards the copy's. The probe ends when the
/// copy's response has been read.
pub(super) fn probe_with(
    t: Arc<PipelineTransport>,
    state: Arc<Mutex<Probe>>,
    req: Request,
) -> BoxFuture<'static, Result<Response, WireError>> {
    let copy = copy_of(&req);
    let [first, second] = t.send_pair(req, copy);
    Box::pin(async move {
        tokio::spawn(async move {
            let copy = second.await;
            let answered_well = match copy {
                Ok(r) => {
                    r.status != http::StatusCode::BAD_REQUEST
                        && r.status != http::StatusCode::HTTP_VERSION_NOT_SUPPORTED
                        && r.body.collect(PROBE_DISCARD_LIMIT).await.is_ok()
                }
                Err(_) => false,
            };
            let verified = t.verified();
            tracing::debug!("auto: pipeline probe done, verified={verified}");
            let mut p = state.lock().unwrap();
            p.running = false;
            if !verified && answered_well {
                p.attempts -= 1;
                p.inconclusive += 1;
            }
            drop(p);
            // A verdict may lift the one-per-connection rule (LaneGate::depth follows
            // `verified`): the lane looks again at what waits in its queue.
            t.nudge();
        });
        first.await
    })
}
