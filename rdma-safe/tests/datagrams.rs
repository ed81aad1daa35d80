//! Unreliable datagrams: one endpoint sends to several peers and they
//! answer; every payload arrives whole, without the 40-byte GRH in front,
//! checked byte for byte, with the sender's QP number; sizes above the
//! path MTU are refused before posting.

mod common;

use common::*;
use rdma_safe::{DatagramEndpoint, Error};

const QKEY: u32 = 0x1111_1111;

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn datagrams_to_several_peers_arrive_whole_without_the_grh() {
    const PEERS: usize = 3;
    const ROUNDS: usize = 5;
    let pd = pd();
    let mut hub = DatagramEndpoint::new(&pd, QKEY).expect("hub");
    let mut peers: Vec<DatagramEndpoint> = (0..PEERS)
        .map(|_| DatagramEndpoint::new(&pd, QKEY).expect("peer"))
        .collect();
    let mtu = hub.max_message();
    let to_peers: Vec<_> = peers
        .iter()
        .map(|p| hub.peer(&p.address()).unwrap())
        .collect();
    let to_hub: Vec<_> = peers
        .iter()
        .map(|p| p.peer(&hub.address()).unwrap())
        .collect();
    // Sizes from empty to a full MTU; every datagram's bytes differ.
    let sizes = [0, 1, 40, 1000, mtu - 1, mtu];
    let mut buf = vec![FILL; mtu + CANARY];
    for round in 0..ROUNDS {
        let len = sizes[round % sizes.len()];
        for (k, peer) in peers.iter_mut().enumerate() {
            let data = pattern(seed(&format!("to {k}"), round), len);
            hub.send_to(&to_peers[k], &data).expect("send to a peer");
            buf.fill(FILL);
            let got = peer.receive(&mut buf).expect("peer receives");
            assert_eq!(got.len(), len, "round {round}, peer {k}: payload length");
            assert_eq!(got.source_qp(), hub.address().qp_num);
            assert_bytes(&buf[..len], &data, "payload at offset 0 (GRH removed)");
            assert_untouched(&buf[len..], "past the payload");
        }
        // All peers answer before the hub reads: its receive ring holds them.
        for (k, peer) in peers.iter_mut().enumerate() {
            let data = pattern(seed(&format!("from {k}"), round), len);
            peer.send_to(&to_hub[k], &data).expect("send to the hub");
        }
        let mut from: Vec<u32> = Vec::new();
        for _ in 0..PEERS {
            buf.fill(FILL);
            let got = hub.receive(&mut buf).expect("hub receives");
            let k = peers
                .iter()
                .position(|p| p.address().qp_num == got.source_qp())
                .expect("the sender is one of the peers");
            let data = pattern(seed(&format!("from {k}"), round), len);
            assert_eq!(got.len(), len);
            assert_bytes(&buf[..len], &data, "answer");
            assert_untouched(&buf[len..], "past the answer");
            from.push(got.source_qp());
        }
        from.sort_unstable();
        from.dedup();
        assert_eq!(from.len(), PEERS, "one answer from every peer");
    }
    assert!(
        hub.try_receive(&mut buf).expect("poll").is_none(),
        "nothing extra arrived"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn datagrams_above_the_mtu_are_refused_and_short_buffers_truncate() {
    let pd = pd();
    let mut a = DatagramEndpoint::new(&pd, QKEY).expect("a");
    let mut b = DatagramEndpoint::new(&pd, QKEY).expect("b");
    let to_b = a.peer(&b.address()).unwrap();
    let mtu = a.max_message();
    let big = registered(&pd, pattern(3, mtu + 1));
    match a.send_to(&to_b, &big) {
        Err(Error::Post { source, .. }) => {
            assert!(source.to_string().contains("MTU"), "{source}")
        }
        other => panic!("a datagram above the MTU: {other:?}"),
    }
    match a.send_gather_to(&to_b, &[big.gather(..)]) {
        Err(Error::Post { .. }) => {}
        other => panic!("gathered datagram above the MTU: {other:?}"),
    }
    // Zero-copy from registered memory, at exactly the MTU.
    a.send_gather_to(&to_b, &[big.gather(..mtu / 2), big.gather(mtu / 2..mtu)])
        .expect("a full-MTU datagram from two elements");
    let mut small = [FILL; 16];
    let got = b.receive(&mut small).expect("receive");
    assert_eq!(got.len(), mtu, "the datagram's whole length is reported");
    assert_bytes(&small, &big[..16], "the part that fits");
    // The endpoint still works.
    a.send_to(&to_b, b"after").expect("send");
    let got = b.receive(&mut small).expect("receive");
    assert_eq!(&small[..got.len()], b"after");
}
