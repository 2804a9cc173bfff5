//! The request pipeline shared by both transports: metrics endpoint, addressing, SigV4,
//! injected faults, throttling, first-byte delay, then the S3 operation.
//!
//! ```text
//! Request ─► /_ferry/metrics? /_ferry/seed? ─► STS call on `/`? (sts.rs) ─► route (bucket, key, operation) ─► authenticate
//!         ─► injected 500/503 ─► per-prefix rate limit (SlowDown) ─► s3 operation
//!         ─► hold until arrival + first-byte delay ─► Response (+ request id, metrics)
//! ```
//!
//! The first-byte delay is measured from the request's arrival, not from when its handler
//! ran, so the time a pipelined request waits behind others counts toward it, as it does
//! on a real service whose frontend works on requests as they come in.

use crate::config::{ServeConfig, Storage};
use crate::emulate::{DelayClass, Emulator, InjectedError, RateClass, SEED_PATH};
use crate::metrics::{Metrics, METRICS_PATH};
use crate::s3::{self, Op, Route, S3Error};
use crate::types::{Request, Response};
use anyhow::{Context, Result};
use ferry_backend::Backend;
use ferry_proto::sigv2;
use ferry_proto::sigv4::{self, SigningContext};
use ferry_proto::xml::ErrorBody;
use http::Method;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

const X_AMZ_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-amz-request-id");
const X_AMZ_ID_2: http::HeaderName = http::HeaderName::from_static("x-amz-id-2");

/// Largest clock difference accepted on a signed request (S3: 15 minutes).
const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

pub struct App {
    pub backend: Backend,
    pub emulator: Emulator,
    pub metrics: Metrics,
    pub limits: crate::config::Limits,
    pub region: String,
    credentials: Option<(String, String)>,
    /// Temporary keys handed out by STS AssumeRoleWithWebIdentity and AssumeRole, and by
    /// SSO GetRoleCredentials (sts.rs).
    sts: crate::sts::Sts,
    next_request_id: AtomicU64,
}

impl App {
    pub async fn new(config: ServeConfig) -> Result<App> {
        let mut backend = match &config.storage {
            Storage::Memory => Backend::memory(),
            Storage::Disk(dir) => {
                Backend::open_disk(dir).await.with_context(|| format!("opening data directory {}", dir.display()))?
            }
        };
        if let Some(name) = &config.synthetic_bucket {
            backend = backend.with_synthetic_bucket(name);
        }
        let seed = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
        Ok(App {
            backend,
            emulator: Emulator::new(config.emulation.clone(), config.faults.clone()),
            metrics: Metrics::default(),
            limits: config.limits.clone(),
            region: config.region.clone(),
            credentials: config.credentials.clone(),
            sts: crate::sts::Sts::new(config.sts_lifetime),
            // Request ids differ across restarts: start from the clock.
            next_request_id: AtomicU64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        })
    }

    /// 16 upper-case hex digits (written by hand: `format!` showed in per-request profiles).
    fn request_id(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let n = self.next_request_id.fetch_add(1, Relaxed);
        (0..16).rev().map(|i| HEX[((n >> (i * 4)) & 0xF) as usize] as char).collect()
    }

    pub fn error_xml(&self, code: &str, message: &str, resource: Option<&str>) -> String {
        self.error_xml_with(code, message, resource, &self.request_id(), Vec::new())
    }

    fn error_xml_with(
        &self,
        code: &str,
        message: &str,
        resource: Option<&str>,
        request_id: &str,
        extra: Vec<(String, String)>,
    ) -> String {
        ErrorBody {
            code: code.to_string(),
            message: message.to_string(),
            resource: resource.map(str::to_string),
            request_id: request_id.to_string(),
            extra,
        }
        .to_xml()
    }

    /// An S3 error response outside any operation (malformed HTTP, refused connection).
    pub fn error_response(&self, status: u16, code: &str, message: &str, resource: Option<&str>) -> Response {
        let id = self.request_id();
        let body = self.error_xml_with(code, message, resource, &id, Vec::new());
        self.metrics.request("Invalid", status);
        Response::with_body(status, "application/xml", body).header("x-amz-request-id", &id)
    }

    fn s3_error_response(&self, err: S3Error, request_id: &str, resource: &str) -> Response {
        let body = self.error_xml_with(
            err.code,
            &err.message,
            Some(err.resource.as_deref().unwrap_or(resource)),
            request_id,
            err.extra,
        );
        let mut resp = Response::with_body(err.status, "application/xml", body);
        for (name, value) in err.headers {
            resp = resp.header(name, &value);
        }
        resp
    }

    /// `/_ferry/seed` (emulate.rs, [`SEED_PATH`]).
    fn reseed(&self, req: &Request) -> Response {
        if req.method != Method::POST {
            return Response::with_body(405, "text/plain", "POST /_ferry/seed?value=N\n")
                .header(http::header::ALLOW, "POST");
        }
        let value = req.raw_query.split('&').find_map(|kv| kv.strip_prefix("value=")).and_then(|v| v.parse().ok());
        match value {
            Some(seed) => {
                self.emulator.reseed(seed);
                Response::new(204)
            }
            None => Response::with_body(400, "text/plain", "expected ?value=N, N a 64-bit unsigned integer\n"),
        }
    }

    /// Handles one request from either transport.
    pub async fn handle(&self, mut req: Request) -> Response {
        // Path-style only: on a virtual-hosted request (`bucket.localhost`) the same path
        // names the key `_ferry/metrics` in that bucket. Path-style, `_ferry` can never
        // be a bucket (names start with a letter or digit), so no object is shadowed.
        if req.raw_path == METRICS_PATH && req.method == Method::GET && s3::virtual_host_bucket(&req).is_none() {
            return Response::with_body(200, "text/plain; version=0.0.4", self.metrics.render());
        }
        if req.raw_path == SEED_PATH && s3::virtual_host_bucket(&req).is_none() {
            return self.reseed(&req);
        }
        let request_id = self.request_id();
        let resource = req.raw_path.clone();
        let (op, mut resp) = if req.raw_path == crate::sts::CONTAINER_PATH
            && req.method == Method::GET
            && s3::virtual_host_bucket(&req).is_none()
        {
            ("ContainerCredentials", self.sts.answer_container(&req))
        } else if crate::sts::Sts::is_sso(&req) && s3::virtual_host_bucket(&req).is_none() {
            ("GetRoleCredentials", self.sts.answer_sso(&req))
        } else if crate::sts::Sts::is_oidc_token(&req) && s3::virtual_host_bucket(&req).is_none() {
            ("CreateToken", self.sts.answer_oidc_token(&mut req).await)
        } else if crate::sts::Sts::is_sts(&req) && s3::virtual_host_bucket(&req).is_none() {
            self.sts.answer(&mut req, &request_id, self.credentials.as_ref()).await
        } else {
            match s3::route(&req) {
                Err(e) => ("Invalid", self.s3_error_response(e, &request_id, &resource)),
                Ok(route) => {
                    let op = route.op;
                    let load = (delay_class(op) == DelayClass::Object).then(|| self.emulator.arrive());
                    let resp = match self.run(&mut req, &route).await {
                        Ok(resp) => resp,
                        Err(e) => self.s3_error_response(e, &request_id, &resource),
                    };
                    // Hold the answer until the emulated first byte is due.
                    let delay =
                        self.emulator.delay(delay_class(op)) + load.as_ref().map_or(Duration::ZERO, |l| l.load_delay);
                    if !delay.is_zero() {
                        tokio::time::sleep_until((req.arrived + delay).into()).await;
                    }
                    drop(load);
                    (op.name(), resp)
                }
            }
        };
        if let Ok(mut id) = http::HeaderValue::from_str(&request_id) {
            // Unique per response: HPACK must not index it (RFC 7541 section 6.2.3), or
            // each response would evict table entries that later responses reuse.
            id.set_sensitive(true);
            resp.headers.append(X_AMZ_REQUEST_ID, id.clone());
            resp.headers.append(X_AMZ_ID_2, id);
        }
        self.metrics.request(op, resp.status);
        resp
    }

    async fn run(&self, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
        let signing = self.authenticate(req, route)?;
        if let Some(token) = session_token(req) {
            if self.emulator.token_expired(token) {
                return Err(S3Error::new(400, "ExpiredToken", "The provided token has expired. (injected fault)"));
            }
        }
        match self.emulator.injected_error() {
            Some(InjectedError::Internal) => {
                return Err(S3Error::new(
                    500,
                    "InternalError",
                    "We encountered an internal error. Please try again. (injected fault)",
                ))
            }
            Some(InjectedError::SlowDown) => return Err(S3Error::slow_down()),
            None => {}
        }
        if let Some(class) = rate_class(route.op).filter(|c| self.emulator.rate_limited(*c)) {
            let prefix = throttle_prefix(route);
            if self.emulator.throttled(&prefix, class, req.arrived) {
                return Err(S3Error::slow_down());
            }
        }
        // Boxed: the dispatch future holds every operation's state and is large; moving it
        // by value through the request path showed up as memmove in profiles.
        Box::pin(s3::dispatch(self, req, route, signing.as_ref())).await
    }

    /// Verifies SigV4 (or the legacy SigV2, header or presigned query; proto's sigv2.rs)
    /// unless the server is anonymous; keys STS handed out must come with their session
    /// token and not have expired. Returns the signing context that an aws-chunked
    /// body's chunk signatures chain from (none for SigV2, which has no chunk signing).
    fn authenticate(&self, req: &Request, route: &Route) -> Result<Option<SigningContext>, S3Error> {
        let Some((access, secret)) = &self.credentials else { return Ok(None) };
        let signable = sigv4::SignableRequest {
            method: req.method.as_str(),
            raw_path: &req.raw_path,
            raw_query: &req.raw_query,
            headers: &req.headers,
        };
        let lookup = |key: &str| if key == access { Some(secret.clone()) } else { self.sts.secret(key) };
        if sigv2::is_sigv2(&signable) {
            let bucket_host = route.bucket.as_deref().filter(|_| route.virtual_host);
            // Only the server's own keys: STS's temporary keys are SigV4's, as the SDKs send them.
            let lookup = |key: &str| if key == access { Some(secret.clone()) } else { None };
            return match sigv2::verify(&signable, bucket_host, &lookup, SystemTime::now(), MAX_SKEW) {
                Ok(_) => Ok(None),
                Err(e) => Err(S3Error::new(e.status(), e.code(), &e.message)),
            };
        }
        match sigv4::verify(&signable, &lookup, SystemTime::now(), MAX_SKEW) {
            Ok(ctx) => {
                if ctx.access_key != *access {
                    self.sts.check(&ctx.access_key, session_token(req), SystemTime::now())?;
                }
                Ok(Some(ctx))
            }
            Err(e) => Err(S3Error::new(e.status(), e.code(), &e.message)),
        }
    }
}

fn delay_class(op: Op) -> DelayClass {
    match op {
        Op::ListObjectsV1 | Op::ListObjectsV2 | Op::ListMultipartUploads | Op::ListParts | Op::ListBuckets => {
            DelayClass::List
        }
        _ => DelayClass::Object,
    }
}

fn rate_class(op: Op) -> Option<RateClass> {
    match op {
        Op::GetObject | Op::HeadObject => Some(RateClass::Read),
        Op::PutObject
        | Op::CopyObject
        | Op::UploadPart
        | Op::UploadPartCopy
        | Op::DeleteObject
        | Op::DeleteObjects
        | Op::CompleteMultipartUpload => Some(RateClass::Write),
        _ => None,
    }
}

/// The "prefix" a request-rate limit applies to: the bucket plus the key up to its last
/// '/'. S3 partitions by key prefix and publishes limits per prefix; a directory-like
/// prefix is the partition users reason about.
fn throttle_prefix(route: &Route) -> String {
    let key = route.key.as_deref().unwrap_or("");
    let dir = key.rfind('/').map(|i| &key[..i]).unwrap_or("");
    format!("{}/{}", route.bucket.as_deref().unwrap_or(""), dir)
}

/// The session token a request carries: the `x-amz-security-token` header, or the
/// `X-Amz-Security-Token` parameter of a presigned URL (left percent-encoded: it only
/// needs to tell one token from another).
fn session_token(req: &Request) -> Option<&str> {
    if let Some(t) = req.headers.get("x-amz-security-token").and_then(|v| v.to_str().ok()) {
        return Some(t);
    }
    req.raw_query.split('&').find_map(|p| p.strip_prefix("X-Amz-Security-Token="))
}
