//! `cargo xtask bench --instructions`: the runs under valgrind's callgrind
//! and their commands. Per test, size and measurement (`--reps`) each tool
//! runs twice, with n1 and n2 operations, server and client both under
//! callgrind; [`super::instruction_counts`] turns the files into
//! instructions per operation.
//!
//! What is counted:
//!
//! * ours: only inside `perf`'s measured loops (`--toggle-collect` on the
//!   `measured_loop` marker around each loop, client and server), so that
//!   set-up and the analysis after the loop (sorting latency samples,
//!   `Bandwidth::from_times`) are not;
//! * perftest: Debian's binaries are stripped (no symbol of its own, not
//!   even `run_iter_bw`), so callgrind counts the whole program and
//!   [`super::instruction_counts`] keeps its loops: the functions that call
//!   the provider's poll function, inclusive (its bandwidth report's peak
//!   search is quadratic in the samples, which no n-difference cancels).
//!
//! For both, `(Ir(n2) - Ir(n1)) / (n2 - n1)` keeps the per-operation work
//! (posting, polling, storing time stamps) and cancels whatever a run does
//! once. With `-q N` both tools run `-n` on every queue pair (perftest's
//! meaning of `-n`, not the timing runs' share of it), and the difference
//! divides by N x (n2 - n1) operations.

use std::path::Path;

use super::plan::{depth_and_inline, size_option, Tool};
use super::settings::Settings;
use super::suite::Test;
use crate::rxe::Plan;
use crate::shell::shell_quote;

/// First TCP port; run k uses `BASE_PORT + k` (the timing runs' range:
/// the two never run in one boot).
const BASE_PORT: u32 = 19000;

/// Where valgrind keeps its temporary files: it cannot on the guest's 9p
/// root (its shared-memory file needs a tmpfs), so the plan's first step
/// makes sure this is one.
const VG_TMP: &str = "/dev/shm";

/// The marker around ours' measured loops (see perf's `measured.rs`).
pub(super) const TOGGLE: &str = "*measured_loop*";

/// How long a client waits for its server to listen: valgrind starts a
/// program slowly under emulation (seconds reading ours' debug info).
const SERVER_START_SECS: u32 = 240;

/// perf's `--timeout` under callgrind: its default of 30 s (plus 1 s per
/// 1000 operations for a passive server) ran out while an atomic_bw client
/// of 6000 operations ran under valgrind.
const PERF_TIMEOUT: &str = " --timeout 300";

/// One server/client pair under callgrind.
#[derive(Debug, Clone)]
pub(super) struct CgRun {
    pub(super) test: Test,
    pub(super) tool: Tool,
    pub(super) size: u64,
    /// Operations of the run: n1 or n2.
    pub(super) n: u32,
    /// The measurement (1..=reps) the run belongs to.
    pub(super) rep: usize,
}

impl CgRun {
    /// File name stem under `raw/`: `<stem>.client.cg`, `<stem>.server.cg`
    /// and each side's output (`.txt`).
    pub(super) fn stem(&self) -> String {
        format!(
            "cg-{}-{}-{}-n{}-r{}",
            self.tool.name(),
            self.test.name,
            self.size,
            self.n,
            self.rep
        )
    }

    /// The end of the run's step label.
    pub(super) fn label_tail(&self) -> String {
        format!(
            "callgrind {} {} {} B n={} measurement {}",
            self.tool.name(),
            self.test.name,
            self.size,
            self.n,
            self.rep
        )
    }
}

/// Every run in plan order: per test, size and measurement, n1 then n2,
/// perftest then ours (alternating, as the timing runs).
pub(super) fn runs(a: &Settings) -> Vec<CgRun> {
    let Some(iters) = a.instructions else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for &test in &a.tests {
        let (n1, n2) = iters.of(test);
        for size in a.sizes_of(test) {
            for rep in 1..=a.reps {
                for n in [n1, n2] {
                    for tool in [Tool::Perftest, Tool::Ours] {
                        v.push(CgRun {
                            test,
                            tool,
                            size,
                            n,
                            rep,
                        });
                    }
                }
            }
        }
    }
    v
}

/// The callgrind command prefix of one side, writing to `$f.<side>.cg`.
fn valgrind(tool: Tool, side: &str) -> String {
    let toggle = match tool {
        Tool::Ours => format!(" --toggle-collect={}", shell_quote(TOGGLE)),
        // C programs: the whole program (a stream row's TCP run would be
        // rstream's; --instructions runs none).
        Tool::Perftest | Tool::Tcp => String::new(),
    };
    // --vgdb=no: no gdbserver FIFOs (they too would need the tmpfs).
    // --compress-pos=no: absolute line numbers, simpler to read back.
    format!(
        "TMPDIR={VG_TMP} valgrind --tool=callgrind --vgdb=no -q --compress-pos=no{toggle} \
         --callgrind-out-file=\"$f.{side}.cg\""
    )
}

/// A shell loop that waits until the server listens: on TCP `port`, or
/// (rdma_cm) with a listening CM id on it.
fn wait_for_server(cm: bool, port: u32) -> String {
    let probe = if cm {
        format!("rdma res show cm_id 2>/dev/null | grep -q ':{port} '")
    } else {
        format!("ss -Hltn 'sport = :{port}' 2>/dev/null | grep -q .")
    };
    format!(
        "for _ in $(seq 1 {}); do {probe} && break; sleep 0.5; done",
        SERVER_START_SECS * 2
    )
}

/// The server's and the client's program and arguments (without the
/// valgrind prefix) of run `r` on `port`.
fn programs(a: &Settings, r: &CgRun, perf: &str, port: u32) -> (String, String) {
    let dev = "-d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\"";
    let s = size_option(r.test, r.size);
    // `-q N` and `-b` as the timing runs give them, but `-n` whole: both
    // tools run it on every queue pair (perftest's `-q` semantics), and
    // Ir/op divides by `n` x N (`instruction_counts`).
    let extra = format!("{}{}", depth_and_inline(a, r.test), r.test.multi_flags());
    let n = r.n;
    match (r.tool, r.test.cm) {
        (Tool::Tcp, _) => unreachable!("--instructions runs no stream row"),
        (Tool::Perftest, false) => {
            let cmd = format!("{} {dev}{s} -n {n}{extra} -F -p {port}", r.test.perftest);
            (cmd.clone(), format!("{cmd} 127.0.0.1"))
        }
        (Tool::Perftest, true) => {
            let cmd = format!(
                "{} -d \"$RXE_DEVICE\" -R{s} -n {n}{extra} -F -p {port}",
                r.test.perftest
            );
            (cmd.clone(), format!("{cmd} \"$RXE_IPV4\""))
        }
        (Tool::Ours, false) => {
            let name = r.test.perf_name();
            let mode = match (r.test.asynchronous, r.test.threads) {
                (true, _) => " --async".to_string(),
                (false, t) if t > 1 => format!(" --threads {t}"),
                _ => String::new(),
            };
            (
                format!("{perf} {name} {dev} -p {port}{PERF_TIMEOUT} --json"),
                format!(
                    "{perf} {name}{mode} {dev}{s} -n {n}{extra} -p {port}{PERF_TIMEOUT} --json 127.0.0.1"
                ),
            )
        }
        (Tool::Ours, true) => {
            let cmd = format!(
                "{perf} {} -R{s} -n {n}{extra} -p {port}{PERF_TIMEOUT} --json",
                r.test.perf_name()
            );
            (cmd.clone(), format!("{cmd} \"$RXE_IPV4\""))
        }
    }
}

/// The plan: a tmpfs for valgrind, then every run as a server/client step;
/// the guest writes callgrind's files and both sides' output to
/// `$XTASK_OUT/raw`.
pub(super) fn plan(a: &Settings, runs: &[CgRun], perf: &Path) -> Plan {
    let perf = shell_quote(&perf.to_string_lossy());
    let raw = "R=\"$XTASK_OUT/raw\"; mkdir -p \"$R\"";
    let mut p = Plan::new();
    p.say(&format!(
        "== cargo xtask bench --instructions: {} server/client pairs under callgrind \
         ({} measurements x 2 operation counts x 2 tools per test and size) ==\n\
         ours counts inside its measured loops ({TOGGLE}), perftest the whole program \
         (its loops are picked out afterwards);\n\
         callgrind's files and each side's output go to the results directory's raw/.",
        runs.len(),
        a.reps
    ));
    p.sh_step(
        "valgrind: a tmpfs for its temporary files",
        &format!(
            "mountpoint -q {VG_TMP} || {{ mkdir -p {VG_TMP} && mount -t tmpfs tmpfs {VG_TMP}; }}; \
             valgrind --version"
        ),
    );
    for (k, r) in runs.iter().enumerate() {
        let port = BASE_PORT + k as u32;
        let (server, client) = programs(a, r, &perf, port);
        let f = format!("f=\"$R/{}\"", r.stem());
        let server = format!(
            "{raw}; {f}; {} {server} >\"$f.server.txt\" 2>&1; rc=$?; \
             [ $rc = 0 ] || cat \"$f.server.txt\"; exit $rc",
            valgrind(r.tool, "server")
        );
        let client = format!(
            "{raw}; {f}; {}; {} {client} >\"$f.client.txt\" 2>&1; rc=$?; \
             [ $rc = 0 ] || cat \"$f.client.txt\"; exit $rc",
            wait_for_server(r.test.cm, port),
            valgrind(r.tool, "client")
        );
        let label = format!("[{}/{}] {}", k + 1, runs.len(), r.label_tail());
        // The client waits for the server itself (above): the runner's
        // own wait is too short for a server under valgrind.
        p.server_client(&label, 0, &server, &client);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::super::settings;
    use super::*;

    fn args(words: &[&str]) -> Settings {
        settings::parse(words).unwrap()
    }

    #[test]
    fn two_counts_per_measurement_and_tool() {
        let a = args(&["--instructions", "--tests", "write_bw,send_lat"]);
        let r = runs(&a);
        // 2 tests x 1 size x 2 measurements x 2 counts x 2 tools.
        assert_eq!(r.len(), 16);
        let first: Vec<String> = r.iter().take(4).map(CgRun::stem).collect();
        assert_eq!(
            first,
            [
                "cg-perftest-write_bw-64-n2000-r1",
                "cg-ours-write_bw-64-n2000-r1",
                "cg-perftest-write_bw-64-n6000-r1",
                "cg-ours-write_bw-64-n6000-r1"
            ]
        );
        assert!(r.iter().any(|r| r.test.name == "send_lat" && r.n == 3000));
        assert!(runs(&args(&[])).is_empty(), "timing runs only");
    }

    #[test]
    fn ours_counts_its_loops_and_perftest_everything() {
        let a = args(&["--instructions", "--tests", "send_lat", "--reps", "1"]);
        let text = plan(&a, &runs(&a), Path::new("/x/perf")).text().to_string();
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("server_client "))
            .collect();
        assert_eq!(steps.len(), 4);
        for s in &steps {
            assert!(
                s.contains("--vgdb=no") && s.contains("TMPDIR=/dev/shm"),
                "{s}"
            );
            assert!(s.contains("-n 1000") || s.contains("-n 3000"), "{s}");
        }
        let ours: Vec<&&str> = steps.iter().filter(|s| s.contains("/x/perf")).collect();
        assert_eq!(ours.len(), 2);
        assert!(ours.iter().all(|s| s.contains("measured_loop")));
        assert!(steps
            .iter()
            .filter(|s| s.contains("ib_send_lat"))
            .all(|s| !s.contains("toggle-collect")));
        assert!(text.contains("mount -t tmpfs"), "{text}");
    }

    #[test]
    fn many_queue_pair_rows_run_n_on_each() {
        let a = args(&[
            "--instructions",
            "--tests",
            "write_bw_q4_t2,send_bw_bidi",
            "--reps",
            "1",
        ]);
        let r: Vec<CgRun> = runs(&a)
            .into_iter()
            .filter(|r| r.test.threads == 2)
            .collect();
        let (server, client) = programs(&a, &r[0], "perf", 1);
        assert!(server.contains("-n 2000 -t 128 -q 4 -F"), "{server}");
        assert!(client.contains("-n 2000 -t 128 -q 4 -F"), "{client}");
        let (server, client) = programs(&a, &r[1], "perf", 1);
        assert_eq!(
            server,
            "perf write_bw -d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\" -p 1 --timeout 300 --json"
        );
        assert!(
            client.starts_with("perf write_bw --threads 2 -d"),
            "{client}"
        );
        assert!(client.contains("-n 2000 -t 128 -q 4 -p 1"), "{client}");
        let bidi = runs(&a)
            .into_iter()
            .find(|r| r.test.bidirectional && r.tool == Tool::Ours)
            .unwrap();
        let (_, client) = programs(&a, &bidi, "perf", 1);
        assert!(client.contains("-n 2000 -t 128 -b -p 1"), "{client}");
    }

    #[test]
    fn cm_and_async_rows_run_their_own_commands() {
        let a = args(&[
            "--instructions",
            "--tests",
            "write_lat",
            "--cm",
            "--reps",
            "1",
        ]);
        let r = runs(&a);
        let (server, client) = programs(&a, &r[1], "perf", 19001);
        assert_eq!(
            server,
            "perf write_lat -R -s 64 -n 1000 -p 19001 --timeout 300 --json"
        );
        assert!(client.ends_with("--json \"$RXE_IPV4\""), "{client}");
        let (_, client) = programs(&a, &r[0], "perf", 19000);
        assert!(
            client.starts_with("ib_write_lat -d \"$RXE_DEVICE\" -R"),
            "{client}"
        );
        assert!(wait_for_server(true, 19000).contains("rdma res show cm_id"));
        let a = args(&[
            "--instructions",
            "--tests",
            "send_bw",
            "--async",
            "--reps",
            "1",
        ]);
        let (_, client) = programs(&a, &runs(&a)[1], "perf", 1);
        assert!(client.contains("send_bw --async"), "{client}");
        assert!(client.contains("-n 2000 -t 128"), "{client}");
    }
}
