//! Download one object into a file: ranged parallel GETs, atomic, verified, resumable.
//!
//! ```text
//! HEAD ─► size, ETag, stored checksum
//!   ├─ size <= part_size ─► one GET (ferry-store verifies CRC or MD5-ETag on the fly)
//!   └─ else: .NAME.ferry-part preallocated to size (fallocate), then parts of
//!        part_size, up to `concurrency` GETs in flight, each
//!        Range: bytes=a-b, If-Match: <ETag>  ─► written at offset a of  .NAME.ferry-part
//!        part CRC computed as the bytes pass ─► recorded in .NAME.ferry-state
//! all parts ─► whole CRC = crc_combine(part CRCs) == stored FULL_OBJECT CRC?
//!           (no CRC stored: every range was If-Match on the one ETag, lengths exact)
//!   ─► mtime on the open temp file ─► [durable: fsync temp] ─► rename(temp, NAME)
//!   ─► [durable: fsync dir] ─► remove state (if there may be one)
//! ```
//!
//! Atomic: the final name only ever appears complete and verified (rename(2) is atomic
//! within a directory, and the temp file lives beside the target for that reason). A
//! killed process leaves at most the temp file and its state, never a truncated NAME:
//! the bytes already written are in the page cache, which outlives the process.
//!
//! Durable (`DownloadParams::durable`, `ferry cp --fsync`; off by default): what a kill
//! cannot do, a power loss or kernel crash can. Without an fsync before the rename the
//! journal may commit the rename before the data (ext4's delayed allocation), and NAME
//! comes back short or empty after the reboot. Durable mode closes that, at the price of
//! the disk's write speed: the command cannot end before every byte is on the disk.
//! Measured here (`ferry bench cli-transfer`, and 4 x 1 GiB by hand beside s5cmd on one
//! `ferry serve --memory`): this disk takes 384 MB/s synced (`dd conv=fdatasync`) and
//! 932 MB/s into the page cache, and with the fsync ferry's 4 x 1 GiB downloads were
//! bound to the first figure while s5cmd, rclone, the AWS CLI and cp(1), none of which
//! fsync, ran at the second. The default is therefore theirs (atomic against a kill,
//! verified, not synced); `--fsync` is there for data that must survive a crash, and
//! the state file's read-back check (below) catches a temp file damaged by one.
//!
//! Resume: the state file (JSON, rewritten by write-then-rename as parts finish, at
//! most every `STATE_EVERY`, and once more when the download fails) holds
//! the ETag, size, part size and each finished part's CRC (the object's stored CRC
//! algorithm, else CRC64NVME). A re-run with the same ETag and size re-reads each kept
//! part from the temp file and keeps it only if its CRC still matches, then fetches the
//! rest; another ETag means the object changed, and the download starts over. Reading
//! back instead of fsyncing every part: an fsync per 8 MiB part pushed every byte to
//! the disk synchronously and halved large downloads here (4 x 1 GiB, 277 vs 466 MB/s
//! for s5cmd, which never syncs), while the read-back costs only on resume and also
//! catches a temp file damaged between runs. In durable mode the one fsync is before the
//! rename.
//!
//! Writing: a part gathers the chunks it receives (as they are, no copy) into batches of
//! up to [`WRITE_BATCH`] and writes each at its offset with one `pwritev` from its own
//! task, inside `tokio::task::block_in_place`: the bytes are still in this core's cache,
//! no other thread is woken for them, and the runtime hands the worker's other tasks to
//! another thread while the write runs (into the page cache it is short, but it stalls
//! when the kernel throttles dirty pages). This is s5cmd's shape: it reads 32 KiB and
//! writes them at once from the same goroutine. One part of a file writes at a time (a
//! mutex per file, taken with `try_lock`): a part that finds another writing reads on, and
//! waits only once it holds two batches. ext4 holds the inode's lock through a buffered
//! write, so two parts writing one file at once spin and then sleep on it in the kernel,
//! where a busy part could have been reading (a per-file writer turn in the list of what
//! was tried earlier made no difference; this one is measured below against the code
//! before it, at cli14). A current-thread runtime has no `block_in_place`; there each file
//! gets a writer thread fed by a channel, and a part hands it one batch at a time, waiting
//! only if its previous one is not written yet (the two batches [`part_bytes_in_memory`]
//! counts). In durable mode, after each part, `sync_file_range(SYNC_FILE_RANGE_WRITE)`
//! starts its writeback without waiting, so the final fsync overlaps the transfer instead
//! of following it.
//!
//! Preallocating: a ranged download's temp file gets its size with its blocks allocated
//! (`fallocate(2)`, mode 0; a file system without it gets a sparse `set_len`), as rclone
//! sizes its files and the bench's disk ceiling does. Into a sparse file ext4's delayed
//! allocation reserves each 4 KiB block as a write first reaches it
//! (`ext4_da_get_block_prep`) and allocates it at writeback; into allocated (unwritten)
//! blocks a write only fills the page cache, and writeback converts the extent. A disk
//! without room for the object fails the download at its start, with the temp file
//! removed, instead of part-way. Measured under "Measured" (cli15).
//!
//! Each part runs as a task of its own (`tokio::spawn`, aborted when the download is
//! dropped): an HTTP/1.1 body reads its socket on the task that polls it (wire's
//! pool.rs), so parts polled as futures of one stream shared one thread for every read
//! and CRC (under `ferry cp` the main one, outside the runtime's workers: 1.57 CPU-s on
//! main, ~0 on the workers in a 4 x 1 GiB run). Parts in flight: `concurrency` per file,
//! and a [`PartBudget`] shared by every download of one command (`ferry cp`: 16).
//!
//! Measured: 4 x 1 GiB `ferry cp --recursive` down from one `ferry serve --memory`, by
//! hand, interleaved with s5cmd 2.3.0 on the 2 shared cores (`/usr/bin/time`: wall s,
//! client CPU s user + sys, peak RSS, voluntary context switches):
//! - the copies (`perf record -g`): with chunks held in 256 KiB batches sliced from 256
//!   KiB read buffers, the copy into the page cache took 2-4x s5cmd's samples; 64 KiB read
//!   buffers (wire's `READ_BUFFER_MAX`) and 128 KiB batches brought it to s5cmd's level.
//! - the hand-offs (cli8, 9-11 rounds at load 7-16): each batch written on the blocking
//!   pool (`spawn_blocking`, what came before) cost two wake-ups, 37-52k switches per run
//!   beside s5cmd's 12-24k, CPU 4.4-6.7 s beside 3.4-5.5; a writer thread per file fed by
//!   a channel 28-34k switches, CPU 10-20% lower, wall lower in only 3 of 9; the write
//!   inside `block_in_place` 4-9k switches, CPU 2.9-4.5 s (below s5cmd's), but wall
//!   higher at load 15-16. The write on the worker without `block_in_place` took the
//!   least CPU (2.9-3.2 s) but 7.0-8.2 s wall beside 4.6-5.2: a worker stalled in
//!   `pwrite` stops reading its sockets. On saturated cores wall time follows the
//!   scheduler's fair share per runnable thread, so waking fewer threads did not pay.
//! - `block_in_place` against the blocking pool at load 3-6 (the lead, 6 interleaved
//!   rounds, one `ferry serve --memory`; wall s, peak RSS):
//!
//!   | 4 x 1 GiB down | wall s | user + sys s | switches | peak RSS |
//!   |---|---|---|---|---|
//!   | `block_in_place` (this code) | 4.45, 4.24, 3.73, 4.11, 4.47, 4.07 | 3.3-5.8 | 3-9k | 46-52 MiB |
//!   | blocking pool (before) | 13.65, 5.50, 5.32, 5.09, 6.13, 5.59 | 5.5-18.8 | 38-84k | 28-30 MiB |
//!   | s5cmd 2.3.0 | 5.88, 3.70, 4.23, 4.21, 4.84, 4.43 | 5.0-8.5 | 13-20k | 20-21 MiB |
//!   | rclone (64 transfers; last 3 rounds) | 4.41, 4.93, 5.11 | 5.2-5.5 | 13-14k | 46-47 MiB |
//!
//!   Faster than before in 6 of 6 and than s5cmd in 5 of 6, so it is kept. The price is
//!   peak RSS (rclone's, twice s5cmd's): the runtime moves the worker's core to a pool
//!   thread at each write, and up to 10 threads then read receive buffers into allocator
//!   heaps of their own (mimalloc's purge after 10 or 200 ms instead of never: 46-48
//!   MiB, no help).
//! - beside rclone (which `fallocate`s each file with `FALLOC_FL_KEEP_SIZE`, then writes
//!   4 streams per file at their offsets, no fsync): 4 x 1 GiB down onto a journaled
//!   ext4 loop-mounted with direct I/O (as `ferry bench cli-transfer` does), 3 pairs at
//!   load 8-10, ferry 4.13-4.36 s and 2.8-3.1 CPU-s, rclone 5.35-6.14 s and 3.5-4.0
//!   (the server's CPU the same, 0.6-0.9 s). The sparse `set_len` file did not fragment
//!   the files (`filefrag`: 5-7 extents per ferry file, 1-5 per rclone file); its CPU
//!   cost, found later, is under "Preallocating" below. What is left of
//!   the wall time is the kernel's: copying into the page cache and, near
//!   `dirty_ratio`, being throttled to the disk's writeback. In `ferry bench cli-transfer
//!   --set large` at 5e73207 (load 8-9) ferry took the least CPU per GiB (0.93 s; rclone
//!   1.02, s5cmd 1.33) and led rclone 1.08x by median, 0.95-1.46x by repeat (5.35-5.88 s
//!   beside 5.56-8.57). With both cores saturated by other work, each runnable thread gets
//!   its fair share, and rclone runs 15-21 threads to ferry's 11: a repeat it wins is
//!   one where ferry used less CPU but got less of it (repeat 1: 3.7 CPU-s in 5.9 s
//!   beside rclone's 4.1 in 5.6). No step was found that costs time without a
//!   guarantee needing it; what the temp file, the CRC and the rename each cost of that
//!   CPU was not measured this time (`perf` was not run).
//! - the writes (cli14; `perf record -g` of one run each): with a `pwrite` per 64 KiB
//!   chunk, the inode lock's `rwsem_down_write_slowpath` + `rwsem_spin_on_owner` took
//!   4.3-9.1% of the process's samples; with one writing part per file 0.03%. `pwritev`
//!   halves the calls (66.4k `pwrite64` to 32.6k `pwritev`, `perf stat`) but alone barely
//!   lowered the CPU (11 pairs: 0.97x by median, 0.80-1.14). By hand, 4 x 1 GiB into a
//!   plain directory on this ext4 disk (`sync`, Dirty + Writeback under 64 MiB before each
//!   run), 26 interleaved pairs in five runs at load 2-10, user + sys: 3.05 s median
//!   (2.39-5.14) against 3.22 (2.58-4.36), 0.94x by the pairs' median ratio (0.70-1.20),
//!   lower in 17 of 26; wall 1.01x (0.78-1.57), shorter in 11 of 26: the CPU is saved, the
//!   wall time not (as with the wake-ups below), the cores being shared. Involuntary
//!   switches 3.4-7.4k (median 4.8k) against 3.6-6.8k (5.2k); the switches were never many
//!   (8-18k with `perf stat` at load 2-7; 85k in one run at load 7, 240k in one without a
//!   `sync` before it), and most are preemptions (`perf record -e context-switches -g`:
//!   35% in `generic_perform_write`'s `cond_resched`, 25% on the return from `recv`),
//!   which a client on 2 shared cores cannot avoid; s5cmd under the same `perf` took 142k,
//!   half of them the Go runtime's `nanosleep`.
//! - where the time went (cli15), since ferry spent less CPU than s5cmd and took as long:
//!   each thread's `/proc/PID/task/*/schedstat` sampled through runs at load 4-11 had
//!   each of the 10 runtime threads on a core 0.26 s, runnable but waiting for one 2.4-2.6
//!   s and asleep ~1.3 s of a 4.2 s run (s5cmd's threads alike); the machine was idle
//!   0.1-0.3 core-s per run (`/proc/stat`); Dirty stayed near the background threshold
//!   (~1.7 GiB; `/proc/vmstat` every 100 ms), so nothing slept in `balance_dirty_pages`;
//!   the server took the same CPU for either tool (0.45-0.9 s). Not waiting on the disk
//!   or the server, then: bound by CPU on shared cores (this session's threads get a
//!   share of them, as an autogroup), which makes CPU per byte the lever.
//! - preallocating (cli15; module note): `perf record` of one run each: the writes 58% of
//!   ferry's samples with the sparse file, `ext4_da_get_block_prep` 7.2% and the inode
//!   lock's slow path 3.1% in them; preallocated, 46%, 3.8% and ~0. 1 GiB in 4
//!   interleaved 8 MiB parts of 128 KiB `pwrite`s onto the bench's loop ext4, 3 rounds:
//!   0.31-0.67 system CPU-s sparse, 0.19-0.23 preallocated. By hand, 18 interleaved rounds
//!   (main's binary, this, s5cmd 2.3.0) from one `ferry serve --memory` onto a loop
//!   ext4 made as the bench makes it (`sync`, Dirty + Writeback under 64 MiB before each),
//!   load 1.6-11: user + sys 2.78 s (2.15-3.14) against 3.00 (2.34-3.72) and s5cmd's
//!   3.15 (2.82-4.62): 0.91x main's by the rounds' median ratio, lower in 16 of 18, and
//!   0.83x s5cmd's, lower in 18 of 18; wall 2.69 s (1.82-6.64) against 3.90 (1.87-7.07)
//!   and 2.91 (2.22-6.54): faster than main in 15 of 18 (1.07x), than s5cmd in 12 of 18
//!   (1.13x). The kernel threads' CPU through a `sync` after the run: 0.43 s against 0.47
//!   (s5cmd 0.63). Peak RSS unchanged (16-26 MiB). `ferry bench cli-transfer --set large
//!   --repeats 3`, four runs at load 2-5 (two at 89dba38, two with the bench's warm-up
//!   write at 0b0f065): ferry / s5cmd 1.24x, 1.52x, 1.06x, 1.37x by median (0.80-2.21
//!   by repeat, ahead in 10 of 12), ferry / rclone 0.83x, 0.98x, 1.28x, 1.48x (0.42-1.92,
//!   ahead in 8 of 12); ferry's CPU 2.63-3.31 s by median, s5cmd's 3.50-3.87, rclone's
//!   3.25-4.51. "main's binary" in the rounds by hand was older than main (it had
//!   neither `pwritev` nor one writing part per file), so its 0.91x holds those too.
//!   Once merged (the lead, dfc7ce5, a fresh clone, load ~2): ferry 2,001 MB/s (1,861-2,029),
//!   2.71 CPU-s, 20 MiB peak RSS; s5cmd 1,545, 3.57, 21; rclone 1,367, 3.55, 47; ferry /
//!   s5cmd 1.20x (1.20-1.38), ferry / rclone 1.38x (1.36-1.46), ahead of both in 3 of 3.
//! - no difference out of the noise, tried earlier: no per-file writer turn, 32 parts in
//!   flight instead of 16, 4 parts per file instead of 8, 1 MiB write batches, 16 or 64
//!   MiB parts, `--transport h1-pool`, s5cmd's shape (50 MiB parts, 5 per file).
//!
//! Finishing: a `ferry cp` of many small objects spends most of its system calls per
//! file, so the end of a download does only what it needs. The mtime
//! ([`DownloadParams::mtime`]) is set with `futimens` on the temp file still open from
//! the writes, before the fsync (so durable mode makes it durable too) and the rename
//! (which keeps it); the CLI used to reopen the final name for it. The state file is
//! removed only when there may be one: always after a ranged download, and after a
//! single GET only if the temp file was there before (an earlier run's, seen by
//! `create_new` failing). That holds because a state file is written only while its
//! temp file exists and is removed before it (`remove_partial`). A single GET also
//! gathers its chunks and creates the file with the first batch, so a small object
//! takes two trips to the blocking pool (bytes; mtime + rename) instead of four
//! (create, one per chunk, rename). Per 16 KiB file of a 1,000-file `ferry cp
//! --recursive` down from `ferry serve --memory` (`strace -f -c`, 2 runs each, load
//! 4-7): 28.1-28.9 system calls before, 19.9-20.6 after: the `unlink` (ENOENT), the
//! reopen's `openat` + `close` and the `mkdir` (EEXIST) + `statx` per file are gone
//! (the CLI makes each directory once), and `futex` went from 9.2-9.6 to 6.8-7.0.
//! What is left per file: one `openat`, two `write`s, `utimensat` (on the fd),
//! `rename`, `close`, the request's `writev`/`recvfrom`, and the runtime's wake-ups.
//! 10,000 x 16 KiB, 6 interleaved pairs at load 5.7-6.2 (`/usr/bin/time`): into tmpfs,
//! wall 0.61-0.85 s against 0.75-1.20 before and user + sys 0.80-1.07 s against
//! 1.04-1.55, lower in 6 of 6; into this ext4 disk both swing 2-8 s wall run to run,
//! user CPU 0.32-0.47 s against 0.45-0.88, because the kernel's share dominates there
//! (`perf`: `rwsem_spin_on_owner` on the directory's lock 24-35%, the inode
//! allocator's `find_get_block_common` + `recently_deleted` + `find_inode_bit` ~30%).
//!
//! 8 MiB parts: the low end of the cost-optimal request size on S3 (LAB.md section 1,
//! AnyBlob), and the same part size uploads use.

use crate::admission::Engine;
use bytes::Bytes;
use ferry_proto::checksum::{base64_decode, base64_encode, crc_combine, gf2_times, ChecksumAlgorithm, Checksummer};
use ferry_store::{Error, GetParams, ObjectInfo, ObjectRef, RangeSpec};
use futures_util::stream::TryStreamExt;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Bytes gathered before one `pwrite`: large enough that the `block_in_place` hand-over
/// and the syscall are a small cost next to the copy, small enough that the chunks are still in
/// cache when they are copied into the page cache and that hyper can reuse its read
/// buffers (wire's pool.rs `READ_BUFFER_MAX`, 64 KiB, has the figures). 128 KiB with
/// 64 KiB read buffers: 4 x 1 GiB down, 3 rounds under `perf`, 21.5-26.7k samples for
/// the process against 23.8-29.1k with 256 KiB batches and buffers, and 22.9-34.4k
/// with 64 KiB batches (then on the blocking pool: twice the hand-offs, more wake-ups).
pub const WRITE_BATCH: usize = 128 * 1024;

/// How often at most the state file is rewritten while parts finish: a killed run loses
/// at most the parts of the last 100 ms (they are fetched again), and a 4 x 1 GiB
/// download no longer writes and renames a state file per part (512 renames before,
/// `strace -c -f`).
const STATE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Bytes a part of `len` may hold in memory while it is fetched, taken from the client's
/// memory budget (`S3Client::memory_budget`, shared by the engine's fan-outs) around
/// each part: the write batch being gathered plus one received batch behind it while the
/// other is written, or while another part of the file writes (the transport's chunks
/// are smaller than a batch).
pub fn part_bytes_in_memory(len: u64) -> u64 {
    len.min(2 * WRITE_BATCH as u64)
}

/// Called with each batch of bytes as it lands (for progress displays).
pub type ProgressFn = Arc<dyn Fn(u64) + Send + Sync>;

/// Download parameters.
#[derive(Clone, Debug)]
pub struct DownloadParams {
    /// Bytes per ranged GET.
    pub part_size: u64,
    /// Ranged GETs in flight for this file.
    pub concurrency: usize,
    /// Keep the temp file and state on failure, and use them on the next run.
    pub resume: bool,
    /// fsync the temp file (and its directory after the rename), so the final name holds
    /// the whole object even after a power loss or kernel crash (module note).
    pub durable: bool,
    /// Parts in flight across all the downloads that share it (module note); `None`:
    /// only `concurrency` per file.
    pub budget: Option<PartBudget>,
    /// The modification time the file gets (module note, "Finishing").
    pub mtime: Mtime,
}

/// The modification time a downloaded file gets. It is set on the temp file's open
/// handle after the last write and before the fsync and the rename (a rename keeps the
/// mtime), so the final name never shows another, and no second open is needed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mtime {
    /// As the writes left it (the time of the download).
    #[default]
    Written,
    /// The object's Last-Modified, when the server sent one.
    LastModified,
    /// This time (a listing's Last-Modified: milliseconds, where HEAD has whole seconds).
    At(std::time::SystemTime),
}

/// A budget of ranged GETs in flight shared by several downloads: each part holds one
/// permit from its request to its last byte written.
pub type PartBudget = Arc<tokio::sync::Semaphore>;

impl Default for DownloadParams {
    /// 8 MiB parts (module note), 8 in flight (the same share as uploads).
    fn default() -> Self {
        DownloadParams {
            part_size: 8 * 1024 * 1024,
            concurrency: 8,
            resume: true,
            durable: false,
            budget: None,
            mtime: Mtime::Written,
        }
    }
}

/// How the bytes on disk were checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verified {
    /// Against the stored full-object checksum.
    Checksum(ChecksumAlgorithm),
    /// Single GET whose ETag is a plain MD5.
    Md5Etag,
    /// Exact length, all ranges under one ETag (no full-object checksum stored).
    LengthAndEtag,
}

/// What a download did.
#[derive(Clone, Debug)]
pub struct DownloadOutput {
    pub info: ObjectInfo,
    pub verified: Verified,
    /// Bytes kept from an earlier, interrupted run.
    pub resumed_bytes: u64,
    /// Bytes fetched by this run.
    pub fetched_bytes: u64,
}

/// The temp file and the state file for a target.
pub fn temp_paths(dest: &Path) -> (PathBuf, PathBuf) {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "download".into());
    let dir = dest.parent().map(Path::to_path_buf).unwrap_or_default();
    (dir.join(format!(".{name}.ferry-part")), dir.join(format!(".{name}.ferry-state")))
}

#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
struct State {
    /// The algorithm of the part CRCs in `done`.
    algo: String,
    etag: String,
    size: u64,
    part_size: u64,
    /// Part index -> that part's CRC (base64), or "" when no CRC is stored for the object.
    done: BTreeMap<u64, String>,
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io { path: path.display().to_string(), error: e }
}

/// The stored full-object CRC (not a `-N` composite), strongest first.
fn full_crc(info: &ObjectInfo) -> Option<(ChecksumAlgorithm, String)> {
    [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32]
        .into_iter()
        .find_map(|a| info.checksums.iter().find(|(b, v)| *b == a && !v.contains('-')).cloned())
}

fn write_state(path: &Path, st: &State) -> Result<(), Error> {
    let tmp = path.with_extension("ferry-state-new");
    let text = serde_json::to_vec(st).map_err(|e| io(path, std::io::Error::other(e)))?;
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

fn read_state(path: &Path) -> Option<State> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Removes a temp file and state left by an earlier run for `dest` (if any).
pub fn discard_partial(dest: &Path) {
    let (tmp, state) = temp_paths(dest);
    remove_partial(&tmp, &state);
}

/// Removes the state before the temp file: a state file then never outlives its temp
/// file, which lets a finished download skip looking for one when it found no temp
/// file (module note, "Finishing").
fn remove_partial(tmp: &Path, state: &Path) {
    let _ = std::fs::remove_file(state);
    let _ = std::fs::remove_file(tmp);
}

/// File system work off the async worker threads: with many small downloads in flight,
/// an fsync on a worker would stall every transfer on it, while the blocking pool lets
/// the file system commit many at once.
async fn blocking<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.map_err(|e| io(path, std::io::Error::other(e)))?.map_err(|e| io(path, e))
}

/// `sync_file_range(SYNC_FILE_RANGE_WRITE)`: asks the kernel to start writing a range
/// back to disk and returns at once. Linux only; elsewhere the final fsync does it all.
#[cfg(target_os = "linux")]
fn start_writeback(f: &std::fs::File, offset: u64, len: u64) -> std::io::Result<()> {
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
/// note, "Preallocating"); a file system without it gets a sparse file (`set_len`).
#[cfg(target_os = "linux")]
fn preallocate(f: &std::fs::File, len: u64) -> std::io::Result<()> {
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
fn preallocate(f: &std::fs::File, len: u64) -> std::io::Result<()> {
    f.set_len(len)
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_f: &std::fs::File, _offset: u64, _len: u64) -> std::io::Result<()> {
    Ok(())
}

fn sync_dir(dir: &Path) {
    // Best effort: the rename is durable once the directory is synced.
    if let Ok(d) = std::fs::File::open(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }) {
        let _ = d.sync_all();
    }
}

/// Downloads `object` to `dest` (module note). `dest`'s directory must exist.
pub async fn download_file(
    engine: &Engine,
    object: &ObjectRef,
    dest: &Path,
    params: &DownloadParams,
    progress: Option<ProgressFn>,
) -> Result<DownloadOutput, Error> {
    let info = engine.head(object).await?;
    download_with_info(engine, object, info, dest, params, progress).await
}

/// [`download_file`] when the object's HEAD is already known (saves a request).
pub async fn download_with_info(
    engine: &Engine,
    object: &ObjectRef,
    info: ObjectInfo,
    dest: &Path,
    params: &DownloadParams,
    progress: Option<ProgressFn>,
) -> Result<DownloadOutput, Error> {
    let (tmp, state_path) = temp_paths(dest);
    let part_size = params.part_size.max(1);
    let one_get = info.size <= part_size || info.etag.is_none();
    let result = if one_get {
        single(engine, object, &info, &tmp, progress).await
    } else {
        ranged(engine, object, &info, &tmp, &state_path, part_size, params, progress).await
    };
    match result {
        Ok(done) => {
            let mtime = match params.mtime {
                Mtime::Written => None,
                Mtime::LastModified => info.last_modified,
                Mtime::At(t) => Some(t),
            };
            let (verified, resumed_bytes, fetched_bytes) = (done.verified.clone(), done.resumed, done.fetched);
            let dest = dest.to_path_buf();
            let durable = params.durable;
            blocking(&dest.clone(), move || finish(done, mtime, durable, &tmp, &dest, &state_path)).await?;
            Ok(DownloadOutput { info, verified, resumed_bytes, fetched_bytes })
        }
        Err(e) => {
            // A ranged download keeps its temp file and state for a re-run to resume
            // from; one GET's temp file has no state, a re-run replaces it, so it is only
            // space taken (a full disk's, if that is why it failed).
            let changed = matches!(e, Error::Precondition { .. });
            if !params.resume || changed || one_get {
                remove_partial(&tmp, &state_path);
            }
            Err(e)
        }
    }
}

/// A download's bytes, all in the temp file and checked, before it takes its name.
struct Fetched {
    verified: Verified,
    /// Bytes kept from an earlier run.
    resumed: u64,
    /// Bytes fetched by this run.
    fetched: u64,
    /// The temp file, still open for the mtime and the fsync.
    file: Arc<std::fs::File>,
    /// A state file may exist: this run wrote one, or it found an earlier run's temp
    /// file (whose state, if any, must not outlive it).
    state_may_exist: bool,
}

/// Gives the temp file its mtime, [fsyncs it], renames it to `dest` [and fsyncs the
/// directory], then removes the state file if there may be one (module note,
/// "Finishing"). On the blocking pool.
fn finish(
    done: Fetched,
    mtime: Option<std::time::SystemTime>,
    durable: bool,
    tmp: &Path,
    dest: &Path,
    state: &Path,
) -> std::io::Result<()> {
    if let Some(t) = mtime {
        // Best effort, as before: a file system without mtimes still gets the file.
        let _ = done.file.set_modified(t);
    }
    if durable {
        done.file.sync_all()?;
    }
    std::fs::rename(tmp, dest)?;
    if durable {
        sync_dir(dest.parent().unwrap_or(Path::new(".")));
    }
    if done.state_may_exist {
        let _ = std::fs::remove_file(state);
    }
    Ok(())
}

/// Creates the temp file; `true` if one was there already (left by an earlier run), in
/// which case it is truncated and used. `create_new` first costs nothing in the usual
/// case (one `openat` either way) and tells whether a state file may be left too.
fn create_temp(path: &Path) -> std::io::Result<(std::fs::File, bool)> {
    match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(f) => Ok((f, false)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok((std::fs::File::create(path)?, true)),
        Err(e) => Err(e),
    }
}

/// One plain GET, streamed into the temp file (ferry-store verifies the body). The
/// chunks are gathered into batches of up to [`WRITE_BATCH`], and the file is created
/// with the first: a small object costs one trip to the blocking pool for its bytes.
async fn single(
    engine: &Engine,
    object: &ObjectRef,
    info: &ObjectInfo,
    tmp: &Path,
    progress: Option<ProgressFn>,
) -> Result<Fetched, Error> {
    let params = GetParams { if_match: info.etag.clone(), ..GetParams::default() };
    let out = engine.get(object, params).await?;
    let verified = match full_crc(&out.meta) {
        Some((a, _)) => Verified::Checksum(a),
        None if out.meta.etag.as_deref().is_some_and(|e| {
            let b = e.trim_matches('"');
            b.len() == 32 && b.bytes().all(|c| c.is_ascii_hexdigit())
        }) =>
        {
            Verified::Md5Etag
        }
        None => Verified::LengthAndEtag,
    };
    let mut body = out.body;
    let mut n = 0u64;
    let mut file: Option<Arc<std::fs::File>> = None;
    let mut left_over = false;
    let mut pending: Vec<Bytes> = Vec::new();
    let mut pending_len = 0usize;
    loop {
        let chunk = body.chunk().await;
        let ended = chunk.is_none();
        if let Some(chunk) = chunk {
            let chunk = chunk?;
            let len = chunk.len();
            n += len as u64;
            pending_len += len;
            pending.push(chunk);
            if let Some(p) = &progress {
                p(len as u64);
            }
        }
        if ended || pending_len >= WRITE_BATCH {
            let (data, open, t) = (std::mem::take(&mut pending), file.clone(), tmp.to_path_buf());
            let (f, existed) = blocking(tmp, move || {
                let (f, existed) = match open {
                    Some(f) => (f, false),
                    None => create_temp(&t).map(|(f, e)| (Arc::new(f), e))?,
                };
                for d in &data {
                    (&*f).write_all(d)?;
                }
                Ok((f, existed))
            })
            .await?;
            file = Some(f);
            left_over |= existed;
            pending_len = 0;
        }
        if ended {
            break;
        }
    }
    if n != info.size {
        return Err(Error::Integrity {
            message: format!("{object}: got {n} bytes, HEAD said {}", info.size),
            request_id: None,
        });
    }
    let file = file.expect("the last batch creates the file");
    Ok(Fetched { verified, resumed: 0, fetched: n, file, state_may_exist: left_over })
}

#[allow(clippy::too_many_arguments)]
async fn ranged(
    engine: &Engine,
    object: &ObjectRef,
    info: &ObjectInfo,
    tmp: &Path,
    state_path: &Path,
    part_size: u64,
    params: &DownloadParams,
    progress: Option<ProgressFn>,
) -> Result<Fetched, Error> {
    let etag = info.etag.clone().unwrap_or_default();
    let crc = full_crc(info);
    let algo = crc.as_ref().map(|(a, _)| *a).unwrap_or(ChecksumAlgorithm::Crc64Nvme);
    let parts = info.size.div_ceil(part_size);
    // Keep an earlier run's parts only if everything about them still holds, including
    // the bytes in the temp file (module note).
    let mut state =
        State { algo: algo.as_str().to_owned(), etag: etag.clone(), size: info.size, part_size, done: BTreeMap::new() };
    if params.resume {
        if let Some(old) = read_state(state_path) {
            let tmp_len = std::fs::metadata(tmp).map(|m| m.len()).ok();
            if old.algo == state.algo
                && old.etag == etag
                && old.size == info.size
                && old.part_size == part_size
                && tmp_len == Some(info.size)
            {
                let candidates: Vec<(u64, String)> = old.done.into_iter().filter(|(i, _)| *i < parts).collect();
                let t = tmp.to_path_buf();
                let size = info.size;
                state.done = blocking(tmp, move || {
                    let f = std::fs::File::open(&t)?;
                    let mut buf = Vec::new();
                    let mut kept = BTreeMap::new();
                    for (i, sum) in candidates {
                        buf.resize(part_len(i, part_size, size) as usize, 0);
                        f.read_exact_at(&mut buf, i * part_size)?;
                        if base64_encode(&algo.digest(&buf)) == sum {
                            kept.insert(i, sum);
                        }
                    }
                    Ok(kept)
                })
                .await?;
            }
        }
    }
    if state.done.is_empty() {
        let f = std::fs::File::create(tmp).map_err(|e| io(tmp, e))?;
        if let Err(e) = preallocate(&f, info.size) {
            // No space for it (or another failure): nothing of this run is worth keeping,
            // and a half-allocated temp file would only hold the space.
            drop(f);
            remove_partial(tmp, state_path);
            return Err(io(tmp, e));
        }
    }
    let resumed: u64 = state.done.keys().map(|i| part_len(*i, part_size, info.size)).sum();
    if let Some(p) = &progress {
        if resumed > 0 {
            p(resumed);
        }
    }
    if params.resume {
        write_state(state_path, &state)?;
    }
    let file = Arc::new(std::fs::OpenOptions::new().write(true).open(tmp).map_err(|e| io(tmp, e))?);
    let todo: Vec<u64> = (0..parts).filter(|i| !state.done.contains_key(i)).collect();
    let state = Arc::new(Mutex::new(state));
    let last_state = Mutex::new(std::time::Instant::now());
    // Parts write their batches themselves inside `block_in_place`, which only a
    // multi-thread runtime has; elsewhere the file gets a writer thread, which ends once
    // every part has let go of it (module note).
    let (writer, writer_gone) =
        if tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            (None, None)
        } else {
            let (w, gone) = FileWriter::spawn(file.clone()).map_err(|e| io(tmp, e))?;
            (Some(w), Some(gone))
        };
    let ctx = Arc::new(PartCtx {
        writing: Mutex::new(()),
        engine: engine.clone(),
        object: object.clone(),
        tmp: tmp.to_path_buf(),
        file: file.clone(),
        state: state.clone(),
        progress: progress.clone(),
        etag: etag.clone(),
        algo,
        part_size,
        size: info.size,
        writer,
        shared: params.budget.clone(),
        durable: params.durable,
    });
    let fetched = futures_util::stream::iter(todo.into_iter().map(Ok::<u64, Error>))
        .map_ok(|i| {
            let ctx = ctx.clone();
            // Each part is a task of its own (module note); dropped with the download.
            Aborting(tokio::spawn(fetch_part(ctx, i))).join(tmp)
        })
        .try_buffer_unordered(params.concurrency.max(1))
        .map_ok(|()| {
            // The state is rewritten at most every STATE_EVERY while parts finish, and
            // once more if the download fails (module note).
            let mut last = last_state.lock().unwrap_or_else(|p| p.into_inner());
            if params.resume && last.elapsed() >= STATE_EVERY {
                *last = std::time::Instant::now();
                let st = state.lock().unwrap_or_else(|p| p.into_inner());
                write_state(state_path, &st)
            } else {
                Ok(())
            }
        })
        .try_for_each(|r| async move { r })
        .await;
    // Every part has ended or been aborted: wait until no write of theirs is left, so no
    // late write lands in the temp file after this download has returned.
    drop(ctx);
    if let Some(gone) = writer_gone {
        let _ = gone.await;
    }
    if let Err(e) = fetched {
        if params.resume {
            let st = state.lock().unwrap_or_else(|p| p.into_inner());
            let _ = write_state(state_path, &st);
        }
        return Err(e);
    }
    let fetched = info.size - resumed;
    let st = state.lock().unwrap_or_else(|p| p.into_inner());
    let verified = match crc {
        Some((algo, want)) => {
            let mut sums = Vec::with_capacity(parts as usize);
            for i in 0..parts {
                let raw = st.done.get(&i).and_then(|s| base64_decode(s)).ok_or_else(|| Error::Integrity {
                    message: format!("{object}: no checksum recorded for part {i}"),
                    request_id: None,
                })?;
                sums.push(raw);
            }
            let whole = combine_parts(algo, &sums, part_size, info.size);
            let got = whole.map(|w| base64_encode(&w)).unwrap_or_default();
            if got != want {
                drop(st);
                // The bytes on disk are not the object: never keep them for a resume.
                let _ = std::fs::remove_file(state_path);
                return Err(Error::Integrity {
                    message: format!("{object}: {algo} of the parts is {got}, the object's is {want}"),
                    request_id: None,
                });
            }
            Verified::Checksum(algo)
        }
        None => Verified::LengthAndEtag,
    };
    // This run wrote a state file if it resumes; without resume an older one may be
    // left. One unlink per large file: always.
    Ok(Fetched { verified, resumed, fetched, file, state_may_exist: true })
}

/// What every part of one ranged download shares.
struct PartCtx {
    engine: Engine,
    object: ObjectRef,
    tmp: PathBuf,
    file: Arc<std::fs::File>,
    state: Arc<Mutex<State>>,
    progress: Option<ProgressFn>,
    etag: String,
    algo: ChecksumAlgorithm,
    part_size: u64,
    size: u64,
    /// `None`: parts write with `block_in_place` (module note).
    writer: Option<FileWriter>,
    /// Held around each `block_in_place` write: a part that finds another part of the
    /// file writing keeps reading instead of queueing on the inode's lock (module note).
    writing: Mutex<()>,
    shared: Option<PartBudget>,
    durable: bool,
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
/// note, "Writing"): one system call and one hold of the file's inode lock per batch
/// instead of one per chunk.
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

/// A spawned task aborted when dropped (the download it belongs to failed or was dropped).
struct Aborting(tokio::task::JoinHandle<Result<(), Error>>);

impl Aborting {
    async fn join(mut self, path: &Path) -> Result<(), Error> {
        match (&mut self.0).await {
            Ok(r) => r,
            // A panic in the part is re-raised here, as it would have been when the
            // part ran inside this task; a cancel only comes from our own drop.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(io(path, std::io::Error::other(e))),
        }
    }
}

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Fetches part `i` into the temp file and records its CRC (module note).
async fn fetch_part(ctx: Arc<PartCtx>, i: u64) -> Result<(), Error> {
    let PartCtx { engine, object, file, state, progress, algo, part_size, .. } = &*ctx;
    let (algo, part_size) = (*algo, *part_size);
    let tmp = ctx.tmp.as_path();
    // Parts in flight across the files of one command (module note), then
    // the client's memory budget.
    let _share = match &ctx.shared {
        Some(b) => Some(b.clone().acquire_owned().await.map_err(|e| io(tmp, std::io::Error::other(e)))?),
        None => None,
    };
    // Admission (admission.rs): the part's bytes in memory (`part_bytes_in_memory`),
    // then a place under the endpoint's limit; `concurrency` only caps it from above.
    let _ticket = engine.admission().admit(part_bytes_in_memory(part_len(i, part_size, ctx.size))).await;
    let start = i * part_size;
    let len = part_len(i, part_size, ctx.size);
    let params =
        GetParams { if_match: Some(ctx.etag.clone()), ..GetParams::range(RangeSpec::FromTo(start, start + len - 1)) };
    let out = engine.get(object, params).await?;
    let mut body = out.body;
    let mut hasher = Checksummer::new(algo);
    let mut off = start;
    // Chunks as they came (no copy), written together once WRITE_BATCH is reached.
    let mut pending: Vec<Bytes> = Vec::new();
    let mut pending_len = 0usize;
    // This part's one batch with the file's writer while the next is read (module note).
    let turn = Arc::new(WriteTurn::default());
    let mut ended = false;
    while !ended {
        match body.chunk().await {
            Some(chunk) => {
                let chunk = chunk?;
                if off + (pending_len + chunk.len()) as u64 > start + len {
                    return Err(Error::Integrity {
                        message: format!("{object}: part {i} is longer than {len} bytes"),
                        request_id: None,
                    });
                }
                hasher.update(&chunk);
                if let Some(p) = progress {
                    p(chunk.len() as u64);
                }
                pending_len += chunk.len();
                pending.push(chunk);
            }
            None => ended = true,
        }
        if pending_len > 0 && (ended || pending_len >= WRITE_BATCH) {
            match &ctx.writer {
                // The pwrite on this thread, the bytes still in its cache; the runtime
                // hands this worker's other tasks to another thread meanwhile. Another
                // part of the file writing: read on while the batch is below twice
                // WRITE_BATCH (what `part_bytes_in_memory` counts), then wait for it.
                None => {
                    let must = ended || pending_len >= 2 * WRITE_BATCH;
                    let held = match ctx.writing.try_lock() {
                        Ok(g) => Some(g),
                        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                        Err(std::sync::TryLockError::WouldBlock) => None,
                    };
                    if held.is_none() && !must {
                        continue;
                    }
                    let data = std::mem::take(&mut pending);
                    tokio::task::block_in_place(|| {
                        let _g = held.unwrap_or_else(|| ctx.writing.lock().unwrap_or_else(|p| p.into_inner()));
                        write_batch(file, off, &data)
                    })
                    .map_err(|e| io(tmp, e))?
                }
                Some(w) => {
                    let data = std::mem::take(&mut pending);
                    let permit = turn.wait(tmp).await?;
                    w.send(Batch { at: off, data, turn: turn.clone(), _permit: permit }).map_err(|e| io(tmp, e))?;
                }
            }
            off += pending_len as u64;
            pending_len = 0;
        }
    }
    drop(turn.wait(tmp).await?);
    if off != start + len {
        return Err(Error::Integrity {
            message: format!("{object}: part {i} ended after {} of {len} bytes", off - start),
            request_id: None,
        });
    }
    // Start writing the part back now, without waiting, so the fsync before
    // the rename finds little left to do (module note).
    if ctx.durable {
        let f = file.clone();
        blocking(tmp, move || start_writeback(&f, start, len)).await?;
    }
    let sum = base64_encode(&hasher.finish());
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.done.insert(i, sum);
    Ok(())
}

/// The whole object's CRC from its parts' CRCs (`sums[i]` of part `i`), `None` if one
/// does not fit the algorithm. `crc_combine` costs O(W^2 log n) per call (a GF(2) matrix
/// squared per doubling of the length), which over 4 x 128 parts was 2.3% of a 4 x 1 GiB
/// download's CPU (`perf`); but appending `len` zero bytes is one linear map, the same
/// for every full part, so it is built once per (algorithm, part size) from `crc_combine`
/// of the W unit vectors, and each part then costs one W x W product.
fn combine_parts(algo: ChecksumAlgorithm, sums: &[Vec<u8>], part_size: u64, size: u64) -> Option<Vec<u8>> {
    /// (algorithm, part size, the columns of its "append part size zeros" map).
    type Shift = (ChecksumAlgorithm, u64, Arc<Vec<u64>>);
    static SHIFTS: Mutex<Vec<Shift>> = Mutex::new(Vec::new());
    let width = sums.first()?.len();
    if width == 0 || width > 8 || sums.iter().any(|s| s.len() != width) {
        return None;
    }
    let read = |b: &[u8]| b.iter().fold(0u64, |acc, x| (acc << 8) | *x as u64);
    let write = |v: u64| v.to_be_bytes()[8 - width..].to_vec();
    let shift = {
        let mut cache = SHIFTS.lock().unwrap_or_else(|p| p.into_inner());
        match cache.iter().find(|(a, n, _)| *a == algo && *n == part_size) {
            Some((_, _, m)) => m.clone(),
            None => {
                let zero = vec![0u8; width];
                let mut cols = Vec::with_capacity(width * 8);
                for bit in 0..width * 8 {
                    cols.push(read(&crc_combine(algo, &write(1u64 << bit), &zero, part_size)?));
                }
                let m = Arc::new(cols);
                cache.push((algo, part_size, m.clone()));
                m
            }
        }
    };
    let mut whole = read(&sums[0]);
    for (i, s) in sums.iter().enumerate().skip(1) {
        let len = part_len(i as u64, part_size, size);
        whole = if len == part_size {
            gf2_times(&shift, whole) ^ read(s)
        } else {
            read(&crc_combine(algo, &write(whole), s, len)?)
        };
    }
    Some(write(whole))
}

fn part_len(i: u64, part_size: u64, size: u64) -> u64 {
    (size - i * part_size).min(part_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_object() {
        for (size, ps) in [(1u64, 8u64), (8, 8), (9, 8), (100, 7)] {
            let n = size.div_ceil(ps);
            assert_eq!((0..n).map(|i| part_len(i, ps, size)).sum::<u64>(), size);
        }
    }

    /// `n` pseudo-random bytes (xorshift64 from `seed`), the same for the same seed.
    fn noise(n: usize, mut seed: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    #[test]
    fn combined_parts_are_the_crc_of_the_whole() {
        let data = noise(10_000, 0x9E37_79B9_7F4A_7C15);
        for algo in [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32] {
            for (size, ps) in [(10_000u64, 1000u64), (10_000, 999), (10_000, 10_000), (7, 3), (1, 1)] {
                let sums: Vec<Vec<u8>> = (0..size.div_ceil(ps))
                    .map(|i| algo.digest(&data[(i * ps) as usize..(i * ps + part_len(i, ps, size)) as usize]))
                    .collect();
                assert_eq!(
                    combine_parts(algo, &sums, ps, size),
                    Some(algo.digest(&data[..size as usize])),
                    "{algo} {size} {ps}"
                );
            }
        }
    }

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
    /// (module note, "Preallocating"), not as a sparse file whose blocks the writes reserve
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

    /// The mtime asked for is the file's, set before the rename, by one GET or by parts,
    /// synced or not; and a killed run's temp file and state beside the target are gone
    /// after a single-GET download (which writes no state of its own).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn finished_files_have_their_mtime_and_nothing_beside_them() {
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
        c.create_bucket("mtime").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        for (name, size) in [("small", 5000usize), ("ranged", 3 * 1024 * 1024 + 5)] {
            let bytes = noise(size, size as u64);
            let src = dir.path().join(format!("{name}.src"));
            std::fs::write(&src, &bytes).unwrap();
            let obj = ObjectRef::new("mtime", name);
            crate::upload_file(&c, &src, &obj, &crate::UploadParams::default(), None).await.unwrap();
            std::fs::remove_file(&src).unwrap();
            for durable in [false, true] {
                let dest = dir.path().join(name);
                let (tmp, state) = temp_paths(&dest);
                std::fs::write(&tmp, b"left by a killed run").unwrap();
                std::fs::write(&state, br#"{"algo":"CRC64NVME","etag":""0"","size":1,"part_size":1,"done":{}}"#)
                    .unwrap();
                let params =
                    DownloadParams { part_size: 1024 * 1024, durable, mtime: Mtime::At(when), ..Default::default() };
                download_file(&c, &obj, &dest, &params, None).await.unwrap();
                assert!(std::fs::read(&dest).unwrap() == bytes, "{name}: the file differs from the object");
                assert_eq!(std::fs::metadata(&dest).unwrap().modified().unwrap(), when, "{name} durable={durable}");
                let names: Vec<_> = std::fs::read_dir(dir.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .filter(|n| n.starts_with('.'))
                    .collect();
                assert!(names.is_empty(), "{name} durable={durable}: left {names:?}");
                std::fs::remove_file(&dest).unwrap();
            }
        }
        // Mtime::Written leaves the time of the writes.
        let dest = dir.path().join("now");
        download_file(&c, &ObjectRef::new("mtime", "small"), &dest, &DownloadParams::default(), None).await.unwrap();
        let age = std::time::SystemTime::now()
            .duration_since(std::fs::metadata(&dest).unwrap().modified().unwrap())
            .unwrap_or_default();
        assert!(age < std::time::Duration::from_secs(600), "{age:?}");
    }

    #[test]
    fn temp_files_sit_beside_the_target() {
        let (t, s) = temp_paths(Path::new("/a/b/file.bin"));
        assert_eq!(t, Path::new("/a/b/.file.bin.ferry-part"));
        assert_eq!(s, Path::new("/a/b/.file.bin.ferry-state"));
    }
}
