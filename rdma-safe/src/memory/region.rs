//! [`MemoryRegion`]: one registration of memory with a device, and the
//! seeds' ways of making elements from it.

use crate::error::{Result, VerbsError};
use crate::memory::element::{GatherElement, ScatterElement};
use crate::memory::keys;
use crate::memory::remote::RemoteMemoryRegion;
use crate::pd::ProtectionDomain;
use std::fmt;
use std::os::fd::AsFd;

use rdma_core::AccessFlags;

/// A handle to a registered Memory Region.
///
/// Registration pins a buffer's pages and gives the NIC their translation. A
/// `MemoryRegion` does not own the buffer: the same memory may be registered
/// in several protection domains, and memory owned by other structures may be
/// registered — which is why creating one from an address is `unsafe` (the
/// caller keeps the range on the same pages). Safe code gets one through a
/// [`RegisteredBuffer`](crate::RegisteredBuffer), which owns its memory. The
/// element constructors are safe on either (see the [module docs](crate::memory)).
/// Deregistered on drop; keeps its protection domain alive.
pub struct MemoryRegion {
    /// The region's `(domain, lkey)` in the table posts check elements
    /// against; first, so that it leaves the table before the key is
    /// deregistered.
    entry: keys::Entry,
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
    /// Always: `address..address+length` must stay mapped to the same pages
    /// — not freed, reallocated, `mremap`ed or unmapped — while the region
    /// lives (see [`register_local_mr`](Self::register_local_mr)).
    ///
    /// Enabling remote read or write access breaks local safety guarantees
    /// further. If remote access is enabled:
    ///
    /// 1. **Aliasing**: remote peers can read or modify this memory at any
    ///    time. You must make sure Rust's aliasing rules are respected: no
    ///    `&mut` to it may exist while a peer may read it, and no `&` while a
    ///    peer may write it.
    /// 2. **Lifetime**: the memory must remain allocated as long as remote
    ///    peers may perform RDMA operations on it (until this region is
    ///    dropped, or until they are known to have stopped).
    ///
    /// Without remote flags only the first rule applies.
    ///
    /// # Errors
    /// The error of `ibv_reg_mr`: `EINVAL` for a flag combination the device
    /// rejects (remote write without local write) and, on some providers, a
    /// zero length (rxe accepts one), `EFAULT`/`ENOMEM` for memory that
    /// cannot be pinned (see `ulimit -l`).
    pub unsafe fn register_mr_with_access(
        pd: &ProtectionDomain,
        address: *mut u8,
        length: usize,
        access_flags: AccessFlags,
    ) -> Result<MemoryRegion> {
        check_access(access_flags)?;
        // SAFETY: forwarded to the caller (see above). The NIC only reaches
        // the memory locally through SGEs built from live references.
        let inner = unsafe {
            rdma_core::MemoryRegion::register(pd.as_core(), address, length, access_flags)
        }?;
        Ok(MemoryRegion {
            entry: keys::Entry::new(&inner),
            inner,
            access: access_flags,
        })
    }

    /// Registers a local memory region (local write access only).
    ///
    /// Safe code registers memory with
    /// [`RegisteredBuffer`](crate::RegisteredBuffer) instead, which owns or
    /// exclusively borrows it for as long as it is registered.
    ///
    /// # Safety
    ///
    /// `address..address+length` must stay mapped to the same pages while the
    /// region lives: the memory must not be freed, reallocated (a `Vec` must
    /// not grow), `mremap`ed or unmapped before the region is dropped. The NIC
    /// uses the pages pinned here, not the virtual addresses: after `realloc`
    /// moves the pages, an element over a new allocation at the old address
    /// would make the NIC read or write the moved buffer (see the
    /// [module docs](crate::memory)). No remote access is granted, so no peer can
    /// alias the memory; locally the NIC touches it only through elements
    /// built from live references.
    ///
    /// # Errors
    /// As [`register_mr_with_access`](Self::register_mr_with_access).
    pub unsafe fn register_local_mr(
        pd: &ProtectionDomain,
        address: *mut u8,
        length: usize,
    ) -> Result<MemoryRegion> {
        // SAFETY: the page-identity contract is forwarded to the caller; local
        // write only.
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
    /// * **Lifetime** — the memory must remain allocated, on the same pages,
    ///   as long as the region lives and remote peers may perform RDMA
    ///   operations on it.
    ///
    /// # Errors
    /// As [`register_mr_with_access`](Self::register_mr_with_access).
    pub unsafe fn register_shared_mr(
        pd: &ProtectionDomain,
        address: *mut u8,
        length: usize,
    ) -> Result<MemoryRegion> {
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        // SAFETY: forwarded to the caller.
        unsafe { Self::register_mr_with_access(pd, address, length, access) }
    }

    /// Registers a DMA-BUF with the given access flags.
    ///
    /// * `fd` — the DMA-BUF file descriptor (only borrowed for the call: the
    ///   registration holds its own reference to the buffer).
    /// * `offset` — start offset within the DMA-BUF.
    /// * `length` — size of the region.
    /// * `iova` — the virtual base address the NIC uses for this region
    ///   through its keys; must have the same page offset as `offset`.
    ///
    /// The region's range is `iova..iova+length`, an I/O address chosen by the
    /// caller, and the NIC serves it from the DMA-BUF's pages. Element
    /// constructors check slices against that range only, so an element over
    /// a Rust slice that happens to lie at those addresses would read or write
    /// the DMA-BUF's pages instead of the slice.
    ///
    /// # Safety
    ///
    /// * Every element built from this region must be over a slice that *is*
    ///   the CPU mapping of the DMA-BUF at `iova` (e.g. `iova` is the address
    ///   where the DMA-BUF is `mmap`ed, and it stays mapped while the region
    ///   lives); otherwise build no elements from it (use it for remote access
    ///   only).
    /// * With remote flags, the rules of
    ///   [`register_mr_with_access`](Self::register_mr_with_access) apply to
    ///   the DMA-BUF's memory.
    ///
    /// # Errors
    /// `EINVAL` when `iova` and `offset` differ in page offset; otherwise
    /// `ibv_reg_dmabuf_mr`'s error (`EOPNOTSUPP` where the provider has no
    /// DMA-BUF support, as rxe).
    pub unsafe fn register_dmabuf_mr_with_access(
        pd: &ProtectionDomain,
        fd: impl AsFd,
        offset: u64,
        length: usize,
        iova: u64,
        access_flags: AccessFlags,
    ) -> Result<MemoryRegion> {
        check_access(access_flags)?;
        // SAFETY: forwarded to the caller.
        let inner = unsafe {
            rdma_core::MemoryRegion::register_dmabuf(
                pd.as_core(),
                fd.as_fd(),
                offset,
                length,
                iova,
                access_flags,
            )
        }?;
        Ok(MemoryRegion {
            entry: keys::Entry::new(&inner),
            inner,
            access: access_flags,
        })
    }

    /// Registers a DMA-BUF for local access only.
    ///
    /// # Safety
    /// The first rule of
    /// [`register_dmabuf_mr_with_access`](Self::register_dmabuf_mr_with_access):
    /// elements over this region must be over the DMA-BUF's own mapping at
    /// `iova`.
    ///
    /// # Errors
    /// As [`register_dmabuf_mr_with_access`](Self::register_dmabuf_mr_with_access).
    pub unsafe fn register_local_dmabuf_mr(
        pd: &ProtectionDomain,
        fd: impl AsFd,
        offset: u64,
        length: usize,
        iova: u64,
    ) -> Result<MemoryRegion> {
        // SAFETY: forwarded to the caller; local write only.
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
    /// Both rules of
    /// [`register_dmabuf_mr_with_access`](Self::register_dmabuf_mr_with_access)
    /// with remote access; see also [`register_shared_mr`](Self::register_shared_mr).
    ///
    /// # Errors
    /// As [`register_dmabuf_mr_with_access`](Self::register_dmabuf_mr_with_access).
    pub unsafe fn register_shared_dmabuf_mr(
        pd: &ProtectionDomain,
        fd: impl AsFd,
        offset: u64,
        length: usize,
        iova: u64,
    ) -> Result<MemoryRegion> {
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

    /// `ibv_dereg_mr`—Deregisters the region, reporting a failure (unlike
    /// `Drop`, which can only log it).
    ///
    /// # Errors
    /// The errno of `ibv_dereg_mr` (e.g. `EBUSY` while a memory window is
    /// bound to it), with the region, still registered: the NIC may still
    /// reach its memory, which must then not be freed.
    pub fn close(self) -> Result<(), (Self, crate::Error)> {
        let MemoryRegion {
            entry,
            inner,
            access,
        } = self;
        inner.close().map_err(|(inner, e)| {
            (
                MemoryRegion {
                    entry,
                    inner,
                    access,
                },
                e.into(),
            )
        })
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
    pub fn gather_element_checked<'a>(&'a self, data: &'a [u8]) -> Result<GatherElement<'a>> {
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
    pub fn scatter_element_checked<'a>(&'a self, data: &'a mut [u8]) -> Result<ScatterElement<'a>> {
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

/// The rule of `ibv_reg_mr(3)` that every device enforces, checked before
/// the verb so that the error says which rule rather than `EINVAL`: remote
/// write and remote atomic access need local write access.
fn check_access(access: AccessFlags) -> Result<()> {
    let remote_writes = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if access.intersects(remote_writes) && !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(VerbsError::InvalidArgument(format!(
            "access {access:?} grants remote write or atomic access without LOCAL_WRITE, \
             which ibv_reg_mr requires with them: add AccessFlags::LOCAL_WRITE"
        ))
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod access_tests {
    use super::*;

    #[test]
    fn remote_write_without_local_write_is_named() {
        let err = check_access(AccessFlags::REMOTE_WRITE).expect_err("refused");
        assert!(
            err.to_string().contains("add AccessFlags::LOCAL_WRITE"),
            "{err}"
        );
        assert!(check_access(AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ).is_err());
        assert!(check_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).is_ok());
        assert!(check_access(AccessFlags::REMOTE_READ).is_ok());
    }
}
