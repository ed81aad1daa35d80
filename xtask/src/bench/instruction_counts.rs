//! `--instructions`, back on the host: callgrind's files of every run
//! turned into instructions per operation, per test, tool and side.
//!
//! Per measurement (one n1 run and one n2 run of a tool), per side:
//!
//! * **Ir/op** = `(Ir(n2) - Ir(n1)) / (n2 - n1)`: Ir are the instructions
//!   callgrind collected (ours: inside the measured loops); perftest's
//!   binaries are stripped, so its loops are found as the functions of its
//!   own that call the provider's poll function (`run_iter_bw`,
//!   `run_iter_lat_send`, ...), counted inclusive where they are entered.
//!   Its report stays out: the bandwidth report's peak search is
//!   quadratic in the samples (0.05 n^2 Ir at perftest's default `cq_mod`
//!   of 100: 400 Ir/op at n = 2000/6000, which the n-difference does not
//!   cancel), its latency report sorts them (`qsort`), and its clock-rate
//!   sampling runs for a fixed time. Without a poll function found, the
//!   whole program less `qsort`;
//! * **polls/op**: calls to the provider's completion-queue poll function
//!   (rxe's `rxe_poll_cq`, reached through `ibv_poll_cq`'s function
//!   pointer), n-differenced likewise; an empty poll is one that found
//!   nothing, and how many there are depends on timing;
//! * **Ir/poll**: the whole cost of one more poll, the tool's loop around
//!   it included, measured from runs with the same n in different
//!   measurements, which do the same work and differ in how often they
//!   polled: the least-squares slope of `Ir_a - Ir_b` on
//!   `polls_a - polls_b` over every such pair of a test (client and
//!   server), or over all the tool's tests where a test's pairs polled
//!   too alike;
//! * **Ir/op w/o polls** = Ir/op - Ir/poll x polls/op: what an operation
//!   costs with the polls taken out, so that it does not follow timing.
//!   It takes out the polls that found a completion too (one or two per
//!   operation in a latency test, far fewer in a bandwidth test), at the
//!   same price for both tools' structure. Without an Ir/poll it falls
//!   back to taking out the provider function's own instructions only;
//! * **provider Ir/op** (the floor): the instructions executed inside the
//!   provider — rdma-core's user-space library and driver, callgrind's
//!   objects `libibverbs.so.*` and `libibverbs/lib<driver>-rdmav*.so` (rxe:
//!   `librxe-rdmav34.so`; and `libmlx5.so.*` and the like) — entered from the tool's code, inclusive (what
//!   they call in libc: spin locks, the doorbell's `write`, `memcpy`),
//!   n-differenced. The posts and polls go straight there (`ibv_post_send`
//!   and `ibv_poll_cq` are inline function-pointer calls), so a C program
//!   doing the same operations pays this much whatever its loop. Taken
//!   **w/o polls** as the other column is (less the poll function's
//!   inclusive instructions), and **over** = Ir/op w/o polls - that: what
//!   the tool's own code adds to the provider's posting and reaping.
//!
//! Operations of a run: `-n` on each of the test's queue pairs (both
//! tools' `-q`), so a `-q 4` row divides by 4 x (n2 - n1).

use std::fs;
use std::path::Path;

use super::callgrind::{self, Profile};
use super::instructions::CgRun;
use super::plan::Tool;
use super::profile_counts::{counts, Counts, SHIM_FILE};
use super::settings::Settings;
use super::suite::Test;

/// Per-operation figures of one measurement (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct PerOp {
    pub(super) ir: f64,
    pub(super) polls: f64,
    pub(super) poll_ir: f64,
    pub(super) provider: f64,
}

impl PerOp {
    /// The n-difference of runs `a` (n1 operations) and `b` (n2).
    pub(super) fn between(a: Counts, n1: u32, b: Counts, n2: u32) -> PerOp {
        let d = f64::from(n2) - f64::from(n1);
        let per = |x: u64, y: u64| (y as f64 - x as f64) / d;
        PerOp {
            ir: per(a.ir, b.ir),
            polls: per(a.polls, b.polls),
            poll_ir: per(a.poll_ir, b.poll_ir),
            provider: per(a.provider, b.provider),
        }
    }

    /// The provider's instructions per operation less its poll function's:
    /// the floor under Ir/op w/o polls.
    pub(super) fn floor(&self) -> f64 {
        self.provider - self.poll_ir
    }

    /// Ir/op without its polls at `poll_cost` each (loop included), or
    /// without the provider function's instructions when that is unknown.
    pub(super) fn without_polls(&self, poll_cost: Option<f64>) -> f64 {
        match poll_cost {
            Some(c) => self.ir - c * self.polls,
            None => self.ir - self.poll_ir,
        }
    }
}

/// `(polls_b - polls_a, Ir_b - Ir_a)` of two runs of the same n; `None`
/// when they polled nearly as often (under 100 polls or 5% apart: the
/// pair says nothing about a poll's cost).
pub(super) fn poll_pair(a: Counts, b: Counts) -> Option<(f64, f64)> {
    let dp = b.polls as f64 - a.polls as f64;
    let enough = dp.abs() >= 100.0 && dp.abs() >= 0.05 * a.polls.max(b.polls) as f64;
    enough.then_some((dp, b.ir as f64 - a.ir as f64))
}

/// The least-squares cost of one more poll over `pairs` (a line through
/// the origin: same work, different polls); `None` without pairs.
pub(super) fn fit_poll_cost<'a>(pairs: impl IntoIterator<Item = &'a (f64, f64)>) -> Option<f64> {
    let (sxy, sxx) = pairs.into_iter().fold((0.0, 0.0), |(xy, xx), &(dp, di)| {
        (xy + dp * di, xx + dp * dp)
    });
    (sxx > 0.0).then(|| sxy / sxx)
}

/// One tool's side of a test: every measurement's figures.
#[derive(Debug, Default)]
pub(super) struct SideFigures {
    /// One entry per measurement that had both runs.
    pub(super) per_op: Vec<PerOp>,
    /// Measurements missing a run or a file.
    pub(super) failed: usize,
    /// [`poll_pair`] of every pair of same-n runs where it exists.
    pub(super) pairs: Vec<(f64, f64)>,
    /// Ir/poll used for this side (see the module docs).
    pub(super) poll_cost: Option<f64>,
    /// Whether `poll_cost` came from this test's own pairs.
    pub(super) poll_cost_own: bool,
}

impl SideFigures {
    /// Every measurement's Ir/op w/o polls.
    pub(super) fn without_polls(&self) -> Vec<f64> {
        self.per_op
            .iter()
            .map(|p| p.without_polls(self.poll_cost))
            .collect()
    }

    /// Every measurement's provider floor ([`PerOp::floor`]).
    pub(super) fn floor(&self) -> Vec<f64> {
        self.per_op.iter().map(PerOp::floor).collect()
    }

    /// Every measurement's Ir/op w/o polls over its floor.
    pub(super) fn over(&self) -> Vec<f64> {
        self.per_op
            .iter()
            .map(|p| p.without_polls(self.poll_cost) - p.floor())
            .collect()
    }
}

/// A test at a size: both tools, both sides.
#[derive(Debug)]
pub(super) struct InstructionRow {
    pub(super) test: Test,
    pub(super) size: u64,
    /// n1 and n2, per queue pair.
    pub(super) n: (u32, u32),
    /// `[client, server]` of perftest and of ours.
    pub(super) perftest: [SideFigures; 2],
    pub(super) ours: [SideFigures; 2],
}

/// The sides, in the order of [`InstructionRow`]'s arrays.
pub(super) const SIDES: [&str; 2] = ["client", "server"];

/// Everything `--instructions` measured, and how.
#[derive(Debug)]
pub(super) struct Instructions {
    pub(super) rows: Vec<InstructionRow>,
    /// The provider's poll function as callgrind names it (`None`: no
    /// file of ours showed it, and no poll is counted).
    pub(super) poll_fn: Option<(String, String)>,
    /// Files that could not be read or parsed, with why.
    pub(super) problems: Vec<String>,
}

/// Reads every run's files under `raw` and computes the figures; `shim`
/// is the line of the `ibv_poll_cq` shim's call in [`SHIM_FILE`].
pub(super) fn collect(a: &Settings, runs: &[CgRun], raw: &Path, shim: Option<u64>) -> Instructions {
    let mut problems = Vec::new();
    // Every run's two profiles, parsed once.
    let profiles: Vec<[Option<Profile>; 2]> = runs
        .iter()
        .map(|r| {
            SIDES.map(|side| {
                let path = raw.join(format!("{}.{side}.cg", r.stem()));
                match fs::read_to_string(&path) {
                    Ok(text) => callgrind::parse(&text)
                        .map_err(|e| problems.push(format!("{}: {e}", path.display())))
                        .ok(),
                    Err(e) => {
                        problems.push(format!("{}: {e}", path.display()));
                        None
                    }
                }
            })
        })
        .collect();
    let poll_fn = shim.and_then(|line| {
        profiles
            .iter()
            .flatten()
            .flatten()
            .find_map(|p| p.callee_at(SHIM_FILE, line))
            .map(|(o, f)| (o.to_string(), f.to_string()))
    });
    let poll = poll_fn.as_ref().map(|(o, f)| (o.as_str(), f.as_str()));
    let mut rows = Vec::new();
    for &test in &a.tests {
        let Some(iters) = a.instructions else { break };
        let n = iters.of(test);
        // Operations per run: `-n` on each queue pair.
        let ops = (n.0 * test.qps, n.1 * test.qps);
        for size in a.sizes_of(test) {
            let side = |tool: Tool, s: usize| {
                let at = |rep: usize, count: u32| -> Option<Counts> {
                    let k = runs.iter().position(|r| {
                        r.test.name == test.name
                            && r.size == size
                            && r.tool == tool
                            && r.rep == rep
                            && r.n == count
                    })?;
                    profiles[k][s].as_ref().map(|p| counts(tool, p, poll))
                };
                let mut f = SideFigures::default();
                for rep in 1..=a.reps {
                    match (at(rep, n.0), at(rep, n.1)) {
                        (Some(x), Some(y)) => f.per_op.push(PerOp::between(x, ops.0, y, ops.1)),
                        _ => f.failed += 1,
                    }
                }
                for count in [n.0, n.1] {
                    let all: Vec<Counts> = (1..=a.reps).filter_map(|rep| at(rep, count)).collect();
                    for (i, x) in all.iter().enumerate() {
                        for y in &all[i + 1..] {
                            f.pairs.extend(poll_pair(*x, *y));
                        }
                    }
                }
                f
            };
            rows.push(InstructionRow {
                test,
                size,
                n,
                perftest: [side(Tool::Perftest, 0), side(Tool::Perftest, 1)],
                ours: [side(Tool::Ours, 0), side(Tool::Ours, 1)],
            });
        }
    }
    set_poll_costs(&mut rows);
    Instructions {
        rows,
        poll_fn,
        problems,
    }
}

/// Sets every side's Ir/poll: its test's (both sides' pairs of the tool),
/// else the tool's over all tests.
fn set_poll_costs(rows: &mut [InstructionRow]) {
    fn of(r: &mut InstructionRow, tool: Tool) -> &mut [SideFigures; 2] {
        match tool {
            Tool::Perftest => &mut r.perftest,
            Tool::Ours => &mut r.ours,
            Tool::Tcp => unreachable!("--instructions counts no stream row"),
        }
    }
    for tool in [Tool::Perftest, Tool::Ours] {
        let all: Vec<(f64, f64)> = rows
            .iter_mut()
            .flat_map(|r| {
                of(r, tool)
                    .iter()
                    .flat_map(|s| s.pairs.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        let global = fit_poll_cost(&all);
        for r in rows.iter_mut() {
            let s = of(r, tool);
            let own = fit_poll_cost(s[0].pairs.iter().chain(&s[1].pairs));
            for side in s.iter_mut() {
                side.poll_cost = own.or(global);
                side.poll_cost_own = own.is_some();
            }
        }
    }
}

/// The mean of `v`; `None` for none.
pub(super) fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The spread of `v`: (max - min) / |mean|, in percent; `None` for fewer
/// than two values or a mean near 0.
pub(super) fn spread_pct(v: &[f64]) -> Option<f64> {
    let m = mean(v)?;
    if v.len() < 2 || m.abs() < 1.0 {
        return None;
    }
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
            (l.min(x), h.max(x))
        });
    Some((hi - lo) / m.abs() * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(pairs: Vec<(f64, f64)>) -> SideFigures {
        SideFigures {
            pairs,
            ..SideFigures::default()
        }
    }

    #[test]
    fn a_test_without_pairs_borrows_the_tools_poll_cost() {
        let t = super::super::suite::TESTS;
        let row = |test, ours: Vec<(f64, f64)>| InstructionRow {
            test,
            size: 64,
            n: (1, 2),
            perftest: [side(vec![]), side(vec![])],
            ours: [side(ours), side(vec![(100.0, 20_000.0)])],
        };
        let mut rows = [row(t[0], vec![(100.0, 10_000.0)]), row(t[3], vec![])];
        set_poll_costs(&mut rows);
        let c = rows[0].ours[0].poll_cost.unwrap();
        assert!((c - 150.0).abs() < 1e-9, "both sides' pairs: {c}");
        assert!(rows[0].ours[1].poll_cost_own);
        // The second test's only pair is its server's: its own.
        assert_eq!(rows[1].ours[0].poll_cost, Some(200.0));
        assert_eq!(rows[0].perftest[0].poll_cost, None, "no pair anywhere");
    }

    #[test]
    fn per_operation_figures_are_n_differences() {
        let a = Counts {
            ir: 1_000_000,
            polls: 5_000,
            poll_ir: 200_000,
            provider: 500_000,
        };
        let b = Counts {
            ir: 3_000_000,
            polls: 15_000,
            poll_ir: 600_000,
            provider: 1_300_000,
        };
        let p = PerOp::between(a, 1000, b, 3000);
        assert_eq!((p.ir, p.polls, p.poll_ir), (1000.0, 5.0, 200.0));
        assert_eq!(p.without_polls(None), 800.0, "less the provider's");
        assert_eq!(p.without_polls(Some(50.0)), 750.0, "less 5 polls at 50");
        // 400 in the provider, 200 of them polling.
        assert_eq!((p.provider, p.floor()), (400.0, 200.0));
        let f = SideFigures {
            per_op: vec![p],
            poll_cost: Some(50.0),
            ..SideFigures::default()
        };
        assert_eq!((f.floor(), f.over()), (vec![200.0], vec![550.0]));
        // A set-up of any size cancels.
        let more = |c: Counts| Counts {
            ir: c.ir + 777_777,
            ..c
        };
        assert_eq!(PerOp::between(more(a), 1000, more(b), 3000), p);
    }

    #[test]
    fn loop_cost_per_poll_needs_clearly_different_poll_counts() {
        let a = Counts {
            ir: 1_000_000,
            polls: 10_000,
            ..Counts::default()
        };
        let b = Counts {
            ir: 1_060_000,
            polls: 11_000,
            ..Counts::default()
        };
        assert_eq!(poll_pair(a, b), Some((1000.0, 60_000.0)));
        assert_eq!(poll_pair(b, a), Some((-1000.0, -60_000.0)));
        let close = Counts { polls: 10_050, ..b };
        assert_eq!(poll_pair(a, close), None, "0.5% apart");
        // The slope through the origin, weighted by the poll difference.
        let c = fit_poll_cost(&[(1000.0, 60_000.0), (-3000.0, -150_000.0)]).unwrap();
        assert!((c - 51.0).abs() < 1e-9, "{c}");
        assert_eq!(fit_poll_cost(&[]), None);
    }

    #[test]
    fn means_and_spreads() {
        assert_eq!(mean(&[1.0, 3.0]), Some(2.0));
        assert_eq!(mean(&[]), None);
        assert_eq!(spread_pct(&[990.0, 1010.0]), Some(2.0));
        assert_eq!(spread_pct(&[5.0]), None);
        assert_eq!(spread_pct(&[0.1, -0.1]), None, "a mean near 0");
    }
}
