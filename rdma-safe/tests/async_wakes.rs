//! The completion driver on a real device with tokio: one completion wakes
//! one task. Many tasks keep owned receives in flight at once; every task's
//! wake-ups are counted through a waker of its own. With a waker that
//! reaped and woke every waiting task per event, the count grew with the
//! number of tasks waiting; with the driver it stays near what each
//! operation needs (its completion, and the one re-poll a posting future
//! asks for).

mod common;

use common::{assert_whole, frozen, pair_with, pattern, pd, seed};
use rdma_safe::owned::Request;
use rdma_safe::BufferPool;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// Counts the wake-ups of the future it wraps, then passes them on.
struct Counted<F> {
    inner: Pin<Box<F>>,
    wakes: Arc<AtomicUsize>,
}

struct CountingWaker {
    inner: Waker,
    wakes: Arc<AtomicUsize>,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.inner.wake_by_ref();
    }
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let waker = Waker::from(Arc::new(CountingWaker {
            inner: cx.waker().clone(),
            wakes: self.wakes.clone(),
        }));
        self.inner.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_completion_wakes_one_task() {
    // Receives wait for the peer (writes and sends on rxe loopback often
    // complete inside their own post, and then nothing waits): many tasks
    // each keep a receive posted while a sender paces its messages.
    const TASKS: usize = 24;
    const PER_TASK: usize = 10;
    const LEN: usize = 512;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let pd = pd();
    let (a, b) = pair_with(&pd, |c| {
        c.completion_events(true)
            .send_depth(64)
            .recv_depth(64)
            .timeout(Duration::from_secs(30))
    });
    let pool = BufferPool::new(&pd, LEN, 2 * TASKS + 2).expect("pool");
    let sb = rt.block_on(async { b.shared().with_tokio().expect("tokio reactor") });
    let sa = a.shared();
    let ops = TASKS * PER_TASK;
    let sender = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            for seq in 0..ops {
                std::thread::sleep(Duration::from_millis(2));
                let mut data = pattern(seed("wakes", seq), LEN);
                data[..8].copy_from_slice(&(seq as u64).to_le_bytes());
                let (r, _) = sa.run(Request::send(frozen(&pool, &data)));
                r.expect("send");
            }
        })
    };
    let wakes: Vec<Arc<AtomicUsize>> = (0..TASKS).map(|_| Arc::default()).collect();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for count in &wakes {
            let (sb, pool, count) = (sb.clone(), pool.clone(), count.clone());
            tasks.push(tokio::spawn(Counted {
                inner: Box::pin(async move {
                    for _ in 0..PER_TASK {
                        let buf = pool.try_alloc().expect("a receive buffer");
                        let (r, buf) = sb.submit(Request::receive(buf)).await;
                        assert_eq!(r.expect("receive").bytes(), LEN);
                        let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                        let mut want = pattern(seed("wakes", seq as usize), LEN);
                        want[..8].copy_from_slice(&seq.to_le_bytes());
                        assert_eq!(&buf[..], &want[..], "message {seq}");
                    }
                }),
                wakes: count,
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(120), task)
                .await
                .expect("bounded")
                .expect("task");
        }
    });
    sender.join().expect("sender");
    let per_task: Vec<usize> = wakes.iter().map(|w| w.load(Ordering::SeqCst)).collect();
    let total: usize = per_task.iter().sum();
    eprintln!(
        "{ops} receives from {TASKS} tasks: {total} wake-ups ({:.2} per operation), \
         per task {per_task:?}",
        total as f64 / ops as f64
    );
    assert!(
        total >= ops,
        "only {total} wake-ups for {ops} receives: they did not wait, the test measures nothing"
    );
    // Each receive needs two: the re-poll its first poll asks for after
    // posting, and its completion's. A little slack for a completion that
    // another task reaped between a future's registration and its look.
    assert!(
        total <= ops * 2 + ops / 10,
        "{total} wake-ups for {ops} receives: completions wake tasks that did not complete"
    );
    assert_whole(&sb, &pool, "after the run");
}
