//! [`SharedBuffer`]: memory a peer may read and write through RDMA.

use crate::pages::AllocError;
use rdma_safe::{MemoryRegion, ProtectionDomain};
use std::alloc::Layout;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};

/// A heap buffer meant for remote access, owned through a raw pointer so
/// that no Rust reference to it exists except when the caller creates
/// one on purpose, at a moment the peer is known to leave it alone.
///
/// While the peer may be writing, the only safe access is
/// [`load`](Self::load): a single-byte atomic read, which is how
/// latency tests poll for the peer's write to land.
///
/// Not `Send` or `Sync` (it holds a raw pointer): one thread uses it.
#[derive(Debug)]
pub struct SharedBuffer {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

impl SharedBuffer {
    /// A zeroed buffer of `len` bytes (at least one byte is allocated).
    /// Page-aligned, like the buffers perftest exposes; `what` names it in
    /// the error.
    ///
    /// # Errors
    /// The allocation failed (nothing is aborted).
    pub fn new(len: usize, what: &str) -> Result<Self, AllocError> {
        let (ptr, layout) = crate::pages::alloc_pages(len, what)?;
        Ok(SharedBuffer {
            ptr,
            len: layout.size(),
            layout,
        })
    }

    /// Start of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Registers the whole buffer for local use and remote read and write.
    ///
    /// # Safety
    /// The region must be dropped before `self` (the peer may use the
    /// rkey until then), and the peer must only access the buffer when
    /// the program's protocol allows it — see [`slice`](Self::slice).
    pub unsafe fn register(&self, pd: &ProtectionDomain) -> rdma_safe::Result<MemoryRegion> {
        // SAFETY: forwarded to the caller; the pointer and length describe
        // this live allocation.
        unsafe { MemoryRegion::register_shared_mr(pd, self.as_ptr(), self.len) }
    }

    /// Reads byte `i` atomically: sound even while the peer's RDMA write
    /// to the buffer is landing.
    ///
    /// # Panics
    /// If `i` is out of bounds.
    pub fn load(&self, i: usize) -> u8 {
        assert!(i < self.len, "index {i} out of bounds ({} bytes)", self.len);
        // Rust code makes non-atomic accesses only through `slice` /
        // `slice_mut`, whose callers promise nothing else (this load
        // included: same thread, sequenced) touches the range meanwhile.
        // SAFETY: in bounds (checked above), byte-aligned, valid for the
        // lifetime of `&self`; no concurrent non-atomic access (above).
        unsafe { AtomicU8::from_ptr(self.as_ptr().add(i)) }.load(Ordering::Acquire)
    }

    /// A shared view of `range`.
    ///
    /// # Safety
    /// While the returned slice lives, no peer may write `range` (the
    /// program's protocol must have told the peer to stop, and the peer
    /// must have confirmed its writes completed).
    ///
    /// # Panics
    /// If `range` is out of bounds.
    pub unsafe fn slice(&self, range: Range<usize>) -> &[u8] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds; the caller guarantees no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.as_ptr().add(range.start), range.len()) }
    }

    /// An exclusive view of `range`.
    ///
    /// # Safety
    /// While the returned slice lives, no peer may read or write `range`.
    ///
    /// # Panics
    /// If `range` is out of bounds.
    pub unsafe fn slice_mut(&mut self, range: Range<usize>) -> &mut [u8] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds; `&mut self` excludes other Rust views; the
        // caller guarantees no concurrent access by the peer.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(range.start), range.len()) }
    }
}

impl Drop for SharedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `new` with this layout, freed once, here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
