//! Unreliable datagram (UD) on a real device: two UD QPs exchanging
//! datagrams through an address handle.

mod common;

use common::{
    assert_bytes_eq, assert_no_completion, pattern, poll_exactly, poll_success, recv_wr, send_wr,
    Buf, TestDevice, PORT,
};
use rdma_core::sys::{self, ibv_wr_opcode as Op};
use rdma_core::{AddressHandle, CompQueue, QpType, QueuePair, WcOpcode};
use std::net::IpAddr;
use std::time::Duration;

const QKEY: u32 = 0x1111_2222;

/// Every UD receive buffer starts with room for the 40-byte GRH.
const GRH: usize = 40;

struct UdPair {
    dev: TestDevice,
    cq_a: CompQueue,
    cq_b: CompQueue,
    a: QueuePair,
    b: QueuePair,
    /// How to reach this device's port (both QPs live on it).
    ah: AddressHandle,
}

impl UdPair {
    fn new() -> UdPair {
        let dev = TestDevice::open();
        let cq_a = dev.cq(None);
        let cq_b = dev.cq(None);
        let a = QueuePair::builder(&dev.pd, QpType::Ud, &cq_a, &cq_a)
            .build()
            .expect("ibv_create_qp(UD)");
        let b = QueuePair::builder(&dev.pd, QpType::Ud, &cq_b, &cq_b)
            .build()
            .expect("ibv_create_qp(UD)");
        a.to_rts_ud(PORT, QKEY, 0x100).expect("UD to RTS");
        b.to_rts_ud(PORT, QKEY, 0x200).expect("UD to RTS");
        let ah = AddressHandle::new(&dev.pd, &dev.av()).expect("ibv_create_ah");
        UdPair {
            dev,
            cq_a,
            cq_b,
            a,
            b,
            ah,
        }
    }

    fn buf(&self, len: usize) -> Buf {
        Buf::new(&self.dev.pd, len, Buf::full_access())
    }

    /// A send of `sges` to `dest` with `qkey`.
    fn ud_send(
        &self,
        wr_id: u64,
        sges: &mut [sys::ibv_sge],
        dest: &QueuePair,
        qkey: u32,
    ) -> sys::ibv_send_wr {
        let mut wr = send_wr(wr_id, Op::IBV_WR_SEND, sges);
        wr.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: self.ah.as_ptr(),
            remote_qpn: dest.qp_num(),
            remote_qkey: qkey,
        };
        wr
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn datagrams_arrive_byte_for_byte_after_the_grh() {
    let p = UdPair::new();
    let mtu = p.dev.mtu.bytes() as usize;
    for (i, size) in [1usize, 7, 256, mtu].into_iter().enumerate() {
        for (from, to, from_cq, to_cq) in [
            (&p.a, &p.b, &p.cq_a, &p.cq_b),
            (&p.b, &p.a, &p.cq_b, &p.cq_a),
        ] {
            let what = format!("UD {size} B from QP {:#x}", from.qp_num());
            let src = p.buf(size);
            let dst = p.buf(GRH + size + 64);
            dst.fill(0xEE);
            let data = pattern(700 + i as u64 + u64::from(from.qp_num()), size);
            src.write(0, &data);

            let mut rsge = [dst.sge(0, GRH + size + 64)];
            let mut rwr = recv_wr(i as u64, &mut rsge);
            // SAFETY: `dst` outlives the poll below.
            unsafe { to.post_recv(&mut rwr) }.expect("post_recv");
            let mut ssge = [src.sge(0, size)];
            let mut swr = p.ud_send(i as u64, &mut ssge, to, QKEY);
            // SAFETY: `src` (and the AH) outlive the poll below.
            unsafe { from.post_send(&mut swr) }.expect("post_send");

            assert_eq!(poll_success(from_cq, &what).opcode(), WcOpcode::Send);
            let r = poll_success(to_cq, &what);
            assert_eq!(r.opcode(), WcOpcode::Recv);
            assert!(r.has_grh(), "{what}: RoCE datagrams carry a GRH");
            assert_eq!(r.byte_len() as usize, GRH + size, "{what}: byte_len");
            assert_eq!(r.src_qp(), from.qp_num(), "{what}: source QP");
            assert_eq!(r.qp_num(), to.qp_num());
            assert_bytes_eq(&dst.read(GRH, size), &data, &what);
            assert!(
                dst.read(GRH + size, 64).iter().all(|&b| b == 0xEE),
                "{what}: written past the datagram"
            );

            // RoCE v2 over IPv4: the last 20 bytes of the GRH area hold the
            // IPv4 header, whose source is our own GID's address.
            if let IpAddr::V4(ip) = p.dev.gid.gid.to_ip() {
                let hdr = dst.read(20, 20);
                assert_eq!(hdr[0], 0x45, "{what}: IPv4 header expected: {hdr:02x?}");
                assert_eq!(&hdr[12..16], &ip.octets(), "{what}: source address");
            }
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_datagram_with_the_wrong_qkey_is_dropped() {
    let p = UdPair::new();
    let src = p.buf(32);
    let dst = p.buf(GRH + 32);
    src.write(0, &pattern(800, 32));
    let mut rsge = [dst.sge(0, GRH + 32)];
    let mut rwr = recv_wr(1, &mut rsge);
    // SAFETY: `dst` outlives the QPs.
    unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");

    let mut ssge = [src.sge(0, 32)];
    let mut swr = p.ud_send(1, &mut ssge, &p.b, QKEY ^ 1);
    // SAFETY: `src` outlives the polls below.
    unsafe { p.a.post_send(&mut swr) }.expect("post_send");
    // UD is unreliable: the sender completes, the receiver silently drops.
    poll_success(&p.cq_a, "send with a wrong qkey");
    assert_no_completion(&p.cq_b, Duration::from_millis(500), "wrong qkey");

    // The receive is still there for a datagram with the right qkey.
    let mut ssge = [src.sge(0, 32)];
    let mut swr = p.ud_send(2, &mut ssge, &p.b, QKEY);
    // SAFETY: as above.
    unsafe { p.a.post_send(&mut swr) }.expect("post_send");
    poll_success(&p.cq_a, "send with the right qkey");
    let r = poll_exactly(&p.cq_b, 1, "right qkey")[0];
    r.result().expect("receive");
    assert_eq!(r.wr_id(), 1);
    assert_bytes_eq(&dst.read(GRH, 32), &pattern(800, 32), "after a dropped one");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn many_datagrams_in_one_list() {
    const N: usize = 32;
    const SIZE: usize = 200;
    let p = UdPair::new();
    let src = p.buf(N * SIZE);
    let dst = p.buf(N * (GRH + SIZE));
    let data = pattern(900, N * SIZE);
    src.write(0, &data);
    for i in 0..N {
        let mut rsge = [dst.sge(i * (GRH + SIZE), GRH + SIZE)];
        let mut rwr = recv_wr(i as u64, &mut rsge);
        // SAFETY: `dst` outlives the polls below.
        unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
    }
    let mut sges: Vec<_> = (0..N).map(|i| src.sge(i * SIZE, SIZE)).collect();
    let mut wrs: Vec<_> = sges
        .iter_mut()
        .enumerate()
        .map(|(i, sge)| p.ud_send(i as u64, std::slice::from_mut(sge), &p.b, QKEY))
        .collect();
    for i in 1..N {
        let next: *mut _ = &mut wrs[i];
        wrs[i - 1].next = next;
    }
    // SAFETY: `src` outlives the polls below.
    unsafe { p.a.post_send(&mut wrs[0]) }.expect("post_send list");
    let sends = poll_exactly(&p.cq_a, N, "32 UD sends");
    assert!(sends.iter().all(|wc| wc.is_success()), "{sends:#?}");
    // Loopback on one port does not reorder or lose (no congestion here);
    // a lost datagram fails the test with the bounded wait's message.
    let recvs = poll_exactly(&p.cq_b, N, "32 UD receives");
    for (i, r) in recvs.iter().enumerate() {
        r.result().expect("receive");
        assert_eq!(r.wr_id(), i as u64);
        assert_bytes_eq(
            &dst.read(i * (GRH + SIZE) + GRH, SIZE),
            &data[i * SIZE..(i + 1) * SIZE],
            &format!("datagram {i}"),
        );
    }
}
