//! Send-queue requests checked and built once, to be posted many times
//! ([`PreparedBatch`](crate::prepared::PreparedBatch)): the verb's list is
//! kept between posts, and a post (the batches' `post_sends`) only sets
//! each request's id and links the list.

use super::WorkQueue;
use crate::error::Result;
use crate::work::{ReadWorkRequest, SendWorkRequest, WriteWorkRequest};
use rdma_core::SendRequest;

impl WorkQueue {
    /// Checks each send as a post would and builds its request; the total
    /// payload bytes beside them.
    pub(crate) fn prepare_sends<'a>(
        &self,
        wrs: &[SendWorkRequest<'a, '_>],
    ) -> Result<(Vec<SendRequest<'a>>, usize)> {
        build_each(wrs, |wr| {
            let len = wr.len();
            let inline = self.check_send(wr, len)?;
            Ok((Self::build_send(wr, inline), len))
        })
    }

    /// As [`prepare_sends`](Self::prepare_sends), for RDMA writes.
    pub(crate) fn prepare_writes<'a>(
        &self,
        wrs: &[WriteWorkRequest<'a, '_>],
    ) -> Result<(Vec<SendRequest<'a>>, usize)> {
        build_each(wrs, |wr| {
            let len = wr.len();
            let inline = self.check_write(wr, len)?;
            Ok((Self::build_write(wr, inline), len))
        })
    }

    /// As [`prepare_sends`](Self::prepare_sends), for RDMA reads: the
    /// requests borrow the reads' scatter lists exclusively.
    pub(crate) fn prepare_reads<'a>(
        &self,
        wrs: &'a mut [ReadWorkRequest<'_, '_>],
    ) -> Result<(Vec<SendRequest<'a>>, usize)> {
        let mut total = 0;
        for wr in wrs.iter() {
            let len = wr.len();
            self.check_read(wr, len)?;
            total += len;
        }
        let reqs = wrs.iter_mut().map(Self::build_read).collect();
        Ok((reqs, total))
    }
}

/// The requests `each` checks and builds from `wrs`, in order, and their
/// lengths added up; the first refusal stops it.
fn build_each<W, R>(
    wrs: &[W],
    mut each: impl FnMut(&W) -> Result<(R, usize)>,
) -> Result<(Vec<R>, usize)> {
    let mut total = 0;
    let mut reqs = Vec::with_capacity(wrs.len());
    for wr in wrs {
        let (req, len) = each(wr)?;
        reqs.push(req);
        total += len;
    }
    Ok((reqs, total))
}
