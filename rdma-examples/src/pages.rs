//! [`PageBuf`]: page-aligned, zeroed heap memory for registered buffers.
//!
//! perftest and rdma-core's examples register page-aligned buffers; a
//! plain `Vec<u8>` starts wherever the allocator puts it, so a small
//! message may straddle two pages and the device (or rxe's software path)
//! walks both. Same alignment, same work per message.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of every buffer here (the page size of the platforms rxe
/// runs on).
pub const PAGE: usize = 4096;

/// An allocation that failed: too large for the address space, or the
/// system had no memory for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocError {
    /// Bytes asked for.
    pub bytes: usize,
    /// What the memory was for.
    pub what: String,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot allocate {} bytes ({:.1} MiB) for {}: not enough memory",
            self.bytes,
            self.bytes as f64 / 1048576.0,
            self.what
        )
    }
}

impl std::error::Error for AllocError {}

/// Allocates `len` zeroed bytes (at least one) aligned to [`PAGE`];
/// `what` names the buffer in the error.
pub(crate) fn alloc_pages(len: usize, what: &str) -> Result<(NonNull<u8>, Layout), AllocError> {
    let fail = || AllocError {
        bytes: len,
        what: what.to_owned(),
    };
    let layout = Layout::from_size_align(len.max(1), PAGE).map_err(|_| fail())?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc::alloc_zeroed(layout) };
    NonNull::new(ptr).map(|p| (p, layout)).ok_or_else(fail)
}

/// A zeroed, page-aligned heap buffer; derefs to `[u8]`.
#[derive(Debug)]
pub struct PageBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    len: usize,
}

impl PageBuf {
    /// `len` zeroed bytes starting on a page boundary; `what` names the
    /// buffer in the error.
    ///
    /// # Errors
    /// The allocation failed (nothing is aborted).
    pub fn zeroed(len: usize, what: &str) -> Result<Self, AllocError> {
        let (ptr, layout) = alloc_pages(len, what)?;
        Ok(PageBuf { ptr, layout, len })
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of at least `len` bytes,
        // initialised (zeroed), owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the view exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: `PageBuf` owns its allocation like a `Box<[u8]>`, which is
// `Send` and `Sync`.
unsafe impl Send for PageBuf {}
// SAFETY: as above; shared access only reads through `&[u8]`.
unsafe impl Sync for PageBuf {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_aligned_zeroed_and_writable() {
        for len in [0, 1, 64, PAGE + 1, 3 * PAGE] {
            let mut b = PageBuf::zeroed(len, "a test").unwrap();
            assert_eq!(b.as_ptr() as usize % PAGE, 0, "{len} bytes");
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            b.fill(7);
            assert!(b.iter().all(|&x| x == 7));
        }
    }

    #[test]
    fn impossible_sizes_are_errors() {
        let e = PageBuf::zeroed(usize::MAX, "a test").unwrap_err();
        assert_eq!(e.bytes, usize::MAX);
        assert!(e.to_string().contains("for a test"), "{e}");
        assert!(PageBuf::zeroed(isize::MAX as usize, "a test").is_err());
    }
}
