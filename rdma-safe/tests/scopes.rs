//! Polling scopes on a device: many operations in flight and polled in
//! another order than posted, reuse of a scatter element, closures that fail
//! or panic, forgotten handles, and `manual_scope`'s contract.

mod common;

use common::*;
use rdma_safe::{
    scope::ScopedPendingWork, work::WcOpcode, Error, ReceiveWorkRequest, ScopeError,
    SendWorkRequest, WorkSuccess,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Message `i` of the many-operations test is this long (1..=CHUNK bytes,
/// all different modulo CHUNK).
const CHUNK: usize = 256;
fn msg_len(i: usize) -> usize {
    (i * 37) % CHUNK + 1
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn many_outstanding_operations_polled_out_of_order() {
    const N: usize = 64;
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("many", N), N * CHUNK));
    let mut rx = registered(&pd, vec![FILL; N * CHUNK]);

    b.scope(|sb| {
        let mut receives = Vec::new();
        let (rx_mr, rx_bytes) = rx.split_mut();
        for chunk in rx_bytes.chunks_mut(CHUNK) {
            let mut scatter = [rx_mr.scatter_element(chunk)];
            receives.push(sb.post_receive(ReceiveWorkRequest::new(&mut scatter))?);
        }
        assert_eq!(sb.outstanding(), N);
        assert_eq!(sb.channel().outstanding(), N);

        a.scope(|sa| {
            let mut sends: Vec<Option<ScopedPendingWork<'_>>> = Vec::new();
            for i in 0..N {
                let g = [tx.gather(i * CHUNK..i * CHUNK + msg_len(i))];
                let wr = SendWorkRequest::new(&g).with_immediate(i as u32);
                sends.push(Some(sa.post_send(wr)?));
            }
            assert_eq!(sa.outstanding(), N);
            // Sends: non-blocking polls, visiting handles in a shuffled order
            // until every one has completed.
            let order = shuffled(N, seed("many order", N));
            let mut done = 0;
            let start = Instant::now();
            while done < N {
                for &i in &order {
                    let Some(handle) = sends[i].take() else {
                        continue;
                    };
                    match handle.poll() {
                        Ok(outcome) => {
                            let ok = outcome?;
                            assert_eq!(ok.bytes(), msg_len(i), "send {i}");
                            assert_eq!(ok.opcode(), WcOpcode::Send);
                            done += 1;
                        }
                        Err(handle) => sends[i] = Some(handle),
                    }
                }
                assert!(start.elapsed() < Duration::from_secs(60), "sends stuck");
            }
            assert_eq!(sa.outstanding(), 0);
            Ok::<_, Error>(())
        })
        .expect("sends");

        // Receives: blocking waits in reverse order. Receive i got message i.
        for (i, handle) in receives.into_iter().enumerate().rev() {
            let got = handle.wait()?;
            assert_eq!(got.immediate(), Some(i as u32), "receive {i}");
            assert_eq!(got.bytes(), msg_len(i), "receive {i}");
        }
        assert_eq!(sb.outstanding(), 0);
        Ok::<_, Error>(())
    })
    .expect("receives");

    for (i, (got, sent)) in rx.chunks(CHUNK).zip(tx.chunks(CHUNK)).enumerate() {
        let n = msg_len(i);
        assert_bytes(&got[..n], &sent[..n], &format!("message {i}"));
        assert_untouched(&got[n..], &format!("past message {i}"));
    }
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn wait_for_later_operation_first() {
    // Waiting on the last-posted handle first must keep the earlier
    // completions (reaped on the way) for their own handles.
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("later first", 3), 3 * 100));
    let mut rx = registered(&pd, vec![FILL; 3 * 100]);
    let outcomes: Vec<WorkSuccess> = b
        .scope(|sb| {
            let (rx_mr, rx_bytes) = rx.split_mut();
            let mut handles: Vec<_> = rx_bytes
                .chunks_mut(100)
                .map(|c| {
                    let mut sc = [rx_mr.scatter_element(c)];
                    sb.post_receive(ReceiveWorkRequest::new(&mut sc))
                })
                .collect::<Result<_, _>>()?;
            a.scope(|sa| {
                for i in 0..3 {
                    // Dropped handles: the scope waits for them.
                    drop(
                        sa.post_send(
                            SendWorkRequest::new(&[tx.gather(i * 100..(i + 1) * 100)])
                                .with_immediate(i as u32),
                        )?,
                    );
                }
                Ok::<_, Error>(())
            })
            .expect("sends");
            let last = handles.pop().unwrap().wait()?;
            let mut out = Vec::new();
            for h in handles {
                out.push(h.wait()?);
            }
            out.push(last);
            Ok::<_, Error>(out)
        })
        .expect("receives");
    let imms: Vec<_> = outcomes.iter().map(|o| o.immediate()).collect();
    assert_eq!(imms, [Some(0), Some(1), Some(2)]);
    assert_bytes(&rx, &tx, "three messages");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_scatter_element_reused_for_sequential_receives() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let lens = [100usize, 1, 4000, 37];
    let msgs: Vec<Vec<u8>> = lens.iter().map(|&n| pattern(seed("reuse", n), n)).collect();
    let tx = registered(&pd, msgs.concat());
    let mut rx = registered(&pd, vec![FILL; 4096]);

    b.scope(|s| {
        let mut scatter = [rx.scatter(..)];
        let mut offset = 0;
        for (i, &n) in lens.iter().enumerate() {
            let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            a.send(
                SendWorkRequest::new(&[tx.gather(offset..offset + n)]).with_immediate(i as u32),
            )?;
            let got = recv.wait()?;
            assert_eq!(got.bytes(), n, "message {i}");
            assert_eq!(got.immediate(), Some(i as u32));
            offset += n;
        }
        Ok::<_, Error>(())
    })
    .expect("sequential receives");
    // The buffer holds the last message over the longest, earlier one.
    let last = msgs.last().unwrap();
    assert_bytes(&rx[..last.len()], last, "last message");
    assert_bytes(
        &rx[last.len()..4000],
        &msgs[2][last.len()..],
        "rest of the longest message",
    );
    assert_untouched(&rx[4000..], "never written");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn closure_error_still_drains_outstanding_work() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("closure error", 512), 512));
    let mut rx = registered(&pd, vec![FILL; 512]);

    let result: Result<(), ScopeError<&str>> = b.scope(|s| {
        let mut scatter = [rx.scatter(..)];
        // Neither polled nor kept: the scope must wait for it.
        let _unpolled = s
            .post_receive(ReceiveWorkRequest::new(&mut scatter))
            .map_err(|_| "post")?;
        a.send(SendWorkRequest::new(&[tx.gather(..)]))
            .map_err(|_| "send")?;
        Err("the closure gives up")
    });
    match result {
        Err(ScopeError::ClosureError("the closure gives up")) => {}
        other => panic!("expected the closure's error, got {other:?}"),
    }
    assert_eq!(b.outstanding(), 0);
    assert!(b.is_usable());
    assert_bytes(&rx, &tx, "received before the scope returned");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn closure_panic_resumes_after_draining() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("closure panic", 3000), 3000));
    let mut rx = registered(&pd, vec![FILL; 3000]);

    let caught = catch_unwind(AssertUnwindSafe(|| {
        b.scope(|s| {
            let mut scatter = [rx.scatter(..)];
            let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            a.send(SendWorkRequest::new(&[tx.gather(..)]))?;
            let _still_outstanding = recv;
            if tx.len() == 3000 {
                panic!("closure panics with a receive outstanding");
            }
            Ok::<_, Error>(())
        })
    }));
    let payload = caught.expect_err("the panic must resume");
    let msg = payload
        .downcast_ref::<&str>()
        .copied()
        .unwrap_or("<other payload>");
    assert_eq!(msg, "closure panics with a receive outstanding");
    assert_eq!(b.outstanding(), 0);
    assert!(b.is_usable());
    assert_bytes(&rx, &tx, "received before the panic resumed");

    // The channel still works after the panic.
    let mut again = registered(&pd, vec![FILL; 3000]);
    b.scope(|s| {
        let mut scatter = [again.scatter(..)];
        let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        a.send(SendWorkRequest::new(&[tx.gather(..)]))?;
        recv.wait()
    })
    .expect("transfer after the panic");
    assert_bytes(&again, &tx, "after the panic");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn forgotten_handle_is_still_waited_for() {
    const DELAY: Duration = Duration::from_millis(1500);
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("forget", 70_000), 70_000));
    let mut rx = registered(&pd, vec![FILL; 70_000]);
    let (posted_tx, posted_rx) = mpsc::channel::<()>();

    let (scope_time, sent) = std::thread::scope(|t| {
        // The peer sends only well after the scope's closure has returned.
        let (a, tx) = (&mut a, &tx);
        let sender = t.spawn(move || {
            posted_rx.recv().expect("receive posted");
            std::thread::sleep(DELAY);
            a.send(SendWorkRequest::new(&[tx.gather(..)]))
                .expect("delayed send")
        });
        let start = Instant::now();
        b.scope(|s| {
            let mut scatter = [rx.scatter(..)];
            let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
            // `ScopedPendingWork` has no `Drop` (the scope, not the handle,
            // waits), so clippy calls this a plain drop; forgetting is still
            // what a user would try, and the scope must not care.
            #[allow(clippy::forget_non_drop)]
            std::mem::forget(recv);
            posted_tx.send(()).unwrap();
            Ok::<_, Error>(())
        })
        .expect("scope with a forgotten receive");
        let scope_time = start.elapsed();
        (scope_time, sender.join().expect("sender thread"))
    });

    assert!(
        scope_time >= DELAY,
        "the scope returned after {scope_time:?}, before the delayed send ({DELAY:?})"
    );
    assert_eq!(sent.bytes(), 70_000);
    assert_eq!(b.outstanding(), 0);
    assert_bytes(&rx, &tx, "data of the forgotten receive");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn manual_scope_with_unpolled_work_panics_after_draining() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("manual unpolled", 2048), 2048));
    let mut rx = registered(&pd, vec![FILL; 2048]);

    b.scope(|sb| {
        let mut scatter = [rx.scatter(..)];
        let recv = sb.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        let caught = catch_unwind(AssertUnwindSafe(|| {
            a.manual_scope(|s| {
                let _left_unpolled = s.post_send(SendWorkRequest::new(&[tx.gather(..)]))?;
                Ok::<_, Error>(())
            })
        }));
        let payload = caught.expect_err("manual_scope must panic on unpolled work");
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            msg.contains("left 1 work request(s) unpolled"),
            "panic message: {msg:?}"
        );
        // Drained before panicking.
        assert_eq!(a.outstanding(), 0);
        assert!(a.is_usable());
        let got = recv.wait()?;
        assert_eq!(got.bytes(), 2048);
        Ok::<_, Error>(())
    })
    .expect("receive");
    assert_bytes(&rx, &tx, "sent by the unpolled send");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn manual_scope_error_and_success_do_not_panic() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("manual err", 64), 64));
    let mut rx = registered(&pd, vec![FILL; 128]);

    b.scope(|sb| {
        let (rx_mr, rx_bytes) = rx.split_mut();
        let (first, second) = rx_bytes.split_at_mut(64);
        let mut sc1 = [rx_mr.scatter_element(first)];
        let mut sc2 = [rx_mr.scatter_element(second)];
        let recv1 = sb.post_receive(ReceiveWorkRequest::new(&mut sc1))?;
        let recv2 = sb.post_receive(ReceiveWorkRequest::new(&mut sc2))?;

        // An error with work left unpolled: no panic, the error comes back,
        // the work was drained.
        let failed = a.manual_scope(|s| {
            let _unpolled = s
                .post_send(SendWorkRequest::new(&[tx.gather(..)]))
                .map_err(|e| e.to_string())?;
            Err::<(), String>("stopped early".to_owned())
        });
        assert_eq!(failed, Err("stopped early".to_owned()));
        assert_eq!(a.outstanding(), 0);

        // Everything polled: the closure's value comes back.
        let bytes = a.manual_scope(|s| {
            let send = s.post_send(SendWorkRequest::new(&[tx.gather(..)]))?;
            let done = send.wait()?;
            assert_eq!(s.outstanding(), 0);
            Ok::<_, Error>(done.bytes())
        })?;
        assert_eq!(bytes, 64);

        assert_eq!(recv1.wait()?.bytes(), 64);
        assert_eq!(recv2.wait()?.bytes(), 64);
        Ok::<_, Error>(())
    })
    .expect("receives");
    assert_bytes(&rx[..64], &tx, "from the failed manual scope");
    assert_bytes(&rx[64..], &tx, "from the successful manual scope");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn scoped_handle_waited_on_another_thread() {
    let pd = pd();
    let (mut a, mut b) = pair(&pd);
    let tx = registered(&pd, pattern(seed("other thread", 900), 900));
    let mut rx = registered(&pd, vec![FILL; 900]);
    b.scope(|s| {
        let mut scatter = [rx.scatter(..)];
        let recv = s.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        let got = std::thread::scope(|t| {
            let waiter = t.spawn(move || recv.wait());
            a.send(SendWorkRequest::new(&[tx.gather(..)]))?;
            waiter.join().expect("waiter thread")
        })?;
        assert_eq!(got.bytes(), 900);
        Ok::<_, Error>(())
    })
    .expect("scope");
    assert_bytes(&rx, &tx, "received");
    assert_quiescent(&a, "a");
    assert_quiescent(&b, "b");
}
