//! The command line of `cargo xtask bench` ([`Args`], clap) and the
//! parsers of its values; [`super::settings`] turns it into what a run
//! does.

use std::path::PathBuf;

use clap::builder::ArgPredicate;

use super::suite::{Test, TESTS};
use crate::rxe::{RunArgs, ENV_HELP};

/// What the task does, printed by `--help` above the options.
pub(crate) const ABOUT: &str = "\
Runs perftest (ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat,
ib_send_lat, ib_atomic_bw, ib_atomic_lat) and our perf (write_bw, read_bw,
send_bw, write_lat, send_lat, atomic_bw, atomic_lat) on rxe0 in one boot,
server and client on 127.0.0.1, with identical sizes, iterations and tx
depth (128 for bandwidth), alternating perftest and ours, and prints the
medians: bandwidth as average MB/sec (higher is better), latency as
t_typical usec (lower is better), the ratio ours/perftest, in how many
repetitions ours beat the perftest run beside it (a sign test that tells a
real gap from run-to-run noise), and whether the target is met (bandwidth
ratio >= 1.00, latency <= 1.05). Writes the table to target/bench.json and
one SVG plot per test beside it (target/bench-<test>.svg: every run and the
medians of both tools against the message size); raw outputs stay in
target/xtask/bench/<pid>/out/raw/. Exits non-zero if any run failed; a
perftest run that prints `inf` (its clock conversion failing in the guest)
is reported and left out of the medians instead. The stream rows
(stream_bw, stream_lat) run rstream's test with rdmacm-utils' rstream,
ours and TCP (rstream -T s) in the same way, judged against rstream.";

/// bench's whole-run limit in seconds, a hang guard only (each step is
/// bounded by `--step-timeout`): the default 14 tests (the atomics at 8 B
/// only, the others at 4 sizes) x 3 repetitions x 2 tools are 300
/// server/client runs, and the 14-row instruction table is 112 callgrind
/// steps, 37-67 minutes on an idle 2-core machine under emulation. An hour
/// killed that table two thirds of the way through with a test-rxe run
/// beside it.
const TIMEOUT: &str = "14400";

/// `--tests` when not given: every test that is neither an async nor an
/// rdma_cm variant (those are chosen with `--async` and `--cm`).
pub(super) const DEFAULT_TESTS: &str = "write_bw,read_bw,send_bw,write_lat,send_lat,\
atomic_bw,atomic_lat,write_bw_q4,write_bw_q16,write_bw_bidi,read_bw_q4,send_bw_bidi,\
write_bw_q4_t2,write_bw_q4_t4,stream_bw,stream_lat";

/// The options of `cargo xtask bench`; the fields' doc comments are
/// `--help`'s text, written for a terminal.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, clap::Args)]
#[command(
    after_help = ENV_HELP,
    // The runner's default whole-run limit is an hour; bench's is [`TIMEOUT`].
    mut_arg("timeout", |a| a.default_value(TIMEOUT)),
)]
pub(crate) struct Args {
    /// repetitions of every test and size (with --instructions
    /// or --instructions-from: 2)
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = reps,
          default_value_t = 3, verbatim_doc_comment,
          default_value_ifs = [
              ("instructions", ArgPredicate::Equals("true".into()), "2"),
              ("instructions_from", ArgPredicate::IsPresent, "2"),
          ])]
    pub(super) reps: usize,
    /// operations per run: by default 20000 for bandwidth and
    /// 5000 for latency (perftest needs >= 5), capped so that a
    /// run moves at most 64 MiB (64 KiB: 1024, 1 MiB: 64)
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = iters, verbatim_doc_comment)]
    pub(super) iters: Option<u32>,
    /// message sizes in bytes, K/M suffixes allowed (with
    /// --instructions or --instructions-from: 64); the
    /// atomic tests always run 8 bytes (fetch-and-add) and
    /// ignore --sizes
    // `::std::vec::Vec`, not `Vec`: one value (the whole list) for clap,
    // which would otherwise take a list option's values one at a time.
    #[arg(long, allow_hyphen_values = true, value_name = "A,B,...", value_parser = sizes,
          default_value = "64,4K,64K,1M", verbatim_doc_comment,
          default_value_ifs = [
              ("instructions", ArgPredicate::Equals("true".into()), "64"),
              ("instructions_from", ArgPredicate::IsPresent, "64"),
          ])]
    pub(super) sizes: ::std::vec::Vec<u64>,
    /// only these tests; a name ending in _async
    /// (write_bw_async, read_bw_async, send_bw_async,
    /// write_lat_async, send_lat_async) runs ours with perf
    /// --async against the same perftest program; write_bw_q4,
    /// write_bw_q16, read_bw_q4 (-q N: N queue pairs share the
    /// run's iterations), write_bw_bidi, send_bw_bidi (-b: both
    /// directions, each tool reports the sum) run both tools
    /// with those flags; write_bw_q4_t2, write_bw_q4_t4 drive
    /// our client's 4 queue pairs from 2 or 4 threads
    /// (perftest: one); stream_bw (throughput at every size)
    /// and stream_lat (64 B ping-pong) run rstream's test
    /// (-S/-C/-I) with rdmacm-utils' rstream, with ours
    /// (rdma-examples' rstream, on rdma_safe::stream) and,
    /// for reference, with rstream -T s (TCP); --async,
    /// --cm, --inline and --instructions leave them out
    #[arg(long, allow_hyphen_values = true, value_name = "T,...", value_parser = tests,
          default_value = DEFAULT_TESTS, verbatim_doc_comment)]
    pub(super) tests: ::std::vec::Vec<Test>,
    /// run the async variant of every selected test that
    /// has one (rows named <test>_async); the others are
    /// left out
    #[arg(long = "async", verbatim_doc_comment)]
    pub(super) asynchronous: bool,
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
    /// bound); both are medians in ms; not with --async
    /// (perf -R has no async path)
    #[arg(long, conflicts_with = "asynchronous", verbatim_doc_comment)]
    pub(super) cm: bool,
    /// pass -I N to both tools in the write and send tests
    /// (reads carry no inline data; by default each tool
    /// inlines what it does by itself: perftest turns inline
    /// off on devices it does not recognise, rxe among them,
    /// while our perf inlines up to 220/236 B in write/send
    /// latency tests): --inline 0 compares without inline
    /// data on both sides
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = inline, verbatim_doc_comment)]
    pub(super) inline: Option<u32>,
    /// 1: server and client on one host's rxe0 (127.0.0.1);
    /// 2: across two hosts (two VMs joined by a virtual
    /// link, as test-rxe's two-host tier): every server on
    /// host A, every client on host B, so each byte crosses
    /// the link
    #[arg(long, allow_hyphen_values = true, value_name = "N", value_parser = hosts,
          default_value_t = 1, verbatim_doc_comment)]
    pub(super) hosts: usize,
    /// with --hosts 2: add MS ms of delay on both hosts'
    /// link (netem; a round trip gains 2 x MS): a
    /// bandwidth-delay product that needs the deep queue
    /// (tx depth 128) to fill
    #[arg(long, allow_hyphen_values = true, value_name = "MS", value_parser = delay, verbatim_doc_comment)]
    pub(super) delay: Option<u32>,
    /// do not check/install prerequisites first
    #[arg(long)]
    pub(super) no_setup: bool,
    /// run nothing: draw the SVG plots of the report PATH
    /// (a bench.json) again, beside it as <stem>-<test>.svg
    #[arg(long, value_name = "PATH", verbatim_doc_comment)]
    pub(super) plot_only: Option<PathBuf>,
    /// instead of the timing runs: user-space instructions
    /// per operation of both tools, client and server, under
    /// valgrind's callgrind, from runs of n1 and n2
    /// operations (by default 2000/6000 bandwidth, 1000/3000
    /// latency; --iters N: N/3N); ours counts inside its
    /// measured loops only, perftest (stripped) the whole
    /// program; the provider's completion polls are counted
    /// apart; printed and added to bench.json as
    /// `instructions` (its timing results are kept); the
    /// callgrind files stay in target/xtask/bench-instructions/
    /// <pid>/out/raw/ until the next --instructions run
    #[arg(long, verbatim_doc_comment)]
    pub(super) instructions: bool,
    /// run nothing: compute the --instructions table and
    /// bench.json member again from the callgrind files in
    /// DIR (an earlier run's raw/), given the same --tests,
    /// --sizes, --iters and --reps as that run
    #[arg(long, value_name = "DIR", verbatim_doc_comment)]
    pub(super) instructions_from: Option<PathBuf>,
    #[command(flatten)]
    pub(super) run: RunArgs,
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::{self, Task};

    fn parse(words: &[&str]) -> Result<Args, clap::Error> {
        match cli::try_parse(&[&["bench"], words].concat())? {
            Task::Bench(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_default_tests_are_the_plain_ones() {
        let plain: Vec<&str> = TESTS
            .iter()
            .filter(|t| !t.asynchronous && !t.cm)
            .map(|t| t.name)
            .collect();
        assert_eq!(DEFAULT_TESTS, plain.join(","));
    }

    #[test]
    fn defaults() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.reps, a.iters, a.hosts), (3, None, 1));
        assert_eq!(a.sizes, [64, 4096, 65536, 1 << 20]);
        assert_eq!(a.tests.len(), 16);
        assert_eq!((a.inline, a.delay, a.no_setup), (None, None, false));
        let run = a.run.options(crate::rxe::Want::Auto);
        assert_eq!(run.timeout.as_secs(), 14400, "bench's own default");
        assert_eq!(run.step_timeout.as_secs(), 600);
        // --instructions measures fewer repetitions of one size.
        for words in [&["--instructions"][..], &["--instructions-from", "x/raw"]] {
            let a = parse(words).unwrap();
            assert_eq!((a.reps, a.sizes.as_slice()), (2, &[64][..]), "{words:?}");
        }
        let a = parse(&["--instructions", "--reps", "5", "--sizes", "4K"]).unwrap();
        assert_eq!((a.reps, a.sizes.as_slice()), (5, &[4096][..]));
    }

    #[test]
    fn help_shows_options_and_defaults() {
        let e = parse(&["--reps", "2", "-h"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        let help = cli::long_help("bench");
        for option in [
            "--reps <N>",
            "[default: 3]",
            "--sizes <A,B,...>",
            "[default: 64,4K,64K,1M]",
            "--cm",
            "--delay <MS>",
            "--plot-only <PATH>",
            "--instructions",
            "--vm",
            "[default: 14400]",
            "XTASK_VM_KERNEL",
        ] {
            assert!(help.contains(option), "{option} in {help}");
        }
    }

    #[test]
    fn mistakes_name_the_task_and_the_option() {
        let e = parse(&["--bogus"]).unwrap_err().to_string();
        assert!(
            e.contains("cargo xtask bench") && e.contains("--bogus"),
            "{e}"
        );
        let e = parse(&["--timeout", "soon"]).unwrap_err().to_string();
        assert!(e.contains("--timeout") && e.contains("seconds"), "{e}");
        assert!(parse(&["--timeout"]).is_err());
        let e = parse(&["--reps", "0"]).unwrap_err().to_string();
        assert!(e.contains("--reps") && e.contains("positive"), "{e}");
        assert!(parse(&["--iters", "4"]).is_err());
        assert!(parse(&["--inline", "4097"]).is_err());
        assert!(parse(&["--hosts", "3"]).is_err());
        assert!(parse(&["--hosts", "2", "--delay", "1001"]).is_err());
        let e = parse(&["--sizes", "64,,4K"]).unwrap_err().to_string();
        assert!(e.contains("bad size ``"), "{e}");
        let e = parse(&["--tests", "write_bw,nope"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown test `nope`"), "{e}");
        let e = parse(&["--cm", "--async"]).unwrap_err().to_string();
        assert!(e.contains("--cm") && e.contains("--async"), "{e}");
        assert!(parse(&["--plot-only"]).is_err());
    }

    #[test]
    fn a_repeated_option_replaces_its_value() {
        let a = parse(&["--reps", "1", "--reps", "2", "--native", "--timeout", "90"]).unwrap();
        assert_eq!(a.reps, 2, "the last --reps wins");
        let run = a.run.options(crate::rxe::Want::Auto);
        assert_eq!(run.want, crate::rxe::Want::Native);
        assert_eq!(run.timeout.as_secs(), 90);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("0"), None);
    }
}
