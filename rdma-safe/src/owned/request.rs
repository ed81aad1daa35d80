//! [`Request`]: one owning operation as a value — what it does and the
//! memory it takes — for [`SharedChannel::run`](super::SharedChannel::run),
//! [`run_then`](super::SharedChannel::run_then) and
//! [`submit`](super::SharedChannel::submit).

use super::OwnedRequest;
use crate::error::Operation;
use crate::memory::RemoteMemoryRegion;
use crate::pool::{PoolBuf, PoolBytes};
use crate::work::OwnedKind;

/// An owning operation: its kind and the buffer it takes, which comes back
/// with its outcome. The buffer's type says what the NIC may do with it:
/// it only reads a [`PoolBytes`] (sends, RDMA write sources) and may write
/// a [`PoolBuf`] (receives, RDMA read targets), unique by type; a batch
/// takes its [`OwnedRequest`]s and gives them back together.
///
/// ```no_run
/// # async fn f(ch: rdma_safe::SharedChannel, pool: rdma_safe::BufferPool,
/// #            remote: rdma_safe::RemoteMemoryRegion) -> rdma_safe::Result<()> {
/// use rdma_safe::owned::Request;
///
/// let mut buf = pool.try_alloc()?;
/// buf.copy_from_slice(b"hello");
/// let (sent, bytes) = ch.submit(Request::send(buf.freeze())).await;
/// sent?;
/// let (written, _) = ch.run(Request::write(bytes, remote).with_immediate(7));
/// written?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a request does nothing until run or submitted"]
pub struct Request<B> {
    pub(crate) kind: OwnedKind,
    pub(crate) buf: B,
}

impl Request<PoolBytes> {
    /// A send of `data`.
    pub fn send(data: PoolBytes) -> Self {
        Request {
            kind: OwnedKind::Send { imm: None },
            buf: data,
        }
    }

    /// An RDMA write of `data` to the start of `remote` (`data` must fit).
    pub fn write(data: PoolBytes, remote: RemoteMemoryRegion) -> Self {
        Request {
            kind: OwnedKind::Write { remote, imm: None },
            buf: data,
        }
    }

    /// The same send or write carrying 32 bits of immediate data, which the
    /// peer's receive completion reports (a write with immediate data
    /// consumes a receive at the peer).
    pub fn with_immediate(mut self, imm: u32) -> Self {
        match &mut self.kind {
            OwnedKind::Send { imm: slot } | OwnedKind::Write { imm: slot, .. } => *slot = Some(imm),
            _ => unreachable!("a Request<PoolBytes> is a send or a write"),
        }
        self
    }
}

impl Request<PoolBuf> {
    /// A receive of one message into `buf`; `buf` comes back with its
    /// length set to the message's. A receive whose future is dropped
    /// after posting stays posted: the message it takes is discarded and
    /// the buffer returns to the pool.
    pub fn receive(buf: PoolBuf) -> Self {
        Request {
            kind: OwnedKind::Receive,
            buf,
        }
    }

    /// An RDMA read of `buf.len()` bytes from the start of `remote` into
    /// `buf`.
    pub fn read(buf: PoolBuf, remote: RemoteMemoryRegion) -> Self {
        Request {
            kind: OwnedKind::Read { remote },
            buf,
        }
    }
}

impl Request<Vec<OwnedRequest>> {
    /// 1 to [`OWNED_BATCH_MAX`](super::OWNED_BATCH_MAX) send-queue requests
    /// posted as one batch: one `ibv_post_send` call, only the last
    /// signaled; its completion (on a reliable connection, the send queue
    /// completes in order) ends the whole batch. The outcome is the last
    /// request's on success (its `bytes` are the batch's total), the first
    /// failure's otherwise. An empty or oversized batch, a request that
    /// does not fit its remote region, or a send queue without room for
    /// the whole batch is refused before posting (a future waits for the
    /// room instead).
    pub fn batch(reqs: Vec<OwnedRequest>) -> Self {
        let op = reqs.last().map_or(Operation::Send, OwnedRequest::operation);
        Request {
            kind: OwnedKind::Batch { op },
            buf: reqs,
        }
    }
}

impl<B> Request<B> {
    /// The operation (a batch's: its last request's).
    pub fn operation(&self) -> Operation {
        self.kind.operation()
    }
}
