//! The bandwidth tests' data path: the client's loop keeping `-t`
//! operations in flight in one scope ([`run_bw`], [`pump`]), the send_bw
//! server's receive ring ([`serve_send_bw`]), and how the rotating buffers
//! are sized.

use crate::measured::measured_loop;
use crate::protocol::{Params, Test};
use crate::watch::{self, Beat};
use crate::{check_message, seed, Side, BY_CLIENT};
use rdma_examples::clock::{self, Stamp, Timeline};
use rdma_examples::fail;
use rdma_examples::net::Link;
use rdma_examples::stats::Bandwidth;
use rdma_examples::{pattern, Result};
use rdma_safe::{
    scope::ScopedPendingWork, PollingScope, ReadWorkRequest, ReceiveWorkRequest,
    RemoteMemoryRegion, ScatterElement, SendWorkRequest, WriteWorkRequest,
};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// send_bw, server side: receives posted in a ring of slots, `GO`, then
/// every message is checked for order (immediate data) and length. Used
/// receives are re-posted in batches (one `ibv_post_recv` call each). A
/// quiet wait rests on `link` ([`watch::wait`]); a failure flushes the
/// receives at once.
pub(crate) fn serve_send_bw(
    p: &Params,
    size: usize,
    side: &mut Side,
    link: &mut Link,
) -> Result<()> {
    let (iters, slots, stride) = (p.iters, side.slots, p.max_size());
    let (rx_mr, rx) = side.rx.split_mut();
    let refill = batch_size(p.rx_depth);
    let timeout = side.channel.timeout();
    measured_loop(|| {
        side.channel.scope(|s| -> Result<()> {
            s.cancel_on_error();
            let mut lists: Vec<[rdma_safe::ScatterElement<'_>; 1]> = rx
                .chunks_mut(stride)
                .take(slots)
                .map(|c| [rx_mr.scatter_element(&mut c[..size])])
                .collect();
            // One request per slot, built once: a batch posts a run of them.
            let mut ring: Vec<ReceiveWorkRequest<'_, '_>> = lists
                .iter_mut()
                .map(|l| ReceiveWorkRequest::new(l))
                .collect();
            let mut recvs = VecDeque::with_capacity(p.rx_depth);
            let mut posted = 0;
            while posted < p.rx_depth.min(iters) {
                let n = p.rx_depth.min(iters) - posted;
                posted += post_ring(s, &mut ring, posted, n, &mut recvs)?;
            }
            link.write_line(&format!("GO {size}"))?;
            let mut used = 0;
            for i in 0..iters {
                let next = recvs.pop_front().ok_or_else(|| fail("no receive posted"))?;
                let got = watch::wait(next, timeout, &mut *link, "message from the client")
                    .map_err(|e| watch::explain(e, &mut *link))?;
                check_message(i, size, got.bytes(), got.immediate())?;
                used += 1;
                if used >= refill && posted < iters {
                    let n = post_ring(s, &mut ring, posted, used.min(iters - posted), &mut recvs)?;
                    posted += n;
                    used -= n;
                }
            }
            Ok(())
        })
    })
    .map_err(rdma_safe::Error::from)
}

/// Posts up to `n` receives, as one batch, from the ring `ring` (one
/// request per slot) from slot `posted % ring.len()` on (fewer where the
/// ring wraps); their handles go to the back of `recvs`. Returns how many
/// were posted. Allocates nothing while `recvs` has room.
fn post_ring<'scope, 'd: 'scope>(
    s: &mut PollingScope<'scope, '_>,
    ring: &mut [ReceiveWorkRequest<'_, 'd>],
    posted: usize,
    n: usize,
    recvs: &mut VecDeque<ScopedPendingWork<'scope>>,
) -> Result<usize> {
    let at = posted % ring.len();
    let n = n.min(ring.len() - at);
    s.post_receive_batch_into(&mut ring[at..at + n], recvs)
}

/// One bandwidth run as the client saw it.
pub(crate) struct BwRun {
    pub(crate) bw: Bandwidth,
    pub(crate) post_ns_avg: f64,
    pub(crate) scope_exit_us: f64,
}

/// Bandwidth, client side: `tx_depth` operations in flight in one scope.
pub(crate) fn run_bw(
    p: &Params,
    verbose: bool,
    size: usize,
    side: &mut Side,
    remote: Option<RemoteMemoryRegion>,
) -> Result<BwRun> {
    let chunks = match p.test {
        Test::ReadBw => read_chunks(side.local.len(), size, p.tx_depth),
        _ => 1,
    };
    let (mr, buf) = side.local.split_mut();
    let buf = &mut buf[..size * chunks];
    match p.test {
        Test::ReadBw => buf.fill(0),
        _ => pattern::fill(buf, seed(size, BY_CLIENT), 0),
    }
    let (iters, depth, test) = (p.iters, p.tx_depth, p.test);
    let _ = clock::ticks_per_sec(); // calibrate before timing
    let mut tl = Timeline::with_capacity(Stamp::now(), iters);
    let mut post_time = Duration::ZERO;
    let (tl_ref, post_time_ref) = (&mut tl, &mut post_time);
    let beat = &mut side.beat;
    let closure_end = measured_loop(|| {
        side.channel.scope(|s| -> Result<Instant> {
            match test {
                Test::WriteBw => {
                    let remote = remote.ok_or_else(|| fail("no remote region"))?;
                    let g = [mr.gather_element(buf)];
                    let wrs = vec![WriteWorkRequest::new(&g, remote); batch_size(depth)];
                    // Checked and built once; each post gives it an id.
                    let mut batch = s.prepare_writes(&wrs)?;
                    pump(
                        verbose.then_some(&mut *post_time_ref),
                        tl_ref,
                        beat,
                        iters,
                        depth,
                        size,
                        batch.len(),
                        &mut |_, n| {
                            batch.truncate(n);
                            s.post_prepared(&mut batch)
                        },
                    )?;
                }
                Test::ReadBw => {
                    let remote = remote.ok_or_else(|| fail("no remote region"))?;
                    // One exclusive chunk per read of a batch, and the
                    // reads built once: a batch posts the first `n`.
                    let mut elems: Vec<[ScatterElement<'_>; 1]> = buf
                        .chunks_mut(size)
                        .map(|c| [mr.scatter_element(c)])
                        .collect();
                    let mut reads: Vec<ReadWorkRequest<'_, '_>> = elems
                        .iter_mut()
                        .map(|e| ReadWorkRequest::new(e, remote))
                        .collect();
                    let mut batch = s.prepare_reads(&mut reads)?;
                    pump(
                        verbose.then_some(&mut *post_time_ref),
                        tl_ref,
                        beat,
                        iters,
                        depth,
                        size,
                        batch.len(),
                        &mut |_, n| {
                            batch.truncate(n);
                            s.post_prepared(&mut batch)
                        },
                    )?;
                }
                _ => {
                    let g = [mr.gather_element(buf)];
                    let wrs = vec![SendWorkRequest::new(&g).with_immediate(0); batch_size(depth)];
                    let mut batch = s.prepare_sends(&wrs)?;
                    pump(
                        verbose.then_some(&mut *post_time_ref),
                        tl_ref,
                        beat,
                        iters,
                        depth,
                        size,
                        batch.len(),
                        &mut |first, n| {
                            // Each message's index, for the server's check
                            // of order.
                            batch.truncate(n);
                            for k in 0..n {
                                batch.set_immediate(k, (first + k) as u32)?;
                            }
                            s.post_prepared(&mut batch)
                        },
                    )?;
                }
            }
            Ok(Instant::now())
        })
    })
    .map_err(rdma_safe::Error::from)?;
    let scope_exit_us = closure_end.elapsed().as_secs_f64() * 1e6;
    let bw = tl.bandwidth(size).ok_or_else(|| fail("no operations"))?;
    Ok(BwRun {
        bw,
        post_ns_avg: if verbose {
            post_time.as_secs_f64() * 1e9 / iters as f64
        } else {
            f64::NAN
        },
        scope_exit_us,
    })
}

/// The most memory a bandwidth test's rotating buffers span (send_bw's
/// receive slots, read_bw's chunks), but never fewer than two messages —
/// perftest's buffers are two messages (or a page) long. It stays well
/// within the common 8 MiB memlock default.
const RING_BYTES: usize = 2 << 20;

/// Buffers of `size` bytes a rotating ring holds within [`RING_BYTES`]
/// (at least two).
pub(crate) fn ring_slots(size: usize) -> usize {
    (RING_BYTES / size.max(1)).max(2)
}

/// Chunks of `size` bytes read_bw reads a batch into: a batch's worth (the
/// reads of one batch need distinct buffers; later batches reuse them), at
/// most what `local_len` bytes hold, at most [`ring_slots`].
pub(crate) fn read_chunks(local_len: usize, size: usize, depth: usize) -> usize {
    let size = size.max(1);
    batch_size(depth)
        .min(local_len / size)
        .min(ring_slots(size))
        .max(1)
}

/// Requests per batch in the bandwidth loop: one `ibv_post_send` call and
/// one completion per batch (perftest signals every 100th request by
/// default), at most 8, with at least eight batches in flight to keep the
/// pipe full: rxe's requester stops at 64 packets in flight, and small
/// batches keep the queue from draining while the oldest is awaited.
pub(crate) fn batch_size(depth: usize) -> usize {
    (depth / 8).clamp(1, MAX_BATCH)
}

/// The most requests [`batch_size`] puts in a batch.
pub(crate) const MAX_BATCH: usize = 8;

/// The bandwidth loop: keeps up to `depth` operations in flight, posted in
/// batches of up to `batch` (`post(first, n)` posts operations
/// `first..first + n` with one handle), waiting for the oldest batch when
/// full; checks every completion's length. Timestamps are taken per batch
/// (cheap TSC reads, as perftest), and `beat` ticks once per turn.
#[allow(clippy::too_many_arguments)]
fn pump<'scope>(
    mut post_time: Option<&mut Duration>,
    tl: &mut Timeline,
    beat: &mut Beat,
    iters: usize,
    depth: usize,
    size: usize,
    batch: usize,
    post: &mut dyn FnMut(usize, usize) -> rdma_safe::Result<ScopedPendingWork<'scope>>,
) -> Result<()> {
    let mut inflight: VecDeque<(ScopedPendingWork<'scope>, usize)> = VecDeque::with_capacity(depth);
    let (mut next, mut outstanding) = (0, 0);
    while tl.completed() < iters {
        beat.tick();
        while next < iters && outstanding + batch.min(iters - next) <= depth.max(batch) {
            let n = batch.min(iters - next);
            let t0 = Stamp::now();
            inflight.push_back((post(next, n)?, n));
            if let Some(total) = post_time.as_deref_mut() {
                *total += t0.elapsed();
            }
            tl.posted(t0, n);
            next += n;
            outstanding += n;
        }
        let (oldest, n) = inflight.pop_front().expect("an operation is in flight");
        let done = oldest.wait()?;
        tl.completed_now(n);
        outstanding -= n;
        if done.bytes() != size * n {
            return Err(fail(format!(
                "operations {}..{} completed with {} bytes, expected {}",
                tl.completed() - n,
                tl.completed(),
                done.bytes(),
                size * n
            )));
        }
    }
    Ok(())
}
