//! Async owning operations on a real device with tokio: thousands of
//! operations in flight from many tasks (every byte checked), futures
//! dropped at every stage with the pool and the completion counts whole
//! afterwards, a peer killed mid-stream, and pool exhaustion as
//! back-pressure.

mod common;

use common::{
    assert_bytes, assert_whole, frozen, live_qp_numbers_or_skip, pair_with, pattern, pd, seed,
};
use rdma_safe::owned::Request;
use rdma_safe::{BufferPool, Channel, ProtectionDomain, SharedChannel};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

/// Bound on every whole test: a hang fails instead of blocking test-rxe.
const TEST_BOUND: Duration = Duration::from_secs(240);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A connected pair with completion events and deep queues, as shared
/// handles on tokio's reactor (call inside the runtime).
fn async_pair(pd: &ProtectionDomain, depth: u32, timeout: Duration) -> (Channel, Channel) {
    pair_with(pd, |c| {
        c.completion_events(true)
            .send_depth(depth)
            .recv_depth(depth)
            .timeout(timeout)
    })
}

fn on_tokio(ch: &Channel) -> SharedChannel {
    ch.shared().with_tokio().expect("register with tokio")
}

/// The message `seq` of task `task`: its identity in the first 8 bytes,
/// then a pattern that depends on it.
/// The next item of any `Stream`, as `StreamExt::next` does.
async fn next_of<S: futures_core::Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await
}

fn message(task: usize, seq: usize, len: usize) -> Vec<u8> {
    let mut m = pattern(seed("async", task * 100_000 + seq), len.max(8));
    m[..4].copy_from_slice(&(task as u32).to_le_bytes());
    m[4..8].copy_from_slice(&(seq as u32).to_le_bytes());
    m
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn thousands_of_operations_from_many_tasks() {
    const TASKS: usize = 16;
    const PER_TASK: usize = 250;
    const LEN: usize = 200;
    let rt = runtime();
    let pd = pd();
    rt.block_on(async {
        let (a, b) = async_pair(&pd, 1024, Duration::from_secs(30));
        let (sa, sb) = (on_tokio(&a), on_tokio(&b));
        let tx_pool = BufferPool::new(&pd, LEN, 2048).expect("tx pool");
        let rx_pool = BufferPool::new(&pd, LEN, 1024).expect("rx pool");
        let mut stream = sb.receive_stream(rx_pool.clone(), 512);
        let receiver = tokio::spawn(async move {
            let mut seen = vec![vec![false; PER_TASK]; TASKS];
            for _ in 0..TASKS * PER_TASK {
                let (s, buf) = stream.next().await.expect("stream open").expect("receive");
                assert_eq!(s.bytes(), LEN);
                let task = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
                let seq = u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
                assert!(!seen[task][seq], "message {task}/{seq} delivered twice");
                seen[task][seq] = true;
                assert_bytes(&buf, &message(task, seq, LEN), "received message");
            }
            stream
        });
        let mut senders = Vec::new();
        for task in 0..TASKS {
            let (sa, pool) = (sa.clone(), tx_pool.clone());
            senders.push(tokio::spawn(async move {
                // Many sends of this task in flight at once: post them all,
                // then await them in any order.
                let mut ops = tokio::task::JoinSet::new();
                for seq in 0..PER_TASK {
                    // More messages than buffers and than send-queue
                    // entries: both back-pressures are exercised.
                    let mut buf = pool.alloc().await;
                    buf.fill_from(&message(task, seq, LEN));
                    let (sa, data) = (sa.clone(), buf.freeze());
                    ops.spawn(async move {
                        let (r, back) = sa.submit(Request::send(data)).await;
                        r.expect("send");
                        back
                    });
                }
                while let Some(back) = ops.join_next().await {
                    assert_eq!(back.expect("send task").len(), LEN);
                }
            }));
        }
        let bounded = tokio::time::timeout(TEST_BOUND, async {
            for s in senders {
                s.await.expect("sender task");
            }
            receiver.await.expect("receiver task")
        });
        let stream = bounded.await.expect("all messages within the bound");
        drop(stream); // abandons its spare receives: flushed when b goes
        assert_whole(&sa, &tx_pool, "sender");
        let (completed, _, abandoned, _) = sa.counters();
        assert_eq!(
            completed,
            (TASKS * PER_TASK) as u64,
            "one completion per send"
        );
        assert_eq!(abandoned, 0);
        drop((sa, sb, a, b));
        assert_eq!(
            rx_pool.available(),
            rx_pool.capacity(),
            "receive buffers back"
        );
    });
}

/// A waker that does nothing, to poll a future by hand exactly once.
struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn futures_dropped_at_any_point_lose_and_leak_nothing() {
    const ROUNDS: usize = 600;
    let rt = runtime();
    let pd = pd();
    rt.block_on(async {
        let (a, b) = async_pair(&pd, 1024, Duration::from_secs(30));
        let qpns = [a.qp_num(), b.qp_num()];
        let (sa, sb) = (on_tokio(&a), on_tokio(&b));
        let pool = BufferPool::new(&pd, 128, 2048).expect("pool");
        let noop = Waker::from(Arc::new(Noop));
        let order = pattern(seed("drop-points", ROUNDS), ROUNDS);
        let (mut posted, mut claimed) = (0u64, 0u64);
        // Receives dropped after posting that no message has reached yet.
        // The receive queue is FIFO: a message goes to the oldest posted
        // receive, abandoned or not.
        let mut unmatched = 0usize;
        for (i, &r) in order.iter().enumerate() {
            match r % 6 {
                // Before post: never polled; the buffer goes straight back.
                0 => drop(sb.submit(Request::receive(pool.try_alloc().expect("rx")))),
                1 => drop(sa.submit(Request::send(frozen(&pool, &message(0, i, 64))))),
                // After post: polled once (posted), then dropped. A receive
                // stays posted holding its buffer until a message or flush.
                2 => {
                    let mut op = pin!(sb.submit(Request::receive(pool.try_alloc().expect("rx"))));
                    let polled = op.as_mut().poll(&mut Context::from_waker(&noop));
                    posted += 1;
                    if polled.is_ready() {
                        claimed += 1;
                    }
                    unmatched += 1;
                }
                3 => {
                    // A receive and a send, each polled once and dropped.
                    // Every round posts its receive before its send, so
                    // every send finds a posted receive (no RNR stall).
                    let mut rx = pin!(sb.submit(Request::receive(pool.try_alloc().expect("rx"))));
                    let mut tx = pin!(sa.submit(Request::send(frozen(&pool, &message(0, i, 64)))));
                    for polled in [
                        rx.as_mut().poll(&mut Context::from_waker(&noop)).is_ready(),
                        tx.as_mut().poll(&mut Context::from_waker(&noop)).is_ready(),
                    ] {
                        posted += 1;
                        claimed += u64::from(polled);
                    }
                }
                // After completion: awaited, result dropped at once. First
                // one message per unmatched abandoned receive, so that this
                // round's receive is the one the next message reaches.
                _ => {
                    for k in 0..std::mem::take(&mut unmatched) {
                        let (r, _) = sa
                            .submit(Request::send(frozen(&pool, &message(4, k, 64))))
                            .await;
                        r.expect("send to an abandoned receive");
                        posted += 1;
                        claimed += 1;
                    }
                    let mut w = pool.try_alloc().expect("w");
                    w.set_len(64);
                    let src = frozen(&pool, &message(1, i, 64));
                    let rx = sb.submit(Request::receive(w));
                    let op = sa.submit(Request::send(src));
                    let (r, s) = tokio::join!(rx, op);
                    if let Err(e) = s.0.as_ref().and(r.0.as_ref()) {
                        panic!(
                            "round {i}: {e}; a: {:?}, b: {:?}",
                            sa.unusable_reason(),
                            sb.unusable_reason()
                        );
                    }
                    posted += 2;
                    claimed += 2;
                }
            }
        }
        // Every abandoned send completes (its receive was posted first);
        // abandoned receives that no message reached stay posted.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Reap through a cheap blocking call's poll.
            let _ = sa.run_callbacks();
            let _ = sb.run_callbacks();
            let (_, fa, _, _) = sa.counters();
            if fa == 0 || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (ca, fa, aa, _) = sa.counters();
        assert_eq!(fa, 0, "sends left in flight");
        // Receives dropped after posting that no message reached are still
        // posted: dropping the channel flushes them and frees their buffers.
        drop((sa, a));
        let (cb, in_flight_b, ab, _) = sb.counters();
        drop((sb, b));
        common::assert_pool_full(&pool, "every buffer back");
        // The last handles gone, the queue pairs are destroyed (after the
        // flush of the receives still posted).
        if let Some(live) = live_qp_numbers_or_skip("dropped futures") {
            for qpn in qpns {
                assert!(!live.contains(&qpn), "QP {qpn} still exists");
            }
        }
        assert_eq!(
            ca + cb + in_flight_b as u64,
            posted,
            "one completion per post, none lost, none extra"
        );
        assert_eq!(
            claimed + aa + ab,
            ca + cb,
            "every completion seen was claimed or abandoned exactly once"
        );
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_killed_peer_ends_every_pending_future_with_an_error() {
    let timeout = Duration::from_secs(3);
    let rt = runtime();
    let pd = pd();
    rt.block_on(async {
        let (a, b) = async_pair(&pd, 256, timeout);
        let sa = on_tokio(&a);
        let pool = BufferPool::new(&pd, 4096, 256).expect("pool");
        // Receives that no message will ever reach, and sends in flight.
        let mut pending = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let (sa, buf) = (sa.clone(), pool.try_alloc().expect("rx"));
            pending.spawn(async move { sa.submit(Request::receive(buf)).await.0 });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(b); // the peer's queue pair is destroyed
        for i in 0..64 {
            let (sa, data) = (sa.clone(), frozen(&pool, &message(2, i, 4096)));
            pending.spawn(async move { sa.submit(Request::send(data)).await.0 });
        }
        let start = Instant::now();
        let mut errors = 0;
        while let Some(r) = tokio::time::timeout(TEST_BOUND, pending.join_next())
            .await
            .expect("every future ends")
        {
            match r.expect("task") {
                Err(e) => {
                    errors += 1;
                    let _typed: rdma_safe::Error = e;
                }
                Ok(s) => panic!("an operation to a dead peer succeeded: {s:?}"),
            }
        }
        let took = start.elapsed();
        assert_eq!(errors, 128);
        // Within the channel's timeout plus the transport's retries, with
        // room for an emulated machine (not a tight wall-time assert).
        assert!(took < timeout * 20, "futures ended only after {took:?}");
        assert!(sa.unusable_reason().is_some());
        drop((sa, a));
        common::assert_pool_full(&pool, "every buffer back");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn an_exhausted_pool_is_back_pressure_not_a_hang() {
    const MESSAGES: usize = 300;
    let rt = runtime();
    let pd = pd();
    rt.block_on(async {
        let (a, b) = async_pair(&pd, 128, Duration::from_secs(30));
        let (sa, sb) = (on_tokio(&a), on_tokio(&b));
        // 4 receive buffers for a stream that would keep 64 posted.
        let rx_pool = BufferPool::new(&pd, 256, 4).expect("rx pool");
        let tx_pool = BufferPool::new(&pd, 256, 64).expect("tx pool");
        let mut stream = sb.receive_stream(rx_pool.clone(), 64);
        let consumer = tokio::spawn(async move {
            for seq in 0..MESSAGES {
                // Through `futures_core::Stream`, as any runtime's
                // combinators reach it.
                let (_, buf) = next_of(&mut stream).await.expect("open").expect("receive");
                assert_bytes(&buf, &message(3, seq, 256), "message in order");
                // `buf` dropped here: back to the pool, the stream reposts.
            }
            stream
        });
        let producer = tokio::spawn(async move {
            for seq in 0..MESSAGES {
                // The pool's own back-pressure: wait for a free buffer.
                let mut b = tx_pool.alloc().await;
                b.fill_from(&message(3, seq, 256));
                sa.submit(Request::send(b.freeze())).await.0.expect("send");
            }
            (sa, tx_pool)
        });
        let (stream, (sa, tx_pool)) = tokio::time::timeout(TEST_BOUND, async {
            (
                consumer.await.expect("consumer"),
                producer.await.expect("producer"),
            )
        })
        .await
        .expect("no hang");
        assert!(stream.posted() <= 4, "more receives than buffers");
        drop(stream);
        assert_whole(&sa, &tx_pool, "sender");
        drop((sb, b, sa, a));
        common::assert_pool_full(&rx_pool, "after the channels were dropped");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_forgotten_future_stalls_no_other() {
    let rt = runtime();
    let pd = pd();
    rt.block_on(async {
        let (a, b) = async_pair(&pd, 64, Duration::from_secs(30));
        let (sa, sb) = (on_tokio(&a), on_tokio(&b));
        let pool = BufferPool::new(&pd, 256, 16).expect("pool");
        // B waits first...
        let (sb2, rx) = (sb.clone(), pool.try_alloc().expect("rx"));
        let waiting =
            tokio::spawn(
                async move { sb2.submit(Request::receive(rx)).await.0.map(|s| s.bytes()) },
            );
        tokio::time::sleep(Duration::from_millis(200)).await;
        // ...then a future is polled (it sleeps on the reactor last) and
        // forgotten: its task will never poll it again.
        let noop = Waker::from(Arc::new(Noop));
        let mut forgotten = Box::pin(sb.submit(Request::receive(pool.try_alloc().expect("rx"))));
        assert!(forgotten
            .as_mut()
            .poll(&mut Context::from_waker(&noop))
            .is_pending());
        std::mem::forget(forgotten);
        // B's message (the first: B's receive was posted first) still wakes B.
        for i in 0..2 {
            let (r, _) = sa
                .submit(Request::send(frozen(&pool, &message(5, i, 100))))
                .await;
            r.expect("send");
        }
        let got = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("the waiting future was woken")
            .expect("task");
        assert_eq!(got.expect("receive"), 100);
        // The forgotten future's buffer is released with the channel: when
        // its last handle goes, which on this multi-thread runtime may be
        // the completion driver's, finishing a round on another worker just
        // after the drop below (a bounded wait only detects a leak).
        drop((sa, a, sb, b));
        let bound = std::time::Instant::now() + Duration::from_secs(10);
        while pool.available() != pool.capacity() && std::time::Instant::now() < bound {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        common::assert_pool_full(&pool, "every buffer back");
    });
}
