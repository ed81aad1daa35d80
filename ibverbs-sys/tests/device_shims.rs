//! The inline-verb shims against a real provider (raw FFI, no upper layer).
//!
//! `#[ignore]`d: needs an RDMA device (`cargo xtask test-rxe` runs it on rxe0
//! with `RDMA_TEST_DEVICE=rxe0`). Covers the paths where a wrong dispatch
//! would not show in a layout check: `ibv_query_port` through the extended op
//! (fills `link_layer`), the `ibv_wr_*` send API on an extended QP, extended
//! CQ polling, memory-window binding, and the verbs rxe lacks (which must fail
//! cleanly with an errno, never crash).

use ibverbs_sys::*;
use std::ffi::{c_int, CStr};
use std::ptr;
use std::time::{Duration, Instant};

const PORT: u8 = 1;

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// An open device with a PD, its port's RoCE v2 GID and path MTU.
struct Dev {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    gid: ibv_gid,
    gid_index: u8,
    mtu: ibv_mtu,
}

impl Dev {
    fn open() -> Dev {
        let want = std::env::var("RDMA_TEST_DEVICE").ok();
        let mut n = 0;
        // SAFETY: `n` is valid for writes; the list is freed below after the
        // device was opened (an opened device outlives the list).
        let list = unsafe { ibv_get_device_list(&mut n) };
        assert!(
            !list.is_null() && n > 0,
            "this test needs an RDMA device: run `cargo xtask test-rxe`"
        );
        // SAFETY: `list` holds `n` valid device pointers.
        let devices = unsafe { std::slice::from_raw_parts(list, n as usize) };
        let dev = devices
            .iter()
            .copied()
            .find(|&d| {
                // SAFETY: `d` is a listed device; its name is a C string.
                let name = unsafe { CStr::from_ptr(ibv_get_device_name(d)) };
                want.as_deref().is_none_or(|w| name.to_str() == Ok(w))
            })
            .unwrap_or_else(|| panic!("device {want:?} not found"));
        // SAFETY: `dev` is a listed device.
        let ctx = unsafe { ibv_open_device(dev) };
        // SAFETY: the list is no longer used; the context keeps the device.
        unsafe { ibv_free_device_list(list) };
        assert!(!ctx.is_null(), "ibv_open_device: errno {}", errno());
        // SAFETY: `ctx` is open.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        assert!(!pd.is_null());

        let mut port = ibv_port_attr::default();
        // SAFETY: `ctx` is open, `port` valid for writes.
        assert_eq!(unsafe { ibv_query_port(ctx, PORT, &mut port) }, 0);
        let mut entries = vec![ibv_gid_entry::default(); port.gid_tbl_len.max(1) as usize];
        // SAFETY: `entries` has room for `entries.len()` entries.
        let got = unsafe { ibv_query_gid_table(ctx, entries.as_mut_ptr(), entries.len(), 0) };
        assert!(got > 0, "ibv_query_gid_table: {got}");
        let entry = entries[..got as usize]
            .iter()
            .find(|e| {
                // SAFETY: every bit pattern of the GID union is valid bytes.
                let raw = unsafe { e.gid.raw };
                e.gid_type == ibv_gid_type::IBV_GID_TYPE_ROCE_V2.0
                    && raw[..10] == [0; 10]
                    && raw[10..12] == [0xff, 0xff]
            })
            .copied()
            .expect("a RoCE v2 IPv4-mapped GID");
        let mtu = if port.active_mtu.0 < ibv_mtu::IBV_MTU_1024.0 {
            port.active_mtu
        } else {
            ibv_mtu::IBV_MTU_1024
        };
        Dev {
            ctx,
            pd,
            gid: entry.gid,
            gid_index: entry.gid_index as u8,
            mtu,
        }
    }

    /// Registers `len` zero bytes (leaked for the test's duration: the
    /// process ends soon, and nothing may touch freed registered memory).
    fn mr(&self, len: usize, access: ibv_access_flags) -> (*mut ibv_mr, *mut u8) {
        let mem = Box::leak(vec![0u8; len].into_boxed_slice()).as_mut_ptr();
        // SAFETY: `mem` stays allocated for the rest of the process.
        let mr = unsafe { ibv_reg_mr(self.pd, mem.cast(), len, access.0 as c_int) };
        assert!(!mr.is_null(), "ibv_reg_mr: errno {}", errno());
        (mr, mem)
    }

    fn cq(&self) -> *mut ibv_cq {
        // SAFETY: `ctx` is open.
        let cq = unsafe { ibv_create_cq(self.ctx, 64, ptr::null_mut(), ptr::null_mut(), 0) };
        assert!(!cq.is_null());
        cq
    }

    /// RESET → INIT → RTR → RTS towards `peer_qpn` on this port.
    fn connect(&self, qp: *mut ibv_qp, peer_qpn: u32) {
        use ibv_qp_attr_mask as M;
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        let mut attr = ibv_qp_attr {
            qp_state: ibv_qp_state::IBV_QPS_INIT,
            port_num: PORT,
            qp_access_flags: access.0,
            ..Default::default()
        };
        let mask = M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS;
        // SAFETY: `qp` is a live QP; `attr` valid for reads.
        assert_eq!(unsafe { ibv_modify_qp(qp, &mut attr, mask.0 as c_int) }, 0);
        let mut attr = ibv_qp_attr {
            qp_state: ibv_qp_state::IBV_QPS_RTR,
            path_mtu: self.mtu,
            dest_qp_num: peer_qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: self.gid,
                    sgid_index: self.gid_index,
                    hop_limit: 64,
                    ..Default::default()
                },
                is_global: 1,
                port_num: PORT,
                ..Default::default()
            },
            ..Default::default()
        };
        let mask = M::IBV_QP_STATE
            | M::IBV_QP_AV
            | M::IBV_QP_PATH_MTU
            | M::IBV_QP_DEST_QPN
            | M::IBV_QP_RQ_PSN
            | M::IBV_QP_MAX_DEST_RD_ATOMIC
            | M::IBV_QP_MIN_RNR_TIMER;
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_modify_qp(qp, &mut attr, mask.0 as c_int) }, 0);
        let mut attr = ibv_qp_attr {
            qp_state: ibv_qp_state::IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        let mask = M::IBV_QP_STATE
            | M::IBV_QP_TIMEOUT
            | M::IBV_QP_RETRY_CNT
            | M::IBV_QP_RNR_RETRY
            | M::IBV_QP_SQ_PSN
            | M::IBV_QP_MAX_QP_RD_ATOMIC;
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_modify_qp(qp, &mut attr, mask.0 as c_int) }, 0);
    }
}

/// Polls exactly one completion with `ibv_poll_cq`, within 20 s.
fn poll_one(cq: *mut ibv_cq, what: &str) -> ibv_wc {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut wc = [ibv_wc::default(); 2];
    loop {
        // SAFETY: `cq` is live; `wc` has room for 2 entries.
        let n = unsafe { ibv_poll_cq(cq, 2, wc.as_mut_ptr()) };
        assert!((0..=1).contains(&n), "{what}: ibv_poll_cq returned {n}");
        if n == 1 {
            assert_eq!(
                wc[0].status,
                ibv_wc_status::IBV_WC_SUCCESS,
                "{what}: status {} (vendor error {:#x})",
                wc[0].status.0,
                wc[0].vendor_err
            );
            return wc[0];
        }
        assert!(Instant::now() < deadline, "{what}: no completion in 20 s");
        std::thread::yield_now();
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn query_port_fills_the_fields_the_legacy_symbol_does_not() {
    let dev = Dev::open();
    let mut attr = ibv_port_attr {
        // Poison the fields beyond `_compat_ibv_port_attr`'s.
        link_layer: 0xAA,
        flags: 0xAA,
        port_cap_flags2: 0xAAAA,
        ..Default::default()
    };
    // SAFETY: `ctx` is open, `attr` valid for writes.
    assert_eq!(unsafe { ibv_query_port(dev.ctx, PORT, &mut attr) }, 0);
    assert_eq!(attr.state, ibv_port_state::IBV_PORT_ACTIVE);
    assert_eq!(u32::from(attr.link_layer), IBV_LINK_LAYER_ETHERNET.0);
    assert_ne!(
        attr.port_cap_flags2, 0xAAAA,
        "port_cap_flags2 left unwritten"
    );

    let mut ex = ibv_device_attr_ex::default();
    // SAFETY: `ctx` is open, `ex` valid for writes.
    let rc = unsafe { ibv_query_device_ex(dev.ctx, ptr::null(), &mut ex) };
    assert_eq!(rc, 0);
    assert!(ex.orig_attr.max_qp_wr > 0 && ex.orig_attr.phys_port_cnt >= 1);
    let bad_input = ibv_query_device_ex_input { comp_mask: 1 };
    // SAFETY: as above; the shim rejects the input before calling anything.
    let rc = unsafe { ibv_query_device_ex(dev.ctx, &bad_input, &mut ex) };
    assert_eq!(rc, libc::EINVAL);

    let mut entry = ibv_gid_entry::default();
    // SAFETY: `ctx` is open, `entry` valid for writes.
    let rc = unsafe { ibv_query_gid_ex(dev.ctx, PORT.into(), dev.gid_index.into(), &mut entry, 0) };
    assert_eq!(rc, 0);
    // SAFETY: GID unions are plain bytes.
    assert_eq!(unsafe { entry.gid.raw }, unsafe { dev.gid.raw });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn wr_api_and_extended_cq_move_data() {
    let dev = Dev::open();
    let wc_flags = ibv_create_cq_wc_flags::IBV_WC_EX_WITH_BYTE_LEN
        | ibv_create_cq_wc_flags::IBV_WC_EX_WITH_QP_NUM;
    let mut cq_attr = ibv_cq_init_attr_ex {
        cqe: 64,
        wc_flags: u64::from(wc_flags.0),
        ..Default::default()
    };
    // SAFETY: `ctx` is open, `cq_attr` valid for reads.
    let cq_ex = unsafe { ibv_create_cq_ex(dev.ctx, &mut cq_attr) };
    assert!(!cq_ex.is_null(), "ibv_create_cq_ex: errno {}", errno());
    // SAFETY: `cq_ex` came from ibv_create_cq_ex.
    let cq = unsafe { ibv_cq_ex_to_cq(cq_ex) };
    let peer_cq = dev.cq();

    let ops = ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND
        | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE
        | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_READ;
    let mut init = ibv_qp_init_attr_ex {
        send_cq: cq,
        recv_cq: cq,
        cap: ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 0,
        },
        qp_type: ibv_qp_type::IBV_QPT_RC,
        comp_mask: (ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD
            | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
            .0,
        pd: dev.pd,
        send_ops_flags: u64::from(ops.0),
        ..Default::default()
    };
    // SAFETY: `ctx`, `pd` and the CQ are live; `init` valid for reads/writes.
    let qp = unsafe { ibv_create_qp_ex(dev.ctx, &mut init) };
    assert!(!qp.is_null(), "ibv_create_qp_ex: errno {}", errno());
    // SAFETY: `qp` was created with send ops flags.
    let qpx = unsafe { ibv_qp_to_qp_ex(qp) };
    assert!(!qpx.is_null());
    let mut peer_init = ibv_qp_init_attr {
        send_cq: peer_cq,
        recv_cq: peer_cq,
        cap: init.cap,
        qp_type: ibv_qp_type::IBV_QPT_RC,
        ..Default::default()
    };
    // SAFETY: `pd` and `peer_cq` are live.
    let peer = unsafe { ibv_create_qp(dev.pd, &mut peer_init) };
    assert!(!peer.is_null());
    // SAFETY: both QPs are live.
    let (qpn, peer_qpn) = unsafe { ((*qp).qp_num, (*peer).qp_num) };
    dev.connect(qp, peer_qpn);
    dev.connect(peer, qpn);

    const LEN: usize = 3000;
    let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
        | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
        | ibv_access_flags::IBV_ACCESS_REMOTE_READ;
    let (src_mr, src) = dev.mr(LEN, access);
    let (dst_mr, dst) = dev.mr(LEN, access);
    let (back_mr, back) = dev.mr(LEN, access);
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    // SAFETY: `src` has LEN bytes; no request uses it yet.
    unsafe { ptr::copy_nonoverlapping(data.as_ptr(), src, LEN) };
    // SAFETY: the MRs are live.
    let (src_lkey, dst_rkey, back_lkey) =
        unsafe { ((*src_mr).lkey, (*dst_mr).rkey, (*back_mr).lkey) };

    // One batch: an RDMA write of `src` into `dst`, then a read of `dst`
    // back into `back` (two SGEs), both signaled. The two SGEs have equal
    // lengths on purpose: rdma-core 44's rxe `wr_set_sge_list` sums the
    // first SGE's length `num_sge` times (fixed upstream, rdma-core PR 1744),
    // so unequal lengths would transfer the wrong amount on rxe.
    // SAFETY: `qpx` is an extended QP with these ops; every SGE names
    // registered memory that lives for the whole process.
    let rc = unsafe {
        ibv_wr_start(qpx);
        (*qpx).wr_id = 1;
        (*qpx).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        ibv_wr_rdma_write(qpx, dst_rkey, dst as u64);
        ibv_wr_set_sge(qpx, src_lkey, src as u64, LEN as u32);
        (*qpx).wr_id = 2;
        (*qpx).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        ibv_wr_rdma_read(qpx, dst_rkey, dst as u64);
        let sges = [
            ibv_sge {
                addr: back as u64,
                length: (LEN / 2) as u32,
                lkey: back_lkey,
            },
            ibv_sge {
                addr: back as u64 + (LEN / 2) as u64,
                length: (LEN / 2) as u32,
                lkey: back_lkey,
            },
        ];
        ibv_wr_set_sge_list(qpx, sges.len(), sges.as_ptr());
        ibv_wr_complete(qpx)
    };
    assert_eq!(rc, 0, "ibv_wr_complete");

    // Take each completion in its own start/end pair (rdma-core 44's rxe
    // mis-advances in next_poll), and check none comes twice.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let mut attr = ibv_poll_cq_attr::default();
        // SAFETY: `cq_ex` is live; a successful start is ended below.
        let rc = unsafe { ibv_start_poll(cq_ex, &mut attr) };
        if rc == libc::ENOENT {
            assert!(Instant::now() < deadline, "no completion in 20 s: {seen:?}");
            std::thread::yield_now();
            continue;
        }
        assert_eq!(rc, 0, "ibv_start_poll");
        // SAFETY: inside a successful start_poll, with the fields requested.
        let wc = unsafe {
            let wc = (
                (*cq_ex).wr_id,
                (*cq_ex).status,
                ibv_wc_read_opcode(cq_ex),
                ibv_wc_read_byte_len(cq_ex),
                ibv_wc_read_qp_num(cq_ex),
            );
            ibv_end_poll(cq_ex);
            wc
        };
        assert_eq!(wc.1, ibv_wc_status::IBV_WC_SUCCESS, "{wc:?}");
        assert_eq!(wc.4, qpn);
        seen.push((wc.0, wc.2, wc.3));
    }
    assert_eq!(
        seen,
        [
            (1, ibv_wc_opcode::IBV_WC_RDMA_WRITE, seen[0].2),
            (2, ibv_wc_opcode::IBV_WC_RDMA_READ, LEN as u32),
        ]
    );
    let mut attr = ibv_poll_cq_attr::default();
    // SAFETY: as above; an empty CQ returns ENOENT and needs no end_poll.
    assert_eq!(unsafe { ibv_start_poll(cq_ex, &mut attr) }, libc::ENOENT);

    // SAFETY: both requests completed; nothing else writes these buffers.
    let (got_dst, got_back) = unsafe {
        (
            std::slice::from_raw_parts(dst, LEN).to_vec(),
            std::slice::from_raw_parts(back, LEN).to_vec(),
        )
    };
    assert!(got_dst == data, "RDMA write through ibv_wr_rdma_write");
    assert!(got_back == data, "RDMA read through ibv_wr_rdma_read");

    // A send through the wr API and a receive through ibv_post_recv.
    let mut rsge = ibv_sge {
        addr: dst as u64,
        length: LEN as u32,
        lkey: lkey_of(dst_mr),
    };
    let mut rwr = ibv_recv_wr {
        wr_id: 9,
        sg_list: &mut rsge,
        num_sge: 1,
        ..Default::default()
    };
    let mut bad = ptr::null_mut();
    // SAFETY: the receive names registered memory that lives on.
    assert_eq!(unsafe { ibv_post_recv(peer, &mut rwr, &mut bad) }, 0);
    // SAFETY: as for the batch above.
    let rc = unsafe {
        ibv_wr_start(qpx);
        (*qpx).wr_id = 3;
        (*qpx).wr_flags = 0; // unsignaled: only the receive completes
        ibv_wr_send(qpx);
        ibv_wr_set_sge(qpx, src_lkey, src as u64, 100);
        ibv_wr_complete(qpx)
    };
    assert_eq!(rc, 0);
    let wc = poll_one(peer_cq, "receive of a wr-API send");
    assert_eq!((wc.wr_id, wc.byte_len), (9, 100));

    // SAFETY: tear down in child-to-parent order; nothing is outstanding.
    unsafe {
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_qp(peer), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_cq(peer_cq), 0);
        for mr in [src_mr, dst_mr, back_mr] {
            assert_eq!(ibv_dereg_mr(mr), 0);
        }
        assert_eq!(ibv_dealloc_pd(dev.pd), 0);
        assert_eq!(ibv_close_device(dev.ctx), 0);
    }
}

fn lkey_of(mr: *mut ibv_mr) -> u32 {
    // SAFETY: `mr` is a live MR.
    unsafe { (*mr).lkey }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_bound_memory_window_grants_remote_write() {
    let dev = Dev::open();
    let (cq, peer_cq) = (dev.cq(), dev.cq());
    let mut init = ibv_qp_init_attr {
        send_cq: cq,
        recv_cq: cq,
        cap: ibv_qp_cap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: ibv_qp_type::IBV_QPT_RC,
        ..Default::default()
    };
    // SAFETY: PD and CQs are live.
    let (qp, peer) = unsafe {
        let qp = ibv_create_qp(dev.pd, &mut init);
        init.send_cq = peer_cq;
        init.recv_cq = peer_cq;
        (qp, ibv_create_qp(dev.pd, &mut init))
    };
    assert!(!qp.is_null() && !peer.is_null());
    // SAFETY: both QPs are live.
    let (qpn, peer_qpn) = unsafe { ((*qp).qp_num, (*peer).qp_num) };
    dev.connect(qp, peer_qpn);
    dev.connect(peer, qpn);

    // The window lives on `qp`'s side; the peer writes through it.
    let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
        | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
        | ibv_access_flags::IBV_ACCESS_MW_BIND;
    let (target_mr, target) = dev.mr(4096, access);
    let (src_mr, src) = dev.mr(64, ibv_access_flags::IBV_ACCESS_LOCAL_WRITE);
    // SAFETY: the PD is live.
    let mw = unsafe { ibv_alloc_mw(dev.pd, ibv_mw_type::IBV_MW_TYPE_1) };
    if mw.is_null() {
        panic!("ibv_alloc_mw(type 1): errno {}", errno());
    }
    // SAFETY: `mw` is live.
    let old_rkey = unsafe { (*mw).rkey };
    let mut bind = ibv_mw_bind {
        wr_id: 77,
        send_flags: ibv_send_flags::IBV_SEND_SIGNALED.0,
        bind_info: ibv_mw_bind_info {
            mr: target_mr,
            addr: target as u64 + 1024,
            length: 1024,
            mw_access_flags: ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0,
        },
    };
    // SAFETY: QP, MW and MR are live and in one PD.
    let rc = unsafe { ibv_bind_mw(qp, mw, &mut bind) };
    assert_eq!(rc, 0, "ibv_bind_mw");
    let wc = poll_one(cq, "bind");
    assert_eq!((wc.wr_id, wc.opcode), (77, ibv_wc_opcode::IBV_WC_BIND_MW));
    // SAFETY: `mw` is live; the bind updated its rkey.
    let rkey = unsafe { (*mw).rkey };
    assert_eq!(rkey, ibv_inc_rkey(old_rkey), "bind increments the rkey tag");

    // SAFETY: `src` has 64 bytes, unused by any request yet.
    unsafe { ptr::write_bytes(src, 0x5C, 64) };
    let mut sge = ibv_sge {
        addr: src as u64,
        length: 64,
        lkey: lkey_of(src_mr),
    };
    let mut wr = ibv_send_wr {
        wr_id: 78,
        sg_list: &mut sge,
        num_sge: 1,
        opcode: ibv_wr_opcode::IBV_WR_RDMA_WRITE,
        send_flags: ibv_send_flags::IBV_SEND_SIGNALED.0,
        ..Default::default()
    };
    wr.wr.rdma.remote_addr = target as u64 + 1024 + 100;
    wr.wr.rdma.rkey = rkey;
    let mut bad = ptr::null_mut();
    // SAFETY: registered memory living for the process; window bound above.
    assert_eq!(unsafe { ibv_post_send(peer, &mut wr, &mut bad) }, 0);
    let wc = poll_one(peer_cq, "write through the window");
    assert_eq!(wc.wr_id, 78);
    // SAFETY: the write completed; nothing else touches `target`.
    let got = unsafe { std::slice::from_raw_parts(target.add(1024 + 100), 64) };
    assert!(got.iter().all(|&b| b == 0x5C));

    // SAFETY: nothing outstanding; child-to-parent teardown.
    unsafe {
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_qp(peer), 0);
        assert_eq!(ibv_dealloc_mw(mw), 0);
        assert_eq!(ibv_dereg_mr(target_mr), 0);
        assert_eq!(ibv_dereg_mr(src_mr), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_cq(peer_cq), 0);
        assert_eq!(ibv_dealloc_pd(dev.pd), 0);
        assert_eq!(ibv_close_device(dev.ctx), 0);
    }
}

/// What a verb the provider may lack did: succeeded (and was undone), or
/// failed with this errno.
fn outcome<T>(what: &str, ptr: *mut T, undo: impl FnOnce(*mut T) -> c_int) -> String {
    if ptr.is_null() {
        let e = errno();
        assert_ne!(e, 0, "{what} failed without an errno");
        format!(
            "{what}: errno {e} ({})",
            std::io::Error::from_raw_os_error(e)
        )
    } else {
        assert_eq!(undo(ptr), 0, "{what}: undoing a success");
        format!("{what}: supported")
    }
}

fn rc_outcome(what: &str, rc: c_int) -> String {
    assert!(
        rc >= 0,
        "{what}: a negative return is not this verb's contract"
    );
    if rc == 0 {
        format!("{what}: supported")
    } else {
        format!(
            "{what}: errno {rc} ({})",
            std::io::Error::from_raw_os_error(rc)
        )
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn verbs_the_provider_may_lack_fail_cleanly() {
    let dev = Dev::open();
    let cq = dev.cq();
    let mut init = ibv_qp_init_attr {
        send_cq: cq,
        recv_cq: cq,
        cap: ibv_qp_cap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: ibv_qp_type::IBV_QPT_UD,
        ..Default::default()
    };
    // SAFETY: PD and CQ are live.
    let qp = unsafe { ibv_create_qp(dev.pd, &mut init) };
    assert!(!qp.is_null());
    let (mr, mem) = dev.mr(4096, ibv_access_flags::IBV_ACCESS_LOCAL_WRITE);

    let mut report = Vec::new();
    // SAFETY: every argument is a live object of this
    // device or a valid attribute struct; results are checked and undone.
    unsafe {
        let mut td_attr = ibv_td_init_attr::default();
        report.push(outcome(
            "ibv_alloc_td",
            ibv_alloc_td(dev.ctx, &mut td_attr),
            |td| ibv_dealloc_td(td),
        ));
        let mut pd_attr = ibv_parent_domain_init_attr {
            pd: dev.pd,
            ..Default::default()
        };
        report.push(outcome(
            "ibv_alloc_parent_domain",
            ibv_alloc_parent_domain(dev.ctx, &mut pd_attr),
            |pd| ibv_dealloc_pd(pd),
        ));
        let mut xrcd_attr = ibv_xrcd_init_attr {
            comp_mask: (ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_FD
                | ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_OFLAGS)
                .0,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        report.push(outcome(
            "ibv_open_xrcd",
            ibv_open_xrcd(dev.ctx, &mut xrcd_attr),
            |x| ibv_close_xrcd(x),
        ));
        let mut dm_attr = ibv_alloc_dm_attr {
            length: 64,
            ..Default::default()
        };
        report.push(outcome(
            "ibv_alloc_dm",
            ibv_alloc_dm(dev.ctx, &mut dm_attr),
            |dm| ibv_free_dm(dm),
        ));
        report.push(outcome(
            "ibv_alloc_null_mr",
            ibv_alloc_null_mr(dev.pd),
            |m| ibv_dereg_mr(m),
        ));
        let mut counters_attr = ibv_counters_init_attr::default();
        report.push(outcome(
            "ibv_create_counters",
            ibv_create_counters(dev.ctx, &mut counters_attr),
            |c| ibv_destroy_counters(c),
        ));
        let mut wq_attr = ibv_wq_init_attr {
            wq_type: ibv_wq_type::IBV_WQT_RQ,
            max_wr: 1,
            max_sge: 1,
            pd: dev.pd,
            cq,
            ..Default::default()
        };
        report.push(outcome(
            "ibv_create_wq",
            ibv_create_wq(dev.ctx, &mut wq_attr),
            |wq| ibv_destroy_wq(wq),
        ));
        let mut values = ibv_values_ex {
            comp_mask: ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0,
            ..Default::default()
        };
        report.push(rc_outcome(
            "ibv_query_rt_values_ex",
            ibv_query_rt_values_ex(dev.ctx, &mut values),
        ));
        let mut sge = ibv_sge {
            addr: mem as u64,
            length: 4096,
            lkey: (*mr).lkey,
        };
        report.push(rc_outcome(
            "ibv_advise_mr",
            ibv_advise_mr(
                dev.pd,
                ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH,
                0,
                &mut sge,
                1,
            ),
        ));
        let mut rate = ibv_qp_rate_limit_attr::default();
        report.push(rc_outcome(
            "ibv_modify_qp_rate_limit",
            ibv_modify_qp_rate_limit(qp, &mut rate),
        ));
        let mut moderation = ibv_modify_cq_attr {
            attr_mask: ibv_cq_attr_mask::IBV_CQ_ATTR_MODERATE.0,
            moderate: ibv_moderate_cq {
                cq_count: 1,
                cq_period: 1,
            },
        };
        report.push(rc_outcome(
            "ibv_modify_cq",
            ibv_modify_cq(cq, &mut moderation),
        ));
        // An SRQ exists on rxe; its XRC number and tag-matching ops do not.
        let mut srq_attr = ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        let srq = ibv_create_srq(dev.pd, &mut srq_attr);
        assert!(!srq.is_null());
        let mut srqn = 0;
        report.push(rc_outcome(
            "ibv_get_srq_num",
            ibv_get_srq_num(srq, &mut srqn),
        ));
        let mut op = ibv_ops_wr::default();
        let mut bad: *mut ibv_ops_wr = ptr::null_mut();
        // (libibverbs fills ops a provider lacks with stubs that return
        // EOPNOTSUPP without setting `bad_op`: only the shim's own fallback,
        // for a context without the op at all, sets it.)
        let rc = ibv_post_srq_ops(srq, &mut op, &mut bad);
        report.push(rc_outcome("ibv_post_srq_ops", rc));
        assert_eq!(ibv_destroy_srq(srq), 0);

        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(dev.pd), 0);
        assert_eq!(ibv_close_device(dev.ctx), 0);
    }
    eprintln!("provider support:\n  {}", report.join("\n  "));
}
