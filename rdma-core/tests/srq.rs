//! Shared receive queue on a real device: one SRQ feeding two RC QPs, each
//! connected to its own peer.

mod common;

use common::{assert_bytes_eq, pattern, poll_exactly, recv_wr, send_wr, Buf, TestDevice};
use rdma_core::sys::ibv_wr_opcode as Op;
use rdma_core::{QpType, QueuePair, SharedReceiveQueue, WcOpcode};
use std::collections::HashMap;

const SLOTS: usize = 24;
const SLOT: usize = 2048;
const PER_PEER: usize = 8;

/// Distinct size per (peer, message), so a receive identifies its message.
fn size(peer: usize, msg: usize) -> usize {
    100 + msg * 137 + peer * 5
}

fn seed(peer: usize, msg: usize) -> u64 {
    (peer * 1000 + msg) as u64
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_srq_feeds_two_qps() {
    let dev = TestDevice::open();
    let srq = SharedReceiveQueue::new(&dev.pd, SLOTS as u32, 1).expect("ibv_create_srq");
    assert!(
        srq.max_wr() >= SLOTS as u32 && srq.max_sge() >= 1,
        "{srq:?}"
    );

    // Two receiving QPs on the SRQ, completing receives to one CQ.
    let recv_cq = dev.cq(None);
    let send_cq = dev.cq(None);
    let receivers: Vec<QueuePair> = (0..2)
        .map(|_| {
            QueuePair::builder(&dev.pd, QpType::Rc, &send_cq, &recv_cq)
                .srq(&srq)
                .build()
                .expect("ibv_create_qp(RC, SRQ)")
        })
        .collect();
    for qp in &receivers {
        assert!(qp.srq().is_some());
    }
    // Their peers, each with its own CQ.
    let peer_cqs: Vec<_> = (0..2).map(|_| dev.cq(None)).collect();
    let peers: Vec<QueuePair> = peer_cqs.iter().map(|cq| dev.rc_qp(cq)).collect();
    for (r, p) in receivers.iter().zip(&peers) {
        dev.connect(p, r);
    }

    // All receive buffers go to the SRQ, not to a QP.
    let slots = Buf::new(&dev.pd, SLOTS * SLOT, Buf::full_access());
    slots.fill(0xEE);
    for i in 0..SLOTS {
        let mut sge = [slots.sge(i * SLOT, SLOT)];
        let mut wr = recv_wr(i as u64, &mut sge);
        // SAFETY: `slots` outlives the polls below and the QPs.
        unsafe { srq.post_recv(&mut wr) }.expect("ibv_post_srq_recv");
    }

    // Both peers send, interleaved.
    let src = Buf::new(&dev.pd, 2 * PER_PEER * SLOT, Buf::full_access());
    for msg in 0..PER_PEER {
        for (peer, qp) in peers.iter().enumerate() {
            let off = (peer * PER_PEER + msg) * SLOT;
            src.write(off, &pattern(seed(peer, msg), size(peer, msg)));
            let mut sge = [src.sge(off, size(peer, msg))];
            let mut wr = send_wr((peer * 100 + msg) as u64, Op::IBV_WR_SEND, &mut sge);
            // SAFETY: `src` outlives the polls below.
            unsafe { qp.post_send(&mut wr) }.expect("post_send");
        }
    }
    for (peer, cq) in peer_cqs.iter().enumerate() {
        let sends = poll_exactly(cq, PER_PEER, &format!("sends of peer {peer}"));
        assert!(sends.iter().all(|wc| wc.is_success()), "{sends:#?}");
    }

    let recvs = poll_exactly(&recv_cq, 2 * PER_PEER, "receives through the SRQ");
    let qp_to_peer: HashMap<u32, usize> = receivers
        .iter()
        .enumerate()
        .map(|(i, qp)| (qp.qp_num(), i))
        .collect();
    let mut next_msg = [0usize; 2];
    let mut used_slots = Vec::new();
    for wc in &recvs {
        wc.result().expect("receive");
        assert_eq!(wc.opcode(), WcOpcode::Recv);
        let peer = *qp_to_peer
            .get(&wc.qp_num())
            .unwrap_or_else(|| panic!("completion for an unknown QP: {wc:?}"));
        // RC delivers each connection's messages in order.
        let msg = next_msg[peer];
        next_msg[peer] += 1;
        assert_eq!(
            wc.byte_len() as usize,
            size(peer, msg),
            "message {msg} of peer {peer} arrived on QP {:#x}",
            wc.qp_num()
        );
        let slot = wc.wr_id() as usize;
        assert!(slot < SLOTS && !used_slots.contains(&slot), "{wc:?}");
        used_slots.push(slot);
        assert_bytes_eq(
            &slots.read(slot * SLOT, size(peer, msg)),
            &pattern(seed(peer, msg), size(peer, msg)),
            &format!("message {msg} of peer {peer} in SRQ slot {slot}"),
        );
    }
    assert_eq!(next_msg, [PER_PEER; 2]);
    // SRQ slots are consumed in the order they were posted.
    used_slots.sort_unstable();
    assert_eq!(used_slots, (0..2 * PER_PEER).collect::<Vec<_>>());
}
