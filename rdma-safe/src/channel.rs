//! [`Channel`]: a reliable-connected queue pair with safe, blocking and
//! scoped operations.

use crate::endpoint::Endpoint;
use crate::error::{IbvError, IbvResult, Operation, ScopeError, TransportError, TransportResult};
use crate::pd::ProtectionDomain;
use crate::pending::PendingWork;
use crate::poller::{Shared, BATCH_MEMBER};
use crate::scope::PollingScope;
use crate::sge::{GatherElement, ScatterElement};
use crate::work::{
    ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WorkSuccess, WriteWorkRequest,
};
use ibverbs_sys as sys;
use rdma_core::{
    AccessFlags, AddressVector, GidEntry, Mtu, QpCapabilities, QpType, QueuePair, RtrParams,
    RtsParams,
};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

/// Default bound on every blocking wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connection attributes of a reliable connection (the RTR and RTS
/// attributes of `ibv_modify_qp(3)`). The defaults suit most uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Service level (default 0).
    pub service_level: u8,
    /// GRH hop limit (default 64).
    pub hop_limit: u8,
    /// GRH traffic class (default 0).
    pub traffic_class: u8,
    /// Path MTU (default: the smaller of the two ports' active MTUs).
    pub path_mtu: Option<Mtu>,
    /// RDMA reads/atomics this side may have outstanding (default 16).
    pub max_rd_atomic: u8,
    /// RDMA reads/atomics the peer may have outstanding here (default 16).
    pub max_dest_rd_atomic: u8,
    /// Local ACK timeout exponent: 4.096 µs · 2^timeout (default 14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries (default 7; rxe treats 7 as unlimited).
    pub retry_count: u8,
    /// Receiver-not-ready retries (default 7 = unlimited; the channel's
    /// timeout still bounds every wait).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (default 12 ≈ 0.64 ms).
    pub min_rnr_timer: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            service_level: 0,
            hop_limit: 64,
            traffic_class: 0,
            path_mtu: None,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            timeout: 14,
            retry_count: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
        }
    }
}

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
    completion_events: bool,
    mtu: Option<Mtu>,
}

impl<'f1> ChannelBuilder<'f1> {
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
    /// Completion queue size (default: send depth + receive depth).
    pub fn cq_size(mut self, n: u32) -> Self {
        self.cq_size = Some(n);
        self
    }
    /// Bound on every blocking wait (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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

    /// Creates the channel: a CQ, an RC queue pair in the INIT state, and the
    /// local [`Endpoint`] to hand to the peer.
    ///
    /// # Errors
    /// [`IbvError::InvalidArgument`] without a protection domain or when the
    /// port has no usable GID; otherwise the failing verb's error.
    pub fn build(self) -> IbvResult<Channel> {
        let pd = self
            .pd
            .ok_or_else(|| IbvError::InvalidArgument("ChannelBuilder needs .pd(..)".into()))?;
        let ctx = pd.context();
        let port_attr = ctx.query_port(self.port)?;
        let gid = match self.gid_index {
            Some(i) => ctx.query_gid_entry(self.port, i)?,
            None => ctx.preferred_gid(self.port)?,
        };
        let gid_index = u8::try_from(gid.index).map_err(|_| {
            IbvError::InvalidArgument(format!("GID index {} does not fit a GRH", gid.index))
        })?;
        let channel = if self.completion_events {
            Some(ctx.create_comp_channel()?)
        } else {
            None
        };
        let cq_size = self
            .cq_size
            .unwrap_or(self.caps.max_send_wr + self.caps.max_recv_wr)
            .max(1);
        let cq = rdma_core::CompQueue::new(ctx, cq_size, channel.as_ref(), 0)?;
        let qp = QueuePair::builder(pd.as_core(), QpType::Rc, &cq, &cq)
            .capabilities(self.caps)
            .build()?;
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
        let caps = qp.capabilities();
        // Providers may grant more inline space than asked for (rxe raises 0
        // to 16); inline only what the caller asked for.
        let inline_limit = caps.max_inline_data.min(self.caps.max_inline_data);
        Ok(Channel {
            needs_grh: port_attr.needs_grh(),
            inline_limit,
            shared: Arc::new(Shared::new(qp, cq, self.completion_events)),
            pd: pd.clone(),
            local,
            gid,
            caps,
            timeout: self.timeout,
            remote: None,
            scope_ids: Vec::new(),
        })
    }
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

/// A safe RDMA communication endpoint built on a reliable-connected queue
/// pair.
///
/// Operations borrow their memory through [`GatherElement`]s and
/// [`ScatterElement`]s. The blocking operations ([`send`](Self::send),
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
pub struct Channel {
    shared: Arc<Shared>,
    /// The port's link layer needs a GRH (RoCE), queried once at build.
    needs_grh: bool,
    inline_limit: u32,
    pd: ProtectionDomain,
    local: Endpoint,
    gid: GidEntry,
    caps: QpCapabilities,
    timeout: Duration,
    remote: Option<Endpoint>,
    /// The id list of the last scope, kept so that a loop of short scopes
    /// does not allocate one per iteration.
    pub(crate) scope_ids: Vec<u64>,
}

impl Channel {
    /// A builder for a channel (set its protection domain with
    /// [`ChannelBuilder::pd`]).
    pub fn builder<'f1>() -> ChannelBuilder<'f1> {
        ChannelBuilder {
            pd: None,
            port: 1,
            gid_index: None,
            caps: QpCapabilities::default(),
            cq_size: None,
            timeout: DEFAULT_TIMEOUT,
            completion_events: false,
            mtu: None,
        }
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
        self.caps
    }

    /// The bound on blocking waits.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the bound on blocking waits.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Why the channel is unusable, if an earlier failure or timeout shut it
    /// down (its queue pair is then in the error state).
    pub fn unusable_reason(&self) -> Option<String> {
        self.shared.unusable()
    }

    /// Whether the channel can still carry operations.
    pub fn is_usable(&self) -> bool {
        self.unusable_reason().is_none()
    }

    /// Work requests posted and not yet completed and claimed. Always 0
    /// outside a scope, except for leaked [`PendingWork`].
    pub fn outstanding(&self) -> usize {
        self.shared.counters().3
    }

    /// Totals since creation: (work requests posted, work requests seen
    /// complete). A batch counts as its number of requests on both sides.
    /// Completions never outnumber posts.
    pub fn totals(&self) -> (u64, u64) {
        let (p, c, _, _) = self.shared.counters();
        (p, c)
    }

    /// The QP number of the channel's queue pair.
    pub fn qp_num(&self) -> u32 {
        self.shared.qp.qp_num()
    }

    /// `ibv_query_qp`—The current state of the channel's queue pair
    /// (`ReadyToSend` once connected, `Error` after a failure or timeout).
    ///
    /// The queue pair itself is not exposed: moving it to another state or
    /// polling its completion queue behind the channel's back would break
    /// the bookkeeping that decides when borrowed memory is released.
    pub fn qp_state(&self) -> IbvResult<rdma_core::QpState> {
        self.shared.qp.state()
    }

    /// Connects to the peer `remote` (RTR then RTS, with a GRH on RoCE)
    /// with [`ConnectOptions::default`]. The peer must connect to
    /// [`local_endpoint`](Self::local_endpoint) too before data flows; see
    /// [`handshake`](Self::handshake).
    pub fn connect(&mut self, remote: &Endpoint) -> IbvResult<()> {
        self.connect_with(remote, &ConnectOptions::default())
    }

    /// Connects to the peer `remote` with explicit connection attributes.
    ///
    /// Of `remote`, the QP number, PSN, LID, GID and MTU are used; its `port`
    /// and `gid_index` describe the peer's side and are informational here
    /// (the local port and GID index are the channel's own).
    pub fn connect_with(&mut self, remote: &Endpoint, opts: &ConnectOptions) -> IbvResult<()> {
        let qp = &self.shared.qp;
        let mut av = if self.needs_grh || !remote.gid.is_zero() {
            AddressVector::global(self.local.port, remote.gid, self.local.gid_index)
        } else {
            AddressVector::local(self.local.port, remote.lid)
        };
        av.sl = opts.service_level;
        if let Some(grh) = av.grh.as_mut() {
            grh.hop_limit = opts.hop_limit;
            grh.traffic_class = opts.traffic_class;
        }
        let mut rtr = RtrParams::new(remote.qp_num, remote.psn, av);
        rtr.path_mtu = opts
            .path_mtu
            .unwrap_or_else(|| self.local.mtu.min(remote.mtu));
        rtr.max_dest_rd_atomic = opts.max_dest_rd_atomic;
        rtr.min_rnr_timer = opts.min_rnr_timer;
        qp.to_rtr(&rtr)?;
        let mut rts = RtsParams::new(self.local.psn);
        rts.timeout = opts.timeout;
        rts.retry_cnt = opts.retry_count;
        rts.rnr_retry = opts.rnr_retry;
        rts.max_rd_atomic = opts.max_rd_atomic;
        qp.to_rts(&rts)?;
        self.remote = Some(*remote);
        Ok(())
    }

    /// Exchanges endpoints with the peer over `stream`, connects, and waits
    /// until the peer has connected too (so the first message cannot arrive
    /// before its queue pair is ready). Both sides call this.
    pub fn handshake(&mut self, stream: &mut TcpStream) -> Result<Endpoint, HandshakeError> {
        let remote = Endpoint::exchange(stream, &self.local)?;
        self.connect(&remote)?;
        stream.write_all(b"R")?;
        let mut ack = [0u8; 1];
        stream.read_exact(&mut ack)?;
        if &ack != b"R" {
            return Err(HandshakeError::Io(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad ready byte from peer",
            )));
        }
        Ok(remote)
    }

    /// Connects two channels to each other (loopback, or two channels of one
    /// process on different devices).
    pub fn connect_pair(a: &mut Channel, b: &mut Channel) -> IbvResult<()> {
        let (ea, eb) = (a.local, b.local);
        a.connect(&eb)?;
        b.connect(&ea)
    }

    // ----- posting -----------------------------------------------------------

    /// Whether a payload of `len` bytes goes inline. A payload forced inline
    /// must fit the queue pair's inline space: checked here, before anything
    /// is posted, so that no member of a batch can fail inside the provider
    /// after earlier members were posted.
    fn inline_for(&self, op: Operation, len: usize, forced: Option<bool>) -> TransportResult<bool> {
        match forced {
            None => Ok(len > 0 && len <= self.inline_limit as usize),
            Some(true) if len > self.caps.max_inline_data as usize => Err(TransportError::Post {
                operation: op,
                source: IbvError::InvalidArgument(format!(
                    "{len} bytes forced inline exceed the queue pair's inline limit of {} bytes",
                    self.caps.max_inline_data
                )),
            }),
            Some(on) => Ok(on),
        }
    }

    fn check_sges(&self, op: Operation, n: usize, max: u32) -> TransportResult<()> {
        if n > max as usize {
            return Err(TransportError::Post {
                operation: op,
                source: IbvError::InvalidArgument(format!(
                    "{n} SGEs exceed the channel's limit of {max}"
                )),
            });
        }
        Ok(())
    }

    /// Validates a send and describes it as a send-queue request.
    fn send_item<'a, 'd>(
        &self,
        wr: &SendWorkRequest<'a, 'd>,
    ) -> TransportResult<GatherItem<'a, 'd>> {
        self.check_sges(Operation::Send, wr.gather.len(), self.caps.max_send_sge)?;
        let (opcode, imm_be) = match wr.immediate {
            Some(imm) => (sys::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, imm.to_be()),
            None => (sys::ibv_wr_opcode::IBV_WR_SEND, 0),
        };
        let mut flags = sys::ibv_send_flags(0);
        if wr.solicited {
            flags |= sys::ibv_send_flags::IBV_SEND_SOLICITED;
        }
        let len = wr.len();
        if self.inline_for(Operation::Send, len, wr.inline)? {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE;
        }
        Ok(GatherItem {
            gather: wr.gather,
            len,
            opcode,
            flags,
            imm_be,
            rdma: None,
        })
    }

    /// Validates an RDMA write and describes it as a send-queue request.
    fn write_item<'a, 'd>(
        &self,
        wr: &WriteWorkRequest<'a, 'd>,
    ) -> TransportResult<GatherItem<'a, 'd>> {
        self.check_sges(Operation::Write, wr.gather.len(), self.caps.max_send_sge)?;
        let len = wr.len();
        check_remote_len(Operation::Write, len, &wr.remote)?;
        let (opcode, imm_be) = match wr.immediate {
            Some(imm) => (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM, imm.to_be()),
            None => (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE, 0),
        };
        let mut flags = sys::ibv_send_flags(0);
        if self.inline_for(Operation::Write, len, wr.inline)? {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE;
        }
        Ok(GatherItem {
            gather: wr.gather,
            len,
            opcode,
            flags,
            imm_be,
            rdma: Some((wr.remote.address(), wr.remote.rkey())),
        })
    }

    pub(crate) fn post_send_wr(&self, wr: &SendWorkRequest<'_, '_>) -> TransportResult<u64> {
        let item = self.send_item(wr)?;
        self.post_gather(Operation::Send, std::slice::from_ref(&item))
    }

    pub(crate) fn post_write_wr(&self, wr: &WriteWorkRequest<'_, '_>) -> TransportResult<u64> {
        let item = self.write_item(wr)?;
        self.post_gather(Operation::Write, std::slice::from_ref(&item))
    }

    pub(crate) fn post_send_batch_wr(
        &self,
        wrs: &[SendWorkRequest<'_, '_>],
    ) -> TransportResult<u64> {
        let items = wrs
            .iter()
            .map(|wr| self.send_item(wr))
            .collect::<TransportResult<Vec<_>>>()?;
        self.post_gather(Operation::Send, &items)
    }

    pub(crate) fn post_write_batch_wr(
        &self,
        wrs: &[WriteWorkRequest<'_, '_>],
    ) -> TransportResult<u64> {
        let items = wrs
            .iter()
            .map(|wr| self.write_item(wr))
            .collect::<TransportResult<Vec<_>>>()?;
        self.post_gather(Operation::Write, &items)
    }

    /// Posts one request, or a batch as one linked list with one
    /// `ibv_post_send` call (one doorbell) of which only the last request is
    /// signaled. On a reliable connection the send queue completes in order,
    /// so the last request's completion — success, error or flush — means
    /// every earlier one is finished too.
    fn post_gather(&self, op: Operation, items: &[GatherItem<'_, '_>]) -> TransportResult<u64> {
        let len = items.iter().map(|it| it.len).sum();
        self.post_list(op, len, items.len(), &mut |k, wr_id, signaled| {
            items[k].raw(wr_id, signaled)
        })
    }

    /// Posts `n` send-queue requests built by `build(index, wr_id, signaled)`
    /// as described at [`post_gather`](Self::post_gather). Every SGE the
    /// built requests name must come from a `GatherElement` or
    /// `ScatterElement` of the caller's request(s).
    fn post_list(
        &self,
        op: Operation,
        len: usize,
        n: usize,
        build: &mut dyn FnMut(usize, u64, bool) -> sys::ibv_send_wr,
    ) -> TransportResult<u64> {
        if n == 0 {
            return Err(TransportError::Post {
                operation: op,
                source: IbvError::InvalidArgument("empty batch".into()),
            });
        }
        let qp = &self.shared.qp;
        self.shared.post(op, len, n as u32, &mut |id| {
            if n == 1 {
                let mut wr = build(0, id, true);
                // Every SGE comes from a `GatherElement` (a live `&[u8]`) or a
                // `ScatterElement` (a live `&mut [u8]`), borrowed until the
                // completion is claimed.
                // SAFETY: blocking calls wait for the completion, scopes drain
                // it before returning, and `PendingWork` waits on drop.
                return unsafe { qp.post_send(&mut wr) };
            }
            let mut wrs: Vec<sys::ibv_send_wr> = (0..n)
                .map(|k| {
                    if k + 1 == n {
                        build(k, id, true)
                    } else {
                        build(k, id | BATCH_MEMBER, false)
                    }
                })
                .collect();
            let base = wrs.as_mut_ptr();
            for i in 0..n - 1 {
                // SAFETY: `i + 1 < n`: both are elements of `wrs`, which is
                // not moved or resized while the list is in use.
                unsafe { (*base.add(i)).next = base.add(i + 1) };
            }
            let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
            // SAFETY: as for a single request; the batch completes only with
            // its last request, after every earlier one (see above).
            let rc = unsafe { sys::ibv_post_send(qp.as_ptr(), base, &mut bad) };
            if rc == 0 {
                return Ok(());
            }
            if bad != base {
                // Part of the list was posted without a signaled request at
                // its end: its completion could never be observed. The checks
                // before posting (SGE counts, inline sizes, send-queue room)
                // rule this out; if a provider does it anyway, returning would
                // let the borrows end while the NIC may use the memory.
                crate::fatal::abort_with(format_args!(
                    "ibv_post_send posted part of a batch and failed (errno {rc})"
                ));
            }
            Err(IbvError::verb("ibv_post_send", rc))
        })
    }

    pub(crate) fn post_recv_wr(&self, wr: &mut ReceiveWorkRequest<'_, '_>) -> TransportResult<u64> {
        self.check_sges(Operation::Receive, wr.scatter.len(), self.caps.max_recv_sge)?;
        let len = wr.len();
        let (list, n) = scatter_list(wr.scatter);
        let qp = &self.shared.qp;
        self.shared.post(Operation::Receive, len, 0, &mut |id| {
            let mut raw = sys::ibv_recv_wr {
                wr_id: id,
                sg_list: list,
                num_sge: n,
                next: std::ptr::null_mut(),
            };
            // SAFETY: every SGE comes from a `ScatterElement`, i.e. a live
            // `&mut [u8]` that stays exclusively borrowed until this request's
            // completion is claimed (see `post_gather`).
            unsafe { qp.post_recv(&mut raw) }
        })
    }

    /// Posts receives as one list with one `ibv_post_recv` call. Receives
    /// complete one by one, in order, each with its own completion; the
    /// returned range names the posted ones, which are tracked even when the
    /// call fails part-way (the error is returned beside them).
    pub(crate) fn post_recv_batch_wr(
        &self,
        wrs: &mut [ReceiveWorkRequest<'_, '_>],
    ) -> (Range<u64>, TransportResult<()>) {
        if wrs.is_empty() {
            return (
                0..0,
                Err(TransportError::Post {
                    operation: Operation::Receive,
                    source: IbvError::InvalidArgument("empty batch".into()),
                }),
            );
        }
        for wr in wrs.iter() {
            if let Err(e) =
                self.check_sges(Operation::Receive, wr.scatter.len(), self.caps.max_recv_sge)
            {
                return (0..0, Err(e));
            }
        }
        let lens: Vec<usize> = wrs.iter().map(|wr| wr.len()).collect();
        let mut raws: Vec<sys::ibv_recv_wr> = wrs
            .iter_mut()
            .map(|wr| {
                let (sg_list, num_sge) = scatter_list(wr.scatter);
                sys::ibv_recv_wr {
                    wr_id: 0,
                    sg_list,
                    num_sge,
                    next: std::ptr::null_mut(),
                }
            })
            .collect();
        let qp = &self.shared.qp;
        self.shared.post_receives(&lens, &mut |first| {
            let n = raws.len();
            let base = raws.as_mut_ptr();
            for k in 0..n {
                // SAFETY: `k < n`, and `k + 1 < n` where it is linked: all are
                // elements of `raws`, which is not moved or resized while the
                // list is in use.
                unsafe {
                    (*base.add(k)).wr_id = first + k as u64;
                    if k + 1 < n {
                        (*base.add(k)).next = base.add(k + 1);
                    }
                }
            }
            let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: every SGE comes from a `ScatterElement`, i.e. a live
            // `&mut [u8]` that stays exclusively borrowed until the receive's
            // completion is claimed (see `post_gather`).
            let rc = unsafe { sys::ibv_post_recv(qp.as_ptr(), base, &mut bad) };
            if rc == 0 {
                return (n, Ok(()));
            }
            // The provider names the first receive it did not post; those
            // before it are on the queue and must be tracked.
            let posted = (0..n).find(|&k| std::ptr::eq(base.wrapping_add(k), bad));
            match posted {
                Some(k) => (k, Err(IbvError::verb("ibv_post_recv", rc))),
                None => {
                    // Without knowing which receives were posted, returning
                    // could let the borrows end while the NIC may still write
                    // into the buffers.
                    crate::fatal::abort_with(format_args!(
                        "ibv_post_recv failed (errno {rc}) without naming the receive it stopped at"
                    ));
                }
            }
        })
    }

    pub(crate) fn post_read_wr(&self, wr: &mut ReadWorkRequest<'_, '_>) -> TransportResult<u64> {
        self.post_read_batch_wr(std::slice::from_mut(wr))
    }

    pub(crate) fn post_read_batch_wr(
        &self,
        wrs: &mut [ReadWorkRequest<'_, '_>],
    ) -> TransportResult<u64> {
        let mut len = 0;
        for wr in wrs.iter() {
            self.check_sges(Operation::Read, wr.scatter.len(), self.caps.max_send_sge)?;
            check_remote_len(Operation::Read, wr.len(), &wr.remote)?;
            len += wr.len();
        }
        let count = wrs.len();
        let describe = |wr: &mut ReadWorkRequest<'_, '_>| -> ReadRaw {
            let (list, n) = scatter_list(wr.scatter);
            (list, n, wr.remote.address(), wr.remote.rkey())
        };
        // One read (the latency path) needs no allocation.
        let (single, many): ([ReadRaw; 1], Vec<ReadRaw>) = match wrs {
            [one] => ([describe(one)], Vec::new()),
            _ => (
                [(std::ptr::null_mut(), 0, 0, 0)],
                wrs.iter_mut().map(describe).collect(),
            ),
        };
        let lists: &[ReadRaw] = if many.is_empty() { &single } else { &many };
        self.post_list(Operation::Read, len, count, &mut |k, wr_id, signaled| {
            let (sg_list, num_sge, remote_addr, rkey) = lists[k];
            let mut raw = sys::ibv_send_wr {
                wr_id,
                sg_list,
                num_sge,
                opcode: sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
                send_flags: if signaled {
                    sys::ibv_send_flags::IBV_SEND_SIGNALED.0
                } else {
                    0
                },
                ..Default::default()
            };
            raw.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            raw
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    // ----- blocking operations ------------------------------------------------

    /// Posts a send and blocks until it completes (bounded by the timeout).
    pub fn send<'op>(&'op mut self, wr: SendWorkRequest<'op, 'op>) -> TransportResult<WorkSuccess> {
        let id = self.post_send_wr(&wr)?;
        self.shared.wait(id, self.timeout)
    }

    /// Posts a receive and blocks until a message arrives in it (bounded by
    /// the timeout).
    pub fn receive<'op>(
        &'op mut self,
        mut wr: ReceiveWorkRequest<'op, 'op>,
    ) -> TransportResult<WorkSuccess> {
        let id = self.post_recv_wr(&mut wr)?;
        self.shared.wait(id, self.timeout)
    }

    /// Posts an RDMA write and blocks until it completes (bounded by the
    /// timeout).
    pub fn write<'op>(
        &'op mut self,
        wr: WriteWorkRequest<'op, 'op>,
    ) -> TransportResult<WorkSuccess> {
        let id = self.post_write_wr(&wr)?;
        self.shared.wait(id, self.timeout)
    }

    /// Posts an RDMA read and blocks until it completes (bounded by the
    /// timeout).
    pub fn read<'op>(
        &'op mut self,
        mut wr: ReadWorkRequest<'op, 'op>,
    ) -> TransportResult<WorkSuccess> {
        let id = self.post_read_wr(&mut wr)?;
        self.shared.wait(id, self.timeout)
    }

    /// Posts a batch of sends with one `ibv_post_send` call, only the last
    /// one signaled, and blocks until all completed (bounded by the
    /// timeout). Fewer doorbells and completions than one call per send:
    /// the way to move many small messages. The outcome reports the total
    /// bytes; the first failure of any member fails the batch.
    pub fn send_batch<'op>(
        &'op mut self,
        wrs: &[SendWorkRequest<'op, 'op>],
    ) -> TransportResult<WorkSuccess> {
        let id = self.post_send_batch_wr(wrs)?;
        self.shared.wait(id, self.timeout)
    }

    /// Posts a batch of RDMA writes with one `ibv_post_send` call, only the
    /// last one signaled, and blocks until all completed (bounded by the
    /// timeout). See [`send_batch`](Self::send_batch).
    pub fn write_batch<'op>(
        &'op mut self,
        wrs: &[WriteWorkRequest<'op, 'op>],
    ) -> TransportResult<WorkSuccess> {
        let id = self.post_write_batch_wr(wrs)?;
        self.shared.wait(id, self.timeout)
    }

    /// Posts a batch of RDMA reads with one `ibv_post_send` call, only the
    /// last one signaled, and blocks until all completed (bounded by the
    /// timeout). Each read has its own exclusive scatter list. See
    /// [`send_batch`](Self::send_batch).
    pub fn read_batch<'op>(
        &'op mut self,
        wrs: &mut [ReadWorkRequest<'op, 'op>],
    ) -> TransportResult<WorkSuccess> {
        let id = self.post_read_batch_wr(wrs)?;
        self.shared.wait(id, self.timeout)
    }

    // ----- unpolled operations ------------------------------------------------

    /// Posts a send without polling for its completion.
    ///
    /// # Safety
    /// The returned [`PendingWork`] must not be leaked (e.g. via
    /// `mem::forget`): that would end the borrow of the data without dropping
    /// it while the hardware may still access the memory. Prefer
    /// [`scope`](Self::scope) or [`manual_scope`](Self::manual_scope), which
    /// prevent this.
    pub unsafe fn send_unpolled<'data>(
        &mut self,
        wr: SendWorkRequest<'_, 'data>,
    ) -> IbvResult<PendingWork<'data>> {
        let id = self.post_send_wr(&wr).map_err(into_ibv)?;
        Ok(PendingWork::new(self.shared.clone(), id, self.timeout))
    }

    /// Posts a receive without polling for its completion.
    ///
    /// # Safety
    /// The returned [`PendingWork`] must not be leaked (e.g. via
    /// `mem::forget`): that would end the borrow of the data without dropping
    /// it while the hardware may still access the memory. Prefer
    /// [`scope`](Self::scope) or [`manual_scope`](Self::manual_scope), which
    /// prevent this.
    pub unsafe fn receive_unpolled<'data>(
        &mut self,
        mut wr: ReceiveWorkRequest<'_, 'data>,
    ) -> IbvResult<PendingWork<'data>> {
        let id = self.post_recv_wr(&mut wr).map_err(into_ibv)?;
        Ok(PendingWork::new(self.shared.clone(), id, self.timeout))
    }

    /// Posts an RDMA write without polling for its completion.
    ///
    /// # Safety
    /// The returned [`PendingWork`] must not be leaked (e.g. via
    /// `mem::forget`): that would end the borrow of the data without dropping
    /// it while the hardware may still access the memory. Prefer
    /// [`scope`](Self::scope) or [`manual_scope`](Self::manual_scope), which
    /// prevent this.
    pub unsafe fn write_unpolled<'data>(
        &mut self,
        wr: WriteWorkRequest<'_, 'data>,
    ) -> IbvResult<PendingWork<'data>> {
        let id = self.post_write_wr(&wr).map_err(into_ibv)?;
        Ok(PendingWork::new(self.shared.clone(), id, self.timeout))
    }

    /// Posts an RDMA read without polling for its completion.
    ///
    /// # Safety
    /// The returned [`PendingWork`] must not be leaked (e.g. via
    /// `mem::forget`): that would end the borrow of the data without dropping
    /// it while the hardware may still access the memory. Prefer
    /// [`scope`](Self::scope) or [`manual_scope`](Self::manual_scope), which
    /// prevent this.
    pub unsafe fn read_unpolled<'data>(
        &mut self,
        mut wr: ReadWorkRequest<'_, 'data>,
    ) -> IbvResult<PendingWork<'data>> {
        let id = self.post_read_wr(&mut wr).map_err(into_ibv)?;
        Ok(PendingWork::new(self.shared.clone(), id, self.timeout))
    }

    // ----- scopes --------------------------------------------------------------

    /// Opens a polling scope that automatically polls all outstanding work
    /// requests when it ends.
    ///
    /// This is the primary safe way to have many operations in flight. The
    /// closure receives a [`PollingScope`] through which operations are
    /// posted; each returns a handle that can be polled individually. When
    /// the closure returns, every work request that was not polled is polled
    /// to completion before this method returns — also if the closure
    /// panicked (the panic resumes after the drain), and also for handles
    /// that were `mem::forget`-ed: the scope, not the handle, owns the
    /// obligation to wait.
    ///
    /// # Errors
    /// * The closure returns `Err(e)`: outstanding work is still polled, then
    ///   [`ScopeError::ClosureError`]`(e)` is returned.
    /// * The closure returns `Ok(t)` but automatic polling finds a failed (or
    ///   timed-out) request: [`ScopeError::AutoPollError`].
    pub fn scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, Channel>) -> Result<T, E>,
    {
        let (result, errors, _unclaimed) = crate::scope::run(self, f);
        match result {
            Err(e) => Err(ScopeError::ClosureError(e)),
            Ok(t) => match errors.into_iter().next() {
                Some(err) => Err(ScopeError::AutoPollError(err)),
                None => Ok(t),
            },
        }
    }

    /// Opens a polling scope that enforces manual polling of all work
    /// requests.
    ///
    /// Like [`scope`](Self::scope), but the contract is that the closure
    /// polls everything it posts, so the closure's result is returned
    /// directly.
    ///
    /// # Panics
    /// If the closure succeeds but leaves work unpolled: the work is first
    /// polled to completion (so no memory is in use), then this panics as a
    /// safety net. If the closure returns an error, outstanding work is
    /// cleaned up without panicking.
    pub fn manual_scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, E>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, Channel>) -> Result<T, E>,
    {
        let (result, _errors, unclaimed) = crate::scope::run(self, f);
        match result {
            Ok(_) if unclaimed > 0 => panic!(
                "manual_scope: the closure returned Ok but left {unclaimed} work request(s) unpolled \
                 (they have now been polled to completion)"
            ),
            r => r,
        }
    }
}

/// A read's scatter list, its length, remote address and rkey.
type ReadRaw = (*mut sys::ibv_sge, i32, u64, u32);

/// A validated send or RDMA write, ready to become an `ibv_send_wr`.
struct GatherItem<'a, 'd> {
    gather: &'a [GatherElement<'d>],
    len: usize,
    opcode: sys::ibv_wr_opcode,
    /// Flags other than `IBV_SEND_SIGNALED`.
    flags: sys::ibv_send_flags,
    imm_be: u32,
    rdma: Option<(u64, u32)>,
}

impl GatherItem<'_, '_> {
    fn raw(&self, wr_id: u64, signaled: bool) -> sys::ibv_send_wr {
        let mut flags = self.flags;
        if signaled {
            flags |= sys::ibv_send_flags::IBV_SEND_SIGNALED;
        }
        let mut wr = sys::ibv_send_wr {
            wr_id,
            // `GatherElement` is `repr(transparent)` over `ibv_sge`; the
            // provider only reads the list.
            sg_list: self.gather.as_ptr() as *mut sys::ibv_sge,
            num_sge: self.gather.len() as i32,
            opcode: self.opcode,
            send_flags: flags.0,
            ..Default::default()
        };
        wr.__bindgen_anon_1.imm_data = self.imm_be;
        if let Some((remote_addr, rkey)) = self.rdma {
            wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
        }
        wr
    }
}

fn check_remote_len(
    op: Operation,
    len: usize,
    remote: &crate::RemoteMemoryRegion,
) -> TransportResult<()> {
    if len as u64 > remote.length() {
        return Err(TransportError::Post {
            operation: op,
            source: IbvError::InvalidArgument(format!(
                "{len} bytes do not fit the remote region of {} bytes",
                remote.length()
            )),
        });
    }
    Ok(())
}

fn scatter_list(scatter: &mut [ScatterElement<'_>]) -> (*mut sys::ibv_sge, i32) {
    // `ScatterElement` is `repr(transparent)` over `ibv_sge`.
    (scatter.as_mut_ptr().cast(), scatter.len() as i32)
}

fn into_ibv(e: TransportError) -> IbvError {
    match e {
        TransportError::Post { source, .. } | TransportError::Poll(source) => source,
        other => IbvError::InvalidArgument(other.to_string()),
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("caps", &self.caps)
            .field("timeout", &self.timeout)
            .field("unusable", &self.unusable_reason())
            .finish()
    }
}

/// Why [`Channel::handshake`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The TCP exchange failed or the peer sent garbage.
    #[error("endpoint exchange failed: {0}")]
    Io(#[from] io::Error),
    /// Connecting the queue pair failed.
    #[error("connecting the queue pair failed: {0}")]
    Connect(#[from] IbvError),
}
