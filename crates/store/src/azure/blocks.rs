//! The trait's multipart upload as Azure block blobs: Put Block per part (in parallel,
//! driven by the engine), Put Block List to commit.
//!
//! ```text
//! create_upload ─► upload id = 12 hex digits of the start time (ms) + 4 random: nothing is sent
//! upload_part n ─► Put Block ?comp=block&blockid=B  (x-ms-content-crc64, checked by Azure;
//!                  the answer's CRC64 / MD5, where it has them, compared: object.rs)
//!                  B = base64("{upload id}-{n:05}-{CRC64NVME of the part:016x}")  (39 bytes, 52 chars)
//! list_parts    ─► Get Block List ?blocklisttype=uncommitted ─► blocks of this upload id,
//!                  part number, size and CRC read back from the id
//! complete      ─► Put Block List <Latest>B1</Latest>... in part order
//! abort         ─► Get Blob Properties: no committed blob ─► Delete Blob (drops the
//!                  uncommitted blob and all its blocks); a committed blob ─► refused, said
//! list_uploads  ─► List Blobs include=uncommittedblobs under the prefix, then Get Block
//!                  List per blob: one request per blob listed (at most 10,000 examined)
//! ```
//!
//! Every id of a blob has the same length (Azure refuses mixed lengths in one blob: a
//! blob holding another tool's uncommitted blocks of another length refuses ours until
//! it is committed or they expire), and
//! carries what a resumed upload must compare: the engine's resume keeps a part whose
//! stored CRC64NVME equals its bytes' CRC, and reads it from the id, so a resumed upload
//! works unchanged over Azure.
//!
//! Aborting. Azure has no call that drops one upload's blocks: uncommitted blocks go
//! when the blob is next committed (Put Blob or Put Block List), when the blob is
//! deleted, or after a week. A blob that was never committed (an interrupted upload of
//! a new key, the usual case) is an "uncommitted blob": Delete Blob on it removes it
//! with every block, and List Blobs stops reporting it, so `abort` does exactly that
//! after Get Blob Properties says no committed blob of that name exists. (An
//! unconditional Delete Blob, as Microsoft's guidance for stuck blocks has it: a
//! conditional one treats an uncommitted blob as missing.) A blob that is committed
//! keeps its bytes: the only ways to drop its uncommitted blocks are deleting it or
//! re-committing it, and a re-commit resets its properties and metadata unless each is
//! restated, so `abort` refuses with [`BLOCKS_REMAIN`] and says what Azure will do,
//! rather than claim a removal that did not happen. Dropping a blob's blocks drops
//! those of every upload to that blob, as any commit on Azure does. A blob committed by
//! someone else between the check and the delete would be deleted: one round trip of
//! exposure, the cost of Azure having no "delete only if uncommitted" condition.
//! Azure takes a blob's content type and metadata with Put Block List, so those given
//! to `create_upload` wait in the client, by upload id, until the commit; an upload
//! resumed by another process commits without them (the id has no room for them).
//! Limits ("Put Block", "Scalability targets for Blob storage"): blocks up to 4,000 MiB,
//! at most 50,000 committed blocks per blob; no minimum block size.

use crate::azure::client::AzureClient;
use crate::azure::object::{check_answer, crc64, crc64_header, file_digests};
use crate::error::Error;
use crate::request::Op;
use crate::request::OpBody;
use crate::store::PartPayload;
use crate::types::*;
use bytes::Bytes;
use ferry_proto::checksum::{base64_decode, base64_encode, ChecksumAlgorithm};
use http::Method;
use md5::{Digest, Md5};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest block (version 2019-12-12 and later).
pub const MAX_BLOCK: u64 = 4000 * 1024 * 1024;
/// Most committed blocks in one blob.
pub const MAX_BLOCKS: u64 = 50_000;
/// Most uploads `list_uploads` reports: each listed blob costs a Get Block List.
const MAX_LISTED_BLOBS: usize = 10_000;

/// A new upload id: the start time in ms (12 hex digits: until the year 10889) and 4
/// random hex digits.
pub(crate) fn new_upload_id() -> String {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
    format!("{:012x}{:04x}", ms & 0xffff_ffff_ffff, rand::random::<u16>())
}

fn upload_started(upload_id: &str) -> SystemTime {
    let ms = u64::from_str_radix(upload_id.get(..12).unwrap_or("0"), 16).unwrap_or(0);
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The block id of part `n` of an upload with this CRC64NVME.
pub(crate) fn block_id(upload_id: &str, part: u32, crc: u64) -> String {
    base64_encode(format!("{upload_id}-{part:05}-{crc:016x}").as_bytes())
}

/// `(upload id, part, crc)` of a block id ferry made; `None` for anything else.
pub(crate) fn parse_block_id(id: &str) -> Option<(String, u32, u64)> {
    let raw = String::from_utf8(base64_decode(id)?).ok()?;
    let mut it = raw.split('-');
    let (u, p, c) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || u.len() != 16 || p.len() != 5 || c.len() != 16 {
        return None;
    }
    Some((u.to_owned(), p.parse().ok()?, u64::from_str_radix(c, 16).ok()?))
}

/// The error code of an abort refused because the blob is committed (module note).
pub const BLOCKS_REMAIN: &str = "UncommittedBlocksRemain";

/// One `<Block>` of a block list.
#[derive(Debug)]
struct Block {
    name: String,
    size: u64,
}

fn parse_uncommitted(body: &[u8]) -> Result<Vec<Block>, ferry_proto::xml::XmlError> {
    let root = ferry_proto::xml::parse_document(body)?;
    let mut out = Vec::new();
    if let Some(list) = root.child("UncommittedBlocks") {
        for b in list.children_named("Block") {
            let name = b.child_text("Name").unwrap_or("").trim().to_owned();
            let size = b.child_text("Size").and_then(|s| s.trim().parse().ok()).unwrap_or(0);
            out.push(Block { name, size });
        }
    }
    Ok(out)
}

pub(crate) async fn read_xml<T>(
    resp: ferry_wire::Response,
    parse: impl FnOnce(&[u8]) -> Result<T, ferry_proto::xml::XmlError>,
) -> Result<T, Error> {
    let rid = crate::azure::error::request_id(&resp.headers);
    let body = resp.body.collect(crate::s3::object::XML_LIMIT).await?;
    parse(&body).map_err(|e| Error::protocol(format!("unparseable response body: {e}"), rid))
}

impl AzureClient {
    /// Starts an upload: only an id (nothing exists on the service until a block arrives).
    pub fn create_block_upload(&self, object: &ObjectRef, params: &PutParams) -> MultipartUpload {
        let upload_id = new_upload_id();
        if params.content_type.is_some() || !params.metadata.is_empty() {
            self.inner
                .upload_params
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(upload_id.clone(), params.clone());
        }
        MultipartUpload { object: object.clone(), upload_id, checksum: params.checksum, full_object_checksum: false }
    }

    /// Put Block for part `part`, with its CRC64 (object.rs), which also goes in the id.
    pub async fn put_block(
        &self,
        upload: &MultipartUpload,
        part: u32,
        payload: PartPayload,
    ) -> Result<CompletedPart, Error> {
        if part == 0 || part as u64 > MAX_BLOCKS {
            return Err(Error::Config(format!("part numbers run from 1 to {MAX_BLOCKS} on Azure, not {part}")));
        }
        if payload.len() > MAX_BLOCK {
            return Err(Error::Config(format!("a block holds at most {MAX_BLOCK} bytes, not {}", payload.len())));
        }
        let (md5, crc, body) = match payload {
            PartPayload::Bytes(b) => (base64_encode(&Md5::digest(&b)), crc64(&b), OpBody::Bytes(b)),
            PartPayload::File { path, offset, len } => {
                let (md5, crc) = file_digests(&path, offset, len).await?;
                (md5, crc, OpBody::File { path, offset, len })
            }
        };
        let id = block_id(&upload.upload_id, part, crc);
        let mut op = Op::object("PutBlock", Method::PUT, &upload.object.bucket, Some(&upload.object.key))
            .query("comp", "block")
            .query("blockid", &id)
            .header("x-ms-content-crc64", &crc64_header(crc))?
            .body(body);
        self.execute(&mut op, |r| {
            let md5 = md5.clone();
            async move { check_answer(&r.headers, crc, &md5) }
        })
        .await?;
        Ok(CompletedPart {
            part_number: part,
            etag: id,
            checksums: vec![(ChecksumAlgorithm::Crc64Nvme, base64_encode(&crc.to_be_bytes()))],
        })
    }

    /// Put Block List of `parts` in part order: the blob appears, whole, with the
    /// content type and metadata its upload was started with (by this client).
    pub async fn put_block_list(
        &self,
        upload: &MultipartUpload,
        parts: &[CompletedPart],
    ) -> Result<CompleteMultipartOutput, Error> {
        let params = self.inner.upload_params.lock().unwrap_or_else(|p| p.into_inner()).get(&upload.upload_id).cloned();
        let mut parts = parts.to_vec();
        parts.sort_by_key(|p| p.part_number);
        if parts.windows(2).any(|w| w[0].part_number == w[1].part_number) {
            return Err(Error::Config("the same part number twice in one block list".into()));
        }
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for p in &parts {
            xml.push_str("<Latest>");
            xml.push_str(&p.etag);
            xml.push_str("</Latest>");
        }
        xml.push_str("</BlockList>");
        let body = Bytes::from(xml);
        let md5 = base64_encode(&Md5::digest(&body));
        let mut op = Op::object("PutBlockList", Method::PUT, &upload.object.bucket, Some(&upload.object.key))
            .query("comp", "blocklist")
            .header("content-type", "application/xml")?
            .header("content-md5", &md5)?
            .body(OpBody::Bytes(body));
        if let Some(p) = &params {
            op = op.header_opt("x-ms-blob-content-type", p.content_type.as_deref())?;
            for (k, v) in &p.metadata {
                op = op.header(&format!("x-ms-meta-{}", k.to_ascii_lowercase()), v)?;
            }
        }
        let etag = self
            .execute(&mut op, |r| async move {
                Ok(r.headers
                    .get("etag")
                    .and_then(|v| v.to_str().ok())
                    .map(crate::azure::object::quoted)
                    .unwrap_or_default())
            })
            .await?;
        self.inner.upload_params.lock().unwrap_or_else(|p| p.into_inner()).remove(&upload.upload_id);
        Ok(CompleteMultipartOutput { etag, checksum: None })
    }

    /// Drops an upload's blocks where Azure allows it (module note: "Aborting").
    pub async fn abort_block_upload(&self, upload: &MultipartUpload) -> Result<(), Error> {
        self.inner.upload_params.lock().unwrap_or_else(|p| p.into_inner()).remove(&upload.upload_id);
        match self.head_blob(&upload.object).await {
            Ok(_) => Err(Error::Service {
                status: 409,
                code: BLOCKS_REMAIN.into(),
                message: format!(
                    "az://{}/{} exists, so its uncommitted blocks stay until the blob is next written or deleted, \
                     or Azure drops them a week after the last block arrived; the blob itself was left alone",
                    upload.object.bucket, upload.object.key
                ),
                request_id: None,
            }),
            Err(e) if matches!(&e, Error::NotFound { code, .. } if code != "ContainerNotFound") => {
                let mut op = Op::object("DeleteBlob", Method::DELETE, &upload.object.bucket, Some(&upload.object.key));
                match self.execute(&mut op, |_| async { Ok(()) }).await {
                    // Gone already: nothing of the upload is left.
                    Err(e) if matches!(&e, Error::NotFound { code, .. } if code == "BlobNotFound") => Ok(()),
                    r => r,
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The blocks of `upload` Azure holds uncommitted, as parts (module note).
    pub async fn list_upload_blocks(&self, upload: &MultipartUpload) -> Result<Vec<PartEntry>, Error> {
        let blocks = self.uncommitted_blocks(&upload.object).await?;
        let mut out: Vec<PartEntry> = blocks
            .into_iter()
            .filter_map(|b| {
                let (id, part, crc) = parse_block_id(&b.name)?;
                (id == upload.upload_id).then(|| PartEntry {
                    part_number: part,
                    last_modified: upload_started(&id),
                    etag: b.name,
                    size: b.size,
                    checksums: vec![(ChecksumAlgorithm::Crc64Nvme, base64_encode(&crc.to_be_bytes()))],
                })
            })
            .collect();
        if out.is_empty() {
            return Err(Error::NotFound {
                code: "NoSuchUpload".into(),
                message: format!("no uncommitted blocks of upload {} on {}", upload.upload_id, upload.object),
                request_id: None,
            });
        }
        out.sort_by_key(|p| p.part_number);
        Ok(out)
    }

    async fn uncommitted_blocks(&self, object: &ObjectRef) -> Result<Vec<Block>, Error> {
        let mut op = Op::object("GetBlockList", Method::GET, &object.bucket, Some(&object.key))
            .query("comp", "blocklist")
            .query("blocklisttype", "uncommitted");
        match self.execute(&mut op, |r| async move { read_xml(r, parse_uncommitted).await }).await {
            Err(e) if matches!(&e, Error::NotFound { code, .. } if code == "BlobNotFound") => Ok(Vec::new()),
            r => r,
        }
    }

    /// Uploads in progress under `prefix`: blobs with uncommitted blocks of ferry's ids
    /// (module note; one Get Block List per blob listed).
    pub async fn list_block_uploads(&self, container: &str, prefix: &str) -> Result<Vec<UploadEntry>, Error> {
        let names = self.list_names_with_uncommitted(container, prefix, MAX_LISTED_BLOBS).await?;
        let mut out = Vec::new();
        for name in names {
            let object = ObjectRef::new(container, name.clone());
            let mut ids: Vec<String> = self
                .uncommitted_blocks(&object)
                .await?
                .iter()
                .filter_map(|b| parse_block_id(&b.name))
                .map(|(u, _, _)| u)
                .collect();
            ids.sort();
            ids.dedup();
            out.extend(ids.into_iter().map(|u| UploadEntry {
                key: name.clone(),
                initiated: upload_started(&u),
                upload_id: u,
            }));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ids_have_one_length_and_read_back() {
        let u = new_upload_id();
        assert_eq!(u.len(), 16);
        let a = block_id(&u, 1, 0);
        let b = block_id(&u, 50_000, u64::MAX);
        assert_eq!((a.len(), b.len()), (52, 52));
        assert!(!a.contains('='));
        assert_eq!(parse_block_id(&b), Some((u.clone(), 50_000, u64::MAX)));
        assert_eq!(parse_block_id(&base64_encode(b"someone else's block")), None);
        let started = upload_started(&u);
        assert!(SystemTime::now().duration_since(started).unwrap() < Duration::from_secs(5));
    }

    #[test]
    fn uncommitted_list_parses() {
        let xml = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><CommittedBlocks><Block><Name>Y29t</Name><Size>3</Size></Block></CommittedBlocks><UncommittedBlocks><Block><Name>QUJD</Name><Size>1048576</Size></Block></UncommittedBlocks></BlockList>";
        let blocks = parse_uncommitted(xml).unwrap();
        assert_eq!(blocks.len(), 1);
        assert_eq!((blocks[0].name.as_str(), blocks[0].size), ("QUJD", 1 << 20));
    }
}
