//! The crate's error type and the helpers that turn verb return values into it.

use crate::wc::WcStatus;
use std::ffi::c_int;
use std::fmt;
use std::io;

/// Result of this crate's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the verbs layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb failed; `source` carries its errno.
    #[error("{verb} failed: {source}")]
    Verb {
        /// The libibverbs function that failed, e.g. `"ibv_modify_qp"`.
        verb: &'static str,
        /// The errno it reported.
        #[source]
        source: io::Error,
    },
    /// `ibv_get_device_list` returned no device.
    #[error(
        "no RDMA device found (no provider bound to hardware or soft-RoCE; \
         `rdma link add rxe0 type rxe netdev <if>` creates one)"
    )]
    NoDevice,
    /// No device has the requested name.
    #[error("RDMA device {name:?} not found (available: {available:?})")]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The names of the devices that exist.
        available: Vec<String>,
    },
    /// A work request completed with an error status.
    #[error("work request {wr_id:#x} failed: {status} ({hint}); vendor error {vendor_err:#x}", hint = status.hint())]
    WorkCompletion {
        /// The `wr_id` of the failed request.
        wr_id: u64,
        /// The completion status.
        status: WcStatus,
        /// The provider-specific error code.
        vendor_err: u32,
    },
    /// A post verb failed part-way through a list of work requests.
    #[error(transparent)]
    Post(#[from] PostError),
    /// The connection manager answered a step with an event other than the
    /// one awaited (a reject, an unreachable peer, an address error, …).
    #[error("{step} failed: {event} ({})", crate::CmEvent::describe(event, *status))]
    Cm {
        /// The step, named by its verb (`"rdma_connect"`, `"rdma_resolve_addr"`).
        step: &'static str,
        /// The event that came instead (`"RDMA_CM_EVENT_REJECTED"`).
        event: &'static str,
        /// The event's status (negated errno, or a reject reason).
        status: i32,
    },
    /// A bounded wait of the connection manager expired.
    #[error("{step} did not finish within {timeout:?}")]
    Timeout {
        /// The step waited for.
        step: &'static str,
        /// The bound.
        timeout: std::time::Duration,
    },
    /// An argument was rejected before any verb was called.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// The error of `verb` with errno `errno`.
    pub fn verb(verb: &'static str, errno: c_int) -> Self {
        Error::Verb {
            verb,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// The error of `verb` with the calling thread's current errno (EIO if the
    /// verb failed without setting one).
    pub fn last_os_error(verb: &'static str) -> Self {
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .filter(|&e| e != 0)
            .unwrap_or(libc::EIO);
        Self::verb(verb, errno)
    }

    /// The error of CM step `step` answered by `event`.
    pub(crate) fn cm(step: &'static str, event: &crate::CmEvent) -> Self {
        let status = match event {
            crate::CmEvent::AddrError { status }
            | crate::CmEvent::RouteError { status }
            | crate::CmEvent::ConnectError { status }
            | crate::CmEvent::Unreachable { status }
            | crate::CmEvent::Rejected { status, .. }
            | crate::CmEvent::Other { status, .. } => *status,
            _ => 0,
        };
        Error::Cm {
            step,
            event: event.name(),
            status,
        }
    }

    /// The errno of a failed verb, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verb { source, .. } => source.raw_os_error(),
            Error::Post(err) => Some(err.errno()),
            _ => None,
        }
    }

    /// The name of the verb that failed, if this is a verb failure.
    pub fn failed_verb(&self) -> Option<&'static str> {
        match self {
            Error::Verb { verb, .. } => Some(verb),
            Error::Post(err) => Some(err.verb()),
            _ => None,
        }
    }

    /// The completion status, if this is a failed work completion.
    pub fn wc_status(&self) -> Option<WcStatus> {
        match self {
            Error::WorkCompletion { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Checks an `int` returned by a verb: 0 is success; a positive value is an
/// errno (`ibv_modify_qp`, `ibv_post_send`, …); -1 means "see errno"; any
/// other negative value is a negated errno.
///
/// Inlined into the data-path verbs (`ibv_post_send`, `ibv_poll_cq`, …) so
/// that success costs one comparison; building the error stays out of line.
#[inline]
pub(crate) fn check_rc(verb: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(rc_error(verb, rc))
    }
}

#[cold]
fn rc_error(verb: &'static str, rc: c_int) -> Error {
    Error::verb(verb, rc_errno(rc))
}

/// The errno a failed verb's non-zero `rc` stands for (see [`check_rc`]).
#[cold]
fn rc_errno(rc: c_int) -> c_int {
    match rc {
        -1 => io::Error::last_os_error()
            .raw_os_error()
            .filter(|&e| e != 0)
            .unwrap_or(libc::EIO),
        rc if rc < 0 => -rc,
        rc => rc,
    }
}

/// A post verb (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`) that
/// failed on a list of work requests: which verb, its errno, and how many
/// requests of the list it posted before the one it rejected.
///
/// The requests before that one were posted and will complete; the
/// rejected one and those after it were not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostError {
    verb: &'static str,
    errno: c_int,
    posted: Option<usize>,
    requested: usize,
}

impl PostError {
    /// The error of `verb` returning `rc` on a list of `requested` requests,
    /// `posted` of which were posted (`None`: not known).
    #[cold]
    pub(crate) fn new(
        verb: &'static str,
        rc: c_int,
        posted: Option<usize>,
        requested: usize,
    ) -> Self {
        PostError {
            verb,
            errno: rc_errno(rc),
            posted,
            requested,
        }
    }
    /// The verb that failed.
    pub fn verb(&self) -> &'static str {
        self.verb
    }
    /// Its errno (`ENOMEM`: the queue is full; `EINVAL`: a malformed request,
    /// e.g. more SGEs or inline bytes than the queue allows).
    pub fn errno(&self) -> i32 {
        self.errno
    }
    /// How many requests, from the start of the list, were posted: the index
    /// of the rejected one. `None` when the provider did not name a request
    /// of the list.
    pub fn posted(&self) -> Option<usize> {
        self.posted
    }
    /// How many requests the list held.
    pub fn requested(&self) -> usize {
        self.requested
    }
    /// The errno as an [`io::Error`].
    pub fn io_error(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno)
    }
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}; ", self.verb, self.io_error())?;
        match self.posted {
            Some(n) => write!(
                f,
                "{n} of {} work requests posted before the failing one",
                self.requested
            ),
            None => write!(
                f,
                "the provider did not say how many of {} work requests were posted",
                self.requested
            ),
        }
    }
}

impl std::error::Error for PostError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_errno(value: c_int) {
        // SAFETY: the calling thread's errno slot is valid for writes.
        unsafe { *libc::__errno_location() = value };
    }

    #[test]
    fn zero_is_success() {
        set_errno(libc::EBUSY); // a stale errno must not matter
        assert!(check_rc("ibv_x", 0).is_ok());
    }

    #[test]
    fn a_positive_value_is_the_errno() {
        set_errno(0);
        let err = check_rc("ibv_post_send", libc::ENOMEM).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENOMEM));
        assert_eq!(err.failed_verb(), Some("ibv_post_send"));
    }

    #[test]
    fn minus_one_means_see_errno() {
        set_errno(libc::EAGAIN);
        let err = check_rc("ibv_x", -1).unwrap_err();
        assert_eq!(err.errno(), Some(libc::EAGAIN));
        // A verb that failed without setting errno still reports an error.
        set_errno(0);
        assert_eq!(check_rc("ibv_x", -1).unwrap_err().errno(), Some(libc::EIO));
    }

    #[test]
    fn another_negative_value_is_a_negated_errno() {
        set_errno(libc::EAGAIN);
        let err = check_rc("ibv_query_gid_ex", -libc::ENODATA).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENODATA));
    }

    #[test]
    fn the_message_names_the_verb_and_the_errno() {
        let err = check_rc("ibv_modify_qp", libc::EINVAL).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("ibv_modify_qp failed: "), "{text}");
        assert!(
            text.contains(&io::Error::from_raw_os_error(libc::EINVAL).to_string()),
            "{text}"
        );
    }
}
