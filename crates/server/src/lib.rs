//! `ferry serve`: an S3-compatible server that behaves like the clouds.
//!
//! It is the embedded default that every ferry test, demo and benchmark runs against, and
//! a real data server. Data flows:
//!
//! ```text
//! TCP accept ─► (TLS, ALPN) ─► protocol detection ─┬─► h1.rs (pipelining, our parser)
//!                                                  └─► h2.rs (hyper)
//!                     both ─► app.rs: auth, emulation, routing ─► s3/ handlers ─► ferry-backend
//! ```
//!
//! Cleartext connections that open with the HTTP/2 preface are served as h2c (prior
//! knowledge); everything else is HTTP/1.1. The emulation profile can switch h2 off, as
//! S3 and Azure do.
//!
//! # Threads
//!
//! One thread accepts; each connection is handed to one of N connection threads (one per
//! core unless `ServeConfig::threads` says otherwise), round robin, and lives there to
//! the end: each connection thread runs a current-thread tokio runtime, so a
//! connection's socket, its h2 streams, its emulation timers and the handlers they run
//! are all woken and polled on one thread. This is how nghttpd and most fast servers are
//! built. On a work-stealing runtime, the same connection's wake-ups crossed between
//! worker threads, and one worker served more requests/s than two
//! (docs/lab/server-write-path.md; `scripts/bench-serve.sh --only rate`). The cost:
//! a connection cannot move off a busy thread, so N connections of very unequal weight
//! can leave a core idle; uploads that hash (MD5 and the checksums are sequential per
//! object) still spawn tasks of their own, but on their connection's thread.

pub mod app;
mod batch;
pub mod config;
pub mod emulate;
pub mod fdlimit;
mod h1;
mod h2;
pub mod metrics;
mod s3;
pub mod sts;
mod tls;
pub mod types;

pub use config::{Emulation, Faults, Limits, Profile, ServeConfig, Storage, TlsConfig};

/// The HTTP/1.1 connection loop over any byte stream, for the fuzz targets in `fuzz/`
/// (they feed it an in-memory pipe). Not an API: the server's entry point is
/// [`Server`].
#[doc(hidden)]
pub mod fuzzing {
    use crate::app::App;
    use std::sync::Arc;
    use tokio::io::{AsyncRead, AsyncWrite};

    /// Serves one HTTP/1.1 connection on `io` until it ends, as `ferry serve` does for an
    /// accepted TCP connection.
    pub async fn serve_h1<IO: AsyncRead + AsyncWrite + Send + 'static>(io: IO, app: Arc<App>) {
        crate::h1::serve(io, bytes::BytesMut::new(), app, None).await
    }
}

use anyhow::{Context, Result};
use app::App;
use bytes::BytesMut;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The HTTP/2 connection preface (RFC 9113 section 3.4).
pub(crate) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A bound server, not yet accepting.
pub struct Server {
    listener: TcpListener,
    app: Arc<App>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    threads: usize,
    fd_limit: Option<fdlimit::FdLimit>,
}

impl Server {
    /// Opens the backend and binds the listening socket, after raising the process's
    /// open-file limit to its hard limit (fdlimit.rs; [`Server::fd_limit`] says what it got).
    pub async fn bind(config: ServeConfig) -> Result<Server> {
        let fd_limit = match fdlimit::raise_open_file_limit() {
            Ok(l) => {
                tracing::info!("{}", l.describe(config.limits.max_connections));
                if let Some(w) = l.shortfall(config.limits.max_connections) {
                    tracing::warn!("{w}");
                }
                Some(l)
            }
            Err(e) => {
                tracing::warn!("reading the open-file limit failed: {e}");
                None
            }
        };
        let tls = match &config.tls {
            Some(t) => Some(tokio_rustls::TlsAcceptor::from(tls::server_config(t, config.emulation.h2)?)),
            None => None,
        };
        let listener = TcpListener::bind(config.addr).await.with_context(|| format!("binding {}", config.addr))?;
        let threads = config.threads;
        let app = App::new(config).await?;
        Ok(Server { listener, app: Arc::new(app), tls, threads, fd_limit })
    }

    /// The open-file limit found and set at bind (`None` if it could not be read).
    pub fn fd_limit(&self) -> Option<fdlimit::FdLimit> {
        self.fd_limit
    }

    /// The connection cap in force (`Limits::max_connections`).
    pub fn max_connections(&self) -> usize {
        self.app.limits.max_connections
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound socket has an address")
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The store this server serves (a cheap clone sharing it): for tests that look at
    /// what a request left behind, e.g. `Backend::memory_usage`.
    pub fn backend(&self) -> ferry_backend::Backend {
        self.app.backend.clone()
    }

    /// Accepts connections until `shutdown` completes, handing each to a connection
    /// thread (see "Threads" above), round robin.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let threads = match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let workers = Workers::start(threads)?;
        let permits = Arc::new(Semaphore::new(self.app.limits.max_connections));
        tokio::pin!(shutdown);
        loop {
            let (stream, _peer) = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and friends: back off briefly instead of spinning.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            // Off this runtime's reactor, onto the worker's (registered again there).
            let stream = match stream.into_std() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("handing over an accepted connection failed: {e}");
                    continue;
                }
            };
            let app = self.app.clone();
            let tls = self.tls.clone();
            let permit = permits.clone().try_acquire_owned();
            workers.next().spawn(async move {
                let stream = match TcpStream::from_std(stream) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("registering a connection failed: {e}");
                        return;
                    }
                };
                let Ok(_permit) = permit else {
                    app.metrics.connections_refused.fetch_add(1, Relaxed);
                    refuse(stream, &app).await;
                    return;
                };
                app.metrics.connections_open.fetch_add(1, Relaxed);
                serve_connection(stream, tls, app.clone()).await;
                app.metrics.connections_open.fetch_sub(1, Relaxed);
            });
        }
    }
}

/// The connection threads: each runs a current-thread runtime until the server stops;
/// dropping this stops them (their connections are dropped, as on the accepting
/// runtime before) and joins them.
struct Workers {
    handles: Vec<tokio::runtime::Handle>,
    next: std::sync::atomic::AtomicUsize,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    fn start(n: usize) -> Result<Workers> {
        let mut workers =
            Workers { handles: Vec::new(), next: Default::default(), stops: Vec::new(), threads: Vec::new() };
        for i in 0..n.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            workers.handles.push(rt.handle().clone());
            workers.stops.push(stop);
            workers.threads.push(std::thread::Builder::new().name(format!("ferry-conn-{i}")).spawn(move || {
                rt.block_on(async move {
                    let _ = stopped.await;
                });
            })?);
        }
        Ok(workers)
    }

    fn next(&self) -> &tokio::runtime::Handle {
        &self.handles[self.next.fetch_add(1, Relaxed) % self.handles.len()]
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A server running on a thread and runtime of its own, stopped (and joined) when
/// dropped: the embedded server that tests, benchmarks and demos start in-process.
pub struct BackgroundServer {
    addr: SocketAddr,
    tls: bool,
    backend: ferry_backend::Backend,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BackgroundServer {
    /// Binds and starts serving; returns once the socket accepts connections.
    pub fn start(config: ServeConfig) -> Result<BackgroundServer> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("ferry-serve".into()).spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::Error::from(e)));
                    return;
                }
            };
            rt.block_on(async move {
                let server = match Server::bind(config).await {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok((server.local_addr(), server.is_tls(), server.backend())));
                let _ = server
                    .run(async move {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
        })?;
        let (addr, tls, backend) =
            ready_rx.recv().map_err(|_| anyhow::anyhow!("the server thread ended before it was ready"))??;
        Ok(BackgroundServer { addr, tls, backend, stop: Some(stop_tx), thread: Some(thread) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The store this server serves (see [`Server::backend`]).
    pub fn backend(&self) -> &ferry_backend::Backend {
        &self.backend
    }

    /// `http://127.0.0.1:PORT` (or https).
    pub fn url(&self) -> String {
        format!("{}://{}", if self.tls { "https" } else { "http" }, self.addr)
    }
}

impl Drop for BackgroundServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers a connection over the cap with 503 and closes it.
async fn refuse(stream: TcpStream, app: &App) {
    use tokio::io::AsyncWriteExt;
    let body = app.error_xml("SlowDown", "Too many connections.", None);
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = stream;
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Waits for a connection's first byte, then serves it. A task's allocation is as large
/// as the largest state of its future, so each protocol's future (the TLS handshake,
/// HTTP/1.1 or HTTP/2 over TCP or TLS) is boxed where it starts: a connection that has
/// sent nothing holds none of them, and one being served holds only its own, not the
/// largest of the four (`size_of_val` in a debug build: the task was 9,320 bytes with
/// all of them inline; now a few hundred, plus the boxed HTTP/1.1 connection's ~2,300). The
/// protocol detection's reads and timers and the TLS session are boxed for the same
/// reason. A TLS client speaks first too (its ClientHello), so the same wait applies.
async fn serve_connection(stream: TcpStream, tls: Option<tokio_rustls::TlsAcceptor>, app: Arc<App>) {
    // A TLS handshake must be done within the header time-out of the accept; a plain
    // connection's first byte may take the idle time-out.
    let accepted = tokio::time::Instant::now();
    let wait = if tls.is_some() { app.limits.header_timeout } else { app.limits.idle_timeout };
    match tokio::time::timeout(wait, stream.readable()).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) | Err(_) => {
            if tls.is_some() {
                app.metrics.tls_handshake_failures.fetch_add(1, Relaxed);
            }
            return;
        }
    }
    serve_readable(stream, tls, app, accepted).await
}

async fn serve_readable(
    stream: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Arc<App>,
    accepted: tokio::time::Instant,
) {
    let fd = stream.as_raw_fd();
    match tls {
        Some(acceptor) => {
            // The session is boxed too (~1.2 KiB), so that it is not part of every
            // plain connection's future.
            let handshake = tokio::time::timeout_at(accepted + app.limits.header_timeout, async {
                Box::pin(acceptor.accept(stream)).await.map(Box::new)
            });
            let tls_stream = match Box::pin(handshake).await {
                Ok(Ok(s)) => s,
                _ => {
                    app.metrics.tls_handshake_failures.fetch_add(1, Relaxed);
                    return;
                }
            };
            let is_h2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2");
            if is_h2 {
                app.metrics.h2_connections_opened.fetch_add(1, Relaxed);
                Box::pin(h2::serve(tls_stream, app)).await;
            } else {
                app.metrics.h1_connections_opened.fetch_add(1, Relaxed);
                Box::pin(h1::serve(tls_stream, BytesMut::new(), app, Some(fd))).await;
            }
        }
        None => {
            let mut stream = stream;
            // Only now, with the first byte here, is a read buffer taken: a connection
            // that never sends one costs no buffer (docs/lab/load.md, idle connections).
            // Boxed: its timers and reads would otherwise be part of the connection's
            // task for as long as it lives.
            let Some((h2, initial)) = Box::pin(detect_h2(&mut stream, &app)).await else {
                return;
            };
            if h2 {
                app.metrics.h2_connections_opened.fetch_add(1, Relaxed);
                Box::pin(h2::serve(Prefixed { prefix: initial, io: stream }, app)).await;
            } else {
                app.metrics.h1_connections_opened.fetch_add(1, Relaxed);
                Box::pin(h1::serve(stream, initial, app, Some(fd))).await;
            }
        }
    }
}

/// Reads until the bytes either match the h2 preface or cannot: the first byte within the
/// idle time-out, the rest within the header time-out (a client trickling the preface is
/// a slow-loris too). Whether it is h2, and the bytes read; `None` if the client closed
/// or a time-out passed.
async fn detect_h2(stream: &mut TcpStream, app: &App) -> Option<(bool, BytesMut)> {
    let mut initial = BytesMut::with_capacity(64 * 1024);
    let mut deadline = None;
    loop {
        if !app.emulator.emulation().h2 || initial.len() >= H2_PREFACE.len() {
            return Some((app.emulator.emulation().h2 && initial.starts_with(H2_PREFACE), initial));
        }
        if !H2_PREFACE.starts_with(&initial) {
            return Some((false, initial));
        }
        let limit = match deadline {
            None => app.limits.idle_timeout,
            Some(d) => tokio::time::Instant::saturating_duration_since(&d, tokio::time::Instant::now()),
        };
        match tokio::time::timeout(limit, stream.read_buf(&mut initial)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(_)) => {}
        }
        deadline.get_or_insert_with(|| tokio::time::Instant::now() + app.limits.header_timeout);
    }
}

/// A stream that first yields bytes already read from it.
struct Prefixed<IO> {
    prefix: BytesMut,
    io: IO,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
