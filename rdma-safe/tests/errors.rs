//! Failures surface as typed errors: remote access errors (bad rkey, access
//! not granted), local protection errors (an unchecked SGE outside its
//! region), checked-constructor errors, requests rejected before posting, and
//! bounded waits that time out, shut the channel down and drain it.

mod common;

use common::*;
use rdma_safe::{
    channel::ConnectOptions, error::Operation, error::ScatterGatherElementError,
    memory::AccessFlags, work::WcStatus, Channel, Error, MemoryRegion, ReadWorkRequest,
    ReceiveWorkRequest, RemoteMemoryRegion, ScopeError, SendWorkRequest, WriteWorkRequest,
};
use std::time::{Duration, Instant};

/// Timeout of the channels that are expected to time out.
const SHORT: Duration = Duration::from_secs(2);
/// A timed-out call must return within this: it only detects a hang (the
/// timeout plus the drain take seconds even on a loaded, emulated machine).
const BOUND: Duration = Duration::from_secs(60);

#[track_caller]
fn assert_work_completion(
    result: Result<impl std::fmt::Debug, Error>,
    operation: Operation,
    status: WcStatus,
) {
    match result {
        Err(Error::WorkCompletion {
            operation: op,
            status: st,
            ..
        }) if op == operation && st == status => {}
        other => panic!("expected {operation} to fail with {status:?}, got {other:?}"),
    }
}

#[track_caller]
fn assert_unusable(ch: &mut rdma_safe::Channel, pd: &rdma_safe::ProtectionDomain) {
    assert!(!ch.is_usable());
    assert!(ch.unusable_reason().is_some());
    let buf = registered(pd, vec![1u8; 16]);
    match ch.send(SendWorkRequest::new(&[buf.gather(..)])) {
        Err(Error::Unusable(why)) => assert!(!why.is_empty()),
        other => panic!("expected Unusable, got {other:?}"),
    }
    assert_eq!(ch.outstanding(), 0);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn bad_rkey_is_a_remote_access_error() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let mut target = vec![FILL; 4096];
    // SAFETY: `target` outlives `target_mr`; Rust reads it only after the
    // (failed) write completed.
    let target_mr = unsafe { shared_mr(&pd, &mut target) };
    let good = target_mr.remote();
    let bad = RemoteMemoryRegion::new(good.address(), good.length(), good.rkey() ^ 0x00ff_ff00);
    let src = registered(&pd, pattern(seed("bad rkey", 4096), 4096));

    let result = a.write(WriteWorkRequest::new(&[src.gather(..)], bad));
    assert_work_completion(result, Operation::Write, WcStatus::RemoteAccessError);
    let err = a
        .write(WriteWorkRequest::new(&[src.gather(..)], good))
        .expect_err("the channel is shut down");
    assert!(matches!(err, Error::Unusable(_)), "{err:?}");
    assert_unusable(&mut a, &pd);
    drop(target_mr);
    assert_untouched(&target, "target of the rejected write");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn remote_range_outside_the_region_is_a_remote_access_error() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let mut target = vec![FILL; 4096];
    // SAFETY: `target` outlives `target_mr`; nothing lands in it.
    let target_mr = unsafe { shared_mr(&pd, &mut target) };
    let good = target_mr.remote();
    // A fabricated region claiming to extend past the registered one.
    let beyond = RemoteMemoryRegion::new(good.address() + 4000, 200, good.rkey());
    let mut dst = registered(&pd, vec![FILL; 200]);
    let result = a.read(ReadWorkRequest::new(&mut [dst.scatter(..)], beyond));
    assert_work_completion(result, Operation::Read, WcStatus::RemoteAccessError);
    assert_unusable(&mut a, &pd);
    assert_untouched(&dst, "target of the rejected read");
    drop(target_mr);
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn access_not_granted_is_a_remote_access_error() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let mut target = pattern(seed("write only", 512), 512);
    let expected = target.clone();
    // SAFETY: `target` outlives `target_mr`; Rust reads it only after the
    // (failed) read completed.
    let target_mr = unsafe {
        MemoryRegion::register_mr_with_access(
            &pd,
            target.as_mut_ptr(),
            target.len(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
    }
    .expect("register write-only region");
    let mut dst = registered(&pd, vec![FILL; 512]);
    let result = a.read(ReadWorkRequest::new(
        &mut [dst.scatter(..)],
        target_mr.remote(),
    ));
    assert_work_completion(result, Operation::Read, WcStatus::RemoteAccessError);
    assert_untouched(&dst, "read target");
    drop(target_mr);
    assert_bytes(&target, &expected, "unchanged");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn unchecked_gather_outside_its_region_is_a_local_protection_error() {
    let pd = pd();
    // Once as a write, once as a send (fresh pairs: the first failure shuts
    // a channel down). No receive is posted: the request fails before any
    // packet leaves.
    for op in [Operation::Write, Operation::Send] {
        let (mut a, b) = pair(&pd);
        let buf = registered(&pd, vec![0u8; 4096]);
        let mr = buf.region();
        let outside = pattern(seed("outside", 256), 256);
        assert!(!mr.encloses_slice(&outside));
        let mut target = vec![FILL; 256];
        // SAFETY: `target` outlives `target_mr`; Rust reads it only after
        // the (failed) write completed.
        let target_mr = unsafe { shared_mr(&pd, &mut target) };

        let g = [mr.gather_element_unchecked(&outside)];
        let result = match op {
            Operation::Write => a.write(WriteWorkRequest::new(&g, target_mr.remote())),
            _ => a.send(SendWorkRequest::new(&g)),
        };
        assert_work_completion(result, op, WcStatus::LocalProtectionError);
        assert_unusable(&mut a, &pd);
        drop(target_mr);
        assert_untouched(&target, "nothing written");
        assert_quiescent(&a, "a");
        assert_quiescent(&b, "b");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn unchecked_scatter_outside_its_region_is_a_local_protection_error() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let mut src = pattern(seed("scatter outside", 256), 256);
    // SAFETY: `src` outlives `src_mr` and is only read.
    let src_mr = unsafe { shared_mr(&pd, &mut src) };
    let buf = registered(&pd, vec![0u8; 4096]);
    let mr = buf.region();
    let mut outside = vec![FILL; 256];
    let result = a.read(ReadWorkRequest::new(
        &mut [mr.scatter_element_unchecked(&mut outside)],
        src_mr.remote(),
    ));
    assert_work_completion(result, Operation::Read, WcStatus::LocalProtectionError);
    assert_untouched(&outside, "the NIC did not write outside the region");
    assert_unusable(&mut a, &pd);
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
#[cfg(debug_assertions)]
#[should_panic(expected = "is not within memory region")]
fn debug_checked_gather_element_outside_its_region_panics() {
    let pd = pd();
    let buf = registered(&pd, vec![0u8; 64]);
    let outside = vec![0u8; 8];
    let _ = buf.region().gather_element(&outside);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn checked_constructors_report_slices_outside_the_region() {
    let pd = pd();
    let mut buf = registered(&pd, vec![0u8; 4096]);
    let (mr_addr, mr_len) = (buf.region().address(), buf.region().length());
    let mut elsewhere = vec![0u8; 100];
    let elsewhere_addr = elsewhere.as_ptr() as usize;

    let expected = ScatterGatherElementError::OutsideMemoryRegion {
        slice_addr: elsewhere_addr,
        slice_len: 100,
        mr_addr,
        mr_len,
    };
    let mr = buf.region();
    assert_eq!(mr.gather_element_checked(&elsewhere).unwrap_err(), expected);
    assert_eq!(
        mr.scatter_element_checked(&mut elsewhere).unwrap_err(),
        expected
    );
    assert!(expected.to_string().contains("not within memory region"));
    assert!(rdma_safe::GatherElement::new_checked(mr, &elsewhere).is_err());
    assert!(rdma_safe::ScatterElement::new_checked(mr, &mut elsewhere).is_err());

    // Slices inside (including empty ones at both ends) are accepted.
    assert_eq!(mr.gather_element_checked(&buf).unwrap().len(), 4096);
    assert!(mr.gather_element_checked(&buf[..0]).unwrap().is_empty());
    assert!(mr.gather_element_checked(&buf[4096..]).unwrap().is_empty());
    let (mr, bytes) = buf.split_mut();
    assert_eq!(
        mr.scatter_element_checked(&mut bytes[4000..])
            .unwrap()
            .len(),
        96
    );
    // A slice that straddles the region's end (a longer buffer, registered
    // only in part) is outside. Only a raw registration can leave the rest
    // of a buffer accessible beside the region.
    let mut longer = vec![0u8; 200];
    // SAFETY: `longer` is neither resized nor freed while `part` lives
    // (`part` is dropped explicitly below, before `longer`), so the range
    // stays on the pages pinned here; nothing is posted with the region.
    let part = unsafe { MemoryRegion::register_local_mr(&pd, longer.as_mut_ptr(), 100) }
        .expect("register the first half");
    assert!(part.gather_element_checked(&longer[50..150]).is_err());
    assert!(part.gather_element_checked(&longer[..100]).is_ok());
    drop(part);
    // `TooLong` (over u32::MAX bytes inside a region) would need a 4 GiB
    // registration; its message is all that can be checked cheaply.
    assert!(ScatterGatherElementError::TooLong(1 << 32)
        .to_string()
        .contains("4294967296"));
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn requests_that_cannot_fit_are_rejected_before_posting() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let mut exposed = vec![FILL; 1024];
    // SAFETY: `exposed` outlives `exposed_mr`; Rust reads it only after the
    // operations completed.
    let exposed_mr = unsafe { shared_mr(&pd, &mut exposed) };
    let small = exposed_mr.remote().slice(0, 100).unwrap();
    let src = registered(&pd, pattern(seed("too long", 200), 200));

    // A write longer than the remote range.
    let err = a
        .write(WriteWorkRequest::new(&[src.gather(..)], small))
        .expect_err("write longer than the remote range");
    assert!(
        matches!(
            err,
            Error::Post {
                operation: Operation::Write,
                ..
            }
        ),
        "{err:?}"
    );
    // A read longer than the remote range.
    let mut dst = registered(&pd, vec![FILL; 200]);
    let dst_len = dst.len();
    let err = a
        .read(ReadWorkRequest::new(&mut [dst.scatter(..)], small))
        .expect_err("read longer than the remote range");
    assert!(
        matches!(
            err,
            Error::Post {
                operation: Operation::Read,
                ..
            }
        ),
        "{err:?}"
    );
    // More SGEs than the channel allows.
    let max = a.capabilities().max_send_sge as usize;
    let many: Vec<_> = src
        .chunks(src.len() / (max + 1))
        .map(|c| src.region().gather_element(c))
        .collect();
    assert!(many.len() > max);
    let err = a
        .send(SendWorkRequest::new(&many))
        .expect_err("too many SGEs");
    assert!(
        matches!(
            err,
            Error::Post {
                operation: Operation::Send,
                ..
            }
        ),
        "{err:?}"
    );
    let max_recv = b.capabilities().max_recv_sge as usize;
    let err = b
        .scope(|s| {
            let (dst_mr, bytes) = dst.split_mut();
            let mut scatter: Vec<_> = bytes
                .chunks_mut(dst_len / (max_recv + 1))
                .map(|c| dst_mr.scatter_element(c))
                .collect();
            assert!(scatter.len() > max_recv);
            s.post_receive(ReceiveWorkRequest::new(&mut scatter))
                .map(|_| ())
        })
        .expect_err("too many receive SGEs");
    assert!(
        matches!(
            err,
            ScopeError::ClosureError(Error::Post {
                operation: Operation::Receive,
                ..
            })
        ),
        "{err:?}"
    );

    // Nothing reached the NIC: both channels still work.
    assert!(a.is_usable() && b.is_usable());
    a.write(WriteWorkRequest::new(&[src.gather(..100)], small))
        .expect("a write that fits");
    drop(exposed_mr);
    assert_bytes(&exposed[..100], &src[..100], "the write that fit");
    assert_untouched(&exposed[100..], "past the range");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn send_to_a_peer_that_never_receives_times_out() {
    let pd = pd();
    let (mut a, b) = pair_with_timeout(&pd, SHORT);
    let src = registered(&pd, pattern(seed("rnr", 1000), 1000));

    // rnr_retry is 7 (retry forever): without the bounded wait this send
    // would never complete.
    let start = Instant::now();
    let result = a.send(SendWorkRequest::new(&[src.gather(..)]));
    let took = start.elapsed();
    match result {
        Err(Error::Timeout {
            operation: Operation::Send,
            timeout,
        }) => assert_eq!(timeout, SHORT),
        other => panic!("expected a send timeout, got {other:?}"),
    }
    assert!(
        (SHORT..BOUND).contains(&took),
        "timed out after {took:?}, expected {SHORT:?}..{BOUND:?}"
    );
    assert_eq!(a.outstanding(), 0);
    assert_unusable(&mut a, &pd);
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn receive_that_never_gets_a_message_times_out() {
    let pd = pd();
    let (a, mut b) = pair_with_timeout(&pd, SHORT);
    let mut rx = registered(&pd, vec![FILL; 1000]);

    let start = Instant::now();
    let result = b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]));
    let took = start.elapsed();
    match result {
        Err(Error::Timeout {
            operation: Operation::Receive,
            ..
        }) => {}
        other => panic!("expected a receive timeout, got {other:?}"),
    }
    assert!(
        (SHORT..BOUND).contains(&took),
        "timed out after {took:?}, expected {SHORT:?}..{BOUND:?}"
    );
    assert_untouched(&rx, "nothing received");
    assert_unusable(&mut b, &pd);
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn timeout_in_a_scope_flushes_everything_else() {
    let pd = pd();
    let (mut a, b) = pair_with_timeout(&pd, SHORT);
    let src = registered(&pd, pattern(seed("scope timeout", 4 * 256), 4 * 256));
    let mut rx = registered(&pd, vec![FILL; 4 * 256]);

    let start = Instant::now();
    let result = a.scope(|s| {
        // Receives that nobody will fill, and sends nobody receives.
        for mut c in scatter_chunks(&mut rx, 256) {
            let _ = s.post_receive(ReceiveWorkRequest::new(&mut c))?;
        }
        let mut sends = Vec::new();
        for i in 0..4 {
            sends.push(s.post_send(SendWorkRequest::new(&[src.gather(i * 256..(i + 1) * 256)]))?);
        }
        assert_eq!(s.outstanding(), 8);
        let first = sends.remove(0).wait();
        assert!(matches!(first, Err(Error::Timeout { .. })), "{first:?}");
        // The rest were flushed by the shutdown and are claimable.
        for h in sends {
            match h.wait() {
                Err(Error::WorkCompletion {
                    status: WcStatus::WrFlushError,
                    ..
                }) => {}
                other => panic!("expected a flushed send, got {other:?}"),
            }
        }
        Ok::<_, Error>(())
    });
    let took = start.elapsed();
    // The receives were left to the scope: they were flushed too.
    match result {
        Err(ScopeError::AutoPollError(Error::WorkCompletion {
            operation: Operation::Receive,
            status: WcStatus::WrFlushError,
            ..
        })) => {}
        other => panic!("expected the flushed receives, got {other:?}"),
    }
    assert!(took < BOUND, "scope took {took:?}");
    assert_untouched(&rx, "nothing received");
    assert_unusable(&mut a, &pd);
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn failure_left_to_the_scope_is_an_auto_poll_error() {
    let pd = pd();
    let (mut a, b) = pair(&pd);
    let mut target = vec![FILL; 64];
    // SAFETY: `target` outlives `target_mr`; nothing lands in it.
    let target_mr = unsafe { shared_mr(&pd, &mut target) };
    let good = target_mr.remote();
    let bad = RemoteMemoryRegion::new(good.address(), good.length(), good.rkey() ^ 0x00ff_ff00);
    let src = registered(&pd, pattern(seed("auto poll", 64), 64));
    let result = a.scope(|s| {
        let _unpolled = s.post_write(WriteWorkRequest::new(&[src.gather(..)], bad))?;
        Ok::<_, Error>("closure result")
    });
    match result {
        Err(ScopeError::AutoPollError(Error::WorkCompletion {
            operation: Operation::Write,
            status: WcStatus::RemoteAccessError,
            ..
        })) => {}
        other => panic!("expected an auto-poll remote access error, got {other:?}"),
    }
    drop(target_mr);
    assert_untouched(&target, "nothing written");
    assert_unusable(&mut a, &pd);
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

/// Whether `result` is a completion error with one of `statuses`, or (if
/// `timeout_ok`) a timeout of `operation`. Prints what it saw, since devices
/// differ here.
#[track_caller]
fn assert_failed_with(
    result: &Result<impl std::fmt::Debug, Error>,
    operation: Operation,
    statuses: &[WcStatus],
    timeout_ok: bool,
) {
    eprintln!("{operation}: {result:?}");
    let ok = match result {
        Err(Error::WorkCompletion {
            operation: op,
            status,
            ..
        }) => *op == operation && statuses.contains(status),
        Err(Error::Timeout { operation: op, .. }) => timeout_ok && *op == operation,
        _ => false,
    };
    assert!(
        ok,
        "expected {operation} to fail with one of {statuses:?}{}, got {result:?}",
        if timeout_ok { " or time out" } else { "" }
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn peer_gone_ends_in_bounded_time() {
    let pd = pd();
    // The channel's timeout is far longer than the retry budget: the
    // transport must be what notices the dead peer.
    let (mut a, b) = pair_with_timeout(&pd, Duration::from_secs(20));
    drop(b);
    let tx = registered(&pd, pattern(seed("peer gone", 64), 64));
    let start = Instant::now();
    let result = a.send(SendWorkRequest::new(&[tx.gather(..)]));
    // The default retry count, 6, is exhausted after 4.096 µs · 2^17 · 7 ≈
    // 3.8 s (rxe would retry forever with 7): a typed error, not the
    // channel's timeout.
    assert_failed_with(&result, Operation::Send, &[WcStatus::RetryExceeded], false);
    let took = start.elapsed();
    eprintln!("dead peer noticed by the transport after {took:?}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert_unusable(&mut a, &pd);
    assert_quiescent(&a, "a");
}

/// The builder's `connect_options` are what `connect` (and so
/// `connect_pair` and `handshake`) sets up: with an ACK timeout of 10
/// (4 ms) and one retry, a dead peer is noticed in a few ms by the spec,
/// far inside the 3.8 s the defaults take.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn builder_connect_options_reach_the_queue_pair() {
    let pd = pd();
    let quick = ConnectOptions {
        timeout: 10,
        retry_count: 1,
        ..ConnectOptions::default()
    };
    let build = || {
        pd.channel_builder()
            .timeout(Duration::from_secs(20))
            .connect_options(quick)
            .build()
            .expect("channel")
    };
    let (mut a, mut b) = (build(), build());
    Channel::connect_pair(&mut a, &mut b).expect("connect");
    drop(b);
    let tx = registered(&pd, pattern(seed("quick retry", 64), 64));
    let start = Instant::now();
    let result = a.send(SendWorkRequest::new(&[tx.gather(..)]));
    assert_failed_with(&result, Operation::Send, &[WcStatus::RetryExceeded], false);
    let took = start.elapsed();
    eprintln!("dead peer noticed after {took:?} with ACK timeout 10, 1 retry");
    // The defaults need 3.8 s (see above): well under it means the options
    // were applied; the margin is for a loaded machine.
    assert!(took < Duration::from_millis(2500), "took {took:?}");
    assert_quiescent(&a, "a");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn full_send_queue_is_a_post_error() {
    let pd = pd();
    let (mut a, b) = pair_with_timeout(&pd, SHORT);
    // Nothing will be acknowledged: the requests stay queued until retries
    // run out.
    drop(b);
    let depth = a.capabilities().max_send_wr as usize;
    let tx = registered(&pd, pattern(seed("queue full", 8), 8));
    let remote = RemoteMemoryRegion::new(0x10_0000, 8, 0x1234);
    let result = a.scope(|s| {
        for i in 0..8 * depth {
            if let Err(e) = s.post_write(WriteWorkRequest::new(&[tx.gather(..)], remote)) {
                return Err((i, s.outstanding(), e));
            }
        }
        Ok(())
    });
    match result {
        Err(ScopeError::ClosureError((
            i,
            outstanding,
            Error::Post {
                operation: Operation::Write,
                ..
            },
        ))) => {
            assert!(i >= depth, "failed after {i} of {depth}");
            assert_eq!(outstanding, i);
        }
        other => panic!("expected a post error once the queue was full, got {other:?}"),
    }
    // The queued writes failed (retries exhausted or timed out, then flushed)
    // and were drained by the scope.
    assert_unusable(&mut a, &pd);
    assert_quiescent(&a, "a");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn forced_inline_larger_than_allowed_is_a_post_error() {
    let pd = pd();
    let (mut a, b) = pair_with(&pd, |c| c.max_inline_data(64));
    let limit = a.capabilities().max_inline_data as usize;
    let src = registered(&pd, pattern(seed("inline too large", 4096), 4096));
    let mut target = vec![FILL; 4096];
    // SAFETY: `target` outlives `target_mr`; Rust reads it only after the
    // write completed.
    let target_mr = unsafe { shared_mr(&pd, &mut target) };
    let too_long = [src.gather(..limit + 1)];
    let err = a
        .write(WriteWorkRequest::new(&too_long, target_mr.remote()).inline(true))
        .expect_err("inline payload above max_inline_data");
    assert!(
        matches!(
            err,
            Error::Post {
                operation: Operation::Write,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(a.is_usable());
    // Forcing inline off for a small payload, and on within the limit, work.
    a.write(WriteWorkRequest::new(&[src.gather(..8)], target_mr.remote()).inline(false))
        .expect("non-inline small write");
    a.write(WriteWorkRequest::new(&[src.gather(..limit)], target_mr.remote()).inline(true))
        .expect("inline write at the limit");
    drop(target_mr);
    assert_bytes(&target[..limit], &src[..limit], "inline write");
    assert_untouched(&target[limit..], "past the inline write");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

/// Needs no device: opening one that does not exist is an error.
#[test]
fn missing_device_and_missing_pd_are_errors() {
    assert!(rdma_safe::ProtectionDomain::open("no-such-rdma-device").is_err());
    let err = rdma_safe::Channel::builder()
        .build()
        .expect_err("a channel needs a protection domain");
    assert!(err.to_string().contains("pd"), "{err}");
}
