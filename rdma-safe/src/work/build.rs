//! How each typed send-queue request becomes the verb's request: checked
//! against the queue pair's [`Limits`] and built into a [`SendRequest`].
//! The engine posts every kind through this one trait,
//! [`SendQueueWork`]; nothing here posts.

use crate::atomic::{AtomicOp, AtomicWorkRequest, ATOMIC_SIZE};
use crate::error::{Error, Operation, Result, VerbsError};
use crate::memory::element::{gather_sges, scatter_sges, GatherElement};
use crate::memory::keys::{check_domain, Domain};
use crate::memory::remote::RemoteMemoryRegion;
use crate::work::{ReadWorkRequest, SendWorkRequest, WriteWorkRequest};
use rdma_core::{
    AccessFlags, AddressHandle, MemoryRegion, MemoryWindow, QpCapabilities, QueuePair, SendFlags,
    SendRequest, Sge,
};
use std::ops::Range;

/// What a request may carry, fixed when the queue pair was created.
#[derive(Debug)]
pub(crate) struct Limits {
    /// The capacities the device granted, the queue depths at most what
    /// was asked for (the completion queue was sized for those).
    pub(crate) caps: QpCapabilities,
    /// Payloads up to this size go inline unless a request says otherwise
    /// (what the user asked for, at most what the device granted).
    pub(crate) inline_default: u32,
    /// The queue pair's protection domain, which every element's region
    /// must be registered in.
    pub(crate) domain: Domain,
}

impl Limits {
    /// The limits of a queue pair created with `asked` that was granted
    /// `granted`. Providers may grant more than asked (rxe raises an inline
    /// size of 0 to 16 and may round depths up); the engine keeps to the
    /// depths asked for, which the completion queue was sized for, and
    /// inlines by default only what the caller asked for.
    pub(crate) fn granted(qp: &QueuePair, asked: &QpCapabilities) -> Self {
        let granted = qp.capabilities();
        let mut caps = granted;
        caps.max_send_wr = caps.max_send_wr.min(asked.max_send_wr);
        caps.max_recv_wr = caps.max_recv_wr.min(asked.max_recv_wr);
        Limits {
            caps,
            inline_default: granted.max_inline_data.min(asked.max_inline_data),
            domain: Domain::of(qp.pd()),
        }
    }

    /// Whether a payload of `len` bytes goes inline. A payload forced
    /// inline must fit the queue pair's inline space: checked before
    /// anything is posted, so that no member of a batch can fail inside
    /// the provider after earlier members were posted.
    #[inline]
    pub(crate) fn inline_for(
        &self,
        op: Operation,
        len: usize,
        forced: Option<bool>,
    ) -> Result<bool> {
        match forced {
            None => Ok(len > 0 && len <= self.inline_default as usize),
            Some(true) if len > self.caps.max_inline_data as usize => Err(invalid(
                op,
                format_args!(
                    "{len} bytes forced inline exceed the queue pair's inline limit of {} bytes",
                    self.caps.max_inline_data
                ),
            )),
            Some(on) => Ok(on),
        }
    }

    /// Refuses more than `max` SGEs.
    #[inline]
    pub(crate) fn check_sges(op: Operation, n: usize, max: u32) -> Result<()> {
        if n > max as usize {
            return Err(invalid(
                op,
                format_args!("{n} SGEs exceed the channel's limit of {max}"),
            ));
        }
        Ok(())
    }

    /// Refuses more send-queue SGEs than the queue pair takes, and an SGE
    /// of a region in another protection domain.
    #[inline]
    fn check_send_sges(&self, op: Operation, sges: &[Sge]) -> Result<()> {
        Self::check_sges(op, sges.len(), self.caps.max_send_sge)?;
        check_domain(op, &self.domain, sges)
    }

    /// Refuses more receive SGEs than the queue pair takes, and an SGE of
    /// a region in another protection domain.
    #[inline]
    pub(crate) fn check_receive_sges(&self, sges: &[Sge]) -> Result<()> {
        let op = Operation::Receive;
        Self::check_sges(op, sges.len(), self.caps.max_recv_sge)?;
        check_domain(op, &self.domain, sges)
    }
}

/// A send-queue request, as the engine posts it. `'s` is how long the
/// built request borrows its lists.
pub(crate) trait SendQueueWork<'s> {
    /// The operation of an empty batch of these (for its error).
    const KIND: Operation;

    /// Checks the request against `limits` and builds the verb's request
    /// (its id and signaling are set when it is posted); the bytes it
    /// moves are added to `len`. Inlined into the batches' list loops.
    ///
    /// # Errors
    /// Why the request cannot be posted (nothing was posted).
    fn build(self, limits: &Limits, len: &mut usize) -> Result<(Operation, SendRequest<'s>)>;
}

impl<'wr> SendQueueWork<'wr> for SendWorkRequest<'wr, '_> {
    const KIND: Operation = Operation::Send;

    #[inline(always)]
    fn build(self, limits: &Limits, len: &mut usize) -> Result<(Operation, SendRequest<'wr>)> {
        let op = Operation::Send;
        // The length once: summing even a one-element list is a loop.
        let n = self.len();
        *len += n;
        limits.check_send_sges(op, gather_sges(self.gather))?;
        let mut flags = SendFlags::empty();
        flags.set(SendFlags::SOLICITED, self.solicited);
        flags.set(SendFlags::INLINE, limits.inline_for(op, n, self.inline)?);
        let sges = gather_sges(self.gather);
        Ok((
            op,
            SendRequest::send_or_write(0, sges, None, self.immediate, flags),
        ))
    }
}

impl<'wr> SendQueueWork<'wr> for WriteWorkRequest<'wr, '_> {
    const KIND: Operation = Operation::Write;

    #[inline(always)]
    fn build(self, limits: &Limits, len: &mut usize) -> Result<(Operation, SendRequest<'wr>)> {
        let op = Operation::Write;
        let n = self.len();
        *len += n;
        limits.check_send_sges(op, gather_sges(self.gather))?;
        check_remote_len(op, n, &self.remote)?;
        let flags = if limits.inline_for(op, n, self.inline)? {
            SendFlags::INLINE
        } else {
            SendFlags::empty()
        };
        let remote = Some((self.remote.address(), self.remote.rkey()));
        let sges = gather_sges(self.gather);
        Ok((
            op,
            SendRequest::send_or_write(0, sges, remote, self.immediate, flags),
        ))
    }
}

impl<'s> SendQueueWork<'s> for &'s mut ReadWorkRequest<'_, '_> {
    const KIND: Operation = Operation::Read;

    #[inline(always)]
    fn build(self, limits: &Limits, len: &mut usize) -> Result<(Operation, SendRequest<'s>)> {
        let op = Operation::Read;
        let n = self.len();
        *len += n;
        limits.check_send_sges(op, scatter_sges(self.scatter))?;
        check_remote_len(op, n, &self.remote)?;
        let (addr, rkey) = (self.remote.address(), self.remote.rkey());
        Ok((
            op,
            SendRequest::rdma_read(0, scatter_sges(self.scatter), addr, rkey),
        ))
    }
}

impl<'s> SendQueueWork<'s> for &'s mut AtomicWorkRequest<'_, '_> {
    const KIND: Operation = Operation::FetchAndAdd;

    #[inline(always)]
    fn build(self, limits: &Limits, len: &mut usize) -> Result<(Operation, SendRequest<'s>)> {
        let op = match self.op {
            AtomicOp::CompareAndSwap { .. } => Operation::CompareAndSwap,
            AtomicOp::FetchAndAdd { .. } => Operation::FetchAndAdd,
        };
        let (addr, length, result_len) = (
            self.remote.address(),
            self.remote.length(),
            self.result.len(),
        );
        if result_len != ATOMIC_SIZE
            || addr % ATOMIC_SIZE as u64 != 0
            || length < ATOMIC_SIZE as u64
        {
            return Err(malformed_atomic(op, result_len, addr, length));
        }
        *len += ATOMIC_SIZE;
        let rkey = self.remote.rkey();
        let sges = scatter_sges(std::slice::from_mut(self.result));
        check_domain(op, &limits.domain, sges)?;
        let req = match self.op {
            AtomicOp::CompareAndSwap { compare, swap } => {
                SendRequest::atomic_cmp_swap(0, sges, addr, rkey, compare, swap)
            }
            AtomicOp::FetchAndAdd { add } => {
                SendRequest::atomic_fetch_add(0, sges, addr, rkey, add)
            }
        };
        Ok((op, req))
    }
}

/// A send on an unreliable-datagram queue pair, addressed to a peer's
/// address handle, QP number and QKey.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DatagramSend<'a, 'd> {
    pub(crate) gather: &'a [GatherElement<'d>],
    pub(crate) ah: &'a AddressHandle,
    pub(crate) qpn: u32,
    pub(crate) qkey: u32,
}

impl<'a> SendQueueWork<'a> for DatagramSend<'a, '_> {
    const KIND: Operation = Operation::Send;

    fn build(self, limits: &Limits, len: &mut usize) -> Result<(Operation, SendRequest<'a>)> {
        let op = Operation::Send;
        if self.gather.len() > limits.caps.max_send_sge as usize {
            return Err(invalid(
                op,
                format_args!(
                    "{} SGEs exceed the endpoint's limit of {}",
                    self.gather.len(),
                    limits.caps.max_send_sge
                ),
            ));
        }
        *len += self.gather.iter().map(GatherElement::len).sum::<usize>();
        let sges = gather_sges(self.gather);
        check_domain(op, &limits.domain, sges)?;
        let req = SendRequest::send(0, sges).ud(self.ah, self.qpn, self.qkey);
        Ok((op, req))
    }
}

/// Binding a type 2 memory window to `range` of `mr` under `rkey`: a
/// local operation on the send queue.
#[derive(Debug, Clone)]
pub(crate) struct BindWindow<'a> {
    pub(crate) mw: &'a MemoryWindow,
    pub(crate) rkey: u32,
    pub(crate) mr: &'a MemoryRegion,
    pub(crate) range: Range<u64>,
    pub(crate) access: AccessFlags,
}

impl<'a> SendQueueWork<'a> for BindWindow<'a> {
    const KIND: Operation = Operation::BindWindow;

    fn build(self, _: &Limits, _: &mut usize) -> Result<(Operation, SendRequest<'a>)> {
        let len = self.range.end - self.range.start;
        let (mw, mr) = (self.mw, self.mr);
        let req = SendRequest::bind_mw(0, mw, self.rkey, mr, self.range.start, len, self.access);
        Ok((Operation::BindWindow, req))
    }
}

/// Invalidating a memory window's key: a local operation on the send
/// queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InvalidateKey(pub(crate) u32);

impl SendQueueWork<'static> for InvalidateKey {
    const KIND: Operation = Operation::InvalidateWindow;

    fn build(self, _: &Limits, _: &mut usize) -> Result<(Operation, SendRequest<'static>)> {
        Ok((
            Operation::InvalidateWindow,
            SendRequest::local_inv(0, self.0),
        ))
    }
}

/// Refuses `len` bytes that do not fit `remote`.
#[inline]
pub(crate) fn check_remote_len(
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
/// inliner's budget.
#[cold]
#[inline(never)]
pub(crate) fn invalid(op: Operation, why: std::fmt::Arguments<'_>) -> Error {
    Error::Post {
        operation: op,
        source: VerbsError::InvalidArgument(why.to_string()),
    }
}

#[cold]
fn malformed_atomic(op: Operation, result_len: usize, addr: u64, length: u64) -> Error {
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
