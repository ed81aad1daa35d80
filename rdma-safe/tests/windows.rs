//! Memory windows: memory lent to a peer with `Channel::lend` is reachable
//! through the window's key inside the scope and through nothing after it,
//! also when the closure panics; the window covers exactly the lent bytes
//! and grants exactly the rights asked for.

mod common;

use common::*;
use rdma_safe::{
    error::Operation, memory::AccessFlags, work::WcStatus, Error, ReadWorkRequest,
    RemoteMemoryRegion, WriteWorkRequest,
};

#[track_caller]
fn assert_remote_access_error(e: Error, what: &str) {
    match e {
        Error::WorkCompletion { status, .. } => {
            assert_eq!(status, WcStatus::RemoteAccessError, "{what}: {e}")
        }
        other => panic!("{what}: expected a remote access error, got {other}"),
    }
}

/// A refused remote access moves the lender's queue pair to the error state
/// too, so the invalidation at the end of the scope is flushed; `lend`
/// reports it (and has deregistered the memory all the same).
#[track_caller]
fn assert_invalidation_flushed(e: Error) {
    match e {
        Error::WorkCompletion {
            operation: Operation::InvalidateWindow,
            status: WcStatus::WrFlushError,
            ..
        } => {}
        other => panic!("expected a flushed invalidation, got {other}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn window_key_works_inside_the_scope_and_fails_after() {
    let pd = pd();
    let (mut lender, mut peer) = pair(&pd);
    let mut memory = vec![FILL; 4096 + 2 * CANARY];
    let data = pattern(seed("window", 4096), 4096);
    let src = registered(&pd, data.clone());
    let mut back = registered(&pd, vec![0u8; 4096]);
    let lent = &mut memory[CANARY..CANARY + 4096];
    let access = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let window = lender
        .lend(lent, access, |_, window| {
            assert_eq!(window.length(), 4096);
            peer.write(WriteWorkRequest::new(&[src.gather(..)], window))
                .expect("peer write through the window");
            peer.read(ReadWorkRequest::new(&mut [back.scatter(..)], window))
                .expect("peer read through the window");
            window
        })
        .expect("lend");
    // The borrow has ended: the bytes are ours and hold what the peer wrote.
    assert_bytes(&memory[CANARY..CANARY + 4096], &data, "lent memory");
    assert_untouched(&memory[..CANARY], "before the lent memory");
    assert_untouched(&memory[CANARY + 4096..], "after the lent memory");
    assert_bytes(&back, &data, "read back through the window");
    // The same key now fails at the lender's NIC.
    let e = peer
        .write(WriteWorkRequest::new(&[src.gather(..8)], window))
        .expect_err("a write through the revoked window");
    assert_remote_access_error(e, "after the scope");
    assert_bytes(
        &memory[CANARY..CANARY + 4096],
        &data,
        "lent memory after the refused write",
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn window_is_revoked_when_the_closure_panics() {
    let pd = pd();
    let (mut lender, mut peer) = pair(&pd);
    let mut memory = vec![FILL; 256];
    let src = registered(&pd, pattern(7, 256));
    let mut window = None;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = lender.lend(&mut memory, AccessFlags::REMOTE_WRITE, |_, w| {
            window = Some(w);
            peer.write(WriteWorkRequest::new(&[src.gather(..)], w))
                .expect("peer write through the window");
            panic!("the closure fails after handing out the key");
        });
    }));
    assert!(caught.is_err(), "the panic resumes after the revocation");
    assert_bytes(&memory, &pattern(7, 256), "written before the panic");
    let e = peer
        .write(WriteWorkRequest::new(&[src.gather(..)], window.unwrap()))
        .expect_err("a write through the window of a panicked scope");
    assert_remote_access_error(e, "after the panic");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn window_covers_only_the_lent_range() {
    let pd = pd();
    let (mut lender, mut peer) = pair(&pd);
    let mut memory = vec![FILL; 512];
    let src = registered(&pd, pattern(9, 512));
    let (head, rest) = memory.split_at_mut(128);
    let (lent, _tail) = rest.split_at_mut(128);
    let mut past_end = None;
    let e = lender
        .lend(lent, AccessFlags::REMOTE_WRITE, |_, w| {
            peer.write(WriteWorkRequest::new(&[src.gather(..128)], w))
                .expect("write within the window");
            // One byte past the end: the NIC refuses the whole write.
            let past = RemoteMemoryRegion::new(w.address(), w.length() + 1, w.rkey());
            past_end = Some(peer.write(WriteWorkRequest::new(&[src.gather(..129)], past)));
        })
        .expect_err("the refused access broke the connection");
    assert_remote_access_error(past_end.unwrap().unwrap_err(), "past the window");
    assert_invalidation_flushed(e);
    assert_untouched(head, "before the window");
    assert_bytes(&memory[128..256], &pattern(9, 128), "the window");
    assert_untouched(&memory[256..], "after the window");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn read_only_window_refuses_writes() {
    let pd = pd();
    let (mut lender, mut peer) = pair(&pd);
    let mut memory = pattern(11, 64);
    let src = registered(&pd, vec![0u8; 64]);
    let mut back = registered(&pd, vec![0u8; 64]);
    let mut write = None;
    let e = lender
        .lend(&mut memory, AccessFlags::REMOTE_READ, |_, w| {
            peer.read(ReadWorkRequest::new(&mut [back.scatter(..)], w))
                .expect("read through a read-only window");
            write = Some(peer.write(WriteWorkRequest::new(&[src.gather(..)], w)));
        })
        .expect_err("the refused access broke the connection");
    assert_remote_access_error(write.unwrap().unwrap_err(), "write to a read-only window");
    assert_invalidation_flushed(e);
    assert_bytes(&back, &pattern(11, 64), "read through the window");
    assert_bytes(&memory, &pattern(11, 64), "memory after the refused write");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn bad_lends_are_refused_before_anything_is_posted() {
    let pd = pd();
    let (mut lender, _peer) = pair(&pd);
    let mut memory = vec![0u8; 64];
    for (what, access, len) in [
        ("empty memory", AccessFlags::REMOTE_WRITE, 0),
        ("no rights", AccessFlags::empty(), 64),
        ("local rights", AccessFlags::LOCAL_WRITE, 64),
        (
            "window binding",
            AccessFlags::REMOTE_READ | AccessFlags::MW_BIND,
            64,
        ),
    ] {
        let e = lender
            .lend(&mut memory[..len], access, |_, _| {
                panic!("{what}: the closure ran")
            })
            .expect_err(what);
        assert!(matches!(e, Error::Verbs(_)), "{what}: {e}");
    }
    assert_eq!(lender.totals(), (0, 0));
    // A good lend still works on the channel: bind and invalidation complete.
    lender
        .lend(&mut memory, AccessFlags::REMOTE_WRITE, |_, _| ())
        .expect("lend");
    assert_eq!(lender.totals(), (2, 2));
    assert_quiescent(&lender, "lender");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn window_key_is_useless_on_another_connection() {
    // A type 2 window serves only the queue pair it was bound on: a peer on
    // another connection into the same protection domain cannot use its key.
    let pd = pd();
    let (mut lender, mut peer) = pair(&pd);
    let (_other_side, mut other_peer) = pair(&pd);
    let mut memory = vec![FILL; 128];
    let src = registered(&pd, pattern(13, 128));
    let mut stranger = None;
    let e = lender.lend(&mut memory, AccessFlags::REMOTE_WRITE, |_, w| {
        stranger = Some(other_peer.write(WriteWorkRequest::new(&[src.gather(..)], w)));
        // The rightful peer is unaffected by the stranger's failure.
        peer.write(WriteWorkRequest::new(&[src.gather(..)], w))
            .expect("the bound connection's peer writes");
    });
    e.expect("lend: the lender's connection was not the one refused");
    assert_remote_access_error(
        stranger.unwrap().unwrap_err(),
        "the window's key on another connection",
    );
    assert_bytes(&memory, &pattern(13, 128), "written by the bound peer only");
}
