//! The statistics the lab quotes: percentiles of one run's latencies, and the median with
//! its min-max spread over repeated runs.
//!
//! Percentiles use the **nearest-rank** method: for `n` sorted samples, the p-th
//! percentile (0 < p <= 100) is the sample at 1-based rank `ceil(p / 100 * n)`; p = 0 is
//! the smallest sample. It always returns a value that was observed (no interpolation),
//! so a p99 of 100 samples is the 99th smallest, and p100 is the maximum.
//!
//! The median over repeats is the usual one (the mean of the two middle values for an
//! even count): repeats are few (3-5), and with 3 it is the middle run.

/// The p-th percentile (0..=100) of `sorted` (ascending) by nearest rank; `None` if empty.
pub fn percentile_nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let n = sorted.len();
    // The small epsilon keeps p * n / 100 from landing just above an integer through
    // floating-point error (e.g. 0.29 * 100 = 29.000000000000004, which is rank 29).
    let rank = ((p / 100.0) * n as f64 - 1e-9).ceil().max(1.0) as usize;
    Some(sorted[rank.min(n) - 1])
}

/// Sorts in place (NaN-free input) and returns the nearest-rank percentiles asked for.
pub fn percentiles(samples: &mut [f64], ps: &[f64]) -> Vec<Option<f64>> {
    samples.sort_by(|a, b| a.total_cmp(b));
    ps.iter().map(|p| percentile_nearest_rank(samples, *p)).collect()
}

/// Median and range of one figure over repeated runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { median, min: v[0], max: v[n - 1], n })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_textbook_example() {
        // The Wikipedia example for nearest rank: 15, 20, 35, 40, 50.
        let v = [15.0, 20.0, 35.0, 40.0, 50.0];
        assert_eq!(percentile_nearest_rank(&v, 5.0), Some(15.0));
        assert_eq!(percentile_nearest_rank(&v, 30.0), Some(20.0));
        assert_eq!(percentile_nearest_rank(&v, 40.0), Some(20.0));
        assert_eq!(percentile_nearest_rank(&v, 50.0), Some(35.0));
        assert_eq!(percentile_nearest_rank(&v, 100.0), Some(50.0));
        assert_eq!(percentile_nearest_rank(&v, 0.0), Some(15.0));
    }

    #[test]
    fn nearest_rank_on_one_to_hundred() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile_nearest_rank(&v, 50.0), Some(50.0));
        assert_eq!(percentile_nearest_rank(&v, 90.0), Some(90.0));
        assert_eq!(percentile_nearest_rank(&v, 99.0), Some(99.0));
        assert_eq!(percentile_nearest_rank(&v, 29.0), Some(29.0), "no float drift to rank 30");
        assert_eq!(percentile_nearest_rank(&v, 99.5), Some(100.0));
        // Always an observed value.
        let w = [1.0, 10.0];
        assert_eq!(percentile_nearest_rank(&w, 50.0), Some(1.0));
        assert_eq!(percentile_nearest_rank(&w, 51.0), Some(10.0));
    }

    #[test]
    fn nearest_rank_edges() {
        assert_eq!(percentile_nearest_rank(&[], 50.0), None);
        assert_eq!(percentile_nearest_rank(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile_nearest_rank(&[1.0], 101.0), None);
        let mut v = vec![3.0, 1.0, 2.0];
        assert_eq!(percentiles(&mut v, &[50.0, 100.0]), vec![Some(2.0), Some(3.0)]);
        assert_eq!(v, vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn spread_median_min_max() {
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[5.0, 1.0, 3.0]), Some(Spread { median: 3.0, min: 1.0, max: 5.0, n: 3 }));
        assert_eq!(Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.5);
    }
}
