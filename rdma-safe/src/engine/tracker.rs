//! Completion tracking: which work request ids are outstanding, which have
//! completed and wait to be claimed, and what the completions say.

use crate::error::{Operation, TransportError, TransportResult};
use crate::work::WorkSuccess;
use rdma_core::{CompQueue, WcOpcode, WorkCompletion};
use std::collections::VecDeque;

/// Completions taken from the CQ per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;

/// Tag of the `wr_id` of every request of a batch but the last: their
/// completions (only ever errors or flushes, as they are unsignaled) are
/// recorded in the batch's slot but do not end it.
pub(crate) const BATCH_MEMBER: u64 = 1 << 63;

#[derive(Debug)]
pub(crate) enum Slot {
    /// In flight: `sq` send-queue entries; the first error reported by an
    /// earlier member of a batch.
    Posted {
        op: Operation,
        len: usize,
        sq: u32,
        first_err: Option<WorkCompletion>,
    },
    Done {
        op: Operation,
        len: usize,
        wc: WorkCompletion,
    },
}

impl Slot {
    pub(crate) fn operation(&self) -> Operation {
        match self {
            Slot::Posted { op, .. } | Slot::Done { op, .. } => *op,
        }
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
    pub(crate) fn get(&self, id: u64) -> Option<&Slot> {
        self.index(id).and_then(|i| self.ring[i].as_ref())
    }
    fn get_mut(&mut self, id: u64) -> Option<&mut Slot> {
        self.index(id).and_then(|i| self.ring[i].as_mut())
    }
    pub(crate) fn contains_key(&self, id: u64) -> bool {
        self.get(id).is_some()
    }
    pub(crate) fn remove(&mut self, id: u64) -> Option<Slot> {
        let i = self.index(id)?;
        let slot = self.ring[i].take();
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
        }
    }

    /// Records a request just posted with the next id: `sq` send-queue
    /// entries (0 for a receive).
    pub(crate) fn track(&mut self, op: Operation, len: usize, sq: u32) {
        let id = self.next_wr_id;
        self.next_wr_id += 1;
        self.slots.insert(
            id,
            Slot::Posted {
                op,
                len,
                sq,
                first_err: None,
            },
        );
        self.in_flight += 1;
        self.sq_in_flight += sq as usize;
        self.posted_total += u64::from(sq.max(1));
    }

    /// Moves available completions from `cq` into their slots.
    pub(crate) fn reap(&mut self, cq: &CompQueue) -> TransportResult<usize> {
        let Tracker {
            wcs,
            slots,
            in_flight,
            sq_in_flight,
            completed_total,
            unusable,
            posted_total,
            ..
        } = self;
        let got = cq.poll(&mut wcs[..]).map_err(TransportError::Poll)?;
        let n = got.len();
        for wc in got.iter() {
            // Counts requests: a batch's last completion completes all of its
            // members (their own error completions are not counted again);
            // completions nobody posted are counted, so that tests asserting
            // "never more completions than posts" catch them.
            let raw_id = wc.wr_id();
            if raw_id & BATCH_MEMBER != 0 {
                // An earlier member of a batch reports an error or a flush:
                // remember the first, wait for the batch's last request.
                if let Some(Slot::Posted { first_err, .. }) = slots.get_mut(raw_id & !BATCH_MEMBER)
                {
                    if !wc.is_success() && first_err.is_none() {
                        *first_err = Some(*wc);
                    }
                } else {
                    *completed_total += 1;
                    log::error!("unexpected batch completion {wc:?} (posted {posted_total})");
                }
                continue;
            }
            match slots.get_mut(raw_id) {
                Some(slot @ Slot::Posted { .. }) => {
                    let (op, len, sq, first_err) = match *slot {
                        Slot::Posted {
                            op,
                            len,
                            sq,
                            first_err,
                        } => (op, len, sq, first_err),
                        Slot::Done { .. } => unreachable!(),
                    };
                    let wc = first_err.unwrap_or(*wc);
                    *slot = Slot::Done { op, len, wc };
                    *in_flight -= 1;
                    *sq_in_flight -= sq as usize;
                    *completed_total += u64::from(sq.max(1));
                    if !wc.is_success() && unusable.is_none() {
                        *unusable = Some(format!("an earlier {op} failed with {}", wc.status()));
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
        Slot::Posted {
            op: Operation::Send,
            len: 1,
            sq: 1,
            first_err: None,
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
        // Reusable after emptying, from a later id.
        s.insert(21, posted());
        assert!(s.contains_key(21));
        assert!(s.get_mut(21).is_some());
    }
}
