//! Polling scopes: many operations in flight, all completed before the scope
//! returns.
//!
//! # How scopes stay sound when handles are forgotten
//!
//! Modelled on `std::thread::scope`. Operations posted through a
//! [`PollingScope`] borrow their data for `'scope`, a lifetime that the
//! closure cannot name and that outlives the closure's body: the data must
//! therefore be borrowed from outside the scope, for the whole call of
//! [`Channel::scope`](crate::Channel::scope). The scope records the id of every
//! request it posts. When the closure returns — normally, with an error, or
//! by panicking (caught with `catch_unwind`) — `scope` itself waits for every
//! recorded request that has not been polled, and only then returns (or
//! resumes the panic). Nothing relies on a handle's `Drop`: a
//! [`ScopedPendingWork`] that is `mem::forget`-ed is still waited for.
//! Handles are invariant in `'scope`, so they cannot escape the closure.
//!
//! A buffer lent with [`PollingScope::post_receive_lent`] or
//! [`PollingScope::post_send_lent`] comes back from its handle once the
//! operation has completed, for the next operation of the same scope: a
//! request/response loop reads each request inside one scope (see
//! [`LentWork`] for why that is sound).

mod lent;

pub use lent::LentWork;

use crate::channel::Channel;
use crate::engine::{Ids, Look, Outcome, WorkQueue, BOUNDED};
use crate::error::{Error, Operation, Result};
use crate::prepared::PreparedBatch;
use crate::verb::sealed::Queue;
use crate::verb::SendQueueRequest;
use crate::work::{
    ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WorkSuccess, WriteWorkRequest,
};
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;

/// The handle through which a scope's closure posts operations; see
/// [`Channel::scope`](crate::Channel::scope).
pub struct PollingScope<'scope, 'env: 'scope> {
    channel: &'scope Channel,
    queue: &'scope WorkQueue,
    posted: Vec<u64>,
    compact_at: usize,
    cancel_on_error: bool,
    timeout: Duration,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// Runs `f` in a scope over `channel` and drains everything it posted.
/// Returns the closure's result, the failures found while draining, and how
/// many requests the closure left unpolled.
pub(crate) fn run<'env, F, T, E>(
    channel: &'env mut Channel,
    f: F,
) -> (Result<T, E>, Vec<Error>, usize)
where
    F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env>) -> Result<T, E>,
{
    let timeout = channel.timeout();
    let mut ids = std::mem::take(&mut channel.scope_ids);
    ids.clear();
    let target: &Channel = channel;
    let queue: &WorkQueue = target.queue();
    let mut scope = PollingScope {
        channel: target,
        queue,
        posted: ids,
        compact_at: 256,
        cancel_on_error: false,
        timeout,
        _scope: PhantomData,
        _env: PhantomData,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| f(&mut scope)));
    // One lock for the common case: everything was claimed in the closure.
    let unclaimed = queue.tracked(Ids::Count(&scope.posted));
    let failed = !matches!(outcome, Ok(Ok(_)));
    if failed && scope.cancel_on_error && unclaimed > 0 {
        // Flush instead of waiting: the QP goes to the error state and every
        // outstanding request completes (flushed) before this returns.
        queue.shut_down(
            None,
            "a scope's closure failed and cancelled its outstanding work",
        );
    }
    let errors = if unclaimed == 0 {
        Vec::new()
    } else {
        name_unfilled_receives(queue.drain_ids(&scope.posted, timeout))
    };
    // The scope's promise: nothing it posted is still tracked (so none of
    // the memory it lent is in the NIC's hands) once it returns.
    #[cfg(feature = "fault-injection")]
    crate::fault::finished(queue, &scope.posted, "a scope returns");
    debug_assert_eq!(
        queue.tracked(Ids::Count(&scope.posted)),
        0,
        "a scope returns with requests still tracked"
    );
    let ids = scope.posted;
    match outcome {
        Ok(result) => {
            // Keep a modest allocation for the next scope; give back one
            // that a long-lived scope grew large.
            if ids.capacity() <= MAX_KEPT_IDS {
                channel.scope_ids = ids;
            }
            (result, errors, unclaimed)
        }
        Err(panic) => resume_unwind(panic),
    }
}

/// The scope's drain found a receive that timed out: no message came for
/// it after the closure had returned, so nobody sent what it was posted
/// for. That timeout becomes [`Error::UnfilledReceives`], counting it and
/// the receives flushed after it (the timeout shut the channel down).
fn name_unfilled_receives(mut errors: Vec<Error>) -> Vec<Error> {
    let timed_out = errors.iter().position(|e| {
        matches!(
            e,
            Error::Timeout {
                operation: Operation::Receive,
                ..
            }
        )
    });
    if let Some(at) = timed_out {
        let Error::Timeout { timeout, .. } = errors[at] else {
            unreachable!("found above")
        };
        let receives = errors[at..]
            .iter()
            .filter(|e| e.operation() == Some(Operation::Receive))
            .count();
        errors[at] = Error::UnfilledReceives { receives, timeout };
    }
    errors
}

/// Capacity of the id list a channel keeps between scopes.
const MAX_KEPT_IDS: usize = 4096;

impl<'scope, 'env> PollingScope<'scope, 'env> {
    /// Records `id`, just posted, among the requests the scope waits for,
    /// and makes its handle.
    #[inline]
    fn handle(&mut self, id: u64) -> ScopedPendingWork<'scope> {
        self.make_room();
        self.posted.push(id);
        self.handle_of(id)
    }

    /// Records `ids`, just posted, among the requests the scope waits for.
    /// Always before any code of the caller's runs (an `Extend` that the
    /// handles go to): an id not recorded would not be waited for, and its
    /// memory would be given back while the NIC may still write it.
    #[inline]
    fn record(&mut self, ids: std::ops::Range<u64>) {
        self.make_room();
        self.posted.extend(ids);
    }

    /// Compacts the id list when it has grown past its mark.
    #[inline]
    fn make_room(&mut self) {
        if self.posted.len() >= self.compact_at {
            // Forget the ids already claimed, so a long-lived scope (a
            // benchmark loop, a server) does not grow without bound.
            self.queue.tracked(Ids::Retain(&mut self.posted));
            self.compact_at = (self.posted.len() * 2).max(256);
        }
    }

    /// The handle of `id`, already recorded.
    #[inline]
    fn handle_of(&self, id: u64) -> ScopedPendingWork<'scope> {
        ScopedPendingWork {
            queue: self.queue,
            id,
            timeout: self.timeout,
            _scope: PhantomData,
        }
    }

    /// Posts one send-queue request — a [`SendWorkRequest`],
    /// [`WriteWorkRequest`], [`ReadWorkRequest`] or
    /// [`AtomicWorkRequest`](crate::AtomicWorkRequest);
    /// its memory stays borrowed (a read's or an atomic's result
    /// exclusively) until the scope ends.
    ///
    /// # Errors
    /// As [`Channel::run`]'s posting errors.
    pub fn post<W: SendQueueRequest<'scope>>(
        &mut self,
        mut wr: W,
    ) -> Result<ScopedPendingWork<'scope>> {
        let id = wr.post(Queue(self.queue))?;
        Ok(self.handle(id))
    }

    /// Posts a batch of send-queue requests of one kind with one
    /// `ibv_post_send` call (one doorbell), only the last one signaled; one
    /// handle covers the batch. Their memory stays borrowed until the scope
    /// ends. Nothing is posted if one of them is malformed. The verb's list of
    /// up to 32 requests is built on the stack, not allocated.
    ///
    /// # Errors
    /// As [`Channel::run_batch`]'s posting errors.
    pub fn post_batch<'d: 'scope, W: SendQueueRequest<'d>>(
        &mut self,
        wrs: &mut [W],
    ) -> Result<ScopedPendingWork<'scope>> {
        let id = W::post_batch(wrs, Queue(self.queue))?;
        Ok(self.handle(id))
    }

    /// Checks `wrs` as [`post_batch`](Self::post_batch) would and builds
    /// their verb requests once, for
    /// [`post_prepared`](Self::post_prepared) to post as often as wanted
    /// (see [`PreparedBatch`]).
    ///
    /// # Errors
    /// As [`post_batch`](Self::post_batch)'s refusals of a malformed request
    /// (too many SGEs, a payload forced inline that does not fit); an
    /// empty list is refused too.
    pub fn prepare_sends<'wr, 'd>(
        &self,
        wrs: &[SendWorkRequest<'wr, 'd>],
    ) -> Result<PreparedBatch<'wr, 'd>> {
        let built = self.queue.prepare(wrs.iter().copied())?;
        PreparedBatch::new(self.queue, Operation::Send, built)
    }

    /// As [`prepare_sends`](Self::prepare_sends), for RDMA writes (each
    /// length is checked against its remote region here).
    ///
    /// # Errors
    /// As [`prepare_sends`](Self::prepare_sends), and a write longer than
    /// its remote region.
    pub fn prepare_writes<'wr, 'd>(
        &self,
        wrs: &[WriteWorkRequest<'wr, 'd>],
    ) -> Result<PreparedBatch<'wr, 'd>> {
        let built = self.queue.prepare(wrs.iter().copied())?;
        PreparedBatch::new(self.queue, Operation::Write, built)
    }

    /// As [`prepare_sends`](Self::prepare_sends), for RDMA reads: the batch
    /// borrows the reads (and so their targets) exclusively while it lives.
    ///
    /// # Errors
    /// As [`prepare_writes`](Self::prepare_writes).
    pub fn prepare_reads<'p, 'd>(
        &self,
        wrs: &'p mut [ReadWorkRequest<'_, 'd>],
    ) -> Result<PreparedBatch<'p, 'd>> {
        let built = self.queue.prepare(wrs.iter_mut())?;
        PreparedBatch::new(self.queue, Operation::Read, built)
    }

    /// Posts a prepared batch with one `ibv_post_send` call, only its last
    /// request signaled; one handle covers the batch, whose memory stays
    /// borrowed until the scope ends. Nothing is checked or built again:
    /// the batch's requests get their id and are linked.
    ///
    /// # Errors
    /// A batch prepared on another channel is refused; otherwise as
    /// [`post_batch`](Self::post_batch)'s posting errors.
    #[inline]
    pub fn post_prepared<'d: 'scope>(
        &mut self,
        batch: &mut PreparedBatch<'_, 'd>,
    ) -> Result<ScopedPendingWork<'scope>> {
        let (op, len) = (batch.op, batch.len);
        let id = self
            .queue
            .post_built(op, len, batch.list_for(self.queue)?)?;
        Ok(self.handle(id))
    }

    /// Posts a send; its data stays borrowed until the scope ends:
    /// [`post`](Self::post) of a send, the design's name.
    ///
    /// # Errors
    /// As [`post`](Self::post).
    pub fn post_send(
        &mut self,
        wr: SendWorkRequest<'_, 'scope>,
    ) -> Result<ScopedPendingWork<'scope>> {
        self.post(wr)
    }

    /// Posts an RDMA write: [`post`](Self::post) of a write.
    ///
    /// # Errors
    /// As [`post`](Self::post).
    pub fn post_write(
        &mut self,
        wr: WriteWorkRequest<'_, 'scope>,
    ) -> Result<ScopedPendingWork<'scope>> {
        self.post(wr)
    }

    /// Posts an RDMA read: [`post`](Self::post) of a read.
    ///
    /// # Errors
    /// As [`post`](Self::post).
    pub fn post_read(
        &mut self,
        wr: ReadWorkRequest<'_, 'scope>,
    ) -> Result<ScopedPendingWork<'scope>> {
        self.post(wr)
    }

    /// Posts a receive; its buffers stay exclusively borrowed until the scope
    /// ends.
    ///
    /// # Errors
    /// As [`post`](Self::post).
    #[inline]
    pub fn post_receive(
        &mut self,
        wr: ReceiveWorkRequest<'_, 'scope>,
    ) -> Result<ScopedPendingWork<'scope>> {
        // An array of one: the engine builds no list for it.
        let (ids, posted) = self.queue.post_receives(&mut [wr]);
        posted?;
        Ok(self.handle(ids.start))
    }

    /// Posts several receives with one `ibv_post_recv` call (one lock, one
    /// list), for servers that keep a ring of receives posted. Unlike send
    /// batches, each receive completes on its own — in order, with its own
    /// byte count and immediate data — so each gets its own handle. Their
    /// buffers stay exclusively borrowed until the scope ends.
    ///
    /// If the device refuses part of the list (a full receive queue, say),
    /// the receives it took stay posted and are waited for when the scope
    /// ends; the error is returned and their handles are not.
    ///
    /// The handles come in a new `Vec`, one allocation per call;
    /// [`post_receive_batch_into`](Self::post_receive_batch_into) puts them
    /// in a collection of the caller's instead.
    ///
    /// # Errors
    /// The verb's refusal, as above.
    pub fn post_receive_batch<'d: 'scope>(
        &mut self,
        wrs: &mut [ReceiveWorkRequest<'_, 'd>],
    ) -> Result<Vec<ScopedPendingWork<'scope>>> {
        let mut handles = Vec::with_capacity(wrs.len());
        self.post_receive_batch_into(wrs, &mut handles)
            .map(|_| handles)
    }

    /// Posts several receives with one `ibv_post_recv` call, as
    /// [`post_receive_batch`](Self::post_receive_batch), and appends their
    /// handles, in order, to `handles` — a `VecDeque` ring of receives, a
    /// `Vec` kept from batch to batch. Returns how many were posted.
    ///
    /// Nothing is allocated per call: the list handed to the verb is built
    /// on the stack (up to 32 receives; a longer batch is built on the
    /// heap), and `handles` grows only if it lacks room.
    ///
    /// If the device refuses part of the list, the handles of the receives
    /// it took are still appended (they complete as any other), and the
    /// error is returned; when the device does not say which it took, none
    /// is appended and the channel is shut down first (see
    /// [`post_receive_batch`](Self::post_receive_batch)).
    ///
    /// The scope records every receive posted before `handles` sees its
    /// handle: a collection that drops handles, or panics, leaves them to
    /// be waited for when the scope ends, as forgotten handles are.
    ///
    /// # Errors
    /// An empty batch, a receive with more scatter elements than the
    /// channel allows, a channel whose receives go to a shared receive
    /// queue, a full receive queue, or the verb's refusal.
    pub fn post_receive_batch_into<'d: 'scope>(
        &mut self,
        wrs: &mut [ReceiveWorkRequest<'_, 'd>],
        handles: &mut impl Extend<ScopedPendingWork<'scope>>,
    ) -> Result<usize> {
        let (ids, outcome) = self.queue.post_receives(wrs);
        let posted = (ids.end - ids.start) as usize;
        // Every id is recorded before `handles` (the caller's code) sees
        // any: an `Extend` that takes none of them, or panics, still leaves
        // them all to be waited for when the scope ends.
        self.record(ids.clone());
        handles.extend(ids.map(|id| self.handle_of(id)));
        outcome.map(|()| posted)
    }

    /// Asks that, if the closure fails (returns `Err` or panics), the work it
    /// left outstanding be ended at once instead of waited for: the queue
    /// pair is moved to the error state and its requests flushed before the
    /// scope returns, and the channel becomes unusable. Without it the scope
    /// waits for each outstanding request, up to the channel's timeout — a
    /// receive the peer will never fill costs the whole timeout.
    pub fn cancel_on_error(&mut self) {
        self.cancel_on_error = true;
    }

    /// The channel (read-only: posting goes through the scope).
    pub fn channel(&self) -> &Channel {
        self.channel
    }

    /// Requests posted through this scope whose completion has not been
    /// taken yet.
    pub fn outstanding(&self) -> usize {
        self.queue.tracked(Ids::Count(&self.posted))
    }
}

impl fmt::Debug for PollingScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollingScope")
            .field("posted", &self.posted.len())
            .finish()
    }
}

/// An operation posted in a scope. Poll it with [`poll`](Self::poll) or
/// [`wait`](Self::wait); if it is dropped or forgotten instead, the scope
/// waits for it when it ends.
#[must_use = "an unpolled operation is waited for at the end of the scope; poll it to see its outcome"]
pub struct ScopedPendingWork<'scope> {
    queue: &'scope WorkQueue,
    id: u64,
    timeout: Duration,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

impl<'scope> ScopedPendingWork<'scope> {
    /// The work request id.
    pub fn wr_id(&self) -> u64 {
        self.id
    }

    /// Polls once without blocking: the outcome if the operation completed,
    /// otherwise the handle back.
    #[inline(always)]
    pub fn poll(self) -> Result<Result<WorkSuccess>, Self> {
        match self.queue.take(self.id, Outcome, Look::Once(None)) {
            Some(outcome) => Ok(outcome),
            None => Err(self),
        }
    }

    /// Blocks until the operation completes (bounded by the channel's
    /// timeout; on expiry the channel is shut down and drained) and returns
    /// its outcome.
    #[inline]
    pub fn wait(self) -> Result<WorkSuccess> {
        self.queue
            .wait(self.id, Outcome, Duration::ZERO, Some(self.timeout))
            .expect(BOUNDED)
    }
}

impl fmt::Debug for ScopedPendingWork<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedPendingWork")
            .field("wr_id", &self.id)
            .finish()
    }
}
