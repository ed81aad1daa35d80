//! The completion bookkeeping shared by a channel, its pending work and its
//! scopes: which work request ids are outstanding, which have completed, and
//! the bounded wait that shuts the queue pair down when it expires.

use crate::error::{Operation, TransportError, TransportResult};
use crate::fatal::AbortOnUnwind;
use crate::work::WorkSuccess;
use rdma_core::{CompQueue, QueuePair, WcOpcode, WorkCompletion};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Completions taken from the CQ per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;
/// How long draining may take after the QP was moved to ERR before we
/// conclude the device is broken. Flush completions normally arrive at once.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Tag of the `wr_id` of every request of a batch but the last: their
/// completions (only ever errors or flushes, as they are unsignaled) are
/// recorded in the batch's slot but do not end it.
pub(crate) const BATCH_MEMBER: u64 = 1 << 63;

#[derive(Debug)]
enum Slot {
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

/// Slots of the outstanding and unclaimed requests, indexed by id. Ids are
/// handed out sequentially, so a ring whose front is the oldest tracked id
/// replaces a hash map: O(1) insert, lookup and (amortised) removal.
#[derive(Debug, Default)]
struct Slots {
    base: u64,
    ring: VecDeque<Option<Slot>>,
    live: usize,
}

impl Slots {
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
    fn get(&self, id: u64) -> Option<&Slot> {
        self.index(id).and_then(|i| self.ring[i].as_ref())
    }
    fn get_mut(&mut self, id: u64) -> Option<&mut Slot> {
        self.index(id).and_then(|i| self.ring[i].as_mut())
    }
    fn contains_key(&self, id: u64) -> bool {
        self.get(id).is_some()
    }
    fn remove(&mut self, id: u64) -> Option<Slot> {
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
    fn len(&self) -> usize {
        self.live
    }
}

#[derive(Debug)]
pub(crate) struct PollState {
    next_wr_id: u64,
    slots: Slots,
    wcs: Box<[WorkCompletion; POLL_BATCH]>,
    /// Posted and not yet seen on the CQ.
    in_flight: usize,
    /// Send-queue entries in use, and the send queue's size.
    sq_in_flight: usize,
    sq_capacity: usize,
    posted_total: u64,
    completed_total: u64,
    unusable: Option<String>,
}

impl PollState {
    /// Records a request just posted with the next id: `sq` send-queue
    /// entries (0 for a receive).
    fn track(&mut self, op: Operation, len: usize, sq: u32) {
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
}

/// State shared by a [`Channel`](crate::Channel) and everything that waits on
/// its work. Owns the queue pair (which keeps the CQ and PD alive).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) qp: QueuePair,
    pub(crate) cq: CompQueue,
    pub(crate) events: bool,
    state: Mutex<PollState>,
}

/// What the caller of [`Shared::post`] does with the id it is given.
pub(crate) type PostFn<'a> = &'a mut dyn FnMut(u64) -> rdma_core::Result<()>;

impl Shared {
    pub(crate) fn new(qp: QueuePair, cq: CompQueue, events: bool) -> Self {
        let sq_capacity = qp.capabilities().max_send_wr as usize;
        Shared {
            qp,
            cq,
            events,
            state: Mutex::new(PollState {
                next_wr_id: 1,
                slots: Slots::default(),
                wcs: Box::new([WorkCompletion::default(); POLL_BATCH]),
                in_flight: 0,
                sq_in_flight: 0,
                sq_capacity,
                posted_total: 0,
                completed_total: 0,
                unusable: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PollState> {
        // A panic while holding the lock leaves consistent state (every
        // update is a single insert/remove), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Posts work through `post`, which receives the id to use: one request,
    /// or a batch of `sq` send-queue requests of which only the last is
    /// signaled (and carries the id; the others carry `id | BATCH_MEMBER`).
    /// `sq` is 0 for receives. A batch that would overflow the send queue is
    /// refused before anything is posted.
    pub(crate) fn post(
        &self,
        op: Operation,
        len: usize,
        sq: u32,
        post: PostFn<'_>,
    ) -> TransportResult<u64> {
        let mut st = self.lock();
        if let Some(why) = &st.unusable {
            return Err(TransportError::Unusable(why.clone()));
        }
        if sq > 1 && st.sq_in_flight + sq as usize > st.sq_capacity {
            return Err(TransportError::Post {
                operation: op,
                source: rdma_core::Error::InvalidArgument(format!(
                    "a batch of {sq} requests does not fit the send queue ({} of {} entries in use)",
                    st.sq_in_flight, st.sq_capacity
                )),
            });
        }
        let id = st.next_wr_id;
        post(id).map_err(|source| TransportError::Post {
            operation: op,
            source,
        })?;
        st.track(op, len, sq);
        Ok(id)
    }

    /// Posts receives as one list through `post`, which is given the id of
    /// the first (the others follow it, one apart) and returns how many it
    /// posted and, if not all of `lens`, why it stopped. Every receive that
    /// was posted is tracked, whether or not the list was posted whole; the
    /// returned range names them.
    pub(crate) fn post_receives(
        &self,
        lens: &[usize],
        post: &mut dyn FnMut(u64) -> (usize, rdma_core::Result<()>),
    ) -> (Range<u64>, TransportResult<()>) {
        let mut st = self.lock();
        if let Some(why) = &st.unusable {
            return (0..0, Err(TransportError::Unusable(why.clone())));
        }
        let first = st.next_wr_id;
        let (posted, rc) = post(first);
        for &len in &lens[..posted.min(lens.len())] {
            st.track(Operation::Receive, len, 0);
        }
        let end = st.next_wr_id;
        let rc = rc.map_err(|source| TransportError::Post {
            operation: Operation::Receive,
            source,
        });
        (first..end, rc)
    }

    /// Moves available completions from the CQ into their slots.
    fn reap(&self, st: &mut PollState) -> TransportResult<usize> {
        let PollState {
            wcs,
            slots,
            in_flight,
            sq_in_flight,
            completed_total,
            unusable,
            posted_total,
            ..
        } = st;
        let got = self.cq.poll(&mut wcs[..]).map_err(TransportError::Poll)?;
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

    fn outcome(op: Operation, len: usize, wc: &WorkCompletion) -> TransportResult<WorkSuccess> {
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
        })
    }

    /// Takes the outcome of `id` if it has completed (polling the CQ once if
    /// not). `None` while still in flight. Errors if `id` is unknown.
    ///
    /// Invariant: whenever this returns `Some`, `id` is no longer in flight.
    pub(crate) fn try_take(&self, id: u64) -> Option<TransportResult<WorkSuccess>> {
        let mut st = self.lock();
        if let Some(Slot::Posted { .. }) = st.slots.get(id) {
            if let Err(e) = self.reap(&mut st) {
                // The CQ cannot be read, so completion of `id` cannot be
                // observed: shut the QP down and drain before reporting, so
                // that no outcome is ever returned while `id` is in flight.
                drop(st);
                self.shutdown_and_drain(&format!("polling the CQ failed: {e}"));
                self.lock().slots.remove(id);
                return Some(Err(e));
            }
        }
        match st.slots.get(id) {
            Some(Slot::Posted { .. }) => None,
            Some(Slot::Done { .. }) => match st.slots.remove(id) {
                Some(Slot::Done { op, len, wc }) => Some(Self::outcome(op, len, &wc)),
                _ => unreachable!(),
            },
            None => Some(Err(TransportError::Unusable(format!(
                "work request {id} is not outstanding"
            )))),
        }
    }

    /// How many of `ids` are still outstanding or unclaimed (one lock).
    pub(crate) fn count_tracked(&self, ids: &[u64]) -> usize {
        let st = self.lock();
        ids.iter().filter(|&&id| st.slots.contains_key(id)).count()
    }

    /// Removes from `ids` those no longer outstanding or unclaimed (one lock).
    pub(crate) fn retain_tracked(&self, ids: &mut Vec<u64>) {
        let st = self.lock();
        ids.retain(|&id| st.slots.contains_key(id));
    }

    /// Whether `id` is still outstanding or unclaimed.
    pub(crate) fn is_tracked(&self, id: u64) -> bool {
        self.lock().slots.contains_key(id)
    }

    /// Blocks until `id` completes and returns its outcome. If `timeout`
    /// passes first, shuts the QP down and drains every outstanding request
    /// before returning [`TransportError::Timeout`].
    ///
    /// Never unwinds: its callers rely on it returning only once `id` is
    /// complete, so a panic inside (e.g. from a logger) aborts the process.
    #[inline]
    pub(crate) fn wait(&self, id: u64, timeout: Duration) -> TransportResult<WorkSuccess> {
        let guard = AbortOnUnwind("waiting for a completion");
        let outcome = self.wait_unguarded(id, timeout);
        guard.disarm();
        outcome
    }

    fn wait_unguarded(&self, id: u64, timeout: Duration) -> TransportResult<WorkSuccess> {
        // Fast path: already complete (the common case when a bandwidth loop
        // waits for its oldest request). No clock read: under virtualised
        // clock sources `Instant::now` costs microseconds.
        if let Some(outcome) = self.try_take(id) {
            return outcome;
        }
        // The clock is read lazily and rarely: once a wait has spun a while
        // (every 16384 polls when busy polling — a few milliseconds at most,
        // fine for a timeout measured in seconds —, every 64 when sleeping
        // on events). Where the clock source is not the TSC (a VM's HPET, as
        // on rxe under qemu) a read is a system call and an emulated device
        // access: 3.4 us each in that guest. Read every 1024 polls, a wait
        // of a few hundred microseconds paid for several of them.
        let mut start: Option<Instant> = None;
        let check_every: u32 = if self.events { 64 } else { 1 << 14 };
        let mut spins: u32 = 0;
        loop {
            if let Some(outcome) = self.try_take(id) {
                return outcome;
            }
            spins = spins.wrapping_add(1);
            if spins % check_every != 0 {
                // No PAUSE (`spin_loop`) here: polling the CQ is the loop's
                // delay, as in perftest and rdma-core's examples. Under
                // emulation PAUSE leaves translated code on every call;
                // profiled on rxe under TCG, it took half the process's time
                // and cut the poll rate about tenfold.
                continue;
            }
            let start = *start.get_or_insert_with(Instant::now);
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                let op = match self.lock().slots.get(id) {
                    Some(Slot::Posted { op, .. } | Slot::Done { op, .. }) => *op,
                    None => Operation::Send,
                };
                self.shutdown_and_drain(&format!("a {op} timed out after {timeout:?}"));
                // The request is now complete (flushed); forget it.
                self.lock().slots.remove(id);
                return Err(TransportError::Timeout {
                    operation: op,
                    timeout,
                });
            }
            if self.events {
                // Arm the CQ, then poll once more before sleeping: a
                // completion that arrived between the last poll and arming
                // raises no event and would otherwise cost a whole slice.
                if self.cq.req_notify(false).is_ok() {
                    if let Some(outcome) = self.try_take(id) {
                        return outcome;
                    }
                    let slice = (timeout - elapsed).min(Duration::from_millis(50));
                    let _ = self.cq.wait_event(Some(slice));
                }
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Waits for each of `ids` that is still tracked and removes it. Returns
    /// the failures. Never returns while any of them may still be in use by
    /// the NIC.
    pub(crate) fn drain_ids(&self, ids: &[u64], timeout: Duration) -> Vec<TransportError> {
        let mut errors = Vec::new();
        for &id in ids {
            if !self.is_tracked(id) {
                continue;
            }
            if let Err(e) = self.wait(id, timeout) {
                errors.push(e);
            }
        }
        errors
    }

    /// Moves the QP to ERR and polls until nothing is in flight, marking the
    /// channel unusable with `why`. Flushed requests stay claimable.
    ///
    /// If the device never flushes (it is dead), returning would let the NIC
    /// write memory Rust considers free again, so the process aborts instead.
    pub(crate) fn shutdown_and_drain(&self, why: &str) {
        let guard = AbortOnUnwind("draining a queue pair");
        self.shutdown_and_drain_unguarded(why);
        guard.disarm();
    }

    fn shutdown_and_drain_unguarded(&self, why: &str) {
        let mut st = self.lock();
        if st.unusable.is_none() {
            st.unusable = Some(why.to_owned());
        }
        if let Err(e) = self.qp.to_error() {
            log::error!("moving QP {} to ERR failed: {e}", self.qp.qp_num());
        }
        let start = Instant::now();
        while st.in_flight > 0 {
            if let Err(e) = self.reap(&mut st) {
                log::error!("polling while draining failed: {e}");
            }
            if start.elapsed() > DRAIN_LIMIT {
                crate::fatal::abort_with(format_args!(
                    "QP {} still has {} work requests in flight {:?} after being moved to the error \
                     state; the device is not flushing, and returning could let the NIC access \
                     released memory",
                    self.qp.qp_num(),
                    st.in_flight,
                    DRAIN_LIMIT
                ));
            }
            std::hint::spin_loop();
        }
    }

    /// Counters: (posted, completed, in flight, tracked slots).
    pub(crate) fn counters(&self) -> (u64, u64, usize, usize) {
        let st = self.lock();
        (
            st.posted_total,
            st.completed_total,
            st.in_flight,
            st.slots.len(),
        )
    }

    pub(crate) fn unusable(&self) -> Option<String> {
        self.lock().unusable.clone()
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
        let mut s = Slots::default();
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
