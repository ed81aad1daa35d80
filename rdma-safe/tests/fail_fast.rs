//! Failing fast instead of waiting out the timeout: a scope whose closure
//! fails can cancel its outstanding work, and a queue pair the device moved
//! to the error state is reported at once (issue 15).

mod common;

use common::*;
use rdma_safe::{
    Error, ReceiveWorkRequest, RegisteredBuffer, RemoteMemoryRegion, ScopeError, WriteWorkRequest,
};
use std::time::{Duration, Instant};

/// Long enough that a call which waited for it would stand out from one
/// that did not, even on a slow, loaded machine.
const LONG: Duration = Duration::from_secs(120);
/// Generous bound for "did not wait for LONG".
const PROMPT: Duration = Duration::from_secs(60);

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn failed_scope_cancels_its_receives_when_asked() {
    let pd = pd();
    let (_a, mut b) = pair_with_timeout(&pd, LONG);
    let mut rx = RegisteredBuffer::register(&pd, vec![FILL; 4096]).expect("register");
    let started = Instant::now();
    let outcome = b.scope(|s| -> Result<(), &'static str> {
        s.cancel_on_error();
        let mut scatter = [rx.scatter(..)];
        let _recv = s
            .post_receive(ReceiveWorkRequest::new(&mut scatter))
            .expect("post receive");
        Err("the closure gave up")
    });
    let took = started.elapsed();
    assert!(
        matches!(
            outcome,
            Err(ScopeError::ClosureError("the closure gave up"))
        ),
        "{outcome:?}"
    );
    assert!(
        took < PROMPT,
        "the scope waited {took:?} for a receive nobody fills"
    );
    assert!(
        !b.is_usable(),
        "cancelling moved the queue pair to the error state"
    );
    assert_eq!(b.outstanding(), 0);
    assert_untouched(&rx, "the cancelled receive's buffer");
    let (posted, completed) = b.totals();
    assert_eq!(posted, completed, "the flushed receive was seen");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn peer_error_is_reported_without_waiting_for_the_timeout() {
    let pd = pd();
    let (mut a, mut b) = pair_with_timeout(&pd, LONG);
    // A write to a key b never issued: a gets a remote access error, and the
    // device moves the connection's queue pairs to the error state.
    let src = RegisteredBuffer::register(&pd, pattern(seed("bad rkey", 64), 64)).expect("src");
    let bogus = RemoteMemoryRegion::new(0x1000, 64, 0xdead_beef);
    let err = a
        .write(WriteWorkRequest::new(&[src.gather(..)], bogus))
        .expect_err("a write with a bogus rkey");
    assert!(matches!(err, Error::WorkCompletion { .. }), "{err:?}");
    // b's receive must fail promptly, not after the whole timeout.
    let mut rx = RegisteredBuffer::new(&pd, 64).expect("rx");
    let started = Instant::now();
    let outcome = b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]));
    let took = started.elapsed();
    match outcome {
        // rxe moves the responder's QP to the error state as well: the
        // receive is flushed.
        Err(e) => {
            assert!(took < PROMPT, "took {took:?} to report {e}");
            assert!(!b.is_usable());
        }
        // A device that keeps the responder usable would block until the
        // timeout instead; that is not what happened if we got here.
        Ok(done) => panic!("a receive completed with nothing sent: {done:?}"),
    }
    assert!(!a.is_usable());
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}
