//! `perf -R -q 4` and `perf -R -b` against perftest's `ib_<test> -R -q 4`
//! and `-b` (write_bw, read_bw, send_bw), both directions, and `perf`
//! against itself.
//!
//! Both programs must exit 0; the client's result row (whichever tool) must
//! count every queue pair's operations (`-n` × `-q`) with sane numbers; with
//! `-b` the server prints such a row too (each side reports the sum of both
//! directions). Our one-way server prints the client's report (write_bw,
//! read_bw) or the messages it received on all queue pairs (send_bw).
//!
//! `#[ignore]`d like every device test (`cargo xtask test-rxe` runs them on
//! rxe); each run has its own port (19600..); every process is killed after
//! [`common::TIMEOUT`].

mod common;

use common::perftest::{assert_sane_row, calibration_failed, ip, row};
use common::*;

const SIZE: usize = 4096;
const ITERS: usize = 200;

/// The options both sides run with: `-q`/`-b` in `extra` (the atomic
/// tests have no `-s`: 8 bytes).
fn options(test: &str, port: u16, extra: &[&str]) -> Vec<String> {
    let mut v = args(&["-R", "-p", &port.to_string(), "-n", "200"]);
    if !test.starts_with("atomic") {
        v.extend(args(&["-s", "4096"]));
    }
    v.extend(args(extra));
    v
}

/// Who runs which side.
#[derive(Clone, Copy, PartialEq)]
enum Sides {
    OursServes,
    TheirsServe,
    OursBoth,
}

/// One run of `test` with `extra`, retried (on a new port, twice at most)
/// when perftest's clock calibration failed; returns server and client.
fn run(test: &str, extra: &[&str], sides: Sides, port: u16) -> (Finished, Finished) {
    for attempt in 0..3u16 {
        let opts = options(test, port + 100 * attempt, extra);
        let theirs = format!("ib_{test}");
        let mut ours = args(&[test]);
        ours.extend(opts.clone());
        let mut c_side = args(&["-d", &device()]);
        c_side.extend(opts);
        let (s, c) = match sides {
            Sides::OursServes => {
                c_side.push(ip());
                pair(
                    (PERF, ours),
                    Some("waiting for a client"),
                    (&theirs, c_side),
                )
            }
            Sides::TheirsServe => {
                ours.push(ip());
                pair((&theirs, c_side), None, (PERF, ours))
            }
            Sides::OursBoth => {
                let mut client = ours.clone();
                client.push(ip());
                pair((PERF, ours), Some("waiting for a client"), (PERF, client))
            }
        };
        if calibration_failed(&[&s, &c]) && attempt < 2 {
            eprintln!("perftest's clock calibration failed (attempt {attempt}); running again");
            continue;
        }
        return (s, c);
    }
    unreachable!("the last attempt returns")
}

/// Checks a run: both exit 0, the client's row (and with `-b` the
/// server's) counts `ITERS × qps` operations, our one-way server says what
/// it saw.
#[track_caller]
fn check(test: &str, qps: usize, bidirectional: bool, sides: Sides, s: &Finished, c: &Finished) {
    s.assert_ok(c);
    c.assert_ok(s);
    let total = (ITERS * qps) as f64;
    let reporters: &[&Finished] = if bidirectional { &[s, c] } else { &[c] };
    for side in reporters {
        assert_sane_row(side, SIZE);
        assert_eq!(
            row(&side.output, SIZE).first(),
            Some(&total),
            "{}: the row must count {total} operations:\n{}",
            side.label,
            side.output
        );
    }
    if sides != Sides::TheirsServe && !bidirectional {
        if test == "send_bw" {
            s.assert_has(&format!(
                "received {total} messages of {SIZE} bytes on {qps}"
            ));
        } else {
            assert_sane_row(s, SIZE);
            s.assert_has("(the client's report)");
        }
    }
}

fn against_perftest(extra: &[&str], qps: usize, bidirectional: bool, first_port: u16) {
    let mut port = first_port;
    for test in ["write_bw", "read_bw", "send_bw"] {
        for sides in [Sides::OursServes, Sides::TheirsServe] {
            let (s, c) = run(test, extra, sides, port);
            check(test, qps, bidirectional, sides, &s, &c);
            port += 1;
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_four_queue_pairs_against_perftest() {
    against_perftest(&["-q", "4"], 4, false, 19600);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_bidirectional_against_perftest() {
    against_perftest(&["-b"], 1, true, 19620);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_atomic_bw_on_four_queue_pairs_against_perftest() {
    for (port, sides) in (19660..).zip([Sides::OursServes, Sides::TheirsServe, Sides::OursBoth]) {
        let (s, c) = run("atomic_bw", &["-q", "4"], sides, port);
        s.assert_ok(&c);
        c.assert_ok(&s);
        let mut reporters = vec![&c];
        if sides == Sides::OursServes {
            s.assert_has("(the client's report)");
            reporters.push(&s);
        }
        for side in reporters {
            assert_sane_row(side, 8);
            assert_eq!(
                row(&side.output, 8).first(),
                Some(&((ITERS * 4) as f64)),
                "{}: the row must count every queue pair's atomics:\n{}",
                side.label,
                side.output
            );
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_many_queue_pairs_against_itself() {
    for (port, (test, extra, qps, bidi)) in (19640..).zip([
        ("write_bw", &["-q", "4"][..], 4, false),
        ("read_bw", &["-q", "4"][..], 4, false),
        ("send_bw", &["-q", "4"][..], 4, false),
        ("write_bw", &["-b", "-q", "2"][..], 2, true),
        ("send_bw", &["-b", "-q", "2"][..], 2, true),
    ]) {
        let (s, c) = run(test, extra, Sides::OursBoth, port);
        check(test, qps, bidi, Sides::OursBoth, &s, &c);
    }
}
