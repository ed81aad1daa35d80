//! How a request's outcome reads: a completion's success, or the error
//! that names why it failed — the peer's disconnect or the stall
//! watchdog's shutdown, when one of them ended the queue pair, rather than
//! the bare flush the NIC reports.

use super::tracker::Tracker;
use crate::error::{Error, Operation, Result};
use crate::work::WorkSuccess;
use rdma_core::{WcStatus, WorkCompletion};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Why the queue pair was ended, if it was, as its failed requests report.
#[derive(Debug, Default)]
pub(super) struct Ending {
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
}

impl Ending {
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
        Tracker::failure(op, wc)
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
