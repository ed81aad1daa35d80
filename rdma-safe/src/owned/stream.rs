//! [`RecvStream`]: received messages, with receives kept posted from a
//! pool.

use super::future::wait;
use super::{finish, SharedChannel};
use crate::engine::{Abandon, Look, Notice, Refused, WithMemory};
use crate::error::{Error, Result};
use crate::pool::{BufferPool, PoolBuf};
use crate::work::WorkSuccess;
use crate::work::{Held, OwnedKind};
use std::collections::VecDeque;
use std::fmt;
use std::task::{Context, Poll};

/// Received messages, in order: keeps up to `depth` receives posted with
/// buffers from its pool (from [`SharedChannel::receive_stream`]). Each
/// item is the completion and the buffer, its length set to the message's.
///
/// Dropping the stream leaves its receives posted; their buffers return to
/// the pool when they complete or are flushed, never before.
pub struct RecvStream {
    chan: SharedChannel,
    pool: BufferPool,
    posted: VecDeque<u64>,
    depth: usize,
    /// The peer disconnected: the stream has ended.
    ended: bool,
}

/// The stream of received messages for any runtime's combinators; the
/// items are [`poll_next`](RecvStream::poll_next)'s.
#[cfg(feature = "futures")]
#[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
impl futures_core::Stream for RecvStream {
    type Item = Result<(WorkSuccess, PoolBuf)>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // `RecvStream` is `Unpin`: it holds no self-references.
        RecvStream::poll_next(self.get_mut(), cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.ended {
            (0, Some(0))
        } else {
            (0, None)
        }
    }
}

impl RecvStream {
    pub(super) fn new(chan: SharedChannel, pool: BufferPool, depth: usize) -> Self {
        RecvStream {
            chan,
            pool,
            posted: VecDeque::with_capacity(depth),
            depth,
            ended: false,
        }
    }

    /// Keeps `depth` receives posted while the pool has buffers.
    fn refill(&mut self, cx: &mut Context<'_>) -> Result<()> {
        while self.posted.len() < self.depth {
            let Poll::Ready(buf) = self.pool.poll_alloc(cx) else {
                return Ok(());
            };
            if !self.post(buf)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Posts a receive into `buf`; false if the receive queue is full (the
    /// buffer goes back to the pool).
    fn post(&mut self, buf: PoolBuf) -> Result<bool> {
        match self
            .chan
            .queue()
            .submit(OwnedKind::Receive, Held::Unique(buf), Notice::Claim)
        {
            Ok((id, _)) => {
                self.posted.push_back(id);
                Ok(true)
            }
            Err(Refused::Error(e, _)) => Err(e),
            Err(Refused::Full(_)) => Ok(false),
        }
    }

    /// Posts the stream's receives now (up to its depth, as many as the
    /// pool has buffers for without waiting) instead of at the first poll;
    /// how many are posted. For a channel whose peer may send before this
    /// side polls: one from [`Incoming::prepare`](crate::cm::Incoming::prepare),
    /// whose receives must be up before it accepts.
    ///
    /// # Errors
    /// The error of posting a receive (an unusable channel, …).
    pub fn post_now(&mut self) -> Result<usize> {
        while self.posted.len() < self.depth {
            let Ok(buf) = self.pool.try_alloc() else {
                break;
            };
            if !self.post(buf)? {
                break;
            }
        }
        Ok(self.posted.len())
    }

    /// The next message, or `Pending` (registered to be woken). `None` — the
    /// end of the stream — once the peer is gone (the peer of a CM channel
    /// disconnected, or did not answer a keepalive probe: every receive
    /// would report [`Error::PeerDisconnected`], and the stream ends
    /// instead), or the channel is unusable and every posted receive was
    /// delivered. A quiet peer does not end it: no message for any length
    /// of time is not an error (see
    /// [`Channel::set_keepalive`](crate::Channel::set_keepalive)).
    ///
    /// # Errors
    /// The item is an error when a receive completes with one for another
    /// reason than the peer's departure (then the channel is shut down, and
    /// the remaining receives come out as flushed errors), or when posting
    /// a receive fails; and [`Error::Timeout`] when the stall watchdog shut
    /// the channel down because a send-queue operation on it made no
    /// progress (see [`SharedChannel::with_timeout`]).
    pub fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<(WorkSuccess, PoolBuf)>>> {
        self.poll_with(cx, true)
    }

    /// [`poll_next`](Self::poll_next) for a caller that waits itself (a
    /// blocking stream in the engine's wait loop): without a reactor, a
    /// receive still in flight is `Pending` at once, not after the busy
    /// polls a future makes before it goes back to its runtime (and no
    /// wake is asked for: the caller looks again).
    pub(crate) fn poll_now(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<(WorkSuccess, PoolBuf)>>> {
        self.poll_with(cx, false)
    }

    fn poll_with(
        &mut self,
        cx: &mut Context<'_>,
        busy: bool,
    ) -> Poll<Option<Result<(WorkSuccess, PoolBuf)>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        loop {
            if self.chan.unusable_reason().is_none() {
                match self.refill(cx) {
                    // The peer left between the look and the post: the
                    // same clean end as a flushed receive's.
                    Err(Error::PeerDisconnected { .. }) if self.posted.is_empty() => {
                        self.end();
                        return Poll::Ready(None);
                    }
                    Err(e) if self.posted.is_empty() => return Poll::Ready(Some(Err(e))),
                    _ => {}
                }
            }
            let Some(&front) = self.posted.front() else {
                if self.chan.unusable_reason().is_some() {
                    return Poll::Ready(None);
                }
                // Waiting for a pool buffer (registered in `refill`).
                return Poll::Pending;
            };
            let queue = self.chan.queue();
            let look = Look::Once(self.chan.slot_waker(cx));
            if let Some(returned) = queue
                .take(front, WithMemory, look)
                .or_else(|| queue.wait(front, WithMemory, self.chan.spin, None))
            {
                self.posted.pop_front();
                let (outcome, buf): (_, PoolBuf) = finish(OwnedKind::Receive, returned);
                if let Err(Error::PeerDisconnected { .. }) = outcome {
                    // A clean end: the peer of a CM channel disconnected.
                    // The other receives were flushed with it; their
                    // buffers go back to the pool as they are reaped.
                    self.end();
                    return Poll::Ready(None);
                }
                return Poll::Ready(Some(outcome.map(|s| (s, buf))));
            }
            if !busy && !self.chan.has_driver() {
                return Poll::Pending;
            }
            match wait(&self.chan, cx) {
                Poll::Ready(()) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Waits for the next message (see [`poll_next`](Self::poll_next)).
    pub async fn next(&mut self) -> Option<Result<(WorkSuccess, PoolBuf)>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Receives posted and not yet delivered.
    pub fn posted(&self) -> usize {
        self.posted.len()
    }
}

impl RecvStream {
    /// Ends the stream: gives up the posted receives (their buffers return
    /// to the pool once their completions are seen, never before).
    fn end(&mut self) {
        self.ended = true;
        let queue = self.chan.queue();
        for id in self.posted.drain(..) {
            queue.abandon(Abandon::Posted(id));
        }
    }
}

impl Drop for RecvStream {
    fn drop(&mut self) {
        self.end();
    }
}

impl fmt::Debug for RecvStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvStream")
            .field("posted", &self.posted.len())
            .field("depth", &self.depth)
            .finish()
    }
}
