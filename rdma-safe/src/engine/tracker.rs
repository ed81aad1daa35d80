//! Completion tracking: which work request ids are outstanding, which have
//! completed and wait to be claimed, and what the completions say.

use super::attached::{Attached, Notify};
use crate::error::{Operation, TransportError, TransportResult};
use crate::work::WorkSuccess;
use rdma_core::{CompQueue, WcOpcode, WorkCompletion};
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
}

/// Slots of the outstanding and unclaimed requests, indexed by id. Ids are
/// handed out sequentially, so a ring whose front is the oldest tracked id
/// replaces a hash map: O(1) insert, lookup and (amortised) removal.
#[derive(Debug, Default)]
pub(crate) struct SlotRing {
    base: u64,
    ring: VecDeque<Option<Slot>>,
    live: usize,
}

impl SlotRing {
    fn index(&self, id: u64) -> Option<usize> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        (i < self.ring.len()).then_some(i)
    }
    fn insert(&mut self, id: u64, slot: Slot) {
        if self.ring.is_empty() {
            self.base = id;
        }
        debug_assert_eq!(id, self.base + self.ring.len() as u64, "ids are sequential");
        self.ring.push_back(Some(slot));
        self.live += 1;
    }
    /// `id` was handed out but is not tracked (its completion was seen
    /// before it was): leaves a hole, so that later ids keep their places.
    fn skip(&mut self, id: u64) {
        if !self.ring.is_empty() {
            debug_assert_eq!(id, self.base + self.ring.len() as u64, "ids are sequential");
            self.ring.push_back(None);
        }
    }
    pub(crate) fn get(&self, id: u64) -> Option<&Slot> {
        self.index(id).and_then(|i| self.ring[i].as_ref())
    }
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Slot> {
        self.index(id).and_then(|i| self.ring[i].as_mut())
    }
    pub(crate) fn contains_key(&self, id: u64) -> bool {
        self.get(id).is_some()
    }
    pub(crate) fn remove(&mut self, id: u64) -> Option<Slot> {
        let i = self.index(id)?;
        let slot = if i == 0 {
            // The oldest (the usual case): off the front, no hole left.
            self.base += 1;
            self.ring.pop_front().flatten()
        } else {
            self.ring[i].take()
        };
        if slot.is_some() {
            self.live -= 1;
        }
        while let Some(None) = self.ring.front() {
            self.ring.pop_front();
            self.base += 1;
        }
        slot
    }
    pub(crate) fn len(&self) -> usize {
        self.live
    }
}

/// The bookkeeping of one queue pair, behind the engine's lock.
#[derive(Debug)]
pub(crate) struct Tracker {
    pub(crate) next_wr_id: u64,
    pub(crate) slots: SlotRing,
    wcs: Box<[WorkCompletion; POLL_BATCH]>,
    /// Posted and not yet seen on the CQ.
    pub(crate) in_flight: usize,
    /// Send-queue entries in use, and the send queue's size.
    pub(crate) sq_in_flight: usize,
    pub(crate) sq_capacity: usize,
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
    pub(crate) room_waiters: Vec<Waker>,
}

impl Tracker {
    pub(crate) fn new(sq_capacity: usize) -> Self {
        Tracker {
            next_wr_id: 1,
            slots: SlotRing::default(),
            wcs: Box::new([WorkCompletion::default(); POLL_BATCH]),
            in_flight: 0,
            sq_in_flight: 0,
            sq_capacity,
            posted_total: 0,
            completed_total: 0,
            unusable: None,
            ready_callbacks: VecDeque::new(),
            abandoned_total: 0,
            progress_mark: None,
            room_waiters: Vec::new(),
        }
    }

    /// Records a request just posted with the next id: `sq` send-queue
    /// entries (0 for a receive).
    pub(crate) fn track(&mut self, op: Operation, len: usize, sq: u32) {
        self.track_attached(op, len, sq, Attached::default());
    }

    /// As [`track`](Self::track), the slot keeping `att` until the
    /// completion is seen.
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
        self.posted_total += u64::from(sq.max(1));
    }

    /// Wakes every task waiting on an outstanding request or for room.
    pub(crate) fn wake_all_waiters(&mut self) {
        for w in self.room_waiters.drain(..) {
            w.wake();
        }
        for slot in self.slots.ring.iter().flatten() {
            if let (false, Notify::Waker(w)) = (slot.done, &slot.att.notify) {
                w.wake_by_ref();
            }
        }
    }

    /// Moves available completions from `cq` into their slots.
    pub(crate) fn reap(&mut self, cq: &CompQueue) -> TransportResult<usize> {
        self.reap_claiming(cq, None).map(|(n, _)| n)
    }

    /// Posts made with the lock held can look for their completion before
    /// they are tracked: [`reap`](Self::reap), except that the completion
    /// of `claim` — the next id, just posted as one signaled request and not
    /// tracked — is not looked up in the slots but returned (and recorded as
    /// posted and completed). If it is not among the completions, the
    /// caller must track the request before releasing the lock.
    #[inline]
    pub(crate) fn reap_for_untracked(
        &mut self,
        cq: &CompQueue,
        op: Operation,
    ) -> TransportResult<Option<WorkCompletion>> {
        let claim = self.next_wr_id;
        let (_, found) = self.reap_claiming(cq, Some(claim))?;
        if let Some(wc) = &found {
            self.slots.skip(claim);
            self.next_wr_id += 1;
            self.posted_total += 1;
            self.completed_total += 1;
            if !wc.is_success() && self.unusable.is_none() {
                self.unusable = Some(format!("an earlier {op} failed with {}", wc.status()));
            }
        }
        Ok(found)
    }

    fn reap_claiming(
        &mut self,
        cq: &CompQueue,
        claim: Option<u64>,
    ) -> TransportResult<(usize, Option<WorkCompletion>)> {
        let mut claimed = None;
        let Tracker {
            wcs,
            slots,
            in_flight,
            sq_in_flight,
            completed_total,
            unusable,
            posted_total,
            ready_callbacks,
            abandoned_total,
            room_waiters,
            ..
        } = self;
        let got = cq.poll(&mut wcs[..]).map_err(TransportError::Poll)?;
        let n = got.len();
        // Up to `n` send-queue entries were freed: wake as many waiting
        // posters (not all of them: thousands may wait). One that is woken
        // but dropped passes its turn on (`WorkQueue::pass_room`).
        for _ in 0..n {
            match room_waiters.pop() {
                Some(w) => w.wake(),
                None => break,
            }
        }
        for wc in got.iter() {
            // Counts requests: a batch's last completion completes all of its
            // members (their own error completions are not counted again);
            // completions nobody posted are counted, so that tests asserting
            // "never more completions than posts" catch them.
            let raw_id = wc.wr_id();
            if Some(raw_id) == claim {
                claimed = Some(*wc);
                continue;
            }
            if raw_id & BATCH_MEMBER != 0 {
                // An earlier member of a batch reports an error or a flush:
                // remember the first, wait for the batch's last request.
                if let Some(slot) = slots.get_mut(raw_id & !BATCH_MEMBER).filter(|s| !s.done) {
                    if !wc.is_success() && !slot.member_failed {
                        slot.member_failed = true;
                        slot.wc = *wc;
                    }
                } else {
                    *completed_total += 1;
                    log::error!("unexpected batch completion {wc:?} (posted {posted_total})");
                }
                continue;
            }
            match slots.get_mut(raw_id) {
                Some(slot) if !slot.done => {
                    if !slot.member_failed {
                        slot.wc = *wc;
                    }
                    slot.done = true;
                    let sq = slot.sq;
                    *in_flight -= 1;
                    *sq_in_flight -= sq as usize;
                    *completed_total += u64::from(sq.max(1));
                    if !slot.wc.is_success() && unusable.is_none() {
                        *unusable = Some(format!(
                            "an earlier {} failed with {}",
                            slot.op,
                            slot.wc.status()
                        ));
                    }
                    match std::mem::take(&mut slot.att.notify) {
                        // Nobody will claim it: release what it kept (the
                        // NIC is done with it now) and forget it.
                        Notify::Abandoned => {
                            slots.remove(raw_id);
                            *abandoned_total += 1;
                        }
                        Notify::Waker(w) => w.wake(),
                        Notify::Callback(cb) => {
                            slot.att.notify = Notify::Callback(cb);
                            ready_callbacks.push_back(raw_id);
                        }
                        Notify::Claim => {}
                    }
                }
                // A completion nobody posted (or a second one for an id):
                // never expected; counted so tests can assert on it.
                _ => {
                    *completed_total += 1;
                    log::error!("unexpected completion {wc:?} (posted {posted_total})");
                }
            }
        }
        Ok((n, claimed))
    }

    pub(crate) fn outcome(
        op: Operation,
        len: usize,
        wc: &WorkCompletion,
    ) -> TransportResult<WorkSuccess> {
        if !wc.is_success() {
            return Err(TransportError::WorkCompletion {
                operation: op,
                status: wc.status(),
                vendor_err: wc.vendor_err(),
            });
        }
        let opcode = wc.opcode();
        let bytes = match opcode {
            WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => wc.byte_len() as usize,
            _ => len,
        };
        Ok(WorkSuccess {
            bytes,
            immediate: wc.imm_data(),
            opcode,
            wr_id: wc.wr_id(),
            source_qp: wc.src_qp(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted() -> Slot {
        Slot {
            op: Operation::Send,
            done: false,
            member_failed: false,
            sq: 1,
            len: 1,
            wc: WorkCompletion::default(),
            att: Attached::default(),
        }
    }

    #[test]
    fn slots_ring_tracks_out_of_order_removal() {
        let mut s = SlotRing::default();
        for id in 10..20 {
            s.insert(id, posted());
        }
        assert_eq!(s.len(), 10);
        assert!(s.contains_key(10) && s.contains_key(19));
        assert!(!s.contains_key(9) && !s.contains_key(20));
        // Remove in a different order than inserted.
        for id in [15, 19, 10, 12] {
            assert!(s.remove(id).is_some());
            assert!(s.remove(id).is_none(), "second removal of {id}");
        }
        assert_eq!(s.len(), 6);
        assert_eq!(s.base, 11, "front advanced past removed id 10 only");
        for id in [11, 13, 14, 16, 17, 18] {
            assert!(s.remove(id).is_some());
        }
        assert_eq!(s.len(), 0);
        assert!(s.ring.is_empty());
        // An id handed out but never tracked keeps the later ones in place.
        s.insert(20, posted());
        s.skip(21);
        s.insert(22, posted());
        assert!(s.contains_key(22) && !s.contains_key(21));
        assert!(s.remove(20).is_some() && s.remove(22).is_some());
        assert!(s.ring.is_empty());
        s.skip(23);
        assert!(s.ring.is_empty(), "nothing to keep in place");
        // Reusable after emptying, from a later id.
        s.insert(24, posted());
        assert!(s.contains_key(24));
        assert!(s.get_mut(24).is_some());
    }
}
