//! Host-only tests of the inline-verb shims (no RDMA device needed).
//!
//! * The pure shims (`ibv_flow_label_to_udp_sport`, `ibv_inc_rkey`,
//!   `ibv_is_qpt_supported`) are compared with the C header's own inline
//!   functions, compiled with the system C compiler.
//! * The dispatch logic (`verbs_get_ctx` / `verbs_get_ctx_op`: extended-ABI
//!   marker, `sz` check, unset op) is exercised on a fake `verbs_context`
//!   whose operations are Rust functions.

mod common;

use ibverbs_sys::*;
use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of, MaybeUninit};
use std::ptr;

/// Flow labels covering every bit position and the folding of the high bits.
fn flow_labels() -> Vec<u32> {
    let mut labels = vec![0, 1, 0x3FFF, 0x4000, 0xFC000, 0xFFFFF, 0x12345, 0xABCDE];
    labels.extend((0..20).map(|bit| 1u32 << bit));
    labels.extend((0..20).map(|bit| 0xFFFFF ^ (1u32 << bit)));
    labels.sort_unstable();
    labels.dedup();
    labels
}

fn rkeys() -> Vec<u32> {
    vec![
        0,
        1,
        0xFE,
        0xFF,
        0x100,
        0x1FF,
        0x1234_56FF,
        0xFFFF_FFFF,
        0x8000_0000,
    ]
}

#[test]
fn pure_shims_match_the_c_header() {
    let mut c_body = String::new();
    let mut rust = Vec::new();
    for fl in flow_labels() {
        c_body.push_str(&format!(
            "    printf(\"sport_{fl} %u\\n\", (unsigned)ibv_flow_label_to_udp_sport({fl}u));\n"
        ));
        rust.push((
            format!("sport_{fl}"),
            ibv_flow_label_to_udp_sport(fl).to_string(),
        ));
    }
    for rkey in rkeys() {
        c_body.push_str(&format!(
            "    printf(\"rkey_{rkey} %u\\n\", ibv_inc_rkey({rkey}u));\n"
        ));
        rust.push((format!("rkey_{rkey}"), ibv_inc_rkey(rkey).to_string()));
    }
    // Only types below 32: `1 << qpt` is undefined in C beyond that.
    for caps in [0u32, 1 << 2, (1 << 2) | (1 << 4), 0xFFFF_FFFF, 0x0000_0700] {
        for qpt in [0u32, 2, 3, 4, 8, 9, 10, 31] {
            c_body.push_str(&format!(
                "    printf(\"qpt_{caps}_{qpt} %d\\n\", ibv_is_qpt_supported({caps}u, {qpt}));\n"
            ));
            rust.push((
                format!("qpt_{caps}_{qpt}"),
                ibv_is_qpt_supported(caps, ibv_qp_type(qpt)).to_string(),
            ));
        }
    }
    let program = format!(
        "#include <stdio.h>\n#include <infiniband/verbs.h>\n\nint main(void)\n{{\n{c_body}    return 0;\n}}\n"
    );
    let c = common::run_c_program(&program);
    for (key, value) in &rust {
        assert_eq!(Some(value), c.get(key), "{key}: Rust vs C");
    }
    assert_eq!(c.len(), rust.len());
}

#[test]
fn udp_sport_is_in_the_roce_range() {
    for fl in flow_labels() {
        let sport = ibv_flow_label_to_udp_sport(fl);
        assert!(
            sport >= IB_ROCE_UDP_ENCAP_VALID_PORT_MIN,
            "{fl:#x} -> {sport:#x}"
        );
    }
    assert_eq!(IB_GRH_FLOWLABEL_MASK, 0xFFFFF);
}

#[test]
fn qpt_beyond_the_mask_is_unsupported() {
    assert_eq!(
        ibv_is_qpt_supported(u32::MAX, ibv_qp_type::IBV_QPT_DRIVER),
        0
    );
    assert_eq!(ibv_is_qpt_supported(1 << 4, ibv_qp_type::IBV_QPT_UD), 1);
    assert_eq!(ibv_is_qpt_supported(1 << 4, ibv_qp_type::IBV_QPT_RC), 0);
}

/// A fake provider context: a zeroed `verbs_context` marked as extended, with
/// every operation unset and `sz` covering the whole struct.
struct FakeContext(Box<verbs_context>);

impl FakeContext {
    fn new() -> Self {
        // SAFETY: `verbs_context` is plain C data (integers, raw pointers,
        // `Option<fn>`, pthread unions), for all of which all-zero is valid.
        let mut vctx: Box<verbs_context> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED;
        vctx.sz = size_of::<verbs_context>();
        FakeContext(vctx)
    }

    fn ctx(&mut self) -> *mut ibv_context {
        &mut self.0.context
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn set_errno(value: c_int) {
    // SAFETY: the calling thread's errno slot is valid for writes.
    unsafe { *libc::__errno_location() = value };
}

/// Zeroed C object of type `T` whose first field (or `context` field) is set
/// by the caller.
fn zeroed<T>() -> Box<T> {
    // SAFETY: used only for the plain C structs of this test (pointers,
    // integers, Option<fn>, pthread unions), for which all-zero is valid.
    Box::new(unsafe { MaybeUninit::zeroed().assume_init() })
}

extern "C" fn fake_destroy_wq(_wq: *mut ibv_wq) -> c_int {
    4242
}

#[test]
fn verbs_get_ctx_finds_the_embedding_struct() {
    let mut fake = FakeContext::new();
    let ctx = fake.ctx();
    // SAFETY: `ctx` points into a live fake verbs_context.
    let vctx = unsafe { verbs_get_ctx(ctx) };
    assert_eq!(vctx, &mut *fake.0 as *mut verbs_context);

    fake.0.context.abi_compat = ptr::null_mut();
    // SAFETY: as above.
    let vctx = unsafe { verbs_get_ctx(fake.ctx()) };
    assert!(
        vctx.is_null(),
        "a non-extended context has no verbs_context"
    );
}

#[test]
fn an_unset_op_gives_eopnotsupp() {
    let mut fake = FakeContext::new();
    let mut wq = zeroed::<ibv_wq>();
    wq.context = fake.ctx();
    // SAFETY: `wq` and its context are live fakes; the unset op is not called.
    assert_eq!(unsafe { ibv_destroy_wq(&mut *wq) }, libc::EOPNOTSUPP);

    let mut counters = zeroed::<ibv_counters>();
    counters.context = fake.ctx();
    let mut values = [0u64; 4];
    // SAFETY: as above.
    let rc = unsafe { ibv_read_counters(&mut *counters, values.as_mut_ptr(), 4, 0) };
    assert_eq!(rc, libc::EOPNOTSUPP);

    // Constructors return null with errno = EOPNOTSUPP.
    set_errno(0);
    // SAFETY: as above; the attribute pointer is not dereferenced.
    let wq = unsafe { ibv_create_wq(fake.ctx(), ptr::null_mut()) };
    assert!(wq.is_null());
    assert_eq!(errno(), libc::EOPNOTSUPP);

    let mut qp = zeroed::<ibv_qp>();
    qp.context = fake.ctx();
    set_errno(0);
    // SAFETY: as above.
    let flow = unsafe { ibv_create_flow(&mut *qp, ptr::null_mut()) };
    assert!(flow.is_null());
    assert_eq!(errno(), libc::EOPNOTSUPP);
}

#[test]
fn post_srq_ops_without_provider_support_reports_the_first_op() {
    let mut fake = FakeContext::new();
    let mut srq = zeroed::<ibv_srq>();
    srq.context = fake.ctx();
    let mut op = zeroed::<ibv_ops_wr>();
    let mut bad: *mut ibv_ops_wr = ptr::null_mut();
    // SAFETY: live fakes; the unset op is not called.
    let rc = unsafe { ibv_post_srq_ops(&mut *srq, &mut *op, &mut bad) };
    assert_eq!(rc, libc::EOPNOTSUPP);
    assert_eq!(bad, &mut *op as *mut ibv_ops_wr);
}

#[test]
fn a_set_op_is_called_only_if_sz_covers_it() {
    let mut fake = FakeContext::new();
    fake.0.destroy_wq = Some(fake_destroy_wq);
    let mut wq = zeroed::<ibv_wq>();
    wq.context = fake.ctx();
    // SAFETY: live fakes; the op is a Rust function that ignores its argument.
    assert_eq!(unsafe { ibv_destroy_wq(&mut *wq) }, 4242);

    // A provider built against older headers has a smaller verbs_context:
    // `sz` tells how far back from `context` its ops reach.
    let reach = size_of::<verbs_context>() - offset_of!(verbs_context, destroy_wq);
    fake.0.sz = reach;
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_destroy_wq(&mut *wq) }, 4242);
    fake.0.sz = reach - 1;
    // SAFETY: as above; the op is now out of reach and not called.
    assert_eq!(unsafe { ibv_destroy_wq(&mut *wq) }, libc::EOPNOTSUPP);
}

extern "C" fn fake_create_wq(
    context: *mut ibv_context,
    _attr: *mut ibv_wq_init_attr,
) -> *mut ibv_wq {
    let mut wq = zeroed::<ibv_wq>();
    wq.context = context;
    wq.events_completed = 99; // must be reset by the shim
    Box::into_raw(wq)
}

#[test]
fn create_wq_initialises_the_event_bookkeeping() {
    let mut fake = FakeContext::new();
    fake.0.create_wq = Some(fake_create_wq);
    let mut marker = 7u8;
    let mut attr = zeroed::<ibv_wq_init_attr>();
    attr.wq_context = (&mut marker as *mut u8).cast::<c_void>();
    // SAFETY: live fakes; `fake_create_wq` returns a boxed zeroed WQ.
    let wq = unsafe { ibv_create_wq(fake.ctx(), &mut *attr) };
    assert!(!wq.is_null());
    // SAFETY: `wq` was leaked from a Box by `fake_create_wq`; reclaim it.
    let mut wq = unsafe { Box::from_raw(wq) };
    assert_eq!(wq.wq_context, attr.wq_context);
    assert_eq!(wq.events_completed, 0);
    let mutex = ptr::addr_of_mut!(wq.mutex).cast::<libc::pthread_mutex_t>();
    // SAFETY: the shim initialised the mutex with pthread_mutex_init.
    unsafe {
        assert_eq!(libc::pthread_mutex_lock(mutex), 0);
        assert_eq!(libc::pthread_mutex_unlock(mutex), 0);
        libc::pthread_mutex_destroy(mutex);
        libc::pthread_cond_destroy(ptr::addr_of_mut!(wq.cond).cast::<libc::pthread_cond_t>());
    }
}

#[test]
fn close_xrcd_of_a_legacy_context_does_not_call_null() {
    let mut fake = FakeContext::new();
    fake.0.context.abi_compat = ptr::null_mut();
    let mut xrcd = zeroed::<ibv_xrcd>();
    xrcd.context = fake.ctx();
    // SAFETY: live fakes; the shim must notice there is no verbs_context.
    assert_eq!(unsafe { ibv_close_xrcd(&mut *xrcd) }, libc::EOPNOTSUPP);
}
