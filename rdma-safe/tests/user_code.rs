//! The library's rule about code of the user's — an `Extend`, a `Waker`, a
//! callback, a `Drop` — proven on a real device: none runs while the
//! engine's bookkeeping is incomplete, while it holds its lock, or inside a
//! wait that must not unwind.
//!
//! - An `Extend` that takes none (or one) of a scope's receive handles, or
//!   panics, still leaves every receive waited for: bytes refilled after the
//!   scope returns stay as they were.
//! - A waker that calls into the channel from `wake` (an executor that polls
//!   inline), or from its `Drop`, or a pool waiter's waker doing so when an
//!   abandoned receive gives its buffer back: no deadlock.
//! - A panicking waker reaped inside another request's blocking wait: no
//!   abort. Reaped by `run_callbacks`: no completion lost.
//! - `start_receives` into an `Extend` that takes nothing: the buffers come
//!   back to the pool once their messages arrive.

mod common;

use common::{assert_bytes, pair_with, pattern, pd, registered, seed};
use rdma_safe::owned::{CompletionReactor, Op, Request};
use rdma_safe::pool::PoolBuf;
use rdma_safe::{
    BufferPool, Channel, ProtectionDomain, ReceiveWorkRequest, SendWorkRequest, SharedChannel,
};
use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

const LEN: usize = 4096;
/// What a hang is: far beyond anything these tests wait for.
const HANG: Duration = Duration::from_secs(60);

fn channels(pd: &ProtectionDomain) -> (Channel, Channel) {
    pair_with(pd, |c| {
        c.completion_events(true)
            .send_depth(16)
            .recv_depth(16)
            .timeout(Duration::from_secs(20))
    })
}

/// A reactor that never wakes anything: completions are reaped only where
/// a test says, so it decides whose call delivers them.
#[derive(Debug)]
struct Inert;

impl CompletionReactor for Inert {
    fn spawn(&self, _driver: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) {}
    fn poll_ready(
        &self,
        _cx: &mut Context<'_>,
        _deadline: Instant,
        _drain: &mut dyn FnMut() -> io::Result<()>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

/// Runs `f`, and ends the process if it has not returned within [`HANG`]:
/// a deadlock then fails the test binary instead of hanging it.
fn within<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let (done, wait) = mpsc::channel::<()>();
    let what = what.to_owned();
    let watchdog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(HANG) {
            eprintln!("{what} did not return within {HANG:?}: deadlocked");
            std::process::abort();
        }
    });
    let v = f();
    drop(done);
    watchdog.join().expect("the watchdog");
    v
}

/// Polls `op` once with `waker`.
fn poll_with<B: rdma_safe::owned::OwnedBuffer>(
    op: &mut Op<'_, B>,
    waker: &Waker,
) -> Poll<rdma_safe::owned::Completed<B>> {
    Pin::new(op).poll(&mut Context::from_waker(waker))
}

/// Polls `op` until it resolves (busy, bounded by [`HANG`]).
fn resolve<B: rdma_safe::owned::OwnedBuffer>(
    mut op: Op<'_, B>,
    what: &str,
) -> rdma_safe::owned::Completed<B> {
    let waker = Waker::from(Arc::new(Counting::default()));
    let start = Instant::now();
    loop {
        if let Poll::Ready(done) = poll_with(&mut op, &waker) {
            return done;
        }
        assert!(start.elapsed() < HANG, "{what}: never resolved");
        std::thread::yield_now();
    }
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A waker that panics when woken.
struct Panicking(AtomicUsize);

impl Wake for Panicking {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("a waker that panics");
    }
}

/// A waker that calls into the channel when woken — as an executor that
/// polls the task inline from `wake` would — or, with `on_drop`, when its
/// last reference is dropped (as dropping a task's last waker may drop the
/// task's future, and a dropped `Op` calls into its channel).
struct Reentrant {
    ch: SharedChannel,
    hits: Arc<AtomicUsize>,
    on_drop: bool,
}

impl Reentrant {
    /// A waker of this kind on `ch`, and the count of its calls into it.
    fn waker(ch: &SharedChannel, on_drop: bool) -> (Waker, Arc<AtomicUsize>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let w = Waker::from(Arc::new(Reentrant {
            ch: ch.clone(),
            hits: hits.clone(),
            on_drop,
        }));
        (w, hits)
    }

    fn reenter(&self) {
        // Takes the engine's lock.
        let _ = self.ch.counters();
        self.hits.fetch_add(1, Ordering::SeqCst);
    }
}

impl Wake for Reentrant {
    fn wake(self: Arc<Self>) {
        if !self.on_drop {
            self.reenter();
        }
    }
}

impl Drop for Reentrant {
    fn drop(&mut self) {
        if self.on_drop {
            self.reenter();
        }
    }
}

fn message(n: usize) -> Vec<u8> {
    pattern(seed("user_code", n), LEN)
}

/// `a` sends message `n` (blocking).
fn send(a: &mut Channel, pd: &ProtectionDomain, n: usize) {
    let tx = registered(pd, message(n));
    a.send(SendWorkRequest::new(&[tx.gather(..)]))
        .unwrap_or_else(|e| panic!("send message {n}: {e}"));
}

/// Handles a scope's receive batch goes to: which of them it takes.
enum Taker {
    Nothing,
    First,
    Panics,
}

struct Extender(Taker);

impl<T> Extend<T> for Extender {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        match self.0 {
            Taker::Nothing => {}
            Taker::First => drop(items.into_iter().next()),
            Taker::Panics => panic!("an Extend that panics"),
        }
    }
}

/// Posts two receives in a scope into an `Extend` that mistreats their
/// handles, while `a` sends two messages 300 ms later. The scope must wait
/// for both: after it returns, refilled buffers stay refilled, and the
/// next messages go to the next receives.
fn scope_waits_for_receives_it_gave_no_handle_for(taker: Taker) {
    let pd = pd();
    let (mut a, mut b) = channels(&pd);
    let panics = matches!(taker, Taker::Panics);
    let mut rx1 = registered(&pd, vec![0u8; LEN]);
    let mut rx2 = registered(&pd, vec![0u8; LEN]);
    std::thread::scope(|t| {
        let sender = t.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            send(&mut a, &pd, 1);
            send(&mut a, &pd, 2);
        });
        let mut handles = Extender(taker);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            b.scope(|s| {
                let mut sc1 = [rx1.scatter(..)];
                let mut sc2 = [rx2.scatter(..)];
                let mut wrs = [
                    ReceiveWorkRequest::new(&mut sc1),
                    ReceiveWorkRequest::new(&mut sc2),
                ];
                s.post_receive_batch_into(&mut wrs, &mut handles)
            })
        }));
        match outcome {
            Ok(r) => {
                assert!(!panics);
                assert_eq!(r.expect("the scope"), 2, "both receives posted");
            }
            Err(_) => assert!(panics, "only the panicking Extend panics"),
        }
        sender.join().expect("sender");
    });
    assert_eq!(b.outstanding(), 0, "nothing outstanding outside a scope");
    assert_bytes(&rx1, &message(1), "the first receive, waited for");
    assert_bytes(&rx2, &message(2), "the second receive, waited for");
    // Rust owns both buffers again: whatever arrives now must not land in
    // them.
    rx1.fill(0x33);
    rx2.fill(0x33);
    let mut rx3 = registered(&pd, vec![0u8; LEN]);
    std::thread::scope(|t| {
        t.spawn(|| send(&mut a, &pd, 3));
        let got = b
            .receive(ReceiveWorkRequest::new(&mut [rx3.scatter(..)]))
            .expect("a new receive");
        assert_eq!(got.bytes(), LEN);
    });
    assert_bytes(&rx3, &message(3), "the message after the scope");
    assert!(
        rx1.iter().chain(rx2.iter()).all(|&x| x == 0x33),
        "a buffer given back was written"
    );
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_scope_waits_for_receives_whose_handles_an_extend_dropped() {
    scope_waits_for_receives_it_gave_no_handle_for(Taker::Nothing);
    scope_waits_for_receives_it_gave_no_handle_for(Taker::First);
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_scope_waits_for_receives_when_the_extend_panics() {
    scope_waits_for_receives_it_gave_no_handle_for(Taker::Panics);
}

/// A `SharedChannel` of `b` whose futures leave their wakers in their slots
/// (it has a reactor) but whose completions only the test reaps.
fn inert(b: &Channel) -> SharedChannel {
    b.shared().with_reactor(Arc::new(Inert))
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_waker_that_calls_into_the_channel_from_wake_does_not_deadlock() {
    let pd = pd();
    let (mut a, b) = channels(&pd);
    let sb = inert(&b);
    let pool = BufferPool::new(&pd, LEN, 4).expect("pool");
    let (waker, hits) = Reentrant::waker(&sb, false);
    let mut op = sb.start(Request::receive(pool.try_alloc().expect("buffer")));
    assert!(poll_with(&mut op, &waker).is_pending(), "no message yet");
    drop(waker);
    send(&mut a, &pd, 1);
    // The reap that delivers the completion wakes the waker, which locks
    // the engine again.
    within("the reap that wakes a re-entrant waker", || {
        sb.run_callbacks().expect("reap")
    });
    assert_eq!(hits.load(Ordering::SeqCst), 1, "woken once");
    let (got, buf) = resolve(op, "the receive");
    assert_eq!(got.expect("receive").bytes(), LEN);
    assert_bytes(&buf, &message(1), "received");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_waker_whose_drop_calls_into_the_channel_does_not_deadlock() {
    let pd = pd();
    let (mut a, b) = channels(&pd);
    let sb = inert(&b);
    let pool = BufferPool::new(&pd, LEN, 4).expect("pool");
    let (first, hits) = Reentrant::waker(&sb, true);
    let mut op = sb.start(Request::receive(pool.try_alloc().expect("buffer")));
    assert!(poll_with(&mut op, &first).is_pending());
    // The slot now holds the only other reference: a poll with another
    // task's waker replaces it, and dropping it calls into the channel.
    drop(first);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let counting = Arc::new(Counting::default());
    let second = Waker::from(counting.clone());
    let pending = within("a poll that replaces a re-entrant waker", || {
        poll_with(&mut op, &second).is_pending()
    });
    assert!(pending);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the replaced waker was dropped"
    );
    send(&mut a, &pd, 1);
    sb.run_callbacks().expect("reap");
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        1,
        "the new waker was woken"
    );
    let (got, buf) = resolve(op, "the receive");
    assert_eq!(got.expect("receive").bytes(), LEN);
    assert_bytes(&buf, &message(1), "received");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_pool_waiter_woken_by_an_abandoned_receive_may_call_into_the_channel() {
    let pd = pd();
    let (mut a, b) = channels(&pd);
    let sb = inert(&b);
    let pool = BufferPool::new(&pd, LEN, 1).expect("a pool of one buffer");
    // The only buffer goes to a receive whose future is dropped: the engine
    // keeps it until the message arrives.
    drop(sb.start(Request::receive(pool.try_alloc().expect("buffer"))));
    let (waker, hits) = Reentrant::waker(&sb, false);
    assert!(pool
        .poll_alloc(&mut Context::from_waker(&waker))
        .is_pending());
    drop(waker);
    send(&mut a, &pd, 1);
    within("the reap that returns an abandoned buffer", || {
        sb.run_callbacks().expect("reap")
    });
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the pool's waiter was woken"
    );
    assert_eq!(pool.available(), 1, "the buffer is back");
}

/// A receive future whose waker panics, and one whose waker counts, both
/// waiting on `b`; two messages arrive. Whoever reaps them — `reap`, given
/// both channels and `b`'s shared handle — delivers both: no abort, no
/// completion lost.
fn a_panicking_waker_loses_nothing(
    reap: impl FnOnce(&mut Channel, &mut Channel, &ProtectionDomain, &SharedChannel),
) {
    let pd = pd();
    let (mut a, mut b) = channels(&pd);
    let sb = inert(&b);
    let pool = BufferPool::new(&pd, LEN, 4).expect("pool");
    let panicking = Arc::new(Panicking(AtomicUsize::new(0)));
    let counting = Arc::new(Counting::default());
    let mut first = sb.start(Request::receive(pool.try_alloc().expect("buffer")));
    let mut second = sb.start(Request::receive(pool.try_alloc().expect("buffer")));
    assert!(poll_with(&mut first, &Waker::from(panicking.clone())).is_pending());
    assert!(poll_with(&mut second, &Waker::from(counting.clone())).is_pending());
    send(&mut a, &pd, 1);
    send(&mut a, &pd, 2);
    // The responder writes the completions before it acknowledges the
    // sends; a margin for a provider that does not.
    std::thread::sleep(Duration::from_millis(50));
    reap(&mut a, &mut b, &pd, &sb);
    assert_eq!(
        panicking.0.load(Ordering::SeqCst),
        1,
        "the panicking waker was woken"
    );
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        1,
        "the other waker was woken too"
    );
    for (k, op) in [(1, first), (2, second)] {
        let (got, buf) = resolve(op, "a receive");
        assert_eq!(got.expect("receive").bytes(), LEN);
        assert_bytes(&buf, &message(k), "received");
    }
    assert!(sb.unusable_reason().is_none(), "the channel still works");
    let (_, in_flight, _, slots) = sb.counters();
    assert_eq!((in_flight, slots), (0, 0));
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_panicking_waker_reaped_inside_a_blocking_wait_does_not_abort() {
    a_panicking_waker_loses_nothing(|a, b, pd, _| {
        // `b`'s blocking send waits under its no-unwind guard, reaping the
        // two receives' completions with its own.
        let mut rx = registered(pd, vec![0u8; LEN]);
        std::thread::scope(|t| {
            let receiver = t.spawn(|| {
                a.receive(ReceiveWorkRequest::new(&mut [rx.scatter(..)]))
                    .expect("a receives")
            });
            std::thread::sleep(Duration::from_millis(100));
            send(b, pd, 9);
            assert_eq!(receiver.join().expect("receiver").bytes(), LEN);
        });
        assert_bytes(&rx, &message(9), "the blocking send's message");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_panicking_waker_in_run_callbacks_loses_no_completion() {
    a_panicking_waker_loses_nothing(|_, _, _, sb| {
        sb.run_callbacks().expect("reap, the panic contained");
    });
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_panicking_callback_unwinds_to_run_callbacks_and_the_next_still_runs() {
    let pd = pd();
    let (a, mut b) = channels(&pd);
    let sa = a.shared();
    let pool = BufferPool::new(&pd, LEN, 4).expect("pool");
    let ran = Arc::new(AtomicUsize::new(0));
    for k in 0..2 {
        let ran = ran.clone();
        sa.run_then(
            Request::receive(pool.try_alloc().expect("buffer")),
            move |got, buf: PoolBuf| {
                ran.fetch_add(1, Ordering::SeqCst);
                if k == 0 {
                    panic!("a callback that panics");
                }
                assert_eq!(got.expect("receive").bytes(), LEN);
                assert_bytes(&buf, &message(2), "the second message");
            },
        )
        .map_err(|(e, _)| e)
        .expect("post a receive");
    }
    for k in 1..=2 {
        send(&mut b, &pd, k);
    }
    let start = Instant::now();
    let mut panicked = 0;
    while ran.load(Ordering::SeqCst) < 2 {
        if catch_unwind(AssertUnwindSafe(|| sa.run_callbacks())).is_err() {
            panicked += 1;
        }
        assert!(start.elapsed() < HANG, "the callbacks never ran");
    }
    assert_eq!(panicked, 1, "the panic reached run_callbacks' caller once");
    assert!(sa.unusable_reason().is_none());
    assert_eq!(pool.available(), 4, "both buffers came back");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn start_receives_into_an_extend_that_takes_nothing_keeps_no_buffer() {
    let pd = pd();
    let (mut a, b) = channels(&pd);
    let sb = b.shared();
    let pool = BufferPool::new(&pd, LEN, 4).expect("pool");
    let bufs: Vec<PoolBuf> = (0..3).map(|_| pool.try_alloc().expect("buffer")).collect();
    sb.start_receives(bufs, &mut Extender(Taker::Nothing));
    assert_eq!(pool.available(), 1, "the posted buffers stay with the NIC");
    for k in 1..=3 {
        send(&mut a, &pd, k);
    }
    // Their completions seen, the buffers come back.
    let start = Instant::now();
    while pool.available() < 4 {
        sb.run_callbacks().expect("reap");
        assert!(start.elapsed() < HANG, "the buffers never came back");
        std::thread::yield_now();
    }
    let (_, in_flight, abandoned, slots) = sb.counters();
    assert_eq!((in_flight, abandoned, slots), (0, 3, 0));
    // The channel still receives.
    let op = sb.start(Request::receive(pool.try_alloc().expect("buffer")));
    send(&mut a, &pd, 4);
    let (got, buf) = resolve(op, "a later receive");
    assert_eq!(got.expect("receive").bytes(), LEN);
    assert_bytes(&buf, &message(4), "received");
}
