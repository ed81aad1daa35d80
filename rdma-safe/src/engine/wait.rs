//! Completing: claiming a request's outcome (and memory), the one wait
//! loop every blocking wait runs, the no-reactor futures' spin, and the
//! completion driver's rounds with their stall watchdog.
//!
//! Reaping delivers each completion to its own slot and wakes that slot's
//! task only: one completion wakes one task. Nothing reaps inside a waker;
//! the driver reaps on its own task when the reactor wakes it.

use super::clock::{self, WaitClock, SPIN_EVERY};
use super::owned::Returned;
use super::tracker::Take;
use super::Completions;
use super::WorkQueue;
use crate::error::{Error, Operation, Result};
use crate::fatal::AbortOnUnwind;
use crate::work::{Held, WorkSuccess};
use rdma_core::QpState;
use std::sync::atomic::Ordering;
use std::task::Waker;
use std::time::{Duration, Instant};

/// How often a waiting loop asks the device whether the queue pair broke
/// (its state). Async events that declare it broken are looked at on every
/// clock read; a queue pair moved to the error state flushes its requests,
/// whose completions end the wait anyway: the query is a backstop.
const STATE_QUERY_EVERY: Duration = Duration::from_millis(10);

/// The longest one sleep on completion events lasts before the wait looks
/// at its clock again.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

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

/// Why a wait ended without what it waited for.
pub(super) enum Expired {
    /// The device declared the queue (pair) broken.
    Broken(String),
    /// The wait's timeout passed (waiting for this operation).
    Timeout(Operation),
}

/// How a claim looks for a request still in flight.
enum Look<'a> {
    /// Polls once, leaving the waker (if any) to be woken at the completion.
    Once(Option<&'a Waker>),
    /// One poll of a wait spinning on it, with the count of completions the
    /// wait saw at its last look (see `Tracker::spin_take`).
    Spin(&'a mut u64),
}

/// The one wait loop of the engine: calls `take` (which polls `cq` and
/// claims) until it yields. The clock is read at [`WaitClock`]'s cadence;
/// at each read `broken` (given the time waited and the time read) may
/// end the wait, and so
/// does the timeout; after `spin` the loop sleeps on completion events
/// (`events`, arming the CQ and taking once more first: a completion that
/// arrived before the arming raises none) or yields the thread. No PAUSE
/// between polls: polling the CQ is the loop's delay, as in perftest and
/// rdma-core's examples.
#[inline(always)]
pub(super) fn wait_for<R>(
    cq: &Completions,
    timeout: Duration,
    spin: Duration,
    events: bool,
    mut take: impl FnMut() -> Option<R>,
    mut broken: impl FnMut(Duration, Instant) -> Option<String>,
) -> Result<R, Expired> {
    let mut clock = WaitClock::new(timeout, events);
    loop {
        if let Some(r) = take() {
            return Ok(r);
        }
        let Some(elapsed) = clock.tick() else {
            continue;
        };
        if let Some(why) = broken(elapsed, clock.at(elapsed)) {
            return Err(Expired::Broken(why));
        }
        if elapsed >= timeout {
            return Err(Expired::Timeout(Operation::Receive));
        }
        if elapsed < spin {
            continue;
        }
        // (`events` is never set on a shared CQ: `own` is its CQ.)
        match cq.own().filter(|cq| events && cq.req_notify(false).is_ok()) {
            Some(cq) => {
                if let Some(r) = take() {
                    return Ok(r);
                }
                let _ = cq.wait_event(Some((timeout - elapsed).min(SLEEP_SLICE)));
            }
            None => std::thread::yield_now(),
        }
    }
}

impl WorkQueue {
    /// Takes the outcome of `id` if it has completed (polling the CQ once if
    /// not). `None` while still in flight; an error if `id` is unknown.
    ///
    /// Invariant: whenever this returns `Some`, `id` is no longer in flight.
    #[inline]
    pub(crate) fn try_take(&self, id: u64) -> Option<Result<WorkSuccess>> {
        self.claim(id, Look::Once(None), |op, len, wc, _| {
            self.ending.outcome(op, len, wc)
        })
        .map(|r| r.unwrap_or_else(Err))
    }

    /// Takes the outcome and memory of `id` if its completion was seen
    /// (reaping the CQ once if not), or, still in flight, sets `waker` (if
    /// any) to be woken when it is. `None` while in flight.
    #[inline]
    pub(crate) fn take_owned(&self, id: u64, waker: Option<&Waker>) -> Option<Returned> {
        self.claim(id, Look::Once(waker), |op, len, wc, held: &mut Held| {
            (self.ending.outcome(op, len, wc), std::mem::take(held))
        })
        .map(|r| r.unwrap_or_else(|e| (Err(e), Held::None)))
    }

    /// The claim every take is: `f`'s result once `id` completed (`Err`:
    /// `id` is not tracked, or the CQ could not be read, after which the
    /// queue pair was shut down and `id` has its completion, claimed
    /// here), looking for it as `look` says.
    #[inline(always)]
    fn claim<R>(
        &self,
        id: u64,
        look: Look<'_>,
        f: impl Fn(Operation, usize, &rdma_core::WorkCompletion, &mut Held) -> R,
    ) -> Option<Result<R, Error>> {
        let poll = |wcs: &mut [_]| self.cq.poll(wcs);
        let taken = match look {
            Look::Once(waker) => self.lock().poll_take(id, poll, waker, &f),
            Look::Spin(seen) => self.lock().spin_take(id, seen, poll, &f),
        };
        match taken {
            Ok(Take::Done(r)) => Some(Ok(r)),
            Ok(Take::Pending) => None,
            Ok(Take::Unknown) => Some(Err(not_outstanding(id))),
            Err(e) => Some(self.claim_after_poll_failure(id, e, f)),
        }
    }

    /// The CQ cannot be read, so completion of `id` cannot be observed:
    /// shuts the QP down and drains before claiming, so that no outcome is
    /// ever returned while `id` is in flight.
    #[cold]
    fn claim_after_poll_failure<R>(
        &self,
        id: u64,
        e: Error,
        f: impl Fn(Operation, usize, &rdma_core::WorkCompletion, &mut Held) -> R,
    ) -> Result<R, Error> {
        self.shut_down(None, &format!("polling the CQ failed: {e}"));
        match self.lock().take(id, f) {
            Take::Done(r) => Ok(r),
            _ => Err(e),
        }
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
        let mut seen = u64::MAX;
        // Fast path: already complete (the common case when a bandwidth
        // loop waits for its oldest request). No clock read: under
        // virtualised clock sources `Instant::now` costs microseconds.
        let outcome = match self.try_take(id) {
            Some(outcome) => outcome,
            // Inlined into the loop: a call per poll would cost a frame.
            None => match self.wait_loop(
                id,
                timeout,
                Duration::ZERO,
                self.events,
                #[inline(always)]
                || {
                    self.claim(id, Look::Spin(&mut seen), |op, len, wc, _| {
                        self.ending.outcome(op, len, wc)
                    })
                    .map(|r| r.unwrap_or_else(Err))
                },
            ) {
                Ok(outcome) => outcome,
                Err(expired @ Expired::Broken(_)) => self
                    .try_take(id)
                    .unwrap_or_else(|| Err(self.wait_error(id, expired, timeout))),
                Err(expired) => {
                    // The request is now complete (flushed); forget it.
                    self.lock().forget(id);
                    Err(self.wait_error(id, expired, timeout))
                }
            },
        };
        guard.disarm();
        outcome
    }

    /// Blocks until `id`'s completion is seen as [`wait`](Self::wait)
    /// does, polling for `spin` before the first sleep on completion
    /// events; the outcome comes back with the memory.
    pub(crate) fn wait_owned(&self, id: u64, timeout: Duration, spin: Duration) -> Returned {
        if let Some(r) = self.take_owned(id, None) {
            return r;
        }
        let events = self.cq.channel().is_some();
        let mut seen = u64::MAX;
        let take = || {
            self.claim(id, Look::Spin(&mut seen), |op, len, wc, held: &mut Held| {
                (self.ending.outcome(op, len, wc), std::mem::take(held))
            })
            .map(|r| r.unwrap_or_else(|e| (Err(e), Held::None)))
        };
        match self.wait_loop(id, timeout, spin, events, take) {
            Ok(r) => r,
            Err(expired) => {
                let taken = self.take_owned(id, None);
                match expired {
                    Expired::Broken(_) => taken.unwrap_or_else(|| {
                        (Err(self.wait_error(id, expired, timeout)), Held::None)
                    }),
                    Expired::Timeout(_) => (
                        Err(self.wait_error(id, expired, timeout)),
                        taken.map_or(Held::None, |(_, held)| held),
                    ),
                }
            }
        }
    }

    /// The error of a wait for `id` that ended as `expired` without a
    /// completion to report: the peer's departure if it is known by now
    /// (its disconnect or an unanswered keepalive raced the wait), else the
    /// timeout or why the queue pair broke.
    #[cold]
    fn wait_error(&self, id: u64, expired: Expired, timeout: Duration) -> Error {
        let operation = match &expired {
            Expired::Timeout(operation) => Some(*operation),
            Expired::Broken(_) => self.lock().operation_of(id),
        };
        match (expired, operation) {
            (_, Some(operation)) if self.ending.is_peer_gone() => {
                Error::PeerDisconnected { operation }
            }
            (Expired::Timeout(operation), _) => Error::Timeout { operation, timeout },
            (Expired::Broken(why), _) => Error::Unusable(why),
        }
    }

    /// [`wait_for`] on this queue pair: at each clock read it looks for a
    /// broken queue pair (async events; its state, and the keepalive, every
    /// [`STATE_QUERY_EVERY`]), and an expired wait shuts the queue pair
    /// down and drains it, so that `id` has its (flush) completion.
    #[inline(always)]
    fn wait_loop<R>(
        &self,
        id: u64,
        timeout: Duration,
        spin: Duration,
        events: bool,
        take: impl FnMut() -> Option<R>,
    ) -> Result<R, Expired> {
        // When next to ask the device for the queue pair's state: a system
        // call (ibv_query_qp), so not at every clock read (on a slow link a
        // busy wait reads the clock once or twice per operation).
        let mut next_state_query = STATE_QUERY_EVERY;
        let broken = |elapsed: Duration, now: Instant| {
            if elapsed >= next_state_query {
                next_state_query = elapsed + STATE_QUERY_EVERY;
                self.keep_alive(&mut self.lock(), now);
                self.broken()
            } else {
                self.watch.broken(self.qp.qp_num())
            }
        };
        let expired = wait_for(&self.cq, timeout, spin, events, take, broken);
        match &expired {
            Ok(_) => {}
            // The device declared the QP broken or moved it to the error
            // state (the peer's access error, a retry failure): flush and
            // report now rather than wait out the timeout for work the QP
            // will never do.
            Err(Expired::Broken(why)) => self.shut_down(None, why),
            Err(Expired::Timeout(_)) => {
                let op = self.lock().operation_of(id).unwrap_or(Operation::Send);
                self.shut_down(None, &format!("a {op} timed out after {timeout:?}"));
                return Err(Expired::Timeout(op));
            }
        }
        expired
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
        let mut clock = WaitClock::spin();
        loop {
            if let Some(r) = self.take_owned(id, None) {
                return Some(r);
            }
            if clock.tick().is_some_and(|elapsed| elapsed >= spin) {
                return None;
            }
        }
    }

    /// Waits for each of `ids` that is still tracked and removes it. Returns
    /// the failures. Never returns while any of them may still be in use by
    /// the NIC.
    pub(crate) fn drain_ids(&self, ids: &[u64], timeout: Duration) -> Vec<Error> {
        let mut errors = Vec::new();
        for &id in ids {
            if !self.lock().contains(id) {
                continue;
            }
            if let Err(e) = self.wait(id, timeout) {
                errors.push(e);
            }
        }
        errors
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

    /// The owner gives up on `what` (a dropped future, a dropped stream).
    pub(crate) fn abandon(&self, what: Abandon) {
        let mut st = self.lock();
        match what {
            Abandon::Posted(id) => st.abandon(id),
            Abandon::Waiting(ticket) => st.pass_room_turn(ticket),
        }
    }

    /// Runs the callbacks of completed callback operations (reaping the CQ
    /// first), outside the engine's lock, so a callback may post again.
    /// Returns how many ran.
    pub(crate) fn run_callbacks(&self) -> Result<usize> {
        self.reap_now()?;
        let mut ran = 0;
        loop {
            let Some(ready) = self.lock().next_callback() else {
                return Ok(ran);
            };
            let outcome = self.ending.outcome(ready.op, ready.len, &ready.wc);
            (ready.callback)(outcome, ready.held);
            ran += 1;
        }
    }

    /// Moves available completions into their slots (waking their
    /// futures); how many there were.
    pub(crate) fn reap_now(&self) -> Result<usize> {
        self.lock().reap(|wcs| self.cq.poll(wcs))
    }

    /// For busy-polling waits (no reactor): counts one poll that found
    /// nothing, and every [`SPIN_EVERY`]th time runs the stall watchdog
    /// and the keepalive ([`stall_deadline`](Self::stall_deadline)), which
    /// read the clock. `false` when neither waits for anything or the
    /// queue pair was just shut down and drained (look again: every
    /// request has its completion).
    pub(crate) fn busy_poll_may_wait(&self, timeout: Duration) -> bool {
        let n = self.idle_polls.fetch_add(1, Ordering::Relaxed);
        n % SPIN_EVERY != 0 || self.stall_deadline(timeout).is_some()
    }

    /// The watchdog of waits without a per-request timer, and the
    /// keepalive: the instant by which it wants to look again — the
    /// queue pair will have made no progress (no completion seen) for
    /// `timeout` while the user's send-queue work is in flight, or a
    /// keepalive probe will be due. A probe due now is posted. When the
    /// stall deadline has passed, shuts the queue pair down and drains it
    /// (every outstanding request completes with a flush, reporting the
    /// timeout) and returns `None`; also `None` with nothing to wait for.
    /// Receives posted for a quiet peer are not a stall.
    ///
    /// A failed completion has moved the queue pair to the error state:
    /// what is still in flight (receives, which a quiet peer would never
    /// fill) is drained now, so that their waiters learn of the failure.
    pub(crate) fn stall_deadline(&self, timeout: Duration) -> Option<Instant> {
        let now = clock::now();
        let mut st = self.lock();
        if let Some(why) = st.unusable().filter(|_| st.in_flight() > 0) {
            let why = why.to_owned();
            self.shut_down(Some(&mut st), &why);
            return None;
        }
        let probe = self.keep_alive(&mut st, now);
        let Some(deadline) = st.progress_deadline(now, timeout) else {
            return probe;
        };
        if now < deadline {
            return Some(probe.map_or(deadline, |p| p.min(deadline)));
        }
        drop(st);
        // Before the move to ERR: every request it flushes reports the
        // timeout.
        self.ending.stalled(timeout);
        self.shut_down(
            None,
            &format!(
                "no completion for {timeout:?} with sends, reads, writes or atomics in flight"
            ),
        );
        None
    }

    /// One round of the completion driver: reaps (waking the tasks whose
    /// completions arrived, and as many waiting for send-queue room as
    /// entries were freed), runs the stall watchdog, arms the CQ and reaps
    /// once more — a completion that arrived before the arming raises no
    /// event.
    ///
    /// `Some(deadline)`: sleep until the completion channel is readable or
    /// `deadline` passes. `None`: something arrived after the arming; go
    /// round again at once.
    pub(crate) fn drive_round(&self, timeout: Duration) -> Option<Instant> {
        if let Err(e) = self.reap_now() {
            log::warn!("reaping in the completion driver failed: {e}");
        }
        // Nothing to wait for: wake up after `timeout` anyway, to start the
        // watchdog of work posted meanwhile (so a stalled operation is
        // noticed within twice the timeout at most).
        let deadline = self
            .stall_deadline(timeout)
            .unwrap_or_else(|| clock::now() + timeout);
        if let Err(e) = self.cq.arm() {
            log::warn!("arming the CQ failed ({e}); polling again shortly");
            return Some(clock::now() + Duration::from_millis(1));
        }
        match self.reap_now() {
            Ok(n) if n > 0 => None,
            _ => Some(deadline),
        }
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
