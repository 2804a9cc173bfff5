//! Opening connections: DNS resolved once per endpoint and connections spread over all
//! its addresses, TCP with NODELAY, and TLS by rustls with the system roots (native
//! store, else the bundled Mozilla roots) plus an optional CA file.
//!
//! Spreading matters on S3, whose DNS answers name many front-end hosts: connections
//! opened round-robin over the answers share load the way S3's own guidance asks.
//!
//! # Receive windows of HTTP/1.1 connections (auto)
//!
//! An HTTP/1.1 connection carries one response at a time, and an object store serves one
//! response at a known rate (S3 85-90 MB/s per request, GCS 180 MB/s per stream, Azure
//! 45: docs/lab/wire-facts.md). A receive window larger than that rate times the round
//! trip cannot make the response come faster; it only lets the server put more in
//! flight, and what is in flight beyond the path's own bandwidth x delay waits in the
//! bottleneck's queue, in front of the small responses behind it. Linux grows every
//! socket's window towards `tcp_rmem`'s maximum, so twenty bulk connections fill a NIC's
//! queue however small the objects waiting behind them.
//!
//! ```text
//!   new()  ── watch_receive_windows() ──►  Watching: handshake RTTs kept, sockets listed
//!                                             │ engage_window_cap() (auto/window_cap.rs)
//!                                             ▼
//!                                          Capped: every watched socket still open, and
//!                                          each new one at its opening, for good
//! ```
//!
//! Capped, a connection's receive buffer (`SO_RCVBUF`) is [`H1_RESPONSE_RATE`] x the
//! smallest TCP handshake RTT this connector has seen: the smallest, because a connection
//! opened while the queue is full measures the queue in its own RTT. TCP does not take
//! back a window it offered, so an established connection advertises less as the data
//! already offered arrives; a capped socket never gets autotuning back. Left alone: the
//! pipeline's connections (opened by its own connector), connections that ALPN made
//! HTTP/2 (one carries many streams), paths whose product is under `MIN_WINDOW_CAP`
//! (loopback, a LAN: no queue worth capping, and the cap would bind a fast server first)
//! and paths whose product exceeds `net.core.rmem_max` or `MAX_WINDOW_CAP` (long links
//! need the kernel's autotuning, which setting `SO_RCVBUF` turns off for good).
//!
//! # An endpoint that stopped answering
//!
//! Every connection attempt that fails (refused, or not up within the connect time-out)
//! is counted, and a success clears the count. Once the attempts have all failed for at
//! least one connect time-out, the endpoint counts as unreachable: a new attempt fails at
//! once (a retry-safe connect error naming the last cause), except one probe per connect
//! time-out, which tries for real and clears the state if it gets through. Without this a
//! dead link costs every request a full connect time-out per attempt, one after another
//! as the requests queue for connections: 48 small uploads behind a cut link took many
//! minutes to fail. A server that restarts (refusing for a moment) is not cut off: the
//! failures must span a whole connect time-out first.
//!
//! Why only on meeting: a full queue costs only what waits behind it, and capping a
//! download alone cost a quarter of it from a server faster than the rate. With the cap,
//! mixed-hol's loaded small p99 across `--link instance` fell to the unloaded one, and
//! the large objects' rate did not move. Measurements: docs/lab/wire-receive-windows.md.

use crate::error::{ErrorKind, WireError};
use crate::{Scheme, TransportConfig};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A byte stream to the server, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// An open connection.
pub struct Connection {
    pub io: Box<dyn Io>,
    /// Whether TLS ALPN chose HTTP/2.
    pub alpn_h2: bool,
    /// The receive buffer (`SO_RCVBUF`, as the kernel reports it) when the connector
    /// capped this connection's window at its opening; `None` when the kernel sized it
    /// then (a cap engaged later shows in [`Connector::watched_receive_buffers`]).
    pub receive_buffer: Option<u32>,
    /// 1, 2, ... in opening order within its connector.
    pub id: u64,
    pub peer: SocketAddr,
}

/// Opens connections to one endpoint. Cheap to clone.
#[derive(Clone)]
pub struct Connector {
    inner: Arc<Inner>,
}

struct Inner {
    host: String,
    port: u16,
    tls: Option<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
    connect_timeout: Duration,
    addrs: Mutex<Vec<SocketAddr>>,
    next_addr: AtomicUsize,
    opened: AtomicU64,
    /// Bytes/s an HTTP/1.1 connection's receive window is sized for; 0 = off.
    window_rate: AtomicU64,
    /// Whether the cap is in force: set once, by [`Connector::engage_window_cap`].
    engaged: AtomicBool,
    /// The HTTP/1.1 sockets open while windows are watched, for the cap to reach them
    /// when it engages (dead entries are dropped as new ones come).
    watched: Mutex<Vec<Weak<Watch>>>,
    /// The smallest TCP handshake RTT seen, in µs; 0 = none yet.
    min_rtt_us: AtomicU64,
    /// Tests only: an RTT that counts as the smallest seen (loopback's is under the floor).
    assumed_rtt_us: AtomicU64,
    /// Connection attempts failing in a row (module doc: an endpoint that stopped answering).
    reach: Mutex<Reach>,
}

/// Failed connection attempts since the last success.
#[derive(Default)]
struct Reach {
    failures: u32,
    /// When the first of them started.
    failing_since: Option<Instant>,
    /// The last one's cause, said again by the attempts refused without trying.
    last_error: String,
    /// When the last probe of an unreachable endpoint started.
    probed_at: Option<Instant>,
}

/// The rate one HTTP/1.1 response is allowed to arrive at when windows are capped: above
/// S3's 85-90 MB/s and Azure's 45 MB/s per request, so the cap binds the queue, not those
/// servers; GCS's 180 MB/s per stream is made up by the engine's ranged parts on several
/// connections (192 MB/s kept more of the queue full: docs/lab/wire-receive-windows.md;
/// re-measure with `ferry bench mixed-hol --peers none --repeats 3 --link instance`).
pub const H1_RESPONSE_RATE: u64 = 128_000_000;

/// Products below this are left to the kernel: 64 KiB, the window of a path with no
/// queue worth capping (loopback, a LAN; module doc).
const MIN_WINDOW_CAP: u64 = 64 << 10;

/// Products above this are left to the kernel: a long link's windows are autotuning's job
/// (4 MiB: 128 MB/s x 33 ms, well below the 110 ms transatlantic preset, well above a
/// region's 1 ms).
const MAX_WINDOW_CAP: u64 = 4 << 20;

/// The receive buffer for a connection whose path's smallest RTT is `min_rtt`, when one
/// response moves at most `rate` bytes/s and the kernel allows at most `rmem_max`; `None`
/// leaves the kernel's autotuning alone.
pub fn window_cap(rate: u64, min_rtt: Duration, rmem_max: u64) -> Option<u32> {
    let product = (rate as u128 * min_rtt.as_micros() / 1_000_000) as u64;
    (MIN_WINDOW_CAP..=MAX_WINDOW_CAP.min(rmem_max)).contains(&product).then_some(product as u32)
}

impl Connector {
    /// `alpn` lists the protocols offered on TLS, e.g. `[b"h2", b"http/1.1"]`.
    pub fn new(config: &TransportConfig, alpn: &[&[u8]]) -> Result<Connector, WireError> {
        let ep = &config.endpoint;
        let tls = match ep.scheme {
            Scheme::Http => None,
            Scheme::Https => {
                let mut tls = client_config(config.ca_file.as_deref())?;
                tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
                let name = rustls::pki_types::ServerName::try_from(ep.host.clone())
                    .map_err(|e| WireError::config(format!("'{}' is not a valid TLS server name: {e}", ep.host)))?;
                Some((tokio_rustls::TlsConnector::from(Arc::new(tls)), name))
            }
        };
        Ok(Connector {
            inner: Arc::new(Inner {
                host: ep.host.clone(),
                port: ep.port,
                tls,
                connect_timeout: config.connect_timeout,
                addrs: Mutex::new(Vec::new()),
                next_addr: AtomicUsize::new(0),
                opened: AtomicU64::new(0),
                window_rate: AtomicU64::new(0),
                engaged: AtomicBool::new(false),
                watched: Mutex::new(Vec::new()),
                min_rtt_us: AtomicU64::new(0),
                assumed_rtt_us: AtomicU64::new(0),
                reach: Mutex::new(Reach::default()),
            }),
        })
    }

    /// Watches the receive windows of the HTTP/1.1 connections opened from now on: their
    /// handshake RTTs are kept, and [`Connector::engage_window_cap`] caps them all at
    /// [`H1_RESPONSE_RATE`] x the path's smallest RTT (see the module doc).
    pub fn watch_receive_windows(&self) {
        self.inner.window_rate.store(H1_RESPONSE_RATE, Relaxed);
    }

    /// Caps the receive window of every watched connection still open and of each one
    /// opened from now on, for good. Does nothing unless windows are watched.
    pub fn engage_window_cap(&self) {
        if self.inner.window_rate.load(Relaxed) == 0 || self.inner.engaged.swap(true, Relaxed) {
            return;
        }
        let watched: Vec<Arc<Watch>> = self.inner.watched.lock().unwrap().iter().filter_map(|w| w.upgrade()).collect();
        let cap = self.current_cap();
        let mut capped = 0;
        if let Some(cap) = cap {
            for w in &watched {
                capped += usize::from(w.set(cap).is_some());
            }
        }
        tracing::debug!(cap, open = watched.len(), capped, "receive window cap engaged");
    }

    /// Whether [`Connector::engage_window_cap`] has been called (with windows watched).
    pub fn window_cap_engaged(&self) -> bool {
        self.inner.engaged.load(Relaxed)
    }

    /// Watches windows and engages the cap at once: every HTTP/1.1 connection opened
    /// from now on is capped.
    pub fn cap_receive_windows(&self) {
        self.watch_receive_windows();
        self.engage_window_cap();
    }

    /// The receive buffers (`SO_RCVBUF`, as the kernel reports them now) of the watched
    /// connections still open, in opening order; for tests and diagnostics.
    pub fn watched_receive_buffers(&self) -> Vec<u32> {
        let watched = self.inner.watched.lock().unwrap();
        watched.iter().filter_map(|w| w.upgrade()).filter_map(|w| w.receive_buffer()).collect()
    }

    /// Tests only: count `rtt` as the smallest handshake RTT seen, as if the path had it.
    #[doc(hidden)]
    pub fn assume_min_rtt(&self, rtt: Duration) {
        self.inner.assumed_rtt_us.store(rtt.as_micros() as u64, Relaxed);
    }

    /// Connections opened so far.
    pub fn opened(&self) -> u64 {
        self.inner.opened.load(Relaxed)
    }

    async fn addresses(&self) -> Result<Vec<SocketAddr>, WireError> {
        {
            let cached = self.inner.addrs.lock().unwrap();
            if !cached.is_empty() {
                return Ok(cached.clone());
            }
        }
        let host = self.inner.host.clone();
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), self.inner.port))
            .await
            .map_err(|e| WireError::new(ErrorKind::Connect, format!("resolving {host}")).with_source(e))?
            .collect();
        if found.is_empty() {
            return Err(WireError::new(ErrorKind::Connect, format!("{host} resolved to no address")));
        }
        *self.inner.addrs.lock().unwrap() = found.clone();
        Ok(found)
    }

    /// Opens one connection: the next address in turn, TCP, then TLS when the endpoint is
    /// https. All within the connect time-out.
    pub async fn connect(&self) -> Result<Connection, WireError> {
        self.may_try()?;
        let started = Instant::now();
        let r = self.try_connect().await;
        let mut reach = self.inner.reach.lock().unwrap();
        match &r {
            Ok(_) => *reach = Reach::default(),
            Err(e) if e.kind() == ErrorKind::Connect => {
                reach.failures += 1;
                reach.failing_since.get_or_insert(started);
                reach.last_error = e.detail();
            }
            Err(_) => {}
        }
        r
    }

    /// Refuses an attempt without trying when the endpoint is unreachable (module doc),
    /// unless this attempt is the probe that is due.
    fn may_try(&self) -> Result<(), WireError> {
        let limit = self.inner.connect_timeout;
        let now = Instant::now();
        let mut reach = self.inner.reach.lock().unwrap();
        let Some(since) = reach.failing_since else { return Ok(()) };
        if now.duration_since(since) < limit {
            return Ok(());
        }
        if reach.probed_at.is_none_or(|p| now.duration_since(p) >= limit) {
            reach.probed_at = Some(now);
            return Ok(());
        }
        Err(WireError::new(
            ErrorKind::Connect,
            format!(
                "{}:{} is unreachable: {} connection attempts in a row failed over {:.0?} (the last: {})",
                self.inner.host,
                self.inner.port,
                reach.failures,
                now.duration_since(since),
                reach.last_error
            ),
        ))
    }

    async fn try_connect(&self) -> Result<Connection, WireError> {
        let addrs = self.addresses().await?;
        let first = self.inner.next_addr.fetch_add(1, Relaxed);
        let mut last_err = None;
        // Try each address once, starting from this connection's turn.
        for i in 0..addrs.len() {
            let addr = addrs[(first + i) % addrs.len()];
            match tokio::time::timeout(self.inner.connect_timeout, self.open(addr)).await {
                Ok(Ok(c)) => return Ok(c),
                Ok(Err(e)) if e.kind() == ErrorKind::Tls => return Err(e),
                Ok(Err(e)) => last_err = Some(e),
                Err(_) => {
                    last_err = Some(WireError::new(
                        ErrorKind::Connect,
                        format!("connecting to {addr} timed out after {:?}", self.inner.connect_timeout),
                    ))
                }
            }
        }
        Err(last_err.unwrap_or_else(|| WireError::new(ErrorKind::Connect, "no address to connect to")))
    }

    async fn open(&self, addr: SocketAddr) -> Result<Connection, WireError> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| WireError::new(ErrorKind::Connect, addr.to_string()).with_source(e))?;
        let _ = tcp.set_nodelay(true);
        let id = self.inner.opened.fetch_add(1, Relaxed) + 1;
        let watching = self.learn_rtt(&tcp);
        match &self.inner.tls {
            None => {
                let (watch, receive_buffer) = if watching { self.watch(&tcp) } else { (None, None) };
                Ok(Connection { io: watched(tcp, watch), alpn_h2: false, receive_buffer, id, peer: addr })
            }
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await.map_err(|e| {
                    WireError::new(ErrorKind::Tls, format!("TLS handshake with {}", self.inner.host)).with_source(e)
                })?;
                let alpn_h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let (watch, receive_buffer) =
                    if watching && !alpn_h2 { self.watch(tls.get_ref().0) } else { (None, None) };
                Ok(Connection { io: watched(tls, watch), alpn_h2, receive_buffer, id, peer: addr })
            }
        }
    }

    /// Keeps the path's smallest handshake RTT from a connection just opened; answers
    /// whether windows are watched.
    fn learn_rtt(&self, tcp: &TcpStream) -> bool {
        if self.inner.window_rate.load(Relaxed) == 0 {
            return false;
        }
        let assumed = self.inner.assumed_rtt_us.load(Relaxed);
        let rtt = if assumed > 0 { Some(assumed) } else { socket::handshake_rtt_us(tcp) };
        if let Some(rtt) = rtt {
            let _ = self.inner.min_rtt_us.fetch_update(Relaxed, Relaxed, |m| (m == 0 || rtt < m).then_some(rtt));
            tracing::trace!(rtt_us = rtt, "handshake RTT");
        }
        true
    }

    /// Registers an HTTP/1.1 socket for the cap, capping it now when the cap is in force:
    /// the watch (held by the connection's stream) and the receive buffer set, if any.
    fn watch(&self, tcp: &TcpStream) -> (Option<Arc<Watch>>, Option<u32>) {
        let Some(watch) = Watch::of(tcp) else { return (None, None) };
        let watch = Arc::new(watch);
        let mut watched = self.inner.watched.lock().unwrap();
        watched.retain(|w| w.strong_count() > 0);
        watched.push(Arc::downgrade(&watch));
        // Read under the lock: `engage_window_cap` sets the flag before it takes the list,
        // so a socket is capped here, there, or (harmlessly) both.
        let set =
            if self.inner.engaged.load(Relaxed) { self.current_cap().and_then(|cap| watch.set(cap)) } else { None };
        (Some(watch), set)
    }

    /// The cap from the smallest handshake RTT seen so far; `None` when none was seen
    /// or the rule leaves the window to the kernel.
    fn current_cap(&self) -> Option<u32> {
        let min = self.inner.min_rtt_us.load(Relaxed);
        if min == 0 {
            return None;
        }
        window_cap(self.inner.window_rate.load(Relaxed), Duration::from_micros(min), socket::rmem_max()?)
    }
}

/// A connection's stream, with the [`Watch`] on its socket when there is one.
fn watched<T: Io>(io: T, watch: Option<Arc<Watch>>) -> Box<dyn Io> {
    match watch {
        Some(watch) => Box::new(Watched { io, _watch: watch }),
        None => Box::new(io),
    }
}

/// A stream and the watch on its socket, which lives exactly as long as the stream.
struct Watched<T> {
    io: T,
    _watch: Arc<Watch>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A watched socket: a duplicate of its descriptor, so that the number cannot come to name
/// another socket while the watch lives (it lives as long as the connection's stream).
struct Watch {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
}

impl Watch {
    #[cfg(target_os = "linux")]
    fn of(tcp: &TcpStream) -> Option<Watch> {
        use std::os::fd::AsFd;
        Some(Watch { fd: tcp.as_fd().try_clone_to_owned().ok()? })
    }

    #[cfg(not(target_os = "linux"))]
    fn of(_: &TcpStream) -> Option<Watch> {
        None
    }

    /// Sets the receive buffer (`SO_RCVBUF`); answers what the kernel reports back (it
    /// doubles the request to allow for its bookkeeping).
    #[cfg(target_os = "linux")]
    fn set(&self, bytes: u32) -> Option<u32> {
        socket2::SockRef::from(&self.fd).set_recv_buffer_size(bytes as usize).ok()?;
        self.receive_buffer()
    }

    /// `SO_RCVBUF` as the kernel reports it.
    #[cfg(target_os = "linux")]
    fn receive_buffer(&self) -> Option<u32> {
        socket2::SockRef::from(&self.fd).recv_buffer_size().ok().map(|b| b as u32)
    }

    // Never called: `of` makes no watch off Linux.
    #[cfg(not(target_os = "linux"))]
    fn set(&self, _: u32) -> Option<u32> {
        None
    }

    #[cfg(not(target_os = "linux"))]
    fn receive_buffer(&self) -> Option<u32> {
        None
    }
}

/// What the window cap needs beyond socket2's `SO_RCVBUF`: Linux's `TCP_INFO` (the
/// handshake RTT), through libc because neither tokio nor socket2 exposes it, and
/// `rmem_max`. Elsewhere the cap is off (every function answers `None`).
mod socket {
    use tokio::net::TcpStream;

    /// The kernel's RTT estimate (µs) of a connection just opened: its handshake.
    #[cfg(target_os = "linux")]
    pub fn handshake_rtt_us(tcp: &TcpStream) -> Option<u64> {
        use std::os::fd::AsRawFd;
        // SAFETY: tcp_info is plain data; getsockopt writes at most `len` bytes into it.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                tcp.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        (rc == 0 && info.tcpi_rtt > 0).then_some(info.tcpi_rtt as u64)
    }

    /// `net.core.rmem_max`: `SO_RCVBUF` silently clamps to it.
    #[cfg(target_os = "linux")]
    pub fn rmem_max() -> Option<u64> {
        static MAX: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        *MAX.get_or_init(|| std::fs::read_to_string("/proc/sys/net/core/rmem_max").ok()?.trim().parse().ok())
    }

    #[cfg(not(target_os = "linux"))]
    pub fn handshake_rtt_us(_: &TcpStream) -> Option<u64> {
        None
    }

    #[cfg(not(target_os = "linux"))]
    pub fn rmem_max() -> Option<u64> {
        None
    }
}

/// A rustls client configuration trusting the system's roots and `ca_file`.
pub fn client_config(ca_file: Option<&std::path::Path>) -> Result<rustls::ClientConfig, WireError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = ca_file {
        let pem = std::fs::read(path)
            .map_err(|e| WireError::config(format!("reading CA file {}", path.display())).with_source(e))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert =
                cert.map_err(|e| WireError::config(format!("parsing CA file {}", path.display())).with_source(e))?;
            roots.add(cert).map_err(|e| WireError::config(format!("CA file {}", path.display())).with_source(e))?;
            added += 1;
        }
        if added == 0 {
            return Err(WireError::config(format!("CA file {} holds no certificate", path.display())));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| WireError::config("TLS protocol versions").with_source(e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_cap_is_rate_times_rtt_inside_its_bounds() {
        let big = 1 << 30;
        assert_eq!(window_cap(128_000_000, MS, big), Some(128_000));
        assert_eq!(window_cap(128_000_000, 10 * MS, big), Some(1_280_000));
        // Loopback, a LAN: under 64 KiB.
        assert_eq!(window_cap(128_000_000, Duration::from_micros(40), big), None);
        assert_eq!(window_cap(65_536_000_000 / 1000, MS, big), Some(65_536));
        // A long link: autotuning's job.
        assert_eq!(window_cap(128_000_000, 110 * MS, big), None);
        assert_eq!(window_cap(4_194_304_000, MS, big), Some(4 << 20));
        // Above rmem_max the kernel would clamp the request below the product: leave it.
        assert_eq!(window_cap(128_000_000, 2 * MS, 212_992), None);
        assert_eq!(window_cap(128_000_000, MS, 212_992), Some(128_000));
    }
}
