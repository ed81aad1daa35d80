//! [`StreamListener`]: accepts rsocket connections as [`RdmaStream`]s.

use super::blocking::RdmaStream;
use super::conn::{Conn, Parts};
use super::options;
use super::wire::ConnData;
use crate::cm::{CmOptions, Incoming, Listener};
use crate::error::Result;
use std::net::{SocketAddr, ToSocketAddrs};

/// Listens for byte-stream connections — from [`RdmaStream::connect`], or
/// from rsocket clients (`rstream -s`, `rcopy`, programs under
/// `librspreload.so`) — on an address, through the RDMA connection
/// manager.
#[derive(Debug)]
pub struct StreamListener {
    listener: Listener,
}

impl StreamListener {
    /// The connection manager's listener.
    #[cfg(feature = "tokio")]
    pub(super) fn listener(&self) -> &Listener {
        &self.listener
    }

    /// The request and its rsocket connection data; a request without is
    /// rejected.
    ///
    /// # Errors
    /// [`Error::Protocol`](crate::Error::Protocol) for private data that
    /// is not rsocket's connection data.
    pub(super) fn check(incoming: Incoming) -> Result<(Incoming, ConnData)> {
        match ConnData::decode(incoming.private_data()) {
            Ok(peer) => Ok((incoming, peer)),
            Err(e) => {
                // The requester learns of the refusal at once (a CM
                // reject), not by its timeout.
                if let Err(reject) = incoming.reject(&[]) {
                    log::debug!("rejecting a request that is not rsocket's: {reject}");
                }
                Err(e)
            }
        }
    }

    /// Listens on `addr` (`"ip:port"`; port 0 picks a free one) with
    /// [`CmOptions::default`].
    ///
    /// # Errors
    /// As [`Listener::bind`].
    pub fn bind(addr: impl ToSocketAddrs) -> Result<StreamListener> {
        Self::bind_with(addr, &CmOptions::default())
    }

    /// Listens on `addr` with `opts` (its timeout bounds each accept and
    /// then the accepted streams' waits; the queue capacities are the
    /// stream's own).
    ///
    /// # Errors
    /// As [`Listener::bind_with`].
    pub fn bind_with(addr: impl ToSocketAddrs, opts: &CmOptions) -> Result<StreamListener> {
        Ok(StreamListener {
            listener: Listener::bind_with(addr, &options(opts))?,
        })
    }

    /// The address listened on (with the port chosen, for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr()
    }

    /// Waits (up to the options' timeout) for a connection and accepts it.
    /// The receives are posted before the accept, so a client that writes
    /// at once finds them.
    ///
    /// # Errors
    /// [`Error::Protocol`](crate::Error::Protocol) for a request whose
    /// private data is not rsocket's connection data (version 1): the
    /// request is rejected, and the listener goes on listening;
    /// [`VerbsError::Timeout`](rdma_core::Error::Timeout) when no request
    /// came; the errors of registering the stream's memory and of the
    /// accept.
    pub fn accept(&self) -> Result<RdmaStream> {
        let (incoming, peer) = Self::check(self.listener.incoming()?)?;
        let parts = Parts::new(incoming.pd())?;
        let (channel, acceptance) = incoming.prepare()?;
        let shared = channel.shared();
        let recv = parts.receives(&shared)?;
        acceptance.accept(&parts.conn_data().encode())?;
        Ok(RdmaStream::from_conn(Conn::new(
            channel, shared, recv, parts, &peer,
        )))
    }
}
