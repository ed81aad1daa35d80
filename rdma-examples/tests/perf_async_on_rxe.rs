//! `perf --async` against the (synchronous) perf server on a real device
//! (`cargo xtask test-rxe`): every bandwidth and latency test with the
//! owned-buffer futures on the client, two sizes each, the data checked by
//! both sides as in the synchronous runs.
//!
//! Each test is `#[ignore]`d so that a plain `cargo test` lists it as
//! skipped. Every child process is killed after [`TIMEOUT`]; every run uses
//! its own TCP port (19300..).

mod common;

use common::*;

/// Runs `perf <test>` server and `perf <test> --async` client with
/// `client_extra`; returns both, checked to have exited 0.
fn perf_async(test: &str, port: u16, client_extra: &[&str]) -> (Finished, Finished) {
    let (dev, gid) = (device(), gid_index());
    let common = args(&["-d", &dev, "-x", &gid, "-p", &port.to_string()]);
    let mut server = args(&[test]);
    server.extend(common.clone());
    let mut client = args(&[test, "--async", "127.0.0.1"]);
    client.extend(common);
    client.extend(args(client_extra));
    let (s, c) = pair((PERF, server), Some("waiting for a client"), (PERF, client));
    s.assert_ok(&c);
    c.assert_ok(&s);
    (s, c)
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_async_tests_check_their_data() {
    // (test, client options)
    let runs: [(&str, &[&str]); 6] = [
        ("write_bw", &["-n", "2000", "-t", "32", "-s", "4096"]),
        ("read_bw", &["-n", "2000", "-t", "32", "-s", "4096"]),
        ("send_bw", &["-n", "2000", "-t", "32", "-s", "4096"]),
        ("write_lat", &["-n", "300", "-s", "64", "-I", "0"]),
        ("read_lat", &["-n", "300", "-s", "64"]),
        ("send_lat", &["-n", "300", "-s", "64", "-I", "0"]),
    ];
    for (i, (test, extra)) in runs.into_iter().enumerate() {
        let (s, c) = perf_async(test, 19300 + i as u16, extra);
        for f in [&s, &c] {
            f.assert_has("data verified");
        }
        c.assert_has(if test.ends_with("_bw") {
            "BW peak[MB/sec]"
        } else {
            "t_typical[usec]"
        });
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_async_with_completion_events_and_json() {
    for (i, test) in ["write_bw", "send_lat"].into_iter().enumerate() {
        let (_, c) = perf_async(test, 19310 + i as u16, &["-n", "500", "-e", "--json"]);
        let field = if test == "write_bw" {
            "\"bw_avg_mb_s\""
        } else {
            "\"t_typical_us\""
        };
        c.assert_has(field);
        c.assert_has(&format!("\"test\":\"{test}\""));
    }
}
