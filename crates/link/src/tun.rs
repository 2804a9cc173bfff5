//! A TUN device that passes 64 KiB TCP segments (GSO) through user space.
//!
//! With `IFF_VNET_HDR` each packet read or written is prefixed by a `virtio_net_hdr`
//! (10 bytes) that describes segmentation and checksum offload, and `TUNSETOFFLOAD`
//! (`TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN`) tells the kernel it may hand
//! us unsegmented TCP super-packets of up to 64 KiB with the checksum left to do. The
//! delay line never parses the header: it writes the bytes, header included, to the peer
//! TUN, whose kernel takes the super-packet as if a NIC had coalesced it (GRO). The MTU
//! stays 1500, so TCP still sees a normal path (MSS 1448); only the per-packet cost in
//! the delay line drops ~40x: ~10 Gbit/s at 110 ms RTT this way on an idle lab machine,
//! ~3 Gbit/s with plain 1500-byte packets (docs/lab/link-delay-line.md).
//!
//! A link with per-packet faults (loss, jitter: impair.rs) opens its devices with
//! `TUN_F_CSUM` only: the kernel then segments TCP to the MTU before the device, and the
//! delay line sees one packet per segment.
//!
//! A TUN device belongs to the network namespace of the thread that created it, and
//! disappears when its last descriptor closes (it is not made persistent), so a killed
//! run leaves no device behind.

use crate::LinkError;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

/// Bytes of the `virtio_net_hdr` before each packet (the kernel default without
/// `TUNSETVNETHDRSZ`).
pub const VNET_HDR_LEN: usize = 10;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags (a short), padded to
/// the kernel's 40 bytes.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates TUN device `name` in the calling thread's network namespace; `segments`: take
/// 64 KiB TCP super-packets (else every packet is at most the MTU).
pub fn open(name: &str, segments: bool) -> Result<File, LinkError> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(LinkError::Setup(format!("interface name {name:?} is longer than {} bytes", libc::IFNAMSIZ - 1)));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/net/tun")
        .map_err(|e| LinkError::io("opening /dev/net/tun", e))?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads (and writes back) one ifreq, which `req` is.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) } != 0 {
        return Err(LinkError::io(format!("TUNSETIFF {name}"), std::io::Error::last_os_error()));
    }
    let offload = if segments {
        libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN
    } else {
        libc::TUN_F_CSUM
    };
    // SAFETY: TUNSETOFFLOAD takes the flags by value.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETOFFLOAD, offload as libc::c_ulong) } != 0 {
        return Err(LinkError::io(format!("TUNSETOFFLOAD {name}"), std::io::Error::last_os_error()));
    }
    Ok(file)
}
