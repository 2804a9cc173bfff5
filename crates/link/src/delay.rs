//! The delay line: one direction of the link, as two threads.
//!
//! ```text
//!  TUN A ──read──► reader ──(due, packet)──► channel ──► writer ──sleep until due──► TUN B
//!                    │
//!                    └─ serializer: starts = max(now, free); free = start + len / rate
//!                       queue = free - now > limit ⇒ drop (tail drop, like a router)
//!                       due = free + one-way delay
//! ```
//!
//! The model is a router port: a FIFO queue in front of a serializer of the preset's rate,
//! then propagation delay. It needs no timers per packet: the departure time of each
//! packet follows from the previous one, and since the delay is constant the due times
//! are in arrival order, so a plain FIFO channel is the whole delay line and the writer
//! only ever sleeps until the head is due. Memory is bounded by the rate: at most
//! `rate x delay` bytes in flight plus the queue limit, with a hard cap behind it.
//!
//! Both threads poll with a 100 ms timeout so they notice the stop flag and the
//! deadline (the link's maximum lifetime) without a packet arriving.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest packet read from a TUN: a 64 KiB GSO super-packet plus its vnet header, with
/// room to spare (a read into a smaller buffer would silently truncate).
const READ_BUF: usize = 128 * 1024;
/// Whatever the rate, never hold more than this in one direction.
const HARD_CAP_BYTES: u64 = 1 << 30;
const POLL: Duration = Duration::from_millis(100);

/// One direction's settings.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub delay: Duration,
    pub rate_bits_per_s: u64,
    pub queue_limit_bytes: u64,
}

/// Counters of one direction.
#[derive(Debug, Default)]
pub struct DirStats {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// Dropped because the queue was full (or the hard cap reached).
    pub dropped: AtomicU64,
    /// Largest packet seen (shows whether GSO super-packets pass).
    pub max_packet: AtomicU64,
    pub write_errors: AtomicU64,
    in_flight: AtomicU64,
}

/// A snapshot of [`DirStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirCounts {
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
    pub max_packet: u64,
    pub write_errors: u64,
}

impl DirStats {
    pub fn snapshot(&self) -> DirCounts {
        DirCounts {
            packets: self.packets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            max_packet: self.max_packet.load(Relaxed),
            write_errors: self.write_errors.load(Relaxed),
        }
    }
}

struct Packet {
    due: Instant,
    data: Vec<u8>,
}

/// Starts the reader and writer threads of the direction `from` -> `to`.
pub fn spawn(
    name: &str,
    from: Arc<File>,
    to: Arc<File>,
    shape: Shape,
    stop: Arc<AtomicBool>,
    deadline: Instant,
    stats: Arc<DirStats>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let (tx, rx) = mpsc::channel::<Packet>();
    let (s1, st1) = (stop.clone(), stats.clone());
    let reader = std::thread::Builder::new()
        .name(format!("link-rd-{name}"))
        .spawn(move || read_loop(&from, shape, &s1, deadline, &st1, tx))?;
    let writer = std::thread::Builder::new()
        .name(format!("link-wr-{name}"))
        .spawn(move || write_loop(&to, &stop, &stats, rx))?;
    Ok(vec![reader, writer])
}

fn serialization(len: usize, rate_bits_per_s: u64) -> Duration {
    if rate_bits_per_s == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos((len as u128 * 8 * 1_000_000_000 / rate_bits_per_s as u128) as u64)
}

fn read_loop(from: &File, shape: Shape, stop: &AtomicBool, deadline: Instant, stats: &DirStats, tx: mpsc::Sender<Packet>) {
    let mut buf = vec![0u8; READ_BUF];
    let mut free = Instant::now();
    let queue_limit = serialization(shape.queue_limit_bytes as usize, shape.rate_bits_per_s);
    let mut pfd = libc::pollfd { fd: from.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let mut reader = from;
    while !stop.load(Relaxed) {
        if Instant::now() >= deadline {
            eprintln!("ferry-link: the link reached its maximum lifetime; the delay line stops forwarding");
            stop.store(true, Relaxed);
            break;
        }
        // SAFETY: poll(2) on one pollfd we own.
        let r = unsafe { libc::poll(&mut pfd, 1, POLL.as_millis() as libc::c_int) };
        if r <= 0 || pfd.revents & libc::POLLIN == 0 {
            if pfd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                break;
            }
            continue;
        }
        let n = match reader.read(&mut buf) {
            Ok(n) if n > 0 => n,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted || e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => break,
        };
        let now = Instant::now();
        let start = free.max(now);
        if start - now > queue_limit || stats.in_flight.load(Relaxed) + n as u64 > HARD_CAP_BYTES {
            stats.dropped.fetch_add(1, Relaxed);
            continue;
        }
        free = start + serialization(n.saturating_sub(crate::tun::VNET_HDR_LEN), shape.rate_bits_per_s);
        stats.in_flight.fetch_add(n as u64, Relaxed);
        stats.max_packet.fetch_max(n as u64, Relaxed);
        if tx.send(Packet { due: free + shape.delay, data: buf[..n].to_vec() }).is_err() {
            break;
        }
    }
}

fn write_loop(to: &File, stop: &AtomicBool, stats: &DirStats, rx: mpsc::Receiver<Packet>) {
    let mut writer = to;
    loop {
        let p = match rx.recv_timeout(POLL) {
            Ok(p) => p,
            Err(mpsc::RecvTimeoutError::Timeout) if !stop.load(Relaxed) => continue,
            Err(_) => break,
        };
        let now = Instant::now();
        if p.due > now {
            std::thread::sleep(p.due - now);
        }
        if stop.load(Relaxed) {
            break;
        }
        let len = p.data.len() as u64;
        stats.in_flight.fetch_sub(len, Relaxed);
        match writer.write(&p.data) {
            Ok(_) => {
                stats.packets.fetch_add(1, Relaxed);
                stats.bytes.fetch_add(len, Relaxed);
            }
            Err(_) => {
                stats.write_errors.fetch_add(1, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_time_is_bits_over_rate() {
        assert_eq!(serialization(1_250_000, 10_000_000_000), Duration::from_millis(1));
        assert_eq!(serialization(65_536, 0), Duration::ZERO);
        assert_eq!(serialization(1500, 12_000), Duration::from_secs(1));
    }
}
