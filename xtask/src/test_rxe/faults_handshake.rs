//! The two-host tier's lost-handshake steps: the accepting host drops the
//! first RDMA CM ready-to-use messages (RTUs) it receives (ci/two-hosts.sh's
//! `rtu_lost`), over a link that loses 3% each way (all but the client's
//! RTUs: `netem_keeps_rtus`, so that the filter always has them to drop),
//! while a CM server of ours serves a client that sends the moment it is
//! connected.
//!
//! The server then sees `ESTABLISHED` only when the accept's
//! retransmission brings another RTU, about 4 s later; the client, already
//! connected, has sent. A server that posts its receives only once
//! established answers that message with receiver-not-ready NAKs for those
//! seconds, and each packet the link loses meanwhile costs the client's
//! message one of its seven transport retries: before the servers posted
//! their receives ahead of the accept (`Incoming::prepare`), 4 of 4
//! `perf send_lat -R` clients failed this way with
//! `IBV_WC_RETRY_EXC_ERR`; with the control connection fixed, 3 of 4 still
//! failed when the data connection's RTU was lost too (the server accepted
//! it with no receive up for the client's next control message). Each step
//! passes only if RTUs were dropped and the programs checked what they
//! exchanged.

use super::pairs::{Programs, A, B};
use super::pairs_perf::echo_server;
use crate::rxe::{Plan, Side};

/// The link's loss during the steps, on both hosts.
const LOSS: &str = "loss 3%";

/// perf's device options on either host.
const PERF_DEV: &str = "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"";

/// Round trips of the perf step: enough to run the test after the
/// handshake, few enough for a lossy link (each lost packet waits an ACK
/// timeout, 0.54 s).
const PERF_ITERS: u32 = 100;

/// The steps, on ports `port` to `port + 2`: `perf send_lat -R` (ours on
/// both sides), rping (ours serves, rdma-core's connects) and
/// `async_echo --cm`.
pub(super) fn lost_rtu_steps(p: &mut Plan, progs: &Programs, port: u16) {
    // The server's host loses 3% of what it sends; the client's host too,
    // but not its RTUs: those are the server's filter's to drop (a link
    // that lost the one RTU of rping's connection first left the filter
    // nothing, and the step failed for want of a test).
    let lossy = |cmd: &str| format!("netem '{LOSS}' {cmd}");
    let lossy_but_rtus = |cmd: &str| format!("netem_keeps_rtus '{LOSS}' {cmd}");
    let perf = progs.ours("perf");
    let n = PERF_ITERS;
    let opts = format!("send_lat -R {PERF_DEV} -s 64 -n {n} -p {port}");
    p.pair_step(
        &format!("faults: the server's first RTU lost, {LOSS}: perf send_lat -R, the client's first message waits in a posted receive"),
        port,
        Side {
            host: A,
            // The control connection's RTU and the data connection's.
            cmd: &lossy(&format!("rtu_lost 2 {perf} {opts}")),
            expect: "dropped 2 RTUs",
        },
        Side {
            host: B,
            cmd: &lossy_but_rtus(&format!("{perf} {opts} \"$PEER_IPV4\"")),
            expect: &format!("^ *64 +{n} +[0-9.]+"),
        },
    );

    let port = port + 1;
    let rping = progs.ours("rping");
    let c = 10;
    p.pair_step(
        &format!(
            "faults: the server's first RTU lost, {LOSS}: rping, ours serves, rdma-core's connects"
        ),
        port,
        Side {
            host: A,
            cmd: &lossy(&format!(
                "rtu_lost 1 {rping} -s -a \"$RXE_IPV4\" -p {port} -v -C {c}"
            )),
            expect: &format!("server ping data: rdma-ping-{}: ", c - 1),
        },
        Side {
            host: B,
            cmd: &lossy_but_rtus(&format!(
                "rping -c -a \"$PEER_IPV4\" -p {port} -v -V -C {c}"
            )),
            expect: &format!("ping data: rdma-ping-{}: ", c - 1),
        },
    );

    let port = port + 1;
    let echo = progs.ours("async_echo");
    let server = echo_server(&echo, &format!("-d \"$RXE_DEVICE\" --cm -p {port} -s 1000"));
    p.pair_step(
        &format!("faults: the server's first RTU lost, {LOSS}: async_echo --cm, 2 clients, every echo checked"),
        port,
        Side {
            host: A,
            // The first client's connection loses its RTU.
            cmd: &lossy(&format!("rtu_lost 1 eval '{}'", server.replace('\'', "'\\''"))),
            expect: "stopped after its client",
        },
        Side {
            host: B,
            cmd: &lossy_but_rtus(&format!(
                "{echo} client -d \"$RXE_DEVICE\" --cm -p {port} --clients 2 --messages 50 \
                 -s 1000 \"$PEER_IPV4\""
            )),
            expect: "100 echoed and checked",
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_drops_the_rtu_on_the_server_over_a_lossy_link() {
        let progs = Programs::for_tests();
        let mut p = Plan::new();
        lost_rtu_steps(&mut p, &progs, 18731);
        let text = p.text();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("pair_step "))
            .collect();
        assert_eq!(steps.len(), 3, "{text}");
        for (k, step) in steps.iter().enumerate() {
            let port = 18731 + k;
            assert!(step.contains(&format!(" {port} 0 'netem '")), "{step}");
            // The client's host spares its RTUs from the loss.
            assert!(step.contains("' 'netem_keeps_rtus '\\''loss 3%"), "{step}");
            assert!(step.contains("loss 3%"), "{step}");
            // The server's side (A) drops the RTU, the client's does not.
            assert_eq!(step.matches("rtu_lost").count(), 1, "{step}");
        }
        assert!(
            steps[0].contains("rtu_lost 2 /t/perf send_lat -R -d"),
            "{}",
            steps[0]
        );
        assert!(steps[0].ends_with(" 'dropped 2 RTUs' '^ *64 +100 +[0-9.]+'"));
        assert!(steps[1].contains("rtu_lost 1 /t/rping -s"), "{}", steps[1]);
        assert!(steps[1].contains("'\\'' rping -c -a"), "{}", steps[1]);
        assert!(steps[2].contains("rtu_lost 1 eval"), "{}", steps[2]);
        assert!(steps[2].ends_with(" 'stopped after its client' '100 echoed and checked'"));
    }
}
