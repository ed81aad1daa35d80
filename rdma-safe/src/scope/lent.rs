//! Buffers lent to one scoped operation and given back when it completes:
//! what lets a request/response server be a plain loop in one scope
//! (receive a request, read it, write and send the reply, post the
//! receive again), where a buffer of [`post_receive`] stays borrowed until
//! the scope ends.
//!
//! Why giving the buffer back is sound is on [`LentWork`].
//!
//! [`post_receive`]: super::PollingScope::post_receive

use super::{PollingScope, ScopedPendingWork};
use crate::error::Result;
use crate::memory::{GatherElement, MemoryRegion, ScatterElement};
use crate::work::{ReceiveWorkRequest, SendWorkRequest, WorkSuccess};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

impl<'scope, 'env> PollingScope<'scope, 'env> {
    /// Posts a receive into `buf` (inside `mr`) whose handle gives `buf`
    /// back when the message has arrived: [`LentWork::wait`] returns the
    /// completion and the buffer, whose first
    /// [`bytes()`](WorkSuccess::bytes) bytes are the message.
    ///
    /// # Errors
    /// `buf` not inside `mr` (nothing is posted), and as
    /// [`post_receive`](Self::post_receive).
    pub fn post_receive_lent(
        &mut self,
        mr: &'scope MemoryRegion,
        buf: &'scope mut [u8],
    ) -> Result<LentWork<'scope>> {
        let lent = Lending::of(buf);
        // SAFETY: `lent` holds the only access to the buffer, lent for
        // 'scope; this slice lives only while the element is made.
        let element = ScatterElement::new_checked(mr, unsafe { lent.slice() })?;
        let (ids, posted) = self
            .queue
            .post_receives(&mut [ReceiveWorkRequest::new(&mut [element])]);
        posted?;
        let id = ids.start;
        Ok(LentWork {
            work: self.handle(id),
            lent,
        })
    }

    /// Posts a send of the first `len` bytes of `buf` (inside `mr`) whose
    /// handle gives `buf` back when the send has completed, for the next
    /// message to be written into it.
    ///
    /// # Errors
    /// `len` longer than `buf`, `buf` not inside `mr` (nothing is posted),
    /// and as [`post_send`](Self::post_send).
    pub fn post_send_lent(
        &mut self,
        mr: &'scope MemoryRegion,
        buf: &'scope mut [u8],
        len: usize,
    ) -> Result<LentWork<'scope>> {
        if len > buf.len() {
            return Err(
                crate::memory::element::ScatterGatherElementError::OutOfBounds { len: buf.len() }
                    .into(),
            );
        }
        let lent = Lending::of(buf);
        // SAFETY: as in `post_receive_lent`; the NIC only reads it.
        let payload = unsafe { &lent.slice()[..len] };
        let element = GatherElement::new_checked(mr, payload)?;
        let work = self.post(SendWorkRequest::new(&[element]))?;
        Ok(LentWork { work, lent })
    }
}

/// The address of a buffer lent for `'scope`, the only access to it while
/// it is lent.
struct Lending<'scope> {
    ptr: NonNull<u8>,
    len: usize,
    _buf: PhantomData<&'scope mut [u8]>,
}

// SAFETY: a `Lending` stands for a `&'scope mut [u8]`, which is `Send` and
// `Sync`; it hands the slice out only to its owner.
unsafe impl Send for Lending<'_> {}
// SAFETY: as above; `&Lending` gives no access to the bytes.
unsafe impl Sync for Lending<'_> {}

impl<'scope> Lending<'scope> {
    /// Takes `buf`'s address; `buf` is not used again (every later access
    /// derives from the address).
    fn of(buf: &'scope mut [u8]) -> Self {
        Lending {
            len: buf.len(),
            ptr: NonNull::from(buf).cast(),
            _buf: PhantomData,
        }
    }

    /// The buffer again.
    ///
    /// # Safety
    /// Nothing else may reach the memory while the slice is used: neither
    /// the NIC (the operation was not posted yet, or its completion was
    /// reaped) nor another slice of this `Lending`.
    unsafe fn slice(&self) -> &'scope mut [u8] {
        #[cfg(feature = "fault-injection")]
        crate::fault::released(self.ptr.as_ptr(), self.len, "a lent buffer comes back");
        // SAFETY: the address and length are those of a `&'scope mut
        // [u8]` given up to this value; exclusivity is the caller's.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// A scoped operation over a lent buffer, which gives the buffer back when
/// it completes. If it is dropped or forgotten, the scope waits for the
/// operation when it ends, and the buffer stays lent until then.
///
/// # Why giving the buffer back is sound
///
/// The buffer is lent as `&'scope mut [u8]`: exclusive for the rest of the
/// scope, so nothing else reaches it, and the scope's rules apply as to any
/// of its operations (a forgotten or dropped handle is waited for when the
/// scope ends, and the buffer is then simply never given back). The
/// handle keeps only the buffer's address, not a reference, while the NIC
/// may write or read it; it rebuilds the `&'scope mut [u8]` from that
/// address only once the operation's completion was reaped — its success
/// taken by [`LentWork::wait`] or [`LentWork::poll`] — when the NIC is done
/// with the memory. A failed operation gives nothing back: its buffer stays
/// lent until the scope ends.
#[must_use = "an unpolled operation is waited for at the end of the scope; wait for it to get its buffer back"]
pub struct LentWork<'scope> {
    work: ScopedPendingWork<'scope>,
    lent: Lending<'scope>,
}

impl<'scope> LentWork<'scope> {
    /// The work request id.
    pub fn wr_id(&self) -> u64 {
        self.work.wr_id()
    }

    /// Blocks until the operation completes (bounded by the channel's
    /// timeout, as [`ScopedPendingWork::wait`]); on success, its
    /// completion and the buffer, back.
    ///
    /// # Errors
    /// The operation's failure, as [`ScopedPendingWork::wait`]; the
    /// buffer then stays lent until the scope ends.
    pub fn wait(self) -> Result<(WorkSuccess, &'scope mut [u8])> {
        let done = self.work.wait()?;
        // SAFETY: the operation's success was taken, so its completion was
        // reaped and the NIC is done with the buffer; `self` is consumed,
        // so this is the one slice made from it.
        Ok((done, unsafe { self.lent.slice() }))
    }

    /// Polls once without blocking: the outcome if the operation completed
    /// (with the buffer, on success), otherwise the handle back.
    pub fn poll(self) -> Result<Result<(WorkSuccess, &'scope mut [u8])>, Self> {
        match self.work.poll() {
            Ok(outcome) => Ok(outcome.map(|done| {
                // SAFETY: as in `wait`.
                (done, unsafe { self.lent.slice() })
            })),
            Err(work) => Err(LentWork {
                work,
                lent: self.lent,
            }),
        }
    }
}

impl fmt::Debug for LentWork<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LentWork")
            .field("wr_id", &self.work.wr_id())
            .field("len", &self.lent.len)
            .finish()
    }
}
