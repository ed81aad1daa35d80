//! Compares the Rust layout of the structs the shims and upper layers touch
//! with what the system C compiler reports for the installed
//! `<infiniband/verbs.h>`.
//!
//! The test writes a small C program (`sizeof`, `_Alignof`, `offsetof` of
//! every checked struct and field) into a temporary directory, compiles it
//! with `$CC`, `cc`, `gcc` or `clang` (with `pkg-config --cflags libibverbs`
//! when available), runs it, and compares each line with `size_of`,
//! `align_of` and the Rust field offset. No RDMA device is needed.
//!
//! `src/layout.rs` asserts the LP64 numbers at compile time; this test checks
//! every field against the headers actually installed, so a header that moved
//! a field (or a bindgen quirk) is caught on the machine that builds.

mod common;

use ibverbs_sys::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Collects the C statements to print and the Rust values to compare with.
#[derive(Default)]
struct Checks {
    /// `printf` statements of the C program's `main`.
    c_body: String,
    /// Key (`"ibv_wc"` or `"ibv_wc.status"`) to the Rust value
    /// (`"48 8"` or `"8"`), in the format the C program prints.
    rust: BTreeMap<String, String>,
}

impl Checks {
    /// Checks size and alignment of the C type `c_type` (named `name`).
    fn ty(&mut self, name: &str, c_type: &str, size: usize, align: usize) {
        writeln!(
            self.c_body,
            "    printf(\"{name} %zu %zu\\n\", sizeof({c_type}), (size_t)_Alignof({c_type}));"
        )
        .unwrap();
        self.insert(name.to_string(), format!("{size} {align}"));
    }

    /// Checks the offset of `c_field` (a C member designator such as
    /// `wr.rdma.rkey`) in the C type `c_type`.
    fn offset(&mut self, name: &str, c_type: &str, c_field: &str, offset: usize) {
        let key = format!("{name}.{c_field}");
        writeln!(
            self.c_body,
            "    printf(\"{key} %zu\\n\", offsetof({c_type}, {c_field}));"
        )
        .unwrap();
        self.insert(key, offset.to_string());
    }

    fn insert(&mut self, key: String, value: String) {
        assert!(
            self.rust.insert(key.clone(), value).is_none(),
            "layout check listed twice: {key}"
        );
    }
}

/// `ty!(checks, ibv_wc)` or `ty!(checks, ibv_gid, "union ibv_gid")`.
macro_rules! ty {
    ($c:ident, $ty:ident) => {
        ty!($c, $ty, concat!("struct ", stringify!($ty)))
    };
    ($c:ident, $ty:ident, $c_type:expr) => {
        $c.ty(
            stringify!($ty),
            $c_type,
            core::mem::size_of::<$ty>(),
            core::mem::align_of::<$ty>(),
        )
    };
}

/// `fields!(checks, ibv_send_wr: wr_id, wr.rdma.rkey, __bindgen_anon_1.imm_data => "imm_data")`:
/// checks size/alignment of the struct and the offset of each field. A
/// field's C designator is its Rust path unless given after `=>` (anonymous
/// unions, fields renamed because they are Rust keywords).
macro_rules! fields {
    (@c_field $rust_path:expr) => { $rust_path };
    (@c_field $rust_path:expr, $cname:expr) => { $cname };
    ($c:ident, $ty:ident $(as $c_type:literal)?: $($($f:ident).+ $(=> $cname:literal)?),+ $(,)?) => {{
        let c_type = concat!("struct ", stringify!($ty));
        $(let c_type = $c_type;)?
        ty!($c, $ty, c_type);
        $(
            let uninit = core::mem::MaybeUninit::<$ty>::uninit();
            let base = uninit.as_ptr();
            // SAFETY: `addr_of!` only computes the address of a field of the
            // (uninitialised, but allocated and aligned) value; nothing is read.
            let field = unsafe { core::ptr::addr_of!((*base).$($f).+) };
            let offset = field as usize - base as usize;
            let c_field: String =
                fields!(@c_field stringify!($($f).+).replace(' ', "") $(, $cname.to_string())?);
            $c.offset(stringify!($ty), c_type, &c_field, offset);
        )+
    }};
}

/// Every struct (and field) the shims in `src/inline.rs` and the upper layers
/// (`rdma-core`, `rdma-safe`) read or write.
fn checks() -> Checks {
    let mut c = Checks::default();

    // Data path.
    fields!(c, ibv_sge: addr, length, lkey);
    fields!(
        c,
        ibv_wc: wr_id,
        status,
        opcode,
        vendor_err,
        byte_len,
        __bindgen_anon_1.imm_data => "imm_data",
        __bindgen_anon_1.invalidated_rkey => "invalidated_rkey",
        qp_num,
        src_qp,
        wc_flags,
        pkey_index,
        slid,
        sl,
        dlid_path_bits,
    );
    fields!(
        c,
        ibv_send_wr: wr_id,
        next,
        sg_list,
        num_sge,
        opcode,
        send_flags,
        __bindgen_anon_1.imm_data => "imm_data",
        __bindgen_anon_1.invalidate_rkey => "invalidate_rkey",
        wr,
        wr.rdma,
        wr.rdma.remote_addr,
        wr.rdma.rkey,
        wr.atomic,
        wr.atomic.remote_addr,
        wr.atomic.compare_add,
        wr.atomic.swap,
        wr.atomic.rkey,
        wr.ud,
        wr.ud.ah,
        wr.ud.remote_qpn,
        wr.ud.remote_qkey,
        qp_type.xrc.remote_srqn,
        __bindgen_anon_2.bind_mw.mw => "bind_mw.mw",
        __bindgen_anon_2.bind_mw.rkey => "bind_mw.rkey",
        __bindgen_anon_2.bind_mw.bind_info => "bind_mw.bind_info",
        __bindgen_anon_2.tso.hdr => "tso.hdr",
        __bindgen_anon_2.tso.hdr_sz => "tso.hdr_sz",
        __bindgen_anon_2.tso.mss => "tso.mss",
    );
    fields!(c, ibv_recv_wr: wr_id, next, sg_list, num_sge);
    fields!(c, ibv_data_buf: addr, length);
    fields!(c, ibv_poll_cq_attr: comp_mask);
    fields!(c, ibv_modify_cq_attr: attr_mask, moderate);
    fields!(c, ibv_grh: version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid);
    ty!(c, ibv_gid, "union ibv_gid");

    // Ports, GIDs, devices.
    fields!(
        c,
        ibv_port_attr: state,
        max_mtu,
        active_mtu,
        gid_tbl_len,
        port_cap_flags,
        max_msg_sz,
        bad_pkey_cntr,
        qkey_viol_cntr,
        pkey_tbl_len,
        lid,
        sm_lid,
        lmc,
        max_vl_num,
        sm_sl,
        subnet_timeout,
        init_type_reply,
        active_width,
        active_speed,
        phys_state,
        link_layer,
        flags,
        port_cap_flags2,
    );
    fields!(c, ibv_gid_entry: gid, gid_index, port_num, gid_type, ndev_ifindex);
    fields!(
        c,
        ibv_device_attr: fw_ver,
        node_guid,
        sys_image_guid,
        max_mr_size,
        page_size_cap,
        vendor_id,
        vendor_part_id,
        hw_ver,
        max_qp,
        max_qp_wr,
        device_cap_flags,
        max_sge,
        max_sge_rd,
        max_cq,
        max_cqe,
        max_mr,
        max_pd,
        max_qp_rd_atom,
        max_qp_init_rd_atom,
        max_res_rd_atom,
        atomic_cap,
        max_mw,
        max_ah,
        max_srq,
        max_srq_wr,
        max_srq_sge,
        max_pkeys,
        local_ca_ack_delay,
        phys_port_cnt,
    );
    fields!(
        c,
        ibv_device_attr_ex: orig_attr,
        comp_mask,
        odp_caps,
        completion_timestamp_mask,
        hca_core_clock,
        device_cap_flags_ex,
        tso_caps,
        rss_caps,
        max_wq_type_rq,
        packet_pacing_caps,
        raw_packet_caps,
        tm_caps,
        cq_mod_caps,
        max_dm_size,
        pci_atomic_caps,
        xrc_odp_caps,
        phys_port_cnt_ex,
    );
    fields!(
        c,
        ibv_device: node_type,
        transport_type,
        name,
        dev_name,
        dev_path,
        ibdev_path,
    );

    // Contexts and the operations the shims dispatch through.
    fields!(
        c,
        ibv_context: device,
        ops,
        cmd_fd,
        async_fd,
        num_comp_vectors,
        mutex,
        abi_compat,
    );
    fields!(
        c,
        ibv_context_ops: alloc_mw,
        bind_mw,
        dealloc_mw,
        poll_cq,
        req_notify_cq,
        post_srq_recv,
        post_send,
        post_recv,
    );
    fields!(
        c,
        verbs_context: query_port,
        advise_mr,
        alloc_null_mr,
        read_counters,
        attach_counters_point_flow,
        create_counters,
        destroy_counters,
        reg_dm_mr,
        alloc_dm,
        free_dm,
        modify_flow_action_esp,
        destroy_flow_action,
        create_flow_action_esp,
        modify_qp_rate_limit,
        alloc_parent_domain,
        dealloc_td,
        alloc_td,
        modify_cq,
        post_srq_ops,
        destroy_rwq_ind_table,
        create_rwq_ind_table,
        destroy_wq,
        modify_wq,
        create_wq,
        query_rt_values,
        create_cq_ex,
        priv_ => "priv",
        query_device_ex,
        ibv_destroy_flow,
        ibv_create_flow,
        open_qp,
        create_qp_ex,
        get_srq_num,
        create_srq_ex,
        open_xrcd,
        close_xrcd,
        sz,
        context,
    );
    fields!(c, ibv_comp_channel: context, fd, refcnt);
    fields!(c, ibv_async_event: element, event_type);

    // Verbs objects.
    fields!(c, ibv_pd: context, handle);
    fields!(c, ibv_mr: context, pd, addr, length, handle, lkey, rkey);
    fields!(
        c,
        ibv_cq: context,
        channel,
        cq_context,
        handle,
        cqe,
        mutex,
        cond,
        comp_events_completed,
        async_events_completed,
    );
    fields!(
        c,
        ibv_cq_ex: context,
        channel,
        cq_context,
        handle,
        cqe,
        mutex,
        cond,
        comp_events_completed,
        async_events_completed,
        comp_mask,
        status,
        wr_id,
        start_poll,
        next_poll,
        end_poll,
        read_opcode,
        read_vendor_err,
        read_byte_len,
        read_imm_data,
        read_qp_num,
        read_src_qp,
        read_wc_flags,
        read_slid,
        read_sl,
        read_dlid_path_bits,
        read_completion_ts,
        read_cvlan,
        read_flow_tag,
        read_tm_info,
        read_completion_wallclock_ns,
    );
    fields!(
        c,
        ibv_cq_init_attr_ex: cqe,
        cq_context,
        channel,
        comp_vector,
        wc_flags,
        comp_mask,
        flags,
        parent_domain,
    );
    fields!(
        c,
        ibv_qp: context,
        qp_context,
        pd,
        send_cq,
        recv_cq,
        srq,
        handle,
        qp_num,
        state,
        qp_type,
        mutex,
        cond,
        events_completed,
    );
    fields!(
        c,
        ibv_qp_ex: qp_base,
        comp_mask,
        wr_id,
        wr_flags,
        wr_atomic_cmp_swp,
        wr_atomic_fetch_add,
        wr_bind_mw,
        wr_local_inv,
        wr_rdma_read,
        wr_rdma_write,
        wr_rdma_write_imm,
        wr_send,
        wr_send_imm,
        wr_send_inv,
        wr_send_tso,
        wr_set_ud_addr,
        wr_set_xrc_srqn,
        wr_set_inline_data,
        wr_set_inline_data_list,
        wr_set_sge,
        wr_set_sge_list,
        wr_start,
        wr_complete,
        wr_abort,
        wr_atomic_write,
    );
    fields!(
        c,
        ibv_qp_cap: max_send_wr,
        max_recv_wr,
        max_send_sge,
        max_recv_sge,
        max_inline_data,
    );
    fields!(
        c,
        ibv_qp_init_attr: qp_context,
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all,
    );
    fields!(
        c,
        ibv_qp_init_attr_ex: qp_context,
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all,
        comp_mask,
        pd,
        xrcd,
        create_flags,
        max_tso_header,
        rwq_ind_tbl,
        rx_hash_conf,
        source_qpn,
        send_ops_flags,
    );
    fields!(c, ibv_qp_open_attr: comp_mask, qp_num, xrcd, qp_context, qp_type);
    fields!(
        c,
        ibv_qp_attr: qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        cap,
        ah_attr,
        alt_ah_attr,
        pkey_index,
        alt_pkey_index,
        en_sqd_async_notify,
        sq_draining,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
        alt_port_num,
        alt_timeout,
        rate_limit,
    );
    fields!(
        c,
        ibv_ah_attr: grh,
        dlid,
        sl,
        src_path_bits,
        static_rate,
        is_global,
        port_num,
    );
    fields!(
        c,
        ibv_global_route: dgid,
        flow_label,
        sgid_index,
        hop_limit,
        traffic_class,
    );
    fields!(c, ibv_ah: context, pd, handle);
    fields!(c, ibv_srq: context, srq_context, pd, handle, mutex, cond, events_completed);
    fields!(c, ibv_srq_attr: max_wr, max_sge, srq_limit);
    fields!(c, ibv_srq_init_attr: srq_context, attr);
    fields!(
        c,
        ibv_srq_init_attr_ex: srq_context,
        attr,
        comp_mask,
        srq_type,
        pd,
        xrcd,
        cq,
        tm_cap,
    );
    fields!(c, ibv_ops_wr: wr_id, next, opcode, flags, tm);
    fields!(c, ibv_mw: context, pd, rkey, handle, type_ => "type");
    fields!(c, ibv_mw_bind: wr_id, send_flags, bind_info);
    fields!(c, ibv_mw_bind_info: mr, addr, length, mw_access_flags);

    // Objects of the less common extended verbs.
    fields!(
        c,
        ibv_wq: context,
        wq_context,
        pd,
        cq,
        wq_num,
        handle,
        state,
        wq_type,
        post_recv,
        mutex,
        cond,
        events_completed,
        comp_mask,
    );
    fields!(
        c,
        ibv_wq_init_attr: wq_context,
        wq_type,
        max_wr,
        max_sge,
        pd,
        cq,
        comp_mask,
        create_flags,
    );
    fields!(c, ibv_rwq_ind_table: context, ind_tbl_handle, ind_tbl_num, comp_mask);
    fields!(c, ibv_dm: context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle);
    fields!(c, ibv_flow: comp_mask, context, handle);
    fields!(c, ibv_flow_action: context);
    fields!(c, ibv_xrcd: context);
    fields!(c, ibv_td: context);
    fields!(c, ibv_counters: context);

    // The connection manager, <rdma/rdma_cma.h>.
    fields!(
        c,
        rdma_cm_id: verbs,
        channel,
        context,
        qp,
        route,
        ps,
        port_num,
        event,
        send_cq_channel,
        send_cq,
        recv_cq_channel,
        recv_cq,
        srq,
        pd,
        qp_type,
    );
    fields!(c, rdma_route: addr, path_rec, num_paths);
    fields!(
        c,
        rdma_addr: __bindgen_anon_1.src_addr => "src_addr",
        __bindgen_anon_2.dst_addr => "dst_addr",
        addr,
    );
    fields!(c, rdma_cm_event: id, listen_id, event, status, param);
    fields!(
        c,
        rdma_conn_param: private_data,
        private_data_len,
        responder_resources,
        initiator_depth,
        flow_control,
        retry_count,
        rnr_retry_count,
        srq,
        qp_num,
    );
    fields!(c, rdma_ud_param: private_data, private_data_len, ah_attr, qp_num, qkey);
    fields!(c, rdma_event_channel: fd);
    c
}

/// Compiles and runs the C program; returns its output as key → value.
fn c_layouts(checks: &Checks) -> BTreeMap<String, String> {
    let program = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\n\n\
         int main(void)\n{{\n{}    return 0;\n}}\n",
        checks.c_body
    );
    common::run_c_program(&program)
}

#[test]
fn rust_layouts_match_the_c_compiler() {
    let checks = checks();
    let c = c_layouts(&checks);

    let mut mismatches = Vec::new();
    for (key, rust) in &checks.rust {
        match c.get(key) {
            Some(c_value) if c_value == rust => {}
            Some(c_value) => mismatches.push(format!("{key}: C says {c_value}, Rust has {rust}")),
            None => mismatches.push(format!("{key}: missing from the C program's output")),
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} layout checks differ from the C compiler (size align / offset):\n  {}",
        mismatches.len(),
        checks.rust.len(),
        mismatches.join("\n  ")
    );
    assert_eq!(c.len(), checks.rust.len(), "C printed unexpected lines");
    eprintln!("{} layout checks match the C compiler", checks.rust.len());
}

#[test]
fn a_wrong_rust_value_is_reported() {
    // The comparison must be able to fail: a deliberately wrong entry shows up
    // as a mismatch rather than passing silently.
    let mut checks = Checks::default();
    checks.ty("ibv_sge", "struct ibv_sge", 15, 8);
    checks.offset("ibv_sge", "struct ibv_sge", "lkey", 12);
    let c = c_layouts(&checks);
    assert_eq!(c["ibv_sge"], "16 8");
    assert_ne!(c["ibv_sge"], checks.rust["ibv_sge"]);
    assert_eq!(c["ibv_sge.lkey"], checks.rust["ibv_sge.lkey"]);
}
