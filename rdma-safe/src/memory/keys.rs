//! Which protection domain each local key belongs to: what lets a request
//! whose element names a region of another domain than its channel's be
//! refused before posting, with an error that says so, instead of failing
//! on the NIC with a protection or "local QP operation" status.
//!
//! An element is an `ibv_sge` and nothing more (a slice of them is handed
//! to the verbs as is), so it cannot carry its region's domain. Every
//! [`MemoryRegion`](super::MemoryRegion) enters its `(domain, lkey)` pair
//! here while it is registered, and a post asks whether each element's
//! lkey is registered in the channel's domain. Each queue pair keeps the
//! last few keys it found registered in its domain ([`Domain`]): the
//! steady state (a few regions, many posts) costs a few relaxed loads and
//! compares per element, and only a key the queue pair has not seen takes
//! the table's read lock.
//!
//! A remembered key is never refused, even if its region was deregistered
//! since and the provider gave the number to a region of another domain:
//! the check then says nothing, and the NIC refuses the request as it
//! would without the check. A refusal comes only from the table.
//!
//! The check is a diagnosis, not what keeps memory safe: the NIC enforces
//! domains itself, and an element borrows its region, which keeps the
//! registration (so its entry here) alive while the element exists.

use crate::error::{Error, Operation, Result, VerbsError};
use rdma_core::Sge;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

/// Keys a queue pair remembers.
const KNOWN_KEYS: usize = 4;
/// Marks a used entry of [`Domain`]'s remembered keys.
const KNOWN: u64 = 1 << 32;

/// A queue pair's protection domain, as the check knows it: its identity
/// (the address of its `ibv_pd`; a region keeps its domain alive, and so
/// does a queue pair, so two live domains never share one) and the last
/// keys found registered in it.
#[derive(Debug)]
pub(crate) struct Domain {
    id: usize,
    /// `KNOWN | lkey` per entry (0: empty).
    known: [AtomicU64; KNOWN_KEYS],
    /// The entry the next key found replaces.
    next: AtomicUsize,
}

impl Domain {
    /// The domain of `pd`, no key known yet.
    pub(crate) fn of(pd: &rdma_core::ProtectionDomain) -> Self {
        Domain {
            id: domain_of(pd),
            known: Default::default(),
            next: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn knows(&self, lkey: u32) -> bool {
        let want = KNOWN | u64::from(lkey);
        self.known.iter().any(|k| k.load(Ordering::Relaxed) == want)
    }

    fn remember(&self, lkey: u32) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % KNOWN_KEYS;
        self.known[i].store(KNOWN | u64::from(lkey), Ordering::Relaxed);
    }
}

/// The identity of `pd`.
fn domain_of(pd: &rdma_core::ProtectionDomain) -> usize {
    pd.as_ptr() as usize
}

/// Registered `(domain, lkey)` pairs, counted (a provider may hand the
/// same key out again once a region is gone; counting keeps an entry that
/// is removed late from hiding a new one).
static REGISTERED: RwLock<Option<HashMap<(usize, u32), u32>>> = RwLock::new(None);

/// A region's entry in the table, removed when the region is dropped.
#[derive(Debug)]
pub(crate) struct Entry {
    key: (usize, u32),
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
    }
}

/// Refuses `sges` (of one `op` request) if one of them names a region that
/// is not registered in `domain`, the channel's.
///
/// # Errors
/// [`Error::Post`] naming the element and the mistake; nothing was posted.
#[inline]
pub(crate) fn check_domain(op: Operation, domain: &Domain, sges: &[Sge]) -> Result<()> {
    for (i, sge) in sges.iter().enumerate() {
        if !domain.knows(sge.lkey()) {
            look_up(op, domain, sge.lkey(), i)?;
        }
    }
    Ok(())
}

/// The table's answer for `lkey` in `domain`, remembered by the domain
/// when it is registered there.
#[cold]
#[inline(never)]
fn look_up(op: Operation, domain: &Domain, lkey: u32, index: usize) -> Result<()> {
    let registered = REGISTERED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .is_some_and(|t| t.contains_key(&(domain.id, lkey)));
    if registered {
        domain.remember(lkey);
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
