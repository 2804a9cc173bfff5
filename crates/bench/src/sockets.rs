//! Counting the TCP connections a run opens to a server that does not count them: a peer
//! (boto3, s5cmd, ...) against an external endpoint such as MinIO. Against `ferry serve`
//! the server's own counters say how many connections a row needed; an external server
//! has none that the bench can read, and a peer is another process whose transport the
//! bench cannot see. The kernel's socket table can: every TCP socket of the network
//! namespace is a line of `/proc/net/tcp` (and `tcp6`) with its two addresses and its
//! state.
//!
//! ```text
//! ConnWatch::start(server addr) ─ snapshot: the connections to the server already there
//!   └─ a thread reads the table every SAMPLE_EVERY ─► every connection seen, by its
//!      client-side address and port
//! ConnWatch::finish() ─ one last read ─► connections seen that were not there before
//! ```
//!
//! A connection is known by its client-side address: the socket whose remote end is the
//! server, or, on loopback, the server's own socket whose remote end it is (either side's
//! TIME_WAIT entry outlives a closed connection for 60 s, so the last read still sees the
//! short-lived ones). What this can miss makes the count a lower bound: a connection
//! opened and reset (no TIME_WAIT) between two reads, and one whose client port reuses a
//! TIME_WAIT entry of before the run (loopback allows that) and is gone again between two
//! reads. The bench runs one row at a time and its own client is idle meanwhile, so every
//! new connection to the server is the row's.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// How often the table is read while the run goes on. Each read parses every socket of
/// the namespace (a few thousand lines after a run that churns connections) on the
/// cores the run shares; between reads, closed connections wait in TIME_WAIT, so reads
/// need not be frequent to see them.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Said in a record's params (`connections_counted`) where its connections were counted
/// this way rather than by the server.
pub const COUNTED_BY: &str = "client side, from the kernel's TCP socket table (a lower bound)";

/// The kernel's `st` value for TIME_WAIT (include/net/tcp_states.h).
const TIME_WAIT: u8 = 0x06;
/// The kernel's `st` value for LISTEN.
const LISTEN: u8 = 0x0A;

/// One line of the socket table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: u8,
}

/// Parses `/proc/net/tcp` or `tcp6` text: the header line skipped, lines it cannot read
/// passed over.
pub fn parse_table(text: &str) -> Vec<Entry> {
    text.lines().skip(1).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Entry> {
    let mut f = line.split_whitespace();
    let _slot = f.next()?;
    let local = parse_addr(f.next()?)?;
    let remote = parse_addr(f.next()?)?;
    let state = u8::from_str_radix(f.next()?, 16).ok()?;
    Some(Entry { local, remote, state })
}

/// `0100007F:1F90` (IPv4: one 32-bit word in host order, little-endian here) or 32 hex
/// digits (IPv6: four such words), then the port in hex.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.to_le_bytes())),
        32 => {
            let mut b = [0u8; 16];
            for (i, chunk) in b.chunks_mut(4).enumerate() {
                let w = u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).ok()?;
                chunk.copy_from_slice(&w.to_le_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The same address whether the table wrote it as IPv4 or as IPv4-mapped IPv6.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// The connections to `server` in `entries`, by client-side address, each with whether
/// it was in TIME_WAIT on every side seen.
fn connections_to(server: SocketAddr, entries: &[Entry]) -> HashMap<SocketAddr, bool> {
    let server = canonical(server);
    let mut out: HashMap<SocketAddr, bool> = HashMap::new();
    for e in entries {
        let (local, remote) = (canonical(e.local), canonical(e.remote));
        let client = if remote == server {
            local
        } else if local == server && e.state != LISTEN {
            remote
        } else {
            continue;
        };
        let waiting = e.state == TIME_WAIT;
        out.entry(client).and_modify(|w| *w &= waiting).or_insert(waiting);
    }
    out
}

/// Reads this thread's namespace's TCP tables, v4 and v6 (a missing one reads as empty).
fn read_tables() -> Vec<Entry> {
    let mut all = Vec::new();
    for f in ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(f) {
            all.extend(parse_table(&text));
        }
    }
    all
}

/// What a watch has seen: the connections of before the run, and the ones since.
#[derive(Debug, Default)]
struct Seen {
    before: HashMap<SocketAddr, bool>,
    new: std::collections::HashSet<SocketAddr>,
}

impl Seen {
    /// Adds one read: a connection is new when it was not there before, or was there only
    /// in TIME_WAIT and is now alive again (its port reused).
    fn add(&mut self, now: &HashMap<SocketAddr, bool>) {
        for (client, waiting) in now {
            match self.before.get(client) {
                None => {
                    self.new.insert(*client);
                }
                Some(true) if !*waiting => {
                    self.new.insert(*client);
                }
                Some(_) => {}
            }
        }
    }
}

/// A count of the connections opened to one server while a run goes on (module note).
pub struct ConnWatch {
    server: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Seen>,
}

impl ConnWatch {
    /// Starts watching connections to `server`; the thread it starts reads the tables of
    /// the calling thread's network namespace.
    pub fn start(server: SocketAddr) -> ConnWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Seen { before: connections_to(server, &read_tables()), ..Seen::default() };
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = seen;
            while !flag.load(Relaxed) {
                std::thread::sleep(SAMPLE_EVERY);
                seen.add(&connections_to(server, &read_tables()));
            }
            seen
        });
        ConnWatch { server, stop, thread }
    }

    /// Ends the watch with one last read: the connections opened since the start.
    pub fn finish(self) -> u64 {
        self.stop.store(true, Relaxed);
        let mut seen = self.thread.join().unwrap_or_default();
        seen.add(&connections_to(self.server, &read_tables()));
        seen.new.len() as u64
    }
}

/// The socket address of an `http(s)://host[:port]/...` URL (the scheme's port when none
/// is given), resolved; `None` when it does not parse or resolve.
pub fn server_addr(url: &str) -> Option<SocketAddr> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?;
    let default_port = if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 };
    let with_port = if authority.starts_with('[') {
        if authority.contains("]:") {
            authority.to_owned()
        } else {
            format!("{authority}:{default_port}")
        }
    } else if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    };
    with_port.to_socket_addrs().ok()?.next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn table_lines_parse_v4_and_v6() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n   1: 0100007F:D431 0100007F:1F90 06 00000000:00000000 03:00000F9B 00000000     0        0 0 3 0\n";
        let e = parse_table(v4);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(e[0].state, LISTEN);
        assert_eq!((e[1].local, e[1].remote, e[1].state), ("127.0.0.1:54321".parse().unwrap(), e[0].local, TIME_WAIT));
        // ::ffff:127.0.0.1 and ::1 as tcp6 writes them.
        let v6 = "header\n 0: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:D431 01 0 0\n 1: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A\n";
        let e = parse_table(v6);
        assert_eq!(canonical(e[0].local), "127.0.0.1:8080".parse().unwrap());
        assert_eq!(e[1].local, "[::1]:80".parse().unwrap());
        assert!(parse_table("header\ngarbage line\n").is_empty());
    }

    #[test]
    fn a_connection_is_known_by_its_client_side_from_either_end() {
        let server: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let entries = [
            Entry { local: server, remote: a("0.0.0.0:0"), state: LISTEN },
            Entry { local: a("127.0.0.1:40000"), remote: server, state: 0x01 },
            Entry { local: server, remote: a("127.0.0.1:40000"), state: 0x01 },
            // Closed: only the server's TIME_WAIT is left.
            Entry { local: server, remote: a("127.0.0.1:40001"), state: TIME_WAIT },
            // Another server's connection.
            Entry { local: a("127.0.0.1:40002"), remote: a("127.0.0.1:9001"), state: 0x01 },
        ];
        let c = connections_to(server, &entries);
        assert_eq!(c.len(), 2);
        assert_eq!((c[&a("127.0.0.1:40000")], c[&a("127.0.0.1:40001")]), (false, true));
        // New since a snapshot: unseen ones, and a TIME_WAIT port alive again.
        let mut seen = Seen { before: c, ..Seen::default() };
        let later = [
            Entry { local: a("127.0.0.1:40000"), remote: server, state: 0x01 },
            Entry { local: a("127.0.0.1:40001"), remote: server, state: 0x01 },
            Entry { local: a("127.0.0.1:40003"), remote: server, state: TIME_WAIT },
        ];
        seen.add(&connections_to(server, &later));
        let mut new: Vec<_> = seen.new.into_iter().collect();
        new.sort();
        assert_eq!(new, [a("127.0.0.1:40001"), a("127.0.0.1:40003")]);
    }

    #[test]
    fn urls_resolve_to_the_server_address() {
        assert_eq!(server_addr("http://127.0.0.1:9100"), Some("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(server_addr("https://127.0.0.1/bucket"), Some("127.0.0.1:443".parse().unwrap()));
        assert_eq!(server_addr("http://[::1]:81/"), Some("[::1]:81".parse().unwrap()));
        assert_eq!(server_addr("not a url"), None);
    }

    /// Real sockets on loopback: three connections opened and closed while a watch runs
    /// are counted, and one that was open before it is not.
    #[test]
    fn counts_the_connections_opened_while_it_watches() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let accept = std::thread::spawn(move || {
            for s in listener.incoming().take(4) {
                let mut s = s.unwrap();
                let mut b = [0u8; 1];
                let _ = s.read(&mut b);
            }
        });
        let mut before = std::net::TcpStream::connect(server).unwrap();
        let watch = ConnWatch::start(server);
        for _ in 0..3 {
            let mut c = std::net::TcpStream::connect(server).unwrap();
            c.write_all(b"x").unwrap();
        }
        before.write_all(b"x").unwrap();
        accept.join().unwrap();
        assert_eq!(watch.finish(), 3);
    }
}
