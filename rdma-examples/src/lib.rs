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
//! * `rstream` — rdmacm-utils' stream benchmark on `rdma_safe::stream`:
//!   rstream's command line, test and result line, so the C program is
//!   either peer (the bench's stream rows run both).
//! * `rcopy` — wire-compatible with rdma-core's `rcopy`: a file copy over
//!   `rdma_safe::stream`'s rsocket byte stream.
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
/// byte of every page): the kernel's `AT_PAGESZ` for this process, read
/// from `/proc/self/auxv` (what `sysconf(_SC_PAGESIZE)` returns), 4096 if
/// that cannot be read. Read once per process.
pub fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        std::fs::read("/proc/self/auxv")
            .ok()
            .and_then(|auxv| auxv_entry(&auxv, AT_PAGESZ))
            .filter(|&n| n.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// `AT_PAGESZ` of `<elf.h>`: the auxiliary vector's page size entry.
const AT_PAGESZ: usize = 6;

/// The value of entry `key` of an auxiliary vector (pairs of native words,
/// ended by `AT_NULL`).
fn auxv_entry(auxv: &[u8], key: usize) -> Option<usize> {
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |b: &[u8]| usize::from_ne_bytes(b.try_into().expect("a whole word"));
    auxv.chunks_exact(2 * WORD)
        .map(|pair| (word(&pair[..WORD]), word(&pair[WORD..])))
        .take_while(|&(k, _)| k != 0)
        .find_map(|(k, v)| (k == key).then_some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_size_is_the_kernels() {
        let page = page_size();
        assert!(page.is_power_of_two() && page >= 4096, "{page}");
        let pair = |k: usize, v: usize| [k.to_ne_bytes(), v.to_ne_bytes()].concat();
        let auxv = [pair(33, 1), pair(6, 16384), pair(0, 0), pair(6, 1)].concat();
        assert_eq!(auxv_entry(&auxv, 6), Some(16384));
        assert_eq!(auxv_entry(&auxv, 7), None);
        assert_eq!(auxv_entry(&auxv[..5], 6), None);
    }
}

/// The workspace README's first program compiles (`cargo test --doc`;
/// here, in the crate that is never published, as the README is not part
/// of any package).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;
