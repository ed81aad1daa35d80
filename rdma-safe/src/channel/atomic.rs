//! Blocking atomics on a [`Channel`]; the scoped form is
//! [`PollingScope::post_atomic`](crate::PollingScope::post_atomic).

use super::Channel;
use crate::atomic::AtomicWorkRequest;
use crate::error::Result;
use crate::work::WorkSuccess;

impl Channel {
    /// Posts a 64-bit atomic (compare-and-swap or fetch-and-add) and blocks
    /// until it completes (bounded by the timeout); the remote word's
    /// previous value is then in the request's result element.
    ///
    /// # Errors
    /// [`Error::Post`](crate::Error::Post) before anything
    /// is posted for a misaligned target, a remote region shorter than 8
    /// bytes or a result element that is not 8 bytes (see
    /// [`AtomicWorkRequest`]); a
    /// [`WorkCompletion`](crate::Error::WorkCompletion) error when
    /// the peer refuses it (`RemAccessErr`: wrong key, no atomic access, or
    /// outside the peer's region); [`Timeout`](crate::Error::Timeout)
    /// and [`Unusable`](crate::Error::Unusable) as for every
    /// operation.
    pub fn atomic<'op>(&'op mut self, mut wr: AtomicWorkRequest<'op, 'op>) -> Result<WorkSuccess> {
        self.queue.post_atomic_and_wait(&mut wr, self.timeout)
    }

    /// Posts a batch of atomics with one `ibv_post_send` call, only the last
    /// signaled, and blocks until all completed (bounded by the timeout).
    /// See [`send_batch`](Self::send_batch).
    pub fn atomic_batch<'op>(
        &'op mut self,
        wrs: &mut [AtomicWorkRequest<'op, 'op>],
    ) -> Result<WorkSuccess> {
        self.queue.post_atomic_batch_and_wait(wrs, self.timeout)
    }
}
