//! Getting a ranged download's bytes into its temp file: preallocated, in batches, one
//! writing part per file.
//!
//! ```text
//! part task: chunk, chunk, ... (as received, no copy)
//!   ─► batch of >= WRITE_BATCH ─► file's `writing` lock free?
//!        yes ─► pwritev(batch, offset) inside block_in_place, on this thread
//!        no  ─► read on; wait for the lock only once 2 x WRITE_BATCH are held
//! current-thread runtime (no block_in_place):
//!   ─► one batch at a time to the file's writer thread (channel), which pwritev()s
//! ```
//!
//! - Batches: a part gathers the chunks it receives into batches of up to
//!   [`WRITE_BATCH`] and writes each at its offset with one `pwritev`: one system call
//!   and one hold of the inode's lock per batch instead of one per chunk.
//! - On the part's own thread: inside `tokio::task::block_in_place` the bytes are still
//!   in this core's cache, no other thread is woken for them, and the runtime hands the
//!   worker's other tasks to another thread while the write runs (into the page cache it
//!   is short, but it stalls when the kernel throttles dirty pages). This is s5cmd's
//!   shape: it reads 32 KiB and writes them from the same goroutine. Handing batches to
//!   the blocking pool cost two wake-ups each; writing on the worker without
//!   `block_in_place` stalled its sockets.
//! - One writing part per file (a mutex taken with `try_lock`): ext4 holds the inode's
//!   lock through a buffered write, so two parts writing one file at once spin and then
//!   sleep on it in the kernel, where the busy part could have been reading.
//! - A current-thread runtime has no `block_in_place`: there each file gets a writer
//!   thread ([`FileWrites::new`]), and a part hands it one batch at a time, waiting only
//!   if its previous one is not written yet (the two batches [`part_bytes_in_memory`]
//!   counts).
//! - Preallocating ([`preallocate`]): the temp file gets its size with its blocks
//!   allocated (`fallocate(2)`, mode 0), as rclone sizes its files. Into a sparse file
//!   ext4's delayed allocation reserves each 4 KiB block as a write first reaches it and
//!   allocates it at writeback; into allocated blocks a write only fills the page cache.
//!   A disk without room for the object also fails the download at its start instead
//!   of part-way.
//! - Durable mode: after each part, [`start_writeback`] starts its writeback without
//!   waiting, so the final fsync overlaps the transfer instead of following it.
//!
//! The measurements behind each choice, and those that made no difference, are in
//! docs/lab/engine-download.md.

use super::io;
use bytes::Bytes;
use ferry_store::Error;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Bytes gathered before one `pwritev`: large enough that the `block_in_place` hand-over
/// and the system call are a small cost next to the copy, small enough that the chunks
/// are still in cache when they are copied into the page cache and that hyper can reuse
/// its read buffers (wire's `READ_BUFFER_MAX`, 64 KiB). 128 KiB took the fewest CPU
/// samples of 64, 128 and 256 KiB under `perf record` of 4 x 1 GiB `ferry cp` down
/// (docs/lab/engine-download.md, "Write batches", has the figures and the command).
pub const WRITE_BATCH: usize = 128 * 1024;

/// Bytes a part of `len` may hold in memory while it is fetched, taken from the engine's
/// memory budget (admission.rs, shared by the engine's fan-outs) around each part: the
/// write batch being gathered plus one received batch behind it while the other is
/// written, or while another part of the file writes (the transport's chunks are smaller
/// than a batch).
pub fn part_bytes_in_memory(len: u64) -> u64 {
    len.min(2 * WRITE_BATCH as u64)
}

/// `sync_file_range(SYNC_FILE_RANGE_WRITE)`: asks the kernel to start writing a range
/// back to disk and returns at once. Linux only; elsewhere the final fsync does it all.
#[cfg(target_os = "linux")]
pub(super) fn start_writeback(f: &std::fs::File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a file descriptor we own; no memory is passed.
    let r = unsafe {
        libc::sync_file_range(f.as_raw_fd(), offset as libc::off64_t, len as libc::off64_t, libc::SYNC_FILE_RANGE_WRITE)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Gives a new temp file its size with its blocks allocated (`fallocate(2)`, mode 0), so
/// the writes fill blocks that exist instead of reserving each as it is written (module
/// note); a file system without it gets a sparse file (`set_len`).
#[cfg(target_os = "linux")]
pub(super) fn preallocate(f: &std::fs::File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a file descriptor we own; no memory is passed.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len as libc::off_t) };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL) => f.set_len(len),
        _ => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn preallocate(f: &std::fs::File, len: u64) -> std::io::Result<()> {
    f.set_len(len)
}

#[cfg(not(target_os = "linux"))]
pub(super) fn start_writeback(_f: &std::fs::File, _offset: u64, _len: u64) -> std::io::Result<()> {
    Ok(())
}

/// How the parts of one ranged download reach its temp file: with `block_in_place`
/// under the file's `writing` lock, or through the file's writer thread (module note).
pub(super) struct FileWrites {
    pub(super) file: Arc<std::fs::File>,
    /// `None`: parts write with `block_in_place` (module note).
    writer: Option<FileWriter>,
    /// Held around each `block_in_place` write: a part that finds another part of the
    /// file writing keeps reading instead of queueing on the inode's lock (module note).
    writing: Mutex<()>,
}

impl FileWrites {
    /// Parts write their batches themselves inside `block_in_place`, which only a
    /// multi-thread runtime has; elsewhere the file gets a writer thread, which ends once
    /// every part has let go of it: the receiver returned then resolves (module note).
    pub(super) fn new(
        file: Arc<std::fs::File>,
    ) -> std::io::Result<(FileWrites, Option<tokio::sync::oneshot::Receiver<()>>)> {
        let writing = Mutex::new(());
        if tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            Ok((FileWrites { file, writer: None, writing }, None))
        } else {
            let (w, gone) = FileWriter::spawn(file.clone())?;
            Ok((FileWrites { file, writer: Some(w), writing }, Some(gone)))
        }
    }
}

/// One part's bytes on their way into the file: the chunks received and not yet
/// written, and where they go.
pub(super) struct PartWriter<'a> {
    writes: &'a FileWrites,
    /// The temp file's path, for errors.
    tmp: &'a Path,
    /// Where the first pending byte goes.
    off: u64,
    /// Chunks as they came (no copy), written together once WRITE_BATCH is reached.
    pending: Vec<Bytes>,
    pending_len: usize,
    /// This part's one batch with the file's writer while the next is read (module note).
    turn: Arc<WriteTurn>,
}

impl<'a> PartWriter<'a> {
    /// A writer for a part that starts at `start` in the file.
    pub(super) fn new(writes: &'a FileWrites, tmp: &'a Path, start: u64) -> Self {
        PartWriter {
            writes,
            tmp,
            off: start,
            pending: Vec::new(),
            pending_len: 0,
            turn: Arc::new(WriteTurn::default()),
        }
    }

    /// The offset just past every byte received so far, written or pending.
    pub(super) fn received_to(&self) -> u64 {
        self.off + self.pending_len as u64
    }

    /// Adds a received chunk to the batch being gathered.
    pub(super) fn push(&mut self, chunk: Bytes) {
        self.pending_len += chunk.len();
        self.pending.push(chunk);
    }

    /// Writes the pending batch if it is due: it has reached WRITE_BATCH, or the part
    /// has `ended`. With `block_in_place`, the `pwritev` runs on this thread, the bytes
    /// still in its cache, and the runtime hands this worker's other tasks to another
    /// thread meanwhile; if another part of the file is writing, this one reads on while
    /// its batch is below twice WRITE_BATCH (what `part_bytes_in_memory` counts), then
    /// waits for it. With a writer thread, the batch is handed over once the part's
    /// previous one is written.
    pub(super) async fn write(&mut self, ended: bool) -> Result<(), Error> {
        if !(self.pending_len > 0 && (ended || self.pending_len >= WRITE_BATCH)) {
            return Ok(());
        }
        let writes = self.writes;
        match &writes.writer {
            None => {
                let must = ended || self.pending_len >= 2 * WRITE_BATCH;
                let held = match writes.writing.try_lock() {
                    Ok(g) => Some(g),
                    Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                    Err(std::sync::TryLockError::WouldBlock) => None,
                };
                if held.is_none() && !must {
                    return Ok(());
                }
                let data = std::mem::take(&mut self.pending);
                let off = self.off;
                tokio::task::block_in_place(|| {
                    let _g = held.unwrap_or_else(|| writes.writing.lock().unwrap_or_else(|p| p.into_inner()));
                    write_batch(&writes.file, off, &data)
                })
                .map_err(|e| io(self.tmp, e))?
            }
            Some(w) => {
                let data = std::mem::take(&mut self.pending);
                let permit = self.turn.wait(self.tmp).await?;
                w.send(Batch { at: self.off, data, turn: self.turn.clone(), _permit: permit })
                    .map_err(|e| io(self.tmp, e))?;
            }
        }
        self.off += self.pending_len as u64;
        self.pending_len = 0;
        Ok(())
    }

    /// Waits until the part's last batch is written (its error if that failed); the
    /// offset just past the part's last byte.
    pub(super) async fn finish(self) -> Result<u64, Error> {
        drop(self.turn.wait(self.tmp).await?);
        Ok(self.off)
    }
}

/// The thread that writes one file's batches, in the order its parts send them (module
/// note): a part hands a batch over without waiting, and waits only when its previous
/// batch is not written yet.
struct FileWriter(std::sync::mpsc::Sender<Batch>);

/// One batch of a part for its file's writer.
struct Batch {
    /// Offset in the file of the first byte.
    at: u64,
    /// The received chunks as they are (no copy).
    data: Vec<Bytes>,
    /// Where a failed write is reported.
    turn: Arc<WriteTurn>,
    /// Held until the batch is written (released after `turn` records any error).
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl FileWriter {
    /// Starts the writer thread of `file`; the receiver resolves once it has exited
    /// (every sender dropped, every batch sent written).
    fn spawn(file: Arc<std::fs::File>) -> std::io::Result<(FileWriter, tokio::sync::oneshot::Receiver<()>)> {
        let (tx, rx) = std::sync::mpsc::channel::<Batch>();
        let (gone_tx, gone_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new().name("ferry-writer".into()).spawn(move || {
            let _gone = gone_tx;
            for batch in rx {
                if let Err(e) = write_batch(&file, batch.at, &batch.data) {
                    batch.turn.error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                }
            }
        })?;
        Ok((FileWriter(tx), gone_rx))
    }

    fn send(&self, batch: Batch) -> std::io::Result<()> {
        self.0.send(batch).map_err(|_| std::io::Error::other("the file's writer thread has stopped"))
    }
}

/// Writes a batch's chunks at `at` onwards, with one `pwritev` for all of them (module
/// note): one system call and one hold of the file's inode lock per batch instead of one
/// per chunk.
fn write_batch(file: &std::fs::File, mut at: u64, data: &[Bytes]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // Linux's IOV_MAX; a batch has a handful of chunks (WRITE_BATCH over wire's reads).
    const IOV_MAX: usize = 1024;
    // The chunk the next byte comes from, and how far into it the last write got.
    let (mut first, mut skip) = (0usize, 0usize);
    loop {
        // Past the written and the empty chunks: a batch of nothing writes nothing (an
        // all-empty batch would otherwise get 0 from pwritev and read as WriteZero).
        while first < data.len() && data[first].len() == skip {
            first += 1;
            skip = 0;
        }
        if first == data.len() {
            break;
        }
        let iov: Vec<libc::iovec> = data[first..]
            .iter()
            .take(IOV_MAX)
            .enumerate()
            .map(|(k, d)| {
                let d = if k == 0 { &d[skip..] } else { &d[..] };
                libc::iovec { iov_base: d.as_ptr() as *mut libc::c_void, iov_len: d.len() }
            })
            .collect();
        // SAFETY: every iovec points into a `Bytes` of `data`, alive and unchanged for the call.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int, at as libc::off_t) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "pwritev wrote nothing"));
        }
        // Step past what was written: whole chunks, then into the next one.
        let mut n = n as usize;
        at += n as u64;
        while n > 0 {
            let rest = data[first].len() - skip;
            if n >= rest {
                n -= rest;
                first += 1;
                skip = 0;
            } else {
                skip += n;
                n = 0;
            }
        }
    }
    Ok(())
}

/// A part's turn with its file's writer: one batch of the part at a time (the two
/// batches `part_bytes_in_memory` counts), and the first error of its writes.
struct WriteTurn {
    permit: Arc<tokio::sync::Semaphore>,
    error: Mutex<Option<std::io::Error>>,
}

impl Default for WriteTurn {
    fn default() -> Self {
        WriteTurn { permit: Arc::new(tokio::sync::Semaphore::new(1)), error: Mutex::new(None) }
    }
}

impl WriteTurn {
    /// Waits until the part's previous batch is written; its error if that failed.
    async fn wait(&self, path: &Path) -> Result<tokio::sync::OwnedSemaphorePermit, Error> {
        let permit = self.permit.clone().acquire_owned().await.map_err(|e| io(path, std::io::Error::other(e)))?;
        if let Some(e) = self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(io(path, e));
        }
        Ok(permit)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::noise;
    use super::super::{download_file, DownloadParams, Verified};
    use super::*;
    use ferry_proto::checksum::ChecksumAlgorithm;
    use ferry_store::ObjectRef;

    /// One `pwritev` per batch: the chunks land in order at their offsets, empty chunks
    /// anywhere included, and a batch of more chunks than one call takes (IOV_MAX) is
    /// written in several calls without losing or repeating a byte.
    #[test]
    fn a_batch_lands_whole_at_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(dir.path().join("f")).unwrap();
        let data = noise(300_000, 0x2545_F491_4F6C_DD1D);
        // 2,500 chunks (sizes 0..=239 bytes, every 7th empty), then one large one.
        let (mut chunks, mut at) = (Vec::new(), 0usize);
        for k in 0..2500usize {
            let n = if k % 7 == 0 { 0 } else { (k * 31) % 240 };
            chunks.push(Bytes::copy_from_slice(&data[at..at + n]));
            at += n;
        }
        chunks.push(Bytes::copy_from_slice(&data[at..]));
        write_batch(&f, 1000, &chunks).unwrap();
        // Only empty chunks, or none: nothing written, no error.
        write_batch(&f, 0, &[Bytes::new(), Bytes::new()]).unwrap();
        write_batch(&f, 0, &[]).unwrap();
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut &f, &mut back).unwrap();
        assert_eq!(back.len(), 1000 + data.len());
        assert!(back[..1000].iter().all(|&b| b == 0));
        assert!(back[1000..] == data[..], "the batch's bytes differ from what was written");
    }

    /// A ranged download's temp file starts at its full size with its blocks allocated
    /// (module note), not as a sparse file whose blocks the writes reserve
    /// one by one; the bytes read back are zeros until written.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_new_temp_file_has_its_blocks_allocated() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(dir.path().join("f")).unwrap();
        let len = 3 * 1024 * 1024 + 5;
        preallocate(&f, len).unwrap();
        let m = f.metadata().unwrap();
        assert_eq!(m.len(), len);
        assert!(m.blocks() * 512 >= len, "{} bytes allocated for {len}: the file is sparse", m.blocks() * 512);
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut &f, &mut back).unwrap();
        assert!(back.len() as u64 == len && back.iter().all(|&b| b == 0));
    }

    /// A current-thread runtime has no `block_in_place`: the parts hand their batches to
    /// the file's writer thread instead, and the file lands whole and verified.
    #[tokio::test(flavor = "current_thread")]
    async fn parts_on_a_current_thread_runtime_go_through_the_writer_thread() {
        use ferry_store::{Credentials, CredentialsSource};
        let srv = ferry_server::BackgroundServer::start(ferry_server::config::ServeConfig::new(
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
        let c = crate::Engine::new(
            ferry_store::S3Client::builder(srv.url())
                .credentials(CredentialsSource::Explicit(Credentials::new("ferry", "ferry-secret")))
                .build()
                .unwrap(),
        );
        c.create_bucket("cur").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let bytes = noise(3 * 1024 * 1024 + 5, 0x2545_F491_4F6C_DD1D);
        let src = dir.path().join("src.bin");
        std::fs::write(&src, &bytes).unwrap();
        let obj = ObjectRef::new("cur", "big");
        crate::upload_file(&c, &src, &obj, &crate::UploadParams::default(), None).await.unwrap();
        let dest = dir.path().join("back.bin");
        // 7 parts of 512 KiB, 4 KiB short of a multiple: several batches per part.
        let params = DownloadParams { part_size: 512 * 1024 - 4096, concurrency: 4, ..Default::default() };
        let out = download_file(&c, &obj, &dest, &params, None).await.unwrap();
        assert_eq!(out.verified, Verified::Checksum(ChecksumAlgorithm::Crc64Nvme));
        assert_eq!(out.fetched_bytes, bytes.len() as u64);
        assert!(std::fs::read(&dest).unwrap() == bytes, "the file differs from the object");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
