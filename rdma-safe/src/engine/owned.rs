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
//!
//! Owning batches: up to [`OWNED_BATCH_MAX`] send-queue requests over pool
//! memory, posted as one list with one `ibv_post_send` call of which only
//! the last is signaled; the batch's memory moves into one slot and comes
//! back once the last request's completion was seen (on a reliable
//! connection the send queue completes in order). An earlier request that
//! fails reports its own completion, tagged [`BATCH_MEMBER`], which the
//! tracker records as the batch's outcome.

use super::attached::{Attached, Callback, Notify};
use super::list::fill_list;
use super::tracker::{Take, Tracker, BATCH_MEMBER};
use super::WorkQueue;
use crate::error::{Error, Operation, Result};
use crate::work::build::invalid;
use crate::work::{Held, OwnedKind, WorkSuccess, OWNED_BATCH_MAX};
use rdma_core::{RecvRequest, SendFlags, Sge};
use std::convert::Infallible;
use std::task::Waker;

/// Why an owning request was not posted; the memory comes back with it.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The send queue is full: retry after a completion.
    Full(Held),
    /// Invalid, unusable channel, or the verb failed.
    Error(Error, Held),
}

/// Who learns of an owning request's completion ([`WorkQueue::submit`]).
pub(crate) enum Notice<'a> {
    /// Whoever claims it by id: a blocking run, a receive stream.
    Claim,
    /// The callback, run by the next `run_callbacks` after the completion.
    Callback(Callback),
    /// A future: the slot's waker (if any) is woken at the completion; the
    /// room waker (if any) and the future's ticket in the room list wait
    /// for send-queue room.
    Task {
        slot: Option<&'a Waker>,
        room: Option<(&'a Waker, &'a mut Option<u64>)>,
    },
}

impl std::fmt::Debug for Notice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Notice::Claim => "Claim",
            Notice::Callback(_) => "Callback",
            Notice::Task { .. } => "Task",
        })
    }
}

/// An outcome with the memory given back.
pub(crate) type Returned = (Result<WorkSuccess>, Held);

impl WorkQueue {
    /// Posts `kind` over `held` with the lock held: one request over its
    /// buffer, or the requests of an owning batch ([`OwnedKind::Batch`]
    /// over a [`Held::Batch`], named after its last request) as one list
    /// with one `ibv_post_send` call of which only the last is signaled.
    /// `held` moves into the request's slot, told of with `notify`, or,
    /// when `look` finds a send-queue request already complete, comes back
    /// at once with the outcome. `Refused::Full` while the send queue
    /// lacks room for the whole request (nothing is posted then).
    /// Allocates nothing.
    pub(super) fn post_owned_locked(
        &self,
        st: &mut Tracker,
        kind: OwnedKind,
        held: Held,
        notify: impl FnOnce() -> Notify,
        look: bool,
    ) -> Result<(u64, Option<Returned>), Refused> {
        let op = kind.operation();
        // The SGEs: one request's, or a batch's, one per request.
        let one: [Sge; 1];
        let mut many: [Sge; OWNED_BATCH_MAX];
        let (sges, len, sq) = match (&held, kind) {
            (Held::Batch(reqs), OwnedKind::Batch { .. }) => {
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
                many = [Sge::default(); OWNED_BATCH_MAX];
                let mut total = 0usize;
                // Indexed, not zipped: as a `Zip` the loop is left out of
                // line (a call per request).
                for k in 0..n {
                    let (addr, len, lkey) = reqs[k].held.sge().unwrap_or_default();
                    many[k] = Sge::new(addr, len, lkey);
                    total += len as usize;
                }
                (&many[..n], total, n as u32)
            }
            (_, OwnedKind::Batch { .. }) => {
                let e = invalid(
                    Operation::Send,
                    format_args!("a batch needs a batch of requests"),
                );
                return Err(Refused::Error(e, held));
            }
            (held_buf, _) => {
                let (addr, len, lkey) = match (held_buf, kind) {
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
                one = [Sge::new(addr, len, lkey)];
                // A zero-length payload is sent without an SGE.
                let sges = if len == 0 { &one[..0] } else { &one[..] };
                (
                    sges,
                    len as usize,
                    u32::from(!matches!(kind, OwnedKind::Receive)),
                )
            }
        };
        if let Err(e) = self.gate.admit(&self.qp, st, op, sq > 0) {
            return Err(Refused::Error(e, held));
        }
        if !st.room_for(sq > 0, (sq as usize).max(1)) {
            return Err(if sq > 0 {
                Refused::Full(held)
            } else {
                Refused::Error(super::queue_too_full(op, 1, st), held)
            });
        }
        let id = st.next_id();
        let rc = match (kind, &held) {
            (OwnedKind::Receive, _) => {
                let mut req = [RecvRequest::new(id, sges)];
                // The SGE names `held`'s buffer, which `held` keeps
                // allocated and registered (its pool holds the slab). `held`
                // is the buffer's only handle (a `PoolBuf`) and, under the
                // same lock, before anyone else could reap this request,
                // either moves into the request's slot, which gives it up
                // only after the completion is seen, or, if the post fails,
                // comes back only once nothing of the request can still run.
                // SAFETY: by the reasoning just above.
                unsafe { self.qp.post_recv_list(&mut req) }
            }
            (_, Held::Batch(reqs)) => {
                // The list holds the batch's requests only, built on the
                // stack (`fill_list`), not a whole `OWNED_BATCH_MAX` array
                // with its unused entries. Each request is written straight
                // into its place by a builder inlined into the list's loop
                // (not built aside and moved in, a call and a copy per
                // request).
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
                        slot.write(req.kind.send_request(
                            id | BATCH_MEMBER,
                            sges,
                            self.limits.inline_default,
                        ));
                        Ok::<(), Infallible>(())
                    },
                    |wrs| {
                        if let Some(last) = wrs.last_mut() {
                            last.set_wr_id(id);
                            last.set_flags(last.flags() | SendFlags::SIGNALED);
                        }
                        // Every SGE names the memory of a request of `held`
                        // — a `PoolBytes` the NIC only reads, or a read
                        // target's `PoolBuf`, its only handle — which the
                        // pool keeps allocated and registered while `held`
                        // holds it. `held` moves into the batch's slot
                        // below, before the lock is released, and the slot
                        // gives it up only once the last request's
                        // completion has been seen, after which the NIC
                        // touches none of it; if the post fails, it comes
                        // back only once nothing of the batch can still run.
                        // SAFETY: by the reasoning just above.
                        unsafe { Ok(self.qp.post_send_list(wrs)) }
                    },
                );
                match posted {
                    Ok(posted) => posted,
                    Err(never) => match never {},
                }
            }
            _ => {
                // Built in its place in the list, then flagged there (not
                // built aside and moved in: the request is 128 bytes).
                let mut req = [kind.send_request(id, sges, self.limits.inline_default)];
                req[0].set_flags(req[0].flags() | SendFlags::SIGNALED);
                // As for a receive: `held` — a `PoolBytes` the NIC only
                // reads, or for a read target the buffer's only handle —
                // comes back only with the completion this function saw
                // (or, after a failed post, once nothing of it can still
                // run), or moves into the slot before the lock is released.
                // SAFETY: by the reasoning just above.
                unsafe { self.qp.post_send_list(&mut req) }
            }
        };
        if let Err(e) = rc {
            // Part of a batch, or an unknown part, may be on the queue:
            // `held` comes back only once nothing of the request can still
            // run (see `post_failed`).
            let (e, held) = self.post_failed(st, op, len, sq, held, e);
            return Err(Refused::Error(e, held));
        }
        let batch = matches!(kind, OwnedKind::Batch { .. });
        // Only a send-queue request can have completed already (rxe runs
        // a small send inside the post's doorbell): a receive completes
        // only once the peer sends, after this, so looking for its
        // completion would cost a poll per receive.
        if look && sq == 1 && !batch {
            // A completion that is already there is taken before the request
            // is tracked: `held` has not left this function, and goes back
            // with it.
            let outcome = |wc: &_| self.ending.outcome(op, len, wc);
            if let Some(outcome) = st.reap_untracked(|wcs| self.cq.poll(wcs), op, outcome) {
                return Ok((id, Some((outcome, held))));
            }
        }
        if !batch {
            let notify = notify();
            st.track(op, len, sq, Attached { held, notify });
            return Ok((id, None));
        }
        // A batch is tracked before its look: a member's failed completion
        // is recorded in its slot. The waker is given only if it is still
        // in flight after the look.
        let claim = Notify::Claim;
        st.track(
            op,
            len,
            sq,
            Attached {
                held,
                notify: claim,
            },
        );
        if look {
            let taken = st.poll_take(
                id,
                |wcs| self.cq.poll(wcs),
                None,
                |op, len, wc, held| (self.ending.outcome(op, len, wc), std::mem::take(held)),
            );
            if let Ok(Take::Done(r)) = taken {
                return Ok((id, Some(r)));
            }
        }
        st.set_notify(id, notify());
        Ok((id, None))
    }

    /// Posts `kind` over `held`, which moves into the request's slot in the
    /// same critical section as the post, with `notice` saying who learns
    /// of the completion. Allocates nothing (the SGEs and requests live on
    /// the stack). The id, and for a future's submission the outcome if
    /// the post's one look at the completion queue found it complete
    /// already (the memory then comes back at once).
    ///
    /// A future's submission ([`Notice::Task`]) with the send queue full
    /// reaps once and tries again, then registers the room waker (if any)
    /// in the room list under its ticket (renewing an earlier
    /// registration) and refuses with [`Refused::Full`]; once posted, or
    /// refused for good, the task leaves the room list. The other notices
    /// are refused with [`Refused::Full`] at once.
    ///
    /// Inlined: each caller passes one kind of notice, and the others'
    /// branches fold away.
    #[inline(always)]
    pub(crate) fn submit(
        &self,
        kind: OwnedKind,
        held: Held,
        notice: Notice<'_>,
    ) -> Result<(u64, Option<Returned>), Refused> {
        let (mut given, slot_waker, room, task) = match notice {
            Notice::Claim => (Some(Notify::Claim), None, None, false),
            Notice::Callback(cb) => (Some(Notify::Callback(cb)), None, None, false),
            Notice::Task { slot, room } => (None, slot, room, true),
        };
        let outcome = {
            let mut st = self.lock();
            // A future's waker is cloned only for a request that is
            // tracked: one whose completion the post's look already found
            // comes back without it. Without one the slot waits to be
            // claimed by its future's polls.
            let mut notify = || {
                given.take().unwrap_or_else(|| {
                    slot_waker.map_or(Notify::Claim, |w| Notify::Waker(w.clone()))
                })
            };
            let mut outcome = self.post_owned_locked(&mut st, kind, held, &mut notify, task);
            if task {
                if let Err(Refused::Full(held)) = outcome {
                    // Completions may be waiting to free entries.
                    outcome = match st.reap(|wcs| self.cq.poll(wcs)) {
                        Ok(n) if n > 0 => {
                            self.post_owned_locked(&mut st, kind, held, &mut notify, true)
                        }
                        _ => Err(Refused::Full(held)),
                    };
                }
            }
            if let Some((waker, ticket)) = room {
                match &outcome {
                    Err(Refused::Full(_)) => st.wait_for_room(ticket, waker),
                    // It used its turn.
                    Ok(_) => {
                        if let Some(ticket) = ticket.take() {
                            st.leave_room_list(ticket);
                        }
                    }
                    Err(Refused::Error(..)) => {
                        if let Some(ticket) = ticket.take() {
                            st.pass_room_turn(Some(ticket));
                        }
                    }
                }
            }
            outcome
        };
        // A callback's captures are the user's: if the post was refused it
        // is dropped here, after the lock is released.
        drop(given);
        outcome
    }
}
