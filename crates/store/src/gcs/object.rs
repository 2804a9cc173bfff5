//! Object calls of the JSON API: metadata (head), media GET, uploads of whole objects,
//! delete, batch delete, and `rewriteTo` (copy).
//!
//! | ferry | JSON API | notes |
//! |---|---|---|
//! | head | `GET /storage/v1/b/{b}/o/{o}` | the object resource; etag = generation |
//! | get | `GET ...?alt=media`, `Range`, `Accept-Encoding: gzip` | checked body (body.rs) |
//! | put (bytes, file, short stream) | `POST /upload/...?uploadType=multipart` | metadata + media in one multipart/related body, CRC32C stated |
//! | put (long stream) | `uploadType=resumable`, chunks of [`RESUMABLE_CHUNK`] | CRC32C stated on the last chunk; a chunk kept in part, or whose attempt failed, goes on from what the session says it holds |
//! | delete | `DELETE /storage/v1/b/{b}/o/{o}` | 404 counts as deleted |
//! | delete_batch | `POST /batch/storage/v1` multipart/mixed, 100 per batch | per-key answers |
//! | copy | `POST .../rewriteTo/b/{b}/o/{o}` looped on `rewriteToken` | any size |
//!
//! Versions: ferry's ETag for a GCS object is its generation, a decimal number that
//! changes with every write. `if_match` becomes `ifGenerationMatch` (and the answer's
//! `x-goog-generation` is checked too, so a server that ignores the condition still
//! cannot hand over another generation), `if_none_match` becomes
//! `ifGenerationNotMatch`, `if_none_match_star` on a put becomes `ifGenerationMatch=0`.
//!
//! Stored-gzip objects: GCS decompresses `Content-Encoding: gzip` objects on download
//! unless the request accepts gzip, and then ignores `Range` and serves bytes whose
//! CRC32C is not the stored one. Every GET sends `Accept-Encoding: gzip`, so what comes
//! back is the stored bytes, ranges hold, and the stored CRC32C checks them.

use crate::checked::CheckedBody;
use crate::error::Error;
use crate::gcs::body::{full_object, GcsReopen};
use crate::gcs::client::{enc, gs, GcsClient};
use crate::gcs::error::request_id;
use crate::request::{Op, OpBody};
use crate::types::*;
use bytes::{Bytes, BytesMut};
use ferry_proto::checksum::{base64_decode, base64_encode, ChecksumAlgorithm, Checksummer};
use ferry_proto::range::parse_content_range;
use futures_util::stream::{BoxStream, StreamExt};
use http::{HeaderMap, Method};
use md5::{Digest, Md5};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

/// What a resumable session answers to a chunk or a status query.
enum ChunkAnswer {
    /// 308: the session holds this many bytes (from `Range: bytes=0-N`; none without one).
    Held(u64),
    /// 200/201: the object was made; its resource.
    Done(serde_json::Value),
}

async fn chunk_answer(r: ferry_wire::Response) -> Result<ChunkAnswer, Error> {
    if r.status.as_u16() == 308 {
        let held = r
            .headers
            .get("range")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().strip_prefix("bytes=")?.split_once('-')?.1.parse::<u64>().ok())
            .map_or(0, |n| n + 1);
        return Ok(ChunkAnswer::Held(held));
    }
    Ok(ChunkAnswer::Done(GcsClient::read_json(r).await.unwrap_or(serde_json::Value::Null)))
}

/// One key's delete: done, or its error code and message.
pub(crate) type KeyResult = Result<(), (String, String)>;

/// Keys per batch request: the JSON API's limit on calls in one batch.
pub const BATCH_MAX: usize = 100;

/// Size of a resumable upload's chunks: a multiple of 256 KiB, as the JSON API requires
/// of every chunk but the last. Google's Go client sends 16 MiB chunks by default and
/// the Python one 100 MiB; 8 MiB (ferry's default part size) bounds what one stream holds
/// in memory while keeping the requests per GiB at 128.
pub const RESUMABLE_CHUNK: usize = 8 << 20;

/// Streams up to this long are sent in one multipart request, held in memory.
const SIMPLE_STREAM_MAX: u64 = RESUMABLE_CHUNK as u64;

/// The multipart/related boundary: not in any JSON we write, and the media part's length
/// is fixed by Content-Length, so bytes inside it never end it early.
const BOUNDARY: &str = "ferry-gcs-boundary-5f0c3ad1e27b";

/// An RFC 3339 date of the JSON API.
pub(crate) fn parse_time(s: &str) -> Option<SystemTime> {
    ferry_proto::encoding::parse_iso8601(s).or_else(|| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok().map(SystemTime::from)
    })
}

/// A JSON number the API sends as a string (`"size": "123"`).
pub(crate) fn num(v: &serde_json::Value) -> Option<u64> {
    v.as_str().and_then(|s| s.parse().ok()).or_else(|| v.as_u64())
}

/// What an object resource says, in the neutral model.
pub(crate) fn info_from_json(v: &serde_json::Value) -> ObjectInfo {
    let mut metadata = BTreeMap::new();
    if let Some(m) = v["metadata"].as_object() {
        for (k, val) in m {
            if let Some(s) = val.as_str() {
                metadata.insert(k.clone(), s.to_owned());
            }
        }
    }
    let mut checksums = Vec::new();
    if let Some(c) = v["crc32c"].as_str() {
        checksums.push((ChecksumAlgorithm::Crc32c, c.to_owned()));
    }
    ObjectInfo {
        size: num(&v["size"]).unwrap_or(0),
        etag: generation(v),
        last_modified: v["updated"].as_str().and_then(parse_time),
        content_type: v["contentType"].as_str().map(str::to_owned),
        metadata,
        checksums,
    }
}

/// The generation of an object resource, as ferry's version tag.
pub(crate) fn generation(v: &serde_json::Value) -> Option<String> {
    num(&v["generation"]).map(|g| g.to_string())
}

/// A listing entry from an object resource.
pub(crate) fn entry_from_json(v: &serde_json::Value) -> ObjectEntry {
    ObjectEntry {
        key: v["name"].as_str().unwrap_or_default().to_owned(),
        last_modified: v["updated"].as_str().and_then(parse_time).unwrap_or(SystemTime::UNIX_EPOCH),
        etag: generation(v).unwrap_or_default(),
        size: num(&v["size"]).unwrap_or(0),
        storage_class: v["storageClass"].as_str().unwrap_or("STANDARD").to_owned(),
        checksum_algorithm: v["crc32c"].as_str().map(|_| ChecksumAlgorithm::Crc32c),
    }
}

/// What a media GET's headers say (x-goog-*), for the body and its caller.
fn info_from_headers(headers: &HeaderMap) -> ObjectInfo {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let size = match get("content-range").as_deref().and_then(parse_content_range) {
        Some((_, _, Some(total))) => total,
        _ => get("x-goog-stored-content-length")
            .or_else(|| get("content-length"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
    };
    let mut metadata = BTreeMap::new();
    for (name, value) in headers {
        if let (Some(m), Ok(v)) = (name.as_str().strip_prefix("x-goog-meta-"), value.to_str()) {
            metadata.insert(m.to_owned(), v.to_owned());
        }
    }
    let checksums = goog_hash(headers, "crc32c").map(|c| vec![(ChecksumAlgorithm::Crc32c, c)]).unwrap_or_default();
    ObjectInfo {
        size,
        etag: get("x-goog-generation"),
        last_modified: get("last-modified").as_deref().and_then(ferry_proto::encoding::parse_http_date),
        content_type: get("content-type"),
        metadata,
        checksums,
    }
}

/// One value of `x-goog-hash: crc32c=...,md5=...` (also sent as two headers).
pub(crate) fn goog_hash(headers: &HeaderMap, algo: &str) -> Option<String> {
    headers.get_all("x-goog-hash").iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        (k.eq_ignore_ascii_case(algo) && !v.is_empty()).then(|| v.to_owned())
    })
}

/// A generation number from ferry's version tag (`"123"` or `123`).
pub(crate) fn parse_generation(tag: &str) -> Option<u64> {
    tag.trim().trim_start_matches("W/").trim_matches('"').parse().ok()
}

fn precondition(status: u16, message: String, rid: Option<String>) -> Error {
    let code = if status == 304 { "notModified" } else { "conditionNotMet" };
    Error::Precondition { status, code: code.into(), message, request_id: rid }
}

/// The metadata part of an upload (name, content type, user metadata, hashes).
fn upload_resource(
    key: &str,
    content_type: Option<&str>,
    metadata: &[(String, String)],
    crc32c: Option<&str>,
    md5: Option<&str>,
) -> serde_json::Value {
    let mut v = serde_json::json!({ "name": key });
    if let Some(ct) = content_type {
        v["contentType"] = ct.into();
    }
    if !metadata.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> =
            metadata.iter().map(|(k, val)| (k.to_ascii_lowercase(), val.clone().into())).collect();
        v["metadata"] = m.into();
    }
    if let Some(c) = crc32c {
        v["crc32c"] = c.into();
    }
    if let Some(m) = md5 {
        v["md5Hash"] = m.into();
    }
    v
}

/// The multipart/related framing around the media bytes.
fn framing(resource: &serde_json::Value, content_type: Option<&str>) -> (Bytes, Bytes) {
    let head = format!(
        "--{BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{resource}\r\n--{BOUNDARY}\r\nContent-Type: {}\r\n\r\n",
        content_type.unwrap_or("application/octet-stream")
    );
    (Bytes::from(head), Bytes::from(format!("\r\n--{BOUNDARY}--\r\n")))
}

/// What a media upload sends: bytes in memory or a range of a file.
pub(crate) enum Media {
    Bytes(Bytes),
    File { path: PathBuf, offset: u64, len: u64 },
}

impl GcsClient {
    /// The object resource.
    pub async fn head_object(&self, object: &ObjectRef) -> Result<ObjectInfo, Error> {
        let v = self.object_resource(object).await?;
        Ok(info_from_json(&v))
    }

    pub(crate) async fn object_resource(&self, object: &ObjectRef) -> Result<serde_json::Value, Error> {
        let mut op = Op::path("objects.get", Method::GET, Self::object_path(&object.bucket, &object.key));
        self.execute(&mut op, |r| async move { Self::read_json(r).await }).await
    }

    /// A media GET: the body streams, checked, resumed if cut (body.rs).
    pub async fn get_object(&self, object: &ObjectRef, params: GetParams) -> Result<GetObjectOutput, Error> {
        let pinned = match params.if_match.as_deref() {
            Some(tag) => match parse_generation(tag) {
                Some(g) => Some(g),
                None => {
                    return Err(precondition(412, format!("{tag:?} is not a generation of {}", gs(object)), None));
                }
            },
            None => None,
        };
        let not = params.if_none_match.as_deref().and_then(parse_generation);
        let mut op = Op::path("objects.get media", Method::GET, Self::object_path(&object.bucket, &object.key))
            .query("alt", "media")
            .query_opt("ifGenerationMatch", pinned.map(|g| g.to_string()))
            .query_opt("ifGenerationNotMatch", not.map(|g| g.to_string()))
            .header("accept-encoding", "gzip")?;
        op = op.range(params.range, params.size_hint)?;
        let resp = self.execute(&mut op, |r| async move { Ok(r) }).await?;
        let rid = request_id(&resp.headers);
        let meta = info_from_headers(&resp.headers);
        let got = meta.etag.as_deref().and_then(parse_generation);
        if let (Some(want), Some(got)) = (pinned, got) {
            if want != got {
                return Err(precondition(412, format!("{} is at generation {got}, not {want}", gs(object)), rid));
            }
        }
        if let (Some(not), Some(got)) = (not, got) {
            if not == got {
                return Err(precondition(304, format!("{} is still generation {got}", gs(object)), rid));
            }
        }
        if let Some(t) = params.if_unmodified_since {
            if meta.last_modified.is_some_and(|m| m > t) {
                return Err(precondition(412, format!("{} changed since {t:?}", gs(object)), rid));
            }
        }
        if let Some(t) = params.if_modified_since {
            if meta.last_modified.is_some_and(|m| m <= t) {
                return Err(precondition(304, format!("{} unchanged since {t:?}", gs(object)), rid));
            }
        }
        CheckedBody::output(GcsReopen { client: self.clone(), object: object.clone() }, resp, meta, full_object)
    }

    /// An upload of a whole object whose bytes are in memory or in a file.
    pub(crate) async fn upload_media(
        &self,
        object: &ObjectRef,
        media: Media,
        params: &PutParams,
        crc32c: Option<String>,
    ) -> Result<serde_json::Value, Error> {
        let (crc, md5) = match &media {
            Media::Bytes(_) | Media::File { .. } if crc32c.is_some() && !params.content_md5 => {
                (crc32c.unwrap_or_default(), None)
            }
            Media::Bytes(b) => {
                let crc = base64_encode(&ChecksumAlgorithm::Crc32c.digest(b));
                (crc, params.content_md5.then(|| base64_encode(&Md5::digest(b))))
            }
            Media::File { path, offset, len } => {
                let mut hasher = Checksummer::new(ChecksumAlgorithm::Crc32c);
                let mut md5 = params.content_md5.then(Md5::new);
                let mut s = Self::file_stream(path.clone(), *offset, *len).await?;
                while let Some(chunk) = s.next().await {
                    let chunk = chunk.map_err(|e| Error::Io { path: path.display().to_string(), error: e })?;
                    hasher.update(&chunk);
                    if let Some(m) = &mut md5 {
                        m.update(&chunk);
                    }
                }
                (hasher.finish_base64(), md5.map(|m| base64_encode(&m.finalize())))
            }
        };
        let ct = params.content_type.as_deref();
        let resource = upload_resource(&object.key, ct, &params.metadata, Some(&crc), md5.as_deref());
        let (head, tail) = framing(&resource, ct);
        let body = match media {
            Media::Bytes(b) => OpBody::Chunks(vec![head, b, tail]),
            Media::File { path, offset, len } => OpBody::Framed { head, path, offset, len, tail },
        };
        let mut op =
            Op::path("objects.insert", Method::POST, format!("/upload/storage/v1/b/{}/o", enc(&object.bucket)))
                .query("uploadType", "multipart")
                .query_opt("ifGenerationMatch", params.if_none_match_star.then_some("0"))
                .header("content-type", &format!("multipart/related; boundary={BOUNDARY}"))?
                .body(body);
        // Sending the same bytes under the same name again leaves the same content.
        op.idempotent = true;
        let v = self.execute(&mut op, |r| async move { Self::read_json(r).await }).await?;
        check_stored_crc(object, &v, &crc)?;
        Ok(v)
    }

    /// A whole object from bytes, a file or a stream (the module's table).
    pub async fn put_object(
        &self,
        object: &ObjectRef,
        payload: crate::PutPayload,
        params: PutParams,
    ) -> Result<PutObjectOutput, Error> {
        let v = match payload {
            crate::PutPayload::Bytes(b) => self.upload_media(object, Media::Bytes(b), &params, None).await?,
            crate::PutPayload::File(path) => {
                let len = tokio::fs::metadata(&path)
                    .await
                    .map_err(|e| Error::Io { path: path.display().to_string(), error: e })?
                    .len();
                self.upload_media(object, Media::File { path, offset: 0, len }, &params, None).await?
            }
            crate::PutPayload::Stream { len, stream } if len <= SIMPLE_STREAM_MAX => {
                let b = collect_exact(stream, len).await?;
                self.upload_media(object, Media::Bytes(b), &params, None).await?
            }
            crate::PutPayload::Stream { len, stream } => self.upload_resumable(object, len, stream, &params).await?,
        };
        Ok(PutObjectOutput {
            etag: generation(&v),
            checksum: v["crc32c"].as_str().map(|c| (ChecksumAlgorithm::Crc32c, c.to_owned())),
        })
    }

    /// A resumable upload of a stream of exactly `len` bytes, in chunks of
    /// [`RESUMABLE_CHUNK`]; the CRC32C of the whole is stated with the last chunk
    /// (`X-Goog-Hash`) and checked against what was stored. On any failure the session
    /// is cancelled, so nothing becomes visible.
    pub(crate) async fn upload_resumable(
        &self,
        object: &ObjectRef,
        len: u64,
        mut stream: BoxStream<'static, std::io::Result<Bytes>>,
        params: &PutParams,
    ) -> Result<serde_json::Value, Error> {
        let ct = params.content_type.as_deref();
        let resource = upload_resource(&object.key, ct, &params.metadata, None, None);
        let mut op = Op::path(
            "objects.insert resumable",
            Method::POST,
            format!("/upload/storage/v1/b/{}/o", enc(&object.bucket)),
        )
        .query("uploadType", "resumable")
        .query("name", object.key.clone())
        .query_opt("ifGenerationMatch", params.if_none_match_star.then_some("0"))
        .header("x-upload-content-length", &len.to_string())?
        .json(&resource)?;
        if let Some(ct) = ct {
            op = op.header("x-upload-content-type", ct)?;
        }
        op.idempotent = true;
        let session = self
            .execute(&mut op, |r| async move {
                let loc = r.headers.get("location").and_then(|v| v.to_str().ok()).map(str::to_owned);
                loc.ok_or_else(|| {
                    Error::protocol("a resumable upload was started without a Location", request_id(&r.headers))
                })
            })
            .await?;
        let path = match session.split_once("://") {
            Some((_, rest)) => rest.find('/').map(|i| rest[i..].to_owned()).unwrap_or_else(|| "/".into()),
            None => session.clone(),
        };
        let result = self.send_chunks(&path, len, &mut stream, ct).await;
        match result {
            Ok((v, crc)) => {
                check_stored_crc(object, &v, &crc)?;
                Ok(v)
            }
            Err(e) => {
                let mut cancel = Op::path("resumable cancel", Method::DELETE, path);
                let _ = self.execute(&mut cancel, |_| async { Ok(()) }).await;
                Err(e)
            }
        }
    }

    async fn send_chunks(
        &self,
        path: &str,
        len: u64,
        stream: &mut BoxStream<'static, std::io::Result<Bytes>>,
        content_type: Option<&str>,
    ) -> Result<(serde_json::Value, String), Error> {
        let mut hasher = Checksummer::new(ChecksumAlgorithm::Crc32c);
        let mut sent = 0u64;
        let mut carry = BytesMut::new();
        loop {
            let want = ((len - sent) as usize).min(RESUMABLE_CHUNK);
            while carry.len() < want {
                match stream.next().await {
                    Some(Ok(b)) => carry.extend_from_slice(&b),
                    Some(Err(e)) => return Err(Error::Io { path: "(stream)".into(), error: e }),
                    None => {
                        return Err(Error::Io {
                            path: "(stream)".into(),
                            error: std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                format!("stream ended after {} of the {len} bytes declared", sent + carry.len() as u64),
                            ),
                        })
                    }
                }
            }
            let chunk = carry.split_to(want).freeze();
            hasher.update(&chunk);
            let last = sent + chunk.len() as u64 == len;
            if last {
                // Anything left over, or still to come, is more than was declared.
                let extra = !carry.is_empty() || matches!(stream.next().await, Some(Ok(b)) if !b.is_empty());
                if extra {
                    return Err(Error::Io {
                        path: "(stream)".into(),
                        error: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("stream is longer than the {len} bytes declared"),
                        ),
                    });
                }
            }
            let crc = last
                .then(|| std::mem::replace(&mut hasher, Checksummer::new(ChecksumAlgorithm::Crc32c)).finish_base64());
            if let Some(v) = self.send_chunk(path, len, sent, &chunk, content_type, crc.as_deref()).await? {
                return Ok((v, crc.unwrap_or_default()));
            }
            if last {
                return Err(Error::protocol("the last chunk of a resumable upload was answered 308", None));
            }
            sent += chunk.len() as u64;
        }
    }

    /// Sends one chunk, which starts at `start`, until the session holds all of it: a
    /// 308 whose `Range` stops short means the server kept only part of the chunk, and
    /// a failed attempt leaves unknown how much it kept, so the session is asked
    /// (`Content-Range: bytes */TOTAL`, TOTAL being the declared length, answered 308 with `Range: bytes=0-N`, or 200/201
    /// once the object exists) and the rest is sent from there, never the whole chunk
    /// again from its own start. `Some(resource)` when the object was made.
    async fn send_chunk(
        &self,
        path: &str,
        len: u64,
        start: u64,
        chunk: &Bytes,
        content_type: Option<&str>,
        crc: Option<&str>,
    ) -> Result<Option<serde_json::Value>, Error> {
        let end = start + chunk.len() as u64;
        let total = if crc.is_some() { len.to_string() } else { "*".to_owned() };
        let mut from = start;
        let mut failures = 0u32;
        loop {
            let piece = chunk.slice((from - start) as usize..);
            let range = format!("bytes {from}-{}/{total}", end - 1);
            let mut op = Op::path("resumable chunk", Method::PUT, path.to_owned())
                .header("content-range", &range)?
                .body(OpBody::Bytes(piece));
            if let Some(ct) = content_type {
                op = op.header("content-type", ct)?;
            }
            if let Some(c) = crc {
                op = op.header("x-goog-hash", &format!("crc32c={c}"))?;
            }
            // Not repeated as it is by `execute` (that would resend from `from` whatever
            // the server kept); failures come back here to ask the session first.
            op.idempotent = false;
            op.accept_308 = true;
            let answer = match self.execute(&mut op, chunk_answer).await {
                Ok(a) => a,
                Err(e) => {
                    failures += 1;
                    let class = e.retry_class(true).filter(|_| failures < self.inner.core.retry.max_attempts);
                    let Some(class) = class.filter(|c| self.inner.core.take_retry(*c)) else { return Err(e) };
                    tokio::time::sleep(self.inner.core.retry.backoff(failures - 1, class)).await;
                    self.session_status(path, len).await?
                }
            };
            match answer {
                ChunkAnswer::Held(held) => {
                    if held < start || held > end {
                        return Err(Error::protocol(
                            format!(
                                "the resumable session holds {held} bytes; this chunk is bytes {start}-{}",
                                end - 1
                            ),
                            None,
                        ));
                    }
                    if held == end {
                        return Ok(None);
                    }
                    if held <= from {
                        // An answered attempt that added nothing: bounded like a failure.
                        failures += 1;
                        if failures >= self.inner.core.retry.max_attempts.max(2) {
                            return Err(Error::protocol(
                                format!("the resumable session keeps none of bytes {from}-{}", end - 1),
                                None,
                            ));
                        }
                    }
                    from = held;
                }
                ChunkAnswer::Done(v) => {
                    if crc.is_none() {
                        return Err(Error::protocol("a middle chunk of a resumable upload made the object", None));
                    }
                    return Ok(Some(v));
                }
            }
        }
    }

    /// How many bytes a resumable session holds (308), or the object it made (200/201).
    async fn session_status(&self, path: &str, len: u64) -> Result<ChunkAnswer, Error> {
        let mut op = Op::path("resumable status", Method::PUT, path.to_owned())
            .header("content-range", &format!("bytes */{len}"))?
            .body(OpBody::Bytes(Bytes::new()));
        op.idempotent = true;
        op.accept_308 = true;
        self.execute(&mut op, chunk_answer).await
    }

    /// Deletes one object; a missing one counts as deleted.
    pub async fn delete_object(&self, object: &ObjectRef) -> Result<(), Error> {
        let mut op = Op::path("objects.delete", Method::DELETE, Self::object_path(&object.bucket, &object.key));
        match self.execute(&mut op, |_| async { Ok(()) }).await {
            Err(e) if e.is_not_found() => Ok(()),
            r => r,
        }
    }

    /// Deletes `keys` in batches of [`BATCH_MAX`] (the JSON API's batch endpoint).
    /// A key that could not be deleted is reported in `errors`.
    pub async fn delete_objects(&self, bucket: &str, keys: &[String]) -> Result<DeleteObjectsOutput, Error> {
        let mut out = DeleteObjectsOutput::default();
        for chunk in keys.chunks(BATCH_MAX) {
            let answers = match self.batch_delete(bucket, chunk).await {
                Ok(a) => a,
                // No batch endpoint (some emulators and proxies): one DELETE each.
                Err(e) if matches!(e.status(), Some(400 | 404 | 405 | 501)) => {
                    tracing::debug!(error = %e, "gcs: no batch endpoint; deleting one by one");
                    self.delete_each(bucket, chunk).await
                }
                Err(e) => return Err(e),
            };
            for (key, r) in chunk.iter().zip(answers) {
                match r {
                    Ok(()) => out.deleted.push(key.clone()),
                    Err((code, message)) => out.errors.push(DeleteError { key: key.clone(), code, message }),
                }
            }
        }
        Ok(out)
    }

    /// One DELETE per key, 16 at a time.
    pub(crate) async fn delete_each(&self, bucket: &str, keys: &[String]) -> Vec<KeyResult> {
        let calls: Vec<_> = keys
            .iter()
            .map(|k| {
                let c = self.clone();
                let o = ObjectRef::new(bucket, k.as_str());
                async move {
                    c.delete_object(&o)
                        .await
                        .map_err(|e| (e.code().unwrap_or("DeleteFailed").to_owned(), e.to_string()))
                }
            })
            .collect();
        futures_util::stream::iter(calls).buffered(16).collect().await
    }

    /// One batch request of DELETEs; the answers in the order of `keys`.
    async fn batch_delete(&self, bucket: &str, keys: &[String]) -> Result<Vec<KeyResult>, Error> {
        let boundary = "ferry-batch-7c1e0b94";
        let auth = match self.inner.auth.token().await? {
            Some(t) => format!("Authorization: Bearer {t}\r\n"),
            None => String::new(),
        };
        let mut body = String::new();
        for (i, k) in keys.iter().enumerate() {
            body.push_str(&format!(
                "--{boundary}\r\nContent-Type: application/http\r\nContent-ID: <{}>\r\n\r\nDELETE {} HTTP/1.1\r\n{auth}\r\n\r\n",
                i + 1,
                Self::object_path(bucket, k)
            ));
        }
        body.push_str(&format!("--{boundary}--\r\n"));
        let mut op = Op::path("batch delete", Method::POST, "/batch/storage/v1".to_owned())
            .header("content-type", &format!("multipart/mixed; boundary={boundary}"))?
            .body(OpBody::Bytes(Bytes::from(body)));
        op.idempotent = true;
        let n = keys.len();
        self.execute(&mut op, |r| async move {
            let rid = request_id(&r.headers);
            let ct = r.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            let body = r.body.collect(crate::gcs::client::JSON_LIMIT).await?;
            parse_batch(&ct, &body, n).map_err(|m| Error::protocol(m, rid))
        })
        .await
    }

    /// Server-side copy: `rewriteTo`, repeated with its token until done.
    pub async fn rewrite_object(
        &self,
        source: &ObjectRef,
        dest: &ObjectRef,
        params: CopyParams,
    ) -> Result<CopyObjectOutput, Error> {
        let if_gen = match params.if_match.as_deref() {
            Some(t) => Some(
                parse_generation(t)
                    .ok_or_else(|| precondition(412, format!("{t:?} is not a generation of {}", gs(source)), None))?,
            ),
            None => None,
        };
        let resource = match (&params.metadata, &params.content_type) {
            (None, None) => None,
            (meta, ct) => {
                // Replacing: the destination resource is what the body says.
                let mut v = serde_json::json!({});
                if let Some(ct) = ct {
                    v["contentType"] = ct.clone().into();
                }
                if let Some(m) = meta {
                    let m: serde_json::Map<String, serde_json::Value> =
                        m.iter().map(|(k, val)| (k.to_ascii_lowercase(), val.clone().into())).collect();
                    v["metadata"] = m.into();
                }
                Some(v)
            }
        };
        let path = format!(
            "/storage/v1/b/{}/o/{}/rewriteTo/b/{}/o/{}",
            enc(&source.bucket),
            enc(&source.key),
            enc(&dest.bucket),
            enc(&dest.key)
        );
        let mut token: Option<String> = None;
        loop {
            let mut op = Op::path("objects.rewrite", Method::POST, path.clone())
                .query_opt("ifSourceGenerationMatch", if_gen.map(|g| g.to_string()))
                .query_opt("rewriteToken", token.clone());
            op = match &resource {
                Some(v) => op.json(v)?,
                None => op.header("content-type", "application/json")?,
            };
            // A repeated rewrite writes the same bytes to the same name.
            op.idempotent = true;
            let v = self.execute(&mut op, |r| async move { Self::read_json(r).await }).await?;
            if v["done"].as_bool() == Some(true) || (v["done"].is_null() && v["resource"].is_object()) {
                let r = &v["resource"];
                return Ok(CopyObjectOutput {
                    etag: generation(r).unwrap_or_default(),
                    last_modified: r["updated"].as_str().and_then(parse_time),
                });
            }
            match v["rewriteToken"].as_str() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => return Err(Error::protocol("a rewrite that is not done came without a rewriteToken", None)),
            }
        }
    }
}

/// Fails if the stored object's CRC32C is not the one computed from the bytes sent.
fn check_stored_crc(object: &ObjectRef, v: &serde_json::Value, ours: &str) -> Result<(), Error> {
    match v["crc32c"].as_str() {
        Some(theirs) if !ours.is_empty() && theirs != ours => Err(Error::integrity(
            format!("{}: the server stored CRC32C {theirs}, the bytes sent have {ours}", gs(object)),
            None,
        )),
        _ => Ok(()),
    }
}

/// Exactly `len` bytes of `stream`, in memory.
async fn collect_exact(mut stream: BoxStream<'static, std::io::Result<Bytes>>, len: u64) -> Result<Bytes, Error> {
    let mut buf = BytesMut::with_capacity(len as usize);
    while let Some(c) = stream.next().await {
        let c = c.map_err(|e| Error::Io { path: "(stream)".into(), error: e })?;
        buf.extend_from_slice(&c);
        if buf.len() as u64 > len {
            return Err(Error::Io {
                path: "(stream)".into(),
                error: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("stream is longer than the {len} bytes declared"),
                ),
            });
        }
    }
    if (buf.len() as u64) < len {
        return Err(Error::Io {
            path: "(stream)".into(),
            error: std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("stream ended after {} of the {len} bytes declared", buf.len()),
            ),
        });
    }
    Ok(buf.freeze())
}

/// The per-call answers of a batch response (multipart/mixed of `application/http`
/// parts, each `Content-ID: <response-N>`), in call order. A 2xx or a 404 is a delete
/// done.
pub(crate) fn parse_batch(content_type: &str, body: &[u8], n: usize) -> Result<Vec<KeyResult>, String> {
    let boundary = content_type
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"').to_owned())
        .ok_or_else(|| format!("a batch answer without a boundary ({content_type:?})"))?;
    let text = String::from_utf8_lossy(body);
    let mut answers: Vec<Option<KeyResult>> = vec![None; n];
    let delim = format!("--{boundary}");
    for (i, part) in text.split(delim.as_str()).enumerate().skip(1) {
        let part = part.trim_start_matches("\r\n");
        if part.starts_with("--") {
            break;
        }
        let id = part
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case("content-id").then(|| v.trim().to_owned())
            })
            .and_then(|v| {
                v.trim_matches(|c| c == '<' || c == '>').rsplit('-').next().and_then(|n| n.parse::<usize>().ok())
            })
            .unwrap_or(i);
        let status_line = part.lines().find(|l| l.starts_with("HTTP/"));
        let status: u16 = status_line
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("batch answer part {id} has no status line"))?;
        if id == 0 || id > n {
            return Err(format!("batch answer part names call {id} of {n}"));
        }
        answers[id - 1] = Some(if (200..300).contains(&status) || status == 404 {
            Ok(())
        } else {
            let e =
                crate::gcs::error::classify(status, String::new(), status_line.unwrap_or_default().to_owned(), None);
            Err((e.code().unwrap_or("DeleteFailed").to_owned(), e.to_string()))
        });
    }
    answers
        .into_iter()
        .enumerate()
        .map(|(i, a)| a.ok_or_else(|| format!("the batch answer has no part for call {}", i + 1)))
        .collect()
}

/// The CRC32C (base64) of parts combined, from each part's CRC32C and length.
pub(crate) fn combine_crc32c(parts: &[(String, u64)]) -> Option<String> {
    let mut whole: Option<Vec<u8>> = None;
    for (crc, len) in parts {
        let raw = base64_decode(crc)?;
        whole = Some(match whole {
            None => raw,
            Some(w) => ferry_proto::checksum::crc_combine(ChecksumAlgorithm::Crc32c, &w, &raw, *len)?,
        });
    }
    whole.map(|w| base64_encode(&w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_answers_in_call_order() {
        let body = "--b1\r\nContent-Type: application/http\r\nContent-ID: <response-2>\r\n\r\nHTTP/1.1 404 Not Found\r\n\r\n\r\n--b1\r\nContent-Type: application/http\r\nContent-ID: <response-1>\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n\r\n--b1\r\nContent-Type: application/http\r\nContent-ID: <response-3>\r\n\r\nHTTP/1.1 403 Forbidden\r\n\r\n{}\r\n--b1--\r\n";
        let a = parse_batch("multipart/mixed; boundary=b1", body.as_bytes(), 3).unwrap();
        assert_eq!(a[0], Ok(()));
        assert_eq!(a[1], Ok(()));
        assert!(matches!(&a[2], Err((code, _)) if code == "forbidden"), "{a:?}");
        assert!(parse_batch("multipart/mixed; boundary=b1", body.as_bytes(), 4).is_err());
        assert!(parse_batch("multipart/mixed", body.as_bytes(), 3).is_err());
    }

    #[test]
    fn hashes_and_generations() {
        let mut h = HeaderMap::new();
        h.append("x-goog-hash", "crc32c=n03x6A==".parse().unwrap());
        h.append("x-goog-hash", "md5=Ojk9c3dhfxgoKVVHYwFbHQ==".parse().unwrap());
        assert_eq!(goog_hash(&h, "crc32c").as_deref(), Some("n03x6A=="));
        assert_eq!(goog_hash(&h, "md5").as_deref(), Some("Ojk9c3dhfxgoKVVHYwFbHQ=="));
        let mut h = HeaderMap::new();
        h.insert("x-goog-hash", "crc32c=AAAAAA==,md5=AAAA".parse().unwrap());
        assert_eq!(goog_hash(&h, "md5").as_deref(), Some("AAAA"));
        assert_eq!(parse_generation("\"1712\""), Some(1712));
        assert_eq!(parse_generation("nope"), None);
    }

    #[test]
    fn crc32c_of_parts_combines() {
        let (a, b) = (b"hello ".as_slice(), b"world".as_slice());
        let c = |d: &[u8]| base64_encode(&ChecksumAlgorithm::Crc32c.digest(d));
        assert_eq!(combine_crc32c(&[(c(a), 6), (c(b), 5)]), Some(c(b"hello world")));
    }
}
