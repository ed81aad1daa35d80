//! Error types of the safe API.

use rdma_core::{QpState, WcStatus};
use std::fmt;
use std::time::Duration;

/// Error of a verb (creating or configuring resources, posting).
pub type IbvError = rdma_core::Error;
/// Result of a verb.
pub type IbvResult<T> = Result<T, IbvError>;
/// Result of a data transfer.
pub type TransportResult<T> = Result<T, TransportError>;

/// The kind of operation a work request performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Two-sided send.
    Send,
    /// Two-sided receive.
    Receive,
    /// One-sided RDMA write.
    Write,
    /// One-sided RDMA read.
    Read,
    /// One-sided 64-bit atomic compare-and-swap.
    CompareAndSwap,
    /// One-sided 64-bit atomic fetch-and-add.
    FetchAndAdd,
    /// Binding a memory window to a region.
    BindWindow,
    /// Invalidating a memory window's remote key.
    InvalidateWindow,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Send => "send",
            Operation::Receive => "receive",
            Operation::Write => "RDMA write",
            Operation::Read => "RDMA read",
            Operation::CompareAndSwap => "atomic compare-and-swap",
            Operation::FetchAndAdd => "atomic fetch-and-add",
            Operation::BindWindow => "memory window bind",
            Operation::InvalidateWindow => "memory window invalidation",
        })
    }
}

/// Why a data transfer failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The work request could not be posted. Either nothing was handed to
    /// the NIC (the request was refused before the verb, or the verb named
    /// it as not taken) and the channel stays usable, or the verb failed
    /// without saying what it queued: then the channel was shut down and
    /// everything on it flushed or discarded before this was returned, so
    /// no memory of the request is still in use, and the channel is
    /// unusable.
    #[error("posting the {operation} failed: {source}")]
    Post {
        /// The operation.
        operation: Operation,
        /// Why.
        #[source]
        source: IbvError,
    },
    /// The NIC completed the work request with an error status.
    #[error("{operation} failed: {status} — {hint}", hint = status.hint())]
    WorkCompletion {
        /// The operation.
        operation: Operation,
        /// The completion status.
        status: WcStatus,
        /// The provider's error code.
        vendor_err: u32,
    },
    /// The bounded wait expired. The queue pair was moved to the error state
    /// and all its outstanding work was drained before this was returned, so
    /// no borrowed memory is still in use; the channel is now unusable.
    #[error(
        "{operation} did not complete within {timeout:?} (peer gone or not posting receives?); \
         the channel was shut down and its outstanding work drained"
    )]
    Timeout {
        /// The operation waited for.
        operation: Operation,
        /// The wait.
        timeout: Duration,
    },
    /// The peer of a channel made by the connection manager disconnected;
    /// the request was flushed and the channel is unusable.
    #[error("{operation} failed: the peer disconnected")]
    PeerDisconnected {
        /// The operation.
        operation: Operation,
    },
    /// The queue pair is not in a state that takes the request: requests on
    /// the send queue (sends, writes, reads, atomics, window operations)
    /// need a connected channel (ready to send), receives one that is at
    /// least initialised. Nothing was posted; the channel stays usable.
    #[error(
        "cannot post the {operation}: the queue pair is in state {state:?}, not ready for it \
         (connect the channel first)"
    )]
    NotReady {
        /// The operation.
        operation: Operation,
        /// The queue pair's state when the request was refused.
        state: QpState,
    },
    /// The channel was shut down by an earlier failure or timeout.
    #[error("channel unusable: {0}")]
    Unusable(String),
    /// Polling the completion queue failed.
    #[error("polling the completion queue failed: {0}")]
    Poll(#[source] IbvError),
}

impl TransportError {
    /// The completion status, if the NIC reported one.
    pub fn status(&self) -> Option<WcStatus> {
        match self {
            TransportError::WorkCompletion { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Error of [`Channel::scope`](crate::Channel::scope).
#[derive(Debug, thiserror::Error)]
pub enum ScopeError<E> {
    /// The closure returned an error (outstanding work was still polled to
    /// completion before returning).
    #[error("scope closure failed: {0}")]
    ClosureError(E),
    /// The closure succeeded, but a work request it left for automatic
    /// polling failed. Holds the first failure.
    #[error("automatic polling at the end of the scope failed: {0}")]
    AutoPollError(TransportError),
}

impl<E> ScopeError<E> {
    /// Collapses both variants into one error type, e.g. `TransportError`
    /// when the closure's error is a `TransportError` too.
    pub fn flatten(self) -> E
    where
        E: From<TransportError>,
    {
        match self {
            ScopeError::ClosureError(e) => e,
            ScopeError::AutoPollError(e) => E::from(e),
        }
    }
}

/// Lets `channel.scope(..)?` be used in a function returning
/// [`TransportResult`] when the closure's error is a [`TransportError`].
impl From<ScopeError<TransportError>> for TransportError {
    fn from(e: ScopeError<TransportError>) -> Self {
        e.flatten()
    }
}

/// Every error of this crate, for `?` across connecting, registering,
/// transferring and decoding:
///
/// ```no_run
/// use rdma_safe::{ProtectionDomain, RegisteredBuffer, SendWorkRequest};
///
/// fn main() -> Result<(), rdma_safe::Error> {
///     let pd = ProtectionDomain::open("rxe0")?; // Error::Verbs
///     let buf = RegisteredBuffer::new(&pd, 64)?; // Error::Alloc or Verbs
///     let mut channel = pd.create_channel()?;
///     channel.send(SendWorkRequest::new(&[buf.gather(..)]))?; // Error::Transport
///     Ok(())
/// }
/// ```
///
/// The specific types stay available (and are what the individual calls
/// return): match on a variant to get one back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb failed (creating or configuring resources): see [`IbvError`].
    #[error(transparent)]
    Verbs(#[from] IbvError),
    /// A transfer failed, timed out or could not be posted.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Exchanging endpoints or connecting over a stream failed.
    #[error(transparent)]
    Handshake(#[from] crate::exchange::HandshakeError),
    /// Bytes from a peer are not an endpoint.
    #[error(transparent)]
    EndpointDecode(#[from] crate::endpoint::EndpointDecodeError),
    /// A remote region is malformed or a range lies outside it.
    #[error(transparent)]
    RemoteRegion(#[from] crate::remote::RemoteRegionError),
    /// A scatter/gather element could not be built.
    #[error(transparent)]
    Element(#[from] crate::sge::ScatterGatherElementError),
    /// Memory for a buffer could not be allocated.
    #[error(transparent)]
    Alloc(#[from] crate::aligned::AllocError),
    /// A buffer pool could not be created or is exhausted.
    #[error(transparent)]
    Pool(#[from] crate::pool::PoolError),
    /// Other I/O (e.g. a stream used to exchange regions).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Result of any operation of this crate, with [`Error`] by default.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `channel.scope(..)?` in a function returning [`Result`]: a closure error
/// and a failure found while draining both become an [`Error`].
impl<E: Into<Error>> From<ScopeError<E>> for Error {
    fn from(e: ScopeError<E>) -> Self {
        match e {
            ScopeError::ClosureError(e) => e.into(),
            ScopeError::AutoPollError(e) => Error::Transport(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::PoolError;

    /// `BufferPool::new(..)?` in a function returning `rdma_safe::Result`.
    #[test]
    fn pool_errors_convert() {
        fn make() -> Result<()> {
            Err(PoolError::InvalidSize("zero buffers".into()))?;
            Ok(())
        }
        let err = make().expect_err("an error");
        assert!(matches!(err, Error::Pool(PoolError::InvalidSize(_))));
        assert_eq!(err.to_string(), "invalid pool geometry: zero buffers");
    }
}
