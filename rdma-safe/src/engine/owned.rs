//! Owning operations: requests whose memory (a pool buffer or slice) moves
//! into the engine's slot at post time and comes back out only once the
//! completion — success, error or flush — has been seen on the CQ.
//!
//! This is what makes them sound without scopes: the NIC can only touch
//! memory that a slot holds, a slot gives its memory up only after the
//! completion was reaped, and nothing a user does to a handle (dropping it,
//! `mem::forget`, a cancelled future, a panic) removes a `Posted` slot. A
//! dropped future marks its slot [`Notify::Abandoned`]; the reaper releases
//! the memory when the completion arrives.

use super::attached::{Attached, Notify};
use super::clock::WaitClock;
use super::tracker::{Take, Tracker};
use super::wait::not_outstanding;
use super::WorkQueue;
use crate::error::{Error, Operation, Result};
use crate::work::build::invalid;
use crate::work::WorkSuccess;
use crate::work::{Held, OwnedKind};
use rdma_core::{CompChannel, RecvRequest, SendFlags, SendRequest, Sge};
use std::sync::atomic::Ordering;
use std::task::Waker;
use std::time::{Duration, Instant};

/// Idle polls of busy-polling waits between two looks at the clock for the
/// stall watchdog (a few milliseconds of polling: nothing next to a
/// timeout of seconds).
const STALL_CHECK_EVERY: u32 = 256;

impl WorkQueue {
    /// The unsignaled send-queue request of `kind` (not a receive or a
    /// batch) over `sges` (none for a zero-length payload), inline when its
    /// payload fits the default inline size and the NIC reads it: single
    /// owning requests and the members of owning batches are built here.
    /// Inlined, so that a batch's requests are written straight into its
    /// list (out of line: a call and a copy per request).
    #[inline(always)]
    pub(super) fn owned_send_request<'a>(
        &self,
        kind: OwnedKind,
        id: u64,
        sges: &'a [Sge],
    ) -> SendRequest<'a> {
        let len: u32 = sges.iter().map(Sge::length).sum();
        let flags = if len > 0 && len <= self.limits.inline_default {
            SendFlags::INLINE
        } else {
            SendFlags::empty()
        };
        // Built as one value (`send_or_write`), straight into a batch's list.
        match kind {
            OwnedKind::Send { imm } => SendRequest::send_or_write(id, sges, None, imm, flags),
            OwnedKind::Write { remote, imm } => {
                let remote = Some((remote.address(), remote.rkey()));
                SendRequest::send_or_write(id, sges, remote, imm, flags)
            }
            OwnedKind::Read { remote } => {
                SendRequest::rdma_read(id, sges, remote.address(), remote.rkey())
            }
            OwnedKind::Receive | OwnedKind::Batch { .. } => {
                unreachable!("not a single send-queue request")
            }
        }
    }
}

/// Why an owning request was not posted; the memory comes back with it.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The send queue is full: retry after a completion.
    Full(Held),
    /// Invalid, unusable channel, or the verb failed.
    Error(Error, Held),
}

/// An outcome with the memory given back.
pub(crate) type Returned = (Result<WorkSuccess>, Held);

impl WorkQueue {
    /// Posts `kind` over `held`, which moves into the request's slot in the
    /// same critical section as the post, with `notify` to tell of the
    /// completion. Allocates nothing (the SGE and request live on the stack).
    pub(crate) fn post_owned(
        &self,
        kind: OwnedKind,
        held: Held,
        notify: Notify,
    ) -> Result<u64, Refused> {
        // `notify` may be a callback, whose captures are the user's: if the
        // post is refused it is dropped here, after the lock is released.
        let mut notify = Some(notify);
        let posted = {
            let mut st = self.lock();
            let take = || notify.take().unwrap_or_default();
            self.post_owned_locked(&mut st, kind, held, take, false)
        };
        drop(notify);
        posted.map(|(id, _)| id)
    }

    pub(super) fn post_owned_locked(
        &self,
        st: &mut Tracker,
        kind: OwnedKind,
        held: Held,
        notify: impl FnOnce() -> Notify,
        look: bool,
    ) -> Result<(u64, Option<Returned>), Refused> {
        if let OwnedKind::Batch { op } = kind {
            return self.post_owned_batch_locked(st, op, held, notify, look);
        }
        let op = kind.operation();
        let (addr, len, lkey) = match (&held, kind) {
            (Held::Shared(b), OwnedKind::Send { .. } | OwnedKind::Write { .. }) => b.sge(),
            (Held::Unique(b), OwnedKind::Receive) => b.sge_full(),
            (Held::Unique(b), OwnedKind::Read { .. }) => b.sge(),
            _ => {
                let e = invalid(op, format_args!("a {op} needs the other kind of buffer"));
                return Err(Refused::Error(e, held));
            }
        };
        if let Some(e) = kind.remote_misfit(len as usize) {
            return Err(Refused::Error(e, held));
        }
        let sge = [Sge::new(addr, len, lkey)];
        // A zero-length payload is sent without an SGE.
        let sges = if len == 0 { &sge[..0] } else { &sge[..] };
        let sq = u32::from(!matches!(kind, OwnedKind::Receive));
        if let Err(e) = self.admit(st, op, sq > 0) {
            return Err(Refused::Error(e, held));
        }
        if !st.room_for(sq > 0, 1) {
            return Err(if sq > 0 {
                Refused::Full(held)
            } else {
                Refused::Error(super::queue_too_full(op, 1, st), held)
            });
        }
        let id = st.next_id();
        let rc = match kind {
            OwnedKind::Receive => {
                let mut req = [RecvRequest::new(id, sges)];
                // The SGE names `held`'s buffer, which `held` keeps
                // allocated and registered (its pool holds the slab). `held`
                // is the buffer's only handle (a `PoolBuf`) and, under the
                // same lock, before anyone else could reap this request,
                // either comes back with the completion this function saw,
                // moves into the request's slot, which gives it up only
                // after the completion is seen, or, if the post fails, comes
                // back only once nothing of the request can still run.
                // SAFETY: by the reasoning just above.
                unsafe { self.qp.post_recv_list(&mut req) }
            }
            _ => {
                let req = self.owned_send_request(kind, id, sges);
                let mut req = [req.signaled()];
                // As for the receive: `held` — a `PoolBytes` the NIC only
                // reads, or for a read target the buffer's only handle —
                // comes back only with the completion (or, after a failed
                // post, once nothing of it can still run), or moves into the
                // slot before the lock is released.
                // SAFETY: by the reasoning just above.
                unsafe { self.qp.post_send_list(&mut req) }
            }
        };
        if let Err(e) = rc {
            // `held` comes back only once nothing of the request can still
            // run (see `post_failed`).
            let (e, held) = self.post_failed(st, op, len as usize, sq, held, e);
            return Err(Refused::Error(e, held));
        }
        // Only a send-queue request can have completed already (rxe runs
        // a small send inside the post's doorbell): a receive completes
        // only once the peer sends, after this, so looking for its
        // completion would cost a poll (about 90 instructions) per receive.
        if look && sq > 0 {
            // A completion that is already there is taken before the request
            // is tracked: `held` has not left this function, and goes back
            // with it.
            let outcome = |wc: &_| self.outcome(op, len as usize, wc);
            if let Some(outcome) = st.reap_untracked(|wcs| self.cq.poll(wcs), op, outcome) {
                return Ok((id, Some((outcome, held))));
            }
        }
        st.track(
            op,
            len as usize,
            sq,
            Attached {
                held,
                notify: notify(),
            },
        );
        Ok((id, None))
    }

    /// Takes the outcome and memory of `id` if its completion was seen
    /// (reaping the CQ once if not), or, still in flight, sets `waker` (if
    /// any) to be woken when it is. `None` while in flight.
    #[inline]
    pub(crate) fn take_owned(&self, id: u64, waker: Option<&Waker>) -> Option<Returned> {
        let taken = self.lock().poll_take(
            id,
            |wcs| self.cq.poll(wcs),
            waker,
            |op, len, wc, held| (self.outcome(op, len, wc), held),
        );
        match taken {
            Ok(Take::Done(r)) => Some(r),
            Ok(Take::Pending) => None,
            Ok(Take::Unknown) => Some((Err(not_outstanding(id)), Held::None)),
            Err(e) => {
                // As in `try_take`: drained, `id` has its completion.
                self.shutdown_and_drain(&format!("polling the CQ failed: {e}"));
                let taken = self
                    .lock()
                    .take(id, |op, len, wc, held| (self.outcome(op, len, wc), held));
                match taken {
                    Take::Done(r) => Some(r),
                    _ => Some((Err(e), Held::None)),
                }
            }
        }
    }

    /// Entries in the list of tasks waiting for send-queue room.
    pub(crate) fn room_waiters(&self) -> usize {
        self.lock().room_waiters()
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
            let outcome = self.outcome(ready.op, ready.len, &ready.wc);
            (ready.callback)(outcome, ready.held);
            ran += 1;
        }
    }

    /// Moves available completions into their slots (waking their
    /// futures); how many there were.
    pub(crate) fn reap_now(&self) -> Result<usize> {
        self.lock().reap(|wcs| self.cq.poll(wcs))
    }

    /// Arms the CQ: the next completion raises an event on its channel.
    /// Poll again after arming (and before sleeping): a completion that
    /// arrived before the arming raises none.
    pub(crate) fn arm(&self) -> Result<()> {
        match self.cq.own() {
            Some(cq) => cq.req_notify(false).map_err(Error::Poll),
            None => Err(Error::Poll(rdma_core::Error::InvalidArgument(
                "a shared completion queue carries no completion events".into(),
            ))),
        }
    }

    /// Whether the queue pair takes its completions from a CQ shared with
    /// others.
    #[cfg(feature = "tokio")]
    pub(crate) fn on_shared_cq(&self) -> bool {
        self.cq.own().is_none()
    }

    /// The CQ's completion channel, if it was built with one.
    pub(crate) fn comp_channel(&self) -> Option<&CompChannel> {
        self.cq.channel()
    }

    /// For busy-polling waits (no reactor): counts one poll that found
    /// nothing, and every [`STALL_CHECK_EVERY`]th time checks the stall
    /// deadline ([`stall_deadline`](Self::stall_deadline)), which reads the
    /// clock — a system call and an emulated device access on a VM whose
    /// clock source is not the TSC, too dear for every poll. `false` when
    /// nothing is in flight any more or the queue pair was just shut down
    /// and drained (look again: every request has its completion).
    pub(crate) fn busy_poll_may_wait(&self, timeout: Duration) -> bool {
        let n = self.idle_polls.fetch_add(1, Ordering::Relaxed);
        n % STALL_CHECK_EVERY != 0 || self.stall_deadline(timeout).is_some()
    }

    /// For waits without a per-request timer: the instant at which the
    /// queue pair will have made no progress (no completion seen) for
    /// `timeout` while work is in flight. When it has passed, shuts the
    /// queue pair down and drains it (every outstanding request completes
    /// with a flush) and returns `None`; also `None` with nothing in flight.
    pub(crate) fn stall_deadline(&self, timeout: Duration) -> Option<Instant> {
        let now = Instant::now();
        let deadline = self.lock().progress_deadline(now, timeout)?;
        if now < deadline {
            return Some(deadline);
        }
        // Before the move to ERR: every request it flushes reports the
        // timeout.
        self.stalled(timeout);
        self.shutdown_and_drain(&format!(
            "no completion for {timeout:?} with work in flight"
        ));
        None
    }

    /// Blocks until `id`'s completion is seen: polls for `spin`, then sleeps
    /// on the completion channel (when the CQ has one; yields otherwise),
    /// arming it and polling once more before each sleep so that no
    /// completion is slept through. After `timeout` the queue pair is shut
    /// down and drained, and [`Error::Timeout`] comes back with the
    /// memory.
    pub(crate) fn wait_owned(&self, id: u64, timeout: Duration, spin: Duration) -> Returned {
        if let Some(r) = self.take_owned(id, None) {
            return r;
        }
        // The same clock policy as the borrowed waits (see `clock`).
        let mut clock = WaitClock::new(timeout, self.comp_channel().is_some());
        loop {
            if let Some(r) = self.take_owned(id, None) {
                return r;
            }
            let Some(elapsed) = clock.tick() else {
                continue;
            };
            if elapsed >= timeout {
                let op = self.lock().operation_of(id).unwrap_or(Operation::Send);
                self.shutdown_and_drain(&format!("a {op} timed out after {timeout:?}"));
                let held = self.take_owned(id, None).map_or(Held::None, |(_, h)| h);
                return (
                    Err(Error::Timeout {
                        operation: op,
                        timeout,
                    }),
                    held,
                );
            }
            if elapsed < spin {
                continue;
            }
            match self.comp_channel() {
                Some(_) if self.arm().is_ok() => {
                    if let Some(r) = self.take_owned(id, None) {
                        return r;
                    }
                    let slice = (timeout - elapsed).min(Duration::from_millis(50));
                    if let Some(cq) = self.cq.own() {
                        let _ = cq.wait_event(Some(slice));
                    }
                }
                _ => std::thread::yield_now(),
            }
        }
    }
}

impl Drop for WorkQueue {
    /// The last handle is gone while requests are still on the queue pair
    /// (owning operations whose futures were forgotten, say): flush them
    /// before the queue pair is destroyed, so that the memory their slots
    /// hold is released only once the NIC is done with it.
    fn drop(&mut self) {
        let in_flight = self.lock().in_flight();
        if in_flight > 0 {
            self.shutdown_and_drain("the channel was dropped with work in flight");
        }
    }
}
