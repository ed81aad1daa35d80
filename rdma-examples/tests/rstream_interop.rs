//! Our `rstream` (the bench's program for the stream rows) against
//! rdmacm-utils' `rstream`, both ways, and against itself, with `-T v` on
//! both sides: each side fills what it sends with rstream's counting
//! bytes and checks every byte it receives, so a run passes only if both
//! programs exit 0, neither reports a verification failure, and both
//! print rstream's result line for the shape run. One case runs both over
//! TCP (`-T s`), the bench's reference column.
//!
//! `#[ignore]`d like every device test: `cargo xtask test-rxe` runs them on
//! rxe, whose IPv4 address comes from `RXE_IPV4`. The C server's stdout
//! is line-buffered (`stdbuf -oL`) so that its header line, printed once
//! it listens, says when to start the client.

mod common;

use common::perftest::ip;
use common::{args, pair, Finished};
use std::sync::atomic::{AtomicU16, Ordering};

const OURS: &str = env!("CARGO_BIN_EXE_rstream");

/// What rstream prints once it listens (the end of its header).
const READY: &str = "usec/xfer";

/// (size, count, iterations) of the runs: a ping-pong, bandwidth shapes
/// from one inline message to 1 MiB transfers (each split across the
/// peer's published buffers), and a size that is no multiple of anything.
const SHAPES: [(usize, u64, u64); 5] = [
    (64, 1, 200),
    (64, 500, 1),
    (4096, 200, 2),
    (100_003, 20, 1),
    (1 << 20, 8, 1),
];

/// A port per run: the tests of this binary run at once, on one device.
fn port() -> String {
    static NEXT: AtomicU16 = AtomicU16::new(19700);
    NEXT.fetch_add(1, Ordering::Relaxed).to_string()
}

/// rstream's abbreviation of a size in its result line.
fn size_text(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{}m", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{}k", s >> 10),
        // 100003 = 97.6 KiB: whole units at 10 or more.
        s if s >= 10 << 10 => format!("{}k", s >> 10),
        s => s.to_string(),
    }
}

/// Both sides exited 0 — the C program's verdict, which fails on a
/// byte it did not expect under `-T v` — and ours (`server_ours`,
/// `client_ours`) also said nothing failed verification and printed the
/// result line of a `custom` test at `size` with a positive time per
/// transfer. The C program's printed figures are not judged: its clock
/// calibration can print `inf` on a loaded machine.
#[track_caller]
fn assert_verified(
    (server, server_ours): (&Finished, bool),
    (client, client_ours): (&Finished, bool),
    size: usize,
) {
    server.assert_ok(client);
    client.assert_ok(server);
    for side in [(server, server_ours), (client, client_ours)]
        .into_iter()
        .filter(|(_, ours)| *ours)
        .map(|(side, _)| side)
    {
        assert!(
            !side.output.contains("verification failed"),
            "{}:\n{}",
            side.label,
            side.output
        );
        let line = side
            .output
            .lines()
            .find(|l| l.starts_with("custom"))
            .unwrap_or_else(|| panic!("{}: no result line:\n{}", side.label, side.output));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 8, "{}: {line}", side.label);
        assert_eq!(fields[1], size_text(size), "{}: {line}", side.label);
        let per_xfer: f64 = fields[7].parse().expect("usec/xfer");
        assert!(per_xfer > 0.0, "{}: {line}", side.label);
    }
}

/// The options of one shape on both sides (`extra` first: `-T s`).
fn shape_args(extra: &[&str], (size, count, iterations): (usize, u64, u64)) -> Vec<String> {
    let mut v = args(extra);
    v.extend(args(&["-T", "v"]));
    for (flag, n) in [("-S", size as u64), ("-C", count), ("-I", iterations)] {
        v.push(flag.into());
        v.push(n.to_string());
    }
    v
}

/// `server` listening (`-b` the device's address), then `client`
/// connecting to it, with `extra` and the shape's options.
fn run(server: &str, client: &str, extra: &[&str], shape: (usize, u64, u64)) {
    let port = port();
    let mut s = shape_args(extra, shape);
    s.extend(args(&["-b", &ip(), "-p", &port]));
    let mut c = shape_args(extra, shape);
    c.extend(args(&["-s", &ip(), "-p", &port]));
    // The C program's stdout is a block-buffered pipe: line-buffer it so
    // that its header line says it listens.
    let (program, mut words) = if server == OURS {
        (OURS, Vec::new())
    } else {
        ("stdbuf", args(&["-oL", server]))
    };
    words.extend(s);
    let (s, c) = pair((program, words), Some(READY), (client, c));
    assert_verified((&s, server == OURS), (&c, client == OURS), shape.0);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_rstream_server_serves_the_c_client_verified() {
    for shape in SHAPES {
        run(OURS, "rstream", &[], shape);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_rstream_client_against_the_c_server_verified() {
    for shape in SHAPES {
        run("rstream", OURS, &[], shape);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_rstream_against_itself_verified() {
    for shape in [SHAPES[0], SHAPES[3]] {
        run(OURS, OURS, &[], shape);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn our_rstream_over_tcp_against_the_c_program() {
    run(OURS, "rstream", &["-T", "s"], SHAPES[2]);
    run("rstream", OURS, &["-T", "s"], SHAPES[0]);
}
