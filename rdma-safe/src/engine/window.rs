//! Posting memory-window requests: binding a type 2 window and
//! invalidating its key. Both are local operations on the send queue; the
//! engine tracks them like any other request, so a channel's timeout and
//! shutdown bound their waits too.

use super::WorkQueue;
use crate::error::{Operation, Result};
use rdma_core::{AccessFlags, MemoryRegion, MemoryWindow, SendRequest};
use std::ops::Range;

impl WorkQueue {
    /// Posts a bind of `mw` (type 2) over `range` of `mr` with the key
    /// `rkey` and the remote rights `access`.
    pub(crate) fn post_bind_window(
        &self,
        mw: &MemoryWindow,
        rkey: u32,
        mr: &MemoryRegion,
        range: Range<u64>,
        access: AccessFlags,
    ) -> Result<u64> {
        let len = range.end - range.start;
        let req = SendRequest::bind_mw(0, mw, rkey, mr, range.start, len, access);
        self.post_sends(Operation::BindWindow, 0, &mut [req])
    }

    /// Posts an invalidation of the window key `rkey`.
    pub(crate) fn post_invalidate(&self, rkey: u32) -> Result<u64> {
        let req = SendRequest::local_inv(0, rkey);
        self.post_sends(Operation::InvalidateWindow, 0, &mut [req])
    }
}
