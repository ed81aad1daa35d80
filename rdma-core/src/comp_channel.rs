//! `ibv_create_comp_channel`: completion event channels.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::fd;
use crate::wrapper::{deleter, Wrapper};
use ibverbs_sys as sys;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

deleter!(sys::ibv_comp_channel, ibv_destroy_comp_channel);

struct Inner {
    raw: Wrapper<sys::ibv_comp_channel>,
    _ctx: Context,
}

/// A completion event channel: a file descriptor that becomes readable when a
/// CQ attached to it, armed with [`CompQueue::req_notify`](crate::CompQueue::req_notify),
/// gets a completion. The descriptor is non-blocking; wait on it with
/// `poll(2)`/`epoll` (it implements [`AsFd`]) or with
/// [`CompQueue::wait_event`](crate::CompQueue::wait_event).
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<Inner>,
}

// SAFETY: the channel is a file descriptor plus a pointer the verbs read;
// `ibv_get_cq_event` may be called from any thread.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl CompChannel {
    /// `ibv_create_comp_channel`—Creates a channel on `ctx`, with its
    /// descriptor set non-blocking.
    pub fn new(ctx: &Context) -> Result<Self> {
        // SAFETY: the context is alive.
        let ptr = unsafe { sys::ibv_create_comp_channel(ctx.as_ptr()) };
        // SAFETY: a non-null channel is ours to destroy.
        let raw = unsafe { Wrapper::from_created("ibv_create_comp_channel", ptr) }?;
        let this = CompChannel {
            inner: Arc::new(Inner {
                raw,
                _ctx: ctx.clone(),
            }),
        };
        fd::set_nonblocking(this.as_raw_fd(), "fcntl(O_NONBLOCK) on completion channel")?;
        Ok(this)
    }

    /// The raw channel, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_comp_channel {
        self.inner.raw.as_ptr()
    }

    /// Waits until the descriptor is readable or `timeout` passes.
    /// Returns whether it is readable.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool> {
        fd::wait_readable(self.as_raw_fd(), timeout, "poll(completion channel)")
    }

    /// `ibv_get_cq_event` + `ibv_ack_cq_events`—Takes one pending event, if
    /// any, acknowledges it, and returns the raw CQ it was for.
    pub fn take_event(&self) -> Result<Option<*mut sys::ibv_cq>> {
        let mut cq: *mut sys::ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut std::ffi::c_void = ptr::null_mut();
        // SAFETY: the channel is alive; the out-pointers are valid.
        let rc = unsafe { sys::ibv_get_cq_event(self.as_ptr(), &mut cq, &mut cq_ctx) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(Error::Verb {
                verb: "ibv_get_cq_event",
                source: err,
            });
        }
        // SAFETY: `cq` was just returned by `ibv_get_cq_event`, so it is alive
        // (a CQ cannot be destroyed while it has unacknowledged events).
        unsafe { sys::ibv_ack_cq_events(cq, 1) };
        Ok(Some(cq))
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by the channel and stays open while
        // `self` (and so the borrow) is alive.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the channel is alive; `fd` is a plain field.
        unsafe { (*self.as_ptr()).fd }
    }
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}
