//! Posts refused as each provider refuses them, under rdma-core's
//! fault-injecting layer, on a real device: mlx5's `bad_wr` naming the
//! first request not queued (at the head, or inside a batch), rxe's
//! refused doorbell (everything queued, nothing named), `ENOMEM` on a full
//! queue, a flush in the middle of a batch, and the same for receives and
//! shared receive queue refills. Each on the blocking calls, a polling
//! scope and owned operations, ending in a typed error or a success whose
//! bytes are checked, the channel poisoned exactly when the provider left
//! it unknown what was queued, and the memory oracle holding nothing.
//!
//! Built with the feature by `cargo xtask test-rxe`; by hand: `cargo test
//! -p rdma-safe --features fault-injection --test NAME -- --include-ignored
//! --test-threads=1` beside a device.
#![cfg(feature = "fault-injection")]

mod common;

use common::faults::*;
use common::{pattern, pd, registered, seed};
use rdma_core::fault::{self, Fault, Plan, Site, When};
use rdma_safe::owned::Request;
use rdma_safe::{
    Error, ReceiveWorkRequest, RegisteredBuffer, ScopeError, SendWorkRequest, WorkSuccess,
};
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn mlx5_bad_wr_in_a_batch_shuts_the_channel_down() {
    for path in PATHS {
        let what = &format!("{path:?}: bad_wr at request 2 of {BATCH}");
        println!("scenario: {what}");
        let mut w = World::new(path, "mlx5-bad-wr");
        let plan = Plan::new(1).at_qp(
            w.a.qp_num(),
            Site::PostSend,
            When::Call(0),
            Fault::bad_wr_at(2),
        );
        let installed = fault::install(plan);
        let r = w.write(path, BATCH);
        assert_fired(what, &installed, Site::PostSend, 1);
        assert_post_error(what, r, EINVAL);
        // Requests 0 and 1 were queued for real: they ran or were flushed.
        w.verify(what, Landed::AtMost(2));
        assert_poisoned(what, &mut w, path);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn mlx5_bad_wr_at_the_head_leaves_the_channel_usable() {
    for path in PATHS {
        for n in [1, BATCH] {
            let what = &format!("{path:?}: bad_wr at the head of {n}");
            println!("scenario: {what}");
            let mut w = World::new(path, "mlx5-head");
            let plan = Plan::new(2).at_qp(
                w.a.qp_num(),
                Site::PostSend,
                When::Call(0),
                Fault::bad_wr_at(0),
            );
            let installed = fault::install(plan);
            assert_post_error(what, w.write(path, n), EINVAL);
            assert_fired(what, &installed, Site::PostSend, 1);
            w.verify(what, Landed::AtMost(0));
            assert!(
                w.a.is_usable(),
                "{what}: nothing was queued, the channel stays usable"
            );
            let done = w
                .write(path, n)
                .unwrap_or_else(|e| panic!("{what}: the retry: {e}"));
            assert_eq!(done.bytes(), n * PIECE, "{what}");
            w.verify(what, Landed::AtMost(n));
            let mut got = vec![0; n * PIECE];
            w.peer.read(0, &mut got).expect("read the peer");
            assert_eq!(got[..], w.src[..n * PIECE], "{what}: the retry's bytes");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn rxe_refused_doorbell_shuts_the_channel_down() {
    for path in PATHS {
        for n in [1, BATCH] {
            let what = &format!("{path:?}: refused doorbell on {n}");
            println!("scenario: {what}");
            let mut w = World::new(path, "rxe-doorbell");
            let plan = Plan::new(3).at_qp(
                w.a.qp_num(),
                Site::PostSend,
                When::Call(0),
                Fault::refused_doorbell(),
            );
            let installed = fault::install(plan);
            assert_post_error(what, w.write(path, n), EINVAL);
            assert_fired(what, &installed, Site::PostSend, 1);
            // Everything was queued: each piece ran whole or was flushed.
            w.verify(what, Landed::AtMost(n));
            assert_poisoned(what, &mut w, path);
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn enomem_on_a_full_queue() {
    for path in PATHS {
        // At the head: nothing queued, the channel usable, a retry lands.
        let what = &format!("{path:?}: ENOMEM at the head");
        println!("scenario: {what}");
        let mut w = World::new(path, "enomem-head");
        let plan = Plan::new(4).at_qp(
            w.a.qp_num(),
            Site::PostSend,
            When::Call(0),
            Fault::queue_full_at(0),
        );
        let installed = fault::install(plan);
        assert_post_error(what, w.write(path, 1), ENOMEM);
        assert_fired(what, &installed, Site::PostSend, 1);
        assert!(w.a.is_usable(), "{what}");
        w.write(path, 1)
            .unwrap_or_else(|e| panic!("{what}: the retry: {e}"));
        w.verify(what, Landed::AtMost(1));
        drop(installed);

        // At request 3 of 4: three queued, the channel shut down.
        let what = &format!("{path:?}: ENOMEM at request 3 of {BATCH}");
        println!("scenario: {what}");
        let mut w = World::new(path, "enomem-batch");
        let plan = Plan::new(5).at_qp(
            w.a.qp_num(),
            Site::PostSend,
            When::Call(0),
            Fault::queue_full_at(3),
        );
        let installed = fault::install(plan);
        assert_post_error(what, w.write(path, BATCH), ENOMEM);
        assert_fired(what, &installed, Site::PostSend, 1);
        w.verify(what, Landed::AtMost(3));
        assert_poisoned(what, &mut w, path);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn flush_in_the_middle_of_a_batch() {
    for path in PATHS {
        let what = &format!("{path:?}: flush after request 2 of {BATCH}");
        println!("scenario: {what}");
        let mut w = World::new(path, "flush-mid-batch");
        let plan = Plan::new(6).at_qp(
            w.a.qp_num(),
            Site::PostSend,
            When::Call(0),
            Fault::FlushAt { at: 2 },
        );
        let installed = fault::install(plan);
        let started = Instant::now();
        let r = w.write(path, BATCH);
        assert_fired(what, &installed, Site::PostSend, 1);
        assert_flushed(what, &r);
        assert!(
            started.elapsed() < TIMEOUT,
            "{what}: the flush was waited out"
        );
        w.verify(what, Landed::AtMost(2));
        // The queue pair is in ERR: the next write fails, typed, at once.
        let started = Instant::now();
        let next = w.write(path, 1);
        assert!(
            next.is_err(),
            "{what}: a write on a flushed queue pair succeeded"
        );
        assert!(
            started.elapsed() < TIMEOUT,
            "{what}: {next:?} only after a wait"
        );
        w.verify(what, Landed::AtMost(2));
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn refused_shared_receive_queue_refills() {
    let pd = pd();
    let (mut srq, mut a, _b) = common::srq_pair(&pd, 8, 64);
    let tx = registered(&pd, pattern(seed("srq-refill", 1), 64));
    let mut buf = [0u8; 64];
    let mut exchange = |srq: &mut rdma_safe::SharedReceiveQueue, n: usize, what: &str| {
        for _ in 0..n {
            a.send(SendWorkRequest::new(&[tx.gather(..)]))
                .unwrap_or_else(|e| panic!("{what}: send: {e}"));
            let r = srq
                .receive(&mut buf, TIMEOUT)
                .unwrap_or_else(|e| panic!("{what}: receive: {e}"))
                .unwrap_or_else(|| panic!("{what}: no message"));
            assert_eq!(buf[..r.len()], tx[..], "{what}: the message");
        }
    };
    exchange(&mut srq, 4, "before the faults");
    for (fault, what) in [
        (Fault::refused_doorbell(), "rxe: the SRQ's doorbell refused"),
        (Fault::bad_wr_at(1), "mlx5: bad_wr at the second receive"),
        (Fault::queue_full_at(0), "mlx5: the SRQ full"),
    ] {
        let installed = fault::install(Plan::new(18).at(Site::PostSrqRecv, When::Call(0), fault));
        let r = srq.refill();
        assert_fired(what, &installed, Site::PostSrqRecv, 1);
        assert!(matches!(r, Err(Error::Post { .. })), "{what}: {r:?}");
        drop(installed);
        // What the refusal left posted still takes messages; a refill
        // posts the rest.
        exchange(&mut srq, 2, what);
        srq.refill()
            .unwrap_or_else(|e| panic!("{what}: the next refill: {e}"));
        exchange(&mut srq, 4, what);
    }
}

/// A receive of one message into `rx` on `path`, the message sent by `a`
/// from another thread (no plan there) once the receive may be posted.
fn receive_one(
    path: Path,
    w: &mut World,
    rx: &mut RegisteredBuffer<Vec<u8>>,
) -> rdma_safe::Result<WorkSuccess> {
    let (a, b, src, pool) = (&mut w.a, &mut w.b, &w.src, &w.pool);
    std::thread::scope(|t| {
        let sender = t.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            a.send(SendWorkRequest::new(&[src.gather(..PIECE)]))
        });
        let got = match path {
            Path::Blocking => b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..PIECE)])),
            Path::Scope => b
                .scope(|s| {
                    let mut sc = [rx.scatter(..PIECE)];
                    s.post_receive(ReceiveWorkRequest::new(&mut sc))?.wait()
                })
                .map_err(ScopeError::flatten),
            Path::Owned | Path::Async => {
                let (r, buf) = run_owned(
                    path,
                    b,
                    Request::receive(pool.try_alloc().expect("a buffer")),
                );
                if r.is_ok() {
                    rx[..PIECE].copy_from_slice(&buf[..PIECE]);
                }
                r
            }
        };
        // A refused receive takes no message: the send then fails or
        // times out (the sender's bounded wait), which is not this test's.
        let _ = sender.join().expect("the sender");
        got
    })
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn refused_receive_posts() {
    for path in PATHS {
        // mlx5, the head refused: nothing queued; the retry takes the message.
        let what = &format!("{path:?}: receive refused at the head");
        println!("scenario: {what}");
        let mut w = World::new(path, "recv-head");
        let mut rx = registered(&w.pd, vec![FILL; PIECE]);
        let plan = Plan::new(19).at_qp(
            w.b.qp_num(),
            Site::PostRecv,
            When::Call(0),
            Fault::bad_wr_at(0),
        );
        let installed = fault::install(plan);
        match path {
            Path::Blocking => {
                let r = w.b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]));
                assert_post_error(what, r, EINVAL);
            }
            Path::Scope => {
                let r = w.b.scope(|s| {
                    s.post_receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))
                        .map(drop)
                });
                assert_post_error(what, r.map_err(ScopeError::flatten), EINVAL);
            }
            Path::Owned | Path::Async => {
                let buf = w.pool.try_alloc().expect("a buffer");
                let (r, _) = run_owned(path, &w.b, Request::receive(buf));
                assert_post_error(what, r, EINVAL);
            }
        }
        assert_fired(what, &installed, Site::PostRecv, 1);
        assert!(w.b.is_usable(), "{what}: nothing was queued");
        assert!(rx.iter().all(|&x| x == FILL), "{what}: written");
        let done = receive_one(path, &mut w, &mut rx).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(done.bytes(), PIECE, "{what}");
        assert_eq!(rx[..], w.src[..PIECE], "{what}: the message");
        assert_oracle_clear(what, &w.qps(), &[&rx[..]]);
        drop(installed);

        // rxe, the doorbell refused: the receive may be queued; the channel
        // is shut down before the memory comes back.
        let what = &format!("{path:?}: receive doorbell refused");
        println!("scenario: {what}");
        let mut w = World::new(path, "recv-doorbell");
        let mut rx = registered(&w.pd, vec![FILL; PIECE]);
        let plan = Plan::new(20).at_qp(
            w.b.qp_num(),
            Site::PostRecv,
            When::Call(0),
            Fault::refused_doorbell(),
        );
        let installed = fault::install(plan);
        let r = match path {
            Path::Blocking => w.b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)])),
            Path::Scope => {
                w.b.scope(|s| {
                    s.post_receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))?
                        .wait()
                })
                .map_err(ScopeError::flatten)
            }
            Path::Owned | Path::Async => {
                let buf = w.pool.try_alloc().expect("a buffer");
                run_owned(path, &w.b, Request::receive(buf)).0
            }
        };
        assert_fired(what, &installed, Site::PostRecv, 1);
        assert_post_error(what, r, EINVAL);
        assert!(!w.b.is_usable(), "{what}: still usable");
        assert!(rx.iter().all(|&x| x == FILL), "{what}: written");
        assert_oracle_clear(what, &w.qps(), &[&rx[..]]);
        assert_eq!(
            w.pool.available(),
            w.pool.capacity(),
            "{what}: pool buffers missing"
        );
    }
}
