//! Connecting channels by IP address and port through the RDMA connection
//! manager (librdmacm), as `rping`, `ib_write_bw -R` and most C services do:
//! the CM picks the device, port, GID and path; nothing is configured by
//! hand and no side channel is needed.
//!
//! * [`Listener::bind`] listens on an address; [`Listener::accept`] yields a
//!   connected [`Channel`], [`Listener::incoming`] an [`Incoming`] request to
//!   inspect (its private data), then accept with private data of one's own
//!   or reject.
//! * A requester may send the moment it is connected, before the accepting
//!   side sees the connection established (its ready-to-use message can be
//!   lost; the accept is then retransmitted seconds later). A service whose
//!   clients speak first posts its receives before accepting, as the C
//!   `rping` does: [`Incoming::prepare`] gives the channel (taking receives
//!   only) and an [`Acceptance`] to accept with once they are up.
//! * [`Channel::connect_to`] connects to `host:port` with optional private
//!   data (e.g. an encoded [`RemoteMemoryRegion`](crate::RemoteMemoryRegion));
//!   [`Connector`] splits resolving from connecting, to register memory on
//!   the chosen device first.
//! * With the `tokio` feature, each has a future form that blocks no
//!   thread: `Listener::accept_async`, `Listener::incoming_async` and
//!   `Listener::incoming_async_within`, `Incoming::accept_async`,
//!   `Acceptance::accept_async`,
//!   `Connector::resolve_async`, `Connector::connect_async` and
//!   `Channel::connect_to_async` — an async service needs neither a
//!   thread bridge nor `spawn_blocking`.
//!
//! Each side bounds the path MTU by its own port's, and the accept tells
//! the connecting side the accepting port's MTU (in the last 4 of the 196
//! bytes an accept carries, so user data gets [`MAX_ACCEPT_DATA`]): two
//! hosts with different MTUs agree on the smaller one, where the CM alone
//! would take the connecting side's.
//!
//! Which protection domain a CM-made channel uses ([`Channel::pd`] gives
//! it; [`Incoming::pd`] before accepting), on the device the CM chose:
//!
//! * by default ([`Listener::bind`], [`Listener::bind_with`],
//!   [`Channel::connect_to`], [`Connector::resolve`]) one domain per
//!   device, shared by every such channel of the process on that device
//!   and kept for the life of the process — so one table or one pool
//!   registered there serves every connection;
//! * with [`Listener::bind_in`], [`Channel::connect_in`] or
//!   [`Connector::resolve_in`], the caller's domain (opened with
//!   [`ProtectionDomain::open`](crate::ProtectionDomain::open)), for every
//!   connection; a connection on a device that domain does not serve is
//!   refused with an error naming both.
//!
//! Register the memory a channel uses in its domain: an element of another
//! domain is refused before posting. Everything else — blocking operations, scopes, batches, timeouts — is the same as
//! for any channel. When the peer disconnects, pending work is flushed at
//! once, and every operation — pending or posted later, blocking, scoped
//! or async — fails with
//! [`Error::PeerDisconnected`](crate::Error::PeerDisconnected); a
//! [`RecvStream`](crate::owned::RecvStream) ends instead. A peer that is
//! quiet (sends nothing, or only reads one-sidedly) keeps its connection;
//! one whose host died without a disconnect is found by
//! [`CmOptions::keepalive`].
//!
//! # Example
//!
//! A blocking one-sided table reader: one table in one protection domain
//! for every client, its region sent with the accept
//! (`rdma-safe/examples/kv_reader.rs`, run on a soft-RoCE device by
//! `cargo xtask test-rxe`; the async form of a service is
//! `examples/cm_service.rs`):
#![doc = concat!("```no_run\n", include_str!("../../examples/kv_reader.rs"), "```")]

#[cfg(feature = "tokio")]
mod asynchronous;
mod connector;
mod domains;
mod listener;
mod prepared;

pub use connector::Connector;
pub use listener::{Incoming, Listener};
pub use prepared::Acceptance;

use crate::channel::{Channel, DEFAULT_TIMEOUT};
use crate::error::Result;
use rdma_core::{AccessFlags, ConnectParams, QpCapabilities};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The settings of channels made through the connection manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CmOptions {
    /// Queue capacities (default: 128 sends, 128 receives, 4 SGEs each, no
    /// inline data).
    pub caps: QpCapabilities,
    /// Bound on every blocking wait: resolving, connecting, accepting, and
    /// then the channel's operations (default [`DEFAULT_TIMEOUT`], 30 s).
    pub timeout: Duration,
    /// Sleep on completion events instead of busy polling (default off).
    pub completion_events: bool,
    /// RDMA reads the peer may have outstanding here, and this side at the
    /// peer (default 16 each; an accept grants at most what was asked for).
    pub rd_atomic: u8,
    /// Local ACK timeout exponent: 4.096 µs · 2^n (default 17 ≈ 0.54 s, as
    /// for [`ConnectOptions`](crate::channel::ConnectOptions); the CM's own is 18 on
    /// RoCE).
    pub ack_timeout: u8,
    /// Transport retries (default 6: with the default ACK timeout a dead
    /// path fails work with `WcStatus::RetryExceeded` after 4.096 µs ·
    /// 2^17 · 7 ≈ 3.8 s; rxe takes 7 as "retry forever", leaving the
    /// channel's timeout to notice it). The connecting side's count
    /// applies to both ends: it travels in the connect request, and an
    /// accepted channel takes it from there (the accept carries none, so
    /// a [`Listener`]'s own count is not used).
    pub retry_count: u8,
    /// Receiver-not-ready retries (default 7, unlimited; the timeout still
    /// bounds every wait).
    pub rnr_retry_count: u8,
    /// How long a peer whose message found no receive posted waits before
    /// sending it again (RNR NAK timer, IB encoding; default 12, 0.64 ms).
    /// An accepted channel exists only once the connection is established,
    /// so a peer that sends at once meets this wait once.
    pub min_rnr_timer: u8,
    /// Connect requests the kernel queues for a [`Listener`] (default 64).
    pub backlog: i32,
    /// Probe a quiet peer after this long without a completion (default
    /// `None`: no keepalive). A dead quiet peer is then reported as
    /// [`Error::PeerDisconnected`](crate::Error::PeerDisconnected) within
    /// the interval plus the transport's retry budget (`ack_timeout`, and
    /// the connecting side's `retry_count`); [`Channel::set_keepalive`]
    /// gives the bound.
    pub keepalive: Option<Duration>,
}

impl Default for CmOptions {
    fn default() -> Self {
        CmOptions {
            caps: QpCapabilities::default(),
            timeout: DEFAULT_TIMEOUT,
            completion_events: false,
            rd_atomic: 16,
            ack_timeout: 17,
            retry_count: 6,
            rnr_retry_count: 7,
            min_rnr_timer: 12,
            backlog: 64,
            keepalive: None,
        }
    }
}

impl CmOptions {
    /// Sets the bound on every blocking wait.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the queue capacities.
    pub fn capabilities(mut self, caps: QpCapabilities) -> Self {
        self.caps = caps;
        self
    }

    /// Sets whether waits sleep on completion events.
    pub fn completion_events(mut self, on: bool) -> Self {
        self.completion_events = on;
        self
    }

    /// Sets the RDMA reads (and atomics) each side may have outstanding at
    /// the other (default 16).
    pub fn rd_atomic(mut self, n: u8) -> Self {
        self.rd_atomic = n;
        self
    }

    /// Sets the local ACK timeout exponent, 4.096 µs · 2^`exp` (default
    /// 17, ≈ 0.54 s).
    pub fn ack_timeout(mut self, exp: u8) -> Self {
        self.ack_timeout = exp;
        self
    }

    /// Sets the transport retries before work fails with
    /// `WcStatus::RetryExceeded` (default 6; 7 is "forever" on rxe). The
    /// connecting side's count is both ends' (see
    /// [`CmOptions::retry_count`](#structfield.retry_count)).
    pub fn retry_count(mut self, n: u8) -> Self {
        self.retry_count = n;
        self
    }

    /// Sets the receiver-not-ready retries (default 7, unlimited).
    pub fn rnr_retry_count(mut self, n: u8) -> Self {
        self.rnr_retry_count = n;
        self
    }

    /// Sets the RNR NAK timer a peer waits before resending a message that
    /// found no receive posted (IB encoding; default 12, 0.64 ms).
    pub fn min_rnr_timer(mut self, code: u8) -> Self {
        self.min_rnr_timer = code;
        self
    }

    /// Sets how many connect requests the kernel queues for a
    /// [`Listener`] (default 64).
    pub fn backlog(mut self, n: i32) -> Self {
        self.backlog = n;
        self
    }

    /// Sets the keepalive interval (see [`CmOptions::keepalive`] and
    /// [`Channel::set_keepalive`]; default none).
    pub fn keepalive(mut self, interval: Duration) -> Self {
        self.keepalive = Some(interval);
        self
    }

    fn params<'a>(&self, private_data: &'a [u8]) -> ConnectParams<'a> {
        ConnectParams {
            private_data,
            responder_resources: self.rd_atomic,
            initiator_depth: self.rd_atomic,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            min_rnr_timer: self.min_rnr_timer,
            ack_timeout: Some(self.ack_timeout),
            max_path_mtu: None,
        }
    }
}

/// The user's share of an accept's private data: the transport carries
/// [`MAX_ACCEPT_PRIVATE_DATA`](rdma_core::MAX_ACCEPT_PRIVATE_DATA) bytes,
/// and the last four carry the accepting port's MTU (see the [module](self) docs).
pub const MAX_ACCEPT_DATA: usize = rdma_core::MAX_ACCEPT_PRIVATE_DATA - 4;

/// `timeout` from now (far in the future for `Duration::MAX`): the end
/// of every bounded CM wait, blocking or async.
fn deadline(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Path MTU agreement. On RoCE the CM takes the path MTU from the active
/// side's interface alone: a client on a 4096-byte link connecting to a
/// server on a 1500-byte one would send frames the server's link cannot
/// carry. So each side bounds its queue pair's path MTU by its own port's
/// active MTU, and the accepting side appends its MTU to the accept's
/// private data — `b"MTU"` and its size in units of 256 bytes, in the last four of
/// its 196 bytes — which the connecting side takes as a further bound and
/// removes before the channel shows the private data. A peer that sends no
/// such trailer (a C program) bounds nothing; one that does not look for it
/// sees four bytes after the padding.
mod mtu_trailer {
    use super::MAX_ACCEPT_DATA;
    use crate::error::{Error, Result};
    use rdma_core::{Mtu, MAX_ACCEPT_PRIVATE_DATA};

    const TAG: &[u8; 3] = b"MTU";

    /// `user` (at most [`MAX_ACCEPT_DATA`] bytes), padded, with `mtu` in
    /// the trailer.
    pub(super) fn accept_data(user: &[u8], mtu: Mtu) -> Result<[u8; MAX_ACCEPT_PRIVATE_DATA]> {
        if user.len() > MAX_ACCEPT_DATA {
            return Err(Error::Verbs(rdma_core::Error::InvalidArgument(format!(
                "rdma_accept: {} bytes of private data do not fit: at most {MAX_ACCEPT_DATA} \
                 (the transport carries {MAX_ACCEPT_PRIVATE_DATA}, the last 4 the path MTU)",
                user.len()
            ))));
        }
        let mut data = [0u8; MAX_ACCEPT_PRIVATE_DATA];
        data[..user.len()].copy_from_slice(user);
        data[MAX_ACCEPT_DATA..MAX_ACCEPT_DATA + 3].copy_from_slice(TAG);
        data[MAX_ACCEPT_PRIVATE_DATA - 1] = (mtu.bytes() / 256) as u8;
        Ok(data)
    }

    /// The MTU an accept's private data carries, if it does; the trailer
    /// is zeroed (it is the transport's, not the peer's data).
    pub(super) fn take(data: &mut [u8]) -> Option<Mtu> {
        let trailer = data.get_mut(MAX_ACCEPT_DATA..MAX_ACCEPT_PRIVATE_DATA)?;
        if &trailer[..3] != TAG {
            return None;
        }
        let mtu = Mtu::from_bytes(u32::from(trailer[3]) * 256);
        trailer.fill(0);
        mtu
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_trailer_round_trips_and_is_removed() {
            let mut data = accept_data(b"hello", Mtu::Mtu1024).expect("fits").to_vec();
            assert_eq!(&data[..5], b"hello");
            assert_eq!(take(&mut data), Some(Mtu::Mtu1024));
            assert!(data[5..].iter().all(|&b| b == 0), "only padding is left");
            // No trailer: nothing taken, nothing changed.
            let mut plain = vec![7u8; MAX_ACCEPT_PRIVATE_DATA];
            assert_eq!(take(&mut plain), None);
            assert!(plain.iter().all(|&b| b == 7));
            assert_eq!(take(&mut [0u8; 56]), None, "a connect request's data");
        }

        #[test]
        fn too_much_user_data_names_the_limit() {
            let err = accept_data(&[1; MAX_ACCEPT_DATA + 1], Mtu::Mtu4096).expect_err("too long");
            assert!(err.to_string().contains("at most 192"), "{err}");
            assert!(accept_data(&[1; MAX_ACCEPT_DATA], Mtu::Mtu4096).is_ok());
        }
    }
}

/// The queue pair (and completion queue) a connection will use, in `pd`.
///
/// # Errors
/// The error of creating either.
fn queue(pd: &crate::ProtectionDomain, opts: &CmOptions) -> Result<crate::channel::CmQueue> {
    crate::channel::CmQueue::new(pd, opts.caps, opts.completion_events)
}

/// What a CM-made channel's QP lets the peer do: everything a channel
/// offers (RDMA read, write and atomics on memory registered for it).
fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// The addresses `addr` names (`"host:port"`, a `SocketAddr`, …).
///
/// # Errors
/// [`Error::Io`](crate::Error::Io) when the name does not resolve or names
/// no address.
fn resolve(addr: impl ToSocketAddrs) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err(
            io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address").into(),
        );
    }
    Ok(addrs)
}

impl Channel {
    /// Connects to the listener at `addr` (`"host:port"`) through the RDMA
    /// connection manager, sending `private_data` (at most
    /// [`MAX_CONNECT_PRIVATE_DATA`](rdma_core::MAX_CONNECT_PRIVATE_DATA)
    /// bytes) with the request, with [`CmOptions::default`]. The peer's
    /// answer is [`peer_private_data`](Self::peer_private_data).
    ///
    /// # Errors
    /// As [`Connector::resolve`] and [`Connector::connect`].
    pub fn connect_to(addr: impl ToSocketAddrs, private_data: &[u8]) -> Result<Channel> {
        Self::connect_to_with(addr, private_data, &CmOptions::default())
    }

    /// [`connect_to`](Self::connect_to) with explicit options.
    ///
    /// # Errors
    /// As [`Connector::resolve`] and [`Connector::connect`].
    pub fn connect_to_with(
        addr: impl ToSocketAddrs,
        private_data: &[u8],
        opts: &CmOptions,
    ) -> Result<Channel> {
        Connector::resolve(addr, opts)?.connect(private_data)
    }

    /// [`connect_to_with`](Self::connect_to_with), the channel in `pd`
    /// (opened with [`ProtectionDomain::open`](crate::ProtectionDomain::open)),
    /// so that memory and pools of `pd` serve it.
    ///
    /// # Errors
    /// As [`Connector::resolve_in`] and [`Connector::connect`].
    pub fn connect_in(
        pd: &crate::ProtectionDomain,
        addr: impl ToSocketAddrs,
        private_data: &[u8],
        opts: &CmOptions,
    ) -> Result<Channel> {
        Connector::resolve_in(pd, addr, opts)?.connect(private_data)
    }
}
