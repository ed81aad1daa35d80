//! Control verbs failing under rdma-core's fault-injecting layer, on a
//! real device: registrations refused (`ENOMEM`, `EFAULT`), CQ, QP and SRQ
//! creation refused, a connect step (`ibv_modify_qp`) refused, and a queue
//! pair created with smaller capacities than asked. Each ends in a typed
//! error, and what is made afterwards works.
//!
//! Built with the feature by `cargo xtask test-rxe`; by hand: `cargo test
//! -p rdma-safe --features fault-injection --test NAME -- --include-ignored
//! --test-threads=1` beside a device.
#![cfg(feature = "fault-injection")]

mod common;

use common::faults::*;
use common::{pattern, pd, registered, seed};
use rdma_core::fault::{self, Fault, Plan, Site, When};
use rdma_safe::{
    BufferPool, Channel, Error, RegisteredBuffer, RemoteAccessBuffer, WriteWorkRequest,
};

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn refused_registrations() {
    let pd = pd();
    for errno in [ENOMEM, EFAULT] {
        let what = &format!("registration refused with errno {errno}");
        let installed = fault::install(Plan::new(12).at(
            Site::RegisterMr,
            When::Call(0),
            Fault::Refuse { errno },
        ));
        match RegisteredBuffer::new(&pd, 4096) {
            Err(e) => assert_eq!(e.errno(), Some(errno), "{what}: {e}"),
            Ok(_) => panic!("{what}: registered"),
        }
        match RemoteAccessBuffer::new(&pd, 4096) {
            Ok(b) => drop(b),
            Err(e) => panic!("{what}: the next registration: {e}"),
        }
        assert_fired(what, &installed, Site::RegisterMr, 1);
        // A pool registers its slabs: refused, it is not made.
        let installed = fault::install(Plan::new(13).at(
            Site::RegisterMr,
            When::Always,
            Fault::Refuse { errno },
        ));
        assert!(BufferPool::new(&pd, 4096, 4).is_err(), "{what}: a pool");
        assert!(installed.count(Site::RegisterMr) >= 1, "{what}");
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn refused_creations() {
    let pd = pd();
    for site in [Site::CreateCq, Site::CreateQp] {
        let what = &format!("{site:?} refused");
        let installed =
            fault::install(Plan::new(14).at(site, When::Call(0), Fault::Refuse { errno: ENOMEM }));
        match pd.create_channel() {
            Err(e) => assert_eq!(e.errno(), Some(ENOMEM), "{what}: {e}"),
            Ok(_) => panic!("{what}: a channel was made"),
        }
        assert_fired(what, &installed, site, 1);
        let (mut a, mut b) = (pd.create_channel(), pd.create_channel());
        let (a, b) = (
            a.as_mut().expect("the next channel"),
            b.as_mut().expect("b"),
        );
        Channel::connect_pair(a, b).expect("connect after the refusal");
    }
    let installed = fault::install(Plan::new(15).at(
        Site::CreateSrq,
        When::Call(0),
        Fault::Refuse { errno: ENOMEM },
    ));
    match rdma_safe::SharedReceiveQueue::new(&pd, 16, 256) {
        Err(e) => assert_eq!(e.errno(), Some(ENOMEM), "SRQ refused: {e}"),
        Ok(_) => panic!("SRQ refused: made"),
    }
    assert_fired("SRQ", &installed, Site::CreateSrq, 1);
    // A refused connect step (INIT → RTR): a typed error, nothing else.
    let (mut a, mut b) = (
        pd.create_channel().expect("a"),
        pd.create_channel().expect("b"),
    );
    let installed = fault::install(Plan::new(16).at_qp(
        b.qp_num(),
        Site::ModifyQp,
        When::Call(1),
        Fault::Refuse { errno: EINVAL },
    ));
    match Channel::connect_pair(&mut a, &mut b) {
        Err(e) => assert_eq!(e.errno(), Some(EINVAL), "refused RTR: {e}"),
        Ok(()) => panic!("connected through a refused modify"),
    }
    assert_fired("refused modify", &installed, Site::ModifyQp, 1);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_queue_pair_smaller_than_asked() {
    let pd = pd();
    let small = Fault::SmallerQp {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_inline_data: 0,
    };
    let installed = fault::install(Plan::new(17).at(Site::CreateQp, When::Call(0), small));
    let mut a = pd
        .channel_builder()
        .timeout(TIMEOUT)
        .build()
        .expect("a smaller channel");
    assert_fired("smaller QP", &installed, Site::CreateQp, 1);
    drop(installed);
    let mut b = pd.channel_builder().timeout(TIMEOUT).build().expect("b");
    Channel::connect_pair(&mut a, &mut b).expect("connect");
    let src = registered(&pd, pattern(seed("smaller-qp", 1), BATCH * PIECE));
    let peer = RemoteAccessBuffer::new(&pd, BATCH * PIECE).expect("peer");
    let gathers: Vec<_> = (0..BATCH)
        .map(|i| [src.gather(i * PIECE..(i + 1) * PIECE)])
        .collect();
    let remote = |i: usize| {
        peer.remote()
            .slice((i * PIECE) as u64, PIECE as u64)
            .expect("piece")
    };
    let mut wrs: Vec<_> = (0..BATCH)
        .map(|i| WriteWorkRequest::new(&gathers[i], remote(i)))
        .collect();
    // A batch larger than the queue: refused before the verb, typed.
    match a.run_batch(&mut wrs) {
        Err(e) => assert!(a.is_usable(), "refused, not poisoned: {e}"),
        Ok(_) => panic!("a batch of {BATCH} on a send queue of 2"),
    }
    // In a scope, a post beyond the queue's room is refused before the
    // verb (typed, the channel usable); two at a time fit.
    a.scope(|s| {
        let mut wrs = wrs.drain(..);
        let first: Vec<_> = wrs
            .by_ref()
            .take(2)
            .map(|wr| s.post(wr))
            .collect::<Result<_, _>>()?;
        let third = wrs.next().expect("a third write");
        match s.post(third) {
            Err(Error::Post { .. }) => {}
            other => panic!("a third write on a queue of 2: {other:?}"),
        }
        first.into_iter().try_for_each(|h| h.wait().map(drop))?;
        let rest: Vec<_> = [third]
            .into_iter()
            .chain(wrs)
            .map(|wr| s.post(wr))
            .collect::<Result<_, _>>()?;
        rest.into_iter().try_for_each(|h| h.wait().map(drop))
    })
    .expect("writes through a small queue");
    let mut got = vec![0; BATCH * PIECE];
    peer.read(0, &mut got).expect("read");
    assert_eq!(got[..], src[..], "the writes' bytes");
    assert_oracle_clear("smaller QP", &[a.qp_num(), b.qp_num()], &[&src[..]]);
}
