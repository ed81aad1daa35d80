//! Posts that fail, on a real device: what comes back, and that nothing of
//! a failed post can run later.
//!
//! The hole these tests pin (rxe, from safe code only): an owned RDMA read
//! posted on a channel that is not connected yet failed, the buffer came
//! back, and after the channel was connected the next doorbell ran the
//! "refused" read into the buffer Rust had written since. Its completion
//! also carried the id the engine handed to the next request, so a later
//! blocking read returned before its bytes were placed. Posts are now
//! checked against the queue pair's state before the verb, and a verb
//! failure that does not prove nothing was queued shuts the channel down
//! and drains it before anything comes back.

mod common;

use common::{assert_bytes, assert_idle, pattern, pd, registered, seed};
use rdma_safe::owned::Request;
use rdma_safe::{
    channel::QpState, owned::OwnedRequest, pool::PoolBuf, BufferPool, Channel, Error,
    ReadWorkRequest, ReceiveWorkRequest, RemoteAccessBuffer, SendWorkRequest, SharedReceiveQueue,
};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

const REGION: usize = 4096;

/// A pool buffer holding `byte` everywhere.
fn filled(pool: &BufferPool, byte: u8) -> PoolBuf {
    let mut b = pool.try_alloc().expect("a free buffer");
    b.fill(byte);
    b
}

#[track_caller]
fn assert_all(buf: &[u8], byte: u8, what: &str) {
    if let Some(i) = buf.iter().position(|&x| x != byte) {
        panic!(
            "{what}: byte {i} is {:#04x}, not {byte:#04x} (the NIC wrote memory it was refused)",
            buf[i]
        );
    }
}

#[track_caller]
fn assert_not_ready<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(Error::NotReady {
            state: QpState::Init,
            ..
        }) => {}
        other => panic!("{what}: expected NotReady in INIT, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn owned_posts_on_an_unconnected_channel_are_refused_and_never_run_later() {
    let pd = pd();
    let mut a = pd.create_channel().expect("channel a");
    let mut b = pd.create_channel().expect("channel b");
    let sa = a.shared();
    let peer = RemoteAccessBuffer::new(&pd, 4 << 20).expect("peer region");
    let data = pattern(seed("refused-read", 4 << 20), 4 << 20);
    peer.write(0, &data).expect("fill the peer region");
    let remote = peer.remote().slice(0, REGION as u64).expect("4 KiB of it");
    let pool = BufferPool::new(&pd, REGION, 8).expect("pool");

    // A single owned read, and a batch of two: refused before the verb,
    // every buffer back.
    let (r, rx) = sa.run(Request::read(filled(&pool, 0x11), remote));
    assert_not_ready(r, "owned read in INIT");
    let batch = vec![
        OwnedRequest::read(filled(&pool, 0x11), remote),
        OwnedRequest::read(filled(&pool, 0x11), remote),
    ];
    let (r, batch) = sa.run(Request::batch(batch));
    assert_not_ready(r, "owned read batch in INIT");
    assert_eq!(batch.len(), 2);
    assert!(
        sa.unusable_reason().is_none(),
        "a refusal leaves the channel usable"
    );
    assert_idle(&sa, "after the refusals");

    // Rust owns those buffers again and writes them.
    let mut rx = rx;
    rx.fill(0x22);
    let mut batch_bufs: Vec<PoolBuf> = batch
        .into_iter()
        .map(|r| {
            let mut buf = r.into_buf().expect("a read comes back as a read");
            buf.fill(0x22);
            buf
        })
        .collect();

    // Connected, the channel rings doorbells: a refused read must not run.
    Channel::connect_pair(&mut a, &mut b).expect("connect");
    let (r, back) = sa.run(Request::read(filled(&pool, 0), remote));
    r.expect("an owned read after connecting");
    assert_bytes(&back, &data[..REGION], "the read after connecting");
    std::thread::sleep(Duration::from_millis(100));
    assert_all(&rx, 0x22, "the refused owned read's buffer");
    for b in &mut batch_bufs {
        assert_all(b, 0x22, "a refused batch member's buffer");
    }

    // A blocking read of 4 MiB returns only with every byte placed (a
    // stale completion carrying its id would have ended it early).
    let mut local = registered(&pd, vec![0u8; 4 << 20]);
    let mut list = [local.scatter(..)];
    let done = a
        .read(ReadWorkRequest::new(&mut list, peer.remote()))
        .expect("a 4 MiB blocking read");
    assert_eq!(done.bytes(), 4 << 20);
    assert_bytes(&local, &data, "the 4 MiB read, at return");
    let (posted, completed) = a.totals();
    assert_eq!(posted, completed, "completions match posts");
    drop(b);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn borrowed_sends_on_an_unconnected_channel_are_errors_not_aborts() {
    let pd = pd();
    let mut a = pd.create_channel().expect("channel");
    let buf = registered(&pd, vec![7u8; 64]);
    let gather = [buf.gather(..)];
    assert_not_ready(a.send(SendWorkRequest::new(&gather)), "send in INIT");
    let mut wrs = [SendWorkRequest::new(&gather), SendWorkRequest::new(&gather)];
    assert_not_ready(a.run_batch(&mut wrs), "send batch in INIT");
    assert!(a.is_usable(), "a refusal leaves the channel usable");
    assert_eq!(a.outstanding(), 0);
}

/// With the state check skipped, the verb itself fails on a channel that
/// is not connected — after rxe wrote the request into the ring. That
/// failure names no request, so the channel must be shut down and drained
/// (or reset) before the memory comes back.
#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_post_that_fails_after_queueing_returns_only_once_nothing_can_run() {
    let pd = pd();
    let peer = RemoteAccessBuffer::new(&pd, REGION).expect("peer region");
    peer.fill(0x5A);
    let remote = peer.remote();
    let pool = BufferPool::new(&pd, REGION, 4).expect("pool");

    // Owned read.
    let a = pd.create_channel().expect("channel");
    a.skip_readiness_check();
    let sa = a.shared();
    let start = Instant::now();
    let (r, rx) = sa.run(Request::read(filled(&pool, 0x11), remote));
    let took = start.elapsed();
    eprintln!("owned read on INIT, check skipped: {r:?} after {took:?}");
    assert!(r.is_err(), "the verb refuses a doorbell in INIT");
    assert_all(&rx, 0x11, "the owned read's buffer");
    assert!(sa.unusable_reason().is_some(), "the channel is shut down");
    assert_idle(&sa, "owned read");
    let state = a.qp_state().expect("query the queue pair");
    assert!(
        matches!(state, QpState::Error | QpState::Reset),
        "the queue pair was stopped: {state:?}"
    );
    assert!(took < Duration::from_secs(30), "bounded: {took:?}");

    // Owned batch.
    let c = pd.create_channel().expect("channel");
    c.skip_readiness_check();
    let sc = c.shared();
    let batch = (0..3)
        .map(|_| OwnedRequest::read(filled(&pool, 0x33), remote))
        .collect();
    let (r, batch) = sc.run(Request::batch(batch));
    eprintln!("owned batch on INIT, check skipped: {r:?}");
    assert!(r.is_err());
    assert_eq!(batch.len(), 3, "every request comes back");
    assert_idle(&sc, "owned batch");
    for req in batch {
        let buf = req.into_buf().expect("a read comes back as a read");
        assert_all(&buf, 0x33, "a batch member's buffer");
    }

    // Borrowed blocking read.
    let mut d = pd.create_channel().expect("channel");
    d.skip_readiness_check();
    let mut local = registered(&pd, vec![0x44u8; REGION]);
    let mut list = [local.scatter(..)];
    let r = d.read(ReadWorkRequest::new(&mut list, remote));
    eprintln!("blocking read on INIT, check skipped: {r:?}");
    assert!(r.is_err());
    assert!(!d.is_usable());
    assert_eq!(d.outstanding(), 0);
    assert_all(&local, 0x44, "the blocking read's buffer");
    drop(rx);
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "every pool buffer is back"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_completion_queue_smaller_than_the_queues_is_refused() {
    let pd = pd();
    let err = pd
        .channel_builder()
        .send_depth(8)
        .recv_depth(8)
        .cq_size(1)
        .build()
        .expect_err("a CQ of 1 for 16 requests");
    let msg = err.to_string();
    assert!(
        msg.contains("cq_size(16)"),
        "the error says what fits: {msg}"
    );
    pd.channel_builder()
        .send_depth(8)
        .recv_depth(8)
        .cq_size(16)
        .build()
        .expect("a CQ that fits both queues");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn receives_on_a_channel_with_a_shared_receive_queue_are_errors() {
    let pd = pd();
    let srq = SharedReceiveQueue::new(&pd, 8, 256).expect("shared receive queue");
    let mut ch = pd
        .channel_builder()
        .shared_receive_queue(&srq)
        .build()
        .expect("channel on the SRQ");
    let mut buf = registered(&pd, vec![0u8; 64]);
    let r = ch.manual_scope(|s| {
        // An empty receive, then a real one, as one batch.
        let (mr, bytes) = buf.split_mut();
        let mut one = [mr.scatter_element(bytes)];
        let mut wrs = [
            ReceiveWorkRequest::new(&mut []),
            ReceiveWorkRequest::new(&mut one),
        ];
        s.post_receive_batch(&mut wrs).map(|h| h.len())
    });
    match r {
        Err(Error::Post { source, .. }) => {
            assert!(
                source.to_string().contains("shared receive queue"),
                "{source}"
            );
        }
        other => panic!("expected a refusal naming the SRQ, got {other:?}"),
    }
    assert!(ch.is_usable());
}

struct CountWakes;
impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {}
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_future_waiting_for_room_has_one_registration_however_often_polled() {
    let pd = pd();
    let (a, b) = common::pair_with(&pd, |c| c.send_depth(1));
    let sa = a.shared().with_timeout(Duration::from_secs(10));
    let pool = BufferPool::new(&pd, 64, 4).expect("pool");
    let waker = Waker::from(Arc::new(CountWakes));
    let mut cx = Context::from_waker(&waker);
    // The peer posts no receive: the send waits in RNR retries and keeps
    // the one send-queue entry.
    let mut first = pin!(sa.submit(Request::send(common::frozen(&pool, b"first"))));
    assert!(first.as_mut().poll(&mut cx).is_pending(), "posted");
    // Boxed, so that dropping it drops the future.
    let mut second = Box::pin(sa.submit(Request::send(common::frozen(&pool, b"second"))));
    for _ in 0..200 {
        assert!(second.as_mut().poll(&mut cx).is_pending(), "no room");
    }
    assert_eq!(sa.room_waiters(), 1, "one entry for one waiting future");
    drop(second);
    assert_eq!(sa.room_waiters(), 0, "a dropped future leaves the list");
    // Let the first complete: the peer posts a receive.
    let sb = b.shared();
    let rx = filled(&pool, 0);
    let got = std::thread::spawn(move || sb.run(Request::receive(rx)).0.map(|w| w.bytes()));
    let out = loop {
        if let Poll::Ready(out) = first.as_mut().poll(&mut cx) {
            break out;
        }
    };
    out.0.expect("the first send");
    assert_eq!(got.join().expect("receiver").expect("receive"), 5);
}
