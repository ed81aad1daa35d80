//! Every operation end to end, byte for byte: send/receive (with and without
//! immediate data), RDMA write (with and without immediate data) and RDMA
//! read, at sizes from 0 bytes to 4 MiB, blocking and in scopes; multi-SGE
//! requests; remote sub-ranges; a channel in completion-event mode.

mod common;

use common::*;
use rdma_safe::{
    work::WcOpcode, Channel, Error, ReadWorkRequest, ReceiveWorkRequest, RemoteMemoryRegion,
    SendWorkRequest, WriteWorkRequest,
};

/// Immediate value for a test tag and size.
fn imm(tag: &str, len: usize) -> u32 {
    seed(tag, len) as u32
}

/// One two-sided transfer of `len` bytes from `a` to `b`, checked byte for
/// byte. `scoped`: both sides post in scopes; otherwise both use the blocking
/// calls (the receive on a second thread).
fn send_receive(a: &mut Channel, b: &mut Channel, len: usize, with_imm: bool, scoped: bool) {
    let pd = a.pd().clone();
    let tag = format!("send imm={with_imm} scoped={scoped}");
    let tx = registered(&pd, pattern(seed(&tag, len), len.max(1)));
    let mut rx = registered(&pd, vec![FILL; len + CANARY]);
    let immediate = with_imm.then(|| imm(&tag, len));

    let (sent, got) = if scoped {
        b.scope(|sb| {
            let mut scatter = [rx.scatter(..)];
            let recv = sb.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            let sent = a
                .scope(|sa| {
                    let g = gather(&tx, 0..len);
                    let mut wr = SendWorkRequest::new(&g);
                    if let Some(i) = immediate {
                        wr = wr.with_immediate(i);
                    }
                    let send = sa.post_send(wr)?;
                    assert_eq!(sa.outstanding(), 1);
                    send.wait()
                })
                .expect("scoped send");
            Ok::<_, Error>((sent, recv.wait()?))
        })
        .expect("scoped receive")
    } else {
        std::thread::scope(|t| {
            let receiver = t.spawn(|| b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)])));
            let g = gather(&tx, 0..len);
            let mut wr = SendWorkRequest::new(&g);
            if let Some(i) = immediate {
                wr = wr.with_immediate(i);
            }
            let sent = a.send(wr).expect("blocking send");
            let got = receiver
                .join()
                .expect("receiver thread")
                .expect("blocking receive");
            (sent, got)
        })
    };

    assert_eq!(sent.bytes(), len, "{tag} len {len}: sender's byte count");
    assert_eq!(sent.opcode(), WcOpcode::Send);
    assert_eq!(got.bytes(), len, "{tag} len {len}: receiver's byte count");
    assert_eq!(got.opcode(), WcOpcode::Recv);
    assert_eq!(got.immediate(), immediate, "{tag} len {len}: immediate");
    assert_bytes(&rx[..len], &tx[..len], &format!("{tag} len {len}"));
    assert_untouched(&rx[len..], &format!("{tag} len {len}: past the message"));
}

/// One RDMA write of `len` bytes from `a` into a buffer of `b`'s, with the
/// immediate variant consuming an empty receive at `b`.
fn write(a: &mut Channel, b: &mut Channel, len: usize, with_imm: bool, scoped: bool) {
    let pd = a.pd().clone();
    let tag = format!("write imm={with_imm} scoped={scoped}");
    let src = registered(&pd, pattern(seed(&tag, len), len.max(1)));
    let mut target = vec![FILL; len + CANARY];
    // SAFETY: `target` is declared before and so outlives `target_mr`; Rust
    // reads it only after the write has completed.
    let target_mr = unsafe { shared_mr(&pd, &mut target) };
    let remote = target_mr.remote();
    let immediate = with_imm.then(|| imm(&tag, len));

    let post_write = |a: &mut Channel| {
        let g = gather(&src, 0..len);
        let mut wr = WriteWorkRequest::new(&g, remote);
        if let Some(i) = immediate {
            wr = wr.with_immediate(i);
        }
        if scoped {
            a.scope(|s| s.post_write(wr)?.wait()).expect("scoped write")
        } else {
            a.write(wr).expect("blocking write")
        }
    };

    let written = if with_imm {
        // The immediate consumes a receive; its scatter list may be empty.
        let (written, got) = b
            .scope(|sb| {
                let recv = sb.post_receive(ReceiveWorkRequest::new(&mut []))?;
                let written = post_write(a);
                Ok::<_, Error>((written, recv.wait()?))
            })
            .expect("receive for the immediate");
        assert_eq!(got.opcode(), WcOpcode::RecvRdmaWithImm, "{tag} len {len}");
        assert_eq!(got.immediate(), immediate, "{tag} len {len}: immediate");
        assert_eq!(got.bytes(), len, "{tag} len {len}: bytes reported");
        written
    } else {
        post_write(a)
    };
    assert_eq!(written.bytes(), len);
    assert_eq!(written.opcode(), WcOpcode::RdmaWrite);
    drop(target_mr);
    assert_bytes(&target[..len], &src[..len], &format!("{tag} len {len}"));
    assert_untouched(&target[len..], &format!("{tag} len {len}: past the write"));
}

/// One RDMA read of `len` bytes by `a` from a buffer of `b`'s.
fn read(a: &mut Channel, len: usize, scoped: bool) {
    let pd = a.pd().clone();
    let tag = format!("read scoped={scoped}");
    let mut src = pattern(seed(&tag, len), len.max(1));
    // SAFETY: `src` outlives `src_mr`; Rust only reads it while peers may
    // read it too, and nobody writes it.
    let src_mr = unsafe { shared_mr(&pd, &mut src) };
    let remote = src_mr.remote().slice(0, len as u64).expect("sub-range");
    let mut dst = registered(&pd, vec![FILL; len + CANARY]);

    // Scatter lists are invariant in their data lifetime, so a scoped read
    // builds its list inside the scope closure.
    let done = if scoped {
        a.scope(|s| {
            let mut list = scatter(&mut dst, 0..len);
            let wr = ReadWorkRequest::new(&mut list, remote);
            assert_eq!(wr.len(), len);
            s.post_read(wr)?.wait()
        })
        .expect("scoped read")
    } else {
        let mut list = scatter(&mut dst, 0..len);
        a.read(ReadWorkRequest::new(&mut list, remote))
            .expect("blocking read")
    };
    assert_eq!(done.bytes(), len);
    assert_eq!(done.opcode(), WcOpcode::RdmaRead);
    assert_bytes(&dst[..len], &src[..len], &format!("{tag} len {len}"));
    assert_untouched(&dst[len..], &format!("{tag} len {len}: past the read"));
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_receive_all_sizes_blocking_and_scoped() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    for len in SIZES {
        for scoped in [false, true] {
            send_receive(&mut a, &mut b, len, false, scoped);
        }
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_with_immediate_all_sizes() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    for len in SIZES {
        for scoped in [false, true] {
            send_receive(&mut a, &mut b, len, true, scoped);
        }
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_all_sizes_blocking_and_scoped() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    for len in SIZES {
        for scoped in [false, true] {
            write(&mut a, &mut b, len, false, scoped);
        }
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_with_immediate_all_sizes() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    for len in SIZES {
        for scoped in [false, true] {
            write(&mut a, &mut b, len, true, scoped);
        }
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn read_all_sizes_blocking_and_scoped() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    for len in SIZES {
        for scoped in [false, true] {
            read(&mut a, len, scoped);
        }
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn zero_length_elements_carry_zero_bytes() {
    // Zero-length SGEs (as opposed to empty lists) inside registered buffers.
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("zero sge", 0), 16));
    let mut rx = registered(&pd, vec![FILL; 16]);
    let got = b
        .scope(|s| {
            let mut scatter = [rx.scatter(..0)];
            let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            let sent = a.send(SendWorkRequest::new(&[tx.gather(5..5)]))?;
            assert_eq!(sent.bytes(), 0);
            recv.wait()
        })
        .expect("zero-length send/receive");
    assert_eq!(got.bytes(), 0);
    assert_untouched(&rx, "zero-byte receive");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

/// Split points: three gather pieces over two regions, two scatter pieces
/// over two other regions, none on a power of two.
const TOTAL: usize = 10_007;
const G1: usize = 4_099;
const G2: usize = 4_100; // one byte: the middle piece is tiny
const S1: usize = 3_333;

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn multi_sge_send_gather_three_scatter_two() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let data = pattern(seed("multi-sge send", TOTAL), TOTAL);
    let tx1 = registered(&pd, data[..G1].to_vec());
    let tx2 = registered(&pd, data[G1..].to_vec());
    let mut rx1 = registered(&pd, vec![FILL; S1]);
    let mut rx2 = registered(&pd, vec![FILL; TOTAL - S1 + CANARY]);

    let got = b
        .scope(|s| {
            let mut scatter = [rx1.scatter(..), rx2.scatter(..)];
            let wr = ReceiveWorkRequest::new(&mut scatter);
            assert_eq!(wr.len(), TOTAL + CANARY);
            let recv = s.post_receive(wr)?;
            let g = [tx1.gather(..), tx2.gather(..G2 - G1), tx2.gather(G2 - G1..)];
            let wr = SendWorkRequest::new(&g).with_immediate(3);
            assert_eq!(wr.len(), TOTAL);
            a.send(wr)?;
            recv.wait()
        })
        .expect("multi-SGE send/receive");
    assert_eq!(got.bytes(), TOTAL);
    assert_eq!(got.immediate(), Some(3));
    assert_bytes(&rx1, &data[..S1], "first scatter piece");
    assert_bytes(&rx2[..TOTAL - S1], &data[S1..], "second scatter piece");
    assert_untouched(&rx2[TOTAL - S1..], "past the message");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn multi_sge_write_and_read() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let data = pattern(seed("multi-sge write", TOTAL), TOTAL);
    let tx1 = registered(&pd, data[..G1].to_vec());
    let tx2 = registered(&pd, data[G1..].to_vec());
    let mut exposed = vec![FILL; TOTAL + CANARY];
    // SAFETY: `exposed` outlives `exposed_mr`; Rust reads it only after the
    // write and read completed.
    let exposed_mr = unsafe { shared_mr(&pd, &mut exposed) };
    let remote = exposed_mr.remote();

    let g = [tx1.gather(..), tx2.gather(..G2 - G1), tx2.gather(G2 - G1..)];
    let written = a
        .scope(|s| s.post_write(WriteWorkRequest::new(&g, remote))?.wait())
        .expect("multi-SGE write");
    assert_eq!(written.bytes(), TOTAL);

    // Read it back into two pieces of two regions.
    let mut rx1 = registered(&pd, vec![FILL; S1]);
    let mut rx2 = registered(&pd, vec![FILL; TOTAL - S1 + CANARY]);
    let back = a
        .read(ReadWorkRequest::new(
            &mut [rx1.scatter(..), rx2.scatter(..TOTAL - S1)],
            remote,
        ))
        .expect("multi-SGE read");
    assert_eq!(back.bytes(), TOTAL);
    drop(exposed_mr);
    assert_bytes(&exposed[..TOTAL], &data, "written");
    assert_untouched(&exposed[TOTAL..], "past the write");
    assert_bytes(&rx1, &data[..S1], "first read piece");
    assert_bytes(&rx2[..TOTAL - S1], &data[S1..], "second read piece");
    assert_untouched(&rx2[TOTAL - S1..], "past the read");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn remote_sub_ranges_touch_exactly_their_bytes() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    const LEN: usize = 8192;
    let before = pattern(seed("sub-range before", LEN), LEN);
    let mut exposed = before.clone();
    // SAFETY: `exposed` outlives `exposed_mr`; Rust reads it only after the
    // operations completed.
    let exposed_mr = unsafe { shared_mr(&pd, &mut exposed) };
    // Hand the region over as a peer would receive it.
    let remote = RemoteMemoryRegion::from_bytes(&exposed_mr.remote().to_bytes()).unwrap();
    assert_eq!(remote, exposed_mr.remote());

    let src = registered(&pd, pattern(seed("sub-range src", 100), 100));
    let sub = remote.slice(1234, 100).expect("in bounds");
    assert_eq!(sub.address(), remote.address() + 1234);
    a.write(WriteWorkRequest::new(&[src.gather(..)], sub))
        .expect("write to a sub-range");
    // A write shorter than the sub-range, at its start.
    let tail = remote.slice_from(LEN as u64 - 10).expect("in bounds");
    a.write(WriteWorkRequest::new(&[src.gather(..3)], tail))
        .expect("write to the last 10 bytes");

    let mut back = registered(&pd, vec![FILL; 64 + CANARY]);
    a.read(ReadWorkRequest::new(
        &mut [back.scatter(..64)],
        remote.slice(5000, 64).unwrap(),
    ))
    .expect("read from a sub-range");

    drop(exposed_mr);
    let mut expected = before.clone();
    expected[1234..1334].copy_from_slice(&src);
    expected[LEN - 10..LEN - 7].copy_from_slice(&src[..3]);
    assert_bytes(&exposed, &expected, "exactly the sub-ranges changed");
    assert_bytes(&back[..64], &before[5000..5064], "read of a sub-range");
    assert_untouched(&back[64..], "past the read");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn completion_event_mode_channels_transfer() {
    let pd = pd();
    let (mut a, mut b) = pair_with(&pd, |c| c.completion_events(true));
    for len in [0, 1, 4096, 65536 + 13] {
        send_receive(&mut a, &mut b, len, true, true);
        send_receive(&mut a, &mut b, len, false, false);
        write(&mut a, &mut b, len, true, false);
        read(&mut a, len, true);
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn inline_sends_and_writes() {
    let pd = pd();
    let (mut a, mut b) = pair_with(&pd, |c| c.max_inline_data(64));
    let granted = a.capabilities().max_inline_data as usize;
    assert!(granted >= 64, "device granted {granted} inline bytes");
    // Small payloads go inline by default; the last one is too large to.
    for len in [1, 7, 64, 65] {
        send_receive(&mut a, &mut b, len, false, true);
        write(&mut a, &mut b, len, false, false);
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn memory_region_reports_its_range() {
    let pd = pd();
    let buf = registered(&pd, vec![0u8; 4096]);
    let mr = buf.region();
    assert_eq!(mr.address(), buf.as_ptr() as usize);
    assert_eq!(mr.length(), 4096);
    assert!(mr.encloses_slice(&buf));
    assert!(mr.encloses_slice(&buf[4096..]));
    assert!(mr.encloses_slice(&buf[100..200]));
    let other = vec![0u8; 16];
    assert!(!mr.encloses_slice(&other));
    assert!(!mr.encloses(buf.as_ptr(), 4097));
    assert!(!mr.encloses(buf.as_ptr().wrapping_sub(1), 1));
    let remote = mr.remote();
    assert_eq!(remote.address(), mr.address() as u64);
    assert_eq!(remote.length(), 4096);
    assert_eq!(remote.rkey(), mr.rkey());
    let _ = format!("{mr:?} {remote:?}");
}
