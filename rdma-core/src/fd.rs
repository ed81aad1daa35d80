//! The file descriptors libibverbs hands out (completion channels, a
//! context's async events): making them non-blocking and waiting on them.

use crate::error::{Error, Result};
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Sets `O_NONBLOCK` on `fd`; `what` names the descriptor in the error.
pub(crate) fn set_nonblocking(fd: RawFd, what: &'static str) -> Result<()> {
    // SAFETY: `fcntl(F_GETFL)` on a descriptor reads its flags only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: setting O_NONBLOCK on a descriptor the caller owns.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(Error::last_os_error(what));
    }
    Ok(())
}

/// Waits until `fd` is readable or `timeout` passes (forever if `None`),
/// retrying on `EINTR`. Returns whether it is readable; `what` names the
/// wait in the error.
pub(crate) fn wait_readable(
    fd: RawFd,
    timeout: Option<Duration>,
    what: &'static str,
) -> Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so a sub-millisecond remainder still waits.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(true);
        }
        if n == 0 {
            return Ok(false);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(Error::Verb {
                verb: what,
                source: err,
            });
        }
    }
}
