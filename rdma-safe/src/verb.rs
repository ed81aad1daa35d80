//! One path per send-queue verb: [`SendQueueRequest`], which the generic
//! operations ([`Channel::run`](crate::Channel::run),
//! [`Channel::run_batch`](crate::Channel::run_batch),
//! [`PollingScope::post`](crate::PollingScope::post),
//! [`PollingScope::post_batch`](crate::PollingScope::post_batch)) take.
//! Each request type says here, once, how it is validated and posted alone
//! and in a batch; the blocking and scoped modes are the same code for all.

use crate::engine::WorkQueue;
use crate::error::Result;
use crate::work::{
    AtomicWorkRequest, ReadWorkRequest, SendWorkRequest, WorkSuccess, WriteWorkRequest,
};
use std::time::Duration;

/// A request for the send queue — a send, an RDMA write, an RDMA read or
/// an atomic — whose memory is borrowed for `'data`. Implemented by the
/// crate's work requests only (sealed): how a request is posted is the
/// engine's business.
pub trait SendQueueRequest<'data>: sealed::Post {}

impl<'data> SendQueueRequest<'data> for SendWorkRequest<'_, 'data> {}
impl<'data> SendQueueRequest<'data> for WriteWorkRequest<'_, 'data> {}
impl<'data> SendQueueRequest<'data> for ReadWorkRequest<'_, 'data> {}
impl<'data> SendQueueRequest<'data> for AtomicWorkRequest<'_, 'data> {}

pub(crate) mod sealed {
    use super::*;

    /// The engine as the requests see it: public in name only (its field
    /// is the crate's), so the sealed trait can name it.
    #[derive(Clone, Copy)]
    pub struct Queue<'q>(pub(crate) &'q WorkQueue);

    impl std::fmt::Debug for Queue<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Queue")
        }
    }

    /// How one kind of request goes to the engine: as its
    /// `SendQueueWork`, alone or as a batch, posted or posted and waited
    /// for, all through the engine's one send-queue path.
    pub trait Post: Sized {
        /// Validates and posts one request; its completion's id.
        #[doc(hidden)]
        fn post(&mut self, queue: Queue<'_>) -> Result<u64>;

        /// Validates and posts `wrs` as one list (one doorbell), only the
        /// last signaled; the id of the last, whose completion covers all.
        #[doc(hidden)]
        fn post_batch(wrs: &mut [Self], queue: Queue<'_>) -> Result<u64>;

        /// Posts one request and waits for it.
        #[doc(hidden)]
        fn post_and_wait(&mut self, queue: Queue<'_>, timeout: Duration) -> Result<WorkSuccess>;

        /// Posts a batch and waits for it.
        #[doc(hidden)]
        fn post_batch_and_wait(
            wrs: &mut [Self],
            queue: Queue<'_>,
            timeout: Duration,
        ) -> Result<WorkSuccess>;
    }

    /// The [`Post`] of a request type whose work is `$work` of `$wr` (a
    /// `&mut` request, or a copy of one that is `Copy`).
    macro_rules! post_as_work {
        ($ty:ty, |$wr:ident| $work:expr) => {
            impl Post for $ty {
                #[inline]
                fn post(&mut self, queue: Queue<'_>) -> Result<u64> {
                    let $wr = self;
                    queue.0.post_sends(std::iter::once($work))
                }
                #[inline]
                fn post_batch(wrs: &mut [Self], queue: Queue<'_>) -> Result<u64> {
                    queue.0.post_sends(wrs.iter_mut().map(|$wr| $work))
                }
                #[inline]
                fn post_and_wait(
                    &mut self,
                    queue: Queue<'_>,
                    timeout: Duration,
                ) -> Result<WorkSuccess> {
                    let $wr = self;
                    queue.0.post_sends_and_wait(std::iter::once($work), timeout)
                }
                fn post_batch_and_wait(
                    wrs: &mut [Self],
                    queue: Queue<'_>,
                    timeout: Duration,
                ) -> Result<WorkSuccess> {
                    let work = wrs.iter_mut().map(|$wr| $work);
                    queue.0.post_sends_and_wait(work, timeout)
                }
            }
        };
    }

    post_as_work!(SendWorkRequest<'_, '_>, |wr| *wr);
    post_as_work!(WriteWorkRequest<'_, '_>, |wr| *wr);
    post_as_work!(ReadWorkRequest<'_, '_>, |wr| wr);
    post_as_work!(AtomicWorkRequest<'_, '_>, |wr| wr);
}
