//! auto, the default transport: the endpoint's answers decide, the user tunes nothing.
//!
//! ```text
//!  https ── first request: open one connection offering ALPN [h2, http/1.1]
//!             ├─ server chose h2 ─────► H2Transport (takes that connection), for everything
//!             └─ server chose http/1.1 ► HTTP/1.1 (the pool takes that connection)
//!  http ──────────────────────────────► HTTP/1.1 (no ALPN; h2c only when forced with Mode::H2)
//!
//!  HTTP/1.1: small request ── pipeline verified? ── yes ─► PipelineTransport (hedged)
//!                               └─ no ─► PoolTransport (a probe first when one is due)
//!            other GET ────── verified, depth trial? ───── yes ─► the bulk lane's
//!                               │       PipelineTransport, two deep (lanes.rs, "Bulk depth")
//!                               └─ no ─► PoolTransport
//!            anything else ──────────────────────────────► PoolTransport
//! ```
//!
//! *Small* is [`is_small`] (lane.rs): a HEAD, or a GET without a body whose response is
//! known to carry at most [`SMALL_GET_BYTES`] ([`Request::expected_len`]: its range's
//! length, or the object's size from a listing or a HEAD, typed on the request). Any other GET counts as
//! large: its object may be any size, and a large body holds up every response pipelined
//! behind it.
//!
//! auto keeps the endpoint's adaptive controller (controller.rs) and reports every
//! response to it, on h2 and on HTTP/1.1 alike; on HTTP/1.1 the controller's limit is the
//! number of connections the two lanes share.
//!
//! # Where each idea lives
//!
//! - `h1.rs`: the HTTP/1.1 side: routes each request to its lane, reports each response
//!   to the controller, counts the demand until the body ends.
//! - `lanes.rs`: the two lanes' shares of one connection cap, by demand.
//! - `probe.rs`: how the pipeline earns `verified` before callers' requests use it.
//! - `hedge.rs`: a copy of a small GET whose head is late.
//! - `window_cap.rs`: when the receive-window cap of the pool's connections engages.
//!
//! Below the transports and shared with them (no transport imports auto or another
//! transport): `crate::gate` (the connection gate and the places the lanes hand to pool
//! and pipeline), `crate::lane` (which requests are small; h2 uses it too).
//!
//! Connection ids in [`crate::ResponseMeta`] are per sub-transport: the pool and h2 share
//! auto's connector, the pipeline numbers its own.

mod h1;
mod hedge;
mod lanes;
mod probe;
mod window_cap;

pub use crate::lane::{is_small, lane, Lane, SMALL_GET_BYTES};
pub use hedge::{
    HEDGE_BUDGET, HEDGE_BURST, HEDGE_FLOOR, HEDGE_MIN_SAMPLES, HEDGE_PERCENTILE, HEDGE_QUIET_AFTER_THROTTLE,
    HEDGE_WINDOW,
};
pub use probe::{PROBE_ATTEMPTS, PROBE_INCONCLUSIVE, PROBE_SPACING};

use crate::conn::Connector;
use crate::controller::{Controller, ControllerOptions};
use crate::error::WireError;
use crate::h2::H2Transport;
use crate::{Request, Response, Scheme, Transport, TransportConfig, TransportStats};
use futures_util::future::BoxFuture;
use h1::H1;
use lanes::{BULK, SMALL};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

/// Chooses the transport per endpoint (ALPN) and per request (size, verified pipelining).
pub struct AutoTransport {
    inner: Arc<Inner>,
}

struct Inner {
    config: TransportConfig,
    connector: Connector,
    chosen: OnceCell<Chosen>,
    controller: Arc<Controller>,
}

enum Chosen {
    H2(H2Transport),
    H1(H1),
}

impl AutoTransport {
    pub fn new(config: TransportConfig) -> Result<AutoTransport, WireError> {
        let connector = Connector::new(&config, &[b"h2", b"http/1.1"])?;
        connector.watch_receive_windows();
        let chosen = OnceCell::new();
        let controller =
            Controller::new(ControllerOptions { max: config.max_connections.max(1), ..ControllerOptions::default() });
        if config.endpoint.scheme == Scheme::Http {
            let _ = chosen.set(Chosen::H1(H1::new(&config, connector.clone(), controller.clone())?));
        }
        Ok(AutoTransport { inner: Arc::new(Inner { config, connector, chosen, controller }) })
    }

    /// Connections the lanes hold now: (pool, pipeline), the probe's not included; 0s
    /// before HTTP/1.1 was chosen or on h2.
    pub fn lane_connections(&self) -> (usize, usize) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => {
                let st = h1.lanes.lock();
                (st.open[BULK], st.open[SMALL])
            }
            _ => (0, 0),
        }
    }

    /// Connections opened so far, per lane: (bulk: the pool's and the bulk pipeline's,
    /// small: the pipeline's, the probes' included as they run on it); 0s before HTTP/1.1
    /// was chosen or on h2.
    pub fn lane_openings(&self) -> (u64, u64) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => (
                h1.pool.stats().connections_opened + h1.bulk_pipeline.stats().connections_opened,
                h1.pipeline.stats().connections_opened,
            ),
            _ => (0, 0),
        }
    }

    /// The bulk-depth trial's verdict (lanes.rs, "Bulk depth"): `Some(true)` once bulk GETs
    /// pipelined and kept doing so, `Some(false)` once they went back to the pool for good,
    /// `None` while undecided (also before HTTP/1.1 was chosen, and on h2).
    pub fn bulk_pipelined(&self) -> Option<bool> {
        use lanes::TrialPhase;
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => match h1.depth_trial() {
                TrialPhase::Kept => Some(true),
                TrialPhase::Declined => Some(false),
                TrialPhase::Pool | TrialPhase::Pipeline => None,
            },
            _ => None,
        }
    }

    /// Connections the bulk lane's pipeline holds open now (lanes.rs, "Bulk depth"): none
    /// before the depth trial tries it, and none soon after a trial that declined it, whose
    /// places go back to the pool.
    pub fn bulk_pipeline_open(&self) -> u64 {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => h1.bulk_pipeline.stats().connections_open,
            _ => 0,
        }
    }

    /// Connections closed to move a place within the bulk lane (lanes.rs, "Bulk depth"),
    /// so not among [`handovers`]: (the pool's, closed for the bulk pipeline once bulk GETs
    /// pipelined; the bulk pipeline's, closed for the pool when the depth trial declined
    /// it or the pool's requests needed the places). Each is a connection the other side
    /// may then open anew.
    ///
    /// [`handovers`]: AutoTransport::handovers
    pub fn bulk_moves(&self) -> (u64, u64) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => {
                let st = h1.lanes.lock();
                (st.yielded, st.returned)
            }
            _ => (0, 0),
        }
    }

    /// Connections closed by a lane to give their places to the other lane: (pool,
    /// pipeline). Each is a connection the other lane may then open anew, so openings
    /// over a run can exceed the cap by these while the connections open at once never
    /// do.
    pub fn handovers(&self) -> (u64, u64) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => {
                let st = h1.lanes.lock();
                (st.handed_over[BULK], st.handed_over[SMALL])
            }
            _ => (0, 0),
        }
    }

    /// Sockets auto's HTTP/1.1 lanes hold now (connected, not yet closed), and the most
    /// they held at once; 0s before HTTP/1.1 was chosen or on h2. Never above the cap:
    /// a lane's place is taken before its socket connects and given back after it closes.
    pub fn sockets_open(&self) -> (usize, usize) {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => {
                let st = h1.lanes.lock();
                (st.sockets[BULK] + st.sockets[SMALL], st.peak_sockets)
            }
            _ => (0, 0),
        }
    }

    /// "h2" or "h1" once chosen (at construction for http, at the first request for https).
    pub fn chosen(&self) -> Option<&'static str> {
        self.inner.chosen.get().map(|c| match c {
            Chosen::H2(_) => "h2",
            Chosen::H1(_) => "h1",
        })
    }

    /// Requests the pipeline has carried (the probe's included).
    pub fn pipelined_requests(&self) -> u64 {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => h1.pipeline.stats().requests_sent,
            _ => 0,
        }
    }

    /// The connector auto opens its pool and h2 connections with (its receive windows:
    /// conn.rs). For tests and diagnostics.
    pub fn connector(&self) -> &Connector {
        &self.inner.connector
    }

    /// How long a small request now waits for its head before a copy may go out (module
    /// note, "Hedged small GETs"); `None` before enough head latencies were measured, or
    /// before HTTP/1.1 was chosen.
    pub fn hedge_delay(&self) -> Option<Duration> {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => h1.hedger.lock().delay,
            _ => None,
        }
    }

    /// Whether small requests now go down the pipeline.
    pub fn pipelining(&self) -> bool {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => h1.verified(),
            _ => false,
        }
    }
}

impl Inner {
    async fn choose(&self) -> Result<&Chosen, WireError> {
        self.chosen
            .get_or_try_init(|| async {
                let conn = self.connector.connect().await?;
                if conn.alpn_h2 {
                    tracing::debug!("auto: {} chose h2 in ALPN", self.config.endpoint.authority());
                    let h2 = H2Transport::with_connector(self.config.clone(), self.connector.clone());
                    h2.adopt(conn);
                    Ok(Chosen::H2(h2))
                } else {
                    tracing::debug!("auto: {} chose HTTP/1.1 in ALPN", self.config.endpoint.authority());
                    let h1 = H1::new(&self.config, self.connector.clone(), self.controller.clone())?;
                    h1.pool.adopt(conn).await?;
                    Ok(Chosen::H1(h1))
                }
            })
            .await
    }
}

impl Transport for AutoTransport {
    fn send(&self, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            match inner.choose().await? {
                Chosen::H2(h2) => {
                    let observation = inner.controller.observe();
                    let result = h2.send(req).await;
                    match &result {
                        Ok(r) if matches!(r.status.as_u16(), 503 | 429) => observation.throttled(),
                        Ok(r) => match r.meta.head_latency {
                            Some(latency) => observation.success_with_latency(latency),
                            None => observation.success_unmeasured(),
                        },
                        Err(_) => drop(observation),
                    }
                    result
                }
                Chosen::H1(h1) => h1.send(req).await,
            }
        })
    }

    fn controller(&self) -> Option<Arc<Controller>> {
        Some(self.inner.controller.clone())
    }

    /// HTTP/1.1: the pipeline's depth unless auto has settled on the pool for good
    /// (probe.rs), also before the probe's verdict, when small requests are already
    /// stacked on the pipeline. h2: its streams. 1 before https has chosen.
    fn small_depth(&self) -> usize {
        match self.inner.chosen.get() {
            Some(Chosen::H2(h2)) => h2.small_depth(),
            Some(Chosen::H1(h1)) if h1.may_pipeline() => self.inner.config.pipeline_depth.max(1),
            _ => 1,
        }
    }

    fn stats(&self) -> TransportStats {
        match self.inner.chosen.get() {
            Some(Chosen::H2(h2)) => h2.stats(),
            Some(Chosen::H1(h1)) => h1.stats(),
            None => TransportStats::default(),
        }
    }

    fn name(&self) -> &'static str {
        "auto"
    }
}

/// A copy of a request without a body (the probe's and the hedge's): method, target,
/// headers and response length.
fn copy_of(req: &Request) -> Request {
    Request {
        headers: req.headers.clone(),
        response_len: req.response_len,
        object_data: req.object_data,
        ..Request::new(req.method.clone(), req.path_and_query.clone())
    }
}
