//! The two sides of a peer test, joined by a TCP side channel: in one
//! process by default (a thread per side, over loopback, both on the test
//! device), or one side per host when `RDMA_TEST_PEER` says which.
//!
//! `RDMA_TEST_PEER=server` runs only the server sides, each listening on
//! `RDMA_TEST_PEER_PORT` (default 18700); `RDMA_TEST_PEER=client:HOST`
//! runs only the client sides, each connecting to `HOST` on that port.
//! Both hosts run the same test binary with `--test-threads=1`, so the
//! tests meet in the same (libtest's sorted) order; every link starts by
//! swapping the test's name, so two sides of different tests never mistake
//! each other for a peer. cargo xtask test-rxe's two-host tier runs the
//! binary that way, each host in each role once.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long a side waits for its peer to appear and for each message on the
/// link: the peer host may still be finishing the previous test (a TCG
/// guest is slow), but a peer that is gone must fail the test, not hang it.
pub const LINK_WAIT: Duration = Duration::from_secs(90);

/// Which side of a test this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

/// Where this process's sides run, from `RDMA_TEST_PEER`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Both sides here, over loopback.
    Both,
    /// Only the server sides, listening on the port.
    Server(u16),
    /// Only the client sides, connecting to the host's port.
    Client(String, u16),
}

fn mode() -> Mode {
    let port = std::env::var("RDMA_TEST_PEER_PORT")
        .ok()
        .map(|p| p.parse().expect("RDMA_TEST_PEER_PORT is a port number"))
        .unwrap_or(18700);
    match std::env::var("RDMA_TEST_PEER").as_deref() {
        Err(_) | Ok("") => Mode::Both,
        Ok("server") => Mode::Server(port),
        Ok(v) => match v.strip_prefix("client:") {
            Some(host) => Mode::Client(host.to_owned(), port),
            None => panic!("RDMA_TEST_PEER is `server` or `client:HOST`, not {v:?}"),
        },
    }
}

/// Whether this process runs one side of each test against another host.
pub fn across_hosts() -> bool {
    mode() != Mode::Both
}

/// One side's end of the TCP side channel: framed messages and named
/// synchronisation points, each bounded by [`LINK_WAIT`].
pub struct Link {
    stream: TcpStream,
    pub role: Role,
}

impl Link {
    fn new(stream: TcpStream, role: Role, test: &str) -> Link {
        stream.set_nodelay(true).expect("TCP_NODELAY");
        stream
            .set_read_timeout(Some(LINK_WAIT))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(LINK_WAIT))
            .expect("write timeout");
        let mut link = Link { stream, role };
        link.send(test.as_bytes());
        let theirs = link.receive();
        assert_eq!(
            String::from_utf8_lossy(&theirs),
            test,
            "the peer runs another test: the hosts are out of step \
             (both must run the same binary with --test-threads=1)"
        );
        link
    }

    /// The stream itself (for the crate's own handshake helpers).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends one message (length-prefixed).
    pub fn send(&mut self, bytes: &[u8]) {
        let len = u32::try_from(bytes.len()).expect("a link message under 4 GiB");
        self.stream
            .write_all(&len.to_le_bytes())
            .and_then(|()| self.stream.write_all(bytes))
            .unwrap_or_else(|e| panic!("{:?}: sending to the peer: {e}", self.role));
    }

    /// Receives one message; panics if the peer is gone or silent for
    /// [`LINK_WAIT`].
    pub fn receive(&mut self) -> Vec<u8> {
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .unwrap_or_else(|e| panic!("{:?}: waiting for the peer: {e}", self.role));
        let mut bytes = vec![0u8; u32::from_le_bytes(len) as usize];
        self.stream
            .read_exact(&mut bytes)
            .unwrap_or_else(|e| panic!("{:?}: reading from the peer: {e}", self.role));
        bytes
    }

    /// Sends a `u64`.
    pub fn send_u64(&mut self, v: u64) {
        self.send(&v.to_le_bytes());
    }

    /// Receives a `u64`.
    pub fn receive_u64(&mut self) -> u64 {
        u64::from_le_bytes(self.receive().try_into().expect("8 bytes"))
    }

    /// Tells the peer that this side reached `point`.
    pub fn signal(&mut self, point: &str) {
        self.send(point.as_bytes());
    }

    /// Waits until the peer [`signal`](Self::signal)s `point`.
    pub fn wait_for(&mut self, point: &str) {
        let got = self.receive();
        assert_eq!(
            String::from_utf8_lossy(&got),
            point,
            "{:?}: the peer is at another point of the test",
            self.role
        );
    }

    /// Both sides reach `point` before either goes on.
    pub fn meet(&mut self, point: &str) {
        self.signal(point);
        self.wait_for(point);
    }
}

/// Runs a peer test: `server` and `client` each get their end of the link.
/// In one process both run (on threads; a panic on either fails the test);
/// across hosts only this host's role runs.
pub fn run(test: &str, server: impl FnOnce(Link) + Send, client: impl FnOnce(Link) + Send) {
    match mode() {
        Mode::Both => {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind loopback");
            let addr = listener.local_addr().expect("bound address");
            std::thread::scope(|t| {
                let s = t.spawn(|| {
                    let (stream, _) = listener.accept().expect("accept the client");
                    server(Link::new(stream, Role::Server, test));
                });
                let stream = TcpStream::connect(addr).expect("connect over loopback");
                client(Link::new(stream, Role::Client, test));
                if let Err(panic) = s.join() {
                    std::panic::resume_unwind(panic);
                }
            });
        }
        Mode::Server(port) => {
            eprintln!("{test}: server side, waiting for the client on port {port}");
            server(Link::new(accept_within(port), Role::Server, test));
        }
        Mode::Client(host, port) => {
            eprintln!("{test}: client side, connecting to {host}:{port}");
            client(Link::new(connect_within(&host, port), Role::Client, test));
        }
    }
}

/// Accepts one connection on `port` (then stops listening), within
/// [`LINK_WAIT`].
fn accept_within(port: u16) -> TcpStream {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
        .unwrap_or_else(|e| panic!("listen on port {port}: {e}"));
    listener.set_nonblocking(true).expect("non-blocking accept");
    let t0 = Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).expect("blocking stream");
                return stream;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && t0.elapsed() < LINK_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("no client on port {port} within {LINK_WAIT:?}: {e}"),
        }
    }
}

/// Connects to `host:port`, trying again while the server is not yet
/// listening, within [`LINK_WAIT`].
fn connect_within(host: &str, port: u16) -> TcpStream {
    let addr: SocketAddr = format!("{host}:{port}")
        .parse()
        .unwrap_or_else(|e| panic!("RDMA_TEST_PEER's host {host:?} is not an address: {e}"));
    let t0 = Instant::now();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(stream) => return stream,
            Err(e) if t0.elapsed() < LINK_WAIT => {
                if e.kind() != ErrorKind::ConnectionRefused {
                    eprintln!("connecting to {addr}: {e}; trying again");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("no server at {addr} within {LINK_WAIT:?}: {e}"),
        }
    }
}
