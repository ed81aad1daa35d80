//! [`ProtectionDomain`]: where memory regions and channels live.

use crate::error::Result;
use rdma_core::Context;
use std::fmt;

/// A protection domain. Memory regions registered in it can be used by the
/// [`Channel`](crate::Channel)s created in it. Cheap to clone.
#[derive(Clone)]
pub struct ProtectionDomain {
    inner: rdma_core::ProtectionDomain,
}

impl ProtectionDomain {
    /// Allocates a protection domain on an open device.
    pub fn new(context: &Context) -> Result<Self> {
        Ok(ProtectionDomain {
            inner: context.alloc_pd()?,
        })
    }

    /// Opens the device called `name` (e.g. `"rxe0"`) and allocates a
    /// protection domain on it.
    ///
    /// The device context is the connection manager's for that device
    /// where librdmacm runs, so the domain (its memory, pools and channels)
    /// also serves connections made with [`Listener::bind_in`] and
    /// [`Channel::connect_in`] on that device; otherwise (no `rdma_cm`
    /// kernel module) a context of its own.
    ///
    /// [`Listener::bind_in`]: crate::Listener::bind_in
    /// [`Channel::connect_in`]: crate::Channel::connect_in
    ///
    /// # Errors
    /// The device does not exist (the error lists those that do), or the
    /// error of opening it or allocating the domain.
    pub fn open(name: &str) -> Result<Self> {
        let ctx = match Context::open_for_cm(name) {
            Ok(ctx) => ctx,
            Err(e) => {
                log::debug!("no connection-manager context for {name} ({e}); opening it alone");
                Context::open(name)?
            }
        };
        Self::new(&ctx)
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        self.inner.context()
    }

    /// The underlying `rdma-core` protection domain.
    pub fn as_core(&self) -> &rdma_core::ProtectionDomain {
        &self.inner
    }
}

impl From<rdma_core::ProtectionDomain> for ProtectionDomain {
    fn from(inner: rdma_core::ProtectionDomain) -> Self {
        ProtectionDomain { inner }
    }
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}
