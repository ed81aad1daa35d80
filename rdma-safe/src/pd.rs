//! [`ProtectionDomain`]: where memory regions and channels live.

use crate::error::IbvResult;
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
    pub fn new(context: &Context) -> IbvResult<Self> {
        Ok(ProtectionDomain {
            inner: context.alloc_pd()?,
        })
    }

    /// Opens the device called `name` (e.g. `"rxe0"`) and allocates a
    /// protection domain on it.
    pub fn open(name: &str) -> IbvResult<Self> {
        Self::new(&Context::open(name)?)
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
