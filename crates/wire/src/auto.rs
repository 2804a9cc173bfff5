//! auto, the default transport: the endpoint's answers decide, the user tunes nothing.
//!
//! ```text
//!  https ── first request: open one connection offering ALPN [h2, http/1.1]
//!             ├─ server chose h2 ─────► H2Transport (takes that connection), for everything
//!             └─ server chose http/1.1 ► HTTP/1.1 (the pool takes that connection)
//!  http ──────────────────────────────► HTTP/1.1 (no ALPN; h2c only when forced with Mode::H2)
//!
//!  HTTP/1.1: small idempotent request ── pipeline verified? ── yes ─► PipelineTransport
//!                                          └─ no ─► pool (one probe first, see below)
//!            anything else ────────────────────────────────────────► PoolTransport
//! ```
//!
//! *Small* means [`Request::is_pipelineable`] (GET or HEAD without a body) and: a HEAD,
//! or a GET whose Range asks for at most [`SMALL_GET_BYTES`], or a GET without a Range
//! whose caller knows the object is that small ([`Request::size_hint`], from a listing
//! or a HEAD). Any other GET counts as large: its object may be any size, and a large
//! body holds up every response pipelined behind it.
//!
//! *Verified* is [`PipelineTransport::verified`]: a batch of two or more requests written
//! in one write was answered correctly. To earn it without risking callers' requests on
//! an endpoint that mishandles pipelining, auto runs a probe: the first small request
//! goes to a one-connection pipeline together with a copy of itself, written back to
//! back. The caller gets the first response, which any HTTP/1.1 server answers
//! correctly; the copy's response is read and thrown away. If the batch was answered
//! well, small requests go to the pipeline from then on; if the copy was answered badly,
//! auto stays on the pool and tries again after [`PROBE_SPACING`] more small requests, at
//! most [`PROBE_ATTEMPTS`] times. A probe whose answers were fine but did not verify
//! (the two requests were not written in one batch: the connection opened between
//! them, which a busy machine makes possible) is retried with the next small request,
//! at most [`PROBE_INCONCLUSIVE`] times. The cost is one duplicated small request per
//! probe. (A pipeline call that queues several requests at once would make the batch
//! certain; `PipelineTransport` does not offer one yet.)
//!
//! On HTTP/1.1 the connection cap is split: an eighth for the pipeline, one for its probe,
//! the rest for the pool, so auto never opens more than the cap (`ferry bench
//! small-objects` showed 65 connections under a cap of 32 before the split). Splitting
//! in halves instead cost plain GETs half their connections (-48% objects/s in the
//! same bench).
//!
//! Connection ids in [`crate::ResponseMeta`] are per sub-transport: the pool and h2 share
//! auto's connector, the pipelines number their own.

use crate::conn::Connector;
use crate::error::WireError;
use crate::h2::H2Transport;
use crate::pipeline::PipelineTransport;
use crate::pool::PoolTransport;
use crate::{Request, Response, Scheme, Transport, TransportConfig, TransportStats};
use futures_util::future::{BoxFuture, FutureExt};
use http::header::RANGE;
use http::{HeaderMap, Method};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use tokio::sync::OnceCell;

/// Largest ranged GET sent down the pipeline: 1 MiB takes ~12 ms at S3's 90 MB/s per
/// connection (LAB.md section 1), less than the ~30 ms first-byte p50 that pipelining
/// hides for the requests behind it; larger bodies would cost them more than they save.
pub const SMALL_GET_BYTES: u64 = 1024 * 1024;

/// Small requests between two pipeline probes.
pub const PROBE_SPACING: u64 = 100;

/// Probes before auto settles on the pool for good.
pub const PROBE_ATTEMPTS: u32 = 3;

/// Probes answered well that did not verify before auto stops probing: each costs one
/// duplicated small request.
pub const PROBE_INCONCLUSIVE: u32 = 8;

/// Largest body of the probe's copy that is read to discard it (it is small by rule).
const PROBE_DISCARD_LIMIT: usize = 2 * SMALL_GET_BYTES as usize;

/// Chooses the transport per endpoint (ALPN) and per request (size, verified pipelining).
pub struct AutoTransport {
    inner: Arc<Inner>,
}

struct Inner {
    config: TransportConfig,
    connector: Connector,
    chosen: OnceCell<Chosen>,
}

enum Chosen {
    H2(H2Transport),
    H1(H1),
}

struct H1 {
    pool: PoolTransport,
    pipeline: PipelineTransport,
    probe: Arc<Mutex<Probe>>,
    small_seen: AtomicU64,
}

#[derive(Default)]
struct Probe {
    running: bool,
    /// Probes whose batch was answered badly (or failed).
    attempts: u32,
    /// Probes answered well that still did not verify: most likely the two requests were
    /// not written in one batch (the connection opened between them). Not held against
    /// the endpoint, but bounded.
    inconclusive: u32,
    /// `small_seen` when the last probe started.
    last_at: u64,
    /// Kept for its statistics once done.
    transports: Vec<Arc<PipelineTransport>>,
}

impl AutoTransport {
    pub fn new(config: TransportConfig) -> Result<AutoTransport, WireError> {
        let connector = Connector::new(&config, &[b"h2", b"http/1.1"])?;
        let chosen = OnceCell::new();
        if config.endpoint.scheme == Scheme::Http {
            let _ = chosen.set(Chosen::H1(H1::new(&config, connector.clone())?));
        }
        Ok(AutoTransport { inner: Arc::new(Inner { config, connector, chosen }) })
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

    /// Whether small requests now go down the pipeline.
    pub fn pipelining(&self) -> bool {
        match self.inner.chosen.get() {
            Some(Chosen::H1(h1)) => h1.verified(),
            _ => false,
        }
    }
}

impl H1 {
    fn new(config: &TransportConfig, connector: Connector) -> Result<H1, WireError> {
        // The connection cap is shared: an eighth for pipelining (each pipelined
        // connection carries `pipeline_depth` requests, so few are needed), one for the
        // probe, the rest for the pool. A static split keeps the cap a cap; sharing it by
        // demand is the scheduler's job (issue 5).
        let (pool_conns, pipe_conns) = split_connections(config.max_connections);
        Ok(H1 {
            pool: PoolTransport::with_connector(TransportConfig { max_connections: pool_conns, ..config.clone() }, connector),
            pipeline: PipelineTransport::new(TransportConfig { max_connections: pipe_conns, ..config.clone() })?,
            probe: Arc::new(Mutex::new(Probe::default())),
            small_seen: AtomicU64::new(0),
        })
    }

    fn verified(&self) -> bool {
        self.pipeline.verified() || self.probe.lock().unwrap().transports.iter().any(|p| p.verified())
    }

    fn send(&self, config: &TransportConfig, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
        if !is_small(&req) {
            return self.pool.send(req);
        }
        if self.verified() {
            return self.pipeline.send(req);
        }
        let seen = self.small_seen.fetch_add(1, Relaxed);
        let probe = {
            let mut p = self.probe.lock().unwrap();
            let due = p.attempts == 0 || seen >= p.last_at + PROBE_SPACING;
            if !p.running && p.attempts < PROBE_ATTEMPTS && p.inconclusive < PROBE_INCONCLUSIVE && due {
                p.running = true;
                p.attempts += 1;
                p.last_at = seen;
                let one = TransportConfig { max_connections: 1, pipeline_depth: config.pipeline_depth.max(2), ..config.clone() };
                match PipelineTransport::new(one) {
                    Ok(t) => {
                        let t = Arc::new(t);
                        p.transports.push(t.clone());
                        Some(t)
                    }
                    Err(_) => {
                        p.running = false;
                        None
                    }
                }
            } else {
                None
            }
        };
        match probe {
            Some(t) => probe_with(t, self.probe.clone(), req),
            None => self.pool.send(req),
        }
    }

    fn stats(&self) -> TransportStats {
        let mut s = add(self.pool.stats(), self.pipeline.stats());
        for t in &self.probe.lock().unwrap().transports {
            s = add(s, t.stats());
        }
        s
    }
}

/// Connections for (pool, pipeline) under a cap of `max`, leaving one for the probe:
/// their sum plus the probe's connection never exceeds `max` (when `max` >= 3).
fn split_connections(max: usize) -> (usize, usize) {
    let pipe = (max / 8).max(1);
    let pool = max.saturating_sub(pipe + 1).max(1);
    (pool, pipe)
}

/// Sends `req` and a copy of it back to back on `t` (one connection), so that they are
/// written in one batch; returns the first response and discards the copy's. The probe
/// ends when the copy's response has been read.
fn probe_with(t: Arc<PipelineTransport>, state: Arc<Mutex<Probe>>, req: Request) -> BoxFuture<'static, Result<Response, WireError>> {
    let mut copy = Request::new(req.method.clone(), req.path_and_query.clone());
    copy.headers = req.headers.clone();
    let mut first = t.send(req);
    let mut second = t.send(copy);
    Box::pin(async move {
        // A pipeline send queues its request on its first poll: poll both at once, so
        // both are queued while the connection is still opening and its writer sends
        // them in one batch.
        let (p1, p2) = std::future::poll_fn(|cx| Poll::Ready((first.poll_unpin(cx), second.poll_unpin(cx)))).await;
        tokio::spawn(async move {
            let copy = match p2 {
                Poll::Ready(r) => r,
                Poll::Pending => second.await,
            };
            let answered_well = match copy {
                Ok(r) => r.status != http::StatusCode::BAD_REQUEST && r.status != http::StatusCode::HTTP_VERSION_NOT_SUPPORTED && r.body.collect(PROBE_DISCARD_LIMIT).await.is_ok(),
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
        });
        match p1 {
            Poll::Ready(r) => r,
            Poll::Pending => first.await,
        }
    })
}

fn add(a: TransportStats, b: TransportStats) -> TransportStats {
    TransportStats {
        connections_opened: a.connections_opened + b.connections_opened,
        connections_open: a.connections_open + b.connections_open,
        requests_sent: a.requests_sent + b.requests_sent,
        requests_resent: a.requests_resent + b.requests_resent,
    }
}

/// The rule of the module note: a HEAD, or a GET of at most [`SMALL_GET_BYTES`] (by its
/// Range, else by the caller's [`Request::size_hint`]), without a body.
pub fn is_small(req: &Request) -> bool {
    if !req.is_pipelineable() {
        return false;
    }
    if req.method == Method::HEAD {
        return true;
    }
    match range_len(&req.headers) {
        Some(n) => n <= SMALL_GET_BYTES,
        None => !req.headers.contains_key(RANGE) && req.size_hint.is_some_and(|n| n <= SMALL_GET_BYTES),
    }
}

/// A request's lane (issue 5: small requests never queue behind a large transfer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Moves at most [`SMALL_GET_BYTES`] either way, as far as the request shows.
    Small,
    /// Moves more, or an unknown amount ("unknown counts as large until proven small").
    Bulk,
}

/// The lane of a request: [`is_small`] GETs and HEADs; requests with a body of at most
/// [`SMALL_GET_BYTES`] other than GET (PUT, POST, DELETE: S3 answers them with a short
/// XML or an empty body); everything else is bulk.
pub fn lane(req: &Request) -> Lane {
    if is_small(req) || (req.method != Method::GET && req.body.len() <= SMALL_GET_BYTES) {
        Lane::Small
    } else {
        Lane::Bulk
    }
}

/// Bytes asked for by a single `Range: bytes=a-b` or `bytes=-n` (RFC 9110 section
/// 14.1.2); `None` for open-ended, multiple or unparseable ranges.
pub fn range_len(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get(RANGE)?.to_str().ok()?.trim();
    let spec = v.strip_prefix("bytes=")?.trim();
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        return b.parse().ok();
    }
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    b.checked_sub(a).map(|d| d + 1)
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
                    let h1 = H1::new(&self.config, self.connector.clone())?;
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
            let fut = match inner.choose().await? {
                Chosen::H2(h2) => h2.send(req),
                Chosen::H1(h1) => h1.send(&inner.config, req),
            };
            fut.await
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn get(range: Option<&str>) -> Request {
        let mut r = Request::new(Method::GET, "/b/k");
        if let Some(v) = range {
            r.headers.insert(RANGE, HeaderValue::from_str(v).unwrap());
        }
        r
    }

    #[test]
    fn small_requests_are_heads_and_short_ranges() {
        assert!(is_small(&Request::new(Method::HEAD, "/b/k")));
        assert!(is_small(&get(Some("bytes=0-1048575"))));
        assert!(!is_small(&get(Some("bytes=0-1048576"))));
        assert!(is_small(&get(Some("bytes=-4096"))));
        assert!(!is_small(&get(Some("bytes=100-"))), "open-ended");
        assert!(!is_small(&get(Some("bytes=0-1,5-9"))), "multiple ranges");
        assert!(!is_small(&get(None)), "unknown size");
        let hinted = |n: u64, range: Option<&str>| {
            let mut r = get(range);
            r.size_hint = Some(n);
            r
        };
        assert!(is_small(&hinted(16 * 1024, None)), "known small from a listing");
        assert!(!is_small(&hinted(SMALL_GET_BYTES + 1, None)), "known large");
        assert!(!is_small(&hinted(16 * 1024, Some("bytes=100-"))), "an open range is not bounded by the hint's rule");
        assert!(!is_small(&Request::new(Method::PUT, "/b/k")));
        assert_eq!(lane(&Request::new(Method::PUT, "/b/k")), Lane::Small, "an empty PUT (CopyObject, CreateBucket)");
        let mut part = Request::new(Method::PUT, "/b/k?partNumber=1");
        part.body = crate::RequestBody::Full(bytes::Bytes::from(vec![0u8; 8 << 20]));
        assert_eq!(lane(&part), Lane::Bulk, "an 8 MiB part");
        assert_eq!(lane(&get(None)), Lane::Bulk, "unknown size");
        assert_eq!(lane(&get(Some("bytes=0-4095"))), Lane::Small);
        assert!(!is_small(&Request::new(Method::DELETE, "/b/k")));
    }
}

#[cfg(test)]
mod split_tests {
    use super::split_connections;

    #[test]
    fn the_split_stays_within_the_cap() {
        for max in 3..200 {
            let (pool, pipe) = split_connections(max);
            assert!(pool >= 1 && pipe >= 1);
            assert!(pool + pipe < max, "{max}: {pool} + {pipe} + probe");
        }
        assert_eq!(split_connections(32), (27, 4));
    }
}
