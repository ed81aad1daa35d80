//! What an operation costs the allocator on the data path: zero heap
//! allocations per operation is the target (owning operations as futures,
//! on a reactor and busy-polled, posted at their first poll or when made,
//! on a completion queue of their own or a
//! shared one, blocking atomics, batches of receives in a scope with
//! batches of sends against them, prepared batches, and a shared receive
//! queue's refills).
//! Counted with a global allocator over many send/receive pairs, after a
//! warm-up (the engine's slot ring and the runtime's first-use structures
//! grow once).

mod common;

use common::counting::{allocations, Counting};

use common::{pair, pair_with, pd, registered, scatter_chunks, srq_pair};
use rdma_safe::channel::SharedCompletionQueue;
use rdma_safe::owned::Request;
use rdma_safe::{owned::OwnedRequest, AtomicWorkRequest, BufferPool, RemoteAccessBuffer};
use rdma_safe::{Error, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest};
use std::collections::VecDeque;
use std::time::Duration;

#[global_allocator]
static ALLOC: Counting = Counting;

/// Rounds before counting (the engine's slot ring and the runtime's
/// first-use structures grow once), and rounds counted.
const WARM: usize = 100;
const ROUNDS: usize = 1000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn owned_operations_allocate_nothing_per_operation() {
    let pd = pd();
    let rt = runtime();
    rt.block_on(async {
        let (a, b) = pair_with(&pd, |c| c.completion_events(true));
        let sa = a.shared().with_tokio().expect("tokio");
        let sb = b.shared().with_tokio().expect("tokio");
        let pool = BufferPool::new(&pd, 256, 64).expect("pool");
        let mut counted = 0;
        for round in 0..WARM + ROUNDS {
            if round == WARM {
                counted = allocations();
            }
            let mut tx = pool.try_alloc().expect("tx");
            tx[..8].copy_from_slice(&(round as u64).to_le_bytes());
            let rx = pool.try_alloc().expect("rx");
            let (r, s) = tokio::join!(
                sb.submit(Request::receive(rx)),
                sa.submit(Request::send(tx.freeze()))
            );
            let (got, buf) = (r.0.expect("receive"), r.1);
            s.0.expect("send");
            assert_eq!(got.bytes(), 256);
            assert_eq!(buf[..8], (round as u64).to_le_bytes());
        }
        let per_op = (allocations() - counted) as f64 / (2 * ROUNDS) as f64;
        println!("allocations per owned operation (send or receive, tokio futures): {per_op:.3}");
        // The target is zero; a runtime may allocate now and then on its own.
        assert!(per_op < 0.05, "{per_op:.3} allocations per operation");
        // The blocking form of the same, without a runtime in the loop.
        let before = allocations();
        for round in 0..ROUNDS {
            let mut tx = pool.try_alloc().expect("tx");
            tx[..8].copy_from_slice(&(round as u64).to_le_bytes());
            sb.run_then(Request::receive(pool.try_alloc().expect("rx")), |r, _| {
                r.expect("receive");
            })
            .map_err(|(e, _)| e)
            .expect("post receive");
            let (s, _) = sa.run(Request::send(tx.freeze()));
            s.expect("send");
            while sb.run_callbacks().expect("callbacks") == 0 {
                std::thread::sleep(Duration::from_micros(10));
            }
        }
        let blocking = (allocations() - before) as f64 / ROUNDS as f64;
        println!(
            "allocations per blocking send + callback receive: {blocking:.3} \
             (the callback's box is one)"
        );
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn busy_polled_futures_allocate_nothing_per_operation() {
    let pd = pd();
    let rt = runtime();
    rt.block_on(async {
        // No reactor: the futures poll the completion queue themselves.
        let (a, b) = pair(&pd);
        let (sa, sb) = (a.shared(), b.shared());
        let pool = BufferPool::new(&pd, 64, 8).expect("pool");
        let data = {
            let mut d = pool.try_alloc().expect("data");
            d.fill(7);
            d.freeze()
        };
        let mut counted = 0;
        for round in 0..WARM + ROUNDS {
            if round == WARM {
                counted = allocations();
            }
            let rx = pool.try_alloc().expect("rx");
            let (r, s) = tokio::join!(
                sb.submit(Request::receive(rx)),
                sa.submit(Request::send(data.clone()))
            );
            assert_eq!(r.0.expect("receive").bytes(), 64);
            s.0.expect("send");
        }
        let per_op = (allocations() - counted) as f64 / (2 * ROUNDS) as f64;
        println!("allocations per busy-polled owned operation: {per_op:.3}");
        assert!(per_op < 0.05, "{per_op:.3} allocations per operation");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn started_operations_allocate_nothing_per_operation() {
    let pd = pd();
    let rt = runtime();
    rt.block_on(async {
        // `SharedChannel::start` and `start_receives`, as perf --async's
        // latency loop uses them:
        // with tokio's reactor (the first poll leaves the waker in the
        // slot) and busy-polled.
        for reactor in [true, false] {
            let (a, b) = pair_with(&pd, |c| c.completion_events(reactor));
            let (sa, sb) = if reactor {
                (
                    a.shared().with_tokio().expect("tokio"),
                    b.shared().with_tokio().expect("tokio"),
                )
            } else {
                (a.shared(), b.shared())
            };
            let pool = BufferPool::new(&pd, 64, 8).expect("pool");
            let data = {
                let mut d = pool.try_alloc().expect("data");
                d.fill(9);
                d.freeze()
            };
            let mut more = VecDeque::with_capacity(2);
            let mut counted = 0;
            for round in 0..WARM + ROUNDS {
                if round == WARM {
                    counted = allocations();
                }
                // One receive started alone, two together.
                let answer = sb.start(Request::receive(pool.try_alloc().expect("rx")));
                let rx = [pool.try_alloc().expect("rx"), pool.try_alloc().expect("rx")];
                sb.start_receives(rx, &mut more);
                for _ in 0..3 {
                    sa.start(Request::send(data.clone())).await.0.expect("send");
                }
                for op in std::iter::once(answer).chain(more.drain(..)) {
                    let (got, buf) = op.await;
                    assert_eq!(got.expect("receive").bytes(), 64);
                    assert_eq!(buf[..], [9u8; 64][..]);
                }
            }
            let per_op = (allocations() - counted) as f64 / (6 * ROUNDS) as f64;
            println!("allocations per started operation (reactor: {reactor}): {per_op:.3}");
            assert!(per_op < 0.05, "{per_op:.3} allocations per operation");
        }
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn futures_on_a_shared_completion_queue_allocate_nothing_per_operation() {
    let pd = pd();
    let rt = runtime();
    rt.block_on(async {
        // Two pairs on one completion queue, all in flight at once: each
        // poll sets aside the other channels' completions (their inboxes
        // grow once, in the warm-up).
        let cq = SharedCompletionQueue::new(&pd, 4 * 256).expect("a shared CQ");
        let (a1, b1) = pair_with(&pd, |c| c.completion_queue(&cq));
        let (a2, b2) = pair_with(&pd, |c| c.completion_queue(&cq));
        let (sa1, sb1, sa2, sb2) = (a1.shared(), b1.shared(), a2.shared(), b2.shared());
        let pool = BufferPool::new(&pd, 64, 8).expect("pool");
        let data = {
            let mut d = pool.try_alloc().expect("data");
            d.fill(7);
            d.freeze()
        };
        let mut counted = 0;
        for round in 0..WARM + ROUNDS {
            if round == WARM {
                counted = allocations();
            }
            let (rx1, rx2) = (pool.try_alloc().expect("rx"), pool.try_alloc().expect("rx"));
            let (r1, s1, r2, s2) = tokio::join!(
                sb1.submit(Request::receive(rx1)),
                sa1.submit(Request::send(data.clone())),
                sb2.submit(Request::receive(rx2)),
                sa2.submit(Request::send(data.clone()))
            );
            assert_eq!(r1.0.expect("receive 1").bytes(), 64);
            assert_eq!(r2.0.expect("receive 2").bytes(), 64);
            s1.0.expect("send 1");
            s2.0.expect("send 2");
        }
        let per_op = (allocations() - counted) as f64 / (4 * ROUNDS) as f64;
        println!("allocations per owned operation on a shared CQ: {per_op:.3}");
        assert!(per_op < 0.05, "{per_op:.3} allocations per operation");
        assert_eq!(cq.strays(), 0);
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn blocking_atomics_allocate_nothing_per_operation() {
    const WARM: u64 = 100;
    const ROUNDS: u64 = 1000;
    let pd = pd();
    let (mut a, _b) = pair(&pd);
    let target = RemoteAccessBuffer::new(&pd, 8).expect("target");
    let counter = target.remote();
    let mut old = registered(&pd, vec![0u8; 8]);
    let mut counted = 0;
    for round in 0..WARM + ROUNDS {
        if round == WARM {
            counted = allocations();
        }
        a.run(AtomicWorkRequest::fetch_and_add(
            counter,
            1,
            &mut old.scatter(..),
        ))
        .expect("fetch-and-add");
        assert_eq!(u64::from_ne_bytes(old[..8].try_into().unwrap()), round);
    }
    let per_op = (allocations() - counted) as f64 / ROUNDS as f64;
    println!("allocations per blocking atomic: {per_op:.3}");
    assert_eq!(per_op, 0.0, "{per_op:.3} allocations per blocking atomic");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn owned_batch_futures_allocate_nothing_per_batch() {
    const WARM: usize = 50;
    const ROUNDS: usize = 500;
    const PER: usize = 8;
    let pd = pd();
    let target = RemoteAccessBuffer::new(&pd, 64 * PER).expect("target");
    let rt = runtime();
    rt.block_on(async {
        // Busy-polled, as perf --async's bandwidth loop: writes of one
        // shared slice, the request vector reused from batch to batch.
        let (a, _b) = pair(&pd);
        let sa = a.shared();
        let remote = target.remote();
        let pool = BufferPool::new(&pd, 64, 2).expect("pool");
        let data = {
            let mut d = pool.try_alloc().expect("data");
            d.fill(3);
            d.freeze()
        };
        let mut reqs: Vec<OwnedRequest> = Vec::with_capacity(PER);
        let mut counted = 0;
        for round in 0..WARM + ROUNDS {
            if round == WARM {
                counted = allocations();
            }
            reqs.extend((0..PER).map(|k| {
                let at = remote.slice((64 * k) as u64, 64).expect("piece");
                OwnedRequest::write(data.clone(), at)
            }));
            let (done, back) = sa.submit(Request::batch(reqs)).await;
            assert_eq!(done.expect("batch").bytes(), 64 * PER);
            reqs = back;
            reqs.clear();
        }
        let per_batch = (allocations() - counted) as f64 / ROUNDS as f64;
        println!(
            "allocations per owned batch of {PER} writes (busy-polled future): {per_batch:.3}"
        );
        assert!(per_batch < 0.05, "{per_batch:.3} allocations per batch");
    });
    assert!(
        target.to_vec().iter().all(|&b| b == 3),
        "every write landed"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn scoped_receive_and_send_batches_allocate_nothing_per_operation() {
    const WARM: usize = 50;
    const ROUNDS: usize = 500;
    const PER: usize = 8;
    const SIZE: usize = 64;
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let src = registered(&pd, vec![9u8; SIZE]);
    let mut dst = registered(&pd, vec![0u8; SIZE * PER]);
    let g = [src.gather(..)];
    // As perf's send_bw server: a ring of receive requests built once, each
    // round posting it as one batch, the handles into a reused ring; the
    // peer sends one batch of PER (blocking) against it.
    let mut sends = [SendWorkRequest::new(&g); PER];
    let (per_op, vec_form) = b
        .scope(|sb| {
            let mut lists = scatter_chunks(&mut dst, SIZE);
            let mut ring: Vec<ReceiveWorkRequest<'_, '_>> = lists
                .iter_mut()
                .map(|l| ReceiveWorkRequest::new(l))
                .collect();
            let mut recvs = VecDeque::with_capacity(PER);
            let mut counted = 0;
            for round in 0..WARM + ROUNDS {
                if round == WARM {
                    counted = allocations();
                }
                assert_eq!(sb.post_receive_batch_into(&mut ring, &mut recvs)?, PER);
                a.run_batch(&mut sends)?;
                while let Some(r) = recvs.pop_front() {
                    assert_eq!(r.wait()?.bytes(), SIZE);
                }
            }
            let per_op = (allocations() - counted) as f64 / (2 * PER * ROUNDS) as f64;
            // The form that returns a new `Vec` of handles allocates it:
            // the count sees this path.
            let before = allocations();
            for _ in 0..ROUNDS {
                let handles = sb.post_receive_batch(&mut ring)?;
                a.run_batch(&mut sends)?;
                for r in handles {
                    assert_eq!(r.wait()?.bytes(), SIZE);
                }
            }
            let vec_form = (allocations() - before) as f64 / ROUNDS as f64;
            Ok::<_, Error>((per_op, vec_form))
        })
        .expect("batches");
    println!(
        "allocations per operation, batches of {PER} receives (handles into a ring) \
         and {PER} sends: {per_op:.3}"
    );
    println!("allocations per batch of receives whose handles come in a new Vec: {vec_form:.3}");
    assert_eq!(per_op, 0.0, "{per_op:.3} allocations per operation");
    assert!(
        vec_form >= 1.0,
        "the returned Vec was not counted: {vec_form:.3}"
    );
    assert!(dst.iter().all(|&x| x == 9), "every message landed");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn prepared_batches_allocate_nothing_per_post() {
    // One id per post: the scope's list of ids grows to its compaction
    // threshold (256) once, within the warm-up.
    const WARM: usize = 300;
    const ROUNDS: usize = 500;
    const PER: usize = 8;
    const SIZE: usize = 64;
    let pd = pd();
    let (mut a, _b) = pair(&pd);
    let target = RemoteAccessBuffer::new(&pd, SIZE * PER).expect("target");
    let remote = target.remote();
    let src = registered(&pd, vec![7u8; SIZE * PER]);
    let gathers: Vec<_> = (0..PER)
        .map(|k| [src.gather(k * SIZE..(k + 1) * SIZE)])
        .collect();
    let writes: Vec<_> = gathers
        .iter()
        .enumerate()
        .map(|(k, g)| {
            let at = remote.slice((k * SIZE) as u64, SIZE as u64).unwrap();
            WriteWorkRequest::new(g, at)
        })
        .collect();
    // As perf's bandwidth loop: the batch prepared once, posted and
    // waited for round after round.
    let per_op = a
        .scope(|s| {
            let mut batch = s.prepare_writes(&writes)?;
            let mut counted = 0;
            for round in 0..WARM + ROUNDS {
                if round == WARM {
                    counted = allocations();
                }
                assert_eq!(s.post_prepared(&mut batch)?.wait()?.bytes(), SIZE * PER);
            }
            Ok::<_, Error>((allocations() - counted) as f64 / (PER * ROUNDS) as f64)
        })
        .expect("prepared writes");
    println!("allocations per operation, prepared batches of {PER} writes: {per_op:.3}");
    assert_eq!(per_op, 0.0, "{per_op:.3} allocations per operation");
    let mut landed = vec![0u8; SIZE * PER];
    target.read(0, &mut landed).expect("read the target");
    assert!(landed.iter().all(|&x| x == 7), "every write landed");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn shared_receive_queue_refills_allocate_nothing() {
    const WARM: usize = 3;
    const ROUNDS: usize = 20;
    // More slots than one stack list holds: a refill posts several lists.
    const SLOTS: usize = 80;
    const SIZE: usize = 64;
    let pd = pd();
    // Refilled by hand below, all slots at once.
    let (mut srq, mut a, _b) = srq_pair(&pd, SLOTS as u32, SIZE);
    let src = registered(&pd, vec![7u8; SIZE]);
    let g = [src.gather(..)];
    let mut buf = [0u8; SIZE];
    let mut counted = 0;
    for round in 0..WARM + ROUNDS {
        if round == WARM {
            counted = allocations();
        }
        for _ in 0..SLOTS {
            a.send(SendWorkRequest::new(&g)).expect("send");
            buf.fill(0);
            let got = srq
                .receive(&mut buf, Duration::from_secs(10))
                .expect("receive")
                .expect("a message within the wait");
            assert_eq!(got.len(), SIZE);
        }
        assert!(buf.iter().all(|&x| x == 7), "the message landed");
        assert_eq!(
            srq.refill().expect("refill"),
            SLOTS,
            "every slot posted again"
        );
    }
    let per_message = (allocations() - counted) as f64 / (SLOTS * ROUNDS) as f64;
    println!(
        "allocations per message through a shared receive queue refilled {SLOTS} slots \
         at a time: {per_message:.3}"
    );
    assert_eq!(per_message, 0.0, "{per_message:.3} allocations per message");
}
