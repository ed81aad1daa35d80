//! Verbs the header wraps in macros or in inline functions that pass a struct
//! size: port and GID queries, memory registration.

use super::*;

/// `ibv_query_port`—Queries the attributes of a port (the header's inline
/// `___ibv_query_port`).
///
/// Uses the extended `query_port` operation with the full size of
/// [`ibv_port_attr`], so every field is initialised; falls back to the legacy
/// symbol (zeroing the struct first) on providers without it.
///
/// # Safety
/// `context` must be a valid context and `port_attr` valid for writes.
#[inline]
pub unsafe fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, query_port) {
            Some(op) => op(context, port_num, port_attr, size_of::<ibv_port_attr>()),
            None => {
                ptr::write_bytes(port_attr, 0, 1);
                legacy::ibv_query_port_symbol(context, port_num, port_attr.cast())
            }
        }
    }
}

/// `ibv_reg_mr`—Registers a memory region (the header's macro over
/// `__ibv_reg_mr`).
///
/// When `access` contains an `IBV_ACCESS_OPTIONAL_RANGE` bit (e.g.
/// `IBV_ACCESS_RELAXED_ORDERING`) this calls `ibv_reg_mr_iova2` with
/// `iova = addr`, as the C macro does, so optional flags are not dropped.
///
/// # Safety
/// `pd` must be a valid PD. `addr..addr+length` must stay allocated until the
/// MR is deregistered and must only be accessed by the NIC in ways the caller
/// has made sound (see `ibv_reg_mr(3)`).
#[inline]
pub unsafe fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: caller contract.
    unsafe {
        if (access as c_uint) & IBV_ACCESS_OPTIONAL_RANGE == 0 {
            legacy::ibv_reg_mr_symbol(pd, addr, length, access)
        } else {
            ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as c_uint)
        }
    }
}

/// `ibv_reg_mr_iova`—Registers a memory region with an explicit I/O virtual
/// address, with the same optional-range dispatch as [`ibv_reg_mr`].
///
/// # Safety
/// As [`ibv_reg_mr`].
#[inline]
pub unsafe fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: caller contract.
    unsafe {
        if (access as c_uint) & IBV_ACCESS_OPTIONAL_RANGE == 0 {
            legacy::ibv_reg_mr_iova_symbol(pd, addr, length, iova, access)
        } else {
            ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint)
        }
    }
}

/// `ibv_query_gid_ex`—Reads one GID table entry, with its type.
///
/// # Safety
/// `context` must be a valid context and `entry` valid for writes.
#[inline]
pub unsafe fn ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        _ibv_query_gid_ex(
            context,
            port_num,
            gid_index,
            entry,
            flags,
            size_of::<ibv_gid_entry>(),
        )
    }
}

/// `ibv_query_gid_table`—Reads every valid GID table entry of the device.
///
/// Returns the number of entries written, or a negative errno.
///
/// # Safety
/// `context` must be a valid context and `entries` valid for writes of
/// `max_entries` entries.
#[inline]
pub unsafe fn ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
) -> isize {
    // SAFETY: caller contract.
    unsafe {
        _ibv_query_gid_table(
            context,
            entries,
            max_entries,
            flags,
            size_of::<ibv_gid_entry>(),
        )
    }
}
