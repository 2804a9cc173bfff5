//! Faults of the path itself, added by the delay line on top of its router port model:
//! random loss, reordering, and cuts. The kernels here have no `netem`, whose `loss`,
//! `delay ... reorder` and a down interface these stand in for.
//!
//! ```text
//!  reader: packet arrives ─► cut now? ── yes ─► dropped (cut)
//!                            │ no
//!                            ├─► dice.lost()? ── yes ─► dropped (lost)
//!                            │ no
//!                            └─► port.admit ─► due = departure + delay + dice.jitter()
//!  writer: packets ordered by due (a heap once there is jitter) ─► cut at due? ─► dropped (cut)
//!                                                                 └─► written to the far side
//! ```
//!
//! - Loss: each packet is lost with probability `loss`, independently (Bernoulli), drawn
//!   from a generator seeded with `seed` and the direction, so the same seed draws the
//!   same sequence of decisions. A lost packet never occupies the serializer.
//! - Reordering: each packet's due time gets an extra delay drawn uniformly from
//!   `[0, jitter)`; a packet that draws less than the one before it overtakes it. The
//!   writer then keeps packets in a heap by due time instead of a FIFO. Jitter never makes
//!   a packet early: the one-way delay is a floor.
//! - A cut: from its start for its length, nothing passes either way: packets that arrive
//!   during it are dropped at the reader, and packets already on the wire whose due time
//!   falls into it are dropped at the writer, as when a fibre is pulled. A cut is
//!   scheduled at link-up (`cut_at` after it, for `cut_for`) or started at any time with
//!   [`crate::Link::cut`] (the holder binary does so on SIGUSR1).
//!
//! Loss and jitter act per packet, so an impaired link carries MTU-sized packets: its TUN
//! devices are opened without TCP segmentation offload (tun.rs), else one draw would lose
//! or delay a 64 KiB super-packet, some 45 segments at once. That halves what the delay
//! line can carry (~3 Gbit/s instead of ~10 on the lab machine), far above what the fault
//! tests move. A link with only a cut keeps the offload.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The faults of one link, both directions alike. `Default` is a clean link.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Impairments {
    /// Probability that a packet is lost, 0 to 1.
    pub loss: f64,
    /// Most extra delay a packet draws (uniform from zero): packets overtake one another.
    pub jitter: Duration,
    /// Seed of the loss and jitter draws.
    pub seed: u64,
    /// A cut that starts this long after the link is up (and lasts `cut_for`).
    pub cut_at: Option<Duration>,
    /// The length of a cut, scheduled or started with [`crate::Link::cut`].
    pub cut_for: Duration,
}

/// The fault matrix's link faults by name (tests/test_faults.py): each alone, on top of
/// any link preset; flags override their parts.
pub const FAULT_PRESETS: [(&str, &str); 4] = [
    ("lossy", "1% of packets lost, each independently"),
    ("reorder", "up to 4 ms of jitter per packet: at ~1 Gbit/s, a packet overtakes dozens"),
    ("cut", "a 3 s cut on demand (Link::cut; SIGUSR1 to `ferry bench link-hold`)"),
    ("none", "a clean link"),
];

impl Impairments {
    /// A preset of [`FAULT_PRESETS`] with `seed`. The loss rate is the fault matrix's
    /// (1%, a lossy mobile or Wi-Fi path; a wired path in one region loses well under
    /// 0.1%); the jitter is four times `region`'s RTT, so that packets overtake many others
    /// on the lab's 1 ms links; the cut is three seconds, past TCP's first retransmission
    /// time-outs (200 ms doubling), short of a client's give-up.
    pub fn preset(name: &str, seed: u64) -> Option<Impairments> {
        let base = Impairments { seed, ..Default::default() };
        Some(match name {
            "lossy" => Impairments { loss: 0.01, ..base },
            "reorder" => Impairments { jitter: Duration::from_millis(4), ..base },
            "cut" => Impairments { cut_for: Duration::from_secs(3), ..base },
            "none" => base,
            _ => return None,
        })
    }

    /// Whether packets must be MTU-sized: loss and jitter act per packet.
    pub fn per_packet(&self) -> bool {
        self.loss > 0.0 || !self.jitter.is_zero()
    }

    /// Parses a loss: `0.01`, `1%`, `0.5%`.
    pub fn parse_loss(s: &str) -> Result<f64, String> {
        let (num, scale) = match s.strip_suffix('%') {
            Some(n) => (n, 100.0),
            None => (s, 1.0),
        };
        let v =
            num.trim().parse::<f64>().map_err(|_| format!("loss {s:?}: a probability (0.01) or a percentage (1%)"))?
                / scale;
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("loss {s:?} is outside 0-100%"));
        }
        Ok(v)
    }

    /// One-line description for logs and reports: `loss 1%, jitter 5 ms, cut 3 s at 2 s`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.loss > 0.0 {
            parts.push(format!("loss {}%", self.loss * 100.0));
        }
        if !self.jitter.is_zero() {
            parts.push(format!("jitter {:?}", self.jitter));
        }
        if let Some(at) = self.cut_at {
            parts.push(format!("cut {:?} at {at:?}", self.cut_for));
        } else if !self.cut_for.is_zero() {
            parts.push(format!("cut {:?} on demand", self.cut_for));
        }
        if parts.is_empty() {
            "none".into()
        } else {
            format!("{} (seed {})", parts.join(", "), self.seed)
        }
    }
}

/// When the link is cut: one window, `[start, end)` in nanoseconds after `epoch`, shared by
/// the four threads of the delay line and the link's owner. Empty when `start == end`.
#[derive(Debug)]
pub struct CutWindow {
    epoch: Instant,
    start_ns: AtomicU64,
    end_ns: AtomicU64,
}

impl CutWindow {
    pub fn new(epoch: Instant) -> CutWindow {
        CutWindow { epoch, start_ns: AtomicU64::new(0), end_ns: AtomicU64::new(0) }
    }

    /// Cuts the link from `start` for `len` (replacing any earlier window).
    pub fn set(&self, start: Instant, len: Duration) {
        let s = start.saturating_duration_since(self.epoch).as_nanos() as u64;
        // End first to zero-length, so a reader never sees the new start with the old end.
        self.end_ns.store(0, Relaxed);
        self.start_ns.store(s, Relaxed);
        self.end_ns.store(s + len.as_nanos() as u64, Relaxed);
    }

    /// Whether `at` falls into the window.
    pub fn is_cut(&self, at: Instant) -> bool {
        let t = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        let (s, e) = (self.start_ns.load(Relaxed), self.end_ns.load(Relaxed));
        s <= t && t < e
    }
}

/// The draws of one direction: splitmix64, which passes BigCrush and needs no state but a
/// counter, so the link needs no random-number crate.
#[derive(Clone, Debug)]
pub struct Dice {
    state: u64,
    loss: f64,
    jitter_ns: u64,
}

impl Dice {
    /// `direction` (0 or 1) gives each direction its own sequence from one seed.
    pub fn new(imp: &Impairments, direction: u64) -> Dice {
        Dice {
            state: imp.seed ^ direction.wrapping_mul(0xA076_1D64_78BD_642F),
            loss: imp.loss,
            jitter_ns: imp.jitter.as_nanos() as u64,
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw from [0, 1) (53 bits).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Whether this packet is lost (no draw at all on a lossless link).
    pub fn lost(&mut self) -> bool {
        self.loss > 0.0 && self.unit() < self.loss
    }

    /// This packet's extra delay.
    pub fn jitter(&mut self) -> Duration {
        if self.jitter_ns == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.next() % self.jitter_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_parses_as_probability_or_percentage() {
        assert_eq!(Impairments::parse_loss("0.01"), Ok(0.01));
        assert_eq!(Impairments::parse_loss("1%"), Ok(0.01));
        assert_eq!(Impairments::parse_loss("0%"), Ok(0.0));
        assert!(Impairments::parse_loss("101%").is_err());
        assert!(Impairments::parse_loss("-0.1").is_err());
        assert!(Impairments::parse_loss("lots").is_err());
    }

    #[test]
    fn loss_draws_are_seeded_and_near_the_rate() {
        let imp = Impairments { loss: 0.01, seed: 7, ..Default::default() };
        let draws = |dir| {
            let mut d = Dice::new(&imp, dir);
            (0..100_000).map(|_| d.lost()).collect::<Vec<_>>()
        };
        let a = draws(0);
        assert_eq!(a, draws(0), "the same seed and direction draw the same losses");
        assert_ne!(a, draws(1), "each direction has its own sequence");
        let n = a.iter().filter(|&&x| x).count();
        // 1,000 expected; the standard deviation is ~31.5, so 4 sigma either way.
        assert!((874..=1126).contains(&n), "{n} losses in 100,000 at 1%");
        let mut clean = Dice::new(&Impairments::default(), 0);
        assert!((0..10_000).all(|_| !clean.lost()), "no loss on a clean link");
    }

    #[test]
    fn jitter_stays_in_its_range_and_reorders() {
        let imp = Impairments { jitter: Duration::from_millis(4), seed: 3, ..Default::default() };
        let mut d = Dice::new(&imp, 0);
        let js: Vec<Duration> = (0..10_000).map(|_| d.jitter()).collect();
        assert!(js.iter().all(|j| *j < Duration::from_millis(4)));
        // Packets 10 us apart with up to 4 ms of jitter: most pairs swap somewhere.
        let dues: Vec<Duration> =
            js.iter().enumerate().map(|(i, j)| Duration::from_micros(10 * i as u64) + *j).collect();
        let overtaken = dues.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(overtaken > 1_000, "{overtaken} of 9,999 neighbours reordered");
        assert!(imp.per_packet() && !Impairments::default().per_packet());
        assert_eq!(Dice::new(&Impairments::default(), 0).jitter(), Duration::ZERO);
    }

    #[test]
    fn a_cut_window_is_half_open_and_can_be_moved() {
        let t0 = Instant::now();
        let w = CutWindow::new(t0);
        assert!(!w.is_cut(t0), "no cut until one is set");
        let s = Duration::from_secs;
        w.set(t0 + s(2), s(3));
        assert!(!w.is_cut(t0 + Duration::from_millis(1999)));
        assert!(w.is_cut(t0 + s(2)) && w.is_cut(t0 + Duration::from_millis(4999)));
        assert!(!w.is_cut(t0 + s(5)), "the end is open");
        w.set(t0 + s(10), s(1));
        assert!(!w.is_cut(t0 + s(3)) && w.is_cut(t0 + s(10)), "a new cut replaces the old");
    }

    #[test]
    fn every_named_preset_exists() {
        for (name, _) in FAULT_PRESETS {
            assert_eq!(Impairments::preset(name, 5).map(|p| p.seed), Some(5), "{name}");
        }
        assert_eq!(Impairments::preset("lossy", 1).unwrap().loss, 0.01);
        assert!(Impairments::preset("cut", 1).unwrap().cut_at.is_none(), "the preset's cut is on demand");
        assert!(Impairments::preset("flaky", 1).is_none());
    }

    #[test]
    fn a_description_names_each_fault() {
        let imp = Impairments {
            loss: 0.01,
            jitter: Duration::from_millis(5),
            seed: 9,
            cut_at: Some(Duration::from_secs(2)),
            cut_for: Duration::from_secs(3),
        };
        assert_eq!(imp.describe(), "loss 1%, jitter 5ms, cut 3s at 2s (seed 9)");
        assert_eq!(Impairments::default().describe(), "none");
    }
}
