//! Object operations: GetObject, HeadObject, PutObject (bytes, file, stream),
//! DeleteObject, DeleteObjects, CopyObject, and the bucket calls tests need.
//!
//! PUT bodies and their checksum (CRC64NVME unless asked otherwise: S3's default for
//! new objects, and the cheapest per byte with a SIMD implementation):
//!
//! | source | checksum travels as | retried? |
//! |---|---|---|
//! | `Bytes` | `x-amz-checksum-*` header, computed up front | yes, the buffer is replayed |
//! | file | header, computed in a first read pass, then the file is streamed | yes, the file is re-opened |
//! | stream of known length | aws-chunked trailer, computed while sending | no: a stream is sent once |
//!
//! For a file, two passes cost one extra read (from the page cache for all but huge
//! files) and buy a plain, replayable request that every S3-compatible server accepts;
//! aws-chunked with trailers is only needed where the bytes cannot be read twice.

use crate::checked::CheckedBody;
use crate::error::Error;
use crate::request::{Op, OpBody};
use crate::s3::body::{full_object, S3Reopen};
use crate::s3::client::S3Client;
use crate::s3::error::{from_error_body, request_id};
use bytes::{Bytes, BytesMut};
use ferry_proto::checksum::{base64_encode, ChecksumAlgorithm, Checksummer};
use ferry_proto::encoding::{parse_http_date, uri_encode};
use ferry_proto::range::parse_content_range;
use ferry_wire::{RequestBody, Response};
use futures_util::stream::{BoxStream, Stream, StreamExt};
use http::{HeaderMap, Method};
use md5::{Digest, Md5};
use std::collections::BTreeMap;
use std::path::Path;

pub use crate::types::*;

/// Largest XML response read (a 1,000-key listing with long keys is ~1 MB).
pub(crate) const XML_LIMIT: usize = 16 * 1024 * 1024;

impl ObjectInfo {
    /// What S3's HEAD and GET headers say about an object (`x-amz-meta-*`, `x-amz-checksum-*`).
    pub(crate) fn from_headers(headers: &HeaderMap) -> ObjectInfo {
        let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let size = match get("content-range").as_deref().and_then(parse_content_range) {
            Some((_, _, Some(total))) => total,
            _ => get("content-length").and_then(|v| v.trim().parse().ok()).unwrap_or(0),
        };
        let mut metadata = BTreeMap::new();
        let mut checksums = Vec::new();
        for (name, value) in headers {
            let n = name.as_str();
            if let Some(m) = n.strip_prefix("x-amz-meta-") {
                if let Ok(v) = value.to_str() {
                    metadata.insert(m.to_owned(), v.to_owned());
                }
            } else if let Some(algo) = ChecksumAlgorithm::from_header_name(n) {
                if let Ok(v) = value.to_str() {
                    checksums.push((algo, v.trim().to_owned()));
                }
            }
        }
        ObjectInfo {
            size,
            etag: get("etag"),
            last_modified: get("last-modified").as_deref().and_then(parse_http_date),
            content_type: get("content-type"),
            metadata,
            checksums,
        }
    }
}
/// Whether XML 1.0 can carry `c` (XML 1.0, section 2.2, "Characters").
fn xml_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Keys per DeleteObjects request: S3's limit.
pub const DELETE_OBJECTS_MAX_KEYS: usize = 1000;

fn put_headers(mut op: Op, params: &PutParams) -> Result<Op, Error> {
    op = op.header_opt("content-type", params.content_type.as_deref())?;
    for (k, v) in &params.metadata {
        op = op.header(&format!("x-amz-meta-{}", k.to_ascii_lowercase()), v)?;
    }
    if params.if_none_match_star {
        op = op.header("if-none-match", "*")?;
    }
    Ok(op)
}

/// Reads a 2xx PUT-like answer, checking an echoed checksum against ours.
fn put_output(resp: &Response, sent: Option<(ChecksumAlgorithm, String)>) -> Result<PutObjectOutput, Error> {
    if let Some((algo, ours)) = &sent {
        if let Some(theirs) = resp.headers.get(algo.header_name()).and_then(|v| v.to_str().ok()) {
            if theirs.trim() != ours {
                return Err(Error::integrity(
                    format!("the server stored {algo} {theirs}, we sent {ours}"),
                    request_id(&resp.headers),
                ));
            }
        }
    }
    Ok(PutObjectOutput {
        etag: resp.headers.get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned),
        checksum: sent,
    })
}

/// Checksums of a whole buffer: the chosen algorithm and, when asked, MD5.
fn digests(
    data: &[u8],
    algo: Option<ChecksumAlgorithm>,
    md5: bool,
) -> (Option<(ChecksumAlgorithm, String)>, Option<String>) {
    let sum = algo.map(|a| (a, base64_encode(&a.digest(data))));
    let md5 = md5.then(|| base64_encode(&Md5::digest(data)));
    (sum, md5)
}

fn add_digests(mut op: Op, sum: &Option<(ChecksumAlgorithm, String)>, md5: &Option<String>) -> Result<Op, Error> {
    if let Some((a, v)) = sum {
        op = op.header(a.header_name(), v)?;
    }
    op.header_opt("content-md5", md5.as_deref())
}

impl S3Client {
    /// GetObject: the body streams, verified, resumed if cut (see body.rs).
    pub async fn get_object(&self, object: &ObjectRef, params: GetParams) -> Result<GetObjectOutput, Error> {
        let mut op = Op::object("GetObject", Method::GET, &object.bucket, Some(&object.key))
            .range(params.range, params.size_hint)?
            .header_opt("if-match", params.if_match.as_deref())?
            .header_opt("if-none-match", params.if_none_match.as_deref())?
            .header_opt("if-modified-since", params.if_modified_since.map(ferry_proto::encoding::http_date).as_deref())?
            .header_opt(
                "if-unmodified-since",
                params.if_unmodified_since.map(ferry_proto::encoding::http_date).as_deref(),
            )?;
        if params.checksum_mode {
            op = op.header("x-amz-checksum-mode", "ENABLED")?;
        }
        let resp = self.execute(&mut op, |r| async move { Ok(r) }).await?;
        let meta = ObjectInfo::from_headers(&resp.headers);
        CheckedBody::output(S3Reopen { client: self.clone(), object: object.clone() }, resp, meta, full_object)
    }

    /// HeadObject.
    pub async fn head_object(&self, object: &ObjectRef) -> Result<ObjectInfo, Error> {
        let mut op = Op::object("HeadObject", Method::HEAD, &object.bucket, Some(&object.key))
            .header("x-amz-checksum-mode", "ENABLED")?;
        self.execute(&mut op, |r| async move { Ok(ObjectInfo::from_headers(&r.headers)) }).await
    }

    /// PutObject from memory.
    pub async fn put_object(
        &self,
        object: &ObjectRef,
        body: Bytes,
        params: PutParams,
    ) -> Result<PutObjectOutput, Error> {
        let (sum, md5) = digests(&body, params.checksum, params.content_md5);
        let op = put_headers(Op::object("PutObject", Method::PUT, &object.bucket, Some(&object.key)), &params)?;
        let mut op = add_digests(op, &sum, &md5)?.body(OpBody::Bytes(body));
        self.execute(&mut op, |r| {
            let sum = sum.clone();
            async move { put_output(&r, sum) }
        })
        .await
    }

    /// PutObject from a file: the checksum is computed in a first pass, then the file
    /// streams (module note).
    pub async fn put_object_file(
        &self,
        object: &ObjectRef,
        path: impl AsRef<Path>,
        params: PutParams,
    ) -> Result<PutObjectOutput, Error> {
        let path = path.as_ref().to_path_buf();
        let len = tokio::fs::metadata(&path)
            .await
            .map_err(|e| Error::Io { path: path.display().to_string(), error: e })?
            .len();
        let (sum, md5) = if params.checksum.is_some() || params.content_md5 {
            let mut hasher = params.checksum.map(Checksummer::new);
            let mut md5 = params.content_md5.then(Md5::new);
            let mut stream = crate::request::file_stream(path.clone(), 0, len).await?;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| Error::Io { path: path.display().to_string(), error: e })?;
                if let Some(h) = &mut hasher {
                    h.update(&chunk);
                }
                if let Some(m) = &mut md5 {
                    m.update(&chunk);
                }
            }
            (hasher.map(|h| (h.algorithm(), h.finish_base64())), md5.map(|m| base64_encode(&m.finalize())))
        } else {
            (None, None)
        };
        let op = put_headers(Op::object("PutObject", Method::PUT, &object.bucket, Some(&object.key)), &params)?;
        let mut op = add_digests(op, &sum, &md5)?.body(OpBody::File { path, offset: 0, len });
        self.execute(&mut op, |r| {
            let sum = sum.clone();
            async move { put_output(&r, sum) }
        })
        .await
    }

    /// PutObject from a stream of exactly `len` bytes. With a checksum, the body is sent
    /// aws-chunked with the checksum as a trailer (computed as the bytes pass); it is
    /// sent once, never retried.
    pub async fn put_object_stream<S>(
        &self,
        object: &ObjectRef,
        len: u64,
        stream: S,
        params: PutParams,
    ) -> Result<PutObjectOutput, Error>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        let op = put_headers(Op::object("PutObject", Method::PUT, &object.bucket, Some(&object.key)), &params)?;
        let (mut op, result) = match params.checksum {
            None => {
                (op.body(OpBody::Once(Some(RequestBody::Stream { len, stream: exact_len(stream.boxed(), len) }))), None)
            }
            Some(algo) => {
                let (encoded_len, body, result) = aws_chunked(stream.boxed(), len, algo);
                let op = op
                    .header("content-encoding", "aws-chunked")?
                    .header("x-amz-decoded-content-length", &len.to_string())?
                    .header("x-amz-trailer", algo.header_name())?
                    .header("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")?
                    .body(OpBody::Once(Some(RequestBody::Stream { len: encoded_len, stream: body })));
                (op, Some(result))
            }
        };
        let resp = self.execute(&mut op, |r| async move { Ok(r) }).await?;
        let sent = match result {
            Some(r) => r.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            None => None,
        };
        put_output(&resp, sent)
    }

    /// DeleteObject (succeeds for a key that does not exist, as S3 does).
    pub async fn delete_object(&self, object: &ObjectRef) -> Result<(), Error> {
        let mut op = Op::object("DeleteObject", Method::DELETE, &object.bucket, Some(&object.key));
        self.execute(&mut op, |_| async { Ok(()) }).await
    }

    /// DeleteObjects, in requests of at most 1,000 keys. A key that could not be deleted
    /// is reported in `errors`, not as a failure of the call.
    pub async fn delete_objects(&self, bucket: &str, keys: &[String]) -> Result<DeleteObjectsOutput, Error> {
        let mut out = DeleteObjectsOutput::default();
        // XML 1.0 cannot carry most control characters, even as character references,
        // so S3 (and MinIO) reject a Delete body naming such a key with MalformedXML.
        // Those keys are deleted one by one with DeleteObject instead.
        let (batchable, single): (Vec<String>, Vec<String>) =
            keys.iter().cloned().partition(|k| k.chars().all(xml_char));
        for key in single {
            match self.delete_object(&ObjectRef::new(bucket, key.as_str())).await {
                Ok(()) => out.deleted.push(key),
                Err(e) => out.errors.push(ferry_proto::xml::DeleteError {
                    key,
                    code: e.code().unwrap_or("DeleteObjectFailed").to_string(),
                    message: e.to_string(),
                }),
            }
        }
        for chunk in batchable.chunks(DELETE_OBJECTS_MAX_KEYS) {
            let xml = ferry_proto::xml::DeleteRequest { quiet: false, keys: chunk.to_vec() }.to_xml();
            let md5 = base64_encode(&Md5::digest(xml.as_bytes()));
            let mut op = Op::object("DeleteObjects", Method::POST, bucket, None)
                .query("delete", "")
                .header("content-type", "application/xml")?
                .header("content-md5", &md5)?
                .body(OpBody::Bytes(Bytes::from(xml)));
            // Deleting the same keys again leaves the same state (retry.rs).
            op.idempotent = true;
            let result = self
                .execute(&mut op, |r| async move { read_xml(r, ferry_proto::client_xml::parse_delete_result).await })
                .await?;
            out.deleted.extend(result.deleted);
            out.errors.extend(result.errors);
        }
        Ok(out)
    }

    /// CopyObject (server side, up to 5 GiB).
    pub async fn copy_object(
        &self,
        source: &ObjectRef,
        dest: &ObjectRef,
        params: CopyParams,
    ) -> Result<CopyObjectOutput, Error> {
        let src = format!("/{}/{}", source.bucket, uri_encode(&source.key, false));
        let mut op = Op::object("CopyObject", Method::PUT, &dest.bucket, Some(&dest.key))
            .header("x-amz-copy-source", &src)?
            .header_opt("x-amz-copy-source-if-match", params.if_match.as_deref())?
            .header_opt("content-type", params.content_type.as_deref())?;
        if let Some(meta) = &params.metadata {
            op = op.header("x-amz-metadata-directive", "REPLACE")?;
            for (k, v) in meta {
                op = op.header(&format!("x-amz-meta-{}", k.to_ascii_lowercase()), v)?;
            }
        }
        let r = self
            .execute(&mut op, |r| async move { read_xml(r, ferry_proto::client_xml::parse_copy_object_result).await })
            .await?;
        Ok(CopyObjectOutput { etag: r.etag, last_modified: r.last_modified })
    }

    /// CreateBucket (no location constraint: the endpoint's region).
    pub async fn create_bucket(&self, bucket: &str) -> Result<(), Error> {
        let mut op = Op::object("CreateBucket", Method::PUT, bucket, None);
        self.execute(&mut op, |_| async { Ok(()) }).await
    }

    /// DeleteBucket (the bucket must be empty).
    pub async fn delete_bucket(&self, bucket: &str) -> Result<(), Error> {
        let mut op = Op::object("DeleteBucket", Method::DELETE, bucket, None);
        self.execute(&mut op, |_| async { Ok(()) }).await
    }
}

/// Reads an XML answer; a 200 whose body is `<Error>` becomes that error.
pub(crate) async fn read_xml<T>(
    resp: Response,
    parse: fn(&[u8]) -> Result<T, ferry_proto::xml::XmlError>,
) -> Result<T, Error> {
    let status = resp.status.as_u16();
    let rid = request_id(&resp.headers);
    let body = resp.body.collect(XML_LIMIT).await?;
    if ferry_proto::xml::parse_error(&body).is_some() {
        return Err(from_error_body(status, &body, rid));
    }
    parse(&body).map_err(|e| Error::protocol(format!("unparseable response body: {e}"), rid))
}

/// Fails the stream if it yields more or fewer than `len` bytes.
fn exact_len(
    stream: BoxStream<'static, std::io::Result<Bytes>>,
    len: u64,
) -> BoxStream<'static, std::io::Result<Bytes>> {
    let counted = futures_util::stream::unfold((stream, 0u64, false), move |(mut s, seen, done)| async move {
        if done {
            return None;
        }
        match s.next().await {
            Some(Ok(b)) => {
                let seen = seen + b.len() as u64;
                if seen > len {
                    Some((
                        Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("stream is longer than the {len} bytes declared"),
                        )),
                        (s, seen, true),
                    ))
                } else {
                    Some((Ok(b), (s, seen, false)))
                }
            }
            Some(Err(e)) => Some((Err(e), (s, seen, true))),
            None if seen < len => Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("stream ended after {seen} of the {len} bytes declared"),
                )),
                (s, seen, true),
            )),
            None => None,
        }
    });
    counted.boxed()
}

/// Chunk size of aws-chunked bodies: 64 KiB, the AWS SDKs' default chunk size.
const AWS_CHUNK: usize = 64 * 1024;

type SharedSum = std::sync::Arc<std::sync::Mutex<Option<(ChecksumAlgorithm, String)>>>;

/// Frames `stream` (exactly `len` bytes) as aws-chunked with a checksum trailer
/// (S3 API Reference, "Signature Version 4 streaming", unsigned chunks with a
/// trailer). Returns the encoded length, the encoded stream, and a cell holding the
/// checksum once the stream has ended.
pub(crate) fn aws_chunked(
    stream: BoxStream<'static, std::io::Result<Bytes>>,
    len: u64,
    algo: ChecksumAlgorithm,
) -> (u64, BoxStream<'static, std::io::Result<Bytes>>, SharedSum) {
    let frame = |n: usize| (format!("{n:x}").len() + 2 + n + 2) as u64;
    let full = len / AWS_CHUNK as u64;
    let rem = (len % AWS_CHUNK as u64) as usize;
    let b64_len = algo.digest_len_bytes().div_ceil(3) * 4;
    let trailer_len = (3 + algo.header_name().len() + 1 + b64_len + 2 + 2) as u64;
    let encoded = full * frame(AWS_CHUNK) + if rem > 0 { frame(rem) } else { 0 } + trailer_len;
    let cell: SharedSum = Default::default();
    let out_cell = cell.clone();
    struct St {
        input: BoxStream<'static, std::io::Result<Bytes>>,
        buf: BytesMut,
        hasher: Checksummer,
        ended: bool,
        finished: bool,
    }
    let st = St {
        input: exact_len(stream, len),
        buf: BytesMut::new(),
        hasher: Checksummer::new(algo),
        ended: false,
        finished: false,
    };
    let s = futures_util::stream::try_unfold(st, move |mut st| {
        let cell = cell.clone();
        async move {
            if st.finished {
                return Ok(None);
            }
            while !st.ended && st.buf.len() < AWS_CHUNK {
                match st.input.next().await {
                    Some(b) => st.buf.extend_from_slice(&b?),
                    None => st.ended = true,
                }
            }
            let mut out = BytesMut::new();
            if !st.buf.is_empty() {
                let n = st.buf.len().min(AWS_CHUNK);
                let data = st.buf.split_to(n);
                st.hasher.update(&data);
                out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                out.extend_from_slice(&data);
                out.extend_from_slice(b"\r\n");
            }
            if st.ended && st.buf.is_empty() {
                let sum = st.hasher.finish_base64();
                out.extend_from_slice(format!("0\r\n{}:{sum}\r\n\r\n", algo.header_name()).as_bytes());
                *cell.lock().unwrap_or_else(|p| p.into_inner()) = Some((algo, sum));
                st.finished = true;
            }
            Ok(Some((out.freeze(), st)))
        }
    });
    (encoded, s.boxed(), out_cell)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn aws_chunked_length_matches_the_encoding() {
        for len in [0usize, 1, AWS_CHUNK - 1, AWS_CHUNK, AWS_CHUNK + 1, 3 * AWS_CHUNK + 17] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let pieces: Vec<std::io::Result<Bytes>> =
                data.chunks(1000).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            let (encoded_len, s, cell) =
                aws_chunked(futures_util::stream::iter(pieces).boxed(), len as u64, ChecksumAlgorithm::Crc64Nvme);
            let out: Vec<Bytes> = s.map(|r| r.unwrap()).collect().await;
            let out: Vec<u8> = out.concat();
            assert_eq!(out.len() as u64, encoded_len, "len {len}");
            // Decode with the server's decoder.
            let mut dec = ferry_proto::chunked::AwsChunkedDecoder::new(ferry_proto::chunked::AwsChunkedMode::Unsigned);
            let mut input = BytesMut::from(&out[..]);
            let mut decoded = Vec::new();
            dec.decode(&mut input, &mut decoded).unwrap();
            dec.finish().unwrap();
            assert_eq!(decoded.concat(), data);
            let sum = cell.lock().unwrap().clone().unwrap().1;
            assert_eq!(dec.trailers(), &[("x-amz-checksum-crc64nvme".to_string(), sum)]);
        }
    }

    #[tokio::test]
    async fn exact_len_refuses_short_and_long_streams() {
        let short = futures_util::stream::iter(vec![Ok(Bytes::from_static(b"abc"))]).boxed();
        let r: Vec<_> = exact_len(short, 4).collect().await;
        assert!(r.last().unwrap().is_err());
        let long = futures_util::stream::iter(vec![Ok(Bytes::from_static(b"abcde"))]).boxed();
        let r: Vec<_> = exact_len(long, 4).collect().await;
        assert!(r.last().unwrap().is_err());
    }
}
