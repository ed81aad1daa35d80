//! perftest's control connection in `-R` mode: a reliable connection made
//! through the RDMA connection manager on the test's port, over which the
//! two sides exchange small messages ([`crate::perftest_wire`]) by send and
//! receive — the client speaks first in every exchange, the server answers.
//!
//! The peer keeps one receive posted and re-posts it after reading each
//! message, so the exchange is strictly alternating; this side posts its
//! receive for the answer before sending (the answer never meets an empty
//! queue here) and, as the server, waits for the question first.

use crate::perftest_wire::DEST_LEN;
use crate::watch::{self, Connected};
use rdma_core::{QpCapabilities, WcStatus};
use rdma_examples::fail;
use rdma_examples::Result;
use rdma_safe::{
    cm::Acceptance, cm::CmOptions, cm::Connector, Channel, Listener, ReceiveWorkRequest,
    RegisteredBuffer, SendWorkRequest,
};
use std::time::{Duration, Instant};

/// Room for the largest message either side sends (a destination).
const MSG_MAX: usize = 256;
/// What a control exchange waits for, in its timeout's error.
const ANSWER: &str = "message on the perftest control connection";
/// How long a client waits between attempts when the server is not
/// listening yet (perftest's own retry delay).
pub(crate) const RETRY_DELAY: Duration = Duration::from_millis(100);

/// The control connection and its two message buffers.
pub(crate) struct Control {
    channel: Channel,
    tx: RegisteredBuffer,
    rx: RegisteredBuffer,
    client: bool,
    /// `-v`: print every message received (hex) on stderr.
    trace: bool,
    /// Server: the accept, sent by the first exchange once its receive is
    /// posted (the client speaks first, as soon as it is accepted).
    acceptance: Option<Acceptance>,
}

/// The options of a control connection: one message at a time each way.
fn options(timeout: Duration) -> CmOptions {
    let caps = QpCapabilities {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    CmOptions::default().timeout(timeout).capabilities(caps)
}

impl Control {
    /// Client: connects to `host:port`, retrying (every [`RETRY_DELAY`],
    /// for up to `timeout`) while nobody listens there.
    ///
    /// # Errors
    /// The last connection error once `timeout` has passed.
    pub(crate) fn connect(host: &str, port: u16, timeout: Duration) -> Result<Control> {
        let start = Instant::now();
        let channel = loop {
            let attempt =
                Connector::resolve((host, port), &options(timeout)).and_then(|c| c.connect(&[]));
            match attempt {
                Ok(c) => break c,
                Err(_) if start.elapsed() < timeout => std::thread::sleep(RETRY_DELAY),
                Err(e) => {
                    return Err(fail(format!(
                        "no perftest -R server at {host}:{port} within {timeout:?}: {e}"
                    )))
                }
            }
        };
        Self::around(channel, true)
    }

    /// Server: accepts one connection on `listener` (waiting up to
    /// `patience`).
    ///
    /// # Errors
    /// No client within `patience`, or the accept's error.
    pub(crate) fn accept(listener: &Listener, patience: Duration) -> Result<Control> {
        let incoming = listener
            .incoming_within(patience)?
            .ok_or_else(|| fail(format!("no client connected within {patience:?}")))?;
        // The accept waits for the first exchange's receive: a client
        // whose ready-to-use message is lost sends before this side sees
        // the connection established, and without a receive posted its
        // message meets RNR NAKs until the CM retransmits (seconds), each
        // lost packet of which costs it a transport retry.
        let (channel, acceptance) = incoming.prepare()?;
        let mut control = Self::around(channel, false)?;
        control.acceptance = Some(acceptance);
        Ok(control)
    }

    fn around(channel: Channel, client: bool) -> Result<Control> {
        let pd = channel.pd().clone();
        Ok(Control {
            tx: RegisteredBuffer::new(&pd, MSG_MAX)?,
            rx: RegisteredBuffer::new(&pd, MSG_MAX)?,
            channel,
            client,
            trace: false,
            acceptance: None,
        })
    }

    /// One exchange: the client sends `mine` and then reads the server's
    /// message; the server reads first. Returns the peer's message.
    ///
    /// # Errors
    /// A message too long, a transport error or the timeout.
    pub(crate) fn exchange(&mut self, mine: &[u8]) -> Result<Vec<u8>> {
        self.exchange_within(mine, self.channel.timeout())
    }

    /// [`exchange`](Self::exchange) waiting up to `limit` for the peer.
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange).
    pub(crate) fn exchange_within(&mut self, mine: &[u8], limit: Duration) -> Result<Vec<u8>> {
        self.exchange_with(mine, limit, || Ok(()))
            .map(|(got, ())| got)
    }

    /// [`exchange_within`](Self::exchange_within) with `between` run
    /// before this side's part of it: the client runs it before sending;
    /// the server once the receive for the client's message is posted,
    /// before waiting for it. The client sends as soon as its `between`
    /// is done, so a server whose `between` waits for something the
    /// network can delay (accepting the data connections: a lost RTU keeps
    /// the accept waiting seconds for the CM's retransmission) must have
    /// that receive up first, or the message meets RNR NAKs all that time,
    /// each lost packet of which costs the client a transport retry.
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange), or `between`'s.
    pub(crate) fn exchange_with<T>(
        &mut self,
        mine: &[u8],
        limit: Duration,
        between: impl FnOnce() -> Result<T>,
    ) -> Result<(Vec<u8>, T)> {
        if self.client {
            let done = between()?;
            let (got, ()) = self.swap(mine, limit, || Ok(()))?;
            Ok((got, done))
        } else {
            self.swap(mine, limit, between)
        }
    }

    /// One exchange: posts the receive for the peer's message, finishes the
    /// accept if one is pending, runs `posted`, then sends `mine` and waits
    /// for the answer (client) or waits and answers (server).
    fn swap<T>(
        &mut self,
        mine: &[u8],
        limit: Duration,
        posted: impl FnOnce() -> Result<T>,
    ) -> Result<(Vec<u8>, T)> {
        if mine.len() > MSG_MAX {
            return Err(fail(format!("a control message of {} bytes", mine.len())));
        }
        self.tx[..mine.len()].copy_from_slice(mine);
        let saved = self.channel.timeout();
        self.channel.set_timeout(limit);
        let client = self.client;
        let (tx, rx, acceptance) = (&self.tx, &mut self.rx, &mut self.acceptance);
        let got = self
            .channel
            .scope(|s| -> Result<(usize, T)> {
                // A side may wait through the peer's whole run for the next
                // message: the waits rest once quiet (see `watch`), and a
                // failure flushes the other request at once.
                s.cancel_on_error();
                let gather = [tx.gather(..mine.len())];
                let mut scatter = [rx.scatter(..)];
                let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
                if let Some(acceptance) = acceptance.take() {
                    acceptance.accept(&[])?;
                }
                let done = posted()?;
                let n = if client {
                    // The answer first: across a lossy link the
                    // acknowledgement of this message can come after the
                    // server's answer to it, and a server that disconnects
                    // once it has answered (the last exchange) gets the
                    // send flushed before its acknowledgement is seen. The
                    // server answers only what it received, so an answer
                    // proves delivery, whatever the send's completion says.
                    let sent = s.post_send(SendWorkRequest::new(&gather))?;
                    let answer = watch::wait(recv, limit, &mut Connected(s.channel()), ANSWER);
                    // Without an answer the send's outcome only if it has
                    // one: the scope flushes it otherwise.
                    let sent = if answer.is_ok() {
                        Some(sent.wait())
                    } else {
                        sent.poll().ok()
                    };
                    match (answer, sent) {
                        (Ok(got), _) => Ok(got.bytes()),
                        // No answer, and the send failed on its own (not
                        // flushed): that is the cause, the receive was
                        // flushed after it.
                        (
                            Err(_),
                            Some(Err(e @ rdma_safe::Error::WorkCompletion { status, .. })),
                        ) if status != WcStatus::WrFlushError => Err(e),
                        // Otherwise the receive's error says what happened
                        // (a timeout flushes the send too).
                        (Err(e), _) => Err(e),
                    }
                } else {
                    let n = watch::wait(recv, limit, &mut Connected(s.channel()), ANSWER)?.bytes();
                    match s.post_send(SendWorkRequest::new(&gather))?.wait() {
                        // The client disconnects once it has the answer (the
                        // last exchange), which can flush this send before
                        // its acknowledgement arrives; if the answer did
                        // not arrive, the client's own wait reports it, and
                        // this side's next receive, if any, fails.
                        Ok(_) | Err(rdma_safe::Error::PeerDisconnected { .. }) => Ok(n),
                        Err(e) => Err(e),
                    }
                }?;
                Ok((n, done))
            })
            .map_err(rdma_safe::Error::from);
        self.channel.set_timeout(saved);
        let (n, done) = got.map_err(|e| fail(format!("perftest control exchange: {e}")))?;
        if self.trace {
            eprintln!(
                "perf -R: control: sent {} bytes, received {n}: {:02x?}",
                mine.len(),
                &self.rx[..n.min(24)]
            );
        }
        Ok((self.rx[..n].to_vec(), done))
    }

    /// perftest's `ctx_hand_shake`: an exchange of destinations.
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange).
    pub(crate) fn hand_shake(&mut self, mine: &[u8; DEST_LEN]) -> Result<Vec<u8>> {
        self.exchange(mine)
    }

    /// Prints every message received on stderr from now on.
    pub(crate) fn trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// The control channel (its device is the one the CM chose).
    pub(crate) fn channel(&self) -> &Channel {
        &self.channel
    }
}
