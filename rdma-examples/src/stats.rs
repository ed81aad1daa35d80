//! Statistics in perftest's units: bandwidth in MB/sec (MB = 2^20 bytes)
//! with perftest's "peak", message rate in Mpps, and latency
//! percentiles in microseconds.

/// Bytes in perftest's "MB".
pub const MB: f64 = 1_048_576.0;

/// The sample at fraction `p` (0..=1) of `sorted` (nearest rank below, as
/// perftest indexes `delta[(int)(n * p)]`). `NaN` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[i]
}

/// Latency summary (microseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Samples.
    pub count: usize,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Median (perftest's `t_typical`).
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl Latency {
    /// Summarises `samples` (sorted in place). `None` when empty.
    pub fn from_samples(samples: &mut [f64]) -> Option<Latency> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len() as f64;
        let avg = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n;
        Some(Latency {
            count: samples.len(),
            min: samples[0],
            max: samples[samples.len() - 1],
            typical: percentile(samples, 0.5),
            avg,
            stdev: var.sqrt(),
            p99: percentile(samples, 0.99),
            p999: percentile(samples, 0.999),
        })
    }
}

/// Bandwidth summary of `iters` operations of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidth {
    /// Peak, MB/sec (see [`Bandwidth::from_times`]).
    pub peak_mb: f64,
    /// Average, MB/sec.
    pub avg_mb: f64,
    /// Average message rate, millions per second.
    pub mpps: f64,
}

impl Bandwidth {
    /// From the post and completion times (seconds since any common
    /// origin; `posted[i]` and `completed[i]` belong to operation `i`).
    ///
    /// Average: all bytes over first post to last completion. Peak, as
    /// perftest computes it: the smallest time per operation over any
    /// run `i..=j` of consecutive operations, `(completed[j] -
    /// posted[i]) / (j - i + 1)`. Runs are limited to a window that
    /// keeps the work below 5·10⁷ pairs (every run for up to 7000
    /// operations).
    pub fn from_times(size: usize, posted: &[f64], completed: &[f64]) -> Option<Bandwidth> {
        let n = posted.len().min(completed.len());
        if n == 0 {
            return None;
        }
        let total = completed[n - 1] - posted[0];
        let bytes = size as f64 * n as f64;
        let window = (50_000_000 / n).max(64).min(n);
        let mut best = f64::INFINITY;
        for (i, &start) in posted[..n].iter().enumerate() {
            let end = n.min(i + window);
            for (k, &done) in completed[i..end].iter().enumerate() {
                let t = (done - start) / (k + 1) as f64;
                if t > 0.0 && t < best {
                    best = t;
                }
            }
        }
        let avg = if total > 0.0 {
            bytes / total
        } else {
            f64::INFINITY
        };
        let peak = if best.is_finite() {
            size as f64 / best
        } else {
            avg
        };
        Some(Bandwidth {
            peak_mb: peak.max(avg) / MB,
            avg_mb: avg / MB,
            mpps: if size > 0 {
                avg / size as f64 / 1e6
            } else {
                n as f64 / total / 1e6
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        let mut s: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let l = Latency::from_samples(&mut s).unwrap();
        assert_eq!((l.min, l.max, l.typical), (1.0, 1000.0, 501.0));
        assert_eq!((l.p99, l.p999), (991.0, 1000.0));
        assert!((l.avg - 500.5).abs() < 1e-9);
        assert!(Latency::from_samples(&mut []).is_none());
        // Four operations of 1 MiB, each posted at t and completed at t+1
        // seconds, one per second: 1 MB/s average; the best run is any
        // long one.
        let posted = [0.0, 1.0, 2.0, 3.0];
        let completed = [1.0, 2.0, 3.0, 4.0];
        let b = Bandwidth::from_times(1 << 20, &posted, &completed).unwrap();
        assert!((b.avg_mb - 1.0).abs() < 1e-9, "{b:?}");
        assert!(b.peak_mb >= b.avg_mb);
        assert!((b.mpps - 1e-6).abs() < 1e-12);
    }
}
