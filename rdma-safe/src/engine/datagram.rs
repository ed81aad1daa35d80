//! Posting datagrams: a send on an unreliable-datagram queue pair,
//! addressed to a peer's address handle, QP number and QKey.

use super::WorkQueue;
use crate::error::{Error, Operation, Result, VerbsError};
use crate::memory::element::{gather_sges, GatherElement};
use rdma_core::{AddressHandle, SendRequest};

impl WorkQueue {
    /// Posts a send of `gather` to the UD destination (`ah`, `qpn`, `qkey`).
    /// The caller checked the size against the path MTU; the SGE count is
    /// checked here.
    pub(crate) fn post_datagram(
        &self,
        gather: &[GatherElement<'_>],
        ah: &AddressHandle,
        qpn: u32,
        qkey: u32,
    ) -> Result<u64> {
        if gather.len() > self.limits.caps.max_send_sge as usize {
            return Err(Error::Post {
                operation: Operation::Send,
                source: VerbsError::InvalidArgument(format!(
                    "{} SGEs exceed the endpoint's limit of {}",
                    gather.len(),
                    self.limits.caps.max_send_sge
                )),
            });
        }
        let len = gather.iter().map(GatherElement::len).sum();
        let req = SendRequest::send(0, gather_sges(gather)).ud(ah, qpn, qkey);
        self.post_sends(Operation::Send, len, &mut [req])
    }
}
