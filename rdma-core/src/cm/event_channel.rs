//! `rdma_create_event_channel`: the descriptor connection events arrive on.

use super::event::CmEvent;
use crate::error::{Error, Result};
use crate::fd;
use crate::wrapper::{Deleter, Wrapper};
use ibverbs_sys as sys;
use std::ffi::c_int;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Deleter for sys::rdma_event_channel {
    const DESTROY_VERB: &'static str = "rdma_destroy_event_channel";
    unsafe fn delete(ptr: *mut Self) -> c_int {
        // SAFETY: forwarded from `Deleter::delete`'s contract.
        unsafe { sys::rdma_destroy_event_channel(ptr) };
        0
    }
}

/// A connection manager event channel (`struct rdma_event_channel`): a
/// non-blocking file descriptor ([`AsFd`]) that becomes readable when an
/// identifier created on it has an event. Cheap to clone; closed after the
/// last clone and the last identifier using it.
#[derive(Clone)]
pub struct EventChannel {
    raw: Arc<Inner>,
}

struct Inner(Wrapper<sys::rdma_event_channel>);

// SAFETY: the channel is a file descriptor; librdmacm serialises event
// retrieval internally, and `rdma_get_cm_event` may be called from any thread.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl EventChannel {
    /// `rdma_create_event_channel`—Opens a channel, its descriptor set
    /// non-blocking.
    ///
    /// # Errors
    /// The errno of `rdma_create_event_channel` (`ENODEV` when the kernel
    /// has no RDMA CM, i.e. no `rdma_ucm` module), or of `fcntl`.
    pub fn new() -> Result<Self> {
        // SAFETY: no arguments; a non-null result is ours to destroy.
        let raw = unsafe {
            Wrapper::from_created(
                "rdma_create_event_channel",
                sys::rdma_create_event_channel(),
            )
        }?;
        let this = EventChannel {
            raw: Arc::new(Inner(raw)),
        };
        fd::set_nonblocking(
            this.as_raw_fd(),
            "fcntl(O_NONBLOCK) on RDMA CM event channel",
        )?;
        Ok(this)
    }

    /// The raw channel, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::rdma_event_channel {
        self.raw.0.as_ptr()
    }

    /// `rdma_get_cm_event` + `rdma_ack_cm_event`—Takes the next event if one
    /// is pending, without waiting. The event is copied (private data
    /// included) and acknowledged at once; a connect request's new identifier
    /// is moved to a channel of its own (`rdma_migrate_id`) and owned by the
    /// returned event.
    ///
    /// # Errors
    /// The errno of `rdma_get_cm_event` (other than "nothing pending"), or
    /// of creating the new identifier's channel.
    pub fn try_get_event(&self) -> Result<Option<CmEvent>> {
        let mut event: *mut sys::rdma_cm_event = ptr::null_mut();
        // SAFETY: the channel is alive; `event` is valid for writes.
        if unsafe { sys::rdma_get_cm_event(self.as_ptr(), &mut event) } != 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(Error::Verb {
                verb: "rdma_get_cm_event",
                source: err,
            });
        }
        // SAFETY: `event` was just returned by `rdma_get_cm_event` and is
        // acknowledged exactly once, by `CmEvent::take`.
        unsafe { CmEvent::take(event) }.map(Some)
    }

    /// Waits up to `timeout` for the next event and takes it
    /// ([`try_get_event`](Self::try_get_event)); `None` when none came.
    ///
    /// # Errors
    /// As [`try_get_event`](Self::try_get_event), or of `poll(2)`.
    pub fn get_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(event) = self.try_get_event()? {
                return Ok(Some(event));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero()
                || !fd::wait_readable(self.as_raw_fd(), Some(left), "poll(RDMA CM event channel)")?
            {
                return Ok(None);
            }
        }
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by the channel and stays open while
        // `self` (and so the borrow) is alive.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the channel is alive; `fd` is a plain field.
        unsafe { (*self.as_ptr()).fd }
    }
}

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}
