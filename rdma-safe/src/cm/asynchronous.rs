//! Connecting and accepting without blocking a thread (feature `tokio`):
//! the same steps as the blocking calls — resolve address and route,
//! connect; take a request, accept — each started with the verb and then
//! finished when its event arrives, the event channel's descriptor
//! awaited on tokio's reactor instead of `poll(2)`.
//!
//! Every await is bounded by the options' timeout, as the blocking calls
//! are. A future dropped half-way leaves nothing behind: the identifier
//! is destroyed (the peer sees a reject or a disconnect) and the queue
//! pair, which has no work posted yet, with it.

use super::connector::unreachable;
use super::{access, deadline, CmOptions, Connector, Incoming, Listener};
use crate::channel::Channel;
use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use rdma_core::{CmEvent, CmId, EventChannel};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

/// An RDMA CM event channel's descriptor registered with tokio's reactor.
/// It holds a duplicate of the descriptor, so the registration ends with
/// it, whatever becomes of the channel.
#[derive(Debug)]
pub(crate) struct AsyncEvents {
    fd: AsyncFd<OwnedFd>,
}

impl AsyncEvents {
    /// Registers `channel`'s descriptor with the current tokio runtime.
    ///
    /// # Errors
    /// Outside a tokio runtime with I/O enabled, or if duplicating or
    /// registering the descriptor fails.
    fn new(channel: &EventChannel) -> Result<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Io(io::Error::other(
                "the async connection manager calls need a tokio runtime (with enable_io)",
            )));
        }
        let fd = channel.as_fd().try_clone_to_owned()?;
        // SAFETY: an `OwnedFd` always returns the descriptor it owns, which
        // stays open until it is dropped — moved into the `AsyncFd`, it
        // lives exactly as long as the registration.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
            .map_err(|e| Error::Io(e.into_parts().1))?;
        Ok(AsyncEvents { fd })
    }

    /// The next event on `channel` (the one registered), or `None` once
    /// `deadline` has passed.
    ///
    /// # Errors
    /// The error of taking an event or of the reactor.
    async fn next(&self, channel: &EventChannel, deadline: Instant) -> Result<Option<CmEvent>> {
        loop {
            // Readiness is cleared before looking, so an event that
            // arrives after the look raises it again.
            if let Some(event) = channel.try_get_event()? {
                return Ok(Some(event));
            }
            let deadline = tokio::time::Instant::from_std(deadline);
            match tokio::time::timeout_at(deadline, self.fd.readable()).await {
                Err(_elapsed) => return Ok(None),
                Ok(Err(source)) => {
                    return Err(Error::Verbs(rdma_core::Error::Verb {
                        verb: "awaiting the RDMA CM event channel",
                        source,
                    }))
                }
                Ok(Ok(mut guard)) => guard.clear_ready(),
            }
        }
    }

    /// The next event on `id`'s channel within `timeout`, or a timeout
    /// error naming `step`.
    ///
    /// # Errors
    /// As [`next`](Self::next), and [`rdma_core::Error::Timeout`].
    async fn expect(&self, id: &CmId, step: &'static str, timeout: Duration) -> Result<CmEvent> {
        self.next(id.channel(), deadline(timeout))
            .await?
            .ok_or(Error::Verbs(rdma_core::Error::Timeout { step, timeout }))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Listener {
    /// [`incoming_within`](Self::incoming_within) as a future: waits up to
    /// `timeout` for a connect request on tokio's reactor; `None` when none
    /// came. The first async call registers the listener with the current
    /// runtime, which must then serve every later one. Several tasks may
    /// wait at once; each request goes to one of them. Dropping the future
    /// loses no request.
    ///
    /// # Errors
    /// As [`incoming_within`](Self::incoming_within), and outside a tokio
    /// runtime.
    pub async fn incoming_async_within(&self, timeout: Duration) -> Result<Option<Incoming>> {
        let events = self.events()?;
        let deadline = deadline(timeout);
        loop {
            match events.next(self.id.channel(), deadline).await? {
                None => return Ok(None),
                Some(CmEvent::ConnectRequest(request)) => {
                    return self.incoming_from(request).map(Some)
                }
                Some(other) => log::debug!("listener skipped {other}"),
            }
        }
    }

    /// [`incoming`](Self::incoming) as a future: waits up to the options'
    /// timeout for a connect request.
    ///
    /// # Errors
    /// [`VerbsError::Timeout`](rdma_core::Error::Timeout) when none came, or
    /// as [`incoming_async_within`](Self::incoming_async_within).
    pub async fn incoming_async(&self) -> Result<Incoming> {
        let timeout = self.opts.timeout;
        self.incoming_async_within(timeout)
            .await?
            .ok_or(Error::Verbs(rdma_core::Error::Timeout {
                step: "waiting for a connect request",
                timeout,
            }))
    }

    /// [`accept`](Self::accept) as a future: the next connect request,
    /// accepted without private data of its own.
    ///
    /// ```no_run
    /// # async fn serve() -> rdma_safe::Result<()> {
    /// use rdma_safe::{cm::CmOptions, Listener};
    /// use std::time::Duration;
    ///
    /// let listener = Listener::bind_with("0.0.0.0:7471", &CmOptions::default())?;
    /// loop {
    ///     // Many clients, one task each; no thread per connection attempt.
    ///     let Some(incoming) = listener.incoming_async_within(Duration::from_secs(60)).await?
    ///     else {
    ///         continue;
    ///     };
    ///     tokio::spawn(async move {
    ///         match incoming.accept_async(&[]).await {
    ///             Ok(channel) => { /* serve it, e.g. channel.shared().with_tokio() */ }
    ///             Err(err) => eprintln!("a client failed to connect: {err}"),
    ///         }
    ///     });
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`incoming_async`](Self::incoming_async) and
    /// [`Incoming::accept_async`].
    pub async fn accept_async(&self) -> Result<Channel> {
        self.incoming_async().await?.accept_async(&[]).await
    }

    /// The listener's registration with the runtime, made on first use.
    fn events(&self) -> Result<&AsyncEvents> {
        if let Some(events) = self.events.get() {
            return Ok(events);
        }
        let events = AsyncEvents::new(self.id.channel())?;
        // Another task may have registered meanwhile: its registration
        // wins and this one is dropped (a descriptor of its own).
        let _ = self.events.set(events);
        Ok(self.events.get().expect("set just above"))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Incoming {
    /// [`accept`](Self::accept) as a future: accepts, sending
    /// `private_data`, and awaits (up to the options' timeout) the
    /// connection's establishment.
    ///
    /// # Errors
    /// As [`accept`](Self::accept), and outside a tokio runtime.
    pub async fn accept_async(self, private_data: &[u8]) -> Result<Channel> {
        let events = AsyncEvents::new(self.id.channel())?;
        let data = self.accept_data(private_data)?;
        let queue = self.queue()?;
        let params = self.params(&data);
        self.id.start_accept(&queue.qp, access(), &params)?;
        let event = events
            .expect(&self.id, "rdma_accept", self.opts.timeout)
            .await?;
        CmId::established(event)?;
        drop(events);
        self.into_channel(queue)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl super::Acceptance {
    /// [`accept`](Self::accept) as a future: accepts, sending
    /// `private_data`, and awaits (up to the options' timeout) the
    /// connection's establishment.
    ///
    /// # Errors
    /// As [`accept`](Self::accept), and outside a tokio runtime.
    pub async fn accept_async(mut self, private_data: &[u8]) -> Result<()> {
        let outcome = async {
            let events = AsyncEvents::new(self.id().channel())?;
            self.start(private_data)?;
            let mut wait = super::prepared::EstablishWait::new(self.opts_timeout());
            loop {
                if let Some(event) = events.next(self.id().channel(), wait.look_until()).await? {
                    return Ok(CmId::established(event)?);
                }
                wait.nothing_yet(&self)?;
            }
        }
        .await;
        self.finish(outcome)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Connector {
    /// [`resolve`](Self::resolve) as a future: the address and the route
    /// resolved on tokio's reactor, each step bounded by `opts.timeout`. A
    /// name is looked up with [`tokio::net::lookup_host`].
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve), and outside a tokio runtime.
    pub async fn resolve_async(
        addr: impl tokio::net::ToSocketAddrs,
        opts: &CmOptions,
    ) -> Result<Connector> {
        Self::resolve_async_inner(None, addr, opts).await
    }

    /// [`resolve_in`](Self::resolve_in) as a future: the channel will be in
    /// `pd`.
    ///
    /// # Errors
    /// As [`resolve_in`](Self::resolve_in), and outside a tokio runtime.
    pub async fn resolve_in_async(
        pd: &ProtectionDomain,
        addr: impl tokio::net::ToSocketAddrs,
        opts: &CmOptions,
    ) -> Result<Connector> {
        Self::resolve_async_inner(Some(pd), addr, opts).await
    }

    async fn resolve_async_inner(
        chosen: Option<&ProtectionDomain>,
        addr: impl tokio::net::ToSocketAddrs,
        opts: &CmOptions,
    ) -> Result<Connector> {
        let dsts: Vec<_> = tokio::net::lookup_host(addr).await?.collect();
        if dsts.is_empty() {
            return Err(
                io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address").into(),
            );
        }
        let loopback = dsts.iter().all(|d| d.ip().is_loopback());
        let mut last = None;
        for dst in dsts {
            let id = CmId::new()?;
            let events = AsyncEvents::new(id.channel())?;
            let attempt = async {
                id.start_resolve_addr(None, dst, opts.timeout)?;
                let event = events
                    .expect(&id, "rdma_resolve_addr", opts.timeout)
                    .await?;
                CmId::addr_resolved(event)?;
                id.start_resolve_route(opts.timeout)?;
                let event = events
                    .expect(&id, "rdma_resolve_route", opts.timeout)
                    .await?;
                CmId::route_resolved(event)?;
                Ok(id.context()?)
            };
            let routed: Result<_> = attempt.await;
            drop(events);
            match routed {
                Ok(ctx) => return Connector::found(id, &ctx, chosen, opts),
                // A step of this address failed: the next one is tried.
                Err(Error::Verbs(err)) => last = Some(err),
                // The reactor failed: no address would do better.
                Err(other) => return Err(other),
            }
        }
        Err(unreachable(last, loopback))
    }

    /// [`connect`](Self::connect) as a future: sends the request with
    /// `private_data` and awaits (up to the options' timeout) the peer's
    /// answer.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and outside a tokio runtime.
    pub async fn connect_async(self, private_data: &[u8]) -> Result<Channel> {
        let events = AsyncEvents::new(self.id.channel())?;
        let queue = self.queue()?;
        let mut params = self.opts.params(private_data);
        self.id.start_connect(&queue.qp, access(), &params)?;
        let event = events
            .expect(&self.id, "rdma_connect", self.opts.timeout)
            .await?;
        drop(events);
        self.finish_connect(queue, &mut params, event)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Channel {
    /// [`connect_to_with`](Self::connect_to_with) as a future: resolves
    /// `addr` and connects on tokio's reactor, sending `private_data`; no
    /// thread is blocked and no `spawn_blocking` is needed.
    ///
    /// ```no_run
    /// # async fn client() -> rdma_safe::Result<()> {
    /// use rdma_safe::{cm::CmOptions, Channel};
    ///
    /// let channel = Channel::connect_to_async("192.168.77.1:7471", b"hello", &CmOptions::default())
    ///     .await?;
    /// let shared = channel.shared().with_tokio()?;
    /// # drop(shared);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Connector::resolve_async`] and [`Connector::connect_async`].
    pub async fn connect_to_async(
        addr: impl tokio::net::ToSocketAddrs,
        private_data: &[u8],
        opts: &CmOptions,
    ) -> Result<Channel> {
        Connector::resolve_async(addr, opts)
            .await?
            .connect_async(private_data)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_timeout_is_a_far_deadline() {
        let far = deadline(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(365 * 24 * 3600));
        let near = deadline(Duration::from_millis(5));
        assert!(near <= Instant::now() + Duration::from_millis(5));
    }
}
