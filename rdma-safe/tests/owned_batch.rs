//! Owning batches on a real device: writes, reads and sends posted with one
//! doorbell and one completion, every byte checked; a batch failing in the
//! middle reports the failing request's status and gives every buffer
//! back; batches refused before posting; and batch futures from several
//! tokio tasks, some dropped mid-flight, with the pool whole afterwards.

mod common;

use common::{assert_bytes, assert_whole, frozen, pair_with, pattern, pd, seed, shared_mr};
use rdma_safe::owned::Request;
use rdma_safe::{
    owned::OwnedRequest, owned::OWNED_BATCH_MAX, work::WcStatus, BufferPool, Error,
    RemoteMemoryRegion,
};
use std::time::{Duration, Instant};

/// Piece `k` of a batch test's data.
fn piece(tag: &str, k: usize, len: usize) -> Vec<u8> {
    pattern(seed(tag, k), len)
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn owned_batches_write_read_and_send_every_piece() {
    let pd = pd();
    let (a, b) = pair_with(&pd, |c| c.send_depth(64).recv_depth(64));
    let (a, b) = (a.shared(), b.shared());
    let pool = BufferPool::new(&pd, 4096, 3 * OWNED_BATCH_MAX).expect("pool");
    const PIECE: usize = 3000;
    let mut target = vec![0u8; PIECE * OWNED_BATCH_MAX];
    // SAFETY: `target` outlives `mr` (declared first, dropped last) and is
    // not touched by Rust until the transfers completed and `mr` is gone.
    let mr = unsafe { shared_mr(&pd, &mut target) };
    let remote: RemoteMemoryRegion = mr.remote();
    let at = |k: usize| {
        remote
            .slice((k * PIECE) as u64, PIECE as u64)
            .expect("piece")
    };
    // Batches of every size from one to the most: each write lands at its
    // own offset, sizes differ (0 and inline-sized included).
    for n in [1, 2, 7, OWNED_BATCH_MAX] {
        let lens: Vec<usize> = (0..n).map(|k| [PIECE, 0, 17, 64][k % 4]).collect();
        let reqs: Vec<_> = (0..n)
            .map(|k| OwnedRequest::write(frozen(&pool, &piece("bw", k + n, lens[k])), at(k)))
            .collect();
        let (done, back) = a.run(Request::batch(reqs));
        let total: usize = lens.iter().sum();
        assert_eq!(done.expect("write batch").bytes(), total, "n {n}");
        assert_eq!(back.len(), n, "every request comes back");
        for (k, req) in back.into_iter().enumerate() {
            let data = req.into_bytes().expect("a write gives its slice back");
            assert_bytes(&data, &piece("bw", k + n, lens[k]), "returned slice");
        }
        // Read every piece back, into buffers of the pool.
        let reqs: Vec<_> = (0..n)
            .map(|k| {
                let mut buf = pool.try_alloc().expect("read target");
                buf.set_len(lens[k]);
                buf.fill(0xee);
                OwnedRequest::read(buf, at(k))
            })
            .collect();
        let (done, back) = a.run(Request::batch(reqs));
        assert_eq!(done.expect("read batch").bytes(), total);
        for (k, req) in back.into_iter().enumerate() {
            let buf = req.into_buf().expect("a read gives its buffer back");
            assert_bytes(&buf, &piece("bw", k + n, lens[k]), "read back");
        }
        assert_whole(&a, &pool, "after the write and read batches");
    }
    // Sends: the receiver sees them in order, immediates included.
    const SENDS: usize = 9;
    let receives: Vec<_> = (0..SENDS)
        .map(|_| pool.try_alloc().expect("rx buffer"))
        .collect();
    let b2 = b.clone();
    let receiver = std::thread::spawn(move || {
        receives
            .into_iter()
            .map(|rx| {
                let (got, rx) = b2.run(Request::receive(rx));
                let got = got.expect("receive");
                (got.immediate(), rx.to_vec())
            })
            .collect::<Vec<_>>()
    });
    let reqs: Vec<_> = (0..SENDS)
        .map(|k| {
            OwnedRequest::send_with_immediate(frozen(&pool, &piece("bs", k, 100 + k)), k as u32)
        })
        .collect();
    // The receives may not all be posted yet: RNR retries wait for them.
    let (sent, back) = a.run(Request::batch(reqs));
    sent.expect("send batch");
    drop(back);
    let got = receiver.join().expect("receiver");
    for (k, (imm, data)) in got.iter().enumerate() {
        assert_eq!(*imm, Some(k as u32), "message {k} out of order");
        assert_bytes(data, &piece("bs", k, 100 + k), "sent message");
    }
    drop(mr);
    // The last batch's first piece, as the peer's memory holds it.
    assert_bytes(
        &target[..PIECE],
        &piece("bw", OWNED_BATCH_MAX, PIECE),
        "written into the peer's memory",
    );
    assert_whole(&a, &pool, "a");
    assert_whole(&b, &pool, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_owned_batch_failing_midway_reports_it_and_gives_every_buffer_back() {
    let pd = pd();
    let (a, _b) = pair_with(&pd, |c| c.send_depth(64).timeout(Duration::from_secs(20)));
    let a = a.shared();
    let pool = BufferPool::new(&pd, 256, 16).expect("pool");
    let mut target = vec![0u8; 4096];
    // SAFETY: `target` outlives `mr` and is read only after `mr` is gone.
    let mr = unsafe { shared_mr(&pd, &mut target) };
    let good = mr.remote();
    let bad = RemoteMemoryRegion::new(good.address(), good.length(), good.rkey() ^ 0x5a5a_0000);
    let reqs: Vec<_> = (0..6)
        .map(|k| {
            let remote = if k == 3 {
                bad
            } else {
                good.slice_from(k * 256).expect("piece")
            };
            OwnedRequest::write(frozen(&pool, &[k as u8 + 1; 256]), remote)
        })
        .collect();
    let started = Instant::now();
    let (done, back) = a.run(Request::batch(reqs));
    match done {
        Err(Error::WorkCompletion { status, .. }) => assert_eq!(
            status,
            WcStatus::RemoteAccessError,
            "the failing request's own status, not the flush after it"
        ),
        other => panic!("expected a remote access error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(15), "bounded");
    assert_eq!(back.len(), 6, "every request comes back");
    drop(back);
    assert_whole(&a, &pool, "after the failed batch");
    assert!(
        a.unusable_reason().is_some(),
        "a failed request ends the channel"
    );
    drop(mr);
    for k in 0..3 {
        assert!(
            target[k * 256..(k + 1) * 256]
                .iter()
                .all(|&x| x == k as u8 + 1),
            "write {k}, before the failing one, landed"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn owned_batches_refused_before_posting_leave_the_channel_usable() {
    let pd = pd();
    let (a, _b) = pair_with(&pd, |c| c.send_depth(64));
    let a = a.shared();
    let pool = BufferPool::new(&pd, 64, 2 * OWNED_BATCH_MAX).expect("pool");
    let mut target = vec![0u8; 64];
    // SAFETY: `target` outlives `mr` and is read only after `mr` is gone.
    let mr = unsafe { shared_mr(&pd, &mut target) };
    let remote = mr.remote();
    let refused = |(done, back): (rdma_safe::Result<_>, Vec<OwnedRequest>), n, what| {
        match done {
            Err(Error::Post { source, .. }) => {
                assert!(
                    matches!(source, rdma_safe::error::VerbsError::InvalidArgument(_)),
                    "{what}"
                )
            }
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
        assert_eq!(back.len(), n, "{what}: the requests come back");
    };
    refused(a.run(Request::batch(Vec::new())), 0, "an empty batch");
    let too_many: Vec<_> = (0..=OWNED_BATCH_MAX)
        .map(|_| OwnedRequest::write(frozen(&pool, &[1; 8]), remote))
        .collect();
    refused(
        a.run(Request::batch(too_many)),
        OWNED_BATCH_MAX + 1,
        "one request too many",
    );
    let small = remote.slice(0, 4).expect("sub-region");
    let too_long = vec![
        OwnedRequest::write(frozen(&pool, &[2; 4]), small),
        OwnedRequest::write(frozen(&pool, &[2; 8]), small),
    ];
    refused(
        a.run(Request::batch(too_long)),
        2,
        "8 bytes into a 4-byte region",
    );
    assert_eq!(a.unusable_reason(), None, "refusals post nothing");
    assert_whole(&a, &pool, "after the refusals");
    // Still usable.
    let (done, _) = a.run(Request::batch(vec![OwnedRequest::write(
        frozen(&pool, &[9; 64]),
        remote,
    )]));
    done.expect("a batch after the refusals");
    drop(mr);
    assert_eq!(target, vec![9u8; 64]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn batch_futures_from_many_tasks_keep_the_pool_whole_when_dropped() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let pd = pd();
    let (a, _b) = pair_with(&pd, |c| c.completion_events(true).send_depth(128));
    let pool = BufferPool::new(&pd, 1024, 512).expect("pool");
    const TASKS: usize = 8;
    const BATCHES: usize = 40;
    const PER: usize = 8;
    let mut target = vec![0u8; TASKS * PER * 1024];
    // SAFETY: `target` outlives `mr` and is read only after `mr` is gone
    // and every task (and the runtime) finished.
    let mr = unsafe { shared_mr(&pd, &mut target) };
    let remote = mr.remote();
    rt.block_on(async {
        let a = a.shared().with_tokio().expect("tokio");
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (a, pool) = (a.clone(), pool.clone());
                tokio::spawn(async move {
                    let at = |k: usize| remote.slice_from(((t * PER + k) * 1024) as u64).unwrap();
                    for i in 0..BATCHES {
                        let reqs: Vec<_> = (0..PER)
                            .map(|k| {
                                let data = piece("bf", (t * BATCHES + i) * PER + k, 1024);
                                OwnedRequest::write(frozen(&pool, &data), at(k))
                            })
                            .collect();
                        let op = a.submit(Request::batch(reqs));
                        if i % 5 == 3 {
                            // Dropped after posting (the first poll posts):
                            // the engine keeps the buffers until the
                            // completion.
                            let mut op = Box::pin(op);
                            let _ = futures_poll_once(op.as_mut()).await;
                            drop(op);
                            continue;
                        }
                        let (done, back) = op.await;
                        assert_eq!(done.expect("batch").bytes(), PER * 1024);
                        assert_eq!(back.len(), PER);
                    }
                })
            })
            .collect();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(120), t)
                .await
                .expect("a task hung")
                .expect("a task panicked");
        }
        // The dropped batches complete in the background: wait until the
        // engine saw every completion.
        let deadline = Instant::now() + Duration::from_secs(30);
        while a.counters().1 > 0 || a.counters().3 > 0 {
            assert!(Instant::now() < deadline, "dropped batches never completed");
            let _ = a.run_callbacks();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_whole(&a, &pool, "after every batch");
    });
    drop(mr);
    // The last batch of each task was awaited (BATCHES - 1 is not dropped).
    for t in 0..TASKS {
        for k in 0..PER {
            let i = BATCHES - 1;
            let want = piece("bf", (t * BATCHES + i) * PER + k, 1024);
            let at = (t * PER + k) * 1024;
            assert_bytes(&target[at..at + 1024], &want, "the last batch's data");
        }
    }
}

/// Polls `fut` once (which posts an owning operation), then returns.
async fn futures_poll_once<F: std::future::Future + ?Sized>(mut fut: std::pin::Pin<&mut F>) {
    std::future::poll_fn(|cx| {
        let _ = fut.as_mut().poll(cx);
        std::task::Poll::Ready(())
    })
    .await
}
