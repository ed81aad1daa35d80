//! The runs of a bench and the plan that runs them: per test, size and
//! repetition perftest's server and client, then ours, with the same
//! options, each pair on its own TCP port; the stream rows run
//! rdmacm-utils' `rstream`, ours (rdma-examples' `rstream`, beside `perf`)
//! and `rstream -T s` (TCP) with the same rstream options.

use std::path::Path;

use super::settings::{Settings, MAX_RUN_BYTES, TX_DEPTH};
use super::suite::Test;
use crate::rxe::{Plan, Side};
use crate::shell::shell_quote;

/// First TCP port; run k uses `BASE_PORT + k`.
const BASE_PORT: u32 = 19000;

/// Which program produced a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tool {
    /// perftest's program, or for a stream row rdmacm-utils' `rstream`.
    Perftest,
    Ours,
    /// A stream row's reference: `rstream -T s`, the same test over TCP.
    Tcp,
}

impl Tool {
    /// How the table, labels and file names call it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Tool::Perftest => "perftest",
            Tool::Ours => "ours",
            Tool::Tcp => "tcp",
        }
    }

    /// How the labels and file names call it in a run of `test`: a
    /// stream row's C side is `rstream`.
    fn name_in(self, test: Test) -> &'static str {
        match self {
            Tool::Perftest if test.stream => "rstream",
            tool => tool.name(),
        }
    }

    /// The tools a run of `test` has, in the order they run.
    pub(super) fn of(test: Test) -> &'static [Tool] {
        if test.stream {
            &[Tool::Perftest, Tool::Ours, Tool::Tcp]
        } else {
            &[Tool::Perftest, Tool::Ours]
        }
    }
}

/// One server/client run in the plan.
#[derive(Debug, Clone)]
pub(super) struct Run {
    pub(super) test: Test,
    pub(super) tool: Tool,
    pub(super) size: u64,
    pub(super) rep: usize,
}

impl Run {
    /// File name stem under `raw/`.
    pub(super) fn stem(&self) -> String {
        format!(
            "{}-{}-{}-r{}",
            self.tool.name_in(self.test),
            self.test.name,
            self.size,
            self.rep
        )
    }

    /// The end of the run's step label in the plan (and so in `steps.tsv`).
    pub(super) fn label_tail(&self) -> String {
        format!(
            "{} {} {} B rep {}",
            self.tool.name_in(self.test),
            self.test.name,
            self.size,
            self.rep
        )
    }
}

/// Every run in plan order: per test and size, perftest and ours alternate
/// (a stream row's rstream, ours and TCP take turns).
pub(super) fn runs(a: &Settings) -> Vec<Run> {
    let mut v = Vec::new();
    for &test in &a.tests {
        for size in a.sizes_of(test) {
            for rep in 1..=a.reps {
                for &tool in Tool::of(test) {
                    v.push(Run {
                        test,
                        tool,
                        size,
                        rep,
                    });
                }
            }
        }
    }
    v
}

/// The size option both tools take: `-s`, except for a test of fixed size
/// (perftest's atomic tests have no size to choose).
pub(super) fn size_option(test: Test, size: u64) -> String {
    match test.fixed_size {
        Some(_) => String::new(),
        None => format!(" -s {size}"),
    }
}

/// The options both tools take alike beyond size and iterations: the tx
/// depth of bandwidth tests and `--inline`, for the tests that can inline.
pub(super) fn depth_and_inline(a: &Settings, test: Test) -> String {
    let mut options = String::new();
    if test.bw {
        options += &format!(" -t {TX_DEPTH}");
    }
    if let Some(n) = a.inline.filter(|_| test.inline) {
        options += &format!(" -I {n}");
    }
    options
}

/// The plan; the guest writes the raw outputs to `$XTASK_OUT/raw`. Our
/// `rstream` (the stream rows') is the one beside `perf`.
pub(super) fn plan(a: &Settings, runs: &[Run], perf: &Path) -> Plan {
    let rstream = shell_quote(&perf.with_file_name("rstream").to_string_lossy());
    let perf = shell_quote(&perf.to_string_lossy());
    let raw = "R=\"$XTASK_OUT/raw\"; mkdir -p \"$R\"";
    let mut p = Plan::new();
    p.say(&format!(
        "== cargo xtask bench: {} runs ({} tests x {} sizes x {} reps x 2 tools; atomics 8 B only), {} \
         (at most {} MiB per run) ==\n\
         perftest and our perf alternate with identical -s/-n (and -t {TX_DEPTH} for bandwidth{});\n\
         each run prints its result line; raw outputs go to the results directory's raw/.",
        runs.len(),
        a.tests.len(),
        a.sizes.len(),
        a.reps,
        a.iters_text(),
        MAX_RUN_BYTES >> 20,
        a.inline
            .map_or(String::new(), |n| format!(", -I {n} for writes and sends"))
    ));
    if let Some(ms) = a.delay_ms {
        p.sh_step(
            &format!("netem: {ms} ms of delay on this host's link"),
            &format!(
                "modprobe sch_netem && tc qdisc replace dev \"$RXE_NETDEV\" root netem delay {ms}ms \
                 && tc qdisc show dev \"$RXE_NETDEV\""
            ),
        );
    }
    // The client's way to the server: the same host's address, or the
    // other host's across the link.
    let (peer, cm_peer) = if a.hosts == 2 {
        ("\"$PEER_IPV4\"", "\"$PEER_IPV4\"")
    } else {
        ("127.0.0.1", "\"$RXE_IPV4\"")
    };
    let dev = "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"";
    for (k, r) in runs.iter().enumerate() {
        let port = BASE_PORT + k as u32;
        // Many queue pairs share the run's iterations (each runs its part),
        // so a run moves as many bytes as with one; perftest needs >= 5.
        let n = (a.iters(r.test, r.size) / r.test.qps).max(5);
        let size = r.size;
        let extra = format!("{}{}", depth_and_inline(a, r.test), r.test.multi_flags());
        let s = size_option(r.test, size);
        let f = format!("f=\"$R/{}\"", r.stem());
        // On success show only the result (the line after the table
        // header, or our JSON line); on failure everything.
        let (server, client) = match r.tool {
            _ if r.test.stream => stream_commands(r, &rstream, raw, &f, n, port, cm_peer),
            _ if r.test.cm => {
                let options = format!("{s} -n {n}{extra} -p {port}");
                cm_commands(r, &perf, raw, &f, &options, cm_peer)
            }
            Tool::Perftest => {
                let cmd = format!("{} {dev}{s} -n {n}{extra} -F -p {port}", r.test.perftest);
                (
                    format!(
                        "{raw}; {f}; {cmd} >\"$f.server.txt\" 2>&1; rc=$?; \
                         [ $rc = 0 ] || cat \"$f.server.txt\"; exit $rc"
                    ),
                    format!(
                        "{raw}; {f}; {cmd} {peer} >\"$f.client.txt\" 2>&1; rc=$?; \
                         if [ $rc = 0 ]; then grep -A1 -e '#bytes' \"$f.client.txt\"; \
                         else cat \"$f.client.txt\"; fi; exit $rc"
                    ),
                )
            }
            Tool::Tcp => unreachable!("only stream rows have a TCP run"),
            Tool::Ours => {
                let name = r.test.perf_name();
                let mode = match (r.test.asynchronous, r.test.threads) {
                    (true, _) => " --async".to_string(),
                    (false, t) if t > 1 => format!(" --threads {t}"),
                    _ => String::new(),
                };
                (
                    format!(
                        "{raw}; {f}; {perf} {name} {dev} -p {port} --json \
                         >\"$f.server.json\" 2>\"$f.server.txt\"; rc=$?; \
                         [ $rc = 0 ] || cat \"$f.server.txt\" \"$f.server.json\"; exit $rc"
                    ),
                    format!(
                        "{raw}; {f}; {perf} {name}{mode} {dev}{s} -n {n}{extra} -p {port} --json {peer} \
                         >\"$f.client.json\" 2>\"$f.client.txt\"; rc=$?; \
                         if [ $rc = 0 ]; then cat \"$f.client.json\"; \
                         else cat \"$f.client.txt\" \"$f.client.json\"; fi; exit $rc"
                    ),
                )
            }
        };
        let label = format!("[{}/{}] {}", k + 1, runs.len(), r.label_tail());
        // A `-R` server listens on no TCP port: the runner waits 2 s for it
        // instead (both clients retry while it is not listening yet); so
        // does an rsocket server (rstream's client does not retry: 2 s is
        // its margin).
        let rsocket = r.test.stream && r.tool != Tool::Tcp;
        let wait_port = if r.test.cm || rsocket { 0 } else { port as u16 };
        if a.hosts == 2 {
            let (server, client) = (
                Side {
                    host: 0,
                    cmd: &server,
                    expect: "",
                },
                Side {
                    host: 1,
                    cmd: &client,
                    expect: "",
                },
            );
            p.pair_step(&label, wait_port, server, client);
        } else {
            p.server_client(&label, wait_port, &server, &client);
        }
    }
    p
}

/// rstream's options for a stream row's run of `n` operations at `size`:
/// `n` transfers each way (`stream_bw`), or `n` iterations of one
/// transfer each way, a ping-pong (`stream_lat`).
pub(super) fn stream_shape(test: Test, size: u64, n: u32) -> String {
    if test.bw {
        format!("-S {size} -C {n}")
    } else {
        format!("-S {size} -C 1 -I {n}")
    }
}

/// The server and client commands of a stream row's run: the same rstream
/// options for all three tools; the server listens on the device's address
/// (rsocket needs it; TCP takes it too, so that all three go the same
/// way), the client connects to `peer` (that address, or the other
/// host's). On success the client's header and result line are shown.
fn stream_commands(
    r: &Run,
    ours: &str,
    raw: &str,
    f: &str,
    n: u32,
    port: u32,
    peer: &str,
) -> (String, String) {
    let program = match r.tool {
        Tool::Perftest => "rstream".to_string(),
        Tool::Ours => ours.to_string(),
        Tool::Tcp => "rstream -T s".to_string(),
    };
    let shape = stream_shape(r.test, r.size, n);
    (
        format!(
            "{raw}; {f}; {program} -b \"$RXE_IPV4\" -p {port} {shape} >\"$f.server.txt\" 2>&1; \
             rc=$?; [ $rc = 0 ] || cat \"$f.server.txt\"; exit $rc"
        ),
        format!(
            "{raw}; {f}; {program} -s {peer} -p {port} {shape} >\"$f.client.txt\" 2>&1; rc=$?; \
             if [ $rc = 0 ]; then grep -A1 -e '^name' \"$f.client.txt\"; \
             else cat \"$f.client.txt\"; fi; exit $rc"
        ),
    )
}

/// The server and client commands of an rdma_cm (`-R`) run: both sides get
/// the test's options (a `-R` server is told them, as perftest's always
/// is), the client connects to the device's address. perftest's client
/// output is time-stamped line by line (`<f>.client.ts`, nanoseconds) for
/// its set-up time; ours prints its own (`rdma_cm set-up`, on stderr with
/// `--json`).
fn cm_commands(
    r: &Run,
    perf: &str,
    raw: &str,
    f: &str,
    options: &str,
    peer: &str,
) -> (String, String) {
    let dev = "-d \"$RXE_DEVICE\"";
    match r.tool {
        Tool::Perftest => {
            let cmd = format!("{} {dev} -R{options} -F", r.test.perftest);
            (
                format!(
                    "{raw}; {f}; {cmd} >\"$f.server.txt\" 2>&1; rc=$?; \
                     [ $rc = 0 ] || cat \"$f.server.txt\"; exit $rc"
                ),
                format!(
                    "{raw}; {f}; stdbuf -oL {cmd} {peer} 2>&1 | \
                     while IFS= read -r l; do echo \"$(date +%s%N) $l\"; done >\"$f.client.ts\"; \
                     rc=${{PIPESTATUS[0]}}; cut -d' ' -f2- \"$f.client.ts\" >\"$f.client.txt\"; \
                     if [ $rc = 0 ]; then grep -A1 -e '#bytes' \"$f.client.txt\"; \
                     else cat \"$f.client.txt\"; fi; exit $rc"
                ),
            )
        }
        Tool::Tcp => unreachable!("an rdma_cm row has no TCP run"),
        Tool::Ours => {
            let name = r.test.perf_name();
            (
                format!(
                    "{raw}; {f}; {perf} {name} -R{options} --json \
                     >\"$f.server.json\" 2>\"$f.server.txt\"; rc=$?; \
                     [ $rc = 0 ] || cat \"$f.server.txt\" \"$f.server.json\"; exit $rc"
                ),
                format!(
                    "{raw}; {f}; {perf} {name} -R{options} --json {peer} \
                     >\"$f.client.json\" 2>\"$f.client.txt\"; rc=$?; \
                     if [ $rc = 0 ]; then cat \"$f.client.json\"; grep set-up \"$f.client.txt\"; \
                     else cat \"$f.client.txt\" \"$f.client.json\"; fi; exit $rc"
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::settings;
    use super::super::suite::TESTS;
    use super::*;

    #[test]
    fn inline_only_where_the_operation_can_carry_it() {
        let a = settings::parse(&["--inline", "0"]).unwrap();
        let by_name = |n: &str| TESTS.iter().copied().find(|t| t.name == n).unwrap();
        assert_eq!(depth_and_inline(&a, by_name("write_bw")), " -t 128 -I 0");
        assert_eq!(depth_and_inline(&a, by_name("read_bw")), " -t 128");
        assert_eq!(depth_and_inline(&a, by_name("send_lat")), " -I 0");
        let a = settings::parse(&[]).unwrap();
        assert_eq!(depth_and_inline(&a, by_name("write_lat")), "");
        assert_eq!(depth_and_inline(&a, by_name("atomic_bw")), " -t 128");
        assert_eq!(depth_and_inline(&a, by_name("atomic_lat")), "");
    }

    #[test]
    fn many_queue_pairs_and_both_directions_reach_both_tools() {
        let a = settings::parse(&[
            "--tests",
            "write_bw_q4,send_bw_bidi",
            "--sizes",
            "4K",
            "--reps",
            "1",
            "--iters",
            "2000",
        ])
        .unwrap();
        let r = runs(&a);
        let text = plan(&a, &r, Path::new("/t/perf")).text().to_string();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("server_client "))
            .collect();
        assert_eq!(steps.len(), 4, "{text}");
        // perftest: both sides get -q 4; each queue pair runs 2000 / 4.
        assert!(
            steps[0].contains("ib_write_bw -d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\" -s 4096 -n 500 -t 128 -q 4 -F"),
            "{}",
            steps[0]
        );
        // ours: the client tells the server (perf's parameter line).
        assert!(
            steps[1].contains("/t/perf write_bw -d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\" -s 4096 -n 500 -t 128 -q 4 -p"),
            "{}",
            steps[1]
        );
        assert!(
            steps[2].contains("ib_send_bw") && steps[2].contains(" -n 2000 -t 128 -b -F"),
            "{}",
            steps[2]
        );
        assert!(
            steps[3].contains("/t/perf send_bw -d") && steps[3].contains(" -b -p"),
            "{}",
            steps[3]
        );
    }

    #[test]
    fn stream_rows_run_rstream_ours_and_tcp_alike() {
        let a = settings::parse(&[
            "--tests",
            "stream_bw,stream_lat",
            "--sizes",
            "4K",
            "--reps",
            "1",
        ])
        .unwrap();
        let r = runs(&a);
        let tails: Vec<String> = r.iter().map(Run::label_tail).collect();
        assert_eq!(
            tails,
            [
                "rstream stream_bw 4096 B rep 1",
                "ours stream_bw 4096 B rep 1",
                "tcp stream_bw 4096 B rep 1",
                "rstream stream_lat 64 B rep 1",
                "ours stream_lat 64 B rep 1",
                "tcp stream_lat 64 B rep 1",
            ]
        );
        let text = plan(&a, &r, Path::new("/t/perf")).text().to_string();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("server_client "))
            .collect();
        assert_eq!(steps.len(), 6, "{text}");
        // rsocket servers listen on no TCP port (the runner waits 2 s);
        // the TCP server's port is waited for.
        assert!(
            steps[0].contains(" 0 ") && steps[1].contains(" 0 "),
            "{}",
            steps[0]
        );
        assert!(steps[2].contains(" 19002 "), "{}", steps[2]);
        for (step, program) in steps.iter().zip(["rstream", "/t/rstream", "rstream -T s"]) {
            assert!(
                step.contains(&format!("{program} -b \"$RXE_IPV4\" -p ")),
                "{step}"
            );
            assert!(
                step.contains(&format!("{program} -s \"$RXE_IPV4\" -p ")),
                "{step}"
            );
        }
        assert!(steps[0].contains("-S 4096 -C 16384 >"), "{}", steps[0]);
        assert!(steps[3].contains("-S 64 -C 1 -I 5000 >"), "{}", steps[3]);
        // Across two hosts the clients connect to the other one.
        let a = settings::parse(&["--hosts", "2", "--tests", "stream_lat", "--reps", "1"]).unwrap();
        let text = plan(&a, &runs(&a), Path::new("/t/perf")).text().to_string();
        assert!(text.contains("rstream -s \"$PEER_IPV4\""), "{text}");
    }

    #[test]
    fn threads_are_ours_alone() {
        let a = settings::parse(&["--tests", "write_bw_q4_t2", "--sizes", "64", "--reps", "1"])
            .unwrap();
        assert_eq!(a.tests[0].perf_name(), "write_bw");
        let text = plan(&a, &runs(&a), Path::new("/t/perf")).text().to_string();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("server_client "))
            .collect();
        assert!(
            steps[0].contains(" -q 4 -F") && !steps[0].contains("--threads"),
            "{}",
            steps[0]
        );
        assert!(
            steps[1].contains("/t/perf write_bw --threads 2 -d"),
            "{}",
            steps[1]
        );
    }

    #[test]
    fn atomic_runs_are_eight_bytes_without_s() {
        let a = settings::parse(&["--tests", "atomic_bw,atomic_lat", "--reps", "1"]).unwrap();
        let r = runs(&a);
        assert_eq!(r.len(), 4);
        assert!(r.iter().all(|r| r.size == 8));
        assert_eq!(size_option(a.tests[0], 8), "");
        assert_eq!(size_option(TESTS[0], 64), " -s 64");
    }

    #[test]
    fn two_hosts_put_servers_on_a_and_clients_across_the_link() {
        let perf = Path::new("/x/perf");
        let a = settings::parse(&[
            "--hosts", "2", "--delay", "5", "--tests", "write_bw", "--sizes", "64", "--reps", "1",
        ])
        .unwrap();
        let r = runs(&a);
        let text = plan(&a, &r, perf).text().to_string();
        let pairs: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("pair_step "))
            .collect();
        assert_eq!(pairs.len(), 2, "perftest and ours, each a pair step");
        for line in &pairs {
            // `pair_step LABEL PORT SERVER_HOST ...`: servers on host A (0).
            assert!(
                line.contains(" 19000 0 ") || line.contains(" 19001 0 "),
                "{line}"
            );
            assert!(
                line.contains("$PEER_IPV4"),
                "clients connect across the link: {line}"
            );
            assert!(!line.contains("127.0.0.1"), "{line}");
        }
        assert!(text.contains("netem delay 5ms"), "the delay step: {text}");
        assert!(!text.contains("server_client "), "no one-host steps");
        // One host: server and client beside each other, no delay.
        let a = settings::parse(&["--tests", "write_bw", "--sizes", "64", "--reps", "1"]).unwrap();
        let text = plan(&a, &runs(&a), perf).text().to_string();
        assert!(text.contains("127.0.0.1") && !text.contains("PEER_IPV4"));
        assert!(!text.contains("pair_step ") && !text.contains("netem"));
    }
}
