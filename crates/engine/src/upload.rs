//! Upload a file or a stream to one object: one PUT when small, parallel parts when
//! large, and a re-run of an interrupted file upload sends only the missing parts.
//!
//! ```text
//! file, size < part_size ─► PutObject (CRC64NVME computed, checked by the server)
//! file, larger ─► resume? ListMultipartUploads(prefix = key) ─► newest upload of this key
//!                   └─ ListParts ─► a part is kept when its size is the one we would send
//!                      and its stored CRC64NVME equals the CRC of our bytes at that offset
//!               else CreateMultipartUpload (FULL_OBJECT CRC64NVME)
//!           ─► missing parts: UploadPart streamed from the file at its offset
//!              (CRC read first, then the bytes as the socket takes them),
//!              `concurrency` in flight
//!           ─► CompleteMultipartUpload ─► the server's whole-object CRC must equal the
//!              parts' CRCs combined (crc_combine); NoSuchUpload (another Complete of
//!              the upload got there first) is success when HEAD gives our size and CRC
//! stream (stdin) ─► first part_size bytes: EOF before? one PutObject : multipart from the
//!                   stream, parts cut as they arrive (length unknown up front)
//! ```
//!
//! A stream's length is unknown, so its part size is chosen before the first byte:
//! `part_size` (8 MiB) fits 10,000 parts into 78 GiB, and a longer stream would fail at
//! part 10,001 after sending them all. `expected_size` (`ferry cp --expected-size`, as
//! the AWS CLI's) raises the part size to fit that many bytes into 10,000 parts; the
//! stream is then held to it: one byte more and the upload fails with an error naming
//! the size, and is aborted (nothing half-written, no upload left in progress). Without
//! it, the limit is 10,000 parts of `part_size`, and the error says to give the size.
//!
//! A file's parts stream from the file (ferry-store's `upload_part_file`) instead of
//! being read whole into memory: a first pass computes the part's CRC (sent as a header,
//! so it must be known before the body), then each attempt reads the range again in
//! chunks as hyper writes them. A part then holds a couple of chunks, not 8 MiB
//! ([`part_bytes_in_memory`], taken from the engine's budget), for a second read of the
//! part that the page cache normally serves. A file changed between the two reads fails
//! the part (the server checks the stated CRC: BadDigest), never completes wrong bytes.
//! Where an upload's memory goes (the chunks in flight, the blocking pool's threads and
//! their allocator heaps) and what each knob bought is in docs/lab/engine-upload-memory.md.
//!
//! An interrupted upload is left in progress (not aborted) when `resume` is on, so the
//! next run can find it; with `resume` off a failure aborts it. Kept parts are compared
//! by CRC, so a file that changed since is caught part by part, and the final combined
//! CRC check covers the whole object.

use crate::admission::{Admission, BudgetPermit, Engine};
use crate::download::ProgressFn;
use bytes::{Bytes, BytesMut};
use ferry_proto::checksum::{base64_decode, base64_encode, crc_combine, ChecksumAlgorithm};
use ferry_proto::xml::CompletedPart;
use ferry_store::{Error, MultipartUpload, ObjectRef, PartLimits, PartPayload, PutParams, PutPayload};
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use std::path::Path;
use std::sync::Arc;

/// Upload parameters.
#[derive(Clone, Debug)]
pub struct UploadParams {
    /// Part size for multipart uploads; also the single-PUT threshold.
    pub part_size: u64,
    /// Parts in flight for this object.
    pub concurrency: usize,
    /// Content type and metadata (the checksum is always CRC64NVME).
    pub put: PutParams,
    /// Reuse an in-progress upload of the same key; keep it on failure.
    pub resume: bool,
    /// Streams only: the most bytes the stream will give (`ferry cp --expected-size`).
    /// Parts are made large enough that this fits S3's 10,000 parts, and a stream that
    /// gives more fails (its upload aborted) instead of being cut short (module note).
    pub expected_size: Option<u64>,
}

impl Default for UploadParams {
    /// 8 MiB parts and 8 in flight, as ferry-store's multipart defaults.
    fn default() -> Self {
        UploadParams {
            part_size: 8 * 1024 * 1024,
            concurrency: 8,
            put: PutParams::default(),
            resume: true,
            expected_size: None,
        }
    }
}

/// What an upload did.
#[derive(Clone, Debug, Default)]
pub struct UploadOutput {
    pub size: u64,
    pub etag: Option<String>,
    /// Bytes of parts reused from an earlier run.
    pub resumed_bytes: u64,
    pub parts: u32,
}

const ALGO: ChecksumAlgorithm = ChecksumAlgorithm::Crc64Nvme;

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io { path: path.display().to_string(), error: e }
}

/// Bytes a file's part of `len` holds in memory while it is sent, taken from the
/// engine's memory budget around each part: what ferry-store's streamed UploadPart
/// holds (a chunk being read, one being written), not the part.
pub fn part_bytes_in_memory(len: u64) -> u64 {
    len.clamp(1, ferry_store::s3::multipart::FILE_PART_BYTES_IN_MEMORY)
}

/// Uploads a file (module note).
pub async fn upload_file(
    engine: &Engine,
    path: &Path,
    object: &ObjectRef,
    params: &UploadParams,
    progress: Option<ProgressFn>,
) -> Result<UploadOutput, Error> {
    let len = std::fs::metadata(path).map_err(|e| io(path, e))?.len();
    let mut put = params.put.clone();
    put.checksum = Some(ALGO);
    let limits = engine.capabilities().parts;
    if len < params.part_size.max(limits.min_part) {
        let out = engine.put(object, PutPayload::File(path.to_path_buf()), put).await?;
        if let Some(p) = &progress {
            p(len);
        }
        return Ok(UploadOutput { size: len, etag: out.etag, resumed_bytes: 0, parts: 0 });
    }
    let plan = limits.plan(len, params.part_size);
    let (part_size, nparts) = (plan.part_size, plan.count);
    // The part's CRC from the file, for comparing with a kept part.
    let part_crc = |n: u64| {
        let off = (n - 1) * part_size;
        ferry_store::s3::multipart::file_range_checksum(path, off, (len - off).min(part_size), ALGO)
    };

    // An upload resumed here can vanish under us: the killed run's own
    // CompleteMultipartUpload (or its abort) may land after our ListMultipartUploads, so
    // a part or the completion answers NoSuchUpload. The run then starts over, once,
    // with an upload of its own, unless the completion's NoSuchUpload left an object
    // that is already the file's bytes (`finish`).
    let mut resume = params.resume;
    loop {
        let resumed = resume;
        match upload_parts(engine, path, object, params, &put, resume, len, part_size, nparts, &part_crc, &progress)
            .await
        {
            Err(e) if resumed && e.is_not_found() => {
                tracing::debug!(object = %object, error = %e, "the resumed upload is gone: starting over");
                resume = false;
            }
            r => return r,
        }
    }
}

/// One attempt of a multipart file upload: an upload to continue (when `resume`) or a
/// new one, its missing parts sent, then completed.
#[allow(clippy::too_many_arguments)]
async fn upload_parts<F, Fut>(
    engine: &Engine,
    path: &Path,
    object: &ObjectRef,
    params: &UploadParams,
    put: &PutParams,
    resume: bool,
    len: u64,
    part_size: u64,
    nparts: u64,
    part_crc: &F,
    progress: &Option<ProgressFn>,
) -> Result<UploadOutput, Error>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<String, Error>>,
{
    // Find an upload to continue, and the parts of it that still hold.
    let mut kept: Vec<(CompletedPart, u64)> = Vec::new();
    let mut upload = None;
    if resume {
        if let Some(id) = newest_upload(engine, object).await? {
            let candidate = MultipartUpload {
                object: object.clone(),
                upload_id: id,
                checksum: Some(ALGO),
                full_object_checksum: true,
            };
            match engine.list_parts(&candidate).await {
                Ok(listed) => {
                    for p in listed {
                        let n = p.part_number as u64;
                        if n == 0 || n > nparts || p.size != (len - (n - 1) * part_size).min(part_size) {
                            continue;
                        }
                        let Some((_, stored)) = p.checksums.iter().find(|(a, _)| *a == ALGO) else { continue };
                        if &part_crc(n).await? == stored {
                            kept.push((
                                CompletedPart {
                                    part_number: p.part_number,
                                    etag: p.etag.clone(),
                                    checksums: vec![(ALGO, stored.clone())],
                                },
                                p.size,
                            ));
                        }
                    }
                    tracing::debug!(object = %object, upload_id = %candidate.upload_id, kept = kept.len(), "resuming multipart upload");
                    upload = Some(candidate);
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
    }
    let upload = match upload {
        Some(u) => u,
        None => engine.create_upload(object, put).await?,
    };
    let resumed_bytes: u64 = kept.iter().map(|(_, n)| n).sum();
    if let Some(p) = &progress {
        if resumed_bytes > 0 {
            p(resumed_bytes);
        }
    }
    let have: std::collections::HashSet<u32> = kept.iter().map(|(p, _)| p.part_number).collect();
    let todo: Vec<u64> = (1..=nparts).filter(|n| !have.contains(&(*n as u32))).collect();
    let sent: Result<Vec<(CompletedPart, u64)>, Error> =
        futures_util::stream::iter(todo.into_iter().map(Ok::<u64, Error>))
            .map_ok(|n| {
                let upload = &upload;
                let progress = progress.clone();
                async move {
                    // Memory budget hook (scheduler): the part streams from the file as the
                    // socket takes it (ferry-store's upload_part_file), so it holds a few
                    // chunks, not the part (module note).
                    let off = (n - 1) * part_size;
                    let size = (len - off).min(part_size);
                    let _bytes = engine.admission().bytes(part_bytes_in_memory(size)).await;
                    let part = PartPayload::File { path: path.to_path_buf(), offset: off, len: size };
                    let part = engine.upload_part(upload, n as u32, part).await?;
                    if let Some(p) = &progress {
                        p(size);
                    }
                    Ok((part, size))
                }
            })
            .try_buffer_unordered(params.concurrency.max(1))
            .try_collect()
            .await;
    let result = match sent {
        Ok(mut parts) => {
            parts.extend(kept);
            finish(engine, &upload, parts).await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(etag) => Ok(UploadOutput { size: len, etag: Some(etag), resumed_bytes, parts: nparts as u32 }),
        Err(e) => {
            if !params.resume || matches!(e, Error::Integrity { .. }) {
                let _ = engine.abort_upload(&upload).await;
            }
            Err(e)
        }
    }
}

/// Completes an upload, checking the server's whole-object CRC against the parts'.
async fn finish(
    engine: &Engine,
    upload: &MultipartUpload,
    mut parts: Vec<(CompletedPart, u64)>,
) -> Result<String, Error> {
    parts.sort_by_key(|(p, _)| p.part_number);
    let mut whole: Option<Vec<u8>> = None;
    for (p, len) in &parts {
        let raw = p.checksums.iter().find(|(a, _)| *a == ALGO).and_then(|(_, v)| base64_decode(v));
        whole = match (whole, raw) {
            (None, Some(r)) => Some(r),
            (Some(w), Some(r)) => crc_combine(ALGO, &w, &r, *len),
            _ => None,
        };
    }
    let size: u64 = parts.iter().map(|(_, len)| len).sum();
    let ours = whole.map(|w| base64_encode(&w));
    let list: Vec<CompletedPart> = parts.into_iter().map(|(p, _)| p).collect();
    let out = match engine.complete_upload(upload, &list, None).await {
        Ok(out) => out,
        // A Complete of the same upload got there first: a killed run's, which the
        // server was still finishing when this run found the upload, or an attempt of
        // ours that a retry outran. S3 answers NoSuchUpload once an upload is completed;
        // the object is then ours exactly when its size and whole-object CRC are.
        Err(e) if e.is_not_found() => {
            return match engine.head(&upload.object).await {
                Ok(info)
                    if info.size == size
                        && ours.as_ref().is_some_and(|o| info.checksums.iter().any(|(a, v)| *a == ALGO && v == o)) =>
                {
                    tracing::debug!(object = %upload.object, "the upload was completed by an earlier Complete; the object holds our bytes");
                    Ok(info.etag.unwrap_or_default())
                }
                _ => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    if let (Some(ours), Some((a, theirs))) = (ours, out.checksum.as_ref()) {
        if *a == ALGO && !theirs.contains('-') && &ours != theirs {
            return Err(Error::Integrity {
                message: format!("{}: the stored {ALGO} is {theirs}, the parts combine to {ours}", upload.object),
                request_id: None,
            });
        }
    }
    Ok(out.etag)
}

/// Uploads a stream of unknown length (stdin): one PUT if it ends within `part_size`,
/// else a multipart upload cut as the bytes arrive (module note). Not resumable: the
/// bytes of a stream cannot be read again.
pub async fn upload_stream(
    engine: &Engine,
    stream: BoxStream<'static, std::io::Result<Bytes>>,
    object: &ObjectRef,
    params: &UploadParams,
    progress: Option<ProgressFn>,
) -> Result<UploadOutput, Error> {
    let limits = engine.capabilities().parts;
    let part_size = stream_part_size(&limits, params.part_size, params.expected_size)? as usize;
    let mut stream = held_to(stream, &limits, stream_limit(part_size as u64, params.expected_size));
    // The first part is read before the upload knows whether it is one PUT, under the
    // engine's budget like every later part (the part cutter takes its own permit for
    // each part it reads, so this one is given back when the multipart upload takes over).
    let head_bytes = engine.admission().bytes(part_size as u64).await;
    let mut first = BytesMut::new();
    let mut ended = false;
    while first.len() < part_size {
        match stream.next().await {
            Some(Ok(b)) => first.extend_from_slice(&b),
            Some(Err(e)) => return Err(Error::Io { path: "standard input".into(), error: e }),
            None => {
                ended = true;
                break;
            }
        }
    }
    let mut put = params.put.clone();
    put.checksum = Some(ALGO);
    if ended {
        let len = first.len() as u64;
        let out = engine.put(object, PutPayload::Bytes(first.freeze()), put).await?;
        if let Some(p) = &progress {
            p(len);
        }
        return Ok(UploadOutput { size: len, etag: out.etag, resumed_bytes: 0, parts: 0 });
    }
    drop(head_bytes);
    let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c2 = counted.clone();
    let head = futures_util::stream::once(async move { Ok(first.freeze()) });
    let all = head.chain(stream).map(move |r| {
        if let Ok(b) = &r {
            c2.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
            if let Some(p) = &progress {
                p(b.len() as u64);
            }
        }
        r
    });
    let upload = engine.create_upload(object, &put).await?;
    let etag = match stream_parts(engine, &upload, all.boxed(), part_size, params.concurrency.max(1)).await {
        Ok(etag) => etag,
        Err(e) => {
            if let Err(abort) = engine.abort_upload(&upload).await {
                tracing::warn!(object = %object, upload_id = %upload.upload_id, error = %abort, "could not abort the failed multipart upload");
            }
            return Err(e);
        }
    };
    let size = counted.load(std::sync::atomic::Ordering::Relaxed);
    Ok(UploadOutput { size, etag: Some(etag), resumed_bytes: 0, parts: size.div_ceil(part_size as u64) as u32 })
}

/// Sends a stream as parts of `part_size`, cut as the bytes arrive, `concurrency` in
/// flight, and completes the upload with the whole object's CRC combined from the
/// parts'. Each part's bytes are admitted (memory) before they are read from the source
/// and go back once the part is sent: a slow endpoint holds the reader, not a growing
/// buffer. The caller aborts the upload if this fails.
async fn stream_parts(
    engine: &Engine,
    upload: &MultipartUpload,
    stream: BoxStream<'static, std::io::Result<Bytes>>,
    part_size: usize,
    concurrency: usize,
) -> Result<String, Error> {
    let max_parts = engine.capabilities().parts.max_parts;
    let parts = cut_parts(stream, part_size, max_parts, engine.admission().clone());
    let mut done: Vec<(CompletedPart, u64)> = parts
        .map_ok(|(n, body, bytes)| {
            let len = body.len() as u64;
            async move {
                let sent = engine.upload_part(upload, n, PartPayload::Bytes(body)).await.map(|p| (p, len));
                drop(bytes);
                sent
            }
        })
        .try_buffer_unordered(concurrency)
        .try_collect()
        .await?;
    if done.is_empty() {
        // An upload needs at least one part; an empty source uploads one empty part.
        let p = engine.upload_part(upload, 1, PartPayload::Bytes(Bytes::new())).await?;
        done.push((p, 0));
    }
    finish(engine, upload, done).await
}

/// Cuts a byte stream into numbered parts of `part_size` (the last may be smaller), each
/// with its bytes taken from `budget` before they are read.
fn cut_parts(
    stream: BoxStream<'static, std::io::Result<Bytes>>,
    part_size: usize,
    max_parts: u64,
    admission: Arc<Admission>,
) -> BoxStream<'static, Result<(u32, Bytes, BudgetPermit), Error>> {
    struct St {
        input: BoxStream<'static, std::io::Result<Bytes>>,
        buf: BytesMut,
        next: u32,
        ended: bool,
    }
    let st = St { input: stream, buf: BytesMut::new(), next: 1, ended: false };
    futures_util::stream::try_unfold(st, move |mut st| {
        let admission = admission.clone();
        async move {
            let permit = admission.bytes(part_size as u64).await;
            while !st.ended && st.buf.len() < part_size {
                match st.input.next().await {
                    Some(Ok(b)) => st.buf.extend_from_slice(&b),
                    Some(Err(e)) => return Err(Error::Io { path: "upload source".into(), error: e }),
                    None => st.ended = true,
                }
            }
            if st.buf.is_empty() {
                return Ok(None);
            }
            if st.next as u64 > max_parts {
                return Err(Error::Config(format!(
                    "the source needs more than {max_parts} parts of {part_size} bytes"
                )));
            }
            let n = st.buf.len().min(part_size);
            let part = st.buf.split_to(n).freeze();
            let number = st.next;
            st.next += 1;
            Ok(Some(((number, part, permit), st)))
        }
    })
    .boxed()
}

/// S3's largest object (5 TiB).
const MAX_OBJECT_SIZE: u64 = 5 * 1024 * 1024 * 1024 * 1024;

/// The part size for a stream: `part_size` (at least the smallest part), raised so that
/// `expected` bytes fit the most parts (module note).
fn stream_part_size(limits: &PartLimits, part_size: u64, expected: Option<u64>) -> Result<u64, Error> {
    if let Some(n) = expected.filter(|n| *n > MAX_OBJECT_SIZE) {
        return Err(Error::Config(format!(
            "--expected-size {n} is more than S3's largest object ({MAX_OBJECT_SIZE} bytes, 5 TiB)"
        )));
    }
    Ok(limits.plan_stream(part_size, expected))
}

/// What a stream may give: the stated size, else what 10,000 parts hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamLimit {
    Expected(u64),
    Parts { part_size: u64 },
}

fn stream_limit(part_size: u64, expected: Option<u64>) -> StreamLimit {
    match expected {
        Some(n) => StreamLimit::Expected(n),
        None => StreamLimit::Parts { part_size },
    }
}

/// `stream`, failing with an error that names the limit as soon as it gives more.
fn held_to(
    stream: BoxStream<'static, std::io::Result<Bytes>>,
    limits: &PartLimits,
    limit: StreamLimit,
) -> BoxStream<'static, std::io::Result<Bytes>> {
    let max_parts = limits.max_parts;
    let max = match limit {
        StreamLimit::Expected(n) => n,
        StreamLimit::Parts { part_size } => part_size.saturating_mul(max_parts),
    };
    let mut seen = 0u64;
    stream
        .map(move |r| {
            let b = r?;
            seen += b.len() as u64;
            if seen > max {
                let msg = match limit {
                    StreamLimit::Expected(n) => format!("the stream is longer than --expected-size ({n} bytes); the upload was aborted"),
                    StreamLimit::Parts { part_size } => format!(
                        "the stream is longer than {max} bytes, the most {max_parts} parts of {part_size} bytes hold; give --expected-size BYTES for larger parts"
                    ),
                };
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, msg));
            }
            Ok(b)
        })
        .boxed()
}

/// The id of the most recently started multipart upload of exactly this key.
pub async fn newest_upload(engine: &Engine, object: &ObjectRef) -> Result<Option<String>, Error> {
    let uploads = engine.list_uploads(&object.bucket, &object.key).await?;
    Ok(uploads.into_iter().filter(|u| u.key == object.key).max_by_key(|u| u.initiated).map(|u| u.upload_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S3: PartLimits = ferry_store::s3::PART_LIMITS;

    fn held_to_s3(
        s: BoxStream<'static, std::io::Result<Bytes>>,
        limit: StreamLimit,
    ) -> BoxStream<'static, std::io::Result<Bytes>> {
        held_to(s, &S3, limit)
    }

    #[tokio::test]
    async fn parts_cover_the_source_exactly() {
        let data: Vec<u8> = (0..(2 * 1024 * 1024 + 7)).map(|i| (i % 253) as u8).collect();
        let pieces: Vec<std::io::Result<Bytes>> = data.chunks(100_000).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        // A budget larger than the whole source: collecting every part holds all permits.
        let e = crate::Engine::new(
            ferry_store::S3Client::builder("http://127.0.0.1:9")
                .credentials(ferry_store::CredentialsSource::Anonymous)
                .build()
                .unwrap(),
        )
        .with_memory_budget(16 << 20);
        let cut: Vec<_> =
            cut_parts(futures_util::stream::iter(pieces).boxed(), 1024 * 1024, 10_000, e.admission().clone())
                .try_collect()
                .await
                .unwrap();
        let parts: Vec<(u32, Bytes)> = cut.into_iter().map(|(n, b, _permit)| (n, b)).collect();
        assert_eq!(
            parts.iter().map(|(n, b)| (*n, b.len())).collect::<Vec<_>>(),
            vec![(1, 1 << 20), (2, 1 << 20), (3, 7)]
        );
        assert_eq!(parts.iter().flat_map(|(_, b)| b.to_vec()).collect::<Vec<_>>(), data);
    }

    #[test]
    fn part_size_fits_ten_thousand_parts() {
        assert_eq!(S3.plan(100 << 20, 8 << 20).part_size, 8 << 20);
        let huge = 200u64 << 30;
        assert!(huge.div_ceil(S3.plan(huge, 8 << 20).part_size) <= 10_000);
        assert_eq!(S3.plan(1, 1).part_size, S3.min_part);
    }

    #[test]
    fn stream_parts_fit_the_expected_size() {
        let mib = 1u64 << 20;
        assert_eq!(stream_part_size(&S3, 8 * mib, None).unwrap(), 8 * mib);
        assert_eq!(stream_part_size(&S3, mib, None).unwrap(), 5 * mib);
        assert_eq!(stream_part_size(&S3, 8 * mib, Some(10 * mib)).unwrap(), 8 * mib);
        for expected in [80u64 << 30, 81 << 30, 1 << 40, 5 << 40, (5 << 40) - 1] {
            let ps = stream_part_size(&S3, 8 * mib, Some(expected)).unwrap();
            assert!(expected.div_ceil(ps) <= 10_000, "{expected}: {ps}");
            assert!(ps >= 8 * mib);
        }
        assert!(stream_part_size(&S3, 8 * mib, Some((5 << 40) + 1)).is_err());
    }

    fn pieces(n: usize, each: usize) -> BoxStream<'static, std::io::Result<Bytes>> {
        futures_util::stream::iter((0..n).map(move |_| Ok(Bytes::from(vec![7u8; each])))).boxed()
    }

    #[tokio::test]
    async fn a_stream_is_held_to_its_limit() {
        let all: Vec<Bytes> = held_to_s3(pieces(4, 10), StreamLimit::Expected(40)).try_collect().await.unwrap();
        assert_eq!(all.iter().map(Bytes::len).sum::<usize>(), 40);
        let err = held_to_s3(pieces(4, 10), StreamLimit::Expected(39)).try_collect::<Vec<Bytes>>().await.unwrap_err();
        assert!(err.to_string().contains("--expected-size (39 bytes)"), "{err}");
        let err = held_to_s3(pieces(3, 6 << 20), StreamLimit::Parts { part_size: 1 })
            .try_collect::<Vec<Bytes>>()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("give --expected-size"), "{err}");
    }
}
