//! The disk layout and its crash-safety argument.
//!
//! # Layout
//!
//! ```text
//! DIR/
//!   .ferry-lock                     flock'd while a process has DIR open
//!   .ferry-tmp/                     staging; everything here is garbage at startup
//!   .ferry-uploads/<upload_id>/     one in-progress multipart upload
//!       upload.json                 { bucket, info: UploadInfo }
//!       part-00001 ...              part data + PartMeta trailer
//!   <bucket>/                       bucket names are validated: [a-z0-9.-], never
//!       bucket.json                 starts with '.', so never clashes with the above
//!       <hh>/<sha256(key) hex>      object data + ObjectMeta trailer; hh = first 2 hex
//! ```
//!
//! No path is ever derived from key text: a key only contributes its SHA-256, so `../`,
//! absolute-looking keys, 1024-byte keys, odd UTF-8 and keys differing only by case all
//! map to a fixed-shape name inside `DIR/<bucket>/`. Upload ids in paths are our own
//! 32-hex ids, looked up in the index before any path is built.
//!
//! # File format (objects and parts)
//!
//! ```text
//! [ data: size bytes ][ metadata JSON: n bytes ][ n: u64 LE ][ magic: 8 bytes ]
//! ```
//!
//! Data and metadata live in one file, so they can never disagree; the magic and the
//! length check (`file len == size + n + 16`) reject torn or foreign files.
//!
//! # Crash safety
//!
//! Every visible change is a single `rename(2)` of a fully written, fsynced file or
//! directory from `.ferry-tmp` (same filesystem), followed by an fsync of the directory
//! that received it; only then does the in-memory index change.
//!
//! * PUT: body -> temp file, trailer appended, `fsync`, rename over
//!   `<bucket>/<hh>/<hash>`, fsync `<hh>`. A crash before the rename leaves only a temp
//!   file (removed at the next open); after it, the new object is complete. A reader that
//!   opened the old file keeps reading the old inode.
//! * Multipart complete: parts are copied (`copy_file_range` via `std::io::copy`) into a
//!   temp object file, then committed as a PUT; the upload directory is removed
//!   afterwards. A crash in between leaves the object *and* the upload, which the client
//!   can still abort; never a partial object.
//! * Upload create / bucket create: the directory is prepared in `.ferry-tmp` with its
//!   JSON file fsynced, then renamed into place. Abort / bucket delete: rename into
//!   `.ferry-tmp` (atomic disappearance), then delete recursively at leisure.
//! * Startup: `.ferry-tmp` is emptied; each file is parsed and one that fails (bad magic,
//!   bad length, bad JSON, name not the hash of its key) is reported on stderr and
//!   ignored, never served.
//!
//! Concurrent commits of the same key are serialised by a striped async lock held across
//! rename + directory fsync + index update, so the index always describes the file that
//! won; reads take the metadata from the opened file itself, so they are consistent even
//! while a replace is in flight.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::body::StagedFile;
use crate::{
    validate_bucket_name, BackendError, BucketState, Entry, ObjectMeta, PartEntry, PartMeta, Result, UploadInfo,
    UploadState,
};

/// Trailer magic of an object file.
pub(crate) const OBJECT_MAGIC: [u8; 8] = *b"FERRYOB1";
/// Trailer magic of a part file.
pub(crate) const PART_MAGIC: [u8; 8] = *b"FERRYPT1";
/// Upper bound on a trailer's JSON; metadata is bounded by S3's 2 KiB user-metadata and
/// 1 KiB key limits, so 16 MiB only guards against reading garbage lengths.
const MAX_TRAILER_JSON_BYTES: u64 = 16 << 20;
/// Number of commit lock stripes: enough that unrelated keys rarely share one on a
/// 2-core box with a few hundred concurrent requests.
const LOCK_STRIPES: usize = 256;

const TMP_DIR: &str = ".ferry-tmp";
const UPLOADS_DIR: &str = ".ferry-uploads";
const LOCK_FILE: &str = ".ferry-lock";
const BUCKET_META: &str = "bucket.json";
const UPLOAD_META: &str = "upload.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct BucketMetaFile {
    created: SystemTime,
    /// The versioning status last set (PutBucketVersioning); absent in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    versioning: Option<String>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct UploadMetaFile {
    bucket: String,
    info: UploadInfo,
}

struct DiskInner {
    dir: PathBuf,
    tmp: PathBuf,
    uploads: PathBuf,
    stripes: Vec<tokio::sync::Mutex<()>>,
    /// Holds the exclusive flock on `.ferry-lock` for the life of the store.
    _lock: File,
}

#[derive(Clone)]
pub(crate) struct DiskStore {
    inner: Arc<DiskInner>,
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("ferry-backend: {msg}");
}

fn key_hash_hex(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn random_name(kind: &str) -> String {
    format!("{kind}-{:032x}", rand::random::<u128>())
}

/// `[json][len u64 LE][magic]` for `meta`.
pub(crate) fn encode_trailer<T: serde::Serialize>(magic: [u8; 8], meta: &T) -> Result<Vec<u8>> {
    let mut out = serde_json::to_vec(meta).map_err(io::Error::other)?;
    let n = out.len() as u64;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&magic);
    Ok(out)
}

/// Parses the trailer of `file`; returns the metadata and the data length.
pub(crate) fn read_trailer<T: serde::de::DeserializeOwned>(file: &File, magic: [u8; 8]) -> io::Result<(T, u64)> {
    let bad = |why: &str| io::Error::new(ErrorKind::InvalidData, why.to_string());
    let len = file.metadata()?.len();
    if len < 16 {
        return Err(bad("file too short for a trailer"));
    }
    let mut tail = [0u8; 16];
    file.read_exact_at(&mut tail, len - 16)?;
    if tail[8..] != magic {
        return Err(bad("bad magic"));
    }
    let n = u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
    if n > MAX_TRAILER_JSON_BYTES || n > len - 16 {
        return Err(bad("bad trailer length"));
    }
    let mut json = vec![0u8; n as usize];
    file.read_exact_at(&mut json, len - 16 - n)?;
    let meta = serde_json::from_slice(&json).map_err(|e| bad(&format!("bad metadata: {e}")))?;
    Ok((meta, len - 16 - n))
}

fn not_found_as(e: io::Error, as_err: BackendError) -> BackendError {
    if e.kind() == ErrorKind::NotFound {
        as_err
    } else {
        BackendError::Io(e)
    }
}

impl DiskStore {
    /// Opens (creating if needed) `dir`, empties the staging dir and loads the index.
    pub(crate) fn open(dir: &Path) -> Result<(DiskStore, BTreeMap<String, Arc<BucketState>>)> {
        fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let lock = fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK_FILE))?;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            return Err(BackendError::Io(io::Error::new(
                e.kind(),
                format!("{} is in use by another ferry process: {e}", dir.display()),
            )));
        }
        let tmp = dir.join(TMP_DIR);
        let uploads = dir.join(UPLOADS_DIR);
        fs::create_dir_all(&tmp)?;
        fs::create_dir_all(&uploads)?;
        for e in fs::read_dir(&tmp)? {
            let p = e?.path();
            let r = if p.is_dir() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
            if let Err(e) = r {
                log(format_args!("cannot remove stale temp {}: {e}", p.display()));
            }
        }
        let store = DiskStore {
            inner: Arc::new(DiskInner {
                dir,
                tmp,
                uploads,
                stripes: (0..LOCK_STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
                _lock: lock,
            }),
        };
        let buckets = store.load()?;
        Ok((store, buckets))
    }

    fn load(&self) -> Result<BTreeMap<String, Arc<BucketState>>> {
        let mut buckets = BTreeMap::new();
        for e in fs::read_dir(&self.inner.dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let path = e.path();
            if !path.is_dir() {
                log(format_args!("ignoring stray file {}", path.display()));
                continue;
            }
            if validate_bucket_name(&name).is_err() {
                log(format_args!("ignoring directory {} (not a bucket name)", path.display()));
                continue;
            }
            let created = match fs::read(path.join(BUCKET_META))
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<BucketMetaFile>(&b).map_err(|e| e.to_string()))
            {
                Ok(m) => m,
                Err(e) => {
                    log(format_args!("ignoring directory {}: bad {BUCKET_META}: {e}", path.display()));
                    continue;
                }
            };
            let state = BucketState::new(created.created);
            *state.versioning.write().expect("fresh lock") = created.versioning;
            {
                let mut inner = state.inner.write().expect("fresh lock");
                load_objects(&path, &mut inner.objects)?;
            }
            buckets.insert(name, Arc::new(state));
        }
        self.load_uploads(&buckets)?;
        Ok(buckets)
    }

    fn load_uploads(&self, buckets: &BTreeMap<String, Arc<BucketState>>) -> Result<()> {
        for e in fs::read_dir(&self.inner.uploads)? {
            let path = e?.path();
            let id = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let meta: UploadMetaFile = match fs::read(path.join(UPLOAD_META))
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            {
                Ok(m) => m,
                Err(e) => {
                    log(format_args!("ignoring upload {}: bad {UPLOAD_META}: {e}", path.display()));
                    continue;
                }
            };
            if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) || meta.info.upload_id != id {
                log(format_args!("ignoring upload {}: id does not match directory", path.display()));
                continue;
            }
            let Some(bucket) = buckets.get(&meta.bucket) else {
                // DeleteBucket removes the bucket first, then its uploads: a crash in
                // between leaves this one behind.
                log(format_args!("removing upload {}: bucket {} is gone", path.display(), meta.bucket));
                self.remove_upload(&id)?;
                continue;
            };
            let mut parts = BTreeMap::new();
            for pe in fs::read_dir(&path)? {
                let pp = pe?.path();
                let fname = pp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if fname == UPLOAD_META {
                    continue;
                }
                let number: Option<u32> = fname.strip_prefix("part-").and_then(|n| n.parse().ok());
                let parsed = File::open(&pp).and_then(|f| read_trailer::<PartMeta>(&f, PART_MAGIC));
                match (number, parsed) {
                    (Some(n), Ok((pm, data_len))) if pm.part_number == n && pm.size == data_len => {
                        parts.insert(n, PartEntry { meta: pm, rope: None });
                    }
                    (_, Err(e)) => log(format_args!("ignoring part file {}: {e}", pp.display())),
                    _ => log(format_args!("ignoring part file {}: inconsistent", pp.display())),
                }
            }
            let mut inner = bucket.inner.write().expect("fresh lock");
            inner.uploads.insert(id, UploadState::new(meta.info, parts));
        }
        Ok(())
    }

    pub(crate) fn new_temp_path(&self) -> PathBuf {
        self.inner.tmp.join(random_name("body"))
    }

    fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.inner.dir.join(bucket)
    }

    /// (`<bucket>/<hh>`, `<hash>`) of `key`.
    fn object_location(&self, bucket: &str, key: &str) -> (PathBuf, String) {
        let h = key_hash_hex(key);
        (self.bucket_dir(bucket).join(&h[..2]), h)
    }

    fn upload_dir(&self, upload_id: &str) -> PathBuf {
        debug_assert!(upload_id.bytes().all(|b| b.is_ascii_hexdigit()));
        self.inner.uploads.join(upload_id)
    }

    fn stripe(&self, h: u64) -> &tokio::sync::Mutex<()> {
        &self.inner.stripes[(h % LOCK_STRIPES as u64) as usize]
    }

    /// Serialises commits and deletes of one (bucket, key).
    pub(crate) async fn lock_object(&self, bucket: &str, key: &str) -> tokio::sync::MutexGuard<'_, ()> {
        let mut h = DefaultHasher::new();
        (0u8, bucket, key).hash(&mut h);
        self.stripe(h.finish()).lock().await
    }

    /// Serialises commits of one part.
    pub(crate) async fn lock_part(&self, upload_id: &str, part: u32) -> tokio::sync::MutexGuard<'_, ()> {
        let mut h = DefaultHasher::new();
        (1u8, upload_id, part).hash(&mut h);
        self.stripe(h.finish()).lock().await
    }

    pub(crate) fn create_bucket(&self, name: &str, created: SystemTime) -> Result<()> {
        let target = self.bucket_dir(name);
        if target.exists() {
            return Err(BackendError::Io(io::Error::new(
                ErrorKind::AlreadyExists,
                format!("{} exists but was not loaded as a bucket (see startup log)", target.display()),
            )));
        }
        let stage = self.inner.tmp.join(random_name("bucket"));
        fs::create_dir(&stage)?;
        let r = (|| -> io::Result<()> {
            let mut f = File::create(stage.join(BUCKET_META))?;
            f.write_all(&serde_json::to_vec(&BucketMetaFile { created, versioning: None }).map_err(io::Error::other)?)?;
            f.sync_all()?;
            fsync_dir(&stage)?;
            fs::rename(&stage, &target)?;
            fsync_dir(&self.inner.dir)
        })();
        if r.is_err() {
            let _ = fs::remove_dir_all(&stage);
        }
        Ok(r?)
    }

    /// Replaces the bucket's metadata file atomically (temp file, fsync, rename, fsync).
    pub(crate) fn write_bucket_meta(&self, name: &str, created: SystemTime, versioning: Option<&str>) -> Result<()> {
        let meta = BucketMetaFile { created, versioning: versioning.map(str::to_string) };
        let stage = self.new_temp_path();
        let r = (|| -> io::Result<()> {
            let mut f = File::create(&stage)?;
            f.write_all(&serde_json::to_vec(&meta).map_err(io::Error::other)?)?;
            f.sync_all()?;
            let dir = self.bucket_dir(name);
            fs::rename(&stage, dir.join(BUCKET_META))?;
            fsync_dir(&dir)
        })();
        if r.is_err() {
            let _ = fs::remove_file(&stage);
        }
        Ok(r?)
    }

    pub(crate) fn delete_bucket(&self, name: &str) -> Result<()> {
        let doomed = self.inner.tmp.join(random_name("deleted"));
        fs::rename(self.bucket_dir(name), &doomed).map_err(|e| not_found_as(e, BackendError::NoSuchBucket))?;
        fsync_dir(&self.inner.dir)?;
        if let Err(e) = fs::remove_dir_all(&doomed) {
            log(format_args!("cannot remove {}: {e} (removed at next open)", doomed.display()));
        }
        Ok(())
    }

    /// Renames a staged object file into place and makes the rename durable.
    pub(crate) fn commit_object(&self, mut staged: StagedFile, bucket: &str, key: &str) -> Result<()> {
        let (sub, name) = self.object_location(bucket, key);
        match fs::create_dir(&sub) {
            Ok(()) => fsync_dir(&self.bucket_dir(bucket))?,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            // create_dir (not create_dir_all): a bucket deleted meanwhile is not revived.
            Err(e) => return Err(not_found_as(e, BackendError::NoSuchBucket)),
        }
        fs::rename(&staged.path, sub.join(name)).map_err(|e| not_found_as(e, BackendError::NoSuchBucket))?;
        staged.committed = true;
        fsync_dir(&sub)?;
        Ok(())
    }

    /// Opens the current file of `key` and reads its metadata from that same file.
    pub(crate) fn open_object(&self, bucket: &str, key: &str) -> Result<(File, ObjectMeta)> {
        let (sub, name) = self.object_location(bucket, key);
        let file = File::open(sub.join(name)).map_err(|e| not_found_as(e, BackendError::NoSuchKey))?;
        let (meta, data_len): (ObjectMeta, u64) = read_trailer(&file, OBJECT_MAGIC)?;
        if meta.key != key || meta.size != data_len {
            return Err(BackendError::NoSuchKey);
        }
        Ok((file, meta))
    }

    pub(crate) fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let (sub, name) = self.object_location(bucket, key);
        match fs::remove_file(sub.join(name)) {
            Ok(()) => Ok(fsync_dir(&sub)?),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn create_upload(&self, bucket: &str, info: &UploadInfo) -> Result<()> {
        let stage = self.inner.tmp.join(random_name("upload"));
        fs::create_dir(&stage)?;
        let r = (|| -> io::Result<()> {
            let meta = UploadMetaFile { bucket: bucket.to_string(), info: info.clone() };
            let mut f = File::create(stage.join(UPLOAD_META))?;
            f.write_all(&serde_json::to_vec(&meta).map_err(io::Error::other)?)?;
            f.sync_all()?;
            fsync_dir(&stage)?;
            fs::rename(&stage, self.upload_dir(&info.upload_id))?;
            fsync_dir(&self.inner.uploads)
        })();
        if r.is_err() {
            let _ = fs::remove_dir_all(&stage);
        }
        Ok(r?)
    }

    pub(crate) fn commit_part(&self, mut staged: StagedFile, upload_id: &str, part: u32) -> Result<()> {
        let dir = self.upload_dir(upload_id);
        fs::rename(&staged.path, dir.join(format!("part-{part:05}")))
            .map_err(|e| not_found_as(e, BackendError::NoSuchUpload))?;
        staged.committed = true;
        fsync_dir(&dir)?;
        Ok(())
    }

    /// Makes the upload directory disappear atomically, then deletes it.
    pub(crate) fn remove_upload(&self, upload_id: &str) -> Result<()> {
        let doomed = self.inner.tmp.join(random_name("aborted"));
        match fs::rename(self.upload_dir(upload_id), &doomed) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        fsync_dir(&self.inner.uploads)?;
        if let Err(e) = fs::remove_dir_all(&doomed) {
            log(format_args!("cannot remove {}: {e} (removed at next open)", doomed.display()));
        }
        Ok(())
    }

    /// Copies the data of `parts` (number, size), in order, into one staged object file
    /// with `meta` as trailer, fsynced and ready for [`DiskStore::commit_object`].
    pub(crate) fn assemble_parts(
        &self,
        upload_id: &str,
        parts: &[(u32, u64)],
        meta: &ObjectMeta,
    ) -> Result<StagedFile> {
        let dir = self.upload_dir(upload_id);
        let staged = StagedFile { path: self.new_temp_path(), committed: false };
        let mut out = fs::OpenOptions::new().write(true).create_new(true).open(&staged.path)?;
        for &(n, size) in parts {
            let part = File::open(dir.join(format!("part-{n:05}")))
                .map_err(|e| not_found_as(e, BackendError::InvalidPart(n)))?;
            // std::io::copy uses copy_file_range(2) for file-to-file copies on Linux.
            let copied = io::copy(&mut (&part).take(size), &mut out)?;
            if copied != size {
                return Err(BackendError::InvalidPart(n));
            }
        }
        out.write_all(&encode_trailer(OBJECT_MAGIC, meta)?)?;
        out.sync_all()?;
        Ok(staged)
    }
}

/// Loads every object file under one bucket directory into `objects`.
fn load_objects(bucket_dir: &Path, objects: &mut BTreeMap<String, Entry>) -> Result<()> {
    for e in fs::read_dir(bucket_dir)? {
        let sub = e?.path();
        let sub_name = sub.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if sub_name == BUCKET_META {
            continue;
        }
        if !sub.is_dir() {
            log(format_args!("ignoring stray file {}", sub.display()));
            continue;
        }
        for fe in fs::read_dir(&sub)? {
            let path = fe?.path();
            let fname = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let parsed = File::open(&path).and_then(|f| read_trailer::<ObjectMeta>(&f, OBJECT_MAGIC));
            match parsed {
                Ok((meta, data_len)) => {
                    let h = key_hash_hex(&meta.key);
                    if h != fname || h[..2] != sub_name {
                        log(format_args!("ignoring {}: name is not the hash of its key", path.display()));
                    } else if meta.size != data_len {
                        log(format_args!("ignoring {}: size disagrees with data", path.display()));
                    } else if crate::validate_key(&meta.key).is_err() {
                        log(format_args!("ignoring {}: invalid key", path.display()));
                    } else {
                        objects.insert(meta.key.clone(), Entry { meta, rope: None });
                    }
                }
                Err(e) => log(format_args!("ignoring unreadable object file {}: {e}", path.display())),
            }
        }
    }
    Ok(())
}
