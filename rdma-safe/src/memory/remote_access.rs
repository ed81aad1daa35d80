//! [`RemoteAccessBuffer`]: memory peers may read, write and update
//! atomically, registered without `unsafe`.
//!
//! # The problem
//!
//! Registering memory with remote access lets a peer's NIC read or write it
//! at any time, through the rkey, with no Rust borrow involved. Over a
//! `[u8]` that is undefined behaviour as soon as Rust code holds a `&[u8]`
//! (which promises nobody writes) or a `&mut [u8]` (which promises nobody
//! else reads or writes) to the bytes — which is why
//! [`MemoryRegion::register_shared_mr`](crate::MemoryRegion::register_shared_mr)
//! is `unsafe`.
//!
//! # Why this type is sound
//!
//! * **No slice ever exists.** The memory is a `Box<[AtomicU64]>`, and this
//!   type offers no `Deref` to bytes, no indexing, no `as_slice`: Rust code
//!   reaches it only through `&AtomicU64` (each `load`, `store`,
//!   `compare_exchange` is an atomic access) and through the copy methods
//!   ([`read`](RemoteAccessBuffer::read), [`write`](RemoteAccessBuffer::write)),
//!   which are built from those same 8-byte atomic accesses. A partial word
//!   is copied in with a compare-exchange loop on the whole word, so no
//!   access of another size ever touches the memory (mixed-size racing
//!   atomics are not defined by Rust's memory model).
//! * **A DMA write is not a data race with these accesses.** The Rust
//!   memory model (C++20's) makes a race undefined only when at least one of
//!   the two conflicting accesses is non-atomic. The NIC is outside the
//!   abstract machine; it behaves like another thread or process writing
//!   shared memory (as with memory shared between processes through `mmap`,
//!   the usual setting of `AtomicU64` in shared memory). Every access the
//!   Rust side makes is atomic, so whatever the NIC does concurrently, each
//!   load returns *some* 64-bit value — every bit pattern is a valid `u64` —
//!   and no assumption the compiler makes (that a `&[u8]` does not change,
//!   that a `&mut` is exclusive) can be broken, because none is made.
//!   `UnsafeCell` inside `AtomicU64` also makes it sound for the NIC to
//!   write through a pointer derived from a shared reference.
//! * **Whole values for atomics.** The NIC's 64-bit atomics (compare-and-swap,
//!   fetch-and-add) read-modify-write an aligned word; every word here is
//!   8-byte aligned, so a peer's atomic targets exactly one `AtomicU64`, and
//!   a local `load` sees the word before or after it, never a mix. Plain RDMA
//!   writes carry no such promise: a copy that overlaps a peer's write may
//!   see old and new bytes mixed (as two threads would); protocols decide
//!   when a region is stable, e.g. by a send after the write.
//! * **The memory outlives the registration.** The buffer owns its memory
//!   and never hands out the `Box`; its `Drop` deregisters first (which
//!   revokes the rkey: a peer's later access fails with a remote access
//!   error) and frees second; if deregistration fails it leaks both rather
//!   than free memory peers may still reach. `mem::forget` leaks both,
//!   which keeps the pages alive: safe. Registration pins the pages of a heap block that is
//!   never reallocated, so the NIC's pages are the ones Rust accesses.
//! * **Local operations.** A gather element over the buffer lets the NIC
//!   read it while the peer may write it; a scatter element lets the NIC
//!   write it while Rust may load it. Both are exactly the sharing the
//!   remote rkey already allows, so [`gather`](RemoteAccessBuffer::gather)
//!   and [`scatter`](RemoteAccessBuffer::scatter) take `&self`; the element
//!   borrows the buffer, so it cannot outlive the registration.
//!
//! What this does not give is *meaning*: a peer can change the data at any
//! time, so code should copy out what it needs and validate it, exactly as
//! with data received from a socket.

use crate::memory::aligned::AllocError;
use crate::memory::element::{GatherElement, ScatterElement, ScatterGatherElementError};
use crate::memory::remote::RemoteMemoryRegion;
use crate::memory::MemoryRegion;
use crate::pd::ProtectionDomain;
use rdma_core::AccessFlags;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Range, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per word.
const WORD: usize = 8;

/// Registered memory that remote peers may RDMA-read, RDMA-write and update
/// with atomics, and that Rust code reaches only through atomic accesses;
/// see the [module docs](self) for why that makes safe registration with
/// remote access sound.
///
/// ```no_run
/// # use rdma_safe::{ProtectionDomain, RemoteAccessBuffer};
/// # fn main() -> Result<(), rdma_safe::Error> {
/// # let pd = ProtectionDomain::open("rxe0")?;
/// let shared = RemoteAccessBuffer::new(&pd, 4096)?;
/// shared.write(0, b"hello")?;
/// let for_peer = shared.remote(); // address, length and rkey
/// // ... the peer writes, reads or adds to it ...
/// let mut copy = [0u8; 5];
/// shared.read(0, &mut copy)?;
/// let counter = shared.words()[8].load(std::sync::atomic::Ordering::Acquire);
/// # Ok(())
/// # }
/// ```
pub struct RemoteAccessBuffer {
    /// Deregistered in `Drop` before `words` is freed.
    region: ManuallyDrop<MemoryRegion>,
    words: ManuallyDrop<Box<[AtomicU64]>>,
}

impl RemoteAccessBuffer {
    /// Allocates `len` zeroed bytes (rounded up to whole 8-byte words) and
    /// registers them in `pd` with local write, remote read, remote write
    /// and remote atomic access.
    ///
    /// # Errors
    /// [`Error::Alloc`](crate::Error::Alloc) for a zero or unrepresentable
    /// length, or when the allocator has no memory for it (never an abort:
    /// sizes may come from input); [`Error::Verbs`](crate::Error::Verbs) with `ibv_reg_mr`'s error
    /// when the memory cannot be pinned (see `ulimit -l`).
    pub fn new(pd: &ProtectionDomain, len: usize) -> crate::Result<Self> {
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_ATOMIC;
        Self::with_access(pd, len, access)
    }

    /// As [`new`](Self::new) with the access flags given (e.g. remote read
    /// only). Remote write and atomic access need `LOCAL_WRITE` too.
    ///
    /// # Errors
    /// As [`new`](Self::new); `EINVAL` for a combination the device refuses.
    pub fn with_access(
        pd: &ProtectionDomain,
        len: usize,
        access: AccessFlags,
    ) -> crate::Result<Self> {
        let words = zeroed_words(len)?;
        let ptr = words.as_ptr().cast::<u8>().cast_mut();
        // The range is the heap block of `words`, which this value
        // owns, never reallocates and frees only after deregistering (see
        // `Drop`), so it stays on the pages pinned here. Remote access is
        // granted over memory Rust reaches only through `AtomicU64`, whose
        // `UnsafeCell` permits writes behind shared references and whose
        // accesses are all atomic, so no peer access can race a non-atomic
        // Rust access (module docs).
        // SAFETY: by the reasoning just above.
        let region =
            unsafe { MemoryRegion::register_mr_with_access(pd, ptr, words.len() * WORD, access) }?;
        Ok(RemoteAccessBuffer {
            region: ManuallyDrop::new(region),
            words: ManuallyDrop::new(words),
        })
    }

    /// Length in bytes (a multiple of 8).
    pub fn len(&self) -> usize {
        self.words.len() * WORD
    }

    /// Always `false`: a buffer holds at least one word.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The memory as 64-bit words, in address order: word `i` is bytes
    /// `8 * i .. 8 * i + 8`, the target of a peer's atomic at
    /// `remote().address() + 8 * i`.
    pub fn words(&self) -> &[AtomicU64] {
        &self.words
    }

    /// The registration (its keys, address and access).
    pub fn region(&self) -> &MemoryRegion {
        &self.region
    }

    /// What a peer needs to reach the whole buffer: address, length, rkey.
    pub fn remote(&self) -> RemoteMemoryRegion {
        self.region.remote()
    }

    /// Copies `dst.len()` bytes starting at byte `offset` out into `dst`,
    /// one atomic 8-byte load per word touched.
    ///
    /// # Errors
    /// [`ScatterGatherElementError::OutOfBounds`] when the range does not
    /// lie within the buffer.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> crate::Result<()> {
        let range = self.range(offset, dst.len())?;
        let mut out = 0;
        for (w, bytes) in pieces(range) {
            let word = self.words[w].load(Ordering::Acquire).to_ne_bytes();
            dst[out..out + bytes.len()].copy_from_slice(&word[bytes.clone()]);
            out += bytes.len();
        }
        Ok(())
    }

    /// Copies `src` in starting at byte `offset`: whole words with one
    /// atomic store, the partial words at either end with a compare-exchange
    /// loop that leaves the word's other bytes as they are at that moment.
    ///
    /// # Errors
    /// [`ScatterGatherElementError::OutOfBounds`] when the range does not
    /// lie within the buffer.
    pub fn write(&self, offset: usize, src: &[u8]) -> crate::Result<()> {
        let range = self.range(offset, src.len())?;
        let mut input = 0;
        for (w, bytes) in pieces(range) {
            let part = &src[input..input + bytes.len()];
            input += bytes.len();
            let word = &self.words[w];
            if bytes.len() == WORD {
                let value = u64::from_ne_bytes(part.try_into().expect("a whole word"));
                word.store(value, Ordering::Release);
                continue;
            }
            let merge = |old: u64| {
                let mut b = old.to_ne_bytes();
                b[bytes.clone()].copy_from_slice(part);
                Some(u64::from_ne_bytes(b))
            };
            // The closure always returns `Some`: the update cannot fail.
            let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, merge);
        }
        Ok(())
    }

    /// A copy of the whole buffer (see [`read`](Self::read)).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len()];
        self.read(0, &mut out)
            .expect("the whole buffer is in bounds");
        out
    }

    /// Stores `byte` in every byte of the buffer, a word at a time.
    pub fn fill(&self, byte: u8) {
        let value = u64::from_ne_bytes([byte; WORD]);
        for w in self.words.iter() {
            w.store(value, Ordering::Release);
        }
    }

    /// A gather element (send payload, RDMA write source) over `range`: the
    /// NIC reads the bytes while peers may be writing them, which the
    /// buffer's atomic-only access already allows.
    ///
    /// # Errors
    /// [`ScatterGatherElementError::OutOfBounds`] outside the buffer,
    /// [`TooLong`](ScatterGatherElementError::TooLong) above `u32::MAX` bytes.
    pub fn gather(&self, range: impl RangeBounds<usize>) -> crate::Result<GatherElement<'_>> {
        let (addr, len) = self.element_range(range)?;
        Ok(GatherElement::over_shared(&self.region, addr, len))
    }

    /// A scatter element (receive buffer, RDMA read or atomic result target)
    /// over `range`: the NIC writes the bytes while Rust code may load them
    /// atomically, as a peer's RDMA write may.
    ///
    /// # Errors
    /// As [`gather`](Self::gather).
    pub fn scatter(&self, range: impl RangeBounds<usize>) -> crate::Result<ScatterElement<'_>> {
        let (addr, len) = self.element_range(range)?;
        Ok(ScatterElement::over_shared(&self.region, addr, len))
    }

    fn element_range(
        &self,
        range: impl RangeBounds<usize>,
    ) -> Result<(*const u8, usize), ScatterGatherElementError> {
        let r = crate::memory::registered::bounds(&range, self.len())?;
        if u32::try_from(r.len()).is_err() {
            return Err(ScatterGatherElementError::TooLong(r.len()));
        }
        let base = self.words.as_ptr().cast::<u8>();
        Ok((base.wrapping_add(r.start), r.len()))
    }

    fn range(&self, offset: usize, len: usize) -> Result<Range<usize>, ScatterGatherElementError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(offset..end),
            _ => Err(ScatterGatherElementError::OutOfBounds { len: self.len() }),
        }
    }
}

/// `len` zeroed bytes as whole words, allocated fallibly (the length may
/// come from a peer's message).
fn zeroed_words(len: usize) -> Result<Box<[AtomicU64]>, AllocError> {
    let words = len.div_ceil(WORD);
    if words == 0
        || words
            .checked_mul(WORD)
            .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(AllocError::InvalidLayout { len, align: WORD });
    }
    let mut zeroed = Vec::new();
    zeroed
        .try_reserve_exact(words)
        .map_err(|_| AllocError::OutOfMemory { len })?;
    zeroed.extend(std::iter::repeat_with(|| AtomicU64::new(0)).take(words));
    Ok(zeroed.into_boxed_slice())
}

/// The words a byte range touches, each with the byte range within it.
fn pieces(range: Range<usize>) -> impl Iterator<Item = (usize, Range<usize>)> {
    let mut at = range.start;
    std::iter::from_fn(move || {
        if at >= range.end {
            return None;
        }
        let (w, first) = (at / WORD, at % WORD);
        let last = (range.end - w * WORD).min(WORD);
        at = w * WORD + last;
        Some((w, first..last))
    })
}

impl Drop for RemoteAccessBuffer {
    fn drop(&mut self) {
        // SAFETY: each field is taken exactly once, here, and never used
        // again.
        let (region, words) = unsafe {
            (
                ManuallyDrop::take(&mut self.region),
                ManuallyDrop::take(&mut self.words),
            )
        };
        // Deregister first: that revokes the rkey and ends the NIC's access
        // before the words may be freed. If it fails, peers may still reach
        // the memory, so both are leaked rather than freed.
        if let Err((region, e)) = region.close() {
            log::error!("deregistering a remote-access buffer failed ({e}); leaking it");
            std::mem::forget((region, words));
        }
    }
}

impl fmt::Debug for RemoteAccessBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteAccessBuffer")
            .field("region", &*self.region)
            .finish_non_exhaustive()
    }
}

// `RemoteAccessBuffer` is `Send + Sync` through its fields: the region is,
// and `[AtomicU64]` is made for sharing between threads.

#[cfg(test)]
mod tests {
    use super::*;

    fn split(range: Range<usize>) -> Vec<(usize, Range<usize>)> {
        pieces(range).collect()
    }

    #[test]
    fn sizes_are_errors_not_aborts() {
        assert_eq!(zeroed_words(9).expect("two words").len(), 2);
        assert!(matches!(
            zeroed_words(0),
            Err(AllocError::InvalidLayout { .. })
        ));
        assert!(matches!(
            zeroed_words(usize::MAX),
            Err(AllocError::InvalidLayout { .. })
        ));
        // 4 EiB: representable, larger than any address space.
        assert!(matches!(
            zeroed_words(1 << 62),
            Err(AllocError::OutOfMemory { .. })
        ));
    }

    #[test]
    fn byte_ranges_split_into_words() {
        assert_eq!(split(0..8), vec![(0, 0..8)]);
        assert_eq!(split(3..5), vec![(0, 3..5)]);
        assert_eq!(split(6..19), vec![(0, 6..8), (1, 0..8), (2, 0..3)]);
        assert_eq!(split(8..16), vec![(1, 0..8)]);
        assert!(split(5..5).is_empty());
    }
}
