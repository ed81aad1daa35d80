//! The two-host tier's hostile-network steps (issue 22): faults injected
//! on the link while our programs run across it, each case with the bound
//! it must meet and its data checked byte for byte whenever the programs
//! report success.
//!
//! The faults are the `netem`, `link_cut` and `fails_within` helpers of
//! ci/two-hosts.sh: netem qdiscs on a host's link NIC (its egress), a
//! dead path (netem loss 100%) for a while or for longer than the
//! programs wait. Every pair step removes them afterwards (`faults_clear`).
//! The programs verify what they received: `rc_pingpong -c` checks the
//! pages of the last message on the server and every message's length,
//! `perf write_bw`/`send_bw` check every byte written or received against
//! their pattern (`data verified`).

use super::pairs::{Programs, A, B};
use crate::rxe::{Plan, Side};

/// Which program a case runs.
#[derive(Debug, Clone, Copy)]
enum Run {
    /// `rc_pingpong -c` with this many round trips of 4 KiB.
    Rc(u32),
    /// `perf <test>` (`write_bw` or `send_bw`), [`PERF_ITERS`] of 4 KiB.
    Perf(&'static str),
}

/// perf's operations per fault case and their size.
const PERF_ITERS: u32 = 300;
const PERF_SIZE: u32 = 4096;

/// A netem case: its label, the netem arguments on host A and on host B
/// (empty: none on that host), and what runs under it (server on A, client
/// on B; each must complete with its data verified).
const NETEM_CASES: [(&str, &str, &str, Run); 15] = [
    ("loss 1%", "loss 1%", "loss 1%", Run::Rc(200)),
    ("loss 1%", "loss 1%", "loss 1%", Run::Perf("write_bw")),
    ("loss 5%", "loss 5%", "loss 5%", Run::Rc(200)),
    ("loss 5%", "loss 5%", "loss 5%", Run::Perf("write_bw")),
    ("loss 20%", "loss 20%", "loss 20%", Run::Rc(100)),
    ("delay 5 ms", "delay 5ms", "delay 5ms", Run::Rc(200)),
    (
        "delay 50 ms ± 10 ms on A",
        "delay 50ms 10ms",
        "",
        Run::Rc(50),
    ),
    (
        "delay 50 ms ± 10 ms on A",
        "delay 50ms 10ms",
        "",
        Run::Perf("write_bw"),
    ),
    (
        "reorder 25% (delay 5 ms)",
        "delay 5ms reorder 25% 50%",
        "delay 5ms reorder 25% 50%",
        Run::Rc(200),
    ),
    (
        "reorder 25% (delay 5 ms)",
        "delay 5ms reorder 25% 50%",
        "delay 5ms reorder 25% 50%",
        Run::Perf("write_bw"),
    ),
    ("duplicate 5%", "duplicate 5%", "duplicate 5%", Run::Rc(200)),
    (
        "duplicate 5%",
        "duplicate 5%",
        "duplicate 5%",
        Run::Perf("write_bw"),
    ),
    (
        "rate 2 Mbit/s",
        "rate 2mbit",
        "rate 2mbit",
        Run::Perf("write_bw"),
    ),
    ("corrupt 5%", "corrupt 5%", "corrupt 5%", Run::Rc(200)),
    (
        "corrupt 5%",
        "corrupt 5%",
        "corrupt 5%",
        Run::Perf("send_bw"),
    ),
];

/// The dead path: how long the short cut lasts (work completes, late), the
/// programs' `--timeout` under the long one, and the bound on their
/// failure, from their start (connection set-up, half a second, then the
/// timeout; rxe retries forever with the default retry count 7, so the
/// channel's wait bound is what ends the work).
const SHORT_CUT_SECS: u32 = 3;
const DEAD_TIMEOUT_SECS: u32 = 10;
const DEAD_BOUND_SECS: u32 = 25;

/// The first TCP port of the fault steps.
const PORT: u16 = 18700;

/// Wraps `cmd` in ci/two-hosts.sh's `netem` when `spec` is not empty.
fn under(spec: &str, cmd: &str) -> String {
    if spec.is_empty() {
        cmd.to_string()
    } else {
        format!("netem '{spec}' {cmd}")
    }
}

/// rc_pingpong's server and client commands (`extra`: more options).
fn rc(progs: &Programs, port: u16, iters: u32, extra: &str) -> (String, String) {
    let server = format!(
        "{} -d \"$RXE_DEVICE\" -g \"$RXE_GID_INDEX\" -p {port} -n {iters} -c{extra}",
        progs.ours("rc_pingpong")
    );
    let client = format!("{server} \"$PEER_IPV4\"");
    (server, client)
}

/// The fault steps, after the tier's pairs.
pub(super) fn fault_steps(p: &mut Plan, progs: &Programs) {
    p.say(
        "== two hosts: a hostile network ==\n\
         Faults on the link (netem on a host's link NIC, a dead path); each\n\
         program must complete with its data verified, or, on a path dead for\n\
         longer than it waits, fail with its typed error within the bound.",
    );
    let mut port = PORT;
    for (label, on_a, on_b, run) in NETEM_CASES {
        let (server, client, expect, what) = match run {
            Run::Rc(n) => {
                let (s, c) = rc(progs, port, n, "");
                (
                    s,
                    c,
                    format!("^{n} iters in [0-9.]+ seconds"),
                    "rc_pingpong -c".to_string(),
                )
            }
            Run::Perf(test) => {
                let perf = progs.ours("perf");
                let dev = "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"";
                (
                    format!("{perf} {test} {dev} -p {port}"),
                    format!(
                        "{perf} {test} {dev} -s {PERF_SIZE} -n {PERF_ITERS} -p {port} \"$PEER_IPV4\""
                    ),
                    "data verified".to_string(),
                    format!("perf {test}"),
                )
            }
        };
        p.pair_step(
            &format!("faults: {label}: {what}, data verified"),
            port,
            Side {
                host: A,
                cmd: &under(on_a, &server),
                expect: &expect,
            },
            Side {
                host: B,
                cmd: &under(on_b, &client),
                expect: &expect,
            },
        );
        port += 1;
    }

    // A dead path shorter than the programs wait: late, complete.
    let n = 300;
    let (server, client) = rc(progs, port, n, "");
    let expect = format!("^{n} iters in [0-9.]+ seconds");
    p.pair_step(
        &format!("faults: path dead for {SHORT_CUT_SECS} s (B drops all it sends): rc_pingpong -c completes"),
        port,
        Side {
            host: A,
            cmd: &server,
            expect: &expect,
        },
        Side {
            host: B,
            // It exits 0 only once every round trip is done; the cut must
            // have dropped frames (it began while the transfer ran).
            cmd: &format!("link_cut blackhole {SHORT_CUT_SECS} {client}"),
            expect: "[1-9][0-9]* frames dropped",
        },
    );
    port += 1;

    // Dead for longer: both sides fail with their timeout, in bounded time.
    let (t, bound) = (DEAD_TIMEOUT_SECS, DEAD_BOUND_SECS);
    let (server, client) = rc(progs, port, n, &format!(" --timeout {t}"));
    let expect = format!("did not complete within {t}s");
    p.pair_step(
        &format!(
            "faults: path dead for good (B drops all it sends): rc_pingpong --timeout {t} fails on both hosts within {bound} s"
        ),
        port,
        Side {
            host: A,
            cmd: &format!("fails_within {bound} {server}"),
            expect: &expect,
        },
        Side {
            host: B,
            cmd: &format!("fails_within {bound} link_cut blackhole {} {client}", 3 * t),
            expect: &expect,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_is_undone_and_checked() {
        let progs = Programs::for_tests();
        let mut p = Plan::new();
        fault_steps(&mut p, &progs);
        let text = p.text();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("pair_step "))
            .collect();
        assert_eq!(steps.len(), NETEM_CASES.len() + 2, "{text}");
        assert!(
            steps[0].contains(
                "18700 0 'netem '\\''loss 1%'\\'' /t/rc_pingpong -d \"$RXE_DEVICE\" -g \"$RXE_GID_INDEX\" -p 18700 -n 200 -c' "
            ),
            "{}",
            steps[0]
        );
        assert!(
            steps[0].ends_with(" '^200 iters in [0-9.]+ seconds' '^200 iters in [0-9.]+ seconds'")
        );
        // Only A delays by 50 ms: B's side runs bare.
        assert!(steps[6].contains(" '/t/rc_pingpong -d"), "{}", steps[6]);
        assert!(steps[14].contains("/t/perf send_bw"), "{}", steps[14]);
        assert!(steps[14].ends_with(" 'data verified' 'data verified'"));
        assert!(
            steps[15].ends_with(" '^300 iters in [0-9.]+ seconds' '[1-9][0-9]* frames dropped'")
        );
        assert!(steps[16].contains("'fails_within 25 link_cut blackhole 30 /t/rc_pingpong"));
        assert!(steps[16].ends_with(" 'did not complete within 10s' 'did not complete within 10s'"));
    }
}
