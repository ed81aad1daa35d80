//! A shared receive queue's side of the engine: posting its receives and
//! taking their completions, from the same completion source and through
//! the same wait loop ([`wait_for`]) as every queue pair's.
//!
//! What the receives write is the queue's own memory (its slots, which the
//! façade's `SrqShared` owns for as long as any attached queue pair lives),
//! never a user's: a receive that is given up on (a wait that times out)
//! leaves nothing of the user's in the NIC's hands, so an SRQ wait that
//! expires reports it and shuts nothing down — a quiet SRQ is not a broken
//! one, and its channels stay up.

use super::clock::WaitClock;
use super::wait::{wait_for, Expired};
use super::Completions;
use crate::error::{Error, Result};
use rdma_core::{CompQueue, PostError, RecvRequest, SharedReceiveQueue, WorkCompletion};
use std::collections::VecDeque;
use std::time::Duration;

/// Completions taken from the CQ per poll.
const POLL_BATCH: usize = 16;

/// A shared receive queue and the completion queue its receives complete
/// on.
#[derive(Debug)]
pub(crate) struct SrqQueue {
    srq: SharedReceiveQueue,
    cq: Completions,
    /// Sleep on the CQ's completion channel instead of spinning.
    events: bool,
}

/// Completions polled and not yet taken (the taker's own: one per
/// [`SharedReceiveQueue`](crate::SharedReceiveQueue) value).
#[derive(Debug)]
pub(crate) struct Polled {
    ready: VecDeque<WorkCompletion>,
    wcs: Box<[WorkCompletion; POLL_BATCH]>,
}

impl Default for Polled {
    fn default() -> Self {
        Polled {
            ready: VecDeque::new(),
            wcs: Box::new([WorkCompletion::default(); POLL_BATCH]),
        }
    }
}

impl SrqQueue {
    /// `srq`, whose receives complete on `cq` (with a completion channel
    /// when `cq` was made with one: waits then sleep on it).
    pub(crate) fn new(srq: SharedReceiveQueue, cq: CompQueue) -> Self {
        let events = cq.channel().is_some();
        SrqQueue {
            srq,
            cq: Completions::Own(cq),
            events,
        }
    }

    /// The verbs object, for attaching queue pairs and arming its limit.
    pub(crate) fn srq(&self) -> &SharedReceiveQueue {
        &self.srq
    }

    /// The completion queue, for the attached queue pairs' receive
    /// completions.
    pub(crate) fn cq(&self) -> &CompQueue {
        match &self.cq {
            Completions::Own(cq) => cq,
            Completions::Shared { cq, .. } => cq.cq(),
        }
    }

    /// Posts `reqs` as one list with one `ibv_post_srq_recv` call.
    ///
    /// # Safety
    /// Every SGE of `reqs` names memory that stays allocated, registered
    /// and never accessed as a plain Rust reference for as long as the
    /// shared receive queue or any queue pair attached to it lives (the
    /// NIC may write it until then).
    ///
    /// # Errors
    /// The verb's, saying how many of the list it took when it says.
    pub(crate) unsafe fn post(&self, reqs: &mut [RecvRequest<'_>]) -> Result<(), PostError> {
        // SAFETY: the caller's promise, above.
        unsafe { self.srq.post_recv_list(reqs) }
    }

    /// The next completion of any receive, waiting up to `timeout` for one
    /// (`None`: nothing arrived in time).
    ///
    /// # Errors
    /// [`Error::Poll`] when the completion queue cannot be read.
    pub(crate) fn next(
        &self,
        polled: &mut Polled,
        timeout: Duration,
    ) -> Result<Option<WorkCompletion>> {
        let mut failure = None;
        let take = || {
            if let Some(wc) = polled.ready.pop_front() {
                return Some(wc);
            }
            match self.cq.poll(&mut polled.wcs[..]) {
                Ok(n) => {
                    polled.ready.extend(polled.wcs[..n].iter().copied());
                    polled.ready.pop_front()
                }
                Err(e) => {
                    failure = Some(e);
                    // Ends the wait: the error is returned below.
                    Some(WorkCompletion::default())
                }
            }
        };
        // A queue of the crate's own memory breaks only with its device,
        // which the attached channels' waits report.
        let taken = wait_for(
            &self.cq,
            WaitClock::new(timeout, self.events),
            timeout,
            Duration::ZERO,
            self.events,
            take,
            |_, _| None,
        );
        if let Some(e) = failure {
            return Err(Error::Poll(e));
        }
        match taken {
            Ok(wc) => Ok(Some(wc)),
            Err(Expired::Timeout(_) | Expired::Broken(_)) => Ok(None),
        }
    }
}
