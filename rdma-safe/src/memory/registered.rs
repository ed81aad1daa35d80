//! [`RegisteredBuffer`]: a memory registration that owns (or exclusively
//! borrows) the memory it registers.
//!
//! The NIC addresses a region's memory through the pages pinned at
//! registration, not through virtual addresses (see the [`memory`] module).
//! A registration is therefore only sound while its range stays on those
//! pages, and the one way to make sure of that without the caller's promise
//! is for the registration to hold the memory: a `RegisteredBuffer<B>` owns a
//! [`StableBuffer`] `B` — a `Vec<u8>`, a `Box<[u8]>`, an [`AlignedBuffer`] or a
//! `&'a mut [u8]` — and gives it back only after deregistering it
//! ([`into_inner`](RegisteredBuffer::into_inner)). While registered, the
//! memory is reachable only through the registration, as `&[u8]`/`&mut [u8]`
//! (never as the `Vec`, which could reallocate), and every gather or scatter
//! element borrows the registration, so it can be neither dropped nor moved
//! while an operation uses it.
//!
//! [`memory`]: crate::memory

use crate::error::Result;
use crate::memory::aligned::{AlignedBuffer, StableBuffer};
use crate::memory::element::{GatherElement, ScatterElement, ScatterGatherElementError};
use crate::memory::MemoryRegion;
use crate::pd::ProtectionDomain;
use rdma_core::AccessFlags;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Bound, Deref, DerefMut, Range, RangeBounds};

/// A buffer registered for local access (sends, receives, RDMA write sources
/// and read targets) that owns its memory for as long as it is registered.
///
/// `B` is what holds the memory: an [`AlignedBuffer`] (the default, from
/// [`new`](Self::new)), a `Vec<u8>` or `Box<[u8]>`
/// ([`register`](Self::register)), or a `&'a mut [u8]`, in which case the
/// registration carries `'a` and the borrowed memory cannot be reallocated or
/// freed before the registration is dropped.
///
/// ```no_run
/// # use rdma_safe::{ProtectionDomain, RegisteredBuffer, SendWorkRequest};
/// # fn main() -> Result<(), rdma_safe::Error> {
/// # let pd = ProtectionDomain::open("rxe0")?;
/// # let mut channel = pd.create_channel()?;
/// let mut buf = RegisteredBuffer::new(&pd, 4096)?;
/// buf[..5].copy_from_slice(b"hello");
/// channel.send(SendWorkRequest::new(&[buf.gather(..5)]))?;
/// # Ok(())
/// # }
/// ```
pub struct RegisteredBuffer<B: StableBuffer = AlignedBuffer> {
    /// Deregistered in `Drop` before `buffer` is released.
    region: ManuallyDrop<MemoryRegion>,
    buffer: ManuallyDrop<B>,
}

impl RegisteredBuffer<AlignedBuffer> {
    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers
    /// it in `pd` for local access.
    ///
    /// # Errors
    /// [`Error::Alloc`](crate::Error::Alloc) when `len` is zero or cannot be
    /// allocated; [`Error::Verbs`](crate::Error::Verbs) with `ibv_reg_mr`'s
    /// errno when the memory cannot be pinned (`ENOMEM`/`EFAULT`: see
    /// `ulimit -l`).
    pub fn new(pd: &ProtectionDomain, len: usize) -> crate::Result<Self> {
        Self::register(pd, AlignedBuffer::new(len)?)
    }
}

impl<B: StableBuffer> RegisteredBuffer<B> {
    /// Registers `buffer` in `pd` for local access and takes it over until
    /// [`into_inner`](Self::into_inner) or drop.
    ///
    /// # Errors
    /// `ibv_reg_mr`'s error; `EINVAL` ([`VerbsError::InvalidArgument`]) for an
    /// empty buffer, which has no pages to register.
    ///
    /// [`VerbsError::InvalidArgument`]: crate::error::VerbsError::InvalidArgument
    pub fn register(pd: &ProtectionDomain, mut buffer: B) -> Result<Self> {
        let (ptr, len) = {
            let slice: &mut [u8] = &mut buffer;
            (slice.as_mut_ptr(), slice.len())
        };
        if len == 0 {
            return Err(rdma_core::Error::InvalidArgument(
                "cannot register an empty buffer".into(),
            )
            .into());
        }
        // `buffer` is a `StableBuffer`: `ptr..ptr+len` stays on the
        // same pages until `buffer` is dropped, and `RegisteredBuffer` drops
        // the region (deregistering it) first. Local access only: the NIC
        // touches the memory solely through elements that borrow `self`.
        // SAFETY: by the reasoning just above.
        let region = unsafe {
            MemoryRegion::register_mr_with_access(pd, ptr, len, AccessFlags::LOCAL_WRITE)
        }?;
        Ok(RegisteredBuffer {
            region: ManuallyDrop::new(region),
            buffer: ManuallyDrop::new(buffer),
        })
    }

    /// The registration, for the element constructors of
    /// [`MemoryRegion`] (e.g. `buf.region().gather_element(&buf[..n])`).
    pub fn region(&self) -> &MemoryRegion {
        &self.region
    }

    /// The registration and the memory at once, to build scatter elements
    /// over parts of the memory:
    ///
    /// ```no_run
    /// # use rdma_safe::{ProtectionDomain, RegisteredBuffer};
    /// # fn main() -> Result<(), rdma_safe::Error> {
    /// # let pd = ProtectionDomain::open("rxe0")?;
    /// let mut buf = RegisteredBuffer::new(&pd, 8192)?;
    /// let (mr, bytes) = buf.split_mut();
    /// let (head, tail) = bytes.split_at_mut(4096);
    /// let scatter = [mr.scatter_element(head), mr.scatter_element(tail)];
    /// # Ok(())
    /// # }
    /// ```
    pub fn split_mut(&mut self) -> (&MemoryRegion, &mut [u8]) {
        (&self.region, &mut self.buffer)
    }

    /// A gather element (send payload, RDMA write source) over `range` of
    /// the buffer: the one way to make an element of a buffer (the seeds'
    /// [`MemoryRegion::gather_element`] family works on a region and a
    /// slice of it).
    ///
    /// # Panics
    /// If `range` is out of bounds or decreasing (as slice indexing), or
    /// longer than `u32::MAX` bytes. Check ranges that come from input
    /// first: the buffer's length (`buf.len()`) is the bound.
    pub fn gather(&self, range: impl RangeBounds<usize>) -> GatherElement<'_> {
        let r = bounds(&range, self.buffer.len())
            .unwrap_or_else(|e| panic!("RegisteredBuffer::gather: {e}"));
        self.region
            .gather_element_checked(&self.buffer[r])
            .unwrap_or_else(|e| panic!("RegisteredBuffer::gather: {e}"))
    }

    /// A scatter element (receive buffer, RDMA read target) over `range` of
    /// the buffer, borrowing it exclusively.
    ///
    /// # Panics
    /// As [`gather`](Self::gather).
    pub fn scatter(&mut self, range: impl RangeBounds<usize>) -> ScatterElement<'_> {
        let r = bounds(&range, self.buffer.len())
            .unwrap_or_else(|e| panic!("RegisteredBuffer::scatter: {e}"));
        let (mr, bytes) = self.split_mut();
        mr.scatter_element_checked(&mut bytes[r])
            .unwrap_or_else(|e| panic!("RegisteredBuffer::scatter: {e}"))
    }

    /// Deregisters the buffer and gives it back.
    ///
    /// # Errors
    /// If `ibv_dereg_mr` fails the NIC may still reach the memory, so it is
    /// not given back: the registration and the buffer are leaked (they stay
    /// valid forever) and the verb's error is returned.
    pub fn into_inner(self) -> Result<B> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; each field is taken
        // exactly once.
        let (region, buffer) = unsafe {
            (
                ManuallyDrop::take(&mut this.region),
                ManuallyDrop::take(&mut this.buffer),
            )
        };
        match region.close() {
            Ok(()) => Ok(buffer),
            Err((region, e)) => {
                std::mem::forget((region, buffer));
                Err(e)
            }
        }
    }
}

/// Resolves `range` against a buffer of `len` bytes.
pub(crate) fn bounds(
    range: &impl RangeBounds<usize>,
    len: usize,
) -> Result<Range<usize>, ScatterGatherElementError> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(start), Some(end)) if start <= end && end <= len => Ok(start..end),
        _ => Err(ScatterGatherElementError::OutOfBounds { len }),
    }
}

impl<B: StableBuffer> Drop for RegisteredBuffer<B> {
    fn drop(&mut self) {
        // SAFETY: each field is taken exactly once, here, and never used
        // again.
        let (region, buffer) = unsafe {
            (
                ManuallyDrop::take(&mut self.region),
                ManuallyDrop::take(&mut self.buffer),
            )
        };
        // Deregister first, so the NIC's access ends before the memory may
        // be freed; if deregistration fails the NIC may still reach it, so
        // both are leaked rather than freed.
        if let Err((region, e)) = region.close() {
            log::error!("deregistering a buffer failed ({e}); leaking it");
            std::mem::forget((region, buffer));
        }
    }
}

impl<B: StableBuffer> Deref for RegisteredBuffer<B> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buffer
    }
}

impl<B: StableBuffer> DerefMut for RegisteredBuffer<B> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buffer
    }
}

impl<B: StableBuffer> AsRef<[u8]> for RegisteredBuffer<B> {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl<B: StableBuffer> AsMut<[u8]> for RegisteredBuffer<B> {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buffer
    }
}

impl<B: StableBuffer> fmt::Debug for RegisteredBuffer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredBuffer")
            .field("region", &*self.region)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // A reversed range is one of the inputs under test.
    #[allow(clippy::reversed_empty_ranges)]
    fn ranges_resolve_like_slice_indexing() {
        assert_eq!(bounds(&(..), 10), Ok(0..10));
        assert_eq!(bounds(&(2..5), 10), Ok(2..5));
        assert_eq!(bounds(&(2..=5), 10), Ok(2..6));
        assert_eq!(bounds(&(10..), 10), Ok(10..10));
        let oob = Err(ScatterGatherElementError::OutOfBounds { len: 10 });
        assert_eq!(bounds(&(5..11), 10), oob);
        #[allow(clippy::reversed_empty_ranges)] // the point of the check
        let reversed = 6..5;
        assert_eq!(bounds(&reversed, 10), oob);
        assert_eq!(bounds(&(..=usize::MAX), 10), oob);
        assert_eq!(
            bounds(&(Bound::Excluded(usize::MAX), Bound::Unbounded), 10),
            oob
        );
    }
}
