//! Watching a [`Link`] while the program works without talking: a
//! [`Heartbeat`] that tells the peer this side is alive, and the waits
//! that see the peer close its end, skipping its heartbeats.

use super::{is_timeout, Link};
use std::io::{self, Read, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The line a [`Heartbeat`] sends.
pub const ALIVE: &str = "ALIVE";

/// A thread that writes [`ALIVE`] lines to a connection every `interval`
/// while the program works without talking, so that the peer can bound its
/// wait by its timeout however long the work takes. Nothing else may write
/// to the connection until [`stop`](Self::stop).
#[derive(Debug)]
pub struct Heartbeat {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    /// Starts beating on a clone of `link`'s socket.
    ///
    /// # Errors
    /// The socket could not be cloned.
    pub fn start(link: &Link, interval: Duration) -> io::Result<Heartbeat> {
        let mut stream = link.stream.try_clone()?;
        let (stop, stopped) = mpsc::channel::<()>();
        let line = format!("{ALIVE}\n");
        let thread = std::thread::spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                if stream.write_all(line.as_bytes()).is_err() {
                    break;
                }
            }
        });
        Ok(Heartbeat {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the beating and waits for the thread.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.end();
    }
}
/// [`ALIVE`] as it travels: the word and its newline.
const ALIVE_LINE: &[u8] = b"ALIVE\n";

impl Link {
    /// Whether the peer closes the connection (or has closed it) within
    /// `limit`, waiting on the socket for at most that long. Heartbeat
    /// lines that come meanwhile are read and skipped; anything else is
    /// left for the next read, and the wait then sleeps out `limit` (the
    /// peer is there, and the caller is not reading yet).
    ///
    /// # Errors
    /// An I/O error other than the peer's reset.
    pub fn closed_within(&mut self, limit: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + limit;
        let saved = self.stream.read_timeout()?;
        let seen = self.watch_until(deadline);
        self.stream.set_read_timeout(saved)?;
        seen
    }

    fn watch_until(&mut self, deadline: Instant) -> io::Result<bool> {
        let mut head = [0u8; ALIVE_LINE.len()];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.peek(&mut head) {
                Ok(0) => return Ok(true),
                Ok(n) if n == head.len() && head == ALIVE_LINE => {
                    self.stream.read_exact(&mut head)?;
                }
                // The start of a heartbeat: the rest is on its way.
                Ok(n) if head[..n] == ALIVE_LINE[..n] => {
                    std::thread::sleep(left.min(Duration::from_millis(1)));
                }
                Ok(_) => {
                    std::thread::sleep(left);
                    return Ok(false);
                }
                Err(e) if is_timeout(&e) => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if gone(&e) => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads the next line that is not a heartbeat, each line (heartbeats
    /// included) within `limit`: a peer that keeps beating may take as
    /// long as it needs, one that stops is given up on `limit` after its
    /// last line.
    ///
    /// # Errors
    /// As [`read_line`](Self::read_line).
    pub fn read_line_after_heartbeats(
        &mut self,
        limit: Duration,
        what: &str,
    ) -> io::Result<String> {
        loop {
            let line = self.read_line_within(limit, what)?;
            if line != ALIVE {
                return Ok(line);
            }
        }
    }
}

/// Whether `e` says the peer's end of the connection is gone.
fn gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::pair;
    use super::*;

    #[test]
    fn heartbeat_beats_until_stopped() {
        let (link, peer) = pair(Duration::from_secs(20));
        let mut reader = Link::new(peer, Duration::from_secs(20)).unwrap();
        let beat = Heartbeat::start(&link, Duration::from_millis(10)).unwrap();
        assert_eq!(reader.read_line("a beat").unwrap(), ALIVE);
        assert_eq!(reader.read_line("a beat").unwrap(), ALIVE);
        beat.stop();
    }

    #[test]
    fn a_watch_skips_heartbeats_keeps_lines_and_sees_the_close() {
        let (mut link, mut peer) = pair(Duration::from_secs(20));
        assert!(!link.closed_within(Duration::from_millis(20)).unwrap());
        peer.write_all(b"ALIVE\nALIVE\nDONE 8\n").unwrap();
        assert!(!link.closed_within(Duration::from_millis(50)).unwrap());
        assert_eq!(link.read_line("the next line").unwrap(), "DONE 8");
        peer.write_all(b"ALIVE\nALIVE\nOK\n").unwrap();
        let line = link
            .read_line_after_heartbeats(Duration::from_secs(5), "a line")
            .unwrap();
        assert_eq!(line, "OK");
        // The socket's own timeout is the link's again.
        assert_eq!(
            link.stream.read_timeout().unwrap(),
            Some(Duration::from_secs(20))
        );
        drop(peer);
        assert!(link.closed_within(Duration::from_secs(5)).unwrap());
    }
}
