//! Scatter/gather elements: borrowed slices of registered memory.

use crate::memory::MemoryRegion;
use rdma_core::Sge;
use std::fmt;
use std::marker::PhantomData;

/// Why a scatter/gather element could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScatterGatherElementError {
    /// The slice is not fully inside the memory region.
    #[error("slice {slice_addr:#x}+{slice_len} is not within memory region {mr_addr:#x}+{mr_len}")]
    OutsideMemoryRegion {
        /// Start of the slice.
        slice_addr: usize,
        /// Length of the slice.
        slice_len: usize,
        /// Start of the region.
        mr_addr: usize,
        /// Length of the region.
        mr_len: usize,
    },
    /// The slice is longer than one SGE can describe (`u32::MAX` bytes).
    #[error("slice of {0} bytes is longer than an SGE can describe (u32::MAX)")]
    TooLong(usize),
    /// A range of a [`RegisteredBuffer`](crate::RegisteredBuffer) is not
    /// within the buffer.
    #[error("range is outside the registered buffer of {len} bytes")]
    OutOfBounds {
        /// Length of the buffer.
        len: usize,
    },
}

fn check(mr: &MemoryRegion, data: &[u8]) -> Result<(), ScatterGatherElementError> {
    if !mr.encloses_slice(data) {
        return Err(ScatterGatherElementError::OutsideMemoryRegion {
            slice_addr: data.as_ptr() as usize,
            slice_len: data.len(),
            mr_addr: mr.address(),
            mr_len: mr.length(),
        });
    }
    if u32::try_from(data.len()).is_err() {
        return Err(ScatterGatherElementError::TooLong(data.len()));
    }
    Ok(())
}

fn sge(mr: &MemoryRegion, addr: *const u8, len: usize) -> Sge {
    // Truncation is documented: the NIC then touches fewer bytes of the slice.
    Sge::new(addr as u64, len as u32, mr.lkey())
}

/// The SGEs of a gather list, as the verbs take them.
#[inline]
pub(crate) fn gather_sges<'a>(elements: &'a [GatherElement<'_>]) -> &'a [Sge] {
    // SAFETY: `GatherElement` is `repr(transparent)` over `Sge` (its other
    // field is a zero-sized marker), so the slices have the same layout.
    unsafe { std::slice::from_raw_parts(elements.as_ptr().cast::<Sge>(), elements.len()) }
}

/// The SGEs of a scatter list. Borrowing the list exclusively keeps the
/// elements (and so the buffers they borrow) from being used elsewhere
/// while the verbs read the SGEs.
#[inline]
pub(crate) fn scatter_sges<'a>(elements: &'a mut [ScatterElement<'_>]) -> &'a [Sge] {
    // SAFETY: `ScatterElement` is `repr(transparent)` over `Sge`.
    unsafe { std::slice::from_raw_parts(elements.as_ptr().cast::<Sge>(), elements.len()) }
}

/// A Gather Element for outgoing RDMA operations.
///
/// A slice of registered memory that the NIC reads from (send payloads, RDMA
/// write sources). It holds a `&'a [u8]` — shared access: nobody can mutate
/// the data while the operation is pending — and a reference to the
/// [`MemoryRegion`], so the registration stays valid.
///
/// Layout-compatible with `struct ibv_sge` (through [`rdma_core::Sge`]): a
/// slice of elements is handed to the NIC as is.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct GatherElement<'a> {
    sge: Sge,
    _borrow: PhantomData<(&'a MemoryRegion, &'a [u8])>,
}

impl<'a> GatherElement<'a> {
    /// Creates a gather element.
    ///
    /// # Panics
    /// In debug builds (`debug_assert!`), if `data` is not fully inside `mr`
    /// or its length does not fit in a `u32`. Use
    /// [`new_checked`](Self::new_checked) for an error instead.
    pub fn new(mr: &'a MemoryRegion, data: &'a [u8]) -> Self {
        if cfg!(debug_assertions) {
            if let Err(e) = check(mr, data) {
                panic!("GatherElement::new: {e}");
            }
        }
        Self::new_unchecked(mr, data)
    }

    /// Creates a gather element, validating that `data` is fully inside `mr`
    /// and that its length fits in a `u32`.
    pub fn new_checked(mr: &'a MemoryRegion, data: &'a [u8]) -> crate::Result<Self> {
        check(mr, data)?;
        Ok(Self::new_unchecked(mr, data))
    }

    /// Creates a gather element without bounds checking.
    ///
    /// Safe from a memory-safety perspective: if the slice is outside the
    /// region, the hardware detects it and the operation fails with a Local
    /// Protection Error.
    ///
    /// **Warning:** if `data.len()` exceeds `u32::MAX`, the length stored in
    /// the SGE silently wraps and only the wrapped number of bytes is used.
    pub fn new_unchecked(mr: &'a MemoryRegion, data: &'a [u8]) -> Self {
        GatherElement {
            sge: sge(mr, data.as_ptr(), data.len()),
            _borrow: PhantomData,
        }
    }

    /// An element over `len` bytes at `addr` inside `mr`, for memory that
    /// Rust code reaches only atomically and never as a slice
    /// ([`RemoteAccessBuffer`](crate::RemoteAccessBuffer)): the NIC reading
    /// it concurrently with other accesses is sound there. The caller has
    /// checked the range.
    pub(crate) fn over_shared(mr: &'a MemoryRegion, addr: *const u8, len: usize) -> Self {
        GatherElement {
            sge: sge(mr, addr, len),
            _borrow: PhantomData,
        }
    }

    /// Bytes this element covers.
    pub fn len(&self) -> usize {
        self.sge.length() as usize
    }
    /// Whether the element covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.sge.length() == 0
    }
}

impl fmt::Debug for GatherElement<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatherElement")
            .field("addr", &format_args!("{:#x}", self.sge.addr()))
            .field("length", &self.sge.length())
            .field("lkey", &format_args!("{:#x}", self.sge.lkey()))
            .finish()
    }
}

/// A Scatter Element for incoming RDMA operations.
///
/// A slice of registered memory that the NIC writes into (receive buffers,
/// RDMA read targets). It holds a `&'a mut [u8]` — exclusive access: no other
/// part of the program reads or writes the buffer while the NIC may write it —
/// and a reference to the [`MemoryRegion`].
///
/// Layout-compatible with `struct ibv_sge`.
#[repr(transparent)]
pub struct ScatterElement<'a> {
    sge: Sge,
    _borrow: PhantomData<(&'a MemoryRegion, &'a mut [u8])>,
}

impl<'a> ScatterElement<'a> {
    /// Creates a scatter element.
    ///
    /// # Panics
    /// In debug builds (`debug_assert!`), if `data` is not fully inside `mr`
    /// or its length does not fit in a `u32`. Use
    /// [`new_checked`](Self::new_checked) for an error instead.
    pub fn new(mr: &'a MemoryRegion, data: &'a mut [u8]) -> Self {
        if cfg!(debug_assertions) {
            if let Err(e) = check(mr, data) {
                panic!("ScatterElement::new: {e}");
            }
        }
        Self::new_unchecked(mr, data)
    }

    /// Creates a scatter element, validating that `data` is fully inside `mr`
    /// and that its length fits in a `u32`.
    pub fn new_checked(mr: &'a MemoryRegion, data: &'a mut [u8]) -> crate::Result<Self> {
        check(mr, data)?;
        Ok(Self::new_unchecked(mr, data))
    }

    /// Creates a scatter element without bounds checking.
    ///
    /// Safe from a memory-safety perspective: if the slice is outside the
    /// region, the hardware detects it and the operation fails with a Local
    /// Protection Error.
    ///
    /// **Warning:** if `data.len()` exceeds `u32::MAX`, the length stored in
    /// the SGE silently wraps and only the wrapped number of bytes is used.
    pub fn new_unchecked(mr: &'a MemoryRegion, data: &'a mut [u8]) -> Self {
        ScatterElement {
            sge: sge(mr, data.as_ptr(), data.len()),
            _borrow: PhantomData,
        }
    }

    /// An element over `len` bytes at `addr` inside `mr`, for memory that
    /// Rust code reaches only atomically and never as a slice
    /// ([`RemoteAccessBuffer`](crate::RemoteAccessBuffer)): the NIC writing
    /// it while Rust code loads it is no data race there. The caller has
    /// checked the range.
    pub(crate) fn over_shared(mr: &'a MemoryRegion, addr: *const u8, len: usize) -> Self {
        ScatterElement {
            sge: sge(mr, addr, len),
            _borrow: PhantomData,
        }
    }

    /// Bytes this element covers.
    pub fn len(&self) -> usize {
        self.sge.length() as usize
    }
    /// Whether the element covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.sge.length() == 0
    }
}

impl fmt::Debug for ScatterElement<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScatterElement")
            .field("addr", &format_args!("{:#x}", self.sge.addr()))
            .field("length", &self.sge.length())
            .field("lkey", &format_args!("{:#x}", self.sge.lkey()))
            .finish()
    }
}

// `GatherElement` and `ScatterElement` are `Send + Sync` automatically: the
// raw SGE is plain integers, and the markers are references to `Sync` types.
