//! What the lanes of a many-queue-pair run ([`crate::multi_qp`]) are
//! told to do: each lane's plan, and the shape every lane shares.

use crate::protocol::AtomicKind;
use rdma_safe::{RemoteAccessBuffer, RemoteMemoryRegion};
use std::time::Duration;

/// What a lane posts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Post<'a> {
    /// Nothing (a receiving or passive side).
    Nothing,
    /// RDMA writes of the lane's message buffer to the region.
    Write(RemoteMemoryRegion),
    /// RDMA reads from the region into the lane's chunks.
    Read(RemoteMemoryRegion),
    /// Sends of the message buffer, immediate data = index in the lane.
    Send,
    /// 64-bit atomics on the word at `remote`, one per post (operation `i`
    /// as [`crate::atomic`] runs it), each old value into word `i % -t` of
    /// `results` and from there into the lane's `olds` once it completed.
    Atomic {
        kind: AtomicKind,
        remote: RemoteMemoryRegion,
        results: &'a RemoteAccessBuffer,
    },
}

/// What one lane does in a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan<'a> {
    pub(crate) post: Post<'a>,
    /// Whether the lane receives `iters` messages (send_bw).
    pub(crate) receive: bool,
}

/// The shape of a run, the same on every lane.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Message size.
    pub(crate) size: usize,
    /// Operations each lane posts, and messages each receiving lane takes.
    pub(crate) iters: usize,
    /// Operations in flight per lane (`-t`).
    pub(crate) depth: usize,
    /// Receives posted per lane (`-r`).
    pub(crate) rx_depth: usize,
    /// Bytes between receive slots in a lane's `rx` buffer.
    pub(crate) stride: usize,
    /// Whether every received message must carry its index as immediate
    /// data (`perf`'s own protocol; perftest sends none).
    pub(crate) check_immediate: bool,
    /// How long no lane may make progress.
    pub(crate) timeout: Duration,
}
