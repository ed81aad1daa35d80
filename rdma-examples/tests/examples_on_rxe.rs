//! The example programs on a real device: `rc_pingpong` against rdma-core's
//! `ibv_rc_pingpong` in both directions and against itself, every `perf`
//! test with its data check, `one_sided`, and `devices`.
//!
//! Each test is `#[ignore]`d so that a plain `cargo test` lists it as
//! skipped; `cargo xtask test-rxe` runs them on a soft-RoCE device with
//! `--include-ignored` and `RDMA_TEST_DEVICE=rxe0`. The GID index comes from
//! `RXE_GID_INDEX` (set by the VM scripts; default 1, the RoCE v2 IPv4 GID
//! on rxe). Every child process is killed after [`TIMEOUT`]; every test uses
//! its own TCP ports. The helpers are in `common/`.

mod common;

use common::*;
use std::time::Instant;

const THEIRS: &str = "ibv_rc_pingpong";

/// Iterations of every ping-pong run.
const ITERS: usize = 50;

/// One ping-pong between `server` and `client` programs; checks both ended
/// well and printed the summary for `size` bytes and [`ITERS`] iterations.
fn pingpong(server: &str, client: &str, port: u16, size: usize, extra: &[&str]) {
    let (dev, gid) = (device(), gid_index());
    let mut common = args(&[
        "-d",
        &dev,
        "-g",
        &gid,
        "-n",
        &ITERS.to_string(),
        "-s",
        &size.to_string(),
        "-p",
        &port.to_string(),
    ]);
    common.extend(args(extra));
    let mut client_args = common.clone();
    client_args.push("127.0.0.1".into());
    let ready = (server == OURS).then_some("local address:");
    let (s, c) = pair((server, common), ready, (client, client_args));
    s.assert_ok(&c);
    c.assert_ok(&s);
    let bytes = format!("{} bytes in ", size * ITERS * 2);
    let iters = format!("{ITERS} iters in ");
    for f in [&s, &c] {
        f.assert_has("  local address:  LID 0x");
        f.assert_has("  remote address: LID 0x");
        f.assert_has(&bytes);
        f.assert_has(" Mbit/sec\n");
        f.assert_has(&iters);
        f.assert_has(" usec/iter\n");
    }
}

const SIZES: [usize; 3] = [1, 4096, 65536];

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_server_with_ibv_rc_pingpong_client() {
    for (i, size) in SIZES.into_iter().enumerate() {
        pingpong(OURS, THEIRS, 19100 + i as u16, size, &[]);
        pingpong(OURS, THEIRS, 19110 + i as u16, size, &["-e"]);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_client_with_ibv_rc_pingpong_server() {
    for (i, size) in SIZES.into_iter().enumerate() {
        pingpong(THEIRS, OURS, 19120 + i as u16, size, &[]);
        pingpong(THEIRS, OURS, 19130 + i as u16, size, &["-e"]);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_with_itself() {
    for (i, size) in SIZES.into_iter().enumerate() {
        pingpong(OURS, OURS, 19140 + i as u16, size, &[]);
        pingpong(OURS, OURS, 19150 + i as u16, size, &["-e"]);
    }
    // A receive depth smaller than the iteration count: receives are
    // reposted as they complete.
    pingpong(OURS, OURS, 19160, 4096, &["-r", "4"]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_buffer_validation_interoperates() {
    // `-c`: the client zeroes the first byte of every page it sends, the
    // server checks them; both directions of the C/Rust pairing.
    pingpong(OURS, THEIRS, 19170, 65536, &["-c"]);
    pingpong(THEIRS, OURS, 19171, 65536, &["-c"]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rc_pingpong_service_level_and_mtu_flags_interoperate() {
    // `-l` (service level) and `-m` (path MTU) set the same connection
    // attributes on both implementations.
    pingpong(OURS, THEIRS, 19172, 4096, &["-l", "1", "-m", "512"]);
    pingpong(THEIRS, OURS, 19173, 4096, &["-l", "1", "-m", "512"]);
}

/// Runs `perf <test>` server and client with `client_extra` (and
/// `--json` for both if the client has it); returns both.
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
fn perf_bandwidth_tests_check_their_data() {
    for (i, test) in ["write_bw", "read_bw", "send_bw"].into_iter().enumerate() {
        let (s, c) = perf(
            test,
            19200 + i as u16,
            &["-s", "4096", "-n", "300", "-t", "32"],
        );
        s.assert_has("data verified");
        c.assert_has("data verified");
        c.assert_has("BW peak[MB/sec]");
        c.assert_has(" 4096       300 ");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_send_bw_recycles_a_small_receive_ring() {
    // 20 receive slots for 500 messages: the server re-posts used receives
    // in batches around the ring (wrapping 25 times) and checks every
    // message's order and length, and the slots' bytes at the end.
    let (s, c) = perf(
        "send_bw",
        19205,
        &["-s", "1000", "-n", "500", "-t", "16", "-r", "20"],
    );
    s.assert_has("data verified");
    c.assert_has("data verified");
    c.assert_has(" 1000       500 ");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_large_messages_rotate_over_two_buffers() {
    // 1 MiB messages: the rotating buffers stay within perf's 2 MiB ring,
    // so send_bw posts 8 receives into 2 slots (a slot is posted again
    // while an earlier receive into it is outstanding) and read_bw reads
    // batches of 2 into 2 chunks; every message and chunk is still checked.
    for (i, test) in ["send_bw", "read_bw"].into_iter().enumerate() {
        let (s, c) = perf(
            test,
            19220 + i as u16,
            &["-s", "1M", "-n", "12", "-t", "32", "-r", "8"],
        );
        s.assert_has("data verified");
        c.assert_has("data verified");
        c.assert_has(" 1048576    12 ");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_latency_tests_check_their_data() {
    for (i, test) in ["write_lat", "read_lat", "send_lat"]
        .into_iter()
        .enumerate()
    {
        let (s, c) = perf(test, 19210 + i as u16, &["-s", "64", "-n", "100"]);
        s.assert_has("data verified");
        c.assert_has("data verified");
        c.assert_has("t_typical[usec]");
        c.assert_has(" 64     100 ");
        // perftest's default inline sizes (rxe supports them); reads have
        // nothing to inline.
        let inline = ["Inline: 220 ", "Inline: 0 ", "Inline: 236 "][i];
        c.assert_has(inline);
        s.assert_has(inline);
        if i != 1 {
            // The same 64-byte messages without inline data.
            let (s, c) = perf(
                test,
                19213 + i as u16,
                &["-s", "64", "-n", "100", "-I", "0"],
            );
            s.assert_has("data verified");
            c.assert_has("data verified");
            c.assert_has("Inline: 0 ");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_json_reports_every_size() {
    // Odd sizes, message size 1 and several MTUs; one JSON object per size.
    for (i, test) in ["write_bw", "send_lat"].into_iter().enumerate() {
        for (j, size) in ["1", "5000"].into_iter().enumerate() {
            let port = 19220 + (2 * i + j) as u16;
            let (s, c) = perf(test, port, &["-s", size, "-n", "20", "--json"]);
            let objects: Vec<&str> = c.output.lines().filter(|l| l.starts_with('{')).collect();
            assert_eq!(objects.len(), 1, "one object expected:\n{}", c.output);
            assert!(
                objects[0].contains(&format!("\"test\":\"{test}\""))
                    && objects[0].contains(&format!("\"bytes\":{size},"))
                    && objects[0].ends_with("\"verified\":true,\"checks\":\"data\"}"),
                "{}",
                objects[0]
            );
            s.assert_has("\"role\":\"server\"");
            s.assert_has("data verified");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_all_sizes() {
    let (s, c) = perf("write_bw", 19230, &["-a", "-n", "4", "-t", "4", "--json"]);
    let objects = c.output.lines().filter(|l| l.starts_with('{')).count();
    assert_eq!(objects, 23, "sizes 2 B ..= 8 MiB:\n{}", c.output);
    c.assert_has("\"bytes\":8388608,");
    s.assert_has("data verified");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_many_queue_pairs_and_both_directions_check_their_data() {
    // -q: each queue pair moves its own part with its own pattern; -b: both
    // sides post and check what the other wrote, read or sent; --threads:
    // the client's queue pairs split over threads. Two sizes, so that the
    // second runs over buffers the first left behind.
    for (i, (test, lanes)) in [
        ("write_bw", &["-q", "4"][..]),
        ("read_bw", &["-q", "4"][..]),
        ("send_bw", &["-q", "4"][..]),
        ("write_bw", &["-b"][..]),
        ("read_bw", &["-b", "-q", "2"][..]),
        ("send_bw", &["-b", "-q", "3"][..]),
        // The client's queue pairs driven from several threads.
        ("write_bw", &["-q", "4", "--threads", "2"][..]),
        ("send_bw", &["-q", "4", "--threads", "4"][..]),
        ("read_bw", &["-b", "-q", "2", "--threads", "2"][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let mut extra = vec!["-n", "200", "-t", "32", "-r", "64", "--json", "-s"];
        extra.push(if i % 2 == 0 { "4096" } else { "3000" });
        extra.extend(lanes);
        let (s, c) = perf(test, 19250 + i as u16, &extra);
        s.assert_has("data verified");
        c.assert_has("data verified");
        let qps = lanes
            .windows(2)
            .find(|w| w[0] == "-q")
            .map_or(1, |w| w[1].parse::<usize>().unwrap());
        let bidi = lanes.contains(&"-b");
        let json = c
            .output
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON line:\n{}", c.output));
        assert!(
            json.contains(&format!("\"iterations\":{},", 200 * qps))
                && json.contains(&format!("\"qps\":{qps},\"bidirectional\":{bidi}"))
                && json.ends_with("\"verified\":true,\"checks\":\"data\"}"),
            "{json}"
        );
        let mpps: f64 = json
            .split("\"msg_rate_mpps\":")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(mpps > 0.0, "a message rate is reported: {json}");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn perf_server_refuses_another_test() {
    let (dev, gid) = (device(), gid_index());
    let port = "19240".to_string();
    let (s, c) = pair(
        (
            PERF,
            args(&["read_bw", "-d", &dev, "-x", &gid, "-p", &port]),
        ),
        Some("waiting for a client"),
        (
            PERF,
            args(&["write_bw", "127.0.0.1", "-d", &dev, "-x", &gid, "-p", &port]),
        ),
    );
    assert_eq!(s.status.and_then(|s| s.code()), Some(1), "{}", s.output);
    assert_eq!(c.status.and_then(|s| s.code()), Some(1), "{}", c.output);
    c.assert_has("the server refused");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_sided_writes_and_reads_back_with_iovecs() {
    let (dev, gid) = (device(), gid_index());
    let configs: [(&str, &str, &str, &str); 3] = [
        ("4K", "3", "16", "3"),
        ("8K", "4", "1", "2"),
        ("65536", "1", "4", "2"),
    ];
    for (i, (chunk, iovs, depth, rounds)) in configs.into_iter().enumerate() {
        let port = (19250 + i).to_string();
        let common = args(&["-d", &dev, "-x", &gid, "-p", &port]);
        let mut server = common.clone();
        server.extend(args(&["--size", "128K"]));
        let mut client = common;
        client.extend(args(&[
            "--chunk",
            chunk,
            "--iovs",
            iovs,
            "--depth",
            depth,
            "-n",
            rounds,
            "127.0.0.1",
        ]));
        let (s, c) = pair(
            (ONE_SIDED, server),
            Some("waiting on TCP port"),
            (ONE_SIDED, client),
        );
        s.assert_ok(&c);
        c.assert_ok(&s);
        s.assert_has("server checked its buffer (131072 bytes");
        s.assert_has("data verified");
        c.assert_has("read-back verified");
        c.assert_has("server verified its buffer (131072 bytes)");
        c.assert_has("data verified");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn devices_shows_the_device_and_its_gids() {
    let dev = device();
    let p = spawn("devices", DEVICES, &args(&["-d", &dev, "-v"]));
    let f = p.finish(Instant::now() + TIMEOUT);
    assert!(f.status.is_some_and(|s| s.success()), "{}", f.output);
    f.assert_has(&format!("hca_id:\t{dev}\n"));
    f.assert_has("PORT_ACTIVE");
    f.assert_has(&format!("GID[{:>3}]:", gid_index()));
    f.assert_has("RoCE v2");
    let l = spawn("devices -l", DEVICES, &args(&["-l"]));
    let f = l.finish(Instant::now() + TIMEOUT);
    assert!(f.status.is_some_and(|s| s.success()), "{}", f.output);
    f.assert_has(&dev);
}
