//! The steps of test-rxe's two-host tier: our example programs against
//! rdma-core's C programs (and perftest) across the link, server on one
//! host and client on the other, both directions, and ours against ours.
//!
//! Each pair is one `pair_step` ([`Plan::pair_step`]): both sides must exit
//! 0 and print what shows the data went through — the pingpongs their
//! `N iters in` line (rc_pingpong with `-c` also checks the pages it
//! received), rping the last ping's data on both sides (`-v`; the client
//! also compares it, `-V`). perf and async_echo are in [`pairs_perf`], the
//! byte streams (rstream, rcopy) in [`pairs_stream`], the hostile-network
//! cases in [`faults`].

use std::path::{Path, PathBuf};

use super::{faults, pairs_library, pairs_perf, pairs_stream};
use crate::artifacts::Artifact;
use crate::rxe::{Plan, Side};
use crate::shell::shell_quote;
use crate::Result;

/// Round trips of the rc and ud pingpongs (a TCG round trip across the
/// link takes ~15 ms).
const ITERS: u32 = 200;
/// srq_pingpong: queue pairs and round trips per queue pair.
const SRQ_QPS: u32 = 4;
const SRQ_ITERS: u32 = 50;
/// UD message size: at most the link's path MTU (1024 on a 1500-byte
/// Ethernet under rxe), which ibv_ud_pingpong checks.
const UD_SIZE: u32 = 1024;
/// Pings of the rping steps.
const RPING_COUNT: u32 = 10;

/// The example programs the tier runs.
const PROGRAMS: [&str; 8] = [
    "rc_pingpong",
    "ud_pingpong",
    "srq_pingpong",
    "rping",
    "perf",
    "async_echo",
    "rstream",
    "rcopy",
];

/// rdma-safe's test binary whose tests have a server and a client side
/// (`rdma-safe/tests/peers.rs`).
pub(crate) const PEER_TESTS: &str = "peers";

/// Host A and host B.
pub(super) const A: usize = 0;
pub(super) const B: usize = 1;

/// Where the tier's programs are: ours by path, rdma-core's on PATH.
#[derive(Debug)]
pub(crate) struct Programs {
    ours: Vec<(&'static str, PathBuf)>,
    /// rdma-safe's peer tests (`tests/peers.rs`): its package directory and
    /// the test binary.
    pub(super) peer_tests: (PathBuf, PathBuf),
}

impl Programs {
    /// Our programs among what cargo built (the `bin` targets it builds,
    /// not as tests, beside the integration tests that run them).
    pub(crate) fn from_artifacts(built: &[Artifact]) -> Result<Programs> {
        let mut ours = Vec::new();
        for name in PROGRAMS {
            let exe = built
                .iter()
                .find(|a| {
                    a.package == "rdma-examples" && a.kind == "bin" && !a.test && a.name == name
                })
                .map(|a| a.exe.clone())
                .ok_or_else(|| format!("the build did not produce rdma-examples' `{name}`"))?;
            ours.push((name, exe));
        }
        let peer_tests = built
            .iter()
            .find(|a| a.package == "rdma-safe" && a.kind == "test" && a.name == PEER_TESTS)
            .map(|a| (a.manifest_dir.clone(), a.exe.clone()))
            .ok_or_else(|| format!("the build did not produce rdma-safe's `{PEER_TESTS}` test"))?;
        Ok(Programs { ours, peer_tests })
    }

    /// Every program at `/t/<name>`.
    #[cfg(test)]
    pub(super) fn for_tests() -> Programs {
        Programs {
            ours: PROGRAMS
                .iter()
                .map(|n| (*n, PathBuf::from(format!("/t/{n}"))))
                .collect(),
            peer_tests: (PathBuf::from("/w/rdma-safe"), PathBuf::from("/t/peers")),
        }
    }

    /// Our program `name`, quoted for bash.
    pub(super) fn ours(&self, name: &str) -> String {
        let exe = self
            .ours
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| p.as_path());
        shell_quote(&exe.unwrap_or(Path::new(name)).to_string_lossy())
    }
}

/// Fails (after printing everything) if the program's output says a page
/// it received was wrong: rdma-core's pingpongs print `invalid data in
/// page N` for `-c` but still exit 0.
fn no_invalid_data(cmd: &str) -> String {
    format!("set -o pipefail; {cmd} 2>&1 | awk '{{ print }} /invalid data/ {{ bad = 1 }} END {{ exit bad }}'")
}

/// The three pairs of one pingpong family: ours serving rdma-core's client,
/// rdma-core's serving ours, ours serving ours (server on B, so each host
/// serves in some step). `args` are both sides' options, `port` the first
/// of three TCP ports.
fn pingpong_trio(p: &mut Plan, progs: &Programs, name: &str, args: &str, port: u16, iters: u32) {
    let (ours, theirs) = (progs.ours(name), format!("ibv_{name}"));
    let expect = format!("^{iters} iters in [0-9.]+ seconds");
    let pairs = [
        (
            A,
            &ours,
            &theirs,
            "ours (A) serves, rdma-core's (B) connects",
        ),
        (
            A,
            &theirs,
            &ours,
            "rdma-core's (A) serves, ours (B) connects",
        ),
        (B, &ours, &ours, "ours (B) serves, ours (A) connects"),
    ];
    for (k, (server_host, server, client, how)) in pairs.into_iter().enumerate() {
        let port = port + k as u16;
        let common = format!("-d \"$RXE_DEVICE\" -g \"$RXE_GID_INDEX\" -p {port} {args}");
        let server = no_invalid_data(&format!("{server} {common}"));
        let client = no_invalid_data(&format!("{client} {common} \"$PEER_IPV4\""));
        p.pair_step(
            &format!("{name}: {how}"),
            port,
            Side {
                host: server_host,
                cmd: &server,
                expect: &expect,
            },
            Side {
                host: 1 - server_host,
                cmd: &client,
                expect: &expect,
            },
        );
    }
}

/// The tier's steps; every host runs the same plan, each its own side.
pub(crate) fn plan(progs: &Programs) -> Plan {
    let mut p = Plan::new();
    p.say(
        "== two hosts ==\n\
         Host A (192.168.77.1) and host B (192.168.77.2): two kernels, an rxe0 each,\n\
         joined by a virtual Ethernet link. In each step the server runs on one\n\
         host and the client on the other.",
    );
    let rc = format!("-n {ITERS} -c");
    pingpong_trio(&mut p, progs, "rc_pingpong", &rc, 18600, ITERS);
    let ud = format!("-n {ITERS} -s {UD_SIZE}");
    pingpong_trio(&mut p, progs, "ud_pingpong", &ud, 18610, ITERS);
    let srq = format!("-n {SRQ_ITERS} -q {SRQ_QPS}");
    pingpong_trio(&mut p, progs, "srq_pingpong", &srq, 18620, SRQ_ITERS);

    // rping: connected by address through the RDMA CM, no TCP side channel.
    let (ours, c) = (progs.ours("rping"), RPING_COUNT);
    let ours = ours.as_str();
    let last = c - 1;
    let server_sees = format!("server ping data: rdma-ping-{last}: ");
    let client_sees = format!("ping data: rdma-ping-{last}: ");
    let pairs = [
        (
            A,
            ours,
            "rping",
            "ours (A) serves, rdma-core's (B) connects",
        ),
        (
            A,
            "rping",
            ours,
            "rdma-core's (A) serves, ours (B) connects",
        ),
        (B, ours, ours, "ours (B) serves, ours (A) connects"),
    ];
    for (k, (server_host, server, client, how)) in pairs.into_iter().enumerate() {
        let port = 7174 + k as u16;
        p.pair_step(
            &format!("rping: {how}"),
            port,
            Side {
                host: server_host,
                cmd: &format!("{server} -s -a \"$RXE_IPV4\" -p {port} -v -C {c}"),
                expect: &server_sees,
            },
            Side {
                host: 1 - server_host,
                cmd: &format!("{client} -c -a \"$PEER_IPV4\" -p {port} -v -V -C {c}"),
                expect: &client_sees,
            },
        );
    }
    pairs_library::peer_test_steps(&mut p, progs);
    pairs_perf::perf_steps(&mut p, progs);
    pairs_perf::async_echo_step(&mut p, progs);
    pairs_perf::dead_host_step(&mut p, progs);
    pairs_stream::stream_steps(&mut p, progs);
    faults::fault_steps(&mut p, progs);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_crosses_hosts_in_both_directions() {
        let progs = Programs::for_tests();
        let text = plan(&progs).text().to_string();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("pair_step "))
            .collect();
        // ... + 1: the dead host under perf -q 4; + 7: the stream steps.
        assert_eq!(steps.len(), 12 + 2 + 10 + 1 + 7 + 29, "{text}");
        // rdma-core's client against our server on A, then the reverse.
        assert!(
            steps[0].contains(" 18600 0 'set -o pipefail; /t/rc_pingpong -d"),
            "{}",
            steps[0]
        );
        assert!(
            steps[0].contains("'set -o pipefail; ibv_rc_pingpong -d"),
            "{}",
            steps[0]
        );
        assert!(
            steps[1].contains(" 18601 0 'set -o pipefail; ibv_rc_pingpong"),
            "{}",
            steps[1]
        );
        assert!(steps[2].contains(" 18602 1 "), "{}", steps[2]);
        assert!(
            steps[0].ends_with(" '^200 iters in [0-9.]+ seconds' '^200 iters in [0-9.]+ seconds'")
        );
        assert!(steps[4].contains("-s 1024"), "{}", steps[4]);
        assert!(steps[7].contains("'^50 iters in"), "{}", steps[7]);
        assert!(steps[9].contains(
            "'/t/rping -s -a \"$RXE_IPV4\" -p 7174 -v -C 10' 'rping -c -a \"$PEER_IPV4\" -p 7174 -v -V -C 10' \
             'server ping data: rdma-ping-9: ' 'ping data: rdma-ping-9: '"
        ), "{}", steps[9]);
    }
}
