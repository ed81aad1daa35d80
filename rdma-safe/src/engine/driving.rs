//! What the async side asks of the engine: a future's one question ("is my
//! operation done? if not, wake me when it is"), and one round of the
//! channel's completion driver, the single task that sleeps on the
//! completion channel and reaps.
//!
//! Reaping delivers each completion to its own slot and wakes that slot's
//! task only: one completion wakes one task. Nothing reaps inside a waker;
//! the driver reaps on its own task when the reactor wakes it.

use super::attached::Notify;
use super::owned::Returned;
use super::tracker::Slot;
use super::WorkQueue;
use std::task::Waker;
use std::time::{Duration, Instant};

impl WorkQueue {
    /// The outcome and memory of `id` if its completion was seen — reaping
    /// the CQ, and for up to `spin` polling it again, if not — or, still in
    /// flight, `None`, with `waker` registered to be woken by whoever reaps
    /// the completion.
    #[inline]
    pub(crate) fn poll_owned(&self, id: u64, waker: &Waker, spin: Duration) -> Option<Returned> {
        let mut st = self.lock();
        if st.slots.get(id).is_some_and(Slot::posted) {
            if let Err(e) = st.reap(&self.cq) {
                drop(st);
                self.shutdown_and_drain(&format!("polling the CQ failed: {e}"));
                return self.take_owned(id, None);
            }
        }
        match st.slots.get_mut(id) {
            Some(slot) if slot.posted() => {
                match &mut slot.att.notify {
                    Notify::Waker(old) if old.will_wake(waker) => {}
                    n => *n = Notify::Waker(waker.clone()),
                }
                drop(st);
                if spin.is_zero() {
                    None
                } else {
                    self.spin_for(id, spin)
                }
            }
            Some(_) => self.returned(&mut st, id),
            None => self.take_owned(id, None),
        }
    }

    /// Polls the CQ for up to `spin` until `id` completes.
    #[cold]
    fn spin_for(&self, id: u64, spin: Duration) -> Option<Returned> {
        // The clock is read once per 64 polls (under emulation a read
        // costs more than a poll).
        let start = Instant::now();
        while start.elapsed() < spin {
            for _ in 0..64 {
                if let Some(r) = self.take_owned(id, None) {
                    return Some(r);
                }
            }
        }
        None
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
