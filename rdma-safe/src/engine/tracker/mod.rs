//! Completion tracking: the bookkeeping of one queue pair, and nothing
//! else. Which work request ids are outstanding, what each one holds, which
//! have completed and wait to be claimed, and what the completions say.
//!
//! The tracker is pure: it calls no verb. The engine polls the completion
//! queue into the tracker's buffer ([`reap`](Tracker::reap) takes the poll
//! as a closure) and posts requests itself; the tracker only decides.
//! Its life cycle for one request:
//!
//! 1. admission — [`room_for`](Tracker::room_for) and
//!    [`unusable`](Tracker::unusable) say whether a post may go ahead, and
//!    [`next_id`](Tracker::next_id) is the id it carries;
//! 2. commit — [`track`](Tracker::track) records the posted request with
//!    what it holds (memory, who to tell);
//! 3. completion — [`reap`](Tracker::reap) records each completion polled,
//!    and [`finish`](Tracker::finish) is the one place that counts a
//!    request done (queue room freed, totals, the first failure);
//! 4. claim — [`take`](Tracker::take) hands the outcome and memory back
//!    and forgets the request; [`abandon`](Tracker::abandon) leaves its
//!    memory to be released at the completion;
//! 5. flush — [`discard_in_flight`](Tracker::discard_in_flight) ends what
//!    a reset removed from the queue without completions.
//!
//! Memory held by a request leaves the tracker only through a claim of a
//! completed request or [`Later`]'s release after its completion: never
//! while the NIC may still use it.

mod claim;
mod liveness;
#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;

use super::attached::{Attached, Notify};
use super::ending::Ending;
use super::later::Later;
use super::room::RoomWaiters;
use super::slots::SlotRing;
use crate::error::{Error, Operation, Result};
use crate::work::WorkSuccess;
use rdma_core::{WcOpcode, WcStatus, WorkCompletion};
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

pub(crate) use claim::{Found, Take};
pub(crate) use liveness::Keepalive;

/// Completions taken from the CQ per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;

/// Tag of the `wr_id` of every request of a batch but the last: their
/// completions (only ever errors or flushes, as they are unsignaled) are
/// recorded in the batch's slot but do not end it.
pub(crate) const BATCH_MEMBER: u64 = 1 << 63;

/// One tracked request. A flat record, not an enum of states: seeing the
/// completion flips `done` and stores the completion in place, without
/// moving the slot (the data path's most frequent update).
#[derive(Debug)]
struct Slot {
    op: Operation,
    /// The completion was seen: `wc` is the outcome, waiting to be claimed.
    done: bool,
    /// In flight: an earlier member of the batch failed, and `wc` is its
    /// completion (the first error reported).
    member_failed: bool,
    /// Send-queue entries the request uses (0: a receive).
    sq: u32,
    len: usize,
    wc: WorkCompletion,
    /// What an owning operation keeps until its completion is seen.
    att: Attached,
}

/// The tracker's counters, for tests and status queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counters {
    /// Send-queue entries and receives posted, in all.
    pub(crate) posted: u64,
    /// Of those, seen completed (or counted so: a batch's members with
    /// its last; a completion nobody posted, so that tests catch it).
    pub(crate) completed: u64,
    /// Requests posted and not yet seen on the CQ.
    pub(crate) in_flight: usize,
    /// Abandoned requests whose completions were seen and memory released.
    pub(crate) abandoned: u64,
    /// Requests tracked: in flight, or completed and not yet claimed.
    pub(crate) tracked: usize,
    /// Entries in the list of tasks waiting for send-queue room.
    pub(crate) room_waiters: usize,
}

/// The bookkeeping of one queue pair, behind the engine's lock.
#[derive(Debug)]
pub(crate) struct Tracker {
    next_wr_id: u64,
    slots: SlotRing<Slot>,
    /// Where the engine's polls land (see [`reap`](Self::reap)).
    wcs: Box<[WorkCompletion; POLL_BATCH]>,
    in_flight: usize,
    /// Send-queue entries in use, and the send queue's size.
    sq_in_flight: usize,
    sq_capacity: usize,
    /// Receives posted and not yet seen on the CQ, and the receive
    /// queue's size (the completion queue is sized for both queues full).
    rq_in_flight: usize,
    rq_capacity: usize,
    posted_total: u64,
    completed_total: u64,
    /// Why the queue pair no longer carries work, once it does not.
    unusable: Option<String>,
    /// Completed requests whose callbacks wait to be run, oldest first.
    ready_callbacks: VecDeque<u64>,
    abandoned_total: u64,
    /// (completions seen, since when): the progress watchdog of waits that
    /// have no timer of their own.
    progress_mark: Option<(u64, Instant)>,
    /// When a wait without a timer of its own last asked the device for
    /// the queue pair's state.
    state_looked: Option<Instant>,
    /// How long the queue pair may go without a completion before a
    /// keepalive probe is posted (`None`: never).
    keepalive: Option<Duration>,
    /// The probe in flight, if one is.
    probe: Option<u64>,
    /// (completions seen, since when): how long the queue pair has been
    /// quiet, for the keepalive.
    quiet_mark: Option<(u64, Instant)>,
    /// Why the queue pair was ended, shared with the engine: a probe the
    /// peer did not answer marks the peer gone when its completion is
    /// seen, before any later completion is claimed.
    ending: Arc<Ending>,
    /// Tasks waiting for room in the send queue.
    room_waiters: RoomWaiters,
    /// Wakers, memory and log lines for once the lock is released.
    later: Later,
}

impl Tracker {
    pub(crate) fn new(sq_capacity: usize, rq_capacity: usize) -> Self {
        Tracker {
            next_wr_id: 1,
            slots: SlotRing::default(),
            wcs: Box::new([WorkCompletion::default(); POLL_BATCH]),
            in_flight: 0,
            sq_in_flight: 0,
            sq_capacity,
            rq_in_flight: 0,
            rq_capacity,
            posted_total: 0,
            completed_total: 0,
            unusable: None,
            ready_callbacks: VecDeque::new(),
            abandoned_total: 0,
            progress_mark: None,
            state_looked: None,
            keepalive: None,
            probe: None,
            quiet_mark: None,
            ending: Arc::default(),
            room_waiters: RoomWaiters::default(),
            later: Later::default(),
        }
    }

    // ---- admission ----

    /// Room for `n` more requests in the send queue (`send`) or the
    /// receive queue. The completion queue is sized for both queues full,
    /// so what is admitted can never overflow it.
    #[inline]
    pub(crate) fn room_for(&self, send: bool, n: usize) -> bool {
        if send {
            self.sq_in_flight + n <= self.sq_capacity
        } else {
            self.rq_in_flight + n <= self.rq_capacity
        }
    }

    /// How many more receives the receive queue takes.
    pub(crate) fn receive_room(&self) -> usize {
        self.rq_capacity.saturating_sub(self.rq_in_flight)
    }

    /// (entries in use, size) of the send queue (`send`) or the receive
    /// queue.
    pub(crate) fn queue_use(&self, send: bool) -> (usize, usize) {
        if send {
            (self.sq_in_flight, self.sq_capacity)
        } else {
            (self.rq_in_flight, self.rq_capacity)
        }
    }

    /// Why the queue pair no longer carries work, if it does not.
    #[inline]
    pub(crate) fn unusable(&self) -> Option<&str> {
        self.unusable.as_deref()
    }

    /// Records why the queue pair stops carrying work, unless an earlier
    /// reason was recorded.
    pub(crate) fn mark_unusable(&mut self, why: &str) {
        if self.unusable.is_none() {
            self.unusable = Some(why.to_owned());
        }
    }

    /// The id the next tracked request gets.
    #[inline]
    pub(crate) fn next_id(&self) -> u64 {
        self.next_wr_id
    }

    // ---- commit ----

    /// Records a request just posted with [`next_id`](Self::next_id):
    /// `sq` send-queue entries (0 for a receive), keeping `att` until its
    /// completion is seen. Its id. Inlined: a plain request's empty
    /// attachment is then written in place.
    #[inline(always)]
    pub(crate) fn track(&mut self, op: Operation, len: usize, sq: u32, att: Attached) -> u64 {
        let id = self.next_wr_id;
        self.next_wr_id += 1;
        self.slots.insert(
            id,
            Slot {
                op,
                done: false,
                member_failed: false,
                sq,
                len,
                wc: WorkCompletion::default(),
                att,
            },
        );
        self.in_flight += 1;
        self.sq_in_flight += sq as usize;
        self.rq_in_flight += usize::from(sq == 0);
        self.posted_total += u64::from(sq.max(1));
        id
    }

    /// Replaces who learns of `id`'s completion, if it is still in flight
    /// (an owning batch sets it once its post's look found nothing).
    pub(crate) fn set_notify(&mut self, id: u64, notify: Notify) {
        if let Some(slot) = self.slots.get_mut(id).filter(|s| !s.done) {
            if let Notify::Waker(old) = std::mem::replace(&mut slot.att.notify, notify) {
                self.later.release(old);
            }
        }
    }

    // ---- completion ----

    /// Polls through `poll` (the engine's `ibv_poll_cq`, given the buffer
    /// to fill; how many it filled) and records each completion in its
    /// request's slot. How many were polled.
    #[inline]
    pub(crate) fn reap(
        &mut self,
        poll: impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize>,
    ) -> Result<usize> {
        self.reap_claiming(poll, None, &mut None)
    }

    /// Moves polled completions into their slots, except `claim`'s, whose
    /// index goes to `claimed`: it stays where it was polled (a completion
    /// is 48 bytes, and copying it is most of a delivery). Inlined into
    /// the waits: most polls of a spinning wait find nothing, and those
    /// cost the poll and a comparison.
    #[inline(always)]
    fn reap_claiming(
        &mut self,
        poll: impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize>,
        claim: Option<u64>,
        claimed: &mut Option<usize>,
    ) -> Result<usize> {
        let n = poll(&mut self.wcs[..]).map_err(Error::Poll)?;
        self.sort(n, claim, claimed);
        Ok(n)
    }

    /// Sorts the `n` completions just polled (see
    /// [`sort_polled`](Self::sort_polled)). The case a blocking operation
    /// meets most — one completion, the claimer's own, nobody waiting for
    /// room — is decided here, without the call.
    #[inline(always)]
    fn sort(&mut self, n: usize, claim: Option<u64>, claimed: &mut Option<usize>) {
        if n == 1 && claim == Some(self.wcs[0].wr_id()) && self.room_waiters.is_empty() {
            *claimed = Some(0);
        } else if n != 0 {
            self.sort_polled(n.min(POLL_BATCH), claim, claimed);
        }
    }

    #[inline(never)]
    fn sort_polled(&mut self, n: usize, claim: Option<u64>, claimed: &mut Option<usize>) {
        // Up to `n` send-queue entries were freed: wake as many waiting
        // posters (not all of them: thousands may wait). One that is woken
        // but dropped passes its turn on (`pass_room_turn`).
        if !self.room_waiters.is_empty() {
            self.room_waiters.wake(n, &mut self.later);
        }
        for k in 0..n {
            if Some(self.wcs[k].wr_id()) == claim {
                *claimed = Some(k);
                continue;
            }
            let wc = self.wcs[k];
            self.deliver(&wc);
        }
    }

    /// The one place that counts a request done: `sq` send-queue entries
    /// (0: a receive) freed, the totals, and the first failure, which makes
    /// the queue pair unusable. `tracked`: the request was counted in
    /// flight (one whose completion its own post found never was).
    #[inline]
    fn finish(&mut self, op: Operation, sq: u32, status: WcStatus, tracked: bool) {
        if tracked {
            self.in_flight -= 1;
            self.sq_in_flight -= sq as usize;
            self.rq_in_flight -= usize::from(sq == 0);
        } else {
            self.posted_total += u64::from(sq.max(1));
        }
        self.completed_total += u64::from(sq.max(1));
        if status != WcStatus::Success && self.unusable.is_none() {
            self.unusable = Some(format!("an earlier {op} failed with {status}"));
        }
    }

    /// Records the completion `wc` in its request's slot and tells whoever
    /// waits for it: a waker is moved to [`Later`], woken once the lock is
    /// released, so every completion of the poll is recorded before any
    /// user code runs.
    #[inline(always)]
    fn deliver(&mut self, wc: &WorkCompletion) {
        let raw_id = wc.wr_id();
        if raw_id & BATCH_MEMBER != 0 {
            // An earlier member of a batch reports an error or a flush:
            // remember the first, wait for the batch's last request.
            match self
                .slots
                .get_mut(raw_id & !BATCH_MEMBER)
                .filter(|s| !s.done)
            {
                Some(slot) => {
                    if !wc.is_success() && !slot.member_failed {
                        slot.member_failed = true;
                        slot.wc = *wc;
                    }
                }
                None => self.unexpected(wc),
            }
            return;
        }
        let Some(slot) = self.slots.get_mut(raw_id).filter(|s| !s.done) else {
            return self.unexpected(wc);
        };
        if !slot.member_failed {
            slot.wc = *wc;
        }
        slot.done = true;
        let (op, sq, status) = (slot.op, slot.sq, slot.wc.status());
        // Looked at in place: only a waker is taken out (to be consumed);
        // a claim or a callback stays where it is.
        match &mut slot.att.notify {
            // Claimed by id (blocking calls, scopes): the slot waits.
            Notify::Claim => {}
            Notify::Waker(_) => {
                if let Notify::Waker(w) = std::mem::take(&mut slot.att.notify) {
                    self.later.wake(w);
                }
            }
            Notify::Callback(_) => self.ready_callbacks.push_back(raw_id),
            // The engine's probe: nobody claims it; a failure says whether
            // the peer answered.
            Notify::Keepalive => {
                self.slots.remove(raw_id);
                self.probe = None;
                if status != WcStatus::Success && status != WcStatus::WrFlushError {
                    self.probe_failed(status);
                }
            }
            // Nobody will claim it: release what it kept (the NIC is done
            // with it now) and forget it.
            Notify::Abandoned => {
                if let Some(slot) = self.slots.remove(raw_id) {
                    self.later.release_held(slot.att.held);
                }
                self.abandoned_total += 1;
            }
        }
        self.finish(op, sq, status, true);
    }

    /// A completion nobody posted (or a second one for an id): never
    /// expected; counted so that tests asserting "never more completions
    /// than posts" catch it, and logged.
    #[cold]
    fn unexpected(&mut self, wc: &WorkCompletion) {
        self.completed_total += 1;
        self.later.log(
            log::Level::Error,
            format_args!(
                "unexpected completion {wc:?} (posted {})",
                self.posted_total
            ),
        );
    }

    /// Ends every request still in flight as flushed: for use only once the
    /// device can no longer touch their memory (the queue pair was moved to
    /// RESET, which discards queued requests without completions). Each
    /// waiter learns of it as of a real flush. How many there were.
    #[cold]
    pub(crate) fn discard_in_flight(&mut self) -> usize {
        let ids: Vec<u64> = self
            .slots
            .ids()
            .filter(|&id| self.slots.get(id).is_some_and(|s| !s.done))
            .collect();
        for &id in &ids {
            self.deliver(&WorkCompletion::synthetic(id, WcStatus::WrFlushError));
        }
        self.room_waiters.wake_all(&mut self.later);
        ids.len()
    }

    // ---- watchdog, counters, room list, later ----

    /// Requests posted and not yet seen on the CQ.
    #[inline]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Completions seen (see [`Counters::completed`]).
    #[inline]
    pub(crate) fn completed(&self) -> u64 {
        self.completed_total
    }

    pub(crate) fn counters(&self) -> Counters {
        Counters {
            posted: self.posted_total,
            completed: self.completed_total,
            in_flight: self.in_flight,
            abandoned: self.abandoned_total,
            // The engine's own probe is not the user's work.
            tracked: self.slots.len() - usize::from(self.probe.is_some()),
            room_waiters: self.room_waiters.len(),
        }
    }

    /// The task of `waker` waits for send-queue room (see
    /// [`RoomWaiters::register`]).
    pub(crate) fn wait_for_room(&mut self, ticket: &mut Option<u64>, waker: &Waker) {
        self.room_waiters.register(ticket, waker, &mut self.later);
    }

    /// The task of `ticket` leaves the room list, having used its turn.
    pub(crate) fn leave_room_list(&mut self, ticket: u64) {
        self.room_waiters.cancel(ticket, &mut self.later);
    }

    /// The task of `ticket` (if it registered) gives up waiting for room:
    /// if it was woken already, or never registered, its turn goes to the
    /// next task.
    pub(crate) fn pass_room_turn(&mut self, ticket: Option<u64>) {
        if ticket.is_none_or(|t| self.room_waiters.cancel(t, &mut self.later)) {
            self.room_waiters.wake(1, &mut self.later);
        }
    }

    /// What waits for the lock's release.
    #[inline]
    pub(crate) fn later(&mut self) -> &mut Later {
        &mut self.later
    }

    /// Nothing waits for the lock's release (the one test each release
    /// makes).
    #[inline]
    pub(crate) fn later_is_empty(&self) -> bool {
        self.later.is_empty()
    }

    // ---- outcomes ----

    /// What a successful completion reports (`len`: the request's bytes).
    #[inline(always)]
    pub(crate) fn success(len: usize, wc: &WorkCompletion) -> WorkSuccess {
        let opcode = wc.opcode();
        let bytes = match opcode {
            WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => wc.byte_len() as usize,
            _ => len,
        };
        WorkSuccess {
            bytes,
            immediate: wc.imm_data(),
            opcode,
            wr_id: wc.wr_id(),
            source_qp: wc.src_qp(),
        }
    }

    /// The error of a failed completion.
    #[cold]
    pub(crate) fn failure(op: Operation, wc: &WorkCompletion) -> Error {
        Error::WorkCompletion {
            operation: op,
            status: wc.status(),
            vendor_err: wc.vendor_err(),
        }
    }
}
