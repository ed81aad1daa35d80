//! Posting: every send-queue request through one path — built by its
//! [`SendQueueWork`] impl straight into a list on the stack, then posted
//! with one verb call (one doorbell), one request or a batch — and the
//! keepalive's probe through the same path. Every post passes [`Gate`]'s
//! admission first. Receives, borrowed and owned, have their one path in
//! [`WorkQueue::post_receives`].
//!
//! [`Gate`]: super::gate::Gate

use super::attached::Attached;
use super::claim::Outcome;
use super::tracker::{Keepalive, Take, Tracker, BATCH_MEMBER};
use super::wait::BOUNDED;
use super::{fill_list, WorkQueue};
use crate::error::{Error, Operation, Result, VerbsError};
use crate::fatal::AbortOnUnwind;
use crate::work::build::{Limits, SendQueueWork};
use crate::work::{Held, WorkSuccess};
use rdma_core::{SendFlags, SendRequest};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Builds `wrs` into one list (on the stack, see [`fill_list`]), each
/// request written straight into its place, and lends it to `post` with
/// the batch's operation (its last request's) and total length. A request
/// that cannot be built stops it: nothing is posted.
#[inline(always)]
fn build_list<'s, W: SendQueueWork<'s>, R>(
    limits: &Limits,
    wrs: impl ExactSizeIterator<Item = W>,
    post: impl FnOnce(Operation, usize, &mut [SendRequest<'s>]) -> Result<R>,
) -> Result<R> {
    let (op, len) = (Cell::new(W::KIND), Cell::new(0));
    fill_list(
        wrs,
        // Inlined into the list's loop: out of line, the call costs a
        // frame per request.
        #[inline(always)]
        |wr, slot| {
            let mut n = len.get();
            let (o, req) = wr.build(limits, &mut n)?;
            len.set(n);
            op.set(o);
            slot.write(req);
            Ok(())
        },
        |reqs| post(op.get(), len.get(), reqs),
    )
}

impl WorkQueue {
    /// Posts `wrs` — one request, or a batch as one list with one
    /// `ibv_post_send` call of which only the last request is signaled. On a
    /// reliable connection the send queue completes in order, so the last
    /// request's completion — success, error or flush — means every earlier
    /// one is finished too. Every request is checked before anything is
    /// posted (SGE counts, inline sizes, remote lengths, and the send-queue
    /// room), so a provider has no reason to post part of the list. The id
    /// that the completion claims.
    #[inline]
    pub(crate) fn post_sends<'s, W: SendQueueWork<'s>>(
        &self,
        wrs: impl ExactSizeIterator<Item = W>,
    ) -> Result<u64> {
        build_list(&self.limits, wrs, |op, len, reqs| {
            self.post_built(op, len, reqs)
        })
    }

    /// Checks and builds `wrs` once, to be posted many times
    /// ([`post_built`](Self::post_built)), with their total length.
    pub(crate) fn prepare<'s, W: SendQueueWork<'s>>(
        &self,
        wrs: impl ExactSizeIterator<Item = W>,
    ) -> Result<(Vec<SendRequest<'s>>, usize)> {
        let mut total = 0;
        let mut reqs = Vec::with_capacity(wrs.len());
        for wr in wrs {
            reqs.push(wr.build(&self.limits, &mut total)?.1);
        }
        Ok((reqs, total))
    }

    /// Posts requests already built ([`prepare`](Self::prepare)) as
    /// [`post_sends`](Self::post_sends) does.
    #[inline]
    pub(crate) fn post_built(
        &self,
        op: Operation,
        len: usize,
        reqs: &mut [SendRequest<'_>],
    ) -> Result<u64> {
        self.post_list(&mut self.lock(), op, len, reqs, true)
    }

    /// Posts as [`post_sends`](Self::post_sends) and waits for the
    /// completion as [`wait`](Self::wait): the blocking calls' path. The
    /// completion queue is polled once before the lock taken for posting is
    /// released, so an operation that completes quickly costs one lock
    /// round trip, not three.
    pub(crate) fn post_sends_and_wait<'s, W: SendQueueWork<'s>>(
        &self,
        wrs: impl ExactSizeIterator<Item = W>,
        timeout: Duration,
    ) -> Result<WorkSuccess> {
        build_list(&self.limits, wrs, |op, len, reqs| {
            let mut st = self.lock();
            // One request is posted untracked, then one look at the
            // completion queue under the same lock; tracked only if its
            // completion is not there yet.
            let id = self.post_list(&mut st, op, len, reqs, reqs.len() > 1)?;
            // From here on the request is posted: as in `wait`, this returns
            // only once its completion was seen, and never unwinds.
            let guard = AbortOnUnwind("waiting for a completion");
            let poll = |wcs: &mut [_]| self.cq.poll(wcs);
            if reqs.len() == 1 {
                if let Some(outcome) =
                    st.reap_untracked(poll, op, |wc| self.ending.outcome(op, len, wc))
                {
                    drop(st);
                    guard.disarm();
                    return outcome;
                }
                // Not there yet (or the poll failed, which `wait` sees again
                // and handles): track it before unlocking.
                st.track(op, len, 1, Attached::default());
            } else if let Ok(Take::Done(outcome)) =
                st.poll_take(id, poll, None, |op, len, wc, _| {
                    self.ending.outcome(op, len, wc)
                })
            {
                drop(st);
                guard.disarm();
                return outcome;
            }
            drop(st);
            // `wait` keeps the same promise (its own guard).
            let outcome = self.wait(id, Outcome, Duration::ZERO, Some(timeout));
            guard.disarm();
            outcome.expect(BOUNDED)
        })
    }

    /// Posts `reqs`, built send-queue requests of `op` moving `len` bytes,
    /// as one list with the lock held: admitted by the gate, refused before
    /// anything is posted when the send queue lacks room for all of them,
    /// the last request signaled and carrying the returned id, the others
    /// `id | BATCH_MEMBER`. A failure that does not prove nothing was
    /// queued is settled (see the `shutdown` module) before the error is
    /// returned. `track`: the posted list is tracked; without it the caller
    /// tracks it, or counts its completion seen already, before releasing
    /// the lock.
    ///
    /// Inlined: with its caller's list (one request, mostly) in view, the
    /// id loop and the tracking fold away.
    #[inline(always)]
    fn post_list(
        &self,
        st: &mut Tracker,
        op: Operation,
        len: usize,
        reqs: &mut [SendRequest<'_>],
        track: bool,
    ) -> Result<u64> {
        let Some(last) = reqs.len().checked_sub(1) else {
            return Err(Error::Post {
                operation: op,
                source: VerbsError::InvalidArgument("empty batch".into()),
            });
        };
        let n = reqs.len() as u32;
        self.gate.admit(&self.qp, st, op, true)?;
        if !st.room_for(true, reqs.len()) {
            return Err(super::queue_too_full(op, n, st));
        }
        let id = st.next_id();
        // A batch's members (none for one request: no loop to set up).
        if last > 0 {
            for req in reqs[..last].iter_mut() {
                req.set_wr_id(id | BATCH_MEMBER);
            }
        }
        reqs[last].set_wr_id(id);
        reqs[last].set_flags(reqs[last].flags() | SendFlags::SIGNALED);
        // Every SGE comes from a `GatherElement` (a live `&[u8]`)
        // or a `ScatterElement` (a live `&mut [u8]`) of a registration
        // whose range stays on its pinned pages; they stay borrowed until
        // the completion is claimed: blocking calls wait for it, scopes
        // drain it before returning, and `PendingWork` waits on drop. A
        // failed post returns only once nothing of it can still run (see
        // `post_failed`). The keepalive's probe has no SGE.
        // SAFETY: by the reasoning just above.
        if let Err(e) = unsafe { self.qp.post_send_list(reqs) } {
            return Err(self.post_failed(st, op, len, n, Held::None, e).0);
        }
        if track {
            st.track(op, len, n, Attached::default());
        }
        Ok(id)
    }

    /// The keepalive's look at `now` (a time the caller read): posts a
    /// probe if one is due (see the tracker's `liveness` module); when the
    /// next one will be, if the keepalive waits for a quiet period to end.
    ///
    /// The probe is a zero-length RDMA write without a scatter/gather
    /// element and with remote key 0, as librdmacm's rsocket keepalive
    /// posts: it touches no memory on either side (a zero-length RDMA
    /// operation checks no key, IBA C9-88), and the peer's NIC acknowledges
    /// it without the peer's software. It goes through the path of every
    /// post; a probe not admitted now (the queue pair not ready) is tried
    /// again at the next look.
    pub(super) fn keep_alive(&self, st: &mut Tracker, now: Instant) -> Option<Instant> {
        match st.keepalive_due(now) {
            Keepalive::Off => None,
            Keepalive::At(due) => Some(due),
            Keepalive::Due => {
                let mut req = [SendRequest::rdma_write(0, &[], 0, 0)];
                match self.post_list(st, Operation::Write, 0, &mut req, true) {
                    Ok(id) => st.probe_posted(id),
                    Err(e @ Error::Post { .. }) => st.later().log(
                        log::Level::Warn,
                        format_args!("posting a keepalive probe failed: {e}"),
                    ),
                    Err(_) => {}
                }
                None
            }
        }
    }
}
