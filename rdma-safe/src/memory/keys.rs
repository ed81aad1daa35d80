//! Which protection domain each local key belongs to: what lets a request
//! whose element names a region of another domain than its channel's be
//! refused before posting, with an error that says so, instead of failing
//! on the NIC with a protection or "local QP operation" status.
//!
//! An element is an `ibv_sge` and nothing more (a slice of them is handed
//! to the verbs as is), so it cannot carry its region's domain. Every
//! [`MemoryRegion`](super::MemoryRegion) enters its `(domain, lkey)` pair
//! here while it is registered, and a post asks whether each element's
//! lkey is registered in the channel's domain. The answer for the last key
//! a thread asked about is kept beside the number of deregistrations so
//! far: while no region was deregistered, a pair found once is still
//! registered, so the steady state (one region, many posts) costs one
//! thread-local read and a few compares per element; only a new key, or
//! the first post after a deregistration, takes the table's read lock.
//!
//! The check is a diagnosis, not what keeps memory safe: the NIC enforces
//! domains itself, and an element borrows its region, which keeps the
//! registration (so its entry here) alive while the element exists.

use crate::error::{Error, Operation, Result, VerbsError};
use rdma_core::Sge;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

/// A protection domain's identity: the address of its `ibv_pd`. A region
/// keeps its domain alive, and so does a channel, so two live domains
/// never share one.
pub(crate) type Domain = usize;

/// The identity of `pd`.
pub(crate) fn domain_of(pd: &rdma_core::ProtectionDomain) -> Domain {
    pd.as_ptr() as usize
}

/// Registered `(domain, lkey)` pairs, counted (a provider may hand the
/// same key out again once a region is gone; counting keeps an entry that
/// is removed late from hiding a new one).
static REGISTERED: RwLock<Option<HashMap<(Domain, u32), u32>>> = RwLock::new(None);

/// Deregistrations so far: a thread's cached answer is good while this is
/// unchanged.
static REMOVALS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last pair this thread found registered, with `REMOVALS` then.
    static LAST: Cell<(Domain, u32, u64)> = const { Cell::new((0, 0, u64::MAX)) };
}

/// A region's entry in the table, removed when the region is dropped.
#[derive(Debug)]
pub(crate) struct Entry {
    key: (Domain, u32),
}

impl Entry {
    /// Enters `mr`, just registered.
    pub(crate) fn new(mr: &rdma_core::MemoryRegion) -> Self {
        let key = (domain_of(mr.pd()), mr.lkey());
        let mut table = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
        *table
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert(0) += 1;
        Entry { key }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut table = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(table) = table.as_mut() {
            if let Some(n) = table.get_mut(&self.key) {
                *n -= 1;
                if *n == 0 {
                    table.remove(&self.key);
                }
            }
        }
        // After the removal: a thread that sees the new count looks again.
        REMOVALS.fetch_add(1, Ordering::Release);
    }
}

/// Refuses `sges` (of one `op` request) if one of them names a region that
/// is not registered in `domain`, the channel's.
///
/// # Errors
/// [`Error::Post`] naming the element and the mistake; nothing was posted.
#[inline]
pub(crate) fn check_domain(op: Operation, domain: Domain, sges: &[Sge]) -> Result<()> {
    for (i, sge) in sges.iter().enumerate() {
        let removals = REMOVALS.load(Ordering::Acquire);
        let hit = LAST.with(|last| last.get() == (domain, sge.lkey(), removals));
        if !hit {
            look_up(op, domain, sge.lkey(), removals, i)?;
        }
    }
    Ok(())
}

/// The table's answer for `(domain, lkey)`, cached for this thread when
/// it is registered.
#[cold]
#[inline(never)]
fn look_up(op: Operation, domain: Domain, lkey: u32, removals: u64, index: usize) -> Result<()> {
    let registered = REGISTERED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .is_some_and(|t| t.contains_key(&(domain, lkey)));
    if registered {
        LAST.with(|last| last.set((domain, lkey, removals)));
        return Ok(());
    }
    Err(Error::Post {
        operation: op,
        source: VerbsError::InvalidArgument(format!(
            "element {index} is in a memory region of another protection domain than the \
             channel's (lkey {lkey:#x}): register the memory in the channel's domain \
             (Channel::pd) — a queue pair reaches only memory of its own domain"
        )),
    })
}
