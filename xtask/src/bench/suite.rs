//! The tests bench runs: our name and perftest's program for each, what it
//! measures, and the target ours must meet against perftest; and the
//! stream rows, ours (rdma-examples' `rstream`) against rdmacm-utils'
//! `rstream`, with TCP (`rstream -T s`) for reference.

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
    /// 8 bytes, neither tool given `-s` then; the stream ping-pong's 64).
    pub(super) fixed_size: Option<u64>,
    /// Ours runs `perf --async` (the row is named `<test>_async`; perftest
    /// runs as for `<test>`).
    pub(super) asynchronous: bool,
    /// Both tools connect through the RDMA connection manager (`-R`; the
    /// row is named `<test>_cm`), and bench reports the data connection's
    /// set-up time beside the metric.
    pub(super) cm: bool,
    /// Queue pairs (`-q`; the row is named `<test>_q<N>`): each runs the
    /// run's iterations divided by this, so a run moves the same bytes.
    pub(super) qps: u32,
    /// Both directions at once (`-b`; the row is named `<test>_bidi`):
    /// each tool reports the sum.
    pub(super) bidirectional: bool,
    /// Threads our client drives its queue pairs from (`--threads`; the
    /// row is named `<test>_q<N>_t<T>`); perftest has one thread.
    pub(super) threads: u32,
    /// A byte-stream row: rstream's test (`stream_bw`: `-S size -C n`;
    /// `stream_lat`: `-S 64 -C 1 -I n`) by rdmacm-utils' `rstream` (the
    /// row's "perftest" side), by ours, and over TCP (`rstream -T s`, a
    /// reference without a target).
    pub(super) stream: bool,
}

/// What a row is unless it says otherwise: bandwidth, inline where the
/// operation can carry it, any size, blocking, connected over TCP, one
/// queue pair, one direction, one thread, RDMA verbs (no stream).
const ROW: Test = Test {
    name: "",
    perftest: "",
    bw: true,
    inline: true,
    fixed_size: None,
    asynchronous: false,
    cm: false,
    qps: 1,
    bidirectional: false,
    threads: 1,
    stream: false,
};

pub(super) const TESTS: [Test; 28] = [
    Test {
        name: "write_bw",
        perftest: "ib_write_bw",
        ..ROW
    },
    Test {
        name: "read_bw",
        perftest: "ib_read_bw",
        inline: false,
        ..ROW
    },
    Test {
        name: "send_bw",
        perftest: "ib_send_bw",
        ..ROW
    },
    Test {
        name: "write_lat",
        perftest: "ib_write_lat",
        bw: false,
        ..ROW
    },
    Test {
        name: "send_lat",
        perftest: "ib_send_lat",
        bw: false,
        ..ROW
    },
    // Fetch-and-add, both tools' default atomic.
    Test {
        name: "atomic_bw",
        perftest: "ib_atomic_bw",
        inline: false,
        fixed_size: Some(8),
        ..ROW
    },
    Test {
        name: "atomic_lat",
        perftest: "ib_atomic_lat",
        bw: false,
        inline: false,
        fixed_size: Some(8),
        ..ROW
    },
    // `--async`: ours on the owned-buffer futures.
    Test {
        name: "write_bw_async",
        perftest: "ib_write_bw",
        asynchronous: true,
        ..ROW
    },
    Test {
        name: "read_bw_async",
        perftest: "ib_read_bw",
        inline: false,
        asynchronous: true,
        ..ROW
    },
    Test {
        name: "send_bw_async",
        perftest: "ib_send_bw",
        asynchronous: true,
        ..ROW
    },
    Test {
        name: "write_lat_async",
        perftest: "ib_write_lat",
        bw: false,
        asynchronous: true,
        ..ROW
    },
    Test {
        name: "send_lat_async",
        perftest: "ib_send_lat",
        bw: false,
        asynchronous: true,
        ..ROW
    },
    // `--cm`: both tools with `-R`, connected through the RDMA CM.
    Test {
        name: "write_bw_cm",
        perftest: "ib_write_bw",
        cm: true,
        ..ROW
    },
    Test {
        name: "read_bw_cm",
        perftest: "ib_read_bw",
        inline: false,
        cm: true,
        ..ROW
    },
    Test {
        name: "send_bw_cm",
        perftest: "ib_send_bw",
        cm: true,
        ..ROW
    },
    Test {
        name: "write_lat_cm",
        perftest: "ib_write_lat",
        bw: false,
        cm: true,
        ..ROW
    },
    Test {
        name: "send_lat_cm",
        perftest: "ib_send_lat",
        bw: false,
        cm: true,
        ..ROW
    },
    Test {
        name: "atomic_bw_cm",
        perftest: "ib_atomic_bw",
        inline: false,
        fixed_size: Some(8),
        cm: true,
        ..ROW
    },
    Test {
        name: "atomic_lat_cm",
        perftest: "ib_atomic_lat",
        bw: false,
        inline: false,
        fixed_size: Some(8),
        cm: true,
        ..ROW
    },
    // Many queue pairs (`-q`) and both directions (`-b`) on both tools;
    // named with `--tests` (perftest's send_bw -q 4 hung at 64 KiB without
    // -R in one run, so send has only the -b row).
    Test {
        name: "write_bw_q4",
        perftest: "ib_write_bw",
        qps: 4,
        ..ROW
    },
    Test {
        name: "write_bw_q16",
        perftest: "ib_write_bw",
        qps: 16,
        ..ROW
    },
    Test {
        name: "write_bw_bidi",
        perftest: "ib_write_bw",
        bidirectional: true,
        ..ROW
    },
    Test {
        name: "read_bw_q4",
        perftest: "ib_read_bw",
        inline: false,
        qps: 4,
        ..ROW
    },
    Test {
        name: "send_bw_bidi",
        perftest: "ib_send_bw",
        bidirectional: true,
        ..ROW
    },
    // Our client's four queue pairs driven from 2 and 4 threads, against
    // perftest's one thread polling four (write_bw_q4 is the one-thread
    // row). The bench's guest has 2 vCPUs: 4 threads share them.
    Test {
        name: "write_bw_q4_t2",
        perftest: "ib_write_bw",
        qps: 4,
        threads: 2,
        ..ROW
    },
    Test {
        name: "write_bw_q4_t4",
        perftest: "ib_write_bw",
        qps: 4,
        threads: 4,
        ..ROW
    },
    // Byte streams (rsocket's protocol): throughput of rstream's test at
    // every size, and its 64-byte ping-pong.
    Test {
        name: "stream_bw",
        perftest: "rstream",
        inline: false,
        stream: true,
        ..ROW
    },
    Test {
        name: "stream_lat",
        perftest: "rstream",
        bw: false,
        inline: false,
        fixed_size: Some(64),
        stream: true,
        ..ROW
    },
];

impl Test {
    /// The test's name for `perf` (without `_async`, `_cm`, `_q<N>[_t<T>]`
    /// or `_bidi`).
    pub(super) fn perf_name(self) -> &'static str {
        let end = ["_async", "_cm", "_q", "_bidi"]
            .iter()
            .filter_map(|marker| self.name.find(marker))
            .min()
            .unwrap_or(self.name.len());
        &self.name[..end]
    }

    /// `-q N` and `-b` for this row's both tools ("" for one queue pair,
    /// one direction).
    pub(super) fn multi_flags(self) -> String {
        let mut f = String::new();
        if self.qps > 1 {
            f.push_str(&format!(" -q {}", self.qps));
        }
        if self.bidirectional {
            f.push_str(" -b");
        }
        f
    }

    /// The `--cm` variant of this test, if it has one.
    pub(super) fn cm_variant(self) -> Option<Test> {
        TESTS
            .iter()
            .copied()
            .find(|t| t.cm && t.perf_name() == self.name)
    }

    /// The `--async` variant of this test, if it has one.
    pub(super) fn async_variant(self) -> Option<Test> {
        TESTS
            .iter()
            .copied()
            .find(|t| t.asynchronous && t.perf_name() == self.name)
    }

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

    /// What the row's values are (bench.json's `metric`).
    pub(super) fn metric(self) -> &'static str {
        match (self.stream, self.bw) {
            (false, true) => "BW average [MB/sec]",
            (false, false) => "t_typical [usec]",
            (true, true) => "throughput, both directions [MB/sec, from usec/xfer]",
            (true, false) => "usec/xfer [half round trip, mean]",
        }
    }
}
