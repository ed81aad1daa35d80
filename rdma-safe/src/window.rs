//! Lending memory to a peer for a scope through a memory window:
//! [`Channel::lend`].
//!
//! # What it does
//!
//! `lend` takes an exclusive borrow of a byte slice, registers it, binds a
//! type 2 memory window over it on the channel's queue pair, and gives the
//! closure the window's [`RemoteMemoryRegion`] to hand to the peer. When the
//! closure returns (or panics), `lend` itself — not a guard's `Drop` —
//! invalidates the window and waits for that completion, deallocates the
//! window and deregisters the region, and only then returns and ends the
//! borrow. After `lend`, the peer's key fails with a remote access error.
//! Nothing the closure receives can be leaked to skip this: the region is a
//! plain copy of address, length and key, and `mem::forget` of it revokes
//! nothing and keeps nothing alive. The borrow checker thus extends to the
//! remote side: while the peer may access the bytes, Rust code cannot (the
//! slice is borrowed by `lend`), and when Rust code can again, the peer
//! cannot.
//!
//! # Why revocation is certain
//!
//! The invalidation is the orderly end: the completion of `IBV_WR_LOCAL_INV`
//! means the NIC no longer accepts the window's key. It can fail — the
//! closure may have broken the connection, the channel may have timed out —
//! so it is not what soundness rests on. Deregistering the region is: once
//! `ibv_dereg_mr` returns, no key (the window's or any other) reaches the
//! pages through it, whatever state the queue pair is in (that is the
//! verb's contract, which every registration in this crate relies on when
//! it frees memory after deregistering it). The window is deallocated
//! before (a region with a bound window cannot be deregistered). If either
//! fails, `lend` cannot prove the NIC is done with borrowed memory and the
//! process aborts instead of returning.
//!
//! # Threat model
//!
//! * **A buggy peer** keeps using the key after the scope, or goes past the
//!   range. Both fail at the NIC with a remote access error (which also
//!   breaks the connection); they never reach memory Rust owns again.
//! * **A hostile peer** on this channel gets, by design, the window's range
//!   for the scope. The keys are not secrets: rxe's are a table index and an
//!   8-bit tag, so a peer can enumerate them. What a guessed key opens is
//!   limited as follows.
//!   - The region under the window is registered for the scope only, over
//!     exactly the lent bytes, and with *no remote rights* (local write and
//!     window binding only): its own key opens nothing remotely. A type 2
//!     window's rights need no remote rights on the region.
//!   - A type 2 window is bound to this channel's queue pair: peers on other
//!     connections cannot use its key even in the same protection domain.
//!   - Other memory registered with remote access in the same protection
//!     domain ([`RemoteAccessBuffer`](crate::RemoteAccessBuffer),
//!     `register_shared_mr`) *is* reachable by any connected peer that
//!     guesses its key. Against untrusted peers, give each its own
//!     [`ProtectionDomain`](crate::ProtectionDomain): keys of one domain mean
//!     nothing on a queue pair of another.
//!   - Memory safety never depends on the peer: whatever it sends, it can
//!     only reach memory that is registered with remote rights or lent, and
//!     Rust code never holds a slice of either while it can.

use crate::channel::Channel;
use crate::engine::{Outcome, BOUNDED};
use crate::error::VerbsError;
use crate::fatal::{abort_with, AbortOnUnwind};
use crate::memory::remote::RemoteMemoryRegion;
use crate::work::build::{BindWindow, InvalidateKey};
use rdma_core::{AccessFlags, MemoryRegion, MemoryWindow, MwType};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;

/// The remote rights a window may grant.
const REMOTE_RIGHTS: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);

impl Channel {
    /// Lends `memory` to the connected peer for the duration of `f`: binds a
    /// type 2 memory window over it with the remote rights in `access`
    /// (`REMOTE_READ`, `REMOTE_WRITE`, `REMOTE_ATOMIC`), calls `f` with the
    /// channel and the window's remote region (hand it to the peer), then
    /// invalidates the window, waits for that, and deregisters the memory
    /// before returning — also when `f` panics (the panic then resumes).
    /// See the [module docs](crate::window) for the guarantees and the
    /// threat model.
    ///
    /// ```no_run
    /// # use rdma_safe::{memory::AccessFlags, Channel, ProtectionDomain};
    /// # fn main() -> Result<(), rdma_safe::Error> {
    /// # let pd = ProtectionDomain::open("rxe0")?;
    /// # let mut channel = pd.create_channel()?;
    /// # let mut stream = std::net::TcpStream::connect("peer:7000")?;
    /// let mut inbox = vec![0u8; 4096];
    /// channel.lend(&mut inbox, AccessFlags::REMOTE_WRITE, |ch, window| {
    ///     ch.send_region(&mut stream, &window)?; // the peer writes into it,
    ///     let mut done = [0u8; 1];                // then says so
    ///     std::io::Read::read_exact(&mut stream, &mut done)?;
    ///     Ok::<_, rdma_safe::Error>(())
    /// })??;
    /// // The window is revoked: `inbox` is ours again.
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Before `f` runs: [`VerbsError::InvalidArgument`] (inside
    /// [`Error::Verbs`](crate::Error::Verbs)) for empty memory or rights
    /// other than remote ones, the verbs' errors when the memory cannot be
    /// registered or the window allocated, and the bind's failure
    /// ([`Error::WorkCompletion`](crate::Error::WorkCompletion) and the
    /// other transfer errors). After `f` ran: the
    /// invalidation's failure (the memory was still deregistered before
    /// returning, so the window is revoked either way); `f`'s value is then
    /// lost. A peer's refused access (outside the window, or a right it was
    /// not given) moves this channel's queue pair to the error state as well,
    /// so the invalidation is then flushed and reported here.
    pub fn lend<T>(
        &mut self,
        memory: &mut [u8],
        access: AccessFlags,
        f: impl FnOnce(&mut Channel, RemoteMemoryRegion) -> T,
    ) -> crate::Result<T> {
        if memory.is_empty() {
            return Err(VerbsError::InvalidArgument("cannot lend empty memory".into()).into());
        }
        if access.is_empty() || !REMOTE_RIGHTS.contains(access) {
            return Err(VerbsError::InvalidArgument(format!(
                "a window grants remote read, write or atomic rights, not {access:?}"
            ))
            .into());
        }
        let (addr, len) = (memory.as_mut_ptr(), memory.len());
        // Local write and window binding only: the region's own key opens
        // nothing remotely; the window carries the remote rights.
        let region_access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;
        // `memory` is exclusively borrowed for this whole call and
        // `release` deregisters the region before the call returns (or the
        // process aborts), so the range stays on its pages while registered
        // and no Rust code touches it meanwhile. No remote rights are
        // granted through the region itself.
        // SAFETY: by the reasoning just above.
        let mr = unsafe {
            rdma_core::MemoryRegion::register(self.pd().as_core(), addr, len, region_access)
        }?;
        let mw = match MemoryWindow::new(self.pd().as_core(), MwType::Type2) {
            Ok(mw) => mw,
            Err(e) => {
                release(None, mr);
                return Err(e.into());
            }
        };
        let rkey = MemoryWindow::next_rkey(mw.rkey());
        let range = addr as u64..addr as u64 + len as u64;
        let bound = self
            .queue()
            .post_sends(std::iter::once(BindWindow {
                mw: &mw,
                rkey,
                mr: &mr,
                range: range.clone(),
                access,
            }))
            .and_then(|id| {
                let timeout = Some(self.timeout());
                self.queue()
                    .wait(id, Outcome, Duration::ZERO, timeout)
                    .expect(BOUNDED)
            });
        if let Err(e) = bound {
            release(Some(mw), mr);
            return Err(e);
        }
        let window = RemoteMemoryRegion::new(range.start, len as u64, rkey);
        let outcome = catch_unwind(AssertUnwindSafe(|| f(self, window)));
        // Revoke before the borrow of `memory` ends, whatever `f` did.
        let guard = AbortOnUnwind("revoking a lent memory window");
        let invalidated = self
            .queue()
            .post_sends(std::iter::once(InvalidateKey(rkey)))
            .and_then(|id| {
                let timeout = Some(self.timeout());
                self.queue()
                    .wait(id, Outcome, Duration::ZERO, timeout)
                    .expect(BOUNDED)
            });
        if let Err(e) = &invalidated {
            log::warn!("invalidating window key {rkey:#x} failed ({e}); deregistering its memory");
        }
        release(Some(mw), mr);
        guard.disarm();
        match outcome {
            Err(panic) => resume_unwind(panic),
            Ok(value) => {
                invalidated?;
                Ok(value)
            }
        }
    }
}

/// Deallocates the window, then deregisters the region: after this no key
/// reaches the memory. Aborts if either cannot be done, since the caller is
/// about to end the borrow of the memory.
fn release(mw: Option<MemoryWindow>, mr: MemoryRegion) {
    if let Some(mw) = mw {
        if let Err((_mw, e)) = mw.close() {
            abort_with(format_args!(
                "deallocating a lent memory window failed ({e}); its memory cannot be handed back"
            ));
        }
    }
    if let Err((_mr, e)) = mr.close() {
        abort_with(format_args!(
            "deregistering lent memory failed ({e}); it cannot be handed back"
        ));
    }
}
