//! A channel connected through the RDMA connection manager: building it
//! around a CM-connected queue pair, and the watcher that turns the peer's
//! disconnect into a typed error on pending work.

use super::{Channel, ConnectOptions};
use crate::endpoint::Endpoint;
use crate::engine::{DeviceWatch, WorkQueue};
use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use crate::work::build::Limits;
use crate::work::WorkSuccess;
use rdma_core::{CmEvent, CmId, CompQueue, Mtu, QpCapabilities, QueuePair};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the watcher looks at its stop flag between CM events: the
/// longest a channel dropped outside an async runtime waits for its
/// watcher thread (inside one the drop does not wait; see `CmLink`'s
/// `Drop`).
const WATCH_TICK: Duration = Duration::from_millis(50);

/// What a CM-made connection keeps: its identifier, the peer's private
/// data, and the watcher thread. Shared by the channel and its engine
/// (which keeps it alive as long as anything can post on the connection);
/// dropping the last disconnects. The identifier is destroyed when the
/// link and the watcher thread have both let go of it: at once outside an
/// async runtime (the drop joins the watcher), within `WATCH_TICK` on the
/// watcher's own thread inside one.
pub(crate) struct CmLink {
    id: Arc<CmId>,
    private_data: Vec<u8>,
    shared: Arc<Shared>,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    stop: AtomicBool,
    disconnected: AtomicBool,
}

/// A queue pair and completion queue created for a CM connection, before
/// the connection exists.
pub(crate) struct CmQueue {
    pub(crate) qp: QueuePair,
    pub(crate) cq: CompQueue,
    pub(crate) limits: Limits,
}

impl CmQueue {
    /// An RC queue pair (in RESET) and its CQ in `pd`, which must live on
    /// the device context the CM chose for the connection.
    pub(crate) fn new(
        pd: &ProtectionDomain,
        caps: QpCapabilities,
        completion_events: bool,
    ) -> Result<Self> {
        let ctx = pd.context();
        let channel = if completion_events {
            Some(ctx.create_comp_channel()?)
        } else {
            None
        };
        let cq_size = (caps.max_send_wr + caps.max_recv_wr).max(1);
        let cq = CompQueue::new(ctx, cq_size, channel.as_ref(), 0)?;
        let qp = QueuePair::builder(pd.as_core(), rdma_core::QpType::Rc, &cq, &cq)
            .capabilities(caps)
            .build()?;
        let limits = Limits::granted(&qp, &caps);
        Ok(CmQueue { qp, cq, limits })
    }
}

impl Channel {
    /// The channel over `queue`, whose QP `id` has just connected or is
    /// about to be (its accept still to come). With `watched`, a watcher
    /// thread moves the QP to the error state when the peer disconnects,
    /// which flushes every pending request; without, no watcher takes
    /// `id`'s events (they are the accept's) until
    /// [`watch_cm`](Self::watch_cm).
    pub(crate) fn from_cm(
        id: CmId,
        pd: &ProtectionDomain,
        queue: CmQueue,
        opts: &crate::cm::CmOptions,
        private_data: Vec<u8>,
        watched: bool,
    ) -> Result<Channel> {
        let port = id.port_num();
        let ctx = pd.context();
        let port_attr = ctx.query_port(port)?;
        let gid = ctx.preferred_gid(port)?;
        let local = Endpoint {
            qp_num: queue.qp.qp_num(),
            psn: 0,
            port,
            lid: port_attr.lid(),
            gid: gid.gid,
            gid_index: u8::try_from(gid.index).unwrap_or(u8::MAX),
            mtu: port_attr.active_mtu().unwrap_or(Mtu::Mtu1024),
        };
        let link = Arc::new(CmLink {
            id: Arc::new(id),
            private_data,
            shared: Arc::new(Shared {
                stop: AtomicBool::new(false),
                disconnected: AtomicBool::new(false),
            }),
            watcher: Mutex::new(None),
        });
        // The engine keeps the connection: it lives as long as anything
        // that can post on it (this channel, its `SharedChannel`s, their
        // pending futures), and disconnects when the last of them goes.
        let work = Arc::new(WorkQueue::new(
            queue.qp,
            crate::engine::Completions::Own(queue.cq),
            opts.completion_events,
            queue.limits,
            DeviceWatch::for_port(ctx, port),
            Some(link.clone()),
        ));
        let channel = Channel {
            needs_grh: port_attr.needs_grh(),
            queue: work,
            pd: pd.clone(),
            local,
            gid,
            timeout: opts.timeout,
            // The connection manager set the queue pair up itself.
            connect_opts: ConnectOptions::default(),
            remote: None,
            scope_ids: Vec::new(),
            cm: Some(link),
        };
        channel.set_keepalive(opts.keepalive);
        if watched {
            channel.watch_cm()?;
        }
        Ok(channel)
    }

    /// Starts the thread that watches the connection's events (once the
    /// connection is established: before, its events are the accept's).
    ///
    /// # Errors
    /// The error of spawning the thread.
    pub(crate) fn watch_cm(&self) -> Result<()> {
        match self.pending_cm() {
            Some(pending) => pending.watch(),
            None => Ok(()),
        }
    }

    /// What finishing the accept of a CM-made channel needs, `None` for a
    /// channel connected otherwise.
    pub(crate) fn pending_cm(&self) -> Option<PendingCm> {
        self.cm.as_ref().map(|link| PendingCm {
            queue: self.queue.clone(),
            link: link.clone(),
        })
    }
}

/// A CM-made channel's engine and link, held by an accept not finished yet
/// ([`Acceptance`](crate::cm::Acceptance)).
pub(crate) struct PendingCm {
    queue: Arc<WorkQueue>,
    link: Arc<CmLink>,
}

impl PendingCm {
    pub(crate) fn qp(&self) -> &QueuePair {
        &self.queue.qp
    }

    pub(crate) fn id(&self) -> &CmId {
        &self.link.id
    }

    /// Starts the watcher thread (once).
    ///
    /// # Errors
    /// The error of spawning the thread.
    pub(crate) fn watch(&self) -> Result<()> {
        let link = &self.link;
        let mut slot = link.watcher.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return Ok(());
        }
        let (id, shared, work) = (
            link.id.clone(),
            link.shared.clone(),
            Arc::downgrade(&self.queue),
        );
        let watcher = std::thread::Builder::new()
            .name("rdma-cm-watch".into())
            .spawn(move || watch(&id, &shared, &work))
            .map_err(|e| rdma_core::Error::Verb {
                verb: "spawning the RDMA CM watcher thread",
                source: e,
            })?;
        *slot = Some(watcher);
        Ok(())
    }

    /// Whether a request posted before the accept (a receive: sends are
    /// refused until then) has completed: the requester's message arrived,
    /// so its side is connected.
    pub(crate) fn any_completed(&self) -> bool {
        // What the CQ holds now moves into the slots first. A CQ that
        // cannot be read counts as nothing new: the waits see that again
        // and handle it.
        let _ = self.queue.reap_now();
        self.queue.status().counters.completed > 0
    }

    /// The connection will not be established: marks it disconnected and
    /// moves the queue pair to the error state, which flushes the receives
    /// posted before the accept (they report
    /// [`Error::PeerDisconnected`]).
    pub(crate) fn abandon(&self) {
        self.link.shared.disconnected.store(true, Ordering::Release);
        if let Err(err) = self.queue.peer_disconnected() {
            log::warn!("moving the QP of a connection never established to ERR: {err}");
        }
    }
}

impl Channel {
    /// The private data the peer sent when the connection was made through
    /// the connection manager (with its connect request, or its accept);
    /// `None` for a channel connected otherwise. The transport pads it (to
    /// 56 bytes for a request, 196 for an accept): decode only the length
    /// your protocol sent.
    pub fn peer_private_data(&self) -> Option<&[u8]> {
        self.cm.as_ref().map(|cm| cm.private_data.as_slice())
    }

    /// Whether the peer of a CM-made channel has disconnected. Its pending
    /// work was then flushed, and whatever waits for it or is posted later
    /// — a blocking operation, a scope's handle, a
    /// [`SharedChannel`](crate::SharedChannel) future or callback — reports
    /// [`Error::PeerDisconnected`]; a
    /// [`RecvStream`](crate::owned::RecvStream) ends.
    pub fn peer_disconnected(&self) -> bool {
        self.cm
            .as_ref()
            .is_some_and(|cm| cm.shared.disconnected.load(Ordering::Acquire))
    }

    /// The peer's address, for a CM-made channel.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.cm.as_ref().and_then(|cm| cm.id.peer_addr())
    }

    /// Turns the failure of a blocking operation of a channel whose peer
    /// has disconnected into [`Error::PeerDisconnected`].
    #[inline]
    pub(crate) fn peer_gone(&self, outcome: Result<WorkSuccess>) -> Result<WorkSuccess> {
        match outcome {
            Err(Error::WorkCompletion { operation, .. })
            | Err(Error::Timeout { operation, .. })
                if self.peer_disconnected() =>
            {
                Err(Error::PeerDisconnected { operation })
            }
            other => other,
        }
    }
}

/// The watcher: waits for the connection's events until told to stop; on
/// a disconnect (or the device going away) moves the QP to the error
/// state, so that every pending request completes (flushed) at once
/// instead of waiting out the channel's timeout.
fn watch(id: &CmId, shared: &Shared, work: &Weak<WorkQueue>) {
    while !shared.stop.load(Ordering::Acquire) {
        match id.get_event(WATCH_TICK) {
            Ok(Some(CmEvent::Disconnected | CmEvent::DeviceRemoval)) => {
                shared.disconnected.store(true, Ordering::Release);
                // Held weakly: the engine keeps this thread's link alive,
                // not the other way round.
                if let Some(work) = work.upgrade() {
                    if let Err(err) = work.peer_disconnected() {
                        log::warn!("moving the QP of a disconnected channel to ERR: {err}");
                    }
                }
                return;
            }
            Ok(Some(other)) => log::debug!("CM event on a connected channel: {other}"),
            Ok(None) => {}
            Err(err) => {
                log::warn!("reading CM events: {err}");
                std::thread::sleep(WATCH_TICK);
            }
        }
    }
}

impl Drop for CmLink {
    fn drop(&mut self) {
        if !self.shared.disconnected.load(Ordering::Acquire) {
            // Tell the peer now rather than when the last handle on the
            // identifier goes; an error means it is gone already.
            let _ = self.id.disconnect();
        }
        self.shared.stop.store(true, Ordering::Release);
        let watcher = self
            .watcher
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(watcher) = watcher {
            // The last holder may be the watcher itself (it upgraded the
            // engine and dropped it last): it cannot join itself.
            if watcher.thread().id() != std::thread::current().id() && !on_async_runtime() {
                let _ = watcher.join();
            }
            // On an async runtime the watcher is left to end by itself
            // (within WATCH_TICK): it holds the identifier (an `Arc`), so
            // whichever of it and this link lets go last destroys it —
            // `rdma_destroy_id`, a blocking call, then runs on the
            // watcher's thread, not on the runtime's worker. Joining here
            // blocked the worker (and every task and timer on it) for up
            // to WATCH_TICK per dropped channel: measured ~50 ms between
            // the ends of a dead host's connections on a one-vCPU guest.
        }
    }
}

/// Whether the current thread runs (or blocks on behalf of) an async
/// runtime, whose worker a drop must not block.
fn on_async_runtime() -> bool {
    #[cfg(feature = "tokio")]
    {
        tokio::runtime::Handle::try_current().is_ok()
    }
    #[cfg(not(feature = "tokio"))]
    {
        false
    }
}

impl fmt::Debug for CmLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmLink")
            .field("id", &self.id)
            .field(
                "disconnected",
                &self.shared.disconnected.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}
