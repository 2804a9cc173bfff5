//! Server-side copy of one object, of any size: CopyObject up to a threshold, parallel
//! UploadPartCopy above it (CopyObject stops at 5 GiB).
//!
//! ```text
//! size known and <= multipart_threshold ─► CopyObject (one request, no HEAD)
//! else HEAD source ─► size, ETag, content type, metadata, stored full-object CRC
//!   size <= threshold ─► CopyObject (x-amz-copy-source-if-match: that ETag)
//!   larger ─► CreateMultipartUpload (the source's CRC algorithm, FULL_OBJECT; its
//!             content type and metadata, which a multipart copy does not carry over)
//!          ─► ranges of part_size (raised to fit 10,000 parts) ─► UploadPartCopy,
//!             `concurrency` in flight, each with x-amz-copy-source-if-match
//!          ─► CompleteMultipartUpload stating the source's CRC when it has one, else
//!             the parts' CRCs combined: the server checks the assembled copy against it
//!          ─► any failure ─► AbortMultipartUpload (tried again a few times), error out
//!          ─► the first part refused as InvalidArgument (MinIO will not copy into a
//!             checksummed upload) ─► abort, once more without a checksum
//! ```
//!
//! The threshold follows the AWS CLI, which copies in parts above its
//! `multipart_threshold` (8 MiB) with parts of its `multipart_chunksize` (8 MiB): parts
//! copy in parallel inside the service, and one path serves every large object, so the
//! 5 GiB limit is not a cliff. The part size is chosen like an upload's (engine
//! upload.rs): the store's `PartLimits::plan` (S3: `part_size` raised to fit 10,000
//! parts, at least 5 MiB).
//!
//! Nothing is left half-written: the copy appears under its name only at Complete, and
//! every failure after Create aborts the upload. The If-Match on each part makes a copy
//! of a source that is overwritten meanwhile fail (412) instead of mixing two versions.
//! A copy cancelled from outside (the process killed) leaves its upload in progress;
//! S3 lifecycle rules (AbortIncompleteMultipartUpload) or `ferry` re-runs clean those.

use crate::admission::Engine;
use crate::download::ProgressFn;
use ferry_proto::checksum::ChecksumAlgorithm;
use ferry_store::{
    CompletedPart, CopyParams as CopyObjectParams, CopySource, Error, MultipartUpload, ObjectInfo, ObjectRef,
    PartLimits, PutParams,
};
use futures_util::stream::{StreamExt, TryStreamExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How [`copy_object`] copies.
#[derive(Clone, Debug)]
pub struct CopyParams {
    /// Objects larger than this are copied in parts; at most the store's
    /// [`ferry_store::Capabilities::max_copy`] (S3: CopyObject's 5 GiB).
    pub multipart_threshold: u64,
    /// Part size, raised when needed to fit 10,000 parts.
    pub part_size: u64,
    /// Parts copied at once.
    pub concurrency: usize,
}

impl Default for CopyParams {
    /// The AWS CLI's 8 MiB threshold and parts; 8 parts in flight as uploads have.
    fn default() -> Self {
        CopyParams { multipart_threshold: 8 * 1024 * 1024, part_size: 8 * 1024 * 1024, concurrency: 8 }
    }
}

/// What a copy did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyOutput {
    pub size: u64,
    pub etag: String,
    /// 0 for a CopyObject.
    pub parts: u32,
    /// The whole-object checksum the server confirmed at Complete, when one was stated.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
}

/// Times AbortMultipartUpload is tried (each try with the client's own retries).
const ABORT_TRIES: usize = 3;

/// The inclusive byte ranges of the parts of an object of `len` bytes under `limits`.
pub fn part_ranges(limits: &PartLimits, len: u64, part_size: u64) -> Vec<(u64, u64)> {
    let plan = limits.plan(len, part_size);
    PartLimits::spans(plan, len).filter(|(_, n)| *n > 0).map(|(at, n)| (at, at + n - 1)).collect()
}

/// The source's stored full-object CRC, strongest first (composite `-N` values do not
/// describe the bytes of a copy cut differently).
fn stored_crc(info: &ObjectInfo) -> Option<(ChecksumAlgorithm, String)> {
    [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32]
        .into_iter()
        .find_map(|a| info.checksums.iter().find(|(b, v)| *b == a && !v.contains('-')).cloned())
}

/// Copies `src` to `dst` on the server (module note). `size` from a listing saves the
/// HEAD of an object below the threshold.
pub async fn copy_object(
    engine: &Engine,
    src: &ObjectRef,
    dst: &ObjectRef,
    size: Option<u64>,
    params: &CopyParams,
    progress: Option<ProgressFn>,
) -> Result<CopyOutput, Error> {
    let threshold = params.multipart_threshold.min(engine.capabilities().max_copy);
    let whole = |n: u64, out: ferry_store::CopyObjectOutput| {
        if let Some(p) = &progress {
            p(n);
        }
        CopyOutput { size: n, etag: out.etag, parts: 0, checksum: None }
    };
    if let Some(n) = size.filter(|n| *n <= threshold) {
        let out = engine.copy(src, dst, CopyObjectParams::default()).await?;
        return Ok(whole(n, out));
    }
    let info = engine.head(src).await?;
    if info.size <= threshold {
        let out = engine.copy(src, dst, CopyObjectParams { if_match: info.etag.clone(), ..Default::default() }).await?;
        return Ok(whole(info.size, out));
    }
    if engine.part_copy().is_none() {
        return Err(Error::Config(format!(
            "{} copies objects of at most {} bytes on the server; {src} has {}",
            engine.provider().name(),
            threshold,
            info.size
        )));
    }
    copy_in_parts(engine, src, dst, &info, params, progress).await
}

async fn copy_in_parts(
    engine: &Engine,
    src: &ObjectRef,
    dst: &ObjectRef,
    info: &ObjectInfo,
    params: &CopyParams,
    progress: Option<ProgressFn>,
) -> Result<CopyOutput, Error> {
    let source_crc = stored_crc(info);
    let algo = source_crc.as_ref().map(|(a, _)| *a).unwrap_or(ChecksumAlgorithm::Crc64Nvme);
    let checked =
        attempt(engine, src, dst, info, Some((algo, source_crc.map(|(_, v)| v))), params, progress.clone()).await;
    match checked {
        Err((e, 0)) if refuses_checksummed_copy(&e) => {
            tracing::info!(object = %dst, error = %e, "the server refused a part copy into a checksummed upload: copying without a checksum");
            attempt(engine, src, dst, info, None, params, progress).await.map_err(|(e, _)| e)
        }
        r => r.map_err(|(e, _)| e),
    }
}

/// MinIO answers 400 InvalidArgument ("checksum missing") to every UploadPartCopy into an
/// upload created with a checksum algorithm (AWS computes the part's checksum itself).
fn refuses_checksummed_copy(e: &Error) -> bool {
    matches!(e, Error::Service { status: 400, code, .. } if code == "InvalidArgument")
}

/// One multipart copy: `checksum` is the upload's algorithm and the whole object's value
/// when known. On failure the upload is aborted; the error comes with the bytes of the parts done.
async fn attempt(
    engine: &Engine,
    src: &ObjectRef,
    dst: &ObjectRef,
    info: &ObjectInfo,
    checksum: Option<(ChecksumAlgorithm, Option<String>)>,
    params: &CopyParams,
    progress: Option<ProgressFn>,
) -> Result<CopyOutput, (Error, u64)> {
    let put = PutParams {
        content_type: info.content_type.clone(),
        metadata: info.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        checksum: checksum.as_ref().map(|(a, _)| *a),
        ..Default::default()
    };
    let upload = engine.create_upload(dst, &put).await.map_err(|e| (e, 0))?;
    // Bytes of the parts copied, whoever else watches the progress.
    let done = Arc::new(AtomicU64::new(0));
    let d2 = done.clone();
    let counted: ProgressFn = Arc::new(move |n| {
        d2.fetch_add(n, Ordering::Relaxed);
        if let Some(p) = &progress {
            p(n);
        }
    });
    let result = copy_parts(engine, &upload, src, info, checksum.and_then(|(_, v)| v), params, Some(counted)).await;
    match result {
        Ok(out) => Ok(out),
        Err(e) => {
            abort(engine, &upload).await;
            Err((e, done.load(Ordering::Relaxed)))
        }
    }
}

async fn copy_parts(
    engine: &Engine,
    upload: &MultipartUpload,
    src: &ObjectRef,
    info: &ObjectInfo,
    source_crc: Option<String>,
    params: &CopyParams,
    progress: Option<ProgressFn>,
) -> Result<CopyOutput, Error> {
    let ranges = part_ranges(&engine.capabilities().parts, info.size, params.part_size);
    let part_copy =
        engine.part_copy().ok_or_else(|| Error::Config("this store has no server-side part copy".into()))?;
    let mut done: Vec<(CompletedPart, u64)> = futures_util::stream::iter(ranges.into_iter().enumerate())
        .map(|(i, (first, last))| {
            let source = CopySource { object: src.clone(), range: Some((first, last)), if_match: info.etag.clone() };
            let progress = progress.clone();
            async move {
                let part = part_copy.upload_part_copy(upload, i as u32 + 1, &source).await?;
                let len = last - first + 1;
                if let Some(p) = &progress {
                    p(len);
                }
                Ok::<_, Error>((part, len))
            }
        })
        .buffer_unordered(params.concurrency.max(1))
        .try_collect()
        .await?;
    done.sort_by_key(|(p, _)| p.part_number);
    let stated = match source_crc {
        Some(v) => Some(v),
        None => upload.checksum.and_then(|a| ferry_store::s3::multipart::combine_part_crcs(a, &done)),
    };
    let parts: Vec<CompletedPart> = done.into_iter().map(|(p, _)| p).collect();
    let n = parts.len() as u32;
    let out = engine.complete_upload(upload, &parts, stated).await;
    match out {
        Ok(out) => Ok(CopyOutput { size: info.size, etag: out.etag, parts: n, checksum: out.checksum }),
        Err(e @ Error::Integrity { .. }) => {
            // Completed, but not with the source's checksum: no wrong copy stays behind.
            if let Err(d) = engine.delete(&upload.object).await {
                tracing::warn!(object = %upload.object, error = %d, "could not remove a copy whose checksum differs from its source");
            }
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// Aborts a failed copy's upload; an upload already gone counts as aborted.
async fn abort(engine: &Engine, upload: &MultipartUpload) {
    for attempt in 1..=ABORT_TRIES {
        match engine.abort_upload(upload).await {
            Ok(()) | Err(Error::NotFound { .. }) => return,
            Err(e) if attempt == ABORT_TRIES => {
                tracing::warn!(object = %upload.object, upload_id = %upload.upload_id, error = %e, "could not abort the failed multipart copy")
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_object_within_s3_limits() {
        let limits = ferry_store::s3::PART_LIMITS;
        for (len, asked) in
            [(6 << 30, 8 << 20), (5 << 40, 8 << 20), (8 << 20 | 1, 8 << 20), (10 << 20, 1 << 20), (3 << 30, 6 << 30)]
        {
            let size = limits.plan(len, asked).part_size;
            let r = part_ranges(&limits, len, asked);
            assert!(r.len() as u64 <= limits.max_parts, "{len}: {} parts", r.len());
            assert!((limits.min_part..=limits.max_part).contains(&size));
            assert_eq!(r[0].0, 0);
            assert_eq!(r.last().unwrap().1, len - 1);
            assert!(r.windows(2).all(|w| w[1].0 == w[0].1 + 1), "contiguous");
            assert!(r.iter().all(|(a, b)| b - a < size));
        }
        let tiny = PartLimits { min_part: 1, max_part: 100, max_parts: 100 };
        assert_eq!(part_ranges(&tiny, 12, 5), vec![(0, 4), (5, 9), (10, 11)]);
    }
}
