//! Work requests: typed, zero-cost views of `ibv_sge`, `ibv_send_wr` and
//! `ibv_recv_wr`, and the linking of a slice of them into the list the post
//! verbs take.
//!
//! A request borrows (`'a`) everything it points to — its scatter/gather list
//! and, for UD, its address handle — so those outlive the post call. What the
//! SGEs *name* (registered memory the NIC reads or writes until the
//! completion) is the caller's promise to the post functions
//! ([`QueuePair::post_send_list`](crate::QueuePair::post_send_list) and its
//! siblings), which are `unsafe`.

mod recv;
mod send;
mod sge;

pub use recv::RecvRequest;
pub use send::{SendFlags, SendOpcode, SendRequest};
pub use sge::Sge;

use std::mem::size_of;
use std::ptr;

/// A request type whose raw form the post verbs chain through `next`.
pub(crate) trait Linked {
    /// The C struct (`ibv_send_wr`, `ibv_recv_wr`) the type is transparent over.
    type Raw;
    /// Sets the raw `next` pointer.
    fn set_next(&mut self, next: *mut Self::Raw);
}

/// Chains `wrs` in order into one null-terminated list and returns its head,
/// or `None` for an empty slice.
///
/// Every pointer is derived from one base pointer, so the head stays valid
/// for the post verb as long as `wrs` is not touched in between.
#[inline]
pub(crate) fn link<R: Linked>(wrs: &mut [R]) -> Option<*mut R::Raw> {
    if wrs.is_empty() {
        return None;
    }
    let n = wrs.len();
    let base = wrs.as_mut_ptr();
    for i in 0..n {
        // SAFETY: `i < n` and `i + 1 < n` index into the slice; `R` is
        // `repr(transparent)` over `R::Raw`.
        unsafe {
            let next = if i + 1 < n {
                base.add(i + 1).cast::<R::Raw>()
            } else {
                ptr::null_mut()
            };
            (*base.add(i)).set_next(next);
        }
    }
    Some(base.cast())
}

/// How many requests of the list at `head` (`n` long) were posted, given the
/// `bad_wr` a post verb returned: its index, or `None` if it is null or not
/// one of the list's elements.
#[cold]
pub(crate) fn posted_before<T>(head: *const T, n: usize, bad: *const T) -> Option<usize> {
    if bad.is_null() {
        return None;
    }
    let offset = (bad as usize).checked_sub(head as usize)?;
    (offset % size_of::<T>() == 0 && offset / size_of::<T>() < n).then_some(offset / size_of::<T>())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SGES: [Sge; 2] = [Sge::new(0x1000, 64, 0x11), Sge::new(0x2000, 8, 0x22)];

    #[test]
    fn linking_chains_in_order_and_ends_in_null() {
        let mut wrs: Vec<RecvRequest<'_>> = (0..3).map(|i| RecvRequest::new(i, &SGES)).collect();
        let head = link(&mut wrs).expect("non-empty");
        assert_eq!(head.cast_const(), wrs.as_ptr().cast());
        let mut ids = Vec::new();
        let mut cur = head.cast_const();
        while !cur.is_null() {
            // SAFETY: every `next` points into `wrs` or is null.
            let raw = unsafe { &*cur };
            ids.push(raw.wr_id);
            cur = raw.next;
        }
        assert_eq!(ids, [0, 1, 2]);
        assert!(link::<RecvRequest<'_>>(&mut []).is_none());
        let mut one = [SendRequest::send(1, &SGES)];
        let stale = one[0].as_raw().sg_list.cast();
        one[0].set_next(stale);
        link(&mut one);
        assert!(one[0].as_raw().next.is_null());
    }

    #[test]
    fn bad_wr_becomes_an_index() {
        let wrs = [0u64; 4];
        let head = wrs.as_ptr();
        assert_eq!(posted_before(head, 4, head), Some(0));
        assert_eq!(posted_before(head, 4, head.wrapping_add(2)), Some(2));
        assert_eq!(posted_before(head, 4, head.wrapping_add(4)), None);
        assert_eq!(posted_before(head, 4, ptr::null()), None);
        assert_eq!(posted_before(head, 4, head.wrapping_sub(1)), None);
        let misaligned = (head as usize + 3) as *const u64;
        assert_eq!(posted_before(head, 4, misaligned), None);
    }
}
