//! The memory a `-R` side exposes to its peer (the address and rkey of its
//! `pingpong_dest`): bytes for the write, read and send tests, words with
//! remote atomic access for the atomic tests.
//!
//! perftest's writes and reads walk a page (or a message, if larger) from
//! the address given, and its atomics walk cache lines through a page, so
//! either kind spans two of them.

use crate::protocol::Test;
use rdma_examples::fail;
use rdma_examples::{pattern, shared, Result};
use rdma_safe::{ProtectionDomain, RemoteAccessBuffer, RemoteMemoryRegion};

/// The exposed memory of a `-R` side.
pub(crate) enum Exposed {
    /// Bytes, registered for remote read and write; write_lat spins on one.
    Bytes(RemoteAccessBuffer),
    /// 64-bit words, registered for remote atomics too (this side never
    /// looks at them).
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
        let buf = shared::expose(pd, len, "the exposed buffer (-s)")?;
        if test != Test::WriteLat {
            // No peer knows the buffer's address yet.
            shared::update(&buf, 0..len, |b| pattern::fill(b, size as u64, 1))?;
        }
        Ok(Exposed::Bytes(buf))
    }

    /// What the peer needs to reach the memory.
    pub(crate) fn remote(&self) -> RemoteMemoryRegion {
        match self {
            Exposed::Bytes(buf) | Exposed::Words(buf) => buf.remote(),
        }
    }

    /// The bytes (to spin on), unless these are words.
    pub(crate) fn bytes(&self) -> Option<&RemoteAccessBuffer> {
        match self {
            Exposed::Bytes(buf) => Some(buf),
            Exposed::Words(_) => None,
        }
    }
}
