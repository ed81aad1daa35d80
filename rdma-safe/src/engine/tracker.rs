//! Completion tracking: which work request ids are outstanding, which have
//! completed and wait to be claimed, and what the completions say.

use super::attached::{Attached, Notify};
use super::slots::SlotRing;
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
        for slot in self.slots.iter() {
            if let (false, Notify::Waker(w)) = (slot.done, &slot.att.notify) {
                w.wake_by_ref();
            }
        }
    }

    /// Moves available completions from `cq` into their slots.
    pub(crate) fn reap(&mut self, cq: &CompQueue) -> TransportResult<usize> {
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
        cq: &CompQueue,
        op: Operation,
    ) -> Option<WorkCompletion> {
        let claim = self.next_wr_id;
        let mut found = None;
        self.reap_claiming(cq, Some(claim), &mut found).ok()?;
        let wc = found?;
        self.slots.skip(claim);
        self.next_wr_id += 1;
        self.posted_total += 1;
        self.completed_total += 1;
        if !wc.is_success() && self.unusable.is_none() {
            self.unusable = Some(format!("an earlier {op} failed with {}", wc.status()));
        }
        Some(wc)
    }

    /// Moves available completions from `cq` into their slots, except
    /// `claim`'s, which goes to `claimed`. How many were polled.
    fn reap_claiming(
        &mut self,
        cq: &CompQueue,
        claim: Option<u64>,
        claimed: &mut Option<WorkCompletion>,
    ) -> TransportResult<usize> {
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
        if !room_waiters.is_empty() {
            for _ in 0..n {
                match room_waiters.pop() {
                    Some(w) => w.wake(),
                    None => break,
                }
            }
        }
        for wc in got.iter() {
            // Counts requests: a batch's last completion completes all of its
            // members (their own error completions are not counted again);
            // completions nobody posted are counted, so that tests asserting
            // "never more completions than posts" catch them.
            let raw_id = wc.wr_id();
            if Some(raw_id) == claim {
                *claimed = Some(*wc);
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
                    // Looked at in place: only a waker is taken out (to be
                    // consumed); a claim or a callback stays where it is.
                    match &slot.att.notify {
                        // Claimed by id (blocking calls, scopes): the slot
                        // waits as it is.
                        Notify::Claim => {}
                        // Nobody will claim it: release what it kept (the
                        // NIC is done with it now) and forget it.
                        Notify::Abandoned => {
                            slots.remove(raw_id);
                            *abandoned_total += 1;
                        }
                        Notify::Waker(_) => {
                            if let Notify::Waker(w) = std::mem::take(&mut slot.att.notify) {
                                w.wake();
                            }
                        }
                        Notify::Callback(_) => ready_callbacks.push_back(raw_id),
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
        Ok(n)
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
    pub(crate) fn failure(op: Operation, wc: &WorkCompletion) -> TransportError {
        TransportError::WorkCompletion {
            operation: op,
            status: wc.status(),
            vendor_err: wc.vendor_err(),
        }
    }
}
