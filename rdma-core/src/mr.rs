//! `ibv_reg_mr`: memory regions.

use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
#[cfg(not(feature = "fault-injection"))]
use crate::wrapper::deleter;
use crate::wrapper::Wrapper;
use ibverbs_sys as sys;
use std::ffi::c_int;
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};

#[cfg(not(feature = "fault-injection"))]
deleter!(sys::ibv_mr, ibv_dereg_mr);

// The fault-injection layer's deregistration: the memory oracle checks that
// no request still in the NIC's hands names the region's memory.
#[cfg(feature = "fault-injection")]
impl crate::wrapper::Deleter for sys::ibv_mr {
    const DESTROY_VERB: &'static str = "ibv_dereg_mr";
    unsafe fn delete(ptr: *mut Self) -> c_int {
        // SAFETY: `ptr` is a live MR (`Deleter::delete`'s contract).
        let (addr, len) = unsafe { ((*ptr).addr, (*ptr).length) };
        crate::fault::check_released(addr.cast(), len, "a memory region is deregistered");
        // SAFETY: forwarded from `Deleter::delete`'s contract.
        unsafe { sys::ibv_dereg_mr(ptr) }
    }
}

bitflags::bitflags! {
    /// Access a memory region grants (`enum ibv_access_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The local NIC may write (receive and read targets need it).
        const LOCAL_WRITE = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        /// Remote peers may RDMA-write (requires `LOCAL_WRITE`).
        const REMOTE_WRITE = sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        /// Remote peers may RDMA-read.
        const REMOTE_READ = sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        /// Remote peers may perform atomics (requires `LOCAL_WRITE`).
        const REMOTE_ATOMIC = sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
        /// Memory windows may be bound to the region.
        const MW_BIND = sys::ibv_access_flags::IBV_ACCESS_MW_BIND.0;
        /// Remote addresses are offsets from the region's start.
        const ZERO_BASED = sys::ibv_access_flags::IBV_ACCESS_ZERO_BASED.0;
        /// On-demand paging: pages are not pinned at registration.
        const ON_DEMAND = sys::ibv_access_flags::IBV_ACCESS_ON_DEMAND.0;
        /// Hint that the memory is backed by huge pages.
        const HUGETLB = sys::ibv_access_flags::IBV_ACCESS_HUGETLB.0;
        /// Relaxed PCIe ordering (optional: ignored where unsupported).
        const RELAXED_ORDERING = sys::ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0;
    }
}

impl AccessFlags {
    /// Whether any remote access is granted (the flags that make a
    /// registration unsafe to expose to safe code).
    pub fn grants_remote_access(self) -> bool {
        self.intersects(
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        )
    }
}

/// A registered memory region. Keeps its protection domain alive;
/// deregistered (`ibv_dereg_mr`) on drop.
///
/// This type does not own or borrow the memory: see [`register`](Self::register).
pub struct MemoryRegion {
    raw: Wrapper<sys::ibv_mr>,
    pd: ProtectionDomain,
}

// SAFETY: an MR is immutable after registration (keys, address, length) and
// `ibv_dereg_mr` may be called from any thread.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above; shared access only reads immutable fields.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// `ibv_reg_mr`—Registers `length` bytes at `addr` with `access`.
    ///
    /// # Safety
    /// The memory must stay allocated until the region is deregistered, and
    /// every access the NIC makes to it through the keys of this region (local
    /// work requests, and remote peers if `access` grants remote access) must
    /// not violate Rust's aliasing rules for that memory.
    ///
    /// # Errors
    /// `EINVAL` for a zero length or bad flags, `ENOMEM`/`EFAULT` when the
    /// memory cannot be pinned (check `ulimit -l`).
    pub unsafe fn register(
        pd: &ProtectionDomain,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<Self> {
        #[cfg(feature = "fault-injection")]
        if let Some(errno) = crate::fault::refused(crate::fault::Site::RegisterMr, None) {
            return Err(Error::verb("ibv_reg_mr", errno));
        }
        // SAFETY: forwarded to the caller; the PD is alive.
        let ptr =
            unsafe { sys::ibv_reg_mr(pd.as_ptr(), addr.cast(), length, access.bits() as c_int) };
        // SAFETY: a non-null MR is ours to deregister.
        let raw = unsafe { Wrapper::from_created("ibv_reg_mr", ptr) }?;
        Ok(MemoryRegion {
            raw,
            pd: pd.clone(),
        })
    }

    /// `ibv_reg_mr_iova`—Registers memory with an explicit I/O virtual address
    /// (the address remote peers and SGEs use).
    ///
    /// # Safety
    /// As [`register`](Self::register).
    pub unsafe fn register_iova(
        pd: &ProtectionDomain,
        addr: *mut u8,
        length: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Self> {
        #[cfg(feature = "fault-injection")]
        if let Some(errno) = crate::fault::refused(crate::fault::Site::RegisterMr, None) {
            return Err(Error::verb("ibv_reg_mr_iova", errno));
        }
        // SAFETY: forwarded to the caller; the PD is alive.
        let ptr = unsafe {
            sys::ibv_reg_mr_iova(
                pd.as_ptr(),
                addr.cast(),
                length,
                iova,
                access.bits() as c_int,
            )
        };
        // SAFETY: a non-null MR is ours to deregister.
        let raw = unsafe { Wrapper::from_created("ibv_reg_mr_iova", ptr) }?;
        Ok(MemoryRegion {
            raw,
            pd: pd.clone(),
        })
    }

    /// `ibv_reg_dmabuf_mr`—Registers `length` bytes at `offset` of a DMA-BUF,
    /// addressed by the NIC as `iova` (same page offset as `offset`).
    ///
    /// # Safety
    /// The DMA-BUF's memory must remain valid while registered, and remote
    /// access (if granted) must not break aliasing rules for any mapping of it.
    pub unsafe fn register_dmabuf(
        pd: &ProtectionDomain,
        fd: BorrowedFd<'_>,
        offset: u64,
        length: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Self> {
        if offset % 4096 != iova % 4096 {
            return Err(Error::InvalidArgument(format!(
                "dmabuf iova {iova:#x} must have the same page offset as offset {offset:#x}"
            )));
        }
        #[cfg(feature = "fault-injection")]
        if let Some(errno) = crate::fault::refused(crate::fault::Site::RegisterMr, None) {
            return Err(Error::verb("ibv_reg_dmabuf_mr", errno));
        }
        // SAFETY: forwarded to the caller; the PD is alive, `fd` is open.
        let ptr = unsafe {
            sys::ibv_reg_dmabuf_mr(
                pd.as_ptr(),
                offset,
                length,
                iova,
                fd.as_raw_fd(),
                access.bits() as c_int,
            )
        };
        // SAFETY: a non-null MR is ours to deregister.
        let raw = unsafe { Wrapper::from_created("ibv_reg_dmabuf_mr", ptr) }?;
        Ok(MemoryRegion {
            raw,
            pd: pd.clone(),
        })
    }

    fn get(&self) -> &sys::ibv_mr {
        // SAFETY: the MR is alive and its fields are not changed after
        // registration.
        unsafe { &*self.raw.as_ptr() }
    }

    /// The raw MR, valid while `self` is alive.
    pub fn as_ptr(&self) -> *mut sys::ibv_mr {
        self.raw.as_ptr()
    }
    /// The local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.get().lkey
    }
    /// The remote key, for peers' RDMA operations.
    pub fn rkey(&self) -> u32 {
        self.get().rkey
    }
    /// Start address of the registered range.
    pub fn addr(&self) -> *mut u8 {
        self.get().addr.cast()
    }
    /// Length of the registered range.
    pub fn len(&self) -> usize {
        self.get().length
    }
    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The protection domain it is registered in.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// `ibv_dereg_mr`—Deregisters the region now. Dropping it does the same
    /// but can only log a failure; here the caller learns that the NIC may
    /// still reach the memory (and must not free it).
    ///
    /// # Errors
    /// The errno of `ibv_dereg_mr` (e.g. `EBUSY` while a memory window is
    /// bound to the region), with the region, still registered.
    pub fn close(self) -> std::result::Result<(), (Self, Error)> {
        let MemoryRegion { raw, pd } = self;
        raw.close()
            .map_err(|(raw, err)| (MemoryRegion { raw, pd }, err))
    }
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &self.addr())
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}
