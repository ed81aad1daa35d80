//! Creating queue pairs: their capacities and [`QueuePairBuilder`]
//! (`ibv_create_qp`).

use crate::cq::CompQueue;
use crate::error::Result;
use crate::pd::ProtectionDomain;
use crate::qp::{QpType, QueuePair};
use crate::srq::SharedReceiveQueue;
use crate::wrapper::Wrapper;
use ibverbs_sys as sys;
use std::ptr;

/// Queue capacities of a QP (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCapabilities {
    /// Outstanding send requests.
    pub max_send_wr: u32,
    /// Outstanding receive requests.
    pub max_recv_wr: u32,
    /// SGEs per send request.
    pub max_send_sge: u32,
    /// SGEs per receive request.
    pub max_recv_sge: u32,
    /// Bytes that may be sent inline.
    pub max_inline_data: u32,
}

impl Default for QpCapabilities {
    fn default() -> Self {
        QpCapabilities {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 0,
        }
    }
}

/// Builder for a [`QueuePair`]; from [`QueuePair::builder`].
#[derive(Debug)]
pub struct QueuePairBuilder {
    pub(crate) pd: ProtectionDomain,
    pub(crate) qp_type: QpType,
    pub(crate) send_cq: CompQueue,
    pub(crate) recv_cq: CompQueue,
    pub(crate) srq: Option<SharedReceiveQueue>,
    pub(crate) caps: QpCapabilities,
    pub(crate) sq_sig_all: bool,
}

impl QueuePairBuilder {
    /// Capacities (all at once).
    pub fn capabilities(mut self, caps: QpCapabilities) -> Self {
        self.caps = caps;
        self
    }
    /// Outstanding send requests.
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.caps.max_send_wr = n;
        self
    }
    /// Outstanding receive requests.
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.caps.max_recv_wr = n;
        self
    }
    /// SGEs per send request.
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.caps.max_send_sge = n;
        self
    }
    /// SGEs per receive request.
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.caps.max_recv_sge = n;
        self
    }
    /// Bytes that may be sent inline.
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.caps.max_inline_data = n;
        self
    }
    /// Take receives from `srq` instead of the QP's own receive queue.
    pub fn srq(mut self, srq: &SharedReceiveQueue) -> Self {
        self.srq = Some(srq.clone());
        self
    }
    /// Whether every send request generates a completion (otherwise only
    /// those posted with `IBV_SEND_SIGNALED`).
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        self.sq_sig_all = all;
        self
    }

    /// `ibv_create_qp`—Creates the QP (in the RESET state).
    pub fn build(self) -> Result<QueuePair> {
        let mut init = sys::ibv_qp_init_attr {
            send_cq: self.send_cq.as_ptr(),
            recv_cq: self.recv_cq.as_ptr(),
            srq: self.srq.as_ref().map_or(ptr::null_mut(), |s| s.as_ptr()),
            cap: self.raw_caps(),
            qp_type: self.qp_type.to_raw(),
            sq_sig_all: self.sq_sig_all.into(),
            ..Default::default()
        };
        #[cfg(feature = "fault-injection")]
        let at_most = crate::fault::qp_caps(&mut init.cap)
            .map_err(|errno| crate::Error::verb("ibv_create_qp", errno))?;
        // SAFETY: the PD, CQs and SRQ are alive; `init` is valid for reads and
        // writes (actual capacities are written back).
        let ptr = unsafe { sys::ibv_create_qp(self.pd.as_ptr(), &mut init) };
        // SAFETY: a non-null QP is ours to destroy.
        let raw = unsafe { Wrapper::from_created("ibv_create_qp", ptr) }?;
        #[cfg(feature = "fault-injection")]
        {
            if let Some(at_most) = at_most {
                crate::fault::clamp_caps(&mut init.cap, at_most);
            }
            if let Some(srq) = &self.srq {
                // SAFETY: the QP is alive; `qp_num` never changes.
                let qp_num = unsafe { (*raw.as_ptr()).qp_num };
                crate::fault::attach_srq(qp_num, srq.as_ptr() as usize);
            }
        }
        Ok(self.finish(raw, init.cap))
    }

    /// The capacities to ask for (no receive queue with an SRQ).
    pub(crate) fn raw_caps(&self) -> sys::ibv_qp_cap {
        let own_rq = self.srq.is_none();
        sys::ibv_qp_cap {
            max_send_wr: self.caps.max_send_wr,
            max_recv_wr: if own_rq { self.caps.max_recv_wr } else { 0 },
            max_send_sge: self.caps.max_send_sge,
            max_recv_sge: if own_rq { self.caps.max_recv_sge } else { 0 },
            max_inline_data: self.caps.max_inline_data,
        }
    }

    /// The queue pair around `raw`, created from this builder and granted
    /// `c`.
    pub(crate) fn finish(self, raw: Wrapper<sys::ibv_qp>, c: sys::ibv_qp_cap) -> QueuePair {
        QueuePair {
            raw,
            caps: QpCapabilities {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
            qp_type: self.qp_type,
            pd: self.pd,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
        }
    }
}

impl QueuePair {
    /// A builder for a QP of type `qp_type` in `pd`, completing sends to
    /// `send_cq` and receives to `recv_cq` (which may be the same CQ).
    pub fn builder(
        pd: &ProtectionDomain,
        qp_type: QpType,
        send_cq: &CompQueue,
        recv_cq: &CompQueue,
    ) -> QueuePairBuilder {
        QueuePairBuilder {
            pd: pd.clone(),
            qp_type,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            srq: None,
            caps: QpCapabilities::default(),
            sq_sig_all: false,
        }
    }
}
