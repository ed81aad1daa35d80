//! Many threads posting on one `SharedChannel` at once: sends arrive whole
//! and, per thread, in the order that thread posted them (a reliable
//! connection keeps the send queue's order, and each thread's posts enter
//! it in its own order); RDMA writes from every thread land in their own
//! ranges; the bookkeeping ends balanced.

mod common;

use common::*;
use rdma_safe::owned::Request;
use rdma_safe::{BufferPool, RemoteAccessBuffer};
use std::collections::HashMap;

const THREADS: usize = 4;
const PER_THREAD: usize = 100;
const LEN: usize = 256;

/// Message `k` of thread `t`: its first two bytes name both.
fn message(t: usize, k: usize) -> Vec<u8> {
    let mut m = pattern(
        seed(&format!("thread {t}"), k),
        8 + (k * 29 + t * 7) % (LEN - 8),
    );
    m[0] = t as u8;
    m[1] = k as u8;
    m
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn threads_sending_on_one_shared_channel_keep_their_order() {
    let pd = pd();
    let (a, b) = pair(&pd);
    let (a, b) = (a.shared(), b.shared());
    let pool = BufferPool::new(&pd, LEN, 4 * THREADS + 32).expect("a pool");
    let received = std::thread::scope(|t| {
        // The receiver keeps 16 receives posted through a callback-free
        // loop of blocking receives on its own thread.
        let receiver = t.spawn(|| {
            let mut got = Vec::with_capacity(THREADS * PER_THREAD);
            for n in 0..THREADS * PER_THREAD {
                let rx = pool
                    .alloc_timeout(std::time::Duration::from_secs(30))
                    .expect("rx");
                let (outcome, buf) = b.run(Request::receive(rx));
                let done = outcome.unwrap_or_else(|e| panic!("receive {n}: {e}"));
                got.push(buf[..done.bytes()].to_vec());
            }
            got
        });
        for th in 0..THREADS {
            let (a, pool) = (&a, &pool);
            t.spawn(move || {
                for k in 0..PER_THREAD {
                    let mut tx = pool
                        .alloc_timeout(std::time::Duration::from_secs(30))
                        .expect("tx");
                    tx.fill_from(&message(th, k));
                    // The receiver may be behind: RNR retries wait for it.
                    let (outcome, _) = a.run(Request::send(tx.freeze()));
                    outcome.unwrap_or_else(|e| panic!("thread {th} send {k}: {e}"));
                }
            });
        }
        receiver.join().expect("the receiver")
    });
    let mut next: HashMap<usize, usize> = HashMap::new();
    for (n, m) in received.iter().enumerate() {
        let th = m[0] as usize;
        assert!(th < THREADS, "message {n}: no thread {th}");
        let k = next.entry(th).or_default();
        assert_eq!(
            m[1] as usize,
            *k % 256,
            "message {n}: thread {th} out of order"
        );
        assert_bytes(m, &message(th, *k), &format!("thread {th} message {k}"));
        *k += 1;
    }
    assert!(next.values().all(|&k| k == PER_THREAD), "{next:?}");
    assert_idle(&a, "sender");
    assert_idle(&b, "receiver");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn threads_writing_through_one_shared_channel_land_in_their_ranges() {
    const SLICE: usize = 4096;
    const WRITES: usize = 50;
    let pd = pd();
    let (a, _b) = pair(&pd);
    let a = a.shared();
    let target = RemoteAccessBuffer::new(&pd, THREADS * SLICE).expect("the target");
    let remote = target.remote();
    let pool = BufferPool::new(&pd, SLICE, 2 * THREADS).expect("a pool");
    std::thread::scope(|t| {
        for th in 0..THREADS {
            let (a, pool) = (&a, &pool);
            t.spawn(move || {
                let range = remote
                    .slice((th * SLICE) as u64, SLICE as u64)
                    .expect("the thread's range");
                for w in 0..WRITES {
                    let mut src = pool
                        .alloc_timeout(std::time::Duration::from_secs(30))
                        .expect("src");
                    src.fill_from(&pattern(seed(&format!("write {th}"), w), SLICE));
                    let (outcome, _) = a.run(Request::write(src.freeze(), range));
                    outcome.unwrap_or_else(|e| panic!("thread {th} write {w}: {e}"));
                }
            });
        }
    });
    let bytes = target.to_vec();
    for th in 0..THREADS {
        let last = pattern(seed(&format!("write {th}"), WRITES - 1), SLICE);
        assert_bytes(
            &bytes[th * SLICE..(th + 1) * SLICE],
            &last,
            &format!("thread {th}'s range after its last write"),
        );
    }
    assert_idle(&a, "writer");
}
