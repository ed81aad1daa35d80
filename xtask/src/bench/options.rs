//! The command line of `cargo xtask bench` and what it decides: tests,
//! sizes, repetitions, iterations per run, inline data.

use std::path::PathBuf;
use std::time::Duration;

use super::suite::{Test, TESTS};
use crate::cli;
use crate::rxe::{RunArgs, RunOptions};
use crate::Result;

/// Bandwidth tests keep this many operations in flight (both tools).
pub(super) const TX_DEPTH: u32 = 128;
/// A run moves at most this many bytes: large sizes get fewer iterations
/// (both tools alike), so that a bench stays minutes long under emulation.
pub(super) const MAX_RUN_BYTES: u64 = 64 << 20;

/// Iterations of a run at `size`: `--iters`, capped by [`MAX_RUN_BYTES`],
/// never below perftest's minimum of 5.
fn iters_for(iters: u32, size: u64) -> u32 {
    let cap = (MAX_RUN_BYTES / size.max(1)).max(5);
    u64::from(iters).min(cap) as u32
}

/// What the command line asked for.
#[derive(Debug)]
pub(super) struct Args {
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

impl Args {
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

/// What the task does, printed by `--help` above the options.
const ABOUT: &str = "\
Runs perftest (ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat,
ib_send_lat, ib_atomic_bw, ib_atomic_lat) and our perf (write_bw, read_bw,
send_bw, write_lat, send_lat, atomic_bw, atomic_lat) on rxe0 in one boot, server and client on 127.0.0.1, with identical sizes,
iterations and tx depth (128 for bandwidth), alternating perftest and ours,
and prints the medians: bandwidth as average MB/sec (higher is better),
latency as t_typical usec (lower is better), the ratio ours/perftest, in
how many repetitions ours beat the perftest run beside it (a sign test that
tells a real gap from run-to-run noise), and whether the target is met
(bandwidth ratio >= 1.00, latency <= 1.05). Writes the table to
target/bench.json and one SVG plot per test beside it
(target/bench-<test>.svg: every run and the medians of both tools
against the message size); raw outputs stay in
target/xtask/bench/<pid>/out/raw/. Exits non-zero if any run failed; a
perftest run that prints `inf` (its clock conversion failing in the guest)
is reported and left out of the medians instead.";

/// bench's whole-run limit, a hang guard only (each step is bounded by
/// `--step-timeout`): by default 5 tests x 4 sizes x 3 repetitions x 2
/// tools = 120 server/client runs, and the 14-row instruction table is
/// 112 callgrind steps, 37-67 minutes on an idle 2-core machine under
/// emulation. An hour killed that table two thirds of the way through
/// with a test-rxe run beside it.
const TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// The command line as clap reads it; [`parse`] turns it into [`Args`].
/// The fields' doc comments are `--help`'s text, written for a terminal.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, clap::Parser)]
#[command(
    about = ABOUT,
    after_help = crate::rxe::ENV_HELP,
    help_template = cli::TEMPLATE,
    disable_help_flag = true,
    args_override_self = true,
    // The runner's help names its own default; bench's is [`TIMEOUT`].
    mut_arg("timeout", |a| a.help("kill the whole run after SECS (default 14400)")),
)]
struct Cli {
    /// repetitions of every test and size (default 3)
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = reps)]
    reps: Option<usize>,
    /// operations per run (default 20000 for bandwidth, 5000
    /// for latency; perftest needs >= 5), capped so that a
    /// run moves at most 64 MiB (64 KiB: 1024, 1 MiB: 64)
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = iters, verbatim_doc_comment)]
    iters: Option<u32>,
    /// message sizes in bytes, K/M suffixes allowed
    /// (default 64,4K,64K,1M); the atomic tests always
    /// run 8 bytes (fetch-and-add) and ignore --sizes
    // `::std::vec::Vec`, not `Vec`: one value (the whole list) for clap,
    // which would otherwise take a list option's values one at a time.
    #[arg(long, allow_hyphen_values = true, value_name = "A,B,...", value_parser = sizes, verbatim_doc_comment)]
    sizes: Option<::std::vec::Vec<u64>>,
    /// only these tests (default write_bw,read_bw,send_bw,
    /// write_lat,send_lat,atomic_bw,atomic_lat); a
    /// name ending in _async (write_bw_async, read_bw_async,
    /// send_bw_async, write_lat_async, send_lat_async)
    /// runs ours with perf --async against the same
    /// perftest program; write_bw_q4, write_bw_q16,
    /// read_bw_q4 (-q N: N queue pairs share the
    /// run's iterations), write_bw_bidi, send_bw_bidi
    /// (-b: both directions, each tool reports the sum)
    /// run both tools with those flags; write_bw_q4_t2,
    /// write_bw_q4_t4 drive our client's 4 queue
    /// pairs from 2 or 4 threads (perftest: one)
    #[arg(long, allow_hyphen_values = true, value_name = "T,...", value_parser = tests, verbatim_doc_comment)]
    tests: Option<::std::vec::Vec<Test>>,
    /// run the async variant of every selected test that
    /// has one (rows named <test>_async); the others are
    /// left out
    #[arg(long = "async", verbatim_doc_comment)]
    asynchronous: bool,
    /// run every selected test that has an rdma_cm variant
    /// (write_bw, read_bw, send_bw, write_lat, send_lat,
    /// atomic_bw, atomic_lat)
    /// with -R on both tools instead (rows named <test>_cm,
    /// e.g. write_bw_cm): each pair connects through the
    /// RDMA connection manager to the device's address
    /// ($RXE_IPV4), and the table adds the set-up time of
    /// the data connection: ours from perf's `rdma_cm
    /// set-up` line (resolve -> established), perftest's
    /// from the times its client printed `Data ex. method`
    /// and its `local address` line (that span also holds
    /// two control-channel handshakes, so it is an upper
    /// bound); both are medians in ms
    #[arg(long, verbatim_doc_comment)]
    cm: bool,
    /// pass -I N to both tools in the write and send tests
    /// (reads carry no inline data; default: each tool's
    /// own; perftest turns inline off on devices it does
    /// not recognise, rxe among them, while our perf inlines
    /// up to 220/236 B in write/send latency tests):
    /// --inline 0 compares without inline data on both sides
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = inline, verbatim_doc_comment)]
    inline: Option<u32>,
    /// 1 (default): server and client on one host's rxe0
    /// (127.0.0.1); 2: across two hosts (two VMs joined by
    /// a virtual link, as test-rxe's two-host tier): every
    /// server on host A, every client on host B, so each
    /// byte crosses the link
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = hosts, verbatim_doc_comment)]
    hosts: Option<usize>,
    /// with --hosts 2: add MS ms of delay on both hosts'
    /// link (netem; a round trip gains 2 x MS): a
    /// bandwidth-delay product that needs the deep queue
    /// (tx depth 128) to fill
    #[arg(long, allow_hyphen_values = true, value_name = "MS", value_parser = delay, verbatim_doc_comment)]
    delay: Option<u32>,
    /// do not check/install prerequisites first
    #[arg(long)]
    no_setup: bool,
    /// run nothing: draw the SVG plots of the report PATH
    /// (a bench.json) again, beside it as <stem>-<test>.svg
    #[arg(long, value_name = "PATH", verbatim_doc_comment)]
    plot_only: Option<PathBuf>,
    /// instead of the timing runs: user-space instructions
    /// per operation of both tools, client and server, under
    /// valgrind's callgrind, from runs of n1 and n2
    /// operations (default 2000/6000 bandwidth, 1000/3000
    /// latency; --iters N: N/3N), --reps measurements
    /// (default 2), --sizes default 64; ours counts inside
    /// its measured loops only, perftest (stripped) the
    /// whole program; the provider's completion polls are
    /// counted apart; printed and added to bench.json as
    /// `instructions` (its timing results are kept); the
    /// callgrind files stay in target/xtask/bench-instructions/
    /// <pid>/out/raw/ until the next --instructions run
    #[arg(long, verbatim_doc_comment)]
    instructions: bool,
    /// run nothing: compute the --instructions table and
    /// bench.json member again from the callgrind files in
    /// DIR (an earlier run's raw/), given the same --tests,
    /// --sizes, --iters and --reps as that run
    #[arg(long, value_name = "DIR", verbatim_doc_comment)]
    instructions_from: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    help: cli::HelpFlag,
}

/// A message size: bytes, with an optional K or M suffix; 1 B to 8 MiB.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .map(|n| n * mul)
        .filter(|&n| n > 0 && n <= 8 << 20)
}

/// `--sizes`: comma-separated [`parse_size`] sizes.
fn sizes(v: &str) -> Result<Vec<u64>, String> {
    v.split(',')
        .map(|s| parse_size(s).ok_or_else(|| format!("bad size `{s}`")))
        .collect()
}

/// `--tests`: comma-separated names from [`TESTS`].
fn tests(v: &str) -> Result<Vec<Test>, String> {
    v.split(',')
        .map(|s| {
            TESTS
                .iter()
                .copied()
                .find(|t| t.name == s.trim())
                .ok_or_else(|| format!("unknown test `{s}`"))
        })
        .collect()
}

/// A number `s` parses to if `ok` accepts it, else `why`.
fn number<T: std::str::FromStr>(s: &str, ok: impl Fn(&T) -> bool, why: &str) -> Result<T, String> {
    s.parse().ok().filter(ok).ok_or_else(|| why.to_string())
}

/// `--reps`: a positive number.
fn reps(s: &str) -> Result<usize, String> {
    number(s, |&n| n > 0, "needs a positive number")
}

/// `--iters`: at least perftest's minimum of 5.
fn iters(s: &str) -> Result<u32, String> {
    number(s, |&n| n >= 5, "needs a number >= 5 (perftest's minimum)")
}

/// `--inline`: bytes, at most 4096.
fn inline(s: &str) -> Result<u32, String> {
    number(s, |&n| n <= 4096, "needs a number of bytes (0..=4096)")
}

/// `--hosts`: 1 or 2.
fn hosts(s: &str) -> Result<usize, String> {
    number(s, |n| (1..=2).contains(n), "needs 1 or 2")
}

/// `--delay`: milliseconds, at most 1000.
fn delay(s: &str) -> Result<u32, String> {
    number(s, |&n| n <= 1000, "needs milliseconds (0..=1000)")
}

/// Parses the command line; `None` when it asked for `--help` (printed).
pub(super) fn parse(args: &[String]) -> Result<Option<Args>> {
    let Some(c) = cli::parse::<Cli>("bench", args)? else {
        return Ok(None);
    };
    let run = c.run.options(RunOptions {
        timeout: TIMEOUT,
        ..RunOptions::default()
    });
    // Long enough that a bandwidth run measures the steady state, not its
    // start-up.
    let (bw_iters, lat_iters) = c.iters.map_or((20000, 5000), |n| (n, n));
    let instructions =
        (c.instructions || c.instructions_from.is_some()).then(|| InstructionIters::new(c.iters));
    let mut a = Args {
        run,
        reps: c.reps.unwrap_or(if instructions.is_some() { 2 } else { 3 }),
        bw_iters,
        lat_iters,
        sizes: c.sizes.unwrap_or_else(|| {
            if instructions.is_some() {
                vec![64]
            } else {
                vec![64, 4096, 65536, 1 << 20]
            }
        }),
        tests: c.tests.unwrap_or_else(|| {
            TESTS
                .iter()
                .copied()
                .filter(|t| !t.asynchronous && !t.cm)
                .collect()
        }),
        inline: c.inline,
        no_setup: c.no_setup,
        asynchronous: c.asynchronous,
        cm: c.cm,
        hosts: c.hosts.unwrap_or(1),
        delay_ms: c.delay,
        plot_only: c.plot_only,
        instructions,
        instructions_from: c.instructions_from,
    };
    if a.instructions.is_some() && a.hosts != 1 {
        return Err("bench: --instructions runs on one host (--hosts 1)".into());
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
            return Err("bench: --async: none of the selected tests has an async variant".into());
        }
    }
    if a.delay_ms.is_some() && a.hosts != 2 {
        return Err(
            "bench: --delay needs --hosts 2 (one host's rxe talks to itself: no link to delay)"
                .into(),
        );
    }
    if a.cm {
        if a.asynchronous {
            return Err(
                "bench: --cm and --async do not combine (perf -R has no async path)".into(),
            );
        }
        a.tests = a
            .tests
            .iter()
            .filter_map(|t| if t.cm { Some(*t) } else { t.cm_variant() })
            .collect();
        if a.tests.is_empty() {
            return Err("bench: --cm: none of the selected tests has an rdma_cm variant".into());
        }
    }
    Ok(Some(a))
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
        let v = crate::cli::words;
        let a = parse(&v(&["--tests", "write_bw,send_lat,atomic_bw", "--async"]))
            .unwrap()
            .unwrap();
        let names: Vec<_> = a.tests.iter().map(|t| t.name).collect();
        assert_eq!(names, ["write_bw_async", "send_lat_async"]);
        assert_eq!(a.tests[0].perf_name(), "write_bw");
        let a = parse(&v(&[])).unwrap().unwrap();
        assert!(a.tests.iter().all(|t| !t.asynchronous));
        assert!(parse(&v(&["--tests", "atomic_lat", "--async"])).is_err());
    }

    #[test]
    fn atomic_tests_run_eight_bytes_whatever_the_sizes() {
        let v = crate::cli::words;
        let a = parse(&v(&["--tests", "atomic_bw,write_bw", "--sizes", "64,4K"]))
            .unwrap()
            .unwrap();
        assert_eq!(a.sizes_of(a.tests[0]), [8]);
        assert_eq!(a.sizes_of(a.tests[1]), [64, 4096]);
    }

    #[test]
    fn cm_selects_the_cm_rows() {
        let v = crate::cli::words;
        let a = parse(&v(&["--tests", "write_bw,send_lat,atomic_bw", "--cm"]))
            .unwrap()
            .unwrap();
        let names: Vec<_> = a.tests.iter().map(|t| t.name).collect();
        assert_eq!(names, ["write_bw_cm", "send_lat_cm", "atomic_bw_cm"]);
        assert_eq!(a.tests[1].perf_name(), "send_lat");
        assert!(parse(&v(&["--cm", "--async"])).is_err());
    }

    #[test]
    fn hosts_and_delay() {
        let v = crate::cli::words;
        let a = parse(&v(&["--hosts", "2", "--delay", "5"]))
            .unwrap()
            .unwrap();
        assert_eq!((a.hosts, a.delay_ms), (2, Some(5)));
        assert_eq!(parse(&[]).unwrap().unwrap().hosts, 1);
        assert!(parse(&v(&["--hosts", "3"])).is_err());
        assert!(
            parse(&v(&["--delay", "5"])).is_err(),
            "a delay needs a link"
        );
        let a = parse(&v(&[])).unwrap().unwrap();
        assert!(a.tests.iter().all(|t| !t.cm));
    }

    use crate::cli::words as v;

    #[test]
    fn help_is_printed_not_parsed() {
        assert!(parse(&v(&["--help"])).unwrap().is_none());
        assert!(parse(&v(&["--reps", "2", "-h"])).unwrap().is_none());
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        for option in [
            "--reps <N>",
            "--sizes <A,B,...>",
            "--cm",
            "--delay <MS>",
            "--plot-only <PATH>",
            "--instructions",
            "--vm",
        ] {
            assert!(help.contains(option), "{option} in {help}");
        }
        assert!(help.contains("after SECS (default 14400)"), "{help}");
        assert!(help.contains("XTASK_VM_KERNEL"), "{help}");
    }

    #[test]
    fn mistakes_name_the_task_and_the_option() {
        let e = parse(&v(&["--bogus"])).unwrap_err().to_string();
        assert!(e.starts_with("bench: ") && e.contains("--bogus"), "{e}");
        let e = parse(&v(&["--timeout", "soon"])).unwrap_err().to_string();
        assert!(e.contains("--timeout") && e.contains("seconds"), "{e}");
        assert!(parse(&v(&["--timeout"])).is_err());
        let e = parse(&v(&["--reps", "0"])).unwrap_err().to_string();
        assert!(e.contains("--reps") && e.contains("positive"), "{e}");
        assert!(parse(&v(&["--iters", "4"])).is_err());
        assert!(parse(&v(&["--inline", "4097"])).is_err());
        assert!(parse(&v(&["--hosts", "2", "--delay", "1001"])).is_err());
        let e = parse(&v(&["--sizes", "64,,4K"])).unwrap_err().to_string();
        assert!(e.contains("bad size ``"), "{e}");
        let e = parse(&v(&["--tests", "write_bw,nope"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown test `nope`"), "{e}");
    }

    #[test]
    fn defaults_and_runner_options() {
        let a = parse(&[]).unwrap().unwrap();
        assert_eq!((a.reps, a.bw_iters, a.lat_iters), (3, 20000, 5000));
        assert_eq!(a.sizes, [64, 4096, 65536, 1 << 20]);
        assert_eq!((a.inline, a.no_setup), (None, false));
        assert_eq!(a.run.timeout.as_secs(), 14400, "bench's own default");
        assert_eq!(a.run.step_timeout.as_secs(), 600);
        assert_eq!(a.run.want, crate::rxe::Want::Auto);
        let a = parse(&v(&[
            "--iters",
            "100",
            "--reps",
            "1",
            "--reps",
            "2",
            "--inline",
            "0",
            "--native",
            "--timeout",
            "90",
            "--no-setup",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (a.reps, a.bw_iters, a.lat_iters),
            (2, 100, 100),
            "the last --reps wins"
        );
        assert_eq!((a.inline, a.no_setup), (Some(0), true));
        assert_eq!(a.run.want, crate::rxe::Want::Native);
        assert_eq!(a.run.timeout.as_secs(), 90);
    }

    #[test]
    fn plot_only_names_a_report() {
        let a = parse(&v(&["--plot-only", "target/bench.json"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            a.plot_only.as_deref(),
            Some(std::path::Path::new("target/bench.json"))
        );
        assert_eq!(parse(&[]).unwrap().unwrap().plot_only, None);
        assert!(parse(&v(&["--plot-only"])).is_err());
    }

    #[test]
    fn instructions_replace_the_timing_runs_with_two_counts() {
        let a = parse(&v(&["--instructions"])).unwrap().unwrap();
        let i = a.instructions.expect("asked for");
        assert_eq!((i.bw, i.lat), ((2000, 6000), (1000, 3000)));
        assert_eq!((a.reps, a.sizes.as_slice()), (2, &[64][..]));
        assert_eq!(i.of(a.tests[0]), (2000, 6000), "write_bw");
        assert_eq!(i.of(a.tests[3]), (1000, 3000), "write_lat");
        let a = parse(&v(&["--instructions", "--iters", "500", "--reps", "3"]))
            .unwrap()
            .unwrap();
        let i = a.instructions.unwrap();
        assert_eq!((i.bw, i.lat, a.reps), ((500, 1500), (500, 1500), 3));
        assert!(parse(&v(&["--instructions", "--hosts", "2"])).is_err());
        assert_eq!(parse(&[]).unwrap().unwrap().instructions, None);
        let a = parse(&v(&["--instructions-from", "x/raw"]))
            .unwrap()
            .unwrap();
        assert!(a.instructions.is_some() && a.instructions_from.is_some());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("0"), None);
    }
}
