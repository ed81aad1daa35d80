//! `perf --async`: the client's bandwidth and latency loops on the owned,
//! async API ([`rdma_safe::SharedChannel`]'s futures over pool buffers) on
//! a tokio current-thread runtime. The server is the synchronous one: the
//! wire traffic is the same, so it serves and checks either client.
//!
//! Bandwidth keeps `-t` operations in flight (each posted when its future
//! is made, by [`SharedChannel::start`], the oldest awaited when full);
//! latency awaits one operation at a time.
//! Buffers come from a [`BufferPool`] made per size before the clock
//! starts: a write or send source is one frozen [`PoolBytes`] cloned per
//! operation (a reference count), read and receive targets are
//! [`PoolBuf`]s that come back with their completion and are reused.

use crate::bandwidth::{batch_size, ring_slots, BwRun};
use crate::latency::wait_for_byte;
use crate::measured::measured_loop;
use crate::protocol::{Params, Test};
use crate::watch::Beat;
use crate::{check_message, mark, seed, Side, BY_CLIENT, BY_SERVER};
use rdma_examples::clock::{self, Laps, Stamp, Timeline};
use rdma_examples::fail;
use rdma_examples::shared;
use rdma_examples::{pattern, Result};
use rdma_safe::owned::Request;
use rdma_safe::{
    owned::OwnedRequest, pool::PoolBuf, pool::PoolBytes, BufferPool, Channel, RemoteAccessBuffer,
    RemoteMemoryRegion, SharedChannel,
};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Receives send_lat keeps posted ahead of the answer it waits for.
const LAT_RECEIVES_AHEAD: usize = 8;

/// How long a future spins on the completion queue for its own completion
/// before going back to the runtime, without `-e`
/// ([`SharedChannel::with_spin`]): perftest busy-polls its CQ, and a round
/// through the runtime's scheduler between polls costs more than a poll
/// (about 1.6 us of a 64 B send_lat_async round trip under TCG without
/// it). One task per run, so spinning keeps nothing else waiting.
const BUSY_SPIN: Duration = Duration::from_millis(1);

/// Runs `f` on a fresh current-thread runtime with the channel's shared
/// handle (on the completion channel's reactor with `-e`, spinning
/// otherwise).
fn on_runtime<T>(
    channel: &Channel,
    events: bool,
    f: impl AsyncFnOnce(&SharedChannel) -> Result<T>,
) -> Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(format!("starting the tokio runtime: {e}")))?;
    // The runtime runs the loop on this thread: the marker holds it.
    measured_loop(|| {
        rt.block_on(async {
            let shared = channel.shared();
            let shared = if events {
                shared.with_tokio()?
            } else {
                shared.with_spin(BUSY_SPIN)
            };
            f(&shared).await
        })
    })
}

/// A pool of `count` buffers of `size` bytes for one size's run.
fn pool(side: &Side, size: usize, count: usize, what: &str) -> Result<BufferPool> {
    BufferPool::new(side.channel.pd(), size.max(1), count.max(1))
        .map_err(|e| fail(format!("{what} (-s, -t): {e}")))
}

/// A frozen pool buffer holding the client's pattern for `size`.
fn payload(pool: &BufferPool, size: usize) -> Result<PoolBytes> {
    let mut buf = pool.try_alloc()?;
    buf.set_len(size);
    pattern::fill(&mut buf, seed(size, BY_CLIENT), 0);
    Ok(buf.freeze())
}

/// Bandwidth, client side, async: up to `tx_depth` operations in flight,
/// posted in batches as the synchronous loop does ([`batch_size`]: one
/// doorbell and one completion per batch), each batch one future.
pub(crate) fn run_bw(
    p: &Params,
    verbose: bool,
    size: usize,
    side: &mut Side,
    remote: Option<RemoteMemoryRegion>,
) -> Result<BwRun> {
    let (iters, depth, test) = (p.iters, p.tx_depth.max(1), p.test);
    let batch = batch_size(depth);
    // read_bw: one buffer per read in flight, within the sync path's ring.
    let targets = match test {
        Test::ReadBw => depth.min(ring_slots(size)).min(iters),
        _ => 1,
    };
    let pool = pool(side, size, targets, "the async buffers")?;
    let _ = clock::ticks_per_sec(); // calibrate before timing
    let mut tl = Timeline::with_capacity(Stamp::now(), iters);
    let mut post_time = Duration::ZERO;
    let beat = &mut side.beat;
    let end = on_runtime(&side.channel, p.events, async |ch| -> Result<Instant> {
        let mut pump = Pump {
            ch,
            tl: &mut tl,
            beat,
            post_time: verbose.then_some(&mut post_time),
            iters,
            depth,
            size,
            batch,
        };
        match test {
            Test::WriteBw | Test::SendBw => {
                let data = payload(&pool, size)?;
                let remote = remote.filter(|_| test == Test::WriteBw);
                if test == Test::WriteBw && remote.is_none() {
                    return Err(fail("no remote region"));
                }
                pump.run(&mut Vec::new(), |i, _| match remote {
                    Some(r) => Some(OwnedRequest::write(data.clone(), r)),
                    None => Some(OwnedRequest::send_with_immediate(data.clone(), i as u32)),
                })
                .await?;
            }
            Test::ReadBw => {
                let remote = remote.ok_or_else(|| fail("no remote region"))?;
                let mut free: Vec<PoolBuf> = (0..targets)
                    .map(|_| {
                        pool.try_alloc().map(|mut b| {
                            b.set_len(size);
                            b.fill(0);
                            b
                        })
                    })
                    .collect::<std::result::Result<_, _>>()?;
                pump.run(&mut free, |_, free| {
                    free.pop().map(|b| OwnedRequest::read(b, remote))
                })
                .await?;
                for (c, b) in free.iter().enumerate() {
                    pattern::check(b, seed(size, BY_SERVER), 0).map_err(|m| {
                        fail(format!("data read from the server (buffer {c}): {m}"))
                    })?;
                }
            }
            _ => return Err(fail(format!("{} is not a bandwidth test", test.name()))),
        }
        Ok(Instant::now())
    })?;
    let bw = tl.bandwidth(size).ok_or_else(|| fail("no operations"))?;
    Ok(BwRun {
        bw,
        post_ns_avg: if verbose {
            post_time.as_secs_f64() * 1e9 / iters as f64
        } else {
            f64::NAN
        },
        // The runtime's and the shared handle's teardown.
        scope_exit_us: end.elapsed().as_secs_f64() * 1e6,
    })
}

/// The bandwidth loop's settings and record.
struct Pump<'a, 't> {
    ch: &'a SharedChannel,
    tl: &'t mut Timeline,
    /// Ticks once per turn.
    beat: &'t mut Beat,
    /// Where the time spent posting adds up (`-v`).
    post_time: Option<&'t mut Duration>,
    iters: usize,
    depth: usize,
    size: usize,
    batch: usize,
}

impl Pump<'_, '_> {
    /// Keeps up to `depth` operations in flight in batches of up to
    /// `batch`, `req(i, free)` making operation `i` (`None`: no buffer free
    /// for it yet, post what the batch has). A completed batch gives its
    /// read targets back to `free`, and its vector is reused: no allocation
    /// per batch once the loop runs. Checks every batch's byte count.
    async fn run(
        &mut self,
        free: &mut Vec<PoolBuf>,
        mut req: impl FnMut(usize, &mut Vec<PoolBuf>) -> Option<OwnedRequest>,
    ) -> Result<()> {
        let (iters, depth, batch) = (self.iters, self.depth, self.batch);
        let mut inflight = VecDeque::with_capacity(depth.div_ceil(batch) + 1);
        let mut spare: Vec<Vec<OwnedRequest>> = Vec::new();
        let (mut next, mut outstanding) = (0, 0);
        while self.tl.completed() < iters {
            self.beat.tick();
            while next < iters && outstanding + batch.min(iters - next) <= depth.max(batch) {
                let mut reqs = spare.pop().unwrap_or_else(|| Vec::with_capacity(batch));
                while reqs.len() < batch.min(iters - next) {
                    match req(next + reqs.len(), free) {
                        Some(r) => reqs.push(r),
                        None => break,
                    }
                }
                let n = reqs.len();
                if n == 0 {
                    spare.push(reqs);
                    break;
                }
                let t0 = Stamp::now();
                inflight.push_back((self.ch.start(Request::batch(reqs)), n));
                if let Some(total) = self.post_time.as_deref_mut() {
                    *total += t0.elapsed();
                }
                self.tl.posted(t0, n);
                next += n;
                outstanding += n;
            }
            let (oldest, n) = inflight
                .pop_front()
                .ok_or_else(|| fail("no operation in flight"))?;
            let (outcome, mut reqs) = oldest.await;
            let done = outcome?;
            self.tl.completed_now(n);
            outstanding -= n;
            if done.bytes() != self.size * n {
                return Err(fail(format!(
                    "operations {}..{} completed with {} bytes, expected {}",
                    self.tl.completed() - n,
                    self.tl.completed(),
                    done.bytes(),
                    self.size * n
                )));
            }
            free.extend(reqs.drain(..).filter_map(OwnedRequest::into_buf));
            spare.push(reqs);
        }
        Ok(())
    }
}

/// Latency, client side, async: one operation at a time; samples in usec
/// (half a round trip for write and send, a whole read), each from one
/// iteration's start to the next's as perftest's ([`Laps`]).
pub(crate) fn run_lat(
    p: &Params,
    size: usize,
    side: &mut Side,
    remote: Option<RemoteMemoryRegion>,
    exposed: &RemoteAccessBuffer,
) -> Result<Vec<f64>> {
    let (iters, test) = (p.iters, p.test);
    let timeout = side.channel.timeout();
    // send_lat: its receives and the payload; read and write reuse one
    // buffer (a read target comes back with its completion, a written
    // message through `PoolBytes::try_into_mut`).
    let count = match test {
        Test::SendLat => LAT_RECEIVES_AHEAD + 1,
        _ => 1,
    };
    let pool = pool(side, size, count, "the async buffers")?;
    let _ = clock::ticks_per_sec();
    let mut laps = Laps::with_capacity(iters);
    let per_sample = if test == Test::ReadLat { 1.0 } else { 2.0 };
    let beat = &mut side.beat;
    on_runtime(&side.channel, p.events, async |ch| -> Result<()> {
        match test {
            Test::ReadLat => {
                let remote = remote.ok_or_else(|| fail("no remote region"))?;
                let mut buf = pool.try_alloc()?;
                buf.set_len(size);
                buf.fill(0);
                for _ in 0..iters {
                    laps.start();
                    beat.tick();
                    let (outcome, back) = ch.submit(Request::read(buf, remote)).await;
                    outcome?;
                    buf = back;
                }
                laps.stop();
                pattern::check(&buf, seed(size, BY_SERVER), 0)
                    .map_err(|m| fail(format!("data read from the server: {m}")))?;
            }
            Test::WriteLat => {
                let remote = remote.ok_or_else(|| fail("no remote region"))?;
                let run = LatRun {
                    iters,
                    laps: &mut laps,
                    beat,
                };
                write_lat(ch, &pool, remote, exposed, size, timeout, run).await?;
            }
            Test::SendLat => {
                let run = LatRun {
                    iters,
                    laps: &mut laps,
                    beat,
                };
                send_lat(ch, &pool, size, run).await?
            }
            _ => return Err(fail(format!("{} is not a latency test", test.name()))),
        }
        Ok(())
    })?;
    Ok(laps
        .ticks()
        .into_iter()
        .map(|t| clock::micros(t) / per_sample)
        .collect())
}

/// A latency loop's length and record: its samples and its heartbeat.
struct LatRun<'a> {
    iters: usize,
    laps: &'a mut Laps,
    beat: &'a mut Beat,
}

/// write_lat's client loop: each iteration writes its message (pattern,
/// then its mark), then spins for the server's answer. A written slice is
/// immutable while it may be in flight; once the write has completed its
/// slice is the buffer's only handle again, so the next message is that
/// buffer with its mark changed ([`PoolBytes::try_into_mut`]), made while
/// the answer is on its way.
async fn write_lat(
    ch: &SharedChannel,
    pool: &BufferPool,
    remote: RemoteMemoryRegion,
    exposed: &RemoteAccessBuffer,
    size: usize,
    timeout: Duration,
    run: LatRun<'_>,
) -> Result<()> {
    let LatRun { iters, laps, beat } = run;
    let mut buf = pool.try_alloc()?;
    buf.set_len(size);
    pattern::fill(&mut buf, seed(size, BY_CLIENT), 0);
    buf[size - 1] = mark(0);
    // The server writes our buffer only in answer to our writes of this
    // size, none of which has been posted yet.
    shared::zero(exposed, 0..size)?;
    let mut next = buf.freeze();
    for i in 0..iters {
        laps.start();
        beat.tick();
        let (outcome, sent) = ch.submit(Request::write(next, remote)).await;
        outcome?;
        let mut buf = sent
            .try_into_mut()
            .map_err(|_| fail("the written message is still shared after its completion"))?;
        buf[size - 1] = mark(i + 1);
        next = buf.freeze();
        wait_for_byte(exposed, size - 1, mark(i), timeout)?;
    }
    laps.stop();
    Ok(())
}

/// send_lat's client loop: receives posted ahead; each iteration awaits its
/// send where it posts it (on one host rxe's post returns with the peer's
/// acknowledgement there already; across a link the acknowledgement comes
/// before the answer can), settles what the iteration before owes — checks
/// its answer and keeps that buffer to post again (half the ring at a time,
/// with one verb call: [`SharedChannel::start_receives`]) — and then awaits
/// its own answer. The answer comes a while after the send's system call
/// returns, so that bookkeeping delays nothing (the blocking loop's
/// `LatRing` also settles its debts after its send).
///
/// A send future kept to claim in the next iteration would be moved,
/// polled and dropped once more per message; under emulation, where every
/// guest memory access is translated, that cost about 0.3 us of a 20 us
/// round trip (commit 6b9e9d4).
async fn send_lat(
    ch: &SharedChannel,
    pool: &BufferPool,
    size: usize,
    run: LatRun<'_>,
) -> Result<()> {
    let LatRun { iters, laps, beat } = run;
    let data = payload(pool, size)?;
    // Every reply is checked whole, against the pattern computed once.
    let reply = pattern::Expected::new(size, seed(size, BY_SERVER), 0);
    let check = |i: usize, buf: &PoolBuf| {
        reply
            .check(&buf[..size])
            .map_err(|m| fail(format!("reply {i} received from the server: {m}")))
    };
    let mut recvs = VecDeque::with_capacity(LAT_RECEIVES_AHEAD);
    let mut owed: Vec<PoolBuf> = Vec::with_capacity(LAT_RECEIVES_AHEAD);
    for _ in 0..LAT_RECEIVES_AHEAD.min(iters) {
        owed.push(pool.try_alloc()?);
    }
    let mut posted = owed.len();
    ch.start_receives(owed.drain(..), &mut recvs);
    // Each send's request is made in the idle time before the answer it
    // follows, so that between an answer and the next send there is only
    // the post. It sends the payload the last send gave back with its
    // completion: one handle on it for the run, not one per message.
    let make = |i: usize, data: PoolBytes| Request::send(data).with_immediate(i as u32);
    let mut next = Some(make(0, data));
    let mut answered: Option<(usize, PoolBuf)> = None;
    for i in 0..iters {
        laps.start();
        beat.tick();
        let send = next.take().ok_or_else(|| fail("no send made"))?;
        let (outcome, sent) = ch.submit(send).await;
        outcome?;
        if let Some((j, buf)) = answered.take() {
            check(j, &buf)?;
            // Answered buffers are posted again in bulk, with one verb
            // call, once half the ring is used (as ibv_rc_pingpong does).
            owed.push(buf);
            if recvs.len() <= LAT_RECEIVES_AHEAD / 2 {
                let n = owed.len().min(iters - posted);
                ch.start_receives(owed.drain(..n), &mut recvs);
                posted += n;
            }
        }
        if i + 1 < iters {
            next = Some(make(i + 1, sent));
        }
        let answer = recvs.pop_front().ok_or_else(|| fail("no receive posted"))?;
        let (outcome, buf) = answer.await;
        let got = outcome?;
        check_message(i, size, got.bytes(), got.immediate())?;
        answered = Some((i, buf));
    }
    laps.stop();
    if let Some((j, buf)) = answered {
        check(j, &buf)?;
    }
    Ok(())
}
