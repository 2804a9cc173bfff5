//! Opening connections: DNS resolved once per endpoint and connections spread over all
//! its addresses, TCP with NODELAY, and TLS by rustls with the system roots (native
//! store, else the bundled Mozilla roots) plus an optional CA file.
//!
//! Spreading matters on S3, whose DNS answers name many front-end hosts: connections
//! opened round-robin over the answers share load the way S3's own guidance asks.

use crate::error::{ErrorKind, WireError};
use crate::{Scheme, TransportConfig};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A byte stream to the server, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// An open connection.
pub struct Connection {
    pub io: Box<dyn Io>,
    /// Whether TLS ALPN chose HTTP/2.
    pub alpn_h2: bool,
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
            }),
        })
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
                Err(_) => last_err = Some(WireError::new(ErrorKind::Connect, format!("connecting to {addr} timed out after {:?}", self.inner.connect_timeout))),
            }
        }
        Err(last_err.unwrap_or_else(|| WireError::new(ErrorKind::Connect, "no address to connect to")))
    }

    async fn open(&self, addr: SocketAddr) -> Result<Connection, WireError> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| WireError::new(ErrorKind::Connect, format!("connecting to {addr}")).with_source(e))?;
        let _ = tcp.set_nodelay(true);
        let id = self.inner.opened.fetch_add(1, Relaxed) + 1;
        match &self.inner.tls {
            None => Ok(Connection { io: Box::new(tcp), alpn_h2: false, id, peer: addr }),
            Some((connector, name)) => {
                let tls = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| WireError::new(ErrorKind::Tls, format!("TLS handshake with {}", self.inner.host)).with_source(e))?;
                let alpn_h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                Ok(Connection { io: Box::new(tls), alpn_h2, id, peer: addr })
            }
        }
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
        let pem = std::fs::read(path).map_err(|e| WireError::config(format!("reading CA file {}", path.display())).with_source(e))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| WireError::config(format!("parsing CA file {}", path.display())).with_source(e))?;
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
