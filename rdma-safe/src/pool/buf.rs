//! [`PoolBuf`]: the uniquely owned, writable handle of one pool buffer.

use super::{PoolBytes, PoolInner};
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A buffer taken from a [`BufferPool`](super::BufferPool): the only handle
/// to its memory (like `BytesMut`), so it may be written — by the program
/// through `DerefMut`, or by the NIC when an operation that writes (a
/// receive, an RDMA read) takes it by value. Returns to the pool on drop.
///
/// Its length (what `Deref` shows, and what a send of it after
/// [`freeze`](Self::freeze) carries) starts at the buffer's full
/// [`capacity`](Self::capacity); [`set_len`](Self::set_len) changes it, and a
/// completed receive sets it to the bytes that arrived.
pub struct PoolBuf {
    pool: Arc<PoolInner>,
    /// The chunk's first byte and its registration's key, looked up once
    /// (the lookup divides by the chunks per slab).
    ptr: *mut u8,
    idx: u32,
    len: u32,
    lkey: u32,
}

// SAFETY: a `PoolBuf` is the only handle to its chunk, which its `Arc`
// keeps allocated: it owns the bytes behind `ptr` as a `Box<[u8]>` owns
// its own, and is sent and shared across threads on the same terms (the
// pool's bookkeeping is atomics and a mutex).
unsafe impl Send for PoolBuf {}
// SAFETY: as above; `&PoolBuf` gives only shared, read-only access.
unsafe impl Sync for PoolBuf {}

impl PoolBuf {
    /// Wraps chunk `idx`, just taken off the free list.
    pub(super) fn new(pool: Arc<PoolInner>, idx: u32) -> Self {
        // Fits: the pool refuses buffer sizes above `u32::MAX`.
        let len = pool.buffer_size() as u32;
        let (ptr, lkey) = pool.chunk(idx);
        Self::from_frozen(pool, idx, ptr, lkey, len)
    }

    /// The buffer of chunk `idx` (first byte `ptr`, key `lkey`) again, from
    /// its last `PoolBytes` (which gave up its share of `pool`), with `len`
    /// bytes.
    pub(super) fn from_frozen(
        pool: Arc<PoolInner>,
        idx: u32,
        ptr: *mut u8,
        lkey: u32,
        len: u32,
    ) -> Self {
        PoolBuf {
            pool,
            ptr,
            idx,
            len,
            lkey,
        }
    }

    /// Bytes the buffer can hold.
    pub fn capacity(&self) -> usize {
        self.pool.buffer_size()
    }

    /// Sets the length to `len` bytes (the bytes keep their values).
    ///
    /// # Panics
    /// If `len` exceeds the [`capacity`](Self::capacity).
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity(),
            "PoolBuf::set_len({len}) beyond the capacity of {}",
            self.capacity()
        );
        self.len = len as u32;
    }

    /// Sets the length to `len` bytes, or to the capacity if `len` exceeds
    /// it (a receive's byte count): no panic path on the completion's way.
    #[inline]
    pub(crate) fn set_len_within(&mut self, len: usize) {
        self.len = len.min(self.capacity()) as u32;
    }

    /// Copies `data` to the start of the buffer and sets the length to it.
    ///
    /// # Panics
    /// If `data` is longer than the [`capacity`](Self::capacity).
    pub fn fill_from(&mut self, data: &[u8]) {
        assert!(
            data.len() <= self.capacity(),
            "PoolBuf::fill_from: {} bytes do not fit the buffer's capacity of {} (the pool's \
             buffer size)",
            data.len(),
            self.capacity()
        );
        self.set_len(data.len());
        self.copy_from_slice(data);
    }

    /// Turns the buffer into an immutable, shareable slice of its first
    /// `len()` bytes (no copy, no allocation).
    pub fn freeze(self) -> PoolBytes {
        let this = ManuallyDrop::new(self);
        // The chunk had exactly one handle (this one); from now on it has
        // one `PoolBytes`, and the count says so.
        this.pool.refs(this.idx).store(1, Ordering::Relaxed);
        // SAFETY: `this` is never used or dropped again, so the `Arc` is
        // moved out exactly once.
        let pool = unsafe { std::ptr::read(&this.pool) };
        PoolBytes::from_chunk(pool, this.idx, this.ptr, this.lkey, this.len)
    }

    /// The SGE fields of the whole buffer (up to its capacity): address,
    /// length, lkey.
    #[inline]
    pub(crate) fn sge_full(&self) -> (u64, u32, u32) {
        (self.ptr as u64, self.pool.buffer_size() as u32, self.lkey)
    }

    /// The SGE fields of the buffer's first `len()` bytes.
    #[inline]
    pub(crate) fn sge(&self) -> (u64, u32, u32) {
        (self.ptr as u64, self.len, self.lkey)
    }
}

impl Deref for PoolBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // The chunk is `capacity >= len` initialised bytes (slabs
        // are zeroed at allocation; the NIC writes only bytes) inside a slab
        // the pool keeps allocated while `self` holds it; `self` is the
        // chunk's only handle, so nobody writes it during this borrow.
        // SAFETY: by the reasoning just above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len as usize) }
    }
}

impl DerefMut for PoolBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` and being the only handle make
        // the access exclusive (no operation holds the buffer: one that
        // does owns the `PoolBuf` itself).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len as usize) }
    }
}

impl AsRef<[u8]> for PoolBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for PoolBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        self.pool.release(self.idx);
    }
}

impl fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuf")
            .field("index", &self.idx)
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}
