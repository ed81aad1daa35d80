//! The extended QP API: queue pairs created with `ibv_create_qp_ex` and a
//! set of send operations, posted to with the `ibv_wr_*` family (the "new
//! post send" API of `ibv_wr_post(3)`) instead of `ibv_post_send`.
//!
//! ```text
//! QueuePair::builder(..).build_ex(SendOps::SEND | SendOps::RDMA_WRITE)
//!     └─► QueuePairEx ── start() ─► WrBatch ── send/rdma_write/… ─► complete()
//! ```
//!
//! A [`WrBatch`] is the span between `ibv_wr_start` and `ibv_wr_complete`
//! (or `ibv_wr_abort`, which its `Drop` calls if it was not completed): it
//! borrows the queue pair mutably, so one batch is built at a time, as the
//! API requires. Adding a request is `unsafe` for the reason posting is
//! ([`QueuePair::post_send_list`]): the memory its SGEs name is the
//! caller's to keep alive until the completion. Each operation checks that
//! the provider offers it before calling it.
//!
//! Whether a device offers the API is known only by trying:
//! [`build_ex`](QueuePairBuilder::build_ex) fails with `EOPNOTSUPP` (or the
//! provider's errno) where it does not.

use crate::error::{Error, Result};
use crate::qp::QueuePair;
use crate::qp_builder::QueuePairBuilder;
use crate::wr::{SendFlags, Sge};
use crate::wrapper::Wrapper;
use ibverbs_sys as sys;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

bitflags::bitflags! {
    /// The send operations an extended QP is created for
    /// (`enum ibv_qp_create_send_ops_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct SendOps: u64 {
        /// RDMA write.
        const RDMA_WRITE = sys::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE.0 as u64;
        /// RDMA write with immediate data.
        const RDMA_WRITE_WITH_IMM =
            sys::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0 as u64;
        /// Send.
        const SEND = sys::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND.0 as u64;
        /// Send with immediate data.
        const SEND_WITH_IMM = sys::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND_WITH_IMM.0 as u64;
        /// RDMA read.
        const RDMA_READ = sys::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_READ.0 as u64;
    }
}

/// A queue pair created with the extended API; its state transitions,
/// receives and attributes are those of the [`QueuePair`] it holds
/// ([`qp`](Self::qp)).
pub struct QueuePairEx {
    qp: QueuePair,
    ex: NonNull<sys::ibv_qp_ex>,
    ops: SendOps,
}

// SAFETY: the `ibv_qp_ex` is part of the QP's provider object, valid while
// `qp` is; moving the owner to another thread moves nothing the provider
// ties to a thread. Not `Sync`: building a batch needs `&mut self`, and
// nothing else touches `ex`.
unsafe impl Send for QueuePairEx {}

impl QueuePairBuilder {
    /// `ibv_create_qp_ex`—Creates the QP (in the RESET state) for the
    /// extended send API with the operations `ops`, then
    /// `ibv_qp_to_qp_ex`.
    ///
    /// # Errors
    /// The provider's error when it has no extended QP creation or refuses
    /// `ops` (`EOPNOTSUPP`, `EINVAL`); [`Error::Verb`] for
    /// `ibv_qp_to_qp_ex` with `EOPNOTSUPP` when the QP it made has no
    /// extended part.
    pub fn build_ex(self, ops: SendOps) -> Result<QueuePairEx> {
        let mut init = sys::ibv_qp_init_attr_ex {
            send_cq: self.send_cq.as_ptr(),
            recv_cq: self.recv_cq.as_ptr(),
            srq: self.srq.as_ref().map_or(ptr::null_mut(), |s| s.as_ptr()),
            cap: self.raw_caps(),
            qp_type: self.qp_type.to_raw(),
            sq_sig_all: self.sq_sig_all.into(),
            comp_mask: sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0
                | sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0,
            pd: self.pd.as_ptr(),
            send_ops_flags: ops.bits(),
            ..Default::default()
        };
        let ctx = self.pd.context().as_ptr();
        // SAFETY: the context, PD, CQs and SRQ are alive; `init` is valid for
        // reads and writes (actual capacities are written back).
        let ptr = unsafe { sys::ibv_create_qp_ex(ctx, &mut init) };
        // SAFETY: a non-null QP is ours to destroy.
        let raw = unsafe { Wrapper::from_created("ibv_create_qp_ex", ptr) }?;
        let qp = self.finish(raw, init.cap);
        // SAFETY: the QP is alive.
        let ex = unsafe { sys::ibv_qp_to_qp_ex(qp.as_ptr()) };
        let ex =
            NonNull::new(ex).ok_or_else(|| Error::verb("ibv_qp_to_qp_ex", libc::EOPNOTSUPP))?;
        Ok(QueuePairEx { qp, ex, ops })
    }
}

impl QueuePairEx {
    /// The queue pair: its number, state transitions and receive queue.
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The send operations it was created for.
    pub fn send_ops(&self) -> SendOps {
        self.ops
    }

    /// `ibv_wr_start`—Starts a batch of send requests, posted together by
    /// [`WrBatch::complete`].
    pub fn start(&mut self) -> WrBatch<'_> {
        // SAFETY: `ex` belongs to the live QP; no other batch is open (this
        // borrows `self` mutably for the batch's life).
        unsafe { sys::ibv_wr_start(self.ex.as_ptr()) };
        WrBatch {
            ex: self.ex,
            open: true,
            _qp: PhantomData,
        }
    }
}

impl fmt::Debug for QueuePairEx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePairEx")
            .field("qp", &self.qp)
            .field("ops", &self.ops)
            .finish()
    }
}

/// One batch of the extended send API, from `ibv_wr_start` to
/// [`complete`](Self::complete); dropped without completing, it is
/// aborted (`ibv_wr_abort`) and nothing of it is posted.
pub struct WrBatch<'qp> {
    ex: NonNull<sys::ibv_qp_ex>,
    open: bool,
    _qp: PhantomData<&'qp mut QueuePairEx>,
}

impl WrBatch<'_> {
    /// Sets the id and flags of the next request (`qpx->wr_id`,
    /// `qpx->wr_flags`).
    fn header(&mut self, wr_id: u64, flags: SendFlags) {
        // SAFETY: `ex` is alive and this batch is the only user of it.
        unsafe {
            (*self.ex.as_ptr()).wr_id = wr_id;
            (*self.ex.as_ptr()).wr_flags = flags.bits();
        }
    }

    /// Whether the provider filled in the operation `op` reads from
    /// `ibv_qp_ex`.
    fn offers(&self, op: fn(&sys::ibv_qp_ex) -> bool, name: &str) -> Result<()> {
        // SAFETY: `ex` is alive.
        if op(unsafe { self.ex.as_ref() }) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{name}: the QP was not created for it, or the provider lacks it"
            )))
        }
    }

    /// `ibv_wr_set_sge` (one element) or `ibv_wr_set_sge_list`—Gives the
    /// request just added its SGEs.
    ///
    /// One element goes through `ibv_wr_set_sge`, as rdma-core's examples
    /// do: the rxe provider of rdma-core 44 (Debian 12) computes a list's
    /// length as the first element's length times their number (fixed
    /// upstream by "providers/rxe: fix wr_set_sge_list total length", PR
    /// 1744), so lists of unequal elements send the wrong byte count there.
    fn set_sges(&mut self, sges: &[Sge]) -> Result<()> {
        if let [one] = sges {
            self.offers(|e| e.wr_set_sge.is_some(), "ibv_wr_set_sge")?;
            // SAFETY: `ex` is alive and a request was just added.
            unsafe { sys::ibv_wr_set_sge(self.ex.as_ptr(), one.lkey(), one.addr(), one.length()) };
            return Ok(());
        }
        self.offers(|e| e.wr_set_sge_list.is_some(), "ibv_wr_set_sge_list")?;
        // `Sge` is `repr(transparent)` over `ibv_sge`.
        let list = sges.as_ptr().cast::<sys::ibv_sge>();
        // SAFETY: `ex` is alive, a request was just added; `list` is valid
        // for reads of `sges.len()` elements during the call (the provider
        // copies them).
        unsafe { sys::ibv_wr_set_sge_list(self.ex.as_ptr(), sges.len(), list) };
        Ok(())
    }

    /// `ibv_wr_send` and `ibv_wr_set_sge_list`—Adds a send of the
    /// concatenation of `sges`.
    ///
    /// # Safety
    /// As [`QueuePair::post_send_list`]: until the request's completion
    /// has been polled (or the QP destroyed or reset), the memory `sges`
    /// names must stay allocated, registered with the keys given, and
    /// unwritten by anyone else.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the QP was not created with
    /// [`SendOps::SEND`]; nothing is added then.
    pub unsafe fn send(&mut self, wr_id: u64, flags: SendFlags, sges: &[Sge]) -> Result<()> {
        self.offers(|e| e.wr_send.is_some(), "ibv_wr_send")?;
        self.header(wr_id, flags);
        // SAFETY: `ex` is alive, the batch open, the op offered.
        unsafe { sys::ibv_wr_send(self.ex.as_ptr()) };
        self.set_sges(sges)
    }

    /// `ibv_wr_rdma_write` and `ibv_wr_set_sge_list`—Adds an RDMA write
    /// of `sges` to `remote_addr` under `rkey`.
    ///
    /// # Safety
    /// As [`send`](Self::send) for the local memory; the remote range is
    /// checked by the peer's NIC.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the QP was not created with
    /// [`SendOps::RDMA_WRITE`].
    pub unsafe fn rdma_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        sges: &[Sge],
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.offers(|e| e.wr_rdma_write.is_some(), "ibv_wr_rdma_write")?;
        self.header(wr_id, flags);
        // SAFETY: `ex` is alive, the batch open, the op offered.
        unsafe { sys::ibv_wr_rdma_write(self.ex.as_ptr(), rkey, remote_addr) };
        self.set_sges(sges)
    }

    /// `ibv_wr_complete`—Posts every request added since the batch
    /// started, with one doorbell.
    ///
    /// # Errors
    /// The provider's errno (`ENOMEM`: the send queue is full; `EINVAL`: a
    /// request the QP cannot take); none of the batch was posted then.
    pub fn complete(mut self) -> Result<()> {
        self.open = false;
        // SAFETY: `ex` is alive and the batch open.
        let rc = unsafe { sys::ibv_wr_complete(self.ex.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::verb("ibv_wr_complete", rc))
        }
    }

    /// `ibv_wr_abort`—Discards the batch: nothing of it is posted.
    pub fn abort(mut self) {
        self.close();
    }

    fn close(&mut self) {
        if std::mem::take(&mut self.open) {
            // SAFETY: `ex` is alive and the batch open.
            unsafe { sys::ibv_wr_abort(self.ex.as_ptr()) };
        }
    }
}

impl Drop for WrBatch<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

impl fmt::Debug for WrBatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WrBatch").field("open", &self.open).finish()
    }
}
