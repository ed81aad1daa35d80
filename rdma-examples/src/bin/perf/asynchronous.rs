//! `perf --async`: the client's bandwidth and latency loops on the owned,
//! async API ([`rdma_safe::SharedChannel`]'s futures over pool buffers) on
//! a tokio current-thread runtime. The server is the synchronous one: the
//! wire traffic is the same, so it serves and checks either client.
//!
//! Bandwidth keeps `-t` futures in flight (each posted by its first poll,
//! the oldest awaited when full); latency awaits one operation at a time.
//! Buffers come from a [`BufferPool`] made per size before the clock
//! starts: a write or send source is one frozen [`PoolBytes`] cloned per
//! operation (a reference count), read and receive targets are
//! [`PoolBuf`]s that come back with their completion and are reused.

use crate::bandwidth::{ring_slots, BwRun};
use crate::latency::wait_for_byte;
use crate::protocol::{Params, Test};
use crate::{check_message, mark, seed, Side, BY_CLIENT, BY_SERVER};
use rdma_examples::clock::{self, Stamp};
use rdma_examples::shared::SharedBuffer;
use rdma_examples::stats::Bandwidth;
use rdma_examples::{pattern, Result};
use rdma_safe::{
    BufferPool, Op, OwnedBuffer, PoolBuf, PoolBytes, RemoteMemoryRegion, SharedChannel,
    TransportResult, WorkSuccess,
};
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Receives send_lat keeps posted ahead of the answer it waits for.
const LAT_RECEIVES_AHEAD: usize = 8;

/// Runs `f` on a fresh current-thread runtime with the channel's shared
/// handle (on the completion channel's reactor with `-e`, spinning
/// otherwise).
fn on_runtime<T>(
    side: &Side,
    events: bool,
    f: impl AsyncFnOnce(&SharedChannel) -> Result<T>,
) -> Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the tokio runtime: {e}"))?;
    rt.block_on(async {
        let shared = side.channel.shared();
        let shared = if events { shared.with_tokio()? } else { shared };
        f(&shared).await
    })
}

/// A future posted (polled once) or already resolved.
enum InFlight<'a, B: OwnedBuffer> {
    Posted(Op<'a, B>),
    Done((TransportResult<WorkSuccess>, B)),
}

impl<'a, B: OwnedBuffer> InFlight<'a, B> {
    /// Polls `op` once, which posts its request.
    async fn post(mut op: Op<'a, B>) -> Self {
        poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut op).poll(cx) {
                Poll::Ready(done) => Some(done),
                Poll::Pending => None,
            })
        })
        .await
        .map_or(InFlight::Posted(op), InFlight::Done)
    }

    async fn finish(self) -> (TransportResult<WorkSuccess>, B) {
        match self {
            InFlight::Posted(op) => op.await,
            InFlight::Done(done) => done,
        }
    }
}

/// A pool of `count` buffers of `size` bytes for one size's run.
fn pool(side: &Side, size: usize, count: usize, what: &str) -> Result<BufferPool> {
    BufferPool::new(side.channel.pd(), size.max(1), count.max(1))
        .map_err(|e| format!("{what} (-s, -t): {e}").into())
}

/// A frozen pool buffer holding the client's pattern for `size`.
fn payload(pool: &BufferPool, size: usize) -> Result<PoolBytes> {
    let mut buf = pool.try_alloc()?;
    buf.set_len(size);
    pattern::fill(&mut buf, seed(size, BY_CLIENT), 0);
    Ok(buf.freeze())
}

/// Bandwidth, client side, async: up to `tx_depth` futures in flight.
pub(crate) fn run_bw(
    p: &Params,
    verbose: bool,
    size: usize,
    side: &mut Side,
    remote: Option<RemoteMemoryRegion>,
) -> Result<BwRun> {
    let (iters, depth, test) = (p.iters, p.tx_depth.max(1), p.test);
    // read_bw: one buffer per read in flight, within the sync path's ring.
    let targets = match test {
        Test::ReadBw => depth.min(ring_slots(size)).min(iters),
        _ => 1,
    };
    let pool = pool(side, size, targets, "the async buffers")?;
    let _ = clock::ticks_per_sec(); // calibrate before timing
    let mut tl = Timeline::with_capacity(iters);
    let end = on_runtime(side, p.events, async |ch| -> Result<Instant> {
        match test {
            Test::WriteBw | Test::SendBw => {
                let data = payload(&pool, size)?;
                let remote = remote.filter(|_| test == Test::WriteBw);
                if test == Test::WriteBw && remote.is_none() {
                    return Err("no remote region".into());
                }
                pump(&mut tl, verbose, iters, depth, size, |i| match remote {
                    Some(r) => ch.write_async(data.clone(), r),
                    None => ch.send_with_immediate_async(data.clone(), i as u32),
                })
                .await?;
            }
            Test::ReadBw => {
                let remote = remote.ok_or("no remote region")?;
                let mut free: Vec<PoolBuf> = (0..targets)
                    .map(|_| {
                        pool.try_alloc().map(|mut b| {
                            b.set_len(size);
                            b.fill(0);
                            b
                        })
                    })
                    .collect::<std::result::Result<_, _>>()?;
                let used = pump_reads(&mut tl, verbose, iters, depth, size, &mut free, |b| {
                    ch.read_async(b, remote)
                })
                .await?;
                for (c, b) in used.iter().enumerate() {
                    pattern::check(b, seed(size, BY_SERVER), 0)
                        .map_err(|m| format!("data read from the server (buffer {c}): {m}"))?;
                }
            }
            _ => return Err(format!("{} is not a bandwidth test", test.name()).into()),
        }
        Ok(Instant::now())
    })?;
    let bw = Bandwidth::from_times(size, &tl.posted, &tl.completed).ok_or("no operations")?;
    Ok(BwRun {
        bw,
        post_ns_avg: if verbose {
            tl.post_time.as_secs_f64() * 1e9 / iters as f64
        } else {
            f64::NAN
        },
        // The runtime's and the shared handle's teardown.
        scope_exit_us: end.elapsed().as_secs_f64() * 1e6,
    })
}

/// Post and completion times of a run (seconds since its start).
struct Timeline {
    origin: Stamp,
    posted: Vec<f64>,
    completed: Vec<f64>,
    post_time: Duration,
}

impl Timeline {
    fn with_capacity(n: usize) -> Self {
        Timeline {
            origin: Stamp::now(),
            posted: Vec::with_capacity(n),
            completed: Vec::with_capacity(n),
            post_time: Duration::ZERO,
        }
    }

    fn post_stamp(&mut self, t0: Stamp, verbose: bool) {
        if verbose {
            self.post_time += t0.elapsed();
        }
        self.posted.push((t0 - self.origin).as_secs_f64());
    }

    /// Records a completion and checks its length.
    fn complete(&mut self, outcome: TransportResult<WorkSuccess>, size: usize) -> Result<()> {
        let done = outcome?;
        self.completed
            .push((Stamp::now() - self.origin).as_secs_f64());
        if done.bytes() != size {
            return Err(format!(
                "operation {} completed with {} bytes, expected {size}",
                self.completed.len() - 1,
                done.bytes()
            )
            .into());
        }
        Ok(())
    }
}

/// Writes or sends: `op(i)` is operation `i`'s future; at most `depth` are
/// posted and not yet awaited.
async fn pump<'a>(
    tl: &mut Timeline,
    verbose: bool,
    iters: usize,
    depth: usize,
    size: usize,
    mut op: impl FnMut(usize) -> Op<'a, PoolBytes>,
) -> Result<()> {
    let mut inflight = VecDeque::with_capacity(depth);
    let mut next = 0;
    while tl.completed.len() < iters {
        while next < iters && inflight.len() < depth {
            let t0 = Stamp::now();
            inflight.push_back(InFlight::post(op(next)).await);
            tl.post_stamp(t0, verbose);
            next += 1;
        }
        let oldest = inflight.pop_front().expect("an operation is in flight");
        let (outcome, _data) = oldest.finish().await;
        tl.complete(outcome, size)?;
    }
    Ok(())
}

/// Reads into the buffers of `free`, each reused once its read completed;
/// returns the buffers the last reads landed in.
async fn pump_reads<'a>(
    tl: &mut Timeline,
    verbose: bool,
    iters: usize,
    depth: usize,
    size: usize,
    free: &mut Vec<PoolBuf>,
    mut op: impl FnMut(PoolBuf) -> Op<'a, PoolBuf>,
) -> Result<Vec<PoolBuf>> {
    let mut inflight = VecDeque::with_capacity(depth);
    let mut next = 0;
    while tl.completed.len() < iters {
        while next < iters && inflight.len() < depth {
            let Some(buf) = free.pop() else { break };
            let t0 = Stamp::now();
            inflight.push_back(InFlight::post(op(buf)).await);
            tl.post_stamp(t0, verbose);
            next += 1;
        }
        let oldest = inflight.pop_front().expect("a read is in flight");
        let (outcome, buf) = oldest.finish().await;
        tl.complete(outcome, size)?;
        free.push(buf);
    }
    Ok(std::mem::take(free))
}

/// Latency, client side, async: one operation at a time; samples in usec
/// (half a round trip for write and send, a whole read).
pub(crate) fn run_lat(
    p: &Params,
    size: usize,
    side: &mut Side,
    remote: Option<RemoteMemoryRegion>,
    exposed: &mut SharedBuffer,
) -> Result<Vec<f64>> {
    let (iters, test) = (p.iters, p.test);
    let timeout = side.channel.timeout();
    let count = match test {
        Test::SendLat => LAT_RECEIVES_AHEAD + 1,
        _ => 2,
    };
    let pool = pool(side, size, count, "the async buffers")?;
    let _ = clock::ticks_per_sec();
    let mut samples: Vec<u64> = Vec::with_capacity(iters);
    let per_sample = if test == Test::ReadLat { 1.0 } else { 2.0 };
    on_runtime(side, p.events, async |ch| -> Result<()> {
        match test {
            Test::ReadLat => {
                let remote = remote.ok_or("no remote region")?;
                let mut buf = pool.try_alloc()?;
                buf.set_len(size);
                buf.fill(0);
                for _ in 0..iters {
                    let t0 = Stamp::now();
                    let (outcome, back) = ch.read_async(buf, remote).await;
                    samples.push(Stamp::now().ticks_since(t0));
                    outcome?;
                    buf = back;
                }
                pattern::check(&buf, seed(size, BY_SERVER), 0)
                    .map_err(|m| format!("data read from the server: {m}"))?;
            }
            Test::WriteLat => {
                let remote = remote.ok_or("no remote region")?;
                let mut source = vec![0u8; size];
                pattern::fill(&mut source, seed(size, BY_CLIENT), 0);
                // SAFETY: the server writes our buffer only in answer to our
                // writes of this size, none of which has been posted yet.
                unsafe { exposed.slice_mut(0..size) }.fill(0);
                for i in 0..iters {
                    // The iteration's message (pattern, then its mark) is
                    // prepared before the clock starts: a written slice is
                    // immutable, so each iteration takes a pool buffer.
                    source[size - 1] = mark(i);
                    let mut buf = pool.try_alloc()?;
                    buf.fill_from(&source);
                    let data = buf.freeze();
                    let t0 = Stamp::now();
                    let (outcome, _) = ch.write_async(data, remote).await;
                    outcome?;
                    wait_for_byte(exposed, size - 1, mark(i), timeout)?;
                    samples.push(Stamp::now().ticks_since(t0));
                }
            }
            Test::SendLat => send_lat(ch, &pool, size, iters, &mut samples).await?,
            _ => return Err(format!("{} is not a latency test", test.name()).into()),
        }
        Ok(())
    })?;
    Ok(samples
        .into_iter()
        .map(|t| clock::micros(t) / per_sample)
        .collect())
}

/// send_lat's client loop: receives posted ahead, each iteration posts its
/// send, awaits the answer, then claims the send and re-posts the receive.
async fn send_lat(
    ch: &SharedChannel,
    pool: &BufferPool,
    size: usize,
    iters: usize,
    samples: &mut Vec<u64>,
) -> Result<()> {
    let data = payload(pool, size)?;
    let mut recvs = VecDeque::with_capacity(LAT_RECEIVES_AHEAD);
    let mut posted = 0;
    while posted < LAT_RECEIVES_AHEAD.min(iters) {
        recvs.push_back(InFlight::post(ch.receive_async(pool.try_alloc()?)).await);
        posted += 1;
    }
    for i in 0..iters {
        let t0 = Stamp::now();
        let sent = InFlight::post(ch.send_with_immediate_async(data.clone(), i as u32)).await;
        let answer = recvs.pop_front().ok_or("no receive posted")?;
        let (outcome, buf) = answer.finish().await;
        samples.push(Stamp::now().ticks_since(t0));
        let got = outcome?;
        check_message(i, size, got.bytes(), got.immediate())?;
        pattern::check(&buf[..size], seed(size, BY_SERVER), 0)
            .map_err(|m| format!("reply {i} received from the server: {m}"))?;
        sent.finish().await.0?;
        if posted < iters {
            recvs.push_back(InFlight::post(ch.receive_async(buf)).await);
            posted += 1;
        }
    }
    Ok(())
}
