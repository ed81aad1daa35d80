//! Registered memory: [`MemoryRegion`] and its safety architecture.
//!
//! # What the NIC uses: pages, not addresses
//!
//! `ibv_reg_mr` pins the physical pages behind a virtual range and gives the
//! NIC their translation. From then until deregistration the NIC reads and
//! writes *those pages* whenever a work request names an address in the range
//! with the region's key — whatever has happened to the range since. If the
//! buffer is freed and the address reused, the NIC writes the old, orphaned
//! pages; if a large buffer is reallocated (glibc `realloc` uses `mremap`
//! above 128 KiB), the pinned pages *move* with it to the new address while a
//! new allocation may appear at the old one — and a send "from" that new
//! allocation transmits the moved buffer, a receive "into" it writes the moved
//! buffer while safe code holds a `&[u8]` to it. A live Rust reference at an
//! address therefore proves nothing about which pages the NIC touches there.
//!
//! # How registration is kept sound
//!
//! A registration is sound only while its range stays mapped to the pages it
//! pinned. This crate offers two ways to know that:
//!
//! * **The registration holds the memory.** [`RegisteredBuffer`] owns a
//!   [`StableBuffer`] — a `Vec<u8>`, a `Box<[u8]>`, a page-aligned
//!   [`AlignedBuffer`], or an exclusively borrowed `&'a mut [u8]` (the
//!   registration then carries `'a`) — and deregisters before giving it back
//!   or freeing it. Nothing can reallocate, free or unmap the memory while it
//!   is registered, so safe code registers memory this way.
//! * **The caller promises it.** [`MemoryRegion::register_local_mr`] and the
//!   other raw registrations take an address and a length and are `unsafe`:
//!   the caller guarantees that the range stays mapped to the same pages —
//!   not freed, reallocated, `mremap`ed or unmapped — while the region lives.
//!
//! This is a deliberate departure from the design this crate follows, whose
//! `register_local_mr` is safe on the argument that "an SGE needs a live
//! reference, proving the memory is still alive": the reference proves that
//! *some* memory is live at the address, not that it is the registered
//! memory.
//!
//! # Why the elements are then safe
//!
//! With the page identity guaranteed, a [`GatherElement`] (holding a `&'a [u8]`:
//! the NIC may read it, nobody may write it) or a [`ScatterElement`] (holding a
//! `&'a mut [u8]`: the NIC may write it, nobody else may touch it) over a slice
//! inside the region names exactly the pages behind that slice. A slice
//! outside the region is rejected by the NIC (Local Protection Error), never
//! undefined behaviour. How long the borrow lasts is enforced by the
//! [`Channel`](crate::Channel) operations and [scopes](crate::Channel::scope).
//!
//! `fork()` does not break the argument on the kernels this crate supports:
//! since Linux 5.13 pages pinned for DMA are copied for the child at fork
//! time, so the parent keeps the registered pages (rdma-core reports
//! `IBV_FORK_UNNEEDED`).
//!
//! # Why remote access is `unsafe`
//!
//! With remote read or write access a peer can reach the memory at any time,
//! through the rkey, without any Rust borrow: the compiler can no longer see
//! who reads or writes it. [`MemoryRegion::register_shared_mr`] and
//! [`MemoryRegion::register_mr_with_access`] (with remote flags) are therefore
//! `unsafe`, and their callers promise to keep the memory allocated and
//! treat it as shared mutable state while peers may access it. Safe code
//! that exposes memory to peers uses a [`RemoteAccessBuffer`] instead, which
//! never lets Rust see the memory as a slice.
//!
//! [`RegisteredBuffer`]: crate::RegisteredBuffer
//! [`RemoteAccessBuffer`]: crate::RemoteAccessBuffer
//! [`StableBuffer`]: crate::memory::StableBuffer
//! [`AlignedBuffer`]: crate::memory::AlignedBuffer

pub(crate) mod aligned;
pub(crate) mod element;
pub(crate) mod keys;
pub(crate) mod region;
pub(crate) mod registered;
pub(crate) mod remote;
pub mod remote_access;

pub use aligned::{AlignedBuffer, StableBuffer};
pub use rdma_core::AccessFlags;
pub use remote::REMOTE_REGION_ENCODED_LEN;

// The crate root's: what a program starts from.
pub use element::{GatherElement, ScatterElement};
pub use region::MemoryRegion;
pub use registered::RegisteredBuffer;
pub use remote::RemoteMemoryRegion;
pub use remote_access::RemoteAccessBuffer;
