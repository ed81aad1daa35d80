//! [`SharedChannel`]: operations that take ownership of pool buffers and
//! give them back with the completion — as a blocking call's result,
//! through a callback, or from a future — on a channel shared by many
//! threads and tasks.
//!
//! # Why this is sound without scopes
//!
//! The NIC touches only memory named by posted requests. An owning
//! operation moves its [`PoolBuf`] or [`PoolBytes`] into the engine's slot
//! for the request under the same lock as the post, and the slot releases
//! it only after the request's completion (success, error or flush) was
//! seen on the completion queue. No handle the user holds — a future, a
//! stream, the channel itself — is needed for that: dropping or
//! `mem::forget`-ing any of them cannot take memory from a `Posted` slot.
//! A dropped future marks its slot abandoned and the memory returns to the
//! pool when the completion arrives (a cancelled receive's buffer, holding
//! whatever the NIC wrote, goes to nobody before that). Leaking the last
//! channel handle leaks the queue pair with its slots (memory stays
//! allocated, never freed under the NIC); dropping it flushes outstanding
//! requests before the queue pair is destroyed. Writable buffers are
//! [`PoolBuf`]s, unique by type, so nothing reads or writes them while the
//! NIC may; shared [`PoolBytes`] are immutable, so the NIC's reads race
//! nothing.
//!
//! Forgetting a posted future (`mem::forget`) is memory-safe: its buffer
//! stays in the slot and is released when the channel's engine is dropped.
//! Nor does it stall the other futures: with a reactor, one completion
//! driver task per channel (not any future) sleeps on the completion
//! channel, reaps the completion queue and wakes exactly the futures whose
//! completions arrived — one completion wakes one task.
//!
//! # When a request is posted
//!
//! [`SharedChannel::submit`] makes a future that posts its request when
//! first polled, like most futures; [`SharedChannel::start`] posts it at
//! once and returns the future to await later, so a task puts a receive
//! on the wire before the send that asks for its answer, or several
//! requests before awaiting any, without polling futures by hand.
//! [`SharedChannel::start_receives`] posts many receives with one verb
//! call, each with its own future.
//!
//! # Batches
//!
//! [`Request::batch`], run or submitted, posts up to [`OWNED_BATCH_MAX`]
//! [`OwnedRequest`]s with one `ibv_post_send` call, only the last signaled.
//! The whole `Vec` moves into one slot and comes back with the last
//! request's completion; on a reliable connection the send queue completes
//! in order, so that completion (success, error or flush) says the NIC is
//! done with every request of the batch. This is what bandwidth needs on
//! rxe, where every doorbell is a system call.
//!
//! # Timeouts and the stall watchdog
//!
//! Blocking calls are bounded by the channel's timeout
//! ([`ChannelBuilder::timeout`](crate::ChannelBuilder::timeout),
//! [`CmOptions::timeout`](crate::cm::CmOptions::timeout); default
//! [`DEFAULT_TIMEOUT`](crate::channel::DEFAULT_TIMEOUT), 30 s) per request,
//! a blocking receive included: one that no message fills within the
//! timeout shuts the channel down with [`Error::Timeout`]. The futures and
//! streams have no timer of their own; the completion driver (with a
//! reactor) or the busy-polling future (without one) runs a **stall
//! watchdog** instead: when no completion at all has been seen for the
//! channel's timeout while a send, RDMA read or write, atomic or window
//! operation is in flight, the channel is shut down and every
//! outstanding operation fails with [`Error::Timeout`].
//!
//! **Posted receives alone are not a stall.** A peer that sends nothing —
//! a client that only reads one-sidedly, say — keeps its connection however
//! long it stays quiet, with receives posted for it: silence is not death.
//! Whether the peer is alive is the transport's to say: work on the send
//! queue is retried by the reliable connection and fails with
//! `WcStatus::RetryExceeded` once its retry budget is spent (see
//! [`CmOptions::retry_count`](crate::cm::CmOptions::retry_count)) if the
//! peer stopped answering; a CM peer that closes sends a disconnect
//! ([`Error::PeerDisconnected`]). A peer that dies while quiet (a host
//! that lost power or its link) says nothing: the opt-in **keepalive**
//! ([`Channel::set_keepalive`], [`CmOptions::keepalive`](crate::cm::CmOptions::keepalive),
//! [`ChannelBuilder::keepalive`](crate::ChannelBuilder::keepalive)) probes
//! it after an interval without completions, and reports it gone
//! ([`Error::PeerDisconnected`]) within the interval plus that retry
//! budget.
//!
//! The defaults, in one place: the channel's timeout 30 s; no keepalive;
//! ACK timeout exponent 17 (0.537 s) and 6 retries; receiver-not-ready
//! retries unlimited (7), their NAK timer 0.64 ms (12); a busy-polling
//! future looks at the watchdog every 256 empty polls, a blocking wait at
//! the device's state every 10 ms; a drain of a shut-down queue pair
//! waits up to 2 s without progress for flushes before it resets the
//! queue pair.
//!
//! # Sharing
//!
//! `SharedChannel` is a cheap clone (`Arc` of the engine). Every engine
//! method takes `&self`; the tracking state is behind one mutex, and the
//! verbs used (`ibv_post_send`/`ibv_post_recv`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`) are thread-safe, so any number of threads and tasks
//! post and reap on one queue pair. Whoever reaps a completion wakes its
//! future.
//!
//! # Example
//!
//! Owned sends and receives, blocking and as futures on tokio
//! (`rdma-safe/examples/owned_transfer.rs`, run on a soft-RoCE device by
//! `cargo xtask test-rxe`); a service built this way is
//! `rdma-safe/examples/cm_service.rs`:
//!
//! [`PoolBuf`]: crate::pool::PoolBuf
//! [`PoolBytes`]: crate::pool::PoolBytes
#![doc = concat!("```no_run\n", include_str!("../../examples/owned_transfer.rs"), "```")]

mod buffer;
mod driver;
mod future;
mod reactor;
mod request;
mod stream;

pub use crate::work::owned::{OwnedRequest, OWNED_BATCH_MAX};
pub use buffer::OwnedBuffer;
pub use future::Op;
pub use reactor::CompletionReactor;
#[cfg(feature = "tokio")]
pub use reactor::TokioReactor;
pub use request::Request;
pub use stream::RecvStream;

use crate::channel::Channel;
use crate::engine::{
    Abandon, Notice, Refused, Returned, WithMemory, WorkQueue, BOUNDED, RECEIVES_PER_CALL,
    SHORT_RECEIVES,
};
use crate::error::{Error, Operation, Result, VerbsError};
use crate::pool::{BufferPool, PoolBuf};
use crate::work::{Held, OwnedKind, WorkSuccess};
use buffer::{from_held, into_held};
use driver::DriverHandle;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

/// The outcome of an owning operation and its buffer, given back.
pub type Completed<B> = (Result<WorkSuccess>, B);

/// A cloneable, `Send + Sync` handle to a channel's engine for operations
/// that own their buffers (see the [module](self) docs). From
/// [`Channel::shared`].
#[derive(Clone)]
pub struct SharedChannel {
    queue: Arc<WorkQueue>,
    timeout: Duration,
    spin: Duration,
    /// With a reactor: the channel's completion driver (see [`driver`]),
    /// shared by clones.
    driver: Option<Arc<DriverHandle>>,
}

impl Channel {
    /// A handle for owning operations on this channel, usable from many
    /// threads and tasks at once, with the channel's timeout. Its futures
    /// need a reactor ([`SharedChannel::with_reactor`], or
    /// `SharedChannel::with_tokio` with the `tokio` feature); without one
    /// they re-poll (spin).
    ///
    /// The channel must be connected. Borrowed-memory operations and scopes
    /// on the channel keep working beside it.
    pub fn shared(&self) -> SharedChannel {
        SharedChannel {
            queue: self.queue().clone(),
            timeout: self.timeout(),
            spin: Duration::ZERO,
            driver: None,
        }
    }
}

impl SharedChannel {
    /// The waker a waiting future leaves in its request's slot, for whoever
    /// reaps the completion to wake: `cx`'s with a reactor (the driver
    /// reaps, and the task sleeps until woken). Without one, none: a
    /// future that finds its request still in flight asks to be polled
    /// again before it returns `Pending` ([`future::wait`]), so it never
    /// sleeps on a completion, and keeping a waker would only cost a clone
    /// at the post and a wake at the completion.
    #[inline]
    pub(crate) fn slot_waker<'w>(&self, cx: &Context<'w>) -> Option<&'w Waker> {
        self.driver.as_ref().map(|_| cx.waker())
    }
}

impl SharedChannel {
    /// Futures sleep until `reactor` finds the completion channel's
    /// descriptor readable: a completion driver task, spawned through
    /// [`CompletionReactor::spawn`] when a future first waits, reaps the
    /// completion queue and wakes the futures whose operations completed.
    pub fn with_reactor(mut self, reactor: Arc<dyn CompletionReactor>) -> Self {
        self.driver = Some(Arc::new(DriverHandle::new(reactor)));
        self
    }

    /// Futures sleep on tokio's reactor (`AsyncFd` over the completion
    /// channel's descriptor).
    ///
    /// # Errors
    /// [`VerbsError::InvalidArgument`] if the channel was built without
    /// [`completion_events`](crate::ChannelBuilder::completion_events) or on
    /// a [shared completion queue](crate::channel::SharedCompletionQueue);
    /// outside a tokio runtime, or if registering the descriptor fails, the
    /// I/O error.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn with_tokio(self) -> crate::Result<Self> {
        let channel = self.queue.cq.channel().cloned().ok_or_else(|| {
            VerbsError::InvalidArgument(if self.queue.cq.is_shared() {
                "a channel on a shared completion queue has no completion events: its futures \
                 poll the queue themselves (use the SharedChannel without with_tokio)"
                    .into()
            } else {
                "async operations need a channel built with .completion_events(true)".into()
            })
        })?;
        Ok(self.with_reactor(Arc::new(TokioReactor::new(channel)?)))
    }

    /// Waits poll the completion queue for `spin` before sleeping on the
    /// completion channel (default 0: sleep at once). Spinning lowers the
    /// latency of short operations at the cost of a busy core.
    pub fn with_spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Changes the bound on waits (default: the channel's timeout). Futures
    /// have no timer per operation: when no completion at all is seen for
    /// `timeout` while a send, RDMA read or write, atomic or window
    /// operation is in flight, the queue pair is shut down and every
    /// outstanding operation ends with [`Error::Timeout`]. Posted receives
    /// alone do not count: a [`RecvStream`] on a quiet peer waits as long
    /// as the peer is quiet (see the [module](self) docs; a keepalive,
    /// [`Channel::set_keepalive`], finds a peer that died meanwhile).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The bound on waits.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Why the channel is unusable, if an earlier failure, timeout or stall
    /// shut it down.
    pub fn unusable_reason(&self) -> Option<String> {
        self.queue.status().unusable
    }

    /// Shuts the channel down: moves the queue pair to the error state and
    /// drains it, so that every outstanding operation — posted receives
    /// waiting for messages included — completes with a flush error and its
    /// buffer returns. The way to end a connection whose peer left (say,
    /// its TCP control stream closed) without waiting for the timeout.
    pub fn shutdown(&self) {
        self.queue.shut_down(None, "shut down by the program");
    }

    /// Counters: (completions seen, requests in flight, completions of
    /// abandoned requests, tracked slots). Completions never outnumber
    /// posts; with nothing in flight and nothing unclaimed, the last is 0.
    pub fn counters(&self) -> (u64, usize, u64, usize) {
        let c = self.queue.status().counters;
        (c.completed, c.in_flight, c.abandoned, c.tracked)
    }

    /// Entries in the list of tasks waiting for send-queue room: at most
    /// one per waiting future, however often it is polled.
    pub fn room_waiters(&self) -> usize {
        self.queue.status().counters.room_waiters
    }

    /// For tests of the failure paths only: posts go to the verb without
    /// the state check that refuses them on a channel that is not connected
    /// (see [`Error::NotReady`](crate::Error::NotReady)).
    /// Still sound: a verb failure that may have queued the request shuts
    /// the channel down and drains it before anything is given back.
    #[doc(hidden)]
    pub fn skip_readiness_check(&self) {
        self.queue.gate.assume_ready();
    }

    // ----- the three ways to run a request --------------------------------

    /// Runs `req` and blocks until it completes (bounded by the timeout;
    /// spin, then sleep on the completion channel if it has one). The
    /// buffer comes back with the outcome.
    ///
    /// # Errors
    /// In the outcome: posting failed (e.g. the send queue is full, or a
    /// request does not fit its remote region), the completion reports an
    /// error, or the timeout passed (the channel is then shut down and
    /// drained).
    pub fn run<B: OwnedBuffer>(&self, req: Request<B>) -> Completed<B> {
        let Request { kind, buf } = req;
        match self.queue.submit(kind, into_held(buf), Notice::Claim) {
            Ok((_, Some(returned))) => finish(kind, returned),
            Ok((id, None)) => {
                let returned = self
                    .queue
                    .wait(id, WithMemory, self.spin, Some(self.timeout));
                finish(kind, returned.expect(BOUNDED))
            }
            Err(refused) => refused_outcome(kind, refused),
        }
    }

    /// Posts `req`; `then` gets the outcome and the buffer back once the
    /// completion was seen, from the next
    /// [`run_callbacks`](Self::run_callbacks) (the libevpl model). Costs
    /// one allocation (the boxed callback).
    ///
    /// # Errors
    /// If posting fails, the error and the buffer come back at once and
    /// `then` is dropped unrun.
    pub fn run_then<B: OwnedBuffer>(
        &self,
        req: Request<B>,
        then: impl FnOnce(Result<WorkSuccess>, B) + Send + 'static,
    ) -> Result<(), (Error, B)> {
        let Request { kind, buf } = req;
        let cb = Box::new(move |outcome, held| {
            let (outcome, buf) = finish(kind, (outcome, held));
            then(outcome, buf)
        });
        match self
            .queue
            .submit(kind, into_held(buf), Notice::Callback(cb))
        {
            Ok(_) => Ok(()),
            Err(refused) => Err(refused_parts(kind, refused)),
        }
    }

    /// Reaps the completion queue and runs the callbacks of completed
    /// operations, on this thread, outside the engine's lock (a callback may
    /// post again). Returns how many ran. Never blocks.
    ///
    /// # Panics
    /// A callback's panic unwinds out of this call, after the reap: every
    /// completion is recorded, and the callbacks not yet run stay queued
    /// for the next call.
    ///
    /// # Errors
    /// If polling the completion queue fails.
    pub fn run_callbacks(&self) -> Result<usize> {
        self.queue.run_callbacks()
    }

    /// A future that runs `req` and resolves to the outcome and the
    /// buffer. Nothing is posted before the first poll; a batch waits for
    /// send-queue room for all of it. Dropping the future at any point is
    /// safe: once posted, the memory stays with the engine until the
    /// completion is seen (see the [module](self) docs).
    pub fn submit<B: OwnedBuffer>(&self, req: Request<B>) -> Op<'_, B> {
        Op::new(self, req.kind, req.buf)
    }

    /// As [`submit`](Self::submit), but posts `req` now, before the future
    /// is first polled: a task can put several operations on the wire and
    /// then await them in any order, without polling each by hand.
    /// Refusals — an invalid request, a full receive queue, an unusable
    /// channel — and a completion already seen are what the future
    /// resolves to. Dropping the future is as safe as with `submit`.
    ///
    /// With the send queue full, the request is not posted
    /// ([`Op::wr_id`] is `None`): its first poll posts it, waiting for
    /// room. Until then nothing of it is on the wire: a task that awaits
    /// the peer's answer to it before the future itself waits for an
    /// answer to a message not sent. Requests started after it may be
    /// posted before it, so where order matters (sends on one channel)
    /// start no more than the queue holds (the channel's send depth)
    /// before awaiting. A request holds its entry until its completion is
    /// seen, and across a lossy link the acknowledgement of a send can
    /// come after the peer's answer to it: a loop that starts its next send
    /// before claiming the last one needs a depth of two, or checks
    /// [`Op::wr_id`].
    ///
    /// ```no_run
    /// # async fn f(ch: &rdma_safe::SharedChannel, pool: &rdma_safe::BufferPool)
    /// #     -> rdma_safe::Result<()> {
    /// use rdma_safe::owned::Request;
    /// // The receive is posted before the send that asks for the answer.
    /// let answer = ch.start(Request::receive(pool.try_alloc()?));
    /// let mut msg = pool.try_alloc()?;
    /// msg.fill_from(b"ping");
    /// let (sent, _) = ch.start(Request::send(msg.freeze())).await;
    /// sent?;
    /// let (got, buf) = answer.await;
    /// println!("{} bytes: {:?}", got?.bytes(), &buf[..]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn start<B: OwnedBuffer>(&self, req: Request<B>) -> Op<'_, B> {
        Op::started(self, req.kind, req.buf)
    }

    /// [`start`](Self::start)s a receive into each of `bufs`, posted
    /// together: one lock and one `ibv_post_recv` call for up to 32
    /// buffers, as C programs re-post their receive rings. Each receive
    /// completes on its own; its future is appended to `ops`, in the order
    /// of `bufs` (which is the order in which messages fill them). A
    /// buffer that could not be posted — the receive queue is full, the
    /// channel unusable — gets a future that resolves at once to the
    /// reason and the buffer. Allocates nothing.
    ///
    /// A future that `ops` does not keep (a collection that drops items, or
    /// panics) is dropped, as any dropped future: its buffer returns to the
    /// pool once its completion is seen.
    pub fn start_receives<'a>(
        &'a self,
        bufs: impl IntoIterator<Item = PoolBuf>,
        ops: &mut impl Extend<Op<'a, PoolBuf>>,
    ) {
        let mut bufs = bufs.into_iter().peekable();
        while bufs.peek().is_some() {
            // A ring re-posted a few buffers at a time (an iterator that
            // says it holds at most 8) fills an array of 8, not of 32, as
            // the engine then builds its SGEs in one of 8: making the
            // array writes every entry (1 KiB for 32).
            if bufs.size_hint().1.is_some_and(|n| n <= SHORT_RECEIVES) {
                self.start_chunk::<SHORT_RECEIVES>(&mut bufs, ops);
            } else {
                self.start_chunk::<RECEIVES_PER_CALL>(&mut bufs, ops);
            }
        }
    }

    /// Posts up to `N` (at most [`RECEIVES_PER_CALL`]) receives of
    /// `bufs` with one verb call (see [`start_receives`](Self::start_receives)).
    fn start_chunk<'a, const N: usize>(
        &'a self,
        bufs: &mut impl Iterator<Item = PoolBuf>,
        ops: &mut impl Extend<Op<'a, PoolBuf>>,
    ) {
        let mut chunk: [Option<PoolBuf>; N] = [const { None }; N];
        let mut n = 0;
        for (entry, buf) in chunk.iter_mut().zip(bufs.by_ref()) {
            *entry = Some(buf);
            n += 1;
        }
        let (ids, outcome) = self.queue.post_receives(&mut chunk[..n]);
        // The caller's `Extend` gets the futures; those it does not take
        // are abandoned (see `PostedReceives`).
        ops.extend(PostedReceives { chan: self, ids });
        let mut reason = outcome.err();
        for buf in chunk[..n].iter_mut().filter_map(Option::take) {
            let e = reason.take().unwrap_or_else(|| Error::Post {
                operation: Operation::Receive,
                source: VerbsError::InvalidArgument(
                    "not posted: an earlier receive of the same call was refused".into(),
                ),
            });
            ops.extend(std::iter::once(Op::refused(
                self,
                OwnedKind::Receive,
                e,
                buf,
            )));
        }
        // Every entry is `None` now: the first `n` were taken (posted or
        // refused above), the rest never filled. Forgetting the array
        // leaks nothing and spares the drop's look at every entry.
        debug_assert!(chunk.iter().all(Option::is_none));
        std::mem::forget(chunk);
    }

    /// A stream of received messages: keeps up to `depth` receives posted
    /// with buffers from `pool` (fewer while the pool is exhausted: it waits
    /// for buffers, never fails for lack of them).
    pub fn receive_stream(&self, pool: BufferPool, depth: usize) -> RecvStream {
        RecvStream::new(self.clone(), pool, depth.max(1))
    }

    /// The completion channel (its descriptor is non-blocking and
    /// [`AsFd`](std::os::fd::AsFd)), to register with a reactor; `None` if
    /// the channel was built without
    /// [`completion_events`](crate::ChannelBuilder::completion_events).
    pub fn completion_channel(&self) -> Option<&rdma_core::CompChannel> {
        self.queue.cq.channel()
    }

    pub(crate) fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    /// Whether the futures sleep on a reactor (a completion driver reaps).
    pub(crate) fn has_driver(&self) -> bool {
        self.driver.is_some()
    }

    /// The engine, shared.
    pub(crate) fn queue_arc(&self) -> Arc<WorkQueue> {
        self.queue.clone()
    }
}

/// The futures of receives just posted, in order, for the caller's
/// `Extend`. The ones it does not take — an `Extend` that takes none, stops
/// early or panics — are abandoned when this is dropped: their buffers go
/// back to the pool once their completions are seen, as a dropped future's
/// do, instead of staying in the engine until the channel is dropped.
struct PostedReceives<'a> {
    chan: &'a SharedChannel,
    ids: std::ops::Range<u64>,
}

impl<'a> Iterator for PostedReceives<'a> {
    type Item = Op<'a, PoolBuf>;

    #[inline]
    fn next(&mut self) -> Option<Op<'a, PoolBuf>> {
        let id = self.ids.next()?;
        Some(Op::posted(self.chan, OwnedKind::Receive, id))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ids.size_hint()
    }
}

impl ExactSizeIterator for PostedReceives<'_> {}

impl Drop for PostedReceives<'_> {
    fn drop(&mut self) {
        for id in self.ids.by_ref() {
            self.chan.queue.abandon(Abandon::Posted(id));
        }
    }
}

/// The buffer back from the engine, with a receive's length set to the
/// message's.
fn finish<B: OwnedBuffer>(kind: OwnedKind, (outcome, mut held): Returned) -> Completed<B> {
    // Set in place: the outcome and the memory move once, into the result.
    if let (OwnedKind::Receive, Held::Unique(b), Ok(s)) = (kind, &mut held, &outcome) {
        // A write with immediate lands in the peer-chosen region, not in
        // the receive buffer.
        let n = if s.opcode() == rdma_core::WcOpcode::Recv {
            s.bytes()
        } else {
            0
        };
        b.set_len_within(n);
    }
    (outcome, from_held::<B>(held))
}

/// The kind of a batch of `reqs`, named after its last request.
fn refused_outcome<B: OwnedBuffer>(kind: OwnedKind, refused: Refused) -> Completed<B> {
    let (e, buf) = refused_parts(kind, refused);
    (Err(e), buf)
}

fn refused_parts<B: OwnedBuffer>(kind: OwnedKind, refused: Refused) -> (Error, B) {
    match refused {
        Refused::Error(e, held) => (e, from_held::<B>(held)),
        Refused::Full(held) => (queue_full(kind), from_held::<B>(held)),
    }
}

fn queue_full(kind: OwnedKind) -> Error {
    let operation = kind.operation();
    Error::Post {
        operation,
        source: VerbsError::InvalidArgument(
            "the send queue is full (wait for completions or build a deeper channel)".into(),
        ),
    }
}

impl fmt::Debug for SharedChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedChannel")
            .field("timeout", &self.timeout)
            .field("spin", &self.spin)
            .field("driver", &self.driver)
            .field("unusable", &self.unusable_reason())
            .finish()
    }
}
