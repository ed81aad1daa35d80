//! [`SharedCompletionQueue`]: one completion queue for many channels.

use crate::engine::SharedCq;
use crate::error::{Result, VerbsError};
use crate::pd::ProtectionDomain;
use std::fmt;
use std::sync::Arc;

/// A completion queue that many channels of one device share
/// ([`ChannelBuilder::completion_queue`](crate::ChannelBuilder::completion_queue)):
/// whichever of them polls reaps for all, so one thread can drive many
/// connections (per-core polling), and connections cost one queue pair
/// each instead of a queue pair and a completion queue.
///
/// Every channel keeps its own completions: a poll made for one channel
/// takes what an earlier poll set aside for it, or else polls the queue and
/// sets aside the other channels' completions for them. Waits on a shared
/// queue poll (completion events are refused at build: an event would wake
/// one waiter for another channel's completion); blocking calls, scopes,
/// callbacks and busy-polling futures work as on a queue of their own,
/// from any number of threads.
///
/// The queue must hold every request its channels can have outstanding:
/// each channel reserves its send and receive depths when it is built and
/// gives them back when it is dropped, and a channel that does not fit is
/// refused with an error that says how much is left. The queue lives as
/// long as the last channel on it (or this handle).
///
/// ```no_run
/// # fn main() -> rdma_safe::Result<()> {
/// use rdma_safe::{channel::SharedCompletionQueue, ProtectionDomain};
/// let pd = ProtectionDomain::open("rxe0")?;
/// // Room for 8 channels with the default depths (128 + 128 each).
/// let cq = SharedCompletionQueue::new(&pd, 8 * 256)?;
/// let channels = (0..8)
///     .map(|_| pd.channel_builder().completion_queue(&cq).build())
///     .collect::<rdma_safe::Result<Vec<_>>>()?;
/// # drop(channels);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SharedCompletionQueue {
    pub(crate) inner: Arc<SharedCq>,
}

impl SharedCompletionQueue {
    /// Creates a completion queue of at least `entries` entries on `pd`'s
    /// device (channels of any protection domain of that device may share
    /// it).
    ///
    /// # Errors
    /// [`VerbsError::InvalidArgument`] for 0 entries; `ibv_create_cq`'s
    /// error (e.g. more entries than the device's `max_cqe`).
    pub fn new(pd: &ProtectionDomain, entries: u32) -> Result<Self> {
        if entries == 0 {
            return Err(VerbsError::InvalidArgument(
                "a shared completion queue needs at least one entry".into(),
            )
            .into());
        }
        let cq = rdma_core::CompQueue::new(pd.context(), entries, None, 0)?;
        Ok(SharedCompletionQueue {
            inner: Arc::new(SharedCq::new(cq)),
        })
    }

    /// Which completion queue the device names in an `IBV_EVENT_CQ_ERR`
    /// about this one (every channel on it then fails).
    pub fn id(&self) -> crate::error::CqId {
        self.inner.cq().id()
    }

    /// Entries the queue has (at least what was asked for).
    pub fn capacity(&self) -> u32 {
        self.inner.cq().capacity()
    }

    /// Entries the channels on it reserved.
    pub fn reserved(&self) -> u32 {
        self.inner.usage().0
    }

    /// How many channels are on it.
    pub fn channels(&self) -> usize {
        self.inner.usage().1
    }

    /// Completions that arrived for no channel on the queue (never expected;
    /// logged as errors when they happen).
    pub fn strays(&self) -> u64 {
        self.inner.usage().2
    }
}

impl fmt::Debug for SharedCompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (reserved, channels, strays) = self.inner.usage();
        f.debug_struct("SharedCompletionQueue")
            .field("capacity", &self.capacity())
            .field("reserved", &reserved)
            .field("channels", &channels)
            .field("strays", &strays)
            .finish()
    }
}
