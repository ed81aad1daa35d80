//! Completion channels on a real device: an armed CQ wakes its channel for a
//! completion; waiting without one times out in bounded time.

mod common;

use common::{pattern, poll_exactly, poll_success, recv_wr, send_wr, Buf, RcPair, TIMEOUT};
use rdma_core::sys::{self, ibv_wr_opcode as Op};
use rdma_core::Error;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Posts a receive on B and a send (with `flags` added) from A.
fn exchange(p: &RcPair, src: &Buf, dst: &Buf, id: u64, flags: u32) {
    src.write(0, &pattern(id, 64));
    let mut rsge = [dst.sge(0, 64)];
    let mut rwr = recv_wr(id, &mut rsge);
    // SAFETY: `dst` outlives the poll of this receive (done by the caller).
    unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
    let mut ssge = [src.sge(0, 64)];
    let mut swr = send_wr(id, Op::IBV_WR_SEND, &mut ssge);
    swr.send_flags |= flags;
    // SAFETY: `src` outlives the poll of this send.
    unsafe { p.a.post_send(&mut swr) }.expect("post_send");
    poll_success(&p.cq_a, "send");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_armed_cq_wakes_its_channel() {
    let (p, ch) = RcPair::with_channel(true);
    let ch = ch.unwrap();
    assert!(p.cq_b.channel().is_some());
    assert!(ch.as_raw_fd() >= 0);
    let (src, dst) = (p.buf(64), p.buf(64));

    p.cq_b.req_notify(false).expect("ibv_req_notify_cq");
    // Nothing happened yet: the wait times out, in bounded time.
    let start = Instant::now();
    assert!(!p.cq_b.wait_event(Some(Duration::from_millis(200))).unwrap());
    let waited = start.elapsed();
    assert!(
        // The lower bound proves it waited; the upper one only detects a hang.
        waited >= Duration::from_millis(190) && waited < Duration::from_secs(60),
        "timed out after {waited:?}"
    );

    for round in 0..3u64 {
        exchange(&p, &src, &dst, round, 0);
        let start = Instant::now();
        assert!(
            p.cq_b.wait_event(Some(TIMEOUT)).unwrap(),
            "round {round}: no event within {TIMEOUT:?}"
        );
        eprintln!("round {round}: event after {:?}", start.elapsed());
        // Re-arm, then poll: a completion arriving in between still raises
        // the next event.
        p.cq_b.req_notify(false).unwrap();
        let wc = poll_success(&p.cq_b, "receive after the event");
        assert_eq!(wc.wr_id(), round);
        // No further completion, so no further event.
        assert!(!p.cq_b.wait_event(Some(Duration::from_millis(50))).unwrap());
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn solicited_only_waits_for_a_solicited_message() {
    let (p, _ch) = RcPair::with_channel(true);
    let (src, dst) = (p.buf(64), p.buf(64));
    p.cq_b
        .req_notify(true)
        .expect("arm for solicited completions");

    // An unsolicited message completes but raises no event.
    exchange(&p, &src, &dst, 1, 0);
    assert!(
        !p.cq_b.wait_event(Some(Duration::from_millis(300))).unwrap(),
        "an unsolicited completion raised an event"
    );
    assert_eq!(poll_success(&p.cq_b, "unsolicited").wr_id(), 1);

    // A solicited one does.
    exchange(&p, &src, &dst, 2, sys::ibv_send_flags::IBV_SEND_SOLICITED.0);
    assert!(p.cq_b.wait_event(Some(TIMEOUT)).unwrap(), "no event");
    assert_eq!(poll_success(&p.cq_b, "solicited").wr_id(), 2);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_unarmed_cq_raises_no_event() {
    let (p, _ch) = RcPair::with_channel(true);
    let (src, dst) = (p.buf(64), p.buf(64));
    exchange(&p, &src, &dst, 7, 0);
    poll_exactly(&p.cq_b, 1, "receive");
    assert!(!p.cq_b.wait_event(Some(Duration::from_millis(200))).unwrap());
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn waiting_on_a_cq_without_channel_is_an_error() {
    let p = RcPair::new();
    assert!(p.cq_a.channel().is_none());
    match p.cq_a.wait_event(Some(Duration::from_millis(10))) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("channel"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
