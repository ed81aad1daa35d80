//! Asynchronous events under rdma-core's fault-injecting layer, on a real
//! device: QP fatal, CQ error, port error then port active, GID change and
//! device fatal, each delivered through the `ibv_get_async_event` read the
//! library makes, with nothing else of the device changed (the queue pair
//! an event names stays ready to send: what the library does is all that
//! ends the work in flight). On the blocking calls, a polling scope, owned
//! operations and futures: every pending request ends with
//! [`Error::DeviceEvent`] naming the event, well within the channel's
//! timeout; the channels the event does not concern go on; transfers that
//! succeed carry their bytes; the memory oracle holds nothing afterwards.
//!
//! Built with the feature by `cargo xtask test-rxe`; by hand: `cargo test
//! -p rdma-safe --features fault-injection --test NAME -- --include-ignored
//! --test-threads=1` beside a device.
#![cfg(feature = "fault-injection")]

mod common;

use common::faults::*;
use common::registered;
use rdma_core::fault::{self, Fault, Plan, Site, When};
use rdma_safe::channel::SharedCompletionQueue;
use rdma_safe::error::{AsyncEvent, ErrorKind, Operation};
use rdma_safe::owned::Request;
use rdma_safe::{
    BufferPool, Channel, Error, ProtectionDomain, ReceiveWorkRequest, ScopeError, WorkSuccess,
};
use std::time::Instant;

/// Posts receives on `ch` that nobody sends to and waits for them on
/// `path` (two on a scope, one elsewhere), returning every outcome; checks
/// that nothing was written into them and that the oracle holds none.
fn receive(
    path: Path,
    ch: &mut Channel,
    pd: &ProtectionDomain,
    pool: &BufferPool,
    what: &str,
) -> Vec<rdma_safe::Result<WorkSuccess>> {
    let mut rx = registered(pd, vec![FILL; PIECE]);
    let mut rx2 = registered(pd, vec![FILL; PIECE]);
    let out = match path {
        Path::Blocking => vec![ch.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))],
        Path::Scope => {
            let r = ch.scope(|s| {
                let (mut s1, mut s2) = ([rx.scatter(..)], [rx2.scatter(..)]);
                let p1 = s.post_receive(ReceiveWorkRequest::new(&mut s1))?;
                let p2 = s.post_receive(ReceiveWorkRequest::new(&mut s2))?;
                Ok::<_, Error>(vec![p1.wait(), p2.wait()])
            });
            r.unwrap_or_else(|e| vec![Err(ScopeError::flatten(e))])
        }
        Path::Owned | Path::Async => {
            let buf = pool.try_alloc().expect("a buffer");
            vec![run_owned(path, ch, Request::receive(buf)).0]
        }
    };
    for (i, b) in [&rx, &rx2].iter().enumerate() {
        assert!(b.iter().all(|&x| x == FILL), "{what}: receive {i} wrote");
    }
    assert_oracle_clear(what, &[ch.qp_num()], &[&rx[..], &rx2[..]]);
    out
}

/// Every outcome is the typed error of `event` on `operation`.
#[track_caller]
fn assert_event<T: std::fmt::Debug>(
    what: &str,
    outcomes: &[rdma_safe::Result<T>],
    operation: Operation,
    event: AsyncEvent,
) {
    assert!(!outcomes.is_empty(), "{what}: no outcome");
    for r in outcomes {
        match r {
            Err(e @ Error::DeviceEvent { operation: op, .. }) if *op == operation => {
                assert_eq!(e.device_event(), Some(event), "{what}: {e}");
                assert_eq!(e.kind(), ErrorKind::DeviceEvent, "{what}");
            }
            other => panic!("{what}: expected {event} on a {operation}, got {other:?}"),
        }
    }
}

/// Receives on `ch` fail at once with `event`: in less than the
/// channel's timeout, which a wait that missed the event would run out.
#[track_caller]
fn assert_fails_fast(path: Path, ch: &mut Channel, w: &World, event: AsyncEvent, what: &str) {
    let started = Instant::now();
    let outcomes = receive(path, ch, &w.pd, &w.pool, what);
    let took = started.elapsed();
    assert_event(what, &outcomes, Operation::Receive, event);
    assert!(took < TIMEOUT, "{what}: failed only after {took:?}");
    assert!(!ch.is_usable(), "{what}: still usable");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn event_qp_fatal_fails_its_channel_fast() {
    // The event comes with the post, or at the 4th read of the events
    // after it: while the wait sleeps (a future's completion driver then
    // wakes for no completion, only to look).
    for (site, call) in [(Site::PostRecv, 0), (Site::AsyncEventRead, 3)] {
        for path in PATHS {
            qp_fatal_on_pending_receives(path, site, call);
        }
    }

    // A write in flight whose completions the device holds back: the
    // event ends it, and it comes back only once the queue pair is reset
    // (the held completion never arrives).
    for path in PATHS {
        let what = &format!("{path:?}: QP fatal on a write in flight");
        println!("scenario: {what}");
        let mut w = World::new(path, "qp-fatal-write");
        let qp_num = w.a.qp_num();
        let event = AsyncEvent::QpFatal { qp_num };
        let plan = Plan::new(31)
            .at(
                Site::PollCq,
                When::Call(0),
                Fault::HoldCompletions { polls: u32::MAX },
            )
            .at_qp(qp_num, Site::PostSend, When::Call(0), Fault::Event(event));
        let installed = fault::install(plan);
        let started = Instant::now();
        let r = w.write(path, BATCH);
        assert_event(what, &[r], Operation::Write, event);
        assert!(started.elapsed() < 2 * TIMEOUT, "{what}: a hang");
        assert_fired(what, &installed, Site::PostSend, 1);
        drop(installed);
        w.verify(what, Landed::AtMost(BATCH));
    }
}

/// A QP fatal event on `path`'s pending receives, fired at call `call` of
/// `site`, after a write whose bytes are checked.
fn qp_fatal_on_pending_receives(path: Path, site: Site, call: u64) {
    let what = &format!("{path:?}: QP fatal at {site:?} {call} on pending receives");
    println!("scenario: {what}");
    let mut w = World::new(path, "qp-fatal");
    w.write(path, BATCH).expect("a write before the event");
    let qp_num = w.b.qp_num();
    let event = AsyncEvent::QpFatal { qp_num };
    let plan = match site {
        Site::PostRecv => Plan::new(30).at_qp(qp_num, site, When::Call(call), Fault::Event(event)),
        _ => Plan::new(30).at(site, When::Call(call), Fault::Event(event)),
    };
    let installed = fault::install(plan);
    let mut b = std::mem::replace(&mut w.b, w.pd.create_channel().expect("spare"));
    assert_fails_fast(path, &mut b, &w, event, what);
    assert_fired(what, &installed, site, 1);
    // A post after the event is refused with the same error.
    let again = receive(path, &mut b, &w.pd, &w.pool, what);
    assert_event(what, &again, Operation::Receive, event);
    // The event names one queue pair: its peer is not failed by it.
    assert!(w.a.is_usable(), "{what}: {:?}", w.a.unusable_reason());
    w.b = b;
    w.verify(what, Landed::All);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn event_cq_error_fails_every_channel_on_the_cq() {
    for path in PATHS {
        let what = &format!("{path:?}: CQ error on the channel's own CQ");
        println!("scenario: {what}");
        let mut w = World::new(path, "cq-error");
        let event = AsyncEvent::CqError { cq: w.b.cq_id() };
        assert_ne!(w.a.cq_id(), w.b.cq_id(), "{what}: one CQ per channel");
        let installed = fault::install(Plan::new(32).at_qp(
            w.b.qp_num(),
            Site::PostRecv,
            When::Call(0),
            Fault::Event(event),
        ));
        let mut b = std::mem::replace(&mut w.b, w.pd.create_channel().expect("spare"));
        assert_fails_fast(path, &mut b, &w, event, what);
        assert_fired(what, &installed, Site::PostRecv, 1);
        assert!(w.a.is_usable(), "{what}: another CQ's channel failed");
        w.b = b;
        w.verify(what, Landed::AtMost(0));
    }

    // Two channels on one shared CQ: the event fails both, the one whose
    // receive was pending and the one that was idle.
    let what = "CQ error on a shared CQ";
    println!("scenario: {what}");
    let w = World::new(Path::Blocking, "cq-error-shared");
    let cq = SharedCompletionQueue::new(&w.pd, 4096).expect("a shared CQ");
    let on_cq = || {
        w.pd.channel_builder()
            .completion_queue(&cq)
            .timeout(TIMEOUT)
            .build()
            .expect("a channel on the shared CQ")
    };
    let (mut b1, mut b2) = (on_cq(), on_cq());
    let (mut a1, mut a2) = (
        w.pd.create_channel().unwrap(),
        w.pd.create_channel().unwrap(),
    );
    Channel::connect_pair(&mut a1, &mut b1).expect("connect 1");
    Channel::connect_pair(&mut a2, &mut b2).expect("connect 2");
    let event = AsyncEvent::CqError { cq: cq.id() };
    assert_eq!((b1.cq_id(), b2.cq_id()), (cq.id(), cq.id()), "{what}");
    let installed = fault::install(Plan::new(33).at_qp(
        b1.qp_num(),
        Site::PostRecv,
        When::Call(0),
        Fault::Event(event),
    ));
    assert_fails_fast(Path::Blocking, &mut b1, &w, event, what);
    assert!(!b2.is_usable(), "{what}: the idle channel on the CQ");
    assert_fails_fast(Path::Scope, &mut b2, &w, event, what);
    assert_fired(what, &installed, Site::PostRecv, 1);
    assert!(
        a1.is_usable() && a2.is_usable(),
        "{what}: the peers' own CQs"
    );
    assert_oracle_clear(what, &[b1.qp_num(), b2.qp_num()], &[]);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn event_port_error_fails_the_port_and_a_reconnect_after_port_active_works() {
    for path in PATHS {
        let what = &format!("{path:?}: port error, then port active");
        println!("scenario: {what}");
        let mut w = World::new(path, "port-flap");
        let port = w.b.port();
        let down = AsyncEvent::PortError { port };
        let installed = fault::install(Plan::new(34).at_qp(
            w.b.qp_num(),
            Site::PostRecv,
            When::Call(0),
            Fault::Event(down),
        ));
        let mut b = std::mem::replace(&mut w.b, w.pd.create_channel().expect("spare"));
        assert_fails_fast(path, &mut b, &w, down, what);
        assert_fired(what, &installed, Site::PostRecv, 1);
        // Every channel on the port made before the event fails.
        let mut a = std::mem::replace(&mut w.a, w.pd.create_channel().expect("spare"));
        assert_eq!(a.port(), port, "{what}: one port");
        assert_fails_fast(path, &mut a, &w, down, what);
        let seen = a.port_events();
        assert_eq!((seen.errors, seen.up), (1, false), "{what}: {seen:?}");
        drop(installed);
        // The port comes back: surfaced, and a new pair works.
        let installed = fault::install(Plan::new(35).at(
            Site::AsyncEventRead,
            When::Call(0),
            Fault::Event(AsyncEvent::PortActive { port }),
        ));
        let seen = a.port_events();
        assert_fired(what, &installed, Site::AsyncEventRead, 1);
        assert_eq!(
            (seen.errors, seen.active, seen.up),
            (1, 1, true),
            "{what}: {seen:?}"
        );
        (w.a, w.b) = (a, b);
        w.reconnect(path, what);
        let done = w.write(path, BATCH).expect("a write after the reconnect");
        assert_eq!(done.bytes(), BATCH * PIECE, "{what}");
        w.verify(what, Landed::All);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn event_gid_change_is_surfaced_and_fails_nothing() {
    for path in PATHS {
        let what = &format!("{path:?}: GID change");
        println!("scenario: {what}");
        let mut w = World::new(path, "gid-change");
        let port = w.a.port();
        let installed = fault::install(Plan::new(36).at(
            Site::AsyncEventRead,
            When::Call(0),
            Fault::Event(AsyncEvent::GidChange { port }),
        ));
        w.write(path, BATCH).expect("a write around the event");
        let seen = w.a.port_events();
        assert_fired(what, &installed, Site::AsyncEventRead, 1);
        assert_eq!((seen.gid_changes, seen.errors), (1, 0), "{what}: {seen:?}");
        assert!(
            w.a.is_usable() && w.b.is_usable(),
            "{what}: a channel failed"
        );
        w.write(path, BATCH).expect("a write after the event");
        // A new pair looks the GID up again: the port's current one.
        w.reconnect(path, what);
        let current = w.pd.context().preferred_gid(port).expect("the GID now");
        assert_eq!(w.a.gid().gid, current.gid, "{what}: a stale GID");
        w.write(path, BATCH).expect("a write on the new pair");
        w.verify(what, Landed::All);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn event_device_fatal_fails_everything_on_the_device() {
    for path in PATHS {
        let what = &format!("{path:?}: device fatal");
        println!("scenario: {what}");
        let mut w = World::new(path, "device-fatal");
        let (mut c, d) = common::pair_with(&w.pd, |c| c.timeout(TIMEOUT));
        let event = AsyncEvent::DeviceFatal;
        let installed = fault::install(Plan::new(37).at_qp(
            w.b.qp_num(),
            Site::PostRecv,
            When::Call(0),
            Fault::Event(event),
        ));
        let mut b = std::mem::replace(&mut w.b, w.pd.create_channel().expect("spare"));
        assert_fails_fast(path, &mut b, &w, event, what);
        assert_fired(what, &installed, Site::PostRecv, 1);
        assert!(!d.is_usable(), "{what}: another pair on the device");
        assert_fails_fast(Path::Blocking, &mut c, &w, event, what);
        // A channel made on the failed device afterwards fails as well.
        let (mut e, _f) = common::pair_with(&w.pd, |c| c.timeout(TIMEOUT));
        assert_fails_fast(Path::Blocking, &mut e, &w, event, what);
        w.b = b;
        assert_oracle_clear(what, &[w.a.qp_num(), w.b.qp_num(), c.qp_num()], &[]);
        drop(installed);
        // The device opened again works.
        let mut fresh = World::new(path, "device-fatal-reopened");
        fresh
            .write(path, BATCH)
            .expect("a write on the reopened device");
        fresh.verify(what, Landed::All);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn event_qp_fatal_ends_a_busy_polling_future() {
    // A future without a reactor polls the CQ itself and looks at the
    // device's events every so many empty polls.
    for (site, call) in [(Site::PostRecv, 0), (Site::AsyncEventRead, 3)] {
        let what = &format!("busy-polling future: QP fatal at {site:?} {call}");
        println!("scenario: {what}");
        let w = World::new(Path::Owned, "qp-fatal-busy");
        let qp_num = w.b.qp_num();
        let event = AsyncEvent::QpFatal { qp_num };
        let plan = match site {
            Site::PostRecv => {
                Plan::new(38).at_qp(qp_num, site, When::Call(call), Fault::Event(event))
            }
            _ => Plan::new(38).at(site, When::Call(call), Fault::Event(event)),
        };
        let installed = fault::install(plan);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let shared = w.b.shared();
        let started = Instant::now();
        let buf = w.pool.try_alloc().expect("a buffer");
        let r = rt.block_on(shared.submit(Request::receive(buf))).0;
        let took = started.elapsed();
        assert_event(what, &[r], Operation::Receive, event);
        assert!(took < TIMEOUT, "{what}: failed only after {took:?}");
        assert_fired(what, &installed, site, 1);
        drop(shared);
        drop(installed);
        w.verify(what, Landed::AtMost(0));
    }
}
