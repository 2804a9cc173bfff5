//! `ferry presign`: a URL anyone can GET the object with until it expires (SigV4 query
//! signing, at most 7 days as S3 allows). Nothing is sent to the server.

use crate::common::{parse_object, usage, Global, Output};
use anyhow::Result;
use clap::Args;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  ferry presign s3://bucket/report.pdf\n  curl -o r.pdf \"$(ferry presign --expires-in 600 s3://bucket/report.pdf)\""
)]
pub struct PresignArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket/key, gs://bucket/key or az://container/key
    pub url: String,
    /// Seconds the URL stays valid (1 to 604800).
    #[arg(long, default_value_t = 3600)]
    pub expires_in: u64,
}

pub async fn run(args: PresignArgs, g: &Global) -> Result<()> {
    let u = parse_object(&args.url)?;
    // The key as given, `*` and `?` included: a presigned URL names one object and
    // nothing is listed to make it.
    if u.key.is_empty() {
        return Err(usage(format!("presign takes one object, not {:?}", args.url)));
    }
    if args.expires_in == 0 || args.expires_in > 604_800 {
        return Err(usage(format!("--expires-in must be 1 to 604800 seconds, not {}", args.expires_in)));
    }
    let client = g.client(u.provider)?;
    let obj = u.object();
    let url = client.presign(&obj, Duration::from_secs(args.expires_in)).await?;
    let out = Output::new(g);
    out.emit(
        || url.clone(),
        || serde_json::json!({"op": "presign", "object": obj.to_string(), "url": url, "expires_in": args.expires_in}),
    );
    out.finish()
}
