//! Connecting and accepting on a [`CmId`]: what each side asks for
//! ([`ConnectParams`]), and the two halves of each step — the verb, then
//! what its event means — so that callers may wait for the event their
//! own way.

use super::event::{CmEvent, ConnParams};
use super::id::{CmId, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA};
use crate::error::{check_rc, Error, Result};
use crate::mr::AccessFlags;
use crate::port::Mtu;
use crate::qp::{QpState, QueuePair};
use ibverbs_sys as sys;
use std::ffi::c_int;
use std::ptr;
use std::time::Duration;

/// What this side asks for or grants when connecting or accepting
/// (`struct rdma_conn_param`; the QP number is filled in by
/// [`CmId::connect`] and [`CmId::accept`]).
#[derive(Clone, Copy, Debug)]
pub struct ConnectParams<'a> {
    /// Private data for the peer (at most [`MAX_CONNECT_PRIVATE_DATA`] bytes
    /// in a connect, [`MAX_ACCEPT_PRIVATE_DATA`] in an accept).
    pub private_data: &'a [u8],
    /// RDMA reads the peer may have outstanding on our QP.
    pub responder_resources: u8,
    /// RDMA reads our QP may have outstanding at the peer.
    pub initiator_depth: u8,
    /// Transport retries (at most 7; rxe treats 7 as unlimited).
    pub retry_count: u8,
    /// Receiver-not-ready retries (7: unlimited).
    pub rnr_retry_count: u8,
    /// How long a peer whose message found no receive posted here waits
    /// before sending it again (the RNR NAK timer, IB encoding: 12 is
    /// 0.64 ms). The CM's own value is 0, which encodes the longest wait,
    /// 655 ms: too long for the first message a peer sends right after the
    /// connection is established, before a receive could be posted on the
    /// accepted QP.
    pub min_rnr_timer: u8,
    /// The local ACK timeout exponent of the queue pair (4.096 µs ·
    /// 2^n; `RDMA_OPTION_ID_ACK_TIMEOUT`), or `None` for the CM's own,
    /// derived from the path's packet lifetime (on RoCE about 2^18: one
    /// second per retry).
    pub ack_timeout: Option<u8>,
    /// The largest path MTU the peer can take, when it said so (see
    /// [`CmId::connected`]); the local port's active MTU bounds the path
    /// MTU in any case.
    pub max_path_mtu: Option<Mtu>,
}

impl Default for ConnectParams<'_> {
    fn default() -> Self {
        ConnectParams {
            private_data: &[],
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            min_rnr_timer: 12,
            ack_timeout: None,
            max_path_mtu: None,
        }
    }
}

impl ConnectParams<'_> {
    fn to_raw(self, qp_num: u32, max: usize, step: &'static str) -> Result<sys::rdma_conn_param> {
        if self.private_data.len() > max {
            return Err(Error::InvalidArgument(format!(
                "{step}: {} bytes of private data do not fit: the transport carries at most {max}",
                self.private_data.len()
            )));
        }
        Ok(sys::rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            private_data_len: self.private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count.min(7),
            rnr_retry_count: self.rnr_retry_count.min(7),
            srq: 0,
            qp_num,
        })
    }
}

impl CmId {
    /// `rdma_connect` (active side)—Moves `qp` (created on this identifier's
    /// [`context`](Self::context), in RESET) to INIT granting remote
    /// `access`, asks the peer to connect, and on its answer moves `qp` to
    /// RTR and RTS with the negotiated attributes and completes the
    /// connection (`rdma_establish`). Waits up to `timeout`. Returns what
    /// the peer sent with its accept.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for private data over
    /// [`MAX_CONNECT_PRIVATE_DATA`] bytes, [`Error::Cm`] when the peer
    /// rejects (nobody listening included) or is unreachable,
    /// [`Error::Timeout`], or a verb's errno.
    pub fn connect(
        &self,
        qp: &QueuePair,
        access: AccessFlags,
        params: &ConnectParams<'_>,
        timeout: Duration,
    ) -> Result<ConnParams> {
        self.start_connect(qp, access, params)?;
        self.connected(qp, params, self.expect("rdma_connect", timeout)?)
    }

    /// The first half of [`connect`](Self::connect): `qp` to INIT and
    /// `rdma_connect`, without waiting for the answer, which arrives as the
    /// next event on [`channel`](Self::channel) (see
    /// [`start_resolve_addr`](Self::start_resolve_addr)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for private data over
    /// [`MAX_CONNECT_PRIVATE_DATA`] bytes, or a verb's errno.
    pub fn start_connect(
        &self,
        qp: &QueuePair,
        access: AccessFlags,
        params: &ConnectParams<'_>,
    ) -> Result<()> {
        let mut raw = params.to_raw(qp.qp_num(), MAX_CONNECT_PRIVATE_DATA, "rdma_connect")?;
        if let Some(t) = params.ack_timeout {
            self.set_ack_timeout(t)?;
        }
        qp.to_init(self.port_num(), access)?;
        // SAFETY: the identifier is alive; `raw` and its private data are
        // valid for the call (the kernel copies them).
        check_rc("rdma_connect", unsafe {
            sys::rdma_connect(self.as_ptr(), &mut raw)
        })
    }

    /// The second half of [`connect`](Self::connect): on the peer's answer
    /// (`event`), `qp` to RTR (its RNR NAK timer `params.min_rnr_timer`,
    /// its path MTU at most `params.max_path_mtu` and the port's active
    /// MTU) and RTS, and `rdma_establish`; a connection `qp` cannot take
    /// is rejected. On RoCE the CM takes the path MTU from the active
    /// side's interface alone: a caller that learned the peer's MTU (from
    /// its accept's private data) passes it as `max_path_mtu`.
    ///
    /// # Errors
    /// [`Error::Cm`] for any event but `RDMA_CM_EVENT_CONNECT_RESPONSE`, or a
    /// verb's errno.
    pub fn connected(
        &self,
        qp: &QueuePair,
        params: &ConnectParams<'_>,
        event: CmEvent,
    ) -> Result<ConnParams> {
        match event {
            CmEvent::ConnectResponse(theirs) => {
                let ready = self.make_ready(qp, params);
                if let Err(err) = ready {
                    // SAFETY: the identifier is alive; no private data.
                    unsafe { sys::rdma_reject(self.as_ptr(), ptr::null(), 0) };
                    return Err(err);
                }
                // SAFETY: the identifier is alive and has no librdmacm QP.
                check_rc("rdma_establish", unsafe {
                    sys::rdma_establish(self.as_ptr())
                })?;
                Ok(theirs)
            }
            other => Err(Error::cm("rdma_connect", &other)),
        }
    }

    /// `rdma_accept` (passive side, on a connect request's identifier)—Moves
    /// `qp` (created on [`context`](Self::context), in RESET) to INIT with
    /// remote `access`, then RTR and RTS with the attributes of the
    /// request, accepts, and waits up to `timeout` for the connection to be
    /// established.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for private data over
    /// [`MAX_ACCEPT_PRIVATE_DATA`] bytes, [`Error::Cm`] if the peer gives up
    /// first, [`Error::Timeout`], or a verb's errno.
    pub fn accept(
        &self,
        qp: &QueuePair,
        access: AccessFlags,
        params: &ConnectParams<'_>,
        timeout: Duration,
    ) -> Result<()> {
        self.start_accept(qp, access, params)?;
        Self::established(self.expect("rdma_accept", timeout)?)
    }

    /// The first half of [`accept`](Self::accept): `qp` to INIT, RTR and
    /// RTS, and `rdma_accept`, without waiting for the connection to be
    /// established (the next event on [`channel`](Self::channel), see
    /// [`start_resolve_addr`](Self::start_resolve_addr)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for private data over
    /// [`MAX_ACCEPT_PRIVATE_DATA`] bytes, or a verb's errno.
    pub fn start_accept(
        &self,
        qp: &QueuePair,
        access: AccessFlags,
        params: &ConnectParams<'_>,
    ) -> Result<()> {
        qp.to_init(self.port_num(), access)?;
        self.accept_from_init(qp, params)
    }

    /// [`start_accept`](Self::start_accept) for a `qp` its caller already
    /// moved to INIT (with [`QueuePair::to_init`] on this identifier's
    /// port), e.g. to post receives before the requester can send: `qp` to
    /// RTR and RTS, and `rdma_accept`. The requester may send as soon as it
    /// has the accept, before this side sees `ESTABLISHED` (its
    /// ready-to-use message can be lost), so a protocol whose requester
    /// speaks first needs receives posted before this call.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for private data over
    /// [`MAX_ACCEPT_PRIVATE_DATA`] bytes, or a verb's errno.
    pub fn accept_from_init(&self, qp: &QueuePair, params: &ConnectParams<'_>) -> Result<()> {
        let mut raw = params.to_raw(qp.qp_num(), MAX_ACCEPT_PRIVATE_DATA, "rdma_accept")?;
        if let Some(t) = params.ack_timeout {
            self.set_ack_timeout(t)?;
        }
        self.make_ready(qp, params)?;
        // SAFETY: the identifier is alive; `raw` is valid for the call.
        check_rc("rdma_accept", unsafe {
            sys::rdma_accept(self.as_ptr(), &mut raw)
        })
    }

    /// The second half of [`accept`](Self::accept).
    ///
    /// # Errors
    /// [`Error::Cm`] for any event but `RDMA_CM_EVENT_ESTABLISHED` (the
    /// requester gave up, …).
    pub fn established(event: CmEvent) -> Result<()> {
        match event {
            CmEvent::Established(_) => Ok(()),
            other => Err(Error::cm("rdma_accept", &other)),
        }
    }

    /// INIT → RTR → RTS with the negotiated attributes, the RNR NAK timer
    /// replaced by `params.min_rnr_timer` and the path MTU bounded by the
    /// port's active MTU and `params.max_path_mtu`.
    fn make_ready(&self, qp: &QueuePair, params: &ConnectParams<'_>) -> Result<()> {
        let port_mtu = self.active_mtu()?;
        let limit = params.max_path_mtu.map_or(port_mtu, |m| m.min(port_mtu));
        let min_rnr_timer = params.min_rnr_timer;
        self.modify_qp_with(qp, QpState::ReadyToReceive, |attr| {
            attr.min_rnr_timer = min_rnr_timer.min(31);
            if let Some(negotiated) = Mtu::from_raw(attr.path_mtu) {
                attr.path_mtu = negotiated.min(limit).to_raw();
            }
        })?;
        self.modify_qp(qp, QpState::ReadyToSend)
    }

    /// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`—The local ACK timeout
    /// exponent the queue pair gets when moved to RTS (4.096 µs · 2^n, at
    /// most 31), instead of the CM's own.
    ///
    /// # Errors
    /// The errno of `rdma_set_option`.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        let mut value: u8 = timeout.min(31);
        // SAFETY: the identifier is alive; `value` is valid for the call and
        // the option takes one byte.
        check_rc("rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)", unsafe {
            sys::rdma_set_option(
                self.as_ptr(),
                sys::RDMA_OPTION_ID.0 as c_int,
                sys::RDMA_OPTION_ID_ACK_TIMEOUT.0 as c_int,
                (&mut value as *mut u8).cast(),
                1,
            )
        })
    }

    /// The active MTU of the port the identifier is bound to.
    ///
    /// # Errors
    /// Unbound, or the error of `ibv_query_port`.
    pub fn active_mtu(&self) -> Result<Mtu> {
        let port = self.context()?.query_port(self.port_num())?;
        Ok(port.active_mtu().unwrap_or(Mtu::Mtu256))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_private_data_is_refused_before_any_verb() {
        let data = [7u8; MAX_CONNECT_PRIVATE_DATA + 1];
        let params = ConnectParams {
            private_data: &data,
            ..Default::default()
        };
        let err = params
            .to_raw(1, MAX_CONNECT_PRIVATE_DATA, "rdma_connect")
            .unwrap_err();
        assert!(err.to_string().contains("at most 56"), "{err}");
        let fits = ConnectParams {
            private_data: &data[..MAX_CONNECT_PRIVATE_DATA],
            ..Default::default()
        };
        let raw = fits
            .to_raw(9, MAX_CONNECT_PRIVATE_DATA, "rdma_connect")
            .unwrap();
        assert_eq!((raw.private_data_len, raw.qp_num), (56, 9));
    }
}
