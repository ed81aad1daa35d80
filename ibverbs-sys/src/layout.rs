//! Compile-time layout checks for the structs the shims and the upper layers
//! touch. The numbers are those the C compiler reports for rdma-core's headers
//! on 64-bit Linux (LP64); `tests/layout.rs` re-checks them against the
//! installed headers with the system C compiler.

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod lp64 {
    use crate::*;
    use core::mem::{align_of, offset_of, size_of};
    use static_assertions::const_assert_eq;

    const_assert_eq!(size_of::<ibv_sge>(), 16);
    const_assert_eq!(size_of::<ibv_wc>(), 48);
    const_assert_eq!(align_of::<ibv_wc>(), 8);
    const_assert_eq!(offset_of!(ibv_wc, status), 8);
    const_assert_eq!(offset_of!(ibv_wc, opcode), 12);
    const_assert_eq!(offset_of!(ibv_wc, byte_len), 20);
    const_assert_eq!(offset_of!(ibv_wc, qp_num), 28);
    const_assert_eq!(offset_of!(ibv_wc, wc_flags), 36);
    const_assert_eq!(size_of::<ibv_send_wr>(), 128);
    const_assert_eq!(offset_of!(ibv_send_wr, sg_list), 16);
    const_assert_eq!(offset_of!(ibv_send_wr, opcode), 28);
    const_assert_eq!(offset_of!(ibv_send_wr, send_flags), 32);
    const_assert_eq!(offset_of!(ibv_send_wr, wr), 40);
    const_assert_eq!(offset_of!(ibv_send_wr, qp_type), 72);
    const_assert_eq!(size_of::<ibv_recv_wr>(), 32);
    const_assert_eq!(size_of::<ibv_port_attr>(), 52);
    const_assert_eq!(offset_of!(ibv_port_attr, link_layer), 46);
    const_assert_eq!(offset_of!(ibv_port_attr, port_cap_flags2), 48);
    const_assert_eq!(size_of::<ibv_qp_attr>(), 144);
    const_assert_eq!(size_of::<ibv_ah_attr>(), 32);
    const_assert_eq!(size_of::<ibv_global_route>(), 24);
    const_assert_eq!(size_of::<ibv_qp_init_attr>(), 64);
    const_assert_eq!(size_of::<ibv_gid_entry>(), 32);
    const_assert_eq!(size_of::<ibv_device_attr>(), 232);
    const_assert_eq!(size_of::<ibv_context>(), 328);
    const_assert_eq!(offset_of!(ibv_context, ops), 8);
    const_assert_eq!(offset_of!(ibv_context, abi_compat), 320);
    const_assert_eq!(size_of::<verbs_context>(), 648);
    const_assert_eq!(offset_of!(verbs_context, context), 320);
    const_assert_eq!(size_of::<ibv_qp_ex>(), 352);
    const_assert_eq!(size_of::<ibv_cq_ex>(), 288);
    const_assert_eq!(size_of::<ibv_mr>(), 48);
    const_assert_eq!(size_of::<ibv_qp>(), 160);
    const_assert_eq!(size_of::<ibv_cq>(), 128);

    // <rdma/rdma_cma.h>
    const_assert_eq!(size_of::<rdma_cm_id>(), 416);
    const_assert_eq!(offset_of!(rdma_cm_id, verbs), 0);
    const_assert_eq!(offset_of!(rdma_cm_id, channel), 8);
    const_assert_eq!(offset_of!(rdma_cm_id, qp), 24);
    const_assert_eq!(offset_of!(rdma_cm_id, route), 32);
    const_assert_eq!(offset_of!(rdma_cm_id, port_num), 348);
    const_assert_eq!(offset_of!(rdma_cm_id, pd), 400);
    const_assert_eq!(size_of::<rdma_route>(), 312);
    const_assert_eq!(size_of::<rdma_addr>(), 296);
    const_assert_eq!(size_of::<rdma_cm_event>(), 80);
    const_assert_eq!(offset_of!(rdma_cm_event, event), 16);
    const_assert_eq!(offset_of!(rdma_cm_event, status), 20);
    const_assert_eq!(offset_of!(rdma_cm_event, param), 24);
    const_assert_eq!(size_of::<rdma_conn_param>(), 24);
    const_assert_eq!(offset_of!(rdma_conn_param, private_data_len), 8);
    const_assert_eq!(offset_of!(rdma_conn_param, qp_num), 16);
    const_assert_eq!(size_of::<rdma_event_channel>(), 4);
}

// `ibv_context` must be the last field of `verbs_context` (container_of).
static_assertions::const_assert_eq!(
    core::mem::offset_of!(crate::verbs_context, context)
        + core::mem::size_of::<crate::ibv_context>(),
    core::mem::size_of::<crate::verbs_context>()
);
