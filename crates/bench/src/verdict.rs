//! The words a claim is read in, shared by every workload's `claim` function and by the
//! claims table: a [`Headline`] (published | measured | verdict), ratios paired by repeat
//! ([`paired_ratio`]: A and B ran back to back in the same repeat, on the same server), the
//! verdict rules ([`judge_ratio`], [`judge_percent`]) and how ratios are written ([`x`],
//! [`x2`], [`faster_or_slower`]).
//!
//! The verdict rule (claims.rs prints it under the table):
//!
//! - "yes": the effect points the published way and its size is within a factor of 2 of
//!   the published figure (range);
//! - "direction only": it points the published way but its size is further off;
//! - "no": it does not point the published way (or is too small to tell, under 10%);
//! - "none published: ...": no figure to hold the effect against (vectored, commit); the
//!   verdict says whether the engine's row beat the naive one by 10% or more;
//! - "baseline only": only the baseline is measured (bulk-wan's share of iperf3).
//!
//! A bottom module: it imports only record.rs and stats.rs.

use crate::record::RunRecord;
use crate::stats::Spread;

/// One row of the claims table.
#[derive(Clone, Debug, PartialEq)]
pub struct Headline {
    pub workload: String,
    pub published: String,
    pub measured: String,
    pub verdict: String,
}

impl Headline {
    pub fn new(workload: &str, published: &str, measured: String, verdict: &str) -> Headline {
        Headline { workload: workload.into(), published: published.into(), measured, verdict: verdict.into() }
    }
}

/// Per-repeat `num.figure / den.figure` over clean runs of both, as a spread.
pub fn paired_ratio(records: &[RunRecord], num: &str, den: &str, figure: &str) -> Option<Spread> {
    Spread::of(&crate::record::per_repeat_ratios(records, num, den, figure, |r| r.status == "ok"))
}

/// The most repeats any record of `records` says its run had.
pub fn repeats_of(records: &[RunRecord]) -> usize {
    records.iter().map(|r| r.repeats).max().unwrap_or(0)
}

pub fn median(records: &[RunRecord], variant: &str, figure: &str) -> Option<f64> {
    Spread::of(
        &records
            .iter()
            .filter(|r| r.variant == variant && r.status == "ok")
            .filter_map(|r| r.figure(figure))
            .collect::<Vec<_>>(),
    )
    .map(|s| s.median)
}

/// The verdict for a multiplicative effect `ratio` (> 1 is the published direction)
/// against a published range `lo..=hi` of that ratio.
pub fn judge_ratio(ratio: f64, lo: f64, hi: f64) -> &'static str {
    if ratio < 1.1 {
        "no"
    } else if ratio >= lo / 2.0 && ratio <= hi * 2.0 {
        "yes"
    } else {
        "direction only"
    }
}

/// The verdict for a gain in percent (> 0 is the published direction) against a
/// published range in percent.
pub fn judge_percent(gain: f64, lo: f64, hi: f64) -> &'static str {
    if gain < 10.0 {
        "no"
    } else if gain >= lo / 2.0 && gain <= hi * 2.0 {
        "yes"
    } else {
        "direction only"
    }
}

pub fn x(s: &Spread) -> String {
    if s.n > 1 {
        format!("{:.1}x ({:.1}-{:.1})", s.median, s.min, s.max)
    } else {
        format!("{:.1}x", s.median)
    }
}

/// A ratio below 1 needs two decimals: `0.07x (0.05-0.10)`.
pub fn x2(s: &Spread) -> String {
    if s.n > 1 && s.min != s.max {
        format!("{:.2}x ({:.2}-{:.2})", s.median, s.min, s.max)
    } else {
        format!("{:.2}x", s.median)
    }
}

/// A time ratio `other / this` (> 1: this row is faster) in words: "2.0x (1.5-3.0)
/// faster", or, below 1, the inverse as "slower" ("0.2x faster" read as a gain).
pub fn faster_or_slower(s: &Spread) -> String {
    if s.median >= 1.0 {
        return format!("{} faster", x(s));
    }
    let inv = Spread { n: s.n, median: 1.0 / s.median, min: 1.0 / s.max, max: 1.0 / s.min };
    format!("{} slower", x(&inv))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(variant: &str, repeat: usize, figure: &str, v: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set(figure, v);
        r
    }

    #[test]
    fn verdicts() {
        assert_eq!(judge_percent(35.0, 30.0, 40.0), "yes");
        assert_eq!(judge_percent(16.0, 30.0, 40.0), "yes");
        assert_eq!(judge_percent(12.0, 30.0, 40.0), "direction only");
        assert_eq!(judge_percent(200.0, 30.0, 40.0), "direction only");
        assert_eq!(judge_percent(-5.0, 30.0, 40.0), "no");
        assert_eq!(judge_ratio(15.0, 15.0, 15.0), "yes");
        assert_eq!(judge_ratio(2.0, 15.0, 15.0), "direction only");
        assert_eq!(judge_ratio(1.05, 15.0, 15.0), "no");
    }

    #[test]
    fn paired_by_repeat() {
        let rs = vec![
            rec("a", 1, "f", 10.0),
            rec("b", 1, "f", 5.0),
            rec("a", 2, "f", 9.0),
            rec("b", 2, "f", 3.0),
            rec("a", 3, "f", 8.0), // no b in repeat 3: unpaired
        ];
        let s = paired_ratio(&rs, "a", "b", "f").unwrap();
        assert_eq!((s.n, s.min, s.max, s.median), (2, 2.0, 3.0, 2.5));
    }

    #[test]
    fn a_ratio_below_one_reads_slower() {
        let s = |median, min, max| Spread { n: 3, median, min, max };
        assert_eq!(faster_or_slower(&s(2.0, 1.5, 3.0)), "2.0x (1.5-3.0) faster");
        assert_eq!(faster_or_slower(&s(0.2, 0.125, 0.5)), "5.0x (2.0-8.0) slower");
    }
}
