//! Posting atomics: the checks that keep a malformed atomic from reaching
//! the NIC, and the request built from a valid one.

use super::WorkQueue;
use crate::atomic::{AtomicOp, AtomicWorkRequest, ATOMIC_SIZE};
use crate::error::{IbvError, Operation, TransportError, TransportResult};
use crate::sge::scatter_sges;
use rdma_core::SendRequest;

impl WorkQueue {
    /// Validates an atomic and posts it (signaled, one request).
    ///
    /// Rejected before posting: a result element that is not exactly
    /// [`ATOMIC_SIZE`] bytes (the NIC writes 8 bytes whatever the SGE says
    /// on some devices, and fails the request on others), a remote address
    /// that is not 8-byte aligned (the responder NAKs it and the connection
    /// breaks), and a remote region shorter than 8 bytes (the target would
    /// lie outside the range the peer handed out).
    pub(crate) fn post_atomic(&self, wr: &mut AtomicWorkRequest<'_, '_>) -> TransportResult<u64> {
        let op = match wr.op {
            AtomicOp::CompareAndSwap { .. } => Operation::CompareAndSwap,
            AtomicOp::FetchAndAdd { .. } => Operation::FetchAndAdd,
        };
        let refuse = |why: String| TransportError::Post {
            operation: op,
            source: IbvError::InvalidArgument(why),
        };
        if wr.result.len() != ATOMIC_SIZE {
            return Err(refuse(format!(
                "the result element of an atomic must be exactly {ATOMIC_SIZE} bytes, not {}",
                wr.result.len()
            )));
        }
        let (addr, rkey) = (wr.remote.address(), wr.remote.rkey());
        if addr % ATOMIC_SIZE as u64 != 0 {
            return Err(refuse(format!(
                "the target of an atomic must be {ATOMIC_SIZE}-byte aligned; {addr:#x} is not"
            )));
        }
        if wr.remote.length() < ATOMIC_SIZE as u64 {
            return Err(refuse(format!(
                "the target of an atomic is {ATOMIC_SIZE} bytes; the remote region at {addr:#x} \
                 has only {}",
                wr.remote.length()
            )));
        }
        let sges = scatter_sges(std::slice::from_mut(wr.result));
        let req = match wr.op {
            AtomicOp::CompareAndSwap { compare, swap } => {
                SendRequest::atomic_cmp_swap(0, sges, addr, rkey, compare, swap)
            }
            AtomicOp::FetchAndAdd { add } => {
                SendRequest::atomic_fetch_add(0, sges, addr, rkey, add)
            }
        };
        self.post_sends(op, ATOMIC_SIZE, &mut [req])
    }
}
