//! Judging a test at a size: the medians of both tools, their ratio against
//! the test's target, and the repetitions ours won.

use super::suite::Test;

/// A test at a size, with the values of both tools.
#[derive(Debug)]
pub(super) struct Comparison {
    pub(super) test: Test,
    pub(super) size: u64,
    pub(super) perftest: Cell,
    pub(super) ours: Cell,
    /// A stream row's TCP reference (`rstream -T s`); empty otherwise.
    pub(super) tcp: Cell,
}

impl Comparison {
    /// A comparison with no values yet.
    pub(super) fn new(test: Test, size: u64) -> Comparison {
        Comparison {
            test,
            size,
            perftest: Cell::default(),
            ours: Cell::default(),
            tcp: Cell::default(),
        }
    }

    /// ours/perftest of the medians.
    pub(super) fn ratio(&self) -> Option<f64> {
        match (median(&self.ours.values), median(&self.perftest.values)) {
            (Some(o), Some(p)) if p > 0.0 => Some(o / p),
            _ => None,
        }
    }

    /// ours/TCP of the medians (a stream row's reference, no target).
    pub(super) fn ratio_tcp(&self) -> Option<f64> {
        match (median(&self.ours.values), median(&self.tcp.values)) {
            (Some(o), Some(t)) if t > 0.0 => Some(o / t),
            _ => None,
        }
    }

    /// Whether the ratio meets the test's target; `None` without a ratio.
    pub(super) fn meets(&self) -> Option<bool> {
        self.ratio().map(|r| self.test.meets(r))
    }

    /// `(wins, paired)`: see [`pairs`].
    pub(super) fn pairs(&self) -> (usize, usize) {
        pairs(self.test, &self.perftest, &self.ours)
    }
}

/// The median; `None` for no values.
pub(super) fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

/// The values of one tool for one test and size.
#[derive(Debug, Default)]
pub(super) struct Cell {
    pub(super) values: Vec<f64>,
    /// rdma_cm runs: the data connection's set-up time (ms) of each run
    /// that reported one.
    pub(super) setup_ms: Vec<f64>,
    /// The repetition each of `values` came from (same order).
    pub(super) reps: Vec<usize>,
    /// Runs that failed or printed no result.
    pub(super) failed: usize,
    /// perftest runs that passed but printed `inf` or a bandwidth of 0.00
    /// (its clock rate sampling failed in the guest): reported, left out of
    /// the median, not a failure of the bench.
    pub(super) inf: usize,
}

impl Cell {
    /// Records `v`, the result of repetition `rep`.
    pub(super) fn push(&mut self, rep: usize, v: f64) {
        self.values.push(v);
        self.reps.push(rep);
    }

    /// The result of repetition `rep`, if it gave one.
    fn at_rep(&self, rep: usize) -> Option<f64> {
        self.reps
            .iter()
            .position(|&r| r == rep)
            .map(|i| self.values[i])
    }
}

/// Repetition by repetition (perftest and ours ran back to back with the
/// same parameters): in how many of the repetitions where both gave a
/// result ours was better, and in how many both gave one. A sign test on
/// these pairs says more under emulation's run-to-run noise than the ratio
/// of medians alone: 0 of 5 or 5 of 5 happens by chance 1 time in 16.
fn pairs(test: Test, perftest: &Cell, ours: &Cell) -> (usize, usize) {
    let both: Vec<(f64, f64)> = ours
        .reps
        .iter()
        .zip(&ours.values)
        .filter_map(|(&rep, &o)| perftest.at_rep(rep).map(|p| (o, p)))
        .collect();
    let wins = both.iter().filter(|&&(o, p)| test.better(o, p)).count();
    (wins, both.len())
}

#[cfg(test)]
mod tests {
    use super::super::suite::TESTS;
    use super::*;

    #[test]
    fn pairs_and_targets() {
        let (bw, lat) = (TESTS[0], TESTS[3]);
        let mut pt = Cell::default();
        let mut ours = Cell::default();
        // Rep 2 of perftest failed: only reps 1 and 3 pair up.
        pt.push(1, 10.0);
        pt.push(3, 10.0);
        ours.push(1, 11.0);
        ours.push(2, 50.0);
        ours.push(3, 9.0);
        assert_eq!(pairs(bw, &pt, &ours), (1, 2));
        assert_eq!(pairs(lat, &pt, &ours), (1, 2));
        assert!(bw.meets(1.00) && !bw.meets(0.99));
        assert!(lat.meets(1.05) && !lat.meets(1.06));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
