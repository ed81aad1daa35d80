//! The completion driver: one task per
//! [`SharedChannel`](crate::SharedChannel) reactor that sleeps on the
//! completion channel's descriptor, reaps the completion queue when it
//! becomes readable, and so wakes exactly the operations whose
//! completions arrived.
//!
//! Futures never touch the reactor: they register their waker with their
//! slot (or the send-queue room list), arm the completion queue (so that
//! the completion they wait for raises an event even when the driver's own
//! arming was spent on another), look once more, and return `Pending`. Because the
//! driver is a task of its own, spawned on the runtime, no future — which
//! may be forgotten or dropped — carries the channel's registration, and
//! no wake-up has to be broadcast to keep it alive. The driver holds the
//! engine weakly and ends when the last handle of its `SharedChannel` is
//! dropped (or the engine is gone).

use super::reactor::CompletionReactor;
use crate::engine::WorkQueue;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Shared by the clones of a [`SharedChannel`] with a reactor: spawns the
/// driver on first need, and stops it when the last clone is dropped.
///
/// [`SharedChannel`]: super::SharedChannel
pub(super) struct DriverHandle {
    reactor: Arc<dyn CompletionReactor>,
    spawned: AtomicBool,
    stop: Arc<Stop>,
}

/// The driver's stop flag and the waker to tell it with.
#[derive(Default)]
struct Stop {
    stopped: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl DriverHandle {
    pub(super) fn new(reactor: Arc<dyn CompletionReactor>) -> Self {
        DriverHandle {
            reactor,
            spawned: AtomicBool::new(false),
            stop: Arc::default(),
        }
    }

    /// Spawns the driver of `queue` on the reactor's runtime, once.
    #[inline]
    pub(super) fn ensure_running(&self, queue: &Arc<WorkQueue>, timeout: Duration) {
        if self.spawned.load(Ordering::Acquire) {
            return;
        }
        self.spawn(queue, timeout);
    }

    #[cold]
    fn spawn(&self, queue: &Arc<WorkQueue>, timeout: Duration) {
        if self.spawned.swap(true, Ordering::AcqRel) {
            return;
        }
        let driver = Driver {
            queue: Arc::downgrade(queue),
            reactor: self.reactor.clone(),
            timeout,
            stop: self.stop.clone(),
        };
        self.reactor.spawn(Box::pin(driver));
    }
}

impl Drop for DriverHandle {
    fn drop(&mut self) {
        self.stop.stopped.store(true, Ordering::Release);
        let waker = self
            .stop
            .waker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl fmt::Debug for DriverHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DriverHandle")
            .field("spawned", &self.spawned.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The driver task.
struct Driver {
    queue: Weak<WorkQueue>,
    reactor: Arc<dyn CompletionReactor>,
    timeout: Duration,
    stop: Arc<Stop>,
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        {
            let mut w = this.stop.waker.lock().unwrap_or_else(|e| e.into_inner());
            match &*w {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => *w = Some(cx.waker().clone()),
            }
        }
        loop {
            if this.stop.stopped.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            let Some(queue) = this.queue.upgrade() else {
                return Poll::Ready(());
            };
            let Some(deadline) = queue.drive_round(this.timeout) else {
                continue;
            };
            let Some(channel) = queue.cq.channel() else {
                return Poll::Ready(());
            };
            let mut drain = || loop {
                match channel.take_event() {
                    Ok(Some(_)) => {}
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(io::Error::other(e)),
                }
            };
            match this.reactor.poll_ready(cx, deadline, &mut drain) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => {
                    // Yield before looking again, so a reactor that keeps
                    // failing does not hold the runtime's thread.
                    log::warn!("waiting on the completion channel failed ({e}); polling again");
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
