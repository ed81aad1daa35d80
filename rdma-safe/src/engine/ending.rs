//! How a request's outcome reads: a completion's success, or the error
//! that names why it failed — the peer's disconnect, the stall watchdog's
//! shutdown or the device's asynchronous event, when one of them ended the
//! queue pair, rather than the bare flush the NIC reports.

use super::tracker::Tracker;
use super::watch::Watched;
use crate::error::{Error, Operation, Result};
use crate::work::WorkSuccess;
use rdma_core::{AsyncEvent, WcStatus, WorkCompletion};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Why the queue pair was ended, if it was, as its failed requests report.
#[derive(Debug, Default)]
pub(crate) struct Ending {
    /// Set (before the queue pair is moved to ERR) when the peer of a
    /// connection-manager channel disconnected, or (when the completion is
    /// seen, before any later completion is claimed) when a keepalive
    /// probe ran out of transport retries: failed completions and refused
    /// posts then report [`Error::PeerDisconnected`].
    peer_gone: AtomicBool,
    /// Set (before the queue pair is moved to ERR) when the stall watchdog
    /// shut the channel down after this many nanoseconds without a
    /// completion (0: it did not): the requests it flushed then report
    /// [`Error::Timeout`], not a bare flush — a future or a
    /// [`RecvStream`](crate::owned::RecvStream) on a silent peer ends with
    /// the same error a blocking wait would.
    stalled_nanos: AtomicU64,
    /// The device's events about the queue pair, its CQ, port and device
    /// (set once, when the engine is made).
    watched: OnceLock<Watched>,
    /// The first event that ended the queue pair: its flushed requests
    /// and refused posts report [`Error::DeviceEvent`].
    event: OnceLock<AsyncEvent>,
}

impl Ending {
    /// What the queue pair's port saw of the device's port events.
    pub(crate) fn port_events(&self) -> super::PortEvents {
        self.watched().map(Watched::port_events).unwrap_or_default()
    }

    /// The result of a completion of `op` on `len` bytes.
    #[inline(always)]
    pub(super) fn outcome(
        &self,
        op: Operation,
        len: usize,
        wc: &WorkCompletion,
    ) -> Result<WorkSuccess> {
        if wc.is_success() {
            // Built in place: the data path's result is not moved through
            // a match.
            return Ok(Tracker::success(len, wc));
        }
        Err(self.failure(op, wc))
    }

    /// The error of a failed completion of `op`.
    #[cold]
    fn failure(&self, op: Operation, wc: &WorkCompletion) -> Error {
        if self.peer_gone.load(Ordering::SeqCst) {
            return Error::PeerDisconnected { operation: op };
        }
        let stalled = self.stalled_nanos.load(Ordering::SeqCst);
        if stalled != 0 && wc.status() == WcStatus::WrFlushError {
            // Flushed by the stall watchdog's shutdown: say so.
            return Error::Timeout {
                operation: op,
                timeout: Duration::from_nanos(stalled),
            };
        }
        // A flush (or the device's fatal status) after an event that ends
        // the queue pair: the event is why. Asked of the device too, for a
        // provider that flushes before anyone read its event.
        if matches!(wc.status(), WcStatus::WrFlushError | WcStatus::FatalError) {
            if let Some(event) = self.device_event() {
                return Error::DeviceEvent {
                    operation: op,
                    event,
                };
            }
        }
        Tracker::failure(op, wc)
    }

    /// Gives the queue pair its view of the device's events (once).
    pub(super) fn watch(&self, watched: Watched) {
        let _ = self.watched.set(watched);
    }

    /// The event that ended the queue pair: the one recorded, else the
    /// device's verdict now (draining its pending events, a system call),
    /// recorded. `None` while no event concerns it.
    pub(super) fn device_event(&self) -> Option<AsyncEvent> {
        if let Some(event) = self.event.get() {
            return Some(*event);
        }
        let event = self.watched.get()?.verdict()?;
        Some(*self.event.get_or_init(|| event))
    }

    /// The event recorded as having ended the queue pair, without asking
    /// the device.
    #[inline]
    pub(super) fn ended_by(&self) -> Option<AsyncEvent> {
        self.event.get().copied()
    }

    /// The queue pair's view of the device's events.
    pub(super) fn watched(&self) -> Option<&Watched> {
        self.watched.get()
    }

    /// The peer disconnected (before the queue pair is moved to ERR), or
    /// did not answer a keepalive probe.
    pub(super) fn peer_gone(&self) {
        self.peer_gone.store(true, Ordering::SeqCst);
    }

    /// Whether the peer is known to be gone.
    #[inline]
    pub(super) fn is_peer_gone(&self) -> bool {
        self.peer_gone.load(Ordering::SeqCst)
    }

    /// The stall watchdog is shutting the channel down after `timeout`
    /// without a completion (before the queue pair is moved to ERR).
    pub(super) fn stalled(&self, timeout: Duration) {
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.stalled_nanos.store(nanos, Ordering::SeqCst);
    }
}
