//! Blob operations: Get Blob Properties, Get Blob, Put Blob, Delete Blob, Copy Blob.
//!
//! Put Blob (and Put Block, blocks.rs) carries `x-ms-content-crc64`: the body's
//! CRC-64/NVME as 8 little-endian bytes in base64, which Azure checks before it stores
//! anything. It takes the place of `Content-MD5` on those requests because Azure refuses
//! a request that carries both (400 `BothCrc64AndMd5HeaderPresent`); the MD5 stays as
//! what Azure stores: Put Blob makes Azure compute and keep the blob's MD5 (a GET of the
//! whole blob is checked against it, body.rs), and the answer's `Content-MD5` and
//! `x-ms-content-crc64` are compared with ours ([`check_answer`]): a mismatch deletes
//! the blob and fails with `Integrity`. Azurite (3.37.0, the version setup.sh installs)
//! checks the CRC64 and answers it for Put Block; its Put Blob answer carries the MD5.
//!
//! | source | CRC64 (and MD5) | retried? |
//! |---|---|---|
//! | bytes | computed up front | yes |
//! | file | computed in a first read, then the file streams | yes, re-read |
//! | stream | cannot precede the body: the MD5 Azure computed and returns is compared with ours as it passed; a mismatch deletes the blob | no |
//!
//! Azure has no suffix ranges (`x-ms-range: bytes=-n` is not in its grammar), so a
//! suffix is turned into `bytes=a-b` with the size (from the caller's hint, else a
//! HEAD whose ETag then pins the GET with `If-Match`). Copy Blob is asynchronous in
//! the service: the answer's `x-ms-copy-status` is polled until it leaves `pending`.
//! It copies bytes, properties and metadata but no index tags, so a copy reads the
//! source's properties first and, when they count tags, the tags, and states them on
//! the copy pinned to that ETag (restate.rs): one request more per copy, two for a
//! tagged source.

use crate::azure::body::{full_object, AzureReopen};
use crate::azure::client::{pause, AzureClient};
use crate::azure::config::AzureCredential;
use crate::azure::error::request_id;
use crate::azure::restate::{tag_count, tags_header};
use crate::checked::{CheckedBody, Verifier};
use crate::error::Error;
use crate::request::Op;
use crate::request::OpBody;
use crate::types::*;
use bytes::Bytes;
use ferry_proto::checksum::base64_encode;
use ferry_proto::encoding::parse_http_date;
use ferry_proto::range::{parse_content_range, RangeSpec};
use ferry_wire::{RequestBody, Response};
use futures_util::stream::{BoxStream, StreamExt};
use http::{HeaderMap, Method};
use md5::{Digest, Md5};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest Put Blob (5,000 MiB since version 2019-12-12; "Put Blob", Remarks).
pub const MAX_PUT_BLOB: u64 = 5000 * 1024 * 1024;

/// How often a pending Copy Blob is polled, and for how long at most: a copy within one
/// account completes at once in practice; across accounts it runs in the background.
const COPY_POLL: Duration = Duration::from_millis(200);
const COPY_POLL_LIMIT: Duration = Duration::from_secs(3600);

/// What Azure's blob headers say about a blob (`x-ms-meta-*` lower-cased).
pub(crate) fn info_from_headers(headers: &HeaderMap) -> ObjectInfo {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let size = match get("content-range").as_deref().and_then(parse_content_range) {
        Some((_, _, Some(total))) => total,
        _ => get("content-length").and_then(|v| v.trim().parse().ok()).unwrap_or(0),
    };
    let metadata: BTreeMap<String, String> = headers
        .iter()
        .filter_map(|(n, v)| {
            let m = n.as_str().strip_prefix("x-ms-meta-")?;
            Some((m.to_owned(), v.to_str().ok()?.to_owned()))
        })
        .collect();
    ObjectInfo {
        size,
        etag: get("etag").map(|e| quoted(&e)),
        last_modified: get("last-modified").as_deref().and_then(parse_http_date),
        content_type: get("content-type"),
        metadata,
        checksums: Vec::new(),
    }
}

/// An ETag with its quotes (listings send them bare in some versions).
pub(crate) fn quoted(etag: &str) -> String {
    let t = etag.trim();
    if t.starts_with('"') {
        t.to_owned()
    } else {
        format!("\"{t}\"")
    }
}

/// The `x-ms-content-crc64` value of a CRC-64/NVME: its 8 bytes little-endian, base64.
pub fn crc64_header(crc: u64) -> String {
    base64_encode(&crc.to_le_bytes())
}

/// Compares what Azure says it received (`x-ms-content-crc64`, `Content-MD5`, where the
/// answer has them) with what was sent.
pub(crate) fn check_answer(headers: &HeaderMap, crc: u64, md5: &str) -> Result<(), Error> {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(theirs) = get("x-ms-content-crc64") {
        if theirs != crc64_header(crc) {
            return Err(Error::integrity(
                format!("Azure computed CRC64 {theirs} of the body, ferry sent {}", crc64_header(crc)),
                request_id(headers),
            ));
        }
    }
    if let Some(theirs) = get("content-md5") {
        if theirs != md5 {
            return Err(Error::integrity(
                format!("Azure computed MD5 {theirs} of the body, ferry sent {md5}"),
                request_id(headers),
            ));
        }
    }
    Ok(())
}

fn put_headers(mut op: Op, params: &PutParams, crc: Option<u64>) -> Result<Op, Error> {
    op = op
        .header("x-ms-blob-type", "BlockBlob")?
        .header_opt("x-ms-blob-content-type", params.content_type.as_deref())?
        .header_opt("x-ms-content-crc64", crc.map(crc64_header).as_deref())?;
    for (k, v) in &params.metadata {
        op = op.header(&format!("x-ms-meta-{}", k.to_ascii_lowercase()), v)?;
    }
    if params.if_none_match_star {
        op = op.header("if-none-match", "*")?;
    }
    Ok(op)
}

/// The refusal to copy a tagged blob whose tags could not be read (`error`): the copy
/// would arrive without them (restate.rs).
fn untagged_copy(source: &ObjectRef, count: u64, error: Error) -> Error {
    let why = format!(
        "{source} has {count} index tags, which Copy Blob does not copy, and reading them failed ({error}); \
         nothing was copied (a SAS needs the t permission to read tags)"
    );
    match error {
        Error::Auth { status, code, request_id, .. } => Error::Auth { status, code, message: why, request_id },
        Error::NotFound { code, request_id, .. } => Error::NotFound { code, message: why, request_id },
        Error::Precondition { status, code, request_id, .. } => {
            Error::Precondition { status, code, message: why, request_id }
        }
        other => other,
    }
}

fn put_output(r: &Response) -> PutObjectOutput {
    PutObjectOutput { etag: r.headers.get("etag").and_then(|v| v.to_str().ok()).map(quoted), checksum: None }
}

/// The CRC-64/NVME of `b`.
pub(crate) fn crc64(b: &[u8]) -> u64 {
    let d = ferry_proto::checksum::ChecksumAlgorithm::Crc64Nvme.digest(b);
    u64::from_be_bytes(d.try_into().expect("CRC64 is 8 bytes"))
}

/// The MD5 (base64) of `len` bytes of a file from `offset`, and its CRC64NVME.
pub(crate) async fn file_digests(path: &std::path::Path, offset: u64, len: u64) -> Result<(String, u64), Error> {
    let p = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&p)?;
        let mut buf = vec![0u8; crate::request::FILE_CHUNK.min(len.max(1) as usize)];
        let mut md5 = Md5::new();
        let mut crc = ferry_proto::checksum::Checksummer::new(ferry_proto::checksum::ChecksumAlgorithm::Crc64Nvme);
        let (mut at, end) = (offset, offset + len);
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            f.read_exact_at(&mut buf[..want], at)?;
            md5.update(&buf[..want]);
            crc.update(&buf[..want]);
            at += want as u64;
        }
        let crc = u64::from_be_bytes(crc.finish().try_into().expect("CRC64 is 8 bytes"));
        Ok((base64_encode(&md5.finalize()), crc))
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r)
    .map_err(|e| Error::Io { path: path.display().to_string(), error: e })
}

impl AzureClient {
    /// Get Blob Properties.
    pub async fn head_blob(&self, object: &ObjectRef) -> Result<ObjectInfo, Error> {
        let mut op = Op::object("GetBlobProperties", Method::HEAD, &object.bucket, Some(&object.key));
        self.execute(&mut op, |r| async move { Ok(info_from_headers(&r.headers)) }).await
    }

    /// Get Blob: the body streams, checked, resumed if cut (body.rs).
    pub async fn get_blob(&self, object: &ObjectRef, params: GetParams) -> Result<GetObjectOutput, Error> {
        let mut if_match = params.if_match.clone();
        let (range, size_hint) = match params.range {
            None => (None, params.size_hint),
            Some(RangeSpec::FromTo(a, b)) => (Some((a, Some(b))), Some(b.saturating_sub(a) + 1)),
            Some(RangeSpec::From(a)) => (Some((a, None)), params.size_hint.map(|s| s.saturating_sub(a))),
            Some(RangeSpec::Suffix(n)) => {
                let size = match params.size_hint {
                    Some(s) => s,
                    None => {
                        let info = self.head_blob(object).await?;
                        if if_match.is_none() {
                            if_match = info.etag.clone();
                        }
                        info.size
                    }
                };
                if size == 0 || n == 0 {
                    (None, Some(0))
                } else {
                    let first = size.saturating_sub(n);
                    (Some((first, Some(size - 1))), Some(size - first))
                }
            }
        };
        let x_range = range.map(|(a, b)| match b {
            Some(b) => format!("bytes={a}-{b}"),
            None => format!("bytes={a}-"),
        });
        let mut op = Op::object("GetBlob", Method::GET, &object.bucket, Some(&object.key))
            .header_opt("x-ms-range", x_range.as_deref())?
            .header_opt("if-match", if_match.as_deref())?
            .header_opt("if-none-match", params.if_none_match.as_deref())?
            .header_opt("if-modified-since", params.if_modified_since.map(ferry_proto::encoding::http_date).as_deref())?
            .header_opt(
                "if-unmodified-since",
                params.if_unmodified_since.map(ferry_proto::encoding::http_date).as_deref(),
            )?;
        op.response_len = size_hint;
        let resp = self.execute(&mut op, |r| async move { Ok(r) }).await?;
        let meta = info_from_headers(&resp.headers);
        let reopen = AzureReopen { client: self.clone(), object: object.clone() };
        let checked = params.checksum_mode;
        CheckedBody::output(reopen, resp, meta, |h| if checked { full_object(h) } else { Verifier::None })
    }

    /// Put Blob from memory.
    pub async fn put_blob(&self, object: &ObjectRef, body: Bytes, params: PutParams) -> Result<PutObjectOutput, Error> {
        let md5 = base64_encode(&Md5::digest(&body));
        let crc = crc64(&body);
        let op = Op::object("PutBlob", Method::PUT, &object.bucket, Some(&object.key));
        let mut op = put_headers(op, &params, Some(crc))?.body(OpBody::Bytes(body));
        self.put_checked(object, &mut op, crc, md5).await
    }

    /// Sends a Put Blob and checks the answer (module note); a blob stored with other
    /// bytes than were sent is deleted.
    async fn put_checked(
        &self,
        object: &ObjectRef,
        op: &mut Op,
        crc: u64,
        md5: String,
    ) -> Result<PutObjectOutput, Error> {
        let r = self.execute(op, |r| async move { Ok(r) }).await?;
        if let Err(e) = check_answer(&r.headers, crc, &md5) {
            let _ = self.delete_blob(object).await;
            return Err(e);
        }
        Ok(put_output(&r))
    }

    /// Put Blob from a file: its MD5 first, then the file streams.
    pub async fn put_blob_file(
        &self,
        object: &ObjectRef,
        path: PathBuf,
        params: PutParams,
    ) -> Result<PutObjectOutput, Error> {
        let len = tokio::fs::metadata(&path)
            .await
            .map_err(|e| Error::Io { path: path.display().to_string(), error: e })?
            .len();
        if len > MAX_PUT_BLOB {
            return Err(Error::Config(format!("Put Blob takes at most {MAX_PUT_BLOB} bytes; use a block upload")));
        }
        let (md5, crc) = file_digests(&path, 0, len).await?;
        let op = Op::object("PutBlob", Method::PUT, &object.bucket, Some(&object.key));
        let mut op = put_headers(op, &params, Some(crc))?.body(OpBody::File { path, offset: 0, len });
        self.put_checked(object, &mut op, crc, md5).await
    }

    /// Put Blob from a stream of exactly `len` bytes, sent once (module note).
    pub async fn put_blob_stream(
        &self,
        object: &ObjectRef,
        len: u64,
        stream: BoxStream<'static, std::io::Result<Bytes>>,
        params: PutParams,
    ) -> Result<PutObjectOutput, Error> {
        let hasher = Arc::new(Mutex::new(Some(Md5::new())));
        let h = hasher.clone();
        let mut seen = 0u64;
        let counted = stream
            .map(move |r| {
                let b = r?;
                seen += b.len() as u64;
                if seen > len {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("stream is longer than the {len} bytes declared"),
                    ));
                }
                if let Some(m) = h.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                    m.update(&b);
                }
                Ok(b)
            })
            .boxed();
        let op = Op::object("PutBlob", Method::PUT, &object.bucket, Some(&object.key));
        let mut op =
            put_headers(op, &params, None)?.body(OpBody::Once(Some(RequestBody::Stream { len, stream: counted })));
        let resp = self.execute(&mut op, |r| async move { Ok(r) }).await?;
        let ours = hasher.lock().unwrap_or_else(|p| p.into_inner()).take().map(|m| base64_encode(&m.finalize()));
        let theirs = resp.headers.get("content-md5").and_then(|v| v.to_str().ok()).map(str::to_owned);
        if let (Some(ours), Some(theirs)) = (ours, theirs) {
            if ours != theirs.trim() {
                let rid = request_id(&resp.headers);
                let _ = self.delete_blob(object).await;
                return Err(Error::integrity(
                    format!("Azure stored MD5 {theirs}, the stream's bytes have {ours}; the blob was deleted"),
                    rid,
                ));
            }
        }
        Ok(put_output(&resp))
    }

    /// Delete Blob (a missing blob is not an error, as the trait wants).
    pub async fn delete_blob(&self, object: &ObjectRef) -> Result<(), Error> {
        let mut op = Op::object("DeleteBlob", Method::DELETE, &object.bucket, Some(&object.key));
        match self.execute(&mut op, |_| async { Ok(()) }).await {
            Err(e)
                if e.is_not_found() && !matches!(&e, Error::NotFound { code, .. } if code == "ContainerNotFound") =>
            {
                Ok(())
            }
            r => r,
        }
    }

    /// Copy Blob within the account, polled until done (module note).
    pub async fn copy_blob(
        &self,
        source: &ObjectRef,
        dest: &ObjectRef,
        params: CopyParams,
    ) -> Result<CopyObjectOutput, Error> {
        if params.content_type.is_some() {
            return Err(Error::Config(
                "Azure's Copy Blob keeps the source's content type; setting another one is not supported".into(),
            ));
        }
        let mut url = format!("{}{}", self.origin(), self.path(Some(&source.bucket), Some(&source.key)));
        if let AzureCredential::Sas(sas) = &self.config().credential {
            url = format!("{url}?{sas}");
        }
        // Copy Blob copies no index tags: the source's are read and stated (restate.rs),
        // and the copy pinned to the ETag they were read with.
        let mut head = Op::object("GetBlobProperties", Method::HEAD, &source.bucket, Some(&source.key))
            .header_opt("if-match", params.if_match.as_deref())?;
        let props = self.execute(&mut head, |r| async move { Ok(r.headers) }).await?;
        let source_etag = props.get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let tags = match tag_count(&props) {
            0 => Vec::new(),
            n => self.blob_tags(source).await.map_err(|e| untagged_copy(source, n, e))?,
        };
        let mut op = Op::object("CopyBlob", Method::PUT, &dest.bucket, Some(&dest.key))
            .header("x-ms-copy-source", &url)?
            .header_opt("x-ms-source-if-match", params.if_match.as_deref().or(source_etag.as_deref()))?
            .header_opt("x-ms-tags", (!tags.is_empty()).then(|| tags_header(&tags)).as_deref())?;
        if let Some(meta) = &params.metadata {
            for (k, v) in meta {
                op = op.header(&format!("x-ms-meta-{}", k.to_ascii_lowercase()), v)?;
            }
        }
        let (mut status, mut etag, mut last_modified) = self
            .execute(&mut op, |r| async move {
                let get = |n: &str| r.headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
                Ok((get("x-ms-copy-status"), get("etag"), get("last-modified")))
            })
            .await?;
        let started = std::time::Instant::now();
        while status.as_deref() == Some("pending") {
            if started.elapsed() > COPY_POLL_LIMIT {
                return Err(Error::protocol(
                    format!("Copy Blob to {dest} still pending after {COPY_POLL_LIMIT:?}"),
                    None,
                ));
            }
            pause(COPY_POLL).await;
            let mut op = Op::object("GetBlobProperties", Method::HEAD, &dest.bucket, Some(&dest.key));
            (status, etag, last_modified) = self
                .execute(&mut op, |r| async move {
                    let get = |n: &str| r.headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
                    Ok((get("x-ms-copy-status"), get("etag"), get("last-modified")))
                })
                .await?;
        }
        match status.as_deref() {
            None | Some("success") => {}
            Some(other) => {
                return Err(Error::Service {
                    status: 500,
                    code: "CopyFailed".into(),
                    message: format!("Copy Blob to {dest} ended {other}"),
                    request_id: None,
                })
            }
        }
        Ok(CopyObjectOutput {
            etag: etag.map(|e| quoted(&e)).unwrap_or_default(),
            last_modified: last_modified.as_deref().and_then(parse_http_date),
        })
    }
}
