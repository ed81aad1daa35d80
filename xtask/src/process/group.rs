//! A command and everything it starts as one process group: [`own_group`]
//! spawns it as the leader of a new group (`process_group(0)`: the group's
//! id is the child's pid), so that vng's qemu, a shell step's servers and
//! whatever else it started end with it, by one signal to the group
//! ([`end`]).
//!
//! A descendant that moves to a group of its own (`setsid`, GNU `timeout`
//! without `--foreground`, as `ci/vm-run.sh`'s `server_client` runs its
//! two sides natively) is out of reach; such a step ends by its own time
//! limit (`--step-timeout`).

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// How long a group has between SIGTERM and SIGKILL: qemu exits cleanly
/// well within it.
const GRACE: Duration = Duration::from_secs(5);

/// Makes `cmd`'s process the leader of a new process group.
pub(super) fn own_group(cmd: &mut Command) -> &mut Command {
    cmd.process_group(0)
}

/// Sends `sig` to every process in group `pgid`; `false` when the group
/// has no process left (or `pgid` is no child's group: 0 and 1 would be
/// ours and init's).
fn signal(pgid: u32, sig: libc::c_int) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: killpg(2) takes plain integers and touches no memory of ours.
    unsafe { libc::killpg(pgid, sig) == 0 }
}

/// Ends process group `pgid`: SIGTERM to all of it at once (no parent
/// outlives its child long enough to act on its death, as a shell running
/// its next command would), then SIGKILL for whatever is left after
/// [`GRACE`]. The leader counts as a member until its parent waits for it:
/// a caller that is its parent reaps it in `reap` (`Child::try_wait`),
/// called while waiting.
pub(super) fn end(pgid: u32, mut reap: impl FnMut()) {
    if !signal(pgid, libc::SIGTERM) {
        return;
    }
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        reap();
        if !signal(pgid, 0) {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    signal(pgid, libc::SIGKILL);
}

/// Whether `pid` is running: not gone, not a zombie waiting to be reaped
/// (a container's init may never reap an orphan).
#[cfg(test)]
pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            != Some("Z")
    })
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    use super::*;

    /// Starts `script` in a group of its own; it prints a pid first.
    fn start(script: &str) -> (std::process::Child, u32) {
        let mut child = own_group(Command::new("sh").args(["-c", script]))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (child, line.trim().parse().unwrap())
    }

    /// Waits (with a generous bound: signals take effect asynchronously)
    /// until `pid` is no longer running.
    fn wait_gone(pid: u32) {
        let hang_bound = Instant::now() + Duration::from_secs(60);
        while alive(pid) {
            assert!(Instant::now() < hang_bound, "{pid} survived");
            thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn ending_the_group_reaches_the_grandchildren() {
        // A shell and its background child, as vng and its qemu.
        let (mut child, sleeper) = start("sleep 600 & echo $!; wait");
        let started = Instant::now();
        end(child.id(), || {
            let _ = child.try_wait();
        });
        assert!(started.elapsed() < GRACE, "SIGTERM was enough");
        assert!(child.try_wait().unwrap().is_some(), "the leader is reaped");
        wait_gone(sleeper);
        // Nothing is left to signal.
        assert!(!signal(child.id(), 0));
    }

    #[test]
    fn what_ignores_sigterm_is_killed_after_the_grace() {
        let (mut child, sleeper) = start("trap '' TERM; sleep 600 & echo $!; wait");
        let started = Instant::now();
        end(child.id(), || {
            let _ = child.try_wait();
        });
        assert!(started.elapsed() >= GRACE);
        let _ = child.wait();
        wait_gone(sleeper);
    }

    #[test]
    fn our_own_and_inits_groups_are_never_signalled() {
        assert!(!signal(0, 0) && !signal(1, 0));
    }
}
