//! Scatter/gather elements (`struct ibv_sge`) and the lists requests point to.

use ibverbs_sys as sys;
use std::ffi::c_int;
use std::fmt;

/// One scatter/gather element (`struct ibv_sge`): `length` bytes at `addr`,
/// inside a memory region whose local key is `lkey`.
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct Sge(sys::ibv_sge);

impl Sge {
    /// The element of `length` bytes at `addr` in the region with `lkey`.
    #[inline]
    pub const fn new(addr: u64, length: u32, lkey: u32) -> Self {
        Sge(sys::ibv_sge { addr, length, lkey })
    }
    /// Address of the first byte.
    #[inline]
    pub const fn addr(&self) -> u64 {
        self.0.addr
    }
    /// Length in bytes.
    #[inline]
    pub const fn length(&self) -> u32 {
        self.0.length
    }
    /// Local key of the memory region the bytes belong to.
    #[inline]
    pub const fn lkey(&self) -> u32 {
        self.0.lkey
    }
}

impl PartialEq for Sge {
    fn eq(&self, other: &Self) -> bool {
        (self.addr(), self.length(), self.lkey()) == (other.addr(), other.length(), other.lkey())
    }
}

impl Eq for Sge {}

impl fmt::Debug for Sge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sge")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("length", &self.length())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .finish()
    }
}

/// The `sg_list`/`num_sge` pair of a request over `sges`.
///
/// The verbs declare `sg_list` mutable but only read it, so a shared borrow
/// is enough. A slice longer than `c_int::MAX` is cut at that length (the
/// provider rejects it anyway: no device takes that many SGEs).
#[inline]
pub(super) fn sg_list(sges: &[Sge]) -> (*mut sys::ibv_sge, c_int) {
    let len = c_int::try_from(sges.len()).unwrap_or(c_int::MAX);
    (sges.as_ptr().cast_mut().cast(), len)
}

/// The elements a request points to, as the slice they were built from.
///
/// # Safety
/// `list`/`len` must come from [`sg_list`] over a slice that lives for `'a`.
#[inline]
pub(super) unsafe fn sges_of<'a>(list: *const sys::ibv_sge, len: c_int) -> &'a [Sge] {
    // SAFETY: caller contract; `Sge` is `repr(transparent)` over `ibv_sge`,
    // and `len` is at most the original slice's length.
    unsafe { std::slice::from_raw_parts(list.cast(), len as usize) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use static_assertions::{assert_eq_align, assert_eq_size, assert_impl_all};

    assert_eq_size!(Sge, sys::ibv_sge);
    assert_eq_align!(Sge, sys::ibv_sge);
    assert_impl_all!(Sge: Copy, Send, Sync);

    #[test]
    fn sge_fields() {
        let sge = Sge::new(0xdead_beef_0000, 4096, 0x1234);
        assert_eq!(
            (sge.addr(), sge.length(), sge.lkey()),
            (0xdead_beef_0000, 4096, 0x1234)
        );
        assert_eq!(sge.0.addr, 0xdead_beef_0000);
        assert_eq!(sge.0.length, 4096);
        assert_eq!(sge.0.lkey, 0x1234);
    }
}
