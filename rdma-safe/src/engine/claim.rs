//! What a claim of a completed request makes of it, and how it looks for
//! a request still in flight: the types [`WorkQueue::take`] and
//! [`WorkQueue::wait`] are generic over.
//!
//! [`WorkQueue::take`]: super::WorkQueue::take
//! [`WorkQueue::wait`]: super::WorkQueue::wait

use super::owned::Returned;
use crate::error::{Error, Result};
use crate::work::{Held, WorkSuccess};
use std::task::Waker;

/// A kind of claim: what the caller gets of a completed request.
pub(crate) trait Claim: Copy {
    /// What the claim returns.
    type Out;

    /// The claim of a request whose completion reads as `outcome`, with
    /// its memory in `held` (taken if the claim wants it; what it leaves
    /// is dropped with the request).
    fn claim(self, outcome: Result<WorkSuccess>, held: &mut Held) -> Self::Out;

    /// An outcome that is the error `e` instead of the request's own,
    /// with the memory of `taken` (the request's claim, if it was claimed)
    /// when the claim keeps memory.
    fn failed(self, e: Error, taken: Option<Self::Out>) -> Self::Out;
}

/// The outcome alone: requests over borrowed memory (blocking calls,
/// scopes, pending work), which hold none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome;

/// The outcome with the memory the request held: owning requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WithMemory;

impl Claim for Outcome {
    type Out = Result<WorkSuccess>;

    #[inline(always)]
    fn claim(self, outcome: Result<WorkSuccess>, _: &mut Held) -> Result<WorkSuccess> {
        outcome
    }

    #[inline]
    fn failed(self, e: Error, _: Option<Result<WorkSuccess>>) -> Result<WorkSuccess> {
        Err(e)
    }
}

impl Claim for WithMemory {
    type Out = Returned;

    #[inline(always)]
    fn claim(self, outcome: Result<WorkSuccess>, held: &mut Held) -> Returned {
        #[cfg(feature = "fault-injection")]
        crate::fault::held_returned(held);
        (outcome, std::mem::take(held))
    }

    #[inline]
    fn failed(self, e: Error, taken: Option<Returned>) -> Returned {
        (Err(e), taken.map_or(Held::None, |(_, held)| held))
    }
}

/// How a claim looks for a request still in flight.
#[derive(Debug)]
pub(crate) enum Look<'a> {
    /// Polls once, leaving the waker (if any) to be woken at the completion.
    Once(Option<&'a Waker>),
    /// One poll of a wait spinning on it, with the count of completions the
    /// wait saw at its last look (see `Tracker::spin_take`).
    Spin(&'a mut u64),
}
