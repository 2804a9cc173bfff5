//! The open-file limit: raised to the hard limit at start, and checked against what the
//! connection cap needs.
//!
//! Every connection is a socket, and a socket is a file descriptor; a disk-backed upload
//! or download holds one more while it runs. Linux starts most processes with a soft
//! `RLIMIT_NOFILE` of 1,024 (systemd's default, kept for `select(2)`), which caps a server
//! far below its `max_connections`; the hard limit (often 524,288 under systemd, set by
//! `ulimit -Hn` or `LimitNOFILE=`) is ours to take without privilege, as nginx's
//! `worker_rlimit_nofile` and Go's runtime do. Past the limit `accept` fails with
//! EMFILE and the server can neither answer nor refuse: so the start-up banner says what
//! the process got and warns when it is short.

/// Descriptors the process holds besides its connections: the listener, each thread's
/// epoll and eventfd, std streams, the disk backend's files in flight. 64 is a margin over
/// the ~20 a two-core server uses at rest.
pub const RESERVED_FDS: u64 = 64;

/// What [`raise_open_file_limit`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit at start.
    pub before: u64,
    /// The soft limit now (the hard limit unless raising it failed).
    pub now: u64,
    /// The hard limit.
    pub hard: u64,
}

impl FdLimit {
    /// Descriptors `max_connections` connections need, with [`RESERVED_FDS`] besides.
    pub fn needed(max_connections: usize) -> u64 {
        max_connections as u64 + RESERVED_FDS
    }

    /// One line for the banner: what the process got, and whether it is enough.
    pub fn describe(&self, max_connections: usize) -> String {
        let raised = if self.now > self.before { format!(" (raised from {})", self.before) } else { String::new() };
        format!(
            "open files: {}{raised}, hard limit {}; {} connections need {}",
            self.now,
            self.hard,
            max_connections,
            Self::needed(max_connections)
        )
    }

    /// A warning when the limit is below what `max_connections` needs, naming the fix.
    pub fn shortfall(&self, max_connections: usize) -> Option<String> {
        let needed = Self::needed(max_connections);
        (self.now < needed).then(|| {
            format!(
                "the open-file limit is {} (hard limit {}), below the {needed} that {max_connections} connections need: \
                 past about {} connections, accept fails (EMFILE) and new clients hang instead of being served or \
                 refused. Raise the hard limit (`ulimit -Hn`, systemd's LimitNOFILE=) or lower --max-connections.",
                self.now,
                self.hard,
                self.now.saturating_sub(RESERVED_FDS)
            )
        })
    }
}

/// Raises the soft `RLIMIT_NOFILE` of this process to its hard limit. Process-wide, and
/// harmless to repeat.
pub fn raise_open_file_limit() -> std::io::Result<FdLimit> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before: u64 = lim.rlim_cur;
    // An unlimited hard limit cannot be the soft one: Linux caps it at fs.nr_open.
    let hard = match lim.rlim_max {
        libc::RLIM_INFINITY => {
            std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(1 << 20)
        }
        h => h,
    };
    if before < hard {
        let raised = libc::rlimit { rlim_cur: hard, rlim_max: lim.rlim_max };
        // SAFETY: setrlimit reads the struct; raising the soft limit up to the hard one
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Ok(FdLimit { before, now: before, hard });
        }
    }
    Ok(FdLimit { before, now: hard.max(before), hard })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit_and_a_shortfall_is_named() {
        let got = raise_open_file_limit().unwrap();
        assert_eq!(got.now, got.hard);
        assert!(got.now >= got.before);
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, got.hard);
        let short = FdLimit { before: 1024, now: 1024, hard: 1024 };
        let warning = short.shortfall(4096).expect("1,024 is short of 4,096 connections");
        assert!(warning.contains("4160") && warning.contains("--max-connections"), "{warning}");
        assert_eq!(FdLimit { before: 1024, now: 20_000, hard: 20_000 }.shortfall(4096), None);
        assert!(FdLimit { before: 1024, now: 20_000, hard: 20_000 }.describe(4096).contains("raised from 1024"));
    }
}
