//! The two-host tier's fault steps about connections rather than packets:
//! hosts whose MTUs differ, a path cut for longer than the library's retry
//! budget under `async_echo --reconnect`, a peer host that dies
//! mid-transfer, and connecting where nobody answers. Each has its bound,
//! and whatever the programs report as done they checked.

use super::faults::{DEAD_BOUND_SECS, DEAD_TIMEOUT_SECS, PERF_DEV};
use super::pairs::{Programs, A, B};
use super::pairs_perf::echo_server;
use crate::rxe::{Plan, Side};

/// The cut under `async_echo --reconnect`: longer than the library's
/// default retry budget (4.096 µs · 2^17 · 7 ≈ 3.8 s), so connections break.
const RECONNECT_CUT_SECS: u32 = 8;

/// The steps, on TCP ports from `port`; returns the next free port.
pub(super) fn steps(p: &mut Plan, progs: &Programs, port: u16) -> u16 {
    mtu_steps(p, progs, port);
    reconnect_step(p, progs, port + 2);
    host_death_step(p, progs, port + 3);
    connect_failures(p, progs, port + 4);
    port + 5
}

/// The peer host dies mid-transfer: B's clients are killed while B's link
/// drops everything it sends, so neither a disconnect nor anything else
/// reaches A. A's `async_echo --cm` server keeps serving its other clients
/// (two connections from A itself, every echo checked) and ends B's
/// connections within its bound: a send to B fails once the retry budget
/// (3.8 s) is spent, a connection that merely waits closes after the
/// server's `--timeout` (10 s); A waits at most [`DEAD_BOUND_SECS`] for
/// both to end.
fn host_death_step(p: &mut Plan, progs: &Programs, port: u16) {
    let echo = progs.ours("async_echo");
    let bound = DEAD_BOUND_SECS;
    let dev = "-d \"$RXE_DEVICE\" --cm";
    let server = format!(
        "log=$(mktemp); {echo} server {dev} -p {port} -s 1000 --timeout 10 2>\"$log\" & s=$!; \
         sleep 4; {echo} client {dev} -p {port} --clients 2 --messages 1500 -s 1000 \"$RXE_IPV4\" \
         || exit 1; t0=$SECONDS; \
         until [ \"$(grep -c \"Some(192.168.77.2.*connection ended\" \"$log\")\" -ge 2 ]; do \
         [ $((SECONDS - t0)) -lt {bound} ] || {{ cat \"$log\"; exit 1; }}; \
         kill -0 $s || {{ cat \"$log\"; exit 1; }}; sleep 0.5; done; \
         grep \"connection ended\" \"$log\"; \
         until [ -e \"$PAIR_CLIENT_DONE\" ]; do kill -0 $s || exit 1; sleep 0.5; done; \
         kill $s; wait $s; [ $? = 143 ] && echo 'A served its own clients and ended the connections of the dead host'"
    );
    let client = format!(
        "{echo} client {dev} -p {port} --clients 2 --messages 100000 -s 1000 \"$PEER_IPV4\" & c=$!; \
         sleep 3; modprobe sch_netem; tc qdisc replace dev \"$RXE_NETDEV\" root netem loss 100% && \
         kill -9 $c; wait $c; echo 'host B died (its link dead, its clients killed)'; sleep {}",
        bound + 10
    );
    p.pair_step(
        &format!(
            "faults: the peer host dies mid-transfer: A's server keeps serving its own clients and ends B's connections within {bound} s"
        ),
        port,
        Side {
            host: A,
            cmd: &server,
            expect: "ended the connections of the dead host",
        },
        Side {
            host: B,
            cmd: &client,
            expect: "host B died",
        },
    );
}

/// Different MTUs on the two hosts: A's link NIC at 4200 bytes (rxe0's
/// active MTU 4096), B's at 1500 (1024). `perf write_bw` of 64 KiB
/// messages agrees on the smaller path MTU (it prints it: `MTU: 1024`) and
/// verifies every byte; `async_echo --cm` with 4000-byte messages, its
/// client on the large-MTU host (the CM's active side), checks every echo.
fn mtu_steps(p: &mut Plan, progs: &Programs, port: u16) {
    let perf = progs.ours("perf");
    p.pair_step(
        "faults: MTU 4096 on A, 1024 on B: perf write_bw 64 KiB agrees on 1024, data verified",
        port,
        Side {
            host: A,
            cmd: &format!("with_mtu 4200 {perf} write_bw {PERF_DEV} -p {port}"),
            expect: "data verified",
        },
        Side {
            host: B,
            cmd: &format!("{perf} write_bw {PERF_DEV} -s 65536 -n 100 -p {port} \"$PEER_IPV4\""),
            expect: "MTU: 1024",
        },
    );
    let port = port + 1;
    let echo = progs.ours("async_echo");
    let server = echo_server(&echo, &format!("-d \"$RXE_DEVICE\" --cm -p {port} -s 4000"));
    p.pair_step(
        "faults: MTU 4096 on A, 1024 on B: async_echo --cm from A, 4000-byte messages checked",
        port,
        Side {
            host: B,
            cmd: &server,
            expect: "stopped after its client",
        },
        Side {
            host: A,
            cmd: &format!(
                "with_mtu 4200 {echo} client -d \"$RXE_DEVICE\" --cm -p {port} --clients 2 \
                 --messages 50 -s 4000 \"$PEER_IPV4\""
            ),
            expect: "100 echoed and checked",
        },
    );
}

/// A path dead for [`RECONNECT_CUT_SECS`] under `async_echo --cm
/// --reconnect`: the clients' connections break (the default retry budget,
/// about 3.8 s, is shorter than the cut), each client connects again with
/// backoff once
/// the path is back and resumes at its lost request; every message is
/// echoed and checked in the end, and the lost ones are reported.
fn reconnect_step(p: &mut Plan, progs: &Programs, port: u16) {
    let echo = progs.ours("async_echo");
    let (clients, messages) = (2, 1500);
    let dev = "-d \"$RXE_DEVICE\" --cm";
    let server = echo_server(&echo, &format!("{dev} -p {port} -s 1000"));
    let client = format!(
        "CUT_AFTER='client 0: connected' link_cut blackhole {RECONNECT_CUT_SECS} {echo} client {dev} \
         -p {port} --timeout 60 --reconnect --clients {clients} --messages {messages} -s 1000 \
         \"$PEER_IPV4\""
    );
    p.pair_step(
        &format!(
            "faults: path dead for {RECONNECT_CUT_SECS} s under async_echo --cm --reconnect: connections made again, every message echoed"
        ),
        port,
        Side {
            host: A,
            cmd: &server,
            expect: "stopped after its client",
        },
        Side {
            host: B,
            cmd: &client,
            // Exit 0: every client echoed and checked all its messages;
            // the line below: at least one connection broke and was made
            // again.
            expect: "requests lost to broken connections",
        },
    );
}

/// Connecting by address where nobody answers, through the RDMA CM
/// (`async_echo client --cm`, `--timeout` [`DEAD_TIMEOUT_SECS`]): to a
/// host that is down (A's NIC drops everything it sends, so neither its
/// reject nor anything else comes back) and to an address no host has (no
/// neighbour: address resolution fails). Each is a clear error within
/// [`DEAD_BOUND_SECS`]: the CM's own failure event or the bounded wait's.
fn connect_failures(p: &mut Plan, progs: &Programs, port: u16) {
    let echo = progs.ours("async_echo");
    let t = DEAD_TIMEOUT_SECS;
    let bound = DEAD_BOUND_SECS;
    let client = |addr: &str| {
        format!(
            "fails_within {bound} {echo} client -d \"$RXE_DEVICE\" --cm -p {port} --timeout {t} \
             --clients 1 --messages 1 {addr}"
        )
    };
    let expect =
        "did not finish within|RDMA_CM_EVENT_(UNREACHABLE|ADDR_ERROR|ROUTE_ERROR|REJECTED)";
    p.pair_step(
        &format!("faults: connecting to a host that is down (A drops all it sends): a clear error within {bound} s"),
        0,
        Side {
            host: A,
            cmd: &format!(
                "modprobe sch_netem; tc qdisc replace dev \"$RXE_NETDEV\" root netem loss 100% && \
                 sleep {} && echo 'host A was down'",
                t + 8
            ),
            expect: "host A was down",
        },
        Side {
            host: B,
            cmd: &client("\"$PEER_IPV4\""),
            expect,
        },
    );
    p.pair_step(
        &format!("faults: connecting to an address no host has (no neighbour): a clear error within {bound} s"),
        0,
        Side {
            host: A,
            cmd: "echo 'nothing to serve'",
            expect: "",
        },
        Side {
            host: B,
            cmd: &client("192.168.77.3"),
            expect,
        },
    );
}
