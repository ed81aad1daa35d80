//! `perf` with its peer killed (SIGKILL) or frozen (SIGSTOP) a few seconds
//! into a run, on the many-queue-pair paths (`-q 4`, `--threads 2`, `-b`)
//! and the one-queue-pair waits, in `perf`'s own protocol and with `-R`.
//!
//! The survivor must exit non-zero within the bound `perf --help`
//! documents (with `--timeout` [`T`]: about a second for a killed peer, at
//! most T + 2 s; T after the last completion or heartbeat for a stopped
//! one; the `-R` server waiting through its client's run: T plus the run
//! at the floor rate), each with generous slack for an emulated machine;
//! say that its peer is gone or stopped (never blame a key); and, while it
//! waits, use at most about half a core.
//!
//! `#[ignore]`d like every device test (`cargo xtask test-rxe` runs them
//! on rxe); each case has its own port (19800..).

mod common;

use common::perftest::ip;
use common::*;
use std::time::{Duration, Instant};

/// The sides' `--timeout`, in seconds.
const T: u64 = 10;

/// Slack on every bound: a loaded VM under software emulation.
const SLACK: Duration = Duration::from_secs(20);

/// How long the run goes on before the peer is killed or stopped.
const INTO_RUN: Duration = Duration::from_secs(3);

/// The most CPU the survivor may use while it waits, in cores.
const MAX_CORES: f64 = 0.5;

/// Whom the test kills or stops.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Victim {
    Server,
    Client,
}

/// What is done to the victim.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Fate {
    Killed,
    Stopped,
}

/// One case: the test, both sides' options, and the survivor's bound
/// after the signal.
struct Case<'a> {
    test: &'a str,
    extra: &'a [&'a str],
    victim: Victim,
    fate: Fate,
    bound: Duration,
    /// How long the run goes on before the signal.
    into: Duration,
    /// Whether the survivor only waits once the peer is hit (else it
    /// still has its own operations to run, and its CPU is theirs).
    waits: bool,
}

/// The bound for a killed peer: about a second, at most T + 2 s.
fn killed() -> Duration {
    Duration::from_secs(T + 2)
}

/// The bound for a stopped peer: T after the last completion or
/// heartbeat (the detection itself is one rest, 2 ms).
fn stopped() -> Duration {
    Duration::from_secs(T + 1)
}

/// User plus system time of `pid` so far, in seconds (`/proc/<pid>/stat`,
/// fields 14 and 15).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields after it are counted
    // from its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

/// Sends `sig` to `p`.
fn signal(p: &Proc, sig: i32) {
    let pid = i32::try_from(p.child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// Runs `case` on `port` and checks the survivor.
fn run(case: &Case, port: u16) {
    let rdma_cm = case.extra.contains(&"-R");
    let mut opts = args(&["-p", &port.to_string(), "--timeout", &T.to_string()]);
    if !rdma_cm {
        opts.extend(args(&["-d", &device(), "-x", &gid_index()]));
    }
    opts.extend(args(case.extra));
    let mut server = args(&[case.test]);
    server.extend(opts.clone());
    let mut client = args(&[case.test]);
    client.extend(opts);
    client.push(if rdma_cm { ip() } else { "127.0.0.1".into() });

    let s = spawn("server", PERF, &server);
    assert!(
        s.wait_for_line("waiting for a client", TIMEOUT / 2),
        "{} never said it was waiting",
        s.label
    );
    let c = spawn("client", PERF, &client);
    // The header's last address line is printed before the run starts.
    if !c.wait_for_line("remote", TIMEOUT) {
        let (c, s) = (c.finish(Instant::now()), s.finish(Instant::now()));
        panic!(
            "{}: no header:\n{}\n{}:\n{}",
            c.label, c.output, s.label, s.output
        );
    }
    std::thread::sleep(case.into);
    let (victim, survivor) = match case.victim {
        Victim::Server => (s, c),
        Victim::Client => (c, s),
    };
    let pid = survivor.child.id();
    let cpu_before = cpu_seconds(pid);
    let struck = Instant::now();
    match case.fate {
        Fate::Killed => signal(&victim, libc::SIGKILL),
        Fate::Stopped => signal(&victim, libc::SIGSTOP),
    }
    // The survivor's CPU time until it ends, sampled as it runs.
    let limit = struck + case.bound + SLACK;
    let mut survivor = survivor;
    let mut cpu_last = cpu_before;
    let ended = loop {
        if let Ok(Some(_)) = survivor.child.try_wait() {
            break Some(struck.elapsed());
        }
        if Instant::now() >= limit {
            break None;
        }
        cpu_last = cpu_seconds(pid).or(cpu_last);
        std::thread::sleep(Duration::from_millis(100));
    };
    let waited = struck.elapsed();
    let f = survivor.finish(Instant::now());
    let _ = victim.finish(Instant::now());
    let cores = match (cpu_before, cpu_last) {
        (Some(a), Some(b)) => (b - a) / waited.as_secs_f64(),
        _ => f64::NAN,
    };
    eprintln!(
        "{} {:?} {:?}: survivor ended after {ended:?}, {cores:.2} cores; {:?}",
        case.test,
        case.extra,
        (case.victim, case.fate),
        f.output.lines().rev().find(|l| l.contains("perf"))
    );

    let ended = ended.unwrap_or_else(|| {
        panic!(
            "{}: still running {:?} after the {:?} {:?} was {:?}:\n{}",
            f.label,
            case.bound + SLACK,
            case.victim,
            case.fate,
            case.fate,
            f.output
        )
    });
    assert!(
        f.status.is_some_and(|s| !s.success()),
        "{}: must fail, status {:?}:\n{}",
        f.label,
        f.status,
        f.output
    );
    let why = match case.fate {
        Fate::Killed => ["peer is gone", "peer closed", "peer disconnected"],
        Fate::Stopped => ["silent or stopped", "peer gone", "peer is gone"],
    };
    assert!(
        why.iter().any(|w| f.output.contains(w)),
        "{}: the error must say the peer is gone or stopped ({why:?}):\n{}",
        f.label,
        f.output
    );
    // (The -R header prints keys: the error lines are on stderr.)
    let errors: String = f
        .output
        .lines()
        .filter(|l| l.starts_with("[stderr]"))
        .collect();
    assert!(
        !errors.to_lowercase().contains("rkey"),
        "{}: a dead peer is not a key problem:\n{}",
        f.label,
        f.output
    );
    // Over a wait this short the sampling says little.
    if case.waits && ended >= Duration::from_secs(2) {
        assert!(
            cores <= MAX_CORES,
            "{}: {cores:.2} cores while waiting {ended:?}:\n{}",
            f.label,
            f.output
        );
    }
}

/// Bandwidth options that keep a run going far longer than the test.
const LONG: &[&str] = &["-s", "65536", "-n", "200000"];

fn case(test: &'static str, extra: &[&'static str], victim: Victim, fate: Fate, port: u16) {
    let mut all: Vec<&str> = LONG.to_vec();
    all.extend_from_slice(extra);
    let bound = match fate {
        Fate::Killed => killed(),
        Fate::Stopped => stopped(),
    };
    run(
        &Case {
            test,
            extra: &all,
            victim,
            fate,
            bound,
            into: INTO_RUN,
            waits: true,
        },
        port,
    );
}

use Fate::{Killed, Stopped};
use Victim::{Client, Server};

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn read_bw_on_four_queue_pairs_server_killed() {
    case("read_bw", &["-q", "4"], Server, Killed, 19800);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_bw_on_four_queue_pairs_server_killed() {
    case("write_bw", &["-q", "4"], Server, Killed, 19801);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_bw_on_four_queue_pairs_client_killed() {
    case("send_bw", &["-q", "4"], Client, Killed, 19802);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_bw_on_four_queue_pairs_client_stopped() {
    case("send_bw", &["-q", "4"], Client, Stopped, 19803);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_bw_on_four_queue_pairs_client_stopped() {
    case("write_bw", &["-q", "4"], Client, Stopped, 19804);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_bw_on_two_threads_server_killed() {
    case(
        "write_bw",
        &["-q", "4", "--threads", "2"],
        Server,
        Killed,
        19805,
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_bw_on_two_threads_client_stopped() {
    case(
        "send_bw",
        &["-q", "4", "--threads", "2"],
        Client,
        Stopped,
        19806,
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_bw_both_ways_client_killed() {
    case("send_bw", &["-b"], Client, Killed, 19807);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_bw_on_one_queue_pair_client_stopped() {
    case("write_bw", &[], Client, Stopped, 19808);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_cm_send_bw_on_four_queue_pairs_client_stopped() {
    case("send_bw", &["-R", "-q", "4"], Client, Stopped, 19809);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_cm_write_bw_on_four_queue_pairs_server_killed() {
    case("write_bw", &["-R", "-q", "4"], Server, Killed, 19810);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_cm_send_bw_on_four_queue_pairs_client_killed() {
    case("send_bw", &["-R", "-q", "4"], Client, Killed, 19811);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_bw_both_ways_server_stopped() {
    // The client's own writes keep completing into the stopped server's
    // memory (the kernel answers them): it gives up T after its own run
    // (a few seconds of work at rxe's rate), working until then.
    run(
        &Case {
            test: "write_bw",
            extra: &["-b", "-s", "65536", "-n", "5000"],
            victim: Server,
            fate: Stopped,
            bound: stopped() + Duration::from_secs(40),
            into: INTO_RUN,
            waits: false,
        },
        19812,
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_cm_write_bw_on_one_queue_pair_client_stopped() {
    // The server sees nothing of the run but its end: it allows T plus the
    // run at 1000 operations and 1 MiB a second (here T + 21.2 s). A run
    // long enough to stop 3 s in would be allowed minutes: the client is
    // stopped as soon as its header is out, within its short run or the
    // handshakes before it.
    let (iters, size) = (20_000u64, 64u64);
    let allowance = T as f64 + iters as f64 / 1000.0 + (iters * size) as f64 / 1_048_576.0;
    run(
        &Case {
            test: "write_bw",
            extra: &["-R", "-s", "64", "-n", "20000"],
            victim: Client,
            fate: Stopped,
            bound: Duration::from_secs_f64(allowance),
            into: Duration::ZERO,
            waits: true,
        },
        19813,
    );
}
