//! Ending a process and everything it started: vng runs qemu as a
//! grandchild, and a shell step may leave servers behind.

use std::thread;
use std::time::{Duration, Instant};

/// The processes whose parent chain leads to `root` (read from /proc),
/// parents before their children.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// Running (not gone, not a zombie waiting to be reaped).
pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            != Some("Z")
    })
}

/// Sends `sig` to `pid`; errors (already gone) are ignored.
fn signal(pid: u32, sig: i32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours;
    // `pid` is positive, so it never addresses a process group.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Terminates `root` and every process below it: SIGTERM first (qemu exits
/// cleanly), SIGKILL after 5 s for whatever is left. Parents are signalled
/// before their children, so that no parent outlives a child long enough to
/// act on its death (a shell would run its next command).
pub(crate) fn kill_tree(root: u32) {
    let mut all = vec![root];
    all.extend(descendants(root));
    for &p in &all {
        signal(p, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !all.iter().any(|&p| alive(p)) {
            return;
        }
        thread::sleep(Duration::from_millis(100));
    }
    for p in all {
        signal(p, libc::SIGKILL);
    }
}
