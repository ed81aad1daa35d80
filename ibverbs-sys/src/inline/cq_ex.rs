//! Extended CQ polling: `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` and
//! the `ibv_wc_read_*` family.

use super::*;

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
