//! Ending what xtask started when xtask itself is told to stop.
//!
//! The commands [`capture`] runs lead process groups of their own (see
//! [`group`]), outside the terminal's foreground group: a
//! Ctrl-C reaches xtask alone, and so does a SIGTERM or SIGHUP sent to it
//! (a CI runner cancelling a job, `timeout`, `kill PID`, a closed
//! terminal). Left at that, xtask died and vng's qemu ran on, holding 2
//! vCPUs and its memory until someone found it. signal-hook's iterator
//! receives the signal on a thread of ours instead; that thread ends the
//! group of every command [`capture`] is running and exits with 128 + the
//! signal's number, as the default action would have reported.
//!
//! [`capture`]: super::capture

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::group;

/// The signal received, 0 while none was.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The process groups of the commands running under
/// [`capture`](super::capture).
pub(super) static RUNNING: Registry = Registry(Mutex::new(Vec::new()));

/// Process group ids of running commands.
#[derive(Debug)]
pub(super) struct Registry(Mutex<Vec<u32>>);

/// Whether `sig` was set to be ignored when xtask started: SIGHUP under
/// `nohup`, SIGINT for a command a script started with `&`. Those stay
/// ignored: whoever started xtask asked for that.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: with a null new action sigaction(2) only writes the current
    // one into `old`, a sigaction owned here.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Starts the thread that ends the running commands and xtask on SIGINT,
/// SIGTERM or SIGHUP (those not ignored when xtask started).
pub(crate) fn install() {
    let wanted: Vec<libc::c_int> = [SIGINT, SIGTERM, SIGHUP]
        .into_iter()
        .filter(|&sig| !ignored(sig))
        .collect();
    let mut signals = match Signals::new(&wanted) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!(
                "xtask: cannot watch for signals ({e}); a killed xtask leaves its VMs running"
            );
            return;
        }
    };
    thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            RECEIVED.store(sig, Ordering::SeqCst);
            let n = RUNNING.end_all();
            eprintln!(
                "xtask: received signal {sig}; ended {n} running command(s) and what they started"
            );
            std::process::exit(128 + sig);
        }
    });
}

/// Whether xtask was told to stop: the signal thread is ending what runs
/// and will exit the process.
pub(super) fn stopping() -> bool {
    RECEIVED.load(Ordering::SeqCst) != 0
}

/// Called by a command's runner once its command ended: if that was because
/// xtask is stopping, waits for the signal thread to exit the process
/// (with the signal's status and message) instead of going on to the next
/// command.
pub(super) fn hold_if_stopping() {
    while stopping() {
        thread::sleep(Duration::from_millis(100));
    }
}

impl Registry {
    /// Registers group `pgid` until the returned guard is dropped. A group
    /// registered after the signal thread took its list (`stopping()` is
    /// set before it does) is the caller's to end.
    pub(super) fn register(&'static self, pgid: u32) -> Registered {
        if let Ok(mut r) = self.0.lock() {
            r.push(pgid);
        }
        Registered(self, pgid)
    }

    /// Ends every registered group; how many there were.
    fn end_all(&self) -> usize {
        let groups = self.0.lock().map(|r| r.clone()).unwrap_or_default();
        // All at once: each group's SIGTERM goes out before any grace.
        let enders: Vec<_> = groups
            .iter()
            .map(|&pgid| thread::spawn(move || group::end(pgid, || {})))
            .collect();
        for e in enders {
            let _ = e.join();
        }
        groups.len()
    }
}

/// A command's process group, registered while it runs.
#[derive(Debug)]
pub(super) struct Registered(&'static Registry, u32);

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut r) = self.0 .0.lock() {
            r.retain(|&p| p != self.1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::group::alive;
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::Instant;

    #[test]
    fn ending_reaches_the_grandchildren_of_registered_commands() {
        // A shell and its background child, as vng and its qemu.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 600 & echo $!; wait"])
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let sleeper: u32 = line.trim().parse().unwrap();
        // A registry of the test's own: the real one holds the commands of
        // tests running beside it.
        static REGISTRY: Registry = Registry(Mutex::new(Vec::new()));
        let registered = REGISTRY.register(child.id());
        // The leader is reaped by its runner, here beside the ending.
        let reaper = thread::spawn(move || child.wait());
        assert_eq!(REGISTRY.end_all(), 1);
        assert!(reaper.join().unwrap().is_ok());
        // A generous bound: SIGTERM takes effect asynchronously.
        let hang_bound = Instant::now() + Duration::from_secs(60);
        while alive(sleeper) {
            assert!(Instant::now() < hang_bound, "sleep {sleeper} survived");
            thread::sleep(Duration::from_millis(50));
        }
        drop(registered);
        assert!(REGISTRY.0.lock().unwrap().is_empty());
    }

    #[test]
    fn ignored_signals_are_seen_as_ignored() {
        // The test harness leaves SIGTERM at its default.
        assert!(!ignored(SIGTERM));
        // SIGPIPE: Rust's runtime ignores it before main.
        assert!(ignored(libc::SIGPIPE));
    }
}
