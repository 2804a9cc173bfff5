//! `ferry cat`: an object's bytes to stdout, streamed (the body is verified as it
//! passes; a mismatch at the end is an error and exit code 1).

use crate::common::{parse_object, usage, Global};
use crate::wildcard::{one_object, Literal};
use anyhow::{Context, Result};
use clap::Args;
use ferry_engine::Engine;
use ferry_store::{GetParams, ObjectRef};
use std::io::Write;

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  ferry cat s3://bucket/notes.txt\n  ferry cat s3://bucket/data.csv.gz | gunzip | head"
)]
pub struct CatArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket/key, gs://bucket/key or az://container/key
    pub url: String,
    /// Take `*` and `?` in the key literally: no wildcard expansion.
    #[arg(long)]
    pub raw: bool,
}

pub async fn run(args: CatArgs, g: &Global) -> Result<()> {
    let u = parse_object(&args.url)?;
    if u.key.is_empty() {
        return Err(usage(format!("cat takes one object, not {:?}", args.url)));
    }
    let client = g.client(u.provider)?;
    // The key itself when such an object exists, else the one its wildcard matches.
    let obj = one_object(&client, &u.object(), Literal::from_raw(args.raw), "cat").await?;
    to_stdout(&client, &obj).await
}

/// Streams one object to stdout (shared with `cp s3://... -`).
pub async fn to_stdout(client: &Engine, obj: &ObjectRef) -> Result<()> {
    let name = obj.to_string();
    let out = client.get(obj, GetParams::default()).await.with_context(|| name.clone())?;
    let mut body = out.body;
    let mut stdout = std::io::stdout().lock();
    while let Some(chunk) = body.chunk().await {
        let chunk = chunk.with_context(|| name.clone())?;
        match stdout.write_all(&chunk) {
            Ok(()) => {}
            // The reader went away (`| head`): not an error of ours.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(anyhow::Error::new(e).context("writing to stdout")),
        }
    }
    match stdout.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
