//! Admission: whether a post may touch the queue at all. Checked before
//! every post, so that the cases a verb would refuse *after* writing the
//! ring (rxe refuses the doorbell of a queue pair that is not ready to
//! send, and the request stays queued) never reach the verb.

use super::tracker::Tracker;
use crate::error::{Error, Operation, Result, VerbsError};
use rdma_core::{QpState, QueuePair};
use std::sync::atomic::{AtomicU8, Ordering};

/// The receive queue takes requests (INIT or later).
const RQ_READY: u8 = 1;
/// The send queue takes requests (RTS or later).
const SQ_READY: u8 = 2;

/// Which of a queue pair's queues were seen taking requests: once set,
/// admission skips the state query.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    ready: AtomicU8,
}

impl Gate {
    /// Admits a post to the send queue (`send`) or the receive queue of
    /// `qp`: the channel is usable (`st`) and the queue pair is in a state
    /// whose queue takes requests. Once a queue was seen ready, a load;
    /// before, one `ibv_query_qp`.
    ///
    /// # Errors
    /// [`Error::PeerDisconnected`] once the peer is known to be gone,
    /// [`Error::Unusable`] after another failure or shutdown,
    /// [`Error::NotReady`] before the channel is connected, and a
    /// refusal of receives on a channel whose receives come from a shared
    /// receive queue.
    #[inline(always)]
    pub(super) fn admit(
        &self,
        qp: &QueuePair,
        st: &Tracker,
        op: Operation,
        send: bool,
    ) -> Result<()> {
        if let Some(why) = st.unusable() {
            return Err(unusable(op, why, st));
        }
        let need = if send { SQ_READY } else { RQ_READY };
        if self.ready.load(Ordering::Relaxed) & need != 0 {
            return Ok(());
        }
        self.admit_slow(qp, op, send)
    }

    /// Refuses receives on a queue pair whose receives come from a shared
    /// receive queue (checked before a receive's other checks, whose
    /// errors would not say why).
    ///
    /// # Errors
    /// The refusal, naming the shared receive queue.
    #[inline]
    pub(super) fn receives_here(qp: &QueuePair) -> Result<()> {
        if qp.srq().is_none() {
            return Ok(());
        }
        Err(Error::Post {
            operation: Operation::Receive,
            source: VerbsError::InvalidArgument(
                "this channel takes its receives from a shared receive queue; \
                 receive through the SharedReceiveQueue"
                    .into(),
            ),
        })
    }

    #[cold]
    fn admit_slow(&self, qp: &QueuePair, op: Operation, send: bool) -> Result<()> {
        if !send {
            Self::receives_here(qp)?;
        }
        let state = qp.state().map_err(|source| Error::Post {
            operation: op,
            source,
        })?;
        let ready = match state {
            QpState::Reset | QpState::Unknown(_) => 0,
            QpState::Init | QpState::ReadyToReceive => RQ_READY,
            // SQD, SQE and ERR take requests too (ERR flushes them).
            _ => RQ_READY | SQ_READY,
        };
        self.ready.fetch_or(ready, Ordering::Relaxed);
        let need = if send { SQ_READY } else { RQ_READY };
        if ready & need != 0 {
            Ok(())
        } else {
            Err(Error::NotReady {
                operation: op,
                state,
            })
        }
    }

    /// Treats the queue pair as ready to send and receive without asking
    /// the device: posts go to the verb whatever its state. For tests of
    /// what the engine does when a verb fails after queueing (the failure
    /// is then settled soundly; see the `shutdown` module).
    pub(crate) fn assume_ready(&self) {
        self.ready.fetch_or(RQ_READY | SQ_READY, Ordering::Relaxed);
    }
}

/// The refusal of a post of `op` on a queue pair shut down for `why`: the
/// peer's disconnect is said as such, whatever failed first, and so is the
/// device's event that ended it.
#[cold]
fn unusable(operation: Operation, why: &str, st: &Tracker) -> Error {
    if st.peer_gone() {
        return Error::PeerDisconnected { operation };
    }
    if let Some(event) = st.ending().ended_by() {
        return Error::DeviceEvent { operation, event };
    }
    Error::Unusable(why.to_owned())
}
