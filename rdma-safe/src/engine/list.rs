//! The request lists of batched verb calls, built on the stack: a batch of
//! up to [`STACK_LIST`] requests costs the allocator nothing. And what a
//! receive list is built from ([`Receives`]).

use crate::error::Result;
use crate::memory::element::scatter_sges;
use crate::pool::PoolBuf;
use crate::work::build::Limits;
use crate::work::ReceiveWorkRequest;
use rdma_core::{RecvRequest, Sge};
use std::convert::Infallible;
use std::mem::{needs_drop, MaybeUninit};

/// Receives a call of owning receives posts, at most.
pub(crate) const RECEIVES_PER_CALL: usize = STACK_LIST;
/// Receives a call posts from short arrays: its SGEs here, and the
/// buffers `SharedChannel::start_receives` gathers for it.
pub(crate) const SHORT_RECEIVES: usize = 8;

/// Requests a batch holds on the stack; a longer batch is built on the
/// heap. 32 covers the data paths' batches (perf's are at most 8, owned
/// batches at most 32) in 4 KiB of stack for send requests.
pub(crate) const STACK_LIST: usize = 32;

/// Builds the requests `items` yields into one list and lends it to
/// `post`: on the stack when there are at most [`STACK_LIST`] of them, on
/// the heap otherwise.
///
/// For plain requests only (no drop glue, checked at compile time): the
/// stack list is never dropped item by item.
#[inline(always)]
pub(crate) fn with_list<T, R>(
    items: impl ExactSizeIterator<Item = T>,
    post: impl FnOnce(&mut [T]) -> R,
) -> R {
    let written = fill_list(
        items,
        |item, slot| {
            slot.write(item);
            Ok::<(), Infallible>(())
        },
        |list| Ok(post(list)),
    );
    match written {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// As [`with_list`], with `write` putting each of `items`' requests
/// straight into its place in the list (or failing, which stops the
/// building: `post` is not called). Writing in place spares the data path
/// a move of every (128-byte) send request through a `Result` and into
/// the list.
#[inline(always)]
pub(crate) fn fill_list<I, T, R, E>(
    items: I,
    mut write: impl FnMut(I::Item, &mut MaybeUninit<T>) -> Result<(), E>,
    post: impl FnOnce(&mut [T]) -> Result<R, E>,
) -> Result<R, E>
where
    I: ExactSizeIterator,
{
    const { assert!(!needs_drop::<T>(), "stack lists hold plain requests") };
    let n = items.len();
    if n > STACK_LIST {
        let mut list: Vec<T> = Vec::with_capacity(n);
        let mut len = 0;
        for (slot, item) in list.spare_capacity_mut().iter_mut().zip(items) {
            write(item, slot)?;
            len += 1;
        }
        // SAFETY: the first `len` slots of the spare capacity were written
        // just above, in order (`len` counts the writes, whatever the
        // iterator's stated length), and `len` is at most the capacity.
        unsafe { list.set_len(len) };
        return post(&mut list);
    }
    let mut slots = [const { MaybeUninit::<T>::uninit() }; STACK_LIST];
    let mut len = 0;
    for (slot, item) in slots.iter_mut().zip(items) {
        write(item, slot)?;
        len += 1;
    }
    // SAFETY: the first `len` slots were written just above (in order, and
    // `len` counts the writes), `MaybeUninit<T>` has `T`'s layout, and the
    // slice borrows `slots` mutably for no longer than `slots` lives.
    let list = unsafe { std::slice::from_raw_parts_mut(slots.as_mut_ptr().cast::<T>(), len) };
    post(list)
}

/// The receives of one [`WorkQueue::post_receives`] call: requests over
/// borrowed scatter lists (one, as an array of one, or a batch), or pool
/// buffers, each received into whole.
///
/// # Safety
/// Every SGE of the list [`lend`](Self::lend) lends names memory that
/// stays allocated and registered, and that nothing else reads or writes,
/// until the engine has seen the request's completion or settled its
/// failed post: either a scatter element's, exclusively borrowed for at
/// least that long, or the whole chunk of the pool buffer in the entry of
/// `owned` at the request's index, which the engine moves into the
/// request's slot under the lock of the post.
///
/// [`WorkQueue::post_receives`]: super::WorkQueue::post_receives
pub(crate) unsafe trait Receives {
    /// How many receives are posted.
    fn len(&self) -> usize;

    /// Checks each receive against `limits`, before anything is posted.
    ///
    /// # Errors
    /// A receive with more SGEs than the queue pair takes, or of a region
    /// in another protection domain.
    fn check(&mut self, limits: &Limits) -> Result<()>;

    /// Builds the verb's list (ids to be set) and lends it to `post`, with
    /// the pool buffers the receives fill, in the same order (empty for
    /// borrowed memory).
    fn lend<R>(
        &mut self,
        post: impl FnOnce(&mut [RecvRequest<'_>], &mut [Option<PoolBuf>]) -> R,
    ) -> R;
}

// SAFETY: every SGE comes from a `ScatterElement`, a live `&mut [u8]` of a
// registration whose range stays on its pinned pages, exclusively borrowed
// by the façade until the request's completion is claimed (a blocking call
// waits for it, a scope drains it before returning, `PendingWork` waits on
// drop) or its failed post is settled.
unsafe impl Receives for [ReceiveWorkRequest<'_, '_>] {
    #[inline]
    fn len(&self) -> usize {
        <[_]>::len(self)
    }

    #[inline]
    fn check(&mut self, limits: &Limits) -> Result<()> {
        for wr in self.iter_mut() {
            limits.check_receive_sges(scatter_sges(wr.scatter))?;
        }
        Ok(())
    }

    #[inline]
    fn lend<R>(
        &mut self,
        post: impl FnOnce(&mut [RecvRequest<'_>], &mut [Option<PoolBuf>]) -> R,
    ) -> R {
        let reqs = self
            .iter_mut()
            .map(|wr| RecvRequest::new(0, scatter_sges(wr.scatter)));
        with_list(reqs, |reqs| post(reqs, &mut []))
    }
}

// SAFETY: as for a slice of them: the array is one.
unsafe impl<const N: usize> Receives for [ReceiveWorkRequest<'_, '_>; N] {
    #[inline]
    fn len(&self) -> usize {
        N
    }

    #[inline]
    fn check(&mut self, limits: &Limits) -> Result<()> {
        self.as_mut_slice().check(limits)
    }

    /// The list is an array of `N` (a single receive: of one), not a
    /// stack list.
    #[inline]
    fn lend<R>(
        &mut self,
        post: impl FnOnce(&mut [RecvRequest<'_>], &mut [Option<PoolBuf>]) -> R,
    ) -> R {
        let mut reqs = self
            .each_mut()
            .map(|wr| RecvRequest::new(0, scatter_sges(wr.scatter)));
        post(&mut reqs, &mut [])
    }
}

// SAFETY: every SGE names the whole chunk of the `PoolBuf` of this slice at
// its request's index (`lend` gives the engine the same slice, in order):
// the buffer's only handle, which keeps its slab allocated and registered,
// and which the engine moves into the request's slot under the lock of the
// post, or keeps out of anyone's reach until the failed post is settled.
unsafe impl Receives for [Option<PoolBuf>] {
    /// At most [`RECEIVES_PER_CALL`] (every entry `Some`); the others are
    /// left in place.
    #[inline]
    fn len(&self) -> usize {
        <[_]>::len(self).min(RECEIVES_PER_CALL)
    }

    #[inline]
    fn check(&mut self, _: &Limits) -> Result<()> {
        debug_assert!(self.iter().all(Option::is_some));
        Ok(())
    }

    fn lend<R>(
        &mut self,
        post: impl FnOnce(&mut [RecvRequest<'_>], &mut [Option<PoolBuf>]) -> R,
    ) -> R {
        let n = Receives::len(self);
        let bufs = &mut self[..n];
        // A ring re-posted a few receives at a time zeroes a short SGE
        // array, not 32 entries.
        if n <= SHORT_RECEIVES {
            lend_owned::<SHORT_RECEIVES, R>(bufs, post)
        } else {
            lend_owned::<RECEIVES_PER_CALL, R>(bufs, post)
        }
    }
}

/// [`Receives::lend`] of at most `N` pool buffers, their SGEs in an array
/// of `N`.
fn lend_owned<const N: usize, R>(
    bufs: &mut [Option<PoolBuf>],
    post: impl FnOnce(&mut [RecvRequest<'_>], &mut [Option<PoolBuf>]) -> R,
) -> R {
    let mut sges = [Sge::default(); N];
    for (sge, buf) in sges.iter_mut().zip(bufs.iter().flatten()) {
        let (addr, len, lkey) = buf.sge_full();
        *sge = Sge::new(addr, len, lkey);
    }
    let reqs = sges[..bufs.len()]
        .iter()
        .map(|sge| RecvRequest::new(0, std::slice::from_ref(sge)));
    with_list(reqs, |reqs| post(reqs, bufs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fill_list` over fallible items: each is written as it comes, the
    /// first error stops the building.
    fn try_list<R, E>(
        items: impl ExactSizeIterator<Item = Result<usize, E>>,
        post: impl FnOnce(&mut [usize]) -> Result<R, E>,
    ) -> Result<R, E> {
        fill_list(
            items,
            |item, slot| {
                slot.write(item?);
                Ok(())
            },
            post,
        )
    }

    #[test]
    fn short_and_long_lists_hold_every_item_in_order() {
        for n in [0, 1, STACK_LIST, STACK_LIST + 1, 3 * STACK_LIST] {
            let got = try_list((0..n).map(Ok::<_, ()>), |list| Ok(list.to_vec()));
            assert_eq!(got, Ok((0..n).collect::<Vec<_>>()), "{n} items");
            let got = with_list(0..n, |list| list.to_vec());
            assert_eq!(got, (0..n).collect::<Vec<_>>(), "{n} items, infallible");
        }
    }

    #[test]
    fn the_first_error_stops_the_building() {
        for n in [4, STACK_LIST + 4] {
            let items = (0..n).map(|k| if k == 2 { Err(k) } else { Ok(k) });
            let got = try_list(items, |_| -> Result<(), usize> { panic!("posted") });
            assert_eq!(got, Err(2));
        }
    }
}
