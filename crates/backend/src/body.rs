//! Bodies in and out: [`BodyWriter`] (staging for one PUT or part) and [`ObjectStream`]
//! (a lazy GET body).
//!
//! # Writing
//!
//! A `BodyWriter` is handed out by `Backend::body_writer` and consumed by `put_object` /
//! `put_part`; dropping it unconsumed discards the body.
//!
//! * Memory: chunks are copied into blocks the backend allocates itself, of at most
//!   [`BLOCK_BYTES`], sized to the length the handler announced
//!   ([`BodyWriter::expect_len`]) so that a stored body holds what it needs and no more.
//!   Why copy: a received chunk is a `Bytes` slice of the connection's receive buffer,
//!   and keeping the slice keeps the whole buffer. `ferry serve`'s HTTP/1.1 reader
//!   allocates a fresh 64 KiB buffer per socket read once earlier slices are still held,
//!   so a 16 KiB object kept 64 KiB, and a body received in 17 KiB reads kept ~3.8x its
//!   size. `scripts/server-rss.py` (2 runs each): 10,000 x 16 KiB (156 MiB) put by ferry
//!   peaked at 656-658 MiB of server RSS, now 190; 4 x 128 MiB sent in 4 and 17 KiB
//!   writes (a slow client) 1,526-1,585 MiB, now 580-586; the lab's `cli-transfer` bench
//!   (4 x 1 GiB and 10,000 x 16 KiB, three tools on two busy cores) once took the server
//!   to 19.5 GB. The copy is one memcpy beside the MD5 that every PUT computes anyway.
//!   The rope's segments are these blocks, so a GET still streams them without copying.
//! * Disk: chunks are buffered up to [`DISK_FLUSH_BYTES`] and then written to a temp file
//!   in `DIR/.ferry-tmp` on a blocking thread. The temp file is created by
//!   `body_writer` and removed in `Drop` unless it was handed on for commit (disk.rs).
//!
//! # Reading
//!
//! `ObjectStream` yields chunks of at most [`MAX_CHUNK_BYTES`], produced as polled:
//!
//! * rope: zero-copy `Bytes::slice`s of the stored segments;
//! * file: `read_exact` of the next chunk on a blocking thread, with one chunk of
//!   read-ahead started when a chunk is handed out, so memory per stream stays at most
//!   two chunks however slow the consumer is;
//! * synthetic: generated on the polling thread (several GB/s, so a 256 KiB chunk costs
//!   tens of microseconds).

use std::fs::File;
use std::future::Future;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use tokio::task::JoinHandle;

use crate::{BackendError, Result};

/// Largest chunk an [`ObjectStream`] yields: 256 KiB, big enough that
/// per-chunk overhead (a blocking-pool hop on disk) is small next to the copy, small
/// enough to keep per-stream memory low.
pub const MAX_CHUNK_BYTES: usize = 256 * 1024;

/// Largest block a memory body is stored in: 512 KiB, so a stored body wastes nothing but
/// the unfilled end of its last block (none when the length was announced), and a GET's
/// chunks ([`MAX_CHUNK_BYTES`]) are slices of one block. Not 1 MiB: mimalloc (the `ferry`
/// binary's allocator) gives blocks of 1 MiB and more pages of their own with a header,
/// which took 7% more RSS for 1 GiB stored (docs/lab/backend-memory.md, with the
/// re-measure steps).
pub const BLOCK_BYTES: usize = 512 * 1024;

/// First block of a memory body whose length was not announced (aws-chunked without a
/// decoded length); each next block doubles, up to [`BLOCK_BYTES`].
const FIRST_BLOCK_BYTES: usize = 16 * 1024;

/// Disk mode buffers this much before a blocking write: 1 MiB amortises the hop to the
/// blocking pool over many small network chunks.
pub const DISK_FLUSH_BYTES: usize = 1024 * 1024;

/// An immutable body: segments plus the running end offset of each, for binary search.
#[derive(Debug, Default)]
pub(crate) struct Rope {
    segments: Vec<Bytes>,
    ends: Vec<u64>,
    /// Bytes allocated for the segments (their blocks' capacities), as the writer asked
    /// the allocator for them.
    allocated: u64,
}

impl Rope {
    fn push(&mut self, b: Bytes, capacity: usize) {
        if b.is_empty() {
            return;
        }
        let end = self.len() + b.len() as u64;
        self.segments.push(b);
        self.ends.push(end);
        self.allocated += capacity as u64;
    }

    /// Bytes the segments' blocks occupy; `len()` when every block is full.
    pub(crate) fn allocated_bytes(&self) -> u64 {
        self.allocated
    }

    pub(crate) fn len(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The concatenation of `ropes`, sharing their segments.
    pub(crate) fn concat<'a>(ropes: impl Iterator<Item = &'a Rope>) -> Rope {
        let mut out = Rope::default();
        for r in ropes {
            out.segments.reserve(r.segments.len());
            for s in &r.segments {
                out.push(s.clone(), 0);
            }
            out.allocated += r.allocated;
        }
        out
    }

    /// (segment index, offset inside it) of byte `pos` (< len).
    fn locate(&self, pos: u64) -> (usize, usize) {
        let i = self.ends.partition_point(|&e| e <= pos);
        let seg_start = if i == 0 { 0 } else { self.ends[i - 1] };
        (i, (pos - seg_start) as usize)
    }
}

/// A file staged for commit: data and trailer written and fsynced.
#[derive(Debug)]
pub(crate) struct StagedFile {
    pub(crate) path: PathBuf,
    /// Set once renamed into place; until then Drop removes the temp file.
    pub(crate) committed: bool,
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

pub(crate) enum Staging {
    Memory {
        rope: Rope,
        /// The block being filled; its capacity is what was allocated for it.
        block: BytesMut,
        /// Bytes announced by `expect_len` and not yet written, if announced.
        expected_left: Option<u64>,
        /// Size of the next block when nothing was announced (doubles up to the cap).
        next_unannounced: usize,
    },
    Disk {
        temp: StagedFile,
        file: Option<File>,
        pending: Vec<Bytes>,
        pending_bytes: usize,
    },
}

impl Staging {
    pub(crate) fn memory() -> Staging {
        Staging::Memory {
            rope: Rope::default(),
            block: BytesMut::new(),
            expected_left: None,
            next_unannounced: FIRST_BLOCK_BYTES,
        }
    }
    pub(crate) fn disk(path: PathBuf, file: File) -> Staging {
        Staging::Disk {
            temp: StagedFile { path, committed: false },
            file: Some(file),
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }
}

/// Staging area for one object or part body. `Send`; dropping it discards the body.
pub struct BodyWriter {
    staging: Staging,
    written: u64,
}

impl std::fmt::Debug for BodyWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyWriter").field("written", &self.written).finish_non_exhaustive()
    }
}

impl BodyWriter {
    pub(crate) fn new(staging: Staging) -> BodyWriter {
        BodyWriter { staging, written: 0 }
    }

    /// Appends `chunk` to the body.
    pub async fn write(&mut self, chunk: Bytes) -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        self.written += chunk.len() as u64;
        match &mut self.staging {
            Staging::Memory { rope, block, expected_left, next_unannounced } => {
                let mut rest = &chunk[..];
                while !rest.is_empty() {
                    if block.len() == block.capacity() {
                        let cap = next_block_len(expected_left, next_unannounced, rest.len());
                        let full = std::mem::replace(block, BytesMut::with_capacity(cap));
                        let full_cap = full.capacity();
                        rope.push(full.freeze(), full_cap);
                    }
                    let n = rest.len().min(block.capacity() - block.len());
                    block.extend_from_slice(&rest[..n]);
                    rest = &rest[n..];
                }
                Ok(())
            }
            Staging::Disk { pending, pending_bytes, .. } => {
                *pending_bytes += chunk.len();
                pending.push(chunk);
                if *pending_bytes >= DISK_FLUSH_BYTES {
                    self.flush_disk(None).await?;
                }
                Ok(())
            }
        }
    }

    /// Bytes received so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Announces that the body will be `len` bytes (the request's Content-Length, or the
    /// decoded length of an aws-chunked body), before the first `write`. Memory mode then
    /// allocates blocks that add up to exactly `len`. Only a hint: a body of another
    /// length is still stored (in blocks sized as if nothing was announced past `len`),
    /// and the size check at commit is what rejects it.
    pub fn expect_len(&mut self, len: u64) {
        if let Staging::Memory { expected_left, .. } = &mut self.staging {
            *expected_left = Some(len.saturating_sub(self.written));
        }
    }

    /// Writes pending chunks (and `tail`, when given: the trailer, followed by fsync).
    async fn flush_disk(&mut self, tail: Option<Vec<u8>>) -> Result<()> {
        let Staging::Disk { file, pending, pending_bytes, .. } = &mut self.staging else {
            return Ok(());
        };
        let Some(mut f) = file.take() else {
            return Err(BackendError::Io(io::Error::other("an earlier write to this body failed")));
        };
        let chunks = std::mem::take(pending);
        *pending_bytes = 0;
        let done = tokio::task::spawn_blocking(move || -> io::Result<File> {
            for c in &chunks {
                f.write_all(c)?;
            }
            if let Some(t) = tail {
                f.write_all(&t)?;
                f.sync_all()?;
            }
            Ok(f)
        })
        .await
        .map_err(|e| BackendError::Io(io::Error::other(e)))??;
        *file = Some(done);
        Ok(())
    }

    /// Memory mode: the finished rope.
    pub(crate) fn into_rope(self) -> Result<Rope> {
        match self.staging {
            Staging::Memory { mut rope, block, .. } => {
                push_last_block(&mut rope, block);
                Ok(rope)
            }
            // Writers come from the backend that consumes them; mixing is a caller bug.
            Staging::Disk { .. } => Err(BackendError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "disk BodyWriter passed to a memory backend",
            ))),
        }
    }

    /// Disk mode: appends the trailer (`meta` as JSON, its length, `magic`), fsyncs and
    /// returns the staged file, ready to be renamed into place.
    pub(crate) async fn finish_disk<T: serde::Serialize>(mut self, magic: [u8; 8], meta: &T) -> Result<StagedFile> {
        let trailer = crate::disk::encode_trailer(magic, meta)?;
        if let Staging::Memory { .. } = self.staging {
            return Err(BackendError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "memory BodyWriter passed to a disk backend",
            )));
        }
        self.flush_disk(Some(trailer)).await?;
        let Staging::Disk { temp, file, .. } = &mut self.staging else { unreachable!() };
        drop(file.take());
        let staged = StagedFile { path: temp.path.clone(), committed: false };
        temp.committed = true; // ownership of the temp file moves to `staged`
        Ok(staged)
    }
}

/// Capacity of the next block of a memory body, `want` bytes being at hand: what is
/// left of the announced length (at most [`BLOCK_BYTES`]) while it lasts, else the
/// doubling size for bodies of unknown length.
fn next_block_len(expected_left: &mut Option<u64>, next_unannounced: &mut usize, want: usize) -> usize {
    match expected_left {
        Some(left) if *left > 0 => {
            let cap = (*left).min(BLOCK_BYTES as u64) as usize;
            *left -= cap as u64;
            cap
        }
        _ => {
            let cap = *next_unannounced;
            *next_unannounced = (cap * 2).min(BLOCK_BYTES);
            cap.max(want.min(BLOCK_BYTES))
        }
    }
}

/// Adds the block being filled to `rope`. A block with more than 1/8 of its capacity
/// unused (an unannounced or short body) is copied into an exact-size one first, so the
/// waste of any stored body stays under 1/8 of a block.
fn push_last_block(rope: &mut Rope, block: BytesMut) {
    if block.is_empty() {
        return;
    }
    if block.capacity() - block.len() > block.capacity() / 8 {
        let len = block.len();
        rope.push(Bytes::copy_from_slice(&block), len);
    } else {
        let cap = block.capacity();
        rope.push(block.freeze(), cap);
    }
}

/// A lazy object body: `Stream<Item = io::Result<Bytes>>`, chunks of at most
/// [`MAX_CHUNK_BYTES`].
pub struct ObjectStream {
    remaining: u64,
    source: Source,
}

enum Source {
    Rope { rope: Arc<Rope>, seg: usize, offset: usize },
    File { file: Option<File>, reading: Option<JoinHandle<(File, io::Result<Bytes>)>> },
    Synthetic { key_hash: u64, pos: u64 },
}

impl std::fmt::Debug for ObjectStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStream").field("remaining", &self.remaining).finish_non_exhaustive()
    }
}

impl ObjectStream {
    pub(crate) fn rope(rope: Arc<Rope>, start: u64, len: u64) -> ObjectStream {
        let (seg, offset) = if len == 0 { (0, 0) } else { rope.locate(start) };
        ObjectStream { remaining: len, source: Source::Rope { rope, seg, offset } }
    }

    pub(crate) async fn file(mut file: File, start: u64, len: u64) -> Result<ObjectStream> {
        if start > 0 {
            file = tokio::task::spawn_blocking(move || -> io::Result<File> {
                file.seek(SeekFrom::Start(start))?;
                Ok(file)
            })
            .await
            .map_err(|e| BackendError::Io(io::Error::other(e)))??;
        }
        Ok(ObjectStream { remaining: len, source: Source::File { file: Some(file), reading: None } })
    }

    pub(crate) fn synthetic(key: &str, start: u64, len: u64) -> ObjectStream {
        ObjectStream {
            remaining: len,
            source: Source::Synthetic { key_hash: crate::synthetic::key_hash(key), pos: start },
        }
    }

    /// Bytes this stream has yet to yield.
    pub fn remaining_bytes(&self) -> u64 {
        self.remaining
    }

    /// Reads the rest of the stream into one buffer (tests and small objects only).
    pub async fn collect_vec(mut self) -> io::Result<Vec<u8>> {
        use futures_util::StreamExt;
        let mut out = Vec::with_capacity(self.remaining.min(64 << 20) as usize);
        while let Some(chunk) = self.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }
}

fn start_read(file: File, want: usize) -> JoinHandle<(File, io::Result<Bytes>)> {
    tokio::task::spawn_blocking(move || {
        let mut file = file;
        let mut buf = vec![0u8; want];
        let r = file.read_exact(&mut buf).map(|()| Bytes::from(buf));
        (file, r)
    })
}

impl Stream for ObjectStream {
    type Item = io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match &mut this.source {
            Source::Rope { rope, seg, offset } => {
                if this.remaining == 0 {
                    return Poll::Ready(None);
                }
                let s = &rope.segments[*seg];
                let n = (s.len() - *offset).min(MAX_CHUNK_BYTES).min(this.remaining as usize);
                let out = s.slice(*offset..*offset + n);
                *offset += n;
                if *offset == s.len() {
                    *seg += 1;
                    *offset = 0;
                }
                this.remaining -= n as u64;
                Poll::Ready(Some(Ok(out)))
            }
            Source::Synthetic { key_hash, pos } => {
                if this.remaining == 0 {
                    return Poll::Ready(None);
                }
                let max = (this.remaining.min(MAX_CHUNK_BYTES as u64)) as usize;
                let out = crate::synthetic::slice(*key_hash, *pos, max);
                *pos += out.len() as u64;
                this.remaining -= out.len() as u64;
                Poll::Ready(Some(Ok(out)))
            }
            Source::File { file, reading } => {
                if reading.is_none() {
                    if this.remaining == 0 {
                        return Poll::Ready(None);
                    }
                    let Some(f) = file.take() else {
                        return Poll::Ready(None); // an earlier read failed
                    };
                    let want = this.remaining.min(MAX_CHUNK_BYTES as u64) as usize;
                    *reading = Some(start_read(f, want));
                }
                let handle = reading.as_mut().expect("read in flight");
                let res = match Pin::new(handle).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(r) => r,
                };
                *reading = None;
                match res {
                    Err(join) => {
                        this.remaining = 0;
                        Poll::Ready(Some(Err(io::Error::other(join))))
                    }
                    Ok((_, Err(e))) => {
                        this.remaining = 0;
                        Poll::Ready(Some(Err(e)))
                    }
                    Ok((f, Ok(chunk))) => {
                        this.remaining -= chunk.len() as u64;
                        if this.remaining > 0 {
                            // Read-ahead of one chunk while the consumer sends this one.
                            let want = this.remaining.min(MAX_CHUNK_BYTES as u64) as usize;
                            *reading = Some(start_read(f, want));
                        } else {
                            *file = Some(f);
                        }
                        Poll::Ready(Some(Ok(chunk)))
                    }
                }
            }
        }
    }
}
