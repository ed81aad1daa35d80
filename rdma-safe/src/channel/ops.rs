//! The operations of a [`Channel`]: blocking, unpolled and scoped.

use super::Channel;
use crate::engine::{Outcome, BOUNDED};
use crate::error::{Result, ScopeError};
use crate::pending::PendingWork;
use crate::scope::PollingScope;
use crate::verb::sealed::{Post, Queue};
use crate::verb::SendQueueRequest;
use crate::work::{
    ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WorkSuccess, WriteWorkRequest,
};
use std::time::Duration;

impl Channel {
    // ----- blocking operations ------------------------------------------------
    //
    // Each returns only once the NIC is done with the request's memory (or
    // aborts the process where it cannot know), so the request borrows its
    // memory and the channel for the call only: an element list can be
    // reused, and the channel used, right after.

    /// Posts one send-queue request — a [`SendWorkRequest`],
    /// [`WriteWorkRequest`], [`ReadWorkRequest`] or
    /// [`AtomicWorkRequest`](crate::AtomicWorkRequest) — and blocks until it completes (bounded by the timeout). The generic
    /// form of [`send`](Self::send), [`write`](Self::write) and
    /// [`read`](Self::read); an atomic's previous remote value is then in
    /// its result element.
    ///
    /// # Errors
    /// [`Error::Post`](crate::Error::Post) before anything is posted for a
    /// malformed request (an atomic's misaligned target, a remote region
    /// shorter than 8 bytes or a result element that is not 8 bytes; an
    /// inline send above the channel's inline size; too many elements);
    /// [`NotReady`](crate::Error::NotReady) on a channel that is not
    /// connected; a [`WorkCompletion`](crate::Error::WorkCompletion) error
    /// when the NIC or the peer fails it (`RemAccessErr`: wrong key, no
    /// access, or outside the peer's region);
    /// [`Timeout`](crate::Error::Timeout),
    /// [`PeerDisconnected`](crate::Error::PeerDisconnected) and
    /// [`Unusable`](crate::Error::Unusable) as for every operation.
    pub fn run<'d, W: SendQueueRequest<'d>>(&mut self, mut wr: W) -> Result<WorkSuccess> {
        let outcome = wr.post_and_wait(Queue(&self.queue), self.timeout);
        self.peer_gone(outcome)
    }

    /// Posts a batch of send-queue requests of one kind with one
    /// `ibv_post_send` call, only the last one signaled, and blocks until
    /// all completed (bounded by the timeout): a reliable connection
    /// completes its send queue in order, so the last completion covers
    /// the batch. Fewer doorbells and completions than one call per
    /// request: the way to move many small messages. The outcome reports
    /// the total bytes; the first failure of any member fails the batch,
    /// and nothing is posted if one is malformed. The verb's list of up
    /// to 32 requests is built on the stack, not allocated.
    ///
    /// # Errors
    /// As [`run`](Self::run); also a batch larger than the send queue.
    pub fn run_batch<'d, W: SendQueueRequest<'d>>(&mut self, wrs: &mut [W]) -> Result<WorkSuccess> {
        let outcome = W::post_batch_and_wait(wrs, Queue(&self.queue), self.timeout);
        self.peer_gone(outcome)
    }

    /// Posts a send and blocks until it completes (bounded by the timeout):
    /// [`run`](Self::run) of a send, the design's name.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn send(&mut self, wr: SendWorkRequest<'_, '_>) -> Result<WorkSuccess> {
        self.run(wr)
    }

    /// Posts a receive and blocks until a message arrives in it (bounded by
    /// the timeout). The request borrows its buffer for the call only:
    /// when this returns, the first [`bytes()`](WorkSuccess::bytes) bytes
    /// of the buffer are the message, readable at once. Inside a
    /// [`scope`](Self::scope), where a receive is posted ahead of the
    /// request that answers it, the same is had from
    /// [`PollingScope::post_receive_lent`], whose handle gives the buffer
    /// back when the message has arrived (see the performance guide,
    /// [`docs::performance`](crate::docs::performance)).
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn receive(&mut self, wr: ReceiveWorkRequest<'_, '_>) -> Result<WorkSuccess> {
        let (ids, posted) = self.queue.post_receives(&mut [wr]);
        posted?;
        let id = ids.start;
        let outcome = self
            .queue
            .wait(id, Outcome, Duration::ZERO, Some(self.timeout));
        self.peer_gone(outcome.expect(BOUNDED))
    }

    /// Posts an RDMA write and blocks until it completes (bounded by the
    /// timeout): [`run`](Self::run) of a write, the design's name.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn write(&mut self, wr: WriteWorkRequest<'_, '_>) -> Result<WorkSuccess> {
        self.run(wr)
    }

    /// Posts an RDMA read and blocks until it completes (bounded by the
    /// timeout): [`run`](Self::run) of a read, the design's name.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn read(&mut self, wr: ReadWorkRequest<'_, '_>) -> Result<WorkSuccess> {
        self.run(wr)
    }

    // ----- unpolled operations ------------------------------------------------

    /// Posts a send without polling for its completion.
    ///
    /// # Safety
    /// The returned [`PendingWork`] must not be leaked (e.g. via
    /// `mem::forget`): that would end the borrow of the data without dropping
    /// it while the hardware may still access the memory. Prefer
    /// [`scope`](Self::scope) or [`manual_scope`](Self::manual_scope), which
    /// prevent this.
    pub unsafe fn send_unpolled<'data>(
        &mut self,
        mut wr: SendWorkRequest<'_, 'data>,
    ) -> Result<PendingWork<'data>> {
        let id = wr.post(Queue(&self.queue))?;
        Ok(PendingWork::new(self.queue.clone(), id, self.timeout))
    }

    /// Posts a receive without polling for its completion.
    ///
    /// # Safety
    /// The returned [`PendingWork`] must not be leaked (e.g. via
    /// `mem::forget`): that would end the borrow of the data without dropping
    /// it while the hardware may still access the memory. Prefer
    /// [`scope`](Self::scope) or [`manual_scope`](Self::manual_scope), which
    /// prevent this.
    pub unsafe fn receive_unpolled<'data>(
        &mut self,
        wr: ReceiveWorkRequest<'_, 'data>,
    ) -> Result<PendingWork<'data>> {
        let (ids, posted) = self.queue.post_receives(&mut [wr]);
        posted?;
        let id = ids.start;
        Ok(PendingWork::new(self.queue.clone(), id, self.timeout))
    }

    /// Posts an RDMA write without polling for its completion.
    ///
    /// # Safety
    /// The returned [`PendingWork`] must not be leaked (e.g. via
    /// `mem::forget`): that would end the borrow of the data without dropping
    /// it while the hardware may still access the memory. Prefer
    /// [`scope`](Self::scope) or [`manual_scope`](Self::manual_scope), which
    /// prevent this.
    pub unsafe fn write_unpolled<'data>(
        &mut self,
        mut wr: WriteWorkRequest<'_, 'data>,
    ) -> Result<PendingWork<'data>> {
        let id = wr.post(Queue(&self.queue))?;
        Ok(PendingWork::new(self.queue.clone(), id, self.timeout))
    }

    /// Posts an RDMA read without polling for its completion.
    ///
    /// # Safety
    /// The returned [`PendingWork`] must not be leaked (e.g. via
    /// `mem::forget`): that would end the borrow of the data without dropping
    /// it while the hardware may still access the memory. Prefer
    /// [`scope`](Self::scope) or [`manual_scope`](Self::manual_scope), which
    /// prevent this.
    pub unsafe fn read_unpolled<'data>(
        &mut self,
        mut wr: ReadWorkRequest<'_, 'data>,
    ) -> Result<PendingWork<'data>> {
        let id = wr.post(Queue(&self.queue))?;
        Ok(PendingWork::new(self.queue.clone(), id, self.timeout))
    }

    // ----- scopes --------------------------------------------------------------

    /// Opens a polling scope that automatically polls all outstanding work
    /// requests when it ends.
    ///
    /// This is the primary safe way to have many operations in flight. The
    /// closure receives a [`PollingScope`] through which operations are
    /// posted; each returns a handle that can be polled individually. When
    /// the closure returns, every work request that was not polled is polled
    /// to completion before this method returns — also if the closure
    /// panicked (the panic resumes after the drain), and also for handles
    /// that were `mem::forget`-ed: the scope, not the handle, owns the
    /// obligation to wait.
    ///
    /// # Errors
    /// * The closure returns `Err(e)`: outstanding work is still polled, then
    ///   [`ScopeError::ClosureError`]`(e)` is returned.
    /// * The closure returns `Ok(t)` but automatic polling finds a failed (or
    ///   timed-out) request: [`ScopeError::AutoPollError`].
    pub fn scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env>) -> Result<T, E>,
    {
        let (result, errors, _unclaimed) = crate::scope::run(self, f);
        match result {
            Err(e) => Err(ScopeError::ClosureError(e)),
            Ok(t) => match errors.into_iter().next() {
                Some(err) => Err(ScopeError::AutoPollError(err)),
                None => Ok(t),
            },
        }
    }

    /// Opens a polling scope that enforces manual polling of all work
    /// requests.
    ///
    /// Like [`scope`](Self::scope), but the contract is that the closure
    /// polls everything it posts, so the closure's result is returned
    /// directly.
    ///
    /// # Panics
    /// If the closure succeeds but leaves work unpolled: the work is first
    /// polled to completion (so no memory is in use), then this panics as a
    /// safety net. If the closure returns an error, outstanding work is
    /// cleaned up without panicking.
    pub fn manual_scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, E>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env>) -> Result<T, E>,
    {
        let (result, _errors, unclaimed) = crate::scope::run(self, f);
        match result {
            Ok(_) if unclaimed > 0 => panic!(
                "manual_scope: the closure returned Ok but left {unclaimed} work request(s) unpolled \
                 (they have now been polled to completion)"
            ),
            r => r,
        }
    }
}
