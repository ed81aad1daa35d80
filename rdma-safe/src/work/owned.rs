//! Owning requests: what an owning operation does ([`OwnedKind`]) and the
//! pool memory it holds ([`Held`]) from its post until its completion.
//! [`OwnedRequest`] is one request of an owning batch: a kind with its
//! memory.

use super::build::check_remote_len;
use crate::error::{Error, Operation};
use crate::memory::remote::RemoteMemoryRegion;
use crate::pool::{PoolBuf, PoolBytes};
use rdma_core::{SendFlags, SendRequest, Sge};

/// The most requests one owning batch may hold. Their SGEs and work
/// requests are built on the stack, so posting a batch allocates nothing.
pub const OWNED_BATCH_MAX: usize = 32;

/// What an owning request does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OwnedKind {
    Send {
        imm: Option<u32>,
    },
    Write {
        remote: RemoteMemoryRegion,
        imm: Option<u32>,
    },
    Receive,
    Read {
        remote: RemoteMemoryRegion,
    },
    /// Send-queue requests posted together ([`Held::Batch`]); `op` is the
    /// last one's.
    Batch {
        op: Operation,
    },
}

impl OwnedKind {
    pub(crate) fn operation(self) -> Operation {
        match self {
            OwnedKind::Batch { op } => op,
            OwnedKind::Send { .. } => Operation::Send,
            OwnedKind::Write { .. } => Operation::Write,
            OwnedKind::Receive => Operation::Receive,
            OwnedKind::Read { .. } => Operation::Read,
        }
    }

    /// The unsignaled send-queue request of this kind (not a receive or a
    /// batch) over `sges` (none for a zero-length payload), inline when its
    /// payload is at most `inline_default` bytes (the NIC then reads it at
    /// the post): single owning requests and the members of owning batches
    /// are built here, straight into a batch's list.
    #[inline(always)]
    pub(crate) fn send_request<'a>(
        self,
        id: u64,
        sges: &'a [Sge],
        inline_default: u32,
    ) -> SendRequest<'a> {
        let len: u32 = sges.iter().map(Sge::length).sum();
        let flags = if len > 0 && len <= inline_default {
            SendFlags::INLINE
        } else {
            SendFlags::empty()
        };
        match self {
            OwnedKind::Send { imm } => SendRequest::send_or_write(id, sges, None, imm, flags),
            OwnedKind::Write { remote, imm } => {
                let remote = Some((remote.address(), remote.rkey()));
                SendRequest::send_or_write(id, sges, remote, imm, flags)
            }
            OwnedKind::Read { remote } => {
                SendRequest::rdma_read(id, sges, remote.address(), remote.rkey())
            }
            OwnedKind::Receive | OwnedKind::Batch { .. } => {
                unreachable!("not a single send-queue request")
            }
        }
    }

    /// Why `len` bytes do not fit this kind's remote region, if they do not
    /// (sends and receives have none).
    pub(crate) fn remote_misfit(self, len: usize) -> Option<Error> {
        match self {
            OwnedKind::Write { remote, .. } | OwnedKind::Read { remote } => {
                check_remote_len(self.operation(), len, &remote).err()
            }
            _ => None,
        }
    }
}

/// The memory of an owning operation, kept in its slot from the post until
/// its completion (or flush) has been seen on the CQ.
#[derive(Debug, Default)]
pub(crate) enum Held {
    /// A borrowed-memory operation (scopes, blocking calls): nothing kept.
    #[default]
    None,
    /// The NIC writes it (receive, RDMA read target).
    Unique(PoolBuf),
    /// The NIC reads it (send, RDMA write source).
    Shared(PoolBytes),
    /// The requests of an owning batch, each with its memory.
    Batch(Vec<OwnedRequest>),
    /// For the tracker's tests: memory whose release they can see.
    #[cfg(test)]
    Probe(probe::Probe),
}

impl Held {
    /// The SGE fields of a send's, write's or read's memory (address,
    /// length, lkey); `None` for a receive's (see
    /// [`receive_sge`](Self::receive_sge)), a batch or nothing.
    #[inline]
    pub(crate) fn sge(&self) -> Option<(u64, u32, u32)> {
        match self {
            Held::Shared(b) => Some(b.sge()),
            Held::Unique(b) => Some(b.sge()),
            _ => None,
        }
    }
}

/// Test memory that records when it is released.
#[cfg(test)]
pub(crate) mod probe {
    use std::sync::{Arc, Mutex};

    /// Pushes its id onto the shared log when dropped.
    #[derive(Debug)]
    pub(crate) struct Probe {
        pub(crate) id: u64,
        pub(crate) log: Arc<Mutex<Vec<u64>>>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.log.lock().unwrap().push(self.id);
        }
    }
}

/// A send-queue request that owns its memory, for batches posted with one
/// doorbell. The NIC only reads a [`PoolBytes`] (sends, write sources) and
/// may write a [`PoolBuf`] (read targets, unique by type); either moves
/// into the batch and comes back with its completion.
///
/// Receives are not among them: each receive completes on its own, when a
/// message arrives, so batching them under one completion would hold every
/// buffer until the last message.
#[derive(Debug)]
pub struct OwnedRequest {
    pub(crate) kind: OwnedKind,
    /// [`Held::Shared`] for a send or write, [`Held::Unique`] for a read.
    pub(crate) held: Held,
}

impl OwnedRequest {
    /// A send of `data`.
    pub fn send(data: PoolBytes) -> Self {
        Self::bytes(OwnedKind::Send { imm: None }, data)
    }

    /// A send of `data` with 32 bits of immediate data.
    pub fn send_with_immediate(data: PoolBytes, imm: u32) -> Self {
        Self::bytes(OwnedKind::Send { imm: Some(imm) }, data)
    }

    /// An RDMA write of `data` to the start of `remote`.
    pub fn write(data: PoolBytes, remote: RemoteMemoryRegion) -> Self {
        Self::bytes(OwnedKind::Write { remote, imm: None }, data)
    }

    /// An RDMA write of `data` with immediate data, which consumes a
    /// receive at the peer.
    pub fn write_with_immediate(data: PoolBytes, remote: RemoteMemoryRegion, imm: u32) -> Self {
        let imm = Some(imm);
        Self::bytes(OwnedKind::Write { remote, imm }, data)
    }

    /// An RDMA read of `buf.len()` bytes from the start of `remote`.
    pub fn read(buf: PoolBuf, remote: RemoteMemoryRegion) -> Self {
        OwnedRequest {
            kind: OwnedKind::Read { remote },
            held: Held::Unique(buf),
        }
    }

    fn bytes(kind: OwnedKind, data: PoolBytes) -> Self {
        OwnedRequest {
            kind,
            held: Held::Shared(data),
        }
    }

    /// The operation the request performs.
    pub fn operation(&self) -> Operation {
        self.kind.operation()
    }

    /// The bytes the request moves.
    pub fn len(&self) -> usize {
        match &self.held {
            Held::Shared(data) => data.len(),
            Held::Unique(buf) => buf.len(),
            _ => 0,
        }
    }

    /// Whether the request moves no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slice of a send or write, given back.
    pub fn into_bytes(self) -> Option<PoolBytes> {
        match self.held {
            Held::Shared(data) => Some(data),
            _ => None,
        }
    }

    /// The buffer of a read, given back (holding what was read if the
    /// batch succeeded).
    pub fn into_buf(self) -> Option<PoolBuf> {
        match self.held {
            Held::Unique(buf) => Some(buf),
            _ => None,
        }
    }
}
