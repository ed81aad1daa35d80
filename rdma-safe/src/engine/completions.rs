//! Where a queue pair's completions come from: a completion queue of its
//! own, or one shared with other queue pairs ([`SharedCq`]), polled by
//! whichever of them looks first.
//!
//! Sharing: every queue pair on a shared CQ has an inbox. A poll made for
//! one queue pair takes that pair's inbox first; only when it is empty
//! does it poll the CQ, keep the completions of its own pair and move every
//! other completion into its pair's inbox, where that pair's next poll
//! finds it. So any thread polling for any channel reaps for all of them
//! (one poller can serve many connections: per-core polling), and no
//! completion is lost or handed to the wrong channel.
//!
//! Locks: a queue pair's tracker lock is held while it polls, and the
//! shared CQ's lock is taken inside it, never the other way round; the
//! shared lock is never held while a tracker lock is taken. Waiting tasks
//! of another channel are not woken from here: a shared CQ carries no
//! completion events (refused at build), so every wait on one polls, and
//! its next poll finds what was put in its inbox.
//!
//! Sizing: the CQ must hold every request its queue pairs can have
//! outstanding (else the device drops completions or breaks the queue
//! pairs), so each queue pair reserves its depths when it joins and gives
//! them back when its [`Completions`] is dropped — after the queue pair
//! was destroyed, so nothing more can arrive for it.

use rdma_core::{CompChannel, CompQueue, WorkCompletion};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// A completion queue several queue pairs post to.
#[derive(Debug)]
pub(crate) struct SharedCq {
    cq: CompQueue,
    state: Mutex<Sharing>,
}

#[derive(Debug, Default)]
struct Sharing {
    /// Completions polled for another queue pair than the poller's, by
    /// queue pair number, oldest first.
    inboxes: HashMap<u32, VecDeque<WorkCompletion>>,
    /// CQ entries the joined queue pairs reserved.
    reserved: u32,
    /// Where a poll lands before being sorted.
    scratch: Vec<WorkCompletion>,
    /// Completions of queue pairs that are not (or no longer) joined:
    /// never expected, counted so that tests can say so.
    strays: u64,
}

impl SharedCq {
    pub(crate) fn new(cq: CompQueue) -> Self {
        SharedCq {
            cq,
            state: Mutex::new(Sharing::default()),
        }
    }

    pub(crate) fn cq(&self) -> &CompQueue {
        &self.cq
    }

    fn lock(&self) -> MutexGuard<'_, Sharing> {
        // Every update is a single insert or move: a panic elsewhere leaves
        // consistent state, so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// (entries reserved, queue pairs joined, stray completions).
    pub(crate) fn usage(&self) -> (u32, usize, u64) {
        let s = self.lock();
        (s.reserved, s.inboxes.len(), s.strays)
    }

    /// Reserves `entries` for a queue pair about to be created; the error
    /// text says why not.
    pub(crate) fn reserve(&self, entries: u32) -> Result<(), String> {
        let mut s = self.lock();
        let capacity = self.cq.capacity();
        match s.reserved.checked_add(entries) {
            Some(total) if total <= capacity => {
                s.reserved = total;
                Ok(())
            }
            _ => Err(format!(
                "the shared completion queue has {capacity} entries, {} of them reserved by the \
                 {} channels on it; this channel's queues need {entries} more",
                s.reserved,
                s.inboxes.len()
            )),
        }
    }

    /// Gives back a reservation of a queue pair that was not created.
    pub(crate) fn unreserve(&self, entries: u32) {
        let mut s = self.lock();
        s.reserved = s.reserved.saturating_sub(entries);
    }

    /// Joins the queue pair `qp_num` (its `entries` already reserved).
    pub(crate) fn join(self: &Arc<Self>, qp_num: u32, entries: u32) -> Completions {
        self.lock().inboxes.entry(qp_num).or_default();
        Completions::Shared {
            cq: self.clone(),
            qp_num,
            entries,
        }
    }

    /// Polls for `qp_num`: its inbox first, else the CQ (sorting what is
    /// not its own into the other inboxes). Fills a prefix of `out`.
    fn poll_for(&self, qp_num: u32, out: &mut [WorkCompletion]) -> rdma_core::Result<usize> {
        let mut s = self.lock();
        let s = &mut *s;
        if let Some(inbox) = s.inboxes.get_mut(&qp_num) {
            if !inbox.is_empty() {
                let n = inbox.len().min(out.len());
                for (slot, wc) in out.iter_mut().zip(inbox.drain(..n)) {
                    *slot = wc;
                }
                return Ok(n);
            }
        }
        s.scratch.resize(out.len(), WorkCompletion::default());
        let polled = self.cq.poll(&mut s.scratch)?;
        let mut n = 0;
        for wc in polled.iter() {
            if wc.qp_num() == qp_num {
                // `out` is as long as the poll, so the poller's own fit.
                out[n] = *wc;
                n += 1;
            } else if let Some(inbox) = s.inboxes.get_mut(&wc.qp_num()) {
                inbox.push_back(*wc);
            } else {
                s.strays += 1;
                log::error!("a completion for queue pair {} which is not on the shared completion queue: {wc:?}", wc.qp_num());
            }
        }
        Ok(n)
    }

    fn leave(&self, qp_num: u32, entries: u32) {
        let mut s = self.lock();
        if let Some(left) = s.inboxes.remove(&qp_num) {
            if !left.is_empty() {
                // The engine drains its queue pair before destroying it, so
                // nothing should be left; say so if something was.
                log::error!(
                    "queue pair {qp_num} left the shared completion queue with {} unclaimed completions",
                    left.len()
                );
            }
        }
        s.reserved = s.reserved.saturating_sub(entries);
    }
}

/// A queue pair's source of completions.
#[derive(Debug)]
pub(crate) enum Completions {
    /// Its own CQ (possibly with a completion channel).
    Own(CompQueue),
    /// A CQ shared with other queue pairs, polled through their inboxes.
    Shared {
        cq: Arc<SharedCq>,
        qp_num: u32,
        /// CQ entries reserved for this queue pair.
        entries: u32,
    },
}

impl Completions {
    /// Moves up to `out.len()` of this queue pair's completions into `out`;
    /// how many.
    #[inline(always)]
    pub(crate) fn poll(&self, out: &mut [WorkCompletion]) -> rdma_core::Result<usize> {
        match self {
            Completions::Own(cq) => Ok(cq.poll(out)?.len()),
            Completions::Shared { cq, qp_num, .. } => cq.poll_for(*qp_num, out),
        }
    }

    /// Which CQ the device names in its events about this one.
    pub(crate) fn cq_id(&self) -> rdma_core::CqId {
        match self {
            Completions::Own(cq) => cq.id(),
            Completions::Shared { cq, .. } => cq.cq().id(),
        }
    }

    /// The completion channel, if the CQ is this queue pair's own and has
    /// one.
    pub(crate) fn channel(&self) -> Option<&CompChannel> {
        match self {
            Completions::Own(cq) => cq.channel(),
            Completions::Shared { .. } => None,
        }
    }

    /// Arms the CQ: the next completion raises an event on its channel.
    /// Poll again after arming (and before sleeping): a completion that
    /// arrived before the arming raises none.
    ///
    /// # Errors
    /// The verb's; a shared CQ carries no completion events.
    pub(crate) fn arm(&self) -> crate::Result<()> {
        match self.own() {
            Some(cq) => cq.req_notify(false).map_err(crate::Error::Poll),
            None => Err(crate::Error::Poll(rdma_core::Error::InvalidArgument(
                "a shared completion queue carries no completion events".into(),
            ))),
        }
    }

    /// Whether the CQ is shared with other queue pairs.
    #[cfg(feature = "tokio")]
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Completions::Shared { .. })
    }

    /// The CQ, for arming and waiting on events: only a CQ of its own
    /// carries events (a shared one is refused events at build).
    pub(crate) fn own(&self) -> Option<&CompQueue> {
        match self {
            Completions::Own(cq) => Some(cq),
            Completions::Shared { .. } => None,
        }
    }
}

impl Drop for Completions {
    fn drop(&mut self) {
        if let Completions::Shared {
            cq,
            qp_num,
            entries,
        } = self
        {
            cq.leave(*qp_num, *entries);
        }
    }
}
