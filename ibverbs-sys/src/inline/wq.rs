//! Work queues, receive WQ indirection tables and tag-matching SRQ
//! operations.

use super::*;

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
    unsafe { ctx_op!((*wq).context, modify_wq(wq, wq_attr)) }
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
    unsafe { ctx_op!((*wq).context, destroy_wq(wq)) }
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
    unsafe { ctx_op!(context, create_rwq_ind_table(context, init_attr)) }
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
        ctx_op!(
            (*rwq_ind_table).context,
            destroy_rwq_ind_table(rwq_ind_table)
        )
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
