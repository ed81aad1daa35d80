//! `ud_pingpong` and `srq_pingpong` against rdma-core's `ibv_ud_pingpong`
//! and `ibv_srq_pingpong` in both directions and against themselves, on a
//! real device (`cargo xtask test-rxe`). Each run
//! is killed after [`TIMEOUT`]; each uses its own TCP port.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Longest one program may run (rxe runs under emulation in CI).
const TIMEOUT: Duration = Duration::from_secs(60);
const OURS: &str = env!("CARGO_BIN_EXE_ud_pingpong");
const THEIRS: &str = "ibv_ud_pingpong";
const OURS_SRQ: &str = env!("CARGO_BIN_EXE_srq_pingpong");
const THEIRS_SRQ: &str = "ibv_srq_pingpong";
const ITERS: usize = 50;

fn env_or(vars: &[&str], default: &str) -> String {
    vars.iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| default.into())
}

/// A running program whose stdout a thread collects line by line.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: thread::JoinHandle<String>,
}

fn spawn(program: &str, args: &[String]) -> Proc {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let (tx, lines) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    let stdout = thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    Proc {
        child,
        lines,
        stdout,
    }
}

impl Proc {
    /// Whether a line containing `needle` appears within `limit`.
    fn wait_for_line(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    }

    /// Waits until `deadline`, killing the program then; its exit success
    /// and its output.
    fn finish(mut self, deadline: Instant) -> (bool, String) {
        let ok = loop {
            match self.child.try_wait().expect("wait") {
                Some(status) => break status.success(),
                None if Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break false;
                }
                None => thread::sleep(Duration::from_millis(50)),
            }
        };
        let mut out = self.stdout.join().unwrap_or_default();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut out);
        (ok, out)
    }
}

/// One ping-pong; both sides must end well and print the C program's
/// summary for `size` bytes and [`ITERS`] iterations.
fn pingpong(server: &str, client: &str, port: u16, size: usize) {
    pingpong_with(server, client, port, size, &[]);
}

/// [`pingpong`] with extra options for both sides.
fn pingpong_with(server: &str, client: &str, port: u16, size: usize, extra: &[&str]) {
    let (dev, gid) = (
        env_or(&["RDMA_TEST_DEVICE", "RXE_DEVICE"], "rxe0"),
        env_or(&["RXE_GID_INDEX"], "1"),
    );
    let common: Vec<String> = ["-d", &dev, "-g", &gid, "-n", &ITERS.to_string()]
        .into_iter()
        .chain(["-s", &size.to_string(), "-p", &port.to_string()])
        .chain(extra.iter().copied())
        .map(str::to_owned)
        .collect();
    let mut client_args = common.clone();
    client_args.push("127.0.0.1".into());
    let deadline = Instant::now() + TIMEOUT;
    let s = spawn(server, &common);
    if server == OURS || server == OURS_SRQ {
        // Ours listens before it prints its address.
        assert!(
            s.wait_for_line("local address:", TIMEOUT / 2),
            "the server never printed its address"
        );
    } else {
        // The C program's stdout is block-buffered in a pipe: give it a
        // moment instead of a line.
        thread::sleep(Duration::from_millis(500));
    }
    let c = spawn(client, &client_args);
    let (c_ok, c_out) = c.finish(deadline);
    let (s_ok, s_out) = s.finish(if c_ok { deadline } else { Instant::now() });
    let report = format!("--- server {server}:\n{s_out}\n--- client {client}:\n{c_out}");
    assert!(s_ok && c_ok, "a side failed\n{report}");
    for out in [&s_out, &c_out] {
        for needle in [
            "  local address:  LID 0x".to_owned(),
            "  remote address: LID 0x".to_owned(),
            format!("{} bytes in ", size * ITERS * 2),
            format!("{ITERS} iters in "),
        ] {
            assert!(out.contains(&needle), "missing `{needle}`\n{report}");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn ud_pingpong_server_with_ibv_ud_pingpong_client() {
    pingpong(OURS, THEIRS, 19300, 1);
    pingpong(OURS, THEIRS, 19301, 1000);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn ud_pingpong_client_with_ibv_ud_pingpong_server() {
    pingpong(THEIRS, OURS, 19310, 1);
    pingpong(THEIRS, OURS, 19311, 1000);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn ud_pingpong_with_itself() {
    pingpong(OURS, OURS, 19320, 1000);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn srq_pingpong_server_with_ibv_srq_pingpong_client() {
    pingpong(OURS_SRQ, THEIRS_SRQ, 19330, 4096);
    pingpong_with(OURS_SRQ, THEIRS_SRQ, 19331, 100, &["-q", "4", "-r", "8"]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn srq_pingpong_client_with_ibv_srq_pingpong_server() {
    pingpong(THEIRS_SRQ, OURS_SRQ, 19340, 4096);
    pingpong_with(THEIRS_SRQ, OURS_SRQ, 19341, 100, &["-q", "4", "-r", "8"]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn srq_pingpong_with_itself() {
    pingpong(OURS_SRQ, OURS_SRQ, 19350, 4096);
}
