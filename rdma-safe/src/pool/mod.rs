//! [`BufferPool`]: fixed-size buffers carved from large slabs registered
//! once, so that the data path never registers memory.
//!
//! A pool hands out two kinds of handle over its chunks, after the
//! `BytesMut`/`Bytes` split:
//!
//! * [`PoolBuf`] — the one handle of a chunk, readable and writable. The
//!   operations in which the NIC *writes* (receive, RDMA read target) take a
//!   `PoolBuf` by value: no other handle to the chunk can exist, by type, so
//!   nobody reads what the NIC is writing.
//! * [`PoolBytes`] — an immutable, reference-counted slice of a chunk
//!   ([`PoolBuf::freeze`]); cloning one is an atomic increment. The operations
//!   in which the NIC only *reads* (send, RDMA write source) take one, so one
//!   payload can go to many peers at once. Once the last of them is back
//!   (the operations have completed), [`PoolBytes::try_into_mut`] turns it
//!   into the chunk's `PoolBuf` again, to change and send without taking
//!   another buffer.
//!
//! A chunk goes back to the pool when its `PoolBuf`, or the last `PoolBytes`
//! over it, is dropped. Every handle holds the pool (an `Arc`), and the pool
//! holds the slabs' registrations: the memory stays allocated and registered
//! while any handle — including one kept inside an in-flight operation —
//! exists.
//!
//! Allocation never blocks without a bound: [`BufferPool::try_alloc`] fails
//! at once with [`PoolError::Exhausted`], [`BufferPool::alloc_timeout`] waits
//! at most its timeout, and [`BufferPool::poll_alloc`] registers a waker
//! (back-pressure for async code) that a freed chunk wakes.
//!
//! # Example
//!
//! A pool, and owned transfers from it — blocking, then as futures. This is
//! `rdma-safe/examples/owned_transfer.rs`, which `cargo xtask test-rxe`
//! runs on a soft-RoCE device:
#![doc = concat!("```no_run\n", include_str!("../../examples/owned_transfer.rs"), "```")]

mod buf;
mod bytes;

pub use buf::PoolBuf;
pub use bytes::PoolBytes;

use crate::error::PoolError;
use crate::memory::aligned::AlignedBuffer;
use crate::memory::registered::RegisteredBuffer;
use crate::pd::ProtectionDomain;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Chunks start on multiples of this (a cache line), whatever their size.
const CHUNK_ALIGN: usize = 64;
/// Default bytes per slab (one registration).
const DEFAULT_SLAB_BYTES: usize = 4 << 20;

/// A registered slab and the address of its first byte.
struct Slab {
    /// Owns the memory and its registration; never dereferenced after
    /// `base` was taken, so no reference to the whole slab ever coexists
    /// with the chunk handles' references.
    region: RegisteredBuffer<AlignedBuffer>,
    base: *mut u8,
    lkey: u32,
}

/// The free chunks and the tasks waiting for one.
struct FreeList {
    stack: Vec<u32>,
    waiters: Vec<Waker>,
}

pub(crate) struct PoolInner {
    slabs: Vec<Slab>,
    buffer_size: usize,
    stride: usize,
    per_slab: usize,
    capacity: usize,
    /// Per chunk: how many `PoolBytes` share it (0 while it is free or held
    /// by a `PoolBuf`).
    refs: Box<[AtomicU32]>,
    free: Mutex<FreeList>,
    freed: Condvar,
}

// SAFETY: the raw slab addresses are only turned into references through a
// chunk handle, and the free list guarantees that a chunk has either one
// `PoolBuf` (`&mut` access, like a `Box<[u8]>`) or only `PoolBytes`
// (shared, immutable access); the bookkeeping is atomics and a mutex. So the
// pool may be shared and sent across threads like an `Arc<[Box<[u8]>]>`.
unsafe impl Send for PoolInner {}
// SAFETY: as above.
unsafe impl Sync for PoolInner {}

/// A pool of equally sized registered buffers (see the [module](self) docs).
/// Cheap to clone; clones share the buffers.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

impl BufferPool {
    /// A pool of `count` buffers of `buffer_size` bytes each, registered in
    /// `pd` for local access in page-aligned slabs of about 4 MiB (one
    /// registration each; a buffer larger than that gets a slab of its own).
    ///
    /// # Errors
    /// [`PoolError::InvalidSize`] for a zero size or count or a geometry
    /// that overflows; [`Error::Alloc`](crate::Error::Alloc) /
    /// [`Error::Verbs`](crate::Error::Verbs) (`ibv_reg_mr`, see `ulimit -l`)
    /// when a slab cannot be allocated or pinned.
    pub fn new(pd: &ProtectionDomain, buffer_size: usize, count: usize) -> crate::Result<Self> {
        Self::with_slab_size(pd, buffer_size, count, DEFAULT_SLAB_BYTES)
    }

    /// As [`new`](Self::new), with slabs of (at most) `slab_bytes`, rounded to
    /// whole buffers (at least one per slab).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_slab_size(
        pd: &ProtectionDomain,
        buffer_size: usize,
        count: usize,
        slab_bytes: usize,
    ) -> crate::Result<Self> {
        let invalid = |what: String| crate::Error::from(PoolError::InvalidSize(what));
        if buffer_size == 0 || count == 0 {
            return Err(invalid(format!("{count} buffers of {buffer_size} bytes")));
        }
        if buffer_size > u32::MAX as usize || count > u32::MAX as usize {
            return Err(invalid(format!(
                "{count} buffers of {buffer_size} bytes: a buffer must fit one SGE (u32::MAX bytes)"
            )));
        }
        let stride = buffer_size
            .checked_next_multiple_of(CHUNK_ALIGN)
            .ok_or_else(|| invalid(format!("buffer size {buffer_size}")))?;
        let per_slab = (slab_bytes / stride).clamp(1, count);
        let mut slabs = Vec::with_capacity(count.div_ceil(per_slab));
        let mut left = count;
        while left > 0 {
            let n = per_slab.min(left);
            let bytes = n
                .checked_mul(stride)
                .ok_or_else(|| invalid(format!("{n} x {stride} bytes")))?;
            // Allocating (`Error::Alloc`) or registering (`Error::Verbs`,
            // `ibv_reg_mr`: see `ulimit -l`) a slab can fail too.
            let mut region = RegisteredBuffer::register(pd, AlignedBuffer::new(bytes)?)?;
            let lkey = region.region().lkey();
            // The one dereference of the slab: from here on it is reached
            // only through `base` and the chunk handles.
            let base = region.as_mut().as_mut_ptr();
            slabs.push(Slab { region, base, lkey });
            left -= n;
        }
        // Popped from the end: hand out chunk 0 first.
        let stack: Vec<u32> = (0..count as u32).rev().collect();
        Ok(BufferPool {
            inner: Arc::new(PoolInner {
                slabs,
                buffer_size,
                stride,
                per_slab,
                capacity: count,
                refs: (0..count).map(|_| AtomicU32::new(0)).collect(),
                free: Mutex::new(FreeList {
                    stack,
                    waiters: Vec::new(),
                }),
                freed: Condvar::new(),
            }),
        })
    }

    /// Takes a free buffer (its length set to the full buffer size; its
    /// bytes are whatever the previous user left).
    ///
    /// # Errors
    /// [`PoolError::Exhausted`] when every buffer is in use.
    pub fn try_alloc(&self) -> crate::Result<PoolBuf> {
        let idx = self
            .inner
            .lock()
            .stack
            .pop()
            .ok_or_else(|| self.exhausted())?;
        Ok(PoolBuf::new(self.inner.clone(), idx))
    }

    /// Takes a free buffer, waiting up to `timeout` for one to be returned.
    ///
    /// # Errors
    /// [`PoolError::Exhausted`] if none was free within `timeout`.
    pub fn alloc_timeout(&self, timeout: Duration) -> crate::Result<PoolBuf> {
        let deadline = Instant::now() + timeout;
        let mut free = self.inner.lock();
        loop {
            if let Some(idx) = free.stack.pop() {
                drop(free);
                return Ok(PoolBuf::new(self.inner.clone(), idx));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.exhausted().into());
            }
            free = self
                .inner
                .freed
                .wait_timeout(free, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Takes a free buffer, or registers `cx`'s waker to be woken when one
    /// is returned (back-pressure for futures; bound the wait with the
    /// runtime's timer).
    pub fn poll_alloc(&self, cx: &mut Context<'_>) -> Poll<PoolBuf> {
        let mut free = self.inner.lock();
        match free.stack.pop() {
            Some(idx) => {
                drop(free);
                Poll::Ready(PoolBuf::new(self.inner.clone(), idx))
            }
            None => {
                if !free.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                    free.waiters.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// Waits for a free buffer without blocking the thread (see
    /// [`poll_alloc`](Self::poll_alloc)).
    pub async fn alloc(&self) -> PoolBuf {
        std::future::poll_fn(|cx| self.poll_alloc(cx)).await
    }

    /// Bytes per buffer.
    pub fn buffer_size(&self) -> usize {
        self.inner.buffer_size
    }

    /// Buffers in the pool.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Buffers free right now.
    pub fn available(&self) -> usize {
        self.inner.lock().stack.len()
    }

    /// Registrations (slabs) the pool made.
    pub fn slabs(&self) -> usize {
        self.inner.slabs.len()
    }

    fn exhausted(&self) -> PoolError {
        PoolError::Exhausted {
            capacity: self.inner.capacity,
            buffer_size: self.inner.buffer_size,
        }
    }
}

impl PoolInner {
    fn lock(&self) -> MutexGuard<'_, FreeList> {
        // Every update is a single push or pop: a panic elsewhere while
        // holding the lock leaves a consistent list.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first byte of chunk `idx` and the key of its registration.
    #[inline]
    pub(crate) fn chunk(&self, idx: u32) -> (*mut u8, u32) {
        let idx = idx as usize;
        let slab = &self.slabs[idx / self.per_slab];
        // The offset stays inside the slab: `idx % per_slab < per_slab` and
        // the slab holds `per_slab * stride` bytes (fewer chunks only in the
        // last slab, which no index beyond `capacity` reaches).
        let ptr = slab.base.wrapping_add((idx % self.per_slab) * self.stride);
        (ptr, slab.lkey)
    }

    pub(crate) fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    pub(crate) fn refs(&self, idx: u32) -> &AtomicU32 {
        &self.refs[idx as usize]
    }

    /// Returns chunk `idx` (no handle to it is left) and wakes a waiter.
    pub(crate) fn release(&self, idx: u32) {
        #[cfg(feature = "fault-injection")]
        crate::fault::released(
            self.chunk(idx).0,
            self.buffer_size,
            "a pool chunk goes back",
        );
        let waiters = {
            let mut free = self.lock();
            free.stack.push(idx);
            std::mem::take(&mut free.waiters)
        };
        self.freed.notify_one();
        for w in waiters {
            w.wake();
        }
    }
}

/// How many `PoolBytes` share a chunk, at most: a clone beyond it aborts
/// (as `Arc` does) instead of overflowing the count.
pub(crate) const MAX_REFS: u32 = u32::MAX / 2;

pub(crate) fn increment(refs: &AtomicU32) {
    if refs.fetch_add(1, Ordering::Relaxed) > MAX_REFS {
        std::process::abort();
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("buffer_size", &self.inner.buffer_size)
            .field("capacity", &self.inner.capacity)
            .field("available", &self.available())
            .field("slabs", &self.inner.slabs.len())
            .finish()
    }
}

impl fmt::Debug for PoolInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolInner")
            .field("buffer_size", &self.buffer_size)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Slab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slab")
            .field("base", &self.base)
            .field("lkey", &self.lkey)
            .field("region", &self.region.region())
            .finish()
    }
}
