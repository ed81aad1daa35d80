//! What an owning operation's slot keeps while the NIC may use its memory:
//! the buffer itself and who to tell when the completion is seen.

use super::later::Later;
use crate::error::Result;
use crate::work::{Held, WorkSuccess};
use std::fmt;
use std::task::Waker;

/// A completion callback: the outcome and the memory, given back.
pub(crate) type Callback = Box<dyn FnOnce(Result<WorkSuccess>, Held) + Send>;

/// Who learns of the completion.
#[derive(Default)]
pub(crate) enum Notify {
    /// Someone claims it by id (blocking calls, scopes).
    #[default]
    Claim,
    /// A future, woken when the completion is seen.
    Waker(Waker),
    /// Run by the next dispatch after the completion is seen.
    Callback(Callback),
    /// The future was dropped: release the memory when the completion is
    /// seen, deliver nothing.
    Abandoned,
    /// The engine's own keepalive probe (see the `keepalive` module): holds
    /// no memory; its completion is looked at when seen, delivered to
    /// nobody.
    Keepalive,
}

/// The attachments of a slot.
#[derive(Debug, Default)]
pub(crate) struct Attached {
    pub(crate) held: Held,
    pub(crate) notify: Notify,
}

impl Attached {
    /// Nothing here has a destructor to run: no memory kept, no waker or
    /// callback to release.
    #[inline]
    pub(crate) fn owns_nothing(&self) -> bool {
        matches!(self.held, Held::None)
            && matches!(
                self.notify,
                Notify::Claim | Notify::Abandoned | Notify::Keepalive
            )
    }
}

impl Notify {
    /// Leaves `waker` to be woken at the completion, unless the waker here
    /// already wakes the same task. A replaced waker goes to `later`, to be
    /// dropped once the lock is released: dropping a task's last waker may
    /// drop the task, and with it a future that locks the engine.
    #[inline]
    pub(crate) fn set_waker(&mut self, waker: &Waker, later: &mut Later) {
        match self {
            Notify::Waker(old) if old.will_wake(waker) => {}
            n => {
                if let Notify::Waker(old) = std::mem::replace(n, Notify::Waker(waker.clone())) {
                    later.release(old);
                }
            }
        }
    }
}

impl fmt::Debug for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Notify::Claim => "Claim",
            Notify::Waker(_) => "Waker",
            Notify::Callback(_) => "Callback",
            Notify::Abandoned => "Abandoned",
            Notify::Keepalive => "Keepalive",
        })
    }
}
