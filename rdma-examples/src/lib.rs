//! Helpers shared by the example programs of this crate.
//!
//! The programs (under `src/bin/`):
//!
//! * `devices` — lists RDMA devices, their ports and GID tables
//!   (what `ibv_devices` and `ibv_devinfo -v` show).
//! * `rc_pingpong` — wire-compatible with rdma-core's `ibv_rc_pingpong`.
//! * `perf` — bandwidth and latency of RDMA write, RDMA read and send/receive
//!   in the spirit of perftest (`ib_write_bw`, `ib_read_lat`, ...), with the
//!   data checked at the end of every test.
//! * `one_sided` — libevpl's one-sided pattern: RDMA reads and writes from
//!   several local iovecs with completion callbacks.
//!
//! Every peer is untrusted: what arrives over TCP is read with a deadline
//! ([`net::Link`]), decoded by a protocol module that checks every number
//! against the limits the command line has ([`limit::Limit`]), and only
//! then sizes an allocation, which may fail with an error
//! (`rdma_safe::RegisteredBuffer::new`, [`shared::expose`]).
//!
//! Modules: the flags every program shares, defined once ([`flags`]),
//! optional device features a flag asks for, decided from the device's
//! attributes ([`support`]), command-line value parsers ([`cli`]), limits shared by the
//! command line and the decoders ([`limit`]), opening and checking a device
//! before serving ([`device`]), TCP with deadlines ([`net`]), the
//! `ibv_rc_pingpong` address message ([`pingpong`]), the buffers peers
//! read and write by RDMA ([`shared`]), deterministic data
//! patterns ([`pattern`]), cheap timestamps ([`clock`]), statistics in
//! perftest's units ([`stats`]); the decoders' property tests share
//! `fuzz.rs` (test code only).

pub mod cli;
pub mod clock;
pub mod device;
pub mod flags;
#[cfg(test)]
mod fuzz;
pub mod limit;
pub mod net;
pub mod pattern;
pub mod pingpong;
pub mod shared;
pub mod stats;
pub mod support;

/// The example programs' result: the library's one error type, so `?`
/// works across everything they call. A program's own failures (a peer
/// that broke the protocol, a bad argument) are [`fail`] errors.
pub use rdma_safe::Result;

/// A program's own failure, with a message: an
/// [`io::Error`](std::io::Error) of kind `Other` inside
/// [`rdma_safe::Error::Io`].
pub fn fail(msg: impl std::fmt::Display) -> rdma_safe::Error {
    std::io::Error::other(msg.to_string()).into()
}

/// The page size `-c` validates by (as rdma-core's examples: the first
/// byte of every page).
pub fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions; it only reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// The workspace README's first program compiles (`cargo test --doc`;
/// here, in the crate that is never published, as the README is not part
/// of any package).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;
