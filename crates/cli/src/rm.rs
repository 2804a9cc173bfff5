//! `ferry rm`: one key, the keys a wildcard names, or everything under a prefix
//! (`--recursive`). Matching keys stream from the listing in batches of 1,000 (S3's
//! DeleteObjects limit), with a few batches in flight; each key that could not be
//! deleted is reported with its cause.

use crate::common::{parse_s3, usage, Global, Output};
use crate::wildcard::{has_wildcard, list_matching, Pattern};
use anyhow::Result;
use clap::Args;
use ferry_store::ObjectRef;
use futures_util::stream::{StreamExt, TryStreamExt};

/// DeleteObjects requests in flight: each removes up to 1,000 keys, so a few already
/// reach S3's per-prefix rate (3,500 writes/s, LAB.md section 1).
const BATCHES_IN_FLIGHT: usize = 4;

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:\n  ferry rm s3://bucket/old.log\n  ferry rm 's3://bucket/logs/*.tmp'\n  ferry rm --recursive s3://bucket/scratch/\n  ferry rm --dry-run --recursive s3://bucket/scratch/")]
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
}

pub async fn run(args: RmArgs, g: &Global) -> Result<()> {
    let mut targets = Vec::new();
    for u in &args.urls {
        let (bucket, key) = parse_s3(u)?;
        if key.is_empty() && !args.recursive {
            return Err(usage(format!("{u:?} names a bucket: use --recursive to remove every object in it (or rb to remove the bucket)")));
        }
        targets.push((bucket, key));
    }
    let client = g.client()?;
    let out = Output::new(g);
    for (bucket, key) in targets {
        if !args.recursive && !has_wildcard(&key) {
            let obj = ObjectRef::new(bucket.clone(), key.clone());
            if args.dry_run {
                out.emit(|| format!("(dry run) rm {obj}"), || serde_json::json!({"op": "rm", "object": obj.to_string(), "dry_run": true}));
                continue;
            }
            match client.delete_object(&obj).await {
                Ok(()) => {
                    out.ok();
                    out.emit(|| format!("rm {obj}"), || serde_json::json!({"op": "rm", "object": obj.to_string()}));
                }
                Err(e) => out.fail("rm", &obj.to_string(), &e),
            }
            continue;
        }
        let pattern = Pattern::new(&key, !has_wildcard(&key))?;
        let keys = list_matching(&client, &bucket, pattern, true).map_ok(|o| o.key).try_chunks(ferry_store::object::DELETE_OBJECTS_MAX_KEYS).map_err(|e| e.1);
        let dry = args.dry_run;
        let results = keys
            .map_ok(|chunk| {
                let client = client.clone();
                let bucket = bucket.clone();
                let out = out.clone();
                async move {
                    if dry {
                        for k in &chunk {
                            out.emit(|| format!("(dry run) rm s3://{bucket}/{k}"), || serde_json::json!({"op": "rm", "object": format!("s3://{bucket}/{k}"), "dry_run": true}));
                        }
                        return Ok(());
                    }
                    match client.delete_objects(&bucket, &chunk).await {
                        Ok(r) => {
                            for k in r.deleted {
                                out.ok();
                                out.emit(|| format!("rm s3://{bucket}/{k}"), || serde_json::json!({"op": "rm", "object": format!("s3://{bucket}/{k}")}));
                            }
                            for e in r.errors {
                                out.fail("rm", &format!("s3://{bucket}/{}", e.key), &format!("{} {}", e.code, e.message));
                            }
                        }
                        Err(e) => {
                            for k in &chunk {
                                out.fail("rm", &format!("s3://{bucket}/{k}"), &e);
                            }
                        }
                    }
                    Ok::<(), anyhow::Error>(())
                }
            })
            .try_buffer_unordered(BATCHES_IN_FLIGHT);
        futures_util::pin_mut!(results);
        while let Some(r) = results.next().await {
            r?;
        }
    }
    out.finish()
}
