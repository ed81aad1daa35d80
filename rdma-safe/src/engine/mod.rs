//! The engine: one queue pair, its completion queue, the building and
//! posting of every work request, and the tracking of their completions.
//!
//! [`WorkQueue`] is the one place that turns a typed work request into a
//! posted one ([`post`]; owning requests in [`owned`], receives through
//! [`WorkQueue::post_receives`]) and a completion into a result
//! ([`tracker`]; claimed as a [`claim`] kind says, in [`wait`]). The façade types — [`Channel`],
//! scopes, [`PendingWork`] — borrow or share it; it never refers to them.
//!
//! Every post passes [`gate`]'s admission first (usable channel, queue
//! pair state), and a failed post gives memory back or ends a borrow only
//! as the [`shutdown`] module's rule says: at once when the verb proved
//! nothing was queued, otherwise after the channel was shut down and
//! drained (or reset).
//!
//! [`Channel`]: crate::Channel
//! [`PendingWork`]: crate::PendingWork

mod attached;
mod claim;
mod clock;
mod completions;
mod ending;
mod gate;
mod later;
mod list;
mod owned;
mod post;
mod room;
mod shutdown;
mod slots;
mod srq;
mod tracker;
mod wait;
mod watch;

pub use watch::PortEvents;
pub(crate) use watch::{DeviceWatch, Watched};

pub(crate) use attached::Notify;
pub(crate) use claim::{Look, Outcome, WithMemory};
pub(crate) use completions::{Completions, SharedCq};
pub(crate) use list::{fill_list, with_list, Receives, STACK_LIST};
pub(crate) use list::{RECEIVES_PER_CALL, SHORT_RECEIVES};
pub(crate) use owned::{Notice, Refused, Returned};
pub(crate) use srq::{Polled, SrqQueue};
pub(crate) use wait::{until, Abandon, Ids, BOUNDED};

use crate::error::{Error, Operation, Result, VerbsError};
use crate::pool::PoolBuf;
use crate::work::build::Limits;
use crate::work::Held;
use attached::Attached;
use ending::Ending;
use gate::Gate;
use later::Locked;
use parking_lot::Mutex;
use rdma_core::{QueuePair, RecvRequest};
use std::ops::Range;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;
pub(crate) use tracker::Counters;
use tracker::Tracker;
#[cfg(feature = "fault-injection")]
pub(crate) use tracker::BATCH_MEMBER;

/// A reliable-connected queue pair with its completion tracking. Shared by
/// a channel, its pending work and its scopes (`Arc` or borrow): every
/// method takes `&self`, and the tracking state sits behind one lock.
#[derive(Debug)]
pub(crate) struct WorkQueue {
    /// Declared before `cq`: the queue pair is destroyed first, so a
    /// shared CQ's reservation is given back only when nothing more can
    /// complete on it. Read by the façade for connecting it: posting to it
    /// or moving it to a state other than RTR/RTS behind the engine's back
    /// would break the tracking that decides when borrowed memory is
    /// released.
    pub(crate) qp: QueuePair,
    /// Where the queue pair's completions come from (the façade arms the
    /// CQ and sleeps on its channel).
    pub(crate) cq: Completions,
    /// Sleep on the CQ's completion channel instead of spinning.
    events: bool,
    pub(crate) limits: Limits,
    state: Mutex<Tracker>,
    /// Why the queue pair was ended, for its failed requests' errors
    /// (shared with the tracker, which marks a peer that did not answer a
    /// keepalive probe), with the device's async events about it.
    pub(crate) ending: Arc<Ending>,
    pub(crate) gate: Gate,
    /// Polls by busy-polling waits that found nothing (paces the stall
    /// watchdog's clock reads).
    idle_polls: AtomicU32,
    /// Memory the queue pair's receives may write that lives outside the
    /// engine (a shared receive queue's slots): dropped after `qp`, so it
    /// outlives every use the NIC can make of it through this queue pair.
    _keep_alive: Option<Arc<dyn KeepAlive>>,
}

/// Something a [`WorkQueue`] keeps alive for its queue pair.
pub(crate) trait KeepAlive: Send + Sync + std::fmt::Debug {}
impl<T: Send + Sync + std::fmt::Debug> KeepAlive for T {}

impl WorkQueue {
    pub(crate) fn new(
        qp: QueuePair,
        cq: Completions,
        events: bool,
        limits: Limits,
        watch: Watched,
        keep_alive: Option<Arc<dyn KeepAlive>>,
    ) -> Self {
        let sq_capacity = limits.caps.max_send_wr as usize;
        let rq_capacity = limits.caps.max_recv_wr as usize;
        let tracker = Tracker::new(sq_capacity, rq_capacity);
        let ending = tracker.ending().clone();
        watch.set_queue(qp.qp_num(), Some(cq.cq_id()));
        ending.watch(watch);
        WorkQueue {
            qp,
            cq,
            events,
            limits,
            state: Mutex::new(tracker),
            ending,
            gate: Gate::default(),
            idle_polls: AtomicU32::new(0),
            _keep_alive: keep_alive,
        }
    }

    /// Records that the peer disconnected, then moves the queue pair to ERR
    /// so that every pending request is flushed at once; each then reports
    /// [`Error::PeerDisconnected`], whichever API waits for it.
    ///
    /// # Errors
    /// The error of moving the queue pair to ERR.
    pub(crate) fn peer_disconnected(&self) -> rdma_core::Result<()> {
        self.ending.peer_gone();
        self.qp.to_error()
    }

    /// The tracker, locked; the wakers it collects meanwhile run once the
    /// lock is released (see `later`).
    #[inline]
    fn lock(&self) -> Locked<'_> {
        // No user code runs under the lock, and every update is a single
        // insert/remove: a panic while holding it (an allocation failure
        // aside, none is known) leaves consistent state, so the lock has no
        // poisoning.
        Locked::new(self.state.lock())
    }

    /// Posts the receives of `list` — one, a batch into borrowed memory,
    /// or pool buffers each received into whole — as one list with one
    /// `ibv_post_recv` call, after giving them their ids (consecutive).
    /// Receives complete one by one, in order, each with its own
    /// completion. Every receive that was posted is tracked, with the
    /// bytes its scatter list holds, whether or not the list was posted
    /// whole; the returned range names them, and the error (if any) is
    /// returned beside them. A failure that does not say which were posted
    /// is settled (see the `shutdown` module) and names none.
    ///
    /// A posted receive's pool buffer moves into its slot under this lock
    /// (its entry of `list` is taken); the others stay, and after a settled
    /// failure every buffer is put back. The list is built on the stack
    /// (see [`with_list`]; a single receive's is an array of one): posting
    /// costs the allocator nothing.
    ///
    /// As a provider would, only as many receives as the receive queue has
    /// room for are posted (the first of the list); the rest are refused
    /// with an error beside the posted ones.
    pub(crate) fn post_receives<L: Receives + ?Sized>(
        &self,
        list: &mut L,
    ) -> (Range<u64>, Result<()>) {
        let refuse = |e: Error| (0..0, Err(e));
        if list.len() == 0 {
            return refuse(Error::Post {
                operation: Operation::Receive,
                source: VerbsError::InvalidArgument("empty batch".into()),
            });
        }
        if let Err(e) = Gate::receives_here(&self.qp) {
            return refuse(e);
        }
        if let Err(e) = list.check(&self.limits) {
            return refuse(e);
        }
        list.lend(|reqs, owned| {
            let mut st = self.lock();
            if let Err(e) = self.gate.admit(&self.qp, &st, Operation::Receive, false) {
                return (0..0, Err(e));
            }
            // Receives beyond the queue's room are refused (counted here,
            // the error built only if there are any).
            let fits = reqs.len().min(st.receive_room());
            let refused = reqs.len() - fits;
            let reqs = &mut reqs[..fits];
            if reqs.is_empty() {
                return (
                    0..0,
                    Err(queue_too_full(Operation::Receive, refused as u32, &st)),
                );
            }
            let first = st.next_id();
            for (id, req) in (first..).zip(reqs.iter_mut()) {
                req.set_wr_id(id);
            }
            // Every SGE of `reqs` names memory that nothing else reaches
            // until the engine has seen the request's completion (see
            // `Receives`): a scatter element's, borrowed until the
            // completion is claimed, or a pool buffer of `owned`, which
            // moves into its request's slot below, under this lock. A
            // receive the verb did not queue leaves at once; if the verb
            // does not say which it queued, the channel is shut down and
            // drained before any buffer comes back or any borrow ends.
            // SAFETY: by the reasoning just above.
            let posted = match unsafe { self.qp.post_recv_list(reqs) } {
                Ok(()) => reqs.len(),
                Err(e) => match e.posted() {
                    Some(k) if k < reqs.len() => {
                        track_receives(&mut st, &reqs[..k], owned);
                        let e = Error::Post {
                            operation: Operation::Receive,
                            source: e.into(),
                        };
                        return (first..st.next_id(), Err(e));
                    }
                    _ => {
                        // Not said: track them all, settle, forget them
                        // (giving owned buffers back).
                        track_receives(&mut st, reqs, owned);
                        let ids = first..st.next_id();
                        self.settle_tracked(&mut st, Operation::Receive, ids.clone(), &e);
                        for (k, id) in ids.enumerate() {
                            if let (Held::Unique(b), Some(entry)) =
                                (st.forget(id), owned.get_mut(k))
                            {
                                *entry = Some(b);
                            }
                        }
                        let source = e.into();
                        let e = Error::Post {
                            operation: Operation::Receive,
                            source,
                        };
                        return (first..first, Err(e));
                    }
                },
            };
            track_receives(&mut st, &reqs[..posted], owned);
            let ids = first..st.next_id();
            if refused > 0 {
                return (
                    ids,
                    Err(queue_too_full(Operation::Receive, refused as u32, &st)),
                );
            }
            (ids, Ok(()))
        })
    }

    /// Sets the keepalive interval (`None` or zero: no probes; see the
    /// tracker's `liveness` module).
    pub(crate) fn set_keepalive(&self, interval: Option<Duration>) {
        self.lock().set_keepalive(interval);
    }

    /// The queue's status, read under one lock: the tracker's counters,
    /// the keepalive interval, and why the channel is unusable, if it is.
    pub(crate) fn status(&self) -> Status {
        let st = self.lock();
        Status {
            counters: st.counters(),
            keepalive: st.keepalive(),
            unusable: st.unusable().map(str::to_owned),
        }
    }
}

/// What [`WorkQueue::status`] reads.
#[derive(Debug, Clone)]
pub(crate) struct Status {
    pub(crate) counters: Counters,
    /// The keepalive interval (`None`: no probes).
    pub(crate) keepalive: Option<Duration>,
    /// Why the channel no longer carries work, once it does not.
    pub(crate) unusable: Option<String>,
}

/// Tracks the receives `reqs`, just posted with consecutive ids, each
/// owning the buffer in its place of `owned` if there is one (the entry is
/// taken). Inlined: for a single receive (an array of one) the loop folds
/// away.
#[inline(always)]
fn track_receives(st: &mut Tracker, reqs: &[RecvRequest<'_>], owned: &mut [Option<PoolBuf>]) {
    for (k, req) in reqs.iter().enumerate() {
        let held = owned
            .get_mut(k)
            .and_then(Option::take)
            .map_or(Held::None, Held::Unique);
        let att = Attached {
            held,
            notify: Notify::Claim,
        };
        st.track(Operation::Receive, receive_len(req), 0, att);
    }
}

/// The bytes a receive's scatter list holds: its capacity, as
/// [`ReceiveWorkRequest::len`](crate::ReceiveWorkRequest::len) counts it.
#[inline]
fn receive_len(req: &RecvRequest<'_>) -> usize {
    req.sges().iter().map(|sge| sge.length() as usize).sum()
}

/// The error of `n` requests that do not fit their queue (cold: built only
/// when refusing).
#[cold]
pub(super) fn queue_too_full(op: Operation, n: u32, st: &Tracker) -> Error {
    let send = op != Operation::Receive;
    let queue = if send { "send" } else { "receive" };
    let (used, size) = st.queue_use(send);
    Error::Post {
        operation: op,
        source: rdma_core::Error::InvalidArgument(format!(
            "{n} more requests do not fit the {queue} queue ({used} of {size} entries in use)"
        )),
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
            self.shut_down(None, "the channel was dropped with work in flight");
        }
    }
}
