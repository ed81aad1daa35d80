//! `ibv_get_async_event`: what a device reports outside any work completion
//! (a QP or CQ in error, an SRQ running low, a port going up or down), read
//! from a [`Context`](crate::Context)'s async event descriptor.

use crate::error::{Error, Result};
use ibverbs_sys as sys;
use std::fmt;
use std::io;
use std::mem::MaybeUninit;

macro_rules! object_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// Two ids are equal when they name the same live object; once the
        /// object is destroyed its id may be reused by a new one.
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(usize);

        impl $name {
            pub(crate) fn of<T>(ptr: *mut T) -> Self {
                $name(ptr as usize)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }
    };
}

object_id!(
    /// Which completion queue an event concerns: compare with
    /// [`CompQueue::id`](crate::CompQueue::id).
    CqId
);
object_id!(
    /// Which shared receive queue an event concerns: compare with
    /// [`SharedReceiveQueue::id`](crate::SharedReceiveQueue::id).
    SrqId
);
object_id!(
    /// Which work queue (`ibv_wq`) an event concerns.
    WqId
);

macro_rules! async_events {
    ($(
        $(#[$doc:meta])*
        $variant:ident $({ $field:ident: $ty:ty })? = $c:ident;
    )*) => {
        /// An asynchronous event of a device (`struct ibv_async_event`),
        /// already acknowledged (`ibv_ack_async_event`), naming the object it
        /// concerns: a QP by number, a CQ or SRQ by id, a port by number.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum AsyncEvent {
            $(
                #[doc = concat!("`", stringify!($c), "`: ")]
                $(#[$doc])*
                $variant $({
                    /// The object the event concerns.
                    $field: $ty
                })?,
            )*
            /// An event type these headers do not know.
            Unknown {
                /// The raw `enum ibv_event_type` value.
                event_type: u32,
            },
        }

        impl AsyncEvent {
            /// Reads `raw` (whose element is still alive: not yet acked).
            ///
            /// # Safety
            /// `raw` must come from a successful `ibv_get_async_event` that
            /// has not been acknowledged yet.
            unsafe fn from_raw(raw: &sys::ibv_async_event) -> Self {
                use sys::ibv_event_type as E;
                $(
                    if raw.event_type == E::$c {
                        // SAFETY: the element's member is the one the event
                        // type names, and the object is alive until the ack.
                        return AsyncEvent::$variant $({ $field: unsafe { <$ty>::element(raw) } })?;
                    }
                )*
                AsyncEvent::Unknown { event_type: raw.event_type.0 }
            }

            /// The C enumerator's name, e.g. `"IBV_EVENT_QP_FATAL"`.
            pub fn name(&self) -> &'static str {
                match self {
                    $( AsyncEvent::$variant { .. } => stringify!($c), )*
                    AsyncEvent::Unknown { .. } => "IBV_EVENT_<unknown>",
                }
            }
        }
    };
}

async_events! {
    /// a completion queue overran or failed; its QPs are in error.
    CqError { cq: CqId } = IBV_EVENT_CQ_ERR;
    /// a QP hit an error the device could not report in a completion; it is
    /// in the error state.
    QpFatal { qp_num: u32 } = IBV_EVENT_QP_FATAL;
    /// a QP's peer broke the transport protocol (invalid request); the QP is
    /// in the error state.
    QpRequestError { qp_num: u32 } = IBV_EVENT_QP_REQ_ERR;
    /// a QP's peer violated an access right (e.g. a bad rkey); the QP is in
    /// the error state.
    QpAccessError { qp_num: u32 } = IBV_EVENT_QP_ACCESS_ERR;
    /// the first packet arrived on a QP still in RTR.
    CommEstablished { qp_num: u32 } = IBV_EVENT_COMM_EST;
    /// a QP moved to SQD has no outstanding send request left.
    SqDrained { qp_num: u32 } = IBV_EVENT_SQ_DRAINED;
    /// a QP migrated to its alternate path.
    PathMigrated { qp_num: u32 } = IBV_EVENT_PATH_MIG;
    /// a QP's path migration failed.
    PathMigrationError { qp_num: u32 } = IBV_EVENT_PATH_MIG_ERR;
    /// a QP on an SRQ in the error state will take no more receives.
    QpLastWqeReached { qp_num: u32 } = IBV_EVENT_QP_LAST_WQE_REACHED;
    /// an SRQ failed; its QPs are in error.
    SrqError { srq: SrqId } = IBV_EVENT_SRQ_ERR;
    /// fewer receives than the armed limit remain on an SRQ (see
    /// [`SharedReceiveQueue::arm_limit`](crate::SharedReceiveQueue::arm_limit)).
    SrqLimitReached { srq: SrqId } = IBV_EVENT_SRQ_LIMIT_REACHED;
    /// a work queue failed.
    WqFatal { wq: WqId } = IBV_EVENT_WQ_FATAL;
    /// a port became active.
    PortActive { port: u8 } = IBV_EVENT_PORT_ACTIVE;
    /// a port went down: its QPs' traffic fails until it is back.
    PortError { port: u8 } = IBV_EVENT_PORT_ERR;
    /// a port's LID changed.
    LidChange { port: u8 } = IBV_EVENT_LID_CHANGE;
    /// a port's P_Key table changed.
    PkeyChange { port: u8 } = IBV_EVENT_PKEY_CHANGE;
    /// a port's subnet manager changed.
    SmChange { port: u8 } = IBV_EVENT_SM_CHANGE;
    /// the subnet manager asks clients of a port to register again.
    ClientReregister { port: u8 } = IBV_EVENT_CLIENT_REREGISTER;
    /// a port's GID table changed (e.g. an IP address of a RoCE device).
    GidChange { port: u8 } = IBV_EVENT_GID_CHANGE;
    /// the device failed: every object of the context is unusable.
    DeviceFatal = IBV_EVENT_DEVICE_FATAL;
}

/// Reading the object an event names out of its element union.
trait Element: Sized {
    /// # Safety
    /// As [`AsyncEvent::from_raw`], with the event type naming this member.
    unsafe fn element(raw: &sys::ibv_async_event) -> Self;
}

impl Element for u32 {
    unsafe fn element(raw: &sys::ibv_async_event) -> u32 {
        // SAFETY: caller contract: a QP event's element is a live QP.
        unsafe { raw.element.qp.as_ref().map_or(0, |qp| qp.qp_num) }
    }
}

impl Element for u8 {
    unsafe fn element(raw: &sys::ibv_async_event) -> u8 {
        // SAFETY: caller contract: a port event's element is the port number.
        u8::try_from(unsafe { raw.element.port_num }).unwrap_or(0)
    }
}

impl Element for CqId {
    unsafe fn element(raw: &sys::ibv_async_event) -> CqId {
        // SAFETY: caller contract: a CQ event's element is a CQ pointer.
        CqId::of(unsafe { raw.element.cq })
    }
}

impl Element for SrqId {
    unsafe fn element(raw: &sys::ibv_async_event) -> SrqId {
        // SAFETY: caller contract: an SRQ event's element is an SRQ pointer.
        SrqId::of(unsafe { raw.element.srq })
    }
}

impl Element for WqId {
    unsafe fn element(raw: &sys::ibv_async_event) -> WqId {
        // SAFETY: caller contract: a WQ event's element is a WQ pointer.
        WqId::of(unsafe { raw.element.wq })
    }
}

impl AsyncEvent {
    /// The number of the QP the event concerns, if a QP.
    pub fn qp_num(&self) -> Option<u32> {
        use AsyncEvent as A;
        match *self {
            A::QpFatal { qp_num }
            | A::QpRequestError { qp_num }
            | A::QpAccessError { qp_num }
            | A::CommEstablished { qp_num }
            | A::SqDrained { qp_num }
            | A::PathMigrated { qp_num }
            | A::PathMigrationError { qp_num }
            | A::QpLastWqeReached { qp_num } => Some(qp_num),
            _ => None,
        }
    }

    /// The port the event concerns, if a port.
    pub fn port(&self) -> Option<u8> {
        use AsyncEvent as A;
        match *self {
            A::PortActive { port }
            | A::PortError { port }
            | A::LidChange { port }
            | A::PkeyChange { port }
            | A::SmChange { port }
            | A::ClientReregister { port }
            | A::GidChange { port } => Some(port),
            _ => None,
        }
    }

    /// Whether the event means the object it names (a QP, CQ, SRQ, WQ, or
    /// the whole device) is in the error state and will not recover by
    /// itself.
    pub fn is_fatal(&self) -> bool {
        use AsyncEvent as A;
        matches!(
            self,
            A::CqError { .. }
                | A::QpFatal { .. }
                | A::QpRequestError { .. }
                | A::QpAccessError { .. }
                | A::SrqError { .. }
                | A::WqFatal { .. }
                | A::DeviceFatal
        )
    }
}

impl fmt::Display for AsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            AsyncEvent::CqError { cq } => write!(f, " on {cq:?}"),
            AsyncEvent::SrqError { srq } | AsyncEvent::SrqLimitReached { srq } => {
                write!(f, " on {srq:?}")
            }
            AsyncEvent::WqFatal { wq } => write!(f, " on {wq:?}"),
            AsyncEvent::Unknown { event_type } => write!(f, " (type {event_type})"),
            other => match (other.qp_num(), other.port()) {
                (Some(qp), _) => write!(f, " on QP {qp:#x}"),
                (_, Some(port)) => write!(f, " on port {port}"),
                _ => Ok(()),
            },
        }
    }
}

/// `ibv_get_async_event` + `ibv_ack_async_event`—Takes the next event of
/// `ctx`, if one is pending, and acknowledges it.
///
/// Returns `None` when none is pending on a non-blocking descriptor (or the
/// read was interrupted by a signal).
///
/// # Safety
/// `ctx` must be a live context.
pub(crate) unsafe fn take(ctx: *mut sys::ibv_context) -> Result<Option<AsyncEvent>> {
    #[cfg(feature = "fault-injection")]
    match crate::fault::async_event() {
        Err(errno) => {
            return Err(Error::Verb {
                verb: "ibv_get_async_event",
                source: io::Error::from_raw_os_error(errno),
            })
        }
        Ok(Some(event)) => return Ok(Some(event)),
        Ok(None) => {}
    }
    let mut raw = MaybeUninit::<sys::ibv_async_event>::zeroed();
    // SAFETY: the context is alive (caller); `raw` is valid for writes.
    if unsafe { sys::ibv_get_async_event(ctx, raw.as_mut_ptr()) } != 0 {
        let err = io::Error::last_os_error();
        return match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(Error::Verb {
                verb: "ibv_get_async_event",
                source: err,
            }),
        };
    }
    // SAFETY: the verb filled the event (all-zero was valid already).
    let mut raw = unsafe { raw.assume_init() };
    // SAFETY: a fresh, unacknowledged event.
    let event = unsafe { AsyncEvent::from_raw(&raw) };
    // SAFETY: acknowledged exactly once, after its element was last read.
    unsafe { sys::ibv_ack_async_event(&mut raw) };
    Ok(Some(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_port(event_type: sys::ibv_event_type, port: i32) -> sys::ibv_async_event {
        sys::ibv_async_event {
            element: sys::ibv_async_event__bindgen_ty_1 { port_num: port },
            event_type,
        }
    }

    #[test]
    fn events_name_their_object() {
        let mut qp = sys::ibv_qp {
            qp_num: 0x11,
            ..Default::default()
        };
        let raw = sys::ibv_async_event {
            element: sys::ibv_async_event__bindgen_ty_1 { qp: &mut qp },
            event_type: sys::ibv_event_type::IBV_EVENT_QP_FATAL,
        };
        // SAFETY: the element is a live QP.
        let ev = unsafe { AsyncEvent::from_raw(&raw) };
        assert_eq!(ev, AsyncEvent::QpFatal { qp_num: 0x11 });
        assert_eq!(
            (ev.qp_num(), ev.port(), ev.is_fatal()),
            (Some(0x11), None, true)
        );
        assert_eq!(ev.to_string(), "IBV_EVENT_QP_FATAL on QP 0x11");

        let raw = raw_port(sys::ibv_event_type::IBV_EVENT_PORT_ERR, 1);
        // SAFETY: a port event carries a number.
        let ev = unsafe { AsyncEvent::from_raw(&raw) };
        assert_eq!(ev, AsyncEvent::PortError { port: 1 });
        assert_eq!((ev.port(), ev.is_fatal()), (Some(1), false));

        let mut srq = sys::ibv_srq::default();
        let raw = sys::ibv_async_event {
            element: sys::ibv_async_event__bindgen_ty_1 { srq: &mut srq },
            event_type: sys::ibv_event_type::IBV_EVENT_SRQ_LIMIT_REACHED,
        };
        // SAFETY: the element is a live SRQ.
        let ev = unsafe { AsyncEvent::from_raw(&raw) };
        assert_eq!(
            ev,
            AsyncEvent::SrqLimitReached {
                srq: SrqId::of(&mut srq as *mut _)
            }
        );
        assert_eq!(ev.name(), "IBV_EVENT_SRQ_LIMIT_REACHED");
    }

    #[test]
    fn every_known_type_maps_and_unknown_ones_are_kept() {
        for t in 0..=19 {
            let raw = raw_port(sys::ibv_event_type(t), 1);
            let is_object = matches!(t, 0..=7 | 14..=16 | 19);
            if is_object {
                continue; // these read a pointer: covered above
            }
            // SAFETY: port and device events read no pointer.
            let ev = unsafe { AsyncEvent::from_raw(&raw) };
            assert!(!matches!(ev, AsyncEvent::Unknown { .. }), "type {t}");
        }
        let raw = raw_port(sys::ibv_event_type(1000), 0);
        // SAFETY: an unknown type reads no pointer.
        let ev = unsafe { AsyncEvent::from_raw(&raw) };
        assert_eq!(ev, AsyncEvent::Unknown { event_type: 1000 });
    }
}
