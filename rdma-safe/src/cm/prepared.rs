//! Accepting in two steps: the channel first, whose queue pair already takes
//! receives, and the accept once they are posted ([`Incoming::prepare`],
//! [`Acceptance`]).
//!
//! Why: the requester may send as soon as it has the accept. It tells this
//! side with its ready-to-use message (RTU), and a lost RTU keeps this
//! side's `ESTABLISHED` waiting for the accept's retransmission (about 4 s
//! at the CM's response timeout). A channel made after `ESTABLISHED` has no
//! receive posted in that time: every message the requester sends meets
//! receiver-not-ready NAKs, and across a lossy link each lost packet of
//! that exchange costs the requester's message one of its transport
//! retries (seven at most, one ACK timeout each). Measured across two
//! hosts with the server's RTUs dropped for 6 s and 3% loss: 4 of 4
//! `perf send_lat -R` clients failed with `IBV_WC_RETRY_EXC_ERR` (about 110
//! RNR NAKs and 6 retries each) while their servers still waited in the
//! accept. rping posts its receive before `rdma_accept` for this reason.
//!
//! A message that lands in such a receive also proves the requester
//! connected: the accept then tells the CM (`rdma_notify` with
//! `IBV_EVENT_COMM_EST`, which a NIC raises itself and rxe does not) and is
//! established at once, not after the retransmission.

use super::listener::Incoming;
use super::{access, mtu_trailer, CmOptions};
use crate::channel::{Channel, PendingCm};
use crate::error::Result;
use rdma_core::{CmId, ConnectParams, MAX_ACCEPT_PRIVATE_DATA};
use std::fmt;
use std::time::{Duration, Instant};

/// How often an accept waiting for `ESTABLISHED` looks whether a receive
/// posted before it has completed (see [`Acceptance::notify_if_data`]).
pub(super) const DATA_LOOK: Duration = Duration::from_millis(10);

impl Incoming {
    /// The channel this request will be served on, before accepting it:
    /// its queue pair takes receives now (posts to its send queue are
    /// refused with [`Error::NotReady`](crate::Error::NotReady) until the accept), so that a
    /// requester that sends as soon as it is accepted finds them posted
    /// whatever the network loses of the handshake (see the
    /// [module](super) docs). Accept (or reject) with the [`Acceptance`];
    /// dropping it rejects the request.
    ///
    /// ```no_run
    /// # fn f(listener: &rdma_safe::Listener) -> rdma_safe::Result<()> {
    /// use rdma_safe::{ReceiveWorkRequest, RegisteredBuffer};
    /// let incoming = listener.incoming()?;
    /// let mut request = RegisteredBuffer::new(incoming.pd(), 64)?;
    /// let (mut channel, acceptance) = incoming.prepare()?;
    /// let (mr, bytes) = request.split_mut();
    /// channel.scope(|s| {
    ///     let mut scatter = [mr.scatter_element(bytes)];
    ///     // Posted before the requester can send.
    ///     let first = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
    ///     acceptance.accept(&[])?;
    ///     println!("{} bytes", first.wait()?.bytes());
    ///     Ok::<_, rdma_safe::Error>(())
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// The error of creating the queue pair or of moving it to INIT.
    pub fn prepare(self) -> Result<(Channel, Acceptance)> {
        let queue = self.queue()?;
        queue.qp.to_init(self.id.port_num(), access())?;
        let theirs = (self.params.responder_resources, self.params.initiator_depth);
        let opts = self.opts;
        // Watched once accepted: until then the id's events are the accept's.
        let channel = Channel::from_cm(
            self.id,
            &self.pd,
            queue,
            &opts,
            self.params.private_data,
            false,
        )?;
        let pending = channel
            .pending_cm()
            .expect("a channel made by the connection manager");
        Ok((
            channel,
            Acceptance {
                pending,
                opts,
                theirs,
                finished: false,
            },
        ))
    }
}

/// The accept of a request whose channel was made first
/// ([`Incoming::prepare`]). Dropping it unused rejects the request.
///
/// If the accept fails (or is dropped), the channel's queue pair is moved
/// to the error state: the receives posted on it are flushed and report
/// [`Error::PeerDisconnected`](crate::Error::PeerDisconnected).
#[must_use = "dropping an Acceptance rejects the request"]
pub struct Acceptance {
    pending: PendingCm,
    opts: CmOptions,
    /// The requester's (responder resources, initiator depth).
    theirs: (u8, u8),
    finished: bool,
}

impl Acceptance {
    /// Accepts, sending `private_data` (at most
    /// [`MAX_ACCEPT_DATA`](super::MAX_ACCEPT_DATA) bytes), and waits (up to
    /// the options' timeout) until the connection is established; the
    /// channel's send queue takes requests from then on. A message that
    /// lands in a receive posted before the accept establishes it too: the
    /// requester is connected, and the accept tells the CM so
    /// (`rdma_notify`) rather than wait for its lost ready-to-use message
    /// to be sent again (measured across two hosts with that message
    /// dropped: established in tens of milliseconds instead of about 4 s).
    ///
    /// # Errors
    /// As [`Incoming::accept`].
    pub fn accept(mut self, private_data: &[u8]) -> Result<()> {
        let outcome = self.start(private_data).and_then(|()| {
            let mut wait = EstablishWait::new(self.opts.timeout);
            loop {
                let slice = wait.look_until().saturating_duration_since(Instant::now());
                if let Some(event) = self.id().get_event(slice)? {
                    return Ok(CmId::established(event)?);
                }
                wait.nothing_yet(&self)?;
            }
        });
        self.finish(outcome)
    }

    /// If a receive posted before the accept has completed, the requester
    /// is connected and its ready-to-use message was lost (or is late):
    /// tells the CM so (`rdma_notify`), which establishes the connection
    /// now instead of after the accept's retransmission (about 4 s).
    /// Whether it looked no further (it told, or telling failed: the RTU
    /// may have come meanwhile, and the wait goes on either way).
    pub(super) fn notify_if_data(&self) -> bool {
        if !self.pending.any_completed() {
            return false;
        }
        let peer = self.id().peer_addr();
        match self.id().notify_established() {
            Ok(()) => log::debug!("a message from {peer:?} before its RTU: established"),
            Err(e) => log::debug!("a message from {peer:?} before its RTU: {e}"),
        }
        true
    }

    /// Rejects the request, sending `private_data` (at most
    /// [`MAX_REJECT_PRIVATE_DATA`](rdma_core::MAX_REJECT_PRIVATE_DATA)
    /// bytes).
    ///
    /// # Errors
    /// As [`Incoming::reject`].
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        self.finished = true;
        self.pending.abandon();
        Ok(self.id().reject(private_data)?)
    }

    /// How long the accept waits for the connection's establishment.
    #[cfg(feature = "tokio")]
    pub(super) fn opts_timeout(&self) -> Duration {
        self.opts.timeout
    }

    /// The requester's identifier.
    pub(super) fn id(&self) -> &CmId {
        self.pending.id()
    }

    /// The queue pair to RTR and RTS, and `rdma_accept` with
    /// `private_data` and this port's MTU.
    ///
    /// # Errors
    /// Too much private data, or a verb's error.
    pub(super) fn start(&self, private_data: &[u8]) -> Result<()> {
        let data: [u8; MAX_ACCEPT_PRIVATE_DATA] =
            mtu_trailer::accept_data(private_data, self.id().active_mtu()?)?;
        let mut params: ConnectParams<'_> = self.opts.params(&data);
        params.responder_resources = params.responder_resources.min(self.theirs.0);
        params.initiator_depth = params.initiator_depth.min(self.theirs.1);
        Ok(self.id().accept_from_init(self.pending.qp(), &params)?)
    }

    /// Ends the accept with `outcome`: on success the channel starts
    /// watching for the peer's disconnect; on failure the connection is
    /// abandoned (its receives flushed).
    ///
    /// # Errors
    /// `outcome`'s, or the error of starting the watcher.
    pub(super) fn finish(&mut self, outcome: Result<()>) -> Result<()> {
        self.finished = true;
        let outcome = outcome.and_then(|()| self.pending.watch());
        if outcome.is_err() {
            self.pending.abandon();
            // Tell the requester, if it still waits (errors: it is gone).
            let _ = self.id().disconnect();
        }
        outcome
    }
}

impl Drop for Acceptance {
    fn drop(&mut self) {
        if !self.finished {
            // Never accepted (reject), or an `accept_async` dropped after
            // `rdma_accept` (disconnect); the other one fails, ignored.
            self.pending.abandon();
            let _ = self.id().reject(&[]);
            let _ = self.id().disconnect();
        }
    }
}

impl fmt::Debug for Acceptance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acceptance")
            .field("peer", &self.id().peer_addr())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

/// An accept's wait for `ESTABLISHED` (blocking or async): until the
/// timeout, in slices of [`DATA_LOOK`] until a receive posted before the
/// accept has completed (see [`Acceptance::notify_if_data`]), then whole.
pub(super) struct EstablishWait {
    timeout: Duration,
    end: Instant,
    notified: bool,
}

impl EstablishWait {
    /// A wait of `timeout` from now.
    pub(super) fn new(timeout: Duration) -> EstablishWait {
        EstablishWait {
            timeout,
            end: super::deadline(timeout),
            notified: false,
        }
    }

    /// When the next look for the accept's event should end.
    pub(super) fn look_until(&self) -> Instant {
        if self.notified {
            self.end
        } else {
            self.end.min(Instant::now() + DATA_LOOK)
        }
    }

    /// A look ended with no event: the timeout's error once it has passed;
    /// otherwise tells the CM of a message already received, if one was.
    ///
    /// # Errors
    /// [`rdma_core::Error::Timeout`] of `rdma_accept`.
    pub(super) fn nothing_yet(&mut self, acceptance: &Acceptance) -> Result<()> {
        if Instant::now() >= self.end {
            return Err(rdma_core::Error::Timeout {
                step: "rdma_accept",
                timeout: self.timeout,
            }
            .into());
        }
        self.notified = self.notified || acceptance.notify_if_data();
        Ok(())
    }
}
