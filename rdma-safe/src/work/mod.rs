//! Work requests and their successful outcome.
//!
//! The typed requests, borrowed and owning, sit below the engine: this
//! module and its owning half import nothing that imports the engine
//! (the engine imports them).

pub(crate) mod build;
pub(crate) mod owned;

pub(crate) use owned::{Held, OwnedKind, OWNED_BATCH_MAX};

pub use crate::atomic::{AtomicOp, AtomicWorkRequest, ATOMIC_SIZE};
use crate::memory::element::{GatherElement, ScatterElement};
use crate::memory::remote::RemoteMemoryRegion;
/// The verbs layer's completion opcode and status.
pub use rdma_core::{WcOpcode, WcStatus};

/// A send: the gather list is the payload, optionally with 32 bits of
/// immediate data delivered in the receiver's completion.
#[derive(Debug, Clone, Copy)]
pub struct SendWorkRequest<'wr, 'data> {
    pub(crate) gather: &'wr [GatherElement<'data>],
    pub(crate) immediate: Option<u32>,
    pub(crate) solicited: bool,
    pub(crate) inline: Option<bool>,
}

impl<'wr, 'data> SendWorkRequest<'wr, 'data> {
    /// A send of the concatenation of `gather` (which may be empty: a
    /// zero-byte message).
    pub fn new(gather: &'wr [GatherElement<'data>]) -> Self {
        SendWorkRequest {
            gather,
            immediate: None,
            solicited: false,
            inline: None,
        }
    }
    /// Adds immediate data (host order; sent in network order).
    pub fn with_immediate(mut self, imm: u32) -> Self {
        self.immediate = Some(imm);
        self
    }
    /// Sets the solicited-event bit (wakes a receiver waiting for solicited
    /// events only).
    pub fn solicited(mut self) -> Self {
        self.solicited = true;
        self
    }
    /// Forces inline sending on or off. By default a payload no larger than
    /// the channel's inline size is sent inline.
    pub fn inline(mut self, inline: bool) -> Self {
        self.inline = Some(inline);
        self
    }
    /// Total payload bytes.
    pub fn len(&self) -> usize {
        self.gather.iter().map(GatherElement::len).sum()
    }
    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receive: incoming message bytes are scattered over the list in order.
#[derive(Debug)]
pub struct ReceiveWorkRequest<'wr, 'data> {
    pub(crate) scatter: &'wr mut [ScatterElement<'data>],
}

impl<'wr, 'data> ReceiveWorkRequest<'wr, 'data> {
    /// A receive into `scatter` (which may be empty, for zero-byte messages
    /// or RDMA writes with immediate).
    pub fn new(scatter: &'wr mut [ScatterElement<'data>]) -> Self {
        ReceiveWorkRequest { scatter }
    }
    /// Capacity in bytes.
    pub fn len(&self) -> usize {
        self.scatter.iter().map(ScatterElement::len).sum()
    }
    /// Whether the capacity is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A one-sided RDMA write of the gather list to the start of `remote`,
/// optionally with immediate data (which consumes a receive at the peer).
#[derive(Debug, Clone, Copy)]
pub struct WriteWorkRequest<'wr, 'data> {
    pub(crate) gather: &'wr [GatherElement<'data>],
    pub(crate) remote: RemoteMemoryRegion,
    pub(crate) immediate: Option<u32>,
    pub(crate) inline: Option<bool>,
}

impl<'wr, 'data> WriteWorkRequest<'wr, 'data> {
    /// Writes the concatenation of `gather` at `remote.address()`.
    pub fn new(gather: &'wr [GatherElement<'data>], remote: RemoteMemoryRegion) -> Self {
        WriteWorkRequest {
            gather,
            remote,
            immediate: None,
            inline: None,
        }
    }
    /// Adds immediate data: the peer gets a receive completion carrying it.
    pub fn with_immediate(mut self, imm: u32) -> Self {
        self.immediate = Some(imm);
        self
    }
    /// Forces inline sending on or off (default: inline when small enough).
    pub fn inline(mut self, inline: bool) -> Self {
        self.inline = Some(inline);
        self
    }
    /// Total bytes written.
    pub fn len(&self) -> usize {
        self.gather.iter().map(GatherElement::len).sum()
    }
    /// Whether nothing is written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A one-sided RDMA read of `remote` into the scatter list.
#[derive(Debug)]
pub struct ReadWorkRequest<'wr, 'data> {
    pub(crate) scatter: &'wr mut [ScatterElement<'data>],
    pub(crate) remote: RemoteMemoryRegion,
}

impl<'wr, 'data> ReadWorkRequest<'wr, 'data> {
    /// Reads as many bytes as `scatter` holds from `remote.address()`.
    pub fn new(scatter: &'wr mut [ScatterElement<'data>], remote: RemoteMemoryRegion) -> Self {
        ReadWorkRequest { scatter, remote }
    }
    /// Total bytes read.
    pub fn len(&self) -> usize {
        self.scatter.iter().map(ScatterElement::len).sum()
    }
    /// Whether nothing is read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A successfully completed work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkSuccess {
    pub(crate) bytes: usize,
    pub(crate) immediate: Option<u32>,
    pub(crate) opcode: WcOpcode,
    pub(crate) wr_id: u64,
    pub(crate) source_qp: u32,
}

impl WorkSuccess {
    /// Bytes transferred: for a receive, the bytes of the incoming message
    /// (for an RDMA write with immediate, the bytes the peer wrote to its
    /// remote region — none land in the receive's scatter list); for sends,
    /// writes and reads, the request's length.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// Immediate data carried by a received message (send or write with
    /// immediate), in host order.
    pub fn immediate(&self) -> Option<u32> {
        self.immediate
    }
    /// The completion's opcode.
    pub fn opcode(&self) -> WcOpcode {
        self.opcode
    }
    /// The work request id the channel assigned.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// For a receive, the QP number of the sender (what tells datagrams
    /// from several peers apart); meaningless for other operations.
    pub fn source_qp(&self) -> u32 {
        self.source_qp
    }
}
