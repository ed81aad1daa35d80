//! Work completions: what a completion queue returns for each finished request.

use crate::error::{Error, Result};
use ibverbs_sys as sys;
use std::fmt;

macro_rules! wc_status {
    ($( $variant:ident = $c:ident, $name:literal, $hint:literal; )*) => {
        /// Status of a work completion (`enum ibv_wc_status`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum WcStatus {
            $(
                #[doc = concat!("`", stringify!($c), "`: ", $hint)]
                $variant,
            )*
            /// A status these headers do not know.
            Unknown(u32),
        }

        impl WcStatus {
            /// Converts the raw status.
            pub fn from_raw(raw: sys::ibv_wc_status) -> Self {
                $( if raw == sys::ibv_wc_status::$c { return WcStatus::$variant; } )*
                WcStatus::Unknown(raw.0)
            }

            /// The raw status.
            pub fn to_raw(self) -> sys::ibv_wc_status {
                match self {
                    $( WcStatus::$variant => sys::ibv_wc_status::$c, )*
                    WcStatus::Unknown(raw) => sys::ibv_wc_status(raw),
                }
            }

            /// The C enumerator's name, e.g. `"IBV_WC_REM_ACCESS_ERR"`.
            pub fn name(self) -> &'static str {
                match self {
                    $( WcStatus::$variant => stringify!($c), )*
                    WcStatus::Unknown(_) => "IBV_WC_<unknown>",
                }
            }

            /// `ibv_wc_status_str`'s description, e.g. `"remote access error"`.
            pub fn description(self) -> &'static str {
                match self {
                    $( WcStatus::$variant => $name, )*
                    WcStatus::Unknown(_) => "unknown status",
                }
            }

            /// One line on the usual cause of this status.
            pub fn hint(self) -> &'static str {
                match self {
                    $( WcStatus::$variant => $hint, )*
                    WcStatus::Unknown(_) => "status not known to these headers",
                }
            }
        }
    };
}

wc_status! {
    Success = IBV_WC_SUCCESS, "success", "the operation completed";
    LocalLengthError = IBV_WC_LOC_LEN_ERR, "local length error", "a receive buffer was smaller than the incoming message, or a message exceeded the port's max size";
    LocalQpOperationError = IBV_WC_LOC_QP_OP_ERR, "local QP operation error", "the work request was invalid for this QP (e.g. too many SGEs, inline data too large); rxe also reports a receive buffer smaller than the incoming message this way";
    LocalEecOperationError = IBV_WC_LOC_EEC_OP_ERR, "local EE context operation error", "internal EE context error (RD only)";
    LocalProtectionError = IBV_WC_LOC_PROT_ERR, "local protection error", "an SGE lies outside its memory region, or its lkey is wrong, or the MR lacks local write for a receive/read target";
    WrFlushError = IBV_WC_WR_FLUSH_ERR, "Work Request Flushed Error", "the QP was in the error state (moved there by an earlier failure or on purpose), so the request was flushed without executing";
    MemoryWindowBindError = IBV_WC_MW_BIND_ERR, "memory management operation error", "a memory window bind failed (bad MR, access rights or range)";
    BadResponseError = IBV_WC_BAD_RESP_ERR, "bad response error", "the responder sent an unexpected transport response";
    LocalAccessError = IBV_WC_LOC_ACCESS_ERR, "local access error", "a protection error on local data during an RDMA read response or atomic";
    RemoteInvalidRequestError = IBV_WC_REM_INV_REQ_ERR, "remote invalid request error", "the peer rejected the request: message larger than its receive buffer, opcode it does not support, or bad length";
    RemoteAccessError = IBV_WC_REM_ACCESS_ERR, "remote access error", "wrong rkey, a remote range outside the peer's memory region, or access (read/write/atomic) not granted at registration";
    RemoteOperationError = IBV_WC_REM_OP_ERR, "remote operation error", "the responder could not complete the operation (e.g. its receive queue overflowed or its SGE was bad)";
    RetryExceeded = IBV_WC_RETRY_EXC_ERR, "transport retry counter exceeded", "the peer did not acknowledge: it is gone, its QP is not in RTR/RTS, or the address/GID is wrong";
    RnrRetryExceeded = IBV_WC_RNR_RETRY_EXC_ERR, "RNR retry counter exceeded", "the peer had no receive posted (receiver not ready) for longer than rnr_retry allows";
    LocalRddViolation = IBV_WC_LOC_RDD_VIOL_ERR, "local RDD violation error", "RD domain violation (RD only)";
    RemoteInvalidRdRequest = IBV_WC_REM_INV_RD_REQ_ERR, "remote invalid RD request", "invalid RD request (RD only)";
    RemoteAbortError = IBV_WC_REM_ABORT_ERR, "aborted error", "the responder aborted the operation";
    InvalidEecnError = IBV_WC_INV_EECN_ERR, "invalid EE context number", "invalid EE context number (RD only)";
    InvalidEecStateError = IBV_WC_INV_EEC_STATE_ERR, "invalid EE context state", "invalid EE context state (RD only)";
    FatalError = IBV_WC_FATAL_ERR, "fatal error", "the device hit a fatal error";
    ResponseTimeoutError = IBV_WC_RESP_TIMEOUT_ERR, "response timeout error", "the responder did not answer in time";
    GeneralError = IBV_WC_GENERAL_ERR, "general error", "a provider-specific error; see the vendor error";
    TagMatchingError = IBV_WC_TM_ERR, "TM error", "tag matching error";
    TagMatchingRendezvousIncomplete = IBV_WC_TM_RNDV_INCOMPLETE, "TM software rendezvous", "tag matching rendezvous incomplete";
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WcStatus::Unknown(raw) => write!(f, "IBV_WC_<{raw}>"),
            s => write!(f, "{} ({})", s.name(), s.description()),
        }
    }
}

/// The operation a work completion reports (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A send (or send with immediate/invalidate) finished.
    Send,
    /// An RDMA write (or write with immediate) finished on the requester.
    RdmaWrite,
    /// An RDMA read finished.
    RdmaRead,
    /// An atomic compare-and-swap finished.
    CompareSwap,
    /// An atomic fetch-and-add finished.
    FetchAdd,
    /// A memory window bind finished.
    BindMw,
    /// A local invalidate finished.
    LocalInvalidate,
    /// A TSO send finished.
    Tso,
    /// A message was received.
    Recv,
    /// An RDMA write with immediate data consumed a receive.
    RecvRdmaWithImm,
    /// An opcode these headers do not know.
    Unknown(u32),
}

impl WcOpcode {
    /// Converts the raw opcode.
    #[inline]
    pub fn from_raw(raw: sys::ibv_wc_opcode) -> Self {
        use sys::ibv_wc_opcode as O;
        match raw {
            O::IBV_WC_SEND => WcOpcode::Send,
            O::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            O::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            O::IBV_WC_COMP_SWAP => WcOpcode::CompareSwap,
            O::IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
            O::IBV_WC_BIND_MW => WcOpcode::BindMw,
            O::IBV_WC_LOCAL_INV => WcOpcode::LocalInvalidate,
            O::IBV_WC_TSO => WcOpcode::Tso,
            O::IBV_WC_RECV => WcOpcode::Recv,
            O::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Unknown(other.0),
        }
    }
}

/// One work completion, layout-identical to `struct ibv_wc`, so a slice of
/// them is polled into directly ([`CompQueue::poll`](crate::CompQueue::poll)).
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct WorkCompletion(pub(crate) sys::ibv_wc);

impl WorkCompletion {
    /// A completion no device produced: `wr_id` with `status`, every other
    /// field zero. For bookkeeping that must end a request the device
    /// discarded without a completion (a queue pair moved to RESET drops its
    /// queued requests silently).
    pub fn synthetic(wr_id: u64, status: WcStatus) -> Self {
        WorkCompletion(sys::ibv_wc {
            wr_id,
            status: status.to_raw(),
            ..Default::default()
        })
    }

    /// The `wr_id` the request was posted with.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// The completion status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.0.status)
    }
    /// Whether the request succeeded.
    #[inline]
    pub fn is_success(&self) -> bool {
        self.0.status == sys::ibv_wc_status::IBV_WC_SUCCESS
    }
    /// `Ok(self)` on success, otherwise [`Error::WorkCompletion`].
    pub fn result(&self) -> Result<&Self> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(Error::WorkCompletion {
                wr_id: self.0.wr_id,
                status: self.status(),
                vendor_err: self.0.vendor_err,
            })
        }
    }
    /// The operation (valid only for successful completions, as in C).
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.0.opcode)
    }
    /// Bytes received (receive completions) or read.
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// Immediate data in host order, if the message carried any.
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        if self.0.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            // SAFETY: both union members are plain u32s.
            Some(u32::from_be(unsafe { self.0.__bindgen_anon_1.imm_data }))
        } else {
            None
        }
    }
    /// The local QP number.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// The remote QP number (UD receives).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }
    /// Whether a UD receive carries a GRH in the first 40 bytes of the buffer.
    #[inline]
    pub fn has_grh(&self) -> bool {
        self.0.wc_flags & sys::ibv_wc_flags::IBV_WC_GRH.0 != 0
    }
    /// The raw `wc_flags`.
    #[inline]
    pub fn wc_flags(&self) -> u32 {
        self.0.wc_flags
    }
    /// The provider-specific error code.
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }
    /// The raw completion.
    #[inline]
    pub fn as_raw(&self) -> &sys::ibv_wc {
        &self.0
    }
}

impl fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("WorkCompletion");
        d.field("wr_id", &self.wr_id())
            .field("status", &self.status());
        if self.is_success() {
            d.field("opcode", &self.opcode())
                .field("byte_len", &self.byte_len());
            if let Some(imm) = self.imm_data() {
                d.field("imm_data", &imm);
            }
        } else {
            d.field("vendor_err", &self.vendor_err());
        }
        d.field("qp_num", &self.qp_num()).finish()
    }
}
