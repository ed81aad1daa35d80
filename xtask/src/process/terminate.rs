//! Ending what xtask started when xtask itself is told to stop.
//!
//! Ctrl-C reaches the whole foreground process group, qemu included. A
//! SIGTERM or SIGHUP sent to xtask alone (a CI runner cancelling a job,
//! `timeout`, `kill PID`, a closed terminal) does not: without this, xtask
//! died and left vng's qemu running, holding 2 vCPUs and its memory until
//! someone found it. Now the signal only raises a flag; a watcher thread
//! sees it, ends the process tree of every command [`capture`] is running,
//! and exits with 128 + the signal's number, as the default action would
//! have reported.
//!
//! [`capture`]: super::capture

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, Once};
use std::thread;
use std::time::Duration;

use super::kill_tree::kill_tree;

/// The signal received, 0 while none was.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The root pids of the commands running under [`capture`](super::capture).
pub(super) static RUNNING: Registry = Registry(Mutex::new(Vec::new()));

/// Root pids of running commands.
pub(super) struct Registry(Mutex<Vec<u32>>);

/// How often the watcher looks at the flag: well under what a user waits
/// for after `kill`.
const WATCH_EVERY: Duration = Duration::from_millis(100);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: all a signal handler may safely do here.
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// Installs the handlers for SIGTERM and SIGHUP and starts the watcher
/// (once; later calls do nothing).
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: `on_signal` is an `extern "C" fn(c_int)`, the type
            // signal(2) expects, and it is async-signal-safe (one atomic
            // store). glibc's signal() keeps the handler installed. A
            // signal ignored when xtask started (SIGHUP under `nohup`)
            // stays ignored: the user asked for that.
            unsafe {
                let before = libc::signal(sig, on_signal as *const () as libc::sighandler_t);
                if before == libc::SIG_IGN {
                    libc::signal(sig, libc::SIG_IGN);
                }
            }
        }
        thread::spawn(|| loop {
            thread::sleep(WATCH_EVERY);
            let sig = RECEIVED.load(Ordering::SeqCst);
            if sig != 0 {
                let n = RUNNING.end_all();
                eprintln!("xtask: received signal {sig}; ended {n} running command(s) and what they started");
                std::process::exit(128 + sig);
            }
        });
    });
}

/// Whether xtask was told to stop: the watcher is ending what runs and
/// will exit the process.
pub(super) fn stopping() -> bool {
    RECEIVED.load(Ordering::SeqCst) != 0
}

/// Called by a command's runner once its command ended: if that was because
/// xtask is stopping, waits for the watcher to exit the process (with the
/// signal's status and message) instead of going on to the next command.
pub(super) fn hold_if_stopping() {
    while stopping() {
        thread::sleep(WATCH_EVERY);
    }
}

impl Registry {
    /// Registers `pid` until the returned guard is dropped.
    pub(super) fn register(&'static self, pid: u32) -> Registered {
        if let Ok(mut r) = self.0.lock() {
            r.push(pid);
        }
        Registered(self, pid)
    }

    /// Ends the process tree of every registered command; how many there
    /// were.
    fn end_all(&self) -> usize {
        let roots = self.0.lock().map(|r| r.clone()).unwrap_or_default();
        for &pid in &roots {
            kill_tree(pid);
        }
        roots.len()
    }
}

/// A command's root process, registered while it runs.
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
    use super::super::kill_tree::alive;
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Instant;

    #[test]
    fn ending_reaches_the_grandchildren_of_registered_commands() {
        // A shell and its background child, as vng and its qemu.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 600 & echo $!; wait"])
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
        assert_eq!(REGISTRY.end_all(), 1);
        let _ = child.wait();
        // A generous bound: SIGTERM takes effect asynchronously.
        let hang_bound = Instant::now() + Duration::from_secs(60);
        while alive(sleeper) {
            assert!(Instant::now() < hang_bound, "sleep {sleeper} survived");
            thread::sleep(Duration::from_millis(50));
        }
        drop(registered);
        assert!(REGISTRY.0.lock().unwrap().is_empty());
    }
}
