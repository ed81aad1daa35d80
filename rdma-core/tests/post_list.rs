//! Lists of typed work requests on a real device: one post call for a list
//! of mixed operations, and a list that fails part-way.

mod common;

use common::{assert_bytes_eq, pattern, poll_exactly, Buf, TestDevice};
use rdma_core::{
    AccessFlags, CompQueue, Error, QueuePair, RecvRequest, SendOpcode, SendRequest, WcOpcode,
};

/// An RC pair on one device whose QPs and buffers allow atomics too.
struct AtomicPair {
    dev: TestDevice,
    cq_a: CompQueue,
    cq_b: CompQueue,
    a: QueuePair,
    b: QueuePair,
}

fn access() -> AccessFlags {
    Buf::full_access() | AccessFlags::REMOTE_ATOMIC
}

impl AtomicPair {
    fn new() -> AtomicPair {
        let dev = TestDevice::open();
        let cq_a = dev.cq(None);
        let cq_b = dev.cq(None);
        let a = dev.rc_qp(&cq_a);
        let b = dev.rc_qp(&cq_b);
        dev.connect_with_access(&a, &b, access(), |_| {});
        AtomicPair {
            dev,
            cq_a,
            cq_b,
            a,
            b,
        }
    }
    fn buf(&self, len: usize) -> Buf {
        Buf::new(&self.dev.pd, len, access())
    }
}

fn u64_at(buf: &Buf, offset: usize) -> u64 {
    u64::from_ne_bytes(buf.read(offset, 8).try_into().unwrap())
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_mixed_list_posts_with_one_call() {
    let p = AtomicPair::new();
    let src = p.buf(4096);
    let dst = p.buf(4096);
    let data = pattern(41, 4096);
    src.write(0, &data);
    dst.fill(0xEE);
    let remote = pattern(42, 256);
    dst.write(3200, &remote);
    dst.write(3584, &1000u64.to_ne_bytes());
    dst.write(3592, &77u64.to_ne_bytes());
    src.write(2100, &[0xEE; 316]);

    // B: three receives in one list (two scatter SGEs, one, none).
    let r0 = [dst.entry(0, 100), dst.entry(256, 150)];
    let r1 = [dst.entry(512, 300)];
    let mut recvs = [
        RecvRequest::new(100, &r0),
        RecvRequest::new(101, &r1),
        RecvRequest::new(102, &[]),
    ];
    // SAFETY: `dst` outlives the polls below; nothing else touches the ranges.
    unsafe { p.b.post_recv_list(&mut recvs) }.expect("post_recv_list");

    // A: seven operations of five kinds in one list.
    let g0 = [src.entry(0, 100), src.entry(200, 150)];
    let g1 = [src.entry(400, 300)];
    let g2 = [src.entry(1000, 1000)];
    let g3 = [src.entry(2000, 64)];
    let s4 = [src.entry(2100, 256)];
    let s5 = [src.entry(2400, 8)];
    let s6 = [src.entry(2408, 8)];
    let mut sends = [
        SendRequest::send(0, &g0).signaled(),
        SendRequest::send_with_imm(1, &g1, 0xCAFE_BABE).signaled(),
        SendRequest::rdma_write(2, &g2, dst.addr(2048), dst.rkey()).signaled(),
        SendRequest::rdma_write_with_imm(3, &g3, dst.addr(3100), dst.rkey(), 0x1234).signaled(),
        SendRequest::rdma_read(4, &s4, dst.addr(3200), dst.rkey()).signaled(),
        SendRequest::atomic_fetch_add(5, &s5, dst.addr(3584), dst.rkey(), 5).signaled(),
        SendRequest::atomic_cmp_swap(6, &s6, dst.addr(3592), dst.rkey(), 77, 99).signaled(),
    ];
    assert_eq!(sends[6].opcode(), SendOpcode::AtomicCmpSwap);
    // SAFETY: `src` and `dst` outlive the polls below; the gathered ranges
    // are not written and the scattered ones not touched until then.
    unsafe { p.a.post_send_list(&mut sends) }.expect("post_send_list");

    let done = poll_exactly(&p.cq_a, 7, "the list's completions");
    let want = [
        WcOpcode::Send,
        WcOpcode::Send,
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaRead,
        WcOpcode::FetchAdd,
        WcOpcode::CompareSwap,
    ];
    for (i, wc) in done.iter().enumerate() {
        wc.result().unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!((wc.wr_id(), wc.opcode()), (i as u64, want[i]), "{wc:?}");
    }
    let got = poll_exactly(&p.cq_b, 3, "the receives");
    for wc in &got {
        wc.result().unwrap_or_else(|e| panic!("{e}"));
    }
    let summary: Vec<_> = got
        .iter()
        .map(|wc| (wc.wr_id(), wc.opcode(), wc.byte_len(), wc.imm_data()))
        .collect();
    assert_eq!(
        summary,
        [
            (100, WcOpcode::Recv, 250, None),
            (101, WcOpcode::Recv, 300, Some(0xCAFE_BABE)),
            (102, WcOpcode::RecvRdmaWithImm, 64, Some(0x1234)),
        ]
    );

    // Byte for byte, and nothing written beside the targets.
    let gathered: Vec<u8> = [&data[0..100], &data[200..350]].concat();
    let scattered: Vec<u8> = [dst.read(0, 100), dst.read(256, 150)].concat();
    assert_bytes_eq(&scattered, &gathered, "send over two SGEs");
    assert_bytes_eq(&dst.read(100, 156), &[0xEE; 156], "gap between SGEs");
    assert_bytes_eq(&dst.read(406, 106), &[0xEE; 106], "after the scatter");
    assert_bytes_eq(&dst.read(512, 300), &data[400..700], "send with imm");
    assert_bytes_eq(&dst.read(2048, 1000), &data[1000..2000], "RDMA write");
    assert_bytes_eq(&dst.read(3048, 52), &[0xEE; 52], "after the write");
    assert_bytes_eq(&dst.read(3100, 64), &data[2000..2064], "write with imm");
    assert_bytes_eq(&src.read(2100, 256), &remote, "RDMA read");
    assert_bytes_eq(&src.read(2356, 44), &[0xEE; 44], "after the read");
    assert_eq!(
        u64_at(&src, 2400),
        1000,
        "fetch-and-add returns the old value"
    );
    assert_eq!(u64_at(&dst, 3584), 1005, "fetch-and-add adds");
    assert_eq!(
        u64_at(&src, 2408),
        77,
        "compare-and-swap returns the old value"
    );
    assert_eq!(u64_at(&dst, 3592), 99, "compare-and-swap swaps on equality");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_list_reports_how_many_requests_were_posted() {
    let p = AtomicPair::new();
    let max_sge = p.a.capabilities().max_send_sge as usize;
    let src = p.buf(4096);
    let dst = p.buf(4096);
    let data = pattern(43, 4096);
    src.write(0, &data);
    dst.fill(0xEE);

    let r0 = [dst.entry(0, 512)];
    let r1 = [dst.entry(512, 512)];
    let mut recvs = [RecvRequest::new(10, &r0), RecvRequest::new(11, &r1)];
    // SAFETY: `dst` outlives the polls below.
    unsafe { p.b.post_recv_list(&mut recvs) }.expect("post_recv_list");

    let g0 = [src.entry(0, 200)];
    let g1 = [src.entry(200, 300)];
    let too_many: Vec<_> = (0..=max_sge).map(|i| src.entry(1024 + i * 8, 8)).collect();
    let g3 = [src.entry(600, 10)];
    let mut sends = [
        SendRequest::send(0, &g0).signaled(),
        SendRequest::send(1, &g1).signaled(),
        SendRequest::send(2, &too_many).signaled(),
        SendRequest::send(3, &g3).signaled(),
    ];
    // SAFETY: `src` and `dst` outlive the polls below.
    let err = unsafe { p.a.post_send_list(&mut sends) }
        .expect_err(&format!("a send with {} SGEs (max {max_sge})", max_sge + 1));
    assert_eq!(
        (err.verb(), err.posted(), err.requested(), err.errno()),
        ("ibv_post_send", Some(2), 4, libc::EINVAL),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("2 of 4"), "{text}");
    let err: Error = err.into();
    assert_eq!(err.failed_verb(), Some("ibv_post_send"));
    assert_eq!(err.errno(), Some(libc::EINVAL));

    // The two requests before the rejected one were posted and complete.
    let done = poll_exactly(&p.cq_a, 2, "the posted prefix");
    for (i, wc) in done.iter().enumerate() {
        wc.result().unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(wc.wr_id(), i as u64);
    }
    let got = poll_exactly(&p.cq_b, 2, "the receives");
    assert_eq!(
        got.iter()
            .map(|wc| (wc.wr_id(), wc.byte_len(), wc.is_success()))
            .collect::<Vec<_>>(),
        [(10, 200, true), (11, 300, true)]
    );
    assert_bytes_eq(&dst.read(0, 200), &data[0..200], "first send");
    assert_bytes_eq(&dst.read(512, 300), &data[200..500], "second send");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_receive_list_reports_how_many_were_posted() {
    let p = AtomicPair::new();
    let max_sge = p.b.capabilities().max_recv_sge as usize;
    let src = p.buf(1024);
    let dst = p.buf(1024);
    let data = pattern(44, 64);
    src.write(0, &data);
    dst.fill(0xEE);

    let r0 = [dst.entry(0, 64)];
    let too_many: Vec<_> = (0..=max_sge).map(|i| dst.entry(128 + i * 8, 8)).collect();
    let mut recvs = [RecvRequest::new(20, &r0), RecvRequest::new(21, &too_many)];
    // SAFETY: `dst` outlives the polls below.
    let err = unsafe { p.b.post_recv_list(&mut recvs) }.expect_err("too many receive SGEs");
    assert_eq!(
        (err.verb(), err.posted(), err.requested(), err.errno()),
        ("ibv_post_recv", Some(1), 2, libc::EINVAL),
        "{err}"
    );

    // The first receive was posted: a send lands in it.
    let g = [src.entry(0, 64)];
    let mut send = SendRequest::send(7, &g).signaled();
    // SAFETY: `src` outlives the poll below.
    unsafe { p.a.post_send_list(std::slice::from_mut(&mut send)) }.expect("post_send_list");
    let wc = poll_exactly(&p.cq_a, 1, "the send")[0];
    wc.result().expect("send");
    let wc = poll_exactly(&p.cq_b, 1, "the receive")[0];
    assert_eq!((wc.wr_id(), wc.byte_len()), (20, 64), "{wc:?}");
    assert_bytes_eq(&dst.read(0, 64), &data, "received");
}
