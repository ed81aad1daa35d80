//! Batched posting: several sends or RDMA writes in one `ibv_post_send`
//! call with only the last one signaled, completed as one unit.

mod common;

use common::*;
use rdma_safe::{
    error::Operation, work::WcStatus, Error, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest,
};
use std::time::Duration;

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn write_batch_lands_every_piece() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let n = 24;
    let piece = 1000;
    let src = registered(&pd, pattern(seed("write-batch", n), n * piece));
    let mut dst = vec![FILL; n * piece + CANARY];
    // SAFETY: `dst` outlives the region (dropped below, before `dst` is
    // read) and is not touched from Rust while the peer may write it.
    let dst_mr = unsafe { shared_mr(&pd, &mut dst) };
    let remote = dst_mr.remote();
    // Written in reverse piece order, so each request's target differs.
    let gathers: Vec<_> = (0..n)
        .map(|i| [src.gather(i * piece..(i + 1) * piece)])
        .collect();
    let mut wrs: Vec<_> = (0..n)
        .rev()
        .map(|i| {
            WriteWorkRequest::new(
                &gathers[i],
                remote.slice((i * piece) as u64, piece as u64).unwrap(),
            )
        })
        .collect();
    let done = a
        .scope(|s| s.post_batch(&mut wrs)?.wait())
        .expect("batch of writes");
    assert_eq!(done.bytes(), n * piece);
    // Blocking form (rewrites the same bytes).
    let done = a.run_batch(&mut wrs[..3]).expect("blocking batch");
    assert_eq!(done.bytes(), 3 * piece);
    drop(dst_mr);
    assert_bytes(&dst[..n * piece], &src, "written pieces");
    assert_untouched(&dst[n * piece..], "bytes after the target");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
    assert_eq!(a.totals().0, n as u64 + 3, "a batch counts as its requests");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_batch_delivers_messages_in_order() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let n = 16;
    let size = 333;
    let src = registered(&pd, pattern(seed("send-batch", n), n * size));
    let mut dst = registered(&pd, vec![FILL; n * size]);
    b.scope(|sb| {
        let mut recvs = Vec::new();
        for sc in &mut scatter_chunks(&mut dst, size) {
            recvs.push(sb.post_receive(ReceiveWorkRequest::new(sc))?);
        }
        let gathers: Vec<_> = (0..n)
            .map(|i| [src.gather(i * size..(i + 1) * size)])
            .collect();
        let mut wrs: Vec<_> = (0..n)
            .map(|i| SendWorkRequest::new(&gathers[i]).with_immediate(i as u32))
            .collect();
        let sent = a.run_batch(&mut wrs)?;
        assert_eq!(sent.bytes(), n * size);
        for (i, r) in recvs.into_iter().enumerate() {
            let got = r.wait()?;
            assert_eq!(got.bytes(), size);
            assert_eq!(
                got.immediate(),
                Some(i as u32),
                "message {i} arrives in order"
            );
        }
        Ok::<_, Error>(())
    })
    .expect("batch of sends");
    assert_bytes(&dst, &src, "received messages");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn error_in_the_middle_of_a_batch_fails_the_batch() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let src = registered(&pd, pattern(seed("batch-error", 1), 4096));
    let mut dst = vec![FILL; 4096];
    // SAFETY: as in `write_batch_lands_every_piece`.
    let dst_mr = unsafe { shared_mr(&pd, &mut dst) };
    let good = dst_mr.remote();
    let bad = rdma_safe::RemoteMemoryRegion::new(
        good.address(),
        good.length(),
        good.rkey() ^ 0x5a5a_0000,
    );
    let g = [src.gather(..)];
    let mut wrs = [
        WriteWorkRequest::new(&g, good),
        WriteWorkRequest::new(&g, bad),
        WriteWorkRequest::new(&g, good),
        WriteWorkRequest::new(&g, good),
    ];
    match a.run_batch(&mut wrs) {
        Err(Error::WorkCompletion {
            operation: Operation::Write,
            status,
            ..
        }) => {
            assert_eq!(
                status,
                WcStatus::RemoteAccessError,
                "the batch reports its first failure"
            )
        }
        other => panic!("expected the batch to fail with a remote access error, got {other:?}"),
    }
    assert!(!a.is_usable());
    assert_eq!(a.outstanding(), 0);
    let (posted, completed) = a.totals();
    assert!(
        completed <= posted,
        "{completed} completions for {posted} posts"
    );
    drop(dst_mr);
    drop(b);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn batch_larger_than_the_send_queue_is_refused_before_posting() {
    let pd = pd();
    let (mut a, b) = pair_with(&pd, |c| c.send_depth(8));
    let src = registered(&pd, vec![1u8; 64]);
    let mut dst = vec![0u8; 64];
    // SAFETY: as in `write_batch_lands_every_piece`.
    let dst_mr = unsafe { shared_mr(&pd, &mut dst) };
    let g = [src.gather(..)];
    let mut too_many =
        vec![WriteWorkRequest::new(&g, dst_mr.remote()); a.capabilities().max_send_wr as usize + 1];
    match a.run_batch(&mut too_many) {
        Err(Error::Post {
            operation: Operation::Write,
            ..
        }) => {}
        other => panic!("expected a post error, got {other:?}"),
    }
    assert!(a.is_usable(), "a refused batch leaves the channel usable");
    assert!(
        a.run_batch(&mut [] as &mut [WriteWorkRequest]).is_err(),
        "an empty batch is refused"
    );
    a.run_batch(&mut too_many[..4]).expect("a batch that fits");
    assert_quiescent(&a, "a");
    drop(dst_mr);
    drop(b);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn read_batch_fills_every_chunk() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let n = 20;
    let piece = 777;
    let mut exposed = pattern(seed("read-batch", n), n * piece);
    let expected = exposed.clone();
    // SAFETY: `exposed` outlives the region (dropped below) and is not
    // written from Rust while the peer may read it.
    let exposed_mr = unsafe { shared_mr(&pd, &mut exposed) };
    let remote = exposed_mr.remote();
    let mut dst = registered(&pd, vec![FILL; n * piece + CANARY]);
    {
        let (dst_mr, bytes) = dst.split_mut();
        let (body, _canary) = bytes.split_at_mut(n * piece);
        let mut elems: Vec<[rdma_safe::ScatterElement<'_>; 1]> = body
            .chunks_mut(piece)
            .map(|c| [dst_mr.scatter_element(c)])
            .collect();
        // Chunk i reads remote piece n-1-i.
        let mut reqs: Vec<rdma_safe::ReadWorkRequest<'_, '_>> = elems
            .iter_mut()
            .enumerate()
            .map(|(i, e)| {
                let from = ((n - 1 - i) * piece) as u64;
                rdma_safe::ReadWorkRequest::new(e, remote.slice(from, piece as u64).unwrap())
            })
            .collect();
        let done = a.run_batch(&mut reqs).expect("batch of reads");
        assert_eq!(done.bytes(), n * piece);
    }
    for i in 0..n {
        let from = (n - 1 - i) * piece;
        assert_bytes(
            &dst[i * piece..(i + 1) * piece],
            &expected[from..from + piece],
            "read chunk",
        );
    }
    assert_untouched(&dst[n * piece..], "bytes after the chunks");
    assert!(
        a.run_batch(&mut [] as &mut [rdma_safe::ReadWorkRequest])
            .is_err(),
        "an empty batch is refused"
    );
    assert_quiescent(&a, "a");
    drop(exposed_mr);
    drop(b);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn receive_batch_completes_each_receive_in_order() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    // Messages of different sizes, so each handle's byte count tells which
    // receive took which message.
    let sizes: Vec<usize> = (0..12).map(|i| 100 + 37 * i).collect();
    let total: usize = sizes.iter().sum();
    let src = registered(&pd, pattern(seed("recv-batch", sizes.len()), total));
    let slot = *sizes.iter().max().unwrap();
    let mut dst = registered(&pd, vec![FILL; slot * sizes.len()]);
    let starts: Vec<usize> = sizes
        .iter()
        .scan(0, |at, &n| {
            let start = *at;
            *at += n;
            Some(start)
        })
        .collect();
    b.scope(|sb| {
        let mut lists = scatter_chunks(&mut dst, slot);
        let mut wrs: Vec<_> = lists
            .iter_mut()
            .map(|l| ReceiveWorkRequest::new(l))
            .collect();
        let recvs = sb.post_receive_batch(&mut wrs)?;
        assert_eq!(recvs.len(), sizes.len(), "one handle per receive");
        let gathers: Vec<_> = sizes
            .iter()
            .zip(&starts)
            .map(|(&n, &at)| [src.gather(at..at + n)])
            .collect();
        let mut sends: Vec<_> = gathers
            .iter()
            .enumerate()
            .map(|(i, g)| SendWorkRequest::new(g).with_immediate(1000 + i as u32))
            .collect();
        a.run_batch(&mut sends)?;
        for (i, r) in recvs.into_iter().enumerate() {
            let got = r.wait()?;
            assert_eq!(got.bytes(), sizes[i], "receive {i} took message {i}");
            assert_eq!(got.immediate(), Some(1000 + i as u32));
        }
        Ok::<_, Error>(())
    })
    .expect("batch of receives");
    for (i, (&n, &at)) in sizes.iter().zip(&starts).enumerate() {
        let chunk = &dst[i * slot..(i + 1) * slot];
        assert_bytes(&chunk[..n], &src[at..at + n], &format!("message {i}"));
        assert_untouched(&chunk[n..], &format!("after message {i}"));
    }
    assert!(
        b.scope(|s| s.post_receive_batch(&mut []).map(|h| h.len()))
            .is_err(),
        "an empty batch is refused"
    );
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
    assert_eq!(b.totals(), (12, 12), "each receive counts once");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn receive_batch_beyond_the_receive_queue_keeps_what_was_posted() {
    let pd = pd();
    let (mut a, mut b) = pair_with(&pd, |c| c.recv_depth(8).timeout(Duration::from_secs(5)));
    // Providers round queues up (rxe to a power of two), so the queue may
    // hold more than `max_recv_wr`: ask for far more than that and find out
    // how many the device took.
    let n = b.capabilities().max_recv_wr as usize * 4 + 8;
    let size = 64;
    let mut dst = registered(&pd, vec![FILL; n * size]);
    let src = registered(&pd, pattern(seed("recv-batch-full", n), n * size));
    let mut taken = 0;
    let refused = b.scope(|sb| {
        let mut lists = scatter_chunks(&mut dst, size);
        let mut wrs: Vec<_> = lists
            .iter_mut()
            .map(|l| ReceiveWorkRequest::new(l))
            .collect();
        let err = match sb.post_receive_batch(&mut wrs) {
            Err(e) => e,
            Ok(h) => panic!("{n} receives fit a queue of 8: {} handles", h.len()),
        };
        // The receives that fit are posted, without handles: the scope must
        // still wait for them. Fill them from the peer.
        taken = sb.outstanding();
        assert!(taken >= 8 && taken < n, "{taken} of {n} receives posted");
        let gathers: Vec<_> = (0..taken)
            .map(|i| [src.gather(i * size..(i + 1) * size)])
            .collect();
        let mut sends: Vec<_> = gathers.iter().map(|g| SendWorkRequest::new(g)).collect();
        a.run_batch(&mut sends)?;
        Ok::<_, Error>(err)
    });
    match refused {
        Ok(Error::Post {
            operation: Operation::Receive,
            ..
        }) => {}
        other => panic!("expected a receive post error, got {other:?}"),
    }
    assert_bytes(
        &dst[..taken * size],
        &src[..taken * size],
        "messages in the posted receives",
    );
    assert_untouched(&dst[taken * size..], "buffers of the refused receives");
    assert!(
        b.is_usable(),
        "a full receive queue leaves the channel usable"
    );
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
    assert_eq!(
        b.totals(),
        (taken as u64, taken as u64),
        "only the posted receives count"
    );
}
