//! The two-host tier's library steps: rdma-safe's own peer tests
//! (`rdma-safe/tests/peers.rs`) with their server sides on one host and
//! their client sides on the other, then the other way round.
//!
//! The test binary runs each test's one side when `RDMA_TEST_PEER` says
//! which (`server`, or `client:HOST`); both hosts run it with
//! `--test-threads=1`, so the tests meet in order, each over a fresh TCP
//! side channel on [`PORT`] (see `rdma-safe/tests/common/peer.rs`), and
//! with `--show-output`, so that what the passing tests print (the
//! keepalive tests' detection times) is in the step's log.

use super::pairs::{Programs, A, B};
use crate::rxe::{Plan, Side};
use crate::shell::shell_quote;

/// The TCP port each test's server side listens on (the fault steps use
/// 18700 and up).
const PORT: u16 = 18650;

/// libtest's last line when every test of the binary passed (and some ran).
const ALL_PASSED: &str = "test result: ok\\. [1-9][0-9]* passed; 0 failed; 0 ignored";

/// Two steps: servers on A and clients on B, then servers on B and clients
/// on A.
pub(super) fn peer_test_steps(p: &mut Plan, progs: &Programs) {
    let (dir, exe) = &progs.peer_tests;
    let (dir, exe) = (
        shell_quote(&dir.to_string_lossy()),
        shell_quote(&exe.to_string_lossy()),
    );
    let run = |role: &str| {
        format!(
            "cd {dir} && RDMA_TEST_PEER={role} RDMA_TEST_PEER_PORT={PORT} \
             RDMA_TEST_DEVICE=\"$RXE_DEVICE\" RDMA_TEST_REQUIRE_DEVICE=1 \
             {exe} --include-ignored --test-threads=1 --show-output"
        )
    };
    let (server, client) = (run("server"), run("client:\"$PEER_IPV4\""));
    for (server_host, how) in [
        (A, "servers on A, clients on B"),
        (B, "servers on B, clients on A"),
    ] {
        p.pair_step(
            &format!("rdma-safe peer tests: {how}"),
            PORT,
            Side {
                host: server_host,
                cmd: &server,
                expect: ALL_PASSED,
            },
            Side {
                host: 1 - server_host,
                cmd: &client,
                expect: ALL_PASSED,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions_run_the_peer_tests_with_one_role_each() {
        let mut p = Plan::new();
        peer_test_steps(&mut p, &Programs::for_tests());
        let text = p.text();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("pair_step "))
            .collect();
        assert_eq!(steps.len(), 2, "{text}");
        assert!(steps[0].contains(" 18650 0 'cd /w/rdma-safe && RDMA_TEST_PEER=server "));
        assert!(steps[0].contains("RDMA_TEST_PEER=client:\"$PEER_IPV4\" "));
        assert!(steps[1].contains(" 18650 1 "), "{}", steps[1]);
        for s in &steps {
            assert!(
                s.contains("/t/peers --include-ignored --test-threads=1 --show-output"),
                "{s}"
            );
            assert!(s.contains("RDMA_TEST_REQUIRE_DEVICE=1"), "{s}");
        }
    }
}
