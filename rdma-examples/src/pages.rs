//! Page-aligned, zeroed heap memory for registered buffers, allocated
//! fallibly ([`AllocError`]).
//!
//! perftest and rdma-core's examples register page-aligned buffers; a
//! plain `Vec<u8>` starts wherever the allocator puts it, so a small
//! message may straddle two pages and the device (or rxe's software path)
//! walks both. Same alignment, same work per message.

use std::alloc::{self, Layout};
use std::fmt;
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

/// `?` in the programs, whose result is `rdma_safe::Result`: an
/// out-of-memory I/O error with this message.
impl From<AllocError> for rdma_safe::Error {
    fn from(e: AllocError) -> Self {
        std::io::Error::new(std::io::ErrorKind::OutOfMemory, e).into()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_aligned_zeroed() {
        for len in [0, 1, 64, PAGE + 1, 3 * PAGE] {
            let (ptr, layout) = alloc_pages(len, "a test").unwrap();
            assert_eq!(ptr.as_ptr() as usize % PAGE, 0, "{len} bytes");
            assert_eq!(layout.size(), len.max(1));
            // SAFETY: allocated just above with this layout, zeroed.
            let bytes = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), layout.size()) };
            assert!(bytes.iter().all(|&x| x == 0));
            // SAFETY: allocated above with this layout, freed once.
            unsafe { alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }

    #[test]
    fn impossible_sizes_are_errors() {
        let e = alloc_pages(usize::MAX, "a test").unwrap_err();
        assert_eq!(e.bytes, usize::MAX);
        assert!(e.to_string().contains("for a test"), "{e}");
        assert!(alloc_pages(isize::MAX as usize, "a test").is_err());
    }
}
