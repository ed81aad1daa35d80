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

/// What a look at a request found, before anything is claimed (see
/// [`Tracker::look`]).
#[derive(Debug)]
pub(crate) enum Found {
    /// Still in flight, and the look's poll found nothing.
    Pending,
    /// Not tracked (never posted, or claimed already).
    Unknown,
    /// Completed, waiting in its slot at this position.
    Done(usize),
    /// In flight at this position when the look's poll found this many
    /// completions (none only for a look that leaves a waker).
    Polled(usize, usize),
    /// The poll failed.
    Failed(rdma_core::Error),
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

    /// Looks at `id` for a claim, polling once through `poll` if it is in
    /// flight: what was found, nothing claimed yet
    /// ([`claim_found`](Self::claim_found) does that). `leaves_waker`: the
    /// claimer leaves a waker if it is still in flight, so a poll that
    /// found nothing is [`Found::Polled`] too (the waker is left there).
    ///
    /// The answer a polling wait gets most often — in flight, nothing
    /// polled — costs a lookup, the poll and a comparison, and carries no
    /// outcome to move.
    #[inline(always)]
    pub(crate) fn look(
        &mut self,
        id: u64,
        poll: impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize>,
        leaves_waker: bool,
    ) -> Found {
        let Some(pos) = self.slots.position(id) else {
            return Found::Unknown;
        };
        if self.slots.at(pos).is_some_and(|s| s.done) {
            return Found::Done(pos);
        }
        match poll(&mut self.wcs[..]) {
            Ok(0) if !leaves_waker => Found::Pending,
            Ok(n) => Found::Polled(pos, n),
            Err(e) => Found::Failed(e),
        }
    }

    /// [`look`](Self::look) for a wait that spins on `id` alone, without a
    /// waker. `seen` is the count of completions seen at the wait's last
    /// look that found `id` in flight (`u64::MAX` before the first): while
    /// no completion was seen since, `id` is still in flight (only a
    /// completion seen ends a request), so an empty poll costs the poll and
    /// two comparisons, without looking `id` up. After claiming what this
    /// found, the wait sets `seen` to [`completed`](Self::completed).
    #[inline(always)]
    pub(crate) fn look_spin(
        &mut self,
        id: u64,
        seen: &mut u64,
        poll: impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize>,
    ) -> Found {
        if *seen != self.completed_total {
            let found = self.look(id, poll, false);
            if matches!(found, Found::Pending) {
                *seen = self.completed_total;
            }
            return found;
        }
        match poll(&mut self.wcs[..]) {
            Ok(0) => Found::Pending,
            Ok(n) => match self.slots.position(id) {
                Some(pos) => Found::Polled(pos, n),
                None => Found::Unknown,
            },
            Err(e) => Found::Failed(e),
        }
    }

    /// Claims what [`look`](Self::look) or [`look_spin`](Self::look_spin)
    /// found for `id`, with no other change to the tracker since: a
    /// completed request is taken; after a poll, its own completion (if
    /// polled) is read where it was polled (not copied into the slot and
    /// back out) and the others are delivered; still in flight, `waker`
    /// (if any) is left to be woken at the completion. A failed poll
    /// claims nothing (the caller shuts the queue pair down first).
    #[inline(always)]
    pub(crate) fn claim_found<R>(
        &mut self,
        id: u64,
        found: Found,
        waker: Option<&Waker>,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Take<R> {
        match found {
            Found::Pending | Found::Failed(_) => Take::Pending,
            Found::Unknown => Take::Unknown,
            Found::Done(pos) => self.take_at(pos, f),
            Found::Polled(pos, n) => self.polled(pos, id, n, waker, f),
        }
    }

    /// [`look`](Self::look) and [`claim_found`](Self::claim_found) in one:
    /// takes `id` if its completion was seen or is polled now.
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
        match self.look(id, poll, waker.is_some()) {
            Found::Failed(e) => Err(Error::Poll(e)),
            found => Ok(self.claim_found(id, found, waker, f)),
        }
    }

    /// [`look_spin`](Self::look_spin) and
    /// [`claim_found`](Self::claim_found) in one, `seen` kept as a
    /// spinning wait keeps it.
    ///
    /// # Errors
    /// As [`poll_take`](Self::poll_take).
    #[cfg(test)]
    pub(crate) fn spin_take<R>(
        &mut self,
        id: u64,
        seen: &mut u64,
        poll: impl FnOnce(&mut [WorkCompletion]) -> rdma_core::Result<usize>,
        f: impl FnOnce(Operation, usize, &WorkCompletion, &mut Held) -> R,
    ) -> Result<Take<R>> {
        match self.look_spin(id, seen, poll) {
            Found::Failed(e) => Err(Error::Poll(e)),
            Found::Pending => Ok(Take::Pending),
            found => {
                let taken = self.claim_found(id, found, None, f);
                *seen = self.completed_total;
                Ok(taken)
            }
        }
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
