//! The memory a `-R` side exposes to its peer (the address and rkey of its
//! `pingpong_dest`): bytes for the write, read and send tests, words with
//! remote atomic access for the atomic tests.
//!
//! perftest's writes and reads walk a page (or a message, if larger) from
//! the address given, and its atomics walk cache lines through a page, so
//! either kind spans two of them.

use crate::protocol::Test;
use rdma_examples::fail;
use rdma_examples::shared::SharedBuffer;
use rdma_examples::{pattern, Result};
use rdma_safe::{MemoryRegion, ProtectionDomain, RemoteAccessBuffer, RemoteMemoryRegion};

/// The exposed memory of a `-R` side.
pub(crate) enum Exposed {
    /// Bytes, registered for remote read and write; write_lat spins on one.
    Bytes {
        /// Declared before `buf`, so deregistered before it is freed.
        mr: MemoryRegion,
        buf: SharedBuffer,
    },
    /// 64-bit words, registered for remote atomics too; Rust reaches them
    /// only atomically (this side never looks at them).
    Words(RemoteAccessBuffer),
}

impl Exposed {
    /// The memory of `test` at message size `size`, with perftest's cycle
    /// (`cycle`, the larger page size of the two sides), registered in
    /// `pd`. write_lat's bytes start zeroed (their last is its flag); the
    /// others carry this side's pattern.
    ///
    /// # Errors
    /// The allocation or the registration failed.
    pub(crate) fn new(
        pd: &ProtectionDomain,
        test: Test,
        size: usize,
        cycle: usize,
    ) -> Result<Exposed> {
        let len = 2 * size.max(cycle);
        if test.is_atomic() {
            let words = RemoteAccessBuffer::new(pd, len)
                .map_err(|e| fail(format!("the exposed words: {e}")))?;
            return Ok(Exposed::Words(words));
        }
        let mut buf = SharedBuffer::new(len, "the exposed buffer (-s)")?;
        if test != Test::WriteLat {
            // SAFETY: nothing else references the buffer yet and no peer
            // knows its address: it is registered below.
            pattern::fill(unsafe { buf.slice_mut(0..buf.len()) }, size as u64, 1);
        }
        // `mr` is dropped before `buf` (field order of `Bytes`); from now
        // on Rust reads the buffer only with atomic byte loads (write_lat's
        // spin) while the peer may write it, and never writes it
        // (`Exposed` hands out no mutable view).
        // SAFETY: by the reasoning just above.
        let mr = unsafe { buf.register(pd) }?;
        Ok(Exposed::Bytes { mr, buf })
    }

    /// What the peer needs to reach the memory.
    pub(crate) fn remote(&self) -> RemoteMemoryRegion {
        match self {
            Exposed::Bytes { mr, .. } => mr.remote(),
            Exposed::Words(words) => words.remote(),
        }
    }

    /// The bytes (to spin on), unless these are words.
    pub(crate) fn bytes(&self) -> Option<&SharedBuffer> {
        match self {
            Exposed::Bytes { buf, .. } => Some(buf),
            Exposed::Words(_) => None,
        }
    }
}
