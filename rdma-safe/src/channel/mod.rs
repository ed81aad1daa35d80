//! [`Channel`]: a reliable connection, and how one is built and connected
//! ([`ChannelBuilder`], [`ConnectOptions`], [`Endpoint`]). The channel is
//! a façade over the crate's engine (its work queue) with its protection
//! domain, endpoints and timeout.

mod builder;
mod cm;
mod connect;
mod ops;
mod shared_cq;

pub use crate::endpoint::{Endpoint, ENDPOINT_ENCODED_LEN};
pub use crate::engine::PortEvents;
pub use builder::ChannelBuilder;
pub(crate) use cm::{CmQueue, PendingCm};
pub use connect::ConnectOptions;
/// The verbs-layer types a channel is described by.
pub use rdma_core::{Context, Gid, GidEntry, Mtu, QpCapabilities, QpState};
pub use shared_cq::SharedCompletionQueue;

use crate::engine::WorkQueue;
use crate::error::Result;
use crate::pd::ProtectionDomain;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Default bound on every blocking wait, and the stall watchdog's period:
/// 30 s. A wait that expires shuts the channel down (see
/// [`Error::Timeout`](crate::Error::Timeout)).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A safe RDMA communication endpoint built on a reliable-connected queue
/// pair.
///
/// Operations borrow their memory through [`GatherElement`](crate::GatherElement)s and
/// [`ScatterElement`](crate::ScatterElement)s. The blocking operations ([`send`](Self::send),
/// [`receive`](Self::receive), [`write`](Self::write), [`read`](Self::read))
/// return only once the NIC is done with the memory; [`scope`](Self::scope)
/// and [`manual_scope`](Self::manual_scope) let many operations be in flight
/// at once and still guarantee that, before they return, every operation has
/// completed. Every wait is bounded by the channel's
/// [timeout](ChannelBuilder::timeout): when it expires, the queue pair is
/// moved to the error state and its outstanding work drained (flushed) before
/// the call returns, and the channel becomes unusable.
///
/// A channel belongs to a [`ProtectionDomain`] and may use any memory region
/// registered in it.
///
/// # Example
///
/// Two channels of one process: a send/receive in a polling scope, an RDMA
/// write and an RDMA read, each checked (`rdma-safe/examples/loopback.rs`,
/// run on a soft-RoCE device by `cargo xtask test-rxe`):
#[doc = concat!("```no_run\n", include_str!("../../examples/loopback.rs"), "```")]
pub struct Channel {
    queue: Arc<WorkQueue>,
    /// The port's link layer needs a GRH (RoCE), queried once at build.
    needs_grh: bool,
    pd: ProtectionDomain,
    local: Endpoint,
    gid: GidEntry,
    timeout: Duration,
    /// What [`connect`](Channel::connect) and
    /// [`handshake`](Channel::handshake) set up the connection with
    /// ([`ChannelBuilder::connect_options`]).
    connect_opts: ConnectOptions,
    remote: Option<Endpoint>,
    /// The id list of the last scope, kept so that a loop of short scopes
    /// does not allocate one per iteration.
    pub(crate) scope_ids: Vec<u64>,
    /// The connection manager's side of a channel it connected. Last, so
    /// that it is dropped last: it disconnects and stops its watcher.
    cm: Option<Arc<cm::CmLink>>,
}

impl Channel {
    /// A builder for a channel (set its protection domain with
    /// [`ChannelBuilder::pd`]).
    pub fn builder<'f1>() -> ChannelBuilder<'f1> {
        ChannelBuilder::new()
    }

    /// The channel's protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// What the peer needs to connect to this channel.
    pub fn local_endpoint(&self) -> Endpoint {
        self.local
    }

    /// The peer's endpoint, once connected.
    pub fn remote_endpoint(&self) -> Option<Endpoint> {
        self.remote
    }

    /// The local GID entry used for addressing.
    pub fn gid(&self) -> GidEntry {
        self.gid
    }

    /// The queue capacities granted by the device.
    pub fn capabilities(&self) -> QpCapabilities {
        self.queue.limits.caps
    }

    /// The bound on blocking waits.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the bound on blocking waits.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sets the keepalive: after `interval` without any completion, with
    /// nothing on the send queue, the channel posts a probe of its own (a
    /// zero-length RDMA write, which the peer's NIC acknowledges without
    /// its software, as librdmacm's rsocket keepalive does). `None` (the
    /// default) or zero: no probes. Shared by every handle on the channel
    /// ([`SharedChannel`](crate::SharedChannel)s, scopes).
    ///
    /// Without a keepalive, a peer that is quiet — sends no messages, or
    /// only answers one-sided RDMA — keeps its connection for as long as
    /// it likes: posted receives are not a stall (see the
    /// [watchdog](crate::owned#timeouts-and-the-stall-watchdog)). But a
    /// peer that *died* while quiet is then never noticed by the futures
    /// and streams, only by a blocking wait's timeout or the CM's
    /// disconnect (which a host that lost power or its link never sends).
    /// With a keepalive, a dead quiet peer fails the probe once the
    /// transport's retries are spent, and every operation waiting on the
    /// channel — a blocking or async receive, a scope's, a stream's — then
    /// reports [`Error::PeerDisconnected`](crate::Error::PeerDisconnected)
    /// (a [`RecvStream`](crate::owned::RecvStream) ends, as on a
    /// disconnect). How long that takes, from the moment the peer died, is
    /// at most
    ///
    /// `interval` + (`retry_count` + 1) · *t*, with *t* = 4.096 µs · 2^`ack_timeout`,
    ///
    /// plus the delays below. The worst case is a peer that dies just
    /// after answering a probe: the next probe goes out a whole `interval`
    /// later and fails once its first try and each of its `retry_count`
    /// retries have waited *t* for an acknowledgement; a peer that dies
    /// with a probe in flight, or later in the quiet period, is found
    /// sooner (at best after the retries alone). `ack_timeout` is the
    /// connection's ([`ConnectOptions::timeout`],
    /// [`CmOptions::ack_timeout`](crate::cm::CmOptions::ack_timeout));
    /// `retry_count` is this side's [`ConnectOptions::retry_count`] or,
    /// through the CM, the *connecting* side's
    /// [`CmOptions::retry_count`](crate::cm::CmOptions::retry_count): an
    /// accepted channel takes the connect request's, whatever the
    /// listener's options say (the CM's accept carries none). With the
    /// defaults (17, 6): `interval` + 0.537 s · 7 ≈ `interval` + 3.76 s.
    ///
    /// *t* is the least a device waits a try (verbs define the exponent as
    /// a minimum), so the bound holds with the device's own wait in its
    /// place: rxe's is *t* in whole kernel ticks, rounded down; hardware
    /// may round it up or raise a small exponent to its own floor. To the bound come the watchdog's
    /// looks, one that starts the quiet period after the last completion
    /// and one that posts the probe — a completion driver round, a
    /// busy-polling future's every 256 empty polls, a blocking wait's every
    /// 10 ms —, the scheduler's delays, and, on a device that does not flush the receives
    /// of a queue pair in error, up to 2 s of flush patience (the receives
    /// are then discarded by a reset). rxe takes a retry count of 7 as
    /// "retry forever": a probe then never fails. A blocking wait reports
    /// the peer gone only if this bound is shorter than its own timeout.
    ///
    /// Probes are posted only where the engine reads the clock anyway,
    /// never per operation; each counts in [`totals`](Self::totals) and
    /// takes a send-queue entry while in flight.
    pub fn set_keepalive(&self, interval: Option<Duration>) {
        self.queue.set_keepalive(interval);
    }

    /// The keepalive interval, if the channel has one (see
    /// [`set_keepalive`](Self::set_keepalive)).
    pub fn keepalive(&self) -> Option<Duration> {
        self.queue.status().keepalive
    }

    /// Why the channel is unusable, if an earlier failure or timeout shut it
    /// down, or the device declared its queue pair broken (an asynchronous
    /// event) or moved it to the error state (e.g. after the peer's bad-rkey
    /// access). Reads the device's pending events and the queue pair's state
    /// (`ibv_query_qp`).
    pub fn unusable_reason(&self) -> Option<String> {
        if let Some(why) = self.queue.status().unusable {
            return Some(why);
        }
        self.queue.broken()
    }

    /// Whether the channel can still carry operations (see
    /// [`unusable_reason`](Self::unusable_reason)).
    pub fn is_usable(&self) -> bool {
        self.unusable_reason().is_none()
    }

    /// Work requests posted and not yet completed and claimed. Always 0
    /// outside a scope, except for leaked [`PendingWork`](crate::PendingWork).
    pub fn outstanding(&self) -> usize {
        self.queue.status().counters.tracked
    }

    /// Totals since creation: (work requests posted, work requests seen
    /// complete). A batch counts as its number of requests on both sides.
    /// Completions never outnumber posts.
    pub fn totals(&self) -> (u64, u64) {
        let c = self.queue.status().counters;
        (c.posted, c.completed)
    }

    /// For tests of the failure paths only: see
    /// [`SharedChannel::skip_readiness_check`](crate::SharedChannel::skip_readiness_check).
    #[doc(hidden)]
    pub fn skip_readiness_check(&self) {
        self.queue.gate.assume_ready();
    }

    /// Which completion queue the device names in an `IBV_EVENT_CQ_ERR`
    /// about this channel's (its own, or the shared one it is on).
    pub fn cq_id(&self) -> crate::error::CqId {
        self.queue.cq.cq_id()
    }

    /// The port the channel's queue pair uses.
    pub fn port(&self) -> u8 {
        self.local.port
    }

    /// What the channel's port saw of the device's port events since
    /// its device was first watched (reading the pending events first):
    /// how many times it went down and came up, whether it is up now, and
    /// how many times its GID table changed. A caller whose channel failed
    /// with a port error ([`Error::DeviceEvent`](crate::Error::DeviceEvent))
    /// waits for `up` (or for `active` to grow) and reconnects: a channel
    /// made then looks the GID up again and is not failed by the old event.
    pub fn port_events(&self) -> PortEvents {
        self.queue.ending.port_events()
    }

    /// The QP number of the channel's queue pair.
    pub fn qp_num(&self) -> u32 {
        self.queue.qp.qp_num()
    }

    /// `ibv_query_qp`—The current state of the channel's queue pair
    /// (`ReadyToSend` once connected, `Error` after a failure or timeout).
    ///
    /// The queue pair itself is not exposed: moving it to another state or
    /// polling its completion queue behind the channel's back would break
    /// the bookkeeping that decides when borrowed memory is released.
    pub fn qp_state(&self) -> Result<rdma_core::QpState> {
        Ok(self.queue.qp.state()?)
    }

    /// The engine, for scopes and pending work.
    pub(crate) fn queue(&self) -> &Arc<WorkQueue> {
        &self.queue
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("caps", &self.queue.limits.caps)
            .field("timeout", &self.timeout)
            .field("unusable", &self.unusable_reason())
            .finish()
    }
}
