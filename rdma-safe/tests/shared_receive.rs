//! Shared receive queues: three channels draw their receives from one
//! queue, every message arrives byte for byte and names its channel, the
//! queue is refilled in batches while senders wait (RNR retry), and the
//! low-watermark event fires.

mod common;

use common::*;
use rdma_safe::{Channel, SendWorkRequest, SharedReceiveQueue};
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn message(sender: usize, seq: usize) -> Vec<u8> {
    let len = 1 + (seq * 37 + sender * 11) % 200;
    pattern(seed(&format!("srq {sender}"), seq), len)
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn three_channels_draw_from_one_shared_receive_queue() {
    const CHANNELS: usize = 3;
    const MESSAGES: usize = 40;
    let pd = pd();
    // Fewer slots than messages: the queue must be refilled while the
    // senders wait for receives.
    let mut srq = SharedReceiveQueue::new(&pd, 16, 256).expect("shared receive queue");
    srq.set_refill_batch(4);
    assert_eq!(srq.posted(), 16);
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..CHANNELS {
        let (a, b) = srq_attached_pair(&pd, &srq);
        senders.push(a);
        receivers.push(b);
    }
    let qpns: Vec<u32> = receivers.iter().map(Channel::qp_num).collect();
    let got = std::thread::scope(|t| {
        for (k, a) in senders.iter_mut().enumerate() {
            let pd = &pd;
            t.spawn(move || {
                for seq in 0..MESSAGES {
                    let tx = registered(pd, message(k, seq));
                    a.send(SendWorkRequest::new(&[tx.gather(..)]))
                        .expect("send to the shared queue");
                }
            });
        }
        let mut per_channel: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
        let mut buf = vec![FILL; 256];
        for _ in 0..CHANNELS * MESSAGES {
            buf.fill(FILL);
            let r = srq
                .receive(&mut buf, WAIT)
                .expect("receive")
                .expect("a message within the wait");
            assert_untouched(&buf[r.len()..], "past the message");
            per_channel
                .entry(r.qp_num())
                .or_default()
                .push(buf[..r.len()].to_vec());
        }
        per_channel
    });
    // Every channel drew receives from the queue, and each got its sender's
    // messages in order, byte for byte.
    assert_eq!(got.len(), CHANNELS, "receives drawn by every channel");
    for (k, qpn) in qpns.iter().enumerate() {
        let msgs = &got[qpn];
        assert_eq!(msgs.len(), MESSAGES, "channel {k}");
        for (seq, m) in msgs.iter().enumerate() {
            assert_bytes(m, &message(k, seq), &format!("channel {k} message {seq}"));
        }
    }
    assert!(srq
        .receive(&mut [0u8; 8], Duration::ZERO)
        .unwrap()
        .is_none());
    srq.refill().expect("refill");
    assert_eq!(srq.posted(), 16);
    for (k, (a, b)) in senders.iter().zip(&receivers).enumerate() {
        assert_quiescent(a, &format!("sender {k}"));
        assert_quiescent(b, &format!("receiver {k}"));
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn limit_event_fires_below_the_watermark() {
    let pd = pd();
    let (mut srq, mut a, b) = srq_pair(&pd, 8, 64);
    srq.arm_limit(4).expect("arm the limit");
    let tx = registered(&pd, pattern(5, 64));
    for _ in 0..5 {
        a.send(SendWorkRequest::new(&[tx.gather(..)]))
            .expect("send");
    }
    assert!(
        srq.wait_limit_reached(WAIT),
        "fewer than 4 receives posted raises the limit event"
    );
    let mut buf = [0u8; 64];
    for _ in 0..5 {
        let r = srq.receive(&mut buf, WAIT).unwrap().expect("message");
        assert_eq!(r.qp_num(), b.qp_num());
        assert_bytes(&buf[..r.len()], &tx, "message");
    }
    assert_eq!(srq.posted(), 3);
    assert_eq!(srq.refill().expect("batched refill"), 5);
    assert_eq!(srq.posted(), 8);
}
