//! Completions as other providers deliver them, under rdma-core's
//! fault-injecting layer, on a real device: error completions whose
//! undefined fields (`opcode`, `byte_len`, `imm_data`, `src_qp`, ...) are
//! garbage, `ibv_poll_cq` failing, completions held back on the CQ for a
//! number of polls. Each on the blocking calls, a polling scope and owned
//! operations, ending in a typed error or a success whose bytes are
//! checked, with the memory oracle holding nothing afterwards.
//!
//! Built with the feature by `cargo xtask test-rxe`; by hand: `cargo test
//! -p rdma-safe --features fault-injection --test NAME -- --include-ignored
//! --test-threads=1` beside a device.
#![cfg(feature = "fault-injection")]

mod common;

use common::faults::*;
use common::registered;
use rdma_core::fault::{self, Fault, Plan, Site, When};
use rdma_safe::owned::Request;
use rdma_safe::work::WcStatus;
use rdma_safe::{
    error::Operation, Error, ReceiveWorkRequest, RemoteMemoryRegion, ScopeError, WriteWorkRequest,
};
use std::time::Instant;

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn garbage_in_the_undefined_fields_of_error_completions() {
    for path in PATHS {
        // Flushed writes: their status survives, their other fields are noise.
        let what = &format!("{path:?}: garbled flush completions");
        println!("scenario: {what}");
        let mut w = World::new(path, "garbage-flush");
        let a = w.a.qp_num();
        let plan = Plan::new(7)
            .at_qp(a, Site::PostSend, When::Call(0), Fault::FlushAt { at: 0 })
            .at(Site::ErrorCompletion, When::Always, Fault::Garble);
        let installed = fault::install(plan);
        let r = w.write(path, BATCH);
        assert_flushed(what, &r);
        assert!(
            installed.count(Site::ErrorCompletion) >= 1,
            "{what}: nothing garbled"
        );
        w.verify(what, Landed::AtMost(0));
        drop(installed);

        // A remote access error: the peer refuses a wrong key.
        let what = &format!("{path:?}: garbled remote access error");
        println!("scenario: {what}");
        let mut w = World::new(path, "garbage-rkey");
        let plan = Plan::new(8).at(Site::ErrorCompletion, When::Always, Fault::Garble);
        let installed = fault::install(plan);
        let good = w.remote(0);
        let bad = RemoteMemoryRegion::new(good.address(), good.length(), good.rkey() ^ 0x5a5a_0000);
        let r = match path {
            Path::Owned | Path::Async => {
                let data = common::frozen(&w.pool, &w.src[..PIECE]);
                run_owned(path, &w.a, Request::write(data, bad)).0
            }
            _ => {
                let g = [w.src.gather(..PIECE)];
                w.a.write(WriteWorkRequest::new(&g, bad))
            }
        };
        match &r {
            Err(Error::WorkCompletion {
                operation: Operation::Write,
                status: WcStatus::RemoteAccessError,
                ..
            }) => {}
            other => panic!("{what}: expected a remote access error, got {other:?}"),
        }
        assert!(
            installed.count(Site::ErrorCompletion) >= 1,
            "{what}: nothing garbled"
        );
        w.verify(what, Landed::AtMost(0));
    }

    // Flushed receives: their operation comes from the engine's records,
    // not from the completion's opcode. rxe does not flush a receive posted
    // to a queue pair already in ERR until the next move to ERR; every
    // wait notices the state and shuts the channel down (which flushes
    // it): the blocking ones at their clock reads, a future's through the
    // completion driver's watchdog (its first round, or within the
    // channel's timeout).
    for path in PATHS {
        let what = &format!("{path:?}: garbled flushed receive");
        println!("scenario: {what}");
        let mut w = World::new(path, "garbage-recv");
        let plan = Plan::new(9)
            .at_qp(
                w.b.qp_num(),
                Site::PostRecv,
                When::Call(0),
                Fault::FlushAt { at: 0 },
            )
            .at(Site::ErrorCompletion, When::Always, Fault::Garble);
        let installed = fault::install(plan);
        let mut rx = registered(&w.pd, vec![FILL; PIECE]);
        let r = match path {
            Path::Blocking => w.b.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)])),
            Path::Scope => {
                w.b.scope(|s| {
                    let mut sc = [rx.scatter(..)];
                    s.post_receive(ReceiveWorkRequest::new(&mut sc))?.wait()
                })
                .map_err(ScopeError::flatten)
            }
            Path::Owned | Path::Async => {
                let buf = w.pool.try_alloc().expect("a buffer");
                run_owned(path, &w.b, Request::receive(buf)).0
            }
        };
        assert_fired(what, &installed, Site::PostRecv, 1);
        match &r {
            Err(Error::WorkCompletion {
                operation: Operation::Receive,
                status: WcStatus::WrFlushError,
                ..
            }) => {}
            other => panic!("{what}: expected a flushed receive, got {other:?}"),
        }
        assert!(
            installed.count(Site::ErrorCompletion) >= 1,
            "{what}: nothing garbled"
        );
        assert!(
            rx.iter().all(|&x| x == FILL),
            "{what}: the flushed receive wrote"
        );
        assert_oracle_clear(what, &w.qps(), &[&rx[..]]);
        w.verify(what, Landed::AtMost(0));
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn poll_errors() {
    for path in PATHS {
        for when in [When::Call(0), When::Call(1), When::PerMille(300)] {
            let what = &format!("{path:?}: poll_cq fails at {when:?}");
            println!("scenario: {what}");
            let mut w = World::new(path, "poll-error");
            let installed = fault::install(Plan::new(10).at(Site::PollCq, when, Fault::PollError));
            let mut outcomes = Vec::new();
            for _ in 0..8 {
                let r = w.write(path, BATCH);
                let failed = r.is_err();
                outcomes.push(r.map(|d| d.bytes()));
                if failed {
                    break;
                }
            }
            assert!(installed.count(Site::PollCq) >= 1, "{what}: no poll failed");
            drop(installed);
            // Every outcome a success or the poll's failure, and nothing of
            // the writes still in the NIC's hands.
            // A failed poll either fails the wait (`Poll`) or, when the
            // engine met it while reaping for another purpose, shuts the
            // channel down, which the next operation reports (`Unusable`,
            // naming the poll).
            println!("{what}: {outcomes:?}");
            for o in &outcomes {
                match o {
                    Ok(bytes) => assert_eq!(*bytes, BATCH * PIECE, "{what}"),
                    Err(Error::Poll(_)) => {}
                    Err(Error::Unusable(why)) if why.contains("poll") => {}
                    Err(e) => panic!("{what}: {e} ({outcomes:?})"),
                }
            }
            let landed = if outcomes.iter().all(Result::is_ok) {
                Landed::All
            } else {
                Landed::AtMost(BATCH)
            };
            w.verify(what, landed);
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn completions_held_back() {
    for path in PATHS {
        for polls in [1, 3, 200] {
            let what = &format!("{path:?}: completions held back for {polls} polls");
            println!("scenario: {what}");
            let mut w = World::new(path, "held-back");
            let plan = Plan::new(11).at(
                Site::PollCq,
                When::Call(0),
                Fault::HoldCompletions { polls },
            );
            let installed = fault::install(plan);
            let started = Instant::now();
            let done = w
                .write(path, BATCH)
                .unwrap_or_else(|e| panic!("{what}: {e} after {:?}", started.elapsed()));
            assert_fired(what, &installed, Site::PollCq, 1);
            assert_eq!(done.bytes(), BATCH * PIECE, "{what}");
            w.verify(what, Landed::All);
            let mut got = vec![0; BATCH * PIECE];
            w.peer.read(0, &mut got).expect("read the peer");
            assert_eq!(got[..], w.src[..], "{what}: the bytes");
        }
    }
}
