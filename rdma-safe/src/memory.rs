//! Registered memory: [`MemoryRegion`] and its safety architecture.
//!
//! # Why local registration is safe
//!
//! A [`MemoryRegion`] does not own or borrow the memory it registers. The NIC
//! touches memory only through the SGEs of work requests, and every SGE this
//! crate builds comes from a live Rust reference: a [`GatherElement`] holds a
//! `&'a [u8]` (the NIC may read it; nobody may write it), a
//! [`ScatterElement`] holds a `&'a mut [u8]` (the NIC may write it; nobody
//! else may touch it). The address and length the NIC uses are those of the
//! borrowed slice, so the NIC never reaches outside memory Rust lent it; the
//! region's key only grants the permission. A slice outside the region is
//! rejected by the hardware with a Local Protection Error, never
//! undefined behaviour. How long the borrow lasts is enforced by the
//! [`Channel`](crate::Channel) operations and [scopes](crate::Channel::scope).
//!
//! # Why remote access is `unsafe`
//!
//! With remote read or write access a peer can reach the memory at any time,
//! through the rkey, without any Rust borrow: the compiler can no longer see
//! who reads or writes it. [`MemoryRegion::register_shared_mr`] and
//! [`MemoryRegion::register_mr_with_access`] (with remote flags) are therefore
//! `unsafe`, and their callers promise to keep the memory allocated and
//! treat it as shared mutable state while peers may access it.

use crate::error::IbvResult;
use crate::pd::ProtectionDomain;
use crate::remote::RemoteMemoryRegion;
use crate::sge::{GatherElement, ScatterElement, ScatterGatherElementError};
use std::fmt;
use std::os::fd::BorrowedFd;

pub use rdma_core::AccessFlags;

/// A handle to a registered Memory Region.
///
/// Registration pins a buffer and gives the NIC its address translation. A
/// `MemoryRegion` does not own the buffer: the same memory may be registered
/// in several protection domains, and memory owned by other structures may be
/// registered. Safety is enforced when [`GatherElement`]s and
/// [`ScatterElement`]s are created from it (see the [module docs](self)).
/// Deregistered on drop; keeps its protection domain alive.
pub struct MemoryRegion {
    inner: rdma_core::MemoryRegion,
    access: AccessFlags,
}

impl MemoryRegion {
    /// Registers a memory region with specific access permissions.
    ///
    /// * `pd` — the protection domain to register it in.
    /// * `address` — start of the buffer.
    /// * `length` — its size in bytes.
    /// * `access_flags` — what the NIC may do with it.
    ///
    /// # Safety
    ///
    /// Enabling remote read or write access breaks local safety guarantees.
    /// If remote access is enabled:
    ///
    /// 1. **Aliasing**: remote peers can read or modify this memory at any
    ///    time. You must make sure Rust's aliasing rules are respected: no
    ///    `&mut` to it may exist while a peer may read it, and no `&` while a
    ///    peer may write it.
    /// 2. **Lifetime**: the memory must remain allocated as long as remote
    ///    peers may perform RDMA operations on it (until this region is
    ///    dropped, or until they are known to have stopped).
    ///
    /// Without remote flags this is as safe as [`register_local_mr`](Self::register_local_mr).
    ///
    /// # Errors
    /// The error of `ibv_reg_mr`: `EINVAL` for a zero length or a flag
    /// combination the device rejects (remote write without local write),
    /// `EFAULT`/`ENOMEM` for memory that cannot be pinned (see `ulimit -l`).
    pub unsafe fn register_mr_with_access(
        pd: &ProtectionDomain,
        address: *mut u8,
        length: usize,
        access_flags: AccessFlags,
    ) -> IbvResult<MemoryRegion> {
        // SAFETY: forwarded to the caller (see above). The NIC only reaches
        // the memory locally through SGEs built from live references.
        let inner = unsafe {
            rdma_core::MemoryRegion::register(pd.as_core(), address, length, access_flags)
        }?;
        Ok(MemoryRegion {
            inner,
            access: access_flags,
        })
    }

    /// Registers a local memory region (local write access only).
    ///
    /// # Why is this safe?
    ///
    /// 1. No remote access is granted, so no peer can alias the memory.
    /// 2. To use the region locally (send, receive, write source, read
    ///    target) an SGE must be created from a live Rust reference to the
    ///    memory, which proves it is allocated and borrowed correctly for as
    ///    long as the NIC may use it.
    ///
    /// If the buffer is freed while still registered the pages stay pinned
    /// and the region keeps pointing at them; new memory at the same address
    /// is not seen by the NIC. Drop regions before (or with) their buffers.
    // The pointer is never dereferenced by Rust: the kernel validates the
    // range when pinning it (EFAULT), and the NIC reaches it only through SGEs
    // built from live references.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn register_local_mr(
        pd: &ProtectionDomain,
        address: *mut u8,
        length: usize,
    ) -> IbvResult<MemoryRegion> {
        // SAFETY: local write only: the NIC reaches the memory solely through
        // SGEs built from live references (module docs).
        unsafe { Self::register_mr_with_access(pd, address, length, AccessFlags::LOCAL_WRITE) }
    }

    /// Registers a shared memory region: local write, remote read and remote
    /// write access.
    ///
    /// # Safety
    ///
    /// Remote peers may access the memory:
    ///
    /// * **Aliasing** — the memory becomes shared mutable state; you must
    ///   respect Rust's aliasing rules while peers may read or write it.
    /// * **Lifetime** — the memory must remain allocated as long as remote
    ///   peers may perform RDMA operations on it.
    pub unsafe fn register_shared_mr(
        pd: &ProtectionDomain,
        address: *mut u8,
        length: usize,
    ) -> IbvResult<MemoryRegion> {
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        // SAFETY: forwarded to the caller.
        unsafe { Self::register_mr_with_access(pd, address, length, access) }
    }

    /// Registers a DMA-BUF with the given access flags.
    ///
    /// * `fd` — the DMA-BUF file descriptor.
    /// * `offset` — start offset within the DMA-BUF.
    /// * `length` — size of the region.
    /// * `iova` — the virtual base address the NIC uses for this region
    ///   through its keys; must have the same page offset as `offset`.
    ///
    /// # Safety
    /// As [`register_mr_with_access`](Self::register_mr_with_access); with remote
    /// flags the caller manages aliasing and lifetime of the DMA-BUF memory.
    pub unsafe fn register_dmabuf_mr_with_access(
        pd: &ProtectionDomain,
        fd: i32,
        offset: u64,
        length: usize,
        iova: u64,
        access_flags: AccessFlags,
    ) -> IbvResult<MemoryRegion> {
        // SAFETY: `fd` is only used for the duration of the registration call;
        // an invalid descriptor makes the verb fail with EBADF.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        // SAFETY: forwarded to the caller.
        let inner = unsafe {
            rdma_core::MemoryRegion::register_dmabuf(
                pd.as_core(),
                fd,
                offset,
                length,
                iova,
                access_flags,
            )
        }?;
        Ok(MemoryRegion {
            inner,
            access: access_flags,
        })
    }

    /// Registers a DMA-BUF for local access only. Safe for the same reasons
    /// as [`register_local_mr`](Self::register_local_mr): every use goes
    /// through SGEs built from live references.
    pub fn register_local_dmabuf_mr(
        pd: &ProtectionDomain,
        fd: i32,
        offset: u64,
        length: usize,
        iova: u64,
    ) -> IbvResult<MemoryRegion> {
        // SAFETY: local write only (see `register_local_mr`).
        unsafe {
            Self::register_dmabuf_mr_with_access(
                pd,
                fd,
                offset,
                length,
                iova,
                AccessFlags::LOCAL_WRITE,
            )
        }
    }

    /// Registers a DMA-BUF for shared access (local write, remote read and
    /// write).
    ///
    /// # Safety
    /// Remote access risks; see [`register_shared_mr`](Self::register_shared_mr).
    pub unsafe fn register_shared_dmabuf_mr(
        pd: &ProtectionDomain,
        fd: i32,
        offset: u64,
        length: usize,
        iova: u64,
    ) -> IbvResult<MemoryRegion> {
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        // SAFETY: forwarded to the caller.
        unsafe { Self::register_dmabuf_mr_with_access(pd, fd, offset, length, iova, access) }
    }

    /// The remote key, which peers use to reach this region.
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }
    /// The local key, which SGEs carry.
    pub fn lkey(&self) -> u32 {
        self.inner.lkey()
    }
    /// Start address of the registered range.
    pub fn address(&self) -> usize {
        self.inner.addr() as usize
    }
    /// Length of the registered range in bytes.
    pub fn length(&self) -> usize {
        self.inner.len()
    }
    /// The access granted at registration.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// The underlying `rdma-core` region.
    pub fn as_core(&self) -> &rdma_core::MemoryRegion {
        &self.inner
    }

    /// The (address, length, rkey) triplet a remote peer needs for one-sided
    /// operations on this region.
    ///
    /// A peer's operation that registration did not enable (e.g. a write to a
    /// region without remote write) fails with a Remote Access Error.
    pub fn remote(&self) -> RemoteMemoryRegion {
        RemoteMemoryRegion::new(self.address() as u64, self.length() as u64, self.rkey())
    }

    /// Whether `address..address+length` lies within this region.
    pub fn encloses(&self, address: *const u8, length: usize) -> bool {
        let start = address as usize;
        match start.checked_add(length) {
            Some(end) => start >= self.address() && end <= self.address() + self.length(),
            None => false,
        }
    }

    /// Whether `slice` lies within this region.
    pub fn encloses_slice(&self, slice: &[u8]) -> bool {
        self.encloses(slice.as_ptr(), slice.len())
    }

    /// A gather element (send / write source) over `data`, checked with
    /// `debug_assert!` only.
    ///
    /// # Panics
    /// In debug builds, if `data` is not within this region or longer than
    /// `u32::MAX`.
    pub fn gather_element<'a>(&'a self, data: &'a [u8]) -> GatherElement<'a> {
        GatherElement::new(self, data)
    }

    /// A gather element over `data`, checking that it lies within this region
    /// and that its length fits in a `u32`.
    pub fn gather_element_checked<'a>(
        &'a self,
        data: &'a [u8],
    ) -> Result<GatherElement<'a>, ScatterGatherElementError> {
        GatherElement::new_checked(self, data)
    }

    /// A gather element over `data` without software checks: a slice outside
    /// the region makes the operation fail with a Local Protection Error; no
    /// undefined behaviour is possible.
    pub fn gather_element_unchecked<'a>(&'a self, data: &'a [u8]) -> GatherElement<'a> {
        GatherElement::new_unchecked(self, data)
    }

    /// A scatter element (receive / read target) over `data`, checked with
    /// `debug_assert!` only.
    ///
    /// # Panics
    /// In debug builds, if `data` is not within this region or longer than
    /// `u32::MAX`.
    pub fn scatter_element<'a>(&'a self, data: &'a mut [u8]) -> ScatterElement<'a> {
        ScatterElement::new(self, data)
    }

    /// A scatter element over `data`, checking that it lies within this region
    /// and that its length fits in a `u32`.
    pub fn scatter_element_checked<'a>(
        &'a self,
        data: &'a mut [u8],
    ) -> Result<ScatterElement<'a>, ScatterGatherElementError> {
        ScatterElement::new_checked(self, data)
    }

    /// A scatter element over `data` without software checks: a slice outside
    /// the region makes the operation fail with a Local Protection Error; no
    /// undefined behaviour is possible.
    pub fn scatter_element_unchecked<'a>(&'a self, data: &'a mut [u8]) -> ScatterElement<'a> {
        ScatterElement::new_unchecked(self, data)
    }
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("address", &format_args!("{:#x}", self.address()))
            .field("length", &self.length())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .field("access", &self.access)
            .finish()
    }
}
// `MemoryRegion` is `Send + Sync` through `rdma_core::MemoryRegion`: its
// keys, address and length never change after registration, and the verbs
// (`ibv_dereg_mr`) are thread-safe.
