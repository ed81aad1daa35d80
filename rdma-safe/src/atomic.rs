//! [`AtomicWorkRequest`]: 64-bit compare-and-swap and fetch-and-add on a
//! peer's memory.
//!
//! An atomic names 8 bytes of the peer's memory, which must be 8-byte
//! aligned (the NIC refuses anything else with a remote error that also
//! breaks the connection), and one 8-byte local scatter element that
//! receives the value the remote word held before the operation. Both are
//! checked before posting: a misaligned target, a target region shorter
//! than 8 bytes, or a result element of another size is a
//! [`Error::Post`](crate::Error::Post) and nothing reaches
//! the NIC.
//!
//! The NIC performs the read-modify-write on the target atomically with
//! respect to every other atomic that reaches the same memory through the
//! same device (this crate's channels, or `ib_atomic_bw`), which is what
//! several channels adding to one counter rely on. Against the target
//! host's CPU the guarantee is the device's `atomic_cap`: rxe reports
//! `ATOMIC_HCA` (atomic between NIC operations only), so a CPU that changes
//! the word at the same time should do so with atomic instructions and not
//! expect to be ordered with the NIC's update.
//!
//! The old value is written in the order the NIC keeps 64-bit values in
//! memory: host order on rxe (read it with `u64::from_ne_bytes`).

use crate::memory::element::ScatterElement;
use crate::memory::remote::RemoteMemoryRegion;

/// Bytes an atomic operates on, and the size of its result element.
pub const ATOMIC_SIZE: usize = 8;

/// What an [`AtomicWorkRequest`] does to the remote word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// If the word equals `compare`, replace it with `swap`.
    CompareAndSwap {
        /// The value the word must hold for the swap to happen.
        compare: u64,
        /// The value it then takes.
        swap: u64,
    },
    /// Add `add` to the word (wrapping).
    FetchAndAdd {
        /// The addend.
        add: u64,
    },
}

/// A one-sided 64-bit atomic on the first 8 bytes of `remote`, whose
/// previous value the NIC writes into `result`.
///
/// ```no_run
/// # use rdma_safe::{AtomicWorkRequest, ProtectionDomain, RegisteredBuffer, RemoteMemoryRegion};
/// # fn main() -> Result<(), rdma_safe::Error> {
/// # let pd = ProtectionDomain::open("rxe0")?;
/// # let mut channel = pd.create_channel()?;
/// # let counter = RemoteMemoryRegion::new(0x1000, 8, 1);
/// let mut old = RegisteredBuffer::new(&pd, 8)?;
/// channel.run(AtomicWorkRequest::fetch_and_add(counter, 1, &mut old.scatter(..8)))?;
/// let before = u64::from_ne_bytes(old[..8].try_into().unwrap());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct AtomicWorkRequest<'wr, 'data> {
    pub(crate) result: &'wr mut ScatterElement<'data>,
    pub(crate) remote: RemoteMemoryRegion,
    pub(crate) op: AtomicOp,
}

impl<'wr, 'data> AtomicWorkRequest<'wr, 'data> {
    /// Compare-and-swap: if the word at `remote.address()` equals
    /// `compare`, it becomes `swap`; either way `result` receives the word's
    /// previous value (so the swap happened exactly when it equals
    /// `compare`).
    pub fn compare_and_swap(
        remote: RemoteMemoryRegion,
        compare: u64,
        swap: u64,
        result: &'wr mut ScatterElement<'data>,
    ) -> Self {
        AtomicWorkRequest {
            result,
            remote,
            op: AtomicOp::CompareAndSwap { compare, swap },
        }
    }

    /// Fetch-and-add: adds `add` (wrapping) to the word at
    /// `remote.address()`; `result` receives its previous value.
    pub fn fetch_and_add(
        remote: RemoteMemoryRegion,
        add: u64,
        result: &'wr mut ScatterElement<'data>,
    ) -> Self {
        AtomicWorkRequest {
            result,
            remote,
            op: AtomicOp::FetchAndAdd { add },
        }
    }

    /// The operation.
    pub fn op(&self) -> AtomicOp {
        self.op
    }

    /// The remote region whose first 8 bytes are the target.
    pub fn remote(&self) -> RemoteMemoryRegion {
        self.remote
    }
}
