//! The `unsafe` `*_unpolled` operations: [`PendingWork`] polled, waited for,
//! and dropped (which waits).

mod common;

use common::*;
use rdma_safe::{
    work::WcOpcode, PendingWork, ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WorkSuccess,
    WriteWorkRequest,
};
use std::time::{Duration, Instant};

/// Polls without blocking until the work completes.
fn poll_until_done(mut work: PendingWork<'_>) -> rdma_safe::Result<WorkSuccess> {
    let start = Instant::now();
    loop {
        match work.poll() {
            Ok(outcome) => return outcome,
            Err(back) => work = back,
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never completed");
        std::thread::yield_now();
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_and_receive_unpolled_poll_and_wait() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("unpolled send", 5000), 5000));
    let mut rx = registered(&pd, vec![FILL; 5000 + CANARY]);
    {
        let mut scatter = [rx.scatter(..)];
        // SAFETY: `recv` is waited for below, never leaked.
        let recv = unsafe { b.receive_unpolled(ReceiveWorkRequest::new(&mut scatter)) }
            .expect("post receive");
        assert_eq!(b.outstanding(), 1);
        let g = [tx.gather(..)];
        // SAFETY: `send` is polled to completion below, never leaked.
        let send = unsafe { a.send_unpolled(SendWorkRequest::new(&g).with_immediate(77)) }
            .expect("post send");
        assert!(send.wr_id() > 0);
        let sent = poll_until_done(send).expect("send");
        assert_eq!(sent.bytes(), 5000);
        let got = recv.wait().expect("receive");
        assert_eq!(got.bytes(), 5000);
        assert_eq!(got.immediate(), Some(77));
        assert_eq!(got.opcode(), WcOpcode::Recv);
    }
    assert_bytes(&rx[..5000], &tx, "received");
    assert_untouched(&rx[5000..], "past the message");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_and_read_unpolled() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let src = registered(&pd, pattern(seed("unpolled write", 70_000), 70_000));
    let mut exposed = vec![FILL; 70_000];
    // SAFETY: `exposed` outlives `exposed_mr`; Rust reads it only after the
    // operations completed.
    let exposed_mr = unsafe { shared_mr(&pd, &mut exposed) };
    let remote = exposed_mr.remote();
    let mut back = registered(&pd, vec![FILL; 70_000]);
    {
        let g = [src.gather(..)];
        // SAFETY: waited for below, never leaked.
        let w = unsafe { a.write_unpolled(WriteWorkRequest::new(&g, remote)) }.expect("write");
        assert_eq!(w.wait().expect("write").opcode(), WcOpcode::RdmaWrite);
        let mut scatter = [back.scatter(..)];
        // SAFETY: polled to completion below, never leaked.
        let r =
            unsafe { a.read_unpolled(ReadWorkRequest::new(&mut scatter, remote)) }.expect("read");
        let done = poll_until_done(r).expect("read");
        assert_eq!(done.bytes(), 70_000);
        assert_eq!(done.opcode(), WcOpcode::RdmaRead);
    }
    drop(exposed_mr);
    assert_bytes(&exposed, &src, "written");
    assert_bytes(&back, &src, "read back");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn dropping_pending_work_waits_for_it() {
    const DELAY: Duration = Duration::from_millis(1000);
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("drop waits", 3000), 3000));
    let mut rx = registered(&pd, vec![FILL; 3000]);

    let dropped_after = std::thread::scope(|t| {
        let mut scatter = [rx.scatter(..)];
        // SAFETY: dropped (which waits) below, never leaked.
        let recv = unsafe { b.receive_unpolled(ReceiveWorkRequest::new(&mut scatter)) }
            .expect("post receive");
        let (a, tx) = (&mut a, &tx);
        let sender = t.spawn(move || {
            std::thread::sleep(DELAY);
            a.send(SendWorkRequest::new(&[tx.gather(..)]))
                .expect("delayed send")
        });
        let start = Instant::now();
        drop(recv);
        let dropped_after = start.elapsed();
        sender.join().expect("sender thread");
        dropped_after
    });
    assert!(
        dropped_after >= DELAY / 2,
        "drop returned after {dropped_after:?}, before the delayed send"
    );
    assert_bytes(&rx, &tx, "received while dropping");

    // Dropping already-completed work returns at once; several at a time.
    {
        let g = [tx.gather(..10)];
        let mut scatter = [rx.scatter(..10)];
        // SAFETY: both are dropped below, never leaked.
        let (r, s) = unsafe {
            (
                b.receive_unpolled(ReceiveWorkRequest::new(&mut scatter))
                    .expect("post receive"),
                a.send_unpolled(SendWorkRequest::new(&g))
                    .expect("post send"),
            )
        };
        drop(s);
        drop(r);
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn completed_pending_work_releases_the_queue_pair() {
    // Every way of finishing a `PendingWork` (poll, wait, drop) must let go of
    // the channel's state, so that dropping the channel destroys its QP.
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let qpns = [a.local_endpoint().qp_num, b.local_endpoint().qp_num];
    let Some(live) = live_qp_numbers_or_skip("completed_pending_work_releases_the_queue_pair")
    else {
        return;
    };
    for qpn in qpns {
        assert!(live.contains(&qpn), "QP {qpn} not listed: {live:?}");
    }
    let tx = registered(&pd, pattern(seed("release", 256), 256));
    let mut rx = registered(&pd, vec![FILL; 3 * 256]);
    {
        let mut sc = scatter_chunks(&mut rx, 256);
        assert_eq!(sc.len(), 3);
        let g = [tx.gather(..)];
        for (i, scatter) in sc.iter_mut().enumerate() {
            // SAFETY: each is finished (polled, waited for or dropped) in
            // this iteration, never leaked.
            let (recv, send) = unsafe {
                (
                    b.receive_unpolled(ReceiveWorkRequest::new(scatter))
                        .expect("post receive"),
                    a.send_unpolled(SendWorkRequest::new(&g))
                        .expect("post send"),
                )
            };
            match i {
                0 => {
                    poll_until_done(send).expect("send");
                    poll_until_done(recv).expect("receive");
                }
                1 => {
                    send.wait().expect("send");
                    recv.wait().expect("receive");
                }
                _ => {
                    drop(send);
                    drop(recv);
                }
            }
        }
    }
    for chunk in rx.chunks(256) {
        assert_bytes(chunk, &tx, "received");
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
    drop((a, b));
    let live = live_qp_numbers().expect("rdma res show qp");
    for qpn in qpns {
        assert!(
            !live.contains(&qpn),
            "QP {qpn} outlived its channel (a leaked reference keeps it): {live:?}"
        );
    }
}
