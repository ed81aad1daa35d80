//! [`PendingWork`]: a posted operation whose completion is polled later.

use crate::engine::{Look, Outcome, WorkQueue, BOUNDED};
use crate::error::Result;
use crate::work::WorkSuccess;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;

/// A work request posted by one of the `unsafe` `*_unpolled` methods of
/// [`Channel`](crate::Channel). It keeps the data borrowed (`'data`) and, if
/// dropped before its completion was taken, polls it to completion in `Drop`
/// (bounded by the channel's timeout, after which the queue pair is shut down
/// and drained).
///
/// Its soundness rests on `Drop` running, which is why creating one is
/// `unsafe`: a leaked (`mem::forget`) `PendingWork` ends the borrow while the
/// NIC may still access the memory. [`Channel::scope`](crate::Channel::scope)
/// has no such hole.
#[must_use = "dropping PendingWork blocks until the operation completes"]
pub struct PendingWork<'data> {
    shared: Arc<WorkQueue>,
    id: u64,
    timeout: Duration,
    _data: PhantomData<&'data mut [u8]>,
}

impl<'data> PendingWork<'data> {
    pub(crate) fn new(shared: Arc<WorkQueue>, id: u64, timeout: Duration) -> Self {
        PendingWork {
            shared,
            id,
            timeout,
            _data: PhantomData,
        }
    }

    /// The work request id.
    pub fn wr_id(&self) -> u64 {
        self.id
    }

    /// Polls once without blocking: the outcome if the operation completed,
    /// otherwise the still-pending work back.
    pub fn poll(self) -> Result<Result<WorkSuccess>, Self> {
        match self.shared.take(self.id, Outcome, Look::Once(None)) {
            Some(outcome) => {
                #[cfg(feature = "fault-injection")]
                crate::fault::finished(&self.shared, &[self.id], "a PendingWork is taken");
                // Completed and claimed: nothing is left for `Drop` to wait
                // for, but the reference to the channel must still be
                // released.
                drop(self.disarm());
                Ok(outcome)
            }
            None => Err(self),
        }
    }

    /// Blocks until the operation completes (bounded by the channel's
    /// timeout) and returns its outcome.
    pub fn wait(self) -> Result<WorkSuccess> {
        let (id, timeout) = (self.id, self.timeout);
        let queue = self.disarm();
        let outcome = queue
            .wait(id, Outcome, Duration::ZERO, Some(timeout))
            .expect(BOUNDED);
        #[cfg(feature = "fault-injection")]
        crate::fault::finished(&queue, &[id], "a PendingWork is waited for");
        outcome
    }

    /// Takes the channel's state out without running `Drop` (which would
    /// wait for the work).
    fn disarm(self) -> Arc<WorkQueue> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again after this read, so
        // the `Arc` is moved out exactly once.
        unsafe { std::ptr::read(&this.shared) }
    }
}

impl Drop for PendingWork<'_> {
    fn drop(&mut self) {
        let outcome = self
            .shared
            .wait(self.id, Outcome, Duration::ZERO, Some(self.timeout));
        #[cfg(feature = "fault-injection")]
        crate::fault::finished(&self.shared, &[self.id], "a PendingWork is dropped");
        if let Some(Err(e)) = outcome {
            log::warn!("PendingWork {} dropped unpolled and failed: {e}", self.id);
        }
    }
}

impl fmt::Debug for PendingWork<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingWork")
            .field("wr_id", &self.id)
            .finish()
    }
}
