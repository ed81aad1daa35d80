//! The two-host tier's throughput steps: `perf` against itself (its own
//! protocol, data verified) and against perftest (`-R`, perftest's rdma_cm
//! protocol) in both directions, and `async_echo` serving many clients
//! from the other host.

use super::pairs::{Programs, A, B};
use crate::rxe::{Plan, Side};

/// perf's own protocol: RDMA writes per run and their size.
const WRITE_ITERS: u32 = 300;
const WRITE_SIZE: u32 = 4096;

/// `-R` runs against perftest: test, its options (the same on both
/// sides, as perftest wants), the message size its result row starts
/// with, and what our server prints when it is done (the bandwidth tests'
/// servers print the client's report; the others leave measuring to it).
const CM_RUNS: [(&str, &str, u32, &str); 3] = [
    ("write_bw", "-s 4096 -n 300", 4096, "the client's report"),
    ("write_lat", "-s 64 -n 200", 64, "the client measures"),
    ("atomic_bw", "-n 200", 8, "the client's report"),
];

/// async_echo: connections at once, messages each, message size.
const ECHO_CLIENTS: u32 = 8;
const ECHO_MESSAGES: u32 = 100;
const ECHO_SIZE: u32 = 1000;

/// perf write_bw ours against ours, then every [`CM_RUNS`] test with `-R`
/// both ways: ours serving perftest's client, perftest serving ours. The
/// client measures: its result row (size, iterations, numbers) must show.
pub(super) fn perf_steps(p: &mut Plan, progs: &Programs) {
    let ours = progs.ours("perf");
    let (n, size) = (WRITE_ITERS, WRITE_SIZE);
    let dev = "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"";
    let mut port = 18630;
    p.pair_step(
        "perf write_bw: ours (A) serves, ours (B) connects, data verified",
        port,
        Side {
            host: A,
            cmd: &format!("{ours} write_bw {dev} -p {port}"),
            expect: "data verified",
        },
        Side {
            host: B,
            cmd: &format!("{ours} write_bw {dev} -s {size} -n {n} -p {port} \"$PEER_IPV4\""),
            expect: "data verified",
        },
    );
    for (test, opts, size, our_server_says) in CM_RUNS {
        let n = opts.rsplit(' ').next().unwrap_or_default();
        let row = format!("^ *{size} +{n} +[0-9.]+ +[0-9.]+");
        let theirs = format!("ib_{test} -d \"$RXE_DEVICE\" -R {opts}");
        let ours = format!("{ours} {test} -R {opts}");
        for (server, client, how, server_says) in [
            (
                &ours,
                &theirs,
                "ours (A) serves, perftest (B) connects",
                our_server_says,
            ),
            (&theirs, &ours, "perftest (A) serves, ours (B) connects", ""),
        ] {
            port += 1;
            p.pair_step(
                &format!("perf {test} -R: {how}"),
                port,
                Side {
                    host: A,
                    cmd: &format!("{server} -p {port}"),
                    expect: server_says,
                },
                Side {
                    host: B,
                    cmd: &format!("{client} -p {port} \"$PEER_IPV4\""),
                    expect: &row,
                },
            );
        }
    }
}

/// `async_echo server FLAGS`, serving until the pair step's client has
/// ended (`$PAIR_CLIENT_DONE`, see ci/two-hosts.sh), then stopped; it must
/// still be running then, and says `async_echo: stopped after its client`.
pub(super) fn echo_server(echo: &str, flags: &str) -> String {
    format!(
        "{echo} server {flags} & s=$!; \
         until [ -e \"$PAIR_CLIENT_DONE\" ]; do kill -0 $s || exit 1; sleep 0.5; done; \
         kill $s; wait $s; [ $? = 143 ] && echo 'async_echo: stopped after its client'"
    )
}

/// async_echo: the server on B serves [`ECHO_CLIENTS`] connections from
/// one client process on A, which checks every echoed byte — connected
/// over TCP (endpoint exchange), then through the RDMA CM (`--cm`, every
/// connection in the server's one domain and pool), with the server's
/// buffers the messages' size; then with the server's defaults (no `-s`:
/// 64 KiB messages, 64 MiB registered), which must serve on a 1 GiB host,
/// where a client asking for larger messages is refused by name before
/// the checked run. The server serves until stopped: it is stopped once the client has ended
/// (`$PAIR_CLIENT_DONE`, see ci/two-hosts.sh), and must still be running
/// then.
pub(super) fn async_echo_step(p: &mut Plan, progs: &Programs) {
    let ours = progs.ours("async_echo");
    let (c, m, s) = (ECHO_CLIENTS, ECHO_MESSAGES, ECHO_SIZE);
    // The step waits for the port to listen (a TCP socket, or the CM's
    // id); the --cm client also retries while the server is not listening.
    for (port, flags, how, wait) in [
        (18640, "-x \"$RXE_GID_INDEX\"", "", 18640),
        (18641, "--cm", ", RDMA CM", 18641),
    ] {
        let dev = format!("-d \"$RXE_DEVICE\" {flags}");
        let server = echo_server(&ours, &format!("{dev} -p {port} -s {s}"));
        p.pair_step(
            &format!("async_echo: ours (B) serves {c} connections from ours (A){how}"),
            wait,
            Side {
                host: B,
                cmd: &server,
                expect: "stopped after its client",
            },
            Side {
                host: A,
                cmd: &format!(
                    "{ours} client {dev} -p {port} --clients {c} --messages {m} -s {s} \"$PEER_IPV4\""
                ),
                expect: &format!("{} echoed and checked", c * m),
            },
        );
    }
    let (port, dev) = (18642, "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"");
    let client = format!("{ours} client {dev} -p {port}");
    p.pair_step(
        &format!(
            "async_echo: ours (B) serves with its defaults (no -s) on a 1 GiB host; a client \
             asking for 1M messages is refused, {c} connections of {s} bytes are served"
        ),
        port,
        Side {
            host: B,
            cmd: &echo_server(&ours, &format!("{dev} -p {port}")),
            expect: "stopped after its client",
        },
        Side {
            host: A,
            cmd: &format!(
                "out=$({client} --clients 1 --messages 1 -s 1M \"$PEER_IPV4\" 2>&1 || true); \
                 echo \"$out\"; case \"$out\" in *{REFUSAL}*) ;; *) exit 1;; esac; \
                 {client} --clients {c} --messages {m} -s {s} \"$PEER_IPV4\""
            ),
            expect: &format!("{} echoed and checked", c * m),
        },
    );
}

/// What a client whose messages exceed the default server's limit prints
/// (as the shell pattern of the step that checks it).
const REFUSAL: &str = "\"the server takes messages of at most 65536 bytes; -s 1048576 is larger\"";

/// The client's host dies under `perf send_bw -q 4`: B's link drops
/// everything it sends (no FIN, no ACK reaches A) and its client is
/// killed, 3 s into the run. A's server, its four queue pairs receiving,
/// rests on the control connection once they are quiet and fails
/// [`DEAD_PERF_TIMEOUT`] after the last message, all four flushed in one
/// drain: within [`DEAD_PERF_BOUND`] of its start (set-up, the 3 s, the
/// timeout, slack for two emulated hosts).
pub(super) fn dead_host_step(p: &mut Plan, progs: &Programs) {
    let perf = progs.ours("perf");
    let port = 18660;
    let (t, bound) = (DEAD_PERF_TIMEOUT, DEAD_PERF_BOUND);
    let dev = "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"";
    let client = format!(
        "{perf} send_bw {dev} -q 4 -s 65536 -n 200000 -p {port} --timeout {t} \"$PEER_IPV4\" & c=$!; \
         sleep 3; modprobe sch_netem; tc qdisc replace dev \"$RXE_NETDEV\" root netem loss 100% && \
         kill -9 $c; wait $c; echo 'host B died (its link dead, its client killed)'; sleep {}",
        bound + 10
    );
    p.pair_step(
        &format!(
            "perf send_bw -q 4: the client's host dies mid-run: A's server fails within {bound} s"
        ),
        port,
        Side {
            host: A,
            cmd: &format!("fails_within {bound} {perf} send_bw {dev} -p {port} --timeout {t}"),
            expect: &format!("no completion on any of the queue pairs within {t}s"),
        },
        Side {
            host: B,
            cmd: &client,
            expect: "host B died",
        },
    );
}

/// [`dead_host_step`]'s `--timeout` and bound, in seconds.
const DEAD_PERF_TIMEOUT: u32 = 10;
const DEAD_PERF_BOUND: u32 = 45;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_runs_both_ways_with_the_same_options() {
        let progs = Programs::for_tests();
        let mut p = Plan::new();
        perf_steps(&mut p, &progs);
        async_echo_step(&mut p, &progs);
        let text = p.text();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("pair_step "))
            .collect();
        assert_eq!(steps.len(), 1 + 2 * CM_RUNS.len() + 3, "{text}");
        assert!(
            steps[3].contains(
                "18633 0 '/t/perf write_lat -R -s 64 -n 200 -p 18633' \
             'ib_write_lat -d \"$RXE_DEVICE\" -R -s 64 -n 200 -p 18633 \"$PEER_IPV4\"' \
             'the client measures' '^ *64 +200 +[0-9.]+ +[0-9.]+'"
            ),
            "{}",
            steps[3]
        );
        assert!(steps[6].contains("'^ *8 +200 +"), "{}", steps[6]);
        assert!(steps[7].starts_with(
            "pair_step 'async_echo: ours (B) serves 8 connections from ours (A)' 18640 1 "
        ));
        assert!(steps[7].ends_with(" 'stopped after its client' '800 echoed and checked'"));
        assert!(steps[8].starts_with(
            "pair_step 'async_echo: ours (B) serves 8 connections from ours (A), RDMA CM' 18641 1 "
        ));
        assert!(steps[8].contains("--cm"), "{}", steps[8]);
        assert!(
            steps[9].contains(
                "/t/async_echo server -d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\" -p 18642 &"
            ),
            "{}",
            steps[9]
        );
        assert!(steps[9].contains("at most 65536 bytes"), "{}", steps[9]);

        let mut p = Plan::new();
        dead_host_step(&mut p, &progs);
        let step = p.text();
        assert!(
            step.contains("'fails_within 45 /t/perf send_bw -d"),
            "{step}"
        );
        assert!(step.contains("-q 4 -s 65536 -n 200000 -p 18660"), "{step}");
        assert!(step.contains("netem loss 100% && kill -9 $c"), "{step}");
    }
}
