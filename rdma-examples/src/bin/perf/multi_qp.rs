//! Many queue pairs and both directions (`-q`, `-b`): one thread drives
//! every *lane* — one connection, its buffers and its own `rdma-safe`
//! scope — in turn, as perftest's `run_iter_bw` and `run_iter_bi` walk
//! their queue pairs in one loop.
//!
//! A lane posts (`-t` operations in flight, `-n` of them, batched as the
//! one-lane loop does), receives (send_bw's receiving side: `-r` receives
//! posted, re-posted as they complete), or both (`send_bw -b`). Nothing
//! blocks on one lane while another has work: each turn posts what fits
//! and polls each lane's oldest operations without waiting.
//!
//! Scopes are closures, so N of them are open at once by recursion
//! ([`nest`]): each level opens its lane's scope, posts its first
//! receives, and hands the next level a `step` of every lane opened so
//! far; the innermost level says "ready" (perftest's go-ahead handshake:
//! every receive is posted by then) and drives all lanes until each is
//! done. Buffers, request arrays and handle rings are set up per lane
//! before the run; a turn allocates nothing.
//!
//! A run ends on the first error of any lane, and every lane's scope
//! cancels on error: the queue pairs are moved to the error state and
//! flushed together as the scopes unwind, so a failure costs one drain
//! whatever the number of lanes. A turn that sees no completion on any
//! lane for the channel's timeout is such an error; once no lane has
//! completed anything for [`watch::QUIET`], the turns rest on the control
//! connection between polls, which also ends the run when the peer is
//! gone ([`crate::watch`]).
//!
//! Each thread's lanes, scopes and turns run inside one
//! [`measured_loop`] (`cargo xtask bench --instructions` counts there):
//! the `ready` handshake inside it is constant per run.

use crate::bandwidth::{batch_size, read_chunks, BwRun};
use crate::measured::measured_loop;
pub(crate) use crate::multi_plan::{Plan, Post, Shape};
use crate::watch::{self, Peer};
use crate::{check_message, Side};
use rdma_examples::clock::{self, Stamp, Timeline};
use rdma_examples::fail;
use rdma_examples::Result;
use rdma_safe::{
    scope::ScopedPendingWork, work::ATOMIC_SIZE, ReadWorkRequest, ReceiveWorkRequest,
    ScatterElement, SendWorkRequest, WriteWorkRequest,
};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Post and completion times of a lane's operations (from the run's
/// origin, shared by every lane), and the messages it received.
#[derive(Debug)]
pub(crate) struct LaneTimes {
    pub(crate) timeline: Timeline,
    pub(crate) received: usize,
    /// The old values of the lane's atomics, in order.
    pub(crate) olds: Vec<u64>,
}

/// Progress of one turn over some lanes.
#[derive(Debug, Clone, Copy)]
struct Turn {
    /// Every lane has finished.
    done: bool,
    /// Completions seen in this turn.
    events: usize,
}

/// Runs `plans[i]` on `sides[i]`, every lane in one thread; `ready` is
/// called with the control connection `ctl` once every lane has posted
/// its first receives and before any lane posts, and the quiet turns rest
/// on `ctl`. Returns each lane's times.
///
/// # Errors
/// A post or a completion failed ([`watch::explain`]ed), a completion's
/// length or immediate data is wrong, `ready` failed, the peer is gone, or
/// no lane progressed for `shape.timeout`.
pub(crate) fn run_lanes<C: Peer>(
    sides: &mut [Side],
    plans: &[Plan],
    shape: &Shape,
    ctl: &mut C,
    ready: &mut dyn FnMut(&mut C) -> Result<()>,
) -> Result<Vec<LaneTimes>> {
    check_lanes(sides, plans)?;
    let _ = clock::ticks_per_sec(); // calibrate before timing
    let origin = Stamp::now();
    let ctl = RefCell::new(ctl);
    let mut say_ready = || ready(&mut **ctl.borrow_mut());
    let mut rest = || ctl.borrow_mut().rest();
    let stop = AtomicBool::new(false);
    let watch = Watch {
        rest: &mut rest,
        stop: &stop,
    };
    lanes_from(sides, plans, shape, origin, &mut say_ready, watch)
        .map_err(|e| watch::explain(e, &mut **ctl.borrow_mut()))
}

/// As many plans as lanes, and at least one.
pub(crate) fn check_lanes(sides: &[Side], plans: &[Plan]) -> Result<()> {
    if sides.len() != plans.len() || sides.is_empty() {
        return Err(fail(format!(
            "{} lanes for {} plans",
            sides.len(),
            plans.len()
        )));
    }
    Ok(())
}

/// What the turns of a run look at besides their lanes.
pub(crate) struct Watch<'a> {
    /// One rest of a quiet run ([`Peer::rest`]).
    pub(crate) rest: &'a mut dyn FnMut() -> Result<()>,
    /// Set when another thread's lanes failed (`--threads`) or its peer
    /// is gone: the turns stop.
    pub(crate) stop: &'a AtomicBool,
}

/// [`run_lanes`]' body, the times counted from `origin`.
pub(crate) fn lanes_from(
    sides: &mut [Side],
    plans: &[Plan],
    shape: &Shape,
    origin: Stamp,
    ready: &mut dyn FnMut() -> Result<()>,
    mut watch: Watch<'_>,
) -> Result<Vec<LaneTimes>> {
    let mut times: Vec<LaneTimes> = plans
        .iter()
        .map(|plan| lane_times(plan, shape, origin))
        .collect();
    let mut none = || {
        Ok(Turn {
            done: true,
            events: 0,
        })
    };
    // The lanes' scopes and every turn, as the one-lane loops wrap their
    // scope; once per thread with `--threads` (callgrind toggles its
    // collection per thread).
    measured_loop(|| {
        let mut last = |lanes: &mut Lanes<'_>| drive(shape.timeout, lanes, ready, &mut watch);
        nest(sides, plans, shape, &mut times, &mut none, &mut last)
    })?;
    Ok(times)
}

/// A lane's empty record, with room for its operations.
fn lane_times(plan: &Plan, shape: &Shape, origin: Stamp) -> LaneTimes {
    let n = if matches!(plan.post, Post::Nothing) {
        0
    } else {
        shape.iters
    };
    let atomics = if matches!(plan.post, Post::Atomic { .. }) {
        n
    } else {
        0
    };
    LaneTimes {
        timeline: Timeline::with_capacity(origin, n),
        received: 0,
        olds: Vec::with_capacity(atomics),
    }
}

/// The bandwidth of a run: every lane's operations in one timeline, post
/// times and completion times each in order, as perftest keeps them
/// (one array over all its queue pairs), so that the peak and the average
/// cover all lanes.
pub(crate) fn bandwidth(size: usize, lanes: &[LaneTimes]) -> Result<BwRun> {
    let bw = Timeline::merged(lanes.iter().map(|l| &l.timeline))
        .bandwidth(size)
        .ok_or_else(|| fail("no operations"))?;
    Ok(BwRun {
        bw,
        post_ns_avg: f64::NAN,
        scope_exit_us: f64::NAN,
    })
}

/// A turn over every lane opened so far.
type Lanes<'a> = dyn FnMut() -> Result<Turn> + 'a;
/// What the innermost level does with the turn over all lanes.
type Innermost<'a> = dyn FnMut(&mut Lanes<'_>) -> Result<()> + 'a;

/// One level of the recursion: opens the first lane's scope, sets the lane
/// up (request arrays, receive ring, first receives), and recurses with a
/// turn that steps `outer` (the lanes opened so far) and this lane. With
/// no lane left, hands the turn of all of them to `last` ([`drive`]).
fn nest(
    sides: &mut [Side],
    plans: &[Plan],
    shape: &Shape,
    times: &mut [LaneTimes],
    outer: &mut dyn FnMut() -> Result<Turn>,
    last: &mut Innermost<'_>,
) -> Result<()> {
    let (Some((side, sides)), Some((&plan, plans)), Some((tl, times))) = (
        sides.split_first_mut(),
        plans.split_first(),
        times.split_first_mut(),
    ) else {
        return last(outer);
    };
    let Shape {
        size,
        iters,
        depth,
        rx_depth,
        stride,
        check_immediate,
        ..
    } = *shape;
    let chunks = match plan.post {
        Post::Read(_) => read_chunks(side.local.len(), size, depth),
        _ => 1,
    };
    let slots = side.slots.max(1);
    let (mr, buf) = side.local.split_mut();
    let buf = &mut buf[..size * chunks];
    let (rx_mr, rx) = side.rx.split_mut();
    side.channel
        .scope(|s| -> Result<()> {
            // A failure anywhere flushes this lane's queue pair at once.
            s.cancel_on_error();
            // The requests of every batch, built once: a write or send
            // batch is one request repeated, a read batch one request per
            // chunk.
            let batch = batch_size(depth);
            let (gather, mut scatter) = match plan.post {
                Post::Read(_) => (
                    None,
                    buf.chunks_mut(size)
                        .map(|c| [mr.scatter_element(c)])
                        .collect::<Vec<_>>(),
                ),
                _ => (Some([mr.gather_element(buf)]), Vec::new()),
            };
            let writes = match (plan.post, &gather) {
                (Post::Write(r), Some(g)) => vec![WriteWorkRequest::new(g, r); batch],
                _ => Vec::new(),
            };
            // Each message's index goes in its immediate, set per post.
            let sends = match (plan.post, &gather) {
                (Post::Send, Some(g)) => vec![SendWorkRequest::new(g).with_immediate(0); batch],
                _ => Vec::new(),
            };
            let mut reads: Vec<ReadWorkRequest<'_, '_>> = match plan.post {
                Post::Read(r) => scatter
                    .iter_mut()
                    .map(|e| ReadWorkRequest::new(e, r))
                    .collect(),
                _ => Vec::new(),
            };
            let read_batch = reads.len().max(1);
            // Checked and built once; each post gives the batch its id.
            let mut prepared = match plan.post {
                Post::Write(_) => Some(s.prepare_writes(&writes)?),
                Post::Send => Some(s.prepare_sends(&sends)?),
                Post::Read(_) => Some(s.prepare_reads(&mut reads)?),
                Post::Atomic { .. } | Post::Nothing => None,
            };
            let (to_post, lane_batch) = match plan.post {
                Post::Nothing => (0, 1),
                Post::Read(_) => (iters, read_batch),
                // One atomic per post: its request names its own result
                // word and compare value.
                Post::Atomic { .. } => (iters, 1),
                _ => (iters, batch),
            };
            let mut inflight: VecDeque<(ScopedPendingWork<'_>, usize)> =
                VecDeque::with_capacity(depth.div_ceil(lane_batch) + 1);
            let (mut next, mut outstanding) = (0usize, 0usize);

            // The receive ring: more receives than slots may be posted (a
            // slot is reused while an earlier receive into it is posted;
            // Rust reads no slot before the scope has ended).
            let to_receive = if plan.receive { iters } else { 0 };
            let mut lists: Vec<[ScatterElement<'_>; 1]> = if plan.receive {
                rx.chunks_mut(stride)
                    .take(slots)
                    .map(|c| [rx_mr.scatter_element(&mut c[..size])])
                    .collect()
            } else {
                Vec::new()
            };
            let mut recvs: VecDeque<ScopedPendingWork<'_>> =
                VecDeque::with_capacity(rx_depth.min(to_receive));
            let mut rx_posted = 0usize;
            while rx_posted < rx_depth.min(to_receive) {
                let k = rx_posted % lists.len();
                recvs.push_back(s.post_receive(ReceiveWorkRequest::new(&mut lists[k]))?);
                rx_posted += 1;
            }

            let mut step = || -> Result<Turn> {
                let mut events = 0;
                while next < to_post
                    && outstanding + lane_batch.min(to_post - next) <= depth.max(lane_batch)
                {
                    let n = lane_batch.min(to_post - next);
                    let t0 = Stamp::now();
                    let handle = match plan.post {
                        Post::Write(_) | Post::Read(_) | Post::Send => {
                            let batch = prepared.as_mut().ok_or_else(|| fail("no message"))?;
                            batch.truncate(n);
                            if let Post::Send = plan.post {
                                for k in 0..n {
                                    batch.set_immediate(k, (next + k) as u32)?;
                                }
                            }
                            s.post_prepared(batch)?
                        }
                        Post::Atomic {
                            kind,
                            remote,
                            results,
                        } => {
                            // Word `next % depth`: at most `depth` atomics are
                            // in flight, so its previous one has completed and
                            // its old value was read.
                            let slot = next % depth;
                            let mut word =
                                results.scatter(slot * ATOMIC_SIZE..(slot + 1) * ATOMIC_SIZE)?;
                            let mut wr = [crate::atomic::request(kind, next, remote, &mut word)];
                            s.post_batch(&mut wr)?
                        }
                        Post::Nothing => return Err(fail("a passive lane posted")),
                    };
                    inflight.push_back((handle, n));
                    tl.timeline.posted(t0, n);
                    next += n;
                    outstanding += n;
                }
                while let Some((oldest, n)) = inflight.pop_front() {
                    let done = match oldest.poll() {
                        Ok(outcome) => outcome?,
                        Err(pending) => {
                            inflight.push_front((pending, n));
                            break;
                        }
                    };
                    let first = tl.timeline.completed();
                    tl.timeline.completed_now(n);
                    outstanding -= n;
                    events += 1;
                    if let Post::Atomic { results, .. } = plan.post {
                        let words = results.words();
                        tl.olds.extend(
                            (first..first + n).map(|k| words[k % depth].load(Ordering::Acquire)),
                        );
                        continue;
                    }
                    if done.bytes() != size * n {
                        return Err(fail(format!(
                            "operations {}..{} completed with {} bytes, expected {}",
                            tl.timeline.completed() - n,
                            tl.timeline.completed(),
                            done.bytes(),
                            size * n
                        )));
                    }
                }
                while let Some(oldest) = recvs.pop_front() {
                    let got = match oldest.poll() {
                        Ok(outcome) => outcome?,
                        Err(pending) => {
                            recvs.push_front(pending);
                            break;
                        }
                    };
                    let i = tl.received;
                    if check_immediate {
                        check_message(i, size, got.bytes(), got.immediate())?;
                    } else if got.bytes() != size {
                        return Err(fail(format!(
                            "message {i} has {} bytes, expected {size}",
                            got.bytes()
                        )));
                    }
                    tl.received += 1;
                    events += 1;
                    if rx_posted < to_receive {
                        let k = rx_posted % lists.len();
                        recvs.push_back(s.post_receive(ReceiveWorkRequest::new(&mut lists[k]))?);
                        rx_posted += 1;
                    }
                }
                Ok(Turn {
                    done: tl.timeline.completed() >= to_post && tl.received >= to_receive,
                    events,
                })
            };
            let mut turn = || -> Result<Turn> {
                let a = outer()?;
                let b = step()?;
                Ok(Turn {
                    done: a.done && b.done,
                    events: a.events + b.events,
                })
            };
            nest(sides, plans, shape, times, &mut turn, last)
        })
        .map_err(rdma_safe::Error::from)
}

/// The innermost level: every lane is open and has posted its first
/// receives; says `ready`, then turns until every lane is done, resting
/// once no lane has completed anything for [`watch::QUIET`].
fn drive(
    timeout: Duration,
    lanes: &mut dyn FnMut() -> Result<Turn>,
    ready: &mut dyn FnMut() -> Result<()>,
    watch: &mut Watch<'_>,
) -> Result<()> {
    ready()?;
    let mut last = Stamp::now();
    let (mut turns, mut idle) = (0u32, 0u32);
    // Quiet for `watch::QUIET` at the last look: every idle turn rests.
    let mut resting = false;
    loop {
        let turn = lanes()?;
        if turn.done {
            return Ok(());
        }
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(1024) && watch.stop.load(Ordering::Acquire) {
            return Err(fail(STOPPED));
        }
        if turn.events > 0 {
            (idle, resting) = (0, false);
            last = Stamp::now();
            continue;
        }
        idle = idle.wrapping_add(1);
        // While spinning the clock is read now and then only: an idle turn
        // is a few polls.
        if !resting && !idle.is_multiple_of(64) {
            continue;
        }
        let quiet = last.elapsed();
        if quiet > timeout {
            return Err(fail(format!(
                "no completion on any of the queue pairs within {timeout:?} \
                 (peer silent or stopped?)"
            )));
        }
        if quiet >= watch::QUIET {
            resting = true;
            if watch.stop.load(Ordering::Acquire) {
                return Err(fail(STOPPED));
            }
            (watch.rest)()?;
        }
    }
}

/// The error of a thread's lanes stopped because another's failed.
pub(crate) const STOPPED: &str = "stopped: the queue pairs of another thread failed";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_that_completed_nothing_have_no_bandwidth() {
        // How lanes merge into one timeline is the library's
        // (`Timeline::merged`, tested there); a run with nothing
        // completed is an error, not a division by zero.
        let idle = LaneTimes {
            timeline: Timeline::with_capacity(Stamp::now(), 0),
            received: 0,
            olds: Vec::new(),
        };
        assert!(bandwidth(64, &[idle]).is_err());
    }
}
