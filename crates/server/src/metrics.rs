//! Counters exposed in the Prometheus text format at `/_ferry/metrics`.
//!
//! The path starts with `_`, which no S3 bucket name may, so it can never shadow a bucket.
//! Per-request counters are keyed by (operation, status) in a small map behind a mutex;
//! byte and connection counters are atomics on the hot path.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

pub const METRICS_PATH: &str = "/_ferry/metrics";

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub h1_connections_opened: AtomicU64,
    pub h2_connections_opened: AtomicU64,
    pub connections_open: AtomicU64,
    pub connections_refused: AtomicU64,
    pub h2_streams: AtomicU64,
    pub tls_handshake_failures: AtomicU64,
    pub h2_header_timeouts: AtomicU64,
    pub h2_idle_closes: AtomicU64,
    /// Requests read whose answer has not started yet (its head not written, on h1, or
    /// not handed to hyper, on h2), and the most at once: how deep clients pipeline or
    /// multiplex, as this server sees it.
    pub requests_in_progress: AtomicU64,
    pub requests_in_progress_peak: AtomicU64,
}

impl Metrics {
    /// A request was read: counted in progress until [`Metrics::request_answering`].
    pub fn request_read(&self) {
        let now = self.requests_in_progress.fetch_add(1, Relaxed) + 1;
        self.requests_in_progress_peak.fetch_max(now, Relaxed);
    }

    /// The answer to a request counted by [`Metrics::request_read`] starts (or the
    /// request is gone).
    pub fn request_answering(&self) {
        self.requests_in_progress.fetch_sub(1, Relaxed);
    }

    pub fn request(&self, op: &'static str, status: u16) {
        *self.requests.lock().unwrap().entry((op, status)).or_insert(0) += 1;
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP ferry_requests_total S3 requests answered, by operation and status.\n");
        out.push_str("# TYPE ferry_requests_total counter\n");
        for ((op, status), n) in self.requests.lock().unwrap().iter() {
            let _ = writeln!(out, "ferry_requests_total{{op=\"{op}\",status=\"{status}\"}} {n}");
        }
        let counters: [(&str, &str, &AtomicU64); 10] = [
            ("ferry_bytes_in_total", "Request body bytes received.", &self.bytes_in),
            ("ferry_bytes_out_total", "Response body bytes sent.", &self.bytes_out),
            ("ferry_h2_streams_total", "HTTP/2 streams served.", &self.h2_streams),
            (
                "ferry_connections_refused_total",
                "Connections refused at the connection cap.",
                &self.connections_refused,
            ),
            ("ferry_tls_handshake_failures_total", "TLS handshakes that failed.", &self.tls_handshake_failures),
            (
                "ferry_h2_header_timeouts_total",
                "HTTP/2 connections closed for a frame or header block left incomplete past the header time-out.",
                &self.h2_header_timeouts,
            ),
            (
                "ferry_h2_idle_closes_total",
                "HTTP/2 connections closed after the idle time-out with no stream open.",
                &self.h2_idle_closes,
            ),
            ("ferry_connections_open", "Connections open now.", &self.connections_open),
            (
                "ferry_requests_in_progress",
                "Requests read whose response has not started yet.",
                &self.requests_in_progress,
            ),
            (
                "ferry_requests_in_progress_peak",
                "The most requests read at once whose responses had not started.",
                &self.requests_in_progress_peak,
            ),
        ];
        for (name, help, v) in counters {
            let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}", v.load(Relaxed));
        }
        out.push_str("# HELP ferry_connections_opened_total Connections accepted, by protocol.\n");
        out.push_str("# TYPE ferry_connections_opened_total counter\n");
        let _ = writeln!(
            out,
            "ferry_connections_opened_total{{protocol=\"http1\"}} {}",
            self.h1_connections_opened.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "ferry_connections_opened_total{{protocol=\"h2\"}} {}",
            self.h2_connections_opened.load(Relaxed)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters() {
        let m = Metrics::default();
        m.request("GetObject", 200);
        m.request("GetObject", 200);
        m.request("PutObject", 403);
        m.bytes_out.fetch_add(5, Relaxed);
        let text = m.render();
        assert!(text.contains("ferry_requests_total{op=\"GetObject\",status=\"200\"} 2\n"), "{text}");
        assert!(text.contains("ferry_requests_total{op=\"PutObject\",status=\"403\"} 1\n"));
        assert!(text.contains("ferry_bytes_out_total 5\n"));
        assert!(text.contains("# TYPE ferry_connections_open gauge"));
    }
}
