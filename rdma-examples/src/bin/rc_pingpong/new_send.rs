//! `rc_pingpong -N`: the ping-pong with its sends posted through the
//! extended QP API (`ibv_wr_start`, `ibv_wr_send`, `ibv_wr_set_sge`,
//! `ibv_wr_complete`), as the C program's `-N` does.
//!
//! rdma-safe's channel posts with `ibv_post_send` and has no extended queue
//! pair, so this mode uses rdma-core directly: a [`QueuePairEx`] created
//! for sends, receives posted with `ibv_post_recv`, completions polled with
//! `ibv_poll_cq` (sleeping on completion events with `-e`). The memory is
//! one [`RegisteredBuffer`] declared before the queue pair, so the queue
//! pair (and with it every request still posted) is destroyed first; Rust
//! reads the receive half only once every receive has completed. The TCP
//! exchange, the output and `-c` are those of the default mode.
//!
//! A device without the extended API (no `ibv_create_qp_ex`, or one that
//! refuses `IBV_QP_EX_WITH_SEND`) ends the run with
//! "-N/--new_send: not supported by this device (…)".

use super::{exchange, fill_payload, finish_server_exchange, report, Options};
use rdma_core::{
    AccessFlags, AddressVector, CompQueue, QpType, QueuePair, QueuePairEx, RecvRequest, RtrParams,
    RtsParams, SendFlags, SendOps, Sge, WorkCompletion,
};
use rdma_examples::fail;
use rdma_examples::pingpong::Dest;
use rdma_examples::Result;
use rdma_safe::{channel::Gid, ProtectionDomain, RegisteredBuffer};
use std::time::{Duration, Instant};

/// `wr_id` of receives and sends (the C program's).
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// Runs the ping-pong of `o` through the extended QP API on `pd`.
pub(super) fn run(o: &Options, pd: &ProtectionDomain) -> Result<()> {
    let c = &o.common;
    let ctx = pd.context();
    let port = c.ib_port();
    let gid = match c.gid_idx() {
        Some(i) => ctx.query_gid_entry(port, i)?,
        None => ctx.preferred_gid(port)?,
    };
    let sgid_index = u8::try_from(gid.index).map_err(|_| fail("GID index above 255"))?;

    // Declared before the queue pair: dropped after it.
    let slot = o.size.max(1);
    let mut buf = RegisteredBuffer::new(pd, 2 * slot)
        .map_err(|e| fail(format!("two message buffers of -s {} bytes: {e}", o.size)))?;
    let (mr, bytes) = buf.split_mut();
    let lkey = mr.lkey();
    let (rx, tx) = bytes.split_at_mut(slot);
    fill_payload(&mut tx[..o.size], c.chk);
    let rx_sge = [Sge::new(rx.as_ptr() as u64, o.size as u32, lkey)];
    let tx_sge = [Sge::new(tx.as_ptr() as u64, o.size as u32, lkey)];

    let channel = match c.events {
        true => Some(ctx.create_comp_channel()?),
        false => None,
    };
    let cq = ctx.create_cq(c.rx_depth + 1, channel.as_ref())?;
    let mut qp = QueuePair::builder(pd.as_core(), QpType::Rc, &cq, &cq)
        .max_send_wr(1)
        .max_recv_wr(c.rx_depth)
        .max_send_sge(1)
        .max_recv_sge(1)
        .build_ex(SendOps::SEND)
        .map_err(|e| {
            fail(format!(
                "-N/--new_send: not supported by this device ({}: ibv_create_qp_ex with \
                 IBV_QP_EX_WITH_SEND: {e})",
                ctx.name()
            ))
        })?;
    qp.qp().to_init(port, AccessFlags::LOCAL_WRITE)?;

    // Exactly as many receives as messages will arrive, at most -r at a time.
    let mut recv_posted = 0;
    let first = (c.rx_depth as usize).min(c.iters);
    // SAFETY: `buf` outlives the queue pair (declared before it), and Rust
    // reads `rx` only after every receive has completed.
    unsafe { post_receives(&qp, &rx_sge, first) }?;
    recv_posted += first;

    let local_psn = psn(qp.qp().qp_num());
    let me = Dest {
        lid: ctx.query_port(port)?.lid(),
        qpn: qp.qp().qp_num(),
        psn: local_psn,
        gid: gid.gid,
    };
    let (link, remote) = exchange(c, &me)?;
    connect(&qp, o, &remote, sgid_index, local_psn)?;
    if let Some(mut link) = link {
        finish_server_exchange(&mut link, &me)?;
    }
    println!("  remote address: {}", remote.describe());

    let mut poller = Poller::new(&cq, c.timeout());
    let (iters, size) = (c.iters, o.size);
    let (mut scnt, mut rcnt) = (0, 0);
    let mut pending = RECV_WRID;
    let start = Instant::now();
    if c.is_client() {
        // SAFETY: `tx` outlives the queue pair and is not written again.
        unsafe { post_send(&mut qp, &tx_sge) }?;
        pending |= SEND_WRID;
    }
    while scnt < iters || rcnt < iters {
        let wc = poller.next()?;
        if !wc.is_success() {
            return Err(fail(format!(
                "Failed status {} for wr_id {}",
                wc.status(),
                wc.wr_id()
            )));
        }
        match wc.wr_id() {
            SEND_WRID => scnt += 1,
            RECV_WRID => {
                if wc.byte_len() as usize != size {
                    return Err(fail(format!(
                        "message {rcnt} has {} bytes, expected {size} (same -s on both sides?)",
                        wc.byte_len()
                    )));
                }
                rcnt += 1;
                if recv_posted < iters {
                    // SAFETY: as for the first receives.
                    unsafe { post_receives(&qp, &rx_sge, 1) }?;
                    recv_posted += 1;
                }
            }
            other => return Err(fail(format!("Completion for unknown wr_id {other}"))),
        }
        pending &= !wc.wr_id();
        if scnt < iters && pending == 0 {
            // SAFETY: as for the first send.
            unsafe { post_send(&mut qp, &tx_sge) }?;
            pending = RECV_WRID | SEND_WRID;
        }
    }
    report(size, iters, start.elapsed());
    // Every receive has completed: nothing of the NIC's writes is pending.
    drop(qp);
    if c.chk && !c.is_client() {
        super::check_pages(&rx[..size])?;
    }
    Ok(())
}

/// Posts `n` receives into `sge`.
///
/// # Safety
/// The memory `sge` names must stay allocated and registered, and unread by
/// Rust, until the receives complete or the queue pair is destroyed.
unsafe fn post_receives(qp: &QueuePairEx, sge: &[Sge], n: usize) -> Result<()> {
    let mut reqs: Vec<_> = (0..n).map(|_| RecvRequest::new(RECV_WRID, sge)).collect();
    // SAFETY: the caller's contract.
    unsafe { qp.qp().post_recv_list(&mut reqs) }
        .map_err(|e| fail(format!("Couldn't post receive: {e}")))
}

/// Posts one signaled send of `sge` as a batch of the extended API.
///
/// # Safety
/// The memory `sge` names must stay allocated, registered and unwritten
/// until the send completes or the queue pair is destroyed.
unsafe fn post_send(qp: &mut QueuePairEx, sge: &[Sge]) -> Result<()> {
    let mut batch = qp.start();
    // SAFETY: the caller's contract.
    unsafe { batch.send(SEND_WRID, SendFlags::SIGNALED, sge) }?;
    batch
        .complete()
        .map_err(|e| fail(format!("Couldn't post send: {e}")))
}

/// INIT → RTR → RTS toward `remote`, with the C program's attributes: SL
/// from -l, hop limit 1, one outstanding read each way, timeout 14, 7
/// retries, RNR timer 12.
fn connect(qp: &QueuePairEx, o: &Options, remote: &Dest, sgid: u8, psn: u32) -> Result<()> {
    let port = o.common.ib_port();
    let mut av = if remote.gid != Gid::default() {
        let mut av = AddressVector::global(port, remote.gid, sgid);
        if let Some(grh) = av.grh.as_mut() {
            grh.hop_limit = 1;
        }
        av
    } else {
        AddressVector::local(port, remote.lid)
    };
    av.sl = o.common.sl;
    let mut rtr = RtrParams::new(remote.qpn, remote.psn, av);
    rtr.path_mtu = o.mtu;
    rtr.max_dest_rd_atomic = 1;
    rtr.min_rnr_timer = 12;
    let mut rts = RtsParams::new(psn);
    rts.max_rd_atomic = 1;
    qp.qp()
        .to_rtr(&rtr)
        .and_then(|()| qp.qp().to_rts(&rts))
        .map_err(|e| fail(format!("Couldn't connect to remote QP: {e}")))
}

/// A 24-bit initial PSN that differs between runs.
fn psn(seed: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos ^ seed.rotate_left(11)) & 0x00ff_ffff
}

/// Completions one at a time, polled (or, when the CQ has a channel, slept
/// for on events), each within the timeout.
struct Poller<'cq> {
    cq: &'cq CompQueue,
    timeout: Duration,
    wcs: [WorkCompletion; 2],
    have: usize,
    next: usize,
}

impl<'cq> Poller<'cq> {
    fn new(cq: &'cq CompQueue, timeout: Duration) -> Self {
        Poller {
            cq,
            timeout,
            wcs: [WorkCompletion::default(); 2],
            have: 0,
            next: 0,
        }
    }

    fn next(&mut self) -> Result<WorkCompletion> {
        let start = Instant::now();
        while self.next == self.have {
            self.next = 0;
            self.have = self.cq.poll(&mut self.wcs)?.len();
            if self.have > 0 {
                break;
            }
            let left = self
                .timeout
                .checked_sub(start.elapsed())
                .ok_or_else(|| fail(format!("no completion within {:?}", self.timeout)))?;
            if self.cq.channel().is_some() {
                // Arm, then poll once more: a completion that arrived before
                // arming raises no event.
                self.cq.req_notify(false)?;
                self.have = self.cq.poll(&mut self.wcs)?.len();
                if self.have == 0 {
                    self.cq.wait_event(Some(left))?;
                }
            }
        }
        let wc = self.wcs[self.next];
        self.next += 1;
        Ok(wc)
    }
}
