//! The programs' exposed buffers: memory a peer reads and writes by RDMA,
//! as a [`RemoteAccessBuffer`] used as bytes.
//!
//! Rust reaches such a buffer only through atomic word accesses, so nothing
//! here needs the peer to be idle to be sound: a program copies a message
//! in to prepare it ([`update`]) and out to check it ([`copy_out`]) at the
//! moments its protocol says the peer leaves the buffer alone (otherwise it
//! would see a mix of old and new bytes, never undefined behaviour), and
//! spins on one byte while the peer's write lands ([`byte_word`]).

use rdma_safe::memory::AccessFlags;
use rdma_safe::{ProtectionDomain, RemoteAccessBuffer, RemoteMemoryRegion};
use std::ops::Range;
use std::sync::atomic::AtomicU64;

/// What the exposed buffers grant: local writes (a receive or read may land
/// in them), remote reads and writes, no remote atomics.
pub const READ_WRITE: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

/// `len` zeroed bytes (at least one; rounded up to whole 8-byte words)
/// registered in `pd` with [`READ_WRITE`] access; `what` names the buffer
/// in the error.
///
/// # Errors
/// The allocation failed (an error, not an abort) or the registration did
/// (see `ulimit -l`).
pub fn expose(pd: &ProtectionDomain, len: usize, what: &str) -> crate::Result<RemoteAccessBuffer> {
    RemoteAccessBuffer::with_access(pd, len.max(1), READ_WRITE)
        .map_err(|e| crate::fail(format!("{what} ({len} bytes): {e}")))
}

/// What a peer needs to reach the first `len` bytes of `buf`: the
/// buffer's length is rounded up to whole words, and the programs announce
/// the length they were asked for.
///
/// # Errors
/// `len` is beyond the buffer.
pub fn remote(buf: &RemoteAccessBuffer, len: usize) -> crate::Result<RemoteMemoryRegion> {
    buf.remote().slice(0, len as u64)
}

/// A copy of bytes `range` of `buf`.
///
/// # Errors
/// `range` is not within the buffer.
pub fn copy_out(buf: &RemoteAccessBuffer, range: Range<usize>) -> crate::Result<Vec<u8>> {
    let mut out = vec![0u8; range.len()];
    buf.read(range.start, &mut out)?;
    Ok(out)
}

/// Copies bytes `range` of `buf` out, lets `f` change the copy, and copies
/// it back in.
///
/// # Errors
/// `range` is not within the buffer.
pub fn update(
    buf: &RemoteAccessBuffer,
    range: Range<usize>,
    f: impl FnOnce(&mut [u8]),
) -> crate::Result<()> {
    let mut bytes = copy_out(buf, range.clone())?;
    f(&mut bytes);
    buf.write(range.start, &bytes)
}

/// Zeroes bytes `range` of `buf`.
///
/// # Errors
/// `range` is not within the buffer.
pub fn zero(buf: &RemoteAccessBuffer, range: Range<usize>) -> crate::Result<()> {
    buf.write(range.start, &vec![0u8; range.len()])
}

/// The word holding byte `i` of `buf`, and the shift that brings the byte
/// to the bottom of it: byte `i` is `(word.load(..) >> shift) as u8`, what
/// a spin computes once per turn.
///
/// # Panics
/// If `i` is out of bounds.
pub fn byte_word(buf: &RemoteAccessBuffer, i: usize) -> (&AtomicU64, u32) {
    assert!(
        i < buf.len(),
        "byte {i} out of bounds ({} bytes)",
        buf.len()
    );
    (&buf.words()[i / 8], shift_of(i))
}

/// The shift of byte `i % 8` of a word in memory order (`to_ne_bytes`).
fn shift_of(i: usize) -> u32 {
    let byte = (i % 8) as u32;
    if cfg!(target_endian = "little") {
        8 * byte
    } else {
        8 * (7 - byte)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shift_picks_the_byte_in_memory_order() {
        let word = u64::from_ne_bytes([10, 11, 12, 13, 14, 15, 16, 17]);
        for i in 0..24 {
            assert_eq!((word >> shift_of(i)) as u8, 10 + (i % 8) as u8, "byte {i}");
        }
    }
}
