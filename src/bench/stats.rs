//! The one definition of percentiles and summaries every bench uses (`agentd bench engine | constraint | schemas
//! | load | tool-calls` and the tests), and the process-memory readings the benches report.
//!
//! **Percentile**: linear interpolation between the closest ranks, numpy's default (and what vLLM's benchmark
//! reports): over the `n` finite values sorted ascending, rank `h = (n − 1)·p/100`, value
//! `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`. So p50 of `[1, 2, 3, 4]` is 2.5 (the median), p0 the minimum, p100
//! the maximum, and any percentile of one value is that value. Non-finite values (NaN, ±∞) are left out.
//!
//! [`Distribution`] is every figure over one metric; [`Spread`] is its short form (median, min, max) that the
//! engine benches print.

use serde::{Deserialize, Serialize};

/// The `p`-th percentile (0–100) of `sorted` (ascending, finite), by linear interpolation between the closest
/// ranks: rank `h = (n − 1)·p/100`, value `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`. `None` when empty.
/// [`Distribution::of`] sorts and filters for you.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let h = (n - 1) as f64 * p.clamp(0.0, 100.0) / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// The spread of one metric over repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub n: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Distribution {
    /// Over the finite values of `values` (any order); `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(Self {
            n,
            mean: v.iter().sum::<f64>() / n as f64,
            min: v[0],
            p50: percentile(&v, 50.0)?,
            p90: percentile(&v, 90.0)?,
            p99: percentile(&v, 99.0)?,
            max: v[n - 1],
        })
    }
}

/// Median (the p50 of [`Distribution`]), min and max over repeated measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for a sample without a finite value.
    pub fn of(values: &[f64]) -> Option<Self> {
        Distribution::of(values).map(Self::from)
    }
}

impl From<Distribution> for Spread {
    fn from(d: Distribution) -> Self {
        Self {
            median: d.p50,
            min: d.min,
            max: d.max,
        }
    }
}

/// A `… kB` line of this process's `/proc/self/status`, in MiB (Linux); `None` elsewhere.
fn proc_status_mb(key: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Peak resident memory of this process in MiB (Linux `VmHWM`); `None` elsewhere.
pub fn peak_rss_mb() -> Option<f64> {
    proc_status_mb("VmHWM:")
}

/// This process's resident memory in MiB (Linux `VmRSS`); `None` elsewhere.
pub fn rss_mb() -> Option<f64> {
    proc_status_mb("VmRSS:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_interpolates() {
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.5));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 99.0), Some(99.01));
    }

    #[test]
    fn distribution_sorts_and_drops_non_finite_values() {
        let d = Distribution::of(&[3.0, f64::NAN, 1.0, 2.0, 10.0, f64::INFINITY]).unwrap();
        assert_eq!((d.n, d.min, d.p50, d.max, d.mean), (4, 1.0, 2.5, 10.0, 4.0));
        assert!(Distribution::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn spread_is_the_distributions_median_min_max() {
        let s = Spread::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!(
            s,
            Spread {
                median: 2.5,
                min: 1.0,
                max: 10.0
            }
        );
        assert!(Spread::of(&[]).is_none());
    }
}
