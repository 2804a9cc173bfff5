//! `ferry rm`: one key, the keys a wildcard names, or everything under a prefix
//! (`--recursive`).
//!
//! ```text
//! listing (streamed) ─► groups of GROUP_KEYS keys, GROUPS_IN_FLIGHT at once
//!   group ─► ferry_engine::delete_many: DeleteObjects of 1,000 keys, 8 in flight,
//!            per-key <Error>s and failed requests retried (its module note)
//!         ─► one "rm" line per key deleted; each key left failed is reported with
//!            its code and message (exit code 1)
//! ```
//!
//! Groups rather than one delete_many over the whole listing: the engine counts deleted
//! keys without naming them, while `rm` prints every key it removed (as s5cmd and the
//! AWS CLI do), so the keys of a group are held until its report says which failed.
//! That bounds memory at `GROUP_KEYS * (GROUPS_IN_FLIGHT + 1)` keys for any listing.
//!
//! A key with `*` or `?` is a pattern (an object of that very name is among its
//! matches); `--raw` takes it as one key. `--dry-run` ends with how many objects the
//! pattern or prefix reached.
//!
//! `--incomplete` aborts the multipart uploads in progress under a prefix instead
//! (ListMultipartUploads, then AbortMultipartUpload, [`ABORTS_IN_FLIGHT`] at once):
//! their parts are billed as storage until then, and nothing else removes them short
//! of a bucket lifecycle rule. Objects are never touched. An upload already gone when
//! its abort arrives (completed or aborted meanwhile: NoSuchUpload) counts as removed.
//!
//! `--recursive` over a whole bucket (`ferry rm -r s3://b`) also aborts the bucket's
//! uploads in progress once its objects are gone, as `--incomplete` does: what they
//! hold is not listed as objects but can keep the bucket from being removed (GCS keeps
//! an upload's parts as objects under a hidden prefix; Azure an uncommitted blob), and
//! emptying a bucket is what `rm -r` of it is for.

use crate::common::{parse_object, usage, Global, Output};
use crate::wildcard::{has_wildcard, list_matching, Pattern};
use anyhow::Result;
use clap::Args;
use ferry_engine::DeleteOptions;
use ferry_engine::Engine;
use ferry_store::StoreUrl;
use futures_util::stream::{StreamExt, TryStreamExt};
use std::collections::HashMap;

/// Keys per delete_many call: the engine's batches (1,000 keys) times its requests in
/// flight (8), so one group keeps every request slot busy.
const GROUP_KEYS: usize = 8_000;

/// Groups at once: a second group's requests start while the first's slowest batch (or
/// its retries) finishes. More would exceed S3's 3,500 writes/s per prefix by more
/// (docs/lab/store-s3-facts.md) and buy SlowDown.
const GROUPS_IN_FLIGHT: usize = 2;

/// AbortMultipartUpload requests in flight for `rm --incomplete`.
const ABORTS_IN_FLIGHT: usize = 8;

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  ferry rm s3://bucket/old.log\n  ferry rm 's3://bucket/logs/*.tmp'\n  ferry rm --recursive s3://bucket/scratch/\n  ferry rm --dry-run --recursive s3://bucket/scratch/\n  ferry rm --incomplete s3://bucket/backups/  # abort uploads in progress (ls --incomplete shows them)"
)]
pub struct RmArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket/key, a pattern, or (with --recursive) a prefix.
    #[arg(required = true)]
    pub urls: Vec<String>,
    /// Everything under the prefix.
    #[arg(long, short = 'r')]
    pub recursive: bool,
    /// Print what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Abort the multipart uploads in progress whose key starts with the prefix (left
    /// by interrupted uploads, billed until aborted); objects are not touched.
    #[arg(long, conflicts_with = "recursive")]
    pub incomplete: bool,
    /// Take `*` and `?` literally: no wildcard expansion (keys may contain them).
    #[arg(long)]
    pub raw: bool,
}

pub async fn run(args: RmArgs, g: &Global) -> Result<()> {
    let mut targets = Vec::new();
    for u in &args.urls {
        let url = parse_object(u)?;
        if args.incomplete && !args.raw && has_wildcard(&url.key) {
            return Err(usage("--incomplete takes a prefix, not a pattern"));
        }
        if url.key.is_empty() && !args.recursive && !args.incomplete {
            return Err(usage(format!(
                "{u:?} names a bucket: use --recursive to remove every object in it (or rb to remove the bucket)"
            )));
        }
        targets.push(url);
    }
    let out = Output::new(g);
    if args.incomplete {
        for url in targets {
            abort_incomplete(&g.client(url.provider)?, &out, &url, args.dry_run).await?;
        }
        return out.finish();
    }
    for url in targets {
        let client = g.client(url.provider)?;
        let (provider, bucket, key) = (url.provider, &url.bucket, &url.key);
        let wild = !args.raw && has_wildcard(key);
        if !args.recursive && !wild {
            let obj = url.object();
            if args.dry_run {
                out.emit(
                    || format!("(dry run) rm {obj}"),
                    || serde_json::json!({"op": "rm", "object": obj.to_string(), "dry_run": true}),
                );
                continue;
            }
            match client.delete(&obj).await {
                Ok(()) => {
                    out.ok();
                    out.emit_done(
                        || format!("rm {obj}"),
                        || serde_json::json!({"op": "rm", "object": obj.to_string()}),
                    );
                }
                Err(e) => out.fail("rm", &obj.to_string(), &e),
            }
            continue;
        }
        let pattern = if wild { Pattern::new(key, false)? } else { Pattern::under(key) };
        let matched = std::sync::atomic::AtomicU64::new(0);
        let groups =
            list_matching(&client, bucket, pattern, true).map_ok(|o| o.key).try_chunks(GROUP_KEYS).map_err(|e| e.1);
        let dry = args.dry_run;
        let results = groups
            .map_ok(|keys| {
                let client = client.clone();
                let bucket = bucket.clone();
                let out = out.clone();
                let matched = &matched;
                async move {
                    let name = |k: &str| format!("{provider}://{bucket}/{k}");
                    matched.fetch_add(keys.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    if dry {
                        for k in &keys {
                            out.emit(
                                || format!("(dry run) rm {}", name(k)),
                                || serde_json::json!({"op": "rm", "object": name(k), "dry_run": true}),
                            );
                        }
                        return Ok(());
                    }
                    let report = ferry_engine::delete_many(
                        &client,
                        &bucket,
                        futures_util::stream::iter(keys.clone()),
                        &DeleteOptions::default(),
                    )
                    .await;
                    let failed: HashMap<&str, &ferry_engine::DeleteFailure> =
                        report.failed.iter().map(|f| (f.key.as_str(), f)).collect();
                    for k in &keys {
                        match failed.get(k.as_str()) {
                            Some(f) => out.fail("rm", &name(k), &format!("{} {}", f.code, f.message)),
                            None => {
                                out.ok();
                                out.emit_done(
                                    || format!("rm {}", name(k)),
                                    || serde_json::json!({"op": "rm", "object": name(k)}),
                                );
                            }
                        }
                    }
                    Ok::<(), anyhow::Error>(())
                }
            })
            .try_buffer_unordered(GROUPS_IN_FLIGHT);
        futures_util::pin_mut!(results);
        while let Some(r) = results.next().await {
            r?;
        }
        if key.is_empty() && !wild {
            abort_incomplete(&client, &out, &url, dry).await?;
        }
        if dry {
            // How many a wildcard or prefix reached, said once at the end.
            let n = matched.load(std::sync::atomic::Ordering::Relaxed);
            let what = format!("{provider}://{bucket}/{key}");
            let said = match (n == 1, wild) {
                (true, true) => "object matches",
                (false, true) => "objects match",
                (true, false) => "object is under",
                (false, false) => "objects are under",
            };
            out.emit(
                || format!("(dry run) {n} {said} {what}"),
                || serde_json::json!({"op": "rm", "dry_run": true, "pattern": what, "matched": n}),
            );
        }
    }
    out.finish()
}

/// `rm --incomplete`: aborts every upload in progress under `url`'s key, a prefix (module
/// note).
async fn abort_incomplete(client: &Engine, out: &Output, url: &StoreUrl, dry: bool) -> Result<()> {
    let uploads = client
        .list_uploads(&url.bucket, &url.key)
        .await
        .map_err(|e| anyhow::Error::new(e).context(format!("listing the uploads in progress under {url}")))?;
    let name = |u: &ferry_store::UploadEntry| url.at(u.key.clone()).to_string();
    let json = |u: &ferry_store::UploadEntry, dry: bool| serde_json::json!({"op": "rm", "object": name(u), "upload_id": u.upload_id, "incomplete": true, "dry_run": dry});
    if dry {
        for u in &uploads {
            out.emit(|| format!("(dry run) rm --incomplete {} {}", name(u), u.upload_id), || json(u, true));
        }
        return Ok(());
    }
    let mut aborts = futures_util::stream::iter(uploads.iter().map(|u| async move {
        let upload = ferry_store::MultipartUpload {
            object: url.at(u.key.clone()),
            upload_id: u.upload_id.clone(),
            checksum: None,
            full_object_checksum: false,
        };
        let r = match client.discard_upload(&upload).await {
            Err(e) if e.is_not_found() => Ok(()),
            r => r,
        };
        (u, r)
    }))
    .buffer_unordered(ABORTS_IN_FLIGHT);
    while let Some((u, r)) = aborts.next().await {
        match r {
            Ok(()) => {
                out.ok();
                out.emit_done(|| format!("rm --incomplete {} {}", name(u), u.upload_id), || json(u, false));
            }
            Err(e) => out.fail("rm --incomplete", &format!("{} {}", name(u), u.upload_id), &e),
        }
    }
    Ok(())
}
