//! What a bench run does, decided from its command line ([`Settings`]):
//! the tests, sizes, repetitions, iterations per run and inline data.

use std::path::PathBuf;

use super::options::Args;
use super::suite::Test;
use crate::rxe::{RunOptions, Want};
use crate::Result;

/// Bandwidth tests keep this many operations in flight (both tools).
pub(super) const TX_DEPTH: u32 = 128;
/// A run moves at most this many bytes: large sizes get fewer iterations
/// (both tools alike), so that a bench stays minutes long under emulation.
pub(super) const MAX_RUN_BYTES: u64 = 64 << 20;

/// Operations per bandwidth run and per latency run without `--iters`:
/// long enough that a bandwidth run measures the steady state, not its
/// start-up.
const ITERS: (u32, u32) = (20000, 5000);

/// Iterations of a run at `size`: `--iters`, capped by [`MAX_RUN_BYTES`],
/// never below perftest's minimum of 5.
fn iters_for(iters: u32, size: u64) -> u32 {
    let cap = (MAX_RUN_BYTES / size.max(1)).max(5);
    u64::from(iters).min(cap) as u32
}

/// What the command line asked for.
#[derive(Debug)]
pub(super) struct Settings {
    pub(super) run: RunOptions,
    pub(super) reps: usize,
    /// Operations per bandwidth run and per latency run (before the cap).
    pub(super) bw_iters: u32,
    pub(super) lat_iters: u32,
    pub(super) sizes: Vec<u64>,
    pub(super) tests: Vec<Test>,
    pub(super) inline: Option<u32>,
    pub(super) no_setup: bool,
    /// `--async`: the selected tests are replaced by their async variants.
    pub(super) asynchronous: bool,
    /// `--cm`: the selected tests are replaced by their rdma_cm variants.
    pub(super) cm: bool,
    /// `--hosts`: 1 (one rxe device talking to itself) or 2 (across a link).
    pub(super) hosts: usize,
    /// `--delay`: netem delay (ms) on both hosts' link NIC.
    pub(super) delay_ms: Option<u32>,
    /// `--plot-only`: draw the SVGs of this report and run nothing.
    pub(super) plot_only: Option<PathBuf>,
    /// `--instructions`: callgrind runs instead of the timing runs, at
    /// these two operation counts per bandwidth and per latency run.
    pub(super) instructions: Option<InstructionIters>,
    /// `--instructions-from`: read an earlier `--instructions` run's raw
    /// directory instead of running.
    pub(super) instructions_from: Option<PathBuf>,
}

/// The two operation counts of `--instructions` (n1 < n2): instructions
/// per operation are `(Ir(n2) - Ir(n1)) / (n2 - n1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct InstructionIters {
    pub(super) bw: (u32, u32),
    pub(super) lat: (u32, u32),
}

impl InstructionIters {
    /// Under valgrind (and the VM's emulation) a run is 50-100x slower:
    /// counts small enough that the default tests take minutes, large
    /// enough that n2 - n1 operations dwarf the counts' noise. `--iters N`
    /// sets n1 = N and n2 = 3N for both kinds.
    fn new(iters: Option<u32>) -> Self {
        match iters {
            Some(n) => InstructionIters {
                bw: (n, 3 * n),
                lat: (n, 3 * n),
            },
            None => InstructionIters {
                bw: (2000, 6000),
                lat: (1000, 3000),
            },
        }
    }

    /// `(n1, n2)` of `test`.
    pub(super) fn of(self, test: Test) -> (u32, u32) {
        if test.bw {
            self.bw
        } else {
            self.lat
        }
    }
}

impl Settings {
    /// What `args` ask for; an error for a combination that cannot run.
    pub(super) fn new(c: Args) -> Result<Settings> {
        let (bw_iters, lat_iters) = c.iters.map_or(ITERS, |n| (n, n));
        let instructions = (c.instructions || c.instructions_from.is_some())
            .then(|| InstructionIters::new(c.iters));
        let mut a = Settings {
            run: c.run.options(Want::Auto),
            reps: c.reps,
            bw_iters,
            lat_iters,
            sizes: c.sizes,
            tests: c.tests,
            inline: c.inline,
            no_setup: c.no_setup,
            asynchronous: c.asynchronous,
            cm: c.cm,
            hosts: c.hosts,
            delay_ms: c.delay,
            plot_only: c.plot_only,
            instructions,
            instructions_from: c.instructions_from,
        };
        if a.instructions.is_some() {
            // rstream has no loop to count apart from its set-up.
            a.tests.retain(|t| !t.stream);
            if a.tests.is_empty() {
                return Err("bench: --instructions: the stream rows are not counted".into());
            }
        }
        if a.instructions.is_some() && a.hosts != 1 {
            return Err("bench: --instructions runs on one host (--hosts 1)".into());
        }
        if a.delay_ms.is_some() && a.hosts != 2 {
            return Err(
                "bench: --delay needs --hosts 2 (one host's rxe talks to itself: no link to delay)"
                    .into(),
            );
        }
        if a.asynchronous {
            a.tests = a
                .tests
                .iter()
                .filter_map(|t| {
                    if t.asynchronous {
                        Some(*t)
                    } else {
                        t.async_variant()
                    }
                })
                .collect();
            if a.tests.is_empty() {
                return Err(
                    "bench: --async: none of the selected tests has an async variant".into(),
                );
            }
        }
        if a.cm {
            a.tests = a
                .tests
                .iter()
                .filter_map(|t| if t.cm { Some(*t) } else { t.cm_variant() })
                .collect();
            if a.tests.is_empty() {
                return Err(
                    "bench: --cm: none of the selected tests has an rdma_cm variant".into(),
                );
            }
        }
        Ok(a)
    }

    /// Operations of a run of `test` at `size` (both tools alike).
    pub(super) fn iters(&self, test: Test, size: u64) -> u32 {
        let n = if test.bw {
            self.bw_iters
        } else {
            self.lat_iters
        };
        iters_for(n, size)
    }

    /// The sizes `test` runs: its fixed size, or `--sizes`.
    pub(super) fn sizes_of(&self, test: Test) -> Vec<u64> {
        match test.fixed_size {
            Some(size) => vec![size],
            None => self.sizes.clone(),
        }
    }

    /// The iterations per run, in words.
    pub(super) fn iters_text(&self) -> String {
        format!(
            "{} iterations per bandwidth run, {} per latency run",
            self.bw_iters, self.lat_iters
        )
    }
}

/// The settings of `cargo xtask bench <words>`, for the tests.
#[cfg(test)]
pub(super) fn parse(words: &[&str]) -> Result<Settings> {
    match crate::cli::try_parse(&[&["bench"], words].concat())? {
        crate::cli::Task::Bench(a) => Settings::new(a),
        other => panic!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_sizes_get_fewer_iterations() {
        assert_eq!(iters_for(2000, 64), 2000);
        assert_eq!(iters_for(2000, 4096), 2000);
        assert_eq!(iters_for(2000, 65536), 1024);
        assert_eq!(iters_for(2000, 1 << 20), 64);
        assert_eq!(
            iters_for(2000, 64 << 20),
            5,
            "never below perftest's minimum"
        );
        assert_eq!(iters_for(10, 1 << 20), 10);
    }

    #[test]
    fn async_selects_the_async_rows() {
        let a = parse(&["--tests", "write_bw,send_lat,atomic_bw", "--async"]).unwrap();
        let names: Vec<_> = a.tests.iter().map(|t| t.name).collect();
        assert_eq!(names, ["write_bw_async", "send_lat_async"]);
        assert_eq!(a.tests[0].perf_name(), "write_bw");
        let a = parse(&[]).unwrap();
        assert!(a.tests.iter().all(|t| !t.asynchronous));
        assert!(parse(&["--tests", "atomic_lat", "--async"]).is_err());
    }

    #[test]
    fn atomic_tests_run_eight_bytes_whatever_the_sizes() {
        let a = parse(&["--tests", "atomic_bw,write_bw", "--sizes", "64,4K"]).unwrap();
        assert_eq!(a.sizes_of(a.tests[0]), [8]);
        assert_eq!(a.sizes_of(a.tests[1]), [64, 4096]);
    }

    #[test]
    fn cm_selects_the_cm_rows() {
        let a = parse(&["--tests", "write_bw,send_lat,atomic_bw", "--cm"]).unwrap();
        let names: Vec<_> = a.tests.iter().map(|t| t.name).collect();
        assert_eq!(names, ["write_bw_cm", "send_lat_cm", "atomic_bw_cm"]);
        assert_eq!(a.tests[1].perf_name(), "send_lat");
        let a = parse(&[]).unwrap();
        assert!(a.tests.iter().all(|t| !t.cm));
    }

    #[test]
    fn hosts_and_delay() {
        let a = parse(&["--hosts", "2", "--delay", "5"]).unwrap();
        assert_eq!((a.hosts, a.delay_ms), (2, Some(5)));
        assert_eq!(parse(&[]).unwrap().hosts, 1);
        assert!(parse(&["--delay", "5"]).is_err(), "a delay needs a link");
    }

    #[test]
    fn iterations_per_kind() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.reps, a.bw_iters, a.lat_iters), (3, 20000, 5000));
        let a = parse(&["--iters", "100", "--inline", "0", "--no-setup"]).unwrap();
        assert_eq!((a.bw_iters, a.lat_iters), (100, 100));
        assert_eq!((a.inline, a.no_setup), (Some(0), true));
    }

    #[test]
    fn plot_only_names_a_report() {
        let a = parse(&["--plot-only", "target/bench.json"]).unwrap();
        assert_eq!(
            a.plot_only.as_deref(),
            Some(std::path::Path::new("target/bench.json"))
        );
        assert_eq!(parse(&[]).unwrap().plot_only, None);
    }

    #[test]
    fn instructions_replace_the_timing_runs_with_two_counts() {
        let a = parse(&["--instructions"]).unwrap();
        let i = a.instructions.expect("asked for");
        assert_eq!((i.bw, i.lat), ((2000, 6000), (1000, 3000)));
        assert_eq!((a.reps, a.sizes.as_slice()), (2, &[64][..]));
        assert_eq!(i.of(a.tests[0]), (2000, 6000), "write_bw");
        assert_eq!(i.of(a.tests[3]), (1000, 3000), "write_lat");
        let a = parse(&["--instructions", "--iters", "500", "--reps", "3"]).unwrap();
        let i = a.instructions.unwrap();
        assert_eq!((i.bw, i.lat, a.reps), ((500, 1500), (500, 1500), 3));
        assert!(parse(&["--instructions", "--hosts", "2"]).is_err());
        assert_eq!(parse(&[]).unwrap().instructions, None);
        let a = parse(&["--instructions-from", "x/raw"]).unwrap();
        assert!(a.instructions.is_some() && a.instructions_from.is_some());
        // The stream rows are timed only.
        assert!(a.tests.iter().all(|t| !t.stream));
        assert!(parse(&[]).unwrap().tests.iter().any(|t| t.stream));
        assert!(parse(&["--instructions", "--tests", "stream_bw,stream_lat"]).is_err());
    }
}
