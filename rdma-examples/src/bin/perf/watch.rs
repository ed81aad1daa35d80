//! How a run keeps an eye on its peer while the queue pairs work.
//!
//! A wait that has seen no completion for [`QUIET`] stops spinning: it
//! rests [`REST`] at a time on the control connection ([`Peer::rest`]),
//! which both sleeps and notices the peer go — a TCP connection closed
//! ([`Link::closed_within`]), an rdma_cm control connection disconnected
//! ([`Control`]) — and polls its queue pairs between rests. A peer that
//! is gone ends the run at once, whatever the queue pairs say; one that
//! stopped (frozen) is given up on after the timeout.
//!
//! An operation that failed (a remote access error, retries exceeded)
//! just before the peer closed its control connection failed because the
//! peer went away: [`explain`] says so instead of the status's usual
//! cause.
//!
//! In `perf`'s own protocol the client also sends [`net::ALIVE`] lines
//! every [`HEARTBEAT`] between `GO` and `DONE`, so that a server waiting
//! for `DONE` gives up on a stopped client its timeout after the last of
//! them ([`Link::read_line_after_heartbeats`]). A single-lane latency
//! client's loops send them themselves ([`Beat`]); the bandwidth and
//! many-lane clients keep a thread ([`heartbeat`]). `-R` keeps perftest's wire: nothing is added
//! to it.

use crate::control::Control;
use crate::protocol::Test;
use rdma_examples::clock::{self, Stamp};
use rdma_examples::fail;
use rdma_examples::net::{self, Link};
use rdma_examples::Result;
use rdma_safe::{scope::ScopedPendingWork, Channel, Error, WorkSuccess};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a wait spins without a completion before it rests.
pub(crate) const QUIET: Duration = Duration::from_millis(50);
/// One rest on the control connection.
pub(crate) const REST: Duration = Duration::from_millis(2);
/// How soon after a failed operation the peer must close its control
/// connection for the failure to be its going away.
pub(crate) const GONE_WITHIN: Duration = Duration::from_secs(2);
/// How often a client of `perf`'s own protocol says `ALIVE` during a run.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(250);

/// The control connection as a run's waits see it.
pub(crate) trait Peer {
    /// Rests about [`REST`], watching the connection.
    ///
    /// # Errors
    /// The peer is gone.
    fn rest(&mut self) -> Result<()>;

    /// Whether the peer is gone, or goes within `limit`.
    fn gone_within(&mut self, limit: Duration) -> bool;
}

/// The error of a run whose peer went away.
pub(crate) fn peer_gone(how: &str) -> Error {
    fail(format!(
        "the peer is gone: it {how} (it exited or was killed)"
    ))
}

impl Peer for Link {
    fn rest(&mut self) -> Result<()> {
        if self.closed_within(REST)? {
            return Err(peer_gone("closed the control connection"));
        }
        Ok(())
    }

    fn gone_within(&mut self, limit: Duration) -> bool {
        self.closed_within(limit).unwrap_or(true)
    }
}

/// A channel made through the connection manager as a control
/// connection: its rests sleep, and its peer is gone once it disconnected
/// (the connection manager says so at once when the peer's process ends).
#[derive(Debug)]
pub(crate) struct Connected<'a>(pub(crate) &'a Channel);

impl Peer for Connected<'_> {
    fn rest(&mut self) -> Result<()> {
        std::thread::sleep(REST);
        if self.0.peer_disconnected() {
            return Err(peer_gone("disconnected the control connection"));
        }
        Ok(())
    }

    fn gone_within(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.0.peer_disconnected() {
                return true;
            }
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Peer for Control {
    fn rest(&mut self) -> Result<()> {
        Connected(self.channel()).rest()
    }

    fn gone_within(&mut self, limit: Duration) -> bool {
        Connected(self.channel()).gone_within(limit)
    }
}

/// A thread without the control connection (`--threads`): its rests only
/// sleep; the thread that holds the connection watches it for all.
#[derive(Debug)]
pub(crate) struct Nobody;

impl Peer for Nobody {
    fn rest(&mut self) -> Result<()> {
        std::thread::sleep(REST);
        Ok(())
    }

    fn gone_within(&mut self, _: Duration) -> bool {
        false
    }
}

/// `e`, a run's error, in the peer's words if an operation failed and the
/// peer then closed its control connection within [`GONE_WITHIN`]: the
/// status's usual cause (a key, the receiver not ready) is not the cause.
pub(crate) fn explain(e: Error, peer: &mut dyn Peer) -> Error {
    let what = match &e {
        Error::WorkCompletion {
            operation, status, ..
        } => format!("{operation} failed with {}", status.name()),
        Error::Timeout { operation, .. } => format!("{operation} did not complete"),
        Error::Unusable(_) => "a queue pair failed".to_string(),
        _ => return e,
    };
    let start = Instant::now();
    if !peer.gone_within(GONE_WITHIN) {
        return e;
    }
    fail(format!(
        "the peer is gone: {what} and it closed its control connection {} ms later \
         (it exited or was killed)",
        start.elapsed().as_millis()
    ))
}

/// Waits for `work` within `timeout`, spinning for [`QUIET`] and then
/// resting on `peer` between polls; `what` names the awaited work.
///
/// # Errors
/// The work failed, the peer is gone, or nothing came within `timeout`.
pub(crate) fn wait(
    mut work: ScopedPendingWork<'_>,
    timeout: Duration,
    peer: &mut dyn Peer,
    what: &str,
) -> Result<WorkSuccess> {
    // While spinning the clock is read every few polls only; once resting,
    // before every rest.
    let start = Instant::now();
    let (mut polls, mut resting) = (0u32, false);
    loop {
        match work.poll() {
            Ok(outcome) => return outcome,
            Err(pending) => work = pending,
        }
        polls = polls.wrapping_add(1);
        if !resting && !polls.is_multiple_of(64) {
            continue;
        }
        let quiet = start.elapsed();
        resting = quiet >= QUIET;
        if quiet > timeout {
            return Err(fail(format!(
                "no {what} within {timeout:?} (peer silent or stopped?)"
            )));
        }
        if resting {
            if let Err(gone) = peer.rest() {
                // What the peer did before it left still counts: a peer
                // answers the last exchange and exits at once, and both
                // can land within one rest. Its completion is already
                // on the queue then, ahead of any flush.
                return match work.poll() {
                    Ok(outcome) => outcome,
                    Err(_) => Err(gone),
                };
            }
        }
    }
}

/// The heartbeat of a single-lane client's run of `test` on `link`: a
/// latency run's loop beats itself (`beat` is started; no thread), a
/// bandwidth run keeps a thread (returned): after its loop and before
/// `DONE` it searches its timeline for the peak, tens of millions of
/// steps (seconds under emulation), during which no loop ticks.
///
/// # Errors
/// The socket could not be cloned.
pub(crate) fn heartbeat_for(
    test: Test,
    link: &mut Link,
    beat: &mut Beat,
) -> Result<Option<net::Heartbeat>> {
    if test.is_bw() {
        return heartbeat(link).map(Some);
    }
    *beat = Beat::start(link)?;
    Ok(None)
}

/// A heartbeat on `link` ([`HEARTBEAT`]).
///
/// # Errors
/// The socket could not be cloned.
pub(crate) fn heartbeat(link: &Link) -> Result<net::Heartbeat> {
    Ok(net::Heartbeat::start(link, HEARTBEAT)?)
}

/// [`net::ALIVE`] as it travels, in one write.
const ALIVE_LINE: &[u8] = b"ALIVE\n";

/// The heartbeat of a single-lane latency client, sent by its own loop: the loop
/// calls [`tick`](Self::tick) once per iteration (or batch), which reads
/// the time-stamp counter and writes an [`net::ALIVE`] line once
/// [`HEARTBEAT`] has passed since the last. No thread, so the process
/// stays single-threaded as perftest's is: once a second thread exists,
/// glibc brackets every cancellable system call (the provider's doorbell
/// `write` among them) with changes of the thread's cancellation state.
///
/// An iteration longer than [`HEARTBEAT`] delays the next line; each of
/// the loops' waits is bounded by the channel's timeout, which is also
/// how long the server waits for a line.
#[derive(Debug)]
pub(crate) struct Beat {
    /// A clone of the control connection's socket; `None`: silent.
    stream: Option<TcpStream>,
    last: Stamp,
    /// Clock ticks between lines (`u64::MAX`: never).
    every: u64,
}

impl Beat {
    /// A heartbeat that sends nothing (servers, `-R`, and a client
    /// between runs).
    pub(crate) fn silent() -> Beat {
        Beat {
            stream: None,
            last: Stamp::now(),
            every: u64::MAX,
        }
    }

    /// Starts beating on `link` (the first line [`HEARTBEAT`] from now).
    ///
    /// # Errors
    /// The socket could not be cloned.
    pub(crate) fn start(link: &mut Link) -> Result<Beat> {
        let stream = link.stream()?.try_clone()?;
        Ok(Beat {
            stream: Some(stream),
            last: Stamp::now(),
            every: (HEARTBEAT.as_secs_f64() * clock::ticks_per_sec()) as u64,
        })
    }

    /// Stops beating: nothing is written after this.
    pub(crate) fn stop(&mut self) {
        *self = Beat::silent();
    }

    /// Sends a line if one is due.
    #[inline]
    pub(crate) fn tick(&mut self) {
        let now = Stamp::now();
        if now.ticks_since(self.last) >= self.every {
            self.send(now);
        }
    }

    /// Writes the line; a connection that fails silences the beat (the
    /// peer is gone, which the run finds out by itself).
    #[cold]
    #[inline(never)]
    fn send(&mut self, now: Stamp) {
        self.last = now;
        let sent = match &mut self.stream {
            Some(s) => s.write_all(ALIVE_LINE).is_ok(),
            None => false,
        };
        if !sent {
            *self = Beat::silent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{Ipv4Addr, TcpListener};

    #[test]
    fn a_beat_writes_alive_when_due_and_nothing_once_stopped() {
        assert_eq!(ALIVE_LINE, format!("{}\n", net::ALIVE).as_bytes());
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let c = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        peer.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut link = Link::new(c, Duration::from_secs(5)).unwrap();
        let mut beat = Beat::start(&mut link).unwrap();
        let mut buf = [0u8; 16];
        beat.tick();
        assert!(peer.read(&mut buf).is_err(), "nothing before it is due");
        std::thread::sleep(HEARTBEAT + Duration::from_millis(20));
        beat.tick();
        beat.tick();
        peer.read_exact(&mut buf[..ALIVE_LINE.len()]).unwrap();
        assert_eq!(&buf[..ALIVE_LINE.len()], ALIVE_LINE);
        assert!(peer.read(&mut buf).is_err(), "one line per interval");
        beat.stop();
        std::thread::sleep(HEARTBEAT + Duration::from_millis(20));
        beat.tick();
        assert!(peer.read(&mut buf).is_err(), "silent once stopped");
    }
}
