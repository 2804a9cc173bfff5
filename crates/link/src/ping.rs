//! ICMP echo over the link, the way `ping` measures RTT (the image has no `ping`).
//!
//! An ICMP datagram socket (`socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)`, Linux "ping
//! sockets") lets the kernel fill in the identifier and checksum and hands back only our
//! own replies. It is allowed for the groups in `net.ipv4.ping_group_range`, which the
//! link sets in the client namespace. The socket must be created inside that namespace.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

const ECHO_REQUEST: u8 = 8;
const ECHO_REPLY: u8 = 0;

/// Sends `count` echo requests to `to`, `interval` apart, each waiting up to `timeout`
/// for its reply; the round-trip times of the replies received.
pub fn ping(to: Ipv4Addr, count: usize, interval: Duration, timeout: Duration) -> std::io::Result<Vec<Duration>> {
    // SAFETY: socket(2) returns a new descriptor that we own (or -1).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::IPPROTO_ICMP) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // A datagram socket in all but name: std's UdpSocket sends and receives on it.
    // SAFETY: fd is a fresh socket descriptor owned by nothing else.
    let sock = unsafe { UdpSocket::from_raw_fd(fd) };
    sock.set_read_timeout(Some(timeout))?;
    let dest = SocketAddr::V4(SocketAddrV4::new(to, 0));
    let mut rtts = Vec::with_capacity(count);
    let mut buf = [0u8; 1500];
    for seq in 0..count as u16 {
        if seq > 0 {
            std::thread::sleep(interval);
        }
        let mut msg = [0u8; 64];
        msg[0] = ECHO_REQUEST;
        msg[6..8].copy_from_slice(&seq.to_be_bytes());
        msg[8..16].copy_from_slice(b"ferrylnk");
        let t0 = Instant::now();
        sock.send_to(&msg, dest)?;
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, _)) if n >= 8 && buf[0] == ECHO_REPLY && buf[6..8] == seq.to_be_bytes() => {
                    rtts.push(t0.elapsed());
                    break;
                }
                Ok(_) => continue, // a late reply to an earlier request
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                    break
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(rtts)
}
