//! [`Listener`]: the passive side — listen on an address and turn connect
//! requests into channels.

use super::{access, domains, resolve, CmOptions};
use crate::channel::{Channel, CmQueue};
use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use rdma_core::{CmId, ConnParams, ConnectParams, ConnectRequest, MAX_ACCEPT_PRIVATE_DATA};
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Listens for connections made through the RDMA connection manager
/// (`rdma_listen`). `Sync`: several threads may accept at once.
pub struct Listener {
    /// The event channel's registration with an async runtime, made by the
    /// first async call (declared first: dropped before the identifier).
    #[cfg(feature = "tokio")]
    pub(super) events: std::sync::OnceLock<super::asynchronous::AsyncEvents>,
    pub(super) id: CmId,
    pub(super) opts: CmOptions,
    /// The caller's domain ([`bind_in`](Self::bind_in)), for every
    /// connection; `None`: the domain shared per device.
    pd: Option<ProtectionDomain>,
}

impl Listener {
    /// Binds to `addr` (`"0.0.0.0:7174"`: every RDMA device; port 0: any
    /// free port, see [`local_addr`](Self::local_addr)) and listens, with
    /// [`CmOptions::default`].
    ///
    /// # Errors
    /// [`Error::Io`] when the name does not resolve; the error of
    /// `rdma_bind_addr` (`EADDRINUSE`; `EADDRNOTAVAIL`: no RDMA device has
    /// that address) or `rdma_listen`.
    pub fn bind(addr: impl ToSocketAddrs) -> Result<Listener> {
        Self::bind_with(addr, &CmOptions::default())
    }

    /// [`bind`](Self::bind) with explicit options for the accepted channels.
    ///
    /// # Errors
    /// As [`bind`](Self::bind).
    pub fn bind_with(addr: impl ToSocketAddrs, opts: &CmOptions) -> Result<Listener> {
        Self::bind_inner(None, addr, opts)
    }

    /// [`bind_with`](Self::bind_with), every accepted channel in `pd`: one
    /// registered table or one [`BufferPool`](crate::BufferPool) of `pd`
    /// then serves every client. Open `pd` with
    /// [`ProtectionDomain::open`] (it shares the connection manager's
    /// device context). Without this ([`bind`](Self::bind),
    /// [`bind_with`](Self::bind_with)), accepted channels use the domain
    /// the process shares per device (see the [module](super) docs);
    /// [`Incoming::pd`] and [`Channel::pd`](crate::Channel::pd) give the
    /// one a channel uses either way.
    ///
    /// # Errors
    /// As [`bind`](Self::bind). A request that arrives on a device `pd`
    /// does not serve fails [`incoming`](Self::incoming) with an error
    /// naming both (the listener keeps listening).
    pub fn bind_in(
        pd: &ProtectionDomain,
        addr: impl ToSocketAddrs,
        opts: &CmOptions,
    ) -> Result<Listener> {
        Self::bind_inner(Some(pd.clone()), addr, opts)
    }

    fn bind_inner(
        pd: Option<ProtectionDomain>,
        addr: impl ToSocketAddrs,
        opts: &CmOptions,
    ) -> Result<Listener> {
        let addr = resolve(addr)?[0];
        let id = CmId::new()?;
        id.bind_addr(addr)?;
        id.listen(opts.backlog)?;
        Ok(Listener {
            #[cfg(feature = "tokio")]
            events: std::sync::OnceLock::new(),
            id,
            opts: *opts,
            pd,
        })
    }

    /// The address listened on (with the port chosen when bound to port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// The options accepted channels get.
    pub fn options(&self) -> &CmOptions {
        &self.opts
    }

    /// Waits (up to the options' timeout) for a connect request and accepts
    /// it without private data of its own. The requester's private data is
    /// the channel's [`peer_private_data`](Channel::peer_private_data).
    ///
    /// # Errors
    /// [`VerbsError::Timeout`](rdma_core::Error::Timeout) when no request
    /// came in time, or as [`Incoming::accept`].
    pub fn accept(&self) -> Result<Channel> {
        self.incoming()?.accept(&[])
    }

    /// Waits (up to the options' timeout) for a connect request.
    ///
    /// # Errors
    /// [`VerbsError::Timeout`](rdma_core::Error::Timeout) when none came, or
    /// the error of preparing its device.
    pub fn incoming(&self) -> Result<Incoming> {
        self.incoming_within(self.opts.timeout)?
            .ok_or(Error::Verbs(rdma_core::Error::Timeout {
                step: "waiting for a connect request",
                timeout: self.opts.timeout,
            }))
    }

    /// Waits up to `timeout` for a connect request; `None` when none came.
    ///
    /// # Errors
    /// The error of taking the request, of allocating a protection domain
    /// on its device, or the refusal of a request on a device the
    /// listener's domain does not serve.
    pub fn incoming_within(&self, timeout: Duration) -> Result<Option<Incoming>> {
        match self.id.get_request(timeout)? {
            Some(request) => self.incoming_from(request).map(Some),
            None => Ok(None),
        }
    }

    /// The request, with the domain it will use.
    ///
    /// # Errors
    /// As [`incoming_within`](Self::incoming_within).
    pub(super) fn incoming_from(&self, request: ConnectRequest) -> Result<Incoming> {
        let ConnectRequest { id, params } = request;
        // A request this listener's domain cannot serve is rejected (by
        // dropping it) and reported; the listener goes on.
        let pd = domains::domain_for(&id.context()?, self.pd.as_ref())?;
        Ok(Incoming {
            id,
            params,
            pd,
            opts: self.opts,
        })
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("id", &self.id)
            .field("opts", &self.opts)
            .field(
                "pd",
                &self.pd.as_ref().map(|pd| pd.context().name().to_owned()),
            )
            .finish()
    }
}

/// A connect request, not yet answered: accept it (with private data of
/// one's own) or reject it. Dropping it rejects it.
pub struct Incoming {
    pub(super) id: CmId,
    pub(super) params: ConnParams,
    pub(super) pd: ProtectionDomain,
    pub(super) opts: CmOptions,
}

impl Incoming {
    /// The requester's private data, padded by the transport to 56 bytes.
    pub fn private_data(&self) -> &[u8] {
        &self.params.private_data
    }

    /// The requester's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }

    /// The protection domain the channel will use, on the device the
    /// request came in on: the listener's ([`Listener::bind_in`]), or the
    /// one shared by every connection on that device. Register memory here
    /// before accepting, e.g. to send its region with the accept.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// Accepts, sending `private_data` (at most
    /// [`MAX_ACCEPT_DATA`](super::MAX_ACCEPT_DATA) bytes: the last 4 of the
    /// transport's 196 carry this port's MTU, see the [module](super)
    /// docs), and waits (up to the options' timeout) until the connection
    /// is established.
    ///
    /// The channel comes after the connection is established, so nothing
    /// is posted on it before: when the requester speaks first, post the
    /// receives before accepting with [`prepare`](Self::prepare) instead
    /// (see the [module](super) docs).
    ///
    /// # Errors
    /// [`VerbsError::InvalidArgument`](rdma_core::Error::InvalidArgument) for
    /// too much private data, [`VerbsError::Cm`](rdma_core::Error::Cm) when
    /// the requester gave up, [`VerbsError::Timeout`](rdma_core::Error::Timeout),
    /// or a verb's error.
    pub fn accept(self, private_data: &[u8]) -> Result<Channel> {
        let data = self.accept_data(private_data)?;
        let queue = self.queue()?;
        let params = self.params(&data);
        self.id
            .accept(&queue.qp, access(), &params, self.opts.timeout)?;
        self.into_channel(queue)
    }

    /// What the accept carries: `user`'s bytes and this port's MTU (see
    /// [`mtu_trailer`](super::mtu_trailer)).
    ///
    /// # Errors
    /// More than [`MAX_ACCEPT_DATA`](super::MAX_ACCEPT_DATA) bytes, or the
    /// port cannot be queried.
    pub(super) fn accept_data(&self, user: &[u8]) -> Result<[u8; MAX_ACCEPT_PRIVATE_DATA]> {
        super::mtu_trailer::accept_data(user, self.id.active_mtu()?)
    }

    /// The queue pair the connection will use.
    pub(super) fn queue(&self) -> Result<CmQueue> {
        super::queue(&self.pd, &self.opts)
    }

    /// What this side grants and asks for in its accept.
    pub(super) fn params<'a>(&self, private_data: &'a [u8]) -> ConnectParams<'a> {
        let mut params = self.opts.params(private_data);
        // Grant no more reads than the requester can issue, and issue no
        // more than it grants.
        params.responder_resources = params
            .responder_resources
            .min(self.params.responder_resources);
        params.initiator_depth = params.initiator_depth.min(self.params.initiator_depth);
        params
    }

    /// The channel over `queue`, once the connection is established.
    pub(super) fn into_channel(self, queue: CmQueue) -> Result<Channel> {
        Channel::from_cm(
            self.id,
            &self.pd,
            queue,
            &self.opts,
            self.params.private_data,
            true,
        )
    }

    /// Rejects the request, sending `private_data` (at most
    /// [`MAX_REJECT_PRIVATE_DATA`](rdma_core::MAX_REJECT_PRIVATE_DATA) bytes).
    ///
    /// # Errors
    /// [`VerbsError::InvalidArgument`](rdma_core::Error::InvalidArgument) for
    /// too much private data, or the error of `rdma_reject`.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        Ok(self.id.reject(private_data)?)
    }
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Incoming")
            .field("peer", &self.peer_addr())
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}
