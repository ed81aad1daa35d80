//! `rdma_create_id`: a connection identifier, the connection manager's
//! socket, and the steps of connecting it (resolve, listen, connect,
//! accept, disconnect), each bounded in time.

use super::addr::{self, RawAddr};
use super::event::{CmEvent, ConnectRequest};
use super::EventChannel;
use crate::error::{check_rc, Error, Result};
use crate::qp::{QpState, QueuePair};
use crate::wrapper::{Deleter, Wrapper};
use crate::Context;
use ibverbs_sys as sys;
use std::ffi::c_int;
use std::fmt;
use std::net::SocketAddr;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most private data a connect request carries (RDMA_PS_TCP over IB CM or
/// RoCE: the 92 bytes of a CM REQ less the 36 of the RDMA CM header).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Most private data an accept carries (a CM REP).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;
/// Most private data a reject carries (a CM REJ).
pub const MAX_REJECT_PRIVATE_DATA: usize = 148;

impl Deleter for sys::rdma_cm_id {
    const DESTROY_VERB: &'static str = "rdma_destroy_id";
    unsafe fn delete(ptr: *mut Self) -> c_int {
        // SAFETY: forwarded from `Deleter::delete`'s contract.
        unsafe { sys::rdma_destroy_id(ptr) }
    }
}

/// Field order is drop order: the identifier is destroyed before its
/// channel is closed, as librdmacm requires.
struct Inner {
    raw: Wrapper<sys::rdma_cm_id>,
    channel: EventChannel,
}

// SAFETY: librdmacm's identifier calls are serialised by the kernel (one
// `ucma` file per channel) and may be made from any thread; `Inner` is
// otherwise a pointer and a file descriptor.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

/// A connection identifier (`struct rdma_cm_id`, port space RDMA_PS_TCP),
/// with an [`EventChannel`] of its own. Destroyed on drop, which also
/// disconnects (or, for a connect request not yet accepted, rejects).
///
/// The identifier never owns a QP: the caller creates one with
/// [`QueuePair::builder`] on a protection domain of [`context`](Self::context)
/// and hands it to [`connect`](Self::connect) or [`accept`](Self::accept),
/// which drive its state with the attributes the CM negotiated
/// (`rdma_init_qp_attr`). librdmacm never touches that QP afterwards.
pub struct CmId {
    inner: Arc<Inner>,
}

impl CmId {
    /// `rdma_create_id`—A new identifier for reliable connections, on a new
    /// event channel.
    ///
    /// # Errors
    /// The errno of `rdma_create_event_channel` or `rdma_create_id`.
    pub fn new() -> Result<Self> {
        let channel = EventChannel::new()?;
        let mut id = ptr::null_mut();
        // SAFETY: the channel is alive; `id` is valid for writes.
        check_rc("rdma_create_id", unsafe {
            sys::rdma_create_id(
                channel.as_ptr(),
                &mut id,
                ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        })?;
        let id = NonNull::new(id).ok_or_else(|| Error::verb("rdma_create_id", libc::EIO))?;
        // SAFETY: a new identifier, ours, reporting to `channel`.
        Ok(unsafe { Self::from_raw(id, channel) })
    }

    /// # Safety
    /// `id` must be a live identifier owned by nobody else, reporting its
    /// events to `channel`.
    pub(super) unsafe fn from_raw(id: NonNull<sys::rdma_cm_id>, channel: EventChannel) -> Self {
        CmId {
            inner: Arc::new(Inner {
                // SAFETY: forwarded to the caller.
                raw: unsafe { Wrapper::from_ptr(id) },
                channel,
            }),
        }
    }

    /// The raw identifier, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::rdma_cm_id {
        self.inner.raw.as_ptr()
    }

    /// The identifier's event channel.
    pub fn channel(&self) -> &EventChannel {
        &self.inner.channel
    }

    /// The device context the CM bound the identifier to (after
    /// [`resolve_addr`](Self::resolve_addr), on a connect request's
    /// identifier, or after binding to a device's address). librdmacm owns
    /// the context; the handle keeps the identifier alive.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] while the identifier is bound to no device,
    /// or the error of making its async event descriptor non-blocking.
    pub fn context(&self) -> Result<Context> {
        // SAFETY: the identifier is alive; `verbs` is a plain field.
        let verbs = unsafe { (*self.as_ptr()).verbs };
        let verbs = NonNull::new(verbs).ok_or_else(|| {
            Error::InvalidArgument("the identifier is not bound to an RDMA device yet".into())
        })?;
        let owner: Arc<dyn std::any::Any + Send + Sync> = self.inner.clone();
        // SAFETY: librdmacm keeps the context of a device open while an
        // identifier on it exists, and `owner` keeps this identifier.
        unsafe { Context::lent(verbs, owner) }
    }

    /// The device port the identifier is bound to (0 when unbound).
    pub fn port_num(&self) -> u8 {
        // SAFETY: the identifier is alive; `port_num` is a plain field.
        unsafe { (*self.as_ptr()).port_num }
    }

    /// `rdma_get_local_addr`—The local address, once bound or resolved.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the identifier is alive; the CM stores a sockaddr of the
        // family it names there.
        unsafe { addr::from_raw(sys::rdma_get_local_addr(self.as_ptr())) }
    }

    /// `rdma_get_peer_addr`—The peer's address, once resolved or connected.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as in `local_addr`.
        unsafe { addr::from_raw(sys::rdma_get_peer_addr(self.as_ptr())) }
    }

    /// `rdma_bind_addr`—Binds to a local address (port 0: any free port).
    ///
    /// # Errors
    /// The errno of `rdma_bind_addr` (`EADDRINUSE`, `EADDRNOTAVAIL`: no RDMA
    /// device has that address, …).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let mut raw = RawAddr::new(addr);
        // SAFETY: the identifier is alive; `raw` is a valid sockaddr.
        check_rc("rdma_bind_addr", unsafe {
            sys::rdma_bind_addr(self.as_ptr(), raw.as_mut_ptr())
        })
    }

    /// `rdma_listen`—Listens for connect requests, taken with
    /// [`get_request`](Self::get_request).
    ///
    /// # Errors
    /// The errno of `rdma_listen`.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: the identifier is alive.
        check_rc("rdma_listen", unsafe {
            sys::rdma_listen(self.as_ptr(), backlog)
        })
    }

    /// Waits up to `timeout` for a connect request on a listening
    /// identifier; `None` when none came. Events other than connect
    /// requests are logged and skipped.
    ///
    /// # Errors
    /// The error of taking an event.
    pub fn get_request(&self, timeout: Duration) -> Result<Option<ConnectRequest>> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.channel().get_event(left)? {
                None => return Ok(None),
                Some(CmEvent::ConnectRequest(req)) => return Ok(Some(req)),
                Some(other) => log::debug!("listener skipped {other}"),
            }
        }
    }

    /// `rdma_resolve_addr`—Resolves `dst` (binding to `src` if given, else
    /// to the local address that routes to `dst`) and so picks the device
    /// and port; waits up to `timeout` for the result.
    ///
    /// # Errors
    /// [`Error::Cm`] with `RDMA_CM_EVENT_ADDR_ERROR` (no RDMA device routes to
    /// `dst`, …), [`Error::Timeout`], or a verb's errno.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        self.start_resolve_addr(src, dst, timeout)?;
        Self::addr_resolved(self.expect("rdma_resolve_addr", timeout)?)
    }

    /// The first half of [`resolve_addr`](Self::resolve_addr): calls
    /// `rdma_resolve_addr` (the kernel gives up after `timeout`) without
    /// waiting; the outcome arrives as the next event on
    /// [`channel`](Self::channel), to be handed to
    /// [`addr_resolved`](Self::addr_resolved). For callers that wait for
    /// events their own way (an async runtime).
    ///
    /// # Errors
    /// The errno of `rdma_resolve_addr`.
    pub fn start_resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let mut src = src.map(RawAddr::new);
        let mut dst_raw = RawAddr::new(dst);
        let ms = timeout_ms(timeout);
        // SAFETY: the identifier is alive; the addresses are valid for the call.
        check_rc("rdma_resolve_addr", unsafe {
            sys::rdma_resolve_addr(
                self.as_ptr(),
                src.as_mut().map_or(ptr::null_mut(), RawAddr::as_mut_ptr),
                dst_raw.as_mut_ptr(),
                ms,
            )
        })
    }

    /// The second half of [`resolve_addr`](Self::resolve_addr): what the
    /// event that followed [`start_resolve_addr`](Self::start_resolve_addr)
    /// means.
    ///
    /// # Errors
    /// [`Error::Cm`] for any event but `RDMA_CM_EVENT_ADDR_RESOLVED`.
    pub fn addr_resolved(event: CmEvent) -> Result<()> {
        match event {
            CmEvent::AddrResolved => Ok(()),
            other => Err(Error::cm("rdma_resolve_addr", &other)),
        }
    }

    /// `rdma_resolve_route`—Resolves the path to the peer; waits up to
    /// `timeout`.
    ///
    /// # Errors
    /// [`Error::Cm`] with `RDMA_CM_EVENT_ROUTE_ERROR`, [`Error::Timeout`], or
    /// a verb's errno.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        self.start_resolve_route(timeout)?;
        Self::route_resolved(self.expect("rdma_resolve_route", timeout)?)
    }

    /// The first half of [`resolve_route`](Self::resolve_route), without
    /// waiting (see [`start_resolve_addr`](Self::start_resolve_addr)).
    ///
    /// # Errors
    /// The errno of `rdma_resolve_route`.
    pub fn start_resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: the identifier is alive.
        check_rc("rdma_resolve_route", unsafe {
            sys::rdma_resolve_route(self.as_ptr(), timeout_ms(timeout))
        })
    }

    /// The second half of [`resolve_route`](Self::resolve_route).
    ///
    /// # Errors
    /// [`Error::Cm`] for any event but `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    pub fn route_resolved(event: CmEvent) -> Result<()> {
        match event {
            CmEvent::RouteResolved => Ok(()),
            other => Err(Error::cm("rdma_resolve_route", &other)),
        }
    }

    /// `rdma_reject`—Refuses a connect request, with private data for the
    /// peer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for private data over
    /// [`MAX_REJECT_PRIVATE_DATA`] bytes, or the errno of `rdma_reject`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        if private_data.len() > MAX_REJECT_PRIVATE_DATA {
            return Err(Error::InvalidArgument(format!(
                "rdma_reject: {} bytes of private data do not fit: the transport carries at most {MAX_REJECT_PRIVATE_DATA}",
                private_data.len()
            )));
        }
        // SAFETY: the identifier is alive; the data is valid for the call.
        check_rc("rdma_reject", unsafe {
            sys::rdma_reject(
                self.as_ptr(),
                private_data.as_ptr().cast(),
                private_data.len() as u8,
            )
        })
    }

    /// `rdma_disconnect`—Tears the connection down (the peer gets
    /// `RDMA_CM_EVENT_DISCONNECTED`). The QP is not touched: move it to the
    /// error state to flush its work.
    ///
    /// # Errors
    /// The errno of `rdma_disconnect` (`EINVAL` when not connected).
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: the identifier is alive.
        check_rc("rdma_disconnect", unsafe {
            sys::rdma_disconnect(self.as_ptr())
        })
    }

    /// `rdma_notify(IBV_EVENT_COMM_EST)`—Tells the connection manager that
    /// the accepted connection carries data (a receive completed on its
    /// QP) before its ready-to-use message arrived, as a device's
    /// `IBV_EVENT_COMM_EST` would (rxe raises none): the CM then reports
    /// `RDMA_CM_EVENT_ESTABLISHED` without waiting for the accept's
    /// retransmission to bring another RTU.
    ///
    /// # Errors
    /// The errno of `rdma_notify` (`EINVAL` outside a pending accept).
    pub fn notify_established(&self) -> Result<()> {
        // SAFETY: the identifier is alive.
        check_rc("rdma_notify", unsafe {
            sys::rdma_notify(self.as_ptr(), sys::ibv_event_type::IBV_EVENT_COMM_EST)
        })
    }

    /// Waits up to `timeout` for the identifier's next event; `None` when
    /// none came.
    ///
    /// # Errors
    /// The error of taking an event.
    pub fn get_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        self.channel().get_event(timeout)
    }

    /// `rdma_init_qp_attr` + `ibv_modify_qp`—Moves `qp` to `state` with the
    /// attributes the CM negotiated for this connection.
    ///
    /// # Errors
    /// The errno of either verb.
    pub fn modify_qp(&self, qp: &QueuePair, state: QpState) -> Result<()> {
        self.modify_qp_with(qp, state, |_| {})
    }

    /// [`modify_qp`](Self::modify_qp), letting `adjust` change the
    /// negotiated attributes before they are applied.
    pub(super) fn modify_qp_with(
        &self,
        qp: &QueuePair,
        state: QpState,
        adjust: impl FnOnce(&mut sys::ibv_qp_attr),
    ) -> Result<()> {
        use sys::ibv_qp_state as S;
        let raw_state = match state {
            QpState::Init => S::IBV_QPS_INIT,
            QpState::ReadyToReceive => S::IBV_QPS_RTR,
            QpState::ReadyToSend => S::IBV_QPS_RTS,
            QpState::Error => S::IBV_QPS_ERR,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "rdma_init_qp_attr does not give attributes for {other:?}"
                )))
            }
        };
        let mut attr = sys::ibv_qp_attr {
            qp_state: raw_state,
            ..Default::default()
        };
        let mut mask: c_int = 0;
        // SAFETY: the identifier is alive; out-pointers are valid.
        check_rc("rdma_init_qp_attr", unsafe {
            sys::rdma_init_qp_attr(self.as_ptr(), &mut attr, &mut mask)
        })?;
        adjust(&mut attr);
        qp.modify(&mut attr, sys::ibv_qp_attr_mask(mask as u32))
    }

    /// The next event within `timeout`, or [`Error::Timeout`] naming `step`.
    pub(super) fn expect(&self, step: &'static str, timeout: Duration) -> Result<CmEvent> {
        self.get_event(timeout)?
            .ok_or(Error::Timeout { step, timeout })
    }
}

/// A timeout in whole milliseconds for the CM verbs (at least 1).
fn timeout_ms(timeout: Duration) -> c_int {
    timeout.as_millis().clamp(1, c_int::MAX as u128) as c_int
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .field("port_num", &self.port_num())
            .field("channel", self.channel())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reject_reasons_read_as_text() {
        let text = Error::cm(
            "rdma_connect",
            &CmEvent::Rejected {
                status: 8,
                private_data: Vec::new(),
            },
        )
        .to_string();
        assert!(text.contains("nobody listens"), "{text}");
    }
}
