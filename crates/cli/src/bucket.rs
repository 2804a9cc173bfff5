//! `ferry mb` and `ferry rb`: create and remove buckets.

use crate::common::{parse_s3, usage, Global, Output};
use anyhow::{Context, Result};
use clap::Args;

#[derive(Args, Debug, Clone)]
#[command(after_help = "Example:\n  ferry mb s3://new-bucket")]
pub struct MbArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket
    pub url: String,
}

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  ferry rb s3://old-bucket            # must be empty\n  ferry rm --recursive s3://old-bucket && ferry rb s3://old-bucket"
)]
pub struct RbArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket
    pub url: String,
}

fn bucket_only(url: &str) -> Result<String> {
    let (bucket, key) = parse_s3(url)?;
    if !key.is_empty() {
        return Err(usage(format!("{url:?} names a key; give s3://bucket")));
    }
    Ok(bucket)
}

pub async fn mb(args: MbArgs, g: &Global) -> Result<()> {
    let bucket = bucket_only(&args.url)?;
    let client = g.client()?;
    client.create_bucket(&bucket).await.with_context(|| format!("make bucket s3://{bucket}"))?;
    let out = Output::new(g);
    out.emit(|| format!("mb s3://{bucket}"), || serde_json::json!({"op": "mb", "bucket": bucket}));
    out.finish()
}

pub async fn rb(args: RbArgs, g: &Global) -> Result<()> {
    let bucket = bucket_only(&args.url)?;
    let client = g.client()?;
    client.delete_bucket(&bucket).await.with_context(|| format!("remove bucket s3://{bucket}"))?;
    let out = Output::new(g);
    out.emit(|| format!("rb s3://{bucket}"), || serde_json::json!({"op": "rb", "bucket": bucket}));
    out.finish()
}
