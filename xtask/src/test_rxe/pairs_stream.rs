//! The two-host tier's byte-stream steps: our `rstream` and `rcopy`
//! (rdma-examples, over `rdma_safe::stream`) against rdmacm-utils' across
//! the link, both directions, and ours against ours — then our `rstream`
//! under a lossy and a reordering link.
//!
//! `rstream -T v` checks every byte it receives on both sides (a failed
//! check exits non-zero: rdmacm-utils' program is judged by that alone,
//! ours by its result line too); an `rcopy` step's server compares the file it
//! received with the one the client sent (both hosts generate it the same
//! way) and says `copy verified` on a line of its own (rcopy ends its
//! last line without a newline).

use super::faults::under;
use super::pairs::{Programs, A, B};
use crate::rxe::{Plan, Side};

/// rstream's options for the interop steps: 64 KiB transfers, 20 each way
/// per iteration, every byte verified.
const RSTREAM_SHAPE: &str = "-T v -S 65536 -C 20";
/// The same under netem, smaller (a lossy TCG link is slow).
const RSTREAM_FAULT_SHAPE: &str = "-T v -S 4096 -C 100";
/// rstream's result line (its `custom` test, whatever the size).
const RSTREAM_DONE: &str = "^custom ";
/// The netem cases the stream runs under, on both hosts.
const STREAM_NETEM: [(&str, &str); 2] = [
    ("loss 5%", "loss 5%"),
    ("reorder 25% (delay 5 ms)", "delay 5ms reorder 25% 50%"),
];
/// What an rcopy step copies: `seq 1 N` (about 2 MB), made on both hosts.
const RCOPY_LINES: u32 = 300_000;

/// The stream steps, after the tier's pairs.
pub(super) fn stream_steps(p: &mut Plan, progs: &Programs) {
    let ours = progs.ours("rstream");
    let ours = ours.as_str();
    let trio = [
        (
            A,
            ours,
            "rstream",
            "ours (A) serves, rdmacm-utils' (B) connects",
        ),
        (
            A,
            "rstream",
            ours,
            "rdmacm-utils' (A) serves, ours (B) connects",
        ),
        (B, ours, ours, "ours (B) serves, ours (A) connects"),
    ];
    let mut port = 18750;
    for (server_host, server, client, how) in trio {
        rstream_pair(
            p,
            port,
            server_host,
            (server, client),
            RSTREAM_SHAPE,
            "",
            how,
        );
        port += 1;
    }
    for (label, spec) in STREAM_NETEM {
        let how = format!("under {label}, ours both sides");
        rstream_pair(p, port, A, (ours, ours), RSTREAM_FAULT_SHAPE, spec, &how);
        port += 1;
    }
    let ours = progs.ours("rcopy");
    let ours = ours.as_str();
    let pairs = [
        (
            A,
            ours,
            "rcopy",
            "ours (A) serves, rdmacm-utils' (B) copies",
        ),
        (
            A,
            "rcopy",
            ours,
            "rdmacm-utils' (A) serves, ours (B) copies",
        ),
    ];
    for (server_host, server, client, how) in pairs {
        rcopy_pair(p, port, server_host, (server, client), how);
        port += 1;
    }
}

/// One rstream pair step on `port`: `server` on `server_host`, `client`
/// on the other, both with `shape`, under netem `spec` (empty: none).
fn rstream_pair(
    p: &mut Plan,
    port: u16,
    server_host: usize,
    (server, client): (&str, &str),
    shape: &str,
    spec: &str,
    how: &str,
) {
    // rdmacm-utils' rstream is judged by its exit status (it fails on a
    // byte `-T v` did not expect), ours by its result line too.
    let expect = |program: &str| {
        if program == "rstream" {
            ""
        } else {
            RSTREAM_DONE
        }
    };
    let (server_expect, client_expect) = (expect(server), expect(client));
    let server = format!("{server} {shape} -b \"$RXE_IPV4\" -p {port}");
    let client = format!("{client} {shape} -s \"$PEER_IPV4\" -p {port}");
    p.pair_step(
        &format!("stream: rstream -T v, {how}"),
        port,
        Side {
            host: server_host,
            cmd: &under(spec, &server),
            expect: server_expect,
        },
        Side {
            host: 1 - server_host,
            cmd: &under(spec, &client),
            expect: client_expect,
        },
    );
}

/// One rcopy pair step on `port`: `server` (serving until the client has
/// ended) on `server_host`, `client` copying the generated file to it.
fn rcopy_pair(
    p: &mut Plan,
    port: u16,
    server_host: usize,
    (server, client): (&str, &str),
    how: &str,
) {
    let dir = format!("\"${{TMPDIR:-/tmp}}/rcopy-{port}\"");
    let file = format!("mkdir -p {dir} && seq 1 {RCOPY_LINES} > {dir}/sent");
    let server = format!(
        "{file} && rm -f {dir}/got && {{ {server} -p {port} & s=$!; \
         until [ -e \"$PAIR_CLIENT_DONE\" ]; do kill -0 $s || exit 1; sleep 0.5; done; \
         kill $s; wait $s; cmp {dir}/sent {dir}/got && echo && echo 'copy verified'; }}"
    );
    let client = format!(
        "{file} && {client} {dir}/sent \"$PEER_IPV4\":{dir}/got -p {port} && echo 'copy sent'"
    );
    p.pair_step(
        &format!("stream: rcopy of {RCOPY_LINES} lines, {how}"),
        port,
        Side {
            host: server_host,
            cmd: &server,
            expect: "^copy verified$",
        },
        Side {
            host: 1 - server_host,
            cmd: &client,
            expect: "^copy sent$",
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps() -> Vec<String> {
        let mut p = Plan::new();
        stream_steps(&mut p, &Programs::for_tests());
        p.text()
            .lines()
            .filter(|l| l.starts_with("pair_step "))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn rstream_crosses_both_ways_and_under_netem_and_rcopy_both_ways() {
        let steps = steps();
        assert_eq!(steps.len(), 3 + 2 + 2, "{steps:#?}");
        assert!(
            steps[0].contains("'/t/rstream -T v -S 65536 -C 20 -b \"$RXE_IPV4\" -p 18750'"),
            "{}",
            steps[0]
        );
        assert!(
            steps[0].contains("'rstream -T v -S 65536 -C 20 -s \"$PEER_IPV4\" -p 18750'"),
            "{}",
            steps[0]
        );
        assert!(
            steps[1].contains("'rstream -T v -S 65536 -C 20 -b"),
            "{}",
            steps[1]
        );
        // The C program's side has no expectation: its exit status is
        // its verdict.
        assert!(steps[0].ends_with("'^custom ' ''"), "{}", steps[0]);
        assert!(steps[1].ends_with("'' '^custom '"), "{}", steps[1]);
        assert!(steps[2].contains(" 18752 1 "), "{}", steps[2]);
        assert!(steps[2].ends_with("'^custom ' '^custom '"), "{}", steps[2]);
        assert!(
            steps[3].contains("loss 5%'\\'' /t/rstream -T v -S 4096"),
            "{}",
            steps[3]
        );
        assert!(steps[4].contains("reorder 25% 50%"), "{}", steps[4]);
        assert!(steps[5].contains("/t/rcopy -p 18755 &"), "{}", steps[5]);
        assert!(
            steps[5].contains("rcopy \"${TMPDIR:-/tmp}/rcopy-18755\"/sent \"$PEER_IPV4\":"),
            "{}",
            steps[5]
        );
        assert!(
            steps[5].ends_with("'^copy verified$' '^copy sent$'"),
            "{}",
            steps[5]
        );
        assert!(steps[6].contains("{ rcopy -p 18756 &"), "{}", steps[6]);
    }
}
