//! ferry-link: the lab's emulated network link (docs/lab/link-delay-line.md has the facts it
//! is built on and what it measured).
//!
//! The kernels here have no `netem`, so delay is made in user space:
//!
//! ```text
//!   client namespace                this process                 server namespace
//!  ┌───────────────────┐      ┌───────────────────────┐      ┌───────────────────┐
//!  │ bench client      │      │ delay line c→s         │      │ ferry serve       │
//!  │ 10.77.0.1 ferry0 ─┼─TUN─►│ (queue, rate, delay)  ├─TUN─►│─ ferry0 10.77.0.2 │
//!  │ (TUN)            ◄┼──────┤ delay line s→c        ◄┼──────┼─ (TUN)            │
//!  └───────────────────┘      └───────────────────────┘      └───────────────────┘
//! ```
//!
//! [`Link::up`] creates two named network namespaces (`ferrylink-<pid>-<seq>-c|s`), a
//! TUN device `ferry0` in each (64 KiB GSO segments, MTU 1500; tun.rs), the addresses,
//! the per-namespace TCP buffer sysctls (`tcp_rmem`/`tcp_wmem` max 256 MiB: the 4 MiB
//! default caps one stream at ~0.25 Gbit/s at 110 ms RTT; `net.core.*mem_max` is global
//! and left alone), and the delay line (delay.rs: four threads of this process, a router
//! port model with a rate cap and a bounded queue). Kernel TCP on both sides then sees a
//! real path: slow start, windows, queueing, loss.
//!
//! Faults of the path (impair.rs): [`Link::up_impaired`] adds random loss, reordering
//! (a jitter that lets packets overtake) and a scheduled cut; [`Link::cut`] cuts a live
//! link for a while. `ferry bench link-hold` holds such a link for other processes (the
//! fault matrix's link cells) and cuts it on SIGUSR1.
//!
//! Lifetime: [`Drop`] stops the threads, closes the TUN devices (which removes them) and
//! deletes the namespaces; a maximum lifetime stops the delay line whatever happens; a run
//! that was killed leaves namespaces behind, which the next [`Link::up`] deletes
//! ([`netns::cleanup_stale`]). Processes started in the server namespace must be ended by
//! their owner before the link is dropped (the bench's child guards do).
//!
//! Using it: start servers with [`Link::server_command`] (a `pre_exec` setns, like
//! `ip netns exec` without the extra process), bind them to [`Link::server_ip`], and put
//! the client thread into the client namespace with [`Link::enter_client`] *before*
//! creating its tokio runtime: threads and child processes inherit the namespace of the
//! thread that creates them. Everything needs root; without it [`Link::up`] returns
//! [`LinkError::NotRoot`].

pub mod delay;
pub mod impair;
pub mod netns;
pub mod ping;
pub mod tun;

pub use delay::{cpu_time as delay_line_cpu_time, DirCounts};
pub use impair::Impairments;
pub use netns::{cleanup_stale, NsGuard};

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What can go wrong bringing a link up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    #[error("the emulated link needs root (network namespaces, TUN devices, per-namespace sysctls); this process runs as uid {uid}")]
    NotRoot { uid: u32 },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    #[error("{0}")]
    Setup(String),
}

impl LinkError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> LinkError {
        LinkError::Io { what: what.into(), source }
    }
}

/// Runs a setup command (`ip`, `sysctl`); its stderr on failure.
pub(crate) fn command(program: &str, args: &[&str]) -> Result<(), LinkError> {
    let line = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| LinkError::Command { command: line.clone(), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(LinkError::Command {
            command: line,
            detail: format!("{} {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(())
}

/// A link's shape: one-way delay each way, rate cap, queue bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    /// Round-trip time added by the delay line (half each way).
    pub rtt: Duration,
    /// The serializer's rate, each direction.
    pub rate_bits_per_s: u64,
    /// Bytes queued in front of the serializer before packets are dropped, each direction.
    pub queue_limit_bytes: u64,
}

/// 10 Gbit/s: the IN2P3-NCSA path (docs/lab/link-delay-line.md); `region` keeps the same
/// cap so the two presets differ in delay only.
const TEN_GBIT: u64 = 10_000_000_000;
/// 16 MiB of queue, ~13 ms at 10 Gbit/s: a deep-buffered router port; deep enough that a
/// single CUBIC flow is not starved by its own bursts in slow start, shallow enough that
/// a standing queue cannot add more than a tenth of the transatlantic RTT.
const QUEUE_LIMIT: u64 = 16 << 20;
/// 4 MiB, ~13 ms at 2.5 Gbit/s: the same time in queue as [`QUEUE_LIMIT`] at 10 Gbit/s.
const INSTANCE_QUEUE_LIMIT: u64 = 4 << 20;

impl Preset {
    /// 1 ms RTT, 10 Gbit/s: a function in a cloud region talking to its object store.
    pub const REGION: Preset = Preset {
        name: "region",
        rtt: Duration::from_millis(1),
        rate_bits_per_s: TEN_GBIT,
        queue_limit_bytes: QUEUE_LIMIT,
    };
    /// 110 ms RTT, 10 Gbit/s: the IN2P3 (Lyon) - NCSA (Illinois) link.
    pub const TRANSATLANTIC: Preset = Preset {
        name: "transatlantic",
        rtt: Duration::from_millis(110),
        rate_bits_per_s: TEN_GBIT,
        queue_limit_bytes: QUEUE_LIMIT,
    };

    /// 1 ms RTT, 2.5 Gbit/s: an instance's NIC in a region, in front of an object store
    /// that serves each connection at its own rate (S3: ~90 MB/s). On two shared cores
    /// `region` is CPU-bound before its cap; this one binds with room to spare, and 50
    /// connections at 90 MB/s oversubscribe it ~15x, as a 50-connection SDK pool does a
    /// real instance's NIC. The rate comes from link-check and mixed-hol runs at 2.5-5
    /// Gbit/s (docs/lab/link-delay-line.md, "Why `instance` exists"); re-measure with
    /// `ferry bench link-check --link instance`. The queue is region's ~13 ms at this rate.
    pub const INSTANCE: Preset = Preset {
        name: "instance",
        rtt: Duration::from_millis(1),
        rate_bits_per_s: 2_500_000_000,
        queue_limit_bytes: INSTANCE_QUEUE_LIMIT,
    };

    pub const ALL: [Preset; 3] = [Preset::REGION, Preset::TRANSATLANTIC, Preset::INSTANCE];

    pub fn by_name(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name == name)
    }

    pub fn one_way(&self) -> Duration {
        self.rtt / 2
    }

    /// Bandwidth-delay product in bytes.
    pub fn bdp_bytes(&self) -> u64 {
        (self.rate_bits_per_s as u128 * self.rtt.as_nanos() / 8 / 1_000_000_000) as u64
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} ms RTT, {} Gbit/s, {} MiB queue)",
            self.name,
            self.rtt.as_secs_f64() * 1e3,
            self.rate_bits_per_s as f64 / 1e9,
            self.queue_limit_bytes >> 20
        )
    }
}

/// The device name in both namespaces (names are per namespace, so one name serves both).
pub const DEVICE: &str = "ferry0";
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// TCP buffer sysctls in both namespaces: min, default, max (256 MiB: the 4 MiB default
/// caps one stream at ~0.25 Gbit/s at 110 ms RTT; docs/lab/link-delay-line.md).
pub const TCP_RMEM: &str = "4096 131072 268435456";
pub const TCP_WMEM: &str = "4096 16384 268435456";
/// The TUN devices' txqueuelen: a 1,000-packet ring overflowed under bulk-wan at 64
/// connections (docs/lab/link-delay-line.md, "The TUN ring"; see [`Link::up_for`]).
pub const TUN_RING_PACKETS: u32 = 4096;
/// Default bound on a link's life.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(3 * 3600);

/// Counters of both directions, and of the two TUN devices as their kernels count them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub client_to_server: DirCounts,
    pub server_to_client: DirCounts,
    pub client_device: DeviceCounts,
    pub server_device: DeviceCounts,
}

/// A TUN device's kernel counters (`/proc/net/dev` of its namespace). `tx_dropped`
/// counts packets the kernel dropped because the device's ring (txqueuelen packets) was
/// full: the delay line's reader did not keep up, a drop no router model decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    pub tx_packets: u64,
    pub tx_dropped: u64,
    pub rx_packets: u64,
    pub rx_dropped: u64,
}

impl DeviceCounts {
    /// The `DEVICE` line of a `/proc/net/dev` text (receive: bytes packets errs drop ...;
    /// transmit: bytes packets errs drop ... from the ninth number on).
    pub fn parse(dev: &str) -> Option<DeviceCounts> {
        let line = dev.lines().find_map(|l| l.trim_start().strip_prefix(DEVICE)?.strip_prefix(':'))?;
        let v: Vec<u64> = line.split_whitespace().map(|x| x.parse().ok()).collect::<Option<_>>()?;
        (v.len() >= 16).then(|| DeviceCounts {
            rx_packets: v[1],
            rx_dropped: v[3],
            tx_packets: v[9],
            tx_dropped: v[11],
        })
    }
}

/// `/proc/net/dev` as seen from the namespace it was opened in (a procfs net file keeps
/// the namespace of its opener), re-read from the start each time.
fn read_dev(f: &std::fs::File) -> Option<DeviceCounts> {
    use std::io::{Read, Seek};
    let mut f = f;
    f.seek(std::io::SeekFrom::Start(0)).ok()?;
    let mut s = String::new();
    f.read_to_string(&mut s).ok()?;
    DeviceCounts::parse(&s)
}

/// An emulated link that is up; dropping it tears it down.
pub struct Link {
    preset: Preset,
    impairments: Impairments,
    cut: Arc<impair::CutWindow>,
    // Field order is drop order: threads are stopped in Drop, then TUN files close (the
    // devices vanish), then the namespaces are deleted.
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    tuns: Vec<Arc<std::fs::File>>,
    stats: [Arc<delay::DirStats>; 2],
    /// `/proc/thread-self/net/dev` opened inside the client and server namespaces.
    dev: Vec<std::fs::File>,
    client: netns::Namespace,
    server: netns::Namespace,
    deadline: Instant,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("preset", &self.preset)
            .field("client", &self.client.name())
            .field("server", &self.server.name())
            .finish()
    }
}

/// Whether this process can bring a link up (root); the reason if not.
pub fn check_root() -> Result<(), LinkError> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return Err(LinkError::NotRoot { uid });
    }
    Ok(())
}

impl Link {
    /// Brings up `preset` with the default maximum lifetime.
    pub fn up(preset: Preset) -> Result<Link, LinkError> {
        Link::up_for(preset, DEFAULT_LIFETIME)
    }

    /// Brings up `preset`; the delay line stops forwarding after `lifetime`.
    pub fn up_for(preset: Preset, lifetime: Duration) -> Result<Link, LinkError> {
        Link::up_impaired(preset, Impairments::default(), lifetime)
    }

    /// Brings up `preset` with the faults of `imp` (impair.rs); the delay line stops
    /// forwarding after `lifetime`.
    pub fn up_impaired(preset: Preset, imp: Impairments, lifetime: Duration) -> Result<Link, LinkError> {
        check_root()?;
        if !(0.0..=1.0).contains(&imp.loss) {
            return Err(LinkError::Setup(format!("loss {} is not a probability", imp.loss)));
        }
        if !std::path::Path::new("/dev/net/tun").exists() {
            return Err(LinkError::Setup("/dev/net/tun is missing (no TUN support)".into()));
        }
        for name in cleanup_stale() {
            eprintln!("ferry-link: deleted stale network namespace {name} (its process is gone)");
        }
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let base = format!("{}{}-{}", netns::PREFIX, std::process::id(), SEQ.fetch_add(1, Relaxed));
        // Each namespace is deleted by its own drop if a later step fails.
        let client = netns::Namespace::create(&format!("{base}-c"))?;
        let server = netns::Namespace::create(&format!("{base}-s"))?;
        let (mut tuns, mut dev) = (Vec::new(), Vec::new());
        for (ns, ip) in [(&client, CLIENT_IP), (&server, SERVER_IP)] {
            tuns.push(Arc::new(ns.run(|| tun::open(DEVICE, !imp.per_packet()))??));
            dev.push(
                ns.run(|| std::fs::File::open("/proc/thread-self/net/dev"))?
                    .map_err(|e| LinkError::io("opening /proc/thread-self/net/dev", e))?,
            );
            let n = ns.name();
            let addr = format!("{ip}/24");
            command("ip", &["-n", n, "link", "set", "lo", "up"])?;
            command("ip", &["-n", n, "addr", "add", &addr, "dev", DEVICE])?;
            // txqueuelen: the TUN ring, packets the kernel holds while the reader thread
            // is not draining it; a full ring drops (the device's tx_dropped), a loss no
            // router model decided. With 64 connections TCP's segments shrink to a few KiB,
            // so the ring holds the model's 16 MiB queue in 4 KiB packets
            // ([`TUN_RING_PACKETS`]).
            command(
                "ip",
                &["-n", n, "link", "set", DEVICE, "mtu", "1500", "txqueuelen", &TUN_RING_PACKETS.to_string(), "up"],
            )?;
            command("ip", &["netns", "exec", n, "sysctl", "-q", "-w", &format!("net.ipv4.tcp_rmem={TCP_RMEM}")])?;
            command("ip", &["netns", "exec", n, "sysctl", "-q", "-w", &format!("net.ipv4.tcp_wmem={TCP_WMEM}")])?;
            // ICMP datagram sockets for root (ping.rs).
            command("ip", &["netns", "exec", n, "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647"])?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let up_at = Instant::now();
        let deadline = up_at + lifetime;
        let cut = Arc::new(impair::CutWindow::new(up_at));
        if let Some(at) = imp.cut_at {
            cut.set(up_at + at, imp.cut_for);
        }
        let shape = delay::Shape {
            delay: preset.one_way(),
            rate_bits_per_s: preset.rate_bits_per_s,
            queue_limit_bytes: preset.queue_limit_bytes,
        };
        let stats = [Arc::new(delay::DirStats::default()), Arc::new(delay::DirStats::default())];
        let mut link = Link {
            preset,
            impairments: imp,
            cut: cut.clone(),
            stop: stop.clone(),
            threads: Vec::new(),
            tuns,
            stats,
            dev,
            client,
            server,
            deadline,
        };
        for (name, from, to, st) in [("c2s", 0, 1, 0), ("s2c", 1, 0, 1)] {
            let t = delay::spawn(
                name,
                link.tuns[from].clone(),
                link.tuns[to].clone(),
                shape,
                stop.clone(),
                deadline,
                link.stats[st].clone(),
                delay::Faults::new(&imp, st as u64, cut.clone()),
            )
            .map_err(|e| LinkError::io("starting the delay line", e))?;
            link.threads.extend(t);
        }
        Ok(link)
    }

    pub fn preset(&self) -> Preset {
        self.preset
    }

    pub fn impairments(&self) -> Impairments {
        self.impairments
    }

    /// Cuts the link from now for `len`: nothing passes either way, packets on the wire
    /// included (impair.rs). Replaces a cut that is scheduled or under way.
    pub fn cut(&self, len: Duration) {
        self.cut.set(Instant::now(), len);
    }

    /// Whether the link is cut at this moment.
    pub fn is_cut(&self) -> bool {
        self.cut.is_cut(Instant::now())
    }

    pub fn server_ip(&self) -> Ipv4Addr {
        SERVER_IP
    }

    pub fn client_ip(&self) -> Ipv4Addr {
        CLIENT_IP
    }

    pub fn client_namespace(&self) -> &str {
        self.client.name()
    }

    pub fn server_namespace(&self) -> &str {
        self.server.name()
    }

    /// Whether the delay line still forwards (not stopped, lifetime not reached).
    pub fn forwarding(&self) -> bool {
        !self.stop.load(Relaxed) && Instant::now() < self.deadline
    }

    /// Makes `cmd` start inside the server namespace (setns between fork and exec).
    pub fn server_command<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        let ns = self.server.file().clone();
        // SAFETY: setns(2) is async-signal-safe and the closure allocates nothing; the
        // namespace file is kept open by the Arc the closure owns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        }
    }

    /// Moves the calling thread into the client namespace until the guard drops; create
    /// the client's runtime (threads) and child processes after this.
    pub fn enter_client(&self) -> Result<NsGuard, LinkError> {
        self.client.enter()
    }

    /// Runs `f` on a thread inside the server namespace (e.g. to bind a listener there).
    pub fn in_server<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, LinkError> {
        self.server.run(f)
    }

    /// Runs `f` on a thread inside the client namespace.
    pub fn in_client<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, LinkError> {
        self.client.run(f)
    }

    /// ICMP echo from the client namespace to the server: the RTTs of the replies.
    pub fn ping(&self, count: usize, interval: Duration) -> Result<Vec<Duration>, LinkError> {
        let timeout = self.preset.rtt * 4 + Duration::from_millis(500);
        self.in_client(|| ping::ping(SERVER_IP, count, interval, timeout))?
            .map_err(|e| LinkError::io("ICMP echo across the link", e))
    }

    pub fn stats(&self) -> LinkStats {
        LinkStats {
            client_to_server: self.stats[0].snapshot(),
            server_to_client: self.stats[1].snapshot(),
            client_device: read_dev(&self.dev[0]).unwrap_or_default(),
            server_device: read_dev(&self.dev[1]).unwrap_or_default(),
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // tuns, then the namespaces (their own Drop), in field order.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_counters_from_proc_net_dev() {
        let text = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\nferry0: 1942305   37514    0    2    0     0          0         0 8395697728  158746    0    7    0     0       0          0\n";
        assert_eq!(
            DeviceCounts::parse(text),
            Some(DeviceCounts { rx_packets: 37514, rx_dropped: 2, tx_packets: 158746, tx_dropped: 7 })
        );
        assert_eq!(DeviceCounts::parse("    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"), None, "no ferry0 line");
        assert_eq!(DeviceCounts::parse("ferry0: 1 2 3\n"), None, "a truncated line");
    }
}
