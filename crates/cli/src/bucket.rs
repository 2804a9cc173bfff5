//! `ferry mb` and `ferry rb`: create and remove buckets.

use crate::common::{parse_object, usage, Global, Output};
use anyhow::{Context, Result};
use clap::Args;
use ferry_store::StoreUrl;

#[derive(Args, Debug, Clone)]
#[command(after_help = "Example:\n  ferry mb s3://new-bucket")]
pub struct MbArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket, gs://bucket or az://container
    pub url: String,
}

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  ferry rb s3://old-bucket            # must be empty\n  ferry rm --recursive s3://old-bucket && ferry rb s3://old-bucket"
)]
pub struct RbArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket, gs://bucket or az://container
    pub url: String,
}

fn bucket_only(url: &str) -> Result<StoreUrl> {
    let u = parse_object(url)?;
    if !u.key.is_empty() {
        return Err(usage(format!("{url:?} names a key; give {}://bucket", u.provider)));
    }
    Ok(u)
}

pub async fn mb(args: MbArgs, g: &Global) -> Result<()> {
    let u = bucket_only(&args.url)?;
    let (p, bucket) = (u.provider, u.bucket);
    let client = g.client(p)?;
    client.create_bucket(&bucket).await.with_context(|| format!("make bucket {p}://{bucket}"))?;
    let out = Output::new(g);
    out.emit(|| format!("mb {p}://{bucket}"), || serde_json::json!({"op": "mb", "bucket": bucket}));
    out.finish()
}

pub async fn rb(args: RbArgs, g: &Global) -> Result<()> {
    let u = bucket_only(&args.url)?;
    let (p, bucket) = (u.provider, u.bucket);
    let client = g.client(p)?;
    if let Err(e) = client.delete_bucket(&bucket).await {
        // Uploads in progress hold parts no object listing shows: say so, and how to go on.
        let held = match client.list_uploads(&bucket, "").await {
            Ok(u) if !u.is_empty() => format!(
                " ({} upload(s) in progress still hold parts in it: `ferry rm --incomplete {p}://{bucket}` removes them)",
                u.len()
            ),
            _ => String::new(),
        };
        return Err(anyhow::Error::new(e).context(format!("remove bucket {p}://{bucket}{held}")));
    }
    let out = Output::new(g);
    out.emit(|| format!("rb {p}://{bucket}"), || serde_json::json!({"op": "rb", "bucket": bucket}));
    out.finish()
}
