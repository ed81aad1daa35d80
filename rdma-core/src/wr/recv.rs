//! Receive work requests (`struct ibv_recv_wr`).

use super::sge::{sg_list, sges_of, Sge};
use super::Linked;
use ibverbs_sys as sys;
use std::fmt;
use std::marker::PhantomData;
use std::ptr;

/// A receive work request (`struct ibv_recv_wr`), borrowing its SGEs for
/// `'a`. Post a slice of them with
/// [`QueuePair::post_recv_list`](crate::QueuePair::post_recv_list) or
/// [`SharedReceiveQueue::post_recv_list`](crate::SharedReceiveQueue::post_recv_list).
#[repr(transparent)]
pub struct RecvRequest<'a> {
    raw: sys::ibv_recv_wr,
    borrows: PhantomData<&'a [Sge]>,
}

// SAFETY: plain data plus a pointer to an `&'a [Sge]` (plain data); `next`
// is only written by the post functions through `&mut`.
unsafe impl Send for RecvRequest<'_> {}
// SAFETY: as above: `&RecvRequest` only reads.
unsafe impl Sync for RecvRequest<'_> {}

impl<'a> RecvRequest<'a> {
    /// A receive scattering an incoming message into `sges`.
    #[inline]
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
        let (sg_list, num_sge) = sg_list(sges);
        RecvRequest {
            raw: sys::ibv_recv_wr {
                wr_id,
                next: ptr::null_mut(),
                sg_list,
                num_sge,
            },
            borrows: PhantomData,
        }
    }
    /// The caller's identifier, returned in the completion.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }
    /// Replaces the identifier.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.raw.wr_id = wr_id;
    }
    /// The scatter list.
    #[inline]
    pub fn sges(&self) -> &'a [Sge] {
        // SAFETY: `sg_list`/`num_sge` were set from an `&'a [Sge]`.
        unsafe { sges_of(self.raw.sg_list, self.raw.num_sge) }
    }
    /// Replaces the scatter list.
    #[inline]
    pub fn set_sges(&mut self, sges: &'a [Sge]) {
        (self.raw.sg_list, self.raw.num_sge) = sg_list(sges);
    }
    /// The raw request (its `next` field is whatever the last post left).
    #[inline]
    pub fn as_raw(&self) -> &sys::ibv_recv_wr {
        &self.raw
    }
}

impl fmt::Debug for RecvRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvRequest")
            .field("wr_id", &self.wr_id())
            .field("sges", &self.sges())
            .finish()
    }
}

impl Linked for RecvRequest<'_> {
    type Raw = sys::ibv_recv_wr;
    #[inline]
    fn set_next(&mut self, next: *mut sys::ibv_recv_wr) {
        self.raw.next = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use static_assertions::{assert_eq_align, assert_eq_size, assert_impl_all};

    assert_eq_size!(RecvRequest<'static>, sys::ibv_recv_wr);
    assert_eq_align!(RecvRequest<'static>, sys::ibv_recv_wr);
    assert_impl_all!(RecvRequest<'static>: Send, Sync);

    const SGES: [Sge; 2] = [Sge::new(0x1000, 64, 0x11), Sge::new(0x2000, 8, 0x22)];

    #[test]
    fn receive_request() {
        let mut wr = RecvRequest::new(11, &SGES);
        assert_eq!(wr.raw.wr_id, 11);
        assert_eq!(wr.raw.num_sge, 2);
        assert_eq!(wr.raw.sg_list.cast_const(), SGES.as_ptr().cast());
        assert!(wr.raw.next.is_null());
        wr.set_wr_id(12);
        wr.set_sges(&[]);
        assert_eq!((wr.wr_id(), wr.sges().len()), (12, 0));
    }
}
