//! `perf atomic_bw` and `perf atomic_lat` against themselves on a real
//! device (`cargo xtask test-rxe`): fetch-and-add and compare-and-swap,
//! each run checking every old value and the final counter. perftest's
//! `ib_atomic_bw`/`ib_atomic_lat` do not speak our protocol; `cargo xtask
//! bench --tests atomic_bw,atomic_lat` runs them beside ours.
//!
//! Each test is `#[ignore]`d so that a plain `cargo test` lists it as
//! skipped. Every child process is killed after [`TIMEOUT`]; every run uses
//! its own TCP port (19260..).

mod common;

use common::*;

/// Runs `perf <test>` server and client with `client_extra` (and
/// `--json` for both if the client has it); returns both, checked to have
/// exited 0.
fn perf(test: &str, port: u16, client_extra: &[&str]) -> (Finished, Finished) {
    let (dev, gid) = (device(), gid_index());
    let common = args(&["-d", &dev, "-x", &gid, "-p", &port.to_string()]);
    let mut server = args(&[test]);
    server.extend(common.clone());
    if client_extra.contains(&"--json") {
        server.push("--json".into());
    }
    let mut client = args(&[test, "127.0.0.1"]);
    client.extend(common);
    client.extend(args(client_extra));
    let (s, c) = pair((PERF, server), Some("waiting for a client"), (PERF, client));
    s.assert_ok(&c);
    c.assert_ok(&s);
    (s, c)
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_atomic_tests_check_every_old_value_and_the_counter() {
    // (test, atomic, client options, the start of the result row)
    let runs: [(&str, &str, &[&str], &str); 4] = [
        (
            "atomic_bw",
            "FETCH_AND_ADD",
            &["-n", "2000", "-t", "16"],
            " 8          2000 ",
        ),
        (
            "atomic_bw",
            "CMP_AND_SWAP",
            &["-n", "2000", "-t", "16"],
            " 8          2000 ",
        ),
        (
            "atomic_lat",
            "FETCH_AND_ADD",
            &["-n", "300"],
            " 8      300 ",
        ),
        ("atomic_lat", "CMP_AND_SWAP", &["-n", "300"], " 8      300 "),
    ];
    for (i, (test, kind, extra, row)) in runs.into_iter().enumerate() {
        let mut client = vec!["-A", kind];
        client.extend_from_slice(extra);
        let (s, c) = perf(test, 19260 + i as u16, &client);
        for f in [&s, &c] {
            f.assert_has("data verified");
            f.assert_has(&format!("Atomic {kind} "));
        }
        c.assert_has(if test == "atomic_bw" {
            "BW peak[MB/sec]"
        } else {
            "t_typical[usec]"
        });
        c.assert_has(row);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_atomic_json_has_the_fields_bench_reads() {
    // More atomics in flight than rxe's 16 outstanding reads/atomics: the
    // requester holds the rest back, and every old value still checks.
    for (i, (test, field)) in [
        ("atomic_bw", "\"bw_avg_mb_s\":"),
        ("atomic_lat", "\"t_typical_us\":"),
    ]
    .into_iter()
    .enumerate()
    {
        let (s, c) = perf(test, 19264 + i as u16, &["-n", "500", "-t", "64", "--json"]);
        let objects: Vec<&str> = c.output.lines().filter(|l| l.starts_with('{')).collect();
        assert_eq!(objects.len(), 1, "one object expected:\n{}", c.output);
        let o = objects[0];
        assert!(
            o.starts_with(&format!(
                "{{\"test\":\"{test}\",\"bytes\":8,\"iterations\":500,"
            )) && o.contains(field)
                && o.ends_with("\"verified\":true,\"checks\":\"data\"}"),
            "{o}"
        );
        s.assert_has("\"role\":\"server\"");
        s.assert_has("data verified");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_atomic_refuses_other_sizes() {
    // The client refuses before connecting; a server never sees it.
    let (dev, gid) = (device(), gid_index());
    let c = spawn(
        "perf client",
        PERF,
        &args(&[
            "atomic_bw",
            "127.0.0.1",
            "-d",
            &dev,
            "-x",
            &gid,
            "-s",
            "64",
            "-p",
            "19266",
        ]),
    )
    .finish(std::time::Instant::now() + TIMEOUT);
    assert_eq!(c.status.and_then(|s| s.code()), Some(2), "{}", c.output);
    c.assert_has("operates on 8 bytes, not 64");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_atomic_bw_on_four_queue_pairs_checks_every_lane() {
    // -q 4: each queue pair runs -n atomics on its own word; every old
    // value of every lane and every word's final count are checked.
    for (i, kind) in ["FETCH_AND_ADD", "CMP_AND_SWAP"].into_iter().enumerate() {
        let (s, c) = perf(
            "atomic_bw",
            19275 + i as u16,
            &["-q", "4", "-n", "500", "-t", "16", "-A", kind],
        );
        s.assert_has("data verified");
        c.assert_has("data verified");
        c.assert_has(" 8          2000 ");
    }
}
