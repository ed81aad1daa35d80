//! Bounded exchanges over a TCP stream: the out-of-band messages (endpoints,
//! remote regions, the ready byte) that two peers swap before and around
//! RDMA. Every exchange has a deadline, so a silent or stopped peer becomes a
//! [`HandshakeError::Timeout`] instead of a hang, and the stream's own
//! timeouts are restored afterwards.
//!
//! The library's own exchanges ([`Channel::handshake`](crate::Channel::handshake),
//! [`RemoteMemoryRegion::send_to`](crate::RemoteMemoryRegion::send_to) and
//! `receive_from`) are built from [`Bounded`] and [`swap`]; a program's own
//! messages over the same stream can be too:
//!
//! ```no_run
//! use rdma_safe::exchange::{self, Bounded};
//! use std::net::TcpStream;
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), rdma_safe::error::HandshakeError> {
//! let mut stream = TcpStream::connect("192.0.2.1:7471")?;
//! // Both sides write their 8 bytes, then read the other's, within 5 s.
//! let theirs = exchange::swap(&mut stream, &42u64.to_le_bytes(), Duration::from_secs(5))?;
//! // A longer conversation under one deadline.
//! let mut bounded = Bounded::new(&mut stream, Duration::from_secs(5))?;
//! bounded.write_all(b"GO\n")?;
//! let mut answer = [0u8; 3];
//! bounded.read_exact(&mut answer)?;
//! # let _ = theirs;
//! # Ok(())
//! # }
//! ```

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Why exchanging data with the peer over a stream, or connecting after it,
/// failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The stream failed, the peer closed it early (`UnexpectedEof`), or the
    /// peer sent bytes that do not decode (`InvalidData`).
    #[error("endpoint exchange failed: {0}")]
    Io(#[from] io::Error),
    /// Connecting the queue pair failed.
    #[error("connecting the queue pair failed: {0}")]
    Connect(#[from] rdma_core::Error),
    /// The peer did not complete the exchange within the deadline (it is
    /// silent, stopped, or not this protocol).
    #[error("the peer did not complete the exchange within {timeout:?}")]
    Timeout {
        /// The deadline that passed.
        timeout: Duration,
    },
}

/// A stream with a deadline for a whole exchange: every read and write
/// until the deadline is bounded by the time left (through the socket's
/// read and write timeouts), and a peer that is silent, stopped or
/// trickling bytes ends in [`HandshakeError::Timeout`]. Restores the
/// stream's read and write timeouts when dropped.
#[derive(Debug)]
pub struct Bounded<'s> {
    stream: &'s mut TcpStream,
    timeout: Duration,
    deadline: Instant,
    saved: (Option<Duration>, Option<Duration>),
}

impl<'s> Bounded<'s> {
    /// Starts an exchange on `stream` that must end within `timeout` from
    /// now.
    ///
    /// # Errors
    /// Reading the stream's timeouts failed.
    pub fn new(stream: &'s mut TcpStream, timeout: Duration) -> io::Result<Self> {
        let saved = (stream.read_timeout()?, stream.write_timeout()?);
        Ok(Bounded {
            stream,
            timeout,
            deadline: Instant::now() + timeout,
            saved,
        })
    }

    /// Time left, or the timeout error once there is none.
    fn remaining(&self) -> Result<Duration, HandshakeError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        // A zero socket timeout means "block forever": never pass one.
        if left < Duration::from_millis(1) {
            return Err(HandshakeError::Timeout {
                timeout: self.timeout,
            });
        }
        Ok(left)
    }

    fn classify(&self, e: io::Error) -> HandshakeError {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HandshakeError::Timeout {
                timeout: self.timeout,
            },
            _ => HandshakeError::Io(e),
        }
    }

    /// Writes all of `buf` before the deadline.
    ///
    /// # Errors
    /// [`HandshakeError::Timeout`] when the peer does not take the bytes in
    /// time; [`HandshakeError::Io`] when the stream fails.
    pub fn write_all(&mut self, mut buf: &[u8]) -> Result<(), HandshakeError> {
        while !buf.is_empty() {
            let left = self.remaining()?;
            self.stream.set_write_timeout(Some(left))?;
            match self.stream.write(buf) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.classify(e)),
            }
        }
        Ok(())
    }

    /// Fills `buf` before the deadline.
    ///
    /// # Errors
    /// [`HandshakeError::Timeout`] when the bytes do not arrive in time;
    /// [`HandshakeError::Io`] when the stream fails or the peer closes it
    /// first (`UnexpectedEof`).
    pub fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<(), HandshakeError> {
        while !buf.is_empty() {
            let left = self.remaining()?;
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(buf) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the stream before the exchange was complete",
                    )
                    .into())
                }
                Ok(n) => buf = &mut buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.classify(e)),
            }
        }
        Ok(())
    }
}

impl Drop for Bounded<'_> {
    fn drop(&mut self) {
        let _ = self.stream.set_read_timeout(self.saved.0);
        let _ = self.stream.set_write_timeout(self.saved.1);
    }
}

/// Writes `ours` and reads as many bytes back (both sides do this; each
/// writes before reading), within `timeout`.
///
/// # Errors
/// As [`Bounded::write_all`] and [`Bounded::read_exact`].
pub fn swap<const N: usize>(
    stream: &mut TcpStream,
    ours: &[u8; N],
    timeout: Duration,
) -> Result<[u8; N], HandshakeError> {
    let mut s = Bounded::new(stream, timeout)?;
    s.write_all(ours)?;
    let mut theirs = [0u8; N];
    s.read_exact(&mut theirs)?;
    Ok(theirs)
}

/// Wraps a decoding failure of the peer's bytes as `InvalidData`.
pub(crate) fn invalid_data(e: impl std::error::Error + Send + Sync + 'static) -> HandshakeError {
    HandshakeError::Io(io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    #[test]
    fn silent_peer_is_a_timeout_and_timeouts_are_restored() {
        let (mut a, _b) = pair();
        a.set_read_timeout(Some(Duration::from_secs(77))).unwrap();
        let err = swap(&mut a, b"hello", Duration::from_millis(200)).expect_err("silent peer");
        assert!(
            matches!(err, HandshakeError::Timeout { timeout } if timeout == Duration::from_millis(200)),
            "{err:?}"
        );
        assert_eq!(a.read_timeout().unwrap(), Some(Duration::from_secs(77)));
        assert_eq!(a.write_timeout().unwrap(), None);
    }

    #[test]
    fn truncated_peer_is_unexpected_eof_and_a_full_one_swaps() {
        let (mut a, mut b) = pair();
        let peer = std::thread::spawn(move || {
            let mut ours = [0u8; 5];
            b.read_exact(&mut ours).unwrap();
            b.write_all(b"he").unwrap();
        });
        let err = swap(&mut a, b"hello", Duration::from_secs(20)).expect_err("short peer");
        assert!(
            matches!(&err, HandshakeError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof),
            "{err:?}"
        );
        peer.join().unwrap();

        let (mut a, mut b) = pair();
        let peer = std::thread::spawn(move || swap(&mut b, b"world", Duration::from_secs(20)));
        assert_eq!(
            &swap(&mut a, b"hello", Duration::from_secs(20)).unwrap(),
            b"world"
        );
        assert_eq!(&peer.join().unwrap().unwrap(), b"hello");
    }
}
