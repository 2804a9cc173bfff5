//! `ferry ls`: buckets; one level of a prefix (with `/` as delimiter, folders as `DIR`);
//! everything under it with `--recursive`; or the keys a wildcard names. Pages are
//! printed as they arrive, so memory holds one page whatever the listing's size.
//!
//! `--incomplete` lists the multipart uploads in progress under a prefix instead
//! (ListMultipartUploads): what an interrupted `cp -`, a killed multipart copy or an
//! upload never resumed left behind, whose parts are billed as storage until
//! completed or aborted (`ferry rm --incomplete`). One line per upload: the time it was
//! started, its upload id and its key. The store reads all pages of that listing
//! before it returns (bounded by its page limit), as uploads in progress are few.

use crate::common::{parse_location, short_time, usage, Global, Location, Output};
use crate::wildcard::{has_wildcard, list_matching, Pattern};
use anyhow::Result;
use clap::Args;
use ferry_store::{ListParams, ObjectEntry, Provider, UploadEntry};
use futures_util::stream::StreamExt;

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  ferry ls                                   # buckets\n  ferry ls s3://bucket/logs/                 # one level: objects and DIR prefixes\n  ferry ls --recursive s3://bucket/logs/     # every key under logs/\n  ferry ls 's3://bucket/logs/*.gz'           # '*' stays within one '/' segment\n  ferry ls 's3://bucket/logs/**.gz'          # '**' crosses segments\n  ferry --json ls s3://bucket/               # one JSON object per line\n  ferry ls --incomplete s3://bucket/backups/ # multipart uploads in progress (see rm --incomplete)"
)]
pub struct LsArgs {
    #[command(flatten)]
    pub g: crate::common::Global,
    /// s3://bucket[/prefix-or-pattern]; none lists the buckets.
    pub url: Option<String>,
    /// Every key under the prefix, not one level.
    #[arg(long, short = 'r')]
    pub recursive: bool,
    /// List the multipart uploads in progress whose key starts with the prefix (left by
    /// interrupted uploads; they cost storage until `ferry rm --incomplete` aborts them).
    #[arg(long, conflicts_with = "recursive")]
    pub incomplete: bool,
    /// Take `*` and `?` in the URL literally: no wildcard expansion (keys may contain them).
    #[arg(long)]
    pub raw: bool,
}

fn object_line(o: &ObjectEntry) -> String {
    format!("{}  {:>12}  {}", short_time(o.last_modified), o.size, o.key)
}

fn object_json(bucket: &str, o: &ObjectEntry) -> serde_json::Value {
    serde_json::json!({"type": "object", "bucket": bucket, "key": o.key, "size": o.size,
        "last_modified": crate::common::rfc3339(o.last_modified), "etag": o.etag.trim_matches('"'), "storage_class": o.storage_class})
}

pub async fn run(args: LsArgs, g: &Global) -> Result<()> {
    // No URL, or a scheme alone (`s3://`, `gs://`, `az://`): that provider's buckets.
    let (provider, target) = match args.url.as_deref() {
        None => (Provider::S3, None),
        Some(u) if bare_scheme(u).is_some() => (bare_scheme(u).unwrap(), None),
        Some(u) => match parse_location(u)? {
            Location::Object(u) => (u.provider, Some((u.bucket, u.key))),
            _ => return Err(usage(format!("ls takes an object URL (s3://, gs://, az://), not {u:?}"))),
        },
    };
    if args.incomplete && target.is_none() {
        return Err(usage("--incomplete lists the uploads of one bucket: ferry ls --incomplete s3://bucket[/prefix]"));
    }
    let client = g.client(provider)?;
    let out = Output::new(g);
    let Some((bucket, key)) = target else {
        for ferry_store::BucketEntry { name, creation_date } in client.list_buckets().await? {
            let created = Some(creation_date).filter(|t| *t != std::time::UNIX_EPOCH);
            let when = created.map(short_time).unwrap_or_default();
            out.emit(
                || format!("{when:19}  {provider}://{name}"),
                || serde_json::json!({"type": "bucket", "name": name, "created": created.map(crate::common::rfc3339)}),
            );
        }
        return out.finish();
    };
    let wild = !args.raw && has_wildcard(&key);
    if args.incomplete {
        if wild {
            return Err(usage("--incomplete takes a prefix, not a pattern"));
        }
        let uploads = client.list_uploads(&bucket, &key).await.map_err(|e| {
            anyhow::Error::new(e).context(format!("listing the uploads in progress under {provider}://{bucket}/{key}"))
        })?;
        for u in &uploads {
            out.emit(|| upload_line(provider, &bucket, u), || upload_json(&bucket, u));
        }
        return out.finish();
    }
    if args.recursive || wild {
        // `ls -r s3://b/some-prefix` lists by the literal prefix, as the AWS CLI does.
        let pattern = if wild { Pattern::new(&key, false)? } else { prefix_pattern(&key) };
        let mut s = list_matching(&client, &bucket, pattern, true);
        while let Some(o) = s.next().await {
            let o = o?;
            out.emit(|| object_line(&o), || object_json(&bucket, &o));
        }
        return out.finish();
    }
    let params = ListParams {
        prefix: (!key.is_empty()).then(|| key.clone()),
        delimiter: Some("/".into()),
        ..Default::default()
    };
    let mut pages = client.list(&bucket, params);
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| anyhow::Error::new(e).context(format!("listing {provider}://{bucket}/{key}")))?;
        for p in &page.common_prefixes {
            out.emit(
                || format!("{:>19}  {:>12}  {p}", "", "DIR"),
                || serde_json::json!({"type": "prefix", "bucket": bucket, "prefix": p}),
            );
        }
        for o in &page.objects {
            out.emit(|| object_line(o), || object_json(&bucket, o));
        }
    }
    out.finish()
}

fn upload_line(provider: Provider, bucket: &str, u: &UploadEntry) -> String {
    format!("{}  {}  {provider}://{bucket}/{}", short_time(u.initiated), u.upload_id, u.key)
}

/// `s3://` or `s3:` (any provider's scheme) with nothing after it.
fn bare_scheme(u: &str) -> Option<Provider> {
    let scheme = u.strip_suffix("://").or_else(|| u.strip_suffix(':'))?;
    Provider::from_scheme(scheme)
}

fn upload_json(bucket: &str, u: &UploadEntry) -> serde_json::Value {
    serde_json::json!({"type": "upload", "bucket": bucket, "key": u.key, "upload_id": u.upload_id, "initiated": crate::common::rfc3339(u.initiated)})
}

/// Everything whose key starts with `key` (a plain prefix, not a directory).
fn prefix_pattern(key: &str) -> Pattern {
    let mut p = Pattern::new("", true).expect("an empty prefix is a valid pattern");
    p.prefix = key.to_owned();
    p
}
