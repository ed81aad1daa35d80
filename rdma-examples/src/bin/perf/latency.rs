//! The latency tests' data path: one operation at a time, answered as soon
//! as the peer's message is seen — the client's loops ([`run_lat`]), the
//! servers' answers ([`serve_send_lat`], [`serve_write_lat`]), send_lat's
//! receive bookkeeping ([`LatRing`]) and write_lat's byte spin.

use crate::measured::measured_loop;
use crate::protocol::{Params, Test};
use crate::{check_message, mark, seed, Side, BY_CLIENT};
use rdma_examples::clock::{self, Laps, Stamp};
use rdma_examples::fail;
use rdma_examples::net::Link;
use rdma_examples::shared;
use rdma_examples::{pattern, Result};
use rdma_safe::{
    scope::ScopedPendingWork, PollingScope, PreparedBatch, ReadWorkRequest, ReceiveWorkRequest,
    RemoteAccessBuffer, RemoteMemoryRegion, ScatterElement, SendWorkRequest, WriteWorkRequest,
};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// send_lat, server side: answer every ping with a pong.
pub(crate) fn serve_send_lat(
    p: &Params,
    size: usize,
    side: &mut Side,
    link: &mut Link,
) -> Result<()> {
    let (rx_mr, rx) = side.rx.split_mut();
    let rx = &mut rx[..size];
    let (local, local_mr) = (&side.local[..size], side.local.region());
    measured_loop(|| {
        side.channel.scope(|s| -> Result<()> {
            let mut scatter = [rx_mr.scatter_element(rx)];
            let gather = [local_mr.gather_element(local)];
            let reply = [SendWorkRequest::new(&gather).with_immediate(0)];
            let mut reply = s.prepare_sends(&reply)?;
            let mut ring = LatRing::new(s, &mut scatter, p.iters)?;
            link.write_line(&format!("GO {size}"))?;
            for i in 0..p.iters {
                let got = ring.next_message(s, &mut scatter)?;
                check_message(i, size, got.bytes(), got.immediate())?;
                ring.send(s, &mut scatter, &mut reply, i as u32)?;
            }
            ring.finish()
        })
    })
    .map_err(rdma_safe::Error::from)
}

/// Receives a send_lat side keeps posted ahead of the message it waits for.
const LAT_RECEIVES_AHEAD: usize = 8;
/// Fewest receives posted when a send goes out (the answer needs one).
const LAT_RECEIVES_MIN: usize = 2;

/// One side of send_lat: its receives (all into the one slot: one message
/// is in flight at a time) and the bookkeeping it owes — the last send's
/// completion to claim, used receives to re-post.
///
/// On rxe the send's system call runs until the peer's answer is nearly
/// there, so whatever a side does between its send and looking for the
/// answer delays it. The bookkeeping is therefore done while the answer has
/// not arrived yet (idle time), and only what a send cannot go without (a
/// free send-queue slot, a receive for the answer) is settled before it.
struct LatRing<'scope> {
    recvs: VecDeque<ScopedPendingWork<'scope>>,
    sent: Option<ScopedPendingWork<'scope>>,
    posted: usize,
    owed: usize,
    iters: usize,
}

impl<'scope> LatRing<'scope> {
    fn new(
        s: &mut PollingScope<'scope, '_>,
        scatter: &mut [ScatterElement<'scope>; 1],
        iters: usize,
    ) -> Result<Self> {
        let mut ring = LatRing {
            recvs: VecDeque::with_capacity(LAT_RECEIVES_AHEAD),
            sent: None,
            posted: 0,
            owed: LAT_RECEIVES_AHEAD.min(iters),
            iters,
        };
        while ring.repost(s, scatter)? {}
        Ok(ring)
    }

    /// Re-posts one owed receive; false if none is owed.
    fn repost(
        &mut self,
        s: &mut PollingScope<'scope, '_>,
        scatter: &mut [ScatterElement<'scope>; 1],
    ) -> Result<bool> {
        if self.owed == 0 || self.posted == self.iters {
            return Ok(false);
        }
        self.recvs
            .push_back(s.post_receive(ReceiveWorkRequest::new(scatter))?);
        self.posted += 1;
        self.owed -= 1;
        Ok(true)
    }

    /// Claims the last send's completion, waiting for it; false if there
    /// is none.
    fn claim_send(&mut self) -> Result<bool> {
        match self.sent.take() {
            Some(sent) => sent.wait().map(|_| true),
            None => Ok(false),
        }
    }

    /// Claims the last send's completion if it is there; false if not (or
    /// there is none).
    fn try_claim_send(&mut self) -> Result<bool> {
        match self.sent.take().map(ScopedPendingWork::poll) {
            Some(Ok(outcome)) => outcome.map(|_| true),
            Some(Err(still)) => {
                self.sent = Some(still);
                Ok(false)
            }
            None => Ok(false),
        }
    }

    /// Waits for the next message, doing owed bookkeeping while it has not
    /// arrived.
    #[inline(always)]
    fn next_message(
        &mut self,
        s: &mut PollingScope<'scope, '_>,
        scatter: &mut [ScatterElement<'scope>; 1],
    ) -> Result<rdma_safe::WorkSuccess> {
        let mut pending = self
            .recvs
            .pop_front()
            .ok_or_else(|| fail("no receive posted"))?;
        self.owed += 1;
        loop {
            match pending.poll() {
                Ok(outcome) => return outcome,
                Err(still) => pending = still,
            }
            if !(self.try_claim_send()? || self.repost(s, scatter)?) {
                // Nothing left to do: a bounded blocking wait.
                return pending.wait();
            }
        }
    }

    /// Sends `message` (one prepared send: checked and built once, as
    /// perftest builds its request) with immediate `imm`, after claiming
    /// the previous send (one in flight) and making sure receives wait for
    /// the answer.
    #[inline(always)]
    fn send(
        &mut self,
        s: &mut PollingScope<'scope, '_>,
        scatter: &mut [ScatterElement<'scope>; 1],
        message: &mut PreparedBatch<'_, 'scope>,
        imm: u32,
    ) -> Result<()> {
        self.claim_send()?;
        while self.recvs.len() < LAT_RECEIVES_MIN && self.repost(s, scatter)? {}
        message.set_immediate(0, imm)?;
        self.sent = Some(s.post_prepared(message)?);
        Ok(())
    }

    /// Claims the last send.
    fn finish(mut self) -> Result<()> {
        self.claim_send().map(|_| ())
    }
}

/// write_lat, server side: wait for the client's write to land (its last
/// byte becomes the iteration's mark), then write back.
pub(crate) fn serve_write_lat(
    p: &Params,
    size: usize,
    side: &mut Side,
    exposed: &RemoteAccessBuffer,
    remote: RemoteMemoryRegion,
) -> Result<()> {
    let timeout = side.channel.timeout();
    measured_loop(|| {
        for i in 0..p.iters {
            wait_for_byte(exposed, size - 1, mark(i), timeout)?;
            side.local[size - 1] = mark(i);
            write_and_claim(side, size, remote)?;
        }
        Ok(())
    })
}

/// One write of `side.local[..size]` to `remote`, claiming its completion
/// before returning (a blocking write: no scope to set up and check per
/// iteration). perftest's latency loop has the same order — answer at once,
/// then poll the send completion while the peer is busy with the answer —
/// which keeps the completion off the critical path.
fn write_and_claim(side: &mut Side, size: usize, remote: RemoteMemoryRegion) -> Result<()> {
    let (local, local_mr) = (&side.local[..size], side.local.region());
    side.channel.write(WriteWorkRequest::new(
        &[local_mr.gather_element(local)],
        remote,
    ))?;
    Ok(())
}

/// Spins until byte `i` of `buf` (written by the peer) equals `want`.
pub(crate) fn wait_for_byte(
    buf: &RemoteAccessBuffer,
    i: usize,
    want: u8,
    timeout: Duration,
) -> Result<()> {
    // The timeout is checked with the TSC (`Stamp`), once the wait has spun
    // a while: `Instant::now` is a system call and an emulated HPET read on
    // a VM whose clock source is not the TSC, microseconds each. The check
    // compares raw ticks, the timeout converted once per wait.
    let mut start: Option<(Stamp, u64)> = None;
    let mut spins: u32 = 0;
    let (word, shift) = shared::byte_word(buf, i);
    while (word.load(Ordering::Acquire) >> shift) as u8 != want {
        spins = spins.wrapping_add(1);
        if spins & 1023 == 0 {
            let (t0, limit) = *start.get_or_insert_with(|| (Stamp::now(), timeout_ticks(timeout)));
            if Stamp::now().ticks_since(t0) > limit {
                return Err(fail(format!(
                    "the peer's RDMA write did not arrive within {timeout:?}"
                )));
            }
            if spins & 0xffff == 0 {
                // Both sides spin; on a machine with few CPUs (a VM running
                // rxe) other work on this CPU gets a turn now and then.
                std::thread::yield_now();
            }
        }
        // No PAUSE (`spin_loop`) between loads, as in perftest's own spin:
        // under emulation it leaves translated code on every iteration and
        // the peer's byte is seen late (the same cost the channel's
        // completion wait had, see rdma-safe's poller).
    }
    Ok(())
}

/// `timeout` in clock ticks ([`Stamp::ticks_since`]'s unit).
fn timeout_ticks(timeout: Duration) -> u64 {
    (timeout.as_secs_f64() * clock::ticks_per_sec()) as u64
}

/// Latency, client side: one operation at a time; returns samples in usec.
/// The loops keep raw clock ticks from one iteration's start to the next's
/// ([`Laps`], perftest's sampling: a round trip each, or a read, with the
/// iteration's bookkeeping) and convert them afterwards, so that no
/// conversion sits between an answer and the next request.
pub(crate) fn run_lat(
    p: &Params,
    size: usize,
    side: &mut Side,
    remote: Option<RemoteMemoryRegion>,
    exposed: &RemoteAccessBuffer,
) -> Result<Vec<f64>> {
    let iters = p.iters;
    let mut laps = Laps::with_capacity(iters);
    // One-way latency is half a round trip (write and send); a read is one.
    let per_sample = if p.test == Test::ReadLat { 1.0 } else { 2.0 };
    measured_loop(|| -> Result<()> {
        match p.test {
            Test::ReadLat => {
                let remote = remote.ok_or_else(|| fail("no remote region"))?;
                side.local[..size].fill(0);
                let _ = clock::ticks_per_sec();
                for _ in 0..iters {
                    laps.start();
                    side.beat.tick();
                    let (mr, local) = side.local.split_mut();
                    side.channel.read(ReadWorkRequest::new(
                        &mut [mr.scatter_element(&mut local[..size])],
                        remote,
                    ))?;
                }
                laps.stop();
            }
            Test::WriteLat => {
                let remote = remote.ok_or_else(|| fail("no remote region"))?;
                let timeout = side.channel.timeout();
                pattern::fill(&mut side.local[..size], seed(size, BY_CLIENT), 0);
                let _ = clock::ticks_per_sec();
                // The server writes our buffer only in answer to our writes
                // of this size, none of which has been posted yet.
                shared::zero(exposed, 0..size)?;
                for i in 0..iters {
                    laps.start();
                    side.beat.tick();
                    side.local[size - 1] = mark(i);
                    write_and_claim(side, size, remote)?;
                    wait_for_byte(exposed, size - 1, mark(i), timeout)?;
                }
                laps.stop();
            }
            Test::SendLat => {
                pattern::fill(&mut side.local[..size], seed(size, BY_CLIENT), 0);
                let _ = clock::ticks_per_sec();
                side.rx[..size].fill(0);
                let (rx_mr, rx) = side.rx.split_mut();
                let rx = &mut rx[..size];
                let (local, local_mr) = (&side.local[..size], side.local.region());
                let (laps, beat) = (&mut laps, &mut side.beat);
                side.channel
                    .scope(|s| -> Result<()> {
                        let mut scatter = [rx_mr.scatter_element(rx)];
                        let gather = [local_mr.gather_element(local)];
                        let message = [SendWorkRequest::new(&gather).with_immediate(0)];
                        let mut message = s.prepare_sends(&message)?;
                        let mut ring = LatRing::new(s, &mut scatter, iters)?;
                        for i in 0..iters {
                            laps.start();
                            beat.tick();
                            ring.send(s, &mut scatter, &mut message, i as u32)?;
                            let got = ring.next_message(s, &mut scatter)?;
                            check_message(i, size, got.bytes(), got.immediate())?;
                        }
                        laps.stop();
                        ring.finish()
                    })
                    .map_err(rdma_safe::Error::from)?;
            }
            _ => unreachable!("not a latency test"),
        }
        Ok(())
    })?;
    Ok(laps
        .ticks()
        .into_iter()
        .map(|t| clock::micros(t) / per_sample)
        .collect())
}
