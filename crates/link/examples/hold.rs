//! Holds an emulated link up for manual measurement and prints its counters each second.
//!
//! ```text
//! cargo run --release -p ferry-link --example hold -- transatlantic 120 [QUEUE_MIB]
//! ip netns exec <server ns> iperf3 -s -1 &
//! ip netns exec <client ns> iperf3 -c 10.77.0.2 -P 8 -t 20
//! ```
//!
//! Root only. SIGINT, SIGTERM or the time bound end it and tear the link down.

use ferry_link::{Link, Preset};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Relaxed);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let preset = args.next().unwrap_or_else(|| "transatlantic".into());
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(120);
    let mut preset = Preset::by_name(&preset).unwrap_or_else(|| panic!("unknown preset {preset}"));
    // A queue other than the preset's, to compare (MiB, each direction).
    if let Some(mib) = args.next() {
        preset.queue_limit_bytes = mib.parse::<u64>().unwrap_or_else(|_| panic!("queue MiB: {mib}")) << 20;
    }
    let link = Link::up_for(preset, Duration::from_secs(seconds)).unwrap_or_else(|e| panic!("link up: {e}"));
    println!("{preset}\nclient namespace {}\nserver namespace {}", link.client_namespace(), link.server_namespace());
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let t0 = Instant::now();
    let mut last = link.stats();
    let mut cpu_last = ferry_link::delay_line_cpu_time();
    while t0.elapsed() < Duration::from_secs(seconds) && !STOP.load(Relaxed) {
        std::thread::sleep(Duration::from_secs(1));
        let now = link.stats();
        let cpu = ferry_link::delay_line_cpu_time();
        let (a, b) = (now.client_to_server, last.client_to_server);
        let (r, q) = (now.server_to_client, last.server_to_client);
        let pk = a.packets - b.packets;
        if pk > 0 || r.packets > q.packets {
            println!(
                "{:>4.0}s c2s {:.2} Gbit/s {} pkts mean {} B drops {} | s2c {:.2} Gbit/s {} pkts mean {} B drops {} | link cpu {:.2} | ring drops c {} s {}",
                t0.elapsed().as_secs_f64(),
                (a.bytes - b.bytes) as f64 * 8.0 / 1e9,
                pk,
                (a.bytes - b.bytes).checked_div(pk).unwrap_or(0),
                a.dropped - b.dropped,
                (r.bytes - q.bytes) as f64 * 8.0 / 1e9,
                r.packets - q.packets,
                (r.bytes - q.bytes).checked_div(r.packets - q.packets).unwrap_or(0),
                r.dropped - q.dropped,
                (cpu - cpu_last).as_secs_f64(),
                now.client_device.tx_dropped - last.client_device.tx_dropped,
                now.server_device.tx_dropped - last.server_device.tx_dropped,
            );
        }
        last = now;
        cpu_last = cpu;
    }
}
