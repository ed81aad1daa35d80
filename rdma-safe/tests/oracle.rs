//! The memory oracle catches a deliberate violation, so the fault
//! scenarios cannot pass because it never looks: a receive posted through
//! `rdma_core` directly (the test-only faulty path, outside the safe
//! layer) keeps memory in the NIC's hands, and the safe layer's hand-back
//! points — a registration dropped, a pool chunk returned, a lent buffer
//! given back — each fail loudly, naming the request.
//!
//! Built with the `fault-injection` feature, as the `faults_*.rs` scenarios.
#![cfg(feature = "fault-injection")]

mod common;

use common::{pd, registered};
use rdma_core::{fault, AccessFlags, CompQueue, QpType, QueuePair, RecvRequest, Sge};
use rdma_safe::{BufferPool, Error, ProtectionDomain, SendWorkRequest};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The wr_id of the faulty path's receive.
const ROGUE: u64 = 0xBAD_0000_0001;

/// A queue pair of `pd` made with `rdma_core` directly, in INIT (receives
/// may be posted), with its CQ.
fn raw_qp(pd: &ProtectionDomain) -> (QueuePair, CompQueue) {
    let core = pd.as_core();
    let cq = CompQueue::new(pd.context(), 16, None, 0).expect("raw CQ");
    let qp = QueuePair::builder(core, QpType::Rc, &cq, &cq)
        .build()
        .expect("raw QP");
    qp.to_init(1, AccessFlags::LOCAL_WRITE)
        .expect("raw QP to INIT");
    (qp, cq)
}

/// Posts a receive into the `len` bytes at `addr` on `qp`, outside the
/// safe layer: the deliberate violation.
fn rogue_receive(qp: &QueuePair, addr: *const u8, len: usize, lkey: u32) {
    let sge = [Sge::new(addr as u64, len as u32, lkey)];
    let mut wr = [RecvRequest::new(ROGUE, &sge)];
    // Not sound, on purpose, and contained: the QP never leaves INIT, so
    // no message ever arrives; it is reset (discarding the receive) before
    // the memory is freed, and memory the oracle refuses to hand back is
    // leaked.
    // SAFETY: by the containment just above.
    unsafe { qp.post_recv_list(&mut wr) }.expect("post the rogue receive");
}

/// The panic of `f`, as text; fails if `f` did not panic.
#[track_caller]
fn panic_of(what: &str, f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f))
        .err()
        .unwrap_or_else(|| panic!("{what}: the oracle let it through"));
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[track_caller]
fn assert_names_the_rogue(what: &str, msg: &str, moment: &str) {
    assert!(msg.contains("memory oracle"), "{what}: {msg}");
    assert!(msg.contains(moment), "{what}: {msg}");
    assert!(msg.contains(&format!("wr_id {ROGUE:#x}")), "{what}: {msg}");
    assert!(msg.contains("may still write"), "{what}: {msg}");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_registration_dropped_under_a_posted_receive() {
    let pd = pd();
    let (qp, _cq) = raw_qp(&pd);
    let rx = registered(&pd, vec![0u8; 4096]);
    let (addr, len, lkey) = (rx.as_ptr(), rx.len(), rx.region().lkey());
    rogue_receive(&qp, addr, len, lkey);
    assert_eq!(
        fault::in_flight(qp.qp_num()),
        1,
        "the oracle records the rogue receive"
    );

    // The check itself, on a part of the buffer, and not on memory beside it.
    let msg = panic_of("direct check", || {
        fault::check_released(addr.wrapping_add(100), 8, "a test hands back")
    });
    assert_names_the_rogue("direct check", &msg, "a test hands back");
    fault::check_released(addr.wrapping_add(len), 64, "the bytes after it");

    // Dropping the registration (which frees the Vec): refused loudly. The
    // buffer and its registration are leaked by the panic.
    let msg = panic_of("registration dropped", || drop(rx));
    assert_names_the_rogue(
        "registration dropped",
        &msg,
        "a memory region is deregistered",
    );

    // RESET discards the receive: the oracle lets go.
    qp.reset().expect("reset the raw QP");
    assert_eq!(fault::in_flight(qp.qp_num()), 0);
    fault::check_released(addr, len, "after the reset");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_pool_buffer_returned_under_a_posted_receive() {
    let pd = pd();
    let (qp, _cq) = raw_qp(&pd);
    let pool = BufferPool::new(&pd, 4096, 2).expect("pool");
    let buf = pool.try_alloc().expect("a buffer");
    rogue_receive(&qp, buf.as_ptr(), buf.capacity(), 0);
    let msg = panic_of("pool buffer dropped", || drop(buf));
    assert_names_the_rogue("pool buffer dropped", &msg, "a pool chunk goes back");
    assert_eq!(pool.available(), 1, "the chunk stayed out of the free list");
    qp.reset().expect("reset the raw QP");
    assert_eq!(fault::in_flight(qp.qp_num()), 0);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_lent_buffer_given_back_under_a_posted_receive() {
    let pd = pd();
    let (mut a, mut b) = common::pair(&pd);
    let (qp, _cq) = raw_qp(&pd);
    let tx = registered(&pd, b"lent and watched".to_vec());
    let mut rx = registered(&pd, vec![0u8; 64]);
    let addr = rx.as_ptr();
    let (mr, buf) = rx.split_mut();
    let mut buf = Some(buf);
    let msg = panic_of("lent buffer given back", || {
        let _ = b.scope(|s| {
            let lent = s.post_receive_lent(mr, buf.take().expect("once"))?;
            // A second request on the lent memory, from outside.
            rogue_receive(&qp, addr, 64, 0);
            a.send(SendWorkRequest::new(&[tx.gather(..)]))?;
            let (done, back) = lent.wait()?;
            assert_eq!(&back[..done.bytes()], b"lent and watched");
            Ok::<_, Error>(())
        });
    });
    assert_names_the_rogue("lent buffer given back", &msg, "a lent buffer comes back");
    // The scope drained b's own receive before resuming the panic.
    assert_eq!(fault::in_flight(b.qp_num()), 0);
    qp.reset().expect("reset the raw QP");
    assert_eq!(fault::in_flight(qp.qp_num()), 0);
    assert_eq!(&rx[..16], b"lent and watched");
}
