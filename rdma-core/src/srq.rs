//! `ibv_create_srq`: shared receive queues.

use crate::async_event::SrqId;
use crate::error::{check_rc, PostError, Result};
use crate::pd::ProtectionDomain;
use crate::wr::{self, RecvRequest};
#[cfg(not(feature = "fault-injection"))]
use crate::wrapper::deleter;
use crate::wrapper::Wrapper;
use ibverbs_sys as sys;
use std::fmt;
use std::ptr;
use std::sync::Arc;

#[cfg(not(feature = "fault-injection"))]
deleter!(sys::ibv_srq, ibv_destroy_srq);

// The fault-injection layer's destroy: the oracle forgets the receives a
// destroyed SRQ discarded.
#[cfg(feature = "fault-injection")]
impl crate::wrapper::Deleter for sys::ibv_srq {
    const DESTROY_VERB: &'static str = "ibv_destroy_srq";
    unsafe fn delete(ptr: *mut Self) -> std::ffi::c_int {
        // SAFETY: forwarded from `Deleter::delete`'s contract.
        let rc = unsafe { sys::ibv_destroy_srq(ptr) };
        if rc == 0 {
            crate::fault::discard_srq(ptr as usize);
        }
        rc
    }
}

struct Inner {
    raw: Wrapper<sys::ibv_srq>,
    max_wr: u32,
    max_sge: u32,
    pd: ProtectionDomain,
}

/// A shared receive queue: one pool of receive buffers for several QPs. Cheap
/// to clone; QPs using it keep it alive.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    inner: Arc<Inner>,
}

// SAFETY: SRQ verbs are thread-safe; providers lock the queue when posting.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl SharedReceiveQueue {
    /// `ibv_create_srq`—Creates an SRQ for `max_wr` receives of up to
    /// `max_sge` SGEs each.
    pub fn new(pd: &ProtectionDomain, max_wr: u32, max_sge: u32) -> Result<Self> {
        let mut init = sys::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        #[cfg(feature = "fault-injection")]
        if let Some(errno) = crate::fault::refused(crate::fault::Site::CreateSrq, None) {
            return Err(crate::Error::verb("ibv_create_srq", errno));
        }
        // SAFETY: the PD is alive; `init` is valid for reads and writes.
        let ptr = unsafe { sys::ibv_create_srq(pd.as_ptr(), &mut init) };
        // SAFETY: a non-null SRQ is ours to destroy.
        let raw = unsafe { Wrapper::from_created("ibv_create_srq", ptr) }?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(Inner {
                raw,
                max_wr: init.attr.max_wr,
                max_sge: init.attr.max_sge,
                pd: pd.clone(),
            }),
        })
    }

    /// The raw SRQ, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_srq {
        self.inner.raw.as_ptr()
    }
    /// Receive capacity granted.
    pub fn max_wr(&self) -> u32 {
        self.inner.max_wr
    }
    /// SGEs per receive granted.
    pub fn max_sge(&self) -> u32 {
        self.inner.max_sge
    }
    /// The identity asynchronous events use for this SRQ
    /// ([`AsyncEvent::SrqLimitReached`](crate::AsyncEvent::SrqLimitReached)).
    pub fn id(&self) -> SrqId {
        SrqId::of(self.as_ptr())
    }

    /// `ibv_modify_srq`—Arms the SRQ's limit: once fewer than `limit`
    /// receives remain posted, the device raises
    /// [`AsyncEvent::SrqLimitReached`](crate::AsyncEvent::SrqLimitReached)
    /// once (on the context's async event descriptor) and disarms the limit.
    ///
    /// # Errors
    /// The error of `ibv_modify_srq` (`EINVAL` when `limit` exceeds the
    /// SRQ's capacity, or, on some providers, the receives posted now).
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let mut attr = sys::ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: the SRQ is alive; `attr` is valid for reads.
        check_rc("ibv_modify_srq", unsafe {
            sys::ibv_modify_srq(
                self.as_ptr(),
                &mut attr,
                sys::ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32,
            )
        })
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// `ibv_post_srq_recv`—Posts `wrs`, in order, to the SRQ with one call;
    /// see `ibv_post_srq_recv(3)`. Linked and reported as
    /// [`QueuePair::post_send_list`](crate::QueuePair::post_send_list).
    ///
    /// # Safety
    /// As [`QueuePair::post_recv_list`](crate::QueuePair::post_recv_list):
    /// the memory must stay valid and untouched until the completion (on
    /// whichever QP consumes the receive) has been polled, or the SRQ and
    /// every QP using it are gone.
    ///
    /// # Errors
    /// As [`QueuePair::post_recv_list`](crate::QueuePair::post_recv_list)
    /// (`ENOMEM`: the SRQ is full).
    #[inline]
    #[cfg_attr(feature = "fault-injection", allow(unreachable_code))]
    pub unsafe fn post_recv_list(&self, wrs: &mut [RecvRequest<'_>]) -> Result<(), PostError> {
        #[cfg(feature = "fault-injection")]
        // SAFETY: forwarded to the caller.
        return unsafe { crate::fault::post_srq_recv(self, wrs) };
        let Some(head) = wr::link(wrs) else {
            return Ok(());
        };
        let mut bad = ptr::null_mut();
        // SAFETY: the SRQ is alive; `head` is a null-terminated list of
        // well-formed requests whose SGE arrays are borrowed for the call.
        let rc = unsafe { sys::ibv_post_srq_recv(self.as_ptr(), head, &mut bad) };
        if rc == 0 {
            Ok(())
        } else {
            let n = wrs.len();
            let posted = wr::posted_before(head, n, bad);
            Err(PostError::new("ibv_post_srq_recv", rc, posted, n))
        }
    }

    /// `ibv_post_srq_recv`—Posts a list of raw receive requests.
    ///
    /// # Safety
    /// As [`QueuePair::post_recv`](crate::QueuePair::post_recv).
    pub unsafe fn post_recv(&self, wr: &mut sys::ibv_recv_wr) -> Result<()> {
        let mut bad = ptr::null_mut();
        #[cfg(feature = "fault-injection")]
        let queue = crate::fault::Queue::Srq(self.as_ptr() as usize);
        #[cfg(feature = "fault-injection")]
        // SAFETY: `wr` is a well-formed list (the caller's contract).
        let (post, n) = unsafe { crate::fault::record_raw(queue, wr) };
        // SAFETY: the SRQ is alive; the rest is the caller's contract.
        let rc = unsafe { sys::ibv_post_srq_recv(self.as_ptr(), wr, &mut bad) };
        #[cfg(feature = "fault-injection")]
        if rc != 0 {
            crate::fault::unrecord_raw(queue, post, wr, n, bad);
        }
        check_rc("ibv_post_srq_recv", rc)
    }
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("max_wr", &self.max_wr())
            .field("max_sge", &self.max_sge())
            .finish()
    }
}
