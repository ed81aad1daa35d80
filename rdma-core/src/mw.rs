//! `ibv_alloc_mw`: memory windows.
//!
//! A memory window gives a peer remote access to a range of a memory region
//! under a key of its own, which can be revoked without deregistering the
//! region. A type 2 window is bound and invalidated with work requests on a
//! queue pair ([`SendRequest::bind_mw`](crate::SendRequest::bind_mw),
//! [`SendRequest::local_inv`](crate::SendRequest::local_inv)) and, once
//! bound, serves only that queue pair's peer.

use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use crate::wrapper::{deleter, Wrapper};
use ibverbs_sys as sys;
use std::fmt;

deleter!(sys::ibv_mw, ibv_dealloc_mw);

/// The kind of a memory window (`enum ibv_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound with `ibv_bind_mw`, usable from every QP of the PD.
    Type1,
    /// Bound with a work request, usable only through the binding QP.
    Type2,
}

/// A memory window. Keeps its PD alive; deallocated (`ibv_dealloc_mw`) on
/// drop, which also invalidates a bound window.
pub struct MemoryWindow {
    raw: Wrapper<sys::ibv_mw>,
    _pd: ProtectionDomain,
}

// SAFETY: the window's fields are read-only here and its verbs
// (`ibv_dealloc_mw`, posting a bind) are thread-safe.
unsafe impl Send for MemoryWindow {}
// SAFETY: as above.
unsafe impl Sync for MemoryWindow {}

impl MemoryWindow {
    /// `ibv_alloc_mw`—Allocates an unbound window of type `ty` in `pd`.
    ///
    /// # Errors
    /// `EOPNOTSUPP` when the provider has no memory windows, or the errno
    /// of `ibv_alloc_mw`.
    pub fn new(pd: &ProtectionDomain, ty: MwType) -> Result<Self> {
        let raw_ty = match ty {
            MwType::Type1 => sys::ibv_mw_type::IBV_MW_TYPE_1,
            MwType::Type2 => sys::ibv_mw_type::IBV_MW_TYPE_2,
        };
        // SAFETY: the PD is alive.
        let ptr = unsafe { sys::ibv_alloc_mw(pd.as_ptr(), raw_ty) };
        // SAFETY: a non-null window is ours to deallocate.
        let raw = unsafe { Wrapper::from_created("ibv_alloc_mw", ptr) }?;
        Ok(MemoryWindow {
            raw,
            _pd: pd.clone(),
        })
    }

    /// The raw window, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_mw {
        self.raw.as_ptr()
    }

    /// The rkey the provider reported at allocation (or the last type 1
    /// bind). A type 2 bind names its new key itself: see
    /// [`next_rkey`](Self::next_rkey).
    pub fn rkey(&self) -> u32 {
        // SAFETY: the window is alive; `rkey` is a plain field.
        unsafe { (*self.as_ptr()).rkey }
    }

    /// `ibv_inc_rkey`—`rkey` with its 8-bit tag incremented and its index
    /// kept: the key a type 2 bind gives the window next.
    pub fn next_rkey(rkey: u32) -> u32 {
        sys::ibv_inc_rkey(rkey)
    }

    /// `ibv_dealloc_mw`—Deallocates the window now, reporting a failure that
    /// dropping it could only log.
    ///
    /// # Errors
    /// The errno of `ibv_dealloc_mw`, with the window, not deallocated.
    pub fn close(self) -> std::result::Result<(), (Self, Error)> {
        let MemoryWindow { raw, _pd } = self;
        raw.close()
            .map_err(|(raw, err)| (MemoryWindow { raw, _pd }, err))
    }
}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("ptr", &self.as_ptr())
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}
