//! TCP for the out-of-band exchanges: listening, connecting with retries
//! (so a client may start before its server), and [`Link`], a connection
//! whose every read and write has a deadline (rdma-safe's
//! [`Bounded`] exchanges), so a silent or stopped peer ends in a timeout
//! error naming what was awaited instead of a hang.

use rdma_safe::error::HandshakeError;
use rdma_safe::exchange::Bounded;
use rdma_safe::{channel::Endpoint, Channel, RemoteMemoryRegion};

mod watch;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
pub use watch::{Heartbeat, ALIVE};

/// How long clients keep retrying a refused connection.
pub const CONNECT_RETRY: Duration = Duration::from_secs(15);

/// Longest text line accepted from a peer.
pub const MAX_LINE: usize = 4096;

/// Listens on TCP `port` on every address: IPv6 and IPv4 where the
/// system allows a dual-stack socket, else IPv4 only.
///
/// # Errors
/// The port is in use or cannot be bound.
pub fn listen(port: u16) -> io::Result<TcpListener> {
    TcpListener::bind((Ipv6Addr::UNSPECIFIED, port))
        .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
}

/// The longest a single connection attempt waits for the server's answer
/// before a new attempt starts. The kernel repeats an unanswered SYN after
/// 1, 3, 7, 15 and 31 s: one attempt left to itself sends five SYNs in
/// 30 s, and on a link that loses one packet in five the handshake then
/// fails about once in a few hundred tries. Attempts of this length send
/// one about every second instead.
pub const CONNECT_ATTEMPT: Duration = Duration::from_secs(2);

/// Connects to `host:port`, trying every address it resolves to. Refused
/// connections are retried for up to `retry_for` (the server may not be
/// listening yet); unanswered ones for up to `timeout` in all, each attempt
/// bounded by [`CONNECT_ATTEMPT`] so that a lossy link does not spend the
/// whole bound in the kernel's SYN backoff.
///
/// # Errors
/// The name does not resolve, or no address accepted in time.
pub fn connect(
    host: &str,
    port: u16,
    retry_for: Duration,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"));
        for addr in (host, port).to_socket_addrs()? {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = left.min(CONNECT_ATTEMPT).max(Duration::from_millis(1));
            match TcpStream::connect_timeout(&addr, attempt) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        let retry = match last.kind() {
            io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset => {
                start.elapsed() < retry_for
            }
            _ if is_timeout(&last) => Instant::now() < deadline,
            _ => false,
        };
        if !retry {
            let why = if is_timeout(&last) {
                format!("no answer within {} s", timeout.as_secs_f64())
            } else {
                last.to_string()
            };
            return Err(io::Error::new(
                last.kind(),
                format!("couldn't connect to {host}:{port}: {why}"),
            ));
        }
        if !is_timeout(&last) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Whether `e` is what a socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`)
/// returns.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A TCP connection to an untrusted peer: every read and write must finish
/// within a deadline (by default [`timeout`](Self::timeout) from the call),
/// lines are bounded ([`MAX_LINE`]), and errors say what was awaited.
#[derive(Debug)]
pub struct Link {
    stream: TcpStream,
    timeout: Duration,
}

impl Link {
    /// Wraps `stream`; `timeout` (at least a millisecond) bounds each
    /// exchange. Also sets the socket's own timeouts to `timeout`, which
    /// bound code that uses [`stream`](Self::stream) directly per read and
    /// write.
    ///
    /// # Errors
    /// Setting the socket options failed.
    pub fn new(stream: TcpStream, timeout: Duration) -> io::Result<Self> {
        let timeout = timeout.max(Duration::from_millis(1));
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Link { stream, timeout })
    }

    /// The bound of each exchange.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The stream, for a library call that does its own I/O: its reads and
    /// writes are each bounded by the timeout (set on the socket here).
    ///
    /// # Errors
    /// Setting the socket options failed.
    pub fn stream(&mut self) -> io::Result<&mut TcpStream> {
        self.stream.set_read_timeout(Some(self.timeout))?;
        self.stream.set_write_timeout(Some(self.timeout))?;
        Ok(&mut self.stream)
    }

    /// Fills `buf` within the timeout; `what` names the awaited data.
    ///
    /// # Errors
    /// Timeout, closed connection, or I/O error.
    pub fn read_exact(&mut self, buf: &mut [u8], what: &str) -> io::Result<()> {
        self.read_exact_within(buf, self.timeout, what)
    }

    /// Fills `buf` within `limit`.
    ///
    /// # Errors
    /// Timeout, closed connection, or I/O error.
    pub fn read_exact_within(
        &mut self,
        buf: &mut [u8],
        limit: Duration,
        what: &str,
    ) -> io::Result<()> {
        let mut exchange = Bounded::new(&mut self.stream, limit)?;
        exchange
            .read_exact(buf)
            .map_err(|e| explained(e, limit, what))
    }

    /// Writes all of `bytes` within the timeout.
    ///
    /// # Errors
    /// Timeout (the peer stopped reading), or I/O error.
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut exchange = Bounded::new(&mut self.stream, self.timeout)?;
        exchange
            .write_all(bytes)
            .map_err(|e| explained(e, self.timeout, "the peer to take our message"))
    }

    /// Writes `line` and a newline.
    ///
    /// # Errors
    /// As [`write_all`](Self::write_all).
    pub fn write_line(&mut self, line: &str) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.write_all(&bytes)
    }

    /// Reads one line (without its newline) within the timeout; `what`
    /// names it in errors.
    ///
    /// # Errors
    /// Timeout, closed connection, a line over [`MAX_LINE`] bytes, or not
    /// UTF-8.
    pub fn read_line(&mut self, what: &str) -> io::Result<String> {
        self.read_line_within(self.timeout, what)
    }

    /// Reads one line within `limit`, byte by byte so that nothing after it
    /// is consumed.
    ///
    /// # Errors
    /// As [`read_line`](Self::read_line).
    pub fn read_line_within(&mut self, limit: Duration, what: &str) -> io::Result<String> {
        let mut exchange = Bounded::new(&mut self.stream, limit)?;
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            exchange
                .read_exact(&mut byte)
                .map_err(|e| explained(e, limit, what))?;
            if byte[0] == b'\n' {
                break;
            }
            if line.len() == MAX_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{what}: line longer than {MAX_LINE} bytes"),
                ));
            }
            line.push(byte[0]);
        }
        String::from_utf8(line).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what}: the line is not UTF-8 text"),
            )
        })
    }

    /// Reads a line and checks that its first word is `word`; returns the
    /// rest of the line.
    ///
    /// # Errors
    /// As [`read_line`](Self::read_line), or another line (`InvalidData`,
    /// with the line quoted).
    pub fn expect_line(&mut self, word: &str) -> io::Result<String> {
        let what = format!("`{word}` from the peer");
        let line = self.read_line(&what)?;
        rest_after(&line, word).map(str::to_owned).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "expected `{word} ...` from the peer, got `{}`",
                    line.escape_debug()
                ),
            )
        })
    }
}

/// An exchange's error as the link reports it: what was awaited, and the
/// whole wait's bound.
fn explained(e: HandshakeError, limit: Duration, what: &str) -> io::Error {
    match e {
        HandshakeError::Timeout { .. } => timed_out(limit, what),
        HandshakeError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the peer closed the connection while we waited for {what}"),
        ),
        HandshakeError::Io(e) => e,
        e => io::Error::other(e),
    }
}

fn timed_out(limit: Duration, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("timed out after {limit:?} waiting for {what} (peer silent or stopped?)"),
    )
}

/// [`Channel::handshake`] over `link`: each read and write bounded by the
/// link's timeout, and a timeout reported as one.
///
/// # Errors
/// The peer was silent, closed, sent garbage, or connecting failed.
pub fn handshake(channel: &mut Channel, link: &mut Link) -> crate::Result<Endpoint> {
    let timeout = link.timeout();
    let what = "the peer's queue pair address (handshake)";
    channel
        .handshake(link.stream()?)
        .map_err(|e| retimed(e, timeout, what))
}

/// [`RemoteMemoryRegion::send_to`] over `link`, within the link's timeout.
///
/// # Errors
/// The peer did not take the region in time, or the connection failed.
pub fn send_region(link: &mut Link, region: &RemoteMemoryRegion) -> crate::Result<()> {
    let timeout = link.timeout();
    region
        .send_to(link.stream()?, timeout)
        .map_err(|e| retimed(e, timeout, "the peer to take our memory region"))
}

/// [`RemoteMemoryRegion::receive_from`] over `link`, within the link's
/// timeout; `what` names the region in errors.
///
/// # Errors
/// The peer was silent, closed, or sent bytes that are not a region.
pub fn receive_region(link: &mut Link, what: &str) -> crate::Result<RemoteMemoryRegion> {
    let timeout = link.timeout();
    RemoteMemoryRegion::receive_from(link.stream()?, timeout).map_err(|e| retimed(e, timeout, what))
}

/// A library exchange's timeout in the link's words.
fn retimed(e: rdma_safe::Error, timeout: Duration, what: &str) -> rdma_safe::Error {
    match e.kind() {
        rdma_safe::error::ErrorKind::TimedOut => timed_out(timeout, what).into(),
        _ => e,
    }
}

/// The rest of `line` after its first word if that word is `word`.
pub fn rest_after<'l>(line: &'l str, word: &str) -> Option<&'l str> {
    let (first, rest) = line.split_once(' ').unwrap_or((line, ""));
    (first == word).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A link and the peer's end of its socket, on the loopback.
    pub(super) fn pair(timeout: Duration) -> (Link, TcpStream) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let c = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let (s, _) = l.accept().unwrap();
        (Link::new(s, timeout).unwrap(), c)
    }

    /// A listener on the loopback whose accept queue is already full: the
    /// kernel drops every further SYN, so connecting gets no answer.
    fn full_listener() -> (TcpListener, TcpStream) {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
            .unwrap();
        // A backlog of 0 (std's `bind` listens with 128).
        s.listen(0).unwrap();
        let l = TcpListener::from(s);
        let first = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (l, first)
    }

    #[test]
    fn unanswered_connect_ends_at_its_bound_with_a_clear_error() {
        let (l, _first) = full_listener();
        let port = l.local_addr().unwrap().port();
        let bound = CONNECT_ATTEMPT + Duration::from_millis(1500);
        let start = Instant::now();
        let e = connect("127.0.0.1", port, Duration::ZERO, bound).unwrap_err();
        let took = start.elapsed();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains("no answer within 3.5 s"), "{e}");
        // Several attempts, but the bound holds for all of them together;
        // the upper limit only detects a hang.
        assert!(took >= bound, "gave up after {took:?}");
        assert!(took < bound + Duration::from_secs(20), "{took:?}");
    }

    #[test]
    fn refused_connect_is_retried_until_its_own_bound() {
        let port = {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            l.local_addr().unwrap().port()
        };
        let start = Instant::now();
        let retry = Duration::from_millis(500);
        let e = connect("127.0.0.1", port, retry, Duration::from_secs(30)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        assert!(start.elapsed() >= retry, "{:?}", start.elapsed());
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn silent_peer_times_out() {
        let (mut link, _peer) = pair(Duration::from_millis(200));
        let e = link.read_line("a greeting").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains("a greeting"), "{e}");
        let e = link.read_exact(&mut [0u8; 4], "four bytes").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    }

    #[test]
    fn trickling_peer_times_out_too() {
        let (mut link, mut peer) = pair(Duration::from_millis(300));
        let t = std::thread::spawn(move || {
            for _ in 0..20 {
                if peer.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let e = link.read_line("a line").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        drop(link);
        t.join().unwrap();
    }

    #[test]
    fn lines_words_limits_and_eof() {
        let (mut link, mut peer) = pair(Duration::from_secs(20));
        peer.write_all(b"GO 64\nBYE\n").unwrap();
        assert_eq!(link.expect_line("GO").unwrap(), "64");
        assert!(link.expect_line("DONE").is_err());
        peer.write_all(&vec![b'a'; MAX_LINE + 1]).unwrap();
        let e = link.read_line("a line").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        drop(peer);
        let mut rest = Vec::new();
        let e = loop {
            match link.read_line("a line") {
                Ok(l) => rest.push(l),
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e} after {rest:?}");
        assert_eq!(rest_after("DONE 7", "DONE"), Some("7"));
        assert_eq!(rest_after("DONEX", "DONE"), None);
    }
}
