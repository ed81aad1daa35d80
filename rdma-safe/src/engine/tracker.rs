//! Completion tracking: which work request ids are outstanding, which have
//! completed and wait to be claimed, and what the completions say.

use super::attached::{Attached, Notify};
use super::later::Later;
use super::room::RoomWaiters;
use super::slots::SlotRing;
use super::Completions;
use crate::error::{Error, Operation, Result};
use crate::work::WorkSuccess;
use rdma_core::{WcOpcode, WcStatus, WorkCompletion};
use std::collections::VecDeque;
use std::task::Waker;

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
pub(crate) struct Slot {
    pub(crate) op: Operation,
    /// The completion was seen: `wc` is the outcome, waiting to be claimed.
    pub(crate) done: bool,
    /// In flight: an earlier member of the batch failed, and `wc` is its
    /// completion (the first error reported).
    member_failed: bool,
    /// Send-queue entries the request uses.
    sq: u32,
    pub(crate) len: usize,
    pub(crate) wc: WorkCompletion,
    /// What an owning operation keeps until its completion is seen.
    pub(crate) att: Attached,
}

impl Slot {
    pub(crate) fn operation(&self) -> Operation {
        self.op
    }

    /// The completion was not seen yet.
    pub(crate) fn posted(&self) -> bool {
        !self.done
    }

    /// Send-queue entries the request uses.
    pub(crate) fn sq(&self) -> u32 {
        self.sq
    }

    /// An earlier member of the batch failed (`wc` holds its completion).
    pub(crate) fn member_failed(&self) -> bool {
        self.member_failed
    }
}

/// The bookkeeping of one queue pair, behind the engine's lock.
#[derive(Debug)]
pub(crate) struct Tracker {
    pub(crate) next_wr_id: u64,
    pub(crate) slots: SlotRing<Slot>,
    wcs: Box<[WorkCompletion; POLL_BATCH]>,
    /// Posted and not yet seen on the CQ.
    pub(crate) in_flight: usize,
    /// Send-queue entries in use, and the send queue's size.
    pub(crate) sq_in_flight: usize,
    pub(crate) sq_capacity: usize,
    /// Receives posted and not yet seen on the CQ, and the receive
    /// queue's size (the completion queue is sized for both queues full).
    pub(crate) rq_in_flight: usize,
    pub(crate) rq_capacity: usize,
    pub(crate) posted_total: u64,
    pub(crate) completed_total: u64,
    /// Why the queue pair no longer carries work, once it does not.
    pub(crate) unusable: Option<String>,
    /// Completed requests whose callbacks wait to be run, oldest first.
    pub(crate) ready_callbacks: VecDeque<u64>,
    /// Completions of abandoned requests (their futures were dropped),
    /// released when seen.
    pub(crate) abandoned_total: u64,
    /// (completions seen, since when): the progress watchdog of waits that
    /// have no timer of their own.
    pub(crate) progress_mark: Option<(u64, std::time::Instant)>,
    /// Tasks waiting for room in the send queue.
    pub(crate) room_waiters: RoomWaiters,
    /// Wakers to wake or drop once the lock is released (see `later`).
    pub(crate) later: Later,
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
            room_waiters: RoomWaiters::default(),
            later: Later::default(),
        }
    }

    /// Admission: room for `n` more requests in the send queue (`send`) or
    /// the receive queue. The completion queue is sized for both queues
    /// full, so what is admitted can never overflow it.
    #[inline]
    pub(crate) fn room_for(&self, send: bool, n: usize) -> bool {
        if send {
            self.sq_in_flight + n <= self.sq_capacity
        } else {
            self.rq_in_flight + n <= self.rq_capacity
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
        if ticket.map_or(true, |t| self.room_waiters.cancel(t, &mut self.later)) {
            self.room_waiters.wake(1, &mut self.later);
        }
    }

    /// How many more receives the receive queue takes.
    pub(crate) fn receive_room(&self) -> usize {
        self.rq_capacity.saturating_sub(self.rq_in_flight)
    }

    /// Records a request just posted with the next id: `sq` send-queue
    /// entries (0 for a receive).
    pub(crate) fn track(&mut self, op: Operation, len: usize, sq: u32) {
        self.track_attached(op, len, sq, Attached::default());
    }

    /// As [`track`](Self::track), the slot keeping `att` until the
    /// completion is seen. Inlined: a plain request's empty attachment is
    /// then written in place, not built and passed by value.
    #[inline]
    pub(crate) fn track_attached(&mut self, op: Operation, len: usize, sq: u32, att: Attached) {
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
    }

    /// Moves available completions from `cq` into their slots.
    #[inline]
    pub(crate) fn reap(&mut self, cq: &Completions) -> Result<usize> {
        self.reap_claiming(cq, None, &mut None)
    }

    /// Posts made with the lock held can look for their completion before
    /// they are tracked: [`reap`](Self::reap), except that the completion
    /// of `claim` — the next id, just posted as one signaled request and not
    /// tracked — is not looked up in the slots but returned (and recorded as
    /// posted and completed). If it is not among the completions, or the
    /// CQ could not be read (the wait that follows sees that again and
    /// handles it), the caller must track the request before releasing the
    /// lock.
    #[inline]
    pub(crate) fn reap_for_untracked(
        &mut self,
        cq: &Completions,
        op: Operation,
    ) -> Option<WorkCompletion> {
        let claim = self.next_wr_id;
        let mut found = None;
        self.reap_claiming(cq, Some(claim), &mut found).ok()?;
        let wc = self.wcs[found?];
        self.slots.skip(claim);
        self.next_wr_id += 1;
        self.posted_total += 1;
        self.completed_total += 1;
        if !wc.is_success() && self.unusable.is_none() {
            self.unusable = Some(format!("an earlier {op} failed with {}", wc.status()));
        }
        Some(wc)
    }

    /// [`reap`](Self::reap), except that the completion of `id`, a tracked
    /// request still in flight, is not delivered into its slot but left
    /// where it was polled: its index (see
    /// [`slot_and_polled`](Self::slot_and_polled)), for its owner to end
    /// the request with
    /// [`WorkQueue::settle_claimed`](super::WorkQueue::settle_claimed)
    /// before releasing the lock (or reaping again). `None` if it was not
    /// among the completions.
    #[inline]
    pub(crate) fn reap_claim(&mut self, cq: &Completions, id: u64) -> Result<Option<usize>> {
        let mut claimed = None;
        self.reap_claiming(cq, Some(id), &mut claimed)?;
        Ok(claimed)
    }

    /// The slot at `pos` (see [`SlotRing::at_mut`]) and the `k`th
    /// completion of the last reap: a claimed completion read where it
    /// was polled.
    #[inline]
    pub(crate) fn slot_and_polled(
        &mut self,
        pos: usize,
        k: usize,
    ) -> Option<(&mut Slot, &WorkCompletion)> {
        Some((self.slots.at_mut(pos)?, &self.wcs[k]))
    }

    /// Moves available completions from `cq` into their slots, except
    /// `claim`'s, whose index goes to `claimed`. How many were polled.
    ///
    /// Inlined into the waits: most polls of a spinning wait find nothing,
    /// and those cost the provider's poll and a comparison, not a call
    /// with the sorting's frame (about 40 instructions a poll under
    /// callgrind).
    #[inline(always)]
    fn reap_claiming(
        &mut self,
        cq: &Completions,
        claim: Option<u64>,
        claimed: &mut Option<usize>,
    ) -> Result<usize> {
        let n = cq.poll(&mut self.wcs[..]).map_err(Error::Poll)?;
        if n != 0 {
            self.sort_polled(n, claim, claimed);
        }
        Ok(n)
    }

    /// Delivers the `n` completions just polled into `wcs`, except
    /// `claim`'s, whose index goes to `claimed`: it stays where it is (a
    /// completion is 48 bytes; each copy of one cost six vector loads and
    /// stores, dear under emulation).
    #[inline(never)]
    fn sort_polled(&mut self, n: usize, claim: Option<u64>, claimed: &mut Option<usize>) {
        // Up to `n` send-queue entries were freed: wake as many waiting
        // posters (not all of them: thousands may wait). One that is woken
        // but dropped passes its turn on (`WorkQueue::pass_room`).
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

    /// Records the completion `wc` in its request's slot and tells whoever
    /// waits for it: a waker is moved to [`Later`], woken once the lock is
    /// released, so every completion of the poll is recorded before any
    /// user code runs.
    #[inline]
    fn deliver(&mut self, wc: &WorkCompletion) {
        // Counts requests: a batch's last completion completes all of its
        // members (their own error completions are not counted again);
        // completions nobody posted are counted, so that tests asserting
        // "never more completions than posts" catch them.
        let raw_id = wc.wr_id();
        if raw_id & BATCH_MEMBER != 0 {
            // An earlier member of a batch reports an error or a flush:
            // remember the first, wait for the batch's last request.
            if let Some(slot) = self
                .slots
                .get_mut(raw_id & !BATCH_MEMBER)
                .filter(|s| !s.done)
            {
                if !wc.is_success() && !slot.member_failed {
                    slot.member_failed = true;
                    slot.wc = *wc;
                }
            } else {
                self.completed_total += 1;
                self.later.log(
                    log::Level::Error,
                    format_args!(
                        "unexpected batch completion {wc:?} (posted {})",
                        self.posted_total
                    ),
                );
            }
            return;
        }
        match self.slots.get_mut(raw_id) {
            Some(slot) if !slot.done => {
                if !slot.member_failed {
                    slot.wc = *wc;
                }
                slot.done = true;
                let sq = slot.sq;
                self.in_flight -= 1;
                self.sq_in_flight -= sq as usize;
                self.rq_in_flight -= usize::from(sq == 0);
                self.completed_total += u64::from(sq.max(1));
                if !slot.wc.is_success() && self.unusable.is_none() {
                    self.unusable = Some(format!(
                        "an earlier {} failed with {}",
                        slot.op,
                        slot.wc.status()
                    ));
                }
                // Looked at in place: only a waker is taken out (to be
                // consumed); a claim or a callback stays where it is.
                match &slot.att.notify {
                    // Claimed by id (blocking calls, scopes): the slot
                    // waits as it is.
                    Notify::Claim => {}
                    // Nobody will claim it: release what it kept (the
                    // NIC is done with it now) and forget it.
                    Notify::Abandoned => {
                        if let Some(slot) = self.slots.remove(raw_id) {
                            self.later.release_held(slot.att.held);
                        }
                        self.abandoned_total += 1;
                    }
                    Notify::Waker(_) => {
                        if let Notify::Waker(w) = std::mem::take(&mut slot.att.notify) {
                            self.later.wake(w);
                        }
                    }
                    Notify::Callback(_) => self.ready_callbacks.push_back(raw_id),
                }
            }
            // A completion nobody posted (or a second one for an id):
            // never expected; counted so tests can assert on it.
            _ => {
                self.completed_total += 1;
                self.later.log(
                    log::Level::Error,
                    format_args!(
                        "unexpected completion {wc:?} (posted {})",
                        self.posted_total
                    ),
                );
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn with_notify(notify: Notify) -> Attached {
        Attached {
            held: super::super::attached::Held::None,
            notify,
        }
    }

    fn success(id: u64) -> WorkCompletion {
        WorkCompletion::synthetic(id, WcStatus::Success)
    }

    #[test]
    fn admission_counts_each_queue_and_frees_room_on_completion() {
        let mut t = Tracker::new(4, 2);
        assert!(t.room_for(true, 4) && !t.room_for(true, 5));
        t.track(Operation::Write, 1, 3);
        assert!(
            t.room_for(true, 1) && !t.room_for(true, 2),
            "a batch of 3 holds 3"
        );
        t.track(Operation::Receive, 1, 0);
        t.track(Operation::Receive, 1, 0);
        assert!(!t.room_for(false, 1) && t.receive_room() == 0);
        assert!(t.room_for(true, 1), "receives do not use send-queue room");
        t.deliver(&success(2));
        assert_eq!(t.receive_room(), 1);
        t.deliver(&WorkCompletion::synthetic(1, WcStatus::WrFlushError));
        assert!(t.room_for(true, 4), "a failed batch frees all its entries");
    }

    #[test]
    fn completions_out_of_order_end_their_own_requests() {
        let mut t = Tracker::new(8, 8);
        t.track(Operation::Write, 10, 1);
        t.track(Operation::Receive, 20, 0);
        t.track(Operation::Read, 30, 1);
        assert_eq!((t.in_flight, t.sq_in_flight, t.rq_in_flight), (3, 2, 1));
        t.deliver(&success(3));
        t.deliver(&success(1));
        assert_eq!((t.in_flight, t.sq_in_flight, t.rq_in_flight), (1, 0, 1));
        assert!(t.slots.get(1).is_some_and(|s| s.done));
        assert!(t.slots.get(2).is_some_and(|s| !s.done));
        assert!(t.unusable.is_none());
        // A second completion for an id, and one nobody posted, are
        // counted (so "completions never outnumber posts" catches them)
        // and change nothing else.
        t.deliver(&success(1));
        t.deliver(&success(99));
        assert_eq!(t.completed_total, 4);
        assert_eq!(t.in_flight, 1);
    }

    #[test]
    fn a_batch_reports_its_first_failed_member() {
        let mut t = Tracker::new(8, 8);
        t.track(Operation::Write, 300, 3);
        let member = WorkCompletion::synthetic(1 | BATCH_MEMBER, WcStatus::RemoteAccessError);
        t.deliver(&member);
        assert_eq!(t.in_flight, 1, "a member does not end the batch");
        t.deliver(&WorkCompletion::synthetic(1, WcStatus::WrFlushError));
        let slot = t.slots.get(1).expect("the batch's slot");
        assert!(slot.done);
        assert_eq!(slot.wc.status(), WcStatus::RemoteAccessError);
        assert_eq!((t.sq_in_flight, t.completed_total), (0, 3));
        assert!(t.unusable.is_some(), "a failure makes the channel unusable");
    }

    #[test]
    fn waiters_are_told_and_abandoned_requests_released() {
        let mut t = Tracker::new(8, 8);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        t.track_attached(
            Operation::Send,
            1,
            1,
            with_notify(Notify::Waker(Waker::from(count.clone()))),
        );
        t.track_attached(Operation::Send, 1, 1, with_notify(Notify::Abandoned));
        t.track_attached(
            Operation::Send,
            1,
            1,
            with_notify(Notify::Callback(Box::new(|_, _| {}))),
        );
        for id in 1..=3 {
            t.deliver(&success(id));
        }
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "not woken under the lock"
        );
        assert_eq!(t.later.len(), 1, "the waker waits for the lock's release");
        t.later.run_now();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "one wake for one completion"
        );
        assert!(!t.slots.contains_key(2), "the abandoned slot is released");
        assert_eq!(t.abandoned_total, 1);
        assert_eq!(t.ready_callbacks, [3]);
    }

    #[test]
    fn discarding_ends_every_request_in_flight_as_flushed() {
        let mut t = Tracker::new(64, 64);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        // Enough ids to wrap the slot ring's first capacity.
        for k in 0..40u64 {
            let notify = match k % 3 {
                0 => Notify::Claim,
                1 => Notify::Waker(Waker::from(count.clone())),
                _ => Notify::Abandoned,
            };
            t.track_attached(
                Operation::Read,
                8,
                u32::from(k % 2 == 0),
                with_notify(notify),
            );
        }
        t.deliver(&success(5));
        let mut room = None;
        let t = &mut t;
        t.room_waiters
            .register(&mut room, &Waker::from(count.clone()), &mut t.later);
        assert_eq!(t.discard_in_flight(), 39);
        t.later.run_now();
        assert_eq!((t.in_flight, t.sq_in_flight, t.rq_in_flight), (0, 0, 0));
        for id in t.slots.ids() {
            let slot = t.slots.get(id).expect("tracked");
            assert!(slot.done);
            if id != 5 {
                assert_eq!(slot.wc.status(), WcStatus::WrFlushError, "id {id}");
            }
        }
        // 13 wakers among the discarded, and the task waiting for room.
        assert_eq!(count.0.load(Ordering::SeqCst), 14);
        assert!(t.room_waiters.is_empty());
        assert_eq!(t.posted_total, t.completed_total);
    }
}
