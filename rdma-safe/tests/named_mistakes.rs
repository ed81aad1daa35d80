//! Mistakes a new user makes get an error that names the mistake, not only
//! the status the NIC reported: memory of another protection domain
//! (refused before posting), a message larger than the peer's receive
//! (both sides), and a scope that ends with receives nobody fills. Each
//! test pins the text a user reads.

mod common;

use common::*;
use rdma_safe::{
    error::{ErrorKind, Operation},
    work::WcStatus,
    AtomicWorkRequest, Error, ReadWorkRequest, ReceiveWorkRequest, ScopeError, SendWorkRequest,
    WriteWorkRequest,
};
use std::time::{Duration, Instant};

/// Timeout of the channels that are expected to fail or time out.
const SHORT: Duration = Duration::from_secs(2);
/// A failing call must return within this: it only detects a hang.
const BOUND: Duration = Duration::from_secs(60);

/// Asserts a refusal before posting of `operation` that names the domain
/// mistake.
#[track_caller]
fn assert_foreign_domain(result: Result<impl std::fmt::Debug, Error>, operation: Operation) {
    let err = result.expect_err("an element of another protection domain");
    let text = err.to_string();
    eprintln!("{operation}: {text}");
    assert!(
        matches!(err, Error::Post { operation: op, .. } if op == operation),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    assert!(
        text.contains("another protection domain than the channel's"),
        "{text}"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn region_of_another_protection_domain_is_refused_before_posting() {
    let pd = pd();
    let other_pd = rdma_safe::ProtectionDomain::new(pd.context()).expect("second PD");
    let (mut a, mut b) = pair(&pd);
    let mut target = vec![FILL; 128];
    // SAFETY: `target` outlives `target_mr`; Rust reads it only after the
    // last operation on it completed.
    let target_mr = unsafe { shared_mr(&pd, &mut target) };
    // Checked elements: each slice is inside its region, but the region
    // belongs to a domain the channel is not in.
    let foreign = registered(&other_pd, pattern(seed("other pd", 128), 128));
    let mut foreign_rx = registered(&other_pd, vec![FILL; 128]);
    let own = registered(&pd, pattern(seed("own pd", 128), 128));

    assert_foreign_domain(
        a.write(WriteWorkRequest::new(
            &[foreign.gather(..)],
            target_mr.remote(),
        )),
        Operation::Write,
    );
    assert_foreign_domain(
        a.send(SendWorkRequest::new(&[
            own.gather(..64),
            foreign.gather(..),
        ])),
        Operation::Send,
    );
    assert_foreign_domain(
        a.read(ReadWorkRequest::new(
            &mut [foreign_rx.scatter(..)],
            target_mr.remote(),
        )),
        Operation::Read,
    );
    let mut result = [foreign_rx.scatter(..8)];
    let remote = target_mr.remote();
    assert_foreign_domain(
        a.run(AtomicWorkRequest::fetch_and_add(remote, 1, &mut result[0])),
        Operation::FetchAndAdd,
    );
    assert_foreign_domain(
        b.scope(|s| {
            s.post_receive(ReceiveWorkRequest::new(&mut [foreign_rx.scatter(..)]))
                .map(drop)
        })
        .map_err(ScopeError::flatten),
        Operation::Receive,
    );
    // Nothing was posted: both channels still work, with memory of their
    // own domain.
    assert!(a.is_usable() && b.is_usable());
    a.write(WriteWorkRequest::new(&[own.gather(..)], target_mr.remote()))
        .expect("a write of the channel's own domain");
    drop(target_mr);
    assert_bytes(&target, &own, "the write of the own domain");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn message_longer_than_the_receive_buffer_names_the_size_mistake() {
    let pd = pd();
    let (mut a, mut b) = pair_with_timeout(&pd, SHORT);
    let tx = registered(&pd, pattern(seed("too long message", 150), 150));
    let mut rx = registered(&pd, vec![FILL; 200]);

    let start = Instant::now();
    let (sent, got) = b
        .scope(|s| {
            let mut scatter = [rx.scatter(..100)];
            let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            let sent = a.send(SendWorkRequest::new(&[tx.gather(..)]));
            Ok::<_, Error>((sent, recv.wait()))
        })
        .expect("scope");
    eprintln!("receive: {got:?}");
    eprintln!("send: {sent:?}");
    // The IB spec says local length error; rxe (Linux 6.1) reports a local
    // QP operation error ("malformed WQE"): both name the size.
    match &got {
        Err(
            e @ Error::WorkCompletion {
                operation: Operation::Receive,
                status: WcStatus::LocalLengthError | WcStatus::LocalQpOperationError,
                ..
            },
        ) => {
            let text = e.to_string();
            assert!(
                text.contains("the incoming message was larger than this receive's buffer"),
                "{text}"
            );
        }
        other => panic!("expected the receive to fail on the size, got {other:?}"),
    }
    // A NAK names the size on the sender's side; rxe never NAKs here, and
    // the send ends by the channel's timeout.
    match &sent {
        Err(
            e @ Error::WorkCompletion {
                operation: Operation::Send,
                status: WcStatus::RemoteInvalidRequestError | WcStatus::RemoteOperationError,
                ..
            },
        ) => {
            let text = e.to_string();
            assert!(
                text.contains("larger than the receive the peer had posted"),
                "{text}"
            );
        }
        Err(Error::Timeout {
            operation: Operation::Send,
            ..
        }) => {}
        other => panic!("expected the send to fail, got {other:?}"),
    }
    assert!(start.elapsed() < BOUND, "took {:?}", start.elapsed());
    assert_untouched(&rx[100..], "past the receive buffer");
    assert!(!a.is_usable() && !b.is_usable());
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn scope_ended_with_receives_nobody_fills_says_so() {
    let pd = pd();
    let (a, mut b) = pair_with_timeout(&pd, SHORT);
    let mut rx = registered(&pd, vec![FILL; 3 * 64]);

    let start = Instant::now();
    let result = b.scope(|s| {
        for mut c in scatter_chunks(&mut rx, 64) {
            let _left = s.post_receive(ReceiveWorkRequest::new(&mut c))?;
        }
        Ok::<_, Error>(())
    });
    let took = start.elapsed();
    match &result {
        Err(ScopeError::AutoPollError(
            e @ Error::UnfilledReceives {
                receives: 3,
                timeout,
            },
        )) => {
            assert_eq!(*timeout, SHORT);
            assert_eq!(e.kind(), ErrorKind::TimedOut);
            let text = e.to_string();
            eprintln!("{text}");
            assert!(
                text.contains("the scope ended with 3 receive(s) still posted"),
                "{text}"
            );
            assert!(text.contains("nobody sent"), "{text}");
        }
        other => panic!("expected the unfilled receives to be named, got {other:?}"),
    }
    assert!(took < BOUND, "scope took {took:?}");
    assert_untouched(&rx, "nothing received");
    assert!(!b.is_usable());
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}
