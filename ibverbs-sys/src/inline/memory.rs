//! Memory beyond `ibv_reg_mr`: memory windows, advice, null MRs, device
//! memory.

use super::*;

/// `ibv_alloc_mw`—Allocates a memory window.
///
/// # Safety
/// `pd` must be a valid PD.
#[inline]
pub unsafe fn ibv_alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    // SAFETY: caller contract.
    unsafe {
        match (*(*pd).context).ops.alloc_mw {
            Some(op) => op(pd, type_),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_dealloc_mw`—Frees a memory window.
///
/// # Safety
/// `mw` must be a valid memory window, not used afterwards.
#[inline]
pub unsafe fn ibv_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: caller contract; a provider that allocated `mw` sets the op.
    unsafe { ((*(*mw).context).ops.dealloc_mw.unwrap_unchecked())(mw) }
}

/// `ibv_inc_rkey`—Increments the 8 least significant bits (the tag) of an
/// rkey, keeping the index bits.
#[inline]
pub fn ibv_inc_rkey(rkey: u32) -> u32 {
    const MASK: u32 = 0x0000_00ff;
    let newtag = rkey.wrapping_add(1) & MASK;
    (rkey & !MASK) | newtag
}

/// `ibv_bind_mw`—Binds a type 1 memory window to a memory region.
///
/// # Safety
/// `qp`, `mw` and `mw_bind` (and the MR it names) must be valid.
#[inline]
pub unsafe fn ibv_bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        let info = &(*mw_bind).bind_info;
        if (*mw).type_ != ibv_mw_type::IBV_MW_TYPE_1 {
            return libc::EINVAL;
        }
        if info.mr.is_null() && (info.addr != 0 || info.length != 0) {
            return libc::EINVAL;
        }
        if !info.mr.is_null() && (*mw).pd != (*info.mr).pd {
            return libc::EPERM;
        }
        ((*(*mw).context).ops.bind_mw.unwrap_unchecked())(qp, mw, mw_bind)
    }
}

/// `ibv_advise_mr`—Gives the device advice (prefetch) about address ranges of
/// on-demand-paging memory regions.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
/// See `ibv_advise_mr(3)`.
///
/// # Safety
/// `pd` must be a valid PD and `sg_list` valid for reads of `num_sge`
/// entries, each naming an MR of `pd`.
#[inline]
pub unsafe fn ibv_advise_mr(
    pd: *mut ibv_pd,
    advice: ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        ctx_op!(
            (*pd).context,
            advise_mr(pd, advice, flags, sg_list, num_sge)
        )
    }
}

/// `ibv_alloc_dm`—Allocates device memory.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
/// See `ibv_alloc_dm(3)`.
///
/// # Safety
/// `context` must be a valid context and `attr` valid for reads.
#[inline]
pub unsafe fn ibv_alloc_dm(context: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> *mut ibv_dm {
    // SAFETY: caller contract.
    unsafe { ctx_op!(context, alloc_dm(context, attr)) }
}

/// `ibv_free_dm`—Frees device memory.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `dm` must be valid device memory from [`ibv_alloc_dm`], with no MR still
/// registered over it, not used afterwards on success.
#[inline]
pub unsafe fn ibv_free_dm(dm: *mut ibv_dm) -> c_int {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*dm).context, free_dm(dm)) }
}

/// `ibv_memcpy_to_dm`—Copies `length` bytes from host memory into device
/// memory at `dm_offset`.
///
/// Returns 0 or an errno value.
///
/// # Safety
/// `dm` must be valid device memory from [`ibv_alloc_dm`] and `host_addr`
/// valid for reads of `length` bytes.
#[inline]
pub unsafe fn ibv_memcpy_to_dm(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    // SAFETY: caller contract; the provider that allocated `dm` sets the op.
    unsafe { ((*dm).memcpy_to_dm.unwrap_unchecked())(dm, dm_offset, host_addr, length) }
}

/// `ibv_memcpy_from_dm`—Copies `length` bytes from device memory at
/// `dm_offset` into host memory.
///
/// Returns 0 or an errno value.
///
/// # Safety
/// `dm` must be valid device memory from [`ibv_alloc_dm`] and `host_addr`
/// valid for writes of `length` bytes.
#[inline]
pub unsafe fn ibv_memcpy_from_dm(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    // SAFETY: caller contract; the provider that allocated `dm` sets the op.
    unsafe { ((*dm).memcpy_from_dm.unwrap_unchecked())(host_addr, dm, dm_offset, length) }
}

/// `ibv_alloc_null_mr`—Allocates a null memory region: writes to it are
/// dropped and reads return nothing meaningful.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `pd` must be a valid PD.
#[inline]
pub unsafe fn ibv_alloc_null_mr(pd: *mut ibv_pd) -> *mut ibv_mr {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*pd).context, alloc_null_mr(pd)) }
}

/// `ibv_reg_dm_mr`—Registers `length` bytes of device memory, from
/// `dm_offset`, as a memory region.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `pd` must be a valid PD and `dm` valid device memory of the same context;
/// the range must lie inside `dm`, which must outlive the MR.
#[inline]
pub unsafe fn ibv_reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*pd).context, reg_dm_mr(pd, dm, dm_offset, length, access)) }
}
