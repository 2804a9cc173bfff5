//! `ferry bench link-hold`: brings an emulated link up (ferry-link), with faults of the
//! path if asked (loss, reordering, a cut), and holds it for other processes, which run
//! in its namespaces with `ip netns exec`. The fault matrix's link cells
//! (tests/test_faults.py) start `ferry serve` in the server namespace and `ferry cp` in
//! the client's, and cut the link mid-transfer with SIGUSR1.
//!
//! ```text
//!   start ─► link up ─► stdout: "client namespace NAME IP", "server namespace NAME IP", "ready"
//!            SIGUSR1 ─► cut for --cut-for (stdout: "cut ...")
//!            SIGINT / SIGTERM / --lifetime ─► stdout: the counters per direction ─► torn down
//! ```
//!
//! Root only, like every link; without it this fails (there is nothing to fall back to).

use crate::units::{parse_bytes, parse_duration};
use anyhow::{bail, Context, Result};
use clap::Args;
use ferry_link::impair::FAULT_PRESETS;
use ferry_link::{DirCounts, Impairments, Link, Preset};
use std::io::Write;
use std::time::Duration;

#[derive(Args)]
pub struct LinkHoldArgs {
    /// The link's shape: region (1 ms RTT), transatlantic (110 ms), instance (1 ms, 2.5 Gbit/s).
    #[arg(long, default_value = "region", value_parser = ["region", "transatlantic", "instance"])]
    link: String,
    /// Round-trip time instead of the preset's.
    #[arg(long, value_parser = parse_duration)]
    rtt: Option<Duration>,
    /// Rate cap instead of the preset's, bits per second each way (100M, 1G, 2.5G).
    #[arg(long, value_parser = parse_bytes)]
    rate: Option<u64>,
    /// Queue in front of the rate cap instead of the preset's, bytes (1MiB).
    #[arg(long, value_parser = parse_bytes)]
    queue: Option<u64>,
    /// Named faults: lossy (1% loss), reorder (4 ms jitter), cut (3 s on SIGUSR1), none.
    /// The flags below override their parts.
    #[arg(long, default_value = "none")]
    faults: String,
    /// Probability that a packet is lost: 0.01 or 1%.
    #[arg(long, value_parser = Impairments::parse_loss)]
    loss: Option<f64>,
    /// Most extra delay per packet (uniform): packets overtake one another.
    #[arg(long, value_parser = parse_duration)]
    jitter: Option<Duration>,
    /// Cut the link this long after it is up (for --cut-for).
    #[arg(long, value_parser = parse_duration)]
    cut_at: Option<Duration>,
    /// Length of a cut, scheduled (--cut-at) or on SIGUSR1.
    #[arg(long, value_parser = parse_duration)]
    cut_for: Option<Duration>,
    /// Seed of the loss and jitter draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The link is torn down after this long whatever happens.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    lifetime: Duration,
}

impl LinkHoldArgs {
    fn shape(&self) -> Result<(Preset, Impairments)> {
        let mut preset = Preset::by_name(&self.link).context("unknown link preset")?;
        if let Some(rtt) = self.rtt {
            preset.rtt = rtt;
        }
        if let Some(rate) = self.rate {
            preset.rate_bits_per_s = rate;
        }
        if let Some(q) = self.queue {
            preset.queue_limit_bytes = q;
        }
        let Some(mut imp) = Impairments::preset(&self.faults, self.seed) else {
            let names: Vec<&str> = FAULT_PRESETS.iter().map(|(n, _)| *n).collect();
            bail!("unknown --faults {:?} (one of {})", self.faults, names.join(", "));
        };
        imp.loss = self.loss.unwrap_or(imp.loss);
        imp.jitter = self.jitter.unwrap_or(imp.jitter);
        imp.cut_at = self.cut_at.or(imp.cut_at);
        imp.cut_for = self.cut_for.unwrap_or(imp.cut_for);
        if imp.cut_at.is_some() && imp.cut_for.is_zero() {
            bail!("--cut-at needs --cut-for (how long the cut lasts)");
        }
        Ok((preset, imp))
    }
}

fn counts(d: &DirCounts) -> String {
    format!(
        "packets {} bytes {} lost {} reordered {} cut {} queue-dropped {} write-errors {}",
        d.packets, d.bytes, d.lost, d.reordered, d.cut, d.dropped, d.write_errors
    )
}

pub fn run(a: &LinkHoldArgs) -> Result<()> {
    let (preset, imp) = a.shape()?;
    let link = Link::up_impaired(preset, imp, a.lifetime)
        .map_err(|e| anyhow::Error::new(e).context(format!("link-hold: bringing up the {} link", preset.name)))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        // Handlers in place before "ready": a signal sent as soon as it is read is handled.
        let mut usr1 = signal(SignalKind::user_defined1())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut out = std::io::stdout();
        writeln!(out, "link {preset} up; faults: {}", imp.describe())?;
        writeln!(out, "client namespace {} {}", link.client_namespace(), link.client_ip())?;
        writeln!(out, "server namespace {} {}", link.server_namespace(), link.server_ip())?;
        writeln!(out, "ready")?;
        out.flush()?;
        let end = tokio::time::sleep(a.lifetime);
        tokio::pin!(end);
        loop {
            tokio::select! {
                _ = usr1.recv() => {
                    let len = if imp.cut_for.is_zero() { Duration::from_secs(3) } else { imp.cut_for };
                    link.cut(len);
                    writeln!(out, "cut for {len:?}")?;
                    out.flush()?;
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = &mut end => {
                    eprintln!("link-hold: the link reached --lifetime {:?}", a.lifetime);
                    break;
                }
            }
        }
        let st = link.stats();
        writeln!(out, "c2s {}", counts(&st.client_to_server))?;
        writeln!(out, "s2c {}", counts(&st.server_to_client))?;
        out.flush()?;
        anyhow::Ok(())
    })?;
    drop(link);
    Ok(())
}
