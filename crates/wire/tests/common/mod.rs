//! Shared by the transport tests: a real `ferry serve` started in-process on 127.0.0.1:0
//! (memory storage, anonymous), optionally with TLS (a self-signed CA the client trusts
//! through `ca_file`), emulation and faults; and small helpers to drive a transport.

#![allow(dead_code)]

use bytes::Bytes;
use ferry_server::{BackgroundServer, ServeConfig, TlsConfig};
use ferry_wire::{Endpoint, Mode, Request, RequestBody, Response, Transport, TransportConfig, WireError};
use futures_util::StreamExt;
use http::{Method, StatusCode};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A server running on its own thread and runtime; stopped on drop.
pub struct Running {
    pub addr: SocketAddr,
    /// The CA file to trust when the server speaks TLS.
    pub ca_file: Option<PathBuf>,
    _server: BackgroundServer,
    _dir: tempfile::TempDir,
}

impl Running {
    pub fn url(&self) -> String {
        let scheme = if self.ca_file.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.addr.port())
    }

    /// A transport of `mode` to this server, after `configure`.
    pub fn client(&self, mode: Mode, configure: impl FnOnce(&mut TransportConfig)) -> Arc<dyn Transport> {
        let mut config = TransportConfig::new(Endpoint::parse(&self.url()).unwrap());
        config.mode = mode;
        config.ca_file = self.ca_file.clone();
        config.response_timeout = Duration::from_secs(20);
        configure(&mut config);
        ferry_wire::transport(config).unwrap()
    }
}

/// Starts a server: memory, anonymous, plain http unless `tls`.
pub fn start(tls: bool, configure: impl FnOnce(&mut ServeConfig)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = tls.then(|| dir.path().join("ca.pem"));
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap());
    config.credentials = None;
    if let Some(ca) = &ca_file {
        config.tls = Some(TlsConfig::SelfSigned { ca_file: ca.clone() });
    }
    configure(&mut config);
    let server = BackgroundServer::start(config).unwrap();
    Running { addr: server.addr(), ca_file, _server: server, _dir: dir }
}

/// Deterministic test bytes.
pub fn pattern(len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (i.wrapping_mul(31) ^ (i >> 8)) as u8).collect::<Vec<u8>>())
}

pub async fn send(
    t: &Arc<dyn Transport>,
    method: Method,
    path: &str,
    body: RequestBody,
) -> Result<Response, WireError> {
    let mut req = Request::new(method, path);
    req.body = body;
    t.send(req).await
}

pub async fn create_bucket(t: &Arc<dyn Transport>, bucket: &str) {
    let r = send(t, Method::PUT, &format!("/{bucket}"), RequestBody::Empty).await.unwrap();
    let status = r.status;
    let body = r.body.collect(1 << 20).await.unwrap();
    assert!(status.is_success(), "creating bucket {bucket}: {status} {}", String::from_utf8_lossy(&body));
}

pub async fn put(t: &Arc<dyn Transport>, path: &str, body: RequestBody) -> Response {
    let r = send(t, Method::PUT, path, body).await.unwrap_or_else(|e| panic!("PUT {path}: {e}"));
    assert_eq!(r.status, StatusCode::OK, "PUT {path}");
    r
}

/// GETs `path` and reads the whole body.
pub async fn get_all(t: &Arc<dyn Transport>, path: &str) -> (StatusCode, Bytes) {
    let r = send(t, Method::GET, path, RequestBody::Empty).await.unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = r.status;
    let body = r.body.collect(64 << 20).await.unwrap_or_else(|e| panic!("GET {path} body: {e}"));
    (status, body)
}

/// A streamed request body of `data` in chunks of `chunk` bytes.
pub fn streamed(data: Bytes, chunk: usize) -> RequestBody {
    let len = data.len() as u64;
    let pieces: Vec<std::io::Result<Bytes>> =
        (0..data.len()).step_by(chunk.max(1)).map(|i| Ok(data.slice(i..(i + chunk).min(data.len())))).collect();
    RequestBody::Stream { len, stream: futures_util::stream::iter(pieces).boxed() }
}

/// An `auto` transport to `srv` with a connection cap and a response time-out.
pub fn auto(srv: &Running, max_connections: usize, response_timeout: Duration) -> Arc<ferry_wire::auto::AutoTransport> {
    let mut config = TransportConfig::new(Endpoint::parse(&srv.url()).unwrap());
    config.mode = Mode::Auto;
    config.max_connections = max_connections;
    config.response_timeout = response_timeout;
    Arc::new(ferry_wire::auto::AutoTransport::new(config).unwrap())
}
