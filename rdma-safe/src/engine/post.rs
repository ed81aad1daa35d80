//! Posting: every send-queue request through one path — built by its
//! [`SendQueueWork`] impl straight into a list on the stack, then posted
//! with one verb call (one doorbell), one request or a batch — and the
//! receives of borrowed memory. Every post passes [`Gate`]'s admission
//! first.
//!
//! [`Gate`]: super::gate::Gate

use super::attached::Attached;
use super::claim::Outcome;
use super::gate::Gate;
use super::tracker::{Keepalive, Take, Tracker, BATCH_MEMBER};
use super::wait::BOUNDED;
use super::{fill_list, with_list, WorkQueue};
use crate::error::{Error, Operation, Result, VerbsError};
use crate::fatal::AbortOnUnwind;
use crate::memory::element::scatter_sges;
use crate::work::build::{Limits, SendQueueWork};
use crate::work::{Held, ReceiveWorkRequest, WorkSuccess};
use rdma_core::{PostError, RecvRequest, SendFlags, SendRequest};
use std::cell::Cell;
use std::ops::Range;
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
        self.post_sends_locked(&mut self.lock(), op, len, reqs)
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
            let id = st.next_id();
            if reqs.len() == 1 {
                // One request: posted untracked, then one look at the completion
                // queue under the same lock; tracked only if its completion is
                // not there yet.
                self.gate.admit(&self.qp, &st, op, true)?;
                if !st.room_for(true, 1) {
                    return Err(super::queue_too_full(op, 1, &st));
                }
                if let Err(e) = self.post_list(reqs, id) {
                    return Err(self.post_failed(&mut st, op, len, 1, Held::None, e).0);
                }
            } else {
                self.post_sends_locked(&mut st, op, len, reqs)?;
            }
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

    #[inline]
    fn post_sends_locked(
        &self,
        st: &mut Tracker,
        op: Operation,
        len: usize,
        reqs: &mut [SendRequest<'_>],
    ) -> Result<u64> {
        if reqs.is_empty() {
            return Err(Error::Post {
                operation: op,
                source: VerbsError::InvalidArgument("empty batch".into()),
            });
        }
        self.post_locked(st, op, len, reqs.len() as u32, |id| {
            self.post_list(reqs, id)
        })
    }

    /// Posts `reqs` (not empty) as one list, the last signaled and carrying
    /// `id`, the others `id | BATCH_MEMBER`. A failure goes to the caller
    /// as the provider reported it (how much was posted, if it said).
    #[inline]
    fn post_list(&self, reqs: &mut [SendRequest<'_>], id: u64) -> Result<(), PostError> {
        let last = reqs.len() - 1;
        for req in reqs[..last].iter_mut() {
            req.set_wr_id(id | BATCH_MEMBER);
        }
        reqs[last].set_wr_id(id);
        reqs[last].set_flags(reqs[last].flags() | SendFlags::SIGNALED);
        // Every SGE comes from a `GatherElement` (a live `&[u8]`)
        // or a `ScatterElement` (a live `&mut [u8]`) of a registration
        // whose range stays on its pinned pages; they stay borrowed until
        // the completion is claimed: blocking calls wait for it, scopes
        // drain it before returning, and `PendingWork` waits on drop. A
        // failed post returns only once nothing of it can still run (see
        // `post_failed`).
        // SAFETY: by the reasoning just above.
        unsafe { self.qp.post_send_list(reqs) }
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
                match self.post_locked(st, Operation::Write, 0, 1, |id| {
                    self.post_list(&mut req, id)
                }) {
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

    pub(crate) fn post_recv(&self, wr: &mut ReceiveWorkRequest<'_, '_>) -> Result<u64> {
        Gate::receives_here(&self.qp)?;
        let len = wr.len();
        let sges = scatter_sges(wr.scatter);
        self.limits.check_receive_sges(sges)?;
        let mut req = [RecvRequest::new(0, sges)];
        self.post_locked(&mut self.lock(), Operation::Receive, len, 0, |id| {
            req[0].set_wr_id(id);
            // Every SGE comes from a `ScatterElement`, a live `&mut [u8]`
            // exclusively borrowed until this request's completion is
            // claimed (see `post_sends`) or a failed post is settled.
            // SAFETY: by the reasoning just above.
            unsafe { self.qp.post_recv_list(&mut req) }
        })
    }

    /// Posts receives as one list with one `ibv_post_recv` call. Receives
    /// complete one by one, in order, each with its own completion; the
    /// returned range names the posted ones, which are tracked even when the
    /// call fails part-way (the error is returned beside them). The list is
    /// built on the stack (see [`with_list`]): a batch costs the allocator
    /// nothing.
    pub(crate) fn post_recv_batch(
        &self,
        wrs: &mut [ReceiveWorkRequest<'_, '_>],
    ) -> (Range<u64>, Result<()>) {
        let refuse = |e: Error| (0..0, Err(e));
        if wrs.is_empty() {
            return refuse(Error::Post {
                operation: Operation::Receive,
                source: VerbsError::InvalidArgument("empty batch".into()),
            });
        }
        if let Err(e) = Gate::receives_here(&self.qp) {
            return refuse(e);
        }
        for wr in wrs.iter_mut() {
            if let Err(e) = self.limits.check_receive_sges(scatter_sges(wr.scatter)) {
                return refuse(e);
            }
        }
        let reqs = wrs
            .iter_mut()
            .map(|wr| RecvRequest::new(0, scatter_sges(wr.scatter)));
        with_list(reqs, |reqs| {
            self.post_receives(reqs, &mut [], &mut |reqs| {
                // SAFETY: as in `post_recv`.
                unsafe { self.qp.post_recv_list(reqs) }
            })
        })
    }
}
