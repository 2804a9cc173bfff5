//! Multipart upload: the six calls (UploadPartCopy included). Driving them (parts in
//! parallel, abort on failure, resume) is the engine's (`ferry_engine::upload`).
//!
//! A file's part is never held whole: its checksum is computed in a first read (the
//! header must precede the body), then the body streams from the file in `FILE_CHUNK`s
//! as the socket takes them, so a part holds [`FILE_PART_BYTES_IN_MEMORY`]. With a CRC
//! algorithm the upload is created FULL_OBJECT: each part
//! carries its CRC, and Complete states the whole object's CRC, combined from the parts'
//! with `full_object_crc` (no second read), which S3 checks against what it stored. SHA
//! algorithms cannot be combined and use COMPOSITE (checksum of the part checksums).
//! Limits (S3 User Guide, "Amazon S3 multipart upload limits"): parts of 5 MiB to 5
//! GiB, the last may be smaller, at most 10,000 parts.
//!
//! [`S3Client::upload_part_copy`] fills a part from a byte range of an existing object,
//! server side (`x-amz-copy-source-range`); ferry-engine's `copy` module runs it in
//! parallel for objects above CopyObject's 5 GiB limit.
//! Spec: S3 API Reference, UploadPartCopy.

use crate::error::Error;
use crate::request::{Op, OpBody};
use crate::s3::client::S3Client;
use crate::s3::error::request_id;
use crate::s3::object::{read_xml, PutParams};
use crate::types::*;
use bytes::Bytes;
use ferry_proto::checksum::{base64_encode, full_object_crc_base64, ChecksumAlgorithm, Checksummer};
use ferry_proto::encoding::uri_encode;
use ferry_proto::xml::{CompletedPart, PartEntry};
use http::Method;
use std::path::Path;

/// S3's smallest part (all but the last).
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
/// S3's most parts per upload.
pub const MAX_PARTS: u64 = 10_000;
/// S3's largest part (and largest CopyObject source).
pub const MAX_PART_SIZE: u64 = 5 * 1024 * 1024 * 1024;

/// `<CopyPartResult>`: the part's ETag and, where the server computed them, checksums.
fn parse_copy_part_result(body: &[u8]) -> Result<CompletedPart, ferry_proto::xml::XmlError> {
    let root = ferry_proto::xml::parse_document(body)?;
    let bad = |m: &str| ferry_proto::xml::XmlError { message: m.to_owned() };
    if root.name != "CopyPartResult" {
        return Err(bad(&format!("expected root element <CopyPartResult>, found <{}>", root.name)));
    }
    let etag = root
        .child_text("ETag")
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .ok_or_else(|| bad("<CopyPartResult> without <ETag>"))?;
    let checksums = root
        .children
        .iter()
        .filter_map(|c| ChecksumAlgorithm::from_xml_tag(&c.name).map(|a| (a, c.text.trim().to_owned())))
        .collect();
    Ok(CompletedPart { part_number: 0, etag: etag.to_owned(), checksums })
}

impl S3Client {
    /// CreateMultipartUpload. A CRC checksum makes the upload FULL_OBJECT, a SHA one
    /// COMPOSITE.
    pub async fn create_multipart(&self, object: &ObjectRef, params: &PutParams) -> Result<MultipartUpload, Error> {
        let mut op = Op::object("CreateMultipartUpload", Method::POST, &object.bucket, Some(&object.key))
            .query("uploads", "")
            .header_opt("content-type", params.content_type.as_deref())?;
        // Retried like an idempotent operation (retry.rs module note): a repeat after a
        // server that did act leaves an empty upload in progress, which one transient 500
        // failing a whole transfer would cost far more than.
        op.idempotent = true;
        for (k, v) in &params.metadata {
            op = op.header(&format!("x-amz-meta-{}", k.to_ascii_lowercase()), v)?;
        }
        let full_object = params.checksum.is_some_and(|a| {
            matches!(a, ChecksumAlgorithm::Crc32 | ChecksumAlgorithm::Crc32c | ChecksumAlgorithm::Crc64Nvme)
        });
        if let Some(algo) = params.checksum {
            op = op
                .header("x-amz-checksum-algorithm", algo.as_str())?
                .header("x-amz-checksum-type", if full_object { "FULL_OBJECT" } else { "COMPOSITE" })?;
        }
        let r = self
            .execute(&mut op, |r| async move { read_xml(r, ferry_proto::client_xml::parse_initiate_multipart).await })
            .await?;
        Ok(MultipartUpload {
            object: object.clone(),
            upload_id: r.upload_id,
            checksum: params.checksum,
            full_object_checksum: full_object,
        })
    }

    /// UploadPart from memory (retried as needed). The returned part carries its ETag
    /// and checksum for Complete.
    pub async fn upload_part(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        body: Bytes,
    ) -> Result<CompletedPart, Error> {
        let sum = upload.checksum.map(|a| (a, base64_encode(&a.digest(&body))));
        self.send_part(upload, part_number, OpBody::Bytes(body), sum).await
    }

    /// UploadPart of `len` bytes of a file from `offset`, streamed from the file (module
    /// note): the checksum is read first, then the bytes stream as the socket takes
    /// them, so the part holds at most [`FILE_PART_BYTES_IN_MEMORY`] whatever its size.
    /// Each attempt (retries included) reads the file again. A file changed between the
    /// two reads is caught by the server, which checks the stated checksum against the
    /// bytes it received (BadDigest), and again by the CRC the upload completes with.
    pub async fn upload_part_file(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        path: &Path,
        offset: u64,
        len: u64,
    ) -> Result<CompletedPart, Error> {
        let sum = match upload.checksum {
            Some(a) => Some((a, file_range_checksum(path, offset, len, a).await?)),
            None => None,
        };
        self.send_part(upload, part_number, OpBody::File { path: path.to_path_buf(), offset, len }, sum).await
    }

    async fn send_part(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        body: OpBody,
        sum: Option<(ChecksumAlgorithm, String)>,
    ) -> Result<CompletedPart, Error> {
        let mut op = Op::object("UploadPart", Method::PUT, &upload.object.bucket, Some(&upload.object.key))
            .query("partNumber", part_number.to_string())
            .query("uploadId", &upload.upload_id)
            .body(body);
        if let Some((a, v)) = &sum {
            op = op.header(a.header_name(), v)?;
        }
        self.execute(&mut op, |r| {
            let sum = sum.clone();
            async move {
                let rid = request_id(&r.headers);
                let etag = r
                    .headers
                    .get("etag")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
                    .ok_or_else(|| Error::protocol("UploadPart answer without ETag", rid.clone()))?;
                if let Some((a, ours)) = &sum {
                    if let Some(theirs) = r.headers.get(a.header_name()).and_then(|v| v.to_str().ok()) {
                        if theirs.trim() != ours {
                            return Err(Error::integrity(
                                format!("part {part_number}: the server stored {a} {theirs}, we sent {ours}"),
                                rid,
                            ));
                        }
                    }
                }
                Ok(CompletedPart { part_number, etag, checksums: sum.into_iter().collect() })
            }
        })
        .await
    }

    /// UploadPartCopy: part `part_number` of `upload` becomes the bytes `source` names,
    /// copied by the server (no bytes travel through the client). Idempotent (the same
    /// part is written again), so retried like UploadPart. The part carries the
    /// checksums the server reported, for Complete.
    pub async fn upload_part_copy(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        source: &CopySource,
    ) -> Result<CompletedPart, Error> {
        let src = format!("/{}/{}", source.object.bucket, uri_encode(&source.object.key, false));
        let mut op = Op::object("UploadPartCopy", Method::PUT, &upload.object.bucket, Some(&upload.object.key))
            .query("partNumber", part_number.to_string())
            .query("uploadId", &upload.upload_id)
            .header("x-amz-copy-source", &src)?
            .header_opt("x-amz-copy-source-if-match", source.if_match.as_deref())?;
        if let Some((first, last)) = source.range {
            op = op.header("x-amz-copy-source-range", &format!("bytes={first}-{last}"))?;
        }
        let mut part = self.execute(&mut op, |r| async move { read_xml(r, parse_copy_part_result).await }).await?;
        part.part_number = part_number;
        // Only the upload's own algorithm goes into Complete.
        part.checksums.retain(|(a, _)| Some(*a) == upload.checksum);
        Ok(part)
    }

    /// CompleteMultipartUpload. `parts` in any order; they are sent sorted. When the
    /// upload is FULL_OBJECT and `sizes` are known, the whole-object CRC is stated and
    /// checked by the server. Retried (idempotent by upload id, retry.rs).
    pub async fn complete_multipart(
        &self,
        upload: &MultipartUpload,
        parts: &[CompletedPart],
    ) -> Result<CompleteMultipartOutput, Error> {
        self.complete_inner(upload, parts, None).await
    }

    /// CompleteMultipartUpload stating the whole object's checksum (base64, in the
    /// upload's algorithm; FULL_OBJECT uploads): the server refuses to complete if what
    /// it assembled differs, and so do we if its answer differs.
    pub async fn complete_multipart_checked(
        &self,
        upload: &MultipartUpload,
        parts: &[CompletedPart],
        whole: String,
    ) -> Result<CompleteMultipartOutput, Error> {
        self.complete_inner(upload, parts, Some(whole)).await
    }

    async fn complete_inner(
        &self,
        upload: &MultipartUpload,
        parts: &[CompletedPart],
        whole: Option<String>,
    ) -> Result<CompleteMultipartOutput, Error> {
        let mut parts = parts.to_vec();
        parts.sort_by_key(|p| p.part_number);
        let xml = ferry_proto::xml::complete_multipart_to_xml(&parts);
        let mut op =
            Op::object("CompleteMultipartUpload", Method::POST, &upload.object.bucket, Some(&upload.object.key))
                .query("uploadId", &upload.upload_id)
                .header("content-type", "application/xml")?
                .body(OpBody::Bytes(Bytes::from(xml)));
        op.idempotent = true;
        if let (Some(algo), Some(v)) = (upload.checksum, &whole) {
            op = op.header(algo.header_name(), v)?;
        }
        let r =
            self.execute(&mut op, |r| async move {
                read_xml(r, ferry_proto::client_xml::parse_complete_multipart_result).await
            })
            .await?;
        if let (Some(ours), Some((_, theirs))) = (&whole, r.checksums.first()) {
            if ours != theirs {
                return Err(Error::integrity(
                    format!("the completed object's checksum is {theirs}, the parts combine to {ours}"),
                    None,
                ));
            }
        }
        Ok(CompleteMultipartOutput { etag: r.etag, checksum: r.checksums.into_iter().next() })
    }

    /// AbortMultipartUpload.
    pub async fn abort_multipart(&self, upload: &MultipartUpload) -> Result<(), Error> {
        let mut op =
            Op::object("AbortMultipartUpload", Method::DELETE, &upload.object.bucket, Some(&upload.object.key))
                .query("uploadId", &upload.upload_id);
        self.execute(&mut op, |_| async { Ok(()) }).await
    }

    /// ListParts, all pages.
    pub async fn list_parts(&self, upload: &MultipartUpload) -> Result<Vec<PartEntry>, Error> {
        let mut out = Vec::new();
        let mut marker: Option<u32> = None;
        loop {
            let mut op = Op::object("ListParts", Method::GET, &upload.object.bucket, Some(&upload.object.key))
                .query("uploadId", &upload.upload_id);
            if let Some(m) = marker {
                op = op.query("part-number-marker", m.to_string());
            }
            let r = self
                .execute(&mut op, |r| async move { read_xml(r, ferry_proto::client_xml::parse_list_parts).await })
                .await?;
            out.extend(r.parts);
            if !r.is_truncated {
                return Ok(out);
            }
            if Some(r.next_part_number_marker) == marker || r.next_part_number_marker == 0 {
                return Err(Error::protocol("ListParts is truncated but its marker does not advance", None));
            }
            marker = Some(r.next_part_number_marker);
        }
    }
}

/// The whole object's CRC from the parts' CRCs and sizes (None when a part has none):
/// [`ferry_proto::checksum::full_object_crc_base64`], which the server uses too.
pub fn combine_part_crcs(algo: ChecksumAlgorithm, parts: &[(CompletedPart, u64)]) -> Option<String> {
    let crcs: Vec<(&str, u64)> = parts
        .iter()
        .map(|(p, len)| p.checksums.iter().find(|(a, _)| *a == algo).map(|(_, v)| (v.as_str(), *len)))
        .collect::<Option<_>>()?;
    full_object_crc_base64(algo, crcs)
}

/// Bytes an UploadPart streamed from a file holds in memory, the figure it takes from
/// the client's budget: the chunk being read plus the one hyper is writing to the
/// socket (its write buffer takes a chunk only when the one before is written).
pub const FILE_PART_BYTES_IN_MEMORY: u64 = 2 * crate::request::FILE_CHUNK as u64;

/// The checksum (base64) of `len` bytes of the file at `path` from `offset`, read in
/// chunks on the blocking pool (one hop per call, one chunk-sized buffer).
pub async fn file_range_checksum(path: &Path, offset: u64, len: u64, algo: ChecksumAlgorithm) -> Result<String, Error> {
    let p = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&p)?;
        let mut buf = vec![0u8; crate::request::FILE_CHUNK.min(len as usize)];
        let mut hasher = Checksummer::new(algo);
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            f.read_exact_at(&mut buf[..want], at)?;
            hasher.update(&buf[..want]);
            at += want as u64;
        }
        Ok(hasher.finish_base64())
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r)
    .map_err(|e| Error::Io { path: path.display().to_string(), error: e })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_part_result_parses() {
        let xml = b"<?xml version=\"1.0\"?><CopyPartResult><LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>\"abc\"</ETag><ChecksumCRC64NVME>AAAAAAAAAAA=</ChecksumCRC64NVME></CopyPartResult>";
        let p = parse_copy_part_result(xml).unwrap();
        assert_eq!(p.etag, "\"abc\"");
        assert_eq!(p.checksums, vec![(ChecksumAlgorithm::Crc64Nvme, "AAAAAAAAAAA=".to_owned())]);
        assert!(parse_copy_part_result(b"<CopyObjectResult><ETag>x</ETag></CopyObjectResult>").is_err());
        assert!(parse_copy_part_result(b"<CopyPartResult></CopyPartResult>").is_err());
    }

    #[test]
    fn combined_crc_equals_the_whole() {
        let a = b"hello ".to_vec();
        let b = b"world".to_vec();
        let algo = ChecksumAlgorithm::Crc64Nvme;
        let part = |n, d: &[u8]| {
            (
                CompletedPart {
                    part_number: n,
                    etag: String::new(),
                    checksums: vec![(algo, base64_encode(&algo.digest(d)))],
                },
                d.len() as u64,
            )
        };
        let whole = combine_part_crcs(algo, &[part(1, &a), part(2, &b)]).unwrap();
        assert_eq!(whole, base64_encode(&algo.digest(b"hello world")));
    }
}
