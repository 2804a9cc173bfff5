//! The trait's multipart upload on GCS: part objects under a hidden prefix, joined by
//! `compose`, then deleted.
//!
//! ```text
//! create_upload   ─► PUT  .ferry-upload/<id>/upload        (empty marker: the key, type, metadata)
//! upload_part(n)  ─► PUT  .ferry-upload/<id>/part-<n:05>   (CRC32C stated; the upload's own
//!                                                            algorithm kept in its metadata)
//! list_parts      ─► LIST .ferry-upload/<id>/               (no marker: NotFound, as S3's NoSuchUpload)
//! list_uploads    ─► LIST .ferry-upload/ markers            (their metadata names the key; for a
//!                                                            whole bucket, folders left without one too)
//! complete_upload ─► compose parts, 32 at a time ─► compose those ... ─► the object
//!                    (CRC32C checked against the parts' combined) ─► delete everything under <id>/
//! abort_upload    ─► delete everything under <id>/
//!
//! A bucket holding anything under the hidden prefix cannot be deleted, and listings
//! leave the prefix out, so `ferry rm -r gs://b` (which aborts the bucket's uploads
//! after its objects) and `ferry rm --incomplete gs://b` are what empty it.
//! ```
//!
//! Why objects and compose: GCS has no multipart API with independent parts; the XML
//! API's S3-style multipart is not in the JSON API (nor in fake-gcs-server), and
//! compose is how Google's own clients upload in parallel ("parallel composite
//! uploads"). One compose takes at most [`COMPOSE_MAX`] sources, so more parts are
//! composed in a tree: groups of 32 into intermediate objects (composed concurrently),
//! then those, until one call makes the object. Nothing is visible under the final
//! name before that last call, and a failed or aborted upload leaves only objects under
//! the hidden prefix, which `abort_upload` (and `ferry rm --incomplete`) deletes.
//!
//! Integrity: every part states its CRC32C, which GCS verifies; the composed object's
//! CRC32C (GCS computes it from the components) must equal the parts' CRC32Cs combined
//! (`ferry_proto::checksum::crc_combine`), else the object is deleted and the call
//! fails with `Integrity`. Composite objects have no MD5.

use crate::error::Error;
use crate::gcs::client::{enc, gs, GcsClient};
use crate::gcs::object::{combine_crc32c, generation, num, parse_time, Media};
use crate::request::Op;
use crate::store::PartPayload;
use crate::types::*;
use bytes::Bytes;
use ferry_proto::checksum::{ChecksumAlgorithm, Checksummer};
use futures_util::stream::{StreamExt, TryStreamExt};
use http::Method;
use rand::Rng;
use std::time::SystemTime;

/// Where upload parts live. Listings that do not ask for it leave it out (list.rs).
pub const HIDDEN_PREFIX: &str = ".ferry-upload/";

/// Sources of one compose call: the JSON API's limit.
pub const COMPOSE_MAX: usize = 32;

/// Compose calls of one tree level in flight at once.
const COMPOSE_CONCURRENCY: usize = 8;

/// Metadata keys on the marker and the parts.
const KEY_META: &str = "ferry-key";
const USER_META: &str = "ferry-meta-";
const IF_NONE_MATCH_META: &str = "ferry-if-none-match";

fn dir(id: &str) -> String {
    format!("{HIDDEN_PREFIX}{id}/")
}

fn marker(id: &str) -> String {
    format!("{HIDDEN_PREFIX}{id}/upload")
}

fn part_name(id: &str, n: u32) -> String {
    format!("{HIDDEN_PREFIX}{id}/part-{n:05}")
}

/// The metadata key a part keeps its checksum in the upload's own algorithm under.
fn algo_meta(a: ChecksumAlgorithm) -> String {
    format!("ferry-{}", a.as_str().to_ascii_lowercase())
}

/// An upload's objects as listed: its marker and its parts (by number).
struct Listed {
    marker: serde_json::Value,
    parts: Vec<(u32, serde_json::Value)>,
    all: Vec<String>,
}

impl GcsClient {
    async fn list_raw(&self, bucket: &str, prefix: &str) -> Result<Vec<serde_json::Value>, Error> {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut op = Op::path("objects.list", Method::GET, format!("/storage/v1/b/{}/o", enc(bucket)))
                .query("prefix", prefix)
                .query_opt("pageToken", token.clone());
            let v = self.execute(&mut op, |r| async move { Self::read_json(r).await }).await?;
            if let Some(a) = v["items"].as_array() {
                items.extend(a.iter().cloned());
            }
            match v["nextPageToken"].as_str().filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t.to_owned()),
                None => return Ok(items),
            }
        }
    }

    async fn listed(&self, upload: &MultipartUpload) -> Result<Listed, Error> {
        let id = &upload.upload_id;
        if id.is_empty() || id.contains('/') {
            return Err(no_such_upload(upload));
        }
        let items = self.list_raw(&upload.object.bucket, &dir(id)).await?;
        let m = marker(id);
        let mut marker_v = None;
        let mut parts = Vec::new();
        let mut all = Vec::new();
        for it in items {
            let name = it["name"].as_str().unwrap_or_default().to_owned();
            if name == m {
                marker_v = Some(it.clone());
            } else if let Some(n) = name.strip_prefix(&dir(id)).and_then(|r| r.strip_prefix("part-")) {
                if let Ok(n) = n.parse::<u32>() {
                    parts.push((n, it.clone()));
                }
            }
            all.push(name);
        }
        let Some(marker) = marker_v else { return Err(no_such_upload(upload)) };
        if marker["metadata"][KEY_META].as_str() != Some(upload.object.key.as_str()) {
            return Err(no_such_upload(upload));
        }
        parts.sort_by_key(|(n, _)| *n);
        Ok(Listed { marker, parts, all })
    }

    /// Starts an upload: the marker object names the key and keeps the put's settings.
    pub async fn create_composite(&self, object: &ObjectRef, params: &PutParams) -> Result<MultipartUpload, Error> {
        let id = format!("{:016x}{:08x}", rand::thread_rng().gen::<u64>(), rand::thread_rng().gen::<u32>());
        let mut metadata = vec![(KEY_META.to_owned(), object.key.clone())];
        metadata
            .extend(params.metadata.iter().map(|(k, v)| (format!("{USER_META}{}", k.to_ascii_lowercase()), v.clone())));
        if params.if_none_match_star {
            metadata.push((IF_NONE_MATCH_META.to_owned(), "*".to_owned()));
        }
        let p = PutParams {
            content_type: params.content_type.clone(),
            metadata,
            checksum: None,
            if_none_match_star: false,
            content_md5: false,
        };
        self.upload_media(&ObjectRef::new(object.bucket.as_str(), marker(&id)), Media::Bytes(Bytes::new()), &p, None)
            .await?;
        Ok(MultipartUpload {
            object: object.clone(),
            upload_id: id,
            checksum: params.checksum,
            full_object_checksum: true,
        })
    }

    /// Sends one part as an object of its own.
    pub async fn upload_part_object(
        &self,
        upload: &MultipartUpload,
        part_number: u32,
        part: PartPayload,
    ) -> Result<CompletedPart, Error> {
        if part_number == 0 {
            return Err(Error::Config("part numbers start at 1".into()));
        }
        let extra = upload.checksum.filter(|a| *a != ChecksumAlgorithm::Crc32c);
        let mut crc = Checksummer::new(ChecksumAlgorithm::Crc32c);
        let mut own = extra.map(Checksummer::new);
        let media = match part {
            PartPayload::Bytes(b) => {
                crc.update(&b);
                if let Some(h) = &mut own {
                    h.update(&b);
                }
                Media::Bytes(b)
            }
            PartPayload::File { path, offset, len } => {
                let mut s = Self::file_stream(path.clone(), offset, len).await?;
                while let Some(chunk) = s.next().await {
                    let chunk = chunk.map_err(|e| Error::Io { path: path.display().to_string(), error: e })?;
                    crc.update(&chunk);
                    if let Some(h) = &mut own {
                        h.update(&chunk);
                    }
                }
                Media::File { path, offset, len }
            }
        };
        let crc = crc.finish_base64();
        let own = own.map(|h| (h.algorithm(), h.finish_base64()));
        let metadata = own.iter().map(|(a, v)| (algo_meta(*a), v.clone())).collect();
        let p =
            PutParams { content_type: None, metadata, checksum: None, if_none_match_star: false, content_md5: false };
        let name = ObjectRef::new(upload.object.bucket.as_str(), part_name(&upload.upload_id, part_number));
        let v = self.upload_media(&name, media, &p, Some(crc.clone())).await?;
        let mut checksums: Vec<(ChecksumAlgorithm, String)> = own.into_iter().collect();
        checksums.push((ChecksumAlgorithm::Crc32c, crc));
        Ok(CompletedPart { part_number, etag: generation(&v).unwrap_or_default(), checksums })
    }

    /// The parts an upload holds.
    pub async fn list_part_objects(&self, upload: &MultipartUpload) -> Result<Vec<PartEntry>, Error> {
        let l = self.listed(upload).await?;
        Ok(l.parts.iter().map(|(n, v)| part_entry(*n, v)).collect())
    }

    /// Uploads in progress whose key starts with `prefix`; with an empty prefix (a
    /// whole bucket), also what is left under [`HIDDEN_PREFIX`] without a marker (parts
    /// or intermediate objects a failed cleanup left), each as an "upload" whose key is
    /// its own folder there, so `ferry rm --incomplete` and `rm -r` of the bucket remove
    /// it and the bucket can be deleted.
    pub async fn list_composites(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadEntry>, Error> {
        let items = self.list_raw(bucket, HIDDEN_PREFIX).await?;
        let mut out: Vec<UploadEntry> = items
            .iter()
            .filter_map(|it| {
                let name = it["name"].as_str()?;
                let id = name.strip_prefix(HIDDEN_PREFIX)?.strip_suffix("/upload")?;
                let key = it["metadata"][KEY_META].as_str()?;
                key.starts_with(prefix).then(|| UploadEntry {
                    key: key.to_owned(),
                    upload_id: id.to_owned(),
                    initiated: it["timeCreated"].as_str().and_then(parse_time).unwrap_or(SystemTime::UNIX_EPOCH),
                })
            })
            .collect();
        if prefix.is_empty() {
            let mut orphans: Vec<UploadEntry> = Vec::new();
            for it in &items {
                let Some(name) = it["name"].as_str() else { continue };
                let Some((id, _)) = name.strip_prefix(HIDDEN_PREFIX).and_then(|r| r.split_once('/')) else { continue };
                let has_marker = items.iter().any(|m| m["name"].as_str() == Some(marker(id).as_str()));
                if !has_marker && !orphans.iter().any(|o| o.upload_id == id) {
                    orphans.push(UploadEntry {
                        key: dir(id),
                        upload_id: id.to_owned(),
                        initiated: it["timeCreated"].as_str().and_then(parse_time).unwrap_or(SystemTime::UNIX_EPOCH),
                    });
                }
            }
            out.extend(orphans);
        }
        out.sort_by(|a, b| a.key.cmp(&b.key).then(a.initiated.cmp(&b.initiated)));
        Ok(out)
    }

    /// Joins the parts into the object (module note), then deletes them.
    pub async fn complete_composite(
        &self,
        upload: &MultipartUpload,
        parts: &[CompletedPart],
        whole_checksum: Option<String>,
    ) -> Result<CompleteMultipartOutput, Error> {
        let l = self.listed(upload).await?;
        let mut wanted: Vec<&CompletedPart> = parts.iter().collect();
        wanted.sort_by_key(|p| p.part_number);
        if wanted.is_empty() {
            return Err(invalid_part(upload, "an upload completes with at least one part".into()));
        }
        let mut sources = Vec::with_capacity(wanted.len());
        let mut crcs = Vec::with_capacity(wanted.len());
        for p in &wanted {
            let Some((_, v)) = l.parts.iter().find(|(n, _)| *n == p.part_number) else {
                return Err(invalid_part(upload, format!("part {} was not uploaded", p.part_number)));
            };
            let stored = v["crc32c"].as_str().unwrap_or_default().to_owned();
            if let Some((_, sent)) = p.checksums.iter().find(|(a, _)| *a == ChecksumAlgorithm::Crc32c) {
                if *sent != stored {
                    return Err(invalid_part(
                        upload,
                        format!("part {} holds other bytes than were sent", p.part_number),
                    ));
                }
            }
            sources.push(v["name"].as_str().unwrap_or_default().to_owned());
            crcs.push((stored, num(&v["size"]).unwrap_or(0)));
        }
        let expected = combine_crc32c(&crcs);
        let bucket = upload.object.bucket.clone();
        // Compose in a tree: 32 sources per call, until one call can make the object.
        let mut level = 0;
        let mut intermediate = Vec::new();
        while sources.len() > COMPOSE_MAX {
            level += 1;
            let groups: Vec<(usize, Vec<String>)> =
                sources.chunks(COMPOSE_MAX).map(|g| g.to_vec()).enumerate().collect();
            let id = upload.upload_id.clone();
            sources = futures_util::stream::iter(groups.into_iter().map(|(i, g)| {
                let (c, b) = (self.clone(), bucket.clone());
                let name = format!("{}compose-{level}-{i:05}", dir(&id));
                async move {
                    c.compose(&b, &g, &name, &serde_json::json!({}), false).await?;
                    Ok::<_, Error>(name)
                }
            }))
            .buffered(COMPOSE_CONCURRENCY)
            .try_collect()
            .await?;
            intermediate.extend(sources.iter().cloned());
        }
        let mut dest = serde_json::json!({});
        if let Some(ct) = l.marker["contentType"].as_str() {
            dest["contentType"] = ct.into();
        }
        let user: serde_json::Map<String, serde_json::Value> = l.marker["metadata"]
            .as_object()
            .map(|m| {
                m.iter().filter_map(|(k, v)| k.strip_prefix(USER_META).map(|k| (k.to_owned(), v.clone()))).collect()
            })
            .unwrap_or_default();
        if !user.is_empty() {
            dest["metadata"] = user.into();
        }
        let no_overwrite = l.marker["metadata"][IF_NONE_MATCH_META].as_str() == Some("*");
        let v = self.compose(&bucket, &sources, &upload.object.key, &dest, no_overwrite).await?;
        let stored = v["crc32c"].as_str().map(str::to_owned);
        let bad = match (&expected, &stored) {
            (Some(e), Some(s)) if e != s => Some(format!("the parts combine to CRC32C {e}, the object has {s}")),
            _ => match (&whole_checksum, upload.checksum, &stored) {
                (Some(w), Some(ChecksumAlgorithm::Crc32c), Some(s)) if w != s => {
                    Some(format!("the whole object's CRC32C is {s}, the caller stated {w}"))
                }
                _ => None,
            },
        };
        if let Some(message) = bad {
            let _ = self.delete_object(&upload.object).await;
            return Err(Error::integrity(format!("{}: {message}", gs(&upload.object)), None));
        }
        let mut names = l.all;
        names.extend(intermediate);
        self.drop_upload_objects(&bucket, names).await;
        Ok(CompleteMultipartOutput {
            etag: generation(&v).unwrap_or_default(),
            checksum: stored.map(|s| (ChecksumAlgorithm::Crc32c, s)),
        })
    }

    /// Drops an upload: its parts, intermediate objects and marker.
    pub async fn abort_composite(&self, upload: &MultipartUpload) -> Result<(), Error> {
        if upload.object.key == dir(&upload.upload_id) && !upload.upload_id.contains('/') {
            // Objects left without a marker (list_composites): everything in the folder.
            let names: Vec<String> = self
                .list_raw(&upload.object.bucket, &upload.object.key)
                .await?
                .iter()
                .filter_map(|it| it["name"].as_str().map(str::to_owned))
                .collect();
            if names.is_empty() {
                return Err(no_such_upload(upload));
            }
            return self.delete_all(&upload.object.bucket, &names).await;
        }
        let l = self.listed(upload).await?;
        let bucket = upload.object.bucket.clone();
        // The marker goes last, so a failure part-way leaves the upload listable.
        let mut names = l.all;
        let m = marker(&upload.upload_id);
        names.retain(|n| *n != m);
        self.delete_all(&bucket, &names).await?;
        self.delete_object(&ObjectRef::new(bucket.as_str(), m)).await
    }

    /// Deletes `names`; the first key that could not be deleted is the error.
    async fn delete_all(&self, bucket: &str, names: &[String]) -> Result<(), Error> {
        let out = self.delete_objects(bucket, names).await?;
        match out.errors.first() {
            Some(e) => {
                Err(Error::Service { status: 500, code: e.code.clone(), message: e.message.clone(), request_id: None })
            }
            None => Ok(()),
        }
    }

    async fn drop_upload_objects(&self, bucket: &str, names: Vec<String>) {
        match self.delete_objects(bucket, &names).await {
            Ok(out) if out.errors.is_empty() => {}
            Ok(out) => tracing::warn!(errors = ?out.errors, "gcs: some upload parts were left under {HIDDEN_PREFIX}"),
            Err(e) => tracing::warn!(error = %e, "gcs: upload parts were left under {HIDDEN_PREFIX}"),
        }
    }

    /// One compose call: `sources` (names in `bucket`) into `dest`.
    async fn compose(
        &self,
        bucket: &str,
        sources: &[String],
        dest: &str,
        resource: &serde_json::Value,
        no_overwrite: bool,
    ) -> Result<serde_json::Value, Error> {
        let body = serde_json::json!({
            "sourceObjects": sources.iter().map(|s| serde_json::json!({"name": s})).collect::<Vec<_>>(),
            "destination": resource,
        });
        let mut op = Op::path("objects.compose", Method::POST, format!("{}/compose", Self::object_path(bucket, dest)))
            .query_opt("ifGenerationMatch", no_overwrite.then_some("0"))
            .json(&body)?;
        // Composing the same sources again makes the same object.
        op.idempotent = true;
        self.execute(&mut op, |r| async move { Self::read_json(r).await }).await
    }
}

fn part_entry(n: u32, v: &serde_json::Value) -> PartEntry {
    let mut checksums = Vec::new();
    for a in ChecksumAlgorithm::ALL {
        if let Some(val) = v["metadata"][algo_meta(a)].as_str() {
            checksums.push((a, val.to_owned()));
        }
    }
    if let Some(c) = v["crc32c"].as_str() {
        if !checksums.iter().any(|(a, _)| *a == ChecksumAlgorithm::Crc32c) {
            checksums.push((ChecksumAlgorithm::Crc32c, c.to_owned()));
        }
    }
    PartEntry {
        part_number: n,
        last_modified: v["updated"].as_str().and_then(parse_time).unwrap_or(SystemTime::UNIX_EPOCH),
        etag: generation(v).unwrap_or_default(),
        size: num(&v["size"]).unwrap_or(0),
        checksums,
    }
}

fn no_such_upload(upload: &MultipartUpload) -> Error {
    Error::NotFound {
        code: "NoSuchUpload".into(),
        message: format!("no upload {} of {}", upload.upload_id, gs(&upload.object)),
        request_id: None,
    }
}

fn invalid_part(upload: &MultipartUpload, why: String) -> Error {
    Error::Service {
        status: 400,
        code: "InvalidPart".into(),
        message: format!("{}: {why}", gs(&upload.object)),
        request_id: None,
    }
}
