//! Extended creation verbs (`verbs_context` operations): devices, CQs, QPs,
//! SRQs and XRC domains.

use super::*;

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
    unsafe { ctx_op!(context, create_cq_ex(context, cq_attr)) }
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
        ctx_op!(context, create_qp_ex(context, qp_init_attr_ex))
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
        ctx_op!(context, create_srq_ex(context, srq_init_attr_ex))
    }
}

/// `ibv_get_srq_num`—Returns the SRQ number of an XRC SRQ.
///
/// # Safety
/// `srq` must be a valid SRQ and `srq_num` valid for writes.
#[inline]
pub unsafe fn ibv_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*srq).context, get_srq_num(srq, srq_num)) }
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
    unsafe { ctx_op!(context, open_qp(context, qp_open_attr)) }
}

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
    unsafe { ctx_op!(context, open_xrcd(context, xrcd_init_attr)) }
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
