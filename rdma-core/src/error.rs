//! The crate's error type and the helpers that turn verb return values into it.

use crate::wc::WcStatus;
use std::ffi::c_int;
use std::io;
use std::time::Duration;

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
    /// An argument was rejected before any verb was called.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A bounded wait expired.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, &'static str),
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

    /// The errno of a failed verb, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verb { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The name of the verb that failed, if this is a verb failure.
    pub fn failed_verb(&self) -> Option<&'static str> {
        match self {
            Error::Verb { verb, .. } => Some(verb),
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
    match rc {
        -1 => Error::last_os_error(verb),
        rc if rc < 0 => Error::verb(verb, -rc),
        rc => Error::verb(verb, rc),
    }
}

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
