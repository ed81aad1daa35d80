//! The libevpl-style API of `one_sided`: [`rdma_write`] and [`rdma_read`]
//! take a remote region, local iovecs and a completion callback, like
//! `evpl_rdma_write(evpl, bind, rkey, addr, iov, niov, flags, callback,
//! private)`; [`Completions`] fires the callbacks as completions arrive.

use rdma_safe::{
    scope::ScopedPendingWork, GatherElement, PollingScope, ReadWorkRequest, RemoteMemoryRegion,
    ScatterElement, WorkSuccess, WriteWorkRequest,
};
use std::time::{Duration, Instant};

/// A completion callback (libevpl's `void (*callback)(int status, void
/// *private_data)`, with the private data captured by the closure).
pub(crate) type Callback<'cb> = Box<dyn FnOnce(rdma_safe::Result<WorkSuccess>) + 'cb>;

/// Operations in flight and their callbacks; [`poll`](Self::poll) fires the
/// callbacks of those that completed.
pub(crate) struct Completions<'scope, 'cb> {
    pending: Vec<(ScopedPendingWork<'scope>, Callback<'cb>)>,
    depth: usize,
    timeout: Duration,
}

impl std::fmt::Debug for Completions<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completions")
            .field("in_flight", &self.pending.len())
            .field("depth", &self.depth)
            .finish()
    }
}

impl<'scope, 'cb> Completions<'scope, 'cb> {
    /// Room for `depth` operations; a stall longer than `timeout` ends in
    /// a bounded wait that shuts the channel down.
    pub(crate) fn new(depth: usize, timeout: Duration) -> Self {
        Completions {
            pending: Vec::with_capacity(depth),
            depth,
            timeout,
        }
    }

    fn push(&mut self, work: ScopedPendingWork<'scope>, cb: Callback<'cb>) {
        self.pending.push((work, cb));
    }

    /// Polls every operation once; fires the callbacks of the completed
    /// ones (in posting order). Returns how many fired.
    pub(crate) fn poll(&mut self) -> usize {
        let mut fired = 0;
        for (work, cb) in std::mem::take(&mut self.pending) {
            match work.poll() {
                Ok(outcome) => {
                    cb(outcome);
                    fired += 1;
                }
                Err(work) => self.pending.push((work, cb)),
            }
        }
        fired
    }

    /// Polls until at most `n` operations are in flight. After `timeout`
    /// without progress the oldest is waited for with the channel's bounded
    /// wait (which, if it expires, shuts the channel down and flushes
    /// everything, so every callback still fires).
    pub(crate) fn poll_until(&mut self, n: usize) {
        let mut last_progress = Instant::now();
        while self.pending.len() > n {
            if self.poll() > 0 {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > self.timeout {
                let (work, cb) = self.pending.remove(0);
                cb(work.wait());
                last_progress = Instant::now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Polls until nothing is in flight.
    pub(crate) fn drain(&mut self) {
        self.poll_until(0);
    }
}

/// `evpl_rdma_write`: writes the concatenation of `iov` to `remote`;
/// `callback` fires with the outcome. Waits for room if `depth` operations
/// are in flight.
///
/// # Errors
/// The post failed (the callback then does not fire).
pub(crate) fn rdma_write<'scope, 'cb>(
    s: &mut PollingScope<'scope, '_>,
    q: &mut Completions<'scope, 'cb>,
    remote: RemoteMemoryRegion,
    iov: &[GatherElement<'scope>],
    callback: impl FnOnce(rdma_safe::Result<WorkSuccess>) + 'cb,
) -> rdma_safe::Result<()> {
    q.poll_until(q.depth - 1);
    let work = s.post_write(WriteWorkRequest::new(iov, remote))?;
    q.push(work, Box::new(callback));
    Ok(())
}

/// `evpl_rdma_read`: reads `remote` into the iovecs in order; `callback`
/// fires with the outcome. Waits for room if `depth` operations are in
/// flight.
///
/// # Errors
/// The post failed (the callback then does not fire).
pub(crate) fn rdma_read<'scope, 'cb>(
    s: &mut PollingScope<'scope, '_>,
    q: &mut Completions<'scope, 'cb>,
    remote: RemoteMemoryRegion,
    iov: &mut [ScatterElement<'scope>],
    callback: impl FnOnce(rdma_safe::Result<WorkSuccess>) + 'cb,
) -> rdma_safe::Result<()> {
    q.poll_until(q.depth - 1);
    let work = s.post_read(ReadWorkRequest::new(iov, remote))?;
    q.push(work, Box::new(callback));
    Ok(())
}
