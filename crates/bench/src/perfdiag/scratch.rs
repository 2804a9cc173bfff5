//! The scratch prefix: the only place perfdiag writes, found again and removed if a run
//! was killed before its cleanup.
//!
//! ```text
//! URL/                        the user's bucket and prefix (never written)
//!   ferry-perfdiag-<12 hex>/  one run's scratch
//!     lease.json              written first, deleted last: host, pid, the pid's start
//!                             time, and when the run expires at the latest
//!     lat/ tp/ list/ path/    the run's objects
//! ```
//!
//! Every write goes through [`Scratch::object`], which builds keys only under the run's
//! prefix, and [`Scratch::check`], which the writing helpers call before each PUT: a key
//! outside the prefix is refused, whatever built it.
//!
//! A prefix `ferry-perfdiag-*` under URL is a leftover when its lease is missing (the
//! lease is the first object written and the last removed), expired, or names a process
//! on this host that no longer runs (the pid is gone, or now belongs to a process that
//! started at another time). A leftover is removed at the start of the next run; a prefix
//! whose run may still be going is listed, never touched.

use ferry_engine::{delete_many, DeleteOptions, Engine};
use ferry_store::{ListParams, ObjectRef, ObjectStoreExt, PutPayload};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The name every scratch prefix starts with.
pub const SCRATCH_STEM: &str = "ferry-perfdiag-";

/// The lease object inside a scratch prefix.
pub const LEASE: &str = "lease.json";

/// One run's scratch prefix.
#[derive(Clone, Debug)]
pub struct Scratch {
    pub bucket: String,
    /// The user's prefix: "" or ending in '/'.
    pub base: String,
    /// `base` + `ferry-perfdiag-<id>/`.
    pub prefix: String,
}

impl Scratch {
    /// A fresh scratch name under `base` (which is made to end in '/').
    pub fn new(bucket: &str, base: &str) -> Scratch {
        let base = normal_base(base);
        let id: u64 = rand::random();
        let prefix = format!("{base}{SCRATCH_STEM}{:012x}/", id & 0xffff_ffff_ffff);
        Scratch { bucket: bucket.to_owned(), base, prefix }
    }

    /// The object `rel` inside the scratch prefix. `rel` is relative: no leading '/',
    /// no `..` segment.
    pub fn object(&self, rel: &str) -> ObjectRef {
        assert!(!rel.starts_with('/') && !rel.split('/').any(|s| s == ".."), "scratch key {rel:?} is not relative");
        ObjectRef::new(self.bucket.clone(), format!("{}{rel}", self.prefix))
    }

    /// Refuses any object outside the scratch prefix.
    pub fn check(&self, obj: &ObjectRef) -> anyhow::Result<()> {
        if obj.bucket != self.bucket || !obj.key.starts_with(&self.prefix) || obj.key.split('/').any(|s| s == "..") {
            anyhow::bail!(
                "refusing to write {}/{}: perfdiag writes only under {}/{}",
                obj.bucket,
                obj.key,
                self.bucket,
                self.prefix
            );
        }
        Ok(())
    }

    /// Writes the lease: who runs here and until when at the latest.
    pub async fn write_lease(&self, engine: &Engine, expires_in: Duration) -> anyhow::Result<()> {
        let now = unix_now();
        let lease = json!({
            "host": hostname(),
            "pid": std::process::id(),
            "pid_start": process_start(std::process::id()),
            "started_unix": now,
            "expires_unix": now + expires_in.as_secs(),
        });
        let obj = self.object(LEASE);
        self.check(&obj)?;
        engine
            .store()
            .put(&obj, PutPayload::Bytes(lease.to_string().into()), Default::default())
            .await
            .map_err(|e| anyhow::anyhow!("writing the scratch prefix's lease {obj}: {e}"))?;
        Ok(())
    }

    /// Deletes everything under the scratch prefix, the lease last. Returns the keys deleted.
    pub async fn remove(&self, engine: &Engine) -> anyhow::Result<u64> {
        remove_prefix(engine, &self.bucket, &self.prefix).await
    }
}

fn normal_base(base: &str) -> String {
    if base.is_empty() || base.ends_with('/') {
        base.to_owned()
    } else {
        format!("{base}/")
    }
}

/// Deletes every key under `prefix` (which must be a scratch prefix), the lease last.
async fn remove_prefix(engine: &Engine, bucket: &str, prefix: &str) -> anyhow::Result<u64> {
    anyhow::ensure!(is_scratch_prefix(prefix), "refusing to remove {prefix:?}: not a perfdiag scratch prefix");
    let lease = format!("{prefix}{LEASE}");
    let (entries, _) =
        engine.store().list_all(bucket, ListParams { prefix: Some(prefix.to_owned()), ..Default::default() }).await?;
    let keys: Vec<String> = entries.into_iter().map(|e| e.key).filter(|k| *k != lease).collect();
    let n = keys.len() as u64;
    let report = delete_many(engine, bucket, futures_util::stream::iter(keys), &DeleteOptions::default()).await;
    if let Some(f) = report.failed.first() {
        anyhow::bail!(
            "could not delete {} keys under {prefix} (first: {} {} {})",
            report.failed.len(),
            f.key,
            f.code,
            f.message
        );
    }
    match engine.store().delete(&ObjectRef::new(bucket, lease)).await {
        Ok(()) => Ok(n + 1),
        Err(e) if e.is_not_found() => Ok(n),
        Err(e) => Err(e.into()),
    }
}

/// Whether `prefix` names a scratch prefix (its last segment starts with the stem).
fn is_scratch_prefix(prefix: &str) -> bool {
    prefix.ends_with('/')
        && prefix.trim_end_matches('/').rsplit('/').next().is_some_and(|l| l.starts_with(SCRATCH_STEM))
}

/// A scratch prefix found under the user's prefix at the start of a run.
#[derive(Clone, Debug)]
pub struct Found {
    pub prefix: String,
    /// Why it counts as a leftover, or why it is left alone.
    pub reason: String,
    pub leftover: bool,
}

/// The scratch prefixes under `base`, each judged leftover or possibly in use.
pub async fn find(engine: &Engine, bucket: &str, base: &str) -> anyhow::Result<Vec<Found>> {
    let base = normal_base(base);
    let mut pages = engine.store().list(
        bucket,
        ListParams { prefix: Some(format!("{base}{SCRATCH_STEM}")), delimiter: Some("/".into()), ..Default::default() },
    );
    let mut prefixes = Vec::new();
    while let Some(page) = pages.next().await {
        prefixes.extend(page?.common_prefixes);
    }
    let mut out = Vec::new();
    for prefix in prefixes {
        let lease = engine.store().get_bytes(&ObjectRef::new(bucket, format!("{prefix}{LEASE}"))).await;
        let (leftover, reason) = match lease {
            Err(e) if e.is_not_found() => {
                (true, "no lease: its run was killed before it started or while it cleaned up".into())
            }
            Err(e) => (false, format!("its lease could not be read ({e})")),
            Ok(b) => match serde_json::from_slice::<Value>(&b) {
                Err(_) => (true, "its lease is not JSON".into()),
                Ok(l) => judge(&l, unix_now()),
            },
        };
        out.push(Found { prefix, reason, leftover });
    }
    Ok(out)
}

/// Whether a lease's run is over: expired, or its process on this host is gone.
fn judge(lease: &Value, now: u64) -> (bool, String) {
    let expires = lease["expires_unix"].as_u64().unwrap_or(0);
    let host = lease["host"].as_str().unwrap_or("");
    let pid = lease["pid"].as_u64().unwrap_or(0) as u32;
    if expires <= now {
        return (true, format!("its lease expired {} s ago", now - expires));
    }
    if !host.is_empty() && Some(host) == hostname().as_deref() {
        let start = process_start(pid);
        if start.is_none() {
            return (true, format!("its process {pid} on this host is gone"));
        }
        if lease["pid_start"].as_u64().is_some() && lease["pid_start"].as_u64() != start {
            return (true, format!("its process {pid} on this host is gone (the pid is another process now)"));
        }
        return (
            false,
            format!("process {pid} on this host may still be running it (lease expires in {} s)", expires - now),
        );
    }
    (false, format!("a run on {host:?} (pid {pid}) may still use it (lease expires in {} s)", expires - now))
}

/// Removes each leftover; returns what was done with every prefix found.
pub async fn sweep(engine: &Engine, bucket: &str, found: &[Found]) -> Value {
    let mut out = Vec::new();
    for f in found {
        if f.leftover {
            let r = remove_prefix(engine, bucket, &f.prefix).await;
            out.push(match r {
                Ok(n) => json!({"prefix": f.prefix, "reason": f.reason, "action": "removed", "keys_deleted": n}),
                Err(e) => json!({"prefix": f.prefix, "reason": f.reason, "action": "remove failed", "error": format!("{e:#}")}),
            });
        } else {
            out.push(json!({"prefix": f.prefix, "reason": f.reason, "action": "left alone"}));
        }
    }
    Value::Array(out)
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// A process's start time (field 22 of `/proc/PID/stat`, clock ticks since boot); `None`
/// when it does not exist.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_inside_the_scratch_prefix() {
        let s = Scratch::new("b", "data");
        assert!(s.prefix.starts_with("data/ferry-perfdiag-") && s.prefix.ends_with('/'));
        assert_eq!(s.prefix.len(), "data/ferry-perfdiag-".len() + 13);
        let o = s.object("lat/x");
        assert!(s.check(&o).is_ok());
        assert!(s.check(&ObjectRef::new("b", "data/other")).is_err());
        assert!(s.check(&ObjectRef::new("c", o.key.clone())).is_err());
        assert!(s.check(&ObjectRef::new("b", format!("{}../escape", s.prefix))).is_err());
        assert!(std::panic::catch_unwind(|| s.object("../x")).is_err());
        assert_eq!(Scratch::new("b", "").base, "");
        assert_eq!(Scratch::new("b", "p/").base, "p/");
    }

    #[test]
    fn leases_are_judged_by_expiry_and_process() {
        let me = std::process::id();
        let live = json!({"host": hostname(), "pid": me, "pid_start": process_start(me), "expires_unix": 2_000});
        assert!(!judge(&live, 1_000).0, "this process runs");
        assert!(judge(&live, 2_000).0, "expired");
        let reused = json!({"host": hostname(), "pid": me, "pid_start": 1, "expires_unix": 2_000});
        assert!(judge(&reused, 1_000).0, "same pid, another start time");
        let elsewhere = json!({"host": "some-other-host", "pid": me, "expires_unix": 2_000});
        assert!(!judge(&elsewhere, 1_000).0, "another host's run is left alone until it expires");
        // A pid that cannot exist (above Linux's pid_max limit of 2^22).
        let gone = json!({"host": hostname(), "pid": 5_000_000, "expires_unix": 2_000});
        assert!(judge(&gone, 1_000).0);
    }

    #[test]
    fn only_scratch_prefixes_are_removed() {
        assert!(is_scratch_prefix("data/ferry-perfdiag-abc/") && is_scratch_prefix("ferry-perfdiag-0/"));
        assert!(!is_scratch_prefix("data/") && !is_scratch_prefix("") && !is_scratch_prefix("ferry-perfdiag-abc"));
        assert!(!is_scratch_prefix("ferry-perfdiag-abc/other/"));
    }
}
