//! Stopping the NIC: moving a queue pair to the error state and draining
//! it, discarding by RESET what never completes, and settling a post whose
//! outcome the provider did not report.
//!
//! # When memory comes back after a failed post
//!
//! A post that fails hands memory back (an owning request's buffer) or
//! ends a borrow (a blocking call, a scope's element) at once **only** when
//! the provider proved that none of the list reached the queue: it named
//! the list's first request as the one it did not take (`bad_wr` = head,
//! [`PostError::posted`] = `Some(0)`). The engine checks first whatever
//! can be checked without the verb (usable channel, queue pair state,
//! send-queue room, SGE counts, inline sizes, remote lengths), so that
//! case is the rare one.
//!
//! Any other failure — some requests taken (`Some(k)`, k > 0, of a list),
//! or none named (`None`) — may leave requests on the queue that the NIC
//! will run later. rxe does exactly that: it writes the request into the
//! ring, then rings the doorbell with a system call, and when the kernel
//! refuses the doorbell (a queue pair that is not ready to send) the
//! request stays queued and runs after the next doorbell that succeeds.
//! So such a failure **poisons** the channel ([`post_failed`]):
//!
//! 1. every request of the failed call is tracked under its own, fresh
//!    id, as if posted (ids are never reused while a request that carried
//!    one may still complete);
//! 2. the channel is marked unusable and its queue pair moved to ERR, which
//!    flushes everything queued; the engine reaps until nothing is in
//!    flight;
//! 3. whatever has not completed after [`FLUSH_PATIENCE`] without progress
//!    (it never reached the queue, or the device stopped flushing) is
//!    discarded by moving the queue pair to RESET, which removes every
//!    queued request without completions: after that the device touches
//!    none of their memory;
//! 4. only then is the error returned, with the memory.
//!
//! If even RESET fails, no return is sound and the process aborts.
//!
//! [`post_failed`]: WorkQueue::post_failed
//! [`PostError::posted`]: rdma_core::PostError::posted

use super::attached::{Attached, Notify};
use super::clock::WaitClock;
use super::tracker::Tracker;
use super::WorkQueue;
use crate::error::{Error, Operation};
use crate::fatal::AbortOnUnwind;
use crate::work::Held;
use rdma_core::PostError;
use std::time::Duration;

/// How long a drain waits with no completion arriving before it concludes
/// that what is still in flight will never complete, and discards it.
/// Flush completions normally arrive at once.
const FLUSH_PATIENCE: Duration = Duration::from_secs(2);

/// The longest a drain that keeps making progress may take.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Whether a failed post proves that none of its requests reached the
/// queue (see the [module documentation](self)).
#[inline]
pub(super) fn nothing_queued(e: &PostError) -> bool {
    e.posted() == Some(0)
}

impl WorkQueue {
    /// Moves the QP to ERR and polls until nothing is in flight, marking the
    /// channel unusable with `why`. Flushed requests stay claimable. What
    /// never completes is discarded by moving the queue pair to RESET,
    /// which removes every queued request without a completion, after which
    /// what is still tracked ends as flushed (see the module docs). `st` is
    /// the tracker when the caller holds the lock; `None` takes it here.
    pub(crate) fn shut_down(&self, st: Option<&mut Tracker>, why: &str) {
        let Some(st) = st else {
            return self.shut_down(Some(&mut self.lock()), why);
        };
        let guard = AbortOnUnwind("draining a queue pair");
        st.mark_unusable(why);
        if let Err(e) = self.qp.to_error() {
            st.later().log(
                log::Level::Error,
                format_args!("moving QP {} to ERR failed: {e}", self.qp.qp_num()),
            );
        }
        let mut clock = WaitClock::drain();
        // (completions seen, when): the last progress of the drain.
        let mut progress = (st.completed(), Duration::ZERO);
        while st.in_flight() > 0 {
            if let Err(e) = st.reap(|wcs| self.cq.poll(wcs)) {
                st.later().log(
                    log::Level::Error,
                    format_args!("polling while draining failed: {e}"),
                );
            }
            let Some(elapsed) = clock.tick() else {
                std::hint::spin_loop();
                continue;
            };
            if st.completed() != progress.0 {
                progress = (st.completed(), elapsed);
            } else if elapsed - progress.1 > FLUSH_PATIENCE || elapsed > DRAIN_LIMIT {
                break;
            }
            std::thread::yield_now();
        }
        if st.in_flight() > 0 {
            // Out of patience: discard by RESET.
            if let Err(e) = self.qp.reset() {
                crate::fatal::abort_with(format_args!(
                    "QP {} still has {} work requests in flight after being moved to the error \
                     state, and moving it to RESET failed ({e}); returning could let the NIC \
                     access released memory",
                    self.qp.qp_num(),
                    st.in_flight(),
                ));
            }
            // Completions the device made before the reset are still on the CQ.
            if let Err(e) = st.reap(|wcs| self.cq.poll(wcs)) {
                st.later().log(
                    log::Level::Error,
                    format_args!("polling after the reset failed: {e}"),
                );
            }
            let n = st.discard_in_flight();
            if n > 0 {
                st.later().log(
                    log::Level::Warn,
                    format_args!(
                        "QP {}: {n} work requests never completed after the move to the error \
                         state; the queue pair was reset, which discarded them",
                        self.qp.qp_num()
                    ),
                );
            }
        }
        guard.disarm();
    }

    /// A post of `op` failed with `e`. If `e` proves that nothing reached
    /// the queue, the error and `held` come back at once. Otherwise the
    /// request (`sq` send-queue entries, 0 for a receive; `held` its
    /// memory, if it owns any) is tracked, the channel shut down and
    /// everything drained or discarded, and only then do the error and the
    /// memory come back. See the module documentation.
    pub(super) fn post_failed(
        &self,
        st: &mut Tracker,
        op: Operation,
        len: usize,
        sq: u32,
        held: Held,
        e: PostError,
    ) -> (Error, Held) {
        if nothing_queued(&e) {
            return (post_error(op, e), held);
        }
        let notify = Notify::Claim;
        let id = st.track(op, len, sq, Attached { held, notify });
        self.settle_tracked(st, op, id..id + 1, &e);
        let held = st.forget(id);
        (post_error(op, e), held)
    }

    /// The requests of `ids`, tracked, may or may not be on the queue after
    /// `e`: shuts the channel down and drains or discards everything, so
    /// that each of them has its completion when this returns.
    #[cold]
    pub(super) fn settle_tracked(
        &self,
        st: &mut Tracker,
        op: Operation,
        ids: std::ops::Range<u64>,
        e: &PostError,
    ) {
        st.later().log(
            log::Level::Error,
            format_args!(
                "{e}: the provider did not say whether the {op} (work requests {ids:?}) reached \
             the queue; shutting the channel down"
            ),
        );
        self.shut_down(
            Some(st),
            &format!("posting a {op} failed ({e}) without saying what reached the queue"),
        );
    }
}

/// The error of a failed post of `op`.
fn post_error(op: Operation, e: PostError) -> Error {
    Error::Post {
        operation: op,
        source: e.into(),
    }
}
