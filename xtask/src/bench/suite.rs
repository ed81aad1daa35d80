//! The tests bench runs: our name and perftest's program for each, what it
//! measures, and the target ours must meet against perftest.

/// One test: our name, perftest's program, bandwidth or latency, and
/// whether its operation can carry inline data.
#[derive(Debug, Clone, Copy)]
pub(super) struct Test {
    pub(super) name: &'static str,
    pub(super) perftest: &'static str,
    pub(super) bw: bool,
    /// Sends and RDMA writes can carry their data inline in the work
    /// request; RDMA reads cannot, and perftest's read tests refuse `-I`.
    pub(super) inline: bool,
    /// The one size the test runs whatever `--sizes` says (the atomics'
    /// 8 bytes); neither tool is given `-s` then.
    pub(super) fixed_size: Option<u64>,
}

pub(super) const TESTS: [Test; 7] = [
    Test {
        name: "write_bw",
        perftest: "ib_write_bw",
        bw: true,
        inline: true,
        fixed_size: None,
    },
    Test {
        name: "read_bw",
        perftest: "ib_read_bw",
        bw: true,
        inline: false,
        fixed_size: None,
    },
    Test {
        name: "send_bw",
        perftest: "ib_send_bw",
        bw: true,
        inline: true,
        fixed_size: None,
    },
    Test {
        name: "write_lat",
        perftest: "ib_write_lat",
        bw: false,
        inline: true,
        fixed_size: None,
    },
    Test {
        name: "send_lat",
        perftest: "ib_send_lat",
        bw: false,
        inline: true,
        fixed_size: None,
    },
    // Fetch-and-add, both tools' default atomic.
    Test {
        name: "atomic_bw",
        perftest: "ib_atomic_bw",
        bw: true,
        inline: false,
        fixed_size: Some(8),
    },
    Test {
        name: "atomic_lat",
        perftest: "ib_atomic_lat",
        bw: false,
        inline: false,
        fixed_size: Some(8),
    },
];

impl Test {
    /// The target for ours/perftest: bandwidth at least 1.00, latency at
    /// most 1.05.
    pub(super) fn target(self) -> f64 {
        if self.bw {
            1.00
        } else {
            1.05
        }
    }

    /// Whether `ratio` (ours/perftest) meets [`Test::target`].
    pub(super) fn meets(self, ratio: f64) -> bool {
        if self.bw {
            ratio >= self.target()
        } else {
            ratio <= self.target()
        }
    }

    /// Whether `ours` beats `perftest` in this test's metric.
    pub(super) fn better(self, ours: f64, perftest: f64) -> bool {
        if self.bw {
            ours > perftest
        } else {
            ours < perftest
        }
    }

    pub(super) fn metric(self) -> &'static str {
        if self.bw {
            "BW average [MB/sec]"
        } else {
            "t_typical [usec]"
        }
    }
}
