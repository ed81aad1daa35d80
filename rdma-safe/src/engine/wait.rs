//! Waiting for completions: claiming one, the bounded wait, and the
//! shutdown that drains a queue pair when a wait expires.

use super::clock::WaitClock;
use super::tracker::Take;
use super::WorkQueue;
use crate::error::{Error, Operation, Result};
use crate::fatal::AbortOnUnwind;
use crate::work::WorkSuccess;
use rdma_core::QpState;
use std::time::Duration;

/// How often a waiting loop asks the device whether the queue pair broke
/// (its state). Async events that declare it broken are looked at on every
/// clock read; a queue pair moved to the error state flushes its requests,
/// whose completions end the wait anyway: the query is a backstop.
const STATE_QUERY_EVERY: Duration = Duration::from_millis(10);

impl WorkQueue {
    /// Takes the outcome of `id` if it has completed (polling the CQ once if
    /// not). `None` while still in flight; an error if `id` is unknown.
    ///
    /// Invariant: whenever this returns `Some`, `id` is no longer in flight.
    #[inline]
    pub(crate) fn try_take(&self, id: u64) -> Option<Result<WorkSuccess>> {
        let taken = self.lock().poll_take(
            id,
            |wcs| self.cq.poll(wcs),
            None,
            |op, len, wc, _| self.outcome(op, len, wc),
        );
        match taken {
            Ok(Take::Done(outcome)) => Some(outcome),
            Ok(Take::Pending) => None,
            Ok(Take::Unknown) => Some(Err(not_outstanding(id))),
            Err(e) => {
                // The CQ cannot be read, so completion of `id` cannot be
                // observed: shut the QP down and drain before reporting, so
                // that no outcome is ever returned while `id` is in flight.
                self.shutdown_and_drain(&format!("polling the CQ failed: {e}"));
                self.lock().forget(id);
                Some(Err(e))
            }
        }
    }

    /// How many of `ids` are still outstanding or unclaimed (one lock).
    pub(crate) fn count_tracked(&self, ids: &[u64]) -> usize {
        let st = self.lock();
        ids.iter().filter(|&&id| st.contains(id)).count()
    }

    /// Removes from `ids` ids no longer outstanding or unclaimed (one
    /// lock), keeping every id that is.
    pub(crate) fn retain_tracked(&self, ids: &mut Vec<u64>) {
        self.lock().retain_tracked(ids);
    }

    /// Whether `id` is still outstanding or unclaimed.
    pub(crate) fn is_tracked(&self, id: u64) -> bool {
        self.lock().contains(id)
    }

    /// Blocks until `id` completes and returns its outcome. If `timeout`
    /// passes first, shuts the QP down and drains every outstanding request
    /// before returning [`Error::Timeout`].
    ///
    /// Never unwinds: its callers rely on it returning only once `id` is
    /// complete, so a panic inside (e.g. from a logger) aborts the process.
    #[inline]
    pub(crate) fn wait(&self, id: u64, timeout: Duration) -> Result<WorkSuccess> {
        let guard = AbortOnUnwind("waiting for a completion");
        let outcome = self.wait_unguarded(id, timeout);
        guard.disarm();
        outcome
    }

    pub(super) fn wait_unguarded(&self, id: u64, timeout: Duration) -> Result<WorkSuccess> {
        // Fast path: already complete (the common case when a bandwidth loop
        // waits for its oldest request). No clock read: under virtualised
        // clock sources `Instant::now` costs microseconds.
        if let Some(outcome) = self.try_take(id) {
            return outcome;
        }
        // When to look at the clock: see `clock`.
        let mut clock = WaitClock::new(timeout, self.events);
        // When next to ask the device for the queue pair's state: a system
        // call (ibv_query_qp), so not at every clock read. On a slow link
        // (a 0.5 ms round trip between two emulated hosts) a busy wait
        // reads the clock once or twice per operation, and querying each
        // time put tens of microseconds on every round trip.
        let mut next_state_query = STATE_QUERY_EVERY;
        loop {
            if let Some(outcome) = self.try_take(id) {
                return outcome;
            }
            // No PAUSE (`spin_loop`) between polls: polling the CQ is the
            // loop's delay, as in perftest and rdma-core's examples (under
            // emulation PAUSE costs far more than a poll).
            let Some(elapsed) = clock.tick() else {
                continue;
            };
            let broken = if elapsed >= next_state_query {
                next_state_query = elapsed + STATE_QUERY_EVERY;
                self.broken()
            } else {
                self.watch.broken(self.qp.qp_num())
            };
            if let Some(why) = broken {
                // The device declared the QP broken or moved it to the error
                // state (the peer's access error, a retry failure): flush and
                // report now rather than wait out the timeout for work the
                // QP will never do.
                self.shutdown_and_drain(&why);
                return self.try_take(id).unwrap_or(Err(Error::Unusable(why)));
            }
            if elapsed >= timeout {
                let op = self.lock().operation_of(id).unwrap_or(Operation::Send);
                self.shutdown_and_drain(&format!("a {op} timed out after {timeout:?}"));
                // The request is now complete (flushed); forget it.
                self.lock().forget(id);
                return Err(Error::Timeout {
                    operation: op,
                    timeout,
                });
            }
            if self.events {
                // Arm the CQ, then poll once more before sleeping: a
                // completion that arrived between the last poll and arming
                // raises no event and would otherwise cost a whole slice.
                // (`events` is never set on a shared CQ: `own` is its CQ.)
                if let Some(cq) = self.cq.own().filter(|cq| cq.req_notify(false).is_ok()) {
                    if let Some(outcome) = self.try_take(id) {
                        return outcome;
                    }
                    let slice = (timeout - elapsed).min(Duration::from_millis(50));
                    let _ = cq.wait_event(Some(slice));
                }
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Waits for each of `ids` that is still tracked and removes it. Returns
    /// the failures. Never returns while any of them may still be in use by
    /// the NIC.
    pub(crate) fn drain_ids(&self, ids: &[u64], timeout: Duration) -> Vec<Error> {
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

    /// Why the device says the queue pair can no longer work, if it does:
    /// an async event declared it (or the device) fatal, or it is in the
    /// error state (one `ibv_query_qp`). Only for waits that have spun a
    /// while and for status queries, never per operation.
    pub(crate) fn broken(&self) -> Option<String> {
        if let Some(why) = self.watch.broken(self.qp.qp_num()) {
            return Some(why);
        }
        matches!(self.qp.state(), Ok(QpState::Error))
            .then(|| "the queue pair is in the error state".to_owned())
    }
}

/// The error of a claim of an id that is not tracked.
#[cold]
pub(super) fn not_outstanding(id: u64) -> Error {
    Error::Unusable(format!("work request {id} is not outstanding"))
}
