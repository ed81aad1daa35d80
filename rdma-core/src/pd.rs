//! `ibv_alloc_pd`: protection domains.

use crate::context::Context;
use crate::error::Result;
use crate::wrapper::{deleter, Wrapper};
use ibverbs_sys as sys;
use std::fmt;
use std::sync::Arc;

deleter!(sys::ibv_pd, ibv_dealloc_pd);

struct Inner {
    raw: Wrapper<sys::ibv_pd>,
    ctx: Context,
}

/// A protection domain: memory regions, QPs, AHs and SRQs created in it may
/// be used only together. Cheap to clone; deallocated after the last clone and
/// the last object created in it.
#[derive(Clone)]
pub struct ProtectionDomain {
    inner: Arc<Inner>,
}

// SAFETY: PDs are thread-safe verbs objects (the verbs are documented
// thread-safe); this type only reads the pointer.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl ProtectionDomain {
    /// `ibv_alloc_pd`—Allocates a protection domain on `ctx`.
    pub fn new(ctx: &Context) -> Result<Self> {
        // SAFETY: the context is alive.
        let ptr = unsafe { sys::ibv_alloc_pd(ctx.as_ptr()) };
        // SAFETY: a non-null PD from `ibv_alloc_pd` is ours to deallocate.
        let raw = unsafe { Wrapper::from_created("ibv_alloc_pd", ptr) }?;
        Ok(ProtectionDomain {
            inner: Arc::new(Inner {
                raw,
                ctx: ctx.clone(),
            }),
        })
    }

    /// The raw PD, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_pd {
        self.inner.raw.as_ptr()
    }

    /// The context the PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Whether `self` and `other` are the same PD.
    pub fn same_as(&self, other: &ProtectionDomain) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.inner.ctx.name())
            .field("ptr", &self.as_ptr())
            .finish()
    }
}
