//! The `static inline` helpers of `<rdma/rdma_cma.h>`: the addresses of a
//! connection identifier.

use crate::*;
use core::ptr::addr_of_mut;

/// `rdma_get_local_addr`—The local address an identifier is bound to
/// (`id->route.addr.src_addr`).
///
/// # Safety
/// `id` must be a live identifier from `rdma_create_id` (or a connect
/// request's event). The result points into `*id` and is valid while it is.
#[inline]
pub unsafe fn rdma_get_local_addr(id: *mut rdma_cm_id) -> *mut sockaddr {
    // SAFETY: the caller guarantees `id` is valid; only an address is formed.
    unsafe { addr_of_mut!((*id).route.addr.__bindgen_anon_1.src_addr) }
}

/// `rdma_get_peer_addr`—The peer address an identifier resolved or was
/// connected from (`id->route.addr.dst_addr`).
///
/// # Safety
/// As [`rdma_get_local_addr`].
#[inline]
pub unsafe fn rdma_get_peer_addr(id: *mut rdma_cm_id) -> *mut sockaddr {
    // SAFETY: the caller guarantees `id` is valid; only an address is formed.
    unsafe { addr_of_mut!((*id).route.addr.__bindgen_anon_2.dst_addr) }
}
