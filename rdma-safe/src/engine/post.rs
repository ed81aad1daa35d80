//! Posting: validating typed work requests and handing them to the NIC,
//! one request or a batch per verb call.

use super::attached::Attached;
use super::tracker::{Take, Tracker, BATCH_MEMBER};
use super::{fill_list, with_list, WorkQueue};
use crate::error::{Error, Operation, Result, VerbsError};
use crate::fatal::AbortOnUnwind;
use crate::memory::element::{gather_sges, scatter_sges};
use crate::memory::remote::RemoteMemoryRegion;
use crate::work::Held;
use crate::work::WorkSuccess;
use crate::work::{ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest};
use rdma_core::{PostError, RecvRequest, SendFlags, SendRequest};
use std::cell::Cell;
use std::ops::Range;
use std::time::Duration;

impl WorkQueue {
    /// Whether a payload of `len` bytes goes inline. A payload forced inline
    /// must fit the queue pair's inline space: checked here, before anything
    /// is posted, so that no member of a batch can fail inside the provider
    /// after earlier members were posted.
    #[inline]
    fn inline_for(&self, op: Operation, len: usize, forced: Option<bool>) -> Result<bool> {
        match forced {
            None => Ok(len > 0 && len <= self.limits.inline_default as usize),
            Some(true) if len > self.limits.caps.max_inline_data as usize => Err(invalid(
                op,
                format_args!(
                    "{len} bytes forced inline exceed the queue pair's inline limit of {} bytes",
                    self.limits.caps.max_inline_data
                ),
            )),
            Some(on) => Ok(on),
        }
    }

    #[inline]
    fn check_sges(&self, op: Operation, n: usize, max: u32) -> Result<()> {
        if n > max as usize {
            return Err(invalid(
                op,
                format_args!("{n} SGEs exceed the channel's limit of {max}"),
            ));
        }
        Ok(())
    }

    /// Checks a send (its SGE count; a payload forced inline fits): whether
    /// it goes inline.
    #[inline(always)]
    pub(super) fn check_send(&self, wr: &SendWorkRequest<'_, '_>, len: usize) -> Result<bool> {
        self.check_sges(
            Operation::Send,
            wr.gather.len(),
            self.limits.caps.max_send_sge,
        )?;
        self.inline_for(Operation::Send, len, wr.inline)
    }

    /// Builds a checked send's request (id and signaling are set when it
    /// is posted).
    #[inline(always)]
    pub(super) fn build_send<'a>(wr: &SendWorkRequest<'a, '_>, inline: bool) -> SendRequest<'a> {
        let mut flags = SendFlags::empty();
        flags.set(SendFlags::SOLICITED, wr.solicited);
        flags.set(SendFlags::INLINE, inline);
        SendRequest::send_or_write(0, gather_sges(wr.gather), None, wr.immediate, flags)
    }

    /// Checks an RDMA write (SGE count, the remote region's length, a
    /// forced inline payload): whether it goes inline.
    #[inline(always)]
    pub(super) fn check_write(&self, wr: &WriteWorkRequest<'_, '_>, len: usize) -> Result<bool> {
        self.check_sges(
            Operation::Write,
            wr.gather.len(),
            self.limits.caps.max_send_sge,
        )?;
        check_remote_len(Operation::Write, len, &wr.remote)?;
        self.inline_for(Operation::Write, len, wr.inline)
    }

    /// Builds a checked RDMA write's request.
    #[inline(always)]
    pub(super) fn build_write<'a>(wr: &WriteWorkRequest<'a, '_>, inline: bool) -> SendRequest<'a> {
        let remote = Some((wr.remote.address(), wr.remote.rkey()));
        let flags = if inline {
            SendFlags::INLINE
        } else {
            SendFlags::empty()
        };
        SendRequest::send_or_write(0, gather_sges(wr.gather), remote, wr.immediate, flags)
    }

    /// Checks an RDMA read (SGE count, the remote region's length).
    #[inline(always)]
    pub(super) fn check_read(&self, wr: &ReadWorkRequest<'_, '_>, len: usize) -> Result<()> {
        self.check_sges(
            Operation::Read,
            wr.scatter.len(),
            self.limits.caps.max_send_sge,
        )?;
        check_remote_len(Operation::Read, len, &wr.remote)
    }

    /// Builds a checked RDMA read's request.
    #[inline(always)]
    pub(super) fn build_read<'a>(wr: &'a mut ReadWorkRequest<'_, '_>) -> SendRequest<'a> {
        let (addr, rkey) = (wr.remote.address(), wr.remote.rkey());
        SendRequest::rdma_read(0, scatter_sges(wr.scatter), addr, rkey)
    }

    #[inline]
    pub(crate) fn post_send(&self, wr: &SendWorkRequest<'_, '_>) -> Result<u64> {
        // The length once: summing even a one-element list is a loop.
        let len = wr.len();
        let inline = self.check_send(wr, len)?;
        self.post_sends(Operation::Send, len, &mut [Self::build_send(wr, inline)])
    }

    #[inline]
    pub(crate) fn post_write(&self, wr: &WriteWorkRequest<'_, '_>) -> Result<u64> {
        let len = wr.len();
        let inline = self.check_write(wr, len)?;
        self.post_sends(Operation::Write, len, &mut [Self::build_write(wr, inline)])
    }

    #[inline]
    pub(crate) fn post_read(&self, wr: &mut ReadWorkRequest<'_, '_>) -> Result<u64> {
        let len = wr.len();
        self.check_read(wr, len)?;
        self.post_sends(Operation::Read, len, &mut [Self::build_read(wr)])
    }

    /// Checks and builds a batch of sends straight into one list, posted
    /// with one call; the list is on the stack (see [`fill_list`]), so a
    /// batch costs the allocator nothing. Each request's length is summed
    /// once, while it is built (the batch's total is what it reports).
    pub(crate) fn post_send_batch(&self, wrs: &[SendWorkRequest<'_, '_>]) -> Result<u64> {
        let total = Cell::new(0);
        fill_list(
            wrs.iter(),
            // Inlined into the list's loop: out of line, the call costs
            // about 15 instructions per request.
            #[inline(always)]
            |wr, slot| {
                let len = wr.len();
                total.set(total.get() + len);
                let inline = self.check_send(wr, len)?;
                slot.write(Self::build_send(wr, inline));
                Ok(())
            },
            |reqs| self.post_sends(Operation::Send, total.get(), reqs),
        )
    }

    /// Checks and builds a batch of RDMA writes into one list (as
    /// [`post_send_batch`](Self::post_send_batch)).
    pub(crate) fn post_write_batch(&self, wrs: &[WriteWorkRequest<'_, '_>]) -> Result<u64> {
        let total = Cell::new(0);
        fill_list(
            wrs.iter(),
            // Inlined into the list's loop: out of line, the call costs
            // about 15 instructions per request.
            #[inline(always)]
            |wr, slot| {
                let len = wr.len();
                total.set(total.get() + len);
                let inline = self.check_write(wr, len)?;
                slot.write(Self::build_write(wr, inline));
                Ok(())
            },
            |reqs| self.post_sends(Operation::Write, total.get(), reqs),
        )
    }

    /// Checks and builds a batch of RDMA reads into one list (as
    /// [`post_send_batch`](Self::post_send_batch)).
    pub(crate) fn post_read_batch(&self, wrs: &mut [ReadWorkRequest<'_, '_>]) -> Result<u64> {
        let total = Cell::new(0);
        fill_list(
            wrs.iter_mut(),
            #[inline(always)]
            |wr, slot| {
                let len = wr.len();
                total.set(total.get() + len);
                self.check_read(wr, len)?;
                slot.write(Self::build_read(wr));
                Ok(())
            },
            |reqs| self.post_sends(Operation::Read, total.get(), reqs),
        )
    }

    /// Posts one request, or a batch as one list with one `ibv_post_send`
    /// call (one doorbell) of which only the last request is signaled. On a
    /// reliable connection the send queue completes in order, so the last
    /// request's completion — success, error or flush — means every earlier
    /// one is finished too. Every request was validated before (SGE counts,
    /// inline sizes, and the send-queue room in [`post`](Self::post)), so a
    /// provider has no reason to post part of the list.
    #[inline]
    pub(crate) fn post_sends(
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
    pub(super) fn post_sends_and_wait(
        &self,
        op: Operation,
        len: usize,
        reqs: &mut [SendRequest<'_>],
        timeout: Duration,
    ) -> Result<WorkSuccess> {
        let mut st = self.lock();
        let id = st.next_id();
        if reqs.len() == 1 {
            // One request: posted untracked, then one look at the completion
            // queue under the same lock; tracked only if its completion is
            // not there yet.
            self.admit(&st, op, true)?;
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
            if let Some(outcome) = st.reap_untracked(poll, op, |wc| self.outcome(op, len, wc)) {
                drop(st);
                guard.disarm();
                return outcome;
            }
            // Not there yet (or the poll failed, which `wait` sees again
            // and handles): track it before unlocking.
            st.track(op, len, 1, Attached::default());
        } else if let Ok(Take::Done(outcome)) =
            st.poll_take(id, poll, None, |op, len, wc, _| self.outcome(op, len, wc))
        {
            drop(st);
            guard.disarm();
            return outcome;
        }
        drop(st);
        let outcome = self.wait_unguarded(id, timeout);
        guard.disarm();
        outcome
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

    pub(crate) fn post_recv(&self, wr: &mut ReceiveWorkRequest<'_, '_>) -> Result<u64> {
        self.receives_here()?;
        self.check_sges(
            Operation::Receive,
            wr.scatter.len(),
            self.limits.caps.max_recv_sge,
        )?;
        let len = wr.len();
        let mut req = [RecvRequest::new(0, scatter_sges(wr.scatter))];
        self.post(Operation::Receive, len, 0, |id| {
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
        if let Err(e) = self.receives_here() {
            return refuse(e);
        }
        for wr in wrs.iter() {
            if let Err(e) = self.check_sges(
                Operation::Receive,
                wr.scatter.len(),
                self.limits.caps.max_recv_sge,
            ) {
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

pub(super) fn check_remote_len(
    op: Operation,
    len: usize,
    remote: &RemoteMemoryRegion,
) -> Result<()> {
    if len as u64 > remote.length() {
        return Err(invalid(
            op,
            format_args!(
                "{len} bytes do not fit the remote region of {} bytes",
                remote.length()
            ),
        ));
    }
    Ok(())
}

/// A request refused before posting, with why. Out of line and cold: the
/// checks it serves run on every request, and with the message's
/// formatting inlined a batch's request builder no longer fits the
/// inliner's budget (a call per request, about 15 instructions).
#[cold]
#[inline(never)]
pub(super) fn invalid(op: Operation, why: std::fmt::Arguments<'_>) -> Error {
    Error::Post {
        operation: op,
        source: VerbsError::InvalidArgument(why.to_string()),
    }
}
