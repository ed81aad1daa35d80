//! Owning receives posted together: one lock and one `ibv_post_recv` call
//! for several pool buffers, each tracked in a slot of its own (each
//! receive completes on its own), as a C program re-posts its receive
//! ring in bulk.

use super::attached::{Attached, Held, Notify};
use super::list::{with_list, STACK_LIST};
use super::shutdown::nothing_queued;
use super::tracker::Tracker;
use super::{queue_too_full, WorkQueue};
use crate::error::{Error, Operation, Result};
use crate::pool::PoolBuf;
use rdma_core::{RecvRequest, Sge};
use std::ops::Range;

/// Receives [`WorkQueue::post_owned_receives`] posts per call, at most.
pub(crate) const RECEIVES_PER_CALL: usize = STACK_LIST;

impl WorkQueue {
    /// Posts a receive into the whole of each buffer of `bufs` (every entry
    /// `Some`, at most [`STACK_LIST`] of them), in order, with one verb
    /// call. The posted ones are the first of `bufs`: their entries are
    /// taken (each buffer moves into its request's slot under the same
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
        let op = Operation::Receive;
        debug_assert!(bufs.len() <= STACK_LIST && bufs.iter().all(Option::is_some));
        let n = bufs.len().min(STACK_LIST);
        if let Err(e) = self.receives_here() {
            return (0..0, Err(e));
        }
        let mut st = self.lock();
        if let Err(e) = self.admit(&st, op, false) {
            return (0..0, Err(e));
        }
        let fits = n.min(st.receive_room());
        let full = (fits < n).then(|| queue_too_full(op, (n - fits) as u32, &st));
        let mut sges = [Sge::default(); STACK_LIST];
        let mut lens = [0usize; STACK_LIST];
        let mut count = 0;
        for (k, buf) in bufs[..fits].iter().enumerate() {
            if let Some(buf) = buf {
                let (addr, len, lkey) = buf.sge_full();
                sges[k] = Sge::new(addr, len, lkey);
                lens[k] = len as usize;
                count = k + 1;
            } else {
                break;
            }
        }
        if count == 0 {
            let e = full.unwrap_or_else(|| Error::Unusable("no buffer to receive into".into()));
            return (0..0, Err(e));
        }
        let first = st.next_wr_id;
        let reqs = (0..count).map(|k| RecvRequest::new(first + k as u64, &sges[k..=k]));
        // Every SGE names the whole chunk of a `PoolBuf` in `bufs`: the
        // buffer's only handle, which keeps its slab allocated and
        // registered. Under this lock, each buffer the verb queued moves
        // into its request's slot (released only once the completion is
        // seen); one it did not queue stays with the caller, and if the
        // verb does not say which it queued, the channel is shut down and
        // drained before any buffer comes back.
        // SAFETY: by the reasoning just above.
        let rc = with_list(reqs, |reqs| unsafe { self.qp.post_recv_list(reqs) });
        let (posted, rc) = match rc {
            Ok(()) => (count, full.map_or(Ok(()), Err)),
            Err(e) => match e.posted() {
                Some(k) if k < count || nothing_queued(&e) => (
                    k,
                    Err(Error::Post {
                        operation: op,
                        source: e.into(),
                    }),
                ),
                _ => {
                    // Not said: track them all, settle (shut down, drain),
                    // give every buffer back.
                    track_into_slots(&mut st, &mut bufs[..count], &lens);
                    self.settle_tracked(&mut st, op, first..first + count as u64, &e);
                    for (k, buf) in bufs[..count].iter_mut().enumerate() {
                        if let Some(slot) = st.slots.remove(first + k as u64) {
                            if let Held::Unique(b) = slot.att.held {
                                *buf = Some(b);
                            }
                        }
                    }
                    let e = Error::Post {
                        operation: op,
                        source: e.into(),
                    };
                    return (first..first, Err(e));
                }
            },
        };
        track_into_slots(&mut st, &mut bufs[..posted], &lens);
        (first..first + posted as u64, rc)
    }
}

/// Tracks the receives just posted into `bufs` (`lens` their lengths), in
/// order, each buffer moving into its request's slot.
fn track_into_slots(st: &mut Tracker, bufs: &mut [Option<PoolBuf>], lens: &[usize]) {
    for (buf, &len) in bufs.iter_mut().zip(lens) {
        let held = buf.take().map_or(Held::None, Held::Unique);
        let notify = Notify::Claim;
        st.track_attached(Operation::Receive, len, 0, Attached { held, notify });
    }
}
