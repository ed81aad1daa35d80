//! Owning receives posted together: one lock and one `ibv_post_recv` call
//! for several pool buffers, each tracked in a slot of its own (each
//! receive completes on its own), as a C program re-posts its receive
//! ring in bulk. The list is posted, and a partial or failed post settled,
//! by the same `post_receives` as the scopes' receive batches.

use super::list::{with_list, STACK_LIST};
use super::WorkQueue;
use crate::error::Result;
use crate::pool::PoolBuf;
use rdma_core::{RecvRequest, Sge};
use std::ops::Range;

/// Receives [`WorkQueue::post_owned_receives`] posts per call, at most.
pub(crate) const RECEIVES_PER_CALL: usize = STACK_LIST;
/// Receives a call posts from short arrays: its SGEs here, and the
/// buffers `SharedChannel::start_receives` gathers for it.
pub(crate) const SHORT_RECEIVES: usize = 8;

impl WorkQueue {
    /// Posts a receive into the whole of each buffer of `bufs` (every entry
    /// `Some`, at most [`RECEIVES_PER_CALL`] of them), in order, with one
    /// verb call. The posted ones are the first of `bufs`: their entries
    /// are taken (each buffer moves into its request's slot under the same
    /// lock as the post, and leaves it only with the completion) and their
    /// ids are the returned range, in the same order. The others stay in
    /// `bufs`, with the reason beside the range: a receive queue without
    /// room for them, an unusable channel, or the verb's refusal. A verb
    /// that fails without saying what it queued gets the channel shut down
    /// and drained first, and then every buffer comes back.
    pub(crate) fn post_owned_receives(
        &self,
        bufs: &mut [Option<PoolBuf>],
    ) -> (Range<u64>, Result<()>) {
        debug_assert!(bufs.len() <= STACK_LIST && bufs.iter().all(Option::is_some));
        let n = bufs.len().min(STACK_LIST);
        let bufs = &mut bufs[..n];
        if let Err(e) = self.receives_here() {
            return (0..0, Err(e));
        }
        // A ring re-posted a few receives at a time zeroes a short SGE
        // array, not 32 entries (about 120 instructions a call).
        if n <= SHORT_RECEIVES {
            self.post_owned_receives_in::<SHORT_RECEIVES>(bufs)
        } else {
            self.post_owned_receives_in::<STACK_LIST>(bufs)
        }
    }

    /// [`post_owned_receives`](Self::post_owned_receives) of at most `N`
    /// receives, their SGEs in an array of `N`.
    fn post_owned_receives_in<const N: usize>(
        &self,
        bufs: &mut [Option<PoolBuf>],
    ) -> (Range<u64>, Result<()>) {
        let mut sges = [Sge::default(); N];
        for (sge, buf) in sges.iter_mut().zip(bufs.iter().flatten()) {
            let (addr, len, lkey) = buf.sge_full();
            *sge = Sge::new(addr, len, lkey);
        }
        let reqs = sges[..bufs.len()]
            .iter()
            .map(|sge| RecvRequest::new(0, std::slice::from_ref(sge)));
        with_list(reqs, |reqs| {
            self.post_receives(reqs, bufs, &mut |reqs| {
                // Every SGE names the whole chunk of a `PoolBuf` in `bufs`:
                // the buffer's only handle, which keeps its slab allocated
                // and registered. Under the engine's lock, each buffer the
                // verb queued moves into its request's slot (released only
                // once the completion is seen); one it did not queue stays
                // with the caller, and if the verb does not say which it
                // queued, the channel is shut down and drained before any
                // buffer comes back (`post_receives`).
                // SAFETY: by the reasoning just above.
                unsafe { self.qp.post_recv_list(reqs) }
            })
        })
    }
}
