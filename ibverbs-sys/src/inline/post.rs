//! The data-path verbs that dispatch through `ibv_context::ops`: posting work
//! requests, polling and arming completion queues.

use super::*;

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
    unsafe { ctx_op!((*cq).context, modify_cq(cq, attr)) }
}
