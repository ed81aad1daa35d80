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
//!
//! What a connection meets beyond a bad path (different MTUs, a cut that
//! breaks it, a dead peer, nobody answering) is in
//! [`faults_connections`](super::faults_connections), the lost CM
//! handshakes in [`faults_handshake`](super::faults_handshake).

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

/// perf's device options on either host: the device and GID index the
/// runner found.
pub(super) const PERF_DEV: &str = "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"";

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
/// timeout; rxe retries forever with rc_pingpong's retry count 7, the C
/// program's, so the channel's wait bound is what ends the work).
const SHORT_CUT_SECS: u32 = 3;
/// Round trips asked of rc_pingpong on a path that dies for good: never
/// reached.
const DEAD_ITERS: u32 = 100_000;
/// The programs' `--timeout` on a path dead for good, and the bound on
/// their failure (also the connection steps' bounds).
pub(super) const DEAD_TIMEOUT_SECS: u32 = 10;
pub(super) const DEAD_BOUND_SECS: u32 = 25;
/// The dead path under a finite retry budget (rc_pingpong --retry-count 6,
/// its ACK timeout the C program's 14: 4.096 µs · 2^14 · 7 ≈ 0.47 s by the
/// spec): the sender
/// fails with the transport's typed error, long before the channel's
/// timeout ([`DEAD_TIMEOUT_SECS`]); the bound is from the program's start
/// (set-up, half a second, the cut, the retries).
const RETRY_COUNT: u32 = 6;
const RETRY_BOUND_SECS: u32 = 9;

/// The first TCP port of the fault steps.
const PORT: u16 = 18700;

/// Wraps `cmd` in ci/two-hosts.sh's `netem` when `spec` is not empty.
pub(super) fn under(spec: &str, cmd: &str) -> String {
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
                (
                    format!("{perf} {test} {PERF_DEV} -p {port}"),
                    format!(
                        "{perf} {test} {PERF_DEV} -s {PERF_SIZE} -n {PERF_ITERS} -p {port} \"$PEER_IPV4\""
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
    // Far more round trips than run before the cut: a quick machine must
    // not finish first (the side whose last step was a receive would end
    // well, its peer waiting for an ACK the cut drops).
    let (server, client) = rc(progs, port, DEAD_ITERS, &format!(" --timeout {t}"));
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
    port += 1;

    // Dead for good under a finite retry budget: the sender's send fails
    // with "transport retry counter exceeded" (WcStatus::RetryExceeded),
    // not with the channel's timeout; its peer, waiting for a message that
    // never comes, fails by either.
    let r = RETRY_COUNT;
    let (server, client) = rc(
        progs,
        port,
        DEAD_ITERS,
        &format!(" --timeout {t} --retry-count {r}"),
    );
    let exceeded = "transport retry counter exceeded";
    p.pair_step(
        &format!(
            "faults: path dead for good, --retry-count {r}: the sender fails with '{exceeded}' within {RETRY_BOUND_SECS} s"
        ),
        port,
        Side {
            host: A,
            cmd: &format!("fails_within {bound} {server}"),
            expect: &format!("{exceeded}|did not complete within {t}s"),
        },
        Side {
            host: B,
            cmd: &format!(
                "fails_within {RETRY_BOUND_SECS} link_cut blackhole {} {client}",
                3 * t
            ),
            expect: exceeded,
        },
    );
    port += 1;
    let port = super::faults_connections::steps(p, progs, port);
    async_latency_under_loss(p, progs, port);
    hostile_mix_step(p, progs, port + 1);
    let port = port + 1 + HOSTILE_CLIENTS.len() as u16;
    super::faults_handshake::lost_rtu_steps(p, progs, port);
}

/// `perf send_lat --async` (one send in flight, `-t 1`) across a link that
/// loses 5% each way: a lost acknowledgement leaves the previous send in
/// the send queue after its answer has arrived, and the client must still
/// post its next message rather than wait for an answer to one it never
/// sent (which stalled both sides for their 30 s timeout in a bench run
/// across two hosts). Every message and answer is checked.
fn async_latency_under_loss(p: &mut Plan, progs: &Programs, port: u16) {
    let perf = progs.ours("perf");
    let loss = "loss 5%";
    p.pair_step(
        &format!("faults: {loss}: perf send_lat --async (one send in flight), data verified"),
        port,
        Side {
            host: A,
            cmd: &under(loss, &format!("{perf} send_lat {PERF_DEV} -p {port}")),
            expect: "data verified",
        },
        Side {
            host: B,
            cmd: &under(
                loss,
                &format!(
                    "{perf} send_lat --async {PERF_DEV} -s 64 -n {LOSSY_LAT_ITERS} -p {port} \"$PEER_IPV4\""
                ),
            ),
            expect: "data verified",
        },
    );
}

/// Round trips of the lossy async latency step: a round trip is four
/// packets (message, its acknowledgement, answer, its acknowledgement),
/// so at 5% each way about one in five loses one, and about one in twenty
/// the acknowledgement of the client's send — dozens of the stalls the
/// step guards against in 1000.
const LOSSY_LAT_ITERS: u32 = 1000;

/// Every fault of netem at once on both hosts: what a congested, flaky
/// path does to packets together.
const HOSTILE_MIX: &str = "delay 2ms loss 3% duplicate 3% reorder 10% 50% corrupt 1%";

/// The clients of the hostile mix step, each against its own `perf`
/// server (the server takes its options from the client): the async
/// clients, atomics (a retransmitted atomic must not run twice: the
/// fetched values are checked), many queue pairs, both directions and
/// completion events — the paths no other fault step runs — and two
/// clients over the RDMA CM (`-R`: perftest's control exchange, one
/// connection for it and one for the data; such a server runs the client's
/// options, as perftest's does).
const HOSTILE_CLIENTS: [&str; 9] = [
    "send_bw --async -s 4096 -n 300",
    "read_bw --async -s 4096 -n 300",
    "write_lat --async -s 64 -n 300",
    "atomic_bw -n 300",
    "write_bw -q 4 -s 4096 -n 300",
    "send_bw -b -s 4096 -n 300",
    "send_lat -e -s 64 -n 300",
    "send_lat -R -s 64 -n 200",
    "send_bw -R -s 4096 -n 300",
];

/// [`HOSTILE_MIX`] on both hosts while [`HOSTILE_CLIENTS`] run one after
/// another from B, each against a fresh `perf` server on A (ports `port`
/// on): every one must complete with its data verified. The chain stops
/// at the first failure; the last line is printed only if all passed.
fn hostile_mix_step(p: &mut Plan, progs: &Programs, port: u16) {
    let perf = progs.ours("perf");
    let n = HOSTILE_CLIENTS.len();
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for (k, client) in (port..).zip(HOSTILE_CLIENTS) {
        let test = client.split_once(' ').map_or(client, |(test, _)| test);
        let server = if client.contains(" -R ") {
            client
        } else {
            test
        };
        servers.push(format!("{perf} {server} {PERF_DEV} -p {k}"));
        clients.push(format!("{perf} {client} {PERF_DEV} -p {k} \"$PEER_IPV4\""));
    }
    let done = format!("hostile mix: {n} of {n} completed, data verified, -R statuses checked");
    let chain = |cmds: Vec<String>| {
        format!(
            "netem '{HOSTILE_MIX}' eval '{} && echo \"{done}\"'",
            cmds.join(" && ").replace('\'', "'\\''")
        )
    };
    p.pair_step(
        &format!(
            "faults: delay, loss, duplicates, reordering and corruption at once: {n} perf clients (async, atomics, -q 4, -b, -e, -R), data verified"
        ),
        port,
        Side {
            host: A,
            cmd: &chain(servers),
            expect: &done,
        },
        Side {
            host: B,
            cmd: &chain(clients),
            expect: &done,
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
        assert_eq!(steps.len(), NETEM_CASES.len() + 14, "{text}");
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
        assert!(steps[17].contains("'fails_within 9 link_cut blackhole 30 /t/rc_pingpong"));
        assert!(
            steps[17].contains("--timeout 10 --retry-count 6"),
            "{}",
            steps[17]
        );
        assert!(steps[17].ends_with(" 'transport retry counter exceeded'"));
        assert!(
            steps[18].contains("'with_mtu 4200 /t/perf write_bw"),
            "{}",
            steps[18]
        );
        assert!(
            steps[19].contains("'with_mtu 4200 /t/async_echo client"),
            "{}",
            steps[19]
        );
        assert!(
            steps[20].contains("--reconnect --clients 2"),
            "{}",
            steps[20]
        );
        assert!(steps[21].contains("kill -9 $c"), "{}", steps[21]);
        assert!(steps[22].contains("netem loss 100%"), "{}", steps[22]);
        assert!(
            steps[23].contains("--cm -p 18722 --timeout 10"),
            "{}",
            steps[23]
        );
        assert!(steps[23].contains("192.168.77.3"), "{}", steps[23]);
        assert!(
            steps[24].contains("18723 0 'netem '\\''loss 5%'\\'' /t/perf send_lat -d"),
            "{}",
            steps[24]
        );
        assert!(
            steps[24].contains("/t/perf send_lat --async -d"),
            "{}",
            steps[24]
        );
        assert!(steps[24].ends_with(" 'data verified' 'data verified'"));
        // The hostile mix: nine servers on A, nine clients on B, on
        // ports from 18724, the chain's last line the evidence.
        let mix = steps[25];
        assert!(mix.contains(" 18724 0 'netem "), "{mix}");
        assert!(mix.contains("corrupt 1%"), "{mix}");
        assert!(
            mix.contains("/t/perf send_bw --async -s 4096 -n 300 -d"),
            "{mix}"
        );
        assert!(mix.contains("/t/perf send_lat -d"), "{mix}");
        assert!(mix.contains("-p 18732 "), "{mix}");
        assert_eq!(mix.matches("/t/perf").count(), 18, "{mix}");
        // An -R server runs the client's options.
        assert_eq!(
            mix.matches("/t/perf send_bw -R -s 4096 -n 300 -d").count(),
            2,
            "{mix}"
        );
        assert!(mix
            .ends_with(" 'hostile mix: 9 of 9 completed, data verified, -R statuses checked' 'hostile mix: 9 of 9 completed, data verified, -R statuses checked'"));
        // Then the lost-RTU steps, from the next port.
        assert!(steps[26].contains(" 18733 0 'netem "), "{}", steps[26]);
    }
}
