//! Posting atomics: the checks that keep a malformed atomic from reaching
//! the NIC, and the request built from a valid one.

use super::{with_list, WorkQueue};
use crate::atomic::{AtomicOp, AtomicWorkRequest, ATOMIC_SIZE};
use crate::error::{Error, Operation, Result, VerbsError};
use crate::memory::element::scatter_sges;
use crate::work::WorkSuccess;
use rdma_core::SendRequest;
use std::time::Duration;

impl WorkQueue {
    /// Validates an atomic and posts it (signaled, one request).
    ///
    /// Rejected before posting: a result element that is not exactly
    /// [`ATOMIC_SIZE`] bytes (the NIC writes 8 bytes whatever the SGE says
    /// on some devices, and fails the request on others), a remote address
    /// that is not 8-byte aligned (the responder NAKs it and the connection
    /// breaks), and a remote region shorter than 8 bytes (the target would
    /// lie outside the range the peer handed out).
    pub(crate) fn post_atomic(&self, wr: &mut AtomicWorkRequest<'_, '_>) -> Result<u64> {
        let op = check(wr)?;
        self.post_sends(op, ATOMIC_SIZE, &mut [request(wr)])
    }

    /// Validates an atomic, posts it and waits for its completion (the
    /// blocking call's path; see [`post_sends_and_wait`](Self::post_sends_and_wait)).
    pub(crate) fn post_atomic_and_wait(
        &self,
        wr: &mut AtomicWorkRequest<'_, '_>,
        timeout: Duration,
    ) -> Result<WorkSuccess> {
        let op = check(wr)?;
        self.post_sends_and_wait(op, ATOMIC_SIZE, &mut [request(wr)], timeout)
    }

    /// Validates every atomic of `wrs` and posts them as one list (one
    /// doorbell), only the last signaled: the send queue completes in order,
    /// so the last completion covers them all. Nothing is posted if one is
    /// malformed. The list is built on the stack (see [`with_list`]).
    pub(crate) fn post_atomic_batch(&self, wrs: &mut [AtomicWorkRequest<'_, '_>]) -> Result<u64> {
        let op = check_all(wrs)?;
        let len = wrs.len() * ATOMIC_SIZE;
        with_list(wrs.iter_mut().map(request), |reqs| {
            self.post_sends(op, len, reqs)
        })
    }

    /// Validates `wrs`, posts them as one list and waits for the batch.
    pub(crate) fn post_atomic_batch_and_wait(
        &self,
        wrs: &mut [AtomicWorkRequest<'_, '_>],
        timeout: Duration,
    ) -> Result<WorkSuccess> {
        let op = check_all(wrs)?;
        let len = wrs.len() * ATOMIC_SIZE;
        with_list(wrs.iter_mut().map(request), |reqs| {
            self.post_sends_and_wait(op, len, reqs, timeout)
        })
    }
}

/// Validates every atomic of `wrs` (nothing is built if one is malformed);
/// the operation of the last names the batch.
fn check_all(wrs: &[AtomicWorkRequest<'_, '_>]) -> Result<Operation> {
    let mut op = Operation::FetchAndAdd;
    for wr in wrs {
        op = check(wr)?;
    }
    Ok(op)
}

/// Validates an atomic: its operation, or why it is refused. A few
/// comparisons; the message is built only when one fails.
#[inline]
fn check(wr: &AtomicWorkRequest<'_, '_>) -> Result<Operation> {
    let op = match wr.op {
        AtomicOp::CompareAndSwap { .. } => Operation::CompareAndSwap,
        AtomicOp::FetchAndAdd { .. } => Operation::FetchAndAdd,
    };
    let (addr, length, result_len) = (wr.remote.address(), wr.remote.length(), wr.result.len());
    if result_len != ATOMIC_SIZE || addr % ATOMIC_SIZE as u64 != 0 || length < ATOMIC_SIZE as u64 {
        return Err(malformed(op, result_len, addr, length));
    }
    Ok(op)
}

/// The request of an atomic that passed [`check`].
#[inline]
fn request<'a>(wr: &'a mut AtomicWorkRequest<'_, '_>) -> SendRequest<'a> {
    let (addr, rkey) = (wr.remote.address(), wr.remote.rkey());
    let sges = scatter_sges(std::slice::from_mut(wr.result));
    match wr.op {
        AtomicOp::CompareAndSwap { compare, swap } => {
            SendRequest::atomic_cmp_swap(0, sges, addr, rkey, compare, swap)
        }
        AtomicOp::FetchAndAdd { add } => SendRequest::atomic_fetch_add(0, sges, addr, rkey, add),
    }
}
/// Why an atomic is refused: its result element is not [`ATOMIC_SIZE`]
/// bytes, its target is misaligned, or the remote region is too short.
#[cold]
fn malformed(op: Operation, result_len: usize, addr: u64, length: u64) -> Error {
    let why = if result_len != ATOMIC_SIZE {
        format!(
            "the result element of an atomic must be exactly {ATOMIC_SIZE} bytes, not {result_len}"
        )
    } else if addr % ATOMIC_SIZE as u64 != 0 {
        format!("the target of an atomic must be {ATOMIC_SIZE}-byte aligned; {addr:#x} is not")
    } else {
        format!(
            "the target of an atomic is {ATOMIC_SIZE} bytes; the remote region at {addr:#x} \
             has only {length}"
        )
    };
    Error::Post {
        operation: op,
        source: VerbsError::InvalidArgument(why),
    }
}
