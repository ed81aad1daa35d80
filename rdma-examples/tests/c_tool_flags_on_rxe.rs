//! The C tools' flags on a real device: `rc_pingpong -N` (the extended
//! QP's `ibv_wr_*` sends), `ud_pingpong -e -c -l` and `srq_pingpong -e -c`
//! against rdma-core's `ibv_*_pingpong` with the same flags, in both
//! directions; and the flags the device cannot honour (`-o -O -P -t -j`)
//! ending with an error that names the flag, never clap's "unexpected
//! argument".
//!
//! Data is checked by the programs themselves: ours compare every byte of
//! every message with what the peer sends (with `-c`, zero at each page
//! start and the C program's fill byte elsewhere) and, as servers with
//! `-c`, check the last message page by page as the C programs do, exiting
//! 1 on a difference; the C servers print `invalid data in page N`, which
//! the tests look for. Each test uses its own TCP ports; every child is
//! killed after the common TIMEOUT.

mod common;

use common::*;
use std::process::Command;

const RC: &str = OURS;
const UD: &str = env!("CARGO_BIN_EXE_ud_pingpong");
const SRQ: &str = env!("CARGO_BIN_EXE_srq_pingpong");
const ITERS: usize = 40;

/// One ping-pong of `server` and `client` with `extra` flags on both; both
/// must end well, print the C programs' summary, and report no invalid
/// page.
fn pingpong(server: &str, client: &str, port: u16, size: usize, extra: &[&str]) {
    let (dev, gid) = (device(), gid_index());
    let mut common = args(&["-d", &dev, "-g", &gid, "-n", &ITERS.to_string()]);
    common.extend(args(&["-s", &size.to_string(), "-p", &port.to_string()]));
    common.extend(args(extra));
    let mut client_args = common.clone();
    client_args.push("127.0.0.1".into());
    let ours = [RC, UD, SRQ].contains(&server);
    let ready = ours.then_some("local address:");
    let (s, c) = pair((server, common), ready, (client, client_args));
    s.assert_ok(&c);
    c.assert_ok(&s);
    for f in [&s, &c] {
        f.assert_has("  remote address: LID 0x");
        f.assert_has(&format!("{} bytes in ", size * ITERS * 2));
        f.assert_has(&format!("{ITERS} iters in "));
        assert!(
            !f.output.contains("invalid data in page"),
            "{} found invalid data:\n{}",
            f.label,
            f.output
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_new_send_api_interoperates_both_ways() {
    pingpong(RC, "ibv_rc_pingpong", 19600, 4096, &["-N"]);
    pingpong("ibv_rc_pingpong", RC, 19601, 4096, &["-N"]);
    // With completion events and validation, and several MTUs per message.
    pingpong(RC, "ibv_rc_pingpong", 19602, 65536, &["-N", "-e", "-c"]);
    pingpong("ibv_rc_pingpong", RC, 19603, 65536, &["-N", "-e", "-c"]);
    pingpong(RC, RC, 19604, 1, &["-N", "-r", "4"]);
    pingpong(RC, RC, 19605, 4096, &["-N", "-l", "1"]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn ud_pingpong_events_validation_and_service_level_interoperate() {
    for (i, extra) in [
        &["-e"][..],
        &["-c"],
        &["-e", "-c"],
        &["-e", "-c", "-l", "1"],
    ]
    .into_iter()
    .enumerate()
    {
        let port = 19610 + 2 * i as u16;
        pingpong(UD, "ibv_ud_pingpong", port, 1000, extra);
        pingpong("ibv_ud_pingpong", UD, port + 1, 1000, extra);
    }
    pingpong(UD, UD, 19620, 1024, &["-e", "-c", "-l", "2"]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn srq_pingpong_events_and_validation_interoperate() {
    let extra = ["-e", "-c", "-q", "4", "-r", "8"];
    pingpong(SRQ, "ibv_srq_pingpong", 19630, 4096, &extra);
    pingpong("ibv_srq_pingpong", SRQ, 19631, 4096, &extra);
    pingpong(SRQ, SRQ, 19632, 8192, &["-e", "-c", "-l", "1"]);
}

/// Runs `program` with `flags` on the test device; its exit success and
/// stderr.
fn refused(program: &str, flags: &[&str]) -> (bool, String) {
    let out = Command::new(program)
        .args(["-d", &device(), "-g", &gid_index()])
        .args(flags)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn flags_the_device_cannot_honour_end_with_an_error_naming_them() {
    for (program, flag, name) in [
        (RC, "-o", "-o/--odp"),
        (RC, "--odp", "-o/--odp"),
        (RC, "-O", "-O/--iodp"),
        (RC, "-t", "-t/--ts"),
        (RC, "--ts", "-t/--ts"),
        (RC, "-j", "-j/--dm"),
        (SRQ, "-o", "-o/--odp"),
    ] {
        let (ok, err) = refused(program, &[flag]);
        assert!(!ok, "{program} {flag} succeeded");
        assert!(!err.contains("unexpected argument"), "{flag}: {err}");
        // rxe lacks every one of these: the device's attributes say so.
        assert!(
            err.contains(&format!("{name}: not supported by this device (")),
            "{program} {flag}: {err}"
        );
    }
    // -P only makes sense with on-demand paging; with it, ODP is checked.
    let (ok, err) = refused(RC, &["-P"]);
    assert!(
        !ok && err.contains("-P/--prefetch: valid only with on-demand paging"),
        "{err}"
    );
    let (ok, err) = refused(RC, &["-P", "-o"]);
    assert!(
        !ok && err.contains("-o/--odp: not supported by this device"),
        "{err}"
    );
}
