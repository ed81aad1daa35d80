//! The crate's one error type, [`Error`], and what it is made of.
//!
//! Every fallible function of this crate returns [`Result<T>`](Result),
//! so `?` works across opening devices, registering memory, connecting,
//! transferring and decoding. Match on a variant for the details, or ask
//! the accessors: [`Error::kind`] (a small `Copy` classification),
//! [`Error::operation`] (the data-path operation that failed),
//! [`Error::status`] (the NIC's work-completion status), [`Error::errno`]
//! and [`std::error::Error::source`].
//!
//! The variants that carry more than a message hold the detail types of
//! this module ([`HandshakeError`], [`PoolError`], …), each the detail of
//! one kind.

use rdma_core::{QpState, WcStatus};
use std::fmt;
use std::time::Duration;

pub use crate::endpoint::EndpointDecodeError;
pub use crate::exchange::HandshakeError;
pub use crate::memory::aligned::AllocError;
pub use crate::memory::element::ScatterGatherElementError;
pub use crate::memory::remote::RemoteRegionError;
/// The verbs layer's error (rdma-core's): the detail of [`Error::Verbs`],
/// [`Error::Post`] and [`Error::Poll`].
pub use rdma_core::Error as VerbsError;
/// The device's asynchronous events, as [`Error::DeviceEvent`] names them.
pub use rdma_core::{AsyncEvent, CqId};

/// The design's name for the result of a verb (resources, posting): the
/// crate's [`Result`]. Kept as an alias so programs written against the
/// design compile.
pub type IbvResult<T> = Result<T>;
/// The design's name for the result of a data transfer: the crate's
/// [`Result`]. Kept as an alias so programs written against the design
/// compile.
pub type TransportResult<T> = Result<T>;

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

/// The likely cause of `status` on `operation`: where the operation
/// narrows the status down to one usual mistake, that mistake by name,
/// else the status's general hint.
fn completion_hint(operation: Operation, status: WcStatus) -> &'static str {
    match (operation, status) {
        (Operation::Send, WcStatus::RemoteOperationError | WcStatus::RemoteInvalidRequestError) => {
            "the message is most likely larger than the receive the peer had posted (its \
             receive buffer is too small for it); otherwise the peer's receive SGE was bad"
        }
        (Operation::Receive, WcStatus::LocalLengthError) => {
            "the incoming message was larger than this receive's buffer: post receives at \
             least as large as the largest message the peer sends"
        }
        (Operation::Receive, WcStatus::LocalQpOperationError) => {
            "most likely the incoming message was larger than this receive's buffer (rxe \
             reports that this way): post receives at least as large as the largest message \
             the peer sends"
        }
        _ => status.hint(),
    }
}

/// Why a pool could not be created or could not hand out a buffer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// Every buffer is in use (held by the program or by in-flight
    /// operations). Drop buffers, wait for operations, or make a larger pool.
    #[error("buffer pool exhausted: all {capacity} buffers of {buffer_size} bytes are in use")]
    Exhausted {
        /// Buffers in the pool.
        capacity: usize,
        /// Bytes per buffer.
        buffer_size: usize,
    },
    /// A size or count is zero or too large.
    #[error("invalid pool geometry: {0}")]
    InvalidSize(String),
}

/// What usually keeps `operation` from completing within its timeout.
fn timeout_hint(operation: Operation) -> &'static str {
    match operation {
        Operation::Receive => {
            "no message arrived: the peer sent none (a quiet peer is not a gone one; a keepalive \
             tells them apart)"
        }
        Operation::Send => "the peer posted no receive for it, or the path to it is gone",
        _ => "the peer's NIC did not answer, or the path to it is gone",
    }
}

/// Every error of this crate.
///
/// ```no_run
/// use rdma_safe::{ProtectionDomain, RegisteredBuffer, SendWorkRequest};
///
/// fn main() -> rdma_safe::Result<()> {
///     let pd = ProtectionDomain::open("rxe0")?; // Error::Verbs
///     let buf = RegisteredBuffer::new(&pd, 64)?; // Error::Alloc or Verbs
///     let mut channel = pd.create_channel()?;
///     channel.send(SendWorkRequest::new(&[buf.gather(..)]))?; // Error::NotReady
///     Ok(())
/// }
/// ```
///
/// The data-path variants ([`Post`](Error::Post) to [`Poll`](Error::Poll))
/// say what happened to the channel: after [`Timeout`](Error::Timeout),
/// [`PeerDisconnected`](Error::PeerDisconnected),
/// [`DeviceEvent`](Error::DeviceEvent),
/// [`Unusable`](Error::Unusable), a [`Post`](Error::Post) that may have
/// queued work, or a failed completion on a reliable connection, the
/// channel is unusable; every such error is returned only after the NIC
/// is done with the memory of the failed requests.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb or a connection-manager step failed (opening a device,
    /// creating or configuring resources, resolving or connecting): see
    /// [`VerbsError`] for which verb, and its errno or CM event.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
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
        source: VerbsError,
    },
    /// The NIC completed the work request with an error status.
    #[error("{operation} failed: {status} — {hint}", hint = completion_hint(*operation, *status))]
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
        "{operation} did not complete within {timeout:?} ({hint}); the channel was shut down \
         and its outstanding work drained",
        hint = timeout_hint(*operation)
    )]
    Timeout {
        /// The operation waited for.
        operation: Operation,
        /// The wait.
        timeout: Duration,
    },
    /// A scope ended with receives still posted and no message came for
    /// them within the channel's timeout: nobody sent what they were
    /// posted for. As for [`Timeout`](Self::Timeout), the channel was shut
    /// down and its outstanding work drained before this was returned.
    #[error(
        "the scope ended with {receives} receive(s) still posted, and no message arrived for \
         them within {timeout:?}: nobody sent what they were posted for (wait for or drop \
         only receives the peer will fill, or call `PollingScope::cancel_on_error` and end \
         the scope with an error); the channel was shut down and its outstanding work drained"
    )]
    UnfilledReceives {
        /// The receives left posted when the scope's closure returned that
        /// no message filled.
        receives: usize,
        /// The wait.
        timeout: Duration,
    },
    /// The peer is gone: the peer of a channel made by the connection
    /// manager disconnected (it closed the connection, or its process
    /// ended), or the peer of a channel with a keepalive
    /// ([`Channel::set_keepalive`](crate::Channel::set_keepalive)) did not
    /// answer a probe. The one error every operation on the connection
    /// reports from then on — a request in flight (flushed), a request
    /// posted later, a wait that expired or found the queue pair broken
    /// meanwhile — whether blocking, scoped, a future or a callback. Only
    /// a [`RecvStream`](crate::owned::RecvStream) says it differently: it
    /// ends (yields `None`). The channel is unusable.
    ///
    /// A request of the user's that runs out of transport retries on its
    /// own (a channel without the connection manager or a keepalive whose
    /// peer vanished) reports [`WorkCompletion`](Self::WorkCompletion) with
    /// `WcStatus::RetryExceeded`, and the requests flushed after it a
    /// flush: nothing told the channel the peer left.
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
    /// The device reported an asynchronous event that ends the channel:
    /// its queue pair failed (`IBV_EVENT_QP_FATAL`, `_QP_REQ_ERR`,
    /// `_QP_ACCESS_ERR`), its completion queue did (`IBV_EVENT_CQ_ERR`:
    /// every channel on that CQ), its port went down (`IBV_EVENT_PORT_ERR`:
    /// every channel on that port made before the event), or the whole
    /// device did (`IBV_EVENT_DEVICE_FATAL`: every channel on it). The one
    /// error every operation on the channel reports from then on — a
    /// request in flight (flushed), one posted later, a wait that looked —
    /// whether blocking, scoped, a future or a callback; it is returned
    /// only after the queue pair was moved to the error state and drained
    /// (what the device never flushed was discarded by a reset), so no
    /// memory of the failed requests is still in use. The channel is
    /// unusable; a new one works after a port error once the port is
    /// active again, after a QP or CQ event at once, after a device fatal
    /// error only on a device opened again. See
    /// [`docs::faults`](crate::docs::faults) for each event.
    #[error(
        "{operation} failed: the device reported {event}; the channel was shut down and its \
         outstanding work drained"
    )]
    DeviceEvent {
        /// The operation.
        operation: Operation,
        /// The event (naming its queue pair, CQ or port).
        event: rdma_core::AsyncEvent,
    },
    /// The channel was shut down by an earlier failure or timeout.
    #[error("channel unusable: {0}")]
    Unusable(String),
    /// Polling the completion queue failed.
    #[error("polling the completion queue failed: {0}")]
    Poll(#[source] VerbsError),
    /// Exchanging endpoints or connecting over a stream failed.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// Bytes from a peer are not an endpoint.
    #[error(transparent)]
    EndpointDecode(#[from] EndpointDecodeError),
    /// A remote region is malformed or a range lies outside it.
    #[error(transparent)]
    RemoteRegion(#[from] RemoteRegionError),
    /// A scatter/gather element could not be built.
    #[error(transparent)]
    Element(#[from] ScatterGatherElementError),
    /// Memory for a buffer could not be allocated.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// A buffer pool could not be created or is exhausted.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// Other I/O (e.g. a stream used to exchange regions).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The peer of a byte stream ([`RdmaStream`](crate::stream::RdmaStream))
    /// broke the rsocket protocol: connection data that is not rsocket's
    /// (or of a version other than 1), more bytes or messages than this
    /// side published room for, credits it never had, or a target entry
    /// that does not fit. The stream is shut down.
    #[error("rsocket protocol violated by the peer: {0}")]
    Protocol(String),
    /// A byte stream waited its timeout for the peer — for data to read,
    /// or for room (credits and published buffers) to write into — and
    /// none came. Nothing was lost or posted by the wait: the stream stays
    /// usable, and the call may be retried.
    #[error(
        "the stream waited {timeout:?} for the peer {waiting_for} and none came (the peer is \
         slow, stopped reading, or is gone); the stream stays usable"
    )]
    StreamTimeout {
        /// What the wait was for.
        waiting_for: &'static str,
        /// The wait.
        timeout: Duration,
    },
}

/// What kind of failure an [`Error`] is, for code that reacts to classes
/// of failure (retry, reconnect, report) rather than to one variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No RDMA device, or none of the name asked for.
    NoDevice,
    /// A verb failed with an errno (see [`Error::errno`]).
    Verb,
    /// The connection manager answered with a reject, an unreachable
    /// peer or an address or route error.
    Connect,
    /// A bounded wait expired: a transfer, a CM step or a handshake.
    TimedOut,
    /// The NIC completed a request with an error status (see
    /// [`Error::status`]).
    WorkCompletion,
    /// The peer of a CM channel disconnected.
    PeerDisconnected,
    /// The queue pair is not ready for the request (not connected).
    NotReady,
    /// The channel was shut down earlier.
    Unusable,
    /// The device reported an event that ends the channel (see
    /// [`Error::device_event`]).
    DeviceEvent,
    /// An argument or a request was refused before any verb ran (an
    /// element outside its region, a range outside a remote region, an
    /// invalid size).
    InvalidInput,
    /// A peer sent bytes that are not what the protocol expects.
    InvalidData,
    /// Every buffer of a pool is in use.
    Exhausted,
    /// Memory could not be allocated.
    OutOfMemory,
    /// A stream or file failed.
    Io,
}

impl Error {
    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Verbs(e) | Error::Post { source: e, .. } | Error::Poll(e) => verbs_kind(e),
            Error::WorkCompletion { .. } => ErrorKind::WorkCompletion,
            Error::Timeout { .. } | Error::UnfilledReceives { .. } => ErrorKind::TimedOut,
            Error::PeerDisconnected { .. } => ErrorKind::PeerDisconnected,
            Error::NotReady { .. } => ErrorKind::NotReady,
            Error::Unusable(_) => ErrorKind::Unusable,
            Error::DeviceEvent { .. } => ErrorKind::DeviceEvent,
            Error::Handshake(HandshakeError::Timeout { .. }) => ErrorKind::TimedOut,
            Error::Handshake(HandshakeError::Connect(e)) => verbs_kind(e),
            Error::Handshake(HandshakeError::Io(e)) | Error::Io(e) => io_kind(e),
            Error::EndpointDecode(_) => ErrorKind::InvalidData,
            Error::RemoteRegion(RemoteRegionError::BadEncoding(_)) => ErrorKind::InvalidData,
            Error::RemoteRegion(_) | Error::Element(_) => ErrorKind::InvalidInput,
            Error::Alloc(AllocError::OutOfMemory { .. }) => ErrorKind::OutOfMemory,
            Error::Alloc(_) | Error::Pool(PoolError::InvalidSize(_)) => ErrorKind::InvalidInput,
            Error::Pool(PoolError::Exhausted { .. }) => ErrorKind::Exhausted,
            Error::Protocol(_) => ErrorKind::InvalidData,
            Error::StreamTimeout { .. } => ErrorKind::TimedOut,
        }
    }

    /// The data-path operation that failed, if this is a transfer error.
    pub fn operation(&self) -> Option<Operation> {
        match self {
            Error::Post { operation, .. }
            | Error::WorkCompletion { operation, .. }
            | Error::Timeout { operation, .. }
            | Error::PeerDisconnected { operation }
            | Error::DeviceEvent { operation, .. }
            | Error::NotReady { operation, .. } => Some(*operation),
            Error::UnfilledReceives { .. } => Some(Operation::Receive),
            _ => None,
        }
    }

    /// The asynchronous event of the device that ended the channel, if
    /// this is [`Error::DeviceEvent`].
    pub fn device_event(&self) -> Option<rdma_core::AsyncEvent> {
        match self {
            Error::DeviceEvent { event, .. } => Some(*event),
            _ => None,
        }
    }

    /// The completion status, if the NIC reported one.
    pub fn status(&self) -> Option<WcStatus> {
        match self {
            Error::WorkCompletion { status, .. } => Some(*status),
            Error::Verbs(e) => e.wc_status(),
            _ => None,
        }
    }

    /// The errno of a failed verb or I/O call, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verbs(e)
            | Error::Post { source: e, .. }
            | Error::Poll(e)
            | Error::Handshake(HandshakeError::Connect(e)) => e.errno(),
            Error::Io(e) | Error::Handshake(HandshakeError::Io(e)) => e.raw_os_error(),
            _ => None,
        }
    }

    /// The verbs-layer error inside, if there is one: which verb or CM
    /// step failed.
    pub fn verbs(&self) -> Option<&VerbsError> {
        match self {
            Error::Verbs(e)
            | Error::Post { source: e, .. }
            | Error::Poll(e)
            | Error::Handshake(HandshakeError::Connect(e)) => Some(e),
            _ => None,
        }
    }
}

/// `err == detail`: whether `err` is the error `detail` converts into
/// (`assert_eq!(Endpoint::from_bytes(b).unwrap_err(), EndpointDecodeError::Magic)`).
macro_rules! eq_detail {
    ($($detail:ident => $variant:ident),* $(,)?) => {$(
        impl PartialEq<$detail> for Error {
            fn eq(&self, other: &$detail) -> bool {
                matches!(self, Error::$variant(e) if e == other)
            }
        }
    )*};
}
eq_detail! {
    AllocError => Alloc,
    EndpointDecodeError => EndpointDecode,
    RemoteRegionError => RemoteRegion,
    ScatterGatherElementError => Element,
}

fn verbs_kind(e: &VerbsError) -> ErrorKind {
    match e {
        VerbsError::NoDevice | VerbsError::DeviceNotFound { .. } => ErrorKind::NoDevice,
        VerbsError::WorkCompletion { .. } => ErrorKind::WorkCompletion,
        VerbsError::Cm { .. } => ErrorKind::Connect,
        VerbsError::Timeout { .. } => ErrorKind::TimedOut,
        VerbsError::InvalidArgument(_) => ErrorKind::InvalidInput,
        _ => ErrorKind::Verb,
    }
}

fn io_kind(e: &std::io::Error) -> ErrorKind {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => ErrorKind::TimedOut,
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof => {
            ErrorKind::InvalidData
        }
        _ => ErrorKind::Io,
    }
}

/// Result of every fallible function of this crate, with [`Error`] by
/// default.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    AutoPollError(Error),
}

impl<E> ScopeError<E> {
    /// Collapses both variants into the closure's error type (which takes
    /// an [`Error`]); `?` on the scope's result does the same in a function
    /// returning [`Result`].
    pub fn flatten(self) -> E
    where
        E: From<Error>,
    {
        match self {
            ScopeError::ClosureError(e) => e,
            ScopeError::AutoPollError(e) => E::from(e),
        }
    }
}

/// `channel.scope(..)?` in a function returning [`Result`]: a closure error
/// and a failure found while draining both become an [`Error`].
impl<E: Into<Error>> From<ScopeError<E>> for Error {
    fn from(e: ScopeError<E>) -> Self {
        match e {
            ScopeError::ClosureError(e) => e.into(),
            ScopeError::AutoPollError(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The accessors classify every variant, across the detail types.
    #[test]
    fn accessors_classify() {
        use std::time::Duration;
        let timeout = Error::Timeout {
            operation: Operation::Read,
            timeout: Duration::from_millis(5),
        };
        assert_eq!(timeout.kind(), ErrorKind::TimedOut);
        assert_eq!(timeout.operation(), Some(Operation::Read));
        assert!(timeout.to_string().contains("did not answer"), "{timeout}");
        let quiet = Error::Timeout {
            operation: Operation::Receive,
            timeout: Duration::from_millis(5),
        };
        assert!(quiet.to_string().contains("no message arrived"), "{quiet}");
        assert_eq!(timeout.status(), None);
        let failed = Error::WorkCompletion {
            operation: Operation::Write,
            status: WcStatus::RemoteAccessError,
            vendor_err: 0,
        };
        assert_eq!(failed.kind(), ErrorKind::WorkCompletion);
        assert_eq!(failed.status(), Some(WcStatus::RemoteAccessError));
        let cm = Error::Verbs(VerbsError::Timeout {
            step: "rdma_connect",
            timeout: Duration::from_secs(1),
        });
        assert_eq!(cm.kind(), ErrorKind::TimedOut);
        assert_eq!(cm.operation(), None);
        let verb = Error::Verbs(VerbsError::verb("ibv_reg_mr", 12));
        assert_eq!((verb.kind(), verb.errno()), (ErrorKind::Verb, Some(12)));
        assert_eq!(
            verb.verbs().and_then(VerbsError::failed_verb),
            Some("ibv_reg_mr")
        );
        let hs = Error::from(HandshakeError::Timeout {
            timeout: Duration::from_secs(1),
        });
        assert_eq!(hs.kind(), ErrorKind::TimedOut);
        let garbage = Error::from(HandshakeError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "bad",
        )));
        assert_eq!(garbage.kind(), ErrorKind::InvalidData);
        assert_eq!(
            Error::from(EndpointDecodeError::Magic).kind(),
            ErrorKind::InvalidData
        );
        let oob = ScatterGatherElementError::OutOfBounds { len: 4 };
        assert_eq!(Error::from(oob.clone()).kind(), ErrorKind::InvalidInput);
        assert_eq!(Error::from(oob.clone()), oob);
        let exhausted = Error::from(PoolError::Exhausted {
            capacity: 1,
            buffer_size: 8,
        });
        assert_eq!(exhausted.kind(), ErrorKind::Exhausted);
        assert_eq!(
            Error::from(AllocError::OutOfMemory { len: 1 }).kind(),
            ErrorKind::OutOfMemory
        );
        assert_eq!(Error::Unusable("x".into()).kind(), ErrorKind::Unusable);
    }
}
