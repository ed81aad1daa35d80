//! The engine's lock, and what runs once it is released.
//!
//! Wakers are the user's code (an executor's), and the engine must not run
//! user code while it holds its lock or while its bookkeeping is half done:
//! a waker that polls its task inline from `wake` would call back into the
//! channel and deadlock, a panicking one would unwind out of the middle of a
//! reap (losing the completions polled after it) or out of a wait that must
//! not unwind, and dropping the last waker of a task may drop the task's
//! future — an [`Op`](crate::owned::Op) whose `Drop` locks the engine.
//!
//! So under the lock, wakers are only moved: the tracker collects the ones
//! to wake (a completion seen, send-queue room freed) and the ones to let go
//! (replaced by a newer waker, or whose wait was cancelled) in [`Later`],
//! and [`Locked`], the guard every engine method holds, wakes and drops them
//! when it is dropped, *after* releasing the lock, each with its panic
//! contained: the panic is reported through `log` and goes no further, so
//! every other waker is still woken and no wait that must not unwind is
//! unwound. Messages for the logger, also the user's code, wait there too. (Waker clones are still made under the lock: a clone creates a
//! reference and, by the `RawWaker` contract, neither runs nor drops the
//! task.)

use super::tracker::Tracker;
use crate::work::Held;
use parking_lot::MutexGuard;
use std::any::Any;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::Waker;

/// Wakers to wake or to drop once the lock is released.
#[derive(Debug, Default)]
pub(crate) struct Later {
    /// Something waits below: the one thing each release of the lock
    /// looks at.
    pending: bool,
    /// Each waker, with whether to wake it (or only drop it). Its capacity
    /// stays with the tracker: the common release moves a few out by value.
    items: Vec<(Waker, bool)>,
    /// Memory of abandoned requests, released once the lock is: giving a
    /// pool buffer back wakes the tasks waiting for one.
    held: Vec<Held>,
    /// Messages for the logger (the user's code too), emitted once the lock
    /// is released.
    logs: Vec<(log::Level, String)>,
}

/// How many wakers a release moves to its stack; more leave with the list.
const ON_STACK: usize = 8;

/// Log messages kept for one release of the lock.
const MAX_LOGS: usize = 64;

impl Later {
    /// `w`'s task is to be woken.
    #[inline]
    pub(crate) fn wake(&mut self, w: Waker) {
        self.items.push((w, true));
        self.pending = true;
    }

    /// `w` is no longer needed; it is dropped (not woken).
    #[inline]
    pub(crate) fn release(&mut self, w: Waker) {
        self.items.push((w, false));
        self.pending = true;
    }

    /// `held`, whose request's completion was seen, is released.
    #[inline]
    pub(crate) fn release_held(&mut self, held: Held) {
        if !matches!(held, Held::None) {
            self.held.push(held);
            self.pending = true;
        }
    }

    /// `msg` is to be logged at `level`. At most [`MAX_LOGS`] wait: a
    /// drain that fails to poll for its whole patience keeps only the first.
    /// The message is formatted only if it is kept.
    #[cold]
    pub(crate) fn log(&mut self, level: log::Level, msg: std::fmt::Arguments<'_>) {
        if self.logs.len() < MAX_LOGS {
            self.logs.push((level, msg.to_string()));
            self.pending = true;
        }
    }

    /// Nothing to do.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        !self.pending
    }

    /// How many wakers wait (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Wakes and drops them all now (for tests of the tracker alone).
    #[cfg(test)]
    pub(crate) fn run_now(&mut self) {
        self.pending = false;
        for (w, wake) in std::mem::take(&mut self.items) {
            run_one(w, wake);
        }
        release_all(std::mem::take(&mut self.held));
        emit(std::mem::take(&mut self.logs));
    }
}

/// The engine's lock: the tracker, and on release the wakers it collected
/// run outside it (see the module docs).
pub(crate) struct Locked<'a> {
    /// Released in `Drop`, before the wakers run.
    guard: ManuallyDrop<MutexGuard<'a, Tracker>>,
}

impl<'a> Locked<'a> {
    #[inline]
    pub(crate) fn new(guard: MutexGuard<'a, Tracker>) -> Self {
        Locked {
            guard: ManuallyDrop::new(guard),
        }
    }
}

impl Deref for Locked<'_> {
    type Target = Tracker;
    #[inline]
    fn deref(&self) -> &Tracker {
        &self.guard
    }
}

impl DerefMut for Locked<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Tracker {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.guard.later_is_empty() {
            // SAFETY: `guard` is dropped once, here, and not used after.
            unsafe { ManuallyDrop::drop(&mut self.guard) };
        } else {
            self.release_then_run();
        }
    }
}

impl Locked<'_> {
    /// Moves the collected wakers out, releases the lock, then wakes or
    /// drops each.
    #[cold]
    #[inline(never)]
    fn release_then_run(&mut self) {
        // SAFETY: called only from `drop`, which uses `guard` no more.
        let mut guard = unsafe { ManuallyDrop::take(&mut self.guard) };
        let later = guard.later();
        later.pending = false;
        // Rare (abandoned requests, failures): these leave with their
        // allocations; taking an empty list allocates nothing.
        let held = std::mem::take(&mut later.held);
        let logs = std::mem::take(&mut later.logs);
        let items = &mut later.items;
        match items.len() {
            // Only memory to release or messages to log.
            0 => drop(guard),
            // The common case: one completion's task to wake.
            1 => {
                if let Some((w, wake)) = items.pop() {
                    drop(guard);
                    run_one(w, wake);
                }
            }
            // A few: moved to the stack, the list keeping its allocation.
            n if n <= ON_STACK => {
                let mut batch: [Option<(Waker, bool)>; ON_STACK] = Default::default();
                for (entry, item) in batch.iter_mut().zip(items.drain(..)) {
                    *entry = Some(item);
                }
                drop(guard);
                for (w, wake) in batch.into_iter().flatten() {
                    run_one(w, wake);
                }
            }
            // Many (a shutdown's flush): the list leaves with its
            // allocation, and the next push makes a new one.
            _ => {
                let all = std::mem::take(items);
                drop(guard);
                for (w, wake) in all {
                    run_one(w, wake);
                }
            }
        }
        release_all(held);
        emit(logs);
    }
}

/// Hands `logs` to the logger, containing a panic.
fn emit(logs: Vec<(log::Level, String)>) {
    for (level, msg) in logs {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| log::log!(level, "{msg}"))) {
            std::mem::forget(payload);
        }
    }
}

/// Drops each of `held` (giving pool buffers back, which wakes their
/// waiters), containing a panic.
fn release_all(held: Vec<Held>) {
    for h in held {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(h))) {
            report("woken (a buffer returned to its pool)", payload);
        }
    }
}

/// Wakes (or drops) `w`, containing a panic.
fn run_one(w: Waker, wake: bool) {
    let outcome = catch_unwind(AssertUnwindSafe(move || {
        if wake {
            w.wake();
        } else {
            drop(w);
        }
    }));
    if let Err(payload) = outcome {
        report(if wake { "woken" } else { "dropped" }, payload);
    }
}

/// Reports a waker's contained panic; nothing of it (the logger's own
/// panic, the payload's destructor) goes further.
#[cold]
fn report(what: &str, payload: Box<dyn Any + Send>) {
    let reported = catch_unwind(AssertUnwindSafe(move || {
        let msg = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a non-string payload");
        log::error!(
            "a waker panicked when {what} by rdma-safe (contained; every other completion \
             was delivered): {msg}"
        );
        drop(payload);
    }));
    if let Err(again) = reported {
        // A logger or payload destructor that panics in turn: leave it.
        std::mem::forget(again);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that counts its wakes and drops, and panics when woken if
    /// asked to.
    struct Probe {
        woken: AtomicUsize,
        panics: bool,
    }
    impl Wake for Probe {
        fn wake(self: Arc<Self>) {
            self.woken.fetch_add(1, Ordering::SeqCst);
            if self.panics {
                panic!("probe waker");
            }
        }
    }

    fn probe(panics: bool) -> Arc<Probe> {
        Arc::new(Probe {
            woken: AtomicUsize::new(0),
            panics,
        })
    }

    #[test]
    fn wakers_run_after_the_lock_is_released_and_panics_stay_contained() {
        let mutex = Arc::new(Mutex::new(Tracker::new(4, 4)));
        // More than fit on the stack, so both paths run.
        for n in [3usize, 20] {
            let probes: Vec<_> = (0..n).map(|k| probe(k % 2 == 0)).collect();
            {
                let mut st = Locked::new(mutex.lock());
                for p in &probes {
                    st.later().wake(Waker::from(p.clone()));
                }
                st.later().release(Waker::from(probe(false)));
                assert_eq!(st.later().len(), n + 1);
            }
            for p in &probes {
                assert_eq!(p.woken.load(Ordering::SeqCst), 1, "each woken once");
                assert_eq!(Arc::strong_count(p), 1, "each waker dropped");
            }
            // The lock is free again, and the list empty.
            assert!(mutex.try_lock().unwrap().later_is_empty());
        }
    }

    /// A waker that locks the engine again from `wake` (an executor that
    /// polls inline) finds it free.
    #[test]
    fn a_waker_may_take_the_lock() {
        struct Relock(Arc<Mutex<Tracker>>, AtomicUsize);
        impl Wake for Relock {
            fn wake(self: Arc<Self>) {
                let free = self.0.try_lock().is_some();
                self.1.fetch_add(usize::from(free), Ordering::SeqCst);
            }
        }
        let mutex = Arc::new(Mutex::new(Tracker::new(4, 4)));
        let relock = Arc::new(Relock(mutex.clone(), AtomicUsize::new(0)));
        {
            let mut st = Locked::new(mutex.lock());
            st.later().wake(Waker::from(relock.clone()));
        }
        assert_eq!(relock.1.load(Ordering::SeqCst), 1);
    }
}
