//! [`Op`]: the future of one owning operation, and the wait every future
//! of a channel shares (reap, arm, re-poll, sleep on the reactor).

use super::buffer::{from_held, into_held};
use super::{finish, refused_outcome, Completed, OwnedBuffer, SharedChannel};
use crate::engine::{Abandon, Look, Notice, Refused, WithMemory};
use crate::error::Error;
use crate::work::OwnedKind;
use crate::work::WorkSuccess;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The future of an owning operation ([`SharedChannel::submit`]):
/// resolves to the outcome and the buffer.
///
/// The first poll posts the request (waiting for send-queue room if the
/// queue is full), unless [`SharedChannel::start`] posted it already.
/// Dropping the future before that drops the buffer;
/// after it, the engine keeps the buffer until the completion is seen and
/// then returns it to its pool — the NIC never touches memory the program
/// can reach again, and the completion is counted, not lost.
#[must_use = "futures do nothing unless polled"]
pub struct Op<'a, B: OwnedBuffer> {
    chan: &'a SharedChannel,
    kind: OwnedKind,
    state: State<B>,
}

enum State<B> {
    Unposted(B),
    /// Waiting for send-queue room, registered under the ticket (if any)
    /// in the list of tasks waiting for it.
    Full(B, Option<u64>),
    Posted(u64),
    /// Ended before the first poll (by [`SharedChannel::start`]): the outcome (an
    /// error boxed: the future stays small enough to move without a
    /// `memcpy` call, and errors are rare).
    Finished {
        /// The work request id, or 0 if the request was refused (ids start
        /// at 1).
        id: u64,
        outcome: Result<WorkSuccess, Box<Error>>,
        buf: B,
    },
    Done,
}

impl<'a, B: OwnedBuffer> Op<'a, B> {
    pub(super) fn new(chan: &'a SharedChannel, kind: OwnedKind, buf: B) -> Self {
        Op {
            chan,
            kind,
            state: State::Unposted(buf),
        }
    }

    /// Posts the request now, without a task: its slot waits to be
    /// claimed, and the first poll leaves the task's waker there (with a
    /// reactor) under the same lock in which it looks for the completion,
    /// so no wake-up is lost. A full send queue leaves the request to be
    /// posted by the first poll, which then waits for room; a refusal or a
    /// completion the post already found is what the first poll returns.
    pub(super) fn started(chan: &'a SharedChannel, kind: OwnedKind, buf: B) -> Self {
        let state = match chan.queue().submit(
            kind,
            into_held(buf),
            Notice::Task {
                slot: None,
                room: None,
            },
        ) {
            Ok((id, None)) => State::Posted(id),
            Err(Refused::Full(held)) => State::Unposted(from_held::<B>(held)),
            Ok((id, Some(returned))) => {
                return Op::finished(chan, kind, id, finish(kind, returned))
            }
            Err(refused) => return Op::finished(chan, kind, 0, refused_outcome(kind, refused)),
        };
        Op { chan, kind, state }
    }

    /// The future of a request posted already, as `id`.
    pub(super) fn posted(chan: &'a SharedChannel, kind: OwnedKind, id: u64) -> Self {
        Op {
            chan,
            kind,
            state: State::Posted(id),
        }
    }

    /// The future of a request that was not posted: resolves at once to
    /// `e` and `buf`.
    pub(super) fn refused(chan: &'a SharedChannel, kind: OwnedKind, e: Error, buf: B) -> Self {
        Op::finished(chan, kind, 0, (Err(e), buf))
    }

    /// The future of request `id` (0: never posted) that has ended already.
    fn finished(chan: &'a SharedChannel, kind: OwnedKind, id: u64, done: Completed<B>) -> Self {
        let (outcome, buf) = done;
        let outcome = outcome.map_err(Box::new);
        let state = State::Finished { id, outcome, buf };
        Op { chan, kind, state }
    }

    /// The work request id, once posted (`None` before, for a request that
    /// was refused, and once the future has resolved).
    pub fn wr_id(&self) -> Option<u64> {
        match self.state {
            State::Posted(id) => Some(id),
            State::Finished { id, .. } if id != 0 => Some(id),
            _ => None,
        }
    }
}

impl<B: OwnedBuffer> Future for Op<'_, B> {
    type Output = Completed<B>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completed<B>> {
        // The engine is asked three things: submit, poll, abandon (on drop).
        let this = self.get_mut();
        let queue = this.chan.queue();
        loop {
            // Posted: looked at in place (the state is only an id; moving
            // the whole state out and back is most of a poll's cost).
            if let State::Posted(id) = this.state {
                let look = Look::Once(this.chan.slot_waker(cx));
                if let Some(returned) = queue
                    .take(id, WithMemory, look)
                    .or_else(|| queue.wait(id, WithMemory, this.chan.spin, None))
                {
                    // Written without the state's drop glue (an assignment
                    // would call it for a state known to own nothing).
                    // SAFETY: `this.state` is a valid, exclusive place holding
                    // `State::Posted`, which owns nothing: no drop is lost.
                    unsafe { std::ptr::write(&mut this.state, State::Done) };
                    return Poll::Ready(finish(this.kind, returned));
                }
                match wait(this.chan, cx) {
                    Poll::Ready(()) => continue,
                    Poll::Pending => return Poll::Pending,
                }
            }
            let (buf, mut room) = match std::mem::replace(&mut this.state, State::Done) {
                State::Unposted(buf) => (buf, None),
                State::Full(buf, room) => (buf, room),
                // Looked at above; never here.
                State::Posted(id) => {
                    this.state = State::Posted(id);
                    continue;
                }
                State::Finished { outcome, buf, .. } => {
                    return Poll::Ready((outcome.map_err(|e| *e), buf));
                }
                State::Done => panic!("Op polled after it completed"),
            };
            // Unposted, or waiting for room: post.
            let slot_waker = this.chan.slot_waker(cx);
            let held = into_held(buf);
            let notice = Notice::Task {
                slot: slot_waker,
                room: Some((cx.waker(), &mut room)),
            };
            match queue.submit(this.kind, held, notice) {
                Ok((_, Some(returned))) => {
                    return Poll::Ready(finish(this.kind, returned));
                }
                Ok((id, None)) => {
                    // Posted (the slot holds this task's waker if the
                    // channel has a reactor). No wait on this first poll: a
                    // task posting many operations gets control back at
                    // once. Asking to be polled again makes the next poll
                    // wait as usual (spin, then sleep), whoever reaps the
                    // completion meanwhile.
                    this.state = State::Posted(id);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Err(Refused::Full(held)) => {
                    // Registered in the room list by `submit`.
                    this.state = State::Full(from_held::<B>(held), room);
                    match wait(this.chan, cx) {
                        Poll::Ready(()) => continue,
                        Poll::Pending => return Poll::Pending,
                    }
                }
                Err(refused) => {
                    return Poll::Ready(refused_outcome(this.kind, refused));
                }
            }
        }
    }
}

impl<B: OwnedBuffer> Drop for Op<'_, B> {
    fn drop(&mut self) {
        match self.state {
            // Posted: the engine keeps the buffer until the completion.
            State::Posted(id) => self.chan.queue().abandon(Abandon::Posted(id)),
            State::Full(_, room) => self.chan.queue().abandon(Abandon::Waiting(room)),
            State::Unposted(_) | State::Finished { .. } | State::Done => {}
        }
    }
}

/// Waits, for the task polling with `cx` (already registered in its slot or
/// the room list), until something may have changed. With a reactor the
/// channel's completion driver reaps and wakes the task (it is spawned
/// here on first need): `Pending`. Without one, a busy wait: polls the
/// completion queue a few times, then asks to be polled again. `Ready`
/// means "look again".
pub(super) fn wait(chan: &SharedChannel, cx: &mut Context<'_>) -> Poll<()> {
    let queue = chan.queue();
    if let Some(driver) = &chan.driver {
        driver.ensure_running(&chan.queue, chan.timeout);
        // Arm the CQ before sleeping, and look once more (a completion that
        // arrived before the arming raises no event): the completion this
        // task waits for then raises one, which wakes the driver, whatever
        // the driver's own last arming was spent on.
        if queue.cq.arm().is_err() || matches!(queue.reap_now(), Ok(n) if n > 0) {
            return Poll::Ready(());
        }
        return Poll::Pending;
    }
    // No reactor: poll here a few times before going back to the runtime
    // (a round through its scheduler costs more than a poll), then ask to
    // be polled again at once.
    for _ in 0..BUSY_POLLS {
        if matches!(queue.reap_now(), Ok(n) if n > 0) {
            return Poll::Ready(());
        }
    }
    if !queue.busy_poll_may_wait(chan.timeout) {
        return Poll::Ready(());
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// Polls of the completion queue a busy-polling wait makes per poll of its
/// future.
const BUSY_POLLS: u32 = 32;

impl<B: OwnedBuffer> fmt::Debug for Op<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Unposted(_) => "unposted",
            State::Full(..) => "waiting for send-queue room",
            State::Posted(_) => "posted",
            State::Finished { .. } => "finished",
            State::Done => "done",
        };
        f.debug_struct("Op")
            .field("kind", &self.kind)
            .field("state", &state)
            .field("wr_id", &self.wr_id())
            .finish()
    }
}
