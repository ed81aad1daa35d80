//! Rust shims for the `static inline` and macro-wrapped verbs of
//! `<infiniband/verbs.h>`, which have no symbol in `libibverbs.so`.
//!
//! Each function mirrors the C function of the same name line for line:
//! dispatch through `ibv_context::ops`, through the extended `verbs_context`
//! found by `container_of` (see [`verbs_get_ctx`]), or through the function
//! pointers of `ibv_qp_ex` / `ibv_cq_ex`.
#![allow(clippy::missing_safety_doc)] // every function below has a `# Safety` section

use crate::*;
use core::ffi::{c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};
use core::ptr;

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` marker of a context that is
/// embedded in a `struct verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `IBV_ACCESS_OPTIONAL_RANGE`: access bits that a provider may ignore; when
/// any is set, `ibv_reg_mr` must go through `ibv_reg_mr_iova2`.
pub const IBV_ACCESS_OPTIONAL_RANGE: c_uint =
    ib_uverbs_access_flags::IB_UVERBS_ACCESS_OPTIONAL_RANGE.0 as c_uint;

/// Symbols whose names the header shadows with macros. Only the shims use them.
mod legacy {
    use crate::*;
    use core::ffi::c_int;
    extern "C" {
        /// The exported `ibv_reg_mr` symbol (no optional-range semantics).
        #[link_name = "ibv_reg_mr"]
        pub(super) fn ibv_reg_mr_symbol(
            pd: *mut ibv_pd,
            addr: *mut core::ffi::c_void,
            length: usize,
            access: c_int,
        ) -> *mut ibv_mr;
        /// The exported `ibv_reg_mr_iova` symbol.
        #[link_name = "ibv_reg_mr_iova"]
        pub(super) fn ibv_reg_mr_iova_symbol(
            pd: *mut ibv_pd,
            addr: *mut core::ffi::c_void,
            length: usize,
            iova: u64,
            access: c_int,
        ) -> *mut ibv_mr;
        /// The exported, legacy-ABI `ibv_query_port` symbol, which fills only
        /// the fields of `struct _compat_ibv_port_attr`.
        #[link_name = "ibv_query_port"]
        pub(super) fn ibv_query_port_symbol(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut _compat_ibv_port_attr,
        ) -> c_int;
    }
}

fn set_errno(value: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot,
    // valid for writes for the lifetime of the thread.
    unsafe { *libc::__errno_location() = value };
}

/// `verbs_get_ctx`—Returns the `verbs_context` that embeds `ctx`, or null for
/// a context of a provider that predates the extended ABI.
///
/// # Safety
/// `ctx` must be a valid context returned by `ibv_open_device`.
#[inline]
pub unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: the caller guarantees `ctx` is valid for reads.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return ptr::null_mut();
    }
    // SAFETY: an extended context is the last field of a `verbs_context`
    // allocation (container_of), as the C header itself assumes.
    unsafe { ctx.byte_sub(offset_of!(verbs_context, context)).cast() }
}

/// `verbs_get_ctx_op`—Returns the extended operation `$op` of a context, if
/// the provider's `verbs_context` is large enough to have it and sets it.
macro_rules! verbs_get_ctx_op {
    ($ctx:expr, $op:ident) => {{
        let vctx = verbs_get_ctx($ctx);
        if vctx.is_null()
            || (*vctx).sz < size_of::<verbs_context>() - offset_of!(verbs_context, $op)
        {
            None
        } else {
            (*vctx).$op
        }
    }};
}

// ---------------------------------------------------------------------------
// Data path through `ibv_context::ops`
// ---------------------------------------------------------------------------

/// `ibv_post_send`—Posts a linked list of work requests to a send queue.
///
/// Returns 0 on success or an errno value; on failure `*bad_wr` points at the
/// first request that was not posted. See `ibv_post_send(3)`.
///
/// # Safety
/// `qp` must be a valid QP; `wr` a valid, null-terminated list whose SGEs name
/// memory registered with keys valid for the operation, which must stay
/// allocated (and, for scatter targets, not be otherwise accessed) until the
/// completion is polled, unless `IBV_SEND_INLINE` was used; `bad_wr` valid for
/// writes.
#[inline]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: caller contract; every provider sets `ops.post_send`.
    unsafe { ((*(*qp).context).ops.post_send.unwrap_unchecked())(qp, wr, bad_wr) }
}

/// `ibv_post_recv`—Posts a linked list of work requests to a receive queue.
///
/// # Safety
/// As [`ibv_post_send`]: the scatter memory of every request must stay valid
/// and unaliased until its completion is polled.
#[inline]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: caller contract; every provider sets `ops.post_recv`.
    unsafe { ((*(*qp).context).ops.post_recv.unwrap_unchecked())(qp, wr, bad_wr) }
}

/// `ibv_post_srq_recv`—Posts a linked list of receive requests to a shared
/// receive queue.
///
/// # Safety
/// As [`ibv_post_recv`], with `srq` a valid SRQ.
#[inline]
pub unsafe fn ibv_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: caller contract. A provider without SRQ support leaves the op
    // unset; report EOPNOTSUPP rather than calling a null pointer.
    unsafe {
        match (*(*srq).context).ops.post_srq_recv {
            Some(op) => op(srq, wr, bad_wr),
            None => {
                *bad_wr = wr;
                libc::EOPNOTSUPP
            }
        }
    }
}

/// `ibv_poll_cq`—Polls a completion queue for up to `num_entries` work
/// completions, written to `wc`.
///
/// Returns the number of completions (0 when the CQ is empty) or a negative
/// value on error. See `ibv_poll_cq(3)`.
///
/// # Safety
/// `cq` must be a valid CQ and `wc` valid for writes of `num_entries` entries.
#[inline]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: caller contract; every provider sets `ops.poll_cq`.
    unsafe { ((*(*cq).context).ops.poll_cq.unwrap_unchecked())(cq, num_entries, wc) }
}

/// `ibv_req_notify_cq`—Requests a completion event on the CQ's completion
/// channel for the next (solicited, if `solicited_only`) completion.
///
/// # Safety
/// `cq` must be a valid CQ.
#[inline]
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: caller contract; every provider sets `ops.req_notify_cq`.
    unsafe { ((*(*cq).context).ops.req_notify_cq.unwrap_unchecked())(cq, solicited_only) }
}

/// `ibv_modify_cq`—Modifies CQ attributes (moderation).
///
/// # Safety
/// `cq` must be a valid CQ and `attr` valid for reads.
#[inline]
pub unsafe fn ibv_modify_cq(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*cq).context, modify_cq) {
            Some(op) => op(cq, attr),
            None => libc::EOPNOTSUPP,
        }
    }
}

// ---------------------------------------------------------------------------
// Macro-wrapped verbs
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Extended device, QP, SRQ and CQ creation
// ---------------------------------------------------------------------------

/// `ibv_query_device_ex`—Queries extended device attributes, falling back to
/// `ibv_query_device` for providers without the extended verb.
///
/// # Safety
/// `context` must be a valid context, `input` null or valid for reads, `attr`
/// valid for writes.
#[inline]
pub unsafe fn ibv_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        if !input.is_null() && (*input).comp_mask != 0 {
            return libc::EINVAL;
        }
        if let Some(op) = verbs_get_ctx_op!(context, query_device_ex) {
            let ret = op(context, input, attr, size_of::<ibv_device_attr_ex>());
            if ret != libc::EOPNOTSUPP && ret != libc::ENOSYS {
                return ret;
            }
        }
        ptr::write_bytes(attr, 0, 1);
        ibv_query_device(context, &mut (*attr).orig_attr)
    }
}

/// `ibv_create_cq_ex`—Creates a completion queue with extended attributes,
/// polled with [`ibv_start_poll`]/[`ibv_next_poll`]/[`ibv_end_poll`].
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `context` must be a valid context and `cq_attr` valid for reads.
#[inline]
pub unsafe fn ibv_create_cq_ex(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, create_cq_ex) {
            Some(op) => op(context, cq_attr),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_cq_ex_to_cq`—Converts an extended CQ to the `ibv_cq` that the
/// classic verbs (`ibv_destroy_cq`, `ibv_req_notify_cq`, …) take.
///
/// # Safety
/// `cq` must be null or a CQ returned by [`ibv_create_cq_ex`].
#[inline]
pub unsafe fn ibv_cq_ex_to_cq(cq: *mut ibv_cq_ex) -> *mut ibv_cq {
    cq.cast()
}

/// `ibv_create_qp_ex`—Creates a QP with extended attributes (send ops flags
/// for the `ibv_wr_*` API, XRC, RSS, …).
///
/// # Safety
/// `context` must be a valid context and `qp_init_attr_ex` valid for reads and
/// writes (capabilities are written back).
#[inline]
pub unsafe fn ibv_create_qp_ex(
    context: *mut ibv_context,
    qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: caller contract; `ibv_qp_init_attr_ex` begins with the fields of
    // `ibv_qp_init_attr`, as the C header relies on.
    unsafe {
        let mask = (*qp_init_attr_ex).comp_mask;
        if mask == ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0 {
            return ibv_create_qp((*qp_init_attr_ex).pd, qp_init_attr_ex.cast());
        }
        match verbs_get_ctx_op!(context, create_qp_ex) {
            Some(op) => op(context, qp_init_attr_ex),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_create_srq_ex`—Creates a shared receive queue with extended
/// attributes (XRC, tag matching).
///
/// # Safety
/// `context` must be a valid context and `srq_init_attr_ex` valid for reads and
/// writes.
#[inline]
pub unsafe fn ibv_create_srq_ex(
    context: *mut ibv_context,
    srq_init_attr_ex: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: caller contract; `ibv_srq_init_attr_ex` begins with the fields of
    // `ibv_srq_init_attr`, as the C header relies on.
    unsafe {
        let mask = (*srq_init_attr_ex).comp_mask;
        let pd = ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_PD.0;
        let ty = ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_TYPE.0;
        if mask & !(pd | ty) == 0
            && mask & pd != 0
            && (mask & ty == 0 || (*srq_init_attr_ex).srq_type == ibv_srq_type::IBV_SRQT_BASIC)
        {
            return ibv_create_srq((*srq_init_attr_ex).pd, srq_init_attr_ex.cast());
        }
        match verbs_get_ctx_op!(context, create_srq_ex) {
            Some(op) => op(context, srq_init_attr_ex),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_get_srq_num`—Returns the SRQ number of an XRC SRQ.
///
/// # Safety
/// `srq` must be a valid SRQ and `srq_num` valid for writes.
#[inline]
pub unsafe fn ibv_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*srq).context, get_srq_num) {
            Some(op) => op(srq, srq_num),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_open_qp`—Opens a shareable (XRC target) QP.
///
/// # Safety
/// `context` must be a valid context and `qp_open_attr` valid for reads.
#[inline]
pub unsafe fn ibv_open_qp(
    context: *mut ibv_context,
    qp_open_attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, open_qp) {
            Some(op) => op(context, qp_open_attr),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Memory windows
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Extended CQ polling (`ibv_cq_ex`)
// ---------------------------------------------------------------------------

/// `ibv_start_poll`—Starts polling an extended CQ; on success the first
/// completion is readable with the `ibv_wc_read_*` functions.
///
/// Returns 0, `ENOENT` when the CQ is empty (then do not call
/// [`ibv_end_poll`]), or another errno.
///
/// Note: rdma-core 44's rxe provider mis-advances its consumer index in
/// `next_poll`; prefer [`ibv_poll_cq`] there.
///
/// # Safety
/// `cq` must be a valid extended CQ and `attr` valid for reads.
#[inline]
pub unsafe fn ibv_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: caller contract.
    unsafe { ((*cq).start_poll.unwrap_unchecked())(cq, attr) }
}

/// `ibv_next_poll`—Advances to the next completion of an extended CQ.
///
/// # Safety
/// `cq` must be inside a successful [`ibv_start_poll`] … [`ibv_end_poll`].
#[inline]
pub unsafe fn ibv_next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: caller contract.
    unsafe { ((*cq).next_poll.unwrap_unchecked())(cq) }
}

/// `ibv_end_poll`—Ends a polling sequence started by [`ibv_start_poll`].
///
/// # Safety
/// `cq` must be inside a successful [`ibv_start_poll`].
#[inline]
pub unsafe fn ibv_end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: caller contract.
    unsafe { ((*cq).end_poll.unwrap_unchecked())(cq) }
}

macro_rules! wc_read {
    ($(#[$doc:meta])* $name:ident, $field:ident -> $ret:ty) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `cq` must be inside a successful `ibv_start_poll`, created with the
        /// `IBV_WC_EX_WITH_*` flag that makes this field available (reading an
        /// unrequested field calls a null function pointer check and aborts).
        #[inline]
        pub unsafe fn $name(cq: *mut ibv_cq_ex) -> $ret {
            // SAFETY: caller contract; the field's reader is set when the CQ
            // was created with the matching flag.
            unsafe {
                match (*cq).$field {
                    Some(read) => read(cq),
                    None => panic!(concat!(stringify!($name), ": field not requested at ibv_create_cq_ex")),
                }
            }
        }
    };
}

wc_read!(
    /// `ibv_wc_read_opcode`—The opcode of the current completion.
    ibv_wc_read_opcode, read_opcode -> ibv_wc_opcode);
wc_read!(
    /// `ibv_wc_read_vendor_err`—The vendor error of the current completion.
    ibv_wc_read_vendor_err, read_vendor_err -> u32);
wc_read!(
    /// `ibv_wc_read_byte_len`—Bytes transferred by the current completion.
    ibv_wc_read_byte_len, read_byte_len -> u32);
wc_read!(
    /// `ibv_wc_read_imm_data`—Immediate data (network byte order).
    ibv_wc_read_imm_data, read_imm_data -> __be32);
wc_read!(
    /// `ibv_wc_read_qp_num`—Local QP number of the current completion.
    ibv_wc_read_qp_num, read_qp_num -> u32);
wc_read!(
    /// `ibv_wc_read_src_qp`—Remote QP number (UD).
    ibv_wc_read_src_qp, read_src_qp -> u32);
wc_read!(
    /// `ibv_wc_read_wc_flags`—`IBV_WC_*` flags of the current completion.
    ibv_wc_read_wc_flags, read_wc_flags -> c_uint);
wc_read!(
    /// `ibv_wc_read_slid`—Source LID.
    ibv_wc_read_slid, read_slid -> u32);
wc_read!(
    /// `ibv_wc_read_sl`—Service level.
    ibv_wc_read_sl, read_sl -> u8);
wc_read!(
    /// `ibv_wc_read_dlid_path_bits`—Destination LID path bits.
    ibv_wc_read_dlid_path_bits, read_dlid_path_bits -> u8);
wc_read!(
    /// `ibv_wc_read_completion_ts`—Completion timestamp (device clock).
    ibv_wc_read_completion_ts, read_completion_ts -> u64);
wc_read!(
    /// `ibv_wc_read_completion_wallclock_ns`—Completion timestamp (ns).
    ibv_wc_read_completion_wallclock_ns, read_completion_wallclock_ns -> u64);
wc_read!(
    /// `ibv_wc_read_cvlan`—Customer VLAN of the packet.
    ibv_wc_read_cvlan, read_cvlan -> u16);
wc_read!(
    /// `ibv_wc_read_flow_tag`—Flow tag of the packet.
    ibv_wc_read_flow_tag, read_flow_tag -> u32);

/// `ibv_wc_read_invalidated_rkey`—The rkey invalidated by a send with
/// invalidate (shares the storage of the immediate data, as in C).
///
/// # Safety
/// As [`ibv_wc_read_imm_data`].
#[inline]
pub unsafe fn ibv_wc_read_invalidated_rkey(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: caller contract.
    unsafe { ibv_wc_read_imm_data(cq) }
}

/// `ibv_wc_read_tm_info`—Tag-matching information of the current completion.
///
/// # Safety
/// As the other `ibv_wc_read_*`, and `tm_info` valid for writes.
#[inline]
pub unsafe fn ibv_wc_read_tm_info(cq: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info) {
    // SAFETY: caller contract.
    unsafe {
        match (*cq).read_tm_info {
            Some(read) => read(cq, tm_info),
            None => panic!("ibv_wc_read_tm_info: field not requested at ibv_create_cq_ex"),
        }
    }
}

// ---------------------------------------------------------------------------
// Extended send API (`ibv_qp_ex`, `ibv_wr_*`)
// ---------------------------------------------------------------------------

macro_rules! wr_op {
    ($(#[$doc:meta])* $name:ident => $field:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `qp` must come from [`ibv_qp_to_qp_ex`] on a QP created with the
        /// send-ops flag for this operation, between [`ibv_wr_start`] and
        /// [`ibv_wr_complete`]/[`ibv_wr_abort`]; pointer arguments must be
        /// valid, and memory they name must obey the rules of `ibv_post_send`.
        #[inline]
        pub unsafe fn $name(qp: *mut ibv_qp_ex $(, $arg: $ty)*) $(-> $ret)? {
            // SAFETY: caller contract; the provider sets the op for every
            // send-op flag it accepted at QP creation.
            unsafe { ((*qp).$field.unwrap_unchecked())(qp $(, $arg)*) }
        }
    };
}

wr_op!(
    /// `ibv_wr_start`—Starts a batch of work requests on an extended QP.
    ibv_wr_start => wr_start());
wr_op!(
    /// `ibv_wr_complete`—Posts the batch built since [`ibv_wr_start`];
    /// returns 0 or an errno.
    ibv_wr_complete => wr_complete() -> c_int);
wr_op!(
    /// `ibv_wr_abort`—Discards the batch built since [`ibv_wr_start`].
    ibv_wr_abort => wr_abort());
wr_op!(
    /// `ibv_wr_send`—Adds a send work request.
    ibv_wr_send => wr_send());
wr_op!(
    /// `ibv_wr_send_imm`—Adds a send with immediate data (network order).
    ibv_wr_send_imm => wr_send_imm(imm_data: __be32));
wr_op!(
    /// `ibv_wr_send_inv`—Adds a send with invalidate.
    ibv_wr_send_inv => wr_send_inv(invalidate_rkey: u32));
wr_op!(
    /// `ibv_wr_send_tso`—Adds a TSO send (raw packet QPs).
    ibv_wr_send_tso => wr_send_tso(hdr: *mut c_void, hdr_sz: u16, mss: u16));
wr_op!(
    /// `ibv_wr_rdma_write`—Adds an RDMA write.
    ibv_wr_rdma_write => wr_rdma_write(rkey: u32, remote_addr: u64));
wr_op!(
    /// `ibv_wr_rdma_write_imm`—Adds an RDMA write with immediate data.
    ibv_wr_rdma_write_imm => wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm_data: __be32));
wr_op!(
    /// `ibv_wr_rdma_read`—Adds an RDMA read.
    ibv_wr_rdma_read => wr_rdma_read(rkey: u32, remote_addr: u64));
wr_op!(
    /// `ibv_wr_atomic_cmp_swp`—Adds an atomic compare-and-swap.
    ibv_wr_atomic_cmp_swp => wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64));
wr_op!(
    /// `ibv_wr_atomic_fetch_add`—Adds an atomic fetch-and-add.
    ibv_wr_atomic_fetch_add => wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64));
wr_op!(
    /// `ibv_wr_atomic_write`—Adds an 8-byte atomic write.
    ibv_wr_atomic_write => wr_atomic_write(rkey: u32, remote_addr: u64, atomic_wr: *const c_void));
wr_op!(
    /// `ibv_wr_bind_mw`—Adds a memory-window bind.
    ibv_wr_bind_mw => wr_bind_mw(mw: *mut ibv_mw, rkey: u32, bind_info: *const ibv_mw_bind_info));
wr_op!(
    /// `ibv_wr_local_inv`—Adds a local invalidate.
    ibv_wr_local_inv => wr_local_inv(invalidate_rkey: u32));
wr_op!(
    /// `ibv_wr_set_ud_addr`—Sets the UD destination of the current request.
    ibv_wr_set_ud_addr => wr_set_ud_addr(ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32));
wr_op!(
    /// `ibv_wr_set_xrc_srqn`—Sets the XRC SRQ number of the current request.
    ibv_wr_set_xrc_srqn => wr_set_xrc_srqn(remote_srqn: u32));
wr_op!(
    /// `ibv_wr_set_inline_data`—Copies one buffer inline into the request.
    ibv_wr_set_inline_data => wr_set_inline_data(addr: *mut c_void, length: usize));
wr_op!(
    /// `ibv_wr_set_inline_data_list`—Copies several buffers inline.
    ibv_wr_set_inline_data_list => wr_set_inline_data_list(num_buf: usize, buf_list: *const ibv_data_buf));
wr_op!(
    /// `ibv_wr_set_sge`—Sets the single SGE of the current request.
    ibv_wr_set_sge => wr_set_sge(lkey: u32, addr: u64, length: u32));
wr_op!(
    /// `ibv_wr_set_sge_list`—Sets the SGE list of the current request.
    ibv_wr_set_sge_list => wr_set_sge_list(num_sge: usize, sg_list: *const ibv_sge));

// ---------------------------------------------------------------------------
// Work queues, receive WQ indirection tables, SRQ operations
// ---------------------------------------------------------------------------

/// `ibv_post_wq_recv`—Posts a linked list of receive work requests to a work
/// queue (WQ).
///
/// Returns 0 on success or an errno value; on failure `*bad_recv_wr` points at
/// the first request that was not posted. See `ibv_post_wq_recv(3)`.
///
/// # Safety
/// `wq` must be a valid WQ from [`ibv_create_wq`]; `recv_wr` a valid,
/// null-terminated list whose scatter memory stays allocated and unaliased
/// until its completion is polled; `bad_recv_wr` valid for writes.
#[inline]
pub unsafe fn ibv_post_wq_recv(
    wq: *mut ibv_wq,
    recv_wr: *mut ibv_recv_wr,
    bad_recv_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: caller contract; the provider that created `wq` sets
    // `post_recv`, as the C header assumes.
    unsafe { ((*wq).post_recv.unwrap_unchecked())(wq, recv_wr, bad_recv_wr) }
}

// `ibv_create_wq` initialises the WQ's pthread objects with the libc
// functions; the bindgen copies of the types must be the libc ones.
static_assertions::const_assert_eq!(
    size_of::<pthread_mutex_t>(),
    size_of::<libc::pthread_mutex_t>()
);
static_assertions::const_assert_eq!(
    size_of::<pthread_cond_t>(),
    size_of::<libc::pthread_cond_t>()
);

/// `ibv_create_wq`—Creates a work queue (a receive queue usable in an RSS
/// indirection table), then initialises its event bookkeeping (`wq_context`,
/// `events_completed`, mutex, condition variable) as the C header does.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
/// See `ibv_create_wq(3)`.
///
/// # Safety
/// `context` must be a valid context and `wq_init_attr` valid for reads and
/// writes (`max_wr`/`max_sge` are written back); `pd` and `cq` in it must be
/// valid.
#[inline]
pub unsafe fn ibv_create_wq(
    context: *mut ibv_context,
    wq_init_attr: *mut ibv_wq_init_attr,
) -> *mut ibv_wq {
    // SAFETY: caller contract. The pthread objects are embedded in the WQ the
    // provider just allocated; their types have libc's size (asserted above).
    unsafe {
        let Some(op) = verbs_get_ctx_op!(context, create_wq) else {
            set_errno(libc::EOPNOTSUPP);
            return ptr::null_mut();
        };
        let wq = op(context, wq_init_attr);
        if !wq.is_null() {
            (*wq).wq_context = (*wq_init_attr).wq_context;
            (*wq).events_completed = 0;
            libc::pthread_mutex_init(
                ptr::addr_of_mut!((*wq).mutex).cast::<libc::pthread_mutex_t>(),
                ptr::null(),
            );
            libc::pthread_cond_init(
                ptr::addr_of_mut!((*wq).cond).cast::<libc::pthread_cond_t>(),
                ptr::null(),
            );
        }
        wq
    }
}

/// `ibv_modify_wq`—Modifies the attributes (state, flags) of a work queue.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `wq` must be a valid WQ and `wq_attr` valid for reads and writes.
#[inline]
pub unsafe fn ibv_modify_wq(wq: *mut ibv_wq, wq_attr: *mut ibv_wq_attr) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*wq).context, modify_wq) {
            Some(op) => op(wq, wq_attr),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_destroy_wq`—Destroys a work queue.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `wq` must be a valid WQ, not used afterwards on success.
#[inline]
pub unsafe fn ibv_destroy_wq(wq: *mut ibv_wq) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*wq).context, destroy_wq) {
            Some(op) => op(wq),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_create_rwq_ind_table`—Creates a receive work queue indirection table
/// (the set of WQs an RSS QP spreads packets over).
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `context` must be a valid context and `init_attr` valid for reads, its
/// `ind_tbl` naming `1 << log_ind_tbl_size` valid WQs.
#[inline]
pub unsafe fn ibv_create_rwq_ind_table(
    context: *mut ibv_context,
    init_attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, create_rwq_ind_table) {
            Some(op) => op(context, init_attr),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_destroy_rwq_ind_table`—Destroys a receive work queue indirection
/// table.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `rwq_ind_table` must be a valid table, not used afterwards on success.
#[inline]
pub unsafe fn ibv_destroy_rwq_ind_table(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*rwq_ind_table).context, destroy_rwq_ind_table) {
            Some(op) => op(rwq_ind_table),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_post_srq_ops`—Posts a linked list of operations (tag-matching add,
/// remove, sync) to a tag-matching SRQ.
///
/// Returns 0 or an errno value; on failure the provider sets `*bad_op` to the
/// first operation not posted. (When the context has no `post_srq_ops` at
/// all, this shim sets it to `op`; but libibverbs gives providers that lack
/// the verb a stub returning `EOPNOTSUPP` without touching `*bad_op`, so
/// initialise it before the call.)
///
/// # Safety
/// `srq` must be a valid SRQ, `op` a valid null-terminated list whose SGEs
/// obey the rules of [`ibv_post_srq_recv`], and `bad_op` valid for writes.
#[inline]
pub unsafe fn ibv_post_srq_ops(
    srq: *mut ibv_srq,
    op: *mut ibv_ops_wr,
    bad_op: *mut *mut ibv_ops_wr,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*srq).context, post_srq_ops) {
            Some(post) => post(srq, op, bad_op),
            None => {
                *bad_op = op;
                libc::EOPNOTSUPP
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Flow steering and flow actions
// ---------------------------------------------------------------------------

/// `ibv_create_flow`—Attaches a flow steering rule to a QP.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
/// See `ibv_create_flow(3)`.
///
/// # Safety
/// `qp` must be a valid QP and `flow` a valid `ibv_flow_attr` followed in
/// memory by its `num_of_specs` flow specs (`flow->size` bytes in all).
#[inline]
pub unsafe fn ibv_create_flow(qp: *mut ibv_qp, flow: *mut ibv_flow_attr) -> *mut ibv_flow {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*qp).context, ibv_create_flow) {
            Some(op) => op(qp, flow),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_destroy_flow`—Detaches and frees a flow steering rule.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `flow_id` must be a valid flow from [`ibv_create_flow`], not used
/// afterwards on success.
#[inline]
pub unsafe fn ibv_destroy_flow(flow_id: *mut ibv_flow) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*flow_id).context, ibv_destroy_flow) {
            Some(op) => op(flow_id),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_create_flow_action_esp`—Creates an IPsec ESP flow action.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `ctx` must be a valid context and `esp` valid for reads (with every
/// pointer inside it valid).
#[inline]
pub unsafe fn ibv_create_flow_action_esp(
    ctx: *mut ibv_context,
    esp: *mut ibv_flow_action_esp_attr,
) -> *mut ibv_flow_action {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(ctx, create_flow_action_esp) {
            Some(op) => op(ctx, esp),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_modify_flow_action_esp`—Modifies an IPsec ESP flow action.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `action` must be a valid flow action and `esp` valid for reads.
#[inline]
pub unsafe fn ibv_modify_flow_action_esp(
    action: *mut ibv_flow_action,
    esp: *mut ibv_flow_action_esp_attr,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*action).context, modify_flow_action_esp) {
            Some(op) => op(action, esp),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_destroy_flow_action`—Destroys a flow action.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `action` must be a valid flow action, not used afterwards on success.
#[inline]
pub unsafe fn ibv_destroy_flow_action(action: *mut ibv_flow_action) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*action).context, destroy_flow_action) {
            Some(op) => op(action),
            None => libc::EOPNOTSUPP,
        }
    }
}

// ---------------------------------------------------------------------------
// XRC domains
// ---------------------------------------------------------------------------

/// `ibv_open_xrcd`—Opens (or creates) an XRC domain.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
/// See `ibv_open_xrcd(3)`.
///
/// # Safety
/// `context` must be a valid context and `xrcd_init_attr` valid for reads
/// (its `fd`, when given, an open file descriptor).
#[inline]
pub unsafe fn ibv_open_xrcd(
    context: *mut ibv_context,
    xrcd_init_attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, open_xrcd) {
            Some(op) => op(context, xrcd_init_attr),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_close_xrcd`—Closes an XRC domain.
///
/// Returns 0 or an errno value. The C header calls the op without checking
/// it (an XRCD only exists if `open_xrcd` did); this shim returns
/// `EOPNOTSUPP` instead of calling a null pointer.
///
/// # Safety
/// `xrcd` must be a valid XRC domain from [`ibv_open_xrcd`], not used
/// afterwards on success.
#[inline]
pub unsafe fn ibv_close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        let vctx = verbs_get_ctx((*xrcd).context);
        match vctx.as_ref().and_then(|vctx| vctx.close_xrcd) {
            Some(op) => op(xrcd),
            None => libc::EOPNOTSUPP,
        }
    }
}

// ---------------------------------------------------------------------------
// Memory: advice, null MR, device memory
// ---------------------------------------------------------------------------

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
        match verbs_get_ctx_op!((*pd).context, advise_mr) {
            Some(op) => op(pd, advice, flags, sg_list, num_sge),
            None => libc::EOPNOTSUPP,
        }
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
    unsafe {
        match verbs_get_ctx_op!(context, alloc_dm) {
            Some(op) => op(context, attr),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
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
    unsafe {
        match verbs_get_ctx_op!((*dm).context, free_dm) {
            Some(op) => op(dm),
            None => libc::EOPNOTSUPP,
        }
    }
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
    unsafe {
        match verbs_get_ctx_op!((*pd).context, alloc_null_mr) {
            Some(op) => op(pd),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
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
    unsafe {
        match verbs_get_ctx_op!((*pd).context, reg_dm_mr) {
            Some(op) => op(pd, dm, dm_offset, length, access),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Thread and parent domains, device values, QP rate limit
// ---------------------------------------------------------------------------

/// `ibv_alloc_td`—Allocates a thread domain (a hint that the objects using it
/// are only accessed from one thread, so the provider may skip locking).
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `context` must be a valid context and `init_attr` valid for reads.
#[inline]
pub unsafe fn ibv_alloc_td(
    context: *mut ibv_context,
    init_attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, alloc_td) {
            Some(op) => op(context, init_attr),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_dealloc_td`—Frees a thread domain.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `td` must be a valid thread domain no parent domain still uses, not used
/// afterwards on success.
#[inline]
pub unsafe fn ibv_dealloc_td(td: *mut ibv_td) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*td).context, dealloc_td) {
            Some(op) => op(td),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_alloc_parent_domain`—Allocates a parent domain: a PD combined with a
/// thread domain and/or custom allocators, usable wherever a PD is.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
/// Free it with `ibv_dealloc_pd`.
///
/// # Safety
/// `context` must be a valid context and `attr` valid for reads, with valid
/// `pd` (and `td`, allocator callbacks when given).
#[inline]
pub unsafe fn ibv_alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, alloc_parent_domain) {
            Some(op) => op(context, attr),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_query_rt_values_ex`—Reads current real-time values of the device
/// (e.g. the raw and wall-clock timestamps) selected by `values->comp_mask`.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `context` must be a valid context and `values` valid for reads and writes.
#[inline]
pub unsafe fn ibv_query_rt_values_ex(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, query_rt_values) {
            Some(op) => op(context, values),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_modify_qp_rate_limit`—Sets the packet-pacing rate limit of a send
/// queue.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `qp` must be a valid QP and `attr` valid for reads.
#[inline]
pub unsafe fn ibv_modify_qp_rate_limit(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_rate_limit_attr,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*qp).context, modify_qp_rate_limit) {
            Some(op) => op(qp, attr),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_is_qpt_supported`—Tells whether QP type `qpt` is set in a
/// `supported_qpts` capability mask (`ibv_tso_caps`, `ibv_rss_caps`,
/// `ibv_packet_pacing_caps` of [`ibv_device_attr_ex`]).
///
/// Returns 1 if supported, else 0. Unlike C (where `1 << qpt` is undefined
/// for `qpt >= 32`, e.g. `IBV_QPT_DRIVER`), an out-of-range type gives 0.
#[inline]
pub fn ibv_is_qpt_supported(caps: u32, qpt: ibv_qp_type) -> c_int {
    match 1u32.checked_shl(qpt.0) {
        Some(bit) => c_int::from(caps & bit != 0),
        None => 0,
    }
}

// ---------------------------------------------------------------------------
// Flow counters
// ---------------------------------------------------------------------------

/// `ibv_create_counters`—Creates a counters object (to be attached to a flow
/// and read with [`ibv_read_counters`]).
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `context` must be a valid context and `init_attr` valid for reads.
#[inline]
pub unsafe fn ibv_create_counters(
    context: *mut ibv_context,
    init_attr: *mut ibv_counters_init_attr,
) -> *mut ibv_counters {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(context, create_counters) {
            Some(op) => op(context, init_attr),
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
        }
    }
}

/// `ibv_destroy_counters`—Destroys a counters object.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `counters` must be a valid counters object, not used afterwards on
/// success.
#[inline]
pub unsafe fn ibv_destroy_counters(counters: *mut ibv_counters) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*counters).context, destroy_counters) {
            Some(op) => op(counters),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_attach_counters_point_flow`—Attaches a counter description of a
/// counters object to a flow (or, with a null `flow`, to the next flow
/// created with the counters object as an action).
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `counters` must be a valid counters object, `attr` valid for reads and
/// `flow` null or a valid flow.
#[inline]
pub unsafe fn ibv_attach_counters_point_flow(
    counters: *mut ibv_counters,
    attr: *mut ibv_counter_attach_attr,
    flow: *mut ibv_flow,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*counters).context, attach_counters_point_flow) {
            Some(op) => op(counters, attr, flow),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_read_counters`—Reads up to `ncounters` values of a counters object
/// into `counters_value`.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `counters` must be a valid counters object and `counters_value` valid for
/// writes of `ncounters` values.
#[inline]
pub unsafe fn ibv_read_counters(
    counters: *mut ibv_counters,
    counters_value: *mut u64,
    ncounters: u32,
    flags: u32,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*counters).context, read_counters) {
            Some(op) => op(counters, counters_value, ncounters, flags),
            None => libc::EOPNOTSUPP,
        }
    }
}

// ---------------------------------------------------------------------------
// RoCE v2 UDP source port
// ---------------------------------------------------------------------------

/// `IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`—Lowest UDP source port RoCE v2 uses.
pub const IB_ROCE_UDP_ENCAP_VALID_PORT_MIN: u16 = 0xC000;
/// `IB_ROCE_UDP_ENCAP_VALID_PORT_MAX`—Highest UDP source port RoCE v2 uses.
pub const IB_ROCE_UDP_ENCAP_VALID_PORT_MAX: u16 = 0xFFFF;
/// `IB_GRH_FLOWLABEL_MASK`—The 20 bits of a GRH flow label.
pub const IB_GRH_FLOWLABEL_MASK: u32 = 0x000F_FFFF;

/// `ibv_flow_label_to_udp_sport`—Derives the RoCE v2 UDP source port from a
/// GRH flow label (folding its high 6 bits into the low 14, in the range
/// `0xC000..=0xFFFF`).
#[inline]
pub fn ibv_flow_label_to_udp_sport(fl: u32) -> u16 {
    let mut fl_low = fl & 0x03FFF;
    let fl_high = fl & 0xFC000;
    fl_low ^= fl_high >> 14;
    (fl_low | u32::from(IB_ROCE_UDP_ENCAP_VALID_PORT_MIN)) as u16
}
