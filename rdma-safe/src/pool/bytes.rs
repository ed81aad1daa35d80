//! [`PoolBytes`]: shared, immutable, reference-counted slices of pool
//! buffers.

use super::{increment, PoolBuf, PoolInner};
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Bound, Deref, RangeBounds};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// An immutable slice of a pool buffer, shared by reference count (like
/// `Bytes`): [`clone`](Clone::clone) and [`slice`](Self::slice) cost an
/// atomic increment, never a copy or an allocation. The operations in which
/// the NIC only reads (send, RDMA write source) take one by value, so the
/// same payload may be in flight to many peers at once. The buffer returns
/// to the pool when the last slice over it is dropped.
///
/// Made by [`PoolBuf::freeze`](super::PoolBuf::freeze); no `PoolBuf` over
/// the same buffer can exist while a `PoolBytes` does, so the bytes never
/// change.
pub struct PoolBytes {
    pool: Arc<PoolInner>,
    /// The chunk's first byte and its registration's key (see `PoolBuf`).
    chunk: *mut u8,
    idx: u32,
    off: u32,
    len: u32,
    lkey: u32,
}

// SAFETY: the bytes behind `chunk` are immutable while any `PoolBytes` over
// them exists, and the `Arc` keeps them allocated: a `PoolBytes` is shared
// and sent across threads as an `Arc<[u8]>` is.
unsafe impl Send for PoolBytes {}
// SAFETY: as above.
unsafe impl Sync for PoolBytes {}

impl PoolBytes {
    /// The first `len` bytes of chunk `idx` (first byte `chunk`, key
    /// `lkey`), whose reference count already includes this handle.
    pub(super) fn from_chunk(
        pool: Arc<PoolInner>,
        idx: u32,
        chunk: *mut u8,
        lkey: u32,
        len: u32,
    ) -> Self {
        PoolBytes {
            pool,
            chunk,
            idx,
            off: 0,
            len,
            lkey,
        }
    }

    /// Another handle to the same chunk (its count increased), over `off`
    /// and `len`.
    fn share(&self, off: u32, len: u32) -> PoolBytes {
        increment(self.pool.refs(self.idx));
        PoolBytes {
            pool: self.pool.clone(),
            off,
            len,
            ..*self
        }
    }

    /// A slice of `range` of these bytes, sharing the buffer.
    ///
    /// # Panics
    /// If `range` is out of bounds, as slice indexing.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> PoolBytes {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e + 1,
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len as usize,
        };
        assert!(
            start <= end && end <= self.len as usize,
            "PoolBytes::slice({start}..{end}) out of bounds of {} bytes",
            self.len
        );
        self.share(self.off + start as u32, (end - start) as u32)
    }

    /// The writable buffer back, if this is the only handle to it and the
    /// slice starts at the buffer's start; `Err(self)` otherwise (another
    /// clone or slice exists — an operation still in flight holds one —
    /// or the slice starts further in). No copy, no allocation: a send or
    /// write source whose operation has completed can be changed and sent
    /// again without taking another buffer from the pool. The buffer's
    /// length is the slice's.
    ///
    /// # Errors
    /// `self`, unchanged, when the buffer is shared or the slice does not
    /// start at offset 0.
    pub fn try_into_mut(self) -> Result<PoolBuf, PoolBytes> {
        // Acquire pairs with the release decrements of the other handles'
        // drops (as in `Drop`): their reads of the bytes happen before the
        // writes the returned buffer allows. A count of 1 is this handle:
        // no other can appear meanwhile, since making one needs a handle.
        if self.off != 0 || self.pool.refs(self.idx).load(Ordering::Acquire) != 1 {
            return Err(self);
        }
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the `Arc` is
        // moved out exactly once (its count passes to the `PoolBuf`).
        let pool = unsafe { std::ptr::read(&this.pool) };
        Ok(PoolBuf::from_frozen(
            pool, this.idx, this.chunk, this.lkey, this.len,
        ))
    }

    /// The SGE fields of the slice: address, length, lkey.
    #[inline]
    pub(crate) fn sge(&self) -> (u64, u32, u32) {
        (self.chunk as u64 + u64::from(self.off), self.len, self.lkey)
    }
}

impl Clone for PoolBytes {
    fn clone(&self) -> Self {
        self.share(self.off, self.len)
    }
}

impl Deref for PoolBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // `off + len` lies within the chunk's initialised bytes, in a
        // slab the pool keeps allocated while `self` holds it. Only
        // `PoolBytes` handles (shared, read-only) exist for the chunk, and
        // the NIC only reads it (sends and write sources), so the bytes do
        // not change during the borrow.
        // SAFETY: by the reasoning just above.
        unsafe { std::slice::from_raw_parts(self.chunk.add(self.off as usize), self.len as usize) }
    }
}

impl AsRef<[u8]> for PoolBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for PoolBytes {
    fn drop(&mut self) {
        // Release/acquire as in `Arc`: every use of the bytes through other
        // handles happens before the chunk is handed out again.
        if self.pool.refs(self.idx).fetch_sub(1, Ordering::Release) == 1 {
            fence(Ordering::Acquire);
            self.pool.release(self.idx);
        }
    }
}

impl fmt::Debug for PoolBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBytes")
            .field("index", &self.idx)
            .field("offset", &self.off)
            .field("len", &self.len)
            .finish()
    }
}

impl PartialEq<[u8]> for PoolBytes {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}
