//! Prepared batches: send-queue requests checked and built once, posted
//! many times, each post moving the bytes a fresh batch would.

mod common;

use common::*;
use rdma_safe::{
    error::Operation, Error, ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest,
};

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_prepared_send_batch_posted_again_delivers_every_message_with_its_immediate() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let (n, size, rounds) = (4, 300, 6);
    // Each round sends the same four pieces (the batch borrows them); the
    // immediates, set before each post, number the messages.
    let src = registered(&pd, pattern(seed("prepared-send", n), n * size));
    let total = n * rounds - 2; // the last round sends two: truncated
    let mut dst = registered(&pd, vec![FILL; total * size]);
    let gathers: Vec<_> = (0..n)
        .map(|i| [src.gather(i * size..(i + 1) * size)])
        .collect();
    let wrs: Vec<_> = gathers
        .iter()
        .map(|g| SendWorkRequest::new(g).with_immediate(0))
        .collect();
    b.scope(|sb| {
        let mut recvs = Vec::new();
        for sc in &mut scatter_chunks(&mut dst, size) {
            recvs.push(sb.post_receive(ReceiveWorkRequest::new(sc))?);
        }
        a.scope(|sa| {
            let mut batch = sa.prepare_sends(&wrs)?;
            assert_eq!((batch.len(), batch.bytes()), (n, n * size));
            assert_eq!(batch.operation(), Operation::Send);
            let mut sent = 0;
            for round in 0..rounds {
                if round == rounds - 1 {
                    batch.truncate(2);
                    assert_eq!((batch.len(), batch.bytes()), (2, 2 * size));
                }
                for k in 0..batch.len() {
                    batch.set_immediate(k, (sent + k) as u32)?;
                }
                let done = sa.post_prepared(&mut batch)?.wait()?;
                assert_eq!(done.bytes(), batch.bytes());
                sent += batch.len();
            }
            assert_eq!(sent, total);
            Ok::<_, Error>(())
        })?;
        for (i, r) in recvs.into_iter().enumerate() {
            let got = r.wait()?;
            assert_eq!(got.bytes(), size, "message {i}");
            assert_eq!(got.immediate(), Some(i as u32), "message {i} in order");
        }
        Ok::<_, Error>(())
    })
    .expect("prepared sends");
    for (i, piece) in dst.chunks(size).enumerate() {
        let k = i % n;
        assert_bytes(piece, &src[k * size..(k + 1) * size], "received message");
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
    assert_eq!(a.totals().0, total as u64, "every request counted");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn prepared_writes_and_reads_move_the_bytes_at_every_post() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let (n, piece) = (8, 1000);
    let src = registered(&pd, pattern(seed("prepared-write", n), n * piece));
    let mut dst = vec![FILL; n * piece + CANARY];
    // SAFETY: `dst` outlives the region (dropped below, before `dst` is
    // read) and is not touched from Rust while the peer may use it.
    let dst_mr = unsafe { shared_mr(&pd, &mut dst) };
    let remote = dst_mr.remote();
    let gathers: Vec<_> = (0..n)
        .map(|i| [src.gather(i * piece..(i + 1) * piece)])
        .collect();
    // Written in reverse order of the pieces' targets.
    let writes: Vec<_> = (0..n)
        .rev()
        .map(|i| {
            let at = remote.slice((i * piece) as u64, piece as u64).unwrap();
            WriteWorkRequest::new(&gathers[i], at)
        })
        .collect();
    let mut back = registered(&pd, vec![0u8; n * piece]);
    a.scope(|s| {
        let mut batch = s.prepare_writes(&writes)?;
        assert_eq!(batch.operation(), Operation::Write);
        for _ in 0..5 {
            assert_eq!(s.post_prepared(&mut batch)?.wait()?.bytes(), n * piece);
        }
        Ok::<_, Error>(())
    })
    .expect("prepared writes");
    {
        let mut elems = scatter_chunks(&mut back, piece);
        let mut reads: Vec<_> = elems
            .iter_mut()
            .enumerate()
            .map(|(i, e)| {
                let at = remote.slice((i * piece) as u64, piece as u64).unwrap();
                ReadWorkRequest::new(e, at)
            })
            .collect();
        a.scope(|s| {
            let mut batch = s.prepare_reads(&mut reads)?;
            assert_eq!(batch.operation(), Operation::Read);
            // Posted three times without waiting: the same targets
            // written again by each, read by Rust once the scope drained.
            let posts: Vec<_> = (0..3)
                .map(|_| s.post_prepared(&mut batch))
                .collect::<Result<_, _>>()?;
            for p in posts {
                assert_eq!(p.wait()?.bytes(), n * piece);
            }
            Ok::<_, Error>(())
        })
        .expect("prepared reads");
    }
    drop(dst_mr);
    assert_bytes(&dst[..n * piece], &src, "written pieces");
    assert_untouched(&dst[n * piece..], "bytes after the target");
    assert_bytes(&back, &src, "pieces read back");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn prepared_batches_refuse_malformed_requests_and_another_channel() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let (mut c, _d) = pair(&pd);
    let src = registered(&pd, pattern(seed("prepared-refused", 1), 4096));
    let mut dst = vec![FILL; 1024];
    // SAFETY: as above; nothing is ever written to it here.
    let dst_mr = unsafe { shared_mr(&pd, &mut dst) };
    let g = [src.gather(..)];
    let refused = |e: Error, what: &str| {
        let text = e.to_string();
        assert!(text.contains(what), "{text:?} names {what:?}");
    };
    let plain = [SendWorkRequest::new(&g)];
    let too_long = [WriteWorkRequest::new(&g, dst_mr.remote())];
    let mut batch = a
        .scope(|s| {
            refused(
                s.prepare_sends(&[]).expect_err("an empty batch"),
                "empty batch",
            );
            refused(
                s.prepare_writes(&too_long).expect_err("4096 bytes to 1024"),
                "do not fit the remote region",
            );
            let mut batch = s.prepare_sends(&plain)?;
            refused(
                batch.set_immediate(0, 7).expect_err("no immediate"),
                "carries no immediate data",
            );
            refused(
                batch.set_immediate(1, 7).expect_err("one request"),
                "the batch holds requests 0..1, not request 1",
            );
            Ok::<_, Error>(batch)
        })
        .expect("refusals");
    let posted_before = c.totals().0;
    let e = c
        .scope(|s| s.post_prepared(&mut batch).map(|_| ()))
        .expect_err("a batch prepared on another channel");
    refused(e.into(), "prepared on another channel");
    assert_eq!(c.totals().0, posted_before, "nothing posted");
    assert!(c.is_usable(), "a refusal leaves the channel usable");
    // Where it was prepared, it posts.
    let mut sink = registered(&pd, vec![0u8; 4096]);
    b.scope(|sb| {
        let mut sc = scatter_chunks(&mut sink, 4096);
        let r = sb.post_receive(ReceiveWorkRequest::new(&mut sc[0]))?;
        let done = a.scope(|s| s.post_prepared(&mut batch)?.wait())?;
        assert_eq!(done.bytes(), 4096);
        assert_eq!(r.wait()?.bytes(), 4096);
        Ok::<_, Error>(())
    })
    .expect("posted on its own channel");
    assert_bytes(&sink, &src, "the message");
    drop(dst_mr);
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}
