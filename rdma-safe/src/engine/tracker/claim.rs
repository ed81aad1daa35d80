//! Claiming: how a request's outcome and memory leave the tracker. A
//! claim of a completed request removes it; a request still in flight can
//! only be abandoned (its memory released at the completion) or given a
//! waker.

use super::{Slot, Tracker, POLL_BATCH};
use crate::engine::attached::{Callback, Notify};
use crate::error::{Error, Operation, Result};
use crate::work::Held;
use rdma_core::WorkCompletion;
use std::task::Waker;

/// Where a claimed request stands.
#[derive(Debug)]
pub(crate) enum Take<R> {
    /// Completed: what the claim made of its outcome and memory.
    Done(R),
    /// Still in flight.
    Pending,
    /// Not tracked (never posted, or claimed already).
    Unknown,
}

/// A completed callback request, taken out of the tracker.
pub(crate) struct ReadyCallback {
    pub(crate) callback: Callback,
    pub(crate) op: Operation,
    pub(crate) len: usize,
    pub(crate) wc: WorkCompletion,
    pub(crate) held: Held,
}

impl Tracker {
    /// Takes `id` if its completion was seen: `f` makes what the claim
    /// returns of its operation, length and completion, taking its memory
    /// if it wants it, and the request is forgotten (memory `f` left is
    /// dropped with it).
    #[inline]
    pub(crate) fn take<R>(
        &mut self,
        id: u64,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Take<R> {
        let Some(pos) = self.slots.position(id) else {
            return Take::Unknown;
        };
        if self.slots.at(pos).is_some_and(|s| !s.done) {
            return Take::Pending;
        }
        // With its memory taken out (or none), a completed slot owns
        // nothing (its waker was consumed when the completion was seen):
        // it is then forgotten in place rather than dropped.
        self.take_at(pos, f)
    }

    /// [`take`](Self::take), polling once through `poll` first if `id` is
    /// in flight. Its own completion, if polled, is read where it was
    /// polled (not copied into the slot and back out). Still in flight
    /// after the poll: `waker` (if any) is left to be woken at the
    /// completion.
    ///
    /// # Errors
    /// The poll's: nothing was claimed, and `id`'s completion may never be
    /// seen (the engine shuts the queue pair down before claiming again).
    #[inline(always)]
    pub(crate) fn poll_take<R>(
        &mut self,
        id: u64,
        poll: impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize>,
        waker: Option<&Waker>,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Result<Take<R>> {
        // The path a spinning wait takes most often is the first branch
        // with an empty poll: a lookup, the poll, a comparison. Everything
        // else is out of line, so that the waits this is inlined into stay
        // small.
        let Some(pos) = self.slots.position(id) else {
            return Ok(Take::Unknown);
        };
        if !self.slots.at(pos).is_some_and(|s| s.done) {
            let n = match poll(&mut self.wcs[..]) {
                Ok(n) => n,
                Err(e) => return Err(Error::Poll(e)),
            };
            if n == 0 && waker.is_none() {
                return Ok(Take::Pending);
            }
            return Ok(self.polled(pos, id, n, waker, f));
        }
        Ok(self.take_at(pos, f))
    }

    /// [`poll_take`](Self::poll_take) for a wait that spins on `id`
    /// alone, without a waker. `seen` is the count of completions seen at
    /// the wait's last look that found `id` in flight (`u64::MAX` before
    /// the first): while no completion was seen since, `id` is still in
    /// flight (only a completion seen ends a request), so an empty poll
    /// costs the poll and two comparisons, without looking `id` up.
    #[inline(always)]
    pub(crate) fn spin_take<R>(
        &mut self,
        id: u64,
        seen: &mut u64,
        poll: impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize>,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Result<Take<R>> {
        if *seen != self.completed_total {
            let taken = self.poll_take(id, poll, None, f);
            *seen = self.completed_total;
            return taken;
        }
        let n = match poll(&mut self.wcs[..]) {
            Ok(n) => n,
            Err(e) => return Err(Error::Poll(e)),
        };
        if n == 0 {
            return Ok(Take::Pending);
        }
        Ok(self.spun(id, seen, n, f))
    }

    /// The rest of [`spin_take`](Self::spin_take) once its poll found `n`
    /// completions.
    #[inline(never)]
    fn spun<R>(
        &mut self,
        id: u64,
        seen: &mut u64,
        n: usize,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Take<R> {
        let taken = match self.slots.position(id) {
            Some(pos) => self.polled(pos, id, n, None, f),
            None => Take::Unknown,
        };
        *seen = self.completed_total;
        taken
    }

    /// [`take`](Self::take) of the request at `pos`, completed.
    #[inline(never)]
    fn take_at<R>(
        &mut self,
        pos: usize,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Take<R> {
        let r = self.slots.remove_plain_at(pos, |slot| {
            let r = f(slot.op, slot.len, &slot.wc, &mut slot.att.held);
            (r, slot.att.owns_nothing())
        });
        r.map_or(Take::Unknown, Take::Done)
    }

    /// The rest of [`poll_take`](Self::poll_take) once its poll of `n`
    /// completions returned: its own completion is claimed where it was
    /// polled (not copied into the slot and back out), the others are
    /// delivered; still in flight, `waker` (if any) is left to be woken at
    /// the completion.
    #[inline(never)]
    fn polled<R>(
        &mut self,
        pos: usize,
        id: u64,
        n: usize,
        waker: Option<&Waker>,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Take<R> {
        let mut claimed = None;
        self.sort(n, Some(id), &mut claimed);
        if let Some(k) = claimed {
            return self.settle_claimed(pos, k, waker, f);
        }
        if let Some(w) = waker {
            if let Some(slot) = self.slots.at_mut(pos) {
                slot.att.notify.set_waker(w, &mut self.later);
            }
        }
        Take::Pending
    }

    /// Ends the request at `pos` with the `k`th completion just polled,
    /// counting it as delivery would, and gives its outcome and memory to
    /// `f`. `current` is the claiming task's waker: the slot's own waker,
    /// if it wakes another task, is dropped only once the lock is released
    /// (that task may be gone, and this its last waker).
    #[inline]
    fn settle_claimed<R>(
        &mut self,
        pos: usize,
        k: usize,
        current: Option<&Waker>,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Take<R> {
        debug_assert!(k < POLL_BATCH);
        let Some(slot) = self.slots.at_mut(pos) else {
            return Take::Unknown;
        };
        // A batch reports its first failed member's completion.
        let wc = if slot.member_failed {
            &slot.wc
        } else {
            &self.wcs[k]
        };
        let (op, sq, status) = (slot.op, slot.sq, wc.status());
        let r = f(op, slot.len, wc, &mut slot.att.held);
        let foreign = match &slot.att.notify {
            Notify::Waker(w) if !current.is_some_and(|c| w.will_wake(c)) => {
                Some(std::mem::take(&mut slot.att.notify))
            }
            _ => None,
        };
        let plain = slot.att.owns_nothing();
        self.slots.clear_at(pos, plain);
        if let Some(Notify::Waker(w)) = foreign {
            self.later.release(w);
        }
        self.finish(op, sq, status, true);
        Take::Done(r)
    }

    /// For a post made under the lock that may have completed at once: the
    /// request with [`next_id`](Self::next_id), one signaled send-queue
    /// entry, posted and not yet tracked. Polls once through `poll`; if
    /// its completion is there, counts the request as posted and completed
    /// and returns what `f` makes of the completion. `None`: not there (or
    /// the poll failed, which the caller's wait sees again): the caller
    /// must [`track`](Self::track) it before releasing the lock.
    #[inline]
    pub(crate) fn reap_untracked<R>(
        &mut self,
        poll: impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize>,
        op: Operation,
        f: impl FnOnce(&WorkCompletion) -> R,
    ) -> Option<R> {
        let id = self.next_wr_id;
        let mut claimed = None;
        self.reap_claiming(poll, Some(id), &mut claimed).ok()?;
        let k = claimed?;
        self.slots.skip(id);
        self.next_wr_id += 1;
        let status = self.wcs[k].status();
        self.finish(op, 1, status, false);
        Some(f(&self.wcs[k]))
    }

    /// The owner gives up on `id`: its memory is released when its
    /// completion is seen (now, if it was seen already). Never before.
    pub(crate) fn abandon(&mut self, id: u64) {
        match self.slots.get_mut(id) {
            Some(slot) if !slot.done => {
                // The future's waker is dropped once the lock is
                // released: it may be its task's last.
                if let Notify::Waker(w) = std::mem::replace(&mut slot.att.notify, Notify::Abandoned)
                {
                    self.later.release(w);
                }
            }
            Some(_) => {
                if let Some(slot) = self.slots.remove(id) {
                    self.later.release_held(slot.att.held);
                }
                self.abandoned_total += 1;
            }
            None => {}
        }
    }

    /// Forgets `id` whatever its state, giving back what it held: only for
    /// a request the NIC is done with (completed, flushed or discarded).
    pub(crate) fn forget(&mut self, id: u64) -> Held {
        debug_assert!(self.slots.get(id).is_none_or(|s| s.done));
        self.slots.remove(id).map_or(Held::None, |s| s.att.held)
    }

    /// The next completed callback request, removed from the tracker.
    pub(crate) fn next_callback(&mut self) -> Option<ReadyCallback> {
        while let Some(id) = self.ready_callbacks.pop_front() {
            let is_ready = self
                .slots
                .get(id)
                .is_some_and(|s| s.done && matches!(s.att.notify, Notify::Callback(_)));
            if !is_ready {
                continue;
            }
            if let Some(Slot {
                op, len, wc, att, ..
            }) = self.slots.remove(id)
            {
                if let Notify::Callback(callback) = att.notify {
                    return Some(ReadyCallback {
                        callback,
                        op,
                        len,
                        wc,
                        held: att.held,
                    });
                }
            }
        }
        None
    }

    /// The operation of the tracked request `id`.
    pub(crate) fn operation_of(&self, id: u64) -> Option<Operation> {
        self.slots.get(id).map(|s| s.op)
    }

    /// Whether `id` is tracked (in flight, or completed and unclaimed).
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.slots.contains_key(id)
    }

    /// Removes from `ids` the ids that are not tracked, keeping every id
    /// that is (see [`SlotRing::forget_untracked`]).
    ///
    /// [`SlotRing::forget_untracked`]: crate::engine::slots::SlotRing::forget_untracked
    pub(crate) fn retain_tracked(&self, ids: &mut Vec<u64>) {
        self.slots.forget_untracked(ids);
    }
}
