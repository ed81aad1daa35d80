//! `RemoteAccessBuffer`: memory a peer reads, writes and updates while local
//! code copies in and out, registered with remote access and no `unsafe`.
//! Checked byte for byte; concurrent atomics are seen only as whole values;
//! after the buffer is dropped its rkey no longer works.

mod common;

use common::*;
use rdma_safe::{
    work::WcStatus, AtomicWorkRequest, Error, ReadWorkRequest, RemoteAccessBuffer, WriteWorkRequest,
};
use std::sync::atomic::{AtomicBool, Ordering};

/// The value of every word in write round `r` (never 0, never FILL bytes).
fn round_word(r: u64) -> u64 {
    u64::from_le_bytes(pattern(seed("round", r as usize), 8).try_into().unwrap()) | 1
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn peer_writes_while_local_code_copies_out() {
    const LEN: usize = 64 * 1024;
    const ROUNDS: u64 = 40;
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let shared = RemoteAccessBuffer::new(&pd, LEN).expect("shared buffer");
    let remote = shared.remote();
    let done = AtomicBool::new(false);
    let (copies, torn) = std::thread::scope(|t| {
        let reader = t.spawn(|| {
            // Copy out continuously while the peer writes; every word copied
            // is an initialised u64 whatever the NIC does meanwhile.
            let mut copy = vec![0u8; LEN];
            let (mut copies, mut torn) = (0u64, 0u64);
            let valid: Vec<u64> = std::iter::once(0)
                .chain((0..ROUNDS).map(round_word))
                .collect();
            while !done.load(Ordering::Acquire) || copies == 0 {
                shared.read(0, &mut copy).expect("in bounds");
                copies += 1;
                torn += copy
                    .chunks_exact(8)
                    .filter(|w| !valid.contains(&u64::from_ne_bytes((*w).try_into().unwrap())))
                    .count() as u64;
            }
            (copies, torn)
        });
        let mut src = registered(&pd, vec![0u8; LEN]);
        for r in 0..ROUNDS {
            let word = round_word(r).to_ne_bytes();
            for chunk in src.chunks_exact_mut(8) {
                chunk.copy_from_slice(&word);
            }
            a.write(WriteWorkRequest::new(&[src.gather(..)], remote))
                .expect("peer write");
        }
        done.store(true, Ordering::Release);
        reader.join().unwrap()
    });
    // RDMA writes promise no 8-byte atomicity (rxe copies with memcpy), so
    // mixed words are possible while a write is in flight; report them.
    eprintln!("{copies} copies taken during {ROUNDS} writes; {torn} words seen mid-write");
    // Once the writes completed, the copy is exactly the last round.
    let last = round_word(ROUNDS - 1).to_ne_bytes().repeat(LEN / 8);
    assert_bytes(&shared.to_vec(), &last, "after the last write");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn concurrent_peer_atomics_are_seen_as_whole_values() {
    const ADDS: u64 = 200;
    // Every byte of the addend is 1: a torn value would show as a word whose
    // bytes differ.
    const STEP: u64 = 0x0101_0101_0101_0101;
    let pd = pd();
    let (mut a, _b) = pair(&pd);
    let shared = RemoteAccessBuffer::new(&pd, 64).expect("shared buffer");
    let word = shared.remote().slice(16, 8).unwrap();
    let done = AtomicBool::new(false);
    let seen = std::thread::scope(|t| {
        let watcher = t.spawn(|| {
            let (mut last, mut seen) = (0u64, 0u64);
            let mut copy = [0u8; 8];
            while !done.load(Ordering::Acquire) {
                let v = shared.words()[2].load(Ordering::Acquire);
                shared.read(16, &mut copy).unwrap();
                let c = u64::from_ne_bytes(copy);
                for x in [v, c] {
                    assert_eq!(x % STEP, 0, "a partial atomic update was seen: {x:#x}");
                    assert!(x >= last, "the counter went backwards: {x:#x} < {last:#x}");
                    last = x;
                }
                seen += 1;
            }
            seen
        });
        let mut old = registered(&pd, vec![0u8; 8]);
        for i in 0..ADDS {
            a.run(AtomicWorkRequest::fetch_and_add(
                word,
                STEP,
                &mut old.scatter(..),
            ))
            .expect("fetch-and-add");
            assert_eq!(u64::from_ne_bytes(old[..8].try_into().unwrap()), i * STEP);
        }
        done.store(true, Ordering::Release);
        watcher.join().unwrap()
    });
    eprintln!("{seen} loads while {ADDS} atomics ran");
    assert_eq!(shared.words()[2].load(Ordering::Acquire), ADDS * STEP);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn peer_reads_what_local_code_copied_in() {
    let pd = pd();
    let (mut a, _b) = pair(&pd);
    let shared = RemoteAccessBuffer::new(&pd, 100).expect("shared buffer");
    assert_eq!(shared.len(), 104, "rounded up to whole words");
    shared.fill(FILL);
    // Unaligned start and end: the partial words keep their other bytes.
    let data = pattern(seed("copy in", 61), 61);
    shared.write(5, &data).expect("in bounds");
    assert!(shared.write(100, &[0; 5]).is_err(), "past the end");
    let mut copy = registered(&pd, vec![0u8; 104]);
    a.read(ReadWorkRequest::new(
        &mut [copy.scatter(..)],
        shared.remote(),
    ))
    .expect("peer read");
    assert_untouched(&copy[..5], "before the copied-in bytes");
    assert_bytes(&copy[5..66], &data, "copied-in bytes");
    assert_untouched(&copy[66..], "after the copied-in bytes");
    // The buffer's own elements work as local sources and targets.
    let mut back = [0u8; 61];
    shared.read(5, &mut back).unwrap();
    assert_bytes(&back, &data, "copied out");
    let target = RemoteAccessBuffer::new(&pd, 128).expect("target");
    a.write(WriteWorkRequest::new(
        &[shared.gather(5..66).unwrap()],
        target.remote(),
    ))
    .expect("write from a remote-access buffer");
    assert_bytes(&target.to_vec()[..61], &data, "written from the buffer");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn dropping_the_buffer_revokes_its_rkey() {
    let pd = pd();
    let (mut a, _b) = pair(&pd);
    let shared = RemoteAccessBuffer::new(&pd, 4096).expect("shared buffer");
    let remote = shared.remote();
    let src = registered(&pd, pattern(1, 64));
    a.write(WriteWorkRequest::new(&[src.gather(..)], remote))
        .expect("write while registered");
    drop(shared);
    let e = a
        .write(WriteWorkRequest::new(&[src.gather(..)], remote))
        .expect_err("a write through the dropped buffer's rkey");
    match e {
        Error::WorkCompletion { status, .. } => {
            assert_eq!(status, WcStatus::RemoteAccessError, "{e}")
        }
        other => panic!("expected a remote access error, got {other}"),
    }
}
