//! The keepalive: a probe the engine posts itself when a queue pair with
//! a keepalive interval has been quiet that long, so that a dead peer is
//! found by the transport even when nothing of the user's is on the send
//! queue (see the tracker's `liveness` module for when a probe is due).
//!
//! The probe is a zero-length RDMA write without a scatter/gather element
//! and with remote key 0, as librdmacm's rsocket keepalive posts: it
//! touches no memory on either side (a zero-length RDMA operation checks
//! no key, IBA C9-88), and the peer's NIC acknowledges it without the
//! peer's software. It is signaled (its completion frees its send-queue
//! entry in the tracker's count), and delivered to nobody: a success is a
//! completion like any other, which starts the next quiet period; a
//! retry failure marks the peer gone (see [`Ending`](super::ending)).
//!
//! Probes are posted only from the watchdog's looks, which read the clock
//! anyway: the completion driver's rounds, the busy-polling futures'
//! watchdog, and a blocking wait's state queries. Never from a poll.

use super::tracker::{Keepalive, Tracker};
use super::WorkQueue;
use crate::error::Operation;
use crate::work::Held;
use rdma_core::SendRequest;
use std::time::{Duration, Instant};

impl WorkQueue {
    /// Sets the keepalive interval (`None` or zero: no probes).
    pub(crate) fn set_keepalive(&self, interval: Option<Duration>) {
        self.lock().set_keepalive(interval);
    }

    /// The keepalive interval.
    pub(crate) fn keepalive(&self) -> Option<Duration> {
        self.lock().keepalive()
    }

    /// The keepalive's look at `now` (a time the caller read): posts a
    /// probe if one is due. When the next one will be, if the keepalive
    /// waits for a quiet period to end.
    pub(super) fn keep_alive(&self, now: Instant) -> Option<Instant> {
        self.keep_alive_locked(&mut self.lock(), now)
    }

    /// [`keep_alive`](Self::keep_alive) with the lock held.
    pub(super) fn keep_alive_locked(&self, st: &mut Tracker, now: Instant) -> Option<Instant> {
        match st.keepalive_due(now) {
            Keepalive::Off => None,
            Keepalive::At(due) => Some(due),
            Keepalive::Due => {
                self.post_probe(st);
                None
            }
        }
    }

    /// Posts the probe, if the send queue takes it now (connected, usable,
    /// room); otherwise the next look tries again.
    fn post_probe(&self, st: &mut Tracker) {
        let op = Operation::Write;
        if self.gate.admit(&self.qp, st, op, true).is_err() || !st.room_for(true, 1) {
            return;
        }
        let mut req = [SendRequest::rdma_write(st.next_id(), &[], 0, 0).signaled()];
        // SAFETY: the request has no scatter/gather element, so the NIC
        // reads no local memory for it, and a zero-length RDMA write
        // writes no remote memory.
        match unsafe { self.qp.post_send_list(&mut req) } {
            Ok(()) => st.track_probe(),
            Err(e) => {
                // Settled as any post that may have queued something.
                let (e, _) = self.post_failed(st, op, 0, 1, Held::None, e);
                st.later().log(
                    log::Level::Warn,
                    format_args!("posting a keepalive probe failed: {e}"),
                );
            }
        }
    }
}
