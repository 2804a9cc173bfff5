//! The path to the endpoint and the client machine, measured beside ferry's transports
//! rather than through them, so that each fact is about the path alone:
//!
//! ```text
//! DNS lookup (timed, every answer) ─► TCP connect to the first answer (N samples)
//!   ─► https: TLS handshake offering ALPN [h2, http/1.1] (N samples; the protocol chosen)
//!   ─► pipelining: 8 GETs of a small object on one h1-pipeline connection, in pairs queued
//!      together (again, up to 8 rounds, until a pair was in flight together);
//!      PipelineTransport::verified() is the wire crate's own verdict (auto's probe uses it)
//!   ─► receive windows: one GET of a larger object on a raw HTTP/1.1 connection,
//!      SO_RCVBUF read after it (Linux's autotuning grows it with the window it offers),
//!      and, where h2 answers, the same GET over H2Transport and its largest stream window
//!   ─► h2 offered: ALPN's choice on https; on http, whether h2 with prior knowledge answers
//! ```
//!
//! The GETs go to presigned URLs of objects in the scratch prefix, so the raw connection
//! and the probes need no signing of their own and work for any provider that presigns.

use crate::stats::percentiles;
use ferry_wire::{Endpoint, Mode, Request, Scheme, Transport, TransportConfig};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any one connection attempt of the path section may take: a reachable
/// endpoint connects in well under a second from anywhere on Earth; an unreachable one
/// should fail the command quickly rather than after the transports' retries.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Requests in flight on the one pipelined connection: more than one batch of two is
/// what verifies pipelining; 8 is a fraction of the transport's default depth of 32.
const PIPELINE_PROBE_REQUESTS: usize = 8;

/// The endpoint could not be reached at all: one sentence for the user.
#[derive(Debug)]
pub struct Unreachable(pub String);

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreachable {}

/// DNS answers and one TCP connection, each within [`CONNECT_TIMEOUT`]: the check that
/// fails the command in seconds when the endpoint is unreachable.
pub async fn reach(ep: &Endpoint) -> Result<(Vec<SocketAddr>, Duration), Unreachable> {
    let t = Instant::now();
    let lookup = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((ep.host.as_str(), ep.port))).await;
    let addrs: Vec<SocketAddr> = match lookup {
        Ok(Ok(a)) => a.collect(),
        Ok(Err(e)) => return Err(Unreachable(format!("cannot resolve {}: {e}", ep.host))),
        Err(_) => return Err(Unreachable(format!("resolving {} took more than {CONNECT_TIMEOUT:?}", ep.host))),
    };
    let dns = t.elapsed();
    let Some(first) = addrs.first() else {
        return Err(Unreachable(format!("{} resolved to no address", ep.host)));
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(first)).await {
        Ok(Ok(_)) => Ok((addrs, dns)),
        Ok(Err(e)) => Err(Unreachable(format!("cannot connect to {} ({first}): {e}", ep.authority()))),
        Err(_) => {
            Err(Unreachable(format!("connecting to {} ({first}) took more than {CONNECT_TIMEOUT:?}", ep.authority())))
        }
    }
}

/// What the path section needs: where, how to trust it, and two presigned objects.
pub struct PathProbe {
    pub endpoint: Endpoint,
    pub ca_file: Option<PathBuf>,
    /// Path and query of a presigned GET of a small object (pipelining probe).
    pub small: String,
    /// Path and query of a presigned GET of the receive-window object, and its size.
    pub large: Option<(String, u64)>,
    pub samples: usize,
}

fn ms_stats(mut v: Vec<f64>) -> Value {
    let n = v.len();
    let ps = percentiles(&mut v, &[0.0, 50.0, 100.0]);
    json!({"samples": n, "min_s": ps[0], "p50_s": ps[1], "max_s": ps[2]})
}

/// Runs the path section: DNS, TCP, TLS and ALPN, pipelining, receive windows.
pub async fn probe(p: &PathProbe) -> Value {
    let ep = &p.endpoint;
    let mut out = serde_json::Map::new();
    out.insert("endpoint".into(), json!(format!("{}://{}", scheme_name(ep.scheme), ep.authority())));
    // DNS: timed again here (the reach check's lookup may have warmed a cache; both are
    // what a client sees).
    let t = Instant::now();
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((ep.host.as_str(), ep.port)).await {
        Ok(a) => a.collect(),
        Err(e) => {
            out.insert("error".into(), json!(format!("DNS: {e}")));
            return Value::Object(out);
        }
    };
    out.insert("dns".into(), json!({"s": t.elapsed().as_secs_f64(), "answers": addrs.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>()}));
    let Some(addr) = addrs.first().copied() else { return Value::Object(out) };
    let mut tcp = Vec::new();
    let mut tls = Vec::new();
    let mut alpn: Option<String> = None;
    let mut tls_version: Option<String> = None;
    let tls_config = match ep.scheme {
        Scheme::Https => match ferry_wire::conn::client_config(p.ca_file.as_deref()) {
            Ok(mut c) => {
                c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                Some(Arc::new(c))
            }
            Err(e) => {
                out.insert("error".into(), json!(format!("TLS settings: {e}")));
                return Value::Object(out);
            }
        },
        Scheme::Http => None,
    };
    for _ in 0..p.samples.max(1) {
        let t = Instant::now();
        let Ok(Ok(stream)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await else { continue };
        tcp.push(t.elapsed().as_secs_f64());
        if let Some(cfg) = &tls_config {
            let Ok(name) = rustls::pki_types::ServerName::try_from(ep.host.clone()) else { break };
            let t = Instant::now();
            match tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio_rustls::TlsConnector::from(cfg.clone()).connect(name, stream),
            )
            .await
            {
                Ok(Ok(s)) => {
                    tls.push(t.elapsed().as_secs_f64());
                    let c = s.get_ref().1;
                    alpn = c.alpn_protocol().map(|a| String::from_utf8_lossy(a).into_owned()).or(Some("none".into()));
                    tls_version = c.protocol_version().map(|v| format!("{v:?}"));
                }
                Ok(Err(e)) => {
                    out.insert("tls_error".into(), json!(e.to_string()));
                    break;
                }
                Err(_) => break,
            }
        }
    }
    out.insert("tcp_connect".into(), ms_stats(tcp));
    if tls_config.is_some() {
        out.insert(
            "tls_handshake".into(),
            json!({"stats": ms_stats(tls), "alpn_offered": ["h2", "http/1.1"], "alpn_chosen": alpn, "version": tls_version}),
        );
    }
    out.insert("pipelining".into(), pipelining(p).await);
    let (h2_offered, h2_window) = h2_check(p).await;
    let http_versions: Vec<&str> = if h2_offered { vec!["http/1.1", "h2"] } else { vec!["http/1.1"] };
    out.insert("http_versions".into(), json!(http_versions));
    out.insert("h2_offered".into(), json!(h2_offered));
    let mut window = serde_json::Map::new();
    if let Some((pq, size)) = &p.large {
        match raw_h1_get(ep, tls_config.clone(), addr, pq).await {
            Ok(r) => {
                window.insert(
                    "http1".into(),
                    json!({"object_bytes": size, "bytes_read": r.bytes, "s": r.secs, "so_rcvbuf_bytes": r.rcvbuf, "tcp_rtt_us": r.rtt_us, "status": r.status}),
                );
            }
            Err(e) => {
                window.insert("http1".into(), json!({"error": e}));
            }
        }
    }
    if let Some(w) = h2_window {
        window.insert("h2".into(), w);
    }
    window.insert("rmem_max_bytes".into(), json!(read_u64("/proc/sys/net/core/rmem_max")));
    window.insert(
        "tcp_rmem".into(),
        json!(std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
            .ok()
            .map(|s| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>())),
    );
    out.insert("receive_window".into(), Value::Object(window));
    Value::Object(out)
}

fn scheme_name(s: Scheme) -> &'static str {
    match s {
        Scheme::Http => "http",
        Scheme::Https => "https",
    }
}

fn config(p: &PathProbe, mode: Mode) -> TransportConfig {
    let mut c = TransportConfig::new(p.endpoint.clone());
    c.mode = mode;
    c.max_connections = 1;
    c.ca_file = p.ca_file.clone();
    c.connect_timeout = CONNECT_TIMEOUT;
    c.response_timeout = Duration::from_secs(30);
    c
}

/// Rounds of the pipelining probe at most: on a fresh connection a pair may still be
/// placed one request at a time (the connection is opening, TLS on top, while requests
/// queue), which proves nothing either way; a second round on the now open connection
/// writes each pair in one batch. The rest is slack for a busy client machine; a round
/// of 8 small GETs costs milliseconds.
const PIPELINE_PROBE_ROUNDS: usize = 8;

/// 8 GETs in flight on one h1-pipeline connection, again on the same connection until
/// the transport has seen them in flight together (at most [`PIPELINE_PROBE_ROUNDS`]);
/// the transport's verdict and the statuses seen.
async fn pipelining(p: &PathProbe) -> Value {
    let mut c = config(p, Mode::H1Pipeline);
    c.pipeline_depth = PIPELINE_PROBE_REQUESTS;
    let t = match ferry_wire::pipeline::PipelineTransport::new(c) {
        Ok(t) => t,
        Err(e) => return json!({"error": e.to_string()}),
    };
    let mut statuses = Vec::new();
    let mut errors = Vec::new();
    let mut rounds = 0;
    while rounds < PIPELINE_PROBE_ROUNDS && !t.verified() && errors.is_empty() {
        rounds += 1;
        // In pairs queued together (`send_pair`): sent one by one, each request may be
        // written and answered before the next is queued, which verifies nothing.
        let get = || Request::new(http::Method::GET, p.small.clone());
        let sends: Vec<_> = (0..PIPELINE_PROBE_REQUESTS / 2).flat_map(|_| t.send_pair(get(), get())).collect();
        for r in futures_util::future::join_all(sends).await {
            match r {
                Ok(resp) => {
                    statuses.push(resp.status.as_u16());
                    if let Err(e) = resp.body.collect(1 << 20).await {
                        errors.push(e.to_string());
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
    }
    let stats = t.stats();
    let clean = errors.is_empty() && statuses.iter().all(|s| *s == 200);
    json!({
        "requests": PIPELINE_PROBE_REQUESTS,
        "rounds": rounds,
        "connections_opened": stats.connections_opened,
        "statuses": statuses,
        "errors": errors,
        "verified": t.verified() && clean,
        // Every response right, but never two requests in flight together: no verdict.
        "observed": t.verified() || !clean,
    })
}

/// Whether h2 answers (ALPN on https, prior knowledge on http), and the stream window
/// it grew while the large object came down.
async fn h2_check(p: &PathProbe) -> (bool, Option<Value>) {
    let t = match ferry_wire::h2::H2Transport::new(config(p, Mode::H2)) {
        Ok(t) => t,
        Err(_) => return (false, None),
    };
    let small = tokio::time::timeout(CONNECT_TIMEOUT * 2, async {
        let r = t.send(Request::new(http::Method::GET, p.small.clone())).await.map_err(|e| e.to_string())?;
        r.body.collect(1 << 20).await.map_err(|e| e.to_string())?;
        Ok::<u16, String>(r.status.as_u16())
    })
    .await;
    if !matches!(small, Ok(Ok(200))) {
        return (false, None);
    }
    let Some((pq, size)) = &p.large else { return (true, None) };
    let t0 = Instant::now();
    let got = async {
        let mut r = t.send(Request::new(http::Method::GET, pq.clone())).await.map_err(|e| e.to_string())?;
        let mut n = 0u64;
        while let Some(c) = r.body.chunk().await {
            n += c.map_err(|e| e.to_string())?.len() as u64;
        }
        Ok::<u64, String>(n)
    }
    .await;
    let windows = t.receive_windows();
    let v = match got {
        Ok(n) => json!({
            "object_bytes": size, "bytes_read": n, "s": t0.elapsed().as_secs_f64(),
            "largest_stream_window_bytes": windows.iter().max(),
            "ping_rtt_us": t.min_rtt().map(|d| d.as_micros() as u64),
        }),
        Err(e) => json!({"error": e}),
    };
    (true, Some(v))
}

struct RawGet {
    status: u16,
    bytes: u64,
    secs: f64,
    rcvbuf: Option<u64>,
    rtt_us: Option<u64>,
}

/// One `GET pq` on a connection of our own with `Connection: close`, read to its end;
/// the socket's receive buffer and RTT read once the body is in.
async fn raw_h1_get(
    ep: &Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
    addr: SocketAddr,
    pq: &str,
) -> Result<RawGet, String> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let req = format!("GET {pq} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", ep.authority());
    let t0 = Instant::now();
    let ((buf, total), rcvbuf, rtt_us) = match tls {
        None => {
            let mut s = tcp;
            s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
            let buf = read_to_end(&mut s).await?;
            let (b, r) = socket_facts(&s);
            (buf, b, r)
        }
        Some(cfg) => {
            // An h1-only ALPN here: this connection is the HTTP/1.1 measurement.
            let mut cfg = (*cfg).clone();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            let name = rustls::pki_types::ServerName::try_from(ep.host.clone()).map_err(|e| e.to_string())?;
            let mut s =
                tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.map_err(|e| e.to_string())?;
            s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
            let buf = read_to_end(&mut s).await?;
            let (b, r) = socket_facts(s.get_ref().0);
            (buf, b, r)
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no response head")?;
    let status = std::str::from_utf8(&buf[..head_end])
        .ok()
        .and_then(|h| h.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("unparseable status line")?;
    Ok(RawGet { status, bytes: total - (head_end + 4) as u64, secs, rcvbuf, rtt_us })
}

/// Bytes of a response kept to find its head; the rest is only counted.
const HEAD_KEEP: usize = 64 << 10;

/// Reads until the server closes: the first [`HEAD_KEEP`] bytes, and the total count.
async fn read_to_end<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Result<(Vec<u8>, u64), String> {
    let mut out = Vec::new();
    let mut total = 0u64;
    let mut chunk = vec![0u8; 256 << 10];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut chunk))
            .await
            .map_err(|_| "no bytes for 60 s".to_string())?
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok((out, total));
        }
        total += n as u64;
        let keep = n.min(HEAD_KEEP.saturating_sub(out.len()));
        out.extend_from_slice(&chunk[..keep]);
    }
}

/// `SO_RCVBUF` (as the kernel reports it, grown by autotuning) and TCP_INFO's RTT.
fn socket_facts(s: &TcpStream) -> (Option<u64>, Option<u64>) {
    let rcvbuf = socket2::SockRef::from(s).recv_buffer_size().ok().map(|b| b as u64);
    (rcvbuf, tcp_rtt_us(s))
}

#[cfg(target_os = "linux")]
fn tcp_rtt_us(s: &TcpStream) -> Option<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain data; getsockopt writes at most `len` bytes into it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0 && info.tcpi_rtt > 0).then_some(info.tcpi_rtt as u64)
}

#[cfg(not(target_os = "linux"))]
fn tcp_rtt_us(_: &TcpStream) -> Option<u64> {
    None
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The client machine: cores, kernel, and each network interface's speed where the
/// kernel reports one (`/sys/class/net/*/speed`, Mbit/s; virtual interfaces have none).
pub fn machine() -> Value {
    let m = crate::sys::Machine::detect();
    let mut nics = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/sys/class/net") {
        let mut names: Vec<String> =
            dir.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        for name in names.into_iter().filter(|n| n != "lo") {
            // Reading `speed` of a link that is down fails (EINVAL); -1 means unknown.
            let speed = std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .filter(|s| *s > 0);
            nics.push(json!({"name": name, "speed_mbit_s": speed}));
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_owned()).ok();
    json!({"cores": m.nproc, "kernel": m.kernel, "hostname": host, "nics": nics})
}
