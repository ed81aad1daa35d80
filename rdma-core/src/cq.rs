//! `ibv_create_cq`: completion queues.

use crate::async_event::CqId;
use crate::comp_channel::CompChannel;
use crate::context::Context;
use crate::error::{check_rc, Error, Result};
use crate::wc::WorkCompletion;
use crate::wrapper::{deleter, Wrapper};
use ibverbs_sys as sys;
use std::ffi::c_int;
use std::fmt;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

deleter!(sys::ibv_cq, ibv_destroy_cq);

struct Inner {
    raw: Wrapper<sys::ibv_cq>,
    channel: Option<CompChannel>,
    ctx: Context,
}

/// A completion queue. Cheap to clone (one CQ may serve several QPs, which
/// keep it alive); destroyed after the last clone and the last QP using it.
#[derive(Clone)]
pub struct CompQueue {
    inner: Arc<Inner>,
}

// SAFETY: CQs may be polled and armed from any thread; providers lock the CQ
// internally in `poll_cq` / `req_notify_cq` (the verbs are thread-safe).
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl CompQueue {
    /// `ibv_create_cq`—Creates a CQ with room for at least `cqe` completions,
    /// reporting events to `channel` if given, on completion vector
    /// `comp_vector`.
    pub fn new(
        ctx: &Context,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: i32,
    ) -> Result<Self> {
        let cqe = c_int::try_from(cqe)
            .map_err(|_| Error::InvalidArgument(format!("CQ size {cqe} too large")))?;
        #[cfg(feature = "fault-injection")]
        if let Some(errno) = crate::fault::refused(crate::fault::Site::CreateCq, None) {
            return Err(Error::verb("ibv_create_cq", errno));
        }
        let ch = channel.map_or(ptr::null_mut(), |c| c.as_ptr());
        // SAFETY: the context (and channel, if any) are alive.
        let ptr =
            unsafe { sys::ibv_create_cq(ctx.as_ptr(), cqe, ptr::null_mut(), ch, comp_vector) };
        // SAFETY: a non-null CQ is ours to destroy.
        let raw = unsafe { Wrapper::from_created("ibv_create_cq", ptr) }?;
        Ok(CompQueue {
            inner: Arc::new(Inner {
                raw,
                channel: channel.cloned(),
                ctx: ctx.clone(),
            }),
        })
    }

    /// The raw CQ, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_cq {
        self.inner.raw.as_ptr()
    }

    /// The identity asynchronous events use for this CQ
    /// ([`AsyncEvent::CqError`](crate::AsyncEvent::CqError)).
    pub fn id(&self) -> CqId {
        CqId::of(self.as_ptr())
    }

    /// The context the CQ belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The completion channel, if the CQ has one.
    pub fn channel(&self) -> Option<&CompChannel> {
        self.inner.channel.as_ref()
    }

    /// The actual capacity (may exceed what was asked for).
    pub fn capacity(&self) -> u32 {
        // SAFETY: the CQ is alive; `cqe` is a plain field.
        unsafe { (*self.as_ptr()).cqe as u32 }
    }

    /// `ibv_poll_cq`—Moves up to `out.len()` completions into `out` and returns
    /// the filled prefix (empty when the CQ is empty). Failed completions are
    /// returned like the others: check [`WorkCompletion::status`].
    #[inline]
    #[cfg_attr(feature = "fault-injection", allow(unreachable_code))]
    pub fn poll<'a>(&self, out: &'a mut [WorkCompletion]) -> Result<&'a mut [WorkCompletion]> {
        #[cfg(feature = "fault-injection")]
        return crate::fault::poll(self.as_ptr(), out);
        let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: the CQ is alive; `WorkCompletion` is `repr(transparent)` over
        // `ibv_wc`, and `out` has room for `n` of them.
        let got = unsafe { sys::ibv_poll_cq(self.as_ptr(), n, out.as_mut_ptr().cast()) };
        if got < 0 {
            return Err(Error::verb("ibv_poll_cq", libc::EIO));
        }
        Ok(&mut out[..got as usize])
    }

    /// `ibv_req_notify_cq`—Arms the CQ: the next completion (the next
    /// solicited one, if `solicited_only`) raises an event on its channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        #[cfg(feature = "fault-injection")]
        if let Some(errno) = crate::fault::refused(crate::fault::Site::ReqNotifyCq, None) {
            return Err(Error::verb("ibv_req_notify_cq", errno));
        }
        // SAFETY: the CQ is alive.
        check_rc("ibv_req_notify_cq", unsafe {
            sys::ibv_req_notify_cq(self.as_ptr(), solicited_only.into())
        })
    }

    /// Waits up to `timeout` (forever if `None`) for a completion event on the
    /// CQ's channel, then takes and acknowledges it (`ibv_get_cq_event`,
    /// `ibv_ack_cq_events`). Returns `false` on timeout.
    ///
    /// The CQ must have been armed with [`req_notify`](Self::req_notify);
    /// after an event, re-arm it and poll it (in that order, so no completion
    /// is missed).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the CQ was created without a channel.
    pub fn wait_event(&self, timeout: Option<Duration>) -> Result<bool> {
        let channel = self
            .channel()
            .ok_or_else(|| Error::InvalidArgument("CQ has no completion channel".into()))?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !channel.wait_readable(left)? {
                return Ok(false);
            }
            if channel.take_event()?.is_some() {
                return Ok(true);
            }
            // Spurious wake-up (another thread took the event): wait again.
        }
    }
}

impl fmt::Debug for CompQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompQueue")
            .field("capacity", &self.capacity())
            .field("channel", &self.inner.channel)
            .field("ptr", &self.as_ptr())
            .finish()
    }
}
