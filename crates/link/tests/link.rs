//! The link brought up for real (root only): namespaces and devices exist while it is up
//! and are gone after drop, TCP works across it, the delay line adds at least the
//! preset's RTT (a correctness check of the delay line, not a speed claim), stale
//! namespaces of dead processes are cleaned, and the lifetime bound stops forwarding.
//!
//! Every test but the first needs root: they are `#[ignore]`d, so a plain `cargo test`
//! lists them as ignored, and `scripts/test.sh` runs them with `--ignored` when it runs as
//! root. Run without root, they fail.

use ferry_link::{netns, Link, Preset, DEVICE, SERVER_IP};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// What every test here but the first needs: root (namespaces, devices, sysctls) and
/// iproute2's `ip`. Run without them, the test fails. The guard it returns runs these
/// tests one at a time: [`Link::up`] deletes the namespaces of dead processes, which
/// would race with the test that plants one to see it deleted.
fn need_root() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ferry_testkit::require::root();
    ferry_testkit::require::tool("ip");
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn device_exists(ns: &str) -> bool {
    Command::new("ip").args(["-n", ns, "link", "show", DEVICE]).output().map(|o| o.status.success()).unwrap_or(false)
}

#[test]
fn presets_are_the_labs() {
    let t = Preset::by_name("transatlantic").unwrap();
    assert_eq!(t.rtt, Duration::from_millis(110));
    assert_eq!(t.rate_bits_per_s, 10_000_000_000);
    assert_eq!(t.one_way(), Duration::from_millis(55));
    assert_eq!(t.bdp_bytes(), 137_500_000);
    assert_eq!(Preset::by_name("region").unwrap().rtt, Duration::from_millis(1));
    assert!(Preset::by_name("none").is_none());
    let i = Preset::by_name("instance").unwrap();
    assert_eq!((i.rtt, i.rate_bits_per_s), (Duration::from_millis(1), 2_500_000_000));
    assert_eq!(
        i.queue_limit_bytes * 8 / (i.rate_bits_per_s / 1000),
        t.queue_limit_bytes * 8 / (t.rate_bits_per_s / 1000),
        "the same ms of queue as the 10 Gbit/s presets"
    );
    assert_eq!(netns::owner_pid("ferrylink-4242-3-c"), Some(4242));
    assert_eq!(netns::owner_pid("other-4242-3-c"), None);
}

#[test]
#[ignore = "needs root and ip (network namespaces): scripts/test.sh runs it as root"]
fn up_then_drop_leaves_nothing() {
    let _serial = need_root();
    let link = Link::up(Preset::REGION).unwrap();
    let (c, s) = (link.client_namespace().to_owned(), link.server_namespace().to_owned());
    assert!(netns::exists(&c) && netns::exists(&s), "namespaces {c} {s} exist while up");
    assert!(device_exists(&c) && device_exists(&s), "{DEVICE} exists in both namespaces");
    let sysctl = Command::new("ip").args(["netns", "exec", &s, "sysctl", "-n", "net.ipv4.tcp_rmem"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&sysctl.stdout).split_whitespace().last(), Some("268435456"));
    assert!(link.forwarding());
    drop(link);
    assert!(!netns::exists(&c) && !netns::exists(&s), "namespaces gone after drop");
}

#[test]
#[ignore = "needs root and ip (network namespaces): scripts/test.sh runs it as root"]
fn tcp_crosses_the_link_and_sees_at_least_the_preset_rtt() {
    let _serial = need_root();
    let preset = Preset::TRANSATLANTIC;
    let link = Link::up(preset).unwrap();
    let listener = link.in_server(|| TcpListener::bind((SERVER_IP, 0))).unwrap().unwrap();
    let port = listener.local_addr().unwrap().port();
    // An echo server on a thread of the root namespace: the listener is in the server's.
    let echo = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n]).unwrap();
        }
    });
    let payload: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 253) as u8).collect();
    let (echoed, rtts, connect) = link
        .in_client(|| {
            let t0 = Instant::now();
            let mut c = TcpStream::connect((SERVER_IP, port)).unwrap();
            let connect = t0.elapsed();
            c.set_nodelay(true).unwrap();
            // Round trips of one byte.
            let mut rtts = Vec::new();
            for _ in 0..5 {
                let t = Instant::now();
                c.write_all(b"x").unwrap();
                let mut b = [0u8; 1];
                c.read_exact(&mut b).unwrap();
                rtts.push(t.elapsed());
            }
            // Bulk: write everything on a second thread while reading the echo back.
            let mut w = c.try_clone().unwrap();
            let p2 = payload.clone();
            let writer = std::thread::spawn(move || w.write_all(&p2).unwrap());
            let mut back = vec![0u8; payload.len()];
            c.read_exact(&mut back).unwrap();
            writer.join().unwrap();
            (back, rtts, connect)
        })
        .unwrap();
    echo.join().ok(); // ends when the client's socket closes
    assert!(echoed == payload, "bytes echoed across the link are the bytes sent");
    assert!(connect >= preset.rtt, "TCP handshake took {connect:?}, below the preset's {:?}", preset.rtt);
    for r in &rtts {
        assert!(*r >= preset.rtt, "a 1-byte round trip took {r:?}, below the preset's {:?}", preset.rtt);
    }
    let pings = link.ping(3, Duration::from_millis(20)).unwrap();
    assert_eq!(pings.len(), 3, "every echo request answered");
    for r in &pings {
        assert!(*r >= preset.rtt, "ICMP RTT {r:?} below the preset's {:?}", preset.rtt);
    }
    let st = link.stats();
    assert!(st.client_to_server.packets > 0 && st.server_to_client.packets > 0, "{st:?}");
    assert!(st.client_to_server.bytes >= payload.len() as u64, "{st:?}");
    // The kernels' own counters of the two devices are read (what the delay line wrote
    // into the server's device, the server's kernel received).
    assert!(st.server_device.rx_packets >= st.client_to_server.packets, "{st:?}");
    assert!(st.client_device.tx_packets > 0, "{st:?}");
    // TSO segments larger than one MTU went through the delay line as one packet each.
    assert!(
        st.client_to_server.max_packet > 1500 + ferry_link::tun::VNET_HDR_LEN as u64,
        "no GSO super-packets: {st:?}"
    );
}

#[test]
#[ignore = "needs root and ip (network namespaces): scripts/test.sh runs it as root"]
fn stale_namespaces_of_dead_processes_are_deleted() {
    let _serial = need_root();
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = format!("{}{dead}-0-c", netns::PREFIX);
    let live = format!("{}{}-999999-c", netns::PREFIX, std::process::id());
    for n in [&stale, &live] {
        assert!(Command::new("ip").args(["netns", "add", n]).status().unwrap().success());
    }
    let removed = ferry_link::cleanup_stale();
    let live_kept = netns::exists(&live);
    let _ = Command::new("ip").args(["netns", "del", &live]).status();
    assert!(removed.contains(&stale) && !netns::exists(&stale), "stale {stale} deleted: {removed:?}");
    assert!(live_kept && !removed.contains(&live), "a namespace of a live process is kept");
}

#[test]
#[ignore = "needs root and ip (network namespaces): scripts/test.sh runs it as root"]
fn lifetime_bound_stops_forwarding() {
    let _serial = need_root();
    let link = Link::up_for(Preset::REGION, Duration::from_millis(1500)).unwrap();
    assert_eq!(link.ping(1, Duration::ZERO).unwrap().len(), 1, "forwards while alive");
    std::thread::sleep(Duration::from_millis(1800));
    assert!(!link.forwarding());
    assert!(link.ping(1, Duration::ZERO).unwrap().is_empty(), "no reply after the lifetime");
}
