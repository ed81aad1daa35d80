//! Bad input on a real device: wrong keys, SGEs outside their region, short
//! receive buffers, missing receivers and peers. Each failure must arrive as
//! a completion with the right status (or an error from the verb), never as a
//! hang: every wait is bounded.

mod common;

use common::{
    device_name, open_device, pattern, poll_exactly, poll_success, rdma_wr, recv_wr, send_wr, Buf,
    RcPair,
};
use rdma_core::sys::ibv_wr_opcode as Op;
use rdma_core::{Context, Error, QpState, QpType, QueuePair, WcOpcode, WcStatus};
use std::time::Instant;

/// Polls one completion of `cq` and checks its status.
#[track_caller]
fn expect_status(cq: &rdma_core::CompQueue, want: WcStatus, what: &str) {
    let wc = poll_exactly(cq, 1, what)[0];
    assert_eq!(wc.status(), want, "{what}: {wc:?}");
    let err = wc.result().expect_err("a failed completion is an error");
    assert_eq!(err.wc_status(), Some(want));
    let text = err.to_string();
    assert!(
        text.contains(want.name()) && text.contains(want.hint()),
        "{what}: {text}"
    );
}

/// After an error completion the QP is in the error state and flushes new
/// requests with `WR_FLUSH_ERR`.
#[track_caller]
fn expect_flushed_afterwards(p: &RcPair, src: &Buf) {
    assert_eq!(p.a.state().unwrap(), QpState::Error);
    let mut sge = [src.sge(0, 8)];
    let mut wr = send_wr(0xF1, Op::IBV_WR_SEND, &mut sge);
    // SAFETY: `src` outlives the poll below.
    unsafe { p.a.post_send(&mut wr) }.expect("posting to a QP in ERR is allowed");
    let wc = poll_exactly(&p.cq_a, 1, "flushed request")[0];
    assert_eq!(wc.wr_id(), 0xF1);
    assert_eq!(wc.status(), WcStatus::WrFlushError, "{wc:?}");
}

/// A key that differs from `key` in its 8-bit tag (the part a provider
/// checks against the region it looks up).
fn wrong_key(key: u32) -> u32 {
    key ^ 0x5A
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_write_with_a_wrong_rkey_is_a_remote_access_error() {
    let p = RcPair::new();
    let src = p.buf(4096);
    let dst = p.buf(4096);
    dst.fill(0x11);
    src.write(0, &pattern(1, 4096));
    let mut sge = [src.sge(0, 4096)];
    let mut wr = rdma_wr(
        1,
        Op::IBV_WR_RDMA_WRITE,
        &mut sge,
        dst.addr(0),
        wrong_key(dst.rkey()),
    );
    // SAFETY: `src` and `dst` outlive the poll below.
    unsafe { p.a.post_send(&mut wr) }.expect("post_send");
    expect_status(&p.cq_a, WcStatus::RemoteAccessError, "write, wrong rkey");
    assert!(
        dst.read(0, 4096).iter().all(|&b| b == 0x11),
        "nothing may be written through a wrong rkey"
    );
    expect_flushed_afterwards(&p, &src);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_read_with_a_wrong_rkey_is_a_remote_access_error() {
    let p = RcPair::new();
    let local = p.buf(4096);
    let remote = p.buf(4096);
    let mut sge = [local.sge(0, 4096)];
    let mut wr = rdma_wr(
        2,
        Op::IBV_WR_RDMA_READ,
        &mut sge,
        remote.addr(0),
        wrong_key(remote.rkey()),
    );
    // SAFETY: `local` and `remote` outlive the poll below.
    unsafe { p.a.post_send(&mut wr) }.expect("post_send");
    expect_status(&p.cq_a, WcStatus::RemoteAccessError, "read, wrong rkey");
    expect_flushed_afterwards(&p, &local);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_write_beyond_the_remote_region_is_a_remote_access_error() {
    let p = RcPair::new();
    let src = p.buf(4096);
    let dst = p.buf(4096);
    let mut sge = [src.sge(0, 64)];
    // Right key, but the range ends 32 bytes past the region.
    let mut wr = rdma_wr(
        3,
        Op::IBV_WR_RDMA_WRITE,
        &mut sge,
        dst.addr(4096 - 32),
        dst.rkey(),
    );
    // SAFETY: `src` and `dst` outlive the poll below.
    unsafe { p.a.post_send(&mut wr) }.expect("post_send");
    expect_status(&p.cq_a, WcStatus::RemoteAccessError, "write past the end");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_write_to_a_region_without_remote_write_is_a_remote_access_error() {
    let p = RcPair::new();
    let src = p.buf(64);
    let read_only = Buf::new(
        &p.dev.pd,
        64,
        rdma_core::AccessFlags::LOCAL_WRITE | rdma_core::AccessFlags::REMOTE_READ,
    );
    let mut sge = [src.sge(0, 64)];
    let mut wr = rdma_wr(
        4,
        Op::IBV_WR_RDMA_WRITE,
        &mut sge,
        read_only.addr(0),
        read_only.rkey(),
    );
    // SAFETY: both buffers outlive the poll below.
    unsafe { p.a.post_send(&mut wr) }.expect("post_send");
    expect_status(
        &p.cq_a,
        WcStatus::RemoteAccessError,
        "write, no REMOTE_WRITE",
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_sge_beyond_its_region_is_a_local_protection_error() {
    let p = RcPair::new();
    let src = p.buf(4096);
    let dst = p.buf(8192);
    let mut rsge = [dst.sge(0, 8192)];
    let mut rwr = recv_wr(5, &mut rsge);
    // SAFETY: `dst` outlives the test (the receive is flushed at the latest
    // when the QPs are destroyed, before `dst` is freed).
    unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
    // The right lkey, but the SGE starts at the end of the region.
    let mut sge = [rdma_core::sys::ibv_sge {
        addr: src.addr(4096),
        length: 16,
        lkey: src.lkey(),
    }];
    let mut wr = send_wr(6, Op::IBV_WR_SEND, &mut sge);
    // SAFETY: the SGE names memory the provider must refuse to touch.
    unsafe { p.a.post_send(&mut wr) }.expect("post_send");
    expect_status(&p.cq_a, WcStatus::LocalProtectionError, "SGE past the end");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_wrong_lkey_fails_locally() {
    let p = RcPair::new();
    let src = p.buf(64);
    let dst = p.buf(64);
    let mut rsge = [dst.sge(0, 64)];
    let mut rwr = recv_wr(7, &mut rsge);
    // SAFETY: `dst` outlives the QPs.
    unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
    let mut sge = [src.sge(0, 64)];
    sge[0].lkey = wrong_key(src.lkey());
    let mut wr = send_wr(8, Op::IBV_WR_SEND, &mut sge);
    // SAFETY: the provider must refuse the SGE.
    unsafe { p.a.post_send(&mut wr) }.expect("post_send");
    // The IB spec says local protection error; rxe (Linux 6.1) reports an
    // unknown lkey as a local QP operation error (only an SGE outside a
    // found region is a protection error there).
    let wc = poll_exactly(&p.cq_a, 1, "wrong lkey")[0];
    assert!(
        matches!(
            wc.status(),
            WcStatus::LocalProtectionError | WcStatus::LocalQpOperationError
        ),
        "wrong lkey: {wc:?}"
    );
    eprintln!("wrong lkey: {}", wc.status());
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_short_receive_buffer_fails_on_both_sides() {
    let p = RcPair::new();
    let src = p.buf(4096);
    let dst = p.buf(4096);
    let mut rsge = [dst.sge(0, 100)];
    let mut rwr = recv_wr(9, &mut rsge);
    // SAFETY: `dst` outlives the polls below.
    unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
    let mut sge = [src.sge(0, 4096)];
    let mut wr = send_wr(10, Op::IBV_WR_SEND, &mut sge);
    // SAFETY: `src` outlives the polls below.
    unsafe { p.a.post_send(&mut wr) }.expect("post_send");
    // The IB spec: local length error at the receiver, NAK "invalid
    // request" at the sender. rxe (Linux 6.1) treats the overflowing receive
    // as a malformed WQE: local QP operation error, NAK "remote operation
    // error". Either way both sides fail, consistently.
    let r = poll_exactly(&p.cq_b, 1, "receiver, 100 B buffer")[0];
    let s = poll_exactly(&p.cq_a, 1, "sender, 4 KiB message")[0];
    eprintln!(
        "short receive: receiver {}, sender {}",
        r.status(),
        s.status()
    );
    assert!(
        matches!(
            (r.status(), s.status()),
            (
                WcStatus::LocalLengthError,
                WcStatus::RemoteInvalidRequestError
            ) | (
                WcStatus::LocalQpOperationError,
                WcStatus::RemoteOperationError
            )
        ),
        "receiver {r:?}, sender {s:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn no_receive_posted_exceeds_the_rnr_retries() {
    // rnr_retry 0: the first "receiver not ready" NAK fails the send.
    let p = RcPair::with_rts(|rts| rts.rnr_retry = 0);
    let src = p.buf(64);
    let mut sge = [src.sge(0, 64)];
    let mut wr = send_wr(11, Op::IBV_WR_SEND, &mut sge);
    // SAFETY: `src` outlives the poll below.
    unsafe { p.a.post_send(&mut wr) }.expect("post_send");
    expect_status(&p.cq_a, WcStatus::RnrRetryExceeded, "send, no receive");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_vanished_peer_exceeds_the_transport_retries() {
    // timeout 12 (≈16 ms) and 2 retries: the error arrives well within the
    // bounded wait.
    let p = RcPair::with_rts(|rts| {
        rts.timeout = 12;
        rts.retry_cnt = 2;
    });
    let RcPair {
        dev, cq_a, a, b, ..
    } = p;
    drop(b); // the peer QP is destroyed: its packets are dropped
    let src = Buf::new(&dev.pd, 64, Buf::full_access());
    let remote = Buf::new(&dev.pd, 64, Buf::full_access());
    let mut sge = [src.sge(0, 64)];
    let mut wr = rdma_wr(
        12,
        Op::IBV_WR_RDMA_WRITE,
        &mut sge,
        remote.addr(0),
        remote.rkey(),
    );
    let start = Instant::now();
    // SAFETY: both buffers outlive the poll below.
    unsafe { a.post_send(&mut wr) }.expect("post_send");
    expect_status(&cq_a, WcStatus::RetryExceeded, "write to a destroyed QP");
    eprintln!("retry exceeded after {:?}", start.elapsed());
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_good_request_after_errors_elsewhere_still_works() {
    // Errors on one pair do not disturb another pair of the same device.
    let bad = RcPair::new();
    let good = RcPair::new();
    let src = bad.buf(64);
    let mut sge = [src.sge(0, 64)];
    let mut wr = rdma_wr(
        13,
        Op::IBV_WR_RDMA_WRITE,
        &mut sge,
        src.addr(0),
        0xDEAD_BE00,
    );
    // SAFETY: `src` outlives the poll below.
    unsafe { bad.a.post_send(&mut wr) }.expect("post_send");
    expect_status(&bad.cq_a, WcStatus::RemoteAccessError, "bad pair");

    let gsrc = good.buf(64);
    let gdst = good.buf(64);
    let mut sge = [gsrc.sge(0, 64)];
    let mut wr = rdma_wr(
        14,
        Op::IBV_WR_RDMA_WRITE,
        &mut sge,
        gdst.addr(0),
        gdst.rkey(),
    );
    // SAFETY: both buffers outlive the poll below.
    unsafe { good.a.post_send(&mut wr) }.expect("post_send");
    assert_eq!(
        poll_success(&good.cq_a, "good pair").opcode(),
        WcOpcode::RdmaWrite
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn opening_an_unknown_device_lists_the_known_ones() {
    let err = Context::open("no_such_dev").expect_err("no device has this name");
    let own = device_name().unwrap_or_else(|| open_device().name().to_owned());
    match &err {
        Error::DeviceNotFound { name, available } => {
            assert_eq!(name, "no_such_dev");
            assert!(available.contains(&own), "{available:?}");
        }
        other => panic!("expected DeviceNotFound, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("no_such_dev") && text.contains(&own),
        "{text}"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_invalid_qp_transition_is_a_verb_error_with_errno() {
    let ctx = open_device();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq, &cq)
        .build()
        .unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    // RESET -> RTS skips INIT and RTR.
    let err = qp
        .to_rts(&rdma_core::RtsParams::new(0))
        .expect_err("RESET -> RTS is invalid");
    assert_eq!(err.failed_verb(), Some("ibv_modify_qp"));
    assert_eq!(err.errno(), Some(libc::EINVAL));
    let text = err.to_string();
    let errno_text = std::io::Error::from_raw_os_error(libc::EINVAL).to_string();
    assert!(
        text.contains("ibv_modify_qp") && text.contains(&errno_text),
        "{text}"
    );
    assert_eq!(
        qp.state().unwrap(),
        QpState::Reset,
        "a failed modify changes nothing"
    );

    // The UD-only and RC-only transitions refuse the wrong QP type up front.
    assert!(matches!(
        qp.to_rts_ud(1, 0x1111, 0),
        Err(Error::InvalidArgument(_))
    ));
    let ud = QueuePair::builder(&pd, QpType::Ud, &cq, &cq)
        .build()
        .unwrap();
    assert!(matches!(
        ud.to_init(1, rdma_core::AccessFlags::empty()),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn registering_with_remote_write_but_no_local_write_fails() {
    // The verbs require LOCAL_WRITE with REMOTE_WRITE (and REMOTE_ATOMIC).
    let ctx = open_device();
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = vec![0u8; 4096];
    // SAFETY: the registration is expected to fail; were it to succeed, the
    // region is dropped (deregistered) before `mem`.
    let result = unsafe {
        rdma_core::MemoryRegion::register(
            &pd,
            mem.as_mut_ptr(),
            mem.len(),
            rdma_core::AccessFlags::REMOTE_WRITE,
        )
    };
    let err = result.expect_err("REMOTE_WRITE without LOCAL_WRITE");
    assert_eq!(err.failed_verb(), Some("ibv_reg_mr"));
    assert_eq!(err.errno(), Some(libc::EINVAL), "{err}");
}
