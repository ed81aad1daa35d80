//! [`Connector`]: the active side — resolve an address, then connect.

use super::{access, domains, resolve, CmOptions};
use crate::channel::{Channel, CmQueue};
use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use rdma_core::{CmEvent, CmId, ConnectParams};
use std::fmt;
use std::net::ToSocketAddrs;

/// A connection being made: the address and route are resolved, so the
/// device is known and memory can be registered in [`pd`](Self::pd)
/// (e.g. to send its region as private data) before [`connect`](Self::connect).
pub struct Connector {
    pub(super) id: CmId,
    pub(super) pd: ProtectionDomain,
    pub(super) opts: CmOptions,
}

impl Connector {
    /// Resolves `addr` (`"host:port"`) to an RDMA device and a path,
    /// trying each address the name has in turn, each step bounded by
    /// `opts.timeout`.
    ///
    /// # Errors
    /// [`Error::Io`] when the name does not resolve;
    /// [`Error::Verbs`] with [`VerbsError::Cm`](rdma_core::Error::Cm) when no
    /// RDMA device reaches the address (`RDMA_CM_EVENT_ADDR_ERROR`) or no
    /// route does, [`VerbsError::Timeout`](rdma_core::Error::Timeout), or a
    /// verb's error.
    pub fn resolve(addr: impl ToSocketAddrs, opts: &CmOptions) -> Result<Connector> {
        Self::resolve_inner(None, addr, opts)
    }

    /// [`resolve`](Self::resolve), the channel in `pd` (open it with
    /// [`ProtectionDomain::open`]: it shares the connection manager's
    /// device context).
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve), and an error naming both devices when
    /// the address is reached through a device `pd` does not serve.
    pub fn resolve_in(
        pd: &ProtectionDomain,
        addr: impl ToSocketAddrs,
        opts: &CmOptions,
    ) -> Result<Connector> {
        Self::resolve_inner(Some(pd), addr, opts)
    }

    fn resolve_inner(
        chosen: Option<&ProtectionDomain>,
        addr: impl ToSocketAddrs,
        opts: &CmOptions,
    ) -> Result<Connector> {
        let mut last = None;
        let dsts = resolve(addr)?;
        let loopback = dsts.iter().all(|d| d.ip().is_loopback());
        for dst in dsts {
            let id = CmId::new()?;
            let attempt = id
                .resolve_addr(None, dst, opts.timeout)
                .and_then(|()| id.resolve_route(opts.timeout))
                .and_then(|()| id.context());
            match attempt {
                Ok(ctx) => return Self::found(id, &ctx, chosen, opts),
                Err(err) => last = Some(err),
            }
        }
        Err(unreachable(last, loopback))
    }

    /// The protection domain the channel will use, on the device the CM
    /// chose (the caller's, or the one shared by every default connection
    /// on that device): register the channel's memory here.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// Connects, sending `private_data` (at most
    /// [`MAX_CONNECT_PRIVATE_DATA`](rdma_core::MAX_CONNECT_PRIVATE_DATA)
    /// bytes), and returns the connected channel; the peer's accept data is
    /// its [`peer_private_data`](Channel::peer_private_data).
    ///
    /// # Errors
    /// [`Error::Verbs`] with [`VerbsError::InvalidArgument`](rdma_core::Error::InvalidArgument)
    /// for too much private data, [`VerbsError::Cm`](rdma_core::Error::Cm)
    /// when the peer rejects (nobody listening: reject reason 8) or is
    /// unreachable, [`VerbsError::Timeout`](rdma_core::Error::Timeout) after
    /// `opts.timeout`, or a verb's error.
    pub fn connect(self, private_data: &[u8]) -> Result<Channel> {
        let queue = self.queue()?;
        let mut params = self.opts.params(private_data);
        self.id.start_connect(&queue.qp, access(), &params)?;
        let timeout = self.opts.timeout;
        let event = self
            .id
            .get_event(timeout)?
            .ok_or(rdma_core::Error::Timeout {
                step: "rdma_connect",
                timeout,
            })?;
        self.finish_connect(queue, &mut params, event)
    }

    /// The connection once the peer answered (`event`): the path MTU
    /// bounded by what the peer's accept says it can take (see
    /// [`mtu_trailer`](super::mtu_trailer)), the queue pair made ready,
    /// the channel built.
    pub(super) fn finish_connect(
        self,
        queue: CmQueue,
        params: &mut ConnectParams<'_>,
        mut event: CmEvent,
    ) -> Result<Channel> {
        if let CmEvent::ConnectResponse(theirs) = &mut event {
            params.max_path_mtu = super::mtu_trailer::take(&mut theirs.private_data);
        }
        let theirs = self.id.connected(&queue.qp, params, event)?;
        self.into_channel(queue, theirs.private_data)
    }

    /// The queue pair the connection will use.
    pub(super) fn queue(&self) -> Result<CmQueue> {
        super::queue(&self.pd, &self.opts)
    }

    /// The connector for `id`, resolved onto the device context `ctx`, in
    /// `chosen` (or the domain shared on that device).
    ///
    /// # Errors
    /// `chosen` does not serve `ctx`, or the shared domain cannot be made.
    pub(super) fn found(
        id: CmId,
        ctx: &rdma_core::Context,
        chosen: Option<&ProtectionDomain>,
        opts: &CmOptions,
    ) -> Result<Connector> {
        let pd = domains::domain_for(ctx, chosen)?;
        Ok(Connector {
            id,
            pd,
            opts: *opts,
        })
    }

    /// The channel over `queue`, once connected; `private_data` is what
    /// the peer sent with its accept.
    pub(super) fn into_channel(self, queue: CmQueue, private_data: Vec<u8>) -> Result<Channel> {
        Channel::from_cm(self.id, &self.pd, queue, &self.opts, private_data, true)
    }
}

/// The error of resolving, when no address of the name led to a device:
/// the last attempt's, or for loopback addresses, what usually causes it.
pub(super) fn unreachable(last: Option<rdma_core::Error>, loopback: bool) -> Error {
    let last = last.expect("resolve returns at least one address");
    if loopback {
        // `rdma_resolve_route failed: No such device` says nothing of
        // the usual cause.
        return Error::Verbs(rdma_core::Error::InvalidArgument(format!(
            "no RDMA device reaches a loopback address ({last}): connect to the address \
             of an RDMA device's network interface (see `rdma link`), or add an rxe \
             device on lo (`rdma link add rxe_lo type rxe netdev lo`)"
        )));
    }
    Error::Verbs(last)
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("id", &self.id)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}
