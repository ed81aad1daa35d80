//! Reliable connected (RC) data path on a real device: two QPs of one device
//! connected to each other (RoCE loopback), raw work requests posted with the
//! `unsafe` post verbs, data checked byte for byte.

mod common;

use common::{
    assert_bytes_eq, pattern, poll_exactly, poll_success, rdma_wr, recv_wr, send_wr, set_imm, Buf,
    RcPair,
};
use rdma_core::sys::ibv_wr_opcode as Op;
use rdma_core::WcOpcode;

/// Message sizes: tiny, odd, one page, several MTUs plus an odd tail, 1 MiB.
const SIZES: [usize; 5] = [1, 7, 4096, 65536 + 13, 1 << 20];

/// Guard bytes after (and before) each destination range, which must stay
/// untouched.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xE5;

/// A different (odd) buffer offset per size and role, so no transfer starts
/// on an aligned address by accident only.
fn offset(size: usize, role: usize) -> usize {
    GUARD + (size * 13 + role * 29 + 5) % 61
}

/// Destination buffer of `size` bytes at `off`, guards filled.
fn guarded(p: &RcPair, size: usize, off: usize) -> Buf {
    let buf = p.buf(off + size + GUARD);
    buf.fill(GUARD_BYTE);
    buf
}

#[track_caller]
fn assert_guards(buf: &Buf, off: usize, size: usize, what: &str) {
    let before = buf.read(0, off);
    let after = buf.read(off + size, buf.len() - off - size);
    assert!(
        before.iter().chain(&after).all(|&b| b == GUARD_BYTE),
        "{what}: bytes outside the target range were written"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_recv_every_size() {
    let p = RcPair::new();
    for (i, &size) in SIZES.iter().enumerate() {
        let what = format!("send/recv {size} B");
        let (src_off, dst_off) = (offset(size, 0), offset(size, 1));
        let src = p.buf(src_off + size);
        let dst = guarded(&p, size, dst_off);
        let data = pattern(i as u64 + 1, size);
        src.write(src_off, &data);

        let mut rsge = [dst.sge(dst_off, size)];
        let mut rwr = recv_wr(100 + i as u64, &mut rsge);
        // SAFETY: `dst` outlives the poll of this receive's completion.
        unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
        let mut ssge = [src.sge(src_off, size)];
        let mut swr = send_wr(200 + i as u64, Op::IBV_WR_SEND, &mut ssge);
        // SAFETY: `src` outlives the poll of this send's completion.
        unsafe { p.a.post_send(&mut swr) }.expect("post_send");

        let s = poll_success(&p.cq_a, &what);
        assert_eq!((s.wr_id(), s.opcode()), (200 + i as u64, WcOpcode::Send));
        assert_eq!(s.qp_num(), p.a.qp_num());
        let r = poll_success(&p.cq_b, &what);
        assert_eq!((r.wr_id(), r.opcode()), (100 + i as u64, WcOpcode::Recv));
        assert_eq!(r.byte_len() as usize, size, "{what}: byte_len");
        assert_eq!(r.imm_data(), None);
        assert_eq!(r.qp_num(), p.b.qp_num());
        assert_bytes_eq(&dst.read(dst_off, size), &data, &what);
        assert_guards(&dst, dst_off, size, &what);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_with_immediate() {
    let p = RcPair::new();
    for (i, size) in [0usize, 7, 4096, 65536 + 13].into_iter().enumerate() {
        let what = format!("send with imm {size} B");
        let imm = 0xA5A5_0000 | i as u32;
        let src = p.buf(size.max(1));
        let dst = guarded(&p, size, GUARD);
        let data = pattern(50 + i as u64, size);
        src.write(0, &data);

        let mut rsge = [dst.sge(GUARD, size + 1)];
        let mut rwr = recv_wr(i as u64, &mut rsge);
        // SAFETY: `dst` outlives the poll below.
        unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
        let mut ssge = [src.sge(0, size)];
        let sges = if size == 0 {
            &mut [][..]
        } else {
            &mut ssge[..]
        };
        let mut swr = send_wr(i as u64, Op::IBV_WR_SEND_WITH_IMM, sges);
        set_imm(&mut swr, imm);
        // SAFETY: `src` outlives the poll below.
        unsafe { p.a.post_send(&mut swr) }.expect("post_send");

        assert_eq!(poll_success(&p.cq_a, &what).opcode(), WcOpcode::Send);
        let r = poll_success(&p.cq_b, &what);
        assert_eq!(r.opcode(), WcOpcode::Recv);
        assert_eq!(r.imm_data(), Some(imm), "{what}: immediate data");
        assert_eq!(r.byte_len() as usize, size, "{what}: byte_len");
        assert_bytes_eq(&dst.read(GUARD, size), &data, &what);
        assert_guards(&dst, GUARD, size, &what);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_write_every_size() {
    let p = RcPair::new();
    for (i, &size) in SIZES.iter().enumerate() {
        let what = format!("RDMA write {size} B");
        let (src_off, dst_off) = (offset(size, 2), offset(size, 3));
        let src = p.buf(src_off + size);
        let dst = guarded(&p, size, dst_off);
        let data = pattern(100 + i as u64, size);
        src.write(src_off, &data);

        let mut sge = [src.sge(src_off, size)];
        let mut wr = rdma_wr(
            i as u64,
            Op::IBV_WR_RDMA_WRITE,
            &mut sge,
            dst.addr(dst_off),
            dst.rkey(),
        );
        // SAFETY: `src` and `dst` outlive the poll below.
        unsafe { p.a.post_send(&mut wr) }.expect("post_send");
        let wc = poll_success(&p.cq_a, &what);
        assert_eq!((wc.wr_id(), wc.opcode()), (i as u64, WcOpcode::RdmaWrite));
        // An RC write completes after the responder acknowledged it: the data
        // is in place. The responder sees no completion.
        assert_bytes_eq(&dst.read(dst_off, size), &data, &what);
        assert_guards(&dst, dst_off, size, &what);
        poll_exactly(&p.cq_b, 0, &what);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_write_with_immediate_consumes_a_receive() {
    let p = RcPair::new();
    for (i, &size) in SIZES.iter().enumerate() {
        let what = format!("RDMA write with imm {size} B");
        let imm = 0x0102_0300 | i as u32;
        let dst_off = offset(size, 4);
        let src = p.buf(size);
        let dst = guarded(&p, size, dst_off);
        let data = pattern(200 + i as u64, size);
        src.write(0, &data);

        // The receive needs no scatter list: the data goes where the write
        // says; the receive only carries the immediate.
        let mut rwr = recv_wr(1000 + i as u64, &mut []);
        // SAFETY: the request names no memory.
        unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
        let mut sge = [src.sge(0, size)];
        let mut wr = rdma_wr(
            i as u64,
            Op::IBV_WR_RDMA_WRITE_WITH_IMM,
            &mut sge,
            dst.addr(dst_off),
            dst.rkey(),
        );
        set_imm(&mut wr, imm);
        // SAFETY: `src` and `dst` outlive the polls below.
        unsafe { p.a.post_send(&mut wr) }.expect("post_send");

        assert_eq!(poll_success(&p.cq_a, &what).opcode(), WcOpcode::RdmaWrite);
        let r = poll_success(&p.cq_b, &what);
        assert_eq!(r.wr_id(), 1000 + i as u64);
        assert_eq!(r.opcode(), WcOpcode::RecvRdmaWithImm);
        assert_eq!(r.imm_data(), Some(imm), "{what}: immediate data");
        assert_eq!(r.byte_len() as usize, size, "{what}: byte_len");
        assert_bytes_eq(&dst.read(dst_off, size), &data, &what);
        assert_guards(&dst, dst_off, size, &what);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_read_every_size() {
    let p = RcPair::new();
    for (i, &size) in SIZES.iter().enumerate() {
        let what = format!("RDMA read {size} B");
        let (remote_off, local_off) = (offset(size, 5), offset(size, 6));
        let remote = p.buf(remote_off + size);
        let local = guarded(&p, size, local_off);
        let data = pattern(300 + i as u64, size);
        remote.write(remote_off, &data);

        let mut sge = [local.sge(local_off, size)];
        let mut wr = rdma_wr(
            i as u64,
            Op::IBV_WR_RDMA_READ,
            &mut sge,
            remote.addr(remote_off),
            remote.rkey(),
        );
        // SAFETY: `local` and `remote` outlive the poll below.
        unsafe { p.a.post_send(&mut wr) }.expect("post_send");
        let wc = poll_success(&p.cq_a, &what);
        assert_eq!((wc.wr_id(), wc.opcode()), (i as u64, WcOpcode::RdmaRead));
        assert_eq!(wc.byte_len() as usize, size, "{what}: byte_len");
        assert_bytes_eq(&local.read(local_off, size), &data, &what);
        assert_guards(&local, local_off, size, &what);
        poll_exactly(&p.cq_b, 0, &what);
    }
}

/// Lays `lens` out in one buffer with a gap (and an odd offset) between
/// segments; returns the buffer and each segment's offset.
fn scattered(p: &RcPair, lens: &[usize]) -> (Buf, Vec<usize>) {
    let mut offs = Vec::new();
    let mut end = 3;
    for len in lens {
        offs.push(end);
        end += len + 17;
    }
    let buf = p.buf(end);
    buf.fill(GUARD_BYTE);
    (buf, offs)
}

/// Writes `data` across the segments `lens` at `offs` of `buf`.
fn write_segments(buf: &Buf, offs: &[usize], lens: &[usize], data: &[u8]) {
    let mut at = 0;
    for (&off, &len) in offs.iter().zip(lens) {
        buf.write(off, &data[at..at + len]);
        at += len;
    }
}

/// Reads the segments back as one message (`total` bytes: a message may end
/// before the last segment does).
fn read_segments(buf: &Buf, offs: &[usize], lens: &[usize], total: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (&off, &len) in offs.iter().zip(lens) {
        let take = len.min(total - out.len());
        out.extend(buf.read(off, take));
    }
    out
}

/// Gather/scatter splits: (gather lengths, scatter lengths). The scatter side
/// may be larger than the message.
const SPLITS: [(&[usize], &[usize]); 4] = [
    (&[1000, 1, 3095], &[2000, 2096]),
    (&[65536, 7, 4457], &[13, 69987]),
    (&[1, 1, 1], &[2, 1]),
    (&[4096, 4096, 4096], &[10000, 8000]),
];

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_gathers_three_sges_into_two_scatter_sges() {
    let p = RcPair::new();
    for (i, (gather, scatter)) in SPLITS.into_iter().enumerate() {
        let total: usize = gather.iter().sum();
        let what = format!("send {gather:?} -> recv {scatter:?}");
        let data = pattern(400 + i as u64, total);
        let (src, src_offs) = scattered(&p, gather);
        let (dst, dst_offs) = scattered(&p, scatter);
        write_segments(&src, &src_offs, gather, &data);

        let mut rsges: Vec<_> = dst_offs
            .iter()
            .zip(scatter)
            .map(|(&off, &len)| dst.sge(off, len))
            .collect();
        let mut rwr = recv_wr(i as u64, &mut rsges);
        // SAFETY: `dst` outlives the poll below.
        unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
        let mut ssges: Vec<_> = src_offs
            .iter()
            .zip(gather)
            .map(|(&off, &len)| src.sge(off, len))
            .collect();
        let mut swr = send_wr(i as u64, Op::IBV_WR_SEND, &mut ssges);
        // SAFETY: `src` outlives the poll below.
        unsafe { p.a.post_send(&mut swr) }.expect("post_send");

        poll_success(&p.cq_a, &what);
        let r = poll_success(&p.cq_b, &what);
        assert_eq!(r.byte_len() as usize, total, "{what}: byte_len");
        assert_bytes_eq(
            &read_segments(&dst, &dst_offs, scatter, total),
            &data,
            &what,
        );
        // Gaps between segments stay untouched.
        let written: usize = dst_offs.iter().zip(scatter).map(|(_, l)| *l).sum();
        let guard_count = dst
            .read(0, dst.len())
            .iter()
            .filter(|&&b| b == GUARD_BYTE)
            .count();
        assert!(
            guard_count >= dst.len() - written,
            "{what}: bytes between scatter segments were written"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rdma_write_gathers_and_rdma_read_scatters() {
    let p = RcPair::new();
    for (i, (three, _)) in SPLITS.into_iter().enumerate() {
        let total: usize = three.iter().sum();
        let data = pattern(500 + i as u64, total);

        // Write: three local segments into one contiguous remote range.
        let what = format!("RDMA write gathering {three:?}");
        let (src, src_offs) = scattered(&p, three);
        write_segments(&src, &src_offs, three, &data);
        let remote = guarded(&p, total, GUARD);
        let mut sges: Vec<_> = src_offs
            .iter()
            .zip(three)
            .map(|(&off, &len)| src.sge(off, len))
            .collect();
        let mut wr = rdma_wr(
            i as u64,
            Op::IBV_WR_RDMA_WRITE,
            &mut sges,
            remote.addr(GUARD),
            remote.rkey(),
        );
        // SAFETY: `src` and `remote` outlive the poll below.
        unsafe { p.a.post_send(&mut wr) }.expect("post_send");
        poll_success(&p.cq_a, &what);
        assert_bytes_eq(&remote.read(GUARD, total), &data, &what);
        assert_guards(&remote, GUARD, total, &what);

        // Read: the contiguous remote range back into three local segments.
        let what = format!("RDMA read scattering into {three:?}");
        let (dst, dst_offs) = scattered(&p, three);
        let mut sges: Vec<_> = dst_offs
            .iter()
            .zip(three)
            .map(|(&off, &len)| dst.sge(off, len))
            .collect();
        let mut wr = rdma_wr(
            i as u64,
            Op::IBV_WR_RDMA_READ,
            &mut sges,
            remote.addr(GUARD),
            remote.rkey(),
        );
        // SAFETY: `dst` and `remote` outlive the poll below.
        unsafe { p.a.post_send(&mut wr) }.expect("post_send");
        let wc = poll_success(&p.cq_a, &what);
        assert_eq!(wc.byte_len() as usize, total);
        assert_bytes_eq(&read_segments(&dst, &dst_offs, three, total), &data, &what);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn many_requests_in_one_list_complete_in_order() {
    const N: usize = 64;
    const SIZE: usize = 1000;
    let p = RcPair::new();
    let src = p.buf(N * SIZE);
    let dst = p.buf(N * SIZE);
    let data = pattern(600, N * SIZE);
    src.write(0, &data);

    // One linked list of N receives, then one of N sends.
    let mut rsges: Vec<_> = (0..N).map(|i| dst.sge(i * SIZE, SIZE)).collect();
    let mut rwrs: Vec<_> = rsges
        .iter_mut()
        .enumerate()
        .map(|(i, sge)| recv_wr(i as u64, std::slice::from_mut(sge)))
        .collect();
    for i in 1..N {
        let next: *mut _ = &mut rwrs[i];
        rwrs[i - 1].next = next;
    }
    // SAFETY: `dst` and the list outlive the polls below.
    unsafe { p.b.post_recv(&mut rwrs[0]) }.expect("post_recv list");
    let mut ssges: Vec<_> = (0..N).map(|i| src.sge(i * SIZE, SIZE)).collect();
    let mut swrs: Vec<_> = ssges
        .iter_mut()
        .enumerate()
        .map(|(i, sge)| send_wr(i as u64, Op::IBV_WR_SEND, std::slice::from_mut(sge)))
        .collect();
    for i in 1..N {
        let next: *mut _ = &mut swrs[i];
        swrs[i - 1].next = next;
    }
    // SAFETY: `src` outlives the polls below.
    unsafe { p.a.post_send(&mut swrs[0]) }.expect("post_send list");

    let sends = poll_exactly(&p.cq_a, N, "64 sends");
    let recvs = poll_exactly(&p.cq_b, N, "64 receives");
    for (i, (s, r)) in sends.iter().zip(&recvs).enumerate() {
        s.result().expect("send");
        r.result().expect("receive");
        assert_eq!(s.wr_id(), i as u64, "send completions in order");
        assert_eq!(r.wr_id(), i as u64, "receive completions in order");
        assert_eq!(r.byte_len() as usize, SIZE);
    }
    assert_bytes_eq(&dst.read(0, N * SIZE), &data, "64 messages");
}
