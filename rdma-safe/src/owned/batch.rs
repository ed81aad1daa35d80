//! [`OwnedRequest`]: one request of an owning batch
//! ([`Request::batch`](crate::owned::Request::batch)), holding the pool
//! memory it names.

use crate::error::Operation;
use crate::memory::remote::RemoteMemoryRegion;
use crate::pool::{PoolBuf, PoolBytes};

/// The most requests one owning batch may hold. Their SGEs and work
/// requests are built on the stack, so posting a batch allocates nothing.
pub const OWNED_BATCH_MAX: usize = 32;

/// A send-queue request that owns its memory, for batches posted with one
/// doorbell. The NIC only reads a [`PoolBytes`] (sends, write sources) and
/// may write a [`PoolBuf`] (read targets, unique by type); either moves
/// into the batch and comes back with its completion.
///
/// Receives are not among them: each receive completes on its own, when a
/// message arrives, so batching them under one completion would hold every
/// buffer until the last message.
#[derive(Debug)]
pub enum OwnedRequest {
    /// A send of `data`, with immediate data if `imm` is set.
    Send {
        /// The message.
        data: PoolBytes,
        /// Immediate data the peer's receive completion carries.
        imm: Option<u32>,
    },
    /// An RDMA write of `data` to the start of `remote`.
    Write {
        /// The bytes written.
        data: PoolBytes,
        /// Where they go (`data` must fit).
        remote: RemoteMemoryRegion,
        /// Immediate data, which consumes a receive at the peer.
        imm: Option<u32>,
    },
    /// An RDMA read of `buf.len()` bytes from the start of `remote`.
    Read {
        /// The target (its length says how much is read).
        buf: PoolBuf,
        /// Where the bytes come from.
        remote: RemoteMemoryRegion,
    },
}

impl OwnedRequest {
    /// A send of `data`.
    pub fn send(data: PoolBytes) -> Self {
        OwnedRequest::Send { data, imm: None }
    }

    /// A send of `data` with 32 bits of immediate data.
    pub fn send_with_immediate(data: PoolBytes, imm: u32) -> Self {
        OwnedRequest::Send {
            data,
            imm: Some(imm),
        }
    }

    /// An RDMA write of `data` to the start of `remote`.
    pub fn write(data: PoolBytes, remote: RemoteMemoryRegion) -> Self {
        OwnedRequest::Write {
            data,
            remote,
            imm: None,
        }
    }

    /// An RDMA write of `data` with immediate data.
    pub fn write_with_immediate(data: PoolBytes, remote: RemoteMemoryRegion, imm: u32) -> Self {
        OwnedRequest::Write {
            data,
            remote,
            imm: Some(imm),
        }
    }

    /// An RDMA read of `buf.len()` bytes from the start of `remote`.
    pub fn read(buf: PoolBuf, remote: RemoteMemoryRegion) -> Self {
        OwnedRequest::Read { buf, remote }
    }

    /// The operation the request performs.
    pub fn operation(&self) -> Operation {
        match self {
            OwnedRequest::Send { .. } => Operation::Send,
            OwnedRequest::Write { .. } => Operation::Write,
            OwnedRequest::Read { .. } => Operation::Read,
        }
    }

    /// The bytes the request moves.
    pub fn len(&self) -> usize {
        match self {
            OwnedRequest::Send { data, .. } | OwnedRequest::Write { data, .. } => data.len(),
            OwnedRequest::Read { buf, .. } => buf.len(),
        }
    }

    /// Whether the request moves no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slice of a send or write, given back.
    pub fn into_bytes(self) -> Option<PoolBytes> {
        match self {
            OwnedRequest::Send { data, .. } | OwnedRequest::Write { data, .. } => Some(data),
            OwnedRequest::Read { .. } => None,
        }
    }

    /// The buffer of a read, given back (holding what was read if the
    /// batch succeeded).
    pub fn into_buf(self) -> Option<PoolBuf> {
        match self {
            OwnedRequest::Read { buf, .. } => Some(buf),
            _ => None,
        }
    }

    /// The SGE fields of the memory: address, length, lkey.
    pub(crate) fn sge(&self) -> (u64, u32, u32) {
        match self {
            OwnedRequest::Send { data, .. } | OwnedRequest::Write { data, .. } => data.sge(),
            OwnedRequest::Read { buf, .. } => buf.sge(),
        }
    }
}
