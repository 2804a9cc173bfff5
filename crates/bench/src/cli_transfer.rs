//! `cli-transfer` (docs/lab/README.md, section 4): the `ferry` command line beside s5cmd
//! and rclone, each run as the child process its users run, on the same `ferry serve` and
//! profile.
//!
//! ```text
//! setup (untimed): a local tree of N small files (10,000 x 16 KiB; quick 1,000) and
//!   M large ones (4 x 1 GiB; quick 4 x 256 MiB), deterministic bytes per file, their
//!   CRC64NVME computed as written; the same tree PUT by ferry-engine under data/
//! repeat k = 1..n, per set (small, large), per direction (upload, download), per tool
//!   (the tools' order rotated by one each repeat: `rotated`):
//!   upload    ferry cp --recursive SRC/ s3://bench/up/T-k/SET/   s5cmd cp 'SRC/*' ...   rclone copy SRC peer:...
//!   download  ferry cp --recursive s3://bench/data/SET/ DST/     s5cmd cp 's3://.../*' DST/   rclone copy peer:... DST
//!             and its two ceilings, rotated in with the tools (below): the set written
//!             from memory into DST/, and its GETs into memory
//!   before it (untimed): the upload's source read through, the last copy's writeback
//!   settled (below); the child is started and reaped with wait4(2) by a fresh reaper
//!   process (`ferry __cli-transfer-reap`, reap_main), so its wall time, CPU (user +
//!   system) and peak RSS (ru_maxrss) are its own, not the bench's; the server's
//!   counters (/_ferry/metrics, peers.rs's ServerCounters) read before and after it
//!   give its TCP connections and requests by S3 operation
//!   verify (untimed): every file/object present, none extra, sizes and CRC64NVME equal to
//!   the source's (uploads: the server's stored full-object CRC64NVME, else a GET hashed);
//!   then the copy is removed (keys deleted with delete_many, the directory removed)
//! ```
//!
//! Each tool runs with its own defaults, as a user would type it, except rclone's
//! `--transfers`/`--checkers` (default 4 and 8), raised to ferry's default object
//! concurrency (64): with 4 at once rclone measures its default, not its speed, on 10,000
//! files. s5cmd's defaults (256 workers, 5 parts of 50 MB per file) and ferry's (64
//! objects, 8 parts of 8 MiB per file) are left as they are.
//!
//! Downloads land on a disk (not tmpfs), so a tool that fsyncs pays for it here (ferry only
//! with `--fsync`, which this bench does not pass: crates/engine/src/download/,
//! docs/lab/engine-download.md).
//!
//! Downloads land on a journaled ext4 image of their own when the bench runs as root (this
//! machine's root filesystem has no journal, where ext4 is slow to reuse inodes freed in the
//! last ~30 s, so one tool's deletes made the next tool's creates cost seconds); else in the
//! work directory. Every record says which (`download_fs`, `download_fs_ext4_journal`).
//!
//! Each run starts on a settled machine (untimed): the copy before it removed, the
//! filesystem flushed (syncfs(2)), and /proc/meminfo's Dirty + Writeback back within 64 MiB
//! of where they were after setup (at most 30 s); uploads read a source warm in the page
//! cache. Downloads are also held against two ceilings run the same way in the same repeat:
//! the set written from memory onto the download filesystem (disk) and its GETs into memory
//! (network); each download record carries its share of each (`share_of_*_ceiling`) and its
//! CPU over theirs (`cpu_over_ceilings`).
//!
//! What the ceilings and the tools measured, and why each of these steps is there:
//! docs/lab/bench-cli-transfer.md. Its runs are processes, not S3Client calls, so its schedule
//! is its own; the JSON lines, the progress line and the outcome go through the runner's
//! [`crate::runner::Session`].

use crate::options::{Outcome, RunOptions};
use crate::peers::{Peer, ServerCounters};
use crate::process::ServerProcess;
use crate::record::{RunContext, RunRecord};
use crate::report::cell;
use crate::workload::{ServerSpec, Size};
use anyhow::{bail, Context, Result};
use ferry_proto::checksum::Checksummer;
use ferry_store::{
    ChecksumAlgorithm, Credentials, CredentialsSource, ListParams, Mode, ObjectRef, ObjectStoreExt, S3Client,
};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const NAME: &str = "cli-transfer";
pub const BUCKET: &str = "bench";
/// rclone's `--transfers` and `--checkers`: ferry's default `--concurrency` (module note).
pub const RCLONE_TRANSFERS: usize = 64;
const ALGO: ChecksumAlgorithm = ChecksumAlgorithm::Crc64Nvme;

/// The command-line tools compared, and the download ceilings they are held against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    Ferry,
    S5cmd,
    Rclone,
    /// The set written from memory onto the download filesystem (`write_ceiling`).
    DiskCeiling,
    /// The set's GETs from the server into memory (`read_ceiling`).
    NetCeiling,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Ferry => "ferry",
            Tool::S5cmd => "s5cmd",
            Tool::Rclone => "rclone",
            Tool::DiskCeiling => "disk-ceiling",
            Tool::NetCeiling => "network-ceiling",
        }
    }

    /// The record's `ceiling` marker ("disk", "network"); None for a tool.
    pub fn ceiling(self) -> Option<&'static str> {
        match self {
            Tool::DiskCeiling => Some("disk"),
            Tool::NetCeiling => Some("network"),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Upload,
    Download,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Upload => "upload",
            Direction::Download => "download",
        }
    }
}

/// One set of files: `files` x `bytes`, under `src/NAME/` locally and `data/NAME/` remotely.
#[derive(Clone, Debug, PartialEq)]
pub struct FileSet {
    pub name: &'static str,
    pub files: usize,
    pub bytes: u64,
}

impl FileSet {
    pub fn label(&self) -> String {
        format!("{} x {}", self.files, human(self.bytes))
    }

    /// File names, sorted: `f-NNNNNN.bin`.
    pub fn names(&self) -> Vec<String> {
        (0..self.files).map(|i| format!("f-{i:06}.bin")).collect()
    }
}

fn human(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// Parameters of `cli-transfer`.
#[derive(Clone, Debug, PartialEq)]
pub struct CliTransferParams {
    pub sets: Vec<FileSet>,
    pub repeats: usize,
    pub profile: &'static str,
    /// Tools beside ferry (s5cmd and rclone by default; `--peers` narrows it).
    pub peers: Vec<Peer>,
    /// Where the trees are written (a disk, not tmpfs: downloads' fsync is part of the cost).
    pub work_dir: PathBuf,
}

impl CliTransferParams {
    pub fn new(size: Size) -> CliTransferParams {
        let (small, large) = match size {
            Size::Quick => (1_000, 256u64 << 20),
            Size::Full => (10_000, 1u64 << 30),
        };
        CliTransferParams {
            sets: vec![
                FileSet { name: "small", files: small, bytes: 16 << 10 },
                FileSet { name: "large", files: 4, bytes: large },
            ],
            repeats: 3,
            profile: "lan",
            peers: vec![Peer::S5cmd, Peer::Rclone],
            work_dir: std::env::temp_dir(),
        }
    }
}

/// The row label of one (direction, set, tool).
pub fn row_label(dir: Direction, set: &FileSet, tool: Tool) -> String {
    format!("{} {} · {}", dir.name(), set.label(), tool.name())
}

/// A tool that can run: its executable.
#[derive(Clone, Debug)]
struct Installed {
    tool: Tool,
    exe: PathBuf,
    version: String,
}

/// The temporary tree, removed when dropped.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic bytes of file `seed`: xorshift64*, so every file differs and a copy that
/// swapped two files would be caught.
fn fill(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        let mut x = *state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *state = x;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Writes `set` under `dir`; the CRC64NVME (base64) of each file by name.
fn write_set(dir: &Path, set: &FileSet, set_index: u64) -> Result<BTreeMap<String, String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut sums = BTreeMap::new();
    let mut buf = vec![0u8; (8u64 << 20).min(set.bytes.max(1)) as usize];
    for (i, name) in set.names().into_iter().enumerate() {
        let path = dir.join(&name);
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        let mut state = (set_index << 40) ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut h = Checksummer::new(ALGO);
        let mut left = set.bytes;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            fill(&mut buf[..n], &mut state);
            h.update(&buf[..n]);
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        f.flush()?;
        sums.insert(name, h.finish_base64());
    }
    Ok(sums)
}

/// Where downloads land (module note: the destination filesystem).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DestKind {
    /// A journaled ext4 of the bench's own on a loop device (as root).
    LoopExt4,
    /// The work directory's own filesystem (the fallback).
    WorkDir,
}

impl DestKind {
    fn name(self) -> &'static str {
        match self {
            DestKind::LoopExt4 => "loop-ext4",
            DestKind::WorkDir => "work-dir",
        }
    }
}

/// The directory downloads are copied under, and what it is.
struct DestFs {
    root: PathBuf,
    kind: DestKind,
    /// Why the fallback was taken, when it was.
    fallback_reason: Option<String>,
    /// Whether the destination's filesystem is ext4 with a journal (None: not ext4, or
    /// not known): ext4 without one pays for recently deleted inodes (module note).
    ext4_journal: Option<bool>,
    /// Unmounted, detached and removed when dropped.
    _mount: Option<LoopMount>,
}

impl DestFs {
    /// A loop-mounted ext4 of `bytes` under `work` when we are root and the tools are
    /// there, else `work/dst` on the work directory's filesystem.
    fn make(work: &Path, bytes: u64) -> DestFs {
        let (root, kind, reason, mount) = match LoopMount::make(work, bytes) {
            Ok(m) => (m.dir.clone(), DestKind::LoopExt4, None, Some(m)),
            Err(e) => (work.join("dst"), DestKind::WorkDir, Some(format!("{e:#}")), None),
        };
        let ext4_journal = ext4_has_journal(if mount.is_some() { &root } else { work });
        DestFs { root, kind, fallback_reason: reason, ext4_journal, _mount: mount }
    }

    /// One line for the report.
    fn describe(&self) -> String {
        let journal = match self.ext4_journal {
            Some(true) => "ext4 with a journal",
            Some(false) => "ext4 WITHOUT a journal: a tool creating files right after the last copy's delete pays for it (module note), so order can still decide the small-download rows",
            None => "not ext4",
        };
        match (&self.kind, &self.fallback_reason) {
            (DestKind::LoopExt4, _) => format!("downloads land on a fresh ext4 (mkfs defaults, journaled, no discard) loop-mounted with direct I/O on the work directory's disk ({journal})"),
            (DestKind::WorkDir, why) => format!("downloads land in the work directory ({journal}); no filesystem of their own: {}", why.as_deref().unwrap_or("?")),
        }
    }
}

/// An ext4 image under the work directory, attached to a loop device with direct I/O
/// (its writes reach the disk once, not through the image file's page cache as well) and
/// mounted without `discard`.
struct LoopMount {
    image: PathBuf,
    device: String,
    dir: PathBuf,
    mounted: bool,
}

/// Runs a setup command; its stderr in the error.
fn run_tool(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {program}"))?;
    if !out.status.success() {
        bail!("{program} {}: {} ({})", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

impl LoopMount {
    fn make(work: &Path, bytes: u64) -> Result<LoopMount> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("not root (a loop mount needs it)");
        }
        let image = work.join("dst.ext4");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(bytes))
            .with_context(|| format!("creating {}", image.display()))?;
        let mut m = LoopMount { image, device: String::new(), dir: work.join("dst"), mounted: false };
        let img = m.image.display().to_string();
        // Inode tables and journal written now, so no background init shares the runs.
        run_tool("mkfs.ext4", &["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", &img])?;
        m.device = run_tool("losetup", &["--find", "--show", "--direct-io=on", &img])?;
        std::fs::create_dir_all(&m.dir)?;
        run_tool("mount", &["-o", "nodiscard", &m.device, &m.dir.display().to_string()])?;
        m.mounted = true;
        Ok(m)
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted && run_tool("umount", &[&self.dir.display().to_string()]).is_err() {
            let _ = run_tool("umount", &["-l", &self.dir.display().to_string()]);
        }
        if !self.device.is_empty() {
            let _ = run_tool("losetup", &["-d", &self.device]);
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Whether the ext4 holding `path` has a journal: jbd2 lists every journal it runs under
/// /proc/fs/jbd2/DEVICE-INODE. None when `path` is not on ext4 or the device is unknown.
fn ext4_has_journal(path: &Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a zeroed statfs is valid; statfs writes into it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string for the duration of the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 || st.f_type != libc::EXT4_SUPER_MAGIC {
        return None;
    }
    let dev = std::fs::metadata(path).ok()?.dev();
    let uevent =
        std::fs::read_to_string(format!("/sys/dev/block/{}:{}/uevent", libc::major(dev), libc::minor(dev))).ok()?;
    let name = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME="))?.to_owned();
    let journals = std::fs::read_dir("/proc/fs/jbd2")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
        .unwrap_or_default();
    Some(journals.iter().any(|j| j.strip_prefix(name.as_str()).is_some_and(|rest| rest.starts_with('-'))))
}

/// CRC64NVME (base64) of a local file.
fn file_crc(path: &Path) -> std::io::Result<String> {
    Checksummer::of_reader(ALGO, std::fs::File::open(path)?)
}

/// Dirty + Writeback from a /proc/meminfo text, in bytes: the page cache's data not yet on
/// disk. None when either line is missing.
fn parse_unflushed(meminfo: &str) -> Option<u64> {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kb * 1024)
        })
    };
    Some(field("Dirty")? + field("Writeback")?)
}

/// This machine's unflushed page-cache bytes now (Dirty + Writeback).
fn unflushed_bytes() -> Option<u64> {
    parse_unflushed(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// How far above the bench's starting Dirty + Writeback a settle may stop: the machine is
/// shared, so other writers' pages come and go; 64 MiB is under a second of this disk's
/// writeback and far below the GiBs a large download leaves (each record's
/// `unflushed_at_start_bytes` from `ferry bench cli-transfer --quick` shows what is left).
const SETTLE_SLACK: u64 = 64 << 20;
/// The longest a settle waits before the next run starts anyway (recorded as not settled).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// What one untimed settle did.
#[derive(Debug, Clone, PartialEq)]
struct Settled {
    wall: Duration,
    /// Unflushed bytes when the settle began and when it ended.
    before: Option<u64>,
    after: Option<u64>,
    /// Whether the unflushed bytes came back under the ceiling within the limit.
    reached: bool,
}

/// Polls `read` every `pause` until it reports at most `ceiling` bytes or `limit` passes.
/// A reader that cannot read (None) ends the wait at once: there is nothing to wait on.
fn wait_until_flushed(
    mut read: impl FnMut() -> Option<u64>,
    ceiling: u64,
    limit: Duration,
    pause: Duration,
) -> Settled {
    let t0 = Instant::now();
    let before = read();
    let mut now = before;
    loop {
        match now {
            None => return Settled { wall: t0.elapsed(), before, after: None, reached: false },
            Some(n) if n <= ceiling => return Settled { wall: t0.elapsed(), before, after: now, reached: true },
            Some(_) if t0.elapsed() >= limit => {
                return Settled { wall: t0.elapsed(), before, after: now, reached: false }
            }
            Some(_) => {}
        }
        std::thread::sleep(pause);
        now = read();
    }
}

/// syncfs(2) on the filesystem holding `dir`: returns when its dirty data is on disk.
fn sync_filesystem(dir: &Path) -> Result<()> {
    let f = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    // SAFETY: syncfs on a descriptor we own for the duration of the call.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } != 0 {
        bail!("syncfs {}: {}", dir.display(), std::io::Error::last_os_error());
    }
    Ok(())
}

/// Between timed runs (untimed): the previous run's copy is already removed; flush the
/// work directory's filesystem, then wait until the machine's Dirty + Writeback are back
/// near `baseline` (module note: a copy is timed on a machine not still flushing the last).
fn settle(dirs: &[&Path], baseline: u64) -> Result<Settled> {
    let t0 = Instant::now();
    let before = unflushed_bytes();
    for dir in dirs {
        sync_filesystem(dir)?;
    }
    let mut s = wait_until_flushed(
        unflushed_bytes,
        baseline + SETTLE_SLACK,
        SETTLE_LIMIT.saturating_sub(t0.elapsed()),
        Duration::from_millis(50),
    );
    s.wall = t0.elapsed();
    s.before = before;
    Ok(s)
}

/// Reads every file of `dir`'s `set` once (untimed), so an upload starts with its source in
/// the page cache whichever tool ran before: each tool reads the same warm tree. The bytes
/// read, for the record.
fn warm(dir: &Path, set: &FileSet) -> Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    for name in set.names() {
        let path = dir.join(&name);
        let mut f = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        loop {
            let n = std::io::Read::read(&mut f, &mut buf).with_context(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    Ok(total)
}

/// What a child process cost, from wait4(2).
#[derive(Debug, Default)]
struct ChildRun {
    wall: Duration,
    cpu: Duration,
    peak_rss_bytes: u64,
    exit: Option<i32>,
    timed_out: bool,
    stderr_tail: String,
}

/// What wait4 reported for one child.
struct Reaped {
    wall: Duration,
    cpu: Duration,
    peak_rss_bytes: u64,
    status: i32,
    timed_out: bool,
}

/// Starts `cmd` with PR_SET_PDEATHSIG (it dies with us) and reaps it with wait4 for its
/// own rusage, killing it after `timeout` if one is given.
fn spawn_and_reap(mut cmd: Command, timeout: Option<Duration>) -> Result<Reaped> {
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t0 = Instant::now();
    // std's Child neither kills nor waits when dropped: the pid is ours to reap here.
    let child = cmd.spawn().with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 writes into memory we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
    let flags = if timeout.is_some() { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: our own child's pid; status and ru are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if r == pid {
            break;
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            bail!("wait4: {e}");
        }
        if timeout.is_some_and(|t| t0.elapsed() > t) && !timed_out {
            timed_out = true;
            // SAFETY: kill(2) on our unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    Ok(Reaped {
        wall: t0.elapsed(),
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        peak_rss_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
        status,
        timed_out,
    })
}

/// Runs `cmd` to its end (or `timeout`) for its wall time, CPU and peak RSS. With a
/// `reaper` (the ferry binary), the tool is started and measured by a fresh reaper
/// process ([`reap_main`]: why); without one, directly (its peak RSS then starts at
/// ours). stdout is discarded (every tool prints a line per file), stderr kept in `log`
/// for the error message.
fn run_child(cmd: Command, log: &Path, timeout: Duration, reaper: Option<&Path>) -> Result<ChildRun> {
    let err = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let report = log.with_extension("reaped");
    let _ = std::fs::remove_file(&report);
    let mut run = match reaper {
        None => cmd,
        Some(exe) => {
            let mut r = Command::new(exe);
            r.arg(REAP_ARG).arg(&report).arg(cmd.get_program()).args(cmd.get_args());
            for (k, v) in cmd.get_envs() {
                match v {
                    Some(v) => r.env(k, v),
                    None => r.env_remove(k),
                };
            }
            if let Some(d) = cmd.get_current_dir() {
                r.current_dir(d);
            }
            r
        }
    };
    run.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
    let mut got = spawn_and_reap(run, Some(timeout))?;
    if reaper.is_some() && !got.timed_out {
        let line = std::fs::read_to_string(&report).unwrap_or_default();
        let Some((wall, cpu, rss, status)) = parse_reaped(&line) else {
            bail!("the reaper wrote no figures (exit status {}; stderr in {})", got.status, log.display());
        };
        (got.wall, got.cpu, got.peak_rss_bytes, got.status) = (wall, cpu, rss, status);
        let _ = std::fs::remove_file(&report);
    }
    let status = got.status;
    let exit = (!got.timed_out && libc::WIFEXITED(status)).then(|| libc::WEXITSTATUS(status));
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: String =
        text.trim().lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" / ");
    Ok(ChildRun {
        wall: got.wall,
        cpu: got.cpu,
        peak_rss_bytes: got.peak_rss_bytes,
        exit,
        timed_out: got.timed_out,
        stderr_tail: tail,
    })
}

/// The first argument that makes the `ferry` binary the reaper ([`reap_main`]; main.rs
/// looks for it before anything else runs).
pub const REAP_ARG: &str = "__cli-transfer-reap";

/// Why a reaper: Linux starts a forked child's peak RSS at the parent's resident
/// anonymous memory (fork copies those page-table entries, and exec keeps the old mm's
/// high-water mark in the process's `maxrss`). Forked straight from the bench, a tool's
/// "peak RSS" was at least the bench's own (185-209 MiB right after setup, 18-63 MiB later:
/// docs/lab/bench-quick-sizes.md). So the bench starts a fresh `ferry` process (exec: a new mm, a heap of a
/// few hundred KiB when it forks), which forks and execs the tool, reaps it with wait4
/// and writes its wall time, CPU and peak RSS to a file. The tool gets PR_SET_PDEATHSIG
/// from the reaper as the reaper gets it from the bench, so a killed run leaves nothing.
///
/// `args`: OUT PROG [ARGS...]. Writes `wall_us cpu_us maxrss_kib wait_status` to OUT;
/// the exit code is 0 once that line is written, 1 when the tool could not be started.
pub fn reap_main(args: &[std::ffi::OsString]) -> i32 {
    let [out, prog, rest @ ..] = args else {
        eprintln!("ferry {REAP_ARG}: usage: OUT PROG [ARGS...]");
        return 2;
    };
    let mut cmd = Command::new(prog);
    cmd.args(rest);
    match spawn_and_reap(cmd, None) {
        Ok(r) => {
            let line =
                format!("{} {} {} {}\n", r.wall.as_micros(), r.cpu.as_micros(), r.peak_rss_bytes / 1024, r.status);
            match std::fs::write(out, line) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("ferry {REAP_ARG}: writing {}: {e}", Path::new(out).display());
                    1
                }
            }
        }
        Err(e) => {
            eprintln!("ferry {REAP_ARG}: {e:#}");
            1
        }
    }
}

/// A reaper's line, parsed: wall, CPU, peak RSS in bytes, the raw wait status.
fn parse_reaped(line: &str) -> Option<(Duration, Duration, u64, i32)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [wall, cpu, rss, status] = f[..] else { return None };
    Some((
        Duration::from_micros(wall.parse().ok()?),
        Duration::from_micros(cpu.parse().ok()?),
        rss.parse::<u64>().ok()? * 1024,
        status.parse().ok()?,
    ))
}

/// The first argument that makes the `ferry` binary a ceiling run ([`ceiling_main`]; main.rs
/// looks for it beside [`REAP_ARG`]).
pub const CEILING_ARG: &str = "__cli-transfer-ceiling";

/// Threads of the disk ceiling: one per file of the large set (4 x 1 GiB, each written
/// front to back by its own thread), and the same 4 share the small set's files. More than
/// the 2 cores would only queue on the directory's lock (docs/lab/engine-download.md: perf
/// showed `rwsem_spin_on_owner` on it at 24-35% of a 10,000-file copy's kernel time).
const CEILING_THREADS: usize = 4;
/// The disk ceiling's write size: one `pwrite` per MiB. Copying into the page cache costs
/// the same per byte from 128 KiB up (docs/lab/engine-download.md, "Write batches": 128 KiB
/// batches brought ferry's copy to s5cmd's), so 1 MiB takes the per-call cost out without a
/// buffer of a part's size.
const CEILING_WRITE: usize = 1 << 20;
/// The network ceiling's ranges and how many are in flight: ferry's own defaults (8 MiB
/// parts, 16 parts per command: `DOWNLOAD_PARTS_AT_ONCE` in crates/cli/src/cp.rs; 64
/// objects at once, as `ferry cp --concurrency`), so it is the most this server and
/// loopback hand a client shaped like ferry's, with nothing written anywhere.
const CEILING_PART: u64 = 8 << 20;
const CEILING_PARTS_IN_FLIGHT: usize = 16;
const CEILING_OBJECTS_IN_FLIGHT: usize = 64;

/// The bytes the disk ceiling writes over and over: one write's worth (or a whole small
/// file), deterministic, so the copy it leaves can be checked like a tool's.
fn ceiling_pattern(bytes: u64) -> Vec<u8> {
    let mut buf = vec![0u8; (CEILING_WRITE as u64).min(bytes) as usize];
    let mut state = 0x0DDC_0FFE_E0DD_F00D;
    fill(&mut buf, &mut state);
    buf
}

/// The CRC64NVME (base64) of every file the disk ceiling writes for files of `bytes`.
fn ceiling_crc(bytes: u64) -> String {
    let pattern = ceiling_pattern(bytes);
    let mut h = Checksummer::new(ALGO);
    let mut left = bytes;
    while left > 0 {
        let n = left.min(pattern.len() as u64) as usize;
        h.update(&pattern[..n]);
        left -= n as u64;
    }
    h.finish_base64()
}

/// The disk ceiling: `set`'s files created under `dir` and written from memory the way a
/// good downloader writes, with nothing between the network and the disk: `threads`
/// threads take the files in turn; a file larger than one write is sized first with
/// fallocate(2) (its blocks reserved, as rclone and ferry's temp files are; a filesystem
/// without it gets `set_len`), then written front to back in [`CEILING_WRITE`]
/// `pwrite`s. No temp name, no rename, no fsync (the tools do not sync either).
fn write_ceiling(dir: &Path, set: &FileSet, threads: usize) -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pattern = ceiling_pattern(set.bytes);
    let names = set.names();
    let next = AtomicUsize::new(0);
    let work = || -> Result<()> {
        while let Some(name) = names.get(next.fetch_add(1, Ordering::Relaxed)) {
            let path = dir.join(name);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            if set.bytes > pattern.len() as u64 {
                // SAFETY: fallocate on a descriptor we own for the duration of the call.
                if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, set.bytes as libc::off_t) } != 0 {
                    f.set_len(set.bytes).with_context(|| format!("sizing {}", path.display()))?;
                }
            }
            let mut at = 0u64;
            while at < set.bytes {
                let n = (set.bytes - at).min(pattern.len() as u64) as usize;
                f.write_all_at(&pattern[..n], at).with_context(|| format!("writing {}", path.display()))?;
                at += n as u64;
            }
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.clamp(1, names.len().max(1))).map(|_| s.spawn(work)).collect();
        workers.into_iter().try_for_each(|w| w.join().unwrap_or_else(|_| bail!("a writer thread panicked")))
    })
}

/// The network ceiling: `set`'s objects under `prefix` read from the server into memory
/// and dropped, as ranged GETs (so no checksum is computed: a ceiling, not a download) of
/// at most [`CEILING_PART`], [`CEILING_PARTS_IN_FLIGHT`] at once for large objects and
/// [`CEILING_OBJECTS_IN_FLIGHT`] small ones. Each body's length is checked; the bytes read.
async fn read_ceiling(c: &S3Client, prefix: &str, set: &FileSet) -> Result<u64> {
    let mut spans = Vec::new();
    for name in set.names() {
        let mut a = 0u64;
        while a < set.bytes {
            let b = (a + CEILING_PART).min(set.bytes);
            spans.push((ObjectRef::new(BUCKET, format!("{prefix}{name}")), a, b));
            a = b;
        }
    }
    let in_flight = if set.bytes > CEILING_PART { CEILING_PARTS_IN_FLIGHT } else { CEILING_OBJECTS_IN_FLIGHT };
    let reads = futures_util::stream::iter(spans)
        .map(|(obj, a, b)| async move {
            let params = ferry_store::GetParams {
                range: Some(ferry_store::RangeSpec::FromTo(a, b - 1)),
                checksum_mode: false,
                size_hint: Some(set.bytes),
                ..Default::default()
            };
            let mut out = c.get_object(&obj, params).await.with_context(|| format!("GET {obj} bytes {a}-{}", b - 1))?;
            let mut n = 0u64;
            while let Some(chunk) = out.body.chunk().await {
                n += chunk.with_context(|| format!("GET {obj} bytes {a}-{}", b - 1))?.len() as u64;
            }
            if n != b - a {
                bail!("GET {obj} bytes {a}-{}: {n} bytes, expected {}", b - 1, b - a);
            }
            Ok(n)
        })
        .buffer_unordered(in_flight);
    futures_util::pin_mut!(reads);
    let mut total = 0u64;
    while let Some(n) = reads.next().await {
        total += n?;
    }
    Ok(total)
}

/// A ceiling run, as its own process so the bench times it exactly as it times a tool
/// (through the reaper: wall, CPU, peak RSS). `args`:
/// - `disk DIR FILES BYTES`: `write_ceiling` into DIR (which exists and is empty);
/// - `net BUCKET PREFIX FILES BYTES`: `read_ceiling` from the server at
///   `AWS_ENDPOINT_URL` with `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`.
///
/// The exit code is 0 when every byte was written or read, 1 on an error (on stderr), 2
/// on a usage error.
pub fn ceiling_main(args: &[std::ffi::OsString]) -> i32 {
    let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let set = |files: &str, bytes: &str| -> Option<FileSet> {
        Some(FileSet { name: "ceiling", files: files.parse().ok()?, bytes: bytes.parse().ok()? })
    };
    let run = || -> Result<Option<()>> {
        match &args[..] {
            [kind, dir, files, bytes] if kind == "disk" => {
                let Some(set) = set(files, bytes) else { return Ok(None) };
                write_ceiling(Path::new(dir), &set, CEILING_THREADS).map(Some)
            }
            [kind, bucket, prefix, files, bytes] if kind == "net" && bucket == BUCKET => {
                let Some(set) = set(files, bytes) else { return Ok(None) };
                let env = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
                let client = S3Client::builder(env("AWS_ENDPOINT_URL")?)
                    .region("us-east-1")
                    .credentials(CredentialsSource::Explicit(Credentials::new(
                        env("AWS_ACCESS_KEY_ID")?,
                        env("AWS_SECRET_ACCESS_KEY")?,
                    )))
                    .mode(Mode::H1Pool)
                    .max_connections(CEILING_OBJECTS_IN_FLIGHT)
                    .build()?;
                let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
                let n = rt.block_on(read_ceiling(&client, prefix, &set))?;
                if n != set.files as u64 * set.bytes {
                    bail!("read {n} bytes, expected {}", set.files as u64 * set.bytes);
                }
                Ok(Some(()))
            }
            _ => Ok(None),
        }
    };
    match run() {
        Ok(Some(())) => 0,
        Ok(None) => {
            eprintln!("ferry {CEILING_ARG}: usage: disk DIR FILES BYTES | net {BUCKET} PREFIX FILES BYTES");
            2
        }
        Err(e) => {
            eprintln!("ferry {CEILING_ARG}: {e:#}");
            1
        }
    }
}

/// The endpoint every tool is pointed at.
struct Target {
    url: String,
    access: String,
    secret: String,
    /// Empty files standing in for ~/.aws/config and credentials, so a developer's own
    /// settings cannot leak into ferry's or s5cmd's run.
    aws_config: PathBuf,
}

impl Target {
    /// A command with no inherited AWS_*/RCLONE_* settings.
    fn command(&self, exe: &Path) -> Command {
        let mut c = Command::new(exe);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if k.starts_with("AWS_") || k.starts_with("RCLONE_") || k.starts_with("FERRY_") {
                c.env_remove(k);
            }
        }
        c
    }

    fn aws_env(&self, c: &mut Command) {
        c.env("AWS_ACCESS_KEY_ID", &self.access)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", &self.aws_config)
            .env("AWS_SHARED_CREDENTIALS_FILE", &self.aws_config);
    }

    fn rclone_env(&self, c: &mut Command) {
        c.env("RCLONE_CONFIG", &self.aws_config)
            .env("RCLONE_CONFIG_PEER_TYPE", "s3")
            .env("RCLONE_CONFIG_PEER_PROVIDER", "Other")
            .env("RCLONE_CONFIG_PEER_ENDPOINT", &self.url)
            .env("RCLONE_CONFIG_PEER_REGION", "us-east-1")
            .env("RCLONE_CONFIG_PEER_FORCE_PATH_STYLE", "true")
            .env("RCLONE_CONFIG_PEER_ACCESS_KEY_ID", &self.access)
            .env("RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY", &self.secret);
    }
}

/// The command line of one run: `src`/`dst` are a local directory and a prefix (ending
/// in '/') of [`BUCKET`], in the direction's order. A ceiling is the ferry binary's
/// [`ceiling_main`], downloads only.
fn tool_command(t: &Installed, target: &Target, dir: Direction, local: &Path, prefix: &str, set: &FileSet) -> Command {
    let local_s = local.display().to_string();
    let remote = format!("s3://{BUCKET}/{prefix}");
    let mut c = target.command(&t.exe);
    match t.tool {
        Tool::Ferry => {
            target.aws_env(&mut c);
            c.env("AWS_ENDPOINT_URL", &target.url);
            c.args(["cp", "--recursive"]);
            match dir {
                Direction::Upload => c.args([format!("{local_s}/"), remote]),
                Direction::Download => c.args([remote, format!("{local_s}/")]),
            };
        }
        Tool::S5cmd => {
            target.aws_env(&mut c);
            c.args(["--endpoint-url", &target.url, "cp"]);
            match dir {
                Direction::Upload => c.args([format!("{local_s}/*"), remote]),
                Direction::Download => c.args([format!("{remote}*"), format!("{local_s}/")]),
            };
        }
        Tool::Rclone => {
            target.rclone_env(&mut c);
            let n = RCLONE_TRANSFERS.to_string();
            let remote = format!("peer:{BUCKET}/{}", prefix.trim_end_matches('/'));
            c.args(["copy", "--transfers", &n, "--checkers", &n]);
            match dir {
                Direction::Upload => c.args([local_s, remote]),
                Direction::Download => c.args([remote, local_s]),
            };
        }
        Tool::DiskCeiling => {
            c.args([CEILING_ARG, "disk", &local_s, &set.files.to_string(), &set.bytes.to_string()]);
        }
        Tool::NetCeiling => {
            target.aws_env(&mut c);
            c.env("AWS_ENDPOINT_URL", &target.url);
            c.args([CEILING_ARG, "net", BUCKET, prefix, &set.files.to_string(), &set.bytes.to_string()]);
        }
    }
    c
}

fn command_line(c: &Command) -> String {
    std::iter::once(c.get_program())
        .chain(c.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks a downloaded directory against the source's sums: every file present with its
/// size and CRC, nothing else (no temp files left behind). The problems found.
fn verify_local(dir: &Path, set: &FileSet, sums: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = 0usize;
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return vec![format!("{}: {e}", dir.display())],
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(want) = sums.get(&name) else {
            problems.push(format!("unexpected file {name}"));
            continue;
        };
        seen += 1;
        let path = e.path();
        match std::fs::metadata(&path).map(|m| m.len()) {
            Ok(n) if n != set.bytes => problems.push(format!("{name}: {n} bytes, expected {}", set.bytes)),
            Ok(_) => match file_crc(&path) {
                Ok(got) if &got != want => problems.push(format!("{name}: CRC64NVME {got}, expected {want}")),
                Ok(_) => {}
                Err(e) => problems.push(format!("{name}: {e}")),
            },
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    if seen < sums.len() {
        problems.push(format!("{} of {} files missing", sums.len() - seen, sums.len()));
    }
    problems
}

/// Checks the objects under `prefix` against the source's sums (the stored full-object
/// CRC64NVME when the server has one, else the GET body hashed), then deletes them.
async fn verify_remote(
    c: &S3Client,
    prefix: &str,
    set: &FileSet,
    sums: &BTreeMap<String, String>,
) -> Result<Vec<String>> {
    let (objects, _) =
        c.list_all(BUCKET, ListParams { prefix: Some(prefix.to_owned()), ..ListParams::default() }).await?;
    let mut problems = Vec::new();
    let listed: BTreeMap<String, u64> = objects.iter().map(|o| (o.key[prefix.len()..].to_owned(), o.size)).collect();
    for name in listed.keys().filter(|k| !sums.contains_key(*k)) {
        problems.push(format!("unexpected object {prefix}{name}"));
    }
    let missing = sums.keys().filter(|k| !listed.contains_key(*k)).count();
    if missing > 0 {
        problems.push(format!("{missing} of {} objects missing", sums.len()));
    }
    let checks = futures_util::stream::iter(sums.iter().filter(|(k, _)| listed.contains_key(*k)))
        .map(|(name, want)| async move {
            let obj = ObjectRef::new(BUCKET, format!("{prefix}{name}"));
            let info = c.head_object(&obj).await.map_err(|e| format!("HEAD {obj}: {e}"))?;
            if info.size != set.bytes {
                return Err(format!("{obj}: {} bytes, expected {}", info.size, set.bytes));
            }
            let stored = info.checksums.iter().find(|(a, v)| *a == ALGO && !v.contains('-')).map(|(_, v)| v.clone());
            let got = match stored {
                Some(v) => v,
                None => {
                    let mut out =
                        c.get_object(&obj, Default::default()).await.map_err(|e| format!("GET {obj}: {e}"))?;
                    let mut h = Checksummer::new(ALGO);
                    while let Some(chunk) = out.body.chunk().await {
                        h.update(&chunk.map_err(|e| format!("GET {obj}: {e}"))?);
                    }
                    h.finish_base64()
                }
            };
            if &got != want {
                return Err(format!("{obj}: CRC64NVME {got}, expected {want}"));
            }
            Ok(())
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    problems.extend(checks.into_iter().filter_map(|r| r.err()));
    let keys: Vec<String> = objects.into_iter().map(|o| o.key).collect();
    let report = ferry_engine::delete_many(
        &ferry_engine::Engine::new(c.clone()),
        BUCKET,
        futures_util::stream::iter(keys),
        &Default::default(),
    )
    .await;
    if !report.failed.is_empty() {
        bail!(
            "deleting {prefix}: {} keys failed, first {}: {}",
            report.failed.len(),
            report.failed[0].key,
            report.failed[0].message
        );
    }
    Ok(problems)
}

fn installed(peers: &[Peer], ferry: &Path) -> (Vec<Installed>, Vec<(Tool, String)>) {
    let mut ok =
        vec![Installed { tool: Tool::Ferry, exe: ferry.to_path_buf(), version: env!("CARGO_PKG_VERSION").into() }];
    let mut absent = Vec::new();
    for (peer, tool) in [(Peer::S5cmd, Tool::S5cmd), (Peer::Rclone, Tool::Rclone)] {
        if !peers.contains(&peer) {
            continue;
        }
        match crate::peers::available(peer) {
            Ok(p) => ok.push(Installed { tool, exe: p.path, version: p.version }),
            Err(why) => absent.push((tool, why)),
        }
    }
    (ok, absent)
}

/// The tools in the order repeat `k` (from 0) runs them: rotated by one each repeat, so
/// no tool is always the one that runs first after the other direction or set (with a
/// fixed order, the first tool's first large download was its slowest: docs/lab/bench-quick-sizes.md).
fn rotated<T>(tools: &[T], k: usize) -> impl Iterator<Item = &T> {
    let n = tools.len().max(1);
    tools.iter().cycle().skip(k % n).take(tools.len())
}

/// Each ok tool record of one (repeat, set, download) group gets its bytes/s over the same
/// group's ceilings: `share_of_disk_ceiling`, `share_of_network_ceiling`,
/// `share_of_ceiling` (over the lower of the two: the bound if receiving and writing
/// overlapped for free) and `share_of_serial_ceiling` (over 1 / (1/disk + 1/network): the
/// bound if each byte cost both, one after the other, as on saturated cores), and its CPU
/// over the two ceilings' CPU summed (`cpu_over_ceilings`: what it spends beyond the two
/// copies every download makes). The disk ceiling's record gets
/// `disk_over_network_ceiling`. A ceiling that failed or is missing sets none of its own.
fn set_ceiling_shares(group: &mut [RunRecord]) {
    let ok = |tool: Tool| group.iter().find(|r| r.mode == tool.name() && r.status == "ok");
    let of = |tool: Tool| ok(tool).and_then(|r| r.figure("bytes_per_s")).filter(|v| *v > 0.0);
    let (disk, net) = (of(Tool::DiskCeiling), of(Tool::NetCeiling));
    let cpu = |tool: Tool| ok(tool).and_then(|r| r.figure("client_cpu_s"));
    let ceilings_cpu = cpu(Tool::DiskCeiling).zip(cpu(Tool::NetCeiling)).map(|(d, n)| d + n).filter(|c| *c > 0.0);
    for r in group.iter_mut().filter(|r| r.status == "ok") {
        let Some(v) = r.figure("bytes_per_s") else { continue };
        if r.mode == Tool::DiskCeiling.name() {
            if let Some(n) = net {
                r.set("disk_over_network_ceiling", v / n);
            }
        } else if r.mode != Tool::NetCeiling.name() {
            if let Some(d) = disk {
                r.set("share_of_disk_ceiling", v / d);
            }
            if let Some(n) = net {
                r.set("share_of_network_ceiling", v / n);
            }
            if let (Some(d), Some(n)) = (disk, net) {
                r.set("share_of_ceiling", v / d.min(n));
                r.set("share_of_serial_ceiling", v * (1.0 / d + 1.0 / n));
            }
            if let (Some(c), Some(cc)) = (r.figure("client_cpu_s"), ceilings_cpu) {
                r.set("cpu_over_ceilings", c / cc);
            }
        }
    }
}

/// Runs `cli-transfer` and returns its records and report.
pub fn run(size: Size, p: &CliTransferParams, opts: &RunOptions) -> Result<Outcome> {
    let mut session = crate::runner::Session::open(NAME, opts)?;
    let (tools, absent) = installed(&p.peers, &opts.server.program);
    let work = WorkDir(p.work_dir.join(format!("ferry-cli-transfer-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    let aws_config = work.0.join("empty-aws-config");
    std::fs::create_dir_all(&work.0).with_context(|| format!("creating {}", work.0.display()))?;
    std::fs::write(&aws_config, "")?;

    let mut sums = Vec::new();
    for (i, set) in p.sets.iter().enumerate() {
        session.say(&format!("{NAME}: writing {} files of {} under {}", set.files, human(set.bytes), work.0.display()));
        sums.push(write_set(&work.0.join("src").join(set.name), set, i as u64)?);
    }

    let spec = ServerSpec { label: p.profile, profile: p.profile, extra_args: vec![], signed: true };
    // An external server (`--endpoint-url`) stands in for ferry serve: its credentials
    // are the run's, and the server's own counters are not there to read.
    let (mut server, target) = match &opts.external {
        Some(ext) => {
            session.say(&format!("{NAME}: against the external server {}", ext.url));
            let target = Target {
                url: ext.url.clone(),
                access: ext.access_key.clone(),
                secret: ext.secret_key.clone(),
                aws_config,
            };
            (None, target)
        }
        None => {
            session.say(&format!("{NAME}: starting ferry serve --profile {} --memory", p.profile));
            // Started from this (the main) thread: PR_SET_PDEATHSIG follows the thread.
            let server = ServerProcess::start(&opts.server, &spec.args(), opts.server_lifetime, &opts.log_dir)
                .context("starting the server")?;
            let target = Target {
                url: server.url.clone(),
                access: server.banner_value("access key").unwrap_or("ferry").to_owned(),
                secret: server.banner_value("secret key").unwrap_or("ferry-secret").to_owned(),
                aws_config,
            };
            (Some(server), target)
        }
    };
    // The tools and the runtime start in the link's client namespace, if there is a link.
    let _client_ns = opts.link.as_ref().map(|l| l.enter_client()).transpose()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let client = S3Client::builder(target.url.clone())
        .region("us-east-1")
        .credentials(CredentialsSource::Explicit(Credentials::new(target.access.clone(), target.secret.clone())))
        .mode(Mode::H1Pool)
        .max_connections(64)
        .build()?;
    rt.block_on(crate::measure::create_bucket_if_missing(&client, BUCKET)).context("creating the bench bucket")?;
    for set in &p.sets {
        session.say(&format!(
            "{NAME}: putting {} ({}) under data/{}/ with ferry-engine",
            set.label(),
            set.name,
            set.name
        ));
        let dir = work.0.join("src").join(set.name);
        let names = set.names();
        let put = futures_util::stream::iter(names.iter())
            .map(|name| {
                let (client, path, obj) =
                    (&client, dir.join(name), ObjectRef::new(BUCKET, format!("data/{}/{name}", set.name)));
                async move {
                    ferry_engine::upload_file(
                        &ferry_engine::Engine::new(client.clone()),
                        &path,
                        &obj,
                        &Default::default(),
                        None,
                    )
                    .await
                    .with_context(|| format!("PUT {obj}"))
                }
            })
            .buffer_unordered(if set.bytes > 64 << 20 { 2 } else { 64 })
            .collect::<Vec<_>>();
        for r in rt.block_on(put) {
            r?;
        }
    }

    // Downloads' own filesystem (module note), dropped (unmounted) before `work`.
    let largest = p.sets.iter().map(|s| s.files as u64 * s.bytes).max().unwrap_or(0);
    let dest = DestFs::make(&work.0, largest + largest / 2 + (1 << 30));
    session.say(&format!("{NAME}: {}", dest.describe()));
    // The first large write onto the fresh filesystem is slow (module note); written once
    // here, untimed, the largest set does not slow the first download of repeat 1, which
    // the rotation always gives to the same tool (ferry).
    if let Some(set) = p.sets.iter().max_by_key(|s| s.files as u64 * s.bytes) {
        let warm = dest.root.join("warm-up");
        let started = Instant::now();
        std::fs::create_dir_all(&warm).with_context(|| format!("creating {}", warm.display()))?;
        write_ceiling(&warm, set, CEILING_THREADS)?;
        std::fs::remove_dir_all(&warm).with_context(|| format!("removing {}", warm.display()))?;
        session.say(&format!(
            "{NAME}: wrote {} once onto the download filesystem, untimed, in {:.1} s (module note)",
            set.label(),
            started.elapsed().as_secs_f64()
        ));
    }
    let dirs = [work.0.as_path(), dest.root.as_path()];
    // The tree written and PUT, flushed: the Dirty + Writeback every settle returns to.
    for d in dirs {
        sync_filesystem(d)?;
    }
    let baseline = unflushed_bytes().unwrap_or(0);
    session.say(&format!(
        "{NAME}: unflushed page cache after setup {} MiB (each run starts within {} MiB of it, or after {:?})",
        baseline >> 20,
        SETTLE_SLACK >> 20,
        SETTLE_LIMIT
    ));

    let mut params: Map<String, Value> = Map::new();
    params.insert(
        "sets".into(),
        json!(p.sets.iter().map(|s| json!({"name": s.name, "files": s.files, "bytes": s.bytes})).collect::<Vec<_>>()),
    );
    params.insert("rclone_transfers".into(), json!(RCLONE_TRANSFERS));
    params.insert("link".into(), json!(opts.link_name()));
    params.insert("download_disk".into(), json!(dest.root.display().to_string()));
    params.insert("download_fs".into(), json!(dest.kind.name()));
    params.insert("download_fs_ext4_journal".into(), json!(dest.ext4_journal));
    params.insert("download_fs_note".into(), json!(dest.describe()));
    // The reaper's own floor: what a tool that allocates nothing (/bin/true) measures.
    let floor = run_child(
        Command::new("/bin/true"),
        &work.0.join("floor.stderr"),
        Duration::from_secs(30),
        Some(&opts.server.program),
    )?
    .peak_rss_bytes;
    params.insert("rss_floor_bytes".into(), json!(floor));
    params.insert("settle_baseline_unflushed_bytes".into(), json!(baseline));
    params.insert("settle_slack_bytes".into(), json!(SETTLE_SLACK));
    params.insert("settle_limit_s".into(), json!(SETTLE_LIMIT.as_secs_f64()));
    params.insert(
        "versions".into(),
        json!(tools.iter().map(|t| (t.tool.name().to_owned(), json!(t.version))).collect::<Map<_, _>>()),
    );
    params.insert("ceiling_threads".into(), json!(CEILING_THREADS));
    params.insert("ceiling_write_bytes".into(), json!(CEILING_WRITE));
    params.insert("ceiling_part_bytes".into(), json!(CEILING_PART));
    // Downloads are also held against two ceilings run the same way (module note).
    // Every file of a set holds the same pattern: one CRC per set.
    let ceiling_sums: Vec<BTreeMap<String, String>> = p
        .sets
        .iter()
        .map(|set| {
            let crc = ceiling_crc(set.bytes);
            set.names().into_iter().map(|n| (n, crc.clone())).collect()
        })
        .collect();
    let ceilings = [Tool::DiskCeiling, Tool::NetCeiling].map(|tool| Installed {
        tool,
        exe: opts.server.program.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
    });
    let downloaders: Vec<Installed> = tools.iter().cloned().chain(ceilings).collect();
    let server_json = match (&server, &opts.external) {
        (Some(server), _) => json!({"label": spec.label, "args": spec.args(), "banner": server.banner}),
        (None, ext) => json!({
            "label": "external", "url": ext.as_ref().map(|e| e.url.clone()), "external": true,
            "note": crate::runner::EXTERNAL_NOTE,
        }),
    };
    let repeats = p.repeats.max(1);
    let mut commands: BTreeMap<String, String> = BTreeMap::new();
    for k in 1..=repeats {
        for (si, set) in p.sets.iter().enumerate() {
            for dir in [Direction::Upload, Direction::Download] {
                // One direction's runs of this set and repeat, written together once the
                // downloads' shares of this repeat's ceilings are known.
                let mut group: Vec<RunRecord> = Vec::new();
                let runners = match dir {
                    Direction::Upload => &tools,
                    Direction::Download => &downloaders,
                };
                for t in rotated(runners, k - 1) {
                    let label = row_label(dir, set, t.tool);
                    session.say(&format!("{NAME} · {label} · repeat {k} of {repeats}"));
                    let mut rec = RunRecord {
                        workload: NAME.into(),
                        size: size.name().into(),
                        mode: t.tool.name().into(),
                        variant: label.clone(),
                        repeat: k,
                        repeats,
                        status: "ok".into(),
                        profile: Some(p.profile.into()),
                        server: Some(server_json.clone()),
                        params: params.clone(),
                        ..RunRecord::default()
                    };
                    if let Some(server) = server.as_mut() {
                        if !server.alive() {
                            bail!("the server died (log: {})", server.log.display());
                        }
                    }
                    let (local, prefix) = match dir {
                        Direction::Upload => {
                            (work.0.join("src").join(set.name), format!("up/{}-{k}/{}/", t.tool.name(), set.name))
                        }
                        Direction::Download => (
                            dest.root.join(format!("{}-{k}-{}", t.tool.name(), set.name)),
                            format!("data/{}/", set.name),
                        ),
                    };
                    if dir == Direction::Download && t.tool != Tool::NetCeiling {
                        std::fs::create_dir_all(&local)?;
                    }
                    // Untimed: the source warm in the page cache for every tool alike, then
                    // the last run's writeback finished (module note).
                    if dir == Direction::Upload {
                        let w0 = Instant::now();
                        rec.set("warm_source_bytes", warm(&local, set)? as f64);
                        rec.set("warm_s", w0.elapsed().as_secs_f64());
                    }
                    let settled = settle(&dirs, baseline)?;
                    rec.set("settle_s", settled.wall.as_secs_f64());
                    rec.set("settled", if settled.reached { 1.0 } else { 0.0 });
                    if let Some(b) = settled.before {
                        rec.set("unflushed_before_settle_bytes", b as f64);
                    }
                    if let Some(a) = settled.after {
                        rec.set("unflushed_at_start_bytes", a as f64);
                    }
                    let cmd = tool_command(t, &target, dir, &local, &prefix, set);
                    let line = command_line(&cmd);
                    rec.client = Some(match t.tool.ceiling() {
                        None => json!({"tool": t.tool.name(), "version": t.version, "command": line}),
                        Some(c) => json!({"tool": t.tool.name(), "ceiling": c, "version": t.version, "command": line}),
                    });
                    commands.entry(label.clone()).or_insert(line);
                    let log = work.0.join(format!("{}.stderr", t.tool.name()));
                    let bytes = set.files as u64 * set.bytes;
                    // The server's counters around the child: the TCP connections and
                    // requests it needed (none of the tools reports them itself).
                    let before = ServerCounters::scrape(&target.url, None);
                    // An external server has no counters: its connections are counted from
                    // the kernel's socket table instead (sockets.rs).
                    let watch = opts
                        .external
                        .as_ref()
                        .and_then(|_| crate::sockets::server_addr(&target.url))
                        .map(crate::sockets::ConnWatch::start);
                    let child = run_child(cmd, &log, opts.run_timeout, Some(&opts.server.program));
                    if let Some(w) = watch {
                        rec.set("connections_opened", w.finish() as f64);
                        rec.params.insert("connections_counted".into(), json!(crate::sockets::COUNTED_BY));
                    }
                    if let (Some(b), Some(a)) = (before, ServerCounters::scrape(&target.url, None)) {
                        let d = a.since(&b);
                        rec.set("connections_opened", d.connections_opened);
                        rec.set("server_bytes_out", d.bytes_out);
                        // A fold from +0: an empty f64 sum is -0.0, printed "-0" (the disk ceiling's).
                        rec.set("requests_sent", d.requests.values().fold(0.0, |a, b| a + b));
                        for (op, n) in &d.requests {
                            rec.set(&format!("requests_{op}"), *n);
                        }
                    }
                    match child {
                        Err(e) => {
                            rec.status = "failed".into();
                            rec.error_samples.push(format!("{e:#}"));
                        }
                        Ok(r) => {
                            let secs = r.wall.as_secs_f64();
                            rec.set("objects", set.files as f64);
                            rec.set("bytes", bytes as f64);
                            rec.set("wall_s", secs);
                            rec.set("objects_per_s", set.files as f64 / secs);
                            rec.set("bytes_per_s", bytes as f64 / secs);
                            rec.set("client_cpu_s", r.cpu.as_secs_f64());
                            rec.set("client_cpu_s_per_gib", r.cpu.as_secs_f64() / (bytes as f64 / (1u64 << 30) as f64));
                            rec.set("peak_rss_bytes", r.peak_rss_bytes as f64);
                            if let Some(code) = r.exit {
                                rec.set("exit_code", code);
                            }
                            let mut problems = Vec::new();
                            if r.timed_out {
                                rec.status = "timeout".into();
                                problems.push(format!("killed after the {:?} run time-out", opts.run_timeout));
                            } else if r.exit != Some(0) {
                                problems.push(format!("exited {:?}: {}", r.exit, r.stderr_tail));
                            }
                            problems.extend(match (dir, t.tool) {
                                // Its own length checks made its exit code; the server's count
                                // says every body byte left it.
                                (_, Tool::NetCeiling) => match rec.figure("server_bytes_out") {
                                    Some(n) if n < bytes as f64 => {
                                        vec![format!("the server sent {n} body bytes, expected {bytes}")]
                                    }
                                    Some(_) => vec![],
                                    // An external server has no counters to read: the
                                    // ceiling's own length checks (its exit code) stand alone.
                                    None if opts.external.is_some() => vec![],
                                    None => vec!["the server's counters could not be read".into()],
                                },
                                (_, Tool::DiskCeiling) => verify_local(&local, set, &ceiling_sums[si]),
                                (Direction::Download, _) => verify_local(&local, set, &sums[si]),
                                (Direction::Upload, _) => {
                                    rt.block_on(verify_remote(&client, &prefix, set, &sums[si]))?
                                }
                            });
                            rec.set("errors", problems.len() as f64);
                            rec.set("verified_files", if problems.is_empty() { set.files as f64 } else { 0.0 });
                            if !problems.is_empty() && rec.status == "ok" {
                                rec.status = "errors".into();
                            }
                            rec.error_samples.extend(problems.into_iter().take(5));
                        }
                    }
                    // Removed right after its own run (untimed), so the next run's settle
                    // covers the delete's writeback as well.
                    if dir == Direction::Download && t.tool != Tool::NetCeiling {
                        let r0 = Instant::now();
                        let _ = std::fs::remove_dir_all(&local);
                        rec.set("remove_s", r0.elapsed().as_secs_f64());
                    }
                    group.push(rec);
                }
                set_ceiling_shares(&mut group);
                for rec in group {
                    session.record(rec)?;
                }
            }
        }
    }
    for (tool, why) in &absent {
        for set in &p.sets {
            for dir in [Direction::Upload, Direction::Download] {
                let rec = RunRecord {
                    workload: NAME.into(),
                    size: size.name().into(),
                    mode: tool.name().into(),
                    variant: row_label(dir, set, *tool),
                    repeat: 1,
                    repeats: 1,
                    status: "absent".into(),
                    note: Some(why.clone()),
                    params: params.clone(),
                    ..RunRecord::default()
                };
                session.record(rec)?;
            }
        }
    }
    drop(rt);
    drop(server);
    drop(dest);
    let mut report = render(size, p, &session.records, &session.ctx, &commands);
    if let Some(ext) = &opts.external {
        report = format!("Server: {} ({}).\n\n{report}", ext.url, crate::runner::EXTERNAL_NOTE);
    }
    Ok(session.finish(report))
}

/// The report's line on one set's download ceilings: which of the two binds, by repeat,
/// and each tool's share of the lower one (nothing when no ceiling ran).
fn ceiling_line(s: &mut String, set: &FileSet, records: &[RunRecord]) {
    let row = |tool: Tool| row_label(Direction::Download, set, tool);
    let (disk, net) = (row(Tool::DiskCeiling), row(Tool::NetCeiling));
    let ok = |label: &str| records.iter().filter(|r| r.variant == label && r.status == "ok").collect::<Vec<_>>();
    let (d, n) = (ok(&disk), ok(&net));
    if d.is_empty() && n.is_empty() {
        return;
    }
    let figures = |rs: &[&RunRecord], f: &str, scale: f64| {
        rs.iter().filter_map(|r| r.figure(f)).map(|v| v * scale).collect::<Vec<_>>()
    };
    let binds = figures(&d, "disk_over_network_ceiling", 1.0);
    let lower = binds.iter().filter(|v| **v < 1.0).count();
    let mut line = format!(
        "- download {}, its ceilings in the same repeats: disk (written from memory, {} threads, {} KiB writes) {} MB/s, network (ferry-store GETs into memory) {} MB/s; disk / network {} per repeat: the disk is the lower in {lower} of {}",
        set.label(),
        CEILING_THREADS,
        CEILING_WRITE >> 10,
        crate::report::spread_text(&figures(&d, "bytes_per_s", 1e-6), 0, ""),
        crate::report::spread_text(&figures(&n, "bytes_per_s", 1e-6), 0, ""),
        crate::report::spread_text(&binds, 2, "x"),
        binds.len(),
    );
    for (what, figure, scale, unit, digits) in [
        ("each tool's MB/s over the lower of its repeat's two", "share_of_ceiling", 100.0, "%", 0),
        ("over both in series (1 / (1/disk + 1/network))", "share_of_serial_ceiling", 100.0, "%", 0),
        ("its CPU over the two ceilings' CPU summed", "cpu_over_ceilings", 1.0, "x", 2),
    ] {
        let shares: Vec<String> = [Tool::Ferry, Tool::S5cmd, Tool::Rclone]
            .iter()
            .filter_map(|t| {
                let v = figures(&ok(&row(*t)), figure, scale);
                (!v.is_empty()).then(|| format!("{} {}", t.name(), crate::report::spread_text(&v, digits, unit)))
            })
            .collect();
        if !shares.is_empty() {
            let _ = write!(line, "; {what}: {}", shares.join(", "));
        }
    }
    let _ = writeln!(s, "{line}");
}

/// The Markdown report: one table (medians and min-max over the repeats), then ferry's
/// bytes/s over each peer's, paired by repeat, then how each tool was run.
pub fn render(
    size: Size,
    p: &CliTransferParams,
    records: &[RunRecord],
    ctx: &RunContext,
    commands: &BTreeMap<String, String>,
) -> String {
    let mut s = String::new();
    crate::report::heading(
        &mut s,
        NAME,
        size,
        p.repeats,
        &format!("; profile {}; the tools' order rotates by one each repeat", p.profile),
        ctx,
    );
    let _ = writeln!(s, "| row | objects/s | MB/s | wall s | % of disk ceiling | % of network ceiling | TCP conns opened | requests | child CPU s | child CPU ms / request | child CPU s / GiB | child peak RSS MiB | errors | settle s (untimed) |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut labels: Vec<&str> = Vec::new();
    for r in records {
        if !labels.contains(&r.variant.as_str()) {
            labels.push(&r.variant);
        }
    }
    for l in &labels {
        let rs: Vec<&RunRecord> = records.iter().filter(|r| r.variant == *l && r.status != "absent").collect();
        if rs.is_empty() {
            let why = records.iter().find(|r| r.variant == *l).and_then(|r| r.note.clone()).unwrap_or_default();
            let _ = writeln!(s, "| {l} | absent: {why} | | | | | | | | | | | | |");
            continue;
        }
        let _ = writeln!(
            s,
            "| {l} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&rs, "objects_per_s", 1.0, if l.contains("KiB") { 0 } else { 2 }),
            cell(&rs, "bytes_per_s", 1e-6, 0),
            cell(&rs, "wall_s", 1.0, 2),
            cell(&rs, "share_of_disk_ceiling", 100.0, 0),
            cell(&rs, "share_of_network_ceiling", 100.0, 0),
            cell(&rs, "connections_opened", 1.0, 0),
            cell(&rs, "requests_sent", 1.0, 0),
            cell(&rs, "client_cpu_s", 1.0, 2),
            cell(&rs, crate::record::CPU_PER_1K_REQUESTS, 1.0, 3),
            cell(&rs, crate::record::CPU_PER_GIB, 1.0, 2),
            cell(&rs, "peak_rss_bytes", 1.0 / 1048576.0, 0),
            cell(&rs, "errors", 1.0, 0),
            cell(&rs, "settle_s", 1.0, 1),
        );
    }
    s.push('\n');
    for set in &p.sets {
        for dir in [Direction::Upload, Direction::Download] {
            let ours = row_label(dir, set, Tool::Ferry);
            for tool in [Tool::S5cmd, Tool::Rclone] {
                let theirs = row_label(dir, set, tool);
                if let Some(r) = crate::verdict::paired_ratio(records, &ours, &theirs, "bytes_per_s") {
                    let _ = writeln!(
                        s,
                        "- {} {}: ferry / {} = {:.2}x ({:.2}-{:.2}, {} repeats)",
                        dir.name(),
                        set.label(),
                        tool.name(),
                        r.median,
                        r.min,
                        r.max,
                        r.n
                    );
                }
            }
        }
        ceiling_line(&mut s, set, records);
    }
    let _ = writeln!(s, "- goal: ferry ahead of both peers on every row; the copies are checked file by file (size and CRC64NVME) after each run, untimed");
    let unsettled = records.iter().filter(|r| r.figure("settled") == Some(0.0)).count();
    let _ = writeln!(s, "- before each run (untimed): uploads' source read through once (warm in the page cache for every tool), the last copy removed (right after its own run), syncfs, and a wait until Dirty + Writeback are back near the post-setup level ({unsettled} runs started before they were)");
    if let Some(note) = records.iter().find_map(|r| r.params.get("download_fs_note").and_then(Value::as_str)) {
        let _ = writeln!(s, "- {note}");
    }
    let floor = records.iter().find_map(|r| r.params.get("rss_floor_bytes").and_then(Value::as_f64)).unwrap_or(0.0);
    let _ = writeln!(s, "- CPU and peak RSS are the child's own (wait4 rusage, taken by a fresh reaper process so the bench's heap is not in it; /bin/true measures {:.1} MiB that way); wall time includes the tool's start-up", floor / 1048576.0);
    let _ = writeln!(s, "- TCP conns opened and requests: the server's counters (/_ferry/metrics) read before and after each child, so they are the tool's own (records: requests_<Operation> per S3 operation)");
    for (l, c) in commands {
        let _ = writeln!(s, "- {l}: `{c}`");
    }
    crate::report::not_clean(&mut s, records);
    s
}

/// `cli-transfer` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "cli-transfer",
    quick:
        "ferry cp, s5cmd and rclone as child processes, up and down: 1,000 x 16 KiB and 4 x 256 MiB files, lan profile",
    full: "the same with 10,000 x 16 KiB and 4 x 1 GiB files",
    peers: &[crate::peers::Peer::S5cmd, crate::peers::Peer::Rclone],
    in_suite: false,
    default_link: None,
    run: crate::workload::run_defaults::<CliTransferParams>,
    claim,
};

crate::impl_params!(CliTransferParams, |size, p, o| run(size, p, o));

/// cli-transfer's row of a claims table (it is not in `ferry bench all`; `ferry bench
/// claims` reads it): nothing is published, so the row states ferry's bytes/s against each
/// peer's in every direction and set that ran, paired by repeat, and whether ferry was
/// ahead (by 10% or more, the verdict rule's threshold), level or behind.
pub fn claim(records: &[crate::record::RunRecord]) -> crate::verdict::Headline {
    let published = "none published: ferry cp beside s5cmd and rclone";
    let suffix = format!(" · {}", Tool::Ferry.name());
    let mut rows: Vec<&str> = Vec::new();
    for r in records {
        if let Some(row) = r.variant.strip_suffix(&suffix) {
            if !rows.contains(&row) {
                rows.push(row);
            }
        }
    }
    let mut parts = Vec::new();
    let (mut ahead, mut behind, mut n) = (0, 0, 0);
    for row in rows {
        let mut cmp = Vec::new();
        for peer in [Tool::S5cmd, Tool::Rclone] {
            let num = format!("{row}{suffix}");
            let den = format!("{row} · {}", peer.name());
            if let Some(s) = crate::verdict::paired_ratio(records, &num, &den, "bytes_per_s") {
                n += 1;
                ahead += usize::from(s.median >= 1.1);
                behind += usize::from(s.median <= 1.0 / 1.1);
                cmp.push(format!("{} {}", crate::verdict::x2(&s), peer.name()));
            }
        }
        if !cmp.is_empty() {
            parts.push(format!("{row}: ferry {}", cmp.join(", ")));
        }
    }
    if n == 0 {
        return crate::verdict::Headline::new(NAME, published, "no paired clean runs of ferry and a peer".into(), "-");
    }
    let verdict = if ahead == n {
        "none published: ferry ahead of each peer"
    } else if behind > 0 {
        "none published: ferry behind a peer in some rows"
    } else {
        "none published: ferry level with or ahead of the peers"
    };
    crate::verdict::Headline::new(NAME, published, parts.join("; "), verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_holds_ferry_against_each_peer_by_repeat() {
        let rec = |variant: &str, repeat: usize, v: f64| {
            let mut r =
                crate::record::RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..Default::default() };
            r.set("bytes_per_s", v);
            r
        };
        let mut recs = Vec::new();
        for rep in 1..=3 {
            recs.push(rec("download 1000 x 16 KiB · ferry", rep, 200.0));
            recs.push(rec("download 1000 x 16 KiB · s5cmd", rep, 100.0));
            recs.push(rec("download 1000 x 16 KiB · rclone", rep, 150.0));
        }
        let h = claim(&recs);
        assert!(h.measured.starts_with("download 1000 x 16 KiB: ferry 2.00x s5cmd"), "{}", h.measured);
        assert!(h.measured.contains("1.33x rclone"), "{}", h.measured);
        assert_eq!(h.verdict, "none published: ferry ahead of each peer");
        recs.push(rec("upload 1000 x 16 KiB · ferry", 1, 50.0));
        recs.push(rec("upload 1000 x 16 KiB · s5cmd", 1, 100.0));
        let h = claim(&recs);
        assert!(h.measured.contains("; upload 1000 x 16 KiB: ferry 0.50x s5cmd"), "{}", h.measured);
        assert_eq!(h.verdict, "none published: ferry behind a peer in some rows");
        assert_eq!(claim(&[]).verdict, "-");
    }

    #[test]
    fn sizes_and_labels() {
        let q = CliTransferParams::new(Size::Quick);
        assert_eq!(q.sets[0].label(), "1000 x 16 KiB");
        assert_eq!(q.sets[1].label(), "4 x 256 MiB");
        let f = CliTransferParams::new(Size::Full);
        assert_eq!(f.sets[0].files, 10_000);
        assert_eq!(f.sets[1].bytes, 1 << 30);
        assert_eq!(row_label(Direction::Download, &f.sets[1], Tool::S5cmd), "download 4 x 1 GiB · s5cmd");
    }

    #[test]
    fn files_differ_and_verify() {
        let dir = std::env::temp_dir().join(format!("ferry-cli-transfer-test-{}", std::process::id()));
        let _guard = WorkDir(dir.clone());
        let set = FileSet { name: "t", files: 3, bytes: 1000 };
        let sums = write_set(&dir, &set, 0).unwrap();
        assert_eq!(sums.len(), 3);
        let distinct: std::collections::BTreeSet<&String> = sums.values().collect();
        assert_eq!(distinct.len(), 3, "every file has its own bytes");
        assert!(verify_local(&dir, &set, &sums).is_empty());
        // A changed byte, a missing file and a stray temp file are each caught.
        let mut b = std::fs::read(dir.join("f-000001.bin")).unwrap();
        b[10] ^= 1;
        std::fs::write(dir.join("f-000001.bin"), b).unwrap();
        std::fs::remove_file(dir.join("f-000002.bin")).unwrap();
        std::fs::write(dir.join(".f-000002.bin.ferry-part"), b"x").unwrap();
        let problems = verify_local(&dir, &set, &sums);
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn unflushed_is_dirty_plus_writeback() {
        let m = "MemTotal:       24683520 kB\nDirty:            420732 kB\nWriteback:          1024 kB\nWritebackTmp:          7 kB\n";
        assert_eq!(parse_unflushed(m), Some((420_732 + 1024) * 1024), "WritebackTmp is not Writeback");
        assert_eq!(parse_unflushed("Dirty: 5 kB\n"), None, "a missing line is not zero");
        // This machine's own file parses (Linux only; the bench runs nowhere else).
        assert!(unflushed_bytes().is_some());
    }

    #[test]
    fn settle_waits_for_writeback_and_is_bounded() {
        // Draining: stops at the first reading under the ceiling, reporting both ends.
        let mut left = vec![Some(900u64), Some(500), Some(120), Some(90), Some(10)].into_iter();
        let s = wait_until_flushed(|| left.next().flatten(), 100, Duration::from_secs(10), Duration::ZERO);
        assert!(s.reached);
        assert_eq!((s.before, s.after), (Some(900), Some(90)));
        assert_eq!(left.next(), Some(Some(10)), "no reading after the one that settled");
        // Never draining: gives up at the limit, marked as not settled.
        let s = wait_until_flushed(|| Some(1000), 100, Duration::from_millis(30), Duration::from_millis(5));
        assert!(!s.reached && s.wall >= Duration::from_millis(30) && s.wall < Duration::from_secs(5));
        assert_eq!(s.after, Some(1000));
        // Unreadable: nothing to wait on.
        let s = wait_until_flushed(|| None, 100, Duration::from_secs(10), Duration::ZERO);
        assert!(!s.reached && s.before.is_none());
    }

    #[test]
    fn settle_and_warm_on_a_real_tree() {
        let dir = std::env::temp_dir().join(format!("ferry-cli-transfer-settle-{}", std::process::id()));
        let _guard = WorkDir(dir.clone());
        let set = FileSet { name: "w", files: 2, bytes: 3 << 20 };
        write_set(&dir, &set, 1).unwrap();
        assert_eq!(warm(&dir, &set).unwrap(), 6 << 20, "every byte of the set is read");
        // A generous baseline: syncfs ran and the wait ends without reaching the limit.
        let s = settle(&[&dir], u64::MAX / 2).unwrap();
        assert!(s.reached && s.before.is_some());
        assert!(sync_filesystem(&dir.join("absent")).is_err());
        std::fs::remove_file(dir.join("f-000001.bin")).unwrap();
        assert!(warm(&dir, &set).is_err(), "a missing source file is an error, not a short read");
    }

    #[test]
    fn downloads_get_a_journaled_ext4_as_root_else_the_work_dir() {
        assert_eq!(ext4_has_journal(Path::new("/proc")), None, "procfs is not ext4");
        let work = std::env::temp_dir().join(format!("ferry-cli-transfer-dest-{}", std::process::id()));
        let _guard = WorkDir(work.clone());
        std::fs::create_dir_all(&work).unwrap();
        let dest = DestFs::make(&work, 64 << 20);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert_eq!(dest.kind, DestKind::WorkDir);
            assert!(dest.fallback_reason.as_deref().unwrap().contains("not root"));
            assert!(dest.describe().contains("work directory"));
            return;
        }
        // As root the bench may still lack losetup or mount (a container): then it says why.
        if dest.kind == DestKind::WorkDir {
            eprintln!("no loop mount here: {:?}", dest.fallback_reason);
            return;
        }
        assert_eq!(dest.ext4_journal, Some(true), "mkfs.ext4's defaults make a journal");
        use std::os::unix::fs::MetadataExt;
        let dev = |p: &Path| std::fs::metadata(p).unwrap().dev();
        assert_ne!(dev(&dest.root), dev(&work), "a filesystem of its own");
        std::fs::write(dest.root.join("f"), b"x").unwrap();
        let image = work.join("dst.ext4");
        assert!(image.exists());
        drop(dest);
        assert!(!image.exists(), "the image is removed with the mount");
        assert!(!work.join("dst").join("f").exists(), "unmounted: the file was on the image");
    }

    #[test]
    fn disk_ceiling_writes_files_that_verify() {
        let dir = std::env::temp_dir().join(format!("ferry-cli-transfer-ceiling-{}", std::process::id()));
        let _guard = WorkDir(dir.clone());
        // Larger than one write (sized first, several pwrites, a short last one) and smaller.
        for set in [
            FileSet { name: "l", files: 3, bytes: 2 * CEILING_WRITE as u64 + 4097 },
            FileSet { name: "s", files: 7, bytes: 1000 },
        ] {
            let d = dir.join(set.name);
            std::fs::create_dir_all(&d).unwrap();
            write_ceiling(&d, &set, CEILING_THREADS).unwrap();
            let sums: BTreeMap<String, String> = set.names().into_iter().map(|n| (n, ceiling_crc(set.bytes))).collect();
            assert!(verify_local(&d, &set, &sums).is_empty(), "{}", set.name);
            // A tree already there is an error, never overwritten.
            let e = write_ceiling(&d, &set, 2).unwrap_err();
            assert!(format!("{e:#}").contains("creating"), "{e:#}");
        }
        assert_ne!(ceiling_crc(1000), ceiling_crc(1001));
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(
            ceiling_main(&args(&["disk", "/nonexistent-dir", "2", "10"])),
            1,
            "an unwritable directory is an error"
        );
        assert_eq!(ceiling_main(&args(&["disk", "x", "two", "10"])), 2);
        assert_eq!(ceiling_main(&args(&["net", "other-bucket", "p/", "1", "1"])), 2);
        assert_eq!(ceiling_main(&args(&[])), 2);
    }

    #[test]
    fn download_rows_get_their_repeats_ceiling_shares() {
        let rec = |tool: Tool, status: &str, bps: f64| {
            let mut r = RunRecord { mode: tool.name().into(), status: status.into(), ..RunRecord::default() };
            r.set("bytes_per_s", bps);
            r.set("client_cpu_s", 4e3 / bps);
            r
        };
        let mut g = vec![
            rec(Tool::Ferry, "ok", 400.0),
            rec(Tool::DiskCeiling, "ok", 500.0),
            rec(Tool::S5cmd, "errors", 300.0),
            rec(Tool::NetCeiling, "ok", 1000.0),
        ];
        set_ceiling_shares(&mut g);
        assert_eq!(g[0].figure("share_of_disk_ceiling"), Some(0.8));
        assert_eq!(g[0].figure("share_of_network_ceiling"), Some(0.4));
        assert_eq!(g[0].figure("share_of_ceiling"), Some(0.8), "over the lower of the two");
        assert!((g[0].figure("share_of_serial_ceiling").unwrap() - 1.2).abs() < 1e-12, "400 over 1 / (1/500 + 1/1000)");
        assert!((g[0].figure("cpu_over_ceilings").unwrap() - 10.0 / 12.0).abs() < 1e-12, "10 CPU-s over 8 + 4");
        assert_eq!(g[1].figure("disk_over_network_ceiling"), Some(0.5));
        assert_eq!(g[2].figure("share_of_disk_ceiling"), None, "a run with errors gets no share");
        assert_eq!(g[3].figure("share_of_ceiling"), None);
        // A failed ceiling is no ceiling; uploads (no ceilings) get nothing.
        let mut g = vec![
            rec(Tool::Ferry, "ok", 400.0),
            rec(Tool::DiskCeiling, "failed", 500.0),
            rec(Tool::NetCeiling, "ok", 800.0),
        ];
        set_ceiling_shares(&mut g);
        assert_eq!(
            (
                g[0].figure("share_of_disk_ceiling"),
                g[0].figure("share_of_network_ceiling"),
                g[0].figure("share_of_ceiling")
            ),
            (None, Some(0.5), None)
        );
        assert_eq!((g[0].figure("share_of_serial_ceiling"), g[0].figure("cpu_over_ceilings")), (None, None));
        let mut g = vec![rec(Tool::Ferry, "ok", 400.0)];
        set_ceiling_shares(&mut g);
        assert_eq!(g[0].figures.len(), 2, "bytes/s and CPU only");
    }

    #[test]
    fn every_tool_takes_each_place_in_turn() {
        let t = ["ferry", "s5cmd", "rclone"];
        let order = |k| rotated(&t, k).copied().collect::<Vec<_>>();
        assert_eq!(order(0), ["ferry", "s5cmd", "rclone"]);
        assert_eq!(order(1), ["s5cmd", "rclone", "ferry"]);
        assert_eq!(order(2), ["rclone", "ferry", "s5cmd"]);
        assert_eq!(order(3), order(0));
        assert_eq!(rotated(&[] as &[u8], 5).count(), 0);
    }

    #[test]
    fn reaper_line_round_trip() {
        let dir = std::env::temp_dir().join(format!("ferry-cli-transfer-reap-{}", std::process::id()));
        let _guard = WorkDir(dir.clone());
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("r");
        let args: Vec<std::ffi::OsString> =
            [out.to_str().unwrap(), "/bin/sh", "-c", "exit 5"].iter().map(Into::into).collect();
        assert_eq!(reap_main(&args), 0);
        let (wall, _cpu, rss, status) = parse_reaped(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert!(wall > Duration::ZERO && rss > 0);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 5);
        assert_eq!(reap_main(&args[..1]), 2, "no program: a usage error");
        assert_eq!(parse_reaped("1 2 3"), None);
        assert_eq!(parse_reaped("1 2 x 0"), None);
    }

    #[test]
    fn child_rusage_is_its_own() {
        let log = std::env::temp_dir().join(format!("ferry-cli-transfer-child-{}.log", std::process::id()));
        let mut c = Command::new("/bin/sh");
        c.args(["-c", "head -c 67108864 /dev/zero | tr '\\0' a > /dev/null; echo done >&2; exit 3"]);
        let r = run_child(c, &log, Duration::from_secs(60), None).unwrap();
        assert_eq!(r.exit, Some(3));
        assert_eq!(r.stderr_tail, "done");
        assert!(!r.timed_out && r.peak_rss_bytes > 0);
        let mut c = Command::new("/bin/sleep");
        c.arg("30");
        let r = run_child(c, &log, Duration::from_millis(200), None).unwrap();
        assert!(r.timed_out && r.exit.is_none() && r.wall < Duration::from_secs(10));
        let _ = std::fs::remove_file(log);
    }
}
