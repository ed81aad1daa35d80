//! Completing: claiming a request's outcome (and memory), the one wait
//! loop every blocking wait runs, the no-reactor futures' spin, and the
//! completion driver's rounds with their stall watchdog.
//!
//! Reaping delivers each completion to its own slot and wakes that slot's
//! task only: one completion wakes one task. Nothing reaps inside a waker;
//! the driver reaps on its own task when the reactor wakes it.

use super::claim::{Claim, Look, Outcome};
use super::clock::{self, WaitClock, SPIN_EVERY};
use super::tracker::{Found, Take};
use super::Completions;
use super::WorkQueue;
use crate::error::{Error, Operation, Result};
use crate::fatal::AbortOnUnwind;
use crate::work::Held;
use rdma_core::QpState;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often a waiting loop asks the device whether the queue pair broke
/// (its state). Async events that declare it broken are looked at on every
/// clock read; a queue pair moved to the error state flushes its requests,
/// whose completions end the wait anyway: the query is a backstop.
const STATE_QUERY_EVERY: Duration = Duration::from_millis(10);

/// The longest the completion driver sleeps with work in flight before it
/// looks at the device's async events (and the queue pair's state) again.
const EVENT_LOOK_EVERY: Duration = Duration::from_millis(100);

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

/// What a wait with a timeout is sure to return: [`WorkQueue::wait`]
/// with one is always `Some`.
pub(crate) const BOUNDED: &str = "a wait with a timeout ends with an outcome";

/// The ids [`WorkQueue::tracked`] looks at.
#[derive(Debug)]
pub(crate) enum Ids<'a> {
    /// Counts the tracked ones.
    Count(&'a [u64]),
    /// Keeps only the tracked ones (and counts them).
    Retain(&'a mut Vec<u64>),
}

/// Why a wait ended without what it waited for.
pub(super) enum Expired {
    /// The device declared the queue (pair) broken.
    Broken(String),
    /// The wait's timeout passed (waiting for this operation).
    Timeout(Operation),
}

/// The one wait loop of the engine: calls `take` (which polls `cq` and
/// claims) until it yields. The clock is read at `clock`'s cadence;
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
    mut clock: WaitClock,
    timeout: Duration,
    spin: Duration,
    events: bool,
    mut take: impl FnMut() -> Option<R>,
    mut broken: impl FnMut(Duration, Instant) -> Option<String>,
) -> Result<R, Expired> {
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
    /// Takes `id` as `kind` claims it if its completion was seen, looking
    /// for it as `look` says. `None` while still in flight; an error
    /// outcome if `id` is not tracked, or if the CQ could not be read
    /// (after which the queue pair was shut down and `id`'s own completion,
    /// if it has one, is what this claims).
    ///
    /// Invariant: whenever this returns `Some`, `id` is no longer in flight.
    #[inline(always)]
    pub(crate) fn take<C: Claim>(&self, id: u64, kind: C, look: Look<'_>) -> Option<C::Out> {
        let poll = |wcs: &mut [_]| self.cq.poll(wcs);
        let f =
            |op, len, wc: &_, held: &mut Held| kind.claim(self.ending.outcome(op, len, wc), held);
        let mut st = self.lock();
        // The look first: its most frequent answer (nothing yet) returns
        // before any outcome is made or moved.
        let taken = match look {
            Look::Once(waker) => match st.look(id, poll, waker.is_some()) {
                Found::Pending => return None,
                Found::Failed(e) => Err(e),
                found => Ok(st.claim_found(id, found, waker, f)),
            },
            Look::Spin(seen) => match st.look_spin(id, seen, poll) {
                Found::Pending => return None,
                Found::Failed(e) => Err(e),
                found => {
                    let taken = st.claim_found(id, found, None, f);
                    *seen = st.completed();
                    Ok(taken)
                }
            },
        };
        drop(st);
        match taken {
            Ok(Take::Done(r)) => Some(r),
            Ok(Take::Pending) => None,
            Ok(Take::Unknown) => Some(kind.failed(not_outstanding(id), None)),
            Err(e) => Some(self.claim_after_poll_failure(id, kind, Error::Poll(e))),
        }
    }

    /// The CQ cannot be read, so completion of `id` cannot be observed:
    /// shuts the QP down and drains before claiming, so that no outcome is
    /// ever returned while `id` is in flight.
    #[cold]
    fn claim_after_poll_failure<C: Claim>(&self, id: u64, kind: C, e: Error) -> C::Out {
        self.shut_down(None, &format!("polling the CQ failed: {e}"));
        let f =
            |op, len, wc: &_, held: &mut Held| kind.claim(self.ending.outcome(op, len, wc), held);
        match self.lock().take(id, f) {
            Take::Done(r) => r,
            _ => kind.failed(e, None),
        }
    }

    /// Waits for `id` to complete and takes it as `kind` claims it.
    ///
    /// With a `timeout`, blocks until the completion is seen, polling for
    /// `spin` before the first sleep on completion events (if the queue
    /// has them); always `Some`. At each clock read it looks for a broken
    /// queue pair (async events; its state, and the keepalive, every
    /// [`STATE_QUERY_EVERY`]). A broken queue pair or an expired timeout
    /// shuts the queue pair down and drains it first, so that `id` has its
    /// (flush) completion, and the error says why ([`Error::Timeout`]),
    /// with the memory if `kind` keeps it.
    ///
    /// Without one, only polls for `spin` (a future's spin before it
    /// sleeps, right after its own look), shutting nothing down: `None` if
    /// `id` is still in flight then.
    ///
    /// Never unwinds: its callers rely on it returning only once `id` is
    /// complete, so a panic inside (e.g. from a logger) aborts the process.
    #[inline]
    pub(crate) fn wait<C: Claim>(
        &self,
        id: u64,
        kind: C,
        spin: Duration,
        timeout: Option<Duration>,
    ) -> Option<C::Out> {
        let guard = AbortOnUnwind("waiting for a completion");
        let mut seen = u64::MAX;
        let Some(timeout) = timeout else {
            if spin.is_zero() {
                guard.disarm();
                return None;
            }
            // The caller has just looked (leaving its waker): spin at once.
            let spun = wait_for(
                &self.cq,
                WaitClock::spin(),
                spin,
                spin,
                false,
                #[inline(always)]
                || self.take(id, kind, Look::Spin(&mut seen)),
                |_, _| None,
            );
            guard.disarm();
            return spun.ok();
        };
        // Fast path: already complete (the common case when a bandwidth
        // loop waits for its oldest request). No clock read: under
        // virtualised clock sources `Instant::now` costs microseconds.
        if let Some(r) = self.take(id, kind, Look::Once(None)) {
            guard.disarm();
            return Some(r);
        }
        let broken = watchdog(self);
        let clock = WaitClock::new(timeout, self.events);
        let out = match wait_for(
            &self.cq,
            clock,
            timeout,
            spin,
            self.events,
            // Inlined into the loop: a call per poll would cost a frame.
            #[inline(always)]
            || self.take(id, kind, Look::Spin(&mut seen)),
            broken,
        ) {
            Ok(r) => r,
            // The device declared the QP broken or moved it to the error
            // state (the peer's access error, a retry failure): flush and
            // report now rather than wait out the timeout for work the QP
            // will never do.
            Err(Expired::Broken(why)) => {
                self.shut_down(None, &why);
                self.take(id, kind, Look::Once(None)).unwrap_or_else(|| {
                    kind.failed(self.wait_error(id, Expired::Broken(why), timeout), None)
                })
            }
            Err(Expired::Timeout(_)) => {
                let op = self.lock().operation_of(id).unwrap_or(Operation::Send);
                self.shut_down(None, &format!("a {op} timed out after {timeout:?}"));
                // The request is now complete (flushed): claimed, its
                // memory (if `kind` keeps it) coming back with the error.
                let taken = self.take(id, kind, Look::Once(None));
                kind.failed(self.wait_error(id, Expired::Timeout(op), timeout), taken)
            }
        };
        guard.disarm();
        Some(out)
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
            (Expired::Broken(why), operation) => match (self.ending.ended_by(), operation) {
                (Some(event), Some(operation)) => Error::DeviceEvent { operation, event },
                _ => Error::Unusable(why),
            },
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
            if let Some(Err(e)) = self.wait(id, Outcome, Duration::ZERO, Some(timeout)) {
                errors.push(e);
            }
        }
        errors
    }

    /// How many of `ids` are still outstanding or unclaimed (one lock);
    /// [`Ids::Retain`] also removes from its list the ids that are not,
    /// keeping every id that is.
    pub(crate) fn tracked(&self, ids: Ids<'_>) -> usize {
        let st = self.lock();
        match ids {
            Ids::Count(ids) => ids.iter().filter(|&&id| st.contains(id)).count(),
            Ids::Retain(ids) => {
                st.retain_tracked(ids);
                ids.len()
            }
        }
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
    /// So is a queue pair the device reports broken or in the error state
    /// (asked at most every [`STATE_QUERY_EVERY`] while work is in flight,
    /// at the calls this gets: a driver round, or every [`SPIN_EVERY`]th
    /// empty poll of a busy-polling future).
    pub(crate) fn stall_deadline(&self, timeout: Duration) -> Option<Instant> {
        let now = clock::now();
        let mut st = self.lock();
        if let Some(why) = st.unusable().filter(|_| st.in_flight() > 0) {
            let why = why.to_owned();
            self.shut_down(Some(&mut st), &why);
            return None;
        }
        // As the blocking waits do at their clock reads: a queue pair
        // moved to the error state is shut down and drained. Its flushes
        // would end the waits anyway, but a receive posted to a queue pair
        // already in the error state may get none (rxe flushes only at the
        // move to ERR), and receives alone have no stall deadline.
        if st.state_look_due(now, STATE_QUERY_EVERY) {
            drop(st);
            if let Some(why) = self.broken() {
                self.shut_down(None, &why);
                return None;
            }
            st = self.lock();
        }
        let probe = self.keep_alive(&mut st, now);
        // With work in flight, look at the device's events again soon: an
        // event raises no completion, and a driver asleep until the stall
        // deadline would otherwise see it only then.
        let look = (st.in_flight() > 0).then(|| now + EVENT_LOOK_EVERY);
        let soonest = |a: Option<Instant>, b: Option<Instant>| a.into_iter().chain(b).min();
        let Some(deadline) = st.progress_deadline(now, timeout) else {
            return soonest(probe, look);
        };
        if now < deadline {
            return soonest(soonest(probe, look), Some(deadline));
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
        if let Some(event) = self.ending.device_event() {
            return Some(event_reason(&event));
        }
        matches!(self.qp.state(), Ok(QpState::Error))
            .then(|| "the queue pair is in the error state".to_owned())
    }
}

/// What a blocking wait looks at on each clock read: the queue pair's
/// breakage (async events at every read; its state, a system call
/// (`ibv_query_qp`), and the keepalive every [`STATE_QUERY_EVERY`]: on a
/// slow link a busy wait reads the clock once or twice per operation).
fn watchdog(queue: &WorkQueue) -> impl FnMut(Duration, Instant) -> Option<String> + '_ {
    let mut next_state_query = STATE_QUERY_EVERY;
    move |elapsed: Duration, now: Instant| {
        if elapsed >= next_state_query {
            next_state_query = elapsed + STATE_QUERY_EVERY;
            queue.keep_alive(&mut queue.lock(), now);
            queue.broken()
        } else {
            queue.ending.device_event().map(|e| event_reason(&e))
        }
    }
}

/// A blocking wait for whatever `progress` waits for on `queue` — more
/// than one request, such as a stream's next message or its oldest write
/// — through the engine's one wait loop: `progress` (which takes what has
/// completed, through the engine) is called until it yields, polling for
/// `spin` and then sleeping on the queue's completion events (if it has
/// them) or yielding the thread, at most `timeout` in all. `Ok(None)`
/// when the timeout passed: nothing is shut down, the caller decides.
///
/// # Errors
/// [`Error::Unusable`] when the device declared the queue pair broken (or
/// it is in the error state): it has been shut down and drained, so
/// every request on it has its completion.
pub(crate) fn until<R>(
    queue: &WorkQueue,
    spin: Duration,
    timeout: Duration,
    progress: impl FnMut() -> Option<R>,
) -> Result<Option<R>> {
    let clock = WaitClock::new(timeout, queue.events);
    match wait_for(
        &queue.cq,
        clock,
        timeout,
        spin,
        queue.events,
        progress,
        watchdog(queue),
    ) {
        Ok(r) => Ok(Some(r)),
        Err(Expired::Timeout(_)) => Ok(None),
        Err(Expired::Broken(why)) => {
            queue.shut_down(None, &why);
            Err(Error::Unusable(why))
        }
    }
}

/// Why a queue pair an async event ended is unusable.
#[cold]
fn event_reason(event: &rdma_core::AsyncEvent) -> String {
    format!("the device reported {event}")
}

/// The error of a claim of an id that is not tracked.
#[cold]
pub(super) fn not_outstanding(id: u64) -> Error {
    Error::Unusable(format!("work request {id} is not outstanding"))
}
