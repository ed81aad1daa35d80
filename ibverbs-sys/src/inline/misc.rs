//! Thread and parent domains, device clock values, QP rate limits, and the
//! RoCE v2 UDP source port.

use super::*;

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
    unsafe { ctx_op!(context, alloc_td(context, init_attr)) }
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
    unsafe { ctx_op!((*td).context, dealloc_td(td)) }
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
    unsafe { ctx_op!(context, alloc_parent_domain(context, attr)) }
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
    unsafe { ctx_op!(context, query_rt_values(context, values)) }
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
    unsafe { ctx_op!((*qp).context, modify_qp_rate_limit(qp, attr)) }
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
