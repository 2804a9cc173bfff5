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
//!                  uncommitted blob and all its blocks); a committed blob ─► Get Block
//!                  List, then Put Block List of its committed blocks, If-Match its ETag,
//!                  its properties, metadata and tags restated (the same bytes; the
//!                  blocks dropped), or
//!                  refused, said, where that cannot keep the blob as it is
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
//! conditional one treats an uncommitted blob as missing.) A blob committed by someone
//! else between the check and the delete would be deleted: one round trip of exposure,
//! the cost of Azure having no "delete only if uncommitted" condition.
//!
//! A blob that is committed keeps its bytes. Its uncommitted blocks go when it is
//! committed again. A failed transfer's `abort` leaves such a blob alone and says its
//! blocks remain (readers pinned to its ETag must not see it change because a write to
//! it failed); `discard_upload`, what `ferry rm --incomplete` calls, re-commits it as it
//! stands ([`AzureClient::recommit`]):
//! Put Block List naming each committed block (`<Committed>`, never a staged block of
//! the same id) in order, `If-Match` the ETag its properties were read with, so a blob
//! changed meanwhile is refused (412) instead of overwritten, and with every property a
//! commit would otherwise reset restated from those properties (content type,
//! encoding, language, disposition, cache control, MD5, an explicitly set access tier)
//! and from the blob's listing entry (metadata as stored, index tags, the latter also
//! as an `x-ms-if-tags` condition: restate.rs). What changes is what any commit
//! changes: the ETag and Last-Modified (and, where versioning is on, a new version
//! sharing the same blocks). Where a re-commit cannot keep the blob as it is,
//! `discard_upload` refuses with [`BLOCKS_REMAIN`] and says what Azure will do rather
//! than claim a removal that did not happen: a blob written whole by Put Blob (no
//! committed block list to name: its blocks do not add up to its length), a metadata
//! name stored with capitals (ferry sends header names lower case: restate.rs), a page
//! or append blob. Dropping a blob's blocks drops those of every upload to that blob,
//! as any commit on Azure does.
//! Azure takes a blob's content type and metadata with Put Block List, so those given
//! to `create_upload` wait in the client, by upload id, until the commit; an upload
//! resumed by another process commits without them (the id has no room for them).
//! Limits ("Put Block", "Scalability targets for Blob storage"): blocks up to 4,000 MiB,
//! at most 50,000 committed blocks per blob; no minimum block size.

use crate::azure::client::AzureClient;
use crate::azure::object::{check_answer, crc64, crc64_header, file_digests};
use crate::azure::restate::{if_tags_header, tag_count, tags_header, Listed};
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

/// The refusal to drop a committed blob's uncommitted blocks, saying `why` and what Azure
/// will do with them.
fn blocks_remain(object: &ObjectRef, why: &str) -> Error {
    Error::Service {
        status: 409,
        code: BLOCKS_REMAIN.into(),
        message: format!(
            "{object} exists and {why}, so its uncommitted blocks stay until the blob is next written or \
             deleted, or Azure drops them a week after the last block arrived; the blob itself was left alone"
        ),
        request_id: None,
    }
}

/// One `<Block>` of a block list.
#[derive(Debug)]
struct Block {
    name: String,
    size: u64,
}

/// The blocks of one list (`CommittedBlocks` or `UncommittedBlocks`) of a Get Block
/// List answer, in order.
fn parse_blocks(body: &[u8], list: &str) -> Result<Vec<Block>, ferry_proto::xml::XmlError> {
    let root = ferry_proto::xml::parse_document(body)?;
    let mut out = Vec::new();
    if let Some(list) = root.child(list) {
        for b in list.children_named("Block") {
            let name = b.child_text("Name").unwrap_or("").trim().to_owned();
            let size = b.child_text("Size").and_then(|s| s.trim().parse().ok()).unwrap_or(0);
            out.push(Block { name, size });
        }
    }
    Ok(out)
}

fn parse_uncommitted(body: &[u8]) -> Result<Vec<Block>, ferry_proto::xml::XmlError> {
    parse_blocks(body, "UncommittedBlocks")
}

/// Blob properties a Put Block List sets from its request, each with the request header
/// that restates it: a commit that does not send one resets it.
const RESTATED: [(&str, &str); 6] = [
    ("content-type", "x-ms-blob-content-type"),
    ("content-encoding", "x-ms-blob-content-encoding"),
    ("content-language", "x-ms-blob-content-language"),
    ("content-disposition", "x-ms-blob-content-disposition"),
    ("cache-control", "x-ms-blob-cache-control"),
    ("content-md5", "x-ms-blob-content-md5"),
];

/// The Put Block List that commits a blob again as it stands, from its properties
/// (`props`, Get Blob Properties' headers) and its committed block ids: the request's
/// headers and body, or why it cannot keep the blob as it is (module note).
pub(crate) fn recommit_request(
    props: &http::HeaderMap,
    committed: &[(String, u64)],
    listed: &Listed,
) -> Result<(Vec<(String, String)>, String), String> {
    let get = |n: &str| props.get(n).and_then(|v| v.to_str().ok()).map(str::trim);
    let size: u64 = get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let etag = get("etag").ok_or("its properties came without an ETag")?;
    match get("x-ms-blob-type") {
        None | Some("BlockBlob") => {}
        Some(other) => return Err(format!("it is a {other}, which has no blocks to commit")),
    }
    if let Some((name, _)) = listed.metadata.iter().find(|(n, _)| n.bytes().any(|b| b.is_ascii_uppercase())) {
        return Err(format!(
            "its metadata name {name:?} is stored with capitals, which a commit from ferry would write lower \
             case (its HTTP/1.1 header names go out lower case)"
        ));
    }
    if tag_count(props) as usize != listed.tags.len() {
        return Err(format!(
            "its index tags changed while they were read ({} by its properties, {} listed)",
            tag_count(props),
            listed.tags.len()
        ));
    }
    if committed.iter().map(|(_, n)| n).sum::<u64>() != size {
        return Err("it was written whole (Put Blob), so it has no block list that names its bytes".into());
    }
    let mut headers = vec![("if-match".to_owned(), etag.to_owned())];
    for (prop, header) in RESTATED {
        if let Some(v) = get(prop) {
            headers.push((header.to_owned(), v.to_owned()));
        }
    }
    for (name, value) in &listed.metadata {
        headers.push((format!("x-ms-meta-{name}"), value.clone()));
    }
    if !listed.tags.is_empty() {
        headers.push(("x-ms-tags".to_owned(), tags_header(&listed.tags)));
        headers.push(("x-ms-if-tags".to_owned(), if_tags_header(&listed.tags)));
    }
    // A tier set on the blob is restated; an inferred one (the account's default) is
    // what a commit gives anyway.
    if let (Some(tier), false) = (get("x-ms-access-tier"), get("x-ms-access-tier-inferred") == Some("true")) {
        headers.push(("x-ms-access-tier".to_owned(), tier.to_owned()));
    }
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for (id, _) in committed {
        xml.push_str("<Committed>");
        xml.push_str(id);
        xml.push_str("</Committed>");
    }
    xml.push_str("</BlockList>");
    Ok((headers, xml))
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

    /// Drops an upload's blocks where that leaves any committed blob untouched (module
    /// note: "Aborting"): what a failed transfer does, so readers pinned to the blob's
    /// ETag never see it change because a write to it failed.
    pub async fn abort_block_upload(&self, upload: &MultipartUpload) -> Result<(), Error> {
        self.drop_blocks(upload, false).await
    }

    /// Drops an upload's blocks, re-committing a committed blob as it stands where that
    /// is the only way (module note: "Aborting"): what `rm --incomplete` asks for.
    pub async fn discard_block_upload(&self, upload: &MultipartUpload) -> Result<(), Error> {
        self.drop_blocks(upload, true).await
    }

    async fn drop_blocks(&self, upload: &MultipartUpload, recommit: bool) -> Result<(), Error> {
        self.inner.upload_params.lock().unwrap_or_else(|p| p.into_inner()).remove(&upload.upload_id);
        match self.head_blob(&upload.object).await {
            Ok(_) => {
                if !self.holds_blocks_of(upload).await? {
                    return Ok(());
                }
                if !recommit {
                    return Err(blocks_remain(&upload.object, "a failed write leaves the blob as it was"));
                }
                match self.recommit(&upload.object).await {
                    // Changed meanwhile (412): the commit did not happen. Nothing is left
                    // to do if the upload's blocks went with that change.
                    Err(e @ Error::Precondition { .. }) => match self.holds_blocks_of(upload).await? {
                        false => Ok(()),
                        true => Err(e),
                    },
                    r => r,
                }
            }
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

    /// Whether Azure still holds uncommitted blocks of `upload`.
    async fn holds_blocks_of(&self, upload: &MultipartUpload) -> Result<bool, Error> {
        let blocks = self.uncommitted_blocks(&upload.object).await?;
        Ok(blocks.iter().any(|b| parse_block_id(&b.name).is_some_and(|(id, _, _)| id == upload.upload_id)))
    }

    /// Commits a committed blob again as it stands, which drops its uncommitted blocks
    /// (module note, "Aborting"): Get Blob Properties, Get Block List, then Put Block
    /// List of the committed blocks `If-Match` the properties' ETag, the properties
    /// restated. Refused with [`BLOCKS_REMAIN`] where that could change the blob.
    pub async fn recommit(&self, object: &ObjectRef) -> Result<(), Error> {
        let mut op = Op::object("GetBlobProperties", Method::HEAD, &object.bucket, Some(&object.key));
        let props = self.execute(&mut op, |r| async move { Ok(r.headers) }).await?;
        let etag = props.get("etag").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let listed = self.listed(object, &etag, tag_count(&props) > 0).await?.ok_or_else(|| Error::Precondition {
            status: 412,
            code: "ConditionNotMet".into(),
            message: format!("{object} changed while its properties were read; nothing was committed"),
            request_id: None,
        })?;
        let mut op = Op::object("GetBlockList", Method::GET, &object.bucket, Some(&object.key))
            .query("comp", "blocklist")
            .query("blocklisttype", "committed");
        let committed =
            self.execute(&mut op, |r| async move { read_xml(r, |b| parse_blocks(b, "CommittedBlocks")).await }).await?;
        let committed: Vec<(String, u64)> = committed.into_iter().map(|b| (b.name, b.size)).collect();
        let (headers, xml) =
            recommit_request(&props, &committed, &listed).map_err(|why| blocks_remain(object, &why))?;
        let body = Bytes::from(xml);
        let md5 = base64_encode(&Md5::digest(&body));
        let mut op = Op::object("PutBlockList", Method::PUT, &object.bucket, Some(&object.key))
            .query("comp", "blocklist")
            .header("content-type", "application/xml")?
            .header("content-md5", &md5)?
            .body(OpBody::Bytes(body));
        for (name, value) in &headers {
            op = op.header(name, value)?;
        }
        self.execute(&mut op, |_| async { Ok(()) }).await
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
    fn a_recommit_names_the_committed_blocks_if_match_and_restates_the_properties() {
        let props = |extra: &[(&str, &str)]| {
            let mut h = http::HeaderMap::new();
            for (k, v) in [
                ("content-length", "30"),
                ("etag", "\"0x8DC1\""),
                ("x-ms-blob-type", "BlockBlob"),
                ("content-type", "text/csv"),
                ("cache-control", "no-cache"),
                ("content-md5", "q1w2e3=="),
                ("x-ms-access-tier", "Hot"),
                ("x-ms-access-tier-inferred", "true"),
                ("x-ms-request-id", "r1"),
            ]
            .iter()
            .chain(extra)
            {
                h.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
            }
            h
        };
        let blocks = vec![("QQ".to_owned(), 10), ("Qg".to_owned(), 20)];
        let owner = || vec![("owner".to_owned(), "lab".to_owned())];
        let listed = Listed { metadata: owner(), tags: Vec::new() };
        let (headers, xml) = recommit_request(&props(&[]), &blocks, &listed).unwrap();
        fn has_in(headers: &[(String, String)], k: &str, v: &str) -> bool {
            headers.iter().any(|(a, b)| a == k && b == v)
        }
        let has = |k: &str, v: &str| has_in(&headers, k, v);
        assert!(has("if-match", "\"0x8DC1\""), "{headers:?}");
        assert!(has("x-ms-blob-content-type", "text/csv") && has("x-ms-blob-cache-control", "no-cache"));
        assert!(has("x-ms-blob-content-md5", "q1w2e3==") && has("x-ms-meta-owner", "lab"), "{headers:?}");
        assert!(!headers.iter().any(|(a, _)| a == "x-ms-access-tier"), "an inferred tier is not set: {headers:?}");
        assert!(!headers.iter().any(|(a, _)| a == "x-ms-request-id"));
        assert!(xml.ends_with("<BlockList><Committed>QQ</Committed><Committed>Qg</Committed></BlockList>"), "{xml}");
        // A tier set on the blob is kept.
        let (headers, _) = recommit_request(
            &props(&[("x-ms-access-tier", "Cool"), ("x-ms-access-tier-inferred", "false")]),
            &blocks,
            &listed,
        )
        .unwrap();
        assert!(headers.iter().any(|(a, b)| a == "x-ms-access-tier" && b == "Cool"), "{headers:?}");
        // Index tags are restated, on condition that they still hold.
        let tags = vec![("Project".to_owned(), "a b".to_owned())];
        let tagged = Listed { metadata: owner(), tags: tags.clone() };
        let (headers, _) = recommit_request(&props(&[("x-ms-tag-count", "1")]), &blocks, &tagged).unwrap();
        assert!(has_in(&headers, "x-ms-tags", "Project=a%20b"), "{headers:?}");
        assert!(has_in(&headers, "x-ms-if-tags", "\"Project\" = 'a b'"), "{headers:?}");
        // Refused where the commit could change the blob.
        let refused = |extra: &[(&str, &str)], blocks: &[(String, u64)], listed: &Listed| {
            recommit_request(&props(extra), blocks, listed).unwrap_err()
        };
        assert!(refused(&[], &[], &listed).contains("written whole"), "no block list: a Put Blob's blob");
        assert!(refused(&[], &blocks[..1], &listed).contains("written whole"), "blocks that do not add up");
        assert!(refused(&[("x-ms-tag-count", "2")], &blocks, &tagged).contains("index tags changed"));
        assert!(refused(&[("x-ms-blob-type", "PageBlob")], &blocks, &listed).contains("PageBlob"));
        let capitals = Listed { metadata: vec![("OwnerName".to_owned(), "lab".to_owned())], tags: tags.clone() };
        assert!(
            refused(&[("x-ms-tag-count", "1")], &blocks, &capitals).contains("\"OwnerName\" is stored with capitals")
        );
    }

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
