//! The connections rstream's test runs over: our RDMA stream (rsocket's
//! protocol, so rstream itself is the peer) or, with `-T s`, a plain TCP
//! socket with `TCP_NODELAY` (as rstream's), both as one [`Stream`] that
//! reads and writes; and the server's listener of either kind.

use rdma_examples::{fail, Result};
use rdma_safe::cm::CmOptions;
use rdma_safe::stream::{RdmaStream, StreamListener};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

/// Which transport: rsocket's over RDMA, or TCP (`-T s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Rdma,
    Tcp,
}

/// A connected stream of either transport.
pub(crate) enum Stream {
    Rdma(Box<RdmaStream>),
    Tcp(TcpStream),
}

/// A listener of either transport.
pub(crate) enum Server {
    Rdma(StreamListener),
    Tcp(TcpListener),
}

/// The connection manager's options: `timeout` bounds resolving,
/// connecting, accepting and then every wait of the stream.
fn cm_options(timeout: Duration) -> CmOptions {
    CmOptions::default().timeout(timeout)
}

/// Connects to `host:port`.
///
/// # Errors
/// The connection's errors (nobody listening, an unreachable address, a
/// peer that does not speak rsocket), with the address in the message.
pub(crate) fn connect(
    transport: Transport,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<Stream> {
    let what = |e: &dyn std::fmt::Display| fail(format!("connecting to {host} port {port}: {e}"));
    match transport {
        Transport::Rdma => RdmaStream::connect_with((host, port), &cm_options(timeout))
            .map(|s| Stream::Rdma(Box::new(s)))
            .map_err(|e| what(&e)),
        Transport::Tcp => {
            let s = TcpStream::connect((host, port)).map_err(|e| what(&e))?;
            tcp_options(&s, timeout).map_err(|e| what(&e))?;
            Ok(Stream::Tcp(s))
        }
    }
}

/// rstream's socket options on a TCP stream: no Nagle delay; and every
/// wait bounded, as ours over RDMA.
fn tcp_options(s: &TcpStream, timeout: Duration) -> io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))
}

impl Server {
    /// Listens on `host:port` (`host` an address of the device, or
    /// `0.0.0.0` for every address).
    ///
    /// # Errors
    /// The error of binding the address.
    pub(crate) fn bind(
        transport: Transport,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<Server> {
        let what =
            |e: &dyn std::fmt::Display| fail(format!("listening on {host} port {port}: {e}"));
        match transport {
            Transport::Rdma => StreamListener::bind_with((host, port), &cm_options(timeout))
                .map(Server::Rdma)
                .map_err(|e| what(&e)),
            Transport::Tcp => TcpListener::bind((host, port))
                .map(Server::Tcp)
                .map_err(|e| what(&e)),
        }
    }

    /// Accepts the next client (an RDMA accept waits up to the timeout;
    /// a TCP accept as long as it takes).
    ///
    /// # Errors
    /// The accept's errors: no client within the timeout, a request that
    /// is not rsocket's.
    pub(crate) fn accept(&self, timeout: Duration) -> Result<Stream> {
        let what = |e: &dyn std::fmt::Display| fail(format!("accepting a client: {e}"));
        match self {
            Server::Rdma(l) => l
                .accept()
                .map(|s| Stream::Rdma(Box::new(s)))
                .map_err(|e| what(&e)),
            Server::Tcp(l) => {
                let (s, _) = l.accept().map_err(|e| what(&e))?;
                tcp_options(&s, timeout).map_err(|e| what(&e))?;
                Ok(Stream::Tcp(s))
            }
        }
    }
}

impl Stream {
    /// Ends the connection both ways, as rstream's `rs_shutdown(SHUT_RDWR)`
    /// after its tests; what fails then is not the test's (the peer may
    /// have closed first), so it is not reported.
    pub(crate) fn close(self) {
        match self {
            Stream::Rdma(mut s) => {
                let _ = s.blocking_shutdown(Shutdown::Both);
            }
            Stream::Tcp(s) => {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Rdma(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Rdma(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Rdma(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}
