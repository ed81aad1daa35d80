//! [`AlignedBuffer`]: a zeroed, page-aligned heap allocation, and the
//! [`StableBuffer`] contract that lets a buffer be registered safely.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Memory that stays on the same physical pages for as long as the value
/// lives, so that a registration may own it (see
/// [`RegisteredBuffer`](crate::RegisteredBuffer)).
///
/// Registration pins the pages behind an address range; the NIC uses those
/// pages until deregistration, whatever later happens to the range. A buffer
/// can therefore only be registered safely if the registration owns (or
/// exclusively borrows) it and the buffer cannot be freed, reallocated or
/// remapped before the registration ends.
///
/// # Safety
///
/// An implementor guarantees that, from the first call to `deref` or
/// `deref_mut` until the value is dropped (including across moves of the
/// value):
///
/// * `deref` and `deref_mut` always return the same address and length;
/// * that range stays mapped to the same pages: the value never frees,
///   reallocates, `mremap`s or unmaps it, and nothing else can (no other
///   owner or live reference to it exists outside this value);
/// * the range is readable and writable memory the value owns or borrows
///   exclusively.
///
/// These are promises about the value as used through `Deref`/`DerefMut`
/// alone: a registration never hands out `&B` or `&mut B`, so no other
/// method of `B` can run while it is registered. That is why `Vec<u8>`
/// qualifies (nothing can push to it and reallocate); `&mut [u8]` does
/// because the exclusive borrow lasts as long as the value.
pub unsafe trait StableBuffer: DerefMut<Target = [u8]> {}

// SAFETY: a boxed slice's heap block never moves or changes size; the box is
// its only owner.
unsafe impl StableBuffer for Box<[u8]> {}
// SAFETY: the slice of a `Vec` only moves when the `Vec` grows or shrinks,
// which needs `&mut Vec`; a registration owns the `Vec` and never hands one
// out. Dereferencing returns `..len` every time.
unsafe impl StableBuffer for Vec<u8> {}
// SAFETY: the exclusive borrow lasts as long as the value; the borrowed
// memory cannot be freed or reallocated while it is borrowed.
unsafe impl StableBuffer for &mut [u8] {}
// SAFETY: the allocation is made and freed by `AlignedBuffer` alone and never
// resized.
unsafe impl StableBuffer for AlignedBuffer {}

/// Page size used for [`AlignedBuffer::new`].
const PAGE: usize = 4096;

/// A zero-initialised heap buffer aligned to a page (or a larger power of
/// two), the usual memory to register: every page of it belongs to it alone.
pub struct AlignedBuffer {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: `AlignedBuffer` owns its allocation like a `Box<[u8]>`; moving it
// between threads or sharing `&AlignedBuffer` (read-only bytes) is as safe as
// for a boxed slice.
unsafe impl Send for AlignedBuffer {}
// SAFETY: as above.
unsafe impl Sync for AlignedBuffer {}

/// Why an [`AlignedBuffer`] could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// The length or alignment is not representable (zero length, alignment
    /// not a power of two, or a size that overflows `isize`).
    #[error("cannot allocate {len} bytes aligned to {align}: invalid size or alignment")]
    InvalidLayout {
        /// Bytes asked for.
        len: usize,
        /// Alignment asked for.
        align: usize,
    },
    /// The allocator had no memory.
    #[error("out of memory allocating {len} bytes")]
    OutOfMemory {
        /// Bytes asked for.
        len: usize,
    },
}

impl AlignedBuffer {
    /// A zeroed buffer of `len` bytes aligned to a page (4096 bytes).
    ///
    /// # Errors
    /// [`AllocError::InvalidLayout`] for `len == 0` or a size above
    /// `isize::MAX`; [`AllocError::OutOfMemory`] when the allocator fails
    /// (never an abort: sizes may come from input).
    pub fn new(len: usize) -> crate::Result<Self> {
        Self::with_alignment(len, PAGE)
    }

    /// A zeroed buffer of `len` bytes aligned to `align` (a power of two).
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`AllocError::InvalidLayout`] when `align`
    /// is not a power of two.
    pub fn with_alignment(len: usize, align: usize) -> crate::Result<Self> {
        let invalid = AllocError::InvalidLayout { len, align };
        if len == 0 {
            return Err(invalid.into());
        }
        let layout = Layout::from_size_align(len, align).map_err(|_| invalid)?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(AllocError::OutOfMemory { len })?;
        Ok(AlignedBuffer { ptr, len, layout })
    }

    /// The alignment of the allocation.
    pub fn alignment(&self) -> usize {
        self.layout.align()
    }
}

impl Deref for AlignedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialised (zeroed at allocation)
        // bytes owned by `self`, borrowed shared for `&self`'s lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed exclusively through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_alignment` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuffer")
            .field("address", &self.ptr)
            .field("len", &self.len)
            .field("align", &self.layout.align())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_and_aligned() {
        let mut b = AlignedBuffer::new(10_000).expect("allocate");
        assert_eq!(b.len(), 10_000);
        assert_eq!(b.as_ptr() as usize % PAGE, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[9_999] = 7;
        assert_eq!(b[9_999], 7);
        let big = AlignedBuffer::with_alignment(64, 1 << 21).expect("2 MiB alignment");
        assert_eq!(big.as_ptr() as usize % (1 << 21), 0);
    }

    #[test]
    fn bad_sizes_are_errors_not_aborts() {
        assert!(matches!(
            AlignedBuffer::new(0),
            Err(crate::Error::Alloc(AllocError::InvalidLayout { .. }))
        ));
        assert!(matches!(
            AlignedBuffer::with_alignment(64, 3),
            Err(crate::Error::Alloc(AllocError::InvalidLayout { .. }))
        ));
        assert!(matches!(
            AlignedBuffer::new(usize::MAX - 10),
            Err(crate::Error::Alloc(AllocError::InvalidLayout { .. }))
        ));
        // 4 EiB: a valid layout larger than any address space, so it fails
        // whatever the overcommit policy.
        assert!(matches!(
            AlignedBuffer::new(1 << 62),
            Err(crate::Error::Alloc(AllocError::OutOfMemory { .. }))
        ));
    }
}
