//! What the async side asks of the engine: a future's one question ("is my
//! operation done? if not, wake me when it is"), and one round of the
//! channel's completion driver, the single task that sleeps on the
//! completion channel and reaps.
//!
//! Reaping delivers each completion to its own slot and wakes that slot's
//! task only: one completion wakes one task. Nothing reaps inside a waker;
//! the driver reaps on its own task when the reactor wakes it.

use super::attached::Notify;
use super::owned::{Refused, Returned};
use super::WorkQueue;
use crate::work::{Held, OwnedKind};
use std::task::Waker;
use std::time::{Duration, Instant};

/// What the owner of an operation gives up on (a dropped future).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Abandon {
    /// A posted operation: its memory is released when its completion is
    /// seen (now, if it was seen already). Never before.
    Posted(u64),
    /// A wait for send-queue room (the ticket of its registration, if it
    /// has one): if the task was woken already, its turn goes to the next.
    Waiting(Option<u64>),
}

/// Polls of the CQ between clock reads while a wait spins
/// ([`SharedChannel::with_spin`](crate::SharedChannel::with_spin)).
const SPIN_POLLS_PER_CLOCK_READ: u32 = 256;

impl WorkQueue {
    /// A future's submission: posts `kind` over `held` with `slot_waker`
    /// (if any) to be woken at its completion (see `post_owned`), looking at the
    /// completion queue once under the same lock (the id, and the outcome
    /// if it completed already). With the send queue full, reaps once and
    /// tries again, then registers `room_waker` (if any) in the room list
    /// under `room` (renewing an earlier registration) and refuses with
    /// [`Refused::Full`]. Once posted, or refused for good, the task leaves
    /// the room list.
    pub(crate) fn submit(
        &self,
        kind: OwnedKind,
        held: Held,
        room_waker: Option<&Waker>,
        slot_waker: Option<&Waker>,
        room: &mut Option<u64>,
    ) -> Result<(u64, Option<Returned>), Refused> {
        let mut st = self.lock();
        // The waker is cloned only for a request that is tracked: one whose
        // completion the post's look already found comes back without it.
        // Without one the slot waits to be claimed by its future's polls.
        let notify = || slot_waker.map_or(Notify::Claim, |w| Notify::Waker(w.clone()));
        let mut outcome = self.post_owned_locked(&mut st, kind, held, notify, true);
        if let Err(Refused::Full(held)) = outcome {
            // Completions may be waiting to free entries.
            outcome = match st.reap(|wcs| self.cq.poll(wcs)) {
                Ok(n) if n > 0 => self.post_owned_locked(&mut st, kind, held, notify, true),
                _ => Err(Refused::Full(held)),
            };
        }
        match &outcome {
            Err(Refused::Full(_)) => {
                if let Some(waker) = room_waker {
                    st.wait_for_room(room, waker);
                }
            }
            Ok(_) => {
                if let Some(ticket) = room.take() {
                    // It used its turn.
                    st.leave_room_list(ticket);
                }
            }
            Err(Refused::Error(..)) => {
                if let Some(ticket) = room.take() {
                    st.pass_room_turn(Some(ticket));
                }
            }
        }
        outcome
    }

    /// The owner gives up on `what` (a dropped future, a dropped stream).
    pub(crate) fn abandon(&self, what: Abandon) {
        let mut st = self.lock();
        match what {
            Abandon::Posted(id) => st.abandon(id),
            Abandon::Waiting(ticket) => st.pass_room_turn(ticket),
        }
    }

    /// The outcome and memory of `id` if its completion was seen — reaping
    /// the CQ, and for up to `spin` polling it again, if not — or, still in
    /// flight, `None`, with `waker` (if any) registered to be woken by
    /// whoever reaps the completion.
    #[inline]
    pub(crate) fn poll_owned(
        &self,
        id: u64,
        waker: Option<&Waker>,
        spin: Duration,
    ) -> Option<Returned> {
        match self.take_owned(id, waker) {
            None if !spin.is_zero() => self.spin_for(id, spin),
            taken => taken,
        }
    }

    /// Polls the CQ for up to `spin` until `id` completes.
    #[cold]
    fn spin_for(&self, id: u64, spin: Duration) -> Option<Returned> {
        // The clock is read only after a run of polls, and once per run
        // after that: where the clock source is not the TSC (a VM's HPET) a
        // read costs microseconds, more than the wait for a short
        // operation, and reading it when the spin starts put one read on
        // every awaited operation. The spin may run one run of polls long.
        let mut start = None;
        loop {
            for _ in 0..SPIN_POLLS_PER_CLOCK_READ {
                if let Some(r) = self.take_owned(id, None) {
                    return Some(r);
                }
            }
            let now = Instant::now();
            if now.duration_since(*start.get_or_insert(now)) >= spin {
                return None;
            }
        }
    }

    /// One round of the completion driver: reaps (waking the tasks whose
    /// completions arrived, and as many waiting for send-queue room as
    /// entries were freed), runs the stall watchdog (no completion for
    /// `timeout` with work in flight shuts the queue pair down, which ends
    /// every outstanding operation), arms the CQ and reaps once more — a
    /// completion that arrived before the arming raises no event.
    ///
    /// `Some(deadline)`: sleep until the completion channel is readable or
    /// `deadline` passes. `None`: something arrived after the arming; go
    /// round again at once.
    pub(crate) fn drive_round(&self, timeout: Duration) -> Option<Instant> {
        if let Err(e) = self.reap_now() {
            log::warn!("reaping in the completion driver failed: {e}");
        }
        // Nothing in flight: wake up after `timeout` anyway, to start the
        // watchdog of work posted meanwhile (so a stalled operation is
        // noticed within twice the timeout at most).
        let deadline = self
            .stall_deadline(timeout)
            .unwrap_or_else(|| Instant::now() + timeout);
        if let Err(e) = self.arm() {
            log::warn!("arming the CQ failed ({e}); polling again shortly");
            return Some(Instant::now() + Duration::from_millis(1));
        }
        match self.reap_now() {
            Ok(n) if n > 0 => None,
            _ => Some(deadline),
        }
    }
}
