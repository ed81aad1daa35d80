//! The memory oracle's checks (the `fault-injection` feature) at the points
//! where this crate hands memory back or ends a borrow; the oracle and its
//! fault schedule are `rdma_core::fault`. Each check panics, naming the
//! request and the range, if a request the NIC may still be running names
//! that memory.
//!
//! Where memory comes back, and the check there:
//!
//! | moment | check |
//! | --- | --- |
//! | a scope returns | none of the requests it posted is in the NIC's hands |
//! | a [`PendingWork`](crate::PendingWork)'s borrow ends (taken, waited, dropped) | its request is not |
//! | a lent buffer comes back from a [`LentWork`](crate::scope::LentWork) | no request names the buffer |
//! | an owning operation's buffer comes back | no request names it (the NIC writes it) |
//! | a pool chunk goes back to its pool's free list | no request names it |
//! | a registration is dropped | no request names its range (checked in `rdma_core`, at `ibv_dereg_mr`) |

use crate::engine::{WorkQueue, BATCH_MEMBER};
use crate::work::Held;

/// None of the requests `ids` (tracker ids, as a scope records them) of
/// `queue` is still in the NIC's hands; `what` names the moment.
pub(crate) fn finished(queue: &WorkQueue, ids: &[u64], what: &str) {
    let ours = |wr_id: u64| ids.contains(&(wr_id & !BATCH_MEMBER));
    rdma_core::fault::check_finished(queue.qp.qp_num(), ours, what);
}

/// No request names the `len` bytes at `ptr`, handed back.
pub(crate) fn released(ptr: *const u8, len: usize, what: &str) {
    rdma_core::fault::check_released(ptr, len, what);
}

/// No request names the memory of `held` that the NIC writes (a receive's
/// or read's buffer, handed back exclusively). A send's bytes may still be
/// read by other sends of the same bytes; they are checked when their
/// chunk goes back to the pool.
pub(crate) fn held_returned(held: &Held) {
    match held {
        Held::Unique(b) => {
            let (addr, len, _) = b.sge_full();
            released(
                addr as *const u8,
                len as usize,
                "an owning operation's buffer comes back",
            );
        }
        Held::Batch(reqs) => reqs.iter().for_each(|r| held_returned(&r.held)),
        _ => {}
    }
}
