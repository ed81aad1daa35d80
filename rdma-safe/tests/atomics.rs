//! Atomics end to end: fetch-and-add from several channels on one counter
//! adds up exactly and hands out every previous value once; compare-and-swap
//! races have exactly one winner; malformed atomics are refused before
//! anything is posted. The targets are `RemoteAccessBuffer`s, registered
//! with remote atomic access without `unsafe`.

mod common;

use common::*;
use rdma_safe::{
    work::WcOpcode, AtomicWorkRequest, Channel, Error, ProtectionDomain, RegisteredBuffer,
    RemoteAccessBuffer,
};
use std::sync::atomic::Ordering;
use std::sync::Barrier;

/// The value an 8-byte result buffer holds.
fn value(buf: &RegisteredBuffer<Vec<u8>>) -> u64 {
    u64::from_ne_bytes(buf[..8].try_into().unwrap())
}

/// `n` connected pairs; the first channel of each is the requester.
fn pairs(pd: &ProtectionDomain, n: usize) -> Vec<(Channel, Channel)> {
    (0..n).map(|_| pair(pd)).collect()
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn fetch_and_add_from_several_channels_adds_up_exactly() {
    const CHANNELS: usize = 4;
    const ADDS: usize = 200;
    let pd = pd();
    let target = RemoteAccessBuffer::new(&pd, 64).expect("target");
    target.fill(0xEE);
    let base = 1u64 << 40;
    target.words()[3].store(base, Ordering::Release);
    let counter = target.remote().slice(24, 8).expect("word 3");
    let mut pairs = pairs(&pd, CHANNELS);
    let barrier = Barrier::new(CHANNELS);
    let olds: Vec<Vec<u64>> = std::thread::scope(|t| {
        let workers: Vec<_> = pairs
            .iter_mut()
            .enumerate()
            .map(|(k, (a, _b))| {
                let (pd, barrier) = (&pd, &barrier);
                t.spawn(move || {
                    let mut old = registered(pd, vec![0u8; 8]);
                    let mut seen = Vec::with_capacity(ADDS);
                    barrier.wait();
                    for i in 0..ADDS {
                        // Half blocking, half scoped, from every channel.
                        if (i + k) % 2 == 0 {
                            let done = a
                                .run(AtomicWorkRequest::fetch_and_add(
                                    counter,
                                    1,
                                    &mut old.scatter(..),
                                ))
                                .expect("fetch-and-add");
                            assert_eq!(done.opcode(), WcOpcode::FetchAdd);
                            assert_eq!(done.bytes(), 8);
                        } else {
                            a.scope(|s| {
                                let mut result = old.scatter(..);
                                let wr = AtomicWorkRequest::fetch_and_add(counter, 1, &mut result);
                                s.post(wr)?.wait()
                            })
                            .expect("scoped fetch-and-add");
                        }
                        seen.push(value(&old));
                    }
                    seen
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let total = (CHANNELS * ADDS) as u64;
    assert_eq!(target.words()[3].load(Ordering::Acquire), base + total);
    // Every previous value from `base` to `base + total - 1` was handed out
    // exactly once: no add was lost or applied twice.
    let mut all: Vec<u64> = olds.into_iter().flatten().collect();
    all.sort_unstable();
    let expected: Vec<u64> = (base..base + total).collect();
    assert_eq!(all, expected);
    // The neighbours of the counter are untouched.
    let bytes = target.to_vec();
    assert_untouched(&bytes[..24], "before the counter");
    assert_untouched(&bytes[32..], "after the counter");
    for (a, b) in &pairs {
        assert_quiescent(a, "requester");
        assert_quiescent(b, "responder");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn compare_and_swap_races_have_exactly_one_winner() {
    const CHANNELS: usize = 4;
    const ROUNDS: usize = 25;
    let pd = pd();
    let target = RemoteAccessBuffer::new(&pd, ROUNDS * 8).expect("target");
    let mut pairs = pairs(&pd, CHANNELS);
    let barrier = Barrier::new(CHANNELS);
    let remote = target.remote();
    // Each channel tries, in every round, to swap that round's word from 0
    // to its own id (k + 1); it reports the previous value it saw.
    let results: Vec<Vec<u64>> = std::thread::scope(|t| {
        let workers: Vec<_> = pairs
            .iter_mut()
            .enumerate()
            .map(|(k, (a, _b))| {
                let (pd, barrier) = (&pd, &barrier);
                t.spawn(move || {
                    let mut old = registered(pd, vec![0u8; 8]);
                    let mut seen = Vec::new();
                    for round in 0..ROUNDS {
                        let word = remote.slice(8 * round as u64, 8).unwrap();
                        barrier.wait();
                        let mut result = old.scatter(..);
                        let wr =
                            AtomicWorkRequest::compare_and_swap(word, 0, k as u64 + 1, &mut result);
                        let done = a.run(wr).expect("compare-and-swap");
                        assert_eq!(done.opcode(), WcOpcode::CompareSwap);
                        seen.push(value(&old));
                    }
                    seen
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for round in 0..ROUNDS {
        let winner = target.words()[round].load(Ordering::Acquire);
        assert!(
            (1..=CHANNELS as u64).contains(&winner),
            "round {round}: {winner}"
        );
        let saw: Vec<u64> = results.iter().map(|r| r[round]).collect();
        // The winner saw 0; everyone else saw the winner's id.
        assert_eq!(
            saw.iter().filter(|&&v| v == 0).count(),
            1,
            "round {round}: {saw:?}"
        );
        assert_eq!(saw[winner as usize - 1], 0, "round {round}: {saw:?}");
        for (k, &v) in saw.iter().enumerate() {
            if k as u64 + 1 != winner {
                assert_eq!(v, winner, "round {round}: channel {k} saw {v}");
            }
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn malformed_atomics_are_refused_before_posting() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let target = RemoteAccessBuffer::new(&pd, 64).expect("target");
    let remote = target.remote();
    let mut old = registered(&pd, vec![0u8; 32]);
    let refused = |e: Error, what: &str, needle: &str| match e {
        Error::Post { source, .. } => {
            let msg = source.to_string();
            assert!(msg.contains(needle), "{what}: {msg}");
        }
        other => panic!("{what}: expected a refusal before posting, got {other}"),
    };

    let misaligned = remote.slice(4, 8).unwrap();
    let e = a
        .run(AtomicWorkRequest::fetch_and_add(
            misaligned,
            1,
            &mut old.scatter(..8),
        ))
        .unwrap_err();
    refused(e, "misaligned target", "aligned");

    let short = remote.slice(56, 4).unwrap();
    let e = a
        .run(AtomicWorkRequest::compare_and_swap(
            short,
            0,
            1,
            &mut old.scatter(..8),
        ))
        .unwrap_err();
    refused(e, "4-byte remote region", "has only 4");

    for len in [0, 4, 16] {
        let e = a
            .run(AtomicWorkRequest::fetch_and_add(
                remote,
                1,
                &mut old.scatter(..len),
            ))
            .unwrap_err();
        refused(e, &format!("{len}-byte result"), "exactly 8 bytes");
    }
    let e = a
        .scope(|s| {
            let mut result = old.scatter(1..9);
            let wr = AtomicWorkRequest::fetch_and_add(misaligned, 1, &mut result);
            s.post(wr).map(|_| ())
        })
        .unwrap_err();
    match e {
        rdma_safe::ScopeError::ClosureError(e) => refused(e, "scoped misaligned", "aligned"),
        other => panic!("scoped misaligned: {other}"),
    }

    // Nothing reached the NIC: no posts, the target unchanged, the channel
    // still usable; a well-formed atomic then works.
    assert_eq!(a.totals(), (0, 0));
    assert!(a.is_usable());
    assert!(target.to_vec().iter().all(|&x| x == 0));
    target.words()[7].store(41, Ordering::Release);
    a.run(AtomicWorkRequest::fetch_and_add(
        remote.slice(56, 8).unwrap(),
        1,
        &mut old.scatter(8..16),
    ))
    .expect("well-formed fetch-and-add");
    assert_eq!(u64::from_ne_bytes(old[8..16].try_into().unwrap()), 41);
    assert_eq!(target.words()[7].load(Ordering::Acquire), 42);
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn atomic_result_can_land_in_a_remote_access_buffer() {
    let pd = pd();
    let (mut a, _b) = pair(&pd);
    let target = RemoteAccessBuffer::new(&pd, 16).expect("target");
    let results = RemoteAccessBuffer::new(&pd, 16).expect("results");
    results.fill(0xEE);
    target.words()[1].store(7, Ordering::Release);
    let word = target.remote().slice(8, 8).unwrap();
    let mut result = results.scatter(8..16).expect("element");
    a.run(AtomicWorkRequest::compare_and_swap(word, 7, 9, &mut result))
        .expect("compare-and-swap");
    assert_eq!(results.words()[1].load(Ordering::Acquire), 7);
    assert_untouched(&results.to_vec()[..8], "the other word");
    assert_eq!(target.words()[1].load(Ordering::Acquire), 9);
}
