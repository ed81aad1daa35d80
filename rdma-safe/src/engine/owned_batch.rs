//! Owning batches: up to [`OWNED_BATCH_MAX`] send-queue requests over pool
//! memory, posted as one list with one `ibv_post_send` call (one doorbell —
//! a system call on rxe) of which only the last is signaled.
//!
//! Sound for the reason single owning requests are (see `owned`): the
//! batch's memory moves into one slot under the lock of the post and comes
//! back only once the last request's completion was seen. On a reliable
//! connection the send queue completes in order, so that completion —
//! success, error or flush — means the NIC is done with every earlier
//! request of the batch too. An earlier request that fails reports its own
//! (error) completion, tagged [`BATCH_MEMBER`], which the tracker records as
//! the batch's outcome; the queue pair then flushes the rest, the last
//! included.

use super::attached::{Attached, Notify};
use super::owned::{Refused, Returned};
use super::tracker::{Take, Tracker, BATCH_MEMBER};
use super::{fill_list, WorkQueue};
use crate::error::Operation;
use crate::work::build::invalid;
use crate::work::{Held, OWNED_BATCH_MAX};
use rdma_core::{SendFlags, Sge};
use std::convert::Infallible;

impl WorkQueue {
    /// Posts the batch `held` holds (a [`Held::Batch`], named `op` after
    /// its last request) as one list; its memory moves into the batch's
    /// slot, or comes back at once with the outcome when `look` finds the
    /// batch already complete. `Refused::Full`
    /// while the send queue lacks room for the whole batch (nothing is
    /// posted then). Allocates nothing.
    pub(super) fn post_owned_batch_locked(
        &self,
        st: &mut Tracker,
        op: Operation,
        held: Held,
        notify: impl FnOnce() -> Notify,
        look: bool,
    ) -> Result<(u64, Option<Returned>), Refused> {
        let Held::Batch(reqs) = &held else {
            let e = invalid(
                Operation::Send,
                format_args!("a batch needs a batch of requests"),
            );
            return Err(Refused::Error(e, held));
        };
        let n = reqs.len();
        let sq_capacity = st.queue_use(true).1;
        if n == 0 || n > OWNED_BATCH_MAX || n > sq_capacity {
            let e = invalid(
                op,
                format_args!(
                    "a batch holds 1 to {} requests (at most the send queue's {}), not {n}",
                    OWNED_BATCH_MAX, sq_capacity
                ),
            );
            return Err(Refused::Error(e, held));
        }
        if let Some(e) = reqs.iter().find_map(|r| r.kind.remote_misfit(r.len())) {
            return Err(Refused::Error(e, held));
        }
        if let Err(e) = self.admit(st, op, true) {
            return Err(Refused::Error(e, held));
        }
        if !st.room_for(true, n) {
            return Err(Refused::Full(held));
        }
        let id = st.next_id();
        let mut sges = [Sge::default(); OWNED_BATCH_MAX];
        let mut total = 0usize;
        // Indexed, not zipped: as a `Zip` the loop was left out of line
        // (a call per request, about 30 instructions per operation).
        for k in 0..n {
            let (addr, len, lkey) = reqs[k].held.sge().unwrap_or_default();
            sges[k] = Sge::new(addr, len, lkey);
            total += len as usize;
        }
        // The list holds the batch's `n` requests only, built on the stack
        // (`fill_list`): building a whole `OWNED_BATCH_MAX` array, the
        // unused entries included, cost about 350 instructions per
        // operation of a batch of 8 under callgrind. Each request is
        // written straight into its place by a builder inlined into the
        // list's loop (built aside and moved in, as `with_list` does, it
        // cost a call and a copy per request).
        let posted = fill_list(
            reqs.iter().enumerate(),
            #[inline(always)]
            |(k, req), slot| {
                // A zero-length payload travels without an SGE.
                let sges = if req.is_empty() {
                    &sges[k..k]
                } else {
                    &sges[k..=k]
                };
                slot.write(self.owned_send_request(req.kind, id | BATCH_MEMBER, sges));
                Ok::<(), Infallible>(())
            },
            |wrs| {
                if let Some(last) = wrs.last_mut() {
                    last.set_wr_id(id);
                    last.set_flags(last.flags() | SendFlags::SIGNALED);
                }
                // Every SGE names the memory of a request of `held` — a
                // `PoolBytes` the NIC only reads, or a read target's `PoolBuf`,
                // its only handle — which the pool keeps allocated and
                // registered while `held` holds it. `held` moves into the
                // batch's slot below, before the lock is released, and the slot
                // gives it up only once the last request's completion has been
                // seen, after which the NIC touches none of it; if the post
                // fails, it comes back only once nothing of the batch can still
                // run.
                // SAFETY: by the reasoning just above.
                unsafe { Ok(self.qp.post_send_list(wrs)) }
            },
        );
        let posted = match posted {
            Ok(posted) => posted,
            Err(never) => match never {},
        };
        if let Err(e) = posted {
            // Part of the list, or an unknown part, may be on the queue:
            // `held` comes back only once none of it can still run (see
            // `post_failed`).
            let (e, held) = self.post_failed(st, op, total, n as u32, held, e);
            return Err(Refused::Error(e, held));
        }
        st.track(
            op,
            total,
            n as u32,
            Attached {
                held,
                notify: Notify::Claim,
            },
        );
        if look {
            let taken = st.poll_take(
                id,
                |wcs| self.cq.poll(wcs),
                None,
                |op, len, wc, held| (self.outcome(op, len, wc), held),
            );
            if let Ok(Take::Done(r)) = taken {
                return Ok((id, Some(r)));
            }
        }
        st.set_notify(id, notify());
        Ok((id, None))
    }
}
