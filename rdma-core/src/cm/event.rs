//! [`CmEvent`]: the connection manager's events, typed, with the peer's
//! private data copied out.

use super::id::CmId;
use super::EventChannel;
use crate::error::{Error, Result};
use ibverbs_sys as sys;
use std::fmt;
use std::io;
use std::ptr::NonNull;

/// The connection parameters an event carries (`struct rdma_conn_param`),
/// seen from the receiving side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnParams {
    /// The peer's private data. The transport pads it to a fixed size (56
    /// bytes in a connect request, 196 in an accept, 148 in a reject over
    /// InfiniBand and RoCE): a protocol must carry its own lengths.
    pub private_data: Vec<u8>,
    /// RDMA reads the peer lets this side have outstanding.
    pub responder_resources: u8,
    /// RDMA reads the peer wants to have outstanding here.
    pub initiator_depth: u8,
    /// Transport retries the peer asked for.
    pub retry_count: u8,
    /// Receiver-not-ready retries the peer asked for.
    pub rnr_retry_count: u8,
    /// Whether the peer's QP takes receives from an SRQ.
    pub srq: bool,
    /// The peer's QP number.
    pub qp_num: u32,
}

impl ConnParams {
    /// # Safety
    /// `p.private_data` must be null or valid for `p.private_data_len` bytes.
    unsafe fn from_raw(p: &sys::rdma_conn_param) -> Self {
        let private_data = if p.private_data.is_null() || p.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: valid for `private_data_len` bytes (caller's contract).
            unsafe {
                std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into())
            }
            .to_vec()
        };
        ConnParams {
            private_data,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq != 0,
            qp_num: p.qp_num & 0x00ff_ffff,
        }
    }
}

/// A peer asking to connect to a listening identifier: the new identifier
/// for the connection (accept or reject it; dropping it rejects) and the
/// parameters, private data included, the peer sent.
#[derive(Debug)]
pub struct ConnectRequest {
    /// The identifier of the new connection, on an event channel of its own.
    pub id: CmId,
    /// What the peer sent.
    pub params: ConnParams,
}

/// One connection manager event (`enum rdma_cm_event_type` with its data).
#[derive(Debug)]
#[non_exhaustive]
pub enum CmEvent {
    /// `rdma_resolve_addr` finished: the identifier is bound to a device.
    AddrResolved,
    /// `rdma_resolve_addr` failed; `status` is a negated errno.
    AddrError {
        /// Negated errno (e.g. `-ETIMEDOUT`, `-ENETUNREACH`).
        status: i32,
    },
    /// `rdma_resolve_route` finished.
    RouteResolved,
    /// `rdma_resolve_route` failed; `status` is a negated errno.
    RouteError {
        /// Negated errno.
        status: i32,
    },
    /// A peer wants to connect to a listening identifier.
    ConnectRequest(ConnectRequest),
    /// The peer accepted our connect (the identifier has no QP of librdmacm's,
    /// so the caller moves its QP to RTR/RTS and calls `rdma_establish`).
    ConnectResponse(ConnParams),
    /// Connecting failed after the peer answered.
    ConnectError {
        /// Negated errno.
        status: i32,
    },
    /// The peer did not answer (no such host on the fabric, or gone).
    Unreachable {
        /// Negated errno (usually `-ETIMEDOUT`).
        status: i32,
    },
    /// The peer (or its CM, when nobody listens) rejected the connection.
    Rejected {
        /// The InfiniBand CM reject reason (8: nobody listens on that port;
        /// 28: the peer's application rejected).
        status: i32,
        /// The private data of the reject.
        private_data: Vec<u8>,
    },
    /// The connection is up.
    Established(ConnParams),
    /// The peer disconnected (or the connection broke).
    Disconnected,
    /// The device the identifier uses is being removed.
    DeviceRemoval,
    /// The address the identifier is bound to changed.
    AddrChange,
    /// The QP of a closed connection left its time-wait state.
    TimewaitExit,
    /// An event these bindings do not name (multicast, …).
    Other {
        /// `enum rdma_cm_event_type` value.
        event: u32,
        /// Its status.
        status: i32,
    },
}

impl CmEvent {
    /// Copies `raw` into a [`CmEvent`] and acknowledges it; a connect
    /// request's new identifier gets an event channel of its own.
    ///
    /// # Safety
    /// `raw` must come from `rdma_get_cm_event` and not have been
    /// acknowledged; it is acknowledged here.
    pub(super) unsafe fn take(raw: *mut sys::rdma_cm_event) -> Result<CmEvent> {
        use sys::rdma_cm_event_type as T;
        // SAFETY: `raw` is a live event (caller's contract).
        let ev = unsafe { &*raw };
        let status = ev.status;
        // SAFETY: for connection events `param.conn` is the member in use
        // and its private data lives as long as the event.
        let conn = || unsafe { ConnParams::from_raw(&ev.param.conn) };
        let new_id = ev.id;
        let event = match ev.event {
            T::RDMA_CM_EVENT_ADDR_RESOLVED => Ok(CmEvent::AddrResolved),
            T::RDMA_CM_EVENT_ADDR_ERROR => Ok(CmEvent::AddrError { status }),
            T::RDMA_CM_EVENT_ROUTE_RESOLVED => Ok(CmEvent::RouteResolved),
            T::RDMA_CM_EVENT_ROUTE_ERROR => Ok(CmEvent::RouteError { status }),
            T::RDMA_CM_EVENT_CONNECT_REQUEST => Err(conn()),
            T::RDMA_CM_EVENT_CONNECT_RESPONSE => Ok(CmEvent::ConnectResponse(conn())),
            T::RDMA_CM_EVENT_CONNECT_ERROR => Ok(CmEvent::ConnectError { status }),
            T::RDMA_CM_EVENT_UNREACHABLE => Ok(CmEvent::Unreachable { status }),
            T::RDMA_CM_EVENT_REJECTED => Ok(CmEvent::Rejected {
                status,
                private_data: conn().private_data,
            }),
            T::RDMA_CM_EVENT_ESTABLISHED => Ok(CmEvent::Established(conn())),
            T::RDMA_CM_EVENT_DISCONNECTED => Ok(CmEvent::Disconnected),
            T::RDMA_CM_EVENT_DEVICE_REMOVAL => Ok(CmEvent::DeviceRemoval),
            T::RDMA_CM_EVENT_ADDR_CHANGE => Ok(CmEvent::AddrChange),
            T::RDMA_CM_EVENT_TIMEWAIT_EXIT => Ok(CmEvent::TimewaitExit),
            other => Ok(CmEvent::Other {
                event: other.0,
                status,
            }),
        };
        // SAFETY: acknowledged once; nothing of `ev` is used afterwards.
        unsafe { sys::rdma_ack_cm_event(raw) };
        match event {
            Ok(event) => Ok(event),
            Err(params) => {
                let id = NonNull::new(new_id).ok_or_else(|| {
                    Error::InvalidArgument("connect request without an identifier".into())
                })?;
                // SAFETY: a connect request's identifier is new and ours to
                // destroy; its only event has just been acknowledged.
                let id = unsafe { adopt_request_id(id) }?;
                Ok(CmEvent::ConnectRequest(ConnectRequest { id, params }))
            }
        }
    }

    /// The `rdma_event_str` name of the event (`"RDMA_CM_EVENT_REJECTED"`).
    pub fn name(&self) -> &'static str {
        match self {
            CmEvent::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            CmEvent::AddrError { .. } => "RDMA_CM_EVENT_ADDR_ERROR",
            CmEvent::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            CmEvent::RouteError { .. } => "RDMA_CM_EVENT_ROUTE_ERROR",
            CmEvent::ConnectRequest(_) => "RDMA_CM_EVENT_CONNECT_REQUEST",
            CmEvent::ConnectResponse(_) => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            CmEvent::ConnectError { .. } => "RDMA_CM_EVENT_CONNECT_ERROR",
            CmEvent::Unreachable { .. } => "RDMA_CM_EVENT_UNREACHABLE",
            CmEvent::Rejected { .. } => "RDMA_CM_EVENT_REJECTED",
            CmEvent::Established(_) => "RDMA_CM_EVENT_ESTABLISHED",
            CmEvent::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            CmEvent::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            CmEvent::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            CmEvent::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
            CmEvent::Other { .. } => "RDMA_CM_EVENT (other)",
        }
    }

    /// What the event's status means, for error messages.
    pub fn reason(&self) -> String {
        let status = match self {
            CmEvent::AddrError { status }
            | CmEvent::RouteError { status }
            | CmEvent::ConnectError { status }
            | CmEvent::Unreachable { status }
            | CmEvent::Rejected { status, .. }
            | CmEvent::Other { status, .. } => *status,
            _ => 0,
        };
        Self::describe(self.name(), status)
    }

    /// What event `name` (an `rdma_event_str` name) with `status` means.
    pub(crate) fn describe(name: &str, status: i32) -> String {
        match (name, status) {
            ("RDMA_CM_EVENT_REJECTED", 8) => {
                "nobody listens on that address and port (reject reason 8, invalid service ID)"
                    .into()
            }
            ("RDMA_CM_EVENT_REJECTED", 28) => {
                "the peer rejected the connection (reject reason 28, consumer defined)".into()
            }
            ("RDMA_CM_EVENT_REJECTED", s) => format!("reject reason {s}"),
            ("RDMA_CM_EVENT_DISCONNECTED", _) => "the peer disconnected".into(),
            ("RDMA_CM_EVENT_DEVICE_REMOVAL", _) => "the RDMA device is being removed".into(),
            (_, s) if s < 0 => io::Error::from_raw_os_error(-s).to_string(),
            (_, 0) => "unexpected at this point".into(),
            (_, s) => format!("status {s}"),
        }
    }
}

impl fmt::Display for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.reason())
    }
}

/// Moves a connect request's new identifier to a channel of its own and
/// takes ownership of it; destroys (and so rejects) it on failure.
///
/// # Safety
/// `id` must be a new identifier from a connect request, owned by nobody,
/// with no unacknowledged event.
unsafe fn adopt_request_id(id: NonNull<sys::rdma_cm_id>) -> Result<CmId> {
    let channel = match EventChannel::new() {
        Ok(channel) => channel,
        Err(err) => {
            // SAFETY: ours, unused afterwards.
            unsafe { sys::rdma_destroy_id(id.as_ptr()) };
            return Err(err);
        }
    };
    // SAFETY: `id` and `channel` are alive; no other thread knows `id`.
    if unsafe { sys::rdma_migrate_id(id.as_ptr(), channel.as_ptr()) } != 0 {
        let err = Error::last_os_error("rdma_migrate_id");
        // SAFETY: ours, unused afterwards.
        unsafe { sys::rdma_destroy_id(id.as_ptr()) };
        return Err(err);
    }
    // SAFETY: `id` is ours and now reports to `channel`.
    Ok(unsafe { CmId::from_raw(id, channel) })
}
