//! `ibv_create_qp`: queue pairs and their state machine
//! (RESET → INIT → RTR → RTS, and ERR).

use crate::ah::AddressVector;
use crate::cq::CompQueue;
use crate::error::{check_rc, Error, PostError, Result};
use crate::mr::AccessFlags;
use crate::pd::ProtectionDomain;
use crate::port::Mtu;
use crate::qp_builder::QpCapabilities;
use crate::srq::SharedReceiveQueue;
use crate::wr::{self, RecvRequest, SendRequest};
#[cfg(not(feature = "fault-injection"))]
use crate::wrapper::deleter;
use crate::wrapper::Wrapper;
use ibverbs_sys as sys;
use std::fmt;
use std::ptr;

#[cfg(not(feature = "fault-injection"))]
deleter!(sys::ibv_qp, ibv_destroy_qp);

// The fault-injection layer's destroy: the oracle forgets the requests a
// destroyed queue pair discarded.
#[cfg(feature = "fault-injection")]
impl crate::wrapper::Deleter for sys::ibv_qp {
    const DESTROY_VERB: &'static str = "ibv_destroy_qp";
    unsafe fn delete(ptr: *mut Self) -> std::ffi::c_int {
        // SAFETY: `ptr` is a live QP (`Deleter::delete`'s contract).
        let qp_num = unsafe { (*ptr).qp_num };
        // SAFETY: forwarded from `Deleter::delete`'s contract.
        let rc = unsafe { sys::ibv_destroy_qp(ptr) };
        if rc == 0 {
            crate::fault::discard_qp(qp_num, true);
        }
        rc
    }
}

/// Transport service of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl QpType {
    pub(crate) fn to_raw(self) -> sys::ibv_qp_type {
        match self {
            QpType::Rc => sys::ibv_qp_type::IBV_QPT_RC,
            QpType::Uc => sys::ibv_qp_type::IBV_QPT_UC,
            QpType::Ud => sys::ibv_qp_type::IBV_QPT_UD,
        }
    }
}

/// State of a QP (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Just created, or reset.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    ReadyToReceive,
    /// Ready to send.
    ReadyToSend,
    /// Send queue drained.
    SendQueueDrained,
    /// Send queue error.
    SendQueueError,
    /// Error: outstanding and new requests complete with `WR_FLUSH_ERR`.
    Error,
    /// A value these headers do not know.
    Unknown(u32),
}

impl QpState {
    fn from_raw(raw: sys::ibv_qp_state) -> Self {
        use sys::ibv_qp_state as S;
        match raw {
            S::IBV_QPS_RESET => QpState::Reset,
            S::IBV_QPS_INIT => QpState::Init,
            S::IBV_QPS_RTR => QpState::ReadyToReceive,
            S::IBV_QPS_RTS => QpState::ReadyToSend,
            S::IBV_QPS_SQD => QpState::SendQueueDrained,
            S::IBV_QPS_SQE => QpState::SendQueueError,
            S::IBV_QPS_ERR => QpState::Error,
            other => QpState::Unknown(other.0),
        }
    }
}

/// Parameters of the INIT → RTR transition of a connected QP.
#[derive(Clone, Copy, Debug)]
pub struct RtrParams {
    /// The peer's QP number.
    pub dest_qp_num: u32,
    /// The first packet sequence number expected from the peer (its send PSN).
    pub rq_psn: u32,
    /// Path MTU (at most the smaller active MTU of the two ports).
    pub path_mtu: Mtu,
    /// Path to the peer (GRH with the peer's GID on RoCE).
    pub av: AddressVector,
    /// RDMA reads/atomics the peer may have outstanding on this QP (RC).
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer (RC), encoded as in the IB spec (12 = 0.64 ms).
    pub min_rnr_timer: u8,
}

impl RtrParams {
    /// Parameters with the usual defaults: MTU 1024, 16 outstanding reads,
    /// RNR timer 12 (0.64 ms).
    pub fn new(dest_qp_num: u32, rq_psn: u32, av: AddressVector) -> Self {
        RtrParams {
            dest_qp_num,
            rq_psn,
            path_mtu: Mtu::Mtu1024,
            av,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
        }
    }
}

/// Parameters of the RTR → RTS transition.
#[derive(Clone, Copy, Debug)]
pub struct RtsParams {
    /// The first packet sequence number this QP sends.
    pub sq_psn: u32,
    /// Local ACK timeout, 4.096 µs · 2^timeout (RC; 14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries before `RETRY_EXC_ERR` (RC, at most 7). Note that
    /// Linux's soft-RoCE (rxe) treats 7 as "retry forever", unlike the IB
    /// specification: a vanished peer is then only noticed by a caller's own
    /// timeout.
    pub retry_cnt: u8,
    /// RNR retries before `RNR_RETRY_EXC_ERR` (RC; 7 = forever).
    pub rnr_retry: u8,
    /// RDMA reads/atomics this QP may have outstanding (RC).
    pub max_rd_atomic: u8,
}

impl RtsParams {
    /// Defaults: timeout 14 (≈67 ms), 7 retries, 7 RNR retries (infinite), 16
    /// outstanding reads.
    pub fn new(sq_psn: u32) -> Self {
        RtsParams {
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        }
    }
}

/// A queue pair. Keeps its PD, CQs and SRQ alive; destroyed on drop.
pub struct QueuePair {
    pub(crate) raw: Wrapper<sys::ibv_qp>,
    pub(crate) caps: QpCapabilities,
    pub(crate) qp_type: QpType,
    pub(crate) pd: ProtectionDomain,
    pub(crate) send_cq: CompQueue,
    pub(crate) recv_cq: CompQueue,
    pub(crate) srq: Option<SharedReceiveQueue>,
}

// SAFETY: QP verbs (post, modify, query, destroy) are thread-safe; providers
// lock each work queue when posting.
unsafe impl Send for QueuePair {}
// SAFETY: as above.
unsafe impl Sync for QueuePair {}

impl QueuePair {
    /// The raw QP, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_qp {
        self.raw.as_ptr()
    }
    /// The QP number peers address.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is alive; `qp_num` never changes.
        unsafe { (*self.as_ptr()).qp_num }
    }
    /// The transport type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// The capacities the provider granted.
    pub fn capabilities(&self) -> QpCapabilities {
        self.caps
    }
    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }
    /// The send CQ.
    pub fn send_cq(&self) -> &CompQueue {
        &self.send_cq
    }
    /// The receive CQ.
    pub fn recv_cq(&self) -> &CompQueue {
        &self.recv_cq
    }
    /// The SRQ, if receives come from one.
    pub fn srq(&self) -> Option<&SharedReceiveQueue> {
        self.srq.as_ref()
    }

    /// `ibv_modify_qp`—Applies the attributes of `attr` selected by `mask`.
    pub fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: sys::ibv_qp_attr_mask) -> Result<()> {
        #[cfg(feature = "fault-injection")]
        let state = (mask.0 & sys::ibv_qp_attr_mask::IBV_QP_STATE.0 != 0).then_some(attr.qp_state);
        #[cfg(feature = "fault-injection")]
        if let Err(errno) = crate::fault::modify(self.qp_num(), state) {
            return Err(Error::verb("ibv_modify_qp", errno));
        }
        // SAFETY: the QP is alive; `attr` is valid for reads.
        let rc = unsafe { sys::ibv_modify_qp(self.as_ptr(), attr, mask.0 as i32) };
        #[cfg(feature = "fault-injection")]
        if rc == 0 {
            crate::fault::modified(self.qp_num(), state);
        }
        check_rc("ibv_modify_qp", rc)
    }

    /// `ibv_query_qp`—The current state.
    pub fn state(&self) -> Result<QpState> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: the QP is alive; out-structs are valid for writes.
        check_rc("ibv_query_qp", unsafe {
            sys::ibv_query_qp(
                self.as_ptr(),
                &mut attr,
                sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
                &mut init,
            )
        })?;
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// RESET → INIT for a connected QP (RC/UC) on `port`, granting peers the
    /// remote `access` of this QP (RDMA read/write/atomic targets).
    pub fn to_init(&self, port: u8, access: AccessFlags) -> Result<()> {
        use sys::ibv_qp_attr_mask as M;
        if self.qp_type == QpType::Ud {
            return Err(Error::InvalidArgument(
                "to_init is for RC/UC QPs; use to_init_ud".into(),
            ));
        }
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: access.bits(),
            ..Default::default()
        };
        self.modify(
            &mut attr,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
        )
    }

    /// RESET → INIT → RTR → RTS for a UD QP on `port` with `qkey`; the QP
    /// sends with PSN `sq_psn`.
    pub fn to_rts_ud(&self, port: u8, qkey: u32, sq_psn: u32) -> Result<()> {
        use sys::ibv_qp_attr_mask as M;
        if self.qp_type != QpType::Ud {
            return Err(Error::InvalidArgument("to_rts_ud is for UD QPs".into()));
        }
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qkey,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_QKEY,
        )?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RTR,
            ..Default::default()
        };
        self.modify(&mut attr, M::IBV_QP_STATE)?;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RTS,
            sq_psn,
            ..Default::default()
        };
        self.modify(&mut attr, M::IBV_QP_STATE | M::IBV_QP_SQ_PSN)
    }

    /// INIT → RTR: connects the receive side to the peer described by `p`.
    pub fn to_rtr(&self, p: &RtrParams) -> Result<()> {
        use sys::ibv_qp_attr_mask as M;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: p.path_mtu.to_raw(),
            dest_qp_num: p.dest_qp_num,
            rq_psn: p.rq_psn & 0x00ff_ffff,
            ah_attr: p.av.to_raw(),
            max_dest_rd_atomic: p.max_dest_rd_atomic,
            min_rnr_timer: p.min_rnr_timer,
            ..Default::default()
        };
        let mut mask = M::IBV_QP_STATE
            | M::IBV_QP_AV
            | M::IBV_QP_PATH_MTU
            | M::IBV_QP_DEST_QPN
            | M::IBV_QP_RQ_PSN;
        if self.qp_type == QpType::Rc {
            mask |= M::IBV_QP_MAX_DEST_RD_ATOMIC | M::IBV_QP_MIN_RNR_TIMER;
        }
        self.modify(&mut attr, mask)
    }

    /// RTR → RTS: enables the send side.
    pub fn to_rts(&self, p: &RtsParams) -> Result<()> {
        use sys::ibv_qp_attr_mask as M;
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RTS,
            sq_psn: p.sq_psn & 0x00ff_ffff,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            max_rd_atomic: p.max_rd_atomic,
            ..Default::default()
        };
        let mut mask = M::IBV_QP_STATE | M::IBV_QP_SQ_PSN;
        if self.qp_type == QpType::Rc {
            mask |= M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_MAX_QP_RD_ATOMIC;
        }
        self.modify(&mut attr, mask)
    }

    /// Moves the QP to ERR: every outstanding and future request completes
    /// with `IBV_WC_WR_FLUSH_ERR`. This is how to stop the NIC from touching
    /// posted buffers without waiting for a peer.
    pub fn to_error(&self) -> Result<()> {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut attr, sys::ibv_qp_attr_mask::IBV_QP_STATE)
    }

    /// Moves the QP to RESET (from any state), discarding queued requests
    /// without completions; connect it again with [`to_init`](Self::to_init).
    pub fn reset(&self) -> Result<()> {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RESET,
            ..Default::default()
        };
        self.modify(&mut attr, sys::ibv_qp_attr_mask::IBV_QP_STATE)
    }

    /// `ibv_destroy_qp`—Destroys the QP now. Dropping it does the same but
    /// can only log a failure; here the caller learns that the QP (and the
    /// work requests still queued on it) may still be alive.
    ///
    /// # Errors
    /// The errno of `ibv_destroy_qp`, with the QP, not destroyed.
    pub fn close(self) -> std::result::Result<(), (Self, Error)> {
        let QueuePair {
            raw,
            caps,
            qp_type,
            pd,
            send_cq,
            recv_cq,
            srq,
        } = self;
        raw.close().map_err(|(raw, err)| {
            let qp = QueuePair {
                raw,
                caps,
                qp_type,
                pd,
                send_cq,
                recv_cq,
                srq,
            };
            (qp, err)
        })
    }

    /// `ibv_post_send`—Posts `wrs`, in order, to the send queue with one
    /// call (one doorbell); see `ibv_post_send(3)`.
    ///
    /// The requests are linked through their `next` fields here; an empty
    /// slice posts nothing. A one-element slice
    /// (`std::slice::from_mut(&mut wr)`) is the single-request path: it
    /// allocates nothing and costs what one `ibv_post_send` costs.
    ///
    /// # Safety
    /// Until each request's completion has been polled (or the QP has been
    /// destroyed, or moved to RESET), the memory its SGEs name must stay
    /// allocated and registered with the keys given, and must not be
    /// written by anyone else — nor read or written, for the scatter targets
    /// of RDMA reads and atomics. An [`INLINE`](crate::SendFlags::INLINE)
    /// request's memory is only read during this call. Remote addresses and
    /// rkeys are checked by the peer's NIC, not by this call.
    ///
    /// # Errors
    /// A [`PostError`] with the errno (`ENOMEM`: the send queue is full;
    /// `EINVAL`: a request the QP cannot take, such as more SGEs or inline
    /// bytes than its capabilities) and how many requests, from the start of
    /// `wrs`, were posted: those will complete, the rest will not.
    #[inline]
    #[cfg_attr(feature = "fault-injection", allow(unreachable_code))]
    pub unsafe fn post_send_list(&self, wrs: &mut [SendRequest<'_>]) -> Result<(), PostError> {
        #[cfg(feature = "fault-injection")]
        // SAFETY: forwarded to the caller.
        return unsafe { crate::fault::post_send(self, wrs) };
        let Some(head) = wr::link(wrs) else {
            return Ok(());
        };
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is alive; `head` is a null-terminated list of
        // well-formed requests whose SGE arrays and AHs are borrowed for the
        // call; the memory they name is the caller's contract.
        let rc = unsafe { sys::ibv_post_send(self.as_ptr(), head, &mut bad) };
        if rc == 0 {
            Ok(())
        } else {
            let n = wrs.len();
            let posted = wr::posted_before(head, n, bad);
            Err(PostError::new("ibv_post_send", rc, posted, n))
        }
    }

    /// `ibv_post_recv`—Posts `wrs`, in order, to the receive queue with one
    /// call; see `ibv_post_recv(3)`. Linked and reported as
    /// [`post_send_list`](Self::post_send_list).
    ///
    /// # Safety
    /// Until each request's completion has been polled (or the QP has been
    /// destroyed, or moved to RESET), the memory its SGEs name must stay
    /// allocated and registered with the keys given, and must not be read
    /// or written by anyone else: the NIC writes an incoming message there.
    ///
    /// # Errors
    /// As [`post_send_list`](Self::post_send_list) (`ENOMEM`: the receive
    /// queue is full; `EINVAL` on a QP that uses an SRQ).
    #[inline]
    #[cfg_attr(feature = "fault-injection", allow(unreachable_code))]
    pub unsafe fn post_recv_list(&self, wrs: &mut [RecvRequest<'_>]) -> Result<(), PostError> {
        #[cfg(feature = "fault-injection")]
        // SAFETY: forwarded to the caller.
        return unsafe { crate::fault::post_recv(self, wrs) };
        let Some(head) = wr::link(wrs) else {
            return Ok(());
        };
        let mut bad = ptr::null_mut();
        // SAFETY: as in `post_send_list`.
        let rc = unsafe { sys::ibv_post_recv(self.as_ptr(), head, &mut bad) };
        if rc == 0 {
            Ok(())
        } else {
            let n = wrs.len();
            let posted = wr::posted_before(head, n, bad);
            Err(PostError::new("ibv_post_recv", rc, posted, n))
        }
    }

    /// `ibv_post_send`—Posts a list of raw send work requests.
    ///
    /// # Safety
    /// Every SGE of every request must name memory that stays allocated and
    /// is not written (nor, for RDMA read targets, read or written) by anyone
    /// else until the request's completion is polled or the QP is destroyed;
    /// for inline requests, only until this call returns. A UD request's
    /// `wr.ud.ah` must be a live address handle of the same PD. `wr` must be a
    /// well-formed, null-terminated list.
    ///
    /// # Errors
    /// The errno of `ibv_post_send` (e.g. `ENOMEM` when the send queue is
    /// full, `EINVAL` for a malformed request); requests before the failing
    /// one were posted.
    #[inline]
    pub unsafe fn post_send(&self, wr: &mut sys::ibv_send_wr) -> Result<()> {
        let mut bad = ptr::null_mut();
        #[cfg(feature = "fault-injection")]
        let queue = crate::fault::Queue::Send(self.qp_num());
        #[cfg(feature = "fault-injection")]
        // SAFETY: `wr` is a well-formed list (the caller's contract).
        let (post, n) = unsafe { crate::fault::record_raw(queue, wr) };
        // SAFETY: the QP is alive; the rest is the caller's contract.
        let rc = unsafe { sys::ibv_post_send(self.as_ptr(), wr, &mut bad) };
        #[cfg(feature = "fault-injection")]
        if rc != 0 {
            crate::fault::unrecord_raw(queue, post, wr, n, bad);
        }
        check_rc("ibv_post_send", rc)
    }

    /// `ibv_post_recv`—Posts a list of receive work requests.
    ///
    /// # Safety
    /// Every SGE must name memory that stays allocated and is not accessed by
    /// anyone else until the request's completion is polled or the QP is
    /// destroyed. `wr` must be a well-formed, null-terminated list.
    #[inline]
    pub unsafe fn post_recv(&self, wr: &mut sys::ibv_recv_wr) -> Result<()> {
        let mut bad = ptr::null_mut();
        #[cfg(feature = "fault-injection")]
        let queue = crate::fault::Queue::Recv(self.qp_num());
        #[cfg(feature = "fault-injection")]
        // SAFETY: `wr` is a well-formed list (the caller's contract).
        let (post, n) = unsafe { crate::fault::record_raw(queue, wr) };
        // SAFETY: the QP is alive; the rest is the caller's contract.
        let rc = unsafe { sys::ibv_post_recv(self.as_ptr(), wr, &mut bad) };
        #[cfg(feature = "fault-injection")]
        if rc != 0 {
            crate::fault::unrecord_raw(queue, post, wr, n, bad);
        }
        check_rc("ibv_post_recv", rc)
    }
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &self.qp_num())
            .field("qp_type", &self.qp_type)
            .field("caps", &self.caps)
            .finish()
    }
}
