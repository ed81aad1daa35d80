//! The example programs against peers that misbehave: silent, sending
//! garbage, truncated or oversized messages, or stopped (SIGSTOP) midway;
//! servers given a bad device or GID; bad flags. Every case must end with
//! a clear error (exit status 1, or 2 for a usage error) within a bound —
//! the programs run with `--timeout 3`, and the bound is generous
//! ([`BOUND`]) — never a hang, a panic or an abort.
//!
//! The scripted peers are plain TCP in this file; where a peer must get
//! past the queue pair handshake it echoes the program's own endpoint
//! back (the program's queue pair then connects to itself).
//!
//! Tests that need no device run everywhere; the others are `#[ignore]`d
//! and run under `cargo xtask test-rxe`.

mod common;

use common::*;
use rdma_safe::{channel::ENDPOINT_ENCODED_LEN, RemoteMemoryRegion};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// The programs' `--timeout`.
const PEER_TIMEOUT: &str = "3";

/// How long a case may take before it counts as a hang (the timeout plus
/// a wide margin for a loaded emulated machine).
const BOUND: Duration = Duration::from_secs(45);

/// Waits for `p` to end and checks it failed with `code` (not killed, not
/// a signal such as an abort) and printed `needle`.
#[track_caller]
fn fails_with(p: Proc, code: i32, needle: &str) -> Finished {
    let f = p.finish(Instant::now() + BOUND);
    assert!(
        f.status.is_some(),
        "{} hung: killed after {BOUND:?}; output:\n{}",
        f.label,
        f.output
    );
    assert_eq!(
        f.status.and_then(|s| s.code()),
        Some(code),
        "{}: status {:?}; output:\n{}",
        f.label,
        f.status,
        f.output
    );
    f.assert_has(needle);
    f
}

fn common_args(port: u16, gid_flag: &str) -> Vec<String> {
    args(&[
        "-d",
        &device(),
        gid_flag,
        &gid_index(),
        "-p",
        &port.to_string(),
        "--timeout",
        PEER_TIMEOUT,
    ])
}

fn with(mut base: Vec<String>, more: &[impl AsRef<str>]) -> Vec<String> {
    base.extend(more.iter().map(|s| s.as_ref().to_owned()));
    base
}

/// Connects to a server's port (retrying while it starts).
fn connect(port: u16) -> TcpStream {
    let deadline = Instant::now() + BOUND;
    loop {
        match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            Ok(s) => {
                s.set_read_timeout(Some(BOUND)).unwrap();
                return s;
            }
            Err(e) if Instant::now() > deadline => panic!("port {port}: {e}"),
            Err(_) => thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The peer's half of `Channel::handshake`, echoing the program's own
/// endpoint back.
fn echo_handshake(s: &mut TcpStream) {
    let mut ep = [0u8; ENDPOINT_ENCODED_LEN];
    s.read_exact(&mut ep).unwrap();
    s.write_all(&ep).unwrap();
    let mut ready = [0u8; 1];
    s.read_exact(&mut ready).unwrap();
    s.write_all(b"R").unwrap();
}

/// Reads one line (the programs' replies).
fn line(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while s.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        out.push(b[0]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends SIGSTOP (or SIGCONT) to `p`.
fn signal(p: &Proc, sig: i32) {
    let pid = i32::try_from(p.child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

// ----- no device needed ----------------------------------------------------------

#[test]
fn bad_flags_are_usage_errors() {
    for (program, argv, needle) in [
        (
            DEVICES,
            &["-i", "256"][..],
            "-i/--ib-port: 256 is out of range (1..=255)",
        ),
        (DEVICES, &["-i", "0"], "out of range"),
        (
            PERF,
            &["write_bw", "-s", "0"],
            "-s/--size: 0 is out of range",
        ),
        (PERF, &["write_bw", "-s", "1T"], "not a number"),
        (PERF, &["write_bw", "-r", "4294967297"], "-r/--rx-depth"),
        (PERF, &["write_bw", "-a", "-s", "64"], "cannot be used with"),
        (PERF, &["nosuch_test"], "unknown test"),
        (OURS, &["-s", "2G"], "-s/--size: 2147483648 is out of range"),
        (OURS, &["--timeout", "0"], "--timeout: 0 is out of range"),
        (ONE_SIDED, &["--iovs", "17"], "--iovs: 17 is out of range"),
        (ONE_SIDED, &["--size", "183G"], "--size"),
        (
            env!("CARGO_BIN_EXE_async_echo"),
            &[
                "client",
                "--clients",
                "4096",
                "--messages",
                "100000000",
                "127.0.0.1",
            ],
            "round trips exceed",
        ),
    ] {
        fails_with(spawn("bad flag", program, &args(argv)), 2, needle);
    }
}

// ----- servers fail at start-up ---------------------------------------------------

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn servers_check_device_and_gid_before_listening() {
    let dev = device();
    let async_echo = env!("CARGO_BIN_EXE_async_echo");
    for (program, gid_flag, test) in [
        (PERF, "-x", &["write_bw"][..]),
        // rdma_cm mode: the connection manager picks the device by address,
        // so -d, -i and -x are checked apart, before listening.
        (PERF, "-x", &["write_bw", "-R"][..]),
        (ONE_SIDED, "-x", &[][..]),
        (OURS, "-g", &[][..]),
        (async_echo, "-x", &["server", "-s", "1000"][..]),
    ] {
        let test = test.to_vec();
        let p = spawn(
            "server",
            program,
            &with(args(&test), &["-d", "nosuch", "-p", "19300"]),
        );
        let f = fails_with(p, 1, "nosuch");
        assert!(!f.output.contains("waiting"), "{}", f.output);
        let p = spawn(
            "server",
            program,
            &with(args(&test), &["-d", &dev, gid_flag, "99", "-p", "19301"]),
        );
        let f = fails_with(p, 1, "GID index 99");
        assert!(
            !f.output.contains("waiting") && !f.output.contains("local address"),
            "{}",
            f.output
        );
        let p = spawn(
            "server",
            program,
            &with(args(&test), &["-d", &dev, "-i", "2", "-p", "19302"]),
        );
        fails_with(p, 1, "port 2");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_says_when_the_size_is_too_large_for_the_machine() {
    // Two 1 GiB buffers: on the 2 GiB test VM the allocation or the
    // registration fails; elsewhere the server may start. Never an abort.
    let p = spawn(
        "server",
        OURS,
        &with(common_args(19303, "-g"), &["-s", "1G"]),
    );
    if p.wait_for_line("local address", Duration::from_secs(20)) {
        let f = p.finish(Instant::now());
        assert!(f.status.is_none(), "{}", f.output);
    } else {
        let f = fails_with(p, 1, "rc_pingpong: ");
        assert!(
            f.output
                .contains("-s 1073741824 bytes: out of memory allocating 2147483648 bytes")
                || f.output.contains("ibv_reg_mr"),
            "{}",
            f.output
        );
    }
}

// ----- silent peers --------------------------------------------------------------

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_silent_client_is_a_timeout() {
    for (i, (program, gid_flag, ready)) in [
        (PERF, "-x", "waiting for a client"),
        (ONE_SIDED, "-x", "waiting on TCP port"),
        (OURS, "-g", "local address"),
    ]
    .into_iter()
    .enumerate()
    {
        let port = 19310 + i as u16;
        let mut argv = common_args(port, gid_flag);
        if program == PERF {
            argv.insert(0, "write_bw".into());
        }
        let p = spawn("server", program, &argv);
        assert!(p.wait_for_line(ready, BOUND), "{}", p.label);
        let _silent = connect(port);
        fails_with(p, 1, "timed out after 3s");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_silent_server_is_a_timeout() {
    for (i, (program, gid_flag)) in [(PERF, "-x"), (ONE_SIDED, "-x"), (OURS, "-g")]
        .into_iter()
        .enumerate()
    {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut argv = with(common_args(port, gid_flag), &["127.0.0.1"]);
        if program == PERF {
            argv.insert(0, "write_bw".into());
        }
        let p = spawn(&format!("client {i}"), program, &argv);
        let (_silent, _) = listener.accept().unwrap();
        fails_with(p, 1, "timed out after 3s");
    }
}

// ----- garbage, truncated and oversized messages --------------------------------

/// Starts a perf server for `test`, sends it `message`, and returns it with
/// the connection.
fn perf_server_gets(test: &str, port: u16, message: &[u8]) -> (Proc, TcpStream) {
    let p = spawn(
        "server",
        PERF,
        &with(args(&[test]), &common_args(port, "-x")),
    );
    assert!(
        p.wait_for_line("waiting for a client", BOUND),
        "{}",
        p.label
    );
    let mut s = connect(port);
    // The server may close before taking it all (an overlong line).
    let _ = s.write_all(message);
    (p, s)
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_server_refuses_what_a_client_may_not_ask() {
    let params = |test: &str, sizes: &str, rx: &str| {
        format!(
            "PERF1 test={test} iters=10 tx_depth=1 rx_depth={rx} inline=auto events=0 sizes={sizes}\n"
        )
    };
    let cases = [
        (
            "write_bw",
            params("write_bw", "1099511627776", "1"),
            "-s/--size: 1099511627776 is out of range",
        ),
        (
            "write_bw",
            params("write_bw", "18446744073709551615", "1"),
            "-s/--size",
        ),
        (
            "write_lat",
            params("write_lat", "0", "1"),
            "-s/--size: 0 is out of range",
        ),
        (
            "send_bw",
            params("send_bw", "64", "4294967297"),
            "-r/--rx-depth",
        ),
        (
            "write_bw",
            "GET / HTTP/1.0\r\n\r\n".to_owned(),
            "not a perf client",
        ),
        (
            "write_bw",
            format!("{}\n", "x".repeat(100_000)),
            "longer than 4096 bytes",
        ),
    ];
    for (i, (test, message, needle)) in cases.into_iter().enumerate() {
        let (p, mut s) = perf_server_gets(test, 19320 + i as u16, message.as_bytes());
        let f = fails_with(p, 1, needle);
        if !needle.contains("longer") {
            let answer = line(&mut s);
            assert!(answer.starts_with("ERR "), "{answer:?}\n{}", f.output);
        }
    }
    // Truncated: half a parameter line, then the connection closes.
    let (p, s) = perf_server_gets("write_bw", 19330, b"PERF1 test=write_bw iters=");
    drop(s);
    fails_with(p, 1, "closed the connection");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_server_rejects_bad_addresses() {
    for (i, message) in [&b"garbage"[..], &[b'z'; 52], b"0000:1000000:000000:"]
        .into_iter()
        .enumerate()
    {
        let port = 19340 + i as u16;
        let p = spawn("server", OURS, &common_args(port, "-g"));
        assert!(p.wait_for_line("local address", BOUND), "{}", p.label);
        let mut s = connect(port);
        let _ = s.write_all(message);
        drop(s); // truncated where shorter than 52 bytes
        let f = p.finish(Instant::now() + BOUND);
        assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{}", f.output);
        assert!(
            f.output.contains("Couldn't read remote address")
                || f.output.contains("address message"),
            "{}",
            f.output
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_sided_client_refuses_an_oversized_region() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let p = spawn(
        "client",
        ONE_SIDED,
        &with(common_args(port, "-x"), &["127.0.0.1"]),
    );
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    echo_handshake(&mut s);
    s.write_all(&RemoteMemoryRegion::new(0x1000, 183 << 30, 1).to_bytes())
        .unwrap();
    fails_with(p, 1, "the limit is 1073741824 (--size)");
}

// ----- stopped peers -------------------------------------------------------------

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_passive_server_gives_up_on_a_client_that_stops() {
    // The client says GO's parameters, gets past the handshake, then goes
    // quiet where a real one would be writing and saying ALIVE: the
    // server's wait for DONE is the timeout after the last line.
    let line_ =
        "PERF1 test=write_bw iters=10 tx_depth=4 rx_depth=1 inline=auto events=0 sizes=4096\n";
    let (p, mut s) = perf_server_gets("write_bw", 19350, line_.as_bytes());
    assert_eq!(line(&mut s), "OK");
    echo_handshake(&mut s);
    let mut region = [0u8; rdma_safe::memory::REMOTE_REGION_ENCODED_LEN];
    s.read_exact(&mut region).unwrap();
    assert_eq!(line(&mut s), "GO 4096");
    fails_with(p, 1, "timed out");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_client_gives_up_on_a_stopped_server() {
    // Stopped after the first size's verdict: the client waits for the
    // next GO (or the verdict) and must give up.
    let port = 19351;
    let server = spawn(
        "server",
        PERF,
        &with(args(&["write_bw", "--json"]), &common_args(port, "-x")),
    );
    assert!(server.wait_for_line("waiting for a client", BOUND));
    let client = spawn(
        "client",
        PERF,
        &with(
            args(&["write_bw", "-a", "-n", "5", "-t", "4", "127.0.0.1"]),
            &common_args(port, "-x"),
        ),
    );
    assert!(
        server.wait_for_line("\"role\":\"server\"", BOUND),
        "{}",
        server.label
    );
    signal(&server, libc::SIGSTOP);
    let f = fails_with(client, 1, "timed out");
    signal(&server, libc::SIGCONT);
    let _ = server.finish(Instant::now());
    assert!(!f.output.contains("data verified"), "{}", f.output);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_sided_server_gives_up_on_a_stopped_client() {
    // Stopped after its first round: its heartbeat stops with it.
    let port = 19352;
    let server = spawn("server", ONE_SIDED, &common_args(port, "-x"));
    assert!(server.wait_for_line("waiting on TCP port", BOUND));
    let client = spawn(
        "client",
        ONE_SIDED,
        &with(common_args(port, "-x"), &["-n", "100000", "127.0.0.1"]),
    );
    assert!(client.wait_for_line("round 1:", BOUND), "{}", client.label);
    signal(&client, libc::SIGSTOP);
    fails_with(server, 1, "timed out after 3s");
    signal(&client, libc::SIGCONT);
    let _ = client.finish(Instant::now());
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_sided_client_gives_up_on_a_stopped_server() {
    // Stopped once the client is connected: the client's rounds go on (the
    // kernel serves RDMA for the stopped process); its DONE gets no answer.
    let port = 19353;
    let server = spawn("server", ONE_SIDED, &common_args(port, "-x"));
    assert!(server.wait_for_line("waiting on TCP port", BOUND));
    let client = spawn(
        "client",
        ONE_SIDED,
        &with(common_args(port, "-x"), &["-n", "50", "127.0.0.1"]),
    );
    assert!(server.wait_for_line("connected", BOUND), "{}", server.label);
    signal(&server, libc::SIGSTOP);
    let f = fails_with(client, 1, "timed out after 3s");
    assert!(!f.output.contains("data verified"), "{}", f.output);
    signal(&server, libc::SIGCONT);
    let _ = server.finish(Instant::now());
}

// ----- rc_pingpong's size check, both directions -------------------------------

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_names_a_size_mismatch_either_way() {
    for (i, (server_size, client_size)) in
        [("4096", "8192"), ("8192", "4096")].into_iter().enumerate()
    {
        let port = 19360 + i as u16;
        let base = with(common_args(port, "-g"), &["-n", "5"]);
        let server = spawn("server", OURS, &with(base.clone(), &["-s", server_size]));
        assert!(server.wait_for_line("local address", BOUND));
        let client = spawn(
            "client",
            OURS,
            &with(base, &["-s", client_size, "127.0.0.1"]),
        );
        let s = server.finish(Instant::now() + BOUND);
        let c = client.finish(Instant::now() + BOUND);
        assert!(
            s.status.is_some() && c.status.is_some(),
            "{}\n{}",
            s.output,
            c.output
        );
        assert_eq!(s.status.and_then(|x| x.code()), Some(1), "{}", s.output);
        // The server receives first: a message larger than its buffer (a
        // local QP operation error on rxe) or shorter than its -s; either
        // way it names the likely cause. The client then waits in vain and
        // times out.
        s.assert_has("same -s on both sides?");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_rdma_cm_server_gives_up_on_a_stopped_client() {
    // With -R: connected through the RDMA CM, then the client is stopped
    // (after or during its transfer). The server waits through the
    // client's run for its "done" at most its timeout plus the run at a
    // floor rate (1000 operations and 1 MiB per second: 3 + 2 + 7.8 s
    // here), then fails: a stopped client costs a bounded wait, not a
    // hang. (With the default -n 5000 -s 65536 that allowance is 320 s,
    // spent busy-polling: the wait cannot tell a stopped client from a
    // slow one, since one-sided writes show the server no progress.)
    let port = 19352;
    let ip = std::env::var("RXE_IPV4").unwrap_or_else(|_| "10.0.2.15".into());
    let base = |more: &[&str]| {
        let mut a = args(&["write_bw", "-R", "-d", &device(), "-p", &port.to_string()]);
        a.extend(args(&["--timeout", PEER_TIMEOUT]));
        a.extend(args(more));
        a
    };
    // Both sides with the same options, as perftest's protocol wants: the
    // server's allowance comes from its own -n and -s.
    let server = spawn("server", PERF, &base(&["-s", "4096", "-n", "2000"]));
    thread::sleep(Duration::from_secs(2));
    let client = spawn("client", PERF, &base(&["-s", "4096", "-n", "2000000", &ip]));
    // Past the connection, and most likely past the transfer.
    thread::sleep(Duration::from_secs(4));
    signal(&client, libc::SIGSTOP);
    let start = Instant::now();
    let f = server.finish(Instant::now() + BOUND);
    let took = start.elapsed();
    signal(&client, libc::SIGCONT);
    let _ = client.finish(Instant::now());
    assert!(
        f.status.is_some(),
        "the server hung: killed after {BOUND:?}; output:\n{}",
        f.output
    );
    assert_ne!(
        f.status.and_then(|s| s.code()),
        Some(0),
        "the server cannot have seen the client's end; output:\n{}",
        f.output
    );
    eprintln!(
        "the server gave up {took:?} after the client stopped:\n{}",
        f.output
    );
}
