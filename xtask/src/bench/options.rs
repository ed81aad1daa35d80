//! The command line of `cargo xtask bench` and what it decides: tests,
//! sizes, repetitions, iterations per run, inline data.

use std::time::Duration;

use super::suite::{Test, TESTS};
use crate::rxe::RunOptions;
use crate::Result;

pub(super) const HELP: &str = "\
usage: cargo xtask bench [OPTIONS]

Runs perftest (ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat,
ib_send_lat, ib_atomic_bw, ib_atomic_lat) and our perf (write_bw, read_bw,
send_bw, write_lat, send_lat, atomic_bw, atomic_lat) on rxe0 in one boot, server and client on 127.0.0.1, with identical sizes,
iterations and tx depth (128 for bandwidth), alternating perftest and ours,
and prints the medians: bandwidth as average MB/sec (higher is better),
latency as t_typical usec (lower is better), the ratio ours/perftest, in
how many repetitions ours beat the perftest run beside it (a sign test that
tells a real gap from run-to-run noise), and whether the target is met
(bandwidth ratio >= 1.00, latency <= 1.05). Writes the table to
target/bench.json; raw outputs stay in
target/xtask/bench/<pid>/out/raw/. Exits non-zero if any run failed; a
perftest run that prints `inf` (its clock conversion failing in the guest)
is reported and left out of the medians instead.

options:
  --reps N              repetitions of every test and size (default 3)
  --iters N             operations per run (default 20000 for bandwidth, 5000
                        for latency; perftest needs >= 5), capped so that a
                        run moves at most 64 MiB (64 KiB: 1024, 1 MiB: 64)
  --sizes A,B,...       message sizes in bytes, K/M suffixes allowed
                        (default 64,4K,64K,1M); the atomic tests always
                        run 8 bytes (fetch-and-add) and ignore --sizes
  --tests T,...         only these tests (default write_bw,read_bw,send_bw,
                        write_lat,send_lat,atomic_bw,atomic_lat); a
                        name ending in _async (write_bw_async, read_bw_async,
                        send_bw_async, write_lat_async, send_lat_async)
                        runs ours with perf --async against the same
                        perftest program
  --async               run the async variant of every selected test that
                        has one (rows named <test>_async); the others are
                        left out
  --cm                  run every selected test that has an rdma_cm variant
                        (write_bw, read_bw, send_bw, write_lat, send_lat,
                        atomic_bw, atomic_lat)
                        with -R on both tools instead (rows named <test>_cm,
                        e.g. write_bw_cm): each pair connects through the
                        RDMA connection manager to the device's address
                        ($RXE_IPV4), and the table adds the set-up time of
                        the data connection: ours from perf's `rdma_cm
                        set-up` line (resolve -> established), perftest's
                        from the times its client printed `Data ex. method`
                        and its `local address` line (that span also holds
                        two control-channel handshakes, so it is an upper
                        bound); both are medians in ms
  --inline N            pass -I N to both tools in the write and send tests
                        (reads carry no inline data; default: each tool's
                        own; perftest turns inline off on devices it does
                        not recognise, rxe among them, while our perf inlines
                        up to 220/236 B in write/send latency tests):
                        --inline 0 compares without inline data on both sides
  --hosts N             1 (default): server and client on one host's rxe0
                        (127.0.0.1); 2: across two hosts (two VMs joined by
                        a virtual link, as test-rxe's two-host tier): every
                        server on host A, every client on host B, so each
                        byte crosses the link
  --delay MS            with --hosts 2: add MS ms of delay on both hosts'
                        link (netem; a round trip gains 2 x MS): a
                        bandwidth-delay product that needs the deep queue
                        (tx depth 128) to fill
  --no-setup            do not check/install prerequisites first
";

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

/// Parses the command line; `None` when it asked for `--help` (printed).
pub(super) fn parse(args: &[String]) -> Result<Option<Args>> {
    let mut a = Args {
        run: RunOptions {
            // By default 5 tests x 4 sizes x 3 repetitions x 2 tools = 120
            // server/client runs: more than the runner's default limit allows
            // under emulation.
            timeout: Duration::from_secs(60 * 60),
            ..RunOptions::default()
        },
        reps: 3,
        // Long enough that a bandwidth run measures the steady state, not
        // its start-up.
        bw_iters: 20000,
        lat_iters: 5000,
        sizes: vec![64, 4096, 65536, 1 << 20],
        tests: TESTS
            .iter()
            .copied()
            .filter(|t| !t.asynchronous && !t.cm)
            .collect(),
        inline: None,
        no_setup: false,
        asynchronous: false,
        cm: false,
        hosts: 1,
        delay_ms: None,
    };
    let mut i = 0;
    while i < args.len() {
        if a.run.parse_arg(args, &mut i)? {
            continue;
        }
        let value = |name: &str| -> Result<&String> {
            args.get(i + 1)
                .ok_or_else(|| format!("bench: {name} needs a value").into())
        };
        match args[i].as_str() {
            "-h" | "--help" => {
                println!("{HELP}{}", RunOptions::HELP);
                return Ok(None);
            }
            "--no-setup" => a.no_setup = true,
            "--async" => a.asynchronous = true,
            "--cm" => a.cm = true,
            "--hosts" => {
                a.hosts = value("--hosts")?
                    .parse()
                    .ok()
                    .filter(|n| (1..=2).contains(n))
                    .ok_or("bench: --hosts needs 1 or 2")?;
                i += 1;
            }
            "--delay" => {
                a.delay_ms = Some(
                    value("--delay")?
                        .parse()
                        .ok()
                        .filter(|&n| n <= 1000)
                        .ok_or("bench: --delay needs milliseconds (0..=1000)")?,
                );
                i += 1;
            }
            "--reps" => {
                a.reps = value("--reps")?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or("bench: --reps needs a positive number")?;
                i += 1;
            }
            "--iters" => {
                a.bw_iters = value("--iters")?
                    .parse()
                    .ok()
                    .filter(|&n| n >= 5)
                    .ok_or("bench: --iters needs a number >= 5 (perftest's minimum)")?;
                a.lat_iters = a.bw_iters;
                i += 1;
            }
            "--sizes" => {
                let v = value("--sizes")?;
                a.sizes = v
                    .split(',')
                    .map(|s| {
                        parse_size(s).ok_or_else(|| format!("bench: bad size `{s}` in --sizes"))
                    })
                    .collect::<std::result::Result<_, _>>()?;
                i += 1;
            }
            "--inline" => {
                a.inline = Some(
                    value("--inline")?
                        .parse()
                        .ok()
                        .filter(|&n| n <= 4096)
                        .ok_or("bench: --inline needs a number of bytes (0..=4096)")?,
                );
                i += 1;
            }
            "--tests" => {
                let v = value("--tests")?;
                a.tests = v
                    .split(',')
                    .map(|s| {
                        TESTS
                            .iter()
                            .copied()
                            .find(|t| t.name == s.trim())
                            .ok_or_else(|| format!("bench: unknown test `{s}` in --tests"))
                    })
                    .collect::<std::result::Result<_, _>>()?;
                i += 1;
            }
            other => return Err(format!("bench: unknown argument `{other}` (see --help)").into()),
        }
        i += 1;
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
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
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
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let a = parse(&v(&["--tests", "atomic_bw,write_bw", "--sizes", "64,4K"]))
            .unwrap()
            .unwrap();
        assert_eq!(a.sizes_of(a.tests[0]), [8]);
        assert_eq!(a.sizes_of(a.tests[1]), [64, 4096]);
    }

    #[test]
    fn cm_selects_the_cm_rows() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
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
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
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

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("0"), None);
    }
}
