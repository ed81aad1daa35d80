//! The stream on tokio: [`RdmaStream::connect_async`],
//! [`StreamListener::accept_async`], and tokio's `AsyncRead` and
//! `AsyncWrite` (shutdown included).
//!
//! Why they are cancel-safe and how their waits sleep and end: the
//! [module](super) docs, *Async and cancel safety*.

use super::blocking::{io_error, RdmaStream};
use super::conn::{Conn, Parts};
use super::listener::StreamListener;
use super::options;
use super::wire::{ConnData, Control};
use crate::cm::{CmOptions, Connector};
use crate::error::{Error, Operation, Result};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The timer of a stream's async waits: made once, re-armed per wait.
#[derive(Debug, Default)]
pub(super) struct WaitTimer {
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: bool,
}

impl RdmaStream {
    /// [`connect_with`](Self::connect_with) as a future: connects without
    /// blocking the runtime, and the stream's waits sleep on its reactor.
    ///
    /// # Errors
    /// As [`connect_with`](Self::connect_with), and outside a tokio
    /// runtime.
    pub async fn connect_async(
        addr: impl tokio::net::ToSocketAddrs,
        opts: &CmOptions,
    ) -> Result<RdmaStream> {
        let connector = Connector::resolve_async(addr, &options(opts)).await?;
        let parts = Parts::new(connector.pd())?;
        let channel = connector.connect_async(&parts.conn_data().encode()).await?;
        let peer = ConnData::decode(channel.peer_private_data().unwrap_or(&[]))?;
        let shared = channel.shared().with_tokio()?;
        let recv = parts.receives(&shared)?;
        Ok(RdmaStream::from_conn(Conn::new(
            channel, shared, recv, parts, &peer,
        )))
    }

    /// One look at the connection for a poll: the completions there are,
    /// and `Pending` (woken by a completion or the timer) when `ready`
    /// does not hold after it and nothing moved.
    fn poll_until(
        &mut self,
        cx: &mut Context<'_>,
        waiting_for: &'static str,
        mut ready: impl FnMut(&Conn) -> bool,
    ) -> Poll<Result<()>> {
        loop {
            let moved = match self.conn.progress(cx) {
                Ok(moved) => moved,
                Err(e) => {
                    self.timer.armed = false;
                    return Poll::Ready(Err(e));
                }
            };
            if ready(&self.conn) {
                self.timer.armed = false;
                return Poll::Ready(Ok(()));
            }
            if moved {
                continue;
            }
            return self.poll_timer(cx, waiting_for);
        }
    }

    /// Arms the wait's timer (once per wait) and polls it.
    fn poll_timer(&mut self, cx: &mut Context<'_>, waiting_for: &'static str) -> Poll<Result<()>> {
        let timeout = self.conn.timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let t = &mut self.timer;
        let sleep = t
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !t.armed {
            sleep.as_mut().reset(deadline);
            t.armed = true;
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                t.armed = false;
                Poll::Ready(Err(Error::StreamTimeout {
                    waiting_for,
                    timeout,
                }))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A dropped stream's goodbye, on a task of its runtime: posts rsocket's
/// disconnect message unless `posted` (once a control message may be
/// posted), waits for it and what was written before it to be placed (at
/// most [`LINGER`](super::blocking::LINGER) in all), and drops the
/// connection, which disconnects.
pub(super) async fn linger(mut conn: Conn, mut posted: bool) {
    let goodbye = std::future::poll_fn(|cx| loop {
        let Ok(moved) = conn.progress(cx) else {
            return Poll::Ready(());
        };
        if posted {
            if conn.all_sent() {
                return Poll::Ready(());
            }
        } else if !conn.connected {
            return Poll::Ready(());
        } else if conn.control_room() {
            if conn.post_control(Control::Disconnect).is_err() {
                return Poll::Ready(());
            }
            conn.connected = false;
            posted = true;
            continue;
        }
        if !moved {
            return Poll::Pending;
        }
    });
    let _ = tokio::time::timeout(super::blocking::LINGER, goodbye).await;
}

impl StreamListener {
    /// [`accept`](Self::accept) as a future: waits for the request and
    /// accepts it without blocking the runtime, and the stream's waits
    /// sleep on its reactor.
    ///
    /// # Errors
    /// As [`accept`](Self::accept), and outside a tokio runtime.
    pub async fn accept_async(&self) -> Result<RdmaStream> {
        let incoming = self.listener().incoming_async().await?;
        let (incoming, peer) = StreamListener::check(incoming)?;
        let parts = Parts::new(incoming.pd())?;
        let (channel, acceptance) = incoming.prepare()?;
        let shared = channel.shared().with_tokio()?;
        let recv = parts.receives(&shared)?;
        acceptance.accept_async(&parts.conn_data().encode()).await?;
        Ok(RdmaStream::from_conn(Conn::new(
            channel, shared, recv, parts, &peer,
        )))
    }
}

impl AsyncRead for RdmaStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let waited = this.poll_until(cx, "to send data", |c| c.has_data() || !c.readable);
        let waited = std::task::ready!(waited);
        if this.conn.has_data() {
            let n = this
                .conn
                .copy_out(buf.initialize_unfilled())
                .map_err(io_error)?;
            buf.advance(n);
            // Credits back at once; a failure found now, or by the wait,
            // is the next poll's: this one returns the data before it.
            if let Err(e) = waited.and_then(|()| this.conn.progress(cx).map(|_| ())) {
                this.conn.defer(e);
            }
            return Poll::Ready(Ok(()));
        }
        waited.map_err(io_error)?;
        if this.conn.abrupt() {
            return Poll::Ready(Err(io_error(Error::PeerDisconnected {
                operation: Operation::Receive,
            })));
        }
        // The end of the stream: nothing filled.
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for RdmaStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.conn.shut_write {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the stream's writing was shut down",
            )));
        }
        let room = "to give room to write into (credits or a receive buffer)";
        std::task::ready!(this.poll_until(cx, room, |c| c.can_send() || !c.writable))
            .map_err(io_error)?;
        if !this.conn.writable {
            return Poll::Ready(Err(io_error(this.conn.ended_error(Operation::Write))));
        }
        Poll::Ready(this.conn.send_some(data).map_err(io_error))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let acked = "to acknowledge the writes posted";
        this.poll_until(cx, acked, Conn::all_sent).map_err(io_error)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let c = &mut this.conn;
        if c.writable {
            c.writable = false;
            c.shut_write = true;
            this.queued = Some(if c.readable {
                Control::Shutdown
            } else {
                Control::Disconnect
            });
        }
        loop {
            let acked = "to acknowledge the writes posted";
            let queued = this.queued;
            let ready =
                |c: &Conn| !c.connected || (c.all_sent() && (queued.is_none() || c.control_room()));
            std::task::ready!(this.poll_until(cx, acked, ready)).map_err(io_error)?;
            let Some(control) = this.queued.take() else {
                return Poll::Ready(Ok(()));
            };
            if !this.conn.connected {
                return Poll::Ready(Ok(()));
            }
            this.conn.post_control(control).map_err(io_error)?;
            if control == Control::Disconnect {
                this.conn.connected = false;
            }
        }
    }
}
