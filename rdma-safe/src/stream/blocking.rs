//! [`RdmaStream`]: the blocking stream — connect, read, write, flush,
//! shut down — over a [`Conn`], every wait bounded by its timeout.

use super::conn::{Conn, Parts};
use super::options;
use super::wire::{ConnData, Control};
use crate::cm::{CmOptions, Connector};
use crate::engine;
use crate::error::{Error, ErrorKind, Operation, Result};
use std::io;
use std::mem::ManuallyDrop;
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::task::{Context, Waker};
use std::time::Duration;

/// A byte stream over one RDMA connection, speaking librdmacm's rsocket
/// protocol: `rstream`, `rcopy` and programs under `librspreload.so` are
/// its peers (see the [module](super) docs).
///
/// Reads and writes block, each wait bounded by the options' timeout
/// ([`CmOptions::timeout`]): a read that finds no data for that long, or a
/// write that finds no room, fails with [`Error::StreamTimeout`] and the
/// stream stays usable. Dropping the stream disconnects.
pub struct RdmaStream {
    /// Taken (once) by the drop, which may hand it to a task.
    pub(super) conn: ManuallyDrop<Conn>,
    /// The timer of async waits.
    #[cfg(feature = "tokio")]
    pub(super) timer: super::asynchronous::WaitTimer,
    /// A control message an async shutdown is still to post.
    #[cfg(feature = "tokio")]
    pub(super) queued: Option<Control>,
}

impl RdmaStream {
    /// Connects to the stream listener (or rsocket server) at `addr`,
    /// with [`CmOptions::default`].
    ///
    /// # Errors
    /// As [`connect_with`](Self::connect_with).
    pub fn connect(addr: impl ToSocketAddrs) -> Result<RdmaStream> {
        Self::connect_with(addr, &CmOptions::default())
    }

    /// Connects to `addr` with `opts` (its timeout, retry budget and
    /// events; the queue capacities are the stream's own).
    ///
    /// # Errors
    /// The connection manager's errors (as [`Connector::resolve`] and
    /// [`Connector::connect`]: nobody listening, an unreachable address, a
    /// timeout); [`Error::Protocol`] when the peer's accept does not carry
    /// rsocket's connection data (the connection is then closed); the
    /// error of registering the stream's memory.
    pub fn connect_with(addr: impl ToSocketAddrs, opts: &CmOptions) -> Result<RdmaStream> {
        let connector = Connector::resolve(addr, &options(opts))?;
        let parts = Parts::new(connector.pd())?;
        let channel = connector.connect(&parts.conn_data().encode())?;
        let peer = ConnData::decode(channel.peer_private_data().unwrap_or(&[]))?;
        let shared = channel.shared();
        let recv = parts.receives(&shared)?;
        Ok(RdmaStream::from_conn(Conn::new(
            channel, shared, recv, parts, &peer,
        )))
    }

    pub(super) fn from_conn(conn: Conn) -> RdmaStream {
        RdmaStream {
            conn: ManuallyDrop::new(conn),
            #[cfg(feature = "tokio")]
            timer: Default::default(),
            #[cfg(feature = "tokio")]
            queued: None,
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.conn.channel().peer_addr()
    }

    /// The bound on each wait.
    pub fn timeout(&self) -> Duration {
        self.conn.timeout
    }

    /// Sets the bound on each wait.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.conn.timeout = timeout;
    }

    /// Reads what has arrived into `out`, waiting (up to the timeout) for
    /// at least one byte; 0 at the end of the stream (the peer shut its
    /// writing down or closed the stream, and everything it sent was
    /// read).
    ///
    /// # Errors
    /// [`Error::PeerDisconnected`] once everything was read from a peer
    /// whose connection ended without its saying so (its process or host
    /// died: a reset, not an end);
    /// [`Error::StreamTimeout`] when nothing came within the timeout (the
    /// stream stays usable); the connection's failure (a failed transfer,
    /// [`Error::Protocol`] for a peer breaking the protocol).
    pub fn read_some(&mut self, out: &mut [u8]) -> Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        self.block("to send data", |c| {
            let progress = c.progress(&mut noop());
            if c.has_data() {
                let n = match c.copy_out(out) {
                    Ok(n) => n,
                    Err(e) => return Some(Err(e)),
                };
                // Credits back at once: the peer may be waiting for them.
                // A failure found meanwhile, or before, is the next call's:
                // this one returns the data that came before it.
                if let Err(e) = progress.and_then(|_| c.progress(&mut noop())) {
                    c.defer(e);
                }
                return Some(Ok(n));
            }
            if let Err(e) = progress {
                return Some(Err(e));
            }
            if !c.readable {
                if c.abrupt() {
                    return Some(Err(Error::PeerDisconnected {
                        operation: Operation::Receive,
                    }));
                }
                return Some(Ok(0));
            }
            None
        })
    }

    /// Posts as much of `data` as the peer has room for, waiting (up to
    /// the timeout) until it has room for some; how many bytes were posted.
    /// Large writes go out one published buffer at a time, each message at
    /// most a send buffer (64 KiB); messages up to the queue pair's inline
    /// size go inline.
    ///
    /// # Errors
    /// [`Error::PeerDisconnected`] once the peer disconnected (or this
    /// side shut writing down: then an `io::ErrorKind::BrokenPipe` for
    /// [`io::Write`]); [`Error::StreamTimeout`] when the peer gave no room
    /// within the timeout (it stopped reading); the connection's failure.
    pub fn write_some(&mut self, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        self.block(
            "to give room to write into (credits or a receive buffer)",
            |c| {
                // This side's shutdown is looked at before the peer's news:
                // a write after it is refused as such, whatever the peer
                // did meanwhile.
                if !c.writable {
                    return Some(Err(c.ended_error(Operation::Write)));
                }
                if let Err(e) = c.progress(&mut noop()) {
                    return Some(Err(e));
                }
                if !c.writable {
                    return Some(Err(c.ended_error(Operation::Write)));
                }
                c.can_send().then(|| c.send_some(data))
            },
        )
    }

    /// Waits (up to the timeout) until every byte written has been placed
    /// in the peer's memory.
    ///
    /// # Errors
    /// [`Error::StreamTimeout`] when the writes did not complete in time;
    /// the connection's failure.
    pub fn flush_all(&mut self) -> Result<()> {
        self.block("to acknowledge the writes posted", |c| {
            match c.progress(&mut noop()) {
                Err(e) => Some(Err(e)),
                Ok(_) => c.all_sent().then_some(Ok(())),
            }
        })
    }

    /// Shuts down writing ([`Shutdown::Write`]: the peer reads to the end
    /// of the stream, and may still send), reading (only locally, as
    /// rsocket does; the connection closes once both are shut down) or
    /// both (the peer is told the connection is over); blocks until what
    /// was written and the message are placed (`std`'s streams call this
    /// `shutdown`; here that name is tokio's `AsyncWriteExt::shutdown`).
    ///
    /// # Errors
    /// The error of flushing what was written or of posting the message.
    pub fn blocking_shutdown(&mut self, how: Shutdown) -> Result<()> {
        let c = &mut self.conn;
        let control = match how {
            Shutdown::Write if !c.writable => return Ok(()),
            Shutdown::Write => {
                c.writable = false;
                c.shut_write = true;
                if c.readable {
                    Control::Shutdown
                } else {
                    Control::Disconnect
                }
            }
            Shutdown::Read => {
                c.readable = false;
                if c.writable {
                    return Ok(());
                }
                Control::Disconnect
            }
            Shutdown::Both => {
                c.readable = false;
                c.writable = false;
                c.shut_write = true;
                Control::Disconnect
            }
        };
        self.send_control(control)
    }

    /// Calls `step` on the connection until it yields, at most the
    /// stream's timeout: at once, then through the engine's wait (a short
    /// spin, then sleeps on completion events: whatever a stream waits for
    /// comes with a completion, of a receive or of a write of its own).
    fn block<R>(
        &mut self,
        waiting_for: &'static str,
        mut step: impl FnMut(&mut Conn) -> Option<Result<R>>,
    ) -> Result<R> {
        if let Some(r) = step(&mut self.conn) {
            return r;
        }
        let (queue, timeout) = (self.conn.queue(), self.conn.timeout);
        match engine::until(&queue, SPIN, timeout, || step(&mut self.conn))? {
            Some(r) => r,
            None => Err(Error::StreamTimeout {
                waiting_for,
                timeout,
            }),
        }
    }

    /// Waits for what was written to be placed, then posts `control` and
    /// waits for it too.
    fn send_control(&mut self, control: Control) -> Result<()> {
        let connected = self.block("to acknowledge the writes posted", |c| {
            match c.progress(&mut noop()) {
                Err(e) => Some(Err(e)),
                Ok(_) if !c.connected => Some(Ok(false)),
                Ok(_) => (c.all_sent() && c.control_room()).then_some(Ok(true)),
            }
        })?;
        if !connected {
            return Ok(());
        }
        self.conn.post_control(control)?;
        if control == Control::Disconnect {
            // Nothing more goes out; the drop disconnects.
            self.conn.connected = false;
        }
        self.flush_all()
    }
}

/// How long a blocking wait polls before it sleeps on completion events
/// (rsocket's default polling time).
const SPIN: Duration = Duration::from_micros(10);

/// The context of a blocking wait: no task to wake, the wait looks again
/// itself.
fn noop() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// The stream's error as an I/O error of the matching kind, the stream's
/// error inside.
pub(crate) fn io_error(e: Error) -> io::Error {
    let kind = match e.kind() {
        ErrorKind::PeerDisconnected => io::ErrorKind::ConnectionReset,
        ErrorKind::TimedOut => io::ErrorKind::TimedOut,
        ErrorKind::InvalidData => io::ErrorKind::InvalidData,
        ErrorKind::Connect => io::ErrorKind::ConnectionRefused,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

impl io::Read for RdmaStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_some(buf).map_err(io_error)
    }
}

impl io::Write for RdmaStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.conn.shut_write {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the stream's writing was shut down",
            ));
        }
        self.write_some(buf).map_err(io_error)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_all().map_err(io_error)
    }
}

/// How long a dropped stream waits for its disconnect message to be
/// placed before the channel disconnects.
pub(super) const LINGER: Duration = Duration::from_secs(2);

impl Drop for RdmaStream {
    fn drop(&mut self) {
        // Tell an rsocket peer the connection is over (it may not watch
        // for the CM's disconnect while it reads), within a short bound;
        // the channel's drop then disconnects and flushes what is left.
        // A stream on a runtime hands that wait to a task of its own.
        #[cfg(feature = "tokio")]
        if self.conn.connected && self.conn.has_reactor() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                // SAFETY: `conn` is taken once, here, and this stream does
                // not touch it again (nothing runs after its drop).
                let mut conn = unsafe { ManuallyDrop::take(&mut self.conn) };
                // Posted now if it can be (the queue pair places it after
                // what was written), so that the goodbye goes out even if
                // the runtime ends before the task runs.
                let posted = conn.control_room() && conn.post_control(Control::Disconnect).is_ok();
                if posted {
                    conn.connected = false;
                }
                runtime.spawn(super::asynchronous::linger(conn, posted));
                return;
            }
        }
        if self.conn.connected {
            self.conn.timeout = self.conn.timeout.min(LINGER);
            let _ = self.send_control(Control::Disconnect);
        }
        // SAFETY: dropped once, here, and not used after: the stream's
        // other fields hold nothing of it.
        unsafe { ManuallyDrop::drop(&mut self.conn) };
    }
}

impl std::fmt::Debug for RdmaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaStream")
            .field("peer", &self.peer_addr())
            .field("conn", &*self.conn)
            .finish()
    }
}
