//! The server's CPU during each row, read from the operating system: who is the bound
//! when client and server share the lab's two cores. Against MinIO a ferry row can lose
//! to a peer only because MinIO got a smaller share of the CPU in that row's moment; the
//! server's CPU per request and its share of the machine say when the server, not the
//! client, set the rate, and the client's CPU per request is then the fair comparison.
//!
//! ```text
//! the server's pid: ferry serve's own process, or, for an external server on this
//!   machine, the process holding the listening socket of its address (the kernel's TCP
//!   table gives the socket's inode, /proc/PID/fd the process that holds it)
//! Sample::take(pid) ─ the server's utime + stime (/proc/PID/stat) and the machine's
//!   busy and total jiffies (/proc/stat) ─► the row runs ─► Sample::since(before)
//!   ─► server_cpu_s, server_cores (its CPU over the row's time), machine_busy
//! ```
//!
//! The clock is the kernel's tick (10 ms at the usual 100 Hz), so a row of 0.1 s reads its
//! server CPU to about ±10%; the quick size's shortest rows are that short. A server in
//! another network namespace (`--link`) is found by its pid when ferry started it, and not
//! at all when it is an external one: its rows then carry no server figures.

use crate::record::RunRecord;
use std::net::SocketAddr;
use std::time::Instant;

/// What one read saw.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    at: Instant,
    /// The server's user + system CPU, in seconds (none read: the machine only).
    server_cpu_s: Option<f64>,
    /// The machine's busy and total CPU, in seconds summed over its cores.
    machine: Option<(f64, f64)>,
}

/// A row's share of the server's CPU and of the machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Used {
    pub server_cpu_s: Option<f64>,
    /// The server's CPU over the row's wall time: cores it kept busy on average.
    pub server_cores: Option<f64>,
    /// The machine's busy share over the row, 0-1 (all cores).
    pub machine_busy: Option<f64>,
    /// The time between the two samples.
    pub wall_s: f64,
}

fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of `pid`, in seconds, from the text of `/proc/PID/stat`. The command
/// name (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
pub fn parse_stat_cpu(stat: &str, ticks_per_s: f64) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_s)
}

/// (busy, total) jiffies of the machine from the `cpu` line of `/proc/stat`; idle and
/// iowait are not busy.
pub fn parse_proc_stat(text: &str) -> Option<(f64, f64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    if v.len() < 5 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: f64 = v.iter().take(8).sum();
    Some((total - v[3] - v[4], total))
}

impl Sample {
    /// Reads `pid`'s CPU and the machine's now; `None` if the process is gone.
    pub fn take(pid: u32) -> Option<Sample> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let server_cpu_s = parse_stat_cpu(&stat, ticks_per_s())?;
        Some(Sample { server_cpu_s: Some(server_cpu_s), ..Sample::machine() })
    }

    /// Reads the machine's CPU only (a row whose server is not a process of this
    /// machine's that the bench can name).
    pub fn machine() -> Sample {
        let tps = ticks_per_s();
        let machine = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| parse_proc_stat(&t))
            .map(|(busy, total)| (busy / tps, total / tps));
        Sample { at: Instant::now(), server_cpu_s: None, machine }
    }

    /// What was used from `before` to this sample.
    pub fn since(&self, before: &Sample) -> Used {
        let wall = (self.at - before.at).as_secs_f64().max(1e-9);
        let server_cpu_s = self.server_cpu_s.zip(before.server_cpu_s).map(|(a, b)| (a - b).max(0.0));
        let machine_busy = match (self.machine, before.machine) {
            (Some((b1, t1)), Some((b0, t0))) if t1 > t0 => Some(((b1 - b0) / (t1 - t0)).clamp(0.0, 1.0)),
            _ => None,
        };
        Used { server_cpu_s, server_cores: server_cpu_s.map(|c| c / wall), machine_busy, wall_s: wall }
    }
}

/// The socket inode of the listener on `addr` in a `/proc/net/tcp` (or `tcp6`) text, also
/// one bound to the unspecified address on the same port.
pub fn listener_inode(text: &str, addr: SocketAddr) -> Option<u64> {
    const LISTEN: &str = "0A";
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != LISTEN {
            continue;
        }
        let Some(local) = crate::sockets::parse_table(&format!("header\n{line}")).first().map(|e| e.local) else {
            continue;
        };
        let same = local.port() == addr.port()
            && (local.ip() == addr.ip() || local.ip().is_unspecified() || mapped(local) == Some(addr.ip()));
        if same {
            return f[9].parse().ok();
        }
    }
    None
}

fn mapped(a: SocketAddr) -> Option<std::net::IpAddr> {
    match a.ip() {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map(std::net::IpAddr::V4),
        _ => None,
    }
}

/// The process listening on `addr` in this thread's network namespace, if this user can
/// see its file descriptors (root, or the same user).
pub fn listener_pid(addr: SocketAddr) -> Option<u32> {
    let inode = ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|t| listener_inode(&t, addr))?;
    let want = format!("socket:[{inode}]");
    for p in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// The machine's busy share at or above which its CPU is taken as the row's bound: the
/// lab's two cores less the sampling's tick of error and the odd idle moment between
/// requests.
pub const SATURATED: f64 = 0.9;

/// "server", "client", or `None` where the machine was not saturated (or a figure is
/// missing): the side that kept more cores busy in a row that used the whole machine.
pub fn bound_by(server_cores: f64, client_cores: f64, machine_busy: f64) -> Option<&'static str> {
    (machine_busy >= SATURATED).then_some(if server_cores >= client_cores { "server" } else { "client" })
}

impl Used {
    /// Into a row's record: `server_cpu_s`, `server_cores` and `server_window_s` (the
    /// time they are over, whatever the row did in it) where the server was read, and
    /// `machine_busy` (0-1, every core). Its CPU per request and per GiB are derived
    /// with the client's (record.rs).
    pub fn record_into(&self, rec: &mut RunRecord) {
        if let Some(cpu) = self.server_cpu_s {
            rec.set("server_cpu_s", cpu);
            rec.set("server_cores", self.server_cores.unwrap_or_default());
            rec.set("server_window_s", self.wall_s);
        }
        if let Some(b) = self.machine_busy {
            rec.set("machine_busy", b);
        }
    }
}

/// A row's client cores: its client's CPU over the time its server figures cover.
pub fn client_cores(r: &RunRecord) -> Option<f64> {
    Some(r.figure("client_cpu_s")? / r.figure("server_window_s").filter(|w| *w > 0.0)?)
}

/// The side a recorded row was bound by ([`bound_by`]).
pub fn row_bound(r: &RunRecord) -> Option<&'static str> {
    bound_by(r.figure("server_cores")?, client_cores(r)?, r.figure("machine_busy")?)
}

/// Which CPU rates compare `rows`: (server's, client's, unit). Per GiB for a bytes
/// workload (rows that move few, large objects and count no objects per second), else
/// per request.
pub fn cpu_rates(rows: &[&RunRecord]) -> (&'static str, &'static str, &'static str) {
    let bytes = rows.iter().all(|r| r.figure("objects_per_s").is_none())
        && rows.iter().any(|r| r.figure("bytes_per_s").is_some());
    if bytes {
        (crate::record::SERVER_CPU_PER_GIB, crate::record::CPU_PER_GIB, "s / GiB")
    } else {
        (crate::record::SERVER_CPU_PER_1K_REQUESTS, crate::record::CPU_PER_1K_REQUESTS, "ms / request")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let stat = "4242 (mini o) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 1 2 3";
        assert_eq!(parse_stat_cpu(stat, 100.0), Some(3.25));
        assert_eq!(parse_stat_cpu("4242 (x) S 1", 100.0), None);
    }

    #[test]
    fn the_bound_is_the_busier_side_of_a_saturated_machine() {
        assert_eq!(bound_by(1.4, 0.5, 0.97), Some("server"));
        assert_eq!(bound_by(0.3, 1.5, 0.95), Some("client"));
        assert_eq!(bound_by(1.4, 0.5, 0.6), None);
    }

    #[test]
    fn machine_busy_leaves_out_idle_and_iowait() {
        let text = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n";
        assert_eq!(parse_proc_stat(text), Some((150.0, 1000.0)));
    }

    #[test]
    fn the_listener_is_found_by_address_or_wildcard() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:C2D7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0 100 0 0 10 0\n   1: 0100007F:C2D7 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 41414 1 0 20 4 30 10 -1\n   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 27182 1 0 100 0 0 10 0\n";
        assert_eq!(listener_inode(text, "127.0.0.1:49879".parse().unwrap()), Some(31337));
        assert_eq!(listener_inode(text, "127.0.0.1:8080".parse().unwrap()), Some(27182));
        assert_eq!(listener_inode(text, "127.0.0.1:40000".parse().unwrap()), None);
    }

    /// This test's own listener is found, and its process is this one.
    #[test]
    fn a_listener_of_this_process_is_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(listener_pid(l.local_addr().unwrap()), Some(std::process::id()));
        let a = Sample::take(std::process::id()).unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 200 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(7));
        }
        std::hint::black_box(x);
        let used = Sample::take(std::process::id()).unwrap().since(&a);
        assert!(used.server_cpu_s.unwrap() >= 0.1, "{used:?}: 200 ms of spinning read as less than 100 ms");
        assert!(used.server_cores.is_some_and(|c| c > 0.4 && c < 2.5), "{used:?}");
        assert!(used.machine_busy.is_some_and(|b| b > 0.0), "{used:?}: this process kept a core busy");
    }
}
