//! What the lab reads from the operating system: the client's CPU time and memory
//! (getrusage of this process; the server runs in another one, so it is not counted),
//! the machine, and the source revision.

use std::process::Command;
use std::time::Duration;

/// User + system CPU time of this process so far (`getrusage(RUSAGE_SELF)`), less the
/// emulated link's delay line threads (ferry-link), which run in this process too.
pub fn cpu_time() -> Duration {
    let ru = rusage();
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    (tv(ru.ru_utime) + tv(ru.ru_stime)).saturating_sub(ferry_link::delay_line_cpu_time())
}

/// Peak resident set size of this process so far, in bytes (`ru_maxrss`, KiB on Linux).
/// A high-water mark over the process's life: it never goes down.
pub fn peak_rss_bytes() -> u64 {
    rusage().ru_maxrss.max(0) as u64 * 1024
}

/// Current resident set size in bytes, from `/proc/self/statm` (0 where unavailable).
pub fn current_rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else { return 0 };
    let pages: u64 = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(4096) as u64
}

fn rusage() -> libc::rusage {
    // SAFETY: getrusage writes a rusage into the zeroed struct we own.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    }
}

/// The machine a record was measured on.
#[derive(Clone, Debug)]
pub struct Machine {
    pub nproc: usize,
    pub kernel: String,
}

impl Machine {
    pub fn detect() -> Machine {
        let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        Machine { nproc, kernel }
    }
}

/// `git rev-parse HEAD` in the current directory, and whether the tree has changes.
pub fn git_revision() -> (Option<String>, Option<bool>) {
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let sha = out(&["rev-parse", "HEAD"]).filter(|s| !s.is_empty());
    let dirty =
        sha.as_ref().and_then(|_| out(&["status", "--porcelain", "--untracked-files=no"])).map(|s| !s.is_empty());
    (sha, dirty)
}
