//! The process abort for states in which returning could let the NIC touch
//! memory that Rust considers released.

use std::io::Write;

/// Aborts the process after a best-effort message on standard error.
///
/// Nothing on this path may unwind: an unwind would run the callers'
/// destructors and end borrows while the NIC may still use the memory. So the
/// message is written with `Write::write_all` on the raw stderr handle, whose
/// errors (a closed or broken stderr) are ignored — unlike `eprintln!`, which
/// panics on them — and a guard aborts even if something in between does
/// unwind.
#[cold]
pub(crate) fn abort_with(args: std::fmt::Arguments<'_>) -> ! {
    struct AbortOnUnwind;
    impl Drop for AbortOnUnwind {
        fn drop(&mut self) {
            std::process::abort();
        }
    }
    let _guard = AbortOnUnwind;
    let mut stderr = std::io::stderr();
    let _ = stderr.write_fmt(format_args!("rdma-safe: fatal: {args}; aborting\n"));
    std::process::abort();
}

/// Aborts the process if dropped while armed, i.e. if the code it guards
/// unwinds (a panic in a user's logger, say) at a point where an unwind would
/// end borrows the NIC may still use. [`disarm`](Self::disarm) it on every
/// normal exit.
#[derive(Debug)]
pub(crate) struct AbortOnUnwind(pub(crate) &'static str);

impl AbortOnUnwind {
    /// The guarded code finished without unwinding.
    #[inline]
    pub(crate) fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        abort_with(format_args!("a panic unwound out of {}", self.0));
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    /// Runs this test binary's `child_entry` with stderr a pipe whose reader
    /// is already closed (writes fail with EPIPE), in mode `mode`, and
    /// returns how the child ended.
    fn run_child(mode: &str) -> std::process::ExitStatus {
        let exe = std::env::current_exe().expect("test binary path");
        let mut child = Command::new(exe)
            .args(["--exact", "fatal::tests::child_entry", "--nocapture"])
            .env("RDMA_SAFE_FATAL_CHILD", mode)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        // Close the read end: the child's writes to stderr now fail.
        drop(child.stderr.take());
        child.wait().expect("wait for the child")
    }

    /// The child's side: does nothing unless started by `run_child`.
    #[test]
    fn child_entry() {
        let Ok(mode) = std::env::var("RDMA_SAFE_FATAL_CHILD") else {
            return;
        };
        // Make sure the reader is gone before writing (the parent closes it
        // right after spawning; the child needs longer than that to start).
        std::thread::sleep(std::time::Duration::from_millis(200));
        if mode == "eprintln" {
            // What the guards used to do: panics on the broken stderr.
            eprintln!("rdma-safe: fatal: test message");
            std::process::abort();
        }
        super::abort_with(format_args!("test message {}", 42));
    }

    #[test]
    fn aborts_even_when_stderr_is_broken() {
        use std::os::unix::process::ExitStatusExt;
        let status = run_child("abort_with");
        assert_eq!(
            status.signal(),
            Some(libc_sigabrt()),
            "abort_with must end in SIGABRT, not unwind: {status:?}"
        );
        // The control: `eprintln!` on the same broken stderr panics, and the
        // panic unwinds out of the test (exit code 101) instead of aborting.
        let status = run_child("eprintln");
        assert_eq!(status.signal(), None, "eprintln! unwound: {status:?}");
        assert_eq!(status.code(), Some(101), "{status:?}");
    }

    /// SIGABRT's number (6 on every Linux architecture).
    fn libc_sigabrt() -> i32 {
        6
    }
}
