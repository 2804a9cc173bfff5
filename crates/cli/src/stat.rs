//! `ferry stat`: what HEAD says about an object (size, ETag, date, type, checksums,
//! metadata).

use crate::common::{parse_object, rfc3339, usage, Global, Output};
use crate::wildcard::{one_object, Literal};
use anyhow::{Context, Result};
use clap::Args;

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:\n  ferry stat s3://bucket/key\n  ferry --json stat s3://bucket/key | jq .checksums")]
pub struct StatArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket/key, gs://bucket/key or az://container/key
    pub url: String,
    /// Take `*` and `?` in the key literally: no wildcard expansion.
    #[arg(long)]
    pub raw: bool,
}

pub async fn run(args: StatArgs, g: &Global) -> Result<()> {
    let u = parse_object(&args.url)?;
    if u.key.is_empty() {
        return Err(usage(format!("stat takes one object, not {:?}", args.url)));
    }
    let client = g.client(u.provider)?;
    // The key itself when such an object exists, else the one its wildcard matches.
    let obj = one_object(&client, &u.object(), Literal::from_raw(args.raw), "stat").await?;
    let out = Output::new(g);
    let info = client.head(&obj).await.with_context(|| obj.to_string())?;
    let sums: Vec<(String, String)> = info.checksums.iter().map(|(a, v)| (a.as_str().to_owned(), v.clone())).collect();
    out.emit(
        || {
            let mut s = format!("Name:          {obj}\n") + &format!("Size:          {}\nETag:          {}\n", info.size, info.etag.as_deref().unwrap_or("-"));
            s += &format!("Last-Modified: {}\nContent-Type:  {}\n", info.last_modified.map(rfc3339).unwrap_or_default(), info.content_type.as_deref().unwrap_or("-"));
            for (a, v) in &sums {
                s += &format!("Checksum:      {a} {v}\n");
            }
            for (k, v) in &info.metadata {
                s += &format!("Metadata:      {k}: {v}\n");
            }
            s.trim_end().to_owned()
        },
        || {
            serde_json::json!({"bucket": obj.bucket, "key": obj.key, "size": info.size, "etag": info.etag.as_deref().map(|e| e.trim_matches('"')),
                "last_modified": info.last_modified.map(rfc3339), "content_type": info.content_type,
                "checksums": sums.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(), "metadata": info.metadata})
        },
    );
    out.finish()
}
