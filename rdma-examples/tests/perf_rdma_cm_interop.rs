//! `perf -R` against perftest's `ib_<test> -R` (rdma_cm mode), both
//! directions: our server with their client, their server with our client.
//! Both programs must exit 0 and our side must print a result row with
//! sane numbers (positive bandwidth or latency; no test asserts speed).
//!
//! `#[ignore]`d like every device test: `cargo xtask test-rxe` runs them on
//! rxe, whose IPv4 address comes from `RXE_IPV4` (default 10.0.2.15, the
//! VM's: rdma_cm needs the device's address, not 127.0.0.1). Each run has
//! its own port (19400..); every process is killed after
//! [`common::TIMEOUT`].

mod common;

use common::*;

fn ip() -> String {
    std::env::var("RXE_IPV4")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "10.0.2.15".into())
}

/// The numbers of our result row for `size`: the line starting with it.
fn row(output: &str, size: usize) -> Vec<f64> {
    output
        .lines()
        .map(str::split_whitespace)
        .find_map(|mut w| {
            (w.next() == Some(&size.to_string()))
                .then(|| w.filter_map(|x| x.parse().ok()).collect())
        })
        .unwrap_or_default()
}

/// Runs `test` with `opts` on both sides, ours as `our_role`; checks both
/// exit 0 and our row's numbers. `port` must be unique per run.
fn interop(test: &str, opts: &[&str], ours_serves: bool, port: u16) {
    let dev = device();
    let theirs = format!("ib_{test}");
    let mut common = args(&["-R", "-p", &port.to_string()]);
    common.extend(args(opts));
    let mut ours = args(&[test]);
    ours.extend(common.clone());
    let mut c_side = args(&["-d", &dev]);
    c_side.extend(common);
    let (s, c) = if ours_serves {
        let mut client = c_side;
        client.push(ip());
        pair(
            (PERF, ours),
            Some("waiting for a client"),
            (&theirs, client),
        )
    } else {
        ours.push(ip());
        pair((&theirs, c_side), None, (PERF, ours))
    };
    s.assert_ok(&c);
    c.assert_ok(&s);
    let (mine, label) = if ours_serves {
        (&s, "server")
    } else {
        (&c, "client")
    };
    let size: usize = opts
        .windows(2)
        .find(|w| w[0] == "-s")
        .map_or(if test.ends_with("_lat") { 2 } else { 65536 }, |w| {
            w[1].parse().unwrap()
        });
    let numbers = row(&mine.output, size);
    // Our client measures; our server prints the client's report in
    // write_bw and read_bw, and otherwise what it did.
    let measures = !ours_serves || matches!(test, "write_bw" | "read_bw");
    if !measures {
        let done = if test == "send_bw" {
            "received 300 messages"
        } else {
            "done"
        };
        mine.assert_has(done);
    } else {
        assert!(
            numbers.len() >= 3
                && numbers[1..].iter().all(|x| x.is_finite() && *x >= 0.0)
                && numbers[1..3].iter().any(|x| *x > 0.0),
            "our {label} printed no sane result row for {size} bytes:\n{}",
            mine.output
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_rdma_cm_bandwidth_against_perftest() {
    let mut port = 19400;
    for test in ["write_bw", "read_bw", "send_bw"] {
        for ours_serves in [true, false] {
            interop(test, &["-n", "300", "-s", "4096"], ours_serves, port);
            port += 1;
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_rdma_cm_latency_against_perftest() {
    let mut port = 19420;
    for test in ["send_lat", "read_lat"] {
        for ours_serves in [true, false] {
            interop(test, &["-n", "200", "-s", "64"], ours_serves, port);
            port += 1;
        }
    }
}

// Not yet here: write_lat (neither side sees the other's first RDMA write;
// see `rdma_cm`'s module docs).
