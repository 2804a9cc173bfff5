//! Measuring words shared by every workload: the setup PUTs ([`put_all`], [`body`]), a GET
//! that drops its body ([`get_drain`]), the cost of one run ([`Meter`]: wall, client CPU,
//! connections and requests since a start), error counting ([`Errors`]), percentiles into
//! a record ([`set_percentiles`]) and the sample shapes the plots read ([`percentile_curve`],
//! [`cdf`]), seeded size draws ([`log_uniform_sizes`]).
//!
//! This is a bottom module: it imports only record.rs, stats.rs and sys.rs, and every
//! workload file imports it instead of importing another workload.

use crate::record::RunRecord;
use crate::stats::percentiles;
use anyhow::Result;
use ferry_store::{GetParams, ObjectRef, S3Client};
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value};
use std::time::{Duration, Instant};

/// A scenario's params of one entry: `{name: value}` (the strategy a row runs).
pub fn one_param(name: &str, value: impl Into<Value>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(name.to_owned(), value.into());
    m
}

/// `n` sizes drawn log-uniformly from `[min, max]` (the log of the size is uniform, so
/// each doubling is equally likely), with a seeded generator: the same seed gives the
/// same sizes on every machine running this build.
pub fn log_uniform_sizes(n: usize, min: u64, max: u64, seed: u64) -> Vec<u64> {
    let (lo, hi) = ((min.max(1) as f64).ln(), (max.max(min).max(1) as f64).ln());
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let x = if hi > lo { rng.gen_range(lo..=hi) } else { lo };
            (x.exp().round() as u64).clamp(min, max.max(min))
        })
        .collect()
}

/// A sorted sample as a percentile curve: `[100 * i / n, sample_i]` for i = 1..=n (the
/// nearest-rank percentile of each sample), with `[0, min]` first.
pub fn percentile_curve(sorted: &[f64]) -> Vec<[f64; 2]> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(n + 1);
    out.push([0.0, sorted[0]]);
    out.extend(sorted.iter().enumerate().map(|(i, v)| [100.0 * (i + 1) as f64 / n as f64, *v]));
    out
}

/// A sorted sample as an empirical CDF: `[sample_i, i / n]` for i = 1..=n.
pub fn cdf(sorted: &[f64]) -> Vec<[f64; 2]> {
    let n = sorted.len();
    sorted.iter().enumerate().map(|(i, v)| [*v, (i + 1) as f64 / n as f64]).collect()
}

/// Writes `<prefix>_p50_<unit>`, `_p90_`, `_p99_`, `_max_` of `samples` (scaled by
/// `scale`) and sorts them in place.
pub fn set_percentiles(rec: &mut RunRecord, prefix: &str, unit: &str, samples: &mut [f64], scale: f64) {
    let ps = percentiles(samples, &[50.0, 90.0, 99.0, 100.0]);
    for (name, p) in ["p50", "p90", "p99", "max"].iter().zip(ps) {
        if let Some(v) = p {
            rec.set(&format!("{prefix}_{name}_{unit}"), v * scale);
        }
    }
}

/// The transport's counters and the process's CPU time at one instant; the difference of
/// two is what a run cost.
#[derive(Clone, Copy, Debug)]
pub struct Meter {
    t: Instant,
    cpu: Duration,
    conns: u64,
    sent: u64,
    resent: u64,
    hedges: (u64, u64),
}

impl Meter {
    pub fn start(c: &S3Client) -> Meter {
        let s = c.transport().stats();
        Meter {
            t: Instant::now(),
            cpu: crate::sys::cpu_time(),
            conns: s.connections_opened,
            sent: s.requests_sent,
            resent: s.requests_resent,
            hedges: (s.hedges_sent, s.hedges_won),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.t.elapsed()
    }

    /// Writes `wall_s`, `client_cpu_s`, `connections_opened`, `requests_sent`,
    /// `requests_resent`, `hedges_sent`, `hedges_won` (all since `start`) with `prefix`
    /// before each name.
    pub fn record(&self, c: &S3Client, rec: &mut RunRecord, prefix: &str) -> Duration {
        let s = c.transport().stats();
        let wall = self.t.elapsed();
        rec.set(&format!("{prefix}wall_s"), wall.as_secs_f64());
        rec.set(&format!("{prefix}client_cpu_s"), crate::sys::cpu_time().saturating_sub(self.cpu).as_secs_f64());
        rec.set(&format!("{prefix}connections_opened"), s.connections_opened.saturating_sub(self.conns) as f64);
        rec.set(&format!("{prefix}requests_sent"), s.requests_sent.saturating_sub(self.sent) as f64);
        rec.set(&format!("{prefix}requests_resent"), s.requests_resent.saturating_sub(self.resent) as f64);
        rec.set(&format!("{prefix}hedges_sent"), s.hedges_sent.saturating_sub(self.hedges.0) as f64);
        rec.set(&format!("{prefix}hedges_won"), s.hedges_won.saturating_sub(self.hedges.1) as f64);
        wall
    }
}

/// PUTs every `(key, body)` into `bucket` (which exists), at most `concurrency` at once;
/// the first failure ends it. The setup step of every workload that writes objects.
pub async fn put_all(
    c: &S3Client,
    bucket: &str,
    objects: impl IntoIterator<Item = (String, bytes::Bytes)>,
    concurrency: usize,
) -> Result<()> {
    use anyhow::Context;
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for (key, body) in objects {
        let permit = sem.clone().acquire_owned().await?;
        let (c, obj) = (c.clone(), ObjectRef::new(bucket, key));
        set.spawn(async move {
            let r =
                c.put_object(&obj, body, ferry_store::PutParams::default()).await.with_context(|| format!("PUT {obj}"));
            drop(permit);
            r
        });
        while let Some(done) = set.try_join_next() {
            done??;
        }
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

/// Creates `bucket`, or finds it already there and owned by these credentials (an
/// external server keeps its buckets between runs; `ferry serve --memory` starts empty).
pub async fn create_bucket_if_missing(c: &S3Client, bucket: &str) -> Result<()> {
    match c.create_bucket(bucket).await {
        Ok(()) => Ok(()),
        Err(e) if e.code() == Some("BucketAlreadyOwnedByYou") => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("creating bucket {bucket}"))),
    }
}

/// GETs an object, dropping its body chunk by chunk: (bytes, time to the response head).
pub async fn get_drain(c: &S3Client, obj: &ObjectRef, params: GetParams) -> Result<(u64, Duration)> {
    let t0 = Instant::now();
    let mut out = c.get_object(obj, params).await?;
    let head = t0.elapsed();
    let mut n = 0u64;
    while let Some(chunk) = out.body.chunk().await {
        n += chunk?.len() as u64;
    }
    Ok((n, head))
}

/// Up to [`ERROR_SAMPLES`] error messages, and a count.
#[derive(Debug, Default)]
pub struct Errors {
    pub count: u64,
    pub samples: Vec<String>,
}

pub const ERROR_SAMPLES: usize = 5;

impl Errors {
    pub fn add(&mut self, e: impl std::fmt::Display) {
        self.count += 1;
        if self.samples.len() < ERROR_SAMPLES {
            self.samples.push(e.to_string());
        }
    }

    /// Writes `errors` and, when there were any, status "errors" and the samples.
    pub fn record(self, rec: &mut RunRecord) {
        rec.set("errors", self.count as f64);
        if self.count > 0 {
            rec.status = "errors".into();
            rec.error_samples.extend(self.samples);
        }
    }
}

/// `n` bytes of a repeating pattern (the server stores what it is sent; distinct bytes per
/// object are not needed).
pub fn body(n: usize, salt: u8) -> bytes::Bytes {
    bytes::Bytes::from((0..n).map(|i| (i % 251) as u8 ^ salt).collect::<Vec<u8>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_uniform_is_seeded_and_bounded() {
        let a = log_uniform_sizes(2_000, 4096, 1 << 20, 7);
        assert_eq!(a, log_uniform_sizes(2_000, 4096, 1 << 20, 7), "same seed, same sizes");
        assert_ne!(a, log_uniform_sizes(2_000, 4096, 1 << 20, 8));
        assert!(a.iter().all(|s| (4096..=1 << 20).contains(s)));
        // Log-uniform: each of the 8 doublings from 4 KiB to 1 MiB holds about 1/8.
        for d in 0..8 {
            let (lo, hi) = (4096u64 << d, 4096u64 << (d + 1));
            let n = a.iter().filter(|s| **s >= lo && **s < hi).count();
            assert!((150..=350).contains(&n), "doubling {d}: {n} of 2000");
        }
        assert_eq!(log_uniform_sizes(3, 5, 5, 1), vec![5, 5, 5]);
    }

    #[test]
    fn curves() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_curve(&v), vec![[0.0, 1.0], [25.0, 1.0], [50.0, 2.0], [75.0, 3.0], [100.0, 4.0]]);
        assert_eq!(cdf(&v), vec![[1.0, 0.25], [2.0, 0.5], [3.0, 0.75], [4.0, 1.0]]);
        assert!(percentile_curve(&[]).is_empty() && cdf(&[]).is_empty());
        // Each point of the percentile curve agrees with the nearest-rank percentile.
        let w: Vec<f64> = (1..=37).map(|i| (i * i) as f64).collect();
        for [p, y] in percentile_curve(&w) {
            assert_eq!(crate::stats::percentile_nearest_rank(&w, p), Some(y), "p{p}");
        }
    }
}
