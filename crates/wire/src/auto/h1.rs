//! The HTTP/1.1 side of auto: each request goes to its lane (small: the pipeline once
//! verified, else the pool; bulk: once admitted under bulk's share, a GET to the bulk
//! pipeline once verified, anything else to the pool), and each response is reported to
//! the endpoint's controller.
//!
//! ```text
//!   send ─► lane? ─ small ─► window_cap check ─► verified? ─ yes ─► hedge.rs ─► pipeline
//!              │                                    └─ no ─► probe.rs, or the pool
//!              └─ bulk ─► Lanes::admit_bulk ─► GET, verified, DepthTrial says pipeline?
//!                                                  ├─ yes ─► bulk pipeline (lanes.rs, "Bulk depth")
//!                                                  └─ no ──► pool
//!   head ─► controller: 503/429 throttled; else success, with head_latency unless bulk
//!           is pipelined (lanes.rs, "Bulk depth")
//!   body ─► Demand counts the request in its lane until the body ends (lanes.rs);
//!           bulk bytes go to Controller::delivered (goodput)
//! ```
//!
//! What the controller is fed, and why:
//!
//! - `head_latency` (from the request's first byte on the wire to its head), never
//!   `time_to_head`, which runs from the call to `send` and so holds auto's own queueing
//!   (waiting for a pool connection, or behind earlier pipelined responses): fed as
//!   latency, that shrinks the limit in a spiral.
//! - On HTTP/1.1 the latency goes to the controller's per-round rule ("Rising head
//!   latency" in controller.rs), which backs off only while goodput is not growing; the
//!   moving averages h2 uses would read the client's own CPU load as congestion.
//! - Bulk response bytes of object data (`Request::object_data`), so that the limit
//!   stops growing once more connections stop adding bytes per second. A listing page's
//!   bytes do not count: a 1,000-key page arrives as one burst before the downloads it
//!   lists, and its round set a best that 16 KiB downloads never beat, which held the
//!   limit at 9 connections for a whole `ferry cp -r` (docs/lab/wire-auto-paced.md).
//!   Small responses' bytes do not count either: a small request's worth is its first
//!   byte, and counting them held small-only loads back.
//!
//! A small request the pool carries (no verified pipeline yet) counts as the pool's
//! demand, or the pool's share would not grow for it.
//!
//! Measurements behind these choices: docs/lab/wire-auto-lanes.md.

use super::hedge::{send_hedged, Hedger};
use super::lanes::{Demand, DepthTrial, LaneGate, Lanes, SmallTiming, TrialPhase, BULK, BULK_DEPTH, SMALL};
use super::probe::{probe_with, Probe, PROBE_ATTEMPTS, PROBE_INCONCLUSIVE, PROBE_SPACING};
use super::window_cap;
use crate::conn::Connector;
use crate::controller::Controller;
use crate::error::WireError;
use crate::gate::ConnectionGate;
use crate::lane::{is_listing_page, is_small};
use crate::pipeline::PipelineTransport;
use crate::pool::PoolTransport;
use crate::{Request, Response, Transport, TransportConfig, TransportStats};
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(super) struct H1 {
    pub(super) pool: Arc<PoolTransport>,
    pub(super) pipeline: Arc<PipelineTransport>,
    pub(super) bulk_pipeline: Arc<PipelineTransport>,
    pub(super) lanes: Arc<Lanes>,
    /// Whether bulk GETs pipeline, tried and decided once (lanes.rs, "Bulk depth").
    pub(super) depth_trial: Mutex<DepthTrial>,
    pub(super) probe: Arc<Mutex<Probe>>,
    pub(super) small_seen: AtomicU64,
    pub(super) hedger: Arc<Hedger>,
    /// The pool's connector, whose receive-window cap a small request beside bulk ones
    /// engages (conn.rs, "Receive windows of HTTP/1.1 connections").
    pub(super) connector: Connector,
}

impl Drop for H1 {
    /// What the lanes did over the transport's life, for reading with
    /// `FERRY_LOG=ferry_wire::auto=debug` (mixed-hol's connection counts).
    fn drop(&mut self) {
        let (handed, yielded, returned, peak) = {
            let st = self.lanes.lock();
            (st.handed_over, st.yielded, st.returned, st.peak_open)
        };
        tracing::debug!(
            "auto: HTTP/1.1 lanes done: opened pool {} bulk pipeline {} pipeline {} (probes included); handed over pool {} pipeline {}; pool yielded to the bulk pipeline {yielded}, the bulk pipeline returned to the pool {returned}; bulk depth {:?}; peak lanes {:?}; controller {:?}",
            self.pool.stats().connections_opened,
            self.bulk_pipeline.stats().connections_opened,
            self.pipeline.stats().connections_opened,
            handed[BULK],
            handed[SMALL],
            self.depth_trial(),
            peak,
            self.lanes.controller.stats()
        );
    }
}

impl H1 {
    pub(super) fn new(
        config: &TransportConfig,
        connector: Connector,
        controller: Arc<Controller>,
    ) -> Result<H1, WireError> {
        // Each lane may use the whole cap; the gates share it by demand (module note).
        let lanes = Arc::new(Lanes::new(controller));
        let gate = |lane, pool| -> Arc<dyn ConnectionGate> { Arc::new(LaneGate { lanes: lanes.clone(), lane, pool }) };
        let pool = Arc::new(PoolTransport::with_gate(config.clone(), connector.clone(), Some(gate(BULK, true))));
        let pipeline = Arc::new(PipelineTransport::with_gate(config.clone(), Some(gate(SMALL, false)))?);
        let bulk_config = TransportConfig { pipeline_depth: BULK_DEPTH, ..config.clone() };
        let bulk_pipeline = Arc::new(PipelineTransport::with_gate(bulk_config, Some(gate(BULK, false)))?);
        let _ = lanes.pool.set(Arc::downgrade(&pool));
        let _ = lanes.pipeline.set(Arc::downgrade(&pipeline));
        let _ = lanes.bulk_pipeline.set(Arc::downgrade(&bulk_pipeline));
        Ok(H1 {
            pool,
            pipeline,
            bulk_pipeline,
            lanes,
            depth_trial: Mutex::new(DepthTrial::default()),
            probe: Arc::new(Mutex::new(Probe::default())),
            small_seen: AtomicU64::new(0),
            hedger: Arc::new(Hedger::default()),
            connector,
        })
    }

    pub(super) fn verified(&self) -> bool {
        self.pipeline.verified()
    }

    /// Whether a bulk GET goes to the bulk pipeline (lanes.rs, "Bulk depth"): the
    /// endpoint verified pipelining, and the depth trial is trying the pipeline or kept it.
    pub(super) fn bulk_may_pipeline(&self) -> bool {
        if !self.verified() {
            return false;
        }
        let (pipelined, declined) = {
            let mut t = self.depth_trial.lock().unwrap_or_else(|p| p.into_inner());
            let before = t.phase();
            let p = t.pipelined(self.lanes.controller.last_goodput_round());
            (p, before != TrialPhase::Declined && t.phase() == TrialPhase::Declined)
        };
        if declined {
            self.lanes.lock().bulk_pipeline_declined = true;
            self.lanes.nudge();
        }
        pipelined
    }

    pub(super) fn depth_trial(&self) -> TrialPhase {
        self.depth_trial.lock().unwrap_or_else(|p| p.into_inner()).phase()
    }

    /// Verified, or not yet given up on: small requests go (or will go) down the
    /// pipeline, not to the pool for good (probe.rs).
    pub(super) fn may_pipeline(&self) -> bool {
        if self.verified() {
            return true;
        }
        let p = self.probe.lock().unwrap();
        p.running || (p.attempts < PROBE_ATTEMPTS && p.inconclusive < PROBE_INCONCLUSIVE)
    }

    pub(super) async fn send(&self, req: Request) -> Result<Response, WireError> {
        let lane = if is_small(&req) { SMALL } else { BULK };
        if lane == SMALL {
            window_cap::small_request_sent(&self.connector, &self.lanes);
        }
        let sent = Instant::now();
        let object_data = req.object_data;
        let mut demand = Demand::new(self.lanes.clone(), lane);
        let mut pipelined_bulk = false;
        let fut = if lane == BULK {
            self.lanes.bulk_demand_raises_the_start();
            let pipelineable = req.is_pipelineable();
            let pipelined = self.lanes.admit_bulk(|| pipelineable && self.bulk_may_pipeline()).await;
            demand.admitted = true;
            demand.pipelined = pipelined;
            pipelined_bulk = pipelined;
            // The other side of the bulk lane may hold idle connections this request
            // needs (`Lanes::bulk_yields` counts it in from its admission): it is nudged to
            // give them back now. Otherwise only a later response nudged it, and a lone
            // request waited for those connections' idle time-out.
            if pipelined {
                self.pool.nudge();
                self.bulk_pipeline.send(req)
            } else {
                self.bulk_pipeline.nudge();
                self.pool.send(req)
            }
        } else {
            let (fut, on_pool) = self.send_small(req);
            if !on_pool {
                self.lanes.small_demand_raises_the_start();
            }
            if on_pool {
                // A small request the pool carries (no verified pipeline yet) is the
                // pool's demand: counted as small, the pool's share would not grow for
                // it, and with no bulk request active it waited for ever.
                demand = Demand::new(self.lanes.clone(), BULK);
            }
            fut
        };
        let admitted_at = Instant::now();
        let observation = self.lanes.controller.observe();
        let result = fut.await;
        if lane == BULK {
            // Where a bulk request's time to its head went: waiting for admission, then
            // for a connection and the server (a lane's wait for a place shows here).
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            tracing::trace!(
                "auto: bulk head: pipelined {pipelined_bulk}, admission {:.1} ms, then head {:.1} ms; trial {:?}",
                ms(admitted_at - sent),
                ms(admitted_at.elapsed()),
                self.depth_trial()
            );
        }
        match &result {
            Ok(r) if matches!(r.status.as_u16(), 503 | 429) => {
                observation.throttled();
                self.hedger.throttled();
            }
            // A bulk GET on the bulk pipeline: its head latency, when it has one, is not
            // fed to the back-off, which would read the deeper queue as congestion; nor
            // is a small request's once bulk pipelines for good (lanes.rs, "Bulk depth").
            Ok(_) if pipelined_bulk => observation.success_unmeasured(),
            Ok(r) => match r.meta.head_latency {
                Some(latency) => {
                    if lane == SMALL && object_data {
                        self.hedger.observe(latency);
                    }
                    if lane == SMALL && self.depth_trial() == TrialPhase::Kept {
                        observation.success_unmeasured()
                    } else {
                        observation.success_with_head_latency(latency)
                    }
                }
                _ => observation.success_unmeasured(),
            },
            Err(_) => drop(observation),
        }
        // The limit may have moved either way: both lanes look again.
        self.lanes.nudge();
        if lane == SMALL && tracing::enabled!(tracing::Level::TRACE) {
            if let Ok(r) = &result {
                demand.timing =
                    Some(SmallTiming { sent, head_at: Instant::now(), head_latency: r.meta.head_latency, bytes: 0 });
            }
        }
        demand.goodput = object_data;
        result.map(|r| demand.until_body_end(r))
    }

    /// Routes a small request: the pipeline once verified, and while a probe is out
    /// (stacked as deep as the lane allows, probe.rs); else the pool (with a probe first
    /// when one is due). Also says whether the pool took it.
    pub(super) fn send_small(&self, req: Request) -> (BoxFuture<'static, Result<Response, WireError>>, bool) {
        if self.verified() {
            return (send_hedged(self.pipeline.clone(), self.hedger.clone(), req), false);
        }
        if self.probe.lock().unwrap().running || is_listing_page(&req) {
            // A probe is out: the request goes to the pipeline now, never held back for
            // the verdict and never bound to a pool connection's queue (module note of
            // probe.rs). A listing page goes there too but never probes: the probe's
            // copy would be a second LIST, for a single `ls` as many requests again.
            return (self.pipeline.send(req), false);
        }
        let seen = self.small_seen.fetch_add(1, Relaxed);
        let probe_now = {
            let mut p = self.probe.lock().unwrap();
            let due = p.attempts == 0 || seen >= p.last_at + PROBE_SPACING;
            if !p.running && p.attempts < PROBE_ATTEMPTS && p.inconclusive < PROBE_INCONCLUSIVE && due {
                p.running = true;
                p.attempts += 1;
                p.last_at = seen;
                true
            } else {
                false
            }
        };
        if probe_now {
            (probe_with(self.pipeline.clone(), self.probe.clone(), req), false)
        } else {
            (self.pool.send(req), true)
        }
    }

    pub(super) fn stats(&self) -> TransportStats {
        let mut s = add(add(self.pool.stats(), self.pipeline.stats()), self.bulk_pipeline.stats());
        // What is really open: the lanes count a socket until it is dropped, where each
        // lane's own figure drops when it lets the connection go.
        let st = self.lanes.lock();
        s.connections_open = (st.sockets[BULK] + st.sockets[SMALL]) as u64;
        s.hedges_sent = self.hedger.sent.load(Relaxed);
        s.hedges_won = self.hedger.won.load(Relaxed);
        s
    }
}

pub(super) fn add(a: TransportStats, b: TransportStats) -> TransportStats {
    TransportStats {
        connections_opened: a.connections_opened + b.connections_opened,
        connections_open: a.connections_open + b.connections_open,
        requests_sent: a.requests_sent + b.requests_sent,
        requests_resent: a.requests_resent + b.requests_resent,
        hedges_sent: a.hedges_sent + b.hedges_sent,
        hedges_won: a.hedges_won + b.hedges_won,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ControllerOptions;
    use crate::gate::Place;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    /// A socket that counts itself among the live ones until it is dropped.
    struct Counted {
        io: tokio::io::DuplexStream,
        live: Arc<AtomicU64>,
    }

    impl Counted {
        fn new(io: tokio::io::DuplexStream, live: &Arc<AtomicU64>) -> Counted {
            live.fetch_add(1, Relaxed);
            Counted { io, live: live.clone() }
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.live.fetch_sub(1, Relaxed);
        }
    }

    impl AsyncRead for Counted {
        fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
        }
        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_flush(cx)
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
        }
    }

    /// The handover race, deterministically (lanes.rs, a place comes back only with its socket): the pool
    /// lets an idle connection go for the small lane, but its socket closes only when the
    /// connection's own task next runs. On a current-thread runtime nothing runs between
    /// the two, so a place freed when the pool let go (the old order) would let the
    /// pipeline open a socket while both of the pool's were still open: three under a
    /// limit of two. The place must come back only with the socket.
    #[tokio::test(flavor = "current_thread")]
    async fn a_place_comes_back_only_once_its_socket_is_closed() {
        let config = TransportConfig::new(crate::Endpoint::parse("http://127.0.0.1:9").unwrap());
        let connector = Connector::new(&config, &[]).unwrap();
        let controller = Controller::new(ControllerOptions { initial: 4, max: 4, ..ControllerOptions::default() });
        // A SlowDown: limit 2, slow start over (lanes hand places over only after it).
        controller.observe().throttled();
        assert_eq!((controller.limit(), controller.in_slow_start()), (2, false));
        let h1 = H1::new(&config, connector, controller).unwrap();
        // Two bulk requests fill the limit with two pool connections (sockets here are
        // in-memory pipes whose far ends stay open: only the client closes them).
        let live = Arc::new(AtomicU64::new(0));
        let mut far_ends = Vec::new();
        h1.lanes.demand(BULK, 2);
        for id in 1..=2 {
            let (near, far) = tokio::io::duplex(1 << 16);
            far_ends.push(far);
            let conn = crate::conn::Connection {
                io: Box::new(Counted::new(near, &live)),
                alpn_h2: false,
                receive_buffer: None,
                id,
                peer: ([127, 0, 0, 1], 9).into(),
            };
            h1.pool.adopt(conn).await.unwrap();
        }
        h1.lanes.demand(BULK, -2);
        let sockets = || h1.lanes.lock().sockets;
        let places = || h1.lanes.lock().open;
        assert_eq!((h1.pool.idle_connections(), live.load(Relaxed), sockets(), places()), (2, 2, [2, 0], [2, 0]));
        let small_gate: Arc<dyn ConnectionGate> =
            Arc::new(LaneGate { lanes: h1.lanes.clone(), lane: SMALL, pool: false });
        assert!(Place::take(Some(&small_gate)).is_none(), "no place beside two sockets under a limit of two");

        // A small request arrives: the pool gives one idle connection up for it.
        h1.lanes.demand(SMALL, 1);
        assert_eq!(h1.pool.idle_connections(), 1, "the pool let one connection go");
        assert_eq!(live.load(Relaxed), 2, "its socket is not closed yet (its task has not run)");
        assert!(
            Place::take(Some(&small_gate)).is_none(),
            "the pipeline may not open a third socket while both are open"
        );

        // The connection's task runs and closes the socket: now the place is free.
        for _ in 0..100 {
            if live.load(Relaxed) < 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(live.load(Relaxed), 1, "the let-go connection's socket never closed");
        let place = Place::take(Some(&small_gate)).expect("the closed socket's place for the small lane");
        assert_eq!(
            (sockets(), places()),
            ([1, 0], [1, 1]),
            "the bulk lane's socket and place, and the small lane's place"
        );
        drop(place);
        assert_eq!(h1.lanes.lock().peak_sockets, 2);
        drop(far_ends);
    }
}
