//! Brings a link up and holds it for manual debugging:
//! `cargo run --release -p ferry-link --example hold -- transatlantic 120`, then
//! `ip netns exec <server ns> iperf3 -s` and `ip netns exec <client ns> iperf3 -c 10.77.0.2`.
//! Prints the delay line's counters every second.

fn main() {
    let mut args = std::env::args().skip(1);
    let preset = ferry_link::Preset::by_name(&args.next().unwrap_or_else(|| "transatlantic".into())).expect("region or transatlantic");
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let link = ferry_link::Link::up_for(preset, std::time::Duration::from_secs(secs)).unwrap_or_else(|e| panic!("{e}"));
    println!("{preset}: client {} server {} ({})", link.client_namespace(), link.server_namespace(), link.server_ip());
    for _ in 0..secs {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let s = link.stats();
        println!("c2s {:?}\ns2c {:?}", s.client_to_server, s.server_to_client);
    }
}
