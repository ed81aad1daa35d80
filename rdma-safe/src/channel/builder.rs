//! [`ChannelBuilder`]: creating a channel's completion queue and queue pair.

use super::SharedCompletionQueue;
use super::{Channel, ConnectOptions, DEFAULT_TIMEOUT};
use crate::endpoint::Endpoint;
use crate::engine::{Completions, DeviceWatch, KeepAlive, WorkQueue};
use crate::error::{Result, VerbsError};
use crate::pd::ProtectionDomain;
use crate::srq::SharedReceiveQueue;
use crate::work::build::Limits;
use rdma_core::{AccessFlags, Mtu, QpCapabilities, QpType, QueuePair};
use std::sync::Arc;
use std::time::Duration;

/// Builder for a [`Channel`]; from [`Channel::builder`] or
/// [`ProtectionDomain::channel_builder`].
#[derive(Debug, Clone)]
pub struct ChannelBuilder<'f1> {
    pd: Option<&'f1 ProtectionDomain>,
    port: u8,
    gid_index: Option<u32>,
    caps: QpCapabilities,
    cq_size: Option<u32>,
    timeout: Duration,
    keepalive: Option<Duration>,
    completion_events: bool,
    mtu: Option<Mtu>,
    srq: Option<&'f1 SharedReceiveQueue>,
    shared_cq: Option<&'f1 SharedCompletionQueue>,
    connect_opts: ConnectOptions,
}

impl<'f1> ChannelBuilder<'f1> {
    pub(super) fn new() -> Self {
        ChannelBuilder {
            pd: None,
            port: 1,
            gid_index: None,
            caps: QpCapabilities::default(),
            cq_size: None,
            timeout: DEFAULT_TIMEOUT,
            keepalive: None,
            completion_events: false,
            mtu: None,
            srq: None,
            shared_cq: None,
            connect_opts: ConnectOptions::default(),
        }
    }

    /// The protection domain (required).
    pub fn pd(mut self, pd: &'f1 ProtectionDomain) -> Self {
        self.pd = Some(pd);
        self
    }
    /// Device port (default 1).
    pub fn port(mut self, port: u8) -> Self {
        self.port = port;
        self
    }
    /// Local GID index to send from (default: the port's RoCE v2 IPv4 GID,
    /// else its first valid GID).
    pub fn gid_index(mut self, index: u32) -> Self {
        self.gid_index = Some(index);
        self
    }
    /// Send queue depth: outstanding sends, writes and reads (default 128).
    pub fn send_depth(mut self, n: u32) -> Self {
        self.caps.max_send_wr = n;
        self
    }
    /// Receive queue depth: outstanding receives (default 128).
    pub fn recv_depth(mut self, n: u32) -> Self {
        self.caps.max_recv_wr = n;
        self
    }
    /// Maximum SGEs per send/write/read request (default 4).
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.caps.max_send_sge = n;
        self
    }
    /// Maximum SGEs per receive request (default 4).
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.caps.max_recv_sge = n;
        self
    }
    /// Bytes a send or write may carry inline (copied at post time; default 0).
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.caps.max_inline_data = n;
        self
    }
    /// Completion queue size (default: send depth + receive depth, or the
    /// send depth alone with a shared receive queue; [`build`](Self::build)
    /// refuses anything smaller, which could overflow).
    pub fn cq_size(mut self, n: u32) -> Self {
        self.cq_size = Some(n);
        self
    }
    /// Bound on every blocking wait (default [`DEFAULT_TIMEOUT`], 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// Probe a quiet peer after `interval` without a completion (default:
    /// no keepalive); see [`Channel::set_keepalive`] for what it finds and
    /// within what bound.
    pub fn keepalive(mut self, interval: Duration) -> Self {
        self.keepalive = Some(interval);
        self
    }
    /// The reliable connection's attributes that
    /// [`Channel::connect`] and [`Channel::handshake`] set (ACK timeout,
    /// retry counts, outstanding reads; default
    /// [`ConnectOptions::default`]: a dead path is noticed after ≈ 3.8 s).
    /// [`Channel::connect_with`] takes its own.
    pub fn connect_options(mut self, opts: ConnectOptions) -> Self {
        self.connect_opts = opts;
        self
    }
    /// Sleep on completion events instead of busy polling while waiting
    /// (lower CPU use, higher latency; default off).
    pub fn completion_events(mut self, on: bool) -> Self {
        self.completion_events = on;
        self
    }
    /// Path MTU to use (default: the port's active MTU, capped by the peer's).
    pub fn mtu(mut self, mtu: Mtu) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Take receives from `srq` (which must belong to the same protection
    /// domain) instead of the channel's own receive queue: messages to this
    /// channel are then read with [`SharedReceiveQueue::receive`], and the
    /// channel's own receive calls fail.
    pub fn shared_receive_queue(mut self, srq: &'f1 SharedReceiveQueue) -> Self {
        self.srq = Some(srq);
        self
    }

    /// Takes completions from `cq`, shared with other channels, instead of
    /// a completion queue of its own (see [`SharedCompletionQueue`]): the
    /// channel reserves its depths there. Not with
    /// [`completion_events`](Self::completion_events) or
    /// [`cq_size`](Self::cq_size), which concern a queue of its own.
    pub fn completion_queue(mut self, cq: &'f1 SharedCompletionQueue) -> Self {
        self.shared_cq = Some(cq);
        self
    }

    /// Creates the channel: a CQ, an RC queue pair in the INIT state, and the
    /// local [`Endpoint`] to hand to the peer.
    ///
    /// # Errors
    /// [`VerbsError::InvalidArgument`] without a protection domain or when the
    /// port has no usable GID; otherwise the failing verb's error.
    pub fn build(self) -> Result<Channel> {
        let pd = self
            .pd
            .ok_or_else(|| VerbsError::InvalidArgument("ChannelBuilder needs .pd(..)".into()))?;
        let ctx = pd.context();
        let port_attr = ctx.query_port(self.port)?;
        let gid = match self.gid_index {
            Some(i) => ctx.query_gid_entry(self.port, i)?,
            None => ctx.preferred_gid(self.port)?,
        };
        let gid_index = u8::try_from(gid.index).map_err(|_| {
            VerbsError::InvalidArgument(format!("GID index {} does not fit a GRH", gid.index))
        })?;
        let channel = if self.completion_events {
            Some(ctx.create_comp_channel()?)
        } else {
            None
        };
        // Every request the queues can hold may complete before the engine
        // reaps: a smaller completion queue overflows, and the device then
        // drops completions (rxe) or breaks the queue pair.
        let recv_wr = if self.srq.is_some() {
            0
        } else {
            self.caps.max_recv_wr
        };
        let needed = self.caps.max_send_wr.saturating_add(recv_wr).max(1);
        let cq_size = match self.cq_size {
            Some(n) if n < needed => {
                return Err(cq_too_small(n, needed, &self.caps, recv_wr).into())
            }
            Some(n) => n,
            None => needed,
        };
        // A shared CQ: checked and reserved before the queue pair exists
        // (the reservation is given back if creating it fails).
        let reservation = match self.shared_cq {
            Some(shared) => Some(reserve(shared, &self, ctx, needed)?),
            None => None,
        };
        let cq = match &reservation {
            Some(r) => r.cq.inner.cq().clone(),
            None => rdma_core::CompQueue::new(ctx, cq_size, channel.as_ref(), 0)?,
        };
        let shared = self.srq.map(SharedReceiveQueue::shared);
        if shared.is_some_and(|s| !s.queue.srq().pd().same_as(pd.as_core())) {
            return Err(VerbsError::InvalidArgument(
                "the shared receive queue belongs to another protection domain".into(),
            )
            .into());
        }
        let recv_cq = shared.map_or(&cq, |s| s.queue.cq());
        let mut qp =
            QueuePair::builder(pd.as_core(), QpType::Rc, &cq, recv_cq).capabilities(self.caps);
        if let Some(s) = shared {
            qp = qp.srq(s.queue.srq());
        }
        let qp = qp.build()?;
        let completions = match reservation {
            Some(r) => r.join(qp.qp_num()),
            None => Completions::Own(cq),
        };
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        qp.to_init(self.port, access)?;
        let mtu = self.mtu.or(port_attr.active_mtu()).unwrap_or(Mtu::Mtu1024);
        let local = Endpoint {
            qp_num: qp.qp_num(),
            psn: random_psn(qp.qp_num()),
            port: self.port,
            lid: port_attr.lid(),
            gid: gid.gid,
            gid_index,
            mtu,
        };
        let limits = Limits::granted(&qp, &self.caps);
        let channel = Channel {
            needs_grh: port_attr.needs_grh(),
            queue: Arc::new(WorkQueue::new(
                qp,
                completions,
                self.completion_events,
                limits,
                DeviceWatch::for_port(ctx, self.port),
                // The slots the queue pair's receives land in outlive it.
                shared.map(|s| s.clone() as Arc<dyn KeepAlive>),
            )),
            pd: pd.clone(),
            local,
            gid,
            timeout: self.timeout,
            connect_opts: self.connect_opts,
            remote: None,
            scope_ids: Vec::new(),
            cm: None,
        };
        channel.set_keepalive(self.keepalive);
        Ok(channel)
    }
}

/// Entries reserved on a shared completion queue for a queue pair being
/// built; given back when dropped unless the queue pair joined.
struct Reservation<'a> {
    cq: &'a SharedCompletionQueue,
    entries: u32,
    joined: bool,
}

impl Reservation<'_> {
    fn join(mut self, qp_num: u32) -> Completions {
        self.joined = true;
        self.cq.inner.join(qp_num, self.entries)
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.joined {
            self.cq.inner.unreserve(self.entries);
        }
    }
}

/// Checks that a channel built with `b` may use the shared `cq` on `ctx`'s
/// device and reserves its `needed` entries there.
fn reserve<'a>(
    cq: &'a SharedCompletionQueue,
    b: &ChannelBuilder<'_>,
    ctx: &rdma_core::Context,
    needed: u32,
) -> Result<Reservation<'a>> {
    let refuse =
        |why: String| -> Result<Reservation<'a>> { Err(VerbsError::InvalidArgument(why).into()) };
    if b.completion_events {
        return refuse(
            "completion events need a completion queue of the channel's own: waits on a shared \
             one poll (an event would wake one waiter for another channel's completion)"
                .into(),
        );
    }
    if b.cq_size.is_some() {
        return refuse(
            "cq_size sizes a completion queue of the channel's own; this channel uses a shared one"
                .into(),
        );
    }
    if cq.inner.cq().context().as_ptr() != ctx.as_ptr() {
        return refuse(format!(
            "the shared completion queue is on device {}, the channel's protection domain on {}",
            cq.inner.cq().context().name(),
            ctx.name()
        ));
    }
    if let Err(why) = cq.inner.reserve(needed) {
        return refuse(why);
    }
    Ok(Reservation {
        cq,
        entries: needed,
        joined: false,
    })
}

/// The error of a completion queue smaller than what the queues can have
/// outstanding.
fn cq_too_small(n: u32, needed: u32, caps: &QpCapabilities, recv_wr: u32) -> VerbsError {
    let recv = if recv_wr > 0 {
        format!(" + receive depth {recv_wr}")
    } else {
        String::new()
    };
    VerbsError::InvalidArgument(format!(
        "a completion queue of {n} entries is smaller than the {needed} requests the queues can \
         have outstanding (send depth {}{recv}): use cq_size({needed}) or more, or smaller depths",
        caps.max_send_wr
    ))
}

fn random_psn(seed: u32) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(seed);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() as u32) & 0x00ff_ffff
}

impl ProtectionDomain {
    /// Creates a channel with default capacities (see [`ChannelBuilder`]).
    ///
    /// # Errors
    /// As [`ChannelBuilder::build`].
    pub fn create_channel(&self) -> Result<Channel> {
        Channel::builder().pd(self).build()
    }

    /// A builder for a channel in this domain.
    pub fn channel_builder(&self) -> ChannelBuilder<'_> {
        Channel::builder().pd(self)
    }
}
