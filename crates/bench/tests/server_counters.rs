//! The peers' connection and request counts come from the server's `/_ferry/metrics`
//! (peers.rs, `ServerCounters`): read over plain HTTP and over TLS alike, so peer rows on
//! an https endpoint (bulk-wan's) have their connections counted too. Real servers
//! (`ferry_server::BackgroundServer`), real sockets.

use ferry_bench::peers::ServerCounters;
use ferry_server::{BackgroundServer, ServeConfig, TlsConfig};

fn counted_between_scrapes(url: &str, ca: Option<&std::path::Path>) -> f64 {
    let before = ServerCounters::scrape(url, ca).unwrap_or_else(|| panic!("scraping {url}"));
    // Three connections in between: three more scrapes, each on a connection of its own.
    for _ in 0..3 {
        ServerCounters::scrape(url, ca).expect("scrape");
    }
    let after = ServerCounters::scrape(url, ca).expect("scrape");
    after.since(&before).connections_opened
}

#[test]
fn connections_are_counted_over_http_and_tls() {
    let http = BackgroundServer::start(ServeConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    assert!(http.url().starts_with("http://"));
    assert_eq!(counted_between_scrapes(&http.url(), None), 3.0);

    let dir = std::env::temp_dir().join(format!("ferry-bench-counters-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap());
    config.tls = Some(TlsConfig::SelfSigned { ca_file: ca.clone() });
    let https = BackgroundServer::start(config).unwrap();
    assert!(https.url().starts_with("https://"));
    assert_eq!(counted_between_scrapes(&https.url(), Some(&ca)), 3.0);
    // Without the CA the certificate is not trusted: no figure rather than a wrong one.
    assert!(ServerCounters::scrape(&https.url(), None).is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
