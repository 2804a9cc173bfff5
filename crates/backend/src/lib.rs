//! Storage backends of `ferry serve`: memory, disk and a synthetic read-only bucket.
//!
//! # Design
//!
//! The crate stores bytes and metadata and knows nothing of HTTP or S3 XML: the S3
//! handler computes ETags, checksums and validation and hands the finished
//! [`ObjectMeta`] in. One [`Backend`] type serves every storage mode so the handler
//! has a single, cheap-to-clone value (an `Arc` inside):
//!
//! ```text
//!             Backend { shared: Arc<Shared>, synthetic: Option<Arc<Synthetic>> }
//!                          |                              |
//!        Shared { index, storage }                 synthetic.rs: size from the key,
//!          |          |                            bytes from a counter-based PRNG
//!   Index (this file) Storage::Memory  -> rope of `Bytes` per object (body.rs)
//!   BTreeMap per bucket Storage::Disk  -> one file per object (disk.rs)
//! ```
//!
//! * The **index** is the same for both modes: bucket name -> `BucketState`, each with a
//!   `BTreeMap<String, Entry>` of objects (byte-wise key order, which is S3's listing
//!   order) and a map of in-progress multipart uploads. It sits behind `std` locks that
//!   are only taken for map operations and never held across an `.await`.
//! * **Listing** (list.rs) uses range queries and jumps past a rolled-up common prefix
//!   instead of walking the keys under it.
//! * **Writes** go through a [`BodyWriter`] (a staging area: rope in memory, temp file on
//!   disk) that `put_object` / `put_part` consume. Only after the bytes are durable (disk)
//!   does the index change, so a reader sees the old object or the new one, never a mix.
//! * **Reads** return an [`ObjectStream`] that produces chunks of at most
//!   [`MAX_CHUNK_BYTES`] lazily, as it is polled.
//!
//! Crash safety of the disk mode is argued in the note at the top of `disk.rs`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

mod body;
mod disk;
mod list;
mod synthetic;
#[cfg(test)]
mod tests;

pub use body::{BodyWriter, ObjectStream, MAX_CHUNK_BYTES};
pub use synthetic::{
    parse_synthetic_size, synthetic_bytes, synthetic_etag, CRC_CACHE_ENTRIES, DEFAULT_CRC_LIMIT_BYTES,
    SYNTHETIC_BLOCK_BYTES,
};

use body::{Rope, Staging};
use disk::DiskStore;
use synthetic::Synthetic;

/// Result of every backend operation.
pub type Result<T> = std::result::Result<T, BackendError>;

/// What went wrong, by meaning; the S3 handler maps each to its S3 error code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    #[error("the specified bucket does not exist")]
    NoSuchBucket,
    #[error("the specified key does not exist")]
    NoSuchKey,
    #[error("the specified multipart upload does not exist")]
    NoSuchUpload,
    #[error("the bucket already exists and is owned by you")]
    BucketAlreadyOwnedByYou,
    #[error("the bucket is not empty (objects or in-progress uploads)")]
    BucketNotEmpty,
    #[error("invalid bucket name: {0}")]
    InvalidBucketName(String),
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// A write (object, upload, delete) aimed at the read-only synthetic bucket.
    #[error("the bucket is read-only")]
    ReadOnly,
    /// `meta.size` / `part.size` disagrees with the bytes the writer received.
    #[error("size mismatch: metadata says {expected} bytes, body had {written}")]
    SizeMismatch { expected: u64, written: u64 },
    /// `complete_multipart` named a part that was never uploaded (S3 `InvalidPart`).
    #[error("part {0} was not uploaded")]
    InvalidPart(u32),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Metadata of one stored object, as the S3 handler composed it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ObjectMeta {
    pub key: String,
    pub size: u64,
    /// Quoted, exactly as sent in the `ETag` header.
    pub etag: String,
    pub last_modified: SystemTime,
    pub content_type: Option<String>,
    /// Other stored standard headers: content-encoding, content-disposition,
    /// cache-control, content-language, expires.
    pub headers: Vec<(String, String)>,
    /// `x-amz-meta-*` names without the prefix, lowercased.
    pub user_meta: Vec<(String, String)>,
    /// (algorithm "CRC32C"/"CRC32"/"CRC64NVME"/"SHA1"/"SHA256", base64 value).
    pub checksums: Vec<(String, String)>,
    pub parts_count: Option<u32>,
    /// Sizes of the parts a multipart object was completed from, in order (empty for an
    /// object stored in one piece): what GET/HEAD `?partNumber=N` addresses.
    #[serde(default)]
    pub part_sizes: Vec<u64>,
}

impl ObjectMeta {
    /// A metadata value with only key and size set (etag empty, time now); handy for
    /// tests and templates.
    pub fn new(key: impl Into<String>, size: u64) -> ObjectMeta {
        ObjectMeta {
            key: key.into(),
            size,
            etag: String::new(),
            last_modified: SystemTime::now(),
            content_type: None,
            headers: Vec::new(),
            user_meta: Vec::new(),
            checksums: Vec::new(),
            parts_count: None,
            part_sizes: Vec::new(),
        }
    }
}

/// One uploaded part of a multipart upload.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartMeta {
    pub part_number: u32,
    pub size: u64,
    pub etag: String,
    pub md5: [u8; 16],
    pub last_modified: SystemTime,
    pub checksums: Vec<(String, String)>,
}

/// An in-progress multipart upload.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UploadInfo {
    pub key: String,
    pub upload_id: String,
    pub initiated: SystemTime,
    /// The metadata template given to `create_multipart`.
    pub meta: ObjectMeta,
}

/// Bytes the memory mode holds, from [`Backend::memory_usage`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Sum of the stored objects' sizes.
    pub object_bytes: u64,
    /// Parts of in-progress multipart uploads, and the sum of their sizes.
    pub parts: u64,
    pub part_bytes: u64,
    /// What the blocks holding those bytes were allocated with: `object_bytes +
    /// part_bytes` when every body's length was announced (`BodyWriter::expect_len`),
    /// at most 1/8 of a block more per body otherwise.
    pub allocated_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketInfo {
    pub name: String,
    pub created: SystemTime,
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    pub objects: Vec<ObjectMeta>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    /// Last key or common prefix returned, when truncated; pass it as `start_after`.
    pub next_marker: Option<String>,
}

/// S3's key length limit in bytes (UTF-8).
/// <https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html>
pub const MAX_KEY_BYTES: usize = 1024;

/// Validates an object key: non-empty, at most [`MAX_KEY_BYTES`], no NUL.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(BackendError::InvalidKey("empty key".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(BackendError::InvalidKey(format!("key is {} bytes, the limit is {MAX_KEY_BYTES}", key.len())));
    }
    if key.contains('\0') {
        return Err(BackendError::InvalidKey("key contains NUL".into()));
    }
    Ok(())
}

/// Validates a bucket name against S3's general-purpose bucket naming rules
/// (<https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html>):
/// 3-63 characters of `a-z0-9.-`, starting and ending with a letter or digit, no `..`,
/// not shaped like an IPv4 address, none of the reserved prefixes/suffixes. A valid
/// name is always safe as a single directory name (no `/`, cannot start with `.`).
pub fn validate_bucket_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(BackendError::InvalidBucketName(format!("{name:?}: {why}")));
    if !(3..=63).contains(&name.len()) {
        return bad("length must be 3 to 63");
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-') {
        return bad("only lowercase letters, digits, '.' and '-' are allowed");
    }
    let b = name.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return bad("must start and end with a letter or digit");
    }
    if name.contains("..") {
        return bad("must not contain '..'");
    }
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() == 4 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit())) {
        return bad("must not be formatted as an IP address");
    }
    if name.starts_with("xn--") || name.starts_with("sthree-") {
        return bad("reserved prefix");
    }
    if name.ends_with("-s3alias") || name.ends_with("--ol-s3") {
        return bad("reserved suffix");
    }
    Ok(())
}

/// An object's entry in the index. On disk the body lives in the file whose path
/// `disk.rs` derives from (bucket, key), so only memory entries carry data.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) meta: ObjectMeta,
    pub(crate) rope: Option<Arc<Rope>>,
}

pub(crate) struct PartEntry {
    pub(crate) meta: PartMeta,
    pub(crate) rope: Option<Arc<Rope>>,
}

pub(crate) struct UploadState {
    pub(crate) info: UploadInfo,
    pub(crate) parts: BTreeMap<u32, PartEntry>,
    /// Held by a Complete or an Abort from its look at the parts until the upload is
    /// gone. A second one (a client's retry, or a new run's Complete while a killed run's
    /// is still being assembled) waits, then finds no upload (S3's NoSuchUpload), instead
    /// of reading part files the first has just removed.
    pub(crate) finishing: Arc<tokio::sync::Mutex<()>>,
}

impl UploadState {
    pub(crate) fn new(info: UploadInfo, parts: BTreeMap<u32, PartEntry>) -> UploadState {
        UploadState { info, parts, finishing: Arc::default() }
    }
}

pub(crate) struct BucketInner {
    /// Set by `delete_bucket` before the bucket leaves the map, so a writer holding an
    /// `Arc<BucketState>` from before the delete does not insert into a dead bucket.
    pub(crate) deleted: bool,
    pub(crate) objects: BTreeMap<String, Entry>,
    pub(crate) uploads: HashMap<String, UploadState>,
}

pub(crate) struct BucketState {
    pub(crate) created: SystemTime,
    pub(crate) inner: RwLock<BucketInner>,
    /// The versioning state last set with PutBucketVersioning ("Suspended"), if any.
    pub(crate) versioning: RwLock<Option<String>>,
}

impl BucketState {
    pub(crate) fn new(created: SystemTime) -> BucketState {
        BucketState {
            created,
            inner: RwLock::new(BucketInner { deleted: false, objects: BTreeMap::new(), uploads: HashMap::new() }),
            versioning: RwLock::new(None),
        }
    }
}

pub(crate) enum Storage {
    Memory,
    Disk(DiskStore),
}

pub(crate) struct Shared {
    pub(crate) buckets: RwLock<BTreeMap<String, Arc<BucketState>>>,
    pub(crate) storage: Storage,
    /// Serialises bucket creation and deletion (rare), so their multi-step disk work
    /// does not interleave.
    bucket_ops: tokio::sync::Mutex<()>,
}

/// The storage of `ferry serve`. Cheap to clone; all clones share one store.
#[derive(Clone)]
pub struct Backend {
    shared: Arc<Shared>,
    synthetic: Option<Arc<Synthetic>>,
}

// A poisoned lock only means another request panicked mid-operation; the maps are
// still structurally valid (every mutation is a single insert/remove), so keep going.
fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// Url-safe random upload id: 128 random bits as 32 lowercase hex digits.
fn new_upload_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl Backend {
    fn from_parts(storage: Storage, buckets: BTreeMap<String, Arc<BucketState>>) -> Backend {
        Backend {
            shared: Arc::new(Shared {
                buckets: RwLock::new(buckets),
                storage,
                bucket_ops: tokio::sync::Mutex::new(()),
            }),
            synthetic: None,
        }
    }

    /// A backend that keeps everything in memory.
    pub fn memory() -> Backend {
        Backend::from_parts(Storage::Memory, BTreeMap::new())
    }

    /// A backend persisted under `dir`: creates `dir` if missing, removes stale temp
    /// files, loads the index. Files that fail to parse are reported on stderr and
    /// ignored.
    pub async fn open_disk(dir: &Path) -> Result<Backend> {
        let dir = dir.to_path_buf();
        let (store, buckets) =
            tokio::task::spawn_blocking(move || DiskStore::open(&dir)).await.map_err(join_error)??;
        Ok(Backend::from_parts(Storage::Disk(store), buckets))
    }

    /// Adds the read-only synthetic bucket `name` (see `synthetic.rs`). It shadows a
    /// stored bucket of the same name.
    pub fn with_synthetic_bucket(mut self, name: &str) -> Backend {
        self.synthetic = Some(Arc::new(Synthetic::new(name)));
        self
    }

    /// Objects of the synthetic bucket larger than `bytes` carry no CRC32C checksum
    /// (default [`DEFAULT_CRC_LIMIT_BYTES`]); call after `with_synthetic_bucket`.
    pub fn with_synthetic_crc_limit(mut self, bytes: u64) -> Backend {
        if let Some(s) = &self.synthetic {
            self.synthetic = Some(Arc::new(Synthetic::new(s.name()).with_crc_limit(bytes)));
        }
        self
    }

    /// What the memory mode holds in its index (objects and parts of in-progress
    /// uploads); all zero on disk. Bodies an open GET still streams after a delete or an
    /// overwrite are not counted: they go when the stream ends.
    pub fn memory_usage(&self) -> MemoryUsage {
        let mut u = MemoryUsage::default();
        for b in read(&self.shared.buckets).values() {
            let inner = read(&b.inner);
            for rope in inner.objects.values().filter_map(|e| e.rope.as_deref()) {
                u.object_bytes += rope.len();
                u.allocated_bytes += rope.allocated_bytes();
            }
            for part in inner.uploads.values().flat_map(|up| up.parts.values()) {
                if let Some(rope) = part.rope.as_deref() {
                    u.parts += 1;
                    u.part_bytes += rope.len();
                    u.allocated_bytes += rope.allocated_bytes();
                }
            }
        }
        u
    }

    pub fn synthetic_bucket(&self) -> Option<&str> {
        self.synthetic.as_ref().map(|s| s.name())
    }

    fn synthetic_for(&self, bucket: &str) -> Option<&Synthetic> {
        self.synthetic.as_deref().filter(|s| s.name() == bucket)
    }

    fn bucket(&self, name: &str) -> Result<Arc<BucketState>> {
        read(&self.shared.buckets).get(name).cloned().ok_or(BackendError::NoSuchBucket)
    }

    fn disk(&self) -> Option<&DiskStore> {
        match &self.shared.storage {
            Storage::Memory => None,
            Storage::Disk(d) => Some(d),
        }
    }

    /// Creates bucket `name` after checking S3's naming rules.
    pub async fn create_bucket(&self, name: &str) -> Result<()> {
        let (this, name) = (self.clone(), name.to_string());
        detached(async move { this.create_bucket_now(&name).await }).await
    }

    /// Deletes a bucket without objects, and with it any unfinished multipart uploads
    /// (as S3 does); `BucketNotEmpty` if it holds objects.
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        let (this, name) = (self.clone(), name.to_string());
        detached(async move { this.delete_bucket_now(&name).await }).await
    }

    /// Stores `body` as `meta.key`, atomically replacing any previous object;
    /// `meta.size` must equal the bytes written.
    pub async fn put_object(&self, bucket: &str, body: BodyWriter, meta: ObjectMeta) -> Result<()> {
        let (this, bucket) = (self.clone(), bucket.to_string());
        detached(async move { this.put_object_now(&bucket, body, meta).await }).await
    }

    /// Deletes `key`; succeeds when the key does not exist.
    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let (this, bucket, key) = (self.clone(), bucket.to_string(), key.to_string());
        detached(async move { this.delete_object_now(&bucket, &key).await }).await
    }

    /// Starts a multipart upload for `template.key`; returns its url-safe id.
    pub async fn create_multipart(&self, bucket: &str, template: ObjectMeta) -> Result<String> {
        let (this, bucket) = (self.clone(), bucket.to_string());
        detached(async move { this.create_multipart_now(&bucket, template).await }).await
    }

    /// Stores one part, replacing an earlier part with the same number.
    pub async fn put_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        body: BodyWriter,
        part: PartMeta,
    ) -> Result<()> {
        let (this, bucket, key, id) = (self.clone(), bucket.to_string(), key.to_string(), upload_id.to_string());
        detached(async move { this.put_part_now(&bucket, &key, &id, body, part).await }).await
    }

    /// Abandons an upload and deletes its parts.
    pub async fn abort_multipart(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        let (this, bucket, key, id) = (self.clone(), bucket.to_string(), key.to_string(), upload_id.to_string());
        detached(async move { this.abort_multipart_now(&bucket, &key, &id).await }).await
    }

    /// Concatenates `part_numbers` (in that order) into the object `key` atomically,
    /// then removes the upload and all its parts. `meta.size` must be the sum of the
    /// parts' sizes; `InvalidPart` names a part that was never uploaded.
    pub async fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_numbers: &[u32],
        meta: ObjectMeta,
    ) -> Result<()> {
        let (this, bucket, key, id) = (self.clone(), bucket.to_string(), key.to_string(), upload_id.to_string());
        let parts = part_numbers.to_vec();
        detached(async move { this.complete_multipart_now(&bucket, &key, &id, &parts, meta).await }).await
    }

    /// All buckets sorted by name, the synthetic one included.
    pub async fn list_buckets(&self) -> Vec<BucketInfo> {
        let mut out: Vec<BucketInfo> = read(&self.shared.buckets)
            .iter()
            .filter(|(name, _)| self.synthetic_for(name).is_none())
            .map(|(name, b)| BucketInfo { name: name.clone(), created: b.created })
            .collect();
        if let Some(s) = &self.synthetic {
            out.push(BucketInfo { name: s.name().to_string(), created: synthetic::created() });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    async fn create_bucket_now(&self, name: &str) -> Result<()> {
        validate_bucket_name(name)?;
        if self.synthetic_for(name).is_some() {
            return Err(BackendError::BucketAlreadyOwnedByYou);
        }
        let _ops = self.shared.bucket_ops.lock().await;
        if read(&self.shared.buckets).contains_key(name) {
            return Err(BackendError::BucketAlreadyOwnedByYou);
        }
        let created = SystemTime::now();
        if let Some(d) = self.disk() {
            let d = d.clone();
            let n = name.to_string();
            blocking(move || d.create_bucket(&n, created)).await?;
        }
        write(&self.shared.buckets).insert(name.to_string(), Arc::new(BucketState::new(created)));
        Ok(())
    }

    /// The bucket's versioning status as last set (`None`: never set).
    pub async fn bucket_versioning(&self, name: &str) -> Result<Option<String>> {
        if self.synthetic_for(name).is_some() {
            return Ok(None);
        }
        Ok(read(&self.bucket(name)?.versioning).clone())
    }

    /// Records the bucket's versioning status (the S3 handler decides which it accepts);
    /// on disk it is kept in the bucket's metadata file.
    pub async fn set_bucket_versioning(&self, name: &str, status: &str) -> Result<()> {
        if self.synthetic_for(name).is_some() {
            return Err(BackendError::ReadOnly);
        }
        let _ops = self.shared.bucket_ops.lock().await;
        let b = self.bucket(name)?;
        if let Some(d) = self.disk() {
            let (d, n, created, s) = (d.clone(), name.to_string(), b.created, status.to_string());
            blocking(move || d.write_bucket_meta(&n, created, Some(&s))).await?;
        }
        *write(&b.versioning) = Some(status.to_string());
        Ok(())
    }

    pub async fn head_bucket(&self, name: &str) -> Result<()> {
        if self.synthetic_for(name).is_some() {
            return Ok(());
        }
        self.bucket(name).map(|_| ())
    }

    async fn delete_bucket_now(&self, name: &str) -> Result<()> {
        if self.synthetic_for(name).is_some() {
            return Err(BackendError::ReadOnly);
        }
        let _ops = self.shared.bucket_ops.lock().await;
        let b = self.bucket(name)?;
        {
            let mut inner = write(&b.inner);
            if !inner.objects.is_empty() {
                return Err(BackendError::BucketNotEmpty);
            }
            inner.deleted = true;
        }
        if let Some(d) = self.disk() {
            let d = d.clone();
            let n = name.to_string();
            if let Err(e) = blocking(move || d.delete_bucket(&n)).await {
                write(&b.inner).deleted = false;
                return Err(e);
            }
        }
        write(&self.shared.buckets).remove(name);
        // The bucket is gone; its unfinished uploads go with it. On disk an upload left
        // by a crash here names a bucket that no longer exists and is removed at the
        // next open.
        let uploads: Vec<String> = write(&b.inner).uploads.drain().map(|(id, _)| id).collect();
        if let Some(d) = self.disk() {
            let d = d.clone();
            blocking(move || {
                for id in uploads {
                    d.remove_upload(&id)?;
                }
                Ok(())
            })
            .await?;
        }
        Ok(())
    }

    /// A staging area for one object or part body of `bucket`.
    pub async fn body_writer(&self, bucket: &str) -> Result<BodyWriter> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::ReadOnly);
        }
        self.bucket(bucket)?;
        Ok(BodyWriter::new(match self.disk() {
            None => Staging::memory(),
            Some(d) => {
                // Created now (not at the first flush) so that a write() cancelled
                // mid-flush can never create a file after the writer's Drop ran.
                let path = d.new_temp_path();
                let p = path.clone();
                let file =
                    blocking(move || Ok(std::fs::OpenOptions::new().write(true).create_new(true).open(&p)?)).await?;
                Staging::disk(path, file)
            }
        }))
    }

    /// Stores `body` as `meta.key`, atomically replacing any previous object.
    async fn put_object_now(&self, bucket: &str, body: BodyWriter, meta: ObjectMeta) -> Result<()> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::ReadOnly);
        }
        validate_key(&meta.key)?;
        let b = self.bucket(bucket)?;
        if body.written() != meta.size {
            return Err(BackendError::SizeMismatch { expected: meta.size, written: body.written() });
        }
        match self.disk() {
            None => {
                let rope = Some(Arc::new(body.into_rope()?));
                let mut inner = write(&b.inner);
                if inner.deleted {
                    return Err(BackendError::NoSuchBucket);
                }
                inner.objects.insert(meta.key.clone(), Entry { meta, rope });
                Ok(())
            }
            Some(d) => {
                let staged = body.finish_disk(disk::OBJECT_MAGIC, &meta).await?;
                let _key_lock = d.lock_object(bucket, &meta.key).await;
                let (dd, bn, key) = (d.clone(), bucket.to_string(), meta.key.clone());
                blocking(move || dd.commit_object(staged, &bn, &key)).await?;
                let mut inner = write(&b.inner);
                if inner.deleted {
                    return Err(BackendError::NoSuchBucket);
                }
                inner.objects.insert(meta.key.clone(), Entry { meta, rope: None });
                Ok(())
            }
        }
    }

    pub async fn head_object(&self, bucket: &str, key: &str) -> Result<ObjectMeta> {
        validate_key(key)?;
        if let Some(s) = self.synthetic_for(bucket) {
            return s.meta(key).await;
        }
        let b = self.bucket(bucket)?;
        let inner = read(&b.inner);
        inner.objects.get(key).map(|e| e.meta.clone()).ok_or(BackendError::NoSuchKey)
    }

    /// The object's metadata and a lazy stream of its bytes, or of `range`
    /// (start, end inclusive) when given. A range reaching past the end of the object is
    /// clamped (the object may have been replaced since the caller validated it).
    pub async fn get_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(ObjectMeta, ObjectStream)> {
        validate_key(key)?;
        if let Some(s) = self.synthetic_for(bucket) {
            let meta = s.meta(key).await?;
            let (start, len) = clamp_range(range, meta.size);
            let stream = ObjectStream::synthetic(key, start, len);
            return Ok((meta, stream));
        }
        let b = self.bucket(bucket)?;
        let entry = read(&b.inner).objects.get(key).cloned().ok_or(BackendError::NoSuchKey)?;
        match (self.disk(), entry.rope) {
            (None, Some(rope)) => {
                let (start, len) = clamp_range(range, entry.meta.size);
                Ok((entry.meta, ObjectStream::rope(rope, start, len)))
            }
            (Some(d), _) => {
                // Open the file now; the open descriptor pins this version's inode, and
                // the metadata is read back from that same file so both always agree.
                let (dd, bn, k) = (d.clone(), bucket.to_string(), key.to_string());
                let (file, meta) = blocking(move || dd.open_object(&bn, &k)).await?;
                let (start, len) = clamp_range(range, meta.size);
                let stream = ObjectStream::file(file, start, len).await?;
                Ok((meta, stream))
            }
            (None, None) => Err(BackendError::NoSuchKey),
        }
    }

    /// Deletes `key`; succeeds when the key does not exist.
    async fn delete_object_now(&self, bucket: &str, key: &str) -> Result<()> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::ReadOnly);
        }
        validate_key(key)?;
        let b = self.bucket(bucket)?;
        if let Some(d) = self.disk() {
            let _key_lock = d.lock_object(bucket, key).await;
            if !read(&b.inner).objects.contains_key(key) {
                return Ok(());
            }
            let (dd, bn, k) = (d.clone(), bucket.to_string(), key.to_string());
            blocking(move || dd.delete_object(&bn, &k)).await?;
            write(&b.inner).objects.remove(key);
        } else {
            write(&b.inner).objects.remove(key);
        }
        Ok(())
    }

    /// One page of the listing of `bucket`, with S3 ListObjects semantics (see list.rs).
    pub async fn list_objects(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage> {
        if self.synthetic_for(bucket).is_some() {
            return Ok(ListPage::default());
        }
        let b = self.bucket(bucket)?;
        let inner = read(&b.inner);
        Ok(list::list_page(&inner.objects, |e| &e.meta, prefix, delimiter, start_after, max_keys))
    }

    /// Starts a multipart upload for `template.key`; returns its url-safe id.
    async fn create_multipart_now(&self, bucket: &str, template: ObjectMeta) -> Result<String> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::ReadOnly);
        }
        validate_key(&template.key)?;
        let b = self.bucket(bucket)?;
        let info = UploadInfo {
            key: template.key.clone(),
            upload_id: new_upload_id(),
            initiated: SystemTime::now(),
            meta: template,
        };
        if let Some(d) = self.disk() {
            let (dd, bn, i) = (d.clone(), bucket.to_string(), info.clone());
            blocking(move || dd.create_upload(&bn, &i)).await?;
        }
        let id = info.upload_id.clone();
        let mut inner = write(&b.inner);
        if inner.deleted {
            return Err(BackendError::NoSuchBucket);
        }
        inner.uploads.insert(id.clone(), UploadState::new(info, BTreeMap::new()));
        Ok(id)
    }

    /// The upload `upload_id` of `key`; `NoSuchUpload` if unknown or for another key.
    pub async fn upload_info(&self, bucket: &str, key: &str, upload_id: &str) -> Result<UploadInfo> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::NoSuchUpload);
        }
        let b = self.bucket(bucket)?;
        let inner = read(&b.inner);
        lookup_upload(&inner, key, upload_id).map(|u| u.info.clone())
    }

    /// Stores one part, replacing an earlier part with the same number.
    async fn put_part_now(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        body: BodyWriter,
        part: PartMeta,
    ) -> Result<()> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::ReadOnly);
        }
        let b = self.bucket(bucket)?;
        lookup_upload(&read(&b.inner), key, upload_id)?;
        if body.written() != part.size {
            return Err(BackendError::SizeMismatch { expected: part.size, written: body.written() });
        }
        let rope = match self.disk() {
            None => Some(Arc::new(body.into_rope()?)),
            Some(d) => {
                let staged = body.finish_disk(disk::PART_MAGIC, &part).await?;
                let _part_lock = d.lock_part(upload_id, part.part_number).await;
                let (dd, id, n) = (d.clone(), upload_id.to_string(), part.part_number);
                blocking(move || dd.commit_part(staged, &id, n)).await?;
                None
            }
        };
        let mut inner = write(&b.inner);
        let upload = lookup_upload_mut(&mut inner, key, upload_id)?;
        upload.parts.insert(part.part_number, PartEntry { meta: part, rope });
        Ok(())
    }

    /// The parts uploaded so far, by ascending part number.
    pub async fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> Result<Vec<PartMeta>> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::NoSuchUpload);
        }
        let b = self.bucket(bucket)?;
        let inner = read(&b.inner);
        let u = lookup_upload(&inner, key, upload_id)?;
        Ok(u.parts.values().map(|p| p.meta.clone()).collect())
    }

    /// In-progress uploads of `bucket`, sorted by key, then initiation time.
    pub async fn list_uploads(&self, bucket: &str) -> Result<Vec<UploadInfo>> {
        if self.synthetic_for(bucket).is_some() {
            return Ok(Vec::new());
        }
        let b = self.bucket(bucket)?;
        let mut out: Vec<UploadInfo> = read(&b.inner).uploads.values().map(|u| u.info.clone()).collect();
        out.sort_by(|a, b| (&a.key, a.initiated, &a.upload_id).cmp(&(&b.key, b.initiated, &b.upload_id)));
        Ok(out)
    }

    async fn abort_multipart_now(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::NoSuchUpload);
        }
        let b = self.bucket(bucket)?;
        let _finishing = finishing(&b, key, upload_id).await?;
        lookup_upload(&read(&b.inner), key, upload_id)?;
        if let Some(d) = self.disk() {
            let (dd, id) = (d.clone(), upload_id.to_string());
            blocking(move || dd.remove_upload(&id)).await?;
        }
        write(&b.inner).uploads.remove(upload_id);
        Ok(())
    }

    /// Concatenates `part_numbers` (in that order) into the object `key` atomically,
    /// then removes the upload and all its parts. `meta.size` must be the sum of the
    /// parts' sizes.
    async fn complete_multipart_now(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_numbers: &[u32],
        meta: ObjectMeta,
    ) -> Result<()> {
        if self.synthetic_for(bucket).is_some() {
            return Err(BackendError::NoSuchUpload);
        }
        validate_key(key)?;
        let b = self.bucket(bucket)?;
        let _finishing = finishing(&b, key, upload_id).await?;
        let mut meta = meta;
        meta.key = key.to_string();
        // Snapshot the chosen parts (the upload looked up again: one that finished while
        // this waited is gone).
        let parts: Vec<(PartMeta, Option<Arc<Rope>>)> = {
            let inner = read(&b.inner);
            let u = lookup_upload(&inner, key, upload_id)?;
            part_numbers
                .iter()
                .map(|n| u.parts.get(n).map(|p| (p.meta.clone(), p.rope.clone())).ok_or(BackendError::InvalidPart(*n)))
                .collect::<Result<_>>()?
        };
        let total: u64 = parts.iter().map(|(p, _)| p.size).sum();
        if total != meta.size {
            return Err(BackendError::SizeMismatch { expected: meta.size, written: total });
        }
        let rope = match self.disk() {
            None => Some(Arc::new(Rope::concat(parts.iter().filter_map(|(_, r)| r.as_deref())))),
            Some(d) => {
                let (dd, id, m) = (d.clone(), upload_id.to_string(), meta.clone());
                let sizes: Vec<(u32, u64)> = parts.iter().map(|(p, _)| (p.part_number, p.size)).collect();
                let staged = blocking(move || dd.assemble_parts(&id, &sizes, &m)).await?;
                let _key_lock = d.lock_object(bucket, key).await;
                let (dd, bn, k) = (d.clone(), bucket.to_string(), key.to_string());
                blocking(move || dd.commit_object(staged, &bn, &k)).await?;
                None
            }
        };
        {
            let mut inner = write(&b.inner);
            if inner.deleted {
                return Err(BackendError::NoSuchBucket);
            }
            inner.objects.insert(key.to_string(), Entry { meta, rope });
            inner.uploads.remove(upload_id);
        }
        if let Some(d) = self.disk() {
            // The object is committed; a crash before this leaves a stale upload that
            // the client can still abort (and its parts are still valid).
            let (dd, id) = (d.clone(), upload_id.to_string());
            blocking(move || dd.remove_upload(&id)).await?;
        }
        Ok(())
    }
}

/// The upload's `finishing` lock, held (UploadState): the caller looks the upload up again
/// under it, since one that finished while this waited is gone.
async fn finishing(b: &BucketState, key: &str, upload_id: &str) -> Result<tokio::sync::OwnedMutexGuard<()>> {
    let lock = lookup_upload(&read(&b.inner), key, upload_id)?.finishing.clone();
    Ok(lock.lock_owned().await)
}

fn lookup_upload<'a>(inner: &'a BucketInner, key: &str, upload_id: &str) -> Result<&'a UploadState> {
    inner.uploads.get(upload_id).filter(|u| u.info.key == key).ok_or(BackendError::NoSuchUpload)
}

fn lookup_upload_mut<'a>(inner: &'a mut BucketInner, key: &str, upload_id: &str) -> Result<&'a mut UploadState> {
    inner.uploads.get_mut(upload_id).filter(|u| u.info.key == key).ok_or(BackendError::NoSuchUpload)
}

/// (start, length) of an inclusive range clamped to an object of `size` bytes.
fn clamp_range(range: Option<(u64, u64)>, size: u64) -> (u64, u64) {
    match range {
        None => (0, size),
        Some((start, end)) => {
            let start = start.min(size);
            let end_excl = end.saturating_add(1).min(size).max(start);
            (start, end_excl - start)
        }
    }
}

/// Runs a mutation as its own task and awaits it. A caller dropped mid-operation (client
/// gone) then cannot stop a commit between its durable step and the index update, which
/// would leave the index disagreeing with the disk until the next restart.
async fn detached<T, F>(f: F) -> Result<T>
where
    F: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(f).await.map_err(join_error)?
}

fn join_error(e: tokio::task::JoinError) -> BackendError {
    BackendError::Io(std::io::Error::other(e))
}

/// Runs blocking filesystem work off the async worker threads.
async fn blocking<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(join_error)?
}
