//! The data paths of `-R` that differ from `perf`'s own protocol, written
//! to perftest's rules so that either side may be perftest:
//!
//! * send_bw, receiving side: `-r` receives posted before the go-ahead
//!   handshake, re-posted as they are used, every message's length checked;
//! * write_lat: each side writes `-s` bytes to the peer's buffer whose last
//!   byte is the iteration number (mod 256, from 1) and spins on the same
//!   byte of its own buffer; the server writes first;
//! * send_lat: plain sends of `-s` bytes, the client first, each side
//!   answering a received message with one of its own;
//! * read_lat: one read at a time from the peer's buffer.
//!
//! perftest fills its buffers with arbitrary bytes and checks no data, so
//! these loops check lengths and statuses only.

use crate::control::Control;
use crate::latency::wait_for_byte;
use crate::measured::measured_loop;
use crate::perftest_wire::DEST_LEN;
use crate::watch;
use rdma_examples::clock::{self, Laps, Stamp};
use rdma_examples::fail;
use rdma_examples::Result;
use rdma_safe::{
    Channel, ReadWorkRequest, ReceiveWorkRequest, RegisteredBuffer, RemoteAccessBuffer,
    RemoteMemoryRegion, SendWorkRequest, WriteWorkRequest,
};
use std::collections::VecDeque;
use std::time::Duration;

/// send_bw, receiving side: posts `rx_depth` receives, gives the go-ahead
/// (one handshake on `ctl`), then takes `iters` messages of `size` bytes,
/// resting on `ctl` while none comes ([`watch::wait`]).
pub(crate) fn receive_bw(
    channel: &mut Channel,
    rx: &mut RegisteredBuffer,
    size: usize,
    iters: usize,
    rx_depth: usize,
    ctl: &mut Control,
    dest: &[u8; DEST_LEN],
) -> Result<()> {
    let slots = (rx.len() / size.max(1)).max(1);
    let (mr, buf) = rx.split_mut();
    let timeout = channel.timeout();
    measured_loop(|| {
        channel.scope(|s| -> Result<()> {
            s.cancel_on_error();
            let mut lists: Vec<[rdma_safe::ScatterElement<'_>; 1]> = buf
                .chunks_mut(size.max(1))
                .take(slots)
                .map(|c| [mr.scatter_element(&mut c[..size])])
                .collect();
            let mut recvs = VecDeque::with_capacity(rx_depth);
            let mut posted = 0;
            while posted < rx_depth.min(iters) {
                let k = posted % lists.len();
                recvs.push_back(s.post_receive(ReceiveWorkRequest::new(&mut lists[k]))?);
                posted += 1;
            }
            ctl.hand_shake(dest)?;
            for i in 0..iters {
                let next = recvs.pop_front().ok_or_else(|| fail("no receive posted"))?;
                let got = watch::wait(next, timeout, &mut *ctl, "message from the client")
                    .map_err(|e| watch::explain(e, &mut *ctl))?;
                if got.bytes() != size {
                    return Err(fail(format!(
                        "message {i} has {} bytes, expected {size}",
                        got.bytes()
                    )));
                }
                if posted < iters {
                    let k = posted % lists.len();
                    recvs.push_back(s.post_receive(ReceiveWorkRequest::new(&mut lists[k]))?);
                    posted += 1;
                }
            }
            Ok(())
        })
    })
    .map_err(rdma_safe::Error::from)
}

/// write_lat, either side; returns the client's samples in usec: half the
/// time from each of its writes to the server's answer (`iters - 1` of
/// them, as perftest's, which times from one post to the next).
///
/// The server writes first (perftest 6.06's `run_iter_lat_write` skips the
/// server's first wait); from then on each side writes `n` once it has seen
/// the peer's `n`, so the byte never runs ahead of the side spinning on it.
pub(crate) fn write_lat(
    channel: &mut Channel,
    local: &mut RegisteredBuffer,
    exposed: &RemoteAccessBuffer,
    remote: RemoteMemoryRegion,
    size: usize,
    iters: usize,
    client: bool,
) -> Result<Vec<f64>> {
    let timeout = channel.timeout();
    let mut ticks = Vec::with_capacity(if client { iters } else { 0 });
    let _ = clock::ticks_per_sec();
    let mut posted: Option<Stamp> = None;
    measured_loop(|| -> Result<()> {
        for n in 1..=iters {
            let mark = n as u8; // perftest's `(char)++count`
            if client {
                wait_for_byte(exposed, size - 1, mark, timeout)?;
                if let Some(t0) = posted {
                    ticks.push(Stamp::now().ticks_since(t0));
                }
            }
            local[size - 1] = mark;
            posted = Some(Stamp::now());
            channel.write(WriteWorkRequest::new(&[local.gather(..size)], remote))?;
            if !client {
                wait_for_byte(exposed, size - 1, mark, timeout)?;
            }
        }
        Ok(())
    })?;
    Ok(half_round_trips(&ticks))
}

/// Receives a send_lat side keeps posted.
const LAT_RECEIVES: usize = 8;

/// send_lat, either side: `LAT_RECEIVES` receives posted before the
/// go-ahead handshake; returns the client's samples (usec, halved).
#[allow(clippy::too_many_arguments)]
pub(crate) fn send_lat(
    channel: &mut Channel,
    local: &RegisteredBuffer,
    rx: &mut RegisteredBuffer,
    size: usize,
    iters: usize,
    client: bool,
    ctl: &mut Control,
    dest: &[u8; DEST_LEN],
) -> Result<Vec<f64>> {
    let mut laps = Laps::with_capacity(if client { iters } else { 0 });
    let _ = clock::ticks_per_sec();
    let (rx_mr, rx_buf) = rx.split_mut();
    measured_loop(|| {
        channel.scope(|s| -> Result<()> {
            let mut scatter = [rx_mr.scatter_element(&mut rx_buf[..size])];
            let gather = [local.gather(..size)];
            let mut recvs = VecDeque::with_capacity(LAT_RECEIVES);
            let mut posted = 0;
            while posted < LAT_RECEIVES.min(iters) {
                recvs.push_back(s.post_receive(ReceiveWorkRequest::new(&mut scatter))?);
                posted += 1;
            }
            ctl.hand_shake(dest)?;
            let take = |recvs: &mut VecDeque<_>, i: usize| -> Result<()> {
                let pending: rdma_safe::scope::ScopedPendingWork<'_> =
                    recvs.pop_front().ok_or_else(|| fail("no receive posted"))?;
                let got = pending.wait()?;
                if got.bytes() != size {
                    return Err(fail(format!(
                        "message {i} has {} bytes, expected {size}",
                        got.bytes()
                    )));
                }
                Ok(())
            };
            for i in 0..iters {
                if client {
                    laps.start();
                    s.post_send(SendWorkRequest::new(&gather))?.wait()?;
                    take(&mut recvs, i)?;
                } else {
                    take(&mut recvs, i)?;
                    s.post_send(SendWorkRequest::new(&gather))?.wait()?;
                }
                if posted < iters {
                    recvs.push_back(s.post_receive(ReceiveWorkRequest::new(&mut scatter))?);
                    posted += 1;
                }
            }
            if client {
                laps.stop();
            }
            Ok(())
        })
    })
    .map_err(rdma_safe::Error::from)?;
    Ok(half_round_trips(&laps.ticks()))
}

/// read_lat, client: `iters` reads of `size` bytes, one at a time; samples
/// in usec.
pub(crate) fn read_lat(
    channel: &mut Channel,
    local: &mut RegisteredBuffer,
    remote: RemoteMemoryRegion,
    size: usize,
    iters: usize,
) -> Result<Vec<f64>> {
    let mut laps = Laps::with_capacity(iters);
    let _ = clock::ticks_per_sec();
    measured_loop(|| -> Result<()> {
        for _ in 0..iters {
            laps.start();
            channel.read(ReadWorkRequest::new(&mut [local.scatter(..size)], remote))?;
        }
        laps.stop();
        Ok(())
    })?;
    Ok(laps.ticks().iter().map(|&t| clock::micros(t)).collect())
}

fn half_round_trips(ticks: &[u64]) -> Vec<f64> {
    ticks.iter().map(|&t| clock::micros(t) / 2.0).collect()
}

/// How long a side that waits through the peer's run may wait: `timeout`
/// plus the run at a floor rate (1000 operations and 1 MiB per second).
pub(crate) fn run_allowance(iters: usize, size: usize, timeout: Duration) -> Duration {
    let ops = iters as f64 / 1000.0;
    let bytes = iters as f64 * size as f64 / 1_048_576.0;
    timeout + Duration::from_secs_f64(ops + bytes)
}
