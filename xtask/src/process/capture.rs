//! Running a command while copying its output to ours as it arrives and
//! keeping it, under a time limit that ends it and everything it started
//! (its process group, see [`group`]).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::{echo, group, spawn_error, terminate};
use crate::Result;

/// What [`run`] saw.
#[derive(Debug)]
pub(crate) struct Captured {
    /// Exit status; `None` if the time limit killed the process.
    pub(crate) status: Option<ExitStatus>,
    /// Everything the process wrote to stdout and stderr, interleaved by line.
    pub(crate) output: String,
    /// Wall-clock time the process ran.
    pub(crate) elapsed: Duration,
    /// When the first line of output arrived (for a VM: roughly the boot time).
    pub(crate) first_output: Option<Duration>,
}

impl Captured {
    /// Exited on its own with status 0.
    pub(crate) fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Echoes and runs a command, copying its stdout and stderr to ours as they
/// arrive (so a long VM run is visible live) while also capturing them.
/// With a `limit`, the process is killed when it runs longer.
pub(crate) fn run(cmd: &mut Command, limit: Option<Duration>) -> Result<Captured> {
    echo(cmd);
    capture(cmd, limit, Live::Plain)
}

/// Like [`run`], but every line copied to our output starts with `label`
/// (the captured output does not): for several commands running at once,
/// such as the two hosts' VMs.
pub(crate) fn run_labelled(
    cmd: &mut Command,
    limit: Option<Duration>,
    label: &str,
) -> Result<Captured> {
    println!("{label}==> {}", super::display_cmd(cmd));
    capture(cmd, limit, Live::Labelled(label))
}

/// Like [`run`] but neither echoes the command nor copies its output.
pub(crate) fn run_quiet(cmd: &mut Command, limit: Option<Duration>) -> Result<Captured> {
    capture(cmd, limit, Live::Quiet)
}

/// Whether and how output is copied to ours as it arrives.
#[derive(Debug, Clone, Copy)]
enum Live<'a> {
    Quiet,
    Plain,
    Labelled(&'a str),
}

fn capture(cmd: &mut Command, limit: Option<Duration>, live: Live<'_>) -> Result<Captured> {
    if terminate::stopping() {
        return Err("xtask is stopping (it received a signal)".into());
    }
    let start = Instant::now();
    let mut child = group::own_group(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| spawn_error(cmd, e))?;
    // Ended with xtask if it is told to stop (see `terminate`); if that
    // began while it started, the signal thread may not have seen it.
    let _registered = terminate::RUNNING.register(child.id());
    if terminate::stopping() {
        group::end(child.id(), || {
            let _ = child.try_wait();
        });
    }

    let (tx, rx) = mpsc::channel::<(bool, String)>();
    let readers = [
        pump(
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
            false,
            tx.clone(),
        ),
        pump(
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
            true,
            tx,
        ),
    ];

    let mut output = String::new();
    let mut first_output = None;
    let mut timed_out = false;
    let mut drained = true;
    let deadline = limit.map(|l| start + l);
    // After a kill, grandchildren may still hold the pipes open: read what
    // they write for a short grace period, then stop waiting for them.
    let mut give_up: Option<Instant> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((is_err, line)) => {
                first_output.get_or_insert_with(|| start.elapsed());
                match live {
                    Live::Quiet => {}
                    Live::Plain if is_err => eprint!("{line}"),
                    Live::Plain => {
                        print!("{line}");
                        let _ = io::stdout().flush();
                    }
                    Live::Labelled(label) => {
                        // One write per line: lines of concurrent runs
                        // interleave whole.
                        let text = format!("{label}{}", line.trim_end_matches('\n'));
                        let mut out = io::stdout().lock();
                        let _ = writeln!(out, "{text}");
                        let _ = out.flush();
                    }
                }
                output.push_str(&line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        if !timed_out && deadline.is_some_and(|d| now >= d) {
            timed_out = true;
            if !matches!(live, Live::Quiet) {
                eprintln!(
                    "xtask: `{}` ran longer than {} s; killing it",
                    cmd.get_program().to_string_lossy(),
                    limit.unwrap_or_default().as_secs()
                );
            }
            // vng runs qemu as a grandchild: end the whole group, not just
            // vng, reaping vng (the group's leader) meanwhile.
            group::end(child.id(), || {
                let _ = child.try_wait();
            });
            give_up = Some(now + Duration::from_secs(10));
        }
        if give_up.is_some_and(|g| now >= g) {
            drained = false;
            break;
        }
    }
    if drained {
        for r in readers.into_iter().flatten() {
            let _ = r.join();
        }
    }
    let status = child.wait()?;
    terminate::hold_if_stopping();
    Ok(Captured {
        status: (!timed_out).then_some(status),
        output,
        elapsed: start.elapsed(),
        first_output,
    })
}

fn pump(
    reader: Option<Box<dyn Read + Send>>,
    is_err: bool,
    tx: mpsc::Sender<(bool, String)>,
) -> Option<thread::JoinHandle<()>> {
    let reader = reader?;
    Some(thread::spawn(move || {
        let mut r = BufReader::new(reader);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx
                        .send((is_err, String::from_utf8_lossy(&buf).into_owned()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::super::group::alive;
    use super::*;

    #[test]
    fn captured_output_and_time_limit() {
        let c = run(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            None,
        )
        .unwrap();
        assert_eq!(c.status.and_then(|s| s.code()), Some(3));
        assert!(c.output.contains("out\n") && c.output.contains("err\n"));

        // The shell's child `sleep` holds the pipes open too: the limit must
        // end the whole group, not only the shell. The limit leaves the
        // shell time to start and say its child's pid on a loaded machine
        // (300 ms did not, once, in a fresh-clone CI run beside two builds).
        let c = run(
            Command::new("sh").args(["-c", "sleep 600 & echo \"sleeper $!\"; wait; echo never"]),
            Some(Duration::from_secs(5)),
        )
        .unwrap();
        assert!(
            c.status.is_none() && !c.success(),
            "not reported as timed out"
        );
        assert!(!c.output.contains("never"), "{}", c.output);
        let sleeper: u32 = c
            .output
            .lines()
            .find_map(|l| l.strip_prefix("sleeper "))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no sleeper pid in {:?}", c.output));
        // SIGKILL takes effect asynchronously; a generous bound only keeps a
        // broken kill from hanging the test.
        let hang_bound = Instant::now() + Duration::from_secs(60);
        while alive(sleeper) {
            assert!(
                Instant::now() < hang_bound,
                "sleep {sleeper} survived the kill"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}
