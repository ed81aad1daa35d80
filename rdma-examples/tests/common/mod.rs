//! What the device tests share: the device and GID index to use, and
//! running the example programs with their output collected and a bound on
//! how long they may run.

// Each test file uses a different part of this module.
#![allow(dead_code)]

pub(crate) mod perftest;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Longest any one program may run (generous: the CI runs rxe in a VM
/// under software emulation).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) fn device() -> String {
    ["RDMA_TEST_DEVICE", "RXE_DEVICE"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "rxe0".into())
}

pub(crate) fn gid_index() -> String {
    std::env::var("RXE_GID_INDEX")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "1".into())
}

/// A running program whose output is collected by two reader threads.
pub(crate) struct Proc {
    pub(crate) label: String,
    pub(crate) child: Child,
    output: Arc<Mutex<String>>,
    lines: Receiver<String>,
    readers: Vec<thread::JoinHandle<()>>,
}

/// What a finished program left behind.
pub(crate) struct Finished {
    pub(crate) label: String,
    pub(crate) status: Option<ExitStatus>,
    pub(crate) output: String,
}

impl Finished {
    #[track_caller]
    pub(crate) fn assert_ok(&self, peer: &Finished) {
        assert!(
            self.status.is_some_and(|s| s.success()),
            "{} {}\n--- its output:\n{}\n--- {} (status {}):\n{}",
            self.label,
            match self.status {
                Some(s) => format!("failed: {s}"),
                None => format!("was killed after {TIMEOUT:?}"),
            },
            self.output,
            peer.label,
            peer.status.map_or("killed".to_string(), |s| s.to_string()),
            peer.output
        );
    }

    #[track_caller]
    pub(crate) fn assert_has(&self, needle: &str) {
        assert!(
            self.output.contains(needle),
            "{}: `{needle}` missing from its output:\n{}",
            self.label,
            self.output
        );
    }
}

pub(crate) fn spawn(label: &str, program: &str, args: &[String]) -> Proc {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{label}: cannot run `{program}`: {e} (rdma-core's ibverbs-utils must be \
                 installed for the interoperability tests; `cargo xtask test-rxe` provides them)"
            )
        });
    let output = Arc::new(Mutex::new(String::new()));
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    // Both streams are collected line by line into one text (stderr lines
    // marked) and offered to `wait_for_line`: with `--json` the programs
    // announce themselves on stderr.
    let readers = vec![
        reader(stdout, "", output.clone(), tx.clone()),
        reader(stderr, "[stderr] ", output.clone(), tx),
    ];
    Proc {
        label: format!("{label} (`{program} {}`)", args.join(" ")),
        child,
        output,
        lines,
        readers,
    }
}

pub(crate) fn reader(
    stream: impl Read + Send + 'static,
    mark: &'static str,
    output: Arc<Mutex<String>>,
    lines: mpsc::Sender<String>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            output.lock().unwrap().push_str(&format!("{mark}{line}\n"));
            let _ = lines.send(line);
        }
    })
}

impl Proc {
    /// Waits until a line of output contains `needle`; false after `limit`
    /// or if the program ended first.
    pub(crate) fn wait_for_line(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return true,
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    }

    /// What the program printed so far.
    pub(crate) fn output_so_far(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Waits for the program to end, killing it at `deadline`.
    pub(crate) fn finish(mut self, deadline: Instant) -> Finished {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let output = self.output.lock().unwrap().clone();
        Finished {
            label: self.label,
            status,
            output,
        }
    }
}

/// Starts the server, waits for `ready` on its stdout (or a moment, for C
/// programs whose stdout is block-buffered in a pipe), runs the client,
/// and returns both when both ended (or were killed).
pub(crate) fn pair(
    server: (&str, Vec<String>),
    ready: Option<&str>,
    client: (&str, Vec<String>),
) -> (Finished, Finished) {
    let deadline = Instant::now() + TIMEOUT;
    let s = spawn("server", server.0, &server.1);
    match ready {
        Some(needle) => {
            if !s.wait_for_line(needle, TIMEOUT / 2) {
                let f = s.finish(Instant::now());
                panic!(
                    "{} never printed `{needle}`; status {:?}, output:\n{}",
                    f.label, f.status, f.output
                );
            }
        }
        None => thread::sleep(Duration::from_millis(500)),
    }
    let c = spawn("client", client.0, &client.1);
    let c = c.finish(deadline);
    let s = s.finish(if c.status.is_some() {
        deadline
    } else {
        Instant::now()
    });
    (s, c)
}

pub(crate) fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

pub(crate) const OURS: &str = env!("CARGO_BIN_EXE_rc_pingpong");
pub(crate) const PERF: &str = env!("CARGO_BIN_EXE_perf");
pub(crate) const ONE_SIDED: &str = env!("CARGO_BIN_EXE_one_sided");
pub(crate) const DEVICES: &str = env!("CARGO_BIN_EXE_devices");
