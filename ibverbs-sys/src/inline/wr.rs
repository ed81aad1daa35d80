//! The extended send API: the `ibv_wr_*` family of `ibv_qp_ex`.

use super::*;

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
