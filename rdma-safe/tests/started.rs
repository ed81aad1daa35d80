//! Operations posted when their futures are made ([`SharedChannel::start`]),
//! awaited later: with tokio's reactor (the first poll leaves the task's
//! waker in a slot that waited to be claimed) and busy-polling; a send
//! queue too small for what was started; a refusal; started futures
//! dropped unpolled; and receives started together.

mod common;

use common::{assert_bytes, assert_whole, frozen, pair_with, pattern, pd, seed};
use rdma_safe::owned::{Op, Request};
use rdma_safe::pool::{PoolBuf, PoolBytes};
use rdma_safe::{BufferPool, Channel, Error, ProtectionDomain, SharedChannel, SharedReceiveQueue};
use std::collections::VecDeque;
use std::time::Duration;

/// Bound on every whole test: a lost wake-up fails instead of hanging.
const TEST_BOUND: Duration = Duration::from_secs(120);
const LEN: usize = 3000;

fn channels(pd: &ProtectionDomain, depth: u32, events: bool) -> (Channel, Channel) {
    pair_with(pd, |c| {
        c.completion_events(events)
            .send_depth(depth)
            .recv_depth(64)
            .timeout(Duration::from_secs(30))
    })
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn message(i: usize) -> Vec<u8> {
    pattern(seed("started", i), LEN)
}

/// Starts `n` receives on `b` and `n` sends on `a`, and only then awaits
/// them: the sends in order, the receives in reverse. Every byte checked.
///
/// `in_order`: the send queue has room for all the sends, so they are
/// posted in the order they were started and the messages arrive in it.
/// Otherwise the sends are started first, before any receive: with no
/// receive to take them they cannot complete, the queue fills, and the
/// sends beyond it are posted by their first polls; each message is then
/// checked against the immediate it carries, and every one must arrive.
async fn exchange(
    a: &SharedChannel,
    b: &SharedChannel,
    pool: &BufferPool,
    n: usize,
    in_order: bool,
) {
    let start_receives = || -> Vec<Op<PoolBuf>> {
        (0..n)
            .map(|_| b.start(Request::receive(pool.try_alloc().expect("rx buffer"))))
            .collect()
    };
    let mut recvs = if in_order {
        start_receives()
    } else {
        Vec::new()
    };
    let sends: VecDeque<Op<PoolBytes>> = (0..n)
        .map(|i| a.start(Request::send(frozen(pool, &message(i))).with_immediate(i as u32)))
        .collect();
    let posted = sends.iter().filter(|s| s.wr_id().is_some()).count();
    if in_order {
        assert_eq!(posted, n, "all posted at start");
    } else {
        assert!(posted < n, "the send queue took all {n} sends");
        recvs = start_receives();
    }
    for r in &recvs {
        assert!(r.wr_id().is_some(), "a started receive is posted: {r:?}");
    }
    for (i, send) in sends.into_iter().enumerate() {
        let (sent, data) = send.await;
        assert_eq!(sent.expect("send").bytes(), LEN, "send {i}");
        assert_bytes(&data, &message(i), "a sent slice comes back unchanged");
    }
    let mut seen = vec![false; n];
    while let Some(recv) = recvs.pop() {
        let (got, buf) = recv.await;
        let got = got.expect("receive");
        let imm = got.immediate().expect("an immediate") as usize;
        if in_order {
            assert_eq!(imm, recvs.len(), "receives complete in order");
        }
        assert!(imm < n && !seen[imm], "message {imm} once");
        seen[imm] = true;
        assert_eq!(buf.len(), LEN);
        assert_bytes(&buf, &message(imm), "received");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn started_operations_complete_on_the_reactor_and_busy_polling() {
    let pd = pd();
    let pool = BufferPool::new(&pd, LEN, 64).expect("pool");
    // tokio's reactor: the slots of started requests hold no waker until
    // their futures are polled; the driver must still wake them.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        for depth in [32, 8] {
            let (a, b) = channels(&pd, depth, true);
            let (sa, sb) = (
                a.shared().with_tokio().expect("tokio"),
                b.shared().with_tokio().expect("tokio"),
            );
            tokio::time::timeout(TEST_BOUND, exchange(&sa, &sb, &pool, 24, depth >= 24))
                .await
                .expect("no lost wake-up");
            assert_whole(&sa, &pool, "reactor a");
            assert_whole(&sb, &pool, "reactor b");
        }
    });
    // Busy-polling, spinning and not.
    for spin in [Duration::ZERO, Duration::from_millis(1)] {
        let rt = current_thread();
        rt.block_on(async {
            for depth in [32, 8] {
                let (a, b) = channels(&pd, depth, false);
                let (sa, sb) = (a.shared().with_spin(spin), b.shared().with_spin(spin));
                tokio::time::timeout(TEST_BOUND, exchange(&sa, &sb, &pool, 24, depth >= 24))
                    .await
                    .expect("no hang");
                assert_whole(&sa, &pool, "busy a");
                assert_whole(&sb, &pool, "busy b");
            }
        });
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_refused_start_gives_its_buffer_back_and_unpolled_starts_release_theirs() {
    let pd = pd();
    let pool = BufferPool::new(&pd, LEN, 200).expect("pool");
    let rt = current_thread();
    rt.block_on(async {
        let (a, b) = channels(&pd, 8, false);
        let (sa, sb) = (a.shared(), b.shared());
        // Receives fill the receive queue (64, or what the device made of
        // it): the next is refused at once, and its future gives the
        // buffer back with the reason.
        let mut recvs: Vec<Op<PoolBuf>> = Vec::new();
        let refused = loop {
            let op = sb.start(Request::receive(pool.try_alloc().expect("rx buffer")));
            if op.wr_id().is_none() {
                break op;
            }
            recvs.push(op);
            assert!(recvs.len() < 190, "a receive queue of 64 took 190");
        };
        assert!(recvs.len() >= 64, "refused after {} receives", recvs.len());
        let (outcome, buf) = refused.await;
        match outcome {
            Err(e @ Error::Post { .. }) => assert!(
                e.to_string().contains("do not fit the receive queue"),
                "the refusal says why: {e}"
            ),
            other => panic!("expected a refusal naming the post, got {other:?}"),
        }
        assert_eq!(buf.capacity(), LEN, "the buffer comes back");
        drop(buf);
        // The receives and 5 sends, started and dropped unpolled: the
        // engine keeps each buffer until its completion, then releases it.
        let recvs_posted = recvs.len();
        drop(recvs);
        let sends: Vec<Op<PoolBytes>> = (0..5)
            .map(|i| sa.start(Request::send(frozen(&pool, &message(i)))))
            .collect();
        drop(sends);
        tokio::time::timeout(TEST_BOUND, async {
            // Five of the receives took the five messages.
            let receiving = recvs_posted - 5;
            while sa.counters().1 > 0 || pool.available() < pool.capacity() - receiving {
                // Someone must reap: abandoned requests are released as
                // their completions are seen.
                sa.run_callbacks().expect("reap a");
                sb.run_callbacks().expect("reap b");
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the dropped sends complete");
        // The receives the sends did not use are still posted, abandoned:
        // they end with the channel, which flushes them before their
        // buffers go back.
        drop((sa, sb, a, b));
        common::assert_pool_full(&pool, "every buffer back");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn receives_started_together_fill_in_order_and_refuse_what_does_not_fit() {
    const N: usize = 40; // more than one verb call takes (32)
    let pd = pd();
    let pool = BufferPool::new(&pd, LEN, 2 * N + 220).expect("pool");
    current_thread().block_on(async {
        let (a, b) = channels(&pd, 64, false);
        let (sa, sb) = (a.shared(), b.shared());
        let mut recvs: VecDeque<Op<PoolBuf>> = VecDeque::new();
        sb.start_receives(
            (0..N).map(|_| pool.try_alloc().expect("rx buffer")),
            &mut recvs,
        );
        assert_eq!(recvs.len(), N);
        let ids: Vec<u64> = recvs.iter().map(|r| r.wr_id().expect("posted")).collect();
        assert!(
            ids.windows(2).all(|w| w[1] == w[0] + 1),
            "in order: {ids:?}"
        );
        tokio::time::timeout(TEST_BOUND, async {
            for i in 0..N {
                let data = frozen(&pool, &message(i));
                let msg = Request::send(data).with_immediate(i as u32);
                sa.start(msg).await.0.expect("send");
            }
            for (i, recv) in recvs.drain(..).enumerate() {
                let (got, buf) = recv.await;
                assert_eq!(got.expect("receive").immediate(), Some(i as u32));
                assert_bytes(&buf, &message(i), "received in the order posted");
            }
        })
        .await
        .expect("no hang");
        assert_whole(&sa, &pool, "sender");
        assert_whole(&sb, &pool, "receiver");
        // 200 into a receive queue of 64 (or what the device made of it):
        // what does not fit resolves at once to the reason, with its
        // buffer.
        sb.start_receives(
            (0..200).map(|_| pool.try_alloc().expect("rx buffer")),
            &mut recvs,
        );
        assert_eq!(recvs.len(), 200);
        let posted = recvs.iter().filter(|r| r.wr_id().is_some()).count();
        assert!((64..200).contains(&posted), "{posted} of 200 posted");
        let mut refused = recvs.split_off(posted);
        assert!(
            recvs.iter().all(|r| r.wr_id().is_some()),
            "the posted come first"
        );
        let first = refused.pop_front().expect("a refused receive");
        match first.await {
            (Err(e @ Error::Post { .. }), buf) => {
                assert!(
                    e.to_string().contains("do not fit the receive queue"),
                    "{e}"
                );
                assert_eq!(buf.capacity(), LEN);
            }
            (other, _) => panic!("expected the queue's refusal, got {other:?}"),
        }
        // The rest: each verb call's first refusal says why, the others
        // of the call point at it.
        for r in refused {
            let (outcome, buf) = r.await;
            let e = outcome.expect_err("not posted").to_string();
            assert!(
                e.contains("do not fit the receive queue") || e.contains("not posted"),
                "{e}"
            );
            assert_eq!(buf.capacity(), LEN);
        }
        // The posted receives are abandoned: the channel flushes them
        // before their buffers go back.
        drop(recvs);
        drop((sa, sb, a, b));
        common::assert_pool_full(&pool, "every buffer back");

        // A channel whose receives come from a shared receive queue refuses
        // them all before the verb, naming the queue.
        let srq = SharedReceiveQueue::new(&pd, 8, 256).expect("shared receive queue");
        let on_srq = pd
            .channel_builder()
            .shared_receive_queue(&srq)
            .build()
            .expect("channel on the SRQ");
        let shared = on_srq.shared();
        let mut ops: Vec<Op<PoolBuf>> = Vec::new();
        shared.start_receives((0..3).map(|_| pool.try_alloc().expect("rx")), &mut ops);
        assert!(ops.iter().all(|o| o.wr_id().is_none()), "none posted");
        let mut errors = Vec::new();
        for op in ops {
            let (outcome, buf) = op.await;
            errors.push(outcome.expect_err("refused").to_string());
            drop(buf);
        }
        assert!(errors[0].contains("shared receive queue"), "{}", errors[0]);
        assert!(
            errors[1..].iter().all(|e| e.contains("not posted")),
            "{errors:?}"
        );
        common::assert_pool_full(&pool, "every buffer back");
    });
}
